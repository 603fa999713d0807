"""The BMCs over real HTTPS: auth, inventory, update jobs, resets, faults (urllib client, no mocks)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from aiohttp import web
from bmc_harness import NODE_TYPE, NODES, PASSWORD, BmcHarness

from gpufleet_twin.redfish import BMC_ADDRESS_ANNOTATION, build_firmware_image
from gpufleet_twin.redfish.model import BmcTimings

NODE = NODES[0]
OTHER = NODES[1]
TIMINGS = BmcTimings()
INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
MULTIPART = "/redfish/v1/UpdateService/MultipartUpload"
SIMPLE_UPDATE = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
RESET = "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset"
CX7_OLD = "Installed-0-28.39.10.02__NIC.Slot.1-1-1"


def push_update(bmcs: BmcHarness, component: str, version: str, *, apply_time: str = "OnReset", **kwargs: Any) -> str:
    """MultipartHttpPushUri update as Dell's scripts send it; returns the task URI."""
    answer = bmcs.multipart(
        NODE,
        MULTIPART,
        [
            (
                "UpdateParameters",
                None,
                "application/json",
                json.dumps({"Targets": [], "@Redfish.OperationApplyTime": apply_time}).encode(),
            ),
            (
                "UpdateFile",
                f"{component}_{version}.bin",
                "application/octet-stream",
                build_firmware_image(component, version, size=64 * 1024),
            ),
        ],
        **kwargs,
    )
    assert answer.status == 202, answer.body
    assert answer.json()["@odata.type"].startswith("#Task.")
    return answer.headers["location"]


def dell_job(bmcs: BmcHarness, task_uri: str) -> dict[str, Any]:
    job_id = task_uri.rsplit("/", 1)[1]
    answer = bmcs.get(NODE, f"/redfish/v1/Managers/iDRAC.Embedded.1/Jobs/{job_id}")
    assert answer.status == 200, answer.body
    return answer.json()


def error_ids(answer: Any) -> list[str]:
    return [m["MessageId"] for m in answer.json()["error"]["@Message.ExtendedInfo"]]


# -- discovery and authentication --------------------------------------------------------------------


def test_each_node_has_its_own_bmc_published_and_annotated(bmcs: BmcHarness) -> None:
    first, second = bmcs.fleet.address(NODE), bmcs.fleet.address(OTHER)
    assert first.startswith("https://127.1.0.") and second.startswith("https://127.1.0.")
    assert first.split(":")[1] != second.split(":")[1]  # distinct addresses
    published = bmcs.twin.published["bmcs"]
    assert published[NODE] == {"address": first, "username": "root", "password": PASSWORD}
    node = bmcs.call(bmcs.twin.store.get, NODE_TYPE, None, NODE)
    assert node["metadata"]["annotations"][BMC_ADDRESS_ANNOTATION] == first
    assert "password" not in json.dumps(node["metadata"]["annotations"])
    assert bmcs.get(OTHER, "/redfish/v1/Systems/System.Embedded.1").json()["HostName"] == OTHER


def test_service_root_and_odata_are_public_the_rest_needs_credentials(bmcs: BmcHarness) -> None:
    root = bmcs.get(NODE, "/redfish/v1/", auth=None)
    assert root.status == 200
    assert root.json()["Vendor"] == "Dell"
    assert root.json()["Links"]["Sessions"]["@odata.id"] == "/redfish/v1/SessionService/Sessions"
    assert root.headers["odata-version"] == "4.0"
    assert bmcs.get(NODE, "/redfish/v1/odata", auth=None).status == 200
    denied = bmcs.get(NODE, "/redfish/v1/Systems", auth=None)
    assert denied.status == 401
    assert error_ids(denied) == ["Base.1.12.NoValidSession"]
    assert denied.json()["error"]["code"] == "Base.1.12.GeneralError"


def test_wrong_password_is_401_for_basic_auth_and_for_login(bmcs: BmcHarness) -> None:
    basic = bmcs.get(NODE, "/redfish/v1/Managers/iDRAC.Embedded.1", auth=("root", "calvin"))
    assert basic.status == 401
    assert basic.headers["www-authenticate"].startswith("Basic")
    login = bmcs.post(
        NODE, "/redfish/v1/SessionService/Sessions", {"UserName": "root", "Password": "calvin"}, auth=None
    )
    assert login.status == 401
    assert "x-auth-token" not in login.headers
    assert error_ids(login) == ["Base.1.12.NoValidSession"]


