"""The GPU driver rollout at scale: clusterpolicy_upgrade's runner against a twin of N nodes.

For each N the benchmark starts a twin (no seeded workloads, so the rollout's
pace is the upgrade controller's, not a PodDisruptionBudget's), promotes a new
driver to every node with ``maxParallelUpgrades`` P and ``maxUnavailable`` 25%,
and compares the rollout's duration (simulated seconds, from the controller's
own Events) with the lower bound ``ceil(N / P') x per-node time``, where P' is
the number of nodes the budget lets go at once (``min(P, maxUnavailable)``)
and the per-node time is the median time a node spends from ``cordon-required``
to ``upgrade-done``. It also reports the module's API requests per upgraded
node. Run:

    .venv/bin/python -m bench.bench_gpu_driver_rollout --nodes 100 1000
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any

from gpufleet_twin.process import start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".build" / "collections"))

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_runner import (  # noqa: E402
    DriverRolloutOptions,
    run_driver_rollout,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (  # noqa: E402
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (  # noqa: E402
    PODS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (  # noqa: E402
    scaled_max_unavailable,
)

TARGET = "570.124.06"
DRIVER_PODS = "app.kubernetes.io/component=nvidia-driver"
RESULTS = ROOT / "bench" / "results"


def connect(kubeconfig: pathlib.Path) -> KubeApi:
    return KubeApi.from_params({"kubeconfig": str(kubeconfig)})


def wait_for_ready_drivers(api: KubeApi, nodes: int, *, timeout: float) -> float:
    """Until every node's driver pod is Running and Ready (set-up, not measured)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        ready = sum(
            1
            for pod in api.iter_list(PODS, label_selector=DRIVER_PODS, page_size=1000)
            if all(s.get("ready") for s in (pod.get("status") or {}).get("containerStatuses") or [{}])
        )
        if ready >= nodes:
            return time.monotonic() - start
        time.sleep(2)
    raise RuntimeError(f"the twin's {nodes} driver pods were not Ready within {timeout:.0f}s")


def parse(stamp: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None


def rollout_times(timeline: dict[str, list[dict[str, Any]]]) -> tuple[list[float], float]:
    """Per-node seconds from cordon-required to upgrade-done, and the whole rollout's span (cluster time)."""
    per_node, starts, ends = [], [], []
    for rows in timeline.values():
        entered = {row["state"]: parse(row["entered_at"]) for row in rows if row.get("entered_at")}
        start, end = entered.get("cordon-required"), entered.get("upgrade-done")
        if start and end:
            per_node.append((end - start).total_seconds())
            starts.append(start)
            ends.append(end)
    span = (max(ends) - min(starts)).total_seconds() if starts else 0.0
    return per_node, span


def state_medians(timeline: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Median seconds spent in each state (cluster time), where the Events tell both ends."""
    spent: dict[str, list[float]] = {}
    for rows in timeline.values():
        timed = [(row["state"], parse(row["entered_at"])) for row in rows if row.get("entered_at")]
        for (state, entered), (_next_state, left) in itertools.pairwise(timed):
            if entered and left:
                spent.setdefault(state, []).append((left - entered).total_seconds())
    return {state: round(statistics.median(values), 1) for state, values in spent.items()}


def run_one(*, nodes: int, parallel: int, time_scale: float, workdir: pathlib.Path) -> dict[str, Any]:
    scenario = workdir / "scenario.yaml"
    scenario.write_text("description: driver rollout benchmark, no seeded workloads\nworkloads: false\n")
    started = time.monotonic()
    twin = start_twin(
        nodes=nodes, time_scale=time_scale, workdir=workdir / "twin", scenario=scenario, startup_timeout=300
    )
    try:
        api = connect(twin.kubeconfig)
        settle = wait_for_ready_drivers(api, nodes, timeout=900)
        twin.admin("POST", "report/reset")
        clock_before = twin.admin("GET", "clock")["epoch_seconds"]
        rollout_started = time.monotonic()
        result = run_driver_rollout(
            connect(twin.kubeconfig),
            DriverRolloutOptions(
                driver={"version": TARGET},
                upgrade_policy={"autoUpgrade": True, "maxParallelUpgrades": parallel, "maxUnavailable": "25%"},
                wait_timeout=1800,
                wait_sleep=2,
            ),
        )
        real_seconds = time.monotonic() - rollout_started
        clock_after = twin.admin("GET", "clock")["epoch_seconds"]
        report = twin.report()
    finally:
        twin.stop()
    per_node, span = rollout_times(result["timeline"])
    at_once = min(parallel, scaled_max_unavailable("25%", total=nodes))
    per_node_time = statistics.median(per_node) if per_node else 0.0
    lower_bound = math.ceil(nodes / at_once) * per_node_time
    done = len(result["progress"]["done"])
    return {
        "nodes": nodes,
        "max_parallel_upgrades": parallel,
        "max_unavailable": "25%",
        "nodes_at_once": at_once,
        "time_scale": time_scale,
        "upgraded": done,
        "per_node_seconds_median": round(per_node_time, 1),
        "per_node_seconds_p95": round(sorted(per_node)[int(0.95 * (len(per_node) - 1))], 1) if per_node else 0.0,
        "seconds_per_state_median": state_medians(result["timeline"]),
        "rollout_seconds": round(span, 1),
        "lower_bound_seconds": round(lower_bound, 1),
        "ratio_to_lower_bound": round(span / lower_bound, 3) if lower_bound else None,
        "simulated_seconds_waited": round(clock_after - clock_before, 1),
        "real_seconds": round(real_seconds, 1),
        "real_seconds_setup": round(time.monotonic() - started - real_seconds, 1),
        "settle_seconds": round(settle, 1),
        "module_api_requests": result["api_requests"],
        "module_api_requests_per_node": round(result["api_requests"] / max(done, 1), 2),
        "twin_requests_served": report["requests"]["total"],
        "budget_violations": len(report["budget_violations"]),
        "halted": result["halted"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--parallel", type=int, default=0, help="maxParallelUpgrades (default: N/20, at least 5)")
    parser.add_argument("--time-scale", type=float, default=0.0, help="simulated seconds per real second")
    args = parser.parse_args(argv)
    runs = []
    for nodes in args.nodes:
        parallel = args.parallel or max(5, nodes // 20)
        # The twin's controllers pace themselves in real time (a pass over N nodes costs real milliseconds), so
        # a higher scale stretches each state in simulated seconds without saving much real time.
        time_scale = args.time_scale or (600.0 if nodes <= 200 else 150.0)
        with tempfile.TemporaryDirectory(prefix="bench-gpu-driver-") as tmp:
            run = run_one(nodes=nodes, parallel=parallel, time_scale=time_scale, workdir=pathlib.Path(tmp))
        runs.append(run)
        print(json.dumps(run, indent=2), flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS / f"gpu_driver_rollout-{stamp}.json"
    out.write_text(json.dumps({"benchmark": "gpu_driver_rollout", "target": TARGET, "runs": runs}, indent=2) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
