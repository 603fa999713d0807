#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: permission_check
short_description: Check the credentials may do everything a playbook, stage and component group will do
version_added: 0.1.0
description:
  - Asks the API server, with one C(SelfSubjectAccessReview) per permission, whether the credentials may do each thing
    the run will do (verb, API group, resource, subresource, namespace), and fails before anything is changed when
    one is missing, listing each missing permission, the steps that need it and the ClusterRole shipped in the
    collection's C(rbac/) directory that grants it (and whether it is bound cluster-wide or in one namespace).
  - The permissions come from one table in the collection (module_utils C(_permissions)), derived from what every
    module and task of the roles calls; the shipped C(rbac/) manifests and C(docs/security.md) are checked against
    the same table.
  - With O(playbook=rbac) (playbooks/rbac.yml), checks the verbs on each kind of object given in O(objects) and, to
    apply them, kube-apiserver's RBAC escalation check ahead of time - creating or updating a ClusterRole needs every
    permission it grants held (or C(escalate) on it), binding one needs its permissions held where it is bound (or
    C(bind) on it) - and fails naming each object that would be refused and the permissions not held.
  - Writes nothing; access reviews are answered without being stored.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
    description: Runs the same checks; they write nothing.
  diff_mode:
    support: none
    description: Nothing changes.
options:
  playbook:
    description: The playbook whose permissions to check.
    type: str
    choices: [audit, upgrade, diagnose, rehearse, rbac]
    required: true
  stage:
    description: The stage of C(upgrade.yml). Required with O(playbook=upgrade).
    type: str
    choices: [canary, bake, promote, rollback]
  group:
    description: The component group that changes (the plan's group). Required with O(playbook=upgrade).
    type: str
    choices: [gpu_operator, network_operator, firmware, openshift, sriov_operator]
  features:
    description:
      - Optional paths the run takes, each adding permissions - V(matrix_configmap) (the audit reads the matrix from a
        ConfigMap), V(nvidiadriver) (the GPU Operator canary uses an NVIDIADriver resource),
        V(rollback_on_bake_failure) (a failed bake check rolls the canary back), V(doctor_remediate) (the doctor
        remediates), V(network_operator_helm) (the Network Operator moves with Helm), V(gitops) (GitOps mode reads the
        Argo CD Application).
    type: list
    elements: str
    default: []
  namespaces:
    description:
      - The namespaces the namespaced ClusterRoles are bound in, by key - C(ledger) (ledger, stage Lease, gate Jobs),
        C(gpu_operator), C(network_operator), C(sriov_operator), C(matrix) (the audit's matrix ConfigMap).
      - An empty or missing C(gpu_operator) is read from the GPU Operator's ClusterPolicy (C(status.namespace)), and so
        is an empty or missing C(ledger) (the ledger's default namespace is the GPU Operator's).
    type: dict
    default: {}
  objects:
    description:
      - With O(playbook=rbac), the objects playbooks/rbac.yml applies (the C(gpufleet.upgrade.rbac_objects) filter's
        output) - ServiceAccounts, ClusterRoles and bindings.
    type: list
    elements: dict
    default: []
  state:
    description: With O(playbook=rbac), whether the objects are to be applied or removed.
    type: str
    choices: [present, absent]
    default: present
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: Security and permissions
    description: docs/security.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/security.md
"""

EXAMPLES = r"""
- name: Check the credentials may run the canary of a GPU Operator change
  gpufleet.upgrade.permission_check:
    playbook: upgrade
    stage: canary
    group: gpu_operator
    namespaces:
      ledger: nvidia-gpu-operator

- name: Check the audit's credentials
  gpufleet.upgrade.permission_check:
    playbook: audit

- name: Check the credentials may apply the shipped roles and bindings (playbooks/rbac.yml)
  gpufleet.upgrade.permission_check:
    playbook: rbac
    objects: "{{ rbac_objects }}"
"""

RETURN = r"""
escalation:
  description: With O(playbook=rbac), the objects kube-apiserver would refuse to grant (empty on success).
  returned: when O(playbook=rbac)
  type: list
  elements: str
steps:
  description: The steps of the run whose permissions were checked.
  returned: always
  type: list
  elements: str
  sample: [upgrade_plan, upgrade_lease, upgrade_record, gpu_operator_preflight]
namespaces:
  description: The namespaces the checks used, by key.
  returned: always
  type: dict
  sample: {ledger: nvidia-gpu-operator, gpu_operator: nvidia-gpu-operator}
checked:
  description: How many permissions were asked for.
  returned: always
  type: int
  sample: 31
missing:
  description:
    - The permissions the credentials lack (empty on success); each names C(verb), C(group), C(resource),
      C(subresource), C(namespace) (empty at the cluster scope), C(cluster_role) and C(steps).
  returned: always
  type: list
  elements: dict
  sample: [{verb: patch, group: "", resource: nodes, subresource: "", namespace: "", cluster_role: gpufleet-upgrade,
            steps: [upgrade_canary_label]}]
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
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permission_check import (
    PermissionRequest,
    check_permissions,
    check_rbac_apply,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        playbook={"type": "str", "required": True, "choices": ["audit", "upgrade", "diagnose", "rehearse", "rbac"]},
        stage={"type": "str", "choices": ["canary", "bake", "promote", "rollback"]},
        group={
            "type": "str",
            "choices": ["gpu_operator", "network_operator", "firmware", "openshift", "sriov_operator"],
        },
        features={"type": "list", "elements": "str", "default": []},
        namespaces={"type": "dict", "default": {}},
        objects={"type": "list", "elements": "dict", "default": []},
        state={"type": "str", "choices": ["present", "absent"], "default": "present"},
    )
    return spec


def check(module):
    params = module.params
    request = PermissionRequest(
        playbook=params["playbook"],
        stage=params["stage"] or "",
        group=params["group"] or "",
        features=tuple(params["features"]),
        namespaces=dict(params["namespaces"]),
    )
    # Runs before the stage Lease is taken: it neither needs nor renews one.
    api = KubeApi.from_params(params, keep_stage_lease=False)
    if request.playbook == "rbac":
        return check_rbac_apply(api, params["objects"], state=params["state"])
    return check_permissions(api, request)


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        supports_check_mode=True,
        required_if=[("playbook", "upgrade", ("stage", "group"))],
    )
    run_module(
        module,
        lambda: check(module),
        failure=f"Failed to confirm the permissions of {module.params['playbook']}.yml",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
