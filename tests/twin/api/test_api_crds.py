"""CustomResourceDefinitions: loaded with --crds, created live, and their objects pruned like a real server."""

from __future__ import annotations

import datetime
import email.utils
import json
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpufleet_twin.apiserver.server import load_crd_manifests

SHARED_CRDS = Path(__file__).resolve().parents[4] / "shared" / "reference" / "crds"

CLUSTER_POLICY = {
    "apiVersion": "nvidia.com/v1",
    "kind": "ClusterPolicy",
    "metadata": {"name": "gpu-cluster-policy"},
    "spec": {
        "operator": {},
        "daemonsets": {},
        "dcgm": {},
        "dcgmExporter": {},
        "devicePlugin": {},
        "gfd": {},
        "nodeStatusExporter": {},
        "toolkit": {},
        "driver": {"version": "550.90.07", "upgradePolicy": {"autoUpgrade": True, "maxUnavailable": "25%"}},
    },
}


@pytest.fixture
def cluster_policy(api_client):
    custom = client.CustomObjectsApi(api_client)
    custom.create_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", CLUSTER_POLICY)
    yield custom
    custom.delete_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", "gpu-cluster-policy")


@pytest.mark.skipif(not SHARED_CRDS.is_dir(), reason="../shared/reference/crds is not there")
def test_the_upstream_crds_replace_the_twins_own(twin):
    crds = {line.split()[0] for line in twin.kubectl("get", "crd", "--no-headers").stdout.splitlines()}
    assert {
        "clusterpolicies.nvidia.com",
        "nvidiadrivers.nvidia.com",
        "machineconfigpools.machineconfiguration.openshift.io",
        "nicclusterpolicies.mellanox.com",
        "clusterversions.config.openshift.io",
    } <= crds
    labels = (
        json.loads(twin.kubectl("get", "crd", "clusterpolicies.nvidia.com", "-o", "json").stdout)["metadata"].get(
            "labels"
        )
        or {}
    )
    assert "gpufleet.io/twin-minimal-crd" not in labels
    established = json.loads(twin.kubectl("get", "crd", "nvidiadrivers.nvidia.com", "-o", "json").stdout)["status"]
    assert {"type": "Established", "status": "True"}.items() <= established["conditions"][1].items()
    assert twin.kubectl("get", "mcp").returncode == 0


def test_merge_patch_of_an_unknown_field_is_accepted_and_the_field_dropped(twin, cluster_policy):
    patch = {"spec": {"driver": {"version": "570.124.06", "nodeSelector": {"gpufleet.io/canary": "true"}}}}
    result = twin.request(
        "PATCH",
        "/apis/nvidia.com/v1/clusterpolicies/gpu-cluster-policy",
        body=patch,
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert result.status == 200
    assert 'unknown field \\"spec.driver.nodeSelector\\"' in result.headers["Warning"]
    driver = result.json()["spec"]["driver"]
    assert driver["version"] == "570.124.06"
    assert "nodeSelector" not in driver
    # The same through the Python client, which sends no fieldValidation (the server's default is Warn).
    stored = cluster_policy.patch_cluster_custom_object(
        "nvidia.com", "v1", "clusterpolicies", "gpu-cluster-policy", patch
    )
    assert "nodeSelector" not in stored["spec"]["driver"]
    assert {"autoUpgrade": True, "maxUnavailable": "25%"}.items() <= stored["spec"]["driver"]["upgradePolicy"].items()


def test_strict_field_validation_refuses_unknown_fields_of_custom_resources(twin, cluster_policy):
    result = twin.request(
        "PATCH",
        "/apis/nvidia.com/v1/clusterpolicies/gpu-cluster-policy?fieldValidation=Strict",
        body={"spec": {"driver": {"nodeSelector": {"a": "b"}}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert result.status == 400
    assert 'strict decoding error: unknown field "spec.driver.nodeSelector"' in result.json()["message"]


def test_kubectl_apply_and_get_of_a_cluster_policy(twin, cluster_policy, tmp_path):
    manifest = tmp_path / "cp.yaml"
    manifest.write_text(
        yaml.safe_dump({**CLUSTER_POLICY, "spec": {**CLUSTER_POLICY["spec"], "driver": {"version": "580.82.07"}}})
    )
    assert "configured" in twin.kubectl("apply", "-f", str(manifest)).stdout
    header = twin.kubectl("get", "clusterpolicies").stdout.splitlines()[0].split()
    assert header == ["NAME", "STATUS", "AGE"]
    value = twin.kubectl("get", "clusterpolicy", "gpu-cluster-policy", "-o", "jsonpath={.spec.driver.version}").stdout
    assert value == "580.82.07"


def test_a_crd_created_through_the_api_is_served_at_once(twin, api_client):
    crd = yaml.safe_load(
        textwrap.dedent("""\
            apiVersion: apiextensions.k8s.io/v1
            kind: CustomResourceDefinition
            metadata: {name: widgets.example.com}
            spec:
              group: example.com
              scope: Namespaced
              names: {kind: Widget, plural: widgets, singular: widget, shortNames: [wdg], categories: [all]}
              versions:
              - name: v1
                served: true
                storage: true
                additionalPrinterColumns:
                - {name: Size, type: integer, jsonPath: .spec.size}
                - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
                - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
                subresources: {status: {}}
                schema:
                  openAPIV3Schema:
                    type: object
                    properties:
                      spec:
                        type: object
                        properties:
                          size: {type: integer, minimum: 1}
                      status:
                        type: object
                        properties:
                          conditions:
                            type: array
                            items: {type: object, x-kubernetes-preserve-unknown-fields: true}
        """)
    )
    extensions = client.ApiextensionsV1Api(api_client)
    extensions.create_custom_resource_definition(crd)
    try:
        assert twin.request("GET", "/apis/example.com/v1").json()["resources"][0]["name"] == "widgets"
        twin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "widgets"}})
        made = twin.request(
            "POST",
            "/apis/example.com/v1/namespaces/widgets/widgets",
            body={"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": 3}},
        )
        assert made.status == 201
        twin.request(
            "PATCH",
            "/apis/example.com/v1/namespaces/widgets/widgets/w1/status",
            body={"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        invalid = twin.request(
            "POST",
            "/apis/example.com/v1/namespaces/widgets/widgets",
            body={"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"}, "spec": {"size": 0}},
        )
        assert invalid.status == 422
        rows = twin.kubectl("get", "wdg", "-n", "widgets").stdout.splitlines()
        assert rows[0].split() == ["NAME", "SIZE", "READY", "AGE"]
        assert rows[1].split()[:3] == ["w1", "3", "True"]
        assert "widget.example.com/w1" in twin.kubectl("get", "all", "-n", "widgets", "-o", "name").stdout
    finally:
        extensions.delete_custom_resource_definition("widgets.example.com")
        twin.request("DELETE", "/api/v1/namespaces/widgets")
    assert twin.request("GET", "/apis/example.com/v1").status == 404
    with pytest.raises(ApiException) as gone:
        client.CustomObjectsApi(api_client).list_namespaced_custom_object("example.com", "v1", "widgets", "widgets")
    assert gone.value.status == 404


