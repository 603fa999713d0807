"""Loading the three matrix forms, effective versions, and file vs ConfigMap differences."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import (
    FORM_CONFIGMAP,
    FORM_STAGES,
    FORM_VERSIONS,
    MAX_MATRIX_BYTES,
    MatrixError,
    diff_matrices,
    load_matrix_file,
    matrix_from_configmap,
    matrix_from_data,
    matrix_from_text,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "matrix"


def test_configmap_form_of_seed_000() -> None:
    matrix = load_matrix_file(str(FIXTURES / "seed000-configmap.yaml"))
    assert matrix.form == FORM_CONFIGMAP
    assert list(matrix.stages) == ["current_production", "canary_testing", "next_planned", "rollback"]
    production = matrix.stages["current_production"]
    assert production.versions["gpu_driver"] == "560.35.03"
    assert production.versions["firmware_cx6"] == "22.40.1000"
    assert production.metadata["status"] == "production"
    assert "status" not in production.versions
    assert matrix.stages["canary_testing"].metadata["canary_node"] == "gpu-worker-4"


def test_plain_stages_form_loads_the_same_stages() -> None:
    configmap = load_matrix_file(str(FIXTURES / "seed000-configmap.yaml"))
    plain = load_matrix_file(str(FIXTURES / "seed000-stages.yaml"))
    assert plain.form == FORM_STAGES
    assert diff_matrices(configmap, plain) == []


def test_versions_form_of_seed_001_maps_stages_and_short_keys() -> None:
    matrix = load_matrix_file(str(FIXTURES / "seed001-versions.yaml"))
    assert matrix.form == FORM_VERSIONS
    assert list(matrix.stages) == ["current_production", "canary_testing"]
    canary = matrix.stages["canary_testing"]
    assert canary.versions["gpu_driver"] == "565.57.01"
    assert canary.versions["sriov_operator"] == "4.18.0"
    assert canary.versions["firmware_nic"] == "28.42.1000"
    assert canary.written_keys["gpu_driver"] == "driver"
    assert canary.label() == "canary (canary_testing)"


def test_the_source_file_name_is_kept_for_errors() -> None:
    path = str(FIXTURES / "seed000-stages.yaml")
    assert load_matrix_file(path).source == path


def test_invalid_yaml_names_file_and_line() -> None:
    path = str(FIXTURES / "not-yaml.txt")
    with pytest.raises(MatrixError) as caught:
        load_matrix_file(path)
    assert caught.value.file == path
    assert "line" in str(caught.value.found)
    assert str(caught.value).startswith(path)


def test_missing_file_is_a_matrix_error() -> None:
    with pytest.raises(MatrixError) as caught:
        load_matrix_file(str(FIXTURES / "no-such-matrix.yaml"))
    assert "readable matrix file" in caught.value.expected


def test_a_list_is_not_a_matrix() -> None:
    with pytest.raises(MatrixError) as caught:
        matrix_from_text("- current_production\n", source="inline")
    assert "a mapping of stages" in caught.value.expected


def test_configmap_without_matrix_yaml_names_the_key() -> None:
    configmap = {"kind": "ConfigMap", "metadata": {"name": "m"}, "data": {"a.txt": "x", "b.txt": "y"}}
    with pytest.raises(MatrixError) as caught:
        matrix_from_data(configmap, source="cm")
    assert caught.value.key == "data.matrix.yaml"


def test_configmap_object_from_the_api() -> None:
    document = yaml.safe_load((FIXTURES / "seed000-configmap.yaml").read_text())
    api_object = {"apiVersion": "v1", "metadata": document["metadata"], "data": document["data"]}
    matrix = matrix_from_configmap(api_object)
    assert matrix.source == "configmap gpu-operator/gpu-version-matrix"
    assert matrix.form == FORM_CONFIGMAP


def test_effective_versions_inherit_from_the_stage_built_on() -> None:
    matrix = load_matrix_file(str(FIXTURES / "seed000-stages.yaml"))
    assert matrix.predecessor("canary_testing") == "current_production"
    assert matrix.predecessor("next_planned") == "canary_testing"
    assert matrix.predecessor("rollback") == "current_production"
    next_planned = matrix.effective_versions("next_planned")
    # next_planned does not list dcgm: it keeps canary_testing's, not production's.
    assert next_planned["dcgm"] == "3.3.9-3.6.1"
    assert next_planned["firmware_cx6"] == "22.40.1000"
    assert next_planned["kernel"] == "6.x TBD"
    rollback = matrix.effective_versions("rollback")
    assert rollback["kernel"] == "5.14.0-427.40.1.el9_4.x86_64"
    assert rollback["gpu_operator"] == "v24.6.0"


def test_next_planned_builds_on_production_without_a_canary() -> None:
    matrix = matrix_from_data(
        {"current_production": {"nccl": "2.22.3", "cuda": "12.4"}, "next_planned": {"cuda": "12.6"}}, source="x"
    )
    assert matrix.predecessor("next_planned") == "current_production"
    assert matrix.effective_versions("next_planned") == {"nccl": "2.22.3", "cuda": "12.6"}


def test_diff_compares_versions_by_value() -> None:
    file_matrix = matrix_from_data(
        {"current_production": {"firmware_cx7": "28.40.1000", "gpu_operator": "v24.9.0", "notes": "a"}}, source="file"
    )
    cluster_matrix = matrix_from_data(
        {"current_production": {"firmware_cx7": "28.40.10.00", "gpu_operator": "24.9.0", "notes": "a"}}, source="cm"
    )
    assert diff_matrices(file_matrix, cluster_matrix) == []


def test_diff_reports_changed_missing_and_extra() -> None:
    file_matrix = load_matrix_file(str(FIXTURES / "seed000-stages.yaml"))
    document = yaml.safe_load((FIXTURES / "seed000-stages.yaml").read_text())
    document["canary_testing"]["gpu_driver"] = "570.124.06"
    document["current_production"]["notes"] = "edited in the cluster"
    del document["rollback"]
    document["current_production"]["nccl"] = "2.22.3"  # same: no difference
    cluster_matrix = matrix_from_data(document, source="cm")
    differences = {(d.stage, d.key): (d.left, d.right) for d in diff_matrices(file_matrix, cluster_matrix)}
    assert differences == {
        ("current_production", "notes"): ("Stable. 48h bake passed on all canary nodes.", "edited in the cluster"),
        ("canary_testing", "gpu_driver"): ("565.57.01", "570.124.06"),
        ("rollback", None): (True, False),
    }
    without_metadata = diff_matrices(file_matrix, cluster_matrix, include_metadata=False)
    assert {(d.stage, d.key) for d in without_metadata} == {("canary_testing", "gpu_driver"), ("rollback", None)}


@pytest.mark.parametrize(
    ("text", "key", "found"),
    [
        # PyYAML alone keeps the last of two equal keys: the stage would silently use 4.17.1.
        ("current_production:\n  openshift: 4.16.23\n  openshift: 4.17.1\n", "openshift", "a second openshift"),
        ("current_production: {a: '1'}\ncurrent_production: {a: '2'}\n", "current_production", "a second"),
        ("current_production:\n  on: '1'\n", "on", "a bool key at line 2"),
        ("current_production:\n  560: x\n", "560", "an int key at line 2"),
        ("current_production:\n  <<: {openshift: '4.16.23'}\n", "<<", "a merge key"),
    ],
)
def test_keys_written_twice_or_not_as_text_are_refused_with_their_line(text: str, key: str, found: str) -> None:
    with pytest.raises(MatrixError) as caught:
        matrix_from_text(text, source="m.yaml")
    assert caught.value.key == key
    assert found in caught.value.found


def test_a_duplicate_key_inside_the_configmaps_text_is_refused() -> None:
    text = "kind: ConfigMap\ndata:\n  matrix.yaml: |\n    current_production:\n      cuda: '12.6'\n      cuda: '12.8'\n"
    with pytest.raises(MatrixError) as caught:
        matrix_from_text(text, source="cm.yaml")
    assert caught.value.file == "cm.yaml data.matrix.yaml" and caught.value.key == "cuda"


def test_a_short_key_and_its_full_name_in_one_stage_are_refused() -> None:
    text = "versions:\n  current: {driver: '560.35.03', gpu_driver: '550.90.07'}\n"
    with pytest.raises(MatrixError) as caught:
        matrix_from_text(text, source="m.yaml")
    assert caught.value.found == "both driver and gpu_driver"
    assert caught.value.expected == "one of them (driver is short for gpu_driver)"


def test_aliases_and_deep_nesting_are_refused_before_they_cost_anything() -> None:
    # Nine levels of aliases expand to 10**9 nodes: refused at the first alias, in no time.
    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 10)
    )
    with pytest.raises(MatrixError) as caught:
        matrix_from_text(bomb, source="bomb.yaml")
    assert "alias *a0" in caught.value.found
    with pytest.raises(MatrixError) as caught:
        matrix_from_text("current_production: " + "[" * 2000 + "]" * 2000, source="deep.yaml")
    assert "nested levels" in caught.value.found


def test_files_too_big_not_utf8_or_not_files_name_what_is_wrong(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * MAX_MATRIX_BYTES + "\n")
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("current_production: {notes: 'd\xe9ploy\xe9'}\n".encode("latin-1"))
    cases = {big: "bytes", latin1: "not UTF-8", tmp_path: "a directory"}
    for path, found in cases.items():
        with pytest.raises(MatrixError) as caught:
            load_matrix_file(str(path))
        assert caught.value.file == str(path)
        assert found in caught.value.found
