"""What to flash: component matching, firmware version semantics, checksums, the plan, verification."""

from __future__ import annotations

import hashlib

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import (
    ACTION_FLASH,
    ACTION_NONE,
    ACTION_ROLLBACK,
    ComponentSpec,
    InventoryItem,
    check_sha256,
    compare_firmware,
    matches,
    normalise_sha256,
    plan_flash,
    same_firmware,
    sha256_of_file,
    verify_versions,
)

CX7 = "Nvidia ConnectX-7 Single Port NDR OSFP Adapter - B8:3F:D2:90:A8:5B"
CX6DX = "Mellanox ConnectX-6 Dx Dual Port 100 GbE QSFP56 Network Adapter"


def nic(slot: int, version: str, *, kind: str = "Installed", name: str = CX7) -> InventoryItem:
    member_id = f"{kind}-0-{version}__NIC.Slot.{slot}-1-1"
    return InventoryItem(
        member_id=member_id,
        uri=f"/redfish/v1/UpdateService/FirmwareInventory/{member_id}",
        name=name,
        version=version,
        fqdd=f"NIC.Slot.{slot}-1-1",
        kind=kind,
    )


INVENTORY = [
    nic(1, "28.39.10.02"),
    nic(2, "28.39.10.02"),
    nic(9, "22.38.10.02", name=CX6DX),
    InventoryItem("Installed-159-2.3.5__BIOS.Setup.1-1", "/bios", "BIOS", "2.3.5", "BIOS.Setup.1-1"),
    InventoryItem("Previous-159-2.2.8__BIOS.Setup.1-1", "/bios-prev", "BIOS", "2.2.8", "BIOS.Setup.1-1", "Previous"),
    InventoryItem(
        "Installed-25227-7.10.30.00__iDRAC.Embedded.1-1",
        "/idrac",
        "Integrated Dell Remote Access Controller",
        "7.10.30.00",
        "iDRAC.Embedded.1-1",
    ),
]


def test_match_by_name_id_or_fqdd_substring_or_glob() -> None:
    cx7 = INVENTORY[0]
    assert matches("ConnectX-7", cx7) and matches("connectx-7", cx7)
    assert matches("NIC.Slot.1-1-1", cx7) and matches("nic.slot.*", cx7)
    assert matches("Installed-0-28.39*", cx7)
    assert not matches("ConnectX-6", cx7) and not matches("", cx7)
    assert matches("iDRAC", INVENTORY[5])  # by FQDD: the Name does not say iDRAC
    # A substring is loose (slot 1 is inside slot 10); a glob says exactly which slot.
    assert matches("NIC.Slot.1", nic(10, "28.39.10.02"))
    assert not matches("NIC.Slot.1-*", nic(10, "28.39.10.02")) and matches("NIC.Slot.1-*", cx7)


def test_nic_firmware_compares_by_value_across_dell_and_native_spellings() -> None:
    assert same_firmware("28.39.10.02", "28.39.1002", mellanox=True)
    assert compare_firmware("28.39.10.02", "28.42.1000", mellanox=True) == -1
    assert compare_firmware("28.42.10.00", "28.39.1002", mellanox=True) == 1
    # Without the Mellanox grammar the two spellings are different strings with different fields.
    assert not same_firmware("28.39.10.02", "28.39.1002", mellanox=False)


def test_other_firmware_compares_field_by_field_numerically() -> None:
    assert compare_firmware("2.3.10", "2.26.1", mellanox=False) == -1  # R740 Previous vs Installed BIOS
    assert same_firmware("7.10.30.00", "7.10.30.0", mellanox=False)
    assert same_firmware("7.10.30.00", "7.10.30", mellanox=False)  # missing trailing fields are zeros
    assert compare_firmware("7.10.30", "7.10.30.01", mellanox=False) == -1
    assert compare_firmware("7.10.30.00", "7.10.50.00", mellanox=False) == -1
    assert compare_firmware("51.16.0-5150", "50.5.0-2819", mellanox=False) == 1
    assert compare_firmware("", "1.0", mellanox=False) is None


def test_checksums() -> None:
    digest = hashlib.sha256(b"image").hexdigest()
    assert normalise_sha256("SHA256:" + digest.upper()) == digest
    check_sha256(actual=digest, expected=digest, image="cx7.bin")
    with pytest.raises(InvalidInputError, match=r"Checksum mismatch for cx7\.bin"):
        check_sha256(actual=digest, expected="0" * 64, image="cx7.bin")
    with pytest.raises(InvalidInputError, match="64 hexadecimal digits"):
        normalise_sha256("abc")


def test_sha256_of_file(tmp_path) -> None:
    image = tmp_path / "fw.bin"
    image.write_bytes(b"x" * 3_000_000)
    assert sha256_of_file(str(image), chunk_size=1 << 20) == hashlib.sha256(b"x" * 3_000_000).hexdigest()
    with pytest.raises(InvalidInputError, match="Cannot read the image"):
        sha256_of_file(str(tmp_path / "missing.bin"))


