"""What a real kube-apiserver returns that clients test for: omitted zero values, generated names, the
field.Error wording of validation failures, the API groups of a plain Kubernetes cluster, Leases."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent
GENERATED_SUFFIX = re.compile(r"^[bcdfghjklmnpqrstvwxz2456789]{5}$")


# -- omitempty --------------------------------------------------------------------------------------------
def _patch_node(twin, name, patch):
    answer = twin.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        body=patch,
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    assert answer.status == 200, answer.body
    return answer.json()


def test_patching_unschedulable_false_and_empty_taints_reads_back_without_the_keys(twin, kit):
    name = kit.unique("node")
    kit.node(name)
    cordoned = _patch_node(
        twin,
        name,
        {
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
            }
        },
    )
    assert cordoned["spec"]["unschedulable"] is True
    _patch_node(twin, name, {"spec": {"unschedulable": False, "taints": []}})
    spec = twin.request("GET", f"/api/v1/nodes/{name}").json()["spec"]
    assert "unschedulable" not in spec and "taints" not in spec, spec
    # kubectl patch, as a person types it.
    twin.kubectl("patch", "node", name, "-p", '{"spec":{"unschedulable":true}}')
    twin.kubectl("patch", "node", name, "-p", '{"spec":{"unschedulable":false}}')
    read = json.loads(twin.kubectl("get", "node", name, "-o", "json").stdout)
    assert "unschedulable" not in read["spec"]


def test_zero_values_without_omitempty_and_pointer_fields_stay(twin, kit, namespace):
    pod = {
        "metadata": {"name": "p", "labels": {}},
        "spec": {
            "hostNetwork": False,
            "automountServiceAccountToken": False,  # *bool: false is a value
            "priority": 0,  # *int32
            "containers": [{"name": "c", "image": "i:1", "stdin": False, "ports": []}],
        },
    }
    created = twin.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=pod).json()
    assert "labels" not in created["metadata"]
    assert "hostNetwork" not in created["spec"]
    assert created["spec"]["automountServiceAccountToken"] is False
    assert created["spec"]["priority"] == 0
    assert set(created["spec"]["containers"][0]) >= {"name", "image"}
    assert "stdin" not in created["spec"]["containers"][0] and "ports" not in created["spec"]["containers"][0]
    rs = {
        "metadata": {"name": "rs"},
        "spec": {
            "selector": {"matchLabels": {"app": "rs"}},
            "template": {"metadata": {"labels": {"app": "rs"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }
    apps = f"/apis/apps/v1/namespaces/{namespace}/replicasets"
    assert twin.request("POST", apps, body=rs).status == 201
    status = twin.request(
        "PUT",
        f"{apps}/rs/status",
        body={**twin.request("GET", f"{apps}/rs").json(), "status": {"replicas": 0, "readyReplicas": 0}},
    )
    assert status.status == 200, status.body
    # ReplicaSetStatus.replicas has no omitempty; readyReplicas has.
    assert status.json()["status"] == {"replicas": 0}


def test_kubernetes_core_patched_unschedulable_false_reads_back_without_the_key(twin, kit, tmp_path):
    name = kit.unique("node")
    kit.node(name)
    _patch_node(twin, name, {"spec": {"unschedulable": True}})
    playbook = tmp_path / "uncordon.yml"
    playbook.write_text(
        """\
- name: Uncordon as kubernetes.core users do
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Patch unschedulable to false
      kubernetes.core.k8s:
        state: patched
        api_version: v1
        kind: Node
        name: "{{ node }}"
        definition:
          spec:
            unschedulable: false
      register: patched

    - name: Report
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ patched.result | to_json }}"
        mode: "0600"
