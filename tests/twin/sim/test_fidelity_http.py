"""ServiceAccounts, tokens, NoExecute taint eviction and StatefulSets, driven as users drive them.

One simulated twin process (``python -m gpufleet_twin serve``), kubectl with
its kubeconfig, and kubernetes.core modules in a real ansible-playbook run.
Simulated time is judged by the twin's clock (``/admin/clock``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess, start_twin

VENV_BIN = Path(sys.executable).parent
ANSIBLE_PLAYBOOK = VENV_BIN / "ansible-playbook"
# Wall-clock bounds for polling only; what is asserted is read from the twin.
POLL_SECONDS = 90.0

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwinProcess]:
    served = start_twin(
        nodes=2, profile="kubernetes", time_scale=5.0, workdir=tmp_path_factory.mktemp("twin"), real_crds=False
    )
    yield served
    assert served.stop() == 0, served.log_path.read_text()[-3000:]


def kubectl(twin: TwinProcess, *args: str, check: bool = True, token: str | None = None) -> subprocess.CompletedProcess:
    command = ["kubectl", "--kubeconfig", str(twin.kubeconfig)]
    if token is not None:
        command.append(f"--token={token}")
    env = dict(os.environ, KUBECACHEDIR=str(twin.kubeconfig.parent / "kube-cache"))
    result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=60, env=env, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr}")
    return result


def create_from_stdin(twin: TwinProcess, manifest: str, *, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(twin.kubeconfig), "create", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, KUBECACHEDIR=str(twin.kubeconfig.parent / "kube-cache")),
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl create failed: {result.stderr}")
    return result


def get(twin: TwinProcess, *args: str) -> Any:
    result = kubectl(twin, "get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def poll(what: str, probe: Callable[[], Any], *, seconds: float = POLL_SECONDS) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def clock(twin: TwinProcess) -> float:
    return float(twin.admin("GET", "clock")["epoch_seconds"])


def playbook(twin: TwinProcess, tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    path = tmp_path / "play.yml"
    path.write_text(text)
    (tmp_path / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
    env = {
        **twin.env(),
        "ANSIBLE_CONFIG": str(tmp_path / "ansible.cfg"),
        "ANSIBLE_HOME": str(tmp_path / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_PYTHON_INTERPRETER": sys.executable,
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    return subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def pod_json(name: str, namespace: str, **spec: Any) -> str:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}], **spec},
    }
    return json.dumps(body)


# -- ServiceAccounts ------------------------------------------------------------------------------------------
def test_new_namespace_gets_default_service_account_and_root_ca(twin: TwinProcess) -> None:
    kubectl(twin, "create", "namespace", "sa-new")
    account = poll("the default ServiceAccount", lambda: get(twin, "serviceaccount", "default", "-n", "sa-new"))
    assert account["metadata"]["name"] == "default"
    configmap = poll("kube-root-ca.crt", lambda: get(twin, "configmap", "kube-root-ca.crt", "-n", "sa-new"))
    assert configmap["data"]["ca.crt"] == Path(twin.companion["ca_file"]).read_text()


def test_kubectl_create_token_authenticates_as_the_service_account(twin: TwinProcess) -> None:
    kubectl(twin, "create", "namespace", "sa-token")
    poll("the default ServiceAccount", lambda: get(twin, "serviceaccount", "default", "-n", "sa-token"))
    before = clock(twin)
    token = kubectl(twin, "create", "token", "default", "-n", "sa-token").stdout.strip()
    whoami = json.loads(kubectl(twin, "auth", "whoami", "-o", "json", token=token).stdout)
    assert whoami["status"]["userInfo"]["username"] == "system:serviceaccount:sa-token:default"
    assert "system:serviceaccounts:sa-token" in whoami["status"]["userInfo"]["groups"]
    # What the account may do is RBAC's: nothing in the namespace until a binding grants it.
    unbound = kubectl(twin, "get", "pods", "-n", "sa-token", token=token, check=False)
    assert unbound.returncode != 0 and "Forbidden" in unbound.stderr
    kubectl(
        twin,
        "create",
        "rolebinding",
        "view",
        "--clusterrole=view",
        "--group=system:serviceaccounts:sa-token",
        "-n",
        "sa-token",
    )
    assert kubectl(twin, "get", "pods", "-n", "sa-token", token=token).returncode == 0
    refused = kubectl(twin, "get", "pods", "-n", "sa-token", token=token[:-4] + "AAAA", check=False)
    assert refused.returncode != 0 and "Unauthorized" in refused.stderr
    # expirationSeconds: the default is an hour, less than ten minutes is invalid (as the real server says).
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    answer = twin_request(twin, "/api/v1/namespaces/sa-token/serviceaccounts/default/token", request)
    expires = answer["status"]["expirationTimestamp"]
    assert 3600 <= _epoch(expires) - before <= 3600 + 120
    short = twin_request(
        twin,
        "/api/v1/namespaces/sa-token/serviceaccounts/default/token",
        {**request, "spec": {"expirationSeconds": 599}},
        expect=422,
    )
    assert (
        "spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
        in short["message"]
    )
    # A deleted ServiceAccount's tokens stop working.
    kubectl(twin, "create", "serviceaccount", "robot", "-n", "sa-token")
    robot = kubectl(twin, "create", "token", "robot", "-n", "sa-token").stdout.strip()
    assert kubectl(twin, "get", "pods", "-n", "sa-token", token=robot).returncode == 0
    kubectl(twin, "delete", "serviceaccount", "robot", "-n", "sa-token")
    gone = kubectl(twin, "get", "pods", "-n", "sa-token", token=robot, check=False)
    assert gone.returncode != 0 and "Unauthorized" in gone.stderr


def twin_request(twin: TwinProcess, path: str, body: Any, *, expect: int = 201) -> Any:
    import ssl
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        twin.api_url + path,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {twin.token}", "Content-Type": "application/json"},
    )
    context = ssl.create_default_context(cafile=twin.companion["ca_file"])
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            assert response.status == expect
            return json.loads(response.read())
    except urllib.error.HTTPError as problem:
        assert problem.code == expect, problem.read()
        return json.loads(problem.read())


def _epoch(stamp: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_pod_naming_a_missing_service_account_is_refused(twin: TwinProcess, tmp_path: Path) -> None:
    kubectl(twin, "create", "namespace", "sa-missing")
    refused = create_from_stdin(twin, pod_json("x", "sa-missing", serviceAccountName="nope"), check=False)
    assert refused.returncode != 0
    assert (
        'Error from server (Forbidden): error when creating "STDIN": pods "x" is forbidden: '
        'error looking up service account sa-missing/nope: serviceaccount "nope" not found'
    ) in refused.stderr
    result = playbook(
        twin,
        tmp_path,
        """
