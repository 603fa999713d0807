"""playbooks/diagnose.yml against one twin holding several stuck nodes at once, each for another cause.

The twin (8 GPU workers, OpenShift profile) is put into the stuck states the way
they happen: a driver upgrade is started (ClusterPolicy driver version) with
maxParallelUpgrades 1 and maxUnavailable 25% (2 nodes) while

- gpu-worker-001 is cordoned and its new driver does not build (crash loop);
- gpu-worker-003 is cordoned and runs a pod of the ``nvidia`` runtimeClass that requests no GPU, so the old module
  stays in use and the new driver pod cannot unload it;
- gpu-worker-002, -004 and -005 wait in upgrade-required: the budget is used up;
- gpu-worker-006 is cordoned and runs a Job pod waitForCompletion waits for (no timeout);
- gpu-worker-007 is cordoned and runs the only replica of a Deployment whose PDB allows no disruption;
- gpu-worker-008 carries the skip label and is cordoned;
- the stage Lease names a run that stopped.

Last, gpu-worker-002 goes NotReady: the driver DaemonSet then has a pod on a node it no longer counts, and the
upgrade controller stops altogether (gpu-operator #688).

Cordoned nodes start without an upgrade slot (k8s-operator-libs), so every one of them reaches its own stuck state.
"""

from __future__ import annotations

import json
import pathlib
import time
from typing import Any

import pytest
import yaml

from gpufleet_twin.process import TwinProcess, start_twin

from .accounts import account_env, apply_shipped_roles, refused, run_as, token_of
from .conftest import PlaybookRun, kubectl, run_playbook
from .test_clusterpolicy_upgrade import get_json, settled_policy, states, wait_for, write_requests

pytestmark = pytest.mark.slow

PLAYBOOK = "playbooks/diagnose.yml"
NEW = "570.124.06"
NS = "doctor-test"
STATE = "nvidia.com/gpu-driver-upgrade-state"


def _pinned(kind: str, name: str, node: str, *, labels: dict[str, str], extra: dict[str, Any]) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "main", "image": "registry.example/app:1", **extra.pop("container", {})}],
        **extra,
    }
    template = {"metadata": {"labels": labels}, "spec": pod_spec}
    if kind == "Job":
        pod_spec["restartPolicy"] = "Never"
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"template": template, "backoffLimit": 0},
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": template},
    }


def apply(twin: TwinProcess, tmp_path: pathlib.Path, objects: list[dict[str, Any]]) -> None:
    path = tmp_path / f"objects-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    kubectl(twin, "apply", "-f", str(path))


def pod_on(twin: TwinProcess, node: str, prefix: str) -> dict[str, Any] | None:
    pods = get_json(twin, "pods", "-n", NS, "--field-selector", f"spec.nodeName={node}")["items"]
    return next(
        (p for p in pods if p["metadata"]["name"].startswith(prefix) and p["status"].get("phase") == "Running"), None
    )


def driver_pod(twin: TwinProcess, node: str) -> dict[str, Any] | None:
    pods = get_json(
        twin,
        "pods",
        "-A",
        "-l",
        "app.kubernetes.io/component=nvidia-driver",
        "--field-selector",
        f"spec.nodeName={node}",
    )["items"]
    return next((p for p in pods if not p["metadata"].get("deletionTimestamp")), None)


def restarts(pod: dict[str, Any] | None) -> int:
    return max(
        (c.get("restartCount", 0) for c in (pod or {}).get("status", {}).get("containerStatuses") or []), default=0
    )


