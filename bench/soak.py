"""The fault matrix at full size and a random-fault campaign (``make soak``, issue 16).

**The matrix**: component group x stage x fault kind. Every run is real ``playbooks/upgrade.yml -e stage=...``
runs against a twin of its own (6 nodes) with one fault injected through the admin URL; a canary run injects it
into the canary, promote and rollback run a clean canary first (promote after the 48 h bake on the twin's clock)
and inject it into their own stage. The harness and invariants are tests/integration/fault_matrix.py's (outcome,
budget, explained marks, the printed Next back to current_production, matrix and cluster agree), the fault kinds
those of tests/integration/fault_matrix_cases.py: the API ones (5xx burst, 429 burst, 409 conflicts), a PDB that
never allows, a node already cordoned and a SIGKILL of the process group mid-stage apply to every group; a driver
or MOFED build failing, a BMC job failing or a BMC unreachable, a node never Ready to the group they belong to.
At a case's own group and stage the run expects exactly what the CI case expects; elsewhere the stage may succeed
or halt (naming the node) and either must keep the invariants. A broken invariant is counted, not raised.

**The campaign**: rollouts (canary, bake, promote) of the GPU Operator group over a twin of 200 GPU nodes, with
faults injected at random into 1% of node steps (twin fault ``node_step_failures``: a driver that does not build
on that node, a reboot the node does not come back from...) and 1% of API calls (503, 500, 429), seeded: rollout
i draws from ``<seed>/<i>``. Each stage runs with the faults active; they are cleared before the checks, and a
halted stage is followed by its report's Next, the same invariants applied.

Writes ``docs/reliability.md`` (``--out``).

    .venv/bin/python -m bench.soak                                   # everything (make soak)
    .venv/bin/python -m bench.soak --groups firmware --stages canary --faults bmc-job-fails --rollouts 0
    .venv/bin/python -m bench.soak --matrix none --rollouts 2 --nodes 50 --seed 7
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import contextlib
import dataclasses
import datetime
import json
import pathlib
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpufleet_twin.process import TwinProcess, start_twin  # noqa: E402
from scripts.collection_path import ensure_collection_link  # noqa: E402
from tests.integration.fault_matrix import (  # noqa: E402
    GPU_NODES,
    Case,
    Group,
    assert_marks_explained,
    assert_matrix_agrees,
    assert_outcome,
    assert_within_budget,
    clear_faults,
    cluster_ledger,
    expire_killed_lease,
    get_json,
    halt_as_recorded,
    kill_group_mid_stage,
    lease_holder,
    marks,
    recover,
    run_case_at,
    write_matrix,
)
from tests.integration.fault_matrix_cases import CASES, GROUPS, sigkill_then_rerun  # noqa: E402

# The component groups of the matrix: openshift_forward is openshift's second twin for the CI tests, not a group.
MATRIX_GROUPS = [name for name in GROUPS if name != "openshift_forward"]

STAGES = ("canary", "promote", "rollback")
SIGKILL = "sigkill-then-rerun"
PDB = "pdb-never-allows"
# Fault kinds that concern any group (the API, drains, the process); the others belong to one group.
EVERY_GROUP = ("api-5xx-burst", "429-burst", "409-conflicts", PDB, "node-already-cordoned", SIGKILL)
LEASE_DURATION = 600
# Real seconds after the killed promote or rollback took the Lease: a rollback moves one node and may end sooner.
KILL_AFTER = {"promote": 15, "rollback": 3}
# Groups whose rollback after a canary is refused before any change (OpenShift cannot go back): nothing to kill.
NO_ROLLBACK = ("openshift",)
# What a broken invariant means when another branch is already fixing it (tests/integration/fault_matrix_cases.py's
# KNOWN_BUGS): (group, fault kind or None for any, exception type, the bug, how its message starts). Empty: the
# bugs the first soak named (the operator CSV left after a rollback, the Next of a halted firmware, driver and
# OpenShift canary, the rollback after a halted or refused promote, the driver-build one) are fixed; anything broken
# now is NEW.
KNOWN: list[tuple[str, str | None, type[AssertionError], str, str]] = []


# -- the matrix ---------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Run:
    group: str
    fault: str
    stage: str


def pdb_never_allows(twin: TwinProcess) -> None:
    """Every PodDisruptionBudget in the cluster refuses every eviction."""
    for pdb in get_json(twin, "pdb", "-A")["items"]:
        meta = pdb["metadata"]
        twin.admin("POST", "faults", {"type": "pdb_never_allows", "namespace": meta["namespace"], "name": meta["name"]})


def cases_by_fault() -> dict[str, tuple[str, Case]]:
    """Each fault kind with the group its CI case runs on and its Case (the PDB one is the soak's own)."""
    found = {case.name: (group, case) for group, case in CASES}
    found[PDB] = ("network_operator", Case(PDB, "canary", pdb_never_allows, clear_faults, None))
    return found


def matrix(groups: list[str], stages: list[str], faults: list[str]) -> list[Run]:
    owned = cases_by_fault()
    runs = []
    for fault in faults:
        applies = groups if fault in EVERY_GROUP else [g for g in groups if owned[fault][0] == g]
        # A group whose canary the twin refuses by design (fault_matrix_cases.GROUPS) has no promote or rollback,
        # and no stage long enough to be killed in.
        runs += [
            Run(group, fault, stage)
            for group in applies
            for stage in stages
            if (not GROUPS[group].get("refused_by_design") or (stage == "canary" and fault != SIGKILL))
            and not (fault == SIGKILL and stage == "rollback" and group in NO_ROLLBACK)
        ]
    return runs


def settled(twin: TwinProcess) -> bool:
    """Every GPU node Ready and every operator pod Ready (or done): the start-up builds are over."""
    for node in get_json(twin, "nodes", "-l", GPU_NODES)["items"]:
        ready = next((c for c in node["status"].get("conditions", []) if c["type"] == "Ready"), {})
        if ready.get("status") != "True":
            return False
    for namespace in ("nvidia-gpu-operator", "nvidia-network-operator"):
        for pod in get_json(twin, "pods", "-n", namespace)["items"]:
            status = pod.get("status", {})
            if status.get("phase") == "Succeeded":
                continue
            statuses = status.get("containerStatuses") or [{}]
            if status.get("phase") != "Running" or not all(c.get("ready") for c in statuses):
                return False
    return True


def wait_settled(twin: TwinProcess, *, timeout: float = 900) -> None:
    """Until the twin finished starting up, so that faults hit the stages' steps, not its start-up (real-time
    bound on start-up, polled every few seconds)."""
    deadline = time.monotonic() + timeout
    while not settled(twin):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the twin did not settle within {timeout:.0f} s")
        time.sleep(5)


def start_group(name: str, workdir: pathlib.Path, *, nodes: int = 6, budget: int = 1, timeout: float = 900) -> Group:
    twin = start_twin(nodes=nodes, profile="openshift", time_scale=600, workdir=workdir / "twin", startup_timeout=300)
    try:
        wait_settled(twin)
    except BaseException:
        twin.stop()
        raise
    setting = GROUPS[name]
    write_matrix(workdir, setting["canary"], setting.get("production"))
    inputs = setting.get("inputs", {})
    inputs = inputs(twin, workdir) if callable(inputs) else dict(inputs)
    group = Group(
        name=name,
        twin=twin,
        workspace=workdir,
        inputs=inputs,
        budget=budget,
        timeout=timeout,
        refused_by_design=setting.get("refused_by_design", ""),
    )
    twin.admin("POST", "budget", {"maxUnavailable": budget, "scope": GPU_NODES})
    return group


def after_lease_held(seconds: float) -> Callable[[], bool]:
    """For ``kill_group_mid_stage``'s ``until`` (asked only while the Lease is held): true ``seconds`` (real)
    after it was first asked, so the kill lands in the middle of the stage's work rather than at its start."""
    first: list[float] = []

    def until() -> bool:
        first.append(time.monotonic())
        return first[-1] - first[0] >= seconds

    return until


def sigkill_at(group: Group, stage: str) -> None:
    """SIGKILL of the process group mid-stage, then the same stage again once the killed run's Lease expired."""
    if stage == "canary":
        sigkill_then_rerun(group)
        return
    twin = group.twin
    baseline = marks(twin)
    run = group.run("canary")
    assert_outcome(group, "canary", run, None)
    if stage == "promote":
        twin.advance(49 * 3600)
    twin.admin("POST", "report/reset")
    kill_group_mid_stage(group, stage, lease_duration=LEASE_DURATION, until=after_lease_held(KILL_AFTER[stage]))
    assert lease_holder(twin), "the killed run's Lease is still held"
    assert_within_budget(twin, group.budget)
    expire_killed_lease(twin, LEASE_DURATION)
    before = marks(twin)
    rerun = group.run(stage, upgrade_lease_duration=LEASE_DURATION)
    assert_outcome(group, stage, rerun, None)
    assert_marks_explained(twin, before)
    assert_within_budget(twin, group.budget)
    assert_matrix_agrees(group, baseline)


def judged(group: str, fault: str | None, broken: BaseException) -> str:
    """The first line of what broke, named as a known bug when another branch is fixing it."""
    first = (str(broken).strip().splitlines() or [""])[0][:220].replace("|", "/")
    message = str(broken)
    for known_group, known_fault, kind, name, starts in KNOWN:
        alone = not starts or (message.startswith(starts) and message.count("'component'") == 1)
        if group == known_group and known_fault in (None, fault) and isinstance(broken, kind) and alone:
            return f"known ({name}): {type(broken).__name__}: {first}"
    return f"NEW: {type(broken).__name__}: {first}"


def harness_error(exc: Exception) -> str:
    if isinstance(exc, subprocess.TimeoutExpired):
        stage = next((s for s in STAGES if f'"stage": "{s}"' in " ".join(map(str, exc.cmd))), "?")
        return f"ERROR: a playbook run (stage={stage}) took longer than {exc.timeout:.0f} s and was killed"
    return f"ERROR: {type(exc).__name__}: {exc}"[:240]


def stage_chain(twin: TwinProcess, skip: int) -> str:
    """The stages this run recorded in the ledger, in order: ``canary failed -> rollback success``."""
    try:
        entries = cluster_ledger(twin)[skip:]
    except (AssertionError, subprocess.SubprocessError, json.JSONDecodeError, KeyError) as exc:
        return f"(ledger unreadable: {exc})"
    return " -> ".join(f"{e.get('stage')} {e.get('outcome')}" for e in entries) or "(no ledger entry)"


def one_run(run: Run, workdir: pathlib.Path) -> dict[str, Any]:
    started = time.monotonic()
    row: dict[str, Any] = {"kind": "matrix", "group": run.group, "stage": run.stage, "fault": run.fault}
    try:
        group = start_group(run.group, workdir)
    except Exception as exc:  # a twin that does not start is this run's result, not the soak's end
        return {
            **row,
            "chain": "-",
            "invariants": f"ERROR: twin did not start: {exc}",
            "violations": 0,
            "cordoned_left": [],
            "faults": 0,
            "seconds": time.monotonic() - started,
        }
    try:
        try:
            if run.fault == SIGKILL:
                sigkill_at(group, run.stage)
            else:
                owner, case = cases_by_fault()[run.fault]
                # The PDB kind has no CI case: no outcome is predicted for it (issue 16 item 5 halts a MOFED canary).
                run_case_at(group, case, run.stage, exact=owner == run.group and run.fault != PDB)
            row["invariants"] = "kept"
        except AssertionError as broken:
            row["invariants"] = judged(run.group, run.fault, broken)
            row["traceback"] = traceback.format_exc()
        except Exception as exc:  # the harness itself failed: recorded, the soak goes on
            row["invariants"] = harness_error(exc)
            row["traceback"] = traceback.format_exc()
        group.twin.admin("DELETE", "faults")
        row["chain"] = stage_chain(group.twin, 0)
        row["violations"] = len(group.twin.report()["budget_violations"])
        row["cordoned_left"] = sorted(n for n, k in marks(group.twin).items() if "cordoned" in k)
        row["faults"] = 1
    finally:
        group.twin.stop()
    row["seconds"] = time.monotonic() - started
    return row


# -- the random-fault campaign ---------------------------------------------------------------------------------
API_FAULTS = ((503, 0.005), (500, 0.002), (429, 0.003))  # 1% of API calls in all


def random_faults(seed: str, *, step_fraction: float, api_fraction: float) -> list[dict[str, Any]]:
    """1% of node steps and 1% of API calls (all verbs, all resources), seeded."""
    faults: list[dict[str, Any]] = [{"type": "node_step_failures", "fraction": step_fraction, "seed": f"{seed}/steps"}]
    for code, share in API_FAULTS:
        faults.append(
            {
                "type": "api_errors",
                "code": code,
                "verb": "*",
                "resource": "*",
                "fraction": api_fraction * share / 0.01,
                "duration": 30 * 86400,
                "seed": f"{seed}/api/{code}",
            }
        )
    return faults


@dataclasses.dataclass
class Campaign:
    nodes: int
    budget: int
    seed: int
    step_fraction: float
    api_fraction: float


def faulted_stage(group: Group, stage: str, faults: list[dict[str, Any]], hits: collections.Counter[str]) -> Any:
    """The stage with the random faults active; they are counted and cleared before anything is read."""
    twin = group.twin
    twin.admin("POST", "faults", {"faults": faults})
    try:
        return group.run(stage)
    finally:
        for fault in twin.admin("GET", "faults")["faults"]:
            if fault["type"] == "node_step_failures":
                for failed in fault.get("failed_steps", []):
                    hits[f"{failed['step']} {failed['node']}"] += 1
            elif fault["hits"]:
                hits[f"API {fault.get('code', fault['type'])}"] += fault["hits"]
        clear_faults(twin)


def rollout(index: int, campaign: Campaign, workdir: pathlib.Path) -> dict[str, Any]:
    started = time.monotonic()
    seed = f"{campaign.seed}/{index}"
    row: dict[str, Any] = {"kind": "rollout", "index": index, "seed": seed, "hits": collections.Counter()}
    try:
        group = start_group("gpu_operator", workdir, nodes=campaign.nodes, budget=campaign.budget, timeout=3600)
    except Exception as exc:  # recorded as this rollout's result
        return {
            **row,
            "chain": "-",
            "invariants": f"ERROR: twin did not start: {exc}",
            "violations": 0,
            "cordoned_left": [],
            "seconds": time.monotonic() - started,
        }
    twin = group.twin
    row["timings"] = {"start-up": round(time.monotonic() - started)}
    faults = random_faults(seed, step_fraction=campaign.step_fraction, api_fraction=campaign.api_fraction)
    try:
        try:
            baseline = marks(twin)
            for stage in ("canary", "promote"):
                if stage == "promote":
                    twin.advance(49 * 3600)
                before = marks(twin)
                begun = time.monotonic()
                run = faulted_stage(group, stage, faults, row["hits"])
                row["timings"][stage] = round(time.monotonic() - begun)
                assert_within_budget(twin, group.budget)
                assert_marks_explained(twin, before)
                if run.returncode != 0:
                    assert_outcome(group, stage, run, halt_as_recorded(twin))
                    begun = time.monotonic()
                    recover(group, stage, clear_faults, baseline)
                    row["timings"]["Next"] = round(time.monotonic() - begun)
                    break
                assert_outcome(group, stage, run, None)
            else:
                assert_matrix_agrees(group, baseline)
            assert_within_budget(twin, group.budget)
            row["invariants"] = "kept"
        except AssertionError as broken:
            row["invariants"] = judged("gpu_operator", None, broken)
            row["traceback"] = traceback.format_exc()
        except Exception as exc:  # the harness itself failed: recorded, the soak goes on
            row["invariants"] = harness_error(exc)
            row["traceback"] = traceback.format_exc()
        clear_faults(twin)
        row["chain"] = stage_chain(twin, 0)
        row["violations"] = len(twin.report()["budget_violations"])
        row["cordoned_left"] = sorted(n for n, k in marks(twin).items() if "cordoned" in k)
    finally:
        twin.stop()
    row["seconds"] = time.monotonic() - started
    return row


# -- the report ---------------------------------------------------------------------------------------------------
def commit() -> str:
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout
    status = ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs/reliability.md"]
    dirty = subprocess.run(status, cwd=ROOT, capture_output=True, text=True, check=False).stdout
    return head.strip() + (" (with uncommitted changes)" if dirty.strip() else "")


def summary(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "none run"
    chains = collections.Counter(r["chain"].split(" -> ")[0] if r["chain"] else "-" for r in rows)
    kept = sum(r["invariants"] == "kept" for r in rows)
    known = sum(r["invariants"].startswith("known") for r in rows)
    return (
        f"{len(rows)} runs; first stage: "
        + ", ".join(f"{k} {v}" for k, v in sorted(chains.items()))
        + f"; invariants kept {kept}, broken by a known bug {known}, broken otherwise {len(rows) - kept - known}; "
        f"budget violations {sum(r['violations'] for r in rows)}; "
        f"nodes left cordoned {sum(len(r['cordoned_left']) for r in rows)}; "
        f"wall time {sum(r['seconds'] for r in rows) / 60:.0f} min of runs"
    )


FINDINGS = "## Findings"


def write_doc(rows: list[dict[str, Any]], path: pathlib.Path, *, command: str, elapsed: float, jobs: int) -> None:
    runs = [r for r in rows if r["kind"] == "matrix"]
    rollouts = [r for r in rows if r["kind"] == "rollout"]
    lines = [
        "# Reliability: the fault matrix at full size and a random-fault campaign",
        "",
        f"Measured with `{command}` (commits: {', '.join(sorted({str(r.get('commit') or '?') for r in rows}))}; "
        f"report written on {commit()}), {datetime.date.today().isoformat()}, up to {jobs} runs at a time on the "
        f"project's 2-core machine shared with other work: the runs took {sum(r['seconds'] for r in rows) / 60:.0f} "
        f"min in all{f', the last command {elapsed / 60:.0f} min wall time' if elapsed >= 60 else ''}. "
        "`bench/soak.py` says what each run does; "
        "the invariants are those of "
        "`tests/integration/fault_matrix.py`: the stage succeeds or halts naming node, step and cause; 0 budget "
        "violations (the twin's recorder); no cordon, label or annotation of ours without a ledger record saying "
        "why; the report's Next, the fault cleared, brings the cluster back to `current_production` (audit.yml: "
        'no drift); after success or rollback the matrix and the cluster agree. "known (X)" marks an invariant '
        "broken by a bug another branch is fixing (tests/integration/fault_matrix_cases.py's KNOWN_BUGS), "
        '"NEW" one nobody named yet, "ERROR" a run the harness itself could not finish.',
        "",
        "## The matrix",
        "",
        "Each run: a twin of its own (6 GPU nodes, OpenShift profile, time scale 600, budget 1), one fault kind "
        "injected at one stage. The SR-IOV group runs at its canary only: the twin runs OpenShift 4.16, whose "
        "operator index offers no 4.17 build of the SR-IOV operator, so its canary is refused whatever the fault "
        "(the refusal, nothing changed and its Next are what is checked; tests/integration/fault_matrix_cases.py).",
        "",
        f"Summary: {summary(runs)}.",
        "",
        "| Group | Stage | Fault | Stages run (ledger) | Invariants | Budget violations | Nodes left cordoned | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        lines.append(
            f"| {r['group']} | {r['stage']} | {r['fault']} | {r['chain']} | {r['invariants']} | {r['violations']} | "
            f"{', '.join(r['cordoned_left']) or '0'} | {r['seconds']:.0f} |"
        )
    lines += [
        "",
        "## The random-fault campaign",
        "",
        "Each rollout: a twin of its own, the GPU Operator group (v24.9.0 -> v25.3.0, driver 550.127.05 -> "
        "570.124.06), canary then promote after the bake, with `node_step_failures` (1% of node steps) and "
        "`api_errors` 503/500/429 (1% of API calls, all verbs and resources) active during each stage, seeded by "
        "`<seed>/<rollout>`; a halted stage is followed by its report's Next with the faults cleared. The node "
        "steps drawn to fail are the same for a seed whatever the timing; which API calls fail depends on the "
        "sequence of calls, which the machine's speed changes (polls).",
        "",
        f"Summary: {summary(rollouts)}; faults that hit: {sum(sum(r['hits'].values()) for r in rollouts)}."
        if rollouts
        else "Not run for this report (`--rollouts 0`).",
        "",
        "| # | Seed | Faults that hit | Stages run (ledger) | Invariants | Budget violations | Nodes left cordoned "
        "| s (start-up, stages) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rollouts:
        hits = ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(r["hits"].items())) or "none"
        lines.append(
            f"| {r['index']} | {r['seed']} | {hits} | {r['chain']} | {r['invariants']} | {r['violations']} | "
            f"{', '.join(r['cordoned_left']) or '0'} | {r['seconds']:.0f} "
            f"({', '.join(f'{k} {v}' for k, v in (r.get('timings') or {}).items())}) |"
        )
    # The findings below the tables are written by a person reading them: a new run keeps them.
    kept = path.read_text() if path.exists() else ""
    findings = kept[kept.index(FINDINGS) :] if FINDINGS in kept else FINDINGS + "\n\nNot yet read.\n"
    path.write_text("\n".join(lines) + "\n\n" + findings)


def choose(value: str, known: list[str], what: str) -> list[str]:
    if value == "all":
        return list(known)
    if value == "none":
        return []
    chosen = [v for v in value.split(",") if v]
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise SystemExit(f"--{what}: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    return chosen


def main() -> int:
    faults = [*cases_by_fault(), SIGKILL]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", default="all", help=f"comma-separated, all or none: {', '.join(MATRIX_GROUPS)}")
    parser.add_argument("--stages", default="all", help=f"comma-separated or all: {', '.join(STAGES)}")
    parser.add_argument("--faults", default="all", help=f"comma-separated or all: {', '.join(faults)}")
    parser.add_argument("--matrix", default="all", choices=("all", "none"), help="none: the campaign only")
    parser.add_argument("--rollouts", type=int, default=20, help="random-fault rollouts (0: none)")
    parser.add_argument("--nodes", type=int, default=200, help="GPU nodes of each rollout's twin")
    parser.add_argument("--budget", type=int, default=10, help="maxUnavailable of each rollout")
    parser.add_argument("--seed", type=int, default=16, help="seeds every random fault of the campaign")
    parser.add_argument("--step-fraction", type=float, default=0.01)
    parser.add_argument("--api-fraction", type=float, default=0.01)
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (each is a twin and ansible-playbook)")
    parser.add_argument("--out", default=str(ROOT / "docs" / "reliability.md"))
    parser.add_argument("--runs", default="", help="instead of the product: group:fault:stage,... (a chosen few)")
    parser.add_argument("--workdir", default="", help="keep every run's twin, reports and ledger here")
    parser.add_argument("--results", default="", help="also write every row as JSON lines here")
    parser.add_argument("--with-results", default="", help="rows of an earlier run (its --results) to report too")
    args = parser.parse_args()
    ensure_collection_link()
    runs = []
    if args.runs:
        runs = [Run(*spec.split(":")) for spec in args.runs.split(",") if spec]
        for run in runs:
            choose(run.group, list(GROUPS), "runs group")
            choose(run.fault, faults, "runs fault")
            choose(run.stage, list(STAGES), "runs stage")
    elif args.matrix == "all":
        runs = matrix(
            choose(args.groups, MATRIX_GROUPS, "groups"),
            choose(args.stages, list(STAGES), "stages"),
            choose(args.faults, faults, "faults"),
        )
    campaign = Campaign(args.nodes, args.budget, args.seed, args.step_fraction, args.api_fraction)
    work: list[tuple[str, Callable[[pathlib.Path], dict[str, Any]]]] = []
    # The heavy rollouts first, so the small matrix runs fill the gaps at the end.
    work += [(f"rollout-{i}", lambda d, i=i: rollout(i, campaign, d)) for i in range(args.rollouts)]
    work += [(f"{r.group}-{r.fault}-{r.stage}", lambda d, r=r: one_run(r, d)) for r in runs]
    print(f"{len(runs)} matrix runs, {args.rollouts} rollouts, {args.jobs} at a time", flush=True)
    rows: list[dict[str, Any]] = []
    head = commit()
    lock = threading.Lock()
    started = time.monotonic()
    results = pathlib.Path(args.results) if args.results else None
    with contextlib.ExitStack() as stack:
        tmp = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="soak-"))

        def do(name: str, job: Callable[[pathlib.Path], dict[str, Any]]) -> None:
            workdir = pathlib.Path(tmp) / name
            workdir.mkdir(parents=True)
            row = job(workdir)
            row["command"] = ("python -m bench.soak " + " ".join(sys.argv[1:])).strip()
            row["commit"] = head
            with lock:
                rows.append(row)
                shown = {k: v for k, v in row.items() if k != "traceback"}
                print(f"[{len(rows)}/{len(work)} {(time.monotonic() - started) / 60:.0f} min] {shown}", flush=True)
                if results:
                    with results.open("a") as out:
                        out.write(json.dumps(row, default=str) + "\n")

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for future in [pool.submit(do, name, job) for name, job in work]:
                future.result()
    order = {name: i for i, (name, _job) in enumerate(work)}
    rows.sort(
        key=lambda r: order.get(
            f"rollout-{r['index']}" if r["kind"] == "rollout" else f"{r['group']}-{r['fault']}-{r['stage']}", 0
        )
    )
    command = ("python -m bench.soak " + " ".join(sys.argv[1:])).strip()
    elapsed = time.monotonic() - started
    if args.with_results:
        earlier = [json.loads(line) for line in pathlib.Path(args.with_results).read_text().splitlines() if line]
        for row in earlier:
            row["hits"] = collections.Counter(row.get("hits") or {})
        earlier_commands = sorted({str(r["command"]) for r in earlier if r.get("command")})
        command = "`, `".join([*earlier_commands, command] if rows else earlier_commands)
        rows = earlier + rows
    write_doc(rows, pathlib.Path(args.out), command=command, elapsed=elapsed, jobs=args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
