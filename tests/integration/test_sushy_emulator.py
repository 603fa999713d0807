"""The generic Redfish client against sushy-tools' emulator, an independent Redfish implementation.

Only the DMTF parts are exercised here (the iDRAC adapter is the twin's business): discovery from the service root,
HTTP basic auth where the service offers no sessions, SimpleUpdate with Targets, following the task it answers
with, ComputerSystem.Reset and waiting for the system to come back, and errors carrying the service's own message.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import RedfishError, RedfishHttpError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_flash import select_adapter
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish import (
    PROGRESS_COMPLETED,
    RedfishClient,
    RedfishSettings,
    UpdateProgress,
    host_is_up,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

from .redfish_emulator.sushy_launcher import BIOS_VERSION, Emulator, start_emulator

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    with start_emulator(tmp_path_factory.mktemp("sushy")) as running:
        yield running


def client_for(emulator: Emulator, *, password: str | None = None) -> RedfishClient:
    settings = RedfishSettings(
        baseurl=emulator.url,
        username=emulator.username,
        password=emulator.password if password is None else password,
        ca_path=emulator.ca_file,
        timeout=10,
        retries=1,
        retry_sleep=0.2,
    )
    return RedfishClient(settings)


def test_discovery_and_basic_auth_without_a_session_service(emulator: Emulator) -> None:
    client = client_for(emulator)
    session = client.session()
    with session as connected:
        services = connected.services()
        assert services.sessions == ""  # sushy-tools has no SessionService: basic auth
        assert services.simple_update == "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
        assert services.systems == "/redfish/v1/Systems"
        assert connected.system_uri() == emulator.system_uri
        assert select_adapter(connected).name == "dmtf"  # not an iDRAC: no vendor specifics
    assert session.warning == ""


def test_wrong_password_is_refused_with_the_service_message(emulator: Emulator) -> None:
    secret = "Not-The-Sushy-Passw0rd"
    client = client_for(emulator, password=secret)
    with pytest.raises(RedfishHttpError) as refused, client.session():
        pass
    assert refused.value.status == 401
    assert "login as 'admin' refused (HTTP 401)" in refused.value.msg and emulator.url in refused.value.msg
    assert secret not in refused.value.msg


def test_simple_update_follows_the_task_and_changes_the_bios(emulator: Emulator) -> None:
    client = client_for(emulator)
    with client.session():
        assert client.get(emulator.system_uri)["BiosVersion"] == BIOS_VERSION
        adapter = select_adapter(client)
        response = client.simple_update(
            "http://127.0.0.1:9/BIOS_2.4.5.bin",
            targets=adapter.update_targets([emulator.system_uri]),
            transfer_protocol="HTTP",
        )
        assert response.status == 204 and response.location.endswith("/redfish/v1/TaskService/Tasks/42")
        progress = client.follow(
            adapter.progress_observer(client, response),
            done=lambda seen: seen.finished,
            timeout=10,
            sleep=0.2,
            what="the BIOS update task",
        )
        assert (progress.state, progress.detail, progress.percent) == (PROGRESS_COMPLETED, "Completed", 100)
        assert client.get(emulator.system_uri)["BiosVersion"] == "2.4.5"  # sushy raises the minor version


def test_simple_update_refusal_carries_the_service_message(emulator: Emulator) -> None:
    client = client_for(emulator)
    with client.session(), pytest.raises(RedfishHttpError) as refused:
        client.simple_update("http://127.0.0.1:9/BIOS.bin")  # no Targets: sushy-tools needs them
    assert refused.value.status == 400
    assert "Missing ImageURI and/or Targets." in refused.value.msg and "Base.1.0.GeneralError" in refused.value.msg


def test_reset_turns_the_system_off_and_it_comes_back(emulator: Emulator) -> None:
    client = client_for(emulator)
    with client.session():
        detail = client.reset_system("ForceRestart", system_uri=emulator.system_uri)
        assert detail["power_state_before"] == "On"
        assert client.host_state(emulator.system_uri)["power_state"] == "Off"
        outcome = wait_until(
            lambda: client.host_state(emulator.system_uri),
            host_is_up,
            timeout=20,
            sleep=0.25,
            what="the emulated system to power on again",
        )
        assert outcome.value["power_state"] == "On" and outcome.polls > 1


def test_following_a_task_is_bounded(emulator: Emulator) -> None:
    client = client_for(emulator)
    never = UpdateProgress(state="running", detail="Running", message="still flashing")
    with client.session(), pytest.raises(RedfishError) as timed_out:
        client.follow(lambda: never, done=lambda seen: seen.finished, timeout=0.5, sleep=0.1, what="a task")
    assert "Timed out" in str(timed_out.value) and "still flashing" in str(timed_out.value)
