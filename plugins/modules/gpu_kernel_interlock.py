#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_kernel_interlock
short_description: Check a GPU driver and a MOFED build exist for a new RHCOS kernel before any GPU node reboots into it
version_added: 0.1.0
description:
  - The kernel interlock of an OpenShift upgrade. Run it after the control plane update and before unpausing any pool
    with GPU nodes; it fails (and the caller leaves the pools paused) when any of these does not hold.
  - The matrix allows the new kernel - the rules C(openshift_kernel), C(driver_kernel) and C(mofed_kernel) of
    M(gpufleet.upgrade.gpu_matrix_check) on O(target) (and O(previous)), with the shipped catalog's RHCOS to kernel
    table merged with O(catalog).
  - The cluster publishes a driver toolkit for the new RHCOS - the ImageStream C(openshift/driver-toolkit) has a tag
    for it (by default the RHCOS its C(latest) tag points at, which the update just added). The GPU Operator builds
    the driver on each RHCOS node from that image.
  - The builds succeed - one pod per driver (the ClusterPolicy's GPU driver at C(gpu_driver) in O(target), the
    NicClusterPolicy's MOFED/DOCA driver at C(mofed) in O(target)) compiles it on the new RHCOS's driver toolkit, which
    carries that kernel's headers, without loading anything. The pods are deleted once their outcome is recorded, so
    the cluster ends as it began; a run that creates them reports changed all the same. A pod left by an interrupted
    run is taken over (a failed one is deleted and built again).
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
  - gpufleet.upgrade.wait.timeout
  - gpufleet.upgrade.wait.sleep
attributes:
  check_mode:
    support: full
    description:
      - Runs the matrix and driver toolkit checks and reads the build pods an interrupted run may have left; no build
        pod is created or deleted. It reports changed when a run would create or delete build pods, as a run does.
  diff_mode:
    support: full
    description:
      - The build pods, each one a run creates after (in check mode, the pods a run would create) and each pod of an
        earlier run it deletes before. A run deletes its pods once their outcome is recorded, so the cluster ends as
        it began.
options:
  target:
    description:
      - The matrix stage's effective versions after the change (C(openshift), C(kernel), C(gpu_operator),
        C(gpu_driver), C(network_operator), C(mofed), ...).
    type: dict
    required: true
  previous:
    description: The versions before the change (the kernel rules only apply when the kernel changes).
    type: dict
  catalog:
    description: Path of a user compatibility catalog merged over the shipped one.
    type: path
  rhcos:
    description: The RHCOS (OSTREE) version whose driver toolkit to use; default the one C(latest) points at.
    type: str
  check_matrix:
    description: Check the matrix rules.
    type: bool
    default: true
  check_driver_toolkit:
    description: Check the driver toolkit ImageStream.
    type: bool
    default: true
  build_check:
    description: Build the drivers on the new RHCOS's driver toolkit.
    type: bool
    default: true
  build_namespace:
    description: Namespace of the build pods; default the GPU Operator's.
    type: str
  wait_timeout:
    description:
      - Seconds to wait for each build (the module always waits for its builds).
      - Half an hour rather than the collection's hour - the timeout is per build, and one driver build takes minutes.
    default: 1800
requirements:
  - kubernetes >= 24.2.0
seealso:
  - module: gpufleet.upgrade.gpu_matrix_check
  - module: gpufleet.upgrade.clusterversion_update
"""

EXAMPLES = r"""
- name: Halt before any GPU node reboots into a kernel without a driver
  gpufleet.upgrade.gpu_kernel_interlock:
    target:
      openshift: 4.17.3
      kernel: 5.14.0-427.42.1.el9_4.x86_64
      gpu_operator: v24.9.0
      gpu_driver: 550.127.05
    previous:
      openshift: 4.16.20
      kernel: 5.14.0-427.40.1.el9_4.x86_64
  register: interlock
"""

RETURN = r"""
changed:
  description:
    - True when the run created or deleted build pods (in check mode, when a run would). False when no build runs -
      O(build_check) off, nothing to build, or an earlier check already stops the reboot.
  returned: always
  type: bool
halted:
  description: True when a check failed (the task fails too).
  returned: always
  type: bool
findings:
  description: Every check's finding (C(check), C(severity) error/warning/info, C(message), C(evidence)).
  returned: always
  type: list
  elements: dict
rhcos:
  description: The RHCOS version the driver toolkit was taken for.
  returned: when the driver toolkit has it
  type: str
  sample: 417.94.202410250757-0
dtk_image:
  description: The driver toolkit image of that RHCOS.
  returned: when the driver toolkit has it
  type: str
builds:
  description: Each build (C(what), C(version), C(image), C(succeeded), C(message), C(pod)).
  returned: always
  type: list
  elements: dict
failures:
  description: The failed checks, in the upgrade flow's failure format.
  returned: when halted
  type: list
  elements: dict
elapsed:
  description: Seconds the module ran.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    k8s_auth_argument_spec,
    missing_libraries,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import (
    finding_warnings,
    run_module,
    wait_argument_spec,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_runner import (
    InterlockOptions,
    WaitOptions,
    run_kernel_interlock,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        target={"type": "dict", "required": True},
        previous={"type": "dict"},
        catalog={"type": "path"},
        rhcos={"type": "str"},
        check_matrix={"type": "bool", "default": True},
        check_driver_toolkit={"type": "bool", "default": True},
        build_check={"type": "bool", "default": True},
        build_namespace={"type": "str"},
    )
    spec.update(wait_argument_spec(options=("wait_timeout", "wait_sleep"), wait_timeout=1800))
    return spec


def interlock_options(module):
    params = module.params
    return InterlockOptions(
        target={str(key): str(value) for key, value in params["target"].items() if value not in (None, "")},
        previous={str(key): str(value) for key, value in (params["previous"] or {}).items() if value not in (None, "")}
        or None,
        catalog_path=params["catalog"],
        rhcos=params["rhcos"],
        check_matrix=params["check_matrix"],
        check_driver_toolkit=params["check_driver_toolkit"],
        build_check=params["build_check"],
        build_namespace=params["build_namespace"],
        wait=WaitOptions(wait=True, timeout=params["wait_timeout"], sleep=params["wait_sleep"]),
        check_mode=module.check_mode,
        diff=module._diff,
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: run_kernel_interlock(KubeApi.from_params(module.params), interlock_options(module)),
        failure="Failed the kernel interlock",
        missing=missing_libraries(),
        more_warnings=lambda result: finding_warnings(result["findings"]),
    )


if __name__ == "__main__":
    main()
