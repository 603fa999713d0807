#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: upgrade_event
short_description: Record a milestone of an upgrade stage as Kubernetes Events
version_added: 0.1.0
description:
  - Creates one C(Normal) core/v1 Event with reason C(GPUFleetUpgrade) for a milestone of a stage (O(milestone)) on
    the object the component group's in-cluster controller reconciles and on each node of O(nodes), so
    C(kubectl describe node), C(kubectl describe clusterpolicy) and C(kubectl get events) tell where an upgrade
    stands.
  - The group's object is every C(ClusterPolicy) for C(gpu_operator), every C(NicClusterPolicy) for
    C(network_operator), and for C(openshift) the MachineConfigPools that hold the nodes (for each node the pool
    with the most specific node selector that selects it). Other groups (C(firmware), C(sriov_operator)) get
    their Events on the nodes only. A group whose CRD the cluster does not serve gets its Events on the nodes.
  - Events of cluster-scoped objects go to the C(default) namespace, where C(kubectl describe) looks for them.
    Their timestamps are the API server's clock (its C(Date) header).
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
    description: Reads the objects and returns the Events it would create; creates none.
  diff_mode:
    support: none
    description: Changes no Kubernetes object that a diff would show.
options:
  milestone:
    description: The milestone the Events record.
    type: str
    required: true
    choices: [canary_started, canary_passed, bake_passed, bake_failed, promoted, rolled_back]
  group:
    description: The component group of the change (the ledger's C(group)).
    type: str
    required: true
  nodes:
    description: The nodes the milestone concerns (the canary node, the promoted nodes). Each must exist.
    type: list
    elements: str
    default: []
  event_message:
    description: The Events' message (cut at 1024 characters).
    type: str
    required: true
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: Observability
    description: docs/observability.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/observability.md
"""

EXAMPLES = r"""
- name: Say on the ClusterPolicy and the node that the canary started
  gpufleet.upgrade.upgrade_event:
    milestone: canary_started
    group: gpu_operator
    nodes: [gpu-worker-001]
    event_message: "Canary of gpu_operator v24.9.0 -> v25.3.0 started on gpu-worker-001"
"""

RETURN = r"""
events:
  description: One entry per Event created (or, in check mode, that would be).
  returned: always
  type: list
  elements: dict
  sample: [{kind: ClusterPolicy, name: cluster-policy, action: CanaryStarted},
           {kind: Node, name: gpu-worker-001, action: CanaryStarted}]
milestone:
  description: The milestone recorded.
  returned: always
  type: str
  sample: canary_started
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import STAGE_EVENTS, record_stage_events
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import milestone_argument_spec, run_module


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(milestone_argument_spec(STAGE_EVENTS), group={"type": "str", "required": True})
    return spec


def record(module):
    params = module.params
    return record_stage_events(
        KubeApi.from_params(params),
        milestone=params["milestone"],
        group=params["group"],
        nodes=params["nodes"],
        message=params["event_message"],
        check_mode=module.check_mode,
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: record(module),
        failure=f"Failed to record the {module.params['milestone']} Events",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
