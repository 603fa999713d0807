"""Preflight findings of a driver rollout (pure)."""

from __future__ import annotations

from typing import Any

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_preflight import (
    ERROR,
    INFO,
    WARNING,
    PreflightInput,
    run_preflight,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import pod_gpus

STATE = "nvidia.com/gpu-driver-upgrade-state"
OLD, NEW = "560.35.03", "570.124.06"


def node(name: str, *, state: str = "upgrade-done", ready: str = "True", cordoned: bool = False, **more: Any) -> dict:
    labels = {"nvidia.com/gpu.present": "true", STATE: state, **more.get("labels", {})}
    return {
        "metadata": {"name": name, "labels": labels, "annotations": more.get("annotations", {})},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": ready}]},
    }


def driver_pod(node_name: str, *, version: str = OLD, ds_uid: str = "ds-1") -> dict:
    return {
        "metadata": {
            "name": f"driver-{node_name}",
            "namespace": "nvidia-gpu-operator",
            "ownerReferences": [{"kind": "DaemonSet", "uid": ds_uid, "name": "nvidia-driver-daemonset"}],
        },
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "nvidia-driver-ctr", "image": f"nvcr.io/nvidia/driver:{version}-rhcos4.16"}],
        },
        "status": {"phase": "Running", "containerStatuses": [{"name": "nvidia-driver-ctr", "ready": True}]},
    }


def daemonset(desired: int, uid: str = "ds-1") -> dict:
    return {
        "metadata": {"name": "nvidia-driver-daemonset", "namespace": "nvidia-gpu-operator", "uid": uid},
        "status": {"desiredNumberScheduled": desired},
    }


def gpu_pod(name: str, node_name: str, gpus: int, *, app: str = "train", namespace: str = "ml") -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


def pdb(app: str, *, allowed: int, namespace: str = "ml") -> dict:
    return {
        "metadata": {"name": f"{app}-pdb", "namespace": namespace},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": 3, "desiredHealthy": 3},
    }


def cluster_policy(state: str = "ready", generation: int = 2, observed: int | None = None) -> dict:
    condition: dict[str, Any] = {"type": "Ready", "status": "True" if state == "ready" else "False"}
    if observed is not None:
        condition["observedGeneration"] = observed
    return {
        "metadata": {"name": "gpu-cluster-policy", "generation": generation},
        "status": {"state": state, "conditions": [condition]},
    }


