"""What the flash does with a job that ends "Job completed, server reboot pending" (dell/iDRAC-Redfish-Scripting
issue 266): the decisions, against a stand-in client that records what would be sent (no I/O)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, RedfishError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_flash import (
    BmcFlasher,
    FlashOptions,
    JobRecord,
    reboot_pending_message,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import ComponentSpec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish import (
    PROGRESS_COMPLETED,
    PROGRESS_REBOOT_PENDING,
    ServiceMap,
    UpdateProgress,
)

ADDRESS = "https://bmc.example:443"
PENDING = UpdateProgress(
    state=PROGRESS_REBOOT_PENDING, detail="RebootPending", message="Job completed, server reboot pending."
)
DONE = UpdateProgress(state=PROGRESS_COMPLETED, detail="Completed", message="Job completed successfully.")


class StandIn:
    """The few client calls the reboot-pending path makes; resets are recorded, power follows them."""

    def __init__(self, *, offered: list[str]) -> None:
        self.address = ADDRESS
        self.offered = offered
        self.resets: list[str] = []
        self.power = "On"
        self.now = 0.0

    def services(self) -> ServiceMap:
        return ServiceMap(vendor="Dell")

    def clock(self) -> float:
        return self.now

    def pause(self, seconds: float) -> None:
        self.now += seconds

    def system_uri(self) -> str:
        return "/redfish/v1/Systems/System.Embedded.1"

    def reset_action(self, reset_type: str) -> None:
        if reset_type not in self.offered:
            raise InvalidInputError(f"BMC {ADDRESS}: reset type {reset_type} is not offered")

    def reset_system(self, reset_type: str) -> dict[str, Any]:
        self.reset_action(reset_type)
        self.resets.append(reset_type)
        self.power = "Off" if reset_type == "ForceOff" else "On"
        return {"reset_type": reset_type}

    def host_state(self, system: str) -> dict[str, str]:
        return {"power_state": self.power, "boot_progress": "OSRunning"}

    def follow(self, observe: Callable[[], UpdateProgress], *, done: Callable[[UpdateProgress], bool], **_: Any):
        for _attempt in range(20):
            seen = observe()
            if done(seen):
                return seen
        raise RedfishError("never done")


def flasher(client: StandIn, *, allowed: bool) -> BmcFlasher:
    spec = ComponentSpec(match="NIC.*", version="28.42.1000", image_path="x", sha256="0" * 64)
    options = FlashOptions(components=[spec], power_cycle_on_reboot_pending=allowed, wait_sleep=1.0)
    made = BmcFlasher(client, options)  # type: ignore[arg-type]

    def after_cycle() -> UpdateProgress:
        return DONE if "PowerCycle" in client.resets or "On" in client.resets else PENDING

    made.jobs.append(
        JobRecord(component="firmware_cx7", job_id="JID_000000000042", observe=after_cycle, progress=PENDING)
    )
    return made


def test_the_message_names_the_bmc_the_jobs_and_both_ways_to_complete_them() -> None:
    text = reboot_pending_message(ADDRESS, [{"job_id": "JID_1", "component": "firmware_cx7",
                                             "message": "Job completed, server reboot pending."}])  # fmt: skip
    assert ADDRESS in text and "JID_1" in text and "firmware_cx7" in text and "server reboot pending" in text
    assert "power_cycle_on_reboot_pending=true" in text and "nic_firmware_power_cycle_on_reboot_pending: true" in text
    assert "ResetType PowerCycle" in text


def test_not_allowed_stops_without_any_reset() -> None:
    client = StandIn(offered=["PowerCycle", "ForceOff", "On"])
    with pytest.raises(RedfishError, match="JID_000000000042"):
        flasher(client, allowed=False).settle_reboot_pending()
    assert client.resets == []


def test_allowed_power_cycles_and_follows_the_jobs_to_their_end() -> None:
    client = StandIn(offered=["PowerCycle", "ForceOff", "On"])
    made = flasher(client, allowed=True)
    detail = made.settle_reboot_pending()
    assert client.resets == ["PowerCycle"]
    assert detail["reboot_pending_jobs"] == ["JID_000000000042"]
    assert made.jobs[0].progress == DONE and made.reboot_pending() == []


def test_without_power_cycle_offered_it_is_force_off_then_on() -> None:
    client = StandIn(offered=["ForceOff", "On", "GracefulRestart"])
    detail = flasher(client, allowed=True).settle_reboot_pending()
    assert client.resets == ["ForceOff", "On"] and detail["reset"]["reset_type"] == "ForceOff+On"


def test_nothing_pending_is_nothing_to_do() -> None:
    client = StandIn(offered=["PowerCycle"])
    made = flasher(client, allowed=False)
    made.jobs[0].progress = DONE
    assert made.settle_reboot_pending() == {} and client.resets == []


def test_reboot_pending_is_no_end_once_the_host_was_power_cycled() -> None:
    client = StandIn(offered=["PowerCycle"])
    made = flasher(client, allowed=True)
    made.jobs[0].observe = lambda: PENDING
    with pytest.raises(RedfishError, match="never done"):
        made.settle_reboot_pending()


def test_a_job_left_waiting_for_a_power_cycle_is_adopted_as_such() -> None:
    client = StandIn(offered=["PowerCycle"])
    made = flasher(client, allowed=True)
    made.jobs.clear()
    made.adapter.job_observer = lambda _client, job_id: lambda: DONE  # type: ignore[method-assign]
    left = [{"id": "JID_7", "name": "Firmware Update: NIC", "state": "RebootPending", "message": PENDING.message},
            {"id": "JID_8", "name": "Firmware Update: BIOS", "state": "Scheduled", "message": ""}]  # fmt: skip
    adopted = made.adopt_pending(left)
    assert [job.job_id for job in made.reboot_pending()] == ["JID_7"]
    assert adopted[1].progress is not None and not adopted[1].progress.reboot_pending
