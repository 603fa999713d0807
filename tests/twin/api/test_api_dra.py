"""resource.k8s.io/v1 (Dynamic Resource Allocation) served as kube-apiserver 1.34 serves it: discovery,
scopes, columns, defaults and the validation a client meets on create and update; pods that name
ResourceClaims.  Allocation itself (scheduler, DRA driver, kubelet) is not simulated."""

from __future__ import annotations

import json

import pytest

DEVICE_CLASS = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata:
  name: gpu.nvidia.com
spec:
  selectors:
    - cel:
        expression: device.driver == 'gpu.nvidia.com'
"""

CLAIM_TEMPLATE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: single-gpu
  namespace: {namespace}
spec:
  spec:
    devices:
      requests:
        - name: gpu
          exactly:
            deviceClassName: gpu.nvidia.com
"""

CLAIM = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: shared-gpu
  namespace: {namespace}
spec:
  devices:
    requests:
      - name: gpu
        exactly:
          deviceClassName: gpu.nvidia.com
          count: 2
"""

SLICE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata:
  name: {name}
spec:
  driver: gpu.nvidia.com
  nodeName: gpu-node-0
  pool:
    name: gpu-node-0
    generation: 1
    resourceSliceCount: 1
  devices:
    - name: gpu-0
      attributes:
        productName:
          string: NVIDIA H100 80GB HBM3
"""

POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: trainer
  namespace: {namespace}
spec:
  resourceClaims:
    - name: gpus
      resourceClaimTemplateName: single-gpu
  containers:
    - name: main
      image: registry.example/trainer:1
      resources:
        claims:
          - name: gpus
