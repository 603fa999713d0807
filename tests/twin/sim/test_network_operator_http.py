"""The twin's Network Operator over HTTP: the upstream NicClusterPolicy CRD prunes unknown fields, the
``mofed_build_fails`` fault posted to ``/admin/faults`` breaks the next MOFED pod on a node, and the
per-node reload time knob (``twin.gpufleet.io/mofed-reload-seconds``).

Served twins load the real CRDs from ``../shared/reference/crds`` (skipped where that folder is absent).
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from simharness import kubectl_run
from test_network_operator import PlatformCluster, make_platform_cluster

from gpufleet_twin.operators import network_operator as netop
from gpufleet_twin.operators import upgrade_model as um
from gpufleet_twin.process import SHARED_CRDS, TwinProcess, start_twin

Obj = dict[str, Any]
NEW_MOFED = "25.01-0.6.0.0"

needs_upstream_crds = pytest.mark.skipif(
    not (SHARED_CRDS / "mellanox.com_nicclusterpolicies.yaml").is_file(), reason="../shared/reference/crds is absent"
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwinProcess]:
    twin = start_twin(nodes=3, profile="openshift", time_scale=1500, workdir=tmp_path_factory.mktemp("netop-http"))
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def kubectl(twin: TwinProcess, *args: str, stdin: str | None = None) -> str:
    return kubectl_run(twin, *args, stdin=stdin).stdout


def get(twin: TwinProcess, *args: str) -> Obj:
    return json.loads(kubectl(twin, "get", *args, "-o", "json"))


def wait_for(check: Callable[[], bool], *, what: str, timeout: float = 40.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def mofed_pods(twin: TwinProcess) -> dict[str, Obj]:
    pods = get(twin, "pods", "-n", netop.NAMESPACE, "-l", netop.OFED_LABEL)["items"]
    # A pod the DaemonSet controller just made may not be bound yet: it is on no node so far.
    return {
        p["spec"]["nodeName"]: p
        for p in pods
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


def ready(pod: Obj | None) -> bool:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


@needs_upstream_crds
def test_upstream_crd_prunes_unknown_fields_with_kubectl(served: TwinProcess) -> None:
    patch = {"spec": {"ofedDriver": {"maxUnavailable": 2, "upgradePolicy": {"maxParallelUpgrades": 2, "bogus": 1}}}}
    kubectl(served, "patch", "nicclusterpolicies.mellanox.com", netop.NIC_POLICY_NAME, "--type", "merge", "-p",
            json.dumps(patch))  # fmt: skip
    ofed = get(served, "nicclusterpolicies.mellanox.com", netop.NIC_POLICY_NAME)["spec"]["ofedDriver"]
    # Known fields land; unknown ones are dropped silently, as a real API server does with a structural schema.
    assert ofed["upgradePolicy"]["maxParallelUpgrades"] == 2
    assert "maxUnavailable" not in ofed and "bogus" not in ofed["upgradePolicy"]
    kubectl(served, "patch", "nicclusterpolicies.mellanox.com", netop.NIC_POLICY_NAME, "--type", "merge", "-p",
            json.dumps({"spec": {"ofedDriver": {"upgradePolicy": {"maxParallelUpgrades": 1}}}}))  # fmt: skip


@needs_upstream_crds
def test_upstream_crd_prunes_unknown_fields_with_the_python_client(served: TwinProcess) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    client = kubernetes.config.new_client_from_config(config_file=str(served.kubeconfig))
    custom = kubernetes.client.CustomObjectsApi(client)
    patched = custom.patch_cluster_custom_object(
        "mellanox.com",
        "v1alpha1",
        "nicclusterpolicies",
        netop.NIC_POLICY_NAME,
        {"spec": {"ofedDriver": {"notAField": "x"}, "alsoUnknown": {"a": 1}}},
    )
    assert "notAField" not in patched["spec"]["ofedDriver"]
    assert "alsoUnknown" not in patched["spec"]
    assert patched["spec"]["ofedDriver"]["version"]


def test_mofed_build_fails_fault_breaks_the_next_mofed_pod_on_a_node(served: TwinProcess) -> None:
    wait_for(lambda: len(mofed_pods(served)) == 3 and all(map(ready, mofed_pods(served).values())), what="MOFED")
    node_name = sorted(mofed_pods(served))[0]
    kernel = get(served, "node", node_name)["status"]["nodeInfo"]["kernelVersion"]
    created = served.admin("POST", "faults", {"type": "mofed_build_fails", "kernel": kernel})
    assert created
    victim = mofed_pods(served)[node_name]
    kubectl(served, "delete", "pod", "-n", netop.NAMESPACE, victim["metadata"]["name"], "--wait=false")

    def crash_looping() -> bool:
        pod = mofed_pods(served).get(node_name)
        if pod is None or pod["metadata"]["uid"] == victim["metadata"]["uid"]:
            return False
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return any(s.get("restartCount", 0) >= 1 and not s.get("ready") for s in statuses)

    wait_for(crash_looping, what="the new MOFED pod to crash-loop")
    status = mofed_pods(served)[node_name]["status"]["containerStatuses"][0]
    waiting = (status.get("state") or {}).get("waiting") or {}
    last = ((status.get("lastState") or {}).get("terminated") or {}).get("message", "")
    assert waiting.get("reason") == "CrashLoopBackOff" or "no driver package" in last
    # The other nodes keep their loaded driver: the fault hits the next build, not running pods.
    others = {name: pod for name, pod in mofed_pods(served).items() if name != node_name}
    assert all(ready(pod) for pod in others.values())
    served.admin("DELETE", "faults")


def test_reload_time_can_differ_per_node() -> None:
    cluster = make_platform_cluster(nodes=2)
    quick, slow = cluster.workers()
    for name, seconds in ((quick, "30"), (slow, "3000")):
        cluster.store.mutate(
            cluster.kinds.node,
            None,
            name,
            lambda node, seconds=seconds: (
                node["metadata"].setdefault("annotations", {}).update({netop.RELOAD_SECONDS_ANNOTATION: seconds})
            ),
        )

    async def scenario(c: PlatformCluster) -> None:
        await c.wait_until(lambda: all(map(ready, c.mofed_pods().values())) and len(c.mofed_pods()) == 2,
                           sim_seconds=900, what="MOFED ready")  # fmt: skip
        for name in (quick, slow):
            c.store.delete(c.kinds.pod, netop.NAMESPACE, c.mofed_pods()[name]["metadata"]["name"])
        await c.wait_until(lambda: not c.sim.nodes[quick].secondary_network_up, sim_seconds=300, what="unload")
        await c.wait_until(lambda: c.sim.nodes[quick].secondary_network_up, sim_seconds=300, what="quick reload")
        # The slow node is still reloading when the quick one is back (3000 s against 30 s).
        assert not c.sim.nodes[slow].secondary_network_up

    cluster.run(scenario)
    operator = next(c for c in cluster.twin.controllers if isinstance(c, netop.NetworkOperator))
    assert operator.reload_seconds(quick) == 30.0 and operator.reload_seconds(slow) == 3000.0


def test_reload_time_annotation_that_is_not_a_number_falls_back_to_the_profile(tmp_path: pathlib.Path) -> None:
    cluster = make_platform_cluster(nodes=1)
    name = cluster.workers()[0]
    cluster.store.mutate(
        cluster.kinds.node,
        None,
        name,
        lambda node: node["metadata"].setdefault("annotations", {}).update({netop.RELOAD_SECONDS_ANNOTATION: "soon"}),
    )
    operator = next(c for c in cluster.twin.controllers if isinstance(c, netop.NetworkOperator))
    assert operator.reload_seconds(name) == netop.NetworkOperatorTimings().mofed_reload


@needs_upstream_crds
def test_auto_upgrade_across_several_nodes_with_kubectl(tmp_path: pathlib.Path) -> None:
    """kubectl turns on the operator's own rollout; a kubectl watch on the nodes sees every state it passes."""
    # No seeded training jobs: their PodDisruptionBudgets would fail the operator's drain (upgrade-failed),
    # which is the operator's behaviour but not what this test looks at.
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(json.dumps({"nodes": 4, "profile": "openshift", "workloads": False}))
    twin = start_twin(nodes=4, profile="openshift", time_scale=1500, workdir=tmp_path, scenario=scenario)
    watch_nodes = ["get", "nodes", "--watch", "--output-watch-events", "-o", "json"]
    watched = tmp_path / "node-events.json"
    with open(watched, "w", encoding="utf-8") as sink:
        # A file, not a pipe: a full pipe would stall kubectl and lose events.
        watch = subprocess.Popen(["kubectl", "--kubeconfig", str(twin.kubeconfig), *watch_nodes], stdout=sink)
    try:
        wait_for(lambda: len(mofed_pods(twin)) == 4 and all(map(ready, mofed_pods(twin).values())), what="MOFED")
        before = {node: pod["metadata"]["uid"] for node, pod in mofed_pods(twin).items()}
        patch = {
            "spec": {
                "ofedDriver": {"version": NEW_MOFED, "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 2}}
            }
        }
        kubectl(twin, "patch", "nicclusterpolicy", netop.NIC_POLICY_NAME, "--type", "merge", "-p", json.dumps(patch))

        def upgraded() -> bool:
            pods = mofed_pods(twin)
            nodes = get(twin, "nodes", "-l", "node-role.kubernetes.io/worker")["items"]
            return len(pods) == 4 and all(
                (n["metadata"].get("labels") or {}).get(netop.STATE_LABEL) == um.STATE_DONE
                and not n["spec"].get("unschedulable")
                and ready(pods.get(n["metadata"]["name"]))
                and netop.mofed_version_of_pod(pods[n["metadata"]["name"]]) == NEW_MOFED
                for n in nodes
            )

        wait_for(upgraded, what="every node upgraded by the operator", timeout=90)
        assert all(pod["metadata"]["uid"] != before[node] for node, pod in mofed_pods(twin).items())
    finally:
        watch.terminate()
        watch.wait(timeout=30)
        assert twin.stop() == 0, twin.log_path.read_text()[-2000:]
    stream = watched.read_text()
    states: dict[str, str] = {}
    cordoned: set[str] = set()
    in_progress: list[int] = []
    decoder, position = json.JSONDecoder(), 0
    while position < len(stream.rstrip()):
        event, position = decoder.raw_decode(stream, position)
        position += len(stream[position:]) - len(stream[position:].lstrip())
        node = event["object"]
        name = node["metadata"]["name"]
        if not name.startswith("gpu-worker-"):
            continue
        states[name] = (node["metadata"].get("labels") or {}).get(netop.STATE_LABEL, "")
        if node["spec"].get("unschedulable"):
            cordoned.add(name)
        in_progress.append(sum(1 for state in states.values() if state not in um.NOT_IN_PROGRESS_STATES))
    # maxParallelUpgrades bounds the nodes in flight (upstream has no maxUnavailable for OFED), and two ran at once.
    assert max(in_progress) == 2
    assert len(states) == 4 and set(states.values()) == {um.STATE_DONE}
    assert cordoned == set(states)  # each node was cordoned for its reload, and uncordoned after (checked above)
