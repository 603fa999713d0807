"""PATCH bodies, applied as a Kubernetes API server applies them.

Three formats, chosen by the request's Content-Type:

* ``application/merge-patch+json``: RFC 7386 JSON merge patch;
* ``application/json-patch+json``: RFC 6902 JSON patch (evanphx/json-patch v4
  semantics, which the API server uses: negative array indices count from the
  end);
* ``application/strategic-merge-patch+json``: Kubernetes strategic merge patch
  (k8s.io/apimachinery/pkg/util/strategicpatch), for built-in kinds only.  Lists
  merge by the ``patchMergeKey`` of the Go type's ``patchStrategy:"merge"`` tag;
  lists without one are replaced whole.

Every function returns a new object and never mutates its inputs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from . import errors

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

# The 422 a real server answers when a JSON patch cannot be applied; we add which op failed.
_JSON_PATCH_REJECTED = "the server rejected our request due to an error in our request"


# -- RFC 7386 JSON merge patch --------------------------------------------------------------------


def _merge_value(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge_value(merged.get(key), value)
    return merged


def json_merge_patch(target: dict, patch: Any) -> dict:
    """Apply an RFC 7386 merge patch: objects merge, ``null`` deletes, anything else replaces.

    A patch that is not a JSON object replaces the whole document, which is
    not a valid API object, so that is refused with 400.
    """
    if not isinstance(patch, dict):
        raise errors.bad_request("the merge patch must be a JSON object")
    return _merge_value(target, patch)


# -- RFC 6902 JSON patch --------------------------------------------------------------------------


def _json_equal(left: Any, right: Any) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1 (as Python's == would have it)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[key], right[key]) for key in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(_json_equal(a, b) for a, b in zip(left, right, strict=True))
    return type(left) is type(right) and left == right


class _PatchFailure(Exception):
    """An operation that cannot be applied; becomes a 422."""


def _pointer_tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise _PatchFailure(f"JSON pointer {pointer!r} must start with '/'")
    # RFC 6901: "~1" is "/" and "~0" is "~", undone in that order.
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def _array_index(token: str, length: int, *, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return length
    if not token.lstrip("-").isdigit():
        raise _PatchFailure(f"invalid array index {token!r}")
    index = int(token)
    # evanphx/json-patch v4, as vendored by the API server, accepts negative indices from the end.
    if index < 0:
        if index < -length:
            raise _PatchFailure(f"array index {token} out of bounds")
        index += length
    upper = length if allow_end else length - 1
    if index > upper:
        raise _PatchFailure(f"array index {token} out of bounds")
    return index


def _parent(document: Any, tokens: list[str], pointer: str) -> Any:
    node = document
    for token in tokens[:-1]:
        if isinstance(node, dict):
            if token not in node:
                raise _PatchFailure(f"doc is missing path: {pointer!r}")
            node = node[token]
        elif isinstance(node, list):
            node = node[_array_index(token, len(node), allow_end=False)]
        else:
            raise _PatchFailure(f"doc is missing path: {pointer!r}")
    return node


def _get(document: Any, pointer: str) -> Any:
    tokens = _pointer_tokens(pointer)
    if not tokens:
        return document
    container = _parent(document, tokens, pointer)
    last = tokens[-1]
    if isinstance(container, dict):
        if last not in container:
            raise _PatchFailure(f"doc is missing key: {pointer!r}")
        return container[last]
    if isinstance(container, list):
        return container[_array_index(last, len(container), allow_end=False)]
    raise _PatchFailure(f"doc is missing path: {pointer!r}")


def _add(document: Any, pointer: str, value: Any) -> Any:
    tokens = _pointer_tokens(pointer)
    if not tokens:
        return value
    container = _parent(document, tokens, pointer)
    last = tokens[-1]
    if isinstance(container, dict):
        container[last] = value
    elif isinstance(container, list):
        container.insert(_array_index(last, len(container), allow_end=True), value)
    else:
        raise _PatchFailure(f"doc is missing path: {pointer!r}")
    return document


def _remove(document: Any, pointer: str) -> tuple[Any, Any]:
    tokens = _pointer_tokens(pointer)
    if not tokens:
        raise _PatchFailure("cannot remove the whole document")
    container = _parent(document, tokens, pointer)
    last = tokens[-1]
    if isinstance(container, dict):
        if last not in container:
            raise _PatchFailure(f"unable to remove nonexistent key: {last}: missing value")
        return document, container.pop(last)
    if isinstance(container, list):
        return document, container.pop(_array_index(last, len(container), allow_end=False))
    raise _PatchFailure(f"doc is missing path: {pointer!r}")


def _replace(document: Any, pointer: str, value: Any) -> Any:
    tokens = _pointer_tokens(pointer)
    if not tokens:
        return value
    container = _parent(document, tokens, pointer)
    last = tokens[-1]
    if isinstance(container, dict):
        # evanphx/json-patch v4 (what the API server runs) lets "replace" create a missing
        # object member, unlike RFC 6902; kubectl patch --local --type json agrees.
        container[last] = value
    elif isinstance(container, list):
        container[_array_index(last, len(container), allow_end=False)] = value
    else:
        raise _PatchFailure(f"doc is missing path: {pointer!r}")
    return document


def _apply_operation(document: Any, operation: dict[str, Any]) -> Any:
    op = operation.get("op")
    if "path" not in operation or not isinstance(operation["path"], str):
        raise _PatchFailure("operation missing path field")
    path = operation["path"]
    if op in ("add", "replace", "test") and "value" not in operation:
        raise _PatchFailure("operation missing value field")
    if op == "add":
        return _add(document, path, copy.deepcopy(operation["value"]))
    if op == "remove":
        return _remove(document, path)[0]
    if op == "replace":
        return _replace(document, path, copy.deepcopy(operation["value"]))
    if op == "test":
        if not _json_equal(_get(document, path), operation["value"]):
            raise _PatchFailure("testing value failed")
        return document
    if op in ("move", "copy"):
        source = operation.get("from")
        if not isinstance(source, str):
            raise _PatchFailure("operation missing from field")
        if op == "move":
            if path != source and path.startswith(source + "/"):
                raise _PatchFailure("cannot move a value into one of its own children")
            document, value = _remove(document, source)
            return _add(document, path, value)
        return _add(document, path, copy.deepcopy(_get(document, source)))
    raise _PatchFailure(f"Unexpected kind: {op}")


def json_patch(target: dict, operations: list) -> dict:
    """Apply an RFC 6902 JSON patch; a failed ``test`` or a bad path is a 422 naming the op and path."""
    if not isinstance(operations, list) or not all(isinstance(operation, dict) for operation in operations):
        raise errors.bad_request("json: cannot unmarshal the patch: a JSON patch is a list of operation objects")
    document: Any = copy.deepcopy(target)
    for index, operation in enumerate(operations):
        try:
            document = _apply_operation(document, operation)
        except (_PatchFailure, IndexError, TypeError) as failure:
            where = f"operation {index} ({operation.get('op')} {operation.get('path')})"
            raise errors.ApiError(422, "Invalid", f"{_JSON_PATCH_REJECTED}: {where}: {failure}") from None
    if not isinstance(document, dict):
        raise errors.ApiError(422, "Invalid", f"{_JSON_PATCH_REJECTED}: the patched document is not a JSON object")
    return document


# -- strategic merge patch ------------------------------------------------------------------------


@dataclass(frozen=True)
class PatchStrategy:
    """A field's ``patchStrategy`` tag (``merge``, ``replace``, ``retainKeys``, or ``merge,retainKeys``)
    and, for lists of objects, its ``patchMergeKey``."""

    strategy: str
    merge_key: str = ""

    @property
    def merges(self) -> bool:
        return "merge" in self.strategy.split(",")

    @property
    def replaces(self) -> bool:
        return "replace" in self.strategy.split(",")


_MERGE = "merge"


def _strategies(prefix: str, relative: Mapping[str, PatchStrategy]) -> dict[str, PatchStrategy]:
    return {f"{prefix}.{path}" if prefix else path: strategy for path, strategy in relative.items()}


# Tags of k8s.io/api core/v1 types.go (ObjectMeta's in apimachinery pkg/apis/meta/v1/types.go),
# checked against kubernetes/api at 10b39a39 (2026-07).  Fields not listed here have no
# patch strategy: their lists (tolerations, spec.taints, status.containerStatuses,
# readinessGates, status.images, ...) are replaced whole and their maps merge.
_OBJECT_META = {
    "metadata.ownerReferences": PatchStrategy(_MERGE, "uid"),
    "metadata.finalizers": PatchStrategy(_MERGE),  # a list of strings merged as a set
}
_CONTAINER = {  # core/v1 Container and EphemeralContainerCommon
    "ports": PatchStrategy(_MERGE, "containerPort"),
    "env": PatchStrategy(_MERGE, "name"),
    "volumeMounts": PatchStrategy(_MERGE, "mountPath"),
    "volumeDevices": PatchStrategy(_MERGE, "devicePath"),
}
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
_POD_SPEC = {
    "volumes": PatchStrategy("merge,retainKeys", "name"),
    "imagePullSecrets": PatchStrategy(_MERGE, "name"),
    "hostAliases": PatchStrategy(_MERGE, "ip"),
    "topologySpreadConstraints": PatchStrategy(_MERGE, "topologyKey"),
    "schedulingGates": PatchStrategy(_MERGE, "name"),
    "resourceClaims": PatchStrategy("merge,retainKeys", "name"),
    "evictionResponders": PatchStrategy(_MERGE, "name"),
    **{containers: PatchStrategy(_MERGE, "name") for containers in _CONTAINER_LISTS},
    **{f"{containers}.{field}": strategy for containers in _CONTAINER_LISTS for field, strategy in _CONTAINER.items()},
}
_POD_STATUS = {
    "conditions": PatchStrategy(_MERGE, "type"),
    "hostIPs": PatchStrategy(_MERGE, "ip"),
    "podIPs": PatchStrategy(_MERGE, "ip"),
    "resourceClaimStatuses": PatchStrategy("merge,retainKeys", "name"),
    "nodeAllocatableResourceClaimStatuses": PatchStrategy(_MERGE, "resourceClaimName"),
}
_CONDITIONS_BY_TYPE = {"status.conditions": PatchStrategy(_MERGE, "type")}
# Workloads embed a PodTemplateSpec: its metadata and pod spec keep their tags there.
_WORKLOAD_TEMPLATE = {
    **_strategies("spec.template", _OBJECT_META),
    **_strategies("spec.template.spec", _POD_SPEC),
}


def _kind_table(kind: str, fields: Mapping[str, PatchStrategy]) -> dict[tuple[str, str], PatchStrategy]:
    return {(kind, path): strategy for path, strategy in {**_OBJECT_META, **fields}.items()}


# (kind, dotted JSON path) -> strategy.  List elements share their list's path, so a
# container's env list is ("Pod", "spec.containers.env").
PATCH_STRATEGIES: Mapping[tuple[str, str], PatchStrategy] = MappingProxyType(
    {
        **_kind_table("Pod", {**_strategies("spec", _POD_SPEC), **_strategies("status", _POD_STATUS)}),
        **_kind_table("PodTemplate", _strategies("template", {**_OBJECT_META, **_strategies("spec", _POD_SPEC)})),
        **_kind_table(
            "Node",
            {
                "spec.podCIDRs": PatchStrategy(_MERGE),
                "status.conditions": PatchStrategy(_MERGE, "type"),
                "status.addresses": PatchStrategy(_MERGE, "type"),
            },
        ),
        **_kind_table("Namespace", _CONDITIONS_BY_TYPE),
        **_kind_table(
            "Service",
            {"spec.ports": PatchStrategy(_MERGE, "port"), "status.conditions": PatchStrategy(_MERGE, "type")},
        ),
        **_kind_table("ServiceAccount", {"secrets": PatchStrategy(_MERGE, "name")}),
        **_kind_table("ConfigMap", {}),
        **_kind_table("Secret", {}),
        **_kind_table("Event", {}),
        # apps/v1 types.go
        **_kind_table("DaemonSet", {**_WORKLOAD_TEMPLATE, **_CONDITIONS_BY_TYPE}),
        **_kind_table(
            "Deployment",
            {**_WORKLOAD_TEMPLATE, **_CONDITIONS_BY_TYPE, "spec.strategy": PatchStrategy("retainKeys")},
        ),
        **_kind_table("ReplicaSet", {**_WORKLOAD_TEMPLATE, **_CONDITIONS_BY_TYPE}),
        **_kind_table("StatefulSet", {**_WORKLOAD_TEMPLATE, **_CONDITIONS_BY_TYPE}),
        # batch/v1 types.go
        **_kind_table("Job", {**_WORKLOAD_TEMPLATE, **_CONDITIONS_BY_TYPE}),
        **_kind_table(
            "CronJob",
            {
                **_strategies("spec.jobTemplate.spec.template", _OBJECT_META),
                **_strategies("spec.jobTemplate.spec.template.spec", _POD_SPEC),
            },
        ),
        # resource/v1 types.go: only ResourceClaimStatus.reservedFor has a patch strategy (merge on uid).
        **_kind_table("DeviceClass", {}),
        **_kind_table("ResourceClaim", {"status.reservedFor": PatchStrategy(_MERGE, "uid")}),
        **_kind_table("ResourceClaimTemplate", {}),
        **_kind_table("ResourceSlice", {}),
        # policy/v1 types.go: a PDB's selector is replaced whole, never merged.
        **_kind_table(
            "PodDisruptionBudget",
            {"spec.selector": PatchStrategy("replace"), "status.conditions": PatchStrategy(_MERGE, "type")},
        ),
    }
)

_NO_STRATEGY = PatchStrategy("")
_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_FROM_PRIMITIVE_LIST = "$deleteFromPrimitiveList/"
_SET_ELEMENT_ORDER = "$setElementOrder/"


def patch_strategy(kind: str, path: str) -> PatchStrategy:
    """The strategy of the field at dotted ``path`` of ``kind`` (none: maps merge, lists are replaced)."""
    return PATCH_STRATEGIES.get((kind, path), _NO_STRATEGY)


class _StrategicPatchError(Exception):
    """A strategic merge patch the server cannot apply, with the HTTP code it answers."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _bad_patch(message: str) -> _StrategicPatchError:
    # mergepatch.ErrBadPatchFormatFor... errors, which the API server turns into 400.
    return _StrategicPatchError(400, message)