"""


def test_kubectl_discovers_the_dra_kinds_with_their_scopes(twin):
    listed = twin.kubectl("api-resources", "--api-group=resource.k8s.io", "-o", "wide").stdout.splitlines()
    rows = {line.split()[0]: line.split() for line in listed[1:]}
    assert set(rows) == {"deviceclasses", "resourceclaims", "resourceclaimtemplates", "resourceslices"}
    # NAME APIVERSION NAMESPACED KIND VERBS (no short names on these kinds).
    assert rows["deviceclasses"][1:4] == ["resource.k8s.io/v1", "false", "DeviceClass"]
    assert rows["resourceslices"][1:4] == ["resource.k8s.io/v1", "false", "ResourceSlice"]
    assert rows["resourceclaims"][1:4] == ["resource.k8s.io/v1", "true", "ResourceClaim"]
    assert rows["resourceclaimtemplates"][1:4] == ["resource.k8s.io/v1", "true", "ResourceClaimTemplate"]
    group = twin.request("GET", "/apis/resource.k8s.io/v1").json()
    names = {r["name"] for r in group["resources"]}
    assert "resourceclaims/status" in names and "deviceclasses/status" not in names
    # kubectl explain reads the structure from /openapi/v3 (no descriptions are served).
    explained = twin.kubectl("explain", "resourceclaims.spec.devices.requests.exactly").stdout
    assert "deviceClassName" in explained and "allocationMode" in explained
    explained = twin.kubectl("explain", "resourceslices.spec.nodeSelector").stdout
    assert "nodeSelectorTerms" in explained


def test_both_profiles_serve_the_group(twin, sim_twin):
    for served in (twin, sim_twin):  # openshift (bare) and kubernetes (simulated)
        versions = served.kubectl("api-versions").stdout.split()
        assert "resource.k8s.io/v1" in versions
        assert not [v for v in versions if v.startswith("resource.k8s.io/v1beta")]  # only v1 is served


def test_kubectl_creates_and_lists_classes_templates_claims_and_slices(twin, namespace, kit):
    slice_name = kit.unique("gpu-node-0-gpu.nvidia.com")
    twin.kubectl("apply", "-f", "-", stdin=DEVICE_CLASS)
    twin.kubectl("apply", "-f", "-", stdin=CLAIM_TEMPLATE.format(namespace=namespace))
    twin.kubectl("apply", "-f", "-", stdin=CLAIM.format(namespace=namespace))
    twin.kubectl("apply", "-f", "-", stdin=SLICE.format(name=slice_name))

    classes = twin.kubectl("get", "deviceclasses").stdout.splitlines()
    assert classes[0].split() == ["NAME", "AGE"]
    assert any(line.split()[0] == "gpu.nvidia.com" for line in classes[1:])
    claims = twin.kubectl("get", "resourceclaims", "-n", namespace).stdout.splitlines()
    assert claims[0].split() == ["NAME", "STATE", "AGE"]
    assert claims[1].split()[:2] == ["shared-gpu", "pending"]
    templates = twin.kubectl("get", "resourceclaimtemplates", "-n", namespace).stdout.splitlines()
    assert templates[0].split() == ["NAME", "AGE"] and templates[1].split()[0] == "single-gpu"
    slices = twin.kubectl("get", "resourceslices").stdout.splitlines()
    assert slices[0].split() == ["NAME", "NODE", "DRIVER", "POOL", "AGE"]
    row = next(line.split() for line in slices[1:] if line.split()[0] == slice_name)
    assert row[1:4] == ["gpu-node-0", "gpu.nvidia.com", "gpu-node-0"]

    claim = json.loads(twin.kubectl("get", "resourceclaim", "shared-gpu", "-n", namespace, "-o", "json").stdout)
    # SetDefaults_ExactDeviceRequest: ExactCount; the given count is kept.
    assert claim["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 2,
    }
    template = json.loads(
        twin.kubectl("get", "resourceclaimtemplate", "single-gpu", "-n", namespace, "-o", "json").stdout
    )
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1
    device_class = json.loads(twin.kubectl("get", "deviceclass", "gpu.nvidia.com", "-o", "json").stdout)
    assert device_class["spec"]["selectors"][0]["cel"]["expression"] == "device.driver == 'gpu.nvidia.com'"
    assert "namespace" not in device_class["metadata"]


def test_a_pod_with_resource_claims_is_admitted_and_keeps_them(twin, namespace):
    twin.kubectl("apply", "-f", "-", stdin=POD.format(namespace=namespace))
    pod = json.loads(twin.kubectl("get", "pod", "trainer", "-n", namespace, "-o", "json").stdout)
    assert pod["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "single-gpu"}]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpus"}]


def test_a_pod_naming_an_unknown_claim_or_no_claim_source_is_refused(twin, namespace):
    unknown = POD.format(namespace=namespace).replace("          - name: gpus\n", "          - name: gpu\n")
    refused = twin.kubectl("create", "-f", "-", stdin=unknown, check=False)
    assert refused.returncode != 0
    assert (
        'spec.containers[0].resources.claims[0]: Not found: "gpu": '
        "must be one of the names in pod.spec.resourceClaims: gpus" in refused.stderr
    )
    sourceless = POD.format(namespace=namespace).replace("      resourceClaimTemplateName: single-gpu\n", "")
    refused = twin.kubectl("create", "-f", "-", stdin=sourceless, check=False)
    assert (
        'spec.resourceClaims[0]: Invalid value: core.PodResourceClaim{Name:"gpus", '
        "ResourceClaimName:(*string)(nil), ResourceClaimTemplateName:(*string)(nil)}: "
        "must specify one of: `resourceClaimName`, `resourceClaimTemplateName`" in refused.stderr
    )
    assert twin.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout == ""


def test_kubectl_meets_the_real_validation_of_claims_and_slices(twin, namespace, kit):
    no_device = CLAIM.format(namespace=namespace).replace(
        "        exactly:\n          deviceClassName: gpu.nvidia.com\n          count: 2\n", ""
    )
    refused = twin.kubectl("create", "-f", "-", stdin=no_device, check=False)
    assert refused.returncode != 0
    assert (
        'The ResourceClaim "shared-gpu" is invalid: spec.devices.requests[0]: '
        "Required value: exactly one of `exactly` or `firstAvailable` is required" in refused.stderr
    )
    no_class = CLAIM.format(namespace=namespace).replace("deviceClassName: gpu.nvidia.com", "count: 1")
    no_class = no_class.replace("          count: 2\n", "")
    refused = twin.kubectl("create", "-f", "-", stdin=no_class, check=False)
    assert "spec.devices.requests[0].exactly.deviceClassName: Required value" in refused.stderr
    bad_name = CLAIM.format(namespace=namespace).replace("- name: gpu", "- name: GPU_0")
    refused = twin.kubectl("create", "-f", "-", stdin=bad_name, check=False)
    assert 'spec.devices.requests[0].name: Invalid value: "GPU_0": a lowercase RFC 1123 label' in refused.stderr
    assert twin.kubectl("get", "resourceclaims", "-n", namespace, "-o", "name").stdout == ""

    twin.kubectl("create", "-f", "-", stdin=CLAIM.format(namespace=namespace))
    changed = twin.kubectl(
        "patch",
        "resourceclaim",
        "shared-gpu",
        "-n",
        namespace,
        "--type=json",
        "-p",
        '[{"op":"replace","path":"/spec/devices/requests/0/exactly/count","value":3}]',
        check=False,
    )
    assert changed.returncode != 0 and "spec: Invalid value" in changed.stderr
    assert "field is immutable" in changed.stderr
    labelled = twin.kubectl("label", "resourceclaim", "shared-gpu", "-n", namespace, "team=ml")
    assert labelled.returncode == 0

    nowhere = SLICE.format(name=kit.unique("slice")).replace("  nodeName: gpu-node-0\n", "")
    refused = twin.kubectl("create", "-f", "-", stdin=nowhere, check=False)
    assert (
        "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
        "`perDeviceNodeSelection` is required" in refused.stderr
    )
    invalid_class = DEVICE_CLASS.replace("gpu.nvidia.com\nspec", "GPU_Class\nspec")
    refused = twin.kubectl("create", "-f", "-", stdin=invalid_class, check=False)
    assert 'metadata.name: Invalid value: "GPU_Class"' in refused.stderr


def test_a_claim_status_is_written_through_its_subresource_only(twin, namespace):
    created = twin.request(
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims",
        body={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
            "status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u1"}]},
        },
    )
    assert created.status == 201, created.body
    assert "reservedFor" not in (created.json().get("status") or {})  # PrepareForCreate drops status
    path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/c/status"
    allocation = {
        "devices": {"results": [{"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n0", "device": "gpu-0"}]}
    }
    for uid in ("u1", "u2"):
        answer = twin.request(
            "PATCH",
            path,
            body={"status": {"allocation": allocation, "reservedFor": [{"resource": "pods", "name": uid, "uid": uid}]}},
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        )
        assert answer.status == 200, answer.body
    status = answer.json()["status"]
    # reservedFor merges on uid under strategic merge patch.
    assert sorted(r["uid"] for r in status["reservedFor"]) == ["u1", "u2"]
    table = twin.kubectl("get", "resourceclaim", "c", "-n", namespace).stdout.splitlines()
    assert table[1].split()[1] == "allocated,reserved"


def test_the_python_client_serves_claims_and_classes(twin, namespace):
    from kubernetes import config, dynamic
    from kubernetes.client.rest import ApiException

    client = dynamic.DynamicClient(config.new_client_from_config(config_file=str(twin.kubeconfig)))
    claims = client.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
    classes = client.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass")
    assert claims.namespaced and not classes.namespaced
    classes.create(
        body={"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "mig.nvidia.com"}}
    )
    assert classes.get(name="mig.nvidia.com").metadata.name == "mig.nvidia.com"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "py-claim"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "gpu.nvidia.com"},
                            {"name": "small", "deviceClassName": "mig.nvidia.com", "allocationMode": "All"},
                        ],
                    }
                ]
            }
        },
    }
    created = claims.create(body=body, namespace=namespace)
    first = created.to_dict()["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert first[0]["allocationMode"] == "ExactCount" and first[0]["count"] == 1
    assert first[1]["allocationMode"] == "All" and "count" not in first[1]
    assert [c.metadata.name for c in claims.get(namespace=namespace).items] == ["py-claim"]
    with pytest.raises(ApiException) as both:
        claims.create(
            body={
                **body,
                "metadata": {"name": "both"},
                "spec": {
                    "devices": {
                        "requests": [
                            {
                                "name": "gpu",
                                "exactly": {"deviceClassName": "gpu.nvidia.com"},
                                "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}],
                            }
                        ]
                    }
                },
            },
            namespace=namespace,
        )
    assert both.value.status == 422
    cause = json.loads(both.value.body)["details"]["causes"][0]
    assert cause["field"] == "spec.devices.requests[0]"
    assert "but multiple fields are set" in cause["message"]


def test_kubernetes_core_creates_a_claim_template(twin, kit, namespace, tmp_path):
    playbook = tmp_path / "dra.yml"
    playbook.write_text(
        """\
- name: Create a ResourceClaimTemplate as kubernetes.core users do
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Claim template for one GPU
      kubernetes.core.k8s:
        state: present
        definition:
          apiVersion: resource.k8s.io/v1
          kind: ResourceClaimTemplate
          metadata:
            name: one-gpu
            namespace: "{{ ns }}"
          spec:
            spec:
              devices:
                requests:
                  - name: gpu
                    exactly:
                      deviceClassName: gpu.nvidia.com
      register: created

    - name: Report
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ created | to_json }}"
        mode: "0600"
"""
    )
    out = tmp_path / "out.json"
    run = kit.ansible_playbook(playbook, {"ns": namespace, "out": str(out)}, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["changed"] is True
    exactly = result["result"]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}
    stored = twin.request(
        "GET", f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates/one-gpu"
    ).json()
    assert stored["spec"]["spec"]["devices"]["requests"][0]["name"] == "gpu"
