# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The GPU Operator's operands the matrix names: what to write and what to verify (collection-internal, pure).

The matrix's ``dcgm``, ``dcgm_hostengine``, ``device_plugin`` and
``container_toolkit`` are the ClusterPolicy's ``dcgmExporter``, ``dcgm`` (the
standalone host engine, which runs only when enabled), ``devicePlugin`` and
``toolkit`` images (the same mapping the drift audit reads, ``_matrix_drift``). The operator takes an
operand's image from the ClusterPolicy when the policy names its repository
and version, else from its own environment (``DCGM_EXPORTER_IMAGE``,
``DEVICE_PLUGIN_IMAGE``, ``CONTAINER_TOOLKIT_IMAGE``: the OLM bundle's
defaults); NVIDIA/gpu-operator api/nvidia/v1/clusterpolicy_types.go
``imagePath``. So:

* a pinned operand (the Helm chart renders every one pinned) gets the
  matrix's version, keeping the OS suffix of the tag it runs
  (``v0.17.0-ubi8`` -> ``v0.17.1-ubi8``);
* an unpinned one follows the operator release; it is only verified.

GPU feature discovery ships in the device plugin's image since v0.15, and the
chart gives it the device plugin's tag: a pinned ``gfd`` on that image follows
``device_plugin``.

