"""The drift audit at scale: gpu_matrix_check's list-based read against the seed's per-node approach.

All of it runs in one process against one twin, one after the other, so the
ratios are measured side by side:

- ``list``: what ``gpu_matrix_check`` does (``_matrix_check.run_matrix_check``
  with ``audit``: the matrix and its rules, then paginated lists, nodes 500
  per page, then the pure drift computation);
- ``playbook``: ``playbooks/audit.yml`` end to end as a person or AWX runs it
  (ansible-playbook start-up, the module, the JSON/JUnit/Markdown reports);
- ``per_node``: the approach of the seed article's ``check-versions.sh``: one
  request per node and one per driver pod (``oc get node``; ``oc get pods
  --field-selector spec.nodeName=...``), the way a shell loop would do it.

The cluster is a settled one, as a production cluster is when it is audited:
the twin loads a snapshot of N nodes with every operand pod Running
(``bench/audit_snapshot.py``, built once and cached) and runs at real time
(``--time-scale 1``), so the API server is not sharing the CPU with operators
simulated thousands of times faster than life. ``--live`` starts a fresh twin
instead (its operators still creating pods while the audit runs).

The twin counts the requests it served for each. Run:
    .venv/bin/python -m bench.bench_audit --nodes 1000 10000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.audit_snapshot import ensure_snapshot
from bench.bench_ofed_rollout import ansible_env
from gpufleet_twin.process import TwinProcess, start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".build" / "collections"))

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (  # noqa: E402
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (  # noqa: E402
    NODES,
    PODS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_check import (  # noqa: E402
    DRIVER_POD_SELECTOR,
    MatrixSource,
    run_matrix_check,
)

MATRIX = ROOT / "examples" / "gpu-version-matrix.yaml"


def connect(kubeconfig: pathlib.Path) -> KubeApi:
    return KubeApi.from_params({"kubeconfig": str(kubeconfig)})


def wait_for_driver_pods(api: KubeApi, nodes: int, *, timeout: float) -> float:
    """Until every GPU node has its driver pod (scheduled, not necessarily Running yet).

    The audit reads the same objects either way; at 10,000 nodes the twin
    takes many minutes to start 70,000 operand pods, which this does not wait for.
    """
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        # A real server leaves remainingItemCount out of selector-filtered
        # lists, so count by listing (this is set-up, not measured).
        scheduled = [
            pod
            for pod in api.iter_list(PODS, label_selector=DRIVER_POD_SELECTOR, page_size=5000)
            if (pod.get("spec") or {}).get("nodeName")
        ]
        if len(scheduled) >= nodes:
            return time.monotonic() - start
        time.sleep(10)
    raise RuntimeError(f"the twin did not schedule {nodes} driver pods within {timeout:.0f}s")


def wait_until_idle(
    twin: TwinProcess, *, busy_below: float = 0.1, window: float = 5.0, quiet_windows: int = 3, timeout: float = 600
) -> float:
    """Until the twin's process used less than ``busy_below`` of a core in ``quiet_windows`` windows in a row.

    A twin that has just loaded a snapshot spends a while recomputing
    controller status, in bursts with pauses between them; a production
    cluster being audited is not doing that on the audit's CPU.
    """
    start = time.monotonic()
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu_seconds() -> float:
        fields = pathlib.Path(f"/proc/{twin.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime

    quiet = 0
    while time.monotonic() - start < timeout:
        used = cpu_seconds()
        time.sleep(window)
        quiet = quiet + 1 if cpu_seconds() - used < busy_below * window else 0
        if quiet == quiet_windows:
            return time.monotonic() - start
    raise RuntimeError(f"the twin was still busy after {timeout:.0f}s")


def audit_by_lists(kubeconfig: pathlib.Path) -> dict[str, Any]:
    api = connect(kubeconfig)
    start = time.perf_counter()
    result = run_matrix_check(
        MatrixSource(path=str(MATRIX)), target_stage="canary_testing", audit=True, connect=lambda: api
    )
    return {
        "seconds": time.perf_counter() - start,
        "client_requests": api.requests_sent,
        "nodes_audited": len(result["drift"]["nodes"]),
        "nodes_with_drift": len(result["drift"]["nodes_with_drift"]),
    }


def audit_per_node(kubeconfig: pathlib.Path, *, sample: int) -> dict[str, Any]:
    """The per-node loop over the first ``sample`` nodes (0: all), extrapolated to all of them."""
    api = connect(kubeconfig)
    start = time.perf_counter()
    all_names = [node["metadata"]["name"] for node in api.list(NODES, page_size=500)]
    names = all_names[:sample] if sample else all_names
    versions = {}
    for name in names:
        node = api.get(NODES, name) or {}
        pods = (
            api.request(
                "GET",
                PODS.path(),
                query={"labelSelector": DRIVER_POD_SELECTOR, "fieldSelector": f"spec.nodeName={name}"},
            ).get("items")
            or []
        )
        image = pods[0]["spec"]["containers"][0]["image"] if pods else None
        versions[name] = (node.get("status", {}).get("nodeInfo", {}).get("kernelVersion"), image)
    seconds = time.perf_counter() - start
    scale = len(all_names) / max(len(versions), 1)
    return {
        "seconds": seconds * scale,
        "measured_seconds": seconds,
        "client_requests": api.requests_sent,
        "nodes_audited": len(versions),
        "extrapolated_from": None if scale == 1 else len(versions),
    }


def audit_by_playbook(twin: TwinProcess, out: pathlib.Path) -> dict[str, Any]:
    variables = {"audit_matrix_file": str(MATRIX), "audit_output_dir": str(out), "audit_fail_on_drift": False}
    command = [str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,"]
    command += [str(ROOT / "playbooks" / "audit.yml"), "-e", json.dumps(variables)]
    start = time.perf_counter()
    done = subprocess.run(command, env=ansible_env(twin), cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"audit.yml failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    report = json.loads((out / "audit.json").read_text())
    return {"seconds": seconds, "nodes_audited": report["drift"]["nodes_total"], "api_requests": report["api_requests"]}


def start_cluster(nodes: int, *, live: bool, time_scale: float) -> TwinProcess:
    if live:
        return start_twin(nodes=nodes, profile="openshift", time_scale=time_scale, startup_timeout=300)
    snapshot = ensure_snapshot(nodes)
    return start_twin(
        nodes=nodes,
        profile="openshift",
        time_scale=1.0,
        startup_timeout=900,
        extra_args=("--from-snapshot", str(snapshot)),
    )


def median_of(repeats: int, twin: TwinProcess, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The run with the median time of ``repeats``, with every time in run order and the most requests served.

    The first run is the cold one: the twin encodes each object once per
    version and serves the next lists from that.
    """
    runs = []
    for _attempt in range(repeats):
        twin.admin("POST", "report/reset")
        result = measure()
        result["served_requests"] = twin.report()["requests"]["total"]
        runs.append(result)
    in_order = [round(run["seconds"], 2) for run in runs]
    runs.sort(key=lambda run: run["seconds"])
    median = dict(runs[len(runs) // 2])
    median["all_seconds"] = in_order
    median["served_requests"] = max(run["served_requests"] for run in runs)
    return median


def run(
    nodes: int, *, live: bool, time_scale: float, settle_timeout: float, per_node_sample: int, repeats: int
) -> dict[str, Any]:
    twin = start_cluster(nodes, live=live, time_scale=time_scale)
    try:
        settle = wait_for_driver_pods(connect(twin.kubeconfig), nodes, timeout=settle_timeout)
        if not live:
            settle += wait_until_idle(twin)
        by_lists = median_of(repeats, twin, lambda: audit_by_lists(twin.kubeconfig))
        by_playbook = median_of(
            repeats, twin, lambda: audit_by_playbook(twin, twin.kubeconfig.parent / "audit-reports")
        )
        twin.admin("POST", "report/reset")
        per_node = audit_per_node(twin.kubeconfig, sample=per_node_sample)
        served = twin.report()["requests"]["total"]
        # Requests grow linearly with the nodes visited: extrapolate like the time.
        per_node["served_requests"] = round(served * nodes / per_node["nodes_audited"])
    finally:
        twin.stop()
    return {
        "nodes": nodes,
        "cluster": "live" if live else "settled snapshot",
        "settle_seconds": round(settle, 1),
        "request_budget": math.ceil(nodes / 500) + 15,
        "list": by_lists,
        "playbook": by_playbook,
        "per_node": per_node,
        "speedup": round(per_node["seconds"] / by_lists["seconds"], 1),
        "request_ratio": round(per_node["served_requests"] / max(by_lists["served_requests"], 1), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument(
        "--live", action="store_true", help="audit a freshly started twin instead of a settled snapshot"
    )
    parser.add_argument("--time-scale", type=float, default=3600.0, help="with --live: the twin's time scale")
    parser.add_argument("--settle-timeout", type=float, default=900.0)
    parser.add_argument(
        "--per-node-sample",
        type=int,
        default=1000,
        help="nodes the per-node loop visits before its time is extrapolated to all (0: all)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs of the list audit and of audit.yml (median kept)")
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench" / "results" / "audit.json")
    options = parser.parse_args()
    results = [
        run(
            n,
            live=options.live,
            time_scale=options.time_scale,
            settle_timeout=options.settle_timeout,
            per_node_sample=options.per_node_sample,
            repeats=options.repeats,
        )
        for n in options.nodes
    ]
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(results, indent=2) + "\n")
    for row in results:
        print(
            f"{row['nodes']:>6} nodes: list {row['list']['seconds']:.2f}s / {row['list']['served_requests']} requests "
            f"(budget {row['request_budget']}), audit.yml {row['playbook']['seconds']:.2f}s, "
            f"per-node {row['per_node']['seconds']:.2f}s / "
            f"{row['per_node']['served_requests']} requests: {row['speedup']}x faster, "
            f"{row['request_ratio']}x fewer requests"
        )
    print(f"results: {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
