"""The BMC's pure state machine: jobs, host resets, sessions, faults (no I/O, explicit time)."""

from __future__ import annotations

import pytest

from gpufleet_twin.redfish import resources as res
from gpufleet_twin.redfish.image import FirmwareImage
from gpufleet_twin.redfish.model import (
    SYSTEM_RESET_URI,
    Bmc,
    BmcRestarted,
    BmcTimings,
    HostPowerOff,
    HostReboot,
    JobFailurePlan,
    NicFirmwareApplied,
    NicSpec,
    RedfishError,
)
from gpufleet_twin.redfish.service import loopback_addresses, select_bmc_nodes

T0 = 1_700_000_000.0
TIMINGS = BmcTimings()
NICS = [NicSpec(f"mlx5_{i}", "MT4129", "28.39.1002") for i in range(4)] + [
    NicSpec("mlx5_4", "MT4125", "22.38.1002", "Ethernet"),
    NicSpec("mlx5_5", "MT4124", "20.41.1000"),  # a virtual function: the BMC does not see it
]


def new_bmc() -> Bmc:
    return Bmc("gpu-worker-07", nics=NICS, username="root", password="Gpuf1eet-Calvin", now=T0)


def staged(bmc: Bmc, component: str, version: str, *, at: float, apply_time: str | None = "OnReset") -> str:
    job = bmc.start_update(package_name=f"{component}.bin", apply_time=apply_time, targets=None, now=at)
    image = FirmwareImage(component=component, version=version, size=4096)
    bmc.package_arrived(job.job_id, image=image, error=None, now=at)
    bmc.advance(at + TIMINGS.transfer_seconds)
    return job.job_id


def installed(bmc: Bmc) -> set[str]:
    return {e.member_id for e in bmc.inventory()}


def test_inventory_ids_follow_dell_conventions() -> None:
    ids = installed(new_bmc())
    assert "Installed-0-28.39.10.02__NIC.Slot.1-1-1" in ids
    assert "Installed-0-22.38.10.02__NIC.Slot.5-1-1" in ids
    assert "Installed-159-2.3.5__BIOS.Setup.1-1" in ids
    assert "Installed-25227-7.10.30.00__iDRAC.Embedded.1-1" in ids
    assert "Previous-25227-7.00.60.00__iDRAC.Embedded.1-1" in ids
    assert not any("NIC.Slot.6" in i for i in ids)  # the VF


def test_nic_update_on_reset_is_scheduled_then_applied_in_post() -> None:
    bmc = new_bmc()
    job_id = staged(bmc, "ConnectX-7", "28.41.1000", at=T0)
    job = bmc.jobs[job_id]
    assert (job.state, job.message_id, job.percent) == ("Scheduled", "JCP001", 0)
    assert job.task_state() == ("Pending", "OK")
    task_messages = res.task(job, T0 + 21)["Messages"]
    assert task_messages[1]["MessageId"] == "Base.1.12.ResetRequired"
    assert task_messages[1]["MessageArgs"] == [SYSTEM_RESET_URI, "GracefulRestart"]
    assert bmc.drain_effects() == []  # nothing happens to the host before a reset

    reset_at = T0 + 100
    bmc.reset_system("GracefulRestart", reset_at)
    (reboot,) = bmc.drain_effects()
    assert isinstance(reboot, HostReboot)
    expected = TIMINGS.host_shutdown_seconds + TIMINGS.nic_apply_seconds + TIMINGS.host_boot_seconds
    assert reboot.duration == pytest.approx(expected)
    assert "Installed-0-28.39.10.02__NIC.Slot.1-1-1" in installed(bmc)  # not before the update ran

    bmc.advance(reset_at + TIMINGS.host_shutdown_seconds + TIMINGS.nic_apply_seconds / 2)
    assert job.state == "Running"
    assert 40 <= job.percent_at(reset_at + TIMINGS.host_shutdown_seconds + TIMINGS.nic_apply_seconds / 2) <= 60
    reboot_jobs = [j for j in bmc.jobs.values() if j.job_type == "RebootNoForce"]
    assert [j.state for j in reboot_jobs] == ["RebootCompleted"]

    bmc.advance(reset_at + expected)
    assert (job.state, job.message, job.percent) == ("Completed", "Job completed successfully.", 100)
    ids = installed(bmc)
    assert "Installed-0-28.41.10.00__NIC.Slot.1-1-1" in ids
    assert "Previous-0-28.39.10.02__NIC.Slot.1-1-1" in ids
    assert "Installed-0-22.38.10.02__NIC.Slot.5-1-1" in ids  # another firmware line: untouched
    assert bmc.drain_effects() == [
        NicFirmwareApplied(host_devices=("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"), version="28.41.1000")
    ]


