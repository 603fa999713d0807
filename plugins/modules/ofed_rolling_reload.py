#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ofed_rolling_reload
short_description: Roll a new MOFED (DOCA) driver out node by node within a capacity budget
version_added: 0.1.0
description:
  - Sets the NicClusterPolicy's C(spec.ofedDriver.version) to O(target_version) (C(helm upgrade) does not change
    it), waits until the Network Operator renders it into the MOFED DaemonSets (they are C(OnDelete), so no node
    changes by itself), then reloads the driver on every targeted node whose MOFED pod does not run the target.
  - "O(mode=rolling) (the Network Operator's documented manual upgrade): for each node, mark it in progress and
    cordon it, wait for the pods matching O(job_selector) to finish (bounded; a timeout moves on, as upstream's
    waitForCompletion does), evict the pods that use a secondary network (Multus annotation
    C(k8s.v1.cni.cncf.io/networks)) and those matching O(evict.pod_selector) through the eviction API, retrying
    PodDisruptionBudget refusals until O(eviction_timeout), delete the MOFED pod, wait until the new pod is Ready at
    the target version, then uncordon the node unless it was cordoned before the rollout. Evicted workloads come back
    once the node is schedulable again."
  - Nodes run concurrently within one capacity budget (O(max_unavailable), nodes already cordoned or NotReady
    count against it), at most O(max_parallel) at once and O(max_per_domain) per O(failure_domain_label) value.
    The next node starts the moment one finishes. Canary nodes (O(canary_selector)) go first and alone.
  - Progress lives on the Nodes (annotations C(gpufleet.io/rollout-<rollout_name>-*)), so a run that was
    interrupted resumes where it stopped. The first failed node halts the rollout; it stays cordoned with a
    Warning Event, the nodes not yet started are left alone and later runs refuse to go on until a person clears
    the node.
  - "A rolling rollout sets C(ofedDriver.upgradePolicy.autoUpgrade=false) in the same patch as the version when it
    is on: the operator's own controller must not reload nodes beside it."
  - "O(mode=auto_upgrade) hands the node work to the operator's upgrade controller
    (C(ofedDriver.upgradePolicy.autoUpgrade)), with C(maxParallelUpgrades) = O(max_parallel) and the drain
    selector from O(evict.pod_selector). The NicClusterPolicy has no C(maxUnavailable): this module enforces the
    budget by holding every node that must wait with the upstream skip label
    C(nvidia.com/ofed-driver-upgrade.skip=true), releasing nodes as others finish, watching
    C(nvidia.com/ofed-driver-upgrade-state), and halting at the first C(upgrade-failed) node."
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpufleet.upgrade.alerts
  - gpufleet.upgrade.failure_domains
  - gpufleet.upgrade.gitops
  - gpufleet.upgrade.gitops.synced
  - gpufleet.upgrade.node_maintenance
  - gpufleet.upgrade.wait
  - gpufleet.upgrade.wait.timeout
  - gpufleet.upgrade.wait.sleep
attributes:
  check_mode:
    support: full
    description: Returns the plan (which nodes, in what order, what each step does, the NicClusterPolicy patch).
  diff_mode:
    support: full
    description:
      - The NicClusterPolicy's C(spec.ofedDriver) before and after and, per target node, the MOFED it runs (the
        pod's image before, the target version after), its rollout state annotation and whether the operator's
        upgrade skip label holds it; in check mode, what the run would leave.