"""
    )
    out = tmp_path / "out.json"
    run = kit.ansible_playbook(playbook, {"node": name, "out": str(out)}, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "unschedulable" not in json.loads(out.read_text())["spec"]
    assert "unschedulable" not in twin.request("GET", f"/api/v1/nodes/{name}").json()["spec"]


# -- names ----------------------------------------------------------------------------------------------
def test_generated_name_suffixes_use_the_real_alphabet(twin, core, namespace):
    names = []
    for _ in range(20):
        made = core.create_namespaced_config_map(namespace, {"metadata": {"generateName": "run-"}})
        names.append(made.metadata.name)
    created = twin.kubectl(
        "create",
        "-n",
        namespace,
        "-o",
        "name",
        "-f",
        "-",
        stdin="apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: by-kubectl-\n",
    ).stdout.strip()
    names.append(created.removeprefix("configmap/"))
    for name in names:
        prefix, _, suffix = name.rpartition("-")
        assert prefix in ("run", "by-kubectl") and GENERATED_SUFFIX.match(suffix), name
    # The base is cut so that the name stays within 63 characters.
    long_base = "x" * 70
    made = core.create_namespaced_config_map(namespace, {"metadata": {"generateName": long_base}})
    assert len(made.metadata.name) == 63 and made.metadata.name.startswith("x" * 58)


def test_a_missing_name_is_refused_with_the_real_status(twin, namespace):
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    answer = twin.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body={"metadata": {}})
    assert answer.status == 422
    status = answer.json()
    assert status["reason"] == "Invalid"
    assert (
        status["message"] == 'ConfigMap "" is invalid: metadata.name: Required value: name or generateName is required'
    )
    assert status["details"] == {
        "kind": "ConfigMap",
        "causes": [
            {
                "reason": "FieldValueRequired",
                "message": "Required value: name or generateName is required",
                "field": "metadata.name",
            }
        ],
    }
    refused = twin.kubectl(
        "create", "-n", namespace, "-f", "-", stdin="apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", check=False
    )
    assert refused.returncode != 0
    assert "metadata.name: Required value: name or generateName is required" in refused.stderr
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(twin.kubeconfig)))
    with pytest.raises(ApiException) as failure:
        api.create_namespaced_config_map(namespace, {"metadata": {}})
    assert failure.value.status == 422
    assert json.loads(failure.value.body)["details"]["causes"][0]["field"] == "metadata.name"


def test_an_invalid_name_gets_the_real_field_error(twin, namespace):
    answer = twin.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body={"metadata": {"name": "Bad_Name"}})
    assert answer.status == 422
    cause = answer.json()["details"]["causes"][0]
    assert cause["field"] == "metadata.name"
    assert cause["message"].startswith(
        'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
        "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
        "regex used for validation is"
    )
    too_long = twin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "n" * 64}})
    assert [c["message"] for c in too_long.json()["details"]["causes"]] == [
        f'Invalid value: "{"n" * 64}": must be no more than 63 characters'
    ]
    two = twin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "N" * 64}})
    assert two.json()["message"].startswith('Namespace "' + "N" * 64 + '" is invalid: [metadata.name: Invalid value')


# -- the kubernetes profile's API groups ---------------------------------------------------------------
OPENSHIFT_GROUPS = ("config.openshift.io", "machineconfiguration.openshift.io", "operators.coreos.com")


def test_the_kubernetes_profile_serves_no_openshift_groups(sim_twin, twin):
    groups = {g["name"] for g in sim_twin.request("GET", "/apis").json()["groups"]}
    assert not groups & set(OPENSHIFT_GROUPS), groups
    assert {"nvidia.com", "mellanox.com", "apps", "coordination.k8s.io"} <= groups
    versions = sim_twin.kubectl("api-versions").stdout.split()
    assert not [v for v in versions if v.split("/")[0] in OPENSHIFT_GROUPS], versions
    missing = sim_twin.kubectl("get", "clusterversions", check=False)
    assert missing.returncode != 0 and "doesn't have a resource type" in missing.stderr
    # The openshift profile (the session's bare twin) still serves them.
    served = {g["name"] for g in twin.request("GET", "/apis").json()["groups"]}
    assert {"config.openshift.io", "machineconfiguration.openshift.io"} <= served


# -- Leases ---------------------------------------------------------------------------------------------
LEASE = """\
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: run-lock
  namespace: {namespace}
