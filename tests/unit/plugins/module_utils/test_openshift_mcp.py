"""MachineConfigPool logic: pool state, degraded nodes, canary pool, pause patches."""

from __future__ import annotations

import datetime

from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_mcp import (
    PAUSED_AT_ANNOTATION,
    custom_pool_body,
    degraded_nodes,
    membership_plan,
    pause_patch,
    paused_hours,
    pool_of_config,
    pool_state,
)


def pool(*, paused=False, counts=(3, 3, 3, 0), updated="True", updating="False", degraded="False", gen=(2, 2), **meta):
    machine, updated_count, ready, degraded_count = counts
    return {
        "metadata": {"name": "worker", "generation": gen[0], **meta},
        "spec": {"paused": paused, "configuration": {"name": "rendered-worker-abc"}},
        "status": {
            "observedGeneration": gen[1],
            "machineCount": machine,
            "updatedMachineCount": updated_count,
            "readyMachineCount": ready,
            "degradedMachineCount": degraded_count,
            "conditions": [
                {"type": "Updated", "status": updated},
                {"type": "Updating", "status": updating},
                {"type": "NodeDegraded", "status": degraded, "message": "Node gpu-worker-003 is reporting: x"},
            ],
        },
    }


def node(name, *, config="rendered-worker-abc", state="Done", reason=""):
    annotations = {
        "machineconfiguration.openshift.io/currentConfig": config,
        "machineconfiguration.openshift.io/desiredConfig": config,
        "machineconfiguration.openshift.io/state": state,
        "machineconfiguration.openshift.io/reason": reason,
    }
    return {"metadata": {"name": name, "annotations": annotations, "labels": {"node-role.kubernetes.io/worker": ""}}}


def test_settled_needs_every_count_equal_and_the_generation_observed():
    assert pool_state(pool()).settled
    assert not pool_state(pool(counts=(3, 2, 2, 0), updated="False", updating="True")).settled
    assert not pool_state(pool(gen=(3, 2))).settled  # status older than the spec
    # Real sample (openshift/machine-config-operator PR #4977): UPDATED True but DEGRADED True.
    degraded = pool_state(pool(degraded="True"))
    assert degraded.degraded and not degraded.settled and "gpu-worker-003" in degraded.degraded_message


def test_degraded_nodes_are_named_with_the_daemon_reason_and_only_for_their_pool():
    nodes = [
        node("gpu-worker-001"),
        node("gpu-worker-003", state="Degraded", reason="failed to update OS: rpm-ostree rebase exited with status 1"),
        node("gpu-worker-004", config="rendered-gpu-canary-0f1", state="Degraded", reason="other pool"),
    ]
    assert degraded_nodes(nodes, pool="worker") == [
        {
            "node": "gpu-worker-003",
            "pool": "worker",
            "reason": "failed to update OS: rpm-ostree rebase exited with status 1",
        }
    ]
    assert pool_of_config("rendered-gpu-canary-0f1") == "gpu-canary"


def test_canary_pool_takes_worker_configs_and_selects_its_role_label():
    body = custom_pool_body(name="gpu-canary", paused=True)
    selector = body["spec"]["machineConfigSelector"]["matchExpressions"][0]
    assert selector["values"] == ["worker", "gpu-canary"] and selector["operator"] == "In"
    assert body["spec"]["nodeSelector"] == {"matchLabels": {"node-role.kubernetes.io/gpu-canary": ""}}
    canary = node("gpu-worker-001")
    canary["metadata"]["labels"]["gpu-canary"] = "true"
    former = node("gpu-worker-002")
    former["metadata"]["labels"]["node-role.kubernetes.io/gpu-canary"] = ""
    plan = membership_plan([canary, former, node("gpu-worker-003")], pool="gpu-canary",
                           member_selector={"gpu-canary": "true"})  # fmt: skip
    assert (plan.add, plan.remove) == (["gpu-worker-001"], ["gpu-worker-002"])
    assert membership_plan([former], pool="gpu-canary", member_selector=None).remove == ["gpu-worker-002"]


def test_pause_records_when_and_unpause_forgets_it():
    patch = pause_patch(pool(), paused=True, now="2026-11-22T08:00:00Z", reason="canary")
    assert patch["spec"] == {"paused": True}
    assert patch["metadata"]["annotations"][PAUSED_AT_ANNOTATION] == "2026-11-22T08:00:00Z"
    paused = pool(paused=True, annotations={PAUSED_AT_ANNOTATION: "2026-11-22T08:00:00Z"})
    assert pause_patch(paused, paused=True, now="2026-11-23T00:00:00Z") == {}  # idempotent, age kept
    assert pause_patch(paused, paused=False, now="x") == {
        "spec": {"paused": False},
        "metadata": {"annotations": {PAUSED_AT_ANNOTATION: None}},
    }
    now = datetime.datetime(2026, 11, 23, 8, tzinfo=datetime.UTC)
    assert paused_hours(pool_state(paused), now=now) == 24.0
    assert paused_hours(pool_state(pool()), now=now) is None


def test_paused_hours_reads_a_paused_at_written_with_microseconds():
    # A person (or another tool) may stamp the annotation as metav1.MicroTime does.
    paused = pool(paused=True, annotations={PAUSED_AT_ANNOTATION: "2026-11-22T08:00:00.500000Z"})
    now = datetime.datetime(2026, 11, 22, 20, 0, 0, 500000, tzinfo=datetime.UTC)
    assert paused_hours(pool_state(paused), now=now) == 12.0
