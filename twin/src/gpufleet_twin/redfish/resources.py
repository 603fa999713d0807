"""Redfish JSON for a :class:`~.model.Bmc`, shaped like an iDRAC9's (see reference samples).

Pure functions: model and simulated time in, dicts out.  Message texts of
the DMTF registries are the twin's wording of each message; the MessageIds
are the registries' own.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from .model import (
    IDRAC_REGISTRY_PREFIX,
    INVENTORY_URI,
    MANAGER_RESET_TYPES,
    MANAGER_URI,
    SYSTEM_RESET_URI,
    SYSTEM_URI,
    TASKS_URI,
    Bmc,
    InventoryEntry,
    Job,
    Session,
)

Obj = dict[str, Any]
BASE_REGISTRY = "Base.1.12"
TASK_REGISTRY = "TaskEvent.1.0"
UPDATE_REGISTRY = "Update.1.0"
DELL_JOBS_URI = f"{MANAGER_URI}/Jobs"
DELL_OEM_JOBS_URI = f"{MANAGER_URI}/Oem/Dell/Jobs"
JOBSERVICE_JOBS_URI = "/redfish/v1/JobService/Jobs"
SESSIONS_URI = "/redfish/v1/SessionService/Sessions"
SIMPLE_UPDATE_URI = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
MULTIPART_URI = "/redfish/v1/UpdateService/MultipartUpload"
TRANSFER_PROTOCOLS = ("HTTP", "HTTPS")

# (message template, severity, resolution) per Base registry message.
BASE_MESSAGES: dict[str, tuple[str, str, str]] = {
    "GeneralError": (
        "A general error has occurred. See ExtendedInfo for more information.",
        "Critical",
        "None.",
    ),
    "Success": ("The request completed successfully.", "OK", "None."),
    "Created": ("The resource was created.", "OK", "None."),
    "NoValidSession": (
        "No valid session exists for this request: log in again or send valid credentials.",
        "Critical",
        "Establish a session before sending requests, or provide valid credentials.",
    ),
    "ResourceMissingAtURI": (
        "The resource at the URI '{0}' was not found.",
        "Critical",
        "Place a valid resource at the URI or correct the URI and resubmit the request.",
    ),
    "OperationNotAllowed": (
        "The HTTP method is not allowed on this resource.",
        "Critical",
        "Use a method the resource supports.",
    ),
    "ActionParameterMissing": (
        "The action {0} needs the parameter {1} in the request body.",
        "Critical",
        "Supply the parameter and resubmit the request.",
    ),
    "ActionParameterValueNotInList": (
        "The value '{0}' of the parameter {1} of the action {2} is not one of the acceptable values.",
        "Warning",
        "Choose a value from the list the service advertises and resubmit the request.",
    ),
    "ActionParameterValueError": (
        "The value of the parameter {0} of the action {1} is not valid.",
        "Warning",
        "Correct the value and resubmit the request.",
    ),
    "PropertyMissing": (
        "The property {0} is required and missing from the request.",
        "Warning",
        "Include the property and resubmit the request.",
    ),
    "MalformedJSON": (
        "The request body is not well-formed JSON.",
        "Critical",
        "Correct the request body and resubmit the request.",
    ),
    "ResourceInUse": (
        "The resource is in use or in transition and cannot be changed now.",
        "Warning",
        "Retry the request once the operation in progress has finished.",
    ),
    "PreconditionFailed": (
        "The ETag in If-Match does not match the resource's current ETag.",
        "Critical",
        "Read the resource again and resubmit the request with its current ETag.",
    ),
    "ResetRequired": (
        "A reset of a component is needed to finish the operation: Reset action URI '{0}', ResetType '{1}'.",
        "Warning",
        "Perform the requested reset action.",
    ),
    "UnsupportedMediaType": (
        "The media type of the request body is not supported by this resource.",
        "Critical",
        "Resubmit the request with a supported media type.",
    ),
}


def iso(moment: float) -> str:
    """DMTF date-time with offset, as iDRAC tasks show it."""
    return dt.datetime.fromtimestamp(moment, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")


def dell_time(moment: float) -> str:
    """DellJob times carry no offset."""
    return dt.datetime.fromtimestamp(moment, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def base_message(key: str, *args: str) -> Obj:
    template, severity, resolution = BASE_MESSAGES.get(key, BASE_MESSAGES["GeneralError"])
    return {
        "Message": template.format(*args),
        "MessageArgs": list(args),
        "MessageArgs@odata.count": len(args),
        "MessageId": f"{BASE_REGISTRY}.{key}",
        "RelatedProperties": [],
        "RelatedProperties@odata.count": 0,
        "Resolution": resolution,
        "Severity": severity,
    }


def error_body(key: str, *args: str) -> Obj:
    """A Redfish error response: GeneralError with the specific message in ExtendedInfo."""
    return {
        "error": {
            "@Message.ExtendedInfo": [base_message(key, *args)],
            "code": f"{BASE_REGISTRY}.GeneralError",
            "message": BASE_MESSAGES["GeneralError"][0],
        }
    }


def success_body() -> Obj:
    return {"@Message.ExtendedInfo": [base_message("Success")]}


def _link(uri: str) -> Obj:
    return {"@odata.id": uri}


def collection(
    *,
    uri: str,
    odata_type: str,
    name: str,
    members: list[str],
    expand: Callable[[str], Obj] | None = None,
    description: str | None = None,
) -> Obj:
    body: Obj = {
        "@odata.context": f"/redfish/v1/$metadata#{odata_type}.{odata_type}",
        "@odata.id": uri,
        "@odata.type": f"#{odata_type}.{odata_type}",
        "Name": name,
        "Members": [expand(m) if expand else _link(m) for m in members],
        "Members@odata.count": len(members),
    }
    if description:
        body["Description"] = description
    return body


# -- service root, odata ----------------------------------------------------------------


def service_root(bmc: Bmc) -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#ServiceRoot.ServiceRoot",
        "@odata.id": "/redfish/v1",
        "@odata.type": "#ServiceRoot.v1_16_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "Description": "Root Service",
        "RedfishVersion": "1.17.0",
        "UUID": bmc.manager_uuid,
        "Vendor": "Dell",
        "Product": "Integrated Dell Remote Access Controller",
        "Chassis": _link("/redfish/v1/Chassis"),
        "JobService": _link("/redfish/v1/JobService"),
        "Managers": _link("/redfish/v1/Managers"),
        "SessionService": _link("/redfish/v1/SessionService"),
        "Systems": _link("/redfish/v1/Systems"),
        "TaskService": _link("/redfish/v1/TaskService"),
        "UpdateService": _link("/redfish/v1/UpdateService"),
        "Links": {"Sessions": _link(SESSIONS_URI)},
        "ProtocolFeaturesSupported": {
            "ExcerptQuery": False,
            "ExpandQuery": {"ExpandAll": True, "Levels": True, "Links": True, "MaxLevels": 1, "NoLinks": True},
            "FilterQuery": False,
            "OnlyMemberQuery": False,
            "SelectQuery": True,
        },
        "Oem": {
            "Dell": {
                "@odata.type": "#DellServiceRoot.v1_0_0.DellServiceRoot",
                "IsBranded": 0,
                "ManagerMACAddress": _bmc_mac(bmc),
                "ServiceTag": bmc.service_tag,
            }
        },
    }


def odata_document() -> Obj:
    names = ["Chassis", "JobService", "Managers", "SessionService", "Systems", "TaskService", "UpdateService"]
    return {
        "@odata.context": "/redfish/v1/$metadata",
        "value": [{"name": n, "kind": "Singleton", "url": f"/redfish/v1/{n}"} for n in names]
        + [{"name": "Sessions", "kind": "Singleton", "url": SESSIONS_URI}],
    }


METADATA_XML = """<?xml version="1.0" encoding="UTF-8"?>
<edmx:Edmx xmlns:edmx="http://docs.oasis-open.org/odata/ns/edmx" Version="4.0">
  <edmx:Reference Uri="http://redfish.dmtf.org/schemas/v1/ServiceRoot_v1.xml">
    <edmx:Include Namespace="ServiceRoot"/>
    <edmx:Include Namespace="ServiceRoot.v1_16_0"/>
  </edmx:Reference>
  <edmx:DataServices>
    <Schema xmlns="http://docs.oasis-open.org/odata/ns/edm" Namespace="Service">
      <EntityContainer Name="Service" Extends="ServiceRoot.v1_16_0.ServiceContainer"/>
    </Schema>
  </edmx:DataServices>
