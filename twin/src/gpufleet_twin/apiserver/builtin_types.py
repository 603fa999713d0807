"""The built-in kinds the twin serves, and the ``kubectl get`` columns of each.

A real API server renders ``kubectl get`` output itself (the Table format of
meta.k8s.io): printers compiled into the server compute the cells of built-in
kinds (``READY 1/1``, ``STATUS Ready,SchedulingDisabled``, ages as ``5m2s``),
and CRDs name their cells by JSONPath (``additionalPrinterColumns``).  Both
live here: ``BUILTIN_TYPES`` (with their columns as ``PrinterColumn`` for the
column definitions), ``builtin_cells`` for the computed cells, and
``jsonpath_cells`` for CRD-style columns.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from ..machinery.clock import parse_rfc3339
from ..machinery.registry import PrinterColumn, ResourceType

Obj = dict[str, Any]
# Cells after NAME for one object, given the simulated time "now" (epoch seconds).
CellsFunction = Callable[[Obj, float], list[Any]]

NONE = "<none>"
UNKNOWN = "<unknown>"


def _col(
    name: str, type_: str = "string", *, priority: int = 0, description: str = "", format_: str = ""
) -> PrinterColumn:
    # Built-in cells are computed by functions, not JSONPath; json_path stays empty.
    return PrinterColumn(
        name=name, json_path="", type=type_, description=description, priority=priority, format=format_
    )


NAME_COLUMN = PrinterColumn(
    name="Name",
    json_path=".metadata.name",
    format="name",
    description="Name must be unique within a namespace. Cannot be updated.",
)
# The event printer starts with LAST SEEN and shows the name only in wide output.
_WITHOUT_LEADING_NAME = frozenset({("", "events"), ("events.k8s.io", "events")})
_AGE = _col(
    "Age", description="CreationTimestamp is a timestamp representing the server time when this object was created."
)
_WORKLOAD_WIDE = (
    _col("Containers", priority=1, description="Names of each container in the template."),
    _col("Images", priority=1, description="Images referenced by each container in the template."),
    _col("Selector", priority=1, description="Label selector of the pods."),
)


def _rt(
    group: str,
    kind: str,
    plural: str,
    *,
    namespaced: bool,
    short_names: tuple[str, ...] = (),
    categories: tuple[str, ...] = (),
    subresources: frozenset[str] = frozenset(),
    columns: tuple[PrinterColumn, ...] = (_AGE,),
    version: str = "v1",
    verbs: tuple[str, ...] | None = None,
    schema: Obj | None = None,
) -> ResourceType:
    extra: dict[str, Any] = {}
    if verbs is not None:
        extra["verbs"] = verbs
    return ResourceType(
        group=group,
        version=version,
        kind=kind,
        plural=plural,
        namespaced=namespaced,
        singular=kind.lower(),
        short_names=short_names,
        categories=categories,
        subresources=subresources,
        printer_columns=columns,
        schema=schema,
        **extra,
    )


_STATUS = frozenset({"status"})

# ClusterServiceVersion is a CRD of OLM on a real cluster; the twin serves it
# as its own kind with the few fields the collection reads, and keeps the rest.
_CSV_SCHEMA: Obj = {
    "type": "object",
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {
                "version": {"type": "string"},
                "displayName": {"type": "string"},
                "replaces": {"type": "string"},
            },
        },
        "status": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "properties": {"phase": {"type": "string"}, "reason": {"type": "string"}, "message": {"type": "string"}},
        },
    },
}

_ROLE_COLUMNS = (_col("Created At", "date", description=_AGE.description),)
_BINDING_COLUMNS = (
    _col("Role", description="Role of the binding."),
    _AGE,
    _col("Users", priority=1, description="Users in the binding."),
    _col("Groups", priority=1, description="Groups in the binding."),
    _col("ServiceAccounts", priority=1, description="ServiceAccounts in the binding."),
)

BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _rt(
        "",
        "Namespace",
        "namespaces",
        namespaced=False,
        short_names=("ns",),
        subresources=frozenset({"status", "finalize"}),
        columns=(_col("Status", description="The status of the namespace"), _AGE),
    ),
    _rt(
        "",
        "Node",
        "nodes",
        namespaced=False,
        short_names=("no",),
        subresources=_STATUS,
        columns=(
            _col("Status", description="The status of the node"),
            _col("Roles", description="The roles of the node"),
            _AGE,
            _col("Version", description="Kubelet Version reported by the node."),
            _col("Internal-IP", priority=1, description="List of internal IPs in the node."),
            _col("External-IP", priority=1, description="List of external IPs in the node."),
            _col("OS-Image", priority=1, description="OS Image reported by the node from /etc/os-release."),
            _col("Kernel-Version", priority=1, description="Kernel Version reported by the node."),
            _col("Container-Runtime", priority=1, description="Container Runtime Version reported by the node."),
        ),
    ),
    _rt(
        "",
        "Pod",
        "pods",
        namespaced=True,
        short_names=("po",),
        categories=("all",),
        subresources=frozenset({"status", "eviction", "log", "binding"}),
        columns=(
            _col("Ready", description="The aggregate readiness state of this pod for accepting traffic."),
            _col("Status", description="The aggregate status of the containers in this pod."),
            _col("Restarts", description="The number of times the containers in this pod have been restarted."),
            _AGE,
            _col("IP", priority=1, description="IP address allocated to the pod."),
            _col("Node", priority=1, description="Name of the node this pod is assigned to."),
            _col("Nominated Node", priority=1, description="Name of the node where the pod is nominated to run."),
            _col("Readiness Gates", priority=1, description="The readiness gates of the pod."),
        ),
    ),
    _rt(
        "",
        "Event",
        "events",
        namespaced=True,
        short_names=("ev",),
        columns=(
            _col("Last Seen", description="The last time the event was seen."),
            _col("Type", description="Type of this event (Normal, Warning)."),
            _col("Reason", description="Why the action was taken."),
            _col("Object", description="The object this Event is about."),
            _col("Subobject", priority=1, description="The part of the object this Event is about."),
            _col("Source", priority=1, description="The component reporting this event."),
            _col("Message", description="A human-readable description of the status of this operation."),
            _col("First Seen", priority=1, description="The first time the event was seen."),
            _col("Count", "integer", priority=1, description="The number of times this event has occurred."),
            _col("Name", priority=1, format_="name", description="Name of the event."),
        ),
    ),
    _rt(
        "events.k8s.io",
        "Event",
        "events",
        namespaced=True,
        short_names=("ev",),
        columns=(
            _col("Last Seen", description="The last time the event was seen."),
            _col("Type", description="Type of this event (Normal, Warning)."),
            _col("Reason", description="Why the action was taken."),
            _col("Object", description="The object this Event is about."),
            _col("Message", description="A human-readable description of the status of this operation."),
            _col("Name", priority=1, format_="name", description="Name of the event."),
        ),
    ),
    _rt(
        "",
        "ConfigMap",
        "configmaps",
        namespaced=True,
        short_names=("cm",),
        columns=(_col("Data", "integer", description="Number of keys in data and binaryData."), _AGE),
    ),
    _rt(
        "",
        "Secret",
        "secrets",
        namespaced=True,
        columns=(
            _col("Type", description="The type of the secret."),
            _col("Data", "integer", description="Number of keys in the secret."),
            _AGE,
        ),
    ),
    _rt(
        "",
        "ServiceAccount",
        "serviceaccounts",
        namespaced=True,
        short_names=("sa",),
        # TokenRequest (``kubectl create token``): see ``serviceaccount_tokens``.
        subresources=frozenset({"token"}),
        columns=(_col("Secrets", "integer", description="Number of secrets of the service account."), _AGE),
    ),
    _rt(
        "",
        "Service",
        "services",
        namespaced=True,
        short_names=("svc",),
        categories=("all",),
        subresources=_STATUS,
        columns=(
            _col("Type", description="The type of the service."),
            _col("Cluster-IP", description="IP allocated to the service."),
            _col("External-IP", description="External IPs of the service."),
            _col("Port(s)", description="Ports the service exposes."),
            _AGE,
            _col("Selector", priority=1, description="Route traffic to pods with these labels."),
        ),
    ),
    _rt(
        "",
        "Endpoints",
        "endpoints",
        namespaced=True,
        short_names=("ep",),
        columns=(_col("Endpoints", description="Endpoints of the service."), _AGE),
    ),
    _rt(
        "apps",
        "DaemonSet",
        "daemonsets",
        namespaced=True,
        short_names=("ds",),
        categories=("all",),
        subresources=_STATUS,
        columns=(
            _col("Desired", "integer", description="The number of nodes that should be running the daemon pod."),
            _col("Current", "integer", description="The number of nodes running at least one daemon pod."),
            _col("Ready", "integer", description="The number of nodes running a ready daemon pod."),
            _col("Up-to-date", "integer", description="The number of nodes running the updated daemon pod."),
            _col("Available", "integer", description="The number of nodes running an available daemon pod."),
            _col("Node Selector", description="The node selector of the daemon pods."),
            _AGE,
            *_WORKLOAD_WIDE,
        ),
    ),
    _rt(
        "apps",
        "Deployment",
        "deployments",
        namespaced=True,
        short_names=("deploy",),
        categories=("all",),
        subresources=frozenset({"status", "scale"}),
        columns=(
            _col("Ready", description="Number of the pod with ready state"),
            _col("Up-to-date", "integer", description="Total number of pods with the desired template."),
            _col("Available", "integer", description="Total number of available pods."),
            _AGE,
            *_WORKLOAD_WIDE,
        ),
    ),
    _rt(
        "apps",
        "ReplicaSet",
        "replicasets",
        namespaced=True,
        short_names=("rs",),
        categories=("all",),
        subresources=frozenset({"status", "scale"}),
        columns=(
            _col("Desired", "integer", description="Number of desired pods."),
            _col("Current", "integer", description="Number of actual replicas."),
            _col("Ready", "integer", description="The number of ready replicas."),
            _AGE,
            *_WORKLOAD_WIDE,
        ),
    ),
    _rt(
        "apps",
        "StatefulSet",
        "statefulsets",
        namespaced=True,
        short_names=("sts",),
        categories=("all",),
        subresources=frozenset({"status", "scale"}),
        columns=(
            _col("Ready", description="Number of the pod with ready state"),
            _AGE,
            _col("Containers", priority=1, description="Names of each container in the template."),
            _col("Images", priority=1, description="Images referenced by each container in the template."),
        ),
    ),
    _rt(
        "apps",
        "ControllerRevision",
        "controllerrevisions",
        namespaced=True,
        columns=(
            _col("Controller", description="The controller this revision belongs to."),
            _col("Revision", "integer", description="The revision number."),
            _AGE,
        ),
    ),
    _rt(
        "batch",
        "Job",
        "jobs",
        namespaced=True,
        categories=("all",),
        subresources=_STATUS,
        columns=(
            _col("Status", description="Status of the job."),
            _col("Completions", description="The completed and desired completions."),
            _col("Duration", description="Time required to complete the job."),
            _AGE,
            *_WORKLOAD_WIDE,
        ),
    ),
    _rt(
        "policy",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        namespaced=True,
        short_names=("pdb",),
        subresources=_STATUS,
        columns=(
            _col("Min Available", description="The minimum number of pods that must be available."),
            _col("Max Unavailable", description="The maximum number of pods that may be unavailable."),
            _col("Allowed Disruptions", "integer", description="Number of pod disruptions currently allowed."),
            _AGE,
        ),
    ),
    _rt(
        "coordination.k8s.io",
        "Lease",
        "leases",
        namespaced=True,
        columns=(_col("Holder", description="The holder of the lease."), _AGE),
    ),
    # resource.k8s.io/v1 (GA in Kubernetes 1.34; pkg/registry/resource/*/storage): device classes and
    # slices are cluster-scoped, claims and claim templates namespaced; only claims have a status
    # subresource; none has a short name or category.  Columns: pkg/printers/internalversion.
    _rt("resource.k8s.io", "DeviceClass", "deviceclasses", namespaced=False),
    _rt(
        "resource.k8s.io",
        "ResourceClaim",
        "resourceclaims",
        namespaced=True,
        subresources=_STATUS,
        columns=(
            _col("State", description="A summary of the current state (allocated, pending, reserved, etc.)."),
            _AGE,
        ),
    ),
    _rt("resource.k8s.io", "ResourceClaimTemplate", "resourceclaimtemplates", namespaced=True),
    _rt(
        "resource.k8s.io",
        "ResourceSlice",
        "resourceslices",
        namespaced=False,
        columns=(
            _col("Node", description="NodeName identifies the node which provides the resources in this pool."),
            _col("Driver", description="Driver identifies the DRA driver providing the capacity information."),
            _col("Pool", description="Name is used to identify the pool."),
            _AGE,
        ),
    ),
    _rt(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        namespaced=False,
        short_names=("crd", "crds"),
        categories=("api-extensions",),
        subresources=_STATUS,
        columns=(_col("Created At", "date", description="The time the CustomResourceDefinition was created."),),
    ),
    # rbac.authorization.k8s.io/v1: what the twin's authorizer (apiserver/rbac.py) reads; the columns of printRole,
    # printRoleBinding and their cluster twins (pkg/printers/internalversion).
    _rt("rbac.authorization.k8s.io", "Role", "roles", namespaced=True, columns=_ROLE_COLUMNS),
    _rt("rbac.authorization.k8s.io", "ClusterRole", "clusterroles", namespaced=False, columns=_ROLE_COLUMNS),
    _rt("rbac.authorization.k8s.io", "RoleBinding", "rolebindings", namespaced=True, columns=_BINDING_COLUMNS),
    _rt(
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        namespaced=False,
        columns=_BINDING_COLUMNS,
    ),
    # Reviews are answered from the RBAC objects (apiserver/rbac.py), never stored.
    _rt(
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "selfsubjectaccessreviews",
        namespaced=False,
        verbs=("create",),
        columns=(),
    ),
    _rt(
        "authorization.k8s.io",
        "SelfSubjectRulesReview",
        "selfsubjectrulesreviews",
        namespaced=False,
        verbs=("create",),
        columns=(),
    ),
    _rt(
        "authentication.k8s.io",
        "SelfSubjectReview",
        "selfsubjectreviews",
        namespaced=False,
        verbs=("create",),
        columns=(),
    ),
    _rt(
        "operators.coreos.com",
        "ClusterServiceVersion",
        "clusterserviceversions",
        version="v1alpha1",
        namespaced=True,
        short_names=("csv", "csvs"),
        categories=("olm",),
        subresources=_STATUS,
        schema=_CSV_SCHEMA,
        columns=(
            PrinterColumn("Display", ".spec.displayName", description="The name of the CSV"),
            PrinterColumn("Version", ".spec.version", description="The version of the CSV"),
            PrinterColumn("Replaces", ".spec.replaces", description="The name of a CSV that this one replaces"),
            PrinterColumn("Phase", ".status.phase", description="The phase of the CSV"),
        ),
    ),
)


# -- time --------------------------------------------------------------------------------------


def parse_time(value: str | None) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp (with or without fractional seconds); None if absent or unreadable."""
    if not value:
        return None
    try:
        return parse_rfc3339(value)
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """Age as kubectl prints it (apimachinery's duration.HumanDuration rules)."""
    total = int(seconds)
    if total < -1:
        return "<invalid>"
    if total < 0:
        return "0s"
    if total < 120:
        return f"{total}s"
    minutes = total // 60
    if minutes < 10:
        rest = total % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = total // 3600
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d{rest}h" if rest else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y{days}d" if days else f"{hours // 24 // 365}y"
    return f"{hours // 24 // 365}y"


