"""Installing BMCs into a twin: node selection, TLS material, annotations, plain HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bmc_harness import NODE_TYPE, running_twin
from cryptography import x509

from gpufleet_twin.apiserver.cluster import Twin
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.registry import Registry
from gpufleet_twin.machinery.store import Store
from gpufleet_twin.redfish import BMC_ADDRESS_ANNOTATION, find_fleet, install


def bare_twin() -> Twin:
    registry = Registry()
    registry.add(NODE_TYPE)
    clock = SimClock()
    return Twin(registry=registry, store=Store(registry, clock), clock=clock)


def test_without_a_ca_the_bmcs_get_their_own_and_publish_it(tmp_path: Path) -> None:
    twin = bare_twin()
    fleet = install(twin, nodes=["gpu-worker-2", "gpu-worker-1"], work_dir=tmp_path)
    try:
        assert fleet.nodes == ["gpu-worker-1", "gpu-worker-2"]
        assert find_fleet(twin) is fleet
        ca = x509.load_pem_x509_certificate(twin.published["bmc_ca_cert_pem"].encode())
        assert Path(twin.published["bmc_ca_file"]).read_text() == twin.published["bmc_ca_cert_pem"]
        host = fleet.address("gpu-worker-1").split("//")[1].rsplit(":", 1)[0]
        leaf = x509.load_pem_x509_certificate((tmp_path / f"bmc-{host}.crt").read_bytes())
        leaf.verify_directly_issued_by(ca)
        san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == [host]
        creds = twin.published["bmcs"]["gpu-worker-1"]
        assert creds["username"] == "root" and len(creds["password"]) >= 12
        assert creds["password"] != twin.published["bmcs"]["gpu-worker-2"]["password"]
        assert {m for m, _, _ in twin.routes} == {"GET", "POST", "DELETE"}
    finally:
        asyncio.run(fleet.stop())


def test_default_selection_skips_control_plane_and_caps_the_count(tmp_path: Path) -> None:
    twin = bare_twin()
    for i in range(5):
        twin.store.create(NODE_TYPE, {"metadata": {"name": f"gpu-worker-{i}"}})
    twin.store.create(NODE_TYPE, {"metadata": {"name": "master-0", "labels": {"node-role.kubernetes.io/master": ""}}})
    fleet = install(twin, max_bmcs=3, work_dir=tmp_path)
    try:
        assert fleet.nodes == ["gpu-worker-0", "gpu-worker-1", "gpu-worker-2"]
        annotated = {
            n["metadata"]["name"]: (n["metadata"].get("annotations") or {}).get(BMC_ADDRESS_ANNOTATION)
            for n in twin.store.list(NODE_TYPE)
        }
        assert annotated["gpu-worker-0"] == fleet.address("gpu-worker-0")
        assert annotated["gpu-worker-3"] is None and annotated["master-0"] is None
        # A node that registers again later is annotated on creation.
        twin.store.delete(NODE_TYPE, None, "gpu-worker-1")
        again = twin.store.create(NODE_TYPE, {"metadata": {"name": "gpu-worker-1"}})
        assert again["metadata"]["annotations"][BMC_ADDRESS_ANNOTATION] == fleet.address("gpu-worker-1")
    finally:
        asyncio.run(fleet.stop())


def test_plain_http_is_an_explicit_option(tmp_path: Path) -> None:
    with running_twin(tmp_path, tls=False, nodes=("gpu-worker-01",)) as bmcs:
        assert bmcs.fleet.address("gpu-worker-01").startswith("http://127.1.0.")
        assert bmcs.get("gpu-worker-01", "/redfish/v1/Managers/iDRAC.Embedded.1").json()["FirmwareVersion"]
        assert "bmc_ca_cert_pem" not in bmcs.twin.published and "bmc_ca_file" not in bmcs.twin.published
