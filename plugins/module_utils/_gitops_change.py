# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Module gitops_change's work: bring the clone up to date, revert or edit the manifests, commit, push
(collection-internal).

One run makes at most one commit: the revert of a change's earlier commits
(a rollback) and the field edits together. The commit's trailers name the
change and the stage, so a later rollback finds it. The clone's folder is
locked for the run (``matrix_folder_lock``), as a fleet's forks may share it.
Check mode changes nothing on disk either: it works in a throwaway clone of
the clone (or of the remote when there is none yet), brought up to date as
the real run would be, and removes it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from typing import Any, Dict, Mapping, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops import (
    CHANGE_TRAILER,
    ManagedObject,
    commit_message,
    commits_to_revert,
    edit_manifest,
    find_managed,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import (
    GitError,
    PushRequest,
    RunCommand,
    RunCommandWithEnv,
    git_commit_and_tag,
    git_push,
    matrix_folder_lock,
    write_text_atomically,
)


@dataclass(frozen=True)
class GitopsChangeRequest:
    repository: str
    branch: str
    manifests: Sequence[ManagedObject]
    changes: Sequence[Mapping[str, Any]]  # each {kind, name, patch}
    change_id: str = ""
    stage: str = ""
    summary: str = ""
    revert_change: str = ""
    repository_url: str = ""
    push: bool = True
    push_request: PushRequest = field(default_factory=PushRequest)
    review_branch: str = ""
    review_url: str = ""
    author_name: str = "gpufleet.upgrade"
    author_email: str = "gpufleet-upgrade@localhost"
    lock_timeout: float = 600.0
    check_mode: bool = False


class _Git:
    def __init__(self, run: RunCommand, directory: str) -> None:
        self.run = run
        self.directory = directory

    def __call__(self, *arguments: str, ok: Sequence[int] = (0,)) -> str:
        code, out, err = self.run(["git", "-C", self.directory, *arguments])
        if code not in ok:
            raise GitError(f"git {' '.join(arguments)} in {self.directory} failed: {(err or out).strip()}")
        return out.strip()


def _prepare(git: _Git, run: RunCommand, request: GitopsChangeRequest, result: Dict[str, Any]) -> None:
    """Clone when missing; on the branch; up to date with the remote (fast-forward only)."""
    if not os.path.isdir(os.path.join(request.repository, ".git")):
        _clone(run, _source(request), request.branch, request.repository)
        result["cloned"] = True
    current = git("symbolic-ref", "--quiet", "--short", "HEAD", ok=(0, 1))
    if current != request.branch:
        git("checkout", request.branch)
    _refuse_uncommitted(git, request)
    if request.push:
        git("fetch", request.push_request.remote, request.branch)
        git("merge", "--ff-only", "FETCH_HEAD")
    result["base"] = git("rev-parse", "HEAD")


def _source(request: GitopsChangeRequest) -> str:
    if not request.repository_url:
        raise InvalidInputError(
            f"{request.repository} is no Git clone; set gpufleet_gitops.repository_url to clone it there"
        )
    return request.repository_url


def _clone(run: RunCommand, source: str, branch: str, directory: str) -> None:
    code, out, err = run(["git", "clone", "--quiet", "--branch", branch, source, directory])
    if code != 0:
        raise GitError(f"git clone {source} failed: {(err or out).strip()}")


def _refuse_uncommitted(git: _Git, request: GitopsChangeRequest) -> None:
    if git("status", "--porcelain", "--untracked-files=no"):
        raise InvalidInputError(
            f"the clone {request.repository} has uncommitted changes (git status): commit or discard them first"
        )


def _preview_clone(git: _Git, run: RunCommand, request: GitopsChangeRequest, directory: str) -> None:
    """Check mode: ``directory`` becomes what the real run would work on, the clone left as it is.

    A clone of the clone's branch (its own commits included), fast-forwarded from the clone's remote as the real run
    would be; without a clone, a clone of the remote."""
    if not os.path.isdir(os.path.join(request.repository, ".git")):
        _clone(run, _source(request), request.branch, directory)
        return
    _refuse_uncommitted(git, request)
    _clone(run, request.repository, request.branch, directory)
    if request.push:
        remote = git("remote", "get-url", request.push_request.remote)
        preview = _Git(run, directory)
        preview("fetch", remote, request.branch)
        preview("merge", "--ff-only", "FETCH_HEAD")


def _revert(git: _Git, request: GitopsChangeRequest, paths: Sequence[str], result: Dict[str, Any]) -> None:
    grep = f"^{CHANGE_TRAILER}: {request.revert_change}$"
    raw = git("log", "--format=%H%x00%B%x1e", f"--grep={grep}", "--", *paths)
    log = []
    for record in raw.split("\x1e"):
        if "\x00" in record:
            sha, message = record.strip().split("\x00", 1)
            log.append((sha, message.strip()))
    shas = commits_to_revert(log)
    result["reverted"] = shas
    if not shas:
        return
    code, out, err = git.run(["git", "-C", git.directory, "revert", "--no-commit", *shas])
    if code != 0:
        git.run(["git", "-C", git.directory, "revert", "--abort"])
        raise GitError(
            f"git revert of {', '.join(sha[:12] for sha in shas)} (change {request.revert_change}) does not apply "
            f"cleanly: {(err or out).strip()}. Nothing was committed; revert them by hand and push."
        )


def _edit(request: GitopsChangeRequest, result: Dict[str, Any]) -> None:
    """Write each change's fields into its manifest."""
    for change in request.changes:
        kind, name = str(change.get("kind") or ""), str(change.get("name") or "")
        managed = find_managed(request.manifests, kind=kind, name=name)
        if managed is None:
            raise InvalidInputError(f"{kind}/{name} has no manifest in gpufleet_gitops.manifests")
        path = os.path.join(request.repository, managed.path)
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except OSError as err:
            raise InvalidInputError(f"cannot read the manifest {path} of {kind}/{name}: {err.strerror}") from err
        edit = edit_manifest(text, path=managed.path, kind=kind, name=name, patch=change.get("patch") or {})
        if not edit.changed:
            continue
        result["files"].append(managed.path)
        result["diff"].append(
            {"before": text, "after": edit.text, "before_header": managed.path, "after_header": managed.path}
        )
        write_text_atomically(path, edit.text)


def run_gitops_change(run: RunCommand, run_env: RunCommandWithEnv, request: GitopsChangeRequest) -> Dict[str, Any]:
    if not request.changes and not request.revert_change:
        raise InvalidInputError("nothing to write: give changes or revert_change")
    result: Dict[str, Any] = {"changed": False, "files": [], "diff": [], "commit": "", "reverted": [], "pushed": False}
    if request.check_mode:
        scratch = tempfile.mkdtemp(prefix="gpufleet-gitops-check-")
        try:
            preview = os.path.join(scratch, "clone")
            _preview_clone(_Git(run, request.repository), run, request, preview)
            git = _Git(run, preview)
            result["base"] = git("rev-parse", "HEAD")
            # The real run's revert and edits, in the throwaway clone: the diff is what the real run will write.
            _edit_and_revert(git, replace(request, repository=preview), result)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        result["commit"] = result["base"]
        return result
    # The clone's parent folder is locked: it exists before a clone does.
    repository = os.path.abspath(request.repository)
    os.makedirs(os.path.dirname(repository), exist_ok=True)
    with matrix_folder_lock(repository, timeout=request.lock_timeout):
        git = _Git(run, request.repository)
        _prepare(git, run, request, result)
        _edit_and_revert(git, request, result)
        if not result["changed"]:
            result["commit"] = result["base"]
            return result
        _commit_and_push(git, run_env, request, [item.path for item in request.manifests], result)
    return result


def _edit_and_revert(git: _Git, request: GitopsChangeRequest, result: Dict[str, Any]) -> None:
    """The revert of the change's commits (a rollback), then the field edits, in ``request.repository``."""
    if request.revert_change:
        _revert(git, request, [item.path for item in request.manifests], result)
    _edit(request, result)
    result["changed"] = bool(result["files"] or result["reverted"])


def _commit_and_push(
    git: _Git, run_env: RunCommandWithEnv, request: GitopsChangeRequest, paths: Sequence[str], result: Dict[str, Any]
) -> None:
    details = [f"Reverts {sha}" for sha in result["reverted"]] + [f"Edits {path}" for path in result["files"]]
    summary = request.summary or (
        f"Revert change {request.revert_change}" if result["reverted"] else f"gpufleet.upgrade {request.stage}"
    )
    message = commit_message(
        summary=summary, change_id=request.change_id, stage=request.stage, details=details, reverts=result["reverted"]
    )
    if request.review_branch:
        git("checkout", "-B", request.review_branch)
    absolute = [os.path.join(request.repository, path) for path in paths]
    committed = git_commit_and_tag(
        git.run,
        path=absolute[0],
        also=absolute[1:],
        message=message,
        author_name=request.author_name,
        author_email=request.author_email,
    )
    result["commit"] = committed["commit"]
    result["committed"] = committed["committed"]
    if not request.push:
        return
    target = request.review_branch or request.branch
    push = PushRequest(
        remote=request.push_request.remote,
        branch=target,
        push_tag=False,
        token=request.push_request.token,
        username=request.push_request.username,
        ssh_key_file=request.push_request.ssh_key_file,
    )
    try:
        result["git_push"] = git_push(run_env, path=absolute[0], tag="", request=push)
    except GitError as err:
        raise GitError(
            f"{err.msg}. Commit {result['commit']} stays in the clone {request.repository} ({target}): push it "
            f"(git -C {request.repository} push {request.push_request.remote} HEAD:{target}) or reset the clone",
            result=dict(result, **err.result),
        ) from err
    finally:
        if request.review_branch:
            git("checkout", request.branch)
    result["pushed"] = True
    if request.review_branch:
        result["review_branch"] = request.review_branch
        result["review_url"] = request.review_url.format(branch=request.review_branch, commit=result["commit"])
