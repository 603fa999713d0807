"""The twin's Argo CD under Argo CD's real Application CRD (``serve --argocd --crds DIR``), over HTTP.

``tests/twin/data/crds/argocd/application-crd.yaml`` is an unmodified copy of argo-cd's
``manifests/crds/application-crd.yaml`` (the README beside it names the tag and commit).  Two twins run the
same flow against one real git repository: one with that folder as ``--crds`` (the upstream schema, which
prunes every field it does not declare and validates the rest), one with the twin's own minimal CRD (which
stores status as sent, so it shows what the controller wrote).  The Application statuses must be equal,
time stamps aside: nothing the controller writes is pruned or refused by the real schema.  The flow covers
an automated sync with CreateNamespace, a commit that changes one object and drops another (prune, a second
history entry), drift without selfHeal (OutOfSync resources), a sync requested through the top-level
``operation`` field (what ``argocd app sync`` writes) and a repository that does not exist
(ComparisonError).  kubectl shows the upstream CRD served and its printer columns.
"""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
import yaml
from test_argocd import Repo
from test_network_operator_http import kubectl

from gpufleet_twin.process import TwinProcess, start_twin

Obj = dict[str, Any]
UPSTREAM_CRDS = pathlib.Path(__file__).resolve().parents[1] / "data" / "crds" / "argocd"
UPSTREAM_CRD = UPSTREAM_CRDS / "application-crd.yaml"
NAMESPACE = "argocd"
TARGET_NAMESPACE = "gitops-demo"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@pytest.fixture(scope="module")
def twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, TwinProcess]]:
    """``upstream``: the real Application CRD replaces the twin's own; ``own``: the twin's minimal CRD."""
    started: dict[str, TwinProcess] = {}
    try:
        for name, extra in (("upstream", ("--crds", str(UPSTREAM_CRDS))), ("own", ())):
            started[name] = start_twin(
                nodes=1,
                profile="kubernetes",
                time_scale=1,
                argocd=True,
                real_crds=False,
                extra_args=extra,
                workdir=tmp_path_factory.mktemp(f"argocd-{name}"),
            )
        yield started
    finally:
        for twin in started.values():
            assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def get_app(twin: TwinProcess, name: str) -> Obj:
    api = kubernetes.config.new_client_from_config(config_file=str(twin.kubeconfig))
    try:
        return kubernetes.client.CustomObjectsApi(api).get_namespaced_custom_object(
            "argoproj.io", "v1alpha1", NAMESPACE, "applications", name
        )
    finally:
        api.close()


def app_status(twin: TwinProcess, name: str) -> Obj:
    return get_app(twin, name).get("status") or {}


def advance_until(twin: TwinProcess, check: Callable[[TwinProcess], bool], *, what: str, sim_seconds: float) -> None:
    """Move the twin's clock on in 10 s steps until ``check(twin)`` holds, at most ``sim_seconds``."""
    moved = 0.0
    while not check(twin):
        assert moved < sim_seconds, f"{what}: not within {sim_seconds:g} simulated seconds"
        twin.advance(10)
        moved += 10


def synced_at(twin: TwinProcess, name: str, sha: str) -> bool:
    status = app_status(twin, name)
    state = status.get("operationState") or {}
    return (
        (status.get("sync") or {}).get("status") == "Synced"
        and status["sync"].get("revision") == sha
        and state.get("phase") == "Succeeded"
        and state.get("syncResult", {}).get("revision") == sha
    )


def without_times(value: Any) -> Any:
    """``value`` with every RFC 3339 time stamp replaced (the two twins' clocks differ)."""
    if isinstance(value, dict):
        return {key: without_times(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_times(item) for item in value]
    if isinstance(value, str) and TIMESTAMP.match(value):
        return "<time>"
    return value


def configmap(settings: dict[str, str], name: str = "fleet-settings") -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": settings})


# ConfigMaps, which the API server defaults nothing in: the twin's diff compares a list as a whole, so a Service
# (its ports defaulted with protocol and targetPort) would stay OutOfSync after its sync.
FLAGS = configmap({"canary": "true"}, name="fleet-flags")


def application(name: str, repo_url: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Application",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "project": "default",
                "source": {"repoURL": repo_url, "targetRevision": "main", "path": "manifests"},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": TARGET_NAMESPACE},
                "syncPolicy": {
                    "automated": {"prune": True, "selfHeal": False},
                    "syncOptions": ["CreateNamespace=true"],
                },
            },
        }
    )