def test_immediate_host_update_makes_the_bmc_reboot_the_host() -> None:
    bmc = new_bmc()
    staged(bmc, "BIOS", "2.4.1", at=T0, apply_time="Immediate")
    effects = bmc.drain_effects()
    assert len(effects) == 1 and isinstance(effects[0], HostReboot)
    assert effects[0].duration == pytest.approx(
        TIMINGS.host_shutdown_seconds + TIMINGS.bios_apply_seconds + TIMINGS.host_boot_seconds
    )


def test_targets_limit_an_update_to_the_named_devices() -> None:
    bmc = new_bmc()
    target = bmc.slot_by_target("/redfish/v1/UpdateService/FirmwareInventory/Installed-0-28.39.10.02__NIC.Slot.2-1-1")
    job = bmc.start_update(package_name="cx7.bin", apply_time="OnReset", targets=(target.fqdd,), now=T0)
    bmc.package_arrived(job.job_id, image=FirmwareImage("ConnectX-7", "28.41.1000", 1), error=None, now=T0)
    bmc.advance(T0 + 30)
    assert job.applied_to == ("NIC.Slot.2-1-1",)
    with pytest.raises(RedfishError) as missing:
        bmc.slot_by_target("/redfish/v1/Chassis/Enclosure.Internal.0-1")
    assert missing.value.status == 400


def test_idrac_update_restarts_the_bmc_and_ends_sessions() -> None:
    bmc = new_bmc()
    bmc.login("root", "Gpuf1eet-Calvin", T0)
    job_id = staged(bmc, "iDRAC", "7.20.10.50", at=T0, apply_time="OnReset")  # iDRAC ignores OnReset
    job = bmc.jobs[job_id]
    assert job.state == "Running"
    flashed = T0 + TIMINGS.transfer_seconds + TIMINGS.idrac_apply_seconds
    bmc.advance(flashed)
    assert bmc.availability(flashed) == "refuse"
    assert bmc.sessions == {}
    assert bmc.drain_effects() == [BmcRestarted()]
    assert bmc.visible_tasks(flashed) == []  # the task list does not survive the restart
    assert job.state == "Running" and bmc.idrac_version == "7.10.30.00"
    back = flashed + TIMINGS.bmc_restart_seconds
    bmc.advance(back)
    assert bmc.availability(back) == "up"
    assert (job.state, bmc.idrac_version) == ("Completed", "7.20.10.50")
    assert "Previous-25227-7.10.30.00__iDRAC.Embedded.1-1" in installed(bmc)


def test_unreadable_package_fails_like_an_unsigned_dup() -> None:
    bmc = new_bmc()
    job = bmc.start_update(package_name="junk.exe", apply_time=None, targets=None, now=T0)
    bmc.package_arrived(job.job_id, image=None, error=("RED007", "Unable to verify Update Package signature."), now=T0)
    bmc.advance(T0 + 60)
    assert (job.state, job.message_id) == ("Failed", "RED007")
    assert job.task_state() == ("Exception", "Critical")


def test_package_for_absent_hardware_is_not_applicable() -> None:
    bmc = new_bmc()
    job_id = staged(bmc, "ConnectX-6", "20.42.1000", at=T0)  # only a ConnectX-6 Dx (22.x) is present
    assert bmc.jobs[job_id].state == "Failed"
    assert "not applicable" in bmc.jobs[job_id].message


def test_same_version_completes_without_a_reboot() -> None:
    bmc = new_bmc()
    job_id = staged(bmc, "ConnectX-7", "28.39.1002", at=T0)
    assert bmc.jobs[job_id].state == "Completed"
    assert bmc.drain_effects() == []


def test_second_job_for_a_pending_component_fails() -> None:
    bmc = new_bmc()
    first = staged(bmc, "ConnectX-7", "28.41.1000", at=T0)
    second = staged(bmc, "ConnectX-7", "28.42.1000", at=T0 + 1)
    assert bmc.jobs[first].state == "Scheduled"
    assert bmc.jobs[second].state == "Failed"


