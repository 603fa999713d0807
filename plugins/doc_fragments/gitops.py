# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

# The GitOps-mode options of the modules that defer writes to Git, mirrored by gitops_argument_spec() in
# plugins/module_utils/_module.py:
#   gpufleet.upgrade.gitops         gitops_managed
#   gpufleet.upgrade.gitops.synced  gitops_synced
# A module says in its own description what it returns for the managed objects.

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  gitops_managed:
    description:
      - GitOps mode (docs/gitops.md). C(Kind/name) of the objects Argo CD writes from Git, for example
        C(ClusterPolicy/cluster-policy). The module never sends their changes to the cluster; it returns them as
        merge patches for M(gpufleet.upgrade.gitops_change) to commit.
    type: list
    elements: str
    default: []
    version_added: 0.1.0
"""

    SYNCED = r"""
options:
  gitops_synced:
    description:
      - Set once the Argo CD Application synced the commit of RV(gitops_changes). A managed object that still lacks
        a field of the change then fails the task naming the field, instead of being returned again.
    type: bool
    default: false
    version_added: 0.1.0
"""