def preflight(
    nodes: list[dict],
    *,
    pods: tuple[dict, ...] = (),
    pdbs: tuple[dict, ...] = (),
    driver_pods: list[dict] | None = None,
    daemonsets: list[dict] | None = None,
    policy: dict | None = None,
    upgrade_policy: dict | None = None,
    targets: tuple[str, ...] | None = None,
    **kwargs: Any,
):
    names = [n["metadata"]["name"] for n in nodes]
    driver_pods = [driver_pod(name) for name in names] if driver_pods is None else driver_pods
    return run_preflight(
        PreflightInput(
            policy=policy or cluster_policy(),
            upgrade_policy=upgrade_policy or {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"},
            gpu_nodes=tuple(nodes),
            driver_pods=tuple(driver_pods),
            driver_daemonsets=tuple(daemonsets if daemonsets is not None else [daemonset(len(driver_pods))]),
            pods=pods,
            pdbs=pdbs,
            machine_config_pools=kwargs.pop("pools", None),
            targets=tuple(names) if targets is None else targets,
            managed=frozenset(str(p["spec"]["nodeName"]) for p in driver_pods),
            target_version=NEW,
            **kwargs,
        )
    )


def checks(result, severity: str) -> list[str]:
    return [f.check for f in result.findings if f.severity == severity]


def fleet(count: int = 8, **overrides: dict) -> list[dict]:
    return [node(f"gpu-worker-{i:03d}", **overrides.get(f"gpu-worker-{i:03d}", {})) for i in range(1, count + 1)]


def test_a_healthy_cluster_passes_with_context_only():
    result = preflight(fleet())
    assert result.errors == [] and result.warnings == []
    assert checks(result, INFO) == ["capacity"]
    assert result.summary["max_unavailable"] == 2 and result.summary["nodes_at_once"] == 1
    assert result.as_dict()["ok"] is True


def test_a_driver_daemonset_short_of_pods_stalls_the_controller():
    nodes = fleet(3)
    result = preflight(
        nodes, driver_pods=[driver_pod(n["metadata"]["name"]) for n in nodes[:2]], daemonsets=[daemonset(3)]
    )
    messages = [f.message for f in result.errors]
    assert any("should run 3 pod(s) and owns 2" in m for m in messages)
    assert any(f.nodes == ("gpu-worker-003",) for f in result.errors)


def test_a_node_with_a_preinstalled_driver_is_not_expected_to_run_a_driver_pod():
    nodes = [*fleet(2), node("gpu-worker-003", labels={"nvidia.com/gpu.deploy.driver": "pre-installed"})]
    result = preflight(
        nodes, driver_pods=[driver_pod("gpu-worker-001"), driver_pod("gpu-worker-002")], daemonsets=[daemonset(2)]
    )
    assert "driver_daemonset" not in checks(result, ERROR)


def test_cordoned_and_not_ready_nodes_count_against_the_budget():
    nodes = fleet(8, **{"gpu-worker-002": {"cordoned": True}, "gpu-worker-003": {"ready": "False"}})
    result = preflight(nodes, upgrade_policy={"autoUpgrade": True, "maxParallelUpgrades": 0, "maxUnavailable": 2})
    unavailable = next(f for f in result.findings if f.check == "nodes_unavailable")
    assert unavailable.severity == WARNING and unavailable.nodes == ("gpu-worker-002", "gpu-worker-003")
    budget = next(f for f in result.findings if f.check == "budget")
    assert budget.severity == ERROR and "would start no node" in budget.message
    assert result.summary["nodes_at_once"] == 0


def test_one_cordoned_node_leaves_room_under_a_larger_budget():
    nodes = fleet(8, **{"gpu-worker-002": {"cordoned": True}})
    result = preflight(nodes, upgrade_policy={"autoUpgrade": True, "maxParallelUpgrades": 4, "maxUnavailable": 2})
    assert "budget" not in checks(result, ERROR)
    assert result.summary["nodes_at_once"] == 1  # 2 allowed, 1 already away


def test_a_rollout_under_way_is_not_a_budget_error():
    nodes = fleet(4, **{"gpu-worker-001": {"state": "pod-restart-required", "cordoned": True}})
    result = preflight(nodes, upgrade_policy={"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": 1})
    assert "budget" not in checks(result, ERROR)


def test_displaced_gpu_pods_that_do_not_fit_elsewhere_are_a_warning():
    nodes = fleet(3)
    pods = tuple(gpu_pod(f"p{i}", f"gpu-worker-00{i}", 8) for i in (1, 2, 3))
    result = preflight(nodes, pods=pods)
    capacity = next(f for f in result.findings if f.check == "capacity")
    assert capacity.severity == WARNING
    assert capacity.details == {"nodes_at_once": 1, "gpus_displaced": 8, "gpus_free_elsewhere": 0}


def test_a_pdb_that_allows_no_disruption_is_named():
    nodes = fleet(3)
    pods = (gpu_pod("t1", "gpu-worker-001", 4), gpu_pod("t2", "gpu-worker-002", 4))
    result = preflight(nodes, pods=pods, pdbs=(pdb("train", allowed=0),))
    finding = next(f for f in result.findings if f.check == "pdb")
    assert finding.severity == WARNING
    assert "ml/train-pdb" in finding.message and "upgrade-failed" in finding.message
    assert finding.nodes == ("gpu-worker-001", "gpu-worker-002")
    relaxed = preflight(nodes, pods=pods, pdbs=(pdb("train", allowed=1),))
    assert "pdb" not in checks(relaxed, WARNING)


def test_nodes_already_on_the_target_are_not_pending():
    nodes = fleet(2)
    result = preflight(nodes, driver_pods=[driver_pod("gpu-worker-001", version=NEW), driver_pod("gpu-worker-002")])
    assert result.summary["pending"] == 1


def test_auto_upgrade_off_is_an_error_when_waiting_and_a_warning_otherwise():
    off = {"autoUpgrade": False, "maxParallelUpgrades": 1, "maxUnavailable": "25%"}
    assert "auto_upgrade" in checks(preflight(fleet(2), upgrade_policy=off), ERROR)
    assert "auto_upgrade" in checks(preflight(fleet(2), upgrade_policy=off, wait=False), WARNING)


def test_without_the_controller_auto_upgrade_off_is_context_and_the_engine_judges_the_budget():
    off = {"autoUpgrade": False, "maxParallelUpgrades": 1, "maxUnavailable": 1}
    nodes = fleet(4, **{"gpu-worker-002": {"cordoned": True}})
    result = preflight(nodes, upgrade_policy=off, upgrade_controller=False)
    assert "auto_upgrade" in checks(result, INFO) and "auto_upgrade" not in checks(result, ERROR)
    # A node the collection's own rollout cordoned (an interrupted run) must not stop the resume.
    assert "budget" in checks(result, WARNING) and not result.errors


def test_failed_nodes_stop_the_rollout_unless_retried():
    nodes = fleet(3, **{"gpu-worker-002": {"state": "upgrade-failed"}})
    assert "failed_nodes" in checks(preflight(nodes), ERROR)
    assert "failed_nodes" not in checks(preflight(nodes, retry_failed_nodes=True), ERROR)


def test_skip_label_mode_warns_about_pending_machine_config_updates_and_rebooting_nodes():
    pools = (
        {
            "metadata": {"name": "worker"},
            "spec": {"paused": True, "configuration": {"name": "rendered-worker-new"}},
            "status": {"configuration": {"name": "rendered-worker-old"}, "machineCount": 3, "updatedMachineCount": 0},
        },
        {
            "metadata": {"name": "master"},
            "spec": {"configuration": {"name": "rendered-master-1"}},
            "status": {"configuration": {"name": "rendered-master-1"}, "machineCount": 3, "updatedMachineCount": 3},
        },
    )
    nodes = fleet(3, **{"gpu-worker-003": {"annotations": {"machineconfiguration.openshift.io/state": "Working"}}})
    result = preflight(nodes, targets=("gpu-worker-001",), scope="canary", canary_mode="skip_label", pools=pools)
    warnings = {f.check: f for f in result.findings if f.severity == WARNING}
    assert "skip_label_not_a_pin" in warnings
    assert "worker is paused with pending changes" in warnings["machine_config_pool"].message
    assert warnings["held_nodes_not_ready"].nodes == ("gpu-worker-003",)
    assert "master" not in warnings["machine_config_pool"].message
    nvidiadriver = preflight(
        nodes, targets=("gpu-worker-001",), scope="canary", canary_mode="nvidiadriver", pools=pools
    )
    assert "machine_config_pool" not in checks(nvidiadriver, WARNING)


def test_an_operator_that_has_not_reconciled_is_reported():
    result = preflight(fleet(2), policy=cluster_policy(state="notReady", generation=5, observed=4))
    messages = [f.message for f in result.findings if f.check == "operator_reconciled"]
    assert any("notReady" in m for m in messages)
    assert any("generation 5" in m for m in messages)


def test_held_by_others_is_a_warning():
    result = preflight(fleet(3), held_by_others=("gpu-worker-003",))
    assert "held_by_others" in checks(result, WARNING)


def test_pod_gpus_takes_the_larger_of_request_and_limit():
    pod = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "4"}}},
                {"resources": {"requests": {"nvidia.com/gpu": "1"}}},
                {"resources": {}},
            ]
        }
    }
    assert pod_gpus(pod) == 5
