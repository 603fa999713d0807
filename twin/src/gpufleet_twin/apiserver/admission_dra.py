"""Admission of resource.k8s.io/v1 (Dynamic Resource Allocation) objects, and of the resource claims a Pod names."""

from __future__ import annotations

import json

from ..machinery import errors
from ..machinery.registry import ResourceType
from ..machinery.store import Obj
from .names import DNS1123_SUBDOMAIN, DNS1123_SUBDOMAIN_MESSAGE, dns_label_causes

# What pkg/registry/resource/*/strategy.go and pkg/apis/resource/validation do on a write; allocation
# (scheduler, DRA driver, kubelet) is not simulated.
_RESOURCE_CLAIMS = ("resource.k8s.io", "resourceclaims")
_RESOURCE_CLAIM_TEMPLATES = ("resource.k8s.io", "resourceclaimtemplates")
_RESOURCE_SLICES = ("resource.k8s.io", "resourceslices")
DRA_KEYS = frozenset({_RESOURCE_CLAIMS, _RESOURCE_CLAIM_TEMPLATES, _RESOURCE_SLICES})
_NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def admit_dra(operation: str, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
    name = obj["metadata"].get("name", "")
    causes: list[dict[str, str]] = []
    if rtype.key == _RESOURCE_CLAIMS:
        if operation == "CREATE":
            obj.pop("status", None)  # PrepareForCreate: a new claim has no allocation
            causes = _device_claim_causes(obj.setdefault("spec", {}), "spec")
        elif old is not None and (obj.get("spec") or {}) != (old.get("spec") or {}):
            # ValidateResourceClaimUpdate: the spec is immutable (ValidateImmutableField).
            causes = [{"reason": "FieldValueInvalid", "field": "spec", "message": _IMMUTABLE_SPEC}]
    elif rtype.key == _RESOURCE_CLAIM_TEMPLATES:
        if operation == "CREATE":
            causes = _device_claim_causes(obj.setdefault("spec", {}).setdefault("spec", {}), "spec.spec")
        elif old is not None and (obj.get("spec") or {}) != (old.get("spec") or {}):
            causes = [{"reason": "FieldValueInvalid", "field": "spec", "message": _IMMUTABLE_SPEC}]
    else:
        causes = _resource_slice_causes(obj.get("spec") or {})
    if causes:
        raise errors.invalid(rtype.kind, name, causes, rtype.group)


# field.Invalid of a struct renders the Go value; the twin names its type only.
_IMMUTABLE_SPEC = 'Invalid value: "object": field is immutable'


def _device_claim_causes(spec: Obj, path: str) -> list[dict[str, str]]:
    """validateDeviceClaim of v1, after SetDefaults_ExactDeviceRequest/DeviceSubRequest (ExactCount, 1)."""
    causes: list[dict[str, str]] = []
    requests = (spec.setdefault("devices", {}) or {}).get("requests") or []
    for index, request in enumerate(requests):
        where = f"{path}.devices.requests[{index}]"
        if not isinstance(request, dict):
            continue
        causes.extend(dns_label_causes(request.get("name", ""), f"{where}.name"))
        exactly, first = request.get("exactly"), request.get("firstAvailable") or []
        if exactly is None and not first:
            causes.append(
                {
                    "reason": "FieldValueRequired",
                    "field": where,
                    "message": "Required value: exactly one of `exactly` or `firstAvailable` is required",
                }
            )
        elif exactly is not None and first:
            causes.append(
                {
                    "reason": "FieldValueInvalid",
                    "field": where,
                    "message": "Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, "
                    "but multiple fields are set",
                }
            )
        elif exactly is not None:
            causes.extend(_device_selection_causes(exactly, f"{where}.exactly"))
        else:
            for sub_index, sub in enumerate(first):
                sub_where = f"{where}.firstAvailable[{sub_index}]"
                if isinstance(sub, dict):
                    causes.extend(dns_label_causes(sub.get("name", ""), f"{sub_where}.name"))
                    causes.extend(_device_selection_causes(sub, sub_where))
    return causes


def _device_selection_causes(selection: Obj, where: str) -> list[dict[str, str]]:
    selection.setdefault("allocationMode", "ExactCount")
    if selection["allocationMode"] == "ExactCount":
        selection.setdefault("count", 1)
    causes: list[dict[str, str]] = []
    class_name = selection.get("deviceClassName") or ""
    if not class_name:
        causes.append(
            {"reason": "FieldValueRequired", "field": f"{where}.deviceClassName", "message": "Required value"}
        )
    elif not DNS1123_SUBDOMAIN.match(class_name):
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": f"{where}.deviceClassName",
                "message": f"Invalid value: {json.dumps(class_name)}: {DNS1123_SUBDOMAIN_MESSAGE}",
            }
        )
    mode, count = selection["allocationMode"], selection.get("count", 0)
    if mode == "ExactCount" and (not isinstance(count, int) or count <= 0):
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": f"{where}.count",
                "message": f"Invalid value: {json.dumps(count)}: must be greater than zero",
            }
        )
    elif mode == "All" and count:
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": f"{where}.count",
                "message": f"Invalid value: {json.dumps(count)}: must not be specified when allocationMode is 'All'",
            }
        )
    elif mode not in ("All", "ExactCount"):
        causes.append(
            {
                "reason": "FieldValueNotSupported",
                "field": f"{where}.allocationMode",
                "message": f'Unsupported value: {json.dumps(mode)}: supported values: "All", "ExactCount"',
            }
        )
    return causes


