"""Workload controllers (DaemonSet, Deployment/ReplicaSet, Job, PDB status, GC), in-process."""

from __future__ import annotations

import copy

from simharness import SimCluster

from gpufleet_twin.kube import podutil
from gpufleet_twin.kube.kubelet import OUTCOME_ANNOTATION, RUN_FOR_ANNOTATION
from gpufleet_twin.kube.workloads import NEVER_ALLOW_ANNOTATION, REVISION_HASH_LABEL, template_hash


def daemonset(name: str, *, strategy: dict | None = None, node_selector: dict | None = None) -> dict:
    labels = {"app": name}
    spec = {"containers": [{"name": "agent", "image": "registry.example/agent:1.0"}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": strategy or {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def ds_pods(cluster: SimCluster, name: str, *, live: bool = True) -> list[dict]:
    return [p for p in cluster.pods("kube-system", live=live) if p["metadata"]["labels"].get("app") == name]


def set_image(cluster: SimCluster, kind: str, namespace: str, name: str, image: str) -> None:
    def change(obj: dict) -> None:
        obj["spec"]["template"]["spec"]["containers"][0]["image"] = image

    cluster.store.mutate(getattr(cluster.kinds, kind), namespace, name, change)


def test_daemonset_runs_one_pod_per_eligible_node_with_revisions(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("daemonset", daemonset("gpu-agent", node_selector={"nvidia.com/gpu.present": "true"}))
        await cluster.run_for(10)
        pods = ds_pods(cluster, "gpu-agent")
        assert sorted(p["spec"]["nodeName"] for p in pods) == cluster.workers  # control plane has no GPU label
        ds = cluster.store.get(cluster.kinds.daemonset, "kube-system", "gpu-agent")
        expected_hash = template_hash(ds["spec"]["template"])
        assert {p["metadata"]["labels"][REVISION_HASH_LABEL] for p in pods} == {expected_hash}
        pod = pods[0]
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"
        assert pod["metadata"]["name"].startswith("gpu-agent-")
        assert podutil.pinned_node_name(pod["spec"]) == pod["spec"]["nodeName"]
        tolerations = {(t["key"], t["effect"]) for t in pod["spec"]["tolerations"]}
        assert (podutil.UNSCHEDULABLE_TAINT, "NoSchedule") in tolerations
        assert (podutil.UNREACHABLE_TAINT, "NoExecute") in tolerations
        revision = cluster.store.get(cluster.kinds.controllerrevision, "kube-system", f"gpu-agent-{expected_hash}")
        assert revision["revision"] == 1
        assert revision["data"]["spec"]["template"]["$patch"] == "replace"
        assert ds["status"] == {
            "currentNumberScheduled": 3,
            "desiredNumberScheduled": 3,
            "numberMisscheduled": 0,
            "numberReady": 3,
            "updatedNumberScheduled": 3,
            "numberAvailable": 3,
            "observedGeneration": 1,
        }

    simulate(scenario, nodes=3, cordoned=("gpu-worker-002",))  # a cordoned node keeps its daemon pod


def test_daemonset_on_delete_replaces_only_deleted_pods(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("daemonset", daemonset("driver", strategy={"type": "OnDelete"}))
        await cluster.run_for(10)
        before = {p["spec"]["nodeName"]: p["metadata"]["name"] for p in ds_pods(cluster, "driver")}
        set_image(cluster, "daemonset", "kube-system", "driver", "registry.example/agent:2.0")
        await cluster.run_for(10)
        ds = cluster.store.get(cluster.kinds.daemonset, "kube-system", "driver")
        new_hash = template_hash(ds["spec"]["template"])
        assert {p["spec"]["nodeName"]: p["metadata"]["name"] for p in ds_pods(cluster, "driver")} == before
        # No pod runs the new template; DaemonSetStatus.updatedNumberScheduled is omitempty, so 0 is absent.
        assert "updatedNumberScheduled" not in ds["status"]
        revisions = sorted(r["revision"] for r in cluster.store.list(cluster.kinds.controllerrevision, "kube-system"))
        assert revisions == [1, 2]
        target = cluster.workers[0]
        cluster.store.delete(cluster.kinds.pod, "kube-system", before[target])
        await cluster.run_for(15)
        after = {p["spec"]["nodeName"]: p for p in ds_pods(cluster, "driver")}
        assert after[target]["metadata"]["name"] != before[target]
        assert after[target]["metadata"]["labels"][REVISION_HASH_LABEL] == new_hash
        assert after[target]["spec"]["containers"][0]["image"].endswith(":2.0")
        ds = cluster.store.get(cluster.kinds.daemonset, "kube-system", "driver")
        assert ds["status"]["updatedNumberScheduled"] == 1
        assert ds["status"]["observedGeneration"] == 2

    simulate(scenario, nodes=2)


def test_daemonset_rolling_update_respects_max_unavailable(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("daemonset", daemonset("exporter"))
        await cluster.run_for(10)
        ds = cluster.store.get(cluster.kinds.daemonset, "kube-system", "exporter")
        desired = ds["status"]["desiredNumberScheduled"]
        assert desired == len(cluster.workers)  # the control-plane taint keeps the agent off it
        worst = 0

        def track(event) -> None:
            nonlocal worst
            if event.rtype.key != cluster.kinds.pod.key:
                return
            pods = ds_pods(cluster, "exporter", live=False)
            ready = sum(1 for p in pods if podutil.is_pod_ready(p) and not podutil.is_terminating(p))
            worst = max(worst, desired - ready)

        cluster.store.add_listener(track)
        set_image(cluster, "daemonset", "kube-system", "exporter", "registry.example/agent:2.0")
        ds = cluster.store.get(cluster.kinds.daemonset, "kube-system", "exporter")
        new_hash = template_hash(ds["spec"]["template"])

        def rolled() -> bool:
            pods = ds_pods(cluster, "exporter")
            return len(pods) == desired and all(
                p["metadata"]["labels"][REVISION_HASH_LABEL] == new_hash and podutil.is_pod_ready(p) for p in pods
            )

        assert await cluster.wait_until(rolled, sim_seconds=300)
        assert worst == 1, f"at most maxUnavailable=1 daemon pods down at once, saw {worst}"

    simulate(scenario, nodes=4)


def deployment(name: str, *, replicas: int, gpus: int = 1) -> dict:
    labels = {"app": name}
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example/app:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ]
                },
            },
        },
    }


