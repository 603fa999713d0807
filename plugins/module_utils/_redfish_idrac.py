# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The Dell iDRAC adapter of the Redfish client (collection-internal).

Everything the collection knows that is iDRAC's own, and nothing else:

- FirmwareInventory member ids ``<Kind>-<ComponentID>-<version>__<FQDD>``
  (``Installed-``, ``Previous-`` rollback images, ``Current-`` duplicates on
  older releases, ``Available-`` pushed packages). The version inside the id
  is not trusted (iDRAC9 4.40 printed blanks there); ``Version`` and the
  ``Oem.Dell.DellSoftwareInventory.FQDD`` are read instead.
- Update progress from the Dell job (``JID_...`` under the manager's
  ``Oem.Dell.Jobs``, else ``<manager>/Jobs``) rather than the Task: jobs
  survive an iDRAC restart, Tasks do not. JobState ``Scheduled`` waits for a
  host reset; ``CompletedWithErrors`` counts as a failure (the devices may be
  half updated; the version check decides). A firmware job that says
  "Job completed, server reboot pending" is flashed but not active: the
  device needs a reboot or power cycle (dell/iDRAC-Redfish-Scripting issues
  266, 375). The message decides, not the JobState (``RebootPending`` is
  also the state of the Lifecycle Controller's own reboot job while it
  runs); only FirmwareInventory read afterwards tells the firmware runs.
- Rollback is Dell's documented way (dellemc.openmanage
  redfish_firmware_rollback): SimpleUpdate with ``ImageURI`` set to the
  ``Previous-`` member's URI.
- Updates name no ``Targets`` (an empty list): a Dell Update Package applies
  to every device it fits, as Dell's own scripts send it.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError, RedfishError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import (
    ACTION_ROLLBACK,
    KIND_INSTALLED,
    FlashPlan,
    InventoryItem,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish import (
    PROGRESS_COMPLETED,
    PROGRESS_FAILED,
    PROGRESS_REBOOT_PENDING,
    PROGRESS_RUNNING,
    PROGRESS_SCHEDULED,
    GenericAdapter,
    RedfishClient,
    RedfishResponse,
    ServiceMap,
    UpdateProgress,
    body_field,
    odata_id,
    says_reboot_pending,
)

_MEMBER_ID = re.compile(r"^(?P<kind>[A-Za-z]+)-(?P<component>\d+)-(?P<version>.*?)__(?P<fqdd>.+)$")
_JOB_ID = re.compile(r"^JID_\d+$")
_MAC_SUFFIX = re.compile(r"\s+-\s+(?:[0-9A-Fa-f]{2}[:-]){5,19}[0-9A-Fa-f]{2}\s*$")
FIRMWARE_JOB_TYPES = frozenset({"FirmwareUpdate", "FirmwareRollback", "RepositoryUpdate"})

# DellJob.JobState -> what it means to a caller.
_JOB_STATES = {
    "Scheduled": PROGRESS_SCHEDULED,
    "Completed": PROGRESS_COMPLETED,
    "RebootCompleted": PROGRESS_COMPLETED,
    "CompletedWithErrors": PROGRESS_FAILED,
    "Failed": PROGRESS_FAILED,
    "RebootFailed": PROGRESS_FAILED,
}


def is_idrac(services: ServiceMap) -> bool:
    """iDRAC9 service roots say ``Vendor: Dell`` (and ``Product: Integrated Dell Remote Access Controller``)."""
    return services.vendor.lower().startswith("dell") or "remote access controller" in services.product.lower()


def parse_member_id(member_id: str) -> Dict[str, str]:
    """``Installed-0-28.39.10.02__NIC.Slot.1-1-1`` -> kind, component_id, version (as in the id), fqdd."""
    found = _MEMBER_ID.match(member_id)
    if found is None:
        return {"kind": "", "component_id": "", "version": "", "fqdd": ""}
    return {
        "kind": found.group("kind"),
        "component_id": found.group("component"),
        "version": found.group("version").strip(),
        "fqdd": found.group("fqdd"),
    }


def hardware_kind(item: InventoryItem) -> str:
    """The hardware an update package fits: its PCI ids, else its Name without the port's MAC."""
    return item.hardware_id or _MAC_SUFFIX.sub("", item.name).strip()


def inventory_item(member: Mapping[str, Any]) -> InventoryItem:
    member_id = str(member.get("Id") or "")
    parsed = parse_member_id(member_id)
    where = f"FirmwareInventory member {member.get('@odata.id') or member_id or '(no @odata.id)'}"
    oem = member
    for key in ("Oem", "Dell", "DellSoftwareInventory"):
        oem = body_field(oem, key, dict, where=where)
    fqdd = str(oem.get("FQDD") or parsed["fqdd"] or "")
    version = str(member.get("Version") or "").strip() or parsed["version"]
    pci = [str(oem.get(key) or "") for key in ("VendorID", "DeviceID", "SubVendorID", "SubDeviceID")]
    return InventoryItem(
        member_id=member_id,
        uri=str(member.get("@odata.id") or ""),
        name=str(member.get("Name") or ""),
        version=version,
        fqdd=fqdd,
        kind=parsed["kind"] or KIND_INSTALLED,
        updateable=member.get("Updateable") is not False,
        hardware_id=":".join(pci).upper() if all(pci) else "",
    )


