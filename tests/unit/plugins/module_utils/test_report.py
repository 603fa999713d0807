"""The Markdown report of one run: readable in a minute, from the ledger entry alone."""

from __future__ import annotations

from ansible_collections.gpufleet.upgrade.plugins.module_utils._report import (
    duration_text,
    failures,
    next_step,
    render_report,
    report_file_name,
)

CHANGES = [
    {"component": "gpu_operator", "from": "v24.9.0", "to": "v25.3.0"},
    {"component": "gpu_driver", "from": "550.127.05", "to": "570.124.06"},
]


def canary_entry(**extra) -> dict:
    entry = {
        "id": "canary-20261122T080459Z-ccd2",
        "stage": "canary",
        "outcome": "success",
        "decision": "run",
        "message": "Canary gpu-worker-001 upgraded and validated; the 48 h bake starts now.",
        "started_at": "2026-11-22T07:28:08Z",
        "recorded_at": "2026-11-22T08:04:59Z",
        "duration_seconds": 2211,
        "actor": {"user": "alice", "awx_job_id": "4242", "awx_job_template": "GPU canary", "controller": "awx-ee-1"},
        "campaign": "gpu_operator-6412afe880",
        "group": "gpu_operator",
        "changes": CHANGES,
        "versions_before": {"gpu_operator": "v24.9.0", "gpu_driver": "550.127.05", "openshift": "4.16.23"},
        "versions_after": {"gpu_operator": "v25.3.0", "gpu_driver": "570.124.06", "openshift": "4.16.23"},
        "canary_node": "gpu-worker-001",
        "bake": {"required_hours": 48},
        "gates": [
            {
                "node": "gpu-worker-001",
                "passed": True,
                "gates": [
                    {
                        "gate": "rdma",
                        "node": "gpu-worker-001",
                        "passed": True,
                        "reason": "8 ports Active/LinkUp",
                        "elapsed": 12.2,
                        # The pod's own times, on the cluster's clock: the gate's real duration.
                        "started_at": "2026-11-22T07:56:00Z",
                        "finished_at": "2026-11-22T07:58:12Z",
                    },
                ],
            }
        ],
        "nodes": {
            "gpu-worker-001": [
                {"state": "upgrade-required", "entered_at": "2026-11-22T07:30:00Z", "observed_at": None},
                {"state": "upgrade-done", "at": "2026-11-22T07:55:00Z"},
            ]
        },
        "capacity": [
            {"allocatable_gpus": 48, "at": "2026-11-22T07:29:00Z"},
            {"allocatable_gpus": 40, "at": "2026-11-22T07:31:00Z", "unavailable_nodes": ["gpu-worker-001"]},
        ],
        "ledger": {
            "configmap": "nvidia-gpu-operator/gpufleet-upgrade-ledger",
            "in_cluster": True,
            "file": "reports/upgrade-ledger.json",
        },
    }
    entry.update(extra)
    return entry


def test_successful_canary_says_what_where_when_and_what_next() -> None:
    text = render_report(canary_entry())
    lines = text.splitlines()
    assert lines[0] == (
        "# Canary succeeded: gpu_operator: gpu_operator v24.9.0 -> v25.3.0, gpu_driver 550.127.05 -> 570.124.06"
    )
    assert "| When | 2026-11-22T07:28:08Z to 2026-11-22T08:04:59Z (cluster time), took 36 min 51 s |" in text
    assert "| Who | alice (AWX job 4242, GPU canary) on awx-ee-1 |" in text
    assert "| Where | canary node gpu-worker-001 |" in text
    assert "bake until 2026-11-24T08:04:59Z (cluster time)" in text
    assert "## What failed and why" not in text
    assert "| gpu-worker-001 | rdma | pass | 8 ports Active/LinkUp | 2 min 12 s |" in text
    assert "| gpu-worker-001 | upgrade-required | 2026-11-22T07:30:00Z | 2026-11-22T07:55:00Z |  |" in text
    assert "| gpu-worker-001 | upgrade-done | 2026-11-22T07:55:00Z | 2026-11-22T07:55:00Z |  |" in text
    assert "Every time in this report is the cluster's (the API server's Date header)" in text
    assert "| Capacity | 40 to 48 allocatable GPUs during the rollout (2 samples) |" in text
    assert "| gpu_driver | 550.127.05 | 570.124.06 | changed |" in text
    assert "| openshift | 4.16.23 | 4.16.23 |  |" in text
    assert "- cluster: ConfigMap nvidia-gpu-operator/gpufleet-upgrade-ledger, recorded" in text


