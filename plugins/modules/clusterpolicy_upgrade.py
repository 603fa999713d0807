#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: clusterpolicy_upgrade
short_description: Roll a new NVIDIA GPU driver out through the GPU Operator's upgrade controller, canary first
version_added: 0.1.0
description:
  - Sets the target GPU driver (C(version), C(repository) and C(image) together, as OpenShift requires) and the
    driver C(upgradePolicy) on the ClusterPolicy, or the driver on the NVIDIADriver resources when the
    ClusterPolicy sets C(spec.driver.useNvidiaDriverCRD). The GPU Operator's upgrade controller then does the node
    work; this module scopes, paces, watches and halts it.
  - Writes are JSON merge patches of only the fields that change, guarded by C(resourceVersion); on a conflict the
    object is read again and the patch recomputed, so another writer's change is never lost.
  - O(upgrade_policy) keys are checked against the CRD the cluster serves (its C(openAPIV3Schema)); an unknown key
    fails the task before any write instead of being pruned silently by the API server.
  - "Canary scoping, chosen with O(canary_mode): C(nvidiadriver) creates an NVIDIADriver for the canary pool
    (C(nodeSelector) = O(canary_selector)) beside the production one, which stops selecting the canary nodes (it is
    made the C(default) NVIDIADriver when the served CRD has that field and it has no nodeSelector, otherwise its
    nodes get the canary label with the value C(false) and its nodeSelector selects that); C(skip_label) puts
    C(nvidia.com/gpu-driver-upgrade.skip=true) on every node that must wait. A skip label holds the controller, not
    the driver: any recreation of a driver pod on a held node brings up the new driver; preflight warns about what
    could cause one."
  - With O(scope=all) every node hosting a driver pod is targeted, the skip labels this module set are removed,
    and (O(remove_canary_driver)) the canary NVIDIADriver is deleted once every node runs the target.
  - Watches the nodes' C(nvidia.com/gpu-driver-upgrade-state) labels, driver pods and C(GPUDriverUpgrade) Events
    until every targeted node is C(upgrade-done) on the target driver, one is C(upgrade-failed), or O(wait_timeout)
    ends. Returns a per-node timeline, the failures with their reason, and GPU capacity over time.
  - At the first C(upgrade-failed) node the rollout halts. The nodes not yet started get the skip label, the failed
    node is left as it is, a Warning Event is recorded on it, and the task fails naming the node and the reason.
  - Preflight (also alone with O(preflight_only)) checks the driver DaemonSets are scheduled on every GPU node, the
    capacity budget (C(maxUnavailable) counts cordoned and NotReady nodes), free GPUs against the nodes that may go
    at once, PodDisruptionBudgets that would refuse pod deletion, and, in C(skip_label) mode, pending
    MachineConfigPool updates. Errors stop the module before any write; warnings are returned and shown.
  - Everything the module decides from is on the cluster, so a run interrupted mid-rollout continues when run again.
  - "Without the upgrade controller (the effective C(upgradePolicy.autoUpgrade) is false, or the served ClusterPolicy
    CRD has no C(spec.driver.upgradePolicy)) the module rolls the driver itself with the collection's rollout engine,
    node by node within C(maxUnavailable) (cordoned and NotReady nodes count) and C(maxParallelUpgrades): cordon,
    evict the pods that use the GPUs (PodDisruptionBudget refusals retried), delete the driver pod (the DaemonSet is
    C(OnDelete)), wait for the new one Ready at the target and for the validator, uncordon. With O(scope=canary) only
    the canary nodes are rolled and O(canary_mode) is not used. Progress is kept in C(gpufleet.io/rollout-gpu-driver-*)
    annotations on the Nodes, so a re-run resumes; the first failed node halts the rollout, stays cordoned, and the
    task names it with the command that clears it. C(autoUpgrade) is never written unless O(upgrade_policy) names it."
  - The upgrade controller knows no failure domains. With O(failure_domain_label) and O(scope=all), every target
    gets the skip label before the target changes, and the module releases the targets in turn, domain by domain,
    within the effective C(maxUnavailable) (cordoned and NotReady nodes count) and C(maxParallelUpgrades), at most
    O(max_per_domain) per domain, as the C(auto_upgrade) mode of M(gpufleet.upgrade.ofed_rolling_reload) does (one
    pacer). This needs O(wait). The nodes of a canary are released together. Without the controller the rollout
    engine keeps the same limits.
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
    description: Returns the plan, the preflight and (with C(--diff)) the diff; writes nothing.
  diff_mode:
    support: full
    description: Before and after of the ClusterPolicy, NVIDIADrivers and node labels, server-managed fields removed.
