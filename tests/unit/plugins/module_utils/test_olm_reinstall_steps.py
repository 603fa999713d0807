"""OLM's way back (uninstall, install the older CSV): what the catalog serves and which steps are left."""

from __future__ import annotations

import json

from ansible_collections.gpufleet.upgrade.plugins.module_utils._olm import (
    catalog_channels,
    choose_channel,
    reinstall_steps,
)

PACKAGE = "gpu-operator-certified"
OLD, NEW = f"{PACKAGE}.v24.9.0", f"{PACKAGE}.v25.3.0"


def manifest(channels: dict[str, list[str]], package: str = PACKAGE) -> dict:
    """A PackageManifest as the package server serves it: entries newest first."""
    return {
        "metadata": {
            "name": package,
            "namespace": "openshift-marketplace",
            "labels": {"catalog": "certified-operators"},
        },
        "status": {
            "packageName": package,
            "catalogSource": "certified-operators",
            "channels": [
                {
                    "name": name,
                    "currentCSV": f"{package}.v{versions[0]}",
                    "entries": [{"name": f"{package}.v{v}", "version": v} for v in versions],
                }
                for name, versions in channels.items()
            ],
        },
    }


CATALOG = [manifest({"v24.9": ["24.9.2", "24.9.0"], "v25.3": ["25.3.0"], "stable": ["25.3.0", "24.9.2", "24.9.0"]})]


def upgraded_subscription() -> dict:
    return {
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "Subscription",
        "metadata": {
            "name": PACKAGE,
            "namespace": "nvidia-gpu-operator",
            "uid": "u1",
            "resourceVersion": "42",
            "labels": {f"operators.coreos.com/{PACKAGE}.nvidia-gpu-operator": ""},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "gpu"},
        },
        "spec": {
            "channel": "v25.3",
            "installPlanApproval": "Automatic",
            "name": PACKAGE,
            "source": "certified-operators",
            "sourceNamespace": "openshift-marketplace",
            "config": {"env": [{"name": "HTTP_PROXY", "value": "http://proxy:3128"}]},
        },
        "status": {"installedCSV": NEW, "currentCSV": NEW, "state": "AtLatestKnown"},
    }


def csv(name: str) -> dict:
    return {"metadata": {"name": name, "namespace": "nvidia-gpu-operator"}}


def test_channels_that_carry_a_bundle_as_entry_or_head() -> None:
    assert catalog_channels(CATALOG, package=PACKAGE, csv=OLD) == ["v24.9", "stable"]
    assert catalog_channels(CATALOG, package=PACKAGE, csv=f"{PACKAGE}.v24.6.0") == []
    assert catalog_channels(CATALOG, package="other", csv=OLD) == []
    head_only = [{"status": {"packageName": PACKAGE, "channels": [{"name": "v24.9", "currentCSV": OLD}]}}]
    assert catalog_channels(head_only, package=PACKAGE, csv=OLD) == ["v24.9"]


def test_channel_choice_asked_then_release_line_then_own_then_first() -> None:
    assert choose_channel(["v24.9", "stable"], preferred="stable", version="24.9.0", current="v25.3") == "stable"
    assert choose_channel(["v24.9", "stable"], preferred="", version="v24.9.0", current="v25.3") == "v24.9"
    assert choose_channel(["stable"], preferred="", version="24.9.0", current="stable") == "stable"
    assert choose_channel(["fast"], preferred="v9", version="24.9.0", current="v25.3") == "fast"
    assert choose_channel([], preferred="", version="24.9.0", current="v25.3") == ""


def test_first_run_uninstalls_then_subscribes_at_the_older_csv_keeping_the_subscriptions_settings() -> None:
    steps = reinstall_steps(
        subscription=upgraded_subscription(),
        saved=None,
        csvs=[csv(NEW), csv("other-operator.v1.0.0")],
        manifests=CATALOG,
        package=PACKAGE,
        target_version="24.9.0",
    )
    assert steps["error"] == ""
    assert (steps["from_csv"], steps["target_csv"], steps["channel"]) == (NEW, OLD, "v24.9")
    assert steps["delete_subscription"] is True and steps["create_subscription"] is True
    assert steps["delete_csvs"] == [NEW]  # only this package's
    created = steps["subscription"]
    assert created["spec"]["startingCSV"] == OLD and created["spec"]["installPlanApproval"] == "Manual"
    assert created["spec"]["channel"] == "v24.9" and created["spec"]["config"]["env"][0]["name"] == "HTTP_PROXY"
    assert created["metadata"]["annotations"] == {"team": "gpu", "gpufleet.io/reinstalled-from": NEW}
    assert "uid" not in created["metadata"] and "status" not in created
    assert "kubectl.kubernetes.io/last-applied-configuration" not in steps["original"]["metadata"]["annotations"]


def test_a_rerun_after_the_subscription_was_deleted_continues_from_the_saved_one() -> None:
    first = reinstall_steps(
        subscription=upgraded_subscription(), saved=None, csvs=[csv(NEW)], manifests=CATALOG, package=PACKAGE,
        target_version="24.9.0",
    )  # fmt: skip
    saved = {"subscription": json.dumps(first["original"]), "from_csv": NEW}
    # Killed after the Subscription went, before the CSV: the CSV is deleted, the Subscription created.
    steps = reinstall_steps(
        subscription=None, saved=saved, csvs=[csv(NEW)], manifests=CATALOG, package=PACKAGE, target_version="24.9.0"
    )
    assert (steps["delete_subscription"], steps["delete_csvs"], steps["create_subscription"]) == (False, [NEW], True)
    assert steps["subscription"] == first["subscription"]
    # Killed after the new Subscription was created: nothing is deleted or created again, the install goes on.
    ours = {**first["subscription"], "status": {"currentCSV": OLD, "installPlanRef": {"name": "install-x"}}}
    steps = reinstall_steps(
        subscription=ours, saved=saved, csvs=[], manifests=CATALOG, package=PACKAGE, target_version="24.9.0"
    )
    assert (steps["delete_subscription"], steps["delete_csvs"], steps["create_subscription"]) == (False, [], False)
    assert steps["from_csv"] == NEW and steps["error"] == ""


def test_a_catalog_without_the_older_bundle_is_an_error_naming_what_it_serves() -> None:
    pruned = [manifest({"v25.3": ["25.3.0"], "stable": ["25.3.0", "24.9.2"]})]
    steps = reinstall_steps(
        subscription=upgraded_subscription(), saved=None, csvs=[csv(NEW)], manifests=pruned, package=PACKAGE,
        target_version="24.9.0",
    )  # fmt: skip
    assert f"no longer carries the bundle {OLD}" in steps["error"]
    assert "certified-operators (openshift-marketplace)" in steps["error"]
    assert "stable: 25.3.0, 24.9.2" in steps["error"]


def test_nothing_to_reinstall_from_is_an_error() -> None:
    steps = reinstall_steps(
        subscription=None, saved=None, csvs=[], manifests=CATALOG, package=PACKAGE, target_version="24.9.0"
    )
    assert "no Subscription of gpu-operator-certified to reinstall from" in steps["error"]
    assert steps["subscription"] == {}
