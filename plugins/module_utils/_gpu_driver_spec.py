# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The GPU driver's desired state on a ClusterPolicy or an NVIDIADriver (collection-internal, pure).

What may be written is what the CRD has: ``upgrade_policy`` keys are checked
against the field set of the CRD the cluster serves (read from its
``openAPIV3Schema``), or, when the CRD cannot be read, against the field set
of the upstream CRD this collection was tested with. A real API server prunes
unknown fields of a structural schema silently (``spec.driver.nodeSelector``
is the classic), so an unknown key is refused here, before any write.

Patches are JSON merge patches of the few fields that change; the target
driver is always sent as ``version``, ``repository`` and ``image`` together
because OpenShift's driver toolkit images are resolved from all three.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError

# -- field sets -----------------------------------------------------------------------------

# A field set: name -> FieldSpec. Leaves carry the schema type ("boolean",
# "integer", "string", "int-or-string", "object" for free-form maps).
LEAF_TYPES = ("boolean", "integer", "string", "int-or-string", "object", "array")


@dataclass(frozen=True)
class FieldSpec:
    type: str
    children: Optional[Tuple[Tuple[str, "FieldSpec"], ...]] = None

    def child(self, name: str) -> Optional["FieldSpec"]:
        for key, spec in self.children or ():
            if key == name:
                return spec
        return None

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(key for key, _spec in self.children or ())


def _obj(**children: FieldSpec) -> FieldSpec:
    return FieldSpec(type="object", children=tuple(sorted(children.items())))


_BOOL = FieldSpec("boolean")
_INT = FieldSpec("integer")
_STR = FieldSpec("string")

# spec.driver.upgradePolicy of nvidia.com_clusterpolicies.yaml (NVIDIA/gpu-operator
# deployments/gpu-operator/crds, 2026-08); used only when the served CRD cannot be read.
BUILTIN_UPGRADE_POLICY_FIELDS = _obj(
    autoUpgrade=_BOOL,
    maxParallelUpgrades=_INT,
    maxUnavailable=FieldSpec("int-or-string"),
    waitForCompletion=_obj(podSelector=_STR, timeoutSeconds=_INT),
    podDeletion=_obj(deleteEmptyDir=_BOOL, force=_BOOL, timeoutSeconds=_INT),
    drain=_obj(deleteEmptyDir=_BOOL, enable=_BOOL, force=_BOOL, podSelector=_STR, timeoutSeconds=_INT),
)

# The three fields that name the driver image, on ClusterPolicy spec.driver and on NVIDIADriver spec.
DRIVER_IMAGE_FIELDS = ("version", "repository", "image")

# Upstream chart defaults (deployments/gpu-operator/values.yaml) for fields a stored object may lack.
UPGRADE_POLICY_DEFAULTS: Dict[str, Any] = {"autoUpgrade": False, "maxParallelUpgrades": 1, "maxUnavailable": "25%"}


def fields_from_schema(schema: Mapping[str, Any]) -> FieldSpec:
    """The field set of an openAPIV3Schema node (properties recursively, leaf types kept)."""
    if schema.get("x-kubernetes-int-or-string"):
        return FieldSpec("int-or-string")
    kind = str(schema.get("type") or "object")
    properties = schema.get("properties")
    if kind == "object" and isinstance(properties, Mapping):
        return FieldSpec(
            "object",
            children=tuple(sorted((name, fields_from_schema(sub)) for name, sub in properties.items())),
        )
    return FieldSpec(kind if kind in LEAF_TYPES else "string")


def crd_schema_at(crd: Mapping[str, Any], path: Tuple[str, ...], *, version: Optional[str] = None) -> Optional[Dict]:
    """The openAPIV3Schema node at ``path`` (e.g. ("spec", "driver", "upgradePolicy")) of a CRD object.

    Uses the storage version unless ``version`` names another; None when the
    CRD has no such node.
    """
    versions = ((crd.get("spec") or {}).get("versions")) or []
    chosen = None
    for entry in versions:
        if (version and entry.get("name") == version) or (not version and entry.get("storage")):
            chosen = entry
            break
    if chosen is None and versions:
        chosen = versions[0]
    node = (((chosen or {}).get("schema") or {}).get("openAPIV3Schema")) or None
    for name in path:
        if not isinstance(node, Mapping):
            return None
        node = (node.get("properties") or {}).get(name)
    return dict(node) if isinstance(node, Mapping) else None


