# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""A generic Redfish client (collection-internal).

Vendor-neutral: everything it knows comes from the DMTF specification and
from what the service root advertises. Vendor specifics (Dell iDRAC job
URIs, OEM messages, ``Previous-`` rollback images) live in adapters such as
``_redfish_idrac``, never here.

- HTTP through Ansible's own ``ansible.module_utils.urls.Request``, as
  community.general and dellemc.openmanage do: TLS verified by default
  (``ca_path`` for a private CA), a timeout on every request, bounded retries
  on connection errors and 503, never on a refused certificate.
- Sessions: login through the SessionService (``X-Auth-Token``), logout
  always (``session()`` is a context manager); HTTP basic auth when the
  service offers no sessions. A session that died (the BMC restarted, it
  timed out) is renewed once per request.
- Discovery: the URIs of UpdateService, FirmwareInventory, TaskService,
  Systems and Managers come from the service root, never from a vendor's
  usual paths; ``$expand`` is used when ``ProtocolFeaturesSupported`` offers it.
- Errors carry the BMC's own ``@Message.ExtendedInfo`` messages, the BMC's
  address and the URI. The password never appears in a message.

The pure parts (messages of an error body, the state of a Task, the
multipart body) are plain functions, unit-tested without a server.
"""

from __future__ import annotations

import base64
import http.client
import json
import random
import secrets
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple
from urllib.error import HTTPError, URLError
from urllib.parse import urlsplit

from ansible.module_utils.urls import ConnectionError as UrlsConnectionError
from ansible.module_utils.urls import Request, SSLValidationError

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    InvalidInputError,
    RedfishError,
    RedfishHttpError,
    RedfishUnreachableError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import (
    FlashPlan,
    InventoryItem,
    generic_inventory_item,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

SERVICE_ROOT = "/redfish/v1"
JSON_TYPE = "application/json"
# Statuses a BMC answers while it is busy, throttling or coming up; a request may be sent again.
_RETRY_STATUSES = frozenset({429, 502, 503, 504})
# Methods sent again after a timeout or a dropped connection. A POST (an update, a reset) may have been
# carried out before its answer was lost: sent again it would start a second job or a second reset.
_IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
# What an iDRAC answers while it restarts: 401 until its accounts are loaded, 500/503 from a half-up service
# (Dell's DeviceFirmwareMultipartUploadREDFISH.py waits through the same codes after an iDRAC update).
RESTARTING_STATUSES = frozenset({401, 500, 503})
_MAX_MESSAGE = 600

# DMTF TaskState values (Task.v1) grouped by what they mean to a caller.
TASK_FAILED_STATES = frozenset({"Exception", "Killed", "Cancelled", "Interrupted"})
TASK_DONE_STATES = frozenset({"Completed"}) | TASK_FAILED_STATES

# What an update is doing, for callers: vendor adapters map their own job states onto these.
PROGRESS_RUNNING = "running"
PROGRESS_SCHEDULED = "scheduled"  # waits for a reset of the host (applies OnReset)
PROGRESS_COMPLETED = "completed"
PROGRESS_FAILED = "failed"
PROGRESS_FINISHED = frozenset({PROGRESS_COMPLETED, PROGRESS_FAILED})
# Flashed, but the device runs its new firmware only after a (cold) reboot of the host: iDRAC's
# "Job completed, server reboot pending" (dell/iDRAC-Redfish-Scripting issues 266 and 375). Not finished.
PROGRESS_REBOOT_PENDING = "reboot_pending"
_REBOOT_PENDING_TEXT = "server reboot pending"


# -- pure helpers -------------------------------------------------------------------------------


_TYPE_NAMES: Dict[type, str] = {dict: "an object", list: "a list", str: "a string"}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def body_field(body: Mapping[str, Any], key: str, kind: type, *, where: str = "") -> Any:
    """``body[key]`` when it is a ``kind`` (dict, list, str), an empty one when absent or null.

    Another type is the BMC answering what Redfish does not define: a RedfishError naming the resource
    (``where``, else its ``@odata.id``) and the property, rather than a TypeError deep in a caller.
    """
    value = body.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        resource = where or (body.get("@odata.id") if isinstance(body.get("@odata.id"), str) else "") or "a resource"
        raise RedfishError(f"{resource}: {key} is {_type_name(value)}, expected {_TYPE_NAMES.get(kind, kind.__name__)}")
    return value


def extended_messages(body: Any) -> List[Dict[str, str]]:
    """The ``@Message.ExtendedInfo`` entries of an error (or success) body: MessageId, Message, Severity.

    Lenient on purpose: this describes an answer already being reported, and entries of another shape are left out.
    """
    if not isinstance(body, Mapping):
        return []
    infos: List[Any] = []
    error = body.get("error")
    for holder in (error, body):
        found = holder.get("@Message.ExtendedInfo") if isinstance(holder, Mapping) else None
        if isinstance(found, list):
            infos.extend(found)
    messages = []
    for info in infos:
        if isinstance(info, Mapping):
            messages.append(
                {
                    "MessageId": str(info.get("MessageId") or ""),
                    "Message": str(info.get("Message") or ""),
                    "Severity": str(info.get("Severity") or ""),
                }
            )
    return messages


def describe_error_body(body: Any, *, fallback: str) -> str:
    """One line saying what the BMC said: its ExtendedInfo messages, else ``error.message``, else ``fallback``."""
    infos = extended_messages(body)
    parts = [f"{i['Message']} ({i['MessageId']})" if i["MessageId"] else i["Message"] for i in infos if i["Message"]]
    if not parts and isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        # Services that put the text in error.message only (sushy-tools, some BMCs): keep their ids beside it.
        error = body["error"]
        text = error.get("message")
        ids = [str(i["MessageId"]) for i in infos if i["MessageId"]]
        if not ids and error.get("code"):
            ids = [str(error["code"])]
        if isinstance(text, str) and text:
            parts.append(f"{text} ({', '.join(ids)})" if ids else text)
        elif ids:
            parts.append(", ".join(ids))
    line = "; ".join(parts) or fallback
    return line if len(line) <= _MAX_MESSAGE else line[: _MAX_MESSAGE - 3] + "..."


@dataclass(frozen=True)
class UpdateProgress:
    """Where an update stands, from a Task or a vendor job."""

    state: str  # PROGRESS_*
    detail: str  # the service's own state word (TaskState, JobState)
    message: str = ""
    message_id: str = ""
    percent: Optional[int] = None

    @property
    def finished(self) -> bool:
        return self.state in PROGRESS_FINISHED

    @property
    def reboot_pending(self) -> bool:
        return self.state == PROGRESS_REBOOT_PENDING

    def as_dict(self) -> Dict[str, Any]:
        return {
            "state": self.state,
            "detail": self.detail,
            "message": self.message,
            "message_id": self.message_id,
            "percent": self.percent,
        }


def says_reboot_pending(text: str) -> bool:
    """iDRAC's "Job completed, server reboot pending" (its GUI: "Completed, Server Reboot Pending")."""
    return _REBOOT_PENDING_TEXT in text.lower()


