# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The version matrix as data: loading its three forms, stages, differences (collection-internal).

Forms accepted (docs/matrix.md):

* a ConfigMap whose ``data`` holds ``matrix.yaml`` with the stages
  (``current_production``, ``canary_testing``, ``next_planned``, ``rollback``);
* the same stages as a plain YAML mapping;
* ``versions: {current: ..., canary: ...}`` where ``current`` is
  ``current_production`` and ``canary`` is ``canary_testing`` (also ``next``
  and ``rollback``), with the short keys ``driver``, ``sriov`` and
  ``firmware`` standing for ``gpu_driver``, ``sriov_operator`` and
  ``firmware_nic``.

A stage lists what it pins; a component it leaves out keeps the version of
the stage it builds on (``effective_versions``): canary_testing and rollback
build on current_production, next_planned on canary_testing (on
current_production when there is no canary stage). The only I/O here is
``load_matrix_file`` reading the path it is given.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import (
    is_version_component,
    same_version,
)

try:
    import yaml

    HAS_YAML = True
    YAML_IMPORT_ERROR: Optional[str] = None
except ImportError:
    HAS_YAML = False
    YAML_IMPORT_ERROR = traceback.format_exc()

BASELINE_STAGE = "current_production"
STAGE_NAMES = ("current_production", "canary_testing", "next_planned", "rollback")
METADATA_KEYS = ("status", "deployed", "notes", "canary_node", "target_date", "tested_by", "last_tested")
CONFIGMAP_DATA_KEY = "matrix.yaml"

# The short form of seed 001 (versions: current/canary) and its key vocabulary.
VERSIONS_FORM_STAGES = {
    "current": "current_production",
    "canary": "canary_testing",
    "next": "next_planned",
    "rollback": "rollback",
}
VERSIONS_FORM_KEYS = {"driver": "gpu_driver", "sriov": "sriov_operator", "firmware": "firmware_nic"}

# A ConfigMap holds at most 1 MiB, so a bigger matrix could never live in the cluster; the bound also keeps a
# hostile file from costing memory. No matrix or catalog nests deeper than a handful of levels.
MAX_MATRIX_BYTES = 1024 * 1024
MAX_NESTING = 32
# How much of a found value an error message shows.
_FOUND_CHARS = 200

FORM_CONFIGMAP = "configmap"
FORM_STAGES = "stages"
FORM_VERSIONS = "versions"


class MatrixError(InvalidInputError):
    """A matrix that cannot be used: names the file, the stage, the key, what was found and what was expected."""

    def __init__(
        self,
        *,
        file: str,
        expected: str,
        stage: Optional[str] = None,
        key: Optional[str] = None,
        found: Any = None,
        hint: Optional[str] = None,
    ) -> None:
        self.file = file
        self.stage = stage
        self.key = key
        self.found = found
        self.expected = expected
        self.hint = hint
        super().__init__(self._render())

    def _render(self) -> str:
        where = [self.file or "matrix"]
        if self.stage:
            where.append(f"stage {self.stage}")
        if self.key:
            where.append(f"key {self.key}")
        found = "nothing" if self.found is None else repr(self.found)
        if len(found) > _FOUND_CHARS:
            found = found[:_FOUND_CHARS] + "..."
        text = f"{', '.join(where)}: found {found}, expected {self.expected}"
        if self.hint:
            text += f" ({self.hint})"
        return text

    def as_dict(self) -> Dict[str, Any]:
        return {
            "file": self.file,
            "stage": self.stage,
            "key": self.key,
            "found": self.found,
            "expected": self.expected,
            "hint": self.hint,
            "message": self.msg,
        }


@dataclass
class Stage:
    """One stage: component versions and metadata, as written (values not yet validated)."""

    name: str
    versions: Dict[str, Any] = field(default_factory=dict)
    metadata: Dict[str, Any] = field(default_factory=dict)
    # The names the file used, when they differ (versions form: canary -> canary_testing).
    written_name: Optional[str] = None
    written_keys: Dict[str, str] = field(default_factory=dict)

    def label(self) -> str:
        if self.written_name and self.written_name != self.name:
            return f"{self.written_name} ({self.name})"
        return self.name