def _unprocessable(message: str) -> _StrategicPatchError:
    return _StrategicPatchError(422, message)


def _server_error(message: str) -> _StrategicPatchError:
    # Errors the API server does not classify come back as 500 (a missing merge key, say).
    return _StrategicPatchError(500, message)


def _clean(value: Any) -> Any:
    """Patch content as it lands in the object: no directives, no nulls.

    The real server decodes the merged map into Go structs, which drops both; the
    twin keeps JSON, so it removes them where patch content is copied in.
    """
    if isinstance(value, dict):
        return {
            key: _clean(item)
            for key, item in value.items()
            if item is not None and not key.startswith(("$patch", "$retainKeys", "$setElementOrder/", "$deleteFrom"))
        }
    if isinstance(value, list):
        return [_clean(item) for item in value if not (isinstance(item, dict) and _DIRECTIVE in item)]
    return value


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _element_kind(*lists: Iterable[Any]) -> str:
    """The one JSON type of every element ('' for no elements); lists of lists are refused."""
    found = ""
    for items in lists:
        for item in items:
            if isinstance(item, list):
                raise _unprocessable("lists of lists are not supported")
            kind = (
                "map"
                if isinstance(item, dict)
                else "bool"
                if isinstance(item, bool)
                else "number"
                if isinstance(item, int | float)
                else "string"
                if isinstance(item, str)
                else "null"
            )
            if found and kind != found:
                raise _server_error(f"list element types are not identical: {list(lists)}")
            found = kind
    return found