def _resource_slice_causes(spec: Obj) -> list[dict[str, str]]:
    """ValidateResourceSliceSpec: driver, pool name and one way of naming the nodes."""
    causes: list[dict[str, str]] = []
    chosen = [f"`{k}`" for k in _NODE_SELECTION if spec.get(k) not in (None, False)]
    wording = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    if not chosen:
        causes.append({"reason": "FieldValueRequired", "field": "spec", "message": f"Required value: {wording}"})
    elif len(chosen) > 1:
        causes.append(
            {
                "reason": "FieldValueInvalid",
                "field": "spec",
                "message": f"Invalid value: {json.dumps('{' + ', '.join(chosen) + '}')}: {wording}, "
                "but multiple fields are set",
            }
        )
    if not spec.get("driver"):
        causes.append({"reason": "FieldValueRequired", "field": "spec.driver", "message": "Required value"})
    if not (spec.get("pool") or {}).get("name"):
        causes.append({"reason": "FieldValueRequired", "field": "spec.pool.name", "message": "Required value"})
    return causes


def _go_string_pointer(value: str | None) -> str:
    """A *string as %#v prints it (the address of a set pointer is not reproducible)."""
    return "(*string)(nil)" if value is None else "(*string)(0xc000000000)"


def pod_resource_claim_causes(spec: Obj) -> list[dict[str, str]]:
    """validatePodResourceClaims and validateResourceClaimNames (core validation) for DRA pods."""
    causes: list[dict[str, str]] = []
    names: list[str] = []
    for index, claim in enumerate(spec.get("resourceClaims") or ()):
        if not isinstance(claim, dict):
            continue
        where = f"spec.resourceClaims[{index}]"
        name = claim.get("name") or ""
        if not name:
            causes.append({"reason": "FieldValueRequired", "field": f"{where}.name", "message": "Required value"})
        elif name in names:
            causes.append(
                {
                    "reason": "FieldValueDuplicate",
                    "field": f"{where}.name",
                    "message": f"Duplicate value: {json.dumps(name)}",
                }
            )
        else:
            causes.extend(dns_label_causes(name, f"{where}.name"))
            names.append(name)
        by_name, by_template = claim.get("resourceClaimName"), claim.get("resourceClaimTemplateName")
        if (by_name is None) == (by_template is None):
            # field.Invalid renders the claim as Go's %#v of core.PodResourceClaim.
            shown = (
                f"core.PodResourceClaim{{Name:{json.dumps(name)}, ResourceClaimName:{_go_string_pointer(by_name)}, "
                f"ResourceClaimTemplateName:{_go_string_pointer(by_template)}}}"
            )
            rule = (
                "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"
                if by_name is None
                else "at most one of `resourceClaimName` or `resourceClaimTemplateName` may be specified"
            )
            causes.append({"reason": "FieldValueInvalid", "field": where, "message": f"Invalid value: {shown}: {rule}"})
    known = sorted(names)
    for kind in ("initContainers", "containers"):
        for c_index, container in enumerate(spec.get(kind) or ()):
            claims = ((container or {}).get("resources") or {}).get("claims") or ()
            for index, claim in enumerate(claims):
                name = (claim or {}).get("name") or ""
                if not name or name in known:
                    continue
                detail = ": " + ", ".join(known) if known else " which is empty"
                causes.append(
                    {
                        "reason": "FieldValueNotFound",
                        "field": f"spec.{kind}[{c_index}].resources.claims[{index}]",
                        "message": f"Not found: {json.dumps(name)}: must be one of the names in "
                        f"pod.spec.resourceClaims{detail}",
                    }
                )
    return causes
