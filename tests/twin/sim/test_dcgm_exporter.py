"""The twin's dcgm-exporter /metrics: dcgm-exporter's names and labels, values from the node's health."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gpufleet_twin.kube.state import NodeHealth
from gpufleet_twin.operators.dcgm_exporter import exposition, scrape_targets


def _node(**fields: object) -> NodeHealth:
    node = NodeHealth(name="gpu-worker-001", kernel="5.14.0", os_image="RHCOS", ostree_version=None)
    node.driver_version = "550.127.05"
    for key, value in fields.items():
        setattr(node, key, value)
    return node


def _samples(node: NodeHealth) -> dict[str, list]:
    families = text_string_to_metric_families(exposition(node).decode())
    return {family.name: family.samples for family in families}


def test_every_gpu_has_the_exporters_labels_and_no_errors_on_a_healthy_node() -> None:
    samples = _samples(_node())
    xids = samples["DCGM_FI_DEV_XID_ERRORS"]
    assert [s.labels["gpu"] for s in xids] == [str(i) for i in range(8)]
    first = xids[0].labels
    assert set(first) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
    assert first["Hostname"] == "gpu-worker-001"
    assert first["UUID"].startswith("GPU-") and first["device"] == "nvidia0"
    assert first["modelName"] == "NVIDIA H100 80GB HBM3" and first["DCGM_FI_DRIVER_VERSION"] == "550.127.05"
    assert all(s.value == 0 for s in xids)
    assert all(s.value == 0 for s in samples["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"])


def test_counters_keep_the_exporters_names() -> None:
    text = exposition(_node()).decode()
    assert "# TYPE DCGM_FI_DEV_XID_ERRORS gauge" in text
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL untyped" in text
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL_total" not in text


def test_xid_and_ecc_faults_show_on_the_first_gpu() -> None:
    samples = _samples(_node(xid_events=[48, 94], ecc_uncorrected=3, ecc_corrected=5))
    xids = {s.labels["gpu"]: s.value for s in samples["DCGM_FI_DEV_XID_ERRORS"]}
    assert xids["0"] == 94 and xids["1"] == 0  # the value of the last XID
    dbe = {s.labels["gpu"]: s.value for s in samples["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]}
    sbe = {s.labels["gpu"]: s.value for s in samples["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"]}
    assert dbe["0"] == 3 and sbe["0"] == 5 and dbe["1"] == 0


def test_scrape_targets_name_every_published_gpu_node() -> None:
    published = {"gpu_worker_nodes": ["gpu-worker-001", "gpu-worker-002"]}
    assert scrape_targets(published) == [
        "/admin/dcgm-exporter/gpu-worker-001/metrics",
        "/admin/dcgm-exporter/gpu-worker-002/metrics",
    ]
