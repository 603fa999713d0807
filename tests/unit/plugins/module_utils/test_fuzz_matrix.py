"""Fuzzed matrices: random YAML trees and mutated real matrices through what gpu_matrix_check runs.

Whatever the file holds, the answer is a loaded, validated, planned matrix or a ``MatrixError`` (the collection's
``InvalidInputError``) naming the file, never another exception; and ``run_matrix_check`` refuses a bad matrix
before it builds a Kubernetes client (``connect``), so an input error costs no API request and writes nothing.
Profiles and how to run a longer campaign: tests/unit/conftest.py.
"""

from __future__ import annotations

import pathlib
import random
import string
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError, InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import load_catalog
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_check import MatrixSource, run_matrix_check
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import (
    METADATA_KEYS,
    STAGE_NAMES,
    VERSIONS_FORM_KEYS,
    VERSIONS_FORM_STAGES,
    MatrixError,
    diff_matrices,
    load_matrix_file,
    matrix_from_configmap,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_planner import plan_stage
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_rules import evaluate_matrix
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_schema import assert_valid
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import VERSION_COMPONENTS

ROOT = pathlib.Path(__file__).resolve().parents[4]
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "matrix"
# Every real matrix in the tree: the example users start from and the seed fixtures (good and bad ones).
REAL_MATRICES = sorted(
    [ROOT / "examples" / "gpu-version-matrix.yaml"]
    + [path for path in FIXTURES.glob("*.yaml") if not path.name.startswith("catalog")]
)
CATALOG = load_catalog()

# -- strategies ----------------------------------------------------------------------------------------

_WORDS = (
    list(STAGE_NAMES)
    + list(VERSIONS_FORM_STAGES)
    + list(VERSION_COMPONENTS)
    + list(VERSIONS_FORM_KEYS)
    + list(METADATA_KEYS)
    + ["versions", "kind", "data", "matrix.yaml", "ConfigMap", "firmware_cx7", "firmware_", "apiVersion"]
)
_VERSIONS = ["v24.9.0", "560.35.03", "570.124.06", "12.10", "4.16.19", "28.42.1000", "24.10-0.7.0.0", "6.x TBD", ""]
keys = st.one_of(st.sampled_from(_WORDS), st.text(max_size=12))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(_VERSIONS),
    st.text(max_size=20),
    st.dates(),
)
trees = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=5),
    ),
    max_leaves=30,
)
# Shaped like a matrix (stage -> component -> value) so the fuzzing reaches the schema, the grammar and the rules.
stage_bodies = st.dictionaries(
    st.one_of(st.sampled_from(list(VERSION_COMPONENTS) + list(METADATA_KEYS) + ["driver", "firmware_cx7"]), keys),
    st.one_of(st.sampled_from(_VERSIONS), scalars, trees),
    max_size=8,
)
matrix_like = st.one_of(
    st.dictionaries(st.sampled_from(list(STAGE_NAMES)) | keys, st.one_of(stage_bodies, trees), max_size=5),
    st.fixed_dictionaries(
        {"versions": st.dictionaries(st.sampled_from(list(VERSIONS_FORM_STAGES)) | keys, stage_bodies, max_size=4)}
    ),
    st.fixed_dictionaries(
        {"kind": st.just("ConfigMap"), "data": st.one_of(trees, st.fixed_dictionaries({"matrix.yaml": st.text()}))}
    ),
    trees,
)
# What a person's editor, a merge or a bad copy does to a file.
_INSERTS = ["[", "]", "{", "}", ":", ": ", "- ", "\t", "  ", "*a", "&a ", "<<: *a", "!!python/object:os.system", "~",
            "null", "12.10", "yes", "on", "0800", "'", '"', "\\", "#", "\n", "---\n", "...", "%TAG", "\x00", "\ufeff",
            "\u2028", "é", "current_production:", "gpu_driver: 1", "? ", "|", ">"]  # fmt: skip


@st.composite
def mutated_matrix_text(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(REAL_MATRICES)).read_text()
    rng = random.Random(draw(st.integers(min_value=0, max_value=2**32)))
    for _mutation in range(draw(st.integers(min_value=1, max_value=4))):
        lines = text.splitlines(keepends=True) or [""]
        choice = rng.randrange(7)
        at = rng.randrange(len(lines))
        if choice == 0:  # a line dropped
            del lines[at]
        elif choice == 1:  # a line written twice
            lines.insert(at, lines[at])
        elif choice == 2:  # two lines swapped
            other = rng.randrange(len(lines))
            lines[at], lines[other] = lines[other], lines[at]
        elif choice == 3:  # indentation changed
            lines[at] = rng.choice(["", " ", "    ", "\t"]) + lines[at].lstrip(" ")
        elif choice == 4:  # something inserted
            column = rng.randrange(len(lines[at]) + 1)
            lines[at] = lines[at][:column] + rng.choice(_INSERTS) + lines[at][column:]
        elif choice == 5:  # a value replaced
            head, sep, _value = lines[at].partition(":")
            if sep:
                lines[at] = f"{head}: {rng.choice(_INSERTS + _VERSIONS)}\n"
        else:  # the file cut short (an interrupted copy)
            joined = "".join(lines)
            lines = [joined[: rng.randrange(len(joined) + 1)]]
        text = "".join(lines)
    return text


