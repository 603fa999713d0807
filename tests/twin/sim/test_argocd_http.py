"""The twin's Argo CD (``serve --argocd``) over HTTP, with kubectl and the kubernetes client.

One served twin (openshift profile, the GPU Operator simulation's ClusterPolicy) and a real git repository in a
temporary folder: an Application created with ``kubectl apply`` takes the ClusterPolicy over from Git, follows
new commits after the poll, reverts a ``kubectl patch`` with selfHeal, keeps the old revision live while the
``argocd_sync_stalls`` fault holds, and reports a ComparisonError for a repository that does not exist.  Waits
advance the twin's clock (``POST /admin/clock/advance``) and judge by the twin's state, not by wall time.
"""

from __future__ import annotations

import copy
import json
import pathlib
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
import yaml
from test_argocd import Repo
from test_network_operator_http import kubectl

from gpufleet_twin.operators import argocd
from gpufleet_twin.process import TwinProcess, start_twin

Obj = dict[str, Any]
POLICY = "gpu-cluster-policy"
SERVER_FIELDS = ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields", "annotations")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwinProcess]:
    twin = start_twin(nodes=1, profile="openshift", time_scale=5, argocd=True, workdir=tmp_path_factory.mktemp("argo"))
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def custom(twin: TwinProcess) -> kubernetes.client.CustomObjectsApi:
    client = kubernetes.config.new_client_from_config(config_file=str(twin.kubeconfig))
    return kubernetes.client.CustomObjectsApi(client)


def app_status(twin: TwinProcess, name: str) -> Obj:
    app = custom(twin).get_namespaced_custom_object("argoproj.io", "v1alpha1", argocd.NAMESPACE, "applications", name)
    return app.get("status") or {}


def live_policy(twin: TwinProcess) -> Obj:
    return custom(twin).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", POLICY)


def advance_until(twin: TwinProcess, check: Callable[[], bool], *, what: str, sim_seconds: float) -> None:
    """Move the twin's clock on in 10 s steps until ``check`` holds, at most ``sim_seconds``."""
    moved = 0.0
    while not check():
        assert moved < sim_seconds, f"{what}: not within {sim_seconds:g} simulated seconds"
        twin.advance(10)
        moved += 10


def manifest_from_live(twin: TwinProcess, driver_version: str) -> str:
    """The ClusterPolicy as a GitOps repository would hold it: the live spec, a driver version."""
    live = copy.deepcopy(live_policy(twin))
    for key in SERVER_FIELDS:
        live["metadata"].pop(key, None)
    live.pop("status", None)
    live["spec"]["driver"]["version"] = driver_version
    return yaml.safe_dump(live, sort_keys=False)


def application(name: str, repo_url: str, *, self_heal: bool = False) -> str:
    app = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": argocd.NAMESPACE},
        "spec": {
            "project": "default",
            "source": {"repoURL": repo_url, "targetRevision": "main", "path": "gpu-operator"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "nvidia-gpu-operator"},
            "syncPolicy": {"automated": {"prune": True, "selfHeal": self_heal}},
        },
    }
    return yaml.safe_dump(app)


def synced_at(twin: TwinProcess, name: str, sha: str) -> bool:
    status = app_status(twin, name)
    return (status.get("sync") or {}).get("status") == "Synced" and status["sync"].get("revision") == sha


