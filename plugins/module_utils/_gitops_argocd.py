# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""Module argocd_app_wait's work: read the Argo CD Application, refuse a stage on it, wait for a revision
(collection-internal).

Argo CD's own status is an input, not the gate: the stage's watch and gates
read the cluster's objects once the Application has synced the commit. This
only decides whether the change may start and whether Argo CD has applied it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    GpuFleetError,
    InvalidInputError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops import (
    ApplicationView,
    application_view,
    revision_outcome,
    stage_refusal,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import ARGOCD_APPLICATIONS
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until


@dataclass(frozen=True)
class ApplicationWaitRequest:
    name: str
    namespace: str
    revision: str = ""  # empty: only check the Application is ready for a stage
    out_of_sync_allowed: Sequence[str] = field(default_factory=tuple)
    require_healthy: bool = True
    timeout: float = 600.0
    sleep: float = 5.0
    # Says where the commit waited for is, for the timeout's message.
    commit_note: str = ""


def read_application(api: KubeApi, request: ApplicationWaitRequest) -> ApplicationView:
    app = api.get(ARGOCD_APPLICATIONS, request.name, namespace=request.namespace)
    if app is None:
        raise InvalidInputError(
            f"Argo CD Application {request.namespace}/{request.name} does not exist (gpufleet_gitops.application)"
        )
    return application_view(app)


def _as_result(view: Optional[ApplicationView]) -> Dict[str, Any]:
    if view is None:
        return {}
    return {
        "name": view.name,
        "namespace": view.namespace,
        "sync_status": view.sync_status,
        "sync_revision": view.sync_revision,
        "health": view.health,
        "operation_phase": view.operation_phase,
        "operation_revision": view.operation_revision,
        "operation_message": view.operation_message,
        "conditions": list(view.conditions),
        "out_of_sync": list(view.out_of_sync),
    }


def run_application_wait(api: KubeApi, request: ApplicationWaitRequest) -> Dict[str, Any]:
    """Check the Application (no revision) or wait until it synced ``revision``; raises with the reason."""
    if request.timeout < 0 or request.sleep <= 0:
        raise InvalidInputError("wait_timeout must be >= 0 and wait_sleep > 0")
    allowed = tuple(request.out_of_sync_allowed)
    if not request.revision:
        view = read_application(api, request)
        refusal = stage_refusal(view, out_of_sync_allowed=allowed, require_healthy=request.require_healthy)
        if refusal:
            raise GpuFleetError(refusal, result={"application": _as_result(view), "ready": False})
        return {"changed": False, "ready": True, "application": _as_result(view), "elapsed": 0.0}

    def observe() -> ApplicationView:
        return read_application(api, request)

    def settled(view: ApplicationView) -> bool:
        return revision_outcome(view, request.revision, out_of_sync_allowed=allowed) != "waiting"

    label = f"Argo CD Application {request.namespace}/{request.name}"
    try:
        outcome = wait_until(
            observe, settled, timeout=request.timeout, sleep=request.sleep, what=f"{label} to sync {request.revision}"
        )
    except WaitTimeoutError as err:
        last = err.result.get("last")
        state = last.describe() if isinstance(last, ApplicationView) else "not read"
        raise GpuFleetError(
            f"{label} did not sync revision {request.revision} within {request.timeout:.0f}s ({state}). "
            f"The commit is left in place{' (' + request.commit_note + ')' if request.commit_note else ''}: "
            f"sync the Application (argocd app sync {request.name}) and run the stage again, or revert the commit "
            f"(git revert {request.revision}) and push",
            result={"application": _as_result(last if isinstance(last, ApplicationView) else None), "synced": False},
        ) from err
    view = outcome.value
    if revision_outcome(view, request.revision, out_of_sync_allowed=allowed) == "failed":
        raise GpuFleetError(
            f"{label} failed to sync revision {request.revision}: {view.describe()}. The commit is left in place"
            f"{' (' + request.commit_note + ')' if request.commit_note else ''}",
            result={"application": _as_result(view), "synced": False},
        )
    return {"changed": False, "synced": True, "application": _as_result(view), "elapsed": round(outcome.elapsed, 2)}
