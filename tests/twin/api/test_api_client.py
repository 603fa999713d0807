"""The REST verbs through the ``kubernetes`` Python client (and raw HTTP where the client cannot say it)."""

from __future__ import annotations

import base64
import json

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException


def test_create_get_update_with_stale_resource_version_conflicts(core, namespace):
    created = core.create_namespaced_config_map(namespace, {"metadata": {"name": "state"}, "data": {"step": "1"}})
    assert created.metadata.uid and created.metadata.resource_version
    first = core.read_namespaced_config_map("state", namespace)
    first.data["step"] = "2"
    updated = core.replace_namespaced_config_map("state", namespace, first)
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    first.data["step"] = "3"  # still carries the resourceVersion read before the update
    with pytest.raises(ApiException) as conflict:
        core.replace_namespaced_config_map("state", namespace, first)
    assert conflict.value.status == 409
    assert json.loads(conflict.value.body)["reason"] == "Conflict"
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "state"}})
    assert exists.value.status == 409
    assert json.loads(exists.value.body)["reason"] == "AlreadyExists"


def test_namespaced_create_into_a_missing_namespace_is_404(core):
    with pytest.raises(ApiException) as missing:
        core.create_namespaced_config_map("no-such-namespace", {"metadata": {"name": "x"}})
    assert missing.value.status == 404
    assert json.loads(missing.value.body)["details"]["kind"] == "namespaces"


def test_invalid_objects_are_422(core, namespace):
    with pytest.raises(ApiException) as invalid:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "Not_A_Name"}})
    assert invalid.value.status == 422
    with pytest.raises(ApiException) as no_containers:
        core.create_namespaced_pod(namespace, {"metadata": {"name": "empty"}, "spec": {"containers": []}})
    assert no_containers.value.status == 422
    assert json.loads(no_containers.value.body)["details"]["causes"][0]["field"] == "spec.containers"


def test_pod_creation_defaults_what_drain_and_describe_read(core, namespace):
    pod = core.create_namespaced_pod(
        namespace, {"metadata": {"name": "defaults"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    )
    assert pod.status.phase == "Pending"
    assert pod.spec.restart_policy == "Always"
    assert pod.spec.scheduler_name == "default-scheduler"
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.spec.containers[0].termination_message_policy == "File"
    assert pod.spec.containers[0].image_pull_policy == "Always"  # no tag means latest
    assert pod.status.qos_class == "BestEffort"
    assert pod.spec.service_account_name == "default" and pod.spec.enable_service_links is True


def test_a_resource_given_only_as_a_limit_is_requested_at_that_limit(core, namespace):
    # SetDefaults_Pod: what kubectl describe node and anything summing requests count as held.
    container = {"name": "c", "image": "cuda:12.4", "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2"}}}
    spec = {"containers": [container]}
    pod = core.create_namespaced_pod(namespace, {"metadata": {"name": "gpu-limit"}, "spec": spec})
    assert pod.spec.containers[0].resources.requests == {"nvidia.com/gpu": "1", "cpu": "2"}
    explicit = {**container, "resources": {"limits": {"cpu": "2"}, "requests": {"cpu": "500m"}}}
    pod = core.create_namespaced_pod(
        namespace, {"metadata": {"name": "cpu-request"}, "spec": {"containers": [explicit]}}
    )
    assert pod.spec.containers[0].resources.requests == {"cpu": "500m"}


def test_dry_run_validates_and_changes_nothing(core, namespace):
    rv_before = core.list_namespaced_config_map(namespace).metadata.resource_version
    dry = core.create_namespaced_config_map(namespace, {"metadata": {"name": "dry"}}, dry_run="All")
    assert dry.metadata.name == "dry"
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("dry", namespace)
    assert missing.value.status == 404
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "kept"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("kept", namespace, {"data": {"a": "2"}}, dry_run="All")
    core.delete_namespaced_config_map("kept", namespace, dry_run="All")
    assert core.read_namespaced_config_map("kept", namespace).data == {"a": "1"}
    with pytest.raises(ApiException) as bad:
        core.create_namespaced_config_map(namespace, {"metadata": {"name": "x"}}, dry_run="Some")
    assert bad.value.status == 400
    assert int(core.list_namespaced_config_map(namespace).metadata.resource_version) > int(rv_before)


