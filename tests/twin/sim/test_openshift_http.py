"""The twin's OpenShift profile over real HTTPS: kubectl against ``python -m gpufleet_twin serve`` with the real
upstream MachineConfigPool and ClusterVersion CRDs (``../shared/reference/crds``, skipped when absent)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from gpufleet_twin.operators import openshift as ocp
from gpufleet_twin.process import SHARED_CRDS, TwinProcess, start_twin

pytestmark = pytest.mark.skipif(not SHARED_CRDS.is_dir(), reason="needs ../shared/reference/crds")
TARGET = "4.17.3"


def kubectl(twin: TwinProcess, *args: str, check: bool = True) -> str:
    done = subprocess.run(
        ["kubectl", "--kubeconfig", str(twin.kubeconfig), *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {done.stderr}")
    return done.stdout


def get(twin: TwinProcess, *args: str) -> Any:
    return json.loads(kubectl(twin, "get", *args, "-o", "json"))


def wait_for(condition: Callable[[], Any], *, what: str, timeout: float = 40.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def condition(obj: Any, kind: str) -> str:
    return next((c["status"] for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), "")


@pytest.fixture
def twin(tmp_path):
    process = start_twin(nodes=4, profile="openshift", time_scale=600, workdir=tmp_path)
    yield process
    assert process.stop() == 0


def test_real_crds_prune_unknown_fields_and_cluster_version_has_a_status(twin):
    cv = get(twin, "clusterversion", "version")
    # The real CRD requires availableUpdates, desired, observedGeneration and versionHash in status.
    assert cv["status"]["history"][0] == {**cv["status"]["history"][0], "state": "Completed", "version": "4.16.20"}
    assert "versionHash" in cv["status"] and "availableUpdates" in cv["status"]
    assert "Cluster version is 4.16.20" in kubectl(twin, "get", "clusterversion")
    kubectl(twin, "patch", "mcp", "worker", "--type", "merge", "-p", '{"spec": {"bogus": 1, "paused": true}}')
    worker = get(twin, "mcp", "worker", "--show-managed-fields")
    assert worker["spec"]["paused"] is True and "bogus" not in worker["spec"]
    # kubectl names itself as the manager of spec.paused (the only record of who paused a pool, and when).
    owners = [e for e in worker["metadata"]["managedFields"] if "f:paused" in e["fieldsV1"].get("f:spec", {})]
    assert [(e["manager"], e["operation"]) for e in owners] == [("kubectl-patch", "Update")]
    assert owners[0]["time"].endswith("Z")
    signer = get(twin, "secret", "-n", ocp.SIGNER_NAMESPACE, ocp.SIGNER_NAME)
    assert signer["metadata"]["annotations"]["auth.openshift.io/certificate-not-after"] > owners[0]["time"]
    kubectl(twin, "patch", "clusterversion", "version", "--type", "merge", "-p", '{"spec": {"notAField": "x"}}')
    assert "notAField" not in get(twin, "clusterversion", "version")["spec"]


def test_paused_pool_holds_unpause_rolls_within_max_unavailable_history_and_driver_toolkit(twin):
    kubectl(twin, "patch", "mcp", "worker", "--type", "merge", "-p", '{"spec": {"paused": true}}')
    kubectl(twin, "patch", "clusterversion", "version", "--type", "merge", "-p",
            json.dumps({"spec": {"desiredUpdate": {"version": TARGET}}}))  # fmt: skip
    wait_for(lambda: get(twin, "clusterversion", "version")["status"]["history"][0]["version"] == TARGET, what="start")
    assert get(twin, "clusterversion", "version")["status"]["history"][0]["state"] == "Partial"
    wait_for(
        lambda: get(twin, "clusterversion", "version")["status"]["history"][0]["state"] == "Completed", what="done"
    )
    history = get(twin, "clusterversion", "version")["status"]["history"]
    assert [h["version"] for h in history] == [TARGET, "4.16.20"]
    new = ocp.rhcos_for(TARGET)
    tags = {t["name"]: t["from"]["name"] for t in get(twin, "is", "-n", "openshift", "driver-toolkit")["spec"]["tags"]}
    assert tags["latest"] == tags[new.ostree] and ocp.rhcos_for("4.16.20").ostree in tags  # old tag kept
    nodes = get(twin, "nodes", "-l", "node-role.kubernetes.io/worker")["items"]
    assert all(n["status"]["nodeInfo"]["kernelVersion"] != new.kernel for n in nodes)  # the paused pool holds
    cordoned: list[int] = []

    def rolled() -> bool:
        items = get(twin, "nodes", "-l", "node-role.kubernetes.io/worker")["items"]
        cordoned.append(sum(1 for n in items if n["spec"].get("unschedulable")))
        return all(n["status"]["nodeInfo"]["kernelVersion"] == new.kernel for n in items)

    kubectl(twin, "patch", "mcp", "worker", "--type", "merge", "-p", '{"spec": {"paused": false}}')
    wait_for(rolled, what="workers on the new RHCOS")
    assert max(cordoned) <= 1  # maxUnavailable defaults to 1
    wait_for(lambda: condition(get(twin, "mcp", "worker"), "Updated") == "True", what="pool Updated")


def test_machine_config_fails_fault_degrades_the_pool_and_build_pods_follow_the_kernel(twin):
    twin.admin("POST", "faults", {"type": "machine_config_fails", "node": "gpu-worker-002"})
    kubectl(twin, "patch", "clusterversion", "version", "--type", "merge", "-p",
            json.dumps({"spec": {"desiredUpdate": {"version": TARGET}}}))  # fmt: skip
    wait_for(lambda: condition(get(twin, "mcp", "worker"), "Degraded") == "True", what="worker pool Degraded")
    worker = get(twin, "mcp", "worker")
    assert worker["status"]["degradedMachineCount"] == 1
    assert "gpu-worker-002" in next(c["message"] for c in worker["status"]["conditions"] if c["type"] == "NodeDegraded")
    node = get(twin, "node", "gpu-worker-002")
    assert node["metadata"]["annotations"][ocp.MCD_STATE] == "Degraded"
    assert "rpm-ostree" in node["metadata"]["annotations"][ocp.MCD_REASON]

    def build_pod(name: str, dtk: str) -> str:
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "build", "image": "nvcr.io/nvidia/driver:550.127.05-rhcos4.17",
                     "env": [{"name": "DRIVER_VERSION", "value": "550.127.05"}]},
                    {"name": "dtk", "image": dtk},
                ],
            },
        }  # fmt: skip
        subprocess.run(
            ["kubectl", "--kubeconfig", str(twin.kubeconfig), "create", "-f", "-"],
            input=json.dumps(body), text=True, capture_output=True, check=True, timeout=30,
        )  # fmt: skip
        return wait_for(
            lambda: (
                get(twin, "pod", "-n", "default", name)["status"].get("phase") in ("Succeeded", "Failed")
                and get(twin, "pod", "-n", "default", name)["status"]["phase"]
            ),
            what=f"build pod {name}",
        )

    # A build on a driver toolkit compiles for that RHCOS's kernel: the fault breaks only the new one.
    twin.admin("POST", "faults", {"type": "driver_build_fails", "kernel": ocp.rhcos_for(TARGET).kernel})
    assert build_pod("build-old", ocp.dtk_image(ocp.rhcos_for("4.16.20"))) == "Succeeded"
    assert build_pod("build-new", ocp.dtk_image(ocp.rhcos_for(TARGET))) == "Failed"


def test_sriov_operator_is_an_olm_operator_whose_channel_follows_the_cluster(twin):
    namespace = "openshift-sriov-network-operator"
    sub = get(twin, "subscription", "-n", namespace, "sriov-network-operator")
    assert sub["spec"]["channel"] == "stable" and sub["status"]["installedCSV"].startswith(
        "sriov-network-operator.v4.16.0"
    )
    assert get(twin, "csv", "-n", namespace)["items"][0]["status"]["phase"] == "Succeeded"


def test_node_rebooted_into_a_kernel_without_a_driver_build_goes_without_gpus(twin):
    new = ocp.rhcos_for(TARGET)
    twin.admin("POST", "faults", {"type": "driver_build_fails", "kernel": new.kernel})
    kubectl(twin, "patch", "clusterversion", "version", "--type", "merge", "-p",
            json.dumps({"spec": {"desiredUpdate": {"version": TARGET}}}))  # fmt: skip

    def first_rebooted() -> str:
        nodes = get(twin, "nodes", "-l", "node-role.kubernetes.io/worker")["items"]
        return next(
            (
                n["metadata"]["name"]
                for n in nodes
                if n["status"]["nodeInfo"]["kernelVersion"] == new.kernel and condition(n, "Ready") == "True"
            ),
            "",
        )

    node = wait_for(first_rebooted, what="a worker back on the new RHCOS", timeout=60)

    def driver_pod() -> Any:
        pods = get(twin, "pods", "-A", "-l", "app.kubernetes.io/component=nvidia-driver",
                   "--field-selector", f"spec.nodeName={node}")["items"]  # fmt: skip
        return next((p for p in pods if new.ostree in p["metadata"]["name"]), None)

    def failing_build() -> Any:
        pod = driver_pod()
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        return pod if any(s.get("restartCount", 0) >= 1 and not s.get("ready") for s in statuses) else None

    # The GPU Operator's DaemonSet for the new RHCOS runs a driver pod there, whose build fails.
    pod = wait_for(failing_build, what=f"the driver pod for {new.ostree} on {node} failing its build")
    assert pod["spec"]["nodeSelector"]["feature.node.kubernetes.io/system-os_release.OSTREE_VERSION"] == new.ostree
    allocatable = get(twin, "node", node)["status"]["allocatable"]
    assert allocatable.get("nvidia.com/gpu", "0") == "0"  # no driver, no device plugin: no GPUs to offer

    def pinned(name: str, gpus: int) -> dict[str, Any]:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [{"name": "main", "image": "registry.example/ml:1", "resources": resources}],
            },
        }

    for body in (pinned("wants-a-gpu", 1), pinned("cpu-only", 0)):
        subprocess.run(
            ["kubectl", "--kubeconfig", str(twin.kubeconfig), "create", "-f", "-"],
            input=json.dumps(body), text=True, capture_output=True, check=True, timeout=30,
        )  # fmt: skip
    wait_for(lambda: get(twin, "pod", "-n", "default", "cpu-only")["status"].get("phase") == "Running", what="cpu pod")
    gpu_pod = wait_for(
        lambda: (
            (p := get(twin, "pod", "-n", "default", "wants-a-gpu")) and condition(p, "PodScheduled") == "False" and p
        ),
        what="the GPU pod refused by the scheduler",
    )
    assert gpu_pod["status"]["phase"] == "Pending"
    scheduled = next(c for c in gpu_pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert "Insufficient nvidia.com/gpu" in scheduled["message"]
