"""The twin's Argo CD application controller: Applications whose source is a local Git repository of plain
manifests, reconciled on the twin's simulated clock.

Usage
-----
- Enable: ``python -m gpufleet_twin serve --argocd`` (``--argocd-poll SECONDS`` sets the poll),
  ``process.start_twin(argocd=True, argocd_poll=None)``, or the scenario key ``argocd: true``
  (``argocd: {poll_seconds: 30}``).  Off by default: without it nothing below exists.
- Applications are read from the namespace ``argocd`` only (others are left alone, as a controller without
  ``--application-namespaces`` does).
- It installs the CRD ``applications.argoproj.io`` (``argoproj.io/v1alpha1`` ``Application``, the twin's own
  schema file ``crds/argocd/argoproj.io_applications.yaml``, see there) and the namespace ``argocd``.
- Application fields acted on: ``spec.source.repoURL`` (a local path or ``file://`` URL of a git
  repository; anything else is a ComparisonError), ``spec.source.targetRevision`` (branch, tag, ``HEAD``
  or empty, commit SHA), ``spec.source.path`` (a folder of ``.yaml``/``.yml``/``.json`` manifests,
  multi-document; ``spec.source.directory.recurse``), ``spec.destination`` (``server:
  https://kubernetes.default.svc`` or ``name: in-cluster``; ``namespace`` for namespaced manifests without
  one), ``spec.syncPolicy.automated`` (``prune``, ``selfHeal``), ``spec.syncPolicy.syncOptions``
  (``ServerSideApply=true``, ``CreateNamespace=true``), ``spec.ignoreDifferences`` (``group``, ``kind``,
  ``name``, ``namespace``, ``jsonPointers``, plain-path ``jqPathExpressions``; see ``argocd_diff``), the
  top-level ``operation`` (``{"sync": {"revision": ..., "prune": ...}}``, what ``argocd app sync`` writes)
  and the annotation ``argocd.argoproj.io/refresh`` (``normal``/``hard``: reconcile now, then removed).
  ``spec.project`` is stored, not checked (no AppProject is simulated).
- Status written: ``status.sync`` {status Synced/OutOfSync/Unknown, revision (the commit last compared),
  comparedTo}, ``status.health.status`` (Healthy/Progressing/Degraded/Missing), ``status.resources[]``
  (with ``requiresPruning``), ``status.operationState`` {operation, phase Running/Succeeded/Failed/Error,
  message, syncResult {revision, source, resources[]}, startedAt, finishedAt}, ``status.history[]``,
  ``status.reconciledAt``, ``status.sourceType: Directory``, ``status.conditions`` (ComparisonError,
  InvalidSpecError, SyncError).  Only fields of Argo CD's types (``pkg/apis/application/v1alpha1/types.go``),
  so the real CRD's schema keeps every one (``tests/twin/sim/test_argocd_crd.py``).  Which fields of an
  OutOfSync resource differ (JSON pointers) is not status (``ResourceStatus`` has no such field; ``argocd app
  diff`` computes it): ``GET /admin/argocd`` lists them under ``differences`` {"<ns>/<app>": {"<group>/<kind>/
  <ns>/<name>": [pointers]}}, ``ArgoCDController.differences(namespace, name)`` in process.  Events on the
  Application (component ``argocd-application-controller``):
  ``OperationStarted`` ("Initiated automated sync to '<sha>'"), ``OperationCompleted`` ("Sync operation to
  <sha> succeeded"; Warning when it failed), ``ResourceUpdated`` ("Updated sync status: Synced -> OutOfSync",
  the same for health).
- Writes: every object a sync creates, changes or prunes is written through the twin's store as the
  field manager ``argocd-controller`` (``FIELD_MANAGER``): counted in ``GET /admin/report`` under
  ``writes_by_field_manager``, and listed with its revision in ``GET /admin/argocd`` (``writes``).  Synced
  objects carry the tracking annotation ``argocd.argoproj.io/tracking-id: <app>:<group>/<kind>:<ns>/<name>``
  (Argo CD 3.x's default annotation tracking) and, without ServerSideApply, the
  ``kubectl.kubernetes.io/last-applied-configuration`` annotation of a client-side apply.
- Timing: the repository is polled every ``poll_seconds`` simulated seconds, 180 by default: Argo CD
  re-reads Git on each application resync, ``timeout.reconciliation`` in argocd-cm (the controller's
  ``--app-resync``), 180 s up to 2.x and 120 s plus up to 60 s of jitter (``--app-resync-jitter``) in 3.x
  (argo-cd.readthedocs.io, operator-manual/server-commands/argocd-application-controller, release-2.9 and
  release-3.4; the webhook page: "polls Git repositories every three minutes"): 180 s is the longest a
  commit waits, without jitter so runs repeat.  A change to an Application, its refresh annotation or a
  change to a live object it manages is compared at once against the last resolved revision (the real
  controller watches managed resources); selfHeal re-syncs drift at once after a sync, then backs off 2 s,
  6 s, 18 s... up to 300 s between attempts at one revision (``--self-heal-backoff-*``, counted in
  ``operation.sync.autoHealAttemptsCount``).  An automated sync that failed is not retried at the same
  revision (a SyncError condition ``Failed last sync attempt to [<sha>]: ...``).  Tests speed it up with the refresh
  annotation, ``POST /admin/clock/advance {"seconds": 180}``, or a shorter ``argocd_poll``.
- Faults (``harness/faults.py``): ``argocd_sync_stalls`` {application?, namespace="argocd", mode="sync"}: no
  sync runs for the Application (every one when ``application`` is absent), automated or requested; with
  ``mode: controller`` the controller stops reconciling it altogether (status frozen, ``reconciledAt``
  stops).  ``argocd_repo_unreachable`` {repoURL?}: reading the repository fails (every repository when
  ``repoURL`` is absent): sync status Unknown with a ComparisonError condition.  Both end when removed
  (``DELETE /admin/faults``) or after ``duration``.

Modelled on Argo CD 3.x: ``controller/appcontroller.go`` (refresh; ``autoSync``: once per revision unless
selfHeal with its back-off, no retry of a failed revision, prune only when allowed), ``controller/state.go``
(comparison, conditions), gitops-engine's ``pkg/health`` (Deployment, DaemonSet, StatefulSet, Pod checks;
a custom resource without a health check, such as NVIDIA's ClusterPolicy, has no health and does not
affect the Application's) and ``pkg/diff``
(``argocd_diff``).  Not modelled: Helm/Kustomize/Jsonnet/plugin sources, multiple sources, remote
repositories and credentials, AppProjects, sync waves and hooks, retries (``syncPolicy.retry`` and the
automated sync's default of 5), sync
windows, ``RespectIgnoreDifferences``, Replace/Force, and the webhook.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ..apiserver.admin import json_response, protected
from ..apiserver.server import install_crds, load_crd_manifests
from ..machinery import errors
from ..machinery.patching import json_merge_patch
from ..machinery.registry import ResourceType
from ..machinery.store import WatchEvent
from ..machinery.wake import Waker
from . import argocd_diff as diff
from .argocd_git import Manifests, SourceError, read_manifests, resolve_revision

if TYPE_CHECKING:
    from ..apiserver.cluster import Twin

log = logging.getLogger(__name__)

Obj = dict[str, Any]

NAMESPACE = "argocd"
GROUP = "argoproj.io"
API_VERSION = f"{GROUP}/v1alpha1"
FIELD_MANAGER = "argocd-controller"
POLL_SECONDS = 180.0
# selfHeal's back-off between attempts at the same revision: --self-heal-backoff-timeout-seconds 2,
# --self-heal-backoff-factor 3, --self-heal-backoff-cap-seconds 300 (cmd/argocd-application-controller).
SELF_HEAL_BACKOFF = (2.0, 3.0, 300.0)
REFRESH_ANNOTATION = "argocd.argoproj.io/refresh"
IN_CLUSTER_SERVER = "https://kubernetes.default.svc"
CRD_FILE = Path(__file__).resolve().parent.parent / "crds" / "argocd" / "argoproj.io_applications.yaml"
# gitops-engine's health order: the Application's health is the worst of its resources'.
HEALTH_ORDER = ("Healthy", "Suspended", "Progressing", "Missing", "Degraded", "Unknown")


@dataclass
class _AppMemory:
    """What the controller remembers of one Application between passes."""

    revision: str | None = None  # last resolved commit
    manifests: Manifests | None = None
    polled_at: float = 0.0
    finished_at: float | None = None  # when the last operation finished
    heal_due: float | None = None  # when selfHeal may sync again (its back-off)
    applied: dict[tuple[str, str, str, str], Obj] = field(default_factory=dict)  # key -> last applied manifest
    # The JSON pointers that differ, by resource key "<group>/<kind>/<namespace>/<name>" (gitops-engine's
    # ResourceKey): what ``argocd app diff`` shows.  Kept here, not in the status: the Application's
    # ResourceStatus has no such field (the real CRD's schema prunes it).
    differences: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class _Resource:
    rtype: ResourceType
    namespace: str | None
    name: str
    desired: Obj | None
    live: Obj | None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.rtype.group, self.rtype.plural, self.namespace or "", self.name)


class ArgoCDController:
    name = "argocd-application-controller"

    def __init__(self, twin: Twin, *, poll_seconds: float = POLL_SECONDS) -> None:
        self.twin = twin
        self.store = twin.store
        self.clock = twin.clock
        self.poll_seconds = poll_seconds
        app_type = twin.registry.get(GROUP, "applications")
        assert app_type is not None, "install the Application CRD first"
        self.app_type = app_type
        self.memory: dict[tuple[str, str], _AppMemory] = {}
        self.writes: list[Obj] = []
        self.writes_by_verb_resource: dict[str, int] = {}
        # Fault state (``harness/faults.py``): stalled Applications ("ns/name" or "*") by mode, unreachable repos.
        self.stalled: dict[str, list[str]] = {}
        self.unreachable: list[str] = []
        self._tracked: set[tuple[str, str, str, str]] = set()
        self._own_write = False
        self._waker: Waker | None = None

    # -- loop -------------------------------------------------------------------------------------------
    async def run(self, twin: Twin) -> None:
        self._waker = Waker(self.store, twin.clock, on_event=self._relevant)
        while True:
            try:
                self.reconcile_all()
            except errors.ApiError as problem:  # a write lost a race: the next pass retries it
                log.debug("argocd reconcile: %s", problem)
            except Exception:
                log.exception("argocd reconcile failed")
            await self._waker.wait(self._next_due())
            await asyncio.sleep(0)

    def poke(self) -> None:
        if self._waker is not None:
            self._waker.poke()

    def _relevant(self, event: WatchEvent) -> bool:
        if self._own_write:
            return False
        if event.rtype.key == self.app_type.key:
            return True
        meta = event.obj.get("metadata") or {}
        key = (event.rtype.group, event.rtype.plural, meta.get("namespace") or "", meta.get("name") or "")
        return key in self._tracked

    def _next_due(self) -> float:
        now = self.clock.now()
        due = [m.polled_at + self.poll_seconds - now for m in self.memory.values()]
        # selfHeal's back-off, while it is still ahead.
        due += [m.heal_due - now for m in self.memory.values() if m.heal_due is not None and m.heal_due > now]
        return max(0.5, min(due, default=self.poll_seconds))

    def reconcile_all(self) -> None:
        # Only the controller's own namespace, as without --application-namespaces.
        apps = self.store.list(self.app_type, NAMESPACE)
        present = {(a["metadata"]["namespace"], a["metadata"]["name"]) for a in apps}
        for gone in set(self.memory) - present:
            del self.memory[gone]
        self._tracked = {k for m in self.memory.values() for k in m.applied}
        for app in apps:
            if "controller" in self._stall_modes(app):
                continue
            try:
                self.reconcile(app)
            except errors.ApiError as problem:
                if problem.code != 409:
                    raise

    # -- one Application --------------------------------------------------------------------------------
    def reconcile(self, app: Obj) -> None:
        meta = app["metadata"]
        key = (meta["namespace"], meta["name"])
        memory = self.memory.setdefault(key, _AppMemory())
        now = self.clock.now()
        refresh = (meta.get("annotations") or {}).get(REFRESH_ANNOTATION)
        status: Obj = dict(app.get("status") or {})
        conditions: list[Obj] = []
        try:
            self._check_destination(app)
            ignore = self._ignore_rules(app)
            if refresh or memory.manifests is None or now - memory.polled_at >= self.poll_seconds:
                memory.polled_at = now
                memory.manifests = self._load(app)
                memory.revision = memory.manifests.revision
            assert memory.manifests is not None
            resources = self._resources(app, memory)
        except SourceError as problem:
            memory.polled_at = now
            conditions.append(self._condition("ComparisonError", _comparison_message(str(problem)), app))
            self._write_status(app, status, conditions, sync_status="Unknown", refresh=bool(refresh))
            return
        except ValueError as problem:
            conditions.append(self._condition("InvalidSpecError", str(problem), app))
            self._write_status(app, status, conditions, sync_status="Unknown", refresh=bool(refresh))
            return
        compared = self._compare(app, memory, resources, ignore)
        status["resources"] = compared
        sync_status = "Synced" if all(r["status"] == "Synced" for r in compared) else "OutOfSync"
        status["health"] = {"status": _worst(r.get("health", {}).get("status") for r in compared)}
        status["sync"] = {
            "status": sync_status,
            "revision": memory.revision,
            "comparedTo": {"source": app["spec"].get("source") or {}, "destination": app["spec"].get("destination")},
        }
        operation, refused = self._operation_to_run(app, memory, sync_status, compared)
        if refused is not None:
            conditions.append(self._condition("SyncError", refused, app))
        if operation is not None:
            self._write_status(app, status, conditions, sync_status=None, refresh=bool(refresh))
            self._sync(app, memory, operation, resources)
            return
        self._write_status(app, status, conditions, sync_status=None, refresh=bool(refresh))

    def _check_destination(self, app: Obj) -> None:
        destination = (app.get("spec") or {}).get("destination") or {}
        server, name = destination.get("server"), destination.get("name")
        if server and server != IN_CLUSTER_SERVER:
            raise ValueError(
                f"application destination server '{server}' and namespace '{destination.get('namespace', '')}' "
                f"do not match any of the allowed destinations in project '{app['spec'].get('project', '')}' "
                f"(the twin is the only cluster: {IN_CLUSTER_SERVER})"
            )
        if name and name != "in-cluster":
            raise ValueError(f"unable to find destination server: there are no clusters with this name: {name}")

    def _ignore_rules(self, app: Obj) -> list[Obj]:
        rules = (app.get("spec") or {}).get("ignoreDifferences") or []
        for rule in rules:
            for expression in rule.get("jqPathExpressions") or []:
                diff.jq_path_to_pointer(str(expression))
        return list(rules)

    def _load(self, app: Obj) -> Manifests:
        source = (app.get("spec") or {}).get("source") or {}
        repo_url = str(source.get("repoURL") or "")
        if "*" in self.unreachable or repo_url in self.unreachable:
            raise SourceError(f"failed to list refs: dial tcp: lookup {repo_url}: i/o timeout (repository unreachable)")
        revision = resolve_revision(repo_url, source.get("targetRevision"))
        recurse = bool((source.get("directory") or {}).get("recurse"))
        return read_manifests(repo_url, revision, str(source.get("path") or "."), recurse=recurse)

    def _resources(self, app: Obj, memory: _AppMemory) -> list[_Resource]:
        assert memory.manifests is not None
        destination_ns = ((app.get("spec") or {}).get("destination") or {}).get("namespace") or None
        found: dict[tuple[str, str, str, str], _Resource] = {}
        for manifest in memory.manifests.objects:
            rtype = self._rtype(manifest)
            meta = manifest.get("metadata") or {}
            namespace = (meta.get("namespace") or destination_ns or "default") if rtype.namespaced else None
            live = self.store.try_get(rtype, namespace, meta["name"])
            resource = _Resource(rtype, namespace, meta["name"], manifest, live)
            found[resource.key] = resource
        # Objects an earlier sync applied that the manifests no longer have: candidates for pruning.
        for key in list(memory.applied):
            if key in found:
                continue
            known = self.twin.registry.get(key[0], key[1])
            live = None if known is None else self.store.try_get(known, key[2] or None, key[3])
            if known is None or live is None or not self._tracks(app, live):
                memory.applied.pop(key, None)
                continue
            found[key] = _Resource(known, key[2] or None, key[3], None, live)
        return list(found.values())

    def _rtype(self, manifest: Obj) -> ResourceType:
        api_version = str(manifest.get("apiVersion") or "")
        group = api_version.rpartition("/")[0]
        for rtype in self.twin.registry.all():
            if rtype.kind == manifest["kind"] and rtype.group == group:
                return rtype
        raise SourceError(
            f"The Kubernetes API could not find {group or 'core'}/{manifest['kind']} for requested resource "
            f'{(manifest.get("metadata") or {}).get("name")}. Make sure the "{manifest["kind"]}" CRD is installed '
            "on the destination cluster."
        )

    def _tracks(self, app: Obj, live: Obj) -> bool:
        tracking = ((live.get("metadata") or {}).get("annotations") or {}).get(diff.TRACKING_ANNOTATION, "")
        return tracking.startswith(f"{app['metadata']['name']}:")

    def _compare(self, app: Obj, memory: _AppMemory, resources: list[_Resource], ignore: list[Obj]) -> list[Obj]:
        server_side = "ServerSideApply=true" in _sync_options(app)
        out = []
        memory.differences = {}
        for resource in resources:
            entry: Obj = {
                "group": resource.rtype.group,
                "version": resource.rtype.version,
                "kind": resource.rtype.kind,
                "name": resource.name,
            }
            if resource.namespace:
                entry["namespace"] = resource.namespace
            if resource.desired is None:
                entry.update(status="OutOfSync", requiresPruning=True)
            elif resource.live is None:
                entry.update(status="OutOfSync", health={"status": "Missing"})
            else:
                differing = diff.differences(
                    self._target(app, resource),
                    resource.live,
                    last_applied=memory.applied.get(resource.key) or _last_applied(resource.live),
                    server_side=server_side,
                    schema=resource.rtype.schema,
                    ignored=diff.ignore_rules_for(
                        ignore, resource.live, group=resource.rtype.group, kind=resource.rtype.kind
                    ),
                )
                entry["status"] = "OutOfSync" if differing else "Synced"
                if differing:
                    key = f"{resource.rtype.group}/{resource.rtype.kind}/{resource.namespace or ''}/{resource.name}"
                    memory.differences[key] = differing
            if resource.live is not None:
                health = _health(resource.rtype.kind, resource.live)
                if health is not None:
                    entry["health"] = {"status": health}
            out.append(entry)
        return sorted(out, key=lambda e: (e["group"], e["kind"], e.get("namespace", ""), e["name"]))

    # -- sync --------------------------------------------------------------------------------------------
    def _operation_to_run(
        self, app: Obj, memory: _AppMemory, sync_status: str, compared: list[Obj]
    ) -> tuple[Obj | None, str | None]:
        """The sync to run now (requested, or automated as ``autoSync`` decides), and a SyncError message."""
        requested = app.get("operation")
        if "sync" in self._stall_modes(app):
            return None, None
        if isinstance(requested, dict) and requested.get("sync") is not None:
            return requested, None
        automated = ((app.get("spec") or {}).get("syncPolicy") or {}).get("automated")
        if automated is None or sync_status != "OutOfSync" or (automated.get("enabled") is False):
            return None, None
        only_pruning = all(r["status"] == "Synced" or r.get("requiresPruning") for r in compared)
        if only_pruning and not automated.get("prune"):
            return None, None
        sync: Obj = {"revision": memory.revision, "prune": bool(automated.get("prune"))}
        last = (app.get("status") or {}).get("operationState") or {}
        if (last.get("syncResult") or {}).get("revision") == memory.revision:
            # Already attempted: a failed attempt is not retried; a successful one is redone only by selfHeal,
            # after its back-off (autoHealAttemptsCount attempts so far at this revision).
            if last.get("phase") in ("Failed", "Error"):
                return None, f"Failed last sync attempt to [{memory.revision}]: {last.get('message', '')}"
            if not automated.get("selfHeal"):
                return None, None
            attempts = int((((last.get("operation") or {}).get("sync") or {}).get("autoHealAttemptsCount")) or 0)
            memory.heal_due = (memory.finished_at or 0.0) + self_heal_delay(attempts)
            if memory.heal_due > self.clock.now():
                return None, None
            sync["autoHealAttemptsCount"] = attempts + 1
        return {"sync": sync, "initiatedBy": {"automated": True}}, None

    def _sync(self, app: Obj, memory: _AppMemory, operation: Obj, resources: list[_Resource]) -> None:
        started = self.clock.iso()
        sync = operation.get("sync") or {}
        target = str(sync.get("revision") or memory.revision or "")
        try:
            if target != memory.revision:
                # ``argocd app sync --revision X``: the manifests of that revision, not the target's.
                source = (app.get("spec") or {}).get("source") or {}
                target = resolve_revision(str(source.get("repoURL") or ""), target)
                at_revision = _AppMemory(applied=memory.applied, revision=target, manifests=self._load_at(app, target))
                resources = self._resources(app, at_revision)
        except SourceError as problem:
            memory.finished_at = self.clock.now()
            self._finish(app, operation, started=started, phase="Error", message=f"ComparisonError: {problem}")
            return
        self._set_phase(app, operation, started, target)
        results, failed = self._apply_all(app, memory, resources, target, prune=bool(sync.get("prune")))
        memory.finished_at = self.clock.now()
        if failed:
            message = f"one or more objects failed to apply, reason: {failed[0]}"
            self._finish(
                app, operation, started=started, phase="Failed", message=message, target=target, results=results
            )
        else:
            message = "successfully synced (all tasks run)"
            self._finish(
                app, operation, started=started, phase="Succeeded", message=message, target=target, results=results
            )

    def _load_at(self, app: Obj, revision: str) -> Manifests:
        source = (app.get("spec") or {}).get("source") or {}
        recurse = bool((source.get("directory") or {}).get("recurse"))
        return read_manifests(
            str(source.get("repoURL") or ""), revision, str(source.get("path") or "."), recurse=recurse
        )

    def _apply_all(
        self, app: Obj, memory: _AppMemory, resources: list[_Resource], revision: str, *, prune: bool
    ) -> tuple[list[Obj], list[str]]:
        results: list[Obj] = []
        failed: list[str] = []
        server_side = "ServerSideApply=true" in _sync_options(app)
        for resource in resources:
            result: Obj = {
                "group": resource.rtype.group,
                "version": resource.rtype.version,
                "kind": resource.rtype.kind,
                "namespace": resource.namespace or "",
                "name": resource.name,
                "syncPhase": "Sync",
                "hookPhase": "Running",
            }
            try:
                if resource.desired is None:
                    if not prune:
                        result.update(status="PruneSkipped", message="ignored (requires pruning)")
                    else:
                        self._delete(resource)
                        memory.applied.pop(resource.key, None)
                        result.update(status="Pruned", message="pruned")
                else:
                    result["message"] = self._apply(app, memory, resource, server_side=server_side)
                    result["status"] = "Synced"
                result["hookPhase"] = "Succeeded"
            except errors.ApiError as problem:
                result.update(status="SyncFailed", hookPhase="Failed", message=problem.message)
                failed.append(problem.message)
            results.append(result)
        return results, failed

    @staticmethod
    def _target(app: Obj, resource: _Resource) -> Obj:
        """The manifest as the controller applies it: its namespace and the tracking annotation set."""
        assert resource.desired is not None
        target = json.loads(json.dumps(resource.desired))
        meta = target.setdefault("metadata", {})
        if resource.namespace:
            meta["namespace"] = resource.namespace
        group_kind = f"{resource.rtype.group}/{resource.rtype.kind}"
        meta.setdefault("annotations", {})[diff.TRACKING_ANNOTATION] = (
            f"{app['metadata']['name']}:{group_kind}:{resource.namespace or ''}/{resource.name}"
        )
        return target

    def _apply(self, app: Obj, memory: _AppMemory, resource: _Resource, *, server_side: bool) -> str:
        assert resource.desired is not None
        desired = self._target(app, resource)
        annotations = desired["metadata"]["annotations"]
        if not server_side:
            annotations[diff.LAST_APPLIED] = json.dumps(resource.desired, sort_keys=True, separators=(",", ":"))
        self._ensure_namespace(app, resource)
        if resource.live is None:
            self._write("create", resource.rtype, lambda: self.store.create(resource.rtype, desired))
            verb = "created"
        else:
            previous = memory.applied.get(resource.key) or _last_applied(resource.live)
            patch = diff.removal_patch(previous, desired)
            updated = json_merge_patch(json.loads(json.dumps(resource.live)), patch)
            updated["metadata"]["resourceVersion"] = resource.live["metadata"]["resourceVersion"]
            self._write("patch", resource.rtype, lambda: self.store.update(resource.rtype, updated))
            verb = "configured" if not server_side else "serverside-applied"
        memory.applied[resource.key] = resource.desired
        self._tracked.add(resource.key)
        kind = resource.rtype.kind.lower()
        group = f".{resource.rtype.group}" if resource.rtype.group else ""
        return f"{kind}{group}/{resource.name} {verb}"

    def _ensure_namespace(self, app: Obj, resource: _Resource) -> None:
        if not resource.namespace or "CreateNamespace=true" not in _sync_options(app):
            return
        ns_type = self.twin.registry.get("", "namespaces")
        assert ns_type is not None
        if self.store.try_get(ns_type, None, resource.namespace) is None:
            namespace = {"metadata": {"name": resource.namespace}}
            self._write("create", ns_type, lambda: self.store.create(ns_type, namespace))

    def _delete(self, resource: _Resource) -> None:
        self._write(
            "delete", resource.rtype, lambda: self.store.delete(resource.rtype, resource.namespace, resource.name)
        )

    def _write(self, verb: str, rtype: ResourceType, action: Any) -> Obj:
        resource = f"{rtype.plural}.{rtype.group}" if rtype.group else rtype.plural
        self._own_write = True
        try:
            obj = action()
        finally:
            self._own_write = False
        label = f"{verb} {resource}"
        self.writes_by_verb_resource[label] = self.writes_by_verb_resource.get(label, 0) + 1
        meta = obj.get("metadata") or {}
        self.writes.append(
            {
                "manager": FIELD_MANAGER,
                "verb": verb,
                "resource": resource,
                "namespace": meta.get("namespace", ""),
                "name": meta.get("name", ""),
                "at": self.clock.iso(),
            }
        )
        recorder = getattr(self.twin.sim, "recorder", None)
        if recorder is not None and hasattr(recorder, "record_write"):
            recorder.record_write(FIELD_MANAGER, verb, resource)
        return obj

    # -- status ------------------------------------------------------------------------------------------
    def _event(self, app: Obj, reason: str, message: str, *, warning: bool = False) -> None:
        """An Event on the Application, as the controller's ``logAppEvent`` records them."""
        events = getattr(self.twin.sim, "events", None)
        if events is None:
            return
        meta = app["metadata"]
        involved = {
            "apiVersion": API_VERSION,
            "kind": "Application",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta.get("uid", ""),
        }
        events.record(
            involved,
            reason=reason,
            message=message,
            component="argocd-application-controller",
            event_type="Warning" if warning else "Normal",
        )

    def _set_phase(self, app: Obj, operation: Obj, started: str, revision: str) -> None:
        automated = bool((operation.get("initiatedBy") or {}).get("automated"))
        self._event(app, "OperationStarted", f"Initiated {'automated ' if automated else ''}sync to '{revision}'")
        state = {
            "operation": _operation_record(operation),
            "phase": "Running",
            "message": "one or more tasks are running",
            "startedAt": started,
            "syncResult": {"revision": revision, "source": (app.get("spec") or {}).get("source") or {}},
        }
        self._patch_app(app, {"status": {"operationState": state}})

    def _finish(
        self,
        app: Obj,
        operation: Obj,
        *,
        started: str,
        phase: str,
        message: str,
        target: str | None = None,
        results: list[Obj] | None = None,
    ) -> None:
        finished = self.clock.iso()
        outcome = "succeeded" if phase == "Succeeded" else f"failed: {message}"
        self._event(
            app, "OperationCompleted", f"Sync operation to {target or ''} {outcome}", warning=phase != "Succeeded"
        )
        source = (app.get("spec") or {}).get("source") or {}
        state: Obj = {
            "operation": _operation_record(operation),
            "phase": phase,
            "message": message,
            "startedAt": started,
            "finishedAt": finished,
            "syncResult": {"revision": target or "", "source": source, "resources": results or []},
        }
        current = self.store.try_get(self.app_type, app["metadata"]["namespace"], app["metadata"]["name"]) or app
        patch: Obj = {"operation": None, "status": {"operationState": state}}
        if phase == "Succeeded" and target:
            history = list((current.get("status") or {}).get("history") or [])
            history.append(
                {
                    "id": (history[-1]["id"] + 1) if history else 0,
                    "revision": target,
                    "deployStartedAt": started,
                    "deployedAt": finished,
                    "source": source,
                    "initiatedBy": operation.get("initiatedBy") or {"username": "admin"},
                }
            )
            patch["status"]["history"] = history[-10:]  # revisionHistoryLimit default 10
        self._patch_app(current, patch)
        self.poke()  # compare again now that the objects changed

    def _write_status(
        self, app: Obj, status: Obj, conditions: list[Obj], *, sync_status: str | None, refresh: bool
    ) -> None:
        status["reconciledAt"] = self.clock.iso()
        status["sourceType"] = "Directory"
        if sync_status is not None:
            sync = dict(status.get("sync") or {})
            sync["status"] = sync_status
            status["sync"] = sync
        # None removes the field in the merge patch below.
        status["conditions"] = conditions or None
        before = app.get("status") or {}
        for what, field_name in (("sync", "sync"), ("health", "health")):
            old = (before.get(field_name) or {}).get("status")
            new = (status.get(field_name) or {}).get("status")
            if old and new and old != new:
                self._event(app, "ResourceUpdated", f"Updated {what} status: {old} -> {new}")
        patch: Obj = {"status": status}
        if refresh:
            patch["metadata"] = {"annotations": {REFRESH_ANNOTATION: None}}
        self._patch_app(app, patch, only_if_changed=not refresh)

    def _patch_app(self, app: Obj, patch: Obj, *, only_if_changed: bool = False) -> None:
        meta = app["metadata"]
        current = self.store.try_get(self.app_type, meta["namespace"], meta["name"])
        if current is None:
            return
        updated = json_merge_patch(json.loads(json.dumps(current)), patch)
        if only_if_changed and _without_reconciled(updated) == _without_reconciled(current):
            return
        self._own_write = True
        try:
            self.store.update(self.app_type, updated)
        finally:
            self._own_write = False

    def _condition(self, kind: str, message: str, app: Obj) -> Obj:
        for existing in (app.get("status") or {}).get("conditions") or []:
            if existing.get("type") == kind and existing.get("message") == message:
                return dict(existing)
        return {"type": kind, "message": message, "lastTransitionTime": self.clock.iso()}

    def _stall_modes(self, app: Obj) -> list[str]:
        meta = app["metadata"]
        modes = self.stalled.get(f"{meta['namespace']}/{meta['name']}", []) + self.stalled.get("*", [])
        return modes

    # -- admin ---------------------------------------------------------------------------------------------
    def differences(self, namespace: str, name: str) -> dict[str, list[str]]:
        """The JSON pointers of each OutOfSync resource of an Application at its last comparison, by resource key
        ``<group>/<kind>/<namespace>/<name>`` (what ``argocd app diff`` shows; not part of the status)."""
        memory = self.memory.get((namespace, name))
        return {key: list(pointers) for key, pointers in (memory.differences if memory else {}).items()}

    def describe(self) -> Obj:
        return {
            "field_manager": FIELD_MANAGER,
            "poll_seconds": self.poll_seconds,
            "writes": list(self.writes),
            "differences": {
                f"{namespace}/{name}": self.differences(namespace, name)
                for namespace, name in sorted(self.memory)
                if self.memory[(namespace, name)].differences
            },
            "stalled": {k: list(v) for k, v in self.stalled.items() if v},
            "unreachable": list(self.unreachable),
        }

    def routes(self) -> list[tuple[str, str, Any]]:
        async def show(request: web.Request) -> web.StreamResponse:
            return json_response(self.describe())

        return [("GET", "/admin/argocd", protected(self.twin.token, show))]