def test_application_follows_git_heals_drift_and_stalls(served: TwinProcess, tmp_path: pathlib.Path) -> None:
    twin = served
    published = twin.companion["published"]["argocd"]
    assert published == {"namespace": "argocd", "field_manager": "argocd-controller", "poll_seconds": 180.0}
    repo = Repo(tmp_path / "gitops")
    first = repo.commit({"gpu-operator/clusterpolicy.yaml": manifest_from_live(twin, "550.127.05")})
    kubectl(twin, "apply", "-f", "-", stdin=application("gpu-operator", str(repo.path)))
    advance_until(twin, lambda: synced_at(twin, "gpu-operator", first), what="first sync", sim_seconds=60)
    status = app_status(twin, "gpu-operator")
    assert status["operationState"]["phase"] == "Succeeded"
    assert status["operationState"]["syncResult"]["revision"] == first
    assert status["health"]["status"] == "Healthy"
    table = kubectl(twin, "get", "applications", "-n", "argocd")
    assert table.split("\n")[0].split() == ["NAME", "SYNC", "STATUS", "HEALTH", "STATUS"]
    assert table.split("\n")[1].split() == ["gpu-operator", "Synced", "Healthy"]
    annotations = live_policy(twin)["metadata"]["annotations"]
    assert annotations["argocd.argoproj.io/tracking-id"] == f"gpu-operator:nvidia.com/ClusterPolicy:/{POLICY}"

    # A new commit reaches the cluster at the next poll (180 s), as the new revision.
    second = repo.commit({"gpu-operator/clusterpolicy.yaml": manifest_from_live(twin, "570.86.15")})
    advance_until(twin, lambda: synced_at(twin, "gpu-operator", second), what="second commit", sim_seconds=240)
    assert live_policy(twin)["spec"]["driver"]["version"] == "570.86.15"
    writes = twin.report()["writes_by_field_manager"]["argocd-controller"]
    assert writes.get("patch clusterpolicies.nvidia.com", 0) >= 2

    # Drift of a field the manifest sets: OutOfSync; selfHeal puts it back.
    kubectl(twin, "patch", "clusterpolicy", POLICY, "--type", "merge", "-p", '{"spec":{"driver":{"version":"1.0"}}}')
    advance_until(
        twin,
        lambda: app_status(twin, "gpu-operator")["sync"]["status"] == "OutOfSync",
        what="drift seen",
        sim_seconds=30,
    )
    assert app_status(twin, "gpu-operator")["resources"][0]["status"] == "OutOfSync"
    differences = twin.admin("GET", "argocd")["differences"]["argocd/gpu-operator"]
    assert differences == {f"nvidia.com/ClusterPolicy//{POLICY}": ["/spec/driver/version"]}
    kubectl(twin, "patch", "application", "gpu-operator", "-n", "argocd", "--type", "merge",
            "-p", '{"spec":{"syncPolicy":{"automated":{"selfHeal":true}}}}')  # fmt: skip
    advance_until(
        twin, lambda: live_policy(twin)["spec"]["driver"]["version"] == "570.86.15", what="self heal", sim_seconds=60
    )

    # The stall fault: a new commit is seen (OutOfSync at its SHA) but never synced; the old one stays live.
    twin.admin("POST", "faults", {"type": "argocd_sync_stalls", "application": "gpu-operator"})
    third = repo.commit({"gpu-operator/clusterpolicy.yaml": manifest_from_live(twin, "580.65.06")})
    twin.advance(200)
    advance_until(
        twin, lambda: app_status(twin, "gpu-operator")["sync"]["revision"] == third, what="poll", sim_seconds=60
    )
    status = app_status(twin, "gpu-operator")
    assert status["sync"]["status"] == "OutOfSync"
    assert status["operationState"]["syncResult"]["revision"] == second
    assert live_policy(twin)["spec"]["driver"]["version"] == "570.86.15"
    twin.admin("DELETE", "faults")
    advance_until(twin, lambda: synced_at(twin, "gpu-operator", third), what="after the stall", sim_seconds=60)
    assert live_policy(twin)["spec"]["driver"]["version"] == "580.65.06"
    writes = twin.admin("GET", "argocd")["writes"]
    assert {w["manager"] for w in writes} == {"argocd-controller"}


def test_missing_repository_is_a_comparison_error(served: TwinProcess, tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "no-such-repo"
    kubectl(served, "apply", "-f", "-", stdin=application("broken", f"file://{missing}"))
    advance_until(
        served,
        lambda: bool(app_status(served, "broken").get("conditions")),
        what="ComparisonError",
        sim_seconds=30,
    )
    status = app_status(served, "broken")
    assert status["sync"]["status"] == "Unknown"
    assert status["conditions"][0]["type"] == "ComparisonError"
    assert f"repository not found: file://{missing}" in status["conditions"][0]["message"]
    app = json.loads(kubectl(served, "get", "app", "broken", "-n", "argocd", "-o", "json"))
    assert app["status"]["conditions"] == status["conditions"]
