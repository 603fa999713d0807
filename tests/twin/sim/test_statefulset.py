"""The StatefulSet controller (kube/statefulset.py): ordered pods, scaling, rolling updates with a partition."""

from __future__ import annotations

from gpufleet_twin.kube import podutil


def _statefulset(name: str = "web", *, replicas: int = 3, policy: str = "OrderedReady", image: str = "web:1") -> dict:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "podManagementPolicy": policy,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": f"registry.example/{image}"}]},
            },
            "volumeClaimTemplates": [
                {"metadata": {"name": "data"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
            ],
        },
    }


def _live(cluster, name: str = "web") -> dict[str, dict]:
    return {
        p["metadata"]["name"]: p
        for p in cluster.pods("default", live=True)
        if p["metadata"]["name"].startswith(f"{name}-")
    }


def _sts(cluster, name: str = "web") -> dict:
    return cluster.store.get(cluster.kinds.statefulset, "default", name)


def test_ordered_ready_creates_one_by_one_and_scales_down_in_reverse(simulate) -> None:
    async def scenario(cluster) -> None:
        sts = cluster.create("statefulset", _statefulset())
        assert sts["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
        assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"] == "Filesystem"
        await cluster.settle()
        assert list(_live(cluster)) == ["web-0"]  # the next one waits until web-0 is Running and Ready
        creation_order = []
        for _ in range(60):
            await cluster.run_for(1)
            for name in sorted(_live(cluster)):
                if name not in creation_order:
                    creation_order.append(name)
        assert creation_order == ["web-0", "web-1", "web-2"]
        pod = _live(cluster)["web-1"]
        assert pod["spec"]["hostname"] == "web-1" and pod["spec"]["subdomain"] == "web"
        labels = pod["metadata"]["labels"]
        assert labels["statefulset.kubernetes.io/pod-name"] == "web-1" and labels["apps.kubernetes.io/pod-index"] == "1"
        status = _sts(cluster)["status"]
        assert labels["controller-revision-hash"] == status["updateRevision"] == status["currentRevision"]
        owner = pod["metadata"]["ownerReferences"][0]
        assert owner["kind"] == "StatefulSet" and owner["controller"] and owner["blockOwnerDeletion"]
        assert {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}} in pod["spec"]["volumes"]
        assert status["replicas"] == status["readyReplicas"] == status["availableReplicas"] == 3
        assert status["currentReplicas"] == status["updatedReplicas"] == 3
        assert status["observedGeneration"] == 1 and status["collisionCount"] == 0
        cluster.store.mutate(cluster.kinds.statefulset, "default", "web", lambda o: o["spec"].update(replicas=1))
        deleted_order = []
        for _ in range(30):
            await cluster.run_for(1)
            for name in ("web-2", "web-1"):
                if name not in _live(cluster) and name not in deleted_order:
                    deleted_order.append(name)
        assert deleted_order == ["web-2", "web-1"]
        assert list(_live(cluster)) == ["web-0"]

    simulate(scenario, nodes=2)


def test_parallel_creates_all_at_once(simulate) -> None:
    async def scenario(cluster) -> None:
        cluster.create("statefulset", _statefulset(policy="Parallel", replicas=4))
        await cluster.settle()
        assert sorted(_live(cluster)) == ["web-0", "web-1", "web-2", "web-3"]

    simulate(scenario, nodes=2)