def job_progress(job: Mapping[str, Any]) -> UpdateProgress:
    """A DellJob as an ``UpdateProgress``: the job's own Message and MessageId are the BMC's words."""
    state = str(job.get("JobState") or "")
    percent = job.get("PercentComplete")
    message = str(job.get("Message") or "")
    progress = _JOB_STATES.get(state, PROGRESS_RUNNING)
    if progress != PROGRESS_FAILED and says_reboot_pending(message):
        progress = PROGRESS_REBOOT_PENDING
    return UpdateProgress(
        state=progress,
        detail=state or "unknown",
        message=message,
        message_id=str(job.get("MessageId") or ""),
        percent=percent if isinstance(percent, int) else None,
    )


class IdracAdapter(GenericAdapter):
    name = "idrac"

    def __init__(self) -> None:
        self._jobs_uri = ""

    def inventory_items(self, members: Sequence[Mapping[str, Any]]) -> List[InventoryItem]:
        return [inventory_item(member) for member in members]

    def update_targets(self, target_uris: Sequence[str]) -> Optional[List[str]]:
        return []

    def check_plan(self, plan: FlashPlan, inventory: Sequence[InventoryItem]) -> None:
        """An iDRAC applies an update package to every device it fits, whatever the request names (Targets: []).

        A pattern that picks some cards of a model (``NIC.Slot.3-*`` of eight ConnectX-7) would flash the
        others too, outside the plan, its diff and its verification: refused before anything is sent.
        A rollback is per device (each one's Previous image) and is not affected.
        """
        installed = {item.device: item for item in inventory if item.kind == KIND_INSTALLED}
        for component in plan.changes:
            if component.action == ACTION_ROLLBACK:
                continue
            kinds = {hardware_kind(installed[device.device]) for device in component.to_change}
            planned = {device.device for device in component.devices}
            left_out = sorted(
                device for device, item in installed.items() if hardware_kind(item) in kinds and device not in planned
            )
            if left_out:
                raise InvalidInputError(
                    f"Component {component.spec.label}: {', '.join(left_out)} is the same hardware as the devices "
                    f"{component.spec.match!r} matches, but an iDRAC applies an update package to every device it "
                    "fits: match all of them, or flash none"
                )

    def resets_host(self, device: str) -> bool:
        # The iDRAC applies its own firmware and restarts itself, not the host.
        return not device.startswith("iDRAC.")

    def jobs_uri(self, client: RedfishClient) -> str:
        if not self._jobs_uri:
            manager = client.first_member(client.services().managers, "Managers")
            body = client.get(manager)
            where = f"BMC {client.address}: {manager}"
            dell = body_field(body_field(body, "Oem", dict, where=where), "Dell", dict, where=where)
            self._jobs_uri = odata_id(dell.get("Jobs")) or f"{manager}/Jobs"
        return self._jobs_uri

    def job_id(self, response: RedfishResponse) -> str:
        job = super().job_id(response)
        return job if _JOB_ID.match(job) else ""

    def progress_observer(self, client: RedfishClient, response: RedfishResponse) -> Callable[[], UpdateProgress]:
        job = self.job_id(response)
        if not job:
            return super().progress_observer(client, response)
        return self.job_observer(client, job) or super().progress_observer(client, response)

    def job_observer(self, client: RedfishClient, job_id: str) -> Optional[Callable[[], UpdateProgress]]:
        if not _JOB_ID.match(job_id):
            return None
        uri = f"{self.jobs_uri(client)}/{job_id}"
        return lambda: job_progress(client.get(uri))

    def pending_update_jobs(self, client: RedfishClient) -> List[Dict[str, Any]]:
        """Firmware jobs an earlier run left: scheduled for a host reset, or flashed and waiting for a power cycle."""
        pending = []
        for job in client.members(self.jobs_uri(client)):
            if job.get("JobType") not in FIRMWARE_JOB_TYPES:
                continue
            waits_for_power = job_progress(job).reboot_pending
            if waits_for_power or job.get("JobState") == "Scheduled":
                pending.append(
                    {
                        "id": str(job.get("Id") or ""),
                        "name": str(job.get("Name") or ""),
                        "state": "RebootPending" if waits_for_power else "Scheduled",
                        "message": str(job.get("Message") or ""),
                    }
                )
        return pending

    def rollback_image_uri(self, client: RedfishClient, previous_uri: str) -> str:
        if not previous_uri:
            raise RedfishError(f"BMC {client.address}: no Previous image to roll back to")
        return previous_uri
