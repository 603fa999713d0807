"""A fleet of three twins, run as AWX runs a job (ansible-runner, env/extravars, the K8S_AUTH_* a credential injects).

One twin is reached through the credential's environment, one through ``gpufleet_k8s_auth``, one through
``gpufleet_k8s_<option>`` host vars. The tests judge by the job's artifacts (set_stats), the fleet summary,
each cluster's reports (named after it) and the twins' own state.
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest

from gpufleet_twin.process import start_twin

from .conftest import ROOT, kubectl
from .fleet_runner import credential_env, host_connection, run_job
from .test_upgrade_flow import cluster_ledger

pytestmark = pytest.mark.slow

MATRIX = ROOT / "examples" / "gpu-version-matrix.yaml"
NODES = 4
CANARY = "gpu-worker-001"  # the example matrix's canary_node
CLUSTERS = ("gpu-east", "gpu-north", "gpu-west")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    twins = {}
    try:
        for name in CLUSTERS:
            twins[name] = start_twin(
                nodes=NODES, time_scale=600, workdir=tmp_path_factory.mktemp(name), startup_timeout=300
            )
        yield twins
    finally:
        for twin in twins.values():
            assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def inventory(twins):
    # gpu-north: nothing on the host, the job's credential (K8S_AUTH_*) reaches it.
    return {
        "gpu-east": host_connection(twins["gpu-east"], form="auth"),
        "gpu-north": {},
        "gpu-west": host_connection(twins["gpu-west"], form="vars"),
    }


def test_audit_of_three_clusters_names_each_and_the_one_that_drifted(fleet, tmp_path):
    results = tmp_path / "results"
    kubectl(fleet["gpu-west"], "label", "node", "gpu-worker-002", "gpu-canary=true")
    # After the test's own kubectl (its discovery and its label), so the recorders count the job's requests alone.
    for twin in fleet.values():
        twin.admin("POST", "report/reset")
    try:
        job = run_job(
            tmp_path / "job",
            playbook="playbooks/audit.yml",
            hosts=inventory(fleet),
            extravars={
                "gpufleet_clusters": "gpu_clusters",
                "audit_matrix_file": str(MATRIX),
                "gpufleet_results_dir": str(results),
                "awx_user_name": "alice",
            },
            envvars=credential_env(fleet["gpu-north"]),
            ident="audit",
        )
        served = {name: twin.report()["requests"]["total"] for name, twin in fleet.items()}
    finally:
        kubectl(fleet["gpu-west"], "label", "node", "gpu-worker-002", "gpu-canary-")
    # The drifted cluster fails the job; the other two were audited all the same.
    assert (job.status, job.rc) == ("failed", 2), job.stdout
    artifacts = job.stats_artifacts()
    summary = artifacts["gpufleet_fleet_summary"]
    assert artifacts["gpufleet_failed_clusters"] == ["gpu-west"]
    outcomes = {entry["cluster"]: entry["outcome"] for entry in summary["clusters"]}
    assert outcomes == {"gpu-east": "success", "gpu-north": "success", "gpu-west": "drift"}
    west = next(entry for entry in summary["clusters"] if entry["cluster"] == "gpu-west")
    assert west["drift"]["nodes_with_drift"] == ["gpu-worker-002"]
    assert summary["actor"] == "alice"
    # The summary's files, and each cluster's reports named after it, with its name inside.
    assert json.loads((results / "fleet-summary-audit.json").read_text())["failed_clusters"] == ["gpu-west"]
    markdown = (results / "fleet-summary-audit.md").read_text()
    assert markdown.startswith("# Fleet audit: 1 of 3 clusters FAILED (gpu-west)")
    for name in CLUSTERS:
        report = json.loads((results / f"audit-{name}.json").read_text())
        assert report["cluster_name"] == name
        assert (results / f"audit-{name}.md").read_text().startswith(f"# GPU cluster audit: {name}")
        assert sorted(next(e for e in summary["clusters"] if e["cluster"] == name)["reports"]) == sorted(
            str(results / f"audit-{name}.{extension}") for extension in ("html", "json", "md", "xml")
        )
        # Each cluster was read by its own run only: the twin's recorder counts its requests.
        assert 0 < served[name] <= math.ceil(NODES / 500) + 15, (name, served)
    # The credential's token is never printed.
    for twin in fleet.values():
        assert twin.token not in job.stdout


def test_canary_over_three_clusters_one_failing_the_others_done(fleet, tmp_path):
    # gpu-east's canary node loses an InfiniBand port: its rdma gate fails.
    fleet["gpu-east"].admin("POST", "faults", {"type": "ib_port_down", "node": CANARY, "device": "mlx5_3"})
    results = tmp_path / "results"
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(MATRIX.read_text())
    job = run_job(
        tmp_path / "job",
        playbook="playbooks/upgrade.yml",
        hosts=inventory(fleet),
        extravars={
            "gpufleet_clusters": "gpu_clusters",
            "stage": "canary",
            "upgrade_matrix_file": str(matrix),
            "gpufleet_results_dir": str(results),
            "upgrade_wait_timeout": 900,
            "upgrade_validate_gates": ["rdma", "gpu_errors"],
            "validate_wait_sleep": 0.5,
            "gpu_operator_wait_sleep": 1,
            "awx_user_name": "alice",
            "awx_job_id": 4711,
        },
        envvars=credential_env(fleet["gpu-north"]),
        ident="canary",
    )
    assert (job.status, job.rc) == ("failed", 2), job.stdout
    artifacts = job.stats_artifacts()
    summary = artifacts["gpufleet_fleet_summary"]
    assert artifacts["gpufleet_failed_clusters"] == ["gpu-east"]
    outcomes = {entry["cluster"]: entry["outcome"] for entry in summary["clusters"]}
    assert outcomes == {"gpu-east": "failed", "gpu-north": "success", "gpu-west": "success"}
    east = next(entry for entry in summary["clusters"] if entry["cluster"] == "gpu-east")
    assert "rdma" in east["message"]
    markdown = (results / "fleet-summary-canary.md").read_text()
    assert markdown.startswith("# Fleet canary: 1 of 3 clusters FAILED (gpu-east)")
    for name in CLUSTERS:
        entry = next(e for e in summary["clusters"] if e["cluster"] == name)
        (report,) = entry["reports"]
        assert report.startswith(str(results / f"upgrade-{name}-canary-")), report
        text = pathlib.Path(report).read_text()
        assert f"| Cluster | {name} (API server {fleet[name].api_url}) |" in text
        # The actor is the AWX user who launched the job.
        assert "| Who | alice (AWX job 4711)" in text
        ledger = json.loads((results / f"upgrade-ledger-{name}.json").read_text())["entries"]
        assert [(e["cluster_name"], e["stage"]) for e in ledger] == [(name, "canary")]
        assert entry["ledger"] == str(results / f"upgrade-ledger-{name}.json")
    # The clusters that passed have their canary; the failed one says so in its own ConfigMap ledger.
    for name in ("gpu-north", "gpu-west"):
        labels = json.loads(kubectl(fleet[name], "get", "node", CANARY, "-o", "json"))["metadata"]["labels"]
        assert labels.get("gpu-canary") == "true", name
    assert [(e["cluster_name"], e["outcome"]) for e in cluster_ledger(fleet["gpu-east"])] == [("gpu-east", "failed")]