def test_deployment_creates_replicaset_scales_and_rolls_out(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("deployment", deployment("web", replicas=3))
        await cluster.run_for(12)
        live = cluster.pods("default", live=True)
        assert len(live) == 3 and all(podutil.is_pod_ready(p) for p in live)
        [rs] = cluster.store.list(cluster.kinds.replicaset, "default")
        assert rs["metadata"]["name"] == f"web-{rs['metadata']['labels']['pod-template-hash']}"
        assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
        status = cluster.store.get(cluster.kinds.deployment, "default", "web")["status"]
        assert (
            status["replicas"],
            status["readyReplicas"],
            status["availableReplicas"],
            status["updatedReplicas"],
        ) == (
            3,
            3,
            3,
            3,
        )
        conditions = {c["type"]: c for c in status["conditions"]}
        assert conditions["Available"]["status"] == "True"
        assert conditions["Progressing"]["reason"] == "NewReplicaSetAvailable"

        # kubectl scale: the scale subresource writes spec.replicas.
        def scale(obj: dict) -> None:
            obj["spec"]["replicas"] = 5

        cluster.store.mutate(cluster.kinds.deployment, "default", "web", scale)
        assert await cluster.wait_until(lambda: len(cluster.pods("default", live=True)) == 5, sim_seconds=20)
        cluster.store.mutate(cluster.kinds.deployment, "default", "web", lambda o: o["spec"].update(replicas=2))
        assert await cluster.wait_until(lambda: len(cluster.pods("default", live=True)) == 2, sim_seconds=20)

        set_image(cluster, "deployment", "default", "web", "registry.example/app:2")

        def rolled_out() -> bool:
            live = cluster.pods("default", live=True)
            current = cluster.store.get(cluster.kinds.deployment, "default", "web")
            return (
                len(live) == 2
                and all(p["spec"]["containers"][0]["image"].endswith(":2") and podutil.is_pod_ready(p) for p in live)
                and current["status"].get("updatedReplicas") == 2
                and current["status"].get("availableReplicas") == 2
            )

        assert await cluster.wait_until(rolled_out, sim_seconds=120)
        sets = {
            r["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: r
            for r in cluster.store.list(cluster.kinds.replicaset, "default")
        }
        assert sets["1"]["spec"]["replicas"] == 0 and sets["2"]["spec"]["replicas"] == 2
        current = cluster.store.get(cluster.kinds.deployment, "default", "web")
        assert current["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
        assert cluster.events("ScalingReplicaSet")

    simulate(scenario, nodes=2)


def test_recreate_deployment_starts_new_pods_once_the_old_ones_are_gone(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        web = deployment("web", replicas=2)
        web["spec"]["strategy"] = {"type": "Recreate"}
        cluster.create("deployment", web)
        assert await cluster.wait_until(lambda: len(cluster.pods("default", live=True)) == 2, sim_seconds=30)
        old_names = {p["metadata"]["name"] for p in cluster.pods("default", live=True)}

        set_image(cluster, "deployment", "default", "web", "registry.example/app:2")

        def recreated() -> bool:
            live = cluster.pods("default", live=True)
            return (
                len(live) == 2
                and not old_names & {p["metadata"]["name"] for p in live}
                and all(p["spec"]["containers"][0]["image"].endswith(":2") and podutil.is_pod_ready(p) for p in live)
            )

        # The old pods terminate (grace period) before any new pod exists; nothing
        # but their deletion is left to wake the Deployment controller.
        assert await cluster.wait_until(recreated, sim_seconds=300)
        status = cluster.store.get(cluster.kinds.deployment, "default", "web")["status"]
        assert status.get("updatedReplicas") == 2 and status.get("availableReplicas") == 2

    simulate(scenario, nodes=2)


def job(name: str, *, completions: int, run_for: int, outcome: str = "succeeded", backoff_limit: int = 6) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "completions": completions,
            "parallelism": 2,
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"annotations": {OUTCOME_ANNOTATION: outcome, RUN_FOR_ANNOTATION: str(run_for)}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "work", "image": "registry.example/batch:1"}],
                },
            },
        },
    }


