"""The window estimator on a 200-node snapshot: the table of docs/rehearse.md and its run time.

1. a twin of N GPU workers (openshift, seeded workloads) runs until its DaemonSets are Ready everywhere;
2. ``cluster_snapshot``'s runner reads it into a snapshot folder (read-only, as rehearse.yml does);
3. ``python -m gpufleet_twin.estimate`` rolls a new driver out on that snapshot for each candidate setting
   and seed, in process, and the collection's ``rehearsal`` functions make the table.

    .venv/bin/python -m bench.bench_rehearse_estimate --nodes 200 --seeds 3
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile
import time

from gpufleet_twin.process import start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".build" / "collections"))

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi  # noqa: E402
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rehearsal import (  # noqa: E402
    build_estimate,
    estimate_markdown,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._snapshot import (  # noqa: E402
    SnapshotSettings,
    take_snapshot,
)
from bench.audit_snapshot import wait_settled  # noqa: E402

CANDIDATES = [
    {"maxUnavailable": "5%", "maxParallelUpgrades": 4},
    {"maxUnavailable": "10%", "maxParallelUpgrades": 10},
    {"maxUnavailable": "20%", "maxParallelUpgrades": 20},
]
NEW_DRIVER = "570.124.06"


def snapshot_of_a_twin(nodes: int, *, workdir: pathlib.Path, snapshot: pathlib.Path) -> tuple[dict, float]:
    twin = start_twin(nodes=nodes, profile="openshift", time_scale=600, workdir=workdir / "twin", startup_timeout=300)
    try:
        api = KubeApi.from_params({"kubeconfig": str(twin.kubeconfig)})
        wait_settled(api, settle_timeout=900)
        began = time.monotonic()
        taken = take_snapshot(api, settings=SnapshotSettings(directory=str(snapshot)), check_mode=False, taken_at="")
        return taken, time.monotonic() - began
    finally:
        twin.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jitter", type=float, default=0.15)
    parser.add_argument("--window-hours", type=float, default=8.0)
    parser.add_argument("--max-capacity-loss", type=float, default=0.15)
    parser.add_argument("--workdir", type=pathlib.Path, default=None)
    parser.add_argument("--reuse-snapshot", action="store_true", help="use the workdir's snapshot when it has one")
    options = parser.parse_args()
    workdir = options.workdir or pathlib.Path(tempfile.mkdtemp(prefix="rehearse-bench-"))
    snapshot = workdir / "snapshot"
    snapshot_seconds = 0.0
    if options.reuse_snapshot and (snapshot / "snapshot-info.json").is_file():
        taken = {"counts": json.loads((snapshot / "snapshot-info.json").read_text())["counts"], "api_requests": 0}
    else:
        taken, snapshot_seconds = snapshot_of_a_twin(options.nodes, workdir=workdir, snapshot=snapshot)
    out = workdir / "estimate.json"
    began = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "gpufleet_twin.estimate",
        "--snapshot",
        str(snapshot),
        "--profile",
        "openshift",
        "--candidates",
        json.dumps(CANDIDATES),
        "--seeds",
        str(options.seeds),
        "--jitter",
        str(options.jitter),
        "--driver-version",
        NEW_DRIVER,
        "--out",
        str(out),
    ]
    subprocess.run(command, check=True, timeout=6 * 3600)
    estimate_seconds = time.monotonic() - began
    document = json.loads(out.read_text())
    estimate = build_estimate(document, window_hours=options.window_hours, max_capacity_loss=options.max_capacity_loss)
    print(
        f"snapshot: {taken['counts']['api_v1_nodes.json']} nodes, {taken['api_requests']} requests, "
        f"{snapshot_seconds:.1f} s"
    )
    print(f"estimate: {len(document['runs'])} runs in {estimate_seconds:.0f} s")
    print(
        estimate_markdown(
            estimate["rows"], window_hours=options.window_hours, max_capacity_loss=options.max_capacity_loss
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
