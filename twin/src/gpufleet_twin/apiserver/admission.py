"""Admission: the defaults and validation the real API server applies to the built-in kinds on every write.

The Dynamic Resource Allocation kinds are in ``admission_dra.py``, object names in ``names.py``,
CustomResourceDefinitions in ``crds.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..machinery import errors, selectors
from ..machinery.clock import SimClock
from ..machinery.registry import ResourceType
from ..machinery.store import Obj
from . import openapi
from .admission_dra import DRA_KEYS, admit_dra, pod_resource_claim_causes


def _go_string_map(values: dict[str, str]) -> str:
    """A map[string]string as Go's ``%#v`` prints it (keys sorted)."""
    return "map[string]string{" + ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in sorted(values.items())) + "}"


def default_builtin_fields(operation: str, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
    """Defaults the real API server fills in (only where a field is missing).

    A real server defaults every object it decodes, on update and patch as on
    create: a patch that replaces a workload's containers gets their defaults
    back, or the template would never equal its ReplicaSet's again.
    """
    key = rtype.key
    if key in DRA_KEYS:
        admit_dra(operation, rtype, obj, old)
        return
    if operation != "CREATE":
        if key in (("apps", "deployments"), ("apps", "replicasets"), ("apps", "daemonsets"), _STATEFULSET_KEY):
            _default_pod_spec(((obj.get("spec") or {}).get("template") or {}).get("spec") or {})
        if key == _STATEFULSET_KEY and old is not None:
            _default_statefulset(obj)
            _validate_statefulset_update(rtype, obj, old)
        return
    if key == ("", "namespaces"):
        # The NamespaceDefaultLabelName feature: every namespace is selectable by its name.
        obj["metadata"]["labels"] = {
            **(obj["metadata"].get("labels") or {}),
            "kubernetes.io/metadata.name": obj["metadata"]["name"],
        }
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")
    elif key == ("", "pods"):
        _validate_pod(rtype, obj)
        _default_pod_spec(obj.setdefault("spec", {}))
        _default_pod_only(obj["spec"])
        _default_pod_tolerations(obj["spec"])
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", _qos_class(obj["spec"]))
    elif key in (("apps", "deployments"), ("apps", "replicasets"), ("apps", "daemonsets")):
        spec = obj.setdefault("spec", {})
        _validate_workload_selector(rtype, obj)
        _default_pod_spec(spec.setdefault("template", {}).setdefault("spec", {}))
        spec.setdefault("revisionHistoryLimit", 10)
        if key == ("apps", "deployments"):
            spec.setdefault("replicas", 1)
            spec.setdefault("progressDeadlineSeconds", 600)
            spec.setdefault(
                "strategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}
            )
        elif key == ("apps", "replicasets"):
            spec.setdefault("replicas", 1)
        else:
            spec.setdefault(
                "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}
            )
    elif key == _STATEFULSET_KEY:
        _validate_workload_selector(rtype, obj)
        _default_pod_spec(obj.setdefault("spec", {}).setdefault("template", {}).setdefault("spec", {}))
        _default_statefulset(obj)
    elif key == ("batch", "jobs"):
        _default_job(rtype, obj)
    elif key == ("", "secrets"):
        if not obj.get("type"):  # protobuf bodies carry the empty string
            obj["type"] = "Opaque"
    elif key == ("", "services"):
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        for port in spec.get("ports") or ():
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
    elif key == ("policy", "poddisruptionbudgets"):
        obj.setdefault("spec", {})


_STATEFULSET_KEY = ("apps", "statefulsets")
# The spec fields a StatefulSet update may change (ValidateStatefulSetUpdate).
_STATEFULSET_MUTABLE = frozenset(
    {"replicas", "ordinals", "template", "updateStrategy", "persistentVolumeClaimRetentionPolicy", "minReadySeconds"}
)


def _default_statefulset(sts: Obj) -> None:
    """SetDefaults_StatefulSet (apps/v1), and the PersistentVolumeClaim defaults of its claim templates."""
    spec = sts.setdefault("spec", {})
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("revisionHistoryLimit", 10)
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
    retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
    retention.setdefault("whenDeleted", "Retain")
    retention.setdefault("whenScaled", "Retain")
    for claim in spec.get("volumeClaimTemplates") or ():
        if not isinstance(claim, dict):
            continue
        claim.setdefault("apiVersion", "v1")
        claim.setdefault("kind", "PersistentVolumeClaim")
        claim.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
        claim.setdefault("status", {}).setdefault("phase", "Pending")


def _validate_statefulset_update(rtype: ResourceType, sts: Obj, old: Obj) -> None:
    spec, old_spec = sts.get("spec") or {}, old.get("spec") or {}
    if any(spec.get(k) != old_spec.get(k) for k in set(spec) | set(old_spec) if k not in _STATEFULSET_MUTABLE):
        message = (
            "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', "
            "'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
        )
        raise errors.invalid(
            rtype.kind,
            sts["metadata"].get("name", ""),
            [{"reason": "FieldValueForbidden", "field": "spec", "message": message}],
            rtype.group,
        )


def _validate_pod(rtype: ResourceType, pod: Obj) -> None:
    containers = (pod.get("spec") or {}).get("containers")
    causes = []
    if not containers:
        causes.append({"reason": "FieldValueRequired", "field": "spec.containers", "message": "Required value"})
    for index, container in enumerate(containers or ()):
        if not container.get("name"):
            causes.append(
                {"reason": "FieldValueRequired", "field": f"spec.containers[{index}].name", "message": "Required value"}
            )
        if not container.get("image"):
            causes.append(
                {
                    "reason": "FieldValueRequired",
                    "field": f"spec.containers[{index}].image",
                    "message": "Required value",
                }
            )
    causes.extend(pod_resource_claim_causes(pod.get("spec") or {}))
    if causes:
        raise errors.invalid(rtype.kind, pod["metadata"].get("name", ""), causes, rtype.group)


def _default_job(rtype: ResourceType, job: Obj) -> None:
    """Job defaults, and the selector the job controller's strategy generates from the uid."""
    spec = job.setdefault("spec", {})
    template = spec.setdefault("template", {})
    pod_spec = template.setdefault("spec", {})
    if pod_spec.get("restartPolicy") not in ("OnFailure", "Never"):
        raise errors.invalid(
            rtype.kind,
            job["metadata"].get("name", ""),
            [
                {
                    "reason": "FieldValueNotSupported",
                    "field": "spec.template.spec.restartPolicy",
                    "message": f'Unsupported value: "{pod_spec.get("restartPolicy", "Always")}": '
                    'supported values: "OnFailure", "Never"',
                }
            ],
            rtype.group,
        )
    _default_pod_spec(pod_spec)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completions", 1)
    spec.setdefault("parallelism", 1)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    if not spec.get("manualSelector"):
        uid, name = job["metadata"]["uid"], job["metadata"]["name"]
        template_meta = template.setdefault("metadata", {})
        template_meta["labels"] = {
            **(template_meta.get("labels") or {}),
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}


def _validate_workload_selector(rtype: ResourceType, obj: Obj) -> None:
    spec = obj.get("spec") or {}
    name = obj["metadata"].get("name", "")
    selector = spec.get("selector")
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        raise errors.invalid(
            rtype.kind,
            name,
            [{"reason": "FieldValueRequired", "field": "spec.selector", "message": "Required value"}],
            rtype.group,
        )
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not selectors.label_selector_from_dict(selector).matches(labels):
        raise errors.invalid(
            rtype.kind,
            name,
            [
                {
                    "reason": "FieldValueInvalid",
                    "field": "spec.template.metadata.labels",
                    # field.Error prints a map value with Go's %#v.
                    "message": f"Invalid value: {_go_string_map(labels)}: `selector` does not match template `labels`",
                }
            ],
            rtype.group,
        )


def _default_pod_spec(spec: Obj) -> None:
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for container in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        if not isinstance(container, dict):
            continue
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        image = str(container.get("image", ""))
        tag = image.rsplit("/", 1)[-1]
        latest = "@" not in tag and (":" not in tag or tag.endswith(":latest"))
        container.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
        container.setdefault("resources", {})


def _default_pod_only(spec: Obj) -> None:
    """What a Pod gets and a pod template does not (SetDefaults_Pod and the ServiceAccount admission plugin).

    A resource given only as a limit is requested at that limit: a pod asking for ``limits: {nvidia.com/gpu: 1}``
    holds a GPU, as the scheduler and ``kubectl describe node`` count it.
    """
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    for container in (*(spec.get("initContainers") or ()), *(spec.get("containers") or ())):
        if not isinstance(container, dict):
            continue
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        if limits:
            requests = resources.setdefault("requests", {})
            for name, quantity in limits.items():
                requests.setdefault(name, quantity)
            container["resources"] = resources


def _default_pod_tolerations(spec: Obj) -> None:
    # The DefaultTolerationSeconds admission plugin: pods survive 5 minutes on a NotReady/unreachable node.
    tolerations = spec.setdefault("tolerations", [])
    for taint in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == taint and t.get("effect") in (None, "", "NoExecute") for t in tolerations):
            tolerations.append({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300})


