"""Table output (what ``kubectl get`` prints), asked for with the Accept header as kubectl does."""

from __future__ import annotations

TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


def _table(twin, path: str) -> dict:
    result = twin.request("GET", path, headers={"Accept": TABLE})
    assert result.status == 200, result.body
    assert result.headers["Content-Type"].startswith("application/json;as=Table")
    table = result.json()
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    return table


def _columns(table: dict, *, wide: bool = False) -> list[str]:
    return [c["name"] for c in table["columnDefinitions"] if wide or c["priority"] == 0]


def test_node_and_pod_tables(twin, kit, namespace):
    node = kit.unique("gpu-worker")
    kit.node(node, labels={"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/infra": ""})
    twin.request(
        "PATCH",
        f"/api/v1/nodes/{node}",
        body={"spec": {"unschedulable": True}},
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    table = _table(twin, f"/api/v1/nodes?fieldSelector=metadata.name%3D{node}")
    assert _columns(table) == ["Name", "Status", "Roles", "Age", "Version"]
    assert table["rows"][0]["cells"][:3] == [node, "Ready,SchedulingDisabled", "infra,worker"]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    kit.running_pod(namespace, "p", node=node)
    pods = _table(twin, f"/api/v1/namespaces/{namespace}/pods")
    assert _columns(pods) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert _columns(pods, wide=True)[5:7] == ["IP", "Node"]
    assert pods["rows"][0]["cells"][:4] == ["p", "1/1", "Running", 0]
    assert pods["rows"][0]["cells"][6] == node


def test_include_object_variants(twin, namespace):
    twin.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/configmaps",
        body={"metadata": {"name": "cm"}, "data": {"a": "1", "b": "2"}},
    )
    whole = _table(twin, f"/api/v1/namespaces/{namespace}/configmaps?includeObject=Object")
    assert whole["rows"][0]["object"]["data"] == {"a": "1", "b": "2"}
    assert whole["rows"][0]["cells"][:2] == ["cm", 2]
    bare = _table(twin, f"/api/v1/namespaces/{namespace}/configmaps?includeObject=None")
    assert "object" not in bare["rows"][0]
    single = _table(twin, f"/api/v1/namespaces/{namespace}/configmaps/cm")
    assert single["rows"][0]["object"]["metadata"]["name"] == "cm"
    bad = twin.request("GET", f"/api/v1/namespaces/{namespace}/configmaps?includeObject=All", headers={"Accept": TABLE})
    assert bad.status == 400


def test_workload_and_budget_tables(twin, namespace):
    base = f"/apis/apps/v1/namespaces/{namespace}"
    template = {
        "metadata": {"labels": {"app": "d"}},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.present": "true"},
            "containers": [{"name": "driver", "image": "nvcr.io/nvidia/driver:550"}],
        },
    }
    twin.request(
        "POST",
        f"{base}/daemonsets",
        body={
            "metadata": {"name": "driver"},
            "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": template},
        },
    )
    twin.request(
        "PATCH",
        f"{base}/daemonsets/driver/status",
        body={
            "status": {
                "desiredNumberScheduled": 3,
                "currentNumberScheduled": 3,
                "numberReady": 2,
                "updatedNumberScheduled": 1,
                "numberAvailable": 2,
            }
        },
        headers={"Content-Type": "application/merge-patch+json"},
    )
    daemonsets = _table(twin, f"{base}/daemonsets")
    assert _columns(daemonsets) == [
        "Name",
        "Desired",
        "Current",
        "Ready",
        "Up-to-date",
        "Available",
        "Node Selector",
        "Age",
    ]
    assert daemonsets["rows"][0]["cells"][:7] == ["driver", 3, 3, 2, 1, 2, "nvidia.com/gpu.present=true"]
    assert daemonsets["rows"][0]["cells"][8:] == ["driver", "nvcr.io/nvidia/driver:550", "app=d"]
    twin.request(
        "POST",
        f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
        body={"metadata": {"name": "b"}, "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "d"}}}},
    )
    budgets = _table(twin, f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets")
    assert _columns(budgets) == ["Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"]
    assert budgets["rows"][0]["cells"][:4] == ["b", "50%", "N/A", 0]
    job = {
        "metadata": {"name": "validate"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i:1"}]}}},
    }
    assert twin.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=job).status == 201
    jobs = _table(twin, f"/apis/batch/v1/namespaces/{namespace}/jobs")
    assert _columns(jobs) == ["Name", "Status", "Completions", "Duration", "Age"]
    assert jobs["rows"][0]["cells"][:3] == ["validate", "Running", "0/1"]
    namespaces = _table(twin, f"/api/v1/namespaces/{namespace}")
    assert namespaces["rows"][0]["cells"][:2] == [namespace, "Active"]


def test_events_table(twin, namespace):
    event = {
        "metadata": {"name": "gpu-worker-001.1"},
        "involvedObject": {"kind": "Node", "name": "gpu-worker-001"},
        "reason": "GPUDriverUpgrade",
        "message": "Successfully updated node state label to [upgrade-done]",
        "type": "Normal",
        "count": 1,
        "source": {"component": "gpu-operator"},
    }
    assert twin.request("POST", f"/api/v1/namespaces/{namespace}/events", body=event).status == 201
    events = _table(twin, f"/api/v1/namespaces/{namespace}/events")
    assert _columns(events) == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert events["rows"][0]["cells"][1:4] == ["Normal", "GPUDriverUpgrade", "node/gpu-worker-001"]


def test_custom_resource_table_uses_printer_columns(twin):
    body = {
        "apiVersion": "nvidia.com/v1alpha1",
        "kind": "NVIDIADriver",
        "metadata": {"name": "canary"},
        "spec": {"driverType": "gpu"},
    }
    assert twin.request("POST", "/apis/nvidia.com/v1alpha1/nvidiadrivers", body=body).status == 201
    try:
        table = _table(twin, "/apis/nvidia.com/v1alpha1/nvidiadrivers")
        assert _columns(table)[:2] == ["Name", "Status"]
        assert table["rows"][0]["cells"][:2] == ["canary", None]
    finally:
        twin.request("DELETE", "/apis/nvidia.com/v1alpha1/nvidiadrivers/canary")
