#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: machineconfigpool
short_description: Pause, unpause, create or remove an OpenShift MachineConfigPool, and wait for it to be Updated
version_added: 0.1.0
description:
  - C(paused) and C(unpaused) set C(spec.paused) of an existing pool with a merge patch guarded by its
    C(resourceVersion). Pausing records when, in the annotation C(gpufleet.io/paused-at), because the API keeps no
    time of a pause and a pool paused for months holds the kubelet client CA rotation. It writes as field manager
    C(gpufleet.upgrade), so C(metadata.managedFields) names it as the one that paused the pool.
  - Before any write, a pause (C(paused), or C(present) with O(paused)) is refused when the pool would stay paused,
    counted from when it was paused to O(planned_pause_hours) from now, longer than O(max_pause_hours), or (before
    OpenShift 4.13) past the next kubelet client CA rotation, read from the annotations
    C(auth.openshift.io/certificate-not-before) and C(-not-after) of the Secret
    C(openshift-kube-apiserver-operator/kube-apiserver-to-kubelet-signer) (the new CA comes at 80% of its validity).
    From 4.13 the MCO writes the new CA on paused pools too, so crossing it is a warning; a rotation that cannot be
    read is a "could not check" warning, never a pass. A pool already paused longer than O(max_pause_hours) is
    reported with who paused it (RV(paused_by)).
  - C(present) creates a custom worker pool as the OpenShift canary procedure does (its C(machineConfigSelector) takes
    the C(worker) configs and its own, its C(nodeSelector) is the role label C(node-role.kubernetes.io/<name>)), and
    puts that role label on the nodes matching O(member_selector) (they keep the worker role label) and removes it from
    the others. C(absent) removes the role label from every node, waits for the nodes to leave the pool and deletes it.
  - With O(wait), waits until the pool is Updated (conditions C(Updated=True), C(Updating=False), C(machineCount) equal
    to C(updatedMachineCount) and C(readyMachineCount), no degraded machine, C(observedGeneration) caught up) or
    Degraded, in which case the task fails naming the degraded nodes and the reason of their machine-config daemon.
    A paused pool is not waited for.
  - With O(budget_pools), the pools whose nodes share one capacity budget (the MCO keeps C(maxUnavailable) per pool),
    and before any write, C(unpaused) and C(present) refuse when the nodes of the other budget pools that are
    unavailable now (cordoned, NotReady, or updating) leave no room in O(max_unavailable) for a pool with nodes still
    to update, and otherwise set the pool's C(maxUnavailable) to what they leave; C(unpaused), C(present) and
    C(absent) refuse when a node of the pool (or leaving the canary pool for its own) is cordoned by someone other
    than the machine-config daemon, because the MCO neither updates nor counts as ready a cordoned node and the pool
    would never be Updated. The refusal names the nodes; RV(budget) says what was counted.
  - Returns the pool's status and a per-node timeline (config handed over, reboot seen, done).
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpufleet.upgrade.wait
  - gpufleet.upgrade.wait.timeout
  - gpufleet.upgrade.wait.sleep
attributes:
  check_mode:
    support: full
    description: Computes the same changes and returns them with the diff; writes nothing.
  diff_mode:
    support: full
    description: Before and after of the pool (labels, gpufleet.io annotations, spec).
options:
  name:
    description: Name of the pool.
    type: str
    required: true
  state:
    description: What the pool should be.
    type: str
    choices: [paused, unpaused, present, absent]
    required: true
  member_selector:
    description: With O(state=present), labels of the nodes that belong to the pool.
    type: dict
    default:
      gpu-canary: "true"
  paused:
    description: With O(state=present), whether the pool is paused (unset leaves an existing pool as it is).
    type: bool
  max_unavailable:
    description:
      - The pool's C(maxUnavailable) (a count or a percentage; the MCO refuses 0).
      - With O(budget_pools), the budget those pools share (a percentage of their nodes, rounded up); unset, the
        pool's own C(maxUnavailable) (1 when it has none).
    type: raw
  budget_pools:
    description:
      - Pools whose nodes share the capacity budget with this one (the pool itself may be listed). Empty, the pool
        is left to the MCO's own count of its nodes.
    type: list
    elements: str
    default: []
  max_pause_hours:
    description: Longest a pool may stay paused (hours); 0 turns the limit off, the CA rotation check stays.
    type: float
    default: 168
  planned_pause_hours:
    description: How long from now the caller plans to keep the pool paused (hours), checked against the limits.
    type: float
    default: 0
  pause_reason:
    description: Recorded on the pool (annotation C(gpufleet.io/paused-reason)) when pausing, so a person sees why.
    type: str
    default: ""
  wait:
    description: Wait until the pool is Updated (or Degraded).
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: OpenShift upgrades in this collection
    description: docs/openshift.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/openshift.md
"""

EXAMPLES = r"""
- name: Create the canary pool for the nodes labelled gpu-canary=true
  gpufleet.upgrade.machineconfigpool:
    name: gpu-canary
    state: present
    member_selector:
      gpu-canary: "true"

