"""The MOFED rolling reload: ofed_rolling_reload against the same steps in a ``serial: P`` playbook.

One twin (no seeded workloads; one secondary-network pod per node, labelled ``app=rdma-bench``), each
node with its own MOFED reload time (``twin.gpufleet.io/mofed-reload-seconds``, drawn from a seeded
random range, so per-node times vary). Side by side, in one run:

(a) ``gpufleet.upgrade.ofed_rolling_reload`` through ansible-playbook, ``max_unavailable`` =
    ``max_parallel`` = P: cordon, evict the secondary-network pods, delete the MOFED pod, wait for the
    new one Ready at the target, uncordon; continuous scheduling.
(b) the same per-node steps with kubernetes.core modules in a playbook with ``serial: P``
    (``k8s_drain`` drain with the pod selector, ``k8s_info`` + ``k8s`` delete of the MOFED pod,
    ``k8s_info`` until the new pod is Ready at the target, ``k8s_drain`` uncordon).

Reported: (a)'s makespan (the rollout's own elapsed time, plan included) against the lower bound
``max(sum(t)/P, max t)`` from its per-node times (within 5%), both playbooks' wall-clock times side by
side ((a) at least 20% shorter than (b)), and from the twin's recorder: budget violations and
disrupted secondary-network pods.

    .venv/bin/python -m bench.bench_ofed_rollout --nodes 30 --parallel 3
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import random
import subprocess
import sys
import tempfile
import time
from typing import Any

import yaml

from gpufleet_twin.process import TwinProcess, start_twin

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
MODULE_PLAYBOOK = ROOT / "tests" / "integration" / "playbooks" / "ofed_rolling_reload.yml"
NAMESPACE = "nvidia-network-operator"
RELOAD = "twin.gpufleet.io/mofed-reload-seconds"
TARGET_A = "25.01-0.6.0.0"
TARGET_B = "25.04-0.6.1.0"
APP = "rdma-bench"

SERIAL_PLAYBOOK = """\
---
- name: Reload MOFED with kubernetes.core modules, P nodes per batch
  hosts: all
  gather_facts: false
  serial: "{{ bench_parallel | int }}"
  tasks:
    - name: Cordon and evict the secondary-network pods
      kubernetes.core.k8s_drain:
        name: "{{ inventory_hostname }}"
        state: drain
        pod_selectors: ["app=%(app)s"]
        delete_options: {ignore_daemonsets: true, delete_emptydir_data: true, force: true, wait_timeout: 300}
    - name: Find the MOFED pod
      kubernetes.core.k8s_info:
        kind: Pod
        namespace: %(namespace)s
        label_selectors: ["nvidia.com/ofed-driver"]
        field_selectors: ["spec.nodeName={{ inventory_hostname }}"]
      register: old_pod
    - name: Delete the MOFED pod
      kubernetes.core.k8s:
        state: absent
        kind: Pod
        namespace: %(namespace)s
        name: "{{ old_pod.resources[0].metadata.name }}"
    - name: Wait for the new MOFED pod Ready at the target
      kubernetes.core.k8s_info:
        kind: Pod
        namespace: %(namespace)s
        label_selectors: ["nvidia.com/ofed-driver"]
        field_selectors: ["spec.nodeName={{ inventory_hostname }}"]
      register: new_pod
      until: >-
        new_pod.resources | rejectattr('metadata.deletionTimestamp', 'defined')
        | selectattr('spec.containers.0.image', 'search', bench_target)
        | selectattr('status.containerStatuses.0.ready', 'defined')
        | selectattr('status.containerStatuses.0.ready') | list | length > 0
      retries: 600
      delay: 1
    - name: Uncordon
      kubernetes.core.k8s_drain:
        name: "{{ inventory_hostname }}"
        state: uncordon
