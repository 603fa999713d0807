# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""NIC firmware over the Kubernetes nodes, one BMC per node, with the shared rollout engine (collection-internal).

No in-cluster controller flashes firmware, so the collection's rollout
engine does the node work, with the budget, parallelism, canary-first order,
progress annotations and halt-on-first-failure every rollout shares. Per node:

  cordon -> evict GPU and secondary-network pods (PDB-aware) -> flash (upload,
  jobs scheduled) -> reboot (host reset, jobs run in POST, BMC sees the host
  back) -> wait for the Node Ready after the reboot with its GPUs allocatable
  -> verify the versions from the BMC -> uncordon

Before any node is touched every target BMC is read (reachable, credentials,
current versions, what it needs); images are checked against their sha256
first of all. Nodes whose firmware already is the target are not targets:
a second run changes nothing. A failed job, an unreachable BMC or a host that
does not come back fails the node's step: the engine leaves the node
cordoned, records a Warning Event naming the step and the BMC's message, and
halts the rollout.

A rollback (``undo``) knows per node how far an earlier run to another
target got: a node it stopped before ``flash`` never changed, and a node
whose BMC inventory, read again in the preflight, shows it runs the rollback's
target with no job waiting (a job that failed before it applied anything)
has nothing to undo. Either is released without a step (uncordoned, its
progress annotations removed, nothing evicted); a node whose firmware did
change is rolled back from the first step.

