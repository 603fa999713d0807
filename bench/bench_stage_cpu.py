"""The CPU one stage of playbooks/upgrade.yml costs, side by side for several checkouts (before and after a change).

For each checkout, each round: a fresh twin (8 GPU nodes, OpenShift profile, 600x), the example matrix, then a
canary stage of the GPU Operator group and a promotion refused inside the bake window. Reported per stage: the CPU
of ansible-playbook and everything it started (its children's rusage), the tasks it ran, and with ``--count`` the
module processes it started (an interpreter wrapper counts them; it adds a little CPU of its own). Rounds alternate
between the checkouts, so a busier moment of the machine falls on both.

    git worktree add /tmp/before <rev>
    (cd /tmp/before && <this checkout>/.venv/bin/python scripts/collection_path.py)
    .venv/bin/python -m bench.bench_stage_cpu --checkout /tmp/before --checkout . --rounds 2 --count

A checkout needs its ``.build/collections`` link (``scripts/collection_path.py``, ``make env``).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import shutil
import stat
import subprocess
import sys
import tempfile
from typing import Any

from gpufleet_twin.process import start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]
STAGES = (("canary", "canary"), ("promote", "promote refused inside the bake window"))


def counting_interpreter(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """An interpreter for Ansible's modules that notes each module process, then runs the real one."""
    wrapper, tally = folder / "python", folder / "modules.txt"
    wrapper.write_text(f'#!/bin/sh\necho "$0" >> {tally}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return wrapper, tally


def run_stage(checkout: pathlib.Path, env: dict[str, str], workspace: pathlib.Path, stage: str) -> dict[str, Any]:
    extra = {
        "stage": stage,
        "upgrade_matrix_file": str(workspace / "matrix.yaml"),
        "upgrade_report_dir": str(workspace / "reports"),
        "upgrade_wait_timeout": 900,
        "validate_wait_sleep": 0.5,
        "gpu_operator_wait_sleep": 1,
    }
    command = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", "playbooks/upgrade.yml"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [*command, "-e", json.dumps(extra)], env=env, cwd=checkout, capture_output=True, text=True, check=False
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "rc": done.returncode,
        "cpu": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime,
        "tasks": done.stdout.count("TASK ["),
    }


def one_round(checkout: pathlib.Path, *, count: bool) -> dict[str, dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-stage-") as scratch:
        folder = pathlib.Path(scratch)
        twin = start_twin(nodes=8, profile="openshift", time_scale=600, workdir=folder / "twin")
        try:
            shutil.copy(checkout / "examples" / "gpu-version-matrix.yaml", folder / "matrix.yaml")
            env = twin.env()
            env.update(
                ANSIBLE_CONFIG=str(checkout / "ansible.cfg"),
                ANSIBLE_COLLECTIONS_PATH=str(checkout / ".build" / "collections"),
                ANSIBLE_PYTHON_INTERPRETER=sys.executable,
                PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            )
            results = {}
            for stage, _label in STAGES:
                tally = None
                if count:
                    wrapper, tally = counting_interpreter(folder)
                    tally.write_text("")
                    env["ANSIBLE_PYTHON_INTERPRETER"] = str(wrapper)
                results[stage] = run_stage(checkout, env, folder, stage)
                results[stage]["modules"] = len(tally.read_text().splitlines()) if tally else None
            return results
        finally:
            twin.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", action="append", type=pathlib.Path, help="a checkout (repeatable; default .)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--count", action="store_true", help="count module processes (a wrapper interpreter)")
    args = parser.parse_args(argv)
    checkouts = [path.resolve() for path in args.checkout or [ROOT]]
    missing = [str(path) for path in checkouts if not (path / ".build" / "collections").is_dir()]
    if missing:
        parser.error(f"no .build/collections in {', '.join(missing)}: run scripts/collection_path.py there")
    seen: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for _round in range(args.rounds):
        for checkout in checkouts:
            for stage, found in one_round(checkout, count=args.count).items():
                seen.setdefault((str(checkout), stage), []).append(found)
    print("| checkout | stage | exit codes | module processes | tasks | CPU s, each round |")
    print("|---|---|---|---|---|---|")
    for checkout in checkouts:
        for stage, label in STAGES:
            runs = seen[(str(checkout), stage)]
            cpu = ", ".join(f"{run['cpu']:.1f}" for run in runs)
            print(
                f"| {checkout} | {label} | {sorted({run['rc'] for run in runs})} | {runs[0]['modules'] or '-'} "
                f"| {runs[0]['tasks']} | {cpu} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