def test_session_login_use_and_logout(bmcs: BmcHarness) -> None:
    token, location = bmcs.login(NODE)
    assert location.startswith("/redfish/v1/SessionService/Sessions/")
    sessions = bmcs.get(NODE, "/redfish/v1/SessionService/Sessions", token=token).json()
    assert {"@odata.id": location} in sessions["Members"]
    assert bmcs.get(NODE, location, token=token).json()["UserName"] == "root"
    assert bmcs.request(NODE, "DELETE", location, token=token).status == 200
    after = bmcs.get(NODE, "/redfish/v1/Systems/System.Embedded.1", token=token)
    assert after.status == 401
    # A token of one BMC is no credential at another.
    other_token, _ = bmcs.login(OTHER)
    assert bmcs.get(NODE, "/redfish/v1/Systems", token=other_token).status == 401


def test_unknown_resources_and_methods_answer_redfish_errors(bmcs: BmcHarness) -> None:
    missing = bmcs.get(NODE, f"{INVENTORY}/Installed-0-1.2.3__NIC.Slot.42-1-1")
    assert missing.status == 404
    assert error_ids(missing) == ["Base.1.12.ResourceMissingAtURI"]
    wrong_method = bmcs.request(NODE, "PATCH", "/redfish/v1/UpdateService", body={})
    assert wrong_method.status == 405
    assert bmcs.post(NODE, RESET, {}).status == 400
    malformed = bmcs.request(NODE, "POST", RESET, data=b"{not json", headers={"Content-Type": "application/json"})
    assert error_ids(malformed) == ["Base.1.12.MalformedJSON"]


# -- inventory ------------------------------------------------------------------------------------------------


def test_firmware_inventory_lists_bios_idrac_and_nics_with_dell_fields(bmcs: BmcHarness) -> None:
    ids = bmcs.inventory_ids(NODE)
    assert CX7_OLD in ids
    assert "Installed-0-28.39.10.02__NIC.Slot.8-1-1" in ids
    assert "Installed-0-22.38.10.02__NIC.Slot.9-1-1" in ids  # ConnectX-6 Dx on the Ethernet side
    assert "Installed-159-2.3.5__BIOS.Setup.1-1" in ids
    assert "Installed-25227-7.10.30.00__iDRAC.Embedded.1-1" in ids
    assert "Previous-25227-7.00.60.00__iDRAC.Embedded.1-1" in ids
    member = bmcs.get(NODE, f"{INVENTORY}/{CX7_OLD}").json()
    assert member["Version"] == "28.39.10.02"
    assert member["Updateable"] is True
    dell = member["Oem"]["Dell"]["DellSoftwareInventory"]
    assert (dell["ComponentID"], dell["VendorID"], dell["DeviceID"], dell["FQDD"]) == (
        "0",
        "15B3",
        "1021",
        "NIC.Slot.1-1-1",
    )
    assert "ConnectX-7" in member["Name"]
    expanded = bmcs.get(NODE, INVENTORY + "?$expand=*($levels=1)").json()
    assert len(expanded["Members"]) == expanded["Members@odata.count"] == len(ids)
    assert all("Version" in m for m in expanded["Members"])
    selected = bmcs.get(NODE, "/redfish/v1/Managers/iDRAC.Embedded.1?$select=FirmwareVersion").json()
    assert selected["FirmwareVersion"] == "7.10.30.00" and "Actions" not in selected


# -- updates ------------------------------------------------------------------------------------------------------


