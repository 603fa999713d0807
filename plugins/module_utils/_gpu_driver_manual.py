# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""A GPU driver rollout without the GPU Operator's upgrade controller (collection-internal).

With ``driver.upgradePolicy.autoUpgrade`` false, or an operator whose
ClusterPolicy has no ``upgradePolicy`` at all (it predates the controller), no
controller moves any node: the driver DaemonSet is ``OnDelete``, so a new
driver version only changes its template, and a node gets the new driver when
its driver pod is deleted (GPU Operator docs, "GPU Driver Upgrades";
NVIDIA/gpu-operator issues 323, 393, 626). k8s-driver-manager, in the new
pod's init container, may evict GPU pods or drain the node itself
(``ENABLE_GPU_POD_EVICTION``, ``ENABLE_AUTO_DRAIN``), but nothing orders the
nodes.

The collection's rollout engine (``_rollout_engine``) does the ordering, node by
node within the capacity budget and failure domains: cordon, evict the pods
that use the GPUs, delete the driver pod, wait for the new driver pod Ready at
the target, wait for the validator, uncordon. Progress lives on the Nodes
(``gpufleet.io/rollout-gpu-driver-*`` annotations), so a re-run resumes and a
failed node halts every later run until it is cleared or rolled back.
``autoUpgrade`` is never changed here.