def _reset_required(messages: Sequence[Mapping[str, Any]]) -> bool:
    # Base.1.x.ResetRequired (and the Update registry's ActivateFailed/AwaitToActivate family use
    # other ids): the update applies at the next reset of the host.
    return any(str(m.get("MessageId") or "").endswith(".ResetRequired") for m in messages)


def task_progress(task: Mapping[str, Any]) -> UpdateProgress:
    """A DMTF Task (``Task.v1``) as an ``UpdateProgress``.

    ``Exception``/``Killed``/``Cancelled``/``Interrupted`` are failures whatever
    ``TaskStatus`` says (BMCs answer ``Exception`` with ``TaskStatus OK``, see
    the NVIDIA DGX sample); ``Completed`` with ``TaskStatus Critical`` too.
    ``Pending`` with a ``ResetRequired`` message waits for a host reset.
    """
    state = str(task.get("TaskState") or "")
    status = str(task.get("TaskStatus") or "")
    messages = [m for m in body_field(task, "Messages", list, where=_task_name(task)) if isinstance(m, Mapping)]
    # The last message is the newest on the services seen; prefer a Critical one when there is one.
    chosen: Mapping[str, Any] = {}
    for message in messages:
        if not chosen or str(message.get("Severity")) == "Critical":
            chosen = message
    text = str(chosen.get("Message") or "")
    message_id = str(chosen.get("MessageId") or "")
    percent = task.get("PercentComplete")
    percent_value = percent if isinstance(percent, int) else None
    if state in TASK_FAILED_STATES or (state == "Completed" and status == "Critical"):
        progress = PROGRESS_FAILED
    elif any(says_reboot_pending(str(m.get("Message") or "")) for m in messages):
        # Whatever the TaskState (issue 266 saw neither Completed nor Pending): the device waits for a reboot.
        progress = PROGRESS_REBOOT_PENDING
    elif state == "Completed":
        progress = PROGRESS_COMPLETED
    elif state == "Pending" and _reset_required(messages):
        progress = PROGRESS_SCHEDULED
    else:
        progress = PROGRESS_RUNNING
    return UpdateProgress(
        state=progress, detail=state or "unknown", message=text, message_id=message_id, percent=percent_value
    )


