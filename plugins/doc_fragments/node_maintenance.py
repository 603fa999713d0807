# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project


# The node_maintenance option of the modules that drain nodes, mirrored by node_maintenance_suboptions() in
# plugins/module_utils/_node_maintenance.py.

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  node_maintenance:
    description:
      - Drain through the NVIDIA Maintenance Operator (C(maintenance.nvidia.com/v1alpha1) NodeMaintenance), so one
        cluster-wide disruption budget (its C(maxParallelOperations) and C(maxUnavailable)) covers this collection
        and every other operator that asks it for nodes.
      - The module then never cordons or uncordons a node itself. For each node it creates the request
        C(nvidia-operator-<node>) in O(node_maintenance.namespace), or, when another requestor's request for the
        node is there, adds O(node_maintenance.requestor_id) to its C(spec.additionalRequestors) (as the GPU and
        Network Operators' upgrade controllers do); it waits until the operator has cordoned and drained the node
        (the C(Ready) condition's reason C(Ready)), does its work, then deletes its request or takes its ID out of
        the other's, and waits until its request is gone. The operator uncordons once nobody holds the node.
      - The request is annotated C(maintenance.nvidia.com/garbage-collector.ignore=true), so the operator does not
        end it after C(maxNodeMaintenanceTimeSeconds) while the work is under way. A node the rollout fails on
        keeps its request (it stays cordoned, readable).
      - A request the operator has not scheduled after O(node_maintenance.timeout) seconds (other requests hold its
        budget) is withdrawn; the node was not touched, the rollout halts without a failed node, and running the
        stage again starts over.
    type: dict
    default: {}
    suboptions:
      mode:
        description:
          - C(auto) uses the operator when the cluster serves NodeMaintenance, and drains without it otherwise.
          - C(always) refuses to start when the cluster does not serve it; C(never) always drains without it.
        type: str
        choices: [auto, always, never]
        default: auto
      requestor_id:
        description: The C(requestorID) of this collection's requests.
        type: str
        default: gpufleet.upgrade
      namespace:
        description:
          - Where the requests are made. Requestors meet on one object per node only in the same namespace
            (the upgrade controllers' default is C(default)).
        type: str
        default: default
      timeout:
        description: Seconds to wait for the operator to grant a node, and to end a request.
        type: int
        default: 3600
"""
