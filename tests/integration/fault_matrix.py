"""The fault matrix (issue 16): one real ``playbooks/upgrade.yml -e stage=...`` run with one injected fault, then
the invariants every run must keep, read from the twin's recorder and the cluster.

The invariants are plain functions applied to every case (tests/integration/test_fault_matrix_*.py run one case
per fault kind: the SR-IOV case in ``make test``, the others, marked ``long``, in ``make test-long``; bench/soak.py
runs the larger matrix for ``make soak``):

1. ``assert_outcome``: the stage succeeded, or it halted naming the node, the step and the cause (in its
   report and its ledger entry).
2. ``assert_within_budget``: never more GPU nodes unavailable at once than the budget, and 0 violations in the
   twin's recorder.
3. ``assert_marks_explained``: no node is cordoned, labelled or annotated by this collection (``gpufleet.io/*``
   keys, the canary label, ``spec.unschedulable``) without a ledger record of this run naming it and why.
4. ``recover``: with the fault cleared first, the report's "Next" followed exactly as printed returns the
   cluster to ``current_production`` (``playbooks/audit.yml``: no drift, no mark of ours left).
5. ``assert_matrix_agrees``: after a successful stage or a rollback, the matrix file and the cluster agree.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import re
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpufleet_twin.process import TwinProcess

from .conftest import ROOT, PlaybookRun, kubectl, run_playbook

EXAMPLE = ROOT / "examples" / "gpu-version-matrix.yaml"
NAMESPACE = "nvidia-gpu-operator"
LEDGER = "gpufleet-upgrade-ledger"
LEASE = "gpufleet-upgrade"
GPU_NODES = "nvidia.com/gpu.present=true"
CANARY_LABEL = "gpu-canary"
OURS = "gpufleet.io/"

Marks = dict[str, set[str]]


# -- one group's setting: the matrix, the inputs of its role ------------------------------------------------------
def write_matrix(
    workspace: pathlib.Path, canary_testing: dict[str, str] | None, production: dict[str, str] | None = None
) -> pathlib.Path:
    """The example matrix, its canary_testing replaced by ``canary_testing`` (None: the example's own) and the
    versions in ``production`` set in current_production."""
    text = EXAMPLE.read_text()
    for key, value in (production or {}).items():
        text = re.sub(rf'(\n      {key}: )"[^"]*"', rf'\1"{value}"', text, count=1)
    if canary_testing is not None:
        start = text.index("    canary_testing:")
        end = text.index("    rollback:")
        body = "".join(f'      {key}: "{value}"\n' for key, value in canary_testing.items())
        text = text[:start] + "    canary_testing:\n" + body + "\n" + text[end:]
    path = workspace / "matrix.yaml"
    path.write_text(text)
    return path


@dataclass
class Group:
    """One component group on a twin of its own, its cases run one after the other on it."""

    name: str
    twin: TwinProcess
    workspace: pathlib.Path
    inputs: dict[str, Any] = field(default_factory=dict)
    budget: int = 1
    timeout: float = 900  # real seconds one ansible-playbook run may take (bench/soak.py's 200-node twins: more)
    # Credentials instead of the twin's kubeconfig (K8S_AUTH_HOST, K8S_AUTH_API_KEY...: an account's token).
    environment: dict[str, str] | None = None
    # What every canary of this group is refused with on the twin, whatever the fault (the twin cannot offer what
    # the canary needs): its Next ("fix what failed, then run the stage again") is checked, not run.
    refused_by_design: str = ""

    def variables(self, stage: str, **extra: Any) -> dict[str, Any]:
        """The extra vars of a run of ``stage``: the group's matrix, reports, budget and inputs."""
        return {
            "stage": stage,
            "upgrade_matrix_file": str(self.workspace / "matrix.yaml"),
            "upgrade_report_dir": str(self.workspace / "reports"),
            # Real seconds (the modules' waits are timed on this machine's clock): a third of the run's own limit,
            # so a wait that can never end (a drain a PDB blocks) halts the stage before the harness kills the run.
            "upgrade_wait_timeout": round(self.timeout / 3),
            "upgrade_max_unavailable": self.budget,
            "validate_wait_sleep": 0.5,
            "gpu_operator_wait_sleep": 1,
            # A role's task retried through a burst of 429/5xx waits 0-1 s between tries, not the 2-5 s default:
            # the faults are injected bursts, and the retries' count, not their pacing, is what a case proves.
            "gpufleet_retry_delay_min": 0,
            "gpufleet_retry_delay_max": 1,
            **self.inputs,
            **extra,
        }

    def run(self, stage: str, **extra: Any) -> PlaybookRun:
        variables = self.variables(stage, **extra)
        run = run_playbook(
            "playbooks/upgrade.yml",
            twin=None if self.environment else self.twin,
            environment=self.environment,
            extra_vars=variables,
            timeout=self.timeout,
        )
        # Every run's output, kept in the workspace: which task a fault broke is read there (bench/soak.py's rows).
        with (self.workspace / "runs.log").open("a") as log:
            log.write(f"=== stage={stage} {extra or ''} exit {run.returncode}\n{run.output}\n")
        return run


# -- reading the cluster ----------------------------------------------------------------------------------------
def get_json(twin: TwinProcess, *args: str) -> Any:
    return json.loads(kubectl(twin, "get", *args, "-o", "json"))


def gpu_nodes(twin: TwinProcess) -> dict[str, dict[str, Any]]:
    return {node["metadata"]["name"]: node for node in get_json(twin, "nodes", "-l", GPU_NODES)["items"]}


def marks(twin: TwinProcess) -> Marks:
    """Per GPU node, what this collection may have put on it: ``cordoned``, ``label <key>``, ``annotation <key>``."""
    found: Marks = {}
    for name, node in gpu_nodes(twin).items():
        meta = node["metadata"]
        keys = {f"label {key}" for key in meta.get("labels", {}) if key.startswith(OURS) or key == CANARY_LABEL}
        keys |= {f"annotation {key}" for key in meta.get("annotations", {}) if key.startswith(OURS)}
        if node["spec"].get("unschedulable"):
            keys.add("cordoned")
        if keys:
            found[name] = keys
    return found


def cluster_ledger(twin: TwinProcess) -> list[dict[str, Any]]:
    found = kubectl(twin, "get", "configmap", "-n", NAMESPACE, LEDGER, "-o", "json", check=False)
    if not found:
        return []
    text = json.loads(found)["data"]["ledger.jsonl"]
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def last_report(workspace: pathlib.Path, stage: str) -> str:
    reports = sorted((workspace / "reports").glob(f"upgrade-{stage}-*.md"), key=lambda p: p.stat().st_mtime)
    assert reports, f"no {stage} report in {workspace / 'reports'}"
    return reports[-1].read_text()


def max_unavailable_at_once(report: dict[str, Any]) -> int:
    """The most GPU nodes the recorder saw unavailable at the same moment."""
    edges = []
    for intervals in report["nodes"]["unavailable_intervals"].values():
        for interval in intervals:
            edges.append((interval["from"], 1))
            edges.append((interval["to"] or "9999", -1))
    current = peak = 0
    for _moment, step in sorted(edges):
        current += step
        peak = max(peak, current)
    return peak


# -- the invariants ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Halt:
    """What a halted stage must name: the node, the step it stopped at, and (a piece of) the cause."""

    node: str
    step: str
    cause: str
    # The doctor's cause for the halted node, which the report's diagnosis and its Next must name ("" = not checked).
    diagnosis: str = ""


def assert_outcome(group: Group, stage: str, run: PlaybookRun, halt: Halt | None) -> dict[str, Any]:
    """1. Success, or a halt naming node, step and cause in the report and the ledger. Returns the ledger entry.
    Whatever the outcome, the run gave up the stage Lease it took (a refused preflight too)."""
    entry = cluster_ledger(group.twin)[-1]
    assert lease_holder(group.twin) == "", f"the {stage} run left the stage Lease held: {lease_holder(group.twin)}"
    assert entry["stage"] == stage, (entry, run.output[-3000:])
    if halt is None:
        assert run.returncode == 0, run.output[-5000:]
        assert re.search(rf"Stage {stage}: (success|unchanged)", run.output), run.output[-3000:]
        assert entry["outcome"] in ("success", "unchanged"), entry
        return entry
    assert run.returncode != 0, run.output[-3000:]
    assert f"Stage {stage}: failed" in run.output, run.output[-3000:]
    assert entry["outcome"] == "failed", entry
    report = last_report(group.workspace, stage)
    recorded = json.dumps(entry)
    for what in (halt.node, halt.step, halt.cause):
        assert what in report, f"the {stage} report does not name {what!r}:\n{report}"
        assert what in recorded, f"the ledger entry does not name {what!r}: {entry}"
    if halt.diagnosis:
        diagnosed = {(f["node"], f["cause"]) for f in (entry.get("diagnosis") or {}).get("findings") or []}
        assert (halt.node, halt.diagnosis) in diagnosed, f"the ledger entry's diagnosis: {entry.get('diagnosis')}"
        assert "## Why the halted nodes are stuck" in report, report
        next_line = next(line for line in report.splitlines() if line.startswith("| Next |"))
        assert f"To unstick {halt.node} ({halt.diagnosis}: " in next_line, next_line
    return entry


def halt_as_recorded(twin: TwinProcess) -> Halt:
    """For a halt nobody predicted (bench/soak.py): its ledger entry must give a cause, and the report must name
    the cause and the GPU node that cause names (an API failure may name none)."""
    entry = cluster_ledger(twin)[-1]
    message = str(entry.get("message") or "")
    assert message, f"a halt without a cause: {entry}"
    named = re.findall(r"gpu-worker-\d+", message)
    return Halt(named[0] if named else "", "", message[:60])


def assert_within_budget(twin: TwinProcess, budget: int) -> None:
    """2. The recorder (reset when the case began): 0 violations, never more than ``budget`` down at once."""
    served = twin.report()
    assert served["budget_violations"] == [], served["budget_violations"]
    assert max_unavailable_at_once(served) <= budget, served["nodes"]["unavailable_intervals"]


def assert_marks_explained(twin: TwinProcess, before: Marks) -> None:
    """3. Every mark of ours that was not there before the run is named, with why, by this run's ledger entry (a run
    refused before its first write, its permissions unconfirmed say, has none in the cluster: it left no mark)."""
    new_marks = {node: keys - before.get(node, set()) for node, keys in marks(twin).items()}
    new_marks = {node: keys for node, keys in new_marks.items() if keys}
    if not new_marks:
        return
    entries = cluster_ledger(twin)
    assert entries, f"{sorted(new_marks)} carry {new_marks} but the cluster has no ledger entry to say why"
    entry = entries[-1]
    recorded = json.dumps(entry)
    why = entry.get("message") or (entry.get("outcome") == "success" and entry.get("canary_node"))
    for node, new in new_marks.items():
        assert node in recorded and why, f"{node} carries {sorted(new)} but the ledger does not say why: {entry}"


def next_line(workspace: pathlib.Path, stage: str) -> str:
    return next(line for line in last_report(workspace, stage).splitlines() if line.startswith("| Next |"))


def printed_next(workspace: pathlib.Path, stage: str) -> dict[str, str]:
    """The report's "Next" as extra vars: the first ``stage=...`` it names and any ``-e upgrade_x=value``."""
    line = next_line(workspace, stage)
    found = re.findall(r"(?:-e )?\b(stage|upgrade_\w+)=([\w.-]+)", line)
    assert found and found[0][0] == "stage", f"the report's Next names no stage to run: {line}"
    variables: dict[str, str] = {}
    for key, value in found:
        variables.setdefault(key, value.rstrip("."))  # "... then run stage=rollback." ends a sentence
    return variables


class NextFailed(AssertionError):
    """The command a halted stage's report prints as "Next" failed, the fault cleared."""


class Drift(AssertionError):
    """The cluster does not run what the matrix's current_production names (``playbooks/audit.yml``)."""


def assert_no_drift(group: Group) -> None:
    out = group.workspace / "audit"
    variables = {"audit_matrix_file": str(group.workspace / "matrix.yaml"), "audit_output_dir": str(out)}
    run = run_playbook("playbooks/audit.yml", twin=group.twin, extra_vars=variables)
    drift = json.loads((out / "audit.json").read_text())["drift"]
    found = drift["nodes_with_drift"] + [c for c in drift.get("cluster", []) if c.get("status") == "drift"]
    if found:
        raise Drift(f"audit reports drift from current_production: {found}")
    assert run.returncode == 0, run.output[-3000:]


def assert_matrix_agrees(group: Group, baseline: Marks) -> None:
    """5. The cluster runs what the matrix's current_production names; no node is left cordoned or carrying the
    canary label that did not before the case, and any other mark of ours left is explained by the last ledger
    record (a rollout's per-node state, say)."""
    assert_no_drift(group)
    left = {
        node: sorted(key for key in keys - baseline.get(node, set()) if key in ("cordoned", f"label {CANARY_LABEL}"))
        for node, keys in marks(group.twin).items()
    }
    assert not any(left.values()), f"left behind: {left}"
    assert_marks_explained(group.twin, baseline)


def recover(
    group: Group, stage: str, clear: Callable[[TwinProcess], None], baseline: Marks, *, changed: bool = True
) -> None:
    """4. Clear the fault, run the report's Next exactly as printed, until the cluster is back at production.

    A change the tool cannot undo (its ledger entry says ``forward_only``: OpenShift's control plane has moved and
    OpenShift has no downgrade) gets back to a cluster that agrees with the matrix by going forward: the resumed
    canary, its bake on the twin's clock, and the promotion that makes the change current_production; a refused
    rollback of such a change says so ("let it bake ... then run stage=promote"); a halted promotion of such a change
    names itself again (it resumes). A stage that stopped before any change (``changed`` False) names itself again:
    run once the fault is cleared, it finishes the change."""
    halted = cluster_ledger(group.twin)[-1]
    clear(group.twin)
    unstick(group, stage)
    found = printed_next(group.workspace, stage)
    next_stage = found.pop("stage")
    # The same stage again: after a halt that changed nothing, or one that can only go forward (it resumes).
    allowed = ("rollback", "canary", "bake") + (() if changed and not halted.get("forward_only") else (stage,))
    assert next_stage in allowed, (next_stage, found)
    before = marks(group.twin)
    run = group.run(next_stage, **found)
    if run.returncode != 0:
        raise NextFailed(f"the printed Next (stage={next_stage}) failed with the fault cleared:\n{run.output[-3000:]}")
    assert_outcome(group, next_stage, run, None)
    assert_marks_explained(group.twin, before)
    if next_stage == "bake" or (next_stage == "canary" and halted.get("forward_only")):
        group.twin.advance(49 * 3600)  # the bake window, on the twin's clock
        run = group.run("promote")
        assert_outcome(group, "promote", run, None)
    elif next_stage == "canary":  # nothing had changed: the change itself goes on, then back to production
        back_after_canary(group)
    assert_matrix_agrees(group, baseline)


def unstick(group: Group, stage: str) -> None:
    """What the Next asks a person to do before the stage runs again, once its cause (the fault) is gone: a driver
    pod that crash-loops at the target ("To unstick <node> (driver_pod_crashloop: fix what its last message says
    ..., then delete the pod)") is deleted, and its DaemonSet starts a new one; a failed node's mark is cleared
    with the command the Next prints."""
    line = next_line(group.workspace, stage)
    for node in re.findall(r"To unstick (\S+) \(driver_pod_crashloop:", line):
        selector = ("-l", "app.kubernetes.io/component=nvidia-driver", "--field-selector", f"spec.nodeName={node}")
        kubectl(group.twin, "delete", "pod", "-n", "nvidia-gpu-operator", *selector, "--wait=false")
    # A failed node's mark, which halts every run until a person clears it: the command exactly as printed.
    for command in re.findall(r"`kubectl (annotate node \S+ \S+=pending --overwrite)`", line):
        kubectl(group.twin, *command.split())


def back_after_canary(group: Group) -> None:
    """A canary that went on goes back with stage=rollback. A change the tool cannot undo (OpenShift has no
    downgrade) has its rollback refused, nothing changed, with the way forward as its Next: the bake on the twin's
    clock, then the promotion that makes it current_production."""
    entries, before = len(cluster_ledger(group.twin)), marks(group.twin)
    run = group.run("rollback")
    if run.returncode != 0 and "Stage rollback refused" in run.output:
        assert_refused(group, "rollback", run, entries=entries, before=before)
        assert printed_next(group.workspace, "rollback")["stage"] == "bake"
        group.twin.advance(49 * 3600)
        run = group.run("promote")
        assert_outcome(group, "promote", run, None)
        return
    assert_outcome(group, "rollback", run, None)


def assert_refused(group: Group, stage: str, run: PlaybookRun, *, entries: int, before: Marks) -> None:
    """A stage refused before its first write: it says so, the cluster's ledger has no entry of it, no mark of ours
    moved, and the file ledger records the refusal."""
    assert run.returncode != 0 and f"Stage {stage} refused" in run.output, run.output[-3000:]
    assert len(cluster_ledger(group.twin)) == entries, cluster_ledger(group.twin)[-1]
    assert marks(group.twin) == before, (before, marks(group.twin))
    assert lease_holder(group.twin) == "", f"the refused {stage} run left the stage Lease held"


# -- one case ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    """One fault kind against one group's stage. ``inject`` adds the fault (through the admin URL), ``clear``
    takes it away; ``halt`` is what a halted stage must name (None: the stage must succeed despite it)."""

    name: str
    stage: str
    inject: Callable[[TwinProcess], None]
    clear: Callable[[TwinProcess], None]
    halt: Halt | None
    extra: dict[str, Any] = field(default_factory=dict)
    # False for a stage refused before any change for a cause no fault clears (the cluster itself must move
    # first): its Next is "fix what failed, then run the stage again", which is checked but not run.
    next_runs: bool = True


def clear_faults(twin: TwinProcess) -> None:
    twin.admin("DELETE", "faults")


def run_case(group: Group, case: Case) -> dict[str, Any]:
    """The case's stage with its fault, every invariant after it, and back to production. Returns a summary."""
    twin = group.twin
    baseline = marks(twin)
    twin.admin("POST", "report/reset")
    case.inject(twin)
    before = marks(twin)
    run = group.run(case.stage, **case.extra)
    entry = assert_outcome(group, case.stage, run, case.halt)
    assert_within_budget(twin, group.budget)
    assert_marks_explained(twin, before)
    if case.halt is not None and not case.next_runs:
        case.clear(twin)
        assert cluster_ledger(twin)[-1].get("cluster_changed") is False, cluster_ledger(twin)[-1]
        assert printed_next(group.workspace, case.stage).get("stage") == case.stage
        assert_matrix_agrees(group, baseline)
    elif case.halt is not None:
        recover(group, case.stage, case.clear, baseline)
    else:
        case.clear(twin)
        if case.stage == "canary":
            assert_within_budget(twin, group.budget)
            back_after_canary(group)
        assert_matrix_agrees(group, baseline)
    assert_within_budget(twin, group.budget)
    return {"outcome": entry["outcome"], "cordoned_left": sorted(n for n, k in marks(twin).items() if "cordoned" in k)}


def run_case_at(group: Group, case: Case, stage: str, *, exact: bool = True) -> dict[str, Any]:
    """The case's fault at a stage (bench/soak.py): for promote and rollback a clean canary first (and, for
    promote, the bake window on the twin's clock), then the stage with the fault, its invariants, and back to
    production. At the case's own stage with ``exact`` this is ``run_case``; otherwise the stage may succeed or
    halt (naming the node), and either must keep the invariants."""
    if stage == case.stage and exact:
        return run_case(group, case)
    baseline = marks(group.twin)  # the twin's own (rack label, BMC address): what production leaves
    if stage != "canary":
        run = group.run("canary")
        assert_outcome(group, "canary", run, None)
    if stage == "promote":
        group.twin.advance(49 * 3600)
    group.twin.admin("POST", "report/reset")
    case.inject(group.twin)
    before = marks(group.twin)
    entries = len(cluster_ledger(group.twin))
    run = group.run(stage, **case.extra)
    entry = cluster_ledger(group.twin)[-1]
    assert_within_budget(group.twin, group.budget)
    assert_marks_explained(group.twin, before)
    if run.returncode != 0 and group.refused_by_design and group.refused_by_design in run.output:
        # Refused whatever the fault, nothing changed: the Next says to fix that and run the stage again.
        case.clear(group.twin)
        assert printed_next(group.workspace, stage).get("stage") == stage
        assert_matrix_agrees(group, baseline)
    elif run.returncode != 0 and f"Stage {stage} refused" in run.output:
        assert_refused(group, stage, run, entries=entries, before=before)
        recover(group, stage, case.clear, baseline, changed=False)
    elif run.returncode != 0:
        assert_outcome(group, stage, run, halt_as_recorded(group.twin))
        recover(group, stage, case.clear, baseline, changed=entry.get("cluster_changed") is not False)
    else:
        case.clear(group.twin)
        if stage == "canary":  # the canary went on: back to production
            back_after_canary(group)
        assert_matrix_agrees(group, baseline)  # after a promotion too: no cordon, no canary label left
    return {
        "outcome": entry["outcome"],
        "cordoned_left": sorted(n for n, k in marks(group.twin).items() if "cordoned" in k),
    }


# -- SIGKILL of the process group mid-stage -----------------------------------------------------------------------
def start_stage(group: Group, stage: str, **extra: Any) -> subprocess.Popen[bytes]:
    """The stage as ``run`` starts it, in a session (process group) of its own."""
    import sys

    from .conftest import VENV_BIN

    variables = group.variables(stage, **extra)
    env = group.twin.env()
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    command = [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", str(ROOT / "playbooks/upgrade.yml")]
    command += ["-e", json.dumps(variables)]
    return subprocess.Popen(
        command, env=env, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def lease_spec(twin: TwinProcess) -> dict[str, Any]:
    """The stage Lease's spec ({} before any stage took it)."""
    found = kubectl(twin, "get", "lease", "-n", NAMESPACE, LEASE, "-o", "json", check=False)
    return json.loads(found)["spec"] if found else {}


def lease_holder(twin: TwinProcess) -> str:
    return str(lease_spec(twin).get("holderIdentity") or "")


def expire_killed_lease(twin: TwinProcess, duration: int) -> None:
    """Advance the twin's clock until the killed run's Lease has expired: ``duration`` (and a minute) past its last
    renewal. Judged by the Lease's renewTime, not by the kill: a renewal the keeper had in flight when the group was
    killed, or made by a process of the run that left the group (ansible-core's worker calls setsid) before it saw
    ``ansible-playbook`` gone, lands after the kill. It waits (real time, bounded) for the renewTime to hold still."""
    import time

    def renewed_at() -> float:
        stamp = str(lease_spec(twin).get("renewTime") or "")
        return datetime.datetime.fromisoformat(stamp).timestamp() if stamp else 0.0  # a MicroTime, RFC 3339 UTC

    last, deadline = renewed_at(), time.monotonic() + 30
    while True:
        time.sleep(2)  # longer than a module's poll, so what the killed run still had under way has landed
        now_renewed = renewed_at()
        if now_renewed == last or time.monotonic() > deadline:
            break
        last = now_renewed
    now = float(twin.admin("GET", "clock")["epoch_seconds"])
    twin.advance(max(0.0, last + duration + 60 - now))


def kill_group_mid_stage(group: Group, stage: str, *, lease_duration: int, until: Callable[[], bool]) -> None:
    """Start the stage, SIGKILL its whole process group once it holds the Lease and ``until()`` holds."""
    import time

    process = start_stage(group, stage, upgrade_lease_duration=lease_duration)
    try:
        deadline = time.monotonic() + 300  # real-time bound on a process event, not on simulated progress
        while not (lease_holder(group.twin) and until()):
            assert process.poll() is None, "the stage ended before it could be killed"
            assert time.monotonic() < deadline, "the stage never took the Lease"
            time.sleep(0.1)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
