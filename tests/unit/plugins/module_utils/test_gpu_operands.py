"""The operands the matrix names with the GPU Operator: what to pin and how to tell they run."""

from __future__ import annotations

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_operands import (
    operand_plan,
    operand_rollout,
    pinned_version,
    release_pins,
)

TARGET = {"dcgm": "4.1.1-4.0.4", "device_plugin": "v0.17.1", "container_toolkit": "v1.17.5", "gpu_driver": "570.124.06"}


def chart_policy() -> dict:
    """The operand sections as the v24.9.0 chart renders them (every one pinned)."""
    return {
        "spec": {
            "toolkit": {"enabled": True, "repository": "nvcr.io/nvidia/k8s", "image": "container-toolkit",
                        "version": "v1.17.0-ubi8"},
            "devicePlugin": {"enabled": True, "repository": "nvcr.io/nvidia", "image": "k8s-device-plugin",
                             "version": "v0.17.0-ubi8"},
            "dcgmExporter": {"enabled": True, "repository": "nvcr.io/nvidia/k8s", "image": "dcgm-exporter",
                             "version": "3.3.8-3.6.0-ubi9"},
            "gfd": {"enabled": True, "repository": "nvcr.io/nvidia", "image": "k8s-device-plugin",
                    "version": "v0.17.0-ubi8"},
        }
    }  # fmt: skip


def daemonset(name: str, image: str, *, desired: int = 6, updated: int = 6, available: int = 6) -> dict:
    return {
        "metadata": {"name": name, "generation": 3},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
        "status": {
            "observedGeneration": 3,
            "desiredNumberScheduled": desired,
            "updatedNumberScheduled": updated,
            "numberAvailable": available,
        },
    }


def test_pinned_operands_get_the_matrix_version_with_their_os_suffix() -> None:
    plan = operand_plan(chart_policy(), TARGET)
    assert plan["patch"] == {
        "spec": {
            "dcgmExporter": {"version": "4.1.1-4.0.4-ubi9"},
            "devicePlugin": {"version": "v0.17.1-ubi8"},
            "gfd": {"version": "v0.17.1-ubi8"},  # the device plugin's image, the device plugin's tag
            "toolkit": {"version": "v1.17.5-ubi8"},
        }
    }
    assert {(o["daemonset"], o["version"]) for o in plan["operands"]} == {
        ("nvidia-dcgm-exporter", "4.1.1-4.0.4-ubi9"),
        ("nvidia-device-plugin-daemonset", "v0.17.1-ubi8"),
        ("gpu-feature-discovery", "v0.17.1-ubi8"),
        ("nvidia-container-toolkit-daemonset", "v1.17.5-ubi8"),
    }


def test_nothing_to_write_when_the_policy_runs_the_target_or_the_target_names_no_operand() -> None:
    current = {"dcgm": "3.3.8-3.6.0", "device_plugin": "v0.17.0", "container_toolkit": "v1.17.0"}
    plan = operand_plan(chart_policy(), current)
    assert plan["patch"] == {} and len(plan["operands"]) == 4 and not any(o["changes"] for o in plan["operands"])
    assert operand_plan(chart_policy(), {"gpu_driver": "570.124.06"}) == {"patch": {}, "operands": []}


def test_unpinned_and_disabled_operands_are_left_to_the_operator() -> None:
    policy = chart_policy()
    policy["spec"]["devicePlugin"] = {"enabled": True}  # the OLM bundle's example: the operator's env decides
    policy["spec"]["dcgmExporter"]["enabled"] = False
    plan = operand_plan(policy, TARGET)
    assert plan["patch"] == {"spec": {"toolkit": {"version": "v1.17.5-ubi8"}}}
    plugin = next(o for o in plan["operands"] if o["field"] == "devicePlugin")
    assert (plugin["pinned"], plugin["version"]) == (False, "")
    assert not any(o["field"] in ("dcgmExporter", "gfd") for o in plan["operands"])


def test_a_version_that_names_its_own_suffix_is_kept() -> None:
    assert pinned_version("device_plugin", wanted="v0.17.1-ubuntu22.04", running="v0.17.0-ubi8") == (
        "v0.17.1-ubuntu22.04"
    )
    assert pinned_version("container_toolkit", wanted="v1.17.5", running="v1.17.0") == "v1.17.5"