@dataclass
class Matrix:
    """A loaded matrix. ``document`` is the stages mapping as written, the thing the schema validates."""

    source: str
    form: str
    stages: Dict[str, Stage]
    document: Any

    def stage(self, name: str) -> Optional[Stage]:
        return self.stages.get(name)

    def predecessor(self, name: str) -> Optional[str]:
        """The stage ``name`` builds on: the one before it in the pipeline (rollback builds on production)."""
        if name == BASELINE_STAGE:
            return None
        if name == "next_planned" and "canary_testing" in self.stages:
            return "canary_testing"
        return BASELINE_STAGE

    def effective_versions(self, name: str) -> Dict[str, Any]:
        """The versions a stage means: its predecessor's effective versions, overlaid with what it pins."""
        previous = self.predecessor(name)
        versions: Dict[str, Any] = self.effective_versions(previous) if previous else {}
        stage = self.stages.get(name)
        if stage is not None:
            versions.update(stage.versions)
        return versions


@dataclass
class MatrixDifference:
    """One difference between two matrices (file vs in-cluster ConfigMap)."""

    stage: str
    key: Optional[str]
    left: Any
    right: Any

    def as_dict(self) -> Dict[str, Any]:
        return {"stage": self.stage, "key": self.key, "left": self.left, "right": self.right}

    def describe(self) -> str:
        if self.key is None:
            left = "present" if self.left else "absent"
            right = "present" if self.right else "absent"
            return f"stage {self.stage}: {left} on the left, {right} on the right"
        return f"stage {self.stage}, key {self.key}: {self.left!r} != {self.right!r}"


def _require_yaml() -> None:
    if not HAS_YAML:
        raise InvalidInputError("PyYAML is required to read a version matrix")


class WrittenFloat(float):
    """A YAML number as the file wrote it: ``cuda: 12.10`` is the float 12.1, but errors must show 12.10."""

    written: str = ""

    def __repr__(self) -> str:
        return self.written or float.__repr__(self)


class WrittenInt(int):
    """A YAML integer as the file wrote it (``0800`` is octal 512 in YAML 1.1)."""

    written: str = ""

    def __repr__(self) -> str:
        return self.written or int.__repr__(self)


class _RefusedYaml(Exception):
    """YAML that parses but that a matrix or catalog must not contain; carries what a MatrixError names."""

    def __init__(self, *, key: Optional[str], found: str, expected: str, hint: Optional[str] = None) -> None:
        super().__init__(found)
        self.key = key
        self.found = found
        self.expected = expected
        self.hint = hint


def _at(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


if HAS_YAML:

    class _MatrixLoader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
        """``yaml.SafeLoader`` with the checks a file of versions needs.

        PyYAML lets a later duplicate key replace an earlier one, reads ``on:`` as a boolean key and
        expands aliases however often they nest (a few hundred bytes can expand to gigabytes); a matrix
        has no use for any of that, so each is refused with its place in the file. Numbers keep their
        written text so an error about ``12.10`` shows ``12.10``, not ``12.1``.
        """

        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise _RefusedYaml(
                    key=None,
                    found=f"the alias *{event.anchor} at {_at(event.start_mark)}",
                    expected="plain values (anchors and aliases are not supported)",
                    hint="a stage already inherits every version it does not pin from the stage it builds on",
                )
            self._depth += 1
            try:
                if self._depth > MAX_NESTING:
                    event = self.peek_event()
                    raise _RefusedYaml(
                        key=None,
                        found=f"more than {MAX_NESTING} nested levels at {_at(event.start_mark)}",
                        expected="a matrix a few levels deep",
                    )
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: Dict[str, Any] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise _RefusedYaml(
                        key="<<",
                        found=f"a merge key at {_at(key_node.start_mark)}",
                        expected="plain keys (merge keys are not supported)",
                    )
                if key_node.tag != "tag:yaml.org,2002:str":
                    kind = key_node.tag.rsplit(":", 1)[-1]
                    raise _RefusedYaml(
                        key=str(key_node.value),
                        found=f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} key at {_at(key_node.start_mark)}",
                        expected="a string key",
                        hint=f'quote it in YAML: "{key_node.value}"; unquoted on/off/yes/no are booleans, '
                        "digits are numbers",
                    )
                if key_node.value in seen:
                    raise _RefusedYaml(
                        key=key_node.value,
                        found=f"a second {key_node.value} at {_at(key_node.start_mark)}",
                        expected=f"each key once (the first is at {_at(seen[key_node.value])})",
                        hint="YAML would silently keep only the last one",
                    )
                seen[key_node.value] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

        def construct_written_float(self, node: Any) -> WrittenFloat:
            number = WrittenFloat(self.construct_yaml_float(node))
            number.written = str(node.value)
            return number

        def construct_written_int(self, node: Any) -> WrittenInt:
            number = WrittenInt(self.construct_yaml_int(node))
            number.written = str(node.value)
            return number

    _MatrixLoader.add_constructor("tag:yaml.org,2002:float", _MatrixLoader.construct_written_float)
    _MatrixLoader.add_constructor("tag:yaml.org,2002:int", _MatrixLoader.construct_written_int)


