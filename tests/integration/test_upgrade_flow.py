"""playbooks/upgrade.yml against the twin: canary, bake, promote, rollback, refusals, re-runs.

Every test runs the real playbook (ansible-playbook in a subprocess) against a
twin over HTTPS and asserts what the cluster, the matrix file, the ledger
(ConfigMap and file) and the report say afterwards. The twin's clock runs 600
times faster than the wall clock and jumps with POST /admin/clock/advance, so a
48 h bake takes no real time; the flow reads the time from the API server's
Date header, which the twin takes from that clock.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess

import pytest

from gpufleet_twin.process import start_twin

from .accounts import refused, upgrade_account_env
from .browser import assert_report_renders, newest_html
from .conftest import ROOT, PlaybookRun, kubectl, run_playbook

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "gpu-version-matrix.yaml"
NAMESPACE = "nvidia-gpu-operator"
CANARY = "gpu-worker-001"  # the example matrix's canary_node
NEW_DRIVER = "570.124.06"
OLD_DRIVER = "550.127.05"
WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    shutil.copy(EXAMPLE, tmp_path / "matrix.yaml")
    return tmp_path


def flow(twin, workspace: pathlib.Path, stage: str, *, environment: dict | None = None, **extra) -> PlaybookRun:
    """One stage of playbooks/upgrade.yml: with the twin's kubeconfig, or with ``environment`` alone (an account's
    token, tests/integration/accounts.py)."""
    variables = {
        "stage": stage,
        "upgrade_matrix_file": str(workspace / "matrix.yaml"),
        "upgrade_report_dir": str(workspace / "reports"),
        "upgrade_wait_timeout": 900,
        # Simulated time runs 600 times faster: look at the cluster often.
        "validate_wait_sleep": 0.5,
        "gpu_operator_wait_sleep": 1,
    }
    variables.update(extra)
    return run_playbook(
        "playbooks/upgrade.yml",
        twin=None if environment else twin,
        environment=environment,
        extra_vars=variables,
        timeout=600,
    )


STAGE_LEASE = "gpufleet-upgrade"  # the stage Lease in NAMESPACE (roles/upgrade: upgrade_lease_name)


def lease(twin) -> dict:
    """The stage Lease's spec ({} when there is none)."""
    found = kubectl(twin, "get", "lease", "-n", NAMESPACE, STAGE_LEASE, "-o", "json", check=False)
    return json.loads(found)["spec"] if found else {}


def patch_lease(twin, spec: dict) -> None:
    kubectl(twin, "patch", "lease", "-n", NAMESPACE, STAGE_LEASE, "--type=merge", "-p", json.dumps({"spec": spec}))


def writes(twin) -> dict:
    """Writes the twin served since its report was last reset, by verb and resource.

    Access reviews (the permission preflight's SelfSubjectAccessReviews) are creates the API server
    answers without storing anything: not writes.
    """
    served = twin.report()["requests"]["by_verb_resource"]
    return {
        key: count
        for key, count in served.items()
        if key.split(" ", 1)[0] in WRITE_VERBS and not key.endswith(".authorization.k8s.io")
    }


def cluster_ledger(twin) -> list:
    found = kubectl(twin, "get", "configmap", "-n", NAMESPACE, "gpufleet-upgrade-ledger", "-o", "json", check=False)
    if not found:
        return []
    text = json.loads(found)["data"]["ledger.jsonl"]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def file_ledger(workspace: pathlib.Path) -> list:
    return json.loads((workspace / "reports" / "upgrade-ledger.json").read_text())["entries"]


def git(repo: pathlib.Path, *args: str) -> str:
    completed = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return completed.stdout.strip()


