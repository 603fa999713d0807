"""MachineConfigPool logic: pool state, degraded nodes, canary pool, pause patches."""

from __future__ import annotations

import datetime

from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_mcp import (
    PAUSED_AT_ANNOTATION,
    SIGNER_NOT_AFTER,
    SIGNER_NOT_BEFORE,
    ca_rotation,
    custom_pool_body,
    degraded_nodes,
    membership_plan,
    over_limit,
    pause_patch,
    pause_plan_checks,
    paused_by,
    paused_hours,
    pool_budget,
    pool_of_config,
    pool_state,
)


def pool(*, paused=False, counts=(3, 3, 3, 0), updated="True", updating="False", degraded="False", gen=(2, 2), **meta):
    machine, updated_count, ready, degraded_count = counts
    return {
        "metadata": {"name": "worker", "generation": gen[0], **meta},
        "spec": {"paused": paused, "configuration": {"name": "rendered-worker-abc"}},
        "status": {
            "observedGeneration": gen[1],
            "machineCount": machine,
            "updatedMachineCount": updated_count,
            "readyMachineCount": ready,
            "degradedMachineCount": degraded_count,
            "conditions": [
                {"type": "Updated", "status": updated},
                {"type": "Updating", "status": updating},
                {"type": "NodeDegraded", "status": degraded, "message": "Node gpu-worker-003 is reporting: x"},
            ],
        },
    }


def node(name, *, config="rendered-worker-abc", state="Done", reason=""):
    annotations = {
        "machineconfiguration.openshift.io/currentConfig": config,
        "machineconfiguration.openshift.io/desiredConfig": config,
        "machineconfiguration.openshift.io/state": state,
        "machineconfiguration.openshift.io/reason": reason,
    }
    return {"metadata": {"name": name, "annotations": annotations, "labels": {"node-role.kubernetes.io/worker": ""}}}


def test_settled_needs_every_count_equal_and_the_generation_observed():
    assert pool_state(pool()).settled
    assert not pool_state(pool(counts=(3, 2, 2, 0), updated="False", updating="True")).settled
    assert not pool_state(pool(gen=(3, 2))).settled  # status older than the spec
    # Real sample (openshift/machine-config-operator PR #4977): UPDATED True but DEGRADED True.
    degraded = pool_state(pool(degraded="True"))
    assert degraded.degraded and not degraded.settled and "gpu-worker-003" in degraded.degraded_message


def test_degraded_nodes_are_named_with_the_daemon_reason_and_only_for_their_pool():
    nodes = [
        node("gpu-worker-001"),
        node("gpu-worker-003", state="Degraded", reason="failed to update OS: rpm-ostree rebase exited with status 1"),
        node("gpu-worker-004", config="rendered-gpu-canary-0f1", state="Degraded", reason="other pool"),
    ]
    assert degraded_nodes(nodes, pool="worker") == [
        {
            "node": "gpu-worker-003",
            "pool": "worker",
            "reason": "failed to update OS: rpm-ostree rebase exited with status 1",
        }
    ]
    assert pool_of_config("rendered-gpu-canary-0f1") == "gpu-canary"


def test_canary_pool_takes_worker_configs_and_selects_its_role_label():
    body = custom_pool_body(name="gpu-canary", paused=True)
    selector = body["spec"]["machineConfigSelector"]["matchExpressions"][0]
    assert selector["values"] == ["worker", "gpu-canary"] and selector["operator"] == "In"
    assert body["spec"]["nodeSelector"] == {"matchLabels": {"node-role.kubernetes.io/gpu-canary": ""}}
    canary = node("gpu-worker-001")
    canary["metadata"]["labels"]["gpu-canary"] = "true"
    former = node("gpu-worker-002")
    former["metadata"]["labels"]["node-role.kubernetes.io/gpu-canary"] = ""
    plan = membership_plan([canary, former, node("gpu-worker-003")], pool="gpu-canary",
                           member_selector={"gpu-canary": "true"})  # fmt: skip
    assert (plan.add, plan.remove) == (["gpu-worker-001"], ["gpu-worker-002"])
    assert membership_plan([former], pool="gpu-canary", member_selector=None).remove == ["gpu-worker-002"]


def test_pause_records_when_and_unpause_forgets_it():
    patch = pause_patch(pool(), paused=True, now="2026-11-22T08:00:00Z", reason="canary")
    assert patch["spec"] == {"paused": True}
    assert patch["metadata"]["annotations"][PAUSED_AT_ANNOTATION] == "2026-11-22T08:00:00Z"
    paused = pool(paused=True, annotations={PAUSED_AT_ANNOTATION: "2026-11-22T08:00:00Z"})
    assert pause_patch(paused, paused=True, now="2026-11-23T00:00:00Z") == {}  # idempotent, age kept
    assert pause_patch(paused, paused=False, now="x") == {
        "spec": {"paused": False},
        "metadata": {"annotations": {PAUSED_AT_ANNOTATION: None}},
    }
    now = datetime.datetime(2026, 11, 23, 8, tzinfo=datetime.UTC)
    assert paused_hours(pool_state(paused), now=now) == 24.0
    assert paused_hours(pool_state(pool()), now=now) is None


