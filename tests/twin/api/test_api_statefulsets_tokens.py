"""What the API server itself serves for StatefulSets and ServiceAccount tokens (``--bare``: no controllers)."""

from __future__ import annotations

import json


def test_discovery_serves_statefulsets_and_the_token_subresource(twin):
    apps = twin.request("GET", "/apis/apps/v1").json()
    names = {r["name"]: r for r in apps["resources"]}
    assert {"statefulsets", "statefulsets/status", "statefulsets/scale"} <= set(names)
    assert names["statefulsets"]["shortNames"] == ["sts"] and names["statefulsets"]["categories"] == ["all"]
    assert names["statefulsets/scale"]["kind"] == "Scale" and names["statefulsets/scale"]["group"] == "autoscaling"
    core = {r["name"]: r for r in twin.request("GET", "/api/v1").json()["resources"]}
    token = core["serviceaccounts/token"]
    assert (token["group"], token["version"], token["kind"], token["verbs"]) == (
        "authentication.k8s.io",
        "v1",
        "TokenRequest",
        ["create"],
    )


def test_statefulset_defaults_columns_and_immutable_fields(twin, namespace):
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": namespace},
        "spec": {
            "serviceName": "db",
            "selector": {"matchLabels": {"app": "db"}},
            "template": {
                "metadata": {"labels": {"app": "db"}},
                "spec": {"containers": [{"name": "db", "image": "registry.local/db:1"}]},
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}],
        },
    }
    twin.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    sts = json.loads(twin.kubectl("get", "sts", "db", "-n", namespace, "-o", "json").stdout)
    spec = sts["spec"]
    assert spec["replicas"] == 1 and spec["podManagementPolicy"] == "OrderedReady"
    assert spec["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
    assert spec["revisionHistoryLimit"] == 10
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Retain", "whenScaled": "Retain"}
    claim = spec["volumeClaimTemplates"][0]
    assert (claim["apiVersion"], claim["kind"], claim["spec"]["volumeMode"], claim["status"]["phase"]) == (
        "v1",
        "PersistentVolumeClaim",
        "Filesystem",
        "Pending",
    )
    header = twin.kubectl("get", "sts", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "READY", "AGE"]
    assert twin.kubectl("get", "sts", "-n", namespace, "-o", "wide").stdout.splitlines()[0].split() == [
        "NAME",
        "READY",
        "AGE",
        "CONTAINERS",
        "IMAGES",
    ]
    twin.kubectl("scale", "sts", "db", "-n", namespace, "--replicas=3")
    assert json.loads(twin.kubectl("get", "sts", "db", "-n", namespace, "-o", "json").stdout)["spec"]["replicas"] == 3
    refused = twin.kubectl(
        "patch", "sts", "db", "-n", namespace, "--type=merge", "-p", '{"spec":{"serviceName":"other"}}', check=False
    )
    assert refused.returncode != 0
    assert "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals'" in refused.stderr


def test_token_request_for_a_service_account(twin, namespace):
    twin.kubectl("create", "serviceaccount", "robot", "-n", namespace)
    token = twin.kubectl("create", "token", "robot", "-n", namespace, "--duration=20m").stdout.strip()
    header, payload, _ = token.split(".")
    claims = json.loads(_unb64(payload))
    assert claims["sub"] == f"system:serviceaccount:{namespace}:robot"
    assert claims["exp"] - claims["iat"] == 1200
    assert json.loads(_unb64(header))["typ"] == "JWT"
    whoami = twin.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
        token=token,
    )
    assert whoami.status == 201
    assert whoami.json()["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:robot"
    missing = twin.kubectl("create", "token", "nobody", "-n", namespace, check=False)
    assert 'serviceaccounts "nobody" not found' in missing.stderr
    assert twin.request("GET", "/api/v1/namespaces", token="not-a-token").status == 401


def _unb64(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
