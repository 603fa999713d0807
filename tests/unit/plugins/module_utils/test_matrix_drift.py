"""Drift: observed versions from API objects, compared with the matrix by role."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_drift import (
    ROLE_CANARY,
    ROLE_PRODUCTION,
    STATUS_DRIFT,
    STATUS_OK,
    STATUS_UNKNOWN,
    Observed,
    ObservedCluster,
    ObservedNode,
    compute_drift,
    driver_version_from_tag,
    image_tag,
    mofed_version_from_tag,
    observe_from_api,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import load_matrix_file

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "matrix"
SHARED_SAMPLES = Path(__file__).resolve().parents[4].parent / "shared" / "reference" / "samples"


@pytest.fixture(scope="module")
def snapshot() -> dict[str, Any]:
    data = json.loads((FIXTURES / "api" / "openshift-canary-snapshot.json").read_text())
    return {key: value["items"] for key, value in data.items() if not key.startswith("_")}


@pytest.fixture(scope="module")
def observed(snapshot: dict[str, Any]) -> Observed:
    return observe_from_api(**snapshot)


@pytest.mark.parametrize(
    ("image", "tag"),
    [
        ("nvcr.io/nvidia/driver:560.35.03-rhcos4.16", "560.35.03-rhcos4.16"),
        ("nvcr.io/nvidia/driver:565.57.01-rhcos4.16@sha256:9a8b", "565.57.01-rhcos4.16"),
        ("nvcr.io/nvidia/driver@sha256:0f1e2d", None),
        ("registry.local:5000/nvidia/driver", None),
        ("registry.local:5000/nvidia/driver:550.127.08-ubuntu22.04", "550.127.08-ubuntu22.04"),
        ("", None),
    ],
)
def test_image_tag(image: str, tag: Any) -> None:
    assert image_tag(image) == tag


@pytest.mark.parametrize(
    ("tag", "version"),
    [
        ("560.35.03-rhcos4.16", "560.35.03"),
        ("595.80-ubuntu24.04", "595.80"),
        ("550.127.08", "550.127.08"),
        # A precompiled tag names a branch and a kernel, not a driver version.
        ("535-5.15.0-1043-nvidia-ubuntu22.04", None),
        (None, None),
    ],
)
def test_driver_version_from_tag(tag: Any, version: Any) -> None:
    assert driver_version_from_tag(tag) == version


@pytest.mark.parametrize(
    ("tag", "version"),
    [
        ("24.07-0.6.1.0-0-rhcos4.16-amd64", "24.07-0.6.1.0-0"),
        ("doca3.1.0-25.07-0.9.7.0-0-ubuntu24.04-amd64", "doca3.1.0-25.07-0.9.7.0-0"),
        ("24.10-0.7.0.0-0-5.14.0-427.40.1.el9_4.x86_64-rhcos4.16-amd64", "24.10-0.7.0.0-0"),
        ("23.07-0.5.0.0", "23.07-0.5.0.0"),
        ("latest", None),
    ],
)
def test_mofed_version_from_tag(tag: str, version: Any) -> None:
    assert mofed_version_from_tag(tag) == version


def test_observe_only_gpu_nodes_with_roles(observed: Observed) -> None:
    assert [(node.name, node.role) for node in observed.nodes] == [
        ("gpu-worker-001", ROLE_PRODUCTION),
        ("gpu-worker-002", ROLE_PRODUCTION),
        ("gpu-worker-004", ROLE_CANARY),
    ]


def test_observe_node_versions_and_where_they_came_from(observed: Observed) -> None:
    first, second, canary = observed.nodes
    # Running driver pod wins; the Pending pod for 565 is ignored.
    assert first.gpu_driver == "560.35.03"
    assert first.sources["gpu_driver"].startswith("Pod nvidia-gpu-operator/nvidia-driver-daemonset-416.94")
    assert first.kernel == "5.14.0-427.40.1.el9_4.x86_64"
    assert first.ostree == "416.94.202410211619-0"
    assert first.mofed == "24.07-0.6.1.0-0"
    assert first.firmware == {"firmware_cx7": "28.40.10.00"}
    # Digest-only driver image: the old GFD labels are read instead.
    assert second.gpu_driver == "550.127.05"
    assert second.sources["gpu_driver"] == "GFD node labels"
    # No OSTREE label: the RHCOS build is read from osImage.
    assert second.ostree == "416.94.202409191851-0"
    # Digest-only MOFED pod: the NicClusterPolicy version it was rendered from.
    assert second.mofed == "24.07-0.6.1.0-0"
    assert "NicClusterPolicy" in second.sources["mofed"]
    # Tag and digest together: the tag is read.
    assert canary.gpu_driver == "565.57.01"
    assert canary.mofed is None


def test_observe_cluster_wide_versions(observed: Observed) -> None:
    cluster = observed.cluster
    assert cluster.gpu_operator == "24.9.0"  # the Succeeded CSV, not the one being replaced
    assert cluster.sriov_operator == "4.18.0-202501230001"
    assert cluster.network_operator == "v24.7.0"
    assert cluster.sources["network_operator"].startswith("Deployment nvidia-network-operator/")
    # The newest Completed history entry, not the update still in progress.
    assert cluster.openshift == "4.16.23"
    assert cluster.dcgm == "3.3.8-3.6.0-ubuntu22.04"
    # ClusterPolicy pins the device plugin by digest: the DaemonSet image tag is read.
    assert cluster.device_plugin == "v0.16.2-ubi8"
    assert cluster.container_toolkit == "v1.16.2-ubuntu20.04"


def test_nodes_and_pods_may_be_streamed_once(snapshot: dict[str, Any], observed: Observed) -> None:
    # observe_cluster passes page-by-page generators: each must be read once, pods first.
    read: list[str] = []

    def once(kind: str, items: list[dict[str, Any]]) -> Any:
        read.append(kind)
        yield from items

    streamed = observe_from_api(
        **{**snapshot, "nodes": once("nodes", snapshot["nodes"]), "pods": once("pods", snapshot["pods"])}
    )
    assert read == ["pods", "nodes"]
    assert streamed.nodes == observed.nodes
    assert streamed.cluster == observed.cluster


def test_firmware_from_bmc_inventory_wins_over_labels(snapshot: dict[str, Any]) -> None:
    observed = observe_from_api(**snapshot, firmware_by_node={"gpu-worker-001": {"firmware_cx7": "28.42.1000"}})
    node = observed.nodes[0]
    assert node.firmware["firmware_cx7"] == "28.42.1000"
    assert node.sources["firmware_cx7"] == "BMC firmware inventory"


def test_compute_drift_against_the_seed_matrix(observed: Observed) -> None:
    matrix = load_matrix_file(str(FIXTURES / "seed000-stages.yaml"))
    report = compute_drift(
        {
            ROLE_PRODUCTION: matrix.effective_versions("current_production"),
            ROLE_CANARY: matrix.effective_versions("canary_testing"),
        },
        observed,
    )
    rows = {
        (node["node"], row["component"]): (row["expected"], row["found"], row["status"])
        for node in report["nodes"]
        for row in node["components"]
    }
    assert rows[("gpu-worker-001", "gpu_driver")] == ("560.35.03", "560.35.03", STATUS_OK)
    # 28.40.10.00 (iDRAC form) is 28.40.1000.
    assert rows[("gpu-worker-001", "firmware_cx7")] == ("28.40.1000", "28.40.10.00", STATUS_OK)
    assert rows[("gpu-worker-001", "firmware_cx6")] == ("22.40.1000", None, STATUS_UNKNOWN)
    # The image's container build suffix does not make a difference.
    assert rows[("gpu-worker-001", "mofed")] == ("24.07-0.6.1.0", "24.07-0.6.1.0-0", STATUS_OK)
    assert rows[("gpu-worker-002", "gpu_driver")] == ("560.35.03", "550.127.05", STATUS_DRIFT)
    assert rows[("gpu-worker-002", "kernel")] == (
        "5.14.0-427.40.1.el9_4.x86_64",
        "5.14.0-427.37.1.el9_4.x86_64",
        STATUS_DRIFT,
    )
    # The canary node is compared with canary_testing.
    assert rows[("gpu-worker-004", "gpu_driver")] == ("565.57.01", "565.57.01", STATUS_OK)
    assert rows[("gpu-worker-004", "mofed")] == ("24.07-0.6.1.0", None, STATUS_UNKNOWN)
    assert report["nodes_with_drift"] == ["gpu-worker-002"]

    cluster = {row["component"]: row for row in report["cluster"]}
    assert (cluster["gpu_operator"]["status"], cluster["gpu_operator"]["matched_role"]) == (STATUS_OK, ROLE_PRODUCTION)
    assert cluster["gpu_operator"]["expected_canary"] == "v24.12.0"
    assert cluster["openshift"]["status"] == STATUS_OK
    assert cluster["sriov_operator"]["status"] == STATUS_OK
    assert cluster["dcgm"]["status"] == STATUS_OK
    assert cluster["device_plugin"]["status"] == STATUS_OK
    assert "cuda" not in cluster and "nccl" not in cluster

    assert report["summary"]["gpu_driver"] == {STATUS_OK: 2, STATUS_DRIFT: 1, STATUS_UNKNOWN: 0}
    assert report["summary"]["firmware_cx6"] == {STATUS_OK: 0, STATUS_DRIFT: 0, STATUS_UNKNOWN: 3}
    assert report["totals"][STATUS_DRIFT] == 2


def test_a_gpu_node_running_no_driver_is_drift_not_unknown(observed: Observed) -> None:
    matrix = load_matrix_file(str(FIXTURES / "seed000-stages.yaml"))
    observed = copy.deepcopy(observed)  # the fixture is shared by the module's tests
    node = next(n for n in observed.nodes if n.name == "gpu-worker-001")
    node.gpu_driver = None
    node.sources.pop("gpu_driver", None)
    report = compute_drift({ROLE_PRODUCTION: matrix.effective_versions("current_production")}, observed)
    row = next(
        r
        for n in report["nodes"]
        if n["node"] == "gpu-worker-001"
        for r in n["components"]
        if r["component"] == "gpu_driver"
    )
    assert (row["found"], row["status"]) == (None, STATUS_DRIFT)
    assert "no driver pod" in row["source"]
    assert "gpu-worker-001" in report["nodes_with_drift"]


def test_cluster_component_matching_the_canary_stage() -> None:
    observed = Observed(
        nodes=[ObservedNode(name="gpu-worker-004", role=ROLE_CANARY, gpu_driver="565.57.01")],
        cluster=ObservedCluster(gpu_operator="24.9.2"),
    )
    report = compute_drift(
        {ROLE_PRODUCTION: {"gpu_operator": "v24.9.0"}, ROLE_CANARY: {"gpu_operator": "v24.9.2"}}, observed
    )
    [row] = report["cluster"]
    assert (row["status"], row["matched_role"]) == (STATUS_OK, ROLE_CANARY)


def test_cluster_component_matching_no_stage_is_drift() -> None:
    observed = Observed(cluster=ObservedCluster(openshift="4.16.20"))
    report = compute_drift({ROLE_PRODUCTION: {"openshift": "4.16.23"}}, observed)
    assert report["cluster"][0]["status"] == STATUS_DRIFT
    assert report["summary"] == {"openshift": {STATUS_OK: 0, STATUS_DRIFT: 1, STATUS_UNKNOWN: 0}}


def test_real_gfd_labels_from_a_published_node_list() -> None:
    sample = SHARED_SAMPLES / "nodes" / "rke2-a16-vgpu-550.90.07-get-nodes.json"
    if not sample.exists():
        pytest.skip("shared reference samples are not beside the checkout")
    nodes = json.loads(sample.read_text())["items"]
    observed = observe_from_api(nodes=nodes)
    assert observed.nodes, "the sample's GPU node is recognised"
    assert {node.gpu_driver for node in observed.nodes} == {"550.90.07"}
    assert all(node.kernel for node in observed.nodes)


def _policy(driver: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "gpu-cluster-policy"}, "spec": {"driver": driver}}


@pytest.mark.parametrize(
    ("driver", "found"),
    [
        ({"usePrecompiled": True, "version": "550"}, "precompiled"),
        ({"usePrecompiled": False}, "compiled"),
        ({}, "compiled"),  # the CRD's default is false
        ({"usePrecompiled": True, "useNvidiaDriverCRD": True}, None),  # the NVIDIADrivers decide
    ],
)
def test_driver_type_is_read_from_the_clusterpolicy(driver: dict[str, Any], found: Any) -> None:
    observed = observe_from_api(nodes=[], clusterpolicies=[_policy(driver)])
    assert observed.cluster.driver_type == found
    report = compute_drift({ROLE_PRODUCTION: {"driver_type": "compiled"}}, observed)
    [row] = report["cluster"]
    expected = {"compiled": STATUS_OK, "precompiled": STATUS_DRIFT, None: STATUS_UNKNOWN}[found]
    assert (row["component"], row["found"], row["status"]) == ("driver_type", found, expected)
    if found:
        assert row["source"] == "ClusterPolicy gpu-cluster-policy spec.driver.usePrecompiled"


def test_the_standalone_host_engine_is_read_only_where_it_runs() -> None:
    engine = {"repository": "nvcr.io/nvidia/cloud-native", "image": "dcgm", "version": "4.1.1-2-ubuntu22.04"}
    matrix = {ROLE_PRODUCTION: {"dcgm_hostengine": "4.1.1-2"}}
    off = {"metadata": {"name": "gpu-cluster-policy"}, "spec": {"dcgm": engine}}  # off unless enabled
    [row] = compute_drift(matrix, observe_from_api(nodes=[], clusterpolicies=[off]))["cluster"]
    assert (row["found"], row["status"]) == (None, STATUS_UNKNOWN)
    on = {"metadata": {"name": "gpu-cluster-policy"}, "spec": {"dcgm": {**engine, "enabled": True}}}
    [row] = compute_drift(matrix, observe_from_api(nodes=[], clusterpolicies=[on]))["cluster"]
    assert (row["found"], row["status"]) == ("4.1.1-2-ubuntu22.04", STATUS_OK)
    assert row["source"] == "ClusterPolicy gpu-cluster-policy spec.dcgm.version"
    # Unpinned in the policy: the DaemonSet's image says what runs (the exporter's image is not it).
    daemonsets = [
        {"metadata": {"name": name, "namespace": "nvidia-gpu-operator"},
         "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}
        for name, image in (("nvidia-dcgm-exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:4.1.1-4.0.4-ubi9"),
                            ("nvidia-dcgm", "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"))
    ]  # fmt: skip
    observed = observe_from_api(nodes=[], clusterpolicies=[], daemonsets=daemonsets)
    [row] = compute_drift(matrix, observed)["cluster"]
    assert (row["found"], row["status"]) == ("4.2.3-1-ubuntu22.04", STATUS_DRIFT)
