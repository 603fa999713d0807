"""Pure pieces of the API server: budgets, printers, request parsing, schemas, TLS material."""

from __future__ import annotations

import json
import ssl

import pytest
from cryptography import x509

from gpufleet_twin.apiserver import builtin_types, openapi
from gpufleet_twin.apiserver.reads import decode_continue, encode_continue
from gpufleet_twin.apiserver.request_info import parse_accept, request_info_for
from gpufleet_twin.machinery import errors, tls
from gpufleet_twin.machinery.disruption import compute_budget, pdb_status, scaled_value
from gpufleet_twin.machinery.registry import PrinterColumn, Registry, ResourceType


def _pod(
    name: str, *, ready: bool = True, labels: dict | None = None, namespace: str = "ns", deleting: bool = False
) -> dict:
    meta = {"name": name, "namespace": namespace, "labels": labels if labels is not None else {"app": "a"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def _budget(spec: dict) -> dict:
    return {
        "metadata": {"name": "b", "namespace": "ns", "generation": 2},
        "spec": {"selector": {"matchLabels": {"app": "a"}}, **spec},
    }


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"minAvailable": 2}, (4, 2, 3, 1)),  # 3 healthy of 4 (one unready), 2 needed
        ({"minAvailable": "50%"}, (4, 2, 3, 1)),
        ({"minAvailable": "51%"}, (4, 3, 3, 0)),  # rounds up
        ({"maxUnavailable": 1}, (4, 3, 3, 0)),
        ({"maxUnavailable": "25%"}, (4, 3, 3, 0)),
        ({"maxUnavailable": "26%"}, (4, 2, 3, 1)),  # 1.04 rounds up to 2
        ({"maxUnavailable": 0}, (4, 4, 3, 0)),
        ({}, (0, 0, 3, 3)),
    ],
)
def test_budget_arithmetic(spec, expected):
    pods = [
        _pod("a"),
        _pod("b"),
        _pod("c"),
        _pod("d", ready=False),
        _pod("other", labels={"app": "z"}),
        _pod("x", namespace="elsewhere"),
    ]
    budget = compute_budget(_budget(spec), pods)
    assert (
        budget.expected_pods,
        budget.desired_healthy,
        budget.current_healthy,
        budget.disruptions_allowed,
    ) == expected


def test_terminating_pods_are_not_healthy_and_null_selectors_select_nothing():
    pods = [_pod("a"), _pod("b", deleting=True)]
    assert compute_budget(_budget({"minAvailable": 1}), pods).current_healthy == 1
    assert compute_budget({"metadata": {"namespace": "ns"}, "spec": {"minAvailable": 1}}, pods).expected_pods == 0
    assert (
        compute_budget(
            {"metadata": {"namespace": "ns"}, "spec": {"maxUnavailable": 1, "selector": {}}}, pods
        ).expected_pods
        == 2
    )


def test_pdb_status_conditions():
    status = pdb_status(_budget({"maxUnavailable": 1}), [_pod("a"), _pod("b")], now="2026-01-02T00:00:00Z")
    assert status["disruptionsAllowed"] == 1 and status["observedGeneration"] == 2
    assert status["conditions"][0] == {
        "type": "DisruptionAllowed",
        "status": "True",
        "reason": "SufficientPods",
        "message": "",
        "observedGeneration": 2,
        "lastTransitionTime": "2026-01-02T00:00:00Z",
    }
    broken = pdb_status(_budget({"maxUnavailable": "lots"}), [_pod("a")])
    assert broken["disruptionsAllowed"] == 0 and broken["conditions"][0]["reason"] == "SyncFailed"


def test_scaled_values():
    assert scaled_value(3, 10, round_up=True) == 3
    assert scaled_value("10%", 15, round_up=True) == 2
    assert scaled_value("10%", 15, round_up=False) == 1
    with pytest.raises(ValueError):
        scaled_value("10", 15, round_up=True)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (119, "119s"),
        (125, "2m5s"),
        (600, "10m"),
        (3 * 3600 + 60, "3h1m"),
        (30 * 3600, "30h"),
        (3 * 86400 + 3600, "3d1h"),
        (30 * 86400, "30d"),
        (800 * 86400, "2y70d"),
        (-5, "<invalid>"),
    ],
)
def test_human_duration_matches_kubectl(seconds, text):
    assert builtin_types.human_duration(seconds) == text


def test_pod_status_text_follows_the_pod_printer():
    crash = {
        "status": {"phase": "Running", "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]}
    }
    assert builtin_types.pod_status_text(crash) == "CrashLoopBackOff"
    init = {
        "spec": {"initContainers": [{}, {}]},
        "status": {
            "phase": "Pending",
            "initContainerStatuses": [{"state": {"terminated": {"exitCode": 0}}}, {"state": {"running": {}}}],
        },
    }
    assert builtin_types.pod_status_text(init) == "Init:1/2"
    done = {
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [{"state": {"terminated": {"reason": "Completed", "exitCode": 0}}}],
        }
    }
    assert builtin_types.pod_status_text(done) == "Completed"
    deleting = {"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Running"}}
    assert builtin_types.pod_status_text(deleting) == "Terminating"


