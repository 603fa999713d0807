"""The ledger: merging copies, folding a change's entries, and what each stage may do next."""

from __future__ import annotations

import datetime
import json
import os

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils import _ledger as ledger
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._ledger import (
    NOOP,
    REFUSE,
    RUN,
    CampaignState,
    append_file_entry,
    campaign_id,
    choose_canary_node,
    cluster_ledger_text,
    compact_entry,
    decide,
    decide_rollback,
    describe_steps,
    fold_campaign,
    free_gpus,
    merge_entries,
    open_campaigns,
    parse_jsonl,
    read_file_ledger,
    sample_nodes,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso

CHANGE = "gpu_operator-0123456789"
T0 = datetime.datetime(2026, 11, 22, 8, 0, 0, tzinfo=datetime.UTC)


def at(hours: float) -> str:
    return iso(T0 + datetime.timedelta(hours=hours))


def entry(stage: str, outcome: str, hours: float, **extra) -> dict:
    base = {
        "id": f"{stage}-{hours}-{outcome}",
        "stage": stage,
        "outcome": outcome,
        "recorded_at": at(hours),
        "campaign": CHANGE,
        "group": "gpu_operator",
        "canary_node": "gpu-worker-001",
        "message": f"{stage} {outcome}",
    }
    base.update(extra)
    return base


# -- merging -----------------------------------------------------------------------------------


def test_merge_keeps_each_entry_once_oldest_first_fullest_copy() -> None:
    cluster = [entry("canary", "success", 0), {"id": "bake-1", "recorded_at": at(5), "stage": "bake"}]
    file_copy = [
        {"id": "bake-1", "recorded_at": at(5), "stage": "bake", "gates": [{"evidence": "raw ibstat output"}]},
        entry("bake", "success", 2),
        {"no": "id"},
    ]
    merged = merge_entries(cluster, file_copy)
    assert [item["id"] for item in merged] == ["canary-0-success", "bake-2-success", "bake-1"]
    assert merged[-1]["gates"] == [{"evidence": "raw ibstat output"}]


def test_ledger_times_are_read_with_the_one_rfc3339_parser() -> None:
    assert ledger.parse_iso("2026-11-22T08:00:00Z") == T0
    assert ledger.parse_iso("2026-11-22T08:00:00.250000Z") == T0 + datetime.timedelta(milliseconds=250)
    with pytest.raises(InvalidInputError, match="Ledger time 'yesterday' is not an RFC 3339 time"):
        ledger.parse_iso("yesterday")


def test_jsonl_round_trip_and_errors() -> None:
    text = cluster_ledger_text([entry("canary", "success", 0), entry("bake", "failed", 1)])
    assert [item["id"] for item in parse_jsonl(text, source="cm")] == ["canary-0-success", "bake-1-failed"]
    with pytest.raises(InvalidInputError, match="cm, line 2: not a JSON ledger entry"):
        parse_jsonl('{"id": "a"}\n{broken\n', source="cm")


def test_cluster_copy_drops_raw_evidence_and_keeps_the_newest_that_fit(monkeypatch) -> None:
    gates = [
        {
            "node": "n",
            "passed": False,
            "summary": "s",
            "gates": [{"gate": "rdma", "passed": False, "reason": "down", "evidence": "x" * 5000, "elapsed": 3}],
        }
    ]
    compact = compact_entry(entry("canary", "failed", 0, gates=gates))
    assert compact["gates"][0]["gates"] == [{"gate": "rdma", "passed": False, "reason": "down", "elapsed": 3}]
    monkeypatch.setattr(ledger, "MAX_CLUSTER_ENTRIES", 3)
    text = cluster_ledger_text([entry("bake", "success", hour) for hour in range(10)])
    assert [item["recorded_at"] for item in parse_jsonl(text, source="cm")] == [at(7), at(8), at(9)]
    monkeypatch.setattr(ledger, "MAX_CLUSTER_BYTES", 400)
    text = cluster_ledger_text([entry("bake", "success", hour) for hour in range(10)])
    assert len(text) <= 400 and parse_jsonl(text, source="cm")[-1]["recorded_at"] == at(9)


def test_file_ledger_appends_atomically_and_refuses_garbage(tmp_path) -> None:
    path = tmp_path / "reports" / "upgrade-ledger.json"
    append_file_entry(str(path), entry("canary", "success", 0))
    append_file_entry(str(path), entry("bake", "success", 1))
    append_file_entry(str(path), entry("bake", "success", 1))  # the same entry twice stays once
    assert [item["id"] for item in read_file_ledger(str(path))] == ["canary-0-success", "bake-1-success"]
    assert json.loads(path.read_text())["entries"][0]["stage"] == "canary"
    assert sorted(os.listdir(path.parent)) == ["upgrade-ledger.json"]  # no temporary file left behind
    path.write_text("{not json")
    with pytest.raises(InvalidInputError, match="cannot be read as JSON"):
        read_file_ledger(str(path))
    assert read_file_ledger(str(tmp_path / "missing.json")) == []


# -- folding a change --------------------------------------------------------------------------


def test_canary_then_bake_checks_then_promotion() -> None:
    entries = [
        entry("canary", "success", 0, counters={"gpu-worker-001": {"gpus": {}, "xids": {}}}),
        entry("bake", "success", 12),
        entry("bake", "failed", 24),
        {**entry("promote", "refused", 30), "id": "refused"},  # refusals never touch the cluster: ignored
    ]
    state = fold_campaign(entries, CHANGE)
    assert state.canary_passed and not state.canary_failed
    assert state.bake_started_at == at(0)
    assert state.baseline == {"gpu-worker-001": {"gpus": {}, "xids": {}}}
    assert [check["passed"] for check in state.bake_checks] == [True, False]
    assert state.bake_failed and state.open
    state = fold_campaign([*entries, entry("promote", "success", 50)], CHANGE)
    assert state.promoted and state.promote_entry == "promote-50-success"


def test_rollback_closes_a_change_and_a_new_canary_starts_over() -> None:
    entries = [entry("canary", "failed", 0), entry("rollback", "success", 1)]
    state = fold_campaign(entries, CHANGE)
    assert state.rolled_back and not state.open
    state = fold_campaign([*entries, entry("canary", "success", 3)], CHANGE)
    assert state.canary_passed and not state.rolled_back and state.bake_started_at == at(3)
    # A bake that rolled the canary back counts as a rollback too.
    state = fold_campaign([entry("canary", "success", 0), entry("bake", "failed", 5, rolled_back=True)], CHANGE)
    assert state.rolled_back and not state.canary_passed


def test_a_canary_refused_at_preflight_leaves_nothing_to_undo() -> None:
    state = fold_campaign([entry("canary", "failed", 0, cluster_changed=False)], CHANGE)
    assert not state.canary_failed and not state.open


def test_a_bake_check_whose_gates_could_not_run_is_no_failed_check() -> None:
    entries = [entry("canary", "success", 0), entry("bake", "failed", 12, gates_could_not_run=True)]
    state = fold_campaign(entries, CHANGE)
    assert state.bake_checks == [] and not state.bake_failed and state.canary_passed


def test_open_changes_most_recent_last() -> None:
    other = "network_operator-aaaa"
    entries = [
        entry("canary", "success", 0),
        {**entry("canary", "success", 1), "id": "other", "campaign": other},
        entry("promote", "success", 60),
    ]
    assert [state.campaign for state in open_campaigns(entries)] == [other, CHANGE]


# -- decisions -----------------------------------------------------------------------------------


def state_after(*entries: dict) -> CampaignState:
    return fold_campaign(list(entries), CHANGE)


def test_canary_runs_once_then_changes_nothing() -> None:
    assert decide("canary", state=CampaignState(CHANGE), changes_groups=1, now=T0).action == RUN
    again = decide("canary", state=state_after(entry("canary", "success", 0)), changes_groups=1, now=T0)
    assert again.action == NOOP and "already passed on gpu-worker-001" in again.reason
    failed = decide("canary", state=state_after(entry("canary", "failed", 0)), changes_groups=1, now=T0)
    assert failed.action == REFUSE and "Run stage=rollback first" in failed.reason


def test_bake_needs_a_passed_canary() -> None:
    assert decide("bake", state=CampaignState(CHANGE), changes_groups=1, now=T0).action == REFUSE
    baking = decide("bake", state=state_after(entry("canary", "success", 0)), changes_groups=1, now=T0)
    assert baking.action == RUN and baking.bake["remaining_hours"] == 48.0


def test_promote_waits_for_the_bake_on_the_clusters_clock() -> None:
    canary = state_after(entry("canary", "success", 0))
    early = decide("promote", state=canary, changes_groups=1, now=T0 + datetime.timedelta(hours=47.5))
    assert early.action == REFUSE
    assert "baked 47.5 h of the 48 h required" in early.reason
    assert "promotion possible from 2026-11-24T08:00:00Z" in early.reason
    on_time = decide("promote", state=canary, changes_groups=1, now=T0 + datetime.timedelta(hours=48))
    assert on_time.action == RUN and not on_time.forced
    short_bake = decide("promote", state=canary, changes_groups=1, now=T0 + datetime.timedelta(hours=2), bake_hours=1)
    assert short_bake.action == RUN


def test_a_failed_bake_check_blocks_promotion_unless_forced_with_a_reason() -> None:
    state = state_after(entry("canary", "success", 0), entry("bake", "failed", 10))
    later = T0 + datetime.timedelta(hours=60)
    refused = decide("promote", state=state, changes_groups=1, now=later)
    assert refused.action == REFUSE and "a bake check failed (ledger entry bake-10-failed" in refused.reason
    assert decide("promote", state=state, changes_groups=1, now=later, force_reason="  ").action == REFUSE
    forced = decide("promote", state=state, changes_groups=1, now=T0, force_reason="CVE-2026-1234 fix needed now")
    assert forced.action == RUN and forced.forced
    assert "Reason given: CVE-2026-1234 fix needed now" in forced.reason
    assert "baked 0.0 h" in forced.reason


def test_promote_after_promotion_and_without_canary() -> None:
    promoted = state_after(entry("canary", "success", 0), entry("promote", "success", 50))
    assert decide("promote", state=promoted, changes_groups=1, now=T0).action == NOOP
    nothing = decide("promote", state=CampaignState(""), changes_groups=0, now=T0, promoted_elsewhere=promoted)
    assert nothing.action == NOOP and "promoted already (ledger entry promote-50-success)" in nothing.reason
    assert decide("promote", state=CampaignState(CHANGE), changes_groups=1, now=T0).action == REFUSE
    with pytest.raises(InvalidInputError):
        decide("deploy", state=CampaignState(CHANGE), changes_groups=1, now=T0)


def test_rollback_undoes_the_last_open_change() -> None:
    canary = state_after(entry("canary", "failed", 0))
    decision = decide_rollback(open_states=[canary], rollback_to="auto", has_rollback_stage=True)
    assert decision.action == RUN and decision.rollback_target == "current_production"
    assert "gpu-worker-001" in decision.reason
    promoted = state_after(entry("canary", "success", 0), entry("promote", "success", 50))
    decision = decide_rollback(open_states=[canary, promoted], rollback_to="auto", has_rollback_stage=True)
    assert decision.rollback_target == "rollback"
    assert decide_rollback(open_states=[promoted], rollback_to="auto", has_rollback_stage=False).action == REFUSE
    assert decide_rollback(open_states=[], rollback_to="auto", has_rollback_stage=True).action == NOOP
    asked = decide_rollback(open_states=[], rollback_to="rollback", has_rollback_stage=True)
    assert asked.action == RUN and asked.rollback_target == "rollback"
    with pytest.raises(InvalidInputError):
        decide_rollback(open_states=[], rollback_to="yesterday", has_rollback_stage=True)


FORWARD_TEXT = "The control plane moved: this change can only go forward."
LEDGER_STATES = {
    # name: (entries of the change, oldest first; open after them)
    "nothing": ((), False),
    "canary passed": ((entry("canary", "success", 0),), True),
    "canary failed": ((entry("canary", "failed", 0),), True),
    "canary failed, forward-only": ((entry("canary", "failed", 0, forward_only=FORWARD_TEXT),), True),
    "canary refused at preflight": ((entry("canary", "failed", 0, cluster_changed=False),), False),
    "bake failed": ((entry("canary", "success", 0), entry("bake", "failed", 24)), True),
    "promote failed": ((entry("canary", "success", 0), entry("promote", "failed", 50)), True),
    "promote refused at preflight": (
        (entry("canary", "success", 0), entry("promote", "failed", 50, cluster_changed=False)),
        True,
    ),
    "promoted": ((entry("canary", "success", 0), entry("promote", "success", 50)), True),
    "canary rolled back": ((entry("canary", "failed", 0), entry("rollback", "success", 1)), False),
    "promote failed, rolled back": (
        (entry("canary", "success", 0), entry("promote", "failed", 50), entry("rollback", "success", 51)),
        False,
    ),
    # The software went back, but the gates could not run on the node (cordoned, the API failing them).
    "rolled back unjudged": (
        (entry("canary", "success", 0), entry("rollback", "failed", 1, rolled_back=True, gates_could_not_run=True)),
        False,
    ),
    "rolled back unjudged, then judged": (
        (
            entry("canary", "success", 0),
            entry("rollback", "failed", 1, rolled_back=True, gates_could_not_run=True),
            entry("rollback", "success", 2),
        ),
        False,
    ),
    "rolled back, the node faulty": (
        (entry("canary", "success", 0), entry("rollback", "failed", 1, rolled_back=True)),
        False,
    ),
}
# What stage=rollback (auto) does from each state: action, target, and what its reason names.
ROLLBACK_TABLE = {
    "nothing": (NOOP, "", "Nothing to roll back"),
    "canary passed": (RUN, "current_production", "canary node gpu-worker-001"),
    "canary failed": (RUN, "current_production", "canary node gpu-worker-001"),
    "canary failed, forward-only": (REFUSE, "", "stage=canary"),
    "canary refused at preflight": (NOOP, "", "Nothing to roll back"),
    "bake failed": (RUN, "current_production", "canary node gpu-worker-001"),
    # The halted promotion never rewrote the matrix: current_production is still what most nodes run.
    "promote failed": (RUN, "current_production", "halted promotion"),
    # Refused before any change: the passed canary is what is open, and it goes back alone.
    "promote refused at preflight": (RUN, "current_production", "canary node gpu-worker-001"),
    "promoted": (RUN, "rollback", "the promotion of"),
    "canary rolled back": (NOOP, "", "Nothing to roll back"),
    "promote failed, rolled back": (NOOP, "", "Nothing to roll back"),
    "rolled back unjudged": (RUN, "current_production", "Validating canary node gpu-worker-001 again"),
    "rolled back unjudged, then judged": (NOOP, "", "Nothing to roll back"),
    "rolled back, the node faulty": (NOOP, "", "Nothing to roll back"),
}


@pytest.mark.parametrize("name", sorted(LEDGER_STATES))
def test_rollback_decision_for_every_ledger_state(name: str) -> None:
    entries, is_open = LEDGER_STATES[name]
    states = open_campaigns(list(entries))
    assert bool(states) is is_open, states
    action, target, named = ROLLBACK_TABLE[name]
    unvalidated = None if states else ledger.last_unvalidated(list(entries))
    decision = decide_rollback(open_states=states, rollback_to="auto", has_rollback_stage=True, unvalidated=unvalidated)
    assert (decision.action, decision.rollback_target) == (action, target), decision
    assert named in decision.reason, decision.reason
    if action == REFUSE:
        assert "stage=" in decision.next and "stage=rollback" not in decision.next, decision.next


@pytest.mark.parametrize("name", sorted(n for n, (_entries, is_open) in LEDGER_STATES.items() if is_open))
def test_a_forward_only_group_refuses_every_rollback_naming_the_stage_that_goes_forward(name: str) -> None:
    entries = [{**one, "group": "openshift"} for one in LEDGER_STATES[name][0]]
    (state,) = open_campaigns(entries)
    for asked in ("auto", "rollback", "current_production"):
        decision = decide_rollback(open_states=[state], rollback_to=asked, has_rollback_stage=True)
        assert decision.action == REFUSE and "does not support downgrading" in decision.reason, decision
        assert "Nothing was changed" in decision.reason
        assert "stage=rollback" not in decision.next
    expected = {
        "canary passed": "stage=bake",
        "promote refused at preflight": "stage=bake",
        "promote failed": "stage=promote",
        "promoted": "stage=canary",
    }.get(name, "stage=canary")
    assert expected in decision.next, (name, decision.next)


# -- nodes -----------------------------------------------------------------------------------------


def node(name: str, *, ready: bool = True, unschedulable: bool = False, labels=None, gpus: int = 8) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "allocatable": {"nvidia.com/gpu": str(gpus)},
        },
    }


