"""Fuzzed Redfish answers: truncated and malformed bodies, wrong types, missing keys and nulls.

The pure readers (error bodies, Tasks, Dell jobs, inventory members, the service map) are fed real BMC payloads
(/work/shared/reference/samples/redfish) with a subtree replaced by another type, and random JSON; a real
``RedfishClient`` talks over HTTP to a small local BMC whose resources are iDRAC-shaped (from the same samples) with
one of them broken, and ``run_flash`` in check mode is run against it. Always a result or the collection's error
(``GpuFleetError``) naming the BMC and what it answered, never another exception, and in check mode nothing but GETs.
Profiles and how to run a longer campaign: tests/unit/conftest.py.
"""

from __future__ import annotations

import copy
import http.server
import json
import os
import pathlib
import random
import socket
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import GpuFleetError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_flash import FlashOptions, run_flash
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import (
    ComponentSpec,
    generic_inventory_item,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish import (
    RedfishClient,
    RedfishSettings,
    describe_error_body,
    extended_messages,
    service_map,
    task_progress,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._redfish_idrac import inventory_item, job_progress
from gpufleet_twin.redfish.service import CaPair

ROOT = pathlib.Path(__file__).resolve().parents[4]
# shared/ sits beside the checkout (CI, /work/main) or one level up (a worktree under /work/wt); without it the
# fuzzing runs on random JSON and the built-in resources only.
SAMPLES = next(
    (
        base / "shared" / "reference" / "samples" / "redfish"
        for base in (ROOT.parent, ROOT.parent.parent)
        if (base / "shared" / "reference" / "samples" / "redfish").is_dir()
    ),
    ROOT.parent / "shared" / "reference" / "samples" / "redfish",
)
JSON_SAMPLES = sorted(SAMPLES.glob("*.json")) if SAMPLES.is_dir() else []

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(
            st.sampled_from(
                [
                    "@odata.id",
                    "Members",
                    "Messages",
                    "Message",
                    "MessageId",
                    "Severity",
                    "error",
                    "@Message.ExtendedInfo",
                    "TaskState",
                    "TaskStatus",
                    "PercentComplete",
                    "Oem",
                    "Dell",
                    "DellSoftwareInventory",
                    "Id",
                    "Name",
                    "Version",
                    "JobState",
                    "Actions",
                    "Links",
                    "Sessions",
                    "UpdateService",
                    "FirmwareInventory",
                    "target",
                    "code",
                    "message",
                ]
            )
            | st.text(max_size=6),
            children,
            max_size=5,
        ),
    ),
    max_leaves=25,
)
_WRONG = [None, "", "text", 0, 7, -1, 1.5, True, [], [1, "x"], {}, {"@odata.id": 5}]


def paths_of(value: Any, prefix: tuple = ()) -> Iterator[tuple]:
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths_of(item, (*prefix, index))


def with_wrong_type(document: Any, rng: random.Random) -> Any:
    """The document with one subtree (or a key) replaced by another type, or removed."""
    document = copy.deepcopy(document)
    path = rng.choice(list(paths_of(document)))
    if not path:
        return rng.choice(_WRONG)
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    if isinstance(parent, dict) and rng.random() < 0.25:
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(_WRONG)
    return document


@st.composite
def broken_samples(draw: st.DrawFn) -> Any:
    if not JSON_SAMPLES:
        return draw(json_values)
    document = json.loads(draw(st.sampled_from(JSON_SAMPLES)).read_text())
    rng = random.Random(draw(st.integers(min_value=0, max_value=2**32)))
    for _mutation in range(draw(st.integers(min_value=1, max_value=3))):
        document = with_wrong_type(document, rng)
    return document


# -- the pure readers ----------------------------------------------------------------------------------


def read_everything(body: Any) -> None:
    extended_messages(body)
    describe_error_body(body, fallback="no Redfish error body")
    if isinstance(body, dict):  # the client hands these only JSON objects (RedfishClient.get)
        task_progress(body).as_dict()
        job_progress(body).as_dict()
        inventory_item(body).as_dict()
        generic_inventory_item(body).as_dict()
        service_map(body, body).as_dict()