def test_failed_gate_is_explained_with_its_evidence_first() -> None:
    gates = [
        {
            "node": "gpu-worker-001",
            "passed": False,
            "gates": [
                {
                    "gate": "rdma",
                    "node": "gpu-worker-001",
                    "passed": False,
                    "reason": "mlx5_2/1 is Down/Disabled",
                    "evidence": "--- ibstat ---\nCA 'mlx5_2'\n\tPort 1:\n\t\tState: Down",
                    "elapsed": 4,
                },
                {"gate": "dcgm_diag", "node": "gpu-worker-001", "passed": True, "reason": "11 tests passed"},
            ],
        }
    ]
    entry = canary_entry(
        outcome="failed",
        message="Validation gates failed on canary node gpu-worker-001: rdma: mlx5_2/1 is Down/Disabled",
        gates=gates,
        failures=[{"node": "gpu-worker-003", "reason": "driver pod CrashLoopBackOff"}],
    )
    text = render_report(entry)
    assert text.startswith("# Canary FAILED:")
    section = text.split("## What failed and why")[1].split("##")[0]
    assert "- Validation gates failed on canary node gpu-worker-001" in section
    assert "- gate rdma on gpu-worker-001: mlx5_2/1 is Down/Disabled" in section
    assert "- gpu-worker-003: driver pod CrashLoopBackOff" in section
    assert "| gpu-worker-001 | rdma | FAIL | mlx5_2/1 is Down/Disabled | 4 s (waited here) |" in text
    assert "Evidence, rdma on gpu-worker-001:\n\n```\n--- ibstat ---" in text
    assert "run stage=rollback" in text


def test_refusal_says_nothing_changed_and_the_cluster_copy_was_not_written() -> None:
    entry = canary_entry(
        stage="promote",
        outcome="refused",
        decision="refuse",
        message="Promotion refused: the canary has baked 3.1 h of the 48 h required",
        gates=[],
        nodes={},
        ledger={"configmap": "ns/gpufleet-upgrade-ledger", "in_cluster": False, "file": "f.json"},
    )
    text = render_report(entry)
    assert text.startswith("# Promotion refused (nothing was changed):")
    assert "- Promotion refused: the canary has baked 3.1 h" in text
    assert "not recorded (nothing on the cluster changed)" in text
    assert "## Validation gates" not in text


def test_forced_promotion_and_matrix_commit_are_shown() -> None:
    entry = canary_entry(
        stage="promote",
        forced=True,
        force_reason="security fix",
        validate_nodes=["gpu-worker-002", "gpu-worker-004"],
        matrix={
            "file": "m.yaml",
            "changed": True,
            "message": "promoted gpu_operator",
            "commit": "0123456789abcdef0",
            "tag": "v2026-11-stable",
            "tag_existed": True,
        },
        nodes=[{"node": "gpu-worker-002", "state": "upgrade-done", "at": "2026-11-22T07:40:00Z", "reason": "ok"}],
    )
    text = render_report(entry)
    assert "| Forced | yes, reason: security fix |" in text
    assert "| Where | every GPU node, validated on gpu-worker-002, gpu-worker-004 |" in text
    assert "commit 0123456789ab, tag v2026-11-stable (already existed, left in place)" in text
    assert "| gpu-worker-002 | upgrade-done | 2026-11-22T07:40:00Z | 2026-11-22T07:40:00Z | ok |" in text


