"""_gpu_operator_info: which ClusterPolicy counts, the operator's namespace, and the one read of how it is installed."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_operator_info import (
    OperatorQuery,
    honoured_cluster_policy,
    operator_namespace,
    read_operator,
)


def policy(name: str, created: str, namespace: str = "") -> dict:
    found = {"metadata": {"name": name, "creationTimestamp": created}}
    if namespace:
        found["status"] = {"namespace": namespace}
    return found


OLD = policy("b-policy", "2025-01-01T00:00:00Z", "nvidia-gpu-operator")
NEW = policy("a-policy", "2026-01-01T00:00:00Z", "elsewhere")
TWIN = policy("a-twin", "2025-01-01T00:00:00Z", "first-by-name")


def test_the_oldest_cluster_policy_counts_then_the_first_by_name():
    assert honoured_cluster_policy([]) is None
    assert honoured_cluster_policy([NEW, OLD]) is OLD
    assert honoured_cluster_policy([OLD, TWIN]) is TWIN


def test_the_namespace_is_the_given_one_else_the_honoured_policys():
    assert operator_namespace([NEW, OLD]) == "nvidia-gpu-operator"
    assert operator_namespace([NEW, OLD], given="mine") == "mine"
    assert operator_namespace([]) == ""
    assert operator_namespace([policy("p", "2025-01-01T00:00:00Z")]) == ""


class Api:
    """Objects by (resource, namespace, name); a resource in ``unserved`` answers 404 as a kind the cluster lacks."""

    def __init__(self, objects=None, unserved=(), failing=None):
        self.objects = objects or {}
        self.unserved = set(unserved)
        self.failing = failing
        self.requests = []

    def _check(self, ref):
        if ref.plural == self.failing:
            raise KubeApiError(f"GET {ref.plural}: forbidden", status=403, reason="Forbidden")
        if ref.plural in self.unserved:
            raise KubeApiError(f"GET {ref.plural}: not found", status=404, reason="NotFound")

    def get(self, ref, name, *, namespace=None):
        self.requests.append(("get", ref.plural, namespace, name))
        self._check(ref)
        return self.objects.get((ref.plural, namespace, name))

    def list(self, ref, **_kwargs):
        self.requests.append(("list", ref.plural))
        self._check(ref)
        return [obj for (plural, _ns, _name), obj in self.objects.items() if plural == ref.plural]


SUBSCRIPTION = {"metadata": {"name": "gpu-operator-certified"}, "status": {"installedCSV": "gpu-operator.v24.9.0"}}
STATE = {"metadata": {"name": "gpufleet-gpu-operator-olm-reinstall"}, "data": {"step": "subscribe"}}


def test_one_read_finds_the_policies_the_namespace_the_subscription_and_an_interrupted_reinstall():
    api = Api(
        {
            ("clusterpolicies", None, "b-policy"): OLD,
            ("clusterpolicies", None, "a-policy"): NEW,
            ("subscriptions", "nvidia-gpu-operator", "gpu-operator-certified"): SUBSCRIPTION,
            ("configmaps", "nvidia-gpu-operator", "gpufleet-gpu-operator-olm-reinstall"): STATE,
        }
    )
    found = read_operator(api, OperatorQuery())
    assert found["namespace"] == "nvidia-gpu-operator"
    assert [p["metadata"]["name"] for p in found["cluster_policies"]] == ["b-policy", "a-policy"]
    assert (found["subscription"], found["olm_state"], found["olm"], found["changed"]) == (
        SUBSCRIPTION,
        STATE,
        True,
        False,
    )
    assert api.requests == [
        ("list", "clusterpolicies"),
        ("get", "subscriptions", "nvidia-gpu-operator", "gpu-operator-certified"),
        ("get", "configmaps", "nvidia-gpu-operator", "gpufleet-gpu-operator-olm-reinstall"),
        ("list", "daemonsets"),  # the driver DaemonSets: no NVIDIADrivers read, the policy does not use them
    ]
    assert (found["release_pins"], found["release_pin_problems"]) == ([], [])


MANAGER = "nvcr.io/nvidia/cloud-native/k8s-driver-manager@sha256:b072c579"


def driver_daemonset(owner_uid: str, manager: str = MANAGER) -> dict:
    return {
        "metadata": {"name": f"nvidia-driver-{owner_uid}", "ownerReferences": [{"uid": owner_uid}]},
        "spec": {"template": {"spec": {"initContainers": [{"name": "k8s-driver-manager", "image": manager}]}}},
    }  # its driver container does not matter here: every driver below names its image


def test_the_driver_images_an_operator_release_would_replace_are_read_with_it():
    named = {"repository": "nvcr.io/nvidia", "image": "driver", "version": "550.127.05"}
    unpinned = {**OLD, "metadata": {**OLD["metadata"], "uid": "cp"}, "spec": {"driver": {**named, "manager": {}}}}
    api = Api({("clusterpolicies", None, "b-policy"): unpinned, ("daemonsets", "x", "d"): driver_daemonset("cp")})
    found = read_operator(api, OperatorQuery())
    (pin,) = found["release_pins"]
    assert (pin["kind"], pin["name"], pin["images"]) == (
        "ClusterPolicy",
        "b-policy",
        [{"what": "driver manager", "image": MANAGER}],
    )
    assert pin["patch"] == {"spec": {"driver": {"manager": {"image": MANAGER}}}}
    # GitOps mode: the same pin goes to Git for the ClusterPolicy Argo CD writes.
    in_git = read_operator(api, OperatorQuery(gitops_managed=("ClusterPolicy/b-policy",)))
    assert in_git["release_pins"] == []
    assert in_git["release_pin_gitops_changes"] == [
        {"kind": "ClusterPolicy", "name": "b-policy", "patch": pin["patch"]}
    ]
    # NVIDIADriver-managed drivers: their CRs are read, and a cluster that does not serve the kind has none.
    crd_policy = {**unpinned, "spec": {"driver": {"useNvidiaDriverCRD": True}}}
    cr = {"metadata": {"name": "default", "uid": "nd"}, "spec": {**named, "manager": {}}}
    api = Api({("clusterpolicies", None, "b-policy"): crd_policy, ("nvidiadrivers", None, "default"): cr,
               ("daemonsets", "x", "d"): driver_daemonset("nd")})  # fmt: skip
    assert [p["patch"] for p in read_operator(api, OperatorQuery())["release_pins"]] == [
        {"spec": {"manager": {"image": MANAGER}}}
    ]
    api.unserved.add("nvidiadrivers")
    assert read_operator(api, OperatorQuery())["release_pins"] == []


def test_a_named_policy_a_given_namespace_and_a_cluster_without_olm():
    api = Api({("clusterpolicies", None, "b-policy"): OLD}, unserved={"subscriptions"})
    found = read_operator(api, OperatorQuery(cluster_policy="b-policy", namespace="gpu"))
    assert found["namespace"] == "gpu"
    assert found["cluster_policies"] == [OLD]
    assert (found["subscription"], found["olm_state"], found["olm"]) == ({}, {}, False)
    # The reinstall record alone says OLM manages the operator (its Subscription deleted on the way back).
    api.objects[("configmaps", "gpu", "gpufleet-gpu-operator-olm-reinstall")] = STATE
    assert read_operator(api, OperatorQuery(cluster_policy="b-policy", namespace="gpu"))["olm"] is True


def test_no_cluster_policy_kind_no_namespace_and_nothing_more_is_read():
    api = Api(unserved={"clusterpolicies"})
    found = read_operator(api, OperatorQuery())
    assert (found["cluster_policies"], found["namespace"], found["olm"]) == ([], "", False)
    assert api.requests == [("list", "clusterpolicies")]
    assert read_operator(Api(), OperatorQuery(cluster_policy="missing"))["cluster_policies"] == []


def test_a_refused_read_is_an_error_not_an_absence():
    with pytest.raises(KubeApiError, match="forbidden"):
        read_operator(Api({("clusterpolicies", None, "b-policy"): OLD}, failing="subscriptions"), OperatorQuery())
