#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gitops_change
short_description: Write fields of Argo CD-managed CRs into their manifests in Git, or revert a change, and push
version_added: 0.1.0
description:
  - GitOps mode (docs/gitops.md) - where Argo CD is the only writer of a CR, the change goes into the CR's manifest in
    Git instead of a PATCH. Each entry of O(changes) is a JSON merge patch of the fields a component role would have
    patched; it is applied to the document of that C(kind) and C(name) in the file O(manifests) names, with
    ruamel.yaml's round trip, so comments, quoting, key order and the file's other documents are kept.
  - With O(revert_change), the commits of that change (found by their C(Gpufleet-Change) trailer, those not reverted
    yet) are reverted first (C(git revert)); the revert and the field edits go in one commit.
  - The clone at O(repository) is cloned from O(repository_url) when missing and fast-forwarded from O(remote) before
    the edit; a clone with uncommitted changes is refused. Its parent folder is locked for the run.
  - The commit is pushed to O(branch), or to O(review_branch) for a review (the clone's O(branch) is left as it was,
    and RV(review_url) says where to review it).
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
    description:
      - Works in a throwaway clone (of O(repository), or of O(repository_url) when there is no clone yet), brought
        up to date as the real run would be; computes the revert, the edits and the diff there and removes it.
      - The clone, the manifests and the remote are left as they are - nothing is cloned, committed or pushed.
  diff_mode:
    support: full
    description: Each edited manifest's text before and after.
