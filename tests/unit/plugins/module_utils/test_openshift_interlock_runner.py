"""run_kernel_interlock's writes and what it reports of them (changed, diff), on an in-memory cluster."""

from __future__ import annotations

import datetime

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import RolloutHaltedError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CLUSTER_POLICIES,
    IMAGE_STREAMS,
    NIC_CLUSTER_POLICIES,
    PODS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_runner import (
    Clock,
    InterlockOptions,
    WaitOptions,
    run_kernel_interlock,
)

RHCOS = "416.94.202410211619-0"
DTK = f"quay.io/openshift-release-dev/ocp-v4.0-art-dev:driver-toolkit-{RHCOS}"
TARGET = {"openshift": "4.16.20", "gpu_driver": "550.127.05"}


class Cluster:
    """The driver toolkit, a ClusterPolicy and the build pods (each created pod ends as ``outcome``); every write
    is recorded."""

    def __init__(self, *, tags=True, pods=None, outcome="Succeeded"):
        stream_tags = [{"name": RHCOS, "from": {"name": DTK}}, {"name": "latest", "from": {"name": DTK}}]
        self.stream = {"spec": {"tags": stream_tags if tags else []}}
        self.pods = dict(pods or {})
        self.outcome = outcome
        self.writes = []
        self.requests_sent = 0

    def cluster_now(self):
        return datetime.datetime(2026, 11, 28, tzinfo=datetime.UTC)

    def get(self, ref, name, *, namespace=None):
        if ref == IMAGE_STREAMS:
            return self.stream
        assert ref == PODS and namespace == "nvidia-gpu-operator"
        return self.pods.get(name)

    def list(self, ref, *, namespace=None, **_):
        if ref == CLUSTER_POLICIES:
            return [{"spec": {"driver": {"version": "550.127.05"}}, "status": {"namespace": "nvidia-gpu-operator"}}]
        assert ref == NIC_CLUSTER_POLICIES
        return []

    def create(self, ref, body, *, namespace=None):
        self.writes.append(("create", body["metadata"]["name"]))
        self.pods[body["metadata"]["name"]] = {**body, "status": {"phase": self.outcome}}
        return body

    def delete(self, ref, name, *, namespace=None, **_):
        self.writes.append(("delete", name))
        self.pods.pop(name, None)


def interlock(cluster, **options):
    wait = WaitOptions(timeout=60, sleep=0.01)
    clock = Clock(pause=lambda _seconds: None, now=cluster.cluster_now)
    return run_kernel_interlock(cluster, InterlockOptions(target=TARGET, check_matrix=False, wait=wait, diff=True,
                                                          **options), clock=clock)  # fmt: skip


def test_check_mode_writes_nothing_and_reports_the_pod_a_run_creates():
    cluster = Cluster()
    check = interlock(cluster, check_mode=True)
    assert cluster.writes == [] and check["changed"] is True and check["builds"] == []
    (name,) = check["diff"]["after"]["pods"]
    assert check["diff"]["before"] == {"pods": {}} and name.startswith("gpufleet-build-gpu-driver-")
    real = interlock(cluster)
    assert cluster.writes == [("create", name), ("delete", name)] and cluster.pods == {}
    assert real["changed"] is True and real["diff"] == check["diff"] and real["builds"][0]["succeeded"] is True


def test_a_failed_pod_of_an_earlier_run_is_deleted_and_built_again():
    (name,) = interlock(Cluster(), check_mode=True)["diff"]["after"]["pods"]
    failed = {"metadata": {"name": name, "uid": "u-1"}, "status": {"phase": "Failed"}}
    cluster = Cluster(pods={name: failed})
    result = interlock(cluster)
    assert cluster.writes == [("delete", name), ("create", name), ("delete", name)]
    assert result["changed"] is True and result["diff"]["before"] == {"pods": {name: {"metadata": {"name": name}}}}


def test_nothing_to_build_or_a_halt_before_the_builds_is_no_change():
    cluster = Cluster(tags=False)
    with pytest.raises(RolloutHaltedError) as halted:
        interlock(cluster)
    assert cluster.writes == [] and halted.value.result["changed"] is False
    assert halted.value.result["diff"] == {**halted.value.result["diff"], "before": {"pods": {}}, "after": {"pods": {}}}
    off = interlock(Cluster(), build_check=False)
    assert off["changed"] is False and off["diff"]["after"] == {"pods": {}}