spec:
  holderIdentity: run-a
  leaseDurationSeconds: 60
"""


def test_leases_with_kubectl_show_holder_and_age_and_refuse_stale_writes(twin, namespace):
    twin.kubectl("apply", "-f", "-", stdin=LEASE.format(namespace=namespace))
    table = twin.kubectl("get", "leases", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "HOLDER", "AGE"]
    assert table[1].split()[:2] == ["run-lock", "run-a"]
    lease = json.loads(twin.kubectl("get", "lease", "run-lock", "-n", namespace, "-o", "json").stdout)
    stale = dict(lease, spec=dict(lease["spec"], holderIdentity="run-b"))
    twin.kubectl(
        "patch", "lease", "run-lock", "-n", namespace, "--type=merge", "-p", '{"spec":{"holderIdentity":"run-c"}}'
    )
    refused = twin.kubectl("replace", "-f", "-", stdin=json.dumps(stale), check=False)
    assert refused.returncode != 0 and "the object has been modified" in refused.stderr
    held = json.loads(twin.kubectl("get", "lease", "run-lock", "-n", namespace, "-o", "json").stdout)
    assert held["spec"]["holderIdentity"] == "run-c"
    assert "generation" not in held["metadata"]


def test_leases_with_the_python_client_use_optimistic_concurrency(twin, namespace):
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    api = client.CoordinationV1Api(config.new_client_from_config(config_file=str(twin.kubeconfig)))
    created = api.create_namespaced_lease(
        namespace,
        {
            "metadata": {"name": "lock"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 30, "acquireTime": "2026-01-01T00:00:00.000000Z"},
        },
    )
    assert created.spec.holder_identity == "a" and created.spec.lease_duration_seconds == 30
    first = api.read_namespaced_lease("lock", namespace)
    first.spec.holder_identity = "b"
    first.spec.lease_transitions = 1
    taken = api.replace_namespaced_lease("lock", namespace, first)
    assert taken.spec.holder_identity == "b"
    assert int(taken.metadata.resource_version) > int(created.metadata.resource_version)
    # A second writer that read before the take-over loses: 409 Conflict, nothing changed.
    created.spec.holder_identity = "c"
    with pytest.raises(ApiException) as lost:
        api.replace_namespaced_lease("lock", namespace, created)
    assert lost.value.status == 409
    assert json.loads(lost.value.body)["reason"] == "Conflict"
    # A patch carrying the resourceVersion it was computed from is guarded the same way.
    with pytest.raises(ApiException) as stale_patch:
        api.patch_namespaced_lease(
            "lock",
            namespace,
            {"metadata": {"resourceVersion": created.metadata.resource_version}, "spec": {"holderIdentity": "d"}},
        )
    assert stale_patch.value.status == 409
    guarded = api.patch_namespaced_lease(
        "lock",
        namespace,
        {
            "metadata": {"resourceVersion": taken.metadata.resource_version},
            "spec": {"renewTime": "2026-01-01T00:00:10.000000Z"},
        },
    )
    assert guarded.spec.holder_identity == "b" and guarded.spec.lease_transitions == 1
    assert api.read_namespaced_lease("lock", namespace).spec.holder_identity == "b"


def test_a_selector_that_misses_the_template_labels_is_refused_in_field_error_wording(twin, namespace):
    deployment = {
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {
                "metadata": {"labels": {"tier": "x", "app": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i:1"}]},
            },
        },
    }
    answer = twin.request("POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", body=deployment)
    assert answer.status == 422
    assert answer.json()["message"] == (
        'Deployment.apps "d" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"b", "tier":"x"}: `selector` does not match template `labels`'
    )
