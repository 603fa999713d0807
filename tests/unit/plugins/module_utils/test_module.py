"""The shared option pieces: each argument spec agrees with the doc fragment that documents it."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.gpufleet.upgrade.plugins.doc_fragments import firmware_components, redfish, wait
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import ComponentSpec, component_specs
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import (
    firmware_components_argument_spec,
    redfish_argument_spec,
    wait_argument_spec,
)


def documented(*fragments: str) -> dict:
    options: dict = {}
    for text in fragments:
        options.update(yaml.safe_load(text)["options"])
    return options


def assert_mirrors(spec: dict, docs: dict) -> None:
    assert sorted(spec) == sorted(docs)
    for name, piece in spec.items():
        doc = docs[name]
        assert piece["type"] == doc["type"], name
        assert piece.get("default") == doc.get("default"), name
        assert bool(piece.get("required")) == bool(doc.get("required")), name
        assert piece.get("elements") == doc.get("elements"), name
        if "options" in piece:
            assert_mirrors(piece["options"], doc["suboptions"])


def test_wait_spec_mirrors_its_three_fragments_with_wait_sleep_a_float():
    fragment = wait.ModuleDocFragment
    assert_mirrors(wait_argument_spec(), documented(fragment.DOCUMENTATION, fragment.TIMEOUT, fragment.SLEEP))
    assert wait_argument_spec()["wait_sleep"]["type"] == "float"


def test_wait_spec_gives_a_subset_and_a_module_default_and_refuses_unknown_names():
    spec = wait_argument_spec(options=("wait_timeout", "wait_sleep"), wait_timeout=1800, wait_sleep=2.0)
    assert spec == {"wait_timeout": {"type": "int", "default": 1800}, "wait_sleep": {"type": "float", "default": 2.0}}
    with pytest.raises(ValueError, match="not wait options: poll"):
        wait_argument_spec(options=("poll",))


def test_redfish_spec_mirrors_its_fragment_keeps_secrets_out_of_logs_and_reads_the_environment():
    spec = redfish_argument_spec()
    assert_mirrors(spec, documented(redfish.ModuleDocFragment.DOCUMENTATION))
    assert spec["bmc_password"]["no_log"] is True
    assert spec["bmc_username"]["fallback"][1] == ["REDFISH_USERNAME"]
    assert spec["bmc_password"]["fallback"][1] == ["REDFISH_PASSWORD"]


def test_redfish_spec_takes_older_names_as_aliases_and_can_require_credentials():
    spec = redfish_argument_spec(credentials_required=True, aliases={"bmc_username": "username"})
    assert spec["bmc_username"]["aliases"] == ["username"] and spec["bmc_username"]["required"]
    assert spec["bmc_password"]["required"] and "aliases" not in spec["bmc_password"]
    assert "required" not in redfish_argument_spec()["bmc_username"]  # each call builds a fresh spec
    with pytest.raises(ValueError, match="not a Redfish option: baseurl"):
        redfish_argument_spec(aliases={"baseurl": "url"})


def test_components_spec_mirrors_its_fragment_and_becomes_component_specs():
    assert_mirrors(firmware_components_argument_spec(), documented(firmware_components.ModuleDocFragment.DOCUMENTATION))
    entries = [{"match": "ConnectX-7", "version": "28.42.1000", "image_path": None, "name": None}]
    assert component_specs(entries) == [ComponentSpec(match="ConnectX-7", version="28.42.1000")]