def test_delete_options_preconditions_and_grace(core, kit, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "guarded"}})
    with pytest.raises(ApiException) as stale:
        core.delete_namespaced_config_map(
            "guarded", namespace, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="0000"))
        )
    assert stale.value.status == 409
    status = core.delete_namespaced_config_map("guarded", namespace)
    assert (status if isinstance(status, dict) else status.to_dict())["status"] == "Success"
    node = kit.node(kit.unique("node"))["metadata"]["name"]
    kit.running_pod(namespace, "graceful", node=node)
    terminating = core.delete_namespaced_pod("graceful", namespace, grace_period_seconds=45)
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 45
    assert core.read_namespaced_pod("graceful", namespace).metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("graceful", namespace, grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("graceful", namespace)
    assert gone.value.status == 404
    # An unscheduled pod goes at once.
    core.create_namespaced_pod(
        namespace, {"metadata": {"name": "unbound"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}
    )
    core.delete_namespaced_pod("unbound", namespace)
    assert not core.list_namespaced_pod(namespace, field_selector="metadata.name=unbound").items


def test_cascading_and_orphaning_deletion(twin, namespace):
    apps = "/apis/apps/v1/namespaces/" + namespace
    owner = twin.request(
        "POST",
        f"{apps}/replicasets",
        body={
            "metadata": {"name": "rs"},
            "spec": {
                "selector": {"matchLabels": {"app": "rs"}},
                "template": {
                    "metadata": {"labels": {"app": "rs"}},
                    "spec": {"containers": [{"name": "c", "image": "i:1"}]},
                },
            },
        },
    ).json()
    reference = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "rs",
        "uid": owner["metadata"]["uid"],
        "controller": True,
    }
    for name in ("child-1", "child-2"):
        made = twin.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/configmaps",
            body={"metadata": {"name": name, "ownerReferences": [reference]}},
        )
        assert made.status == 201
    orphan = twin.request("DELETE", f"{apps}/replicasets/rs", body={"propagationPolicy": "Orphan"})
    assert orphan.status == 200
    kept = twin.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/child-1").json()
    assert kept["metadata"].get("ownerReferences") in (None, [])
    # Background (the default): dependents go with their owner.
    second = twin.request("POST", f"{apps}/replicasets", body=dict(owner, metadata={"name": "rs2"})).json()
    reference["uid"], reference["name"] = second["metadata"]["uid"], "rs2"
    twin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"metadata": {"name": "child-3", "ownerReferences": [reference]}},
    )
    assert twin.request("DELETE", f"{apps}/replicasets/rs2").status == 200
    assert twin.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/child-3").status == 404


def test_deletecollection_with_a_label_selector(core, namespace):
    for index in range(3):
        core.create_namespaced_config_map(
            namespace, {"metadata": {"name": f"batch-{index}", "labels": {"batch": "yes"}}}
        )
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "keep"}})
    core.delete_collection_namespaced_config_map(namespace, label_selector="batch=yes")
    assert [cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items] == ["keep"]


def test_status_subresource_and_nodes_status(core, kit):
    name = kit.unique("node")
    kit.node(name)
    core.patch_node_status(name, {"status": {"allocatable": {"nvidia.com/gpu": "8"}}})
    core.patch_node(name, {"status": {"allocatable": {"nvidia.com/gpu": "0"}}, "metadata": {"labels": {"x": "y"}}})
    node = core.read_node(name)
    # The main resource ignores status and the status subresource ignores the rest.
    assert node.status.allocatable == {"nvidia.com/gpu": "8"}
    assert node.metadata.labels["x"] == "y"
    assert core.read_node_status(name).status.allocatable == {"nvidia.com/gpu": "8"}


def test_deployment_scale_subresource(api_client, namespace):
    apps = client.AppsV1Api(api_client)
    apps.create_namespaced_deployment(
        namespace,
        {
            "metadata": {"name": "op"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "op"}},
                "template": {
                    "metadata": {"labels": {"app": "op"}},
                    "spec": {"containers": [{"name": "c", "image": "i:1"}]},
                },
            },
        },
    )
    scale = apps.read_namespaced_deployment_scale("op", namespace)
    assert scale.spec.replicas == 2 and scale.status.selector == "app=op"
    apps.patch_namespaced_deployment_scale("op", namespace, {"spec": {"replicas": 0}})
    assert apps.read_namespaced_deployment("op", namespace).spec.replicas == 0
    scale = apps.read_namespaced_deployment_scale("op", namespace)
    scale.spec.replicas = 3
    apps.replace_namespaced_deployment_scale("op", namespace, scale)
    assert apps.read_namespaced_deployment("op", namespace).spec.replicas == 3
    # Three spec changes, three generations; a label is not the spec.
    apps.patch_namespaced_deployment("op", namespace, {"metadata": {"labels": {"team": "gpu"}}})
    assert apps.read_namespaced_deployment("op", namespace).metadata.generation == 3