def test_helpers() -> None:
    assert report_file_name("bake", "2026-11-22T08:04:59Z") == "upgrade-bake-20261122T080459Z.md"
    assert duration_text(3725) == "1 h 2 min"
    assert duration_text(None) == "unknown"
    assert failures({"outcome": "success", "message": "fine"}) == []
    assert next_step({"stage": "bake", "outcome": "success", "bake": {"remaining_hours": 0}}) == (
        "The bake window is over: run stage=promote."
    )
    assert "take it out of service" in next_step({"stage": "rollback", "outcome": "failed", "rolled_back": True})
    assert next_step({"stage": "bake", "outcome": "failed", "rolled_back": True}).startswith(
        "The canary was rolled back"
    )


def test_next_of_a_failure_is_a_stage_that_works_from_where_it_stopped() -> None:
    nothing_changed = {"stage": "canary", "outcome": "failed", "cluster_changed": False}
    assert "run stage=canary again" in next_step(nothing_changed) and "rollback" not in next_step(nothing_changed)
    assert "stage=rollback" in next_step({"stage": "canary", "outcome": "failed", "cluster_changed": True})
    assert "run stage=rollback again" in next_step({"stage": "rollback", "outcome": "failed"})


def test_next_after_the_maintenance_operator_granted_no_room_reruns_the_stage() -> None:
    # What the rollout engine returns and roles/upgrade keeps in the entry (nodes_not_granted).
    granted_none = {"nodes_not_granted": ["gpu-worker-002"]}
    promote = next_step({"stage": "promote", "outcome": "failed", "cluster_changed": True, **granted_none})
    assert "did not schedule the maintenance of gpu-worker-002" in promote, promote
    assert "run stage=promote again once it has room: it resumes where it stopped" in promote.lower(), promote
    assert "mixed versions" not in promote
    # ofed_rolling_reload words the halt as a failure of no node.
    halt = [{"node": "", "step": "", "reason": "Rollout halted: node gpu-worker-002 was not started"}]
    canary = next_step({"stage": "canary", "outcome": "failed", "failures": halt, **granted_none})
    assert "Run stage=canary again" in canary and "rollback" not in canary, canary
    # A node that failed besides is a verdict: its failures lead the way as before.
    failed = {"stage": "promote", "outcome": "failed", **granted_none, "failures": [{"node": "gpu-worker-001"}]}
    assert next_step(failed) == "The fleet may run mixed versions: read the failures, then run stage=rollback."


def test_next_after_alerts_held_a_stage_names_them_and_reruns_the_stage() -> None:
    held = ["GPUXidError{Hostname=gpu-worker-003, gpu=0}"]
    bake = next_step({"stage": "bake", "outcome": "failed", "held_by_alerts": held})
    assert bake.startswith("Prometheus alerts GPUXidError{Hostname=gpu-worker-003, gpu=0} kept firing")
    assert "run stage=bake again" in bake and "no verdict on the canary" in bake
    before = next_step({"stage": "promote", "outcome": "failed", "held_by_alerts": held, "cluster_changed": False})
    assert "nothing was changed" in before and "stage=promote again" in before
    between = next_step({"stage": "promote", "outcome": "failed", "held_by_alerts": held, "cluster_changed": True})
    assert "stopped before its next node" in between and "resumes where it stopped" in between
    assert "stage=rollback" in between


