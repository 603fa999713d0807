"""The generic Redfish client's pure parts: error messages, task states, the multipart body, service discovery."""

from __future__ import annotations

import json
import pathlib

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish import (
    PROGRESS_COMPLETED,
    PROGRESS_FAILED,
    PROGRESS_RUNNING,
    PROGRESS_SCHEDULED,
    RedfishClient,
    RedfishResponse,
    RedfishSettings,
    describe_error_body,
    encode_multipart,
    extended_messages,
    host_is_up,
    service_map,
    task_progress,
)

SAMPLES = pathlib.Path(__file__).resolve().parents[5] / "shared" / "reference" / "samples" / "redfish"


def sample(name: str) -> dict:
    path = SAMPLES / name
    if not path.exists():
        pytest.skip(f"reference sample {name} is not available")
    return json.loads(path.read_text())


# -- errors ------------------------------------------------------------------------------------------


IDRAC_401 = {
    "error": {
        "@Message.ExtendedInfo": [
            {
                "Message": "No valid session exists for this request: log in again or send valid credentials.",
                "MessageId": "Base.1.12.NoValidSession",
                "Severity": "Critical",
            }
        ],
        "code": "Base.1.12.GeneralError",
        "message": "A general error has occurred. See ExtendedInfo for more information.",
    }
}
# sushy-tools puts the text in error.message and only an id in ExtendedInfo.
SUSHY_400 = {
    "error": {
        "code": "Base.1.0.GeneralError",
        "message": "Missing ImageURI and/or Targets.",
        "@Message.ExtendedInfo": [{"MessageId": "Base.1.0.GeneralError"}],
    }
}


def test_extended_info_message_wins_over_the_generic_error_message() -> None:
    assert extended_messages(IDRAC_401) == [
        {
            "MessageId": "Base.1.12.NoValidSession",
            "Message": "No valid session exists for this request: log in again or send valid credentials.",
            "Severity": "Critical",
        }
    ]
    assert describe_error_body(IDRAC_401, fallback="x") == (
        "No valid session exists for this request: log in again or send valid credentials. (Base.1.12.NoValidSession)"
    )


def test_error_message_is_used_when_extended_info_has_no_text() -> None:
    assert describe_error_body(SUSHY_400, fallback="x") == "Missing ImageURI and/or Targets. (Base.1.0.GeneralError)"
    assert (
        describe_error_body({"error": {"message": "Unauthorized", "code": 401}}, fallback="x") == "Unauthorized (401)"
    )


def test_fallback_for_bodies_without_a_redfish_error() -> None:
    assert describe_error_body(None, fallback="no Redfish error body") == "no Redfish error body"
    assert describe_error_body("<html>", fallback="nothing") == "nothing"
    long_body = {"error": {"@Message.ExtendedInfo": [{"Message": "x" * 2000, "MessageId": "A.B"}]}}
    assert len(describe_error_body(long_body, fallback="")) == 600


# -- tasks ---------------------------------------------------------------------------------------------


def test_task_states_mean_what_callers_need() -> None:
    assert task_progress({"TaskState": "Running", "PercentComplete": 40}).state == PROGRESS_RUNNING
    assert task_progress({"TaskState": "Completed", "TaskStatus": "OK"}).state == PROGRESS_COMPLETED
    assert task_progress({"TaskState": "Completed", "TaskStatus": "Critical"}).state == PROGRESS_FAILED
    for state in ("Exception", "Killed", "Cancelled", "Interrupted"):
        assert task_progress({"TaskState": state, "TaskStatus": "OK"}).state == PROGRESS_FAILED
    assert task_progress({"TaskState": "Pending"}).state == PROGRESS_RUNNING


def test_pending_with_reset_required_waits_for_a_reset() -> None:
    task = {
        "TaskState": "Pending",
        "TaskStatus": "OK",
        "Messages": [
            {"MessageId": "IDRAC.2.8.JCP001", "Message": "Task successfully scheduled.", "Severity": "OK"},
            {"MessageId": "Base.1.12.ResetRequired", "Message": "A reset is needed.", "Severity": "Warning"},
        ],
    }
    progress = task_progress(task)
    assert progress.state == PROGRESS_SCHEDULED and progress.detail == "Pending"


def test_exception_with_status_ok_is_a_failure_with_its_message() -> None:
    """The NVIDIA DGX BMC answers TaskState Exception with TaskStatus OK (reference sample)."""
    progress = task_progress(sample("nvidia-dgx-viking-bmc-task-3-exception.json"))
    assert progress.state == PROGRESS_FAILED and progress.detail == "Exception"
    assert progress.message_id == "Base.1.12.ActionNotSupported" and "ForceRestart" in progress.message
    assert task_progress(sample("nvidia-dgx-viking-bmc-task-1-completed.json")).state == PROGRESS_COMPLETED


# -- multipart ------------------------------------------------------------------------------------------


