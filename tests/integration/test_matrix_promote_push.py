"""matrix_promote pushes its commit and tag to a real Git remote (a local bare repository), or a branch for review;
a push that fails fails the task and says what stayed local."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

from .conftest import ROOT, run_playbook

EXAMPLE = ROOT / "examples" / "gpu-version-matrix.yaml"
PLAYBOOK = "tests/integration/playbooks/matrix_promote.yml"
TAG = "v2026-11-stable"


def git(repo: pathlib.Path, *args: str, check: bool = True) -> str:
    completed = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=30,
    )
    return completed.stdout.strip()


@pytest.fixture
def checkout(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A clone of a bare 'origin' holding the example matrix on main."""
    remote, work = tmp_path / "origin.git", tmp_path / "work"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True, timeout=30)
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True, timeout=30)
    shutil.copy(EXAMPLE, work / "matrix.yaml")
    git(work, "add", "matrix.yaml")
    git(work, "commit", "-q", "-m", "matrix")
    git(work, "remote", "add", "origin", str(remote))
    git(work, "push", "-q", "origin", "main")
    return work, remote


def promote(work: pathlib.Path, tmp_path: pathlib.Path, **options) -> tuple[int, dict, str]:
    result_file = tmp_path / "result.json"
    variables = {
        "promote": dict(
            {"path": str(work / "matrix.yaml"), "promoted_on": "2026-11-25", "git_commit": True}, **options
        ),
        "promote_result_file": str(result_file),
        # The connection options every module of the collection accepts (one module_defaults group).
        "k8s_auth": {"host": "https://127.0.0.1:1", "validate_certs": True},
    }
    run = run_playbook(PLAYBOOK, twin=None, extra_vars=variables, timeout=120)
    return run.returncode, json.loads(result_file.read_text()), run.output


def test_the_commit_and_its_tag_reach_the_remote(checkout, tmp_path):
    work, remote = checkout
    code, result, output = promote(work, tmp_path, git_push=True, git_token="s3cr3t-token-value")
    assert code == 0, output
    head = git(work, "rev-parse", "HEAD")
    assert git(remote, "rev-parse", "main") == head
    assert git(remote, "rev-parse", f"{TAG}^{{commit}}") == head
    pushed = result["git_push"]
    assert (pushed["pushed"], pushed["branch"], pushed["tag"], pushed["changed"]) == (True, "main", TAG, True)
    # A re-run (the file is promoted already) pushes again and finds the remote up to date.
    code, result, output = promote(work, tmp_path, git_push=True)
    assert code == 0, output
    assert (result["changed"], result["git_push"]["changed"]) == (False, False)


def test_a_review_branch_gets_the_commit_and_main_does_not(checkout, tmp_path):
    work, remote = checkout
    before = git(remote, "rev-parse", "main")
    code, result, output = promote(
        work, tmp_path, git_push=True, git_push_branch="gpufleet/promote-2026-11", git_push_tag=False
    )
    assert code == 0, output
    assert git(remote, "rev-parse", "gpufleet/promote-2026-11") == git(work, "rev-parse", "HEAD")
    assert git(remote, "rev-parse", "main") == before
    assert git(remote, "tag", "--list") == ""
    assert result["git_push"]["tag"] == ""


def test_a_refused_push_fails_and_says_what_stayed_local(checkout, tmp_path):
    work, remote = checkout
    # Someone else pushed to main meanwhile: the push is not a fast-forward.
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(remote), str(other)], check=True, timeout=30)
    (other / "README").write_text("elsewhere\n")
    git(other, "add", "README")
    git(other, "commit", "-q", "-m", "elsewhere")
    git(other, "push", "-q", "origin", "main")
    code, result, output = promote(work, tmp_path, git_push=True)
    assert code != 0, output
    head = git(work, "rev-parse", "HEAD")
    assert f"commit {head} and tag {TAG} are only local: git push to origin" in result["msg"]
    assert "rejected" in result["msg"]
    assert result["git"]["committed"] is True and result["git_push"]["pushed"] is False
    assert git(remote, "tag", "--list") == ""


def test_a_detached_head_needs_a_branch_name(checkout, tmp_path):
    work, remote = checkout
    git(work, "checkout", "-q", "--detach")
    code, result, output = promote(work, tmp_path, git_push=True)
    assert code != 0
    assert "HEAD is detached (as in an AWX project checkout), so name the remote branch" in result["msg"]
    code, result, output = promote(work, tmp_path, git_push=True, git_push_branch="main")
    assert code == 0, output
    assert git(remote, "rev-parse", "main") == git(work, "rev-parse", "HEAD")


def test_an_unreachable_remote_is_reported(checkout, tmp_path):
    work = checkout[0]
    code, result, output = promote(work, tmp_path, git_push=True, git_remote=str(tmp_path / "missing.git"))
    assert code != 0, output
    assert "are only local: git push to" in result["msg"]
