"""The simulation through the real server: ``python -m gpufleet_twin serve`` and the kubernetes client."""

from __future__ import annotations

import json
import os
import select
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402

TIME_SCALE = 30.0  # simulated seconds per real second
REAL_TIMEOUT = 40.0


@dataclass
class RunningTwin:
    process: subprocess.Popen[str]
    kubeconfig: Path
    facts: dict[str, Any]
    api: client.ApiClient

    def admin(self, method: str, path: str, body: Any = None, *, token: str | None = None) -> tuple[int, Any]:
        context = ssl.create_default_context(cafile=self.facts["ca_file"])
        request = urllib.request.Request(
            self.facts["api"] + path,
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {token or self.facts['token']}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")


def wait_for(condition: Callable[[], Any], *, timeout: float = REAL_TIMEOUT, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningTwin]:
    folder = tmp_path_factory.mktemp("twin")
    kubeconfig = folder / "kubeconfig"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gpufleet_twin",
            "serve",
            "--nodes",
            "5",
            "--profile",
            "kubernetes",
            "--time-scale",
            str(TIME_SCALE),
            "--kubeconfig",
            str(kubeconfig),
            "--state-dir",
            str(folder / "state"),
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        ready, _, _ = select.select([process.stdout], [], [], 60)
        line = process.stdout.readline() if ready else ""  # type: ignore[union-attr]
        if "ready" not in line:
            process.kill()
            pytest.fail(f"the twin did not start: {line!r} {process.stderr.read()[-2000:]}")  # type: ignore[union-attr]
        facts = json.loads(Path(f"{kubeconfig}.twin.json").read_text())
        api = config.new_client_from_config(config_file=str(kubeconfig))
        yield RunningTwin(process=process, kubeconfig=kubeconfig, facts=facts, api=api)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
        assert code == 0, process.stderr.read()[-2000:]  # type: ignore[union-attr]


def test_nodes_have_gpu_labels_and_allocatable_gpus(twin: RunningTwin) -> None:
    core = client.CoreV1Api(twin.api)
    nodes = core.list_node(label_selector="nvidia.com/gpu.present=true").items
    assert [n.metadata.name for n in nodes] == [f"gpu-worker-00{i}" for i in range(1, 6)]
    node = nodes[0]
    assert node.metadata.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.metadata.labels["gpufleet.io/rack"] == "rack-1"
    assert node.status.capacity["nvidia.com/gpu"] == "8"

    def all_gpus_allocatable() -> bool:
        workers = core.list_node(label_selector="nvidia.com/gpu.present=true").items
        return all(n.status.allocatable.get("nvidia.com/gpu") == "8" for n in workers)

    wait_for(all_gpus_allocatable, what="8 allocatable GPUs on every worker (driver and device plugin up)")
    assert node.status.node_info.container_runtime_version.startswith("containerd://")
    assert twin.facts["published"]["gpu_worker_nodes"][0] == "gpu-worker-001"


def test_daemonset_pods_run_and_a_deleted_pod_goes_away(twin: RunningTwin) -> None:
    apps = client.AppsV1Api(twin.api)
    core = client.CoreV1Api(twin.api)
    labels = {"app": "node-probe"}
    apps.create_namespaced_daemon_set(
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "node-probe"},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"nvidia.com/gpu.present": "true"},
                        "containers": [
                            {
                                "name": "probe",
                                "image": "registry.example/probe:1",
                                "command": ["nvidia-smi", "--query-gpu=index,name", "--format=csv"],
                            }
                        ],
                    },
                },
            },
        },
    )

    def ready_pods() -> list[Any]:
        pods = core.list_namespaced_pod("default", label_selector="app=node-probe").items
        ready = [
            p
            for p in pods
            if p.status.phase == "Running" and p.status.container_statuses and p.status.container_statuses[0].ready
        ]
        return ready if len(ready) == 5 else []

    pods = wait_for(ready_pods, what="5 ready daemon pods")
    ds = apps.read_namespaced_daemon_set("node-probe", "default")
    wait_for(
        lambda: apps.read_namespaced_daemon_set("node-probe", "default").status.number_ready == 5,
        what="DaemonSet status",
    )
    assert ds.status.desired_number_scheduled == 5
    log = core.read_namespaced_pod_log(pods[0].metadata.name, "default")
    assert log.splitlines()[0] == "index, name"
    assert log.splitlines()[1] == "0, NVIDIA H100 80GB HBM3"
    victim = pods[0].metadata.name
    core.delete_namespaced_pod(victim, "default")

    def gone() -> bool:
        try:
            core.read_namespaced_pod(victim, "default")
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(gone, what="the deleted pod to go away")
    wait_for(ready_pods, what="the DaemonSet to replace the pod")


def test_job_completes(twin: RunningTwin) -> None:
    batch = client.BatchV1Api(twin.api)
    batch.create_namespaced_job(
        "default",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "smoke"},
            "spec": {
                "template": {
                    "metadata": {"annotations": {"twin.gpufleet.io/run-for": "30"}},
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "smoke", "image": "registry.example/smoke:1"}],
                    },
                }
            },
        },
    )

    def complete() -> bool:
        job = batch.read_namespaced_job("smoke", "default")
        return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or ())

    wait_for(complete, what="the Job to complete")
    assert batch.read_namespaced_job("smoke", "default").status.succeeded == 1


