"""What happened to the cluster during a run, for ``GET /admin/report``.

- API requests by verb, by resource and by both (``after_request`` hook).
- Per node, the intervals it was unavailable (cordoned or not Ready), in
  simulated time.
- GPU capacity over time: the sum of allocatable ``nvidia.com/gpu``, one
  sample per change.
- Disrupted pods: workload pods killed by a node reboot, evicted from an
  unreachable node, or running on a node whose secondary network went down
  while they used it (Multus ``k8s.v1.cni.cncf.io/networks``).
- Budget violations: every stretch of time during which more nodes in the
  budget's scope were unavailable than the active budget allows.  The budget
  is set explicitly (``set_budget``, ``POST /admin/budget``) or, while a GPU
  driver rollout is in progress (a node in an upgrade state between
  cordon-required and uncordon-required) and nothing was set explicitly,
  taken from the ClusterPolicy's ``spec.driver.upgradePolicy.maxUnavailable``
  (default 25%) over the nodes with ``nvidia.com/gpu.present=true``.

Everything is incremental, driven by store events on Nodes, so recording
costs O(1) per node change at 10,000 nodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ..apiserver.admin import json_response, protected, read_json
from ..apiserver.cluster import RequestInfo, Route, Twin
from ..kube import podutil
from ..machinery import errors
from ..machinery.kinds import Kinds
from ..machinery.store import WatchEvent

Obj = dict[str, Any]

UPGRADE_STATE_LABEL = "nvidia.com/gpu-driver-upgrade-state"
# States in which the upgrade controller holds a node (cordoned or about to be).
ROLLOUT_STATES = frozenset(
    {
        "cordon-required",
        "wait-for-jobs-required",
        "pod-deletion-required",
        "drain-required",
        "node-maintenance-required",
        "post-maintenance-required",
        "pod-restart-required",
        "validation-required",
        "uncordon-required",
    }
)
DERIVED_BUDGET_SCOPE: Obj = {"matchLabels": {"nvidia.com/gpu.present": "true"}}
MAX_CAPACITY_SAMPLES = 50_000


@dataclass
class Budget:
    max_unavailable: int | str
    source: str
    scope: Obj | None = None  # a LabelSelector; None = every node


@dataclass
class _NodeTrack:
    unavailable: bool = False
    since: float | None = None
    reason: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    gpus: int = 0
    upgrading: bool = False
    in_scope: bool = False


class Recorder:
    def __init__(self, *, twin: Twin, kinds: Kinds) -> None:
        self._twin = twin
        self._kinds = kinds
        self._clock = twin.clock
        self._nodes: dict[str, _NodeTrack] = {}
        self._intervals: dict[str, list[Obj]] = {}
        self._requests_total = 0
        self._by_verb: dict[str, int] = {}
        self._by_resource: dict[str, int] = {}
        self._by_verb_resource: dict[str, int] = {}
        self._by_code: dict[str, int] = {}
        self._dry_run_by_verb_resource: dict[str, int] = {}
        self._forbidden_by_verb_resource: dict[str, int] = {}
        # Every other error answer (409, 404, 422, 5xx...), by "<code> <verb> <resource>": which request met it.
        self._errors_by_code_verb_resource: dict[str, int] = {}
        # Writes a simulated client made through the store, by its field manager (the Argo CD controller's).
        self._writes_by_manager: dict[str, dict[str, int]] = {}
        self._gpus_total = 0
        self._capacity: list[tuple[float, int]] = []
        self._disrupted: list[Obj] = []
        self._explicit_budget: Budget | None = None
        self._scope_key: tuple[str, ...] | None = None
        self._scope_matcher: Any = None
        self._in_scope_unavailable: set[str] = set()
        self._in_scope_total = 0
        self._upgrading = 0
        self._violations: list[Obj] = []
        self._open_violation: Obj | None = None
        self._since = self._clock.now()
        for node in twin.store.list(kinds.node):
            self._observe(node, now=self._since)
        self._sample_capacity(self._since)
        self._rescope()
        twin.store.add_listener(self._on_event)

    # -- API -------------------------------------------------------------------------------------------
    def after_request(self, info: RequestInfo, status: int) -> None:
        resource = info.resource or ""
        if resource and info.group:
            resource = f"{resource}.{info.group}"
        if info.subresource:
            resource = f"{resource}/{info.subresource}"
        resource = resource or info.path
        self._requests_total += 1
        _bump(self._by_code, str(status))
        if status >= 400 and status != 403:
            _bump(self._errors_by_code_verb_resource, f"{status} {info.verb} {resource}")
        if status == 403:
            # Refused before it was served (RBAC, or an admission that forbids): counted apart like a dry run,
            # so that "no writes" stays a plain check of by_verb and a refused write still shows.
            _bump(self._forbidden_by_verb_resource, f"{info.verb} {resource}")
            return
        if info.dry_run:
            # Counted apart, as apiserver_request_total's dry_run label does: a dry run changes nothing,
            # so "no writes" stays a plain check of by_verb.
            _bump(self._dry_run_by_verb_resource, f"{info.verb} {resource}")
            return
        _bump(self._by_verb, info.verb)
        _bump(self._by_resource, resource)
        _bump(self._by_verb_resource, f"{info.verb} {resource}")

    def record_write(self, manager: str, verb: str, resource: str) -> None:
        """A write a simulated client made through the store (not over HTTP), counted under its field manager."""
        _bump(self._writes_by_manager.setdefault(manager, {}), f"{verb} {resource}")

    def record_disruption(self, pod: Obj, *, node: str, why: str) -> None:
        meta = pod.get("metadata") or {}
        owner = podutil.controller_of(pod)
        entry: Obj = {
            "kind": pod.get("kind", "Pod"),
            "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""),
            "node": node,
            "at": self._clock.iso(),
            "why": why,
        }
        if owner is not None:
            entry["owner"] = {"kind": owner.get("kind"), "name": owner.get("name")}
        self._disrupted.append(entry)

    def set_budget(self, max_unavailable: int | str, *, source: str, scope: Obj | None = None) -> None:
        """Declare the budget in force (e.g. the GPU Operator while a driver rollout runs)."""
        podutil.scaled_value(max_unavailable, 1, round_up=True)  # validates int or "N%"
        self._explicit_budget = Budget(max_unavailable=max_unavailable, source=source, scope=scope)
        self._rescope()

    def clear_budget(self) -> None:
        self._explicit_budget = None
        self._rescope()

    def active_budget(self) -> Budget | None:
        if self._explicit_budget is not None:
            return self._explicit_budget
        if self._upgrading > 0:
            return Budget(
                max_unavailable=self._clusterpolicy_max_unavailable(),
                source="clusterpolicy",
                scope=DERIVED_BUDGET_SCOPE,
            )
        return None

    def reset(self) -> None:
        now = self._clock.now()
        self._since = now
        self._requests_total = 0
        for counts in (
            self._by_verb,
            self._by_resource,
            self._by_verb_resource,
            self._by_code,
            self._dry_run_by_verb_resource,
            self._forbidden_by_verb_resource,
            self._errors_by_code_verb_resource,
        ):
            counts.clear()
        self._writes_by_manager = {}
        self._intervals = {}
        for name, track in self._nodes.items():
            if track.unavailable:
                track.since = now
                self._intervals[name] = [self._interval(now, None, track.reason)]
        self._capacity = []
        self._sample_capacity(now)
        self._disrupted = []
        self._violations = []
        self._open_violation = None
        self._check_budget(now)

    def report(self) -> Obj:
        now = self._clock.now()
        budget = self.active_budget()
        allowed = self._allowed(budget)
        violations = [dict(v) for v in self._violations]
        if self._open_violation is not None:
            violations.append(dict(self._open_violation))
        return {
            "now": self._clock.iso(now),
            "since": self._clock.iso(self._since),
            "requests": {
                "total": self._requests_total,
                "by_verb": dict(sorted(self._by_verb.items())),
                "by_resource": dict(sorted(self._by_resource.items())),
                "by_verb_resource": dict(sorted(self._by_verb_resource.items())),
                "by_code": dict(sorted(self._by_code.items())),
                "dry_run_by_verb_resource": dict(sorted(self._dry_run_by_verb_resource.items())),
                "forbidden_by_verb_resource": dict(sorted(self._forbidden_by_verb_resource.items())),
                "errors_by_code_verb_resource": dict(sorted(self._errors_by_code_verb_resource.items())),
            },
            "nodes": {
                "unavailable_intervals": {name: list(spans) for name, spans in sorted(self._intervals.items())},
                "currently_unavailable": sorted(n for n, t in self._nodes.items() if t.unavailable),
            },
            "gpu_capacity": {
                "current": self._gpus_total,
                "min": min((g for _, g in self._capacity), default=self._gpus_total),
                "samples": [
                    {"at": self._clock.iso(t), "seconds": round(t - self._since, 3), "allocatable": g}
                    for t, g in self._capacity
                ],
            },
            "disrupted_pods": list(self._disrupted),
            "writes_by_field_manager": {m: dict(sorted(c.items())) for m, c in sorted(self._writes_by_manager.items())},
            "budget": None
            if budget is None
            else {
                "maxUnavailable": budget.max_unavailable,
                "source": budget.source,
                "scope": budget.scope,
                "nodes_in_scope": self._in_scope_total,
                "allowed_unavailable": allowed,
                "unavailable_in_scope": len(self._in_scope_unavailable),
            },
            "budget_violations": violations,
        }

    def routes(self) -> list[Route]:
        token = self._twin.token

        async def get_report(request: web.Request) -> web.StreamResponse:
            return json_response(self.report())

        async def reset_report(request: web.Request) -> web.StreamResponse:
            self.reset()
            return json_response({"reset": True, "since": self._clock.iso(self._since)})

        async def set_budget(request: web.Request) -> web.StreamResponse:
            body = await read_json(request)
            if not isinstance(body, dict) or "maxUnavailable" not in body:
                raise errors.bad_request('expected {"maxUnavailable": N or "N%", "scope": <label selector>}')
            scope = body.get("scope")
            if isinstance(scope, str):
                scope = _selector_from_text(scope)
            try:
                self.set_budget(body["maxUnavailable"], source=str(body.get("source") or "admin"), scope=scope)
            except (TypeError, ValueError) as exc:
                raise errors.bad_request(f"invalid maxUnavailable: {exc}") from exc
            return json_response(self.report()["budget"])

        async def get_budget(request: web.Request) -> web.StreamResponse:
            return json_response(self.report()["budget"])

        async def delete_budget(request: web.Request) -> web.StreamResponse:
            self.clear_budget()
            return json_response({"cleared": True})

        return [
            ("GET", "/admin/report", protected(token, get_report)),
            ("POST", "/admin/report/reset", protected(token, reset_report)),
            ("GET", "/admin/budget", protected(token, get_budget)),
            ("POST", "/admin/budget", protected(token, set_budget)),
            ("DELETE", "/admin/budget", protected(token, delete_budget)),
        ]

    # -- node tracking ---------------------------------------------------------------------------------
    def _on_event(self, event: WatchEvent) -> None:
        if event.rtype.key != self._kinds.node.key:
            return
        now = self._clock.now()
        if event.type == "DELETED":
            self._forget(event.obj["metadata"]["name"], now)
        else:
            self._observe(event.obj, now=now)
        self._check_budget(now)

    def _observe(self, node: Obj, *, now: float) -> None:
        name = node["metadata"]["name"]
        track = self._nodes.get(name)
        if track is None:
            track = self._nodes[name] = _NodeTrack()
        labels = node["metadata"].get("labels") or {}
        if labels != track.labels:
            track.labels = dict(labels)
            upgrading = labels.get(UPGRADE_STATE_LABEL) in ROLLOUT_STATES
            if upgrading != track.upgrading:
                self._upgrading += 1 if upgrading else -1
                track.upgrading = upgrading
        unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
        ready = podutil.is_node_ready(node)
        unavailable = unschedulable or not ready
        reason = ",".join(r for r, on in (("cordoned", unschedulable), ("NotReady", not ready)) if on)
        if unavailable and not track.unavailable:
            track.since = now
            self._intervals.setdefault(name, []).append(self._interval(now, None, reason))
        elif unavailable and track.reason != reason and self._intervals.get(name):
            self._intervals[name][-1]["reason"] = reason
        elif not unavailable and track.unavailable and self._intervals.get(name):
            open_span = self._intervals[name][-1]
            open_span.update(self._interval(track.since or now, now, open_span.get("reason", "")))
        track.unavailable = unavailable
        track.reason = reason
        self._place_in_scope(name, track)
        gpus = podutil.quantity_int(((node.get("status") or {}).get("allocatable") or {}).get(podutil.GPU_RESOURCE))
        if gpus != track.gpus:
            self._gpus_total += gpus - track.gpus
            track.gpus = gpus
            self._sample_capacity(now)

    def _forget(self, name: str, now: float) -> None:
        track = self._nodes.pop(name, None)
        if track is None:
            return
        if track.unavailable and self._intervals.get(name):
            self._intervals[name][-1].update(self._interval(track.since or now, now, track.reason))
        if track.upgrading:
            self._upgrading -= 1
        if track.in_scope:
            self._in_scope_total -= 1
        self._in_scope_unavailable.discard(name)
        self._gpus_total -= track.gpus
        self._sample_capacity(now)

    def _interval(self, start: float, end: float | None, reason: str) -> Obj:
        return {
            "from": self._clock.iso(start),
            "to": None if end is None else self._clock.iso(end),
            "seconds": None if end is None else round(end - start, 3),
            "reason": reason,
        }

    def _sample_capacity(self, now: float) -> None:
        if self._capacity and self._capacity[-1][0] == now:
            self._capacity[-1] = (now, self._gpus_total)
        elif (not self._capacity or self._capacity[-1][1] != self._gpus_total) and len(
            self._capacity
        ) < MAX_CAPACITY_SAMPLES:
            self._capacity.append((now, self._gpus_total))

    # -- budget -----------------------------------------------------------------------------------------
    def _place_in_scope(self, name: str, track: _NodeTrack) -> None:
        """Keep the in-scope counts current for one node (O(1) per node change)."""
        in_scope = self._scope_matcher is None or bool(self._scope_matcher(track.labels))
        if in_scope != track.in_scope:
            self._in_scope_total += 1 if in_scope else -1
            track.in_scope = in_scope
        if in_scope and track.unavailable:
            self._in_scope_unavailable.add(name)
        else:
            self._in_scope_unavailable.discard(name)

    def _rescope(self) -> None:
        """The budget changed: recount its scope (O(nodes), only on budget changes)."""
        budget = self.active_budget()
        self._scope_key = _budget_key(budget)
        scope = budget.scope if budget is not None else None
        self._scope_matcher = podutil.label_selector_matcher(scope) if scope else None
        for name, track in self._nodes.items():
            self._place_in_scope(name, track)
        self._check_budget(self._clock.now())

    def _allowed(self, budget: Budget | None) -> int | None:
        if budget is None:
            return None
        return podutil.scaled_value(budget.max_unavailable, self._in_scope_total, round_up=True)

    def _check_budget(self, now: float) -> None:
        budget = self.active_budget()
        if _budget_key(budget) != self._scope_key:
            self._rescope()
            return
        allowed = self._allowed(budget)
        unavailable = len(self._in_scope_unavailable)
        violated = budget is not None and allowed is not None and unavailable > allowed
        if violated and self._open_violation is None:
            self._open_violation = {
                "from": self._clock.iso(now),
                "to": None,
                "allowed_unavailable": allowed,
                "peak_unavailable": unavailable,
                "maxUnavailable": budget.max_unavailable if budget else None,
                "source": budget.source if budget else None,
                "nodes": sorted(self._in_scope_unavailable)[:50],
            }
        elif violated and self._open_violation is not None:
            if unavailable > self._open_violation["peak_unavailable"]:
                self._open_violation["peak_unavailable"] = unavailable
                self._open_violation["nodes"] = sorted(self._in_scope_unavailable)[:50]
        elif not violated and self._open_violation is not None:
            self._open_violation["to"] = self._clock.iso(now)
            self._violations.append(self._open_violation)
            self._open_violation = None

    def _clusterpolicy_max_unavailable(self) -> int | str:
        rtype = self._twin.registry.get("nvidia.com", "clusterpolicies")
        if rtype is None:
            return "25%"
        for policy in self._twin.store.list(rtype):
            value = (((policy.get("spec") or {}).get("driver") or {}).get("upgradePolicy") or {}).get("maxUnavailable")
            if value is not None:
                return value
        return "25%"


def _budget_key(budget: Budget | None) -> tuple[str, ...] | None:
    if budget is None:
        return None
    return (str(budget.max_unavailable), budget.source, json.dumps(budget.scope, sort_keys=True))


def _bump(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _selector_from_text(text: str) -> Obj:
    """``a=b,c=d`` as a matchLabels selector (the admin endpoint accepts that shorthand)."""
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        labels[key.strip()] = value.strip()
    return {"matchLabels": labels}
