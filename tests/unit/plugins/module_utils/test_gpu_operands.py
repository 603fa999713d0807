"""The operands the matrix names with the GPU Operator: what to pin and how to tell they run."""

from __future__ import annotations

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_operands import (
    operand_plan,
    operand_rollout,
    pinned_version,
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