def test_multipart_nic_update_on_reset_with_job_tracking_reset_and_inventory(bmcs: BmcHarness) -> None:
    token, _ = bmcs.login(NODE)
    task_uri = push_update(bmcs, "ConnectX-7", "28.41.1000", token=token)
    assert task_uri.startswith("/redfish/v1/TaskService/Tasks/JID_")
    task = bmcs.task(NODE, task_uri)
    assert task["TaskState"] == "Running"
    assert task["Oem"]["Dell"]["JobState"] == "Downloading"

    bmcs.advance(TIMINGS.transfer_seconds + 1)
    task = bmcs.task(NODE, task_uri)
    assert (task["TaskState"], task["PercentComplete"]) == ("Pending", 0)
    assert task["Messages"][0]["Message"] == "Task successfully scheduled."
    assert task["Messages"][1]["MessageId"] == "Base.1.12.ResetRequired"
    job = dell_job(bmcs, task_uri)
    assert (job["JobState"], job["JobType"], job["MessageId"]) == ("Scheduled", "FirmwareUpdate", "JCP001")
    assert job["Name"] == "Firmware Update: Mellanox ConnectX-7 Adapter Firmware"
    assert CX7_OLD in bmcs.inventory_ids(NODE)  # nothing applied before the reset
    assert bmcs.health(NODE).ready

    assert bmcs.post(NODE, RESET, {"ResetType": "GracefulRestart"}, token=token).status == 204
    health = bmcs.health(NODE)
    assert not health.ready
    reboot_seconds = TIMINGS.host_shutdown_seconds + TIMINGS.nic_apply_seconds + TIMINGS.host_boot_seconds
    assert health.rebooting_until == pytest.approx(bmcs.twin.clock.now() + reboot_seconds, abs=2)

    bmcs.advance(TIMINGS.host_shutdown_seconds + TIMINGS.nic_apply_seconds / 2)
    running = dell_job(bmcs, task_uri)
    assert running["JobState"] == "Running" and 0 < running["PercentComplete"] < 100
    jobs = bmcs.get(NODE, "/redfish/v1/Managers/iDRAC.Embedded.1/Jobs?$expand=*($levels=1)").json()["Members"]
    assert [j["JobState"] for j in jobs if j["JobType"] == "RebootNoForce"] == ["RebootCompleted"]

    bmcs.advance(TIMINGS.nic_apply_seconds)
    done = dell_job(bmcs, task_uri)
    assert (done["JobState"], done["PercentComplete"], done["Message"]) == (
        "Completed",
        100,
        "Job completed successfully.",
    )
    task = bmcs.task(NODE, task_uri)
    assert (task["TaskState"], task["TaskStatus"]) == ("Completed", "OK")
    ids = bmcs.inventory_ids(NODE)
    assert "Installed-0-28.41.10.00__NIC.Slot.1-1-1" in ids
    assert "Previous-0-28.39.10.02__NIC.Slot.1-1-1" in ids
    assert CX7_OLD not in ids
    assert "Installed-0-22.38.10.02__NIC.Slot.9-1-1" in ids
    firmware = {port.device: port.firmware for port in bmcs.health(NODE).ib_ports}
    assert firmware["mlx5_0"] == firmware["mlx5_7"] == "28.41.1000"
    assert firmware["mlx5_8"] == "22.38.1002"
    assert not bmcs.health(NODE).ready  # still booting: the update ran in POST
    dmtf = bmcs.get(NODE, "/redfish/v1/JobService/Jobs/" + task_uri.rsplit("/", 1)[1]).json()
    assert (dmtf["JobState"], dmtf["JobStatus"]) == ("Completed", "OK")


def test_simple_update_failing_job_reports_its_message(bmcs: BmcHarness) -> None:
    message = "Unable to flash NIC.Slot.1-1-1: the adapter did not respond."
    bmcs.call(bmcs.fleet.inject_fault, NODE, {"type": "job-fails", "message": message, "component": "ConnectX-7"})
    image_uri = bmcs.publish_image("cx7-28.41.1000.bin", build_firmware_image("ConnectX-7", "28.41.1000"))
    answer = bmcs.post(
        NODE,
        SIMPLE_UPDATE,
        {"ImageURI": image_uri, "TransferProtocol": "HTTP", "@Redfish.OperationApplyTime": "OnReset"},
    )
    assert answer.status == 202, answer.body
    task_uri = answer.headers["location"]
    bmcs.wait_for(lambda: bmcs.call(lambda: bmcs.fleet.bmc(NODE).jobs[task_uri.rsplit("/", 1)[1]].transfer_ends_at))
    bmcs.advance(TIMINGS.transfer_seconds + 1)
    assert dell_job(bmcs, task_uri)["JobState"] == "Scheduled"
    assert bmcs.post(NODE, RESET, {"ResetType": "ForceRestart"}).status == 204
    bmcs.advance(TIMINGS.host_shutdown_seconds + TIMINGS.nic_apply_seconds + 1)
    job = dell_job(bmcs, task_uri)
    assert (job["JobState"], job["Message"]) == ("Failed", message)
    task = bmcs.task(NODE, task_uri)
    assert (task["TaskState"], task["TaskStatus"]) == ("Exception", "Critical")
    assert CX7_OLD in bmcs.inventory_ids(NODE)
    assert {p.firmware for p in bmcs.health(NODE).ib_ports[:8]} == {"28.39.1002"}