@pytest.fixture(scope="module")
def stuck_twin(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("doctor")
    # No seeded workloads: the pinned pods below must find their node's GPUs free.
    scenario = tmp_path / "scenario.yaml"
    # The doctor tells how long a node is stuck from the controller's state Events, which the API server keeps for
    # an hour by default: 6 real seconds at 600x, less than a loaded machine can take between the nodes getting stuck
    # and a test's diagnosis. A week here (17 real minutes), as a cluster with --event-ttl=168h keeps them.
    scenario.write_text(
        yaml.safe_dump({"nodes": 8, "profile": "openshift", "workloads": False, "event_ttl_seconds": 7 * 24 * 3600})
    )
    twin = start_twin(nodes=8, profile="openshift", time_scale=600, workdir=tmp_path / "twin", scenario=scenario)
    try:
        settled_policy(twin, timeout=120)
        namespace = "nvidia-gpu-operator"
        kubectl(twin, "create", "namespace", NS)
        apply(
            twin,
            tmp_path,
            [
                _pinned("Job", "long-job", "gpu-worker-006", labels={"doctor-wait": "true"}, extra={}),
                _pinned(
                    "Deployment",
                    "pinned",
                    "gpu-worker-007",
                    labels={"app": "pinned"},
                    extra={"container": {"resources": {"limits": {"nvidia.com/gpu": 1}}}},
                ),
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": "pinned", "namespace": NS},
                    "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pinned"}}},
                },
                _pinned(
                    "Deployment",
                    "rc-holder",
                    "gpu-worker-003",
                    labels={"app": "rc-holder", "team": "a"},
                    extra={"runtimeClassName": "nvidia"},
                ),
            ],
        )
        wait_for(
            lambda: all(
                pod_on(twin, node, prefix)
                for node, prefix in (
                    ("gpu-worker-006", "long-job"),
                    ("gpu-worker-007", "pinned"),
                    ("gpu-worker-003", "rc-holder"),
                )
            ),
            what="the pinned pods to run",
            timeout=120,
        )
        kubectl(twin, "label", "node", "gpu-worker-008", "nvidia.com/gpu-driver-upgrade.skip=true")
        for node in (
            "gpu-worker-001",
            "gpu-worker-003",
            "gpu-worker-006",
            "gpu-worker-007",
            "gpu-worker-008",
        ):
            kubectl(twin, "cordon", node)
        twin.admin(
            "POST",
            "faults",
            [
                {"type": "node_step_failures", "fraction": 1, "steps": ["driver_build"], "nodes": ["gpu-worker-001"]},
            ],
        )
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "gpufleet-upgrade", "namespace": namespace},
            "spec": {
                "holderIdentity": "alice@ctl (AWX job 7) run 1f2e",
                "leaseDurationSeconds": 300,
                "acquireTime": "2026-01-01T10:00:00.000000Z",
                "renewTime": "2026-01-01T10:05:00.000000Z",
            },
        }
        apply(twin, tmp_path, [lease])
        patch = {
            "spec": {
                "driver": {
                    "version": NEW,
                    "upgradePolicy": {
                        "maxParallelUpgrades": 1,
                        "maxUnavailable": "25%",
                        "waitForCompletion": {"podSelector": "doctor-wait=true", "timeoutSeconds": 0},
                        "podDeletion": {"timeoutSeconds": 0},
                    },
                }
            }
        }
        kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p", json.dumps(patch))

        def stuck_as_planned() -> bool:
            now = states(twin)
            return (
                now.get("gpu-worker-006") == "wait-for-jobs-required"
                and now.get("gpu-worker-007") == "pod-deletion-required"
                and now.get("gpu-worker-001") in ("pod-restart-required", "upgrade-failed")
                and now.get("gpu-worker-003") in ("pod-restart-required", "upgrade-failed")
                and restarts(driver_pod(twin, "gpu-worker-001")) >= 1
                and restarts(driver_pod(twin, "gpu-worker-003")) >= 1
            )

        wait_for(stuck_as_planned, what="the nodes to get stuck", timeout=300)
        yield twin
    finally:
        assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def diagnose(
    twin: TwinProcess,
    tmp_path: pathlib.Path,
    *,
    check: bool = False,
    environment: dict[str, str] | None = None,
    **extra: Any,
):
    """diagnose.yml with the twin's kubeconfig, or with ``environment`` alone (an account's token): the run and the
    result file it wrote."""
    out = tmp_path / f"doctor-{time.monotonic_ns()}.json"
    run = run_playbook(
        PLAYBOOK,
        twin=None if environment else twin,
        environment=environment,
        extra_vars={"doctor_result_file": str(out), **extra},
        check=check,
    )
    return run, json.loads(out.read_text()) if out.exists() else {}


