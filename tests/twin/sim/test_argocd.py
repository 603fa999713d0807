"""The twin's Argo CD application controller (operators/argocd.py), in process on the simulated clock.

A real git repository in a temporary folder holds a ClusterPolicy manifest; an Application points at it.
The controller resolves revisions with the real ``git`` binary and writes the ClusterPolicy through the store.
"""

from __future__ import annotations

import copy
import json
import pathlib
import subprocess
from typing import Any

import pytest
from simharness import SimCluster, make_cluster

from gpufleet_twin.harness.faults import FaultInjector
from gpufleet_twin.machinery import crd_schema
from gpufleet_twin.machinery.registry import ResourceType
from gpufleet_twin.operators import argocd, argocd_diff, argocd_git

Obj = dict[str, Any]
ROOT = pathlib.Path(__file__).resolve().parents[3]
OWN_CRDS = ROOT / "twin" / "src" / "gpufleet_twin" / "crds"
SHARED_CLUSTERPOLICY = ROOT.parent / "shared" / "reference" / "crds" / "nvidia.com_clusterpolicies.yaml"


def clusterpolicy(driver_version: str = "550.127.05", **extra: Any) -> Obj:
    spec: Obj = {
        "operator": {"defaultRuntime": "crio"},
        "daemonsets": {"updateStrategy": "RollingUpdate"},
        "driver": {"enabled": True, "version": driver_version, "upgradePolicy": {"autoUpgrade": True}},
        "toolkit": {"enabled": True},
        "devicePlugin": {"enabled": True},
        "dcgm": {"enabled": True},
        "dcgmExporter": {"enabled": True},
        "gfd": {"enabled": True},
        "nodeStatusExporter": {"enabled": True},
        "cdi": {"enabled": True},
    }
    spec.update(extra)
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "gpu-cluster-policy"},
        "spec": spec,
    }


