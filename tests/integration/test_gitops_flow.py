"""GitOps mode (docs/gitops.md) against the twin's Argo CD application controller and a local Git repository.

The ClusterPolicy's manifest lives in a bare repository on disk; the twin's Argo CD Application
syncs it automatically. The flow must change it only through commits (the twin's request log
shows no PATCH of the ClusterPolicy from the collection; the Argo CD controller writes it with
its own field manager), and still pick, label, watch, gate, bake, promote and roll back on the
cluster as without GitOps.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import time

import pytest
import yaml

from gpufleet_twin.process import start_twin

from .conftest import ROOT, PlaybookRun, kubectl, run_playbook
from .fault_matrix import Group, write_matrix
from .fault_matrix_cases import GROUPS, NEW_MOFED
from .test_ofed_rolling_reload import mofed_versions
from .test_upgrade_flow import drivers, file_ledger, git

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "gpu-version-matrix.yaml"
CANARY = "gpu-worker-001"
NEW_DRIVER = "570.124.06"
OLD_DRIVER = "550.127.05"
POLICY = "gpu-cluster-policy"
MANIFEST = "gpu-operator/clusterpolicy.yaml"
APP = "gpu-operator"
HEADER = "# The GPU Operator's ClusterPolicy. Argo CD applies this file; edit it here, never on the cluster.\n"
# Fields the API server or the operator owns: not part of a manifest a team keeps in Git.
SERVER_FIELDS = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "annotations")


def application(twin, app_name: str = APP) -> dict:
    return json.loads(kubectl(twin, "get", "applications.argoproj.io", "-n", "argocd", app_name, "-o", "json"))


def wait_for_application(twin, *, sync: str, health: str = "Healthy", revision: str = "", app_name: str = APP) -> dict:
    """Bounded: the twin's Argo CD polls every 180 simulated seconds (0.3 s of wall time at 600x)."""
    deadline = time.monotonic() + 120
    while True:
        app = application(twin, app_name)
        status = app.get("status") or {}
        if (
            (status.get("sync") or {}).get("status") == sync
            and (status.get("health") or {}).get("status") == health
            and (not revision or status["sync"].get("revision") == revision)
        ):
            return app
        assert time.monotonic() < deadline, f"Application never reached {sync}/{health}: {json.dumps(status)[:2000]}"
        time.sleep(1)


def seed_repository(
    twin,
    base: pathlib.Path,
    *,
    resource: str = "clusterpolicy",
    name: str = POLICY,
    manifest_path: str = MANIFEST,
    header: str = HEADER,
    app_name: str = APP,
    ignore_differences: tuple = (
        # docs/gitops.md: the CRD's default of the deprecated spec.cdi.default (NVIDIA/gpu-operator#2795).
        {"group": "nvidia.com", "kind": "ClusterPolicy", "jsonPointers": ["/spec/cdi/default"]},
    ),
) -> pathlib.Path:
    """A bare repository holding a live object (the ClusterPolicy by default) as a team would keep it, and the
    Application syncing its folder, Synced at the seed."""
    remote = base / f"{app_name}.git"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True, timeout=30)
    seed = base / f"{app_name}-seed"
    subprocess.run(["git", "clone", "-q", str(remote), str(seed)], check=True, capture_output=True, timeout=30)
    git(seed, "checkout", "-q", "-b", "main")
    live = json.loads(kubectl(twin, "get", resource, name, "-o", "json"))
    metadata = {key: value for key, value in live["metadata"].items() if key not in SERVER_FIELDS}
    manifest = {"apiVersion": live["apiVersion"], "kind": live["kind"], "metadata": metadata, "spec": live["spec"]}
    folder = manifest_path.split("/", 1)[0]
    (seed / folder).mkdir()
    (seed / manifest_path).write_text(header + "---\n" + yaml.safe_dump(manifest, sort_keys=False))
    git(seed, "add", ".")
    git(seed, "commit", "-q", "-m", f"The {live['kind']}")
    git(seed, "push", "-q", "origin", "main")
    app = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": app_name, "namespace": "argocd"},
        "spec": {
            "project": "default",
            "source": {"repoURL": f"file://{remote}", "targetRevision": "main", "path": folder},
            "destination": {"server": "https://kubernetes.default.svc"},
            "syncPolicy": {"automated": {"prune": False, "selfHeal": True}},
            "ignoreDifferences": list(ignore_differences),
        },
    }
    path = base / f"{app_name}-application.json"
    path.write_text(json.dumps(app))
    kubectl(twin, "apply", "-f", str(path))
    wait_for_application(twin, sync="Synced", revision=git(remote, "rev-parse", "main"), app_name=app_name)
    return remote


