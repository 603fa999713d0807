"""GitOps mode: manifest edits that keep formatting, commit trailers, revert, push, and the Application's status."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError, InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops import (
    application_view,
    commit_message,
    commits_to_revert,
    deferred_change,
    edit_manifest,
    managed_objects,
    revision_outcome,
    stage_refusal,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops_change import (
    GitopsChangeRequest,
    run_gitops_change,
)

MANIFEST = textwrap.dedent(
    """\
    # Managed by Argo CD: edit in Git, never on the cluster.
    ---
    apiVersion: nvidia.com/v1
    kind: ClusterPolicy
    metadata:
      name: cluster-policy   # the one the operator honours
    spec:
      operator:
        defaultRuntime: crio
      driver:
        enabled: true
        # Pinned by the platform team; the upgrade collection moves it.
        version: "550.127.05"
        repository: 'nvcr.io/nvidia'
        upgradePolicy:
          autoUpgrade: true
          maxParallelUpgrades: 1   # one node at a time
      toolkit:
        enabled: true
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: unrelated
    data:
      key: value
    """
)


def test_edit_changes_only_the_fields_and_keeps_comments_quotes_and_other_documents() -> None:
    patch = {"spec": {"driver": {"version": "570.124.06", "upgradePolicy": {"maxUnavailable": "25%"}}}}
    edit = edit_manifest(MANIFEST, path="cp.yaml", kind="ClusterPolicy", name="cluster-policy", patch=patch)
    assert edit.changed
    assert edit.before["spec"]["driver"]["version"] == "550.127.05"
    assert edit.after["spec"]["driver"]["version"] == "570.124.06"
    old_lines = MANIFEST.splitlines()
    new_lines = edit.text.splitlines()
    removed = [line for line in old_lines if line not in new_lines]
    added = [line for line in new_lines if line not in old_lines]
    # The version keeps its double quotes; the new key lands in its mapping; nothing else moves.
    assert removed == ['    version: "550.127.05"']
    assert added == ['    version: "570.124.06"', "      maxUnavailable: 25%"]
    assert "# Pinned by the platform team" in edit.text and "# the one the operator honours" in edit.text
    assert "kind: ConfigMap" in edit.text


def test_edit_is_idempotent_and_null_removes_a_field() -> None:
    same = edit_manifest(
        MANIFEST,
        path="cp.yaml",
        kind="ClusterPolicy",
        name="cluster-policy",
        patch={"spec": {"driver": {"version": "550.127.05"}}},
    )
    assert not same.changed and same.text == MANIFEST
    removed = edit_manifest(
        MANIFEST,
        path="cp.yaml",
        kind="ClusterPolicy",
        name="cluster-policy",
        patch={"spec": {"driver": {"upgradePolicy": {"maxParallelUpgrades": None}}}},
    )
    assert "maxParallelUpgrades" not in removed.text and "autoUpgrade: true" in removed.text


def test_edit_names_the_file_when_the_object_is_not_there() -> None:
    with pytest.raises(InvalidInputError, match=r"cp.yaml holds no ClusterPolicy named other .*ConfigMap/unrelated"):
        edit_manifest(MANIFEST, path="cp.yaml", kind="ClusterPolicy", name="other", patch={"spec": {}})


def test_managed_objects_are_checked() -> None:
    assert managed_objects([{"kind": "ClusterPolicy", "name": "cp", "path": "/gpu/cp.yaml"}])[0].path == "gpu/cp.yaml"
    with pytest.raises(InvalidInputError, match=r"manifests\[0\] lacks path"):
        managed_objects([{"kind": "ClusterPolicy", "name": "cp"}])


def test_revert_skips_what_a_revert_commit_already_took_back() -> None:
    canary = commit_message(summary="canary", change_id="c-1", stage="canary")
    assert "Gpufleet-Change: c-1" in canary and "Gpufleet-Stage: canary" in canary
    revert = commit_message(summary="Revert change c-1", change_id="c-1", stage="rollback", reverts=["aaa"])
    log = [("ccc", "promote\n\nGpufleet-Change: c-1"), ("bbb", revert), ("aaa", canary)]
    assert commits_to_revert(log) == ["ccc"]


def application(**status) -> dict:
    return {"metadata": {"name": "gpu-operator", "namespace": "argocd"}, "status": status}


SYNCED = {
    "sync": {"status": "Synced", "revision": "abc"},
    "health": {"status": "Healthy"},
    "operationState": {"phase": "Succeeded", "syncResult": {"revision": "abc"}},
}


def test_a_stage_is_refused_on_an_application_out_of_sync_naming_it_and_its_conditions() -> None:
    assert stage_refusal(application_view(application(**SYNCED))) == ""
    app = application(
        sync={"status": "OutOfSync", "revision": "abc"},
        health={"status": "Healthy"},
        resources=[{"kind": "ClusterPolicy", "name": "cluster-policy", "status": "OutOfSync"}],
        conditions=[{"type": "ComparisonError", "message": "repository not accessible"}],
    )
    refusal = stage_refusal(application_view(app))
    assert "Argo CD Application argocd/gpu-operator" in refusal and "not synced" in refusal
    assert "ComparisonError: repository not accessible" in refusal and "Nothing was committed" in refusal
    # The ClusterPolicy's permanent OutOfSync (defaulted fields) can be accepted by kind; the condition still refuses.
    app["status"].pop("conditions")
    assert stage_refusal(application_view(app), out_of_sync_allowed=["ClusterPolicy"]) == ""


def test_revision_outcome_waits_for_the_commit_and_its_operation() -> None:
    view = application_view(application(**SYNCED))
    assert revision_outcome(view, "abc") == "done"
    assert revision_outcome(view, "def") == "waiting"
    failed = application(
        sync={"status": "OutOfSync", "revision": "abc"},
        operationState={"phase": "Failed", "message": "one or more objects failed", "syncResult": {"revision": "def"}},
    )
    assert revision_outcome(application_view(failed), "def") == "failed"


def git(repo: Path, *args: str) -> str:
    completed = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return completed.stdout.strip()


def run(command: list) -> tuple:
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    return completed.returncode, completed.stdout, completed.stderr


def run_env(command: list, env: dict) -> tuple:
    return run(command)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    seed = tmp_path / "seed"
    subprocess.run(["git", "clone", "-q", str(remote), str(seed)], check=True, capture_output=True)
    git(seed, "checkout", "-q", "-b", "main")
    (seed / "gpu-operator").mkdir()
    (seed / "gpu-operator" / "clusterpolicy.yaml").write_text(MANIFEST)
    git(seed, "add", ".")
    git(seed, "commit", "-q", "-m", "start")
    git(seed, "push", "-q", "origin", "main")
    return remote


def request(repository: Path, remote: Path, **overrides) -> GitopsChangeRequest:
    fields = {
        "repository": str(repository),
        "repository_url": str(remote),
        "branch": "main",
        "manifests": managed_objects(
            [{"kind": "ClusterPolicy", "name": "cluster-policy", "path": "gpu-operator/clusterpolicy.yaml"}]
        ),
        "changes": [
            {
                "kind": "ClusterPolicy",
                "name": "cluster-policy",
                "patch": {"spec": {"driver": {"version": "570.124.06"}}},
            }
        ],
        "change_id": "2026-11-canary",
        "stage": "canary",
    }
    fields.update(overrides)
    return GitopsChangeRequest(**fields)


def test_change_is_cloned_committed_pushed_then_reverted(clone: Path, tmp_path: Path) -> None:
    work = tmp_path / "work" / "clone"
    preview = run_gitops_change(run, run_env, request(work, clone, check_mode=True))
    assert preview["changed"] and preview["files"] == ["gpu-operator/clusterpolicy.yaml"] and not preview["pushed"]
    assert git(clone, "rev-list", "--count", "main") == "1"
    assert not work.parent.exists(), "check mode clones nothing where the real run will"

    done = run_gitops_change(run, run_env, request(work, clone))
    assert done["pushed"] and git(clone, "rev-parse", "main") == done["commit"]
    assert "Gpufleet-Change: 2026-11-canary" in git(clone, "log", "-1", "--format=%B", "main")
    shown = git(clone, "show", "main:gpu-operator/clusterpolicy.yaml")
    assert 'version: "570.124.06"' in shown and "# Pinned by the platform team" in shown
    again = run_gitops_change(run, run_env, request(work, clone))
    assert not again["changed"] and git(clone, "rev-list", "--count", "main") == "2"

    back = run_gitops_change(
        run, run_env, request(work, clone, changes=[], revert_change="2026-11-canary", stage="rollback")
    )
    assert back["reverted"] == [done["commit"]] and back["pushed"]
    assert git(clone, "show", "main:gpu-operator/clusterpolicy.yaml") == MANIFEST.strip()
    assert git(clone, "log", "-1", "--format=%s", "main") == "Revert change 2026-11-canary"
    nothing = run_gitops_change(
        run, run_env, request(work, clone, changes=[], revert_change="2026-11-canary", stage="rollback")
    )
    assert not nothing["changed"] and nothing["reverted"] == []


def test_check_mode_previews_the_real_run_and_leaves_the_clone_alone(clone: Path, tmp_path: Path) -> None:
    """A rollback previewed while the clone is behind the remote: the preview fast-forwards and reverts as the
    real run will, in a clone of its own; the clone keeps its HEAD, its files and its FETCH_HEAD."""
    work = tmp_path / "work"
    done = run_gitops_change(run, run_env, request(work, clone))
    other = tmp_path / "other"
    subprocess.run(["git", "clone", "-q", str(clone), str(other)], check=True, capture_output=True)
    (other / "README.md").write_text("The platform team's manifests.\n")
    git(other, "add", ".")
    git(other, "commit", "-q", "-m", "A README")
    git(other, "push", "-q", "origin", "main")
    before = {
        "head": git(work, "rev-parse", "HEAD"),
        "fetched": (work / ".git" / "FETCH_HEAD").read_text(),
        "files": sorted(path.name for path in work.iterdir()),
    }
    rollback = request(work, clone, changes=[], revert_change="2026-11-canary", stage="rollback", check_mode=True)
    preview = run_gitops_change(run, run_env, rollback)
    assert preview["reverted"] == [done["commit"]] and preview["changed"] and not preview["pushed"]
    assert preview["base"] == preview["commit"] == git(clone, "rev-parse", "main") != before["head"]
    after = {
        "head": git(work, "rev-parse", "HEAD"),
        "fetched": (work / ".git" / "FETCH_HEAD").read_text(),
        "files": sorted(path.name for path in work.iterdir()),
    }
    assert after == before
    assert git(clone, "rev-list", "--count", "main") == "3"

    (work / "gpu-operator" / "clusterpolicy.yaml").write_text("edited by hand\n")
    with pytest.raises(GpuFleetError, match="has uncommitted changes"):
        run_gitops_change(run, run_env, rollback)


def test_review_branch_leaves_the_tracked_branch_alone(clone: Path, tmp_path: Path) -> None:
    work = tmp_path / "review"
    done = run_gitops_change(
        run,
        run_env,
        request(work, clone, review_branch="gpufleet/canary", review_url="https://git.example/compare/{branch}"),
    )
    assert done["review_url"] == "https://git.example/compare/gpufleet/canary"
    assert git(clone, "rev-parse", "gpufleet/canary") == done["commit"]
    assert git(clone, "rev-list", "--count", "main") == "1"
    assert git(work, "symbolic-ref", "--short", "HEAD") == "main"


def test_a_push_that_fails_names_the_commit_left_in_the_clone(clone: Path, tmp_path: Path) -> None:
    work = tmp_path / "refused"

    def refused(command: list, env: dict) -> tuple:
        if "push" in command:
            return 1, "", "remote: permission denied"
        return run(command)

    with pytest.raises(GpuFleetError, match=r"permission denied.*stays in the clone"):
        run_gitops_change(run, refused, request(work, clone))


def test_the_report_names_each_gitops_commit() -> None:
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._report import gitops_commit_text

    text = gitops_commit_text(
        {
            "commit": "a" * 40,
            "stage": "rollback",
            "what": "driver 550.127.05 (all)",
            "reverted": ["b" * 40],
            "files": ["gpu-operator/clusterpolicy.yaml"],
            "pushed": True,
        }
    )
    assert text == (
        "commit aaaaaaaaaaaa (rollback: driver 550.127.05 (all)); reverts bbbbbbbbbbbb; "
        "edits gpu-operator/clusterpolicy.yaml"
    )
    assert gitops_commit_text({"commit": "c" * 40, "review_url": "https://git.example/r/1"}).endswith(
        "awaits review at https://git.example/r/1"
    )


def test_the_driver_plan_hands_managed_objects_to_git_and_refuses_what_git_mode_cannot_do() -> None:
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_runner import (
        check_gitops_plan,
        gitops_changes,
    )
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import RolloutPlan, Write

    bump = {"spec": {"driver": {"version": "570.124.06"}}}
    label = {"metadata": {"labels": {"nvidia.com/gpu-driver-upgrade.skip": "true"}}}
    writes = (
        Write(op="patch", kind="Node", name="gpu-worker-002", why="hold", phase="scope", desired=label, patch=label),
        Write(op="patch", kind="ClusterPolicy", name="cp", why="target", phase="target", desired=bump, patch=bump),
    )
    plan = RolloutPlan(targets=("gpu-worker-001",), held_by_others=(), canary_nodes=("gpu-worker-001",), writes=writes)
    managed = ("ClusterPolicy/cp",)
    check_gitops_plan(plan, managed=managed, canary_mode="skip_label")
    assert gitops_changes(plan, managed=managed) == [
        {"kind": "ClusterPolicy", "name": "cp", "patch": bump, "why": "target"}
    ]
    assert gitops_changes(plan, managed=()) == []
    created = Write(op="create", kind="NVIDIADriver", name="gpu-canary", why="pool", phase="scope", desired={})
    with pytest.raises(InvalidInputError, match=r"NVIDIADriver gpu-canary is managed in Git .* would create it"):
        check_gitops_plan(
            RolloutPlan(targets=(), held_by_others=(), canary_nodes=(), writes=(created,)),
            managed=("NVIDIADriver/gpu-canary",),
            canary_mode="skip_label",
        )
    with pytest.raises(InvalidInputError, match="use canary_mode skip_label"):
        check_gitops_plan(plan, managed=("NVIDIADriver/default",), canary_mode="nvidiadriver")


def test_a_change_to_an_object_argo_cd_writes_is_left_for_git_and_missing_after_the_sync_fails():
    patch = {"spec": {"ofedDriver": {"version": "24.10-1.0.0.0"}}}
    change = deferred_change("NicClusterPolicy", "nic-cluster-policy", patch, synced=False, why="MOFED 24.10")
    assert change == {"kind": "NicClusterPolicy", "name": "nic-cluster-policy", "patch": patch, "why": "MOFED 24.10"}
    with pytest.raises(GpuFleetError, match=r"still differs in spec\.ofedDriver\.version") as caught:
        deferred_change("NicClusterPolicy", "nic-cluster-policy", patch, synced=True)
    assert "ignoreDifferences" in caught.value.msg
    assert caught.value.result["gitops_changes"] == [{"kind": "NicClusterPolicy", "name": "nic-cluster-policy",
                                                      "patch": patch}]  # fmt: skip
