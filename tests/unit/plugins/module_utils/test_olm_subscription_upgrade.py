"""OLM's way forward (olm_subscription_upgrade): which CSV is the target, where OLM is with its plan, what to write,
and the messages a failure names."""

from __future__ import annotations

import functools

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._olm import (
    DEFAULT_PLAN_ADVICE,
    csv_outcome,
    csv_version,
    plan_error,
    plan_state,
    resolution_failure,
    subscription_diff,
    subscription_view,
    target_matches,
    upgrade_decision,
)

PACKAGE = "gpu-operator-certified"
OLD, NEW, NEWER = f"{PACKAGE}.v24.9.0", f"{PACKAGE}.v25.3.0", f"{PACKAGE}.v25.10.1"
is_new = functools.partial(target_matches, target_csv=NEW)


def subscription(*, channel="v24.9", installed=OLD, current=None, plan="", failed="") -> dict:
    status = {"installedCSV": installed, "currentCSV": installed if current is None else current}
    if plan:
        status["installPlanRef"] = {"name": plan, "kind": "InstallPlan"}
    if failed:
        status["conditions"] = [
            {"type": "CatalogSourcesUnhealthy", "status": "False", "message": "all healthy"},
            {"type": "ResolutionFailed", "status": "True", "message": failed},
        ]
    return {"metadata": {"name": "gpu-operator-certified"}, "spec": {"channel": channel}, "status": status}


@pytest.mark.parametrize(
    ("csv", "kwargs", "expected"),
    [
        (NEW, {"target_csv": NEW}, True),
        (NEWER, {"target_csv": NEW}, False),
        ("sriov-network-operator.v4.17.0-202411081408", {"version": "4.17"}, True),
        ("sriov-network-operator.v4.17.0-202411081408", {"version": "v4.17.0"}, True),
        ("sriov-network-operator.v4.170.0", {"version": "4.17"}, False),
        ("sriov-network-operator.v4.16.0", {"version": "4.17"}, False),
        (NEW, {"version": "25.3.0", "package": PACKAGE}, True),
        (NEW, {"version": "25.3.0", "package": "other"}, False),
        ("", {"version": "25.3"}, False),
        (NEW, {}, False),
    ],
)
def test_target_matches(csv, kwargs, expected):
    assert target_matches(csv, **kwargs) is expected


def test_csv_version_and_view():
    assert csv_version("sriov-network-operator.v4.17.0-2024") == "4.17.0-2024"
    assert csv_version("") == ""
    view = subscription_view(subscription(current=NEW, plan="install-abc"))
    assert view == {"channel": "v24.9", "installed": OLD, "current": NEW, "state": "", "install_plan": "install-abc"}
    assert subscription_view({}) == {"channel": "", "installed": "", "current": "", "state": "", "install_plan": ""}


def test_resolution_failure_only_conditions_that_hold():
    assert resolution_failure(subscription(failed="no operators found in channel v99")) == (
        "no operators found in channel v99"
    )
    held_not = subscription()
    held_not["status"]["conditions"] = [{"type": "ResolutionFailed", "status": "False", "message": "old"}]
    assert resolution_failure(held_not) == ""


@pytest.mark.parametrize(
    ("sub", "expected"),
    [
        (subscription(), ""),  # OLM has not looked at the new channel yet
        (subscription(current=NEW), ""),  # resolved, no plan yet
        (subscription(current=NEW, plan="install-a"), "planned"),
        (subscription(installed=NEW, current=NEW, plan="install-a"), "installed"),
        (subscription(current=NEWER, plan="install-b"), "other"),  # the channel's head is past the target
        (subscription(failed="constraints not satisfiable"), "other"),
        # A plan still referenced from before the switch (for the installed CSV) is no answer yet.
        (subscription(current=OLD, plan="install-old"), ""),
    ],
)
def test_plan_state_with_a_target(sub, expected):
    assert plan_state(sub, installed_before=OLD, matches=is_new) == expected


def test_plan_state_without_a_target_takes_what_olm_plans():
    nothing = functools.partial(target_matches, target_csv="")
    assert plan_state(subscription(current=NEWER, plan="p"), installed_before=OLD, matches=nothing,
                      settled_without_target=True) == "planned"  # fmt: skip
    assert plan_state(subscription(), installed_before=OLD, matches=nothing, settled_without_target=True) == (
        "installed"
    )


def test_upgrade_decision():
    moving = upgrade_decision(subscription(), channel="v25.3", matches=is_new, has_target=True)
    assert (moving["switch"], moving["approve"], moving["done"]) == (True, True, False)
    same_channel = upgrade_decision(subscription(channel="v25.3"), channel="v25.3", matches=is_new, has_target=True)
    assert (same_channel["switch"], same_channel["approve"]) == (False, True)
    # Idempotent: the installed CSV is the target, whatever the channel says: nothing to write.
    done = upgrade_decision(subscription(installed=NEW), channel="v25.3", matches=is_new, has_target=True)
    assert (done["switch"], done["approve"], done["done"]) == (False, False, True)
    # Without a target: only a channel switch or a plan OLM already made is a change.
    head = functools.partial(target_matches, target_csv="")
    assert upgrade_decision(subscription(), channel="", matches=head, has_target=False)["done"] is True
    assert upgrade_decision(subscription(current=NEW, plan="p"), channel="", matches=head, has_target=False)["approve"]


def test_plan_error_names_subscription_channel_plan_and_olm_message():
    message = plan_error(
        subscription(channel="v25.3", current=NEWER, plan="p", failed="constraints not satisfiable"),
        name="gpu-operator-certified",
        namespace="nvidia-gpu-operator",
        channel="v25.3",
        target=NEW,
        advice=DEFAULT_PLAN_ADVICE,
    )
    assert message == (
        f"OLM did not plan {NEW} from channel v25.3 of Subscription nvidia-gpu-operator/gpu-operator-certified: it "
        f"plans {NEWER} (ResolutionFailed: constraints not satisfiable). OLM installs the channel's head; pin the "
        "matrix to it or use a catalog that ends at the target"
    )
    bare = plan_error(subscription(current=""), name="s", namespace="n", channel="", target=NEW, advice="")
    assert bare == f"OLM did not plan {NEW} from channel v24.9 of Subscription n/s: it plans nothing"


def test_csv_outcome_and_diff():
    assert csv_outcome(None) == ""
    assert csv_outcome({"status": {"phase": "Installing"}}) == ""
    assert csv_outcome({"status": {"phase": "Succeeded"}}) == "Succeeded"
    assert csv_outcome({"status": {"phase": "Failed", "message": "install timeout"}}) == "Failed"
    before = subscription_view(subscription())
    assert subscription_diff(before, channel="v25.3", installed=NEW) == {
        "before": {"channel": "v24.9", "installedCSV": OLD},
        "after": {"channel": "v25.3", "installedCSV": NEW},
    }
    assert subscription_diff(before, channel="", installed=OLD)["after"]["channel"] == "v24.9"