- name: A pod whose ServiceAccount does not exist
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Create the pod
      kubernetes.core.k8s:
        state: present
        definition:
          apiVersion: v1
          kind: Pod
          metadata: {name: y, namespace: sa-missing}
          spec:
            serviceAccountName: nope
            containers: [{name: main, image: "registry.example/app:1"}]
      register: created
      ignore_errors: true  # the refusal is what this play checks

    - name: Check the refusal is the API server's
      ansible.builtin.assert:
        that:
          - created is failed
          - created.reason == 'Forbidden'
          - refusal.code == 403
          - >-
            refusal.message == 'pods "y" is forbidden: error looking up service account sa-missing/nope:
            serviceaccount "nope" not found'
      vars:
        # kubernetes.core puts the API server's Status after "Failed to create object: ".
        refusal: "{{ created.msg | regex_replace('^Failed to create object: ', '') | from_json }}"
""",
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert get(twin, "pod", "y", "-n", "sa-missing") is None


# -- NoExecute taints ---------------------------------------------------------------------------------------
def test_kubectl_taint_no_execute_evicts_now_or_after_toleration_seconds(twin: TwinProcess) -> None:
    node = twin.companion["published"]["gpu_worker_nodes"][0]
    kubectl(twin, "create", "namespace", "taints")
    poll("the default ServiceAccount", lambda: get(twin, "serviceaccount", "default", "-n", "taints"))
    toleration = {"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute", "tolerationSeconds": 600}
    for name, spec in (("intolerant", {}), ("patient", {"tolerations": [toleration]})):
        create_from_stdin(twin, pod_json(name, "taints", nodeName=node, **spec))
    twin.advance(10)
    poll(
        "both pods running",
        lambda: all(
            (get(twin, "pod", n, "-n", "taints") or {}).get("status", {}).get("phase") == "Running"
            for n in ("intolerant", "patient")
        ),
    )
    tainted_at = clock(twin)
    kubectl(twin, "taint", "nodes", node, "k=v:NoExecute")
    try:
        poll("the intolerant pod to go", lambda: get(twin, "pod", "intolerant", "-n", "taints") is None)
        assert clock(twin) - tainted_at < 600
        patient = get(twin, "pod", "patient", "-n", "taints")
        assert patient is not None and "deletionTimestamp" not in patient["metadata"]
        events = get(twin, "events", "-n", "taints", "--field-selector", "reason=TaintManagerEviction")
        assert [e["message"] for e in events["items"]] == ["Marking for deletion Pod taints/intolerant"]
        twin.advance(600 - (clock(twin) - tainted_at) + 1)
        poll("the patient pod to go", lambda: get(twin, "pod", "patient", "-n", "taints") is None)
        assert clock(twin) - tainted_at >= 600
    finally:
        kubectl(twin, "taint", "nodes", node, "k=v:NoExecute-")


# -- StatefulSets ---------------------------------------------------------------------------------------------
STATEFULSET_PLAY = """
- name: A StatefulSet through kubernetes.core
  hosts: localhost
  gather_facts: false
  vars:
    sts: &sts
      apiVersion: apps/v1
      kind: StatefulSet
      metadata: {name: db, namespace: sts}
      spec:
        replicas: 3
        serviceName: db
        selector: {matchLabels: {app: db}}
        template:
          metadata: {labels: {app: db}}
          spec:
            containers: [{name: db, image: "registry.example/db:1"}]
        volumeClaimTemplates:
          - metadata: {name: data}
            spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
  tasks:
    - name: Create the namespace
      kubernetes.core.k8s:
        state: present
        definition: {apiVersion: v1, kind: Namespace, metadata: {name: sts}}

    - name: Create the StatefulSet and wait for it
      kubernetes.core.k8s:
        state: present
        definition: "{{ sts }}"
        wait: true
        wait_timeout: 240
