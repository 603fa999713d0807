# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Which Kubernetes permissions each playbook, stage and component group needs (collection-internal).

The one table of the collection's RBAC, pure data: the permission preflight
(``permission_check``) asks the API for exactly these before a stage's first
write, a 403 that still happens is explained from it (``forbidden_detail``),
the shipped ``rbac/`` manifests grant exactly these (checked by a unit test)
and docs/security.md lists them (checked by the same test).

Each *step* is something a task or module does (read the ledger, label the
canary, run the gates...), derived from the API calls of the module_utils and
the kubernetes.core tasks of the roles. Each grant names the shipped
ClusterRole that carries it; a ClusterRole is bound either cluster-wide
(ClusterRoleBinding) or in one namespace (RoleBinding), so the namespaced
work (the ledger, the gate Jobs, the operators' own objects) is granted only
where it happens. Verbs are kube-apiserver's: ``get`` reads one object by
name, ``list`` a collection (kubernetes.core's ``k8s_info`` without a name),
``patch``/``update``/``create``/``delete`` write; ``state: patched`` of
kubernetes.core's ``k8s`` reads the object first (``get``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

# Where a ClusterRole is bound: cluster-wide, or in the namespace of one of these keys.
CLUSTER = "cluster"
LEDGER = "ledger"  # the ledger ConfigMap, the stage Lease and the gate Jobs (upgrade_namespace)
GPU_OPERATOR = "gpu_operator"  # the GPU Operator's namespace (its ClusterPolicy's status.namespace)
NETWORK_OPERATOR = "network_operator"  # network_operator_namespace
SRIOV_OPERATOR = "sriov_operator"  # sriov_operator_namespace
NODE_EVENTS = "node_events"  # Events about Nodes (cluster-scoped objects) live in "default"
MATRIX = "matrix"  # the namespace of the matrix ConfigMap the audit may read

NAMESPACE_KEYS = (LEDGER, GPU_OPERATOR, NETWORK_OPERATOR, SRIOV_OPERATOR, NODE_EVENTS, MATRIX)
# Namespaces that are fixed wherever the collection runs.
FIXED_NAMESPACES = {NODE_EVENTS: "default"}

# Where the NVIDIA Maintenance Operator runs, the rollouts that drain ask it for each node (create a NodeMaintenance,
# or join another requestor's by patching it), wait for it (get) and give it back (delete, or patch to leave).
_NODE_MAINTENANCE = ("get", "create", "patch", "delete")

PLAYBOOKS = ("audit", "upgrade", "rehearse", "diagnose", "rbac")
STAGES = ("canary", "bake", "promote", "rollback")
GROUPS = ("gpu_operator", "network_operator", "firmware", "openshift", "sriov_operator")
# Optional paths a run may take; each adds the steps named in FEATURE_STEPS.
FEATURES = (
    "matrix_configmap",
    "nvidiadriver",
    "rollback_on_bake_failure",
    "doctor_remediate",
    "network_operator_helm",
    "gitops",
)

# The accounts the playbooks run as (roles/rbac creates them; docs/security.md): one per playbook, so each account
# is bound to exactly the ClusterRoles of its playbook. The doctor's remediation writes, so it has an account of
# its own too; the diagnosis stays read-only. Key -> the ServiceAccount's default name.
ACCOUNTS: Dict[str, str] = {
    "audit": "gpufleet-audit",
    "rehearse": "gpufleet-rehearse",
    "diagnose": "gpufleet-doctor",
    "remediate": "gpufleet-doctor-remediate",
    "upgrade": "gpufleet-upgrade",
    "rbac": "gpufleet-rbac",
    "scc": "gpufleet-validate",
}


@dataclass(frozen=True)
class ClusterRoleInfo:
    """A ClusterRole shipped in rbac/, and where it is bound."""

    name: str
    scope: str  # CLUSTER, or the namespace key of its RoleBinding
    manifest: str  # file under rbac/
    summary: str
    accounts: Tuple[str, ...] = ()  # keys of ACCOUNTS bound to it


@dataclass(frozen=True)
class Grant:
    """Verbs on one resource (``pods/eviction`` names a subresource), carried by one ClusterRole."""

    role: str
    verbs: Tuple[str, ...]
    group: str
    resource: str
    resource_names: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Permission:
    """One thing to ask the API (SelfSubjectAccessReview), with the ClusterRole that grants it and why."""

    verb: str
    group: str
    resource: str
    subresource: str
    namespace: str  # "" for cluster scope (and "in every namespace")
    role: str
    steps: Tuple[str, ...]

    def describe(self) -> str:
        what = self.resource + (f"/{self.subresource}" if self.subresource else "")
        where = f'in namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        return f'{self.verb} {what} in API group "{self.group}" {where}'

    def as_dict(self) -> Dict[str, object]:
        return {
            "verb": self.verb,
            "group": self.group,
            "resource": self.resource,
            "subresource": self.subresource,
            "namespace": self.namespace,
            "cluster_role": self.role,
            "steps": list(self.steps),
        }


AUDIT_ROLE = "gpufleet-audit"
AUDIT_MATRIX_ROLE = "gpufleet-audit-matrix"
# rehearse.yml's snapshot only reads: its own account (gpufleet-rehearse), read verbs only.
SNAPSHOT_ROLE = "gpufleet-audit-snapshot"
SNAPSHOT_LEDGER_ROLE = "gpufleet-audit-snapshot-ledger"
UPGRADE_ROLE = "gpufleet-upgrade"
LEDGER_ROLE = "gpufleet-upgrade-ledger"
NODE_EVENTS_ROLE = "gpufleet-upgrade-node-events"
GPU_OPERATOR_ROLE = "gpufleet-upgrade-gpu-operator"
NETWORK_OPERATOR_ROLE = "gpufleet-upgrade-network-operator"
NETWORK_OPERATOR_HELM_ROLE = "gpufleet-upgrade-network-operator-helm"
SRIOV_OPERATOR_ROLE = "gpufleet-upgrade-sriov-operator"
# The upgrade doctor (diagnose.yml): the diagnosis only reads (gpufleet-audit-doctor*, bound to the doctor's
# account and to the remediation's); the remediation's roles (gpufleet-upgrade-doctor*) add only its writes and
# the reads those writes make first, bound to the remediation's account alone.
DOCTOR_ROLE = "gpufleet-audit-doctor"
DOCTOR_OPERATOR_ROLE = "gpufleet-audit-doctor-operator"
DOCTOR_NODE_EVENTS_ROLE = "gpufleet-audit-doctor-node-events"
DOCTOR_LEDGER_ROLE = "gpufleet-audit-doctor-ledger"
REMEDY_ROLE = "gpufleet-upgrade-doctor"
REMEDY_OPERATOR_ROLE = "gpufleet-upgrade-doctor-operator"
REMEDY_NODE_EVENTS_ROLE = "gpufleet-upgrade-doctor-node-events"
REMEDY_LEDGER_ROLE = "gpufleet-upgrade-doctor-ledger"
# playbooks/rbac.yml: apply the ClusterRoles and bind them (see RBAC_NOTE).
RBAC_ROLE = "gpufleet-rbac"

_AUDIT = ("audit",)
_REHEARSE = ("rehearse",)
_DOCTOR = ("diagnose", "remediate")
_REMEDY = ("remediate",)
_UPGRADE = ("upgrade",)

CLUSTER_ROLES: Tuple[ClusterRoleInfo, ...] = (
    ClusterRoleInfo(AUDIT_ROLE, CLUSTER, "audit.yaml", "audit.yml: read the cluster the drift audit compares", _AUDIT),
    ClusterRoleInfo(
        AUDIT_MATRIX_ROLE,
        MATRIX,
        "audit.yaml",
        "audit.yml: read the matrix ConfigMap (audit_matrix_configmap_name)",
        _AUDIT,
    ),
    ClusterRoleInfo(
        SNAPSHOT_ROLE,
        CLUSTER,
        "rehearse.yaml",
        "rehearse.yml: read the cluster into a snapshot (never Secrets)",
        _REHEARSE,
    ),
    ClusterRoleInfo(
        SNAPSHOT_LEDGER_ROLE,
        LEDGER,
        "rehearse.yaml",
        "rehearse.yml: read the ledger ConfigMap into the snapshot",
        _REHEARSE,
    ),
    ClusterRoleInfo(
        UPGRADE_ROLE, CLUSTER, "upgrade.yaml", "upgrade.yml: nodes, evictions and the operators' CRs", _UPGRADE
    ),
    ClusterRoleInfo(LEDGER_ROLE, LEDGER, "upgrade.yaml", "upgrade.yml: ledger, stage Lease and gate Jobs", _UPGRADE),
    ClusterRoleInfo(NODE_EVENTS_ROLE, NODE_EVENTS, "upgrade.yaml", "upgrade.yml: Events about Nodes", _UPGRADE),
    ClusterRoleInfo(
        GPU_OPERATOR_ROLE, GPU_OPERATOR, "upgrade.yaml", "upgrade.yml: the GPU Operator's OLM objects", _UPGRADE
    ),
    ClusterRoleInfo(NETWORK_OPERATOR_ROLE, NETWORK_OPERATOR, "upgrade.yaml", "upgrade.yml: the MOFED pods", _UPGRADE),
    ClusterRoleInfo(
        NETWORK_OPERATOR_HELM_ROLE,
        NETWORK_OPERATOR,
        "upgrade.yaml",
        "upgrade.yml, Network Operator moved with Helm: the release's storage (Secrets of the release namespace) and "
        "the operator Deployment",
        _UPGRADE,
    ),
    ClusterRoleInfo(SRIOV_OPERATOR_ROLE, SRIOV_OPERATOR, "upgrade.yaml", "upgrade.yml: the SR-IOV operator", _UPGRADE),
    ClusterRoleInfo(
        DOCTOR_ROLE, CLUSTER, "diagnose.yaml", "diagnose.yml: read the nodes, pods and policies it diagnoses", _DOCTOR
    ),
    ClusterRoleInfo(
        DOCTOR_OPERATOR_ROLE,
        GPU_OPERATOR,
        "diagnose.yaml",
        "diagnose.yml: driver DaemonSets and pod logs of the operator",
        _DOCTOR,
    ),
    ClusterRoleInfo(DOCTOR_NODE_EVENTS_ROLE, NODE_EVENTS, "diagnose.yaml", "diagnose.yml: Events about Nodes", _DOCTOR),
    ClusterRoleInfo(DOCTOR_LEDGER_ROLE, LEDGER, "diagnose.yaml", "diagnose.yml: the stage Lease", _DOCTOR),
    ClusterRoleInfo(
        REMEDY_ROLE, CLUSTER, "diagnose.yaml", "diagnose.yml remediation: relabel, evict, unpause", _REMEDY
    ),
    ClusterRoleInfo(
        REMEDY_OPERATOR_ROLE,
        GPU_OPERATOR,
        "diagnose.yaml",
        "diagnose.yml remediation: restart a failing validator",
        _REMEDY,
    ),
    ClusterRoleInfo(
        REMEDY_NODE_EVENTS_ROLE, NODE_EVENTS, "diagnose.yaml", "diagnose.yml remediation: Node Events", _REMEDY
    ),
    ClusterRoleInfo(
        REMEDY_LEDGER_ROLE, LEDGER, "diagnose.yaml", "diagnose.yml remediation: the ledger ConfigMap", _REMEDY
    ),
    ClusterRoleInfo(
        RBAC_ROLE,
        CLUSTER,
        "rbac.yaml",
        "rbac.yml: create and update the accounts, the ClusterRoles and their bindings (creating a ClusterRole or a "
        "binding also needs its permissions held, or escalate and bind: docs/security.md)",
        ("rbac",),
    ),
)
ROLES_BY_NAME = {info.name: info for info in CLUSTER_ROLES}

# Not the automation account's: what the gate pods' ServiceAccount (validate_service_account) needs on
# OpenShift when validate_privileged is true (ibstat, nvidia-smi ECC counters, dmesg and DCGM run privileged,
# and only the "privileged" SecurityContextConstraints admits a privileged container). Bound by a RoleBinding
# in the ledger namespace; with validate_privileged false, the default restricted-v2 admits the gates.
VALIDATE_SCC_ROLE = "gpufleet-validate-scc"
POD_CLUSTER_ROLES: Tuple[ClusterRoleInfo, ...] = (
    ClusterRoleInfo(
        VALIDATE_SCC_ROLE,
        LEDGER,
        "openshift-scc.yaml",
        "OpenShift: the gate pods may run privileged (not the caller)",
        ("scc",),
    ),
)
POD_GRANTS: Tuple[Tuple[str, Grant], ...] = (
    (
        "validate_gates (privileged gate containers: ibstat, nvidia-smi, dmesg, dcgmi)",
        Grant(
            role=VALIDATE_SCC_ROLE,
            verbs=("use",),
            group="security.openshift.io",
            resource="securitycontextconstraints",
            resource_names=("privileged",),
        ),
    ),
)

_R = ("get",)
_L = ("list",)


def _g(role: str, verbs: Sequence[str], group: str, resource: str) -> Grant:
    return Grant(role=role, verbs=tuple(verbs), group=group, resource=resource)


# -- the steps -------------------------------------------------------------------------------------
# step name -> (what the step is, the grants it needs). A step name says where it is (role/task or module).
STEPS: Dict[str, Tuple[str, Tuple[Grant, ...]]] = {
    "audit_cluster": (
        "roles/audit: gpu_matrix_check audit (observe_cluster lists what the drift audit compares)",
        (
            _g(AUDIT_ROLE, _L, "", "nodes"),
            _g(AUDIT_ROLE, _L, "", "pods"),
            _g(AUDIT_ROLE, _L, "apps", "daemonsets"),
            _g(AUDIT_ROLE, _L, "apps", "deployments"),
            _g(AUDIT_ROLE, _L, "nvidia.com", "clusterpolicies"),
            _g(AUDIT_ROLE, _L, "operators.coreos.com", "clusterserviceversions"),
            _g(AUDIT_ROLE, _L, "config.openshift.io", "clusterversions"),
            _g(AUDIT_ROLE, _L, "mellanox.com", "nicclusterpolicies"),
        ),
    ),
    "audit_matrix_configmap": (
        "roles/audit: gpu_matrix_check reads the matrix from a ConfigMap",
        (_g(AUDIT_MATRIX_ROLE, _R, "", "configmaps"),),
    ),
    "rehearse_snapshot": (
        "playbooks/rehearse.yml: cluster_snapshot lists what the rehearsal's twin loads and gets the ledger by name",
        (
            _g(SNAPSHOT_ROLE, _L, "", "namespaces"),
            _g(SNAPSHOT_ROLE, _L, "", "nodes"),
            _g(SNAPSHOT_ROLE, _L, "", "pods"),
            _g(SNAPSHOT_ROLE, _L, "", "events"),
            _g(SNAPSHOT_ROLE, _L, "apps", "daemonsets"),
            _g(SNAPSHOT_ROLE, _L, "apps", "controllerrevisions"),
            _g(SNAPSHOT_ROLE, _L, "apps", "deployments"),
            _g(SNAPSHOT_ROLE, _L, "apps", "replicasets"),
            _g(SNAPSHOT_ROLE, _L, "apps", "statefulsets"),
            _g(SNAPSHOT_ROLE, _L, "batch", "jobs"),
            _g(SNAPSHOT_ROLE, _L, "policy", "poddisruptionbudgets"),
            _g(SNAPSHOT_ROLE, _L, "nvidia.com", "clusterpolicies"),
            _g(SNAPSHOT_ROLE, _L, "nvidia.com", "nvidiadrivers"),
            _g(SNAPSHOT_ROLE, _L, "mellanox.com", "nicclusterpolicies"),
            _g(SNAPSHOT_ROLE, _L, "sriovnetwork.openshift.io", "sriovnetworknodepolicies"),
            _g(SNAPSHOT_ROLE, _L, "sriovnetwork.openshift.io", "sriovnetworknodestates"),
            _g(SNAPSHOT_ROLE, _L, "sriovnetwork.openshift.io", "sriovoperatorconfigs"),
            _g(SNAPSHOT_ROLE, _L, "machineconfiguration.openshift.io", "machineconfigpools"),
            _g(SNAPSHOT_ROLE, _L, "config.openshift.io", "clusterversions"),
            _g(SNAPSHOT_ROLE, _L, "operators.coreos.com", "clusterserviceversions"),
            _g(SNAPSHOT_ROLE, _L, "operators.coreos.com", "subscriptions"),
            _g(SNAPSHOT_LEDGER_ROLE, _R, "", "configmaps"),
        ),
    ),
    "upgrade_plan": (
        "roles/upgrade main.yml: upgrade_ledger plan (the GPU nodes, the ledger ConfigMap)",
        (
            _g(UPGRADE_ROLE, _L, "", "nodes"),
            # Pods that hold GPUs through Dynamic Resource Allocation: their claims, where a pod names one.
            _g(UPGRADE_ROLE, _L, "resource.k8s.io", "resourceclaims"),
            _g(LEDGER_ROLE, _R, "", "configmaps"),
        ),
    ),
    "upgrade_lease": (
        "roles/upgrade main.yml: upgrade_ledger (and stage_lease) take, renew and release the stage Lease",
        (_g(LEDGER_ROLE, ("get", "create", "update"), "coordination.k8s.io", "leases"),),
    ),
    "upgrade_record": (
        "roles/upgrade main.yml: upgrade_ledger record appends to the ledger ConfigMap",
        (_g(LEDGER_ROLE, ("get", "create", "update"), "", "configmaps"),),
    ),
    "upgrade_canary_label": (
        "roles/upgrade canary/promote/rollback.yml: label or unlabel the canary Node (kubernetes.core.k8s patched)",
        (_g(UPGRADE_ROLE, ("get", "patch"), "", "nodes"),),
    ),
    "upgrade_events": (
        "roles/upgrade canary/bake/promote/rollback.yml: the stage's milestones as Events on the nodes and the "
        "component's object (cluster-scoped, so in \"default\"): upgrade_event when the canary starts, the record's "
        "upgrade_ledger run for the milestones that end a stage",
        (
            _g(UPGRADE_ROLE, _R, "", "nodes"),
            _g(NODE_EVENTS_ROLE, ("create",), "", "events"),
        ),
    ),
    "upgrade_events_gpu_operator": (
        "roles/upgrade: the milestones' Events find the ClusterPolicy they are about",
        (_g(UPGRADE_ROLE, _L, "nvidia.com", "clusterpolicies"),),
    ),
    "upgrade_events_network_operator": (
        "roles/upgrade: the milestones' Events find the NicClusterPolicy they are about",
        (_g(UPGRADE_ROLE, _L, "mellanox.com", "nicclusterpolicies"),),
    ),
    "upgrade_events_openshift": (
        "roles/upgrade: the milestones' Events find the MachineConfigPools of the nodes they are about",
        (_g(UPGRADE_ROLE, _L, "machineconfiguration.openshift.io", "machineconfigpools"),),
    ),
    "upgrade_sample": (
        "roles/upgrade sample.yml: upgrade_ledger sample (GPU nodes and the pods using their GPUs)",
        (
            _g(UPGRADE_ROLE, _L, "", "nodes"),
            _g(UPGRADE_ROLE, _L, "", "pods"),
            # Pods that hold GPUs through Dynamic Resource Allocation: their claims, where a pod names one.
            _g(UPGRADE_ROLE, _L, "resource.k8s.io", "resourceclaims"),
        ),
    ),
    "validate_gates": (
        "roles/validate: validation_gate runs one Job per gate, reads its pod and log, deletes both",
        (
            _g(LEDGER_ROLE, ("create", "list", "delete"), "batch", "jobs"),
            # Listing the gate Job's pods: the cluster-wide list of pods every stage of the upgrade account has
            # already covers the ledger namespace, so a namespaced rule for it would be granted twice (found by
            # tests/integration/test_rbac_minimal.py: taken out alone, it was not missed).
            _g(UPGRADE_ROLE, _L, "", "pods"),
            # Pods that hold GPUs through Dynamic Resource Allocation: their claims, where a pod names one.
            _g(UPGRADE_ROLE, _L, "resource.k8s.io", "resourceclaims"),
            _g(LEDGER_ROLE, ("delete",), "", "pods"),
            _g(LEDGER_ROLE, _R, "", "pods/log"),
        ),
    ),
    "gpu_operator_preflight": (
        "roles/gpu_operator preflight.yml: clusterpolicy_upgrade preflight_only (read-only)",
        (
            _g(UPGRADE_ROLE, ("get", "list"), "nvidia.com", "clusterpolicies"),
            _g(UPGRADE_ROLE, _L, "nvidia.com", "nvidiadrivers"),
            _g(UPGRADE_ROLE, _R, "apiextensions.k8s.io", "customresourcedefinitions"),
            _g(UPGRADE_ROLE, _L, "", "nodes"),
            _g(UPGRADE_ROLE, _L, "", "pods"),
            # Pods that hold GPUs through Dynamic Resource Allocation: their claims, where a pod names one.
            _g(UPGRADE_ROLE, _L, "resource.k8s.io", "resourceclaims"),
            _g(UPGRADE_ROLE, _L, "policy", "poddisruptionbudgets"),
            _g(UPGRADE_ROLE, _L, "machineconfiguration.openshift.io", "machineconfigpools"),
            _g(GPU_OPERATOR_ROLE, _L, "apps", "daemonsets"),
            # operator_find.yml, preflight_olm.yml: how the operator is installed (its Subscription, the record an
            # interrupted OLM reinstall left) and whether the catalog still carries its bundle (the way back).
            _g(GPU_OPERATOR_ROLE, _R, "operators.coreos.com", "subscriptions"),
            _g(GPU_OPERATOR_ROLE, _R, "", "configmaps"),
            _g(UPGRADE_ROLE, ("get", "list"), "packages.operators.coreos.com", "packagemanifests"),
        ),
    ),
    "gpu_operator_operator": (
        "roles/gpu_operator operator.yml, operator_olm.yml: move the operator through its OLM Subscription",
        (
            # operator_pin.yml: a driver manager the release would replace is pinned in its ClusterPolicy first
            # (gpu_operator_info reads the driver DaemonSets for the image that runs; NVIDIADriver-managed drivers
            # are pinned in their NVIDIADrivers, a write the nvidiadriver feature grants).
            _g(UPGRADE_ROLE, ("get", "list", "patch"), "nvidia.com", "clusterpolicies"),
            _g(UPGRADE_ROLE, ("get", "list"), "nvidia.com", "nvidiadrivers"),
            _g(GPU_OPERATOR_ROLE, _L, "apps", "daemonsets"),
            _g(GPU_OPERATOR_ROLE, ("get", "patch"), "operators.coreos.com", "subscriptions"),
            _g(GPU_OPERATOR_ROLE, ("get", "patch"), "operators.coreos.com", "installplans"),
            _g(GPU_OPERATOR_ROLE, _R, "operators.coreos.com", "clusterserviceversions"),
            # operator_manifests.yml reads the operator Deployment when no Subscription exists.
            _g(GPU_OPERATOR_ROLE, _R, "apps", "deployments"),
            # operator_find.yml: the record an interrupted OLM reinstall left.
            _g(GPU_OPERATOR_ROLE, _R, "", "configmaps"),
        ),
    ),
    "gpu_operator_olm_reinstall": (
        "roles/gpu_operator operator_olm_reinstall.yml: take the operator back under OLM (read the catalog, record "
        "the Subscription in a ConfigMap, delete it and the newer CSV, subscribe to the older CSV, approve its "
        "InstallPlan)",
        (
            _g(UPGRADE_ROLE, ("get", "list"), "packages.operators.coreos.com", "packagemanifests"),
            _g(GPU_OPERATOR_ROLE, ("get", "create", "patch", "delete"), "", "configmaps"),
            _g(GPU_OPERATOR_ROLE, ("get", "create", "delete"), "operators.coreos.com", "subscriptions"),
            _g(GPU_OPERATOR_ROLE, ("get", "list", "delete"), "operators.coreos.com", "clusterserviceversions"),
            _g(GPU_OPERATOR_ROLE, ("get", "patch"), "operators.coreos.com", "installplans"),
        ),
    ),
    "gpu_operator_operands": (
        "roles/gpu_operator operands.yml: pin the operand versions in the ClusterPolicy, wait for the DaemonSets",
        (
            _g(UPGRADE_ROLE, ("get", "list", "patch"), "nvidia.com", "clusterpolicies"),
            _g(GPU_OPERATOR_ROLE, _L, "apps", "daemonsets"),
        ),
    ),
    "gpu_operator_driver": (
        "roles/gpu_operator driver.yml: clusterpolicy_upgrade drives the operator's upgrade controller",
        (
            _g(UPGRADE_ROLE, ("get", "list", "patch"), "nvidia.com", "clusterpolicies"),
            _g(UPGRADE_ROLE, ("get", "list"), "nvidia.com", "nvidiadrivers"),
            _g(UPGRADE_ROLE, _R, "apiextensions.k8s.io", "customresourcedefinitions"),
            _g(UPGRADE_ROLE, ("get", "list", "patch"), "", "nodes"),
            _g(UPGRADE_ROLE, _L, "", "pods"),
            # Pods that hold GPUs through Dynamic Resource Allocation: their claims, where a pod names one.
            _g(UPGRADE_ROLE, _L, "resource.k8s.io", "resourceclaims"),
            _g(UPGRADE_ROLE, _L, "", "events"),
            # Without the upgrade controller, where the NVIDIA Maintenance Operator runs.
            _g(UPGRADE_ROLE, _NODE_MAINTENANCE, "maintenance.nvidia.com", "nodemaintenances"),
            _g(UPGRADE_ROLE, ("patch",), "maintenance.nvidia.com", "nodemaintenances/status"),
            _g(GPU_OPERATOR_ROLE, _L, "apps", "daemonsets"),
            # A fleet-wide run compares held nodes' driver pods with the DaemonSet's newest revision.
            _g(GPU_OPERATOR_ROLE, _L, "apps", "controllerrevisions"),
        ),
    ),
    "gitops_application": (
        "roles/upgrade gitops.yml and roles/gitops sync.yml: argocd_app_wait reads the Argo CD Application "
        "(GitOps mode; the change itself goes through Git)",
        (_g(UPGRADE_ROLE, _R, "argoproj.io", "applications"),),
    ),
    "gpu_operator_nvidiadriver": (
        "roles/gpu_operator driver.yml with canary_mode nvidiadriver: create, move and remove the canary NVIDIADriver",
        (_g(UPGRADE_ROLE, ("create", "patch", "delete"), "nvidia.com", "nvidiadrivers"),),
    ),
    "network_operator_version": (
        "roles/network_operator operator_version.yml: read the running operator Deployment",
        (_g(NETWORK_OPERATOR_ROLE, _R, "apps", "deployments"),),
    ),
    "network_operator_mofed": (
        "roles/network_operator mofed.yml: ofed_rolling_reload cordons, drains and reloads MOFED node by node",
        (
            _g(UPGRADE_ROLE, ("get", "list", "patch"), "mellanox.com", "nicclusterpolicies"),
            _g(UPGRADE_ROLE, ("get", "list", "patch"), "", "nodes"),
            _g(UPGRADE_ROLE, _NODE_MAINTENANCE, "maintenance.nvidia.com", "nodemaintenances"),
            _g(UPGRADE_ROLE, ("patch",), "maintenance.nvidia.com", "nodemaintenances/status"),
            _g(UPGRADE_ROLE, _L, "", "pods"),
            _g(UPGRADE_ROLE, ("create",), "", "pods/eviction"),
            _g(UPGRADE_ROLE, _L, "policy", "poddisruptionbudgets"),
            _g(UPGRADE_ROLE, _L, "", "events"),
            _g(NODE_EVENTS_ROLE, ("create",), "", "events"),
            _g(NETWORK_OPERATOR_ROLE, _L, "apps", "daemonsets"),
            _g(NETWORK_OPERATOR_ROLE, ("delete",), "", "pods"),
        ),
    ),
    "network_operator_sriov_find": (
        "roles/network_operator rollback.yml, sriov_undo.yml: look for SR-IOV pre-steps an earlier run left (the "
        "SriovOperatorConfig in any namespace, the SR-IOV operator's Deployments, the saved-state ConfigMap)",
        (
            # sriov_find.yml lists them without a namespace unless network_operator_sriov_namespace is set.
            _g(UPGRADE_ROLE, _L, "sriovnetwork.openshift.io", "sriovoperatorconfigs"),
            _g(SRIOV_OPERATOR_ROLE, _L, "apps", "deployments"),
            _g(SRIOV_OPERATOR_ROLE, _R, "", "configmaps"),
        ),
    ),
    "network_operator_helm": (
        "roles/network_operator operator.yml with network_operator_helm_chart_ref: kubernetes.core.helm upgrades the "
        "release; Helm keeps each release revision in a Secret of the release namespace (its default storage driver), "
        "so it lists, reads, creates, updates (the superseded revision) and deletes (past the history limit) Secrets "
        "there only, patches the operator Deployment and waits for its new ReplicaSet",
        (
            _g(NETWORK_OPERATOR_HELM_ROLE, ("get", "list", "create", "update", "delete"), "", "secrets"),
            # Reading the Deployment (get) is network_operator_version's, in the same namespace.
            _g(NETWORK_OPERATOR_HELM_ROLE, ("list", "patch"), "apps", "deployments"),
            _g(NETWORK_OPERATOR_HELM_ROLE, _L, "apps", "replicasets"),
        ),
    ),
    "firmware_rollout": (
        "roles/nic_firmware rollout.yml: nic_firmware_rollout cordons, drains, flashes through the BMC, uncordons",
        (
            _g(UPGRADE_ROLE, ("get", "list", "patch"), "", "nodes"),
            _g(UPGRADE_ROLE, _NODE_MAINTENANCE, "maintenance.nvidia.com", "nodemaintenances"),
            _g(UPGRADE_ROLE, ("patch",), "maintenance.nvidia.com", "nodemaintenances/status"),
            _g(UPGRADE_ROLE, _L, "", "pods"),
            # Pods that hold GPUs through Dynamic Resource Allocation: their claims, where a pod names one.
            _g(UPGRADE_ROLE, _L, "resource.k8s.io", "resourceclaims"),
            _g(UPGRADE_ROLE, ("create",), "", "pods/eviction"),
            _g(UPGRADE_ROLE, _L, "policy", "poddisruptionbudgets"),
            _g(NODE_EVENTS_ROLE, ("create",), "", "events"),
        ),
    ),
    "openshift_preflight": (
        "roles/openshift preflight.yml: clusterversion_update check (read-only)",
        (
            _g(UPGRADE_ROLE, _R, "config.openshift.io", "clusterversions"),
            _g(UPGRADE_ROLE, _L, "machineconfiguration.openshift.io", "machineconfigpools"),
            _g(UPGRADE_ROLE, _L, "", "nodes"),
        ),
    ),
    "openshift_update": (
        "roles/openshift canary/promote/rollback.yml: clusterversion_update, machineconfigpool, gpu_kernel_interlock",
        (
            _g(UPGRADE_ROLE, ("get", "patch"), "config.openshift.io", "clusterversions"),
            _g(
                UPGRADE_ROLE,
                ("get", "list", "create", "patch", "delete"),
                "machineconfiguration.openshift.io",
                "machineconfigpools",
            ),
            _g(UPGRADE_ROLE, ("list", "patch"), "", "nodes"),
            _g(UPGRADE_ROLE, _L, "nvidia.com", "clusterpolicies"),
            _g(UPGRADE_ROLE, _L, "mellanox.com", "nicclusterpolicies"),
            # gpu_kernel_interlock reads the driver-toolkit ImageStream in "openshift" (granted to every
            # authenticated user by OpenShift's bootstrap RoleBinding shared-resource-viewers there) and builds in
            # the GPU Operator's namespace.
            _g(GPU_OPERATOR_ROLE, ("get", "create", "delete"), "", "pods"),
        ),
    ),
    "sriov_operator_check": (
        "roles/sriov_operator main.yml, check.yml, prereqs.yml: read the Subscription, operator, config daemon and "
        "node states, and the cluster's OpenShift version (Red Hat's index is built per minor)",
        (
            _g(UPGRADE_ROLE, _R, "config.openshift.io", "clusterversions"),
            _g(SRIOV_OPERATOR_ROLE, _R, "operators.coreos.com", "subscriptions"),
            _g(SRIOV_OPERATOR_ROLE, _R, "apps", "deployments"),
            _g(SRIOV_OPERATOR_ROLE, _R, "apps", "daemonsets"),
            _g(SRIOV_OPERATOR_ROLE, _L, "sriovnetwork.openshift.io", "sriovnetworknodestates"),
        ),
    ),
    "sriov_operator_upgrade": (
        "roles/sriov_operator upgrade.yml: switch the channel, approve the InstallPlan, wait for the CSV",
        (
            _g(SRIOV_OPERATOR_ROLE, ("get", "patch"), "operators.coreos.com", "subscriptions"),
            _g(SRIOV_OPERATOR_ROLE, ("get", "patch"), "operators.coreos.com", "installplans"),
            _g(SRIOV_OPERATOR_ROLE, _R, "operators.coreos.com", "clusterserviceversions"),
            _g(SRIOV_OPERATOR_ROLE, ("get", "patch"), "apps", "deployments"),
        ),
    ),
}


def _doctor_reads(cluster: str, operator: str, events: str, ledger: str) -> Tuple[Grant, ...]:
    """What the doctor's diagnosis reads (plugins/module_utils/_doctor_read.py), on the given roles."""
    return (
        _g(cluster, _L, "", "nodes"),
        _g(cluster, _L, "", "pods"),
        _g(cluster, _L, "policy", "poddisruptionbudgets"),
        _g(cluster, _L, "nvidia.com", "clusterpolicies"),
        _g(cluster, _L, "nvidia.com", "nvidiadrivers"),
        _g(cluster, _L, "mellanox.com", "nicclusterpolicies"),
        _g(cluster, _L, "machineconfiguration.openshift.io", "machineconfigpools"),
        _g(operator, _L, "apps", "daemonsets"),
        _g(operator, _R, "", "pods/log"),
        _g(events, _L, "", "events"),
        _g(ledger, _R, "coordination.k8s.io", "leases"),
    )


STEPS["doctor_diagnose"] = (
    "diagnose.yml: upgrade_doctor reads with lists (nodes, policies, PDBs, pools, Node Events, the stage Lease, the "
    "pods and log tails of the stuck nodes)",
    _doctor_reads(DOCTOR_ROLE, DOCTOR_OPERATOR_ROLE, DOCTOR_NODE_EVENTS_ROLE, DOCTOR_LEDGER_ROLE),
)
STEPS["upgrade_diagnose"] = (
    "roles/upgrade main.yml, when a stage halts: upgrade_doctor diagnoses the halted nodes for the report (the reads "
    "of doctor_diagnose, on the upgrade account's roles)",
    _doctor_reads(UPGRADE_ROLE, GPU_OPERATOR_ROLE, UPGRADE_ROLE, LEDGER_ROLE),
)
STEPS["doctor_remediate"] = (
    "diagnose.yml with doctor_remediate: after the diagnosis' reads (doctor_diagnose), relabel an upgrade-failed "
    "node, evict the pods the user's selector names, restart a failing validator once, unpause a pool this "
    "collection paused, clear this collection's stale holds (the stage Lease read by the diagnosis); each recorded "
    "as a Node Event and a ledger entry",
    (
        _g(REMEDY_ROLE, ("get", "patch"), "", "nodes"),
        _g(REMEDY_ROLE, ("create",), "", "pods/eviction"),
        _g(REMEDY_ROLE, ("get", "patch"), "machineconfiguration.openshift.io", "machineconfigpools"),
        _g(REMEDY_OPERATOR_ROLE, ("get", "delete"), "", "pods"),
        _g(REMEDY_NODE_EVENTS_ROLE, ("create",), "", "events"),
        _g(REMEDY_LEDGER_ROLE, ("get", "create", "update"), "", "configmaps"),
    ),
)

# The objects playbooks/rbac.yml (roles/rbac) applies with kubernetes.core.k8s (state present reads each object,
# then creates or patches it; state absent deletes it). Granting RBAC needs more than these verbs: kube-apiserver
# lets a user create or update a ClusterRole only when it holds every permission in it (or has escalate on it), and
# bind one only when it holds its permissions (or has bind on it); _permission_check.check_rbac_apply asks both.
# bind and escalate are granted here on the shipped ClusterRoles only (resourceNames); an escalate limited by name
# covers updating an existing ClusterRole, not creating it (the authorizer is not told the name of an object being
# created), so the first apply needs a cluster administrator or an account holding the permissions it grants.
STEPS["rbac_apply"] = (
    "roles/rbac: apply the accounts' namespace, ServiceAccounts, ClusterRoles and bindings (or remove them)",
    (
        # kubernetes.core.k8s patches an existing Namespace whose definition differs from what it reads back (the
        # API server's kubernetes.io/metadata.name label): found by test_rbac.py re-applying as the rbac account.
        _g(RBAC_ROLE, ("get", "create", "patch"), "", "namespaces"),
        _g(RBAC_ROLE, ("get", "create", "patch", "delete"), "", "serviceaccounts"),
        _g(RBAC_ROLE, ("get", "create", "patch", "delete"), "rbac.authorization.k8s.io", "clusterroles"),
        _g(RBAC_ROLE, ("get", "create", "patch", "delete"), "rbac.authorization.k8s.io", "clusterrolebindings"),
        _g(RBAC_ROLE, ("get", "create", "patch", "delete"), "rbac.authorization.k8s.io", "rolebindings"),
        Grant(
            role=RBAC_ROLE,
            verbs=("bind", "escalate"),
            group="rbac.authorization.k8s.io",
            resource="clusterroles",
            resource_names=tuple(
                sorted(info.name for info in (*CLUSTER_ROLES, *POD_CLUSTER_ROLES) if info.name != RBAC_ROLE)
            ),
        ),
    ),
)

# Every stage of upgrade.yml plans, takes the Lease and records (a refused or failed one too).
# A stage that halts asks the doctor why the halted nodes are stuck (the report's diagnosis and its Next), so the
# upgrade account holds the diagnosis' reads too (upgrade_diagnose), on its own roles.
_UPGRADE_FRAME = ("upgrade_plan", "upgrade_lease", "upgrade_diagnose", "upgrade_record")
_VALIDATE = ("validate_gates",)

# The component role's steps per group and action (roles/upgrade component.yml hands the action over).
COMPONENT_STEPS: Dict[str, Dict[str, Tuple[str, ...]]] = {
    "gpu_operator": {
        "preflight": ("gpu_operator_preflight",),
        "canary": ("gpu_operator_operator", "gpu_operator_operands", "gpu_operator_driver"),
        "promote": ("gpu_operator_driver", "gpu_operator_operands"),
        "rollback": (
            "gpu_operator_operator",
            "gpu_operator_olm_reinstall",
            "gpu_operator_driver",
            "gpu_operator_operands",
        ),
    },
    "network_operator": {
        "preflight": ("network_operator_version", "network_operator_mofed"),
        "canary": ("network_operator_version", "network_operator_mofed"),
        "promote": ("network_operator_mofed",),
        "rollback": ("network_operator_version", "network_operator_sriov_find", "network_operator_mofed"),
    },
    "firmware": {
        "preflight": ("firmware_rollout",),
        "canary": ("firmware_rollout",),
        "promote": ("firmware_rollout",),
        "rollback": ("firmware_rollout",),
    },
    "openshift": {
        "preflight": ("openshift_preflight",),
        "canary": ("openshift_update",),
        "promote": ("openshift_update",),
        "rollback": ("openshift_update",),
    },
    "sriov_operator": {
        "preflight": ("sriov_operator_check",),
        "canary": ("sriov_operator_check", "sriov_operator_upgrade"),
        "promote": ("sriov_operator_check", "sriov_operator_upgrade"),
        "rollback": ("sriov_operator_check", "sriov_operator_upgrade"),
    },
}

# Steps a feature adds, per group (None: whatever the group).
FEATURE_STEPS: Dict[str, Dict[Optional[str], Tuple[str, ...]]] = {
    "matrix_configmap": {None: ("audit_matrix_configmap",)},
    "nvidiadriver": {"gpu_operator": ("gpu_operator_nvidiadriver",)},
    "doctor_remediate": {None: ("doctor_remediate",)},
    "network_operator_helm": {"network_operator": ("network_operator_helm",)},
    "gitops": {"gpu_operator": ("gitops_application",), "network_operator": ("gitops_application",)},
}


def steps_for(*, playbook: str, stage: str = "", group: str = "", features: Iterable[str] = ()) -> Tuple[str, ...]:
    """The steps a run does, in order and without repeats. Pure; raises ValueError naming what is unknown."""
    wanted = set(features)
    unknown = sorted(wanted - set(FEATURES))
    if unknown:
        raise ValueError(f"unknown features {', '.join(unknown)} (known: {', '.join(FEATURES)})")
    if playbook == "audit":
        steps: List[str] = ["audit_cluster"]
    elif playbook == "rehearse":
        # The snapshot's reads; the rehearsed stage runs against the twin, with the twin's own credentials.
        steps = ["rehearse_snapshot"]
    elif playbook == "diagnose":
        steps = ["doctor_diagnose"]
    elif playbook == "rbac":
        steps = ["rbac_apply"]
    elif playbook == "upgrade":
        if stage not in STAGES:
            raise ValueError(f"stage must be one of {', '.join(STAGES)} (got {stage!r})")
        if group not in COMPONENT_STEPS:
            raise ValueError(f"group must be one of {', '.join(COMPONENT_STEPS)} (got {group!r})")
        component = COMPONENT_STEPS[group]
        steps = list(_UPGRADE_FRAME)
        # Every stage records its milestones as Events (on the group's object where it has one).
        steps += ["upgrade_events"] + ([f"upgrade_events_{group}"] if f"upgrade_events_{group}" in STEPS else [])
        if stage == "canary":
            steps += [*component["preflight"], "upgrade_canary_label", *component["canary"], *_VALIDATE]
        elif stage == "bake":
            steps += list(_VALIDATE)
            if "rollback_on_bake_failure" in wanted:
                steps += [*component["rollback"], "upgrade_canary_label"]
        elif stage == "promote":
            steps += [*component["preflight"], *component["promote"], "upgrade_sample", *_VALIDATE]
            steps += ["upgrade_canary_label"]
        else:
            steps += [*component["rollback"], "upgrade_canary_label", "upgrade_sample", *_VALIDATE]
    else:
        raise ValueError(f"playbook must be one of {', '.join(PLAYBOOKS)} (got {playbook!r})")
    for feature in sorted(wanted):
        by_group = FEATURE_STEPS.get(feature, {})
        steps += list(by_group.get(None, ())) + list(by_group.get(group, ()) if group else ())
    return tuple(dict.fromkeys(steps))


def split_resource(resource: str) -> Tuple[str, str]:
    """``pods/eviction`` -> (``pods``, ``eviction``)."""
    name, _sep, sub = resource.partition("/")
    return name, sub


def permissions_for(steps: Sequence[str], *, namespaces: Mapping[str, str]) -> List[Permission]:
    """Every (verb, group, resource, namespace) the steps need, once each, with its ClusterRole and steps.

    ``namespaces`` maps each namespace key the steps' ClusterRoles are bound
    in to the cluster's namespace; a missing key is a ValueError naming it.
    """
    found: Dict[Tuple[str, str, str, str, str], Tuple[str, List[str]]] = {}
    for step in steps:
        if step not in STEPS:
            raise ValueError(f"unknown step {step!r}")
        for grant in STEPS[step][1]:
            if grant.resource_names:
                # Asked object by object (check_rbac_apply): an access review of no name would not match the rule.
                continue
            scope = ROLES_BY_NAME[grant.role].scope
            namespace = ""
            if scope != CLUSTER:
                namespace = FIXED_NAMESPACES.get(scope) or str(namespaces.get(scope) or "")
                if not namespace:
                    raise ValueError(f"step {step} needs the {scope} namespace, which was not given")
            resource, sub = split_resource(grant.resource)
            for verb in grant.verbs:
                key = (verb, grant.group, resource, sub, namespace)
                used_by = found.setdefault(key, (grant.role, []))[1]
                if step not in used_by:
                    used_by.append(step)
    return [
        Permission(
            verb=verb, group=group, resource=resource, subresource=sub, namespace=ns, role=role, steps=tuple(steps_)
        )
        for (verb, group, resource, sub, ns), (role, steps_) in found.items()
    ]


def namespace_keys_for(steps: Sequence[str]) -> FrozenSet[str]:
    """The namespace keys the steps need resolved (besides the fixed ones)."""
    return frozenset(
        ROLES_BY_NAME[grant.role].scope
        for step in steps
        for grant in STEPS[step][1]
        if ROLES_BY_NAME[grant.role].scope not in (CLUSTER, *FIXED_NAMESPACES)
    )


def grants_by_role() -> Dict[str, Dict[Tuple[str, str, Tuple[str, ...]], Dict[str, List[str]]]]:
    """ClusterRole -> (group, resource, resourceNames) -> verb -> the steps needing it: what rbac/ must grant."""
    table: Dict[str, Dict[Tuple[str, str, Tuple[str, ...]], Dict[str, List[str]]]] = {
        info.name: {} for info in CLUSTER_ROLES
    }
    for step, (_what, grants) in STEPS.items():
        for grant in grants:
            verbs = table[grant.role].setdefault((grant.group, grant.resource, grant.resource_names), {})
            for verb in grant.verbs:
                verbs.setdefault(verb, [])
                if step not in verbs[verb]:
                    verbs[verb].append(step)
    return table


def refusal_message(missing: Sequence[Permission], *, what: str) -> str:
    """The message of a refused run: each missing permission and the ClusterRole (and binding) that grants it."""
    lines = []
    for item in missing:
        info = ROLES_BY_NAME[item.role]
        binding = "a ClusterRoleBinding" if info.scope == CLUSTER else f'a RoleBinding in namespace "{item.namespace}"'
        lines.append(
            f"{item.describe()} (needed by {', '.join(item.steps)}; granted by ClusterRole {item.role} "
            f"in rbac/{info.manifest} through {binding})"
        )
    return f"{what}: the credentials lack {len(missing)} permission(s), so nothing was changed: " + "; ".join(lines)


# -- 403s ------------------------------------------------------------------------------------------
_VERBS_BY_METHOD = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def request_attributes(
    method: str, path: str, *, query: Optional[Mapping[str, object]] = None
) -> Optional[Dict[str, str]]:
    """The authorization attributes of a resource request (as kube-apiserver's RequestInfoFactory derives them).

    Pure; None for a path that is not a resource request (``/version``...).
    """
    parts = [part for part in path.split("?", 1)[0].strip("/").split("/") if part]
    if parts[:1] == ["api"] and len(parts) >= 2:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    namespace = ""
    # /namespaces/<ns>/<resource>/... is namespaced; /namespaces and /namespaces/<name> are the Namespace kind.
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    method = method.upper()
    if method == "GET":
        watching = str((query or {}).get("watch") or "").lower() in ("1", "true")
        verb = "watch" if watching else ("get" if name else "list")
    elif method == "DELETE" and not name:
        verb = "deletecollection"
    else:
        verb = _VERBS_BY_METHOD.get(method, method.lower())
    return {
        "verb": verb,
        "group": group,
        "resource": resource,
        "subresource": subresource,
        "namespace": namespace,
        "name": name,
    }


def roles_granting(*, verb: str, group: str, resource: str, subresource: str = "") -> List[ClusterRoleInfo]:
    """The shipped ClusterRoles that grant the verb on the resource, in table order."""
    wanted = resource + (f"/{subresource}" if subresource else "")
    names = {
        grant.role
        for _what, grants in STEPS.values()
        for grant in grants
        if grant.group == group and grant.resource == wanted and verb in grant.verbs
    }
    return [info for info in CLUSTER_ROLES if info.name in names]


def forbidden_detail(method: str, path: str, *, query: Optional[Mapping[str, object]] = None) -> str:
    """What a 403 on this request lacks, worded like the preflight's refusal, and where it is granted."""
    attributes = request_attributes(method, path, query=query)
    if attributes is None:
        return ""
    return _missing_detail(attributes)


def _missing_detail(attributes: Mapping[str, str]) -> str:
    what = attributes["resource"] + (f"/{attributes['subresource']}" if attributes["subresource"] else "")
    where = f'in namespace "{attributes["namespace"]}"' if attributes["namespace"] else "at the cluster scope"
    roles = roles_granting(
        verb=attributes["verb"],
        group=attributes["group"],
        resource=attributes["resource"],
        subresource=attributes["subresource"],
    )
    if roles:
        granted = "; check ClusterRole " + " or ".join(
            f"{info.name} (rbac/{info.manifest}, "
            + ("bound by a ClusterRoleBinding" if info.scope == CLUSTER else "bound by a RoleBinding there")
            + ")"
            for info in roles
        )
    else:
        granted = "; no ClusterRole shipped in rbac/ grants it (the collection does not expect to need it)"
    return f'missing permission: {attributes["verb"]} {what} in API group "{attributes["group"]}" {where}{granted}'


# kube-apiserver's wording of an RBAC refusal (apiserver's responsewriters.forbiddenMessage), also when it arrives
# JSON-escaped inside another message (kubernetes.core's "Failed to patch object: {...}"): the quotes may carry
# backslashes.
_FORBIDDEN_WORDING = re.compile(
    r'cannot (?P<verb>[a-z]+) resource \\*"(?P<resource>[^"\\]+)\\*" in API group \\*"(?P<group>[^"\\]*)\\*" '
    r'(?:at the cluster scope|in the namespace \\*"(?P<namespace>[^"\\]+)\\*")'
)


def forbidden_detail_of_message(message: str) -> str:
    """The detail of ``forbidden_detail`` read from a 403's message in kube-apiserver's words; "" when there is none.

    For the 403s of tasks whose request the collection does not see (kubernetes.core's modules). Pure.
    """
    found = _FORBIDDEN_WORDING.search(message or "")
    if found is None:
        return ""
    resource, sub = split_resource(found.group("resource"))
    return _missing_detail(
        {
            "verb": found.group("verb"),
            "group": found.group("group"),
            "resource": resource,
            "subresource": sub,
            "namespace": found.group("namespace") or "",
        }
    )
