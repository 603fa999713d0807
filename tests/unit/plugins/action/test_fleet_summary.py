"""The fleet_summary action plugin: its options are the module's documented ones; files are written only when
they would change, never in check mode; a summary file that cannot be read is named."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC

from ansible_collections.gpufleet.upgrade.plugins.action.fleet_summary import argument_spec, summarise
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.modules import fleet_summary as module_docs


def params(**given):
    values = {"run": "canary", "results": [], "summary_files": [], "summaries": [], "dest": None, "actor": "ops"}
    values.update(given)
    return values


def result(cluster, outcome="success"):
    return {"cluster": cluster, "outcome": outcome, "finished_at": "2026-11-25T10:00:00Z"}


def test_the_options_are_the_documented_ones_and_the_connection_options_are_accepted():
    documented = yaml.safe_load(module_docs.DOCUMENTATION)
    assert "kubernetes.core.k8s_auth_options" in documented["extends_documentation_fragment"]
    spec = argument_spec()
    assert set(AUTH_ARG_SPEC) <= set(spec)
    own = {name: option for name, option in spec.items() if name not in AUTH_ARG_SPEC}
    assert sorted(own) == sorted(documented["options"])
    for name, option in own.items():
        doc = documented["options"][name]
        assert (option["type"], option.get("default"), bool(option.get("required")), option.get("elements")) == (
            doc["type"],
            doc.get("default"),
            bool(doc.get("required")),
            doc.get("elements"),
        ), name


def test_without_dest_nothing_is_written_and_the_failed_clusters_are_named(tmp_path):
    done = summarise(params(results=[result("gpu-east"), result("gpu-west", "failed")]), check_mode=False)
    assert (done["changed"], done["files"], done["failed_clusters"]) == (False, {}, ["gpu-west"])
    assert list(tmp_path.iterdir()) == []


def test_check_mode_says_what_would_change_and_writes_nothing(tmp_path):
    dest = tmp_path / "fleet"
    checked = summarise(params(results=[result("gpu-east")], dest=str(dest)), check_mode=True)
    assert checked["changed"] is True
    assert set(checked["files"]) >= {"json", "markdown"}
    assert not dest.exists()


def test_files_are_written_once_and_a_rerun_that_differs_only_in_time_changes_nothing(tmp_path):
    dest = tmp_path / "fleet"
    first = summarise(params(results=[result("gpu-east")], dest=str(dest)), check_mode=False, generated_at="T1")
    assert first["changed"] is True
    written = json.loads((dest / "fleet-summary-canary.json").read_text())
    assert written["clusters_total"] == 1
    again = summarise(params(results=[result("gpu-east")], dest=str(dest)), check_mode=False, generated_at="T2")
    assert again["changed"] is False
    other = summarise(params(results=[result("gpu-east", "failed")], dest=str(dest)), check_mode=False)
    assert other["changed"] is True and other["failed_clusters"] == ["gpu-east"]


def test_a_slice_summary_that_cannot_be_read_is_named(tmp_path):
    broken = tmp_path / "fleet-summary-canary.json"
    broken.write_text("[1, 2]")
    with pytest.raises(InvalidInputError, match=re.escape(f"Cannot read the fleet summary {broken}")):
        summarise(params(summary_files=[str(broken)]), check_mode=False)
    with pytest.raises(InvalidInputError, match=r"Cannot read the fleet summary .*missing\.json"):
        summarise(params(summary_files=[str(tmp_path / "missing.json")]), check_mode=False)
