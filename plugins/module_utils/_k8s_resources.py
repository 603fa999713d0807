# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Where each kind the collection uses lives in the REST API (collection-internal).

Plain data, apart from the client in ``_k8s`` so that the helpers the client
itself uses (the stage Lease) can name their kinds without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional
from urllib.parse import quote


@dataclass(frozen=True)
class ResourceRef:
    """Where a kind lives in the REST API."""

    api_version: str
    plural: str
    kind: str
    namespaced: bool

    def path(self, *, namespace: Optional[str] = None, name: Optional[str] = None, subresource: str = "") -> str:
        base = f"/apis/{self.api_version}" if "/" in self.api_version else f"/api/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name:
            base += f"/{quote(name, safe='')}"
        if subresource:
            base += f"/{subresource}"
        return base


NODES = ResourceRef("v1", "nodes", "Node", False)
PODS = ResourceRef("v1", "pods", "Pod", True)
EVENTS = ResourceRef("v1", "events", "Event", True)
CONFIGMAPS = ResourceRef("v1", "configmaps", "ConfigMap", True)
SECRETS = ResourceRef("v1", "secrets", "Secret", True)
NAMESPACES = ResourceRef("v1", "namespaces", "Namespace", False)
DAEMONSETS = ResourceRef("apps/v1", "daemonsets", "DaemonSet", True)
CONTROLLER_REVISIONS = ResourceRef("apps/v1", "controllerrevisions", "ControllerRevision", True)
DEPLOYMENTS = ResourceRef("apps/v1", "deployments", "Deployment", True)
JOBS = ResourceRef("batch/v1", "jobs", "Job", True)
PDBS = ResourceRef("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", True)
CLUSTER_POLICIES = ResourceRef("nvidia.com/v1", "clusterpolicies", "ClusterPolicy", False)
NVIDIA_DRIVERS = ResourceRef("nvidia.com/v1alpha1", "nvidiadrivers", "NVIDIADriver", False)
NIC_CLUSTER_POLICIES = ResourceRef("mellanox.com/v1alpha1", "nicclusterpolicies", "NicClusterPolicy", False)
MACHINE_CONFIG_POOLS = ResourceRef(
    "machineconfiguration.openshift.io/v1", "machineconfigpools", "MachineConfigPool", False
)
CLUSTER_VERSIONS = ResourceRef("config.openshift.io/v1", "clusterversions", "ClusterVersion", False)
CSVS = ResourceRef("operators.coreos.com/v1alpha1", "clusterserviceversions", "ClusterServiceVersion", True)
SUBSCRIPTIONS = ResourceRef("operators.coreos.com/v1alpha1", "subscriptions", "Subscription", True)
INSTALL_PLANS = ResourceRef("operators.coreos.com/v1alpha1", "installplans", "InstallPlan", True)
IMAGE_STREAMS = ResourceRef("image.openshift.io/v1", "imagestreams", "ImageStream", True)
LEASES = ResourceRef("coordination.k8s.io/v1", "leases", "Lease", True)
# Argo CD's Application (GitOps mode reads it, never writes it).
ARGOCD_APPLICATIONS = ResourceRef("argoproj.io/v1alpha1", "applications", "Application", True)
# The NVIDIA Maintenance Operator's node requests (drains go through it when the cluster serves them).
NODE_MAINTENANCES = ResourceRef("maintenance.nvidia.com/v1alpha1", "nodemaintenances", "NodeMaintenance", True)
# The GPU Operator's driver DaemonSets and pods, ClusterPolicy- and NVIDIADriver-managed alike.
DRIVER_SELECTOR = "app.kubernetes.io/component=nvidia-driver"
# Dynamic Resource Allocation claims (GA in Kubernetes 1.34): pods that get GPUs this way request no nvidia.com/gpu.
RESOURCE_CLAIMS = ResourceRef("resource.k8s.io/v1", "resourceclaims", "ResourceClaim", True)