options:
  target_version:
    description: The MOFED (DOCA driver) version, as the NicClusterPolicy writes it, for example C(25.01-0.6.0.0-0).
    type: str
    required: true
  mode:
    description: C(rolling) reloads node by node itself; C(auto_upgrade) paces the operator's upgrade controller.
    type: str
    choices: [rolling, auto_upgrade]
    default: rolling
  namespace:
    description: Namespace of the Network Operator (its MOFED pods).
    type: str
    default: nvidia-network-operator
  nic_cluster_policy:
    description: Name of the NicClusterPolicy; defaults to the only one.
    type: str
  mofed_pod_selector:
    description: Label selector of the MOFED pods.
    type: str
    default: nvidia.com/ofed-driver
  node_selector:
    description: Label selector limiting the nodes to roll out (for example C(gpu-canary=true)).
    type: str
  nodes:
    description: Names of the nodes to roll out (all nodes hosting a MOFED pod when empty).
    type: list
    elements: str
  canary_selector:
    description: Label selector of canary nodes; they go first and nothing else starts until they are done.
    type: str
  max_unavailable:
    description:
      - Nodes of the MOFED pool that may be unavailable at once, a count or a percent such as C(25%) (rounded up).
        Nodes already cordoned or NotReady count against it.
    type: raw
    default: 1
  max_parallel:
    description: Nodes worked on at once (0 = as many as the budget allows).
    type: int
    default: 1
  job_selector:
    description: Label selector of pods (jobs) to let finish on a node before its reload.
    type: str
  job_timeout:
    description: Seconds to wait for those pods; after that the rollout moves on (upstream waitForCompletion).
    type: int
    default: 300
  evict:
    description: Which pods leave a node before its driver reloads.
    type: dict
    default: {}
    suboptions:
      secondary_network:
        description: Pods with the Multus networks annotation (their NIC interfaces vanish during a reload).
        type: bool
        default: true
      pod_selector:
        description: Also pods matching this label selector (upstream C(drain.podSelector) in C(auto_upgrade)).
        type: str
      force:
        description: Also delete pods no controller manages.
        type: bool
        default: false
      delete_emptydir_data:
        description: Also delete pods with emptyDir data.
        type: bool
        default: false
  eviction_timeout:
    description: Seconds to keep retrying evictions a PodDisruptionBudget refuses before the node fails.
    type: int
    default: 300
  reload_timeout:
    description: Seconds to wait for a node's new MOFED pod to be Ready (and for the DaemonSets to render the target).
    type: int
    default: 1200
  restart_limit:
    description:
      - A new MOFED pod whose container is not Ready after this many restarts (crash loop) fails the node at once.
        Upstream waits for more than 10.
    type: int
    default: 3
  budget_timeout:
    description: Seconds to wait for the budget to free up when no node may start (cordoned or NotReady nodes).
    type: int
    default: 600
  wait:
    description: In C(auto_upgrade) mode, wait until every targeted node is C(upgrade-done) at the target.
  wait_timeout:
    description:
      - Seconds the C(auto_upgrade) watch may take.
      - Two hours rather than the collection's one - the watch covers every targeted node, each draining and
        reloading its driver in turn.
    default: 7200
  wait_sleep:
    description:
      - Seconds between two looks at the cluster.
      - 5 rather than the collection's 10 - a node's steps (an eviction, a driver pod restart) take seconds, and a
        longer pause would leave the rollout idle between them.
    default: 5
  rollout_name:
    description: Name of the rollout in the node annotations (1-30 lowercase letters, digits or C(-)).
    type: str
    default: ofed
  primary_interface_label:
    description:
      - Node label whose presence says the node's primary interface (the one with its InternalIP and default
        route) is a ConnectX port the MOFED reload takes down; its value names the interface (C(ens1f0np0),
        C(bond0)). The Kubernetes API does not tell which PCI device carries the primary network, so the label
        is set by hand or by an NFD local feature hook.
      - A target node carrying it is refused before any change, naming node and interface, unless
        O(allow_primary_interface_reload=true) (Mellanox/network-operator issues 2176, 2258).
      - Empty to skip this check.
    type: str
    default: gpufleet.io/primary-interface-mlx5
  allow_primary_interface_reload:
    description: Reload MOFED on nodes whose primary interface is a ConnectX port (see O(primary_interface_label)).
    type: bool
    default: false
  storage_modules_selector:
    description:
      - Label selector of the nodes with NVMe-oF / NFS-RDMA storage modules loaded (C(nvme_rdma), C(nvmet_rdma),
        C(rpcrdma), C(xprtrdma), C(ib_isert), C(ib_srpt)); for example the label of an NFD C(NodeFeatureRule) on
        C(kernel.loadedmodule).
      - When a target node matches and the NicClusterPolicy's C(spec.ofedDriver.env) lacks
        C(UNLOAD_STORAGE_MODULES=true), the run is refused before any change with the fix, as the DOCA
        driver container would refuse to reload and crash-loop (Mellanox/network-operator issue 1084).
      - Empty to skip this check.
    type: str
    default: gpufleet.io/rdma-storage-modules=true
  allow_storage_modules_reload:
    description: Reload MOFED on nodes with storage modules loaded although C(UNLOAD_STORAGE_MODULES) is not true.
    type: bool
    default: false
  rollback:
    description:
      - This run undoes an earlier rollout to another version (O(mode=rolling)). A node that rollout left failed or
        interrupted before its MOFED pod was touched (at C(cordon), C(wait-for-jobs) or C(evict-pods)) never
        changed; it is released without running a step (no eviction), its rollout annotations are removed and it
        is uncordoned unless it was cordoned before, with an Event saying so. A node it left failed later is
        reloaded to O(target_version) from the first step.
      - Without it, such nodes halt the rollout until a person clears them.
    type: bool
    default: false
  gitops_managed:
    description:
      - GitOps mode (docs/gitops.md). C(Kind/name) of the objects Argo CD writes from Git, for example
        C(NicClusterPolicy/nic-cluster-policy). When the NicClusterPolicy is one of them and lacks the target, the
        module does not patch it and touches no node; it returns the merge patch in RV(gitops_changes) for
        M(gpufleet.upgrade.gitops_change) to commit, with RV(gitops_pending) true.
  gitops_synced:
    description:
      - Set once the Argo CD Application synced the commit of RV(gitops_changes). The NicClusterPolicy must then
        carry the target (else the task fails naming the fields it lacks), and the rollout runs as without GitOps.
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: Network Operator upgrades in this collection
    description: docs/network_operator.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/network_operator.md
