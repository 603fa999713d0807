"""The GPU-error gate's Prometheus path against a real Prometheus scraping the twin's dcgm-exporter endpoints.

One Prometheus for the module (1 s scrapes), one twin; each test puts back the faults it injected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpufleet_twin.process import start_twin
from tests.integration.conftest import run_playbook
from tests.integration.prometheus_servers import Prometheus, start_prometheus

NODE = "gpu-worker-002"


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    twin = start_twin(nodes=3, profile="openshift", time_scale=600, workdir=tmp_path_factory.mktemp("twin"))
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


@pytest.fixture(scope="module")
def prometheus(twin, tmp_path_factory):
    server = start_prometheus(twin, workdir=tmp_path_factory.mktemp("prometheus"))
    yield server
    server.stop()


def _scraped(prometheus: Prometheus, node: str) -> list[dict[str, Any]]:
    return prometheus.wait_for(
        lambda: prometheus.query(f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}"}}'),
        what=f"Prometheus to scrape the dcgm-exporter of {node}",
    )


def _gate(twin, prometheus: Prometheus, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    result_file = tmp_path / "gate.json"
    run = run_playbook(
        "tests/integration/playbooks/validation_gate.yml",
        twin=twin,
        extra_vars={
            "gate_node": NODE,
            "gate_names": ["gpu_errors"],
            "gate_namespace": twin.companion["published"]["gpu_operator_namespace"],
            "gate_prometheus_url": prometheus.url,
            "result_file": str(result_file),
            **extra,
        },
    )
    assert run.returncode == 0, run.output
    return json.loads(result_file.read_text())


def test_prometheus_scrapes_every_gpu_of_every_node(twin, prometheus) -> None:
    for node in twin.companion["published"]["gpu_worker_nodes"]:
        series = _scraped(prometheus, node)
        assert sorted(int(s["metric"]["gpu"]) for s in series) == list(range(8))
        assert {s["metric"]["instance"] for s in series} == {node}
        assert all(s["metric"]["UUID"].startswith("GPU-") and s["value"][1] == "0" for s in series)


def test_gpu_errors_gate_reads_xids_from_prometheus(twin, prometheus, tmp_path) -> None:
    _scraped(prometheus, NODE)
    healthy = _gate(twin, prometheus, tmp_path)
    assert healthy["passed"] is True, healthy["summary"]

    # An XID the kernel log would also show: the gate must take it from DCGM_FI_DEV_XID_ERRORS.
    twin.admin("POST", "faults", {"type": "ecc_errors", "node": NODE, "xid": [48]})
    try:
        prometheus.wait_for(
            lambda: prometheus.query(f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{NODE}"}} == 48'),
            what="the XID to reach Prometheus",
        )
        failed = _gate(twin, prometheus, tmp_path)
    finally:
        twin.admin("DELETE", "faults")
    assert failed["passed"] is False
    gate = next(g for g in failed["gates"] if g["gate"] == "gpu_errors")
    assert "XID 48 on gpu-0" in gate["reason"], gate["reason"]
    assert gate["details"]["xid_events"] == [{"bus_id": "gpu 0", "xid": 48, "message": "DCGM_FI_DEV_XID_ERRORS"}]


def test_a_node_prometheus_has_no_series_for_fails_the_gate(twin, prometheus, tmp_path) -> None:
    # A wrong node label (or an exporter Prometheus does not scrape) finds no series: no evidence is no pass.
    _scraped(prometheus, NODE)
    result = _gate(twin, prometheus, tmp_path, gate_prometheus_node_label="kubernetes_node")
    assert result["passed"] is False
    gate = next(g for g in result["gates"] if g["gate"] == "gpu_errors")
    assert "no DCGM_FI_DEV_XID_ERRORS series" in gate["reason"], gate["reason"]
