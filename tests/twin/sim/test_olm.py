"""The twin's OLM model (operators/olm.py): Subscription channel -> InstallPlan -> approval -> new CSV, operator image.

In-process against the store with the core controllers and the GPU Operator
simulation, OLM attached to it with its package (``gpu_operator_olm``) as the composition root does on the
openshift profile, on a fast clock.
"""

from __future__ import annotations

import asyncio
import pathlib
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gpufleet_twin.apiserver.cluster import Twin
from gpufleet_twin.apiserver.server import install_api_machinery
from gpufleet_twin.harness.build import install_core
from gpufleet_twin.harness.seed import SeedSpec, seed_cluster
from gpufleet_twin.kube.state import SimState
from gpufleet_twin.machinery import crd_schema
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.kinds import Kinds
from gpufleet_twin.machinery.registry import Registry, ResourceType
from gpufleet_twin.machinery.store import Store
from gpufleet_twin.operators import gpu_operator as gop
from gpufleet_twin.operators import gpu_operator_olm as gpu_olm
from gpufleet_twin.operators import olm

Obj = dict[str, Any]
NAMESPACE = "nvidia-gpu-operator"
OWN_CRDS = pathlib.Path(__file__).resolve().parents[3] / "twin" / "src" / "gpufleet_twin" / "crds"


def make_twin(profile: str = "openshift", *, olm_cluster_policy: bool = False) -> tuple[Twin, Kinds]:
    clock = SimClock(time_scale=2000.0, start=1_760_000_000.0)
    registry = Registry()
    twin = Twin(registry=registry, store=Store(registry, clock), clock=clock)
    install_api_machinery(twin)
    crd_type = registry.get("apiextensions.k8s.io", "customresourcedefinitions")
    assert crd_type is not None
    for path in sorted(OWN_CRDS.glob("*.yaml")):
        for crd in crd_schema.crds_from_yaml(path.read_text()):
            twin.store.create(crd_type, crd)
    sim = SimState(clock=clock, profile=profile, started_at=clock.now(), olm_cluster_policy=olm_cluster_policy)
    seed_cluster(twin, sim, SeedSpec(nodes=2, profile=profile, workloads=False))
    install_core(twin, sim)
    gpu_olm.attach(twin, gop.install(twin))  # as the composition root does (harness/build.py)
    return twin, Kinds.from_registry(registry)


def kind(twin: Twin, plural: str) -> ResourceType:
    rtype = twin.registry.get(olm.GROUP, plural)
    assert rtype is not None, plural
    return rtype


