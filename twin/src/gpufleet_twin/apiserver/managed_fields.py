"""metadata.managedFields as the API server records them for writes that come over HTTP.

Upstream (k8s.io/apimachinery pkg/apis/meta/v1 ``ManagedFieldsEntry``; k8s.io/apiserver
``pkg/endpoints/handlers/fieldmanager`` and ``rest.go`` ``prefixFromUserAgent``; the Kubernetes docs
"Server-Side Apply", section "Field management"):

- Each entry is one (manager, operation, apiVersion, subresource) with the time of its last change and the
  fields it owns as ``fieldsV1`` (``{"f:spec": {"f:paused": {}}}``).
- The manager is the request's ``fieldManager`` query parameter, or else the User-Agent up to its first ``/``.
- A create, update or patch is operation ``Update``; a server-side apply is ``Apply``. An ``Update`` manager
  takes the fields whose value it changed; other managers lose them; a field removed leaves every entry;
  an entry left with no field is dropped. Writing a value equal to the stored one changes nothing.
- The API keeps no other time: this is how "who paused this pool, and when" is told.

Modelled coarsely: a list is one field (upstream keys list items by ``k:``/``v:``/``i:``), applied fields are
owned like updated ones (no conflicts), and writes to the status subresource and writes by the twin's
in-process controllers (straight to the store) record nothing.
"""

from __future__ import annotations

from typing import Any

from ..machinery.store import Obj

Path = tuple[str, ...]
# metadata fields no manager owns (the server sets them).
_SERVER_METADATA = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
    }
)
_UNOWNED_TOP = frozenset({"apiVersion", "kind", "status"})


def manager_of(query_manager: str, user_agent: str) -> str:
    """``fieldManager`` or the User-Agent up to its first ``/`` (at most 128 characters)."""
    if query_manager:
        return query_manager
    return (user_agent or "unknown").split("/", 1)[0][:128]


def leaves(obj: Any, prefix: Path = ()) -> dict[Path, Any]:
    """Every leaf field of an object (maps are walked, lists and scalars are leaves)."""
    found: dict[Path, Any] = {}
    for key, value in (obj or {}).items():
        if not prefix and key in _UNOWNED_TOP:
            continue
        if prefix == ("metadata",) and key in _SERVER_METADATA:
            continue
        path = (*prefix, str(key))
        if isinstance(value, dict) and value:
            found.update(leaves(value, path))
        else:
            found[path] = value
    return found


def _to_fields(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def _from_fields(tree: Any, prefix: Path = ()) -> set[Path]:
    paths: set[Path] = set()
    for key, value in (tree or {}).items():
        if not key.startswith("f:"):
            continue
        path = (*prefix, key[2:])
        children = _from_fields(value, path)
        paths |= children or {path}
    return paths


def record(
    old: Obj | None,
    new: Obj,
    *,
    manager: str,
    operation: str,
    api_version: str,
    now: str,
    subresource: str = "",
) -> None:
    """Set ``new.metadata.managedFields`` from ``old``'s after this manager's write."""
    before, after = leaves(old or {}), leaves(new)
    changed = {path for path, value in after.items() if path not in before or before[path] != value}
    removed = set(before) - set(after)
    entries: list[dict[str, Any]] = []
    mine: dict[str, Any] | None = None
    for entry in ((old or {}).get("metadata") or {}).get("managedFields") or []:
        owned = _from_fields(entry.get("fieldsV1"))
        key = (entry.get("manager"), entry.get("operation"), entry.get("subresource") or "")
        if key == (manager, operation, subresource):
            mine = dict(entry)
            mine["_owned"] = (owned - removed) | changed
            continue
        owned -= changed | removed
        if owned:
            entries.append({**entry, "fieldsV1": _to_fields(owned)})
    if mine is None and changed:
        mine = {"manager": manager, "operation": operation, "apiVersion": api_version, "_owned": changed}
        if subresource:
            mine["subresource"] = subresource
    if mine is not None:
        owned = mine.pop("_owned")
        if changed:
            mine["time"] = now
            mine["apiVersion"] = api_version
        if owned:
            entries.append({**mine, "fieldsType": "FieldsV1", "fieldsV1": _to_fields(owned)})
    new.setdefault("metadata", {})["managedFields"] = entries