def test_node_status_and_roles():
    node = {
        "metadata": {"labels": {"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/gpu": ""}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]},
    }
    assert builtin_types.node_status_text(node) == "NotReady,SchedulingDisabled"
    assert builtin_types.node_roles(node) == "gpu,worker"
    assert builtin_types.node_roles({"metadata": {}}) == "<none>"


def test_jsonpath_cells_of_custom_columns():
    obj = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"replicas": 3, "names": ["a", "b"]},
        "status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "Done", "status": "True"}]},
    }
    columns = (
        PrinterColumn("Replicas", ".spec.replicas", type="integer"),
        PrinterColumn("Done", '.status.conditions[?(@.type=="Done")].status'),
        PrinterColumn("Names", ".spec.names[*]"),
        PrinterColumn("First", ".spec.names[0]"),
        PrinterColumn("Missing", ".spec.nothing"),
        PrinterColumn("Age", ".metadata.creationTimestamp", type="date"),
    )
    now = builtin_types.parse_time("2026-01-01T00:05:00Z")
    assert builtin_types.jsonpath_cells(columns, obj, now) == [3, "True", "a,b", "a", None, "5m"]


def test_request_info_resolution():
    info, parts = request_info_for("GET", "/api/v1/namespaces/ns/pods", {})
    assert (info.verb, info.resource, info.namespace, info.name) == ("list", "pods", "ns", None)
    info, _ = request_info_for("GET", "/api/v1/namespaces/ns/pods", {"watch": "true"})
    assert info.verb == "watch"
    info, parts = request_info_for("GET", "/api/v1/watch/nodes/n1", {})
    assert (info.verb, info.name) == ("watch", "n1") and parts is not None and parts[-1] == "watch"
    info, _ = request_info_for("POST", "/api/v1/namespaces/ns/pods/p/eviction", {})
    assert (info.verb, info.subresource, info.name) == ("create", "eviction", "p")
    info, _ = request_info_for("DELETE", "/apis/apps/v1/namespaces/ns/daemonsets", {})
    assert (info.verb, info.group) == ("deletecollection", "apps")
    info, _ = request_info_for("PUT", "/api/v1/namespaces/ns/finalize", {})
    assert (info.verb, info.resource, info.name, info.subresource) == ("update", "namespaces", "ns", "finalize")
    info, _ = request_info_for("GET", "/api/v1/namespaces/ns", {})
    assert (info.verb, info.resource, info.name, info.namespace) == ("get", "namespaces", "ns", "ns")
    info, parts = request_info_for("GET", "/apis", {})
    assert info.verb == "discovery" and parts is None
    info, _ = request_info_for("PATCH", "/apis/apps/v1/namespaces/ns/deployments/d", {"dryRun": "All"})
    assert (info.verb, info.dry_run) == ("patch", True)
    info, _ = request_info_for("GET", "/api/v1/nodes", {"dryRun": "All"})
    assert info.dry_run is False  # reads have no dry run


def test_accept_header_parsing():
    ranges = parse_accept("application/json;as=Table;v=v1;g=meta.k8s.io, application/json")
    assert ranges[0].params == {"as": "Table", "v": "v1", "g": "meta.k8s.io"}
    assert ranges[1].is_json and not ranges[1].params
    assert parse_accept(None)[0].is_json


def test_continue_tokens_round_trip_and_garbage_is_400():
    assert decode_continue(encode_continue(42, "ns", "name")) == (42, ("ns", "name"))
    with pytest.raises(errors.ApiError) as garbled:
        decode_continue("%%%")
    assert garbled.value.code == 400


def test_unknown_fields_are_pruned_against_the_schema():
    components = {"Meta": {"type": "object", "properties": {"name": {"type": "string"}}}}
    schema = {
        "type": "object",
        "properties": {
            "metadata": {"$ref": "#/components/schemas/Meta"},
            "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"x-kubernetes-preserve-unknown-fields": True},
        },
    }
    obj = {
        "metadata": {"name": "x", "nick": "y"},
        "items": [{"a": 1, "b": 2}],
        "labels": {"k": "v"},
        "free": {"z": 1},
        "extra": True,
    }
    pruned, unknown = openapi.prune_unknown_fields(obj, schema, components)
    assert unknown == ["metadata.nick", "items[0].b", "extra"]
    assert pruned == {"metadata": {"name": "x"}, "items": [{"a": 1}], "labels": {"k": "v"}, "free": {"z": 1}}
    assert "nick" in obj["metadata"]  # the input is not changed


