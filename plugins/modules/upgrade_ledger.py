#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: upgrade_ledger
short_description: Decide what an upgrade stage may do, and record what it did
version_added: 0.1.0
description:
  - The memory of the upgrade flow (C(playbooks/upgrade.yml)). The ledger lives in the cluster, in a ConfigMap
    (one JSON entry per line under C(data.ledger.jsonl)), and in a JSON file; the two are merged when read.
  - With O(action=plan) it reads the matrix, the ledger, the GPU nodes and the API server's clock, and decides what
    the O(stage) may do, changing nothing. The change at hand is the one component group that differs between
    C(current_production) and C(canary_testing) (the planner of M(gpufleet.upgrade.gpu_matrix_check)); a matrix that
    changes several groups, breaks the upgrade order or violates a rule on those stages is refused, naming the
    planner's steps. C(promote) is refused until O(bake_hours) have passed on the cluster's clock since the canary
    passed, or when a bake check failed, unless O(force_reason) is given.
  - With O(action=record) it completes an entry (id, cluster time, duration), appends it to the ConfigMap (replace
    guarded by resourceVersion, retried on conflict) when O(record_in_cluster=true), to the JSON file, and writes the
    run's reports, Markdown and a self-contained HTML page (per-node timeline, capacity curve, gates, versions).
  - A run that resumes failed runs of the same stage of the same change (the ledger's earlier entries) records them in
    C(resumed_runs); the reports show the runs as one campaign.
  - Every time the entry and its reports hold is the cluster's (the API server's C(Date) header).
  - With O(action=plan) and O(lease), it first takes the stage Lease (as M(gpufleet.upgrade.stage_lease) with
    O(gpufleet.upgrade.stage_lease#module:state=present)) and then plans holding it, in one module run. roles/upgrade
    plans once before the Lease (to refuse before any write) and once holding it (another run may have recorded a
    stage meanwhile). With O(action=record) and O(lease), it gives the Lease up once the entry is recorded.
  - With O(action=read) it returns the merged ledger.
  - With O(action=sample) it picks O(sample_size) GPU nodes to validate after a fleet-wide change, spread over the
    node names and preferring nodes with O(sample_free_gpus) free GPUs now (a rollout moves workloads around).
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
    description: O(action=record) writes nothing in check mode and returns the entry it would write.
  diff_mode:
    support: none
    description: Entries are only ever appended.
options:
  action:
    description: What to do.
    type: str
    choices: [plan, record, read, sample]
    required: true
  stage:
    description: The stage to plan (O(action=plan)).
    type: str
    choices: [canary, bake, promote, rollback]
  matrix_file:
    description: The version matrix (any form M(gpufleet.upgrade.gpu_matrix_check) reads). Required for O(action=plan).
    type: path
  catalog:
    description: User compatibility catalog merged over the shipped one (default C(catalog.yaml) beside the matrix).
    type: path
  namespace:
    description:
      - Namespace of the ledger ConfigMap. Empty means the namespace of the matrix in ConfigMap form, else
        C(gpu-operator). O(action=plan) returns the namespace it chose.
    type: str
    default: ""
  configmap_name:
    description: Name of the ledger ConfigMap.
    type: str
    default: gpufleet-upgrade-ledger
  ledger_file:
    description: The JSON file copy of the ledger (every entry, refusals included). Empty for none.
    type: path
  bake_hours:
    description: Hours the canary bakes (on the cluster's clock) before a promotion.
    type: float
    default: 48
  force_reason:
    description: Promote inside the bake window or after a failed bake check; the reason is recorded.
    type: str
    default: ""
  canary_node:
    description:
      - The canary node. Empty means the matrix's C(canary_testing.canary_node), else the node already labelled,
        else the first Ready, schedulable GPU node by name.
    type: str
    default: ""
  canary_label:
    description: Label key that marks the canary node (value C(true)).
    type: str
    default: gpu-canary
  rollback_to:
    description:
      - What O(stage=rollback) undoes. C(auto) undoes the last change in the ledger that was not rolled back (a canary
        returns its node to C(current_production); a promotion applies the C(rollback) entry to every node);
        C(rollback) always applies the C(rollback) entry; C(current_production) returns the canary node to production.
    type: str
    choices: [auto, rollback, current_production]
    default: auto
  supported_groups:
    description: Component groups the flow can upgrade; a change in another group is refused before any change.
    type: list
    elements: str
    default: [gpu_operator]
  gpu_node_selector:
    description: Label selector of the GPU nodes.
    type: str
    default: nvidia.com/gpu.present=true
  sample_size:
    description: How many nodes a promotion (or a fleet-wide rollback) validates afterwards.
    type: int
    default: 2
  sample_free_gpus:
    description:
      - Free GPUs a sampled node should have (the smoke tests ask for GPUs); nodes with fewer are sampled only when
        too few have enough.
    type: int
    default: 2
  exclude_nodes:
    description: Nodes O(action=sample) leaves out.
    type: list
    elements: str
    default: []
  entry:
    description: The entry to record (O(action=record)); the module adds C(id), C(recorded_at) and C(duration_seconds).
    type: dict
  record_in_cluster:
    description: Append the entry to the ConfigMap too (runs that changed or checked the cluster); refusals are not.
    type: bool
    default: true
  report_dir:
    description:
      - Directory for the Markdown report C(upgrade-<stage>-<time>.md), C(upgrade-<cluster_name>-<stage>-<time>.md)
        with O(cluster_name), and the HTML report of the same name ending in C(.html). Empty for none.
    type: path
  cluster_name:
    description:
      - Name of the cluster (in a fleet inventory, its host name), recorded in the entry (C(cluster_name)), shown in
        the report and in its file name. Letters, digits, C(.), C(_) and C(-).
    type: str
    default: ""
  milestones:
    description:
      - With O(action=record), the milestones the run reached, each written as M(gpufleet.upgrade.upgrade_event) writes
        it (C(Normal) Events, reason C(GPUFleetUpgrade), on the group's object and the nodes; the group is the entry's
        C(group)) once the entry is recorded. roles/upgrade hands the milestones that end a stage (C(canary_passed),
        C(bake_passed), C(bake_failed), C(promoted), C(rolled_back)) to the record, in one module run with it.
      - An Event that cannot be written is a warning, not a failed record; the entry is the run's account.
    type: list
    elements: dict
    default: []
    suboptions:
      milestone:
        description: M(gpufleet.upgrade.upgrade_event)'s O(gpufleet.upgrade.upgrade_event#module:milestone).
        type: str
        required: true
        choices: [canary_started, canary_passed, bake_passed, bake_failed, promoted, rolled_back]
      nodes:
        description: M(gpufleet.upgrade.upgrade_event)'s O(gpufleet.upgrade.upgrade_event#module:nodes).
        type: list
        elements: str
        default: []
      event_message:
        description: M(gpufleet.upgrade.upgrade_event)'s O(gpufleet.upgrade.upgrade_event#module:event_message).
        type: str
        required: true
  permissions:
    description:
      - With O(action=plan), also ask whether the credentials may do everything the planned stage will do (as
        M(gpufleet.upgrade.permission_check) with O(gpufleet.upgrade.permission_check#module:playbook=upgrade)), when
        it will run and its group is in the permission table. The answer is RV(permissions); the plan stands either
        way, and roles/upgrade refuses the run before any write when permissions are missing.
    type: dict
    suboptions:
      features:
        description: What the stage will do besides the group's steps (M(gpufleet.upgrade.permission_check)'s features).
        type: list
        elements: str
        default: []
      namespaces:
        description:
          - Namespaces of the table's keys (C(gpu_operator), C(network_operator), C(sriov_operator)); C(ledger) is the
            plan's namespace.
        type: dict
        default: {}
  lease:
    description:
      - The stage Lease. With O(action=plan), taken before planning, refused before any change while another run's
        Lease is valid; with O(action=record), given up after recording (when this run holds it). Other actions
        ignore it. In check mode it is only checked (plan) or left alone (record).
    type: dict
    suboptions:
      namespace:
        description: M(gpufleet.upgrade.stage_lease)'s O(gpufleet.upgrade.stage_lease#module:namespace).
        type: str
        required: true
      name:
        description: M(gpufleet.upgrade.stage_lease)'s O(gpufleet.upgrade.stage_lease#module:name).
        type: str
        default: gpufleet-upgrade
      holder:
        description: M(gpufleet.upgrade.stage_lease)'s O(gpufleet.upgrade.stage_lease#module:holder).
        type: str
        required: true
      duration:
        description: M(gpufleet.upgrade.stage_lease)'s O(gpufleet.upgrade.stage_lease#module:duration).
        type: int
        default: 300
      keep_renewed_for:
        description:
          - M(gpufleet.upgrade.stage_lease)'s O(gpufleet.upgrade.stage_lease#module:keep_renewed_for), with
            O(action=plan).
        type: int
        default: 0
requirements:
  - kubernetes >= 24.2.0
  - PyYAML
  - jsonschema
seealso:
  - name: The upgrade flow
    description: docs/upgrade-flow.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/upgrade-flow.md
"""

EXAMPLES = r"""
- name: May the canary be promoted?
  gpufleet.upgrade.upgrade_ledger:
    action: plan
    stage: promote
    matrix_file: matrix/gpu-version-matrix.yaml
    ledger_file: reports/upgrade-ledger.json
  register: plan

- name: Record a refusal (nothing changed, so only the file and the report)
  gpufleet.upgrade.upgrade_ledger:
    action: record
    namespace: "{{ plan.namespace }}"
    ledger_file: reports/upgrade-ledger.json
    report_dir: reports
    record_in_cluster: false
    entry:
      stage: promote
      outcome: refused
      decision: refuse
      message: "{{ plan.decision.reason }}"
      started_at: "{{ plan.started_at }}"

- name: Read the ledger
  gpufleet.upgrade.upgrade_ledger:
    action: read
    namespace: nvidia-gpu-operator
  register: ledger
"""

RETURN = r"""
held:
  description: Whether this run holds the stage Lease after O(action=plan) with O(lease) (false in check mode).
  returned: action=plan with lease
  type: bool
lease:
  description:
    - With O(action=plan) and O(lease), M(gpufleet.upgrade.stage_lease)'s result of taking it (C(decision),
      C(lease), C(keeper_pid), C(changed)), also when the planning after it failed.
  returned: action=plan with lease
  type: dict
permissions:
  description:
    - With O(action=plan) and O(permissions), M(gpufleet.upgrade.permission_check)'s answer (C(steps), C(checked),
      C(missing)); C(failed) and C(msg) when permissions are missing or could not be checked, C(skipped) when the stage
      will not run or its group is not in the table.
  returned: action=plan with permissions
  type: dict
  sample: {checked: 41, missing: [], steps: [upgrade_ledger, upgrade_lease]}
events:
  description:
    - The Events O(milestones) wrote (in check mode, would write), as M(gpufleet.upgrade.upgrade_event) returns them,
      each with its C(milestone).
  returned: action=record with milestones
  type: list
  elements: dict
  sample: [{milestone: canary_passed, kind: Node, name: gpu-worker-001, action: CanaryPassed}]
lease_released:
  description: Whether O(action=record) gave the stage Lease up (false when it was not this run's, or in check mode).
  returned: action=record with lease
  type: bool
decision:
  description: What the stage may do (C(run), C(noop) or C(refuse)), why, and the bake status.
  returned: action=plan
  type: dict
  sample: {action: refuse, reason: "Promotion refused: the canary has baked 3.1 h of the 48 h required ...", bake: {}}
namespace:
  description: The ledger's namespace (also where the gates run).
  returned: action=plan
  type: str
  sample: nvidia-gpu-operator
started_at:
  description: The API server's time when the run was planned.
  returned: action=plan
  type: str
  sample: "2026-11-22T17:37:01Z"
group:
  description: The component group that changes.
  returned: action=plan
  type: str
  sample: gpu_operator
campaign:
  description: Id of the change (group and target versions); the ledger's entries of one change share it.
  returned: action=plan
  type: str
  sample: gpu_operator-3f2a1c9b0d
versions_before:
  description: Effective versions before the stage.
  returned: action=plan
  type: dict
versions_after:
  description: Effective versions the stage moves to.
  returned: action=plan
  type: dict
changes:
  description: Components that change, with from and to.
  returned: action=plan
  type: list
  elements: dict
plan:
  description: The planner's steps (as M(gpufleet.upgrade.gpu_matrix_check) returns them).
  returned: action=plan
  type: dict
canary_node:
  description: The canary node and, in RV(canary_node_source), why that node.
  returned: action=plan
  type: str
  sample: gpu-worker-001
canary_node_source:
  description: Why that canary node (variable, matrix canary_node, ledger, label, or the naming rule).
  returned: action=plan and a canary node was chosen
  type: str
  sample: matrix canary_node
validate_nodes:
  description: Nodes the stage validates afterwards.
  returned: action=plan
  type: list
  elements: str
baseline:
  description: Error counters recorded when the canary passed (the bake compares with them).
  returned: action=plan
  type: dict
entry:
  description: The entry recorded, with its id and cluster time.
  returned: action=record
  type: dict
report_path:
  description: Where the Markdown report was written.
  returned: action=record and report_dir is set
  type: str
  sample: reports/upgrade-canary-20261122T173701Z.md
html_report_path:
  description: Where the HTML report was written (one file, inline CSS and SVG, no script).
  returned: action=record and report_dir is set and Jinja2 is importable
  type: str
  sample: reports/upgrade-canary-20261122T173701Z.html
report:
  description: The Markdown report.
  returned: action=record
  type: str
sample_nodes:
  description: The nodes chosen for validation.
  returned: action=sample
  type: list
  elements: str
  sample: [gpu-worker-002, gpu-worker-006]
entries:
  description: The merged ledger, oldest first.
  returned: action=read
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import STAGE_EVENTS
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ledger import LEDGER_CONFIGMAP
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ledger_run import work_on_ledger
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import (
    milestone_argument_spec,
    run_module,
    stage_lease_argument_spec,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        action={"type": "str", "choices": ["plan", "record", "read", "sample"], "required": True},
        stage={"type": "str", "choices": ["canary", "bake", "promote", "rollback"]},
        matrix_file={"type": "path"},
        catalog={"type": "path"},
        namespace={"type": "str", "default": ""},
        configmap_name={"type": "str", "default": LEDGER_CONFIGMAP},
        ledger_file={"type": "path"},
        bake_hours={"type": "float", "default": 48},
        force_reason={"type": "str", "default": ""},
        canary_node={"type": "str", "default": ""},
        canary_label={"type": "str", "default": "gpu-canary"},
        rollback_to={"type": "str", "choices": ["auto", "rollback", "current_production"], "default": "auto"},
        supported_groups={"type": "list", "elements": "str", "default": ["gpu_operator"]},
        gpu_node_selector={"type": "str", "default": "nvidia.com/gpu.present=true"},
        sample_size={"type": "int", "default": 2},
        sample_free_gpus={"type": "int", "default": 2},
        exclude_nodes={"type": "list", "elements": "str", "default": []},
        entry={"type": "dict"},
        record_in_cluster={"type": "bool", "default": True},
        report_dir={"type": "path"},
        cluster_name={"type": "str", "default": ""},
        milestones={
            "type": "list",
            "elements": "dict",
            "default": [],
            "options": milestone_argument_spec(STAGE_EVENTS),
        },
        permissions={
            "type": "dict",
            "options": {
                "features": {"type": "list", "elements": "str", "default": []},
                "namespaces": {"type": "dict", "default": {}},
            },
        },
        lease={"type": "dict", "options": stage_lease_argument_spec()},
    )
    return spec


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("action", "plan", ("stage", "matrix_file")), ("action", "record", ("entry",))],
        supports_check_mode=True,
    )
    run_module(
        module,
        lambda: work_on_ledger(module.params, check_mode=module.check_mode, warn=module.warn),
        failure=f"Failed to {module.params['action']} the upgrade ledger",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
