"""Running the twin's BMCs: listeners, TLS, time, and what BMC actions do to the cluster.

``install(twin, ...)`` gives chosen nodes an iDRAC-like BMC each:

* every BMC listens on its own loopback address (``127.1.0.1``, ``127.1.0.2``
  ... by default; Linux routes all of 127.0.0.0/8 to the loopback device)
  with a port picked by the kernel, so each host has its own BMC URL, as in
  a data centre.  ``host_base=None`` puts them all on ``127.0.0.1`` with
  distinct ports instead (for systems where only 127.0.0.1 is usable);
* HTTPS with a certificate per BMC (its address in the SAN) signed by the
  CA given (``CaPair``), or by a CA generated for the BMCs; the CA is
  published as ``twin.published["bmc_ca_cert_pem"]`` (PEM) and
  ``["bmc_ca_file"]`` (a file in ``work_dir``); plain HTTP with ``tls=False``;
* BMCs are opt-in per node: ``nodes`` names them; without it every GPU node
  gets one up to ``max_bmcs`` (64 by default: all nodes of a cluster of up
  to 64 GPU nodes, otherwise the first 64 by name) because each BMC costs a
  socket and a TLS context;
* ``twin.published["bmcs"]`` maps node name to ``address``, ``username`` and
  ``password`` (the CLI writes it next to the kubeconfig) and every such
  Node carries the annotation ``gpufleet.io/bmc-address`` (address only);
* admin routes: ``GET /admin/bmc`` (state of every BMC),
  ``POST /admin/bmc/<node>/fault`` (body: a fault, see
  :meth:`BmcFleet.inject_fault`), ``DELETE /admin/bmc/<node>/fault``.

A host reset reboots the Kubernetes node through the simulation core
(``SimState.reboot``): NotReady for the reset's duration (POST, firmware
updates applied in it, boot), then Ready again unless the node's
``never_returns`` fault is set.  Applied NIC updates change the firmware the
node's ``ibstat`` reports (``NodeHealth.ib_ports[].firmware``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import ipaddress
import logging
import secrets
import shutil
import socket
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ..machinery.tls import generate_ca_pem
from .app import create_app
from .image import ImageRejected, parse_firmware_image
from .model import (
    MSG_BAD_SIGNATURE,
    MSG_TRANSFER_FAILED,
    Availability,
    Bmc,
    BmcRestarted,
    BmcTimings,
    Effect,
    HostPowerOff,
    HostReboot,
    Job,
    JobFailurePlan,
    NicFirmwareApplied,
    NicSpec,
)

log = logging.getLogger(__name__)

BMC_ADDRESS_ANNOTATION = "gpufleet.io/bmc-address"
DEFAULT_MAX_BMCS = 64
DEFAULT_USERNAME = "root"
FETCH_TIMEOUT_SECONDS = 60.0
MAX_FETCH_BYTES = 64 * 1024 * 1024
# "Powered off" is a reboot that does not end by itself; powering on shortens it.
POWERED_OFF_SECONDS = 10 * 365 * 24 * 3600.0
# The reference NIC set of an H100 server (8 ConnectX-7 for the GPU fabric, 2
# ConnectX-6 Dx for Ethernet, firmware as the ibstat samples show), used when
# the simulation has no InfiniBand ports for a node.
DEFAULT_NICS = (
    *(NicSpec(f"mlx5_{i}", "MT4129", "28.39.1002") for i in range(8)),
    NicSpec("mlx5_8", "MT4125", "22.38.1002", "Ethernet"),
    NicSpec("mlx5_9", "MT4125", "22.38.1002", "Ethernet"),
)


# -- TLS --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CaPair:
    """A CA certificate and its private key (PEM) that signs the BMCs' certificates."""

    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def generate(cls, common_name: str = "gpufleet-twin-bmc-ca") -> CaPair:
        """A CA of their own, for BMCs served without the API server (the CLI passes the twin's CA)."""
        cert_pem, key_pem = generate_ca_pem(common_name)
        return cls(cert_pem=cert_pem, key_pem=key_pem)