def test_pre_steps_left_in_place_are_named_with_the_command_that_restores_them() -> None:
    restore = "ansible-playbook playbooks/upgrade.yml -e stage=rollback"
    entry = canary_entry(
        outcome="failed",
        message="Network Operator 24.7.0 -> 24.10.0 failed",
        pre_steps=[
            {"what": "SR-IOV operator scaled to 0", "object": "Deployment ns/sriov-network-operator",
             "replaced": "spec.replicas", "restored": True, "restore": restore},
            {"what": "default SriovNetworkNodePolicy deleted", "object": "SriovNetworkNodePolicy ns/default",
             "replaced": "the policy", "restored": False, "restore": restore},
        ],
    )  # fmt: skip
    text = render_report(entry)
    assert "## Pre-steps" in text
    assert "| SR-IOV operator scaled to 0 | Deployment ns/sriov-network-operator | spec.replicas | put back |" in text
    assert f"| STILL CHANGED: restore with `{restore}` |" in text
    assert (
        f"default SriovNetworkNodePolicy deleted (SriovNetworkNodePolicy ns/default) is still changed: "
        f"restore with `{restore}`"
    ) in failures(entry)
    assert not [item for item in failures(entry) if "SR-IOV operator scaled" in item]


def test_next_step_after_a_run_that_changed_nothing_or_could_not_judge() -> None:
    unchanged = {"stage": "canary", "outcome": "failed", "cluster_changed": False}
    assert next_step(unchanged) == "Nothing on the cluster was changed: fix what failed, then run stage=canary again."
    rollback = {"stage": "rollback", "outcome": "failed", "rolled_back": True, "gates_could_not_run": True}
    assert "not a verdict on the node" in next_step(rollback) and "take it out of service" not in next_step(rollback)
    assert "run stage=rollback again" in next_step(rollback), "a Next names a command that works from there"
    bake = {"stage": "bake", "outcome": "failed", "gates_could_not_run": True}
    assert next_step(bake).endswith("Run stage=bake again once the cluster can run the gates.")


def test_next_of_a_run_halted_by_a_failed_node_names_the_command_that_clears_it() -> None:
    clear = "kubectl annotate node gpu-worker-001 gpufleet.io/rollout-nic-firmware-state=pending --overwrite"
    message = (
        "Failed to roll out NIC firmware: Rollout nic-firmware is halted by a failed node: gpu-worker-001 failed at "
        f"step reboot: BMC job ended Failed. Fix the node, then clear it with: {clear}"
    )
    halted = {"stage": "rollback", "outcome": "failed", "message": message, "failures": [{"node": "gpu-worker-001",
              "reason": message}]}  # fmt: skip
    text = next_step(halted)
    assert f"`{clear}`" in text and text.count(clear) == 1
    assert text.index(clear) < text.index("run stage=rollback again"), "the clear comes before the stage"
    assert clear not in next_step({**halted, "message": "", "failures": []})


def test_next_of_a_change_that_cannot_be_undone_goes_forward() -> None:
    why = (
        "The control plane runs OpenShift 4.16.21 and OpenShift cannot be downgraded: this change can only go forward."
    )
    canary = next_step({"stage": "canary", "outcome": "failed", "cluster_changed": True, "forward_only": why})
    assert canary.startswith(why) and "run stage=canary again" in canary
    assert canary.index("stage=canary") < canary.index("stage=rollback"), "the command to run comes first"
    promote = next_step({"stage": "promote", "outcome": "failed", "cluster_changed": True, "forward_only": why})
    assert "run stage=promote again" in promote and "bake" not in promote


def test_an_olm_reinstall_of_the_operator_is_shown_with_how_far_it_got() -> None:
    reinstall = {
        "from_csv": "gpu-operator-certified.v25.3.0",
        "to_csv": "gpu-operator-certified.v24.9.0",
        "channel": "v24.9",
        "install_plan": "install-abcde",
        "completed": True,
    }
    text = render_report(canary_entry(stage="rollback", operator={"method": "olm", "reinstall": reinstall}))
    assert (
        "| Operator | reinstalled through OLM, gpu-operator-certified.v25.3.0 -> gpu-operator-certified.v24.9.0 "
        "(channel v24.9, InstallPlan install-abcde) |"
    ) in text
    unfinished = {**reinstall, "install_plan": "", "completed": False}
    text = render_report(canary_entry(stage="rollback", outcome="failed", operator={"reinstall": unfinished}))
    assert "| Operator | NOT FINISHED: being reinstalled through OLM" in text