def test_admin_report_faults_and_clock(twin: RunningTwin) -> None:
    core = client.CoreV1Api(twin.api)
    status, _ = twin.admin("POST", "/admin/report/reset")
    assert status == 200
    core.list_node()
    core.list_node()
    status, report = twin.admin("GET", "/admin/report")
    assert status == 200
    assert report["requests"]["by_verb_resource"]["list nodes"] >= 2
    assert report["gpu_capacity"]["current"] >= 0
    assert twin.admin("GET", "/admin/report", token="wrong")[0] == 401

    status, added = twin.admin(
        "POST", "/admin/faults", {"type": "api_errors", "code": 503, "count": 1, "verb": "list", "resource": "nodes"}
    )
    assert status == 201 and added["faults"][0]["state"] == "active"
    with pytest.raises(ApiException) as refused:
        core.list_node()
    assert refused.value.status == 503
    core.list_node()  # the burst was one request long
    assert twin.admin("GET", "/admin/faults")[1]["faults"][0]["state"] == "done"
    assert twin.admin("DELETE", "/admin/faults")[1] == {"removed": 1}
    assert twin.admin("POST", "/admin/faults", {"type": "bogus"})[0] == 400

    before = twin.admin("GET", "/admin/clock")[1]["epoch_seconds"]
    status, after = twin.admin("POST", "/admin/clock/advance", {"seconds": 3600})
    assert status == 200 and after["epoch_seconds"] >= before + 3600
    assert twin.admin("POST", "/admin/budget", {"maxUnavailable": "20%", "scope": "nvidia.com/gpu.present=true"})[
        1
    ] == {
        "maxUnavailable": "20%",
        "source": "admin",
        "scope": {"matchLabels": {"nvidia.com/gpu.present": "true"}},
        "nodes_in_scope": 5,
        "allowed_unavailable": 1,
        "unavailable_in_scope": 0,
    }


def test_kubectl_sees_the_simulated_cluster(twin: RunningTwin) -> None:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(twin.kubeconfig), "get", "nodes", "-l", "node-role.kubernetes.io/worker"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:2] == ["NAME", "STATUS"]
    assert [line.split()[0] for line in lines[1:]] == [f"gpu-worker-00{i}" for i in range(1, 6)]
    assert all(line.split()[1] == "Ready" for line in lines[1:])


def test_kubectl_scale_takes_effect(twin: RunningTwin) -> None:
    apps = client.AppsV1Api(twin.api)
    core = client.CoreV1Api(twin.api)
    labels = {"app": "api-server"}
    apps.create_namespaced_deployment(
        "default",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "api-server"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "api", "image": "registry.example/api:1"}]},
                },
            },
        },
    )
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(twin.kubeconfig), "scale", "deployment/api-server", "--replicas=3"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr

    def scaled() -> bool:
        deployment = apps.read_namespaced_deployment("api-server", "default")
        return deployment.status.ready_replicas == 3 and deployment.status.available_replicas == 3

    wait_for(scaled, what="the Deployment to reach 3 ready replicas")
    pods = core.list_namespaced_pod("default", label_selector="app=api-server").items
    assert len([p for p in pods if p.metadata.deletion_timestamp is None]) == 3
    assert apps.read_namespaced_deployment_scale("api-server", "default").spec.replicas == 3


def test_faults_end_by_id_and_after_their_simulated_duration(twin: RunningTwin) -> None:
    core = client.CoreV1Api(twin.api)

    def cordoned(name: str) -> bool:
        return bool(core.read_node(name).spec.unschedulable)

    status, added = twin.admin("POST", "/admin/faults", {"type": "cordon", "node": "gpu-worker-004"})
    assert status == 201 and cordoned("gpu-worker-004")
    fault_id = added["faults"][0]["id"]
    status, removed = twin.admin("DELETE", f"/admin/faults/{fault_id}")
    assert status == 200 and removed["removed"] == 1 and removed["fault"]["state"] == "done"
    assert not cordoned("gpu-worker-004"), "removing the fault uncordons what it cordoned"
    assert twin.admin("DELETE", f"/admin/faults/{fault_id}")[0] == 404

    status, added = twin.admin("POST", "/admin/faults", {"type": "cordon", "node": "gpu-worker-005", "duration": 7200})
    assert status == 201 and cordoned("gpu-worker-005")
    twin.admin("POST", "/admin/clock/advance", {"seconds": 3600})
    time.sleep(0.5)
    assert cordoned("gpu-worker-005"), "the fault lasts its duration on the twin's clock"
    twin.admin("POST", "/admin/clock/advance", {"seconds": 3601})
    wait_for(lambda: not cordoned("gpu-worker-005"), what="the fault to end after its duration")
    listed = twin.admin("GET", "/admin/faults")[1]["faults"]
    assert [f["state"] for f in listed if f["id"] == added["faults"][0]["id"]] == ["done"]
    twin.admin("DELETE", "/admin/faults")