def test_the_upstream_application_crd_is_served(twins: dict[str, TwinProcess]) -> None:
    served = json.loads(kubectl(twins["upstream"], "get", "crd", "applications.argoproj.io", "-o", "json"))
    upstream = yaml.safe_load(UPSTREAM_CRD.read_text())
    assert "gpufleet.io/twin-minimal-crd" not in served["metadata"].get("labels", {})
    assert served["spec"]["versions"][0]["schema"] == upstream["spec"]["versions"][0]["schema"]
    status_schema = served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    # What only the upstream schema has: status is declared field by field, nothing preserved unknown.
    assert status_schema["properties"]["operationState"]["required"] == ["operation", "phase", "startedAt"]
    assert "x-kubernetes-preserve-unknown-fields" not in status_schema
    own = json.loads(kubectl(twins["own"], "get", "crd", "applications.argoproj.io", "-o", "json"))
    assert own["metadata"]["labels"]["gpufleet.io/twin-minimal-crd"] == "true"


def test_what_the_controller_writes_survives_the_upstream_schema(
    twins: dict[str, TwinProcess], tmp_path: pathlib.Path
) -> None:
    repo = Repo(tmp_path / "gitops")
    first = repo.commit(
        {"manifests/configmap.yaml": configmap({"driver": "550.127.05"}), "manifests/flags.yaml": FLAGS}
    )
    seen: dict[str, dict[str, Obj]] = {}
    for flavour, twin in twins.items():
        seen[flavour] = snapshots = {}
        kubectl(twin, "apply", "-f", "-", stdin=application("fleet", str(repo.path)))
        advance_until(
            twin, lambda served: synced_at(served, "fleet", first), what=f"{flavour}: first sync", sim_seconds=60
        )
        snapshots["first sync"] = app_status(twin, "fleet")
    # Both twins see the next commit: one ConfigMap changes, the other goes (pruned).
    second = repo.commit({"manifests/configmap.yaml": configmap({"driver": "570.86.15"}), "manifests/flags.yaml": None})
    for flavour, twin in twins.items():
        snapshots = seen[flavour]
        advance_until(
            twin, lambda served: synced_at(served, "fleet", second), what=f"{flavour}: second", sim_seconds=240
        )
        snapshots["second sync"] = app_status(twin, "fleet")
        # Drift without selfHeal: OutOfSync, and it stays.
        kubectl(twin, "patch", "configmap", "fleet-settings", "-n", TARGET_NAMESPACE, "--type", "merge",
                "-p", '{"data":{"driver":"1.0"}}')  # fmt: skip
        advance_until(
            twin,
            lambda served: app_status(served, "fleet")["sync"]["status"] == "OutOfSync",
            what=f"{flavour}: drift",
            sim_seconds=30,
        )
        snapshots["drift"] = app_status(twin, "fleet")
        # Which fields differ is not status (the real schema has no place for it): the twin's admin API has it.
        differences = twin.admin("GET", "argocd")["differences"]["argocd/fleet"]
        assert differences == {f"/ConfigMap/{TARGET_NAMESPACE}/fleet-settings": ["/data/driver"]}
        # A sync requested as ``argocd app sync`` requests it: the top-level operation field.
        operation = {"operation": {"initiatedBy": {"username": "admin"}, "sync": {"revision": second, "prune": True}}}
        kubectl(twin, "patch", "application", "fleet", "-n", NAMESPACE, "--type", "merge", "-p", json.dumps(operation))
        advance_until(
            twin,
            lambda served: "operation" not in get_app(served, "fleet") and synced_at(served, "fleet", second),
            what=f"{flavour}: requested sync",
            sim_seconds=30,
        )
        snapshots["requested sync"] = app_status(twin, "fleet")
        kubectl(twin, "apply", "-f", "-", stdin=application("broken", f"file://{tmp_path / 'no-such-repo'}"))
        advance_until(
            twin,
            lambda served: bool(app_status(served, "broken").get("conditions")),
            what=f"{flavour}: ComparisonError",
            sim_seconds=30,
        )
        snapshots["comparison error"] = app_status(twin, "broken")

    # What the controller wrote (the twin's own CRD keeps it all) is what the upstream schema kept.
    for moment, written in seen["own"].items():
        assert without_times(seen["upstream"][moment]) == without_times(written), moment

    # And it is what Argo CD writes: the fields the collection and kubectl read, with their values.
    upstream = seen["upstream"]
    status = upstream["first sync"]
    assert status["sync"]["status"] == "Synced" and status["sync"]["revision"] == first
    assert status["sync"]["comparedTo"]["source"]["repoURL"] == str(repo.path)
    assert status["health"] == {"status": "Healthy"}
    assert status["sourceType"] == "Directory"
    assert TIMESTAMP.match(status["reconciledAt"])
    state = status["operationState"]
    assert state["phase"] == "Succeeded" and state["message"] == "successfully synced (all tasks run)"
    assert state["operation"] == {"initiatedBy": {"automated": True}, "sync": {"prune": True, "revision": first}}
    assert state["syncResult"]["revision"] == first
    assert TIMESTAMP.match(state["startedAt"]) and TIMESTAMP.match(state["finishedAt"])
    assert sorted(
        (r["name"], r["status"], r["hookPhase"], r["syncPhase"], r["message"]) for r in state["syncResult"]["resources"]
    ) == [
        ("fleet-flags", "Synced", "Succeeded", "Sync", "configmap/fleet-flags created"),
        ("fleet-settings", "Synced", "Succeeded", "Sync", "configmap/fleet-settings created"),
    ]
    assert [(r["kind"], r["name"], r["namespace"], r["status"], r["health"]) for r in status["resources"]] == [
        ("ConfigMap", "fleet-flags", TARGET_NAMESPACE, "Synced", {"status": "Healthy"}),
        ("ConfigMap", "fleet-settings", TARGET_NAMESPACE, "Synced", {"status": "Healthy"}),
    ]
    assert [(h["id"], h["revision"]) for h in status["history"]] == [(0, first)]

    status = upstream["second sync"]
    pruned = [r for r in status["operationState"]["syncResult"]["resources"] if r["name"] == "fleet-flags"]
    assert [(r["status"], r["message"]) for r in pruned] == [("Pruned", "pruned")]
    assert [r["name"] for r in status["resources"]] == ["fleet-settings"]
    assert [(h["id"], h["revision"]) for h in status["history"]] == [(0, first), (1, second)]

    status = upstream["drift"]
    assert status["sync"] == {**upstream["second sync"]["sync"], "status": "OutOfSync"}
    assert [(r["name"], r["status"]) for r in status["resources"]] == [("fleet-settings", "OutOfSync")]

    state = upstream["requested sync"]["operationState"]
    # operationState is merge-patched, as setOperationState does (controller/appcontroller.go), so the automated
    # flag of the sync before stays beside the username.
    assert state["operation"]["sync"] == {"prune": True, "revision": second}
    assert state["operation"]["initiatedBy"]["username"] == "admin"
    assert state["phase"] == "Succeeded" and state["syncResult"]["revision"] == second
    assert [h["initiatedBy"] for h in upstream["requested sync"]["history"]] == [
        {"automated": True},
        {"automated": True},
        {"username": "admin"},
    ]
    live = json.loads(
        kubectl(twins["upstream"], "get", "configmap", "fleet-settings", "-n", TARGET_NAMESPACE, "-o", "json")
    )
    assert live["data"] == {"driver": "570.86.15"}

    status = upstream["comparison error"]
    assert status["sync"]["status"] == "Unknown"
    assert [c["type"] for c in status["conditions"]] == ["ComparisonError"]
    assert "repository not found" in status["conditions"][0]["message"]
    assert TIMESTAMP.match(status["conditions"][0]["lastTransitionTime"])


