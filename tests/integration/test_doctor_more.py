"""playbooks/diagnose.yml on a second stuck twin: the causes test_doctor.py's twin does not produce, and the
remediations restart_validator, unpause_pool and clear_hold run end to end (check, real, check, real).

The twin (7 GPU workers, OpenShift profile) upgrades its driver (no parallel limit, maxUnavailable 100%) while

- gpu-worker-001's validator fails (fault ``validator_fails``): the node waits in validation-required;
- gpu-worker-002 runs a pod that mounts ``/dev/nvidia0`` by hostPath and requests no GPU;
- gpu-worker-003 runs a pod whose Dynamic Resource Allocation claim is allocated a ``gpu.nvidia.com`` device;
- gpu-worker-004 carries this collection's hold (skip label and hold annotation) left by a run whose stage Lease
  expired;
- gpu-worker-005 sits in MachineConfigPool gpu-held, paused by this collection 30 days ago (past the warning
  about the kubelet client CA rotation);
- gpu-worker-006 sits in MachineConfigPool gpu-other, paused by someone else;
- gpu-worker-007 moves into MachineConfigPool gpu-bad and its daemon fails (fault ``machine_config_fails``).

A failing validator holds a node for 600 s before upstream marks it upgrade-failed (and heals it again), so the
test slows the twin's clock to real time (``POST /admin/clock/scale``) while it looks, and speeds it up again to
see the upgrade finish.
"""

from __future__ import annotations

import datetime
import json
import pathlib
from typing import Any

import pytest
import yaml

from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import kubectl
from .test_clusterpolicy_upgrade import driver_versions, get_json, settled_policy, states, wait_for, write_requests
from .test_doctor import NS, _pinned, apply, diagnose, pod_on

pytestmark = pytest.mark.slow

NEW = "570.124.06"
HOLD = "gpufleet.io/gpu-driver-upgrade-hold"
SKIP = "nvidia.com/gpu-driver-upgrade.skip"
CURRENT_CONFIG = "machineconfiguration.openshift.io/currentConfig"
VALIDATOR_LINE = "Unable to determine the device handle for GPU0"


def _pool(name: str, *, paused: bool, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfigPool",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"paused": paused, "nodeSelector": {"matchLabels": {"doctor-pool": name}}},
    }


def _twin_now(twin: TwinProcess) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(twin.admin("GET", "clock")["epoch_seconds"], datetime.UTC)


def _stamp(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _pool_obj(twin: TwinProcess, name: str) -> dict[str, Any]:
    return get_json(twin, "machineconfigpool", name)


def _node(twin: TwinProcess, name: str) -> dict[str, Any]:
    return get_json(twin, "node", name)


def _validator_restarts(twin: TwinProcess, node: str) -> int:
    pods = get_json(
        twin, "pods", "-A", "-l", "app=nvidia-operator-validator", "--field-selector", f"spec.nodeName={node}"
    )["items"]
    return max(
        (c.get("restartCount", 0) for p in pods for c in p.get("status", {}).get("containerStatuses") or []),
        default=0,
    )


def _set_up_holders(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    kubectl(twin, "create", "namespace", NS)
    device_mount = {
        "volumes": [{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}],
        "container": {"volumeMounts": [{"name": "dev", "mountPath": "/dev/nvidia0"}]},
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu-claim", "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }
    apply(
        twin,
        tmp_path,
        [
            claim,
            _pinned("Deployment", "dev-mount", "gpu-worker-002", labels={"app": "dev-mount"}, extra=device_mount),
            _pinned(
                "Deployment",
                "dra-user",
                "gpu-worker-003",
                labels={"app": "dra-user"},
                extra={"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]},
            ),
        ],
    )
    # The twin has no DRA allocator: the test writes the allocation the scheduler would (NVIDIA's DRA driver).
    allocation = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-worker-003", "device": "gpu-0"}]
            }
        }
    }
    kubectl(
        twin,
        "patch",
        "resourceclaim",
        "-n",
        NS,
        "gpu-claim",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        json.dumps({"status": allocation}),
    )
    wait_for(
        lambda: bool(pod_on(twin, "gpu-worker-002", "dev-mount") and pod_on(twin, "gpu-worker-003", "dra-user")),
        what="the device-mount and DRA pods to run",
        timeout=120,
    )