def test_canary_node_rules() -> None:
    nodes = [node("gpu-worker-003"), node("gpu-worker-001", ready=False), node("gpu-worker-002", unschedulable=True)]
    chosen = choose_canary_node(nodes, label="gpu-canary")
    assert (chosen.node, chosen.problem) == ("gpu-worker-003", "")
    assert "first Ready, schedulable" in chosen.source
    assert choose_canary_node(nodes, label="gpu-canary", matrix_node="gpu-worker-002").node == "gpu-worker-002"
    asked = choose_canary_node(nodes, label="gpu-canary", requested="gpu-worker-001", matrix_node="gpu-worker-002")
    assert (asked.node, asked.source) == ("gpu-worker-001", "variable")
    missing = choose_canary_node(nodes, label="gpu-canary", matrix_node="gpu-worker-404")
    assert "gpu-worker-404 (from the matrix canary_node) is not a GPU node" in missing.problem
    labelled = [*nodes, node("gpu-worker-004", labels={"gpu-canary": "true"})]
    assert choose_canary_node(labelled, label="gpu-canary").node == "gpu-worker-004"
    clash = choose_canary_node(labelled, label="gpu-canary", requested="gpu-worker-003")
    assert "gpu-worker-004 already carries gpu-canary=true" in clash.problem
    nobody = choose_canary_node([node("a", ready=False)], label="gpu-canary")
    assert nobody.problem == "no Ready, schedulable GPU node to be the canary"