def issue_bmc_certificate(ca: CaPair, host: str, *, common_name: str) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) for a BMC at ``host``, signed by ``ca``.

    Validity uses the real clock: TLS clients check it against theirs.
    """
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise TypeError("the CA key must be an EC or RSA private key")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    try:
        alt_name: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        alt_name = x509.DNSName(host)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([alt_name]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


# -- node selection and addresses ----------------------------------------------------------------------


def select_bmc_nodes(node_names: list[str], *, limit: int = DEFAULT_MAX_BMCS) -> list[str]:
    """Nodes that get a BMC: all of them up to ``limit``, otherwise the first ``limit`` by name."""
    return sorted(set(node_names))[: max(0, limit)]


def loopback_addresses(count: int, *, base: str | None) -> list[str]:
    """``count`` loopback addresses from ``base`` on (skipping .0 and .255), or 127.0.0.1 each."""
    if base is None:
        return ["127.0.0.1"] * count
    first = ipaddress.IPv4Address(base)
    if not first.is_loopback:
        raise ValueError(f"{base} is not a loopback address")
    found: list[str] = []
    candidate = int(first)
    while len(found) < count:
        address = ipaddress.IPv4Address(candidate)
        if not address.is_loopback:
            raise ValueError("ran out of loopback addresses")
        if candidate & 0xFF not in (0, 255):
            found.append(str(address))
        candidate += 1
    return found


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


# -- the simulated machine ---------------------------------------------------------------------------------


class HostControl:
    """The one place BMCs act on the simulated machines (``twin.sim``, the simulation core's state)."""

    def __init__(self, sim: Any) -> None:
        self._sim = sim
        self._powered_off: set[str] = set()

    def _health(self, node_name: str) -> Any:
        nodes = getattr(self._sim, "nodes", None)
        return None if nodes is None else nodes.get(node_name)

    def nic_specs(self, node_name: str) -> list[NicSpec]:
        health = self._health(node_name)
        ports = list(getattr(health, "ib_ports", None) or [])
        if not ports:
            return list(DEFAULT_NICS)
        specs: dict[str, NicSpec] = {}
        for port in ports:
            specs.setdefault(port.device, NicSpec(port.device, port.ca_type, port.firmware, port.link_layer))
        return [specs[name] for name in sorted(specs, key=_device_order)]

    def reboot(self, node_name: str, duration: float) -> None:
        health = self._health(node_name)
        if health is None:
            log.info("BMC of %s reset its host, but the simulation has no such node", node_name)
            return
        if node_name in self._powered_off:
            # Powering on: the machine comes back after this boot, not at the end of "off".
            self._powered_off.discard(node_name)
            health.rebooting_until = self._sim.now() + duration
            return
        self._sim.reboot(node_name, duration)

    def power_off(self, node_name: str) -> None:
        if self._health(node_name) is not None:
            self._powered_off.add(node_name)
            self._sim.reboot(node_name, POWERED_OFF_SECONDS)

    def set_nic_firmware(self, node_name: str, devices: tuple[str, ...], version: str) -> None:
        health = self._health(node_name)
        if health is None:
            return
        # Replace the list so that NodeHealth notifies its listeners.
        health.ib_ports = [
            dataclasses.replace(port, firmware=version) if port.device in devices else port for port in health.ib_ports
        ]

    def set_never_returns(self, node_name: str, value: bool) -> None:
        health = self._health(node_name)
        if health is not None:
            health.never_returns = value


def _device_order(device: str) -> tuple[str, int]:
    head, _, number = device.rpartition("_")
    return (head, int(number)) if number.isdigit() else (device, 0)


# -- the fleet ---------------------------------------------------------------------------------------------------


@dataclass
class _Endpoint:
    node_name: str
    host: str
    port: int
    bmc: Bmc
    username: str
    password: str
    ssl_context: ssl.SSLContext | None
    sock: socket.socket | None = None  # bound, not yet served
    site: web.SockSite | None = None
    parked: socket.socket | None = None  # listening but never accepting: a BMC that hangs
    listener: str = "closed"  # up, refuse, hang, closed

    @property
    def address(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://{self.host}:{self.port}"


@dataclass
class _Background:
    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def cancel_all(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


class BmcFleet:
    """Every BMC of the twin; runs as one of the twin's controllers."""

    name = "redfish-bmcs"

    def __init__(
        self,
        *,
        clock: Any,
        host_control: HostControl,
        endpoints: list[_Endpoint],
        work_dir: Path,
        remove_work_dir: bool,
    ) -> None:
        self._clock = clock
        self._hosts = host_control
        self._endpoints = {ep.node_name: ep for ep in endpoints}
        self._by_socket = {(ep.host, ep.port): ep for ep in endpoints}
        self._work_dir = work_dir
        self._remove_work_dir = remove_work_dir
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self._background = _Background()
        self._wake: asyncio.Event | None = None
        self._tick_lock: asyncio.Lock | None = None
        self._stopping = False
        self._original_passwords = {ep.node_name: ep.password for ep in endpoints}

    # -- public ----------------------------------------------------------------------------------------
    @property
    def nodes(self) -> list[str]:
        return sorted(self._endpoints)

    def bmc(self, node_name: str) -> Bmc:
        return self._endpoint(node_name).bmc

    def address(self, node_name: str) -> str:
        return self._endpoint(node_name).address

    def credentials(self, node_name: str) -> dict[str, str]:
        ep = self._endpoint(node_name)
        return {"address": ep.address, "username": ep.username, "password": ep.password}

    def published(self) -> dict[str, dict[str, str]]:
        return {name: self.credentials(name) for name in self.nodes}

    def inject_fault(self, node_name: str, spec: dict[str, Any]) -> dict[str, Any]:
        """Apply a fault to a node's BMC; ``spec["type"]`` is one of:

        * ``job-fails``: the next ``count`` (1) update jobs, of ``component``
          (``ConnectX-7``...; any when absent), fail with ``message`` (and
          ``messageId``) during ``phase`` ``apply`` (default) or
          ``download``; ``withErrors: true`` ends them CompletedWithErrors;
        * ``unresponsive``: the BMC stops answering, ``mode`` ``hang``
          (connections are accepted but nothing answers) or ``refuse``, for
          ``seconds`` simulated seconds or until cleared;
        * ``host-never-returns``: after its next reset the host stays down
          (``NodeHealth.never_returns``);
        * ``password-changed``: the BMC's password changes to ``password``
          (random when absent); published credentials then get 401;
        * ``blank-nic-version-in-id``: inventory ids of NICs carry blanks
          instead of the version, as iDRAC9 4.40 printed them;
        * ``no-graceful-restart``: ``ComputerSystem.Reset`` does not offer
          ``GracefulRestart``, as some iDRAC9 3.x/4.x releases did;
        * ``nic-needs-power-cycle``: NIC jobs applied by a warm reset end
          ``RebootPending`` ("Job completed, server reboot pending") and the
          NIC keeps its old firmware until the host is power cycled.
        """
        ep = self._endpoint(node_name)
        bmc = ep.bmc
        now = self.now()
        kind = spec.get("type")
        result: dict[str, Any] = {"node": node_name, "type": kind}
        if kind == "job-fails":
            plan = JobFailurePlan(
                message=str(spec.get("message") or JobFailurePlan.message),
                message_id=str(spec.get("messageId") or JobFailurePlan.message_id),
                phase="download" if spec.get("phase") == "download" else "apply",
                component=spec.get("component"),
                count=int(spec.get("count", 1)),
                with_errors=bool(spec.get("withErrors", False)),
            )
            bmc.add_failure_plan(plan)
        elif kind == "unresponsive":
            mode = spec.get("mode", "hang")
            if mode not in ("hang", "refuse"):
                raise ValueError("mode must be hang or refuse")
            seconds = spec.get("seconds")
            until = now + float(seconds) if seconds is not None else None
            bmc.set_unresponsive(mode, until=until)
            result["until"] = until
        elif kind == "host-never-returns":
            self._hosts.set_never_returns(node_name, True)
        elif kind == "password-changed":
            password = str(spec.get("password") or secrets.token_urlsafe(12))
            bmc.change_password(ep.username, password)
        elif kind in ("blank-nic-version-in-id", "no-graceful-restart", "nic-needs-power-cycle"):
            bmc.quirks.add(kind)
        else:
            raise ValueError(f"unknown BMC fault type {kind!r}")
        self.changed(bmc)
        return result

    def clear_faults(self, node_name: str) -> None:
        ep = self._endpoint(node_name)
        ep.bmc.clear_faults()
        ep.bmc.change_password(ep.username, self._original_passwords[node_name])
        self._hosts.set_never_returns(node_name, False)
        self.changed(ep.bmc)

    def describe(self) -> dict[str, Any]:
        now = self.now()
        described: dict[str, Any] = {}
        for name in self.nodes:
            ep = self._endpoints[name]
            bmc = ep.bmc
            described[name] = {
                "address": ep.address,
                "availability": bmc.availability(now),
                "powerState": bmc.power_state,
                "firmware": {slot.fqdd: slot.version for slot in bmc.slots},
                "jobs": {
                    job.job_id: {"name": job.name, "state": job.state, "message": job.message}
                    for job in bmc.jobs.values()
                },
                "sessions": len(bmc.sessions),
                "requests": bmc.requests_received,
                "updateRequests": bmc.update_requests_received,
                "writeRequests": dict(bmc.writes_received),
                "resets": list(bmc.resets_received),
            }
        return described

    def _endpoint(self, node_name: str) -> _Endpoint:
        try:
            return self._endpoints[node_name]
        except KeyError:
            raise KeyError(f"node {node_name!r} has no BMC") from None

    # -- BmcDirectory (used by the HTTP layer) --------------------------------------------------------------
    def bmc_at(self, host: str, port: int) -> Bmc | None:
        ep = self._by_socket.get((host, port))
        return ep.bmc if ep is not None else None

    def now(self) -> float:
        now: float = self._clock.now()
        return now

    def changed(self, bmc: Bmc) -> None:
        ep = self._endpoints[bmc.node_name]
        for effect in bmc.drain_effects():
            self._carry_out(ep, effect)
        if self._wake is not None:
            self._wake.set()

    def fetch_image(self, bmc: Bmc, job: Job, url: str, auth: tuple[str, str] | None) -> None:
        self._background.spawn(self._fetch(bmc, job, url, auth))

    async def hold(self, bmc: Bmc) -> None:
        while not self._stopping and bmc.availability(self.now()) == "hang":
            await asyncio.sleep(0.05)

    # -- controller ------------------------------------------------------------------------------------------
    async def run(self, twin: Any) -> None:
        await self.start()
        try:
            while True:
                await self.tick()
                await self._sleep_until_due()
        finally:
            await self.stop()

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._tick_lock = asyncio.Lock()
        self._runner = web.AppRunner(create_app(self), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS),
            # iDRAC's default for HTTPS shares: the server certificate is not verified.
            connector=aiohttp.TCPConnector(ssl=False),
        )
        await self.tick()

    async def stop(self) -> None:
        self._stopping = True
        await self._background.cancel_all()
        for ep in self._endpoints.values():
            self._close_parked(ep)
            if ep.sock is not None:
                ep.sock.close()
                ep.sock = None
            ep.site = None
            ep.listener = "closed"
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._remove_work_dir:
            shutil.rmtree(self._work_dir, ignore_errors=True)

    async def tick(self) -> None:
        """Run every BMC up to now and open or close listeners to match (also called by tests)."""
        if self._tick_lock is None or self._stopping:
            return
        async with self._tick_lock:
            now = self.now()
            for ep in self._endpoints.values():
                ep.bmc.advance(now)
                for effect in ep.bmc.drain_effects():
                    self._carry_out(ep, effect)
                await self._reconcile_listener(ep, ep.bmc.availability(now))

    async def _sleep_until_due(self) -> None:
        assert self._wake is not None
        now = self.now()
        due = [t for t in (ep.bmc.next_due() for ep in self._endpoints.values()) if t is not None]
        sim_seconds = min(60.0, max(0.0, min(due) - now)) if due else 60.0
        if self._wake.is_set():
            self._wake.clear()
            await asyncio.sleep(0)
            return
        sleeper = asyncio.ensure_future(self._clock.sleep(sim_seconds))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeper, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()
            woken.cancel()
        self._wake.clear()

    # -- effects ---------------------------------------------------------------------------------------------
    def _carry_out(self, ep: _Endpoint, effect: Effect) -> None:
        if isinstance(effect, HostReboot):
            self._hosts.reboot(ep.node_name, effect.duration)
        elif isinstance(effect, HostPowerOff):
            self._hosts.power_off(ep.node_name)
        elif isinstance(effect, NicFirmwareApplied):
            self._hosts.set_nic_firmware(ep.node_name, effect.host_devices, effect.version)
        elif isinstance(effect, BmcRestarted):
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            # Let the response that triggered the restart go out first.
            loop.call_later(0.2, self._drop_connections, ep)

    def _drop_connections(self, ep: _Endpoint) -> None:
        server = self._runner.server if self._runner is not None else None
        if server is None:
            return
        for handler in server.connections:
            transport = handler.transport
            if transport is None:
                continue
            sockname = transport.get_extra_info("sockname")
            if sockname and (sockname[0], sockname[1]) == (ep.host, ep.port):
                transport.abort()

    # -- listeners ----------------------------------------------------------------------------------------------
    async def _reconcile_listener(self, ep: _Endpoint, wanted: Availability) -> None:
        if ep.listener == wanted or self._runner is None:
            return
        if ep.site is not None:
            await ep.site.stop()  # closes the listening socket: new connections are refused
            ep.site = None
        self._close_parked(ep)
        try:
            if wanted == "up":
                sock = ep.sock if ep.sock is not None else _bind(ep.host, ep.port)
                ep.sock = None
                site = web.SockSite(self._runner, sock, ssl_context=ep.ssl_context)
                await site.start()
                ep.site = site
            elif wanted == "hang":
                # Accepted by the kernel into the backlog, never served: clients time out.
                ep.parked = ep.sock if ep.sock is not None else _bind(ep.host, ep.port)
                ep.sock = None
                self._drop_connections(ep)
            else:
                if ep.sock is not None:
                    ep.sock.close()
                    ep.sock = None
                self._drop_connections(ep)
        except OSError as exc:
            log.warning("BMC of %s: cannot listen on %s:%s: %s", ep.node_name, ep.host, ep.port, exc)
            return
        ep.listener = wanted

    @staticmethod
    def _close_parked(ep: _Endpoint) -> None:
        if ep.parked is not None:
            ep.parked.close()
            ep.parked = None

    # -- image transfer -------------------------------------------------------------------------------------------
    async def _fetch(self, bmc: Bmc, job: Job, url: str, auth: tuple[str, str] | None) -> None:
        assert self._http is not None
        error: tuple[str, str] | None = None
        content = b""
        try:
            basic = aiohttp.BasicAuth(*auth) if auth else None
            async with self._http.get(url, auth=basic) as response:
                if response.status != 200:
                    error = _transfer_failed(job, f"HTTP status {response.status} from {url}")
                else:
                    chunks: list[bytes] = []
                    size = 0
                    async for chunk in response.content.iter_chunked(256 * 1024):
                        size += len(chunk)
                        if size > MAX_FETCH_BYTES:
                            error = _transfer_failed(job, "the image is larger than the BMC accepts")
                            break
                        chunks.append(chunk)
                    content = b"".join(chunks)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            error = _transfer_failed(job, str(exc) or type(exc).__name__)
        image = None
        if error is None:
            try:
                image = parse_firmware_image(content)
            except ImageRejected:
                error = MSG_BAD_SIGNATURE
        bmc.package_arrived(job.job_id, image=image, error=error, now=self.now())
        self.changed(bmc)


def _transfer_failed(job: Job, reason: str) -> tuple[str, str]:
    return MSG_TRANSFER_FAILED[0], MSG_TRANSFER_FAILED[1].format(job.package_name, reason)


# -- admin routes ----------------------------------------------------------------------------------------------------


def admin_routes(fleet: BmcFleet) -> list[tuple[str, str, Any]]:
    async def list_bmcs(request: web.Request) -> web.Response:
        return web.json_response(fleet.describe())

    async def add_fault(request: web.Request) -> web.Response:
        node = request.match_info["node"]
        try:
            spec = await request.json()
        except ValueError:
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        if not isinstance(spec, dict):
            return web.json_response({"error": "the body must be a JSON object"}, status=400)
        try:
            result = fleet.inject_fault(node, spec)
        except KeyError as exc:
            return web.json_response({"error": str(exc.args[0])}, status=404)
        except (ValueError, TypeError) as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response(result, status=201)

    async def clear_faults(request: web.Request) -> web.Response:
        node = request.match_info["node"]
        try:
            fleet.clear_faults(node)
        except KeyError as exc:
            return web.json_response({"error": str(exc.args[0])}, status=404)
        return web.json_response({"node": node, "cleared": True})

    return [
        ("GET", "/admin/bmc", list_bmcs),
        ("POST", "/admin/bmc/{node}/fault", add_fault),
        ("DELETE", "/admin/bmc/{node}/fault", clear_faults),
    ]


def find_fleet(twin: Any) -> BmcFleet | None:
    """The twin's BMCs, for the fault injector and tests (it is one of the twin's controllers)."""
    return next((c for c in twin.controllers if isinstance(c, BmcFleet)), None)


# -- installing -------------------------------------------------------------------------------------------------------


def _candidate_nodes(twin: Any) -> list[str]:
    sim_nodes = getattr(twin.sim, "nodes", None)
    if sim_nodes:
        return [name for name, health in sim_nodes.items() if getattr(health, "gpu_count", 0) > 0]
    node_type = twin.registry.get("", "nodes")
    if node_type is None:
        return []
    control_plane = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
    return [
        node["metadata"]["name"]
        for node in twin.store.list(node_type)
        if not any(label in (node["metadata"].get("labels") or {}) for label in control_plane)
    ]


def _annotate_nodes(twin: Any, addresses: dict[str, str]) -> None:
    node_type = twin.registry.get("", "nodes")
    if node_type is None:
        return

    def annotate(node: dict[str, Any]) -> None:
        node.setdefault("metadata", {}).setdefault("annotations", {})[BMC_ADDRESS_ANNOTATION] = addresses[
            node["metadata"]["name"]
        ]

    for name in addresses:
        if twin.store.try_get(node_type, None, name) is not None:
            twin.store.mutate(node_type, None, name, annotate)

    def on_create(operation: str, rtype: Any, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        # Nodes registered later (a node that rejoins) get the annotation as well.
        if operation == "CREATE" and rtype.key == node_type.key and new.get("metadata", {}).get("name") in addresses:
            annotate(new)

    twin.store.add_admission(on_create)


def install(
    twin: Any,
    *,
    nodes: list[str] | None = None,
    ca: CaPair | None = None,
    tls: bool = True,
    max_bmcs: int = DEFAULT_MAX_BMCS,
    host_base: str | None = "127.1.0.1",
    port: int = 0,
    username: str = DEFAULT_USERNAME,
    password: str | None = None,
    timings: BmcTimings | None = None,
    work_dir: Path | None = None,
) -> BmcFleet:
    """Give nodes of ``twin`` a BMC each, bound now and served once the twin's controllers start.

    ``nodes`` names the nodes (default: the GPU nodes), at most ``max_bmcs``
    of them; ``password`` is shared by all BMCs when given, otherwise each
    gets a random one.  Returns the fleet, which is also appended to
    ``twin.controllers``.
    """
    chosen = select_bmc_nodes(nodes if nodes is not None else _candidate_nodes(twin), limit=max_bmcs)
    hosts = loopback_addresses(len(chosen), base=host_base)
    remove_work_dir = work_dir is None
    directory = Path(tempfile.mkdtemp(prefix="gpufleet-bmc-")) if work_dir is None else work_dir
    directory.mkdir(parents=True, exist_ok=True)
    if tls:
        if ca is None:
            ca = CaPair.generate()
        # Clients need the CA as a file (Ansible's ca_path) and the CLI publishes JSON: give both.
        ca_file = directory / "bmc-ca.crt"
        ca_file.write_bytes(ca.cert_pem)
        twin.published["bmc_ca_file"] = str(ca_file)
        twin.published["bmc_ca_cert_pem"] = ca.cert_pem.decode()
    host_control = HostControl(twin.sim)
    now = twin.clock.now()
    endpoints: list[_Endpoint] = []
    contexts: dict[str, ssl.SSLContext] = {}
    try:
        for node_name, host in zip(chosen, hosts, strict=True):
            context = None
            if tls:
                assert ca is not None
                context = contexts.get(host)
                if context is None:
                    context = contexts[host] = _server_context(ca, host, directory)
            sock = _bind(host, port)
            node_password = password or secrets.token_urlsafe(12)
            bmc = Bmc(
                node_name,
                nics=host_control.nic_specs(node_name),
                username=username,
                password=node_password,
                now=now,
                timings=timings,
            )
            endpoints.append(
                _Endpoint(
                    node_name=node_name,
                    host=host,
                    port=sock.getsockname()[1],
                    bmc=bmc,
                    username=username,
                    password=node_password,
                    ssl_context=context,
                    sock=sock,
                )
            )
    except BaseException:
        for ep in endpoints:
            if ep.sock is not None:
                ep.sock.close()
        if remove_work_dir:
            shutil.rmtree(directory, ignore_errors=True)
        raise
    fleet = BmcFleet(
        clock=twin.clock,
        host_control=host_control,
        endpoints=endpoints,
        work_dir=directory,
        remove_work_dir=remove_work_dir,
    )
    twin.controllers.append(fleet)
    twin.routes.extend(admin_routes(fleet))
    twin.published["bmcs"] = fleet.published()
    _annotate_nodes(twin, {ep.node_name: ep.address for ep in endpoints})
    return fleet


def _server_context(ca: CaPair, host: str, directory: Path) -> ssl.SSLContext:
    cert_pem, key_pem = issue_bmc_certificate(ca, host, common_name=f"idrac-{host}")
    cert_file = directory / f"bmc-{host}.crt"
    key_file = directory / f"bmc-{host}.key"
    cert_file.write_bytes(cert_pem)
    key_file.touch(mode=0o600)
    key_file.write_bytes(key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
    return context
