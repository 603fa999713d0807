"""The comparison of the twin's Argo CD: which fields of a live object differ from its manifest.

Modelled on Argo CD's diff (the gitops-engine ``pkg/diff`` package Argo CD vendors):

- **Legacy (client-side) diff**, the default: a three-way comparison of the manifest, the configuration the
  controller last applied (``kubectl.kubernetes.io/last-applied-configuration``) and the live object.  A
  field the manifest sets whose live value differs is a difference; a field only the live object has
  (server defaults, CRD ``default`` values, fields another writer added) is not; a field the last apply
  set that the manifest no longer has, still live, is.  Lists compare whole (a custom resource is merged
  with a JSON merge patch, which replaces lists).
- **Server-side apply** (``syncOptions: [ServerSideApply=true]``): the structured-merge diff does not
  know CRD defaults (argoproj/argo-cd#11139), so a field the API server defaulted from the CRD schema
  that the manifest leaves out is a difference: this is NVIDIA/gpu-operator#2795 (the ClusterPolicy's
  deprecated ``spec.cdi.default``, schema default ``false``, never rendered by the chart: OutOfSync forever).
- ``status`` is never compared (``resource.compareoptions`` ``ignoreResourceStatusField``, ``all`` by
  default since Argo CD 3.0), nor the server's metadata.
- ``ignoreDifferences``: ``jsonPointers`` (RFC 6901) and the ``jqPathExpressions`` of the plain path form
  (``.spec.cdi.default``, ``.spec.a["b.c"]``, ``.spec.list[0]``); other jq expressions (``select``, ``..``)
  are refused with an InvalidSpecError condition rather than silently matching nothing.
  ``managedFieldsManagers`` is accepted and ignored (the twin keeps no managedFields).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from typing import Any

from ..machinery.crd_schema import apply_defaults

Obj = dict[str, Any]

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
TRACKING_ANNOTATION = "argocd.argoproj.io/tracking-id"
# metadata keys a manifest may set that are compared (the rest is the server's or ignored).
_COMPARED_METADATA = ("labels", "annotations")
# The annotation of a client-side apply is not compared (the tracking annotation is: Argo CD sets it on the
# target object before comparing, so an object that lacks it is OutOfSync until a sync adopts it).
_OWN_ANNOTATIONS = frozenset({LAST_APPLIED})


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def comparable(obj: Obj) -> Obj:
    """The part of a manifest or live object that is compared: no status, no server metadata."""
    result = {k: copy.deepcopy(v) for k, v in obj.items() if k not in ("status", "metadata")}
    meta = obj.get("metadata") or {}
    kept: Obj = {}
    for key in _COMPARED_METADATA:
        values = {k: v for k, v in (meta.get(key) or {}).items() if k not in _OWN_ANNOTATIONS}
        if values:
            kept[key] = values
    if kept:
        result["metadata"] = kept
    return result


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right if isinstance(left, bool) and isinstance(right, bool) else False
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        return float(left) == float(right)
    return json.dumps(left, sort_keys=True) == json.dumps(right, sort_keys=True)


def _set_fields(desired: Any, live: Any, pointer: str, out: list[str]) -> None:
    """Pointers of the fields ``desired`` sets that ``live`` lacks or holds another value of."""
    if isinstance(desired, dict) and isinstance(live, dict):
        for key, value in desired.items():
            child = f"{pointer}/{_escape(str(key))}"
            if key not in live:
                if value is not None:
                    out.append(child)
                continue
            _set_fields(value, live[key], child, out)
        return
    if not _same(desired, live):
        out.append(pointer)


def _removed_fields(last: Any, desired: Any, live: Any, pointer: str, out: list[str]) -> None:
    """Pointers of fields the last apply set, the manifest dropped and the live object still has."""
    if not (isinstance(last, dict) and isinstance(live, dict)):
        return
    desired = desired if isinstance(desired, dict) else {}
    for key, value in last.items():
        if key not in live:
            continue
        child = f"{pointer}/{_escape(str(key))}"
        if key not in desired:
            out.append(child)
        else:
            _removed_fields(value, desired[key], live[key], child, out)


def _defaulted_fields(desired: Obj, live: Obj, schema: Obj | None) -> list[str]:
    """Fields the CRD schema defaults that the manifest leaves out and the live object holds."""
    if not schema:
        return []
    defaulted = copy.deepcopy(desired)
    apply_defaults(defaulted, schema)
    out: list[str] = []
    _added(desired, defaulted, live, "", out)
    return out


def _added(before: Any, after: Any, live: Any, pointer: str, out: list[str]) -> None:
    if not (isinstance(before, dict) and isinstance(after, dict) and isinstance(live, dict)):
        return
    for key, value in after.items():
        child = f"{pointer}/{_escape(str(key))}"
        if key not in live:
            continue
        if key not in before:
            out.append(child)
        else:
            _added(before[key], value, live[key], child, out)


def differences(
    desired: Obj,
    live: Obj,
    *,
    last_applied: Obj | None = None,
    server_side: bool = False,
    schema: Obj | None = None,
    ignored: Iterable[str] = (),
) -> list[str]:
    """JSON pointers of the fields in which ``live`` differs from ``desired`` (empty: in sync)."""
    want, have = comparable(desired), comparable(live)
    found: list[str] = []
    _set_fields(want, have, "", found)
    if last_applied is not None:
        _removed_fields(comparable(last_applied), want, have, "", found)
    if server_side:
        found.extend(p for p in _defaulted_fields(want, have, schema) if p not in found)
    skip = list(ignored)
    return [p for p in found if not any(p == s or p.startswith(s + "/") for s in skip)]


def removal_patch(last_applied: Obj | None, desired: Obj) -> Obj:
    """A JSON merge patch that sets what ``desired`` sets and removes what the last apply set and it dropped."""
    patch = copy.deepcopy(desired)
    if last_applied:
        _null_removed(last_applied, patch)
    return patch


def _null_removed(last: Obj, patch: Obj) -> None:
    for key, value in last.items():
        if key not in patch:
            patch[key] = None
        elif isinstance(value, dict) and isinstance(patch[key], dict):
            _null_removed(value, patch[key])


_JQ_SEGMENT = re.compile(r'\.([A-Za-z_][A-Za-z0-9_-]*)|\["((?:[^"\\]|\\.)*)"\]|\[(\d+)\]')


def jq_path_to_pointer(expression: str) -> str:
    """The JSON pointer of a plain jq path (``.spec.cdi.default``); ValueError for other jq expressions."""
    text = expression.strip()
    if not text.startswith("."):
        raise ValueError(f'jqPathExpression {expression!r}: only plain paths (.a.b, .a["b"], .a[0]) are simulated')
    tokens: list[str] = []
    position = 0
    while position < len(text):
        match = _JQ_SEGMENT.match(text, position)
        if match is None:
            raise ValueError(f'jqPathExpression {expression!r}: only plain paths (.a.b, .a["b"], .a[0]) are simulated')
        tokens.append(next(group for group in match.groups() if group is not None))
        position = match.end()
    return "".join(f"/{_escape(t)}" for t in tokens)


def ignore_rules_for(rules: list[Obj], obj: Obj, *, group: str, kind: str) -> list[str]:
    """The pointers ``spec.ignoreDifferences`` ignores for ``obj`` (ValueError for an unsupported rule)."""
    meta = obj.get("metadata") or {}
    pointers: list[str] = []
    for rule in rules or []:
        if rule.get("kind") not in ("*", kind):
            continue
        if (rule.get("group") or "") not in (group, "*"):
            continue
        if rule.get("name") and rule["name"] != meta.get("name"):
            continue
        if rule.get("namespace") and rule["namespace"] != meta.get("namespace"):
            continue
        pointers.extend(str(p) for p in rule.get("jsonPointers") or [])
        pointers.extend(jq_path_to_pointer(str(e)) for e in rule.get("jqPathExpressions") or [])
    return pointers
