"""The published JSON Schema and the checks a schema cannot do."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import (
    MatrixError,
    load_matrix_file,
    matrix_from_data,
    matrix_from_text,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_schema import (
    HAS_JSONSCHEMA,
    JSONSCHEMA_IMPORT_ERROR,
    MATRIX_SCHEMA,
    assert_valid,
    matrix_schema,
    validate_matrix,
)

ROOT = Path(__file__).resolve().parents[4]
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "matrix"


def _load(name: str):
    return load_matrix_file(str(FIXTURES / name))


def _errors(name: str) -> list:
    return validate_matrix(_load(name)).errors


def test_published_schema_equals_the_module_copy() -> None:
    published = json.loads((ROOT / "docs" / "matrix.schema.json").read_text())
    assert published == MATRIX_SCHEMA


def test_schema_is_a_valid_draft7_schema() -> None:
    jsonschema.Draft7Validator.check_schema(MATRIX_SCHEMA)


def test_jsonschema_import_is_guarded() -> None:
    assert HAS_JSONSCHEMA is True
    assert JSONSCHEMA_IMPORT_ERROR is None


def test_schema_copy_cannot_change_the_shared_schema() -> None:
    copy = matrix_schema()
    copy["title"] = "changed"
    assert MATRIX_SCHEMA["title"] == "gpufleet.upgrade version matrix"


@pytest.mark.parametrize(
    "name", ["seed000-configmap.yaml", "seed000-stages.yaml", "seed001-versions.yaml", "good-stages.yaml"]
)
def test_well_formed_matrices_have_no_errors(name: str) -> None:
    assert _errors(name) == []


def test_seed_placeholder_in_next_planned_is_a_warning() -> None:
    report = validate_matrix(_load("seed000-stages.yaml"))
    assert [(w.stage, w.key, w.found) for w in report.warnings] == [("next_planned", "kernel", "6.x TBD")]


def test_bad_driver_version_names_file_stage_key_found_expected() -> None:
    path = str(FIXTURES / "bad-driver-version.yaml")
    [error] = _errors("bad-driver-version.yaml")
    assert (error.file, error.stage, error.key, error.found) == (path, "canary_testing", "gpu_driver", "56x.1")
    assert error.expected == "a driver version like 560.35.03"
    assert (
        str(error)
        == f"{path}, stage canary_testing, key gpu_driver: found '56x.1', expected a driver version like 560.35.03"
    )


def test_unknown_keys_and_stages_with_did_you_mean() -> None:
    errors = {(e.stage, e.key): e for e in _errors("unknown-keys.yaml")}
    assert set(errors) == {
        ("canary_test", None),
        ("current_production", "gpu_drvier"),
        ("current_production", "firmware-cx7"),
        ("current_production", "owner"),
    }
    assert errors[("canary_test", None)].hint == "did you mean canary_testing?"
    assert errors[("current_production", "gpu_drvier")].hint == "did you mean gpu_driver?"
    assert errors[("current_production", "firmware-cx7")].hint == "did you mean firmware_cx7?"
    assert errors[("current_production", "owner")].hint is None
    assert "firmware_<name>" in errors[("current_production", "owner")].expected


def test_unquoted_numbers_and_dates_must_be_quoted() -> None:
    errors = {e.key: e for e in _errors("unquoted-values.yaml")}
    # YAML already turned 12.10 into 12.1: the reason the schema wants strings.
    assert errors["cuda"].found == 12.1
    assert errors["cuda"].expected == "a string"
    # ...but the message shows what the file says, and the hint quotes that, not the float's 12.1.
    assert "found 12.10," in errors["cuda"].msg
    assert 'quote it in YAML: "12.10"' in errors["cuda"].hint
    assert errors["deployed"].found == "2026-01-15"


def test_placeholders_are_errors_outside_next_planned() -> None:
    report = validate_matrix(_load("placeholder-in-canary.yaml"))
    [error] = report.errors
    assert (error.stage, error.key, error.found) == ("canary_testing", "kernel", "6.x TBD")
    assert "only in next_planned" in error.hint
    assert [(w.stage, w.key) for w in report.warnings] == [("next_planned", "openshift")]


def test_current_production_is_required() -> None:
    [error] = _errors("missing-production.yaml")
    assert error.stage == "current_production"
    assert error.found is None


def test_versions_form_errors_name_the_written_and_canonical_names() -> None:
    matrix = matrix_from_data(
        {"versions": {"current": {"driver": "560.35.03"}, "canary": {"driver": "56x.1", "drvier": "1"}}},
        source="v.yaml",
    )
    errors = {(e.stage, e.key): e for e in validate_matrix(matrix).errors}
    assert ("canary (canary_testing)", "driver (gpu_driver)") in errors
    assert errors[("canary (canary_testing)", "drvier")].hint == "did you mean driver?"


def test_a_bare_firmware_key_in_the_stages_form_gets_the_naming_hint() -> None:
    matrix = matrix_from_data({"current_production": {"firmware": "28.40.1000"}}, source="m")
    [error] = validate_matrix(matrix).errors
    assert error.hint == "did you mean firmware_<name>, e.g. firmware_cx7?"


def test_versions_form_requires_current() -> None:
    matrix = matrix_from_data({"versions": {"canary": {"driver": "560.35.03"}}}, source="v.yaml")
    [error] = validate_matrix(matrix).errors
    assert error.stage == "current"


def test_empty_stage_and_empty_value() -> None:
    matrix = matrix_from_data({"current_production": {"gpu_driver": ""}, "rollback": {}}, source="m")
    errors = {(e.stage, e.key): e for e in validate_matrix(matrix).errors}
    assert errors[("current_production", "gpu_driver")].expected == "a version"
    assert errors[("rollback", None)].expected == "at least one component version"


def test_assert_valid_raises_the_first_error_with_all_of_them() -> None:
    with pytest.raises(MatrixError) as caught:
        assert_valid(_load("unknown-keys.yaml"))
    assert caught.value.result["valid"] is False
    assert len(caught.value.result["errors"]) == 4


def test_assert_valid_returns_warnings_of_a_valid_matrix() -> None:
    report = assert_valid(_load("seed000-configmap.yaml"))
    assert report.ok
    assert report.as_dict()["warnings"][0]["key"] == "kernel"


def test_a_stage_that_is_not_a_mapping() -> None:
    matrix = matrix_from_data({"current_production": {"nccl": "2.22.3"}, "rollback": "v2025-12-stable"}, source="m")
    [error] = validate_matrix(matrix).errors
    assert (error.stage, error.key, error.found, error.expected) == ("rollback", None, "v2025-12-stable", "a mapping")
    assert "rollback" not in matrix.stages


def test_driver_type_is_precompiled_or_compiled() -> None:
    good = matrix_from_text('current_production:\n  driver_type: "precompiled"\n', source="good.yaml")
    assert validate_matrix(good).errors == []
    bad = matrix_from_text('current_production:\n  driver_type: "precompile"\n', source="bad.yaml")
    [error] = validate_matrix(bad).errors
    assert (error.file, error.stage, error.key, error.found) == (
        "bad.yaml",
        "current_production",
        "driver_type",
        "precompile",
    )
    assert "precompiled" in error.expected and "compiled" in error.expected