def test_only_kinds_with_a_reconciled_spec_count_generations(core, namespace):
    # As kube-apiserver 1.32: ConfigMaps, Pods and Nodes carry no metadata.generation at all.
    configmap = core.create_namespaced_config_map(namespace, {"metadata": {"name": "g"}, "data": {"a": "1"}})
    assert configmap.metadata.generation is None
    patched = core.patch_namespaced_config_map("g", namespace, {"data": {"a": "2"}})
    assert patched.metadata.generation is None
    pod = {"metadata": {"name": "g"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}
    assert core.create_namespaced_pod(namespace, pod).metadata.generation is None
    assert all(node.metadata.generation is None for node in core.list_node().items)


def test_list_has_kind_api_version_and_resource_version(twin, namespace):
    listed = twin.request("GET", f"/api/v1/namespaces/{namespace}/configmaps").json()
    assert listed["kind"] == "ConfigMapList" and listed["apiVersion"] == "v1"
    assert int(listed["metadata"]["resourceVersion"]) > 0


def test_pagination_over_1200_nodes(core, kit):
    label = kit.unique("page")
    names = [f"{label}-{index:04d}" for index in range(1200)]
    for name in names:
        core.create_node({"metadata": {"name": name, "labels": {"page": label}}})
    try:
        total = len(core.list_node().items)
        first = core.list_node(limit=500)
        assert len(first.items) == 500
        assert first.metadata._continue
        assert first.metadata.remaining_item_count == total - 500
        seen = [node.metadata.name for node in first.items]
        token = first.metadata._continue
        pages = 1
        while token:
            page = core.list_node(limit=500, _continue=token)
            # Every page keeps the resourceVersion of the list it continues.
            assert page.metadata.resource_version == first.metadata.resource_version
            seen += [node.metadata.name for node in page.items]
            token = page.metadata._continue
            pages += 1
        assert pages == -(-total // 500)
        assert len(seen) == total and len(set(seen)) == total
        assert seen == sorted(seen)
        selected = core.list_node(limit=500, label_selector=f"page={label}")
        assert [n.metadata.name for n in selected.items] == names[:500]
        assert selected.metadata.remaining_item_count is None  # not given for filtered lists
    finally:
        core.delete_collection_node(label_selector=f"page={label}")
    with pytest.raises(ApiException) as garbled:
        core.list_node(limit=10, _continue="not-a-token")
    assert garbled.value.status == 400
    forged = base64.urlsafe_b64encode(
        json.dumps({"v": "meta.k8s.io/v1", "rv": 1, "start": ["", "a"]}).encode()
    ).decode()
    assert len(core.list_node(limit=10, _continue=forged.rstrip("=")).items) <= 10


def test_watch_resumes_from_a_resource_version(core, namespace):
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "w1"}})
    resume_from = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "w2"}})
    core.patch_namespaced_config_map("w1", namespace, {"data": {"k": "v"}})
    core.delete_namespaced_config_map("w2", namespace)
    events = [
        (event["type"], event["object"].metadata.name)
        for event in watch.Watch().stream(
            core.list_namespaced_config_map, namespace, resource_version=resume_from, timeout_seconds=1
        )
    ]
    assert events == [("ADDED", "w2"), ("MODIFIED", "w1"), ("DELETED", "w2")]
    # Without a resourceVersion a watch starts with the current state.
    initial = [
        (event["type"], event["object"].metadata.name)
        for event in watch.Watch().stream(core.list_namespaced_config_map, namespace, timeout_seconds=1)
    ]
    assert ("ADDED", "w1") in initial and all(kind == "ADDED" for kind, _ in initial)


def test_watch_applies_selectors_and_sends_bookmarks(twin, namespace):
    twin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"metadata": {"name": "a", "labels": {"pick": "yes"}}},
    )
    twin.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body={"metadata": {"name": "b"}})
    result = twin.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/configmaps?watch=1&labelSelector=pick%3Dyes&timeoutSeconds=1&allowWatchBookmarks=true",
    )
    events = [json.loads(line) for line in result.body.decode().splitlines()]
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events[:-1]] == [("ADDED", "a")]
    assert events[-1]["type"] == "BOOKMARK"
    assert int(events[-1]["object"]["metadata"]["resourceVersion"]) >= int(
        events[0]["object"]["metadata"]["resourceVersion"]
    )
    legacy = twin.request("GET", f"/api/v1/watch/namespaces/{namespace}/configmaps/b?timeoutSeconds=1")
    assert [json.loads(line)["object"]["metadata"]["name"] for line in legacy.body.decode().splitlines()] == ["b"]


def test_pod_log_is_404_without_a_log_provider(core, kit, namespace):
    node = kit.node(kit.unique("node"))["metadata"]["name"]
    kit.running_pod(namespace, "logs", node=node)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_pod_log("logs", namespace)
    assert missing.value.status == 404
    with pytest.raises(ApiException) as wrong:
        core.read_namespaced_pod_log("logs", namespace, container="nope")
    assert wrong.value.status == 400


def test_strategic_merge_patch_is_415_for_custom_resources(twin):
    result = twin.request(
        "PATCH",
        "/apis/nvidia.com/v1alpha1/nvidiadrivers/anything",
        body={"spec": {}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert result.status in (404, 415)
    created = twin.request(
        "POST",
        "/apis/nvidia.com/v1alpha1/nvidiadrivers",
        body={
            "apiVersion": "nvidia.com/v1alpha1",
            "kind": "NVIDIADriver",
            "metadata": {"name": "smp"},
            "spec": {"driverType": "gpu"},
        },
    )
    assert created.status == 201, created.body
    result = twin.request(
        "PATCH",
        "/apis/nvidia.com/v1alpha1/nvidiadrivers/smp",
        body={"spec": {}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert result.status == 415
    twin.request("DELETE", "/apis/nvidia.com/v1alpha1/nvidiadrivers/smp")