# -- the property ------------------------------------------------------------------------------------


class ConnectCalled(Exception):
    """The check reached the point where it would build a Kubernetes client."""


def refuse_to_connect() -> Any:
    raise ConnectCalled()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return tmp_path_factory.mktemp("fuzz-matrix")


def check_matrix_file(path: pathlib.Path) -> None:
    """What gpu_matrix_check does with a file: a result, or a MatrixError naming the file; the client comes last."""
    try:
        matrix = load_matrix_file(str(path))
        assert_valid(matrix)
    except MatrixError as err:
        # The file, and for a ConfigMap file the data key holding the text.
        assert err.file.startswith(str(path)), err.msg
        assert err.msg.startswith(str(path)), err.msg
        if "invalid YAML" in err.msg:
            assert "line " in err.msg, err.msg  # where in the file
        # The module refuses the same file before it builds a client: no API request, nothing written.
        with pytest.raises(InvalidInputError):
            run_matrix_check(MatrixSource(path=str(path)), target_stage="canary_testing", audit=True,
                             connect=refuse_to_connect)  # fmt: skip
        return
    # A valid matrix: the rules, every plan and the comparison run to a result (or refuse with the collection's
    # error), and only then would the module connect.
    try:
        evaluate_matrix(matrix, catalog=CATALOG).as_dict()
        for stage in STAGE_NAMES:
            plan_stage(matrix, stage, catalog=CATALOG).as_dict()
        diff_matrices(matrix, matrix)
    except GpuFleetError as err:
        assert str(path) in err.msg or err.msg, err
    with pytest.raises((ConnectCalled, GpuFleetError)):
        run_matrix_check(MatrixSource(path=str(path)), target_stage="canary_testing", audit=True,
                         connect=refuse_to_connect)  # fmt: skip


def write(workdir: pathlib.Path, text: str, name: str = "matrix.yaml") -> pathlib.Path:
    path = workdir / name
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return path


@given(tree=st.one_of(matrix_like, trees))
def test_random_yaml_trees_load_or_fail_naming_the_file(workdir: pathlib.Path, tree: Any) -> None:
    check_matrix_file(write(workdir, yaml.safe_dump(tree, allow_unicode=True)))


@given(tree=matrix_like)
def test_random_json_trees_load_or_fail_naming_the_file(workdir: pathlib.Path, tree: Any) -> None:
    # JSON is YAML too; a matrix exported by a tool may arrive that way (dates as text).
    check_matrix_file(write(workdir, yaml.safe_dump(tree, default_flow_style=True, width=10**6)))


@given(text=mutated_matrix_text())
def test_mutated_real_matrices_load_or_fail_naming_the_file(workdir: pathlib.Path, text: str) -> None:
    check_matrix_file(write(workdir, text))


@given(text=st.text(alphabet=st.sampled_from([*string.printable, "é", "\u2028", "\ufeff"]), max_size=300))
def test_random_text_loads_or_fails_naming_the_file(workdir: pathlib.Path, text: str) -> None:
    check_matrix_file(write(workdir, text))


@given(data=st.dictionaries(keys, st.one_of(trees, st.text()), max_size=4), name=st.text(max_size=10))
def test_random_configmap_data_loads_or_fails_naming_the_configmap(data: dict[str, Any], name: str) -> None:
    source = f"ConfigMap gpu-operator/{name}"
    configmap = {"metadata": {"name": name, "namespace": "gpu-operator"}, "data": data}
    try:
        assert_valid(matrix_from_configmap(configmap, source=source))
    except MatrixError as err:
        assert err.msg.startswith(source), err.msg


# -- regression examples the fuzzing found --------------------------------------------------------------


def test_a_control_character_is_refused_with_its_line_and_column(workdir: pathlib.Path) -> None:
    # PyYAML's reader error has a position, not a mark: the message said "invalid YAML at the text".
    path = write(workdir, "current_production:\n  gpu_operator: v24.9.0\n  gpu_driver: 560.35.03\x0c\n", "ctrl.yaml")
    with pytest.raises(MatrixError) as caught:
        load_matrix_file(str(path))
    assert "invalid YAML at line 3, column 24" in caught.value.msg
    assert "#x000c" in caught.value.msg
