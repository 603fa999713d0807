"""Building a twin: the built-in kinds and the API machinery (admission, graceful pod deletion, live CRDs, RBAC)."""

from __future__ import annotations

from ..machinery import crd_schema, omitempty
from ..machinery.clock import SimClock
from ..machinery.registry import Registry, ResourceType
from ..machinery.store import Obj, Store
from . import builtin_types, openapi, rbac, rbac_escalation, serviceaccount_tokens
from .admission import RequiredFieldsCompletion, default_builtin_fields
from .cluster import Twin
from .crds import CustomResourceRegistrar, admit_crd_object
from .names import validate_object_name


def create_twin(*, time_scale: float = 1.0, token: str | None = None) -> Twin:
    """A Twin with the built-in kinds and API machinery installed (call inside the event loop)."""
    registry = Registry()
    clock = SimClock(time_scale=time_scale)
    store = Store(registry, clock)
    twin = Twin(registry=registry, store=store, clock=clock)
    if token is not None:
        twin.token = token
    install_api_machinery(twin)
    return twin


def install_api_machinery(twin: Twin) -> None:
    """Register built-in kinds, defaulting/validation admission, graceful pod deletion and live CRDs."""
    for rtype in builtin_types.BUILTIN_TYPES:
        twin.registry.add(rtype)
    store = twin.store
    store.add_admission(validate_object_name)
    store.add_admission(default_builtin_fields)
    store.add_admission(admit_crd_object)
    store.add_admission(rbac.admit)
    store.add_admission(rbac_escalation.admit)
    store.listener_context = rbac_escalation.as_controller
    store.add_admission(crd_schema.make_crd_admission())
    # Last: fill what the other hooks left out, as encoding a Go struct would.
    store.add_admission(RequiredFieldsCompletion(openapi.SchemaCatalog(twin.registry), twin.clock))
    # After every default: what the Go types' omitempty drops is never stored.
    store.add_admission(omitempty.prune)
    pods = twin.registry.get("", "pods")
    assert pods is not None
    store.set_delete_handler(pods, graceful_pod_deletion)
    store.add_listener(CustomResourceRegistrar(twin.registry, store))
    twin.service_account_tokens = serviceaccount_tokens.TokenIssuer(
        store=store, registry=twin.registry, clock=twin.clock
    )
    # RBAC: the bootstrap roles every cluster starts with, and aggregated ClusterRoles kept up to date.
    rbac.install_bootstrap_policy(store, twin.registry)
    store.add_listener(rbac.ClusterRoleAggregator(store, twin.registry))


# -- pods: graceful deletion ----------------------------------------------------------------------------


def graceful_pod_deletion(store: Store, rtype: ResourceType, pod: Obj) -> Obj | None:
    """Store delete handler for pods (the pod strategy's CheckGracefulDelete).

    A pod bound to a node and not finished gets ``deletionTimestamp`` = now +
    grace period and stays until the kubelet (simulation) removes it;
    unscheduled and finished pods go at once.  The grace period is the
    request's (the store passes it as ``deletionGracePeriodSeconds``), else the
    pod's ``terminationGracePeriodSeconds``, else 30 s.
    """
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    requested = meta.get("deletionGracePeriodSeconds")
    grace = int(requested if requested is not None else spec.get("terminationGracePeriodSeconds", 30))
    if grace <= 0 or not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return None
    meta["deletionGracePeriodSeconds"] = grace
    meta["deletionTimestamp"] = store.clock.iso(store.clock.now() + grace)
    return pod