def test_required_fields_get_go_zero_values():
    components = {
        "Info": {
            "type": "object",
            "required": ["boot", "count", "when"],
            "properties": {
                "boot": {"type": "string"},
                "count": {"type": "integer"},
                "when": {"type": "string", "format": "date-time"},
                "cpu": {"type": "string"},
            },
        }
    }
    schema = {"type": "object", "properties": {"info": {"$ref": "#/components/schemas/Info"}}}
    obj = {"info": {"cpu": 4}}
    openapi.complete_required_fields(obj, schema, components, now="2026-01-01T00:00:00Z")
    assert obj == {"info": {"cpu": "4", "boot": "", "count": 0, "when": "2026-01-01T00:00:00Z"}}


def test_discovery_documents_from_a_registry():
    registry = Registry()
    for rtype in builtin_types.BUILTIN_TYPES:
        registry.add(rtype)
    registry.add(ResourceType(group="a.example.com", version="v1", kind="A", plural="as", namespaced=True))
    groups = [group["name"] for group in openapi.api_group_list(registry)["groups"]]
    assert groups[:2] == ["apps", "events.k8s.io"]
    assert groups[-2:] == ["a.example.com", "operators.coreos.com"]  # other groups follow by name
    assert "" not in groups
    assert openapi.api_group(registry, "nosuch") is None
    catalog = openapi.SchemaCatalog(registry)
    document, digest = catalog.v3_document("apis/apps/v1")
    assert len(digest) == 64
    assert "/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale" in document["paths"]


def test_tls_material_verifies_for_127_0_0_1(tmp_path):
    material = tls.generate_tls_material()
    files = tls.write_tls_files(material, tmp_path)
    assert oct(files.key.stat().st_mode & 0o777) == "0o600"
    cert = x509.load_pem_x509_certificate(material.cert_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    context = tls.server_ssl_context(files)
    assert isinstance(context, ssl.SSLContext)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes | int) -> bytes:
    if isinstance(payload, int):
        return _varint(number << 3) + _varint(payload)
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def test_protobuf_bodies_of_typed_clients_decode_to_json():
    meta = _field(1, b"cm") + _field(11, _field(1, b"app") + _field(2, b"x"))
    config_map = _field(1, meta) + _field(2, _field(1, b"k") + _field(2, b"v")) + _field(4, 1) + _field(99, b"?")
    type_meta = _field(1, b"v1") + _field(2, b"ConfigMap")
    body = b"k8s\x00" + _field(1, type_meta) + _field(2, config_map)
    assert openapi.decode_protobuf_object(body) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cm", "labels": {"app": "x"}},
        "data": {"k": "v"},
        "immutable": True,
    }
    budget_spec = _field(3, _field(1, 1) + _field(3, b"25%")) + _field(2, _field(1, _field(1, b"a") + _field(2, b"b")))
    budget = (
        b"k8s\x00"
        + _field(1, _field(1, b"policy/v1") + _field(2, b"PodDisruptionBudget"))
        + _field(2, _field(2, budget_spec))
    )
    assert openapi.decode_protobuf_object(budget)["spec"] == {
        "maxUnavailable": "25%",
        "selector": {"matchLabels": {"a": "b"}},
    }
    with pytest.raises(ValueError):
        openapi.decode_protobuf_object(b"not protobuf")
    with pytest.raises(ValueError):
        openapi.decode_protobuf_object(b"k8s\x00" + _field(1, _field(1, b"apps/v1") + _field(2, b"Deployment")))
    with pytest.raises(ValueError):
        openapi.decode_protobuf_object(b"k8s\x00\x0a\x7f")  # truncated


def test_the_client_models_kept_in_a_file_give_the_same_schemas_and_a_new_model_is_added(
    tmp_path, monkeypatch, request
):
    """A twin reads what it needs of the kubernetes client's models from a file kept between processes: the
    documents it serves are those converted from the models themselves, and a model the file lacks is read from the
    client and added to it."""
    registry = Registry()
    for rtype in builtin_types.BUILTIN_TYPES:
        registry.add(rtype)
    monkeypatch.setenv("GPUFLEET_TWIN_CACHE_DIR", str(tmp_path))

    def documents() -> list[object]:
        openapi._model_table.cache_clear()  # a new process's table
        catalog = openapi.SchemaCatalog(registry)
        return [catalog.v3_document(path) for path in ("api/v1", "apis/apps/v1", "apis/batch/v1")]

    request.addfinalizer(openapi._model_table.cache_clear)  # later tests read the table of the usual place
    from_models = documents()
    (kept,) = tmp_path.glob("client-models-*.json")
    assert "V1PodSpec" in json.loads(kept.read_text())
    monkeypatch.setattr(openapi, "_client_models", lambda: pytest.fail("read the client though the file has it"))
    assert documents() == from_models

    # A model the file lacks (a kind added to the registry later) is read from the client and kept.
    monkeypatch.undo()
    monkeypatch.setenv("GPUFLEET_TWIN_CACHE_DIR", str(tmp_path))
    stored = json.loads(kept.read_text())
    del stored["V1PodSpec"]
    kept.write_text(json.dumps(stored))
    assert documents() == from_models
    assert "V1PodSpec" in json.loads(kept.read_text())
