#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: alerts_gate
short_description: Hold while Prometheus alerts that should stop an upgrade fire
version_added: 0.1.0
description:
  - Asks Prometheus (C(GET /api/v1/alerts)) for its active alerts and waits while any C(firing) alert's name matches
    O(alert_filter), a regular expression (searched anywhere in the name); C(pending) alerts do not hold.
  - Fails after O(wait_timeout) seconds naming the alerts that still fire. Returns at once when none fires.
  - The filter works as kured's C(--alert-filter-regexp) with C(--alert-filter-match-only=true) (kured's default
    ignores the matching alerts and blocks on the others).
  - roles/upgrade runs it at each bake check and, in a promotion, before the component's rollout starts.
author:
  - gpufleet.upgrade maintainers (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Reads the alerts and holds the same way; it changes nothing in either mode.
  diff_mode:
    support: none
    description: Changes no Kubernetes object that a diff would show.
options:
  prometheus_url:
    description: Base URL of Prometheus (or of a Thanos Querier, which serves the same API).
    type: str
    required: true
  alert_filter:
    description: Regular expression over alert names; a firing alert it matches holds the run.
    type: str
    required: true
  what:
    description: What is held, for the messages (for example C(Bake check of gpu-worker-001)).
    type: str
    default: the upgrade
  prometheus_validate_certs:
    description: Verify Prometheus' TLS certificate.
    type: bool
    default: true
  wait_timeout:
    description: Seconds to hold before halting.
    type: int
    default: 600
  wait_sleep:
    description: Seconds between two looks at the alerts.
    type: float
    default: 10
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
notes:
  - The Kubernetes connection options are accepted so that one C(module_defaults) block for
    C(group/gpufleet.upgrade.k8s) serves every module of the collection; this module does not use them.
requirements:
  - Prometheus 2.x HTTP API
seealso:
  - name: Observability
    description: docs/observability.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/observability.md
"""

EXAMPLES = r"""
- name: Hold the bake check while GPU or node alerts fire
  gpufleet.upgrade.alerts_gate:
    prometheus_url: https://thanos-querier.openshift-monitoring.svc:9091
    alert_filter: "^(GPU|DCGM|KubeNode)"
    what: Bake check of gpu-worker-001
    wait_timeout: 1800
"""

RETURN = r"""
held:
  description: Whether a matching alert fired at the first look, so the run waited.
  returned: success
  type: bool
held_for:
  description: The matching alerts that fired while the module waited (name and labels).
  returned: success
  type: list
  elements: str
  sample: ["GPUXidErrors{Hostname=gpu-worker-002, gpu=0, severity=critical}"]
firing:
  description: The matching alerts still firing (empty on success; on failure the ones that halted the run).
  returned: always
  type: list
  elements: str
elapsed:
  description: Seconds the module waited.
  returned: always
  type: float
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import hold_while_firing, prometheus_fetch
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import k8s_auth_argument_spec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        {
            "prometheus_url": {"type": "str", "required": True},
            "alert_filter": {"type": "str", "required": True},
            "what": {"type": "str", "default": "the upgrade"},
            "prometheus_validate_certs": {"type": "bool", "default": True},
            "wait_timeout": {"type": "int", "default": 600},
            "wait_sleep": {"type": "float", "default": 10.0},
        }
    )
    return spec


def hold(module):
    params = module.params
    fetch = prometheus_fetch(validate_certs=params["prometheus_validate_certs"])
    result = hold_while_firing(
        fetch,
        prometheus_url=params["prometheus_url"],
        alert_filter=params["alert_filter"],
        timeout=float(params["wait_timeout"]),
        sleep=float(params["wait_sleep"]),
        what=params["what"],
    )
    return dict(result, changed=False)


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(module, lambda: hold(module), failure="Failed to pass the alerts gate")


if __name__ == "__main__":
    main()