def test_rolling_update_with_partition_updates_from_the_highest_ordinal(simulate) -> None:
    async def scenario(cluster) -> None:
        cluster.create("statefulset", _statefulset(replicas=4))
        assert await cluster.wait_until(lambda: _sts(cluster)["status"].get("readyReplicas") == 4, sim_seconds=120)
        old_revision = _sts(cluster)["status"]["currentRevision"]

        def new_image(obj: dict) -> None:
            obj["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/web:2"
            obj["spec"]["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": 2}}

        cluster.store.mutate(cluster.kinds.statefulset, "default", "web", new_image)
        replaced = []
        for _ in range(120):
            await cluster.run_for(1)
            for name, pod in _live(cluster).items():
                if pod["spec"]["containers"][0]["image"].endswith(":2") and name not in replaced:
                    replaced.append(name)
        assert replaced == ["web-3", "web-2"]  # highest first, the ones below the partition keep the old template
        status = _sts(cluster)["status"]
        assert status["currentRevision"] == old_revision != status["updateRevision"]
        assert status["updatedReplicas"] == 2 and status["currentReplicas"] == 2
        cluster.store.mutate(
            cluster.kinds.statefulset,
            "default",
            "web",
            lambda o: o["spec"]["updateStrategy"].update(rollingUpdate={"partition": 0}),
        )
        assert await cluster.wait_until(
            lambda: _sts(cluster)["status"]["currentRevision"] == _sts(cluster)["status"]["updateRevision"],
            sim_seconds=300,
        )
        assert all(p["spec"]["containers"][0]["image"].endswith(":2") for p in _live(cluster).values())
        revisions = [
            r
            for r in cluster.store.list(cluster.kinds.controllerrevision, "default")
            if r["metadata"]["name"].startswith("web-")
        ]
        assert sorted(r["revision"] for r in revisions) == [1, 2]

    simulate(scenario, nodes=2)


def test_on_delete_replaces_only_deleted_pods(simulate) -> None:
    async def scenario(cluster) -> None:
        manifest = _statefulset(replicas=2, policy="Parallel")
        manifest["spec"]["updateStrategy"] = {"type": "OnDelete"}
        cluster.create("statefulset", manifest)
        assert await cluster.wait_until(lambda: _sts(cluster)["status"].get("readyReplicas") == 2, sim_seconds=60)
        cluster.store.mutate(
            cluster.kinds.statefulset,
            "default",
            "web",
            lambda o: o["spec"]["template"]["spec"]["containers"][0].update(image="registry.example/web:2"),
        )
        await cluster.run_for(60)
        assert all(p["spec"]["containers"][0]["image"].endswith(":1") for p in _live(cluster).values())
        cluster.store.delete(cluster.kinds.pod, "default", "web-1")
        assert await cluster.wait_until(
            lambda: (
                "web-1" in _live(cluster)
                and _live(cluster)["web-1"]["spec"]["containers"][0]["image"].endswith(":2")
                and podutil.is_pod_ready(_live(cluster)["web-1"])
            ),
            sim_seconds=60,
        )
        assert _live(cluster)["web-0"]["spec"]["containers"][0]["image"].endswith(":1")

    simulate(scenario, nodes=2)


def test_seeded_distributed_training_runs_under_its_pdb(simulate) -> None:
    async def scenario(cluster) -> None:
        await cluster.run_for(30)
        sts = cluster.store.get(cluster.kinds.statefulset, "ml-training", "dist-train")
        assert sts["status"]["readyReplicas"] == sts["spec"]["replicas"] == 4
        ranks = sorted(
            p["metadata"]["name"]
            for p in cluster.pods("ml-training", live=True)
            if "dist-train" in p["metadata"]["name"]
        )
        assert ranks == ["dist-train-0", "dist-train-1", "dist-train-2", "dist-train-3"]
        gpus: dict[str, int] = {}
        for pod in cluster.pods(live=True):
            node = pod["spec"].get("nodeName")
            if node:
                gpus[node] = gpus.get(node, 0) + podutil.gpu_request(pod)
        assert max(gpus.values()) <= 8
        pdb = cluster.store.get(cluster.kinds.pdb, "ml-training", "dist-train")
        assert pdb["spec"]["maxUnavailable"] == 1 and pdb["status"]["disruptionsAllowed"] == 1

    simulate(scenario, nodes=8, workloads=True, distributed_training=True)
