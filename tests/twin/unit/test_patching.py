"""PATCH semantics: RFC 7386, RFC 6902 and Kubernetes strategic merge patch.

The strategic-merge expectations were checked against ``kubectl patch --local``,
which runs the real k8s.io/apimachinery strategicpatch code.
"""

from __future__ import annotations

import copy
import json

import pytest

from gpufleet_twin.machinery import errors
from gpufleet_twin.machinery.patching import (
    PATCH_STRATEGIES,
    apply_patch,
    json_merge_patch,
    json_patch,
    patch_strategy,
    strategic_merge_patch,
)

# -- RFC 7386 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "patch", "expected"),
    [
        # RFC 7386 Appendix A
        ({"a": "b"}, {"a": "c"}, {"a": "c"}),
        ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
        ({"a": "b"}, {"a": None}, {}),
        ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
        ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
        ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
        ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
        ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
        ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
        ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
        ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
        # RFC 7386 section 3
        (
            {"title": "Goodbye!", "author": {"givenName": "John", "familyName": "Doe"}, "tags": ["example", "sample"]},
            {"title": "Hello!", "phoneNumber": "+01-123-456-7890", "author": {"familyName": None}, "tags": ["example"]},
            {
                "title": "Hello!",
                "author": {"givenName": "John"},
                "tags": ["example"],
                "phoneNumber": "+01-123-456-7890",
            },
        ),
    ],
)
def test_rfc7386_examples(target: object, patch: dict, expected: dict) -> None:
    before = copy.deepcopy(target)
    assert json_merge_patch(target, patch) == expected  # type: ignore[arg-type]
    assert target == before


@pytest.mark.parametrize("patch", [["c", "d"], None, "bar", 1])
def test_merge_patch_that_is_not_an_object_is_refused(patch: object) -> None:
    with pytest.raises(errors.ApiError) as failure:
        json_merge_patch({"a": "foo"}, patch)
    assert failure.value.code == 400


def test_merge_patch_result_shares_nothing_with_its_inputs() -> None:
    target = {"spec": {"selector": {"a": "b"}}, "keep": {"x": [1]}}
    patch = {"spec": {"new": {"deep": [1]}}}
    result = json_merge_patch(target, patch)
    result["keep"]["x"].append(2)
    result["spec"]["new"]["deep"].append(2)
    assert target == {"spec": {"selector": {"a": "b"}}, "keep": {"x": [1]}}
    assert patch == {"spec": {"new": {"deep": [1]}}}


# -- RFC 6902 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "operations", "expected"),
    [
        # RFC 6902 Appendix A
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}], {"baz": "qux", "foo": "bar"}),
        (
            {"foo": ["bar", "baz"]},
            [{"op": "add", "path": "/foo/1", "value": "qux"}],
            {"foo": ["bar", "qux", "baz"]},
        ),
        ({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}], {"foo": "bar"}),
        ({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}], {"foo": ["bar", "baz"]}),
        (
            {"baz": "qux", "foo": "bar"},
            [{"op": "replace", "path": "/baz", "value": "boo"}],
            {"baz": "boo", "foo": "bar"},
        ),
        (
            {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}},
            [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}],
            {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}},
        ),
        (
            {"foo": ["all", "grass", "cows", "eat"]},
            [{"op": "move", "from": "/foo/1", "path": "/foo/3"}],
            {"foo": ["all", "cows", "eat", "grass"]},
        ),
        (
            {"baz": "qux", "foo": ["a", 2, "c"]},
            [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}],
            {"baz": "qux", "foo": ["a", 2, "c"]},
        ),
        (
            {"foo": "bar"},
            [{"op": "add", "path": "/child", "value": {"grandchild": {}}}],
            {"foo": "bar", "child": {"grandchild": {}}},
        ),
        ({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}], {"foo": "bar", "baz": "qux"}),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": 10}], {"/": 9, "~1": 10}),
        (
            {"foo": ["bar"]},
            [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}],
            {"foo": ["bar", ["abc", "def"]]},
        ),
        # JSON pointer escaping, as a node label with a slash needs it
        (
            {"metadata": {"labels": {}}},
            [{"op": "add", "path": "/metadata/labels/nvidia.com~1gpu-driver-upgrade.skip", "value": "true"}],
            {"metadata": {"labels": {"nvidia.com/gpu-driver-upgrade.skip": "true"}}},
        ),
        ({"a": 1}, [{"op": "copy", "from": "/a", "path": "/b"}], {"a": 1, "b": 1}),
        ({"a": 1.0}, [{"op": "test", "path": "/a", "value": 1}], {"a": 1.0}),
        # evanphx/json-patch v4, which the API server runs: negative indices count from the end ...
        ({"l": [1, 2, 3]}, [{"op": "remove", "path": "/l/-1"}], {"l": [1, 2]}),
        # ... and "replace" creates a missing object member (kubectl patch --local agrees).
        (
            {"spec": {}},
            [{"op": "replace", "path": "/spec/unschedulable", "value": True}],
            {"spec": {"unschedulable": True}},
        ),
    ],
)
def test_rfc6902_examples(target: dict, operations: list, expected: dict) -> None:
    before = copy.deepcopy(target)
    assert json_patch(target, operations) == expected
    assert target == before


