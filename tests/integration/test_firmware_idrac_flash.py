"""Module gpufleet.upgrade.firmware_idrac_flash against the twin's iDRAC-like BMCs: real ansible-playbook runs over
HTTPS (the twin's CA verified), one BMC per test so the tests share one twin.

What the BMC saw is read from the twin's admin view (``GET /admin/bmc``: firmware per FQDD, jobs, request counts),
never from the module's own report alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess, start_twin
from gpufleet_twin.redfish import build_firmware_image

from .conftest import PlaybookRun, kubectl, run_playbook

pytestmark = pytest.mark.slow

PLAYBOOK = "tests/integration/playbooks/firmware_flash.yml"
OLD_CX7, NEW_CX7 = "28.39.1002", "28.42.1000"
NICS = [f"NIC.Slot.{slot}-1-1" for slot in range(1, 9)]


# -- helpers shared with test_nic_firmware ---------------------------------------------------------------


def bmc_credentials(twin: TwinProcess, node: str) -> dict[str, str]:
    return dict(twin.companion["published"]["bmcs"][node])


def bmc_ca(twin: TwinProcess) -> str:
    return str(twin.companion["published"]["bmc_ca_file"])


def bmc_view(twin: TwinProcess, node: str) -> dict[str, Any]:
    """What the BMC itself holds: firmware per FQDD, jobs, sessions, request counts."""
    view: dict[str, Any] = twin.admin("GET", "bmc")[node]
    return view


def write_image(directory: pathlib.Path, component: str, version: str) -> tuple[str, str]:
    """A firmware image in the twin's format; returns (path, sha256)."""
    content = build_firmware_image(component, version, size=256 * 1024)
    path = directory / f"{component}-{version}.bin"
    path.write_bytes(content)
    return str(path), hashlib.sha256(content).hexdigest()


def boot_id(twin: TwinProcess, node: str) -> str:
    return kubectl(twin, "get", "node", node, "-o", "jsonpath={.status.nodeInfo.bootID}").strip()


