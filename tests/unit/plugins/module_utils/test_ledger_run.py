"""upgrade_ledger's work around the plan: the permissions asked with it (for a run of a group in the table; missing
ones come back as a refusal, not a failed plan), the stage Lease taken before planning again (a failed plan still
says the Lease is held, so the role gives it up), and the Lease given up after recording (a release that fails
warns and leaves the role's own release to run)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils import _ledger_run
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError, KubeApiError

LEASE = {"namespace": "gpu-operator", "name": "gpufleet-upgrade", "holder": "me, run 1", "duration": 300,
         "keep_renewed_for": 60}  # fmt: skip


class Api:
    requests_sent = 3


def taken(calls, *, changed=True, held=True, fails=None):
    def take_or_release(api, params, settings, *, state, keep_for, check_mode):
        calls.append((state, settings.holder, keep_for, check_mode))
        if fails:
            raise fails
        return {"held": held and state == "present" and not check_mode, "changed": changed, "api_requests": 2}

    return take_or_release


def test_the_lease_is_taken_before_planning_and_its_result_comes_with_the_plan(monkeypatch):
    calls, planned = [], []
    monkeypatch.setattr(_ledger_run, "take_or_release", taken(calls))
    monkeypatch.setattr(_ledger_run, "plan_run", lambda request, api: planned.append(calls[:]) or {"decision": {}})
    result = _ledger_run.plan_holding_the_lease(None, {"lease": LEASE}, Api(), check_mode=False)
    assert planned == [[("present", "me, run 1", 60, False)]]  # taken first, then planned
    assert (result["held"], result["changed"], result["api_requests"]) == (True, True, 3)


def test_a_plan_that_fails_once_the_lease_is_held_says_so(monkeypatch):
    monkeypatch.setattr(_ledger_run, "take_or_release", taken([]))

    def plan_run(request, api):
        raise GpuFleetError("Cannot read the matrix")

    monkeypatch.setattr(_ledger_run, "plan_run", plan_run)
    with pytest.raises(GpuFleetError) as failed:
        _ledger_run.plan_holding_the_lease(None, {"lease": LEASE}, Api(), check_mode=False)
    assert failed.value.result["held"] is True and failed.value.msg == "Cannot read the matrix"


def test_a_lease_another_run_holds_is_refused_before_planning(monkeypatch):
    refused = GpuFleetError("Refused before any change: Another run holds the Lease: bob, for 12s")
    monkeypatch.setattr(_ledger_run, "take_or_release", taken([], fails=refused))
    monkeypatch.setattr(_ledger_run, "plan_run", lambda request, api: pytest.fail("planned without the Lease"))
    with pytest.raises(GpuFleetError, match="Another run holds the Lease: bob"):
        _ledger_run.plan_holding_the_lease(None, {"lease": LEASE}, Api(), check_mode=False)


def test_recording_gives_the_lease_up_and_a_release_that_fails_only_warns(monkeypatch):
    calls, warnings = [], []
    monkeypatch.setattr(_ledger_run, "take_or_release", taken(calls))
    assert _ledger_run.release_after_recording({"lease": LEASE}, Api(), check_mode=False, warn=warnings.append) is True
    assert calls == [("absent", "me, run 1", 0, False)] and warnings == []
    monkeypatch.setattr(_ledger_run, "take_or_release", taken([], changed=False))
    assert _ledger_run.release_after_recording({"lease": LEASE}, Api(), check_mode=False, warn=warnings.append) is False
    down = KubeApiError("503 Service Unavailable", status=503)
    monkeypatch.setattr(_ledger_run, "take_or_release", taken([], fails=down))
    assert _ledger_run.release_after_recording({"lease": LEASE}, Api(), check_mode=False, warn=warnings.append) is False
    assert warnings == ["The run is recorded, but the stage Lease was not given up yet: 503 Service Unavailable"]


PLAN = {"decision": {"action": "run"}, "group": "network_operator", "namespace": "nvidia-gpu-operator"}
ASKED = {"stage": "canary", "permissions": {"features": ["gitops"], "namespaces": {"network_operator": "nno"}}}


def test_the_permissions_are_asked_for_a_run_of_a_group_in_the_table_with_the_plans_namespace(monkeypatch):
    asked = []
    monkeypatch.setattr(_ledger_run, "check_permissions", lambda api, request: asked.append(request) or {"missing": []})
    assert _ledger_run.permissions_for_the_plan(PLAN, ASKED, Api()) == {"missing": []}
    (request,) = asked
    assert (request.playbook, request.stage, request.group, tuple(request.features)) == (
        "upgrade",
        "canary",
        "network_operator",
        ("gitops",),
    )
    assert request.namespaces == {"network_operator": "nno", "ledger": "nvidia-gpu-operator"}


@pytest.mark.parametrize(
    "plan",
    [dict(PLAN, decision={"action": "refuse"}), dict(PLAN, decision={"action": "noop"}), dict(PLAN, group="my_dpu")],
)
def test_nothing_is_asked_when_the_stage_will_not_run_or_its_group_is_the_users_own(monkeypatch, plan):
    monkeypatch.setattr(_ledger_run, "check_permissions", lambda api, request: pytest.fail("asked"))
    assert _ledger_run.permissions_for_the_plan(plan, ASKED, Api())["skipped"] is True


def test_missing_permissions_come_back_failed_with_permission_checks_message(monkeypatch):
    def check_permissions(api, request):
        raise GpuFleetError("the credentials lack 1 permission(s), so nothing was changed", result={"checked": 9})

    monkeypatch.setattr(_ledger_run, "check_permissions", check_permissions)
    answer = _ledger_run.permissions_for_the_plan(PLAN, ASKED, Api())
    assert answer == {
        "checked": 9,
        "failed": True,
        "msg": "Failed to confirm the permissions of upgrade.yml: the credentials lack 1 permission(s), so nothing "
        "was changed",
    }


MILESTONES = [
    {"milestone": "bake_failed", "nodes": ["gpu-1"], "event_message": "Bake check failed on gpu-1"},
    {"milestone": "rolled_back", "nodes": ["gpu-1"], "event_message": "Rolled back to current_production"},
]


def test_the_milestones_are_written_on_the_entrys_group_and_one_that_cannot_be_only_warns(monkeypatch):
    written, warnings = [], []

    def record_stage_events(api, *, milestone, group, nodes, message, check_mode):
        written.append((milestone, group, tuple(nodes), message, check_mode))
        if milestone == "rolled_back":
            raise KubeApiError("events is forbidden", status=403)
        return {"events": [{"kind": "Node", "name": "gpu-1", "action": "BakeCheckFailed"}]}

    monkeypatch.setattr(_ledger_run, "record_stage_events", record_stage_events)
    params = {"entry": {"group": "gpu_operator"}, "milestones": MILESTONES}
    events = _ledger_run.record_milestones(params, Api(), check_mode=True, warn=warnings.append)
    assert written == [
        ("bake_failed", "gpu_operator", ("gpu-1",), "Bake check failed on gpu-1", True),
        ("rolled_back", "gpu_operator", ("gpu-1",), "Rolled back to current_production", True),
    ]
    assert events == [{"kind": "Node", "name": "gpu-1", "action": "BakeCheckFailed", "milestone": "bake_failed"}]
    assert warnings == ["The run is recorded, but its rolled_back Events were not written: events is forbidden"]


def test_a_record_writes_its_entry_before_the_milestones_and_returns_their_events(monkeypatch):
    order = []
    monkeypatch.setattr(_ledger_run.KubeApi, "from_params", staticmethod(lambda params, keep_stage_lease: Api()))
    monkeypatch.setattr(_ledger_run, "record", lambda params, api, check_mode, warn: order.append("entry") or {})
    monkeypatch.setattr(
        _ledger_run, "record_milestones", lambda params, api, check_mode, warn: order.append("events") or ["e"]
    )
    params = {"action": "record", "cluster_name": "", "milestones": MILESTONES, "lease": None}
    assert _ledger_run.ledger_action(params, check_mode=False, warn=print) == {"events": ["e"]}
    assert order == ["entry", "events"]
    order.clear()
    assert _ledger_run.ledger_action(dict(params, milestones=[]), check_mode=False, warn=print) == {}
    assert order == ["entry"]
