"""The iDRAC adapter's pure parts: member ids, inventory items from real iDRAC payloads, Dell job states."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import ComponentSpec, plan_flash
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish import (
    PROGRESS_COMPLETED,
    PROGRESS_FAILED,
    PROGRESS_REBOOT_PENDING,
    PROGRESS_RUNNING,
    PROGRESS_SCHEDULED,
    ServiceMap,
    task_progress,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish_idrac import (
    IdracAdapter,
    inventory_item,
    is_idrac,
    job_progress,
    parse_member_id,
)

SAMPLES = pathlib.Path(__file__).resolve().parents[5] / "shared" / "reference" / "samples" / "redfish"


def sample(name: str) -> dict:
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"reference sample {name} is not available")
    return json.loads(path.read_text())


def test_member_ids_of_installed_previous_and_current_images() -> None:
    assert parse_member_id("Installed-0-28.39.10.02__NIC.Slot.1-1-1") == {
        "kind": "Installed",
        "component_id": "0",
        "version": "28.39.10.02",
        "fqdd": "NIC.Slot.1-1-1",
    }
    assert parse_member_id("Previous-25227-3.36.36.36__iDRAC.Embedded.1-1")["kind"] == "Previous"
    assert parse_member_id("Installed-104893-51.16.0-5150__RAID.Slot.6-1")["version"] == "51.16.0-5150"
    assert parse_member_id("Installed-106441-ST33__Disk.Bay.0:Enclosure.Internal.0-1:RAID.Slot.6-1")["fqdd"] == (
        "Disk.Bay.0:Enclosure.Internal.0-1:RAID.Slot.6-1"
    )
    assert parse_member_id("Bios")["kind"] == ""


def test_blank_version_in_the_id_as_idrac9_4_40_printed_it() -> None:
    """dell/iDRAC-Redfish-Scripting#80: 'Installed-0-        __NIC.Slot.1-1'; Version still tells the truth."""
    assert parse_member_id("Installed-0-        __NIC.Slot.1-1") == {
        "kind": "Installed",
        "component_id": "0",
        "version": "",
        "fqdd": "NIC.Slot.1-1",
    }
    item = inventory_item({"Id": "Installed-0-        __NIC.Slot.1-1", "Name": "Intel X520", "Version": "19.5.12"})
    assert (item.version, item.fqdd, item.kind) == ("19.5.12", "NIC.Slot.1-1", "Installed")


def test_inventory_item_from_a_real_connectx6_member() -> None:
    item = inventory_item(sample("dell-libredfish-mockup-member-installed-infiniband-slot-7-1-cx6-20.31.10.14.json"))
    assert item.kind == "Installed" and item.fqdd == "InfiniBand.Slot.7-1"
    assert item.version == "20.31.10.14" and item.mellanox
    assert item.hardware_id == "15B3:101B:15B3:0009"  # what a Dell update package is matched against
    previous = inventory_item(sample("dell-r740-idrac9-member-previous-fc-slot-1-1.json"))
    assert previous.kind == "Previous" and previous.device == "FC.Slot.1-1" and not previous.mellanox


def test_collection_with_current_installed_and_previous_members() -> None:
    """R740 iDRAC9 7.00: Current-/Installed-/Previous- triplets; only Installed- counts as what runs."""
    collection = sample("dell-r740-idrac9-7.00.00.184-firmwareinventory-collection.json")
    members = [{"Id": m["@odata.id"].rsplit("/", 1)[1], "@odata.id": m["@odata.id"]} for m in collection["Members"]]
    items = IdracAdapter().inventory_items(members)
    kinds = {item.kind for item in items}
    assert kinds >= {"Current", "Installed", "Previous"}
    bios = [item for item in items if item.fqdd == "BIOS.Setup.1-1"]
    assert {(item.kind, item.version) for item in bios} >= {("Installed", "2.26.1"), ("Previous", "2.3.10")}


def test_dell_job_states() -> None:
    assert job_progress({"JobState": "Scheduled", "Message": "Task successfully scheduled.", "MessageId": "JCP001"}) \
        .state == PROGRESS_SCHEDULED  # fmt: skip
    assert job_progress({"JobState": "Downloading"}).state == PROGRESS_RUNNING
    assert job_progress({"JobState": "RebootPending"}).state == PROGRESS_RUNNING
    assert job_progress({"JobState": "Completed", "PercentComplete": 100}).state == PROGRESS_COMPLETED
    failed = job_progress({"JobState": "Failed", "Message": "Unable to verify Update Package signature.",
                           "MessageId": "RED007"})  # fmt: skip
    assert (failed.state, failed.message_id) == (PROGRESS_FAILED, "RED007")


def test_completed_with_errors_is_a_failure() -> None:
    """A real iDRAC job (multi-DPU mockup) ending CompletedWithErrors: the devices may be half done."""
    progress = job_progress(sample("dell-multi-dpu-mockup-delljob-JID_229700026199.json"))
    assert progress.state == PROGRESS_FAILED and progress.detail == "CompletedWithErrors"
    assert (progress.message, progress.message_id, progress.percent) == ("Job completed with errors.", "PR31", 100)


def test_idrac_is_recognised_from_the_service_root() -> None:
    assert is_idrac(ServiceMap(vendor="Dell", product="Integrated Dell Remote Access Controller"))
    assert not is_idrac(ServiceMap(vendor="", product="Redvirt Service"))
    assert (
        IdracAdapter().update_targets(["/redfish/v1/UpdateService/FirmwareInventory/Installed-0-x__NIC.Slot.1-1"]) == []
    )
    assert not IdracAdapter().resets_host("iDRAC.Embedded.1-1") and IdracAdapter().resets_host("NIC.Slot.1-1-1")


