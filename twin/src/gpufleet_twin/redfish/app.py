"""The Redfish HTTP layer: one aiohttp application serving every BMC of the twin.

Each BMC listens on its own socket; a request belongs to the BMC whose
address it arrived on (the local socket address), so a client sees one
iDRAC per host.  The application knows nothing about the twin: a
:class:`BmcDirectory` (the service) finds the BMC, tells the time, fetches
images and carries out what the BMC's state changes require.

What a real iDRAC does and this layer does too: the service root, ``odata``
and ``$metadata`` answer without credentials, everything else needs HTTP
basic auth or an ``X-Auth-Token`` session; errors are Redfish ``error``
bodies with ``@Message.ExtendedInfo``; update requests answer ``202`` with a
``Location`` of the task; ``$expand`` on collections and ``$select`` work.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import posixpath
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from email.message import Message
from typing import Any, Protocol
from urllib.parse import urlsplit

from aiohttp import web

from . import resources as res
from .image import FirmwareImage, ImageRejected, parse_firmware_image
from .model import INVENTORY_URI, MANAGER_URI, MSG_BAD_SIGNATURE, SYSTEM_URI, TASKS_URI, Bmc, Job, RedfishError, Session

log = logging.getLogger(__name__)

MAX_IMAGE_BYTES = 64 * 1024 * 1024
JSON_CONTENT_TYPE = "application/json;odata.metadata=minimal;charset=utf-8"
BMC_KEY = web.RequestKey("bmc", Bmc)
NOW_KEY = web.RequestKey("now", float)
DIRECTORY_KEY = web.AppKey("directory", object)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BmcDirectory(Protocol):
    """What the HTTP layer needs from the service that runs the BMCs."""

    def bmc_at(self, host: str, port: int) -> Bmc | None: ...

    def now(self) -> float: ...

    def changed(self, bmc: Bmc) -> None:
        """Carry out the effects of a state change and wake the timekeeper."""

    def fetch_image(self, bmc: Bmc, job: Job, url: str, auth: tuple[str, str] | None) -> None:
        """Fetch an ImageURI in the background and hand the result to the BMC."""

    async def hold(self, bmc: Bmc) -> None:
        """Wait while the BMC does not answer (fault); returns when it answers again."""


# -- helpers --------------------------------------------------------------------------------


def _directory(request: web.Request) -> BmcDirectory:
    directory = request.app[DIRECTORY_KEY]
    assert directory is not None
    return directory  # type: ignore[return-value]


def json_response(body: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    data = json.dumps(body, sort_keys=False).encode()
    merged = {"Content-Type": JSON_CONTENT_TYPE, "OData-Version": "4.0", "Cache-Control": "no-cache"}
    if status == 200 and "ETag" not in (headers or {}):
        merged["ETag"] = 'W/"' + hashlib.sha256(data).hexdigest()[:16] + '"'
    merged.update(headers or {})
    return web.Response(body=data, status=status, headers=merged)


def error_response(error: RedfishError) -> web.Response:
    return json_response(res.error_body(error.message_key, *error.args_), status=error.status, headers=error.headers)


def _wants_expand(request: web.Request) -> bool:
    value = request.query.get("$expand", "")
    return value.startswith(("*", "."))


def _selected(request: web.Request, body: dict[str, Any]) -> dict[str, Any]:
    fields = request.query.get("$select")
    if not fields:
        return body
    return res.select(body, [f.strip() for f in fields.split(",") if f.strip()])


async def _json_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RedfishError(400, "MalformedJSON") from exc
    if not isinstance(body, dict):
        raise RedfishError(400, "MalformedJSON")
    return body


def _task_accepted(job: Job, now: float) -> web.Response:
    # 202 with the task in the body and its URI in Location, as the DMTF spec asks.
    return json_response(res.task(job, now), status=202, headers={"Location": f"{TASKS_URI}/{job.job_id}"})


def _authenticate(request: web.Request, bmc: Bmc, now: float) -> Session | None:
    token = request.headers.get("X-Auth-Token")
    if token:
        session = bmc.session_for_token(token, now)
        if session is None:
            raise RedfishError(401, "NoValidSession")
        return session
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() == "basic" and value:
        try:
            username, sep, password = base64.b64decode(value.strip()).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            username, sep, password = "", "", ""
        if sep and bmc.check_password(username, password):
            return None
    raise RedfishError(401, "NoValidSession", headers={"WWW-Authenticate": 'Basic realm="RedfishService"'})


def _is_public(method: str, path: str) -> bool:
    path = path.rstrip("/") or "/"
    if method == "GET" and path in ("/redfish", "/redfish/v1", "/redfish/v1/odata", "/redfish/v1/$metadata"):
        return True
    # Logging in is what gets a client its credentials.
    return method == "POST" and path == res.SESSIONS_URI


_UPDATE_PATHS = frozenset({res.SIMPLE_UPDATE_URI, res.MULTIPART_URI, INVENTORY_URI})


@web.middleware
async def bmc_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    directory = _directory(request)
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    bmc = directory.bmc_at(sockname[0], sockname[1]) if sockname else None
    if bmc is None:
        raise web.HTTPNotFound()
    now = directory.now()
    bmc.advance(now)
    availability = bmc.availability(now)
    if availability == "hang":
        await directory.hold(bmc)
        now = directory.now()
        bmc.advance(now)
        availability = bmc.availability(now)
    if availability != "up":
        # A keep-alive connection opened before the BMC went down: it breaks.
        if request.transport is not None:
            request.transport.abort()
        raise web.HTTPServiceUnavailable()
    request[BMC_KEY] = bmc
    request[NOW_KEY] = now
    bmc.requests_received += 1
    if request.method == "POST" and request.path.rstrip("/") in _UPDATE_PATHS:
        bmc.update_requests_received += 1
    if request.method not in ("GET", "HEAD") and not request.path.startswith(res.SESSIONS_URI):
        written = f"{request.method} {request.path.rstrip('/')}"
        bmc.writes_received[written] = bmc.writes_received.get(written, 0) + 1
    try:
        if bmc.accounts_loading(now) and not (request.method == "GET" and _is_public(request.method, request.path)):
            raise RedfishError(401, "NoValidSession")
        if not _is_public(request.method, request.path):
            _authenticate(request, bmc, now)
        return await handler(request)
    except RedfishError as error:
        return error_response(error)
    except web.HTTPMethodNotAllowed:
        return error_response(RedfishError(405, "OperationNotAllowed"))
    except web.HTTPNotFound:
        return error_response(RedfishError(404, "ResourceMissingAtURI", request.path))
    except web.HTTPClientError as exc:  # e.g. 413 for a body beyond client_max_size
        return error_response(RedfishError(exc.status, "GeneralError"))
    finally:
        directory.changed(bmc)


# -- handlers: root, sessions ---------------------------------------------------------------------


def _ctx(request: web.Request) -> tuple[Bmc, float]:
    return request[BMC_KEY], request[NOW_KEY]


async def get_redfish(request: web.Request) -> web.Response:
    return json_response({"v1": "/redfish/v1/"})


async def get_service_root(request: web.Request) -> web.Response:
    bmc, _ = _ctx(request)
    return json_response(_selected(request, res.service_root(bmc)))


async def get_odata(request: web.Request) -> web.Response:
    return json_response(res.odata_document())


async def get_metadata(request: web.Request) -> web.Response:
    return web.Response(text=res.METADATA_XML, content_type="application/xml", headers={"OData-Version": "4.0"})


async def get_session_service(request: web.Request) -> web.Response:
    bmc, _ = _ctx(request)
    return json_response(res.session_service(bmc))


async def get_sessions(request: web.Request) -> web.Response:
    bmc, _ = _ctx(request)
    return json_response(res.sessions_collection(bmc))


async def post_session(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    body = await _json_body(request)
    for name in ("UserName", "Password"):
        if not isinstance(body.get(name), str):
            raise RedfishError(400, "PropertyMissing", name)
    session = bmc.login(body["UserName"], body["Password"], now)
    uri = f"{res.SESSIONS_URI}/{session.session_id}"
    return json_response(
        res.session_resource(session), status=201, headers={"X-Auth-Token": session.token, "Location": uri}
    )


async def get_session(request: web.Request) -> web.Response:
    bmc, _ = _ctx(request)
    session = bmc.sessions.get(request.match_info["session_id"])
    if session is None:
        raise RedfishError(404, "ResourceMissingAtURI", request.path)
    return json_response(res.session_resource(session))


async def delete_session(request: web.Request) -> web.Response:
    bmc, _ = _ctx(request)
    bmc.logout(request.match_info["session_id"])
    return json_response(res.success_body())


# -- systems, chassis, managers ------------------------------------------------------------------------


async def get_systems(request: web.Request) -> web.Response:
    return json_response(
        res.collection(
            uri="/redfish/v1/Systems",
            odata_type="ComputerSystemCollection",
            name="Computer System Collection",
            members=[SYSTEM_URI],
        )
    )


async def get_system(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    return json_response(_selected(request, res.system(bmc, now)))


async def _reset_type(request: web.Request, action: str) -> str:
    body = await _json_body(request)
    reset_type = body.get("ResetType")
    if not isinstance(reset_type, str):
        raise RedfishError(400, "ActionParameterMissing", action, "ResetType")
    return reset_type


async def post_system_reset(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    bmc.reset_system(await _reset_type(request, "ComputerSystem.Reset"), now)
    return web.Response(status=204, headers={"OData-Version": "4.0"})


async def get_chassis_collection(request: web.Request) -> web.Response:
    return json_response(
        res.collection(
            uri="/redfish/v1/Chassis",
            odata_type="ChassisCollection",
            name="Chassis Collection",
            members=["/redfish/v1/Chassis/System.Embedded.1"],
        )
    )


async def get_chassis(request: web.Request) -> web.Response:
    bmc, _ = _ctx(request)
    return json_response(res.chassis(bmc))


async def get_managers(request: web.Request) -> web.Response:
    return json_response(
        res.collection(
            uri="/redfish/v1/Managers",
            odata_type="ManagerCollection",
            name="Manager Collection",
            members=[MANAGER_URI],
        )
    )


async def get_manager(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    return json_response(_selected(request, res.manager(bmc, now)))


async def post_manager_reset(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    bmc.reset_bmc(await _reset_type(request, "Manager.Reset"), now)
    return web.Response(status=204, headers={"OData-Version": "4.0"})


# -- jobs and tasks ------------------------------------------------------------------------------------------


def _dell_jobs_uri(request: web.Request) -> str:
    return res.DELL_OEM_JOBS_URI if "/Oem/Dell/" in request.path else res.DELL_JOBS_URI


async def get_dell_jobs(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    return json_response(res.dell_jobs(bmc, now, uri=_dell_jobs_uri(request), expand=_wants_expand(request)))


async def get_dell_job(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    job = bmc.jobs.get(request.match_info["job_id"])
    if job is None:
        raise RedfishError(404, "ResourceMissingAtURI", request.path)
    return json_response(res.dell_job(job, now, uri_base=_dell_jobs_uri(request)))


async def delete_dell_job(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    if request.match_info["job_id"] not in bmc.jobs:
        raise RedfishError(404, "ResourceMissingAtURI", request.path)
    bmc.delete_job(request.match_info["job_id"], now)
    return json_response(res.success_body())


async def get_job_service(request: web.Request) -> web.Response:
    return json_response(res.job_service())


async def get_dmtf_jobs(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    return json_response(res.dmtf_jobs(bmc, now, expand=_wants_expand(request)))


async def get_dmtf_job(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    job = bmc.jobs.get(request.match_info["job_id"])
    if job is None:
        raise RedfishError(404, "ResourceMissingAtURI", request.path)
    return json_response(res.dmtf_job(job, now))


async def get_task_service(request: web.Request) -> web.Response:
    _, now = _ctx(request)
    return json_response(res.task_service(now))


async def get_tasks(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    return json_response(res.tasks_collection(bmc, now))


async def get_task(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    job = bmc.visible_task(request.match_info["task_id"], now)
    return json_response(res.task(job, now))


# -- updates -------------------------------------------------------------------------------------------------


async def get_update_service(request: web.Request) -> web.Response:
    return json_response(res.update_service())


async def get_inventory(request: web.Request) -> web.Response:
    bmc, _ = _ctx(request)
    body = res.inventory_collection(bmc, expand=_wants_expand(request))
    return json_response(body, headers={"ETag": bmc.inventory_etag()})


async def get_inventory_member(request: web.Request) -> web.Response:
    bmc, _ = _ctx(request)
    entry = bmc.inventory_entry(request.match_info["member_id"])
    return json_response(_selected(request, res.inventory_member(bmc, entry)))


def _targets(bmc: Bmc, value: Any, action: str) -> tuple[str, ...] | None:
    if value in (None, []):
        return None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise RedfishError(400, "ActionParameterValueError", "Targets", action)
    return tuple(bmc.slot_by_target(t).fqdd for t in value)


def _apply_time(value: Any, action: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise RedfishError(400, "ActionParameterValueError", "@Redfish.OperationApplyTime", action)
    return value


def _own_inventory_member(request: web.Request, image_uri: str) -> str | None:
    """An ImageURI naming this BMC's own inventory (Dell's way to roll back to ``Previous-``)."""
    parts = urlsplit(image_uri)
    if parts.netloc and parts.netloc != request.host:
        return None
    path = parts.path.rstrip("/")
    prefix = INVENTORY_URI + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


async def post_simple_update(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    action = "UpdateService.SimpleUpdate"
    body = await _json_body(request)
    image_uri = body.get("ImageURI")
    if not isinstance(image_uri, str) or not image_uri:
        raise RedfishError(400, "ActionParameterMissing", action, "ImageURI")
    protocol = body.get("TransferProtocol")
    if protocol is not None and protocol not in res.TRANSFER_PROTOCOLS:
        raise RedfishError(400, "ActionParameterValueNotInList", str(protocol), "TransferProtocol", action)
    apply_time = _apply_time(body.get("@Redfish.OperationApplyTime"), action)
    targets = _targets(bmc, body.get("Targets"), action)

    member_id = _own_inventory_member(request, image_uri)
    if member_id is not None:
        entry = bmc.inventory_entry(member_id)
        if entry.kind == "Installed":
            raise RedfishError(400, "ActionParameterValueError", "ImageURI", action)
        # Rolling back to Previous- reflashes that device only; a pushed package fits every matching device.
        job = bmc.start_update(
            package_name=member_id,
            apply_time=apply_time,
            targets=(entry.slot.fqdd,) if entry.kind == "Previous" else targets,
            now=now,
            rollback=entry.kind == "Previous",
        )
        image = FirmwareImage(component=entry.slot.family, version=entry.version, size=0)
        bmc.package_arrived(job.job_id, image=image, error=None, now=now, local=True)
        return _task_accepted(job, now)

    url = image_uri if "://" in image_uri else f"{(protocol or 'HTTP').lower()}://{image_uri}"
    scheme = urlsplit(url).scheme.upper()
    if scheme not in res.TRANSFER_PROTOCOLS:
        raise RedfishError(400, "ActionParameterValueNotInList", scheme, "TransferProtocol", action)
    if protocol is not None and scheme != protocol:
        raise RedfishError(400, "ActionParameterValueError", "ImageURI", action)
    package_name = posixpath.basename(urlsplit(url).path) or url
    job = bmc.start_update(package_name=package_name, apply_time=apply_time, targets=targets, now=now)
    username, password = body.get("Username"), body.get("Password")
    auth = (username, password) if isinstance(username, str) and isinstance(password, str) else None
    _directory(request).fetch_image(bmc, job, url, auth)
    return _task_accepted(job, now)


@dataclass(frozen=True)
class FormPart:
    name: str
    filename: str | None
    content_type: str
    content: bytes


def parse_form_data(body: bytes, content_type: str) -> list[FormPart]:
    """Split a multipart/form-data body into its parts (RFC 7578), tolerantly.

    Written out rather than using aiohttp's reader because real clients send
    parts a strict reader refuses: Dell's own Ansible module labels the file
    part ``multipart/form-data`` (urllib3's ``make_multipart``), which aiohttp
    takes for a nested multipart without a boundary; iDRACs accept it.
    """
    header = Message()
    header["Content-Type"] = content_type
    boundary = header.get_param("boundary")
    if header.get_content_maintype() != "multipart" or not isinstance(boundary, str) or not boundary:
        raise RedfishError(415, "UnsupportedMediaType")
    delimiter = b"\r\n--" + boundary.encode("latin-1")
    parts: list[FormPart] = []
    for chunk in (b"\r\n" + body).split(delimiter)[1:]:
        if chunk.startswith(b"--"):
            break  # the close delimiter
        head, sep, content = chunk.partition(b"\r\n\r\n")
        if not sep:
            raise RedfishError(400, "ActionParameterValueError", "UpdateFile", "MultipartUpload")
        fields = Message()
        for line in head.decode("latin-1").split("\r\n"):
            key, colon, value = line.partition(":")
            if colon:
                fields[key.strip()] = value.strip()
        name = fields.get_param("name", header="content-disposition")
        filename = fields.get_param("filename", header="content-disposition")
        parts.append(
            FormPart(
                name=name if isinstance(name, str) else "",
                filename=filename if isinstance(filename, str) else None,
                content_type=fields.get("Content-Type", "text/plain"),
                content=content,
            )
        )
    return parts


async def _multipart_fields(request: web.Request, file_fields: tuple[str, ...]) -> tuple[dict[str, Any], bytes, str]:
    """(UpdateParameters, file content, file name) from a multipart/form-data request."""
    parts = parse_form_data(await request.read(), request.headers.get("Content-Type", ""))
    parameters: dict[str, Any] = {}
    file_part: FormPart | None = None
    for part in parts:
        if part.name == "UpdateParameters":
            try:
                parsed = json.loads(part.content or b"{}")
            except (ValueError, UnicodeDecodeError) as exc:
                raise RedfishError(400, "MalformedJSON") from exc
            if not isinstance(parsed, dict):
                raise RedfishError(400, "MalformedJSON")
            parameters = parsed
        elif file_part is None and (part.name in file_fields or part.filename):
            file_part = part
    if file_part is None:
        raise RedfishError(400, "ActionParameterMissing", "MultipartUpload", file_fields[0])
    filename = posixpath.basename((file_part.filename or "").replace("\\", "/")) or "firmware.bin"
    return parameters, file_part.content, filename


def _parse_or_error(content: bytes) -> tuple[FirmwareImage | None, tuple[str, str] | None]:
    try:
        return parse_firmware_image(content), None
    except ImageRejected:
        return None, MSG_BAD_SIGNATURE


async def post_multipart_update(request: web.Request) -> web.Response:
    bmc, now = _ctx(request)
    action = "MultipartUpload"
    parameters, content, filename = await _multipart_fields(request, ("UpdateFile",))
    apply_time = _apply_time(parameters.get("@Redfish.OperationApplyTime"), action)
    targets = _targets(bmc, parameters.get("Targets"), action)
    job = bmc.start_update(package_name=filename, apply_time=apply_time, targets=targets, now=now)
    image, error = _parse_or_error(content)
    bmc.package_arrived(job.job_id, image=image, error=error, now=now)
    return _task_accepted(job, now)


async def post_http_push(request: web.Request) -> web.Response:
    """The older HttpPushUri: upload a package (If-Match the inventory ETag), install it with SimpleUpdate."""
    bmc, now = _ctx(request)
    if request.headers.get("If-Match") != bmc.inventory_etag():
        raise RedfishError(412, "PreconditionFailed")
    _, content, _ = await _multipart_fields(request, ("file", "UpdateFile"))
    image, error = _parse_or_error(content)
    if image is None or error is not None:
        raise RedfishError(400, "ActionParameterValueError", "file", "HttpPushUri")
    member_id = bmc.push_package(image, now)
    entry = bmc.inventory_entry(member_id)
    return json_response(
        res.inventory_member(bmc, entry), status=201, headers={"Location": f"{INVENTORY_URI}/{member_id}"}
    )


# -- application ---------------------------------------------------------------------------------------------------

ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/redfish", get_redfish),
    ("GET", "/redfish/v1", get_service_root),
    ("GET", "/redfish/v1/odata", get_odata),
    ("GET", "/redfish/v1/$metadata", get_metadata),
    ("GET", "/redfish/v1/SessionService", get_session_service),
    ("GET", res.SESSIONS_URI, get_sessions),
    ("POST", res.SESSIONS_URI, post_session),
    ("GET", res.SESSIONS_URI + "/{session_id}", get_session),
    ("DELETE", res.SESSIONS_URI + "/{session_id}", delete_session),
    ("GET", "/redfish/v1/Systems", get_systems),
    ("GET", SYSTEM_URI, get_system),
    ("POST", SYSTEM_URI + "/Actions/ComputerSystem.Reset", post_system_reset),
    ("GET", "/redfish/v1/Chassis", get_chassis_collection),
    ("GET", "/redfish/v1/Chassis/System.Embedded.1", get_chassis),
    ("GET", "/redfish/v1/Managers", get_managers),
    ("GET", MANAGER_URI, get_manager),
    ("POST", MANAGER_URI + "/Actions/Manager.Reset", post_manager_reset),
    ("GET", res.DELL_JOBS_URI, get_dell_jobs),
    ("GET", res.DELL_JOBS_URI + "/{job_id}", get_dell_job),
    ("DELETE", res.DELL_JOBS_URI + "/{job_id}", delete_dell_job),
    ("GET", res.DELL_OEM_JOBS_URI, get_dell_jobs),
    ("GET", res.DELL_OEM_JOBS_URI + "/{job_id}", get_dell_job),
    ("DELETE", res.DELL_OEM_JOBS_URI + "/{job_id}", delete_dell_job),
    ("GET", "/redfish/v1/JobService", get_job_service),
    ("GET", res.JOBSERVICE_JOBS_URI, get_dmtf_jobs),
    ("GET", res.JOBSERVICE_JOBS_URI + "/{job_id}", get_dmtf_job),
    ("GET", "/redfish/v1/TaskService", get_task_service),
    ("GET", TASKS_URI, get_tasks),
    ("GET", TASKS_URI + "/{task_id}", get_task),
    ("GET", "/redfish/v1/UpdateService", get_update_service),
    ("POST", res.SIMPLE_UPDATE_URI, post_simple_update),
    ("POST", res.MULTIPART_URI, post_multipart_update),
    ("GET", INVENTORY_URI, get_inventory),
    ("POST", INVENTORY_URI, post_http_push),
    ("GET", INVENTORY_URI + "/{member_id}", get_inventory_member),
]


async def _server_header(request: web.Request, response: web.StreamResponse) -> None:
    # iDRAC9 answers as its Apache front end does.
    response.headers["Server"] = "Apache"


def create_app(directory: BmcDirectory) -> web.Application:
    app = web.Application(middlewares=[bmc_middleware], client_max_size=MAX_IMAGE_BYTES + 1024 * 1024)
    app[DIRECTORY_KEY] = directory
    app.on_response_prepare.append(_server_header)
    for method, path, handler in ROUTES:
        # Redfish clients use both spellings; a real service answers both.
        app.router.add_route(method, path, handler)
        app.router.add_route(method, path + "/", handler)
    return app
