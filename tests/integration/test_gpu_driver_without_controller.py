"""The GPU driver rollout without the GPU Operator's upgrade controller (driver.upgradePolicy.autoUpgrade false),
against the twin: real ansible-playbook runs of the gpu_operator role and the module, over HTTPS.

With autoUpgrade false the driver DaemonSet is OnDelete and nothing moves a node until its driver pod is deleted
(GPU Operator docs, "GPU Driver Upgrades"); the collection's rollout engine orders the nodes itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from .conftest import ROOT, VENV_BIN, in_background, kubectl, run_playbook
from .test_clusterpolicy_upgrade import (
    MODULE_PLAYBOOK,
    NEW,
    STATE,
    driver_versions,
    get_json,
    gpu_nodes,
    max_unavailable_at_once,
    policy,
    run_module,
    run_role,
    settled_policy,
    wait_for,
    write_requests,
)
from .test_clusterpolicy_upgrade import twin_factory as start_twin_fixture

pytestmark = pytest.mark.slow
twin_factory = start_twin_fixture

CANARY = "gpu-worker-002"
CORDONED = "gpu-worker-005"
FAILING = "gpu-worker-004"
NAMESPACE = "nvidia-gpu-operator"
PROGRESS = "gpufleet.io/rollout-gpu-driver-state"
FINISHED = "gpufleet.io/rollout-gpu-driver-finished-at"
MATRIX = ROOT / "examples" / "gpu-version-matrix.yaml"


def turn_the_controller_off(twin) -> str:
    old = settled_policy(twin)["spec"]["driver"]["version"]
    patch = {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": False}}}}
    kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p", json.dumps(patch))
    return old


def refused_evictions(twin) -> int:
    """Evictions the twin refused (429) since its recorder was last reset."""
    return twin.report()["requests"]["errors_by_code_verb_resource"].get("429 create pods/eviction", 0)


def auto_upgrade(twin) -> bool:
    return policy(twin)["spec"]["driver"]["upgradePolicy"]["autoUpgrade"]


def progress(twin) -> dict[str, str]:
    return {name: n["metadata"].get("annotations", {}).get(PROGRESS, "") for name, n in gpu_nodes(twin).items()}


def test_canary_then_promotion_without_the_controller_within_the_budget(twin_factory, tmp_path):
    twin = twin_factory()
    old = turn_the_controller_off(twin)
    kubectl(twin, "label", "node", CANARY, "gpu-canary=true")
    kubectl(twin, "cordon", CORDONED)
    target = {"gpu_operator": "v24.9.0", "gpu_driver": NEW}

    run, result = run_role(
        twin,
        tmp_path,
        {"gpu_operator_action": "canary", "gpu_operator_target": target, "gpu_operator_max_unavailable": 2},
    )
    assert run.returncode == 0, run.output
    assert result["upgrade_controller"] is False and result["targets"] == [CANARY]
    assert [row["state"] for row in result["timeline"][CANARY]] == [
        "cordon", "evict-gpu-pods", "replace-driver-pod", "wait-validator", "uncordon"
    ]  # fmt: skip
    # The DaemonSet template carries the target, yet only the canary's driver pod was replaced (OnDelete).
    daemonsets = get_json(twin, "daemonsets", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=nvidia-driver")
    assert all(ds["spec"]["updateStrategy"]["type"] == "OnDelete" for ds in daemonsets["items"])
    assert all(NEW in ds["spec"]["template"]["spec"]["containers"][0]["image"] for ds in daemonsets["items"])
    versions = driver_versions(twin)
    assert versions.pop(CANARY) == NEW and set(versions.values()) == {old}
    nodes = gpu_nodes(twin)
    assert not any(STATE in n["metadata"]["labels"] for n in nodes.values())  # no controller state moved
    assert not nodes[CANARY]["spec"].get("unschedulable") and nodes[CORDONED]["spec"].get("unschedulable")
    assert progress(twin)[CANARY] == "done" and auto_upgrade(twin) is False
    # The audit against the example matrix (canary node at the canary's driver, the rest at production's).
    audit_dir = tmp_path / "audit"
    run = run_playbook(
        "playbooks/audit.yml",
        twin=twin,
        extra_vars={"audit_matrix_file": str(MATRIX), "audit_output_dir": str(audit_dir)},
    )
    assert run.returncode == 0, run.output
    assert json.loads((audit_dir / "audit.json").read_text())["drift"]["nodes_with_drift"] == []

    # Promotion: a PDB refuses evictions until the twin has refused one, then allows them (judged by the twin's
    # recorder: a fault of a fixed simulated length could end before a loaded machine's run reaches its first
    # eviction); the cordoned node counts against the budget.
    (refusing,) = twin.admin(
        "POST", "faults", {"type": "pdb_never_allows", "namespace": "ml-training", "name": "llm-train-01"}
    )["faults"]
    twin.admin("POST", "report/reset")
    thread, box = in_background(
        lambda: run_role(
            twin,
            tmp_path,
            {"gpu_operator_action": "promote", "gpu_operator_target": target, "gpu_operator_max_unavailable": 2},
        )
    )
    try:
        wait_for(lambda: refused_evictions(twin) > 0 or not thread.is_alive(), what="a refused eviction", timeout=300)
    finally:
        twin.admin("DELETE", f"faults/{refusing['id']}")
        thread.join(timeout=600)
    if "error" in box:
        raise box["error"]
    run, result = box["value"]
    assert run.returncode == 0, run.output
    assert set(driver_versions(twin).values()) == {NEW}
    assert CANARY not in result["timeline"] and len(result["timeline"]) == 5  # the canary is not done twice
    refusals = [
        step["detail"]["pdb_refusals"]
        for entry in result["rollout"]["timeline"]
        for step in entry.get("steps", [])
        if step["name"] == "evict-gpu-pods"
    ]
    assert sum(refusals) > 0, refusals  # refused, retried, then allowed
    assert max_unavailable_at_once(twin.report()) <= 2
    assert result["rollout"]["peak_unavailable"] <= 2
    nodes = gpu_nodes(twin)
    assert [name for name, n in nodes.items() if n["spec"].get("unschedulable")] == [CORDONED]
    assert set(progress(twin).values()) == {"done"}
    assert auto_upgrade(twin) is False


def _background_run(twin, tmp_path, args) -> subprocess.Popen:
    env = twin.env()
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    command = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        "localhost,",
        str(ROOT / MODULE_PLAYBOOK),
        "-e",
        json.dumps({"gpu_module_args": args, "gpu_result_file": str(tmp_path / "killed.json")}),
    ]
    # Its own process group, so the kill takes the module's process too, as a lost controller host would.
    return subprocess.Popen(
        command, env=env, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def test_killed_run_resumes_halts_at_a_failing_node_and_its_next_step_finishes(twin_factory, tmp_path):
    twin = twin_factory(time_scale=300)
    old = turn_the_controller_off(twin)
    args = {"driver": {"version": NEW}, "upgrade_policy": {"maxUnavailable": 1, "maxParallelUpgrades": 1}}

    # Check mode: the plan, nothing written.
    twin.admin("POST", "report/reset")
    run, result = run_module(twin, tmp_path, args, check=True)
    assert run.returncode == 0, run.output
    assert result["changed"] is True and len(result["rollout"]["plan"]["nodes"]) == 6
    assert write_requests(twin) == {}

    twin.admin(
        "POST",
        "faults",
        {"type": "node_step_failures", "fraction": 1, "steps": ["driver_build"], "nodes": [FAILING]},
    )
    first = _background_run(twin, tmp_path, {**args, "wait_sleep": 1, "wait_timeout": 240})
    try:
        wait_for(lambda: "done" in progress(twin).values(), what="the first node to finish", timeout=120)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finished = {
        name: n["metadata"]["annotations"][FINISHED]
        for name, n in gpu_nodes(twin).items()
        if n["metadata"].get("annotations", {}).get(PROGRESS) == "done"
    }
    assert 0 < len(finished) < 6

    # The re-run resumes (the nodes done are not done again) and halts at the node whose driver does not build.
    run, result = run_module(twin, tmp_path, args)
    assert run.returncode != 0
    assert f"halted at node {FAILING}" in run.output, run.output[-3000:]
    assert result["halted"] is True and result["failures"][0]["node"] == FAILING
    assert not set(finished) & set(result["timeline"])
    nodes = gpu_nodes(twin)
    assert nodes[FAILING]["spec"].get("unschedulable") and progress(twin)[FAILING] == "failed"
    untouched = result["halt"]["held"]
    assert untouched and all(driver_versions(twin)[name] == old for name in untouched)
    assert not any(nodes[name]["spec"].get("unschedulable") for name in untouched)
    events = get_json(twin, "events", "-A", "--field-selector", f"involvedObject.name={FAILING},type=Warning")
    assert events["items"], "the failed node has no Warning Event"

    # The report's Next: fix the cause, clear the node with the command the message names, run again.
    twin.admin("DELETE", "faults")
    command = run.output.split("run again after `", 1)[1].split("`", 1)[0]
    assert command.startswith("kubectl annotate node " + FAILING)
    kubectl(twin, *command.split()[1:])
    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0, run.output
    assert set(driver_versions(twin).values()) == {NEW}
    assert set(progress(twin).values()) == {"done"}
    assert all(gpu_nodes(twin)[name]["metadata"]["annotations"][FINISHED] == at for name, at in finished.items())
    assert not any(n["spec"].get("unschedulable") for n in gpu_nodes(twin).values())
    assert auto_upgrade(twin) is False

    # Once more, in check mode and for real: nothing left to do.
    run, result = run_module(twin, tmp_path, args, check=True)
    assert run.returncode == 0 and result["changed"] is False, run.output
    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0 and result["changed"] is False, run.output
