#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stage_lease
short_description: Hold the Lease that lets one upgrade run at a time drive a cluster
version_added: 0.1.0
description:
  - Takes (O(state=present)) or gives up (O(state=absent)) a C(coordination.k8s.io/v1) Lease with Kubernetes'
    leader-election semantics, so two runs of C(playbooks/upgrade.yml) never drive the same cluster at once.
  - O(state=present) takes the Lease when none exists, when nobody holds it, or when its holder stopped renewing it
    for C(leaseDurationSeconds) (a killed run), and keeps it when O(holder) already holds it. While another holder's
    Lease is valid it fails before any change, naming the holder and how long it has held the Lease. Time is the API
    server's (its C(Date) header), not the controller's. Writes are guarded by C(resourceVersion), so of two runs
    racing for the Lease one wins; the other's write answers 409 Conflict, and it reads the Lease again and decides
    again - refused, naming the winner, when another run took it; written again, up to 4 times, when it is still its
    own, free or expired.
  - O(state=absent) empties C(holderIdentity) if O(holder) holds the Lease (as client-go releases one), so the next
    run takes it at once; a Lease held by another run is left alone.
  - While a stage runs, roles/upgrade hands the Lease to every module of the collection in the environment variable
    C(GPUFLEET_UPGRADE_LEASE); those modules check it before their first request and renew it from the server's clock
    of their responses whenever a third of O(duration) has passed, and stop when another run has taken it.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
    description: Checks that no other run holds a valid Lease; writes nothing.
  diff_mode:
    support: full
    description: The holder before and after.
options:
  state:
    description: Take (or keep) the Lease, or give it up.
    type: str
    choices: [present, absent]
    default: present
  namespace:
    description: Namespace of the Lease (roles/upgrade uses the ledger's namespace).
    type: str
    required: true
  name:
    description: Name of the Lease.
    type: str
    default: gpufleet-upgrade
  holder:
    description:
      - Identity of this run, written to C(holderIdentity); it should say who runs it, from where and which AWX job, and
        be unique per run.
    type: str
    required: true
  duration:
    description:
      - Seconds (on the API server's clock) the Lease stays valid after its last renewal. A killed run's Lease expires
        this long after its last renewal; a shorter one lets a re-run resume sooner but must outlast the longest pause
        between two API requests of a module (renewals ride on them).
    type: int
    default: 300
  keep_renewed_for:
    description:
      - With O(state=present), once the Lease is held, a process of this module stays behind and renews it whenever
        a third of O(duration) has passed (on the API server's clock), so a task that waits without this collection's
        modules (a C(kubernetes.core) wait, an C(until:) loop) cannot outlast it. It stops when the Lease is no longer
        O(holder)'s (released at the end of the stage, or taken), when the C(ansible-playbook) that started it is gone
        (so a killed run's Lease still expires; killing the run's process group kills it too), or after this many
        seconds. C(0) starts none. Not in check mode.
    type: int
    default: 0
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: The upgrade flow
    description: docs/upgrade-flow.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/upgrade-flow.md
"""

EXAMPLES = r"""
- name: Take the stage Lease
  gpufleet.upgrade.stage_lease:
    namespace: nvidia-gpu-operator
    holder: "alice@awx-1 (AWX job 42) run 8f3a"
    duration: 300

- name: Give it up
  gpufleet.upgrade.stage_lease:
    state: absent
    namespace: nvidia-gpu-operator
    holder: "alice@awx-1 (AWX job 42) run 8f3a"
"""

RETURN = r"""
decision:
  description:
    - What O(state=present) decided; C(action) is C(create), C(take) (free or expired) or C(renew) (already held). On a
      refusal (failed), C(holder), C(age_seconds) and C(expires_in_seconds) say who holds it and for how long.
  returned: state=present
  type: dict
  sample: {action: take, reason: "The Lease was released", holder: "", age_seconds: 812.0}
held:
  description: Whether this run holds the Lease now (false in check mode).
  returned: always
  type: bool
keeper_pid:
  description: The process that keeps the Lease renewed (O(keep_renewed_for)); 0 when none was started.
  returned: state=present
  type: int
  sample: 48213
lease:
  description: The Lease as it is now (holder, leaseDurationSeconds, acquire and renew times, transitions).
  returned: always
  type: dict
  sample: {namespace: nvidia-gpu-operator, name: gpufleet-upgrade, holder: "alice@awx-1 run 8f3a",
           lease_duration_seconds: 300, acquire_time: "2026-11-25T10:00:00.000000Z",
           renew_time: "2026-11-25T10:04:00.000000Z", lease_transitions: 3}
diff:
  description: The holder before and after.
  returned: always
  type: dict
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
from ansible_collections.gpufleet.upgrade.plugins.module_utils._lease_run import lease_settings, take_or_release
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module, stage_lease_argument_spec


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        state={"type": "str", "default": "present", "choices": ["present", "absent"]},
        **stage_lease_argument_spec(),
    )
    return spec


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    params = module.params
    verb = "take" if params["state"] == "present" else "release"
    run_module(
        module,
        lambda: take_or_release(
            # This module manages the Lease itself: it does not renew one handed over in the environment.
            KubeApi.from_params(params, keep_stage_lease=False),
            params,
            lease_settings(params["namespace"], params),
            state=params["state"],
            keep_for=params["keep_renewed_for"],
            check_mode=module.check_mode,
        ),
        failure=f"Failed to {verb} the stage Lease {params['namespace']}/{params['name']}",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
