#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: matrix_promote
short_description: Write a promotion into the version matrix file, comments kept, optionally committed and tagged
version_added: 0.1.0
description:
  - After a promotion, C(canary_testing)'s versions become C(current_production), the production versions they replace
    become the C(rollback) entry (only the components that changed, since rollback builds on current_production), and
    C(canary_testing) keeps only C(status=promoted) and a note, so it pins nothing until the next change is written.
  - C(current_production) gets C(status=production), C(deployed) set to O(promoted_on) and O(note) as its C(notes).
  - Works on the three matrix forms (the ConfigMap form, whose stages are YAML text under C(data.matrix.yaml), plain
    stages, and C(versions) with C(current)/C(canary)). Comments, quoting and key order are kept (ruamel.yaml round
    trip, also inside the ConfigMap's embedded text).
  - The file is written atomically (a temporary file in the same directory renamed over it) and keeps its mode.
  - With O(git_commit=true), the file alone is committed and the commit tagged C(vYYYY-MM-stable) (the month of
    O(promoted_on)); an existing tag is left where it is and reported.
  - A matrix without C(canary_testing) has nothing to promote; the module then changes nothing.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Computes the promoted matrix and the diff, writes and commits nothing.
  diff_mode:
    support: full
    description: Returns the file's text before and after.
options:
  path:
    description: The matrix file.
    type: path
    required: true
  promoted_on:
    description: Date of the promotion, C(YYYY-MM-DD) (the flow passes the cluster's date). Defaults to today in UTC.
    type: str
  note:
    description: Text for C(current_production.notes), for example which ledger entry promoted it.
    type: str
    default: ""
  git_commit:
    description: Commit the file (only it) in its Git repository and tag the commit.
    type: bool
    default: false
  git_tag:
    description: Tag to create with O(git_commit). Empty means C(vYYYY-MM-stable) for O(promoted_on).
    type: str
    default: ""
  git_push:
    description:
      - Push the commit (and its tag, see O(git_push_tag)) to O(git_remote) after O(git_commit). Also tried when the
        file was promoted already (a re-run after a failed push). A refused or failed push fails the task, saying which
        commit and tag stayed local; it is never silent.
      - An AWX job's project checkout is gone when the job ends, so a promotion there is kept only by pushing it.
    type: bool
    default: false
  git_remote:
    description: Remote name or URL to push to.
    type: str
    default: origin
  git_push_branch:
    description:
      - Remote branch that receives HEAD. Empty means the checked-out branch's own name; an AWX project checkout has
        a detached HEAD, so name it there.
      - A branch of its own (for example C(gpufleet/promote-2026-11)) with O(git_push_tag=false) proposes the
        promotion for review instead of pushing it to the main branch.
    type: str
    default: ""
  git_push_tag:
    description: Push the promotion's tag as well (when it exists locally).
    type: bool
    default: true
  git_token:
    description:
      - Token for an HTTPS remote, sent as HTTP basic auth with O(git_username). It is passed to git in the
        environment (C(GIT_CONFIG_*)), never on its command line or in C(.git/config).
      - Falls back to the environment variable C(GPUFLEET_GIT_TOKEN) (an AWX custom credential can inject it).
    type: str
  git_username:
    description: User name sent with O(git_token) (most Git servers accept any name with a token).
    type: str
    default: git
  git_ssh_key_file:
    description:
      - Private key for an SSH remote (used with C(IdentitiesOnly) and C(BatchMode), so git never prompts).
      - Falls back to the environment variable C(GPUFLEET_GIT_SSH_KEY_FILE).
    type: path
  git_author_name:
    description: Author name of the commit (AWX execution environments rarely have a Git identity).
    type: str
    default: gpufleet.upgrade
  git_author_email:
    description: Author e-mail of the commit.
    type: str
    default: gpufleet-upgrade@localhost
  lock_timeout:
    description:
      - Seconds to wait for another promotion of a matrix in the same folder to finish (an exclusive C(flock) of the
        folder, held from reading the file to the push).
      - A fleet promotion runs this module for every cluster at once, on the same file; they take turns, and the
        clusters after the first find the matrix promoted already (no change, no second commit or tag).
    type: int
    default: 600
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
notes:
  - The Kubernetes connection options are accepted so that one C(module_defaults) block for
    C(group/gpufleet.upgrade.k8s) serves every module of the collection; this module does not connect to a cluster.
requirements:
  - ruamel.yaml
  - git (with O(git_commit=true)); git >= 2.31 for O(git_token)
seealso:
  - module: gpufleet.upgrade.gpu_matrix_check
  - name: The upgrade flow
    description: docs/upgrade-flow.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/upgrade-flow.md
"""

EXAMPLES = r"""
- name: Promote the canary in the matrix and commit it
  gpufleet.upgrade.matrix_promote:
    path: matrix/gpu-version-matrix.yaml
    promoted_on: "2026-11-24"
    note: "Promoted after a 48 h bake (ledger entry promote-20261124T101500Z-1a2b)."
    git_commit: true
  register: promotion

- name: Promote, commit, and push the commit and its tag for AWX (its checkout has a detached HEAD)
  gpufleet.upgrade.matrix_promote:
    path: matrix/gpu-version-matrix.yaml
    git_commit: true
    git_push: true
    git_push_branch: main
    git_token: "{{ lookup('ansible.builtin.env', 'GPUFLEET_GIT_TOKEN') }}"

- name: Propose the promotion for review on a branch of its own
  gpufleet.upgrade.matrix_promote:
    path: matrix/gpu-version-matrix.yaml
    git_commit: true
    git_push: true
    git_push_branch: gpufleet/promote-2026-11
    git_push_tag: false

- name: Show what the promotion would change
  gpufleet.upgrade.matrix_promote:
    path: matrix/gpu-version-matrix.yaml
  check_mode: true
  diff: true
"""

RETURN = r"""
lock_waited:
  description: Seconds spent waiting for another promotion of a matrix in the same folder (O(lock_timeout)).
  returned: always
  type: float
  sample: 0.0
message:
  description: What moved.
  returned: always
  type: str
  sample: "promoted gpu_operator v24.9.0 -> v25.3.0, gpu_driver 550.127.05 -> 570.124.06"
form:
  description: The matrix form (configmap, stages, versions); empty when there was nothing to promote.
  returned: always
  type: str
  sample: configmap
promoted:
  description: Components now in current_production with their versions.
  returned: always
  type: dict
  sample: {gpu_operator: v25.3.0, gpu_driver: 570.124.06}
rollback:
  description: The rollback entry written (the production versions replaced).
  returned: always
  type: dict
  sample: {gpu_operator: v24.9.0, gpu_driver: 550.127.05}
git:
  description: The commit and tag made (C(committed), C(commit), C(tag), C(tag_existed)).
  returned: when O(git_commit=true) and the file changed
  type: dict
  sample: {committed: true, commit: 3f2a1c9b0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a, tag: v2026-11-stable, tag_existed: false}
git_push:
  description:
    - What was pushed - C(pushed), C(remote), C(branch), C(commit), C(tag), C(refs) (each ref with git's flag and
      summary) and C(changed) (whether the remote moved). Returned with the failure when the push failed.
  returned: when O(git_push=true)
  type: dict
  sample:
    pushed: true
    remote: origin
    branch: main
    commit: 3f2a1c9b0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a
    tag: v2026-11-stable
    changed: true
    refs: [{flag: " ", ref: refs/heads/main, summary: "1a2b3c4..3f2a1c9"}]
"""

import datetime

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import k8s_auth_argument_spec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import (
    HAS_RUAMEL,
    RUAMEL_IMPORT_ERROR,
    GitError,
    PushRequest,
    git_commit_and_tag,
    git_push,
    matrix_folder_lock,
    promote_matrix_file,
    stable_tag,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import utc_now


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        {
            "path": {"type": "path", "required": True},
            "promoted_on": {"type": "str"},
            "note": {"type": "str", "default": ""},
            "git_commit": {"type": "bool", "default": False},
            "git_tag": {"type": "str", "default": ""},
            "git_push": {"type": "bool", "default": False},
            "git_remote": {"type": "str", "default": "origin"},
            "git_push_branch": {"type": "str", "default": ""},
            "git_push_tag": {"type": "bool", "default": True},
            "git_token": {"type": "str", "no_log": True, "fallback": (env_fallback, ["GPUFLEET_GIT_TOKEN"])},
            "git_username": {"type": "str", "default": "git"},
            "git_ssh_key_file": {"type": "path", "fallback": (env_fallback, ["GPUFLEET_GIT_SSH_KEY_FILE"])},
            "git_author_name": {"type": "str", "default": "gpufleet.upgrade"},
            "git_author_email": {"type": "str", "default": "gpufleet-upgrade@localhost"},
            "lock_timeout": {"type": "int", "default": 600},
        }
    )
    return spec


def promote(module):
    params = module.params
    promoted_on = params["promoted_on"] or utc_now().strftime("%Y-%m-%d")
    try:
        datetime.datetime.strptime(promoted_on, "%Y-%m-%d")
    except ValueError as err:
        raise InvalidInputError(f"promoted_on {promoted_on!r} is not YYYY-MM-DD") from err
    if params["lock_timeout"] < 0:
        raise InvalidInputError(f"lock_timeout {params['lock_timeout']} is negative")
    # One promotion at a time per matrix folder: a fleet promotes every cluster at once (forks).
    with matrix_folder_lock(params["path"], timeout=params["lock_timeout"]) as waited:
        result = promote_locked(module, promoted_on=promoted_on)
    result["lock_waited"] = round(waited, 2)
    return result


def promote_locked(module, *, promoted_on):
    params = module.params
    try:
        with open(params["path"], encoding="utf-8") as handle:
            before = handle.read()
    except OSError as err:
        raise InvalidInputError(f"cannot read it: {err.strerror}") from err
    promotion = promote_matrix_file(
        params["path"], promoted_on=promoted_on, note=params["note"], check_mode=module.check_mode
    )
    result = promotion.as_dict()
    tag = params["git_tag"] or stable_tag(promoted_on)
    if promotion.changed and params["git_commit"] and not module.check_mode:
        result["git"] = git_commit_and_tag(
            lambda command: module.run_command(command, check_rc=False),
            path=params["path"],
            message=f"Promote canary_testing to current_production ({promoted_on})\n\n{promotion.message}\n"
            + (f"\n{params['note']}\n" if params["note"] else ""),
            tag=tag,
            author_name=params["git_author_name"],
            author_email=params["git_author_email"],
        )
    if params["git_commit"] and params["git_push"] and not module.check_mode:
        request = PushRequest(
            remote=params["git_remote"],
            branch=params["git_push_branch"],
            push_tag=params["git_push_tag"],
            token=params["git_token"] or "",
            username=params["git_username"],
            ssh_key_file=params["git_ssh_key_file"] or "",
        )
        try:
            result["git_push"] = git_push(
                lambda command, env: module.run_command(command, check_rc=False, environ_update=env),
                path=params["path"],
                tag=tag,
                request=request,
            )
        except GitError as err:
            # What was promoted and committed locally goes with the failure.
            err.result = dict(result, **err.result)
            raise
        result["changed"] = result["changed"] or result["git_push"]["changed"]
    if module._diff and promotion.changed:
        result["diff"] = {
            "before": before,
            "after": promotion.text,
            "before_header": params["path"],
            "after_header": params["path"],
        }
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: promote(module),
        failure=f"Failed to promote the matrix {module.params['path']}",
        missing=[] if HAS_RUAMEL else [("ruamel.yaml", RUAMEL_IMPORT_ERROR)],
    )


if __name__ == "__main__":
    main()