def _scalar_key(value: Any) -> tuple[bool, Any]:
    # Keep true and 1 apart when comparing list elements.
    return (isinstance(value, bool), value)


def _identity(item: Any, merge_key: str) -> Any:
    if isinstance(item, dict):
        return _scalar_key(item.get(merge_key)) if merge_key else None
    return _scalar_key(item)


def _index_in(items: list[Any], item: Any, merge_key: str) -> int:
    wanted = _identity(item, merge_key)
    for position, candidate in enumerate(items):
        if _identity(candidate, merge_key) == wanted:
            return position
    return -1


def _sort_by(items: list[Any], order: list[Any], merge_key: str) -> list[Any]:
    positions = [_index_in(order, item, merge_key) for item in items]
    if any(position < 0 for position in positions):
        return list(items)
    return [item for _, item in sorted(zip(positions, items, strict=True), key=lambda pair: pair[0])]


def _interleave(server_only: list[Any], from_patch: list[Any], server_order: list[Any], merge_key: str) -> list[Any]:
    """Merge two ordered lists, keeping each one's order and, where both are known, the live order
    (strategicpatch's mergeSortedSlice)."""
    merged: list[Any] = []
    left = right = 0
    while left < len(server_only) or right < len(from_patch):
        if right >= len(from_patch):
            merged.append(server_only[left])
            left += 1
        elif left >= len(server_only):
            merged.append(from_patch[right])
            right += 1
        else:
            left_at = _index_in(server_order, server_only[left], merge_key)
            right_at = _index_in(server_order, from_patch[right], merge_key)
            if left_at >= 0 and right_at >= 0 and left_at < right_at:
                merged.append(server_only[left])
                left += 1
            else:
                merged.append(from_patch[right])
                right += 1
    return merged


