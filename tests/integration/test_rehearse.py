"""playbooks/rehearse.yml: snapshot a twin read-only, rehearse a promote on a copy, then meet the same on the original.

The source twin has a PodDisruptionBudget that allows no disruption over a
training Deployment's GPU pods, so the node that runs the first of them will
fail (the upgrade controller cannot empty it). The rehearsal of the promote
must predict the PDB block (named) and that node, the real promote on the
source twin must then meet both, and the predicted duration must
be within 15% of the real one on the twin's clock at the same time scale. The
snapshot and the rehearsal send only reads to the source twin.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._rehearsal import rollout_seconds

from .accounts import account_env, apply_shipped_roles, refused, token_of
from .conftest import ROOT, kubectl, run_playbook

# make test-long's: a snapshot, a rehearsal and the real promote it predicts (270 s of a worker in a clean-clone make
# test); make test still checks the rehearse playbook's permissions (test_rbac_minimal).
pytestmark = [pytest.mark.slow, pytest.mark.long]

EXAMPLE = ROOT / "examples" / "gpu-version-matrix.yaml"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
# The permission preflight's questions: a create the API server answers without storing anything.
ACCESS_REVIEWS = "create selfsubjectaccessreviews.authorization.k8s.io"
BLOCKING_PDB = "ml-training/llm-train-02-no-disruption"


def common_vars(workspace: pathlib.Path) -> dict:
    return {
        "upgrade_matrix_file": str(workspace / "matrix.yaml"),
        "upgrade_wait_timeout": 900,
        "upgrade_force_reason": "rehearsal test: no bake window",
        "validate_wait_sleep": 0.5,
        "gpu_operator_wait_sleep": 1,
    }


def writes(twin) -> dict:
    served = twin.report()["requests"]["by_verb_resource"]
    return {
        key: count for key, count in served.items() if key.split(" ", 1)[0] in WRITE_VERBS and key != ACCESS_REVIEWS
    }


def test_rehearsed_promote_predicts_the_pdb_block_and_the_failing_node(fresh_twin, tmp_path):
    twin = fresh_twin
    shutil.copy(EXAMPLE, tmp_path / "matrix.yaml")
    canary = run_playbook(
        "playbooks/upgrade.yml",
        twin=twin,
        extra_vars={**common_vars(tmp_path), "stage": "canary", "upgrade_report_dir": str(tmp_path / "reports")},
        timeout=600,
    )
    assert canary.returncode == 0, canary.output
    # A budget that allows no disruption over the GPU pods of one training Deployment.
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "llm-train-02-no-disruption", "namespace": "ml-training"},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "llm-train-02"}}},
    }
    (tmp_path / "pdb.json").write_text(json.dumps(pdb))
    kubectl(twin, "apply", "-f", str(tmp_path / "pdb.json"))
    twin.advance(60)  # the PDB's status is computed

    # The rehearsal runs as its own account (gpufleet-rehearse, bound to exactly the shipped rbac/rehearse.yaml roles),
    # its token, host and CA in the environment as an AWX credential injects them: the stage it rehearses runs
    # against the copy, not against the cluster those variables point at.
    apply_shipped_roles(twin)
    account = account_env(twin, token_of(twin, "gpufleet-rehearse"))
    twin.admin("POST", "report/reset")
    rehearsal_dir = tmp_path / "rehearsal"
    # In check mode the preflight and the snapshot's reads run, then the play ends saying so: no file, no twin.
    checked = run_playbook(
        "playbooks/rehearse.yml",
        twin=None,
        environment=account,
        extra_vars={**common_vars(tmp_path), "stage": "promote", "rehearse_dir": str(rehearsal_dir)},
        check=True,
        timeout=300,
    )
    assert checked.returncode == 0, checked.output
    assert "Check mode: the permission preflight and the snapshot's reads ran" in checked.output
    assert not rehearsal_dir.exists()
    assert writes(twin) == {}, writes(twin)
    # With one candidate setting the window estimate runs too (gpufleet_twin.estimate on the snapshot, one seed).
    candidate = {"maxParallelUpgrades": 1, "maxUnavailable": "25%"}
    rehearsal = run_playbook(
        "playbooks/rehearse.yml",
        twin=None,
        environment=account,
        extra_vars={
            **common_vars(tmp_path),
            "stage": "promote",
            "rehearse_dir": str(rehearsal_dir),
            "rehearse_candidates": [candidate],
            "rehearse_seeds": 1,
        },
        timeout=900,
    )
    assert rehearsal.returncode == 0, rehearsal.output
    # The snapshot and the rehearsal only read the source cluster, after the permission preflight asked, and the
    # API refused none of its reads.
    assert writes(twin) == {}, writes(twin)
    assert refused(twin) == {}, refused(twin)
    assert twin.report()["requests"]["by_verb_resource"].get(ACCESS_REVIEWS), twin.report()["requests"]
    info = json.loads((rehearsal_dir / "snapshot" / "snapshot-info.json").read_text())
    assert "Secrets" in info["never_read"]
    assert not (rehearsal_dir / "snapshot" / "api_v1_secrets.json").exists()
    report = (rehearsal_dir / "rehearsal-promote.md").read_text()
    assert (rehearsal_dir / "rehearsal-promote.html").read_text().startswith("<!DOCTYPE html>")
    predicted = rehearsed_entry(rehearsal_dir / "reports" / "upgrade-ledger.json")
    assert f"| {BLOCKING_PDB} |" in report, report
    (failed_node,) = [failure["node"] for failure in predicted["failures"]]
    assert f"| {failed_node} | upgrade-failed |" in report
    assert "global timeout reached" in predicted["failures"][0]["reason"]
    # The PDB that never allows holds the rollout the estimate drives too: it does not finish, so nothing fits.
    (estimated,) = json.loads((rehearsal_dir / "estimate.json").read_text())["runs"]
    assert (estimated["candidate"], estimated["finished"], estimated["nodes"]) == (candidate, False, 6)
    assert "| maxParallelUpgrades 1, maxUnavailable 25% | 1 | did not finish | did not finish |" in report, report
    assert "No candidate fits" in report, report

    # The same promote on the original twin meets both.
    real = run_playbook(
        "playbooks/upgrade.yml",
        twin=twin,
        extra_vars={**common_vars(tmp_path), "stage": "promote", "upgrade_report_dir": str(tmp_path / "reports")},
        timeout=600,
    )
    assert real.returncode != 0, real.output
    entry = rehearsed_entry(tmp_path / "reports" / "upgrade-ledger.json")
    assert [failure["node"] for failure in entry["failures"]] == [failed_node]
    assert '-n "ml-training"' in entry["failures"][0]["reason"]
    # The predicted node work is within 15% of the real one on the twin's clock (same time scale).
    predicted_seconds, real_seconds = rollout_seconds(predicted), rollout_seconds(entry)
    assert real_seconds and abs(predicted_seconds - real_seconds) <= 0.15 * real_seconds, (
        predicted_seconds,
        real_seconds,
    )


def rehearsed_entry(path: pathlib.Path) -> dict:
    return json.loads(path.read_text())["entries"][-1]