@given(body=st.one_of(broken_samples(), json_values))
def test_pure_readers_read_any_body_or_refuse_it_with_the_collections_error(body: Any) -> None:
    try:
        read_everything(body)
    except GpuFleetError as err:
        assert err.msg


# -- a BMC over HTTP -------------------------------------------------------------------------------------

NIC = "/redfish/v1/UpdateService/FirmwareInventory/Installed-0-24.40.10.00__NIC.Slot.5-1"
PREVIOUS = "/redfish/v1/UpdateService/FirmwareInventory/Previous-0-24.39.10.00__NIC.Slot.5-1"
JOBS = "/redfish/v1/Managers/iDRAC.Embedded.1/Oem/Dell/Jobs"
JOB = JOBS + "/JID_102241909559"


def sample(name: str, default: dict) -> dict:
    path = SAMPLES / name
    return json.loads(path.read_text()) if path.is_file() else default


def idrac_resources() -> dict[str, Any]:
    """An iDRAC9 as the collection reads it: service root, UpdateService, inventory, system, manager, jobs."""
    nic = sample(
        "dell-libredfish-mockup-member-installed-nic-slot-5-1-24.40.10.00.json",
        {"@odata.id": NIC, "Id": NIC.rsplit("/", 1)[1], "Name": "Mellanox Network Adapter", "Version": "24.40.10.00"},
    )
    previous = dict(copy.deepcopy(nic), Id=PREVIOUS.rsplit("/", 1)[1], Version="24.39.10.00")
    previous["@odata.id"] = PREVIOUS
    job = sample("dell-libredfish-mockup-delljob-JID_102241909559.json", {"@odata.id": JOB, "Id": "JID_102241909559"})
    return {
        "/redfish/v1": {
            "@odata.id": "/redfish/v1",
            "Vendor": "Dell",
            "Product": "Integrated Dell Remote Access Controller",
            "UpdateService": {"@odata.id": "/redfish/v1/UpdateService"},
            "Systems": {"@odata.id": "/redfish/v1/Systems"},
            "Managers": {"@odata.id": "/redfish/v1/Managers"},
        },
        "/redfish/v1/UpdateService": {
            "@odata.id": "/redfish/v1/UpdateService",
            "FirmwareInventory": {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory"},
            "MultipartHttpPushUri": "/redfish/v1/UpdateService/MultipartUpload",
            "Actions": {
                "#UpdateService.SimpleUpdate": {
                    "target": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                    "@Redfish.OperationApplyTimeSupport": {"SupportedValues": ["Immediate", "OnReset"]},
                }
            },
        },
        "/redfish/v1/UpdateService/FirmwareInventory": {
            "@odata.id": "/redfish/v1/UpdateService/FirmwareInventory",
            "Members": [{"@odata.id": NIC}, {"@odata.id": PREVIOUS}],
        },
        NIC: nic,
        PREVIOUS: previous,
        "/redfish/v1/Systems": {"Members": [{"@odata.id": "/redfish/v1/Systems/System.Embedded.1"}]},
        "/redfish/v1/Systems/System.Embedded.1": {
            "@odata.id": "/redfish/v1/Systems/System.Embedded.1",
            "PowerState": "On",
            "Actions": {
                "#ComputerSystem.Reset": {
                    "target": "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset",
                    "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulRestart", "PowerCycle"],
                }
            },
        },
        "/redfish/v1/Managers": {"Members": [{"@odata.id": "/redfish/v1/Managers/iDRAC.Embedded.1"}]},
        "/redfish/v1/Managers/iDRAC.Embedded.1": {
            "@odata.id": "/redfish/v1/Managers/iDRAC.Embedded.1",
            "Oem": {"Dell": {"Jobs": {"@odata.id": JOBS}}},
        },
        JOBS: {"@odata.id": JOBS, "Members": [{"@odata.id": JOB}]},
        JOB: job,
    }


