"""Version grammar and ordering of every matrix component (no string comparisons)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import (
    VersionParseError,
    compare_versions,
    is_placeholder,
    is_version_component,
    parse_version,
    placeholder_prefix,
    same_version,
)


@pytest.mark.parametrize(
    ("component", "older", "newer"),
    [
        # As strings "v24.10.0" < "v24.9.0"; as releases 24.9 comes first.
        ("gpu_operator", "v24.9.0", "v24.10.0"),
        ("gpu_operator", "v24.3.0-rc.1", "v24.3.0"),
        ("network_operator", "v24.7.0", "v24.10.0"),
        ("gpu_driver", "550.127.05", "550.144.03"),
        ("gpu_driver", "560.35.03", "565.57.01"),
        ("gpu_driver", "595.80", "595.91.07"),
        ("cuda", "12.6", "12.10"),
        ("mofed", "24.07-0.6.1.0", "24.10-0.7.0.0"),
        # MOFED -> DOCA: ordered by the OFED driver version the DOCA tag carries.
        ("mofed", "24.10-0.7.0.0-0", "doca3.1.0-25.07-0.9.7.0-0"),
        ("mofed", "doca3.1.0-25.07-0.9.7.0-0", "doca3.2.0-25.10-1.2.8.0-2"),
        ("mofed", "25.04-0.6.1.0-0", "25.04-0.6.1.0-2"),
        ("firmware_cx7", "28.39.1002", "28.40.1000"),
        ("firmware_cx7", "28.40.9.00", "28.40.1000"),
        ("openshift", "4.16.9", "4.16.23"),
        ("openshift", "4.19.0-ec.2", "4.19.0"),
        ("kernel", "5.14.0-427.9.1.el9_4.x86_64", "5.14.0-427.40.1.el9_4.x86_64"),
        ("kernel", "5.14.0-427.40.1.el9_4.x86_64", "5.14.0-570.35.1.el9_6.x86_64"),
        ("kernel", "4.18.0-372.96.1.el8_6.x86_64", "5.14.0-284.59.1.el9_2.x86_64"),
        ("dcgm", "3.3.8-3.6.0", "3.3.9-3.6.1"),
        ("dcgm", "3.3.9-3.6.1", "4.1.1-4.0.4"),
        ("dcgm_hostengine", "4.2.3-1-ubuntu22.04", "4.5.1-1-ubuntu22.04"),
        ("dcgm_hostengine", "4.5.1-1", "4.5.1-2"),
        ("device_plugin", "v0.16.2", "v0.17.0"),
        ("container_toolkit", "v1.9.0", "v1.16.2"),
        ("nccl", "2.22.3", "2.23.4"),
        ("sriov_operator", "4.16.0", "4.18.0"),
    ],
)
def test_versions_order_by_component_rules(component: str, older: str, newer: str) -> None:
    assert compare_versions(component, older, newer) == -1
    assert compare_versions(component, newer, older) == 1


@pytest.mark.parametrize(
    ("component", "left", "right"),
    [
        # UPSTREAM-FACTS: Dell iDRAC prints 28.39.1002 as 28.39.10.02; compare by value.
        ("firmware_cx7", "28.39.10.02", "28.39.1002"),
        ("firmware_bf2", "24.40.10.00", "24.40.1000"),
        # CSV spec.version has no "v"; the matrix writes one.
        ("gpu_operator", "24.9.0", "v24.9.0"),
        # A container build suffix counts only when both sides carry one.
        ("mofed", "24.07-0.6.1.0", "24.07-0.6.1.0-0"),
        # Operand tags with the OS of their base image are the same release.
        ("dcgm", "3.3.8-3.6.0", "3.3.8-3.6.0-ubuntu22.04"),
        ("dcgm_hostengine", "4.2.3-1-ubuntu22.04", "4.2.3-1"),
        ("device_plugin", "v0.16.2", "v0.16.2-ubi8"),
        ("container_toolkit", "v1.16.2-ubuntu20.04", "v1.16.2"),
        # OLM's build suffix on the SR-IOV CSV.
        ("sriov_operator", "4.18.0", "4.18.0-202501230001"),
        # The architecture suffix of a kernel is not part of its version.
        ("kernel", "5.14.0-427.40.1.el9_4.x86_64", "5.14.0-427.40.1.el9_4"),
        ("gpu_driver", "595.80", "595.80.0"),
    ],
)
def test_same_release_written_two_ways(component: str, left: str, right: str) -> None:
    assert same_version(component, left, right)


@pytest.mark.parametrize("component", ["device_plugin", "container_toolkit"])
def test_an_operand_release_candidate_is_not_its_release(component: str) -> None:
    assert not same_version(component, "v0.17.0", "v0.17.0-rc.1")
    assert parse_version(component, "v0.17.0-rc.1").compare(parse_version(component, "v0.17.0")) < 0
    assert parse_version(component, "v0.17.0-rc.1").compare(parse_version(component, "v0.16.2-ubi8")) > 0


def test_different_mofed_builds_differ_when_both_are_given() -> None:
    assert not same_version("mofed", "24.01-0.3.3.1-0", "24.01-0.3.3.1-10")


def test_doca_tag_exposes_the_driver_and_the_doca_release() -> None:
    version = parse_version("mofed", "doca3.1.0-25.07-0.9.7.0-0")
    assert version.detail["doca"] == "3.1.0"
    assert version.detail["driver"] == "25.07-0.9.7.0"
    assert version.tail == (0,)


def test_kernel_details_name_rhel_line_and_release_stream() -> None:
    version = parse_version("kernel", "5.14.0-427.40.1.el9_4.x86_64")
    assert version.detail["version"] == "5.14.0"
    assert version.detail["rhel"] == "9.4"
    assert version.detail["release_stream"] == "427"
    assert version.detail["arch"] == "x86_64"


def test_firmware_detail_names_the_adapter_family_field() -> None:
    assert parse_version("firmware_cx6", "22.40.1000").detail["family_id"] == 22
    assert parse_version("firmware_cx7", "28.39.10.02").key == (28, 39, 1002)


def test_driver_branch_of_a_two_part_driver() -> None:
    assert parse_version("gpu_driver", "595.80").detail["branch"] == 595


@pytest.mark.parametrize(
    ("component", "text", "expected_words"),
    [
        ("gpu_driver", "56x.1", "a driver version like 560.35.03"),
        ("gpu_operator", "latest", "like v24.9.0"),
        ("mofed", "24.07", "24.07-0.6.1.0"),
        ("kernel", "6.x", "5.14.0-427.40.1.el9_4.x86_64"),
        ("firmware_cx7", "28.40.1000.1.2", "28.40.1000"),
        ("firmware_cx7", "28.40.100.00", "28.40.1000"),
        ("dcgm", "3.3.8", "3.3.8-3.6.0"),
        ("dcgm_hostengine", "4.2", "4.2.3-1-ubuntu22.04"),
        ("openshift", "4.16", "4.16.23"),
    ],
)
def test_unparseable_versions_name_what_was_expected(component: str, text: str, expected_words: str) -> None:
    with pytest.raises(VersionParseError) as caught:
        parse_version(component, text)
    assert expected_words in caught.value.expected
    assert caught.value.text == text


def test_a_yaml_number_is_not_a_version() -> None:
    with pytest.raises(VersionParseError) as caught:
        parse_version("cuda", 12.1)
    assert "quoted string" in caught.value.expected


@pytest.mark.parametrize("text", ["6.x TBD", "TBD", "4.17.x", "latest", "?"])
def test_placeholders_are_recognised(text: str) -> None:
    assert is_placeholder(text)


@pytest.mark.parametrize("text", ["5.14.0-427.40.1.el9_4.x86_64", "v24.9.0", "doca3.1.0-25.07-0.9.7.0-0"])
def test_real_versions_are_not_placeholders(text: str) -> None:
    assert not is_placeholder(text)


def test_placeholder_prefix_keeps_the_committed_fields() -> None:
    assert placeholder_prefix("6.x TBD") == (6,)
    assert placeholder_prefix("4.17.x") == (4, 17)
    assert placeholder_prefix("TBD") == ()


def test_component_keys() -> None:
    assert is_version_component("firmware_cx7")
    assert is_version_component("gpu_driver")
    assert not is_version_component("firmware-cx7")
    assert not is_version_component("status")


def test_unparseable_values_fall_back_to_exact_text() -> None:
    assert same_version("kernel", "6.x TBD", "6.x TBD")
    assert not same_version("kernel", "6.x TBD", "5.14.0-427.40.1.el9_4.x86_64")
    assert not same_version("gpu_driver", None, "560.35.03")