def test_paused_hours_reads_a_paused_at_written_with_microseconds():
    # A person (or another tool) may stamp the annotation as metav1.MicroTime does.
    paused = pool(paused=True, annotations={PAUSED_AT_ANNOTATION: "2026-11-22T08:00:00.500000Z"})
    now = datetime.datetime(2026, 11, 22, 20, 0, 0, 500000, tzinfo=datetime.UTC)
    assert paused_hours(pool_state(paused), now=now) == 12.0


NOW = datetime.datetime(2026, 11, 28, 12, 0, tzinfo=datetime.UTC)
# Signer made 200 days before NOW, valid 365 days: the next CA comes at day 292, 92 days after NOW.
SIGNER = {
    "annotations": {
        SIGNER_NOT_BEFORE: (NOW - datetime.timedelta(days=200)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        SIGNER_NOT_AFTER: (NOW + datetime.timedelta(days=165)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
}


def paused_by_oc(hours_ago: float, *, annotated_hours_ago=None):
    stamp = (NOW - datetime.timedelta(hours=hours_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    annotations = {}
    if annotated_hours_ago is not None:
        annotations[PAUSED_AT_ANNOTATION] = (NOW - datetime.timedelta(hours=annotated_hours_ago)).isoformat()
    return pool(
        paused=True,
        annotations=annotations,
        managedFields=[
            {"manager": "installer", "operation": "Update", "time": "2026-01-01T00:00:00Z",
             "fieldsV1": {"f:spec": {"f:maxUnavailable": {}}}},
            {"manager": "oc", "operation": "Update", "time": stamp, "fieldsV1": {"f:spec": {"f:paused": {}}}},
        ],
    )  # fmt: skip


def test_who_paused_is_the_manager_of_spec_paused_and_the_age_the_earliest_known_time():
    state = pool_state(paused_by_oc(10))
    assert (paused_by(state), round(paused_hours(state, now=NOW), 1)) == ("oc", 10.0)
    assert state.summary()["paused_by"] == "oc"
    # This collection's mark, older than the manager's last change, gives the longer (truer) age.
    marked_too = pool_state(paused_by_oc(10, annotated_hours_ago=30))
    assert round(paused_hours(marked_too, now=NOW), 1) == 30.0
    # The mark is written with spec.paused: the pool is this collection's even where the creator owns the field.
    assert paused_by(marked_too) == "gpufleet.upgrade" == marked_too.summary()["paused_by"]
    # No managedFields (stripped, or an old server): the mark says it was this collection.
    marked = pool_state(pool(paused=True, annotations={PAUSED_AT_ANNOTATION: "2026-11-28T10:00:00Z"}))
    assert paused_by(marked) == "gpufleet.upgrade"
    # An unpaused pool was paused by nobody, whoever last wrote spec.paused.
    assert paused_by(pool_state({**paused_by_oc(10), "spec": {"paused": False}})) == ""


def test_ca_rotation_is_at_eighty_percent_of_the_signer_validity_or_unknown():
    rotation = ca_rotation(SIGNER)
    assert rotation.at == NOW + datetime.timedelta(days=92)
    assert ca_rotation(None).at is None and "could not be read" in ca_rotation(None).unknown
    assert "no readable" in ca_rotation({"annotations": {SIGNER_NOT_AFTER: "soon"}}).unknown


def test_a_plan_over_the_limit_is_refused_naming_pool_limit_and_who_paused():
    checks = pause_plan_checks(
        pool_state(paused_by_oc(150)), planned_hours=24, max_pause_hours=168, rotation=ca_rotation(SIGNER), now=NOW
    )
    assert [(c.refuse, c.warning) for c in checks] == [(True, False)]
    assert "worker" in checks[0].message and "openshift_max_pause_hours=168" in checks[0].message
    assert "174.0 h" in checks[0].message and "by oc" in checks[0].message
    fits = pause_plan_checks(
        pool_state(pool()), planned_hours=24, max_pause_hours=168, rotation=ca_rotation(SIGNER), now=NOW
    )
    assert fits == []
    # 0 turns the limit off.
    assert (
        pause_plan_checks(
            pool_state(paused_by_oc(1000)), planned_hours=1, max_pause_hours=0, rotation=ca_rotation(SIGNER), now=NOW
        )
        == []
    )


def test_a_pause_across_the_ca_rotation_is_refused_before_4_13_and_reported_after():
    long_plan = {"planned_hours": 93 * 24, "max_pause_hours": 0, "rotation": ca_rotation(SIGNER), "now": NOW}
    before = pause_plan_checks(pool_state(pool()), **long_plan)
    assert [(c.refuse, c.warning) for c in before] == [(True, False)]
    assert "kubelet client CA rotation" in before[0].message and "before OpenShift 4.13" in before[0].message
    after = pause_plan_checks(pool_state(pool()), ca_synced_when_paused=True, **long_plan)
    assert [(c.refuse, c.warning) for c in after] == [(False, True)]


def test_an_unreadable_rotation_is_could_not_check_never_a_pass():
    checks = pause_plan_checks(
        pool_state(pool()), planned_hours=1, max_pause_hours=168, rotation=ca_rotation(None), now=NOW
    )
    assert [(c.refuse, c.warning) for c in checks] == [(False, True)]
    assert checks[0].message.startswith("could not check")


def test_pools_already_paused_past_the_limit_are_reported_with_who():
    assert over_limit(pool_state(paused_by_oc(200)), max_pause_hours=168, now=NOW) == (
        "MachineConfigPool worker has been paused 200.0 h by oc, over openshift_max_pause_hours=168"
    )
    assert over_limit(pool_state(paused_by_oc(100)), max_pause_hours=168, now=NOW) is None


class SignerApi:
    """The calls read_ca_rotation makes: a SelfSubjectAccessReview, then the Secret's metadata."""

    def __init__(self, *, allowed: bool):
        self.allowed, self.reads = allowed, 0

    def create(self, ref, body, **_):
        assert body["spec"]["resourceAttributes"]["name"] == "kube-apiserver-to-kubelet-signer"
        return {"status": {"allowed": self.allowed}}

    def get_metadata(self, ref, name, *, namespace=None):
        self.reads += 1
        return SIGNER


def test_the_signer_is_read_only_when_the_credentials_may_else_could_not_check():
    from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_runner import read_ca_rotation

    denied = SignerApi(allowed=False)
    rotation = read_ca_rotation(denied)
    assert rotation.at is None and "may not read" in rotation.unknown and denied.reads == 0
    assert read_ca_rotation(SignerApi(allowed=True)).at == NOW + datetime.timedelta(days=92)


def gpu_node(name, *, config="rendered-worker-new", current=None, cordoned=False, ready=True, state="Done"):
    found = node(name, config=config, state=state)
    found["metadata"]["annotations"]["machineconfiguration.openshift.io/currentConfig"] = current or config
    found["spec"] = {"unschedulable": True} if cordoned else {}
    found["status"] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    return found


def test_one_budget_across_pools_counts_nodes_away_in_the_other_pools():
    canary = gpu_node("gpu-worker-001", config="rendered-gpu-canary-new", cordoned=True)
    workers = [gpu_node(f"gpu-worker-00{i}", config="rendered-worker-old") for i in range(2, 5)]
    outside = gpu_node("infra-001", config="rendered-infra-x", ready=False)  # not a budget pool: not counted
    nodes = [canary, *workers, outside]
    members = ["gpu-worker-002", "gpu-worker-003", "gpu-worker-004"]

    def share(budget, target="rendered-worker-new"):
        return pool_budget(
            nodes, pool="worker", members=members, budget_pools=["worker", "gpu-canary"], max_unavailable=budget,
            target=target,
        )  # fmt: skip

    # The cordoned canary node (another pool) uses the whole budget of 1: the worker pool must not roll.
    full = share(1)
    assert full.elsewhere == ("gpu-worker-001",) and full.left == 0 and full.pending == tuple(members)
    assert "used up by gpu-worker-001" in full.refusal() and "pool worker" in full.refusal()
    # A budget of 2 leaves the worker pool one node at a time; 50% of the four GPU nodes is 2 as well.
    assert share(2).left == 1 and not share(2).refusal()
    assert share("50%").budget == 2
    # A pool with nothing left to update takes nothing: no refusal though the budget is spent.
    assert not share(1, target="rendered-worker-old").refusal()


def test_a_member_cordoned_by_someone_else_stalls_its_pool_but_the_daemon_own_cordon_does_not():
    by_hand = gpu_node("gpu-worker-002", config="rendered-worker-old", cordoned=True)
    draining = gpu_node("gpu-worker-003", config="rendered-worker-new", current="rendered-worker-old", cordoned=True,
                        state="Working")  # fmt: skip
    share = pool_budget(
        [by_hand, draining],
        pool="worker",
        members=["gpu-worker-002", "gpu-worker-003"],
        budget_pools=["worker"],
        max_unavailable=2,
        target="rendered-worker-new",
    )
    assert share.stalled == ("gpu-worker-002",)
    assert "oc adm uncordon gpu-worker-002" in share.refusal() and "never be Updated" in share.refusal()
    # Leaving the pool (target None): no roll, but the stall is still refused.
    leaving = pool_budget(
        [by_hand], pool="gpu-canary", members=["gpu-worker-002"], budget_pools=["worker"], max_unavailable=1,
        target=None,
    )  # fmt: skip
    assert leaving.pending == () and leaving.stalled == ("gpu-worker-002",)