def _task_name(task: Mapping[str, Any]) -> str:
    uri = task.get("@odata.id")
    return f"Task {uri}" if isinstance(uri, str) and uri else "the Task"


def encode_multipart(
    parts: Sequence[Tuple[str, Optional[str], str, bytes]], *, boundary: Optional[str] = None
) -> Tuple[str, bytes]:
    """A ``multipart/form-data`` body (RFC 7578) from (name, filename, content type, content) parts.

    Written out because the Redfish MultipartHttpPushUri needs nothing more and
    the collection takes no third-party library for it. The boundary is random
    and checked not to occur in any part.
    """
    for _attempt in range(8):
        candidate = boundary or "gpufleet-" + secrets.token_hex(16)
        marker = candidate.encode("ascii")
        if not any(marker in content for _name, _filename, _type, content in parts):
            break
        if boundary:
            raise InvalidInputError("The multipart boundary occurs in the content")
    else:
        raise InvalidInputError("Could not find a multipart boundary absent from the content")
    chunks: List[bytes] = []
    for name, filename, content_type, content in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            safe_name = filename.replace('"', "").replace("\r", "").replace("\n", "")
            disposition += f'; filename="{safe_name}"'
        head = f"--{candidate}\r\nContent-Disposition: {disposition}\r\nContent-Type: {content_type}\r\n\r\n"
        chunks.extend((head.encode("utf-8"), content, b"\r\n"))
    chunks.append(f"--{candidate}--\r\n".encode("ascii"))
    return f"multipart/form-data; boundary={candidate}", b"".join(chunks)


def odata_id(value: Any) -> str:
    """``{"@odata.id": uri}`` -> uri ('' when absent)."""
    if isinstance(value, Mapping):
        uri = value.get("@odata.id")
        return uri if isinstance(uri, str) else ""
    return ""


@dataclass(frozen=True)
class ServiceMap:
    """The URIs a service root and its UpdateService advertise (empty when not offered)."""

    vendor: str = ""
    product: str = ""
    sessions: str = ""
    update_service: str = ""
    firmware_inventory: str = ""
    simple_update: str = ""
    multipart_push: str = ""
    http_push: str = ""
    task_service: str = ""
    systems: str = ""
    managers: str = ""
    expand: bool = False
    apply_times: Tuple[str, ...] = ()
    transfer_protocols: Tuple[str, ...] = ()

    def as_dict(self) -> Dict[str, Any]:
        return {
            "vendor": self.vendor,
            "product": self.product,
            "update_service": self.update_service,
            "firmware_inventory": self.firmware_inventory,
            "simple_update": self.simple_update,
            "multipart_push": self.multipart_push,
            "http_push": self.http_push,
            "task_service": self.task_service,
            "systems": self.systems,
            "managers": self.managers,
            "sessions": bool(self.sessions),
            "expand": self.expand,
            "apply_times": list(self.apply_times),
        }


def service_map(root: Mapping[str, Any], update_service: Optional[Mapping[str, Any]]) -> ServiceMap:
    """Read the URIs from the service root and (if any) the UpdateService resource."""
    links = root.get("Links") if isinstance(root.get("Links"), Mapping) else {}
    sessions = odata_id((links or {}).get("Sessions"))
    features = root.get("ProtocolFeaturesSupported") or {}
    expand_query = features.get("ExpandQuery") if isinstance(features, Mapping) else None
    # ExpandAll or Levels is what "$expand=*($levels=1)" needs.
    expand = isinstance(expand_query, Mapping) and bool(expand_query.get("ExpandAll") or expand_query.get("Levels"))
    update = update_service or {}
    actions = update.get("Actions") if isinstance(update.get("Actions"), Mapping) else {}
    simple = (actions or {}).get("#UpdateService.SimpleUpdate") or {}
    apply_support = simple.get("@Redfish.OperationApplyTimeSupport") if isinstance(simple, Mapping) else None
    apply_times: Tuple[str, ...] = ()
    if isinstance(apply_support, Mapping):
        where = "UpdateService SimpleUpdate @Redfish.OperationApplyTimeSupport"
        apply_times = tuple(str(v) for v in body_field(apply_support, "SupportedValues", list, where=where))
    protocols = (
        body_field(simple, "TransferProtocol@Redfish.AllowableValues", list, where="UpdateService SimpleUpdate")
        if isinstance(simple, Mapping)
        else None
    )
    return ServiceMap(
        vendor=str(root.get("Vendor") or ""),
        product=str(root.get("Product") or ""),
        sessions=sessions,
        update_service=odata_id(root.get("UpdateService")),
        firmware_inventory=odata_id(update.get("FirmwareInventory")),
        simple_update=str(simple.get("target") or "") if isinstance(simple, Mapping) else "",
        multipart_push=str(update.get("MultipartHttpPushUri") or ""),
        http_push=str(update.get("HttpPushUri") or ""),
        task_service=odata_id(root.get("TaskService")),
        systems=odata_id(root.get("Systems")),
        managers=odata_id(root.get("Managers")),
        expand=expand,
        apply_times=apply_times,
        transfer_protocols=tuple(str(p) for p in protocols or []),
    )


