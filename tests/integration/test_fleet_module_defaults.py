"""Every module of the collection is in the ``k8s`` action group and works under the fleet playbooks' module_defaults.

The playbooks give each cluster's connection (``host``, ``api_key``, ``validate_certs``, ``username``,
``password``...) to every module through one ``module_defaults`` block for ``group/gpufleet.upgrade.k8s``
(``playbooks/vars/fleet.yml``). ``firmware_idrac_flash`` talks to a BMC, not to the cluster: it must accept
those options, and none of them may reach the BMC (AnsibleModule lets an alias win over its option, so an
alias ``validate_certs`` of ``bmc_validate_certs`` would have turned the BMC's TLS check off).
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from gpufleet_twin.process import TwinProcess, start_twin

from .conftest import ROOT, PlaybookRun, run_playbook
from .test_firmware_idrac_flash import NEW_CX7, OLD_CX7, bmc_ca, bmc_credentials, bmc_view, cx7, write_image

PLAYBOOK = "tests/integration/playbooks/fleet_firmware_flash.yml"
NODE = "gpu-worker-001"


def test_every_module_is_in_the_k8s_action_group() -> None:
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    grouped = {entry for entry in runtime["action_groups"]["k8s"] if isinstance(entry, str)}
    modules = {path.stem for path in (ROOT / "plugins" / "modules").glob("*.py") if path.stem != "__init__"}
    assert modules - grouped == set()


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwinProcess]:
    started = start_twin(
        nodes=2, profile="openshift", time_scale=600, workdir=tmp_path_factory.mktemp("twin"), startup_timeout=300
    )
    yield started
    assert started.stop() == 0, started.log_path.read_text()[-2000:]


def module_args(output: str) -> dict[str, Any]:
    """The arguments the module was given, as ``-vvv`` prints its result (a registered result drops them)."""
    start = output.index('"module_args": ') + len('"module_args": ')
    args, _end = json.JSONDecoder().raw_decode(output[start:])
    return dict(args)


def flash_check(twin: TwinProcess, tmp_path: pathlib.Path, *, bmc_ca_path: str | None) -> tuple[PlaybookRun, Any]:
    path, sha256 = write_image(tmp_path, "ConnectX-7", NEW_CX7)
    result_file = tmp_path / "result.json"
    result_file.unlink(missing_ok=True)
    extra: dict[str, Any] = {
        # The cluster's connection, with every option whose name the BMC options once had as an alias.
        "gpufleet_k8s_auth": {
            "host": twin.api_url,
            "api_key": twin.token,
            "ca_cert": twin.companion["ca_file"],
            "validate_certs": False,
            "username": "cluster-admin",
            "password": "Cluster-Not-The-BMC-2026",
        },
        "bmc": bmc_credentials(twin, NODE),
        "flash_components": cx7(path, sha256)["components"],
        "flash_result_file": str(result_file),
    }
    if bmc_ca_path:
        extra["bmc_ca_path"] = bmc_ca_path
    # At -vvv the result printed carries the module's invocation (the arguments it was given).
    run = run_playbook(PLAYBOOK, twin=twin, extra_vars=extra, verbosity=3)
    return run, json.loads(result_file.read_text())


def test_firmware_flash_takes_the_cluster_options_and_keeps_them_from_the_bmc(
    twin: TwinProcess, tmp_path: pathlib.Path
) -> None:
    before = bmc_view(twin, NODE)
    run, result = flash_check(twin, tmp_path, bmc_ca_path=bmc_ca(twin))
    assert run.returncode == 0, run.output
    # module_defaults reached the module (it is in the group), and it accepted the cluster's options ...
    given = module_args(run.stdout)
    assert given["host"] == twin.api_url and given["validate_certs"] is False and given["username"] == "cluster-admin"
    # ... while the BMC was reached with its own user, over verified TLS.
    assert given["bmc_username"] == bmc_credentials(twin, NODE)["username"] and given["bmc_validate_certs"] is True
    assert result["changed"] is True and result["components"][0]["action"] == "flash"
    assert result["versions"]["before"]["NIC.Slot.1-1-1"] == "28.39.10.02"
    seen = bmc_view(twin, NODE)
    assert seen["updateRequests"] == before["updateRequests"] and seen["firmware"]["NIC.Slot.1-1-1"] == OLD_CX7


def test_the_clusters_validate_certs_false_does_not_turn_off_the_bmcs_tls_check(
    twin: TwinProcess, tmp_path: pathlib.Path
) -> None:
    """Without the BMC's CA the BMC's certificate (signed by the twin's own BMC CA) cannot be verified."""
    run, result = flash_check(twin, tmp_path, bmc_ca_path=None)
    assert run.returncode != 0
    assert "certificate" in result["msg"].lower() and "Failed to flash firmware through" in result["msg"]