def by_node(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["node"]: item for item in result["findings"] if item["component"] == "gpu-driver"}


def test_diagnose_names_each_cause_with_its_evidence(stuck_twin, tmp_path):
    twin = stuck_twin
    twin.admin("POST", "report/reset")
    run, result = diagnose(twin, tmp_path)

    # A scheduled job goes red: the run fails, naming the cluster as stuck.
    assert run.returncode != 0, run.output
    assert "stuck" in run.output and "gpu-worker-007" in run.output
    assert write_requests(twin) == {}, "the diagnosis writes nothing"
    found = by_node(result)
    assert {node: item["cause"] for node, item in found.items()} == {
        "gpu-worker-001": "driver_pod_crashloop",
        "gpu-worker-002": "budget_used_by_unavailable",
        "gpu-worker-003": "gpu_consumers_without_request",
        "gpu-worker-004": "budget_used_by_unavailable",
        "gpu-worker-005": "budget_used_by_unavailable",
        "gpu-worker-006": "waiting_for_jobs",
        "gpu-worker-007": "pdb_blocks_eviction",
        "gpu-worker-008": "skip_label",
    }
    assert "no kernel-devel package matches" in found["gpu-worker-001"]["evidence"]["last_message"]
    consumers = found["gpu-worker-003"]["evidence"]["pods"]
    assert [c["how"] for c in consumers] == ["runtimeClassName nvidia"]
    assert consumers[0]["pod"].startswith(f"{NS}/rc-holder-")
    assert "driver is in use" in found["gpu-worker-003"]["evidence"]["last_message"]
    # The budget names the node that uses it up without upgrading (cordoned and skipped), besides the four upgrading.
    assert found["gpu-worker-004"]["evidence"]["unavailable_nodes"] == ["gpu-worker-008"]
    assert found["gpu-worker-004"]["evidence"]["max_unavailable"] == 2
    assert found["gpu-worker-004"]["evidence"]["current_unavailable"] == 5
    assert found["gpu-worker-006"]["evidence"]["jobs"] == [f"{NS}/long-job"]
    assert found["gpu-worker-006"]["evidence"]["timeoutSeconds"] == 0
    blocked = found["gpu-worker-007"]["evidence"]["blocked"][0]
    assert (blocked["pdb"], blocked["disruptionsAllowed"]) == (f"{NS}/pinned", 0)
    assert blocked["pod"].startswith(f"{NS}/pinned-")
    # How long: from the controller's state Events, on the twin's clock (it runs 600 times faster than the wall).
    for node in ("gpu-worker-001", "gpu-worker-006", "gpu-worker-007"):
        assert found[node]["seconds_in_state"] is not None and found[node]["seconds_in_state"] >= 0, found[node]
    interrupted = [item for item in result["cluster"] if item["cause"] == "rollout_interrupted"]
    assert interrupted and interrupted[0]["evidence"]["holder"] == "alice@ctl (AWX job 7) run 1f2e"
    assert interrupted[0]["evidence"]["renewed"] == "2026-01-01T10:05:00Z"
    assert any("gpu-worker-007 gpu-driver pod-deletion-required" in line for line in result["summary"])
    assert result["api_requests"] <= 30