def run(twin: Twin, scenario: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        twin.start_controllers()
        try:
            await scenario()
        finally:
            await twin.stop_controllers()

    asyncio.run(main())


async def until(check: Callable[[], bool], *, what: str, real_seconds: float = 10.0) -> None:
    deadline = time.monotonic() + real_seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def subscription(twin: Twin) -> Obj:
    return twin.store.get(kind(twin, "subscriptions"), NAMESPACE, gpu_olm.PACKAGE)


def set_channel(twin: Twin, channel: str) -> None:
    def change(sub: Obj) -> None:
        sub["spec"]["channel"] = channel

    twin.store.mutate(kind(twin, "subscriptions"), NAMESPACE, gpu_olm.PACKAGE, change)


def operator_image(twin: Twin, kinds: Kinds) -> str:
    deployment = twin.store.get(kinds.deployment, NAMESPACE, "gpu-operator")
    return deployment["spec"]["template"]["spec"]["containers"][0]["image"]


def test_openshift_seeds_a_subscription_at_the_installed_csv() -> None:
    twin, _kinds = make_twin()
    sub = subscription(twin)
    assert sub["spec"]["channel"] == "v24.9"
    assert sub["spec"]["installPlanApproval"] == "Manual"
    assert sub["status"]["installedCSV"] == "gpu-operator-certified.v24.9.0"
    assert sub["status"]["state"] == "AtLatestKnown"
    assert twin.published["olm"]["channels"]["v25.3"] == ["25.3.0"]


def test_kubernetes_profile_has_no_olm() -> None:
    twin, _kinds = make_twin("kubernetes")
    assert twin.registry.get(olm.GROUP, "subscriptions") is None
    assert "olm" not in twin.published


def test_channel_change_waits_for_approval_then_installs_the_new_csv() -> None:
    twin, kinds = make_twin()
    plans, csvs = kind(twin, "installplans"), kind(twin, "clusterserviceversions")

    async def scenario() -> None:
        set_channel(twin, "v25.3")
        await until(lambda: subscription(twin)["status"].get("state") == "UpgradePending", what="UpgradePending")
        sub_status = subscription(twin)["status"]
        assert sub_status["currentCSV"] == "gpu-operator-certified.v25.3.0"
        plan = twin.store.get(plans, NAMESPACE, sub_status["installPlanRef"]["name"])
        assert plan["spec"]["clusterServiceVersionNames"] == ["gpu-operator-certified.v25.3.0"]
        assert plan["spec"]["approved"] is False
        assert plan["status"]["phase"] == "RequiresApproval"
        # Manual approval: nothing changes however long it waits.
        twin.clock.advance(600)
        await asyncio.sleep(0.05)
        assert operator_image(twin, kinds).endswith(":v24.9.0")

        def approve(obj: Obj) -> None:
            obj["spec"]["approved"] = True

        twin.store.mutate(plans, NAMESPACE, plan["metadata"]["name"], approve)

        def installed() -> bool:
            csv = twin.store.try_get(csvs, NAMESPACE, "gpu-operator-certified.v25.3.0")
            return csv is not None and (csv.get("status") or {}).get("phase") == "Succeeded"

        await until(installed, what="the new CSV to succeed")
        plan = twin.store.get(plans, NAMESPACE, plan["metadata"]["name"])
        assert plan["status"]["phase"] == "Complete"

    run(twin, scenario)
    sub_status = subscription(twin)["status"]
    assert (sub_status["installedCSV"], sub_status["state"]) == ("gpu-operator-certified.v25.3.0", "AtLatestKnown")
    assert twin.store.try_get(csvs, NAMESPACE, "gpu-operator-certified.v24.9.0") is None
    new_csv = twin.store.get(csvs, NAMESPACE, "gpu-operator-certified.v25.3.0")
    assert (new_csv["spec"]["version"], new_csv["spec"]["replaces"]) == ("25.3.0", "gpu-operator-certified.v24.9.0")
    assert operator_image(twin, kinds) == "nvcr.io/nvidia/gpu-operator:v25.3.0"
    deployment = twin.store.get(kinds.deployment, NAMESPACE, "gpu-operator")
    assert deployment["status"]["updatedReplicas"] == deployment["status"]["availableReplicas"] == 1


@pytest.mark.parametrize(
    ("channel", "words"), [("v99.1", "no operators found in channel v99.1"), ("v24.6", "does not downgrade")]
)
def test_unknown_channel_or_downgrade_fails_resolution_without_a_plan(channel: str, words: str) -> None:
    twin, kinds = make_twin()

    async def scenario() -> None:
        set_channel(twin, channel)

        def failed() -> bool:
            conditions = subscription(twin)["status"].get("conditions") or []
            return any(c["type"] == "ResolutionFailed" and c["status"] == "True" for c in conditions)

        await until(failed, what="ResolutionFailed")

    run(twin, scenario)
    condition = subscription(twin)["status"]["conditions"][0]
    assert words in condition["message"]
    assert twin.store.list(kind(twin, "installplans"), NAMESPACE) == []
    assert operator_image(twin, kinds).endswith(":v24.9.0")


def test_automatic_approval_installs_the_channel_head() -> None:
    twin, kinds = make_twin()

    async def scenario() -> None:
        def automatic(sub: Obj) -> None:
            sub["spec"]["installPlanApproval"] = "Automatic"
            sub["spec"]["channel"] = "v25.10"

        twin.store.mutate(kind(twin, "subscriptions"), NAMESPACE, gpu_olm.PACKAGE, automatic)
        await until(
            lambda: subscription(twin)["status"].get("installedCSV") == "gpu-operator-certified.v25.10.1",
            what="the head of v25.10 installed",
        )

    run(twin, scenario)
    assert operator_image(twin, kinds) == "nvcr.io/nvidia/gpu-operator:v25.10.1"


def driver_images(twin: Twin, kinds: Kinds) -> set[tuple[str, str]]:
    """(driver image, k8s-driver-manager image) of every driver DaemonSet's template."""
    found = set()
    for ds in twin.store.list(kinds.daemonset, NAMESPACE):
        if ds["metadata"]["name"].startswith(gop.DRIVER_APP):
            pod = ds["spec"]["template"]["spec"]
            (driver,) = [c["image"] for c in pod["containers"] if c["name"] == "nvidia-driver-ctr"]
            (manager,) = [c["image"] for c in pod["initContainers"] if c["name"] == "k8s-driver-manager"]
            found.add((driver, manager))
    return found


def bundle_images(version: str) -> set[tuple[str, str]]:
    return {(gop.BUNDLE_DRIVER_IMAGES[version][0], gop.BUNDLE_DRIVER_MANAGER_IMAGES[version])}


@pytest.mark.parametrize("olm_policy", [True, False], ids=["as-olm-creates-it", "as-the-chart-pins-it"])
def test_an_operator_upgrade_moves_the_driver_only_where_the_clusterpolicy_names_no_image(olm_policy: bool) -> None:
    """OLM's ClusterPolicy names no driver or driver manager image: the operator takes its bundle's DRIVER_IMAGE and
    DRIVER_MANAGER_IMAGE, so the next CSV changes the driver DaemonSet's template (a driver rollout to the new
    release's default driver); a pinned one keeps it."""
    twin, kinds = make_twin(olm_cluster_policy=olm_policy)
    before = driver_images(twin, kinds)
    if olm_policy:
        assert before == bundle_images("24.9.0")
        assert gop.driver_version_of_image(gop.BUNDLE_DRIVER_IMAGES["24.9.0"][0]) == "550.127.05"
    else:
        assert {manager for _driver, manager in before} == {"nvcr.io/nvidia/cloud-native/k8s-driver-manager:v0.7.0"}

    async def scenario() -> None:
        set_channel(twin, "v25.3")
        await until(lambda: subscription(twin)["status"].get("state") == "UpgradePending", what="UpgradePending")
        approve_referenced_plan(twin, "gpu-operator-certified.v25.3.0")
        await until(lambda: operator_image(twin, kinds).endswith(":v25.3.0"), what="the new operator")
        if olm_policy:
            await until(
                lambda: driver_images(twin, kinds) == bundle_images("25.3.0"),
                what="the new bundle's driver and driver manager in the driver DaemonSet",
            )
        else:
            await asyncio.sleep(0.1)

    run(twin, scenario)
    env = gop.operator_env(twin.store.get(kinds.deployment, NAMESPACE, "gpu-operator"))
    assert env["DRIVER_MANAGER_IMAGE"] == gop.BUNDLE_DRIVER_MANAGER_IMAGES["25.3.0"]
    assert env["OPERATOR_NAMESPACE"] == NAMESPACE  # the bundle's other variables are kept
    if not olm_policy:
        assert driver_images(twin, kinds) == before


def packagemanifest(twin: Twin) -> Obj:
    rtype = twin.registry.get(olm.PACKAGES_GROUP, "packagemanifests")
    assert rtype is not None
    return twin.store.get(rtype, olm.CATALOG_NAMESPACE, gpu_olm.PACKAGE)


def entries(manifest: Obj, channel: str) -> list[str]:
    found = next(c for c in manifest["status"]["channels"] if c["name"] == channel)
    return [entry["name"] for entry in found["entries"]]


def approve_referenced_plan(twin: Twin, csv: str) -> str:
    plans = kind(twin, "installplans")
    name = subscription(twin)["status"]["installPlanRef"]["name"]
    plan = twin.store.get(plans, NAMESPACE, name)
    assert plan["spec"]["clusterServiceVersionNames"] == [csv]

    def approve(obj: Obj) -> None:
        obj["spec"]["approved"] = True

    twin.store.mutate(plans, NAMESPACE, name, approve)
    return name


def test_the_catalog_is_served_as_a_packagemanifest_and_the_operator_deployment_belongs_to_its_csv() -> None:
    twin, kinds = make_twin()
    run(twin, lambda: asyncio.sleep(0.05))
    manifest = packagemanifest(twin)
    assert manifest["metadata"]["labels"]["catalog"] == "certified-operators"
    assert manifest["status"]["packageName"] == gpu_olm.PACKAGE
    assert entries(manifest, "stable")[0] == "gpu-operator-certified.v26.3.0"  # newest first, as the server lists
    assert "gpu-operator-certified.v24.9.0" in entries(manifest, "v24.9")
    deployment = twin.store.get(kinds.deployment, NAMESPACE, "gpu-operator")
    owner = deployment["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("ClusterServiceVersion", "gpu-operator-certified.v24.9.0")


def test_reinstall_of_the_older_version_after_uninstall_keeps_the_clusterpolicy() -> None:
    """OLM's way back: upgrade, delete the Subscription and the CSV (the operator goes, the ClusterPolicy stays), then
    subscribe with startingCSV at the older CSV, Manual: exactly that plan installs it and the operator returns."""
    twin, kinds = make_twin()
    subs, csvs, plans = kind(twin, "subscriptions"), kind(twin, "clusterserviceversions"), kind(twin, "installplans")
    policies = twin.registry.get("nvidia.com", "clusterpolicies")
    assert policies is not None
    old, new = "gpu-operator-certified.v24.9.0", "gpu-operator-certified.v25.3.0"

    def csv_phase(name: str) -> str | None:
        csv = twin.store.try_get(csvs, NAMESPACE, name)
        return None if csv is None else (csv.get("status") or {}).get("phase")

    async def scenario() -> None:
        set_channel(twin, "v25.3")
        await until(lambda: subscription(twin)["status"].get("state") == "UpgradePending", what="UpgradePending")
        approve_referenced_plan(twin, new)
        await until(lambda: csv_phase(new) == "Succeeded", what="v25.3.0 installed")
        # The new CSV adopted the Deployment before the old CSV went: the operator survived the upgrade.
        await asyncio.sleep(0.05)
        assert operator_image(twin, kinds).endswith(":v25.3.0")
        policy_uid = twin.store.list(policies)[0]["metadata"]["uid"]

        twin.store.delete(subs, NAMESPACE, gpu_olm.PACKAGE)
        twin.store.delete(csvs, NAMESPACE, new)
        await until(
            lambda: twin.store.try_get(kinds.deployment, NAMESPACE, "gpu-operator") is None,
            what="the collector to delete the operator Deployment with its CSV",
        )
        assert twin.store.list(policies)[0]["metadata"]["uid"] == policy_uid  # CRs stay

        twin.store.create(
            subs,
            {
                "apiVersion": olm.API_VERSION,
                "kind": "Subscription",
                "metadata": {"name": gpu_olm.PACKAGE, "namespace": NAMESPACE},
                "spec": {
                    "channel": "stable",  # its head (26.3.0) is newer: only the startingCSV is planned first
                    "installPlanApproval": "Manual",
                    "name": gpu_olm.PACKAGE,
                    "source": gpu_olm.CATALOG_SOURCE,
                    "sourceNamespace": olm.CATALOG_NAMESPACE,
                    "startingCSV": old,
                },
            },
        )
        await until(lambda: "installPlanRef" in (subscription(twin).get("status") or {}), what="a plan")
        assert subscription(twin)["status"]["currentCSV"] == old
        twin.clock.advance(300)
        await asyncio.sleep(0.05)
        assert csv_phase(old) is None, "a Manual plan installs nothing before its approval"
        approve_referenced_plan(twin, old)
        await until(lambda: csv_phase(old) == "Succeeded", what="v24.9.0 installed again")
        # Installed, the channel's newer head gets a plan of its own that waits for approval.
        await until(lambda: subscription(twin)["status"].get("currentCSV") != old, what="the upgrade plan")
        twin.clock.advance(300)
        await asyncio.sleep(0.05)

    run(twin, scenario)
    status = subscription(twin)["status"]
    assert (status["installedCSV"], status["state"]) == (old, "UpgradePending")
    pending = twin.store.get(plans, NAMESPACE, status["installPlanRef"]["name"])
    assert (pending["spec"]["clusterServiceVersionNames"], pending["spec"]["approved"]) == (
        ["gpu-operator-certified.v26.3.0"],
        False,
    )
    assert operator_image(twin, kinds) == "nvcr.io/nvidia/gpu-operator:v24.9.0"
    deployment = twin.store.get(kinds.deployment, NAMESPACE, "gpu-operator")
    assert deployment["metadata"]["ownerReferences"][0]["name"] == old
    assert twin.store.try_get(csvs, NAMESPACE, new) is None


def test_a_starting_csv_the_catalog_no_longer_carries_fails_resolution() -> None:
    twin, _kinds = make_twin()
    twin.sim.olm_pruned_bundles.add((gpu_olm.PACKAGE, "24.9.0"))  # what the fault olm_bundle_pruned does
    subs = kind(twin, "subscriptions")

    async def scenario() -> None:
        await until(
            lambda: "gpu-operator-certified.v24.9.0" not in entries(packagemanifest(twin), "stable"),
            what="the PackageManifest without the pruned bundle",
        )
        assert "v24.9" not in {c["name"] for c in packagemanifest(twin)["status"]["channels"]}
        twin.store.delete(subs, NAMESPACE, gpu_olm.PACKAGE)
        twin.store.create(
            subs,
            {
                "apiVersion": olm.API_VERSION,
                "kind": "Subscription",
                "metadata": {"name": gpu_olm.PACKAGE, "namespace": NAMESPACE},
                "spec": {
                    "channel": "stable",
                    "installPlanApproval": "Manual",
                    "name": gpu_olm.PACKAGE,
                    "source": gpu_olm.CATALOG_SOURCE,
                    "sourceNamespace": olm.CATALOG_NAMESPACE,
                    "startingCSV": "gpu-operator-certified.v24.9.0",
                },
            },
        )

        def failed() -> bool:
            conditions = (subscription(twin).get("status") or {}).get("conditions") or []
            return any(c["type"] == "ResolutionFailed" for c in conditions)

        await until(failed, what="ResolutionFailed")

    run(twin, scenario)
    message = subscription(twin)["status"]["conditions"][0]["message"]
    assert "no operators found with name gpu-operator-certified.v24.9.0 in channel stable" in message
    assert twin.store.list(kind(twin, "installplans"), NAMESPACE) == []
