# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project


# The failure-domain options of the rollout modules, mirrored by failure_domain_argument_spec() in
# plugins/module_utils/_module.py.

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  failure_domain_label:
    description:
      - Node label naming a failure domain (a rack, a rail, for example C(gpufleet.io/rack)). At most
        O(max_per_domain) nodes of one value are unavailable at once; nodes already cordoned or NotReady count, and
        nodes without the label share one domain. The rollout order goes domain by domain.
      - Empty, the rollout knows no failure domains.
    type: str
    default: ""
  max_per_domain:
    description: Unavailable nodes allowed at once per failure domain (with O(failure_domain_label)).
    type: int
    default: 1
"""