def test_rollbacks_of_several_devices_of_one_model_are_independent_jobs() -> None:
    bmc = new_bmc()
    staged(bmc, "ConnectX-7", "28.41.1000", at=T0)
    bmc.reset_system("PowerCycle", T0 + 30)
    bmc.advance(T0 + 2000)
    jobs = []
    for slot in ("NIC.Slot.1-1-1", "NIC.Slot.2-1-1"):
        entry = bmc.inventory_entry(f"Previous-0-28.39.10.02__{slot}")
        job = bmc.start_update(
            package_name=entry.member_id, apply_time=None, targets=(slot,), now=T0 + 2000, rollback=True
        )
        bmc.package_arrived(job.job_id, image=FirmwareImage("ConnectX-7", "28.39.1002", 0), error=None, now=T0 + 2000)
        jobs.append(job)
    bmc.advance(T0 + 2030)
    assert [job.state for job in jobs] == ["Scheduled", "Scheduled"]
    # A third job for a device that already waits is refused.
    entry = bmc.inventory_entry("Previous-0-28.39.10.02__NIC.Slot.1-1-1")
    again = bmc.start_update(
        package_name=entry.member_id, apply_time=None, targets=("NIC.Slot.1-1-1",), now=T0 + 2040, rollback=True
    )
    bmc.package_arrived(again.job_id, image=FirmwareImage("ConnectX-7", "28.39.1002", 0), error=None, now=T0 + 2040)
    bmc.advance(T0 + 2080)
    assert (again.state, again.message_id) == ("Failed", "SUP0520")
    bmc.reset_system("GracefulRestart", T0 + 2100)
    bmc.advance(T0 + 5000)
    assert {"Installed-0-28.39.10.02__NIC.Slot.1-1-1", "Installed-0-28.39.10.02__NIC.Slot.2-1-1"} <= installed(bmc)
    assert "Installed-0-28.41.10.00__NIC.Slot.3-1-1" in installed(bmc)


def test_failure_plan_fails_the_apply_with_its_message_and_keeps_the_firmware() -> None:
    bmc = new_bmc()
    bmc.add_failure_plan(JobFailurePlan(message="Flash write failed on NIC.Slot.1-1-1.", component="ConnectX-7"))
    job_id = staged(bmc, "ConnectX-7", "28.41.1000", at=T0)
    bmc.reset_system("ForceRestart", T0 + 50)
    bmc.advance(T0 + 1000)
    job = bmc.jobs[job_id]
    assert (job.state, job.message) == ("Failed", "Flash write failed on NIC.Slot.1-1-1.")
    assert "Installed-0-28.39.10.02__NIC.Slot.1-1-1" in installed(bmc)
    assert not any(isinstance(e, NicFirmwareApplied) for e in bmc.drain_effects())
    assert bmc.failure_plans == []  # used up


def test_rollback_from_previous_reflashes_one_device() -> None:
    bmc = new_bmc()
    staged(bmc, "ConnectX-7", "28.41.1000", at=T0)
    bmc.reset_system("PowerCycle", T0 + 30)
    bmc.advance(T0 + 2000)
    entry = bmc.inventory_entry("Previous-0-28.39.10.02__NIC.Slot.1-1-1")
    job = bmc.start_update(
        package_name=entry.member_id, apply_time=None, targets=(entry.slot.fqdd,), now=T0 + 2000, rollback=True
    )
    image = FirmwareImage(entry.slot.family, entry.version, 0)
    bmc.package_arrived(job.job_id, image=image, error=None, now=T0 + 2000, local=True)
    bmc.advance(T0 + 2010)
    assert (job.job_type, job.state) == ("FirmwareRollback", "Scheduled")
    bmc.reset_system("GracefulRestart", T0 + 2020)
    bmc.advance(T0 + 4000)
    ids = installed(bmc)
    assert "Installed-0-28.39.10.02__NIC.Slot.1-1-1" in ids
    assert "Previous-0-28.41.10.00__NIC.Slot.1-1-1" in ids
    assert "Installed-0-28.41.10.00__NIC.Slot.2-1-1" in ids


def test_power_off_and_on() -> None:
    bmc = new_bmc()
    bmc.reset_system("ForceOff", T0)
    assert bmc.power_state == "Off"
    assert bmc.drain_effects() == [HostPowerOff()]
    bmc.reset_system("GracefulShutdown", T0 + 1)  # already off: nothing to do
    assert bmc.drain_effects() == []
    bmc.reset_system("On", T0 + 10)
    (boot,) = bmc.drain_effects()
    assert isinstance(boot, HostReboot) and boot.duration == TIMINGS.host_boot_seconds
    with pytest.raises(RedfishError):
        bmc.reset_system("Hibernate", T0 + 20)


def test_sessions_expire_after_the_idle_timeout() -> None:
    bmc = new_bmc()
    session = bmc.login("root", "Gpuf1eet-Calvin", T0)
    assert bmc.session_for_token(session.token, T0 + 100) is session
    assert bmc.session_for_token(session.token, T0 + 100 + TIMINGS.session_timeout_seconds + 1) is None
    with pytest.raises(RedfishError) as wrong:
        bmc.login("root", "calvin", T0)
    assert wrong.value.status == 401


