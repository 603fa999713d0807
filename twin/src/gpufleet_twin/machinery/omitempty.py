"""Zero values a real API server never returns: the ``omitempty`` fields of the built-in Go types.

kube-apiserver decodes every write into the Go struct of its kind and encodes
that struct again, so a field tagged ``json:",omitempty"`` that holds its
zero value vanishes from what is stored: ``{"spec":{"unschedulable":false}}``
reads back without ``unschedulable``, ``"taints": []`` without ``taints``.
Only value fields are dropped this way: a pointer field (``*bool``,
``*int32``) keeps ``false``/``0`` (its pointer is not nil), and a field
without ``omitempty`` (``ReplicaSetStatus.replicas``, the DaemonSet and PDB
status counters, ``ContainerStatus.ready``/``restartCount``) stays at 0.
A JSON ``null`` decodes to the zero value (nil for pointers, slices, maps),
so it goes too from any field listed here.

The table lists, per kind, the paths of such fields (``[]`` descends into
list items) with the Go file their tag is read from; struct-valued fields
(``spec``, ``status``, ``state``) are never dropped: encoding/json omits no
struct.  ``prune`` is a store admission hook, so it applies to every create,
update and patch of a built-in kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from .registry import ResourceType

Obj = dict[str, Any]

# k8s.io/apimachinery pkg/apis/meta/v1/types.go ObjectMeta: every field but creationTimestamp (a struct).
OBJECT_META = tuple(
    f"metadata.{name}"
    for name in (
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    )
)

_POLICY_RULES = tuple(f"rules[].{name}" for name in ("apiGroups", "resources", "resourceNames", "nonResourceURLs"))
_SUBJECTS = ("subjects", "subjects[].apiGroup", "subjects[].namespace")
# k8s.io/api core/v1/types.go Container (value fields with omitempty; name has none).
_CONTAINER = (
    "image",
    "command",
    "args",
    "workingDir",
    "ports",
    "envFrom",
    "env",
    "volumeMounts",
    "volumeDevices",
    "terminationMessagePath",
    "terminationMessagePolicy",
    "imagePullPolicy",
    "stdin",
    "stdinOnce",
    "tty",
    "resizePolicy",
)
# core/v1/types.go Toleration: key, operator, value, effect are omitempty strings (tolerationSeconds is *int64).
_TOLERATION = ("key", "operator", "value", "effect")
# core/v1/types.go PodSpec (pointer fields such as terminationGracePeriodSeconds, priority,
# automountServiceAccountToken are left alone).
_POD_SPEC = (
    "volumes",
    "initContainers",
    "ephemeralContainers",
    "restartPolicy",
    "dnsPolicy",
    "nodeSelector",
    "serviceAccountName",
    "serviceAccount",
    "nodeName",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "imagePullSecrets",
    "hostname",
    "subdomain",
    "schedulerName",
    "tolerations",
    "hostAliases",
    "priorityClassName",
    "readinessGates",
    "topologySpreadConstraints",
    *(f"containers[].{name}" for name in _CONTAINER),
    *(f"initContainers[].{name}" for name in _CONTAINER),
    *(f"tolerations[].{name}" for name in _TOLERATION),
)
# core/v1/types.go PodStatus and ContainerStatus (ContainerStatus.name, ready, restartCount, image, imageID
# have no omitempty; state and lastState are structs).
_POD_STATUS = (
    "phase",
    "conditions",
    "message",
    "reason",
    "nominatedNodeName",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "initContainerStatuses",
    "containerStatuses",
    "qosClass",
    "containerStatuses[].containerID",
    "initContainerStatuses[].containerID",
)
# core/v1/types.go PodTemplateSpec inside the workloads: its metadata and spec.
_TEMPLATE = (
    *(f"spec.template.metadata.{name}" for name in ("name", "generateName", "namespace", "labels", "annotations")),
    *(f"spec.template.spec.{path}" for path in _POD_SPEC),
)


def _device_claim(path: str) -> tuple[str, ...]:
    exactly = f"{path}.requests[].exactly"
    return (
        f"{path}.requests",
        f"{path}.constraints",
        f"{path}.config",
        f"{path}.requests[].firstAvailable",
        f"{exactly}.selectors",
        f"{exactly}.allocationMode",
        f"{exactly}.count",
        f"{exactly}.tolerations",
    )


OMITEMPTY: Mapping[tuple[str, str], tuple[str, ...]] = MappingProxyType(
    {
        # core/v1/types.go NodeSpec (podCIDR, podCIDRs, providerID, unschedulable, taints, externalID),
        # Taint (value; key and effect have no omitempty), NodeStatus (value fields).
        ("", "nodes"): (
            "spec.podCIDR",
            "spec.podCIDRs",
            "spec.providerID",
            "spec.unschedulable",
            "spec.taints",
            "spec.externalID",
            "spec.taints[].value",
            "status.capacity",
            "status.allocatable",
            "status.phase",
            "status.conditions",
            "status.addresses",
            "status.images",
            "status.volumesInUse",
            "status.volumesAttached",
        ),
        ("", "pods"): (*(f"spec.{path}" for path in _POD_SPEC), *(f"status.{path}" for path in _POD_STATUS)),
        # core/v1/types.go NamespaceSpec.finalizers, NamespaceStatus.phase and conditions.
        ("", "namespaces"): ("spec.finalizers", "status.phase", "status.conditions"),
        # core/v1/types.go ConfigMap (data, binaryData; immutable is *bool) and Secret (data, stringData, type).
        ("", "configmaps"): ("data", "binaryData"),
        ("", "secrets"): ("data", "stringData", "type"),
        # core/v1/types.go ServiceAccount (secrets, imagePullSecrets; automountServiceAccountToken is *bool).
        ("", "serviceaccounts"): ("secrets", "imagePullSecrets"),
        # apps/v1/types.go DaemonSetSpec.minReadySeconds, DaemonSetStatus: currentNumberScheduled,
        # numberMisscheduled, desiredNumberScheduled and numberReady have no omitempty and stay.
        ("apps", "daemonsets"): (
            "spec.minReadySeconds",
            *_TEMPLATE,
            "status.observedGeneration",
            "status.updatedNumberScheduled",
            "status.numberAvailable",
            "status.numberUnavailable",
            "status.conditions",
        ),
        # apps/v1/types.go DeploymentSpec (paused, minReadySeconds; replicas is *int32), DeploymentStatus
        # (every counter is omitempty).
        ("apps", "deployments"): (
            "spec.paused",
            "spec.minReadySeconds",
            *_TEMPLATE,
            "status.observedGeneration",
            "status.replicas",
            "status.updatedReplicas",
            "status.readyReplicas",
            "status.availableReplicas",
            "status.unavailableReplicas",
            "status.conditions",
        ),
        # apps/v1/types.go ReplicaSetSpec.minReadySeconds, ReplicaSetStatus (replicas has no omitempty).
        ("apps", "replicasets"): (
            "spec.minReadySeconds",
            *_TEMPLATE,
            "status.fullyLabeledReplicas",
            "status.readyReplicas",
            "status.availableReplicas",
            "status.observedGeneration",
            "status.conditions",
        ),
        # batch/v1/types.go JobStatus (active, succeeded, failed, completedIndexes, conditions).
        ("batch", "jobs"): (
            *_TEMPLATE,
            "status.conditions",
            "status.active",
            "status.succeeded",
            "status.failed",
            "status.completedIndexes",
        ),
        # policy/v1/types.go PodDisruptionBudgetStatus: observedGeneration, disruptedPods, conditions
        # (disruptionsAllowed, currentHealthy, desiredHealthy, expectedPods have no omitempty).
        ("policy", "poddisruptionbudgets"): ("status.observedGeneration", "status.disruptedPods", "status.conditions"),
        # coordination/v1/types.go LeaseSpec: every field is a pointer, so only metadata applies.
        ("coordination.k8s.io", "leases"): (),
        # rbac/v1/types.go: PolicyRule (verbs has no omitempty), Subject (kind and name have none),
        # RoleBinding.subjects; rules and roleRef have no omitempty.
        ("rbac.authorization.k8s.io", "roles"): _POLICY_RULES,
        ("rbac.authorization.k8s.io", "clusterroles"): _POLICY_RULES,
        ("rbac.authorization.k8s.io", "rolebindings"): _SUBJECTS,
        ("rbac.authorization.k8s.io", "clusterrolebindings"): _SUBJECTS,
        # resource/v1/types.go: DeviceClassSpec (selectors, config), DeviceClaim (requests, constraints,
        # config), DeviceRequest.firstAvailable, ExactDeviceRequest (selectors, allocationMode, count,
        # tolerations), ResourceClaimStatus (reservedFor, devices), ResourceSliceSpec (devices,
        # sharedCounters; nodeName, allNodes and the selectors are pointers).
        ("resource.k8s.io", "deviceclasses"): ("spec.selectors", "spec.config"),
        ("resource.k8s.io", "resourceclaims"): (
            *_device_claim("spec.devices"),
            "status.reservedFor",
            "status.devices",
        ),
        ("resource.k8s.io", "resourceclaimtemplates"): _device_claim("spec.spec.devices"),
        ("resource.k8s.io", "resourceslices"): ("spec.devices", "spec.sharedCounters"),
    }
)


def prune(operation: str, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
    """Store admission hook: drop the zero values of ``omitempty`` fields of built-in kinds."""
    del operation, old
    paths = OMITEMPTY.get(rtype.key)
    if paths is None:
        return
    for path in (*OBJECT_META, *paths):
        _drop_zero(obj, path.split("."))


def _drop_zero(node: Any, parts: list[str]) -> None:
    if not parts or not isinstance(node, dict):
        return
    head, rest = parts[0], parts[1:]
    if head.endswith("[]"):
        items = node.get(head[:-2])
        if isinstance(items, list):
            for item in items:
                _drop_zero(item, rest)
        return
    if head not in node:
        return
    if rest:
        _drop_zero(node[head], rest)
    elif _is_zero(node[head]):
        del node[head]


def _is_zero(value: Any) -> bool:
    if value is None or value is False:
        return True
    if isinstance(value, bool):
        return False
    return value in (0, "", [], {})