def test_multipart_body_parses_back_into_its_parts() -> None:
    from gpufleet_twin.redfish.app import parse_form_data

    image = b"GPUFLEET-FW/1 component=ConnectX-7 version=28.42.1000\n" + bytes(range(256)) * 4
    content_type, body = encode_multipart(
        [
            ("UpdateParameters", None, "application/json", b'{"Targets": []}'),
            ("UpdateFile", 'fw "cx7".bin', "application/octet-stream", image),
        ]
    )
    assert content_type.startswith("multipart/form-data; boundary=gpufleet-")
    parts = parse_form_data(body, content_type)
    assert [(p.name, p.filename, p.content_type) for p in parts] == [
        ("UpdateParameters", None, "application/json"),
        ("UpdateFile", "fw cx7.bin", "application/octet-stream"),
    ]
    assert parts[1].content == image and json.loads(parts[0].content) == {"Targets": []}


def test_a_boundary_inside_the_content_is_refused() -> None:
    with pytest.raises(InvalidInputError):
        encode_multipart([("UpdateFile", "a.bin", "application/octet-stream", b"--xyz--")], boundary="xyz")


# -- discovery ------------------------------------------------------------------------------------------


IDRAC_ROOT = {
    "Vendor": "Dell",
    "Product": "Integrated Dell Remote Access Controller",
    "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
    "ProtocolFeaturesSupported": {"ExpandQuery": {"ExpandAll": True, "Levels": True, "MaxLevels": 1}},
    "UpdateService": {"@odata.id": "/redfish/v1/UpdateService"},
    "TaskService": {"@odata.id": "/redfish/v1/TaskService"},
    "Systems": {"@odata.id": "/redfish/v1/Systems"},
    "Managers": {"@odata.id": "/redfish/v1/Managers"},
}
UPDATE_SERVICE = {
    "FirmwareInventory": {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory"},
    "HttpPushUri": "/redfish/v1/UpdateService/FirmwareInventory",
    "MultipartHttpPushUri": "/redfish/v1/UpdateService/MultipartUpload",
    "Actions": {
        "#UpdateService.SimpleUpdate": {
            "target": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
            "TransferProtocol@Redfish.AllowableValues": ["HTTP", "HTTPS"],
            "@Redfish.OperationApplyTimeSupport": {"SupportedValues": ["Immediate", "OnReset"]},
        }
    },
}


def test_service_map_reads_every_uri_from_the_service() -> None:
    services = service_map(IDRAC_ROOT, UPDATE_SERVICE)
    assert services.sessions == "/redfish/v1/SessionService/Sessions" and services.expand is True
    assert services.firmware_inventory == "/redfish/v1/UpdateService/FirmwareInventory"
    assert services.multipart_push == "/redfish/v1/UpdateService/MultipartUpload"
    assert services.simple_update.endswith("UpdateService.SimpleUpdate")
    assert services.apply_times == ("Immediate", "OnReset") and services.transfer_protocols == ("HTTP", "HTTPS")
    assert (services.systems, services.managers, services.task_service) == (
        "/redfish/v1/Systems",
        "/redfish/v1/Managers",
        "/redfish/v1/TaskService",
    )


def test_service_map_of_a_minimal_service() -> None:
    services = service_map({"Systems": {"@odata.id": "/redfish/v1/Systems"}}, None)
    assert services.sessions == "" and services.expand is False and services.simple_update == ""
    assert services.as_dict()["sessions"] is False


def test_host_is_up_needs_power_and_a_booted_os_where_reported() -> None:
    assert host_is_up({"power_state": "On", "boot_progress": "OSRunning"})
    assert host_is_up({"power_state": "On", "boot_progress": ""})
    assert not host_is_up({"power_state": "On", "boot_progress": "SystemHardwareInitializationComplete"})
    assert not host_is_up({"power_state": "Off", "boot_progress": ""})


def test_settings_refuse_a_baseurl_without_scheme_and_hide_the_password() -> None:
    with pytest.raises(InvalidInputError):
        RedfishSettings(baseurl="idrac.example.com", username="root", password="Gpuf1eet-Secret")
    settings = RedfishSettings(baseurl="https://10.0.0.5:443/redfish/v1", username="root", password="Gpuf1eet-Secret")
    assert settings.origin == "https://10.0.0.5:443" and "Gpuf1eet-Secret" not in repr(settings)


def test_a_busy_or_throttling_bmc_is_retried_with_a_jittered_bounded_back_off() -> None:
    pauses: list = []
    client = RedfishClient(
        RedfishSettings(baseurl="https://bmc.example", username="u", password="p", retries=3, retry_sleep=2.0),
        pause=pauses.append,
        jitter=lambda: 0.5,
    )
    answers = [RedfishResponse(status=429, headers={}, body={}), RedfishResponse(status=503, headers={}, body={})]
    answers.append(RedfishResponse(status=200, headers={}, body={"ok": True}))
    client._send = lambda *args, **kwargs: answers.pop(0)  # type: ignore[method-assign]
    assert client._exchange("GET", "/redfish/v1", data=None, headers={}, timeout=5).body == {"ok": True}
    assert pauses == [2.5, 5.0]  # 2 s, then 4 s, each stretched by a quarter here
