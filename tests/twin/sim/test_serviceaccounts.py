"""ServiceAccounts as kube-controller-manager and the admission plugin keep them (kube/serviceaccounts.py, rootca)."""

from __future__ import annotations

import pytest
from simharness import pod_manifest

from gpufleet_twin.kube.rootca import ROOT_CA_CONFIGMAP
from gpufleet_twin.machinery import errors


def test_every_namespace_gets_default_and_root_ca(simulate) -> None:
    async def scenario(cluster) -> None:
        await cluster.settle()
        for namespace in ("default", "kube-system"):
            assert cluster.store.try_get(cluster.kinds.serviceaccount, namespace, "default") is not None
            configmap = cluster.store.get(cluster.kinds.configmap, namespace, ROOT_CA_CONFIGMAP)
            assert configmap["data"] == {"ca.crt": "-----BEGIN CERTIFICATE-----\ntwin\n-----END CERTIFICATE-----\n"}
        cluster.create("namespace", {"metadata": {"name": "team-a"}})
        await cluster.settle()
        assert cluster.store.try_get(cluster.kinds.serviceaccount, "team-a", "default") is not None
        assert cluster.store.try_get(cluster.kinds.configmap, "team-a", ROOT_CA_CONFIGMAP) is not None
        # Deleted or edited, both come back.
        cluster.store.delete(cluster.kinds.serviceaccount, "team-a", "default")
        cluster.store.mutate(cluster.kinds.configmap, "team-a", ROOT_CA_CONFIGMAP, lambda cm: cm.update(data={}))
        await cluster.settle()
        assert cluster.store.try_get(cluster.kinds.serviceaccount, "team-a", "default") is not None
        assert cluster.store.get(cluster.kinds.configmap, "team-a", ROOT_CA_CONFIGMAP)["data"]["ca.crt"]

    simulate(scenario, ca_pem="-----BEGIN CERTIFICATE-----\ntwin\n-----END CERTIFICATE-----\n")


def test_pod_with_missing_service_account_is_forbidden(simulate) -> None:
    async def scenario(cluster) -> None:
        pod = pod_manifest("x")
        pod["spec"]["serviceAccountName"] = "nope"
        with pytest.raises(errors.ApiError) as refused:
            cluster.create("pod", pod)
        assert refused.value.code == 403
        assert refused.value.message == (
            'pods "x" is forbidden: error looking up service account default/nope: serviceaccount "nope" not found'
        )
        assert cluster.pod("default", "x") is None
        # Without a name the pod runs as "default", which the admission finds even in a brand-new namespace.
        cluster.create("namespace", {"metadata": {"name": "fresh"}})
        created = cluster.create("pod", pod_manifest("y", namespace="fresh"))
        assert created["spec"]["serviceAccountName"] == "default"

    simulate(scenario)


def test_deployment_without_its_service_account_never_becomes_available(simulate) -> None:
    async def scenario(cluster) -> None:
        template = pod_manifest("web")
        template["spec"]["serviceAccountName"] = "web-sa"
        cluster.create(
            "deployment",
            {
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]},
                },
            },
        )
        await cluster.run_for(30)
        assert cluster.pods("default") == []
        failed = cluster.events("FailedCreate")
        assert failed and failed[0]["type"] == "Warning"
        assert failed[0]["involvedObject"]["kind"] == "ReplicaSet"
        message = failed[0]["message"]
        assert message.startswith('Error creating: pods "web-') and message.endswith(
            'is forbidden: error looking up service account default/web-sa: serviceaccount "web-sa" not found'
        )
        deployment = cluster.store.get(cluster.kinds.deployment, "default", "web")
        conditions = {c["type"]: c for c in deployment["status"]["conditions"]}
        assert conditions["Available"]["status"] == "False"
        assert conditions["ReplicaFailure"]["reason"] == "FailedCreate"
        assert conditions["ReplicaFailure"]["message"].endswith('serviceaccount "web-sa" not found')
        # Once the account exists, the ReplicaSet's retry creates the pods.
        cluster.create("serviceaccount", {"metadata": {"name": "web-sa", "namespace": "default"}})
        assert await cluster.wait_until(lambda: len(cluster.pods("default")) == 2, sim_seconds=600)
        await cluster.run_for(30)
        deployment = cluster.store.get(cluster.kinds.deployment, "default", "web")
        conditions = {c["type"]: c["status"] for c in deployment["status"]["conditions"]}
        assert conditions["Available"] == "True" and "ReplicaFailure" not in conditions

    simulate(scenario, nodes=2)