def self_heal_delay(attempts: int) -> float:
    """Seconds selfHeal waits after ``attempts`` heals at one revision (``wait.Backoff`` 2 s x3, capped at 300 s)."""
    if attempts <= 0:
        return 0.0
    initial, factor, cap = SELF_HEAL_BACKOFF
    return min(initial * factor ** (attempts - 1), cap)


def _sync_options(app: Obj) -> list[str]:
    return [str(o) for o in (((app.get("spec") or {}).get("syncPolicy") or {}).get("syncOptions") or [])]


def _last_applied(live: Obj | None) -> Obj | None:
    raw = (((live or {}).get("metadata") or {}).get("annotations") or {}).get(diff.LAST_APPLIED)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _operation_record(operation: Obj) -> Obj:
    record = {k: v for k, v in operation.items() if k in ("sync", "initiatedBy", "info", "retry")}
    record.setdefault("initiatedBy", {"username": "admin"})
    return record


def _without_reconciled(app: Obj) -> str:
    status = dict(app.get("status") or {})
    status.pop("reconciledAt", None)
    return json.dumps({"status": status, "operation": app.get("operation")}, sort_keys=True)


def _comparison_message(detail: str) -> str:
    return (
        "Failed to load target state: failed to generate manifest for source 1 of 1: "
        f"rpc error: code = Unknown desc = {detail}"
    )