def test_evict_runtimeclass_consumer_four_passes(stuck_twin, tmp_path):
    """remediate with a pod selector: check mode says what it would evict, the real run evicts it (Event and ledger
    entry), and the next runs find nothing more to do. Every pass runs as the remediation's own account
    (gpufleet-doctor-remediate, bound to exactly the shipped roles of rbac/diagnose.yaml): no request is refused."""
    twin = stuck_twin
    apply_shipped_roles(twin)
    account = account_env(twin, token_of(twin, "gpufleet-doctor-remediate"))
    args = {
        "doctor_remediate": True,
        "doctor_remediate_pod_selector": "team=a",
        "doctor_max_actions": 1,
        "doctor_remediate_actions": ["evict_pods"],
    }

    def remediate(**kwargs: Any) -> tuple[PlaybookRun, dict[str, Any]]:
        found = diagnose(twin, tmp_path, environment=account, **args, **kwargs)
        assert refused(twin) == {}, (refused(twin), found[0].output[-3000:])
        return found

    holder = pod_on(twin, "gpu-worker-003", "rc-holder")
    assert holder is not None

    twin.admin("POST", "report/reset")
    run, result = remediate(check=True)
    assert result["changed"] is True, run.output
    assert [r["action"] for r in result["remediations"]] == ["evict_pods"]
    assert result["remediations"][0]["result"].startswith("would evict doctor-test/rc-holder-")
    assert pod_on(twin, "gpu-worker-003", "rc-holder")["metadata"]["uid"] == holder["metadata"]["uid"]
    # The eviction goes as a dry run (deleteOptions.dryRun in its body, which the recorder counts as a create).
    assert set(write_requests(twin)) <= {"create pods/eviction"}

    run, result = remediate()
    assert result["changed"] is True, run.output
    assert result["remediations"][0]["result"].startswith("evicted doctor-test/rc-holder-")
    wait_for(lambda: pod_on(twin, "gpu-worker-003", "rc-holder") is None, what="the holder to leave", timeout=60)
    events = get_json(twin, "events", "-n", "default", "--field-selector", "reason=GPUFleetDoctor")["items"]
    assert [e["involvedObject"]["name"] for e in events] == ["gpu-worker-003"]
    ledger = get_json(twin, "configmap", "-n", "nvidia-gpu-operator", "gpufleet-upgrade-ledger")["data"]["ledger.jsonl"]
    entry = json.loads(ledger.splitlines()[-1])
    assert entry["stage"] == "doctor" and entry["remediations"][0]["node"] == "gpu-worker-003"

    for check in (True, False):
        run, result = remediate(check=check)
        assert result["changed"] is False, run.output
        assert result["remediations"] == []
    # The holder is gone: the driver container's next restart unloads the old module, and the node goes on.
    wait_for(
        lambda: states(twin).get("gpu-worker-003") not in ("pod-restart-required", "upgrade-failed"),
        what="gpu-worker-003 past its driver restart",
        timeout=120,
    )
    assert restarts(driver_pod(twin, "gpu-worker-003")) >= 1, "the same pod, restarted, not a new one"


def test_bad_selector_is_refused_before_any_read(stuck_twin, tmp_path):
    twin = stuck_twin
    twin.admin("POST", "report/reset")
    run, _result = diagnose(twin, tmp_path, doctor_remediate=True, doctor_remediate_pod_selector="team in (a")
    assert run.returncode != 0
    assert "remediate_pod_selector" in run.output
    assert twin.report()["requests"]["total"] == 0  # refused before the first request
    assert write_requests(twin) == {}