def settings(workspace: pathlib.Path, remote: pathlib.Path, **overrides) -> dict:
    found = {
        "repository": str(workspace / "clone"),
        "repository_url": f"file://{remote}",
        "branch": "main",
        "manifests": [{"kind": "ClusterPolicy", "name": POLICY, "path": MANIFEST}],
        "application": {"name": APP, "namespace": "argocd"},
        "author_name": "gpufleet.upgrade",
        "author_email": "gpufleet@example.invalid",
        "sync_timeout": 120,
        "sync_sleep": 1,
    }
    found.update(overrides)
    return found


def flow(twin, workspace: pathlib.Path, stage: str, gitops: dict, **extra) -> PlaybookRun:
    variables = {
        "stage": stage,
        "upgrade_matrix_file": str(workspace / "matrix" / "matrix.yaml"),
        "upgrade_report_dir": str(workspace / "reports"),
        "upgrade_wait_timeout": 900,
        "validate_wait_sleep": 0.5,
        "gpu_operator_wait_sleep": 1,
        "gpufleet_gitops": gitops,
    }
    variables.update(extra)
    return run_playbook("playbooks/upgrade.yml", twin=twin, extra_vars=variables, timeout=900)


def commits(remote: pathlib.Path) -> list:
    """(subject, Gpufleet-Stage trailer) of the remote's commits, oldest first, the seed left out."""
    log = git(remote, "log", "--reverse", "--format=%s%x00%(trailers:key=Gpufleet-Stage,valueonly)%x1e", "main")
    found = [tuple(part.strip() for part in record.split("\x00")) for record in log.split("\x1e") if record.strip()]
    return found[1:]


def commits_until(remote: pathlib.Path, revision: str) -> list:
    """The remote's commits up to ``revision`` (as ``commits`` lists them)."""
    count = int(git(remote, "rev-list", "--count", revision))
    return commits(remote)[: count - 1]


def policy_writes(twin) -> dict:
    """The collection's requests that wrote ClusterPolicies, and the Argo CD controller's writes of them."""
    report = twin.report()
    served = {
        key: count
        for key, count in report["requests"]["by_verb_resource"].items()
        if key.split(" ", 1)[0] in ("create", "update", "patch", "delete") and "clusterpolicies" in key
    }
    by_argocd = {
        key: count
        for key, count in (report.get("writes_by_field_manager") or {}).get("argocd-controller", {}).items()
        if "clusterpolicies" in key
    }
    return {"requests": served, "argocd": by_argocd}


def state_writes(twin) -> dict:
    """The requests that changed the cluster since the twin's report was reset (the permission preflight's
    SelfSubjectAccessReviews are questions, not writes)."""
    return {
        key: count
        for key, count in twin.report()["requests"]["by_verb_resource"].items()
        if key.split(" ", 1)[0] in ("create", "update", "patch", "delete") and "selfsubjectaccessreviews" not in key
    }


def live_driver(twin) -> str:
    return json.loads(kubectl(twin, "get", "clusterpolicy", POLICY, "-o", "json"))["spec"]["driver"]["version"]


@pytest.fixture
def gitops_twin(tmp_path):
    twin = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=tmp_path / "twin", argocd=True)
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


@pytest.fixture
def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "matrix").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "matrix" / "matrix.yaml")
    git(tmp_path / "matrix", "init", "-q")
    git(tmp_path / "matrix", "add", "matrix.yaml")
    git(tmp_path / "matrix", "commit", "-q", "-m", "matrix")
    return tmp_path


