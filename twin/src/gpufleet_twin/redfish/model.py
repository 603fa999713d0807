"""Pure state of one iDRAC-like BMC: inventory, update jobs, host power, sessions.

Nothing here does I/O or reads a clock: every method that depends on time
takes ``now`` (simulated seconds), and what the outside world must do as a
consequence (reboot the Kubernetes node, change the NIC firmware the node
reports, drop the BMC's connections) is queued as an *effect* for the
service to carry out (:meth:`Bmc.drain_effects`).

How an update moves (iDRAC behaviour, durations from :class:`BmcTimings`):

* the package is transferred (``Downloading``; SimpleUpdate fetches it, a
  multipart push has already sent it) and verified; a package the BMC cannot
  read fails like an unsigned Dell package (``RED007``);
* host components (NICs, BIOS) applied ``OnReset`` become ``Scheduled``
  (``JCP001 Task successfully scheduled.``; the task is ``Pending`` and
  carries a ``Base.ResetRequired`` message naming the system's reset action);
  ``Immediate`` makes the BMC reboot the host itself, as Dell's
  "NowAndReboot" does;
* a host reset runs every scheduled job one after the other while the host
  is in POST (job ``Running`` with a growing ``PercentComplete``), then the
  host boots; only then does FirmwareInventory show the new version as
  ``Installed-`` and the old one as ``Previous-``;
* the iDRAC's own firmware is always applied at once: the BMC flashes,
  restarts (connections refused, every session ends, the task list is lost;
  jobs survive as on a real iDRAC), and the job completes when it is back;
  for ``bmc_auth_warmup_seconds`` after that it answers but refuses every
  login and authenticated request with 401, as an iDRAC does while its
  accounts load.

Jobs are the iDRAC's ``JID_<12 digits>``; the DMTF Task of a job has the
same id (``/redfish/v1/TaskService/Tasks/JID_...``), as on iDRAC9.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from .image import FirmwareImage, dell_nic_version, firmware_major

SYSTEM_ID = "System.Embedded.1"
MANAGER_ID = "iDRAC.Embedded.1"
SYSTEM_URI = f"/redfish/v1/Systems/{SYSTEM_ID}"
SYSTEM_RESET_URI = f"{SYSTEM_URI}/Actions/ComputerSystem.Reset"
MANAGER_URI = f"/redfish/v1/Managers/{MANAGER_ID}"
INVENTORY_URI = "/redfish/v1/UpdateService/FirmwareInventory"
TASKS_URI = "/redfish/v1/TaskService/Tasks"

# The ResetType values an iDRAC9 lists for ComputerSystem.Reset.
SYSTEM_RESET_TYPES = (
    "On",
    "ForceOff",
    "ForceRestart",
    "GracefulRestart",
    "GracefulShutdown",
    "PushPowerButton",
    "Nmi",
    "PowerCycle",
)
MANAGER_RESET_TYPES = ("GracefulRestart",)
APPLY_TIMES = ("Immediate", "OnReset")

Availability = Literal["up", "refuse", "hang"]
FailurePhase = Literal["download", "apply"]

# Dell job states (DellJob.JobState) and the DMTF TaskState/TaskStatus a task shows for them.
TASK_STATE_OF_JOB = {
    "New": ("New", "OK"),
    "Downloading": ("Running", "OK"),
    "Downloaded": ("Running", "OK"),
    "Scheduled": ("Pending", "OK"),
    "Running": ("Running", "OK"),
    "RebootPending": ("Running", "OK"),
    "Completed": ("Completed", "OK"),
    "RebootCompleted": ("Completed", "OK"),
    "CompletedWithErrors": ("Completed", "Warning"),
    "Failed": ("Exception", "Critical"),
}
FINISHED_JOB_STATES = frozenset({"Completed", "RebootCompleted", "CompletedWithErrors", "Failed"})

# iDRAC job messages as (MessageId, text).  RED001, JCP001, RED004 and RED007 are
# what real job queues show (see reference samples and Dell's issue tracker); the
# others are the twin's stand-ins for messages whose real ids it does not know.
MSG_DOWNLOADING = ("RED003", "Downloading the {0} update package.")
MSG_DOWNLOADED = ("RED011", "Package successfully downloaded.")
MSG_SCHEDULED = ("JCP001", "Task successfully scheduled.")
MSG_RUNNING = ("PR20", "Job in progress.")
MSG_COMPLETED = ("RED001", "Job completed successfully.")
MSG_COMPLETED_WITH_ERRORS = ("PR31", "Job completed with errors.")
MSG_INTERNAL_ERROR = ("RED004", "Unable to complete the job because of an internal error.")
MSG_BAD_SIGNATURE = ("RED007", "Unable to verify Update Package signature.")
MSG_TRANSFER_FAILED = ("RED002", "Unable to transfer the {0} update package: {1}")
MSG_NOT_APPLICABLE = ("SUP0518", "The update package {0} is not applicable to any component of this system.")
MSG_ALREADY_PENDING = ("SUP0520", "Unable to create the update job because a job for {0} is already pending.")
MSG_SAME_VERSION = ("SUP0521", "Version {0} is already installed on {1}; there is nothing to apply.")
MSG_REBOOT_PENDING = ("RED030", "Reboot is pending.")
MSG_REBOOT_DONE = ("RED031", "Reboot is complete.")
# The text is the one dell/iDRAC-Redfish-Scripting issue 266 quotes; the MessageId is the twin's stand-in.
MSG_ACTIVATION_PENDING = ("RED032", "Job completed, server reboot pending.")
# Resets that cut the host's power (a cold boot): only these activate firmware that waits for one.
COLD_RESETS = frozenset({"PowerCycle", "On"})
IDRAC_REGISTRY_PREFIX = "IDRAC.2.8."


@dataclass(frozen=True)
class BmcTimings:
    """How long things take, in simulated seconds (iDRAC9 on a GPU server, roughly)."""

    transfer_seconds: float = 20.0  # receive and verify a package
    local_transfer_seconds: float = 5.0  # stage a package the BMC already holds (rollback)
    nic_apply_seconds: float = 90.0
    bios_apply_seconds: float = 150.0
    idrac_apply_seconds: float = 240.0
    bmc_restart_seconds: float = 180.0
    # Back on the network, an iDRAC answers for a while before its accounts are loaded: every login and
    # authenticated request gets 401 (Dell's own DeviceFirmwareMultipartUploadREDFISH.py retries on 401
    # after an iDRAC update for that reason).
    bmc_auth_warmup_seconds: float = 60.0
    host_shutdown_seconds: float = 20.0  # from the reset request to POST
    host_boot_seconds: float = 300.0  # POST with 8 GPUs, OS boot, kubelet Ready
    session_timeout_seconds: float = 1800.0  # iDRAC's default idle timeout
    task_retention_seconds: float = 600.0  # iDRAC >= 5.00 drops finished tasks after 10 minutes

    def apply_seconds(self, family: str) -> float:
        if family == "iDRAC":
            return self.idrac_apply_seconds
        if family == "BIOS":
            return self.bios_apply_seconds
        return self.nic_apply_seconds


class RedfishError(Exception):
    """A request the BMC refuses: HTTP status and a Base registry message."""

    def __init__(self, status: int, message_key: str, *args: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"{status} {message_key} {args}")
        self.status = status
        self.message_key = message_key
        self.args_ = tuple(args)
        self.headers = headers or {}


# -- inventory ---------------------------------------------------------------------


@dataclass(frozen=True)
class NicSpec:
    """A NIC as the host sees it (one ``ibstat`` CA), used to seed the inventory."""

    host_device: str  # mlx5_0
    ca_type: str  # MT4129
    firmware: str  # 28.39.1002
    link_layer: str = "InfiniBand"


@dataclass(frozen=True)
class _NicModel:
    family: str
    device_id: str
    sub_device_id: str
    display: str


# Adapter models by the CA type ibstat prints; virtual functions are not BMC-visible.
NIC_MODELS = {
    "MT4129": _NicModel("ConnectX-7", "1021", "0040", "Nvidia ConnectX-7 Single Port NDR OSFP Adapter"),
    "MT4123": _NicModel("ConnectX-6", "101B", "0007", "Mellanox ConnectX-6 Single Port HDR QSFP56 Adapter"),
    "MT4125": _NicModel(
        "ConnectX-6", "101D", "0016", "Mellanox ConnectX-6 Dx Dual Port 100 GbE QSFP56 Network Adapter"
    ),
}
MELLANOX_VENDOR = "15B3"
COMPONENT_IDS = {"ConnectX-7": "0", "ConnectX-6": "0", "BIOS": "159", "iDRAC": "25227"}
PACKAGE_NAMES = {
    "ConnectX-7": "Mellanox ConnectX-7 Adapter Firmware",
    "ConnectX-6": "Mellanox ConnectX-6 Adapter Firmware",
    "BIOS": "BIOS",
    "iDRAC": "iDRAC with Lifecycle Controller",
}


@dataclass
class FirmwareSlot:
    """One device whose firmware the BMC inventories (an FQDD)."""

    fqdd: str
    family: str  # image component: ConnectX-7, ConnectX-6, BIOS, iDRAC
    name: str
    version: str  # the vendor's spelling (NIC firmware as ibstat prints it)
    installed_at: float
    previous_version: str | None = None
    host_device: str | None = None  # mlx5_0 for NICs
    vendor_id: str | None = None
    device_id: str | None = None
    sub_vendor_id: str | None = None
    sub_device_id: str | None = None
    # The type number inside Dell's DCIM software identity (701 NIC, 741 BIOS).
    dcim_code: str = ""

    @property
    def component_id(self) -> str:
        return COMPONENT_IDS[self.family]

    @property
    def is_nic(self) -> bool:
        return self.family.startswith("ConnectX")

    def display_version(self, version: str) -> str:
        return dell_nic_version(version) if self.is_nic else version


@dataclass(frozen=True)
class InventoryEntry:
    """A FirmwareInventory member: the installed or the previous image of a slot, or a pushed package."""

    member_id: str
    kind: Literal["Installed", "Previous", "Available"]
    slot: FirmwareSlot
    version: str


# -- jobs, sessions, faults, effects ---------------------------------------------------


@dataclass
class JobFailurePlan:
    """Fault: the next ``count`` update jobs (of ``component``, or any) end badly."""

    message: str = MSG_INTERNAL_ERROR[1]
    message_id: str = MSG_INTERNAL_ERROR[0]
    phase: FailurePhase = "apply"
    component: str | None = None
    count: int = 1
    with_errors: bool = False  # CompletedWithErrors instead of Failed


@dataclass
class Job:
    job_id: str
    job_type: str  # FirmwareUpdate, FirmwareRollback, RebootForce, RebootNoForce, PowerCycle
    name: str
    created_at: float
    state: str
    message_id: str
    message: str
    message_args: list[str] = field(default_factory=list)
    percent: int = 0
    # Firmware jobs
    package_name: str = ""
    apply_time: str = "OnReset"
    targets: tuple[str, ...] | None = None  # FQDDs the client named; None: every matching device
    image: FirmwareImage | None = None
    image_error: tuple[str, str] | None = None  # (MessageId, text) when the transfer failed
    transfer_ends_at: float | None = None  # when the package is staged (None: still arriving)
    apply_starts_at: float | None = None
    apply_ends_at: float | None = None
    failure: JobFailurePlan | None = None
    applied_to: tuple[str, ...] = ()
    # Reboot jobs finish at this time
    reboot_done_at: float | None = None
    started_at: float | None = None  # ActualRunningStartTime
    finished_at: float | None = None  # CompletionTime
    task_hidden: bool = False  # lost with a BMC restart
    activation_pending: bool = False  # flashed, runs after a power cycle (RebootPending)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED_JOB_STATES

    def task_state(self) -> tuple[str, str]:
        return TASK_STATE_OF_JOB.get(self.state, ("Running", "OK"))

    def percent_at(self, now: float) -> int:
        if self.state == "Running" and self.apply_starts_at is not None and self.apply_ends_at:
            span = max(self.apply_ends_at - self.apply_starts_at, 1e-9)
            done = (now - self.apply_starts_at) / span
            return max(0, min(99, int(done * 100)))
        return self.percent


@dataclass
class Session:
    session_id: str
    token: str
    username: str
    created_at: float
    last_used_at: float


@dataclass(frozen=True)
class HostReboot:
    """Reboot the Kubernetes node: NotReady now, back after ``duration`` (unless it never returns)."""

    duration: float
    reset_type: str


@dataclass(frozen=True)
class HostPowerOff:
    """The host is off: its node stays NotReady until a later :class:`HostReboot`."""


@dataclass(frozen=True)
class NicFirmwareApplied:
    """The node's NICs (``ibstat`` CA names) now run ``version``."""

    host_devices: tuple[str, ...]
    version: str


