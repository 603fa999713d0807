"""How the twin holds up at scale: start-up, a paginated list of every node, memory.

Run:
    .venv/bin/python -m bench.bench_twin_scale --nodes 1000 10000
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

from kubernetes import client, config

from gpufleet_twin.process import start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]


def rss_mib(pid: int) -> float:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(nodes: int) -> dict[str, float | int]:
    started = time.perf_counter()
    twin = start_twin(nodes=nodes, profile="openshift", time_scale=60, startup_timeout=300)
    ready = time.perf_counter() - started
    try:
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(twin.kubeconfig)))
        timings = []
        for _attempt in range(3):
            start = time.perf_counter()
            seen, pages, token = 0, 0, None
            while True:
                page = api.list_node(limit=500, _continue=token)
                seen += len(page.items)
                pages += 1
                token = page.metadata._continue
                if not token:
                    break
            timings.append(time.perf_counter() - start)
        return {
            "nodes": nodes,
            "ready_seconds": round(ready, 2),
            "listed": seen,
            "pages": pages,
            "list_seconds_best": round(min(timings), 2),
            "list_seconds_worst": round(max(timings), 2),
            "rss_mib": round(rss_mib(twin.process.pid), 1),
        }
    finally:
        twin.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench" / "results" / "twin_scale.json")
    options = parser.parse_args()
    results = [measure(n) for n in options.nodes]
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(results, indent=2) + "\n")
    for row in results:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
