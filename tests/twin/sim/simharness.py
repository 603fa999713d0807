"""In-process harness for the simulation core's tests (imported by them and by conftest).

``make_cluster`` builds a twin with the real API machinery (built-in kinds,
defaulting, graceful pod deletion from ``server.install_api_machinery``),
seeds nodes with ``sim.seed`` and wires the core controllers with
``sim.build.install_core``.  ``SimCluster.run_for`` advances the simulated
clock in steps and lets the controllers react between steps, so a test
covers minutes of simulated time in a fraction of a real second.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from gpufleet_twin.apiserver.cluster import Twin
from gpufleet_twin.apiserver.server import install_api_machinery
from gpufleet_twin.harness.build import CoreSim, install_core
from gpufleet_twin.harness.recorder import Recorder
from gpufleet_twin.harness.seed import SeedSpec, seed_cluster
from gpufleet_twin.kube.state import SimState
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.kinds import Kinds
from gpufleet_twin.machinery.registry import Registry
from gpufleet_twin.machinery.store import Store
from gpufleet_twin.process import TwinProcess

Obj = dict[str, Any]
START = 1_760_000_000.0


@dataclass
class SimCluster:
    twin: Twin
    sim: SimState
    core: CoreSim
    kinds: Kinds
    workers: list[str]

    @property
    def store(self) -> Store:
        return self.twin.store

    def node(self, name: str) -> Obj:
        return self.store.get(self.kinds.node, None, name)

    def pods(self, namespace: str | None = None, *, live: bool = False) -> list[Obj]:
        found = self.store.list(self.kinds.pod, namespace)
        return [p for p in found if not p["metadata"].get("deletionTimestamp")] if live else found

    def pod(self, namespace: str, name: str) -> Obj | None:
        return self.store.try_get(self.kinds.pod, namespace, name)

    def create(self, kind: str, obj: Obj) -> Obj:
        return self.store.create(getattr(self.kinds, kind), obj)

    def events(self, reason: str | None = None) -> list[Obj]:
        return [e for e in self.store.list(self.kinds.event) if reason is None or e.get("reason") == reason]

    async def settle(self) -> None:
        """Let every controller run until it waits again."""
        for _ in range(4):
            await asyncio.sleep(0.001)

    async def run_for(self, sim_seconds: float, *, step: float = 1.0) -> None:
        await self.settle()
        elapsed = 0.0
        while elapsed < sim_seconds:
            delta = min(step, sim_seconds - elapsed)
            self.twin.clock.advance(delta)
            elapsed += delta
            await self.settle()

    async def wait_until(self, condition: Callable[[], bool], *, sim_seconds: float, step: float = 1.0) -> bool:
        """Advance the clock until ``condition`` holds; False if it did not within ``sim_seconds``."""
        await self.settle()
        elapsed = 0.0
        while not condition():
            if elapsed >= sim_seconds:
                return False
            self.twin.clock.advance(step)
            elapsed += step
            await self.settle()
        return True


def make_cluster(
    *,
    nodes: int = 3,
    profile: str = "kubernetes",
    workloads: bool = False,
    cordoned: tuple[str, ...] = (),
    with_recorder: bool = False,
    ca_pem: str = "",
    distributed_training: bool = False,
) -> SimCluster:
    """A seeded cluster with the core controllers (not started); call inside the event loop."""
    clock = SimClock(time_scale=1.0, start=START)
    registry = Registry()
    twin = Twin(registry=registry, store=Store(registry, clock), clock=clock, ca_cert_pem=ca_pem.encode())
    install_api_machinery(twin)
    sim = SimState(clock=clock, profile=profile, started_at=clock.now())
    spec = SeedSpec(
        nodes=nodes,
        profile=profile,
        workloads=workloads,
        cordoned=cordoned,
        distributed_training=distributed_training,
    )
    seeded = seed_cluster(twin, sim, spec)
    kinds = Kinds.from_registry(registry)
    if with_recorder:
        sim.recorder = Recorder(twin=twin, kinds=kinds)
    core = install_core(twin, sim)
    return SimCluster(twin=twin, sim=sim, core=core, kinds=kinds, workers=seeded.worker_names)


def pod_manifest(
    name: str,
    *,
    namespace: str = "default",
    gpus: int = 0,
    node: str | None = None,
    annotations: dict[str, str] | None = None,
    command: list[str] | None = None,
    restart_policy: str = "Always",
    labels: dict[str, str] | None = None,
) -> Obj:
    container: Obj = {"name": "main", "image": "registry.example/tools:1.0"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if command:
        container["command"] = command
    spec: Obj = {"containers": [container], "restartPolicy": restart_policy}
    if node:
        spec["nodeName"] = node
    meta: Obj = {"name": name, "namespace": namespace, "labels": labels or {"app": name}}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": spec}


def run_scenario(scenario: Callable[[SimCluster], Awaitable[None]], **cluster_options: Any) -> None:
    """Run ``scenario(cluster)`` with a fresh cluster whose controllers run around it (bounded)."""

    async def main() -> None:
        cluster = make_cluster(**cluster_options)
        cluster.twin.start_controllers()
        try:
            await asyncio.wait_for(scenario(cluster), timeout=60)
        finally:
            await cluster.twin.stop_controllers()

    asyncio.run(main())


def kubectl_run(
    twin: TwinProcess, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """Run the real kubectl against a served twin; with ``check``, a non-zero exit fails the test with its stderr."""
    # A discovery cache of this twin's own: twins reuse ports, and ~/.kube/cache would answer with an earlier
    # twin's API groups (an --argocd twin's Application kind then "not found").
    env = dict(twin.env(), KUBECACHEDIR=str(twin.kubeconfig.parent / "kube-cache"))
    out = subprocess.run(
        ["kubectl", "--kubeconfig", str(twin.kubeconfig), *args],
        check=False,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=30,
        env=env,
    )
    if check:
        assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    return out