Node -> BMC: the ``bmcs`` list (from inventory host vars) or the node's
``gpufleet.io/bmc-address`` annotation.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import AlertsGate
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    GpuFleetError,
    InvalidInputError,
    RedfishError,
    RolloutHaltedError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_flash import (
    BmcFlasher,
    FlashOptions,
    JobRecord,
    LoadedImages,
    check_remote_images,
    installed_versions,
    load_images,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import FlashPlan
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import (
    GPU_RESOURCE,
    PodSelection,
    gpus_missing,
    label_selector_matches,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    NODES,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    GPU_EVICTION_FILTER,
    RDMA_EVICTION_FILTER,
    MaintenanceChoice,
    drain_spec,
    resolve_settings,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish import RedfishClient, RedfishSettings
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import (
    MaxUnavailable,
    node_name,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_engine import (
    NodeStep,
    ProgressKeys,
    RolloutSettings,
    StepContext,
    drain_step,
    run_rollout,
    unfinished_nodes,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

BMC_ADDRESS_ANNOTATION = "gpufleet.io/bmc-address"
# The first step that changes a node's firmware: jobs scheduled on its BMC apply at the next reset.
FLASH_STEP = "flash"
SCOPES = ("canary", "all")
_PREFLIGHT_THREADS = 8


@dataclass(frozen=True)
class BmcAccess:
    """Where a node's BMC is and how to log in (the password is never put in a result)."""

    node: str
    address: str
    username: str
    password: str = field(repr=False)
    source: str = ""  # inventory | annotation


@dataclass(frozen=True)
class RolloutOptions:
    flash: FlashOptions
    scope: str = "all"
    nodes: Tuple[str, ...] = ()
    node_selector: str = ""
    canary_label: str = "gpu-canary"
    bmcs: Tuple[BmcAccess, ...] = ()
    bmc_addresses: Mapping[str, str] = field(default_factory=dict)  # node -> address (inventory host vars)
    bmc_username: str = ""
    bmc_password: str = field(default="", repr=False)
    bmc_validate_certs: bool = True
    bmc_ca_path: Optional[str] = None
    bmc_timeout: float = 30.0
    bmc_address_annotation: str = BMC_ADDRESS_ANNOTATION
    rollout_name: str = "nic-firmware"
    max_unavailable: MaxUnavailable = 1
    max_parallel: int = 1
    failure_domain_label: str = ""
    max_per_domain: int = 1
    budget_wait_timeout: float = 0.0
    drain_timeout: float = 900.0
    node_ready_timeout: float = 1800.0
    wait_sleep: float = 10.0
    preflight_only: bool = False
    # This run undoes an earlier rollout to another target: nodes it left with nothing to undo are released.
    undo: bool = False
    check_mode: bool = False
    # Return the firmware versions before and after, per node (diff mode).
    diff: bool = False
    # The alerts gate, asked before each node.
    alerts: Optional[AlertsGate] = None
    # Drain through the NVIDIA Maintenance Operator (node_maintenance).
    node_maintenance: MaintenanceChoice = field(default_factory=MaintenanceChoice)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise InvalidInputError(f"scope must be one of {', '.join(SCOPES)}, got {self.scope!r}")
        if self.wait_sleep <= 0 or self.drain_timeout < 0 or self.node_ready_timeout < 0:
            raise InvalidInputError("wait_sleep must be > 0 and the timeouts >= 0")


# -- pure: which nodes, which BMC, which target -------------------------------------------------


def rollout_target_label(options: RolloutOptions) -> str:
    """What the progress annotations record as the target: one rollout per distinct target."""
    parts = [f"{spec.label}={spec.version or 'previous'}" for spec in options.flash.components]
    prefix = "rollback:" if options.flash.rollback else ""
    return prefix + ",".join(parts)


def select_targets(nodes: Sequence[Mapping[str, Any]], *, options: RolloutOptions) -> Tuple[List[str], List[str]]:
    """(targets, canaries) among the pool's Node objects for the scope."""
    by_name = {node_name(node): node for node in nodes}
    if options.nodes:
        unknown = [name for name in options.nodes if name not in by_name]
        if unknown:
            raise InvalidInputError(f"Nodes not in the pool ({options.node_selector or 'all nodes'}): {unknown}")
        candidates = list(options.nodes)
    else:
        candidates = sorted(by_name)
    canary_selector = f"{options.canary_label}=true" if options.canary_label else ""
    canaries = [
        name
        for name in candidates
        if canary_selector
        and label_selector_matches(canary_selector, (by_name[name].get("metadata") or {}).get("labels"))
    ]
    if options.scope == "canary":
        if not canaries:
            raise InvalidInputError(
                f"No canary node: label one with {canary_selector} (kubectl label node <name> {canary_selector})"
            )
        return canaries, canaries
    return candidates, canaries


def bmc_for_nodes(
    nodes: Sequence[Mapping[str, Any]], names: Sequence[str], *, options: RolloutOptions
) -> Tuple[Dict[str, BmcAccess], List[str]]:
    """Each node's BMC from the given list, else the address map (inventory), else its annotation."""
    given = {access.node: access for access in options.bmcs}
    by_name = {node_name(node): node for node in nodes}
    found: Dict[str, BmcAccess] = {}
    missing = []
    for name in names:
        access = given.get(name)
        if access is not None:
            found[name] = BmcAccess(
                node=name,
                address=access.address,
                username=access.username or options.bmc_username,
                password=access.password or options.bmc_password,
                source="inventory",
            )
            continue
        annotations = (by_name.get(name, {}).get("metadata") or {}).get("annotations") or {}
        address = str(options.bmc_addresses.get(name) or "")
        source = "inventory"
        if not address:
            address = str(annotations.get(options.bmc_address_annotation) or "")
            source = "annotation"
        if address:
            found[name] = BmcAccess(
                node=name, address=address, username=options.bmc_username, password=options.bmc_password,
                source=source,
            )  # fmt: skip
        else:
            missing.append(name)
    return found, missing


def gpus_back(node: Optional[Mapping[str, Any]], *, previous_boot_id: str) -> bool:
    """Ready, rebooted (a new boot ID) and every GPU it has allocatable again."""
    if node is None:
        return False
    status = node.get("status") or {}
    boot_id = str((status.get("nodeInfo") or {}).get("bootID") or "")
    if previous_boot_id and boot_id == previous_boot_id:
        return False
    return not gpus_missing(node)


def nothing_to_undo(reports: Sequence[Mapping[str, Any]]) -> Tuple[str, ...]:
    """Nodes whose BMC, read in the preflight, shows the target installed and no update job waiting.

    A job the BMC reports failed may have applied some of its image or none: the inventory, not the job's
    state, says whether the firmware changed.
    """
    return tuple(entry["node"] for entry in reports if not entry["needs_work"] and not entry["pending_jobs"])


def failures_of(result: Mapping[str, Any]) -> List[Dict[str, str]]:
    """The nodes that failed, with the step and the reason (the BMC's message), for the caller's report."""
    failures = []
    for entry in result.get("timeline") or []:
        if entry.get("outcome") == "failed":
            failures.append(
                {"node": entry.get("node", ""), "step": entry.get("failed_step", ""), "reason": entry.get("error", "")}
            )
    for entry in (result.get("plan") or {}).get("halted_by") or []:
        failures.append({"node": entry.get("node", ""), "step": "earlier run", "reason": entry.get("why", "")})
    return failures


# -- I/O ------------------------------------------------------------------------------------------------


class NodeFirmware:
    """The BMC side of the per-node steps; one instance per rollout, state per node."""

    def __init__(
        self, api: KubeApi, options: RolloutOptions, bmcs: Mapping[str, BmcAccess], images: LoadedImages
    ) -> None:
        self.api = api
        self.options = options
        self.bmcs = bmcs
        self.images = images
        self._lock = threading.Lock()
        self._boot_ids: Dict[str, str] = {}
        self._jobs: Dict[str, List[JobRecord]] = {}
        self._plans: Dict[str, FlashPlan] = {}
        self.after: Dict[str, Dict[str, str]] = {}

    def settings(self, node: str) -> RedfishSettings:
        access = self.bmcs[node]
        return RedfishSettings(
            baseurl=access.address,
            username=access.username,
            password=access.password,
            validate_certs=self.options.bmc_validate_certs,
            ca_path=self.options.bmc_ca_path,
            timeout=self.options.bmc_timeout,
        )

    def _with_flasher(self, node: str, action: Callable[[BmcFlasher], Dict[str, Any]]) -> Dict[str, Any]:
        client = RedfishClient(self.settings(node))
        session = client.session()
        with session:
            flasher = BmcFlasher(client, self.options.flash, images=self.images)
            with self._lock:
                carried = list(self._jobs.get(node, []))
            flasher.carry_over(carried)
            detail = action(flasher)
        if session.warning:
            detail.setdefault("warnings", []).append(session.warning)
        return detail

    # -- preflight ---------------------------------------------------------------------------------
    def preflight(self, node: str) -> Dict[str, Any]:
        """Read-only: reachable, credentials, inventory, plan, jobs already waiting."""

        def look(flasher: BmcFlasher) -> Dict[str, Any]:
            plan = flasher.plan()
            pending = flasher.pending_jobs() if plan.changes else []
            if (plan.changes or pending) and self.options.flash.apply_time != "Immediate":
                flasher.check_reset_type()  # the reboot step resets the host
            with self._lock:
                self._plans[node] = plan
            return {
                "adapter": flasher.adapter.name,
                "needs_work": bool(plan.changes),
                "components": plan.as_dict(),
                "versions": plan.versions(),
                "planned_versions": plan.versions_after(),
                "pending_jobs": pending,
            }

        entry = {"node": node, "bmc": self.bmcs[node].address, "bmc_from": self.bmcs[node].source}
        entry.update(self._with_flasher(node, look))
        return entry

    # -- steps ---------------------------------------------------------------------------------------
    def _boot_id(self, node: str) -> str:
        seen = self.api.get(NODES, node) or {}
        return str(((seen.get("status") or {}).get("nodeInfo") or {}).get("bootID") or "")

    def _expect_reboot(self, node: str, boot_id: str) -> None:
        """wait-node-ready will wait for a boot ID other than ``boot_id`` (read before anything could reboot)."""
        with self._lock:
            self._boot_ids.setdefault(node, boot_id)

    def flash(self, context: StepContext) -> Dict[str, Any]:
        node = context.node_name
        with self._lock:
            self._boot_ids.pop(node, None)
        boot_id = self._boot_id(node)  # before any job runs: an Immediate one may reboot the host

        def run(flasher: BmcFlasher) -> Dict[str, Any]:
            pending = flasher.pending_jobs()
            if pending:
                # An interrupted earlier attempt scheduled them: the reboot step applies them first.
                adopted = flasher.adopt_pending(pending)
                with self._lock:
                    self._jobs[node] = adopted
                return {"adopted_pending_jobs": [job.as_dict() for job in adopted]}
            plan = flasher.plan()
            with self._lock:
                self._plans[node] = plan
            if not plan.changes:
                return {"nothing_to_flash": True, "components": plan.as_dict()}
            flasher.check_remote_images(plan)
            started = flasher.upload(plan)
            with self._lock:
                self._jobs[node] = started
            if self.options.flash.apply_time == "Immediate" and flasher.resets_host(plan):
                self._expect_reboot(node, boot_id)
            return {"jobs": [job.as_dict() for job in started], "components": plan.as_dict()}

        return self._with_flasher(node, run)

    def reboot(self, context: StepContext) -> Dict[str, Any]:
        node = context.node_name
        options = self.options.flash

        def run(flasher: BmcFlasher) -> Dict[str, Any]:
            if not flasher.jobs:
                flasher.adopt_pending(flasher.pending_jobs())
            waiting = flasher.waiting_for_reset()
            detail: Dict[str, Any] = {}
            if options.apply_time != "Immediate" and waiting:
                self._expect_reboot(node, self._boot_id(node))
                detail["reset"] = flasher.reset_host()
            elif not flasher.jobs:
                return {"reset": None, "why": "no update job waits for a reset"}
            flasher.finish_jobs(flasher.jobs, timeout=options.job_timeout + options.reboot_timeout)
            detail["host_back_after"] = round(flasher.wait_host_up(timeout=options.reboot_timeout), 3)
            if flasher.reboot_pending():
                # Flashed, active only after a power cycle: done when allowed, else the node fails here, named.
                self._expect_reboot(node, self._boot_id(node))
                detail["power_cycle"] = flasher.settle_reboot_pending()
            detail["jobs"] = [job.as_dict() for job in flasher.jobs]
            with self._lock:
                self._jobs[node] = []
            return detail

        return self._with_flasher(node, run)

    def wait_node(self, context: StepContext) -> Dict[str, Any]:
        node = context.node_name
        with self._lock:
            # Only a reset, or an Immediate host update, reboots the host; the BMC's own update
            # (or a resumed node with nothing left to apply) brings no new boot ID to wait for.
            boot_id = self._boot_ids.get(node, "")
        what = f"node {node} to be Ready" + (" after its reboot" if boot_id else "") + " with its GPUs allocatable"
        try:
            outcome = wait_until(
                lambda: self.api.get(NODES, node),
                lambda seen: gpus_back(seen, previous_boot_id=boot_id),
                timeout=self.options.node_ready_timeout,
                sleep=self.options.wait_sleep,
                what=what,
            )
        except WaitTimeoutError as err:
            raise GpuFleetError(
                f"{err.msg}: the host behind BMC {self.bmcs[node].address} did not come back "
                "(check its console through the BMC)"
            ) from err
        status = (outcome.value or {}).get("status") or {}
        return {
            "elapsed": round(outcome.elapsed, 3),
            "boot_id": str((status.get("nodeInfo") or {}).get("bootID") or ""),
            "gpus_allocatable": (status.get("allocatable") or {}).get(GPU_RESOURCE),
        }

    def verify(self, context: StepContext) -> Dict[str, Any]:
        node = context.node_name

        def run(flasher: BmcFlasher) -> Dict[str, Any]:
            with self._lock:
                plan = self._plans.get(node)
            if plan is None:
                plan = flasher.plan()
            inventory = flasher.verify(plan)
            versions = installed_versions(inventory, plan)
            with self._lock:
                self.after[node] = versions
            return {"versions": versions}

        return self._with_flasher(node, run)


def steps(api: KubeApi, firmware: NodeFirmware, options: RolloutOptions) -> List[NodeStep]:
    flash = options.flash
    return [
        drain_step(
            api,
            selection=PodSelection(gpu=True, secondary_network=True),
            timeout=options.drain_timeout,
            sleep=min(options.wait_sleep, 5.0),
        ),
        NodeStep(
            name=FLASH_STEP,
            run=firmware.flash,
            description=(
                "upload the image(s) to the node's BMC (or roll back to its Previous image) and follow each job until "
                + ("it runs (the BMC reboots the host)" if flash.apply_time == "Immediate" else "it waits for a reset")
            ),
        ),
        NodeStep(
            name="reboot",
            run=firmware.reboot,
            description=(
                f"reset the host ({flash.reset_type}) through the BMC, follow the jobs to their end "
                f"and wait up to {flash.reboot_timeout:.0f}s for the BMC to see the host back"
            ),
        ),
        NodeStep(
            name="wait-node-ready",
            run=firmware.wait_node,
            description=(
                f"wait up to {options.node_ready_timeout:.0f}s for the Node to be Ready after the reboot "
                f"(new boot ID) with all its {GPU_RESOURCE} allocatable"
            ),
        ),
        NodeStep(name="verify-firmware", run=firmware.verify, description="read the versions back from the BMC"),
    ]


def _preflight_all(firmware: NodeFirmware, names: Sequence[str]) -> Tuple[List[Dict[str, Any]], List[Dict[str, str]]]:
    reports: List[Dict[str, Any]] = []
    problems: List[Dict[str, str]] = []
    if not names:
        return reports, problems
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(_PREFLIGHT_THREADS, len(names))) as executor:
        futures = {executor.submit(firmware.preflight, name): name for name in names}
        for future in concurrent.futures.as_completed(futures):
            name = futures[future]
            try:
                reports.append(future.result())
            except GpuFleetError as err:
                problems.append({"node": name, "bmc": firmware.bmcs[name].address, "reason": err.msg})
    reports.sort(key=lambda entry: entry["node"])
    problems.sort(key=lambda entry: entry["node"])
    return reports, problems


def observed_versions(reports: Sequence[Mapping[str, Any]]) -> Dict[str, Dict[str, str]]:
    """Per component (the matrix key), the versions the BMCs' inventories showed before the rollout: what the
    report's "before" is (the matrix says what should run; the BMC says what does)."""
    seen: Dict[str, Dict[str, int]] = {}
    for report in reports:
        for component in report.get("components") or []:
            for device in component.get("devices") or []:
                versions = seen.setdefault(str(component.get("component")), {})
                installed = str(device.get("installed") or "unknown")
                versions[installed] = versions.get(installed, 0) + 1
    observed = {}
    for name, versions in seen.items():
        text = ", ".join(f"{version} ({count} devices)" for version, count in sorted(versions.items()))
        observed[name] = {
            "version": next(iter(versions)) if len(versions) == 1 else text,
            "source": f"BMC FirmwareInventory of {len(reports)} node(s)" + (f": {text}" if len(versions) == 1 else ""),
        }
    return observed


def firmware_diff(
    reports: Sequence[Mapping[str, Any]],
    targets: Sequence[str],
    *,
    after: Mapping[str, Mapping[str, str]],
    check_mode: bool,
) -> Dict[str, Any]:
    """Per target node, its BMC and device versions before (the preflight's inventory) and after: read back from
    the BMC once flashed; in check mode the plan's; else, for a node this run did not flash, as before."""
    before: Dict[str, Any] = {}
    later: Dict[str, Any] = {}
    for entry in reports:
        node = str(entry["node"])
        if node not in targets:
            continue
        before[node] = {"bmc": entry.get("bmc", ""), "firmware": dict(entry.get("versions") or {})}
        if node in after:
            versions = dict(after[node])
        elif check_mode:
            versions = dict(entry.get("planned_versions") or {})
        else:
            versions = dict(before[node]["firmware"])
        later[node] = {"bmc": entry.get("bmc", ""), "firmware": versions}
    return {"before": before, "after": later}


def _finish(
    result: Dict[str, Any],
    reports: Sequence[Mapping[str, Any]],
    firmware: NodeFirmware,
    options: RolloutOptions,
    started: float,
) -> None:
    """What every run that reached the rollout returns: failures, versions read back, the diff, the time."""
    result["failures"] = failures_of(result)
    result["versions_after"] = dict(firmware.after)
    if options.diff:
        result["diff"] = firmware_diff(
            reports, result.get("targets") or [], after=firmware.after, check_mode=options.check_mode
        )
    result["elapsed"] = round(time.monotonic() - started, 3)


def run_nic_firmware_rollout(api: KubeApi, options: RolloutOptions) -> Dict[str, Any]:
    """Preflight every target BMC, then roll the firmware over the nodes that need it."""
    started = time.monotonic()
    images = load_images([] if options.flash.rollback else options.flash.components)
    pool = api.list(NODES, label_selector=options.node_selector or None)
    candidates, canaries = select_targets(pool, options=options)
    bmcs, missing = bmc_for_nodes(pool, candidates, options=options)
    result: Dict[str, Any] = {
        "changed": False,
        "scope": options.scope,
        "target": rollout_target_label(options),
        "checksums": dict(images.checked),
        "candidates": candidates,
        "canaries": canaries,
        "timeline": [],
        "failures": [],
    }
    if missing:
        raise InvalidInputError(
            f"No BMC known for node(s) {', '.join(missing)}: give them in bmcs (inventory host vars) "
            f"or annotate the nodes with {options.bmc_address_annotation}",
            result=result,
        )
    firmware = NodeFirmware(api, options, bmcs, images)
    reports, problems = _preflight_all(firmware, candidates)
    result["preflight"] = {"bmcs": reports, "problems": problems}
    result["observed_versions"] = observed_versions(reports)
    if problems:
        result["failures"] = [{"node": p["node"], "step": "preflight", "reason": p["reason"]} for p in problems]
        raise RedfishError(
            "Preflight failed, no node was touched: " + "; ".join(f"{p['node']}: {p['reason']}" for p in problems),
            result=result,
        )
    unfinished = set(unfinished_nodes(pool, ProgressKeys(options.rollout_name)))
    targets = [
        entry["node"]
        for entry in reports
        if entry["needs_work"] or entry["pending_jobs"] or entry["node"] in unfinished
    ]
    if targets and not options.flash.rollback:
        # Images the BMCs will fetch: checked once here, before any node is touched.
        check_remote_images(
            options.flash.components,
            images,
            validate_certs=options.bmc_validate_certs,
            ca_path=options.bmc_ca_path,
            timeout=options.bmc_timeout,
        )
        result["checksums"] = dict(images.checked)
    result["targets"] = targets
    result["at_target"] = [entry["node"] for entry in reports if entry["node"] not in targets]
    if options.preflight_only:
        result["elapsed"] = round(time.monotonic() - started, 3)
        return result
    settings = RolloutSettings(
        name=options.rollout_name,
        target=result["target"],
        max_unavailable=options.max_unavailable,
        max_parallel=options.max_parallel,
        failure_domain_label=options.failure_domain_label,
        max_per_domain=options.max_per_domain,
        canary_nodes=tuple(name for name in canaries if name in targets),
        budget_wait_timeout=options.budget_wait_timeout,
        budget_wait_sleep=options.wait_sleep,
        changing_step=FLASH_STEP,
        undo_other_targets=options.undo,
        at_target_nodes=nothing_to_undo(reports),
        alerts=options.alerts,
        # The operator evicts GPU and RDMA pods; the drain step after it, the secondary-network pods it cannot see.
        maintenance=resolve_settings(
            api,
            options.node_maintenance,
            drain=drain_spec(
                resource_filters=(GPU_EVICTION_FILTER, RDMA_EVICTION_FILTER), timeout=float(options.drain_timeout)
            ),
            sleep=min(options.wait_sleep, 5.0),
        ),
    )
    try:
        rollout = run_rollout(
            api,
            settings=settings,
            targets=targets,
            steps=steps(api, firmware, options),
            pool_selector=options.node_selector,
            check_mode=options.check_mode,
        )
    except RolloutHaltedError as err:
        result.update(err.result)
        _finish(result, reports, firmware, options, started)
        err.result = result
        raise
    result.update(rollout)
    _finish(result, reports, firmware, options, started)
    return result
