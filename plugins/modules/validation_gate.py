#!/usr/bin/python
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project

from __future__ import annotations

DOCUMENTATION = r"""
---
module: validation_gate
short_description: Run validation gates (PyTorch smoke tests, RDMA, GPU errors, DCGM diagnostics) on one GPU node
version_added: 0.1.0
description:
  - Runs one or several validation gates on one node, each as a Kubernetes Job pinned to the node, waits for all of
    them at once (bounded), reads their pods' logs, parses them and returns a structured verdict with the evidence.
  - C(smoke_training) and C(smoke_inference) run PyTorch checks (a matmul with a backward pass; a linear layer in
    inference mode) in a container that asks for C(nvidia.com/gpu), so the device plugin, container toolkit and driver
    are exercised the way a workload uses them.
  - C(rdma) runs C(ibstat); every port of the link layers in O(rdma_link_layers) must be Active/LinkUp at
    O(rdma_min_rate) or faster, and a trailing C(ibpanic) fails the gate.
  - C(gpu_errors) reads the ECC counters with C(nvidia-smi --query-gpu) and XID events from the kernel log
    (C(dmesg)), or from the DCGM exporter's C(DCGM_FI_DEV_XID_ERRORS) when O(prometheus_url) is set. With
    O(baseline), the gate fails when counters grew beyond O(max_corrected_growth) and O(max_uncorrected_growth) or a
    new XID appeared (the bake check).
  - C(dcgm_diag) runs C(dcgmi diag -r <level>) with O(dcgm_level) and reads the DCGM 3.x and 4.x layouts.
  - All gates must pass. A gate that cannot run (pod never scheduled, image pull failure, timeout, output that cannot
    be read) fails; it is never skipped.
  - The Jobs are deleted when the module ends, also on failure; they also carry C(activeDeadlineSeconds) and
    C(ttlSecondsAfterFinished) so the cluster cleans up after an interrupted run.
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
      - In check mode no Job is created and no gate runs; RV(passed) is null and RV(checked) false. It reports
        changed, as a run does.
  diff_mode:
    support: full
    description:
      - The gates' Jobs, none before and each one after (in check mode, the Jobs a run would create, named afresh
        by each run). A run deletes them once judged, so the cluster ends as it began.
options:
  node:
    description: Name of the node to validate.
    type: str
    required: true
  gates:
    description: The gates to run, all at once.
    type: list
    elements: str
    choices: [smoke_training, smoke_inference, rdma, gpu_errors, dcgm_diag]
    default: [smoke_training, smoke_inference, rdma, gpu_errors, dcgm_diag]
  namespace:
    description:
      - Namespace of the gate Jobs. Its service account must be allowed to run privileged pods for the C(rdma),
        C(gpu_errors) and C(dcgm_diag) gates (on OpenShift the GPU Operator's namespace is).
    type: str
    default: gpu-operator
  images:
    description:
      - Images per role, merged over the defaults C(pytorch) (nvcr.io/nvidia/pytorch:24.03-py3), C(cuda)
        (nvcr.io/nvidia/cuda:12.4.1-base-ubi9, for nvidia-smi), C(rdma) (docker.io/mellanox/rping-test:latest, for
        ibstat), C(kernel_log) (registry.access.redhat.com/ubi9/ubi:latest, for dmesg) and C(dcgm)
        (nvcr.io/nvidia/cloud-native/dcgm:3.3.8-1-ubi9).
    type: dict
    default: {}
  dcgm_level:
    description: C(dcgmi diag) run level, 1 (seconds) to 4 (hours).
    type: int
    default: 2
  wait_timeout:
    description:
      - Seconds to wait for all gates together (the module always waits for its gates).
      - Half an hour rather than the collection's hour - the gates are short Jobs; a DCGM diagnostic at level 2 takes
        minutes.
    default: 1800
  start_timeout:
    description: Seconds a gate's pod may stay unscheduled or unable to start (image pull errors) before it fails.
    type: int
    default: 300
  ready_timeout:
    description:
      - Seconds, on the API server's clock, to wait before the gates run until the node is Ready, offers every GPU
        it has (allocatable C(nvidia.com/gpu) equals its capacity) and the GPU Operator's validator pod on it
        (O(validator_selector)) is Ready. Right after a driver change the device plugin is still coming back.
      - The gates run when the wait ends either way; a gate whose pod is still not scheduled then runs again
        (O(schedule_retries)) and is an infrastructure failure if it never is, not a verdict on the node.
    type: int
    default: 600
  validator_selector:
    description: Label selector of the GPU Operator's validator pods in O(namespace); empty to not wait for one.
    type: str
    default: app=nvidia-operator-validator
  schedule_retries:
    description: How many times a gate whose pod was never scheduled runs again, after the same wait for the node.
    type: int
    default: 1
  wait_sleep:
    description:
      - Seconds between two looks at the gates' pods.
      - 2 rather than the collection's 10 - most gates end in seconds and the node waits for their verdict.
    default: 2
  pin:
    description:
      - How the pods are pinned to the node. C(hostname) uses a C(kubernetes.io/hostname) nodeSelector, so the scheduler
        checks free GPUs and says why a pod cannot run; C(node_name) sets C(spec.nodeName) and bypasses the scheduler.
    type: str
    choices: [hostname, node_name]
    default: hostname
  tolerations:
    description: Tolerations of the gate pods.
    type: list
    elements: dict
    default: [{key: nvidia.com/gpu, operator: Exists}]
  service_account:
    description: Service account of the gate pods.
    type: str
  runtime_class_name:
    description: RuntimeClass of the gate pods (for example C(nvidia) where the NVIDIA runtime is not the default).
    type: str
  privileged:
    description: Run the node-level tools (ibstat, nvidia-smi for all GPUs, dmesg, dcgmi) privileged.
    type: bool
    default: true
  smoke_gpus:
    description: GPUs each smoke test asks for.
    type: int
    default: 1
  rdma_link_layers:
    description: Link layers whose ports must be up (an empty list checks every port).
    type: list
    elements: str
    default: [InfiniBand]
  rdma_min_rate:
    description: Minimum port rate in Gb/s (0 accepts any rate).
    type: int
    default: 0
  rdma_min_ports:
    description: Minimum number of ports of those link layers that must be present.
    type: int
    default: 1
  max_uncorrected:
    description: Uncorrected ECC errors a GPU may have.
    type: int
    default: 0
  max_corrected:
    description: Corrected ECC errors a GPU may have (unset for no limit).
    type: int
  max_corrected_growth:
    description: With O(baseline), how much a GPU's corrected ECC count may grow.
    type: int
    default: 10
  max_uncorrected_growth:
    description: With O(baseline), how much a GPU's uncorrected ECC count may grow.
    type: int
    default: 0
  xid_ignore:
    description: XIDs that applications cause and that do not fail the gate (13, 31, 43, 45 by default).
    type: list
    elements: int
    default: [13, 31, 43, 45]
  kernel_log:
    description: Read XIDs from the kernel log (a privileged C(dmesg) container) when O(prometheus_url) is not set.
    type: bool
    default: true
  prometheus_url:
    description: Prometheus base URL to read C(DCGM_FI_DEV_XID_ERRORS) from, instead of the kernel log.
    type: str
  prometheus_node_label:
    description: Label of the DCGM exporter series that holds the node name.
    type: str
    default: Hostname
  prometheus_validate_certs:
    description: Verify the Prometheus server's certificate.
    type: bool
    default: true
  baseline:
    description:
      - Error counters from an earlier run (RV(counters)); the C(gpu_errors) gate then fails on growth rather than on
        counts, so errors from before the upgrade are not blamed on it.
    type: dict
  labels:
    description: Extra labels on the gate Jobs and pods.
    type: dict
    default: {}
  annotations:
    description: Annotations on the gate pods.
    type: dict
    default: {}
  image_pull_secrets:
    description: Names of image pull secrets for the gate pods.
    type: list
    elements: str
    default: []
  fail_on_failure:
    description: Fail the task when a gate fails. With V(false) the verdict is returned and the caller decides.
    type: bool
    default: true
requirements:
  - kubernetes >= 24.2.0
seealso:
  - name: The upgrade flow
    description: docs/upgrade-flow.md in the collection.
    link: https://example.invalid/gpufleet/upgrade/docs/upgrade-flow.md
"""

