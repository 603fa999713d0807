#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: upgrade_doctor
short_description: Say why each node is stuck in a GPU or MOFED driver upgrade, and unstick what is safe to
version_added: 0.1.0
description:
  - Reads the cluster with lists (nodes 500 per page, the operators' policies, driver DaemonSets,
    PodDisruptionBudgets, Node Events, MachineConfigPools, the stage Lease) and, only for the nodes past
    C(upgrade-required), their pods and at most O(max_logs) log tails.
  - For every node not at rest in an upgrade the collection knows (the GPU Operator's and Network Operator's driver
    state labels, a driver pod out of date while C(autoUpgrade) is false, a GPU node no driver DaemonSet selects, a
    paused or degraded MachineConfigPool) it returns the component, the state, how long the node has been in it on
    the API server's clock (from the controller's Events and the state's annotations), the cause, the evidence
    (objects named) and the remedy. Cluster-wide blockers (a driver DaemonSet with unscheduled pods, an interrupted
    run of this collection whose Lease expired) are returned apart. docs/doctor.md lists every cause.
  - Read-only by default. With O(remediate=true) it takes at most O(max_actions) actions, one per node, from a fixed
    list (O(remediate_actions)), each recorded as an Event on the node and, together, as one entry of the upgrade
    ledger. It never deletes a PodDisruptionBudget and never force-deletes a pod.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
    description: Diagnoses the same and lists each action it would take (evictions go as dry runs); writes nothing.
  diff_mode:
    support: none
    description: The remediation changes labels, evicts pods and records Events; no object diff is shown.
options:
  remediate:
    description: Take the remediations the diagnosis offers (bounded by O(max_actions)).
    type: bool
    default: false
  max_actions:
    description: The most actions one run takes; further candidates are returned under RV(deferred).
    type: int
    default: 5
  remediate_actions:
    description:
      - The actions the doctor may take. V(relabel_upgrade_required) relabels an C(upgrade-failed) node whose cause
        is gone to C(upgrade-required) (the upstream retry); V(evict_pods) evicts the named pods holding a node that
        match O(remediate_pod_selector) (PDBs apply); V(restart_validator) deletes a failing validator pod once per
        driver pod; V(unpause_pool) unpauses a MachineConfigPool this collection paused; V(clear_hold) removes this
        collection's own hold (skip label and hold annotation) from a node once the run that set it stopped and its
        stage Lease expired.
    type: list
    elements: str
    choices: [relabel_upgrade_required, evict_pods, restart_validator, unpause_pool, clear_hold]
    default: [relabel_upgrade_required, evict_pods, restart_validator, unpause_pool, clear_hold]
  remediate_pod_selector:
    description:
      - Label selector of the pods the doctor may evict (GPU consumers that request no C(nvidia.com/gpu), pods on
        secondary networks blocking a MOFED reload). Empty, no pod is evicted.
    type: str
    default: ""
  node_selector:
    description: Diagnose only the nodes this label selector matches.
    type: str
    default: ""
  lease_namespace:
    description:
      - Namespace of the stage Lease and the ledger ConfigMap (roles/upgrade's ledger namespace). Empty, the GPU
        Operator's namespace from the ClusterPolicy's C(status.namespace).
    type: str
    default: ""
  lease_name:
    description: Name of the stage Lease.
    type: str
    default: gpufleet-upgrade
  ledger_configmap:
    description: Name of the ledger ConfigMap that records remediations.
    type: str
    default: gpufleet-upgrade-ledger
  max_logs:
    description: The most pod log tails read (crash-looping driver pods, failing validators) to quote the failing line.
    type: int
    default: 3
  actor:
    description: Who runs it, written to the ledger entry of a remediation.
    type: str
    default: unknown
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: The upgrade doctor
    description: docs/doctor.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/doctor.md
"""

EXAMPLES = r"""
- name: Say why nodes are stuck
  gpufleet.upgrade.upgrade_doctor:
  register: doctor

- name: Relabel healed upgrade-failed nodes and evict runtimeClass-only GPU pods of team-a
  gpufleet.upgrade.upgrade_doctor:
    remediate: true
    max_actions: 3
    remediate_pod_selector: team=a
"""

RETURN = r"""
stuck:
  description: Whether any node is stuck or a cluster-wide blocker was found.
  returned: always
  type: bool
stuck_nodes:
  description: The names of the stuck nodes.
  returned: always
  type: list
  elements: str
findings:
  description:
    - One per stuck node and component, with C(state), C(since) and C(seconds_in_state) (API server's clock),
      C(cause) (an id from docs/doctor.md), C(detail), C(evidence) (objects named), C(remedy) and the
      C(remediation) the doctor could take.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-worker-003, component: gpu-driver, state: upgrade-required, cause: slot_held_by_failed,
            detail: "1 of maxParallelUpgrades 1 slots held by upgrade-failed gpu-worker-001",
            evidence: {upgrade_failed_nodes: [gpu-worker-001]}, since: "2026-11-25T10:00:00Z",
            seconds_in_state: 5400, in_state_for: 1h30m, remedy: "fix each upgrade-failed node's cause, ..."}]
cluster:
  description: Cluster-wide blockers (C(driver_daemonset_unscheduled), C(rollout_interrupted)) with evidence.
  returned: always
  type: list
  elements: dict
summary:
  description: One line per finding, as C(playbooks/diagnose.yml) prints them.
  returned: always
  type: list
  elements: str
remediation_candidates:
  description: Every action the diagnosis offers, taken or not.
  returned: always
  type: list
  elements: dict
remediations:
  description: The actions taken (in check mode, the ones it would take) with C(result).
  returned: always
  type: list
  elements: dict
deferred:
  description: Candidates not taken this run, with why (one per node, O(max_actions), O(remediate_actions)).
  returned: always
  type: list
  elements: dict
checked_at:
  description: The API server's time of the diagnosis.
  returned: always
  type: str
api_requests:
  description: API requests the module sent.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._doctor_remedy import ACTIONS, run_doctor
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        remediate={"type": "bool", "default": False},
        max_actions={"type": "int", "default": 5},
        remediate_actions={"type": "list", "elements": "str", "choices": list(ACTIONS), "default": list(ACTIONS)},
        remediate_pod_selector={"type": "str", "default": ""},
        node_selector={"type": "str", "default": ""},
        lease_namespace={"type": "str", "default": ""},
        lease_name={"type": "str", "default": "gpufleet-upgrade"},
        ledger_configmap={"type": "str", "default": "gpufleet-upgrade-ledger"},
        max_logs={"type": "int", "default": 3},
        actor={"type": "str", "default": "unknown"},
    )
    return spec


def diagnose(module):
    params = module.params
    return run_doctor(
        KubeApi.from_params(params),
        check_mode=module.check_mode,
        remediate=params["remediate"],
        max_actions=params["max_actions"],
        remediate_actions=params["remediate_actions"],
        pod_selector=params["remediate_pod_selector"],
        node_selector=params["node_selector"],
        lease_namespace=params["lease_namespace"],
        lease_name=params["lease_name"],
        ledger_name=params["ledger_configmap"],
        max_logs=params["max_logs"],
        actor=params["actor"],
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: diagnose(module),
        failure="Failed to diagnose the cluster's upgrades",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
