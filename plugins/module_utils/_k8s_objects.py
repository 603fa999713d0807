# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Reading fields of Kubernetes API objects that may not have the shape Kubernetes defines (collection-internal, pure).

The API server sends objects of a known schema; one that answers a field of another type (a proxy's error page
decoded as an object, a broken aggregated API, a test server) must fail with the object and the field named, not
with an AttributeError in whichever reader touches it first. Absent or null fields read as empty, as the API
leaves out what is not set.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import KubeApiError

_TYPE_NAMES: Dict[type, str] = {dict: "an object", list: "a list", str: "a string"}


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def describe_object(obj: Any) -> str:
    """``Node gpu-worker-001``, ``Pod ns/name``: what an error about an API object names (never raises)."""
    if not isinstance(obj, Mapping):
        return f"an API object that is {type_name(obj)}"
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "object"
    meta = obj.get("metadata")
    name, namespace = (meta.get("name"), meta.get("namespace")) if isinstance(meta, Mapping) else (None, None)
    if not isinstance(name, str) or not name:
        return f"a {kind} without a name"
    return f"{kind} {namespace}/{name}" if isinstance(namespace, str) and namespace else f"{kind} {name}"


def object_field(obj: Mapping[str, Any], *path: str, kind: type = dict) -> Any:
    """The field at ``path`` (``"status", "conditions"``) when it has the type the API defines, else an error.

    Absent or null reads as an empty one (the API leaves out what is not set). Another type is the API server
    answering what Kubernetes does not define: a KubeApiError naming the object and the field, rather than an
    AttributeError deep in a reader.
    """
    value: Any = obj
    for depth, key in enumerate(path):
        want = kind if depth == len(path) - 1 else dict
        value = value.get(key) if isinstance(value, Mapping) else None
        if value is None:
            return kind()
        if not isinstance(value, want):
            raise KubeApiError(
                f"{describe_object(obj)}: {'.'.join(path[: depth + 1])} is {type_name(value)}, "
                f"expected {_TYPE_NAMES.get(want, want.__name__)}",
                reason="MalformedObject",
            )
    return value


def object_items(obj: Mapping[str, Any], *path: str) -> List[Mapping[str, Any]]:
    """The list at ``path`` whose items are objects (conditions, containerStatuses, ownerReferences)."""
    items = object_field(obj, *path, kind=list)
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise KubeApiError(
                f"{describe_object(obj)}: {'.'.join(path)}[{index}] is {type_name(item)}, expected an object",
                reason="MalformedObject",
            )
    return items
