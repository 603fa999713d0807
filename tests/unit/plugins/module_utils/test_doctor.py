"""The upgrade doctor's diagnosis and remediation plan (pure)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._doctor import (
    ClusterView,
    DoctorOptions,
    Remediation,
    diagnose,
    failing_log_line,
    gpu_consumers_without_request,
    logs_wanted,
    needs_all_driver_pods,
    nodes_needing_pods,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._doctor_remedy import plan_remediations
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError

NOW = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.UTC)
STATE = "nvidia.com/gpu-driver-upgrade-state"


def node(name: str, state: str = "upgrade-done", *, ready: str = "True", cordoned: bool = False, **labels: str) -> dict:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.deploy.driver": "true",
                STATE: state,
                **labels,
            },
            "annotations": {},
        },
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": "2026-11-25T11:00:00Z"}]},
    }
    return obj


def policy(**upgrade: Any) -> dict:
    base = {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"}
    return {"spec": {"driver": {"upgradePolicy": {**base, **upgrade}}}, "status": {"namespace": "nvidia-gpu-operator"}}


def pod(name: str, node_name: str, *, namespace: str = "work", gpus: int = 0, labels=None, owner=None, **spec) -> dict:
    container: dict[str, Any] = {"name": "main"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {
        "metadata": meta,
        "spec": {"nodeName": node_name, "containers": [container], **spec},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def driver(node_name: str, *, restarts: int = 0, message: str = "") -> dict:
    obj = pod(
        f"nvidia-driver-{node_name}",
        node_name,
        namespace="nvidia-gpu-operator",
        labels={"app.kubernetes.io/component": "nvidia-driver"},
        owner=("DaemonSet", "nvidia-driver-daemonset"),
    )
    if restarts:
        obj["status"]["containerStatuses"] = [
            {
                "name": "nvidia-driver-ctr",
                "ready": False,
                "restartCount": restarts,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"message": message}},
            }
        ]
    return obj


def view(nodes: list, *, cluster_policy=None, pods=None, **extra: Any) -> ClusterView:
    by_node: dict[str, list] = {}
    for item in pods or []:
        by_node.setdefault(item["spec"]["nodeName"], []).append(item)
    return ClusterView(now=NOW, nodes=nodes, cluster_policy=cluster_policy or policy(), pods_by_node=by_node, **extra)


def causes(result: dict) -> dict[str, str]:
    return {item["node"]: item["cause"] for item in result["findings"]}


def test_nodes_at_rest_are_not_stuck():
    result = diagnose(view([node("a"), node("b", "")]))
    assert result["findings"] == [] and result["cluster"] == []


def test_budget_used_by_nodes_someone_cordoned_names_them():
    nodes = [node("a", "upgrade-required"), node("b", cordoned=True), node("c", ready="False"), node("d")]
    result = diagnose(view(nodes))
    assert causes(result) == {"a": "budget_used_by_unavailable"}
    finding = next(item for item in result["findings"] if item["node"] == "a")
    assert finding["evidence"]["unavailable_nodes"] == ["b", "c"]
    assert finding["evidence"]["max_unavailable"] == 1


def test_slot_held_by_upgrade_failed_nodes():
    nodes = [node("a", "upgrade-failed", cordoned=True), *(node(n, "upgrade-required") for n in "bcdefgh")]
    result = diagnose(view(nodes, cluster_policy=policy(maxUnavailable="50%"), pods=[driver("a")]))
    assert causes(result)["b"] == "slot_held_by_failed"
    assert next(i for i in result["findings"] if i["node"] == "b")["evidence"]["upgrade_failed_nodes"] == ["a"]


def test_skip_label_and_canary_hold():
    skipped = node("a", "upgrade-required", **{"nvidia.com/gpu-driver-upgrade.skip": "true"})
    held = node("b", "upgrade-required", **{"nvidia.com/gpu-driver-upgrade.skip": "true"})
    held["metadata"]["annotations"]["gpufleet.io/gpu-driver-upgrade-hold"] = "canary"
    assert causes(diagnose(view([skipped, held]))) == {"a": "skip_label", "b": "held_by_canary"}


def test_auto_upgrade_off_names_out_of_date_driver_pods():
    old = driver("a")
    old["metadata"]["labels"]["pod-template-generation"] = "1"
    daemonset = {
        "metadata": {"name": "nvidia-driver-daemonset", "generation": 2},
        "status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 1, "updatedNumberScheduled": 0},
    }
    current = view([node("a", "")], cluster_policy=policy(autoUpgrade=False), driver_daemonsets=[daemonset])
    assert needs_all_driver_pods(current)
    current.driver_pods = [old]
    assert causes(diagnose(current)) == {"a": "auto_upgrade_disabled"}


def test_node_outside_every_nvidiadriver_selection():
    cluster_policy = policy()
    cluster_policy["spec"]["driver"]["useNvidiaDriverCRD"] = True
    drivers = [{"metadata": {"name": "pool-a"}, "spec": {"nodeSelector": {"pool": "a"}}}]
    result = diagnose(
        view([node("a", "", pool="a"), node("b", "", pool="b")], cluster_policy=cluster_policy, nvidia_drivers=drivers)
    )
    assert causes(result) == {"b": "outside_selection"}
    assert "pre-installed" not in str(result)


def test_pdb_blocking_eviction_names_pdb_and_disruptions_allowed():
    pdb = {
        "metadata": {"name": "train", "namespace": "work"},
        "spec": {"selector": {"matchLabels": {"app": "train"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1},
    }
    pods = [driver("a"), pod("train-1", "a", gpus=1, labels={"app": "train"}, owner=("ReplicaSet", "train-x"))]
    result = diagnose(view([node("a", "pod-deletion-required", cordoned=True)], pods=pods, pdbs=[pdb]))
    finding = result["findings"][0]
    assert finding["cause"] == "pdb_blocks_eviction"
    assert finding["evidence"]["blocked"][0] == {
        "pod": "work/train-1",
        "pdb": "work/train",
        "disruptionsAllowed": 0,
        "currentHealthy": 1,
        "desiredHealthy": 1,
    }


def test_wait_for_jobs_names_the_jobs():
    pods = [driver("a"), pod("job-1-x", "a", labels={"w": "1"}, owner=("Job", "job-1"))]
    cluster_policy = policy(waitForCompletion={"podSelector": "w=1", "timeoutSeconds": 0})
    current = view([node("a", "wait-for-jobs-required", cordoned=True)], cluster_policy=cluster_policy, pods=pods)
    current.nodes[0]["metadata"]["annotations"]["nvidia.com/gpu-driver-upgrade-wait-for-pod-completion-start-time"] = (
        str(int(NOW.timestamp()) - 7200)
    )
    finding = diagnose(current)["findings"][0]
    assert (finding["cause"], finding["evidence"]["jobs"]) == ("waiting_for_jobs", ["work/job-1"])
    assert finding["seconds_in_state"] == 7200 and finding["in_state_for"] == "2h00m"


@pytest.mark.parametrize(
    ("spec", "how"),
    [
        ({"runtimeClassName": "nvidia"}, "runtimeClassName nvidia"),
        ({"volumes": [{"name": "dev", "hostPath": {"path": "/dev/nvidia0"}}]}, "hostPath /dev/nvidia0"),
        (
            {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]},
            "Dynamic Resource Allocation claims gpu",
        ),
    ],
)
def test_gpu_consumers_without_request(spec, how):
    consumer = pod("c", "a", owner=("DaemonSet", "dcgm-exporter"), **spec)
    requester = pod("r", "a", gpus=1, **spec)
    operand = pod("o", "a", namespace="nvidia-gpu-operator", **spec)
    found = gpu_consumers_without_request([consumer, requester, operand], operator_namespaces=("nvidia-gpu-operator",))
    assert found == [{"pod": "work/c", "how": how, "owner": "DaemonSet/dcgm-exporter"}]


def test_visible_devices_env_counts_as_consumer():
    consumer = pod("c", "a")
    consumer["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert gpu_consumers_without_request([consumer], operator_namespaces=())[0]["how"] == "NVIDIA_VISIBLE_DEVICES=all"


def test_driver_in_use_offers_eviction_only_with_a_selector():
    in_use = "Could not unload NVIDIA driver kernel modules, driver is in use"
    pods = [driver("a", restarts=3, message=in_use), pod("c", "a", runtimeClassName="nvidia", labels={"team": "a"})]
    current = view([node("a", "pod-restart-required", cordoned=True)], pods=pods)
    plain = diagnose(current)
    assert plain["findings"][0]["cause"] == "gpu_consumers_without_request"
    assert plain["remediations"] == []
    offered = diagnose(current, options=DoctorOptions(remediate_pod_selector="team=a"))
    assert offered["remediations"][0].action == "evict_pods"
    assert offered["remediations"][0].target["pods"] == ["work/c"]


def test_a_daemonset_consumer_is_never_offered_for_eviction():
    """Its controller puts the pod back at once (DaemonSet pods tolerate the cordon): the doctor says so instead."""
    in_use = "Could not unload NVIDIA driver kernel modules, driver is in use"
    daemon = pod("dcgm-x", "a", runtimeClassName="nvidia", labels={"team": "a"}, owner=("DaemonSet", "dcgm"))
    plain = pod("c", "a", runtimeClassName="nvidia", labels={"team": "a"})
    current = view(
        [node("a", "pod-restart-required", cordoned=True)], pods=[driver("a", restarts=3, message=in_use), daemon]
    )
    result = diagnose(current, options=DoctorOptions(remediate_pod_selector="team=a"))
    finding = result["findings"][0]
    assert finding["cause"] == "gpu_consumers_without_request"
    assert finding["evidence"]["pods"][0]["owner"] == "DaemonSet/dcgm"
    assert result["remediations"] == []
    assert any("DaemonSet/dcgm: evicting would only bring them back" in w for w in finding["warnings"])
    # Beside a pod that can go, only that one is offered.
    current.pods_by_node["a"].append(plain)
    offered = diagnose(current, options=DoctorOptions(remediate_pod_selector="team=a"))
    assert offered["remediations"][0].target["pods"] == ["work/c"]


def test_crash_looping_driver_quotes_its_message_and_log_line():
    message = "Installing NVIDIA driver 570 with the driver toolkit failed: no kernel-devel package matches"
    current = view([node("a", "pod-restart-required", cordoned=True)], pods=[driver("a", restarts=12, message=message)])
    assert logs_wanted(current) == [("nvidia-gpu-operator", "nvidia-driver-a", "nvidia-driver-ctr")]
    current.logs[("nvidia-gpu-operator", "nvidia-driver-a")] = "Installing\n" + message + "\nUnloading modules...\n"
    finding = diagnose(current)["findings"][0]
    assert finding["cause"] == "driver_pod_crashloop"
    assert finding["evidence"]["last_message"] == message
    assert finding["evidence"]["log_line"] == message


def test_validator_failing_line_and_restart_offer():
    validator = pod(
        "nvidia-operator-validator-x", "a", namespace="nvidia-gpu-operator", labels={"app": "nvidia-operator-validator"}
    )
    validator["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    current = view([node("a", "validation-required", cordoned=True)], pods=[driver("a"), validator])
    current.logs[("nvidia-gpu-operator", "nvidia-operator-validator-x")] = (
        "ok\ncuda workload validation failed: no devices\n"
    )
    finding = diagnose(current)["findings"][0]
    assert finding["cause"] == "validator_failing"
    assert finding["evidence"]["log_line"] == "cuda workload validation failed: no devices"
    assert finding["remediation"]["action"] == "restart_validator"


def test_a_validator_not_ready_yet_without_a_failure_is_running_and_never_restarted():
    validator = pod(
        "nvidia-operator-validator-x", "a", namespace="nvidia-gpu-operator", labels={"app": "nvidia-operator-validator"}
    )
    validator["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    current = view([node("a", "validation-required", cordoned=True)], pods=[driver("a"), validator])
    current.logs[("nvidia-gpu-operator", "nvidia-operator-validator-x")] = "waiting for the driver to be ready\n"
    result = diagnose(current)
    assert (result["findings"][0]["cause"], result["findings"][0]["remediation"]) == ("validation_running", None)
    assert result["remediations"] == []
    # One restart is a failure: then it is failing, and restarting it is offered.
    validator["status"]["initContainerStatuses"] = [{"name": "driver-validation", "ready": False, "restartCount": 1}]
    assert diagnose(current)["findings"][0]["cause"] == "validator_failing"


def test_validator_missing():
    current = view([node("a", "validation-required", cordoned=True)], pods=[driver("a")])
    assert diagnose(current)["findings"][0]["cause"] == "validator_missing"


def test_upgrade_failed_with_cause_gone_offers_relabel():
    current = view([node("a", "upgrade-failed", cordoned=True)], pods=[driver("a")])
    finding = diagnose(current)["findings"][0]
    assert finding["cause"] == "upgrade_failed"
    assert finding["remediation"]["action"] == "relabel_upgrade_required"


def test_upgrade_failed_with_pdb_still_blocking_offers_nothing():
    pdb = {
        "metadata": {"name": "p", "namespace": "work"},
        "spec": {"selector": {"matchLabels": {"app": "x"}}},
        "status": {"disruptionsAllowed": 0},
    }
    pods = [driver("a"), pod("x-1", "a", gpus=1, labels={"app": "x"}, owner=("ReplicaSet", "x"))]
    result = diagnose(view([node("a", "upgrade-failed", cordoned=True)], pods=pods, pdbs=[pdb]))
    assert result["findings"][0]["cause"] == "pdb_blocks_eviction"
    assert result["remediations"] == []


def test_daemonset_with_unscheduled_pods_blocks_everything():
    # One NotReady node: it leaves desiredNumberScheduled, its pod keeps running (misscheduled).
    status = {"desiredNumberScheduled": 1, "currentNumberScheduled": 1, "numberMisscheduled": 1}
    daemonset = {"metadata": {"name": "ds"}, "status": status}
    nodes = [node("a", "upgrade-required"), node("b", "upgrade-required", ready="False")]
    result = diagnose(view(nodes, driver_daemonsets=[daemonset]))
    assert result["cluster"][0]["cause"] == "driver_daemonset_unscheduled"
    assert result["cluster"][0]["evidence"]["not_ready_nodes"] == ["b"]
    assert causes(result) == {"a": "driver_daemonset_unscheduled", "b": "node_not_ready"}
    status["numberMisscheduled"] = 0
    status["currentNumberScheduled"] = 1
    daemonset["status"] = {**status, "desiredNumberScheduled": 1}
    assert diagnose(view([node("a")], driver_daemonsets=[daemonset]))["cluster"] == []


def test_ofed_secondary_network_pods():
    ofed = {
        "spec": {
            "ofedDriver": {"upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1, "drain": {"enable": True}}}
        }
    }
    mofed = pod("mofed-1", "a", namespace="nvidia-network-operator", labels={"nvidia.com/ofed-driver": ""})
    multus = pod("m", "a", owner=("ReplicaSet", "m"))
    multus["metadata"]["annotations"] = {"k8s.v1.cni.cncf.io/networks": "ib-net"}
    multus["metadata"]["labels"] = {"nvidia.com/ofed-driver-upgrade-drain.skip": "true"}
    a = node("a", "")
    a["metadata"]["labels"]["nvidia.com/ofed-driver-upgrade-state"] = "drain-required"
    result = diagnose(view([a], cluster_policy=None, pods=[mofed, multus], nic_cluster_policy=ofed))
    assert [(i["component"], i["cause"]) for i in result["findings"]] == [
        ("ofed-driver", "ofed_secondary_network_pods")
    ]
    assert nodes_needing_pods([a]) == ["a"]


def test_paused_pool_by_this_collection_warns_about_ca_rotation():
    pool = {
        "metadata": {
            "name": "worker",
            "annotations": {"gpufleet.io/paused-at": "2026-10-01T00:00:00Z", "gpufleet.io/paused-reason": "canary"},
        },
        "spec": {
            "paused": True,
            "nodeSelector": {"matchLabels": {"role": "w"}},
            "configuration": {"name": "rendered-2"},
        },
    }
    behind = node("a", "", role="w")
    behind["metadata"]["annotations"].update(
        {
            "machineconfiguration.openshift.io/currentConfig": "rendered-1",
            "machineconfiguration.openshift.io/desiredConfig": "rendered-1",
        }
    )
    result = diagnose(view([behind], cluster_policy=None, machine_config_pools=[pool]))
    finding = result["findings"][0]
    assert (finding["cause"], finding["evidence"]["paused_by"]) == ("mcp_paused", "gpufleet.upgrade")
    assert finding["in_state_for"].startswith("55d")
    assert "kubelet client CA" in finding["warnings"][0]
    assert finding["remediation"]["action"] == "unpause_pool"


def test_pool_paused_by_someone_else_names_them_and_offers_nothing():
    pool = {
        "metadata": {
            "name": "worker",
            "managedFields": [
                {
                    "manager": "sriov-network-config-daemon",
                    "time": "2026-11-25T11:30:00Z",
                    "fieldsV1": {"f:spec": {"f:paused": {}}},
                }
            ],
        },
        "spec": {
            "paused": True,
            "nodeSelector": {"matchLabels": {"role": "w"}},
            "configuration": {"name": "rendered-2"},
        },
    }
    behind = node("a", "", role="w")
    behind["metadata"]["annotations"]["machineconfiguration.openshift.io/currentConfig"] = "rendered-1"
    finding = diagnose(view([behind], cluster_policy=None, machine_config_pools=[pool]))["findings"][0]
    assert finding["evidence"]["paused_by"] == "sriov-network-config-daemon"
    assert finding["seconds_in_state"] == 1800 and finding["remediation"] is None and finding["warnings"] == []


def test_expired_lease_is_an_interrupted_rollout():
    lease = {
        "metadata": {"name": "gpufleet-upgrade", "namespace": "ns"},
        "spec": {
            "holderIdentity": "bob run 9",
            "leaseDurationSeconds": 300,
            "renewTime": "2026-11-25T10:00:00.000000Z",
        },
    }
    result = diagnose(view([node("a")], lease=lease))
    assert result["cluster"][0]["cause"] == "rollout_interrupted"
    assert result["cluster"][0]["evidence"]["holder"] == "bob run 9"
    lease["spec"]["renewTime"] = "2026-11-25T11:59:00.000000Z"
    assert diagnose(view([node("a")], lease=lease))["cluster"] == []


def test_a_hold_of_this_collection_is_offered_to_clear_hold_only_after_its_run_stopped():
    """clear_hold: this collection's hold (skip label with its annotation) once the Lease that run held expired;
    never a person's skip label, never while the Lease is live."""
    held = node("b", "upgrade-required", **{"nvidia.com/gpu-driver-upgrade.skip": "true"})
    held["metadata"]["annotations"]["gpufleet.io/gpu-driver-upgrade-hold"] = "canary"
    theirs = node("c", "upgrade-required", **{"nvidia.com/gpu-driver-upgrade.skip": "true"})
    lease = {
        "metadata": {"name": "gpufleet-upgrade", "namespace": "ns"},
        "spec": {"holderIdentity": "bob run 9", "leaseDurationSeconds": 300, "renewTime": "2026-11-25T10:00:00Z"},
    }
    result = diagnose(view([held, theirs], lease=lease))
    found = {item["node"]: item for item in result["findings"]}
    assert found["b"]["remediation"]["action"] == "clear_hold"
    assert found["b"]["remediation"]["target"] == {
        "label": "nvidia.com/gpu-driver-upgrade.skip",
        "annotation": "gpufleet.io/gpu-driver-upgrade-hold",
        "lease": "ns/gpufleet-upgrade",
        "holder": "bob run 9",
    }
    assert found["b"]["evidence"]["stale_since_lease_of"] == "bob run 9"
    assert found["c"]["cause"] == "skip_label" and found["c"]["remediation"] is None
    lease["spec"]["renewTime"] = "2026-11-25T11:59:00Z"  # a live run: its hold is no stale hold
    assert diagnose(view([held], lease=lease))["remediations"] == []
    assert diagnose(view([held]))["remediations"] == []  # no Lease at all: nothing says a run stopped