@dataclass(frozen=True)
class BmcRestarted:
    """The BMC went down: its open connections must be dropped."""


Effect = HostReboot | HostPowerOff | NicFirmwareApplied | BmcRestarted


# -- the BMC -----------------------------------------------------------------------------


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def _mac(node_name: str, slot: int) -> str:
    raw = _digest(f"{node_name}/nic/{slot}")
    # NVIDIA/Mellanox OUI, device part derived from the node and slot.
    return "B8:3F:D2:" + ":".join(f"{b:02X}" for b in raw[:3])


def _service_tag(node_name: str) -> str:
    alphabet = "0123456789BCDFGHJKLMNPQRSTVWXYZ"
    raw = _digest(f"{node_name}/service-tag")
    return "".join(alphabet[b % len(alphabet)] for b in raw[:7])


class Bmc:
    """One iDRAC: what a Redfish client can see and change on it."""

    def __init__(
        self,
        node_name: str,
        *,
        nics: list[NicSpec],
        username: str,
        password: str,
        now: float,
        timings: BmcTimings | None = None,
        bios_version: str = "2.3.5",
        previous_bios_version: str | None = "2.2.8",
        idrac_version: str = "7.10.30.00",
        previous_idrac_version: str | None = "7.00.60.00",
        system_model: str = "PowerEdge XE9680",
    ) -> None:
        self.node_name = node_name
        self.timings = timings or BmcTimings()
        self.system_model = system_model
        self.service_tag = _service_tag(node_name)
        self.uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node_name}.system.gpufleet"))
        self.manager_uuid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{node_name}.idrac.gpufleet"))
        self.users: dict[str, str] = {username: password}
        self.sessions: dict[str, Session] = {}
        self.jobs: dict[str, Job] = {}
        self.power_state = "On"
        self.host_busy_until: float | None = None  # POST/boot in progress until then
        self.restarting_until: float | None = None  # the BMC itself is rebooting
        self.auth_ready_at: float | None = None  # after a restart: logins are refused until then
        self.unresponsive: Availability = "up"
        self.unresponsive_until: float | None = None
        self.failure_plans: list[JobFailurePlan] = []
        self.quirks: set[str] = set()
        self.pushed: dict[str, tuple[FirmwareSlot, FirmwareImage]] = {}  # HttpPushUri uploads
        self.boot_count = 0
        self.last_reset_type = ""  # of the latest (re)start of the host
        self.resets_received: list[str] = []  # ComputerSystem.Reset types, in order
        # What clients sent, for tests and the admin view: every request, and update requests
        # (SimpleUpdate, MultipartHttpPushUri, HttpPushUri) whether or not they were accepted.
        self.requests_received = 0
        self.update_requests_received = 0
        # Requests other than GET/HEAD, logging in and out aside, by "METHOD path": whatever may change the BMC.
        self.writes_received: dict[str, int] = {}
        self._effects: list[Effect] = []
        self._session_counter = 0
        self._last_jid = 0
        self.slots: list[FirmwareSlot] = [
            FirmwareSlot(
                fqdd="BIOS.Setup.1-1",
                family="BIOS",
                name="BIOS",
                version=bios_version,
                previous_version=previous_bios_version,
                installed_at=now,
                dcim_code="741",
            ),
            FirmwareSlot(
                fqdd="iDRAC.Embedded.1-1",
                family="iDRAC",
                name="Integrated Dell Remote Access Controller",
                version=idrac_version,
                previous_version=previous_idrac_version,
                installed_at=now,
            ),
        ]
        for slot_number, nic in enumerate(nics, start=1):
            nic_model = NIC_MODELS.get(nic.ca_type)
            if nic_model is None:
                continue
            self.slots.append(
                FirmwareSlot(
                    fqdd=f"NIC.Slot.{slot_number}-1-1",
                    family=nic_model.family,
                    name=f"{nic_model.display} - {_mac(node_name, slot_number)}",
                    version=nic.firmware,
                    installed_at=now,
                    host_device=nic.host_device,
                    vendor_id=MELLANOX_VENDOR,
                    device_id=nic_model.device_id,
                    sub_vendor_id=MELLANOX_VENDOR,
                    sub_device_id=nic_model.sub_device_id,
                    dcim_code="701",
                )
            )

    # -- effects ------------------------------------------------------------------------
    def drain_effects(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects

    # -- availability and faults ------------------------------------------------------------
    def availability(self, now: float) -> Availability:
        """Whether the BMC answers: a restarting iDRAC refuses connections."""
        if self.unresponsive != "up" and (self.unresponsive_until is None or now < self.unresponsive_until):
            return self.unresponsive
        if self.restarting_until is not None and now < self.restarting_until:
            return "refuse"
        return "up"

    def accounts_loading(self, now: float) -> bool:
        """Just back from a restart: the service answers, but no credentials are accepted yet."""
        return self.auth_ready_at is not None and now < self.auth_ready_at

    def set_unresponsive(self, mode: Availability, *, until: float | None) -> None:
        self.unresponsive = mode
        self.unresponsive_until = None if mode == "up" else until

    def add_failure_plan(self, plan: JobFailurePlan) -> None:
        self.failure_plans.append(plan)

    def change_password(self, username: str, password: str) -> None:
        """Credentials changed behind the operator's back: old sessions stay valid, new logins need the new one."""
        self.users[username] = password

    def clear_faults(self) -> None:
        self.failure_plans.clear()
        self.set_unresponsive("up", until=None)
        self.quirks.clear()

    # -- authentication -------------------------------------------------------------------------
    def check_password(self, username: str, password: str) -> bool:
        expected = self.users.get(username)
        return expected is not None and secrets.compare_digest(expected.encode(), password.encode())

    def login(self, username: str, password: str, now: float) -> Session:
        if not self.check_password(username, password):
            raise RedfishError(401, "NoValidSession")
        self._session_counter += 1
        session = Session(
            session_id=str(self._session_counter),
            token=secrets.token_hex(16),
            username=username,
            created_at=now,
            last_used_at=now,
        )
        self.sessions[session.session_id] = session
        return session

    def session_for_token(self, token: str, now: float) -> Session | None:
        for session in self.sessions.values():
            if secrets.compare_digest(session.token.encode(), token.encode()):
                if now - session.last_used_at > self.timings.session_timeout_seconds:
                    del self.sessions[session.session_id]
                    return None
                session.last_used_at = now
                return session
        return None

    def logout(self, session_id: str) -> None:
        if self.sessions.pop(session_id, None) is None:
            raise RedfishError(404, "ResourceMissingAtURI", f"/redfish/v1/SessionService/Sessions/{session_id}")

    def expire_sessions(self, now: float) -> None:
        timeout = self.timings.session_timeout_seconds
        for session_id in [s.session_id for s in self.sessions.values() if now - s.last_used_at > timeout]:
            del self.sessions[session_id]

    # -- inventory --------------------------------------------------------------------------------
    def slot(self, family: str) -> FirmwareSlot:
        return next(s for s in self.slots if s.family == family)

    @property
    def idrac_version(self) -> str:
        return self.slot("iDRAC").version

    @property
    def bios_version(self) -> str:
        return self.slot("BIOS").version

    def member_id(self, kind: str, slot: FirmwareSlot, version: str) -> str:
        shown = slot.display_version(version)
        if slot.is_nic and "blank-nic-version-in-id" in self.quirks:
            # iDRAC9 4.40 printed eight blanks instead of the NIC version inside the id.
            shown = " " * 8
        return f"{kind}-{slot.component_id}-{shown}__{slot.fqdd}"

    def inventory(self) -> list[InventoryEntry]:
        entries = []
        for slot in self.slots:
            entries.append(
                InventoryEntry(self.member_id("Installed", slot, slot.version), "Installed", slot, slot.version)
            )
            if slot.previous_version is not None:
                entries.append(
                    InventoryEntry(
                        self.member_id("Previous", slot, slot.previous_version), "Previous", slot, slot.previous_version
                    )
                )
        for member_id, (slot, image) in self.pushed.items():
            entries.append(InventoryEntry(member_id, "Available", slot, image.version))
        return sorted(entries, key=lambda e: e.member_id)

    def inventory_entry(self, member_id: str) -> InventoryEntry:
        for entry in self.inventory():
            if entry.member_id == member_id:
                return entry
        raise RedfishError(404, "ResourceMissingAtURI", f"{INVENTORY_URI}/{member_id}")

    def inventory_etag(self) -> str:
        text = "|".join(f"{e.member_id}" for e in self.inventory())
        return 'W/"' + hashlib.sha256(text.encode()).hexdigest()[:16] + '"'

    def matching_slots(self, image: FirmwareImage) -> list[FirmwareSlot]:
        """Devices an image fits: same component, and for NICs the same firmware line (major number)."""
        found = []
        for slot in self.slots:
            if slot.family != image.component:
                continue
            if slot.is_nic and firmware_major(slot.version) != firmware_major(image.version):
                continue
            found.append(slot)
        return found

    def slot_by_target(self, target_uri: str) -> FirmwareSlot:
        """A ``Targets`` entry: a FirmwareInventory member URI (or the system/manager) -> its slot."""
        uri = target_uri.rstrip("/")
        if uri.startswith(INVENTORY_URI + "/"):
            return self.inventory_entry(uri[len(INVENTORY_URI) + 1 :]).slot
        if uri == MANAGER_URI:
            return self.slot("iDRAC")
        if uri == SYSTEM_URI:
            return self.slot("BIOS")
        raise RedfishError(400, "ActionParameterValueNotInList", target_uri, "Targets", "SimpleUpdate")

    def push_package(self, image: FirmwareImage, now: float) -> str:
        """HttpPushUri upload: the package becomes an ``Available-`` inventory member."""
        slots = self.matching_slots(image)
        if not slots:
            raise RedfishError(400, "ActionParameterValueError", "UpdateFile", "HttpPushUri")
        member_id = self.member_id("Available", slots[0], image.version)
        self.pushed[member_id] = (slots[0], image)
        return member_id

    # -- jobs -------------------------------------------------------------------------------------------
    def _new_job_id(self, now: float) -> str:
        # iDRAC job ids are "JID_" and 12 digits that grow with time.
        number = int(now * 1000) % 10**12
        if number <= self._last_jid:
            number = self._last_jid + 1
        self._last_jid = number
        return f"JID_{number:012d}"

    def job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise RedfishError(404, "ResourceMissingAtURI", job_id)
        return job

    def visible_task(self, job_id: str, now: float) -> Job:
        job = self.jobs.get(job_id)
        if job is None or not self._task_visible(job, now):
            raise RedfishError(404, "ResourceMissingAtURI", f"{TASKS_URI}/{job_id}")
        return job

    def visible_tasks(self, now: float) -> list[Job]:
        return [job for job in self.jobs.values() if self._task_visible(job, now)]

    def _task_visible(self, job: Job, now: float) -> bool:
        if job.task_hidden or job.job_type not in ("FirmwareUpdate", "FirmwareRollback"):
            return False
        return not (job.finished_at is not None and now - job.finished_at > self.timings.task_retention_seconds)

    def start_update(
        self,
        *,
        package_name: str,
        apply_time: str | None,
        targets: tuple[str, ...] | None,
        now: float,
        rollback: bool = False,
    ) -> Job:
        """A new firmware job whose package is still arriving (see :meth:`package_arrived`)."""
        if apply_time is not None and apply_time not in APPLY_TIMES:
            raise RedfishError(
                400, "ActionParameterValueNotInList", apply_time, "@Redfish.OperationApplyTime", "Update"
            )
        message_id, text = MSG_DOWNLOADING
        job = Job(
            job_id=self._new_job_id(now),
            job_type="FirmwareRollback" if rollback else "FirmwareUpdate",
            name=f"{'Firmware Rollback' if rollback else 'Firmware Update'}: {package_name}",
            created_at=now,
            state="Downloading",
            message_id=message_id,
            message=text.format(package_name),
            message_args=[package_name],
            package_name=package_name,
            apply_time=apply_time or "OnReset",
            targets=targets,
        )
        self.jobs[job.job_id] = job
        return job

    def package_arrived(
        self,
        job_id: str,
        *,
        image: FirmwareImage | None,
        error: tuple[str, str] | None,
        now: float,
        local: bool = False,
    ) -> None:
        """The package of a job was received (or could not be); staging ends after the transfer time."""
        job = self.jobs.get(job_id)
        if job is None or job.state != "Downloading":
            return  # deleted meanwhile
        job.image = image
        job.image_error = error
        staging = self.timings.local_transfer_seconds if local else self.timings.transfer_seconds
        job.transfer_ends_at = max(now, job.created_at + staging)

    def delete_job(self, job_id: str, now: float) -> None:
        """DELETE of a job: Dell lets a client drop a job that is not running."""
        job = self.job(job_id)
        if job.state in ("Running", "RebootPending"):
            raise RedfishError(400, "ResourceInUse")
        del self.jobs[job_id]

    # -- time ---------------------------------------------------------------------------------------------
    def next_due(self) -> float | None:
        """The earliest simulated time at which :meth:`advance` has something to do."""
        times: list[float] = []
        for job in self.jobs.values():
            if job.state == "Downloading" and job.transfer_ends_at is not None:
                times.append(job.transfer_ends_at)
            elif job.state == "Scheduled" and job.apply_starts_at is not None:
                times.append(job.apply_starts_at)
            elif job.state == "Running" and job.apply_ends_at is not None:
                times.append(job.apply_ends_at)
            elif job.state == "RebootPending" and job.reboot_done_at is not None:
                times.append(job.reboot_done_at)
        for moment in (self.restarting_until, self.unresponsive_until, self.host_busy_until):
            if moment is not None:
                times.append(moment)
        return min(times) if times else None

    def advance(self, now: float) -> None:
        """Run every state transition due by ``now``, in time order."""
        for _ in range(10_000):  # bounded: each pass finishes at least one transition
            due = self._earliest_transition(now)
            if due is None:
                break
            moment, action = due
            action(moment)
        if self.restarting_until is not None and now >= self.restarting_until:
            self._bmc_back(self.restarting_until)
        if self.unresponsive_until is not None and now >= self.unresponsive_until:
            self.set_unresponsive("up", until=None)
        if self.host_busy_until is not None and now >= self.host_busy_until:
            self.host_busy_until = None
        self.expire_sessions(now)

    def _earliest_transition(self, now: float) -> tuple[float, Any] | None:
        best: tuple[float, Any] | None = None

        def consider(moment: float | None, action: Any) -> None:
            nonlocal best
            if moment is not None and moment <= now and (best is None or moment < best[0]):
                best = (moment, action)

        for job in self.jobs.values():
            if job.state == "Downloading" and job.transfer_ends_at is not None:
                consider(job.transfer_ends_at, lambda at, j=job: self._staged(j, at))
            elif job.state == "Scheduled" and job.apply_starts_at is not None:
                consider(job.apply_starts_at, lambda at, j=job: self._apply_begins(j, at))
            elif job.state == "Running" and job.apply_ends_at is not None:
                consider(job.apply_ends_at, lambda at, j=job: self._apply_ends(j, at))
            elif job.state == "RebootPending" and job.reboot_done_at is not None:
                consider(job.reboot_done_at, lambda at, j=job: self._reboot_job_done(j, at))
        # A BMC restart that ends before later job transitions must be handled first
        # (an iDRAC job completes when the iDRAC is back).
        if self.restarting_until is not None:
            consider(self.restarting_until, self._bmc_back)
        return best

    def _set_message(self, job: Job, message: tuple[str, str], *args: str) -> None:
        job.message_id = message[0]
        job.message = message[1].format(*args)
        job.message_args = list(args)

    def _take_failure_plan(self, family: str) -> JobFailurePlan | None:
        for plan in self.failure_plans:
            if plan.component is None or plan.component == family:
                plan.count -= 1
                if plan.count <= 0:
                    self.failure_plans.remove(plan)
                return plan
        return None

    def _fail(self, job: Job, at: float, message: tuple[str, str], *args: str) -> None:
        job.state = "Failed"
        self._set_message(job, message, *args)
        job.percent = 100
        job.finished_at = at

    def _staged(self, job: Job, at: float) -> None:
        """The package is in the BMC: verify it and decide when it applies."""
        job.transfer_ends_at = None
        if job.image_error is not None:
            self._fail(job, at, job.image_error)
            return
        image = job.image
        if image is None:
            self._fail(job, at, MSG_BAD_SIGNATURE)
            return
        job.name = f"{job.name.split(':', 1)[0]}: {PACKAGE_NAMES[image.component]}"
        slots = self.matching_slots(image)
        if job.targets is not None:
            slots = [s for s in slots if s.fqdd in job.targets]
        if not slots:
            self._fail(job, at, MSG_NOT_APPLICABLE, job.package_name)
            return
        # The job queue refuses a second update of a device that already has one waiting; other
        # devices of the same model are independent (rolling several NICs back is one job each).
        wanted = {s.fqdd for s in slots}
        pending = [
            other
            for other in self.jobs.values()
            if other is not job and other.state in ("Scheduled", "Running") and wanted & set(other.applied_to)
        ]
        if pending:
            self._fail(job, at, MSG_ALREADY_PENDING, PACKAGE_NAMES[image.component])
            return
        job.applied_to = tuple(s.fqdd for s in slots)
        job.failure = self._take_failure_plan(image.component)
        if job.failure is not None and job.failure.phase == "download":
            self._fail(job, at, (job.failure.message_id, job.failure.message))
            return
        if all(s.version == image.version for s in slots):
            job.state = "Completed"
            self._set_message(job, MSG_SAME_VERSION, image.version, ", ".join(job.applied_to))
            job.percent = 100
            job.finished_at = at
            return
        if image.component == "iDRAC":
            # The iDRAC applies its own firmware at once, whatever apply time was asked for.
            self._start_apply(job, at, at)
            return
        job.state = "Scheduled"
        self._set_message(job, MSG_SCHEDULED)
        job.percent = 0
        if job.apply_time == "Immediate":
            # As Dell's "NowAndReboot": the BMC reboots the host to apply the update.
            self._boot_host(at, "GracefulRestart")

    def _start_apply(self, job: Job, at: float, starts: float) -> None:
        assert job.image is not None
        job.apply_starts_at = starts
        job.apply_ends_at = starts + self.timings.apply_seconds(job.image.component)
        if starts <= at:
            self._apply_begins(job, at)

    def _apply_begins(self, job: Job, at: float) -> None:
        job.state = "Running"
        job.started_at = at
        self._set_message(job, MSG_RUNNING)

    def _apply_ends(self, job: Job, at: float) -> None:
        assert job.image is not None
        job.apply_ends_at = None
        if job.image.component == "iDRAC" and (job.failure is None or job.failure.with_errors):
            # Flashed: the iDRAC reboots into the new firmware; the job completes once it is back.
            self._restart_bmc(at)
            return
        self._finish_apply(job, at)

    def _finish_apply(self, job: Job, at: float) -> None:
        assert job.image is not None
        job.percent = 100
        job.finished_at = at
        failure = job.failure
        if failure is not None and not failure.with_errors:
            job.state = "Failed"
            self._set_message(job, (failure.message_id, failure.message))
            return
        if (
            failure is None
            and "nic-needs-power-cycle" in self.quirks
            and self.last_reset_type not in COLD_RESETS
            and any(s.is_nic for s in self.slots if s.fqdd in job.applied_to)
        ):
            # Flashed, but the card activates its firmware only at a cold boot (issues 266, 375 above).
            job.state = "RebootPending"
            job.activation_pending = True
            job.finished_at = None
            self._set_message(job, MSG_ACTIVATION_PENDING)
            return
        self._activate(job, at)

    def _activate(self, job: Job, at: float) -> None:
        """The new firmware runs: FirmwareInventory shows it, the node's NICs report it."""
        assert job.image is not None
        failure = job.failure
        job.activation_pending = False
        job.finished_at = at
        for fqdd in job.applied_to:
            slot = next(s for s in self.slots if s.fqdd == fqdd)
            if slot.version != job.image.version:
                slot.previous_version = slot.version
                slot.version = job.image.version
                slot.installed_at = at
        nic_devices = tuple(
            s.host_device for s in self.slots if s.fqdd in job.applied_to and s.is_nic and s.host_device is not None
        )
        if nic_devices:
            self._effects.append(NicFirmwareApplied(host_devices=nic_devices, version=job.image.version))
        if failure is not None:
            job.state = "CompletedWithErrors"
            self._set_message(job, (failure.message_id, failure.message))
        else:
            job.state = "Completed"
            self._set_message(job, MSG_COMPLETED)

    def _reboot_job_done(self, job: Job, at: float) -> None:
        job.state = "RebootCompleted"
        self._set_message(job, MSG_REBOOT_DONE)
        job.percent = 100
        job.finished_at = at

    def _restart_bmc(self, at: float) -> None:
        self.restarting_until = at + self.timings.bmc_restart_seconds
        self.sessions.clear()
        for job in self.jobs.values():
            job.task_hidden = True
        self._effects.append(BmcRestarted())

    def _bmc_back(self, at: float) -> None:
        self.restarting_until = None
        self.auth_ready_at = at + self.timings.bmc_auth_warmup_seconds
        for job in self.jobs.values():
            flashed = job.apply_ends_at is None  # a Manager.Reset during the flash does not finish it
            if job.state == "Running" and job.image is not None and job.image.component == "iDRAC" and flashed:
                self._finish_apply(job, at)

    # -- power -----------------------------------------------------------------------------------------
    def reset_bmc(self, reset_type: str, now: float) -> None:
        if reset_type not in MANAGER_RESET_TYPES:
            raise RedfishError(400, "ActionParameterValueNotInList", reset_type, "ResetType", "Manager.Reset")
        self._restart_bmc(now)

    def system_reset_types(self) -> list[str]:
        """The ResetType values ``ComputerSystem.Reset`` offers."""
        return [t for t in SYSTEM_RESET_TYPES if not (t == "GracefulRestart" and "no-graceful-restart" in self.quirks)]

    def reset_system(self, reset_type: str, now: float) -> None:
        """ComputerSystem.Reset."""
        if reset_type not in self.system_reset_types():
            raise RedfishError(400, "ActionParameterValueNotInList", reset_type, "ResetType", "ComputerSystem.Reset")
        self.resets_received.append(reset_type)
        if reset_type == "Nmi":
            return
        if reset_type == "PushPowerButton":
            reset_type = "ForceOff" if self.power_state == "On" else "On"
        if reset_type in ("ForceOff", "GracefulShutdown"):
            if self.power_state == "Off":
                return
            self.power_state = "Off"
            self.host_busy_until = None
            self._effects.append(HostPowerOff())
            return
        if reset_type == "On" and self.power_state == "On":
            return
        self._boot_host(now, reset_type)

    def _boot_host(self, now: float, reset_type: str) -> None:
        """(Re)start the host; scheduled updates run in POST, one after the other."""
        forced = reset_type in ("ForceRestart", "PowerCycle", "On")
        start = now if self.power_state == "Off" else now + (5.0 if forced else self.timings.host_shutdown_seconds)
        self.power_state = "On"
        self.boot_count += 1
        self.last_reset_type = reset_type
        if reset_type in COLD_RESETS:
            for waiting in [j for j in self.jobs.values() if j.activation_pending]:
                self._activate(waiting, start)
        scheduled = sorted((j for j in self.jobs.values() if j.state == "Scheduled"), key=lambda j: j.created_at)
        if scheduled:
            # The Lifecycle Controller's reboot job; Dell's own modules look for "RebootNoForce" after
            # a ForceRestart too (dellemc.openmanage redfish_firmware_rollback), so only a power
            # cycle gets a type of its own.
            reboot_type = "PowerCycle" if reset_type == "PowerCycle" else "RebootNoForce"
            reboot_job = Job(
                job_id=self._new_job_id(now),
                job_type=reboot_type,
                name="Reboot Job",
                created_at=now,
                state="RebootPending",
                message_id=MSG_REBOOT_PENDING[0],
                message=MSG_REBOOT_PENDING[1],
                reboot_done_at=start,
                started_at=now,
            )
            self.jobs[reboot_job.job_id] = reboot_job
        moment = start
        for job in scheduled:
            if job.apply_starts_at is not None:
                continue  # already placed in an earlier boot that is still running
            self._start_apply(job, now, moment)
            assert job.apply_ends_at is not None
            moment = job.apply_ends_at
        running_until = [j.apply_ends_at for j in self.jobs.values() if j.state == "Running" and j.apply_ends_at]
        moment = max([moment, *running_until])
        self.host_busy_until = moment + self.timings.host_boot_seconds
        self._effects.append(HostReboot(duration=self.host_busy_until - now, reset_type=reset_type))
