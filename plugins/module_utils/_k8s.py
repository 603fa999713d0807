# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Kubernetes API access for every module of the collection (collection-internal).

Authentication is kubernetes.core's own: its argument spec, its ``K8S_AUTH_*``
environment variables and its configuration loader, so one ``module_defaults``
group serves both collections.  Requests go through one ``KubeApi`` object
that speaks plain REST paths (built-in kinds and custom resources alike),
pages through lists, retries what is safe to retry, and turns every failure
into a ``KubeApiError`` carrying the server's own ``Status`` message.
"""

from __future__ import annotations

import datetime
import email.utils
import gc
import json
import random
import re
import time
import traceback
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    InvalidInputError,
    KubeApiError,
    KubeUnreachableError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_objects import type_name
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    PODS,
    ResourceRef,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._lease import LeaseKeeper, LeaseSettings, StageLease
from ansible_collections.gpufleet.upgrade.plugins.module_utils._permissions import forbidden_detail
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import THIS_CONTROLLER

try:
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import (
        _create_auth_spec,
        _create_configuration,
        _create_headers,
    )

    HAS_K8S_CORE = True
    K8S_CORE_IMPORT_ERROR = None
except ImportError:
    HAS_K8S_CORE = False
    K8S_CORE_IMPORT_ERROR = traceback.format_exc()
    AUTH_ARG_SPEC = {}

try:
    import kubernetes
    import urllib3
    from kubernetes.client.exceptions import ApiException

    HAS_KUBERNETES = True
    KUBERNETES_IMPORT_ERROR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()


def forget_inherited_credential_files() -> Callable[[], None]:
    """In a forked child process: make the kubeconfig loader write certificate files of the child's own.

    The loader keeps the kubeconfig's certificate data in temporary files that the process deletes when it exits
    (kubernetes.config.kube_config); a child that outlives the module would find them gone. Returns what deletes
    the child's files when it ends.
    """
    kube_config = kubernetes.config.kube_config
    inherited = getattr(kube_config, "_temp_files", None)
    if isinstance(inherited, dict):
        inherited.clear()
    return getattr(kube_config, "_cleanup_temp_files", lambda: None)


# apimachinery meta/v1 PartialObjectMetadata: the API server answers the object's metadata alone.
PARTIAL_METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
PATCH_CONTENT_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}

# The collection's one retry policy for the Kubernetes API (roles apply the same
# statuses to kubernetes.core tasks through the test plugin transient_api_error).
# Transient: the server throttled (429), failed or was unavailable (5xx), or lost
# a race it resolves itself (409 Conflict on a write that carries no
# resourceVersion), or the connection broke. Everything else (400, 401, 403,
# 404, 409 AlreadyExists, 422) is an answer, not an accident, and fails at once.
TRANSIENT_STATUSES = frozenset({409, 429, 500, 502, 503, 504})
# Statuses after which a request may be sent again: the server either did
# not process it (429) or the request can be repeated without harm.
_RETRY_ANY_METHOD = frozenset({429})
_RETRY_RESENDABLE = frozenset({500, 502, 503, 504})
_IDEMPOTENT_METHODS = frozenset({"GET", "PUT", "PATCH", "DELETE"})
_HTTP_REASONS = {
    "conflict": 409,
    "too many requests": 429,
    "internal server error": 500,
    "bad gateway": 502,
    "service unavailable": 503,
    "gateway timeout": 504,
}
# How a dropped connection shows in urllib3's and http.client's messages.
_CONNECTION_BROKEN = re.compile(
    r"connection reset|connection aborted|remotedisconnected|remote end closed|broken pipe|protocolerror",
    re.IGNORECASE,
)
# The status of a failed kubernetes.core task: ApiException's text "(503)\nReason: ..."
# or the Status body the module quotes ('"code":503').
_STATUS_IN_TEXT = re.compile(r"\((\d{3})\)\s*\n?\s*Reason:|\"code\":\s*(\d{3})")


def transient_failure(result: Mapping[str, Any]) -> str:
    """Why a failed task result is a transient API failure worth retrying, or "" when it is not.

    Pure; reads what kubernetes.core modules return when they fail (``msg``,
    ``reason``, ``status``/``error``). A 409 AlreadyExists is not transient.
    """
    if not isinstance(result, Mapping) or not result.get("failed"):
        return ""
    text = str(result.get("msg") or "")
    if "AlreadyExists" in text:
        return ""
    status = 0
    for key in ("status", "error"):
        value = result.get(key)
        if isinstance(value, int) and 100 <= value < 600:
            status = value
            break
    if not status:
        match = _STATUS_IN_TEXT.search(text)
        if match:
            status = int(match.group(1) or match.group(2))
    if not status:
        status = _HTTP_REASONS.get(str(result.get("reason") or "").strip().lower(), 0)
    if status in TRANSIENT_STATUSES:
        return f"the API answered {status}"
    if not status and _CONNECTION_BROKEN.search(text):
        return "the connection to the API broke"
    return ""


def k8s_auth_argument_spec() -> Dict[str, Any]:
    """kubernetes.core's connection options, unchanged (a copy, so callers may extend it)."""
    return {name: dict(spec) for name, spec in AUTH_ARG_SPEC.items()}