def test_plan_flashes_only_what_differs() -> None:
    plan = plan_flash(
        [
            ComponentSpec(match="ConnectX-7", version="28.42.1000", name="firmware_cx7"),
            ComponentSpec(match="BIOS", version="2.3.5"),
        ],
        INVENTORY,
    )
    cx7, bios = plan.components
    assert cx7.action == ACTION_FLASH and [d.device for d in cx7.to_change] == ["NIC.Slot.1-1-1", "NIC.Slot.2-1-1"]
    assert cx7.reason == "2 of 2 device(s): 28.39.10.02 -> 28.42.1000"
    assert bios.action == ACTION_NONE and [c.spec.label for c in plan.changes] == ["firmware_cx7"]
    assert plan.versions()["NIC.Slot.1-1-1"] == "28.39.10.02"
    assert (
        plan.versions_after()["NIC.Slot.1-1-1"] == "28.42.1000" and plan.versions_after()["BIOS.Setup.1-1"] == "2.3.5"
    )


def test_plan_at_target_in_the_other_spelling_is_nothing_to_do() -> None:
    plan = plan_flash([ComponentSpec(match="ConnectX-7", version="28.39.1002")], INVENTORY)
    assert plan.changes == () and plan.components[0].reason == "all 2 device(s) run 28.39.1002"


def test_plan_refuses_a_downgrade_unless_allowed() -> None:
    with pytest.raises(InvalidInputError, match="refusing to downgrade"):
        plan_flash([ComponentSpec(match="BIOS", version="2.2.8")], INVENTORY)
    plan = plan_flash([ComponentSpec(match="BIOS", version="2.2.8")], INVENTORY, allow_downgrade=True)
    assert plan.components[0].action == ACTION_FLASH


def test_plan_names_what_the_bmc_has_when_nothing_matches() -> None:
    with pytest.raises(
        InvalidInputError, match=r"No installed firmware matches 'BlueField-3'.*BIOS \(BIOS.Setup.1-1\)"
    ):
        plan_flash([ComponentSpec(match="BlueField-3", version="32.41.1000")], INVENTORY)


def test_two_components_of_one_name_are_refused() -> None:
    # Images are kept by name: the second would upload the first one's image.
    with pytest.raises(InvalidInputError, match="named more than once: nic"):
        plan_flash(
            [
                ComponentSpec(match="NIC.Slot.3-*", version="28.42.1000", name="nic"),
                ComponentSpec(match="BIOS", version="2.3.10", name="nic"),
            ],
            INVENTORY,
        )


def test_one_device_claimed_by_two_components_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="matched by both"):
        plan_flash(
            [
                ComponentSpec(match="NIC.Slot.*", version="28.42.1000"),
                ComponentSpec(match="ConnectX", version="28.42.1000"),
            ],
            INVENTORY,
        )


def test_rollback_uses_the_previous_image_and_checks_its_version() -> None:
    upgraded = [nic(1, "28.42.10.00"), nic(1, "28.39.10.02", kind="Previous")]
    plan = plan_flash([ComponentSpec(match="ConnectX-7", version="28.39.1002")], upgraded, rollback=True)
    device = plan.components[0].devices[0]
    assert plan.components[0].action == ACTION_ROLLBACK and device.action == ACTION_ROLLBACK
    assert device.rollback_uri.endswith("Previous-0-28.39.10.02__NIC.Slot.1-1-1") and device.target == "28.39.10.02"
    # Already rolled back: the target names what runs, nothing to do (a repeated rollback does not flip back).
    rolled = [nic(1, "28.39.10.02"), nic(1, "28.42.10.00", kind="Previous")]
    assert plan_flash([ComponentSpec(match="ConnectX-7", version="28.39.1002")], rolled, rollback=True).changes == ()
    with pytest.raises(InvalidInputError, match=r"is 28\.39\.10\.02, not 28\.38\.1000"):
        plan_flash([ComponentSpec(match="ConnectX-7", version="28.38.1000")], upgraded, rollback=True)
    with pytest.raises(InvalidInputError, match="no Previous firmware image"):
        plan_flash([ComponentSpec(match="ConnectX-7", version="28.38.1000")], [nic(1, "28.42.10.00")], rollback=True)


def test_verify_versions_names_each_device_left_behind() -> None:
    plan = plan_flash([ComponentSpec(match="ConnectX-7", version="28.42.1000")], INVENTORY)
    after = [nic(1, "28.42.10.00"), nic(2, "28.39.10.02")]
    assert verify_versions(plan, after) == [f"{CX7} (NIC.Slot.2-1-1) runs 28.39.10.02, expected 28.42.1000"]
    assert verify_versions(plan, [nic(1, "28.42.10.00"), nic(2, "28.42.10.00")]) == []
    assert "no longer in the firmware inventory" in verify_versions(plan, [nic(1, "28.42.10.00")])[0]