# -- I/O --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RedfishSettings:
    """How to reach one BMC. ``password`` is a secret: it is never put in a message or a result."""

    baseurl: str
    username: str
    password: str = field(repr=False)
    validate_certs: bool = True
    ca_path: Optional[str] = None
    timeout: float = 30.0
    retries: int = 3
    retry_sleep: float = 2.0

    def __post_init__(self) -> None:
        parts = urlsplit(self.baseurl)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise InvalidInputError(f"baseurl must be http(s)://host[:port], got {self.baseurl!r}")
        if self.retries < 0 or self.timeout <= 0:
            raise InvalidInputError("retries must be >= 0 and timeout > 0")

    @property
    def origin(self) -> str:
        parts = urlsplit(self.baseurl)
        return f"{parts.scheme}://{parts.netloc}"


@dataclass
class RedfishResponse:
    status: int
    headers: Dict[str, str]
    body: Any  # parsed JSON, or None

    @property
    def location(self) -> str:
        for key, value in self.headers.items():
            if key.lower() == "location":
                return value
        return ""

    def header(self, name: str) -> str:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return ""


def _certificate_refused(err: BaseException) -> bool:
    reason = getattr(err, "reason", err)
    return isinstance(reason, ssl.SSLCertVerificationError) or isinstance(err, SSLValidationError)


