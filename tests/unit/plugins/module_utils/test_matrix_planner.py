"""The planner: one group per step, in upgrade order, with the rules each intermediate set violates."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import Catalog, load_catalog
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import load_matrix_file, matrix_from_text
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_planner import (
    DIRECTION_ROLLBACK,
    disruptive_refusal,
    plan_stage,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "matrix"


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


def _changes(step) -> list:
    return [(change.component, change.from_version, change.to_version) for change in step.changes]


def test_seed_next_planned_splits_into_five_ordered_steps(catalog: Catalog) -> None:
    matrix = load_matrix_file(str(FIXTURES / "seed000-configmap.yaml"))
    plan = plan_stage(matrix, "next_planned", catalog=catalog)
    assert plan.groups == ["gpu_operator", "network_operator", "firmware", "openshift", "sriov_operator"]
    steps = plan.steps
    assert [step.number for step in steps] == [1, 2, 3, 4, 5]

    # 1. GPU Operator: everything canary_testing pins, which next_planned builds on.
    assert _changes(steps[0]) == [
        ("gpu_operator", "v24.9.0", "v24.12.0"),
        ("gpu_driver", "560.35.03", "565.57.01"),
        ("cuda", "12.6", "12.8"),
        ("dcgm", "3.3.8-3.6.0", "3.3.9-3.6.1"),
        ("device_plugin", "v0.16.2", "v0.17.0"),
        ("container_toolkit", "v1.16.2", "v1.17.0"),
        ("nccl", "2.22.3", "2.23.4"),
    ]
    assert sorted(steps[0].violations) == ["known_versions"]
    assert steps[0].violations["known_versions"] == ["GPU Operator v24.12.0: there is no 24.12 release line"]

    # 2. Network Operator.
    assert _changes(steps[1]) == [
        ("network_operator", "v24.7.0", "v24.10.0"),
        ("mofed", "24.07-0.6.1.0", "24.10-1.0.0.0"),
    ]
    assert sorted(steps[1].violations) == ["known_versions"]
    assert steps[1].versions_after["openshift"] == "4.16.23"

    # 3. Firmware: only firmware_cx7 moves; firmware_cx6 stays where it is.
    assert _changes(steps[2]) == [("firmware_cx7", "28.40.1000", "28.42.1000")]
    assert steps[2].versions_after["firmware_cx6"] == "22.40.1000"

    # 4. OpenShift: the 6.x kernel contradicts RHCOS 4.17, and Network Operator
    #    v24.10.0 is not validated on 4.17.
    assert _changes(steps[3]) == [
        ("openshift", "4.16.23", "4.17.5"),
        ("kernel", "5.14.0-427.40.1.el9_4.x86_64", "6.x TBD"),
    ]
    assert sorted(steps[3].violations) == ["known_versions", "mofed_kernel", "openshift_kernel"]

    # 5. SR-IOV last; the kernel problem is still in the set.
    assert _changes(steps[4]) == [("sriov_operator", "4.18.0", "4.19.0")]
    assert sorted(steps[4].violations) == ["known_versions", "openshift_kernel"]
    assert steps[4].versions_after == matrix.effective_versions("next_planned")


def test_plan_to_canary_is_one_step(catalog: Catalog) -> None:
    matrix = load_matrix_file(str(FIXTURES / "good-stages.yaml"))
    plan = plan_stage(matrix, "canary_testing", catalog=catalog)
    assert plan.groups == ["gpu_operator"]
    assert plan.steps[0].violations == {}
    assert _changes(plan.steps[0]) == [("gpu_driver", "550.144.03", "560.35.03"), ("cuda", "12.4", "12.6")]


def test_rollback_walks_groups_in_reverse(catalog: Catalog) -> None:
    matrix = load_matrix_file(str(FIXTURES / "seed000-stages.yaml"))
    plan = plan_stage(matrix, "rollback", catalog=catalog)
    assert plan.direction == DIRECTION_ROLLBACK
    assert plan.groups == ["openshift", "network_operator", "gpu_operator"]
    assert _changes(plan.steps[0]) == [("openshift", "4.16.23", "4.16.20")]
    assert "gpu_operator_supports_driver" in plan.steps[2].violations


def test_plan_as_dict_is_plain_data(catalog: Catalog) -> None:
    matrix = load_matrix_file(str(FIXTURES / "seed000-stages.yaml"))
    data = plan_stage(matrix, "next_planned", catalog=catalog).as_dict()
    assert data["from"] == "current_production" and data["to"] == "next_planned"
    assert data["steps"][3]["title"] == "OpenShift"
    assert data["steps"][3]["violates"] == ["known_versions", "mofed_kernel", "openshift_kernel"]
    assert data["steps"][2]["changes"] == [{"component": "firmware_cx7", "from": "28.40.1000", "to": "28.42.1000"}]


def test_plan_to_the_baseline_itself_is_empty(catalog: Catalog) -> None:
    matrix = load_matrix_file(str(FIXTURES / "good-stages.yaml"))
    assert plan_stage(matrix, "current_production", catalog=catalog).steps == []


_PRECOMPILED_MATRIX = """
current_production:
  gpu_operator: "v24.9.0"
  gpu_driver: "550.127.05"
  driver_type: "compiled"
