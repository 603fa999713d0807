"""The four passes for every module that writes and had none: check + diff, real, check, real (issue 22).

As ``test_clusterpolicy_upgrade.py::test_check_real_check_real``: each module runs through a real ansible-playbook
four times. (1) check mode with ``--diff`` reports what it would do and writes nothing (the twin's recorder sees no
write request; a file it would write is byte-identical); (2) the real run changes what it said; (3) check mode again
and (4) a real run again change nothing. A module that by design writes on every run (an Event, a ledger entry, a
Lease renewal, a snapshot folder) says so in its test, which asserts that honest contract instead: check mode still
writes nothing and reports the change the real run makes, and a real re-run is idempotent where the module claims
to be. The cases share one twin (module-scoped): each works on objects and files of its own.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess

from .conftest import PlaybookRun, kubectl, run_playbook
from .test_clusterpolicy_upgrade import get_json
from .test_firmware_idrac_flash import NEW_CX7, OLD_CX7, bmc_ca, bmc_credentials, bmc_view, write_image
from .test_matrix_promote_push import EXAMPLE
from .test_matrix_promote_push import PLAYBOOK as PROMOTE_PLAYBOOK
from .test_observability import pushgateway as pushgateway_fixture
from .test_openshift import PREVIOUS as OPENSHIFT_NOW
from .test_upgrade_flow import git, writes

pytestmark = pytest.mark.slow

ONCE = "tests/integration/playbooks/module_once.yml"
NAMESPACE = "nvidia-gpu-operator"
NODE = "gpu-worker-001"
ME = "four-passes@controller, run 1"
LEASE = "gpufleet-four-passes"
LEDGER = "gpufleet-four-passes-ledger"
BUILD_LABEL = "gpufleet.io/kernel-interlock"

pushgateway = pushgateway_fixture
Run = Callable[[bool, bool], tuple[PlaybookRun, dict[str, dict[str, Any]]]]
Changed = tuple[bool, bool, bool, bool]


@dataclass
class Pass:
    check: bool
    results: dict[str, dict[str, Any]]
    output: str
    writes: dict[str, int]
    before: Any
    after: Any


def four_passes(
    run: Run, *, twin: TwinProcess | None, observe: Callable[[], Any], changed: dict[str, Changed]
) -> list[Pass]:
    """Check + diff, real, check, real: each module's ``changed`` in each pass as given (``run`` may run several
    modules a pass, one playbook run for all), and what every module owes whatever it does: a check-mode pass writes
    nothing (no write request, ``observe()`` the same before and after), nor does a real pass in which no module
    reports a change. The passes are returned for each module's own assertions."""
    passes = []
    for number, (check, diff) in enumerate(((True, True), (False, False), (True, False), (False, False)), start=1):
        before = observe()
        if twin is not None:
            twin.admin("POST", "report/reset")
        playbook, results = run(check, diff)
        assert playbook.returncode == 0, f"pass {number}: {playbook.output[-3000:]}"
        done = Pass(check, results, playbook.output, writes(twin) if twin is not None else {}, before, observe())
        reported = {module: results.get(module, {}).get("changed") for module in changed}
        assert reported == {module: passes_[number - 1] for module, passes_ in changed.items()}, f"pass {number}"
        if check or not any(reported.values()):
            assert done.writes == {}, f"pass {number} wrote: {done.writes}"
            assert done.after == done.before, f"pass {number} changed what it should have left alone"
        passes.append(done)
    return passes


def once(twin: TwinProcess, tmp_path: pathlib.Path, modules: dict[str, dict[str, Any]]) -> Run:
    """A ``run(check, diff)`` of ``modules`` (name: options) through playbooks/module_once.yml, one playbook run."""

    def run(check: bool, diff: bool) -> tuple[PlaybookRun, dict[str, dict[str, Any]]]:
        out = tmp_path / f"once-{time.monotonic_ns()}.json"
        variables = {"once_modules": modules, "once_result_file": str(out)}
        playbook = run_playbook(ONCE, twin=twin, extra_vars=variables, check=check, diff=diff, timeout=300)
        return playbook, json.loads(out.read_text()) if out.exists() else {}

    return run


