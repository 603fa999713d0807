"""The twin's Maintenance Operator (``serve --maintenance-operator``) with kubectl, as a user would see it.

One served twin (plain Kubernetes, one GPU worker): the scenario key's MaintenanceOperatorConfig, ``kubectl apply`` of a
NodeMaintenance, ``kubectl get nodemaintenances`` with the upstream printer columns, ``kubectl wait`` on the
Ready condition, the node shown SchedulingDisabled, the webhook refusing a request for a node that does not
exist, and ``kubectl delete`` uncordoning the node.  Waits advance the twin's clock and judge by its state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from simharness import kubectl_run as kubectl

from gpufleet_twin.process import TwinProcess, start_twin

NODE = "gpu-worker-001"
MANIFESTS = f"""
apiVersion: maintenance.nvidia.com/v1alpha1
kind: NodeMaintenance
metadata:
  name: upgrade-{NODE}
  namespace: default
spec:
  requestorID: gpufleet.upgrade
  nodeName: {NODE}
  drainSpec:
    force: true
    deleteEmptyDir: true
    podEvictionFilters:
      - byResourceNameRegex: nvidia.com/gpu
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwinProcess]:
    # No seeded workloads: on one node the inference PodDisruptionBudget would hold the drain (as it should;
    # test_maintenance_operator.py covers drains).
    workdir = tmp_path_factory.mktemp("mo")
    scenario = workdir / "scenario.yaml"
    scenario.write_text(
        "description: Maintenance Operator with kubectl\nworkloads: false\n"
        "maintenance_operator: {maxParallelOperations: 1, maxUnavailable: 1}\n"
    )
    twin = start_twin(
        nodes=1,
        profile="kubernetes",
        time_scale=5,
        maintenance_operator=True,
        scenario=scenario,
        workdir=workdir,
    )
    yield twin
    assert twin.stop() == 0, twin.log_path.read_text()[-2000:]


def advance_until(twin: TwinProcess, check: Callable[[], bool], *, what: str, sim_seconds: float) -> None:
    moved = 0.0
    while not check():
        assert moved < sim_seconds, f"{what}: not within {sim_seconds:g} simulated seconds"
        twin.advance(10)
        moved += 10


def phase(twin: TwinProcess, name: str) -> str:
    jsonpath = "{.status.conditions[?(@.type=='Ready')].reason}"
    return kubectl(twin, "get", "nodemaintenance", name, "-n", "default", "-o", f"jsonpath={jsonpath}").stdout


def test_kubectl_sees_node_maintenance_like_a_real_cluster(served: TwinProcess) -> None:
    resources = kubectl(served, "api-resources", "--api-group=maintenance.nvidia.com", "-o", "name").stdout.split()
    assert resources == ["maintenanceoperatorconfigs.maintenance.nvidia.com", "nodemaintenances.maintenance.nvidia.com"]
    config = kubectl(served, "get", "maintenanceoperatorconfig", "default", "-n", "maintenance-operator", "-o", "json")
    assert json.loads(config.stdout)["spec"]["maxUnavailable"] == 1  # from the scenario key
    kubectl(served, "apply", "-f", "-", stdin=MANIFESTS)
    name = f"upgrade-{NODE}"
    advance_until(served, lambda: phase(served, name) == "Ready", what="NodeMaintenance Ready", sim_seconds=300)
    kubectl(served, "wait", "--for=condition=Ready", f"nodemaintenance/{name}", "-n", "default", "--timeout=20s")
    table = kubectl(served, "get", "nodemaintenances", "-A").stdout.splitlines()
    assert table[0].split() == ["NAMESPACE", "NAME", "NODE", "REQUESTOR", "READY", "PHASE", "FAILED"]
    assert table[1].split() == ["default", name, NODE, "gpufleet.upgrade", "True", "Ready"]
    nm = json.loads(kubectl(served, "get", "nodemaintenance", name, "-n", "default", "-o", "json").stdout)
    assert nm["metadata"]["finalizers"] == ["maintenance.nvidia.com/finalizer"]
    assert nm["spec"]["cordon"] is True  # the CRD's default, applied by the API server
    assert nm["status"]["drain"]["drainProgress"] == 100
    assert "SchedulingDisabled" in kubectl(served, "get", "node", NODE).stdout
    events = kubectl(
        served, "get", "events", "-n", "default", "--field-selector", f"involvedObject.name={name}", "-o", "json"
    ).stdout
    assert [e["message"] for e in json.loads(events)["items"] if e["reason"] == "ConditionChanged"][:2] == [
        "Pending",
        "Scheduled",
    ]
    ghost = MANIFESTS.replace(f"nodeName: {NODE}", "nodeName: no-such-node").replace(name, "ghost")
    refused = kubectl(served, "apply", "-f", "-", stdin=ghost, check=False)
    assert refused.returncode != 0 and 'admission webhook "vnodemaintenance.kb.io" denied' in refused.stderr
    kubectl(served, "delete", "nodemaintenance", name, "-n", "default", "--wait=false")
    advance_until(
        served,
        lambda: "SchedulingDisabled" not in kubectl(served, "get", "node", NODE).stdout,
        what="node uncordoned",
        sim_seconds=120,
    )
    assert kubectl(served, "get", "nodemaintenances", "-A", "-o", "name").stdout.strip() == ""
