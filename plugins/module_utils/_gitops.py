# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""GitOps mode: a change written to the manifests in Git, and Argo CD's Application read (collection-internal).

Where Argo CD is the only writer of the operators' CRs, the collection does
not patch them: it writes the same fields into the CR's manifest in Git,
commits and pushes, waits until the Argo CD Application has synced that
commit, and then watches the rollout on the cluster as it would otherwise.

This file holds the pure parts:

- ``edit_manifest``: a JSON-merge-patch of fields applied to one document of
  a manifest file with ruamel.yaml's round trip (comments, quoting, key order
  and the other documents of the file kept), returning before/after;
- the commit message's trailers, by which a rollback finds the commits of a
  change to revert;
- ``application_view`` and the two decisions on it: may a stage start
  (``stage_refusal``), and has the Application reached a revision
  (``revision_outcome``).

The Git plumbing (commit, push, the folder lock) is ``_matrix_write``'s.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError, InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import HAS_RUAMEL

if HAS_RUAMEL:
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.error import YAMLError
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString, SingleQuotedScalarString

CHANGE_TRAILER = "Gpufleet-Change"
STAGE_TRAILER = "Gpufleet-Stage"
REVERTS_TRAILER = "Gpufleet-Reverts"


# -- manifests --------------------------------------------------------------------------------------


@dataclass
class ManifestEdit:
    """One manifest file after the edit."""

    path: str
    text: str
    changed: bool
    before: Dict[str, Any] = field(default_factory=dict)  # the edited document, as plain data
    after: Dict[str, Any] = field(default_factory=dict)


def _yaml(*, explicit_start: bool) -> Any:
    if not HAS_RUAMEL:
        raise InvalidInputError("ruamel.yaml is required to edit a manifest and keep its comments")
    handler = YAML()
    handler.preserve_quotes = True
    handler.width = 4096
    handler.indent(mapping=2, sequence=4, offset=2)
    handler.explicit_start = explicit_start
    return handler


def plain(value: Any) -> Any:
    """Round-trip YAML data as plain dicts, lists and scalars (for comparing and for diffs)."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, str):
        return str(value)
    return value


def _styled(old: Any, new: Any) -> Any:
    """The new scalar written in the old one's quoting, so a diff shows the value change only."""
    if isinstance(new, str) and not isinstance(new, (DoubleQuotedScalarString, SingleQuotedScalarString)):
        if isinstance(old, DoubleQuotedScalarString):
            return DoubleQuotedScalarString(new)
        if isinstance(old, SingleQuotedScalarString):
            return SingleQuotedScalarString(new)
    return new


def merge_into(target: Any, patch: Mapping[str, Any]) -> None:
    """RFC 7386 merge patch applied in place to a round-trip mapping (null removes the key)."""
    for key, value in patch.items():
        if value is None:
            if key in target:
                del target[key]
        elif isinstance(value, Mapping):
            child = target.get(key)
            if not isinstance(child, Mapping):
                child = CommentedMap()
                target[key] = child
            merge_into(child, value)
        else:
            target[key] = _styled(target.get(key), value)


def _matches(document: Any, *, kind: str, name: str) -> bool:
    if not isinstance(document, Mapping):
        return False
    metadata = document.get("metadata") or {}
    return str(document.get("kind") or "") == kind and str(metadata.get("name") or "") == name


def edit_manifest(text: str, *, path: str, kind: str, name: str, patch: Mapping[str, Any]) -> ManifestEdit:
    """Apply ``patch`` to the document of ``kind``/``name`` in a (multi-document) manifest file."""
    head, body = _split_head(text)
    handler = _yaml(explicit_start=False)
    try:
        documents = list(handler.load_all(body))
    except YAMLError as err:
        raise InvalidInputError(f"{path} is not valid YAML: {str(err).splitlines()[0]}") from err
    found = [document for document in documents if _matches(document, kind=kind, name=name)]
    if len(found) != 1:
        kinds = ", ".join(
            f"{document.get('kind')}/{(document.get('metadata') or {}).get('name')}"
            for document in documents
            if isinstance(document, Mapping)
        )
        raise InvalidInputError(
            f"{path} holds {'no' if not found else len(found)} {kind} named {name} (it holds: {kinds or 'nothing'}); "
            "name the file that holds it in gpufleet_gitops.manifests"
        )
    document = found[0]
    before = plain(document)
    merge_into(document, patch)
    after = plain(document)
    if before == after:
        return ManifestEdit(path=path, text=text, changed=False, before=before, after=after)
    stream = io.StringIO()
    handler.dump_all(documents, stream)
    return ManifestEdit(path=path, text=head + stream.getvalue(), changed=True, before=before, after=after)