"""

EXAMPLES = r"""
- name: Show the plan of a MOFED rollout (check mode changes nothing)
  gpufleet.upgrade.ofed_rolling_reload:
    target_version: 25.01-0.6.0.0-0
    max_unavailable: 2
    max_parallel: 2
  check_mode: true
  register: plan

- name: Reload MOFED on the canary node
  gpufleet.upgrade.ofed_rolling_reload:
    target_version: 25.01-0.6.0.0-0
    node_selector: gpu-canary=true

- name: Reload MOFED everywhere, two at once, one per rack, waiting for jobs first
  gpufleet.upgrade.ofed_rolling_reload:
    target_version: 25.01-0.6.0.0-0
    max_unavailable: 25%
    max_parallel: 2
    failure_domain_label: gpufleet.io/rack
    max_per_domain: 1
    job_selector: app=batch-eval
    evict:
      secondary_network: true
      pod_selector: app=rdma-bench
    eviction_timeout: 600
  register: rollout

- name: Let the operator's upgrade controller do it, paced by the budget
  gpufleet.upgrade.ofed_rolling_reload:
    target_version: 25.01-0.6.0.0-0
    mode: auto_upgrade
    max_unavailable: 1
    max_parallel: 1
"""

RETURN = r"""
changed:
  description: Whether the module wrote anything (or would, in check mode).
  returned: always
  type: bool
target_version:
  description: The target MOFED version.
  returned: always
  type: str
mode:
  description: C(rolling) or C(auto_upgrade).
  returned: always
  type: str
selection:
  description: The MOFED pool, the targets, the nodes already at the target, the canaries, excluded nodes.
  returned: always
  type: dict
  sample: {pool: [gpu-worker-001, gpu-worker-002], targets: [gpu-worker-002], already_at_target: [gpu-worker-001],
           canaries: [], excluded: []}
