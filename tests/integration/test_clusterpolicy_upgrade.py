"""gpufleet.upgrade.clusterpolicy_upgrade against the twin: real ansible-playbook runs over HTTPS.

Each test starts its own twin (with the upstream CRDs from ../shared when
present) and asserts what a person would check with kubectl: node state
labels, driver pod images, the objects' resourceVersions, the twin's request
counts and its recorder report (unavailable intervals, budget violations).
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import ROOT, VENV_BIN, PlaybookRun, kubectl, run_playbook

MODULE_PLAYBOOK = "tests/integration/playbooks/gpu_clusterpolicy_upgrade.yml"
ROLE_PLAYBOOK = "tests/integration/playbooks/gpu_operator_role.yml"
STATE = "nvidia.com/gpu-driver-upgrade-state"
SKIP = "nvidia.com/gpu-driver-upgrade.skip"
HOLD = "gpufleet.io/gpu-driver-upgrade-hold"
RACK = "gpufleet.io/rack"
NEW = "570.124.06"
UNBUILDABLE = "575.57.08"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")

pytestmark = pytest.mark.slow


# -- helpers shared with test_gpu_operator.py ---------------------------------------------------------------


@pytest.fixture
def twin_factory(tmp_path: pathlib.Path) -> Iterator[Callable[..., TwinProcess]]:
    """``twin_factory(scenario=..., time_scale=...)``: a twin of the test's own, stopped afterwards."""
    started: list[TwinProcess] = []

    def start(*, scenario: dict[str, Any] | None = None, time_scale: float = 600, nodes: int = 6) -> TwinProcess:
        path = None
        if scenario is not None:
            path = tmp_path / f"scenario-{len(started)}.yaml"
            path.write_text(yaml.safe_dump(scenario))
        twin = start_twin(
            nodes=nodes,
            profile="openshift",
            time_scale=time_scale,
            workdir=tmp_path / f"twin{len(started)}",
            scenario=path,
        )
        started.append(twin)
        return twin

    yield start
    for twin in started:
        assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def run_module(
    twin: TwinProcess, tmp_path: pathlib.Path, args: dict[str, Any], *, check: bool = False, diff: bool = False
) -> tuple[PlaybookRun, dict[str, Any]]:
    out = tmp_path / f"result-{time.monotonic_ns()}.json"
    args = {"wait_sleep": 1, "wait_timeout": 240, **args}
    run = run_playbook(
        MODULE_PLAYBOOK,
        twin=twin,
        extra_vars={"gpu_module_args": args, "gpu_result_file": str(out)},
        check=check,
        diff=diff,
    )
    return run, json.loads(out.read_text()) if out.exists() else {}


def run_role(
    twin: TwinProcess, tmp_path: pathlib.Path, variables: dict[str, Any], *, check: bool = False
) -> tuple[PlaybookRun, dict[str, Any]]:
    out = tmp_path / f"role-{time.monotonic_ns()}.json"
    variables = {"gpu_operator_wait_sleep": 1, "gpu_operator_wait_timeout": 240, **variables}
    run = run_playbook(ROLE_PLAYBOOK, twin=twin, extra_vars={**variables, "gpu_result_file": str(out)}, check=check)
    return run, json.loads(out.read_text()) if out.exists() else {}


def get_json(twin: TwinProcess, *args: str) -> dict[str, Any]:
    return json.loads(kubectl(twin, "get", *args, "-o", "json"))


def gpu_nodes(twin: TwinProcess) -> dict[str, dict[str, Any]]:
    return {
        node["metadata"]["name"]: node for node in get_json(twin, "nodes", "-l", "nvidia.com/gpu.present=true")["items"]
    }


def states(twin: TwinProcess) -> dict[str, str]:
    return {name: node["metadata"]["labels"].get(STATE, "") for name, node in gpu_nodes(twin).items()}


def driver_versions(twin: TwinProcess) -> dict[str, str]:
    """Each node's live driver pod's driver version (from its image tag)."""
    pods = get_json(twin, "pods", "-A", "-l", "app.kubernetes.io/component=nvidia-driver")["items"]
    versions = {}
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        image = next(c["image"] for c in pod["spec"]["containers"] if c["name"] == "nvidia-driver-ctr")
        versions[pod["spec"]["nodeName"]] = image.rsplit(":", 1)[1].split("-")[0]
    return versions


