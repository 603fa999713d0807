"""The rollout engine: progress annotations, resume, halt, check mode, and the threaded executor.

The executor runs against ``MemoryCluster``: Node objects held in memory that
take the very writes ``KubeRolloutCluster`` sends (the pure ``*_write``
builders), so the decisions are the engine's own; only the HTTP transport is
left for the integration tests against the twin.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import AlertsGate
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    GpuFleetError,
    InvalidInputError,
    RolloutHaltedError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    MaintenanceNotGrantedError,
    MaintenanceSettings,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import node_is_unavailable
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_engine import (
    ACTION_HALT,
    ACTION_RELEASE,
    ACTION_RESUME,
    ACTION_RUN,
    ACTION_SKIP,
    STATE_NOT_GRANTED,
    NodeProgress,
    NodeStep,
    NodeWrite,
    ProgressKeys,
    RolloutSettings,
    begin_write,
    build_plan,
    execute_rollout,
    fail_write,
    finish_write,
    node_disposition,
    read_progress,
    release_write,
    start_annotations,
    step_write,
    unfinished_nodes,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso

ROLLOUT = "mofed"
KEYS = ProgressKeys(ROLLOUT)
T0 = datetime.datetime(2026, 11, 22, 6, 0, tzinfo=datetime.UTC)


def make_node(name: str, *, rack: str = "", cordoned: bool = False, ready: str = "True", annotations=None) -> dict:
    labels = {"kubernetes.io/hostname": name, "node-role.kubernetes.io/worker": ""}
    if rack:
        labels["topology.kubernetes.io/rack"] = rack
    node: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": labels,
            "annotations": dict(annotations or {}),
        },
        "spec": {"podCIDR": "10.128.0.0/24"},
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}],
            "nodeInfo": {"bootID": f"boot-{name}", "kubeletVersion": "v1.31.6"},
        },
    }
    if cordoned:
        node["spec"]["unschedulable"] = True
        node["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    return node


class TickingNow:
    """Wall-clock stand-in: every call is one second later (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls = 0

    def __call__(self) -> datetime.datetime:
        with self.lock:
            self.calls += 1
            return T0 + datetime.timedelta(seconds=self.calls)


class MemoryCluster:
    """Nodes in memory taking the engine's writes, watching the budget at every write."""

    def __init__(self, nodes: list[dict], *, settings: RolloutSettings, now=None) -> None:
        self.nodes = {node["metadata"]["name"]: node for node in nodes}
        self.settings = settings
        self.now = now or TickingNow()
        self.lock = threading.Lock()
        self.events: list[dict] = []
        self.writes: list[tuple[str, NodeWrite]] = []
        self.unavailable_seen: list[int] = []
        self.warnings: list[str] = []

    def pool_nodes(self) -> list[dict]:
        with self.lock:
            return copy.deepcopy(list(self.nodes.values()))

    def begin_node(self, name: str) -> None:
        with self.lock:
            self._apply(name, begin_write(self.nodes[name], settings=self.settings, moment=iso(self.now())))

    def record_step(self, name: str, step: str) -> None:
        with self.lock:
            self._apply(name, step_write(settings=self.settings, step=step, moment=iso(self.now())))

    def finish_node(self, name: str) -> None:
        with self.lock:
            self._apply(name, finish_write(self.nodes[name], settings=self.settings, moment=iso(self.now())))

    def fail_node(self, name: str, *, step: str, reason: str) -> None:
        with self.lock:
            self._apply(name, fail_write(settings=self.settings, step=step, reason=reason, moment=iso(self.now())))

    def release_node(self, name: str) -> None:
        with self.lock:
            self._apply(name, release_write(self.nodes[name], settings=self.settings))

    def _apply(self, name: str, write: NodeWrite) -> None:
        # What a JSON merge patch does to the node: new objects, None removes.
        node = copy.deepcopy(self.nodes[name])
        annotations = node["metadata"].setdefault("annotations", {})
        for key, value in write.annotations.items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value
        if write.unschedulable is True:
            node["spec"]["unschedulable"] = True
        elif write.unschedulable is False:
            node["spec"].pop("unschedulable", None)
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        self.nodes[name] = node
        self.writes.append((name, write))
        if write.event_message:
            self.events.append({"node": name, "type": write.event_type, "message": write.event_message})
        self.unavailable_seen.append(sum(1 for other in self.nodes.values() if node_is_unavailable(other)))

    def state(self, name: str) -> NodeProgress:
        return read_progress(self.nodes[name], KEYS)

    def cordoned(self, name: str) -> bool:
        return bool(self.nodes[name]["spec"].get("unschedulable"))


class StepLog:
    """Steps that record which node ran them; optionally fail on some nodes."""

    def __init__(self, *, fail_on: dict[str, str] | None = None) -> None:
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.fail_on = fail_on or {}

    def step(self, name: str) -> NodeStep:
        def run(context):
            with self.lock:
                self.calls.append((context.node_name, name))
            if self.fail_on.get(context.node_name) == name:
                raise GpuFleetError(f"MOFED pod on {context.node_name} is in CrashLoopBackOff")
            return {"node": context.node_name, "resumed": context.resumed}

        return NodeStep(name=name, run=run, description=f"{name} the MOFED driver")

    def steps(self) -> list[NodeStep]:
        return [self.step("reload"), self.step("verify")]

    def nodes_that_ran(self, step: str) -> list[str]:
        return [node for node, name in self.calls if name == step]


def settings(**overrides) -> RolloutSettings:
    values: dict[str, Any] = {"name": ROLLOUT, "target": "24.10-1.1.4.0", "max_unavailable": 2, "max_parallel": 2}
    values.update(overrides)
    return RolloutSettings(**values)


def run(cluster: MemoryCluster, targets, steps, *, check_mode=False, **kwargs):
    return execute_rollout(
        cluster,
        settings=cluster.settings,
        targets=targets,
        steps=steps,
        check_mode=check_mode,
        now=cluster.now,
        **kwargs,
    )


# -- annotations and dispositions (pure) ------------------------------------------------------------


def test_annotation_keys_fit_kubernetes_names():
    assert KEYS.state == "gpufleet.io/rollout-mofed-state"
    assert KEYS.initially_unschedulable == "gpufleet.io/rollout-mofed-initially-unschedulable"
    longest = ProgressKeys("a" * 30).initially_unschedulable
    assert len(longest.split("/", 1)[1]) <= 63
    for bad in ("MOFED", "-x", "a" * 31, "nic fw", ""):
        with pytest.raises(InvalidInputError):
            ProgressKeys(bad)


@pytest.mark.parametrize(
    ("progress", "action", "from_step"),
    [
        (NodeProgress(), ACTION_RUN, ""),
        (NodeProgress(state="pending", started_at="x", target="t"), ACTION_RUN, ""),
        (NodeProgress(state="done", target="t"), ACTION_SKIP, ""),
        (NodeProgress(state="done", target="old"), ACTION_RUN, ""),
        (NodeProgress(state="in-progress", target="t", step="verify"), ACTION_RESUME, "verify"),
        (NodeProgress(state="in-progress", target="old", step="verify"), ACTION_RESUME, ""),
        (NodeProgress(state="failed", target="old", step="reload", message="boom"), ACTION_HALT, "reload"),
        (NodeProgress(state="in_progress"), ACTION_HALT, ""),
    ],
)
def test_node_disposition_from_annotations(progress, action, from_step):
    disposition = node_disposition(progress, target="t")
    assert (disposition.action, disposition.from_step) == (action, from_step)


def test_initial_state_comes_from_the_node_only_on_a_fresh_start():
    moment = "2026-11-22T06:00:00Z"
    fresh_cordoned = make_node("a", cordoned=True)
    annotations, initially = start_annotations(fresh_cordoned, keys=KEYS, target="t", moment=moment)
    assert initially
    assert annotations[KEYS.initially_unschedulable] == "true"
    assert annotations[KEYS.state] == "in-progress"
    assert annotations[KEYS.started_at] == moment

    # Cordoned by us in an earlier, unfinished attempt (failed, then cleared by a person):
    # the node is cordoned now, but it was not before the rollout.
    cleared = make_node(
        "b",
        cordoned=True,
        annotations={KEYS.state: "pending", KEYS.started_at: "2026-11-21T00:00:00Z", KEYS.step: "reload"},
    )
    annotations, initially = start_annotations(cleared, keys=KEYS, target="t", moment=moment)
    assert not initially
    assert annotations[KEYS.initially_unschedulable] is None

    # An interrupted run keeps its start time and its recorded initial state.
    interrupted = make_node(
        "c",
        cordoned=True,
        annotations={
            KEYS.state: "in-progress",
            KEYS.target: "t",
            KEYS.started_at: "2026-11-21T00:00:00Z",
            KEYS.initially_unschedulable: "true",
        },
    )
    annotations, initially = start_annotations(interrupted, keys=KEYS, target="t", moment=moment)
    assert initially
    assert annotations[KEYS.started_at] == "2026-11-21T00:00:00Z"

    # A node done in an earlier rollout that a person cordoned since: cordoned before this one.
    done_before = make_node("d", cordoned=True, annotations={KEYS.state: "done", KEYS.started_at: "x"})
    assert start_annotations(done_before, keys=KEYS, target="t2", moment=moment)[1]


def test_writes_cordon_once_uncordon_unless_initially_cordoned_and_keep_failed_nodes_cordoned():
    config = settings()
    moment = "2026-11-22T06:00:00Z"
    begin = begin_write(make_node("a"), settings=config, moment=moment)
    assert begin.unschedulable is True
    assert "started" in begin.event_message
    assert begin_write(make_node("b", cordoned=True), settings=config, moment=moment).unschedulable is None

    ours = make_node("a", cordoned=True, annotations={KEYS.state: "in-progress", KEYS.started_at: moment})
    assert finish_write(ours, settings=config, moment=moment).unschedulable is False
    theirs = make_node(
        "b", cordoned=True, annotations={KEYS.state: "in-progress", KEYS.initially_unschedulable: "true"}
    )
    finish = finish_write(theirs, settings=config, moment=moment)
    assert finish.unschedulable is None
    assert "left cordoned" in finish.event_message
    assert finish.annotations[KEYS.state] == "done"

    failed = fail_write(settings=config, step="reload", reason="x" * 5000, moment=moment)
    assert failed.unschedulable is None
    assert failed.event_type == "Warning"
    assert failed.annotations[KEYS.step] == "reload"
    assert len(failed.annotations[KEYS.message] or "") == 1000

    hands_off = settings(manage_cordon=False)
    assert begin_write(make_node("a"), settings=hands_off, moment=moment).unschedulable is None
    assert finish_write(ours, settings=hands_off, moment=moment).unschedulable is None


# -- the plan and check mode -----------------------------------------------------------------------------


def test_check_mode_returns_the_plan_and_touches_nothing():
    nodes = [make_node(f"gpu-worker-{i}", rack=f"rack-{i % 2}") for i in range(1, 7)]
    config = settings(
        max_unavailable="50%",
        max_parallel=0,
        failure_domain_label="topology.kubernetes.io/rack",
        max_per_domain=1,
        canary_nodes=("gpu-worker-4",),
    )
    cluster = MemoryCluster(nodes, settings=config)
    before = copy.deepcopy(cluster.nodes)
    log = StepLog()
    result = run(cluster, [n["metadata"]["name"] for n in nodes], log.steps(), check_mode=True)
    assert cluster.nodes == before
    assert cluster.writes == []
    assert log.calls == []
    assert result["changed"] is True
    plan = result["plan"]
    assert [entry["node"] for entry in plan["nodes"]] == [
        "gpu-worker-4",
        "gpu-worker-2",
        "gpu-worker-6",
        "gpu-worker-1",
        "gpu-worker-3",
        "gpu-worker-5",
    ]
    assert plan["nodes"][0]["canary"] is True
    assert plan["budget"]["max_unavailable"] == 3
    assert plan["starts_now"] == ["gpu-worker-4"]  # the canary alone
    assert plan["max_at_once"] == 2  # two racks, one node each, within a budget of 3
    assert [step["name"] for step in plan["steps"]] == ["cordon", "reload", "verify", "uncordon"]
    assert result["nodes_not_started"] == [entry["node"] for entry in plan["nodes"]]


def test_plan_rejects_bad_input():
    nodes = [make_node("a"), make_node("b")]
    with pytest.raises(InvalidInputError, match="more than once"):
        build_plan(settings=settings(), targets=["a", "a"], steps=[], pool_nodes=nodes)
    with pytest.raises(InvalidInputError, match="not in the node pool"):
        build_plan(settings=settings(), targets=["a", "zz"], steps=[], pool_nodes=nodes)
    with pytest.raises(InvalidInputError, match="engine's own"):
        build_plan(
            settings=settings(), targets=["a"], steps=[NodeStep("cordon", lambda _context: None)], pool_nodes=nodes
        )
    with pytest.raises(InvalidInputError, match="unique"):
        step = NodeStep("reload", lambda _context: None)
        build_plan(settings=settings(), targets=["a"], steps=[step, step], pool_nodes=nodes)
    with pytest.raises(InvalidInputError, match="Canary"):
        build_plan(settings=settings(canary_nodes=("b",)), targets=["a"], steps=[], pool_nodes=nodes)
    with pytest.raises(InvalidInputError, match="allows no node"):
        build_plan(settings=settings(max_unavailable="0%"), targets=["a"], steps=[], pool_nodes=nodes)


# -- running -----------------------------------------------------------------------------------------------


def test_rollout_runs_every_node_within_the_budget_and_is_idempotent():
    nodes = [make_node(f"gpu-worker-{i}", rack=f"rack-{i % 3}") for i in range(1, 7)]
    nodes[2] = make_node("gpu-worker-3", rack="rack-0", cordoned=True)  # cordoned by hand before
    nodes.append(make_node("cpu-worker-1"))  # in the pool, not a target
    targets = [f"gpu-worker-{i}" for i in range(1, 7)]
    config = settings(max_unavailable=3, max_parallel=0)
    cluster = MemoryCluster(nodes, settings=config)
    log = StepLog()

    result = run(cluster, targets, log.steps())

    assert result["changed"] is True
    assert sorted(result["nodes_done"]) == sorted(targets)
    assert result["halted"] is False
    assert max(cluster.unavailable_seen) <= 3
    assert result["peak_unavailable"] <= 3
    assert sorted(log.nodes_that_ran("reload")) == sorted(targets)
    for name in targets:
        progress = cluster.state(name)
        assert progress.state == "done"
        assert progress.target == "24.10-1.1.4.0"
        assert progress.finished_at
    # Everything uncordoned except the node that was cordoned before the rollout.
    assert [name for name in targets if cluster.cordoned(name)] == ["gpu-worker-3"]
    assert cluster.state("gpu-worker-3").initially_unschedulable
    assert not cluster.cordoned("cpu-worker-1")
    assert "cpu-worker-1" not in {name for name, _value in cluster.writes}
    # The timeline: per node, each step with times and outcome, engine steps around the caller's.
    entry = next(item for item in result["timeline"] if item["node"] == "gpu-worker-1")
    assert [step["name"] for step in entry["steps"]] == ["cordon", "reload", "verify", "uncordon"]
    assert all(step["outcome"] == "done" and step["started"] <= step["ended"] for step in entry["steps"])
    assert entry["steps"][1]["detail"] == {"node": "gpu-worker-1", "resumed": False}
    assert entry["outcome"] == "done"
    assert [e["type"] for e in cluster.events].count("Normal") == 2 * len(targets)

    writes_before = len(cluster.writes)
    again = run(cluster, targets, log.steps())
    assert again["changed"] is False
    assert sorted(again["nodes_skipped"]) == sorted(targets)
    assert len(cluster.writes) == writes_before
    check = run(cluster, targets, log.steps(), check_mode=True)
    assert check["changed"] is False


def test_the_next_node_starts_the_moment_one_finishes():
    # P = 2, nodes long, short-1, short-2. "long" can only finish once short-2 has
    # started: with batches (long+short-1, then short-2) it would wait forever.
    short_2_started = threading.Event()
    order_seen: list[str] = []

    def work(context):
        order_seen.append(context.node_name)
        if context.node_name == "long" and not short_2_started.wait(timeout=10):
            raise GpuFleetError("short-2 never started while long was running: batches, not continuous")
        if context.node_name == "short-2":
            short_2_started.set()

    nodes = [make_node(name) for name in ("long", "short-1", "short-2")]
    config = settings(max_unavailable=2, max_parallel=2, order="given")
    cluster = MemoryCluster(nodes, settings=config)
    result = run(cluster, ["long", "short-1", "short-2"], [NodeStep("reload", work)])
    assert sorted(result["nodes_done"]) == ["long", "short-1", "short-2"]
    assert order_seen.index("short-2") > order_seen.index("short-1")
    assert max(cluster.unavailable_seen) <= 2


def test_first_failure_halts_leaves_the_node_cordoned_and_untouched_nodes_untouched():
    nodes = [make_node(f"gpu-worker-{i}") for i in range(1, 7)]
    targets = [node["metadata"]["name"] for node in nodes]
    config = settings(max_unavailable=1, max_parallel=1)
    cluster = MemoryCluster(nodes, settings=config)
    pristine = copy.deepcopy(cluster.nodes)
    log = StepLog(fail_on={"gpu-worker-3": "reload"})

    with pytest.raises(RolloutHaltedError) as caught:
        run(cluster, targets, log.steps())

    error = caught.value
    assert error.node == "gpu-worker-3"
    assert "reload" in error.msg and "CrashLoopBackOff" in error.msg
    assert error.result["nodes_done"] == ["gpu-worker-1", "gpu-worker-2"]
    assert error.result["nodes_failed"] == ["gpu-worker-3"]
    assert error.result["nodes_not_started"] == ["gpu-worker-4", "gpu-worker-5", "gpu-worker-6"]
    failed_entry = next(item for item in error.result["timeline"] if item["node"] == "gpu-worker-3")
    assert failed_entry["failed_step"] == "reload"
    assert [s["outcome"] for s in failed_entry["steps"]] == ["done", "failed"]
    # The failed node: cordoned, annotated, with a Warning Event naming step and reason.
    assert cluster.cordoned("gpu-worker-3")
    progress = cluster.state("gpu-worker-3")
    assert (progress.state, progress.step) == ("failed", "reload")
    assert "CrashLoopBackOff" in progress.message
    warnings = [e for e in cluster.events if e["type"] == "Warning"]
    assert len(warnings) == 1
    assert warnings[0]["node"] == "gpu-worker-3"
    assert "at step reload" in warnings[0]["message"] and "CrashLoopBackOff" in warnings[0]["message"]
    # Nodes not yet started: exactly as they were.
    for name in ("gpu-worker-4", "gpu-worker-5", "gpu-worker-6"):
        assert cluster.nodes[name] == pristine[name]
    assert "verify" not in [step for node, step in log.calls if node == "gpu-worker-3"]

    # A re-run halts before touching anything, saying how to clear the node.
    writes = len(cluster.writes)
    with pytest.raises(RolloutHaltedError) as again:
        run(cluster, targets, StepLog().steps())
    assert "kubectl annotate node gpu-worker-3 gpufleet.io/rollout-mofed-state=pending --overwrite" in again.value.msg
    assert len(cluster.writes) == writes

    # A person fixes the node and clears it: the rollout goes on, and the node it had
    # cordoned itself is uncordoned at the end (it was schedulable before the rollout).
    cluster.nodes["gpu-worker-3"]["metadata"]["annotations"][KEYS.state] = "pending"
    retry = StepLog()
    result = run(cluster, targets, retry.steps())
    assert sorted(result["nodes_done"]) == ["gpu-worker-3", "gpu-worker-4", "gpu-worker-5", "gpu-worker-6"]
    assert sorted(result["nodes_skipped"]) == ["gpu-worker-1", "gpu-worker-2"]
    assert not any(cluster.cordoned(name) for name in targets)
    assert retry.nodes_that_ran("reload")[0] == "gpu-worker-3"


def test_running_nodes_finish_when_another_fails():
    release = threading.Event()

    def reload(context):
        if context.node_name == "b":
            raise GpuFleetError("driver build failed for kernel 5.14.0-427")
        if not release.is_set():
            release.wait(timeout=0.5)  # still running while b fails

    nodes = [make_node(name) for name in "abcd"]
    cluster = MemoryCluster(nodes, settings=settings(max_unavailable=2, max_parallel=2, order="given"))
    with pytest.raises(RolloutHaltedError) as caught:
        run(cluster, list("abcd"), [NodeStep("reload", reload)])
    assert caught.value.result["nodes_done"] == ["a"]
    assert caught.value.result["nodes_failed"] == ["b"]
    assert caught.value.result["nodes_not_started"] == ["c", "d"]
    assert cluster.state("a").state == "done" and not cluster.cordoned("a")


def test_interrupted_node_resumes_at_its_recorded_step():
    interrupted = make_node(
        "gpu-worker-1",
        cordoned=True,
        annotations={
            KEYS.state: "in-progress",
            KEYS.target: "24.10-1.1.4.0",
            KEYS.step: "verify",
            KEYS.started_at: "2026-11-21T23:00:00Z",
        },
    )
    nodes = [interrupted, make_node("gpu-worker-2")]
    cluster = MemoryCluster(nodes, settings=settings(max_unavailable=1, max_parallel=1))
    log = StepLog()
    result = run(cluster, ["gpu-worker-2", "gpu-worker-1"], log.steps())
    # The interrupted node goes first (it holds the budget), skipping the step done before.
    assert log.calls[0] == ("gpu-worker-1", "verify")
    assert ("gpu-worker-1", "reload") not in log.calls
    entry = next(item for item in result["timeline"] if item["node"] == "gpu-worker-1")
    assert entry["action"] == "resume"
    assert [(s["name"], s["outcome"]) for s in entry["steps"]] == [
        ("cordon", "done"),
        ("reload", "skipped"),
        ("verify", "done"),
        ("uncordon", "done"),
    ]
    assert entry["steps"][2]["detail"]["resumed"] is True
    progress = cluster.state("gpu-worker-1")
    assert progress.state == "done"
    assert progress.started_at == "2026-11-21T23:00:00Z"
    assert not cluster.cordoned("gpu-worker-1")  # cordoned by us, not before the rollout
    assert any("resumed" in e["message"] for e in cluster.events if e["node"] == "gpu-worker-1")


def test_an_unexpected_error_fails_the_node_like_any_other_failure():
    # A KeyError on an odd BMC payload must not leave the node looking merely interrupted (resumed next time).
    def flash(context):
        if context.node_name == "b":
            raise KeyError("Oem")

    nodes = [make_node(name) for name in "abc"]
    cluster = MemoryCluster(nodes, settings=settings(max_unavailable=1, max_parallel=1, order="given"))
    with pytest.raises(RolloutHaltedError) as caught:
        run(cluster, list("abc"), [NodeStep("flash", flash)])
    assert caught.value.node == "b"
    assert caught.value.result["nodes_not_started"] == ["c"]
    progress = cluster.state("b")
    assert (progress.state, progress.step) == ("failed", "flash")
    assert progress.message == "unexpected KeyError: 'Oem'"
    assert cluster.cordoned("b")
    assert [e["node"] for e in cluster.events if e["type"] == "Warning"] == ["b"]
    plan = build_plan(
        settings=cluster.settings,
        targets=list("abc"),
        steps=[NodeStep("flash", flash)],
        pool_nodes=cluster.pool_nodes(),
    )
    assert plan.halted_by == ("b",)


def test_unfinished_nodes_include_a_failure_a_person_cleared():
    started = {KEYS.started_at: "2026-01-01T00:00:00Z", KEYS.target: "t"}
    nodes = [
        make_node("fresh"),
        make_node("done", annotations={**started, KEYS.state: "done"}),
        make_node("running", annotations={**started, KEYS.state: "in-progress"}),
        make_node("failed", annotations={**started, KEYS.state: "failed"}),
        # Cleared as the halt message says: still cordoned by the rollout, whatever the node runs now.
        make_node("cleared", cordoned=True, annotations={**started, KEYS.state: "pending"}),
    ]
    assert unfinished_nodes(nodes, KEYS) == ["running", "failed", "cleared"]


def test_a_resumed_node_keeps_its_step_until_the_next_one_is_recorded():
    # Killed again right after the resumed run's first write: the next run still resumes at verify.
    config = settings()
    node = make_node(
        "w1",
        cordoned=True,
        annotations={
            KEYS.state: "in-progress",
            KEYS.target: config.target,
            KEYS.step: "verify",
            KEYS.started_at: "2026-01-01T00:00:00Z",
        },
    )
    write = begin_write(node, settings=config, moment="2026-01-02T00:00:00Z")
    node["metadata"]["annotations"].update({k: v for k, v in write.annotations.items() if v is not None})
    disposition = node_disposition(read_progress(node, KEYS), target=config.target)
    assert (disposition.action, disposition.from_step) == (ACTION_RESUME, "verify")


def test_node_done_for_another_target_runs_again():
    node = make_node("a", annotations={KEYS.state: "done", KEYS.target: "23.10-0.5.5.0", KEYS.started_at: "x"})
    cluster = MemoryCluster([node], settings=settings())
    log = StepLog()
    result = run(cluster, ["a"], log.steps())
    assert result["nodes_done"] == ["a"]
    assert log.nodes_that_ran("reload") == ["a"]
    assert cluster.state("a").target == "24.10-1.1.4.0"


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.on_pause: Callable[[], None] | None = None

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.on_pause:
            self.on_pause()


def test_exhausted_budget_halts_without_touching_anything():
    nodes = [make_node("a"), make_node("b"), make_node("sick", ready="False")]
    cluster = MemoryCluster(nodes, settings=settings(max_unavailable=1))
    with pytest.raises(RolloutHaltedError) as caught:
        run(cluster, ["a", "b"], StepLog().steps())
    assert "budget: 1 of at most 1" in caught.value.msg
    assert cluster.writes == []
    assert caught.value.result["nodes_not_started"] == ["a", "b"]


def test_rollout_waits_for_the_budget_when_asked_to():
    nodes = [make_node("a"), make_node("sick", ready="False")]
    config = settings(max_unavailable=1, budget_wait_timeout=300, budget_wait_sleep=30)
    cluster = MemoryCluster(nodes, settings=config)
    fake = FakeTime()

    def heal() -> None:
        if fake.now >= 60:
            cluster.nodes["sick"]["status"]["conditions"][0]["status"] = "True"

    fake.on_pause = heal
    result = run(cluster, ["a"], StepLog().steps(), clock=fake.monotonic, pause=fake.sleep)
    assert result["nodes_done"] == ["a"]
    assert fake.now == 60


# -- a rollback: what an earlier rollout to another target left behind --------------------------------------------


@pytest.mark.parametrize(
    ("progress", "action"),
    [
        (NodeProgress(state="failed", target="new", step="evict", started_at="x"), ACTION_RELEASE),
        (NodeProgress(state="in-progress", target="new", step="cordon", started_at="x"), ACTION_RELEASE),
        (NodeProgress(state="pending", target="new", step="evict", started_at="x"), ACTION_RELEASE),
        (NodeProgress(state="failed", target="new", step="reload", started_at="x"), ACTION_RUN),
        (NodeProgress(state="in-progress", target="new", step="reload", started_at="x"), ACTION_RESUME),
        # Failed for this very target: a person decides (the halt stays).
        (NodeProgress(state="failed", target="t", step="evict", started_at="x"), ACTION_HALT),
    ],
)
def test_a_rollback_releases_nodes_that_never_changed(progress, action):
    disposition = node_disposition(progress, target="t", undo_other_targets=True, before_change=("cordon", "evict"))
    assert disposition.action == action, disposition
    # Without the rollback flag, a failed node halts whatever its target.
    if progress.state == "failed":
        assert node_disposition(progress, target="t", before_change=("cordon", "evict")).action == ACTION_HALT


@pytest.mark.parametrize("state", ["failed", "in-progress"])
def test_a_rollback_releases_a_node_read_to_run_its_target_whatever_step_it_stopped_at(state):
    # A firmware job that failed at the reboot may have applied nothing: the caller read the BMC and says so.
    progress = NodeProgress(state=state, target="new", step="reload", started_at="x")
    disposition = node_disposition(
        progress, target="t", undo_other_targets=True, before_change=("cordon", "evict"), at_target=True
    )
    assert disposition.action == ACTION_RELEASE, disposition
    assert "nothing to undo" in disposition.why
    # Only a rollback releases it; a run to the same target still halts on the failed node.
    assert node_disposition(progress, target="t", at_target=True).action in (ACTION_HALT, ACTION_RESUME)
    same = NodeProgress(state="failed", target="t", step="reload", started_at="x")
    assert node_disposition(same, target="t", undo_other_targets=True, at_target=True).action == ACTION_HALT


def test_rollback_releases_a_node_whose_change_did_not_take_without_running_a_step():
    nodes = [make_node("gpu-worker-1"), make_node("gpu-worker-2")]
    cluster = MemoryCluster(nodes, settings=settings(target="new"))
    failing = StepLog(fail_on={"gpu-worker-1": "reload"})
    with pytest.raises(RolloutHaltedError):
        run(cluster, ["gpu-worker-1"], [failing.step("evict"), failing.step("reload")])
    assert cluster.state("gpu-worker-1").step == "reload" and cluster.cordoned("gpu-worker-1")

    log = StepLog()
    steps = [log.step("evict"), log.step("reload")]
    back = settings(target="old", changing_step="reload", undo_other_targets=True)
    # Not read to be at the target: it changed, so it is rolled back from the first step.
    cluster.settings = back
    plan = run(cluster, ["gpu-worker-1"], steps, check_mode=True)["plan"]
    assert plan["released"] == [] and [item["action"] for item in plan["nodes"]] == ["run"]
    cluster.settings = dataclasses.replace(back, at_target_nodes=("gpu-worker-1",))
    result = run(cluster, ["gpu-worker-1"], steps)
    assert log.calls == []  # no eviction, no step at all
    assert result["nodes_released"] == ["gpu-worker-1"]
    assert not cluster.cordoned("gpu-worker-1")
    annotations = cluster.nodes["gpu-worker-1"]["metadata"]["annotations"]
    assert not [key for key in annotations if key.startswith("gpufleet.io/rollout-")]


def test_rollback_releases_a_node_halted_before_the_change_without_running_a_step():
    new, old = "25.01-0.6.0.0", "24.07-0.6.1.0"
    nodes = [make_node(f"gpu-worker-{i}") for i in range(1, 4)]
    canary = make_node("gpu-worker-4")
    already = make_node("gpu-worker-5", cordoned=True)
    nodes += [canary, already]
    forward = settings(target=new, max_unavailable=2, max_parallel=1)
    cluster = MemoryCluster(nodes, settings=forward)
    failing = StepLog(fail_on={"gpu-worker-4": "evict", "gpu-worker-5": "evict"})
    for name in ("gpu-worker-4", "gpu-worker-5"):
        with pytest.raises(RolloutHaltedError):
            run(cluster, [name], [failing.step("evict"), failing.step("reload")])
    assert cluster.cordoned("gpu-worker-4") and cluster.state("gpu-worker-4").step == "evict"

    back = settings(target=old, max_unavailable=2, max_parallel=1, changing_step="reload", undo_other_targets=True)
    cluster.settings = back
    log = StepLog()
    steps = [log.step("evict"), log.step("reload")]
    plan = run(cluster, ["gpu-worker-4", "gpu-worker-5"], steps, check_mode=True)["plan"]
    assert [item["node"] for item in plan["released"]] == ["gpu-worker-4", "gpu-worker-5"]
    assert plan["nodes"] == []
    result = run(cluster, ["gpu-worker-4", "gpu-worker-5"], steps)
    assert log.calls == []  # no eviction, no reload
    assert result["nodes_released"] == ["gpu-worker-4", "gpu-worker-5"]
    assert [entry["outcome"] for entry in result["timeline"]] == ["released", "released"]
    assert not cluster.cordoned("gpu-worker-4")
    assert cluster.cordoned("gpu-worker-5")  # cordoned before the rollout came: left so
    for name in ("gpu-worker-4", "gpu-worker-5"):
        assert not [key for key in cluster.nodes[name]["metadata"]["annotations"] if key.startswith("gpufleet.io/")]
    released = [e for e in cluster.events if e["node"] == "gpu-worker-4" and e["type"] == "Normal"][-1]
    assert "before anything changed" in released["message"] and "nothing evicted" in released["message"]
    # Nothing is left to undo: a second rollback changes nothing.
    again = run(cluster, [], steps)
    assert again["changed"] is False


def test_a_rollback_starts_with_the_failed_node_that_holds_the_budget_not_behind_the_canary():
    """A promotion halted at a node (cordoned, failed at the changing step) with a budget of 1: its rollback, the
    canary first, must not wait for a slot the failed node holds itself (issue 16, MOFED promote then rollback)."""
    new, old = "24.10-1.0.0.0", "24.07-0.6.1.0"
    nodes = [make_node(f"gpu-worker-{i}") for i in range(1, 5)]
    forward = settings(target=new, max_unavailable=1, max_parallel=1, changing_step="reload")
    cluster = MemoryCluster(nodes, settings=forward)
    failing = StepLog(fail_on={"gpu-worker-2": "reload"})
    with pytest.raises(RolloutHaltedError):
        run(cluster, ["gpu-worker-2"], [failing.step("evict"), failing.step("reload")])
    assert cluster.cordoned("gpu-worker-2")

    back = settings(
        target=old,
        max_unavailable=1,
        max_parallel=1,
        changing_step="reload",
        undo_other_targets=True,
        canary_nodes=("gpu-worker-1",),
    )
    cluster.settings = back
    log = StepLog()
    targets = [f"gpu-worker-{i}" for i in range(1, 5)]
    plan = run(cluster, targets, [log.step("evict"), log.step("reload")], check_mode=True)["plan"]
    assert plan["starts_now"] == ["gpu-worker-2"], plan
    result = run(cluster, targets, [log.step("evict"), log.step("reload")])
    assert result["halted"] is False, result
    assert not any(cluster.cordoned(name) for name in targets)
    assert next(call for call in log.calls if call[1] == "reload")[0] == "gpu-worker-2"


def test_changing_step_must_be_one_of_the_steps():
    with pytest.raises(InvalidInputError, match="changing_step"):
        build_plan(
            settings=settings(changing_step="flash"),
            targets=[],
            steps=StepLog().steps(),
            pool_nodes=[make_node("a")],
        )


# -- the alerts gate before each node -----------------------------------------------------------------------------


def alerts_answer(*names: str) -> dict:
    alerts = [{"labels": {"alertname": name, "node": "x"}, "state": "firing"} for name in names]
    return {"status": "success", "data": {"alerts": alerts}}


class AlertsAfterFirstNode:
    """Prometheus whose GPUXidError fires once the first node is done, for ``clears_after`` looks (None: never)."""

    def __init__(self, cluster: MemoryCluster, *, clears_after: int | None) -> None:
        self.cluster, self.clears_after, self.looks_while_firing = cluster, clears_after, 0
        self.started_while_firing: list[str] = []

    def __call__(self, url: str) -> dict:
        assert url == "http://prometheus:9090/api/v1/alerts"
        done = [name for name in self.cluster.nodes if self.cluster.state(name).state == "done"]
        if not done or (self.clears_after is not None and self.looks_while_firing >= self.clears_after):
            return alerts_answer("UnrelatedAlert")
        self.looks_while_firing += 1
        return alerts_answer("GPUXidError", "UnrelatedAlert")


def gated_run(clears_after: int | None):
    nodes = [make_node("a"), make_node("b"), make_node("c")]
    config = settings(max_unavailable=1, max_parallel=1)
    cluster = MemoryCluster(nodes, settings=config)
    prometheus = AlertsAfterFirstNode(cluster, clears_after=clears_after)
    gate = AlertsGate(
        prometheus_url="http://prometheus:9090", alert_filter="^GPU", fetch=prometheus, timeout=60, sleep=10
    )
    cluster.settings = dataclasses.replace(config, alerts=gate)
    fake = FakeTime()
    log = StepLog()
    return cluster, log, fake


def test_the_alerts_gate_holds_before_the_next_node_and_the_rollout_goes_on_once_they_clear():
    cluster, log, fake = gated_run(clears_after=3)
    result = run(cluster, ["a", "b", "c"], log.steps(), clock=fake.monotonic, pause=fake.sleep)
    assert result["nodes_done"] == ["a", "b", "c"]
    assert fake.now == 30  # held three looks (10 s apart) before b; nothing held a or c
    assert result["alerts_held_for"] == ["GPUXidError{node=x}"] and result["held_by_alerts"] == []


def test_the_alerts_gate_halts_before_the_next_node_naming_the_alerts_and_starts_nothing_more():
    cluster, log, fake = gated_run(clears_after=None)
    with pytest.raises(RolloutHaltedError) as caught:
        run(cluster, ["a", "b", "c"], log.steps(), clock=fake.monotonic, pause=fake.sleep)
    assert "alerts matching '^GPU' are firing: GPUXidError{node=x}" in caught.value.msg
    assert "before node b of rollout" in caught.value.msg
    result = caught.value.result
    assert result["nodes_done"] == ["a"] and result["nodes_not_started"] == ["b", "c"]
    assert result["held_by_alerts"] == ["GPUXidError{node=x}"]
    assert log.nodes_that_ran("reload") == ["a"]
    assert not any(name in ("b", "c") for name, _write in cluster.writes), "the halt changes nothing further"


# -- through the NVIDIA Maintenance Operator ----------------------------------------------------------------

MAINTENANCE = MaintenanceSettings(requestor_id="gpufleet.upgrade")


def test_with_the_operator_the_engine_never_cordons_or_uncordons():
    with_operator = settings(maintenance=MAINTENANCE)
    node = make_node("n1")
    assert begin_write(node, settings=with_operator, moment="t").unschedulable is None
    assert begin_write(node, settings=settings(), moment="t").unschedulable is True
    cordoned = make_node("n1", cordoned=True)
    assert finish_write(cordoned, settings=with_operator, moment="t").unschedulable is None
    assert release_write(cordoned, settings=with_operator).unschedulable is None
    assert finish_write(cordoned, settings=settings(), moment="t").unschedulable is False


class NotGrantedOn(MemoryCluster):
    """The operator grants every node but one; the begin of that one fails as wait_granted does."""

    def __init__(self, nodes, *, refused: str, **kwargs) -> None:
        super().__init__(nodes, **kwargs)
        self.refused = refused
        self.released: list[str] = []

    def begin_node(self, name: str) -> None:
        super().begin_node(name)
        if name == self.refused:
            raise MaintenanceNotGrantedError(f"The NVIDIA Maintenance Operator did not schedule node {name}")

    def release_node(self, name: str) -> None:
        self.released.append(name)
        super().release_node(name)


def test_a_node_the_operator_never_granted_is_released_untouched_and_halts_without_a_failure():
    cluster = NotGrantedOn(
        [make_node("n1"), make_node("n2"), make_node("n3")],
        refused="n2",
        settings=settings(maintenance=MAINTENANCE, max_parallel=1, max_unavailable=1),
    )
    log = StepLog()
    with pytest.raises(RolloutHaltedError) as caught:
        run(cluster, ["n1", "n2", "n3"], log.steps())
    result = caught.value.result
    assert caught.value.node == ""
    assert "node n2 was not started: The NVIDIA Maintenance Operator did not schedule node n2" in caught.value.msg
    assert result["nodes_done"] == ["n1"] and result["nodes_failed"] == []
    assert result["nodes_not_started"] == ["n2", "n3"]
    outcomes = {row["node"]: row["outcome"] for row in result["timeline"]}
    assert outcomes == {"n1": "done", "n2": STATE_NOT_GRANTED, "n3": "not-started"}
    assert log.nodes_that_ran("reload") == ["n1"], "no step ran on the node the operator never granted"
    assert cluster.released == ["n2"]
    assert cluster.state("n2").state == "" and KEYS.state not in cluster.nodes["n2"]["metadata"]["annotations"]
    assert not any(cluster.cordoned(name) for name in ("n1", "n2", "n3")), "the engine cordoned nothing"


def test_nodes_an_earlier_killed_run_finished_are_named_though_no_longer_targets():
    # gpu-worker-1 finished this target in a run killed before it recorded anything; the caller no longer lists it
    # (it runs the target), but its progress annotations are this rollout's, so the run's result names it.
    done = {KEYS.state: "done", KEYS.target: settings().target, KEYS.finished_at: "2026-11-21T23:00:00Z"}
    other = {KEYS.state: "done", KEYS.target: "an-older-target", KEYS.finished_at: "2026-11-01T23:00:00Z"}
    nodes = [make_node("gpu-worker-1", annotations=done), make_node("gpu-worker-2"), make_node("gpu-worker-3",
             annotations=other)]  # fmt: skip
    cluster = MemoryCluster(nodes, settings=settings(max_unavailable=1, max_parallel=1))
    result = run(cluster, ["gpu-worker-2"], StepLog().steps())
    assert result["nodes_done_earlier"] == ["gpu-worker-1"]
    assert result["nodes_done"] == ["gpu-worker-2"]