def files_under(folder: pathlib.Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes (empty when the folder does not exist)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def lease_spec(twin: TwinProcess) -> dict[str, Any]:
    found = kubectl(twin, "get", "lease", "-n", NAMESPACE, LEASE, "-o", "json", check=False)
    return json.loads(found)["spec"] if found else {}


# -- tests -----------------------------------------------------------------------------------------------------


def test_modules_that_write_on_every_run(shared_twin, pushgateway, tmp_path):
    """Six modules that write on every real run by design, run together (one playbook run a pass):

    - stage_lease ``state=present``: a renewal moves renewTime (how a killed run's Lease expires); a re-run keeps
      holder and acquireTime.
    - upgrade_event: an Event records a moment; every real run posts the milestone again.
    - upgrade_ledger ``action=record``: the stage's reports, named by when they were recorded; a re-run of the same
      entry id writes new reports and leaves the ledger (ConfigMap and file) as first recorded, one entry an id.
    - cluster_snapshot: the cluster at one moment (its info file says when); every run writes the folder afresh.
    - upgrade_metrics: a push replaces the stage's group on the Pushgateway (its push time moves).
    - gpu_kernel_interlock: the GPU and MOFED drivers' build pods on the driver toolkit of the RHCOS the cluster runs
      (4.16's, which the twin builds in simulated minutes); each is deleted once its outcome is recorded, so every
      real run creates them again.

    So every pass reports changed; the check passes write nothing and say what the real run does."""
    message = f"Four passes {time.monotonic_ns()}: canary started on {NODE}"
    cluster = f"four-passes-{time.monotonic_ns()}"  # its own group on the Pushgateway
    ledger, reports, folder = tmp_path / "ledger.json", tmp_path / "reports", tmp_path / "snapshot"
    entry = {"id": "canary-four-passes", "stage": "canary", "outcome": "success", "decision": "proceed"}
    modules = {
        "stage_lease": {"namespace": NAMESPACE, "name": LEASE, "holder": ME, "duration": 300, "state": "present"},
        "upgrade_event": {"milestone": "canary_started", "group": "gpu_operator", "nodes": [NODE],
                          "event_message": message},
        "upgrade_ledger": {"action": "record", "namespace": NAMESPACE, "configmap_name": LEDGER,
                           "ledger_file": str(ledger), "report_dir": str(reports), "entry": entry},
        "cluster_snapshot": {"directory": str(folder)},
        "upgrade_metrics": {"url": pushgateway.url, "cluster": cluster, "stage": "canary", "entry": entry},
        "gpu_kernel_interlock": {"target": OPENSHIFT_NOW, "wait_timeout": 300, "wait_sleep": 0.5},
    }  # fmt: skip

    def observe() -> dict[str, Any]:
        events = get_json(shared_twin, "events", "-A")["items"]
        found = kubectl(shared_twin, "get", "configmap", "-n", NAMESPACE, LEDGER, "-o", "json", check=False)
        return {
            "lease": lease_spec(shared_twin),
            "events": sorted(f"{e['involvedObject']['kind']}/{e['involvedObject']['name']}" for e in events
                             if e.get("message") == message),
            "configmap": json.loads(found).get("data", {}) if found else {},
            "ledger": ledger.read_bytes() if ledger.exists() else b"",
            "reports": files_under(reports),
            "snapshot": files_under(folder),
            "pushed": [g for g in pushgateway.metrics() if g["labels"].get("cluster") == cluster],
            "build_pods": [p["metadata"]["name"] for p in get_json(shared_twin, "pods", "-A", "-l",
                                                                   BUILD_LABEL)["items"]],
        }  # fmt: skip

    passes = four_passes(
        once(shared_twin, tmp_path, modules),
        twin=shared_twin,
        observe=observe,
        changed=dict.fromkeys(modules, (True,) * 4),
    )
    first, real, _check, again = passes
    assert first.before == {
        "lease": {},
        "events": [],
        "configmap": {},
        "ledger": b"",
        "reports": {},
        "snapshot": {},
        "pushed": [],
        "build_pods": [],
    }
    assert first.results["stage_lease"]["diff"] == {"before": {"holder": ""}, "after": {"holder": ME}}
    assert '+    "holder": "four-passes@controller, run 1"' in first.output  # ansible-playbook --diff shows it
    assert [p.results["stage_lease"]["decision"]["action"] for p in passes] == ["create", "create", "renew", "renew"]
    assert real.after["lease"]["holderIdentity"] == ME == again.after["lease"]["holderIdentity"]
    assert again.after["lease"]["acquireTime"] == real.after["lease"]["acquireTime"]
    assert again.after["lease"]["renewTime"] > real.after["lease"]["renewTime"]

    would = sorted(f"{e['kind']}/{e['name']}" for e in first.results["upgrade_event"]["events"])
    assert would == ["ClusterPolicy/gpu-cluster-policy", f"Node/{NODE}"]
    assert real.after["events"] == would and again.after["events"] == sorted(would * 2)

    assert pathlib.Path(first.results["upgrade_ledger"]["report_path"]).parent == reports
    assert [e["id"] for e in json.loads(again.after["ledger"])["entries"]] == [entry["id"]]
    assert again.after["configmap"] == real.after["configmap"] and again.after["ledger"] == real.after["ledger"]
    assert "".join(again.after["configmap"].values()).count(entry["id"]) == 1
    assert len(again.after["reports"]) == 2 * len(real.after["reports"]) > 0

    assert (
        sorted(real.after["snapshot"]) == first.results["cluster_snapshot"]["files"] == sorted(again.after["snapshot"])
    )
    assert NODE in {
        node["metadata"]["name"] for node in json.loads(again.after["snapshot"]["api_v1_nodes.json"])["items"]
    }

    pushed = [p.results["upgrade_metrics"]["pushed"] for p in passes]
    assert pushed == [False, True, False, True] and len(again.after["pushed"]) == 1
    assert again.after["pushed"][0]["labels"] == {
        "job": "gpufleet_upgrade",
        "cluster": cluster,
        "stage": "canary",
    }
    assert again.after["pushed"] != real.after["pushed"]  # the push time moved

    diff = first.results["gpu_kernel_interlock"]["diff"]
    assert diff["before"] == {"pods": {}} and len(diff["after"]["pods"]) == 2
    assert {pod["metadata"]["labels"][BUILD_LABEL] for pod in diff["after"]["pods"].values()} == {
        "gpu-driver",
        "mofed-driver",
    }
    assert "gpufleet-build-gpu-driver-" in first.output  # ansible-playbook --diff shows it
    assert first.results["gpu_kernel_interlock"]["builds"] == []
    for done in (real, again):
        interlock = done.results["gpu_kernel_interlock"]
        assert [b["succeeded"] for b in interlock["builds"]] == [True, True], interlock["findings"]
        assert sorted(b["name"] for b in interlock["builds"]) == sorted(diff["after"]["pods"])
        assert done.after["build_pods"] == []  # each pod deleted once its outcome was recorded

    # The real re-run wrote exactly this: the renewal, the two Events, the ledger entry, the two build pods.
    assert again.writes == {"update leases.coordination.k8s.io": 1, "create events": 2, "update configmaps": 1,
                            "create pods": 2, "delete pods": 2}  # fmt: skip


Case = tuple[dict[str, dict[str, Any]], Callable[[], dict[str, Any]], Callable[[list[Pass]], None]]


def files_case(tmp_path: pathlib.Path) -> Case:
    """gitops_change commits a field of a manifest and pushes it to the bare repository (the remote Argo CD reads);
    rehearsal ``action=calibrate`` annotates the snapshot's GPU node with its (jittered) driver step, and
    ``action=report`` writes the prediction's Markdown and HTML. Each changes once: the check pass commits, pushes
    and writes nothing, yet says what the real pass changes (the manifest's diff); the re-runs find the commit
    pushed, the node annotated and the reports written with the same text."""
    remote, clone = tmp_path / "platform.git", tmp_path / "platform"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True, timeout=30)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True, timeout=30)
    git(clone, "checkout", "-q", "-b", "main")
    manifest = (
        "# kept by the platform team\napiVersion: nvidia.com/v1\nkind: ClusterPolicy\n"
        "metadata:\n  name: gpu-cluster-policy\nspec:\n  driver:\n    version: 550.127.08  # the fleet's\n"
    )
    (clone / "clusterpolicy.yaml").write_text(manifest)
    git(clone, "add", ".")
    git(clone, "commit", "-q", "-m", "The ClusterPolicy")
    git(clone, "push", "-q", "origin", "main")
    snapshot, reports, ledger = tmp_path / "snapshot", tmp_path / "reports", tmp_path / "ledger.json"
    snapshot.mkdir()
    node = {"metadata": {"name": NODE, "labels": {"nvidia.com/gpu.present": "true"}}, "status": {"conditions": []}}
    (snapshot / "api_v1_nodes.json").write_text(json.dumps({"kind": "NodeList", "items": [node]}))
    entry = {
        "id": "canary-1",
        "stage": "canary",
        "outcome": "success",
        "message": "1 node upgraded",
        "started_at": "2026-11-27T10:00:00Z",
        "recorded_at": "2026-11-27T10:20:00Z",
        "duration_seconds": 1200,
    }
    ledger.write_text(json.dumps({"entries": [entry]}))
    modules = {
        "gitops_change": {"repository": str(clone), "branch": "main",
                          "manifests": [{"kind": "ClusterPolicy", "name": "gpu-cluster-policy",
                                         "path": "clusterpolicy.yaml"}],
                          "changes": [{"kind": "ClusterPolicy", "name": "gpu-cluster-policy",
                                       "patch": {"spec": {"driver": {"version": "570.124.06"}}}}],
                          "change_id": "four-passes", "stage": "canary"},
        "rehearsal_calibrate": {"action": "calibrate", "snapshot_dir": str(snapshot), "jitter": 0.2, "seed": 7},
        "rehearsal": {"action": "report", "snapshot_dir": str(snapshot), "ledger_file": str(ledger),
                      "report_dir": str(reports)},
    }  # fmt: skip

    def observe() -> dict[str, Any]:
        return {
            "pushed": git(remote, "rev-parse", "main").strip(),
            "head": git(clone, "rev-parse", "HEAD").strip(),
            "status": git(clone, "status", "--porcelain"),
            "manifest": (clone / "clusterpolicy.yaml").read_text(),
            "snapshot": files_under(snapshot),
            "reports": files_under(reports),
        }

    def assert_passes(passes: list[Pass]) -> None:
        first, real, check, again = passes
        (diff,) = first.results["gitops_change"]["diff"]
        assert diff["before"] == manifest and diff["after"] == real.after["manifest"]
        assert (
            "version: 570.124.06  # the fleet's" in real.after["manifest"]
            and "# kept by the platform team" in diff["after"]
        )
        assert "+    version: 570.124.06" in first.output  # ansible-playbook --diff shows it
        assert real.after["pushed"] == real.after["head"] != real.before["head"] and real.after["status"] == ""
        assert real.results["gitops_change"]["pushed"] is True
        assert "Gpufleet-Change: four-passes" in git(remote, "log", "-1", "--format=%B", "main")
        mine = ("pushed", "head", "status", "manifest", "snapshot", "reports")
        assert {key: again.after[key] for key in mine} == {key: real.after[key] for key in mine}
        assert check.results["gitops_change"]["diff"] == []

        calibrated = json.loads(real.after["snapshot"]["api_v1_nodes.json"])["items"][0]["metadata"]["annotations"]
        assert list(calibrated) == ["twin.gpufleet.io/driver-load-seconds"]
        assert [p.results["rehearsal_calibrate"]["annotated_nodes"] for p in passes] == [1, 1, 1, 1]
        written = sorted(real.after["reports"])
        assert written == ["rehearsal-canary.html", "rehearsal-canary.md"]
        assert [pathlib.Path(path).name for path in first.results["rehearsal"]["reports"]] == [
            "rehearsal-canary.md",
            "rehearsal-canary.html",
        ]
        assert b"1 node upgraded" in real.after["reports"]["rehearsal-canary.md"]

    return modules, observe, assert_passes


