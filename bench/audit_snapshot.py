"""A settled N-node cluster for the drift-audit bench, built once as a ``--from-snapshot`` folder.

Starting a 10,000-node twin from scratch takes its simulated operators many
minutes to create and start ~90,000 operand pods.  The audit only reads, so
the bench measures a cluster that is already settled instead:

1. a small twin (``template_nodes`` GPU workers) runs until every DaemonSet
   has a Ready pod on every node it targets;
2. everything it serves is dumped the way ``kubectl get <kind> -A -o json``
   would (List objects, one file per kind);
3. the workers are replicated up to N: worker ``i`` is a copy of template
   worker ``(i - 1) % template_nodes + 1`` with its own name, hostname
   label, rack label, InternalIP, pod CIDR, boot/machine IDs, its own copy of
   every DaemonSet pod the template node runs (new pod names, ``spec.nodeName``
   and the DaemonSet's ``matchFields metadata.name`` pin rewritten) and its
   own SriovNetworkNodeState.  Workload pods stay on the template workers, as
   the twin only seeds workloads on its first 256 workers anyway.

The twin then loads the folder (``--from-snapshot``): objects the operators
created are adopted as they are, the kubelet adopts the Running pods, and the
controllers recompute DaemonSet and pool status.  The folder is cached by
``(N, template_nodes)``; pass ``rebuild=True`` to make it again.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import random
import re
import shutil
import sys
import time
from typing import Any

from gpufleet_twin.process import start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".build" / "collections"))

from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (  # noqa: E402
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (  # noqa: E402
    DAEMONSETS,
)

Obj = dict[str, Any]

# What a `kubectl get ... -A -o json` dump of such a cluster holds: every kind
# the twin serves except Events, Leases and the review kinds (not listable).
DUMPED_PATHS = (
    "/api/v1/namespaces",
    "/api/v1/nodes",
    "/api/v1/pods",
    "/api/v1/configmaps",
    "/api/v1/secrets",
    "/api/v1/serviceaccounts",
    "/api/v1/services",
    "/apis/apps/v1/controllerrevisions",
    "/apis/apps/v1/daemonsets",
    "/apis/apps/v1/deployments",
    "/apis/apps/v1/replicasets",
    "/apis/batch/v1/jobs",
    "/apis/policy/v1/poddisruptionbudgets",
    "/apis/config.openshift.io/v1/clusterversions",
    "/apis/machineconfiguration.openshift.io/v1/machineconfigpools",
    "/apis/mellanox.com/v1alpha1/nicclusterpolicies",
    "/apis/nvidia.com/v1/clusterpolicies",
    "/apis/nvidia.com/v1alpha1/nvidiadrivers",
    "/apis/operators.coreos.com/v1alpha1/clusterserviceversions",
    "/apis/sriovnetwork.openshift.io/v1/sriovnetworknodepolicies",
    "/apis/sriovnetwork.openshift.io/v1/sriovnetworknodestates",
    "/apis/sriovnetwork.openshift.io/v1/sriovoperatorconfigs",
)
WORKER = re.compile(r"^gpu-worker-(\d+)$")
SNAPSHOT_FORMAT = 1


def default_directory(nodes: int, template_nodes: int) -> pathlib.Path:
    return pathlib.Path("/tmp") / "gpufleet-bench" / f"audit-snapshot-{nodes}-from-{template_nodes}"


def ensure_snapshot(
    nodes: int,
    *,
    template_nodes: int = 16,
    directory: pathlib.Path | None = None,
    rebuild: bool = False,
    settle_timeout: float = 300.0,
) -> pathlib.Path:
    """The snapshot folder for ``nodes`` workers, built unless a complete one is cached."""
    directory = directory or default_directory(nodes, template_nodes)
    marker = directory / "snapshot-info.txt"
    expected = f"format={SNAPSHOT_FORMAT} nodes={nodes} template_nodes={template_nodes}\n"
    if not rebuild and marker.is_file() and marker.read_text() == expected:
        return directory
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    template = dump_settled_cluster(min(template_nodes, nodes), settle_timeout=settle_timeout)
    for path, items in scale_cluster(template, nodes).items():
        name = path.strip("/").replace("/", "_") + ".json"
        kind = _list_kind(items)
        with open(directory / name, "w", encoding="utf-8") as handle:
            json.dump({"apiVersion": "v1", "kind": kind, "items": items}, handle, separators=(",", ":"))
    # Written last, so an interrupted build is never taken for a complete one.
    marker.write_text(expected)
    return directory


def dump_settled_cluster(template_nodes: int, *, settle_timeout: float) -> dict[str, list[Obj]]:
    """Every object of a small twin once all its DaemonSets are Ready everywhere."""
    twin = start_twin(nodes=template_nodes, profile="openshift", time_scale=3600, startup_timeout=120)
    try:
        api = KubeApi.from_params({"kubeconfig": str(twin.kubeconfig)})
        wait_settled(api, settle_timeout=settle_timeout)
        dump: dict[str, list[Obj]] = {}
        for path in DUMPED_PATHS:
            items: list[Obj] = []
            query: dict[str, Any] = {"limit": 500}
            for _page in range(10_000):
                page = api.request("GET", path, query=query)
                # As kubectl prints a list: every item with its kind and apiVersion.
                kind = str(page.get("kind", "")).removesuffix("List")
                for item in page.get("items") or []:
                    item.setdefault("kind", kind)
                    item.setdefault("apiVersion", page.get("apiVersion"))
                    items.append(item)
                query["continue"] = (page.get("metadata") or {}).get("continue")
                if not query["continue"]:
                    break
            dump[path] = items
        return dump
    finally:
        twin.stop()


def wait_settled(api: KubeApi, *, settle_timeout: float) -> None:
    deadline = time.monotonic() + settle_timeout
    while time.monotonic() < deadline:
        daemonsets = api.list(DAEMONSETS)
        if daemonsets and all(_daemonset_settled(ds) for ds in daemonsets):
            return
        time.sleep(1)
    raise RuntimeError(f"the template twin did not settle within {settle_timeout:.0f}s")


def _daemonset_settled(daemonset: Obj) -> bool:
    status = daemonset.get("status") or {}
    desired = status.get("desiredNumberScheduled") or 0
    return desired > 0 and status.get("numberReady") == desired and status.get("updatedNumberScheduled") == desired


def scale_cluster(dump: dict[str, list[Obj]], nodes: int) -> dict[str, list[Obj]]:
    """The dumped cluster with its workers replicated to ``nodes`` (pure: no I/O)."""
    workers = sorted(
        (node for node in dump["/api/v1/nodes"] if WORKER.match(node["metadata"]["name"])),
        key=lambda node: int(WORKER.match(node["metadata"]["name"]).group(1)),  # type: ignore[union-attr]
    )
    if not workers:
        raise ValueError("the template cluster has no gpu-worker nodes")
    width = max(3, len(str(nodes)))
    renamed = {node["metadata"]["name"]: f"gpu-worker-{index:0{width}d}" for index, node in enumerate(workers, 1)}
    # The template cluster under its new worker names (exact JSON string values only).
    scaled = {path: [_rename(obj, renamed) for obj in items] for path, items in dump.items()}
    template_nodes = [node for node in scaled["/api/v1/nodes"] if node["metadata"]["name"] in renamed.values()]
    template_nodes.sort(key=lambda node: node["metadata"]["name"])
    daemon_pods: dict[str, list[Obj]] = {}
    for pod in scaled["/api/v1/pods"]:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name and _owner_kind(pod) == "DaemonSet":
            daemon_pods.setdefault(node_name, []).append(pod)
    node_state_path = "/apis/sriovnetwork.openshift.io/v1/sriovnetworknodestates"
    node_states = {state["metadata"]["name"]: state for state in scaled[node_state_path]}
    rng = random.Random(nodes)
    pod_names = {pod["metadata"]["name"] for pod in scaled["/api/v1/pods"]}
    for index in range(len(workers) + 1, nodes + 1):
        template = template_nodes[(index - 1) % len(template_nodes)]
        old_name = template["metadata"]["name"]
        new_name = f"gpu-worker-{index:0{width}d}"
        old_ip, new_ip = _internal_ip(template), f"10.{1 + index // 65536}.{(index // 256) % 256}.{index % 256}"
        old_cidr = (template.get("spec") or {}).get("podCIDR", "")
        new_cidr = f"10.{128 + index // 128}.{(index % 128) * 2}.0/23"
        replacements = {f'"{old_name}"': f'"{new_name}"', f'"{old_ip}"': f'"{new_ip}"'}
        if old_cidr:
            replacements[f'"{old_cidr}"'] = f'"{new_cidr}"'
            # Pod IPs inside the node's pod CIDR move with it.
            replacements['"' + old_cidr.rsplit(".", 2)[0] + "."] = '"' + new_cidr.rsplit(".", 2)[0] + "."
        node = _replaced(template, replacements)
        _identify_node(node, index=index)
        scaled["/api/v1/nodes"].append(node)
        for pod in daemon_pods.get(old_name, ()):
            copy = _replaced(pod, replacements)
            copy["metadata"]["name"] = _unique_pod_name(copy["metadata"].get("generateName") or "pod-", pod_names, rng)
            scaled["/api/v1/pods"].append(copy)
        state = node_states.get(old_name)
        if state is not None:
            scaled[node_state_path].append(_replaced(state, replacements))
    for daemonset in scaled["/apis/apps/v1/daemonsets"]:
        _scale_status(daemonset, len(workers), nodes)
    return scaled


def _rename(obj: Obj, renamed: dict[str, str]) -> Obj:
    return _replaced(obj, {f'"{old}"': f'"{new}"' for old, new in renamed.items()})


def _replaced(obj: Obj, replacements: dict[str, str]) -> Obj:
    text = json.dumps(obj, separators=(",", ":"))
    for old, new in replacements.items():
        text = text.replace(old, new)
    return json.loads(text)


def _owner_kind(obj: Obj) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or ():
        if ref.get("controller"):
            return ref.get("kind")
    return None


def _internal_ip(node: Obj) -> str:
    for address in (node.get("status") or {}).get("addresses") or ():
        if address.get("type") == "InternalIP":
            return str(address["address"])
    return "0.0.0.0"


def _identify_node(node: Obj, *, index: int) -> None:
    """What differs between two otherwise identical machines: rack, IDs, no BMC published for copies."""
    meta = node["metadata"]
    meta["labels"]["gpufleet.io/rack"] = f"rack-{(index - 1) // 8 + 1}"
    (meta.get("annotations") or {}).pop("gpufleet.io/bmc-address", None)
    info = (node.get("status") or {}).get("nodeInfo") or {}
    digest = hashlib.sha256(meta["name"].encode()).hexdigest()
    if "bootID" in info:
        info["bootID"] = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
    if "machineID" in info:
        info["machineID"] = digest[32:64]
    if "systemUUID" in info:
        info["systemUUID"] = f"{digest[32:40]}-{digest[40:44]}-{digest[44:48]}-{digest[48:52]}-{digest[52:64]}"


def _unique_pod_name(prefix: str, taken: set[str], rng: random.Random) -> str:
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # the alphabet of apimachinery's rand.String
    for _attempt in range(1000):
        name = prefix + "".join(rng.choice(alphabet) for _char in range(5))
        if name not in taken:
            taken.add(name)
            return name
    raise RuntimeError(f"no free pod name with prefix {prefix}")


def _scale_status(daemonset: Obj, template_count: int, nodes: int) -> None:
    status = daemonset.get("status") or {}
    for key in (
        "currentNumberScheduled",
        "desiredNumberScheduled",
        "numberAvailable",
        "numberReady",
        "updatedNumberScheduled",
    ):
        if status.get(key) == template_count:
            status[key] = nodes


def _list_kind(items: list[Obj]) -> str:
    return f"{items[0]['kind']}List" if items and items[0].get("kind") else "List"