def _nic(slot: int, pci: str, version: str = "28.39.10.02") -> dict:
    vendor, device, subvendor, subdevice = pci.split(":")
    fqdd = f"NIC.Slot.{slot}-1-1"
    return {
        "@odata.id": f"/redfish/v1/UpdateService/FirmwareInventory/Installed-0-{version}__{fqdd}",
        "Id": f"Installed-0-{version}__{fqdd}",
        "Name": f"Mellanox Network Adapter - B8:3F:D2:90:97:C{slot}",
        "Version": version,
        "Oem": {"Dell": {"DellSoftwareInventory": {"FQDD": fqdd, "VendorID": vendor, "DeviceID": device,
                                                   "SubVendorID": subvendor, "SubDeviceID": subdevice}}},
    }  # fmt: skip


def test_a_pattern_that_picks_some_cards_of_one_kind_is_refused() -> None:
    # An iDRAC applies a package to every device it fits (Targets: []): flashing slot 1 flashes slot 2 too.
    cx7, cx6 = "15b3:1021:15b3:0041", "15b3:101b:15b3:0009"
    inventory = [
        inventory_item(_nic(1, cx7)),
        inventory_item(_nic(2, cx7)),
        inventory_item(_nic(3, cx6, "20.31.10.14")),
    ]
    assert inventory[0].hardware_id == "15B3:1021:15B3:0041"
    adapter = IdracAdapter()
    subset = plan_flash([ComponentSpec(match="NIC.Slot.1-*", version="28.42.1000")], inventory)
    with pytest.raises(InvalidInputError, match=r"NIC\.Slot\.2-1-1 is the same hardware"):
        adapter.check_plan(subset, inventory)
    # Both cards of that kind: fine, even though the other kind (slot 3) shares the generic name.
    both = plan_flash([ComponentSpec(match="NIC.Slot.[12]-*", version="28.42.1000")], inventory)
    adapter.check_plan(both, inventory)


def test_job_completed_server_reboot_pending_is_no_success() -> None:
    """dell/iDRAC-Redfish-Scripting issue 266: a NIC job flashed but waiting for a power cycle to activate."""
    said = "Job completed, server reboot pending."
    for state in ("Completed", "RebootPending", "Running"):
        progress = job_progress({"JobState": state, "Message": said, "PercentComplete": 100})
        assert progress.state == PROGRESS_REBOOT_PENDING and progress.reboot_pending and not progress.finished
    # The Lifecycle Controller's own reboot job says "Reboot is pending." while it runs: not this case.
    assert job_progress({"JobState": "RebootPending", "Message": "Reboot is pending."}).state == PROGRESS_RUNNING
    assert job_progress({"JobState": "Failed", "Message": said}).state == PROGRESS_FAILED


def test_task_naming_a_power_cycle_after_server_reboot_pending() -> None:
    task = {
        "TaskState": "Running",
        "TaskStatus": "OK",
        "Messages": [
            {"Message": "Job completed, server reboot pending.", "MessageId": "IDRAC.2.8.RED032"},
            {"Message": "A component reset is required.", "MessageId": "Base.1.12.ResetRequired",
             "MessageArgs": ["/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset", "PowerCycle"]},
        ],
    }  # fmt: skip
    assert task_progress(task).state == PROGRESS_REBOOT_PENDING
    assert task_progress({**task, "TaskState": "Completed"}).state == PROGRESS_REBOOT_PENDING
    assert task_progress({**task, "TaskState": "Exception"}).state == PROGRESS_FAILED


class _JobList:
    """The one client call pending_update_jobs makes once the Jobs URI is known."""

    def __init__(self, jobs: list[dict]) -> None:
        self.jobs = jobs

    def members(self, uri: str) -> list[dict]:
        assert uri == "/redfish/v1/Managers/iDRAC.Embedded.1/Oem/Dell/Jobs"
        return self.jobs


def test_jobs_left_by_an_earlier_run_include_those_waiting_for_a_power_cycle() -> None:
    adapter = IdracAdapter()
    adapter._jobs_uri = "/redfish/v1/Managers/iDRAC.Embedded.1/Oem/Dell/Jobs"
    jobs = [
        {"Id": "JID_1", "Name": "Firmware Update: NIC", "JobType": "FirmwareUpdate", "JobState": "Scheduled"},
        {"Id": "JID_2", "Name": "Firmware Update: NIC", "JobType": "FirmwareUpdate", "JobState": "RebootPending",
         "Message": "Job completed, server reboot pending."},
        {"Id": "JID_3", "Name": "Firmware Update: BIOS", "JobType": "FirmwareUpdate", "JobState": "Completed",
         "Message": "Job completed successfully."},
        # The iDRAC's own reboot job is RebootPending while it runs: not a firmware job left behind.
        {"Id": "RID_4", "Name": "Reboot", "JobType": "RebootNoForce", "JobState": "RebootPending",
         "Message": "Reboot is pending."},
    ]  # fmt: skip
    pending = adapter.pending_update_jobs(_JobList(jobs))  # type: ignore[arg-type]
    assert [(job["id"], job["state"]) for job in pending] == [("JID_1", "Scheduled"), ("JID_2", "RebootPending")]