def _set_up_holds_and_pools(twin: TwinProcess, tmp_path: pathlib.Path) -> None:
    now = _twin_now(twin)
    kubectl(twin, "label", "node", "gpu-worker-004", f"{SKIP}=true")
    kubectl(twin, "annotate", "node", "gpu-worker-004", f"{HOLD}=canary")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "gpufleet-upgrade", "namespace": "nvidia-gpu-operator"},
        "spec": {
            "holderIdentity": "bob@ctl (AWX job 12) run 9c1d",
            "leaseDurationSeconds": 300,
            "acquireTime": _stamp(now - datetime.timedelta(hours=3)),
            "renewTime": _stamp(now - datetime.timedelta(hours=2)),
        },
    }
    paused_at = _stamp(now - datetime.timedelta(days=30))
    apply(
        twin,
        tmp_path,
        [
            lease,
            _pool(
                "gpu-held",
                paused=True,
                annotations={"gpufleet.io/paused-at": paused_at, "gpufleet.io/paused-reason": "canary bake"},
            ),
            _pool("gpu-other", paused=True),
            _pool("gpu-bad", paused=False),
        ],
    )
    twin.admin(
        "POST",
        "faults",
        {"type": "machine_config_fails", "node": "gpu-worker-007", "reason": "unexpected on-disk state validating"},
    )
    for node, pool in (("gpu-worker-005", "gpu-held"), ("gpu-worker-006", "gpu-other"), ("gpu-worker-007", "gpu-bad")):
        kubectl(twin, "label", "node", node, f"doctor-pool={pool}")


@pytest.fixture(scope="module")
def more_stuck_twin(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("doctor-more")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump({"nodes": 7, "profile": "openshift", "workloads": False}))
    twin = start_twin(nodes=7, profile="openshift", time_scale=600, workdir=tmp_path / "twin", scenario=scenario)
    try:
        settled_policy(twin, timeout=120)
        _set_up_holders(twin, tmp_path)
        _set_up_holds_and_pools(twin, tmp_path)
        twin.admin("POST", "faults", {"type": "validator_fails", "node": "gpu-worker-001"})
        patch = {
            "spec": {
                "driver": {
                    "version": NEW,
                    "upgradePolicy": {"maxParallelUpgrades": 0, "maxUnavailable": "100%", "drain": {"enable": False}},
                }
            }
        }
        kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p", json.dumps(patch))
        wait_for(
            lambda: (
                states(twin).get("gpu-worker-001") in ("pod-restart-required", "validation-required")
                and _node(twin, "gpu-worker-007")["metadata"]["annotations"].get(
                    "machineconfiguration.openshift.io/state"
                )
                == "Degraded"
            ),
            what="gpu-worker-001 to restart its driver and gpu-worker-007 to degrade",
            timeout=300,
        )
        # Slow down before gpu-worker-001 reaches validation-required: the validator's 600 s must outlast the looks.
        twin.set_time_scale(30)
        wait_for(
            lambda: (
                states(twin).get("gpu-worker-001") == "validation-required"
                and _validator_restarts(twin, "gpu-worker-001") >= 1
            ),
            what="gpu-worker-001's validator to fail",
            timeout=120,
        )
        twin.set_time_scale(1)
        wait_for(
            lambda: all(
                states(twin).get(node) in ("pod-restart-required", "upgrade-failed")
                for node in ("gpu-worker-002", "gpu-worker-003")
            ),
            what="the held nodes to wait for their driver",
            timeout=60,
        )
        yield twin
    finally:
        assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def findings(result: dict[str, Any], component: str) -> dict[str, dict[str, Any]]:
    return {item["node"]: item for item in result["findings"] if item["component"] == component}