def test_driver_images_pinned_before_the_operator_moved_are_named_in_the_report() -> None:
    images = [{"what": "driver", "image": "driver@sha256:8a"}, {"what": "driver manager", "image": "k8s@sha256:b0"}]
    pinned = [{"kind": "ClusterPolicy", "name": "gpu-cluster-policy", "images": images}]
    text = render_report(canary_entry(operator={"method": "olm", "changed": True, "pinned_before_upgrade": pinned}))
    assert (
        "| Operator | driver and driver manager pinned in ClusterPolicy/gpu-cluster-policy to the images that ran, "
        "so the operator release restarted no driver" in text
    )
    assert "| Operator |" not in render_report(canary_entry(operator={"method": "olm"}))  # nothing to add
    assert "| Operator |" not in render_report(canary_entry(operator={"method": "olm", "changed": False}))


def test_a_halted_stage_carries_the_doctors_diagnosis_and_its_next_says_what_unsticks_the_nodes() -> None:
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._report import halted_diagnosis
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._report_html import render_html

    doctor = {
        "findings": [
            {
                "node": "gpu-worker-001",
                "component": "gpu-driver",
                "state": "pod-restart-required",
                "in_state_for": "12m",
                "cause": "driver_pod_crashloop",
                "cause_title": "the driver pod crash-loops",
                "detail": "no kernel-devel package matches the running kernel",
                "remedy": "fix the build, then delete the pod",
                "remediation": None,
                "evidence": {"big": "x" * 100},
            },
            {
                "node": "gpu-worker-009",
                "component": "gpu-driver",
                "state": "upgrade-failed",
                "cause": "upgrade_failed",
                "remedy": "relabel it",
                "remediation": {"action": "relabel_upgrade_required"},
            },
        ],
        "cluster": [{"cause": "rollout_interrupted", "detail": "Lease ns/l", "remedy": "run the same stage again"}],
    }
    kept = halted_diagnosis(doctor, ["gpu-worker-001"])
    assert [f["node"] for f in kept["findings"]] == ["gpu-worker-001"]  # only the halted node
    assert "evidence" not in kept["findings"][0] and kept["findings"][0]["remediation"] == ""
    assert halted_diagnosis(doctor, ["gpu-worker-009"])["findings"][0]["remediation"] == "relabel_upgrade_required"
    assert halted_diagnosis(doctor, [])["findings"] == []  # a halt naming no node: the cluster-wide blockers only
    assert halted_diagnosis(doctor, [])["cluster"][0]["cause"] == "rollout_interrupted"
    assert halted_diagnosis({"msg": "forbidden"}, []) == {}

    entry = canary_entry(
        outcome="failed",
        message="gpu-worker-001 halted at pod-restart-required",
        failures=[{"node": "gpu-worker-001", "reason": "driver build failed"}],
        diagnosis=kept,
    )
    text = render_report(entry)
    assert "## Why the halted nodes are stuck (the doctor, docs/doctor.md)" in text
    assert "| gpu-worker-001 | gpu-driver pod-restart-required | 12m | driver_pod_crashloop |" in text
    next_line = next(line for line in text.splitlines() if line.startswith("| Next |"))
    assert "To unstick gpu-worker-001 (driver_pod_crashloop: fix the build, then delete the pod)." in next_line
    assert next_line.index("To unstick") < next_line.index("stage=rollback")  # the stage's own way on follows
    assert "diagnose.yml" not in next_line  # nothing the doctor could do itself
    entry["diagnosis"] = halted_diagnosis(doctor, ["gpu-worker-009"])
    assert "-e doctor_remediate=true" in next_step(entry)
    html = render_html(entry)
    assert '<table id="diagnosis">' in html and "upgrade_failed" in html
    # A successful run never mentions it.
    assert "To unstick" not in next_step(canary_entry(diagnosis=kept))