def test_kubectl_prints_the_upstream_printer_columns(twins: dict[str, TwinProcess], tmp_path: pathlib.Path) -> None:
    twin = twins["upstream"]
    repo = Repo(tmp_path / "gitops")
    sha = repo.commit({"manifests/configmap.yaml": configmap({"driver": "550.127.05"})})
    kubectl(twin, "apply", "-f", "-", stdin=application("columns", str(repo.path)))
    advance_until(twin, lambda served: synced_at(served, "columns", sha), what="sync", sim_seconds=60)
    rows = {
        line.split()[0]: line.split() for line in kubectl(twin, "get", "applications", "-n", NAMESPACE).splitlines()
    }
    assert rows["NAME"] == ["NAME", "SYNC", "STATUS", "HEALTH", "STATUS"]
    assert rows["columns"] == ["columns", "Synced", "Healthy"]
    rows = {
        line.split()[0]: line.split()
        for line in kubectl(twin, "get", "apps", "-n", NAMESPACE, "-o", "wide").splitlines()
    }
    assert rows["NAME"] == ["NAME", "SYNC", "STATUS", "HEALTH", "STATUS", "REVISION", "PROJECT"]
    assert rows["columns"] == ["columns", "Synced", "Healthy", sha, "default"]
    upstream_columns = yaml.safe_load(UPSTREAM_CRD.read_text())["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in upstream_columns] == ["Sync Status", "Health Status", "Revision", "Project"]