def test_job_runs_pods_to_completion(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("job", job("eval", completions=3, run_for=20))
        await cluster.run_for(10)
        status = cluster.store.get(cluster.kinds.job, "default", "eval")["status"]
        assert status["active"] == 2 and status["startTime"]

        def complete() -> bool:
            conditions = cluster.store.get(cluster.kinds.job, "default", "eval")["status"].get("conditions") or []
            return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

        assert await cluster.wait_until(complete, sim_seconds=120)
        status = cluster.store.get(cluster.kinds.job, "default", "eval")["status"]
        assert status["succeeded"] == 3 and "active" not in status and status["completionTime"]
        pods = cluster.pods("default")
        assert len(pods) == 3 and all(p["status"]["phase"] == "Succeeded" for p in pods)
        assert all(p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "eval" for p in pods)

    simulate(scenario, nodes=1)


def test_job_fails_after_backoff_limit(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("job", job("flaky", completions=1, run_for=5, outcome="failed", backoff_limit=1))

        def failed() -> bool:
            conditions = cluster.store.get(cluster.kinds.job, "default", "flaky")["status"].get("conditions") or []
            return any(c["type"] == "Failed" and c.get("reason") == "BackoffLimitExceeded" for c in conditions)

        assert await cluster.wait_until(failed, sim_seconds=300, step=2)
        status = cluster.store.get(cluster.kinds.job, "default", "flaky")["status"]
        assert status["failed"] == 2  # backoffLimit 1: the second failure ends it

    simulate(scenario, nodes=1)


def test_pdb_status_and_never_allow_annotation(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("deployment", deployment("train", replicas=3))
        cluster.create(
            "pdb",
            {
                "metadata": {"name": "train", "namespace": "default"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "train"}}},
            },
        )
        await cluster.run_for(12)
        status = cluster.store.get(cluster.kinds.pdb, "default", "train")["status"]
        assert (status["currentHealthy"], status["desiredHealthy"], status["expectedPods"]) == (3, 2, 3)
        assert status["disruptionsAllowed"] == 1

        def annotate(pdb: dict) -> None:
            pdb["metadata"].setdefault("annotations", {})[NEVER_ALLOW_ANNOTATION] = "true"

        cluster.store.mutate(cluster.kinds.pdb, "default", "train", annotate)
        await cluster.settle()
        status = cluster.store.get(cluster.kinds.pdb, "default", "train")["status"]
        assert status["disruptionsAllowed"] == 0
        assert status["conditions"][0]["status"] == "False"

    simulate(scenario, nodes=2)


def test_garbage_collector_removes_dependents_of_a_deleted_owner(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("deployment", deployment("gone", replicas=2))
        await cluster.run_for(12)
        assert cluster.store.list(cluster.kinds.replicaset, "default")
        cluster.store.delete(cluster.kinds.deployment, "default", "gone")
        assert await cluster.wait_until(
            lambda: not cluster.store.list(cluster.kinds.replicaset, "default") and not cluster.pods("default"),
            sim_seconds=30,
        )

    simulate(scenario, nodes=1)


def test_template_hash_is_stable_and_changes_with_the_template() -> None:
    template = {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}
    same = copy.deepcopy(template)
    changed = copy.deepcopy(template)
    changed["spec"]["containers"][0]["image"] = "i:2"
    assert template_hash(template) == template_hash(same)
    assert template_hash(template) != template_hash(changed)
    assert template_hash(template) != template_hash(template, 1)
    assert set(template_hash(template)) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_daemon_pods_stay_under_a_new_noschedule_taint_but_leave_under_noexecute(simulate) -> None:
    async def scenario(cluster: SimCluster) -> None:
        cluster.create("daemonset", daemonset("agent"))
        await cluster.run_for(10)
        tainted = cluster.workers[0]

        def taint(effect: str) -> None:
            def change(node: dict) -> None:
                node["spec"]["taints"] = [{"key": "example.com/maintenance", "effect": effect}]

            cluster.store.mutate(cluster.kinds.node, None, tainted, change)

        taint("NoSchedule")
        await cluster.run_for(5)
        on_node = [p for p in ds_pods(cluster, "agent") if p["spec"]["nodeName"] == tainted]
        assert len(on_node) == 1, "NoSchedule does not evict a running daemon pod (shouldContinueRunning)"
        status = cluster.store.get(cluster.kinds.daemonset, "kube-system", "agent")["status"]
        assert (status["desiredNumberScheduled"], status["numberMisscheduled"]) == (1, 1)
        taint("NoExecute")
        assert await cluster.wait_until(
            lambda: not [p for p in ds_pods(cluster, "agent", live=False) if p["spec"]["nodeName"] == tainted],
            sim_seconds=20,
        )

    simulate(scenario, nodes=2)
