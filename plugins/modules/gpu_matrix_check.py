#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_matrix_check
short_description: Validate a GPU cluster version matrix, plan the next step, audit the cluster for drift
version_added: 0.1.0
description:
  - Reads the version matrix (stages C(current_production), C(canary_testing), C(next_planned), C(rollback))
    from a file in the Git checkout, from the in-cluster ConfigMap, or both, and reports where the two differ.
  - Validates it against the published JSON Schema (C(docs/matrix.schema.json)). An invalid matrix fails
    the task naming the file, the stage, the key, what was found and what was expected, and nothing else
    runs (no API call).
  - Evaluates the coupling rules (one component group at a time, GPU Operator and driver, driver and kernel,
    MOFED and kernel, OpenShift and kernel, firmware and MOFED, upgrade order, rollback entry, known versions)
    against the compatibility catalog shipped with the collection, merged with C(catalog.yaml) beside the
    matrix when present.
  - Plans the way from C(current_production) to O(target_stage), one component group per step.
  - With O(audit=true), compares the live cluster with the matrix per node (the canary node, labelled
    C(gpu-canary=true), with C(canary_testing); the others with C(current_production)), using paginated
    list calls only.
  - Read-only; never changes the cluster.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
    description: The module reads the cluster only; check mode returns the same result and writes no report.
  diff_mode:
    support: none
    description: The only files it writes are its own reports, whose content is the result itself.
options:
  src:
    description:
      - Path of the matrix file (ConfigMap form, plain stages, or the C(versions) short form).
      - At least one of O(src) and O(configmap_name) is required.
    type: path
  configmap_name:
    description:
      - Name of the ConfigMap holding the matrix under C(data.matrix.yaml).
      - With O(src) too, both are read and their differences returned in RV(configmap_differences).
    type: str
  configmap_namespace:
    description: Namespace of O(configmap_name).
    type: str
    default: gpu-operator
  catalog:
    description:
      - Path of a user compatibility catalog merged over the shipped one.
      - Defaults to C(catalog.yaml) beside O(src) when that file exists.
    type: path
  target_stage:
    description:
      - Stage the plan leads to from C(current_production).
      - A stage the matrix does not have pins nothing, so its plan has no step; a warning says so.
    type: str
    default: canary_testing
    choices: [canary_testing, next_planned, rollback, current_production]
  audit:
    description: Compare the live cluster with the matrix (needs the Kubernetes connection options).
    type: bool
    default: false
  firmware_by_node:
    description:
      - NIC firmware read from each node's BMC, a mapping of node name to a mapping of firmware key
        (for example C(firmware_cx7)) to the version the BMC reports.
      - Without it, firmware is read from the node labels C(gpufleet.io/firmware.<name>) where present.
    type: dict
  report_dir:
    description:
      - Directory to write the reports to - C(audit.json) (the whole result), C(audit.xml) (JUnit, one test case per
        rule and per node), C(audit.md) (a summary for people) and C(audit.html) (the same as one self-contained page,
        warnings listed, per-node drift with expected and found, hints where data is missing; when Jinja2 is
        importable). Files are replaced only when their content changes.
      - With O(cluster_name) the files are C(audit-<cluster_name>.json), C(.xml), C(.md) and C(.html).
      - Not written in check mode (the result says whether they would change).
    type: path
  drift_nodes:
    description:
      - Which nodes RV(drift.nodes) returns - V(all), or V(drifted) (only nodes with drift).
      - At thousands of nodes the full table is megabytes; with O(report_dir) it is in C(audit.json) anyway, and
        V(drifted) keeps the task result (and an AWX job event) small.
    type: str
    choices: [all, drifted]
    default: all
  cluster_name:
    description:
      - Name of the cluster audited (in a fleet inventory, its host name). It titles the reports and names their files,
        so the reports of many clusters can share one directory.
      - Letters, digits, C(.), C(_) and C(-).
    type: str
    default: ""
requirements:
  - kubernetes >= 24.2.0 (for O(audit) and O(configmap_name))
  - PyYAML
  - jsonschema
seealso:
  - name: Matrix format, rules and catalog
    description: docs/matrix.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/matrix.md
"""

EXAMPLES = r"""
- name: Validate the matrix and plan the canary step
  gpufleet.upgrade.gpu_matrix_check:
    src: "{{ playbook_dir }}/../matrix/gpu-version-matrix.yaml"
  register: matrix

- name: Audit the cluster against the matrix kept in Git and in the cluster
  gpufleet.upgrade.gpu_matrix_check:
    src: matrix/gpu-version-matrix.yaml
    configmap_name: gpu-version-matrix
    configmap_namespace: gpu-operator
    audit: true
    kubeconfig: ~/.kube/config
  register: audit

- name: Stop when any node drifted
  ansible.builtin.assert:
    that: audit.drift.nodes_with_drift | length == 0
    fail_msg: "Drift on {{ audit.drift.nodes_with_drift | join(', ') }}"