@pytest.mark.long
def test_gitops_refusal_bounded_wait_then_canary_bake_promote_through_git(gitops_twin, workspace):
    twin = gitops_twin
    remote = seed_repository(twin, workspace)
    gitops = settings(workspace, remote)
    seeded = git(remote, "rev-parse", "main")

    # The Application cannot read its repository: refused before anything is committed or written.
    twin.admin("POST", "faults", {"type": "argocd_repo_unreachable"})
    wait_for_application(twin, sync="Unknown")
    twin.admin("POST", "report/reset")
    refused = flow(twin, workspace, "canary", gitops)
    assert refused.returncode != 0, refused.output
    assert "Argo CD Application argocd/gpu-operator is not ready for a change (it is not synced" in refused.output
    assert "ComparisonError" in refused.output and "Nothing was committed" in refused.output
    assert git(remote, "rev-parse", "main") == seeded
    assert file_ledger(workspace)[-1]["outcome"] == "refused"
    assert {k: v for k, v in twin.report()["requests"]["by_verb_resource"].items() if k.startswith("patch ")} == {}
    twin.admin("DELETE", "faults")
    wait_for_application(twin, sync="Synced")

    # Argo CD stops syncing: the canary commits, waits a bounded time and halts naming the commit left in Git.
    twin.admin("POST", "faults", {"type": "argocd_sync_stalls", "application": APP})
    stalled = flow(twin, workspace, "canary", settings(workspace, remote, sync_timeout=20))
    assert stalled.returncode != 0, stalled.output
    waited_for = git(remote, "rev-parse", "main")
    assert waited_for != seeded
    assert f"did not sync revision {waited_for} within 20s" in stalled.output
    assert "The commit is left in place" in stalled.output and f"git revert {waited_for}" in stalled.output
    twin.admin("DELETE", "faults")
    wait_for_application(twin, sync="Synced", revision=waited_for)

    # The ledger's way on from a failed canary is a rollback: a revert commit of the change, synced.
    rollback = flow(twin, workspace, "rollback", gitops)
    assert rollback.returncode == 0, rollback.output
    assert git(remote, "log", "-1", "--format=%s", "main").startswith("Revert change gpu_operator")
    assert git(remote, "diff", seeded, "main", "--", MANIFEST) == ""
    assert live_driver(twin) == OLD_DRIVER and set(drivers(twin).values()) == {OLD_DRIVER}
    reverted = git(remote, "rev-parse", "main")

    # A new canary starts from the rolled-back node.
    twin.admin("POST", "report/reset")
    canary = flow(twin, workspace, "canary", gitops)
    assert canary.returncode == 0, canary.output
    assert "Stage canary: success" in canary.output
    assert live_driver(twin) == NEW_DRIVER
    found = drivers(twin)
    assert found[CANARY] == NEW_DRIVER
    assert {driver for name, driver in found.items() if name != CANARY} == {OLD_DRIVER}
    writes = policy_writes(twin)
    assert writes["requests"] == {}, writes  # the collection never wrote the ClusterPolicy
    assert writes["argocd"], writes  # Argo CD did, with its own field manager
    all_commits = commits(remote)
    canary_commits = all_commits[len(commits_until(remote, reverted)) :]
    assert canary_commits and all(stage == "canary" for _subject, stage in canary_commits), all_commits
    assert canary_commits[-1][0] == f"GPU Operator canary: driver {NEW_DRIVER} (canary)"
    manifest = git(remote, "show", f"main:{MANIFEST}")
    assert manifest.startswith(HEADER.strip()) and f"version: {NEW_DRIVER}" in manifest
    entry = file_ledger(workspace)[-1]
    assert [c["commit"] for c in entry["gitops_commits"]][-1] == git(remote, "rev-parse", "main")

    bake = flow(twin, workspace, "bake", gitops)
    assert bake.returncode == 0, bake.output

    twin.advance(49 * 3600)
    twin.admin("POST", "report/reset")
    promote = flow(twin, workspace, "promote", gitops, upgrade_git_commit=True)
    assert promote.returncode == 0, promote.output
    assert set(drivers(twin).values()) == {NEW_DRIVER}
    assert policy_writes(twin)["requests"] == {}
    # The manifest held the target since the canary: the promotion's one commit is the matrix's.
    assert commits(remote) == all_commits
    assert git(workspace / "matrix", "log", "-1", "--format=%s").startswith("Promote canary_testing")
    wait_for_application(twin, sync="Synced", revision=git(remote, "rev-parse", "main"))