def parse_yaml_text(text: str, *, source: str) -> Any:
    """Parse a matrix or catalog text with ``_MatrixLoader``; every problem is a MatrixError naming ``source``."""
    _require_yaml()
    if len(text) > MAX_MATRIX_BYTES:
        raise MatrixError(
            file=source,
            found=f"{len(text)} characters",
            expected=f"at most {MAX_MATRIX_BYTES} (1 MiB, what a ConfigMap can hold)",
        )
    try:
        return yaml.load(text, Loader=_MatrixLoader)  # nosec B506 - _MatrixLoader is a SafeLoader
    except _RefusedYaml as exc:
        raise MatrixError(file=source, key=exc.key, found=exc.found, expected=exc.expected, hint=exc.hint) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        position = getattr(exc, "position", None)  # a ReaderError (a character YAML refuses) has no mark
        if mark is not None:
            where = f"line {mark.line + 1}, column {mark.column + 1}"
        elif isinstance(position, int):
            line_start = text.rfind("\n", 0, position) + 1
            where = f"line {text.count(chr(10), 0, position) + 1}, column {position - line_start + 1}"
        else:
            where = "the text"
        raise MatrixError(
            file=source, found=f"invalid YAML at {where}", expected="a YAML document", hint=str(exc).splitlines()[0]
        ) from exc


def _stage_from_mapping(
    name: str, body: Mapping, *, source: str, written_name: str, key_aliases: Mapping[str, str]
) -> Stage:
    stage = Stage(name=name, written_name=written_name)
    for written_key, value in body.items():
        key = key_aliases.get(written_key, written_key) if isinstance(written_key, str) else written_key
        if key in stage.versions or key in stage.metadata:
            # driver and gpu_driver in one stage (the loader already refused a key written twice).
            other = stage.written_keys.get(key, key)
            short = written_key if key != written_key else other
            raise MatrixError(
                file=source,
                stage=stage.label(),
                key=str(written_key),
                found=f"both {other} and {written_key}",
                expected=f"one of them ({short} is short for {key})",
            )
        if key != written_key:
            stage.written_keys[key] = written_key
        if isinstance(key, str) and key in METADATA_KEYS:
            stage.metadata[key] = value
        else:
            # Unknown keys are kept here: the schema names them with a hint.
            stage.versions[key] = value
    return stage


def _unwrap_configmap(data: Mapping, *, source: str) -> Any:
    payload = data.get("data")
    if not isinstance(payload, Mapping):
        raise MatrixError(
            file=source, key="data", found=payload, expected=f"a ConfigMap data map holding {CONFIGMAP_DATA_KEY}"
        )
    text = payload.get(CONFIGMAP_DATA_KEY)
    if text is None:
        yaml_keys = [key for key in payload if isinstance(key, str) and key.endswith((".yaml", ".yml"))]
        if len(yaml_keys) != 1:
            raise MatrixError(
                file=source,
                key=f"data.{CONFIGMAP_DATA_KEY}",
                found=sorted(str(key) for key in payload),
                expected=f"a ConfigMap data key {CONFIGMAP_DATA_KEY}",
            )
        text = payload[yaml_keys[0]]
    if not isinstance(text, str):
        raise MatrixError(file=source, key=f"data.{CONFIGMAP_DATA_KEY}", found=text, expected="a YAML text")
    return parse_yaml_text(text, source=f"{source} data.{CONFIGMAP_DATA_KEY}")