def bmc_case(twin: TwinProcess, tmp_path: pathlib.Path) -> Case:
    """One node, one BMC: nic_firmware_rollout flashes the node's ConnectX-7 once (cordon, evict, flash, reboot,
    verify, uncordon), then finds it at the target; validation_gate runs the gpu_errors gate's Job on it after the
    flash, every real run (the Job is deleted once judged, so each run creates one again: changed each pass). Check
    mode sends the BMC and the API no write (the twin's Redfish recorder and its API recorder) and shows, with
    --diff, the versions the flash brings and the gate's Job."""
    node = "gpu-worker-003"  # not the node of the other tests
    image, sha256 = write_image(tmp_path, "ConnectX-7", NEW_CX7)
    bmc = bmc_credentials(twin, node)
    namespace = twin.companion["published"]["gpu_operator_namespace"]
    modules = {
        "nic_firmware_rollout": {
            "nodes": [node], "rollout_name": "four-passes",
            "components": [{"name": "firmware_cx7", "match": "ConnectX-7", "version": NEW_CX7, "image_path": image,
                            "sha256": sha256}],
            "bmcs": [{"node": node, "address": bmc["address"], "username": bmc["username"],
                      "password": bmc["password"]}],
            "bmc_ca_path": bmc_ca(twin), "bmc_timeout": 10, "drain_timeout": 120, "job_timeout": 600,
            "reboot_timeout": 600, "node_ready_timeout": 600, "wait_sleep": 0.2,
        },
        "validation_gate": {"node": node, "gates": ["gpu_errors"], "namespace": namespace, "wait_timeout": 300,
                            "wait_sleep": 0.5},
    }  # fmt: skip

    def observe() -> dict[str, Any]:
        seen = bmc_view(twin, node)
        found = get_json(twin, "node", node)
        jobs = get_json(twin, "jobs", "-n", namespace)["items"]
        return {
            "firmware": seen["firmware"],
            "bmc_jobs": sorted(seen["jobs"]),
            "bmc_writes": seen["writeRequests"],
            "power": seen["powerState"],
            "unschedulable": bool(found["spec"].get("unschedulable")),
            "annotations": {k: v for k, v in found["metadata"].get("annotations", {}).items() if "four-passes" in k},
            "gate_jobs": [job["metadata"]["name"] for job in jobs if job["metadata"]["name"].startswith("gpufleet-")],
        }

    def assert_passes(passes: list[Pass]) -> None:
        first, real, check, again = passes
        assert first.before["firmware"]["NIC.Slot.1-1-1"] == OLD_CX7 and first.before["bmc_writes"] == {}
        diff = first.results["nic_firmware_rollout"]["diff"]
        assert diff["before"][node]["bmc"] == bmc["address"] == diff["after"][node]["bmc"]
        # The BMC's inventory writes the version its own way (28.39.10.02); the plan's after is the target as given.
        assert {version.replace(".", "") for version in diff["before"][node]["firmware"].values()} == {
            OLD_CX7.replace(".", "")
        }
        assert set(diff["after"][node]["firmware"].values()) == {NEW_CX7}
        assert diff["after"][node]["firmware"].keys() == diff["before"][node]["firmware"].keys()
        assert f'"NIC.Slot.1-1-1": "{NEW_CX7}"' in first.output  # ansible-playbook --diff shows it
        assert real.results["nic_firmware_rollout"]["nodes_done"] == [node]
        assert set(real.after["firmware"].values()) >= {NEW_CX7} and real.after["firmware"]["NIC.Slot.1-1-1"] == NEW_CX7
        assert real.after["bmc_writes"] != {} and not real.after["unschedulable"]
        assert real.after["annotations"]["gpufleet.io/rollout-four-passes-state"] == "done"
        assert (
            check.results["nic_firmware_rollout"]["at_target"] == [node]
            and again.results["nic_firmware_rollout"]["targets"] == []
        )
        # The re-runs sent the BMC nothing that writes, and the API only the gate's Job (created, then deleted).
        assert (
            again.after["bmc_writes"] == real.after["bmc_writes"] and again.after["firmware"] == real.after["firmware"]
        )
        assert again.after["annotations"] == real.after["annotations"]
        assert again.writes == {"create jobs.batch": 1, "delete jobs.batch": 1}

        (job,) = first.results["validation_gate"]["diff"]["after"]["jobs"].values()
        assert first.results["validation_gate"]["diff"]["before"] == {"jobs": {}}
        assert job["kind"] == "Job" and job["metadata"]["labels"]["gpufleet.io/gate"] == "gpu-errors"
        assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": node}
        assert first.results["validation_gate"]["checked"] is False
        for done in (real, again):
            gate = done.results["validation_gate"]
            assert gate["checked"] is True and gate["passed"] is True, gate["summary"]
            assert done.after["gate_jobs"] == [] and done.writes.get("create jobs.batch") == 1

    return modules, observe, assert_passes