class Repo:
    """A git repository in a temporary folder, written with the real git binary."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "twin@example.com")
        self.git("config", "user.name", "twin")

    def git(self, *args: str) -> str:
        return subprocess.run(["git", "-C", str(self.path), *args], check=True, capture_output=True, text=True).stdout

    def commit(self, files: dict[str, Any], message: str = "change") -> str:
        """Write the files (a string as is, anything else as JSON; None removes the file) and commit them."""
        for name, content in files.items():
            target = self.path / name
            if content is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content if isinstance(content, str) else json.dumps(content, indent=2))
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD").strip()


def application(repo: pathlib.Path, **spec: Any) -> Obj:
    body: Obj = {
        "project": "default",
        "source": {"repoURL": f"file://{repo}", "targetRevision": "main", "path": "gpu"},
        "destination": {"server": "https://kubernetes.default.svc", "namespace": "gpu-operator"},
        "syncPolicy": {"automated": {"prune": True, "selfHeal": False}},
    }
    body.update(spec)
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "gpu", "namespace": "argocd"},
        "spec": body,
    }


def cluster_with_argocd(*, real_crd: bool) -> tuple[SimCluster, argocd.ArgoCDController, FaultInjector]:
    cluster = make_cluster(nodes=1, with_recorder=True)
    crd_type = cluster.twin.registry.get("apiextensions.k8s.io", "customresourcedefinitions")
    assert crd_type is not None
    source = SHARED_CLUSTERPOLICY if real_crd else OWN_CRDS / "nvidia.com_clusterpolicies.yaml"
    for crd in crd_schema.crds_from_yaml(source.read_text()):
        cluster.store.create(crd_type, crd)
    controller = argocd.install(cluster.twin, poll_seconds=argocd.POLL_SECONDS)
    faults = FaultInjector(twin=cluster.twin, sim=cluster.sim, kinds=cluster.kinds)
    cluster.twin.controllers.append(faults)
    return cluster, controller, faults


def app_type(cluster: SimCluster) -> ResourceType:
    rtype = cluster.twin.registry.get("argoproj.io", "applications")
    assert rtype is not None
    return rtype


def policy_type(cluster: SimCluster) -> ResourceType:
    rtype = cluster.twin.registry.get("nvidia.com", "clusterpolicies")
    assert rtype is not None
    return rtype


def get_app(cluster: SimCluster) -> Obj:
    """A copy (the store hands out its own objects, which must not be edited in place)."""
    return copy.deepcopy(cluster.store.get(app_type(cluster), "argocd", "gpu"))


def policy_diff(controller: argocd.ArgoCDController) -> list[str]:
    """The JSON pointers of the ClusterPolicy that differ from Git (not in the status: see ``differences``)."""
    return controller.differences("argocd", "gpu").get("nvidia.com/ClusterPolicy//gpu-cluster-policy", [])


def get_policy(cluster: SimCluster) -> Obj:
    return copy.deepcopy(cluster.store.get(policy_type(cluster), None, "gpu-cluster-policy"))


def run(scenario: Any, *, real_crd: bool = False) -> None:
    import asyncio

    async def main() -> None:
        cluster, controller, faults = cluster_with_argocd(real_crd=real_crd)
        cluster.twin.start_controllers()
        try:
            await asyncio.wait_for(scenario(cluster, controller, faults), timeout=60)
        finally:
            await cluster.twin.stop_controllers()

    asyncio.run(main())


def synced_at(cluster: SimCluster, sha: str) -> bool:
    status = get_app(cluster).get("status") or {}
    return (status.get("sync") or {}).get("status") == "Synced" and (status.get("sync") or {}).get("revision") == sha


def test_auto_sync_follows_the_branch_and_records_who_wrote(tmp_path: pathlib.Path) -> None:
    repo = Repo(tmp_path / "repo")
    first = repo.commit({"gpu/clusterpolicy.yaml": clusterpolicy("550.127.05")})

    async def scenario(cluster: SimCluster, controller: argocd.ArgoCDController, faults: FaultInjector) -> None:
        cluster.store.create(app_type(cluster), application(repo.path))
        assert await cluster.wait_until(lambda: synced_at(cluster, first), sim_seconds=30)
        live = get_policy(cluster)
        assert live["spec"]["driver"]["version"] == "550.127.05"
        assert live["metadata"]["annotations"][argocd_diff.TRACKING_ANNOTATION] == (
            "gpu:nvidia.com/ClusterPolicy:/gpu-cluster-policy"
        )
        status = get_app(cluster)["status"]
        assert status["operationState"]["phase"] == "Succeeded"
        assert status["operationState"]["syncResult"]["revision"] == first
        assert status["operationState"]["operation"]["initiatedBy"] == {"automated": True}
        assert status["health"]["status"] == "Healthy"
        assert status["history"][-1]["revision"] == first
        assert status["resources"][0]["kind"] == "ClusterPolicy" and "health" not in status["resources"][0]
        assert "operation" not in get_app(cluster)
        second = repo.commit({"gpu/clusterpolicy.yaml": clusterpolicy("570.86.15")})
        # Not before the next poll (180 s after the last): the revision is still the first.
        await cluster.run_for(100, step=10)
        assert get_app(cluster)["status"]["sync"]["revision"] == first
        assert await cluster.wait_until(lambda: synced_at(cluster, second), sim_seconds=120, step=5)
        live = get_policy(cluster)
        assert live["spec"]["driver"]["version"] == "570.86.15"
        events = [(e["reason"], e["message"]) for e in cluster.events() if e["involvedObject"]["kind"] == "Application"]
        assert ("OperationStarted", f"Initiated automated sync to '{second}'") in events
        assert ("OperationCompleted", f"Sync operation to {second} succeeded") in events
        assert ("ResourceUpdated", "Updated sync status: Synced -> OutOfSync") in events
        writes = cluster.sim.recorder.report()["writes_by_field_manager"]["argocd-controller"]
        assert writes == {"create clusterpolicies.nvidia.com": 1, "patch clusterpolicies.nvidia.com": 1}
        assert [w["verb"] for w in controller.describe()["writes"]] == ["create", "patch"]

    run(scenario)


def test_stall_keeps_the_old_revision_live_and_repo_fault_gives_comparison_error(tmp_path: pathlib.Path) -> None:
    repo = Repo(tmp_path / "repo")
    first = repo.commit({"gpu/clusterpolicy.yaml": clusterpolicy("550.127.05")})

    async def scenario(cluster: SimCluster, controller: argocd.ArgoCDController, faults: FaultInjector) -> None:
        cluster.store.create(app_type(cluster), application(repo.path))
        assert await cluster.wait_until(lambda: synced_at(cluster, first), sim_seconds=30)
        stall = faults.add({"type": "argocd_sync_stalls", "application": "gpu"})
        second = repo.commit({"gpu/clusterpolicy.yaml": clusterpolicy("570.86.15")})
        await cluster.run_for(400, step=10)
        status = get_app(cluster)["status"]
        assert status["sync"] == {**status["sync"], "status": "OutOfSync", "revision": second}
        assert status["operationState"]["syncResult"]["revision"] == first
        live = get_policy(cluster)
        assert live["spec"]["driver"]["version"] == "550.127.05"
        faults.remove(stall.id)
        assert await cluster.wait_until(lambda: synced_at(cluster, second), sim_seconds=30)
        # The repository becomes unreachable: the next poll fails with a ComparisonError.
        faults.add({"type": "argocd_repo_unreachable"})
        await cluster.run_for(200, step=10)
        status = get_app(cluster)["status"]
        assert status["sync"]["status"] == "Unknown"
        assert status["conditions"][0]["type"] == "ComparisonError"
        assert "repository unreachable" in status["conditions"][0]["message"]
        faults.clear()
        await cluster.run_for(200, step=10)
        assert synced_at(cluster, second) and "conditions" not in get_app(cluster)["status"]
        # mode controller: the controller stops reconciling the Application; its status freezes.
        frozen = faults.add({"type": "argocd_sync_stalls", "mode": "controller", "duration": 400})
        before = get_app(cluster)["status"]
        third = repo.commit({"gpu/clusterpolicy.yaml": clusterpolicy("580.65.06")})
        await cluster.run_for(390, step=10)
        assert get_app(cluster)["status"] == before  # reconciledAt too: nothing moves
        await cluster.run_for(20, step=10)
        assert frozen.state == "done"
        assert await cluster.wait_until(lambda: synced_at(cluster, third), sim_seconds=200, step=10)

    run(scenario)


def test_bad_revision_is_a_comparison_error(tmp_path: pathlib.Path) -> None:
    repo = Repo(tmp_path / "repo")
    repo.commit({"gpu/clusterpolicy.yaml": clusterpolicy()})

    async def scenario(cluster: SimCluster, controller: argocd.ArgoCDController, faults: FaultInjector) -> None:
        app = application(repo.path)
        app["spec"]["source"]["targetRevision"] = "no-such-branch"
        cluster.store.create(app_type(cluster), app)
        await cluster.run_for(5)
        status = get_app(cluster)["status"]
        assert status["sync"]["status"] == "Unknown"
        assert status["conditions"][0]["type"] == "ComparisonError"
        assert "unable to resolve 'no-such-branch' to a commit SHA" in status["conditions"][0]["message"]
        assert cluster.store.try_get(policy_type(cluster), None, "gpu-cluster-policy") is None

    run(scenario)


def test_self_heal_reverts_drift_and_ignore_differences_hides_it(tmp_path: pathlib.Path) -> None:
    repo = Repo(tmp_path / "repo")
    first = repo.commit({"gpu/clusterpolicy.yaml": clusterpolicy()})

    async def scenario(cluster: SimCluster, controller: argocd.ArgoCDController, faults: FaultInjector) -> None:
        app = application(repo.path)
        cluster.store.create(app_type(cluster), app)
        assert await cluster.wait_until(lambda: synced_at(cluster, first), sim_seconds=30)
        # Someone edits a field the manifest sets: OutOfSync, and without selfHeal it stays.
        live = get_policy(cluster)
        live["spec"]["driver"]["version"] = "999.0.0"
        cluster.store.update(policy_type(cluster), live)
        await cluster.run_for(20)
        status = get_app(cluster)["status"]
        assert status["sync"]["status"] == "OutOfSync"
        assert policy_diff(controller) == ["/spec/driver/version"]
        # A field only the live object has is no difference.
        live = get_policy(cluster)
        live["spec"]["driver"]["licensingConfig"] = {"nlsEnabled": True}
        cluster.store.update(policy_type(cluster), live)
        await cluster.run_for(5)
        assert policy_diff(controller) == ["/spec/driver/version"]
        # ignoreDifferences on that pointer: Synced.
        current = get_app(cluster)
        current["spec"]["ignoreDifferences"] = [
            {"group": "nvidia.com", "kind": "ClusterPolicy", "jsonPointers": ["/spec/driver/version"]}
        ]
        cluster.store.update(app_type(cluster), current)
        await cluster.run_for(5)
        assert get_app(cluster)["status"]["sync"]["status"] == "Synced"
        # selfHeal without the ignore rule: the edit is reverted.
        current = get_app(cluster)
        current["spec"].pop("ignoreDifferences")
        current["spec"]["syncPolicy"]["automated"]["selfHeal"] = True
        cluster.store.update(app_type(cluster), current)
        assert await cluster.wait_until(
            lambda: get_policy(cluster)["spec"]["driver"]["version"] == "550.127.05",
            sim_seconds=30,
        )
        assert await cluster.wait_until(lambda: synced_at(cluster, first), sim_seconds=30)

    run(scenario)


@pytest.mark.skipif(not SHARED_CLUSTERPOLICY.is_file(), reason="needs ../shared/reference/crds (the real CRD)")
def test_server_side_apply_shows_crd_defaults_as_drift_until_ignored(tmp_path: pathlib.Path) -> None:
    """gpu-operator#2795: spec.cdi.default (schema default false) is not in the manifest; with ServerSideApply
    Argo CD's diff reports it, for ever, until ignoreDifferences names it."""
    repo = Repo(tmp_path / "repo")
    first = repo.commit({"gpu/clusterpolicy.yaml": clusterpolicy()})

    async def scenario(cluster: SimCluster, controller: argocd.ArgoCDController, faults: FaultInjector) -> None:
        app = application(repo.path)
        app["spec"]["syncPolicy"]["syncOptions"] = ["ServerSideApply=true"]
        cluster.store.create(app_type(cluster), app)
        await cluster.run_for(30)
        live = get_policy(cluster)
        assert live["spec"]["cdi"]["default"] is False
        status = get_app(cluster)["status"]
        assert status["operationState"]["phase"] == "Succeeded"
        assert status["sync"]["status"] == "OutOfSync"
        assert "/spec/cdi/default" in policy_diff(controller)
        current = get_app(cluster)
        current["spec"]["ignoreDifferences"] = [
            {
                "group": "nvidia.com",
                "kind": "ClusterPolicy",
                "jqPathExpressions": [".spec.cdi.default"],
                "jsonPointers": [p for p in policy_diff(controller) if p != "/spec/cdi/default"],
            }
        ]
        cluster.store.update(app_type(cluster), current)
        assert await cluster.wait_until(lambda: synced_at(cluster, first), sim_seconds=10)
        # With selfHeal and no ignore rule, the drift that never goes away is synced again and again, backing off.
        current = get_app(cluster)
        rules = current["spec"].pop("ignoreDifferences")
        current["spec"]["syncPolicy"]["automated"]["selfHeal"] = True
        cluster.store.update(app_type(cluster), current)
        await cluster.run_for(60, step=2)
        attempts = get_app(cluster)["status"]["operationState"]["operation"]["sync"]["autoHealAttemptsCount"]
        assert 3 <= attempts <= 5, attempts  # at once, then 2 s, 6 s, 18 s, 54 s apart (not every few seconds)
        current = get_app(cluster)
        current["spec"]["ignoreDifferences"] = rules
        cluster.store.update(app_type(cluster), current)
        assert await cluster.wait_until(lambda: synced_at(cluster, first), sim_seconds=10)
        # Without ServerSideApply (the legacy diff) the defaulted fields are no difference at all.
        current = get_app(cluster)
        current["spec"].pop("ignoreDifferences")
        current["spec"]["syncPolicy"].pop("syncOptions")
        cluster.store.update(app_type(cluster), current)
        assert await cluster.wait_until(lambda: synced_at(cluster, first), sim_seconds=30)
        # A field the CRD schema prunes (the ClusterPolicy has no spec.driver.nodeSelector) never arrives.
        policy = clusterpolicy()
        policy["spec"]["driver"]["nodeSelector"] = {"pool": "canary"}
        pruned = repo.commit({"gpu/clusterpolicy.yaml": policy})
        await cluster.run_for(190, step=10)
        status = get_app(cluster)["status"]
        assert status["sync"]["revision"] == pruned and status["operationState"]["phase"] == "Succeeded"
        assert status["sync"]["status"] == "OutOfSync"
        assert policy_diff(controller) == ["/spec/driver/nodeSelector"]
        assert "nodeSelector" not in get_policy(cluster)["spec"]["driver"]
        # A manifest the API refuses: the operation fails and names the reason.
        policy = clusterpolicy()
        policy["spec"]["driver"]["upgradePolicy"]["maxParallelUpgrades"] = "many"
        refused = repo.commit({"gpu/clusterpolicy.yaml": policy})
        await cluster.run_for(190, step=10)
        state = get_app(cluster)["status"]["operationState"]
        assert state["phase"] == "Failed" and state["syncResult"]["revision"] == refused
        assert state["message"].startswith("one or more objects failed to apply, reason: ")
        assert "maxParallelUpgrades" in state["message"]
        assert state["syncResult"]["resources"][0]["status"] == "SyncFailed"

    run(scenario, real_crd=True)