def _order(merged: list[Any], wanted_order: list[Any], live: list[Any], merge_key: str) -> list[Any]:
    """Items named by the patch (or by ``$setElementOrder``) in that order, the others in live order,
    interleaved where the live list says how."""
    if merged and isinstance(merged[0], dict) and not merge_key:
        return merged  # nothing identifies map elements of a list without a merge key
    from_patch = [item for item in merged if _index_in(wanted_order, item, merge_key) >= 0]
    server_only = [item for item in merged if _index_in(wanted_order, item, merge_key) < 0]
    return _interleave(
        _sort_by(server_only, live, merge_key), _sort_by(from_patch, wanted_order, merge_key), live, merge_key
    )


def _require_merge_key(item: dict[str, Any], merge_key: str) -> Any:
    if merge_key not in item:
        raise _server_error(f"map: {item} does not contain declared merge key: {merge_key}")
    return item[merge_key]


def _merge_list(
    *, live: list[Any], patch: list[Any], kind: str, path: str, merge_key: str, deleting: bool
) -> list[Any]:
    """Merge ``patch`` into ``live``; ``live`` and its elements belong to the caller's working copy."""
    if not live and not patch:
        return live
    element_kind = _element_kind(live, patch)
    if element_kind != "map":
        if deleting:
            unwanted = [_scalar_key(item) for item in patch]
            return [item for item in live if _scalar_key(item) not in unwanted]
        merged: list[Any] = []
        for item in [*live, *patch]:
            if _scalar_key(item) not in [_scalar_key(seen) for seen in merged]:
                merged.append(item)
        return _order(merged, patch, live, "")
    if not merge_key:
        raise _server_error(f"cannot merge lists without merge key for {path}")
    # Directive elements first: {"$patch": "delete", key: v} and {"$patch": "replace"}.
    remaining = list(live)
    plain: list[dict[str, Any]] = []
    replace = False
    for item in patch:
        directive = item.get(_DIRECTIVE)
        if directive is None:
            plain.append(item)
        elif directive == "delete":
            doomed = _scalar_key(_require_merge_key(item, merge_key))
            remaining = [kept for kept in remaining if _identity(kept, merge_key) != doomed]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise _server_error("merging lists cannot yet be specified in the patch")
        else:
            raise _server_error(f"unknown patch type: {directive} in map: {item}")
    if replace:
        return [_clean(item) for item in plain]
    for item in plain:
        wanted = _scalar_key(_require_merge_key(item, merge_key))
        for position, existing in enumerate(remaining):
            if _identity(existing, merge_key) == wanted:
                remaining[position] = _merge_map(live=existing, patch=item, kind=kind, path=path)
                break
        else:
            remaining.append(_clean(item))
    return _order(remaining, plain, live, merge_key)


