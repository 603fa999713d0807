"""Eviction under PodDisruptionBudgets, and kubectl drain end to end."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException


def _pdb(twin, namespace: str, name: str, spec: dict) -> dict:
    result = twin.request(
        "POST",
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
        body={"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec},
    )
    assert result.status == 201, result.body
    return result.json()


def _evict(core, namespace: str, name: str) -> None:
    core.create_namespaced_pod_eviction(
        name,
        namespace,
        client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace)),
    )


def test_eviction_is_refused_with_429_while_the_budget_allows_no_disruption(twin, core, kit, namespace):
    node = kit.node(kit.unique("node"))["metadata"]["name"]
    for index in range(2):
        kit.running_pod(namespace, f"worker-{index}", node=node, labels={"app": "train"})
    _pdb(twin, namespace, "train", {"minAvailable": 2, "selector": {"matchLabels": {"app": "train"}}})
    with pytest.raises(ApiException) as refused:
        _evict(core, namespace, "worker-0")
    assert refused.value.status == 429
    status = json.loads(refused.value.body)
    assert status["reason"] == "TooManyRequests"
    assert status["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert (
        status["details"]["causes"][0]["message"]
        == "The disruption budget train needs 2 healthy pods and has 2 currently"
    )
    # No Retry-After: client-go would otherwise retry silently instead of reporting the refusal.
    assert "Retry-After" not in refused.value.headers
    assert core.read_namespaced_pod("worker-0", namespace).metadata.deletion_timestamp is None
    # Once the budget allows one disruption, exactly one eviction goes through.
    twin.request(
        "PATCH",
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/train",
        body={"spec": {"minAvailable": 1}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    _evict(core, namespace, "worker-0")
    assert core.read_namespaced_pod("worker-0", namespace).metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as second:
        _evict(core, namespace, "worker-1")
    assert second.value.status == 429
    pdb = client.PolicyV1Api(core.api_client).read_namespaced_pod_disruption_budget("train", namespace)
    assert (pdb.status.current_healthy, pdb.status.desired_healthy, pdb.status.disruptions_allowed) == (1, 1, 0)


def test_eviction_with_max_unavailable_percent_and_pending_pods(twin, core, kit, namespace):
    node = kit.node(kit.unique("node"))["metadata"]["name"]
    for index in range(4):
        kit.running_pod(namespace, f"p{index}", node=node, labels={"app": "pct"})
    _pdb(twin, namespace, "pct", {"maxUnavailable": "25%", "selector": {"matchLabels": {"app": "pct"}}})
    _evict(core, namespace, "p0")  # 25% of 4 = 1
    with pytest.raises(ApiException) as refused:
        _evict(core, namespace, "p1")
    assert refused.value.status == 429
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "pending", "labels": {"app": "pct"}},
            "spec": {"containers": [{"name": "c", "image": "i:1"}]},
        },
    )
    _evict(core, namespace, "pending")  # pending pods are evicted whatever the budget


def test_more_than_one_matching_budget_is_500(twin, core, kit, namespace):
    node = kit.node(kit.unique("node"))["metadata"]["name"]
    kit.running_pod(namespace, "shared", node=node, labels={"app": "x", "tier": "y"})
    _pdb(twin, namespace, "one", {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "x"}}})
    _pdb(twin, namespace, "two", {"maxUnavailable": 1, "selector": {"matchLabels": {"tier": "y"}}})
    with pytest.raises(ApiException) as failed:
        _evict(core, namespace, "shared")
    assert failed.value.status == 500
    assert "more than one PodDisruptionBudget" in json.loads(failed.value.body)["message"]


def test_drain_waits_for_the_budget_then_finishes(twin, kit, namespace):
    node = kit.node(kit.unique("gpu-worker"))["metadata"]["name"]
    other = kit.node(kit.unique("gpu-worker"))["metadata"]["name"]
    kit.running_pod(namespace, "job-a", node=node, labels={"app": "train"})
    kit.running_pod(namespace, "job-b", node=other, labels={"app": "train"})
    _pdb(twin, namespace, "train", {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "train"}}})
    with kit.play_kubelet(node) as kubelet:
        drain = subprocess.Popen(
            ["kubectl", "--kubeconfig", str(twin.kubeconfig), "drain", node, "--force", "--timeout=40s"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=twin.env,
        )
        try:
            # kubectl cordons first, then keeps retrying the eviction the budget refuses.
            kit.wait_for(lambda: twin.request("GET", f"/api/v1/nodes/{node}").json()["spec"].get("unschedulable"))
            time.sleep(1.5)
            assert drain.poll() is None
            assert (
                twin.request("GET", f"/api/v1/namespaces/{namespace}/pods/job-a")
                .json()["metadata"]
                .get("deletionTimestamp")
                is None
            )
            twin.request(
                "PATCH",
                f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/train",
                body={"spec": {"maxUnavailable": 1}},
                headers={"Content-Type": "application/merge-patch+json"},
            )
            out, err = drain.communicate(timeout=40)
        finally:
            drain.kill()
    assert drain.returncode == 0, err
    assert "Cannot evict pod as it would violate the pod's disruption budget" in err
    assert f"node/{node} drained" in out
    assert kubelet.finalized == ["job-a"]
    assert twin.request("GET", f"/api/v1/namespaces/{namespace}/pods/job-a").status == 404
    assert twin.request("GET", f"/api/v1/namespaces/{namespace}/pods/job-b").status == 200


def test_a_status_kept_by_the_disruption_controller_is_honoured(twin, core, kit, namespace):
    node = kit.node(kit.unique("node"))["metadata"]["name"]
    for index in range(3):
        kit.running_pod(namespace, f"r{index}", node=node, labels={"app": "kept"})
    created = _pdb(twin, namespace, "kept", {"maxUnavailable": 2, "selector": {"matchLabels": {"app": "kept"}}})
    # A controller that counts 4 expected pods (say the Deployment wants 4) allows one disruption only.
    controller_status = {
        "observedGeneration": created["metadata"]["generation"],
        "expectedPods": 4,
        "desiredHealthy": 2,
        "currentHealthy": 3,
        "disruptionsAllowed": 1,
        "conditions": [{"type": "DisruptionAllowed", "status": "True", "reason": "SufficientPods", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }  # fmt: skip
    written = twin.request(
        "PUT",
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/kept/status",
        body={**created, "status": controller_status},
    )
    assert written.status == 200, written.body
    _evict(core, namespace, "r0")
    status = client.PolicyV1Api(core.api_client).read_namespaced_pod_disruption_budget("kept", namespace).status
    assert status.disruptions_allowed == 0
    assert "r0" in status.disrupted_pods
    assert status.conditions[0].status == "False"
    with pytest.raises(ApiException) as refused:
        _evict(core, namespace, "r1")
    assert refused.value.status == 429
