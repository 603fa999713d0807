"""The execution environment: ansible-builder (pinned in requirements) makes its build context from
execution-environment.yml and the collection tarball, and finds the collection's own dependencies by introspection.

No image is built here (no container runtime, no registry); what is checked is everything ansible-builder decides
before the container build: the Containerfile, the galaxy requirements, the collection that goes in, and the Python
and system packages the builder stage will install.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
VENV_BIN = pathlib.Path(sys.executable).parent
EE_FILE = ROOT / "execution-environment.yml"
# Import names of third-party libraries to the distributions that provide them.
DISTRIBUTIONS = {"yaml": "PyYAML", "ruamel": "ruamel.yaml", "kubernetes": "kubernetes", "jsonschema": "jsonschema"}
# Imports that come with another requirement (urllib3 with kubernetes) or with ansible-core itself.
PROVIDED = {"ansible", "ansible_collections", "urllib3"}

pytestmark = pytest.mark.slow


def _run(*command: str, cwd: pathlib.Path) -> str:
    completed = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300, check=False)
    assert completed.returncode == 0, f"{' '.join(command)}:\n{completed.stdout}\n{completed.stderr}"
    return completed.stdout


def _requirement_names(lines: list[str]) -> set[str]:
    requirements = (line.split("#")[0].strip() for line in lines)
    return {re.split(r"[<>=!~\[; ]", requirement)[0].lower() for requirement in requirements if requirement}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The collection tarball where execution-environment.yml expects it, beside a copy of that file."""
    workdir = tmp_path_factory.mktemp("ee")
    dist = workdir / "dist"
    _run(str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(dist), str(ROOT), cwd=ROOT)
    (tarball,) = dist.glob("gpufleet-upgrade-*.tar.gz")
    staged = workdir / ".build" / "ee" / "gpufleet-upgrade.tar.gz"
    staged.parent.mkdir(parents=True)
    shutil.move(tarball, staged)
    shutil.copy(EE_FILE, workdir / EE_FILE.name)
    return workdir


@pytest.fixture(scope="module")
def context(built):
    _run(
        str(VENV_BIN / "ansible-builder"),
        "create",
        "-f",
        EE_FILE.name,
        "-c",
        "context",
        "--output-filename",
        "Containerfile",
        cwd=built,
    )
    return built / "context"


def _galaxy() -> dict:
    return yaml.safe_load((ROOT / "galaxy.yml").read_text())


def _pinned(package: str) -> str:
    for line in (ROOT / "requirements" / "requirements.txt").read_text().splitlines():
        if line.startswith(f"{package}=="):
            return line.strip()
    raise AssertionError(f"{package} is not pinned in requirements/requirements.txt")


def test_definition_is_ansible_builder_v3():
    definition = yaml.safe_load(EE_FILE.read_text())
    assert definition["version"] == 3
    assert definition["dependencies"]["ansible_core"]["package_pip"] == _pinned("ansible-core")
    assert definition["dependencies"]["ansible_runner"]["package_pip"].startswith("ansible-runner==")


def test_create_writes_a_containerfile_that_installs_the_collection_and_introspects_it(context):
    containerfile = (context / "Containerfile").read_text()
    definition = yaml.safe_load(EE_FILE.read_text())
    assert f'ARG EE_BASE_IMAGE="{definition["images"]["base_image"]["name"]}"' in containerfile
    assert _pinned("ansible-core") in containerfile
    assert "ansible-galaxy collection install" in containerfile
    # The builder stage collects the installed collections' requirements (meta/execution-environment.yml) ...
    assert "introspect.py introspect" in containerfile
    # ... and the final stage installs them, and is an EE AWX accepts.
    assert "install-from-bindep" in containerfile
    assert "LABEL ansible-execution-environment=true" in containerfile


def test_context_carries_this_collection_and_its_dependencies(context):
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    named = {item["name"]: item for item in requirements["collections"]}
    (ours,) = [item for item in named.values() if item["name"].endswith("gpufleet-upgrade.tar.gz")]
    assert ours["type"] == "file"
    # The Containerfile copies _build to /build before installing: the requirement names the tarball there.
    in_context = context / "_build" / pathlib.Path(ours["name"]).relative_to("/build")
    assert in_context.is_file()
    for dependency, versions in _galaxy()["dependencies"].items():
        assert named[dependency]["version"] == versions, f"{dependency}: the EE and galaxy.yml disagree"
    with tarfile.open(in_context) as tarball:
        manifest = json.load(tarball.extractfile("MANIFEST.json"))["collection_info"]
        members = set(tarball.getnames())
    galaxy = _galaxy()
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == (
        galaxy["namespace"],
        galaxy["name"],
        galaxy["version"],
    )
    assert {"meta/execution-environment.yml", "meta/ee-requirements.txt", "meta/ee-bindep.txt"} <= members
    assert "playbooks/upgrade.yml" in members and "meta/runtime.yml" in members


def test_introspection_finds_what_the_modules_import(built, tmp_path):
    """The builder stage's introspection of the installed collection lists every library the plugins import."""
    collections = tmp_path / "collections"
    tarball = built / ".build" / "ee" / "gpufleet-upgrade.tar.gz"
    _run(
        str(VENV_BIN / "ansible-galaxy"),
        "collection",
        "install",
        "--offline",
        "--no-deps",
        "--force",  # pytest-ansible points the collection path at the checkout, where it is "installed" already
        "-p",
        str(collections),
        str(tarball),
        cwd=tmp_path,
    )
    pip_file, bindep_file = tmp_path / "requirements.txt", tmp_path / "bindep.txt"
    _run(
        str(VENV_BIN / "ansible-builder"),
        "introspect",
        str(collections),
        "--write-pip",
        str(pip_file),
        "--write-bindep",
        str(bindep_file),
        cwd=tmp_path,
    )
    python = pip_file.read_text().splitlines()
    system = bindep_file.read_text().splitlines()
    assert all("from collection gpufleet.upgrade" in line for line in python if line.strip())
    found = _requirement_names(python)
    # ansible-builder leaves out what ansible-core already brings (PyYAML among them).
    imported = {DISTRIBUTIONS.get(name, name).lower() for name in _third_party_imports()} - {"pyyaml"}
    assert imported <= found, f"imported but not in meta/ee-requirements.txt: {imported - found}"
    assert any(line.startswith("git ") for line in system), system


def _third_party_imports() -> set[str]:
    """Top-level names of the non-stdlib modules that plugins/ imports."""
    names = set()
    for path in (ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return {name for name in names - PROVIDED - {"__future__"} if name not in sys.stdlib_module_names}


def test_every_third_party_import_is_an_ee_requirement():
    declared = _requirement_names((ROOT / "meta" / "ee-requirements.txt").read_text().splitlines())
    imported = {DISTRIBUTIONS.get(name, name).lower() for name in _third_party_imports()}
    assert imported, "the scan found no third-party import at all"
    assert imported <= declared, f"imported by plugins/ but not in meta/ee-requirements.txt: {imported - declared}"