def policy(twin: TwinProcess) -> dict[str, Any]:
    return get_json(twin, "clusterpolicy", "gpu-cluster-policy")


def settled_policy(twin: TwinProcess, *, quiet_seconds: float = 2.0, timeout: float = 30.0) -> dict[str, Any]:
    """The ClusterPolicy once the operator stopped writing its status (a fresh twin is still settling)."""
    deadline = time.monotonic() + timeout
    last = policy(twin)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        current = policy(twin)
        if current["metadata"]["resourceVersion"] != last["metadata"]["resourceVersion"]:
            last, quiet_since = current, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_seconds and current.get("status", {}).get("state") == "ready":
            return current
    raise AssertionError(f"the ClusterPolicy kept changing: {last.get('status')}")


def write_requests(twin: TwinProcess) -> dict[str, int]:
    """Writes the twin served since its report was last reset, by verb and resource. Access reviews (a permission
    preflight's SelfSubjectAccessReviews) are creates the API server answers without storing anything: not writes."""
    served = twin.report()["requests"]["by_verb_resource"]
    return {
        key: count
        for key, count in served.items()
        if key.split(" ", 1)[0] in WRITE_VERBS and not key.endswith(".authorization.k8s.io")
    }


def wait_for(
    check: Callable[[], bool], *, what: str, timeout: float = 60.0, seen: Callable[[], object] | None = None
) -> None:
    """Poll ``check`` until true; on timeout, name ``what`` and, when given, what ``seen()`` shows then."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f"; seen: {seen()!r}" if seen else ""))
        time.sleep(0.5)


def max_unavailable_at_once(report: dict[str, Any]) -> int:
    """The most GPU nodes the recorder saw unavailable at the same moment."""
    edges = []
    for intervals in report["nodes"]["unavailable_intervals"].values():
        for interval in intervals:
            edges.append((interval["from"], 1))
            edges.append((interval["to"] or "9999", -1))
    current = peak = 0
    for _moment, step in sorted(edges, key=lambda edge: (edge[0], edge[1])):
        current += step
        peak = max(peak, current)
    return peak


# -- tests ---------------------------------------------------------------------------------------------------


def test_check_real_check_real(twin_factory, tmp_path):
    twin = twin_factory()
    settled = settled_policy(twin)
    old = settled["spec"]["driver"]["version"]
    before = settled["metadata"]["resourceVersion"]
    args = {"driver": {"version": NEW}, "upgrade_policy": {"maxUnavailable": 2}}
    twin.admin("POST", "report/reset")

    run, result = run_module(twin, tmp_path, args, check=True, diff=True)
    assert run.returncode == 0, run.output
    assert result["changed"] is True
    assert policy(twin)["metadata"]["resourceVersion"] == before
    assert write_requests(twin) == {}
    assert set(driver_versions(twin).values()) == {old}
    policy_diff = next(d for d in result["diff"] if d["before_header"] == "ClusterPolicy gpu-cluster-policy")
    assert (policy_diff["before"]["spec"]["driver"]["version"], policy_diff["after"]["spec"]["driver"]["version"]) == (
        old,
        NEW,
    )
    assert "resourceVersion" not in policy_diff["after"]["metadata"] and "status" not in policy_diff["after"]
    assert f'-            "version": "{old}"' in run.output  # ansible-playbook --diff shows it

    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0, run.output
    assert result["changed"] is True
    assert set(driver_versions(twin).values()) == {NEW}
    assert set(states(twin).values()) == {"upgrade-done"}
    assert sorted(result["timeline"]) == sorted(gpu_nodes(twin))
    assert all(rows[-1]["state"] == "upgrade-done" for rows in result["timeline"].values())
    assert min(sample["allocatable_gpus"] for sample in result["capacity"]) < result["capacity"][0]["allocatable_gpus"]

    twin.admin("POST", "report/reset")
    run, result = run_module(twin, tmp_path, args, check=True)
    assert run.returncode == 0, run.output
    assert result["changed"] is False
    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0, run.output
    assert result["changed"] is False and result["patches"] == []
    assert write_requests(twin) == {}


def test_failure_domains_pace_the_controller_one_node_per_rack(twin_factory, tmp_path):
    """The upgrade controller knows no racks: with maxUnavailable 3 it would take three nodes at once, two of one
    rack. With failure_domain_label the module holds every node and releases them one per rack."""
    twin = twin_factory()
    settled = settled_policy(twin)
    old = settled["spec"]["driver"]["version"]
    names = sorted(gpu_nodes(twin))
    racks = {name: f"rack-{'ab'[index // 3]}" for index, name in enumerate(names)}
    for name, rack in racks.items():
        kubectl(twin, "label", "node", name, f"{RACK}={rack}", "--overwrite")
    args = {
        "driver": {"version": NEW},
        "upgrade_policy": {"maxUnavailable": 3, "maxParallelUpgrades": 0},
        "failure_domain_label": RACK,
        "max_per_domain": 1,
    }
    twin.admin("POST", "report/reset")

    run, result = run_module(twin, tmp_path, args, check=True)
    assert run.returncode == 0, run.output
    holds = [w for w in result["plan"]["writes"] if w["phase"] == "hold"]
    assert sorted(w["name"] for w in holds) == names and all(
        w["body"]["metadata"]["labels"][SKIP] == "true" for w in holds
    )
    assert write_requests(twin) == {}

    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0, run.output
    assert set(driver_versions(twin).values()) == {NEW} and old != NEW
    assert sorted(result["pacing"]["released"]) == names
    assert result["pacing"]["limits"] == {"max_unavailable": 3, "max_parallel": 0, "max_per_domain": 1}
    nodes = gpu_nodes(twin)
    assert not any(
        SKIP in n["metadata"]["labels"] or HOLD in n["metadata"].get("annotations", {}) for n in nodes.values()
    )
    report = twin.report()
    for rack in ("rack-a", "rack-b"):  # never two nodes of one rack away at once
        rack_only = {"nodes": {"unavailable_intervals": {
            name: spans for name, spans in report["nodes"]["unavailable_intervals"].items() if racks.get(name) == rack
        }}}  # fmt: skip
        assert max_unavailable_at_once(rack_only) == 1, rack
    assert max_unavailable_at_once(report) == 2  # both racks at once: the pace is not one node at a time

    # Every node done: a re-run holds none of them and writes nothing.
    twin.admin("POST", "report/reset")
    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0 and result["changed"] is False, run.output
    assert write_requests(twin) == {}

    run, result = run_module(twin, tmp_path, {**args, "wait": False})
    assert run.returncode != 0 and "failure_domain_label 'gpufleet.io/rack' needs wait" in result["msg"], run.output


def test_patch_is_accepted_by_the_upstream_crd_with_nothing_pruned(twin_factory, tmp_path):
    twin = twin_factory()
    crd = get_json(twin, "crd", "clusterpolicies.nvidia.com")
    if "gpufleet.io/twin-minimal-crd" in crd["metadata"].get("labels", {}):
        pytest.skip("the twin serves its own minimal CRD (../shared/reference/crds is absent)")
    upgrade_policy = {
        "autoUpgrade": True,
        "maxParallelUpgrades": 3,
        "maxUnavailable": "50%",
        "waitForCompletion": {"podSelector": "app=batch-eval", "timeoutSeconds": 600},
        "podDeletion": {"force": True, "timeoutSeconds": 120, "deleteEmptyDir": True},
        "drain": {
            "enable": True,
            "force": True,
            "podSelector": "team=ml",
            "timeoutSeconds": 900,
            "deleteEmptyDir": True,
        },
    }
    run, result = run_module(
        twin,
        tmp_path,
        {
            "driver": {"version": NEW, "repository": "registry.example/nvidia"},
            "upgrade_policy": upgrade_policy,
            "wait": False,
        },
    )
    assert run.returncode == 0, run.output
    (sent,) = [p["patch"] for p in result["patches"] if p["kind"] == "ClusterPolicy"]
    stored = policy(twin)

    def leaves(patch: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
        for key, value in patch.items():
            if isinstance(value, dict):
                yield from leaves(value, (*path, key))
            else:
                yield (*path, key), value

    def stored_at(path: tuple[str, ...]) -> Any:
        found: Any = stored
        for key in path:
            assert key in found, f"{'.'.join(path)} was pruned"
            found = found[key]
        return found

    sent_leaves = [(path, value) for path, value in leaves(sent) if path[0] != "metadata"]
    # version, repository and image go together; upgradePolicy fields only where they differed.
    assert {path[-1] for path, _value in sent_leaves} >= {"version", "repository", "image", "podSelector", "force"}
    for path, value in sent_leaves:
        assert stored_at(path) == value, path
    for path, value in leaves({"spec": {"driver": {"upgradePolicy": upgrade_policy}}}):
        assert stored_at(path) == value, path
    # The same server prunes what the schema lacks: the test above could fail.
    kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p",
            json.dumps({"spec": {"driver": {"nodeSelector": {"gpu-canary": "true"}}}}))  # fmt: skip
    assert "nodeSelector" not in policy(twin)["spec"]["driver"]


def test_an_unknown_upgrade_policy_key_fails_before_any_write(twin_factory, tmp_path):
    twin = twin_factory()
    twin.admin("POST", "report/reset")
    run, _result = run_module(twin, tmp_path, {"driver": {"version": NEW}, "upgrade_policy": {"maxSurge": 1}})
    assert run.returncode != 0
    assert "'maxSurge'" in run.output and "Known fields" in run.output
    assert write_requests(twin) == {}


def test_a_conflicting_write_is_read_again_and_applied_again(twin_factory, tmp_path):
    twin = twin_factory()
    # Another writer's change, which must survive.
    kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p",
            json.dumps({"spec": {"driver": {"upgradePolicy": {"drain": {"timeoutSeconds": 777}}}}}))  # fmt: skip
    twin.admin(
        "POST", "faults", {"type": "conflict", "verb": "patch", "resource": "clusterpolicies.nvidia.com", "count": 2}
    )
    twin.admin("POST", "report/reset")
    run, result = run_module(
        twin, tmp_path, {"driver": {"version": NEW}, "upgrade_policy": {"maxUnavailable": 1}, "wait": False}
    )
    assert run.returncode == 0, run.output
    served = twin.report()["requests"]["by_verb_resource"]
    assert served["patch clusterpolicies.nvidia.com"] == 3
    assert served["get clusterpolicies.nvidia.com"] == 3  # one fresh read per attempt
    stored = policy(twin)["spec"]["driver"]
    assert stored["version"] == NEW and stored["upgradePolicy"]["maxUnavailable"] == 1
    assert stored["upgradePolicy"]["drain"]["timeoutSeconds"] == 777
    (sent,) = [p for p in result["patches"] if p["kind"] == "ClusterPolicy"]
    assert "resourceVersion" in sent["patch"]["metadata"]


def test_a_driver_that_cannot_build_halts_the_rollout_at_that_node(twin_factory, tmp_path):
    twin = twin_factory(scenario={"workloads": False, "driver_builds": {UNBUILDABLE: ["5.14.0-999.el9.x86_64"]}})
    old = policy(twin)["spec"]["driver"]["version"]
    run, result = run_module(
        twin,
        tmp_path,
        {"driver": {"version": UNBUILDABLE}, "upgrade_policy": {"maxParallelUpgrades": 2, "maxUnavailable": 2}},
    )
    assert run.returncode != 0
    assert result["halted"] is True
    first = result["failures"][0]
    assert f"halted at node {first['node']}" in run.output
    assert "kernel" in first["reason"] and UNBUILDABLE in first["reason"]
    started = set(result["halt"]["failed"]) | set(result["halt"]["in_progress"]) | set(result["progress"]["done"])
    assert set(result["halt"]["held"]) == set(gpu_nodes(twin)) - started
    # Hours later nothing else has started: held nodes wait in upgrade-required on the old driver.
    twin.advance(4 * 3600)
    time.sleep(1)
    nodes = gpu_nodes(twin)
    for name in set(nodes) - started:
        assert nodes[name]["metadata"]["labels"][STATE] == "upgrade-required", name
        assert nodes[name]["metadata"]["labels"][SKIP] == "true", name
        assert driver_versions(twin)[name] == old
    failed = nodes[first["node"]]
    assert failed["metadata"]["labels"][STATE] == "upgrade-failed"
    assert failed["spec"].get("unschedulable") is True  # left as it is, for a person
    events = get_json(twin, "events", "-n", "default", "--field-selector", "reason=GPUFleetUpgrade,type=Warning")
    assert any(e["involvedObject"]["name"] == first["node"] for e in events["items"])
    # A re-run does not carry on: preflight stops at the failed node.
    run, _result = run_module(twin, tmp_path, {"driver": {"version": UNBUILDABLE}})
    assert run.returncode != 0 and "upgrade-failed from an earlier attempt" in run.output

    # The rollback: the DaemonSet re-uses its old ControllerRevision, so the held nodes' pods are in sync again;
    # they go to upgrade-done (never cordoned, their pods kept) while the failed nodes are retried.
    held = sorted(set(nodes) - started)
    pods_before = {
        pod["spec"]["nodeName"]: pod["metadata"]["uid"]
        for pod in get_json(twin, "pods", "-A", "-l", "app.kubernetes.io/component=nvidia-driver")["items"]
    }
    twin.admin("POST", "report/reset")
    run, result = run_module(twin, tmp_path, {"driver": {"version": old}, "retry_failed_nodes": True})
    assert run.returncode == 0, run.output
    assert set(driver_versions(twin).values()) == {old}
    assert set(states(twin).values()) == {"upgrade-done"}
    reset = [
        p
        for p in result["patches"]
        if p["kind"] == "Node" and p["patch"] == {"metadata": {"labels": {STATE: "upgrade-done"}}}
    ]
    assert sorted(p["name"] for p in reset) == held
    pods_after = {
        pod["spec"]["nodeName"]: pod["metadata"]["uid"]
        for pod in get_json(twin, "pods", "-A", "-l", "app.kubernetes.io/component=nvidia-driver")["items"]
    }
    assert all(pods_after[name] == pods_before[name] for name in held)
    intervals = twin.report()["nodes"]["unavailable_intervals"]
    assert not any(intervals.get(name) for name in held), intervals
    assert not any(node["spec"].get("unschedulable") for node in gpu_nodes(twin).values())


def test_max_unavailable_holds_while_a_node_was_already_cordoned(twin_factory, tmp_path):
    twin = twin_factory(scenario={"workloads": False, "cordoned": ["gpu-worker-003"]})
    twin.admin("POST", "report/reset")
    run, result = run_module(
        twin, tmp_path, {"driver": {"version": NEW}, "upgrade_policy": {"maxParallelUpgrades": 0, "maxUnavailable": 2}}
    )
    assert run.returncode == 0, run.output
    assert set(driver_versions(twin).values()) == {NEW}
    warning = next(f for f in result["preflight"]["findings"] if f["check"] == "nodes_unavailable")
    assert warning["nodes"] == ["gpu-worker-003"]
    report = twin.report()
    assert report["budget_violations"] == []
    assert max_unavailable_at_once(report) == 2  # the budget was used, never exceeded
    intervals = report["nodes"]["unavailable_intervals"]
    assert len(intervals) == 6 and intervals["gpu-worker-003"][0]["to"] is None  # cordoned throughout
    # A node cordoned before the upgrade stays cordoned after it (the controller's initial-state annotation).
    assert gpu_nodes(twin)["gpu-worker-003"]["spec"].get("unschedulable") is True


def test_a_killed_run_resumes_and_finishes(twin_factory, tmp_path):
    twin = twin_factory(time_scale=150)
    out = tmp_path / "first.json"
    env = twin.env()
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    args = {"driver": {"version": NEW}, "wait_sleep": 1, "wait_timeout": 240}
    command = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        "localhost,",
        str(ROOT / MODULE_PLAYBOOK),
        "-e",
        json.dumps({"gpu_module_args": args, "gpu_result_file": str(out)}),
    ]
    # Its own process group, so the kill takes the module's process too, as a lost controller host would.
    first = subprocess.Popen(
        command, env=env, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(
            lambda: any(s not in ("upgrade-done", "upgrade-required", "") for s in states(twin).values()),
            what="the first node to start",
        )
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    at_kill = driver_versions(twin)
    assert list(at_kill.values()).count(NEW) < len(at_kill)
    run, result = run_module(twin, tmp_path, args)
    assert run.returncode == 0, run.output
    assert result["patches"] == []  # the target was already written: the re-run only watches
    assert set(driver_versions(twin).values()) == {NEW}
    assert set(states(twin).values()) == {"upgrade-done"}
    assert sorted(result["progress"]["done"]) == sorted(gpu_nodes(twin))