"""


def ansible_env(twin: TwinProcess) -> dict[str, str]:
    env = twin.env()
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORKS="50",
        PATH=f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    return env


def kubectl(twin: TwinProcess, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run(["kubectl", "--kubeconfig", str(twin.kubeconfig), *args], capture_output=True, text=True,
                         input=stdin, timeout=120, check=False)  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr}")
    return out.stdout


def get(twin: TwinProcess, *args: str) -> dict[str, Any]:
    return json.loads(kubectl(twin, "get", *args, "-o", "json"))


def wait(check: Any, *, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.5)


def mofed_at(twin: TwinProcess, version: str) -> int:
    pods = get(twin, "pods", "-n", NAMESPACE, "-l", "nvidia.com/ofed-driver")["items"]
    return sum(
        1
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and f":{version}-" in p["spec"]["containers"][0]["image"]
        and all(c.get("ready") for c in p.get("status", {}).get("containerStatuses") or [{}])
    )


def prepare(twin: TwinProcess, nodes: list[str], *, seed: int, low: float, high: float) -> dict[str, float]:
    rng = random.Random(seed)
    reload = {name: round(rng.uniform(low, high)) for name in nodes}
    for name, seconds in reload.items():
        kubectl(twin, "annotate", "node", name, f"{RELOAD}={seconds}", "--overwrite")
    # One secondary-network pod per node, pinned to it: evicted before the reload, back after the uncordon.
    annotations = {"k8s.v1.cni.cncf.io/networks": "ib-sriov-net"}
    for name in nodes:
        manifest = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": f"{APP}-{name}", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": APP, "bench-node": name}},
                "template": {
                    "metadata": {
                        "labels": {"app": APP, "bench-node": name},
                        "annotations": annotations,
                    },
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": name},
                        "containers": [{"name": "main", "image": "registry.example/rdma:1"}],
                    },
                },
            },
        }
        kubectl(twin, "create", "-f", "-", stdin=json.dumps(manifest))
    wait(lambda: mofed_at(twin, "24.07-0.6.1.0") == len(nodes), what="MOFED Ready")
    wait(
        lambda: sum(
            1 for p in get(twin, "pods", "-n", "default", "-l", f"app={APP}")["items"]
            if p.get("status", {}).get("phase") == "Running"
        ) == len(nodes),
        what="the secondary-network pods",
    )  # fmt: skip
    return reload


def run_module(twin: TwinProcess, parallel: int, workdir: pathlib.Path) -> tuple[float, dict[str, Any]]:
    out = workdir / "module.json"
    args = {"target_version": TARGET_A, "max_unavailable": parallel, "max_parallel": parallel, "wait_sleep": 0.1,
            "evict": {"secondary_network": True, "pod_selector": f"app={APP}"}}  # fmt: skip
    command = [str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(MODULE_PLAYBOOK),
               "-e", json.dumps({"ofed_module_args": args, "ofed_result_file": str(out)})]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, env=ansible_env(twin), cwd=ROOT, capture_output=True, text=True, timeout=3600,
                          check=False)  # fmt: skip
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"ofed_rolling_reload failed: {done.stdout[-3000:]}")
    return elapsed, json.loads(out.read_text())


def run_serial(twin: TwinProcess, nodes: list[str], parallel: int, workdir: pathlib.Path) -> float:
    policy_patch = {"spec": {"ofedDriver": {"version": TARGET_B}}}
    kubectl(twin, "patch", "nicclusterpolicies.mellanox.com", "nic-cluster-policy", "--type", "merge", "-p",
            json.dumps(policy_patch))  # fmt: skip

    def rendered() -> bool:
        daemonsets = get(twin, "daemonsets", "-n", NAMESPACE)["items"]
        return all(f":{TARGET_B}-" in ds["spec"]["template"]["spec"]["containers"][0]["image"]
                   for ds in daemonsets if ds["metadata"]["name"].startswith("mofed-"))  # fmt: skip

    wait(rendered, what="the DaemonSets to render the second target")
    playbook = workdir / "serial.yml"
    playbook.write_text(SERIAL_PLAYBOOK % {"app": APP, "namespace": NAMESPACE})
    inventory = workdir / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {name: {"ansible_connection": "local"} for name in nodes}}}))
    command = [str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), str(playbook),
               "-e", json.dumps({"bench_parallel": parallel, "bench_target": f":{TARGET_B}-"})]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, env=ansible_env(twin), cwd=ROOT, capture_output=True, text=True, timeout=3600,
                          check=False)  # fmt: skip
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"the serial playbook failed: {done.stdout[-3000:]}")
    return elapsed


def secondary_network_disruptions(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in report["disrupted_pods"] if "secondary network" in d.get("why", "")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=30)
    parser.add_argument("--parallel", type=int, default=3)
    parser.add_argument("--time-scale", type=float, default=300.0)
    parser.add_argument("--reload-min", type=float, default=300.0, help="simulated seconds")
    parser.add_argument("--reload-max", type=float, default=1500.0, help="simulated seconds")
    parser.add_argument("--seed", type=int, default=8)
    options = parser.parse_args(argv)

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="bench-ofed-"))
    scenario = workdir / "scenario.yaml"
    scenario.write_text(yaml.safe_dump({"nodes": options.nodes, "profile": "openshift", "workloads": False}))
    twin = start_twin(nodes=options.nodes, profile="openshift", time_scale=options.time_scale,
                      workdir=workdir / "twin", scenario=scenario)  # fmt: skip
    try:
        nodes = sorted(n["metadata"]["name"] for n in get(twin, "nodes", "-l", "nvidia.com/gpu.present=true")["items"])
        reload = prepare(twin, nodes, seed=options.seed, low=options.reload_min, high=options.reload_max)
        twin.admin("POST", "budget", {"maxUnavailable": options.parallel, "scope": "nvidia.com/gpu.present=true"})
        twin.admin("POST", "report/reset")
        module_seconds, result = run_module(twin, options.parallel, workdir)
        per_node = {entry["node"]: entry["seconds"] for entry in result["timeline"] if entry.get("seconds")}
        lower_bound = max(sum(per_node.values()) / options.parallel, *per_node.values())
        report_a = twin.report()
        twin.admin("POST", "report/reset")
        serial_seconds = run_serial(twin, nodes, options.parallel, workdir)
        report_b = twin.report()
    finally:
        twin.stop()

    summary = {
        "benchmark": "ofed_rollout",
        "at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "nodes": options.nodes,
        "parallel": options.parallel,
        "time_scale": options.time_scale,
        "reload_simulated_seconds": reload,
        "module": {
            "playbook_seconds": round(module_seconds, 2),
            # The rollout itself (plan, then every node): the playbook minus ansible-playbook's start-up and the
            # wait for the DaemonSets to render the target.
            "makespan_seconds": round(float(result["elapsed"]), 2),
            "per_node_seconds": per_node,
            "lower_bound_seconds": round(lower_bound, 2),
            "over_lower_bound": round(float(result["elapsed"]) / lower_bound - 1, 4),
            "budget_violations": len(report_a["budget_violations"]),
            "disrupted_secondary_network_pods": len(secondary_network_disruptions(report_a)),
        },
        "serial_playbook": {
            "playbook_seconds": round(serial_seconds, 2),
            "budget_violations": len(report_b["budget_violations"]),
            "disrupted_secondary_network_pods": len(secondary_network_disruptions(report_b)),
        },
        # Side by side, both as whole playbook runs (start-up included on both sides).
        "module_shorter_by": round(1 - module_seconds / serial_seconds, 4),
    }
    summary["checks"] = {
        "within_5_percent_of_lower_bound": summary["module"]["over_lower_bound"] <= 0.05,
        "at_least_20_percent_shorter_than_serial": summary["module_shorter_by"] >= 0.20,
        "zero_budget_violations": summary["module"]["budget_violations"] == 0,
        "zero_disrupted_secondary_network_pods": summary["module"]["disrupted_secondary_network_pods"] == 0,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"ofed_rollout-{summary['at'].replace(':', '').replace('-', '')}.json"
    path.write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "reload_simulated_seconds"}, indent=2))
    print(f"results: {path}")
    return 0 if all(summary["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