def _apply_retain_keys(live: dict[str, Any], patch: dict[str, Any]) -> None:
    retained = patch.pop(_RETAIN_KEYS)
    if not isinstance(retained, list):
        raise _bad_patch("invalid patch format of retainKeys")
    for key, value in patch.items():
        if value is None or key.startswith((_DELETE_FROM_PRIMITIVE_LIST, _SET_ELEMENT_ORDER)):
            continue
        if key not in retained:
            raise _bad_patch("invalid patch format of retainKeys")
    for key in list(live):
        if key not in retained:
            del live[key]


def _check_element_order(patch_list: Any, order: list[Any], merge_key: str) -> None:
    """The patch list must name its items in the relative order the ``$setElementOrder`` list gives."""
    if not isinstance(patch_list, list) or not order or not patch_list:
        return
    listed = [item for item in patch_list if not (isinstance(item, dict) and _DIRECTIVE in item)]
    position = 0
    for wanted in order:
        if position < len(listed) and _identity(listed[position], merge_key) == _identity(wanted, merge_key):
            position += 1
    if position < len(listed):
        raise _server_error(
            f"The order in patch list:\n{patch_list}\n doesn't match {_SET_ELEMENT_ORDER[:-1]} list:\n{order}\n"
        )


def _apply_element_orders(live: dict[str, Any], patch: dict[str, Any], *, kind: str, path: str) -> None:
    """Handle ``$setElementOrder/<field>``: merge that field now and put its items in the given order."""
    for directive_key in [key for key in patch if key.startswith(_SET_ELEMENT_ORDER)]:
        order = patch.pop(directive_key)
        field = directive_key[len(_SET_ELEMENT_ORDER) :]
        if not field or not isinstance(order, list):
            raise _bad_patch("invalid patch format of setElementOrder list")
        field_path = _child(path, field)
        strategy = patch_strategy(kind, field_path)
        live_list, patch_list = live.get(field), patch.get(field)
        if live_list is not None and not isinstance(live_list, list):
            raise _server_error(f"expected a list at {field_path}, found {type(live_list).__name__}")
        _check_element_order(patch_list, order, strategy.merge_key)
        if field in live and field in patch:
            merged = _merge_field(live=live_list, patch=patch_list, kind=kind, path=field_path, deleting=False)
        elif field in patch:
            merged = _clean(patch_list)
        elif field in live:
            merged = live_list
        else:
            continue
        if isinstance(merged, list):
            merged = _order(merged, order, live_list or [], strategy.merge_key)
        live[field] = merged
        patch.pop(field, None)