def age(timestamp: str | None, now: float) -> str:
    moment = parse_time(timestamp)
    return UNKNOWN if moment is None else human_duration(now - moment)


# -- cells of built-in kinds ---------------------------------------------------------------------


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _spec(obj: Obj) -> Obj:
    return obj.get("spec") or {}


def _status(obj: Obj) -> Obj:
    return obj.get("status") or {}


def format_labels(labels: Mapping[str, str] | None) -> str:
    if not labels:
        return NONE
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def format_label_selector(selector: Obj | None) -> str:
    """metav1.FormatLabelSelector: ``app=x,tier in (a,b),!gone``; an empty selector prints <none>."""
    if not selector:
        return NONE
    parts = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for requirement in selector.get("matchExpressions") or ():
        key, operator, values = (
            requirement.get("key", ""),
            requirement.get("operator", ""),
            requirement.get("values") or [],
        )
        if operator == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif operator == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif operator == "Exists":
            parts.append(key)
        elif operator == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts) if parts else NONE


def _template_containers(obj: Obj) -> list[Obj]:
    return ((_spec(obj).get("template") or {}).get("spec") or {}).get("containers") or []


def _workload_wide(obj: Obj) -> list[Any]:
    containers = _template_containers(obj)
    return [
        ",".join(c.get("name", "") for c in containers),
        ",".join(c.get("image", "") for c in containers),
        format_label_selector(_spec(obj).get("selector")),
    ]


