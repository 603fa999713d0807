# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Validation of a version matrix: the published JSON Schema plus the checks a schema cannot do (collection-internal).

``MATRIX_SCHEMA`` is the same document as ``docs/matrix.schema.json`` (a unit
test keeps the two equal). The schema checks the shape: known stages, known
component keys, string values. ``validate_matrix`` then parses every version
by its component's grammar and applies the placeholder rule. Every problem
becomes a ``MatrixError`` naming file, stage, key, what was found and what
was expected; a caller runs nothing else while ``report.errors`` is not empty.

Placeholder decision: ``next_planned`` may hold a placeholder (``6.x TBD``),
reported as a warning because a plan may be undecided; in
``current_production``, ``canary_testing`` and ``rollback`` a placeholder is
an error because those stages describe software that runs or must be
restorable.
"""

from __future__ import annotations

import copy
import difflib
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import (
    METADATA_KEYS,
    STAGE_NAMES,
    VERSIONS_FORM_KEYS,
    VERSIONS_FORM_STAGES,
    Matrix,
    MatrixError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import (
    COMPONENT_EXAMPLES,
    DRIVER_TYPES,
    FIRMWARE_KEY_PATTERN,
    VERSION_COMPONENTS,
    VersionParseError,
    expected_text,
    is_placeholder,
    is_version_component,
    parse_version,
)

try:
    import jsonschema

    HAS_JSONSCHEMA = True
    JSONSCHEMA_IMPORT_ERROR: Optional[str] = None
except ImportError:
    HAS_JSONSCHEMA = False
    JSONSCHEMA_IMPORT_ERROR = traceback.format_exc()

PLACEHOLDER_STAGES = ("next_planned",)

_PLACEHOLDER_NOTE = (
    "A placeholder such as '6.x TBD' is accepted only in next_planned, where it is reported as a warning; "
    "in current_production, canary_testing and rollback it is an error."
)


def _version_property(component: str) -> Dict[str, Any]:
    if component == "driver_type":
        return {"type": "string", "enum": list(DRIVER_TYPES), "description": COMPONENT_EXAMPLES[component] + "."}
    return {"type": "string", "minLength": 1, "description": f"{COMPONENT_EXAMPLES[component]}. {_PLACEHOLDER_NOTE}"}


def _stage_schema(extra_keys: Dict[str, str]) -> Dict[str, Any]:
    properties: Dict[str, Any] = {name: {"$ref": f"#/definitions/versions/{name}"} for name in VERSION_COMPONENTS}
    for alias, target in extra_keys.items():
        properties[alias] = {"$ref": f"#/definitions/versions/{target if target in VERSION_COMPONENTS else 'firmware'}"}
    for key in METADATA_KEYS:
        properties[key] = {"type": "string", "description": "Metadata, not a version (quote dates)."}
    return {
        "type": "object",
        "minProperties": 1,
        "properties": properties,
        "patternProperties": {FIRMWARE_KEY_PATTERN.pattern: {"$ref": "#/definitions/versions/firmware"}},
        "additionalProperties": False,
    }


MATRIX_SCHEMA: Dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "$id": "urn:gpufleet-upgrade:matrix:v1",
    "title": "gpufleet.upgrade version matrix",
    "description": (
        "The content of matrix.yaml (alone, or inside a ConfigMap's data.matrix.yaml): either the stages "
        "current_production (required), canary_testing, next_planned and rollback, or the short form "
        "versions: {current, canary, next, rollback}. Each stage maps component keys to version strings "
        "(quote them: YAML reads 12.10 as the number 12.1); firmware_<name> keys hold NIC firmware. "
        "A component a stage leaves out keeps the version of the stage it builds on (next_planned builds on "
        "canary_testing, canary_testing and rollback on current_production). " + _PLACEHOLDER_NOTE
    ),
    "type": "object",
    "if": {"required": ["versions"]},
    "then": {"$ref": "#/definitions/versions_form"},
    "else": {"$ref": "#/definitions/stages_form"},
    "definitions": {
        "versions": dict(
            {name: _version_property(name) for name in VERSION_COMPONENTS},
            firmware=_version_property("firmware"),
        ),
        "stage": _stage_schema({}),
        "short_stage": _stage_schema(VERSIONS_FORM_KEYS),
        "stages_form": {
            "type": "object",
            "properties": {name: {"$ref": "#/definitions/stage"} for name in STAGE_NAMES},
            "required": ["current_production"],
            "additionalProperties": False,
        },
        "versions_form": {
            "type": "object",
            "properties": {
                "versions": {
                    "type": "object",
                    "description": "current = current_production, canary = canary_testing, next = next_planned; "
                    "driver = gpu_driver, sriov = sriov_operator, firmware = firmware_nic.",
                    "properties": {name: {"$ref": "#/definitions/short_stage"} for name in VERSIONS_FORM_STAGES},
                    "required": ["current"],
                    "additionalProperties": False,
                }
            },
            "required": ["versions"],
            "additionalProperties": False,
        },
    },
}


class MatrixSchemaUnavailableError(GpuFleetError):
    """jsonschema is not installed; the module reports it with missing_required_lib."""


@dataclass
class MatrixWarning:
    file: str
    stage: str
    key: str
    found: Any
    message: str

    def as_dict(self) -> Dict[str, Any]:
        return {"file": self.file, "stage": self.stage, "key": self.key, "found": self.found, "message": self.message}


@dataclass
class ValidationReport:
    errors: List[MatrixError] = field(default_factory=list)
    warnings: List[MatrixWarning] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def as_dict(self) -> Dict[str, Any]:
        return {
            "valid": self.ok,
            "errors": [error.as_dict() for error in self.errors],
            "warnings": [warning.as_dict() for warning in self.warnings],
        }


def matrix_schema() -> Dict[str, Any]:
    """A copy of the published schema (callers may not change the shared one)."""
    return copy.deepcopy(MATRIX_SCHEMA)


def _allowed_keys(short_form: bool) -> List[str]:
    names = list(VERSION_COMPONENTS) + list(METADATA_KEYS)
    if short_form:
        names += list(VERSIONS_FORM_KEYS)
    return names


def _did_you_mean(word: str, candidates: List[str]) -> Optional[str]:
    lowered = word.lower().replace("-", "_")
    if lowered.startswith("firmware"):
        if FIRMWARE_KEY_PATTERN.match(lowered) and lowered != word:
            return f"did you mean {lowered}?"
        if not FIRMWARE_KEY_PATTERN.match(lowered):
            return "did you mean firmware_<name>, e.g. firmware_cx7?"
    if lowered in candidates and lowered != word:
        return f"did you mean {lowered}?"
    close = difflib.get_close_matches(lowered, candidates, n=1, cutoff=0.6)
    if close:
        return f"did you mean {close[0]}?"
    return None


def _describe(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value) if not isinstance(value, (dict, list)) else value


def _locate(path: List[Any]) -> tuple:
    """(stage label, key, short form?) from a jsonschema error path."""
    if path and path[0] == "versions":
        written_stage = path[1] if len(path) > 1 else None
        stage = None
        if written_stage is not None:
            canonical = VERSIONS_FORM_STAGES.get(written_stage)
            stage = f"{written_stage} ({canonical})" if canonical and canonical != written_stage else str(written_stage)
        written_key = path[2] if len(path) > 2 else None
        key = None
        if written_key is not None:
            canonical_key = VERSIONS_FORM_KEYS.get(written_key)
            key = f"{written_key} ({canonical_key})" if canonical_key else str(written_key)
        return stage, key, True
    stage = str(path[0]) if path else None
    key = str(path[1]) if len(path) > 1 else None
    return stage, key, False


def _schema_errors(matrix: Matrix) -> List[MatrixError]:
    validator = jsonschema.Draft7Validator(MATRIX_SCHEMA)
    errors: List[MatrixError] = []
    raw = sorted(validator.iter_errors(matrix.document), key=lambda err: [str(part) for part in err.absolute_path])
    for error in raw:
        path = list(error.absolute_path)
        stage, key, short_form = _locate(path)
        if error.validator == "additionalProperties":
            errors.extend(_unknown_key_errors(matrix, error, path, short_form))
        elif error.validator == "type":
            expected_type = error.validator_value
            hint = None
            if expected_type == "string" and error.instance is None:
                hint = "write the version, or leave the key out to keep the one of the stage this builds on"
            elif expected_type == "string" and not isinstance(error.instance, (dict, list)):
                # As written: the float of cuda: 12.10 is 12.1, and quoting "12.1" would name another version.
                written = getattr(error.instance, "written", "") or error.instance
                hint = f'quote it in YAML: "{written}"; unquoted values become numbers or dates'
            article = (
                "a string"
                if expected_type == "string"
                else f"a {'mapping' if expected_type == 'object' else expected_type}"
            )
            errors.append(
                MatrixError(
                    file=matrix.source,
                    stage=stage,
                    key=key,
                    found=_describe(error.instance),
                    expected=article,
                    hint=hint,
                )
            )
        elif error.validator == "required":
            present = set(error.instance) if isinstance(error.instance, dict) else set()
            for missing in error.validator_value:
                if missing not in present:
                    where_stage = missing if path in ([], ["versions"]) else stage
                    errors.append(
                        MatrixError(
                            file=matrix.source,
                            stage=str(where_stage),
                            found=None,
                            expected=f"a stage {missing} (the baseline every other stage is compared with)",
                        )
                    )
        elif error.validator == "minProperties":
            errors.append(
                MatrixError(file=matrix.source, stage=stage, found={}, expected="at least one component version")
            )
        elif error.validator == "minLength":
            errors.append(MatrixError(file=matrix.source, stage=stage, key=key, found="", expected="a version"))
        elif error.validator == "enum":
            continue  # driver_type: the grammar check reports it once, in words
        else:
            errors.append(
                MatrixError(
                    file=matrix.source, stage=stage, key=key, found=_describe(error.instance), expected=error.message
                )
            )
    return errors


def _unknown_key_errors(matrix: Matrix, error: Any, path: List[Any], short_form: bool) -> List[MatrixError]:
    instance = error.instance if isinstance(error.instance, dict) else {}
    schema = error.schema
    allowed = set(schema.get("properties", {}))
    errors = []
    for key in instance:
        if key in allowed or (
            isinstance(key, str) and FIRMWARE_KEY_PATTERN.match(key) and "patternProperties" in schema
        ):
            continue
        if not path:
            # Top level of the stages form: an unknown stage name.
            errors.append(
                MatrixError(
                    file=matrix.source,
                    stage=str(key),
                    found=str(key),
                    expected="a stage: " + ", ".join(STAGE_NAMES),
                    hint=_did_you_mean(str(key), list(STAGE_NAMES)),
                )
            )
        elif path == ["versions"]:
            errors.append(
                MatrixError(
                    file=matrix.source,
                    stage=str(key),
                    found=str(key),
                    expected="a stage of the versions form: " + ", ".join(VERSIONS_FORM_STAGES),
                    hint=_did_you_mean(str(key), list(VERSIONS_FORM_STAGES)),
                )
            )
        else:
            stage, _key, _short = _locate([*path, key])
            errors.append(
                MatrixError(
                    file=matrix.source,
                    stage=stage,
                    key=str(key),
                    found=str(key),
                    expected="a known component ("
                    + ", ".join(VERSION_COMPONENTS)
                    + ", firmware_<name>) or a metadata key ("
                    + ", ".join(METADATA_KEYS)
                    + ")",
                    hint=_did_you_mean(str(key), _allowed_keys(short_form)),
                )
            )
    return errors


def _semantic_checks(matrix: Matrix, report: ValidationReport) -> None:
    for name, stage in matrix.stages.items():
        if name not in STAGE_NAMES:
            continue
        for key, value in stage.versions.items():
            if not isinstance(key, str) or not is_version_component(key) or not isinstance(value, str) or not value:
                continue  # the schema already named unknown keys and non-strings
            written_key = stage.written_keys.get(key)
            key_label = f"{written_key} ({key})" if written_key else key
            if is_placeholder(value):
                if name in PLACEHOLDER_STAGES:
                    report.warnings.append(
                        MatrixWarning(
                            file=matrix.source,
                            stage=stage.label(),
                            key=key_label,
                            found=value,
                            message=f"stage {stage.label()}, key {key_label}: placeholder {value!r}; "
                            "the plan is not concrete yet and rules can check only what it commits to",
                        )
                    )
                else:
                    report.errors.append(
                        MatrixError(
                            file=matrix.source,
                            stage=stage.label(),
                            key=key_label,
                            found=value,
                            expected="a concrete version: " + expected_text(key),
                            hint="placeholders are allowed only in next_planned",
                        )
                    )
                continue
            try:
                parse_version(key, value)
            except VersionParseError as exc:
                report.errors.append(
                    MatrixError(
                        file=matrix.source, stage=stage.label(), key=key_label, found=value, expected=exc.expected
                    )
                )


def validate_matrix(matrix: Matrix) -> ValidationReport:
    """Schema then grammar; errors first by position in the file."""
    if not HAS_JSONSCHEMA:
        raise MatrixSchemaUnavailableError("jsonschema is required to validate a version matrix")
    report = ValidationReport(errors=_schema_errors(matrix))
    _semantic_checks(matrix, report)
    return report


def assert_valid(matrix: Matrix) -> ValidationReport:
    """Validate and raise the first error (all errors in its result) so nothing else runs on a bad matrix."""
    report = validate_matrix(matrix)
    if report.errors:
        first = report.errors[0]
        first.result = report.as_dict()
        raise first
    return report