# -- validation -----------------------------------------------------------------------------

_PERCENT = re.compile(r"^\d+%$")
_DIGITS = re.compile(r"^\d+$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+){1,3}$")


def normalize_upgrade_policy(
    value: Optional[Mapping[str, Any]],
    *,
    fields: FieldSpec = BUILTIN_UPGRADE_POLICY_FIELDS,
    where: str = "upgrade_policy",
) -> Dict[str, Any]:
    """Check ``upgrade_policy`` against the CRD's fields and types; return it with values normalized.

    Unknown keys, at any depth, are refused naming the full path and the keys
    the CRD has. ``maxUnavailable`` given as a digit string becomes an int:
    the upgrade controller rejects an int-or-string that is a string without
    ``%`` (``GetScaledValueFromIntOrPercent``), while Ansible often hands
    numbers over as strings.
    """
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where} must be a mapping of the CRD's upgradePolicy fields, not {value!r}")
    return _normalize_object(value, fields, where)


def _normalize_object(value: Mapping[str, Any], spec: FieldSpec, where: str) -> Dict[str, Any]:
    unknown = sorted(str(key) for key in value if spec.child(str(key)) is None)
    if unknown:
        raise InvalidInputError(
            f"{where} has no field {', '.join(repr(key) for key in unknown)}: the CRD served by the cluster "
            f"would prune {'it' if len(unknown) == 1 else 'them'} silently. Known fields: {', '.join(spec.names)}"
        )
    normalized: Dict[str, Any] = {}
    for key, item in value.items():
        child = spec.child(str(key))
        if child is None:  # unreachable: unknown keys were refused above
            raise InvalidInputError(f"{where}.{key} is not a field of the CRD")
        normalized[str(key)] = _normalize_value(item, child, f"{where}.{key}")
    return normalized


def _normalize_value(value: Any, spec: FieldSpec, where: str) -> Any:
    if value is None:
        raise InvalidInputError(f"{where} is null; leave the key out to keep the cluster's value")
    if spec.type == "object":
        if not isinstance(value, Mapping):
            raise InvalidInputError(f"{where} must be a mapping, not {value!r}")
        return _normalize_object(value, spec, where) if spec.children is not None else dict(value)
    if spec.type == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no"):
            return value.lower() in ("true", "yes")
        raise InvalidInputError(f"{where} must be true or false, not {value!r}")
    if spec.type == "integer":
        if isinstance(value, bool):
            raise InvalidInputError(f"{where} must be an integer, not {value!r}")
        if isinstance(value, int):
            number = value
        elif isinstance(value, str) and _DIGITS.match(value.strip()):
            number = int(value.strip())
        else:
            raise InvalidInputError(f"{where} must be an integer, not {value!r}")
        if number < 0:
            raise InvalidInputError(f"{where} cannot be negative: {number}")
        return number
    if spec.type == "int-or-string":
        if isinstance(value, bool):
            raise InvalidInputError(f"{where} must be a count or a percent such as '25%', not {value!r}")
        if isinstance(value, int):
            if value < 0:
                raise InvalidInputError(f"{where} cannot be negative: {value}")
            return value
        text = str(value).strip()
        if _DIGITS.match(text):
            return int(text)
        if _PERCENT.match(text):
            return text
        raise InvalidInputError(f"{where} must be a count or a percent such as '25%', not {value!r}")
    if spec.type == "array":
        if not isinstance(value, list):
            raise InvalidInputError(f"{where} must be a list, not {value!r}")
        return list(value)
    if isinstance(value, (dict, list)):
        raise InvalidInputError(f"{where} must be a string, not {value!r}")
    return str(value)