options:
  driver:
    description:
      - The target driver. Required unless O(preflight_only=true).
    type: dict
    suboptions:
      version:
        description: Driver version, for example C(570.124.06).
        type: str
        required: true
      repository:
        description: Image repository; defaults to the object's current one.
        type: str
      image:
        description: Image name; defaults to the object's current one.
        type: str
  upgrade_policy:
    description:
      - Fields of the ClusterPolicy's C(spec.driver.upgradePolicy), with the CRD's own names (C(autoUpgrade),
        C(maxParallelUpgrades), C(maxUnavailable), C(waitForCompletion), C(podDeletion), C(drain)).
      - Only the keys given are changed. A C(maxUnavailable) given as a digit string is sent as a number (the
        controller refuses a string without C(%)).
      - Written to the ClusterPolicy (its upgrade controller drives every driver DaemonSet), and also to an
        NVIDIADriver that already carries its own C(upgradePolicy) (GPU Operator v26.7 and later).
    type: dict
  cluster_policy:
    description: Name of the ClusterPolicy; defaults to the one the operator honours (the oldest).
    type: str
  operator_namespace:
    description: Namespace of the GPU Operator; defaults to the ClusterPolicy's C(status.namespace).
    type: str
  scope:
    description:
      - C(canary) targets the nodes matching O(canary_selector) and scopes the rollout to them with O(canary_mode).
      - C(all) targets every node hosting a driver pod (except nodes someone else holds with the skip label) and
        removes the canary scoping this module put in place.
    type: str
    choices: [canary, all]
    default: all
  canary_mode:
    description: How the canary is scoped; required with O(scope=canary).
    type: str
    choices: [nvidiadriver, skip_label]
  canary_selector:
    description: Labels of the canary node(s).
    type: dict
    default:
      gpu-canary: "true"
  canary_driver_name:
    description: Name of the canary pool's NVIDIADriver (O(canary_mode=nvidiadriver)).
    type: str
    default: gpu-canary
  remove_canary_driver:
    description:
      - With O(scope=all), delete the canary NVIDIADriver this module created once every node runs the target.
        Its nodes move back to the production NVIDIADriver, which recreates their driver pod at the same driver.
    type: bool
    default: true
  retry_failed_nodes:
    description:
      - Relabel targeted nodes that are C(upgrade-failed) from an earlier attempt C(upgrade-required), the upstream
        manual retry. Without it such a node stops the run in preflight. Use it for a rollback.
    type: bool
    default: false
  preflight_only:
    description: Run the read-only preflight and return its findings; change nothing.
    type: bool
    default: false
  gitops_managed:
    description:
      - GitOps mode (docs/gitops.md). C(Kind/name) of the objects Argo CD writes from Git, for example
        C(ClusterPolicy/cluster-policy). Their changes are not sent to the cluster; the module makes the writes it may
        make (node labels), stops and returns the managed objects' merge patches in RV(gitops_changes) for
        M(gpufleet.upgrade.gitops_change) to commit.
      - A plan that would create or delete a managed object, or O(canary_mode=nvidiadriver) with a managed
        NVIDIADriver, is refused before any write.
  wait:
    description: Wait until every targeted node runs the target driver (or one fails).
  wait_timeout:
    description: How many seconds to wait in total (canary pool move, rollout, canary pool removal).
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: GPU Operator driver upgrades in this collection
    description: docs/gpu_operator.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/gpu_operator.md
"""

EXAMPLES = r"""
- name: Preflight the cluster for a driver upgrade
  gpufleet.upgrade.clusterpolicy_upgrade:
    preflight_only: true
    upgrade_policy:
      maxUnavailable: 2
  register: preflight

- name: Upgrade the driver on the canary node, pinned by its own NVIDIADriver
  gpufleet.upgrade.clusterpolicy_upgrade:
    driver:
      version: 570.124.06
    scope: canary
    canary_mode: nvidiadriver
    upgrade_policy:
      autoUpgrade: true
      maxParallelUpgrades: 1
      maxUnavailable: 1
    wait_timeout: 3600
  register: canary

- name: Upgrade the canary node, holding the others with the upgrade controller's skip label
  gpufleet.upgrade.clusterpolicy_upgrade:
    driver:
      version: 570.124.06
    scope: canary
    canary_mode: skip_label

- name: Promote to every node, at most 4 at once and 25% of the pool away
  gpufleet.upgrade.clusterpolicy_upgrade:
    driver:
      version: 570.124.06
    scope: all
    upgrade_policy:
      maxParallelUpgrades: 4
      maxUnavailable: 25%
    wait_timeout: 14400
  register: promotion

