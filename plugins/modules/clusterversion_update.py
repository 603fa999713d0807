#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: clusterversion_update
short_description: Ask OpenShift's cluster-version operator for a release and wait until the update is Completed
version_added: 0.1.0
description:
  - Reads the ClusterVersion C(version) and the MachineConfigPools and runs a preflight (also alone with
    O(preflight_only)) - every pool Updated and none degraded, the cluster Upgradeable for a minor update, no pool
    paused long enough to endanger the kubelet client CA rotation (warning at O(paused_age_warning_hours)). A run
    resuming its own update (C(spec.desiredUpdate) already asks for O(version)) reports its paused and rolling pools
    instead of refusing them.
  - With O(pause_pools), also checks the pause the caller plans - each of those pools paused O(planned_pause_hours)
    more (counted from when it was paused, if it is) must stay within O(max_pause_hours) and end before the next
    kubelet client CA rotation, read from the annotations of the Secret
    C(openshift-kube-apiserver-operator/kube-apiserver-to-kubelet-signer) (its metadata only). Crossing the rotation
    is an error before OpenShift 4.13 and a warning from 4.13 (the MCO then writes the new CA on paused pools too);
    a rotation that cannot be read is a "could not check" warning. Pools already paused longer than
    O(max_pause_hours) are reported with who paused them (the manager of C(spec.paused) in C(managedFields)).
  - Refuses, before any write, a downgrade (OpenShift does not support them), a minor update while
    C(Upgradeable=False), a new version while another update is in progress, and a Failing cluster.
  - Sets C(spec.desiredUpdate) (C(version), C(image), C(force)) and C(spec.channel) with a merge patch guarded by
    C(resourceVersion); nothing is written when the cluster already runs or is already updating to O(version).
  - With O(wait), waits (bounded) until the newest C(status.history) entry is C(Completed) for O(version) and
    C(Progressing) is False, recording each new progress message; fails when C(Failing) turns True. Paused worker pools
    do not hold the control plane update (the MCO updates them when they are unpaused).
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
    description: Runs the preflight and returns the patch it would send and the diff; writes nothing.
  diff_mode:
    support: full
    description: Before and after of C(spec.channel) and C(spec.desiredUpdate).
options:
  version:
    description: The OpenShift release to update to, for example C(4.17.3).
    type: str
    required: true
  image:
    description: Release image (by digest) when the update service does not know the version (O(force) may be needed).
    type: str
  channel:
    description: Update channel to switch to first (for example C(eus-4.18) or C(stable-4.17)).
    type: str
  force:
    description: Skip the CVO's signature and precondition checks. Leave false unless Red Hat support says otherwise.
    type: bool
    default: false
  preflight_only:
    description: Run the read-only preflight and return its findings; change nothing.
    type: bool
    default: false
  pools:
    description: Pools the preflight looks at (default all).
    type: list
    elements: str
  paused_age_warning_hours:
    description: Warn about a pool paused for longer than this (the kubelet client CA is renewed at 292 days).
    type: float
    default: 720
  max_pause_hours:
    description: Longest a pool may stay paused; a planned pause over it is an error, a pool paused longer a warning.
      0 turns the limit off (the CA rotation check stays).
    type: float
    default: 168
  planned_pause_hours:
    description: How long the caller plans to keep O(pause_pools) paused from now.
    type: float
    default: 0
  pause_pools:
    description: Pools the caller is about to pause (or keep paused); a pool that does not exist yet counts as unpaused.
    type: list
    elements: str
    default: []
  wait:
    description: Wait until the update is Completed.
  wait_timeout:
    description:
      - Seconds to wait for the update to be Completed.
      - Two hours rather than the collection's one - an update rolls the control plane, then reboots the nodes of
        every unpaused pool one by one.
    default: 7200
  wait_sleep:
    description:
      - Seconds between two looks at the ClusterVersion.
      - 15 rather than the collection's 10 - the update's progress moves in minutes.
    default: 15
requirements:
  - kubernetes >= 24.2.0
seealso:
  - module: gpufleet.upgrade.machineconfigpool
  - name: OpenShift upgrades in this collection
    description: docs/openshift.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/openshift.md
"""

EXAMPLES = r"""
- name: Check the cluster can take the update
  gpufleet.upgrade.clusterversion_update:
    version: 4.17.3
    preflight_only: true
  register: preflight

- name: Update the control plane to 4.17.3 (worker pools paused beforehand)
  gpufleet.upgrade.clusterversion_update:
    version: 4.17.3
    channel: stable-4.17
    wait_timeout: 7200
  register: update

- name: Show the progress messages
  ansible.builtin.debug:
    var: update.progress
"""

RETURN = r"""
changed:
  description: Whether the module wrote (or in check mode would write) C(spec.desiredUpdate) or C(spec.channel).
  returned: always
  type: bool
version:
  description: The requested version.
  returned: always
  type: str
preflight:
  description: Findings (C(check), C(severity) error/warning/info, C(message)), C(ok), and every pool's state.
  returned: always
  type: dict
cluster_version:
  description: Current, desired and requested versions, channel, the target's history entry and the conditions.
  returned: always
  type: dict
  sample:
    current: 4.17.3
    desired: 4.17.3
    requested: 4.17.3
    channel: stable-4.17
    target_history: {state: Completed, version: 4.17.3, startedTime: "2026-11-22T08:25:11Z",
                     completionTime: "2026-11-22T09:05:40Z", verified: true}
    conditions: {Progressing: {status: "False", message: "Cluster version is 4.17.3"}}
history:
  description: C(status.history), newest first.
  returned: always
  type: list
  elements: dict
progress:
  description: Each new progress message seen while waiting, with when.
  returned: always
  type: list
  elements: dict
  sample: [{at: "2026-11-22T08:25:12Z", elapsed: 0.3, message: "Working towards 4.17.3"}]
diff:
  description: Before and after of the spec fields written.
  returned: in check mode or diff mode, when something changes
  type: dict
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
    ClusterVersionOptions,
    WaitOptions,
    run_clusterversion_update,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        version={"type": "str", "required": True},
        image={"type": "str"},
        channel={"type": "str"},
        force={"type": "bool", "default": False},
        preflight_only={"type": "bool", "default": False},
        pools={"type": "list", "elements": "str"},
        paused_age_warning_hours={"type": "float", "default": 720},
        max_pause_hours={"type": "float", "default": 168},
        planned_pause_hours={"type": "float", "default": 0},
        pause_pools={"type": "list", "elements": "str", "default": []},
    )
    spec.update(wait_argument_spec(wait_timeout=7200, wait_sleep=15.0))
    return spec


def update_options(module):
    params = module.params
    return ClusterVersionOptions(
        version=params["version"],
        image=params["image"],
        channel=params["channel"],
        force=params["force"],
        preflight_only=params["preflight_only"],
        pools=params["pools"],
        paused_age_warning_hours=params["paused_age_warning_hours"],
        max_pause_hours=params["max_pause_hours"],
        planned_pause_hours=params["planned_pause_hours"],
        pause_pools=params["pause_pools"],
        wait=WaitOptions(wait=params["wait"], timeout=params["wait_timeout"], sleep=params["wait_sleep"]),
        check_mode=module.check_mode,
        diff=module._diff,
    )


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: run_clusterversion_update(KubeApi.from_params(module.params), update_options(module)),
        failure=f"Failed to update OpenShift to {module.params['version']}",
        missing=missing_libraries(),
        more_warnings=lambda result: finding_warnings(result["preflight"]["findings"], prefix="preflight "),
    )


if __name__ == "__main__":
    main()
