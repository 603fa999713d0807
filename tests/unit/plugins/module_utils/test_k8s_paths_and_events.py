import datetime
import json

import pytest
import urllib3

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import KubeApiError, KubeUnreachableError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    _api_error,
    _backoff,
    transient_failure,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import EVENT_REASON, build_event
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CLUSTER_POLICIES,
    JOBS,
    NODES,
    PODS,
    ResourceRef,
)


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
    assert event["firstTimestamp"] == event["lastTimestamp"] == "2026-11-22T06:00:00Z"
    # MicroTime, as the events.k8s.io recorders write eventTime; the fields an Event with eventTime needs.
    assert event["eventTime"] == "2026-11-22T06:00:00.000000Z"
    assert event["reportingComponent"] and event["reportingInstance"] and event["action"]
    assert event["source"]["component"] == "gpufleet.upgrade"


def test_event_for_a_namespaced_object_stays_in_its_namespace():
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ml", "uid": "u"}}
    event = build_event(pod, message="evicted", event_type="Warning")
    assert event["metadata"]["namespace"] == "ml"
    assert event["involvedObject"]["namespace"] == "ml"
    assert event["type"] == "Warning"


# -- the retry policy -------------------------------------------------------------------------------


class _Answer:
    def __init__(self, status, body=b"{}", headers=None):
        self.status, self.data, self._headers = status, body, headers or {}

    def read(self):
        return self.data

    def getheaders(self):
        return self._headers


class _Server:
    """An api_client stand-in that answers from a script and records what was sent."""

    configuration = type("Configuration", (), {"host": "https://api.example:6443"})

    def __init__(self, *answers):
        self.answers = list(answers)
        self.sent = []

    def param_serialize(self, method, path, **kwargs):
        return (method, path, kwargs.get("body"))

    def call_api(self, method, path, body, _request_timeout=None):
        self.sent.append((method, path))
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer


def _status(code, reason):
    return json.dumps({"kind": "Status", "code": code, "reason": reason, "message": f"{reason} here"}).encode()


def _api(server, pauses=None):
    return KubeApi(server, pause=(pauses if pauses is not None else []).append, jitter=lambda: 0.5)


def test_transient_statuses_are_retried_with_jittered_bounded_backoff():
    pauses = []
    server = _Server(
        *[_Answer(503, _status(503, "ServiceUnavailable")) for _attempt in range(6)], _Answer(200, b'{"a": 1}')
    )
    assert _api(server, pauses).patch(NODES, "n", {"metadata": {"labels": {"x": "y"}}}) == {"a": 1}
    assert len(server.sent) == 7
    assert pauses == [0.25, 0.5, 1.0, 2.0, 4.0, 6.25]  # 0.2 s doubling, capped at 5 s, stretched by the jitter


def test_retries_are_bounded_and_the_error_says_how_often():
    server = _Server(*[_Answer(500, _status(500, "InternalError")) for _attempt in range(10)])
    with pytest.raises(KubeApiError) as caught:
        _api(server).request("GET", "/api/v1/nodes")
    assert len(server.sent) == 7 and caught.value.attempts == 7
    assert "answered 500" in caught.value.msg and "after 7 attempts" in caught.value.msg


@pytest.mark.parametrize("code", [400, 403, 404, 422])
def test_answers_that_are_not_accidents_fail_at_once(code):
    server = _Server(_Answer(code, _status(code, "Nope")), _Answer(200))
    with pytest.raises(KubeApiError) as caught:
        _api(server).patch(NODES, "n", {"metadata": {"labels": {"x": "y"}}})
    assert caught.value.status == code and len(server.sent) == 1


def test_a_conflict_is_retried_only_for_a_patch_that_names_no_resource_version():
    free = _Server(_Answer(409, _status(409, "Conflict")), _Answer(200))
    _api(free).patch(NODES, "n", {"metadata": {"labels": {"x": "y"}}})
    assert len(free.sent) == 2
    guarded = _Server(_Answer(409, _status(409, "Conflict")), _Answer(200))
    with pytest.raises(KubeApiError):
        _api(guarded).patch(NODES, "n", {"metadata": {"resourceVersion": "7", "labels": {"x": "y"}}})
    assert len(guarded.sent) == 1  # the caller recomputes it on fresh data


def test_a_named_create_is_resent_after_a_5xx_and_an_unnamed_one_is_not():
    job = {"metadata": {"name": "gate-1", "namespace": "ns"}}
    server = _Server(
        *[_Answer(500, _status(500, "InternalError")) for _attempt in range(3)], _Answer(201, b'{"ok": 1}')
    )
    assert _api(server).create(JOBS, job, namespace="ns") == {"ok": 1}
    assert len(server.sent) == 4
    unnamed = _Server(_Answer(500, _status(500, "InternalError")), _Answer(201))
    with pytest.raises(KubeApiError):
        _api(unnamed).create(JOBS, {"metadata": {"generateName": "gate-"}}, namespace="ns")
    assert len(unnamed.sent) == 1