EXAMPLES = r"""
- name: Validate the canary node with every gate
  gpufleet.upgrade.validation_gate:
    node: gpu-worker-004
    namespace: nvidia-gpu-operator
  register: canary_gates

- name: Bake check against the counters the canary started with
  gpufleet.upgrade.validation_gate:
    node: gpu-worker-004
    namespace: nvidia-gpu-operator
    gates: [gpu_errors, rdma]
    baseline: "{{ canary_gates.counters }}"
    fail_on_failure: false
  register: bake

- name: Read XIDs from the DCGM exporter instead of the kernel log
  gpufleet.upgrade.validation_gate:
    node: gpu-worker-004
    gates: [gpu_errors]
    prometheus_url: https://prometheus-k8s.openshift-monitoring.svc:9091
"""

RETURN = r"""
passed:
  description: True when every gate passed; null in check mode.
  returned: always
  type: bool
  sample: false
checked:
  description: Whether the gates ran (false in check mode).
  returned: always
  type: bool
  sample: true
node:
  description: The node validated.
  returned: always
  type: str
  sample: gpu-worker-004
gates:
  description: One verdict per gate, with the reason, the parsed details and an excerpt of the raw output.
  returned: always
  type: list
  elements: dict
  sample:
    - gate: rdma
      node: gpu-worker-004
      passed: false
      reason: mlx5_2/1 is Down/Disabled
      evidence: "--- ibstat ---\nCA 'mlx5_0'\n..."
      details: {ports: [{device: mlx5_2, port: 1, state: Down, physical_state: Disabled, rate: 10}]}
      job: gpufleet-rdma-gpu-worker-004-3f2a1c
      elapsed: 12.4
failed_gates:
  description: Names of the gates that failed.
  returned: always
  type: list
  elements: str
  sample: [rdma]
judged_failed_gates:
  description: The failed gates that ran and judged the node (RV(failed_gates) less those that could not run).
  returned: always
  type: list
  elements: str
  sample: [rdma]
infrastructure_failures:
  description:
    - Gates that could not run because of the cluster, each with why - the Kubernetes API failed them after the
      retries (their Job could not be created, their pods or log could not be read), or their pod was never
      scheduled in any of the O(schedule_retries) reruns.
    - An infrastructure failure, not a verdict on the node; such a gate counts as failed, never as passed.
  returned: always
  type: list
  elements: str
  sample: ["dcgm_diag: POST /apis/batch/v1/namespaces/ns/jobs answered 500: Internal error (after 7 attempts)"]
summary:
  description: One line a person reads.
  returned: always
  type: str
  sample: "rdma: mlx5_2/1 is Down/Disabled"
counters:
  description: ECC counters per GPU (by UUID) and XID counts seen by the gpu_errors gate; the next run's O(baseline).
  returned: always
  type: dict
  sample: {gpus: {GPU-6d480a30-b731-2596-9596-14f6d57d995f: {corrected: 0, uncorrected: 0}}, xids: {}}
elapsed:
  description: Seconds the gates took.
  returned: always
  type: float
  sample: 184.2
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import SSLValidationError, open_url

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates import (
    DEFAULT_IMAGES,
    GATE_NAMES,
    GateSettings,
    check_mode_result,
    fetch_json_with,
    report_result,
    run_gates,
    validate_gate_names,
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
        node={"type": "str", "required": True},
        gates={"type": "list", "elements": "str", "choices": list(GATE_NAMES), "default": list(GATE_NAMES)},
        namespace={"type": "str", "default": "gpu-operator"},
        images={"type": "dict", "default": {}},
        dcgm_level={"type": "int", "default": 2},
        start_timeout={"type": "int", "default": 300},
        ready_timeout={"type": "int", "default": 600},
        validator_selector={"type": "str", "default": "app=nvidia-operator-validator"},
        schedule_retries={"type": "int", "default": 1},
        pin={"type": "str", "choices": ["hostname", "node_name"], "default": "hostname"},
        tolerations={"type": "list", "elements": "dict", "default": [{"key": "nvidia.com/gpu", "operator": "Exists"}]},
        service_account={"type": "str"},
        runtime_class_name={"type": "str"},
        privileged={"type": "bool", "default": True},
        smoke_gpus={"type": "int", "default": 1},
        rdma_link_layers={"type": "list", "elements": "str", "default": ["InfiniBand"]},
        rdma_min_rate={"type": "int", "default": 0},
        rdma_min_ports={"type": "int", "default": 1},
        max_uncorrected={"type": "int", "default": 0},
        max_corrected={"type": "int"},
        max_corrected_growth={"type": "int", "default": 10},
        max_uncorrected_growth={"type": "int", "default": 0},
        xid_ignore={"type": "list", "elements": "int", "default": [13, 31, 43, 45]},
        kernel_log={"type": "bool", "default": True},
        prometheus_url={"type": "str"},
        prometheus_node_label={"type": "str", "default": "Hostname"},
        prometheus_validate_certs={"type": "bool", "default": True},
        baseline={"type": "dict"},
        labels={"type": "dict", "default": {}},
        annotations={"type": "dict", "default": {}},
        # Names of Secrets, not their content.
        image_pull_secrets={"type": "list", "elements": "str", "default": [], "no_log": False},
        fail_on_failure={"type": "bool", "default": True},
    )
    spec.update(wait_argument_spec(options=("wait_timeout", "wait_sleep"), wait_timeout=1800, wait_sleep=2.0))
    return spec


def settings_from(params):
    images = dict(DEFAULT_IMAGES)
    images.update({str(key): str(value) for key, value in (params["images"] or {}).items() if value})
    return GateSettings(
        namespace=params["namespace"],
        images=images,
        dcgm_level=params["dcgm_level"],
        timeout=float(params["wait_timeout"]),
        start_timeout=float(params["start_timeout"]),
        ready_timeout=float(params["ready_timeout"]),
        validator_selector=params["validator_selector"] or "",
        schedule_retries=params["schedule_retries"],
        sleep=float(params["wait_sleep"]),
        pin=params["pin"],
        tolerations=tuple(params["tolerations"] or ()),
        service_account=params["service_account"] or "",
        runtime_class_name=params["runtime_class_name"] or "",
        privileged=params["privileged"],
        smoke_gpus=params["smoke_gpus"],
        rdma_link_layers=tuple(params["rdma_link_layers"] or ()),
        rdma_min_rate=params["rdma_min_rate"],
        rdma_min_ports=params["rdma_min_ports"],
        max_uncorrected=params["max_uncorrected"],
        max_corrected=params["max_corrected"],
        max_corrected_growth=params["max_corrected_growth"],
        max_uncorrected_growth=params["max_uncorrected_growth"],
        xid_ignore=tuple(params["xid_ignore"] or ()),
        kernel_log=params["kernel_log"],
        prometheus_url=params["prometheus_url"] or "",
        prometheus_node_label=params["prometheus_node_label"],
        baseline=params["baseline"] or None,
        extra_labels={str(key): str(value) for key, value in (params["labels"] or {}).items()},
        annotations={str(key): str(value) for key, value in (params["annotations"] or {}).items()},
        image_pull_secrets=tuple(params["image_pull_secrets"] or ()),
    )


def validate(module):
    params = module.params
    gates = validate_gate_names(params["gates"])
    settings = settings_from(params)
    if module.check_mode:
        return check_mode_result(gates, node=params["node"], settings=settings, diff=module._diff)
    fetch = None
    if settings.prometheus_url:
        fetch = fetch_json_with(
            open_url,
            validate_certs=params["prometheus_validate_certs"],
            timeout=30,
            errors=(OSError, ValueError, UrlConnectionError, SSLValidationError),
        )
    report = run_gates(KubeApi.from_params(params), node=params["node"], gates=gates, settings=settings, fetch=fetch)
    result = report_result(report, diff=module._diff)
    # A node that fails its gates is the verdict, not an error of the module: its own message, the full report.
    if not report.passed and params["fail_on_failure"]:
        module.fail_json(msg=f"Validation of node {params['node']} failed: {result['summary']}", **result)
    return result


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    run_module(
        module,
        lambda: validate(module),
        failure=f"Failed to validate node {module.params['node']}",
        missing=missing_libraries(),
    )


if __name__ == "__main__":
    main()
