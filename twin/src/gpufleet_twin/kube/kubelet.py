"""The kubelets of every simulated node: pod lifecycle and node status.

One ``Kubelet`` controller plays the kubelet of every node that has a
``NodeHealth`` in ``SimState.nodes`` (nodes created through the API without
one are not managed: their pods stay as they are, as on a node whose
kubelet never registered).

Pods bound to a managed node go Pending (ContainerCreating) -> Running after
``PodPlan.start_after``; the plan (``SimState.plan_for``) decides what
happens next: Ready, CrashLoopBackOff with a growing ``restartCount`` (the
kubelet's 10 s doubling back-off capped at 5 min), or Succeeded/Failed after
``run_for``.  An image no registry serves (fault ``image_pull_fails``) keeps
the pod Pending in ErrImagePull, then ImagePullBackOff, the pull retried
with the same back-off until it succeeds (every container of the pod shows
the waiting reason).  Graceful deletion (``deletionTimestamp``) finishes after
``min(gracePeriod, termination_grace_cap)`` simulated seconds.

A node whose machine is down (rebooting, or dead after a reboot) runs
nothing: its pods freeze with their last status (the node lifecycle
controller marks them not Ready) and terminating pods stay Terminating, as
on a real unreachable node.  When it comes back every container restarts
(``restartCount`` + 1, last state ``Unknown``/255 as after a real reboot)
with a fresh plan, so a driver that cannot build for the node's new kernel
now crash-loops.  A crash loop whose plan says so (``PodPlan.replan_on_restart``:
a new driver that found the old module in use) is planned again at each
restart, as the container tries again: once the holder has left it runs.

Node status is posted when something in it changes, and otherwise every
``status_report_interval`` (the kubelet's ``nodeStatusReportFrequency``,
5 min; liveness in a real cluster goes through Leases, which the twin does
not serve), at most ``heartbeat_batch`` nodes per pass to keep the
resourceVersion churn of 10,000 nodes low.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from ..machinery import errors
from ..machinery.clock import SimClock
from ..machinery.kinds import Kinds
from ..machinery.store import Store, WatchEvent
from ..machinery.wake import DueTimes, Pacer, Waker
from ..machinery.writes import edit_status
from . import nodelabels, podutil
from .events import EventRecorder, kubelet_node_reference
from .index import ClusterIndex
from .state import NodeHealth, PodPlan, SimState

log = logging.getLogger(__name__)

Obj = dict[str, Any]
PodKey = tuple[str, str]

KUBELET_COMPONENT = "kubelet"


@dataclass(frozen=True)
class KubeletTimings:
    status_report_interval: float = 300.0
    heartbeat_batch: int = 200  # heartbeat-only node status writes per real second, at most
    termination_grace_cap: float = 2.0
    backoff_initial: float = 10.0
    backoff_max: float = 300.0


@dataclass
class _PodRun:
    """What the kubelet remembers about a pod it runs (the API holds the rest)."""

    uid: str
    node: str
    plan: PodPlan
    stage: str  # starting, pulling, running, backoff, stuck, done, down
    restarts: int = 0
    pull_attempts: int = 0  # failed image pulls so far (fault image_pull_fails)
    next_at: float | None = None
    started_at: float | None = None
    ready_signalled: bool = False
    terminating_since: float | None = None
    ever_started: bool = False


@dataclass(frozen=True)
class ContainerView:
    """How every container of a pod looks in one status write."""

    phase: str
    state: str  # waiting, running, terminated
    ready: bool
    restarts: int
    reason: str = ""
    message: str = ""
    exit_code: int = 0
    started_at: str | None = None
    finished_at: str | None = None
    last_terminated: Obj | None = None
    initialized: bool = True
    completed: bool = False  # pod finished (Ready conditions say PodCompleted)


class Kubelet:
    name = "kubelet"

    def __init__(
        self,
        *,
        sim: SimState,
        kinds: Kinds,
        index: ClusterIndex,
        events: EventRecorder,
        timings: KubeletTimings | None = None,
    ) -> None:
        self._sim = sim
        self._kinds = kinds
        self._index = index
        self._events = events
        self._timings = timings or KubeletTimings()
        self._runs: dict[PodKey, _PodRun] = {}
        self._due = DueTimes()
        self._dirty_pods: set[PodKey] = set()
        self._dirty_nodes: set[str] = set(sim.nodes)
        self._node_running: dict[str, bool] = {}
        self._node_progressing: dict[str, bool] = {}
        self._node_fingerprint: dict[str, tuple[Any, ...]] = {}
        self._net_up: dict[str, bool] = {}
        self._boot_ids: dict[str, str] = {}
        self._pod_ip_counter: dict[str, int] = {}
        self._last_post: dict[str, float] = {}
        self._heartbeat_order: list[str] = []
        self._heartbeat_cursor = 0
        self._heartbeat_real = time.monotonic()
        self._own_write = False
        self._pace = Pacer()
        self._waker: Waker | None = None
        self._store: Store | None = None
        self._clock: SimClock | None = None
        sim.node_listeners.append(self._on_health_change)

    # -- controller loop -----------------------------------------------------------------------
    async def run(self, twin: Any) -> None:
        self.attach(twin.store, twin.clock)
        assert self._waker is not None
        while True:
            await self.sync_once()
            next_due = self._due.next_due()
            # Wake at the next pod/node deadline, and now and then for heartbeats.
            timeout = self._timings.status_report_interval / 10
            if next_due is not None:
                timeout = min(timeout, max(0.0, next_due - twin.clock.now()))
            await self._waker.wait(timeout)

    def attach(self, store: Store, clock: SimClock) -> None:
        self._store = store
        self._clock = clock
        self._waker = Waker(
            store, clock, resources=(self._kinds.pod.key, self._kinds.node.key), on_event=self._on_store_event
        )
        now = clock.now()
        for name, health in self._sim.nodes.items():
            self._dirty_nodes.add(name)
            for key in self._index.pods_by_node.get(name, ()):
                self._dirty_pods.add(key)
            if store.try_get(self._kinds.node, None, name) is not None:
                # The seeder (or snapshot) wrote a status consistent with NodeHealth:
                # do not rewrite 10,000 nodes at start-up.
                self._node_fingerprint[name] = _fingerprint(health)
                self._last_post[name] = now
                self._boot_ids[name] = health.boot_id

    async def sync_once(self) -> None:
        clock = self._require_clock()
        now = clock.now()
        for key in self._due.pop_due(now):
            kind, name = cast(tuple[str, Any], key)
            if kind == "node":
                self._dirty_nodes.add(name)
            elif kind == "pod":
                self._dirty_pods.add(name)
        nodes = sorted(self._dirty_nodes)
        self._dirty_nodes.clear()
        for node_name in nodes:
            self._sync_node(node_name, clock.now())
            await self._pace()
        pods = list(self._dirty_pods)
        self._dirty_pods.clear()
        for key in pods:
            self._reconcile_pod(key, clock.now())
            await self._pace()
        self._heartbeats(clock.now())

    def _heartbeats(self, now: float) -> None:
        """Re-post unchanged node status now and then, round robin and rate-limited in real time.

        The kubelet re-posts an unchanged status every ``status_report_interval``;
        at 10,000 nodes and a large time scale that would be thousands of
        writes per real second, so at most ``heartbeat_batch`` heartbeat-only
        writes happen per real second: the heartbeats of a big fast cluster
        lag behind (nothing reads them as liveness; the node lifecycle
        simulation uses ``NodeHealth``).
        """
        real_now = time.monotonic()
        budget = int((real_now - self._heartbeat_real) * self._timings.heartbeat_batch)
        if budget <= 0:
            return
        self._heartbeat_real = real_now
        names = self._heartbeat_order
        if len(names) != len(self._sim.nodes):
            names = self._heartbeat_order = sorted(self._sim.nodes)
        if not names:
            return
        budget = min(budget, self._timings.heartbeat_batch)
        for _ in range(min(len(names), budget * 4)):
            self._heartbeat_cursor = (self._heartbeat_cursor + 1) % len(names)
            name = names[self._heartbeat_cursor]
            if now - self._last_post.get(name, now) < self._timings.status_report_interval:
                continue
            health = self._sim.nodes.get(name)
            node = self._require_store().try_get(self._kinds.node, None, name)
            if health is None or node is None or not health.kubelet_running:
                continue
            self._post_node_status(name, node, health, now, heartbeat=True)
            budget -= 1
            if budget <= 0:
                return

    # -- change notifications ------------------------------------------------------------------------
    def _on_health_change(self, node_name: str) -> None:
        self._dirty_nodes.add(node_name)
        if self._waker is not None:
            self._waker.poke()

    def _on_store_event(self, event: WatchEvent) -> bool:
        if self._own_write:
            return False
        if event.rtype.key == self._kinds.pod.key:
            node_name = (event.obj.get("spec") or {}).get("nodeName")
            if node_name in self._sim.nodes or self._index_key(event.obj) in self._runs:
                self._dirty_pods.add(self._index_key(event.obj))
                return True
            return False
        name = event.obj["metadata"]["name"]
        if name not in self._sim.nodes:
            return False
        if event.type == "ADDED":
            self._dirty_nodes.add(name)
            return True
        old_unschedulable = bool(((event.old or {}).get("spec") or {}).get("unschedulable"))
        new_unschedulable = bool((event.obj.get("spec") or {}).get("unschedulable"))
        if event.type == "MODIFIED" and old_unschedulable != new_unschedulable:
            # The kubelet reports cordon/uncordon as Node events (kubelet_node_status.go).
            reason = "NodeNotSchedulable" if new_unschedulable else "NodeSchedulable"
            self._node_event(name, reason, f"Node {name} status is now: {reason}")
        return False

    @staticmethod
    def _index_key(pod: Obj) -> PodKey:
        return podutil.key_of(pod)

    # -- nodes ---------------------------------------------------------------------------------------------
    def _sync_node(self, name: str, now: float) -> int:
        health = self._sim.nodes.get(name)
        store = self._require_store()
        node = store.try_get(self._kinds.node, None, name)
        if health is None or node is None:
            return 0
        if health.rebooting_until is not None:
            if health.rebooting_until <= now:
                self._finish_reboot(health)
            else:
                self._due.schedule(("node", name), health.rebooting_until)
        writes = 0
        running = health.kubelet_running
        was_running = self._node_running.get(name, True)
        if was_running and not running:
            self._node_went_down(name, health, now)
        elif running and not was_running:
            writes += self._node_came_up(name, health, now)
        self._node_running[name] = running
        progressing = running and health.ready
        if progressing and not self._node_progressing.get(name, True):
            self._resume_pods(name, now)
        self._node_progressing[name] = progressing
        net_up = health.secondary_network_up
        if self._net_up.get(name, True) and not net_up:
            self._secondary_network_lost(name, now)
        self._net_up[name] = net_up
        if running:
            writes += self._post_node_status(name, node, health, now)
        return writes

    def _finish_reboot(self, health: NodeHealth) -> None:
        health.rebooting_until = None
        if not health.never_returns:
            health.boot_id = _new_boot_id(health.name, health.boot_id)
            health.ready = True

    def _node_went_down(self, name: str, health: NodeHealth, now: float) -> None:
        why = "node rebooted" if health.rebooting_until is not None else "node went down"
        for pod in self._index.pods_on(name):
            key = podutil.key_of(pod)
            run = self._runs.get(key)
            if podutil.is_terminal(pod):
                continue
            if run is not None:
                if run.ready_signalled and run.plan.on_stop is not None:
                    run.plan.on_stop(pod)
                run.ready_signalled = False
                run.stage = "down"
                run.next_at = None
                self._due.cancel(("pod", key))
            if podutil.phase_of(pod) == "Running" and not _is_daemon_pod(pod) and self._sim.recorder is not None:
                self._sim.recorder.record_disruption(pod, node=name, why=why)

    def _node_came_up(self, name: str, health: NodeHealth, now: float) -> int:
        previous_boot = self._boot_ids.get(name)
        if previous_boot is not None and previous_boot != health.boot_id:
            self._node_event(name, "Starting", "Starting kubelet.")
            self._node_event(
                name, "Rebooted", f"Node {name} has been rebooted, boot id: {health.boot_id}", event_type="Warning"
            )
        writes = 0
        for pod in self._index.pods_on(name):
            key = podutil.key_of(pod)
            run = self._runs.get(key)
            if podutil.is_terminating(pod) or podutil.is_terminal(pod) or run is None or run.stage != "down":
                self._dirty_pods.add(key)
                continue
            writes += self._restart_after_reboot(pod, run, health, now)
        return writes

    def _restart_after_reboot(self, pod: Obj, run: _PodRun, health: NodeHealth, now: float) -> int:
        stamp = self._iso(now)
        killed = {"terminated": {"exitCode": 255, "reason": "Unknown", "startedAt": stamp, "finishedAt": stamp}}
        if (pod.get("spec") or {}).get("restartPolicy") == "Never" and run.ever_started:
            run.stage = "done"
            view = ContainerView(
                phase="Failed",
                state="terminated",
                ready=False,
                restarts=run.restarts,
                reason="Unknown",
                exit_code=255,
                started_at=stamp,
                finished_at=stamp,
                completed=True,
            )
            return self._write_status(pod, view, now)
        run.restarts += 1 if run.ever_started else 0
        run.plan = self._sim.plan_for(pod, health)
        run.stage = "starting"
        run.next_at = now + run.plan.start_after
        self._due.schedule(("pod", podutil.key_of(pod)), run.next_at)
        view = ContainerView(
            phase=podutil.phase_of(pod) if run.ever_started else "Pending",
            state="waiting",
            ready=False,
            restarts=run.restarts,
            reason="ContainerCreating",
            last_terminated=killed if run.ever_started else None,
        )
        return self._write_status(pod, view, now)

    def _resume_pods(self, name: str, now: float) -> None:
        """The kubelet is Ready again without a reboot: report its running pods Ready again.

        While the node was NotReady the node lifecycle controller marked them
        not Ready; the kubelet's status manager re-posts their real state.
        """
        for pod in self._index.pods_on(name):
            key = podutil.key_of(pod)
            self._dirty_pods.add(key)
            run = self._runs.get(key)
            if run is None or run.stage != "running" or podutil.is_terminating(pod) or podutil.is_pod_ready(pod):
                continue
            started = self._iso(run.started_at if run.started_at is not None else now)
            view = ContainerView(
                phase="Running",
                state="running",
                ready=True,
                restarts=run.restarts,
                started_at=started,
                last_terminated=_last_state(pod),
            )
            self._write_status(pod, view, now)

    def _secondary_network_lost(self, name: str, now: float) -> None:
        if self._sim.recorder is None:
            return
        for pod in self._index.pods_on(name):
            if podutil.uses_secondary_network(pod) and podutil.phase_of(pod) == "Running" and not _is_daemon_pod(pod):
                self._sim.recorder.record_disruption(pod, node=name, why="secondary network went down")

    def _post_node_status(
        self, name: str, node: Obj, health: NodeHealth, now: float, *, heartbeat: bool = False
    ) -> int:
        fingerprint = _fingerprint(health)
        if fingerprint == self._node_fingerprint.get(name) and not heartbeat:
            return 0
        previous = self._node_fingerprint.get(name)
        self._node_fingerprint[name] = fingerprint
        self._last_post[name] = now
        writes = 0
        stamp = self._iso(now)
        store = self._require_store()
        old_ready = podutil.is_node_ready(node)
        try:
            self._own_write = True
            current = store.get(self._kinds.node, None, name)
            edit_status(store, self._kinds.node, current, lambda obj: _node_status(obj, health, stamp))
            writes += 1
            labels = dict(node["metadata"].get("labels") or {})
            desired = nodelabels.tracked_labels(health, current=labels, timestamp=int(now))
            if health.driver_version is not None:
                stale = [k for k in labels if k.startswith(nodelabels.DRIVER_LABEL_PREFIXES) and k not in desired]
            else:
                stale = []
            if stale or any(labels.get(k) != v for k, v in desired.items()):
                store.mutate(self._kinds.node, None, name, lambda obj: _set_labels(obj, desired, stale))
                writes += 1
        except errors.ApiError as exc:
            log.debug("node %s status not posted: %s", name, exc)
        finally:
            self._own_write = False
        self._boot_ids.setdefault(name, health.boot_id)
        if previous is not None and health.ready != old_ready:
            reason = "NodeReady" if health.ready else "NodeNotReady"
            self._node_event(name, reason, f"Node {name} status is now: {reason}")
        self._boot_ids[name] = health.boot_id
        return writes

    def _node_event(self, node_name: str, reason: str, message: str, *, event_type: str = "Normal") -> None:
        try:
            self._own_write = True
            self._events.record(
                kubelet_node_reference(node_name),
                reason=reason,
                message=message,
                component=KUBELET_COMPONENT,
                host=node_name,
                event_type=event_type,
            )
        finally:
            self._own_write = False

    # -- pods ---------------------------------------------------------------------------------------------------
    def _reconcile_pod(self, key: PodKey, now: float) -> int:
        pod = self._index.pod(key)
        run = self._runs.get(key)
        if pod is None:
            if run is not None:
                self._forget(key, run)
            return 0
        node_name = (pod.get("spec") or {}).get("nodeName")
        if run is not None and run.uid != pod["metadata"].get("uid"):
            self._forget(key, run)
            run = None
        if not node_name or node_name not in self._sim.nodes:
            return 0
        health = self._sim.nodes[node_name]
        if not health.kubelet_running:
            return 0
        if podutil.is_terminating(pod):
            return self._terminate(key, pod, run, now)
        if podutil.is_terminal(pod):
            if run is not None:
                run.stage = "done"
            return 0
        if not health.ready:
            return 0  # the kubelet is up but NotReady: it starts nothing until Ready again
        if run is None:
            return self._accept(key, pod, health, now)
        if run.next_at is None:
            return 0
        if run.next_at <= now:
            return self._advance(key, pod, run, health, now)
        self._due.schedule_earliest(("pod", key), run.next_at)
        return 0

    def _accept(self, key: PodKey, pod: Obj, health: NodeHealth, now: float) -> int:
        plan = self._sim.plan_for(pod, health)
        run = _PodRun(uid=pod["metadata"]["uid"], node=health.name, plan=plan, stage="starting")
        self._runs[key] = run
        if podutil.phase_of(pod) == "Running":
            # Adopt a pod that was already running (loaded from a snapshot).
            run.ever_started = True
            run.started_at = now
            if podutil.is_pod_ready(pod):
                run.ready_signalled = True
                if plan.on_ready is not None:
                    plan.on_ready(pod)
            run.stage = "running"
            if plan.outcome in ("succeeded", "failed"):
                run.next_at = now + (plan.run_for or 0.0)
                self._due.schedule(("pod", key), run.next_at)
            return 0
        run.next_at = now + plan.start_after
        if plan.start_after <= 0:
            return self._advance(key, pod, run, health, now)
        self._due.schedule(("pod", key), run.next_at)
        view = ContainerView(
            phase="Pending",
            state="waiting",
            ready=False,
            restarts=0,
            reason="PodInitializing" if (pod.get("spec") or {}).get("initContainers") else "ContainerCreating",
            initialized=not (pod.get("spec") or {}).get("initContainers"),
        )
        return self._write_status(pod, view, now)

    def _advance(self, key: PodKey, pod: Obj, run: _PodRun, health: NodeHealth, now: float) -> int:
        plan = run.plan
        stamp = self._iso(now)
        restart_policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        run.next_at = None
        if run.stage in ("starting", "pulling"):
            unpullable = self._sim.unpullable_image(pod)
            if unpullable is not None:
                return self._pull_failed(key, pod, run, now, unpullable)
            run.stage = "starting"
        if run.stage == "starting":
            run.ever_started = True
            if plan.outcome == "pending":
                run.stage = "stuck"
                view = ContainerView(
                    phase="Pending",
                    state="waiting",
                    ready=False,
                    restarts=run.restarts,
                    reason=plan.reason or "ContainerCreating",
                    message=plan.message,
                )
                return self._write_status(pod, view, now)
            if plan.outcome == "crashloop":
                return self._crash(key, pod, run, now, first_start=stamp)
            run.stage = "running"
            run.started_at = now
            self._pod_events_started(pod, health.name)
            if plan.outcome in ("succeeded", "failed"):
                run.next_at = now + (plan.run_for or 0.0)
                self._due.schedule(("pod", key), run.next_at)
            written = self._write_status(
                pod,
                ContainerView(
                    phase="Running",
                    state="running",
                    ready=True,
                    restarts=run.restarts,
                    started_at=stamp,
                    last_terminated=_last_state(pod),
                ),
                now,
            )
            run.ready_signalled = True
            if plan.on_ready is not None:
                fresh = self._index.pod(key)
                plan.on_ready(fresh if fresh is not None else pod)
            return written
        if run.stage == "running":
            started = self._iso(run.started_at if run.started_at is not None else now)
            self._signal_stop(pod, run)
            if plan.outcome == "succeeded":
                run.stage = "done"
                view = ContainerView(
                    phase="Succeeded",
                    state="terminated",
                    ready=False,
                    restarts=run.restarts,
                    reason=plan.reason or "Completed",
                    message=plan.message,
                    exit_code=0,
                    started_at=started,
                    finished_at=stamp,
                    completed=True,
                )
                return self._write_status(pod, view, now)
            if restart_policy == "Never":
                run.stage = "done"
                view = ContainerView(
                    phase="Failed",
                    state="terminated",
                    ready=False,
                    restarts=run.restarts,
                    reason=plan.reason or "Error",
                    message=plan.message,
                    exit_code=1,
                    started_at=started,
                    finished_at=stamp,
                    completed=True,
                )
                return self._write_status(pod, view, now)
            return self._crash(key, pod, run, now, first_start=started)
        if run.stage == "backoff":
            if plan.outcome == "crashloop" and plan.replan_on_restart:
                run.plan = plan = self._sim.plan_for(pod, health)
                if plan.outcome != "crashloop":
                    return self._restart_planned_again(key, pod, run, now)
            if plan.outcome == "crashloop":
                return self._crash(key, pod, run, now, first_start=stamp)
            # A restartable failing container (OnFailure/Always) runs again after its back-off.
            run.stage = "running"
            run.started_at = now
            run.next_at = now + (plan.run_for or 0.0)
            self._due.schedule(("pod", key), run.next_at)
            view = ContainerView(
                phase="Running",
                state="running",
                ready=True,
                restarts=run.restarts,
                started_at=stamp,
                last_terminated=_last_state(pod),
            )
            return self._write_status(pod, view, now)
        return 0

    def _restart_planned_again(self, key: PodKey, pod: Obj, run: _PodRun, now: float) -> int:
        """What crashed the container is gone: the restarted container runs (not Ready) until its new plan's
        ``start_after`` has passed, then goes the way of a first start."""
        run.stage = "starting"
        run.next_at = now + run.plan.start_after
        self._due.schedule(("pod", key), run.next_at)
        view = ContainerView(
            phase="Running",
            state="running",
            ready=False,
            restarts=run.restarts,
            started_at=self._iso(now),
            last_terminated=_last_state(pod),
        )
        return self._write_status(pod, view, now)

    def _pull_failed(self, key: PodKey, pod: Obj, run: _PodRun, now: float, unpullable: tuple[str, str]) -> int:
        """The image cannot be pulled: ErrImagePull on the first failure, ImagePullBackOff after it, the pull retried
        with the kubelet's image back-off (10 s doubling, at most 5 min). Nothing ran, so no restart is counted."""
        image, why = unpullable
        run.pull_attempts += 1
        run.stage = "pulling"
        delay = min(self._timings.backoff_initial * 2 ** (run.pull_attempts - 1), self._timings.backoff_max)
        run.next_at = now + delay
        self._due.schedule(("pod", key), run.next_at)
        if self._sim.pod_events:
            self._pod_event(
                pod, "Failed", f'Failed to pull image "{image}": {why}', node=run.node, event_type="Warning"
            )
            self._pod_event(pod, "BackOff", f'Back-off pulling image "{image}"', node=run.node, event_type="Warning")
        first = run.pull_attempts == 1
        view = ContainerView(
            phase="Pending",
            state="waiting",
            ready=False,
            restarts=run.restarts,
            reason="ErrImagePull" if first else "ImagePullBackOff",
            message=why if first else f'Back-off pulling image "{image}"',
        )
        return self._write_status(pod, view, now)

    def _crash(self, key: PodKey, pod: Obj, run: _PodRun, now: float, *, first_start: str) -> int:
        """The container exited non-zero: count a restart and back off (CrashLoopBackOff)."""
        run.restarts += 1
        run.stage = "backoff"
        delay = min(self._timings.backoff_initial * 2 ** (run.restarts - 1), self._timings.backoff_max)
        run.next_at = now + delay
        self._due.schedule(("pod", key), run.next_at)
        stamp = self._iso(now)
        container = ((pod.get("spec") or {}).get("containers") or [{"name": "main"}])[0]["name"]
        message = (
            f"back-off {_duration(delay)} restarting failed container={container} "
            f"pod={pod['metadata']['name']}_{pod['metadata'].get('namespace', '')}({pod['metadata'].get('uid', '')})"
        )
        last = {
            "terminated": {
                "exitCode": 1,
                "reason": "Error",
                "message": run.plan.message,
                "startedAt": first_start,
                "finishedAt": stamp,
            }
        }
        if not run.plan.message:
            del last["terminated"]["message"]
        if self._sim.pod_events:
            self._pod_event(
                pod,
                "BackOff",
                f"Back-off restarting failed container {container} in pod "
                f"{pod['metadata']['name']}_{pod['metadata'].get('namespace', '')}({pod['metadata'].get('uid', '')})",
                node=run.node,
                event_type="Warning",
            )
        view = ContainerView(
            phase="Running",
            state="waiting",
            ready=False,
            restarts=run.restarts,
            reason="CrashLoopBackOff",
            message=message,
            last_terminated=last,
        )
        return self._write_status(pod, view, now)

    def _terminate(self, key: PodKey, pod: Obj, run: _PodRun | None, now: float) -> int:
        if run is None:
            run = _PodRun(uid=pod["metadata"]["uid"], node=pod["spec"]["nodeName"], plan=PodPlan("ready"), stage="done")
            self._runs[key] = run
        if run.terminating_since is None:
            run.terminating_since = now
            grace = pod["metadata"].get("deletionGracePeriodSeconds")
            if grace is None:
                grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            run.next_at = now + min(float(grace), self._timings.termination_grace_cap)
            if self._sim.pod_events and run.ever_started:
                for container in (pod.get("spec") or {}).get("containers") or ():
                    self._pod_event(pod, "Killing", f"Stopping container {container['name']}", node=run.node)
        if run.next_at is not None and run.next_at > now:
            self._due.schedule(("pod", key), run.next_at)
            return 0
        self._signal_stop(pod, run)
        store = self._require_store()
        try:
            self._own_write = True
            store.delete(self._kinds.pod, key[0], key[1], precondition_uid=run.uid, immediate=True)
        except errors.ApiError as exc:
            log.debug("pod %s/%s not removed: %s", key[0], key[1], exc)
        finally:
            self._own_write = False
        self._runs.pop(key, None)
        self._due.cancel(("pod", key))
        return 1

    def _forget(self, key: PodKey, run: _PodRun) -> None:
        """The pod is gone from the API (or replaced by a namesake): its process stops."""
        if run.ready_signalled and run.plan.on_stop is not None:
            last_known = {
                "metadata": {"namespace": key[0], "name": key[1], "uid": run.uid},
                "spec": {"nodeName": run.node},
            }
            run.plan.on_stop(last_known)
        self._runs.pop(key, None)
        self._due.cancel(("pod", key))

    def _signal_stop(self, pod: Obj, run: _PodRun) -> None:
        if run.ready_signalled and run.plan.on_stop is not None:
            run.plan.on_stop(pod)
        run.ready_signalled = False

    def _pod_events_started(self, pod: Obj, node_name: str) -> None:
        if not self._sim.pod_events:
            return
        for container in (pod.get("spec") or {}).get("containers") or ():
            name = container.get("name", "")
            image = container.get("image", "")
            self._pod_event(
                pod,
                "Pulled",
                f'Container image "{image}" already present on machine',
                node=node_name,
                field_path=f"spec.containers{{{name}}}",
            )
            self._pod_event(
                pod, "Created", f"Created container {name}", node=node_name, field_path=f"spec.containers{{{name}}}"
            )
            self._pod_event(
                pod, "Started", f"Started container {name}", node=node_name, field_path=f"spec.containers{{{name}}}"
            )

    def _pod_event(
        self,
        pod: Obj,
        reason: str,
        message: str,
        *,
        node: str,
        event_type: str = "Normal",
        field_path: str | None = None,
    ) -> None:
        meta = pod["metadata"]
        ref: Obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": meta.get("namespace", ""),
            "name": meta["name"],
            "uid": meta.get("uid", ""),
        }
        if field_path:
            ref["fieldPath"] = field_path
        try:
            self._own_write = True
            self._events.record(
                ref, reason=reason, message=message, component=KUBELET_COMPONENT, host=node, event_type=event_type
            )
        finally:
            self._own_write = False

    def _write_status(self, pod: Obj, view: ContainerView, now: float) -> int:
        store = self._require_store()
        node_name = pod["spec"]["nodeName"]
        node = self._index.nodes.get(node_name) or {}
        host_ip = _internal_ip(node)
        pod_ip = (pod.get("status") or {}).get("podIP") or self._allocate_pod_ip(pod, node, host_ip)
        stamp = self._iso(now)
        meta = pod["metadata"]
        current = self._index.pod(podutil.key_of(pod))
        if current is None:
            return 0
        try:
            self._own_write = True
            edit_status(
                store,
                self._kinds.pod,
                current,
                lambda obj: render_pod_status(
                    obj, view, now=stamp, host_ip=host_ip, pod_ip=pod_ip, runtime=_runtime_prefix(node)
                ),
            )
        except errors.ApiError as exc:
            log.debug("pod %s status not written: %s", meta["name"], exc)
            return 0
        finally:
            self._own_write = False
        return 1

    def _allocate_pod_ip(self, pod: Obj, node: Obj, host_ip: str) -> str:
        if (pod.get("spec") or {}).get("hostNetwork"):
            return host_ip
        cidr = (node.get("spec") or {}).get("podCIDR") or "10.128.0.0/23"
        base = cidr.split("/")[0].rsplit(".", 1)[0]
        name = node.get("metadata", {}).get("name", "")
        counter = self._pod_ip_counter.get(name, 1) % 250 + 1
        self._pod_ip_counter[name] = counter
        return f"{base}.{counter + 1}"

    # -- helpers ----------------------------------------------------------------------------------------------
    def _require_store(self) -> Store:
        if self._store is None:
            raise RuntimeError("Kubelet.attach() was not called")
        return self._store

    def _require_clock(self) -> SimClock:
        if self._clock is None:
            raise RuntimeError("Kubelet.attach() was not called")
        return self._clock

    def _iso(self, moment: float) -> str:
        return self._require_clock().iso(moment)