@pytest.mark.parametrize(
    ("target", "operations", "named"),
    [
        ({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}], "operation 0 (test /baz)"),
        ({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}], "operation 0 (add /baz/bat)"),
        ({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}], "operation 0 (test /~01)"),
        ({"a": 1}, [{"op": "test", "path": "/a", "value": True}], "operation 0 (test /a)"),
        (
            {"a": 1},
            [{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/c"}],
            "operation 1 (remove /c)",
        ),
        ({"l": [1]}, [{"op": "add", "path": "/l/5", "value": 2}], "operation 0 (add /l/5)"),
        ({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}], "operation 0 (move /a/b/c)"),
        ({"a": 1}, [{"op": "frobnicate", "path": "/a"}], "operation 0 (frobnicate /a)"),
        ({"a": 1}, [{"op": "add", "path": "/b"}], "operation 0 (add /b)"),
        ({"a": 1}, [{"op": "replace", "path": "", "value": [1]}], "not a JSON object"),
    ],
)
def test_json_patch_failures_are_422_naming_the_operation(target: dict, operations: list, named: str) -> None:
    with pytest.raises(errors.ApiError) as failure:
        json_patch(target, operations)
    assert failure.value.code == 422
    assert failure.value.reason == "Invalid"
    assert failure.value.message.startswith("the server rejected our request due to an error in our request")
    assert named in failure.value.message


def test_json_patch_that_is_not_a_list_is_a_bad_request() -> None:
    with pytest.raises(errors.ApiError) as failure:
        json_patch({"a": 1}, {"op": "remove", "path": "/a"})  # type: ignore[arg-type]
    assert failure.value.code == 400