def test_a_review_and_a_dry_run_are_resent_after_a_5xx_they_store_nothing():
    review_ref = ResourceRef("authorization.k8s.io/v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False)
    review = {"spec": {"resourceAttributes": {"verb": "patch", "resource": "nodes"}}}
    server = _Server(_Answer(500, _status(500, "InternalError")), _Answer(201, b'{"status": {"allowed": true}}'))
    assert _api(server).create(review_ref, review) == {"status": {"allowed": True}}
    assert len(server.sent) == 2
    dry = _Server(_Answer(503, _status(503, "ServiceUnavailable")), _Answer(201, b"{}"))
    assert _api(dry).create(JOBS, {"metadata": {"generateName": "gate-"}}, namespace="ns", dry_run=True) == {}
    assert len(dry.sent) == 2


def test_a_resent_create_that_finds_its_object_returns_it():
    job = {"metadata": {"name": "gate-1", "namespace": "ns"}}
    server = _Server(
        _Answer(504, _status(504, "Timeout")),  # the first attempt landed, the answer got lost
        _Answer(409, _status(409, "AlreadyExists")),
        _Answer(200, b'{"metadata": {"name": "gate-1"}}'),
    )
    assert _api(server).create(JOBS, job, namespace="ns") == {"metadata": {"name": "gate-1"}}
    assert [method for method, _path in server.sent] == ["POST", "POST", "GET"]
    first = _Server(_Answer(409, _status(409, "AlreadyExists")))
    with pytest.raises(KubeApiError) as caught:
        _api(first).create(JOBS, job, namespace="ns")
    assert caught.value.reason == "AlreadyExists"  # someone else's object: not ours to take


def test_a_broken_connection_is_retried_for_what_may_be_resent():
    reset = urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError(104, "Connection reset"))
    server = _Server(reset, reset, _Answer(200, b"{}"))
    assert _api(server).request("GET", "/api/v1/nodes") == {}
    assert len(server.sent) == 3
    hung = _Server(urllib3.exceptions.ReadTimeoutError(None, "/api/v1/nodes", "Read timed out."), _Answer(200))
    with pytest.raises(KubeUnreachableError):
        _api(hung).request("GET", "/api/v1/nodes")
    assert len(hung.sent) == 1  # a hung server would hang each attempt again
    post = _Server(reset, _Answer(201))
    with pytest.raises(KubeUnreachableError):
        _api(post).request("POST", "/api/v1/namespaces/ns/configmaps", body={"metadata": {"generateName": "x"}})
    assert len(post.sent) == 1


@pytest.mark.parametrize(
    ("result", "transient"),
    [
        ({"failed": True, "msg": 'Failed to patch object: b\'{"kind":"Status","code":503}\''}, True),
        ({"failed": True, "msg": "Failed to patch object", "reason": "Service Unavailable"}, True),
        ({"failed": True, "msg": "Exception '(429)\nReason: Too Many Requests\n' raised while..."}, True),
        ({"failed": True, "msg": 'Failed to patch object: b\'{"reason":"Conflict","code":409}\''}, True),
        (
            {"failed": True, "msg": "('Connection aborted.', ConnectionResetError(104, 'Connection reset by peer'))"},
            True,
        ),
        ({"failed": True, "msg": 'Failed to create object: b\'{"reason":"AlreadyExists","code":409}\''}, False),
        ({"failed": True, "msg": "Failed to patch object: b'{\"code\":403}'", "reason": "Forbidden"}, False),
        ({"failed": True, "msg": "Failed to patch object: b'{\"code\":422}'"}, False),
        ({"failed": True, "msg": "Failed to get", "reason": "Not Found"}, False),
        ({"failed": False, "reason": "Service Unavailable"}, False),
        ({"changed": True}, False),
    ],
)
def test_transient_failure_reads_kubernetes_core_results(result, transient):
    assert bool(transient_failure(result)) is transient


def test_cluster_now_is_the_date_of_the_latest_answer_else_asks_the_server():
    """One clock: the collection's timestamps are the API server's, read off the answers it already gets."""
    server = _Server(
        _Answer(200, b"{}", {"Date": "Sun, 22 Nov 2026 08:00:00 GMT"}),
        _Answer(200, b"{}", {"Date": "Sun, 22 Nov 2026 09:30:00 GMT"}),
    )
    api = _api(server)
    api.get(NODES, "n")
    assert api.cluster_now().isoformat() == "2026-11-22T08:00:00+00:00"  # no request: the answer just read
    assert len(server.sent) == 1
    api._last_date = (api._last_date[0], api._last_date[1] - 5)  # that answer is old now
    assert api.cluster_now().isoformat() == "2026-11-22T09:30:00+00:00"
    assert server.sent[-1] == ("GET", "/version")
