# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""OLM: what a catalog serves, and the steps that take an operator back to an older version (collection-internal,
pure: API objects in, decisions out).

OLM never downgrades an operator through its Subscription: a channel whose head
is older than the installed CSV fails resolution (operator-lifecycle-manager
issue 1177: OLM is designed to move forward only). The supported way back is
an uninstall and an install of the older version (OLM docs "Uninstall your
operator"; OpenShift docs "Deleting Operators from a cluster" and "Installing a
specific version of an Operator"):

1. delete the Subscription first: while it exists with Automatic approval, OLM
   installs the newest CSV again as soon as the CSV is gone;
2. delete the CSV: OLM's garbage collection removes what the CSV owns (the
   operator Deployment, its RBAC); by design the CRDs and the custom resources
   (the ClusterPolicy) stay, so the operands keep running;
3. create a Subscription with ``startingCSV`` set to the older CSV on a channel
   of the catalog that still carries that bundle, with ``installPlanApproval:
   Manual`` so OLM does not move on to the channel's head by itself;
4. approve exactly the InstallPlan for that CSV; the CSV must reach
   ``Succeeded``.

Each step is decided from what the cluster shows (``reinstall_steps``), so a
run killed between two steps is continued by the next run: the Subscription
that was deleted is kept in a ConfigMap before anything is removed.

The catalog is read from the package server's ``PackageManifest``
(``packages.operators.coreos.com/v1``): per channel its ``currentCSV`` and its
``entries`` (every bundle name and version the channel carries).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
REINSTALLED_FROM = "gpufleet.io/reinstalled-from"


def csv_name(package: str, version: str) -> str:
    """gpu-operator-certified, v24.9.0 -> gpu-operator-certified.v24.9.0 (the name OLM bundles use)."""
    return f"{package}.v{str(version).lstrip('v')}"


def catalog_channels(manifests: Sequence[Mapping[str, Any]], *, package: str, csv: str) -> List[str]:
    """The channels of the package's PackageManifest(s) that carry the bundle ``csv`` (as an entry or as the head)."""
    found: List[str] = []
    for manifest in manifests or ():
        status = manifest.get("status") or {}
        if status.get("packageName") != package:
            continue
        for channel in status.get("channels") or ():
            entries = {str(entry.get("name")) for entry in channel.get("entries") or () if isinstance(entry, Mapping)}
            if (csv in entries or channel.get("currentCSV") == csv) and channel.get("name") not in found:
                found.append(str(channel.get("name")))
    return found


def catalog_summary(manifests: Sequence[Mapping[str, Any]], *, package: str) -> str:
    """What the catalog serves of the package, for an error message: ``v24.9: 24.9.1; stable: 25.3.0, 24.9.1``."""
    parts = []
    for manifest in manifests or ():
        status = manifest.get("status") or {}
        if status.get("packageName") != package:
            continue
        for channel in status.get("channels") or ():
            versions = [str(entry.get("version") or entry.get("name")) for entry in channel.get("entries") or ()]
            parts.append(f"{channel.get('name')}: {', '.join(versions) or channel.get('currentCSV')}")
    return "; ".join(parts) or "nothing"


def choose_channel(channels: Sequence[str], *, preferred: str, version: str, current: str) -> str:
    """The channel to subscribe on: the one asked for, else the release line's ``v<major>.<minor>`` (NVIDIA
    publishes one per release), else the Subscription's own, else the first that carries the bundle."""
    line = "v" + ".".join(str(version).lstrip("v").split(".")[:2])
    for candidate in (preferred, line, current):
        if candidate and candidate in channels:
            return candidate
    return channels[0] if channels else ""


def saved_subscription(subscription: Mapping[str, Any]) -> Dict[str, Any]:
    """What an uninstall keeps of a Subscription to create it again: name, labels, annotations and spec (its
    ``config``, ``source``...), without server-managed fields and status."""
    meta = subscription.get("metadata") or {}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    kept: Dict[str, Any] = {"name": meta.get("name"), "namespace": meta.get("namespace")}
    if meta.get("labels"):
        kept["labels"] = dict(meta["labels"])
    if annotations:
        kept["annotations"] = annotations
    return {
        "apiVersion": subscription.get("apiVersion") or "operators.coreos.com/v1alpha1",
        "kind": "Subscription",
        "metadata": kept,
        "spec": dict(subscription.get("spec") or {}),
        "installedCSV": str((subscription.get("status") or {}).get("installedCSV") or ""),
    }