"""


def test_statefulset_scales_in_order_and_rolls_with_a_partition(twin: TwinProcess, tmp_path: Path) -> None:
    advancing = _ClockPump(twin)
    try:
        result = playbook(twin, tmp_path, STATEFULSET_PLAY)
        assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
        pods = {p["metadata"]["name"]: p for p in get(twin, "pods", "-n", "sts", "-l", "app=db")["items"]}
        assert sorted(pods) == ["db-0", "db-1", "db-2"]
        created = [int(pods[f"db-{i}"]["metadata"]["resourceVersion"]) for i in range(3)]
        started = [_epoch(pods[f"db-{i}"]["status"]["startTime"]) for i in range(3)]
        assert created == sorted(created) and started == sorted(started)
        # OrderedReady: each pod was made only after the one before it was Ready.
        for lower, higher in ((0, 1), (1, 2)):
            ready = next(c for c in pods[f"db-{lower}"]["status"]["conditions"] if c["type"] == "Ready")
            assert _epoch(ready["lastTransitionTime"]) <= _epoch(pods[f"db-{higher}"]["metadata"]["creationTimestamp"])
        table = kubectl(twin, "get", "statefulset", "db", "-n", "sts").stdout.split()
        assert table[:6] == ["NAME", "READY", "AGE", "db", "3/3", table[5]]

        kubectl(twin, "scale", "statefulset", "db", "-n", "sts", "--replicas=1")
        poll(
            "scale down to 1",
            lambda: [p["metadata"]["name"] for p in get(twin, "pods", "-n", "sts")["items"]] == ["db-0"],
        )
        deletions = [
            e
            for e in get(twin, "events", "-n", "sts", "--field-selector", "reason=SuccessfulDelete")["items"]
            if e["involvedObject"]["kind"] == "StatefulSet"
        ]
        deletions.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
        assert [e["message"] for e in deletions] == [
            "delete Pod db-2 in StatefulSet db successful",
            "delete Pod db-1 in StatefulSet db successful",
        ]
        kubectl(twin, "scale", "statefulset", "db", "-n", "sts", "--replicas=3")
        poll("three ready", lambda: (get(twin, "statefulset", "db", "-n", "sts")["status"].get("readyReplicas")) == 3)
        old_revision = get(twin, "statefulset", "db", "-n", "sts")["status"]["currentRevision"]
        patch = {
            "spec": {
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
                "template": {"spec": {"containers": [{"name": "db", "image": "registry.example/db:2"}]}},
            }
        }
        kubectl(twin, "patch", "statefulset", "db", "-n", "sts", "-p", json.dumps(patch))

        def rolled() -> Any:
            status = get(twin, "statefulset", "db", "-n", "sts")["status"]
            return status if status.get("updatedReplicas") == 2 and status.get("readyReplicas") == 3 else None

        status = poll("the partitioned roll", rolled)
        assert status["currentRevision"] == old_revision != status["updateRevision"]
        pods = {p["metadata"]["name"]: p for p in get(twin, "pods", "-n", "sts")["items"]}
        images = {name: pod["spec"]["containers"][0]["image"] for name, pod in pods.items()}
        assert images == {
            "db-0": "registry.example/db:1",
            "db-1": "registry.example/db:2",
            "db-2": "registry.example/db:2",
        }
        assert int(pods["db-2"]["metadata"]["resourceVersion"]) < int(pods["db-1"]["metadata"]["resourceVersion"])
        assert pods["db-1"]["metadata"]["labels"]["controller-revision-hash"] == status["updateRevision"]
    finally:
        advancing.stop()


class _ClockPump:
    """Moves the twin's clock on while a play waits, so minutes of pod start-up pass in seconds."""

    def __init__(self, twin: TwinProcess) -> None:
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(twin,), daemon=True)
        self._thread.start()

    def _run(self, twin: TwinProcess) -> None:
        while not self._stop.wait(0.5):
            twin.advance(5)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
