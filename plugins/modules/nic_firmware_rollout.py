#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nic_firmware_rollout
short_description: Roll NIC (or BIOS) firmware over Kubernetes nodes through their BMCs, within a capacity budget
version_added: 0.1.0
description:
  - Flashes firmware node by node with the collection's rollout engine, since no in-cluster controller does it.
    Per node - cordon, evict GPU and secondary-network (Multus) pods retrying PodDisruptionBudget refusals, upload
    the image to the node's BMC (or roll back to its C(Previous-) image), reset the host, follow the BMC jobs to their
    end, wait for the Node to be Ready after the reboot with all its C(nvidia.com/gpu) allocatable, read the versions
    back from the BMC, uncordon.
  - The budget (O(max_unavailable), a count or a percent, counting nodes already cordoned or NotReady), parallelism,
    canary-first order and failure domains are the shared engine's; progress is kept in
    C(gpufleet.io/rollout-<rollout_name>-*) node annotations, so a re-run resumes where a run stopped.
  - Before any node is touched, checks every image's sha256 and reads every target node's BMC (reachable,
    credentials, current versions, jobs already waiting). Nodes already at the target are left alone; a second run
    changes nothing.
  - At the first failure (a job the BMC fails, a BMC that does not answer, a host that does not come back) the node
    stays cordoned with a Warning Event naming the step and the BMC's message, the rollout halts and the task fails
    naming the node; nodes not started are not touched. Later runs halt on that node until a person clears its
    state annotation.
  - The node's BMC comes from O(bmcs) (for example built from inventory host vars) or from the node annotation
    O(bmc_address_annotation).
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpufleet.upgrade.alerts
  - gpufleet.upgrade.failure_domains
  - gpufleet.upgrade.node_maintenance
  - gpufleet.upgrade.redfish
  - gpufleet.upgrade.firmware_components
  - gpufleet.upgrade.wait.sleep
attributes:
  check_mode:
    support: full
    description: Reads the BMCs and the nodes and returns the rollout plan; changes nothing.
  diff_mode:
    support: full
    description:
      - Per node to flash, its BMC and device firmware versions before (read from the BMC in the preflight) and
        after (read back from the BMC once flashed; in check mode, the versions the plan flashes).