def test_simple_update_with_an_unreachable_image_fails_the_transfer(bmcs: BmcHarness) -> None:
    answer = bmcs.post(NODE, SIMPLE_UPDATE, {"ImageURI": bmcs.image_base_url + "/missing.bin"})
    task_uri = answer.headers["location"]
    job_id = task_uri.rsplit("/", 1)[1]
    bmcs.wait_for(lambda: bmcs.call(lambda: bmcs.fleet.bmc(NODE).jobs[job_id].transfer_ends_at))
    bmcs.advance(TIMINGS.transfer_seconds + 1)
    job = dell_job(bmcs, task_uri)
    assert job["JobState"] == "Failed"
    assert "HTTP status 404" in job["Message"]
    bad_protocol = bmcs.post(NODE, SIMPLE_UPDATE, {"ImageURI": "nfs://10.0.0.1/fw.bin"})
    assert bad_protocol.status == 400


def test_idrac_update_restarts_the_bmc_and_ends_sessions(bmcs: BmcHarness) -> None:
    token, _ = bmcs.login(NODE)
    task_uri = push_update(bmcs, "iDRAC", "7.20.10.50", token=token)
    job_id = task_uri.rsplit("/", 1)[1]
    bmcs.advance(TIMINGS.transfer_seconds + 1)
    assert bmcs.task(NODE, task_uri)["TaskState"] == "Running"
    bmcs.advance(TIMINGS.idrac_apply_seconds)
    # The iDRAC is rebooting: nothing listens on its address.
    with pytest.raises(urllib.error.URLError):
        bmcs.get(NODE, "/redfish/v1", auth=None, timeout=2)
    assert bmcs.get(OTHER, "/redfish/v1", auth=None).status == 200  # other BMCs are not affected
    bmcs.advance(TIMINGS.bmc_restart_seconds + 1)
    stale = bmcs.get(NODE, "/redfish/v1/Managers/iDRAC.Embedded.1", token=token)
    assert stale.status == 401
    assert error_ids(stale) == ["Base.1.12.NoValidSession"]
    # Back on the network, it refuses even good credentials until its accounts are loaded.
    assert bmcs.get(NODE, "/redfish/v1", auth=None).status == 200
    assert bmcs.get(NODE, "/redfish/v1/Managers/iDRAC.Embedded.1").status == 401
    bmcs.advance(TIMINGS.bmc_auth_warmup_seconds)
    manager = bmcs.get(NODE, "/redfish/v1/Managers/iDRAC.Embedded.1").json()
    assert manager["FirmwareVersion"] == "7.20.10.50"
    assert "Previous-25227-7.10.30.00__iDRAC.Embedded.1-1" in bmcs.inventory_ids(NODE)
    assert bmcs.get(NODE, task_uri).status == 404  # tasks are lost with the restart
    assert bmcs.get(NODE, f"/redfish/v1/JobService/Jobs/{job_id}").json()["JobState"] == "Completed"
    assert bmcs.health(NODE).ready  # the host was not touched


