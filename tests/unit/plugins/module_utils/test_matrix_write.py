"""Promotion written back into the matrix: every form, comments kept, atomic write, Git commit and tag."""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils import _matrix_write
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, WaitTimeoutError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import load_catalog
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import matrix_from_text
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_planner import plan_stage
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_schema import assert_valid
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import (
    GitError,
    git_commit_and_tag,
    promote_matrix_file,
    promote_matrix_text,
    stable_tag,
    write_text_atomically,
)

ROOT = Path(__file__).resolve().parents[4]
EXAMPLE = ROOT / "examples" / "gpu-version-matrix.yaml"
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "matrix"

STAGES = textwrap.dedent(
    """\
    # Plain stages form.
    current_production:
      gpu_operator: "v24.9.0"   # what every node runs
      gpu_driver: "550.127.05"
      cuda: "12.4"
      openshift: "4.16.23"
      kernel: "5.14.0-427.40.1.el9_4.x86_64"
      status: "production"

    # The change being tried.
    canary_testing:
      gpu_operator: "v25.3.0"
      gpu_driver: "570.124.06"
      cuda: "12.8"
      nccl: "2.23.4"            # new component, not in production yet
      canary_node: "gpu-worker-004"

    # Kept for emergencies.
    rollback:
      gpu_operator: "v24.6.0"
      gpu_driver: "550.90.07"
      cuda: "12.4"
    """
)


def promote(text: str, **kwargs):
    return promote_matrix_text(
        text, source="matrix.yaml", promoted_on="2026-11-24", note="Promoted (ledger x).", **kwargs
    )


def test_configmap_form_promotes_inside_the_embedded_text_and_keeps_comments() -> None:
    before = EXAMPLE.read_text()
    result = promote(before)
    assert result.changed and result.form == "configmap"
    assert result.promoted["gpu_operator"] == "v25.3.0"
    assert result.rollback["gpu_operator"] == "v24.9.0"
    after = result.text
    header = [line for line in before.splitlines() if line.startswith("#")]
    assert header and header == [line for line in after.splitlines() if line.startswith("#")]
    assert "  matrix.yaml: |\n    current_production:\n" in after
    matrix = matrix_from_text(after, source="after")
    assert_valid(matrix)
    production = matrix.effective_versions("current_production")
    assert production["gpu_driver"] == "570.124.06"
    assert production["openshift"] == "4.16.20"  # untouched components stay
    assert matrix.stage("current_production").metadata == {
        "status": "production",
        "notes": "Promoted (ledger x).",
        "deployed": "2026-11-24",
    }
    assert matrix.stage("canary_testing").versions == {}
    assert matrix.stage("canary_testing").metadata["status"] == "promoted"
    assert matrix.effective_versions("rollback")["gpu_driver"] == "550.127.05"
    catalog = load_catalog()
    assert plan_stage(matrix, "canary_testing", catalog=catalog).groups == []
    assert plan_stage(matrix, "rollback", catalog=catalog).groups == ["gpu_operator"]


def test_seed_matrix_keeps_its_comments_and_next_planned() -> None:
    before = (FIXTURES / "seed000-configmap.yaml").read_text()
    after = promote(before).text
    for comment in ("# GPU Cluster Version Matrix", "# Tested by: Luca Berton", "# OCP upgrade after GPU Op stable"):
        assert comment in after
    matrix = matrix_from_text(after, source="after")
    # next_planned built on canary_testing; production now holds those versions, so it means the same.
    assert matrix.effective_versions("next_planned") == matrix_from_text(before, source="b").effective_versions(
        "next_planned"
    )


def test_stages_form_keeps_comments_order_and_places_new_components() -> None:
    result = promote(STAGES)
    after = result.text
    assert result.form == "stages"
    assert '  gpu_operator: "v25.3.0"   # what every node runs\n' in after
    assert "# The change being tried.\ncanary_testing:" in after
    assert "\n\n# Kept for emergencies.\nrollback:\n" in after
    production_block = after.split("# The change being tried.")[0]
    assert production_block.index("nccl") < production_block.index("status")  # before the metadata
    assert result.rollback == {"gpu_operator": "v24.9.0", "gpu_driver": "550.127.05", "cuda": "12.4"}
    assert "nccl" not in result.rollback  # production had none: nothing to go back to
    assert "canary_node" not in after


def test_versions_form_uses_its_own_key_names() -> None:
    before = (FIXTURES / "seed001-versions.yaml").read_text()
    result = promote(before)
    assert result.form == "versions"
    assert result.promoted["gpu_driver"] == "565.57.01"
    matrix = matrix_from_text(result.text, source="after")
    assert matrix.stage("current_production").written_keys.get("gpu_driver") == "driver"
    assert matrix.effective_versions("rollback")["gpu_driver"] == "560.35.03"
    assert "\n  rollback:\n    gpu_operator:" in result.text