class Bmc:
    """A local HTTP server answering GETs from ``resources`` (raw bytes where a body is broken)."""

    def __init__(self) -> None:
        self.resources: dict[str, Any] = idrac_resources()
        self.raw: dict[str, bytes] = {}
        self.requests: list[tuple[str, str]] = []
        bmc = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def setup(self) -> None:
                super().setup()
                # Headers and body go out in two writes: without this, delayed ACKs cost 40 ms a request.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _answer(self) -> None:
                path = self.path.split("?", 1)[0].rstrip("/") or "/"
                bmc.requests.append((self.command, path))
                if self.command != "GET":
                    body, status = b'{"error": {"message": "not in this test"}}', 405
                elif path in bmc.raw:
                    body, status = bmc.raw[path], 200
                elif path in bmc.resources:
                    body, status = json.dumps(bmc.resources[path]).encode(), 200
                else:
                    body, status = b'{"error": {"message": "no such resource"}}', 404
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:
                return

        # A CA file of its own: without one, every request loads the system's CA bundle (130 ms on this machine).
        self.ca_path = tempfile.NamedTemporaryFile(suffix=".pem", delete=False)  # noqa: SIM115 - closed in close()
        self.ca_path.write(CaPair.generate().cert_pem)
        self.ca_path.close()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def reset(self) -> None:
        self.resources = idrac_resources()
        self.raw = {}
        self.requests = []

    def close(self) -> None:
        os.unlink(self.ca_path.name)
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


@pytest.fixture(scope="module")
def bmc() -> Iterator[Bmc]:
    server = Bmc()
    yield server
    server.close()


def settings(bmc: Bmc) -> RedfishSettings:
    return RedfishSettings(
        baseurl=bmc.url, username="root", password="fuzz-Passw0rd", retries=0, timeout=5, ca_path=bmc.ca_path.name
    )


def check_flash(bmc: Bmc) -> dict[str, Any]:
    spec = ComponentSpec(match="NIC.Slot.5-1", version="24.41.10.00", image_uri="http://127.0.0.1:1/nic.bin",
                         sha256="0" * 64, name="firmware_nic")  # fmt: skip
    options = FlashOptions(components=[spec], reboot=True, check_mode=True, wait_sleep=0.1)
    return run_flash(settings(bmc), options, pause=lambda _seconds: None)


def test_the_local_bmc_answers_a_check_flash(bmc: Bmc) -> None:
    bmc.reset()
    result = check_flash(bmc)
    assert result["changed"] is True and result["adapter"] == "idrac"
    assert result["versions"]["before"] and result["pending_jobs"] == []
    assert {method for method, _path in bmc.requests} == {"GET"}


@given(data=st.data())
def test_a_check_flash_against_a_bmc_with_a_broken_resource_fails_clearly(bmc: Bmc, data: st.DataObject) -> None:
    bmc.reset()
    path = data.draw(st.sampled_from(sorted(bmc.resources)))
    how = data.draw(st.sampled_from(["truncated", "not json", "wrong type", "not an object"]))
    text = json.dumps(bmc.resources[path])
    if how == "truncated":
        bmc.raw[path] = text[: data.draw(st.integers(min_value=0, max_value=len(text) - 1))].encode()
    elif how == "not json":
        bmc.raw[path] = data.draw(st.sampled_from([b"<html>502 Bad Gateway</html>", b"\xff\xfe", b"{", b"null"]))
    elif how == "not an object":
        bmc.raw[path] = json.dumps(data.draw(st.sampled_from([[], [1], "text", 5, None]))).encode()
    else:
        rng = random.Random(data.draw(st.integers(min_value=0, max_value=2**32)))
        bmc.resources[path] = with_wrong_type(bmc.resources[path], rng)
    try:
        check_flash(bmc)
    except GpuFleetError as err:
        assert bmc.url in err.msg or err.result.get("bmc") == bmc.url, err.msg  # which BMC (the module names it)
    # Check mode: reads only, whatever the BMC answered.
    assert {method for method, _path in bmc.requests} <= {"GET"}