canary_testing:
  driver_type: "precompiled"
  canary_node: "gpu-worker-001"
"""


def test_a_driver_type_change_is_a_disruptive_gpu_operator_step(catalog: Catalog) -> None:
    matrix = matrix_from_text(_PRECOMPILED_MATRIX, source="m.yaml")
    [step] = plan_stage(matrix, "canary_testing", catalog=catalog).steps
    assert step.group == "gpu_operator"
    assert _changes(step) == [("driver_type", "compiled", "precompiled")]
    [message] = step.disruptive
    assert message.startswith("a driver_type change (compiled -> precompiled) is disruptive")
    assert "2166" in message and step.as_dict()["disruptive"] == [message]
    # The same type pinned twice plans nothing.
    same = matrix_from_text(_PRECOMPILED_MATRIX.replace('"precompiled"', '"compiled"'), source="m.yaml")
    assert plan_stage(same, "canary_testing", catalog=catalog).steps == []


def test_pinning_the_default_driver_type_is_not_disruptive(catalog: Catalog) -> None:
    text = 'current_production:\n  gpu_driver: "550.127.05"\ncanary_testing:\n  driver_type: "compiled"\n'
    [step] = plan_stage(matrix_from_text(text, source="m.yaml"), "canary_testing", catalog=catalog).steps
    assert _changes(step) == [("driver_type", None, "compiled")]
    assert step.disruptive == []
    text = 'current_production:\n  gpu_driver: "550.127.05"\ncanary_testing:\n  driver_type: "precompiled"\n'
    [step] = plan_stage(matrix_from_text(text, source="m.yaml"), "canary_testing", catalog=catalog).steps
    assert step.disruptive and "(compiled -> precompiled)" in step.disruptive[0]


def test_the_upgrade_flow_refuses_a_disruptive_plan_and_says_what_to_do(catalog: Catalog) -> None:
    matrix = matrix_from_text(_PRECOMPILED_MATRIX, source="m.yaml")
    reason = disruptive_refusal(plan_stage(matrix, "canary_testing", catalog=catalog).as_dict(), stage="canary_testing")
    assert reason.startswith("canary_testing changes how the driver is installed")
    assert "(compiled -> precompiled)" in reason and "Nothing was changed. Next:" in reason
    versions_only = matrix_from_text(
        _PRECOMPILED_MATRIX.replace('driver_type: "precompiled"', 'gpu_driver: "550.144.03"'), source="m.yaml"
    )
    assert disruptive_refusal(plan_stage(versions_only, "canary_testing", catalog=catalog).as_dict(), stage="x") == ""
