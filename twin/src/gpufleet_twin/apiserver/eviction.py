"""The ``pods/eviction`` subresource (policy/v1) with the eviction REST handler's PodDisruptionBudget checks."""

from __future__ import annotations

from aiohttp import web

from ..machinery import errors, selectors
from ..machinery.disruption import compute_budget, is_pod_ready, pdb_status
from ..machinery.errors import ApiError
from ..machinery.store import Obj
from .bodies import is_dry_run, read_body
from .context import ServerContext
from .deletes import (
    delete_one,
)
from .request_info import ResourceRequest
from .responses import json_response


async def evict(ctx: ServerContext, request: web.Request, target: ResourceRequest) -> web.Response:
    """policy/v1 Eviction, with the eviction REST handler's PodDisruptionBudget checks."""
    store, registry = ctx.twin.store, ctx.twin.registry
    body = await read_body(request)
    if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
        raise errors.bad_request("the body of an eviction must be a policy/v1 Eviction")
    if body.get("apiVersion") not in (None, "policy/v1", "policy/v1beta1"):
        raise errors.bad_request(f"unsupported Eviction version {body.get('apiVersion')}")
    name = (body.get("metadata") or {}).get("name")
    if name and name != target.name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = dict(body.get("deleteOptions") or {})
    dry_run = is_dry_run(request, options)
    pod_type = target.rtype
    pod = store.get(pod_type, target.namespace, target.name or "")
    phase = (pod.get("status") or {}).get("phase")
    # Finished, pending and already-terminating pods are evicted regardless of budgets.
    ignore_budgets = phase in ("Succeeded", "Failed", "Pending") or bool(pod["metadata"].get("deletionTimestamp"))
    governing: Obj | None = None
    if not ignore_budgets:
        pdb_type = registry.get("policy", "poddisruptionbudgets")
        pdbs = []
        if pdb_type is not None:
            labels = pod["metadata"].get("labels") or {}
            for pdb in store.list(pdb_type, target.namespace):
                selector = (pdb.get("spec") or {}).get("selector")
                if selector is None:
                    continue
                sel = selectors.label_selector_from_dict(selector)
                # An empty selector matches nothing for eviction purposes (as getPodDisruptionBudgets skips it).
                if sel.empty:
                    continue
                if sel.matches(labels):
                    pdbs.append(pdb)
        if len(pdbs) > 1:
            raise errors.internal_error(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
            )
        if pdbs:
            assert pdb_type is not None
            governing = pdbs[0]
            check_budget(ctx, governing, pod)
    delete_one(ctx, pod_type, target.namespace, target.name or "", options, dry_run=dry_run)
    if governing is not None and not dry_run:
        record_disruption(ctx, governing, pod)
    return json_response(
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}, status=201
    )


def budget_of(ctx: ServerContext, pdb: Obj) -> tuple[int, int, int]:
    """(disruptionsAllowed, desiredHealthy, currentHealthy) the eviction decides on.

    A status the disruption controller keeps (observedGeneration current) is
    used as is, as the real eviction handler does; without one (no controller,
    or the spec just changed) the budget is computed from the pods now.
    """
    status = pdb.get("status") or {}
    generation = pdb["metadata"].get("generation", 1)
    if "disruptionsAllowed" in status and int(status.get("observedGeneration") or 0) >= generation:
        return (
            int(status["disruptionsAllowed"]),
            int(status.get("desiredHealthy") or 0),
            int(status.get("currentHealthy") or 0),
        )
    pod_type = ctx.twin.registry.get("", "pods")
    assert pod_type is not None
    budget = compute_budget(pdb, ctx.twin.store.list(pod_type, pdb["metadata"]["namespace"]))
    if budget.error:
        raise _eviction_refused(
            f"The disruption budget {pdb['metadata']['name']} is still being processed by the server."
        )
    return budget.disruptions_allowed, budget.desired_healthy, budget.current_healthy


def check_budget(ctx: ServerContext, pdb: Obj, pod: Obj) -> None:
    allowed, desired, current = budget_of(ctx, pdb)
    policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
    if not is_pod_ready(pod) and (policy == "AlwaysAllow" or (current >= desired > 0)):
        # Unready pods do not count as healthy; evicting one costs nothing when the budget is met.
        return
    if allowed <= 0:
        raise _eviction_refused(
            f"The disruption budget {pdb['metadata']['name']} needs {desired} healthy pods and has {current} currently"
        )


def record_disruption(ctx: ServerContext, pdb: Obj, pod: Obj) -> None:
    """Write what the eviction handler writes to the PDB: one disruption fewer, and the pod it took.

    Without a controller-kept status the twin writes the whole status as the
    disruption controller would compute it after the eviction.
    """
    store, registry = ctx.twin.store, ctx.twin.registry
    pdb_type, pod_type = registry.get("policy", "poddisruptionbudgets"), registry.get("", "pods")
    assert pdb_type is not None and pod_type is not None
    namespace, name = pdb["metadata"]["namespace"], pdb["metadata"]["name"]
    now = ctx.twin.clock.iso()
    status = pdb.get("status") or {}
    kept = "disruptionsAllowed" in status and int(status.get("observedGeneration") or 0) >= pdb["metadata"].get(
        "generation", 1
    )

    def write(obj: Obj) -> None:
        if not kept:
            obj["status"] = pdb_status(obj, store.list(pod_type, namespace), now=now)
            return
        current = obj.setdefault("status", {})
        current["disruptionsAllowed"] = max(0, int(current.get("disruptionsAllowed") or 0) - 1)
        current.setdefault("disruptedPods", {})[pod["metadata"]["name"]] = now
        if current["disruptionsAllowed"] == 0:
            for condition in current.get("conditions") or ():
                if condition.get("type") == "DisruptionAllowed" and condition.get("status") != "False":
                    condition.update(status="False", reason="InsufficientPods", lastTransitionTime=now)

    store.mutate(pdb_type, namespace, name, write, subresource="status")


def _eviction_refused(cause: str) -> ApiError:
    # No Retry-After header: client-go would retry a 429 with one silently, and
    # kubectl drain must see the refusal to report it and retry on its own.
    return ApiError(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        {"causes": [{"reason": "DisruptionBudget", "message": cause}]},
    )
