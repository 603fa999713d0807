"""Fuzzed Kubernetes answers: truncated and malformed bodies, wrong types, missing keys and nulls.

``KubeApi`` (the collection's client, over real HTTP to a small local server; no mock of the client) gets bodies that
are cut short, not JSON, JSON of another type, lists whose items or continue tokens are of another type; and the
readers the modules use on objects (Node status, Job status, gate pods, the rollout budget, the drift audit) get real
objects with a subtree replaced by another type, removed or null. Always a result or a ``KubeApiError`` (the
collection's error for what the API answered) naming the request or the object and the field; never another
exception. Profiles and how to run a longer campaign: tests/unit/conftest.py.
"""

from __future__ import annotations

import copy
import http.server
import json
import pathlib
import random
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import kubernetes
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError, KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates import job_failure, pod_situation
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import unfinished_pods
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    NODES,
    PODS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    capacity_budget,
    node_is_unavailable,
    unavailable_node_names,
)

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
SNAPSHOT = json.loads((FIXTURES / "matrix" / "api" / "openshift-canary-snapshot.json").read_text())
NODE_OBJECTS = list(SNAPSHOT["nodes"]["items"])
CRASHLOOP_POD = json.loads((FIXTURES / "gpu_driver" / "driver-pod-crashloop.json").read_text())
POD_OBJECTS = [*SNAPSHOT["pods"]["items"], CRASHLOOP_POD]
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "gpufleet-gate-dcgm-gpu-worker-001-f00d01", "namespace": "nvidia-gpu-operator"},
    "status": {
        "conditions": [
            {"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded", "message": "too long"},
            {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer"},
        ],
        "failed": 1,
    },
}
_WRONG = [None, "", "text", 0, 7, 1.5, True, [], ["x"], [1], {}, {"x": 1}]


def paths_of(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths_of(item, (*prefix, index))


def with_wrong_type(document: Any, rng: random.Random) -> Any:
    document = copy.deepcopy(document)
    path = rng.choice([path for path in paths_of(document) if path])
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    if isinstance(parent, dict) and rng.random() < 0.25:
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(_WRONG)
    return document


def broken(objects: list[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def strategy(draw: st.DrawFn) -> dict[str, Any]:
        document = draw(st.sampled_from(objects))
        rng = random.Random(draw(st.integers(min_value=0, max_value=2**32)))
        for _mutation in range(draw(st.integers(min_value=1, max_value=3))):
            document = with_wrong_type(document, rng)
        return document

    return strategy()


def read_or_refuse(read: Callable[[], Any]) -> None:
    try:
        read()
    except KubeApiError as err:
        assert err.msg and "is " in err.msg, err.msg


# -- readers of objects --------------------------------------------------------------------------------


@given(node=broken(NODE_OBJECTS))
def test_node_readers_read_any_node_or_name_what_is_wrong(node: dict[str, Any]) -> None:
    read_or_refuse(lambda: node_is_unavailable(node))
    read_or_refuse(lambda: unavailable_node_names([node]))
    read_or_refuse(lambda: capacity_budget(max_unavailable=1, pool_nodes=[node]))


@given(pod=broken(POD_OBJECTS))
def test_pod_readers_read_any_pod_or_name_what_is_wrong(pod: dict[str, Any]) -> None:
    read_or_refuse(lambda: pod_situation(pod))
    read_or_refuse(lambda: unfinished_pods([pod]))


@given(job=broken([JOB]))
def test_job_readers_read_any_job_or_name_what_is_wrong(job: dict[str, Any]) -> None:
    read_or_refuse(lambda: job_failure(job))


# -- the client over HTTP ------------------------------------------------------------------------------


class ApiServer:
    """Answers every GET with ``body`` (200); enough for KubeApi.get/list to read what comes back."""

    def __init__(self) -> None:
        self.body = b"{}"
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def setup(self) -> None:
                super().setup()
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(server.body)))
                self.end_headers()
                self.wfile.write(server.body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        configuration = kubernetes.client.Configuration()
        configuration.host = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.api = KubeApi(kubernetes.client.ApiClient(configuration), retries=0, pause=lambda _seconds: None)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    started = ApiServer()
    yield started
    started.close()


NODE_LIST = json.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": NODE_OBJECTS[:2]})
_BODIES = [b"", b"{", b"null", b"[]", b'"text"', b"5", b"<html>502 Bad Gateway</html>", b"\xff\xfe{}"]


@st.composite
def broken_bodies(draw: st.DrawFn) -> bytes:
    choice = draw(st.integers(min_value=0, max_value=3))
    if choice == 0:
        return draw(st.sampled_from(_BODIES))
    if choice == 1:  # cut short
        return NODE_LIST.encode()[: draw(st.integers(min_value=0, max_value=len(NODE_LIST) - 1))]
    if choice == 2:  # a list of another shape
        rng = random.Random(draw(st.integers(min_value=0, max_value=2**32)))
        return json.dumps(with_wrong_type(json.loads(NODE_LIST), rng)).encode()
    return draw(st.binary(max_size=30))


@given(body=broken_bodies())
def test_client_reads_an_object_or_names_the_request_it_could_not_read(server: ApiServer, body: bytes) -> None:
    server.body = body
    for call, path in (
        (lambda: server.api.get(NODES, "gpu-worker-001"), "/api/v1/nodes/gpu-worker-001"),
        (lambda: [node_is_unavailable(node) for node in server.api.list(NODES, page_size=1)], "/api/v1/nodes"),
        (lambda: server.api.list(PODS, namespace="gpu-operator"), "/api/v1/namespaces/gpu-operator/pods"),
    ):
        try:
            call()
        except KubeApiError as err:
            assert err.msg and ("GET " + path in err.msg or "is " in err.msg), err.msg
        except GpuFleetError as err:  # pragma: no cover - the property says KubeApiError
            pytest.fail(f"{type(err).__name__}: {err.msg}")


# -- regression examples the fuzzing found --------------------------------------------------------------

MASTER = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "master-0"}}


