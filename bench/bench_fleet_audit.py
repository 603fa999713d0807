"""A fleet audit as AWX runs it: one ansible-runner job over K clusters at once, against a loop of K jobs.

K twins of N GPU nodes each load a settled snapshot (``bench/audit_snapshot.py``, built once and
cached) and run at real time, as production clusters do when they are audited. Then, side by side
in one run:

- ``fleet``: one ``ansible-runner run`` of ``playbooks/audit.yml`` over an inventory group of K hosts,
  one per cluster, each with its own connection (``gpufleet_k8s_auth``), forks = K, ending with the
  fleet summary;
- ``loop``: the same playbook run one cluster at a time, one ansible-runner job each (what a shell
  loop over kubeconfigs, or K separate AWX jobs, does).

For each it reports the wall time, the API requests each cluster served (from the twins' own
recorders; the budget is ceil(N/500)+15 per cluster), the peak memory of the controller (the
summed resident memory of ansible-runner and every process under it, sampled every 0.2 s), the CPU
seconds of the controller and of the twins, and the load average when the fleet job started: on a
shared machine the wall time depends on who else runs, the CPU seconds do not.

    .venv/bin/python -m bench.bench_fleet_audit --clusters 20 --nodes 1000
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import json
import math
import os
import pathlib
import resource
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

from bench.audit_snapshot import ensure_snapshot
from gpufleet_twin.process import TwinProcess, start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / ".build" / "collections"))

from scripts.collection_path import ensure_collection_link  # noqa: E402
from tests.integration.fleet_runner import RunnerJob, host_connection, run_job  # noqa: E402

MATRIX = ROOT / "examples" / "gpu-version-matrix.yaml"
PAGE = 4096


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = pathlib.Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(parent, []).append(int(entry.name))
    return tree


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and every process under it."""
    tree, total, todo = _children(), 0, [root]
    while todo:
        pid = todo.pop()
        try:
            total += int(pathlib.Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            continue
        todo += tree.get(pid, [])
    return total


class PeakMemory:
    """Samples the summed RSS of this process's children (the ansible-runner job) while it runs."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._baseline = _tree_rss(os.getpid())

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _tree_rss(os.getpid()) - self._baseline)

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def children_cpu() -> float:
    """CPU seconds (user + system) of every finished process below this one: the jobs and all they started."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_cpu(pid: int) -> float:
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def twins_cpu(twins: dict[str, TwinProcess]) -> float:
    return sum(process_cpu(twin.process.pid) for twin in twins.values())


def wait_until_idle(twins: list[TwinProcess], *, window: float = 5.0, timeout: float = 1200) -> float:
    """Until the twins together use less than a tenth of a core over three windows in a row."""

    def cpu() -> float:
        return sum(process_cpu(twin.process.pid) for twin in twins)

    start, quiet = time.monotonic(), 0
    while time.monotonic() - start < timeout:
        used = cpu()
        time.sleep(window)
        quiet = quiet + 1 if cpu() - used < 0.1 * window else 0
        if quiet == 3:
            return time.monotonic() - start
    raise RuntimeError(f"the twins were still busy after {timeout:.0f}s")


def served(twins: dict[str, TwinProcess]) -> dict[str, int]:
    return {name: twin.report()["requests"]["total"] for name, twin in twins.items()}


@dataclasses.dataclass
class JobCost:
    """What one ansible-runner job cost: wall time, the controller's peak memory and CPU, the twins' CPU."""

    seconds: float
    peak_bytes: int
    controller_cpu: float
    twins_cpu: float


def audit_job(
    workdir: pathlib.Path, twins: dict[str, TwinProcess], *, ident: str, forks: int
) -> tuple[RunnerJob, JobCost]:
    results = workdir / "results"
    cpu_before, twins_before = children_cpu(), twins_cpu(twins)
    with PeakMemory() as memory:
        start = time.perf_counter()
        job = run_job(
            workdir,
            playbook="playbooks/audit.yml",
            hosts={name: host_connection(twin, form="auth") for name, twin in twins.items()},
            extravars={
                "gpufleet_clusters": "gpu_clusters",
                "audit_matrix_file": str(MATRIX),
                "audit_fail_on_drift": False,
                "gpufleet_results_dir": str(results),
            },
            envvars={},
            ident=ident,
            forks=forks,
            timeout=3600,
        )
        seconds = time.perf_counter() - start
    if job.rc != 0:
        raise RuntimeError(f"the {ident} job failed:\n{job.stdout[-4000:]}")
    cost = JobCost(
        seconds=seconds,
        peak_bytes=memory.peak,
        controller_cpu=children_cpu() - cpu_before,
        twins_cpu=twins_cpu(twins) - twins_before,
    )
    return job, cost


def run(clusters: int, nodes: int, *, workdir: pathlib.Path, forks: int = 0) -> dict[str, Any]:
    ensure_collection_link()
    snapshot = ensure_snapshot(nodes)
    twins: dict[str, TwinProcess] = {}
    try:
        start = time.monotonic()

        def start_one(name: str) -> TwinProcess:
            return start_twin(
                nodes=nodes,
                profile="openshift",
                time_scale=1.0,
                startup_timeout=1800,
                workdir=workdir / "twins" / name,
                extra_args=("--from-snapshot", str(snapshot)),
            )

        # The twins load their snapshots side by side (set-up, not measured).
        names = [f"gpu-{index + 1:02d}" for index in range(clusters)]
        with concurrent.futures.ThreadPoolExecutor(max_workers=clusters) as pool:
            for name, future in [(name, pool.submit(start_one, name)) for name in names]:
                twins[name] = future.result()
        started = time.monotonic() - start
        settle = wait_until_idle(list(twins.values()))
        twin_memory = sum(_tree_rss(twin.process.pid) for twin in twins.values())

        for twin in twins.values():
            twin.admin("POST", "report/reset")
        load_before = os.getloadavg()
        fleet_job, fleet = audit_job(workdir / "fleet", twins, ident="fleet", forks=forks or clusters)
        fleet_requests = served(twins)
        summary = fleet_job.stats_artifacts()["gpufleet_fleet_summary"]

        loop = JobCost(seconds=0.0, peak_bytes=0, controller_cpu=0.0, twins_cpu=0.0)
        loop_requests = {}
        for name, twin in twins.items():
            twin.admin("POST", "report/reset")
            _job, cost = audit_job(workdir / "loop" / name, {name: twin}, ident=name, forks=1)
            loop.seconds += cost.seconds
            loop.peak_bytes = max(loop.peak_bytes, cost.peak_bytes)
            loop.controller_cpu += cost.controller_cpu
            loop.twins_cpu += cost.twins_cpu
            loop_requests[name] = twin.report()["requests"]["total"]
        load_after = os.getloadavg()
    finally:
        for twin in twins.values():
            twin.stop()
    budget = math.ceil(nodes / 500) + 15
    return {
        "clusters": clusters,
        "nodes_per_cluster": nodes,
        "twins_start_seconds": round(started, 1),
        "twins_settle_seconds": round(settle, 1),
        "twins_memory_mb": round(twin_memory / 2**20),
        "request_budget_per_cluster": budget,
        # The machine's 1-, 5- and 15-minute load averages when the fleet job started and after the loop.
        "load_average_before": [round(value, 1) for value in load_before],
        "load_average_after": [round(value, 1) for value in load_after],
        "fleet": {
            "forks": forks or clusters,
            "seconds": round(fleet.seconds, 2),
            "controller_cpu_seconds": round(fleet.controller_cpu, 1),
            "twins_cpu_seconds": round(fleet.twins_cpu, 1),
            "requests_per_cluster_max": max(fleet_requests.values()),
            "requests_per_cluster": fleet_requests,
            "controller_peak_mb": round(fleet.peak_bytes / 2**20),
            "clusters_in_summary": summary["clusters_total"],
            "nodes_audited": sum(entry["drift"]["nodes_total"] for entry in summary["clusters"]),
        },
        "loop": {
            "seconds": round(loop.seconds, 2),
            "controller_cpu_seconds": round(loop.controller_cpu, 1),
            "twins_cpu_seconds": round(loop.twins_cpu, 1),
            "requests_per_cluster_max": max(loop_requests.values()),
            "controller_peak_mb": round(loop.peak_bytes / 2**20),
        },
        "speedup": round(loop.seconds / fleet.seconds, 2),
        "within_budget": max(fleet_requests.values()) <= budget and max(loop_requests.values()) <= budget,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--forks", type=int, default=0, help="forks of the fleet job (default: one per cluster)")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench" / "results" / "fleet_audit.json")
    options = parser.parse_args()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="gpufleet-fleet-bench-"))
    try:
        result = run(options.clusters, options.nodes, workdir=workdir, forks=options.forks)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result, indent=2) + "\n")
    fleet, loop = result["fleet"], result["loop"]
    print(
        f"{result['clusters']} clusters x {result['nodes_per_cluster']} nodes: one fleet job {fleet['seconds']:.1f} s "
        f"(controller peak {fleet['controller_peak_mb']} MB), one job per cluster in a loop {loop['seconds']:.1f} s "
        f"(peak {loop['controller_peak_mb']} MB): {result['speedup']}x faster; requests per cluster at most "
        f"{fleet['requests_per_cluster_max']} (fleet) / {loop['requests_per_cluster_max']} (loop), budget "
        f"{result['request_budget_per_cluster']}; controller CPU {fleet['controller_cpu_seconds']} s (fleet) / "
        f"{loop['controller_cpu_seconds']} s (loop); load average {result['load_average_before'][0]} at the start"
    )
    print(f"results: {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