- name: Hold the GPU workers while the control plane is updated
  gpufleet.upgrade.machineconfigpool:
    name: worker
    state: paused
    pause_reason: OpenShift 4.17.3 canary

- name: Roll the worker pool, two nodes at a time, and wait for it
  gpufleet.upgrade.machineconfigpool:
    name: worker
    state: unpaused
    max_unavailable: 2
    wait_timeout: 14400
  register: workers

- name: Show how each node went
  ansible.builtin.debug:
    var: workers.timeline
"""

RETURN = r"""
changed:
  description: Whether the module wrote (or in check mode would write) anything.
  returned: always
  type: bool
pool:
  description: The pool's state when the module finished.
  returned: when the pool exists
  type: dict
  sample: {name: worker, paused: false, updated: true, updating: false, degraded: false, settled: true,
           machine_count: 5, updated_machine_count: 5, ready_machine_count: 5, unavailable_machine_count: 0,
           degraded_machine_count: 0, target_config: rendered-worker-7a1..., current_config: rendered-worker-7a1...,
           paused_at: null, paused_reason: null, paused_by: null, paused_by_time: null}
paused_by:
  description: Who paused the pool - C(gpufleet.upgrade) when its C(gpufleet.io/paused-at) mark is there, else the
    manager that owns C(spec.paused) in C(managedFields); null when the pool is not paused.
  returned: when the pool exists
  type: str
  sample: oc
pause_checks:
  description: The pause limits checked when pausing (C(refuse) true means the task failed before any write).
  returned: when pausing
  type: list
  elements: dict
  sample: [{pool: worker, refuse: true, warning: false,
            message: "MachineConfigPool worker would stay paused 200.0 h, over openshift_max_pause_hours=168: ..."}]
timeline:
  description: Per node of the pool that changed while the module waited.
  returned: always
  type: list
  elements: dict
  sample:
    - {node: gpu-worker-002, pool: worker, from_config: rendered-worker-1f0..., to_config: rendered-worker-7a1...,
       started_at: "2026-11-22T08:25:11Z", rebooted: true, done_at: "2026-11-22T08:31:40Z", state: Done}
degraded_nodes:
  description: Nodes of the pool whose machine-config daemon reports Degraded, with the reason.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-worker-003, pool: worker, reason: "failed to update OS: rpm-ostree rebase exited with status 1"}]
failures:
  description: Same as RV(degraded_nodes) when the pool degraded (the upgrade flow's failure format).
  returned: always
  type: list
  elements: dict
budget:
  description: With O(budget_pools), what the pool could take of the shared budget.
  returned: with O(budget_pools) and O(state=unpaused), O(state=present) or O(state=absent)
  type: dict
  sample: {pool: worker, budget: 2, unavailable_elsewhere: [gpu-worker-001], max_unavailable: 1, stalled: []}
members_added:
  description: Nodes that got the pool's role label (O(state=present)).
  returned: with O(state=present) or O(state=absent)
  type: list
  elements: str
members_removed:
  description: Nodes whose pool role label was removed.
  returned: with O(state=present) or O(state=absent)
  type: list
  elements: str
patches:
  description: What was sent.
  returned: always
  type: list
  elements: dict
diff:
  description: Before and after of the pool.
  returned: in check mode or diff mode
  type: dict
elapsed:
  description: Seconds the module ran.
  returned: always
  type: float
api_requests:
  description: API requests the module sent.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module, wait_argument_spec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_runner import (
    PoolOptions,
    WaitOptions,
    run_machineconfigpool,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        state={"type": "str", "required": True, "choices": ["paused", "unpaused", "present", "absent"]},
        member_selector={"type": "dict", "default": {"gpu-canary": "true"}},
        paused={"type": "bool"},
        max_unavailable={"type": "raw"},
        budget_pools={"type": "list", "elements": "str", "default": []},
        pause_reason={"type": "str", "default": ""},
        max_pause_hours={"type": "float", "default": 168},
        planned_pause_hours={"type": "float", "default": 0},
    )
    spec.update(wait_argument_spec())
    return spec


def pool_options(module):
    params = module.params
    max_unavailable = params["max_unavailable"]
    if isinstance(max_unavailable, str) and max_unavailable.isdigit():
        max_unavailable = int(max_unavailable)
    if max_unavailable in ("", None):
        max_unavailable = None
    return PoolOptions(
        name=params["name"],
        state=params["state"],
        member_selector={str(key): str(value) for key, value in (params["member_selector"] or {}).items()},
        paused=params["paused"],
        max_unavailable=max_unavailable,
        budget_pools=list(params["budget_pools"]),
        pause_reason=params["pause_reason"],
        max_pause_hours=params["max_pause_hours"],
        planned_pause_hours=params["planned_pause_hours"],
        wait=WaitOptions(wait=params["wait"], timeout=params["wait_timeout"], sleep=params["wait_sleep"]),
        check_mode=module.check_mode,
        diff=module._diff,
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: run_machineconfigpool(KubeApi.from_params(module.params), pool_options(module)),
        failure=f"Failed to bring MachineConfigPool {module.params['name']} to {module.params['state']}",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