class RedfishClient:
    """One BMC. Not thread-safe: use one client per BMC and per thread."""

    def __init__(
        self,
        settings: RedfishSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        pause: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.pause = pause
        # Spreads the retries of BMCs that failed together apart (a uniform fraction in [0, 1)).
        self.jitter = jitter
        self._token = ""
        self._session_uri = ""
        self._basic = False
        self._login_pending = False  # a session died and the next login has not succeeded yet
        self._services: Optional[ServiceMap] = None
        self.requests = 0  # for tests and reports: how many HTTP requests this client sent

    @property
    def address(self) -> str:
        return self.settings.origin

    def url(self, uri: str) -> str:
        return uri if "://" in uri else self.settings.origin + (uri if uri.startswith("/") else "/" + uri)

    # -- transport ----------------------------------------------------------------------------
    def _send(
        self, method: str, uri: str, *, data: Optional[bytes], headers: Mapping[str, str], timeout: float
    ) -> RedfishResponse:
        """One HTTP exchange; HTTP errors come back as responses, connection errors raise."""
        sent_headers = {"Accept": JSON_TYPE, "OData-Version": "4.0"}
        sent_headers.update(headers)
        if self._token:
            sent_headers["X-Auth-Token"] = self._token
        elif self._basic:
            raw = f"{self.settings.username}:{self.settings.password}".encode()
            sent_headers["Authorization"] = "Basic " + base64.b64encode(raw).decode("ascii")
        request = Request(
            validate_certs=self.settings.validate_certs,
            ca_path=self.settings.ca_path,
            timeout=timeout,
            follow_redirects="safe",
            use_netrc=False,
        )
        self.requests += 1
        try:
            response = request.open(method, self.url(uri), data=data, headers=sent_headers)
            status = int(response.getcode() or 200)
            payload = response.read()
            response_headers = dict(response.headers.items())
        except HTTPError as err:
            status = int(err.code)
            try:
                payload = err.read()
            except (OSError, http.client.HTTPException):
                payload = b""
            response_headers = dict(err.headers.items()) if err.headers is not None else {}
        return RedfishResponse(status=status, headers=response_headers, body=_parse_json(payload))

    def _exchange(
        self, method: str, uri: str, *, data: Optional[bytes], headers: Mapping[str, str], timeout: float
    ) -> RedfishResponse:
        """``_send`` with bounded retries on connection errors and 502/503/504."""
        last_error = ""
        attempts = self.settings.retries + 1
        for attempt in range(attempts):
            try:
                response = self._send(method, uri, data=data, headers=headers, timeout=timeout)
            except (URLError, UrlsConnectionError, SSLValidationError, OSError, http.client.HTTPException) as err:
                if _certificate_refused(err):
                    raise RedfishError(
                        f"BMC {self.address}: its TLS certificate was not accepted ({_reason(err)}); "
                        "give the CA with ca_path (or validate_certs=false on a lab system)"
                    ) from err
                last_error = _reason(err)
                if method not in _IDEMPOTENT_METHODS and not _never_delivered(err):
                    raise RedfishUnreachableError(
                        f"BMC {self.address}: {method} {uri} got no answer ({last_error}); not sent again, "
                        "since the BMC may have carried it out: look at its jobs before retrying"
                    ) from err
            else:
                if response.status not in _RETRY_STATUSES:
                    return response
                last_error = f"HTTP {response.status}: " + describe_error_body(response.body, fallback="busy")
            if attempt < attempts - 1:
                # Linear back-off stretched by up to half again at random; bounded by retries and retry_sleep.
                spread = 1.0 + 0.5 * min(max(self.jitter(), 0.0), 1.0)
                self.pause(self.settings.retry_sleep * (attempt + 1) * spread)
        raise RedfishUnreachableError(
            f"BMC {self.address} did not answer {method} {uri} after {attempts} attempt(s): {last_error}"
        )

    def request(
        self,
        method: str,
        uri: str,
        *,
        body: Any = None,
        data: Optional[bytes] = None,
        content_type: str = JSON_TYPE,
        headers: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None,
        ok: Sequence[int] = (200, 201, 202, 204),
    ) -> RedfishResponse:
        """Send a request; a status outside ``ok`` raises RedfishHttpError with the BMC's message."""
        if body is not None:
            data = json.dumps(body).encode("utf-8")
        sent = dict(headers or {})
        if data is not None:
            sent.setdefault("Content-Type", content_type)
        wait = timeout or self.settings.timeout
        if self._login_pending:
            self.login()
        response = self._exchange(method, uri, data=data, headers=sent, timeout=wait)
        if response.status == 401 and self._token:
            # The session died (the BMC restarted or it timed out): log in again. Until a login succeeds,
            # every request tries it first: a BMC still starting refuses logins for a while, and the client
            # must not go on without credentials.
            self._token, self._session_uri = "", ""
            self._login_pending = True
            self.login()
            response = self._exchange(method, uri, data=data, headers=sent, timeout=wait)
        if response.status not in ok:
            raise self._http_error(method, uri, response)
        return response

    def _http_error(self, method: str, uri: str, response: RedfishResponse) -> RedfishHttpError:
        said = describe_error_body(response.body, fallback="no Redfish error body")
        messages = extended_messages(response.body)
        return RedfishHttpError(
            f"BMC {self.address}: {method} {uri} answered HTTP {response.status}: {said}",
            status=response.status,
            uri=uri,
            message_ids=tuple(m["MessageId"] for m in messages if m["MessageId"]),
        )

    def get(self, uri: str, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        response = self.request("GET", uri, timeout=timeout, ok=(200,))
        if not isinstance(response.body, dict):
            raise RedfishError(f"BMC {self.address}: GET {uri} did not return a JSON object")
        return response.body

    # -- sessions -------------------------------------------------------------------------------
    def service_root(self) -> Dict[str, Any]:
        """The service root, read without credentials as the specification allows."""
        response = self._exchange("GET", SERVICE_ROOT, data=None, headers={}, timeout=self.settings.timeout)
        if response.status != 200 or not isinstance(response.body, dict):
            raise self._http_error("GET", SERVICE_ROOT, response)
        return response.body

    def login(self) -> None:
        """A session when the service offers one, HTTP basic auth otherwise."""
        root = self.service_root()
        sessions = odata_id((root.get("Links") or {}).get("Sessions")) if isinstance(root.get("Links"), dict) else ""
        if not sessions:
            self._basic = True
            # Check the credentials now, so a wrong password fails here with a clear message.
            self._check_basic_auth(root)
            self._login_pending = False
            return
        self._basic = False
        payload = {"UserName": self.settings.username, "Password": self.settings.password}
        response = self._exchange(
            "POST",
            sessions,
            data=json.dumps(payload).encode("utf-8"),
            headers={"Content-Type": JSON_TYPE},
            timeout=self.settings.timeout,
        )
        if response.status in (401, 403):
            raise self._login_refused(response)
        if response.status not in (200, 201, 204):
            raise self._http_error("POST", sessions, response)
        token = response.header("X-Auth-Token")
        if not token:
            raise RedfishError(f"BMC {self.address}: the login answered without an X-Auth-Token")
        self._token = token
        self._session_uri = response.location or odata_id(response.body)
        self._login_pending = False

    def _check_basic_auth(self, root: Mapping[str, Any]) -> None:
        probe = odata_id(root.get("Systems")) or SERVICE_ROOT
        response = self._exchange("GET", probe, data=None, headers={}, timeout=self.settings.timeout)
        if response.status in (401, 403):
            raise self._login_refused(response)

    def _login_refused(self, response: RedfishResponse) -> RedfishHttpError:
        said = describe_error_body(response.body, fallback="credentials refused")
        messages = extended_messages(response.body)
        return RedfishHttpError(
            f"BMC {self.address}: login as {self.settings.username!r} refused (HTTP {response.status}): {said}. "
            "Check the BMC credentials",
            status=response.status,
            uri=SERVICE_ROOT,
            message_ids=tuple(m["MessageId"] for m in messages if m["MessageId"]),
        )

    def logout(self) -> str:
        """End the session; returns a warning ('' when fine). Never raises: it runs in ``finally``."""
        token, uri = self._token, self._session_uri
        self._basic = False
        self._login_pending = False
        if not token or not uri:
            self._token, self._session_uri = "", ""
            return ""
        try:
            response = self._send("DELETE", uri, data=None, headers={}, timeout=self.settings.timeout)
        except (URLError, UrlsConnectionError, SSLValidationError, OSError, http.client.HTTPException) as err:
            return f"BMC {self.address}: could not log out ({_reason(err)}); the session expires by itself"
        finally:
            self._token, self._session_uri = "", ""
        if response.status not in (200, 202, 204, 404):
            said = describe_error_body(response.body, fallback=f"HTTP {response.status}")
            return f"BMC {self.address}: logout answered HTTP {response.status}: {said}"
        return ""

    def session(self) -> _Session:
        """``with client.session():`` logs in and always logs out."""
        return _Session(self)

    # -- discovery -------------------------------------------------------------------------------
    def services(self) -> ServiceMap:
        if self._services is None:
            root = self.get(SERVICE_ROOT)
            update_uri = odata_id(root.get("UpdateService"))
            update = self.get(update_uri) if update_uri else None
            self._services = service_map(root, update)
        return self._services

    def members(self, collection_uri: str) -> List[Dict[str, Any]]:
        """Every member of a collection, expanded in one request where the service offers ``$expand``."""
        if self.services().expand:
            expanded = collection_uri + "?$expand=*($levels=1)"
            members = [m for m in self._member_list(expanded) if isinstance(m, dict)]
            # A service may advertise $expand and still return links: read those one by one.
            if all(len(m) > 1 for m in members):
                return members
        return [self.get(uri) for uri in self._member_uris(collection_uri)]

    def _member_list(self, collection_uri: str) -> List[Any]:
        return body_field(self.get(collection_uri), "Members", list, where=f"BMC {self.address}: {collection_uri}")

    def _member_uris(self, collection_uri: str) -> List[str]:
        """The members' links; one that is no link is the BMC answering what Redfish does not define."""
        uris = []
        for index, member in enumerate(self._member_list(collection_uri)):
            uri = odata_id(member)
            if not uri:
                raise RedfishError(
                    f"BMC {self.address}: {collection_uri} Members[{index}] is {_type_name(member)} "
                    "without an @odata.id link"
                )
            uris.append(uri)
        return uris

    def first_member(self, collection_uri: str, what: str) -> str:
        if not collection_uri:
            raise RedfishError(f"BMC {self.address}: the service root lists no {what}")
        for uri in self._member_uris(collection_uri):
            return uri
        raise RedfishError(f"BMC {self.address}: {collection_uri} has no members")

    def system_uri(self) -> str:
        return self.first_member(self.services().systems, "Systems")

    # -- updates ------------------------------------------------------------------------------------
    def simple_update(
        self,
        image_uri: str,
        *,
        targets: Optional[Sequence[str]] = None,
        apply_time: str = "",
        transfer_protocol: str = "",
        extra: Optional[Mapping[str, Any]] = None,
    ) -> RedfishResponse:
        """``UpdateService.SimpleUpdate``; the response's Location (if any) is the task to follow."""
        target = self.services().simple_update
        if not target:
            raise RedfishError(f"BMC {self.address}: the UpdateService offers no SimpleUpdate action")
        body: Dict[str, Any] = {"ImageURI": image_uri}
        if transfer_protocol:
            body["TransferProtocol"] = transfer_protocol
        if targets is not None:
            body["Targets"] = list(targets)
        if apply_time:
            body["@Redfish.OperationApplyTime"] = apply_time
        body.update(extra or {})
        return self.request("POST", target, body=body)

    def multipart_update(
        self,
        image: bytes,
        *,
        filename: str,
        targets: Optional[Sequence[str]] = None,
        apply_time: str = "",
        timeout: Optional[float] = None,
        extra: Optional[Mapping[str, Any]] = None,
    ) -> RedfishResponse:
        """Push an image to ``MultipartHttpPushUri`` (parts ``UpdateParameters`` and ``UpdateFile``)."""
        target = self.services().multipart_push
        if not target:
            raise RedfishError(f"BMC {self.address}: the UpdateService offers no MultipartHttpPushUri")
        parameters: Dict[str, Any] = {}
        if targets is not None:
            parameters["Targets"] = list(targets)
        if apply_time:
            parameters["@Redfish.OperationApplyTime"] = apply_time
        parameters.update(extra or {})
        content_type, data = encode_multipart(
            [
                ("UpdateParameters", None, JSON_TYPE, json.dumps(parameters).encode("utf-8")),
                ("UpdateFile", filename, "application/octet-stream", image),
            ]
        )
        return self.request("POST", target, data=data, content_type=content_type, timeout=timeout)

    def task_progress(self, task_uri: str) -> UpdateProgress:
        # A DMTF task monitor answers 202 with the Task while it runs (iDRAC's Tasks/JID_... too), 200 after.
        response = self.request("GET", task_uri, ok=(200, 202))
        if not isinstance(response.body, dict):
            raise RedfishError(f"BMC {self.address}: GET {task_uri} did not return a JSON object")
        return task_progress(response.body)

    def follow(
        self,
        observe: Callable[[], UpdateProgress],
        *,
        done: Callable[[UpdateProgress], bool],
        timeout: float,
        sleep: float,
        what: str,
    ) -> UpdateProgress:
        """Poll ``observe`` until ``done``; a BMC that does not answer meanwhile (restarting) is polled again.

        Restarting includes a BMC that answers 401, 500 or 503 (``RESTARTING_STATUSES``): the credentials
        worked when the session began, so a refusal now is the BMC coming back, not a wrong password.
        Bounded by ``timeout``; on timeout a RedfishError says what was last seen.
        """
        unreachable = UpdateProgress(state=PROGRESS_RUNNING, detail="unreachable")

        def look() -> UpdateProgress:
            try:
                return observe()
            except RedfishUnreachableError as err:
                return UpdateProgress(state=PROGRESS_RUNNING, detail="unreachable", message=err.msg)
            except RedfishHttpError as err:
                if err.status not in RESTARTING_STATUSES:
                    raise
                return UpdateProgress(state=PROGRESS_RUNNING, detail="restarting", message=err.msg)

        try:
            outcome = wait_until(
                look, done, timeout=timeout, sleep=sleep, what=what, clock=self.clock, pause=self.pause
            )
        except WaitTimeoutError as err:
            last = err.result.get("last") or unreachable
            seen = f"{last.detail}" + (f": {last.message}" if last.message else "")
            raise RedfishError(f"BMC {self.address}: {err.msg} (last seen: {seen})") from err
        return outcome.value

    # -- systems -------------------------------------------------------------------------------------
    def reset_action(self, reset_type: str, *, system_uri: str = "") -> Tuple[str, Dict[str, Any]]:
        """The ``ComputerSystem.Reset`` target and the system, once ``reset_type`` is known to be offered.

        Called before any update is sent, too: some iDRAC9 releases do not offer GracefulRestart, and
        finding that out after the jobs are scheduled would leave them waiting for a reset that never comes.
        """
        uri = system_uri or self.system_uri()
        system = self.get(uri)
        where = f"BMC {self.address}: {uri}"
        action = body_field(
            body_field(system, "Actions", dict, where=where), "#ComputerSystem.Reset", dict, where=where
        )
        target = action.get("target")
        if not target:
            raise RedfishError(f"BMC {self.address}: {uri} offers no ComputerSystem.Reset action")
        allowed = action.get("ResetType@Redfish.AllowableValues")
        if isinstance(allowed, list) and allowed and reset_type not in allowed:
            raise InvalidInputError(
                f"BMC {self.address}: reset type {reset_type} is not one of {', '.join(map(str, allowed))}"
            )
        return str(target), system

    def reset_system(self, reset_type: str, *, system_uri: str = "") -> Dict[str, Any]:
        """``ComputerSystem.Reset`` with the target the system advertises."""
        uri = system_uri or self.system_uri()
        target, system = self.reset_action(reset_type, system_uri=uri)
        self.request("POST", target, body={"ResetType": reset_type})
        return {"system": uri, "reset_type": reset_type, "power_state_before": system.get("PowerState")}

    def host_state(self, system_uri: str) -> Dict[str, str]:
        system = self.get(system_uri)
        boot = system.get("BootProgress") if isinstance(system.get("BootProgress"), dict) else {}
        return {
            "power_state": str(system.get("PowerState") or ""),
            "boot_progress": str((boot or {}).get("LastState") or ""),
        }


class _Session:
    def __init__(self, client: RedfishClient) -> None:
        self.client = client
        self.warning = ""

    def __enter__(self) -> RedfishClient:
        self.client.login()
        return self.client

    def __exit__(self, *exc_info: Any) -> None:
        self.warning = self.client.logout()


def host_is_up(state: Mapping[str, str]) -> bool:
    """Powered on and, where the service reports boot progress, the OS running."""
    if state.get("power_state") != "On":
        return False
    progress = state.get("boot_progress") or ""
    # BootProgress.LastState is optional (Redfish 2020.1+); absent means nothing more to wait for.
    return progress in ("", "None", "OSRunning", "OSBootStarted")


def _parse_json(payload: bytes) -> Any:
    if not payload:
        return None
    try:
        return json.loads(payload.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None


def _never_delivered(err: BaseException) -> bool:
    """The request cannot have reached the BMC: the connection was refused or the name did not resolve."""
    reason = getattr(err, "reason", None)
    cause = reason if isinstance(reason, BaseException) else err
    return isinstance(cause, (ConnectionRefusedError, socket.gaierror))


def _reason(err: BaseException) -> str:
    reason = getattr(err, "reason", None)
    if isinstance(reason, BaseException):
        err = reason
    elif isinstance(reason, str) and reason:
        return reason
    if isinstance(err, socket.timeout):
        return "timed out"
    text = str(err)
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


# -- the DMTF way of updating, for services without a vendor adapter -----------------------------


class GenericAdapter:
    """What a plain DMTF service offers: Tasks to follow, Targets by inventory URI, no rollback images.

    Vendor adapters (``_redfish_idrac.IdracAdapter``) override what their BMCs do differently.
    """

    name = "dmtf"

    def inventory_items(self, members: Sequence[Mapping[str, Any]]) -> List[InventoryItem]:
        return [generic_inventory_item(member) for member in members]

    def update_targets(self, target_uris: Sequence[str]) -> Optional[List[str]]:
        """The ``Targets`` of an update: the inventory members to update."""
        return list(target_uris)

    def check_plan(self, plan: FlashPlan, inventory: Sequence[InventoryItem]) -> None:
        """Refuse a plan this BMC would carry out differently (a DMTF service honours Targets: nothing to refuse)."""

    def apply_time(self, client: RedfishClient, wanted: str) -> str:
        """``@Redfish.OperationApplyTime`` to send ('' to send none)."""
        supported = client.services().apply_times
        if supported and wanted not in supported:
            raise InvalidInputError(f"BMC {client.address} supports apply times {', '.join(supported)}, not {wanted}")
        return wanted if supported else ""

    def progress_observer(self, client: RedfishClient, response: RedfishResponse) -> Callable[[], UpdateProgress]:
        """How to see the update an update request started: its Task (Location, or the body's @odata.id)."""
        location = response.location or (odata_id(response.body) if response.status == 202 else "")
        if not location:
            # No task: the service did the work within the request (sushy-tools answers 204 like this).
            done = UpdateProgress(state=PROGRESS_COMPLETED, detail=f"HTTP {response.status}")
            return lambda: done
        uri = urlsplit(location).path if "://" in location else location
        return lambda: client.task_progress(uri)

    def job_id(self, response: RedfishResponse) -> str:
        location = response.location or odata_id(response.body)
        return location.rstrip("/").rsplit("/", 1)[-1] if location else ""

    def resets_host(self, device: str) -> bool:
        """Whether updating ``device`` needs the host to restart (a DMTF service does not say: assume it does)."""
        return True

    def job_observer(self, client: RedfishClient, job_id: str) -> Optional[Callable[[], UpdateProgress]]:
        """How to follow a job known only by its id (a plain DMTF service offers no such thing)."""
        return None

    def pending_update_jobs(self, client: RedfishClient) -> List[Dict[str, Any]]:
        """Updates already waiting for a host reset (a plain DMTF service does not say)."""
        return []

    def rollback_image_uri(self, client: RedfishClient, previous_uri: str) -> str:
        raise RedfishError(
            f"BMC {client.address}: rolling back to a previous image needs a vendor adapter; "
            "this service is not one the collection knows (flash the older image instead)"
        )
