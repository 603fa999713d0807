"""Deletion propagation as kube-apiserver and kube-controller-manager's garbage collector do it.

The API server only sets finalizers (``foregroundDeletion`` for Foreground, ``orphan`` for Orphan and,
for batch/v1 Jobs, by default); the garbage collector deletes or orphans the dependents and then
removes the finalizer.  Driven with raw requests, kubectl and kubernetes.core in a real
``ansible-playbook`` run.  Where it matters whether a command returned too early, the assertion is
on the cluster's state right after it returned (the Job's pods were already gone), never on timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def _configmap(twin, namespace, name, owner, *, block=None):
    reference = {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
    }
    if block is not None:
        reference["blockOwnerDeletion"] = block
    made = twin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"metadata": {"name": name, "ownerReferences": [reference]}},
    )
    assert made.status == 201, made.body
    return made.json()


def _owner(twin, namespace, name):
    made = twin.request(
        "POST", f"/api/v1/namespaces/{namespace}/configmaps", body={"metadata": {"name": name}, "data": {"a": "b"}}
    )
    assert made.status == 201, made.body
    return made.json()


def _get(twin, namespace, name):
    return twin.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}")


def test_foreground_keeps_the_owner_with_its_finalizer_until_blocking_dependents_are_gone(twin, kit, namespace):
    owner = _owner(twin, namespace, "owner")
    # A dependent that blocks, held by another finalizer: the owner must wait for it.
    _configmap(twin, namespace, "blocking", owner, block=True)
    held = twin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/blocking",
        body={"metadata": {"finalizers": ["example.com/hold"]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert held.status == 200, held.body
    _configmap(twin, namespace, "loose", owner, block=False)
    answer = twin.request(
        "DELETE", f"/api/v1/namespaces/{namespace}/configmaps/owner", body={"propagationPolicy": "Foreground"}
    )
    assert answer.status == 200, answer.body
    body = answer.json()
    assert body["kind"] == "ConfigMap", "a terminating object comes back, not a Status"
    assert body["metadata"]["deletionTimestamp"]
    assert body["metadata"]["finalizers"] == ["foregroundDeletion"]
    # The collector deletes every dependent; the blocking one stays terminating on its own finalizer.
    kit.wait_for(lambda: _get(twin, namespace, "loose").status == 404)
    blocking = kit.wait_for(
        lambda: (
            (found := _get(twin, namespace, "blocking").json()).get("metadata", {}).get("deletionTimestamp") and found
        )
    )
    assert blocking["metadata"]["finalizers"] == ["example.com/hold"]
    assert _get(twin, namespace, "owner").json()["metadata"]["finalizers"] == ["foregroundDeletion"]
    released = twin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/blocking",
        body={"metadata": {"finalizers": None}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert released.status == 200, released.body
    kit.wait_for(lambda: _get(twin, namespace, "owner").status == 404)


def test_orphan_removes_the_references_then_the_owner(twin, kit, namespace):
    owner = _owner(twin, namespace, "owner")
    other = _owner(twin, namespace, "other")
    _configmap(twin, namespace, "child", owner, block=True)
    both = _configmap(twin, namespace, "shared", owner)
    twin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/shared",
        body={"metadata": {"ownerReferences": [*both["metadata"]["ownerReferences"], _reference(other)]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    # The legacy option, as a query parameter.
    answer = twin.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/owner?orphanDependents=true")
    assert answer.status == 200, answer.body
    assert answer.json()["metadata"]["finalizers"] == ["orphan"]
    kit.wait_for(lambda: _get(twin, namespace, "owner").status == 404)
    assert "ownerReferences" not in _get(twin, namespace, "child").json()["metadata"]
    shared = _get(twin, namespace, "shared").json()
    assert [ref["name"] for ref in shared["metadata"]["ownerReferences"]] == ["other"]


def _reference(obj):
    return {"apiVersion": "v1", "kind": obj["kind"], "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}


def test_background_removes_the_owner_at_once_and_dependents_after(twin, kit, namespace):
    owner = _owner(twin, namespace, "owner")
    other = _owner(twin, namespace, "other")
    _configmap(twin, namespace, "child", owner, block=True)
    kept = _configmap(twin, namespace, "kept", owner)
    twin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/kept",
        body={"metadata": {"ownerReferences": [*kept["metadata"]["ownerReferences"], _reference(other)]}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    answer = twin.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/owner?propagationPolicy=Background")
    assert answer.status == 200 and answer.json()["kind"] == "Status", answer.body
    assert _get(twin, namespace, "owner").status == 404
    kit.wait_for(lambda: _get(twin, namespace, "child").status == 404)
    # A dependent with another live owner only loses the reference to the deleted one.
    kit.wait_for(lambda: len(_get(twin, namespace, "kept").json()["metadata"]["ownerReferences"]) == 1)


def test_other_finalizers_keep_the_object_terminating_as_real(twin, namespace):
    twin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"metadata": {"name": "held", "finalizers": ["example.com/hold"]}},
    )
    answer = twin.request("DELETE", f"/api/v1/namespaces/{namespace}/configmaps/held")
    assert answer.status == 200 and answer.json()["metadata"]["deletionTimestamp"]
    assert answer.json()["metadata"]["finalizers"] == ["example.com/hold"]
    assert _get(twin, namespace, "held").status == 200
    twin.request(
        "PATCH",
        f"/api/v1/namespaces/{namespace}/configmaps/held",
        body={"metadata": {"finalizers": []}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    assert _get(twin, namespace, "held").status == 404


def test_jobs_orphan_by_default_with_the_real_warning_and_202_for_orphan_dependents_false(twin, namespace):
    job = {
        "metadata": {"name": "j"},
        "spec": {
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "registry.local/x:1"}]}
            }
        },
    }
    jobs = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    assert twin.request("POST", jobs, body=job).status == 201
    answer = twin.request("DELETE", f"{jobs}/j", body={"kind": "DeleteOptions", "apiVersion": "v1"})
    assert answer.status == 200, answer.body
    assert "child pods are preserved by default when jobs are deleted" in answer.headers.get("Warning", "")
    assert answer.json()["metadata"]["finalizers"] == ["orphan"]
    # The legacy orphanDependents=false asks for cascading: 202 while the object is still there.
    job["metadata"]["name"] = "k"
    job["metadata"]["finalizers"] = ["example.com/hold"]
    assert twin.request("POST", jobs, body=job).status == 201
    accepted = twin.request("DELETE", f"{jobs}/k", body={"orphanDependents": False})
    assert accepted.status == 202, accepted.body
    assert "Warning" not in accepted.headers
    both = twin.request("DELETE", f"{jobs}/k", body={"orphanDependents": False, "propagationPolicy": "Foreground"})
    assert both.status == 422
    assert both.json()["details"]["causes"][0]["field"] == "propagationPolicy"


# -- a simulated cluster: Job pods run on a kubelet and terminate gracefully ------------------------------

JOB_MANIFEST = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations:
        twin.gpufleet.io/outcome: succeeded
        twin.gpufleet.io/run-for: "36000"
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 30
      containers:
        - name: main
          image: registry.local/eval:1.0
"""