# -- pure status rendering -----------------------------------------------------------------------------------
def render_pod_status(pod: Obj, view: ContainerView, *, now: str, host_ip: str, pod_ip: str, runtime: str) -> None:
    """Write ``status`` of ``pod`` in place as the kubelet reports it for ``view``."""
    spec = pod.get("spec") or {}
    status = pod.setdefault("status", {})
    status["phase"] = view.phase
    status["hostIP"] = host_ip
    status["hostIPs"] = [{"ip": host_ip}]
    status["podIP"] = pod_ip
    status["podIPs"] = [{"ip": pod_ip}]
    status.setdefault("startTime", now)
    status["qosClass"] = _qos_class(spec)
    old_statuses = {c.get("name"): c for c in status.get("containerStatuses") or ()}
    uid = pod["metadata"].get("uid", "")
    statuses = []
    for container in spec.get("containers") or ():
        name = container.get("name", "")
        image = container.get("image", "")
        entry: Obj = {
            "name": name,
            "image": image,
            "imageID": _image_id(image),
            "ready": view.ready,
            "restartCount": view.restarts,
            "started": view.state == "running",
            "lastState": view.last_terminated or old_statuses.get(name, {}).get("lastState") or {},
        }
        if view.state != "waiting" or view.restarts or view.last_terminated:
            entry["containerID"] = f"{runtime}://{_hex(uid, name, str(view.restarts))}"
        if view.state == "waiting":
            waiting: Obj = {"reason": view.reason or "ContainerCreating"}
            if view.message:
                waiting["message"] = view.message
            entry["state"] = {"waiting": waiting}
        elif view.state == "running":
            entry["state"] = {"running": {"startedAt": view.started_at or now}}
        else:
            terminated: Obj = {
                "exitCode": view.exit_code,
                "reason": view.reason or ("Completed" if view.exit_code == 0 else "Error"),
                "startedAt": view.started_at or now,
                "finishedAt": view.finished_at or now,
                "containerID": entry.get("containerID", f"{runtime}://{_hex(uid, name)}"),
            }
            if view.message:
                terminated["message"] = view.message
            entry["state"] = {"terminated": terminated}
        statuses.append(entry)
    status["containerStatuses"] = statuses
    init_containers = spec.get("initContainers") or ()
    if init_containers:
        init_statuses = []
        for container in init_containers:
            name = container.get("name", "")
            done = view.initialized
            entry = {
                "name": name,
                "image": container.get("image", ""),
                "imageID": _image_id(container.get("image", "")),
                "ready": done,
                "restartCount": 0,
                "started": False,
                "lastState": {},
                "state": (
                    {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": now,
                            "finishedAt": now,
                            "containerID": f"{runtime}://{_hex(uid, name, 'init')}",
                        }
                    }
                    if done
                    else {"waiting": {"reason": "PodInitializing"}}
                ),
            }
            init_statuses.append(entry)
        status["initContainerStatuses"] = init_statuses
    completed_reason = "PodCompleted" if view.completed else None
    not_ready_reason = completed_reason or "ContainersNotReady"
    not_ready_message = (
        None if view.completed else f"containers with unready status: [{' '.join(c['name'] for c in statuses)}]"
    )
    conditions = {
        "PodReadyToStartContainers": ("False" if view.completed else "True", None, None),
        "Initialized": ("True", completed_reason, None)
        if view.initialized
        else ("False", "ContainersNotInitialized", None),
        "Ready": ("True", None, None) if view.ready else ("False", not_ready_reason, not_ready_message),
        "ContainersReady": ("True", None, None) if view.ready else ("False", not_ready_reason, not_ready_message),
        "PodScheduled": ("True", None, None),
    }
    set_conditions(status, conditions, now=now, probe_time=True)