def _split_head(text: str) -> Tuple[str, str]:
    """The comment lines and first ``---`` before the first document (ruamel.yaml drops them), and the rest."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("---"):
            return "".join(lines[: index + 1]), "".join(lines[index + 1 :])
        if stripped and not stripped.startswith("#"):
            break
    return "", text


@dataclass(frozen=True)
class ManagedObject:
    """A CR whose manifest lives in Git: Argo CD writes it, this collection edits the manifest."""

    kind: str
    name: str
    path: str  # relative to the repository's root

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.name}"


def managed_objects(
    manifests: Sequence[Mapping[str, Any]], *, where: str = "gpufleet_gitops.manifests"
) -> List[ManagedObject]:
    """Check and normalize the settings' list of managed manifests."""
    objects: List[ManagedObject] = []
    seen = set()
    for index, entry in enumerate(manifests or []):
        missing = [key for key in ("kind", "name", "path") if not str((entry or {}).get(key) or "").strip()]
        if missing:
            raise InvalidInputError(f"{where}[{index}] lacks {', '.join(missing)} (each entry: kind, name, path)")
        item = ManagedObject(kind=str(entry["kind"]), name=str(entry["name"]), path=str(entry["path"]).lstrip("/"))
        if item.key in seen:
            raise InvalidInputError(f"{where}[{index}]: {item.key} is listed twice")
        seen.add(item.key)
        objects.append(item)
    return objects


def find_managed(objects: Sequence[ManagedObject], *, kind: str, name: str) -> Optional[ManagedObject]:
    return next((item for item in objects if item.kind == kind and item.name == name), None)


# -- commit messages --------------------------------------------------------------------------------


def patch_leaves(patch: Mapping[str, Any], prefix: Tuple[str, ...] = ()) -> List[Tuple[Tuple[str, ...], Any]]:
    """Every (path, value) a merge patch sets (nulls included, as value None)."""
    leaves: List[Tuple[Tuple[str, ...], Any]] = []
    for key, value in patch.items():
        path = (*prefix, str(key))
        if isinstance(value, Mapping) and value:
            leaves.extend(patch_leaves(value, path))
        else:
            leaves.append((path, value))
    return leaves


def deferred_change(kind: str, name: str, patch: Mapping[str, Any], *, synced: bool, why: str = "") -> Dict[str, Any]:
    """A write to an object Argo CD writes from Git, left for a commit (``gitops_changes``). Once the Application
    synced that commit (``synced``) the cluster's object must not differ any more: GpuFleetError naming the fields."""
    change = {"kind": kind, "name": name, "patch": dict(patch)}
    if synced:
        fields = ", ".join(".".join(path) for path, _value in patch_leaves(patch))
        raise GpuFleetError(
            f"{kind} {name} is managed in Git and its Argo CD Application synced the change, yet the cluster's object "
            f"still differs in {fields} (wanted {json.dumps(dict(patch), sort_keys=True)}): check the manifest's path "
            "in gpufleet_gitops.manifests and the Application's ignoreDifferences (a field it ignores is not applied)",
            result={"gitops_changes": [change]},
        )
    return {**change, "why": why}


def commit_message(
    *, summary: str, change_id: str, stage: str, details: Sequence[str] = (), reverts: Sequence[str] = ()
) -> str:
    """A commit message whose trailers let a rollback find the change's commits (``git log --grep``)."""
    lines = [summary, ""]
    lines.extend(details)
    if details:
        lines.append("")
    if change_id:
        lines.append(f"{CHANGE_TRAILER}: {change_id}")
    if stage:
        lines.append(f"{STAGE_TRAILER}: {stage}")
    lines.extend(f"{REVERTS_TRAILER}: {commit}" for commit in reverts)
    return "\n".join(lines) + "\n"


def commits_to_revert(log: Sequence[Tuple[str, str]]) -> List[str]:
    """The change's commits not reverted yet, newest first, from ``(sha, message)`` pairs, newest first.

    A revert commit made by this collection names what it reverted in a
    ``Gpufleet-Reverts`` trailer (and carries the change's trailer too, so it
    shows up in the same log); those and the commits they name are skipped.
    """
    reverted = set()
    for _sha, message in log:
        for line in message.splitlines():
            if line.startswith(f"{REVERTS_TRAILER}:"):
                reverted.add(line.split(":", 1)[1].strip())
    return [
        sha
        for sha, message in log
        if sha not in reverted and f"\n{REVERTS_TRAILER}:" not in f"\n{message}" and not message.startswith("Revert")
    ]


# -- Argo CD Application ----------------------------------------------------------------------------

FAILED_PHASES = ("Failed", "Error")


