"""The oldest ansible-core the collection declares is the one the compat stage tests on, and a supported AAP's.

Red Hat's Automation Platform life cycle: AAP 2.5's control plane runs ansible-core 2.16, and AAP 2.5 to 2.7 offer
"Ansible Core 2.16" minimal execution environments, so a collection for current AAP releases must run there.
"""

from __future__ import annotations

import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
OLDEST_SUPPORTED_BY_AAP = (2, 16)


def _requires_ansible() -> tuple[int, int]:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    found = re.fullmatch(r">=(\d+)\.(\d+)\.0", runtime["requires_ansible"])
    assert found, f"requires_ansible is not a plain lower bound: {runtime['requires_ansible']}"
    return int(found[1]), int(found[2])


def _compat_core() -> tuple[int, int]:
    text = (ROOT / "requirements" / "core216.txt").read_text()
    found = re.search(r"^ansible-core==(\d+)\.(\d+)\.\d+$", text, re.MULTILINE)
    assert found, "requirements/core216.txt pins no ansible-core"
    return int(found[1]), int(found[2])


def test_requires_ansible_is_the_oldest_core_a_supported_aap_runs():
    assert _requires_ansible() == OLDEST_SUPPORTED_BY_AAP


def test_the_compat_environment_tests_on_that_core():
    assert _compat_core() == _requires_ansible()
    pins = (ROOT / "requirements" / "constraints-core216.txt").read_text()
    assert re.search(r"^ansible-core==2\.16\.\d+$", pins, re.MULTILINE)
    assert "compat) run_compat" in (ROOT / "scripts" / "test").read_text()
