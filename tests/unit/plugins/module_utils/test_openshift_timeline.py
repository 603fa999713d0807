"""The MachineConfigPool wait's per-node timeline (wait_for_pool / NodeTimeline in _openshift_runner)."""

from __future__ import annotations

import datetime

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import MACHINE_CONFIG_POOLS, NODES
from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_runner import (
    Clock,
    PoolOptions,
    WaitOptions,
    run_machineconfigpool,
    wait_for_pool,
)

OLD, NEW = "rendered-worker-aaa", "rendered-gpu-b-bbb"


def node(name, *, current=OLD, desired=OLD, state="Done", boot="boot-1"):
    annotations = {
        "machineconfiguration.openshift.io/currentConfig": current,
        "machineconfiguration.openshift.io/desiredConfig": desired,
        "machineconfiguration.openshift.io/state": state,
    }
    return {"metadata": {"name": name, "annotations": annotations}, "status": {"nodeInfo": {"bootID": boot}}}


def pool(*, updated):
    return {
        "metadata": {"name": "gpu-b", "generation": 2},
        "spec": {"paused": False, "configuration": {"name": NEW}},
        "status": {
            "observedGeneration": 2,
            "machineCount": 2,
            "updatedMachineCount": updated,
            "readyMachineCount": updated,
            "degradedMachineCount": 0,
            "conditions": [
                {"type": "Updated", "status": str(updated == 2)},
                {"type": "Updating", "status": str(updated != 2)},
            ],
        },
    }


class ScriptedCluster:
    """Answers each look (pool read, then node list) with the next scripted state of the cluster."""

    def __init__(self, looks):
        self.looks = list(looks)
        self.current = None

    def get(self, ref, name, *, namespace=None):
        assert ref == MACHINE_CONFIG_POOLS and name == "gpu-b"
        self.current = self.looks.pop(0)
        return self.current[0]

    def list(self, ref, *, namespace=None, **_):
        assert ref == NODES
        return self.current[1]


def test_a_node_that_joined_the_pool_and_finished_between_two_looks_is_in_the_timeline():
    # gpu-b rolls one node at a time (maxUnavailable 1): at the first look gpu-worker-006 still has the
    # worker pool's config, as the MCO hands it gpu-b's only once gpu-worker-005 is done; by the next look
    # it got it, drained, rebooted and finished (at 600x a reboot is half a real second).
    cluster = ScriptedCluster(
        [
            (pool(updated=0), [node("gpu-worker-005", desired=NEW, state="Working"), node("gpu-worker-006")]),
            (
                pool(updated=2),
                [
                    node("gpu-worker-005", current=NEW, desired=NEW, boot="boot-2"),
                    node("gpu-worker-006", current=NEW, desired=NEW, boot="boot-2"),
                ],
            ),
        ]
    )
    moments = iter(["2026-11-25T10:00:00+00:00", "2026-11-25T10:00:01+00:00"])

    clock = Clock(
        monotonic=lambda: 0.0,
        pause=lambda seconds: None,
        now=lambda: datetime.datetime.fromisoformat(next(moments)),
    )
    result = {}
    state = wait_for_pool(cluster, name="gpu-b", wait=WaitOptions(timeout=60, sleep=1), clock=clock, result=result)
    assert state.settled
    entries = {entry["node"]: entry for entry in result["timeline"]}
    assert set(entries) == {"gpu-worker-005", "gpu-worker-006"}
    assert entries["gpu-worker-005"]["started_at"] is not None and entries["gpu-worker-005"]["rebooted"] is True
    late = entries["gpu-worker-006"]
    assert late["rebooted"] is True and late["done_at"] is not None and late["started_at"] is None
    assert (late["from_config"], late["to_config"], late["pool"]) == (OLD, NEW, "gpu-b")


def test_nodes_of_other_pools_are_not_in_the_timeline():
    cluster = ScriptedCluster(
        [
            (
                pool(updated=2),
                [node("gpu-worker-005", current=NEW, desired=NEW), node("gpu-worker-002", state="Working")],
            ),
        ]
    )
    result = {}
    wait_for_pool(
        cluster, name="gpu-b", wait=WaitOptions(timeout=60, sleep=1), clock=Clock(pause=lambda s: None), result=result
    )
    assert result["timeline"] == []


class UnpausedCluster:
    """gpu-b paused until the module's PATCH; by the wait's first look the MCO already updated gpu-worker-005."""

    def __init__(self):
        self.requests_sent = 0
        self.patched = False
        done_005 = node("gpu-worker-005", current=NEW, desired=NEW, boot="boot-2")
        self.looks = [
            [done_005, node("gpu-worker-006", desired=NEW, state="Working")],
            [done_005, node("gpu-worker-006", current=NEW, desired=NEW, boot="boot-2")],
        ]

    def get(self, ref, name, *, namespace=None):
        assert ref == MACHINE_CONFIG_POOLS and name == "gpu-b"
        if not self.patched:
            found = pool(updated=0)
            found["spec"]["paused"] = True
            found["metadata"]["resourceVersion"] = "7"
            return found
        return pool(updated=1 if len(self.looks) > 1 else 2)

    def list(self, ref, *, namespace=None, **_):
        assert ref == NODES
        if not self.patched:
            return [node("gpu-worker-005"), node("gpu-worker-006")]
        return self.looks.pop(0)

    def patch(self, ref, name, body, *, namespace=None, field_manager=""):
        assert ref == MACHINE_CONFIG_POOLS and body["spec"]["paused"] is False
        assert field_manager == "gpufleet.upgrade"  # managedFields name this collection as the writer
        self.patched = True
        return body


def test_a_node_updated_between_the_unpause_and_the_first_look_is_in_the_timeline():
    # A busy client: between its PATCH and its first read the MCO handed gpu-worker-005 the config, drained and
    # rebooted it (a reboot is half a real second at 600x). The look taken before the PATCH still shows it moved.
    result = run_machineconfigpool(
        UnpausedCluster(),
        PoolOptions(name="gpu-b", state="unpaused", wait=WaitOptions(timeout=60, sleep=1)),
        clock=Clock(monotonic=lambda: 0.0, pause=lambda seconds: None),
    )
    entries = {entry["node"]: entry for entry in result["timeline"]}
    assert set(entries) == {"gpu-worker-005", "gpu-worker-006"}, result["timeline"]
    assert entries["gpu-worker-005"]["rebooted"] is True and entries["gpu-worker-005"]["done_at"] is not None
    assert entries["gpu-worker-005"]["from_config"] == OLD