def test_git_reader_resolves_tags_shas_and_multi_document_files(tmp_path: pathlib.Path) -> None:
    repo = Repo(tmp_path / "repo")
    first = repo.commit(
        {
            "gpu/all.yaml": "---\n"
            + json.dumps(clusterpolicy())
            + "\n---\n"
            + json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}})
            + "\n",
            "gpu/notes.txt": "not a manifest",
            "other/skip.yaml": json.dumps(clusterpolicy()),
        }
    )
    repo.git("tag", "v1")
    second = repo.commit({"gpu/all.yaml": json.dumps(clusterpolicy("570.86.15"))})
    url = f"file://{repo.path}"
    assert argocd_git.resolve_revision(url, "v1") == first
    assert argocd_git.resolve_revision(url, "") == second
    assert argocd_git.resolve_revision(str(repo.path), first[:10]) == first
    manifests = argocd_git.read_manifests(url, first, "gpu")
    assert [o["kind"] for o in manifests.objects] == ["ClusterPolicy", "ConfigMap"]
    with pytest.raises(argocd_git.SourceError, match="app path does not exist"):
        argocd_git.read_manifests(url, first, "nope")
    with pytest.raises(argocd_git.SourceError, match="not reachable"):
        argocd_git.resolve_revision("https://github.com/example/repo.git", "main")
    assert [argocd.self_heal_delay(n) for n in range(8)] == [0, 2, 6, 18, 54, 162, 300, 300]
    assert argocd_diff.jq_path_to_pointer('.metadata.annotations["a/b"]') == "/metadata/annotations/a~1b"
    with pytest.raises(ValueError):
        argocd_diff.jq_path_to_pointer(".spec.x | select(. == 1)")