# -- strategic merge patch -----------------------------------------------------------------------

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "nvidia-driver-daemonset-x",
        "namespace": "gpu-operator",
        "finalizers": ["a", "b"],
        "labels": {"app": "nvidia-driver-daemonset", "tier": "gpu"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u1"}],
    },
    "spec": {
        "containers": [
            {
                "name": "driver",
                "image": "nvcr.io/nvidia/driver:550.90.07",
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                "ports": [{"containerPort": 80}, {"containerPort": 443}],
            },
            {"name": "sidecar", "image": "busybox"},
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
    },
    "status": {
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}],
        "containerStatuses": [{"name": "driver", "ready": False}, {"name": "sidecar", "ready": True}],
    },
}
NODE = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "gpu-node-1", "labels": {"a": "1"}},
    "spec": {"taints": [{"key": "t1", "effect": "NoSchedule"}, {"key": "t2", "effect": "NoExecute"}]},
    "status": {
        "conditions": [{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": "gpu-node-1"}],
    },
}


def smp(target: dict, patch: dict) -> dict:
    before = json.dumps(target, sort_keys=True)
    patch_before = json.dumps(patch, sort_keys=True)
    result = strategic_merge_patch(target, patch, target["kind"])
    assert json.dumps(target, sort_keys=True) == before, "the target must not change"
    assert json.dumps(patch, sort_keys=True) == patch_before, "the patch must not change"
    return result


def test_containers_merge_by_name_and_env_by_name() -> None:
    result = smp(
        POD,
        {
            "spec": {
                "containers": [
                    {
                        "name": "driver",
                        "image": "nvcr.io/nvidia/driver:570.86.15",
                        "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                    }
                ]
            }
        },
    )
    driver, sidecar = result["spec"]["containers"]
    assert driver["image"] == "nvcr.io/nvidia/driver:570.86.15"
    assert driver["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]
    assert driver["ports"] == POD["spec"]["containers"][0]["ports"]
    assert sidecar == {"name": "sidecar", "image": "busybox"}


def test_new_container_is_appended_and_ports_merge_by_container_port() -> None:
    result = smp(
        POD,
        {
            "spec": {
                "containers": [
                    {"name": "driver", "ports": [{"containerPort": 8080}, {"containerPort": 80, "name": "http"}]},
                    {"name": "new", "image": "n"},
                ]
            }
        },
    )
    # Upstream order (kubectl agrees): the patch's items in patch order, and a live-only item
    # goes before a patch item only where the live list orders both.
    assert [container["name"] for container in result["spec"]["containers"]] == ["driver", "new", "sidecar"]
    assert result["spec"]["containers"][0]["ports"] == [
        {"containerPort": 8080},
        {"containerPort": 80, "name": "http"},
        {"containerPort": 443},
    ]


def test_tolerations_have_no_merge_key_and_are_replaced() -> None:
    result = smp(POD, {"spec": {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}})
    assert result["spec"]["tolerations"] == [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]


def test_node_taints_are_replaced_and_conditions_merge_by_type() -> None:
    result = smp(
        NODE,
        {
            "spec": {"unschedulable": True, "taints": [{"key": "t3", "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "KubeletNotReady"}]},
        },
    )
    assert result["spec"] == {"unschedulable": True, "taints": [{"key": "t3", "effect": "NoSchedule"}]}
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady"},
        {"type": "MemoryPressure", "status": "False"},
    ]


def test_node_addresses_merge_by_type() -> None:
    result = smp(NODE, {"status": {"addresses": [{"type": "ExternalIP", "address": "5.6.7.8"}]}})
    # A new element lands before the live ones the patch does not name (kubectl agrees).
    assert [address["type"] for address in result["status"]["addresses"]] == ["ExternalIP", "InternalIP", "Hostname"]


def test_pod_conditions_merge_but_container_statuses_are_replaced() -> None:
    result = smp(
        POD,
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [{"name": "driver", "ready": True}],
            }
        },
    )
    assert result["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
        {"type": "Initialized", "status": "True"},
    ]
    assert result["status"]["containerStatuses"] == [{"name": "driver", "ready": True}]


def test_patch_delete_directive_removes_a_list_element() -> None:
    result = smp(
        POD,
        {
            "spec": {
                "containers": [
                    {"name": "sidecar", "$patch": "delete"},
                    {"name": "driver", "env": [{"name": "A", "$patch": "delete"}]},
                ]
            }
        },
    )
    assert [container["name"] for container in result["spec"]["containers"]] == ["driver"]
    assert result["spec"]["containers"][0]["env"] == [{"name": "B", "value": "2"}]


def test_patch_replace_directive_in_a_list_and_in_a_map() -> None:
    replaced_list = smp(POD, {"spec": {"containers": [{"name": "only", "image": "o"}, {"$patch": "replace"}]}})
    assert replaced_list["spec"]["containers"] == [{"name": "only", "image": "o"}]
    replaced_map = smp(POD, {"spec": {"nodeSelector": {"$patch": "replace", "canary": "true"}}})
    assert replaced_map["spec"]["nodeSelector"] == {"canary": "true"}
    emptied_map = smp(POD, {"spec": {"nodeSelector": {"$patch": "delete"}}})
    assert emptied_map["spec"]["nodeSelector"] == {}


def test_null_deletes_a_map_key() -> None:
    result = smp(POD, {"metadata": {"labels": {"tier": None, "canary": "true"}}, "spec": {"nodeSelector": None}})
    assert result["metadata"]["labels"] == {"app": "nvidia-driver-daemonset", "canary": "true"}
    assert "nodeSelector" not in result["spec"]


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list() -> None:
    added = smp(POD, {"metadata": {"finalizers": ["c", "a"]}})
    # kubectl: patch items first (in patch order) where the live list cannot place them.
    assert added["metadata"]["finalizers"] == ["c", "a", "b"]
    removed = smp(POD, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}})
    assert removed["metadata"]["finalizers"] == ["b"]
    both = smp(POD, {"metadata": {"finalizers": ["c"], "$deleteFromPrimitiveList/finalizers": ["b"]}})
    assert both["metadata"]["finalizers"] == ["c", "a"]


def test_owner_references_merge_by_uid() -> None:
    result = smp(
        POD, {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u2"}]}}
    )
    assert [owner["uid"] for owner in result["metadata"]["ownerReferences"]] == ["u2", "u1"]


def test_retain_keys_clears_the_other_keys() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}},
    }
    result = smp(deployment, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}})
    assert result["spec"]["strategy"] == {"type": "Recreate"}
    volumes = smp(
        {"kind": "Pod", "spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}},
        {"spec": {"volumes": [{"name": "v", "$retainKeys": ["name", "emptyDir"], "emptyDir": {}}]}},
    )
    assert volumes["spec"]["volumes"] == [{"name": "v", "emptyDir": {}}]


def test_set_element_order_orders_the_merged_list() -> None:
    result = smp(
        POD,
        {
            "spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "new"}, {"name": "driver"}],
                "containers": [{"name": "new", "image": "n"}],
            }
        },
    )
    assert [container["name"] for container in result["spec"]["containers"]] == ["sidecar", "new", "driver"]
    reordered = smp(POD, {"metadata": {"$setElementOrder/finalizers": ["b", "a"]}})
    assert reordered["metadata"]["finalizers"] == ["b", "a"]