def _merge_field(*, live: Any, patch: Any, kind: str, path: str, deleting: bool) -> Any:
    strategy = patch_strategy(kind, path)
    if isinstance(live, dict) and isinstance(patch, dict):
        if strategy.replaces:
            return _clean(patch)
        return _merge_map(live=live, patch=patch, kind=kind, path=path)
    if isinstance(live, list) and isinstance(patch, list):
        if strategy.merges or deleting:
            return _merge_list(
                live=live, patch=patch, kind=kind, path=path, merge_key=strategy.merge_key, deleting=deleting
            )
        return _clean(patch)
    return _clean(patch)


def _is_directive(value: Any) -> bool:
    return isinstance(value, dict) and _DIRECTIVE in value


def _merge_map(*, live: dict[str, Any], patch: dict[str, Any], kind: str, path: str) -> dict[str, Any]:
    """Merge ``patch`` into ``live`` (the caller's working copy, changed in place) and return it."""
    directive = patch.get(_DIRECTIVE)
    if directive is not None:
        if directive == "replace":
            return _clean({key: value for key, value in patch.items() if key != _DIRECTIVE})
        if directive == "delete":
            return {}
        # "$patch: merge" inside a map is refused by upstream too (handleDirectiveInMergeMap).
        raise _server_error(f"unknown patch type: {directive} in map: {patch}")
    patch = dict(patch)  # directives are consumed from this copy
    if _RETAIN_KEYS in patch:
        _apply_retain_keys(live, patch)
    _apply_element_orders(live, patch, kind=kind, path=path)
    for patch_key, value in patch.items():
        deleting = patch_key.startswith(_DELETE_FROM_PRIMITIVE_LIST)
        key = patch_key[len(_DELETE_FROM_PRIMITIVE_LIST) :] if deleting else patch_key
        if not key:
            continue  # "$deleteFromPrimitiveList/" names no list: upstream ignores it too
        if value is None:
            live.pop(key, None)
            continue
        if key not in live:
            # New content is taken as is; a directive about something absent does nothing.
            if not deleting and not _is_directive(value):
                live[key] = _clean(value)
            continue
        current = live[key]
        same_shape = (isinstance(current, dict) and isinstance(value, dict)) or (
            isinstance(current, list) and isinstance(value, list)
        )
        if same_shape:
            live[key] = _merge_field(live=current, patch=value, kind=kind, path=_child(path, key), deleting=deleting)
        elif not deleting:
            if _is_directive(value):
                del live[key]
            else:
                live[key] = _clean(value)
    return live


