"""What module files share: option pieces that agree with their doc fragments, and the one main() path."""

from __future__ import annotations

import pytest
import yaml

from ansible_collections.gpufleet.upgrade.plugins.doc_fragments import (
    failure_domains,
    firmware_components,
    gitops,
    redfish,
    wait,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import RolloutHaltedError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import ComponentSpec, component_specs
from ansible_collections.gpufleet.upgrade.plugins.module_utils._module import (
    failure_domain_argument_spec,
    finding_warnings,
    firmware_components_argument_spec,
    gitops_argument_spec,
    redfish_argument_spec,
    run_module,
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


def test_failure_domain_and_gitops_specs_mirror_their_fragments():
    assert_mirrors(failure_domain_argument_spec(), documented(failure_domains.ModuleDocFragment.DOCUMENTATION))
    fragment = gitops.ModuleDocFragment
    assert_mirrors(gitops_argument_spec(), documented(fragment.DOCUMENTATION, fragment.SYNCED))
    assert_mirrors(gitops_argument_spec(synced=False), documented(fragment.DOCUMENTATION))


class Exited(Exception):
    """AnsibleModule's exit_json and fail_json end the process; the fake ends the call."""


class FakeModule:
    def __init__(self) -> None:
        self.warnings: list = []
        self.exit: dict = {}

    def warn(self, warning: str) -> None:
        self.warnings.append(warning)

    def fail_json(self, **kwargs) -> None:
        self.exit = dict(kwargs, failed=True)
        raise Exited()

    def exit_json(self, **kwargs) -> None:
        self.exit = kwargs
        raise Exited()


def test_run_module_reports_a_missing_library_before_any_work():
    module, called = FakeModule(), []
    with pytest.raises(Exited):
        run_module(module, lambda: called.append(1) or {}, failure="Failed to x", missing=[("kubernetes", "Traceback")])
    assert not called and module.exit["failed"] and "kubernetes" in module.exit["msg"]
    assert module.exit["exception"] == "Traceback"


def test_run_module_turns_the_collection_error_into_one_failure_with_the_partial_result():
    def work() -> dict:
        raise RolloutHaltedError("node gpu-worker-001 failed", result={"warnings": ["slow BMC"], "done": ["a"]})

    module = FakeModule()
    with pytest.raises(Exited):
        run_module(module, work, failure="Failed to roll out NIC firmware")
    assert module.exit == {
        "msg": "Failed to roll out NIC firmware: node gpu-worker-001 failed",
        "done": ["a"],
        "failed": True,
    }
    assert module.warnings == ["slow BMC"]


def test_run_module_shows_the_result_warnings_then_the_findings_and_returns_the_rest():
    result = {
        "changed": True,
        "warnings": ["w1"],
        "preflight": {
            "findings": [
                {"check": "pdb", "severity": "warning", "message": "m"},
                {"check": "ok", "severity": "info", "message": "i"},
            ]
        },
    }
    module = FakeModule()
    with pytest.raises(Exited):
        run_module(
            module,
            lambda: result,
            failure="Failed to x",
            more_warnings=lambda r: finding_warnings(r["preflight"]["findings"], prefix="preflight "),
        )
    assert module.warnings == ["w1", "preflight pdb: m"]
    assert module.exit == {"changed": True, "preflight": result["preflight"]}


def test_run_module_lets_other_exceptions_through():
    # Only the collection's own error is a reported failure; anything else is a bug and keeps its traceback.
    with pytest.raises(KeyError):
        run_module(FakeModule(), lambda: {}["missing"], failure="Failed to x")
