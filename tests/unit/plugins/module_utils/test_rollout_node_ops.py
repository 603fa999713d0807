"""Which pods must leave a node, label selectors, PDB matching (pure parts of _k8s_nodes)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import (
    PodSelection,
    describe_pdb,
    dra_gpus_by_pod,
    free_gpus,
    label_selector_matches,
    parse_label_selector,
    pdbs_covering_pod,
    pod_claim_names,
    pod_gpus,
    pod_requests_gpu,
    pod_uses_secondary_network,
    pods_to_evict,
    read_dra_gpus,
    selector_object_matches,
    unfinished_pods,
)

NODE = "gpu-worker-007"


def pod(
    name: str,
    *,
    namespace: str = "ml",
    owner_kind: str | None = "ReplicaSet",
    limits: dict | None = None,
    requests: dict | None = None,
    init_limits: dict | None = None,
    annotations: dict | None = None,
    labels: dict | None = None,
    phase: str = "Running",
    volumes: list | None = None,
    terminating: bool = False,
) -> dict:
    """A pod shaped like `kubectl get pod -o json` returns it (fields the filters read, plus noise)."""
    container = {
        "name": "main",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "resources": {"limits": limits or {"cpu": "2"}, "requests": requests or {"cpu": "2"}},
        "terminationMessagePolicy": "File",
    }
    spec = {
        "nodeName": NODE,
        "containers": [container],
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "volumes": volumes
        or [{"name": "kube-api-access-x1", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
    }
    if init_limits:
        spec["initContainers"] = [{"name": "init", "image": "busybox", "resources": {"limits": init_limits}}]
    metadata = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{name}",
        "labels": labels or {"app": name.rsplit("-", 1)[0]},
        "annotations": annotations or {},
    }
    if owner_kind:
        metadata["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": owner_kind, "name": f"{name}-owner", "uid": "o-1", "controller": True}
        ]
    if terminating:
        metadata["deletionTimestamp"] = "2026-11-22T06:00:00Z"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


# -- predicates ----------------------------------------------------------------------------------------


def test_gpu_pods_are_found_by_limits_requests_mig_and_init_containers():
    assert pod_requests_gpu(pod("train-1", limits={"nvidia.com/gpu": "8"}))
    assert pod_requests_gpu(pod("infer-1", requests={"nvidia.com/gpu.shared": "1"}))
    assert pod_requests_gpu(pod("mig-1", limits={"nvidia.com/mig-1g.10gb": "1"}))
    assert pod_requests_gpu(pod("prep-1", init_limits={"nvidia.com/gpu": "1"}))
    assert not pod_requests_gpu(pod("web-1", limits={"cpu": "1", "memory": "1Gi"}))
    assert not pod_requests_gpu(pod("rdma-1", limits={"rdma/rdma_shared_device_a": "1"}))


def test_secondary_network_pods_are_found_by_the_multus_annotation():
    assert pod_uses_secondary_network(pod("a", annotations={"k8s.v1.cni.cncf.io/networks": "rdma-net"}))
    assert pod_uses_secondary_network(
        pod("b", annotations={"k8s.v1.cni.cncf.io/networks": '[{"name":"ib-sriov","namespace":"ml"}]'})
    )
    assert not pod_uses_secondary_network(pod("c", annotations={"k8s.v1.cni.cncf.io/networks": "[]"}))
    # The status annotation Multus writes for every pod (default network) is not a secondary network.
    assert not pod_uses_secondary_network(pod("d", annotations={"k8s.v1.cni.cncf.io/network-status": "[]"}))


# -- pods_to_evict ----------------------------------------------------------------------------------------


def test_gpu_selection_evicts_gpu_pods_and_leaves_the_rest_like_kubectl_drain():
    pods = [
        pod("train-1", limits={"nvidia.com/gpu": "8"}),
        pod("web-1"),
        pod(
            "nvidia-driver-daemonset-abc",
            namespace="gpu-operator",
            owner_kind="DaemonSet",
            limits={"nvidia.com/gpu": "1"},
        ),
        pod(
            "kube-proxy-gpu-worker-007",
            namespace="kube-system",
            owner_kind="Node",
            annotations={"kubernetes.io/config.mirror": "abc"},
            limits={"nvidia.com/gpu": "1"},
        ),
        pod("batch-1", limits={"nvidia.com/gpu": "1"}, phase="Succeeded", owner_kind="Job"),
        pod("train-2", limits={"nvidia.com/gpu": "1"}, terminating=True),
        pod("pinned-1", limits={"nvidia.com/gpu": "1"}, labels={"nvidia.com/gpu-driver-upgrade-drain.skip": "true"}),
    ]
    plan = pods_to_evict(
        pods, selection=PodSelection(gpu=True, exempt_label="nvidia.com/gpu-driver-upgrade-drain.skip")
    )
    assert [p["metadata"]["name"] for p in plan.evict] == ["train-1"]
    assert [p["metadata"]["name"] for p in plan.terminating] == ["train-2"]
    skipped = dict(plan.skipped)
    assert skipped["gpu-operator/nvidia-driver-daemonset-abc"] == "DaemonSet pod"
    assert skipped["kube-system/kube-proxy-gpu-worker-007"] == "mirror pod"
    assert skipped["ml/batch-1"] == "finished"
    assert skipped["ml/web-1"] == "not selected"
    assert skipped["ml/pinned-1"].startswith("exempt")
    assert plan.blocked == ()


def test_unmanaged_and_emptydir_pods_block_unless_allowed():
    pods = [
        pod("bare-1", owner_kind=None, limits={"nvidia.com/gpu": "1"}),
        pod("scratch-1", volumes=[{"name": "scratch", "emptyDir": {}}], limits={"nvidia.com/gpu": "1"}),
    ]
    strict = pods_to_evict(pods, selection=PodSelection(gpu=True))
    assert strict.evict == ()
    assert [key for key, _value in strict.blocked] == ["ml/bare-1", "ml/scratch-1"]
    assert "force" in dict(strict.blocked)["ml/bare-1"]
    assert "delete_emptydir_data" in dict(strict.blocked)["ml/scratch-1"]
    lenient = pods_to_evict(pods, selection=PodSelection(gpu=True, force=True, delete_emptydir_data=True))
    assert [p["metadata"]["name"] for p in lenient.evict] == ["bare-1", "scratch-1"]


def test_secondary_network_and_label_selector_criteria_combine_as_any_of():
    pods = [
        pod("mpi-1", annotations={"k8s.v1.cni.cncf.io/networks": "ib0"}),
        pod("svc-1", labels={"tier": "rdma"}),
        pod("svc-2", labels={"tier": "web"}),
    ]
    plan = pods_to_evict(pods, selection=PodSelection(secondary_network=True, label_selector="tier in (rdma)"))
    assert sorted(p["metadata"]["name"] for p in plan.evict) == ["mpi-1", "svc-1"]
    everything = pods_to_evict(pods, selection=PodSelection(all_pods=True))
    assert len(everything.evict) == 3
    assert everything.summary()["evict"] == ["ml/mpi-1", "ml/svc-1", "ml/svc-2"]


def test_a_selection_needs_a_criterion_and_a_valid_selector():
    with pytest.raises(InvalidInputError):
        PodSelection()
    with pytest.raises(InvalidInputError):
        PodSelection(label_selector="tier in rdma")


def test_unfinished_pods_are_pending_or_running():
    pods = [pod("a", phase="Running"), pod("b", phase="Succeeded"), pod("c", phase="Pending"), pod("d", phase="Failed")]
    assert unfinished_pods(pods) == ["ml/a", "ml/c"]


# -- label selectors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("", {"a": "b"}, True),
        ("app=train", {"app": "train"}, True),
        ("app==train", {"app": "train"}, True),
        ("app=train", {"app": "web"}, False),
        ("app!=train", {"app": "web"}, True),
        ("app!=train", {}, True),  # != matches nodes without the key, like Kubernetes
        ("app in (train, infer)", {"app": "infer"}, True),
        ("app notin (train,infer)", {"app": "infer"}, False),
        ("app notin (train)", {}, True),
        ("gpu", {"gpu": ""}, True),
        ("!gpu", {"gpu": "x"}, False),
        ("!gpu", {}, True),
        ("app=train,team=a", {"app": "train", "team": "b"}, False),
        ("app=", {"app": ""}, True),
        ("app=,team=a", {"app": "x", "team": "a"}, False),
        (
            "app.kubernetes.io/name=job-runner , tier in (batch)",
            {"app.kubernetes.io/name": "job-runner", "tier": "batch"},
            True,
        ),
    ],
)
def test_label_selector_strings(selector, labels, expected):
    assert label_selector_matches(selector, labels) is expected


@pytest.mark.parametrize("selector", ["app in (a", "app in a", "app=a b=c", "app=a,", "!"])
def test_label_selector_errors(selector):
    with pytest.raises(InvalidInputError):
        parse_label_selector(selector)


def test_selector_objects_like_a_pdb_spec_selector():
    labels = {"app": "train", "tier": "gpu"}
    assert selector_object_matches({}, labels)  # empty selector: every pod of the namespace
    assert not selector_object_matches(None, labels)  # null selector: none
    assert selector_object_matches({"matchLabels": {"app": "train"}}, labels)
    assert not selector_object_matches({"matchLabels": {"app": "web"}}, labels)
    assert selector_object_matches(
        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}]}, labels
    )
    assert not selector_object_matches({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, labels)
    assert not selector_object_matches(
        {"matchExpressions": [{"key": "tier", "operator": "Gt", "values": ["1"]}]}, labels
    )


def test_pdb_guarding_a_pod_is_found_and_described():
    target = pod("train-1", labels={"app": "train"})
    pdbs = [
        {"metadata": {"name": "web-pdb", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}},
        {
            "metadata": {"name": "train-pdb", "namespace": "other"},
            "spec": {"selector": {"matchLabels": {"app": "train"}}},
        },
        {
            "metadata": {"name": "train-pdb", "namespace": "ml"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "train"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2},
        },
    ]
    guards = pdbs_covering_pod(pdbs, target)
    assert [(g["metadata"]["namespace"], g["metadata"]["name"]) for g in guards] == [("ml", "train-pdb")]
    assert describe_pdb(pdbs[0]) == "PodDisruptionBudget ml/web-pdb"
    assert describe_pdb(guards[0]) == (
        "PodDisruptionBudget ml/train-pdb "
        "(minAvailable 2, disruptionsAllowed 0, currentHealthy 2, desiredHealthy 2, expectedPods 2)"
    )


# -- Dynamic Resource Allocation ---------------------------------------------------------------------------


def claim(name: str, *drivers: str, namespace: str = "ml") -> dict:
    """A ResourceClaim as resource.k8s.io/v1 serves it once allocated (status.allocation.devices.results)."""
    results = [
        {"request": "gpu", "driver": driver, "pool": NODE, "device": f"gpu-{i}"} for i, driver in enumerate(drivers)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        "status": {"allocation": {"devices": {"results": results}}} if drivers else {},
    }


def dra_pod(name: str, *, named: str = "", from_template: str = "") -> dict:
    """A pod that names a claim, or one made for it from a template (its name then only in the pod's status)."""
    made = pod(name)
    ref = {"name": "gpus"}
    if named:
        ref["resourceClaimName"] = named
    else:
        ref["resourceClaimTemplateName"] = "two-gpus"
        made["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": from_template}]
    made["spec"]["resourceClaims"] = [ref]
    made["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
    return made


def test_pods_holding_gpus_through_dra_claims_are_gpu_pods_for_eviction_and_capacity():
    shared = dra_pod("shared-a", named="shared")
    templated = dra_pod("trainer-0", from_template="trainer-0-gpus-x7k2p")
    nic_only = dra_pod("nic-user", named="a-nic")
    claims = [
        claim("shared", "gpu.nvidia.com"),
        claim("trainer-0-gpus-x7k2p", "gpu.nvidia.com", "gpu.nvidia.com"),
        claim("a-nic", "dra.net"),
        claim("trainer-0-gpus-x7k2p", "gpu.nvidia.com", namespace="elsewhere"),
    ]
    assert pod_claim_names(templated) == ["trainer-0-gpus-x7k2p"] and pod_claim_names(pod("plain")) == []
    dra = dra_gpus_by_pod([shared, templated, nic_only, pod("plain")], claims)
    assert dra == {"ml/shared-a": 1, "ml/trainer-0": 2}
    assert pod_gpus(templated, dra) == 2 and pod_gpus(templated) == 0 and not pod_requests_gpu(templated)

    plan = pods_to_evict([shared, templated, nic_only], selection=PodSelection(gpu=True), dra=dra)
    assert [p["metadata"]["name"] for p in plan.evict] == ["shared-a", "trainer-0"]
    assert ("ml/nic-user", "not selected") in plan.skipped
    unaware = pods_to_evict([shared, templated], selection=PodSelection(gpu=True))
    assert unaware.evict == (), "without the claims read the pods look like any other"

    node = {"metadata": {"name": NODE}, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}
    assert free_gpus([node], [shared, templated, nic_only], dra) == {NODE: 5}
    assert free_gpus([node], [shared, templated, nic_only]) == {NODE: 8}


class ClaimsApi:
    """Lists ResourceClaims as an API server does (one namespace's, or every one), noting each request's namespace."""

    def __init__(self, claims: list, *, status: int = 0) -> None:
        self.claims, self.status, self.asked = claims, status, []

    def list(self, resource, namespace=None, **_):
        self.asked.append(namespace)
        if self.status:
            raise KubeApiError(f"{self.status} from the API server", status=self.status)
        return [c for c in self.claims if namespace is None or c["metadata"]["namespace"] == namespace]


def test_the_claims_are_read_from_one_namespace_or_once_cluster_wide_and_never_for_pods_without_claims():
    here = dra_pod("shared-a", named="shared")
    there = dra_pod("trainer-0", from_template="trainer-0-gpus-x7k2p")
    there["metadata"]["namespace"] = "elsewhere"
    claims = [
        claim("shared", "gpu.nvidia.com"),
        claim("trainer-0-gpus-x7k2p", *["gpu.nvidia.com"] * 2, namespace="elsewhere"),
    ]
    api = ClaimsApi(claims)
    assert read_dra_gpus(api, [here, pod("plain")]) == {"ml/shared-a": 1} and api.asked == ["ml"]
    api.asked.clear()
    assert read_dra_gpus(api, [here, there]) == {"ml/shared-a": 1, "elsewhere/trainer-0": 2}
    assert api.asked == [None], "pods of two namespaces: one cluster-wide list"
    api.asked.clear()
    assert read_dra_gpus(api, [pod("plain")]) == {} and api.asked == []
    assert read_dra_gpus(ClaimsApi(claims, status=404), [here, there]) == {}, "no resource.k8s.io/v1: none held"
    with pytest.raises(KubeApiError):
        read_dra_gpus(ClaimsApi(claims, status=403), [here])
