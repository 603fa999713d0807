"""Authentication, discovery and OpenAPI of the twin's API server, as kubectl and the client see them."""

from __future__ import annotations

import json

import pytest


def test_requests_with_a_wrong_token_get_401_and_without_one_are_anonymous(twin):
    result = twin.request("GET", "/api/v1/namespaces", token="not-the-token")
    assert result.status == 401
    status = result.json()
    assert status["kind"] == "Status"
    assert status["code"] == 401
    assert status["reason"] == "Unauthorized"
    # No credentials: kube-apiserver's default --anonymous-auth=true makes the request system:anonymous, whom RBAC
    # refuses all but the public info (system:public-info-viewer, bound to system:unauthenticated).
    anonymous = twin.request("GET", "/api/v1/namespaces", token=None)
    assert anonymous.status == 403
    assert anonymous.json()["message"] == (
        'namespaces is forbidden: User "system:anonymous" cannot list resource "namespaces" in API group "" at the '
        "cluster scope"
    )
    assert twin.request("GET", "/version", token=None).status == 200
    assert twin.request("GET", "/api", token=None).status == 403  # system:discovery is for authenticated users
    assert twin.request("GET", "/api/v1/namespaces").status == 200
    assert twin.request("GET", "/admin/healthz", token=None).status == 401
    assert twin.request("GET", "/admin/healthz").json()["status"] == "ok"


def test_kubectl_with_a_wrong_token_is_unauthorized(twin, tmp_path):
    bad = tmp_path / "kubeconfig"
    bad.write_text(twin.kubeconfig.read_text().replace(twin.token, "wrong-token"))
    result = twin.kubectl("--kubeconfig", str(bad), "get", "nodes", check=False)
    assert result.returncode != 0
    assert "Unauthorized" in result.stderr or "logged in" in result.stderr


def test_python_client_reads_version_through_the_written_kubeconfig(api_client):
    from kubernetes import client

    version = client.VersionApi(api_client).get_code()
    assert version.git_version.startswith("v1.")
    assert version.major == "1"


def test_legacy_discovery_lists_groups_and_subresources(twin):
    core = twin.request("GET", "/api").json()
    assert core["kind"] == "APIVersions" and core["versions"] == ["v1"]
    groups = {group["name"]: group for group in twin.request("GET", "/apis").json()["groups"]}
    for name in ("apps", "batch", "policy", "apiextensions.k8s.io", "nvidia.com", "operators.coreos.com"):
        assert name in groups
    assert groups["apps"]["preferredVersion"]["groupVersion"] == "apps/v1"
    resources = {r["name"]: r for r in twin.request("GET", "/api/v1").json()["resources"]}
    # kubectl drain finds the Eviction API version here.
    assert resources["pods/eviction"]["group"] == "policy"
    assert resources["pods/eviction"]["version"] == "v1"
    assert resources["pods/eviction"]["kind"] == "Eviction"
    assert resources["pods/log"]["verbs"] == ["get"]
    assert resources["nodes/status"]["verbs"] == ["get", "patch", "update"]
    assert resources["pods"]["shortNames"] == ["po"]
    assert "all" in resources["pods"]["categories"]
    assert resources["nodes"]["namespaced"] is False
    apps = {r["name"]: r for r in twin.request("GET", "/apis/apps/v1").json()["resources"]}
    assert apps["deployments/scale"]["group"] == "autoscaling"
    assert apps["daemonsets"]["shortNames"] == ["ds"]
    assert twin.request("GET", "/apis/nosuch.example.com/v1").status == 404


