"""Gate Jobs and verdicts: what each gate runs, and how its output is judged (pure parts of _gates)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates import (
    ECC_FIELDS,
    GATE_NAMES,
    GATE_RUN_LABEL,
    INFERENCE_SCRIPT,
    TRAINING_SCRIPT,
    GateReport,
    GateSettings,
    GateVerdict,
    build_gate_job,
    check_mode_result,
    counter_growth,
    gate_evidence,
    gate_job_name,
    gate_jobs_diff,
    job_failure,
    judge_gate,
    node_gate_blocker,
    planned_gate_jobs,
    pod_run_times,
    pod_situation,
    report_result,
    run_gates,
    validate_gate_names,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates_parse import MetricSample

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gates"
SETTINGS = GateSettings(namespace="nvidia-gpu-operator")
ECC_HEADER = ", ".join(ECC_FIELDS)


def sample(kind: str, name: str) -> str:
    return (FIXTURES / kind / name).read_text()


def ecc_csv(*rows: str) -> str:
    return ECC_HEADER + "\n" + "".join(row + "\n" for row in rows)


# -- Jobs --------------------------------------------------------------------------------------


def test_every_gate_builds_a_one_shot_job_pinned_to_the_node() -> None:
    for gate in GATE_NAMES:
        job = build_gate_job(gate, node="gpu-worker-004", settings=SETTINGS, run_id="abcd1234", suffix="f00d01")
        spec = job["spec"]
        pod = spec["template"]["spec"]
        assert job["metadata"]["namespace"] == "nvidia-gpu-operator"
        assert spec["backoffLimit"] == 0  # a retry would hide a flaky node
        assert spec["activeDeadlineSeconds"] >= SETTINGS.timeout
        assert spec["ttlSecondsAfterFinished"] > 0
        assert pod["restartPolicy"] == "Never"
        assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-worker-004"}
        assert "nodeName" not in pod
        labels = spec["template"]["metadata"]["labels"]
        assert labels[GATE_RUN_LABEL] == "abcd1234"
        assert labels["gpufleet.io/gate-node"] == "gpu-worker-004"
        assert len(job["metadata"]["name"]) <= 52


def test_smoke_tests_ask_for_gpus_and_node_tools_see_all_of_them() -> None:
    training = build_gate_job("smoke_training", node="n", settings=SETTINGS, run_id="r", suffix="s")
    (container,) = training["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert container["command"] == ["python3", "-c", TRAINING_SCRIPT]
    assert "securityContext" not in container
    errors = build_gate_job("gpu_errors", node="n", settings=SETTINGS, run_id="r", suffix="s")
    ecc, kernel_log = errors["spec"]["template"]["spec"]["containers"]
    assert "resources" not in ecc
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in ecc["env"]
    assert ecc["securityContext"] == {"privileged": True}
    assert ecc["command"][1] == "--query-gpu=" + ",".join(ECC_FIELDS)
    assert kernel_log["command"] == ["dmesg"]


def test_scripts_end_with_the_line_the_gate_looks_for() -> None:
    assert 'print("Training smoke: OK")' in TRAINING_SCRIPT
    assert "backward()" in TRAINING_SCRIPT
    assert 'print("Inference smoke: OK")' in INFERENCE_SCRIPT
    compile(TRAINING_SCRIPT, "training", "exec")
    compile(INFERENCE_SCRIPT, "inference", "exec")


def test_options_shape_the_job() -> None:
    settings = GateSettings(
        namespace="ns",
        pin="node_name",
        dcgm_level=3,
        runtime_class_name="nvidia",
        service_account="validator",
        image_pull_secrets=("pull",),
        prometheus_url="https://prometheus:9091",
        annotations={"sidecar.istio.io/inject": "false"},
        privileged=False,
        images={"dcgm": "registry.example/dcgm:4.1.1"},
    )
    dcgm = build_gate_job("dcgm_diag", node="gpu-worker-9", settings=settings, run_id="r", suffix="s")
    pod = dcgm["spec"]["template"]["spec"]
    assert pod["nodeName"] == "gpu-worker-9" and "nodeSelector" not in pod
    assert pod["runtimeClassName"] == "nvidia" and pod["serviceAccountName"] == "validator"
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert pod["containers"][0]["image"] == "registry.example/dcgm:4.1.1"
    assert pod["containers"][0]["command"][-1].endswith("dcgmi diag -r 3")
    assert "securityContext" not in pod["containers"][0]
    assert dcgm["spec"]["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    errors = build_gate_job("gpu_errors", node="n", settings=settings, run_id="r", suffix="s")
    assert [c["name"] for c in errors["spec"]["template"]["spec"]["containers"]] == ["ecc"]  # XIDs from Prometheus


def test_long_node_names_keep_job_names_short_and_valid() -> None:
    name = gate_job_name("smoke_inference", "gpu-worker-" + "x" * 80 + ".Example.COM", suffix="abc123")
    assert len(name) <= 52
    assert name.startswith("gpufleet-infer-gpu-worker-")
    assert name.endswith("-abc123") and name == name.lower()


def test_gate_names_are_checked() -> None:
    assert validate_gate_names(["rdma", "rdma", "gpu_errors"]) == ["rdma", "gpu_errors"]
    with pytest.raises(InvalidInputError, match="Unknown validation gate 'nccl'"):
        validate_gate_names(["nccl"])
    with pytest.raises(InvalidInputError):
        validate_gate_names([])
    with pytest.raises(InvalidInputError, match="level must be 1 to 4"):
        build_gate_job(
            "dcgm_diag", node="n", settings=GateSettings(namespace="x", dcgm_level=5), run_id="r", suffix="s"
        )


# -- judging ----------------------------------------------------------------------------------


def test_rdma_checks_the_chosen_link_layers() -> None:
    some_down = sample("ibstat", "gpud-h100-cx7-28.39.1002-cx6dx-some-down-a.txt")
    passed, reason, details = judge_gate("rdma", {"ibstat": some_down}, settings=SETTINGS)
    # The three Down ports are the Ethernet ConnectX-6 Dx ones; InfiniBand is all up.
    assert passed, reason
    assert reason == "8 ports Active/LinkUp"
    assert all(port["link_layer"] == "InfiniBand" for port in details["ports"])
    every_port = GateSettings(namespace="x", rdma_link_layers=())
    passed, reason, _details = judge_gate("rdma", {"ibstat": some_down}, settings=every_port)
    assert not passed
    assert reason == "mlx5_2/1 is Down/Disabled; mlx5_7/1 is Down/Disabled; mlx5_8/1 is Down/Disabled"


@pytest.mark.parametrize(
    ("name", "settings", "expected"),
    [
        ("gpud-pr482-cx7-28.39.1002-down-polling-snippet.txt", SETTINGS, "mlx5_10/1 is Down/Polling"),
        ("netop-sriov-pod-cx6vf-mt4124-20.28.4000-down-linkup.txt", SETTINGS, "mlx5_7/1 is Down/LinkUp"),
        ("gpud-azure-a100-mt4124-20.41.1000-ibpanic.txt", SETTINGS, "ibstat failed: ibpanic"),
        (
            "gpud-a100-mt4126-28.37.1014-all-active.txt",
            GateSettings(namespace="x", rdma_min_rate=400),
            "runs at 200 Gb/s, below 400",
        ),
        ("l2fwd-cx6dx-mt4125-22.32.2004-ethernet-100.txt", SETTINGS, "0 InfiniBand ports found, at least 1 expected"),
    ],
)
def test_rdma_failures_name_the_port(name: str, settings: GateSettings, expected: str) -> None:
    passed, reason, _details = judge_gate("rdma", {"ibstat": sample("ibstat", name)}, settings=settings)
    assert not passed
    assert expected in reason


def test_gpu_errors_pass_on_a_clean_gpu_and_fail_on_uncorrected_errors_and_xids() -> None:
    clean = ecc_csv("0, 00000000:19:00.0, GPU-a, 0, 0, 3, 0")
    log = "[    0.000000] Linux version 5.14\n"
    passed, reason, details = judge_gate("gpu_errors", {"ecc": clean, "kernel-log": log}, settings=SETTINGS)
    assert passed, reason
    assert details["counters"] == {"gpus": {"GPU-a": {"corrected": 3, "uncorrected": 0}}, "xids": {}}
    bad = ecc_csv("0, 00000000:19:00.0, GPU-a, 5, 2, 5, 2")
    xid_log = (
        log
        + "[ 3600.0] NVRM: Xid (PCI:0000:19:00): 48, pid=1, DBE\n[ 3601.0] NVRM: Xid (PCI:0000:19:00): 13, pid=1, app\n"
    )
    passed, reason, details = judge_gate("gpu_errors", {"ecc": bad, "kernel-log": xid_log}, settings=SETTINGS)
    assert not passed
    assert "GPU 0 (00000000:19:00.0) has 2 uncorrected ECC errors" in reason
    assert "XID 48 on 0000:19:00" in reason
    assert "XID 13" not in reason  # an application's own fault
    assert details["counters"]["xids"] == {"0000:19:00/xid-48": 1}


def test_gpu_errors_on_real_csv_and_lost_gpu() -> None:
    real = sample("nvidia-smi", "nge-h200-590.48.01-query-gpu.csv")
    passed, reason, _details = judge_gate("gpu_errors", {"ecc": real}, settings=SETTINGS)
    assert passed, reason
    lost = "Unable to determine the device handle for GPU0000:DB:00.0: Unknown Error\n" + ecc_csv(
        "0, 00000000:19:00.0, GPU-a, 0, 0, 0, 0"
    )
    passed, reason, _details = judge_gate("gpu_errors", {"ecc": lost, "kernel-log": "[0.0] boot\n"}, settings=SETTINGS)
    assert not passed and "GPU 0000:DB:00.0 is lost" in reason


def test_gpu_errors_without_driver_or_kernel_log_fail_as_unreadable() -> None:
    passed, reason, _details = judge_gate(
        "gpu_errors",
        {"ecc": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n"},
        settings=SETTINGS,
    )
    assert not passed and reason.startswith("output cannot be read: nvidia-smi failed")
    passed, reason, _details = judge_gate(
        "gpu_errors", {"ecc": ecc_csv("0, b, GPU-a, 0, 0, 0, 0"), "kernel-log": ""}, settings=SETTINGS
    )
    assert not passed and "kernel log read was empty" in reason


def test_bake_judges_growth_against_the_baseline() -> None:
    baseline = {"gpus": {"GPU-a": {"corrected": 100, "uncorrected": 1}}, "xids": {"0000:19:00/xid-48": 1}}
    settings = GateSettings(namespace="x", baseline=baseline, max_uncorrected=5)
    same = ecc_csv("0, 00000000:19:00.0, GPU-a, 0, 1, 105, 1")
    old_xid = "[1.0] NVRM: Xid (PCI:0000:19:00): 48, pid=1, DBE\n"
    passed, reason, _details = judge_gate("gpu_errors", {"ecc": same, "kernel-log": old_xid}, settings=settings)
    assert passed, reason  # growth 5 <= 10 allowed; the XID was there when the canary passed
    grown = ecc_csv("0, 00000000:19:00.0, GPU-a, 0, 2, 150, 2")
    new_xid = old_xid + "[9.0] NVRM: Xid (PCI:0000:19:00): 48, pid=1, DBE\n"
    passed, reason, _details = judge_gate("gpu_errors", {"ecc": grown, "kernel-log": new_xid}, settings=settings)
    assert not passed
    assert "GPU GPU-a: uncorrected ECC errors grew by 1 (allowed 0)" in reason
    assert "corrected ECC errors grew by 50 (allowed 10)" in reason
    assert "1 new XID event(s) 0000:19:00/xid-48" in reason


def test_counter_growth_ignores_gpus_without_ecc_and_counts_new_gpus_from_zero() -> None:
    problems = counter_growth(
        {"gpus": {}},
        {"gpus": {"GPU-new": {"corrected": 0, "uncorrected": 1}, "GPU-na": {"corrected": None, "uncorrected": None}}},
        max_corrected_growth=0,
        max_uncorrected_growth=0,
    )
    assert problems == ["GPU GPU-new: uncorrected ECC errors grew by 1 (allowed 0)"]


def test_prometheus_xids_replace_the_kernel_log() -> None:
    samples = [MetricSample(labels={"gpu": "2"}, value=79.0), MetricSample(labels={"gpu": "1"}, value=31.0)]
    passed, reason, details = judge_gate(
        "gpu_errors", {"ecc": ecc_csv("0, b, GPU-a, 0, 0, 0, 0")}, settings=SETTINGS, xid_samples=samples
    )
    assert not passed and reason == "XID 79 on gpu-2"
    assert details["counters"]["xids"] == {"gpu-2/xid-79": 1}


def test_dcgm_and_smoke_verdicts() -> None:
    passed, reason, details = judge_gate(
        "dcgm_diag",
        {"dcgm": sample("dcgmi", "aws-g5-a10g-dcgm3.3.9-570.195.03-diag-targeted-power-fail.txt")},
        settings=SETTINGS,
    )
    assert not passed
    assert reason.startswith("Targeted Power (GPU 1) failed: GPU 1 Max power of 224.1 did not reach desired power")
    assert details["layout"] == "DCGM 3.x"
    passed, reason, _details = judge_gate(
        "dcgm_diag", {"dcgm": sample("dcgmi", "dcgm4.4.2-580.105.08-diag-r2-new-format-pass.txt")}, settings=SETTINGS
    )
    assert passed and reason == "3 tests passed (DCGM 4.4.2)"
    passed, reason, _details = judge_gate("smoke_inference", {"smoke": "Inference smoke: OK\n"}, settings=SETTINGS)
    assert passed
    passed, reason, _details = judge_gate("smoke_training", {"smoke": "Inference smoke: OK\n"}, settings=SETTINGS)
    assert not passed and "never printed 'Training smoke: OK'" in reason


# -- pods and Jobs -----------------------------------------------------------------------------


def test_pod_situations() -> None:
    assert pod_situation(None).problem == "no pod created yet"
    unschedulable = {
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/9 nodes are available: 1 Insufficient nvidia.com/gpu.",
                }
            ],
        }
    }
    assert (
        pod_situation(unschedulable).problem == "not scheduled: 0/9 nodes are available: 1 Insufficient nvidia.com/gpu."
    )
    pulling = {
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"name": "smoke", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling"}}}
            ],
        }
    }
    assert pod_situation(pulling).problem == "container smoke: ImagePullBackOff Back-off pulling"
    done = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "ecc", "state": {"terminated": {"exitCode": 9}}}],
        }
    }
    situation = pod_situation(done)
    assert situation.finished and situation.exit_codes == {"ecc": 9}
    assert not pod_situation({"status": {"phase": "Running"}}).finished


def test_job_failure_reason() -> None:
    failed = {
        "status": {
            "conditions": [
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active too long"}
            ]
        }
    }
    assert job_failure(failed) == "DeadlineExceeded: Job was active too long"
    assert job_failure({"status": {"conditions": [{"type": "Complete", "status": "True"}]}}) == ""
    assert job_failure(None) == ""


def test_report_passes_only_when_every_gate_passed() -> None:
    good = GateVerdict("rdma", "n", True, "ok")
    bad = GateVerdict("gpu_errors", "n", False, "2 uncorrected", details={"counters": {"gpus": {}, "xids": {"k": 1}}})
    assert GateReport(node="n", verdicts=[good]).passed
    report = GateReport(node="n", verdicts=[good, bad])
    summary = report.as_dict()
    assert not summary["passed"]
    assert summary["failed_gates"] == ["gpu_errors"]
    assert summary["summary"] == "gpu_errors: 2 uncorrected"
    assert summary["counters"] == {"gpus": {}, "xids": {"k": 1}}
    assert not GateReport(node="n", verdicts=[]).passed


def test_evidence_shows_the_failing_port_wherever_it_is() -> None:
    text = sample("ibstat", "gpud-h100-cx7-28.39.1002-cx6dx-some-down-a.txt")
    passed, _reason, details = judge_gate(
        "rdma", {"ibstat": text}, settings=GateSettings(namespace="x", rdma_link_layers=())
    )
    assert not passed
    evidence = gate_evidence({"ibstat": text}, focus=details["focus"])
    assert evidence.startswith("--- ibstat ---\nCA 'mlx5_2'")
    assert "State: Down" in evidence and "CA 'mlx5_0'" not in evidence
    assert "[...]" in evidence  # the blocks of the three failing devices, not the ones between them
    dcgm = sample("dcgmi", "aws-g5-a10g-dcgm3.3.9-570.195.03-diag-targeted-power-fail.txt")
    _passed, _reason, details = judge_gate("dcgm_diag", {"dcgm": dcgm}, settings=SETTINGS)
    shown = gate_evidence({"dcgm": dcgm}, focus=details["focus"])
    assert "| Targeted Power            | Pass - GPUs: 0, 2, 3" in shown and "Fail - GPU: 1" in shown
    assert "Denylist" not in shown
    assert gate_evidence({"smoke": "Training smoke: OK\n"}) == "--- smoke ---\nTraining smoke: OK\n"


class _FailingApi:
    """A cluster whose API fails what ``failing`` names (after KubeApi's own retries)."""

    def __init__(self, *, failing: str) -> None:
        self.failing = failing
        self.created: list[str] = []

    def _error(self, method: str) -> KubeApiError:
        return KubeApiError(f"{method} /apis/batch/v1/jobs answered 500: boom (after 7 attempts)", status=500)

    def create(self, ref, body, *, namespace=None, dry_run=False):
        if self.failing == "create":
            raise self._error("POST")
        self.created.append(body["metadata"]["name"])
        return body

    def list(self, ref, **kwargs):
        if self.failing == "list":
            raise self._error("GET")
        return []

    def get(self, ref, name, **kwargs):
        return None if self.failing == "list" else node_with_gpus(name)

    def request(self, *args, **kwargs):
        return {}

    def delete(self, *args, **kwargs):
        return None


def node_with_gpus(name: str, *, allocatable: int = 8, ready: str = "True") -> dict:
    return {
        "metadata": {"name": name},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "capacity": {"nvidia.com/gpu": "8"},
            "allocatable": {"nvidia.com/gpu": str(allocatable)},
        },
    }


