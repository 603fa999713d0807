"""Role gpufleet.upgrade.nic_firmware against the twin: canary, check mode, promotion within a budget, an idempotent
re-run, rollback to the Previous images, and a halt at the first failing BMC. Real ansible-playbook runs; the
Kubernetes side is read with kubectl, the BMC side from the twin's admin view.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import PlaybookRun, kubectl, run_playbook
from .test_firmware_idrac_flash import NEW_CX7, OLD_CX7, bmc_ca, bmc_credentials, bmc_view, write_image

pytestmark = pytest.mark.slow

PLAYBOOK = "tests/integration/playbooks/firmware_role.yml"
STATE = "gpufleet.io/rollout-nic-firmware-state"
CANARY = "gpu-worker-002"


@pytest.fixture
def twin(tmp_path: pathlib.Path) -> Iterator[TwinProcess]:
    started = start_twin(nodes=5, profile="openshift", time_scale=600, workdir=tmp_path / "twin")
    yield started
    assert started.stop() == 0, started.log_path.read_text()[-2000:]


def gpu_nodes(twin: TwinProcess) -> dict[str, dict[str, Any]]:
    listing = json.loads(kubectl(twin, "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "json"))
    return {node["metadata"]["name"]: node for node in listing["items"]}


def nic_firmware(twin: TwinProcess, node: str) -> str:
    return str(bmc_view(twin, node)["firmware"]["NIC.Slot.1-1-1"])


def role_vars(twin: TwinProcess, tmp_path: pathlib.Path, **overrides: Any) -> dict[str, Any]:
    """BMCs as an operator gives them: every node but the canary listed with its credentials (inventory), the
    canary found by its gpufleet.io/bmc-address annotation with the default credentials."""
    path, sha256 = write_image(tmp_path, "ConnectX-7", NEW_CX7)
    published = twin.companion["published"]["bmcs"]
    listed = [
        {"node": node, "address": bmc["address"], "username": bmc["username"], "password": bmc["password"]}
        for node, bmc in sorted(published.items())
        if node != CANARY
    ]
    values: dict[str, Any] = {
        "nic_firmware_target": {"firmware_cx7": NEW_CX7, "mofed": "24.10-0.7.0.0"},
        "nic_firmware_images": {"firmware_cx7": {"image_path": path, "sha256": sha256}},
        "nic_firmware_bmcs": listed,
        "nic_firmware_bmc_username": bmc_credentials(twin, CANARY)["username"],
        "nic_firmware_bmc_password": bmc_credentials(twin, CANARY)["password"],
        "nic_firmware_bmc_ca_path": bmc_ca(twin),
        "nic_firmware_bmc_timeout": 10,
        "nic_firmware_wait_timeout": 120,
        "nic_firmware_drain_timeout": 120,
        "nic_firmware_wait_sleep": 0.2,
    }
    values.update(overrides)
    return values


def run_role(
    twin: TwinProcess, tmp_path: pathlib.Path, variables: dict[str, Any], *, check: bool = False
) -> tuple[PlaybookRun, dict[str, Any]]:
    result_file = tmp_path / "result.json"
    result_file.unlink(missing_ok=True)
    run = run_playbook(
        PLAYBOOK, twin=twin, extra_vars={**variables, "firmware_result_file": str(result_file)}, check=check
    )
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    return run, result


def test_canary_promote_rerun_and_rollback(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    kubectl(twin, "label", "node", CANARY, "gpu-canary=true")
    nodes = sorted(gpu_nodes(twin))
    twin.admin("POST", "budget", {"maxUnavailable": 2, "scope": "nvidia.com/gpu.present=true"})

    run, result = run_role(twin, tmp_path, role_vars(twin, tmp_path, nic_firmware_action="canary"))
    assert run.returncode == 0, run.output
    assert result["changed"] is True and result["nodes_done"] == [CANARY]
    assert result["target_versions"]["firmware_cx7"] == NEW_CX7
    canary_preflight = next(entry for entry in result["preflight"]["bmcs"] if entry["node"] == CANARY)
    assert canary_preflight["bmc_from"] == "annotation"
    steps = [step["name"] for step in result["timeline"][0]["steps"]]
    assert steps == ["cordon", "evict-pods", "flash", "reboot", "wait-node-ready", "verify-firmware", "uncordon"]
    assert {name: nic_firmware(twin, name) for name in nodes} == {
        name: NEW_CX7 if name == CANARY else OLD_CX7 for name in nodes
    }
    canary = gpu_nodes(twin)[CANARY]
    assert not canary["spec"].get("unschedulable") and canary["metadata"]["annotations"][STATE] == "done"
    assert canary["status"]["allocatable"]["nvidia.com/gpu"] == "8"

    promote = role_vars(twin, tmp_path, nic_firmware_action="promote", nic_firmware_max_unavailable=2,
                        nic_firmware_max_parallel=2)  # fmt: skip
    uploads = {name: bmc_view(twin, name)["updateRequests"] for name in nodes}
    run, result = run_role(twin, tmp_path, promote, check=True)
    assert run.returncode == 0, run.output
    assert result["changed"] is True and sorted(result["targets"]) == [n for n in nodes if n != CANARY]
    assert result["at_target"] == [CANARY]
    assert {name: bmc_view(twin, name)["updateRequests"] for name in nodes} == uploads
    assert not any(node["spec"].get("unschedulable") for node in gpu_nodes(twin).values())

    # Had the canary failed after its flash (its GPUs not back, say), it would be cordoned and marked failed
    # with its firmware already at the target: the promotion must still halt on it, touching nothing.
    kubectl(twin, "cordon", CANARY)
    kubectl(twin, "annotate", "node", CANARY, f"{STATE}=failed", "--overwrite")
    run, result = run_role(twin, tmp_path, promote)
    assert run.returncode != 0 and "halted by a failed node" in result["msg"] and CANARY in result["msg"]
    assert {name: bmc_view(twin, name)["updateRequests"] for name in nodes} == uploads
    # A person clears it: the promotion finishes the canary (nothing to flash, no reboot to wait for) and
    # uncordons it, then rolls the others.
    kubectl(twin, "annotate", "node", CANARY, f"{STATE}=pending", "--overwrite")
    run, result = run_role(twin, tmp_path, promote)
    assert run.returncode == 0, run.output
    assert sorted(result["nodes_done"]) == nodes and result["failures"] == []
    canary_run = next(entry for entry in result["timeline"] if entry["node"] == CANARY)
    flash = next(step for step in canary_run["steps"] if step["name"] == "flash")
    assert flash["detail"]["nothing_to_flash"] is True
    assert bmc_view(twin, CANARY)["updateRequests"] == uploads[CANARY]
    assert result["peak_unavailable"] <= 2
    assert {nic_firmware(twin, name) for name in nodes} == {NEW_CX7}
    assert not any(node["spec"].get("unschedulable") for node in gpu_nodes(twin).values())
    report = twin.report()
    assert report["budget_violations"] == [], report["budget_violations"]

    run, result = run_role(twin, tmp_path, promote)
    assert run.returncode == 0, run.output
    assert result["changed"] is False and result["targets"] == []

    rollback = role_vars(twin, tmp_path, nic_firmware_action="rollback", nic_firmware_max_unavailable=2,
                         nic_firmware_max_parallel=2, nic_firmware_target={"firmware_cx7": OLD_CX7},
                         nic_firmware_images={})  # fmt: skip
    run, result = run_role(twin, tmp_path, rollback)
    assert run.returncode == 0, run.output
    assert sorted(result["nodes_done"]) == nodes
    assert {nic_firmware(twin, name) for name in nodes} == {OLD_CX7}
    assert all(
        job["name"].startswith("Firmware Rollback")
        for job in bmc_view(twin, CANARY)["jobs"].values()
        if job["name"].startswith("Firmware") and job["state"] == "Completed" and "Rollback" in job["name"]
    )


def test_halt_at_the_first_failing_bmc_leaves_the_node_cordoned(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    nodes = sorted(gpu_nodes(twin))
    first = nodes[0]
    message = "Unable to apply the firmware: the adapter did not respond after the flash."
    run, result = run_role(twin, tmp_path, role_vars(twin, tmp_path, nic_firmware_action="preflight"))
    assert run.returncode == 0, run.output
    assert result["changed"] is False and sorted(result["targets"]) == nodes
    assert {e["versions"]["NIC.Slot.1-1-1"] for e in result["preflight"]["bmcs"]} == {"28.39.10.02"}

    # gpufleet_node_maintenance sets node_maintenance for every role (how the upgrade flow takes it). This twin has
    # no Maintenance Operator, so "always" refuses the rollout before any change.
    always = {
        **role_vars(twin, tmp_path, nic_firmware_action="promote"),
        "gpufleet_node_maintenance": {"mode": "always"},
    }
    run, result = run_role(twin, tmp_path, always)
    assert run.returncode != 0
    assert "node_maintenance is always, but the cluster does not serve NodeMaintenance" in run.output
    assert not any(node["spec"].get("unschedulable") for node in gpu_nodes(twin).values())
    assert all(bmc_view(twin, name)["updateRequests"] == 0 for name in nodes)

    twin.admin("POST", f"bmc/{first}/fault", {"type": "job-fails", "message": message, "messageId": "RED004"})
    run, result = run_role(twin, tmp_path, role_vars(twin, tmp_path, nic_firmware_action="promote"))
    assert run.returncode != 0
    assert first in result["msg"] and message in result["msg"]
    assert (
        result["failures"] == [{"node": first, "step": "reboot", "reason": result["failures"][0]["reason"]}]
        and message in result["failures"][0]["reason"]
    )
    assert result["nodes_done"] == [] and sorted(result["nodes_not_started"]) == nodes[1:]
    after = gpu_nodes(twin)
    assert after[first]["spec"].get("unschedulable") is True
    assert after[first]["metadata"]["annotations"][STATE] == "failed"
    assert not any(after[name]["spec"].get("unschedulable") for name in nodes[1:])
    assert {nic_firmware(twin, name) for name in nodes} == {OLD_CX7}
    assert all(bmc_view(twin, name)["updateRequests"] == 0 for name in nodes[1:])
    events = kubectl(twin, "get", "events", "-A", "--field-selector", f"involvedObject.name={first}", "-o", "json")
    warnings = [e["message"] for e in json.loads(events)["items"] if e.get("type") == "Warning"]
    assert any("failed at step reboot" in text and message in text for text in warnings), warnings

    # A second run halts on the failed node without touching anything.
    run, result = run_role(twin, tmp_path, role_vars(twin, tmp_path, nic_firmware_action="promote"))
    assert run.returncode != 0 and "halted by a failed node" in result["msg"]
    assert all(bmc_view(twin, name)["updateRequests"] == 0 for name in nodes[1:])


def test_a_nic_job_that_ends_reboot_pending_halts_or_is_power_cycled(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    """dell/iDRAC-Redfish-Scripting issue 266: a NIC job ends "Job completed, server reboot pending" after the warm
    reset and the card runs its old firmware until a power cycle. Not allowed to power-cycle: the node fails, named,
    and nothing else changes. Allowed: the host is power cycled and the versions verified in FirmwareInventory."""
    nodes = sorted(gpu_nodes(twin))
    first = nodes[0]
    twin.admin("POST", f"bmc/{first}/fault", {"type": "nic-needs-power-cycle"})
    run, result = run_role(twin, tmp_path, role_vars(twin, tmp_path, nic_firmware_action="promote"))
    assert run.returncode != 0, run.output
    assert first in result["msg"]
    (failure,) = result["failures"]
    assert (failure["node"], failure["step"]) == (first, "reboot")
    reason = failure["reason"]
    assert "server reboot pending" in reason and "nic_firmware_power_cycle_on_reboot_pending: true" in reason
    view = bmc_view(twin, first)
    pending = [job_id for job_id, job in view["jobs"].items() if job["state"] == "RebootPending"]
    assert pending and all(job_id in reason for job_id in pending)
    assert view["resets"] == ["GracefulRestart"]  # no power cycle without permission
    assert nic_firmware(twin, first) == OLD_CX7  # the job said "completed"; the inventory says not running
    assert result["nodes_done"] == [] and sorted(result["nodes_not_started"]) == nodes[1:]
    assert all(
        bmc_view(twin, name)["updateRequests"] == 0 and bmc_view(twin, name)["resets"] == [] for name in nodes[1:]
    )
    assert gpu_nodes(twin)[first]["spec"].get("unschedulable") is True

    # Resume that node alone (labelled canary) with permission. Check mode first: it power-cycles nothing.
    kubectl(twin, "annotate", "node", first, f"{STATE}=pending", "--overwrite")
    kubectl(twin, "label", "node", first, "gpu-canary=true")
    allowed = role_vars(twin, tmp_path, nic_firmware_action="canary", nic_firmware_power_cycle_on_reboot_pending=True)
    run, result = run_role(twin, tmp_path, allowed, check=True)
    assert run.returncode == 0, run.output
    assert bmc_view(twin, first)["resets"] == ["GracefulRestart"]
    uploads = bmc_view(twin, first)["updateRequests"]
    run, result = run_role(twin, tmp_path, allowed)
    assert run.returncode == 0, run.output
    assert result["nodes_done"] == [first]
    # The run adopts the job the first one left: no second flash, no warm reset that could not finish it.
    assert bmc_view(twin, first)["resets"] == ["GracefulRestart", "PowerCycle"]
    assert bmc_view(twin, first)["updateRequests"] == uploads
    assert all(job["state"] != "RebootPending" for job in bmc_view(twin, first)["jobs"].values())
    assert nic_firmware(twin, first) == NEW_CX7  # read back from the BMC's FirmwareInventory view
    assert result["versions_after"][first]["NIC.Slot.1-1-1"] == "28.42.10.00"
    assert all(bmc_view(twin, name)["resets"] == [] for name in nodes[1:])
    assert not gpu_nodes(twin)[first]["spec"].get("unschedulable")