The planning functions are pure; the steps do the I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import AlertsGate
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    RolloutHaltedError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import driver_version_of_image
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_watch import (
    DRIVER_COMPONENT_SELECTOR,
    DriverPodView,
    driver_pods_by_node,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import KubeApi
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import PodSelection
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import DAEMONSETS, PODS
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    GPU_EVICTION_FILTER,
    MaintenanceSettings,
    drain_spec,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import MaxUnavailable, node_name
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_engine import (
    KubeRolloutCluster,
    NodeStep,
    ProgressKeys,
    RolloutSettings,
    StepContext,
    drain_step,
    execute_rollout,
    unfinished_nodes,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

ROLLOUT_NAME = "gpu-driver"
EVICT_STEP = "evict-gpu-pods"
REPLACE_STEP = "replace-driver-pod"
VALIDATE_STEP = "wait-validator"
VALIDATOR_SELECTOR = "app=nvidia-operator-validator"
GPU_POOL_SELECTOR = "nvidia.com/gpu.present=true"
DRAIN_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade-drain.skip"
KEYS = ProgressKeys(ROLLOUT_NAME)


# -- deciding (pure) ---------------------------------------------------------------------------------------


def controller_absent(effective_policy: Mapping[str, Any], *, served_upgrade_policy: bool) -> bool:
    """No upgrade controller moves the driver: autoUpgrade is false, or the served CRD has no upgradePolicy."""
    return not served_upgrade_policy or not bool(effective_policy.get("autoUpgrade"))


@dataclass(frozen=True)
class ManualTargets:
    """The nodes this run rolls, and the canary nodes among them."""

    targets: Tuple[str, ...]
    canaries: Tuple[str, ...]
    at_target: Tuple[str, ...]


def manual_targets(
    *,
    nodes: Sequence[Mapping[str, Any]],
    driver_pods: Iterable[Mapping[str, Any]],
    target_version: str,
    managed: Iterable[str],
    canary_nodes: Sequence[str],
    held_by_others: Sequence[str],
    canary_only: bool,
) -> ManualTargets:
    """Nodes whose driver pod does not run the target, plus those an earlier run left unfinished.

    A canary run takes only the canary nodes; nodes someone else holds with the
    skip label are left alone, as on the controller path.
    """
    pods = driver_pods_by_node(driver_pods)
    managed_set = set(managed)
    unfinished = set(unfinished_nodes(nodes, KEYS))
    at_target = tuple(
        sorted(name for name, pod in pods.items() if not pod.terminating and pod.version == target_version)
    )
    chosen: List[str] = []
    for node in nodes:
        name = node_name(node)
        if name not in managed_set or name in held_by_others:
            continue
        if canary_only and name not in canary_nodes:
            continue
        if name in unfinished or name not in at_target:
            chosen.append(name)
    targets = tuple(sorted(chosen))
    return ManualTargets(
        targets=targets,
        canaries=tuple(name for name in canary_nodes if name in targets),
        at_target=at_target,
    )


def policy_limits(effective_policy: Mapping[str, Any]) -> Tuple[MaxUnavailable, int]:
    """maxUnavailable and maxParallelUpgrades (0: no cap) of an upgradePolicy, with the CRD's defaults."""
    max_unavailable: MaxUnavailable = effective_policy.get("maxUnavailable", "25%")
    if isinstance(max_unavailable, float):
        max_unavailable = int(max_unavailable)
    return max_unavailable, int(effective_policy.get("maxParallelUpgrades", 1) or 0)


def manual_settings(
    effective_policy: Mapping[str, Any],
    *,
    target_version: str,
    canaries: Sequence[str],
    budget_wait_timeout: float,
    budget_wait_sleep: float,
    undo_other_targets: bool,
    at_target: Sequence[str] = (),
    failure_domain_label: str = "",
    max_per_domain: int = 1,
) -> RolloutSettings:
    """The engine's settings from the ClusterPolicy's own upgradePolicy (the budget a person set there)."""
    max_unavailable, max_parallel = policy_limits(effective_policy)
    return RolloutSettings(
        name=ROLLOUT_NAME,
        target=target_version,
        max_unavailable=max_unavailable,
        max_parallel=max_parallel,
        failure_domain_label=failure_domain_label,
        max_per_domain=max_per_domain,
        canary_nodes=tuple(canaries),
        budget_wait_timeout=budget_wait_timeout,
        budget_wait_sleep=budget_wait_sleep,
        changing_step=REPLACE_STEP,
        undo_other_targets=undo_other_targets,
        at_target_nodes=tuple(at_target),
    )


def daemonsets_behind(daemonsets: Iterable[Mapping[str, Any]], *, target_version: str) -> List[str]:
    """Driver DaemonSets whose template does not run the target yet (the operator has not re-rendered them)."""
    behind = []
    for daemonset in daemonsets:
        containers = ((((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")) or []
        images = [str(c.get("image") or "") for c in containers if c.get("name") == "nvidia-driver-ctr"]
        if not images and containers:
            images = [str(containers[0].get("image") or "")]
        if not any(driver_version_of_image(image) == target_version for image in images):
            behind.append(node_name(daemonset))
    return behind


def new_driver_ready(pod: Optional[DriverPodView], *, target_version: str) -> bool:
    return pod is not None and not pod.terminating and pod.version == target_version and pod.ready


def validator_ready(pods: Iterable[Mapping[str, Any]], *, not_before: str) -> bool:
    """A Ready validator pod created no earlier than the driver pod it validates."""
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("deletionTimestamp") or str(meta.get("creationTimestamp") or "") < not_before:
            continue
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        if (pod.get("status") or {}).get("phase") == "Running" and statuses and all(s.get("ready") for s in statuses):
            return True
    return False


# -- the steps (I/O) ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManualStepOptions:
    namespace: str
    target_version: str
    eviction_timeout: float
    driver_timeout: float
    sleep: float
    force: bool = False
    delete_emptydir_data: bool = False


def _driver_pods_on(api: KubeApi, options: ManualStepOptions, node: str) -> List[Dict[str, Any]]:
    return api.list(
        PODS,
        namespace=options.namespace,
        label_selector=DRIVER_COMPONENT_SELECTOR,
        field_selector=f"spec.nodeName={node}",
    )


def replace_driver_step(api: KubeApi, options: ManualStepOptions) -> NodeStep:
    """Delete the node's driver pod unless it runs the target; wait for the new one Ready at the target."""
    version = options.target_version

    def run(context: StepContext) -> Dict[str, Any]:
        deleted: List[str] = []
        for pod in _driver_pods_on(api, options, context.node_name):
            view = driver_pods_by_node([pod]).get(context.node_name)
            # A pod at the target that keeps failing (a retry after its cause was fixed) is replaced too.
            stale = view is not None and (view.version != version or (not view.ready and view.restart_count > 0))
            if view is not None and stale and not view.terminating:
                api.delete(PODS, view.name, namespace=view.namespace)
                deleted.append(view.name)

        def observe() -> Optional[DriverPodView]:
            pod = driver_pods_by_node(_driver_pods_on(api, options, context.node_name)).get(context.node_name)
            if pod is not None and not pod.terminating and pod.version == version and pod.failing:
                raise RolloutHaltedError(pod.describe(), node=context.node_name, result={"pod": pod.name})
            return pod

        try:
            outcome = wait_until(
                observe,
                lambda pod: new_driver_ready(pod, target_version=version),
                timeout=options.driver_timeout,
                sleep=options.sleep,
                what=f"a Ready driver pod at {version} on node {context.node_name}",
            )
        except WaitTimeoutError as err:
            last = err.result.get("last")
            raise WaitTimeoutError(
                f"{err.msg}; last seen: {last.describe() if last is not None else 'no driver pod'}",
                result={"elapsed": err.result.get("elapsed")},
            ) from err
        new_pod = outcome.value
        return {"deleted": deleted, "pod": new_pod.name if new_pod else "", "elapsed": round(outcome.elapsed, 3)}

    return NodeStep(
        name=REPLACE_STEP,
        run=run,
        description=(
            f"delete the driver pod unless it runs {version} and is healthy (the DaemonSet is OnDelete), wait up to "
            f"{options.driver_timeout:.0f}s for the new one Ready at {version}; a crash-looping pod fails the node"
        ),
    )


def validate_step(api: KubeApi, options: ManualStepOptions) -> NodeStep:
    """Wait for the node's validator pod, started after the new driver pod, to be Ready."""

    def run(context: StepContext) -> Dict[str, Any]:
        driver = [
            pod
            for pod in _driver_pods_on(api, options, context.node_name)
            if not (pod.get("metadata") or {}).get("deletionTimestamp")
        ]
        since = min((str(p["metadata"].get("creationTimestamp") or "") for p in driver), default="")

        def observe() -> List[Dict[str, Any]]:
            return api.list(
                PODS,
                namespace=options.namespace,
                label_selector=VALIDATOR_SELECTOR,
                field_selector=f"spec.nodeName={context.node_name}",
            )

        outcome = wait_until(
            observe,
            lambda pods: validator_ready(pods, not_before=since),
            timeout=options.driver_timeout,
            sleep=options.sleep,
            what=f"the GPU Operator validator Ready on node {context.node_name}",
        )
        return {"elapsed": round(outcome.elapsed, 3)}

    return NodeStep(
        name=VALIDATE_STEP,
        run=run,
        description=f"wait up to {options.driver_timeout:.0f}s for the validator pod Ready on the new driver",
    )


def manual_steps(api: KubeApi, options: ManualStepOptions) -> List[NodeStep]:
    selection = PodSelection(
        gpu=True,
        gpu_consumers=True,
        exempt_label=DRAIN_SKIP_LABEL,
        force=options.force,
        delete_emptydir_data=options.delete_emptydir_data,
    )
    return [
        drain_step(api, selection=selection, timeout=options.eviction_timeout, sleep=options.sleep, name=EVICT_STEP),
        replace_driver_step(api, options),
        validate_step(api, options),
    ]


def timeline_of(engine_timeline: Sequence[Mapping[str, Any]]) -> Dict[str, List[Dict[str, Any]]]:
    """The engine's per-node steps in the controller path's timeline shape (a state per step)."""
    timeline: Dict[str, List[Dict[str, Any]]] = {}
    for entry in engine_timeline:
        rows = [
            {
                "state": step.get("name"),
                "entered_at": step.get("started"),
                "observed_at": step.get("ended"),
                "outcome": step.get("outcome"),
            }
            for step in entry.get("steps") or []
        ]
        if rows:
            timeline[str(entry["node"])] = rows
    return timeline


def failures_of(engine_timeline: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    return [
        {"node": entry["node"], "state": entry.get("failed_step", ""), "reason": entry.get("error", "")}
        for entry in engine_timeline
        if entry.get("outcome") == "failed"
    ]


def clear_command(node: str) -> str:
    """The command that lets a later run retry a failed node at the same target."""
    return f"kubectl annotate node {node} {KEYS.state}=pending --overwrite"


# -- the run (I/O) -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ManualRun:
    """What one controller-less run works on, read by the runner."""

    namespace: str
    nodes: Tuple[Dict[str, Any], ...]
    driver_pods: Tuple[Dict[str, Any], ...]
    managed: Tuple[str, ...]
    canary_nodes: Tuple[str, ...]
    held_by_others: Tuple[str, ...]
    canary_only: bool
    effective_policy: Mapping[str, Any]
    target_version: str
    wait_timeout: float
    sleep: float
    undo_other_targets: bool = False
    check_mode: bool = False
    # The alerts gate the engine asks before each node it starts (a promote's validate_alert_filter).
    alerts: Optional[AlertsGate] = None
    # Drain through the NVIDIA Maintenance Operator (its drainSpec is made from the upgradePolicy here).
    maintenance: Optional[MaintenanceSettings] = None
    # At most max_per_domain nodes away per value of this node label (a rack); "" for no failure domains.
    failure_domain_label: str = ""
    max_per_domain: int = 1


def _step_options(run: ManualRun) -> ManualStepOptions:
    deletion = dict(run.effective_policy.get("podDeletion") or {})
    drain = dict(run.effective_policy.get("drain") or {})
    timeout = deletion.get("timeoutSeconds") or drain.get("timeoutSeconds") or 300
    return ManualStepOptions(
        namespace=run.namespace,
        target_version=run.target_version,
        eviction_timeout=float(timeout),
        driver_timeout=float(run.wait_timeout),
        sleep=run.sleep,
        force=bool(deletion.get("force") or drain.get("force")),
        delete_emptydir_data=bool(deletion.get("deleteEmptyDir") or drain.get("deleteEmptyDir")),
    )


def maintenance_for(run: ManualRun) -> Optional[MaintenanceSettings]:
    """The Maintenance Operator request for this run: it drains the node's GPU pods (k8s-operator-libs' eviction
    filter for the GPU Operator) with the upgradePolicy's timeout, force and emptyDir settings; the evict step
    after it takes the GPU consumers that request no GPU, which a resource filter cannot see."""
    if run.maintenance is None:
        return None
    options = _step_options(run)
    spec = drain_spec(
        resource_filters=(GPU_EVICTION_FILTER,),
        timeout=options.eviction_timeout,
        force=options.force,
        delete_emptydir=options.delete_emptydir_data,
    )
    return dataclasses.replace(run.maintenance, drain=spec, sleep=run.sleep)


def wait_for_driver_daemonsets(api: KubeApi, run: ManualRun, *, clock: Any, pause: Any) -> None:
    """Until the operator has re-rendered every driver DaemonSet at the target (a pod deleted earlier would come
    back at the old driver)."""

    def observe() -> List[str]:
        daemonsets = api.list(DAEMONSETS, namespace=run.namespace, label_selector=DRIVER_COMPONENT_SELECTOR)
        return daemonsets_behind(daemonsets, target_version=run.target_version) if daemonsets else ["(none)"]

    try:
        wait_until(
            observe,
            lambda behind: not behind,
            timeout=run.wait_timeout,
            sleep=run.sleep,
            what=f"the driver DaemonSets to render driver {run.target_version}",
            clock=clock,
            pause=pause,
        )
    except WaitTimeoutError as err:
        raise WaitTimeoutError(
            f"{err.msg}; still behind: {', '.join(err.result.get('last') or [])}. Is the GPU Operator running?",
            result={"elapsed": err.result.get("elapsed")},
        ) from err


def run_manual_rollout(api: KubeApi, run: ManualRun, *, clock: Any, pause: Any, now: Any) -> Dict[str, Any]:
    """Plan (check mode stops there) and run the engine; raises RolloutHaltedError carrying the engine's result."""
    chosen = manual_targets(
        nodes=run.nodes,
        driver_pods=run.driver_pods,
        target_version=run.target_version,
        managed=run.managed,
        canary_nodes=run.canary_nodes,
        held_by_others=run.held_by_others,
        canary_only=run.canary_only,
    )
    settings = manual_settings(
        run.effective_policy,
        target_version=run.target_version,
        canaries=chosen.canaries,
        budget_wait_timeout=run.wait_timeout,
        budget_wait_sleep=run.sleep,
        undo_other_targets=run.undo_other_targets,
        at_target=chosen.at_target,
        failure_domain_label=run.failure_domain_label,
        max_per_domain=run.max_per_domain,
    )
    settings = dataclasses.replace(settings, alerts=run.alerts, maintenance=maintenance_for(run))
    if not run.check_mode and chosen.targets:
        wait_for_driver_daemonsets(api, run, clock=clock, pause=pause)
    cluster = KubeRolloutCluster(
        api, settings=settings, pool_selector=GPU_POOL_SELECTOR, now=now, clock=clock, pause=pause
    )
    return execute_rollout(
        cluster,
        settings=settings,
        targets=list(chosen.targets),
        steps=manual_steps(api, _step_options(run)),
        check_mode=run.check_mode,
        api=api,
        clock=clock,
        pause=pause,
        now=now,
    )