def set_conditions(
    status: Obj, wanted: Mapping[str, tuple[str, str | None, str | None]], *, now: str, probe_time: bool = False
) -> None:
    """Set condition (status, reason, message) per type; lastTransitionTime moves only on a status change."""
    existing = {c.get("type"): c for c in status.get("conditions") or ()}
    result = []
    for kind, (value, reason, message) in wanted.items():
        old = existing.pop(kind, None)
        cond: Obj = {"type": kind, "status": value}
        if probe_time:
            cond["lastProbeTime"] = None
        cond["lastTransitionTime"] = old["lastTransitionTime"] if old and old.get("status") == value else now
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        result.append(cond)
    result.extend(existing.values())
    status["conditions"] = result


def _fingerprint(health: NodeHealth) -> tuple[Any, ...]:
    """What of NodeHealth shows in the Node object: a change means a status/label write."""
    return (
        health.ready,
        health.gpus_allocatable,
        health.gpu_count,
        health.kernel,
        health.os_image,
        health.ostree_version,
        health.driver_version,
        health.boot_id,
        health.gpu_product,
        health.gpu_memory_mib,
    )


def _node_status(node: Obj, health: NodeHealth, stamp: str) -> None:
    status = node.setdefault("status", {})
    conditions = {c.get("type"): c for c in status.get("conditions") or ()}
    wanted = [
        ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        (
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status")
            if health.ready
            else (
                "Ready",
                "False",
                "KubeletNotReady",
                "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
                "message:Network plugin returns error: No CNI configuration file in /etc/kubernetes/cni/net.d/. "
                "Has your network provider started?",
            )
        ),
    ]
    result = []
    for kind, value, reason, message in wanted:
        old = conditions.pop(kind, None)
        result.append(
            {
                "type": kind,
                "status": value,
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == value else stamp,
                "reason": reason,
                "message": message,
            }
        )
    status["conditions"] = list(conditions.values()) + result
    for section in ("capacity", "allocatable"):
        resources = status.setdefault(section, {})
        if health.gpu_count > 0:
            resources[podutil.GPU_RESOURCE] = str(
                health.gpu_count if section == "capacity" else health.gpus_allocatable
            )
        else:
            resources.pop(podutil.GPU_RESOURCE, None)
    info = status.setdefault("nodeInfo", {})
    info["kernelVersion"] = health.kernel
    info["osImage"] = health.os_image
    info["bootID"] = health.boot_id


