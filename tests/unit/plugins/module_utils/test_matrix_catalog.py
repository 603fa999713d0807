"""The shipped compatibility catalog: every fact sourced, user catalogs merged over it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import (
    FACT_SECTIONS,
    CatalogError,
    catalog_from_text,
    check_catalog_data,
    load_catalog,
    merge_catalog_data,
    shipped_catalog_data,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_versions import parse_version

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "matrix"


def test_every_shipped_fact_names_a_defined_source() -> None:
    data = shipped_catalog_data()
    check_catalog_data(data, source="shipped")
    for section in FACT_SECTIONS:
        assert data[section], section
    for source_id, source in data["sources"].items():
        assert source.get("url", "").startswith("https://") or (source["repo"] and source["path"] and source["ref"]), (
            source_id
        )


def test_shipped_data_is_a_fresh_copy_each_call() -> None:
    first = shipped_catalog_data()
    first["gpu_operator"]["releases"].clear()
    assert shipped_catalog_data()["gpu_operator"]["releases"]


@pytest.mark.parametrize(
    ("tag", "driver"),
    [
        # UPSTREAM-FACTS: default driver per GPU Operator release (chart values.yaml per tag).
        ("v24.6.0", "550.90.07"),
        ("v24.9.0", "550.127.05"),
        ("v24.9.2", "550.144.03"),
        ("v25.3.0", "570.124.06"),
        ("v25.3.4", "580.82.07"),
        ("v25.10.0", "580.95.05"),
        ("v25.10.1", "580.105.08"),
        ("v26.3.0", "580.126.20"),
        ("v26.7.0", "595.91.07"),
    ],
)
def test_default_driver_per_gpu_operator_release(tag: str, driver: str) -> None:
    assert shipped_catalog_data()["gpu_operator"]["releases"][tag]["default_driver"] == driver


def test_there_is_no_gpu_operator_24_12() -> None:
    catalog = load_catalog()
    fact = catalog.release_line_known("gpu_operator", parse_version("gpu_operator", "v24.12.0"))
    assert fact is not None
    assert fact.value is False
    assert any("github.com/NVIDIA/gpu-operator/tags" in source for source in fact.sources)
    assert catalog.gpu_operator_release(parse_version("gpu_operator", "v24.12.0")) is None


def test_gpu_operator_24_9_0_documents_560_and_its_rhcos_range() -> None:
    catalog = load_catalog()
    tag, entry = catalog.gpu_operator_release(parse_version("gpu_operator", "24.9.0"))
    assert tag == "v24.9.0"
    assert "560.35.03" in entry["documented_drivers"]
    assert entry["openshift"][0] == "4.12" and entry["openshift"][-1] == "4.17"
    assert entry["operands"]["dcgm"] == "3.3.8-3.6.0"


def test_openshift_4_17_is_rhel_9_4_not_a_6x_kernel() -> None:
    catalog = load_catalog()
    assert catalog.openshift_minor("4.17")["rhel"] == "9.4"
    facts, fact = catalog.rhel_kernel("9.4")
    assert (facts["kernel"], facts["release_stream"]) == ("5.14.0", "427")
    assert fact.sources


def test_network_operator_lines_include_24_4_from_branches() -> None:
    catalog = load_catalog()
    assert catalog.release_line_known("network_operator", parse_version("network_operator", "v24.4.0")).value
    assert not catalog.release_line_known("network_operator", parse_version("network_operator", "v24.12.0")).value


def test_mofed_firmware_pairing_prefers_the_most_specific_entry() -> None:
    catalog = load_catalog()
    key, fact = catalog.mofed_firmware(parse_version("mofed", "24.10-1.1.4.0"))
    assert (key, fact.value) == ("24.10-1.1.4.0", "xx.43.2026")
    key, fact = catalog.mofed_firmware(parse_version("mofed", "25.01-0.6.0.0-0"))
    assert (key, fact.value) == ("25.01", "xx.44.1036")
    key, fact = catalog.mofed_firmware(parse_version("mofed", "doca3.2.0-25.10-1.2.8.0-2"))
    assert (key, fact.value) == ("doca3.2.0", "xx.47.1012")
    assert catalog.mofed_firmware(parse_version("mofed", "24.10-1.0.0.0")) is None


def test_firmware_families_and_key_names() -> None:
    catalog = load_catalog()
    assert catalog.firmware_family(28).value == "ConnectX-7"
    family_id, fact = catalog.firmware_family_for_key("cx6dx")
    assert (family_id, fact.value) == ("22", "ConnectX-6 Dx")
    assert catalog.firmware_family(99) is None


def test_citations_render_url_or_repo_path_ref() -> None:
    catalog = load_catalog()
    [citation] = catalog.sources_of("sriov_operator", "4.18.0")
    assert "openshift/sriov-network-operator:manifests/stable/" in citation
    assert citation.endswith("@release-4.18>")


def test_user_catalog_merges_over_the_shipped_one() -> None:
    catalog = catalog_from_text((FIXTURES / "catalog-user.yaml").read_text(), origin="catalog-user.yaml")
    assert catalog.origin == "shipped + catalog-user.yaml"
    fact = catalog.driver_cuda(570)
    assert fact.value == "12.8"
    assert "example.com" in fact.sources[0]
    # Shipped facts are still there.
    assert catalog.driver_cuda(560).value == "12.6"


def test_user_catalog_without_sources_is_refused() -> None:
    with pytest.raises(CatalogError, match="a fact without sources"):
        catalog_from_text((FIXTURES / "catalog-unsourced.yaml").read_text(), origin="catalog-unsourced.yaml")


def test_user_catalog_citing_an_undefined_source_is_refused() -> None:
    with pytest.raises(CatalogError, match="not defined under sources"):
        load_catalog({"driver_cuda": {"570": {"cuda": "12.8", "sources": ["nowhere"]}}})


def test_user_catalog_may_cite_shipped_sources_and_override_a_fact() -> None:
    catalog = load_catalog({"openshift": {"4.17": {"rhel": "9.4", "sources": ["openshift-os-release-4.17"]}}})
    assert catalog.openshift_minor("4.17")["rhel"] == "9.4"


def test_a_user_fact_written_as_a_number_is_refused_as_written() -> None:
    # Unquoted, 12.10 would be the float 12.1 and compare as CUDA 12.1.
    text = "sources: {s: {url: 'https://example.com'}}\ndriver_cuda:\n  '570': {cuda: 12.10, sources: [s]}\n"
    with pytest.raises(CatalogError) as caught:
        catalog_from_text(text, origin="catalog.yaml")
    assert str(caught.value) == (
        'catalog.yaml: driver_cuda.570.cuda: found 12.10, expected a string (quote it in YAML: "12.10")'
    )


def test_unknown_section_is_refused() -> None:
    with pytest.raises(CatalogError, match="unknown catalog sections"):
        load_catalog({"ofed": {}})


def test_source_without_a_place_is_refused() -> None:
    with pytest.raises(CatalogError, match="neither a url nor a repo"):
        load_catalog({"sources": {"vague": {"title": "someone said so"}}})


def test_merge_replaces_lists_and_merges_mappings() -> None:
    merged = merge_catalog_data({"a": {"b": [1, 2], "c": 1}}, {"a": {"b": [3]}})
    assert merged == {"a": {"b": [3], "c": 1}}


def test_empty_user_catalog_is_the_shipped_one() -> None:
    assert catalog_from_text("# nothing yet\n", origin="c.yaml").origin == "shipped"


def test_newest_releases_in_the_shipped_catalog() -> None:
    catalog = load_catalog()
    assert catalog.newest_release("gpu_operator").text == "v26.7.0"
    assert catalog.newest_release("network_operator").text == "v26.4.1"


@pytest.mark.parametrize(
    ("tag", "exporter", "engine"),
    [
        # UPSTREAM-FACTS: chart values per tag, dcgmExporter.version and dcgm.version (standalone host engine).
        ("v25.10.1", "4.4.2-4.7.0", "4.4.2-1-ubuntu22.04"),
        ("v26.3.0", "4.5.1-4.8.0", "4.5.2-1-ubuntu22.04"),
        ("v26.3.2", "4.5.3-4.8.2", "4.5.2-1-ubuntu22.04"),
        ("v26.7.0", "4.6.0-4.8.3", "4.6.0-1-ubuntu24.04"),
    ],
)
def test_dcgm_exporter_and_host_engine_defaults(tag: str, exporter: str, engine: str) -> None:
    operands = shipped_catalog_data()["gpu_operator"]["releases"][tag]["operands"]
    assert (operands["dcgm"], operands["dcgm_hostengine"]) == (exporter, engine)


def test_every_release_ships_an_exporter_and_host_engine_of_one_dcgm_line() -> None:
    # The shipped defaults never pair another DCGM major.minor (26.3 pairs 4.5.1/4.5.3 exporters with a 4.5.2 engine).
    for tag, entry in shipped_catalog_data()["gpu_operator"]["releases"].items():
        exporter = parse_version("dcgm", entry["operands"]["dcgm"]).detail["dcgm"]
        engine = parse_version("dcgm_hostengine", entry["operands"]["dcgm_hostengine"]).detail["dcgm"]
        assert exporter.split(".")[:2] == engine.split(".")[:2], tag