The driver and its manager (``k8s-driver-manager``, the driver pod's init
container) follow the same rule, and OLM's ClusterPolicy (the bundle's
alm-examples) names neither, so every OLM release of the operator brings its
own driver and driver manager: a new driver DaemonSet template, which the
upgrade controller rolls to every node like a driver upgrade, canary or not.
``release_pins`` pins the images that run before the operator moves, so its
release restarts no driver.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import (
    driver_version_of_image,
    split_reference,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_drift import (
    CLUSTERPOLICY_FIELDS,
    OPERAND_DAEMONSETS,
    image_tag,
    operand_enabled,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import (
    _OS_SUFFIX,
    same_version,
    try_parse,
)

_GFD = ("gfd", "gpu-feature-discovery")
_IMAGE_FIELDS = ("repository", "image", "version")
# What an operator release brings where the driver's owner names no image: (what, container of the driver pod,
# whether an init container, where under the owner's driver section).
_RELEASE_IMAGES = (
    ("driver", "nvidia-driver-ctr", False, ()),
    ("driver manager", "k8s-driver-manager", True, ("manager",)),
)


def _os_suffix(component: str, version: str) -> str:
    parsed = try_parse(component, version)
    suffix = str((parsed.detail or {}).get("suffix") or "") if parsed is not None else ""
    return suffix if suffix and _OS_SUFFIX.match(suffix) else ""


def pinned_version(component: str, *, wanted: str, running: str) -> str:
    """The tag to pin: the matrix's version with the OS suffix of the one running (unless it names its own)."""
    if _os_suffix(component, wanted):
        return wanted
    suffix = _os_suffix(component, running)
    return f"{wanted}-{suffix}" if suffix else wanted


def operand_plan(policy: Mapping[str, Any], target: Mapping[str, Any]) -> Dict[str, Any]:
    """The merge patch that moves the ClusterPolicy's pinned operands to ``target``, and what to verify.

    Returns ``{"patch": {...} or {}, "operands": [{component, field, daemonset, image, version, pinned,
    changes}]}``; ``version`` is the tag the operand's DaemonSet must run ("" when the operator chooses it).
    """
    spec = policy.get("spec") or {}
    patch: Dict[str, Any] = {}
    operands: List[Dict[str, Any]] = []
    for component, field in CLUSTERPOLICY_FIELDS.items():
        wanted = str(target.get(component) or "").strip()
        section = spec.get(field) or {}
        if not wanted or not operand_enabled(spec, field):
            continue
        running = str(section.get("version") or "")
        # A digest pins an exact image (mirrored registries): not ours to replace by a tag.
        pinned = bool(running and section.get("repository")) and not running.startswith("sha256:")
        version = pinned_version(component, wanted=wanted, running=running) if pinned else ""
        changes = pinned and version != running
        if changes:
            patch[field] = {"version": version}
        daemonset, image = OPERAND_DAEMONSETS[component]
        operands.append(
            {
                "component": component,
                "field": field,
                "daemonset": daemonset,
                "image": image,
                "wanted": wanted,
                "version": version,
                "pinned": pinned,
                "changes": changes,
            }
        )
        gfd = spec.get(_GFD[0]) or {}
        if component == "device_plugin" and pinned and gfd.get("version") and gfd.get("image") == image:
            gfd_version = pinned_version(component, wanted=wanted, running=str(gfd["version"]))
            if gfd_version != gfd["version"]:
                patch[_GFD[0]] = {"version": gfd_version}
            operands.append(
                {
                    "component": component,
                    "field": _GFD[0],
                    "daemonset": _GFD[1],
                    "image": image,
                    "wanted": wanted,
                    "version": gfd_version,
                    "pinned": True,
                    "changes": gfd_version != gfd["version"],
                }
            )
    return {"patch": {"spec": patch} if patch else {}, "operands": operands}


def operand_rollout(operand: Mapping[str, Any], daemonset: Mapping[str, Any] | None) -> str:
    """Why the operand's DaemonSet does not run the wanted version yet, or "" once it does, everywhere."""
    name = operand["daemonset"]
    if not daemonset:
        return f"DaemonSet {name} not found"
    meta, status = daemonset.get("metadata") or {}, daemonset.get("status") or {}
    containers = ((daemonset.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []
    images = [str(c.get("image") or "") for c in containers if operand["image"] in str(c.get("image") or "")]
    tag = image_tag(images[0]) if images else None
    if operand["version"] and tag != operand["version"]:
        return f"DaemonSet {name} runs {tag or 'no tagged image'}, not {operand['version']}"
    if not operand["version"] and tag and not same_version(operand["component"], tag, operand["wanted"]):
        return (
            f"DaemonSet {name} runs {tag} (the operator release's default; the ClusterPolicy does not pin it), "
            f"not {operand['wanted']}: pin it in the ClusterPolicy or correct the matrix"
        )
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return f"DaemonSet {name}: the controller has not seen its latest change"
    desired = int(status.get("desiredNumberScheduled") or 0)
    updated = int(status.get("updatedNumberScheduled") or 0)
    available = int(status.get("numberAvailable") or 0)
    if updated < desired or available < desired:
        return f"DaemonSet {name}: {updated} of {desired} pods updated, {available} available"
    return ""


def _dig(obj: Mapping[str, Any], path: Tuple[str, ...]) -> Mapping[str, Any]:
    for key in path:
        obj = obj.get(key) or {}
    return obj


def _owned_images(
    owner: Mapping[str, Any], daemonsets: Sequence[Mapping[str, Any]], container: str, *, init: bool
) -> List[str]:
    """The images of ``container`` in the templates of the DaemonSets ``owner`` controls (ownerReferences uid)."""
    uid = (owner.get("metadata") or {}).get("uid")
    images = set()
    for daemonset in daemonsets:
        refs = (daemonset.get("metadata") or {}).get("ownerReferences") or []
        if not uid or not any(ref.get("uid") == uid for ref in refs):
            continue
        template = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
        for found in template.get("initContainers" if init else "containers") or []:
            if found.get("name") == container and found.get("image"):
                images.add(str(found["image"]))
    return sorted(images)


def _driver_pin(image: str) -> Dict[str, str]:
    """The driver fields that render ``image`` again. A digest is taken whole (the operator appends nothing to it);
    a tag carries the OS suffix the operator appends (``<version>-<os>``), so it is pinned as repository, image and
    version, which the operator renders with the suffix of each node pool. {} when the tag names no driver version."""
    if "sha256:" in image:
        return {"image": image}
    repository, name = split_reference(image)
    version = driver_version_of_image(image)
    if not repository or not name or not version:
        return {}
    return {"repository": repository, "image": name, "version": version}


def release_pins(
    policy: Mapping[str, Any],
    nvidia_drivers: Sequence[Mapping[str, Any]],
    daemonsets: Sequence[Mapping[str, Any]],
    *,
    gitops_managed: Sequence[str] = (),
) -> Dict[str, Any]:
    """The driver images the next operator release would replace, and the patches that keep what runs.

    The driver's owners are the ClusterPolicy, or its NVIDIADrivers once ``driver.useNvidiaDriverCRD`` is set. A
    driver (or its ``manager``) that names no repository, image or version runs the operator's DRIVER_IMAGE (or
    DRIVER_MANAGER_IMAGE) (``imagePath``); pinning the image the owner's DaemonSets run leaves every template as it
    is. Returns ``{"pins": [{kind, name, images: [{what, image}], patch}], "gitops_changes": [{kind, name, patch}],
    "problems": [str]}``: the pins of objects Argo CD writes (``gitops_managed``, ``Kind/name``) go to Git instead.
    An owner without DaemonSets (no driver nodes) needs no pin; one whose DaemonSets run two images is in the middle
    of a rollout, and an image that cannot be written back is named (problems).
    """
    driver = _dig(policy, ("spec", "driver"))
    if not policy or driver.get("enabled") is False:
        return {"pins": [], "gitops_changes": [], "problems": []}
    owners: List[Tuple[Mapping[str, Any], str, Tuple[str, ...]]]
    if driver.get("useNvidiaDriverCRD"):
        owners = [(cr, "NVIDIADriver", ("spec",)) for cr in nvidia_drivers]
    else:
        owners = [(policy, "ClusterPolicy", ("spec", "driver"))]
    pins: List[Dict[str, Any]] = []
    in_git: List[Dict[str, Any]] = []
    problems: List[str] = []
    for owner, kind, path in owners:
        name = str((owner.get("metadata") or {}).get("name") or "")
        patch: Dict[str, Any] = {}
        images: List[Dict[str, str]] = []
        for what, container, init, sub in _RELEASE_IMAGES:
            section = _dig(owner, path + sub)
            if any(section.get(key) for key in _IMAGE_FIELDS):
                continue  # the owner names its own: an operator release does not change it
            running = _owned_images(owner, daemonsets, container, init=init)
            if not running:
                continue
            pinned = [_driver_pin(image) if what == "driver" else {"image": image} for image in running]
            if not all(pinned):
                problems.append(
                    f"{kind} {name} names no driver image and runs {', '.join(running)}, which names no driver "
                    "version: set its driver repository, image and version before the operator moves"
                )
                continue
            if any(fields != pinned[0] for fields in pinned):  # one pool per OS tags its own: the same pin
                problems.append(
                    f"the driver DaemonSets of {kind} {name} run {len(running)} {what} images "
                    f"({', '.join(running)}): a driver rollout is under way; let it finish before the operator moves"
                )
                continue
            fields = pinned[0]
            target = patch
            for key in path[1:] + sub:
                target = target.setdefault(key, {})
            target.update(fields)
            images.append({"what": what, "image": running[0]})
        if not patch:
            continue
        patch = {"spec": patch}
        if f"{kind}/{name}" in gitops_managed:
            in_git.append({"kind": kind, "name": name, "patch": patch})
        else:
            pins.append({"kind": kind, "name": name, "images": images, "patch": patch})
    return {"pins": pins, "gitops_changes": in_git, "problems": problems}