def _set_labels(node: Obj, desired: dict[str, str], stale: list[str]) -> None:
    labels = node["metadata"].setdefault("labels", {})
    for key in stale:
        labels.pop(key, None)
    labels.update(desired)


def _last_state(pod: Obj) -> Obj | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or ()
    return statuses[0].get("lastState") if statuses else None


def _is_daemon_pod(pod: Obj) -> bool:
    controller = podutil.controller_of(pod)
    return controller is not None and controller.get("kind") == "DaemonSet"


def _internal_ip(node: Obj) -> str:
    for address in (node.get("status") or {}).get("addresses") or ():
        if address.get("type") == "InternalIP":
            return str(address.get("address"))
    return "10.0.0.1"


def _runtime_prefix(node: Obj) -> str:
    version = ((node.get("status") or {}).get("nodeInfo") or {}).get("containerRuntimeVersion") or "containerd://"
    return version.split("://")[0] or "containerd"


def _qos_class(spec: Obj) -> str:
    containers = list(spec.get("containers") or ())
    requests_any = False
    guaranteed = bool(containers)
    for container in containers:
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        requests = resources.get("requests") or {}
        if limits or requests:
            requests_any = True
        for resource in ("cpu", "memory"):
            if resource not in limits or requests.get(resource, limits[resource]) != limits[resource]:
                guaranteed = False
    if guaranteed:
        return "Guaranteed"
    return "Burstable" if requests_any else "BestEffort"


