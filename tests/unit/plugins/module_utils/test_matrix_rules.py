"""Compatibility rules: each with a reason and its own result, evidence from the sourced catalog."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import Catalog, load_catalog
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import load_matrix_file, matrix_from_data
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_rules import (
    PASS,
    RULE_NAMES,
    RULE_REASONS,
    VIOLATION,
    WARNING,
    RuleReport,
    changed_groups,
    check_version_set,
    evaluate_matrix,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_schema import MATRIX_SCHEMA, validate_matrix

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "matrix"

PRODUCTION: dict[str, Any] = {
    "openshift": "4.16.23",
    "kernel": "5.14.0-427.40.1.el9_4.x86_64",
    "gpu_operator": "v24.9.2",
    "gpu_driver": "550.144.03",
    "cuda": "12.4",
    "network_operator": "v24.7.0",
    "mofed": "24.07-0.6.1.0",
    "firmware_cx7": "28.42.1000",
    "sriov_operator": "4.16.0",
}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


@pytest.fixture(scope="module")
def seed_report(catalog: Catalog) -> RuleReport:
    return evaluate_matrix(load_matrix_file(str(FIXTURES / "seed000-configmap.yaml")), catalog=catalog)


def _result(report: RuleReport, rule: str, stage: str):
    result = report.result(rule, stage)
    assert result is not None, (rule, stage)
    return result


def _statuses(findings) -> list:
    return [finding.status for finding in findings]


def test_every_rule_has_a_documented_reason(seed_report: RuleReport) -> None:
    assert set(RULE_NAMES) >= {
        "one_group_at_a_time",
        "gpu_operator_supports_driver",
        "driver_kernel",
        "mofed_kernel",
        "openshift_kernel",
        "firmware_mofed",
        "upgrade_order",
        "rollback_differs",
        "known_versions",
    }
    assert all(len(reason) > 40 for reason in RULE_REASONS.values())
    assert {result.rule for result in seed_report.results} == set(RULE_NAMES)
    for result in seed_report.as_dict()["results"]:
        assert result["reason"] and result["status"] in (PASS, WARNING, VIOLATION)


def test_seed_gpu_operator_24_12_never_existed(seed_report: RuleReport) -> None:
    result = _result(seed_report, "known_versions", "canary_testing")
    assert result.status == VIOLATION
    [finding] = [f for f in result.findings if f.status == VIOLATION]
    assert finding.message == "GPU Operator v24.12.0: there is no 24.12 release line"
    assert any("github.com/NVIDIA/gpu-operator/tags" in source for source in finding.evidence)
    # Without a release, support for its driver is unknown: a warning, not a pass.
    supports = _result(seed_report, "gpu_operator_supports_driver", "canary_testing")
    assert supports.status == WARNING
    assert "not in catalog" in supports.findings[0].message


def test_seed_next_planned_kernel_contradicts_openshift_4_17(seed_report: RuleReport) -> None:
    result = _result(seed_report, "openshift_kernel", "next_planned")
    assert result.status == VIOLATION
    assert result.findings[0].message == (
        "OpenShift 4.17 ships RHCOS on RHEL 9.4 with kernel 5.14.0-427.*.el9_4; the stage expects '6.x TBD'"
    )
    assert any("openshift/os:manifest.yaml@release-4.17" in source for source in result.findings[0].evidence)


def test_seed_next_planned_network_operator_not_validated_on_4_17(seed_report: RuleReport) -> None:
    result = _result(seed_report, "mofed_kernel", "next_planned")
    assert result.status == VIOLATION
    [violation] = [f for f in result.findings if f.status == VIOLATION]
    assert "Network Operator v24.10.0 is validated only on OpenShift 4.14, 4.15, 4.16" in violation.message
    assert any("network-operator-docs:docs/platform-support.rst@v24.10.0" in s for s in violation.evidence)


def test_seed_next_planned_changes_four_groups_at_once(seed_report: RuleReport) -> None:
    result = _result(seed_report, "one_group_at_a_time", "next_planned")
    assert result.status == VIOLATION
    message = result.findings[0].message
    assert "changes 4 groups at once compared with canary_testing" in message
    for title in ("Network Operator", "firmware", "OpenShift", "SR-IOV"):
        assert title in message
    assert "openshift: 4.16.23 -> 4.17.5" in result.findings[0].evidence
    assert _result(seed_report, "one_group_at_a_time", "canary_testing").status == PASS
    # The groups that do change come in the documented order.
    assert _result(seed_report, "upgrade_order", "next_planned").status == PASS


def test_seed_rollback_driver_is_not_a_branch_of_gpu_operator_24_6(seed_report: RuleReport) -> None:
    result = _result(seed_report, "gpu_operator_supports_driver", "rollback")
    assert result.status == VIOLATION
    assert result.findings[0].message == (
        "GPU Operator v24.6.0 documents driver branches 535, 550; found 555.42.06 (branch 555)"
    )
    rollback = _result(seed_report, "rollback_differs", "rollback")
    # The seed's rollback names OpenShift 4.16.20 under a 4.16.23 production: that part cannot happen.
    assert rollback.status == WARNING
    assert [f.message for f in rollback.findings if f.status == WARNING] == [
        "openshift cannot go back (OpenShift has no downgrades, and its RHCOS kernel goes with it): "
        "a rollback leaves it at 4.16.23, not 4.16.20"
    ]


def test_seed_firmware_named_cx6_holds_connectx6_dx_firmware(seed_report: RuleReport) -> None:
    result = _result(seed_report, "firmware_mofed", "current_production")
    messages = [f.message for f in result.findings]
    assert "firmware_cx6 is named for ConnectX-6 (20.x firmware) but 22.40.1000 is ConnectX-6 Dx firmware (22.x)" in (
        messages
    )
    assert (
        "MOFED 24.07-0.6.1.0 was released with firmware xx.42.1000; firmware_cx7 28.40.1000 is train xx.40 "
        "(tested together: xx.42)" in messages
    )
    assert result.status == WARNING


def test_seed_sriov_operator_is_built_for_another_openshift(seed_report: RuleReport) -> None:
    result = _result(seed_report, "sriov_openshift", "current_production")
    assert result.status == WARNING
    assert "built for OpenShift 4.18; the stage runs OpenShift 4.16.23" in result.findings[0].message


def test_seed_production_driver_560_is_documented_for_24_9_0(seed_report: RuleReport) -> None:
    result = _result(seed_report, "gpu_operator_supports_driver", "current_production")
    assert result.status == PASS
    assert result.findings[0].message == "560.35.03 is documented for GPU Operator v24.9.0"
    assert any("cloud-native-docs:gpu-operator/life-cycle-policy.rst" in s for s in result.findings[0].evidence)


def test_good_matrix_has_no_violation(catalog: Catalog) -> None:
    report = evaluate_matrix(load_matrix_file(str(FIXTURES / "good-stages.yaml")), catalog=catalog)
    assert report.by_status(VIOLATION) == []
    assert _result(report, "firmware_mofed", "current_production").status == PASS
    assert _result(report, "openshift_kernel", "current_production").status == PASS
    assert _result(report, "driver_cuda", "canary_testing").status == PASS
    assert report.as_dict()["counts"][VIOLATION] == 0


def _findings(versions: dict[str, Any], catalog: Catalog, rule: str, previous=None):
    return check_version_set(versions, catalog=catalog, previous=previous)[rule]


def test_driver_branch_outside_the_release_documentation(catalog: Catalog) -> None:
    findings = _findings(
        dict(PRODUCTION, gpu_driver="570.86.15", gpu_operator="v24.9.0"), catalog, "gpu_operator_supports_driver"
    )
    assert _statuses(findings) == [VIOLATION]
    same_branch = _findings(dict(PRODUCTION, gpu_driver="550.144.99"), catalog, "gpu_operator_supports_driver")
    assert _statuses(same_branch) == [WARNING]
    assert "branch 550 is documented" in same_branch[0].message


def test_cuda_above_what_the_driver_runs(catalog: Catalog) -> None:
    findings = _findings(dict(PRODUCTION, cuda="12.6"), catalog, "driver_cuda")
    assert _statuses(findings) == [VIOLATION]
    assert findings[0].message == "driver branch 550 runs CUDA up to 12.4; the stage expects 12.6"
    assert _statuses(_findings(dict(PRODUCTION, cuda="12.2"), catalog, "driver_cuda")) == [PASS]
    # nvidia-smi reports major.minor; every patch release of that minor runs (12.4.1 on a 12.4 driver).
    assert _statuses(_findings(dict(PRODUCTION, cuda="12.4.1"), catalog, "driver_cuda")) == [PASS]


def test_kernel_change_within_the_operators_openshift_range(catalog: Catalog) -> None:
    after = dict(PRODUCTION, openshift="4.17.5", kernel="5.14.0-427.50.1.el9_4.x86_64", network_operator="v25.1.0")
    driver = _findings(after, catalog, "driver_kernel", previous=PRODUCTION)
    assert _statuses(driver) == [PASS]
    assert "GPU Operator v24.9.2 builds the GPU driver for the RHCOS kernel of OpenShift 4.17" in driver[0].message
    mofed = _findings(after, catalog, "mofed_kernel", previous=PRODUCTION)
    assert _statuses(mofed) == [PASS]
    unchanged = _findings(PRODUCTION, catalog, "driver_kernel", previous=PRODUCTION)
    assert unchanged[0].message.startswith("kernel, OpenShift and GPU Operator unchanged")


def test_a_new_openshift_or_operator_is_checked_even_when_the_kernel_is_inherited(catalog: Catalog) -> None:
    # OpenShift 4.19 with the kernel left out (inherited): still a new RHCOS for the drivers.
    newer_openshift = dict(PRODUCTION, openshift="4.19.9")
    assert newer_openshift["kernel"] == PRODUCTION["kernel"]
    assert _statuses(_findings(newer_openshift, catalog, "driver_kernel", previous=PRODUCTION)) == [VIOLATION]
    assert _statuses(_findings(newer_openshift, catalog, "mofed_kernel", previous=PRODUCTION)) == [VIOLATION]
    # A GPU Operator release not validated on the OpenShift that runs.
    newer_operator = dict(PRODUCTION, gpu_operator="v26.3.0", gpu_driver="580.126.20")
    findings = _findings(newer_operator, catalog, "driver_kernel", previous=PRODUCTION)
    assert _statuses(findings) == [VIOLATION]
    assert "GPU Operator v26.3.0 is validated only on OpenShift 4.17" in findings[0].message
    # The baseline itself is what runs: the same pairing there is a warning, never a refusal.
    assert _statuses(_findings(newer_operator, catalog, "driver_kernel")) == [WARNING]


def test_kernel_change_outside_kubernetes_catalog_is_a_warning(catalog: Catalog) -> None:
    before = {"gpu_operator": "v24.9.2", "kernel": "5.15.0-119-generic"}
    after = {"gpu_operator": "v24.9.2", "kernel": "6.8.0-45-generic"}
    assert _statuses(_findings(after, catalog, "driver_kernel", previous=before)) == [WARNING]


@pytest.mark.parametrize(
    ("openshift", "kernel", "status"),
    [
        ("4.19.9", "5.14.0-570.35.1.el9_6.x86_64", PASS),
        ("4.19.9", "5.14.0-570.30.1.el9_6.x86_64", VIOLATION),
        ("4.19.2", "5.14.0-570.25.1.el9_6.x86_64", PASS),
        ("4.18.10", "5.14.0-427.60.1.el9_4.x86_64", PASS),
        ("4.18.10", "5.14.0-570.25.1.el9_6.x86_64", VIOLATION),
        ("4.14.16", "5.14.0-284.59.1.el9_2.x86_64", PASS),
        ("4.14.16", "5.14.0-427.40.1.el9_4.x86_64", VIOLATION),
        ("4.13.40", "5.14.0-284.59.1.el9_2.x86_64", WARNING),
    ],
)
def test_openshift_kernel(openshift: str, kernel: str, status: str, catalog: Catalog) -> None:
    findings = _findings({"openshift": openshift, "kernel": kernel}, catalog, "openshift_kernel")
    assert _statuses(findings) == [status]


def test_known_versions_newer_than_the_catalog_is_a_warning(catalog: Catalog) -> None:
    findings = _findings({"gpu_operator": "v27.1.0", "network_operator": "v24.7.5"}, catalog, "known_versions")
    assert _statuses(findings) == [WARNING, WARNING]
    assert "newer than the catalog's newest release v26.7.0" in findings[0].message


def test_changed_groups_compare_by_value() -> None:
    before = {"firmware_cx7": "28.40.1000", "gpu_operator": "v24.9.0", "kernel": "5.14.0-427.40.1.el9_4.x86_64"}
    after = {"firmware_cx7": "28.40.10.00", "gpu_operator": "24.9.0", "kernel": "5.14.0-427.40.1.el9_4.x86_64"}
    assert changed_groups(before, after) == {}
    after["sriov_operator"] = "4.16.0"
    after["gpu_driver"] = "550.144.03"
    assert changed_groups(before, after) == {"gpu_operator": ["gpu_driver"], "sriov_operator": ["sriov_operator"]}


def test_upgrade_order_violation_when_a_later_stage_goes_back(catalog: Catalog) -> None:
    matrix = matrix_from_data(
        {
            "current_production": dict(PRODUCTION),
            "canary_testing": {"openshift": "4.17.5", "kernel": "5.14.0-427.50.1.el9_4.x86_64"},
            "next_planned": {"gpu_operator": "v25.3.4", "gpu_driver": "580.82.07"},
            "rollback": {"openshift": "4.16.20"},
        },
        source="order.yaml",
    )
    report = evaluate_matrix(matrix, catalog=catalog)
    result = _result(report, "upgrade_order", "next_planned")
    assert result.status == VIOLATION
    assert result.findings[0].message.startswith(
        "next_planned changes GPU Operator after OpenShift changed in an earlier stage"
    )
    assert _result(report, "upgrade_order", "canary_testing").status == PASS


def test_downgrade_in_a_forward_stage_is_a_warning(catalog: Catalog) -> None:
    matrix = matrix_from_data(
        {"current_production": dict(PRODUCTION), "canary_testing": {"gpu_driver": "550.127.08"}}, source="m"
    )
    result = _result(evaluate_matrix(matrix, catalog=catalog), "upgrade_order", "canary_testing")
    assert result.status == WARNING
    assert "downgrades gpu_driver from 550.144.03 to 550.127.08" in result.findings[0].message


def test_rollback_missing_or_equal_to_production(catalog: Catalog) -> None:
    missing = evaluate_matrix(matrix_from_data({"current_production": dict(PRODUCTION)}, source="m"), catalog=catalog)
    assert _result(missing, "rollback_differs", "rollback").status == WARNING
    same = evaluate_matrix(
        matrix_from_data({"current_production": dict(PRODUCTION), "rollback": {"cuda": "12.4"}}, source="m"),
        catalog=catalog,
    )
    result = _result(same, "rollback_differs", "rollback")
    assert result.status == VIOLATION
    assert result.findings[0].message == "rollback equals current_production: it restores nothing"
    newer = evaluate_matrix(
        matrix_from_data({"current_production": dict(PRODUCTION), "rollback": {"gpu_driver": "560.35.03"}}, source="m"),
        catalog=catalog,
    )
    assert _statuses(_result(newer, "rollback_differs", "rollback").findings) == [PASS, WARNING]


def test_firmware_pairing_unknown_to_the_catalog_is_a_warning(catalog: Catalog) -> None:
    findings = _findings(dict(PRODUCTION, mofed="24.10-1.0.0.0"), catalog, "firmware_mofed")
    assert _statuses(findings) == [WARNING]
    assert "not in catalog" in findings[0].message


# -- DCGM Exporter and its standalone host engine move together ----------------

GPU_26_3 = dict(
    PRODUCTION,
    openshift="4.18.20",
    gpu_operator="v26.3.2",
    gpu_driver="580.126.20",
    dcgm="4.5.3-4.8.2-distroless",
)


@pytest.mark.parametrize(
    ("engine", "status", "words"),
    [
        ("4.5.3-1-ubuntu22.04", PASS, "runs DCGM 4.5.3"),
        ("4.5.1-1-ubuntu22.04", WARNING, "same 4.5 line, another patch release"),
        ("4.4.2-1-ubuntu22.04", VIOLATION, "set dcgm_hostengine to DCGM 4.5.3"),
        # A newer host engine is not the paired one either (NVIDIA pairs one DCGM with each exporter release).
        ("4.8.0-1-ubuntu22.04", VIOLATION, "must move together"),
        ("3.3.9-1-ubuntu22.04", VIOLATION, "must move together"),
    ],
)
def test_dcgm_exporter_and_host_engine_pairing(engine: str, status: str, words: str, catalog: Catalog) -> None:
    findings = _findings(dict(GPU_26_3, dcgm_hostengine=engine), catalog, "dcgm_exporter_hostengine")
    assert _statuses(findings) == [status]
    assert words in findings[0].message
    assert findings[0].message.startswith("dcgm 4.5.3-4.8.2-distroless is paired with DCGM 4.5.3; dcgm_hostengine")
    assert any("install-dcgm-exporter.html#dcgm-exporter-version-compatibility" in e for e in findings[0].evidence)


def test_dcgm_pairing_needs_both_keys(catalog: Catalog) -> None:
    embedded = _findings(GPU_26_3, catalog, "dcgm_exporter_hostengine")
    assert _statuses(embedded) == [PASS]
    assert embedded[0].message.startswith("not applicable")
    placeholder = _findings(dict(GPU_26_3, dcgm_hostengine="4.x"), catalog, "dcgm_exporter_hostengine")
    assert _statuses(placeholder) == [WARNING]
    assert "placeholder" in placeholder[0].message


def test_an_exporter_upgrade_that_leaves_the_host_engine_behind_is_refused(catalog: Catalog) -> None:
    # Production pairs 4.4.2 with 4.4.2; the canary moves the GPU Operator and its exporter to the 26.3 default
    # but inherits the host engine: the canary stage is a violation, production passes.
    matrix = matrix_from_data(
        {
            "current_production": dict(
                PRODUCTION,
                openshift="4.18.20",
                gpu_operator="v25.10.1",
                gpu_driver="580.105.08",
                dcgm="4.4.2-4.7.0",
                dcgm_hostengine="4.4.2-1-ubuntu22.04",
            ),
            "canary_testing": {"gpu_operator": "v26.3.2", "gpu_driver": "580.126.20", "dcgm": "4.5.3-4.8.2"},
            "rollback": {"gpu_operator": "v25.10.0", "gpu_driver": "580.95.05", "dcgm": "4.4.1-4.6.0"},
        },
        source="dcgm.yaml",
    )
    report = evaluate_matrix(matrix, catalog=catalog)
    assert _result(report, "dcgm_exporter_hostengine", "current_production").status == PASS
    canary = _result(report, "dcgm_exporter_hostengine", "canary_testing")
    assert canary.status == VIOLATION
    assert "dcgm_hostengine 4.4.2-1-ubuntu22.04 runs DCGM 4.4.2" in canary.findings[0].message
    assert _result(report, "dcgm_exporter_hostengine", "rollback").status == WARNING
    # The exporter and the host engine are one group: changing both is one step, not two.
    assert changed_groups({"dcgm": "4.4.2-4.7.0"}, {"dcgm": "4.5.3-4.8.2", "dcgm_hostengine": "4.5.3-1"}) == {
        "gpu_operator": ["dcgm", "dcgm_hostengine"]
    }


def test_the_26_3_release_checks_against_its_own_facts(catalog: Catalog) -> None:
    findings = check_version_set(GPU_26_3, catalog=catalog)
    assert _statuses(findings["gpu_operator_supports_driver"]) == [PASS]
    message = findings["gpu_operator_supports_driver"][0].message
    assert message == "580.126.20 is the default driver of GPU Operator v26.3.2"
    known = {finding.message for finding in findings["known_versions"]}
    assert "dcgm 4.5.3-4.8.2-distroless ships with GPU Operator v26.3.2, v26.3.3" in known
    # 26.3 dropped the 550 branch that 25.10 still documented.
    dropped = _findings(dict(GPU_26_3, gpu_driver="550.163.01"), catalog, "gpu_operator_supports_driver")
    assert _statuses(dropped) == [VIOLATION]


def test_gpu_operator_26_3_defaults_differ_in_the_dcgm_patch_release(catalog: Catalog) -> None:
    # v26.3.2's chart pairs exporter 4.5.3-4.8.2 with a 4.5.2 host engine: a warning, not a violation.
    versions = dict(GPU_26_3, dcgm_hostengine="4.5.2-1-ubuntu22.04")
    findings = check_version_set(versions, catalog=catalog)
    assert _statuses(findings["dcgm_exporter_hostengine"]) == [WARNING]
    known = {finding.message for finding in findings["known_versions"]}
    assert "dcgm_hostengine 4.5.2-1-ubuntu22.04 ships with GPU Operator v26.3.0, v26.3.1, v26.3.2, v26.3.3" in known
    unknown = check_version_set(dict(GPU_26_3, dcgm_hostengine="4.5.9-1"), catalog=catalog)["known_versions"]
    assert any(
        f.status == WARNING and f.message.startswith("dcgm_hostengine 4.5.9-1 is not the default") for f in unknown
    )


def test_dcgm_hostengine_is_a_matrix_key_with_its_own_grammar() -> None:
    def errors(value: str) -> list:
        data = {"current_production": {"dcgm": "4.5.3-4.8.2", "dcgm_hostengine": value}}
        return [str(error) for error in validate_matrix(matrix_from_data(data, source="m.yaml")).errors]

    assert errors("4.5.3-1-ubuntu22.04") == []
    bad = errors("4.5")
    assert len(bad) == 1
    assert bad[0].startswith("m.yaml, stage current_production, key dcgm_hostengine: found '4.5', expected")
    assert "4.2.3-1-ubuntu22.04" in bad[0]
    assert "dcgm_hostengine" in MATRIX_SCHEMA["definitions"]["versions"]
