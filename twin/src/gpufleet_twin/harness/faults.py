"""Fault injection: from the scenario file and from ``/admin/faults``.

Node faults change ``NodeHealth`` (and through the kubelet the Node object)
at simulated time ``at`` (seconds after the cluster was populated):

- ``node_never_returns`` {node}: after its next reboot the node stays NotReady.
- ``reboot`` {node, duration=300}: power-cycle now.
- ``node_not_ready`` {node, duration?}: the kubelet reports NotReady (for ``duration`` s).
- ``driver_build_fails`` {kernel}: no GPU driver builds for that kernel.
- ``cordon`` {node}: ``spec.unschedulable`` plus the taint, as ``kubectl cordon``
  and the node lifecycle controller leave it (e.g. a node cordoned before the
  upgrade began).
- ``ecc_errors`` {node, corrected=0, uncorrected=0, xid=[]}: error counters grow, XIDs are logged.
- ``dcgm_failure`` {node, tests: ["pcie", "memory"...]}: those ``dcgmi diag`` tests fail.
- ``gpu_lost`` {node, count=1}: GPUs fall off the bus (XID 79), capacity drops.
- ``ib_port_down`` {node, device?, port=1, physical_state="Disabled"}: an InfiniBand port goes Down.
- ``secondary_network_down`` {node, duration?}: the node's secondary network goes away.
- ``pdb_never_allows`` {namespace, name}: that PDB never allows an eviction.
- ``mofed_build_fails`` {kernel}: no MOFED driver builds for that kernel (MOFED pods crash-loop).
- ``image_pull_fails`` {image, message?}: no registry serves that image (a reference, or one up to the OS suffix
  the operators append to the tag): pods using it wait in ErrImagePull / ImagePullBackOff, restartCount 0, the
  kubelet retrying the pull with its back-off until the fault is lifted (a driver upgrade then waits in
  pod-restart-required: a pull never counts as a restart, so upstream never marks the node upgrade-failed).
- ``machine_config_fails`` {node, reason?}: the node's next MachineConfig update fails (state Degraded).
- ``validator_fails`` {node, message?}: the GPU Operator's validator pods started on the node from now on
  crash-loop, printing ``message`` (the driver validation fails): a driver upgrade waits in validation-required
  for the controller's 600 s, goes upgrade-failed, and heals from there once its driver pod is Ready, as upstream.
- ``node_step_failures`` {fraction, seed?, steps?, nodes?}: each node step (``driver_build``, ``mofed_build``,
  ``reboot``, ``machine_config``) fails with probability ``fraction``: the driver or MOFED version does not
  build on that node (its pod crash-loops), the node does not come back from that reboot, the MachineConfig
  update leaves it Degraded.  The draw is a hash of (seed, node, step, version built / release applied / the
  node's n-th reboot since the fault began), so the same seed fails the same steps whatever the timing.  The
  steps it failed are listed in ``failed_steps``.
- ``olm_bundle_pruned`` {version, package="gpu-operator-certified"}: a catalog update took that OLM bundle out of
  the catalog (its PackageManifest entries and every channel); a Subscription can no longer install it.
- ``argocd_sync_stalls`` {application?, namespace="argocd", mode="sync"}: the twin's Argo CD (``serve
  --argocd``) runs no sync for that Application (every one without ``application``), automated or requested:
  the sync never arrives; ``mode: controller`` stops reconciling it at all (its status freezes).
- ``argocd_repo_unreachable`` {repoURL?}: the twin's Argo CD cannot read that repository (every one without
  ``repoURL``): the Application's sync status goes Unknown with a ComparisonError condition.

Request faults act on API requests that match ``verb`` (a verb or a list),
``resource`` (plural, ``pods/eviction``, ``*``), optionally ``namespace`` and
``name``, for the next ``count`` matching requests, or for ``duration``
simulated seconds (with a probability ``fraction`` per request):

- ``api_errors`` {code: 500|503|504|429, retry_after=1}
- ``slow`` {delay: real seconds per request}
- ``conflict`` {}: answers 409 Conflict (default verbs: update, patch)

Every fault ends, restoring exactly what it changed (a node's health
fields, the PDB annotation, the kernels without a build, the cordon it set,
the ports it took down...): when it is removed (``DELETE /admin/faults`` for
all, ``DELETE /admin/faults/{id}`` for one) or after ``duration`` simulated
seconds when it has one (``reboot``: its length, default 300).  A fault
without ``duration`` stays active until removed.  What others changed
meanwhile stays: a fault undoes only its own change, and a flag or kernel that
another active fault of the same type also holds stays set until that one ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from aiohttp import web

from ..apiserver.admin import json_response, protected, read_json
from ..apiserver.cluster import RequestInfo, Route, Twin
from ..kube import podutil
from ..kube.state import IbPort, SimState
from ..kube.workloads import NEVER_ALLOW_ANNOTATION
from ..machinery import errors
from ..machinery.kinds import Kinds
from ..machinery.wake import DueTimes, Waker

Obj = dict[str, Any]

NODE_FAULTS = frozenset(
    {
        "node_never_returns",
        "reboot",
        "node_not_ready",
        "driver_build_fails",
        "cordon",
        "ecc_errors",
        "dcgm_failure",
        "gpu_lost",
        "ib_port_down",
        "secondary_network_down",
        "pdb_never_allows",
        "mofed_build_fails",
        "image_pull_fails",
        "machine_config_fails",
        "node_step_failures",
        "olm_bundle_pruned",
        "validator_fails",
        "argocd_sync_stalls",
        "argocd_repo_unreachable",
    }
)
ARGOCD_STALL_MODES = ("sync", "controller")
NODE_STEPS = ("driver_build", "mofed_build", "reboot", "machine_config")
VALIDATOR_FAILURE = (
    "driver validation failed: nvidia-smi: Unable to determine the device handle for GPU0: Unknown Error"
)
REQUEST_FAULTS = frozenset({"api_errors", "slow", "conflict"})
_MESSAGES = {
    500: ("InternalError", "Internal error occurred: the server encountered a temporary problem (injected fault)"),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: (
        "Timeout",
        "the server was unable to return a response in the time allotted, but may still be processing the request",
    ),
}


@dataclass
class Fault:
    id: str
    type: str
    params: Obj
    at: float = 0.0  # simulated seconds after the cluster was populated
    state: str = "pending"  # pending, active, done
    remaining: int | None = None  # request faults limited by count
    active_until: float | None = None  # faults limited by duration (simulated epoch seconds)
    applied_at: str | None = None
    ended_at: str | None = None
    hits: int = 0
    # node_step_failures: the steps it failed, {node, step, key, at}.
    failed_steps: list[Obj] = field(default_factory=list)
    # What applying changed, as calls that put it back (run in reverse order when the fault ends).
    undo: list[Callable[[], None]] = field(default_factory=list, repr=False)

    def describe(self) -> Obj:
        return {
            "id": self.id,
            "type": self.type,
            "at": self.at,
            "state": self.state,
            "applied_at": self.applied_at,
            "ended_at": self.ended_at,
            "remaining": self.remaining,
            "hits": self.hits,
            **({"failed_steps": list(self.failed_steps)} if self.type == "node_step_failures" else {}),
            **self.params,
        }


@dataclass
class _Matcher:
    verbs: frozenset[str] | None
    resource: str | None
    namespace: str | None
    name: str | None

    def matches(self, info: RequestInfo) -> bool:
        if self.verbs is not None and info.verb not in self.verbs:
            return False
        if self.resource not in (None, "*"):
            # "pods" (the resource itself), "pods/eviction", "pods/*" (any), "daemonsets.apps".
            wanted, _, wanted_sub = str(self.resource).partition("/")
            plural, _, group = wanted.partition(".")
            if plural != (info.resource or "") or (group and group != (info.group or "")):
                return False
            if wanted_sub != "*" and (wanted_sub or None) != info.subresource:
                return False
        if self.namespace is not None and info.namespace != self.namespace:
            return False
        return self.name is None or info.name == self.name


@dataclass
class _ActiveRequestFault:
    fault: Fault
    matcher: _Matcher
    rng: random.Random = field(repr=False, default_factory=random.Random)


def validate_fault(spec: Obj) -> None:
    """Raise ValueError when a fault description is not usable."""
    if not isinstance(spec, dict):
        raise ValueError(f"a fault is a mapping, got {type(spec).__name__}")
    kind = spec.get("type")
    if kind not in NODE_FAULTS | REQUEST_FAULTS:
        raise ValueError(f"unknown fault type {kind!r}; known: {', '.join(sorted(NODE_FAULTS | REQUEST_FAULTS))}")
    cluster_wide = {
        "driver_build_fails",
        "image_pull_fails",
        "pdb_never_allows",
        "mofed_build_fails",
        "node_step_failures",
        "olm_bundle_pruned",
        "argocd_sync_stalls",
        "argocd_repo_unreachable",
    }
    if kind == "argocd_sync_stalls" and spec.get("mode", "sync") not in ARGOCD_STALL_MODES:
        raise ValueError(f"fault argocd_sync_stalls: mode must be one of {', '.join(ARGOCD_STALL_MODES)}")
    if kind in NODE_FAULTS - cluster_wide and not (spec.get("node") or spec.get("nodes")):
        raise ValueError(f"fault {kind} needs 'node' (or 'nodes')")
    if kind == "mofed_build_fails" and not spec.get("kernel"):
        raise ValueError("fault mofed_build_fails needs 'kernel'")
    if kind == "driver_build_fails" and not spec.get("kernel"):
        raise ValueError("fault driver_build_fails needs 'kernel'")
    if kind == "image_pull_fails" and not spec.get("image"):
        raise ValueError("fault image_pull_fails needs 'image' (a reference, e.g. nvcr.io/nvidia/driver:570.124.06)")
    if kind == "olm_bundle_pruned" and not spec.get("version"):
        raise ValueError("fault olm_bundle_pruned needs 'version' (the bundle's CSV version, e.g. 24.9.0)")
    if kind == "pdb_never_allows" and not (spec.get("name") and spec.get("namespace")):
        raise ValueError("fault pdb_never_allows needs 'namespace' and 'name'")
    if kind == "node_step_failures":
        fraction = spec.get("fraction")
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
            raise ValueError("fault node_step_failures needs 'fraction', a number from 0 to 1")
        unknown = set(spec.get("steps") or ()) - set(NODE_STEPS)
        if unknown:
            raise ValueError(
                f"fault node_step_failures: unknown steps {sorted(unknown)}; known: {', '.join(NODE_STEPS)}"
            )
    if kind == "api_errors" and int(spec.get("code", 500)) not in (*_MESSAGES, 429):
        raise ValueError("fault api_errors: code must be one of 429, 500, 503, 504")
    if kind == "slow" and float(spec.get("delay", 0)) <= 0:
        raise ValueError("fault slow needs a positive 'delay' (real seconds)")
    if kind in REQUEST_FAULTS and spec.get("count") is None and spec.get("duration") is None:
        raise ValueError(f"fault {kind} needs 'count' (next N requests) or 'duration' (simulated seconds)")
    if spec.get("duration") is not None and float(spec["duration"]) < 0:
        raise ValueError("'duration' counts simulated seconds and cannot be negative")
    if "at" in spec and float(spec["at"]) < 0:
        raise ValueError("'at' counts simulated seconds after start and cannot be negative")


class FaultInjector:
    name = "fault-injector"

    def __init__(self, *, twin: Twin, sim: SimState, kinds: Kinds) -> None:
        self._twin = twin
        self._sim = sim
        self._kinds = kinds
        self._faults: list[Fault] = []
        self._request_faults: list[_ActiveRequestFault] = []
        self._due = DueTimes()
        self._ids = itertools.count(1)
        self._never_allow: set[tuple[str, str]] = set()
        self._waker = Waker(twin.store, twin.clock, on_event=lambda _event: False)

    # -- adding and applying -------------------------------------------------------------------------
    def add(self, spec: Obj) -> Fault:
        validate_fault(spec)
        params = {k: v for k, v in spec.items() if k not in ("type", "at", "id")}
        fault = Fault(
            id=str(spec.get("id") or f"fault-{next(self._ids)}"),
            type=spec["type"],
            params=params,
            at=float(spec.get("at", 0)),
        )
        self._faults.append(fault)
        due = self._sim.started_at + fault.at
        if due <= self._twin.clock.now():
            self._apply(fault)
        else:
            self._due.schedule(("apply", fault.id), due)
            self._waker.poke()
        return fault

    def add_many(self, specs: list[Obj]) -> list[Fault]:
        return [self.add(spec) for spec in specs]

    def faults(self) -> list[Fault]:
        return list(self._faults)

    def clear(self) -> int:
        """End every fault (restoring what each changed) and forget them all."""
        removed = len(self._faults)
        for fault in reversed(self._faults):
            self._end(fault)
        self._faults.clear()
        self._request_faults.clear()
        return removed

    def remove(self, fault_id: str) -> Fault | None:
        """End one fault (restoring what it changed) and forget it; None when there is no such fault."""
        fault = next((f for f in self._faults if f.id == fault_id), None)
        if fault is not None:
            self._end(fault)
            self._faults.remove(fault)
        return fault

    async def run(self, twin: Any) -> None:
        while True:
            now = twin.clock.now()
            for key in self._due.pop_due(now):
                action, fault_id = cast(tuple[str, str], key)
                fault = next((f for f in self._faults if f.id == fault_id), None)
                if fault is None:
                    continue
                if action == "apply":
                    self._apply(fault)
                elif action == "end":
                    self._end(fault)
            next_due = self._due.next_due()
            await self._waker.wait(None if next_due is None else max(0.0, next_due - twin.clock.now()))

    def _apply(self, fault: Fault) -> None:
        now = self._twin.clock.now()
        fault.applied_at = self._twin.clock.iso(now)
        fault.state = "active"
        duration = fault.params.get("duration")
        if fault.type == "reboot":
            duration = fault.params.get("duration", 300)
        if duration is not None:
            fault.active_until = now + float(duration)
            self._due.schedule(("end", fault.id), fault.active_until)
            self._waker.poke()
        if fault.type in REQUEST_FAULTS:
            self._activate_request_fault(fault)
            return
        apply = getattr(self, f"_apply_{fault.type}")
        apply(fault)

    def _end(self, fault: Fault) -> None:
        """Stop a fault: a pending one never applies, an active one puts back what it changed."""
        self._due.cancel(("apply", fault.id))
        self._due.cancel(("end", fault.id))
        if fault.state == "active":
            # Done first, so the undo calls see no other holder in this fault.
            fault.state = "done"
            fault.ended_at = self._twin.clock.iso(self._twin.clock.now())
            for restore in reversed(fault.undo):
                restore()
        fault.state = "done"
        fault.undo.clear()
        self._request_faults = [a for a in self._request_faults if a.fault is not fault]

    def _held_by_another(self, fault: Fault, *, node: str | None = None, key: str | None = None) -> bool:
        """Whether another active fault of the same type holds the same node (or kernel, PDB)."""
        for other in self._faults:
            if other is fault or other.state != "active" or other.type != fault.type:
                continue
            if node is not None and node in self._node_names(other):
                return True
            if key is not None and key == self._key_of(other):
                return True
        return False

    @staticmethod
    def _key_of(fault: Fault) -> str:
        if fault.type == "pdb_never_allows":
            return f"{fault.params.get('namespace')}/{fault.params.get('name')}"
        if fault.type == "olm_bundle_pruned":
            return "/".join(FaultInjector._pruned_bundle(fault))
        if fault.type == "image_pull_fails":
            return str(fault.params.get("image"))
        return str(fault.params.get("kernel"))

    # -- node faults -------------------------------------------------------------------------------------
    def _node_names(self, fault: Fault) -> list[str]:
        names = fault.params.get("nodes") or [fault.params.get("node")]
        return [str(n) for n in names if n]

    def _healths(self, fault: Fault) -> list[Any]:
        found = []
        for name in self._node_names(fault):
            health = self._sim.nodes.get(name)
            if health is None:
                raise errors.bad_request(f'fault {fault.type}: node "{name}" is not a simulated node')
            found.append(health)
        return found

    def _apply_node_never_returns(self, fault: Fault) -> None:
        for health in self._healths(fault):
            health.never_returns = True

            def restore(health: Any = health) -> None:
                if not self._held_by_another(fault, node=health.name):
                    self._let_return(health)

            fault.undo.append(restore)

    def _let_return(self, health: Any) -> None:
        """End a ``never_returns`` hold: a node it kept down boots now."""
        if not health.never_returns:
            return
        held_down = health.rebooting_until is None and not health.ready
        if held_down and not self._held_by_node_not_ready(health.name):
            # The reboot that left it down ends now: the kubelet boots it (new boot id, Ready).
            health.rebooting_until = self._twin.clock.now()
        health.never_returns = False

    def _apply_node_step_failures(self, fault: Fault) -> None:
        fraction = float(fault.params["fraction"])
        seed = str(fault.params.get("seed", fault.id))
        steps = frozenset(fault.params.get("steps") or NODE_STEPS)
        only = set(self._node_names(fault))
        reboots: dict[str, int] = {}
        decided: dict[tuple[str, str, str], bool] = {}

        def draw(node: str, step: str, key: str) -> bool:
            if fault.state != "active" or step not in steps or (only and node not in only):
                return False
            if step == "reboot":  # each reboot is a step of its own: the node's n-th since the fault began
                reboots[node] = reboots.get(node, 0) + 1
                key = str(reboots[node])
            if (node, step, key) not in decided:
                digest = hashlib.sha256(f"{seed}\0{node}\0{step}\0{key}".encode()).digest()
                hit = int.from_bytes(digest[:8], "big") < fraction * 2**64
                decided[node, step, key] = hit
                if hit:
                    fault.hits += 1
                    at = self._twin.clock.iso(self._twin.clock.now())
                    fault.failed_steps.append({"node": node, "step": step, "key": key, "at": at})
            return decided[node, step, key]

        self._sim.step_failure_draws.append(draw)

        def restore() -> None:
            self._sim.step_failure_draws.remove(draw)
            # A build drawn to fail builds at the pod's next try; a node a failed reboot kept down boots now.
            for failed in fault.failed_steps:
                health = self._sim.nodes.get(failed["node"])
                if failed["step"] == "reboot" and health is not None and not self._never_returns_held(health.name):
                    self._let_return(health)

        fault.undo.append(restore)

    def _never_returns_held(self, name: str) -> bool:
        """Whether an active ``node_never_returns`` fault holds the node down."""
        return any(
            f.state == "active" and f.type == "node_never_returns" and name in self._node_names(f) for f in self._faults
        )

    def _held_by_node_not_ready(self, name: str) -> bool:
        return any(
            f.state == "active" and f.type == "node_not_ready" and name in self._node_names(f) for f in self._faults
        )

    def _apply_reboot(self, fault: Fault) -> None:
        for name in self._node_names(fault):
            self._sim.reboot(name, float(fault.params.get("duration", 300)))
            health = self._sim.nodes[name]
            until = health.rebooting_until

            def restore(health: Any = health, until: float | None = until) -> None:
                # Ends the power cycle early when it is still this one (a later reboot stays).
                now = self._twin.clock.now()
                if until is not None and health.rebooting_until == until and until > now:
                    health.rebooting_until = now

            fault.undo.append(restore)

    def _apply_node_not_ready(self, fault: Fault) -> None:
        for health in self._healths(fault):
            health.ready = False

            def restore(health: Any = health) -> None:
                if not self._held_by_another(fault, node=health.name) and health.kubelet_running:
                    health.ready = True

            fault.undo.append(restore)

    def _apply_driver_build_fails(self, fault: Fault) -> None:
        kernel = str(fault.params["kernel"])
        self._sim.kernels_without_driver_build.add(kernel)

        def restore() -> None:
            if not self._held_by_another(fault, key=kernel):
                self._sim.kernels_without_driver_build.discard(kernel)

        fault.undo.append(restore)

    def _apply_mofed_build_fails(self, fault: Fault) -> None:
        kernel = str(fault.params["kernel"])
        self._sim.kernels_without_mofed_build.add(kernel)

        def restore() -> None:
            if not self._held_by_another(fault, key=kernel):
                self._sim.kernels_without_mofed_build.discard(kernel)

        fault.undo.append(restore)

    def _apply_image_pull_fails(self, fault: Fault) -> None:
        image = str(fault.params["image"])
        self._sim.unpullable_images[image] = str(
            fault.params.get("message")
            or f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": not found'
        )

        def restore() -> None:
            if not self._held_by_another(fault, key=image):
                self._sim.unpullable_images.pop(image, None)

        fault.undo.append(restore)

    @staticmethod
    def _pruned_bundle(fault: Fault) -> tuple[str, str]:
        package = str(fault.params.get("package") or "gpu-operator-certified")
        return package, str(fault.params["version"]).removeprefix("v")

    def _apply_olm_bundle_pruned(self, fault: Fault) -> None:
        bundle = self._pruned_bundle(fault)
        self._sim.olm_pruned_bundles.add(bundle)

        def restore() -> None:
            if not self._held_by_another(fault, key="/".join(bundle)):
                self._sim.olm_pruned_bundles.discard(bundle)

        fault.undo.append(restore)

    def _argocd(self, fault: Fault) -> Any:
        controller = self._sim.argocd
        if controller is None:
            raise errors.bad_request(f"fault {fault.type}: the twin runs no Argo CD (serve --argocd)")
        return controller

    def _apply_argocd_sync_stalls(self, fault: Fault) -> None:
        controller = self._argocd(fault)
        name = fault.params.get("application")
        key = f"{fault.params.get('namespace') or 'argocd'}/{name}" if name else "*"
        mode = str(fault.params.get("mode") or "sync")
        controller.stalled.setdefault(key, []).append(mode)

        def restore() -> None:
            _remove_once(controller.stalled.get(key, []), [mode])
            controller.poke()

        fault.undo.append(restore)

    def _apply_argocd_repo_unreachable(self, fault: Fault) -> None:
        controller = self._argocd(fault)
        repo = str(fault.params.get("repoURL") or "*")
        controller.unreachable.append(repo)
        controller.poke()

        def restore() -> None:
            _remove_once(controller.unreachable, [repo])
            controller.poke()

        fault.undo.append(restore)

    def _apply_machine_config_fails(self, fault: Fault) -> None:
        reason = str(fault.params.get("reason") or "failed to update OS: rpm-ostree rebase exited with status 1")
        for name in self._node_names(fault):
            self._sim.machine_config_failures[name] = reason

            def restore(name: str = name) -> None:
                if not self._held_by_another(fault, node=name):
                    self._sim.machine_config_failures.pop(name, None)

            fault.undo.append(restore)

    def _apply_validator_fails(self, fault: Fault) -> None:
        message = str(fault.params.get("message") or VALIDATOR_FAILURE)
        for name in self._node_names(fault):
            self._sim.validator_failures[name] = message

            def restore(name: str = name) -> None:
                if not self._held_by_another(fault, node=name):
                    self._sim.validator_failures.pop(name, None)

            fault.undo.append(restore)

    def _apply_cordon(self, fault: Fault) -> None:
        for name in self._node_names(fault):
            node = self._twin.store.try_get(self._kinds.node, None, name)
            was_cordoned = bool(node is not None and (node.get("spec") or {}).get("unschedulable"))
            cordon_node(self._twin, self._kinds, name)
            if was_cordoned:
                continue  # nothing changed, nothing to put back

            def restore(name: str = name) -> None:
                if not self._held_by_another(fault, node=name):
                    with contextlib.suppress(errors.ApiError):  # the node may be gone by now
                        uncordon_node(self._twin, self._kinds, name)

            fault.undo.append(restore)

    def _apply_ecc_errors(self, fault: Fault) -> None:
        corrected = int(fault.params.get("corrected", 0))
        uncorrected = int(fault.params.get("uncorrected", 0))
        xids = [int(x) for x in fault.params.get("xid", ()) or ()]
        for health in self._healths(fault):
            health.ecc_corrected += corrected
            health.ecc_uncorrected += uncorrected
            health.xid_events.extend(xids)
            self._sim.node_changed(health.name)

            def restore(health: Any = health) -> None:
                health.ecc_corrected = max(0, health.ecc_corrected - corrected)
                health.ecc_uncorrected = max(0, health.ecc_uncorrected - uncorrected)
                _remove_once(health.xid_events, xids)
                self._sim.node_changed(health.name)

            fault.undo.append(restore)

    def _apply_dcgm_failure(self, fault: Fault) -> None:
        tests = [str(t) for t in fault.params.get("tests", ["pcie"])]
        for health in self._healths(fault):
            health.dcgm_failures = [*health.dcgm_failures, *tests]

            def restore(health: Any = health) -> None:
                remaining = list(health.dcgm_failures)
                _remove_once(remaining, tests)
                health.dcgm_failures = remaining

            fault.undo.append(restore)

    def _apply_gpu_lost(self, fault: Fault) -> None:
        for health in self._healths(fault):
            health.xid_events.append(79)  # "GPU has fallen off the bus"
            lost = min(health.gpu_count, int(fault.params.get("count", 1)))
            health.gpu_count -= lost

            def restore(health: Any = health, lost: int = lost) -> None:
                _remove_once(health.xid_events, [79])
                health.gpu_count += lost

            fault.undo.append(restore)

    def _apply_ib_port_down(self, fault: Fault) -> None:
        device = fault.params.get("device")
        port = int(fault.params.get("port", 1))
        physical = str(fault.params.get("physical_state", "Disabled"))
        for health in self._healths(fault):
            targets = [p for p in health.ib_ports if (device is None or p.device == device) and p.port == port]
            if device is None:
                targets = targets[:1]
            added: list[IbPort] = []
            if not targets and device is not None:
                health.ib_ports.append(IbPort(device=str(device), port=port))
                added = targets = health.ib_ports[-1:]
            before = [(p, p.state, p.physical_state) for p in targets if p not in added]
            for ib_port in targets:
                ib_port.state = "Down"
                ib_port.physical_state = physical
            self._sim.node_changed(health.name)

            def restore(health: Any = health, before: Any = before, added: list[IbPort] = added) -> None:
                for ib_port, state, physical_state in before:
                    ib_port.state, ib_port.physical_state = state, physical_state
                health.ib_ports[:] = [p for p in health.ib_ports if not any(p is a for a in added)]
                self._sim.node_changed(health.name)

            fault.undo.append(restore)

    def _apply_secondary_network_down(self, fault: Fault) -> None:
        for health in self._healths(fault):
            health.secondary_network_up = False

            def restore(health: Any = health) -> None:
                if not self._held_by_another(fault, node=health.name):
                    health.secondary_network_up = True

            fault.undo.append(restore)

    def _apply_pdb_never_allows(self, fault: Fault) -> None:
        namespace, name = str(fault.params["namespace"]), str(fault.params["name"])
        self._never_allow.add((namespace, name))

        def annotate(pdb: Obj) -> None:
            pdb["metadata"].setdefault("annotations", {})[NEVER_ALLOW_ANNOTATION] = "true"

        def unannotate(pdb: Obj) -> None:
            (pdb["metadata"].get("annotations") or {}).pop(NEVER_ALLOW_ANNOTATION, None)

        # The PDB may not exist yet: the request hook refuses by name all the same.
        existing = self._twin.store.try_get(self._kinds.pdb, namespace, name)
        annotated_before = bool(
            existing and (existing["metadata"].get("annotations") or {}).get(NEVER_ALLOW_ANNOTATION)
        )
        with contextlib.suppress(errors.ApiError):
            self._twin.store.mutate(self._kinds.pdb, namespace, name, annotate)

        def restore() -> None:
            if self._held_by_another(fault, key=f"{namespace}/{name}"):
                return
            self._never_allow.discard((namespace, name))
            if not annotated_before:
                with contextlib.suppress(errors.ApiError):
                    self._twin.store.mutate(self._kinds.pdb, namespace, name, unannotate)

        fault.undo.append(restore)

    # -- request faults ---------------------------------------------------------------------------------
    def _activate_request_fault(self, fault: Fault) -> None:
        params = fault.params
        verbs = params.get("verb", params.get("verbs"))
        if verbs is None and fault.type == "conflict":
            verbs = ["update", "patch"]
        if isinstance(verbs, str):
            verbs = None if verbs == "*" else [verbs]
        matcher = _Matcher(
            verbs=frozenset(verbs) if verbs else None,
            resource=params.get("resource"),
            namespace=params.get("namespace"),
            name=params.get("name"),
        )
        if params.get("count") is not None:
            fault.remaining = int(params["count"])
        # Seeded: the same seed (by default the fault's id) draws the same sequence of hits.
        seed = int(hashlib.sha256(str(params.get("seed", fault.id)).encode()).hexdigest()[:8], 16)
        self._request_faults.append(_ActiveRequestFault(fault=fault, matcher=matcher, rng=random.Random(seed)))

    async def before_request(self, info: RequestInfo) -> None:
        """The ``before_request`` hook: delay or refuse a request as the active faults say."""
        if info.verb == "create" and info.resource == "pods" and info.subresource == "eviction":
            self._refuse_eviction_under_never_allow(info)
        if not self._request_faults:
            return
        now = self._twin.clock.now()
        for active in list(self._request_faults):
            fault = active.fault
            if fault.active_until is not None and now >= fault.active_until:
                self._retire(active)
                continue
            if not active.matcher.matches(info):
                continue
            fraction = fault.params.get("fraction")
            if fraction is not None and active.rng.random() >= float(fraction):
                continue
            fault.hits += 1
            if fault.remaining is not None:
                fault.remaining -= 1
                if fault.remaining <= 0:
                    self._retire(active)
            if fault.type == "slow":
                await asyncio.sleep(float(fault.params["delay"]))
                continue
            raise self._error_for(fault, info)

    def _retire(self, active: _ActiveRequestFault) -> None:
        self._end(active.fault)

    @staticmethod
    def _error_for(fault: Fault, info: RequestInfo) -> errors.ApiError:
        if fault.type == "conflict":
            return errors.conflict(info.resource or "", info.name or "", info.group or "")
        code = int(fault.params.get("code", 500))
        if code == 429:
            return errors.too_many_requests(
                "Too many requests, please try again later.", int(fault.params.get("retry_after", 1))
            )
        reason, message = _MESSAGES[code]
        return errors.ApiError(code, reason, str(fault.params.get("message") or message))

    def _refuse_eviction_under_never_allow(self, info: RequestInfo) -> None:
        # The API server decides evictions from a live disruption.pdb_status of
        # the matching pods, not from the PDB's status subresource, so zeroing
        # the status would not stop an eviction.  Refuse it here, before the
        # server computes anything, with the answer the server gives when a
        # budget is exhausted.
        if not self._never_allow or info.namespace is None or info.name is None:
            return
        pod = self._twin.store.try_get(self._kinds.pod, info.namespace, info.name)
        if pod is None:
            return
        labels = pod["metadata"].get("labels") or {}
        for namespace, name in sorted(self._never_allow):
            if namespace != info.namespace:
                continue
            pdb = self._twin.store.try_get(self._kinds.pdb, namespace, name)
            if pdb is None or not podutil.label_selector_matcher((pdb.get("spec") or {}).get("selector"))(labels):
                continue
            status = pdb.get("status") or {}
            raise errors.ApiError(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
                {
                    "causes": [
                        {
                            "reason": "DisruptionBudget",
                            "message": f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} "
                            f"healthy pods and has {status.get('currentHealthy', 0)} currently",
                        }
                    ]
                },
            )

    # -- admin endpoints ------------------------------------------------------------------------------------
    def routes(self) -> list[Route]:
        token = self._twin.token
        clock = self._twin.clock

        async def add_faults(request: web.Request) -> web.StreamResponse:
            body = await read_json(request)
            specs = body.get("faults", [body]) if isinstance(body, dict) else body
            if not isinstance(specs, list):
                raise errors.bad_request('expected a fault, a list of faults, or {"faults": [...]}')
            try:
                for spec in specs:
                    validate_fault(spec)
            except (ValueError, TypeError) as exc:
                raise errors.bad_request(str(exc)) from exc
            added = [self.add(spec).describe() for spec in specs]
            return json_response({"faults": added}, status=201)

        async def list_faults(request: web.Request) -> web.StreamResponse:
            return json_response({"faults": [f.describe() for f in self._faults]})

        async def delete_faults(request: web.Request) -> web.StreamResponse:
            fault_id = request.query.get("id")
            if fault_id is None:
                return json_response({"removed": self.clear()})
            return json_response({"removed": 0 if self.remove(fault_id) is None else 1})

        async def delete_fault(request: web.Request) -> web.StreamResponse:
            fault_id = request.match_info["id"]
            fault = self.remove(fault_id)
            if fault is None:
                raise errors.ApiError(404, "NotFound", f'fault "{fault_id}" not found')
            return json_response({"removed": 1, "fault": fault.describe()})

        async def advance_clock(request: web.Request) -> web.StreamResponse:
            body = await read_json(request)
            try:
                seconds = float(body.get("seconds"))
                clock.advance(seconds)
            except (TypeError, ValueError, AttributeError) as exc:
                raise errors.bad_request('expected {"seconds": N} with N >= 0') from exc
            return json_response(self.clock_state())

        async def scale_clock(request: web.Request) -> web.StreamResponse:
            body = await read_json(request)
            try:
                clock.set_time_scale(float(body.get("time_scale")))
            except (TypeError, ValueError, AttributeError) as exc:
                raise errors.bad_request('expected {"time_scale": N} with N > 0') from exc
            return json_response(self.clock_state())

        async def get_clock(request: web.Request) -> web.StreamResponse:
            return json_response(self.clock_state())

        return [
            ("POST", "/admin/faults", protected(token, add_faults)),
            ("GET", "/admin/faults", protected(token, list_faults)),
            ("DELETE", "/admin/faults", protected(token, delete_faults)),
            ("DELETE", "/admin/faults/{id}", protected(token, delete_fault)),
            ("POST", "/admin/clock/advance", protected(token, advance_clock)),
            ("POST", "/admin/clock/scale", protected(token, scale_clock)),
            ("GET", "/admin/clock", protected(token, get_clock)),
        ]

    def clock_state(self) -> Obj:
        clock = self._twin.clock
        now = clock.now()
        return {
            "now": clock.iso(now),
            "epoch_seconds": now,
            "time_scale": clock.time_scale,
            "elapsed_seconds": round(now - self._sim.started_at, 3),
        }


def cordon_node(twin: Twin, kinds: Kinds, name: str) -> None:
    """``kubectl cordon`` plus the taint the node lifecycle controller adds for it."""

    def cordon(node: Obj) -> None:
        spec = node.setdefault("spec", {})
        spec["unschedulable"] = True
        taints = list(spec.get("taints") or [])
        if not any(t.get("key") == podutil.UNSCHEDULABLE_TAINT for t in taints):
            taints.append({"key": podutil.UNSCHEDULABLE_TAINT, "effect": "NoSchedule"})
        spec["taints"] = taints

    twin.store.mutate(kinds.node, None, name, cordon)


def uncordon_node(twin: Twin, kinds: Kinds, name: str) -> None:
    """``kubectl uncordon``: what ``cordon_node`` set, taken away."""

    def uncordon(node: Obj) -> None:
        spec = node.setdefault("spec", {})
        spec.pop("unschedulable", None)
        taints = [t for t in spec.get("taints") or [] if t.get("key") != podutil.UNSCHEDULABLE_TAINT]
        if taints:
            spec["taints"] = taints
        else:
            spec.pop("taints", None)

    twin.store.mutate(kinds.node, None, name, uncordon)


def _remove_once(items: list[Any], removed: list[Any]) -> None:
    """Remove one occurrence of each of ``removed`` from ``items`` (in place), ignoring absent ones."""
    for item in removed:
        with contextlib.suppress(ValueError):
            items.remove(item)
