"""CRDs: served kinds, pruning, defaulting and validation as a real API server applies them.

The reference CRDs are the unmodified upstream manifests in ``<repo>/../shared/reference/crds``;
tests that need them skip when that folder is absent.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet_twin.machinery import errors
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.crd_schema import (
    apply_defaults,
    crds_from_yaml,
    make_crd_admission,
    prune,
    resource_types_from_crd,
    validate,
    walk_schema,
)
from gpufleet_twin.machinery.patching import json_merge_patch
from gpufleet_twin.machinery.registry import Registry, ResourceType
from gpufleet_twin.machinery.store import Store

REFERENCE = Path(__file__).resolve().parents[3].parent / "shared" / "reference"
CRD_DIR = REFERENCE / "crds"


def _load(file_name: str) -> list[ResourceType]:
    if not CRD_DIR.is_dir():
        pytest.skip(f"reference CRDs not available at {CRD_DIR}")
    resource_types: list[ResourceType] = []
    for crd in crds_from_yaml((CRD_DIR / file_name).read_text()):
        resource_types.extend(resource_types_from_crd(crd))
    return resource_types


@pytest.fixture(scope="module")
def cluster_policy_type() -> ResourceType:
    return _load("nvidia.com_clusterpolicies.yaml")[0]


@pytest.fixture(scope="module")
def nvidia_driver_type() -> ResourceType:
    return _load("nvidia.com_nvidiadrivers.yaml")[0]


def _cluster_policy(rtype: ResourceType, **spec: Any) -> dict[str, Any]:
    # Every field the ClusterPolicy schema requires under spec, empty, plus what the test sets.
    required = rtype.schema["properties"]["spec"]["required"]  # type: ignore[index]
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": {**{name: {} for name in required}, **spec},
    }


# -- loading ------------------------------------------------------------------------------------


def test_every_reference_crd_loads() -> None:
    if not CRD_DIR.is_dir():
        pytest.skip(f"reference CRDs not available at {CRD_DIR}")
    files = sorted(CRD_DIR.glob("*.yaml"))
    assert files
    for path in files:
        crds = crds_from_yaml(path.read_text())
        assert crds, path.name
        for crd in crds:
            resource_types = resource_types_from_crd(crd)
            served = [version for version in crd["spec"]["versions"] if version.get("served")]
            assert len(resource_types) == len(served), path.name
            storage = next(version["name"] for version in served if version.get("storage"))
            assert resource_types[0].version == storage
            for rtype in resource_types:
                assert rtype.schema is not None and rtype.schema.get("type") == "object"
                assert rtype.group == crd["spec"]["group"]
                assert rtype.plural == crd["spec"]["names"]["plural"]


@pytest.mark.parametrize(
    ("file_name", "expected"),
    [
        (
            "nvidia.com_clusterpolicies.yaml",
            {
                "kind": "ClusterPolicy",
                "group": "nvidia.com",
                "version": "v1",
                "plural": "clusterpolicies",
                "namespaced": False,
            },
        ),
        (
            "nvidia.com_nvidiadrivers.yaml",
            {"kind": "NVIDIADriver", "version": "v1alpha1", "short_names": ("nvd", "nvdriver", "nvdrivers")},
        ),
        (
            "mellanox.com_nicclusterpolicies.yaml",
            {"kind": "NicClusterPolicy", "group": "mellanox.com", "version": "v1alpha1", "short_names": ("ncp",)},
        ),
        (
            "machineconfiguration.openshift.io_machineconfigpools.yaml",
            {"kind": "MachineConfigPool", "plural": "machineconfigpools", "short_names": ("mcp",), "namespaced": False},
        ),
        (
            "config.openshift.io_clusterversions.yaml",
            {
                "kind": "ClusterVersion",
                "group": "config.openshift.io",
                "singular": "clusterversion",
                "namespaced": False,
            },
        ),
        (
            "sriovnetwork.openshift.io_sriovnetworknodepolicies.yaml",
            {"kind": "SriovNetworkNodePolicy", "namespaced": True},
        ),
    ],
)
def test_reference_crd_names(file_name: str, expected: dict[str, Any]) -> None:
    rtype = _load(file_name)[0]
    for attribute, value in expected.items():
        assert getattr(rtype, attribute) == value, attribute
    assert "status" in rtype.subresources


def test_printer_columns_come_from_the_crd() -> None:
    mcp = _load("machineconfiguration.openshift.io_machineconfigpools.yaml")[0]
    columns = {column.name: column for column in mcp.printer_columns}
    assert columns["Config"].json_path == ".status.configuration.name"
    assert columns["Updated"].json_path == '.status.conditions[?(@.type=="Updated")].status'
    assert columns["MachineCount"].type == "number"
    assert columns["Age"].type == "date"
    cluster_version = _load("config.openshift.io_clusterversions.yaml")[0]
    assert [column.name for column in cluster_version.printer_columns] == [
        "Version",
        "Available",
        "Progressing",
        "Since",
        "Status",
    ]


def test_versions_are_served_storage_first_and_unserved_skipped() -> None:
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "categories": ["all"]},
            "versions": [
                {
                    "name": "v1alpha1",
                    "served": True,
                    "storage": False,
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                },
                {"name": "v0", "served": False, "storage": False},
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas"}},
                    "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size", "priority": 1, "format": "int32"}
                    ],
                    "schema": {"openAPIV3Schema": {"type": "object"}},
                },
            ],
        },
    }
    served = resource_types_from_crd(crd)
    assert [rtype.version for rtype in served] == ["v1", "v1alpha1"]
    v1 = served[0]
    assert v1.subresources == frozenset({"status", "scale"})
    assert v1.singular == "widget" and v1.categories == ("all",) and v1.namespaced
    column = v1.printer_columns[0]
    assert (column.name, column.json_path, column.type, column.priority, column.format) == (
        "Size",
        ".spec.size",
        "integer",
        1,
        "int32",
    )
    assert served[1].subresources == frozenset()


def test_multi_document_yaml_keeps_only_crds() -> None:
    text = "---\nkind: ConfigMap\napiVersion: v1\n---\n---\nkind: CustomResourceDefinition\nspec: {}\n"
    assert [document["kind"] for document in crds_from_yaml(text)] == ["CustomResourceDefinition"]


# -- the ClusterPolicy canary trap ---------------------------------------------------------------


def test_driver_node_selector_is_pruned_silently_and_the_version_stays(cluster_policy_type: ResourceType) -> None:
    stored = _cluster_policy(cluster_policy_type, driver={"version": "550.90.07"})
    patched = json_merge_patch(
        stored, {"spec": {"driver": {"version": "570.86.15", "nodeSelector": {"canary": "true"}}}}
    )
    assert prune(patched, cluster_policy_type.schema) == ["spec.driver.nodeSelector"]  # type: ignore[arg-type]
    assert "nodeSelector" not in patched["spec"]["driver"]
    assert patched["spec"]["driver"]["version"] == "570.86.15"

    # Through the admission hook the write succeeds: no error tells the caller.
    again = json_merge_patch(stored, {"spec": {"driver": {"version": "570.86.15", "nodeSelector": {"canary": "true"}}}})
    make_crd_admission()("UPDATE", cluster_policy_type, again, stored)
    assert again["spec"]["driver"]["version"] == "570.86.15"
    assert "nodeSelector" not in again["spec"]["driver"]


def test_nvidia_driver_keeps_its_node_selector(nvidia_driver_type: ResourceType) -> None:
    driver = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "canary"},
        "spec": {
            "driverType": "gpu",
            "image": "nvcr.io/nvidia/driver",
            "version": "570.86.15",
            "nodeSelector": {"canary": "true"},
        },
    }
    assert prune(driver, nvidia_driver_type.schema) == []  # type: ignore[arg-type]
    apply_defaults(driver, nvidia_driver_type.schema)  # type: ignore[arg-type]
    assert validate(driver, nvidia_driver_type.schema) == []  # type: ignore[arg-type]
    assert driver["spec"]["nodeSelector"] == {"canary": "true"}
    assert driver["spec"]["default"] is False  # "default" is required and defaulted
    assert driver["spec"]["kernelModuleType"] == "auto"


def test_node_selector_values_must_be_strings(nvidia_driver_type: ResourceType) -> None:
    driver = {"spec": {"driverType": "gpu", "image": "i", "default": False, "nodeSelector": {"canary": True}}}
    causes = validate(driver, nvidia_driver_type.schema)  # type: ignore[arg-type]
    assert causes == [
        {
            "reason": "FieldValueTypeInvalid",
            "field": "spec.nodeSelector.canary",
            "message": 'Invalid value: "boolean": spec.nodeSelector.canary in body must be of type string: "boolean"',
        }
    ]


def test_enum_violation_is_a_422_naming_the_field(cluster_policy_type: ResourceType) -> None:
    policy = _cluster_policy(cluster_policy_type, driver={"kernelModuleType": "closed"})
    with pytest.raises(errors.ApiError) as failure:
        make_crd_admission()("CREATE", cluster_policy_type, policy, None)
    assert failure.value.code == 422
    assert failure.value.reason == "Invalid"
    assert failure.value.details["causes"] == [
        {
            "reason": "FieldValueNotSupported",
            "field": "spec.driver.kernelModuleType",
            "message": 'Unsupported value: "closed": supported values: "auto", "open", "proprietary"',
        }
    ]
    assert failure.value.details["group"] == "nvidia.com"
    assert failure.value.message.startswith('ClusterPolicy.nvidia.com "cluster-policy" is invalid: ')
    assert "spec.driver.kernelModuleType" in failure.value.message


@pytest.mark.parametrize("max_unavailable", [1, "25%", 0, "1"])
def test_max_unavailable_is_int_or_string(cluster_policy_type: ResourceType, max_unavailable: object) -> None:
    policy = _cluster_policy(cluster_policy_type, driver={"upgradePolicy": {"maxUnavailable": max_unavailable}})
    make_crd_admission()("CREATE", cluster_policy_type, policy, None)
    assert policy["spec"]["driver"]["upgradePolicy"]["maxUnavailable"] == max_unavailable


@pytest.mark.parametrize("max_unavailable", [True, 2.5, {"percent": 25}, ["25%"]])
def test_max_unavailable_rejects_other_types(cluster_policy_type: ResourceType, max_unavailable: object) -> None:
    policy = _cluster_policy(cluster_policy_type, driver={"upgradePolicy": {"maxUnavailable": max_unavailable}})
    causes = validate(policy, cluster_policy_type.schema)  # type: ignore[arg-type]
    assert [(cause["reason"], cause["field"]) for cause in causes] == [
        ("FieldValueTypeInvalid", "spec.driver.upgradePolicy.maxUnavailable")
    ]
    assert "must be of type integer,string" in causes[0]["message"]


def test_defaults_fill_present_objects_only(cluster_policy_type: ResourceType) -> None:
    policy = _cluster_policy(cluster_policy_type, driver={"upgradePolicy": {"autoUpgrade": True}})
    apply_defaults(policy, cluster_policy_type.schema)  # type: ignore[arg-type]
    upgrade_policy = policy["spec"]["driver"]["upgradePolicy"]
    assert upgrade_policy == {"autoUpgrade": True, "maxParallelUpgrades": 1, "maxUnavailable": "25%"}
    # drain has defaults under it, but no default of its own: it is not created.
    assert "drain" not in upgrade_policy
    assert policy["spec"]["daemonsets"]["updateStrategy"] == "RollingUpdate"
    assert policy["spec"]["driver"]["kernelModuleType"] == "auto"
    assert "mig" not in policy["spec"]


def test_required_fields(cluster_policy_type: ResourceType) -> None:
    policy = _cluster_policy(cluster_policy_type)
    del policy["spec"]["driver"], policy["spec"]["toolkit"]
    causes = validate(policy, cluster_policy_type.schema)  # type: ignore[arg-type]
    assert sorted((cause["field"], cause["reason"], cause["message"]) for cause in causes) == [
        ("spec.driver", "FieldValueRequired", "Required value"),
        ("spec.toolkit", "FieldValueRequired", "Required value"),
    ]


def test_unknown_metadata_fields_are_dropped_too(cluster_policy_type: ResourceType) -> None:
    policy = _cluster_policy(cluster_policy_type)
    policy["metadata"]["labels"] = {"app": "gpu-operator"}
    policy["metadata"]["owner"] = "me"
    policy["bogus"] = {"x": 1}
    assert prune(policy, cluster_policy_type.schema) == ["bogus", "metadata.owner"]  # type: ignore[arg-type]
    assert policy["metadata"] == {"name": "cluster-policy", "labels": {"app": "gpu-operator"}}
    assert policy["apiVersion"] == "nvidia.com/v1" and policy["kind"] == "ClusterPolicy"


def test_real_exported_cluster_policy_is_valid(cluster_policy_type: ResourceType) -> None:
    sample = REFERENCE / "samples" / "clusterpolicy" / "k3s-gpu-operator-v25.3.2-exported-clusterpolicy.yaml"
    if not sample.is_file():
        pytest.skip(f"sample not available at {sample}")
    policy = next(document for document in yaml.safe_load_all(sample.read_text()) if document)
    original = copy.deepcopy(policy)
    assert prune(policy, cluster_policy_type.schema) == []  # type: ignore[arg-type]
    apply_defaults(policy, cluster_policy_type.schema)  # type: ignore[arg-type]
    assert validate(policy, cluster_policy_type.schema) == []  # type: ignore[arg-type]
    assert policy["spec"]["driver"]["version"] == original["spec"]["driver"]["version"]


def test_every_reference_enum_is_enforced() -> None:
    if not CRD_DIR.is_dir():
        pytest.skip(f"reference CRDs not available at {CRD_DIR}")
    checked = 0
    for path in sorted(CRD_DIR.glob("*.yaml")):
        for crd in crds_from_yaml(path.read_text()):
            for rtype in resource_types_from_crd(crd):
                for schema_path, node in walk_schema(rtype.schema):  # type: ignore[arg-type]
                    if "enum" not in node or "[]" in schema_path or ".*" in schema_path:
                        continue
                    obj = _object_at(schema_path, "not-an-allowed-value")
                    causes = [cause for cause in validate(obj, rtype.schema) if cause["field"] == schema_path]  # type: ignore[arg-type]
                    assert [cause["reason"] for cause in causes] in (
                        ["FieldValueNotSupported"],
                        ["FieldValueTypeInvalid", "FieldValueNotSupported"],
                    ), schema_path
                    checked += 1
    assert checked >= 10


def _object_at(dotted: str, value: object) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    node = obj
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return obj


# -- structural schema semantics, on small inline schemas -------------------------------------------

OBJECT = "object"


def test_preserve_unknown_fields_keeps_unknown_but_prunes_known_children() -> None:
    schema = {
        "type": OBJECT,
        "properties": {
            "spec": {
                "type": OBJECT,
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"known": {"type": OBJECT, "properties": {"a": {"type": "string"}}}},
            }
        },
    }
    obj = {"spec": {"anything": {"deep": 1}, "known": {"a": "x", "b": "dropped"}}}
    assert prune(obj, schema) == ["spec.known.b"]
    assert obj == {"spec": {"anything": {"deep": 1}, "known": {"a": "x"}}}


def test_additional_properties_schema_and_true() -> None:
    schema = {
        "type": OBJECT,
        "properties": {
            "labels": {"type": OBJECT, "additionalProperties": {"type": "string"}},
            "byName": {
                "type": OBJECT,
                "additionalProperties": {"type": OBJECT, "properties": {"keep": {"type": "string"}}},
            },
            "free": {"type": OBJECT, "additionalProperties": True},
            "closed": {"type": OBJECT},
        },
    }
    obj = {
        "labels": {"a": "1"},
        "byName": {"x": {"keep": "k", "drop": "d"}},
        "free": {"y": {"z": [1]}},
        "closed": {"gone": 1},
    }
    assert prune(obj, schema) == ["byName.x.drop", "closed.gone"]
    assert obj == {"labels": {"a": "1"}, "byName": {"x": {"keep": "k"}}, "free": {"y": {"z": [1]}}, "closed": {}}


def test_embedded_resources_keep_type_meta_and_object_meta() -> None:
    schema = {
        "type": OBJECT,
        "properties": {
            "template": {
                "type": OBJECT,
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": OBJECT, "properties": {"replicas": {"type": "integer"}}}},
            },
            "items": {"type": "array", "items": {"type": OBJECT, "properties": {"name": {"type": "string"}}}},
        },
    }
    obj = {
        "template": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "bogus": 1},
            "spec": {"replicas": 1, "extra": True},
        },
        "items": [{"name": "a", "x": 1}, {"name": "b"}],
    }
    assert prune(obj, schema) == ["items[0].x", "template.metadata.bogus", "template.spec.extra"]
    assert obj["template"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": {"a": "b"}},
        "spec": {"replicas": 1},
    }


def test_nulls_of_non_nullable_fields_are_dropped_or_defaulted() -> None:
    schema = {
        "type": OBJECT,
        "properties": {
            "plain": {"type": "string"},
            "nullable": {"type": "string", "nullable": True},
            "defaulted": {"type": "string", "default": "d"},
        },
    }
    obj: dict[str, Any] = {"plain": None, "nullable": None, "defaulted": None}
    assert prune(obj, schema) == []
    assert obj == {"nullable": None, "defaulted": None}
    apply_defaults(obj, schema)
    assert obj == {"nullable": None, "defaulted": "d"}
    assert validate(obj, schema) == []


def test_defaults_recurse_into_defaulted_parents_and_list_items() -> None:
    schema = {
        "type": OBJECT,
        "properties": {
            "withDefault": {
                "type": OBJECT,
                "default": {},
                "properties": {"inner": {"type": "integer", "default": 3}},
            },
            "withoutDefault": {"type": OBJECT, "properties": {"inner": {"type": "integer", "default": 3}}},
            "list": {
                "type": "array",
                "items": {"type": OBJECT, "properties": {"action": {"type": "string", "default": "replace"}}},
            },
        },
    }
    obj: dict[str, Any] = {"list": [{}, {"action": "keep"}]}
    apply_defaults(obj, schema)
    assert obj == {"withDefault": {"inner": 3}, "list": [{"action": "replace"}, {"action": "keep"}]}
    assert "withoutDefault" not in obj
    assert schema["properties"]["withDefault"]["default"] == {}  # the schema's default is copied, not shared


@pytest.mark.parametrize(
    ("schema", "value", "reason", "message"),
    [
        (
            {"type": "integer", "minimum": 0},
            -1,
            "FieldValueInvalid",
            "Invalid value: -1: v in body should be greater than or equal to 0",
        ),
        (
            {"type": "integer", "maximum": 10},
            11,
            "FieldValueInvalid",
            "Invalid value: 11: v in body should be less than or equal to 10",
        ),
        (
            {"type": "number", "minimum": 1, "exclusiveMinimum": True},
            1,
            "FieldValueInvalid",
            "Invalid value: 1: v in body should be greater than 1",
        ),
        ({"type": "string", "maxLength": 3}, "abcd", "FieldValueTooLong", "Too long: may not be more than 3 bytes"),
        (
            {"type": "string", "minLength": 2},
            "a",
            "FieldValueInvalid",
            'Invalid value: "a": v in body should be at least 2 chars long',
        ),
        (
            {"type": "string", "pattern": "^[0-9]+\\.[0-9]+$"},
            "v1",
            "FieldValueInvalid",
            "Invalid value: \"v1\": v in body should match '^[0-9]+\\.[0-9]+$'",
        ),
        (
            {"type": "array", "minItems": 1, "items": {"type": "string"}},
            [],
            "FieldValueInvalid",
            "Invalid value: 0: v in body should have at least 1 items",
        ),
        (
            {"type": "array", "maxItems": 1, "items": {"type": "string"}},
            ["a", "b"],
            "FieldValueTooMany",
            "Too many: 2: must have at most 1 item",
        ),
        (
            {"type": "boolean"},
            "true",
            "FieldValueTypeInvalid",
            'Invalid value: "string": v in body must be of type boolean: "string"',
        ),
        (
            {"type": "integer"},
            1.5,
            "FieldValueTypeInvalid",
            'Invalid value: "number": v in body must be of type integer: "number"',
        ),
        (
            {"type": "integer"},
            True,
            "FieldValueTypeInvalid",
            'Invalid value: "boolean": v in body must be of type integer: "boolean"',
        ),
        (
            {"type": "string"},
            None,
            "FieldValueTypeInvalid",
            'Invalid value: "null": v in body must be of type string: "null"',
        ),
        (
            {"type": "integer", "enum": [1, 2]},
            3,
            "FieldValueNotSupported",
            'Unsupported value: 3: supported values: "1", "2"',
        ),
        (
            {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            ["a", "b", "a"],
            "FieldValueDuplicate",
            'Duplicate value: "a"',
        ),
    ],
)
def test_value_validation_messages(schema: dict, value: object, reason: str, message: str) -> None:
    causes = validate({"v": value}, {"type": OBJECT, "properties": {"v": schema}})
    assert [cause["reason"] for cause in causes] == [reason]
    assert causes[0]["message"] == message
    assert causes[0]["field"].startswith("v")


@pytest.mark.parametrize(
    ("value", "valid"),
    [(1, True), (1.0, True), (2.0, True), ("x", True), (None, True), (True, False)],
)
def test_integers_numbers_and_nullable(value: object, valid: bool) -> None:
    schema = {
        "type": OBJECT,
        "properties": {
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "maybe": {"type": "string", "nullable": True},
            "either": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
        },
    }
    obj: dict[str, Any] = {"either": value}
    if isinstance(value, int | float) and not isinstance(value, bool):
        obj.update(count=value, ratio=value)
    if value is None:
        obj = {"maybe": None}
    assert (validate(obj, schema) == []) is valid


def test_list_map_keys_must_be_unique() -> None:
    schema = {
        "type": OBJECT,
        "properties": {
            "env": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": OBJECT, "required": ["name"], "properties": {"name": {"type": "string"}}},
            }
        },
    }
    causes = validate({"env": [{"name": "A"}, {"name": "B"}, {"name": "A"}]}, schema)
    assert causes == [{"reason": "FieldValueDuplicate", "field": "env[2]", "message": 'Duplicate value: {"name":"A"}'}]
    assert validate({"env": [{}]}, schema) == [
        {"reason": "FieldValueRequired", "field": "env[0].name", "message": "Required value"}
    ]


# -- the admission hook ----------------------------------------------------------------------------


def test_admission_ignores_kinds_without_schema() -> None:
    pod_type = ResourceType(group="", version="v1", kind="Pod", plural="pods", namespaced=True)
    pod = {"metadata": {"name": "p"}, "spec": {"anything": True}}
    make_crd_admission()("CREATE", pod_type, pod, None)
    assert pod == {"metadata": {"name": "p"}, "spec": {"anything": True}}


def test_admission_hook_in_a_real_store(cluster_policy_type: ResourceType) -> None:
    registry = Registry()
    registry.add(cluster_policy_type)
    store = Store(registry, SimClock())
    store.add_admission(make_crd_admission())
    created = store.create(cluster_policy_type, _cluster_policy(cluster_policy_type, driver={"version": "550.90.07"}))
    assert created["spec"]["driver"]["kernelModuleType"] == "auto"  # defaulted on create

    update = copy.deepcopy(created)
    update["spec"]["driver"]["nodeSelector"] = {"canary": "true"}
    update["spec"]["driver"]["version"] = "570.86.15"
    updated = store.update(cluster_policy_type, update)
    assert updated["spec"]["driver"]["version"] == "570.86.15"
    assert "nodeSelector" not in updated["spec"]["driver"]

    invalid = copy.deepcopy(updated)
    invalid["spec"]["mig"] = {"strategy": "sometimes"}
    with pytest.raises(errors.ApiError) as failure:
        store.update(cluster_policy_type, invalid)
    assert failure.value.code == 422
    assert failure.value.details["causes"][0]["field"] == "spec.mig.strategy"
    assert (
        store.get(cluster_policy_type, None, "cluster-policy")["metadata"]["resourceVersion"]
        == updated["metadata"]["resourceVersion"]
    )
