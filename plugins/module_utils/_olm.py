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


# -- moving an operator forward through its Subscription (olm_subscription_upgrade) --------------------------------
#
# OLM upgrades an operator when its Subscription's channel has a newer head than the installed CSV: it resolves the
# head (``status.currentCSV``), creates an InstallPlan for it (``status.installPlanRef``) and, under Manual approval,
# waits for ``spec.approved: true``; the plan then installs the CSV, which reaches ``Succeeded`` or ``Failed``
# (operator-framework/api operators/v1alpha1 types; OLM docs "Subscriptions" and "Approving an InstallPlan"). A
# channel that cannot be resolved sets the condition ``ResolutionFailed`` with OLM's reason in its message.

DEFAULT_PLAN_ADVICE = "OLM installs the channel's head; pin the matrix to it or use a catalog that ends at the target"


def csv_version(csv: str) -> str:
    """sriov-network-operator.v4.17.0-202411 -> 4.17.0-202411 (the text after the last ``.v``; "" for none)."""
    return str(csv or "").rpartition(".v")[2] if csv else ""


def target_matches(csv: str, *, target_csv: str = "", version: str = "", package: str = "") -> bool:
    """Whether ``csv`` is the target: exactly ``target_csv``, or (``version``) a CSV of ``package`` (any when empty)
    whose version is ``version`` or continues it after a dot, dash or plus (4.17 matches 4.17.0-202411, not 4.170)."""
    csv = str(csv or "")
    if not csv:
        return False
    if target_csv:
        return csv == target_csv
    if package and not csv.startswith(f"{package}.v"):
        return False
    found, wanted = csv_version(csv), str(version or "").lstrip("v")
    return bool(wanted) and (found == wanted or (found.startswith(wanted) and found[len(wanted)] in ".-+"))


def resolution_failure(subscription: Mapping[str, Any]) -> str:
    """The messages of the Subscription's ``ResolutionFailed`` conditions that hold (joined by "; "), or ""."""
    conditions = (subscription.get("status") or {}).get("conditions") or ()
    return "; ".join(
        str(c.get("message") or c.get("reason") or "ResolutionFailed")
        for c in conditions
        if isinstance(c, Mapping) and c.get("type") == "ResolutionFailed" and str(c.get("status")) == "True"
    )


def subscription_view(subscription: Mapping[str, Any]) -> Dict[str, str]:
    """What the module reads of a Subscription: channel, installedCSV, currentCSV, state and the InstallPlan's name."""
    spec, status = subscription.get("spec") or {}, subscription.get("status") or {}
    return {
        "channel": str(spec.get("channel") or ""),
        "installed": str(status.get("installedCSV") or ""),
        "current": str(status.get("currentCSV") or ""),
        "state": str(status.get("state") or ""),
        "install_plan": str((status.get("installPlanRef") or {}).get("name") or ""),
    }


def plan_state(
    subscription: Mapping[str, Any], *, installed_before: str, matches: Any, settled_without_target: bool = False
) -> str:
    """Where OLM is with the Subscription, for the wait after a channel switch (``matches(csv)`` tells the target):

    - ``installed``: the installed CSV is the target;
    - ``planned``: OLM plans the target and references its InstallPlan (to approve);
    - ``other``: OLM settled on something else: resolution failed, or it plans (or installed) another CSV than the
      one installed before;
    - ``""``: not yet.

    ``settled_without_target``: no target was given, so whatever OLM plans now (or nothing) is taken as is.
    """
    view = subscription_view(subscription)
    if view["installed"] and matches(view["installed"]):
        return "installed"
    if view["current"] and matches(view["current"]) and view["install_plan"]:
        return "planned"
    if resolution_failure(subscription):
        return "other"
    if view["install_plan"] and view["current"] not in ("", installed_before):
        return "planned" if settled_without_target else "other"
    if settled_without_target:
        return "installed" if view["current"] in ("", view["installed"]) else ""
    return ""


def plan_error(
    subscription: Mapping[str, Any], *, name: str, namespace: str, channel: str, target: str, advice: str
) -> str:
    """Why the upgrade cannot go on: OLM plans another CSV than the target, naming the Subscription, the channel,
    what OLM plans and its ResolutionFailed message."""
    view = subscription_view(subscription)
    failure = resolution_failure(subscription)
    says = f" (ResolutionFailed: {failure})" if failure else ""
    text = (
        f"OLM did not plan {target} from channel {channel or view['channel'] or '?'} of Subscription "
        f"{namespace}/{name}: it plans {view['current'] or 'nothing'}{says}"
    )
    return f"{text}. {advice}" if advice else text


def upgrade_decision(
    subscription: Mapping[str, Any], *, channel: str, matches: Any, has_target: bool
) -> Dict[str, Any]:
    """What the first read of the Subscription asks for: ``switch`` the channel (a channel is asked and differs),
    ``approve`` an InstallPlan (the installed CSV is not the target, or without a target OLM plans another CSV than
    the installed one) and ``done`` (nothing to write: the installed CSV is the target)."""
    view = subscription_view(subscription)
    switch = bool(channel) and channel != view["channel"]
    if has_target:
        done = bool(view["installed"]) and matches(view["installed"])
    else:
        done = not switch and view["current"] in ("", view["installed"])
    return {"switch": switch and not done, "approve": not done, "done": done, "view": view}


def csv_outcome(csv: Optional[Mapping[str, Any]]) -> str:
    """``Succeeded`` or ``Failed`` once the CSV ended its install, else "" (not there yet, or still installing)."""
    phase = str(((csv or {}).get("status") or {}).get("phase") or "")
    return phase if phase in ("Succeeded", "Failed") else ""


def subscription_diff(before: Mapping[str, str], *, channel: str, installed: str) -> Dict[str, Dict[str, str]]:
    """Before and after of the Subscription's channel and installed CSV, for diff mode."""
    return {
        "before": {"channel": before["channel"], "installedCSV": before["installed"]},
        "after": {"channel": channel or before["channel"], "installedCSV": installed},
    }
