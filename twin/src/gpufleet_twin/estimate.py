"""The window estimator: replay a GPU driver rollout on a snapshot, in process, for candidate settings and seeds.

    python -m gpufleet_twin.estimate --snapshot DIR --candidates '[{"maxUnavailable": "25%",
        "maxParallelUpgrades": 2}, ...]' --seeds 3 --jitter 0.15 --out estimate.json

For each candidate upgrade policy and each seed, a twin is built in this
process from the snapshot folder (the same loader as ``serve
--from-snapshot``), its controllers run on the twin's own clock (no HTTP, no ansible: a run of
hours takes seconds), and the GPU
Operator's upgrade controller of the twin (``operators/upgrade_model.py``, the model
the single rehearsal's stage drives through the API) rolls the driver: every
node held by a canary skip label is released and the ClusterPolicy's
``upgradePolicy`` gets the candidate's ``maxUnavailable`` and
``maxParallelUpgrades``. Each node's driver build-and-load time is the
calibrated one (``--driver-seconds``, else the twin's default) varied by up to
``--jitter`` with a generator seeded by ``(seed, node)``, written into the
Node's ``twin.gpufleet.io/driver-load-seconds`` annotation.

What it does not do that the collection's stage does: halt at the first failed
node (the controller carries on with the others), pause for the stage's own
polling, run the validation gates, or apply failure-domain caps (the upgrade
controller has no such knob). The output is one JSON document with every
run's duration, GPU-hours lost and peak capacity loss; the collection's
``rehearsal`` module turns it into the table and chart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

from .apiserver.server import create_twin, install_crds, load_crd_manifests, own_crds_directory
from .harness.build import populate
from .machinery.kinds import Kinds
from .operators import upgrade_model as um
from .operators.gpu_operator import DRIVER_SECONDS_ANNOTATION

Obj = dict[str, Any]

GPU_PRESENT = "nvidia.com/gpu.present"
DRIVER_LABEL = "nvidia.com/cuda.driver-version.full"  # GFD: the driver loaded on the node
STEP_SECONDS = 5.0  # simulated seconds between two looks at the nodes' states
# Simulated seconds per real second: the clock is only held back by the loop's turns (machinery/clock.py's
# max_step), so a rollout runs as fast as the controllers can work.
TIME_SCALE = 100_000.0
SETTLE_SECONDS = 1800.0


def node_seconds(base: float, *, jitter: float, seed: int, node: str) -> float:
    """``base`` varied by up to +/- ``jitter`` for (seed, node): the rehearsal module's formula."""
    if jitter <= 0:
        return base
    draw = random.Random(f"{seed}:{node}").uniform(-jitter, jitter)
    return round(max(1.0, base * (1 + draw)), 1)


async def _advance(twin: Any, seconds: float) -> None:
    # The controllers run while this task sleeps on the simulated clock, which runs as fast as the loop turns.
    await twin.clock.sleep(seconds)


def _gpu_nodes(twin: Any, kinds: Kinds) -> list[Obj]:
    return [n for n in twin.store.list(kinds.node) if (n["metadata"].get("labels") or {}).get(GPU_PRESENT) == "true"]


