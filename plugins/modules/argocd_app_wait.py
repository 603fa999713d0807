#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: argocd_app_wait
short_description: Check that an Argo CD Application is ready for a change, or wait until it synced a revision
version_added: 0.1.0
description:
  - GitOps mode (docs/gitops.md). Reads the Argo CD C(Application) (C(argoproj.io/v1alpha1)); never writes it.
  - Without O(revision), checks the Application may take a change - C(status.sync.status) is C(Synced) (or OutOfSync
    only through resources of the kinds in O(out_of_sync_allowed)), C(status.health.status) is C(Healthy), no sync
    operation runs and no error condition is reported - and fails otherwise, naming the Application, its state and
    its conditions.
  - With O(revision), waits (bounded by O(wait_timeout)) until C(status.sync.revision) is the revision and the last
    sync operation (C(status.operationState)) of it succeeded. A failed sync of the revision fails at once; a timeout
    fails naming the revision left in Git and how to go on.
  - Argo CD's state only says the manifests were applied; the stage's gates then read the cluster's objects.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpufleet.upgrade.wait.timeout
  - gpufleet.upgrade.wait.sleep
attributes:
  check_mode:
    support: full
    description: Reads only; runs the same in check mode.
  diff_mode:
    support: none
    description: Changes nothing, so there is no diff.
options:
  name:
    description: The Application's name.
    type: str
    required: true
  namespace:
    description: The Application's namespace.
    type: str
    default: argocd
  revision:
    description: The commit to wait for. Empty - check the Application is ready for a change.
    type: str
    default: ""
  out_of_sync_allowed:
    description:
      - Kinds whose OutOfSync state is accepted, for an Application without the recommended C(ignoreDifferences)
        (the ClusterPolicy is OutOfSync for good through CRD defaults, NVIDIA/gpu-operator issue 2795).
    type: list
    elements: str
    default: []
  require_healthy:
    description: Without O(revision), also require C(Healthy) (a rollback may start on a Degraded Application).
    type: bool
    default: true
  commit_note:
    description: Where the commit waited for lives, for the timeout's message (repository and branch).
    type: str
    default: ""
  wait_timeout:
    description: Seconds to wait for the revision.
    default: 600
  wait_sleep:
    description: Seconds between reads.
    default: 5
requirements:
  - kubernetes >= 24.2.0
"""

EXAMPLES = r"""
- name: Refuse the stage unless the GPU Operator's Application is synced and healthy
  gpufleet.upgrade.argocd_app_wait:
    name: gpu-operator
    namespace: argocd

- name: Wait until Argo CD applied the commit
  gpufleet.upgrade.argocd_app_wait:
    name: gpu-operator
    namespace: argocd
    revision: "{{ commit.commit }}"
    wait_timeout: 900
"""

RETURN = r"""
ready:
  description: Without O(revision), whether the Application may take a change.
  returned: without O(revision)
  type: bool
synced:
  description: With O(revision), whether the Application synced it.
  returned: with O(revision)
  type: bool
application:
  description: The Application's state as read last.
  returned: always
  type: dict
  sample:
    name: gpu-operator
    namespace: argocd
    sync_status: Synced
    sync_revision: 3f2a1c9b0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a
    health: Healthy
    operation_phase: Succeeded
    operation_revision: 3f2a1c9b0d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a
    operation_message: successfully synced (all tasks run)
    conditions: []
    out_of_sync: []
elapsed:
  description: Seconds waited.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops_argocd import (
    ApplicationWaitRequest,
    run_application_wait,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module, wait_argument_spec


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        name={"type": "str", "required": True},
        namespace={"type": "str", "default": "argocd"},
        revision={"type": "str", "default": ""},
        out_of_sync_allowed={"type": "list", "elements": "str", "default": []},
        require_healthy={"type": "bool", "default": True},
        commit_note={"type": "str", "default": ""},
    )
    spec.update(wait_argument_spec(options=("wait_timeout", "wait_sleep"), wait_timeout=600, wait_sleep=5.0))
    return spec


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    request = ApplicationWaitRequest(
        name=params["name"],
        namespace=params["namespace"],
        revision=params["revision"],
        out_of_sync_allowed=tuple(params["out_of_sync_allowed"]),
        timeout=float(params["wait_timeout"]),
        sleep=float(params["wait_sleep"]),
        commit_note=params["commit_note"],
        require_healthy=params["require_healthy"],
    )
    run_module(
        module,
        lambda: run_application_wait(KubeApi.from_params(module.params), request),
        failure=f"Failed to {'wait for' if params['revision'] else 'check'} Argo CD Application "
        f"{params['namespace']}/{params['name']}",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