@pytest.mark.long
def test_gitops_failed_bake_gate_rolls_back_with_a_revert_commit(gitops_twin, workspace):
    twin = gitops_twin
    remote = seed_repository(twin, workspace)
    gitops = settings(workspace, remote)
    original = git(remote, "show", f"main:{MANIFEST}")
    assert flow(twin, workspace, "canary", gitops).returncode == 0
    changed = commits(remote)
    assert changed and live_driver(twin) == NEW_DRIVER

    twin.admin("POST", "report/reset")
    twin.admin("POST", "faults", {"type": "ecc_errors", "node": CANARY, "uncorrected": 3, "xid": [48]})
    bake = flow(
        twin, workspace, "bake", gitops, upgrade_rollback_on_bake_failure=True, upgrade_bake_gates=["gpu_errors"]
    )
    assert bake.returncode != 0
    assert "the canary was rolled back to current_production" in bake.output
    after = commits(remote)
    assert after[: len(changed)] == changed
    (revert,) = after[len(changed) :]
    assert revert[0].startswith("Revert change gpu_operator") and revert[1] == "rollback"
    # The revert took every field the change wrote back: the manifest is the one the team had.
    assert git(remote, "show", f"main:{MANIFEST}") == original
    assert live_driver(twin) == OLD_DRIVER and drivers(twin)[CANARY] == OLD_DRIVER
    assert policy_writes(twin)["requests"] == {}
    wait_for_application(twin, sync="Synced", revision=git(remote, "rev-parse", "main"))


def test_a_group_not_written_in_git_runs_on_the_cluster_and_one_whose_objects_git_holds_is_refused(tmp_path):
    """GitOps mode changes only how the objects listed in gpufleet_gitops.manifests are written. A group none of whose
    objects is listed runs on the cluster as without GitOps (no Argo CD Application to check: this twin has none);
    a group that would write a listed object it cannot write in Git (the SR-IOV operator's Subscription, by kind and
    name; an SriovNetworkNodePolicy, by kind) is refused before any write, naming the object."""
    twin = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=tmp_path / "twin")
    try:
        gitops = settings(tmp_path, tmp_path / "platform.git")
        other_subscription = {"kind": "Subscription", "name": "gpu-operator-certified", "path": "gpu/sub.yaml"}
        gitops["manifests"].append(other_subscription)
        write_matrix(tmp_path, GROUPS["sriov"]["canary"])
        group = Group(name="sriov", twin=twin, workspace=tmp_path, inputs={"gpufleet_gitops": gitops})

        # Not listed (another operator's Subscription is): past the GitOps check to the group's own (OpenShift 4.16's
        # index offers no newer SR-IOV build), which refuses it before any change.
        ran = group.run("canary", upgrade_wait_timeout=10)
        assert ran.returncode != 0
        assert "update OpenShift to 4.17 first" in ran.output, ran.output[-4000:]
        assert "GitOps mode:" not in ran.output

        # Its Subscription listed: refused by the GitOps check, nothing written on the cluster.
        sriov_subscription = {"kind": "Subscription", "name": "sriov-network-operator", "path": "sriov/sub.yaml"}
        listed = dict(gitops, manifests=[*gitops["manifests"], sriov_subscription])
        twin.admin("POST", "report/reset")
        refused = group.run("canary", gpufleet_gitops=listed)
        assert refused.returncode != 0
        assert (
            "GitOps mode: the sriov_operator group writes Subscription/sriov-network-operator, which "
            "gpufleet_gitops.manifests lists" in " ".join(refused.output.split())
        ), refused.output[-4000:]
        assert file_ledger(tmp_path)[-1]["outcome"] == "refused"
        assert state_writes(twin) == {}, state_writes(twin)

        # The Network Operator group with an SR-IOV node policy listed, as Argo CD would apply it (its SR-IOV
        # pre-steps write those on the cluster; its NicClusterPolicy it writes in Git): refused the same way, before
        # its pre-steps or anything else.
        write_matrix(tmp_path, GROUPS["network_operator"]["canary"])
        node_policy = {"kind": "SriovNetworkNodePolicy", "name": "rdma-ib", "path": "network/sriov.yaml"}
        twin.admin("POST", "report/reset")
        refused = group.run("canary", gpufleet_gitops=dict(gitops, manifests=[*gitops["manifests"], node_policy]))
        assert refused.returncode != 0
        assert "the network_operator group writes SriovNetworkNodePolicy/rdma-ib" in " ".join(refused.output.split()), (
            refused.output[-4000:]
        )
        assert file_ledger(tmp_path)[-1]["outcome"] == "refused"
        assert state_writes(twin) == {}, state_writes(twin)
    finally:
        assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