def test_free_gpus_and_samples_prefer_nodes_with_room() -> None:
    nodes = [node(f"gpu-worker-00{i}") for i in range(1, 7)]
    pods = [
        {"spec": {"nodeName": "gpu-worker-005", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}},
        {"spec": {"nodeName": "gpu-worker-006", "containers": [{"resources": {"requests": {"nvidia.com/gpu": 7}}}]}},
        {
            "spec": {"nodeName": "gpu-worker-004", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Succeeded"},
        },
    ]
    free = free_gpus(nodes, pods)
    assert free["gpu-worker-005"] == 0 and free["gpu-worker-006"] == 1 and free["gpu-worker-004"] == 8
    names = sorted(free)
    assert sample_nodes(names, size=2, exclude=["gpu-worker-001"]) == ["gpu-worker-002", "gpu-worker-006"]
    assert sample_nodes(names, size=2, exclude=["gpu-worker-001"], free=free, needed=2) == [
        "gpu-worker-002",
        "gpu-worker-004",
    ]
    assert sample_nodes(["a", "b"], size=3, free={"a": 0, "b": 0}, needed=2) == ["a", "b"]
    assert sample_nodes(names, size=0) == []


def test_change_ids_and_planner_steps() -> None:
    first = campaign_id("gpu_operator", {"gpu_driver": "570.124.06", "gpu_operator": "v25.3.0"})
    assert first == campaign_id("gpu_operator", {"gpu_operator": "v25.3.0", "gpu_driver": "570.124.06"})
    assert first != campaign_id("gpu_operator", {"gpu_operator": "v25.3.1", "gpu_driver": "570.124.06"})
    plan = {
        "steps": [
            {
                "step": 1,
                "title": "GPU Operator",
                "changes": [{"component": "gpu_operator", "from": "v24.9.0", "to": "v25.3.0"}],
                "violates": [],
            },
            {
                "step": 2,
                "title": "Network Operator",
                "changes": [{"component": "mofed", "from": "a", "to": "b"}],
                "violates": ["known_versions"],
            },
        ]
    }
    assert describe_steps(plan) == (
        "1. GPU Operator: gpu_operator v24.9.0 -> v25.3.0 2. Network Operator: mofed a -> b [violates known_versions]"
    )


FORWARD = (
    "The control plane runs OpenShift 4.16.21 and OpenShift cannot be downgraded: this change can only go forward."
)


def test_a_canary_that_cannot_be_undone_is_resumed_not_rolled_back() -> None:
    failed = [entry("canary", "failed", 0, forward_only=FORWARD)]
    state = fold_campaign(failed, CHANGE)
    assert state.canary_failed and state.open and state.canary_forward_only == FORWARD
    resume = decide("canary", state=state, changes_groups=1, now=T0)
    assert resume.action == RUN and FORWARD in resume.reason and "Resuming the canary" in resume.reason
    refused = decide_rollback(open_states=[state], rollback_to="auto", has_rollback_stage=True)
    assert refused.action == REFUSE and "cannot be rolled back" in refused.reason and "stage=canary" in refused.reason
    # Resumed and passed: an ordinary passed canary (bake, then promote).
    state = fold_campaign([*failed, entry("canary", "success", 2)], CHANGE)
    assert state.canary_passed and not state.canary_forward_only
    # A canary that can be undone is still refused a re-run before its rollback.
    assert decide("canary", state=state_after(entry("canary", "failed", 0)), changes_groups=1, now=T0).action == REFUSE


def test_a_bake_check_held_by_firing_alerts_is_no_verdict() -> None:
    entries = [
        entry("canary", "success", 0),
        entry("bake", "failed", 12, held_by_alerts=["GPUXidError{Hostname=gpu-worker-003}"]),
    ]
    state = fold_campaign(entries, CHANGE)
    assert state.bake_checks == [] and not state.bake_failed


class _Clock:
    """What ``record`` asks of the API when nothing goes to the cluster: the server's time and its address."""

    host = "https://cluster.example:6443"

    def server_time(self):
        return datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC)


def test_record_in_check_mode_says_changed_and_writes_nothing(tmp_path):
    """check mode predicts what the real run does (changed=True: it appends an entry and writes the reports)."""
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._ledger_run import record

    params = {
        "entry": {"stage": "canary", "outcome": "success", "id": "canary-1"},
        "cluster_name": "",
        "namespace": "ns",
        "configmap_name": "ledger",
        "record_in_cluster": False,
        "ledger_file": str(tmp_path / "ledger.json"),
        "report_dir": str(tmp_path / "reports"),
    }
    checked = record(params, _Clock(), check_mode=True, warn=print)
    assert checked["changed"] is True and not list(tmp_path.iterdir())
    recorded = record(params, _Clock(), check_mode=False, warn=print)
    assert recorded["changed"] is True and read_file_ledger(params["ledger_file"])[0]["id"] == "canary-1"
    assert os.path.isfile(recorded["report_path"])
