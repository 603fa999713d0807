"""Driver target, upgrade_policy validation against the CRD, merge patches and diffs (pure)."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops import patch_leaves
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import (
    BUILTIN_UPGRADE_POLICY_FIELDS,
    DriverTarget,
    apply_merge_patch,
    cluster_policy_patch,
    crd_schema_at,
    desired_nvidia_driver,
    driver_version_of_image,
    effective_upgrade_policy,
    fields_from_schema,
    merge_patch_for,
    normalize_upgrade_policy,
    normalized_for_diff,
    unnamed_driver_image,
)

SHARED_CRDS = pathlib.Path(__file__).resolve().parents[4].parent / "shared" / "reference" / "crds"


def upstream_crd(name: str) -> dict:
    path = SHARED_CRDS / name
    if not path.is_file():
        pytest.skip(f"{path} is not here (the upstream CRDs live in ../shared/reference/crds)")
    return yaml.safe_load(path.read_text())


def policy(**driver) -> dict:
    base = {
        "version": "560.35.03",
        "repository": "nvcr.io/nvidia",
        "image": "driver",
        "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"},
    }
    base.update(driver)
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "gpu-cluster-policy", "resourceVersion": "615", "generation": 3, "uid": "u"},
        "spec": {"driver": base},
        "status": {"state": "ready"},
    }


# -- field sets -------------------------------------------------------------------------------------------


def test_builtin_upgrade_policy_fields_are_the_upstream_crds():
    crd = upstream_crd("nvidia.com_clusterpolicies.yaml")
    served = fields_from_schema(crd_schema_at(crd, ("spec", "driver", "upgradePolicy")))
    assert served == BUILTIN_UPGRADE_POLICY_FIELDS


def test_upstream_nvidiadriver_crd_has_default_and_node_selector():
    crd = upstream_crd("nvidia.com_nvidiadrivers.yaml")
    assert crd_schema_at(crd, ("spec", "default"))["type"] == "boolean"
    assert crd_schema_at(crd, ("spec", "nodeSelector"))["type"] == "object"
    # The ClusterPolicy has no driver nodeSelector: a patch setting it would be pruned silently.
    cluster_policy = upstream_crd("nvidia.com_clusterpolicies.yaml")
    assert crd_schema_at(cluster_policy, ("spec", "driver", "nodeSelector")) is None


def test_schema_at_a_missing_path_is_none():
    assert crd_schema_at({"spec": {"versions": []}}, ("spec", "driver")) is None


# -- upgrade_policy validation ---------------------------------------------------------------------------


def test_unknown_key_is_refused_naming_it_and_the_known_ones():
    with pytest.raises(InvalidInputError) as caught:
        normalize_upgrade_policy({"maxParallelUpgrades": 2, "maxSurge": 1})
    message = caught.value.msg
    assert "'maxSurge'" in message
    assert "prune" in message
    assert "maxUnavailable" in message and "waitForCompletion" in message


def test_unknown_nested_key_is_named_with_its_path():
    with pytest.raises(InvalidInputError, match=r"upgrade_policy\.drain has no field 'timeout'"):
        normalize_upgrade_policy({"drain": {"enable": True, "timeout": 300}})


def test_served_field_set_wins_over_the_builtin_one():
    # An older operator's CRD without podDeletion: the key is refused there.
    older = fields_from_schema(
        {
            "type": "object",
            "properties": {"autoUpgrade": {"type": "boolean"}, "maxUnavailable": {"x-kubernetes-int-or-string": True}},
        }
    )
    with pytest.raises(InvalidInputError, match="podDeletion"):
        normalize_upgrade_policy({"podDeletion": {"force": True}}, fields=older)
    assert normalize_upgrade_policy({"maxUnavailable": "2"}, fields=older) == {"maxUnavailable": 2}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"maxUnavailable": "2"}, {"maxUnavailable": 2}),
        ({"maxUnavailable": "25%"}, {"maxUnavailable": "25%"}),
        ({"maxUnavailable": 3}, {"maxUnavailable": 3}),
        ({"maxParallelUpgrades": "4"}, {"maxParallelUpgrades": 4}),
        ({"autoUpgrade": "true"}, {"autoUpgrade": True}),
        (
            {"drain": {"podSelector": "app=x", "timeoutSeconds": 0}},
            {"drain": {"podSelector": "app=x", "timeoutSeconds": 0}},
        ),
    ],
)
def test_values_are_normalized_to_what_the_controller_reads(given, expected):
    assert normalize_upgrade_policy(given) == expected


@pytest.mark.parametrize(
    "given",
    [
        {"maxUnavailable": "two"},
        {"maxUnavailable": "1.5"},
        {"maxUnavailable": True},
        {"maxParallelUpgrades": -1},
        {"maxParallelUpgrades": "many"},
        {"autoUpgrade": "maybe"},
        {"drain": True},
        {"drain": {"enable": None}},
    ],
)
def test_bad_values_are_refused(given):
    with pytest.raises(InvalidInputError):
        normalize_upgrade_policy(given)


def test_upgrade_policy_must_be_a_mapping():
    with pytest.raises(InvalidInputError, match="mapping"):
        normalize_upgrade_policy(["autoUpgrade"])  # type: ignore[arg-type]
    assert normalize_upgrade_policy(None) == {}


# -- driver target -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["570.124.06", "595.80", " 580.82.07 "])
def test_driver_versions_with_two_or_three_parts(version):
    assert DriverTarget.from_params({"version": version}).version == version.strip()


@pytest.mark.parametrize("value", [None, {}, {"version": ""}, {"version": "latest"}, {"version": "570"}])
def test_driver_version_is_required_and_checked(value):
    with pytest.raises(InvalidInputError, match=r"driver\.version"):
        DriverTarget.from_params(value)


def test_image_fields_default_to_the_objects_own():
    target = DriverTarget(version="570.124.06")
    assert target.fields_for({"repository": "registry.local/nvidia", "image": "driver"}) == {
        "version": "570.124.06",
        "repository": "registry.local/nvidia",
        "image": "driver",
    }
    own = {"repository": "nvcr.io/nvidia", "image": "driver"}
    assert DriverTarget(version="570.124.06", image="driver-ubi9").fields_for(own)["image"] == "driver-ubi9"


def test_a_whole_image_reference_gives_the_repository_and_image_a_version_needs():
    """The operator step pins an unpinned driver to the digest it ran (OLM's ClusterPolicy); a version written then
    needs repository and image beside it, which the reference names."""
    digest = "nvcr.io/nvidia/driver@sha256:8a9a9e9470f64d340a7f3106a03e9622fa98e25368fbfb7ce9c416ad98f6d951"
    wanted = {"version": "570.124.06", "repository": "nvcr.io/nvidia", "image": "driver"}
    target = DriverTarget(version="570.124.06")
    assert target.fields_for({"image": digest}) == wanted
    assert target.fields_for({"image": "mirror.local:5000/nvidia/driver:550.127.05"}) == {
        **wanted,
        "repository": "mirror.local:5000/nvidia",
    }
    patch = cluster_policy_patch({"spec": {"driver": {"image": digest}}}, target=target, upgrade_policy={})
    assert patch == {"spec": {"driver": wanted}}


def test_a_version_for_an_owner_that_names_no_image_is_named_as_unrenderable():
    """OLM's ClusterPolicy names no driver repository, image or version: a version alone is an image the operator
    refuses to render (imagePath), which the runner refuses before any write, naming the settings that fix it."""
    olm = {"spec": {"driver": {"enabled": True}}}
    target = DriverTarget(version="570.124.06")
    patch = cluster_policy_patch(olm, target=target, upgrade_policy={})
    assert patch == {"spec": {"driver": {"version": "570.124.06"}}}
    assert "gpu_operator_driver_repository and gpu_operator_driver_image" in unnamed_driver_image(olm, patch)
    given = DriverTarget(version="570.124.06", repository="nvcr.io/nvidia", image="driver")
    assert unnamed_driver_image(olm, cluster_policy_patch(olm, target=given, upgrade_policy={})) == ""
    assert unnamed_driver_image(olm, {"spec": {"driver": {"upgradePolicy": {"autoUpgrade": True}}}}) == ""


# -- patches --------------------------------------------------------------------------------------------------


def test_cluster_policy_patch_sends_version_repository_and_image_together():
    patch = cluster_policy_patch(policy(), target=DriverTarget(version="570.124.06"), upgrade_policy={})
    assert patch == {"spec": {"driver": {"version": "570.124.06", "repository": "nvcr.io/nvidia", "image": "driver"}}}


def test_cluster_policy_patch_keeps_only_changed_upgrade_policy_fields():
    patch = cluster_policy_patch(
        policy(),
        target=DriverTarget(version="560.35.03"),
        upgrade_policy={"maxParallelUpgrades": 1, "maxUnavailable": 2, "drain": {"enable": False}},
    )
    # 25% -> 2 changes; maxParallelUpgrades is already 1; drain is absent so it is sent.
    assert patch == {"spec": {"driver": {"upgradePolicy": {"maxUnavailable": 2, "drain": {"enable": False}}}}}


def test_nothing_to_change_is_an_empty_patch():
    assert cluster_policy_patch(policy(), target=DriverTarget(version="560.35.03"), upgrade_policy={}) == {}


def test_int_and_string_are_different_values():
    current = policy(upgradePolicy={"maxUnavailable": "2"})
    patch = cluster_policy_patch(current, target=None, upgrade_policy={"maxUnavailable": 2})
    assert patch == {"spec": {"driver": {"upgradePolicy": {"maxUnavailable": 2}}}}


def test_repository_change_alone_still_sends_all_three():
    target = DriverTarget(version="560.35.03", repository="registry.local/nvidia")
    patch = cluster_policy_patch(policy(), target=target, upgrade_policy={})
    assert patch["spec"]["driver"] == {"version": "560.35.03", "repository": "registry.local/nvidia", "image": "driver"}


def test_nvidia_driver_node_selector_is_replaced_with_nulls_for_dropped_keys():
    cr = {"spec": {"version": "560.35.03", "image": "driver", "nodeSelector": {"pool": "a", "zone": "x"}}}
    desired = desired_nvidia_driver(cr, node_selector={"pool": "a", "gpu-canary": "false"})
    assert merge_patch_for(cr, desired) == {"spec": {"nodeSelector": {"zone": None, "gpu-canary": "false"}}}
    after = apply_merge_patch(cr, merge_patch_for(cr, desired))
    assert after["spec"]["nodeSelector"] == {"pool": "a", "gpu-canary": "false"}


def test_nvidia_driver_gets_an_upgrade_policy_only_when_it_has_one():
    bare = {"spec": {"version": "1.0"}}
    assert "upgradePolicy" not in desired_nvidia_driver(bare, upgrade_policy={"maxUnavailable": 1}).get("spec", {})
    own = {"spec": {"version": "1.0", "upgradePolicy": {"maxUnavailable": "25%"}}}
    assert desired_nvidia_driver(own, upgrade_policy={"maxUnavailable": 1})["spec"]["upgradePolicy"] == {
        "maxUnavailable": 1
    }


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        # RFC 7386 section 3 examples.
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    ],
)
def test_apply_merge_patch_follows_rfc7386(target, patch, expected):
    assert apply_merge_patch(target, patch) == expected


def test_patch_leaves_lists_every_path_set():
    leaves = patch_leaves({"spec": {"driver": {"version": "1", "upgradePolicy": {"drain": {"enable": True}}}}})
    assert sorted(leaves) == [
        (("spec", "driver", "upgradePolicy", "drain", "enable"), True),
        (("spec", "driver", "version"), "1"),
    ]


# -- reading objects -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "version"),
    [
        ("nvcr.io/nvidia/driver:570.124.06-rhcos4.16", "570.124.06"),
        ("nvcr.io/nvidia/driver:560.35.03-ubuntu22.04", "560.35.03"),
        ("registry.local:5000/nvidia/driver:595.80-ubuntu24.04", "595.80"),
        ("nvcr.io/nvidia/driver:550.90.07-5.15.0-124-generic-ubuntu22.04", "550.90.07"),
        ("nvcr.io/nvidia/driver@sha256:d15388d4bf95", ""),
        ("nvcr.io/nvidia/driver", ""),
        ("nvcr.io/nvidia/driver:latest", ""),
    ],
)
def test_driver_version_of_image(image, version):
    assert driver_version_of_image(image) == version


def test_normalized_for_diff_drops_status_and_server_fields():
    normalized = normalized_for_diff(
        {
            **policy(),
            "metadata": {
                "name": "p",
                "resourceVersion": "1",
                "uid": "u",
                "managedFields": [{}],
                "creationTimestamp": "t",
                "generation": 2,
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "labels": {"a": "b"},
            },
        }
    )
    assert normalized["metadata"] == {"name": "p", "labels": {"a": "b"}}
    assert "status" not in normalized
    assert normalized_for_diff(None) == {}


def test_effective_policy_fills_chart_defaults():
    assert effective_upgrade_policy(None, {"autoUpgrade": True}) == {
        "autoUpgrade": True,
        "maxParallelUpgrades": 1,
        "maxUnavailable": "25%",
    }
    assert effective_upgrade_policy({"maxUnavailable": 3}, {"drain": {"enable": True}})["maxUnavailable"] == 3