def _qos_class(spec: Obj) -> str:
    containers = [c for c in spec.get("containers") or () if isinstance(c, dict)]
    requests_and_limits = [
        ((c.get("resources") or {}).get("requests") or {}, (c.get("resources") or {}).get("limits") or {})
        for c in containers
    ]
    if not any(requests or limits for requests, limits in requests_and_limits):
        return "BestEffort"
    guaranteed = all(
        limits.get(resource) is not None and (requests.get(resource, limits.get(resource)) == limits.get(resource))
        for requests, limits in requests_and_limits
        for resource in ("cpu", "memory")
    )
    return "Guaranteed" if guaranteed else "Burstable"


@dataclass
class RequiredFieldsCompletion:
    """Admission hook: built-in objects get the required fields a Go round trip would give them."""

    catalog: openapi.SchemaCatalog
    clock: SimClock

    def __call__(self, operation: str, rtype: ResourceType, obj: Obj, old: Obj | None) -> None:
        if rtype.schema is not None or not self.catalog.has_builtin_schema(rtype):
            return
        found = self.catalog.root_schema(rtype)
        if found is None:
            return
        # spec and status are struct values in the Go types: a real server always returns them.
        for key in ("spec", "status"):
            if key in (found[0].get("properties") or {}) and obj.get(key) is None:
                obj[key] = {}
        openapi.complete_required_fields(obj, found[0], found[1], now=self.clock.iso())