def new_subscription(original: Mapping[str, Any], *, channel: str, target_csv: str, from_csv: str) -> Dict[str, Any]:
    """The Subscription that installs ``target_csv``: the original's spec on ``channel`` with ``startingCSV`` and
    Manual approval (so OLM installs that CSV and nothing newer without an approval)."""
    meta = original.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    annotations[REINSTALLED_FROM] = from_csv
    metadata: Dict[str, Any] = {
        "name": meta.get("name"),
        "namespace": meta.get("namespace"),
        "annotations": annotations,
    }
    if meta.get("labels"):
        metadata["labels"] = dict(meta["labels"])
    spec = dict(original.get("spec") or {})
    spec.update({"channel": channel, "startingCSV": target_csv, "installPlanApproval": "Manual"})
    return {"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription", "metadata": metadata, "spec": spec}


def _saved(saved: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The ConfigMap data an earlier run saved (``subscription`` as JSON), or {}."""
    if not saved or not saved.get("subscription"):
        return {}
    try:
        original = json.loads(saved["subscription"])
    except (TypeError, ValueError):
        return {}
    return original if isinstance(original, dict) else {}


def reinstall_steps(
    *,
    subscription: Optional[Mapping[str, Any]],
    saved: Optional[Mapping[str, Any]],
    csvs: Sequence[Mapping[str, Any]],
    manifests: Sequence[Mapping[str, Any]],
    package: str,
    target_version: str,
    preferred_channel: str = "",
) -> Dict[str, Any]:
    """What is left to do to have ``package`` at ``target_version`` again, from the cluster as it is.

    ``subscription`` is the Subscription now (None when an earlier run deleted it), ``saved`` the data of the
    ConfigMap an earlier run kept it in (None or {} when none), ``csvs`` the namespace's CSVs, ``manifests`` the
    catalog's PackageManifests. Returns ``original`` (the Subscription to create again from), ``from_csv``,
    ``target_csv``, ``channel`` and ``channels`` (those carrying the bundle), ``catalog`` (what the catalog serves,
    for messages), ``delete_subscription``, ``delete_csvs``, ``create_subscription``, ``subscription`` (the one to
    create) and ``error`` (why it cannot be done; empty when it can).
    """
    earlier = _saved(saved)
    current = dict(subscription or {})
    target_csv = csv_name(package, target_version)
    installed = str((current.get("status") or {}).get("installedCSV") or "")
    # The Subscription to delete is the one that installed another CSV; the one this reinstall created has
    # installed nothing yet, or the target.
    stale = bool(current) and installed not in ("", target_csv)
    original = earlier or (saved_subscription(current) if current else {})
    from_csv = str((saved or {}).get("from_csv") or original.get("installedCSV") or installed)
    channels = catalog_channels(manifests, package=package, csv=target_csv)
    spec = original.get("spec") or {}
    channel = choose_channel(
        channels, preferred=preferred_channel, version=target_version, current=str(spec.get("channel") or "")
    )
    delete_csvs = sorted(
        str((csv.get("metadata") or {}).get("name"))
        for csv in csvs or ()
        if str((csv.get("metadata") or {}).get("name") or "").startswith(f"{package}.")
        and (csv.get("metadata") or {}).get("name") != target_csv
    )
    error = ""
    if not original:
        error = (
            f"there is no Subscription of {package} to reinstall from (none in the namespace and no saved one): "
            "subscribe to the operator again by hand"
        )
    elif not channels and installed != target_csv:
        source = f"{spec.get('source') or '?'} ({spec.get('sourceNamespace') or '?'})"
        error = (
            f"the catalog {source} no longer carries the bundle {target_csv}, so OLM cannot install it again "
            f"(it serves {catalog_summary(manifests, package=package)}): add a CatalogSource whose index still "
            f"has {target_csv}, or go back to a version the catalog carries"
        )
    create = not current or stale
    return {
        "original": original,
        "from_csv": from_csv,
        "target_csv": target_csv,
        "channel": channel,
        "channels": channels,
        "catalog": catalog_summary(manifests, package=package),
        "delete_subscription": stale,
        "delete_csvs": delete_csvs,
        "create_subscription": create,
        "subscription": new_subscription(original, channel=channel, target_csv=target_csv, from_csv=from_csv)
        if original
        else {},
        "error": error,
    }