safety:
  description:
    - The reload hazards found on the target nodes (O(primary_interface_label), O(storage_modules_selector)), each
      with C(allowed) true when an C(allow_*) option accepts it. Any not allowed refuses the run before any change.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-worker-001, hazard: primary-interface, allowed: false,
            detail: primary interface ens1f0np0 is a ConnectX port the MOFED reload takes down}]
gitops_changes:
  description: With O(gitops_managed), the NicClusterPolicy's merge patch still to be written in Git.
  returned: always
  type: list
  elements: dict
  sample: [{kind: NicClusterPolicy, name: nic-cluster-policy, patch: {spec: {ofedDriver: {version: 25.01-0.6.0.0-0}}}}]
gitops_pending:
  description: True when the run stopped for RV(gitops_changes) to be committed and synced (nothing else was done).
  returned: always
  type: bool
policy_patch:
  description: The merge patch of the NicClusterPolicy (empty when it already had the target).
  returned: always
  type: dict
  sample: {spec: {ofedDriver: {version: 25.01-0.6.0.0-0}}}
plan:
  description:
    - The rollout plan, computed before any write, in check mode too. In C(rolling) mode the engine's plan
      (budget, order, per-node action, steps with what each does, the forecast start order); in C(auto_upgrade)
      mode the order, the nodes held and released now, and the budget.
  returned: when there is something to roll out
  type: dict
timeline:
  description:
    - Per node, in C(rolling) mode its steps with start, end, seconds and outcome; in C(auto_upgrade) mode the
      state labels observed. Nodes skipped (done earlier) and not started are listed too.
  returned: always
  type: list
  elements: dict
  sample:
    - node: gpu-worker-002
      action: run
      outcome: done
      seconds: 41.2
      steps:
        - {name: cordon, outcome: done, seconds: 0.1}
        - {name: evict-pods, outcome: done, seconds: 3.2, detail: {evicted: [default/rdma-1-x], pdb_refusals: 2}}
        - {name: reload-mofed, outcome: done, seconds: 37.8}
        - {name: uncordon, outcome: done, seconds: 0.1}
failures:
  description: Failed nodes with the step and the reason.
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-worker-003, step: evict-pods, reason: "Cannot evict pod ml-training/x from node gpu-worker-003:
            PodDisruptionBudget ml-training/x (maxUnavailable 0, disruptionsAllowed 0) refused it for 300s"}]
nodes_not_granted:
  description:
    - Nodes whose NodeMaintenance the NVIDIA Maintenance Operator did not schedule within
      C(node_maintenance.timeout); each request was withdrawn and the node left as it was. Not a failure;
      running the module again when the operator has room resumes the rollout.
  returned: when a rollout ran
  type: list
  elements: str
halted:
  description: True when the rollout stopped at a failed node (or was halted by one from an earlier run).
  returned: when a rollout ran
  type: bool
halt_reason:
  description: Why it halted.
  returned: when a rollout ran
  type: str
nodes_done:
  description: Nodes that finished in this run.
  returned: when a rollout ran
  type: list
  elements: str
