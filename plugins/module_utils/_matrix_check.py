# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""What ``gpu_matrix_check`` does, composed from the pure matrix logic and the API (collection-internal).

Order matters: the matrix (file or ConfigMap) is read and validated first,
and when it is invalid nothing else runs, no cluster call included.  The
audit then reads the cluster with paginated list calls only (never one
request per node, never exec into pods) and hands plain API objects to the
pure drift computation.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
    list_served,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CLUSTER_POLICIES,
    CLUSTER_VERSIONS,
    CONFIGMAPS,
    CSVS,
    DAEMONSETS,
    DEPLOYMENTS,
    NIC_CLUSTER_POLICIES,
    NODES,
    PODS,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import (
    CATALOG_FILE_NAME,
    Catalog,
    catalog_from_text,
    load_catalog,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_drift import (
    ROLE_CANARY,
    ROLE_PRODUCTION,
    Observed,
    compute_drift,
    observe_from_api,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_model import (
    Matrix,
    diff_matrices,
    load_matrix_file,
    matrix_from_configmap,
    read_text_file,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_planner import plan_stage
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_rules import VIOLATION, WARNING, evaluate_matrix
from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_schema import MatrixWarning, assert_valid
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso

# Nodes are read 500 at a time (the audit's request budget is ceil(N/500) + 15);
# the few label-selected pod lists use larger pages since one node has at most
# one driver pod and one MOFED pod.
NODE_PAGE = 500
POD_PAGE = 5000
# The GPU Operator labels every driver pod with this component label; the
# "app" label carries the DaemonSet name, which on OpenShift includes the
# RHCOS version (nvidia-driver-daemonset-416.94.202410211619-0).
DRIVER_POD_SELECTOR = "app.kubernetes.io/component=nvidia-driver"
MOFED_POD_SELECTOR = "nvidia.com/ofed-driver"


@dataclass(frozen=True)
class MatrixSource:
    """Where the matrix comes from: a file, the in-cluster ConfigMap, or both (then compared)."""

    path: Optional[str] = None
    configmap_name: Optional[str] = None
    configmap_namespace: str = "gpu-operator"
    catalog_path: Optional[str] = None


def read_matrix_file(source: MatrixSource) -> Optional[Matrix]:
    if not source.path:
        return None
    return load_matrix_file(source.path)


def read_catalog(source: MatrixSource) -> Catalog:
    """The shipped catalog, merged with a user catalog (given, or ``catalog.yaml`` beside the matrix)."""
    path = source.catalog_path
    if not path and source.path:
        beside = os.path.join(os.path.dirname(os.path.abspath(source.path)), CATALOG_FILE_NAME)
        path = beside if os.path.isfile(beside) else None
    if not path:
        return load_catalog()
    return catalog_from_text(read_text_file(path, what="catalog"), origin=path)


def read_matrix_configmap(api: KubeApi, source: MatrixSource) -> Matrix:
    configmap = api.get(CONFIGMAPS, source.configmap_name or "", namespace=source.configmap_namespace)
    if configmap is None:
        raise InvalidInputError(
            f"ConfigMap {source.configmap_namespace}/{source.configmap_name} holding the matrix does not exist"
        )
    return matrix_from_configmap(configmap, source=f"ConfigMap {source.configmap_namespace}/{source.configmap_name}")


def observe_cluster(api: KubeApi, *, firmware_by_node: Optional[Mapping[str, Mapping[str, str]]] = None) -> Observed:
    """Everything the drift audit compares, from a fixed number of paginated list calls.

    Nodes and pods are streamed: each page is reduced to what the audit
    keeps and dropped before the next is read, so a 10,000-node audit never
    holds the whole cluster in memory.
    """
    return observe_from_api(
        nodes=api.iter_list(NODES, page_size=NODE_PAGE),
        pods=itertools.chain(
            api.iter_list(PODS, label_selector=DRIVER_POD_SELECTOR, page_size=POD_PAGE),
            api.iter_list(PODS, label_selector=MOFED_POD_SELECTOR, page_size=POD_PAGE),
        ),
        daemonsets=api.list(DAEMONSETS, page_size=POD_PAGE),
        clusterpolicies=list_served(api, CLUSTER_POLICIES),
        csvs=list_served(api, CSVS, page_size=POD_PAGE),
        clusterversions=list_served(api, CLUSTER_VERSIONS),
        nicclusterpolicies=list_served(api, NIC_CLUSTER_POLICIES),
        deployments=api.list(DEPLOYMENTS, page_size=POD_PAGE),
        firmware_by_node=firmware_by_node,
    )


def run_matrix_check(
    source: MatrixSource,
    *,
    target_stage: str,
    audit: bool,
    connect: Callable[[], KubeApi],
    firmware_by_node: Optional[Mapping[str, Mapping[str, str]]] = None,
) -> Dict[str, Any]:
    """Validate, evaluate the rules, plan to ``target_stage`` and, when asked, audit the cluster.

    ``connect`` is called only once the matrix from the file (if any) has
    been validated, so an invalid matrix costs no API call.
    """
    matrix = read_matrix_file(source)
    if matrix is not None:
        assert_valid(matrix)
    catalog = read_catalog(source)
    api: Optional[KubeApi] = None
    differences: List[Dict[str, Any]] = []
    if source.configmap_name:
        api = connect()
        in_cluster = read_matrix_configmap(api, source)
        assert_valid(in_cluster)
        if matrix is None:
            matrix = in_cluster
        else:
            differences = [difference.as_dict() for difference in diff_matrices(matrix, in_cluster)]
    if matrix is None:
        raise InvalidInputError("No matrix given: set src (a file) or configmap_name (the in-cluster ConfigMap)")
    validation = assert_valid(matrix)
    rules = evaluate_matrix(matrix, catalog=catalog)
    # Every stage but production is optional: a missing one pins nothing, so its plan has no step.
    plan = plan_stage(matrix, target_stage, catalog=catalog)
    violations = [result.as_dict() for result in rules.by_status(VIOLATION)]
    warnings = [warning.as_dict() for warning in validation.warnings]
    if matrix.stage(target_stage) is None:
        warnings.append(
            MatrixWarning(
                file=matrix.source,
                stage=target_stage,
                key="",
                found=None,
                message=f"target stage {target_stage} is not in the matrix (it has "
                f"{', '.join(sorted(matrix.stages))}): nothing to plan",
            ).as_dict()
        )
    warnings += [result.as_dict() for result in rules.by_status(WARNING)]
    result: Dict[str, Any] = {
        "matrix_source": matrix.source,
        "valid": not violations,
        "violations": violations,
        "matrix_warnings": warnings,
        "rules": rules.as_dict(),
        "plan": plan.as_dict(),
        "configmap_differences": differences,
    }
    if audit:
        api = api or connect()
        observed = observe_cluster(api, firmware_by_node=firmware_by_node)
        stages = {
            ROLE_PRODUCTION: matrix.effective_versions("current_production"),
            ROLE_CANARY: matrix.effective_versions("canary_testing")
            if matrix.stage("canary_testing") is not None
            else matrix.effective_versions("current_production"),
        }
        result["drift"] = compute_drift(stages, observed)
        # When, on the cluster's clock (the Date of the answers just read: no extra request).
        result["checked_at"] = iso(api.cluster_now())
    if api is not None:
        result["api_requests"] = api.requests_sent
    return result
