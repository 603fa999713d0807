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
  git_author_name:
    description: Author name of the commit (AWX execution environments rarely have a Git identity).
    type: str
    default: gpufleet.upgrade
  git_author_email:
    description: Author e-mail of the commit.
    type: str
    default: gpufleet-upgrade@localhost
requirements:
  - ruamel.yaml
  - git (with O(git_commit=true))
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

- name: Show what the promotion would change
  gpufleet.upgrade.matrix_promote:
    path: matrix/gpu-version-matrix.yaml
  check_mode: true
  diff: true
"""

RETURN = r"""
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
"""

import datetime

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_write import (
    HAS_RUAMEL,
    RUAMEL_IMPORT_ERROR,
    git_commit_and_tag,
    promote_matrix_file,
    stable_tag,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import utc_now


def argument_spec():
    return {
        "path": {"type": "path", "required": True},
        "promoted_on": {"type": "str"},
        "note": {"type": "str", "default": ""},
        "git_commit": {"type": "bool", "default": False},
        "git_tag": {"type": "str", "default": ""},
        "git_author_name": {"type": "str", "default": "gpufleet.upgrade"},
        "git_author_email": {"type": "str", "default": "gpufleet-upgrade@localhost"},
    }


def promote(module):
    params = module.params
    promoted_on = params["promoted_on"] or utc_now().strftime("%Y-%m-%d")
    try:
        datetime.datetime.strptime(promoted_on, "%Y-%m-%d")
    except ValueError as err:
        raise InvalidInputError(f"promoted_on {promoted_on!r} is not YYYY-MM-DD") from err
    try:
        with open(params["path"], encoding="utf-8") as handle:
            before = handle.read()
    except OSError as err:
        raise InvalidInputError(f"cannot read it: {err.strerror}") from err
    promotion = promote_matrix_file(
        params["path"], promoted_on=promoted_on, note=params["note"], check_mode=module.check_mode
    )
    result = promotion.as_dict()
    if promotion.changed and params["git_commit"] and not module.check_mode:
        result["git"] = git_commit_and_tag(
            lambda command: module.run_command(command, check_rc=False),
            path=params["path"],
            message=f"Promote canary_testing to current_production ({promoted_on})\n\n{promotion.message}\n"
            + (f"\n{params['note']}\n" if params["note"] else ""),
            tag=params["git_tag"] or stable_tag(promoted_on),
            author_name=params["git_author_name"],
            author_email=params["git_author_email"],
        )
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
