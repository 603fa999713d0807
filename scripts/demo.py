"""`make demo`: a canary upgrade of the built-in simulated GPU cluster, start to finish.

Starts a twin (8 GPU workers, OpenShift profile, simulated time running ten
minutes per real second), runs ``playbooks/upgrade.yml -e stage=canary`` against
it with a scratch copy of ``examples/gpu-version-matrix.yaml`` (the demo never
edits the repository's example), prints where the reports are (the HTML one
opens in any browser, offline), stops the twin and exits with the playbook's
status.

    .venv/bin/python scripts/demo.py [--nodes 8] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from collection_path import ROOT, ensure_collection_link

from gpufleet_twin.process import TwinProcess, start_twin

EXAMPLE_MATRIX = ROOT / "examples" / "gpu-version-matrix.yaml"
DEMO_REPORTS = ROOT / "reports" / "demo"


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=8, help="GPU workers in the simulated cluster")
    parser.add_argument("--time-scale", type=float, default=600.0, help="simulated seconds per real second")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory (twin state, matrix copy)")
    return parser.parse_args(argv)


def playbook_environment(twin: TwinProcess) -> dict[str, str]:
    environment = twin.env()
    environment.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ensure_collection_link()),
        # The interpreter that runs this script has the pinned kubernetes client.
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}",
    )
    return environment


def run_canary(twin: TwinProcess, *, matrix: pathlib.Path, reports: pathlib.Path) -> int:
    extra_vars = {
        "stage": "canary",
        "upgrade_matrix_file": str(matrix),
        "upgrade_report_dir": str(reports),
        # Simulated time runs fast: look at the cluster often.
        "validate_wait_sleep": 0.5,
        "gpu_operator_wait_sleep": 1,
    }
    command = [
        str(pathlib.Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        "localhost,",
        str(ROOT / "playbooks" / "upgrade.yml"),
        "-e",
        json.dumps(extra_vars),
    ]
    print(f"$ ansible-playbook playbooks/upgrade.yml -e stage=canary   (matrix: {matrix})", flush=True)
    completed = subprocess.run(command, env=playbook_environment(twin), cwd=ROOT, timeout=1800, check=False)
    return completed.returncode


def newest_report(reports: pathlib.Path, *, suffix: str = ".md") -> pathlib.Path | None:
    found = sorted(reports.glob(f"upgrade-canary-*{suffix}"), key=lambda path: path.stat().st_mtime)
    return found[-1] if found else None


def main(argv: list[str]) -> int:
    arguments = parse_arguments(argv)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="gpufleet-demo-"))
    matrix = scratch / "gpu-version-matrix.yaml"
    shutil.copy(EXAMPLE_MATRIX, matrix)
    # One folder per demo run: each run is a new cluster with a ledger of its own.
    reports = DEMO_REPORTS / time.strftime("%Y%m%dT%H%M%S")
    reports.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"Starting a simulated OpenShift GPU cluster ({arguments.nodes} GPU workers) ...", flush=True)
    # With the distributed training StatefulSet ml-training/dist-train and its PDB, so the canary meets one.
    twin = start_twin(
        nodes=arguments.nodes,
        profile="openshift",
        time_scale=arguments.time_scale,
        workdir=scratch / "twin",
        distributed_training=True,
    )
    status = 1
    try:
        print(f"Cluster up at {twin.api_url} (kubeconfig {twin.kubeconfig})", flush=True)
        status = run_canary(twin, matrix=matrix, reports=reports)
    finally:
        stopped = twin.stop()
        if stopped not in (0, None):
            print(f"The twin stopped with status {stopped}; its log: {twin.log_path}", file=sys.stderr)
    report = newest_report(reports)
    print()
    print(f"Canary {'succeeded' if status == 0 else 'FAILED'} in {time.monotonic() - started:.0f} s.")
    html = newest_report(reports, suffix=".html")
    print(f"Report: {report if report else '(none written)'}")
    print(f"HTML report: {html if html else '(none written)'}")
    print(f"Ledger: {reports / 'upgrade-ledger.json'}")
    if arguments.keep:
        print(f"Scratch (twin state, matrix copy): {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    print("Next: stage=bake (scheduled), then stage=promote after the 48 h bake; see docs/upgrade-flow.md.")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