@contextlib.contextmanager
def image_server(directory: pathlib.Path) -> Iterator[str]:
    """Serve ``directory`` over HTTP on 127.0.0.1 (the BMC fetches SimpleUpdate images from here)."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(directory), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


# -- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwinProcess]:
    started = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=tmp_path_factory.mktemp("twin"))
    yield started
    assert started.stop() == 0, started.log_path.read_text()[-2000:]


def flash(
    twin: TwinProcess,
    tmp_path: pathlib.Path,
    node: str,
    options: dict[str, Any],
    *,
    credentials: dict[str, str] | None = None,
    check: bool = False,
    diff: bool = False,
    verbosity: int = 0,
) -> tuple[PlaybookRun, dict[str, Any]]:
    result_file = tmp_path / f"result-{node}.json"
    result_file.unlink(missing_ok=True)
    extra = {
        "bmc": credentials or bmc_credentials(twin, node),
        "bmc_ca_path": bmc_ca(twin),
        "flash": options,
        "flash_result_file": str(result_file),
    }
    run = run_playbook(PLAYBOOK, twin=twin, extra_vars=extra, check=check, diff=diff, verbosity=verbosity)
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    return run, result


def cx7(path: str, sha256: str, version: str = NEW_CX7) -> dict[str, Any]:
    return {"components": [{"name": "firmware_cx7", "match": "ConnectX-7", "version": version,
                            "image_path": path, "sha256": sha256}]}  # fmt: skip


# -- tests ---------------------------------------------------------------------------------------------


def test_check_flash_then_nothing_to_do(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    """The four passes: check (changed, nothing sent), real (flashed, verified), check and real again (no change)."""
    node = "gpu-worker-001"
    path, sha256 = write_image(tmp_path, "ConnectX-7", NEW_CX7)
    before = bmc_view(twin, node)
    boot_before = boot_id(twin, node)

    run, result = flash(twin, tmp_path, node, cx7(path, sha256), check=True, diff=True)
    assert run.returncode == 0, run.output
    assert result["changed"] is True and result["adapter"] == "idrac"
    assert result["components"][0]["action"] == "flash"
    assert {d["device"] for d in result["components"][0]["devices"]} == set(NICS)
    assert result["diff"]["before"]["NIC.Slot.1-1-1"] == "28.39.10.02"
    assert result["diff"]["after"]["NIC.Slot.1-1-1"] == NEW_CX7
    assert result["checksums"] == {"firmware_cx7": sha256}
    seen = bmc_view(twin, node)
    assert seen["updateRequests"] == before["updateRequests"] and seen["jobs"] == before["jobs"]
    assert seen["firmware"]["NIC.Slot.1-1-1"] == OLD_CX7 and seen["sessions"] == 0  # logged out

    run, result = flash(twin, tmp_path, node, cx7(path, sha256))
    assert run.returncode == 0, run.output
    assert result["changed"] is True and result["rebooted"] is True
    assert [(job["state"], job["message_id"]) for job in result["jobs"]] == [("Completed", "RED001")]
    assert set(result["versions"]["after"].values()) == {"28.42.10.00"}
    seen = bmc_view(twin, node)
    assert all(seen["firmware"][nic] == NEW_CX7 for nic in NICS)
    assert seen["updateRequests"] == before["updateRequests"] + 1  # one multipart push for the eight NICs
    assert seen["sessions"] == 0
    assert boot_id(twin, node) != boot_before  # the reset rebooted the Kubernetes node

    for check in (True, False):
        run, result = flash(twin, tmp_path, node, cx7(path, sha256), check=check)
        assert run.returncode == 0, run.output
        assert result["changed"] is False and result["jobs"] == []
        assert result["components"][0]["action"] == "none"
    assert bmc_view(twin, node)["updateRequests"] == seen["updateRequests"]


def test_failing_job_fails_with_the_bmc_message(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    node = "gpu-worker-002"
    message = "Unable to write the firmware image to NIC.Slot.1-1-1: flash write verification failed."
    twin.admin("POST", f"bmc/{node}/fault", {"type": "job-fails", "message": message, "messageId": "RED004"})
    path, sha256 = write_image(tmp_path, "ConnectX-7", NEW_CX7)

    run, result = flash(twin, tmp_path, node, cx7(path, sha256))
    assert run.returncode != 0
    assert message in result["msg"] and "(RED004)" in result["msg"]
    job = result["jobs"][0]
    assert job["state"] == "Failed" and job["job_id"] in result["msg"]
    assert result["bmc"] in result["msg"]
    seen = bmc_view(twin, node)
    assert seen["jobs"][job["job_id"]]["state"] == "Failed"
    assert seen["firmware"]["NIC.Slot.1-1-1"] == OLD_CX7 and seen["sessions"] == 0


def test_wrong_password_is_a_clear_error_and_never_printed(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    node = "gpu-worker-003"
    path, sha256 = write_image(tmp_path, "ConnectX-7", NEW_CX7)
    wrong = dict(bmc_credentials(twin, node), password="Wr0ng-Rotated-Secret-2026")
    before = bmc_view(twin, node)

    run, result = flash(twin, tmp_path, node, cx7(path, sha256), credentials=wrong, verbosity=3)
    assert run.returncode != 0
    assert "login as 'root' refused (HTTP 401)" in result["msg"] and "Check the BMC credentials" in result["msg"]
    assert "NoValidSession" in result["msg"]
    assert "Wr0ng-Rotated-Secret-2026" not in run.output
    assert bmc_credentials(twin, node)["password"] not in run.output
    assert bmc_view(twin, node)["updateRequests"] == before["updateRequests"]


def test_checksum_mismatch_is_refused_before_any_request(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    node = "gpu-worker-004"
    path, _sha256 = write_image(tmp_path, "ConnectX-7", NEW_CX7)
    wrong = hashlib.sha256(b"another image").hexdigest()
    before = bmc_view(twin, node)

    run, result = flash(twin, tmp_path, node, cx7(path, wrong))
    assert run.returncode != 0
    assert "Checksum mismatch" in result["msg"] and wrong in result["msg"] and "nothing was uploaded" in result["msg"]
    seen = bmc_view(twin, node)
    assert seen["requests"] == before["requests"]  # not even a login
    assert seen["updateRequests"] == before["updateRequests"] and seen["firmware"]["NIC.Slot.1-1-1"] == OLD_CX7


def test_a_reset_type_the_bmc_does_not_offer_is_refused_before_any_upload(
    twin: TwinProcess, tmp_path: pathlib.Path
) -> None:
    # Found out after the upload, the jobs would wait for a reset that never comes.
    node = "gpu-worker-006"
    path, sha256 = write_image(tmp_path, "ConnectX-7", NEW_CX7)
    twin.admin("POST", f"bmc/{node}/fault", {"type": "no-graceful-restart"})
    before = bmc_view(twin, node)
    try:
        for check in (True, False):
            run, result = flash(twin, tmp_path, node, cx7(path, sha256), check=check)
            assert run.returncode != 0
            assert "reset type GracefulRestart is not one of" in result["msg"] and "ForceRestart" in result["msg"]
    finally:
        twin.admin("DELETE", f"bmc/{node}/fault")
    seen = bmc_view(twin, node)
    assert seen["updateRequests"] == before["updateRequests"] and seen["firmware"]["NIC.Slot.1-1-1"] == OLD_CX7


def test_idrac_update_restarts_the_bmc_and_the_session_is_renewed(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    """The iDRAC flashes itself and restarts (connections refused, sessions gone); the job is followed through it."""
    node = "gpu-worker-004"
    path, sha256 = write_image(tmp_path, "iDRAC", "7.10.50.00")
    boot_before = boot_id(twin, node)
    options = {"components": [{"match": "iDRAC", "version": "7.10.50.00", "image_path": path, "sha256": sha256}],
               "reboot": False}  # fmt: skip

    run, result = flash(twin, tmp_path, node, options)
    assert run.returncode == 0, run.output
    assert result["changed"] is True and result["rebooted"] is False and result["pending_reset"] is False
    assert [(job["state"], job["message_id"]) for job in result["jobs"]] == [("Completed", "RED001")]
    assert result["versions"]["after"] == {"iDRAC.Embedded.1-1": "7.10.50.00"}
    seen = bmc_view(twin, node)
    assert seen["firmware"]["iDRAC.Embedded.1-1"] == "7.10.50.00" and seen["availability"] == "up"
    assert seen["sessions"] == 0  # the renewed session was logged out too
    assert boot_id(twin, node) == boot_before  # the host was not rebooted


def test_simple_update_from_http_then_rollback_to_previous(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    node = "gpu-worker-005"
    images = tmp_path / "images"
    images.mkdir()
    path, sha256 = write_image(images, "ConnectX-7", NEW_CX7)
    with image_server(images) as base:
        options = {"components": [{"name": "firmware_cx7", "match": "nic.slot.*", "version": NEW_CX7,
                                   "image_uri": f"{base}/{pathlib.Path(path).name}", "sha256": sha256}]}  # fmt: skip
        run, result = flash(twin, tmp_path, node, options)
    assert run.returncode == 0, run.output
    assert result["changed"] is True and result["checksums"] == {"firmware_cx7": sha256}
    assert all(bmc_view(twin, node)["firmware"][nic] == NEW_CX7 for nic in NICS)

    rollback = {"components": [{"match": "ConnectX-7", "version": OLD_CX7}], "rollback": True}
    run, result = flash(twin, tmp_path, node, rollback, check=True)
    assert run.returncode == 0 and result["changed"] is True, run.output
    assert {d["previous"] for d in result["components"][0]["devices"]} == {"28.39.10.02"}

    run, result = flash(twin, tmp_path, node, rollback)
    assert run.returncode == 0, run.output
    assert result["changed"] is True and len(result["jobs"]) == len(NICS)  # one FirmwareRollback job per device
    assert {job["state"] for job in result["jobs"]} == {"Completed"}
    seen = bmc_view(twin, node)
    assert all(seen["firmware"][nic] == OLD_CX7 for nic in NICS)
    assert sum(1 for job in seen["jobs"].values() if job["name"].startswith("Firmware Rollback")) == len(NICS)

    run, result = flash(twin, tmp_path, node, rollback)
    assert run.returncode == 0 and result["changed"] is False, run.output


def test_bios_applied_immediately_reboots_through_the_bmc(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    node = "gpu-worker-006"
    path, sha256 = write_image(tmp_path, "BIOS", "2.4.1")
    boot_before = boot_id(twin, node)
    options = {"components": [{"match": "BIOS", "version": "2.4.1", "image_path": path, "sha256": sha256}],
               "apply_time": "Immediate", "reboot": False}  # fmt: skip

    run, result = flash(twin, tmp_path, node, options)
    assert run.returncode == 0, run.output
    assert result["rebooted"] is True and "reset" not in result  # the BMC rebooted the host itself
    assert result["versions"] == {"before": {"BIOS.Setup.1-1": "2.3.5"}, "after": {"BIOS.Setup.1-1": "2.4.1"}}
    assert bmc_view(twin, node)["firmware"]["BIOS.Setup.1-1"] == "2.4.1"
    assert boot_id(twin, node) != boot_before

    downgrade = {"components": [{"match": "BIOS", "version": "2.3.5", "image_path": path, "sha256": sha256}]}
    run, result = flash(twin, tmp_path, node, downgrade, check=True)
    assert run.returncode != 0 and "refusing to downgrade" in result["msg"]