</edmx:Edmx>
"""


# -- sessions -------------------------------------------------------------------------------


def session_service(bmc: Bmc) -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#SessionService.SessionService",
        "@odata.id": "/redfish/v1/SessionService",
        "@odata.type": "#SessionService.v1_1_8.SessionService",
        "Id": "SessionService",
        "Name": "Session Service",
        "Description": "Session Service",
        "ServiceEnabled": True,
        "SessionTimeout": int(bmc.timings.session_timeout_seconds),
        "Sessions": _link(SESSIONS_URI),
        "Status": {"Health": "OK", "State": "Enabled"},
    }


def session_resource(session: Session) -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#Session.Session",
        "@odata.id": f"{SESSIONS_URI}/{session.session_id}",
        "@odata.type": "#Session.v1_6_0.Session",
        "Id": session.session_id,
        "Name": "User Session",
        "Description": "User Session",
        "UserName": session.username,
        "Password": None,
        "CreatedTime": iso(session.created_at),
        "SessionType": "Redfish",
    }


def sessions_collection(bmc: Bmc) -> Obj:
    return collection(
        uri=SESSIONS_URI,
        odata_type="SessionCollection",
        name="Session Collection",
        description="Collection of Sessions",
        members=[f"{SESSIONS_URI}/{s}" for s in sorted(bmc.sessions, key=int)],
    )


# -- systems, chassis, managers ----------------------------------------------------------------


def _boot_state(bmc: Bmc, now: float) -> str:
    if bmc.power_state != "On":
        return "None"
    if bmc.host_busy_until is not None and now < bmc.host_busy_until:
        return "SystemHardwareInitializationComplete"
    return "OSRunning"


def _bmc_mac(bmc: Bmc) -> str:
    tail = bmc.manager_uuid.replace("-", "")[-6:]
    return "d0:8e:79:" + ":".join(tail[i : i + 2] for i in range(0, 6, 2))


def system(bmc: Bmc, now: float) -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#ComputerSystem.ComputerSystem",
        "@odata.id": SYSTEM_URI,
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "Id": "System.Embedded.1",
        "Name": "System",
        "Description": "Computer System which represents a machine (physical or virtual) and the local resources",
        "HostName": bmc.node_name,
        "Manufacturer": "Dell Inc.",
        "Model": bmc.system_model,
        "SKU": bmc.service_tag,
        "SerialNumber": "CNIVC00" + bmc.service_tag[:6],
        "UUID": bmc.uuid,
        "SystemType": "Physical",
        "PowerState": bmc.power_state,
        "BiosVersion": bmc.bios_version,
        "BootProgress": {"LastState": _boot_state(bmc, now)},
        "Status": {"Health": "OK", "HealthRollup": "OK", "State": "Enabled"},
        "ProcessorSummary": {"Count": 2, "Model": "Intel(R) Xeon(R) Platinum 8480+"},
        "MemorySummary": {"TotalSystemMemoryGiB": 2048},
        "Links": {
            "Chassis": [_link("/redfish/v1/Chassis/System.Embedded.1")],
            "ManagedBy": [_link(MANAGER_URI)],
        },
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": SYSTEM_RESET_URI,
                "ResetType@Redfish.AllowableValues": bmc.system_reset_types(),
            }
        },
    }


def chassis(bmc: Bmc) -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#Chassis.Chassis",
        "@odata.id": "/redfish/v1/Chassis/System.Embedded.1",
        "@odata.type": "#Chassis.v1_23_0.Chassis",
        "Id": "System.Embedded.1",
        "Name": "Computer System Chassis",
        "ChassisType": "RackMount",
        "Manufacturer": "Dell Inc.",
        "Model": bmc.system_model,
        "SKU": bmc.service_tag,
        "PowerState": bmc.power_state,
        "Status": {"Health": "OK", "HealthRollup": "OK", "State": "Enabled"},
        "Links": {"ComputerSystems": [_link(SYSTEM_URI)], "ManagedBy": [_link(MANAGER_URI)]},
    }


def manager(bmc: Bmc, now: float) -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#Manager.Manager",
        "@odata.id": MANAGER_URI,
        "@odata.type": "#Manager.v1_17_0.Manager",
        "Id": "iDRAC.Embedded.1",
        "Name": "Manager",
        "Description": "BMC",
        "ManagerType": "BMC",
        "Manufacturer": "Dell Inc.",
        "Model": "16G Monolithic",
        "FirmwareVersion": bmc.idrac_version,
        "UUID": bmc.manager_uuid,
        "DateTime": iso(now),
        "DateTimeLocalOffset": "+00:00",
        "PowerState": "On",
        "Status": {"Health": "OK", "State": "Enabled"},
        "Links": {
            "ManagerForServers": [_link(SYSTEM_URI)],
            "ManagerForChassis": [_link("/redfish/v1/Chassis/System.Embedded.1")],
        },
        "Actions": {
            "#Manager.Reset": {
                "target": f"{MANAGER_URI}/Actions/Manager.Reset",
                "ResetType@Redfish.AllowableValues": list(MANAGER_RESET_TYPES),
            }
        },
        "Oem": {
            "Dell": {
                "Jobs": _link(DELL_OEM_JOBS_URI),
            }
        },
    }


# -- jobs and tasks -------------------------------------------------------------------------------


def dell_job(job: Job, now: float, *, uri_base: str = DELL_JOBS_URI) -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#DellJob.DellJob",
        "@odata.id": f"{uri_base}/{job.job_id}",
        "@odata.type": "#DellJob.v1_5_0.DellJob",
        "ActualRunningStartTime": dell_time(job.started_at) if job.started_at is not None else None,
        "ActualRunningStopTime": dell_time(job.finished_at) if job.finished_at is not None else None,
        "CompletionTime": dell_time(job.finished_at) if job.finished_at is not None else None,
        "Description": "Job Instance",
        "EndTime": "TIME_NA",
        "Id": job.job_id,
        "JobState": job.state,
        "JobType": job.job_type,
        "Message": job.message,
        "MessageArgs": list(job.message_args),
        "MessageArgs@odata.count": len(job.message_args),
        "MessageId": job.message_id,
        "Name": job.name,
        "PercentComplete": job.percent_at(now),
        "StartTime": dell_time(job.created_at),
        "TargetSettingsURI": None,
    }


def dell_jobs(bmc: Bmc, now: float, *, uri: str, expand: bool) -> Obj:
    jobs = sorted(bmc.jobs.values(), key=lambda j: j.job_id)
    body = collection(
        uri=uri,
        odata_type="DellJobCollection",
        name="JobQueue",
        description="Collection of Job Instances",
        members=[f"{uri}/{j.job_id}" for j in jobs],
    )
    if expand:
        body["Members"] = [dell_job(j, now, uri_base=uri) for j in jobs]
    return body


def _job_messages(job: Job) -> list[Obj]:
    messages: list[Obj] = [
        {
            "Message": job.message,
            "MessageArgs": list(job.message_args),
            "MessageArgs@odata.count": len(job.message_args),
            "MessageId": IDRAC_REGISTRY_PREFIX + job.message_id,
            "Severity": {"Failed": "Critical", "CompletedWithErrors": "Warning"}.get(job.state, "OK"),
        }
    ]
    if job.state == "Scheduled" and job.apply_starts_at is None:
        # The DMTF way to say "applies at the next reset", with the action that does it.
        messages.append(base_message("ResetRequired", SYSTEM_RESET_URI, "GracefulRestart"))
    if job.activation_pending:
        # As dell/iDRAC-Redfish-Scripting issue 266 shows it: the reset that activates the firmware is a power cycle.
        messages.append(base_message("ResetRequired", SYSTEM_RESET_URI, "PowerCycle"))
    return messages


def dmtf_job(job: Job, now: float) -> Obj:
    """The same job through the DMTF JobService (Job.v1), as iDRAC 7 serves it."""
    state, status = job.task_state()
    job_state = {"Pending": "Pending", "Exception": "Exception"}.get(state, state)
    if job.state == "Scheduled":
        job_state = "Starting"  # iDRAC reports a scheduled job as Starting here
    body: Obj = {
        "@odata.context": "/redfish/v1/$metadata#Job.Job",
        "@odata.id": f"{JOBSERVICE_JOBS_URI}/{job.job_id}",
        "@odata.type": "#Job.v1_2_1.Job",
        "Description": "Represent a job in Redfish",
        "Id": job.job_id,
        "Name": job.name,
        "JobState": job_state,
        "JobStatus": status,
        "PercentComplete": job.percent_at(now),
        "StartTime": iso(job.created_at),
        "Messages": _job_messages(job),
        "Messages@odata.count": len(_job_messages(job)),
    }
    if job.finished_at is not None:
        body["EndTime"] = iso(job.finished_at)
    return body


def task(job: Job, now: float) -> Obj:
    state, status = job.task_state()
    messages = _job_messages(job)
    body: Obj = {
        "@odata.context": "/redfish/v1/$metadata#Task.Task",
        "@odata.id": f"{TASKS_URI}/{job.job_id}",
        "@odata.type": "#Task.v1_6_1.Task",
        "Description": "Server Operation",
        "Id": job.job_id,
        "Name": job.name,
        "TaskState": state,
        "TaskStatus": status,
        "PercentComplete": job.percent_at(now),
        "StartTime": iso(job.created_at),
        "TaskMonitor": f"{TASKS_URI}/{job.job_id}",
        "Messages": messages,
        "Messages@odata.count": len(messages),
        "Oem": {"Dell": dell_job(job, now) | {"@odata.type": "#DellJob.v1_5_0.DellJob"}},
    }
    if job.finished_at is not None:
        body["EndTime"] = iso(job.finished_at)
    return body


def tasks_collection(bmc: Bmc, now: float) -> Obj:
    return collection(
        uri=TASKS_URI,
        odata_type="TaskCollection",
        name="Task Collection",
        description="Collection of Tasks",
        members=[f"{TASKS_URI}/{j.job_id}" for j in sorted(bmc.visible_tasks(now), key=lambda j: j.job_id)],
    )


def task_service(now: float) -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#TaskService.TaskService",
        "@odata.id": "/redfish/v1/TaskService",
        "@odata.type": "#TaskService.v1_2_0.TaskService",
        "Id": "TaskService",
        "Name": "Task Service",
        "Description": "Represents the properties for the service",
        "CompletedTaskOverWritePolicy": "Oldest",
        "DateTime": iso(now),
        "LifeCycleEventOnTaskStateChange": True,
        "ServiceEnabled": True,
        "Status": {"Health": "OK", "State": "Enabled"},
        "Tasks": _link(TASKS_URI),
    }


def job_service() -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#JobService.JobService",
        "@odata.id": "/redfish/v1/JobService",
        "@odata.type": "#JobService.v1_0_5.JobService",
        "Id": "JobService",
        "Name": "Job Service",
        "Description": "Represents the properties for the Job Service",
        "ServiceEnabled": True,
        "Jobs": _link(JOBSERVICE_JOBS_URI),
        "Status": {"Health": "OK", "State": "Enabled"},
    }


def dmtf_jobs(bmc: Bmc, now: float, *, expand: bool) -> Obj:
    jobs = sorted(bmc.jobs.values(), key=lambda j: j.job_id)
    body = collection(
        uri=JOBSERVICE_JOBS_URI,
        odata_type="JobCollection",
        name="Job Collection",
        description="Collection of Job Instances",
        members=[f"{JOBSERVICE_JOBS_URI}/{j.job_id}" for j in jobs],
    )
    if expand:
        body["Members"] = [dmtf_job(j, now) for j in jobs]
    return body


# -- update service and inventory -----------------------------------------------------------------


def update_service() -> Obj:
    return {
        "@odata.context": "/redfish/v1/$metadata#UpdateService.UpdateService",
        "@odata.id": "/redfish/v1/UpdateService",
        "@odata.type": "#UpdateService.v1_11_0.UpdateService",
        "Id": "UpdateService",
        "Name": "Update Service",
        "Description": "Represents the properties for the Update Service",
        "ServiceEnabled": True,
        "Status": {"Health": "OK", "State": "Enabled"},
        "FirmwareInventory": _link(INVENTORY_URI),
        "HttpPushUri": INVENTORY_URI,
        "MultipartHttpPushUri": MULTIPART_URI,
        "MaxImageSizeBytes": None,
        "Actions": {
            "#UpdateService.SimpleUpdate": {
                "target": SIMPLE_UPDATE_URI,
                "TransferProtocol@Redfish.AllowableValues": list(TRANSFER_PROTOCOLS),
                "@Redfish.OperationApplyTimeSupport": {
                    "@odata.type": "#Settings.v1_3_5.OperationApplyTimeSupport",
                    "SupportedValues": ["Immediate", "OnReset"],
                },
            },
        },
    }


def inventory_member(bmc: Bmc, entry: InventoryEntry) -> Obj:
    slot = entry.slot
    uri = f"{INVENTORY_URI}/{entry.member_id}"
    shown = slot.display_version(entry.version)
    numbers = [int(p) if p.isdigit() else 0 for p in shown.split(".")] + [0, 0, 0, 0]
    status_word = {"Installed": "Installed", "Previous": "AvailableForInstallation", "Available": "Available"}[
        entry.kind
    ]
    dcim_kind = entry.kind.upper()
    if slot.family == "iDRAC":
        dcim_id = f"DCIM:{dcim_kind}_0x23_{slot.fqdd}_0x23_IDRACinfo"
    else:
        dcim_id = f"DCIM:{dcim_kind}_0x23_{slot.dcim_code}__{slot.fqdd}"
    if slot.vendor_id:
        identity = (
            "OrgID:ComponentType:VendorID:DeviceID:SubVendorID:SubDeviceID",
            f"DCIM:firmware:{slot.vendor_id}:{slot.device_id}:{slot.sub_vendor_id}:{slot.sub_device_id}",
        )
    else:
        identity = ("OrgID:ComponentType:ComponentID", f"DCIM:firmware:{slot.component_id}")
    installed = entry.kind == "Installed"
    return {
        "@odata.context": "/redfish/v1/$metadata#SoftwareInventory.SoftwareInventory",
        "@odata.id": uri,
        "@odata.type": "#SoftwareInventory.v1_9_0.SoftwareInventory",
        "Description": "Represents Firmware Inventory",
        "Id": entry.member_id,
        "Name": slot.name,
        "Oem": {
            "Dell": {
                "@odata.type": "#DellOem.v1_3_0.DellOemResources",
                "DellSoftwareInventory": {
                    "@odata.context": "/redfish/v1/$metadata#DellSoftwareInventory.DellSoftwareInventory",
                    "@odata.id": f"{uri}/Oem/Dell/DellSoftwareInventory/{dcim_id}",
                    "@odata.type": "#DellSoftwareInventory.v1_2_0.DellSoftwareInventory",
                    "BuildNumber": numbers[3],
                    "Classifications": ["Firmware"],
                    "Classifications@odata.count": 1,
                    "ComponentID": slot.component_id,
                    "ComponentType": "FRMW",
                    "Description": "A firmware image of a device of this system.",
                    "DeviceID": slot.device_id,
                    "ElementName": slot.name,
                    "FQDD": slot.fqdd,
                    "HashValue": None,
                    "Id": dcim_id,
                    "IdentityInfoType": [identity[0]],
                    "IdentityInfoType@odata.count": 1,
                    "IdentityInfoValue": [identity[1]],
                    "IdentityInfoValue@odata.count": 1,
                    "InstallationDate": dell_time(slot.installed_at) + "Z" if installed else "NA",
                    "IsEntity": True,
                    "MajorVersion": numbers[0],
                    "MinorVersion": numbers[1],
                    "Name": "DellSoftwareInventory",
                    "RevisionNumber": numbers[2],
                    "RevisionString": None,
                    "Status": status_word,
                    "SubDeviceID": slot.sub_device_id,
                    "SubVendorID": slot.sub_vendor_id,
                    "VendorID": slot.vendor_id,
                    "impactsTPMmeasurements": slot.family != "iDRAC",
                },
            }
        },
        "ReleaseDate": "00:00:00Z",
        "SoftwareId": slot.component_id,
        "Status": {"Health": "OK", "State": "Enabled"},
        "Updateable": True,
        "Version": shown,
    }


def inventory_collection(bmc: Bmc, *, expand: bool) -> Obj:
    entries = bmc.inventory()
    body = collection(
        uri=INVENTORY_URI,
        odata_type="SoftwareInventoryCollection",
        name="Firmware Inventory Collection",
        description="Collection of Firmware Inventory",
        members=[f"{INVENTORY_URI}/{e.member_id}" for e in entries],
    )
    if expand:
        body["Members"] = [inventory_member(bmc, e) for e in entries]
    return body


def select(body: Obj, fields: list[str]) -> Obj:
    """``$select``: keep the named top-level properties and the OData annotations."""
    return {k: v for k, v in body.items() if k.startswith("@odata.") or k in fields}