- name: Show how each node went
  ansible.builtin.debug:
    var: promotion.timeline
"""

RETURN = r"""
changed:
  description: Whether the module wrote anything (patch, create, delete).
  returned: always
  type: bool
target:
  description: The target driver.
  returned: success
  type: dict
  sample: {version: 570.124.06, repository: null, image: null}
targets:
  description: Nodes this run watches (the canary nodes, or every node hosting a driver pod).
  returned: success
  type: list
  elements: str
  sample: [gpu-worker-001]
canary_nodes:
  description: Nodes matching O(canary_selector) that host a driver pod.
  returned: success
  type: list
  elements: str
held_by_others:
  description: Nodes someone else holds with the skip label; this run leaves them alone.
  returned: success
  type: list
  elements: str
plan:
  description: The writes of the run in order (phase C(scope), C(target), C(cleanup)), each with its reason.
  returned: success
  type: dict
  sample:
    targets: [gpu-worker-001]
    writes:
      - {op: patch, kind: Node, name: gpu-worker-002, phase: scope, why: "not a canary node: hold it until promotion",
         body: {metadata: {labels: {nvidia.com/gpu-driver-upgrade.skip: "true"}}}}
preflight:
  description: Preflight findings (C(check), C(severity) error/warning/info, C(message), C(nodes)) and a summary.
  returned: always
  type: dict
  sample:
    ok: true
    findings:
      - {check: nodes_unavailable, severity: warning, message: "1 node(s) are cordoned or NotReady...",
         nodes: [gpu-worker-003]}
    summary: {max_unavailable: 2, nodes_at_once: 1, unavailable_now: 1}
patches:
  description: What was sent, per object (merge patches include the resourceVersion they were guarded by).
  returned: always
  type: list
  elements: dict
progress:
  description: Targeted nodes by outcome (done, failed, in_progress, pending) and counts by state label.
  returned: when the module waited
  type: dict
timeline:
  description:
    - Per targeted node, each state of its latest upgrade cycle with C(entered_at) (the cluster's time, from the
      controller's Event) and C(observed_at) (when this module first saw it); either may be null.
  returned: when the module waited
  type: dict
  sample:
    gpu-worker-001:
      - {state: upgrade-required, entered_at: "2026-11-22T08:25:11Z", observed_at: null}
      - {state: cordon-required, entered_at: "2026-11-22T08:25:34Z", observed_at: "2026-11-22T08:25:35Z"}
      - {state: upgrade-done, entered_at: "2026-11-22T08:32:59Z", observed_at: "2026-11-22T08:33:01Z"}
failures:
  description: Failed nodes with their state and the reason (controller Warning Events, driver pod status).
  returned: always
  type: list
  elements: dict
  sample:
    - node: gpu-worker-001
      state: upgrade-failed
      reason: "driver pod nvidia-gpu-operator/nvidia-driver-daemonset-x (driver 575.57.08) is CrashLoopBackOff after
        11 restarts: no kernel-devel package matches the running kernel 5.14.0-427.40.1.el9_4.x86_64"
nodes_not_granted:
  description:
    - Nodes whose NodeMaintenance the NVIDIA Maintenance Operator did not schedule within
      C(node_maintenance.timeout); each request was withdrawn and the node left as it was. Not a failure;
      running the module again when the operator has room resumes the rollout.
  returned: when the module rolled without the upgrade controller
  type: list
  elements: str
halted:
  description: True when the rollout halted at a failed node.
  returned: always
  type: bool
halt:
  description: Failed nodes, nodes held by the halt, and nodes that were under way.
  returned: when halted
  type: dict
pacing:
  description:
    - The targets in the order this run releases them, its limits (C(max_unavailable), C(max_parallel),
      C(max_per_domain)), the failure-domain label and the nodes released so far.
  returned: with O(failure_domain_label), O(scope=all) and the upgrade controller, once the run watches the rollout
  type: dict
capacity:
  description: Allocatable C(nvidia.com/gpu) over all GPU nodes and the unavailable nodes, sampled on change.
  returned: always
  type: list
  elements: dict
  sample:
    - {at: "2026-11-22T08:25:35Z", elapsed: 0.4, allocatable_gpus: 48, unavailable_nodes: []}
    - {at: "2026-11-22T08:25:52Z", elapsed: 17.1, allocatable_gpus: 40, unavailable_nodes: [gpu-worker-001]}
diff:
  description: Before and after of each changed object (with C(--diff) or in check mode).
  returned: in check mode or diff mode
  type: list
  elements: dict
operator_namespace:
  description: Namespace of the GPU Operator.
  returned: success
  type: str
  sample: nvidia-gpu-operator
cluster_policy:
  description: Name of the ClusterPolicy.
  returned: success
  type: str
uses_nvidia_driver_crd:
  description: Whether the cluster manages the driver with NVIDIADriver resources.
  returned: success
  type: bool
gitops_changes:
  description: With O(gitops_managed), the merge patches of the managed objects still to be written in Git.
  returned: always
  type: list
  elements: dict
  sample: [{kind: ClusterPolicy, name: cluster-policy, patch: {spec: {driver: {version: 570.124.06}}}}]
gitops_pending:
  description: True when the run stopped for RV(gitops_changes) to be committed and synced.
  returned: always
  type: bool
elapsed:
  description: Seconds the module ran.
  returned: always
  type: float
upgrade_controller:
  description: False when no upgrade controller moved the driver and the module replaced the driver pods itself.
  returned: when the module rolled without the upgrade controller
  type: bool
rollout:
  description:
    - Without the upgrade controller, the rollout engine's result (C(plan), per-node C(timeline) of steps,
      C(nodes_done), C(nodes_failed), C(nodes_not_started), C(peak_unavailable)).
  returned: when the module rolled without the upgrade controller
  type: dict