def matrix_from_data(data: Any, *, source: str) -> Matrix:
    """Build a Matrix from parsed YAML/JSON data in any of the three forms."""
    form = FORM_STAGES
    document = data
    if isinstance(data, Mapping) and data.get("kind") == "ConfigMap":
        form = FORM_CONFIGMAP
        document = _unwrap_configmap(data, source=source)
    if not isinstance(document, Mapping):
        raise MatrixError(
            file=source,
            found=type(document).__name__ if document is not None else None,
            expected="a mapping of stages (current_production, canary_testing, next_planned, rollback), "
            "a ConfigMap with data.matrix.yaml, or versions: {current, canary}",
        )
    stages: Dict[str, Stage] = {}
    if "versions" in document and isinstance(document.get("versions"), Mapping):
        form = FORM_VERSIONS if form == FORM_STAGES else form
        for written_name, body in document["versions"].items():
            name = VERSIONS_FORM_STAGES.get(written_name, written_name)
            if isinstance(body, Mapping):
                stages[str(name)] = _stage_from_mapping(
                    str(name), body, source=source, written_name=str(written_name), key_aliases=VERSIONS_FORM_KEYS
                )
    else:
        for name, body in document.items():
            if isinstance(body, Mapping):
                stages[str(name)] = _stage_from_mapping(
                    str(name), body, source=source, written_name=str(name), key_aliases={}
                )
    return Matrix(source=source, form=form, stages=stages, document=document)


def matrix_from_text(text: str, *, source: str) -> Matrix:
    return matrix_from_data(parse_yaml_text(text, source=source), source=source)


def matrix_from_configmap(configmap: Mapping, *, source: Optional[str] = None) -> Matrix:
    """A Matrix from a ConfigMap object as the API returns it (the in-cluster copy)."""
    metadata = configmap.get("metadata") or {}
    label = source or "configmap {}/{}".format(metadata.get("namespace", ""), metadata.get("name", ""))
    wrapped = dict(configmap)
    wrapped.setdefault("kind", "ConfigMap")
    return matrix_from_data(wrapped, source=label)


def read_text_file(path: str, *, what: str) -> str:
    """A matrix or catalog file's text: a missing, oversized or non-UTF-8 file is a MatrixError naming it."""
    try:
        if not os.path.isfile(path):
            raise MatrixError(
                file=path,
                found="no such file" if not os.path.exists(path) else "a directory or special file",
                expected=f"a readable {what} file",
            )
        if os.path.getsize(path) > MAX_MATRIX_BYTES:
            raise MatrixError(
                file=path,
                found=f"{os.path.getsize(path)} bytes",
                expected=f"at most {MAX_MATRIX_BYTES} (1 MiB, what a ConfigMap can hold)",
            )
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise MatrixError(file=path, found=exc.strerror, expected=f"a readable {what} file") from exc
    except UnicodeDecodeError as exc:
        raise MatrixError(
            file=path,
            found=f"byte 0x{exc.object[exc.start]:02x} at offset {exc.start}, not UTF-8",
            expected=f"a UTF-8 {what} file",
        ) from exc


def load_matrix_file(path: str) -> Matrix:
    """Read and load a matrix file; the file name is kept for every error."""
    return matrix_from_text(read_text_file(path, what="matrix"), source=path)


def diff_matrices(left: Matrix, right: Matrix, *, include_metadata: bool = True) -> List[MatrixDifference]:
    """Differences between two matrices, stage by stage; versions compare by value (28.40.10.00 == 28.40.1000)."""
    differences: List[MatrixDifference] = []
    names = [name for name in STAGE_NAMES if name in left.stages or name in right.stages]
    names += sorted((set(left.stages) | set(right.stages)) - set(names))
    for name in names:
        left_stage, right_stage = left.stages.get(name), right.stages.get(name)
        if left_stage is None or right_stage is None:
            differences.append(
                MatrixDifference(stage=name, key=None, left=left_stage is not None, right=right_stage is not None)
            )
            continue
        left_values = dict(left_stage.versions)
        right_values = dict(right_stage.versions)
        if include_metadata:
            left_values.update(left_stage.metadata)
            right_values.update(right_stage.metadata)
        for key in sorted(set(left_values) | set(right_values), key=str):
            left_value, right_value = left_values.get(key), right_values.get(key)
            if isinstance(key, str) and is_version_component(key):
                equal = same_version(key, _as_text(left_value), _as_text(right_value))
            else:
                equal = left_value == right_value
            if not equal:
                differences.append(MatrixDifference(stage=name, key=str(key), left=left_value, right=right_value))
    return differences


def _as_text(value: Any) -> Optional[str]:
    return None if value is None else str(value)