NIC_POLICY = "nic-cluster-policy"
NIC_MANIFEST = "network/nicclusterpolicy.yaml"
NIC_APP = "network-operator"


def live_mofed(twin) -> str:
    return json.loads(kubectl(twin, "get", "nicclusterpolicy", NIC_POLICY, "-o", "json"))["spec"]["ofedDriver"][
        "version"
    ]


@pytest.mark.long
def test_the_network_operator_group_changes_the_nicclusterpolicy_through_git_and_rolls_back_by_revert(tmp_path):
    """The NicClusterPolicy listed in gpufleet_gitops.manifests: the MOFED canary commits the version to its
    manifest, waits for Argo CD to apply it, then reloads the canary node as without GitOps; the collection never
    writes the NicClusterPolicy itself. The rollback is a revert commit, synced, and every node back on the old
    MOFED."""
    twin = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=tmp_path / "twin", argocd=True)
    try:
        remote = seed_repository(
            twin,
            tmp_path,
            resource="nicclusterpolicy",
            name=NIC_POLICY,
            manifest_path=NIC_MANIFEST,
            header="# The Network Operator's NicClusterPolicy.\n",
            app_name=NIC_APP,
            ignore_differences=(),
        )
        seeded = git(remote, "rev-parse", "main")
        old = live_mofed(twin)
        gitops = settings(
            tmp_path,
            remote,
            manifests=[{"kind": "NicClusterPolicy", "name": NIC_POLICY, "path": NIC_MANIFEST}],
            application={"name": NIC_APP, "namespace": "argocd"},
        )
        write_matrix(tmp_path, GROUPS["network_operator"]["canary"])
        group = Group(name="network_operator", twin=twin, workspace=tmp_path, inputs={
            **GROUPS["network_operator"]["inputs"], "gpufleet_gitops": gitops})  # fmt: skip
        twin.admin("POST", "report/reset")

        canary = group.run("canary")
        assert canary.returncode == 0, canary.output[-4000:]
        assert live_mofed(twin) == NEW_MOFED != old
        subjects = [subject for subject, _stage in commits(remote)]
        assert subjects == [f"Network Operator canary: MOFED {NEW_MOFED} (canary)"], subjects
        assert f"version: {NEW_MOFED}" in git(remote, "show", f"main:{NIC_MANIFEST}")
        versions = mofed_versions(twin)
        assert versions[CANARY] == NEW_MOFED
        assert {version for node, version in versions.items() if node != CANARY} == {old}
        writes = {k: v for k, v in state_writes(twin).items() if "nicclusterpolicies" in k}
        assert writes == {}, writes  # the collection never wrote the NicClusterPolicy; Argo CD did
        entry = file_ledger(tmp_path)[-1]
        assert [c["commit"] for c in entry["gitops_commits"]] == [git(remote, "rev-parse", "main")]

        rollback = group.run("rollback")
        assert rollback.returncode == 0, rollback.output[-4000:]
        assert git(remote, "log", "-1", "--format=%s", "main").startswith("Revert change network_operator")
        assert git(remote, "diff", seeded, "main", "--", NIC_MANIFEST) == ""
        assert live_mofed(twin) == old and set(mofed_versions(twin).values()) == {old}
        assert {k: v for k, v in state_writes(twin).items() if "nicclusterpolicies" in k} == {}
    finally:
        assert twin.stop() == 0, twin.log_path.read_text()[-2000:]