@pytest.mark.parametrize("failing", ["create", "list"])
def test_gates_the_api_kept_from_running_are_no_verdict_on_the_node(failing: str) -> None:
    clock = iter(range(1000))
    report = run_gates(
        _FailingApi(failing=failing),
        node="gpu-worker-001",
        gates=["rdma", "dcgm_diag"],
        settings=SETTINGS,
        clock=lambda: float(next(clock)),
        pause=lambda seconds: None,
        node_clock=lambda: float(next(clock)),
    )
    summary = report.as_dict()
    assert summary["passed"] is False  # a gate that did not run never passes
    assert summary["judged_failed_gates"] == []
    assert [line.split(":", 1)[0] for line in summary["infrastructure_failures"]] == ["rdma", "dcgm_diag"]
    assert all("answered 500" in line for line in summary["infrastructure_failures"])
    assert all(gate["could_not_run"] and "not a verdict on the node" in gate["reason"] for gate in summary["gates"])


def test_a_gate_that_ran_and_failed_is_a_verdict() -> None:
    bad = GateVerdict("rdma", "n", False, "mlx5_3/1 is Down/Disabled")
    unrun = GateVerdict("dcgm_diag", "n", False, "could not run", infrastructure_error="POST ... answered 500")
    summary = GateReport(node="n", verdicts=[bad, unrun]).as_dict()
    assert summary["judged_failed_gates"] == ["rdma"]
    assert summary["infrastructure_failures"] == ["dcgm_diag: POST ... answered 500"]