def _worst(statuses: Any) -> str:
    found = [s for s in statuses if s in HEALTH_ORDER]
    return max(found, key=HEALTH_ORDER.index) if found else "Healthy"


def _health(kind: str, live: Obj) -> str | None:
    """gitops-engine's built-in health of the kinds the twin's workloads use; None: no health check."""
    spec, status = live.get("spec") or {}, live.get("status") or {}
    generation = (live.get("metadata") or {}).get("generation")
    stale = generation is not None and status.get("observedGeneration", generation) < generation
    if kind == "Deployment":
        if spec.get("paused"):
            return "Suspended"
        replicas = spec.get("replicas", 1)
        if stale or status.get("updatedReplicas", 0) < replicas or status.get("availableReplicas", 0) < replicas:
            return "Progressing"
        return "Healthy"
    if kind == "DaemonSet":
        desired = status.get("desiredNumberScheduled", 0)
        if stale or status.get("updatedNumberScheduled", 0) < desired or status.get("numberAvailable", 0) < desired:
            return "Progressing"
        return "Healthy"
    if kind == "StatefulSet":
        replicas = spec.get("replicas", 1)
        return "Progressing" if stale or status.get("readyReplicas", 0) < replicas else "Healthy"
    if kind == "Pod":
        phase = status.get("phase")
        return {"Succeeded": "Healthy", "Failed": "Degraded", "Running": "Healthy"}.get(phase or "", "Progressing")
    if kind in ("Namespace", "ConfigMap", "Secret", "Service", "ServiceAccount"):
        return "Healthy"
    return None


def install(twin: Twin, *, poll_seconds: float = POLL_SECONDS) -> ArgoCDController:
    """Install the Application CRD and the ``argocd`` namespace, and start the application controller."""
    if twin.registry.get(GROUP, "applications") is None:
        install_crds(twin, load_crd_manifests(CRD_FILE.parent))
    ns_type = twin.registry.get("", "namespaces")
    assert ns_type is not None
    if twin.store.try_get(ns_type, None, NAMESPACE) is None:
        twin.store.create(
            ns_type, {"metadata": {"name": NAMESPACE, "labels": {"kubernetes.io/metadata.name": NAMESPACE}}}
        )
    controller = ArgoCDController(twin, poll_seconds=poll_seconds)
    twin.controllers.append(controller)
    twin.routes.extend(controller.routes())
    if twin.sim is not None:
        twin.sim.argocd = controller
    twin.published["argocd"] = {"namespace": NAMESPACE, "field_manager": FIELD_MANAGER, "poll_seconds": poll_seconds}
    return controller