def test_state_duration_from_the_controllers_event():
    event = {
        "involvedObject": {"kind": "Node", "name": "a"},
        "reason": "GPUDriverUpgrade",
        "message": "Successfully updated node state label to upgrade-required",
        "lastTimestamp": "2026-11-25T09:00:00Z",
    }
    finding = diagnose(
        view([node("a", "upgrade-required", **{"nvidia.com/gpu-driver-upgrade.skip": "true"})], node_events=[event])
    )["findings"][0]
    assert finding["since"] == "2026-11-25T09:00:00Z" and finding["seconds_in_state"] == 3 * 3600


def test_failing_log_line():
    assert failing_log_line("a\nb failed\nc\n") == "b failed"
    assert failing_log_line("all good\n") == ""


def test_plan_one_action_per_node_and_max_actions():
    candidates = [
        Remediation("relabel_upgrade_required", "a", {}, ""),
        Remediation("evict_pods", "a", {}, ""),
        Remediation("relabel_upgrade_required", "b", {}, ""),
        Remediation("unpause_pool", "c", {}, ""),
    ]
    plan = plan_remediations(candidates, max_actions=1, allowed=("relabel_upgrade_required", "evict_pods"))
    assert [(a.action, a.node) for a in plan["actions"]] == [("relabel_upgrade_required", "a")]
    assert [d["why"] for d in plan["deferred"]] == [
        "one action per node per run",
        "max_actions 1 reached",
        "action not in remediate_actions",
    ]
    with pytest.raises(InvalidInputError, match="max_actions"):
        plan_remediations(candidates, max_actions=-1)