def test_changed_password_refuses_the_old_one() -> None:
    bmc = new_bmc()
    bmc.change_password("root", "Rotated-Secret-1")
    assert not bmc.check_password("root", "Gpuf1eet-Calvin")
    assert bmc.check_password("root", "Rotated-Secret-1")


def test_finished_tasks_disappear_after_the_retention_time_jobs_stay() -> None:
    bmc = new_bmc()
    job_id = staged(bmc, "ConnectX-7", "28.39.1002", at=T0)  # completes at once
    finished = bmc.jobs[job_id].finished_at
    assert finished is not None
    assert bmc.visible_task(job_id, finished + 10).job_id == job_id
    with pytest.raises(RedfishError):
        bmc.visible_task(job_id, finished + TIMINGS.task_retention_seconds + 1)
    assert job_id in bmc.jobs


def test_quirk_blank_nic_version_in_ids() -> None:
    bmc = new_bmc()
    bmc.quirks.add("blank-nic-version-in-id")
    assert "Installed-0-        __NIC.Slot.1-1-1" in installed(bmc)


def test_unresponsive_fault_ends_at_its_deadline() -> None:
    bmc = new_bmc()
    bmc.set_unresponsive("hang", until=T0 + 60)
    assert bmc.availability(T0 + 1) == "hang"
    assert bmc.availability(T0 + 61) == "up"


def test_node_selection_caps_at_the_limit_in_name_order() -> None:
    names = [f"gpu-worker-{i:03d}" for i in range(100, 0, -1)]
    chosen = select_bmc_nodes(names, limit=64)
    assert chosen == sorted(names)[:64]
    assert select_bmc_nodes(["b", "a"], limit=64) == ["a", "b"]


def test_loopback_addresses_skip_network_and_broadcast_octets() -> None:
    addresses = loopback_addresses(256, base="127.1.0.1")
    assert addresses[0] == "127.1.0.1"
    assert "127.1.0.255" not in addresses and "127.1.1.0" not in addresses
    assert addresses[254] == "127.1.1.1"
    assert loopback_addresses(2, base=None) == ["127.0.0.1", "127.0.0.1"]
    with pytest.raises(ValueError):
        loopback_addresses(1, base="10.0.0.1")


def test_manager_reset_restarts_the_bmc_only() -> None:
    bmc = new_bmc()
    bmc.login("root", "Gpuf1eet-Calvin", T0)
    bmc.reset_bmc("GracefulRestart", T0)
    assert bmc.availability(T0 + 1) == "refuse"
    assert bmc.sessions == {}
    assert bmc.drain_effects() == [BmcRestarted()]  # the host is not touched
    bmc.advance(T0 + TIMINGS.bmc_restart_seconds)
    assert bmc.availability(T0 + TIMINGS.bmc_restart_seconds) == "up"
    with pytest.raises(RedfishError):
        bmc.reset_bmc("ForceRestart", T0)


def test_nic_needing_a_power_cycle_stays_reboot_pending_until_one() -> None:
    bmc = new_bmc()
    bmc.quirks.add("nic-needs-power-cycle")
    job_id = staged(bmc, "ConnectX-7", "28.41.1000", at=T0)
    job = bmc.jobs[job_id]
    bmc.reset_system("GracefulRestart", T0 + 100)
    done_at = T0 + 100 + TIMINGS.host_shutdown_seconds + TIMINGS.nic_apply_seconds + 1
    bmc.advance(done_at)
    assert (job.state, job.message, job.percent) == ("RebootPending", "Job completed, server reboot pending.", 100)
    assert job.task_state() == ("Running", "OK") and not job.finished
    task_messages = res.task(job, done_at)["Messages"]
    assert task_messages[1]["MessageArgs"] == [SYSTEM_RESET_URI, "PowerCycle"]
    assert "Installed-0-28.39.10.02__NIC.Slot.1-1-1" in installed(bmc)  # the card still runs the old firmware
    assert not any(isinstance(e, NicFirmwareApplied) for e in bmc.drain_effects())

    bmc.reset_system("ForceRestart", done_at + 400)  # a warm reset again: still pending
    bmc.advance(done_at + 800)
    assert job.state == "RebootPending"

    bmc.reset_system("ForceOff", done_at + 900)
    bmc.reset_system("On", done_at + 910)
    assert (job.state, job.message_id) == ("Completed", "RED001")
    assert "Installed-0-28.41.10.00__NIC.Slot.1-1-1" in installed(bmc)
    assert any(isinstance(e, NicFirmwareApplied) for e in bmc.drain_effects())
    assert bmc.resets_received == ["GracefulRestart", "ForceRestart", "ForceOff", "On"]
