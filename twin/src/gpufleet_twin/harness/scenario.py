"""Scenario files: what cluster to build and which faults to inject when (YAML).

```yaml
nodes: 16                      # GPU workers (control-plane nodes come on top)
profile: openshift             # or kubernetes
gpu:
  product: NVIDIA-H100-80GB-HBM3
  count: 8
  memory_mib: 81559            # default: the product's
os:
  kernel: 5.14.0-427.40.1.el9_4.x86_64
  os_image: Red Hat Enterprise Linux CoreOS 416.94.202410211619-0
  ostree_version: 416.94.202410211619-0
driver_version: 550.127.05     # driver loaded on the workers at start
dcgm_version: 3.3.8            # 3.x or 4.x diag table format
mofed_version: 24.07-0.6.1.0
ib_ports: 8
workloads: true                # seed training Deployments, PDBs, Jobs
distributed_training: true     # also the StatefulSet ml-training/dist-train and its PDB
argocd: true                   # run the Argo CD application controller (or {poll_seconds: 30}), operators/argocd.py
maintenance_operator: true     # run the NVIDIA Maintenance Operator (or the MaintenanceOperatorConfig spec:
                               # {maxParallelOperations: 2, maxUnavailable: 1}), operators/maintenance_operator.py
cordoned: [gpu-worker-003]     # cordoned before the upgrade began
olm_cluster_policy: true       # the ClusterPolicy OLM creates from the bundle's alm-examples: no driver or
                               # driver manager image, the operator's release decides both (default false)
event_ttl_seconds: 86400       # how long Events last, in simulated seconds (kube-apiserver --event-ttl, default 1 h)
driver_builds:                 # versions that build only for these kernels
  "565.57.01": [5.14.0-427.40.1.el9_4.x86_64]
faults:
  - type: node_never_returns
    node: gpu-worker-002
  - type: api_errors
    at: 120                    # simulated seconds after start (default 0)
    code: 503
    count: 5
    verb: patch
    resource: nodes
```

Unknown keys are errors (a typo should not silently run another scenario).
The fault types and their fields are listed in ``harness/faults.py`` and the
twin's README.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..kube.events import DEFAULT_EVENT_TTL_SECONDS
from .faults import validate_fault
from .seed import PROFILES, SeedSpec

Obj = dict[str, Any]

_TOP_LEVEL = {
    "nodes",
    "profile",
    "gpu",
    "os",
    "driver_version",
    "dcgm_version",
    "mofed_version",
    "ib_ports",
    "ib_firmware",
    "workloads",
    "distributed_training",
    "argocd",
    "maintenance_operator",
    "cordoned",
    "olm_cluster_policy",
    "event_ttl_seconds",
    "driver_builds",
    "faults",
    "description",
}
_GPU_KEYS = {"product", "count", "memory_mib"}
_OS_KEYS = {"kernel", "os_image", "ostree_version"}


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the problem."""


@dataclass
class Scenario:
    nodes: int | None = None
    profile: str | None = None
    gpu: Obj = field(default_factory=dict)
    os: Obj = field(default_factory=dict)
    driver_version: str | None = None
    dcgm_version: str | None = None
    mofed_version: str | None = None
    ib_ports: int | None = None
    ib_firmware: str | None = None
    workloads: bool = True
    distributed_training: bool = False
    # The Argo CD simulation's options ({} when enabled with ``argocd: true``), None when off.
    argocd: Obj | None = None
    # The Maintenance Operator's MaintenanceOperatorConfig spec ({} with ``maintenance_operator: true``), None when off.
    maintenance_operator: Obj | None = None
    cordoned: list[str] = field(default_factory=list)
    olm_cluster_policy: bool = False
    # kube-apiserver's --event-ttl (default one hour): at 600 times the wall clock that is 6 real seconds.
    event_ttl_seconds: float = DEFAULT_EVENT_TTL_SECONDS
    driver_builds: dict[str, list[str]] = field(default_factory=dict)
    faults: list[Obj] = field(default_factory=list)
    description: str = ""

    def seed_spec(self, *, nodes: int, profile: str) -> SeedSpec:
        overrides: Obj = {
            "nodes": nodes,
            "profile": profile,
            "workloads": self.workloads,
            "distributed_training": self.distributed_training,
            "cordoned": tuple(self.cordoned),
        }
        optional = {
            "gpu_product": self.gpu.get("product"),
            "gpu_count": self.gpu.get("count"),
            "gpu_memory_mib": self.gpu.get("memory_mib"),
            "kernel": self.os.get("kernel"),
            "os_image": self.os.get("os_image"),
            "ostree_version": self.os.get("ostree_version"),
            "driver_version": self.driver_version,
            "dcgm_version": self.dcgm_version,
            "mofed_version": self.mofed_version,
            "ib_ports": self.ib_ports,
            "ib_firmware": self.ib_firmware,
        }
        overrides.update({k: v for k, v in optional.items() if v is not None})
        return SeedSpec(**overrides)


