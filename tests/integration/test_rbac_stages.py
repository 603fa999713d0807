"""Least privilege, sufficient (issue 24): every stage of upgrade.yml for every component group, run with the
ServiceAccount bound to exactly the shipped rbac/ roles, goes as it goes with the administrator's token.

One twin per group (the settings of the fault matrix, tests/integration/fault_matrix_cases.py); its stages are
chained on it: canary, bake (the window elapsed on the twin's clock), rollback of the canary, canary again, promote
(OpenShift refuses a rollback, a downgrade, as with the administrator's token: canary, bake, rollback, promote).
After each, the twin's recorder shows no request refused (403): the preflight passed and nothing it did not
foresee was needed.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from gpufleet_twin.process import start_twin

from .accounts import refused, upgrade_account_env
from .conftest import kubectl
from .fault_matrix import Group, assert_outcome, get_json, write_matrix
from .fault_matrix_cases import GROUPS, NEW_MOFED
from .test_ofed_rolling_reload import mofed_ready, mofed_versions, pinned_secondary_network_app

pytestmark = pytest.mark.slow

CANARY = "gpu-worker-001"
GPU_NAMESPACE = "nvidia-gpu-operator"
GPU_PACKAGE = "gpu-operator-certified"
SRIOV_NAMESPACE = "openshift-sriov-network-operator"
BAKE = 49 * 3600  # past the flow's 48 h bake window
# Groups whose rollback the flow refuses by design (tests/integration/test_openshift.py), whatever the token.
ROLLBACK_REFUSED = {"openshift": "OpenShift does not support downgrading a cluster"}


def account_group(name: str, root: pathlib.Path) -> Group:
    """The fault matrix's setting of the group, on a twin of its own, run with the upgrade account's token."""
    setting = GROUPS[name]
    twin = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=root / "twin")
    write_matrix(root, setting["canary"], setting.get("production"))
    inputs = setting.get("inputs", {})
    inputs = inputs(twin, root) if callable(inputs) else dict(inputs)
    group = Group(
        name=name,
        twin=twin,
        workspace=root,
        inputs=inputs,
        environment=upgrade_account_env(twin),
    )
    twin.admin("POST", "budget", {"maxUnavailable": group.budget, "scope": "nvidia.com/gpu.present=true"})
    return group


def run_stage(group: Group, stage: str, **extra: Any) -> dict[str, Any]:
    """One stage with the account's token: it succeeds and the API refused nothing. Returns its ledger entry."""
    group.twin.admin("POST", "report/reset")
    run = group.run(stage, **extra)
    entry = assert_outcome(group, stage, run, None)
    assert "the credentials lack" not in run.output, run.output[-4000:]
    assert refused(group.twin) == {}, (stage, refused(group.twin), run.output[-4000:])
    return entry


# Every group's chain is make test-long's, to keep make test under 30 minutes on two cores (a chain is four to six
# stage runs as the account: 150 to 280 s of a worker in a clean-clone make test). make test runs the GPU Operator
# group's canary, bake, promote and rollback as the upgrade account in test_upgrade_flow (without this chain's
# rollback of the operator itself through OLM), checks that the permission preflight asks for every rule of every
# group (test_rbac_minimal) and runs the other groups' stages as the administrator (test_network_operator,
# test_firmware_idrac_flash, test_nic_firmware, test_openshift, test_upgrade_flow).
@pytest.mark.long
@pytest.mark.parametrize("name", ["gpu_operator", "network_operator", "firmware", "openshift"])
def test_every_stage_succeeds_with_exactly_the_shipped_roles(name: str, tmp_path: pathlib.Path) -> None:
    group = account_group(name, tmp_path)
    try:
        twin = group.twin
        if name == "network_operator":
            # A pod on the canary's RDMA network that the MOFED reload evicts (its PDB allows it): the account
            # evicts across namespaces (pods/eviction).
            mofed_ready(twin)
            pinned_secondary_network_app(twin, CANARY, min_available=0)
        canary = run_stage(group, "canary")
        assert (canary["group"], canary["outcome"]) == (name, "success"), canary
        if name == "network_operator":
            served = twin.report()["requests"]["by_verb_resource"]
            assert served.get("create pods/eviction", 0) > 0, served
            assert mofed_versions(twin)[CANARY] == NEW_MOFED

        twin.advance(BAKE)
        run_stage(group, "bake")

        if name in ROLLBACK_REFUSED:
            # Refused by the group's own rule before any change, as with the administrator's token.
            group.twin.admin("POST", "report/reset")
            refused_rollback = group.run("rollback")
            assert refused_rollback.returncode != 0
            assert ROLLBACK_REFUSED[name] in refused_rollback.output, refused_rollback.output[-4000:]
            assert refused(group.twin) == {}, refused(group.twin)
        else:
            # The canary's rollback: for the GPU Operator it takes the operator back under OLM (delete the newer
            # CSV and the Subscription, subscribe to the older one, approve its InstallPlan).
            rollback = run_stage(group, "rollback")
            assert rollback["outcome"] == "success", rollback
            if name == "gpu_operator":
                subscription = get_json(twin, "subscription", "-n", GPU_NAMESPACE, GPU_PACKAGE)
                assert subscription["status"]["installedCSV"] == f"{GPU_PACKAGE}.v24.9.0", subscription["status"]
            run_stage(group, "canary")
            twin.advance(BAKE)
        promote = run_stage(group, "promote")
        assert promote["outcome"] == "success", promote
    finally:
        assert group.twin.stop() == 0, group.twin.log_path.read_text()[-2000:]