# -- the node must take its gates: GPUs back after a driver change, pods that were never scheduled -------------

UNSCHEDULED = "0/9 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: 0/9 nodes are available"
VALIDATOR = "app=nvidia-operator-validator"


def validator_pod(*, ready: bool) -> dict:
    return {
        "metadata": {"name": "nvidia-operator-validator-x1", "namespace": "nvidia-gpu-operator"},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_the_node_takes_gates_once_it_offers_every_gpu_and_its_validator_passed() -> None:
    assert node_gate_blocker(None, []) == "the node does not exist"
    assert node_gate_blocker(node_with_gpus("n", ready="False"), []) == "the node is not Ready"
    assert node_gate_blocker(node_with_gpus("n", allocatable=0), []) == "0 of its 8 nvidia.com/gpu allocatable"
    blocker = node_gate_blocker(node_with_gpus("n"), [validator_pod(ready=False)])
    assert "validator" in blocker and "not Ready" in blocker
    assert node_gate_blocker(node_with_gpus("n"), [validator_pod(ready=True)]) == ""
    assert node_gate_blocker(node_with_gpus("n"), []) == ""  # no GPU Operator validator: nothing to wait for


class _GpusComingBack:
    """A node whose device plugin comes back ``gpus_back_at`` seconds (cluster clock) after the gates begin; a
    gate pod asking for a GPU before then is never scheduled and its Job passes its deadline."""

    def __init__(self, *, gpus_back_at: float, wait_for_gpus: bool = True) -> None:
        self.now = 0.0
        self.gpus_back_at = gpus_back_at
        self.wait_for_gpus = wait_for_gpus
        self.jobs: dict[str, dict] = {}  # name -> Job (only its status is read)
        self.pods: list[dict] = []

    def clock(self) -> float:
        self.now += 30.0
        return self.now

    def back(self) -> bool:
        return self.now >= self.gpus_back_at

    def get(self, ref, name, **kwargs):
        return node_with_gpus(name, allocatable=8 if self.back() or not self.wait_for_gpus else 0)

    def create(self, ref, body, *, namespace=None, dry_run=False):
        name = body["metadata"]["name"]
        labels = body["spec"]["template"]["metadata"]["labels"]
        owner = [{"kind": "Job", "name": name}]
        if self.back():
            status = {
                "phase": "Succeeded",
                "containerStatuses": [{"name": "smoke", "state": {"terminated": {"exitCode": 0}}}],
            }
            self.jobs[name] = {"metadata": {"name": name}, "status": {}}
        else:
            condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": UNSCHEDULED}
            status = {"phase": "Pending", "conditions": [condition]}
            failed = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too long"}
            self.jobs[name] = {"metadata": {"name": name}, "status": {"conditions": [failed]}}
        pod = {"metadata": {"name": name + "-p", "labels": labels, "ownerReferences": owner}, "status": status}
        self.pods.append(pod)
        return body

    def list(self, ref, *, namespace=None, label_selector=None, field_selector=None, **kwargs):
        if label_selector == VALIDATOR:
            return [validator_pod(ready=self.back() or not self.wait_for_gpus)]
        if label_selector is None:  # the pods on the node: none holds a GPU
            return []
        key, value = str(label_selector).split("=", 1)
        if ref.kind == "Job":
            return list(self.jobs.values())
        return [pod for pod in self.pods if pod["metadata"]["labels"].get(key) == value]

    def read_pod_log(self, namespace, name, *, container=None, limit_bytes=None):
        return "Training smoke: OK\nshape: (1000, 1000) device: NVIDIA H100\n"

    def request(self, *args, **kwargs):
        return {}

    def delete(self, *args, **kwargs):
        return None


def run_smoke(api: _GpusComingBack, settings: GateSettings = SETTINGS):
    return run_gates(
        api,
        node="gpu-worker-001",
        gates=["smoke_training"],
        settings=settings,
        clock=api.clock,
        pause=lambda seconds: None,
        node_clock=api.clock,
    )


def test_the_diff_shows_each_gate_job_created_none_before() -> None:
    planned = planned_gate_jobs(["rdma", "gpu_errors", "rdma"], node="gpu-worker-001", settings=SETTINGS)
    assert [job["metadata"]["labels"]["gpufleet.io/gate"] for job in planned] == ["rdma", "gpu-errors"]
    server = {**planned[0], "metadata": {**planned[0]["metadata"], "uid": "u-1", "resourceVersion": "7"},
              "status": {"active": 1}}  # fmt: skip
    diff = gate_jobs_diff([server, planned[1]])
    assert diff["before"] == {"jobs": {}}
    names = [job["metadata"]["name"] for job in planned]
    assert list(diff["after"]["jobs"]) == names and all(name.startswith("gpufleet-") for name in names)
    shown = diff["after"]["jobs"][names[0]]
    assert "status" not in shown and "uid" not in shown["metadata"] and "resourceVersion" not in shown["metadata"]
    assert shown["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-worker-001"}
    assert gate_jobs_diff([])["after"] == {"jobs": {}}


def test_check_mode_reports_the_change_a_run_makes_and_shows_its_jobs() -> None:
    result = check_mode_result(["rdma", "dcgm_diag"], node="gpu-worker-001", settings=SETTINGS, diff=True)
    assert result["changed"] is True and result["passed"] is None and result["checked"] is False
    jobs = result["diff"]["after"]["jobs"].values()
    assert [job["spec"]["template"]["spec"]["containers"][0]["name"] for job in jobs] == ["ibstat", "dcgm"]
    assert "diff" not in check_mode_result(["rdma"], node="gpu-worker-001", settings=SETTINGS, diff=False)
    with pytest.raises(InvalidInputError):
        check_mode_result(["no_such_gate"], node="gpu-worker-001", settings=SETTINGS, diff=False)


def test_a_run_that_created_jobs_is_a_change_and_one_that_could_not_create_any_is_not() -> None:
    api = _GpusComingBack(gpus_back_at=0)
    result = report_result(run_smoke(api), diff=True)
    assert result["changed"] is True and result["checked"] is True and result["passed"] is True
    assert list(result["diff"]["after"]["jobs"]) == list(api.jobs)
    clock = iter(range(1000))
    refused = run_gates(_FailingApi(failing="create"), node="gpu-worker-001", gates=["rdma"], settings=SETTINGS,
                        clock=lambda: float(next(clock)), pause=lambda seconds: None,
                        node_clock=lambda: float(next(clock)))  # fmt: skip
    assert report_result(refused, diff=False)["changed"] is False


def test_a_run_reports_every_job_it_created_for_the_diff_also_those_run_again() -> None:
    api = _GpusComingBack(gpus_back_at=200, wait_for_gpus=False)  # the first pod is never scheduled
    report = run_smoke(api)
    assert [job["metadata"]["name"] for job in report.jobs] == list(api.jobs) and len(api.jobs) == 2
    assert list(gate_jobs_diff(report.jobs)["after"]["jobs"]) == list(api.jobs)


def test_gates_wait_for_the_node_to_offer_its_gpus_again_after_a_driver_change() -> None:
    api = _GpusComingBack(gpus_back_at=240)
    report = run_smoke(api)
    assert report.passed, report.as_dict()
    assert len(api.pods) == 1  # one run: it waited instead of running into "Insufficient nvidia.com/gpu"
    (wait,) = report.verdicts[0].details["node_wait"]
    assert wait["blocker"] == "" and wait["waited"] >= 180


def test_a_gate_never_scheduled_runs_again_then_is_an_infrastructure_failure_not_a_verdict() -> None:
    # The node shows its GPUs, yet the first pod could not be placed (the scheduler had not seen them yet).
    api = _GpusComingBack(gpus_back_at=200, wait_for_gpus=False)
    report = run_smoke(api)
    assert report.passed, report.as_dict()
    assert len(api.pods) == 2

    # Never schedulable within the wait: two runs, then an infrastructure failure that judges nothing.
    never = _GpusComingBack(gpus_back_at=10**9)
    summary = run_smoke(never, GateSettings(namespace="nvidia-gpu-operator", ready_timeout=300)).as_dict()
    assert len(never.pods) == 2
    assert summary["passed"] is False
    assert summary["judged_failed_gates"] == []
    (line,) = summary["infrastructure_failures"]
    assert line.startswith("smoke_training: not scheduled: 0/9 nodes are available: 1 Insufficient nvidia.com/gpu")
    assert "DeadlineExceeded" in line
    (gate,) = summary["gates"]
    assert gate["could_not_run"] and "not a verdict on the node" in gate["reason"] and "2 runs" in gate["reason"]
    assert gate["details"]["node_wait"][0]["blocker"] == "0 of its 8 nvidia.com/gpu allocatable"


def test_gpus_held_by_workloads_keep_the_smoke_gates_off_the_node_and_say_by_whom() -> None:
    def workload(name: str, gpus: int, phase: str = "Running") -> dict:
        limits = {"limits": {"nvidia.com/gpu": str(gpus)}}
        return {
            "metadata": {"name": name, "namespace": "ml-training"},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": limits}]},
            "status": {"phase": phase},
        }

    pods = [workload("llm-train-a", 4), workload("llm-train-b", 4), workload("done", 1, "Succeeded")]
    blocker = node_gate_blocker(node_with_gpus("n"), [], pods=pods, gpus_needed=2)
    assert blocker.startswith("0 nvidia.com/gpu free, the gates need 2; held by ")
    assert "ml-training/llm-train-a" in blocker and "done" not in blocker
    assert node_gate_blocker(node_with_gpus("n"), [], pods=pods[:1], gpus_needed=2) == ""
    assert node_gate_blocker(node_with_gpus("n"), [], pods=pods, gpus_needed=0) == ""  # rdma, gpu_errors, dcgm


def test_gate_settings_refuse_negative_waits() -> None:
    with pytest.raises(InvalidInputError, match="ready_timeout"):
        GateSettings(namespace="ns", ready_timeout=-1)


def test_a_gate_lasts_from_its_pod_start_to_its_last_container_end_on_the_cluster_clock() -> None:
    """The report said "took 0 s": this machine's wait, not the gate's run on the cluster."""
    pod = {
        "status": {
            "startTime": "2026-11-22T08:00:00Z",
            "initContainerStatuses": [{"state": {"terminated": {"finishedAt": "2026-11-22T08:01:00Z"}}}],
            "containerStatuses": [
                {"state": {"terminated": {"finishedAt": "2026-11-22T08:04:10Z"}}},
                {"state": {"running": {}}},
            ],
        }
    }
    assert pod_run_times(pod) == ("2026-11-22T08:00:00Z", "2026-11-22T08:04:10Z")
    assert pod_run_times(None) == ("", "")