patches:
  description: What was written to the NicClusterPolicy.
  returned: when not in check mode
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import (
    alerts_gate_from_params,
    alerts_gate_suboptions,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import (
    failure_domain_argument_spec,
    gitops_argument_spec,
    run_module,
    wait_argument_spec,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    maintenance_choice_from_params,
    node_maintenance_suboptions,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ofed_runner import (
    OfedRolloutOptions,
    run_ofed_rollout,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ofed_safety import (
    PRIMARY_INTERFACE_LABEL,
    STORAGE_MODULES_SELECTOR,
    SafetyOptions,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(gitops_argument_spec())
    spec.update(failure_domain_argument_spec())
    spec.update(
        target_version={"type": "str", "required": True},
        mode={"type": "str", "choices": ["rolling", "auto_upgrade"], "default": "rolling"},
        namespace={"type": "str", "default": "nvidia-network-operator"},
        nic_cluster_policy={"type": "str"},
        mofed_pod_selector={"type": "str", "default": "nvidia.com/ofed-driver"},
        node_selector={"type": "str"},
        nodes={"type": "list", "elements": "str"},
        canary_selector={"type": "str"},
        max_unavailable={"type": "raw", "default": 1},
        max_parallel={"type": "int", "default": 1},
        job_selector={"type": "str"},
        job_timeout={"type": "int", "default": 300},
        evict={
            "type": "dict",
            "default": {},
            "options": {
                "secondary_network": {"type": "bool", "default": True},
                "pod_selector": {"type": "str"},
                "force": {"type": "bool", "default": False},
                "delete_emptydir_data": {"type": "bool", "default": False},
            },
        },
        eviction_timeout={"type": "int", "default": 300},
        reload_timeout={"type": "int", "default": 1200},
        restart_limit={"type": "int", "default": 3},
        budget_timeout={"type": "int", "default": 600},
        rollout_name={"type": "str", "default": "ofed"},
        rollback={"type": "bool", "default": False},
        primary_interface_label={"type": "str", "default": PRIMARY_INTERFACE_LABEL},
        allow_primary_interface_reload={"type": "bool", "default": False},
        storage_modules_selector={"type": "str", "default": STORAGE_MODULES_SELECTOR},
        allow_storage_modules_reload={"type": "bool", "default": False},
        alerts=alerts_gate_suboptions(),
        node_maintenance=node_maintenance_suboptions(),
    )
    spec.update(wait_argument_spec(wait_timeout=7200, wait_sleep=5.0))
    return spec


def rollout_options(module):
    params = module.params
    evict = params["evict"] or {}
    max_unavailable = params["max_unavailable"]
    return OfedRolloutOptions(
        target_version=params["target_version"],
        mode=params["mode"],
        namespace=params["namespace"],
        nic_cluster_policy=params["nic_cluster_policy"] or "",
        mofed_pod_selector=params["mofed_pod_selector"],
        node_selector=params["node_selector"] or "",
        nodes=tuple(params["nodes"] or ()),
        canary_selector=params["canary_selector"] or "",
        max_unavailable=max_unavailable if isinstance(max_unavailable, int) else str(max_unavailable),
        max_parallel=params["max_parallel"],
        failure_domain_label=params["failure_domain_label"],
        max_per_domain=params["max_per_domain"],
        job_selector=params["job_selector"] or "",
        job_timeout=params["job_timeout"],
        evict_secondary_network=evict.get("secondary_network", True),
        evict_pod_selector=evict.get("pod_selector") or "",
        evict_force=evict.get("force", False),
        evict_delete_emptydir_data=evict.get("delete_emptydir_data", False),
        eviction_timeout=params["eviction_timeout"],
        reload_timeout=params["reload_timeout"],
        restart_limit=params["restart_limit"],
        budget_timeout=params["budget_timeout"],
        wait=params["wait"],
        wait_timeout=params["wait_timeout"],
        wait_sleep=params["wait_sleep"],
        rollout_name=params["rollout_name"],
        rollback=params["rollback"],
        check_mode=module.check_mode,
        diff=module._diff,
        alerts=alerts_gate_from_params(params["alerts"]),
        node_maintenance=maintenance_choice_from_params(params["node_maintenance"]),
        gitops_managed=tuple(params["gitops_managed"]),
        gitops_synced=params["gitops_synced"],
        safety=SafetyOptions(
            primary_interface_label=params["primary_interface_label"] or "",
            storage_modules_selector=params["storage_modules_selector"] or "",
            allow_primary_interface_reload=params["allow_primary_interface_reload"],
            allow_storage_modules_reload=params["allow_storage_modules_reload"],
        ),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: run_ofed_rollout(KubeApi.from_params(module.params), rollout_options(module)),
        failure=f"Failed to roll out MOFED {module.params['target_version']}",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