def test_gitops_change_rehearsal_nic_firmware_rollout_and_validation_gate(shared_twin, tmp_path):
    """Four modules (five tasks) that write, run together (one playbook run a pass, to keep the suite's time):
    gitops_change, rehearsal (calibrate, report) and nic_firmware_rollout change once, validation_gate on every
    real run. The check passes write nothing: no API or BMC write request, no file, no commit, no push."""
    cases = [files_case(tmp_path), bmc_case(shared_twin, tmp_path)]
    modules = {name: options for case in cases for name, options in case[0].items()}

    def observe() -> dict[str, Any]:
        return {key: value for case in cases for key, value in case[1]().items()}

    changed = dict.fromkeys(modules, (True, True, False, False))
    changed["validation_gate"] = (True,) * 4
    passes = four_passes(once(shared_twin, tmp_path, modules), twin=shared_twin, observe=observe, changed=changed)
    for case in cases:
        case[2](passes)


def test_stage_lease_release_and_clusterversion_update_change_once(shared_twin, tmp_path):
    """Two modules that change once, then find nothing to do, run together (one playbook run a pass):
    stage_lease ``state=absent`` gives up the Lease (the one this file's first test took, taken here if this test
    runs alone); clusterversion_update asks for the next release and waits until the control plane has it. Last on
    the shared twin: once the control plane is updated, the twin's unpaused pools roll their nodes."""
    lease = {"namespace": NAMESPACE, "name": LEASE, "holder": ME, "duration": 300}
    if lease_spec(shared_twin).get("holderIdentity") != ME:
        assert (
            once(shared_twin, tmp_path, {"stage_lease": {**lease, "state": "present"}})(False, False)[0].returncode == 0
        )
    modules = {
        "stage_lease": {**lease, "state": "absent"},
        "clusterversion_update": {"version": "4.17.3", "channel": "stable-4.17", "wait_sleep": 1, "wait_timeout": 300},
    }

    def observe() -> dict[str, Any]:
        return {
            "lease": lease_spec(shared_twin),
            "clusterversion": get_json(shared_twin, "clusterversion", "version")["spec"],
        }

    passes = four_passes(
        once(shared_twin, tmp_path, modules),
        twin=shared_twin,
        observe=observe,
        changed=dict.fromkeys(modules, (True, True, False, False)),
    )
    first, real, _check, again = passes
    assert first.results["stage_lease"]["diff"] == {"before": {"holder": ME}, "after": {"holder": ""}}
    assert (
        real.after["lease"]["holderIdentity"] == ""
        and real.after["lease"]["acquireTime"] == real.before["lease"]["acquireTime"]
    )

    diff = first.results["clusterversion_update"]["diff"]
    assert diff["before"]["spec"]["desiredUpdate"] != diff["after"]["spec"]["desiredUpdate"]
    assert diff["after"]["spec"]["desiredUpdate"]["version"] == "4.17.3"
    assert '"version": "4.17.3"' in first.output  # ansible-playbook --diff shows it
    assert real.after["clusterversion"]["desiredUpdate"]["version"] == "4.17.3"
    assert real.results["clusterversion_update"]["cluster_version"]["current"] == "4.17.3"
    assert again.results["clusterversion_update"]["cluster_version"]["current"] == "4.17.3"


def test_matrix_promote_four_passes(tmp_path):
    """The matrix file: a promotion is written once; check and real re-runs leave it byte-identical."""
    matrix = tmp_path / "matrix.yaml"
    shutil.copy(EXAMPLE, matrix)
    result_file = tmp_path / "promote.json"

    def run(check: bool, diff: bool) -> tuple[PlaybookRun, dict[str, dict[str, Any]]]:
        variables = {
            "promote": {"path": str(matrix), "promoted_on": "2026-11-25"},
            "promote_result_file": str(result_file),
            "k8s_auth": {"host": "https://127.0.0.1:1", "validate_certs": True},
        }
        playbook = run_playbook(PROMOTE_PLAYBOOK, twin=None, extra_vars=variables, check=check, diff=diff, timeout=120)
        return playbook, {"matrix_promote": json.loads(result_file.read_text())}

    passes = four_passes(
        run, twin=None, observe=matrix.read_bytes, changed={"matrix_promote": (True, True, False, False)}
    )
    diff = passes[0].results["matrix_promote"]["diff"]
    assert diff["before"] == EXAMPLE.read_text() and diff["after"] == passes[1].after.decode()
    assert passes[1].after != passes[1].before
