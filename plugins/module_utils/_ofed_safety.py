# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Whether a MOFED reload is safe on a node: the pure preflight (collection-internal).

Two hazards the Kubernetes API does not show by itself, so the nodes carry them as labels
(set by hand, or by NFD: a ``NodeFeatureRule`` on ``kernel.loadedmodule`` for the storage
modules, a local feature hook for the primary interface; docs/network_operator.md):

- The node's primary interface (the one with its InternalIP and default route) is a
  ConnectX port: the driver container's ``openibd restart`` takes every mlx5 netdev down,
  the primary one may not come back (DHCP, bonds), and the node goes NotReady until a
  reboot (Mellanox/network-operator issues 2176, 2258, 1515).  Neither the Node object
  nor OVN-Kubernetes' annotations (``k8s.ovn.org/node-primary-ifaddr`` holds an address,
  ``k8s.ovn.org/l3-gateway-config`` the ``br-ex`` bridge) name the PCI vendor behind it.
- NVMe-oF / NFS-RDMA storage modules (``ib_isert nvme_rdma nvmet_rdma rpcrdma xprtrdma
  ib_srpt``) are loaded: the DOCA driver container refuses to reload unless its env has
  ``UNLOAD_STORAGE_MODULES=true`` (Mellanox/doca-driver-build entrypoint, PR 79; Network
  Operator docs "DOCA-OFED Driver Container"; network-operator issue 1084), so the new
  pod crash-loops and the node stays without its RDMA network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import (
    label_selector_matches,
    parse_label_selector,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import node_name

# Value: the primary interface's name (``ens1f0np0``, ``bond0``); present = it is a ConnectX (mlx5) port.
PRIMARY_INTERFACE_LABEL = "gpufleet.io/primary-interface-mlx5"
# Nodes with NVMe-oF / NFS-RDMA storage modules loaded.
STORAGE_MODULES_SELECTOR = "gpufleet.io/rdma-storage-modules=true"
UNLOAD_STORAGE_MODULES = "UNLOAD_STORAGE_MODULES"
STORAGE_FIX = (
    'set spec.ofedDriver.env to include {name: UNLOAD_STORAGE_MODULES, value: "true"} in the NicClusterPolicy '
    "(kubectl patch nicclusterpolicy <name> --type json -p "
    '\'[{"op": "add", "path": "/spec/ofedDriver/env/-", "value": '
    '{"name": "UNLOAD_STORAGE_MODULES", "value": "true"}}]\'; '
    'use "path": "/spec/ofedDriver/env" with a list when env is absent), '
    "or pass allow_storage_modules_reload=true"
)


@dataclass(frozen=True)
class SafetyOptions:
    """Where the hazards are read from, and which ones the user accepts."""

    primary_interface_label: str = PRIMARY_INTERFACE_LABEL
    storage_modules_selector: str = STORAGE_MODULES_SELECTOR
    allow_primary_interface_reload: bool = False
    allow_storage_modules_reload: bool = False


@dataclass(frozen=True)
class SafetyFinding:
    """One node a reload would hurt: which hazard, and what the message says."""

    node: str
    hazard: str  # "primary-interface" or "storage-modules"
    detail: str
    allowed: bool

    def as_dict(self) -> Dict[str, Any]:
        return {"node": self.node, "hazard": self.hazard, "detail": self.detail, "allowed": self.allowed}


def unloads_storage_modules(policy: Mapping[str, Any]) -> bool:
    """The NicClusterPolicy's ``spec.ofedDriver.env`` sets ``UNLOAD_STORAGE_MODULES`` to true."""
    env = ((policy.get("spec") or {}).get("ofedDriver") or {}).get("env") or []
    for entry in env:
        if isinstance(entry, Mapping) and entry.get("name") == UNLOAD_STORAGE_MODULES:
            return str(entry.get("value", "")).strip().lower() == "true"
    return False


def reload_findings(
    *, nodes: Sequence[Mapping[str, Any]], targets: Sequence[str], policy: Mapping[str, Any], options: SafetyOptions
) -> List[SafetyFinding]:
    """The hazards on the nodes the rollout reloads, in target order."""
    by_name = {node_name(node): node for node in nodes}
    unloads = unloads_storage_modules(policy)
    findings: List[SafetyFinding] = []
    for name in targets:
        labels = (by_name.get(name, {}).get("metadata") or {}).get("labels") or {}
        interface = labels.get(options.primary_interface_label) if options.primary_interface_label else None
        if interface is not None:
            findings.append(
                SafetyFinding(
                    node=name,
                    hazard="primary-interface",
                    detail=f"primary interface {interface or '(unnamed)'} is a ConnectX port the MOFED reload "
                    "takes down: the node may go NotReady until rebooted",
                    allowed=options.allow_primary_interface_reload,
                )
            )
        storage = bool(options.storage_modules_selector) and label_selector_matches(
            options.storage_modules_selector, labels
        )
        if storage and not unloads:
            findings.append(
                SafetyFinding(
                    node=name,
                    hazard="storage-modules",
                    detail="NVMe-oF/NFS-RDMA storage modules are loaded and the NicClusterPolicy's "
                    "spec.ofedDriver.env lacks UNLOAD_STORAGE_MODULES=true: the new MOFED pod would refuse to "
                    "load and crash-loop",
                    allowed=options.allow_storage_modules_reload,
                )
            )
    return findings


def refusal(findings: Sequence[SafetyFinding]) -> str:
    """The message that refuses the rollout (empty when every finding is allowed)."""
    refused = [finding for finding in findings if not finding.allowed]
    if not refused:
        return ""
    lines = [f"node {finding.node}: {finding.detail}" for finding in refused]
    fixes: List[str] = []
    if any(finding.hazard == "primary-interface" for finding in refused):
        fixes.append(
            "leave those nodes out (node_selector or nodes), move the primary network off the ConnectX port, "
            "or pass allow_primary_interface_reload=true with console access at hand"
        )
    if any(finding.hazard == "storage-modules" for finding in refused):
        fixes.append(STORAGE_FIX)
    return "Refusing the MOFED reload, nothing changed. " + "; ".join(lines) + ". Fix: " + "; ".join(fixes)


def check_reload_safety(
    *, nodes: Sequence[Mapping[str, Any]], targets: Sequence[str], policy: Mapping[str, Any], options: SafetyOptions
) -> Tuple[List[Dict[str, Any]], str]:
    """The findings (for the result) and the refusal (empty: go on)."""
    findings = reload_findings(nodes=nodes, targets=targets, policy=policy, options=options)
    return [finding.as_dict() for finding in findings], refusal(findings)


def validate_safety_options(options: SafetyOptions) -> None:
    """The selector parses; the label key is a plain key (no ``=``)."""
    parse_label_selector(options.storage_modules_selector)
    if "=" in options.primary_interface_label or " " in options.primary_interface_label:
        raise InvalidInputError(f"primary_interface_label must be a label key, not {options.primary_interface_label!r}")