"""

RETURN = r"""
matrix_source:
  description: Where the matrix that was evaluated came from.
  returned: success
  type: str
  sample: matrix/gpu-version-matrix.yaml
valid:
  description: True when no rule reports a violation.
  returned: success
  type: bool
  sample: false
violations:
  description: Rule results with status C(violation), each with its reason and evidence.
  returned: success
  type: list
  elements: dict
  sample:
    - rule: known_versions
      stage: canary_testing
      status: violation
      reason: Versions that no known release has are typos or unreleased builds.
      findings:
        - status: violation
          message: "gpu_operator v24.12.0: no GPU Operator release has this version"
          evidence: ["gpu_operator releases: v24.9.2, v25.3.0"]
matrix_warnings:
  description: Schema warnings (placeholders in next_planned) and rule results with status C(warning).
  returned: success
  type: list
  elements: dict
rules:
  description: Every rule's result per stage, with counts by status.
  returned: success
  type: dict
plan:
  description: The ordered steps from current_production to O(target_stage), one component group each.
  returned: success
  type: dict
  sample:
    from: current_production
    to: canary_testing
    direction: upgrade
    groups: [gpu_operator]
    steps:
      - step: 1
        group: gpu_operator
        title: GPU Operator
        changes: [{component: gpu_driver, from: 560.35.03, to: 570.124.06}]
configmap_differences:
  description: Differences between the file and the in-cluster ConfigMap (empty when only one was read).
  returned: success
  type: list
  elements: dict
drift:
  description: Per-node and cluster-wide comparison with the matrix, and a summary by component.
  returned: when O(audit=true)
  type: dict
  contains:
    nodes:
      description:
        - Per node, each component's expected and found version and status (ok, drift, unknown).
        - Only the nodes with drift when O(drift_nodes=drifted).
      type: list
      elements: dict
    nodes_total:
      description: How many nodes were audited.
      type: int
    cluster:
      description: Cluster-wide components (GPU Operator, OpenShift, Network Operator, SR-IOV, DCGM...).
      type: list
      elements: dict
    summary:
      description: Counts of ok, drift and unknown per component.
      type: dict
    nodes_with_drift:
      description: Names of the nodes where at least one component drifted.
      type: list
      elements: str
cluster_name:
  description: O(cluster_name), when set.
  returned: when O(cluster_name) is set
  type: str
  sample: gpu-east
reports:
  description: Report kind (C(json), C(junit), C(markdown), C(html)) to the path of its file.
  returned: when O(report_dir) is set
  type: dict
  sample: {json: reports/audit.json, junit: reports/audit.xml, markdown: reports/audit.md, html: reports/audit.html}
api_requests:
  description: How many API requests the check sent.
  returned: when the cluster was read
  type: int
  sample: 12
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._audit_report import publish_result
from ansible_collections.gpufleet.upgrade.plugins.module_utils._fleet import check_cluster_name
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_check import MatrixSource, run_matrix_check
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import HAS_YAML, YAML_IMPORT_ERROR
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_schema import (
    HAS_JSONSCHEMA,
    JSONSCHEMA_IMPORT_ERROR,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        src={"type": "path"},
        configmap_name={"type": "str"},
        configmap_namespace={"type": "str", "default": "gpu-operator"},
        catalog={"type": "path"},
        target_stage={
            "type": "str",
            "default": "canary_testing",
            "choices": ["canary_testing", "next_planned", "rollback", "current_production"],
        },
        audit={"type": "bool", "default": False},
        firmware_by_node={"type": "dict"},
        report_dir={"type": "path"},
        drift_nodes={"type": "str", "choices": ["all", "drifted"], "default": "all"},
        cluster_name={"type": "str", "default": ""},
    )
    return spec


def check(module):
    params = module.params
    cluster_name = check_cluster_name(params["cluster_name"])
    source = MatrixSource(
        path=params["src"],
        configmap_name=params["configmap_name"],
        configmap_namespace=params["configmap_namespace"],
        catalog_path=params["catalog"],
    )
    result = run_matrix_check(
        source,
        target_stage=params["target_stage"],
        audit=params["audit"],
        connect=lambda: KubeApi.from_params(params),
        firmware_by_node=params["firmware_by_node"],
    )
    if cluster_name:
        result["cluster_name"] = cluster_name
    changed = publish_result(
        result,
        report_dir=params["report_dir"],
        drift_nodes=params["drift_nodes"],
        check_mode=module.check_mode,
    )
    return dict(result, changed=changed)


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_one_of=[("src", "configmap_name")],
        supports_check_mode=True,
    )
    libraries = (("PyYAML", HAS_YAML, YAML_IMPORT_ERROR), ("jsonschema", HAS_JSONSCHEMA, JSONSCHEMA_IMPORT_ERROR))
    missing = [(library, error) for library, present, error in libraries if not present]
    if module.params["audit"] or module.params["configmap_name"]:
        missing += missing_libraries()
    run_module(module, lambda: check(module), failure="Failed to check the version matrix", missing=missing)


if __name__ == "__main__":
    main()