@dataclass(frozen=True)
class DriverTarget:
    """The driver every targeted node should run; ``None`` keeps the object's current value."""

    version: str
    repository: Optional[str] = None
    image: Optional[str] = None

    @classmethod
    def from_params(cls, value: Optional[Mapping[str, Any]]) -> "DriverTarget":
        if not value or not value.get("version"):
            raise InvalidInputError("driver.version is required (the target driver, e.g. 570.124.06)")
        version = str(value["version"]).strip()
        if not _VERSION.match(version):
            raise InvalidInputError(f"driver.version {version!r} is not a driver version such as 570.124.06")
        repository = value.get("repository")
        image = value.get("image")
        return cls(
            version=version,
            repository=str(repository).strip() if repository else None,
            image=str(image).strip() if image else None,
        )

    def fields_for(self, current: Mapping[str, Any]) -> Dict[str, str]:
        """version, repository and image together: given values win, the others are the object's own.

        An object whose ``image`` is a whole reference without a repository (a digest the operator step pinned, or
        kbld's ``path@digest``) gets its repository and image name from that reference: the operator refuses a
        version without both (imagePath: "repository, image and version must all be set")."""
        repository = self.repository if self.repository is not None else current.get("repository")
        image = self.image if self.image is not None else current.get("image")
        if not repository and isinstance(image, str) and "/" in image:
            repository, image = split_reference(image)
        desired = {"version": self.version, "repository": repository, "image": image}
        return {key: str(value) for key, value in desired.items() if value is not None}


def unnamed_driver_image(policy: Mapping[str, Any], patch: Mapping[str, Any]) -> str:
    """Why the ClusterPolicy driver ``patch`` leaves is one the operator refuses to render, or "".

    OLM's ClusterPolicy names no driver repository, image or version (the operator's release decides the driver):
    a version written alone is an invalid image (imagePath: "repository, image and version must all be set"), so the
    driver would not move. The runner refuses such a write before any write of the run.
    """
    driver = (apply_merge_patch(copy.deepcopy(dict(policy)), patch).get("spec") or {}).get("driver") or {}
    if not driver.get("version") or (driver.get("repository") and driver.get("image")):
        return ""
    return (
        "the ClusterPolicy names no driver repository and image (OLM's default ClusterPolicy leaves them to the "
        "operator release), and a driver version needs both: give them (gpu_operator_driver_repository and "
        "gpu_operator_driver_image, for example nvcr.io/nvidia and driver), or move the operator in the same stage, "
        "whose step pins the driver that runs first"
    )


def split_reference(reference: str) -> Tuple[str, str]:
    """``nvcr.io/nvidia/driver@sha256:...`` (or ``:tag``) -> (``nvcr.io/nvidia``, ``driver``)."""
    path = reference.split("@", 1)[0]
    repository, name = path.rsplit("/", 1) if "/" in path else ("", path)
    return repository, name.split(":", 1)[0]


# -- patches --------------------------------------------------------------------------------


def changed_leaves(current: Any, desired: Mapping[str, Any]) -> Dict[str, Any]:
    """The part of ``desired`` (a merge-patch fragment) that differs from ``current``.

    Ints and strings never compare equal (``1`` and ``"1"`` are different
    values to the API server), a nested mapping keeps only its changed keys,
    and a null (delete) counts only where the key exists.
    """
    current_map = current if isinstance(current, Mapping) else {}
    changed: Dict[str, Any] = {}
    for key, want in desired.items():
        have = current_map.get(key)
        if want is None:
            if key in current_map:
                changed[key] = None
        elif isinstance(want, Mapping):
            sub = changed_leaves(have, want)
            if sub or (not isinstance(have, Mapping) and not want):
                changed[key] = sub
        elif key not in current_map or type(have) is not type(want) or have != want:
            changed[key] = copy.deepcopy(want)
    return changed


def merge_patch_for(current: Mapping[str, Any], desired: Mapping[str, Any]) -> Dict[str, Any]:
    """The merge patch that takes ``current`` to ``desired`` ({} when nothing differs).

    Wherever one of version, repository and image changes, all three of the
    desired values go together (OpenShift resolves the driver toolkit image
    from the three).
    """
    patch = changed_leaves(current, desired)
    _send_image_fields_together(patch, desired)
    return patch


def _send_image_fields_together(patch: Dict[str, Any], desired: Mapping[str, Any]) -> None:
    if any(key in patch for key in DRIVER_IMAGE_FIELDS):
        for key in DRIVER_IMAGE_FIELDS:
            if desired.get(key) is not None:
                patch[key] = desired[key]
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(desired.get(key), Mapping):
            _send_image_fields_together(value, desired[key])