def test_a_node_whose_status_is_not_an_object_is_refused_naming_it() -> None:
    # AttributeError: 'int' object has no attribute 'get'.
    with pytest.raises(KubeApiError, match="Node master-0: status is a number, expected an object"):
        node_is_unavailable({**MASTER, "status": 7})


def test_a_node_condition_that_is_not_an_object_is_refused_naming_it() -> None:
    with pytest.raises(KubeApiError, match=r"Node master-0: status.conditions\[0\] is a string, expected an object"):
        node_is_unavailable({**MASTER, "status": {"conditions": ["Ready"]}})


def test_a_pod_whose_metadata_is_not_an_object_is_refused() -> None:
    # AttributeError: 'bool' object has no attribute 'get'.
    with pytest.raises(KubeApiError, match="a Pod without a name: metadata is a boolean"):
        unfinished_pods([{"kind": "Pod", "metadata": True, "status": {"phase": "Running"}}])


def test_a_gate_pod_whose_exit_code_is_not_a_number_is_refused_naming_it() -> None:
    # ValueError: invalid literal for int() with base 10.
    container = {"name": "dcgm", "state": {"terminated": {"exitCode": "x"}}}
    pod = {"kind": "Pod", "metadata": {"name": "gate", "namespace": "ns"},
           "status": {"phase": "Failed", "containerStatuses": [container]}}  # fmt: skip
    with pytest.raises(KubeApiError, match=r"Pod ns/gate: status.containerStatuses\[0\].state.terminated.exitCode"):
        pod_situation(pod)


def test_a_job_condition_that_is_not_an_object_is_refused_naming_it() -> None:
    # AttributeError: 'bool' object has no attribute 'get'.
    job = copy.deepcopy(JOB)
    job["status"]["conditions"].append(True)
    with pytest.raises(KubeApiError, match=r"Job nvidia-gpu-operator/gpufleet-gate-dcgm-.*: status.conditions\[2\]"):
        job_failure(job)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "GET /api/v1/nodes/gpu-worker-001 answered 1 bytes that are not JSON"),
        (b"<html>502 Bad Gateway</html>", "answered 28 bytes that are not JSON"),
        (b"\x80", "answered 1 bytes that are not JSON"),
        (b"null", "answered null where a JSON object was expected"),
        (b"[1]", "answered a list where a JSON object was expected"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_refused_naming_the_request(
    server: ApiServer, body: bytes, message: str
) -> None:
    # json.JSONDecodeError / UnicodeDecodeError out of KubeApi.request; null and lists reached callers' .get().
    server.body = body
    with pytest.raises(KubeApiError, match=message):
        server.api.get(NODES, "gpu-worker-001")


@pytest.mark.parametrize(
    ("page", "message"),
    [
        ({"items": "x"}, "GET /api/v1/nodes answered a Node list whose items is a string"),
        ({"items": [5]}, r"items\[0\] is a number"),
        # The token 5 was truthy: the same page was asked for again and again, forever.
        ({"items": [], "metadata": {"continue": 5}}, "metadata.continue is a number"),
    ],
)
def test_a_list_of_another_shape_is_refused_naming_the_request(
    server: ApiServer, page: dict[str, Any], message: str
) -> None:
    server.body = json.dumps(page).encode()
    with pytest.raises(KubeApiError, match=message):
        server.api.list(NODES)