def test_rollback_to_previous_through_simple_update(bmcs: BmcHarness) -> None:
    push_update(bmcs, "ConnectX-7", "28.41.1000")
    bmcs.advance(TIMINGS.transfer_seconds + 1)
    bmcs.post(NODE, RESET, {"ResetType": "PowerCycle"})
    bmcs.advance(TIMINGS.host_shutdown_seconds + TIMINGS.nic_apply_seconds + TIMINGS.host_boot_seconds + 1)
    previous = "Previous-0-28.39.10.02__NIC.Slot.3-1-1"
    assert previous in bmcs.inventory_ids(NODE)
    # Dell's rollback: SimpleUpdate whose ImageURI is the Previous- member.
    answer = bmcs.post(NODE, SIMPLE_UPDATE, {"ImageURI": f"{INVENTORY}/{previous}"})
    assert answer.status == 202, answer.body
    task_uri = answer.headers["location"]
    bmcs.advance(TIMINGS.local_transfer_seconds + 1)
    assert dell_job(bmcs, task_uri)["JobType"] == "FirmwareRollback"
    assert dell_job(bmcs, task_uri)["JobState"] == "Scheduled"
    bmcs.post(NODE, RESET, {"ResetType": "ForceRestart"})
    bmcs.advance(TIMINGS.host_shutdown_seconds + TIMINGS.nic_apply_seconds + 1)
    assert dell_job(bmcs, task_uri)["JobState"] == "Completed"
    ids = bmcs.inventory_ids(NODE)
    assert "Installed-0-28.39.10.02__NIC.Slot.3-1-1" in ids
    assert "Previous-0-28.41.10.00__NIC.Slot.3-1-1" in ids
    assert "Installed-0-28.41.10.00__NIC.Slot.1-1-1" in ids
    firmware = {port.device: port.firmware for port in bmcs.health(NODE).ib_ports}
    assert (firmware["mlx5_2"], firmware["mlx5_0"]) == ("28.39.1002", "28.41.1000")


def test_http_push_uri_needs_the_inventory_etag_and_installs_with_simple_update(bmcs: BmcHarness) -> None:
    listing = bmcs.get(NODE, INVENTORY)
    etag = listing.headers["etag"]
    package = ("file", "BIOS_2.4.1.bin", "application/octet-stream", build_firmware_image("BIOS", "2.4.1"))
    assert bmcs.multipart(NODE, INVENTORY, [package], headers={"If-Match": 'W/"stale"'}).status == 412
    uploaded = bmcs.multipart(NODE, INVENTORY, [package], headers={"If-Match": etag})
    assert uploaded.status == 201, uploaded.body
    location = uploaded.headers["location"]
    assert location.endswith("Available-159-2.4.1__BIOS.Setup.1-1")
    answer = bmcs.post(NODE, SIMPLE_UPDATE, {"ImageURI": location, "@Redfish.OperationApplyTime": "Immediate"})
    assert answer.status == 202
    bmcs.advance(TIMINGS.local_transfer_seconds + 1)
    assert not bmcs.health(NODE).ready  # Immediate: the BMC rebooted the host itself
    bmcs.advance(TIMINGS.host_shutdown_seconds + TIMINGS.bios_apply_seconds + 1)
    system = bmcs.get(NODE, "/redfish/v1/Systems/System.Embedded.1").json()
    assert system["BiosVersion"] == "2.4.1"


def test_power_off_keeps_the_node_down_until_power_on(bmcs: BmcHarness) -> None:
    assert bmcs.post(NODE, RESET, {"ResetType": "ForceOff"}).status == 204
    assert bmcs.get(NODE, "/redfish/v1/Systems/System.Embedded.1").json()["PowerState"] == "Off"
    health = bmcs.health(NODE)
    assert not health.ready and health.rebooting_until - bmcs.twin.clock.now() > 86_400
    assert bmcs.post(NODE, RESET, {"ResetType": "On"}).status == 204
    assert health.rebooting_until == pytest.approx(bmcs.twin.clock.now() + TIMINGS.host_boot_seconds, abs=2)
    assert bmcs.get(NODE, "/redfish/v1/Systems/System.Embedded.1").json()["PowerState"] == "On"


# -- faults ------------------------------------------------------------------------------------------------------


def test_changed_password_refuses_published_credentials_until_cleared(bmcs: BmcHarness) -> None:
    token, _ = bmcs.login(NODE)
    bmcs.call(bmcs.fleet.inject_fault, NODE, {"type": "password-changed", "password": "Rotated-Secret-9"})
    assert bmcs.get(NODE, "/redfish/v1/Systems").status == 401
    assert bmcs.get(NODE, "/redfish/v1/Systems", auth=("root", "Rotated-Secret-9")).status == 200
    assert bmcs.get(NODE, "/redfish/v1/Systems", token=token).status == 200  # existing sessions live on
    bmcs.call(bmcs.fleet.clear_faults, NODE)
    assert bmcs.get(NODE, "/redfish/v1/Systems").status == 200