def desired_cluster_policy(
    policy: Mapping[str, Any], *, target: Optional[DriverTarget], upgrade_policy: Mapping[str, Any]
) -> Dict[str, Any]:
    """The ClusterPolicy fields this module owns, as a merge-patch fragment.

    ``target`` None leaves the driver image alone (the cluster's NVIDIADrivers
    carry it); the upgrade policy always lives on the ClusterPolicy, whose
    upgrade controller drives every driver DaemonSet up to GPU Operator v26.7.
    """
    driver = ((policy.get("spec") or {}).get("driver")) or {}
    section: Dict[str, Any] = {}
    if target is not None:
        section.update(target.fields_for(driver))
    if upgrade_policy:
        section["upgradePolicy"] = copy.deepcopy(dict(upgrade_policy))
    return {"spec": {"driver": section}} if section else {}


def cluster_policy_patch(
    policy: Mapping[str, Any], *, target: Optional[DriverTarget], upgrade_policy: Mapping[str, Any]
) -> Dict[str, Any]:
    """The merge patch (without resourceVersion) that brings a ClusterPolicy to the target; {} when none."""
    return merge_patch_for(policy, desired_cluster_policy(policy, target=target, upgrade_policy=upgrade_policy))


def desired_nvidia_driver(
    driver_cr: Mapping[str, Any],
    *,
    target: Optional[DriverTarget] = None,
    node_selector: Optional[Mapping[str, str]] = None,
    upgrade_policy: Optional[Mapping[str, Any]] = None,
    default: Optional[bool] = None,
) -> Dict[str, Any]:
    """The NVIDIADriver fields to set, as a merge-patch fragment.

    ``node_selector`` replaces the CR's whole selector (keys it lacks are sent
    as null, since a merge patch merges maps). ``upgrade_policy`` is only
    written to a CR that already carries its own (per-CR policies exist from
    GPU Operator v26.7; older operators ignore them).
    """
    spec = driver_cr.get("spec") or {}
    section: Dict[str, Any] = {}
    if target is not None:
        section.update(target.fields_for(spec))
    if node_selector is not None:
        current = dict(spec.get("nodeSelector") or {})
        section["nodeSelector"] = {**{key: None for key in current if key not in node_selector}, **node_selector}
    if upgrade_policy and isinstance(spec.get("upgradePolicy"), Mapping):
        section["upgradePolicy"] = copy.deepcopy(dict(upgrade_policy))
    if default is not None:
        section["default"] = default
    return {"spec": section} if section else {}


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (returns a new value; ``target`` is not modified)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: Dict[str, Any] = copy.deepcopy(dict(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


# -- diffs ----------------------------------------------------------------------------------

_SERVER_MANAGED_METADATA = (
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
_NOISY_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def normalized_for_diff(obj: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """An object as a person compares it: no status, no server-managed metadata; {} for an absent object."""
    if not obj:
        return {}
    result = copy.deepcopy(dict(obj))
    result.pop("status", None)
    metadata = dict(result.get("metadata") or {})
    for key in _SERVER_MANAGED_METADATA:
        metadata.pop(key, None)
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items() if k not in _NOISY_ANNOTATIONS}
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)
    result["metadata"] = metadata
    return result


# -- reading the cluster's objects ----------------------------------------------------------------


def driver_version_of_image(image: str) -> str:
    """The driver version a driver image runs: ``nvcr.io/nvidia/driver:570.124.06-rhcos4.16`` -> 570.124.06.

    The operator tags driver images ``<version>-<os>`` (precompiled ones
    ``<version>-<kernel>-<os>``); a digest-only reference tells nothing ("").
    """
    reference = image.split("@", 1)[0]
    last = reference.rsplit("/", 1)[-1]
    if ":" not in last:
        return ""
    tag = last.split(":", 1)[1]
    version = tag.split("-", 1)[0]
    return version if _VERSION.match(version) else ""


def effective_upgrade_policy(current: Optional[Mapping[str, Any]], requested: Mapping[str, Any]) -> Dict[str, Any]:
    """The upgradePolicy the controller will read once the patch lands (chart defaults for absent fields)."""
    merged = apply_merge_patch(dict(current or {}), dict(requested))
    for key, default in UPGRADE_POLICY_DEFAULTS.items():
        merged.setdefault(key, default)
    return merged