def parse_scenario(data: Any, *, source: str = "scenario") -> Scenario:
    if data is None:
        return Scenario()
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    unknown = sorted(set(data) - _TOP_LEVEL)
    if unknown:
        raise ScenarioError(f"{source}: unknown keys {unknown}; known: {sorted(_TOP_LEVEL)}")
    for key, allowed in (("gpu", _GPU_KEYS), ("os", _OS_KEYS)):
        section = data.get(key) or {}
        if not isinstance(section, dict) or set(section) - allowed:
            raise ScenarioError(f"{source}: '{key}' takes only {sorted(allowed)}")
    profile = data.get("profile")
    if profile is not None and profile not in PROFILES:
        raise ScenarioError(f"{source}: profile must be one of {sorted(PROFILES)}, got {profile!r}")
    nodes = data.get("nodes")
    if nodes is not None and (not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 0):
        raise ScenarioError(f"{source}: nodes must be a non-negative integer, got {nodes!r}")
    faults = data.get("faults") or []
    if not isinstance(faults, list):
        raise ScenarioError(f"{source}: faults must be a list")
    for position, fault in enumerate(faults, start=1):
        try:
            validate_fault(fault)
        except (ValueError, TypeError) as exc:
            raise ScenarioError(f"{source}: fault #{position}: {exc}") from exc
    builds = data.get("driver_builds") or {}
    if not isinstance(builds, dict) or not all(isinstance(v, list) for v in builds.values()):
        raise ScenarioError(f"{source}: driver_builds maps a driver version to a list of kernels")
    argocd = data.get("argocd")
    if argocd is not None and not isinstance(argocd, (bool, dict)):
        raise ScenarioError(f"{source}: argocd is true, false or a mapping (poll_seconds)")
    if isinstance(argocd, dict) and set(argocd) - {"poll_seconds"}:
        raise ScenarioError(f"{source}: argocd: unknown keys {sorted(set(argocd) - {'poll_seconds'})}")
    maintenance = data.get("maintenance_operator")
    if maintenance is not None and not isinstance(maintenance, (bool, dict)):
        raise ScenarioError(f"{source}: maintenance_operator is true, false or a MaintenanceOperatorConfig spec")
    config_keys = {"maxParallelOperations", "maxUnavailable", "maxNodeMaintenanceTimeSeconds"}
    if isinstance(maintenance, dict) and set(maintenance) - config_keys:
        raise ScenarioError(f"{source}: maintenance_operator: unknown keys {sorted(set(maintenance) - config_keys)}")
    cordoned = data.get("cordoned") or []
    if not isinstance(cordoned, list):
        raise ScenarioError(f"{source}: cordoned must be a list of node names")
    olm_policy = data.get("olm_cluster_policy", False)
    if not isinstance(olm_policy, bool):
        raise ScenarioError(f"{source}: olm_cluster_policy is true or false, got {olm_policy!r}")
    ttl = data.get("event_ttl_seconds", DEFAULT_EVENT_TTL_SECONDS)
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or ttl <= 0:
        raise ScenarioError(f"{source}: event_ttl_seconds must be a positive number of seconds, got {ttl!r}")
    return Scenario(
        nodes=nodes,
        profile=profile,
        gpu=dict(data.get("gpu") or {}),
        os=dict(data.get("os") or {}),
        driver_version=_text(data.get("driver_version")),
        dcgm_version=_text(data.get("dcgm_version")),
        mofed_version=_text(data.get("mofed_version")),
        ib_ports=data.get("ib_ports"),
        ib_firmware=_text(data.get("ib_firmware")),
        workloads=bool(data.get("workloads", True)),
        distributed_training=bool(data.get("distributed_training", False)),
        argocd=(dict(argocd) if isinstance(argocd, dict) else {}) if argocd else None,
        maintenance_operator=(dict(maintenance) if isinstance(maintenance, dict) else {}) if maintenance else None,
        cordoned=[str(n) for n in cordoned],
        olm_cluster_policy=olm_policy,
        event_ttl_seconds=float(ttl),
        driver_builds={str(k): [str(x) for x in v] for k, v in builds.items()},
        faults=[dict(f) for f in faults],
        description=str(data.get("description") or ""),
    )


def load_scenario(path: Path) -> Scenario:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the scenario file: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from exc
    return parse_scenario(data, source=str(path))


def _text(value: Any) -> str | None:
    # YAML reads 550.127 as a float and 4.2 as well: versions are text.
    return None if value is None else str(value)