options:
  scope:
    description:
      - C(canary) flashes the nodes labelled O(canary_label)C(=true) only; C(all) every node in the pool, canaries
        first.
    type: str
    choices: [canary, all]
    default: all
  nodes:
    description: Flash these nodes only (they must be in the pool).
    type: list
    elements: str
  node_selector:
    description: Label selector of the node pool (the budget is computed over it).
    type: str
    default: nvidia.com/gpu.present=true
  canary_label:
    description: Node label whose value C(true) marks canary nodes.
    type: str
    default: gpu-canary
  bmcs:
    description:
      - BMC and credentials per node; nodes not listed use O(bmc_addresses), then the O(bmc_address_annotation)
        annotation, with O(bmc_username) and O(bmc_password).
    type: list
    elements: dict
    default: []
    suboptions:
      node:
        description: Node name.
        type: str
        required: true
      address:
        description: The BMC, C(https://host[:port]).
        type: str
        required: true
      username:
        description: BMC user for this node; defaults to O(bmc_username).
        type: str
      password:
        description: BMC password for this node; defaults to O(bmc_password).
        type: str
  bmc_addresses:
    description:
      - BMC address per node name (for example from inventory host vars), used with O(bmc_username) and
        O(bmc_password) for nodes not in O(bmcs).
    type: dict
    default: {}
  bmc_address_annotation:
    description: Node annotation holding the BMC address.
    type: str
    default: gpufleet.io/bmc-address
  apply_time:
    description: C(OnReset) (the rollout resets the host) or C(Immediate) (the BMC reboots the host itself).
    type: str
    choices: [OnReset, Immediate]
    default: OnReset
  reset_type:
    description: C(ResetType) of the host reset.
    type: str
    choices: [GracefulRestart, ForceRestart, PowerCycle]
    default: GracefulRestart
  power_cycle_on_reboot_pending:
    description:
      - A node whose update job ends "Job completed, server reboot pending" (its NIC activates the firmware only at a
        cold boot) is power cycled after its reset when C(true), then verified as any other node.
      - When C(false) that node fails at its C(reboot) step, named with the job ids, and the rollout halts.
      - See the option of the same name of M(gpufleet.upgrade.firmware_idrac_flash).
    type: bool
    default: false
  rollback:
    description: Flash each device's C(Previous-) image instead of an image.
    type: bool
    default: false
  allow_downgrade:
    description: Allow a target older than what a node runs.
    type: bool
    default: false
  rollout_name:
    description: Name of the rollout in the progress annotations.
    type: str
    default: nic-firmware
  max_unavailable:
    description:
      - Nodes of the pool that may be unavailable at once (count or percent); cordoned and NotReady nodes count.
    type: raw
    default: 1
  max_parallel:
    description: Nodes flashed at once (0 = as many as the budget allows).
    type: int
    default: 1
  budget_wait_timeout:
    description: Seconds to wait for the budget when nothing may start (0 = halt at once).
    type: int
    default: 0
  drain_timeout:
    description: Seconds to evict a node's pods (PDB refusals are retried until then).
    type: int
    default: 900
  job_timeout:
    description: Seconds a BMC job may take to be scheduled or done.
    type: int
    default: 1800
  reboot_timeout:
    description: Seconds for the jobs run during the reboot and for the BMC to see the host back.
    type: int
    default: 1800
  node_ready_timeout:
    description: Seconds for the Node to be Ready with its GPUs after the reboot.
    type: int
    default: 1800
  preflight_only:
    description: Check the images and read the BMCs, change nothing.
    type: bool
    default: false
  undo:
    description:
      - This run undoes an earlier rollout to another target (a rollback). A node that rollout left failed or
        interrupted before C(flash), or whose BMC inventory (read again before anything is touched) shows it runs
        this run's target with no update job waiting - a job that failed before it applied anything - has nothing
        to undo; it is released without running a step (no eviction), its rollout annotations are removed and it
        is uncordoned unless it was cordoned before, with an Event saying so. A node whose firmware did change is
        rolled to this target from the first step.
      - Without it, such nodes halt the rollout until a person clears them.
    type: bool
    default: false
seealso:
  - module: gpufleet.upgrade.firmware_idrac_flash
"""

EXAMPLES = r"""
- name: Flash ConnectX-7 firmware on the canary node
  gpufleet.upgrade.nic_firmware_rollout:
    scope: canary
    components:
      - name: firmware_cx7
        match: ConnectX-7
        version: "28.42.1000"
        image_path: /srv/firmware/fw-ConnectX7-rel-28_42_1000.bin
        sha256: "{{ cx7_sha256 }}"
    bmc_username: "{{ vault_bmc_username }}"
    bmc_password: "{{ vault_bmc_password }}"
    bmc_ca_path: /etc/pki/idrac-ca.pem
  register: canary

- name: Promote to every GPU node, two at a time, one per rack
  gpufleet.upgrade.nic_firmware_rollout:
    scope: all
    max_unavailable: 2
    max_parallel: 2
    failure_domain_label: gpufleet.io/rack
    components:
      - name: firmware_cx7
        match: ConnectX-7
        version: "28.42.1000"
        image_uri: http://repo.example.com/firmware/fw-ConnectX7-rel-28_42_1000.bin
        sha256: "{{ cx7_sha256 }}"
    # Built from inventory host vars, for example [{node: gpu-worker-001, address: https://idrac-001.example.com}]
    bmcs: "{{ gpu_node_bmcs }}"
    bmc_username: "{{ vault_bmc_username }}"
    bmc_password: "{{ vault_bmc_password }}"
"""

RETURN = r"""
target:
  description: The target as the progress annotations record it.
  returned: always
  type: str
  sample: firmware_cx7=28.42.1000
targets:
  description: Nodes whose BMC reported work to do (the rollout's targets).
  returned: after the preflight
  type: list
  elements: str
at_target:
  description: Nodes already at the target (not touched).
  returned: after the preflight
  type: list
  elements: str
observed_versions:
  description:
    - Per component (the matrix key), the versions the BMCs' inventories showed in the preflight, before any flash,
      and where they were read (the upgrade report's "before").
  returned: after the preflight
  type: dict
  sample: {firmware_cx7: {version: 28.39.1002, source: "BMC FirmwareInventory of 1 node(s): 28.39.1002 (8 devices)"}}
preflight:
  description: Per node, the BMC, the adapter, the versions and the plan; C(problems) lists BMCs that failed.
  returned: always
  type: dict
plan:
  description: The rollout engine's plan (order, budget, steps, canaries).
  returned: unless preflight_only
  type: dict
timeline:
  description: Per node, each step with start, end, outcome and detail (jobs, BMC messages, versions).
  returned: always
  type: list
  elements: dict
failures:
  description: Nodes that failed, with the step and the reason (the BMC's message).
  returned: always
  type: list
  elements: dict
  sample: [{node: gpu-worker-003, step: reboot, reason: "BMC https://...: firmware job JID_1 ... ended Failed: ..."}]
nodes_not_granted:
  description:
    - Nodes whose NodeMaintenance the NVIDIA Maintenance Operator did not schedule within
      C(node_maintenance.timeout); each request was withdrawn and the node left as it was. Not a failure;
      running the module again when the operator has room resumes the rollout.
  returned: unless preflight_only
  type: list
  elements: str
nodes_done:
  description: Nodes flashed in this run.
  returned: unless preflight_only
  type: list
  elements: str
nodes_released:
  description: Nodes an earlier run left with nothing to undo, released without a step (O(undo=true)).
  returned: unless preflight_only
  type: list
  elements: str
versions_after:
  description: Per node, the versions read back from the BMC.
  returned: always
  type: dict
halted:
  description: Whether the rollout halted.
  returned: unless preflight_only
  type: bool
elapsed:
  description: Seconds the task took.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import (
    alerts_gate_from_params,
    alerts_gate_suboptions,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_flash import FlashOptions
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import component_specs
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_rollout import (
    BmcAccess,
    RolloutOptions,
    run_nic_firmware_rollout,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import (
    failure_domain_argument_spec,
    firmware_components_argument_spec,
    redfish_argument_spec,
    run_module,
    wait_argument_spec,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    maintenance_choice_from_params,
    node_maintenance_suboptions,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(failure_domain_argument_spec())
    spec.update(firmware_components_argument_spec())
    spec.update(redfish_argument_spec())
    spec.update(wait_argument_spec(options=("wait_sleep",)))
    spec.update(
        scope={"type": "str", "choices": ["canary", "all"], "default": "all"},
        nodes={"type": "list", "elements": "str"},
        node_selector={"type": "str", "default": "nvidia.com/gpu.present=true"},
        canary_label={"type": "str", "default": "gpu-canary"},
        bmcs={
            "type": "list",
            "elements": "dict",
            "default": [],
            "options": {
                "node": {"type": "str", "required": True},
                "address": {"type": "str", "required": True},
                "username": {"type": "str"},
                "password": {"type": "str", "no_log": True},
            },
        },
        bmc_addresses={"type": "dict", "default": {}},
        bmc_address_annotation={"type": "str", "default": "gpufleet.io/bmc-address"},
        apply_time={"type": "str", "choices": ["OnReset", "Immediate"], "default": "OnReset"},
        reset_type={
            "type": "str",
            "choices": ["GracefulRestart", "ForceRestart", "PowerCycle"],
            "default": "GracefulRestart",
        },
        power_cycle_on_reboot_pending={"type": "bool", "default": False},
        rollback={"type": "bool", "default": False},
        allow_downgrade={"type": "bool", "default": False},
        rollout_name={"type": "str", "default": "nic-firmware"},
        max_unavailable={"type": "raw", "default": 1},
        max_parallel={"type": "int", "default": 1},
        budget_wait_timeout={"type": "int", "default": 0},
        drain_timeout={"type": "int", "default": 900},
        job_timeout={"type": "int", "default": 1800},
        reboot_timeout={"type": "int", "default": 1800},
        node_ready_timeout={"type": "int", "default": 1800},
        preflight_only={"type": "bool", "default": False},
        undo={"type": "bool", "default": False},
        alerts=alerts_gate_suboptions(),
        node_maintenance=node_maintenance_suboptions(),
    )
    return spec


def max_unavailable(value):
    """A count (also given as a digit string) or a percent such as 25%."""
    text = str(value).strip()
    return int(text) if text.isdigit() else text


def rollout_options(module):
    params = module.params
    flash = FlashOptions(
        components=component_specs(params["components"]),
        apply_time=params["apply_time"],
        reboot=True,
        reset_type=params["reset_type"],
        power_cycle_on_reboot_pending=params["power_cycle_on_reboot_pending"],
        rollback=params["rollback"],
        allow_downgrade=params["allow_downgrade"],
        job_timeout=params["job_timeout"],
        reboot_timeout=params["reboot_timeout"],
        wait_sleep=params["wait_sleep"],
        check_mode=module.check_mode,
    )
    return RolloutOptions(
        flash=flash,
        scope=params["scope"],
        nodes=tuple(params["nodes"] or ()),
        node_selector=params["node_selector"],
        canary_label=params["canary_label"],
        bmcs=tuple(
            BmcAccess(
                node=entry["node"],
                address=entry["address"],
                username=entry.get("username") or "",
                password=entry.get("password") or "",
            )
            for entry in params["bmcs"]
        ),
        bmc_addresses={str(node): str(address) for node, address in (params["bmc_addresses"] or {}).items()},
        bmc_username=params["bmc_username"] or "",
        bmc_password=params["bmc_password"] or "",
        bmc_validate_certs=params["bmc_validate_certs"],
        bmc_ca_path=params["bmc_ca_path"],
        bmc_timeout=params["bmc_timeout"],
        bmc_address_annotation=params["bmc_address_annotation"],
        rollout_name=params["rollout_name"],
        max_unavailable=max_unavailable(params["max_unavailable"]),
        max_parallel=params["max_parallel"],
        failure_domain_label=params["failure_domain_label"],
        max_per_domain=params["max_per_domain"],
        budget_wait_timeout=params["budget_wait_timeout"],
        drain_timeout=params["drain_timeout"],
        node_ready_timeout=params["node_ready_timeout"],
        wait_sleep=params["wait_sleep"],
        preflight_only=params["preflight_only"],
        undo=params["undo"],
        check_mode=module.check_mode,
        diff=module._diff,
        alerts=alerts_gate_from_params(params["alerts"]),
        node_maintenance=maintenance_choice_from_params(params["node_maintenance"]),
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: run_nic_firmware_rollout(KubeApi.from_params(module.params), rollout_options(module)),
        failure="Failed to roll out NIC firmware",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