def test_crd_manifests_load_from_lists_and_multi_document_files(tmp_path):
    single = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "a.x.io"},
    }
    (tmp_path / "list.yaml").write_text(
        yaml.safe_dump(
            {"apiVersion": "v1", "kind": "List", "items": [single, dict(single, metadata={"name": "b.x.io"})]}
        )
    )
    (tmp_path / "multi.yml").write_text(
        yaml.safe_dump(dict(single, metadata={"name": "c.x.io"})) + "---\n{kind: ConfigMap}\n"
    )
    (tmp_path / "notes.txt").write_text("not a manifest")
    names = [crd["metadata"]["name"] for crd in load_crd_manifests(tmp_path)]
    assert names == ["a.x.io", "b.x.io", "c.x.io"]


def test_kubectl_with_a_warm_discovery_cache_applies_an_object_of_a_crd_it_just_created(launcher, tmp_path):
    """kubectl keeps discovery in an HTTP cache that judges freshness by the response's Date against its own clock.
    A twin on simulated time sends a Date ahead of kubectl's: unless discovery says no-cache, the cached list
    without the new kind looks fresh and kubectl answers "ensure CRDs are installed first" (a clean-clone CI run
    failed so, on a port an earlier twin had used)."""
    twin = launcher.start(tmp_path / "twin", "--bare", "--nodes", "0", "--time-scale", "600")
    try:
        kubectl_applies_a_crd_and_its_object(twin, tmp_path)
    finally:
        assert launcher.stop(twin) == 0


def kubectl_applies_a_crd_and_its_object(twin, tmp_path):
    twin.kubectl("api-resources")  # the cache, warm and without gadgets
    wait_until_the_twins_clock_is_ahead(twin)
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }
    gadget = {"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g1", "namespace": "default"}}
    (tmp_path / "crd.yaml").write_text(yaml.safe_dump(crd))
    (tmp_path / "gadget.yaml").write_text(yaml.safe_dump(gadget))
    twin.kubectl("apply", "-f", str(tmp_path / "crd.yaml"))
    try:
        assert "gadget.example.com/g1 created" in twin.kubectl("apply", "-f", str(tmp_path / "gadget.yaml")).stdout
        assert twin.kubectl("get", "gadgets", "-n", "default", "-o", "name").stdout.split() == ["gadget.example.com/g1"]
    finally:
        twin.kubectl("delete", "crd", "gadgets.example.com", "--wait=false")


def wait_until_the_twins_clock_is_ahead(twin) -> None:
    """Until the twin's Date is a minute ahead of the wall clock (a tenth of a second at 600 times)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        date = email.utils.parsedate_to_datetime(twin.request("GET", "/version").headers["Date"])
        if (date - datetime.datetime.now(datetime.UTC)).total_seconds() > 60:
            return
        time.sleep(0.1)
    raise AssertionError("the twin's clock did not run ahead")