def _namespace_cells(obj: Obj, now: float) -> list[Any]:
    return [_status(obj).get("phase", ""), age(_meta(obj).get("creationTimestamp"), now)]


def node_status_text(node: Obj) -> str:
    """``Ready``, ``NotReady``, ``Unknown``, with ``,SchedulingDisabled`` when cordoned."""
    conditions = {c.get("type"): c.get("status") for c in _status(node).get("conditions") or ()}
    ready = conditions.get("Ready")
    text = "Unknown" if ready is None else ("Ready" if ready == "True" else "NotReady")
    if _spec(node).get("unschedulable"):
        text += ",SchedulingDisabled"
    return text


def node_roles(node: Obj) -> str:
    roles = set()
    for key, value in (_meta(node).get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/"):
            role = key.removeprefix("node-role.kubernetes.io/")
            if role:
                roles.add(role)
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    return ",".join(sorted(roles)) if roles else NONE


def _node_cells(obj: Obj, now: float) -> list[Any]:
    status = _status(obj)
    info = status.get("nodeInfo") or {}

    def addresses(kind: str) -> str:
        found = [a.get("address", "") for a in status.get("addresses") or () if a.get("type") == kind]
        return ",".join(found) if found else NONE

    return [
        node_status_text(obj),
        node_roles(obj),
        age(_meta(obj).get("creationTimestamp"), now),
        info.get("kubeletVersion", ""),
        addresses("InternalIP"),
        addresses("ExternalIP"),
        info.get("osImage") or UNKNOWN,
        info.get("kernelVersion") or UNKNOWN,
        info.get("containerRuntimeVersion") or UNKNOWN,
    ]


def pod_status_text(pod: Obj) -> str:
    """The STATUS column of ``kubectl get pods`` (the server's pod printer rules)."""
    status = _status(pod)
    reason = status.get("reason") or status.get("phase") or ""
    initializing = False
    init_statuses = status.get("initContainerStatuses") or []
    init_total = len(_spec(pod).get("initContainers") or [])
    for index, container in enumerate(init_statuses):
        state = container.get("state") or {}
        terminated, waiting = state.get("terminated"), state.get("waiting")
        if terminated and terminated.get("exitCode") == 0:
            continue
        if terminated:
            if terminated.get("reason"):
                reason = "Init:" + terminated["reason"]
            elif terminated.get("signal"):
                reason = f"Init:Signal:{terminated['signal']}"
            else:
                reason = f"Init:ExitCode:{terminated.get('exitCode')}"
        elif waiting and waiting.get("reason") and waiting.get("reason") != "PodInitializing":
            reason = "Init:" + waiting["reason"]
        else:
            reason = f"Init:{index}/{init_total}"
        initializing = True
        break
    if not initializing:
        has_running = False
        for container in reversed(status.get("containerStatuses") or []):
            state = container.get("state") or {}
            waiting, terminated, running = state.get("waiting"), state.get("terminated"), state.get("running")
            if waiting and waiting.get("reason"):
                reason = waiting["reason"]
            elif terminated and terminated.get("reason"):
                reason = terminated["reason"]
            elif terminated:
                reason = (
                    f"Signal:{terminated['signal']}"
                    if terminated.get("signal")
                    else f"ExitCode:{terminated.get('exitCode')}"
                )
            elif running and container.get("ready"):
                has_running = True
        if reason == "Completed" and has_running:
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
            reason = "Running" if ready else "NotReady"
    if _meta(pod).get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    return reason


def _pod_cells(obj: Obj, now: float) -> list[Any]:
    status = _status(obj)
    containers = _spec(obj).get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    last_termination = None
    for container in statuses:
        finished = parse_time(((container.get("lastState") or {}).get("terminated") or {}).get("finishedAt"))
        if finished is not None and (last_termination is None or finished > last_termination):
            last_termination = finished
    restarts_text: Any = restarts
    if restarts and last_termination is not None:
        restarts_text = f"{restarts} ({human_duration(now - last_termination)} ago)"
    gates = _spec(obj).get("readinessGates") or []
    if gates:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or ()}
        passed = sum(1 for gate in gates if conditions.get(gate.get("conditionType")) == "True")
        gates_text = f"{passed}/{len(gates)}"
    else:
        gates_text = NONE
    return [
        f"{ready}/{len(containers)}",
        pod_status_text(obj),
        restarts_text,
        age(_meta(obj).get("creationTimestamp"), now),
        status.get("podIP") or NONE,
        _spec(obj).get("nodeName") or NONE,
        status.get("nominatedNodeName") or NONE,
        gates_text,
    ]