options:
  repository:
    description: Path of the Git clone holding the manifests.
    type: path
    required: true
  repository_url:
    description: URL to clone into O(repository) when it is not a clone yet.
    type: str
    default: ""
  branch:
    description: The branch Argo CD tracks.
    type: str
    default: main
  remote:
    description: The remote to fetch from and push to.
    type: str
    default: origin
  push:
    description: Fetch before, and push the commit after.
    type: bool
    default: true
  manifests:
    description: The CRs whose manifests live in the repository.
    type: list
    elements: dict
    required: true
    suboptions:
      kind:
        description: The CR's kind, for example C(ClusterPolicy).
        type: str
        required: true
      name:
        description: The CR's name.
        type: str
        required: true
      path:
        description: The manifest file, relative to the repository's root.
        type: str
        required: true
  changes:
    description:
      - Merge patches to write, each C(kind), C(name) and C(patch) (what
        M(gpufleet.upgrade.clusterpolicy_upgrade) returns as C(gitops_changes)).
    type: list
    elements: dict
    default: []
  revert_change:
    description: Revert the commits of this change (their C(Gpufleet-Change) trailer) before the edits.
    type: str
    default: ""
  change_id:
    description: The change this commit belongs to (the ledger's campaign); written as the C(Gpufleet-Change) trailer.
    type: str
    default: ""
  stage:
    description: The stage that commits (C(Gpufleet-Stage) trailer).
    type: str
    default: ""
  summary:
    description: The commit's first line; a default names the stage or the revert.
    type: str
    default: ""
  review_branch:
    description: Push the commit to this branch for review instead of O(branch).
    type: str
    default: ""
  review_url:
    description: Where the review branch is reviewed; C({branch}) and C({commit}) are replaced.
    type: str
    default: ""
  git_token:
    description: HTTPS push credential, sent as HTTP basic auth in the environment of C(git push), never in argv.
    type: str
  git_username:
    description: User name sent with O(git_token).
    type: str
    default: git
  git_ssh_key_file:
    description: SSH private key for the push.
    type: path
  git_author_name:
    description: Commit author's name.
    type: str
    default: gpufleet.upgrade
  git_author_email:
    description: Commit author's e-mail.
    type: str
    default: gpufleet-upgrade@localhost
  lock_timeout:
    description: Seconds to wait for another run that holds the clone.
    type: int
    default: 600
requirements:
  - ruamel.yaml
  - git
"""

EXAMPLES = r"""
- name: Write the canary's driver into the ClusterPolicy's manifest and push it
  gpufleet.upgrade.gitops_change:
    repository: /var/lib/gpufleet/gitops/platform
    repository_url: https://git.example.com/platform/gpu.git
    branch: main
    manifests:
      - {kind: ClusterPolicy, name: cluster-policy, path: gpu-operator/clusterpolicy.yaml}
    changes:
      - kind: ClusterPolicy
        name: cluster-policy
        patch: {spec: {driver: {version: 570.124.06}}}
    change_id: 2026-11-driver-570
    stage: canary
    git_token: "{{ lookup('ansible.builtin.env', 'GPUFLEET_GIT_TOKEN') }}"
  register: commit

- name: Roll the change back with a revert commit
  gpufleet.upgrade.gitops_change:
    repository: /var/lib/gpufleet/gitops/platform
    manifests:
      - {kind: ClusterPolicy, name: cluster-policy, path: gpu-operator/clusterpolicy.yaml}
    revert_change: 2026-11-driver-570
    change_id: 2026-11-driver-570
    stage: rollback
"""

RETURN = r"""
commit:
  description: The commit made (or HEAD when nothing changed).
  returned: always
  type: str
  sample: 3f2a1c9b0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a
base:
  description: HEAD before the run (after the fast-forward).
  returned: always
  type: str
files:
  description: Manifests edited (relative to the repository).
  returned: always
  type: list
  elements: str
reverted:
  description: Commits reverted (in check mode, those that would be).
  returned: always
  type: list
  elements: str
pushed:
  description: Whether the commit was pushed.
  returned: always
  type: bool
git_push:
  description: What the push did (as M(gpufleet.upgrade.matrix_promote) returns it).
  returned: when pushed
  type: dict
review_url:
  description: Where to review the commit, with O(review_branch).
  returned: when O(review_branch) is set and the commit pushed
  type: str
diff:
  description: Before and after of each edited manifest.
  returned: always
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule, env_fallback

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops import managed_objects
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops_change import (
    GitopsChangeRequest,
    run_gitops_change,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import k8s_auth_argument_spec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import (
    HAS_RUAMEL,
    RUAMEL_IMPORT_ERROR,
    PushRequest,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        repository={"type": "path", "required": True},
        repository_url={"type": "str", "default": ""},
        branch={"type": "str", "default": "main"},
        remote={"type": "str", "default": "origin"},
        push={"type": "bool", "default": True},
        manifests={
            "type": "list",
            "elements": "dict",
            "required": True,
            "options": {
                "kind": {"type": "str", "required": True},
                "name": {"type": "str", "required": True},
                "path": {"type": "str", "required": True},
            },
        },
        changes={"type": "list", "elements": "dict", "default": []},
        revert_change={"type": "str", "default": ""},
        change_id={"type": "str", "default": ""},
        stage={"type": "str", "default": ""},
        summary={"type": "str", "default": ""},
        review_branch={"type": "str", "default": ""},
        review_url={"type": "str", "default": ""},
        git_token={"type": "str", "no_log": True, "fallback": (env_fallback, ["GPUFLEET_GIT_TOKEN"])},
        git_username={"type": "str", "default": "git"},
        git_ssh_key_file={"type": "path", "fallback": (env_fallback, ["GPUFLEET_GIT_SSH_KEY_FILE"])},
        git_author_name={"type": "str", "default": "gpufleet.upgrade"},
        git_author_email={"type": "str", "default": "gpufleet-upgrade@localhost"},
        lock_timeout={"type": "int", "default": 600},
    )
    return spec


def change_request(module):
    params = module.params
    return GitopsChangeRequest(
        repository=params["repository"],
        repository_url=params["repository_url"],
        branch=params["branch"],
        manifests=managed_objects(params["manifests"], where="manifests"),
        changes=params["changes"],
        change_id=params["change_id"],
        stage=params["stage"],
        summary=params["summary"],
        revert_change=params["revert_change"],
        push=params["push"],
        push_request=PushRequest(
            remote=params["remote"],
            token=params["git_token"] or "",
            username=params["git_username"],
            ssh_key_file=params["git_ssh_key_file"] or "",
        ),
        review_branch=params["review_branch"],
        review_url=params["review_url"],
        author_name=params["git_author_name"],
        author_email=params["git_author_email"],
        lock_timeout=params["lock_timeout"],
        check_mode=module.check_mode,
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: run_gitops_change(
            lambda command: module.run_command(command, check_rc=False),
            lambda command, env: module.run_command(command, check_rc=False, environ_update=env),
            change_request(module),
        ),
        failure=f"Failed to write the change to the manifests in {module.params['repository']}",
        missing=[] if HAS_RUAMEL else [("ruamel.yaml", RUAMEL_IMPORT_ERROR)],
    )


if __name__ == "__main__":
    main()
