# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Flash firmware through one BMC: the runner of firmware_idrac_flash and of the NIC firmware rollout.

The order is fixed so that nothing irreversible happens before every check
passed:

1. every local image is read and its sha256 compared with the one given
   (a mismatch stops the run before any request to the BMC);
2. log in, discover the service, read FirmwareInventory, plan (check mode
   stops here and reports the plan);
3. images served over HTTP(S) are downloaded and their sha256 checked;
4. upload (MultipartHttpPushUri) or SimpleUpdate (ImageURI; rollback: the
   ``Previous-`` image), then follow each task or job until it waits for a
   reset, or has finished;
5. with ``reboot``, reset the host (ComputerSystem.Reset), follow the jobs to
   their end and wait for the host (and a restarting BMC) to come back;
6. a job that ended "reboot pending" (flashed, active only after a power
   cycle of the host: dell/iDRAC-Redfish-Scripting issues 266, 375) is
   completed by a power cycle when ``power_cycle_on_reboot_pending`` allows
   it, then followed again; otherwise the run stops naming the BMC, the jobs
   and the option or reset that completes them;
7. read FirmwareInventory again and check every device runs its target (a
   job's state alone never counts as success);
8. log out, also when a step failed.

Every wait is bounded; a failure raises RedfishError naming the BMC, the job
and the BMC's own message, with the partial result attached.
"""

from __future__ import annotations

import functools
import hashlib
import http.client
import posixpath
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence
from urllib.error import URLError
from urllib.parse import urlsplit

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import SSLValidationError, open_url

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    GpuFleetError,
    InvalidInputError,
    RedfishError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import (
    ACTION_ROLLBACK,
    KIND_INSTALLED,
    ComponentPlan,
    ComponentSpec,
    FlashPlan,
    InventoryItem,
    check_sha256,
    normalise_sha256,
    plan_flash,
    verify_versions,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish import (
    PROGRESS_FAILED,
    PROGRESS_REBOOT_PENDING,
    PROGRESS_SCHEDULED,
    GenericAdapter,
    RedfishClient,
    RedfishSettings,
    UpdateProgress,
    host_is_up,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish_idrac import IdracAdapter, is_idrac
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

APPLY_TIMES = ("OnReset", "Immediate")
_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class FlashOptions:
    components: Sequence[ComponentSpec]
    apply_time: str = "OnReset"
    reboot: bool = False
    reset_type: str = "GracefulRestart"
    power_cycle_on_reboot_pending: bool = False
    rollback: bool = False
    allow_downgrade: bool = False
    job_timeout: float = 1800.0
    reboot_timeout: float = 1800.0
    wait_sleep: float = 5.0
    check_mode: bool = False

    def __post_init__(self) -> None:
        if self.apply_time not in APPLY_TIMES:
            raise InvalidInputError(f"apply_time must be one of {', '.join(APPLY_TIMES)}, got {self.apply_time!r}")
        if not self.components:
            raise InvalidInputError("components must name at least one component")
        if self.job_timeout < 0 or self.reboot_timeout < 0 or self.wait_sleep <= 0:
            raise InvalidInputError("job_timeout and reboot_timeout must be >= 0 and wait_sleep > 0")
        for spec in self.components:
            if not spec.match.strip():
                raise InvalidInputError("Every component needs a match pattern")
            if self.rollback:
                continue
            if bool(spec.image_path) == bool(spec.image_uri):
                raise InvalidInputError(f"Component {spec.label}: give exactly one of image_path and image_uri")
            if not spec.sha256:
                # Also for a URL: without it the BMC would flash whatever the server hands out.
                which = "image_path" if spec.image_path else "image_uri"
                raise InvalidInputError(f"Component {spec.label}: {which} needs its sha256")
            if spec.image_uri and urlsplit(spec.image_uri).scheme.lower() not in ("http", "https"):
                raise InvalidInputError(f"Component {spec.label}: image_uri must be an http(s) URL")
            if spec.sha256:
                normalise_sha256(spec.sha256)


@dataclass
class JobRecord:
    component: str
    job_id: str
    device: str = ""
    observe: Optional[Callable[[], UpdateProgress]] = None
    progress: Optional[UpdateProgress] = None
    location: str = ""  # the task the update request answered with

    def as_dict(self) -> Dict[str, Any]:
        entry: Dict[str, Any] = {"component": self.component, "job_id": self.job_id}
        if self.device:
            entry["device"] = self.device
        if self.progress is not None:
            entry.update(
                state=self.progress.detail,
                message=self.progress.message,
                message_id=self.progress.message_id,
            )
        return entry


@dataclass
class LoadedImages:
    """Local images read and checked (component label -> bytes), before any BMC request."""

    content: Dict[str, bytes] = field(default_factory=dict)
    checked: Dict[str, str] = field(default_factory=dict)  # label -> sha256 verified


def load_images(specs: Sequence[ComponentSpec]) -> LoadedImages:
    """Read each local image once and check its sha256: what is uploaded is exactly what was checked."""
    loaded = LoadedImages()
    for spec in specs:
        if not spec.image_path:
            continue
        try:
            with open(spec.image_path, "rb") as image:
                content = image.read()
        except OSError as err:
            raise InvalidInputError(f"Cannot read the image {spec.image_path}: {err.strerror or err}") from err
        digest = hashlib.sha256(content).hexdigest()
        check_sha256(actual=digest, expected=spec.sha256, image=spec.image_path)
        loaded.content[spec.label] = content
        loaded.checked[spec.label] = digest
    return loaded


def sha256_of_url(url: str, *, validate_certs: bool, ca_path: Optional[str], timeout: float) -> str:
    """Download an image the BMC will fetch, to check its digest first (streamed, not kept)."""
    digest = hashlib.sha256()
    try:
        response = open_url(url, validate_certs=validate_certs, ca_path=ca_path, timeout=timeout, use_netrc=False)
        for chunk in iter(lambda: response.read(_CHUNK), b""):
            digest.update(chunk)
    except (URLError, UrlsConnectionError, SSLValidationError, OSError, http.client.HTTPException) as err:
        raise InvalidInputError(f"Cannot download {url} to check its sha256: {err}") from err
    return digest.hexdigest()


def check_remote_images(
    specs: Sequence[ComponentSpec],
    images: LoadedImages,
    *,
    validate_certs: bool,
    ca_path: Optional[str],
    timeout: float,
) -> None:
    """Check the sha256 of each image given by URL (with the BMC's TLS settings), once per run."""
    for spec in specs:
        if not spec.image_uri or not spec.sha256 or spec.label in images.checked:
            continue
        digest = sha256_of_url(spec.image_uri, validate_certs=validate_certs, ca_path=ca_path, timeout=timeout)
        check_sha256(actual=digest, expected=spec.sha256, image=spec.image_uri)
        images.checked[spec.label] = digest


def select_adapter(client: RedfishClient) -> GenericAdapter:
    return IdracAdapter() if is_idrac(client.services()) else GenericAdapter()


class BmcFlasher:
    """The steps of a flash on one logged-in client; ``run_flash`` and the rollout compose them."""

    def __init__(
        self,
        client: RedfishClient,
        options: FlashOptions,
        *,
        images: Optional[LoadedImages] = None,
        warn: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.client = client
        self.options = options
        self.images = images or LoadedImages()
        self.adapter = select_adapter(client)
        self.warnings: List[str] = []
        self._warn = warn or self.warnings.append
        self.jobs: List[JobRecord] = []

    # -- reading -------------------------------------------------------------------------------
    def inventory(self) -> List[InventoryItem]:
        uri = self.client.services().firmware_inventory
        if not uri:
            raise RedfishError(f"BMC {self.client.address}: the UpdateService lists no FirmwareInventory")
        return self.adapter.inventory_items(self.client.members(uri))

    def plan(self, inventory: Optional[Sequence[InventoryItem]] = None) -> FlashPlan:
        items = inventory if inventory is not None else self.inventory()
        plan = plan_flash(
            self.options.components,
            items,
            rollback=self.options.rollback,
            allow_downgrade=self.options.allow_downgrade,
        )
        self.adapter.check_plan(plan, items)
        return plan

    def resets_host(self, plan: FlashPlan) -> bool:
        """Applying the plan restarts the host (not only the BMC, which applies its own firmware itself)."""
        return any(
            self.adapter.resets_host(device.device) for component in plan.changes for device in component.to_change
        )

    def pending_jobs(self) -> List[Dict[str, Any]]:
        return self.adapter.pending_update_jobs(self.client)

    # -- uploading ------------------------------------------------------------------------------
    def check_remote_images(self, plan: FlashPlan) -> None:
        settings = self.client.settings
        specs = [component.spec for component in plan.changes if component.action != ACTION_ROLLBACK]
        check_remote_images(
            specs,
            self.images,
            validate_certs=settings.validate_certs,
            ca_path=settings.ca_path,
            timeout=settings.timeout,
        )

    def upload(self, plan: FlashPlan) -> List[JobRecord]:
        """Start every update of the plan; each job is followed until it waits for a reset or has finished."""
        apply_time = self.adapter.apply_time(self.client, self.options.apply_time)
        started: List[JobRecord] = []
        for component in plan.changes:
            if component.action == ACTION_ROLLBACK:
                started.extend(self._start_rollback(component, apply_time))
            else:
                started.append(self._start_update(component, apply_time))
        self.jobs.extend(started)
        # Immediate: the BMC reboots the host itself, so the job is followed to its end later.
        for job in started:
            self._follow(job, until_scheduled=True, timeout=self.options.job_timeout)
        return started

    def _start_update(self, component: ComponentPlan, apply_time: str) -> JobRecord:
        spec = component.spec
        targets = self.adapter.update_targets([device.uri for device in component.to_change if device.uri])
        if spec.image_path:
            response = self.client.multipart_update(
                self.images.content[spec.label],
                filename=posixpath.basename(spec.image_path) or "firmware.bin",
                targets=targets,
                apply_time=apply_time,
                timeout=max(self.client.settings.timeout, 300.0),
            )
        else:
            protocol = urlsplit(spec.image_uri).scheme.upper()
            response = self.client.simple_update(
                spec.image_uri, targets=targets, apply_time=apply_time, transfer_protocol=protocol
            )
        return JobRecord(
            component=spec.label,
            job_id=self.adapter.job_id(response),
            observe=self.adapter.progress_observer(self.client, response),
            location=response.location,
        )

    def _start_rollback(self, component: ComponentPlan, apply_time: str) -> List[JobRecord]:
        records = []
        for device in component.to_change:
            image_uri = self.adapter.rollback_image_uri(self.client, device.rollback_uri)
            response = self.client.simple_update(image_uri, apply_time=apply_time)
            records.append(
                JobRecord(
                    component=component.spec.label,
                    job_id=self.adapter.job_id(response),
                    device=device.device,
                    observe=self.adapter.progress_observer(self.client, response),
                    location=response.location,
                )
            )
        return records

    def _follow(
        self, job: JobRecord, *, until_scheduled: bool, timeout: float, settled: bool = False
    ) -> UpdateProgress:
        """Follow a job until it waits for a reset (``until_scheduled``), ends, or waits for a reboot.

        ``settled``: the host was power cycled for it, so "reboot pending" is no end any more.
        """
        if job.observe is None:
            raise RedfishError(f"BMC {self.client.address}: nothing to follow for job {job.job_id or '?'}")

        def done(progress: UpdateProgress) -> bool:
            if progress.reboot_pending:
                return not settled
            return progress.finished or (until_scheduled and progress.state == PROGRESS_SCHEDULED)

        what = f"update job {job.job_id or '(task)'} of {job.component}"
        job.progress = self.client.follow(
            job.observe, done=done, timeout=timeout, sleep=self.options.wait_sleep, what=what
        )
        if job.progress.state == PROGRESS_FAILED:
            raise RedfishError(self._job_failure(job))
        return job.progress

    def _job_failure(self, job: JobRecord) -> str:
        progress = job.progress or UpdateProgress(state=PROGRESS_FAILED, detail="unknown")
        said = progress.message or "the BMC gave no message"
        if progress.message_id:
            said += f" ({progress.message_id})"
        device = f" on {job.device}" if job.device else ""
        return (
            f"BMC {self.client.address}: firmware job {job.job_id or '(task)'} of {job.component}{device} "
            f"ended {progress.detail}: {said}"
        )

    # -- applying -------------------------------------------------------------------------------
    def waiting_for_reset(self) -> List[JobRecord]:
        return [job for job in self.jobs if job.progress is not None and job.progress.state == PROGRESS_SCHEDULED]

    def reset_host(self) -> Dict[str, Any]:
        return self.client.reset_system(self.options.reset_type)

    def check_reset_type(self) -> None:
        """Refuse, before anything is sent, a reset type this BMC does not offer."""
        self.client.reset_action(self.options.reset_type)

    def finish_jobs(self, jobs: Sequence[JobRecord], *, timeout: float, settled: bool = False) -> None:
        """Follow jobs to their end (they run in POST after a reset, or at once), or until they wait for a reboot."""
        deadline = self.client.clock() + timeout
        for job in jobs:
            if job.progress is not None and job.progress.finished:
                continue
            self._follow(job, until_scheduled=False, timeout=max(0.0, deadline - self.client.clock()), settled=settled)

    def reboot_pending(self) -> List[JobRecord]:
        return [job for job in self.jobs if job.progress is not None and job.progress.reboot_pending]

    def power_cycle(self) -> Dict[str, Any]:
        """Cut the host's power and restore it: ``PowerCycle`` where offered, else ``ForceOff`` then ``On``."""
        try:
            self.client.reset_action("PowerCycle")
        except InvalidInputError:
            done = self.client.reset_system("ForceOff")
            self._wait_power_off()
            self.client.reset_system("On")
            return {**done, "reset_type": "ForceOff+On"}
        return self.client.reset_system("PowerCycle")

    def _wait_power_off(self) -> None:
        system = self.client.system_uri()
        try:
            wait_until(
                lambda: self.client.host_state(system),
                lambda seen: seen.get("power_state") == "Off",
                timeout=self.options.reboot_timeout,
                sleep=self.options.wait_sleep,
                what=f"the host behind BMC {self.client.address} to power off",
                clock=self.client.clock,
                pause=self.client.pause,
            )
        except GpuFleetError as err:
            raise RedfishError(f"{err.msg}; power it on again: ComputerSystem.Reset ResetType On") from err

    def settle_reboot_pending(self) -> Dict[str, Any]:
        """Complete jobs that wait for a reboot: power cycle when allowed, follow them again, wait for the host.

        Not allowed: stop, naming the BMC, the jobs and what completes them. The caller verifies by inventory.
        """
        pending = self.reboot_pending()
        if not pending:
            return {}
        if not self.options.power_cycle_on_reboot_pending:
            raise RedfishError(reboot_pending_message(self.client.address, [job.as_dict() for job in pending]))
        options = self.options
        detail: Dict[str, Any] = {"reboot_pending_jobs": [job.job_id for job in pending]}
        detail["reset"] = self.power_cycle()
        self.finish_jobs(pending, timeout=options.job_timeout + options.reboot_timeout, settled=True)
        detail["host_back_after"] = round(self.wait_host_up(timeout=options.reboot_timeout), 3)
        return detail

    def carry_over(self, records: Sequence[JobRecord]) -> None:
        """Jobs started by another client (an earlier step): follow them through this one."""
        for record in records:
            observe = self.adapter.job_observer(self.client, record.job_id)
            if observe is None and record.location:
                task = urlsplit(record.location).path
                observe = functools.partial(self.client.task_progress, task)
            self.jobs.append(
                JobRecord(
                    component=record.component,
                    job_id=record.job_id,
                    device=record.device,
                    observe=observe,
                    progress=record.progress,
                    location=record.location,
                )
            )

    def adopt_pending(self, pending: Sequence[Dict[str, Any]]) -> List[JobRecord]:
        """Jobs found waiting for a reset (an earlier, interrupted run): follow them like our own."""
        adopted = []
        for entry in pending:
            observe = self.adapter.job_observer(self.client, str(entry.get("id") or ""))
            if observe is None:
                continue
            record = JobRecord(component=str(entry.get("name") or "pending update"), job_id=str(entry["id"]))
            record.observe = observe
            if entry.get("state") == "RebootPending":
                record.progress = UpdateProgress(
                    state=PROGRESS_REBOOT_PENDING, detail="RebootPending", message=str(entry.get("message") or "")
                )
            else:
                record.progress = UpdateProgress(state=PROGRESS_SCHEDULED, detail="Scheduled")
            adopted.append(record)
        self.jobs.extend(adopted)
        return adopted

    def wait_host_up(self, *, timeout: float) -> float:
        """Wait until the host is powered on and booted (as far as the BMC can tell)."""
        system = self.client.system_uri()

        def observe() -> Dict[str, str]:
            try:
                return self.client.host_state(system)
            except RedfishError as err:
                # A BMC that restarts (its own update) or is busy: look again.
                return {"power_state": "", "boot_progress": "", "error": err.msg}

        try:
            outcome = wait_until(
                observe,
                host_is_up,
                timeout=timeout,
                sleep=self.options.wait_sleep,
                what=f"the host behind BMC {self.client.address} to power on and boot",
                clock=self.client.clock,
                pause=self.client.pause,
            )
        except GpuFleetError as err:
            last = err.result.get("last") or {}
            raise RedfishError(f"{err.msg} (last seen: {last})") from err
        return outcome.elapsed

    def verify(self, plan: FlashPlan) -> List[InventoryItem]:
        inventory = self.inventory()
        problems = verify_versions(plan, inventory)
        if problems:
            raise RedfishError(f"BMC {self.client.address}: after the update, " + "; ".join(problems))
        return inventory


def reboot_pending_message(address: str, jobs: Sequence[Mapping[str, Any]]) -> str:
    """Why a run stops at jobs that wait for a reboot, and the two ways to complete them."""
    listed = ", ".join(
        f"{job.get('job_id') or '(task)'} ({job.get('component')}: {job.get('message') or job.get('state')})"
        for job in jobs
    )
    return (
        f"BMC {address}: firmware job(s) {listed} are flashed but wait for a power cycle of the host to activate; "
        "the new firmware is not running. Allow it with power_cycle_on_reboot_pending=true "
        "(role nic_firmware: nic_firmware_power_cycle_on_reboot_pending: true) and run again, or power-cycle "
        "the host yourself (ComputerSystem.Reset, ResetType PowerCycle) and run again to verify"
    )


def installed_versions(inventory: Sequence[InventoryItem], plan: FlashPlan) -> Dict[str, str]:
    """Device -> installed version, for the devices of the plan."""
    devices = {device.device for component in plan.components for device in component.devices}
    return {item.device: item.version for item in inventory if item.kind == KIND_INSTALLED and item.device in devices}


def run_flash(
    settings: RedfishSettings,
    options: FlashOptions,
    *,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> Dict[str, Any]:
    """Flash one BMC (see the module docstring for the order); returns the result, raises with a partial one."""
    started = clock()
    result: Dict[str, Any] = {
        "changed": False,
        "bmc": settings.origin,
        "check_mode": options.check_mode,
        "rollback": options.rollback,
        "components": [],
        "jobs": [],
        "pending_jobs": [],
        "pending_reset": False,
        "rebooted": False,
        "warnings": [],
    }
    images = load_images([] if options.rollback else options.components)
    result["checksums"] = dict(images.checked)
    client = RedfishClient(settings, clock=clock, pause=pause)
    session = client.session()
    flasher: Optional[BmcFlasher] = None
    try:
        with session:
            flasher = BmcFlasher(client, options, images=images, warn=result["warnings"].append)
            result["adapter"] = flasher.adapter.name
            before = flasher.inventory()
            plan = flasher.plan(before)
            result["components"] = plan.as_dict()
            result["versions"] = {"before": plan.versions(), "after": plan.versions_after()}
            if not plan.changes:
                result["versions"]["after"] = plan.versions()
                return _finish(result, started=started, clock=clock)
            result["changed"] = True
            if options.reboot and options.apply_time != "Immediate":
                flasher.check_reset_type()
            pending = flasher.pending_jobs()
            result["pending_jobs"] = pending
            if options.check_mode:
                return _finish(result, started=started, clock=clock)
            if pending:
                plan = _apply_pending_first(flasher, pending, result=result)
                if not plan.changes or result["pending_reset"]:
                    return _finish(result, started=started, clock=clock)
            flasher.check_remote_images(plan)
            result["checksums"] = dict(images.checked)
            flasher.upload(plan)
            result["jobs"] = [job.as_dict() for job in flasher.jobs]
            _apply(flasher, plan, result=result)
            if result["pending_reset"]:
                return _finish(result, started=started, clock=clock)
            after = flasher.verify(plan)
            result["versions"]["after"] = installed_versions(after, plan)
            result["jobs"] = [job.as_dict() for job in flasher.jobs]
    except GpuFleetError as err:
        if flasher is not None:
            result["jobs"] = [job.as_dict() for job in flasher.jobs]
        result["elapsed"] = round(clock() - started, 3)
        if session.warning:
            result["warnings"].append(session.warning)
        err.result = {**result, **err.result}
        raise
    if session.warning:
        result["warnings"].append(session.warning)
    return _finish(result, started=started, clock=clock)


def _apply(flasher: BmcFlasher, plan: FlashPlan, *, result: Dict[str, Any]) -> None:
    """After the uploads: reset the host when asked, follow the jobs to the end, wait for the host."""
    options = flasher.options
    waiting = flasher.waiting_for_reset()
    if options.apply_time == "Immediate":
        # The BMC reboots the host itself for host components (Dell's "NowAndReboot").
        flasher.finish_jobs(flasher.jobs, timeout=options.job_timeout + options.reboot_timeout)
        result["rebooted"] = flasher.resets_host(plan)
    elif waiting and not options.reboot:
        result["pending_reset"] = True
        flasher._warn(
            f"BMC {flasher.client.address}: {len(waiting)} update job(s) wait for a host reset "
            "(reboot=false); the new firmware runs after the next reboot"
        )
        return
    elif waiting:
        result["reset"] = flasher.reset_host()
        result["rebooted"] = True
        flasher.finish_jobs(waiting, timeout=options.job_timeout + options.reboot_timeout)
    else:
        flasher.finish_jobs(flasher.jobs, timeout=options.job_timeout)
    if result["rebooted"]:
        result["host_back_after"] = round(flasher.wait_host_up(timeout=options.reboot_timeout), 3)
    if flasher.reboot_pending():
        result["jobs"] = [job.as_dict() for job in flasher.jobs]
        result["power_cycle"] = flasher.settle_reboot_pending()
        result["rebooted"] = True


def _apply_pending_first(
    flasher: BmcFlasher, pending: Sequence[Dict[str, Any]], *, result: Dict[str, Any]
) -> FlashPlan:
    """Updates already scheduled (an interrupted run): apply them before planning anew, or stop without a reboot."""
    options = flasher.options
    if not options.reboot:
        # Nothing is scheduled on top: this run changes nothing until the host is rebooted.
        result["changed"] = False
        result["pending_reset"] = True
        flasher._warn(
            f"BMC {flasher.client.address}: {len(pending)} firmware job(s) already wait for a host reset "
            f"({', '.join(str(job.get('id')) for job in pending)}); not scheduling more. Reboot the host to apply them"
        )
        return flasher.plan()
    adopted = flasher.adopt_pending(pending)
    if not adopted or any(not job.progress or not job.progress.reboot_pending for job in adopted):
        result["reset"] = flasher.reset_host()
        result["rebooted"] = True
        flasher.finish_jobs(adopted, timeout=options.job_timeout + options.reboot_timeout)
        result["host_back_after"] = round(flasher.wait_host_up(timeout=options.reboot_timeout), 3)
    # Jobs flashed by an earlier run that wait for a power cycle: a warm reset would not finish them, and flashing
    # again would repeat what is done; power-cycle them (when allowed) or stop naming them.
    if flasher.reboot_pending():
        result["rebooted"] = True
        result["power_cycle"] = flasher.settle_reboot_pending()
    flasher.jobs.clear()
    plan = flasher.plan()
    result["components"] = plan.as_dict()
    return plan


def _finish(result: Dict[str, Any], *, started: float, clock: Callable[[], float]) -> Dict[str, Any]:
    result["elapsed"] = round(clock() - started, 3)
    return result