def test_rollout_is_done_when_every_pod_runs_the_pinned_tag() -> None:
    (plugin,) = [o for o in operand_plan(chart_policy(), TARGET)["operands"] if o["field"] == "devicePlugin"]
    name = "nvidia-device-plugin-daemonset"
    assert operand_rollout(plugin, daemonset(name, "nvcr.io/nvidia/k8s-device-plugin:v0.17.1-ubi8")) == ""
    assert "runs v0.17.0-ubi8, not v0.17.1-ubi8" in operand_rollout(
        plugin, daemonset(name, "nvcr.io/nvidia/k8s-device-plugin:v0.17.0-ubi8")
    )
    assert "4 of 6 pods updated" in operand_rollout(
        plugin, daemonset(name, "nvcr.io/nvidia/k8s-device-plugin:v0.17.1-ubi8", updated=4)
    )
    assert operand_rollout(plugin, None) == f"DaemonSet {name} not found"


def test_an_unpinned_operand_must_run_the_matrix_version_from_the_release() -> None:
    policy = chart_policy()
    policy["spec"]["devicePlugin"] = {"enabled": True}
    (plugin,) = [o for o in operand_plan(policy, TARGET)["operands"] if o["field"] == "devicePlugin"]
    name = "nvidia-device-plugin-daemonset"
    assert operand_rollout(plugin, daemonset(name, "nvcr.io/nvidia/k8s-device-plugin:v0.17.1-ubi9")) == ""
    assert "pin it in the ClusterPolicy or correct the matrix" in operand_rollout(
        plugin, daemonset(name, "nvcr.io/nvidia/k8s-device-plugin:v0.17.0-ubi9")
    )


def test_the_standalone_host_engine_is_pinned_only_where_it_runs() -> None:
    target = {**TARGET, "dcgm_hostengine": "4.1.1-2"}
    policy = chart_policy()
    policy["spec"]["dcgm"] = {"repository": "nvcr.io/nvidia/cloud-native", "image": "dcgm",
                              "version": "3.3.8-1-ubuntu22.04"}  # fmt: skip
    # Off unless enabled (DCGMSpec.IsEnabled): nothing to pin, nothing to verify.
    assert not any(o["component"] == "dcgm_hostengine" for o in operand_plan(policy, target)["operands"])
    policy["spec"]["dcgm"]["enabled"] = True
    plan = operand_plan(policy, target)
    assert plan["patch"]["spec"]["dcgm"] == {"version": "4.1.1-2-ubuntu22.04"}
    engine = next(o for o in plan["operands"] if o["component"] == "dcgm_hostengine")
    assert (engine["daemonset"], engine["version"]) == ("nvidia-dcgm", "4.1.1-2-ubuntu22.04")
    running = daemonset("nvidia-dcgm", "nvcr.io/nvidia/cloud-native/dcgm:4.1.1-2-ubuntu22.04")
    assert operand_rollout(engine, running) == ""
    exporter = daemonset("nvidia-dcgm", "nvcr.io/nvidia/k8s/dcgm-exporter:4.1.1-4.0.4-ubi9")
    assert "runs no tagged image" in operand_rollout(engine, exporter)


OLD_MANAGER = "nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:b072c579"
NEW_MANAGER = "nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:c525320f"
OLD_DRIVER = "nvcr.io/nvidia/driver@sha256:8a9a9e94"


def driver_set(name: str, owner_uid: str, manager: str, driver: str = OLD_DRIVER) -> dict:
    return {
        "metadata": {"name": name, "ownerReferences": [{"kind": "ClusterPolicy", "uid": owner_uid}]},
        "spec": {"template": {"spec": {"initContainers": [{"name": "k8s-driver-manager", "image": manager}],
                                       "containers": [{"name": "nvidia-driver-ctr", "image": driver}]}}},
    }  # fmt: skip


def olm_policy(manager: dict | None = None, **driver) -> dict:
    """The ClusterPolicy as OLM's alm-examples create it: neither the driver nor its manager names an image."""
    return {"metadata": {"name": "gpu-cluster-policy", "uid": "cp"},
            "spec": {"driver": {"enabled": True, "manager": manager or {}, **driver}}}  # fmt: skip