def test_manual_sync_operation_refresh_and_prune(tmp_path: pathlib.Path) -> None:
    repo = Repo(tmp_path / "repo")
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gpu-notes"}, "data": {"a": "1"}}
    first = repo.commit({"gpu/clusterpolicy.yaml": clusterpolicy(), "gpu/notes.yaml": configmap})
    second = repo.commit({"gpu/notes.yaml": {**configmap, "data": {"a": "2"}}})

    async def scenario(cluster: SimCluster, controller: argocd.ArgoCDController, faults: FaultInjector) -> None:
        app = application(repo.path, syncPolicy={"syncOptions": ["CreateNamespace=true"]})
        app["spec"]["destination"]["namespace"] = "gitops-test"
        cluster.store.create(app_type(cluster), app)
        await cluster.run_for(5)
        status = get_app(cluster)["status"]
        assert status["sync"]["status"] == "OutOfSync" and status["sync"]["revision"] == second
        assert status["health"]["status"] == "Missing"
        assert "operationState" not in status
        # argocd app sync --revision <first>: that revision's manifests; the app stays OutOfSync (target is main).
        current = get_app(cluster)
        current["operation"] = {"sync": {"revision": first}, "initiatedBy": {"username": "admin"}}
        cluster.store.update(app_type(cluster), current)
        await cluster.run_for(5)
        current = get_app(cluster)
        assert "operation" not in current
        state = current["status"]["operationState"]
        assert state["phase"] == "Succeeded" and state["syncResult"]["revision"] == first
        assert state["operation"]["initiatedBy"] == {"username": "admin"}
        assert {r["kind"]: r["status"] for r in state["syncResult"]["resources"]} == {
            "ClusterPolicy": "Synced",
            "ConfigMap": "Synced",
        }
        assert cluster.store.get(cluster.kinds.configmap, "gitops-test", "gpu-notes")["data"] == {"a": "1"}
        assert current["status"]["sync"]["status"] == "OutOfSync"
        # The next commit drops the ConfigMap; a refresh annotation compares at once and is removed.
        third = repo.commit({"gpu/notes.yaml": "# nothing here any more\n"})
        current["metadata"].setdefault("annotations", {})[argocd.REFRESH_ANNOTATION] = "normal"
        cluster.store.update(app_type(cluster), current)
        await cluster.run_for(2)
        current = get_app(cluster)
        assert argocd.REFRESH_ANNOTATION not in (current["metadata"].get("annotations") or {})
        assert current["status"]["sync"]["revision"] == third
        pruning = [r for r in current["status"]["resources"] if r.get("requiresPruning")]
        assert [(r["kind"], r["name"]) for r in pruning] == [("ConfigMap", "gpu-notes")]
        # A sync without prune leaves it (PruneSkipped); with prune it is deleted and the app is Synced.
        current["operation"] = {"sync": {}, "initiatedBy": {"username": "admin"}}
        cluster.store.update(app_type(cluster), current)
        await cluster.run_for(3)
        results = get_app(cluster)["status"]["operationState"]["syncResult"]["resources"]
        assert {r["kind"]: r["status"] for r in results}["ConfigMap"] == "PruneSkipped"
        assert cluster.store.try_get(cluster.kinds.configmap, "gitops-test", "gpu-notes") is not None
        current = get_app(cluster)
        current["operation"] = {"sync": {"prune": True}, "initiatedBy": {"username": "admin"}}
        cluster.store.update(app_type(cluster), current)
        assert await cluster.wait_until(lambda: synced_at(cluster, third), sim_seconds=10)
        assert cluster.store.try_get(cluster.kinds.configmap, "gitops-test", "gpu-notes") is None
        assert [h["revision"] for h in get_app(cluster)["status"]["history"]] == [first, third, third]

    run(scenario)