@dataclass(frozen=True)
class ApplicationView:
    """What the Application's status says, in the words a report uses."""

    name: str
    namespace: str
    sync_status: str
    sync_revision: str
    health: str
    operation_phase: str
    operation_revision: str
    operation_message: str
    conditions: Tuple[str, ...]
    out_of_sync: Tuple[str, ...]  # "Kind/name" of the resources Argo CD sees OutOfSync

    @property
    def label(self) -> str:
        return f"Argo CD Application {self.namespace}/{self.name}"

    def describe(self) -> str:
        words = [
            f"sync {self.sync_status or 'unknown'} at revision {self.sync_revision[:12] or '(none)'}",
            f"health {self.health or 'unknown'}",
        ]
        if self.operation_phase:
            operation = f"last operation {self.operation_phase}"
            if self.operation_revision:
                operation += f" at {self.operation_revision[:12]}"
            if self.operation_message:
                operation += f" ({self.operation_message})"
            words.append(operation)
        if self.out_of_sync:
            words.append("OutOfSync: " + ", ".join(self.out_of_sync))
        if self.conditions:
            words.append("conditions: " + "; ".join(self.conditions))
        return ", ".join(words)


def application_view(app: Mapping[str, Any]) -> ApplicationView:
    metadata = app.get("metadata") or {}
    status = app.get("status") or {}
    sync = status.get("sync") or {}
    operation = status.get("operationState") or {}
    result = operation.get("syncResult") or {}
    revision = str(sync.get("revision") or "") or str((sync.get("revisions") or [""])[0] or "")
    conditions = tuple(
        f"{item.get('type', '')}: {item.get('message', '')}".strip(": ")
        for item in status.get("conditions") or []
        if isinstance(item, Mapping)
    )
    out_of_sync = tuple(
        f"{item.get('kind', '')}/{item.get('name', '')}"
        for item in status.get("resources") or []
        if isinstance(item, Mapping) and item.get("status") == "OutOfSync"
    )
    return ApplicationView(
        name=str(metadata.get("name") or ""),
        namespace=str(metadata.get("namespace") or ""),
        sync_status=str(sync.get("status") or ""),
        sync_revision=revision,
        health=str((status.get("health") or {}).get("status") or ""),
        operation_phase=str(operation.get("phase") or ""),
        operation_revision=str(
            result.get("revision") or (operation.get("operation") or {}).get("sync", {}).get("revision") or ""
        ),
        operation_message=str(operation.get("message") or ""),
        conditions=conditions,
        out_of_sync=out_of_sync,
    )


def _error_conditions(view: ApplicationView) -> List[str]:
    return [condition for condition in view.conditions if "Error" in condition.split(":", 1)[0]]


def synced(view: ApplicationView, *, out_of_sync_allowed: Sequence[str] = ()) -> bool:
    """Synced, or OutOfSync only through resources of the kinds allowed (the ClusterPolicy's defaulted fields,
    NVIDIA/gpu-operator#2795, where ignoreDifferences is not set)."""
    if view.sync_status == "Synced":
        return True
    if view.sync_status != "OutOfSync" or not view.out_of_sync or not out_of_sync_allowed:
        return False
    return all(item.split("/", 1)[0] in out_of_sync_allowed for item in view.out_of_sync)


def stage_refusal(
    view: ApplicationView, *, out_of_sync_allowed: Sequence[str] = (), require_healthy: bool = True
) -> str:
    """Why a stage must not start on this Application ('' when it may)."""
    problems = []
    if not synced(view, out_of_sync_allowed=out_of_sync_allowed):
        problems.append("it is not synced")
    if require_healthy and view.health != "Healthy":
        problems.append("it is not healthy")
    if view.operation_phase == "Running":
        problems.append("a sync is running")
    if _error_conditions(view):
        problems.append("it reports errors")
    if not problems:
        return ""
    return (
        f"{view.label} is not ready for a change ({', '.join(problems)}): {view.describe()}. "
        "Nothing was committed: bring the Application to Synced and Healthy (argocd app sync / argocd app get "
        f"{view.name}), then run the stage again."
    )


def revision_outcome(view: ApplicationView, revision: str, *, out_of_sync_allowed: Sequence[str] = ()) -> str:
    """``done`` when the Application synced ``revision``, ``failed`` when its sync of it failed, else ``waiting``."""
    at_revision = view.sync_revision == revision
    operated = view.operation_revision == revision or not view.operation_revision
    if at_revision and operated and view.operation_phase in FAILED_PHASES:
        return "failed"
    if view.operation_revision == revision and view.operation_phase in FAILED_PHASES:
        return "failed"
    if (
        at_revision
        and operated
        and view.operation_phase in ("Succeeded", "")
        and synced(view, out_of_sync_allowed=out_of_sync_allowed)
    ):
        return "done"
    return "waiting"
