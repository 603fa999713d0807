# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""What the upgrade doctor reads, in a bounded number of list requests (collection-internal).

Cost on a cluster of N nodes: ceil(N/500) pages of nodes, one list each of
ClusterPolicies, NVIDIADrivers, NicClusterPolicies, driver DaemonSets,
PodDisruptionBudgets, Node Events and MachineConfigPools, one read of the
stage Lease and of the server's clock; then the pods of the nodes past
upgrade-required (one field-selector list per node up to
``PER_NODE_POD_READS``, else one cluster-wide list), and at most ``max_logs``
log tails. Nodes waiting in upgrade-required are diagnosed from the nodes and
the policy alone, so 5,000 nodes with 50 stuck cost ceil(N/500) + 20 requests
or fewer (bench/bench_doctor.py).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from ansible_collections.gpufleet.upgrade.plugins.module_utils._doctor import (
    ClusterView,
    is_driver_pod,
    logs_wanted,
    needs_all_driver_pods,
    nodes_needing_pods,
    pod_node,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import KubeApiError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi, list_served
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CLUSTER_POLICIES,
    DAEMONSETS,
    DRIVER_SELECTOR,
    EVENTS,
    LEASES,
    MACHINE_CONFIG_POOLS,
    NIC_CLUSTER_POLICIES,
    NODES,
    NVIDIA_DRIVERS,
    PDBS,
    PODS,
)

# Up to this many nodes past upgrade-required, their pods are read node by node (field selector spec.nodeName);
# beyond it one cluster-wide list costs less than a request per node.
PER_NODE_POD_READS = 8
LOG_TAIL_BYTES = 16384


def read_cluster(
    api: KubeApi,
    *,
    node_selector: str = "",
    lease_namespace: str = "",
    lease_name: str = "gpufleet-upgrade",
    max_logs: int = 3,
) -> ClusterView:
    """Everything the diagnosis looks at, on the API server's clock."""
    now = api.server_time()
    nodes = api.list(NODES, label_selector=node_selector or None)
    policies = list_served(api, CLUSTER_POLICIES)
    nic_policies = list_served(api, NIC_CLUSTER_POLICIES)
    cluster_policy = policies[0] if policies else None
    view = ClusterView(
        now=now,
        nodes=nodes,
        cluster_policy=cluster_policy,
        nic_cluster_policy=nic_policies[0] if nic_policies else None,
    )
    operator_namespace = _operator_namespace(cluster_policy)
    if cluster_policy is not None:
        if (cluster_policy.get("spec") or {}).get("driver", {}).get("useNvidiaDriverCRD"):
            view.nvidia_drivers = list_served(api, NVIDIA_DRIVERS)
        if operator_namespace:
            view.driver_daemonsets = api.list(DAEMONSETS, namespace=operator_namespace, label_selector=DRIVER_SELECTOR)
    view.pdbs = api.list(PDBS)
    view.node_events = api.list(EVENTS, namespace="default", field_selector="involvedObject.kind=Node")
    view.machine_config_pools = list_served(api, MACHINE_CONFIG_POOLS)
    namespace = lease_namespace or operator_namespace
    if namespace:
        view.lease = api.get(LEASES, lease_name, namespace=namespace)
    wanted = nodes_needing_pods(nodes)
    if len(wanted) <= PER_NODE_POD_READS:
        for name in wanted:
            view.pods_by_node[name] = api.list(PODS, field_selector=f"spec.nodeName={name}")
    else:
        chosen = set(wanted)
        for pod in api.iter_list(PODS):
            if pod_node(pod) in chosen:
                view.pods_by_node.setdefault(pod_node(pod), []).append(pod)
    if needs_all_driver_pods(view):
        view.driver_pods = [
            pod
            for pod in api.list(PODS, namespace=operator_namespace or None, label_selector=DRIVER_SELECTOR)
            if is_driver_pod(pod)
        ]
    for namespace_name, pod_name, container in logs_wanted(view)[: max(0, max_logs)]:
        try:
            view.logs[(namespace_name, pod_name)] = api.read_pod_log(
                namespace_name, pod_name, container=container or None, limit_bytes=LOG_TAIL_BYTES
            )
        except KubeApiError as err:
            # A log that cannot be read (container not started yet) leaves the evidence without its line.
            if err.status not in (400, 404):
                raise
    return view


def _operator_namespace(cluster_policy: Optional[Dict[str, Any]]) -> str:
    return str(((cluster_policy or {}).get("status") or {}).get("namespace") or "")