def strategic_merge_patch(target: dict, patch: dict, kind: str) -> dict:
    """Apply a Kubernetes strategic merge patch to an object of built-in ``kind``.

    Directives: ``$patch: replace|delete`` (in maps and as list elements),
    ``$retainKeys``, ``$deleteFromPrimitiveList/<field>``, ``$setElementOrder/<field>``,
    and ``null`` deleting a map key.  Errors are ApiErrors with the status the
    real server answers (400 for malformed directives, 422 for lists of lists,
    500 for what upstream leaves unclassified, such as a missing merge key).
    """
    if not isinstance(patch, dict):
        raise errors.bad_request("invalid JSON document")
    try:
        return _merge_map(live=copy.deepcopy(target), patch=patch, kind=kind, path="")
    except _StrategicPatchError as failure:
        if failure.code == 400:
            raise errors.bad_request(failure.message) from None
        if failure.code == 422:
            raise errors.ApiError(422, "Invalid", failure.message) from None
        raise errors.internal_error(failure.message) from None


# -- dispatch ----------------------------------------------------------------------------------------


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError) as failure:
        raise errors.bad_request(f"error decoding patch: {failure}") from None


def apply_patch(target: dict, body: bytes, content_type: str, *, kind: str, strategic_supported: bool) -> dict:
    """Apply a PATCH request body by its media type.

    Strategic merge on a kind without Go types (``strategic_supported=False``:
    custom resources) is refused with 415, as the real server does; so is
    server-side apply, which the twin does not implement.
    """
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type == JSON_PATCH:
        return json_patch(target, _decode(body))
    if media_type == MERGE_PATCH:
        return json_merge_patch(target, _decode(body))
    if media_type == STRATEGIC_MERGE_PATCH and strategic_supported:
        patch = _decode(body)
        if not isinstance(patch, dict):
            raise errors.bad_request("invalid JSON document")
        return strategic_merge_patch(target, patch, kind)
    raise errors.unsupported_media_type(content_type)