async def run_once(
    snapshot: Path,
    *,
    profile: str,
    policy: Obj,
    driver_seconds: float | None,
    jitter: float,
    seed: int,
    max_hours: float,
    driver_version: str | None = None,
) -> Obj:
    """One rollout on a fresh in-process twin of the snapshot; its duration and capacity numbers."""
    twin = create_twin(time_scale=TIME_SCALE)
    install_crds(twin, load_crd_manifests(own_crds_directory()))
    populate(twin, {"nodes": 0, "profile": profile, "scenario": None, "from_snapshot": str(snapshot)})
    kinds = Kinds.from_registry(twin.registry)
    flavor = um.GPU_DRIVER
    if driver_seconds is not None or jitter > 0:
        base = driver_seconds if driver_seconds is not None else (360.0 if profile == "openshift" else 240.0)
        for node in _gpu_nodes(twin, kinds):
            name = node["metadata"]["name"]
            seconds = node_seconds(base, jitter=jitter, seed=seed, node=name)

            def annotate(obj: Obj, seconds: float = seconds) -> None:
                obj["metadata"].setdefault("annotations", {})[DRIVER_SECONDS_ANNOTATION] = str(seconds)

            twin.store.mutate(kinds.node, None, name, annotate)
    twin.start_controllers()
    try:
        for _step in range(int(SETTLE_SECONDS / STEP_SECONDS)):
            await _advance(twin, STEP_SECONDS)
            if _settled(twin, kinds):
                break
        policy_type = twin.registry.get("nvidia.com", "clusterpolicies")
        assert policy_type is not None, "the snapshot has no ClusterPolicy kind"
        (cluster_policy,) = twin.store.list(policy_type)
        recorder = twin.sim.recorder
        recorder.reset()
        started = twin.clock.now()

        def set_policy(obj: Obj) -> None:
            upgrade_policy = obj["spec"]["driver"].setdefault("upgradePolicy", {})
            upgrade_policy.update(policy, autoUpgrade=True)
            if driver_version:
                obj["spec"]["driver"]["version"] = driver_version

        twin.store.mutate(policy_type, None, cluster_policy["metadata"]["name"], set_policy)
        for node in _gpu_nodes(twin, kinds):
            if flavor.skip_label in (node["metadata"].get("labels") or {}):

                def release(obj: Obj) -> None:
                    obj["metadata"]["labels"].pop(flavor.skip_label, None)

                twin.store.mutate(kinds.node, None, node["metadata"]["name"], release)
        target = driver_version or cluster_policy["spec"]["driver"].get("version")
        finished_at = None
        # Read when a node fails: Events expire an hour after they are recorded (--event-ttl), and a run lasts hours.
        reasons: dict[str, str] = {}
        since = twin.clock.iso(started)
        for _step in range(int(max_hours * 3600 / STEP_SECONDS)):
            await _advance(twin, STEP_SECONDS)
            nodes = _gpu_nodes(twin, kinds)
            failed = [_name(n) for n in nodes if _state(n, flavor) == um.STATE_FAILED and _name(n) not in reasons]
            if failed:
                reasons.update(failure_reasons(twin.store.list(kinds.event), failed, since=since))
            if all(_node_finished(node, flavor=flavor, target=target) for node in nodes):
                finished_at = twin.clock.now()
                break
        report = recorder.report()
        states = {_name(n): _state(n, flavor) for n in _gpu_nodes(twin, kinds)}
    finally:
        await twin.stop_controllers()
    summary = summarize(report, started=started, finished_at=finished_at, states=states)
    summary["failure_reasons"] = {name: reasons.get(name, "") for name in summary["failed_nodes"]}
    return summary


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _state(node: Obj, flavor: Any) -> str:
    return str((node["metadata"].get("labels") or {}).get(flavor.state_label, ""))


STATE_CHANGED = "Successfully updated node state label to "


def failure_reasons(events: list[Obj], nodes: list[str], *, since: str) -> dict[str, str]:
    """Per failed node, why, from its Events since ``since`` (the run's start, RFC 3339 as the twin stamps them):
    the last Warning on it (a drain past its timeout, say), else the upgrade state it failed in (the controller
    records a state change as a Normal Event, and some failures, a driver pod that keeps failing or a validation
    past its timeout, only as that change); "" when neither is there."""
    wanted = set(nodes)
    warnings: dict[str, tuple[str, str]] = {}
    states: dict[str, list[tuple[str, str]]] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        name = str(involved.get("name") or "")
        stamp = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if involved.get("kind") != "Node" or name not in wanted or stamp < since:
            continue
        message = str(event.get("message") or "")
        if event.get("type") == "Warning":
            if name not in warnings or stamp >= warnings[name][0]:
                warnings[name] = (stamp, message)
        elif message.startswith(STATE_CHANGED):
            states.setdefault(name, []).append((stamp, message[len(STATE_CHANGED) :]))
    reasons = {}
    for name in sorted(wanted):
        if name in warnings:
            reasons[name] = warnings[name][1]
            continue
        before = [state for _stamp, state in sorted(states.get(name, [])) if state != um.STATE_FAILED]
        reasons[name] = f"failed in {before[-1]}" if before else ""
    return reasons


def _settled(twin: Any, kinds: Kinds) -> bool:
    """Every DaemonSet has its pods Ready where it wants them (what a loaded snapshot recomputes first)."""
    daemonsets = twin.store.list(kinds.daemonset)
    return bool(daemonsets) and all(
        (ds.get("status") or {}).get("numberReady") == (ds.get("status") or {}).get("desiredNumberScheduled")
        for ds in daemonsets
    )


