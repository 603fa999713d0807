"""The firmware image format and the NIC version spellings (pure)."""

from __future__ import annotations

import pytest

from gpufleet_twin.redfish.image import (
    ImageRejected,
    build_firmware_image,
    dell_nic_version,
    firmware_major,
    native_nic_version,
    parse_firmware_image,
)


def test_built_image_parses_back_with_its_size() -> None:
    data = build_firmware_image("ConnectX-7", "28.41.1000", size=10_000)
    image = parse_firmware_image(data)
    assert (image.component, image.version, image.size) == ("ConnectX-7", "28.41.1000", 10_000)
    assert len(data) == 10_000


def test_nic_version_in_dell_spelling_is_stored_natively() -> None:
    data = b"GPUFLEET-FW/1 component=ConnectX-6 version=22.41.10.00 psid=DEL0000000016\n" + b"\0" * 64
    assert parse_firmware_image(data).version == "22.41.1000"


def test_bios_and_idrac_versions_are_kept_as_written() -> None:
    assert parse_firmware_image(build_firmware_image("BIOS", "2.4.1")).version == "2.4.1"
    assert parse_firmware_image(build_firmware_image("iDRAC", "7.20.10.50")).version == "7.20.10.50"


@pytest.mark.parametrize(
    "data",
    [
        b"MZ\x90\x00 a Windows executable, not a package the twin knows",
        b"GPUFLEET-FW/1 component=ConnectX-7 version=28.41.1000",  # no newline: truncated header
        b"GPUFLEET-FW/1 component=ConnectX-5 version=16.35.1012\n",
        b"GPUFLEET-FW/1 component=BIOS\n",
        b"GPUFLEET-FW/1 component=BIOS version=2.4.1 garbage\n",
        b"GPUFLEET-FW/1 component=BIOS version=\xff\n",
    ],
)
def test_unreadable_packages_are_rejected(data: bytes) -> None:
    with pytest.raises(ImageRejected):
        parse_firmware_image(data)


def test_unknown_component_cannot_be_built() -> None:
    with pytest.raises(ValueError, match="unknown component"):
        build_firmware_image("ConnectX-5", "16.35.1012")


@pytest.mark.parametrize(
    ("native", "dell"),
    [("28.39.1002", "28.39.10.02"), ("22.38.1002", "22.38.10.02"), ("20.41.1000", "20.41.10.00")],
)
def test_mellanox_versions_convert_both_ways(native: str, dell: str) -> None:
    assert dell_nic_version(native) == dell
    assert native_nic_version(dell) == native
    assert native_nic_version(native) == native  # already native


def test_non_mellanox_versions_are_left_alone() -> None:
    assert dell_nic_version("2.3.5") == "2.3.5"
    assert native_nic_version("28.39.1002") == "28.39.1002"
    assert firmware_major("28.39.1002") == 28
    assert firmware_major("A1.2") is None
