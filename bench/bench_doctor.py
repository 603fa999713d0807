"""The upgrade doctor at scale: API requests to diagnose N GPU nodes of which S are stuck.

The claim (issue 18): a cluster of 5,000 GPU nodes with 50 stuck nodes is
diagnosed in at most ceil(N/500) + 20 API requests. The twin counts the requests
it served (``/admin/report``), so the number is the server's, not the client's.

The cluster is an API-only twin (``--bare``: no simulated controllers, so the
stuck states stay exactly as written while the doctor reads) holding what a
stuck GPU Operator rollout leaves: N Nodes (GPU labels, state label), the
ClusterPolicy (maxParallelUpgrades 4, maxUnavailable 1%), the driver
DaemonSet, and S stuck nodes:

- 6 in pod-deletion-required, each with a GPU pod whose PodDisruptionBudget
  allows no disruption;
- 2 upgrade-failed, their driver pods crash-looping (the doctor reads their log tails);
- 10 in upgrade-required with the skip label;
- the rest in upgrade-required, waiting for the slots the upgrade-failed nodes hold;

plus the controller's state Events for every stuck node and an expired stage Lease.
Setting it up costs requests too; the recorder is reset before the diagnosis.

    .venv/bin/python -m bench.bench_doctor --nodes 5000 --stuck 50
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import pathlib
import sys
import time
from typing import Any

from gpufleet_twin.process import start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".build" / "collections"))

from ansible_collections.gpufleet.upgrade.plugins.module_utils._doctor_remedy import (  # noqa: E402
    ACTIONS,
    run_doctor,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi  # noqa: E402
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (  # noqa: E402
    CLUSTER_POLICIES,
    DAEMONSETS,
    EVENTS,
    LEASES,
    NAMESPACES,
    NODES,
    PDBS,
    PODS,
)

NAMESPACE = "nvidia-gpu-operator"
STATE = "nvidia.com/gpu-driver-upgrade-state"
DS_NAME = "nvidia-driver-daemonset"


def node_body(index: int, state: str, *, skip: bool = False) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": f"gpu-worker-{index:05d}",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.deploy.driver": "true",
        STATE: state,
    }
    if skip:
        labels["nvidia.com/gpu-driver-upgrade.skip"] = "true"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"gpu-worker-{index:05d}", "labels": labels}}


def pod_body(
    name: str, node: str, *, namespace: str, labels: dict[str, str], owner: tuple[str, str], gpus: int
) -> dict:
    container: dict[str, Any] = {"name": "nvidia-driver-ctr" if not gpus else "main", "image": "registry.example/x:1"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": owner[0],
                    "name": owner[1],
                    "uid": f"uid-{owner[1]}",
                    "controller": True,
                }
            ],
        },
        "spec": {"nodeName": node, "containers": [container]},
    }


def build_cluster(api: KubeApi, *, nodes: int, stuck: int) -> dict[str, list[str]]:
    deletion = list(range(1, 7))
    failed = [7, 8]
    skipped = list(range(9, 19))
    waiting = list(range(19, stuck + 1))
    states = dict.fromkeys(deletion, "pod-deletion-required") | dict.fromkeys(failed, "upgrade-failed")
    states |= dict.fromkeys((*skipped, *waiting), "upgrade-required")
    for name in (NAMESPACE, "work"):
        api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})

    def create_node(index: int) -> None:
        api.create(NODES, node_body(index, states.get(index, "upgrade-done"), skip=index in skipped))

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create_node, range(1, nodes + 1)))
    policy = {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "gpu-cluster-policy"},
        "spec": {
            **{
                section: {}
                for section in (
                    "daemonsets",
                    "dcgm",
                    "dcgmExporter",
                    "devicePlugin",
                    "gfd",
                    "nodeStatusExporter",
                    "operator",
                    "toolkit",
                )
            },
            "driver": {
                "version": "570.124.06",
                "upgradePolicy": {"autoUpgrade": True, "maxParallelUpgrades": 4, "maxUnavailable": "1%"},
            },
        },
    }
    api.create(CLUSTER_POLICIES, policy)
    api.patch(
        CLUSTER_POLICIES,
        "gpu-cluster-policy",
        {"status": {"namespace": NAMESPACE, "state": "ready"}},
        subresource="status",
    )
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": DS_NAME,
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/component": "nvidia-driver"},
        },
        "spec": {
            "selector": {"matchLabels": {"app": DS_NAME}},
            "updateStrategy": {"type": "OnDelete"},
            "template": {
                "metadata": {"labels": {"app": DS_NAME}},
                "spec": {"containers": [{"name": "nvidia-driver-ctr", "image": "nvcr.io/nvidia/driver:570.124.06"}]},
            },
        },
    }
    api.create(DAEMONSETS, daemonset, namespace=NAMESPACE)
    status = {"desiredNumberScheduled": nodes, "currentNumberScheduled": nodes, "numberMisscheduled": 0}
    api.patch(DAEMONSETS, DS_NAME, {"status": status}, namespace=NAMESPACE, subresource="status")
    for index in (*deletion, *failed):
        node = f"gpu-worker-{index:05d}"
        driver = f"nvidia-driver-{index:05d}"
        api.create(
            PODS,
            pod_body(
                driver,
                node,
                namespace=NAMESPACE,
                labels={"app": DS_NAME, "app.kubernetes.io/component": "nvidia-driver"},
                owner=("DaemonSet", DS_NAME),
                gpus=0,
            ),
            namespace=NAMESPACE,
        )
        crash = index in failed
        container_status = {
            "name": "nvidia-driver-ctr",
            "ready": not crash,
            "restartCount": 12 if crash else 0,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}} if crash else {"running": {}},
            "lastState": {"terminated": {"message": "no kernel-devel package matches the running kernel"}}
            if crash
            else {},
        }
        api.patch(
            PODS,
            driver,
            {"status": {"phase": "Running", "containerStatuses": [container_status]}},
            namespace=NAMESPACE,
            subresource="status",
        )
        if index in deletion:
            app = f"train-{index}"
            api.create(
                PODS,
                pod_body(f"{app}-0", node, namespace="work", labels={"app": app}, owner=("ReplicaSet", app), gpus=8),
                namespace="work",
            )
            api.patch(PODS, f"{app}-0", {"status": {"phase": "Running"}}, namespace="work", subresource="status")
            pdb = {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": app, "namespace": "work"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": app}}},
            }
            api.create(PDBS, pdb, namespace="work")
            api.patch(
                PDBS,
                app,
                {"status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}},
                namespace="work",
                subresource="status",
            )
    for index, state in states.items():
        node = f"gpu-worker-{index:05d}"
        api.create(
            EVENTS,
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {"name": f"{node}.state", "namespace": "default"},
                "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
                "reason": "GPUDriverUpgrade",
                "type": "Normal",
                "message": f"Successfully updated node state label to {state}",
                "firstTimestamp": "2026-11-20T08:00:00Z",
                "lastTimestamp": "2026-11-20T08:00:00Z",
                "source": {"component": "nvidia-gpu-operator"},
            },
            namespace="default",
        )
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "gpufleet-upgrade", "namespace": NAMESPACE},
        "spec": {
            "holderIdentity": "alice@ctl run 1",
            "leaseDurationSeconds": 300,
            "acquireTime": "2026-11-20T07:00:00.000000Z",
            "renewTime": "2026-11-20T07:30:00.000000Z",
        },
    }
    api.create(LEASES, lease, namespace=NAMESPACE)
    return {"deletion": [f"gpu-worker-{i:05d}" for i in deletion], "failed": [f"gpu-worker-{i:05d}" for i in failed]}


def run(nodes: int, stuck: int, workdir: pathlib.Path) -> dict[str, Any]:
    # The twin's own minimal CRDs: the upstream ClusterPolicy schema requires every operand section.
    twin = start_twin(
        nodes=0, profile="openshift", time_scale=1, workdir=workdir, real_crds=False, extra_args=("--bare",)
    )
    try:
        api = KubeApi.from_params({"kubeconfig": str(twin.kubeconfig)}, keep_stage_lease=False)
        started = time.monotonic()
        build_cluster(api, nodes=nodes, stuck=stuck)
        setup_seconds = time.monotonic() - started
        twin.admin("POST", "report/reset")
        doctor_api = KubeApi.from_params({"kubeconfig": str(twin.kubeconfig)}, keep_stage_lease=False)
        started = time.monotonic()
        result = run_doctor(
            doctor_api,
            check_mode=True,
            remediate=False,
            max_actions=5,
            remediate_actions=ACTIONS,
            pod_selector="",
            node_selector="",
            lease_namespace="",
            lease_name="gpufleet-upgrade",
            ledger_name="gpufleet-upgrade-ledger",
            max_logs=3,
            actor="bench",
        )
        seconds = time.monotonic() - started
        served = twin.report()["requests"]
    finally:
        twin.stop()
    causes: dict[str, int] = {}
    for finding in result["findings"]:
        causes[finding["cause"]] = causes.get(finding["cause"], 0) + 1
    bound = math.ceil(nodes / 500) + 20
    return {
        "nodes": nodes,
        "stuck": stuck,
        "stuck_found": len(result["stuck_nodes"]),
        "causes": causes,
        "cluster": [item["cause"] for item in result["cluster"]],
        "api_requests_client": result["api_requests"],
        "api_requests_served": served["total"],
        "requests_by_verb_resource": served.get("by_verb_resource", {}),
        "bound": bound,
        "within_bound": served["total"] <= bound,
        "diagnose_seconds": round(seconds, 2),
        "setup_seconds": round(setup_seconds, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[5000])
    parser.add_argument("--stuck", type=int, default=50)
    parser.add_argument("--workdir", type=pathlib.Path, default=ROOT / "bench" / "results" / "doctor-twin")
    options = parser.parse_args()
    results = []
    for count in options.nodes:
        outcome = run(count, options.stuck, options.workdir / str(count))
        print(json.dumps(outcome, indent=2))
        results.append(outcome)
    out = ROOT / "bench" / "results" / f"doctor-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if all(item["within_bound"] for item in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