def _node_finished(node: Obj, *, flavor: Any, target: str | None) -> bool:
    """Failed, or done with the target driver loaded (GFD's label), so a node resting from before is not done."""
    state = _state(node, flavor)
    if state == um.STATE_FAILED:
        return True
    return state == um.STATE_DONE and (
        target is None or (node["metadata"].get("labels") or {}).get(DRIVER_LABEL) == target
    )


def summarize(report: Obj, *, started: float, finished_at: float | None, states: dict[str, str]) -> Obj:
    samples = report["gpu_capacity"]["samples"]
    total = max([s["allocatable"] for s in samples] + [report["gpu_capacity"]["current"]])
    lowest = report["gpu_capacity"]["min"]
    duration = None if finished_at is None else round(finished_at - started, 1)
    lost = 0.0
    for index, sample in enumerate(samples):
        end = samples[index + 1]["seconds"] if index + 1 < len(samples) else (duration or sample["seconds"])
        lost += max(0, total - sample["allocatable"]) * max(0.0, end - sample["seconds"])
    return {
        "duration_seconds": duration,
        "finished": finished_at is not None,
        "gpu_hours_lost": round(lost / 3600, 2),
        "peak_capacity_loss": round(1 - lowest / total, 4) if total else 0.0,
        "gpus_total": total,
        "failed_nodes": sorted(name for name, state in states.items() if state == um.STATE_FAILED),
        "nodes": len(states),
    }


def estimate(
    snapshot: Path,
    *,
    profile: str,
    candidates: list[Obj],
    seeds: int,
    jitter: float,
    driver_seconds: float | None,
    max_hours: float,
    driver_version: str | None = None,
) -> Obj:
    began = time.monotonic()
    runs = []
    for candidate in candidates:
        for seed in range(seeds):
            result = asyncio.run(
                run_once(
                    snapshot,
                    profile=profile,
                    policy=candidate,
                    driver_seconds=driver_seconds,
                    jitter=jitter,
                    seed=seed,
                    max_hours=max_hours,
                    driver_version=driver_version,
                )
            )
            runs.append({"candidate": candidate, "seed": seed, **result})
    return {
        "snapshot": str(snapshot),
        "profile": profile,
        "jitter": jitter,
        "seeds": seeds,
        "driver_seconds": driver_seconds,
        "driver_version": driver_version,
        "runs": runs,
        "wall_seconds": round(time.monotonic() - began, 1),
    }


# The fields of the ClusterPolicy CRD's spec.driver.upgradePolicy (nvidia.com/v1) a candidate may set.
CANDIDATE_FIELDS = ("drain", "maxParallelUpgrades", "maxUnavailable", "podDeletion", "waitForCompletion")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshot", type=Path, required=True)
    parser.add_argument("--profile", choices=("openshift", "kubernetes"), default="openshift")
    parser.add_argument("--candidates", required=True, help="JSON list of upgradePolicy fields per candidate")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jitter", type=float, default=0.15)
    parser.add_argument("--driver-seconds", type=float, default=None)
    parser.add_argument("--max-hours", type=float, default=72.0)
    parser.add_argument("--driver-version", default=None, help="target driver (default: the ClusterPolicy's)")
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args(argv)
    try:
        candidates = json.loads(options.candidates)
    except ValueError as exc:
        print(f"--candidates: not JSON ({exc})", file=sys.stderr)
        return 2
    if not isinstance(candidates, list) or not all(isinstance(c, dict) for c in candidates) or not candidates:
        print("--candidates: expected a JSON list of objects", file=sys.stderr)
        return 2
    unknown = sorted({key for candidate in candidates for key in candidate} - set(CANDIDATE_FIELDS))
    if unknown:
        print(
            f"--candidates: {', '.join(unknown)} not a field of the ClusterPolicy's driver.upgradePolicy that the "
            f"estimate sets ({', '.join(CANDIDATE_FIELDS)}; autoUpgrade is always on: the estimate drives the "
            "upgrade controller, which has no failure-domain caps)",
            file=sys.stderr,
        )
        return 2
    if not options.snapshot.is_dir() or not 0 <= options.jitter < 1 or options.seeds < 1:
        print("--snapshot must be a folder, --jitter in [0, 1), --seeds at least 1", file=sys.stderr)
        return 2
    result = estimate(
        options.snapshot,
        profile=options.profile,
        candidates=candidates,
        seeds=options.seeds,
        jitter=options.jitter,
        driver_seconds=options.driver_seconds,
        max_hours=options.max_hours,
        driver_version=options.driver_version,
    )
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(result, indent=1))
    print(f"{len(result['runs'])} runs in {result['wall_seconds']} s -> {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
