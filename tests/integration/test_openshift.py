"""OpenShift upgrades on the twin's OpenShift profile: roles openshift and sriov_operator, real ansible-playbook runs.

The twin (6 GPU workers, 600 simulated seconds per real second) runs OpenShift 4.16.20; the target is 4.17.3, whose
RHCOS boots kernel 5.14.0-427.42.1.el9_4. The flow labels the canary node ``gpu-canary=true`` before the canary
step; these tests do the same.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import ROOT, VENV_BIN, kubectl, run_playbook

PLAYBOOK = "tests/integration/playbooks/openshift_role.yml"
SRIOV_PLAYBOOK = "tests/integration/playbooks/sriov_operator_role.yml"
CANARY = "gpu-worker-001"
TARGET_KERNEL = "5.14.0-427.42.1.el9_4.x86_64"
TARGET = {"openshift": "4.17.3", "kernel": TARGET_KERNEL, "gpu_operator": "v24.9.0", "gpu_driver": "550.127.05"}
PREVIOUS = {
    "openshift": "4.16.20",
    "kernel": "5.14.0-427.40.1.el9_4.x86_64",
    "gpu_operator": "v24.9.0",
    "gpu_driver": "550.127.05",
}
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


def role_vars(action: str, result_file, **extra):
    return {
        "openshift_action": action,
        "openshift_target": TARGET,
        "openshift_previous": PREVIOUS,
        "openshift_wait_sleep": 1,
        "openshift_wait_timeout": 120,
        "result_file": str(result_file),
        **extra,
    }


def get_json(twin, *args: str) -> dict:
    return json.loads(kubectl(twin, "get", *args, "-o", "json"))


def pools(twin) -> dict:
    return {p["metadata"]["name"]: p for p in get_json(twin, "machineconfigpools")["items"]}


def boot_ids(twin) -> dict:
    return {
        n["metadata"]["name"]: n["status"]["nodeInfo"]["bootID"]
        for n in get_json(twin, "nodes")["items"]
        if n["metadata"]["name"].startswith("gpu-worker-")
    }


def kernels(twin) -> dict:
    return {n["metadata"]["name"]: n["status"]["nodeInfo"]["kernelVersion"] for n in get_json(twin, "nodes")["items"]}


def writes(twin) -> int:
    """Writes that can change the cluster (a SelfSubjectAccessReview is a create that changes nothing)."""
    by_verb_resource = twin.report()["requests"]["by_verb_resource"]
    return sum(
        count
        for key, count in by_verb_resource.items()
        if key.split(" ", 1)[0] in WRITE_VERBS and "selfsubjectaccessreviews" not in key
    )


def label_canary(twin) -> None:
    kubectl(twin, "label", "node", CANARY, "gpu-canary=true", "--overwrite")


def test_full_sequence_check_mode_first_then_pools_one_at_a_time_and_sriov_last(fresh_twin, tmp_path):
    twin = fresh_twin
    label_canary(twin)
    result_file = tmp_path / "result.json"

    before = {name: p["metadata"]["resourceVersion"] for name, p in pools(twin).items()}
    cv_before = get_json(twin, "clusterversion", "version")["metadata"]["resourceVersion"]
    writes_before = writes(twin)
    check = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("canary", result_file), check=True, diff=True)
    assert check.returncode == 0, check.output[-4000:]
    assert {name: p["metadata"]["resourceVersion"] for name, p in pools(twin).items()} == before
    assert get_json(twin, "clusterversion", "version")["metadata"]["resourceVersion"] == cv_before
    assert writes(twin) == writes_before, twin.report()["requests"]["by_verb"]
    assert "gpu-canary" not in pools(twin)

    preflight = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("preflight", result_file))
    assert preflight.returncode == 0, preflight.output[-4000:]
    assert json.loads(result_file.read_text())["preflight"]["ok"] is True

    boots = boot_ids(twin)
    canary = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("canary", result_file))
    assert canary.returncode == 0, canary.output[-4000:]
    result = json.loads(result_file.read_text())
    assert result["paused_pools"] == ["worker"]
    assert [b["succeeded"] for b in result["interlock"]["builds"]] == [True, True]
    assert [entry["node"] for entry in result["timeline"]] == [CANARY]
    assert result["timeline"][0]["rebooted"] is True
    now = kernels(twin)
    assert now[CANARY] == TARGET_KERNEL and now["master-0"] == TARGET_KERNEL
    assert all(now[f"gpu-worker-00{i}"] != TARGET_KERNEL for i in range(2, 7))  # paused pool held
    assert boot_ids(twin)["gpu-worker-002"] == boots["gpu-worker-002"]
    state = pools(twin)
    assert state["worker"]["spec"]["paused"] is True
    assert state["gpu-canary"]["status"]["updatedMachineCount"] == 1
    assert "node-role.kubernetes.io/worker" in get_json(twin, "node", CANARY)["metadata"]["labels"]

    # A second GPU pool shows promotion going one pool at a time.
    kubectl(twin, "label", "node", "gpu-worker-005", "gpu-worker-006", "gpu-rack=b", "--overwrite")
    second = run_playbook(
        "tests/integration/playbooks/openshift_pool.yml",
        twin=twin,
        extra_vars={"pool": "gpu-b", "selector": {"gpu-rack": "b"}, "paused": True},
    )
    assert second.returncode == 0, second.output[-4000:]

    # The canary node cordoned by hand (someone looking at it): the MCO counts each pool apart and would roll a worker
    # beside it, over the budget of 1 the GPU pools share. Refused before any write, naming the node and the fix.
    kubectl(twin, "cordon", CANARY)
    writes_before = writes(twin)
    refused = run_playbook(
        PLAYBOOK, twin=twin, extra_vars=role_vars("promote", result_file, openshift_gpu_pools=["worker", "gpu-b"])
    )
    assert refused.returncode != 0
    assert writes(twin) == writes_before, twin.report()["requests"]["by_verb_resource"]
    result = json.loads(result_file.read_text())
    assert [f["node"] for f in result["failures"]] == [CANARY], result["failures"]
    assert "budget of 1 node(s) is used up by gpu-worker-001" in result["failures"][0]["reason"]
    assert "Nothing was changed" in result["message"] and set(result["paused_pools"]) == {"worker", "gpu-b"}
    kubectl(twin, "uncordon", CANARY)

    promote = run_playbook(
        PLAYBOOK, twin=twin, extra_vars=role_vars("promote", result_file, openshift_gpu_pools=["worker", "gpu-b"])
    )
    assert promote.returncode == 0, promote.output[-4000:]
    result = json.loads(result_file.read_text())
    timeline = {entry["node"]: entry for entry in result["timeline"]}
    assert set(timeline) == {f"gpu-worker-00{i}" for i in range(2, 7)}
    assert all(entry["rebooted"] and entry["done_at"] for entry in timeline.values()), timeline
    # One pool at a time: every worker node was back before the first gpu-b node went (the twin's record).
    spans = twin.report()["nodes"]["unavailable_intervals"]
    last_worker = max(span["to"] for i in (2, 3, 4) for span in spans[f"gpu-worker-00{i}"])
    first_b = min(span["from"] for name in ("gpu-worker-005", "gpu-worker-006") for span in spans[name])
    assert last_worker <= first_b, spans
    assert set(kernels(twin).values()) == {TARGET_KERNEL}
    state = pools(twin)
    assert not any(p["spec"].get("paused") for p in state.values()), "no pool may stay paused after success"
    assert "gpu-canary" not in state
    assert result["paused_pools"] == []

    sriov = run_playbook(
        SRIOV_PLAYBOOK,
        twin=twin,
        extra_vars={
            "sriov_operator_action": "canary",
            "sriov_operator_target": {"sriov_operator": "4.17.0"},
            "sriov_operator_wait_sleep": 1,
            "result_file": str(result_file),
        },
    )
    assert sriov.returncode == 0, sriov.output[-4000:]
    result = json.loads(result_file.read_text())
    assert result["installed"].startswith("sriov-network-operator.v4.17.0")
    assert set(result["node_states"].values()) == {"Succeeded"} and len(result["node_states"]) == 6
    daemon = get_json(twin, "daemonset", "-n", "openshift-sriov-network-operator", "sriov-network-config-daemon")
    assert daemon["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":v4.17")
    assert daemon["status"]["updatedNumberScheduled"] == daemon["status"]["desiredNumberScheduled"] == 6


def test_eus_to_eus_moves_the_control_plane_twice_and_each_worker_once(fresh_twin, tmp_path):
    twin = fresh_twin
    label_canary(twin)
    result_file = tmp_path / "result.json"
    eus_kernel = "5.14.0-427.55.1.el9_4.x86_64"  # RHCOS 418.94.202502100215-0 of OpenShift 4.18.1
    # GPU Operator v24.9.0 is not validated on 4.18: the matrix has moved it first (the upgrade order's first group).
    gpu = {"gpu_operator": "v25.3.0", "gpu_driver": "570.124.06"}
    eus = {
        "openshift_target": {**TARGET, **gpu, "openshift": "4.18.1", "kernel": eus_kernel},
        "openshift_previous": {**PREVIOUS, **gpu},
        "openshift_eus_intermediate": "4.17.12",
    }
    boots = boot_ids(twin)
    canary = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("canary", result_file, **eus))
    assert canary.returncode == 0, canary.output[-4000:]
    history = get_json(twin, "clusterversion", "version")["status"]["history"]
    assert [(h["version"], h["state"]) for h in history] == [
        ("4.18.1", "Completed"),
        ("4.17.12", "Completed"),
        ("4.16.20", "Completed"),
    ]
    now = kernels(twin)
    assert now["master-0"] == now[CANARY] == eus_kernel
    # The workers sat out both control-plane hops: no reboot, not even into the intermediate RHCOS.
    assert all(boot_ids(twin)[f"gpu-worker-00{i}"] == boots[f"gpu-worker-00{i}"] for i in range(2, 7))
    assert all(now[f"gpu-worker-00{i}"] == PREVIOUS["kernel"] for i in range(2, 7))

    promote = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("promote", result_file, **eus))
    assert promote.returncode == 0, promote.output[-4000:]
    assert {name: kernel for name, kernel in kernels(twin).items() if name.startswith("gpu-worker-")} == {
        f"gpu-worker-00{i}": eus_kernel for i in range(1, 7)
    }
    # One worker roll: each GPU node was taken out (drained and rebooted) exactly once.
    spans = twin.report()["nodes"]["unavailable_intervals"]
    assert {name: len(spans[name]) for name in boots} == dict.fromkeys(boots, 1), spans
    assert not any(p["spec"].get("paused") for p in pools(twin).values())


def test_degraded_pool_halts_naming_pool_node_and_paused_pools(fresh_twin, tmp_path):
    twin = fresh_twin
    label_canary(twin)
    result_file = tmp_path / "result.json"
    kubectl(twin, "label", "node", "gpu-worker-005", "gpu-worker-006", "gpu-rack=b", "--overwrite")
    second = run_playbook(
        "tests/integration/playbooks/openshift_pool.yml",
        twin=twin,
        extra_vars={"pool": "gpu-b", "selector": {"gpu-rack": "b"}, "paused": True},
    )
    assert second.returncode == 0, second.output[-4000:]
    twin.admin("POST", "faults", {"type": "machine_config_fails", "node": "gpu-worker-003"})
    gpu_pools = {"openshift_gpu_pools": ["worker", "gpu-b"]}
    canary = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("canary", result_file, **gpu_pools))
    assert canary.returncode == 0, canary.output[-4000:]
    promote = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("promote", result_file, **gpu_pools))
    assert promote.returncode != 0
    result = json.loads(result_file.read_text())
    assert "MachineConfigPool worker is Degraded" in result["message"]
    assert "gpu-worker-003" in result["message"] and "rpm-ostree" in result["message"]
    assert result["failures"][0]["node"] == "gpu-worker-003"
    # The halt leaves the pool it never reached paused, and says so.
    assert "Pools left paused: gpu-b" in result["message"]
    assert result["paused_pools"] == ["gpu-b"]
    assert pools(twin)["worker"]["status"]["degradedMachineCount"] == 1
    assert kernels(twin)["gpu-worker-005"] != TARGET_KERNEL


def test_no_driver_build_for_the_new_kernel_halts_before_any_gpu_node_reboots(fresh_twin, tmp_path):
    twin = fresh_twin
    label_canary(twin)
    result_file = tmp_path / "result.json"
    twin.admin("POST", "faults", {"type": "driver_build_fails", "kernel": TARGET_KERNEL})
    boots = boot_ids(twin)
    canary = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("canary", result_file))
    assert canary.returncode != 0
    result = json.loads(result_file.read_text())
    assert "does not build for kernel " + TARGET_KERNEL in result["message"]
    assert "Pools left paused: gpu-canary, worker" in result["message"]
    assert boot_ids(twin) == boots, "no GPU node may reboot when no driver builds for its new kernel"
    assert kernels(twin)["master-0"] == TARGET_KERNEL  # the control plane did move
    assert all(p["spec"]["paused"] for name, p in pools(twin).items() if name != "master")
    assert not get_json(twin, "pods", "-A", "-l", "gpufleet.io/kernel-interlock")["items"]


def test_killed_canary_run_resumes(fresh_twin, tmp_path):
    twin = fresh_twin
    label_canary(twin)
    result_file = tmp_path / "result.json"
    env = twin.env()
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
    )
    command = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(ROOT / PLAYBOOK), "-e",
               json.dumps(role_vars("canary", result_file))]  # fmt: skip
    process = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        requested = False
        while time.monotonic() < deadline and not requested:
            spec = get_json(twin, "clusterversion", "version")["spec"]
            requested = (spec.get("desiredUpdate") or {}).get("version") == "4.17.3"
            time.sleep(0.2)
        assert requested, "the canary run never asked for the update"
    finally:
        process.kill()
        process.wait(timeout=20)
    assert pools(twin)["worker"]["spec"]["paused"] is True
    resumed = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("canary", result_file))
    assert resumed.returncode == 0, resumed.output[-4000:]
    history = get_json(twin, "clusterversion", "version")["status"]["history"]
    assert [h["version"] for h in history] == ["4.17.3", "4.16.20"]
    assert kernels(twin)[CANARY] == TARGET_KERNEL
    assert kernels(twin)["gpu-worker-002"] != TARGET_KERNEL


def test_rollback_and_pauses_over_the_limits_are_refused_and_change_nothing(fresh_twin, tmp_path):
    twin = fresh_twin
    result_file = tmp_path / "result.json"
    writes_before = writes(twin)
    run = run_playbook(PLAYBOOK, twin=twin, extra_vars=role_vars("rollback", result_file))
    assert run.returncode != 0
    assert "does not support downgrading" in run.output
    assert writes(twin) == writes_before

    # Someone else paused the worker pool: only managedFields say who (the API keeps no pause time).
    label_canary(twin)
    kubectl(
        twin, "patch", "mcp", "worker", "--type", "merge", "-p", '{"spec":{"paused":true}}', "--field-manager=ops-alice"
    )
    writes_before = writes(twin)
    run = run_playbook(
        PLAYBOOK,
        twin=twin,
        extra_vars=role_vars("canary", result_file, openshift_max_pause_hours=12, openshift_planned_pause_hours=24),
    )
    assert run.returncode != 0
    assert "MachineConfigPool worker would stay paused" in run.output, run.output[-3000:]
    assert "MachineConfigPool gpu-canary would stay paused 24.0 h" in run.output
    assert "openshift_max_pause_hours=12" in run.output and "by ops-alice" in run.output
    assert writes(twin) == writes_before, "the refused canary must change nothing"
    assert "gpu-canary" not in pools(twin)
    result = json.loads(result_file.read_text())
    paused = [f["message"] for f in result["preflight"]["findings"] if f["check"] == "pool_paused"]
    assert paused and paused[0].startswith("MachineConfigPool worker paused by ops-alice for"), paused
    assert next(p for p in result["preflight"]["pools"] if p["name"] == "worker")["paused_by"] == "ops-alice"

    # The module that pauses refuses a pause over its own limit, before any write, naming the pool and the limit.
    pool_run = run_playbook(
        "tests/integration/playbooks/openshift_pool.yml",
        twin=twin,
        extra_vars={"pool": "worker", "state": "paused", "max_pause_hours": 100, "planned_pause_hours": 200},
    )
    assert pool_run.returncode != 0
    assert "Failed to bring MachineConfigPool worker to paused" in pool_run.output
    assert "openshift_max_pause_hours=100" in pool_run.output and "Nothing was changed" in pool_run.output
    assert writes(twin) == writes_before

    # The kubelet CA signer due for renewal: OpenShift 4.16 writes the new CA on paused pools too (4.13 and
    # later), so a pause across the rotation is a warning there, never a silent pass.
    signer = get_json(twin, "secret", "-n", "openshift-kube-apiserver-operator", "kube-apiserver-to-kubelet-signer")
    annotations = signer["metadata"]["annotations"]
    not_before = datetime.datetime.fromisoformat(annotations["auth.openshift.io/certificate-not-before"])
    not_before -= datetime.timedelta(days=92)  # the renewal point (day 292) is now the twin's start
    kubectl(
        twin, "annotate", "--overwrite", "secret", "-n", "openshift-kube-apiserver-operator",
        "kube-apiserver-to-kubelet-signer",
        f"auth.openshift.io/certificate-not-before={not_before:%Y-%m-%dT%H:%M:%SZ}",
        f"auth.openshift.io/certificate-not-after={not_before + datetime.timedelta(days=365):%Y-%m-%dT%H:%M:%SZ}",
    )  # fmt: skip
    pool_run = run_playbook(
        "tests/integration/playbooks/openshift_pool.yml",
        twin=twin,
        extra_vars={"pool": "worker", "state": "paused", "max_pause_hours": 0, "planned_pause_hours": 1},
        check=True,
    )
    assert pool_run.returncode == 0, pool_run.output[-3000:]
    assert "would still be paused at the kubelet client CA rotation" in pool_run.output
    assert "4.13 and later" in pool_run.output


@pytest.mark.parametrize("unused", [None])
def test_module_pool_four_pass_pause(shared_twin, unused):
    """check (changed), real (changed), check again (unchanged), real again (unchanged)."""
    outcomes = []
    for check, state in ((True, "paused"), (False, "paused"), (True, "paused"), (False, "paused")):
        run = run_playbook(
            "tests/integration/playbooks/openshift_pool.yml",
            twin=shared_twin,
            extra_vars={"pool": "worker", "state": state},
            check=check,
        )
        assert run.returncode == 0, run.output[-3000:]
        outcomes.append("changed=1" in run.output)
    assert outcomes == [True, True, False, False]
    paused = pools(shared_twin)["worker"]
    assert paused["spec"]["paused"] is True and "gpufleet.io/paused-at" in paused["metadata"]["annotations"]
    run = run_playbook(
        "tests/integration/playbooks/openshift_pool.yml",
        twin=shared_twin,
        extra_vars={"pool": "worker", "state": "unpaused"},
    )
    assert run.returncode == 0, run.output[-3000:]
    assert "gpufleet.io/paused-at" not in (pools(shared_twin)["worker"]["metadata"].get("annotations") or {})
