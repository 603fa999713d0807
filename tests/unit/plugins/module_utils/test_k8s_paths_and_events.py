import datetime

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    CLUSTER_POLICIES,
    NODES,
    PODS,
    _api_error,
    _backoff,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import EVENT_REASON, build_event


def test_paths_for_core_group_and_custom_resources():
    assert NODES.path() == "/api/v1/nodes"
    assert NODES.path(name="gpu-worker-1") == "/api/v1/nodes/gpu-worker-1"
    assert PODS.path(namespace="gpu-operator") == "/api/v1/namespaces/gpu-operator/pods"
    assert PODS.path(namespace="a", name="p", subresource="eviction") == "/api/v1/namespaces/a/pods/p/eviction"
    assert CLUSTER_POLICIES.path(name="gpu-cluster-policy") == "/apis/nvidia.com/v1/clusterpolicies/gpu-cluster-policy"
    # Cluster-scoped kinds ignore a namespace.
    assert NODES.path(namespace="x") == "/api/v1/nodes"


def test_api_error_carries_the_status_message():
    status = b'{"kind":"Status","reason":"Conflict","message":"the object has been modified","code":409}'
    error = _api_error("PUT", "/api/v1/nodes/n", 409, status)
    assert error.status == 409
    assert error.reason == "Conflict"
    assert "the object has been modified" in error.msg
    garbled = _api_error("GET", "/x", 502, b"<html>bad gateway</html>")
    assert garbled.status == 502
    assert "bad gateway" in garbled.msg


def test_backoff_honours_retry_after_but_caps_it():
    assert _backoff(1, "3") == 3.0
    assert _backoff(1, "3600") == 10.0
    assert _backoff(1, None) == 0.2
    assert _backoff(3, None) == 0.8
    assert _backoff(30, "soon") == 5.0


def test_event_for_a_node_lands_in_default_namespace():
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-worker-1", "uid": "u-1"}}
    event = build_event(
        node,
        message="cordoned for driver upgrade",
        now=datetime.datetime(2026, 11, 22, 6, 0, tzinfo=datetime.UTC),
    )
    assert event["metadata"]["namespace"] == "default"
    assert event["metadata"]["name"].startswith("gpu-worker-1.")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-worker-1", "uid": "u-1"}
    assert event["reason"] == EVENT_REASON
    assert event["firstTimestamp"] == "2026-11-22T06:00:00Z"
    assert event["source"]["component"] == "gpufleet.upgrade"


def test_event_for_a_namespaced_object_stays_in_its_namespace():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "u"}}
    event = build_event(pod, message="evicted", event_type="Warning")
    assert event["metadata"]["namespace"] == "ml"
    assert event["involvedObject"]["namespace"] == "ml"
    assert event["type"] == "Warning"