def test_workload_pod_templates_keep_their_merge_keys() -> None:
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "driver", "image": "old", "env": [{"name": "A", "value": "1"}]}],
                    "tolerations": [{"operator": "Exists"}],
                }
            }
        },
    }
    result = smp(
        daemonset,
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "driver", "image": "new", "env": [{"name": "B", "value": "2"}]}]}
                }
            }
        },
    )
    container = result["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "new"
    assert container["env"] == [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    assert result["spec"]["template"]["spec"]["tolerations"] == [{"operator": "Exists"}]


def test_pdb_selector_is_replaced_whole() -> None:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b", "c": "d"}}},
    }
    result = smp(pdb, {"spec": {"selector": {"matchLabels": {"e": "f"}}}})
    assert result["spec"]["selector"] == {"matchLabels": {"e": "f"}}


def test_merge_key_table() -> None:
    assert patch_strategy("Pod", "spec.containers").merge_key == "name"
    assert patch_strategy("Pod", "spec.containers.env").merge_key == "name"
    assert patch_strategy("Pod", "spec.containers.volumeMounts").merge_key == "mountPath"
    assert patch_strategy("Pod", "spec.containers.ports").merge_key == "containerPort"
    assert patch_strategy("Pod", "spec.hostAliases").merge_key == "ip"
    assert patch_strategy("Pod", "spec.imagePullSecrets").merge_key == "name"
    assert patch_strategy("DaemonSet", "spec.template.spec.initContainers.env").merge_key == "name"
    assert patch_strategy("Node", "status.conditions").merge_key == "type"
    assert patch_strategy("Pod", "metadata.ownerReferences").merge_key == "uid"
    finalizers = patch_strategy("Job", "metadata.finalizers")
    assert finalizers.merges and finalizers.merge_key == ""
    # No patch strategy in k8s.io/api: replaced whole.
    for kind, path in [("Pod", "spec.tolerations"), ("Node", "spec.taints"), ("Pod", "status.containerStatuses")]:
        assert not patch_strategy(kind, path).merges
        assert (kind, path) not in PATCH_STRATEGIES


@pytest.mark.parametrize(
    ("patch", "code", "message"),
    [
        ({"spec": {"containers": [{"image": "x"}]}}, 500, "does not contain declared merge key: name"),
        ({"spec": {"containers": [{"$patch": "merge"}]}}, 500, "merging lists cannot yet be specified in the patch"),
        ({"spec": {"nodeSelector": {"$patch": "merge", "a": "b"}}}, 500, "unknown patch type: merge"),
        ({"spec": {"$retainKeys": ["containers"], "nodeName": "x"}}, 400, "invalid patch format of retainKeys"),
        ({"spec": {"$retainKeys": "containers"}}, 400, "invalid patch format of retainKeys"),
        ({"metadata": {"finalizers": [["x"]]}}, 422, "lists of lists are not supported"),
        (
            {
                "spec": {
                    "$setElementOrder/containers": [{"name": "zz"}],
                    "containers": [{"name": "driver", "image": "q"}],
                }
            },
            500,
            "doesn't match $setElementOrder list",
        ),
    ],
)
def test_strategic_merge_errors_have_the_real_status(patch: dict, code: int, message: str) -> None:
    with pytest.raises(errors.ApiError) as failure:
        strategic_merge_patch(POD, patch, "Pod")
    assert failure.value.code == code
    assert message in failure.value.message


# -- dispatch by media type ------------------------------------------------------------------------


def test_apply_patch_dispatches_on_the_media_type() -> None:
    node = copy.deepcopy(NODE)
    merged = apply_patch(
        node, b'{"spec":{"taints":null}}', "application/merge-patch+json", kind="Node", strategic_supported=True
    )
    assert "taints" not in merged["spec"]
    patched = apply_patch(
        node,
        b'[{"op":"add","path":"/spec/unschedulable","value":true}]',
        "application/json-patch+json; charset=utf-8",
        kind="Node",
        strategic_supported=True,
    )
    assert patched["spec"]["unschedulable"] is True
    strategic = apply_patch(
        node,
        b'{"status":{"conditions":[{"type":"Ready","status":"False"}]}}',
        "Application/Strategic-Merge-Patch+JSON",
        kind="Node",
        strategic_supported=True,
    )
    assert [condition["status"] for condition in strategic["status"]["conditions"]] == ["False", "False"]
    assert node == NODE


@pytest.mark.parametrize(
    ("content_type", "strategic_supported"),
    [
        ("application/strategic-merge-patch+json", False),  # custom resources: 415, as the real server
        ("application/apply-patch+yaml", True),  # server-side apply is not implemented
        ("application/json", True),
        ("", True),
    ],
)
def test_unsupported_patch_media_types_are_415(content_type: str, strategic_supported: bool) -> None:
    with pytest.raises(errors.ApiError) as failure:
        apply_patch({"spec": {}}, b"{}", content_type, kind="ClusterPolicy", strategic_supported=strategic_supported)
    assert failure.value.code == 415
    assert failure.value.reason == "UnsupportedMediaType"


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"{not json", "application/merge-patch+json"),
        (b"\xff\xfe", "application/json-patch+json"),
        (b'{"op":"add"}', "application/json-patch+json"),
        (b"[1,2]", "application/strategic-merge-patch+json"),
    ],
)
def test_undecodable_patch_bodies_are_400(body: bytes, content_type: str) -> None:
    with pytest.raises(errors.ApiError) as failure:
        apply_patch({"spec": {}}, body, content_type, kind="Pod", strategic_supported=True)
    assert failure.value.code == 400
