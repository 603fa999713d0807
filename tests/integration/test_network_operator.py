"""Role gpufleet.upgrade.network_operator against the twin: the SR-IOV pre-steps and restore when the
Network Operator crosses 24.10, CRDs before the rendered manifests, the NicClusterPolicy's ofedDriver
version, then MOFED on the canary node and the promotion. Check mode first: nothing written.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import time
from typing import Any

import pytest

from gpufleet_twin.process import SHARED_CRDS, TwinProcess

from .conftest import ROOT, PlaybookRun, kubectl, run_playbook
from .test_clusterpolicy_upgrade import get_json, write_requests
from .test_clusterpolicy_upgrade import twin_factory as start_twin_fixture
from .test_ofed_rolling_reload import NEW, OLD, mofed_ready, mofed_versions, workers

pytestmark = pytest.mark.slow
twin_factory = start_twin_fixture

PLAYBOOK = "tests/integration/playbooks/network_operator_role.yml"
MANIFESTS = ROOT / "tests" / "integration" / "files" / "network_operator" / "manifests"
SRIOV_NAMESPACE = "openshift-sriov-network-operator"
CANARY = "gpu-worker-002"


def run_role(
    twin: TwinProcess, tmp_path: pathlib.Path, variables: dict[str, Any], *, check: bool = False
) -> tuple[PlaybookRun, dict[str, Any]]:
    out = tmp_path / f"role-{time.monotonic_ns()}.json"
    variables = {"network_operator_wait_sleep": 0.3, **variables, "network_result_file": str(out)}
    run = run_playbook(PLAYBOOK, twin=twin, extra_vars=variables, check=check)
    return run, json.loads(out.read_text()) if out.exists() else {}


DRY_RUN_WRITES = {
    "create configmaps",
    "delete sriovnetworknodepolicies.sriovnetwork.openshift.io",
    "patch customresourcedefinitions.apiextensions.k8s.io",
    "patch deployments.apps",
}


def watched_versions(twin: TwinProcess) -> dict[str, Any]:
    """resourceVersions of everything the role could change (Nodes: their spec, labels, annotations)."""
    versions: dict[str, Any] = {
        name: (n["spec"], n["metadata"].get("annotations"), n["metadata"]["labels"])
        for name, n in workers(twin).items()
    }
    for args in (
        ("deployment", "network-operator", "-n", "nvidia-network-operator"),
        ("deployment", "sriov-network-operator", "-n", SRIOV_NAMESPACE),
        ("sriovnetworknodepolicies.sriovnetwork.openshift.io", "default", "-n", SRIOV_NAMESPACE),
        ("nicclusterpolicies.mellanox.com", "nic-cluster-policy"),
        ("crd", "nicclusterpolicies.mellanox.com"),
    ):
        versions[" ".join(args)] = get_json(twin, *args)["metadata"]["resourceVersion"]
    versions["configmaps"] = sorted(
        c["metadata"]["name"] for c in get_json(twin, "configmaps", "-n", SRIOV_NAMESPACE)["items"]
    )
    versions["mofed"] = mofed_versions(twin)
    return versions


def chart_dirs(tmp_path: pathlib.Path) -> dict[str, str]:
    """The target chart's crds/ and charts/sriov-network-operator/crds/, from the upstream reference CRDs."""
    crds = tmp_path / "chart" / "crds"
    sriov = tmp_path / "chart" / "charts" / "sriov-network-operator" / "crds"
    crds.mkdir(parents=True)
    sriov.mkdir(parents=True)
    shutil.copy(SHARED_CRDS / "mellanox.com_nicclusterpolicies.yaml", crds)
    for path in SHARED_CRDS.glob("sriovnetwork.openshift.io_*.yaml"):
        shutil.copy(path, sriov)
    return {"network_operator_chart_crds_dir": str(crds), "network_operator_sriov_crds_dir": str(sriov)}


@pytest.mark.skipif(not SHARED_CRDS.is_dir(), reason="../shared/reference/crds is absent")
def test_canary_with_sriov_pre_steps_then_promotion(twin_factory, tmp_path):
    twin = twin_factory()
    mofed_ready(twin)
    kubectl(twin, "label", "node", CANARY, "gpu-canary=true")
    target = {"network_operator": "v25.1.0", "mofed": NEW}
    variables = {
        "network_operator_action": "canary",
        "network_operator_target": target,
        "network_operator_manifests_dir": str(MANIFESTS),
        **chart_dirs(tmp_path),
    }
    before = watched_versions(twin)
    twin.admin("POST", "report/reset")
    run, result = run_role(twin, tmp_path, variables, check=True)
    assert run.returncode == 0, run.output
    assert result["changed"] is True and result["selection"]["targets"] == [CANARY]
    assert watched_versions(twin) == before
    # kubernetes.core's check mode sends its writes as server-side dry runs (dryRun=All): nothing is stored,
    # and the twin counts them apart. The collection's own module sends none.
    assert write_requests(twin) == {}
    assert set(twin.report()["requests"]["dry_run_by_verb_resource"]) <= DRY_RUN_WRITES

    run, result = run_role(twin, tmp_path, variables)
    assert run.returncode == 0, run.output
    assert result["operator"] == {"installed": "24.7.0", "target": "25.1.0", "method": "manifests", "changed": True}
    assert result["sriov"]["pre_steps_done"] is True and result["sriov"]["restored"] is True
    deployment = get_json(twin, "deployment", "network-operator", "-n", "nvidia-network-operator")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v25.1.0")
    # The pre-steps were done before the crossing and undone after it: nothing broke.
    sriov = get_json(twin, "deployment", "sriov-network-operator", "-n", SRIOV_NAMESPACE)
    assert sriov["spec"]["replicas"] == 1
    get_json(twin, "sriovnetworknodepolicies.sriovnetwork.openshift.io", "default", "-n", SRIOV_NAMESPACE)
    states = get_json(twin, "sriovnetworknodestates.sriovnetwork.openshift.io", "-n", SRIOV_NAMESPACE)["items"]
    assert states and all(s.get("status", {}).get("syncStatus") != "Failed" for s in states)
    assert "gpufleet-sriov-pre-steps" not in [
        c["metadata"]["name"] for c in get_json(twin, "configmaps", "-n", SRIOV_NAMESPACE)["items"]
    ]
    policy = get_json(twin, "nicclusterpolicies.mellanox.com", "nic-cluster-policy")
    assert policy["spec"]["ofedDriver"]["version"] == NEW  # set explicitly: Helm would not
    versions = mofed_versions(twin)
    assert versions.pop(CANARY) == NEW and set(versions.values()) == {OLD}
    report = twin.report()
    assert report["disrupted_pods"] == []

    run, result = run_role(twin, tmp_path, {**variables, "network_operator_action": "promote",
                                            "network_operator_max_unavailable": 2,
                                            "network_operator_max_parallel": 2})  # fmt: skip
    assert run.returncode == 0, run.output
    assert set(mofed_versions(twin).values()) == {NEW}
    assert result["selection"]["already_at_target"] == [CANARY]
    assert len(result["timeline"]) == 5 and result["failures"] == []
    assert not any(n["spec"].get("unschedulable") for n in workers(twin).values())
    assert twin.report()["disrupted_pods"] == []