def test_upgrade_failed_after_the_validation_timeout_quotes_the_validator():
    validator = pod(
        "nvidia-operator-validator-x", "a", namespace="nvidia-gpu-operator", labels={"app": "nvidia-operator-validator"}
    )
    validator["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    current = view([node("a", "upgrade-failed", cordoned=True)], pods=[driver("a"), validator])
    assert logs_wanted(current) == [("nvidia-gpu-operator", "nvidia-operator-validator-x", "")]
    current.logs[("nvidia-gpu-operator", "nvidia-operator-validator-x")] = "validation failed: no devices\n"
    finding = diagnose(current)["findings"][0]
    assert (finding["cause"], finding["evidence"]["log_line"]) == ("validator_failing", "validation failed: no devices")
    assert finding["remediation"]["action"] == "restart_validator"  # not a relabel: the cause is still there


def test_a_node_in_a_custom_pool_is_reported_under_that_pool_not_worker():
    """Nodes in a custom pool keep the worker role label; the MCO counts them in the custom pool only."""
    bad = node("a", **{"node-role.kubernetes.io/worker": "", "pool": "gpu-bad"})
    bad["metadata"]["annotations"].update(
        {
            "machineconfiguration.openshift.io/state": "Degraded",
            "machineconfiguration.openshift.io/reason": "unexpected on-disk state",
            "machineconfiguration.openshift.io/currentConfig": "rendered-worker-1",
            "machineconfiguration.openshift.io/desiredConfig": "rendered-gpu-bad-1",
        }
    )

    def mcp(name: str, labels: dict) -> dict:
        return {"metadata": {"name": name}, "spec": {"nodeSelector": {"matchLabels": labels}}, "status": {}}

    pools = [mcp("worker", {"node-role.kubernetes.io/worker": ""}), mcp("gpu-bad", {"pool": "gpu-bad"})]
    result = diagnose(view([bad], cluster_policy=None, machine_config_pools=pools))
    assert [(f["node"], f["cause"], f["evidence"]["pool"]) for f in result["findings"]] == [
        ("a", "mcp_degraded", "gpu-bad")
    ]


def _rollout_node(name: str, state: str, step: str, message: str = "") -> dict:
    """A node as this collection's rollout engine leaves it (annotations gpufleet.io/rollout-ofed-*)."""
    obj = node(name, "", cordoned=True)
    obj["metadata"]["annotations"].update(
        {
            "gpufleet.io/rollout-ofed-state": state,
            "gpufleet.io/rollout-ofed-step": step,
            "gpufleet.io/rollout-ofed-target": "24.10-1.1.4.0",
            "gpufleet.io/rollout-ofed-started-at": "2026-11-25T11:00:00Z",
            "gpufleet.io/rollout-ofed-message": message,
        }
    )
    if state == "failed":
        obj["metadata"]["annotations"]["gpufleet.io/rollout-ofed-finished-at"] = "2026-11-25T11:30:00Z"
    return obj


def test_a_rollout_of_this_collection_left_failed_is_stuck_with_its_step_and_message():
    failed = _rollout_node("a", "failed", "reload-driver", "MOFED pod did not become Ready in 900 s")
    done = _rollout_node("b", "done", "")
    result = diagnose(view([failed, done]))
    assert [(f["node"], f["component"], f["state"], f["cause"]) for f in result["findings"]] == [
        ("a", "ofed-rollout", "failed at reload-driver", "rollout_step_failed")
    ]
    finding = result["findings"][0]
    assert finding["evidence"]["message"] == "MOFED pod did not become Ready in 900 s"
    assert finding["evidence"]["target"] == "24.10-1.1.4.0"
    assert finding["seconds_in_state"] == 30 * 60  # since it failed, on the API server's clock
    assert "a rollback undoes it" in finding["remedy"] and finding["remediation"] is None
    # The report's Next follows the remedy with the stage's own command: the remedy names no stage= of its own.
    assert "stage=" not in finding["remedy"]
    # Only a step that evicts pods needs the node's pods read.
    assert nodes_needing_pods([failed, done]) == []


def test_a_rollout_failed_at_evict_pods_names_the_pdb_that_holds_it():
    failed = _rollout_node("a", "failed", "evict-pods", "eviction refused")
    pdb = {
        "metadata": {"name": "rdma-app", "namespace": "work"},
        "spec": {"selector": {"matchLabels": {"app": "rdma"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1},
    }
    app = pod("rdma-1", "a", labels={"app": "rdma"}, owner=("ReplicaSet", "rdma-x"))
    result = diagnose(view([failed], pods=[app], pdbs=[pdb]))
    finding = result["findings"][0]
    assert (finding["cause"], finding["evidence"]["blocked"][0]["pdb"]) == ("pdb_blocks_eviction", "work/rdma-app")
    assert nodes_needing_pods([failed]) == ["a"]


def test_a_rollout_in_progress_is_stuck_only_once_its_run_is_gone():
    moving = _rollout_node("a", "in-progress", "reload-driver")
    live = {
        "metadata": {"name": "gpufleet-upgrade", "namespace": "nvidia-gpu-operator"},
        "spec": {"holderIdentity": "alice run 1", "leaseDurationSeconds": 300, "renewTime": "2026-11-25T11:59:00Z"},
    }
    assert diagnose(view([moving], lease=live))["findings"] == []
    expired = {**live, "spec": {**live["spec"], "renewTime": "2026-11-25T10:00:00Z"}}
    result = diagnose(view([moving], lease=expired))
    assert [(f["node"], f["cause"], f["state"]) for f in result["findings"]] == [
        ("a", "rollout_interrupted", "in-progress at reload-driver")
    ]


def test_a_driver_pod_that_cannot_pull_its_image_is_named_with_the_image():
    pulling = driver("a")
    pulling["status"] = {
        "phase": "Pending",
        "containerStatuses": [
            {
                "name": "nvidia-driver-ctr",
                "image": "nvcr.io/nvidia/driver:570.124.06-rhcos4.16",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}},
            }
        ],
    }
    result = diagnose(view([node("a", "pod-restart-required", cordoned=True)], pods=[pulling]))
    finding = result["findings"][0]
    assert finding["cause"] == "driver_image_pull"
    assert finding["evidence"]["image"] == "nvcr.io/nvidia/driver:570.124.06-rhcos4.16"
    assert finding["evidence"]["reason"] == "ImagePullBackOff"
    assert finding["remediation"] is None