api_requests:
  description: API requests the module sent.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import (
    alerts_gate_from_params,
    alerts_gate_suboptions,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_runner import (
    DriverRolloutOptions,
    run_driver_rollout,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import (
    failure_domain_argument_spec,
    finding_warnings,
    gitops_argument_spec,
    run_module,
    wait_argument_spec,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    maintenance_choice_from_params,
    node_maintenance_suboptions,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(gitops_argument_spec())
    spec.update(failure_domain_argument_spec())
    spec.update(
        driver={
            "type": "dict",
            "options": {
                "version": {"type": "str", "required": True},
                "repository": {"type": "str"},
                "image": {"type": "str"},
            },
        },
        upgrade_policy={"type": "dict"},
        cluster_policy={"type": "str"},
        operator_namespace={"type": "str"},
        scope={"type": "str", "choices": ["canary", "all"], "default": "all"},
        canary_mode={"type": "str", "choices": ["nvidiadriver", "skip_label"]},
        canary_selector={"type": "dict", "default": {"gpu-canary": "true"}},
        canary_driver_name={"type": "str", "default": "gpu-canary"},
        remove_canary_driver={"type": "bool", "default": True},
        retry_failed_nodes={"type": "bool", "default": False},
        preflight_only={"type": "bool", "default": False},
    )
    spec.update(wait_argument_spec())
    spec.update(alerts=alerts_gate_suboptions(), node_maintenance=node_maintenance_suboptions())
    return spec


def rollout_options(module):
    params = module.params
    return DriverRolloutOptions(
        driver=params["driver"],
        upgrade_policy=params["upgrade_policy"],
        cluster_policy=params["cluster_policy"],
        operator_namespace=params["operator_namespace"],
        scope=params["scope"],
        canary_mode=params["canary_mode"],
        canary_selector={str(key): str(value) for key, value in (params["canary_selector"] or {}).items()},
        canary_driver_name=params["canary_driver_name"],
        remove_canary_driver=params["remove_canary_driver"],
        retry_failed_nodes=params["retry_failed_nodes"],
        preflight_only=params["preflight_only"],
        wait=params["wait"],
        wait_timeout=params["wait_timeout"],
        wait_sleep=params["wait_sleep"],
        check_mode=module.check_mode,
        diff=module._diff,
        gitops_managed=tuple(params["gitops_managed"]),
        gitops_synced=params["gitops_synced"],
        alerts=alerts_gate_from_params(params["alerts"]),
        node_maintenance=maintenance_choice_from_params(params["node_maintenance"]),
        failure_domain_label=params["failure_domain_label"],
        max_per_domain=params["max_per_domain"],
    )


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("scope", "canary", ("canary_mode",)), ("preflight_only", False, ("driver",))],
        supports_check_mode=True,
    )
    run_module(
        module,
        lambda: run_driver_rollout(KubeApi.from_params(module.params), rollout_options(module)),
        failure="Failed to upgrade the GPU driver",
        missing=missing_libraries(),
        more_warnings=lambda result: finding_warnings(result["preflight"]["findings"], prefix="preflight "),
    )


if __name__ == "__main__":
    main()