# make test-long's, like the firmware and OpenShift chains above (test_sriov_operator runs the group in make test).
@pytest.mark.long
def test_sriov_canary_halts_on_416_and_moves_the_operator_on_417_with_the_shipped_role(tmp_path: pathlib.Path) -> None:
    """The twin runs OpenShift 4.16, whose index offers no newer SR-IOV build: the canary is refused by the group's
    own check before any change, with the account as with the administrator (its reads are all granted). On 4.17 the
    account's canary upgrades the operator through OLM (its writes granted by gpufleet-upgrade-sriov-operator), and
    its bake and promotion follow; its rollback is refused by design (OLM does not downgrade), as with the
    administrator's token."""
    group = account_group("sriov", tmp_path)
    try:
        twin = group.twin
        twin.admin("POST", "report/reset")
        as_account = group.run("canary", upgrade_wait_timeout=10)
        assert as_account.returncode != 0
        assert "update OpenShift to 4.17 first" in as_account.output, as_account.output[-4000:]
        assert "the credentials lack" not in as_account.output
        assert refused(group.twin) == {}, refused(group.twin)

        admin = Group(name=group.name, twin=twin, workspace=group.workspace, inputs=group.inputs)
        as_admin = admin.run("canary", upgrade_wait_timeout=10)
        assert as_admin.returncode != 0
        assert "update OpenShift to 4.17 first" in as_admin.output, as_admin.output[-4000:]

        # The same cluster once OpenShift 4.17 is installed (its ClusterVersion's newest Completed history entry, as
        # the CVO writes it; Red Hat's index then offers the 4.17 build): the canary really moves the operator
        # through OLM with the account - the Subscription's channel, the InstallPlan's approval, the new CSV - and
        # the API refuses nothing.
        version = get_json(twin, "clusterversion", "version")
        history = [dict(version["status"]["history"][0], version="4.17.3", state="Completed")]
        patch = {"status": {"history": history + version["status"]["history"], "desired": {"version": "4.17.3"}}}
        kubectl(
            twin, "patch", "clusterversion", "version", "--subresource=status", "--type=merge", "-p", json.dumps(patch)
        )
        canary = run_stage(group, "canary")
        assert canary["outcome"] == "success", canary
        subscription = get_json(twin, "subscription", "-n", SRIOV_NAMESPACE, "sriov-network-operator")
        assert subscription["status"]["installedCSV"].startswith("sriov-network-operator.v4.17.0"), subscription

        # The group's later stages with the same account: the bake, then the promotion (the operator is cluster-wide,
        # already at the target: every node checked again).
        twin.advance(BAKE)
        run_stage(group, "bake")
        promote = run_stage(group, "promote")
        assert promote["outcome"] == "success", promote
        # Its rollback is refused by the role before any change (OLM does not downgrade an operator), with the
        # account as with the administrator's token: nothing refused by the API.
        twin.admin("POST", "report/reset")
        rollback = group.run("rollback")
        assert rollback.returncode != 0
        assert "OLM does not downgrade an operator" in rollback.output, rollback.output[-4000:]
        assert refused(group.twin) == {}, refused(group.twin)
    finally:
        assert group.twin.stop() == 0, group.twin.log_path.read_text()[-2000:]