def _event_cells(obj: Obj, now: float) -> list[Any]:
    involved = obj.get("involvedObject") or {}
    source = obj.get("source") or {}
    first = obj.get("firstTimestamp") or obj.get("eventTime")
    last = obj.get("lastTimestamp") or obj.get("eventTime") or first
    count = int(obj.get("count") or 1)
    last_seen = age(last, now)
    if count > 1 and first:
        last_seen = f"{last_seen} (x{count} over {age(first, now)})"
    source_text = source.get("component", "")
    if source.get("host"):
        source_text += f", {source['host']}"
    return [
        last_seen,
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
        involved.get("fieldPath", ""),
        source_text or obj.get("reportingComponent", ""),
        str(obj.get("message", "")).strip(),
        age(first, now),
        count,
        _meta(obj).get("name", ""),
    ]


def _events_v1_cells(obj: Obj, now: float) -> list[Any]:
    regarding = obj.get("regarding") or {}
    last = obj.get("eventTime") or obj.get("deprecatedLastTimestamp")
    return [
        age(last, now),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(regarding.get('kind', '')).lower()}/{regarding.get('name', '')}",
        str(obj.get("note", "")).strip(),
        _meta(obj).get("name", ""),
    ]


def _configmap_cells(obj: Obj, now: float) -> list[Any]:
    return [
        len(obj.get("data") or {}) + len(obj.get("binaryData") or {}),
        age(_meta(obj).get("creationTimestamp"), now),
    ]


