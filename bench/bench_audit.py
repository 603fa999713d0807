"""The drift audit at scale: gpu_matrix_check's list-based read against the seed's per-node approach.

Both run in the same process against the same twin, one after the other, so
the ratio is measured side by side:

- ``list``: what ``gpu_matrix_check`` does (``_matrix_check.observe_cluster``:
  paginated lists, nodes 500 per page), then the pure drift computation;
- ``per_node``: the approach of the seed article's ``check-versions.sh``: one
  request per node and one per driver pod (``oc get node``; ``oc get pods
  --field-selector spec.nodeName=...``), the way a shell loop would do it.

The twin counts the requests it served for each. Run:
    .venv/bin/python -m bench.bench_audit --nodes 1000 10000
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time
from typing import Any

from gpufleet_twin.process import start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".build" / "collections"))

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import NODES, PODS, KubeApi  # noqa: E402
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


def run(nodes: int, *, time_scale: float, settle_timeout: float, per_node_sample: int) -> dict[str, Any]:
    twin = start_twin(nodes=nodes, profile="openshift", time_scale=time_scale, startup_timeout=300)
    try:
        settle = wait_for_driver_pods(connect(twin.kubeconfig), nodes, timeout=settle_timeout)
        twin.admin("POST", "report/reset")
        by_lists = audit_by_lists(twin.kubeconfig)
        by_lists["served_requests"] = twin.report()["requests"]["total"]
        twin.admin("POST", "report/reset")
        per_node = audit_per_node(twin.kubeconfig, sample=per_node_sample)
        served = twin.report()["requests"]["total"]
        # Requests grow linearly with the nodes visited: extrapolate like the time.
        per_node["served_requests"] = round(served * nodes / per_node["nodes_audited"])
    finally:
        twin.stop()
    return {
        "nodes": nodes,
        "settle_seconds": round(settle, 1),
        "request_budget": math.ceil(nodes / 500) + 15,
        "list": by_lists,
        "per_node": per_node,
        "speedup": round(per_node["seconds"] / by_lists["seconds"], 1),
        "request_ratio": round(per_node["served_requests"] / max(by_lists["served_requests"], 1), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--time-scale", type=float, default=3600.0)
    parser.add_argument("--settle-timeout", type=float, default=900.0)
    parser.add_argument(
        "--per-node-sample",
        type=int,
        default=1000,
        help="nodes the per-node loop visits before its time is extrapolated to all (0: all)",
    )
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench" / "results" / "audit.json")
    options = parser.parse_args()
    results = [
        run(
            n,
            time_scale=options.time_scale,
            settle_timeout=options.settle_timeout,
            per_node_sample=options.per_node_sample,
        )
        for n in options.nodes
    ]
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(results, indent=2) + "\n")
    for row in results:
        print(
            f"{row['nodes']:>6} nodes: list {row['list']['seconds']:.2f}s / {row['list']['served_requests']} requests "
            f"(budget {row['request_budget']}), per-node {row['per_node']['seconds']:.2f}s / "
            f"{row['per_node']['served_requests']} requests: {row['speedup']}x faster, "
            f"{row['request_ratio']}x fewer requests"
        )
    print(f"results: {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
