#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_operator_info
short_description: Read where the NVIDIA GPU Operator runs and how it is installed
version_added: 0.1.0
description:
  - Reads the C(ClusterPolicy) objects (or the one named O(cluster_policy)), the namespace the operator runs in
    (O(operator_namespace), else the C(status.namespace) of the ClusterPolicy the operator reconciles, its oldest),
    and in that namespace the operator's OLM C(Subscription) and the ConfigMap an interrupted OLM reinstall of the
    collection's C(gpufleet.upgrade.gpu_operator) role left.
  - Also the driver images an operator release would replace. The operator takes the driver and the driver
    manager (C(k8s-driver-manager)) from the ClusterPolicy, or from an NVIDIADriver once C(useNvidiaDriverCRD) is
    set, when they name a repository, image or version, and otherwise from its own C(DRIVER_IMAGE) and
    C(DRIVER_MANAGER_IMAGE), which every OLM bundle sets to its release's (OLM's example ClusterPolicy names
    neither). A new release then changes every driver DaemonSet's template, and the upgrade controller rolls it to
    every node. RV(release_pins) are the patches that pin the images the DaemonSets run.
  - One module run for what took several reads; transient API errors (429, 5xx, resets) are retried.
  - A cluster that does not serve a kind (no OLM, say) reads as none of that kind.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpufleet.upgrade.gitops
attributes:
  check_mode:
    support: full
    description: Reads only, in check mode as in a normal run.
  diff_mode:
    support: none
    description: Reads only.
options:
  cluster_policy:
    description: The ClusterPolicy to read; every ClusterPolicy when not set.
    type: str
  operator_namespace:
    description: The operator's namespace; read from the ClusterPolicy when not set.
    type: str
  subscription:
    description: The name of the operator's OLM Subscription.
    type: str
    default: gpu-operator-certified
  olm_state_configmap:
    description: The ConfigMap in which an OLM reinstall keeps its state until it is done.
    type: str
    default: gpufleet-gpu-operator-olm-reinstall
  gitops_managed:
    description:
      - GitOps mode (docs/gitops.md). C(Kind/name) of the objects Argo CD writes from Git, for example
        C(ClusterPolicy/cluster-policy). Their pins are returned in RV(release_pin_gitops_changes) rather than
        RV(release_pins).
requirements:
  - kubernetes >= 24.2.0
"""

EXAMPLES = r"""
- name: Find the GPU Operator and how it is installed
  gpufleet.upgrade.gpu_operator_info:
  register: gpu_operator
"""

RETURN = r"""
cluster_policies:
  description: The ClusterPolicies read (the named one, or all).
  returned: always
  type: list
  elements: dict
namespace:
  description: The operator's namespace; empty when neither given nor reported by a ClusterPolicy.
  returned: always
  type: str
  sample: nvidia-gpu-operator
subscription:
  description: The operator's OLM Subscription; empty when there is none.
  returned: always
  type: dict
olm_state:
  description: The ConfigMap an interrupted OLM reinstall left; empty when there is none.
  returned: always
  type: dict
olm:
  description: Whether OLM manages the operator (its Subscription exists, or a reinstall is under way).
  returned: always
  type: bool
  sample: true
release_pins:
  description:
    - The driver owners (the ClusterPolicy, or its NVIDIADrivers) whose driver or C(manager) names no image, with
      the images their driver DaemonSets run (C(what) is C(driver) or C(driver manager)) and the merge patch that
      pins them. Empty when every owner names its own.
  returned: always
  type: list
  elements: dict
  sample:
    - kind: ClusterPolicy
      name: gpu-cluster-policy
      images: [{what: driver manager, image: nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:b072c579}]
      patch: {spec: {driver: {manager: {image: nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:b072c579}}}}
release_pin_gitops_changes:
  description: The pins of the objects in O(gitops_managed), as merge patches for M(gpufleet.upgrade.gitops_change).
  returned: always
  type: list
  elements: dict
release_pin_problems:
  description:
    - Why a driver image cannot be pinned, one sentence each (an owner whose DaemonSets run two images is in the
      middle of a driver rollout).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_operator_info import OperatorQuery, read_operator
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import gitops_argument_spec, run_module


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(gitops_argument_spec(synced=False))
    spec.update(
        cluster_policy={"type": "str"},
        operator_namespace={"type": "str"},
        subscription={"type": "str", "default": "gpu-operator-certified"},
        olm_state_configmap={"type": "str", "default": "gpufleet-gpu-operator-olm-reinstall"},
    )
    return spec


def read(module):
    params = module.params
    query = OperatorQuery(
        cluster_policy=params["cluster_policy"] or "",
        namespace=params["operator_namespace"] or "",
        subscription=params["subscription"],
        olm_state_configmap=params["olm_state_configmap"],
        gitops_managed=tuple(params["gitops_managed"]),
    )
    return read_operator(KubeApi.from_params(params), query)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: read(module), failure="Failed to read the GPU Operator", missing=missing_libraries())


if __name__ == "__main__":
    main()
