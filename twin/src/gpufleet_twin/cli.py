"""Command line: ``python -m gpufleet_twin serve ...`` starts a twin and serves it over HTTPS.

Once serving it writes a kubeconfig (CA data embedded, bearer token, server
URL with the real port) that kubectl and the ``kubernetes`` client accept as
is, a companion ``<kubeconfig>.twin.json`` (API URL, token, admin URL, CA
file, pid and the facts the simulation published), prints one ready line to
stdout and nothing more there (callers may stop reading the pipe), and stops
cleanly with exit code 0 on SIGINT or SIGTERM.  Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import logging
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from .apiserver.cluster import Twin
from .apiserver.server import ApiServer, create_twin, install_crds, load_crd_manifests, own_crds_directory
from .apiserver.serviceaccount_tokens import StaticTokens
from .harness.build import install_garbage_collector, install_request_recorder
from .harness.build import populate as populate_simulation
from .machinery import tls
from .redfish import service as bmc_service

log = logging.getLogger("gpufleet_twin")

HOST = "127.0.0.1"
# Namespaces of the cluster served while the simulation package has no build module yet.
BARE_CLUSTER_NAMESPACES = ("default", "kube-system", "gpu-operator", "nvidia-network-operator")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpufleet-twin", description=__doc__.split("\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve a simulated GPU cluster over the Kubernetes API")
    serve.add_argument("--nodes", type=int, default=3, help="GPU worker nodes to simulate (default 3)")
    serve.add_argument("--profile", choices=("openshift", "kubernetes"), default="openshift")
    serve.add_argument("--scenario", type=Path, help="scenario file (faults, timings) for the simulation")
    serve.add_argument("--from-snapshot", type=Path, dest="from_snapshot", help="seed from a cluster snapshot folder")
    serve.add_argument("--crds", type=Path, help="folder of CRD manifests replacing the twin's own minimal CRDs")
    serve.add_argument("--time-scale", type=float, default=1.0, dest="time_scale", help="simulated s per real s")
    serve.add_argument("--kubeconfig", type=Path, required=True, help="where to write the kubeconfig")
    serve.add_argument("--port", type=int, default=0, help="HTTPS port on 127.0.0.1 (0: any free port)")
    serve.add_argument("--state-dir", type=Path, dest="state_dir", help="folder for TLS files and simulation state")
    serve.add_argument(
        "--bare",
        action="store_true",
        help="serve the API only, without the simulation (namespaces and the garbage collector only; "
        "for API tests and debugging)",
    )
    serve.add_argument(
        "--bmcs",
        type=int,
        default=bmc_service.DEFAULT_MAX_BMCS,
        help="GPU nodes that get an iDRAC-like Redfish BMC, first by name (default %(default)s)",
    )
    serve.add_argument(
        "--distributed-training",
        action="store_true",
        dest="distributed_training",
        help="also seed the StatefulSet ml-training/dist-train and its PDB (the scenario key distributed_training)",
    )
    serve.add_argument(
        "--argocd",
        action="store_true",
        help="run the Argo CD application controller (Applications on local git repositories; operators/argocd.py)",
    )
    serve.add_argument(
        "--argocd-poll",
        type=float,
        dest="argocd_poll",
        help="simulated seconds between two polls of an Application's repository (default 180, Argo CD's)",
    )
    serve.add_argument(
        "--maintenance-operator",
        action="store_true",
        dest="maintenance_operator",
        help="run the NVIDIA Maintenance Operator (NodeMaintenance; operators/maintenance_operator.py)",
    )
    serve.add_argument(
        "--token-auth-file",
        type=Path,
        dest="token_auth_file",
        help="users' bearer tokens, one 'token,user,uid,\"group1,group2\"' CSV line each (kube-apiserver's format)",
    )
    serve.add_argument("--log-level", default="INFO", dest="log_level")
    return parser


def main(argv: list[str] | None = None) -> int:
    options = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(options.log_level).upper(), logging.INFO),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if options.time_scale <= 0:
        print("--time-scale must be positive", file=sys.stderr)
        return 2
    if options.crds is not None and not options.crds.is_dir():
        print(f"--crds {options.crds}: not a folder", file=sys.stderr)
        return 2
    options.user_tokens = StaticTokens()
    if options.token_auth_file is not None:
        try:
            options.user_tokens.load_csv(options.token_auth_file.read_text(), source=str(options.token_auth_file))
        except (OSError, ValueError) as problem:
            print(f"--token-auth-file: {problem}", file=sys.stderr)
            return 2
    return asyncio.run(serve(options))


async def serve(options: argparse.Namespace) -> int:
    state_dir: Path = options.state_dir or Path(tempfile.mkdtemp(prefix="gpufleet-twin-"))
    state_dir.mkdir(parents=True, exist_ok=True)
    twin = create_twin(time_scale=options.time_scale)
    twin.user_tokens = options.user_tokens
    install_crds(twin, load_crd_manifests(own_crds_directory()))
    if options.crds is not None:
        names = install_crds(twin, load_crd_manifests(options.crds))
        log.info("loaded %d CRDs from %s", len(names), options.crds)
    material = tls.generate_tls_material()
    tls_files = tls.write_tls_files(material, state_dir / "tls")
    twin.ca_cert_pem = material.ca_cert_pem
    if options.bare:
        seed_bare_cluster(twin)
        install_garbage_collector(twin)
        install_request_recorder(twin)
    else:
        populate_simulation(twin, _simulation_options(options))
        bmc_service.install(
            twin,
            ca=bmc_service.CaPair(cert_pem=material.ca_cert_pem, key_pem=material.ca_key_pem),
            max_bmcs=options.bmcs,
            work_dir=state_dir / "bmc",
        )
    # The seeded cluster lives as long as the server: collect what building it
    # left behind once, before serving, and keep the collector from rescanning
    # the rest (a full pass over a 10,000-node cluster takes seconds, and it
    # would otherwise land in the middle of some request).
    gc.collect()
    gc.freeze()
    api = ApiServer(twin)
    runner = web.AppRunner(api.make_app(), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, HOST, options.port, ssl_context=tls.server_ssl_context(tls_files))
    await site.start()
    port = _bound_port(runner)
    api.server_address = f"{HOST}:{port}"
    api_url = f"https://{HOST}:{port}"

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    twin.start_controllers()
    kubeconfig = write_kubeconfig(
        options.kubeconfig, api_url=api_url, token=twin.token, ca_pem=tls_files.ca_cert.read_bytes()
    )
    companion = write_companion(
        options.kubeconfig,
        {
            "api": api_url,
            "token": twin.token,
            "admin": f"{api_url}/admin",
            "ca_file": str(tls_files.ca_cert),
            "kubeconfig": str(kubeconfig),
            "state_dir": str(state_dir),
            "pid": os.getpid(),
            "profile": options.profile,
            "time_scale": options.time_scale,
            "published": twin.published,
        },
    )
    print(
        f"gpufleet-twin ready api={api_url} kubeconfig={kubeconfig} companion={companion} pid={os.getpid()}", flush=True
    )
    # Callers read the ready line and may stop reading the pipe: anything printed
    # later (by any component) goes to stderr, so that it can never block the twin.
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    log.info("serving %s (kubeconfig %s)", api_url, kubeconfig)
    try:
        await stop.wait()
    finally:
        log.info("stopping")
        await twin.stop_controllers()
        await runner.cleanup()
    return 0


def seed_bare_cluster(twin: Twin) -> None:
    """The namespaces of an otherwise empty cluster (``--bare``)."""
    namespace_type = twin.registry.get("", "namespaces")
    assert namespace_type is not None
    for name in BARE_CLUSTER_NAMESPACES:
        if twin.store.try_get(namespace_type, None, name) is None:
            twin.store.create(namespace_type, {"metadata": {"name": name}})


def _simulation_options(options: argparse.Namespace) -> dict[str, Any]:
    return {
        "nodes": options.nodes,
        "profile": options.profile,
        "scenario": None if options.scenario is None else str(options.scenario),
        "from_snapshot": None if options.from_snapshot is None else str(options.from_snapshot),
        "crds": None if options.crds is None else str(options.crds),
        "distributed_training": options.distributed_training,
        "argocd": options.argocd,
        "argocd_poll": options.argocd_poll,
        "maintenance_operator": options.maintenance_operator,
    }


def _bound_port(runner: web.AppRunner) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    raise RuntimeError("the server did not bind a TCP port")


def write_kubeconfig(path: Path, *, api_url: str, token: str, ca_pem: bytes) -> Path:
    """A kubeconfig for the twin (mode 0600: it holds the token)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpufleet-twin",
                "cluster": {"server": api_url, "certificate-authority-data": base64.b64encode(ca_pem).decode()},
            }
        ],
        "users": [{"name": "gpufleet-twin-admin", "user": {"token": token}}],
        "contexts": [
            {
                "name": "gpufleet-twin",
                "context": {"cluster": "gpufleet-twin", "user": "gpufleet-twin-admin", "namespace": "default"},
            }
        ],
        "current-context": "gpufleet-twin",
        "preferences": {},
    }
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, yaml.safe_dump(config, sort_keys=False))
    return path


def companion_path(kubeconfig: Path) -> Path:
    return kubeconfig.resolve().with_name(kubeconfig.name + ".twin.json")


def write_companion(kubeconfig: Path, facts: dict[str, Any]) -> Path:
    path = companion_path(kubeconfig)
    _write_private(path, json.dumps(facts, indent=2, sort_keys=True, default=str) + "\n")
    return path


def _write_private(path: Path, text: str) -> None:
    # Written to a temporary name and renamed, so a reader never sees half a file.
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    temporary.replace(path)