def missing_libraries() -> List[tuple]:
    """(library, import traceback) pairs for missing_required_lib in main()."""
    missing = []
    if not HAS_KUBERNETES:
        missing.append(("kubernetes", KUBERNETES_IMPORT_ERROR))
    if not HAS_K8S_CORE:
        missing.append(("kubernetes.core collection", K8S_CORE_IMPORT_ERROR))
    return missing


def decode_json(payload: Any) -> Any:
    """``json.loads`` with the cyclic garbage collector paused.

    Decoding a list page creates hundreds of thousands of dicts and lists, none
    of them garbage; each batch of allocations would otherwise start a
    collection that walks everything alive (a 100 MB pod list took 3.9 s with
    collections, 0.9 s without).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(payload)
    finally:
        if enabled:
            gc.enable()


class KubeApi:
    """One authenticated connection to an API server."""

    def __init__(
        self,
        api_client: Any,
        *,
        retries: int = 6,
        request_timeout: float = 60.0,
        pause: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._client = api_client
        self._retries = retries
        self._timeout = request_timeout
        self._pause = pause
        # Spreads the retries of many clients apart (a uniform fraction in [0, 1)).
        self._jitter = jitter
        self.requests_sent = 0
        # The ansible process that started this module: no request leaves once it is gone (see _wait).
        self.controller = THIS_CONTROLLER
        # Renews the stage's Lease from the server's clock in the responses (see _lease), when a stage holds one.
        self.lease_keeper: Optional[LeaseKeeper] = None
        # The Date of the latest answer and when (this machine's monotonic clock) it came: cluster_now().
        self._last_date: Optional[Tuple[datetime.datetime, float]] = None

    @classmethod
    def from_params(cls, params: Dict[str, Any], *, keep_stage_lease: bool = True, **kwargs: Any) -> "KubeApi":
        """Build from module params holding kubernetes.core's connection options.

        With ``keep_stage_lease``, the stage Lease roles/upgrade hands over in
        ``GPUFLEET_UPGRADE_LEASE`` is checked before the first request and
        renewed while the module works.
        """
        auth_params = {name: params.get(name) for name in AUTH_ARG_SPEC}
        try:
            auth = _create_auth_spec(None, **auth_params)
            configuration = _create_configuration(auth)
            headers = _create_headers(None, **auth_params)
        except (kubernetes.config.ConfigException, OSError, ValueError, TypeError) as err:
            raise InvalidInputError(f"Cannot build a Kubernetes client from the connection options: {err}") from err
        if auth.get("api_key"):
            # The token given wins over the kubeconfig user's: the kubeconfig loader re-sets its own token
            # before every request (refresh_api_key_hook), which would silently run a least-privilege
            # account's work with the kubeconfig's identity.
            configuration.refresh_api_key_hook = None
            configuration.api_key = {"BearerToken": f"Bearer {auth['api_key']}"}
            configuration.api_key_prefix = {}
        api_client = kubernetes.client.ApiClient(configuration)
        for header, value in headers.items():
            api_client.set_default_header(header, ",".join(value) if isinstance(value, list) else value)
        api = cls(api_client, **kwargs)
        settings = LeaseSettings.from_environment() if keep_stage_lease else None
        if settings is not None:
            api.lease_keeper = LeaseKeeper(StageLease(api, settings))
        return api

    @property
    def host(self) -> str:
        return self._client.configuration.host

    # -- verbs -------------------------------------------------------------------------
    def get(self, ref: ResourceRef, name: str, *, namespace: Optional[str] = None) -> Optional[Dict[str, Any]]:
        """The object, or None when it does not exist."""
        try:
            return self.request("GET", ref.path(namespace=namespace, name=name))
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise

    def get_metadata(self, ref: ResourceRef, name: str, *, namespace: Optional[str] = None) -> Optional[Dict[str, Any]]:
        """The object's metadata only (``PartialObjectMetadata``: a Secret's data is not sent), None when absent."""
        try:
            found = self.request("GET", ref.path(namespace=namespace, name=name), accept=PARTIAL_METADATA)
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise
        return found.get("metadata") or {}

    def list(
        self,
        ref: ResourceRef,
        *,
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        field_selector: Optional[str] = None,
        page_size: int = 500,
    ) -> List[Dict[str, Any]]:
        """Every matching object, read in pages of ``page_size``."""
        return list(
            self.iter_list(
                ref,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                page_size=page_size,
            )
        )

    def iter_list(
        self,
        ref: ResourceRef,
        *,
        namespace: Optional[str] = None,
        label_selector: Optional[str] = None,
        field_selector: Optional[str] = None,
        page_size: int = 500,
    ) -> Iterator[Dict[str, Any]]:
        query: Dict[str, Any] = {"limit": page_size}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        path = ref.path(namespace=namespace)
        # The server ends the list by answering without a continue token.
        more_pages = True
        while more_pages:
            page = self.request("GET", path, query=query)
            where = f"GET {path} answered a {ref.kind} list whose"
            items = page.get("items") or []
            if not isinstance(items, list):
                raise KubeApiError(f"{where} items is {type_name(items)}", method="GET", path=path)
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    raise KubeApiError(f"{where} items[{index}] is {type_name(item)}", method="GET", path=path)
                # Lists carry kind/apiVersion on the list only; put them back on
                # each item so callers can treat items like any other object.
                item.setdefault("kind", ref.kind)
                item.setdefault("apiVersion", ref.api_version)
                yield item
            metadata = page.get("metadata") or {}
            token = metadata.get("continue") if isinstance(metadata, dict) else None
            if token is not None and not isinstance(token, str):
                raise KubeApiError(f"{where} metadata.continue is {type_name(token)}", method="GET", path=path)
            query["continue"] = token
            more_pages = bool(token)

    def create(
        self, ref: ResourceRef, body: Dict[str, Any], *, namespace: Optional[str] = None, dry_run: bool = False
    ) -> Dict[str, Any]:
        """POST; sent again after a 5xx or a broken connection when that cannot make a second object: an object
        with a fixed name, a dry run, or a review (``*reviews``: the server computes the answer and stores nothing).

        Resending an object with a fixed name cannot make a second one: the name
        is taken, so the server answers 409 AlreadyExists. After a resend that
        answer means the first attempt did land, and the object is read back and
        returned.
        """
        name = str((body.get("metadata") or {}).get("name") or "")
        resendable = bool(name) or dry_run or ref.plural.endswith("reviews")
        try:
            return self.request(
                "POST", ref.path(namespace=namespace), body=body, query=_dry_run(dry_run), resendable=resendable
            )
        except KubeApiError as err:
            if not (err.status == 409 and err.reason == "AlreadyExists" and err.attempts > 1 and not dry_run):
                raise
            found = self.get(ref, name, namespace=namespace)
            if found is None:
                raise
            return found

    def replace(self, ref: ResourceRef, body: Dict[str, Any], *, dry_run: bool = False) -> Dict[str, Any]:
        """PUT guarded by the body's resourceVersion: a stale one answers 409."""
        meta = body.get("metadata") or {}
        return self.request(
            "PUT", ref.path(namespace=meta.get("namespace"), name=meta.get("name")), body=body, query=_dry_run(dry_run)
        )

    def patch(
        self,
        ref: ResourceRef,
        name: str,
        patch: Any,
        *,
        namespace: Optional[str] = None,
        patch_type: str = "merge",
        subresource: str = "",
        dry_run: bool = False,
        field_manager: str = "",
    ) -> Dict[str, Any]:
        """PATCH; ``field_manager`` names the writer in the object's managedFields (default: the User-Agent)."""
        query = _dry_run(dry_run)
        if field_manager:
            query = {**(query or {}), "fieldManager": field_manager}
        return self.request(
            "PATCH",
            ref.path(namespace=namespace, name=name, subresource=subresource),
            body=patch,
            content_type=PATCH_CONTENT_TYPES[patch_type],
            query=query,
            # A patch that does not name the resourceVersion it was computed
            # from applies to whatever is current: a 409 is the server's own
            # race, and the same patch may be sent again. A guarded one is
            # recomputed by its caller on fresh data instead.
            retry_conflict=not _carries_resource_version(patch),
        )

    def delete(
        self,
        ref: ResourceRef,
        name: str,
        *,
        namespace: Optional[str] = None,
        grace_period_seconds: Optional[int] = None,
        dry_run: bool = False,
    ) -> Optional[Dict[str, Any]]:
        """Delete; None when it was already gone."""
        body: Dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if grace_period_seconds is not None:
            body["gracePeriodSeconds"] = grace_period_seconds
        try:
            return self.request("DELETE", ref.path(namespace=namespace, name=name), body=body, query=_dry_run(dry_run))
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise

    def evict(self, namespace: str, name: str, *, dry_run: bool = False) -> bool:
        """Ask the eviction API to remove a pod: True when accepted (or already gone),
        False when a PodDisruptionBudget refuses it now (429)."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        if dry_run:
            body["deleteOptions"] = {"dryRun": ["All"]}
        try:
            self.request(
                "POST",
                PODS.path(namespace=namespace, name=name, subresource="eviction"),
                body=body,
                # 429 is the budget's answer (the caller waits and asks again); a 5xx
                # or a broken connection is retried: asking twice evicts once.
                retry_statuses=_RETRY_RESENDABLE,
                resendable=True,
            )
        except KubeApiError as err:
            if err.status == 429:
                return False
            if err.status == 404:
                return True
            raise
        return True

    # -- transport ---------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Dict[str, Any]] = None,
        body: Any = None,
        content_type: str = "application/json",
        retry_statuses: Optional[frozenset] = None,
        resendable: Optional[bool] = None,
        retry_conflict: bool = False,
        accept: str = "application/json",
    ) -> Dict[str, Any]:
        """Send one API request (with bounded retries) and return the decoded JSON body.

        ``resendable`` says the request may be repeated after a 5xx or a broken
        connection (default: for GET, PUT, PATCH and DELETE); ``retry_conflict``
        adds 409 Conflict; ``retry_statuses`` replaces the statuses retried.
        """
        payload = self._request_payload(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            retry_statuses=retry_statuses,
            resendable=resendable,
            retry_conflict=retry_conflict,
            accept=accept,
        )
        if not payload:
            return {}
        try:
            decoded = decode_json(payload)
        except ValueError as err:  # also UnicodeDecodeError
            raise KubeApiError(
                f"{method} {path} answered {len(payload)} bytes that are not JSON ({err}): {payload[:80]!r}",
                method=method,
                path=path,
            ) from err
        if not isinstance(decoded, dict):
            raise KubeApiError(
                f"{method} {path} answered {type_name(decoded)} where a JSON object was expected",
                method=method,
                path=path,
            )
        return decoded

    def read_pod_log(
        self,
        namespace: str,
        name: str,
        *,
        container: Optional[str] = None,
        limit_bytes: Optional[int] = None,
    ) -> str:
        """The log of one container of a pod (``pods/log`` answers text, not JSON)."""
        query = {"container": container, "limitBytes": limit_bytes}
        path = PODS.path(namespace=namespace, name=name, subresource="log")
        payload = self._request_payload("GET", path, query=query)
        return payload.decode("utf-8", "replace") if isinstance(payload, bytes) else str(payload or "")

    def server_time(self) -> datetime.datetime:
        """The API server's clock (UTC), read from the ``Date`` header of ``GET /version``.

        Bake windows are measured on the cluster's clock, not the controller's:
        a scheduled job on any controller then agrees on how long a canary has
        baked (every HTTP server sends Date, RFC 9110 section 6.6.1).
        """
        headers, _payload = self._exchange("GET", "/version")
        return _server_date(headers)

    def cluster_now(self) -> datetime.datetime:
        """The cluster's time now, for every timestamp the collection writes (one clock: annotations, timelines,
        ledger, report): the Date of the API server's latest answer when it came within the last second, else
        ``server_time()``. A wait loop polls, so its timestamps cost no extra request."""
        if self._last_date is not None and time.monotonic() - self._last_date[1] < 1.0:
            return self._last_date[0]
        return self.server_time()

    def _request_payload(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Dict[str, Any]] = None,
        body: Any = None,
        content_type: str = "application/json",
        retry_statuses: Optional[frozenset] = None,
        resendable: Optional[bool] = None,
        retry_conflict: bool = False,
        accept: str = "application/json",
    ) -> Any:
        return self._exchange(
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            retry_statuses=retry_statuses,
            resendable=resendable,
            retry_conflict=retry_conflict,
            accept=accept,
        )[1]

    def _exchange(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Dict[str, Any]] = None,
        body: Any = None,
        content_type: str = "application/json",
        retry_statuses: Optional[frozenset] = None,
        resendable: Optional[bool] = None,
        retry_conflict: bool = False,
        accept: str = "application/json",
    ) -> tuple:
        """(headers, payload) of the first successful answer, after bounded, jittered retries of transient failures."""
        if resendable is None:
            resendable = method in _IDEMPOTENT_METHODS
        if retry_statuses is not None:
            retryable = retry_statuses
        else:
            retryable = _RETRY_ANY_METHOD | (_RETRY_RESENDABLE if resendable else frozenset())
            retryable |= frozenset({409}) if retry_conflict else frozenset()
        error: Optional[KubeApiError] = None
        for attempt in range(1, self._retries + 2):
            last_attempt = attempt > self._retries
            try:
                status, headers, payload = self._send(
                    method, path, query=query, body=body, content_type=content_type, accept=accept
                )
            except KubeUnreachableError as err:
                # A broken connection leaves unknown whether the server acted: resend only what may be
                # repeated. A timeout is not retried: a server that hangs would hang each attempt again.
                err.attempts = attempt
                if not resendable or last_attempt or not _CONNECTION_BROKEN.search(err.msg):
                    if attempt > 1:
                        err.msg = f"{err.msg} (after {attempt} attempts)"
                        err.args = (err.msg,)
                    raise
                self._pause(_backoff(attempt, None, jitter=self._jitter()))
                continue
            if 200 <= status < 300:
                return headers, payload
            error = _api_error(method, path, status, payload, attempts=attempt)
            if status not in retryable or last_attempt or (status == 409 and error.reason == "AlreadyExists"):
                break
            retry_after = headers.get("Retry-After") or headers.get("retry-after")
            self._pause(_backoff(attempt, retry_after, jitter=self._jitter()))
        raise error or KubeApiError(f"{method} {path} was not sent", method=method, path=path)

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Dict[str, Any]],
        body: Any,
        content_type: str,
        accept: str = "application/json",
    ) -> tuple:
        if self.controller is not None:
            self.controller.ensure_alive(what=f"before {method} {path}")
        if self.lease_keeper is not None:
            self.lease_keeper.ensure_held(self)
        status, headers, payload = self._send_once(
            method, path, query=query, body=body, content_type=content_type, accept=accept
        )
        try:
            moment: Optional[datetime.datetime] = _server_date(headers)
        except KubeApiError:
            moment = None  # renewal waits for a response with a readable Date
        if moment is not None:
            self._last_date = (moment, time.monotonic())
        if self.lease_keeper is not None and 200 <= status < 300 and moment is not None:
            self.lease_keeper.observe(moment)
        return status, headers, payload

    def _send_once(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Dict[str, Any]],
        body: Any,
        content_type: str,
        accept: str = "application/json",
    ) -> tuple:
        query_params = [(key, value) for key, value in (query or {}).items() if value is not None]
        header_params = {"Accept": accept, "Content-Type": content_type}
        serialized = self._client.param_serialize(
            method,
            path,
            query_params=query_params,
            header_params=header_params,
            body=body,
            auth_settings=["BearerToken"],
        )
        self.requests_sent += 1
        try:
            response = self._client.call_api(*serialized, _request_timeout=self._timeout)
            response.read()
            return response.status, dict(response.getheaders() or {}), response.data
        except ApiException as err:
            return err.status or 0, dict(err.headers or {}), err.body or b""
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise KubeUnreachableError(
                f"Cannot reach the Kubernetes API at {self.host}: {_root_cause(err)}",
                method=method,
                path=path,
            ) from err

    def stream_watch(
        self,
        ref: ResourceRef,
        *,
        namespace: Optional[str] = None,
        resource_version: Optional[str] = None,
        timeout_seconds: int = 60,
        label_selector: Optional[str] = None,
        field_selector: Optional[str] = None,
    ) -> Iterator[Dict[str, Any]]:
        """Watch events (``{"type", "object"}``) until the server closes the stream."""
        query: Dict[str, Any] = {"watch": "true", "timeoutSeconds": timeout_seconds, "allowWatchBookmarks": "true"}
        if resource_version:
            query["resourceVersion"] = resource_version
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        path = ref.path(namespace=namespace)
        if self.controller is not None:
            self.controller.ensure_alive(what=f"before watching {path}")
        serialized = self._client.param_serialize(
            "GET",
            path,
            query_params=list(query.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        self.requests_sent += 1
        try:
            response = self._client.call_api(*serialized, _request_timeout=timeout_seconds + 10)
        except ApiException as err:
            raise _api_error("GET", path, err.status or 0, err.body or b"") from err
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise KubeUnreachableError(
                f"Cannot reach the Kubernetes API at {self.host}: {_root_cause(err)}", method="GET", path=path
            ) from err
        if response.status != 200:
            response.read()
            raise _api_error("GET", path, response.status, response.data)
        buffer = b""
        for chunk in response.response.stream(65536, decode_content=True):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    yield _watch_event(line, path=path)


def list_served(api: Any, ref: ResourceRef, **kwargs: Any) -> List[Dict[str, Any]]:
    """``api.list``, where a cluster may not serve the kind (an operator's CRD not installed, no OpenShift): [] on
    404; any other error is raised, never read as nothing."""
    try:
        return api.list(ref, **kwargs)
    except KubeApiError as err:
        if err.status == 404:
            return []
        raise


def _watch_event(line: bytes, *, path: str) -> Dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError as err:
        raise KubeApiError(
            f"GET {path} (watch) sent a line that is not JSON: {line[:80]!r}", method="GET", path=path
        ) from err
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise KubeApiError(
            f"GET {path} (watch) sent an event without an object: {line[:80]!r}", method="GET", path=path
        )
    return event


def _server_date(headers: Dict[str, Any]) -> datetime.datetime:
    """The API server's clock (UTC) from a response's ``Date`` header."""
    value = next((text for header, text in headers.items() if str(header).lower() == "date"), None)
    if not value:
        raise KubeApiError("The API server sent no Date header; its time cannot be read", method="GET")
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError) as err:
        raise KubeApiError(f"The API server sent an unreadable Date header {value!r}", method="GET") from err
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc)


def _dry_run(dry_run: bool) -> Optional[Dict[str, Any]]:
    return {"dryRun": "All"} if dry_run else None


def _carries_resource_version(patch: Any) -> bool:
    """Whether a patch body names the resourceVersion it was computed from (merge patch or JSON patch)."""
    if isinstance(patch, Mapping):
        return bool((patch.get("metadata") or {}).get("resourceVersion"))
    if isinstance(patch, list):
        return any(isinstance(op, Mapping) and op.get("path") == "/metadata/resourceVersion" for op in patch)
    return False


def _backoff(attempt: int, retry_after: Optional[str], *, jitter: float = 0.0) -> float:
    """Seconds before the next attempt: the server's Retry-After (capped at 10 s) or 0.2 s doubling up to 5 s,
    each stretched by up to half again by ``jitter`` (a fraction in [0, 1)), so clients that failed together
    do not come back together. Bounded: at most 15 s."""
    spread = 1.0 + 0.5 * min(max(jitter, 0.0), 1.0)
    if retry_after:
        try:
            return min(float(retry_after), 10.0) * spread
        except ValueError:
            pass
    return min(0.2 * (2 ** (attempt - 1)), 5.0) * spread


def _api_error(method: str, path: str, status: int, payload: Any, *, attempts: int = 1) -> KubeApiError:
    reason, message = "", ""
    try:
        decoded = json.loads(payload) if payload else {}
        if isinstance(decoded, dict):
            reason = decoded.get("reason") or ""
            message = decoded.get("message") or ""
    except (ValueError, TypeError):
        message = payload.decode("utf-8", "replace")[:500] if isinstance(payload, bytes) else str(payload)[:500]
    text = message or reason or "no message"
    tries = f" (after {attempts} attempts)" if attempts > 1 else ""
    if status == 403:
        # Say which rule is missing and which shipped ClusterRole carries it, as the permission preflight does.
        detail = forbidden_detail(method, path)
        text = f"{text} ({detail})" if detail else text
    return KubeApiError(
        f"{method} {path} answered {status}: {text}{tries}",
        status=status,
        reason=reason,
        method=method,
        path=path,
        attempts=attempts,
    )


def _root_cause(err: BaseException) -> str:
    reason = getattr(err, "reason", None)
    return str(reason or err)