def test_aggregated_discovery_when_asked_for_it(twin):
    accept = (
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
    )
    result = twin.request("GET", "/apis", headers={"Accept": accept})
    assert result.status == 200
    assert "as=APIGroupDiscoveryList" in result.headers["Content-Type"]
    document = result.json()
    assert document["kind"] == "APIGroupDiscoveryList"
    apps = next(item for item in document["items"] if item["metadata"].get("name") == "apps")
    deployments = next(r for r in apps["versions"][0]["resources"] if r["resource"] == "deployments")
    assert deployments["scope"] == "Namespaced"
    scale = next(s for s in deployments["subresources"] if s["subresource"] == "scale")
    assert scale["responseKind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}
    # As kube-apiserver serves it: an ETag of the document, Vary: Accept, 304 when the client has it already.
    etag = result.headers["ETag"]
    assert etag.startswith('"') and result.headers["Vary"] == "Accept"
    assert "no-cache" in result.headers["Cache-Control"]
    again = twin.request("GET", "/apis", headers={"Accept": accept, "If-None-Match": etag})
    assert (again.status, again.body) == (304, b"")
    assert twin.request("GET", "/apis", headers={"Accept": accept, "If-None-Match": '"other"'}).status == 200
    # Every other answer: kube-apiserver's default (its WithCacheControl filter).
    assert twin.request("GET", "/api/v1/namespaces").headers["Cache-Control"] == "no-cache, private"
    core = twin.request("GET", "/api", headers={"Accept": accept}).json()
    assert core["items"][0]["metadata"] == {}
    pods = next(r for r in core["items"][0]["versions"][0]["resources"] if r["resource"] == "pods")
    assert {
        "subresource": "eviction",
        "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "verbs": ["create"],
    } in pods["subresources"]


def test_kubectl_api_resources_shows_short_names_and_crds(twin):
    out = twin.kubectl("api-resources", "--no-headers").stdout
    rows = {line.split()[0] + "/" + line.split()[-1]: line for line in out.splitlines() if line.strip()}
    assert " ds " in rows["daemonsets/DaemonSet"]
    assert " pdb " in rows["poddisruptionbudgets/PodDisruptionBudget"]
    assert "clusterpolicies/ClusterPolicy" in rows
    assert "nvidiadrivers/NVIDIADriver" in rows


def test_openapi_v3_announces_field_validation_and_merge_keys(twin):
    index = twin.request("GET", "/openapi/v3").json()
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    assert "?hash=" in url
    document = twin.request("GET", url)
    assert document.headers["Cache-Control"] == "public, immutable"
    spec = document.json()
    patch = spec["paths"]["/api/v1/nodes/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Node"}
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    schemas = spec["components"]["schemas"]
    pod_spec = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]
    assert pod_spec["containers"]["x-kubernetes-patch-merge-key"] == "name"
    assert pod_spec["containers"]["x-kubernetes-patch-strategy"] == "merge"
    container = schemas["io.k8s.api.core.v1.Container"]["properties"]
    assert container["env"]["x-kubernetes-patch-merge-key"] == "name"
    assert schemas["io.k8s.api.core.v1.Pod"]["x-kubernetes-group-version-kind"] == [
        {"group": "", "version": "v1", "kind": "Pod"}
    ]
    assert "bootID" in schemas["io.k8s.api.core.v1.NodeSystemInfo"]["required"]


def test_openapi_v3_of_a_crd_has_no_strategic_merge(twin):
    index = twin.request("GET", "/openapi/v3").json()
    spec = twin.request("GET", index["paths"]["apis/nvidia.com/v1"]["serverRelativeURL"]).json()
    patch = spec["paths"]["/apis/nvidia.com/v1/clusterpolicies/{name}"]["patch"]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    assert "application/merge-patch+json" in patch["requestBody"]["content"]
    policy = spec["components"]["schemas"]["com.nvidia.v1.ClusterPolicy"]
    assert "nodeSelector" not in policy["properties"]["spec"]["properties"]["driver"]["properties"]


def test_openapi_v2_is_served_as_json_only(twin):
    spec = twin.request("GET", "/openapi/v2").json()
    assert spec["swagger"] == "2.0"
    assert "io.k8s.api.core.v1.Pod" in spec["definitions"]
    protobuf = twin.request(
        "GET", "/openapi/v2", headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"}
    )
    assert protobuf.status == 406


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/api/v1/namespaces/default/nosuchresources", 404),
        ("GET", "/api/v2/pods", 404),
        ("POST", "/api/v1/namespaces/default/pods/somepod", 405),
        ("GET", "/version", 200),
    ],
)
def test_unknown_paths_and_methods_answer_with_status(twin, method, path, status):
    result = twin.request(method, path, body={} if method == "POST" else None)
    assert result.status == status
    if status >= 400:
        assert json.loads(result.body)["code"] == status