def node_labels(twin) -> dict:
    nodes = json.loads(kubectl(twin, "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "json"))["items"]
    return {node["metadata"]["name"]: node["metadata"].get("labels", {}) for node in nodes}


def drivers(twin) -> dict:
    return {name: labels.get("nvidia.com/cuda.driver-version.full") for name, labels in node_labels(twin).items()}


def stage_events(twin, kind: str, name: str) -> list:
    """The actions of the GPUFleetUpgrade Events about one object, oldest first."""
    found = json.loads(
        kubectl(twin, "get", "events", "-n", "default", "--field-selector", "reason=GPUFleetUpgrade", "-o", "json")
    )["items"]
    about = [e for e in found if (e["involvedObject"]["kind"], e["involvedObject"]["name"]) == (kind, name)]
    return [e["action"] for e in sorted(about, key=lambda e: (e["firstTimestamp"], e["metadata"]["name"]))]


def last_report(workspace: pathlib.Path, stage: str) -> str:
    reports = sorted((workspace / "reports").glob(f"upgrade-{stage}-*.md"))
    assert reports, f"no {stage} report in {workspace / 'reports'}"
    return reports[-1].read_text()


@pytest.fixture
def eight_node_twin(tmp_path):
    """The demo's cluster size: a promotion rolls 8 GPU nodes. Its ClusterPolicy is the one OLM creates from the
    bundle's example, which names no driver or driver manager image (the operator's release decides both)."""
    scenario = tmp_path / "olm-cluster-policy.yaml"
    scenario.write_text("olm_cluster_policy: true\n")
    twin = start_twin(nodes=8, profile="openshift", time_scale=600, workdir=tmp_path / "twin", scenario=scenario)
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def test_canary_bake_promote_and_reruns_change_nothing(eight_node_twin, workspace):
    """The whole flow of the GPU Operator group, run as the upgrade account: a ServiceAccount bound to exactly the
    shipped rbac/ roles (issue 24). Every stage succeeds and the API refuses none of its requests (403)."""
    twin = eight_node_twin
    before_matrix = (workspace / "matrix.yaml").read_text()
    account = upgrade_account_env(twin)

    def stage(name: str, **extra) -> PlaybookRun:
        run = flow(twin, workspace, name, environment=account, **extra)
        assert refused(twin) == {}, (name, refused(twin), run.output[-4000:])
        return run

    before = driver_pod_uids(twin)
    canary = stage("canary")
    assert canary.returncode == 0, canary.output
    assert "Stage canary: success" in canary.output
    assert node_labels(twin)[CANARY].get("gpu-canary") == "true"
    found = drivers(twin)
    assert found[CANARY] == NEW_DRIVER
    assert {driver for name, driver in found.items() if name != CANARY} == {OLD_DRIVER}
    # The operator moved to v25.3.0, whose bundle names another driver (its default, 570.124.06) and driver
    # manager: the ones that ran were pinned first, so no driver but the canary's restarted (without the pins the
    # upgrade controller rolls the new release's driver to every node, before any canary).
    after = driver_pod_uids(twin)
    assert {node for node in before if after.get(node) != before[node]} == {CANARY}
    driver = json.loads(kubectl(twin, "get", "clusterpolicy", "gpu-cluster-policy", "-o", "json"))["spec"]["driver"]
    assert driver["manager"]["image"].endswith(
        "k8s-driver-manager@sha256:b072c5793be65eee556eaff1b9cbbd115a1ef29982be95b2959adfcb4bc72382"  # v24.9.0's
    )
    # The driver step then wrote the canary's driver whole: repository and image from the pinned digest.
    assert (driver["repository"], driver["image"], driver["version"]) == ("nvcr.io/nvidia", "driver", NEW_DRIVER)
    (entry,) = cluster_ledger(twin)
    assert (entry["stage"], entry["outcome"], entry["canary_node"]) == ("canary", "success", CANARY)
    assert entry["gates"][0]["passed"] is True
    assert {gate["gate"] for gate in entry["gates"][0]["gates"]} == {
        "smoke_training",
        "smoke_inference",
        "rdma",
        "gpu_errors",
        "dcgm_diag",
    }
    assert CANARY in entry["counters"]  # the bake's baseline
    report = last_report(workspace, "canary")
    assert report.startswith("# Canary succeeded: gpu_operator:")
    assert "| gpu_driver | 550.127.05 | 570.124.06 | changed |" in report
    assert "| Operator | driver and driver manager pinned in ClusterPolicy/gpu-cluster-policy to the images" in report
    # The HTML report beside it, in a real browser: a lane for the canary, a point per capacity sample.
    assert_report_renders(
        newest_html(workspace / "reports", "canary"),
        name="canary-gpu-operator",
        nodes=entry["nodes"],
        samples=len(entry["capacity"]),
    )
    # The gates cleaned up after themselves.
    left = kubectl(twin, "get", "jobs,pods", "-A", "-l", "app.kubernetes.io/component=validation-gate", "-o", "name")
    assert left.strip() == ""

    # A second canary changes nothing: not a single write reaches the cluster.
    twin.admin("POST", "report/reset")
    again = stage("canary")
    assert again.returncode == 0, again.output
    assert "Stage canary: unchanged" in again.output
    assert writes(twin) == {}

    bake = stage("bake")
    assert bake.returncode == 0, bake.output
    assert [e["stage"] for e in cluster_ledger(twin)] == ["canary", "bake"]

    # A bake check is meant to run again and again: it writes its gate Jobs, its
    # ledger entry and its Events, nothing else (another writer's conflict is retried).
    twin.admin("POST", "report/reset")
    twin.admin("POST", "faults", {"type": "conflict", "verb": "update", "resource": "configmaps", "count": 2})
    again = stage("bake")
    assert again.returncode == 0, again.output
    # (and the stage Lease it holds while it runs).
    assert {key.split(" ", 1)[1] for key in writes(twin)} <= {
        "jobs.batch",
        "pods",
        "configmaps",
        "leases.coordination.k8s.io",
        "events",
    }
    assert [e["stage"] for e in cluster_ledger(twin)] == ["canary", "bake", "bake"]
    # The two injected conflicts were met and retried; on a busy machine one more retried conflict can come on top
    # (3 once, in a clean-clone CI run): what the retry is for, so only the floor is asserted.
    served = twin.report()["requests"]
    assert served["errors_by_code_verb_resource"].get("409 update configmaps", 0) >= 2, served
    assert served["by_code"].get("409", 0) >= 2, served

    # 49 hours later on the cluster's clock; the matrix lives in a Git checkout.
    git(workspace, "init", "-q")
    git(workspace, "add", "matrix.yaml")
    git(workspace, "commit", "-q", "-m", "matrix")
    twin.advance(49 * 3600)
    promote = stage("promote", upgrade_git_commit=True)
    assert promote.returncode == 0, promote.output
    assert set(drivers(twin).values()) == {NEW_DRIVER}
    assert "gpu-canary" not in node_labels(twin)[CANARY]
    promoted = (workspace / "matrix.yaml").read_text()
    header = [line for line in before_matrix.splitlines() if line.startswith("#")]
    assert header == [line for line in promoted.splitlines() if line.startswith("#")]
    assert '      gpu_driver: "570.124.06"\n' in promoted.split("canary_testing:")[0]
    assert '      gpu_driver: "550.127.05"\n' in promoted.split("rollback:")[1]
    entry = cluster_ledger(twin)[-1]
    assert (entry["stage"], entry["outcome"], entry["forced"]) == ("promote", "success", False)
    assert entry["matrix"]["changed"] is True
    tag = entry["matrix"]["tag"]
    # The cluster's month when the promotion started (its plan's time; recorded_at comes later, and at 600 times
    # the wall clock a run near a month's end records in the next month: seen in CI on 2026-11-27).
    assert tag == f"v{entry['started_at'][:7]}-stable"
    assert git(workspace, "rev-parse", f"{tag}^{{commit}}") == git(workspace, "rev-parse", "HEAD")
    assert git(workspace, "log", "-1", "--format=%s").startswith("Promote canary_testing to current_production")
    assert git(workspace, "status", "--porcelain", "matrix.yaml") == ""
    assert len(entry["gates"]) == 2  # the sampled nodes
    assert "Promotion succeeded" in last_report(workspace, "promote")
    # All 8 GPU nodes on the timeline (the canary, already done, among them), and the capacity curve.
    assert len(entry["nodes"]) == 8
    assert_report_renders(
        newest_html(workspace / "reports", "promote"),
        name="promote-gpu-operator-8-nodes",
        nodes=entry["nodes"],
        samples=len(entry["capacity"]),
    )
    assert "Promoted" in stage_events(twin, "ClusterPolicy", "gpu-cluster-policy")
    assert "Promoted" in stage_events(twin, "Node", CANARY)
    canary_node = json.loads(kubectl(twin, "get", "node", CANARY, "-o", "json"))
    assert "gpufleet.io/canary-reason" not in canary_node["metadata"].get("annotations", {})

    twin.admin("POST", "report/reset")
    again = stage("promote")
    assert again.returncode == 0, again.output
    assert "Stage promote: unchanged" in again.output
    assert writes(twin) == {}
    assert (workspace / "matrix.yaml").read_text() == promoted

    # The promoted change goes wrong later: stage=rollback takes every node to the
    # rollback entry and says what to do about the matrix (it does not rewrite it).
    rollback = stage("rollback")
    assert rollback.returncode == 0, rollback.output
    assert set(drivers(twin).values()) == {OLD_DRIVER}
    entry = cluster_ledger(twin)[-1]
    assert (entry["stage"], entry["outcome"], entry["rollback_target"]) == ("rollback", "success", "rollback")
    assert "revert the promotion commit" in entry["message"]
    assert (workspace / "matrix.yaml").read_text() == promoted
    again = stage("rollback")
    assert again.returncode == 0 and "Stage rollback: unchanged" in again.output, again.output


def test_promotion_inside_the_bake_window_is_accepted_with_a_recorded_reason(fresh_twin, workspace):
    twin = fresh_twin
    before_matrix = (workspace / "matrix.yaml").read_text()
    assert flow(twin, workspace, "canary").returncode == 0

    # Inside the bake window the promotion is refused, before any change.
    twin.admin("POST", "report/reset")
    early = flow(twin, workspace, "promote")
    assert early.returncode != 0
    assert "Promotion refused: the canary has baked" in early.output
    assert "Set upgrade_force_reason to override" in early.output
    assert writes(twin) == {}
    assert (workspace / "matrix.yaml").read_text() == before_matrix
    assert file_ledger(workspace)[-1]["outcome"] == "refused"
    assert [e["stage"] for e in cluster_ledger(twin)] == ["canary"]

    forced = flow(
        twin, workspace, "promote", upgrade_force_reason="CVE fix must reach the fleet today", tower_job_id=4242
    )
    assert forced.returncode == 0, forced.output
    entry = cluster_ledger(twin)[-1]
    assert entry["actor"]["awx_job_id"] == "4242"
    assert (entry["stage"], entry["forced"], entry["force_reason"]) == (
        "promote",
        True,
        "CVE fix must reach the fleet today",
    )
    assert "| Forced | yes, reason: CVE fix must reach the fleet today |" in last_report(workspace, "promote")
    assert "forced: CVE fix must reach the fleet today" in (workspace / "matrix.yaml").read_text()


def test_failed_gate_on_the_canary_then_rollback(fresh_twin, workspace):
    twin = fresh_twin
    twin.admin("POST", "faults", {"type": "ib_port_down", "node": CANARY, "device": "mlx5_3"})
    canary = flow(twin, workspace, "canary")
    assert canary.returncode != 0
    assert f"Validation gates failed on canary node {CANARY}: rdma: mlx5_3/1 is Down/Disabled" in canary.output
    entry = cluster_ledger(twin)[-1]
    assert (entry["stage"], entry["outcome"]) == ("canary", "failed")
    rdma = next(g for g in entry["gates"][0]["gates"] if g["gate"] == "rdma")
    assert rdma["passed"] is False
    report = last_report(workspace, "canary")
    assert "## What failed and why" in report and "Evidence, rdma on gpu-worker-001" in report
    assert "State: Down" in report  # the raw ibstat excerpt

    # A failed stage releases its Lease too. A check-mode run takes none and writes nothing, yet is refused while
    # another run holds a valid one (test_stage_lease follows the Lease through kills, expiry and races).
    held = lease(twin)
    assert held and held["holderIdentity"] == "", "a failed stage releases its Lease too"
    now = twin.admin("GET", "clock")["now"]
    bob = {
        "holderIdentity": "bob@elsewhere, run 1",
        "leaseDurationSeconds": 86400,
        "acquireTime": now,
        "renewTime": now,
    }
    patch_lease(twin, bob)
    twin.admin("POST", "report/reset")
    variables = {"stage": "rollback", "upgrade_matrix_file": str(workspace / "matrix.yaml"),
                 "upgrade_report_dir": str(workspace / "reports")}  # fmt: skip
    check = run_playbook("playbooks/upgrade.yml", twin=twin, extra_vars=variables, check=True)
    assert check.returncode != 0, check.output[-3000:]
    assert "Another run holds the Lease: bob@elsewhere, run 1, for " in check.output, check.output[-3000:]
    assert writes(twin) == {}
    assert lease(twin)["holderIdentity"] == "bob@elsewhere, run 1"
    # Bob's run ends.
    patch_lease(twin, {"holderIdentity": ""})

    # No new canary of a failed change: roll back first.
    blocked = flow(twin, workspace, "canary")
    assert blocked.returncode != 0 and "Run stage=rollback first" in blocked.output

    rollback = flow(twin, workspace, "rollback")
    # The software is back to known-good, but the port is still down: the node itself is faulty.
    assert rollback.returncode != 0
    assert "still fails its gates, so the node itself is faulty" in rollback.output
    assert drivers(twin)[CANARY] == OLD_DRIVER
    assert "gpu-canary" not in node_labels(twin)[CANARY]
    entry = cluster_ledger(twin)[-1]
    assert (entry["stage"], entry["rolled_back"], entry["rollback_target"]) == ("rollback", True, "current_production")
    # Its Events: the canary started, never passed, and was rolled back.
    assert stage_events(twin, "Node", CANARY) == ["CanaryStarted", "RolledBack"]
    assert stage_events(twin, "ClusterPolicy", "gpu-cluster-policy") == ["CanaryStarted", "RolledBack"]

    twin.admin("POST", "report/reset")
    again = flow(twin, workspace, "rollback")
    assert again.returncode == 0, again.output
    assert "Nothing to roll back" in again.output
    assert writes(twin) == {}


def test_bake_failure_rolls_the_canary_back_when_asked(fresh_twin, workspace):
    twin = fresh_twin
    assert flow(twin, workspace, "canary").returncode == 0
    twin.admin("POST", "faults", {"type": "ecc_errors", "node": CANARY, "uncorrected": 3, "xid": [48]})
    bake = flow(twin, workspace, "bake", upgrade_rollback_on_bake_failure=True, upgrade_bake_gates=["gpu_errors"])
    assert bake.returncode != 0
    assert "uncorrected ECC errors grew by 3" in bake.output
    assert "the canary was rolled back to current_production" in bake.output
    assert drivers(twin)[CANARY] == OLD_DRIVER
    entry = cluster_ledger(twin)[-1]
    assert (entry["stage"], entry["outcome"], entry["rolled_back"]) == ("bake", "failed", True)
    # Its Events: the canary passed, its bake check failed, and it was rolled back.
    for kind, name in (("Node", CANARY), ("ClusterPolicy", "gpu-cluster-policy")):
        assert stage_events(twin, kind, name) == ["CanaryStarted", "CanaryPassed", "BakeCheckFailed", "RolledBack"]
    promote = flow(twin, workspace, "promote", upgrade_force_reason="try anyway")
    assert promote.returncode != 0 and "No canary of this change has passed" in promote.output


def two_group_matrix(workspace: pathlib.Path) -> None:
    text = (workspace / "matrix.yaml").read_text()
    text = text.replace(
        '      container_toolkit: "v1.17.5"\n',
        '      container_toolkit: "v1.17.5"\n      network_operator: "v24.10.0"\n      mofed: "24.10-1.0.0.0"\n',
    )
    (workspace / "matrix.yaml").write_text(text)


def test_a_matrix_changing_two_groups_is_refused_before_any_change(shared_twin, workspace):
    two_group_matrix(workspace)
    shared_twin.admin("POST", "report/reset")
    run = flow(shared_twin, workspace, "canary")
    assert run.returncode != 0
    assert "canary_testing changes 2 component groups at once (gpu_operator, network_operator)" in run.output
    assert "1. GPU Operator: gpu_operator v24.9.0 -> v25.3.0" in run.output
    assert (
        "2. Network Operator: network_operator v24.7.0 -> v24.10.0, mofed 24.07-0.6.1.0 -> 24.10-1.0.0.0" in run.output
    )
    assert writes(shared_twin) == {}
    assert cluster_ledger(shared_twin) == []
    (entry,) = file_ledger(workspace)
    assert (entry["outcome"], entry["cluster_changed"]) == ("refused", False)
    assert last_report(workspace, "canary").startswith("# Canary refused (nothing was changed)")


def driver_pod_uids(twin) -> dict:
    """Each GPU node's driver pod uid: a new uid is a driver restarted."""
    pods = json.loads(
        kubectl(twin, "get", "pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/component=nvidia-driver", "-o", "json")
    )["items"]
    return {pod["spec"]["nodeName"]: pod["metadata"]["uid"] for pod in pods}


def test_a_driver_type_switch_is_refused_before_any_change(shared_twin, workspace):
    """precompiled <-> compiled restarts every driver pod at once (NVIDIA/gpu-operator issues 2166, 2549)."""
    text = (workspace / "matrix.yaml").read_text()
    start = text.index("    canary_testing:")
    end = text.index("    rollback:")
    canary = '    canary_testing:\n      driver_type: "precompiled"\n      canary_node: "gpu-worker-001"\n\n'
    (workspace / "matrix.yaml").write_text(text[:start] + canary + text[end:])
    uids = driver_pod_uids(shared_twin)
    shared_twin.admin("POST", "report/reset")
    run = flow(shared_twin, workspace, "canary")
    assert run.returncode != 0
    assert "canary_testing changes how the driver is installed" in run.output
    assert "a driver_type change (compiled -> precompiled) is disruptive" in run.output
    assert writes(shared_twin) == {}
    assert driver_pod_uids(shared_twin) == uids and len(uids) == 6
    policy = json.loads(kubectl(shared_twin, "get", "clusterpolicy", "gpu-cluster-policy", "-o", "json"))
    assert policy["spec"]["driver"].get("usePrecompiled") is not True
    (entry,) = file_ledger(workspace)
    assert (entry["outcome"], entry["cluster_changed"]) == ("refused", False)


def test_a_group_without_a_role_is_refused_naming_it(shared_twin, workspace):
    text = (workspace / "matrix.yaml").read_text()
    start = text.index("    canary_testing:")
    end = text.index("    rollback:")
    canary = '    canary_testing:\n      network_operator: "v24.10.0"\n      mofed: "24.10-1.0.0.0"\n\n'
    (workspace / "matrix.yaml").write_text(text[:start] + canary + text[end:])
    shared_twin.admin("POST", "report/reset")
    # A site may leave a group out of the flow on purpose.
    run = flow(
        shared_twin, workspace, "canary", upgrade_component_roles={"gpu_operator": "gpufleet.upgrade.gpu_operator"}
    )
    assert run.returncode != 0
    assert "component group 'network_operator', which this flow cannot upgrade yet" in run.output
    assert writes(shared_twin) == {}


def test_component_settings_set_outside_the_stage_are_refused_naming_them(shared_twin, workspace):
    """The stage hands its role one request (gpufleet_component); the role's own names for it, set as extra vars,
    would override the budget without a word: refused before the Lease, naming them, and nothing is written."""
    shared_twin.admin("POST", "report/reset")
    run = flow(shared_twin, workspace, "canary", gpu_operator_max_unavailable=5, gpu_operator_wait_timeout=60)
    assert run.returncode != 0
    assert "gpu_operator_max_unavailable, gpu_operator_wait_timeout set for localhost" in run.output
    assert "the stage decides them for gpufleet.upgrade.gpu_operator" in run.output
    assert writes(shared_twin) == {}
    (entry,) = file_ledger(workspace)
    assert (entry["outcome"], entry["cluster_changed"]) == ("refused", False)


def test_an_openshift_change_goes_canary_pool_first_then_every_pool(fresh_twin, workspace):
    """The flow hands the openshift group to its role: canary pool, gates, bake window, then every pool."""
    twin = fresh_twin
    target_kernel = "5.14.0-427.42.1.el9_4.x86_64"
    text = (workspace / "matrix.yaml").read_text()
    start = text.index("    canary_testing:")
    end = text.index("    rollback:")
    canary = (
        "    canary_testing:\n"
        '      openshift: "4.16.21"\n'
        f'      kernel: "{target_kernel}"\n'
        '      status: "canary-testing"\n'
        f'      canary_node: "{CANARY}"\n\n'
    )
    (workspace / "matrix.yaml").write_text(text[:start] + canary + text[end:])

    run = flow(twin, workspace, "canary", openshift_wait_sleep=1)
    assert run.returncode == 0, run.output
    assert "Stage canary: success" in run.output
    nodes = json.loads(kubectl(twin, "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "json"))["items"]
    kernels = {node["metadata"]["name"]: node["status"]["nodeInfo"]["kernelVersion"] for node in nodes}
    assert kernels.pop(CANARY) == target_kernel
    assert target_kernel not in set(kernels.values())
    paused = json.loads(kubectl(twin, "get", "machineconfigpool", "worker", "-o", "json"))["spec"]["paused"]
    assert paused is True
    entry = cluster_ledger(twin)[-1]
    assert (entry["group"], entry["outcome"]) == ("openshift", "success")

    twin.advance(49 * 3600)
    promote = flow(twin, workspace, "promote", openshift_wait_sleep=1)
    assert promote.returncode == 0, promote.output
    nodes = json.loads(kubectl(twin, "get", "nodes", "-l", "nvidia.com/gpu.present=true", "-o", "json"))["items"]
    assert {node["status"]["nodeInfo"]["kernelVersion"] for node in nodes} == {target_kernel}
    pools = json.loads(kubectl(twin, "get", "machineconfigpools", "-o", "json"))["items"]
    assert [pool["metadata"]["name"] for pool in pools if pool["spec"].get("paused")] == []
    promoted = (workspace / "matrix.yaml").read_text()
    assert '      openshift: "4.16.21"\n' in promoted.split("canary_testing:")[0]