def _secret_cells(obj: Obj, now: float) -> list[Any]:
    return [
        obj.get("type", "Opaque"),
        len(obj.get("data") or {}) + len(obj.get("stringData") or {}),
        age(_meta(obj).get("creationTimestamp"), now),
    ]


def _serviceaccount_cells(obj: Obj, now: float) -> list[Any]:
    return [len(obj.get("secrets") or []), age(_meta(obj).get("creationTimestamp"), now)]


def _service_cells(obj: Obj, now: float) -> list[Any]:
    spec = _spec(obj)
    ports = [f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in spec.get("ports") or ()]
    external = spec.get("externalIPs") or [
        ingress.get("ip") or ingress.get("hostname", "")
        for ingress in (_status(obj).get("loadBalancer") or {}).get("ingress") or ()
    ]
    return [
        spec.get("type", "ClusterIP"),
        spec.get("clusterIP") or NONE,
        ",".join(external) if external else NONE,
        ",".join(ports) if ports else NONE,
        age(_meta(obj).get("creationTimestamp"), now),
        format_labels(spec.get("selector")),
    ]


def _endpoints_cells(obj: Obj, now: float) -> list[Any]:
    found = []
    for subset in obj.get("subsets") or ():
        for address in subset.get("addresses") or ():
            for port in subset.get("ports") or [{}]:
                found.append(f"{address.get('ip')}:{port['port']}" if "port" in port else str(address.get("ip")))
    return [",".join(found) if found else NONE, age(_meta(obj).get("creationTimestamp"), now)]


