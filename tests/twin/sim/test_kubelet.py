"""The simulated kubelet, scheduler and node lifecycle, in-process against the store."""

from __future__ import annotations

from simharness import SimCluster, pod_manifest

from gpufleet_twin.kube import podutil
from gpufleet_twin.kube.kubelet import OUTCOME_ANNOTATION, RUN_FOR_ANNOTATION
from gpufleet_twin.kube.state import NodeHealth, PodPlan


def _container(pod: dict) -> dict:
    return pod["status"]["containerStatuses"][0]


def test_bound_pod_goes_pending_then_running_and_ready(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        worker = cluster.workers[0]
        cluster.create("pod", pod_manifest("probe", node=worker))
        await cluster.settle()
        pod = cluster.pod("default", "probe")
        assert pod["status"]["phase"] == "Pending"
        assert _container(pod)["state"]["waiting"]["reason"] == "ContainerCreating"
        assert not podutil.is_pod_ready(pod)
        assert await cluster.wait_until(lambda: podutil.is_pod_ready(cluster.pod("default", "probe")), sim_seconds=30)
        pod = cluster.pod("default", "probe")
        assert pod["status"]["phase"] == "Running"
        assert _container(pod)["state"]["running"]["startedAt"]
        assert _container(pod)["restartCount"] == 0
        assert pod["status"]["hostIP"].startswith("10.1.")
        assert pod["status"]["podIP"] and pod["status"]["podIP"] != pod["status"]["hostIP"]
        kinds = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert kinds == {
            "PodReadyToStartContainers": "True",
            "Initialized": "True",
            "Ready": "True",
            "ContainersReady": "True",
            "PodScheduled": "True",
        }
        assert {e["reason"] for e in cluster.events() if e["involvedObject"].get("name") == "probe"} >= {
            "Pulled",
            "Created",
            "Started",
        }

    simulate(scenario, nodes=2)


def test_unbound_pod_is_scheduled_by_gpu_capacity(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        for i in range(3):
            cluster.create("pod", pod_manifest(f"big-{i}", gpus=8))
        await cluster.run_for(10)
        placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in cluster.pods("default")}
        bound = [n for n in placed.values() if n]
        assert sorted(bound) == sorted(cluster.workers), "one 8-GPU pod per 8-GPU node"
        waiting = next(p for p in cluster.pods("default") if not p["spec"].get("nodeName"))
        scheduled = podutil.condition(waiting, "PodScheduled")
        assert scheduled["status"] == "False" and scheduled["reason"] == "Unschedulable"
        assert "Insufficient nvidia.com/gpu" in scheduled["message"]
        assert "untolerated taint {node-role.kubernetes.io/control-plane: }" in scheduled["message"]
        assert cluster.events("FailedScheduling")
        # Freeing a node lets the waiting pod in.
        first = next(name for name, node in placed.items() if node)
        cluster.store.delete(cluster.kinds.pod, "default", first)
        assert await cluster.wait_until(
            lambda: cluster.pod("default", waiting["metadata"]["name"])["spec"].get("nodeName") is not None,
            sim_seconds=120,
        )

    simulate(scenario, nodes=2)


def test_cordoned_node_gets_no_new_pods(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cordoned = cluster.workers[0]
        node = cluster.node(cordoned)
        assert node["spec"]["unschedulable"] is True
        assert {"key": podutil.UNSCHEDULABLE_TAINT, "effect": "NoSchedule"} in node["spec"]["taints"]
        for i in range(4):
            cluster.create("pod", pod_manifest(f"p-{i}", gpus=1))
        await cluster.run_for(5)
        assert {p["spec"]["nodeName"] for p in cluster.pods("default")} == {cluster.workers[1]}

    simulate(scenario, nodes=2, cordoned=("gpu-worker-001",))


def test_crashloop_restart_count_grows_with_backoff(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create(
            "pod",
            pod_manifest("crasher", node=cluster.workers[0], annotations={OUTCOME_ANNOTATION: "crashloop"}),
        )
        await cluster.run_for(6)
        status = _container(cluster.pod("default", "crasher"))
        assert status["restartCount"] == 1
        assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        assert "back-off 10s restarting failed container=main" in status["state"]["waiting"]["message"]
        assert status["lastState"]["terminated"]["exitCode"] == 1
        await cluster.run_for(10 + 20 + 40, step=2)
        status = _container(cluster.pod("default", "crasher"))
        assert status["restartCount"] == 4
        assert "back-off 1m20s" in status["state"]["waiting"]["message"]
        assert not podutil.is_pod_ready(cluster.pod("default", "crasher"))
        assert cluster.events("BackOff")

    simulate(scenario, nodes=1)


def test_image_no_registry_serves_waits_in_image_pull_back_off_until_it_is_there(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        # A tag prefix matches the tags the operators build from it (the OS suffix).
        cluster.sim.unpullable_images["registry.example/tools"] = "not found"
        manifest = pod_manifest("puller", node=cluster.workers[0])
        manifest["spec"]["containers"][0]["image"] = "registry.example/tools-rhcos4.16"
        cluster.create("pod", manifest)
        await cluster.run_for(6)
        pod = cluster.pod("default", "puller")
        assert pod["status"]["phase"] == "Pending"
        assert _container(pod)["state"]["waiting"] == {"reason": "ErrImagePull", "message": "not found"}
        await cluster.run_for(10 + 20, step=2)
        status = _container(cluster.pod("default", "puller"))
        assert status["state"]["waiting"] == {
            "reason": "ImagePullBackOff",
            "message": 'Back-off pulling image "registry.example/tools-rhcos4.16"',
        }
        assert status["restartCount"] == 0, "a pull that fails is no restart"
        failed = [e["message"] for e in cluster.events("Failed") if e["involvedObject"]["name"] == "puller"]
        assert failed and failed[0] == 'Failed to pull image "registry.example/tools-rhcos4.16": not found'
        # The image is pushed: the next pull (back-off 40 s) succeeds and the pod starts.
        del cluster.sim.unpullable_images["registry.example/tools"]
        assert await cluster.wait_until(lambda: podutil.is_pod_ready(cluster.pod("default", "puller")), sim_seconds=90)
        assert _container(cluster.pod("default", "puller"))["restartCount"] == 0

    simulate(scenario, nodes=1)


def test_a_crash_loop_planned_again_at_restart_runs_once_its_cause_is_gone(simulate) -> None:
    """The driver that found the old module in use: each restart tries again, and runs once the holder left."""
    held = {"yes": True}

    def behaviour(pod: dict, node: NodeHealth) -> PodPlan | None:
        if pod["metadata"]["name"] != "retrier":
            return None
        if held["yes"]:
            return PodPlan(outcome="crashloop", start_after=1, message="in use", reason="Error", replan_on_restart=True)
        return PodPlan(outcome="ready", start_after=3)

    async def scenario(cluster: SimCluster) -> None:
        cluster.sim.pod_behaviours.insert(0, behaviour)
        cluster.create("pod", pod_manifest("retrier", node=cluster.workers[0]))
        await cluster.run_for(20, step=2)
        status = _container(cluster.pod("default", "retrier"))
        assert status["restartCount"] >= 1 and status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
        held["yes"] = False
        assert await cluster.wait_until(
            lambda: podutil.is_pod_ready(cluster.pod("default", "retrier")), sim_seconds=400
        )
        pod = cluster.pod("default", "retrier")
        assert pod["metadata"]["uid"] and _container(pod)["restartCount"] >= 1, "the same pod, restarted"
        assert _container(pod)["lastState"]["terminated"]["message"] == "in use"

    simulate(scenario, nodes=1)


def test_pod_runs_to_completion(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        annotations = {OUTCOME_ANNOTATION: "succeeded", RUN_FOR_ANNOTATION: "30"}
        cluster.create(
            "pod", pod_manifest("once", node=cluster.workers[0], annotations=annotations, restart_policy="Never")
        )
        await cluster.run_for(10)
        assert cluster.pod("default", "once")["status"]["phase"] == "Running"
        await cluster.run_for(30)
        pod = cluster.pod("default", "once")
        assert pod["status"]["phase"] == "Succeeded"
        terminated = _container(pod)["state"]["terminated"]
        assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
        assert podutil.condition(pod, "Ready")["reason"] == "PodCompleted"

    simulate(scenario, nodes=1)


def test_graceful_deletion_is_finished_by_the_kubelet(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("pod", pod_manifest("victim", node=cluster.workers[0]))
        await cluster.run_for(6)
        terminating = cluster.store.delete(cluster.kinds.pod, "default", "victim")
        assert terminating["metadata"]["deletionTimestamp"]
        assert cluster.pod("default", "victim") is not None
        assert await cluster.wait_until(lambda: cluster.pod("default", "victim") is None, sim_seconds=5)
        assert cluster.events("Killing")

    simulate(scenario, nodes=1)


def test_node_status_follows_node_health(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        name = cluster.workers[0]
        health = cluster.sim.nodes[name]
        assert cluster.node(name)["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        health.driver_version = None  # driver unloaded: the device plugin has nothing to offer
        await cluster.settle()
        node = cluster.node(name)
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
        assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
        # GFD keeps the labels of the last loaded driver until a new one loads.
        assert node["metadata"]["labels"]["nvidia.com/cuda.driver-version.full"] == "550.127.05"
        health.driver_version = "595.80"
        health.kernel = "5.15.0-130-generic"
        await cluster.settle()
        node = cluster.node(name)
        labels = node["metadata"]["labels"]
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        assert labels["nvidia.com/cuda.driver-version.full"] == "595.80"
        assert labels["nvidia.com/cuda.driver.major"] == "595"
        assert "nvidia.com/cuda.driver-version.revision" not in labels  # two-part version: no revision
        assert labels["nvidia.com/cuda.runtime-version.full"] == "13.2"
        assert labels["feature.node.kubernetes.io/kernel-version.full"] == "5.15.0-130-generic"
        assert node["status"]["nodeInfo"]["kernelVersion"] == "5.15.0-130-generic"

    simulate(scenario, nodes=1)


def test_reboot_takes_node_down_and_restarts_its_pods(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        name = cluster.workers[0]
        cluster.create("pod", pod_manifest("worker-pod", node=name))
        await cluster.run_for(6)
        boot_id = cluster.node(name)["status"]["nodeInfo"]["bootID"]
        cluster.sim.reboot(name, 120)
        await cluster.run_for(41, step=1)
        node = cluster.node(name)
        ready = podutil.condition(node, "Ready")
        assert ready["status"] == "Unknown" and ready["reason"] == "NodeStatusUnknown"
        assert {"key": podutil.UNREACHABLE_TAINT, "effect": "NoExecute"} in [
            {"key": t["key"], "effect": t["effect"]} for t in node["spec"]["taints"]
        ]
        assert not podutil.is_pod_ready(cluster.pod("default", "worker-pod"))
        assert cluster.node(name)["status"]["allocatable"]["nvidia.com/gpu"] == "8"  # nobody posts while down
        await cluster.run_for(90, step=2)
        node = cluster.node(name)
        assert podutil.is_node_ready(node)
        assert node["status"]["nodeInfo"]["bootID"] != boot_id
        assert "taints" not in node["spec"] or not any(
            t["key"] == podutil.UNREACHABLE_TAINT for t in node["spec"]["taints"]
        )
        pod = cluster.pod("default", "worker-pod")
        assert _container(pod)["restartCount"] == 1
        assert _container(pod)["lastState"]["terminated"]["reason"] == "Unknown"
        assert await cluster.wait_until(
            lambda: podutil.is_pod_ready(cluster.pod("default", "worker-pod")), sim_seconds=10
        )
        assert cluster.events("Rebooted")
        # The reboot unloaded the driver: no GPUs until a driver pod loads one again.
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"

    simulate(scenario, nodes=1)


def test_node_that_never_returns_has_its_pods_evicted_but_stuck_terminating(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        name = cluster.workers[0]
        cluster.create("pod", pod_manifest("stranded", node=name))
        await cluster.run_for(6)
        health = cluster.sim.nodes[name]
        health.never_returns = True
        cluster.sim.reboot(name, 60)
        await cluster.run_for(200, step=5)
        assert not podutil.is_node_ready(cluster.node(name))
        assert cluster.pod("default", "stranded")["metadata"].get("deletionTimestamp") is None
        await cluster.run_for(200, step=5)  # past the 300 s default toleration of unreachable:NoExecute
        pod = cluster.pod("default", "stranded")
        assert pod is not None and pod["metadata"].get("deletionTimestamp"), "evicted, but no kubelet to finish it"
        assert cluster.events("TaintManagerEviction")
        recorded = cluster.sim.recorder.report()["disrupted_pods"]
        assert {d["why"] for d in recorded if d["name"] == "stranded"} >= {"node rebooted"}

    simulate(scenario, nodes=1, with_recorder=True)


def test_kubelet_not_ready_holds_new_pods_and_recovers(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        name = cluster.workers[0]
        cluster.create("pod", pod_manifest("steady", node=name))
        await cluster.run_for(6)
        health = cluster.sim.nodes[name]
        health.ready = False  # kubelet up, reporting NotReady (e.g. the CNI is gone)
        await cluster.settle()
        ready = podutil.condition(cluster.node(name), "Ready")
        assert (ready["status"], ready["reason"]) == ("False", "KubeletNotReady")
        taints = {(t["key"], t["effect"]) for t in cluster.node(name)["spec"]["taints"]}
        assert (podutil.NOT_READY_TAINT, "NoSchedule") in taints
        assert not podutil.is_pod_ready(cluster.pod("default", "steady"))
        cluster.create("pod", pod_manifest("newcomer", node=name))
        await cluster.run_for(20)
        assert cluster.pod("default", "newcomer")["status"]["phase"] == "Pending"
        health.ready = True
        assert await cluster.wait_until(
            lambda: (
                podutil.is_pod_ready(cluster.pod("default", "steady"))
                and podutil.is_pod_ready(cluster.pod("default", "newcomer"))
            ),
            sim_seconds=20,
        )
        assert _container(cluster.pod("default", "steady"))["restartCount"] == 0, "no reboot: no restart"

    simulate(scenario, nodes=1)


def test_pod_without_gpu_request_fits_a_node_whose_gpus_are_overcommitted(simulate) -> None:
    # A driver restart drops allocatable GPUs below what running pods hold; the
    # scheduler only checks what a pod requests, so a CPU-only pod still fits.
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("pod", pod_manifest("holder", gpus=8))
        await cluster.run_for(10)
        holder_node = cluster.pod("default", "holder")["spec"]["nodeName"]
        assert holder_node
        for name in cluster.workers:
            cluster.sim.nodes[name].device_plugin_up = False
        await cluster.run_for(60)
        assert cluster.node(holder_node)["status"]["allocatable"]["nvidia.com/gpu"] == "0"
        cluster.create("pod", pod_manifest("cpu-only", gpus=0))
        assert await cluster.wait_until(
            lambda: cluster.pod("default", "cpu-only")["spec"].get("nodeName") is not None, sim_seconds=60
        )

    simulate(scenario, nodes=1)