def test_unresponsive_bmc_refuses_or_hangs_then_recovers(bmcs: BmcHarness) -> None:
    bmcs.call(bmcs.fleet.inject_fault, NODE, {"type": "unresponsive", "mode": "refuse"})
    bmcs.settle()
    with pytest.raises(urllib.error.URLError) as refused:
        bmcs.get(NODE, "/redfish/v1", auth=None, timeout=2)
    assert isinstance(refused.value.reason, ConnectionRefusedError)
    bmcs.call(bmcs.fleet.inject_fault, NODE, {"type": "unresponsive", "mode": "hang", "seconds": 600})
    bmcs.settle()
    with pytest.raises((TimeoutError, urllib.error.URLError)):
        bmcs.get(NODE, "/redfish/v1", auth=None, timeout=0.5)
    bmcs.advance(601)
    assert bmcs.get(NODE, "/redfish/v1", auth=None).status == 200


def test_host_never_returns_after_reset(bmcs: BmcHarness) -> None:
    bmcs.call(bmcs.fleet.inject_fault, NODE, {"type": "host-never-returns"})
    assert bmcs.health(NODE).never_returns
    bmcs.post(NODE, RESET, {"ResetType": "ForceRestart"})
    assert not bmcs.health(NODE).ready


def test_admin_routes_inject_and_clear_faults(bmcs: BmcHarness) -> None:
    """The routes the twin's API server mounts under /admin, served here by a bare aiohttp app."""

    async def serve() -> tuple[web.AppRunner, int]:
        app = web.Application()
        for method, path, handler in bmcs.twin.routes:
            app.router.add_route(method, path, handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    import asyncio

    runner, port = asyncio.run_coroutine_threadsafe(serve(), bmcs.loop).result(timeout=10)
    try:
        base = f"http://127.0.0.1:{port}/admin/bmc"

        def call(method: str, url: str, body: Any = None) -> tuple[int, Any]:
            data = json.dumps(body).encode() if body is not None else None
            request = urllib.request.Request(
                url, data=data, method=method, headers={"Content-Type": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        status, body = call("POST", f"{base}/{NODE}/fault", {"type": "password-changed"})
        assert status == 201 and body["type"] == "password-changed"
        assert bmcs.get(NODE, "/redfish/v1/Systems").status == 401
        assert call("POST", f"{base}/no-such-node/fault", {"type": "host-never-returns"})[0] == 404
        assert call("POST", f"{base}/{NODE}/fault", {"type": "meteor-strike"})[0] == 400
        status, listing = call("GET", base)
        assert status == 200 and listing[NODE]["firmware"]["NIC.Slot.1-1-1"] == "28.39.1002"
        assert call("DELETE", f"{base}/{NODE}/fault")[0] == 200
        assert bmcs.get(NODE, "/redfish/v1/Systems").status == 200
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), bmcs.loop).result(timeout=10)


def test_admin_view_counts_requests_and_update_requests(bmcs: BmcHarness) -> None:
    """A test can assert that a client uploaded nothing: updateRequests counts every update post, refused or not."""
    before = bmcs.fleet.describe()[NODE]
    assert bmcs.get(NODE, INVENTORY).status == 200
    assert bmcs.post(NODE, SIMPLE_UPDATE, {}).status == 400  # refused (no ImageURI), still an update request
    push_update(bmcs, "ConnectX-7", "28.41.1000")
    after = bmcs.fleet.describe()[NODE]
    assert after["requests"] - before["requests"] == 3
    assert after["updateRequests"] - before["updateRequests"] == 2
    assert bmcs.fleet.describe()[OTHER]["updateRequests"] == 0
    # writeRequests: what may change the BMC, by method and path (a GET is none; logging in is none either).
    written = {key: count - before["writeRequests"].get(key, 0) for key, count in after["writeRequests"].items()}
    assert written == {f"POST {SIMPLE_UPDATE}": 1, f"POST {MULTIPART}": 1}
    assert bmcs.fleet.describe()[OTHER]["writeRequests"] == {}