def _running_job(sim_twin, kit, namespace, name):
    sim_twin.kubectl("apply", "-f", "-", stdin=JOB_MANIFEST.format(name=name, namespace=namespace))

    def running():
        pods = sim_twin.request("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name%3D{name}")
        items = pods.json()["items"]
        return items if items and all((p.get("status") or {}).get("phase") == "Running" for p in items) else None

    return kit.wait_for(running, timeout=60)


def _pods(sim_twin, namespace):
    return sim_twin.request("GET", f"/api/v1/namespaces/{namespace}/pods").json()["items"]


def _sim_namespace(sim_twin, kit):
    name = kit.unique("gc")
    assert sim_twin.request("POST", "/api/v1/namespaces", body={"metadata": {"name": name}}).status == 201
    return name


def test_kubectl_cascade_foreground_returns_once_the_job_pods_are_gone(sim_twin, kit):
    namespace = _sim_namespace(sim_twin, kit)
    pods = _running_job(sim_twin, kit, namespace, "eval")
    assert pods[0]["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] is True
    sim_twin.kubectl("delete", "job", "eval", "-n", namespace, "--cascade=foreground", timeout=120)
    # kubectl waited for the Job to be gone; the Job went only after its pods had gone.
    assert _pods(sim_twin, namespace) == []


def test_kubectl_cascade_orphan_leaves_the_pods_without_their_owner(sim_twin, kit):
    namespace = _sim_namespace(sim_twin, kit)
    _running_job(sim_twin, kit, namespace, "eval")
    sim_twin.kubectl("delete", "job", "eval", "-n", namespace, "--cascade=orphan", timeout=120)
    left = _pods(sim_twin, namespace)
    assert len(left) == 1 and not left[0]["metadata"].get("deletionTimestamp")
    assert "ownerReferences" not in left[0]["metadata"]


PLAYBOOK = """\
- name: Delete Jobs as kubernetes.core users do
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Delete the Job in the foreground and wait until it is gone
      kubernetes.core.k8s:
        state: absent
        api_version: batch/v1
        kind: Job
        name: fg
        namespace: "{{ ns }}"
        wait: true
        wait_timeout: 120
        delete_options:
          propagationPolicy: Foreground
      register: fg

    - name: Record the pods left when the foreground deletion returned
      kubernetes.core.k8s_info:
        kind: Pod
        namespace: "{{ ns }}"
        label_selectors:
          - job-name=fg
      register: fg_pods

    - name: Delete the other Job orphaning its pods
      kubernetes.core.k8s:
        state: absent
        api_version: batch/v1
        kind: Job
        name: orphan
        namespace: "{{ ns }}"
        wait: true
        wait_timeout: 120
        delete_options:
          propagationPolicy: Orphan

    - name: Read the orphaned pods
      kubernetes.core.k8s_info:
        kind: Pod
        namespace: "{{ ns }}"
        label_selectors:
          - job-name=orphan
      register: orphan_pods

    - name: Report
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: >-
          {{ {'fg_changed': fg.changed, 'fg_pods': fg_pods.resources,
              'orphan_pods': orphan_pods.resources} | to_json }}
        mode: "0600"
"""


def test_kubernetes_core_delete_with_wait_and_foreground_waits_for_the_pods(sim_twin, kit, tmp_path):
    namespace = _sim_namespace(sim_twin, kit)
    _running_job(sim_twin, kit, namespace, "fg")
    _running_job(sim_twin, kit, namespace, "orphan")
    playbook = tmp_path / "delete.yml"
    playbook.write_text(PLAYBOOK)
    out = tmp_path / "out.json"
    env = dict(sim_twin.env)
    env.update(
        K8S_AUTH_KUBECONFIG=str(sim_twin.kubeconfig),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_NOCOLOR="1",
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    run = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            str(playbook),
            "-e",
            json.dumps({"ns": namespace, "out": str(out)}),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["fg_changed"] is True
    assert report["fg_pods"] == [], textwrap.shorten(json.dumps(report["fg_pods"]), 400)
    assert len(report["orphan_pods"]) == 1
    assert "ownerReferences" not in report["orphan_pods"][0]["metadata"]


DEPLOYMENT_MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {namespace}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      terminationGracePeriodSeconds: 30
      containers:
        - name: main
          image: registry.local/web:1.0
"""


def test_foreground_deletion_of_a_deployment_goes_down_the_chain_before_the_deployment_goes(sim_twin, kit):
    namespace = _sim_namespace(sim_twin, kit)
    sim_twin.kubectl("apply", "-f", "-", stdin=DEPLOYMENT_MANIFEST.format(namespace=namespace))

    def running():
        items = _pods(sim_twin, namespace)
        return len(items) == 2 and all((p.get("status") or {}).get("phase") == "Running" for p in items)

    kit.wait_for(running, timeout=60)
    sim_twin.kubectl("delete", "deployment", "web", "-n", namespace, "--cascade=foreground", timeout=120)
    # The ReplicaSet was deleted in the foreground too (it has dependents and its owner waited for it).
    replicasets = sim_twin.request("GET", f"/apis/apps/v1/namespaces/{namespace}/replicasets").json()["items"]
    assert replicasets == [] and _pods(sim_twin, namespace) == []
