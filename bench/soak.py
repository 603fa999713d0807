"""The fault matrix at full size (``make soak``, issue 16): component group x stage x fault kind.

Every run is one real ``playbooks/upgrade.yml -e stage=...`` against a twin of its own with one fault injected
through the admin URL; a canary stage injects it into the canary, promote and rollback run a clean canary first
(promote after the 48 h bake on the twin's clock) and inject it into their own stage. After each run the
invariants of tests/integration/fault_matrix.py are applied (outcome, budget, explained marks, the printed Next
back to current_production, matrix and cluster agree); a broken invariant is counted, not raised.

Writes ``docs/reliability.md`` (``--out``): runs, faults, outcomes, budget violations, nodes left cordoned.

    .venv/bin/python -m bench.soak                          # everything: groups x canary,promote,rollback x faults
    .venv/bin/python -m bench.soak --stages canary --faults api-5xx-burst,bmc-job-fails

Not yet here: the 20 rollouts of 200 nodes with faults at random in 1% of node steps and API calls.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import pathlib
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpufleet_twin.process import start_twin  # noqa: E402
from scripts.collection_path import ensure_collection_link  # noqa: E402
from tests.integration.fault_matrix import Group, marks, run_case_at, write_matrix  # noqa: E402
from tests.integration.test_fault_matrix import CASES, GROUPS  # noqa: E402

STAGES = ("canary", "promote", "rollback")


def one_run(group_name: str, case: Any, stage: str, workdir: pathlib.Path) -> dict[str, Any]:
    twin = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=workdir / "twin")
    try:
        setting = GROUPS[group_name]
        write_matrix(workdir, setting["canary"], setting.get("production"))
        inputs = setting.get("inputs", {})
        inputs = inputs(twin, workdir) if callable(inputs) else dict(inputs)
        group = Group(name=group_name, twin=twin, workspace=workdir, inputs=inputs)
        twin.admin("POST", "budget", {"maxUnavailable": group.budget, "scope": "nvidia.com/gpu.present=true"})
        row: dict[str, Any] = {"group": group_name, "stage": stage, "fault": case.name}
        try:
            row.update(run_case_at(group, case, stage))
            row["invariants"] = "kept"
        except AssertionError as broken:
            row["outcome"] = row.get("outcome", "?")
            row["invariants"] = "BROKEN: " + str(broken).splitlines()[0][:160]
        served = twin.report()
        row["violations"] = len(served["budget_violations"])
        row["cordoned_left"] = sorted(n for n, k in marks(twin).items() if "cordoned" in k)
        return row
    finally:
        twin.stop()


def write_doc(rows: list[dict[str, Any]], path: pathlib.Path, command: str, elapsed: float) -> None:
    outcomes = collections.Counter(str(r.get("outcome")) for r in rows)
    lines = [
        "# Reliability: the fault matrix at full size",
        "",
        f"Measured with `{command}` on {datetime.date.today().isoformat()} ({len(rows)} runs, "
        f"{elapsed / 60:.0f} min wall time). Each run is one real `playbooks/upgrade.yml` stage against the twin "
        "with one injected fault; the invariants are those of `tests/integration/fault_matrix.py`.",
        "",
        f"Runs: {len(rows)}; faults injected: {len(rows)}; outcomes: "
        + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        + f"; budget violations: {sum(r['violations'] for r in rows)}; "
        f"nodes left cordoned: {sum(len(r['cordoned_left']) for r in rows)}; "
        f"invariants broken: {sum(r['invariants'] != 'kept' for r in rows)}.",
        "",
        "| Group | Stage | Fault | Outcome | Budget violations | Nodes left cordoned | Invariants |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['group']} | {r['stage']} | {r['fault']} | {r.get('outcome')} | {r['violations']} | "
            f"{', '.join(r['cordoned_left']) or '0'} | {r['invariants']} |"
        )
    path.write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", default=",".join(STAGES))
    parser.add_argument("--faults", default="", help="fault kinds (case names), comma-separated; default all")
    parser.add_argument("--out", default=str(ROOT / "docs" / "reliability.md"))
    args = parser.parse_args()
    ensure_collection_link()
    stages = [s for s in args.stages.split(",") if s]
    wanted = {f for f in args.faults.split(",") if f}
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        for index, (group_name, case) in enumerate(CASES):
            if wanted and case.name not in wanted:
                continue
            for stage in stages:
                workdir = pathlib.Path(tmp) / f"{index}-{stage}"
                workdir.mkdir()
                row = one_run(group_name, case, stage, workdir)
                print(row, flush=True)
                rows.append(row)
    command = "python -m bench.soak " + " ".join(sys.argv[1:])
    write_doc(rows, pathlib.Path(args.out), command.strip(), time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