def test_promoting_twice_changes_nothing_and_no_canary_is_nothing_to_do() -> None:
    once = promote(EXAMPLE.read_text())
    twice = promote(once.text)
    assert not twice.changed and twice.text == once.text
    assert "nothing to promote" in twice.message
    alone = 'current_production:\n  gpu_operator: "v24.9.0"\n'
    assert not promote(alone).changed
    with pytest.raises(InvalidInputError, match="no current_production"):
        promote('canary_testing:\n  gpu_operator: "v25.3.0"\n')
    with pytest.raises(InvalidInputError, match="not valid YAML"):
        promote("a: [\n")


def test_file_is_replaced_atomically_and_keeps_its_mode(tmp_path, monkeypatch) -> None:
    path = tmp_path / "gpu-version-matrix.yaml"
    path.write_text(EXAMPLE.read_text())
    path.chmod(0o640)
    renames = []
    real_replace = os.replace

    def recording_replace(source, target):
        renames.append((Path(source).parent, Path(target)))
        real_replace(source, target)

    monkeypatch.setattr(_matrix_write.os, "replace", recording_replace)
    checked = promote_matrix_file(str(path), promoted_on="2026-11-24", check_mode=True)
    assert checked.changed and path.read_text() == EXAMPLE.read_text() and renames == []
    result = promote_matrix_file(str(path), promoted_on="2026-11-24")
    assert renames == [(tmp_path, path)]  # the temporary file lived beside the target
    assert path.read_text() == result.text
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(item.name for item in tmp_path.iterdir()) == ["gpu-version-matrix.yaml"]


def test_failed_write_leaves_the_old_file(tmp_path, monkeypatch) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("old\n")

    def failing_replace(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_matrix_write.os, "replace", failing_replace)
    with pytest.raises(OSError):
        write_text_atomically(str(path), "new\n")
    assert path.read_text() == "old\n"
    assert [item.name for item in tmp_path.iterdir()] == ["m.yaml"]


def run(command: list) -> tuple:
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    return completed.returncode, completed.stdout, completed.stderr


def git(repo: Path, *args: str) -> str:
    completed = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return completed.stdout.strip()


def test_commit_and_tag_in_a_git_repository(tmp_path) -> None:
    repo = tmp_path / "fleet"
    (repo / "matrix").mkdir(parents=True)
    git(repo, "init", "-q")
    matrix = repo / "matrix" / "gpu-version-matrix.yaml"
    other = repo / "notes.txt"
    matrix.write_text(EXAMPLE.read_text())
    other.write_text("untouched\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "start")
    promote_matrix_file(str(matrix), promoted_on="2026-11-24")
    other.write_text("a local edit that must not be committed\n")
    done = git_commit_and_tag(run, path=str(matrix), message="Promote", tag=stable_tag("2026-11-24"))
    assert done["committed"] and done["tag"] == "v2026-11-stable" and not done["tag_existed"]
    assert git(repo, "rev-parse", "v2026-11-stable^{commit}") == done["commit"]
    assert git(repo, "show", "--name-only", "--format=", "HEAD") == "matrix/gpu-version-matrix.yaml"
    assert git(repo, "log", "-1", "--format=%an") == "gpufleet.upgrade"
    assert "notes.txt" in git(repo, "status", "--porcelain")
    # Nothing new to commit, and the month's tag exists: both reported, nothing moved.
    again = git_commit_and_tag(run, path=str(matrix), message="Promote", tag="v2026-11-stable")
    assert not again["committed"] and again["tag_existed"]
    assert again["commit"] == done["commit"]


def test_git_errors_name_the_command(tmp_path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text("x\n")
    with pytest.raises(GitError, match="git rev-parse --show-toplevel failed"):
        git_commit_and_tag(run, path=str(path), message="m", tag="")


# -- one promotion at a time per matrix folder ------------------------------------------------------


def test_a_second_promotion_waits_for_the_folder_lock_and_gives_up_at_its_timeout(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text("current_production: {}\n")
    with _matrix_write.matrix_folder_lock(str(matrix), timeout=1) as waited:
        assert waited < 1
        # Another process (a separate descriptor) cannot take it while it is held.
        other = os.open(tmp_path, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with (
                pytest.raises(WaitTimeoutError, match=f"another promotion of a matrix in {tmp_path}"),
                _matrix_write.matrix_folder_lock(str(matrix), timeout=0.3, sleep=0.1),
            ):
                pass
        finally:
            os.close(other)
    # Released when the block ends.
    with _matrix_write.matrix_folder_lock(str(matrix), timeout=0) as waited:
        assert waited < 0.1


def test_a_missing_matrix_folder_is_a_clear_error(tmp_path: Path) -> None:
    with (
        pytest.raises(InvalidInputError, match="Cannot open the matrix folder"),
        _matrix_write.matrix_folder_lock(str(tmp_path / "absent" / "matrix.yaml"), timeout=1),
    ):
        pass