def test_diagnose_then_restart_unpause_and_clear_four_passes(more_stuck_twin, tmp_path):
    twin = more_stuck_twin
    twin.admin("POST", "report/reset")
    run, result = diagnose(twin, tmp_path)
    assert run.returncode != 0, run.output
    assert write_requests(twin) == {}, "the diagnosis writes nothing"
    driver = findings(result, "gpu-driver")
    pools = findings(result, "machine-config")
    assert {n: f["cause"] for n, f in driver.items() if n <= "gpu-worker-004"} == {
        "gpu-worker-001": "validator_failing",
        "gpu-worker-002": "gpu_consumers_without_request",
        "gpu-worker-003": "gpu_consumers_without_request",
        "gpu-worker-004": "held_by_canary",
    }, run.output
    # Validator: the failing log line.
    assert VALIDATOR_LINE in driver["gpu-worker-001"]["evidence"]["log_line"]
    assert driver["gpu-worker-001"]["remediation"]["action"] == "restart_validator"
    # GPU consumers without a request: the device mount and the DRA claim, each named.
    assert [c["how"] for c in driver["gpu-worker-002"]["evidence"]["pods"]] == ["hostPath /dev/nvidia0"]
    assert driver["gpu-worker-002"]["evidence"]["pods"][0]["pod"].startswith(f"{NS}/dev-mount-")
    assert [c["how"] for c in driver["gpu-worker-003"]["evidence"]["pods"]] == [
        "Dynamic Resource Allocation claims gpu"
    ]
    assert "driver is in use" in driver["gpu-worker-003"]["evidence"]["last_message"]
    # This collection's hold, left by a run whose Lease expired: clear_hold may release it.
    assert driver["gpu-worker-004"]["evidence"]["stale_since_lease_of"] == "bob@ctl (AWX job 12) run 9c1d"
    assert driver["gpu-worker-004"]["remediation"]["action"] == "clear_hold"
    interrupted = next(c for c in result["cluster"] if c["cause"] == "rollout_interrupted")
    assert interrupted["evidence"]["holder"] == "bob@ctl (AWX job 12) run 9c1d"
    # Pools: paused by this collection (since when, the CA rotation warning), by someone else, degraded.
    assert {n: f["cause"] for n, f in pools.items()} == {
        "gpu-worker-005": "mcp_paused",
        "gpu-worker-006": "mcp_paused",
        "gpu-worker-007": "mcp_degraded",
    }
    held = pools["gpu-worker-005"]
    assert held["evidence"]["paused_by"] == "gpufleet.upgrade"
    assert held["evidence"]["reason"] == "canary bake"
    assert held["seconds_in_state"] >= 30 * 86400 - 600
    assert any("kubelet client CA rotation" in w for w in held["warnings"])
    assert any("kubelet client CA rotation" in w for w in result["warnings"])
    assert held["remediation"]["action"] == "unpause_pool"
    assert pools["gpu-worker-006"]["evidence"]["pool"] == "gpu-other"
    assert pools["gpu-worker-006"]["remediation"] is None, "a pool someone else paused is never unpaused"
    assert "unexpected on-disk state" in pools["gpu-worker-007"]["evidence"]["reason"]
    assert pools["gpu-worker-007"]["detail"].startswith("pool gpu-bad: ")

    # A person fixes the validator's cause; the crash-looping validator pod stays as it was started.
    twin.admin("DELETE", "faults")
    args = {
        "doctor_remediate": True,
        "doctor_max_actions": 5,
        "doctor_remediate_actions": ["restart_validator", "unpause_pool", "clear_hold"],
    }
    expected = {
        ("restart_validator", "gpu-worker-001"),
        ("clear_hold", "gpu-worker-004"),
        ("unpause_pool", "gpu-worker-005"),
    }
    twin.admin("POST", "report/reset")
    run, result = diagnose(twin, tmp_path, check=True, **args)
    assert result["changed"] is True, run.output
    assert {(r["action"], r["node"]) for r in result["remediations"]} == expected
    assert all(r["result"].startswith("would have ") for r in result["remediations"]), result["remediations"]
    assert write_requests(twin) == {}, "check mode writes nothing"
    assert _pool_obj(twin, "gpu-held")["spec"]["paused"] is True

    run, result = diagnose(twin, tmp_path, **args)
    assert result["changed"] is True, run.output
    done = {r["node"]: r["result"] for r in result["remediations"] if r["taken"]}
    assert set(done) == {"gpu-worker-001", "gpu-worker-004", "gpu-worker-005"}, result["remediations"]
    assert done["gpu-worker-001"].startswith("deleted validator pod nvidia-gpu-operator/nvidia-operator-validator-")
    assert done["gpu-worker-004"] == (
        f"removed the hold {SKIP} ({HOLD}) from gpu-worker-004, left by bob@ctl (AWX job 12) run 9c1d"
    )
    assert done["gpu-worker-005"] == "unpaused MachineConfigPool gpu-held"
    labels = _node(twin, "gpu-worker-004")["metadata"]
    assert SKIP not in labels["labels"] and HOLD not in (labels.get("annotations") or {})
    assert _pool_obj(twin, "gpu-held")["spec"]["paused"] is False
    assert _pool_obj(twin, "gpu-other")["spec"]["paused"] is True
    events = get_json(twin, "events", "-n", "default", "--field-selector", "reason=GPUFleetDoctor")["items"]
    assert sorted(e["involvedObject"]["name"] for e in events) == sorted(done)
    ledger = get_json(twin, "configmap", "-n", "nvidia-gpu-operator", "gpufleet-upgrade-ledger")["data"]["ledger.jsonl"]
    entry = json.loads(ledger.splitlines()[-1])
    assert entry["stage"] == "doctor"
    assert {(r["action"], r["node"]) for r in entry["remediations"]} == expected

    for check in (True, False):
        run, result = diagnose(twin, tmp_path, check=check, **args)
        assert result["changed"] is False, (check, result["remediations"], run.output[-3000:])

    # Back to speed: the restarted validator passes, the released node upgrades, the unpaused pool's node updates.
    twin.set_time_scale(600)
    target = _pool_obj(twin, "gpu-held")["spec"]["configuration"]["name"]
    wait_for(
        lambda: (
            states(twin).get("gpu-worker-001") == "upgrade-done"
            and states(twin).get("gpu-worker-004") == "upgrade-done"
            and driver_versions(twin).get("gpu-worker-001") == NEW
            and driver_versions(twin).get("gpu-worker-004") == NEW
            and _node(twin, "gpu-worker-005")["metadata"]["annotations"].get(CURRENT_CONFIG) == target
        ),
        what="gpu-worker-001 and -004 to finish the upgrade and gpu-worker-005 to take its pool's config",
        timeout=300,
    )
    run, result = diagnose(twin, tmp_path)
    left = {(f["node"], f["cause"]) for f in result["findings"]}
    assert not {node for node, _cause in left} & {"gpu-worker-001", "gpu-worker-004", "gpu-worker-005"}, left
    assert ("gpu-worker-006", "mcp_paused") in left and ("gpu-worker-007", "mcp_degraded") in left