def test_the_driver_images_the_operator_release_names_are_pinned_to_what_runs() -> None:
    sets = [driver_set("nvidia-driver-daemonset-416", "cp", OLD_MANAGER),
            driver_set("nvidia-driver-daemonset-418", "cp", OLD_MANAGER),
            driver_set("not-ours", "other", NEW_MANAGER)]  # fmt: skip
    found = release_pins(olm_policy(), [], sets)
    assert found["problems"] == [] and found["gitops_changes"] == []
    assert found["pins"] == [
        {
            "kind": "ClusterPolicy",
            "name": "gpu-cluster-policy",
            "images": [{"what": "driver", "image": OLD_DRIVER}, {"what": "driver manager", "image": OLD_MANAGER}],
            "patch": {"spec": {"driver": {"image": OLD_DRIVER, "manager": {"image": OLD_MANAGER}}}},
        }
    ]


def test_a_tagged_driver_is_pinned_as_repository_image_and_version_for_each_pool_to_add_its_os() -> None:
    """A tag carries the OS suffix the operator appends: pinned whole it would get a second one."""
    tag = "mirror.local:5000/nvidia/driver:550.127.05"
    sets = [driver_set("a", "cp", OLD_MANAGER, driver=f"{tag}-rhcos4.16"),
            driver_set("b", "cp", OLD_MANAGER, driver=f"{tag}-rhcos4.18")]  # fmt: skip
    (pin,) = release_pins(olm_policy({"image": OLD_MANAGER}), [], sets)["pins"]
    assert pin["patch"] == {
        "spec": {"driver": {"repository": "mirror.local:5000/nvidia", "image": "driver", "version": "550.127.05"}}
    }
    # A tag that names no driver version cannot be written back: named, not guessed.
    odd = [driver_set("a", "cp", OLD_MANAGER, driver="mirror.local/nvidia/driver:latest")]
    found = release_pins(olm_policy({"image": OLD_MANAGER}), [], odd)
    assert found["pins"] == [] and "names no driver version" in found["problems"][0]


def test_named_images_no_driver_or_no_driver_pods_need_no_pin() -> None:
    sets = [driver_set("nvidia-driver-daemonset", "cp", OLD_MANAGER)]
    manager = {"repository": "nvcr.io/nvidia/cloud-native", "image": "k8s-driver-manager", "version": "v0.7.0"}
    chart = olm_policy(manager, repository="nvcr.io/nvidia", image="driver", version="550.127.05")
    pinned = olm_policy({"image": OLD_MANAGER}, image=OLD_DRIVER)
    for policy, daemonsets in ((chart, sets), (pinned, sets), (olm_policy(), []), (olm_policy(enabled=False), sets),
                               ({}, sets)):  # fmt: skip
        assert release_pins(policy, [], daemonsets) == {"pins": [], "gitops_changes": [], "problems": []}


def test_driver_sets_with_two_images_are_a_rollout_under_way_and_refused() -> None:
    sets = [driver_set("a", "cp", OLD_MANAGER), driver_set("b", "cp", NEW_MANAGER)]
    found = release_pins(olm_policy(), [], sets)
    (pin,) = found["pins"]  # the driver, which both run, is still pinned; the manager is named
    assert [image["what"] for image in pin["images"]] == ["driver"]
    (problem,) = found["problems"]
    assert "ClusterPolicy gpu-cluster-policy run 2 driver manager images" in problem and "under way" in problem


def test_nvidiadriver_owners_are_pinned_each_and_git_takes_the_managed_ones() -> None:
    named = {"repository": "nvcr.io/nvidia", "image": "driver", "version": "550.127.05"}
    crs = [{"metadata": {"name": "default", "uid": "d"}, "spec": {**named, "manager": {}}},
           {"metadata": {"name": "pool-b", "uid": "b"}, "spec": {**named, "manager": {"version": "v0.8.0"}}},
           {"metadata": {"name": "pool-c", "uid": "c"}, "spec": {**named}}]  # fmt: skip
    sets = [driver_set("d-set", "d", OLD_MANAGER), driver_set("b-set", "b", NEW_MANAGER),
            driver_set("c-set", "c", NEW_MANAGER)]  # fmt: skip
    found = release_pins(olm_policy(useNvidiaDriverCRD=True), crs, sets, gitops_managed=["NVIDIADriver/pool-c"])
    assert [(p["kind"], p["name"]) for p in found["pins"]] == [("NVIDIADriver", "default")]
    assert found["pins"][0]["patch"] == {"spec": {"manager": {"image": OLD_MANAGER}}}
    assert found["gitops_changes"] == [
        {"kind": "NVIDIADriver", "name": "pool-c", "patch": {"spec": {"manager": {"image": NEW_MANAGER}}}}
    ]
