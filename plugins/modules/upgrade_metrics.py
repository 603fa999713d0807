#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: upgrade_metrics
short_description: Push an upgrade stage's metrics to a Prometheus Pushgateway
version_added: 0.1.0
description:
  - Turns the ledger entry of a stage run (O(entry), what M(gpufleet.upgrade.upgrade_ledger) recorded) into gauges
    and pushes them with the C(prometheus_client) library to the Pushgateway at O(url), replacing the group
    C(job=gpufleet_upgrade), C(cluster=O(cluster)), C(stage=O(stage)), so each run of a stage replaces the last one's
    numbers for that cluster.
  - "Gauges: C(gpufleet_upgrade_nodes{component,state}) (done, failed, in_progress, pending, from the component's
    timeline), C(gpufleet_upgrade_stage_duration_seconds), C(gpufleet_upgrade_stage_success),
    C(gpufleet_upgrade_stage_info{outcome,group,campaign}), C(gpufleet_upgrade_budget_headroom_nodes) (with
    O(max_unavailable)), C(gpufleet_upgrade_allocatable_gpus_min), C(gpufleet_upgrade_gate_passed{node,gate}),
    C(gpufleet_upgrade_gate_duration_seconds{node,gate}) and C(gpufleet_upgrade_last_run_timestamp_seconds)."
author:
  - gpufleet.upgrade maintainers (@gpufleet)
attributes:
  check_mode:
    support: full
    description: Computes and returns the samples; pushes nothing.
  diff_mode:
    support: none
    description: Changes no Kubernetes object that a diff would show.
options:
  url:
    description: Base URL of the Pushgateway, for example C(https://pushgateway.monitoring.svc:9091).
    type: str
    required: true
  cluster:
    description: The cluster's name (a label of the group).
    type: str
    required: true
  stage:
    description: The stage (a label of the group).
    type: str
    required: true
  entry:
    description: The run's ledger entry.
    type: dict
    required: true
  max_unavailable:
    description: The capacity budget (a count or a percent of O(gpu_nodes)), for the headroom gauge.
    type: str
  gpu_nodes:
    description: How many GPU nodes the cluster has (for a percent O(max_unavailable)).
    type: int
    default: 0
  pushgateway_validate_certs:
    description: Verify the Pushgateway's TLS certificate.
    type: bool
    default: true
  pushgateway_ca_path:
    description: CA bundle to verify the Pushgateway's certificate with.
    type: path
  pushgateway_username:
    description: User for HTTP basic authentication, when the Pushgateway sits behind it.
    type: str
  pushgateway_password:
    description: Password for HTTP basic authentication.
    type: str
  timeout:
    description: Seconds to wait for the Pushgateway.
    type: int
    default: 30
extends_documentation_fragment:
  - kubernetes.core.k8s_auth_options
notes:
  - The Kubernetes connection options are accepted so that one C(module_defaults) block for
    C(group/gpufleet.upgrade.k8s) serves every module of the collection; this module does not use them.
requirements:
  - prometheus-client
seealso:
  - name: Observability
    description: docs/observability.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/observability.md
"""

EXAMPLES = r"""
- name: Push the run's metrics
  gpufleet.upgrade.upgrade_metrics:
    url: https://pushgateway.monitoring.svc:9091
    cluster: gpu-east
    stage: canary
    entry: "{{ __upgrade_record.entry }}"
"""

RETURN = r"""
group:
  description: The Pushgateway group the metrics replaced.
  returned: always
  type: dict
  sample: {job: gpufleet_upgrade, cluster: gpu-east, stage: canary}
samples:
  description: Each sample pushed (name, labels, value).
  returned: always
  type: list
  elements: dict
  sample: [{name: gpufleet_upgrade_nodes, labels: {component: gpu_operator, state: done}, value: 1.0}]
pushed:
  description: Whether the metrics were pushed (false in check mode).
  returned: always
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import SSLValidationError, open_url

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import PushError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import k8s_auth_argument_spec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import run_module
from ansible_collections.gpufleet.upgrade.plugins.module_utils._run_metrics import (
    JOB,
    PREFIX,
    PROMETHEUS_CLIENT_IMPORT_ERROR,
    grouping_key,
    push_stage_metrics,
    stage_metrics,
)


def argument_spec():
    spec = k8s_auth_argument_spec()
    spec.update(
        {
            "url": {"type": "str", "required": True},
            "cluster": {"type": "str", "required": True},
            "stage": {"type": "str", "required": True},
            "entry": {"type": "dict", "required": True},
            "max_unavailable": {"type": "str"},
            "gpu_nodes": {"type": "int", "default": 0},
            "pushgateway_validate_certs": {"type": "bool", "default": True},
            "pushgateway_ca_path": {"type": "path"},
            "pushgateway_username": {"type": "str"},
            "pushgateway_password": {"type": "str", "no_log": True},
            "timeout": {"type": "int", "default": 30},
        }
    )
    return spec


def ansible_handler(params):
    """A prometheus_client push handler on ansible's open_url: TLS verified by default, basic auth optional."""

    def handler(url, method, timeout, headers, data):
        def send():
            try:
                open_url(
                    url,
                    method=method,
                    data=data,
                    headers=dict(headers),
                    timeout=timeout,
                    validate_certs=params["pushgateway_validate_certs"],
                    ca_path=params["pushgateway_ca_path"],
                    url_username=params["pushgateway_username"],
                    url_password=params["pushgateway_password"],
                    force_basic_auth=bool(params["pushgateway_username"]),
                )
            except (UrlConnectionError, SSLValidationError) as err:
                raise PushError(f"cannot reach the Pushgateway: {err}") from err

        return send

    return handler


def push(module):
    params = module.params
    samples = stage_metrics(params["entry"], max_unavailable=params["max_unavailable"], gpu_nodes=params["gpu_nodes"])
    group = dict(job=JOB, **grouping_key(cluster=params["cluster"], stage=params["stage"]))
    if not module.check_mode:
        push_stage_metrics(
            params["url"],
            samples=samples,
            cluster=params["cluster"],
            stage=params["stage"],
            handler=ansible_handler(params),
            timeout=params["timeout"],
        )
    return {
        # A push replaces the group (its push time moves): check mode says the real run changes it.
        "changed": True,
        "pushed": not module.check_mode,
        "group": group,
        "samples": [{"name": f"{PREFIX}_{name}", "labels": labels, "value": value} for name, labels, value in samples],
    }


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    missing = [("prometheus-client", PROMETHEUS_CLIENT_IMPORT_ERROR)] if PROMETHEUS_CLIENT_IMPORT_ERROR else []
    run_module(module, lambda: push(module), failure="Failed to push the stage's metrics", missing=missing)


if __name__ == "__main__":
    main()