def test_the_read_only_doctor_account_can_diagnose(stuck_twin, tmp_path):
    """The shipped read-only roles (gpufleet-audit-doctor*, bound to the doctor's own account gpufleet-doctor by
    playbooks/rbac.yml, and to nothing else of it) cover every read of the diagnosis: the same causes as the
    administrator's, no 403."""
    twin = stuck_twin
    apply_shipped_roles(twin)
    token = token_of(twin, "gpufleet-doctor")
    out = tmp_path / "audit-account.json"
    run = run_as(twin, token, PLAYBOOK, extra_vars={"doctor_result_file": str(out)})
    assert "forbidden" not in run.output.lower(), run.output[-3000:]
    result = json.loads(out.read_text())
    _admin_run, admin = diagnose(twin, tmp_path)
    assert {n: f["cause"] for n, f in by_node(result).items()} == {n: f["cause"] for n, f in by_node(admin).items()}
    assert [c["cause"] for c in result["cluster"]] == [c["cause"] for c in admin["cluster"]]
    assert refused(twin) == {}

    # The read-only doctor's token cannot remediate: the permission preflight refuses before the first request of
    # the remediation, naming each write and the remediation's ClusterRole; nothing is written.
    twin.admin("POST", "report/reset")
    refusal = run_as(twin, token, PLAYBOOK, extra_vars={"doctor_remediate": True})
    assert refusal.returncode != 0
    assert 'patch nodes in API group "" at the cluster scope (needed by doctor_remediate; granted by ClusterRole ' in (
        refusal.output
    ), refusal.output[-3000:]
    assert "gpufleet-upgrade-doctor in rbac/diagnose.yaml through a ClusterRoleBinding)" in refusal.output
    assert write_requests(twin) == {}
    assert refused(twin) == {}


def test_one_notready_node_stops_the_controller(stuck_twin, tmp_path):
    """Runs last: the NotReady node freezes the controller (the DaemonSet blocker), which the doctor names."""
    twin = stuck_twin
    twin.admin("POST", "faults", {"type": "node_not_ready", "node": "gpu-worker-002"})
    wait_for(
        lambda: (
            get_json(twin, "daemonset", "-n", "nvidia-gpu-operator", "-l", "app.kubernetes.io/component=nvidia-driver")[
                "items"
            ][0]["status"].get("numberMisscheduled", 0)
            == 1
        ),
        what="the driver DaemonSet to count the NotReady node out",
        timeout=120,
    )
    run, result = diagnose(twin, tmp_path)
    assert run.returncode != 0
    found = by_node(result)
    assert found["gpu-worker-002"]["cause"] == "node_not_ready"
    assert found["gpu-worker-004"]["cause"] == "driver_daemonset_unscheduled"
    assert found["gpu-worker-007"]["cause"] == "pdb_blocks_eviction"
    blocker = next(item for item in result["cluster"] if item["cause"] == "driver_daemonset_unscheduled")
    assert blocker["evidence"]["not_ready_nodes"] == ["gpu-worker-002"]
    assert blocker["evidence"]["numberMisscheduled"] == 1


def test_auto_upgrade_off_and_a_node_outside_the_driver_selection(stuck_twin, tmp_path):
    """Runs last: with autoUpgrade off the controller forgets every state label, so the nodes whose driver pod runs
    the older template are named from their pods; a GPU node taken out of the driver DaemonSets is named too."""
    twin = stuck_twin
    kubectl(twin, "label", "node", "gpu-worker-005", "nvidia.com/gpu.deploy.driver=false", "--overwrite")
    patch = {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": False}}}}
    kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p", json.dumps(patch))
    wait_for(
        lambda: not any(states(twin).values()) and driver_pod(twin, "gpu-worker-005") is None,
        what="the state labels to go and the driver pod to leave gpu-worker-005",
        timeout=120,
    )
    run, result = diagnose(twin, tmp_path)
    assert run.returncode != 0
    found = by_node(result)
    assert found["gpu-worker-005"]["cause"] == "outside_selection"
    assert found["gpu-worker-005"]["evidence"]["deploy_driver_label"] == "false"
    assert found["gpu-worker-004"]["cause"] == "auto_upgrade_disabled"
    assert found["gpu-worker-004"]["evidence"]["driver_pod"].startswith("nvidia-gpu-operator/nvidia-driver-daemonset-")
