"""No secret in ``-vvv`` output or in what a run writes: the twin's bearer token and the BMC passwords.

Representative runs at the highest verbosity people use when something goes wrong (``-vvv``): an upgrade canary
authenticated with the twin's bearer token given as kubernetes.core's ``api_key`` (no kubeconfig), an audit with the
token in ``K8S_AUTH_API_KEY``, a firmware flash through one BMC with its password, and the NIC firmware role with
passwords per BMC and a default one. Everything is scanned: stdout, stderr and every file the run wrote (reports,
ledger, results), for the token, each password and the HTTP basic auth built from each user and password. Every
other playbook run of the suite gets the same scan from ``run_playbook`` (conftest.py) for the twin's token and the
passwords it was given.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
from collections.abc import Iterator

import pytest

from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import ROOT, assert_no_secret, kubectl, run_playbook, twin_secrets
from .test_firmware_idrac_flash import NEW_CX7, bmc_credentials, cx7, flash, write_image

pytestmark = pytest.mark.slow

CANARY = "gpu-worker-002"  # the NIC firmware role's canary (test_nic_firmware)
UPGRADE_CANARY = "gpu-worker-001"  # the example matrix's canary_node


@pytest.fixture
def twin(tmp_path: pathlib.Path) -> Iterator[TwinProcess]:
    # The twin's own files (kubeconfig with the token) live apart from what the runs write.
    started = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=tmp_path / "twin")
    yield started
    assert started.stop() == 0, started.log_path.read_text()[-2000:]


def token_auth(twin: TwinProcess) -> dict[str, str]:
    """kubernetes.core connection options with the bearer token itself, as an AWX credential injects them."""
    return {"host": twin.api_url, "api_key": twin.token, "ca_cert": str(twin.companion["ca_file"])}


def written(workspace: pathlib.Path) -> list[pathlib.Path]:
    return [path for path in workspace.rglob("*") if path.is_file() and path.stat().st_size <= 8 * 1024 * 1024]


def test_canary_and_audit_with_the_bearer_token_print_no_token(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    shutil.copy(ROOT / "examples" / "gpu-version-matrix.yaml", workspace / "matrix.yaml")
    auth = token_auth(twin)
    secrets = twin_secrets(twin)
    # twin=None: the environment points at no kubeconfig, the token in gpufleet_k8s_auth is the only credential.
    assert "K8S_AUTH_KUBECONFIG" not in os.environ
    canary = run_playbook(
        "playbooks/upgrade.yml",
        twin=None,
        verbosity=3,
        extra_vars={
            "stage": "canary",
            "gpufleet_k8s_auth": auth,
            "upgrade_matrix_file": str(workspace / "matrix.yaml"),
            "upgrade_report_dir": str(workspace / "reports"),
            "upgrade_wait_timeout": 900,
            "validate_wait_sleep": 0.5,
            "gpu_operator_wait_sleep": 1,
        },
    )
    # audit.yml reads kubernetes.core's K8S_AUTH_* environment (an AWX credential's injectors).
    audit = run_playbook(
        "playbooks/audit.yml",
        twin=None,
        verbosity=3,
        environment={
            "K8S_AUTH_HOST": auth["host"],
            "K8S_AUTH_API_KEY": auth["api_key"],
            "K8S_AUTH_SSL_CA_CERT": auth["ca_cert"],
        },
        extra_vars={
            "audit_matrix_file": str(workspace / "matrix.yaml"),
            "audit_output_dir": str(workspace / "audit"),
            "audit_fail_on_drift": False,
        },
    )
    # The runs did their work with the token (so the scan looked at real -vvv output of a real canary and audit).
    assert canary.returncode == 0, canary.output[-3000:]
    assert "Stage canary: success" in canary.output
    assert kubectl(twin, "get", "node", UPGRADE_CANARY, "-o", "jsonpath={.metadata.labels.gpu-canary}") == "true"
    assert audit.returncode == 0, audit.output[-3000:]
    assert json.loads((workspace / "audit" / "audit.json").read_text())["drift"]["nodes_total"] > 0
    assert "<localhost> EXEC" in canary.stdout or "ESTABLISH LOCAL CONNECTION" in canary.stdout  # really -vvv
    files = written(workspace)
    assert any(path.name.endswith(".md") for path in files), files  # the stage report was scanned too
    for run in (canary, audit):
        assert_no_secret(run, secrets, files=files)


def test_firmware_flash_prints_no_bmc_password(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    node = "gpu-worker-001"
    path, sha256 = write_image(tmp_path, "ConnectX-7", NEW_CX7)
    credentials = bmc_credentials(twin, node)
    run, result = flash(twin, tmp_path, node, cx7(path, sha256), verbosity=3)
    assert run.returncode == 0, run.output[-3000:]
    assert result["changed"] is True and result["rebooted"] is True
    assert credentials["password"] not in run.output
    assert_no_secret(run, twin_secrets(twin), files=[tmp_path / f"result-{node}.json"])


def test_nic_firmware_role_prints_no_bmc_password(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    """Passwords per BMC in nic_firmware_bmcs and a default one (the canary's), through the role's arg validation."""
    from .test_nic_firmware import role_vars, run_role

    kubectl(twin, "label", "node", CANARY, "gpu-canary=true")
    variables = role_vars(twin, tmp_path, nic_firmware_action="canary")
    result_file = tmp_path / "result.json"
    run, result = run_role(twin, tmp_path, variables)
    assert run.returncode == 0, run.output[-3000:]
    assert result["nodes_done"] == [CANARY]
    assert_no_secret(run, twin_secrets(twin), files=[result_file])
    # And at -vvv, where role argument validation and module invocations are printed.
    loud = run_playbook(
        "tests/integration/playbooks/firmware_role.yml",
        twin=twin,
        verbosity=3,
        extra_vars={**variables, "nic_firmware_action": "preflight"},
    )
    assert loud.returncode == 0, loud.output[-3000:]
    assert_no_secret(loud, twin_secrets(twin))


def test_the_scan_fails_a_run_that_prints_a_password(tmp_path: pathlib.Path) -> None:
    """The suite-wide scan in run_playbook is no formality: a run that shows a password (or its basic auth) fails."""
    playbook = tmp_path / "leak.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.debug:\n        msg: \"{{ (bmc.username ~ ':' ~ bmc.password) | b64encode }}\"\n"
    )
    report = tmp_path / "out" / "report.md"
    report.parent.mkdir()
    report.write_text("written by a run: s3cret-Passw0rd")
    bmc = {"username": "root", "password": "s3cret-Passw0rd"}
    with pytest.raises(AssertionError) as caught:
        run_playbook(playbook, twin=None, extra_vars={"bmc": bmc, "out": str(report.parent)})
    assert "password in " + str(report) in str(caught.value)
    assert "s3cret-Passw0rd" not in str(caught.value)  # the failure names the secret's kind, never its value
    report.unlink()
    with pytest.raises(AssertionError, match=r"basic auth of root \(password\) in stdout"):
        run_playbook(playbook, twin=None, extra_vars={"bmc": bmc})