@given(body=st.one_of(json_values.map(lambda value: json.dumps(value).encode()), st.binary(max_size=40)))
def test_client_get_answers_an_object_or_the_collections_error(bmc: Bmc, body: bytes) -> None:
    bmc.reset()
    bmc.raw["/redfish/v1/Systems/System.Embedded.1"] = body
    client = RedfishClient(settings(bmc), pause=lambda _seconds: None)
    try:
        assert isinstance(client.get("/redfish/v1/Systems/System.Embedded.1"), dict)
        client.host_state("/redfish/v1/Systems/System.Embedded.1")
        client.reset_action("GracefulRestart", system_uri="/redfish/v1/Systems/System.Embedded.1")
    except GpuFleetError as err:
        assert bmc.url in err.msg and "System.Embedded.1" in err.msg, err.msg


# -- regression examples the fuzzing found --------------------------------------------------------------


def test_an_error_body_with_extended_info_of_another_shape_is_still_described() -> None:
    # TypeError: 'int' object is not iterable.
    body = {"@Message.ExtendedInfo": 1, "error": {"message": "busy", "@Message.ExtendedInfo": "x"}}
    assert extended_messages(body) == []
    assert describe_error_body(body, fallback="none") == "busy"


def test_a_task_whose_messages_are_not_a_list_is_refused_naming_it() -> None:
    # TypeError: 'float' object is not iterable.
    with pytest.raises(GpuFleetError, match=r"Task /redfish/v1/TaskService/Tasks/3: Messages is a number"):
        task_progress({"@odata.id": "/redfish/v1/TaskService/Tasks/3", "TaskState": "Running", "Messages": 1.5})


def test_an_inventory_member_whose_oem_is_not_an_object_is_refused_naming_it() -> None:
    # AttributeError: 'list' object has no attribute 'get'.
    with pytest.raises(GpuFleetError, match=r"FirmwareInventory member /x/Installed-0-1__NIC.1: Oem is a list"):
        inventory_item({"@odata.id": "/x/Installed-0-1__NIC.1", "Id": "Installed-0-1__NIC.1", "Oem": ["Dell"]})


def test_supported_apply_times_of_another_type_are_refused_naming_them() -> None:
    # TypeError: 'int' object is not iterable.
    update = {
        "Actions": {"#UpdateService.SimpleUpdate": {"@Redfish.OperationApplyTimeSupport": {"SupportedValues": 5}}}
    }
    with pytest.raises(GpuFleetError, match="SupportedValues is a number, expected a list"):
        service_map({}, update)


@pytest.mark.parametrize(
    ("members", "message"),
    [(7, ": Members is a number, expected a list"), ([7], r" Members\[0\] is a number without an @odata.id link")],
)
def test_a_collection_whose_members_are_not_links_is_refused_naming_it(bmc: Bmc, members: Any, message: str) -> None:
    # 7: TypeError; [7]: read as an empty inventory, then "No installed firmware matches" blamed the pattern.
    bmc.reset()
    bmc.resources["/redfish/v1/UpdateService/FirmwareInventory"]["Members"] = members
    with pytest.raises(GpuFleetError, match=f"BMC {bmc.url}: /redfish/v1/UpdateService/FirmwareInventory{message}"):
        check_flash(bmc)


def test_a_system_whose_actions_are_not_an_object_is_refused_naming_it(bmc: Bmc) -> None:
    # AttributeError: 'list' object has no attribute 'get'.
    bmc.reset()
    bmc.resources["/redfish/v1/Systems/System.Embedded.1"]["Actions"] = ["#ComputerSystem.Reset"]
    with pytest.raises(GpuFleetError, match=r"/redfish/v1/Systems/System.Embedded.1: Actions is a list"):
        check_flash(bmc)


def test_a_manager_whose_oem_is_not_an_object_is_refused_naming_it(bmc: Bmc) -> None:
    # AttributeError: 'str' object has no attribute 'get'.
    bmc.reset()
    bmc.resources["/redfish/v1/Managers/iDRAC.Embedded.1"]["Oem"] = "Dell"
    with pytest.raises(GpuFleetError, match=r"/redfish/v1/Managers/iDRAC.Embedded.1: Oem is a string"):
        check_flash(bmc)
