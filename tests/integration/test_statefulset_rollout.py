"""A GPU driver rollout meets the distributed training StatefulSet ``ml-training/dist-train`` and its PDB.

The twin seeds four ranks of four GPUs (``serve --distributed-training``) with
a PodDisruptionBudget ``maxUnavailable: 1``. The rollout runs two nodes at a
time, and the ranks sit one per node, so two ranks are due at once: the PDB
must hold the second until the first is back. Judged from the twin's Events
(its clock) and the recorder's report, with a real ansible-playbook run.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import kubectl
from .test_clusterpolicy_upgrade import (
    NEW,
    driver_versions,
    get_json,
    max_unavailable_at_once,
    run_module,
    settled_policy,
    states,
    wait_for,
)

pytestmark = pytest.mark.slow

NAMESPACE = "ml-training"
RANKS = [f"dist-train-{ordinal}" for ordinal in range(4)]
BUDGET = 2


@pytest.fixture
def twin(tmp_path):
    twin = start_twin(
        nodes=6, profile="openshift", time_scale=600, workdir=tmp_path / "twin", distributed_training=True
    )
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in conditions
    )


def ranks_ready(twin: TwinProcess) -> dict[str, bool]:
    pods = get_json(twin, "pods", "-n", NAMESPACE, "-l", "app=dist-train")["items"]
    return {p["metadata"]["name"]: p.get("status", {}).get("phase") == "Running" and ready(p) for p in pods}


def rank_outages(twin: TwinProcess) -> list[tuple[str, str, str]]:
    """(rank, from, to) on the twin's clock: from the kubelet killing a rank's pod until its next pod started.

    A StatefulSet pod comes back under the same name with a new uid; an outage
    still open at the end runs to "9999".
    """
    events = get_json(twin, "events", "-n", NAMESPACE)["items"]
    rows = sorted(
        (
            e.get("lastTimestamp") or e.get("eventTime") or "",
            e["involvedObject"].get("name"),
            e["involvedObject"].get("uid"),
            e["reason"],
        )
        for e in events
        if e["involvedObject"].get("kind") == "Pod" and e["involvedObject"].get("name") in RANKS
    )
    outages = []
    for at, name, uid, reason in rows:
        if reason != "Killing":
            continue
        back = [later for later, n, u, r in rows if n == name and u != uid and r == "Started" and later >= at]
        outages.append((name, at, min(back, default="9999")))
    return outages


def most_at_once(outages: list[tuple[str, str, str]]) -> int:
    # An outage ending at the moment another begins does not overlap it (the end sorts first).
    edges = sorted([(outage[1], 1) for outage in outages] + [(outage[2], -1) for outage in outages])
    current = peak = 0
    for _moment, step in edges:
        current += step
        peak = max(peak, current)
    return peak


def test_driver_rollout_keeps_the_training_statefulset_within_its_pdb(twin, tmp_path):
    settled_policy(twin)
    wait_for(lambda: ranks_ready(twin) == dict.fromkeys(RANKS, True), what="the four ranks to be ready")
    # The seeded Deployments fill the GPUs (two replicas stay Pending): the rollout could not move their pods.
    # Without them the ranks are the workload that has to move, and there is room for them.
    kubectl(twin, "scale", "deployment", "-n", NAMESPACE, "llm-train-01", "llm-train-02", "--replicas=0")
    twin.admin("POST", "report/reset")

    # Three in parallel allowed, two unavailable: the budget, not the parallelism, is what limits.
    run, _result = run_module(
        twin,
        tmp_path,
        {"driver": {"version": NEW}, "upgrade_policy": {"maxParallelUpgrades": 3, "maxUnavailable": BUDGET}},
    )

    assert run.returncode == 0, run.output
    assert set(states(twin).values()) == {"upgrade-done"}
    assert set(driver_versions(twin).values()) == {NEW}
    report = twin.report()
    assert report["budget_violations"] == []
    assert 1 < max_unavailable_at_once(report) <= BUDGET  # two nodes did go at once
    outages = rank_outages(twin)
    assert {outage[0] for outage in outages} == set(RANKS), outages  # every rank was moved off its node
    assert most_at_once(outages) == 1, json.dumps(outages)
    wait_for(lambda: ranks_ready(twin) == dict.fromkeys(RANKS, True), what="the four ranks to be ready again")
    status = get_json(twin, "statefulset", "-n", NAMESPACE, "dist-train")["status"]
    assert (status["readyReplicas"], status["replicas"]) == (4, 4), status