def _daemonset_cells(obj: Obj, now: float) -> list[Any]:
    status = _status(obj)
    node_selector = ((_spec(obj).get("template") or {}).get("spec") or {}).get("nodeSelector")
    return [
        int(status.get("desiredNumberScheduled") or 0),
        int(status.get("currentNumberScheduled") or 0),
        int(status.get("numberReady") or 0),
        int(status.get("updatedNumberScheduled") or 0),
        int(status.get("numberAvailable") or 0),
        format_labels(node_selector),
        age(_meta(obj).get("creationTimestamp"), now),
        *_workload_wide(obj),
    ]


def _deployment_cells(obj: Obj, now: float) -> list[Any]:
    status = _status(obj)
    desired = _spec(obj).get("replicas", 1)
    return [
        f"{int(status.get('readyReplicas') or 0)}/{desired}",
        int(status.get("updatedReplicas") or 0),
        int(status.get("availableReplicas") or 0),
        age(_meta(obj).get("creationTimestamp"), now),
        *_workload_wide(obj),
    ]


def _replicaset_cells(obj: Obj, now: float) -> list[Any]:
    status = _status(obj)
    return [
        int(_spec(obj).get("replicas", 1)),
        int(status.get("replicas") or 0),
        int(status.get("readyReplicas") or 0),
        age(_meta(obj).get("creationTimestamp"), now),
        *_workload_wide(obj),
    ]


def _statefulset_cells(obj: Obj, now: float) -> list[Any]:
    # printStatefulSet: READY is readyReplicas/spec.replicas; the wide columns have no selector.
    status = _status(obj)
    return [
        f"{int(status.get('readyReplicas') or 0)}/{_spec(obj).get('replicas', 1)}",
        age(_meta(obj).get("creationTimestamp"), now),
        *_workload_wide(obj)[:2],
    ]


def _controllerrevision_cells(obj: Obj, now: float) -> list[Any]:
    controller = NONE
    for owner in _meta(obj).get("ownerReferences") or ():
        if owner.get("controller"):
            group = owner.get("apiVersion", "").rpartition("/")[0]
            kind = owner.get("kind", "").lower()
            controller = f"{kind}.{group}/{owner.get('name')}" if group else f"{kind}/{owner.get('name')}"
    return [controller, int(obj.get("revision") or 0), age(_meta(obj).get("creationTimestamp"), now)]


def job_status_text(job: Obj) -> str:
    conditions = {c.get("type"): c.get("status") for c in _status(job).get("conditions") or ()}
    for condition_type in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "Suspended"):
        if conditions.get(condition_type) == "True":
            return condition_type
    if _meta(job).get("deletionTimestamp"):
        return "Terminating"
    return "Running"


def _job_cells(obj: Obj, now: float) -> list[Any]:
    spec, status = _spec(obj), _status(obj)
    succeeded = int(status.get("succeeded") or 0)
    completions = spec.get("completions")
    if completions is not None:
        completions_text = f"{succeeded}/{completions}"
    else:
        parallelism = spec.get("parallelism", 1)
        completions_text = f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"
    start = parse_time(status.get("startTime"))
    end = parse_time(status.get("completionTime"))
    duration = "" if start is None else human_duration((end if end is not None else now) - start)
    return [
        job_status_text(obj),
        completions_text,
        duration,
        age(_meta(obj).get("creationTimestamp"), now),
        *_workload_wide(obj),
    ]