def _hex(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()


def _image_id(image: str) -> str:
    repository = image.split("@", maxsplit=1)[0]
    if ":" in repository.rsplit("/", maxsplit=1)[-1]:
        repository = repository.rsplit(":", 1)[0]
    return f"{repository}@sha256:{_hex(image)}"


def _new_boot_id(node_name: str, previous: str) -> str:
    digest = _hex(node_name, previous)
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def _duration(seconds: float) -> str:
    """Go's time.Duration formatting for whole seconds: 10s, 1m20s, 5m0s."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    return f"{whole // 60}m{whole % 60}s"


# -- a pod behaviour driven by annotations -------------------------------------------------------------------
OUTCOME_ANNOTATION = "twin.gpufleet.io/outcome"
START_AFTER_ANNOTATION = "twin.gpufleet.io/start-after"
RUN_FOR_ANNOTATION = "twin.gpufleet.io/run-for"
MESSAGE_ANNOTATION = "twin.gpufleet.io/message"
_OUTCOMES = ("ready", "crashloop", "succeeded", "failed", "pending")


def annotation_behaviour(pod: Obj, node: NodeHealth) -> PodPlan | None:
    """A pod (or its template) can say how it behaves: ``twin.gpufleet.io/outcome: succeeded``,
    ``twin.gpufleet.io/run-for: "600"``, ``twin.gpufleet.io/start-after: "5"``.

    Used by the seeded batch Jobs and by tests; pods without the annotations
    are left to the other behaviours.
    """
    annotations = pod.get("metadata", {}).get("annotations") or {}
    outcome = annotations.get(OUTCOME_ANNOTATION)
    if outcome is None and RUN_FOR_ANNOTATION not in annotations:
        return None
    if outcome not in _OUTCOMES:
        outcome = "succeeded"
    try:
        start_after = float(annotations.get(START_AFTER_ANNOTATION, 5))
        run_for = float(annotations[RUN_FOR_ANNOTATION]) if RUN_FOR_ANNOTATION in annotations else None
    except ValueError:
        return None
    return PodPlan(
        outcome=outcome,  # type: ignore[arg-type]
        start_after=start_after,
        run_for=run_for,
        message=annotations.get(MESSAGE_ANNOTATION, ""),
    )
