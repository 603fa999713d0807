"""gpufleet.upgrade.ofed_rolling_reload against the twin: real ansible-playbook runs over HTTPS.

Each test starts its own twin (upstream CRDs from ../shared when present) and checks what a person would
check with kubectl: MOFED pod images, cordons, node annotations, PodDisruptionBudgets, the objects'
resourceVersions and the twin's recorder (request counts, unavailable intervals, budget violations,
disrupted secondary-network pods).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess

from .conftest import ROOT, VENV_BIN, PlaybookRun, kubectl, run_playbook
from .test_clusterpolicy_upgrade import get_json, max_unavailable_at_once, wait_for, write_requests
from .test_clusterpolicy_upgrade import twin_factory as start_twin_fixture

pytestmark = pytest.mark.slow
twin_factory = start_twin_fixture

PLAYBOOK = "tests/integration/playbooks/ofed_rolling_reload.yml"
NAMESPACE = "nvidia-network-operator"
OLD = "24.07-0.6.1.0"
NEW = "25.01-0.6.0.0"
STATE = "gpufleet.io/rollout-ofed-state"
RACK = "gpufleet.io/rack"
RELOAD = "twin.gpufleet.io/mofed-reload-seconds"
PRIMARY_INTERFACE = "gpufleet.io/primary-interface-mlx5"
STORAGE_MODULES = "gpufleet.io/rdma-storage-modules"


def run_module(
    twin: TwinProcess, tmp_path: pathlib.Path, args: dict[str, Any], *, check: bool = False, diff: bool = False
) -> tuple[PlaybookRun, dict[str, Any]]:
    out = tmp_path / f"ofed-{time.monotonic_ns()}.json"
    args = {"target_version": NEW, "wait_sleep": 0.3, **args}
    run = run_playbook(PLAYBOOK, twin=twin, extra_vars={"ofed_module_args": args, "ofed_result_file": str(out)},
                       check=check, diff=diff)  # fmt: skip
    return run, json.loads(out.read_text()) if out.exists() else {}


def mofed_versions(twin: TwinProcess) -> dict[str, str]:
    """The MOFED version each node's pod runs. A pod the DaemonSet controller has just created and the scheduler not
    yet bound (no spec.nodeName) runs nowhere yet, so it is left out, as is a pod being deleted."""
    pods = get_json(twin, "pods", "-n", NAMESPACE, "-l", "nvidia.com/ofed-driver")["items"]
    return {
        p["spec"]["nodeName"]: p["spec"]["containers"][0]["image"].rsplit(":", 1)[1].rsplit("-", 2)[0]
        for p in pods
        if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName")
    }


def workers(twin: TwinProcess) -> dict[str, dict[str, Any]]:
    return {n["metadata"]["name"]: n for n in get_json(twin, "nodes", "-l", "nvidia.com/gpu.present=true")["items"]}


def mofed_ready(twin: TwinProcess) -> None:
    def ready() -> bool:
        pods = get_json(twin, "pods", "-n", NAMESPACE, "-l", "nvidia.com/ofed-driver")["items"]
        return len(pods) == 6 and all(
            all(c.get("ready") for c in p.get("status", {}).get("containerStatuses") or [{}]) for p in pods
        )

    wait_for(ready, what="every MOFED pod Ready")


def resource_versions(twin: TwinProcess) -> dict[str, Any]:
    """The NicClusterPolicy's and MOFED pods' resourceVersions, and what a rollout would change on the Nodes
    (their own resourceVersions move with every kubelet heartbeat)."""
    versions: dict[str, Any] = {
        f"node/{name}": (n["spec"], n["metadata"].get("annotations"), n["metadata"]["labels"])
        for name, n in workers(twin).items()
    }
    policy = get_json(twin, "nicclusterpolicies.mellanox.com", "nic-cluster-policy")
    versions["nicclusterpolicy"] = policy["metadata"]["resourceVersion"]
    for pod in get_json(twin, "pods", "-n", NAMESPACE, "-l", "nvidia.com/ofed-driver")["items"]:
        versions[f"pod/{pod['metadata']['name']}"] = pod["metadata"]["uid"]
    return versions


def set_budget(twin: TwinProcess, max_unavailable: int) -> None:
    twin.admin("POST", "budget", {"maxUnavailable": max_unavailable, "scope": "nvidia.com/gpu.present=true"})


def pinned_secondary_network_app(twin: TwinProcess, node: str, *, min_available: int) -> None:
    """One Multus pod pinned to the node and a PDB that refuses its eviction while minAvailable is 1."""
    manifests = [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "rdma-app", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "rdma-app"}},
                "template": {
                    "metadata": {
                        "labels": {"app": "rdma-app"},
                        "annotations": {"k8s.v1.cni.cncf.io/networks": '[{"name": "ib-sriov-net"}]'},
                    },
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [{"name": "main", "image": "registry.example/rdma:1"}],
                    },
                },
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "rdma-app", "namespace": "default"},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": "rdma-app"}}},
        },
    ]
    for manifest in manifests:
        path = twin.kubeconfig.parent / f"rdma-app-{manifest['kind']}.json"
        path.write_text(json.dumps(manifest))
        kubectl(twin, "create", "-f", str(path))

    def running() -> bool:
        pods = get_json(twin, "pods", "-n", "default", "-l", "app=rdma-app")["items"]
        return any(p.get("status", {}).get("phase") == "Running" for p in pods)

    wait_for(running, what="the pinned secondary-network pod to run")


# -- tests -----------------------------------------------------------------------------------------------------


def test_check_real_check_real_within_budget_and_failure_domains(twin_factory, tmp_path):
    twin = twin_factory()
    mofed_ready(twin)
    names = sorted(workers(twin))
    for index, name in enumerate(names):
        kubectl(twin, "label", "node", name, f"{RACK}=rack-{'ab'[index // 3]}", "--overwrite")
    set_budget(twin, 2)
    args = {"max_unavailable": 2, "max_parallel": 2, "failure_domain_label": RACK, "max_per_domain": 1}
    before = resource_versions(twin)
    twin.admin("POST", "report/reset")

    run, result = run_module(twin, tmp_path, args, check=True, diff=True)
    assert run.returncode == 0, run.output
    assert result["changed"] is True
    assert result["policy_patch"] == {"spec": {"ofedDriver": {"version": NEW}}}
    # --diff: the NicClusterPolicy's version and, per node, the MOFED it runs and its rollout state, before and after.
    diff = result["diff"]
    assert diff["before"]["nic_cluster_policy"]["ofedDriver"]["version"] == OLD
    assert diff["after"]["nic_cluster_policy"]["ofedDriver"]["version"] == NEW
    assert sorted(diff["before"]["nodes"]) == names == sorted(diff["after"]["nodes"])
    assert all(OLD in entry["mofed"] and entry["rollout_state"] == "" for entry in diff["before"]["nodes"].values())
    assert all(
        entry == {"mofed": NEW, "rollout_state": "done", "held": False} for entry in diff["after"]["nodes"].values()
    )
    assert f'"version": "{NEW}"' in run.output  # ansible-playbook --diff shows it
    assert result["plan"]["starts_now"] == [names[0], names[3]]  # one per rack
    assert [step["name"] for step in result["plan"]["steps"]] == ["cordon", "evict-pods", "reload-mofed", "uncordon"]
    assert write_requests(twin) == {}
    assert resource_versions(twin) == before
    assert set(mofed_versions(twin).values()) == {OLD}

    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0, run.output
    assert result["changed"] is True and sorted(result["nodes_done"]) == names
    assert set(mofed_versions(twin).values()) == {NEW}
    assert not any(n["spec"].get("unschedulable") for n in workers(twin).values())
    report = twin.report()
    assert report["budget_violations"] == []
    assert [d for d in report["disrupted_pods"] if "secondary network" in d["why"]] == []
    assert max_unavailable_at_once(report) == 2
    for rack in ("rack-a", "rack-b"):  # never two nodes of one rack away at once
        members = {name for name, n in workers(twin).items() if n["metadata"]["labels"][RACK] == rack}
        rack_only = {"nodes": {"unavailable_intervals": {
            name: intervals for name, intervals in report["nodes"]["unavailable_intervals"].items() if name in members
        }}}  # fmt: skip
        assert max_unavailable_at_once(rack_only) == 1, rack
    steps = {entry["node"]: [s["name"] for s in entry["steps"]] for entry in result["timeline"]}
    assert steps[names[0]] == ["cordon", "evict-pods", "reload-mofed", "uncordon"]

    run, result = run_module(twin, tmp_path, args, check=True)
    assert run.returncode == 0 and result["changed"] is False, run.output
    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0 and result["changed"] is False, run.output
    assert result["selection"]["already_at_target"] == names
    # Nothing left to do: the nodes an earlier run finished are named (a run that resumes a killed one records them).
    assert sorted(result["nodes_done_earlier"]) == sorted(names), result


def test_pdb_refuses_for_a_while_then_allows(twin_factory, tmp_path):
    twin = twin_factory()
    mofed_ready(twin)
    node = "gpu-worker-004"
    pinned_secondary_network_app(twin, node, min_available=1)
    out = tmp_path / "pdb.json"
    args = {"target_version": NEW, "nodes": [node], "eviction_timeout": 120, "wait_sleep": 0.3}
    command = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(ROOT / PLAYBOOK), "-e",
               json.dumps({"ofed_module_args": args, "ofed_result_file": str(out)})]  # fmt: skip
    process = subprocess.Popen(command, env=_ansible_env(twin), cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        wait_for(lambda: workers(twin)[node]["spec"].get("unschedulable") is True, what="the node to be cordoned")
        time.sleep(2.0)  # several refused evictions
        assert process.poll() is None, "the module gave up at the first refusal"
        kubectl(twin, "patch", "pdb", "rdma-app", "-n", "default", "--type", "merge", "-p",
                json.dumps({"spec": {"minAvailable": 0}}))  # fmt: skip
        output, _unused = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    result = json.loads(out.read_text())
    evict = next(s for s in result["timeline"][0]["steps"] if s["name"] == "evict-pods")
    assert evict["detail"]["pdb_refusals"] >= 2
    assert any(key.startswith("default/rdma-app-") for key in evict["detail"]["evicted"])
    assert mofed_versions(twin)[node] == NEW
    assert not workers(twin)[node]["spec"].get("unschedulable")


def test_pdb_that_never_allows_halts_naming_the_node(twin_factory, tmp_path):
    twin = twin_factory()
    mofed_ready(twin)
    first = "gpu-worker-001"
    pinned_secondary_network_app(twin, first, min_available=0)
    twin.admin("POST", "faults", {"type": "pdb_never_allows", "namespace": "default", "name": "rdma-app"})

    run, result = run_module(twin, tmp_path, {"eviction_timeout": 3, "max_unavailable": 2, "max_parallel": 1})
    assert run.returncode != 0
    assert f"node {first}" in result["msg"] and "PodDisruptionBudget default/rdma-app" in result["msg"]
    assert result["failures"][0]["node"] == first and result["failures"][0]["step"] == "evict-pods"
    assert result["halted"] is True
    nodes = workers(twin)
    assert nodes[first]["spec"].get("unschedulable") is True  # left cordoned for a person
    assert nodes[first]["metadata"]["annotations"][STATE] == "failed"
    versions = mofed_versions(twin)
    assert set(versions.values()) == {OLD}  # the rollout stopped: no other node was touched
    assert not any(STATE in n["metadata"].get("annotations", {}) for name, n in nodes.items() if name != first)
    warnings = get_json(twin, "events", "-A", "--field-selector", f"involvedObject.name={first},type=Warning")
    assert any("failed at step evict-pods" in e["message"] for e in warnings["items"])

    run, result = run_module(twin, tmp_path, {"max_unavailable": 2})
    assert run.returncode != 0 and "halted by a failed node" in result["msg"], run.output

    # Rolling back to the version every node still runs: the node never changed (it stopped at evict-pods), so it
    # is released without an eviction, although the PodDisruptionBudget still refuses every one.
    twin.admin("POST", "report/reset")
    run, result = run_module(twin, tmp_path, {"target_version": OLD, "rollback": True, "max_unavailable": 2})
    assert run.returncode == 0, run.output
    assert result["nodes_released"] == [first] and result["nodes_done"] == []
    assert twin.report()["requests"]["by_verb_resource"].get("create pods/eviction", 0) == 0
    node = workers(twin)[first]
    assert not node["spec"].get("unschedulable")
    assert not [key for key in node["metadata"].get("annotations", {}) if key.startswith("gpufleet.io/rollout-ofed")]
    assert set(mofed_versions(twin).values()) == {OLD}
    run, result = run_module(twin, tmp_path, {"target_version": OLD, "rollback": True, "max_unavailable": 2})
    assert run.returncode == 0 and result["changed"] is False, run.output


def test_already_cordoned_node_is_counted_and_left_cordoned(twin_factory, tmp_path):
    twin = twin_factory()
    mofed_ready(twin)
    cordoned = "gpu-worker-003"
    kubectl(twin, "cordon", cordoned)
    set_budget(twin, 2)
    twin.admin("POST", "report/reset")

    run, result = run_module(twin, tmp_path, {"max_unavailable": 2, "max_parallel": 0})
    assert run.returncode == 0, run.output
    assert result["plan"]["budget"]["unavailable_now"] == [cordoned]
    assert set(mofed_versions(twin).values()) == {NEW}
    nodes = workers(twin)
    assert nodes[cordoned]["spec"].get("unschedulable") is True
    assert not any(n["spec"].get("unschedulable") for name, n in nodes.items() if name != cordoned)
    report = twin.report()
    assert max_unavailable_at_once(report) == 2  # the cordoned node plus one at a time
    assert report["budget_violations"] == []
    entry = next(e for e in result["timeline"] if e["node"] == cordoned)
    assert entry["outcome"] == "done"


def test_killed_run_resumes(twin_factory, tmp_path):
    twin = twin_factory()
    mofed_ready(twin)
    for name in workers(twin):
        kubectl(twin, "annotate", "node", name, f"{RELOAD}=1200", "--overwrite")  # 2 s each at 600x
    out = tmp_path / "killed.json"
    args = {"target_version": NEW, "max_unavailable": 1, "wait_sleep": 0.3}
    command = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(ROOT / PLAYBOOK), "-e",
               json.dumps({"ofed_module_args": args, "ofed_result_file": str(out)})]  # fmt: skip
    process = subprocess.Popen(command, env=_ansible_env(twin), cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        wait_for(
            lambda: any(
                n["metadata"].get("annotations", {}).get(f"{STATE[:-6]}-step") == "reload-mofed"
                for n in workers(twin).values()
            ),
            what="a node to be reloading",
        )
    finally:
        # SIGKILL ansible-playbook and everything it started (the module runs in a process of its own).
        for pid in [process.pid, *descendants(process.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=30)
    time.sleep(1.0)  # nothing may move any more: the run is dead
    interrupted = [
        n for n, o in workers(twin).items() if o["metadata"].get("annotations", {}).get(STATE) == "in-progress"
    ]
    assert len(interrupted) == 1
    assert workers(twin)[interrupted[0]]["spec"].get("unschedulable") is True

    run, result = run_module(twin, tmp_path, {"max_unavailable": 1})
    assert run.returncode == 0, run.output
    assert result["plan"]["nodes"][0]["node"] == interrupted[0]  # resumed nodes come first
    resumed = next(entry for entry in result["timeline"] if entry["node"] == interrupted[0])
    assert resumed["action"] == "resume" and resumed["outcome"] == "done", resumed
    assert set(mofed_versions(twin).values()) == {NEW}
    assert not any(n["spec"].get("unschedulable") for n in workers(twin).values())


def node_ready(twin: TwinProcess, name: str) -> str:
    conditions = get_json(twin, "node", name)["status"].get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), "Unknown")


def test_reload_hazards_refused_before_any_change_then_fixed_or_allowed(twin_factory, tmp_path):
    twin = twin_factory()
    mofed_ready(twin)
    kubectl(twin, "label", "node", "gpu-worker-001", f"{STORAGE_MODULES}=true")
    kubectl(twin, "label", "node", "gpu-worker-002", f"{PRIMARY_INTERFACE}=ens1f0np0")
    before = resource_versions(twin)
    twin.admin("POST", "report/reset")

    # Preflight: refused, naming each node and what is wrong, with the fix; nothing written, not even the policy.
    run, result = run_module(twin, tmp_path, {"max_unavailable": 2})
    assert run.returncode != 0, run.output
    msg = result["msg"]
    assert "node gpu-worker-002: primary interface ens1f0np0 is a ConnectX port" in msg, msg
    assert "node gpu-worker-001: NVMe-oF/NFS-RDMA storage modules are loaded" in msg, msg
    assert "spec.ofedDriver.env" in msg and "UNLOAD_STORAGE_MODULES" in msg, msg
    assert [(f["node"], f["hazard"], f["allowed"]) for f in result["safety"]] == [
        ("gpu-worker-001", "storage-modules", False),
        ("gpu-worker-002", "primary-interface", False),
    ]
    assert result["changed"] is False
    assert write_requests(twin) == {}
    assert resource_versions(twin) == before

    # The fix for the storage modules, and the explicit allow for the primary interface: the run proceeds.
    env = [{"name": "UNLOAD_STORAGE_MODULES", "value": "true"}]
    patch = json.dumps({"spec": {"ofedDriver": {"env": env}}})
    kubectl(twin, "patch", "nicclusterpolicies.mellanox.com", "nic-cluster-policy", "--type", "merge", "-p", patch)
    args = {"nodes": ["gpu-worker-001", "gpu-worker-002"], "allow_primary_interface_reload": True, "reload_timeout": 20}
    run, result = run_module(twin, tmp_path, args)
    assert result["safety"] == [{"node": "gpu-worker-002", "hazard": "primary-interface", "allowed": True,
                                 "detail": result["safety"][0]["detail"]}]  # fmt: skip
    versions = mofed_versions(twin)
    assert versions["gpu-worker-001"] == NEW  # storage modules unloaded by the driver container: reloaded
    # What the preflight warned of: the reload took gpu-worker-002 off the network, NotReady until a reboot.
    assert run.returncode != 0
    assert result["failures"][0]["node"] == "gpu-worker-002", result["failures"]
    assert result["failures"][0]["step"] == "reload-mofed"
    wait_for(lambda: node_ready(twin, "gpu-worker-002") == "False", what="gpu-worker-002 NotReady")
    assert {v for n, v in versions.items() if n not in ("gpu-worker-001", "gpu-worker-002")} == {OLD}  # not targeted


def test_mofed_build_failure_halts_naming_the_node(twin_factory, tmp_path):
    twin = twin_factory()
    mofed_ready(twin)
    kernel = workers(twin)["gpu-worker-001"]["status"]["nodeInfo"]["kernelVersion"]
    twin.admin("POST", "faults", {"type": "mofed_build_fails", "kernel": kernel})

    run, result = run_module(twin, tmp_path, {"max_unavailable": 2, "restart_limit": 1, "reload_timeout": 120})
    assert run.returncode != 0
    assert "node gpu-worker-001" in result["msg"] and "CrashLoopBackOff" in result["msg"], result["msg"]
    assert result["failures"][0] == {"node": "gpu-worker-001", "step": "reload-mofed",
                                     "reason": result["failures"][0]["reason"]}  # fmt: skip
    versions = mofed_versions(twin)
    assert versions.pop("gpu-worker-001") == NEW  # crash-looping, the node left cordoned
    assert set(versions.values()) == {OLD}  # one node at a time (max_parallel 1): nothing else started
    assert workers(twin)["gpu-worker-001"]["spec"].get("unschedulable") is True


def descendants(root: int) -> list[int]:
    """Every process below ``root`` (from /proc), children before grandchildren."""
    parents: dict[int, list[int]] = {}
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    frontier = [root]
    for _depth in range(10):
        frontier = [child for pid in frontier for child in parents.get(pid, [])]
        found += frontier
        if not frontier:
            break
    return found


def _ansible_env(twin: TwinProcess) -> dict[str, str]:
    env = twin.env()
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_NOCOLOR="1",
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def test_auto_upgrade_is_paced_by_the_budget_with_skip_labels(twin_factory, tmp_path):
    twin = twin_factory()
    mofed_ready(twin)
    set_budget(twin, 2)
    twin.admin("POST", "report/reset")
    args = {"mode": "auto_upgrade", "max_unavailable": 2, "max_parallel": 0, "wait_timeout": 240,
            "evict": {"pod_selector": "app=rdma-app"}}  # fmt: skip

    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0, run.output
    assert result["plan"]["starts_now"] == ["gpu-worker-001", "gpu-worker-002"]
    assert result["plan"]["hold"] == ["gpu-worker-003", "gpu-worker-004", "gpu-worker-005", "gpu-worker-006"]
    policy = get_json(twin, "nicclusterpolicies.mellanox.com", "nic-cluster-policy")["spec"]["ofedDriver"]
    assert policy["version"] == NEW and policy["upgradePolicy"]["autoUpgrade"] is True
    assert policy["upgradePolicy"]["maxParallelUpgrades"] == 0  # upstream has no maxUnavailable: the skip label paces
    assert set(mofed_versions(twin).values()) == {NEW}
    nodes = workers(twin)
    assert all(
        n["metadata"]["labels"].get("nvidia.com/ofed-driver-upgrade-state") == "upgrade-done" for n in nodes.values()
    )
    assert not any("nvidia.com/ofed-driver-upgrade.skip" in n["metadata"]["labels"] for n in nodes.values())
    report = twin.report()
    assert report["budget_violations"] == [] and max_unavailable_at_once(report) <= 2