def _pdb_cells(obj: Obj, now: float) -> list[Any]:
    spec = _spec(obj)
    min_available = spec.get("minAvailable")
    max_unavailable = spec.get("maxUnavailable")
    return [
        "N/A" if min_available is None else str(min_available),
        "N/A" if max_unavailable is None else str(max_unavailable),
        int(_status(obj).get("disruptionsAllowed") or 0),
        age(_meta(obj).get("creationTimestamp"), now),
    ]


def _lease_cells(obj: Obj, now: float) -> list[Any]:
    return [_spec(obj).get("holderIdentity") or NONE, age(_meta(obj).get("creationTimestamp"), now)]


def resource_claim_state(claim: Obj) -> str:
    """printResourceClaim's STATE: deleted, pending, allocated, reserved, joined by commas."""
    deleted = bool(_meta(claim).get("deletionTimestamp"))
    status = _status(claim)
    states = ["deleted"] if deleted else []
    if not status.get("allocation"):
        if not deleted:
            states.append("pending")
    else:
        states.append("allocated")
        if status.get("reservedFor"):
            states.append("reserved")
    return ",".join(states)


def _age_cells(obj: Obj, now: float) -> list[Any]:
    return [age(_meta(obj).get("creationTimestamp"), now)]


def _resourceclaim_cells(obj: Obj, now: float) -> list[Any]:
    return [resource_claim_state(obj), age(_meta(obj).get("creationTimestamp"), now)]


def _resourceslice_cells(obj: Obj, now: float) -> list[Any]:
    # printResourceSlice prints spec.nodeName as it is: empty for pools of allNodes or a nodeSelector.
    spec = _spec(obj)
    return [
        spec.get("nodeName") or "",
        spec.get("driver", ""),
        (spec.get("pool") or {}).get("name", ""),
        age(_meta(obj).get("creationTimestamp"), now),
    ]


def _role_cells(obj: Obj, now: float) -> list[Any]:
    # printRole prints the creation time itself (RFC 3339, UTC), not an age.
    return [_meta(obj).get("creationTimestamp", "")]


def _binding_cells(obj: Obj, now: float) -> list[Any]:
    role_ref = obj.get("roleRef") or {}
    users: list[str] = []
    groups: list[str] = []
    accounts: list[str] = []
    for subject in obj.get("subjects") or ():
        kind, name = subject.get("kind"), subject.get("name", "")
        if kind == "User":
            users.append(name)
        elif kind == "Group":
            groups.append(name)
        elif kind == "ServiceAccount":
            namespace = subject.get("namespace")
            accounts.append(f"{namespace}/{name}" if namespace else name)
    return [
        f"{role_ref.get('kind', '')}/{role_ref.get('name', '')}",
        age(_meta(obj).get("creationTimestamp"), now),
        ", ".join(users),
        ", ".join(groups),
        ", ".join(accounts),
    ]


def _crd_cells(obj: Obj, now: float) -> list[Any]:
    # The default table convertor prints the creation time itself, not an age.
    return [_meta(obj).get("creationTimestamp", "")]


BUILTIN_CELLS: Mapping[tuple[str, str], CellsFunction] = MappingProxyType(
    {
        ("", "namespaces"): _namespace_cells,
        ("", "nodes"): _node_cells,
        ("", "pods"): _pod_cells,
        ("", "events"): _event_cells,
        ("events.k8s.io", "events"): _events_v1_cells,
        ("", "configmaps"): _configmap_cells,
        ("", "secrets"): _secret_cells,
        ("", "serviceaccounts"): _serviceaccount_cells,
        ("", "services"): _service_cells,
        ("", "endpoints"): _endpoints_cells,
        ("apps", "daemonsets"): _daemonset_cells,
        ("apps", "deployments"): _deployment_cells,
        ("apps", "replicasets"): _replicaset_cells,
        ("apps", "statefulsets"): _statefulset_cells,
        ("apps", "controllerrevisions"): _controllerrevision_cells,
        ("batch", "jobs"): _job_cells,
        ("policy", "poddisruptionbudgets"): _pdb_cells,
        ("coordination.k8s.io", "leases"): _lease_cells,
        ("resource.k8s.io", "deviceclasses"): _age_cells,
        ("resource.k8s.io", "resourceclaims"): _resourceclaim_cells,
        ("resource.k8s.io", "resourceclaimtemplates"): _age_cells,
        ("resource.k8s.io", "resourceslices"): _resourceslice_cells,
        ("apiextensions.k8s.io", "customresourcedefinitions"): _crd_cells,
        ("rbac.authorization.k8s.io", "roles"): _role_cells,
        ("rbac.authorization.k8s.io", "clusterroles"): _role_cells,
        ("rbac.authorization.k8s.io", "rolebindings"): _binding_cells,
        ("rbac.authorization.k8s.io", "clusterrolebindings"): _binding_cells,
    }
)


