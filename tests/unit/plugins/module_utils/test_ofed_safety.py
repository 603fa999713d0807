"""MOFED reload preflight (pure): a primary interface on a ConnectX port, storage modules loaded."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ofed_safety import (
    PRIMARY_INTERFACE_LABEL,
    SafetyOptions,
    check_reload_safety,
    unloads_storage_modules,
    validate_safety_options,
)

STORAGE = {"gpufleet.io/rdma-storage-modules": "true"}


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": dict(labels)}}


def policy(*env: tuple[str, str]) -> dict[str, Any]:
    ofed: dict[str, Any] = {"version": "24.07-0.6.1.0"}
    if env:
        ofed["env"] = [{"name": name, "value": value} for name, value in env]
    return {"metadata": {"name": "nic-cluster-policy"}, "spec": {"ofedDriver": ofed}}


NODES = [
    node("w1", **{PRIMARY_INTERFACE_LABEL: "ens1f0np0"}),
    node("w2", **STORAGE),
    node("w3"),
]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ((), False),
        ((("UNLOAD_STORAGE_MODULES", "true"),), True),
        ((("UNLOAD_STORAGE_MODULES", "True"),), True),
        ((("UNLOAD_STORAGE_MODULES", "false"),), False),
        ((("RESTORE_DRIVER_ON_POD_TERMINATION", "true"),), False),
    ],
)
def test_unload_storage_modules_is_read_from_the_policy_env(env, expected):
    assert unloads_storage_modules(policy(*env)) is expected


def test_both_hazards_refuse_naming_node_interface_and_fix():
    findings, refusal = check_reload_safety(
        nodes=NODES, targets=["w1", "w2", "w3"], policy=policy(), options=SafetyOptions()
    )
    assert [(f["node"], f["hazard"], f["allowed"]) for f in findings] == [
        ("w1", "primary-interface", False),
        ("w2", "storage-modules", False),
    ]
    assert refusal.startswith("Refusing the MOFED reload, nothing changed.")
    assert "node w1: primary interface ens1f0np0 is a ConnectX port" in refusal
    assert "node w2: NVMe-oF/NFS-RDMA storage modules are loaded" in refusal
    assert "spec.ofedDriver.env" in refusal and '"name": "UNLOAD_STORAGE_MODULES", "value": "true"' in refusal
    assert "allow_primary_interface_reload=true" in refusal and "allow_storage_modules_reload=true" in refusal
    assert "w3" not in refusal


def test_only_targets_are_checked():
    findings, refusal = check_reload_safety(nodes=NODES, targets=["w3"], policy=policy(), options=SafetyOptions())
    assert findings == [] and refusal == ""


def test_unload_storage_modules_in_the_policy_clears_the_storage_hazard():
    findings, refusal = check_reload_safety(
        nodes=NODES, targets=["w2"], policy=policy(("UNLOAD_STORAGE_MODULES", "true")), options=SafetyOptions()
    )
    assert findings == [] and refusal == ""


def test_allow_options_accept_each_hazard_separately():
    options = SafetyOptions(allow_primary_interface_reload=True)
    findings, refusal = check_reload_safety(nodes=NODES, targets=["w1", "w2"], policy=policy(), options=options)
    assert [f["allowed"] for f in findings] == [True, False]
    assert "w1" not in refusal and "node w2" in refusal
    assert "allow_primary_interface_reload" not in refusal

    options = SafetyOptions(allow_primary_interface_reload=True, allow_storage_modules_reload=True)
    findings, refusal = check_reload_safety(nodes=NODES, targets=["w1", "w2"], policy=policy(), options=options)
    assert len(findings) == 2 and refusal == ""


def test_empty_label_and_selector_skip_the_checks():
    options = SafetyOptions(primary_interface_label="", storage_modules_selector="")
    findings, refusal = check_reload_safety(nodes=NODES, targets=["w1", "w2"], policy=policy(), options=options)
    assert findings == [] and refusal == ""


def test_custom_selector_matches_an_nfd_rule_label():
    nfd = node("w4", **{"feature.node.kubernetes.io/rdma-storage": "true"})
    options = SafetyOptions(storage_modules_selector="feature.node.kubernetes.io/rdma-storage")
    findings, refusal = check_reload_safety(nodes=[nfd], targets=["w4"], policy=policy(), options=options)
    assert [f["hazard"] for f in findings] == ["storage-modules"] and "node w4" in refusal


@pytest.mark.parametrize(
    "options",
    [SafetyOptions(storage_modules_selector="a in (b"), SafetyOptions(primary_interface_label="a=b")],
)
def test_bad_options_are_refused(options):
    with pytest.raises(InvalidInputError):
        validate_safety_options(options)