# -- CRD-style columns (JSONPath) ----------------------------------------------------------------

_DEFAULT_CUSTOM_COLUMNS = (
    PrinterColumn(
        "Age",
        ".metadata.creationTimestamp",
        type="date",
        description="CreationTimestamp is a timestamp representing the server time when this object was created.",
    ),
)

_SEGMENT = re.compile(
    r"""\.(?P<name>[A-Za-z0-9_\-/]+)                      # .field
      | \['(?P<quoted>[^']*)'\]                            # ['field.with.dots']
      | \[(?P<index>-?\d+)\]                               # [0]
      | \[(?P<star>\*)\]                                   # [*]
      | \[\?\(@\.(?P<fkey>[A-Za-z0-9_.\-]+)\s*==\s*(?P<fval>"[^"]*"|'[^']*'|[^)\s]+)\)\]   # [?(@.type=="Ready")]
    """,
    re.VERBOSE,
)


def _jsonpath_segments(path: str) -> list[tuple[str, Any]]:
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    if text and not text.startswith((".", "[")):
        text = "." + text
    segments: list[tuple[str, Any]] = []
    position = 0
    while position < len(text):
        match = _SEGMENT.match(text, position)
        if match is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {text[position:]!r}")
        if match.group("name") is not None:
            segments.append(("field", match.group("name")))
        elif match.group("quoted") is not None:
            segments.append(("field", match.group("quoted")))
        elif match.group("index") is not None:
            segments.append(("index", int(match.group("index"))))
        elif match.group("star") is not None:
            segments.append(("star", None))
        else:
            raw = match.group("fval")
            value: Any = raw[1:-1] if raw[:1] in "\"'" else json.loads(raw) if raw[:1].isdigit() else raw
            segments.append(("filter", (match.group("fkey").split("."), value)))
        position = match.end()
    return segments


def jsonpath_values(obj: Any, path: str) -> list[Any]:
    """Values a simple JSONPath (fields, [n], [*], [?(@.k=="v")]) selects in ``obj``."""
    current = [obj]
    for kind, argument in _jsonpath_segments(path):
        selected: list[Any] = []
        for value in current:
            field_found = kind == "field" and isinstance(value, dict) and argument in value
            index_found = kind == "index" and isinstance(value, list) and -len(value) <= argument < len(value)
            if field_found or index_found:
                selected.append(value[argument])
            elif kind == "star":
                if isinstance(value, list):
                    selected.extend(value)
                elif isinstance(value, dict):
                    selected.extend(value.values())
            elif kind == "filter" and isinstance(value, list):
                keys, expected = argument
                for item in value:
                    found: Any = item
                    for key in keys:
                        found = found.get(key) if isinstance(found, dict) else None
                    if found == expected:
                        selected.append(item)
        current = selected
    return current


def custom_columns(rtype: ResourceType) -> tuple[PrinterColumn, ...]:
    """Columns after NAME of a kind without a compiled-in printer (CRDs): its own, or AGE."""
    return rtype.printer_columns or _DEFAULT_CUSTOM_COLUMNS


def jsonpath_cells(columns: tuple[PrinterColumn, ...], obj: Obj, now: float) -> list[Any]:
    """Cells of CRD-style columns; ``date`` values become ages as the CRD table convertor renders them."""
    cells: list[Any] = []
    for column in columns:
        try:
            values = jsonpath_values(obj, column.json_path)
        except ValueError:
            values = []
        if not values:
            cells.append(None)
            continue
        value = values[0] if len(values) == 1 else ",".join(_cell_text(v) for v in values)
        if column.type == "date" and isinstance(value, str):
            value = age(value, now)
        elif isinstance(value, (dict, list)):
            value = json.dumps(value, separators=(",", ":"))
        cells.append(value)
    return cells


def _cell_text(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def table_columns(rtype: ResourceType) -> tuple[PrinterColumn, ...]:
    """Every column (priority 0 and wide) of ``rtype``'s table, NAME first except for events."""
    columns = rtype.printer_columns if rtype.key in BUILTIN_CELLS else custom_columns(rtype)
    if rtype.key in _WITHOUT_LEADING_NAME:
        return columns
    return (NAME_COLUMN, *columns)


def table_cells(rtype: ResourceType, obj: Obj, now: float) -> list[Any]:
    """The cells of ``table_columns(rtype)`` for one object."""
    compute = BUILTIN_CELLS.get(rtype.key)
    cells = compute(obj, now) if compute is not None else jsonpath_cells(custom_columns(rtype), obj, now)
    if rtype.key in _WITHOUT_LEADING_NAME:
        return cells
    return [_meta(obj).get("name", ""), *cells]
