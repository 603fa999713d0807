# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# Copyright: Contributors to the gpufleet.upgrade project
"""The GPU driver rollout of module clusterpolicy_upgrade: read, preflight, scope, write, watch, halt
(collection-internal).

The GPU Operator's upgrade controller does the node work (cordon, pod
deletion, driver restart, validation). This runner only

1. reads the ClusterPolicy, the NVIDIADrivers, the GPU nodes and their driver
   pods, and the CRDs the cluster serves;
2. checks the request against them and runs the preflight (read-only; a
   preflight-only run stops here);
3. plans the writes (``_gpu_driver_scope``) -- check mode stops here and
   returns the plan and the diff;
4. writes: merge patches guarded by resourceVersion, re-read and re-computed
   on a 409 so another writer's change is never overwritten with stale data;
5. waits (bounded) until every targeted node is ``upgrade-done`` on the target
   driver, or one is ``upgrade-failed``;
6. halts at the first failed node: the nodes not yet started get the skip
   label, the failed node is left as it is, a Warning Event names it, and the
   module fails naming the node and the reason.

Everything it decides from lives on the cluster, so a re-run after an
interruption continues from where the cluster is.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence, Tuple

from ansible_collections.gpufleet.upgrade.plugins.module_utils._alerts import AlertsGate
from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import (
    AlertsFiringError,
    GpuFleetError,
    InvalidInputError,
    KubeApiError,
    RolloutHaltedError,
    WaitTimeoutError,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates_parse import UnreadableOutputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gitops import deferred_change
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_manual import (
    ManualRun,
    clear_command,
    controller_absent,
    policy_limits,
    run_manual_rollout,
    timeline_of,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_manual import (
    failures_of as manual_failures,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_preflight import (
    ERROR,
    Preflight,
    PreflightInput,
    run_preflight,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_scope import (
    GPU_PRESENT_LABEL,
    PHASE_CLEANUP,
    PHASE_HOLD,
    PHASE_SCOPE,
    PHASE_TARGET,
    POOL_MOVE_ANNOTATION,
    POOL_MOVE_CORDONED,
    POOL_MOVE_WAS_UNSCHEDULABLE,
    SCOPE_ALL,
    SCOPE_CANARY,
    STATE_LABEL,
    ClusterView,
    RolloutPlan,
    RolloutRequest,
    Write,
    annotations_of,
    halt_writes,
    labels_of,
    name_of,
    node_label_view,
    plan_rollout,
    release_write,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_settle import (
    daemonsets_run_target,
    needless_cycle_writes,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_spec import (
    BUILTIN_UPGRADE_POLICY_FIELDS,
    DriverTarget,
    FieldSpec,
    apply_merge_patch,
    crd_schema_at,
    effective_upgrade_policy,
    fields_from_schema,
    merge_patch_for,
    normalize_upgrade_policy,
    normalized_for_diff,
    unnamed_driver_image,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_driver_watch import (
    DRIVER_COMPONENT_SELECTOR,
    UPGRADE_EVENT_REASON,
    EventLog,
    NodeView,
    Progress,
    Tracker,
    build_timeline,
    failure_reason,
    halt_decision,
    node_progress,
    node_views,
    pool_settled,
    rollout_progress,
    rollout_settled,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gpu_operator_info import honoured_cluster_policy
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s import (
    KubeApi,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_events import record_event
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_nodes import (
    PodSelection,
    drain_pods,
    patch_node,
    read_dra_gpus,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import (
    CLUSTER_POLICIES,
    CONTROLLER_REVISIONS,
    DAEMONSETS,
    EVENTS,
    MACHINE_CONFIG_POOLS,
    NODES,
    NVIDIA_DRIVERS,
    PDBS,
    PODS,
    ResourceRef,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    MaintenanceChoice,
    resolve_settings,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_budget import capacity_budget
from ansible_collections.gpufleet.upgrade.plugins.module_utils._rollout_schedule import (
    PoolNode,
    ScheduleLimits,
    pool_from_objects,
    rollout_order,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._skip_label import (
    PROGRESS_DONE,
    STATE_REQUIRED,
    SkipLabelPacer,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._time import iso, utc_now
from ansible_collections.gpufleet.upgrade.plugins.module_utils._wait import wait_until

CRDS = ResourceRef("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False)
CLUSTER_POLICY_CRD = "clusterpolicies.nvidia.com"
NVIDIA_DRIVER_CRD = "nvidiadrivers.nvidia.com"
# How long a fleet-wide run waits for the operator to render its target before releasing held nodes anyway (the
# operator reconciles a ClusterPolicy change in seconds; wall-clock seconds).
SETTLE_TIMEOUT = 120.0
REFS = {"ClusterPolicy": CLUSTER_POLICIES, "NVIDIADriver": NVIDIA_DRIVERS, "Node": NODES}
# Node Events of cluster-scoped objects live in "default" (client-go's recorder puts them there).
NODE_EVENTS_NAMESPACE = "default"
CONFLICT_ATTEMPTS = 5
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True)
class DriverRolloutOptions:
    """The module's options, as the runner needs them."""

    driver: Optional[Dict[str, Any]] = None
    upgrade_policy: Optional[Dict[str, Any]] = None
    cluster_policy: Optional[str] = None
    operator_namespace: Optional[str] = None
    scope: str = "all"
    canary_mode: Optional[str] = None
    canary_selector: Dict[str, str] = field(default_factory=lambda: {"gpu-canary": "true"})
    canary_driver_name: str = "gpu-canary"
    remove_canary_driver: bool = True
    retry_failed_nodes: bool = False
    preflight_only: bool = False
    wait: bool = True
    wait_timeout: float = 3600.0
    wait_sleep: float = 10.0
    check_mode: bool = False
    diff: bool = False
    # GitOps mode (docs/gitops.md): "Kind/name" of the objects Argo CD writes from Git. Their writes are not sent:
    # the run stops after the writes it may make and returns them (gitops_changes) for a commit; run again once the
    # Application synced it (gitops_synced), it finds them done or fails naming the fields the cluster lacks.
    gitops_managed: Tuple[str, ...] = ()
    gitops_synced: bool = False
    # The alerts gate: while a matching alert fires the nodes not started yet get the skip label.
    alerts: Optional[AlertsGate] = None
    # Without the upgrade controller: drain through the NVIDIA Maintenance Operator (node_maintenance).
    node_maintenance: MaintenanceChoice = field(default_factory=MaintenanceChoice)
    # At most max_per_domain nodes away per value of this node label (a rack): with the controller and scope all,
    # the targets wait under the skip label and this run releases them in turn (_skip_label.SkipLabelPacer).
    failure_domain_label: str = ""
    max_per_domain: int = 1


@dataclass
class AlertsHold:
    """The nodes a run holds with the skip label while alerts fire, since when, and every alert that held it."""

    nodes: Tuple[str, ...] = ()
    since: Optional[float] = None
    held_for: Tuple[str, ...] = ()


@dataclass
class Clock:
    monotonic: Callable[[], float] = time.monotonic
    pause: Callable[[float], None] = time.sleep
    now: Callable[[], datetime.datetime] = utc_now


@dataclass
class ClusterRead:
    policy: Dict[str, Any]
    namespace: str
    nodes: List[Dict[str, Any]]
    driver_pods: List[Dict[str, Any]]
    drivers: List[Dict[str, Any]]
    upgrade_policy_fields: FieldSpec
    crd_has_default: bool

    @property
    def managed(self) -> frozenset:
        return frozenset(
            str((pod.get("spec") or {}).get("nodeName"))
            for pod in self.driver_pods
            if pod.get("spec", {}).get("nodeName")
        )


class DriverRollout:
    """One run of the module against one cluster."""

    def __init__(self, api: KubeApi, options: DriverRolloutOptions, *, clock: Optional[Clock] = None) -> None:
        self.api = api
        self.options = options
        # One clock: the timeline's and the capacity samples' times are the cluster's.
        self.clock = clock or Clock(now=api.cluster_now)
        self.started = self.clock.monotonic()
        self.deadline = self.started + max(0.0, float(options.wait_timeout))
        self.changed = False
        self.patches: List[Dict[str, Any]] = []
        self.tracker = Tracker()
        self.event_log = EventLog()
        self.warnings: List[str] = []
        # The GPU nodes as the last observation saw them (halt writes are computed from these).
        self.latest_nodes: List[Dict[str, Any]] = []
        # GitOps mode: the merge patches of objects managed in Git, left for a commit.
        self.gitops_deferred: List[Dict[str, Any]] = []
        # False when the served ClusterPolicy CRD has no driver.upgradePolicy (an operator before the controller).
        self.served_upgrade_policy = True
        self.alerts_hold = AlertsHold()
        # Failure domains with the controller: this run releases the targets in turn; the ones it released so far.
        self.paced = False
        self.released: List[str] = []

    # -- reading -------------------------------------------------------------------------------
    def read_cluster(self) -> ClusterRead:
        policy = self._cluster_policy()
        namespace = self.options.operator_namespace or str((policy.get("status") or {}).get("namespace") or "")
        if not namespace:
            pods = self.api.list(PODS, label_selector=DRIVER_COMPONENT_SELECTOR)
            namespace = str((pods[0].get("metadata") or {}).get("namespace") or "") if pods else ""
        if not namespace:
            raise InvalidInputError(
                "Cannot tell the GPU Operator's namespace (the ClusterPolicy has no status.namespace and no driver "
                "pod runs); set operator_namespace"
            )
        nodes = [
            node
            for node in self.api.list(NODES)
            if labels_of(node).get(GPU_PRESENT_LABEL) == "true"
            or "nvidia.com/gpu" in (node.get("status") or {}).get("capacity", {})
        ]
        driver_pods = self.api.list(PODS, namespace=namespace, label_selector=DRIVER_COMPONENT_SELECTOR)
        uses_crd = bool((((policy.get("spec") or {}).get("driver")) or {}).get("useNvidiaDriverCRD"))
        drivers = self.api.list(NVIDIA_DRIVERS) if uses_crd else []
        fields, has_default = self._served_schemas(uses_crd=uses_crd)
        return ClusterRead(
            policy=policy,
            namespace=namespace,
            nodes=nodes,
            driver_pods=driver_pods,
            drivers=drivers,
            upgrade_policy_fields=fields,
            crd_has_default=has_default,
        )

    def _cluster_policy(self) -> Dict[str, Any]:
        if self.options.cluster_policy:
            policy = self.api.get(CLUSTER_POLICIES, self.options.cluster_policy)
            if policy is None:
                raise InvalidInputError(f"ClusterPolicy {self.options.cluster_policy} does not exist")
            return policy
        policies = self.api.list(CLUSTER_POLICIES)
        if not policies:
            raise InvalidInputError("The cluster has no ClusterPolicy: is the GPU Operator installed?")
        return dict(honoured_cluster_policy(policies) or {})

    def _served_schemas(self, *, uses_crd: bool) -> Tuple[FieldSpec, bool]:
        """The upgradePolicy field set of the served ClusterPolicy CRD, and whether NVIDIADriver has spec.default.

        Reading CRDs needs cluster-scope read access; without it the field set of
        the upstream CRD this collection was tested with is used instead.
        """
        fields = BUILTIN_UPGRADE_POLICY_FIELDS
        has_default = False
        try:
            crd = self.api.get(CRDS, CLUSTER_POLICY_CRD)
            node = crd_schema_at(crd, ("spec", "driver", "upgradePolicy"), version="v1") if crd else None
            if node:
                fields = fields_from_schema(node)
            elif crd and crd_schema_at(crd, ("spec", "driver"), version="v1"):
                self.served_upgrade_policy = False
            if uses_crd:
                driver_crd = self.api.get(CRDS, NVIDIA_DRIVER_CRD)
                has_default = bool(driver_crd and crd_schema_at(driver_crd, ("spec", "default")))
        except KubeApiError as err:
            if err.status not in (401, 403, 404):
                raise
            self.warnings.append(f"Cannot read the served CRDs ({err.status}); checked against the built-in field set")
        return fields, has_default

    def read_preflight_extras(self, namespace: str) -> Dict[str, Any]:
        daemonsets = self.api.list(DAEMONSETS, namespace=namespace, label_selector=DRIVER_COMPONENT_SELECTOR)
        pods = self.api.list(PODS, field_selector=UNFINISHED_PODS)
        pdbs = self.api.list(PDBS)
        try:
            pools: Optional[List[Dict[str, Any]]] = self.api.list(MACHINE_CONFIG_POOLS)
        except KubeApiError as err:
            if err.status != 404:
                raise
            pools = None  # not OpenShift: no MachineConfigPools
        return {
            "daemonsets": daemonsets,
            "pods": pods,
            "pdbs": pdbs,
            "pools": pools,
            "dra": read_dra_gpus(self.api, pods),
        }

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> Dict[str, Any]:
        options = self.options
        cluster = self.read_cluster()
        upgrade_policy = normalize_upgrade_policy(options.upgrade_policy, fields=cluster.upgrade_policy_fields)
        target = self._requested_target()
        driver_section = ((cluster.policy.get("spec") or {}).get("driver")) or {}
        effective = effective_upgrade_policy(driver_section.get("upgradePolicy"), upgrade_policy)
        manual = controller_absent(effective, served_upgrade_policy=self.served_upgrade_policy)
        self.paced = bool(options.failure_domain_label) and options.scope == SCOPE_ALL and not manual
        if self.paced and not options.wait and not options.preflight_only:
            raise InvalidInputError(
                f"failure_domain_label {options.failure_domain_label!r} needs wait: the run holds every node and "
                "releases them in turn as others finish"
            )
        plan = plan_rollout(
            _planner_view(cluster),
            self._rollout_request(cluster, target=target, upgrade_policy=upgrade_policy, manual=manual),
        )
        self.warnings.extend(plan.warnings)
        check_gitops_plan(plan, managed=options.gitops_managed, canary_mode=options.canary_mode)
        if manual and options.gitops_managed:
            # The rollout without the controller writes the target and then replaces driver pods in one run; in
            # GitOps mode the target reaches the cluster only after a commit is synced (not supported together yet).
            raise InvalidInputError(
                "GitOps mode needs the GPU Operator's upgrade controller (driver.upgradePolicy.autoUpgrade true): "
                "the node-by-node rollout without it is not supported in GitOps mode yet (docs/gitops.md)"
            )
        preflight = self._preflight(cluster, plan=plan, target=target, effective=effective, manual=manual)
        result = self._base_result(cluster=cluster, target=target, plan=plan, preflight=preflight)
        if options.preflight_only:
            return self._finish(result)
        if target is None:
            raise InvalidInputError("a driver version is required unless preflight_only is set")
        for write in plan.writes:
            unnamed = unnamed_driver_image(cluster.policy, write.patch) if write.kind == "ClusterPolicy" else ""
            if unnamed:
                raise InvalidInputError(unnamed)
        errors = preflight.errors
        if errors:
            raise GpuFleetError(
                "preflight found what would stall or fail the rollout: " + "; ".join(f.message for f in errors),
                result=self._finish(result),
            )
        if options.diff or options.check_mode:
            result["diff"] = plan_diff(plan)
        if manual:
            return self.run_without_controller(cluster, plan=plan, target=target, effective=effective, result=result)
        if options.check_mode:
            self.changed = plan.changes
            return self._finish(result)
        return self._run_with_controller(cluster, plan=plan, target=target, effective=effective, result=result)

    def _requested_target(self) -> Optional[DriverTarget]:
        """The target driver; None only for a preflight-only run that names no version."""
        if self.options.driver and self.options.driver.get("version"):
            return DriverTarget.from_params(self.options.driver)
        if not self.options.preflight_only:
            return DriverTarget.from_params(self.options.driver)  # raises: version is required
        return None

    def _rollout_request(
        self, cluster: ClusterRead, *, target: Optional[DriverTarget], upgrade_policy: Dict[str, Any], manual: bool
    ) -> RolloutRequest:
        options = self.options
        return RolloutRequest(
            # Without the controller the canary is which nodes this module rolls, not labels or pools.
            scope=SCOPE_ALL if manual else options.scope,
            target=target,
            upgrade_policy=upgrade_policy,
            canary_mode=None if manual else options.canary_mode,
            canary_selector=dict(options.canary_selector),
            canary_driver_name=options.canary_driver_name,
            remove_canary_driver=options.remove_canary_driver,
            retry_failed_nodes=options.retry_failed_nodes,
            paced=self.paced,
            done=self._done(cluster, target) if self.paced else frozenset(),
        )

    @staticmethod
    def _done(cluster: ClusterRead, target: Optional[DriverTarget]) -> FrozenSet[str]:
        """Nodes whose driver pod runs the target, Ready, and whose state label says upgrade-done."""
        if target is None:
            return frozenset()
        views = node_views(cluster.nodes, cluster.driver_pods)
        return frozenset(
            name for name, view in views.items() if node_progress(view, target_version=target.version) == PROGRESS_DONE
        )

    def _preflight(
        self,
        cluster: ClusterRead,
        *,
        plan: RolloutPlan,
        target: Optional[DriverTarget],
        effective: Dict[str, Any],
        manual: bool,
    ) -> Preflight:
        """Read what the preflight needs besides the cluster read, and run it (read-only)."""
        options = self.options
        extras = self.read_preflight_extras(cluster.namespace)
        return run_preflight(
            PreflightInput(
                policy=cluster.policy,
                upgrade_policy=effective,
                gpu_nodes=tuple(cluster.nodes),
                driver_pods=tuple(cluster.driver_pods),
                driver_daemonsets=tuple(extras["daemonsets"]),
                pods=tuple(extras["pods"]),
                dra_gpus=extras["dra"],
                pdbs=tuple(extras["pdbs"]),
                machine_config_pools=None if extras["pools"] is None else tuple(extras["pools"]),
                targets=plan.targets,
                managed=cluster.managed,
                held_by_others=plan.held_by_others,
                scope=options.scope,
                canary_mode=options.canary_mode,
                wait=options.wait and not options.preflight_only,
                retry_failed_nodes=options.retry_failed_nodes,
                target_version=target.version if target else "",
                upgrade_controller=not manual,
            )
        )

    def _run_with_controller(
        self,
        cluster: ClusterRead,
        *,
        plan: RolloutPlan,
        target: DriverTarget,
        effective: Mapping[str, Any],
        result: Dict[str, Any],
    ) -> Dict[str, Any]:
        """Write the plan, then watch the upgrade controller work (halting at a failed node) and clean up."""
        self.finish_pool_moves(cluster, result=result)
        self.execute(plan.in_phase(PHASE_HOLD))
        scope_writes = plan.in_phase(PHASE_SCOPE)
        if plan.pin is not None:
            self.execute([write for write in scope_writes if write.op != "create"])
            self.move_pool(
                cluster,
                nodes=plan.pin.nodes,
                writes=[write for write in scope_writes if write.op == "create"],
                driver_name=plan.pin.driver_name,
                member=True,
                effective=effective,
                result=result,
            )
            self.execute(plan.in_phase(PHASE_TARGET))
        elif self.options.scope == SCOPE_ALL:
            # The target first, the held nodes still held; those whose pod already runs it skip the cycle; then
            # the holds go (a rollback's nodes never start the driver being taken back).
            self.execute(plan.in_phase(PHASE_TARGET))
            if not self.gitops_deferred and self.options.wait:
                self.skip_needless_cycles(cluster, plan=plan, target=target)
            self.execute(scope_writes)
        else:
            self.execute(scope_writes)
            self.execute(plan.in_phase(PHASE_TARGET))
        result.update(gitops_changes=list(self.gitops_deferred), gitops_pending=bool(self.gitops_deferred))
        if self.gitops_deferred:  # the rest waits for the commit to be synced: the caller commits these, runs again
            return self._finish(result)
        if not self.options.wait:
            if plan.in_phase(PHASE_CLEANUP):
                self.warnings.append("wait is false: the canary NVIDIADriver stays until a run that waits finishes")
            return self._finish(result)

        views, progress = self.watch(cluster, plan=plan, target=target, effective=effective, result=result)
        events = self.collected_events()
        result["timeline"] = build_timeline(nodes=plan.targets, events=events, observed=self.tracker.observed)
        if progress.failed:
            self.halt(cluster, plan=plan, target=target, views=views, progress=progress, events=events, result=result)
        cleanup = plan.in_phase(PHASE_CLEANUP)
        if cleanup:
            self.move_pool(
                cluster,
                nodes=tuple(name for name in plan.canary_nodes if name in plan.targets),
                writes=cleanup,
                driver_name=self.options.canary_driver_name,
                member=False,
                effective=effective,
                result=result,
            )
        return self._finish(result)

    def skip_needless_cycles(self, cluster: ClusterRead, *, plan: RolloutPlan, target: DriverTarget) -> None:
        """Held upgrade-required nodes whose driver pod already runs the target's revision go to upgrade-done
        before their release (``_gpu_driver_settle``); when the DaemonSets do not show the target in time the
        controller cycles them, as it would anyway."""
        wanted = set(plan.targets)
        if not any(
            name_of(node) in wanted and labels_of(node).get(STATE_LABEL) == STATE_REQUIRED for node in cluster.nodes
        ):
            return

        def observe() -> List[Dict[str, Any]]:
            return self.api.list(DAEMONSETS, namespace=cluster.namespace, label_selector=DRIVER_COMPONENT_SELECTOR)

        try:
            outcome = wait_until(
                observe,
                lambda found: daemonsets_run_target(found, target_version=target.version),
                timeout=min(self._remaining(), SETTLE_TIMEOUT),
                sleep=min(self.options.wait_sleep, SETTLE_TIMEOUT / 10),
                what=f"the driver DaemonSets to render driver {target.version}",
                clock=self.clock.monotonic,
                pause=self.clock.pause,
            )
        except WaitTimeoutError as err:
            self.warnings.append(f"{err.msg}: nodes waiting for an upgrade go through the controller's cycle")
            return
        self.execute(
            needless_cycle_writes(
                nodes=self.api.list(NODES),
                driver_pods=self.api.list(PODS, namespace=cluster.namespace, label_selector=DRIVER_COMPONENT_SELECTOR),
                daemonsets=outcome.value,
                revisions=self.api.list(CONTROLLER_REVISIONS, namespace=cluster.namespace),
                targets=plan.targets,
            )
        )

    # -- without the upgrade controller ---------------------------------------------------------
    def run_without_controller(
        self,
        cluster: ClusterRead,
        *,
        plan: RolloutPlan,
        target: DriverTarget,
        effective: Mapping[str, Any],
        result: Dict[str, Any],
    ) -> Dict[str, Any]:
        """Write the target, then replace the driver pods node by node with the rollout engine (see
        ``_gpu_driver_manual``). autoUpgrade is never written unless the caller's upgrade_policy names it."""
        options = self.options
        result["upgrade_controller"] = False
        if options.scope == SCOPE_CANARY and not plan.canary_nodes:
            selector = ",".join(f"{key}={value}" for key, value in sorted(options.canary_selector.items()))
            raise InvalidInputError(
                f"No node hosting a GPU driver pod carries {selector}: label the canary node(s) first"
            )
        if options.canary_mode and options.scope == SCOPE_CANARY:
            self.warnings.append(
                f"No upgrade controller: canary_mode {options.canary_mode} is not used; the module replaces the "
                "driver pod on the canary node(s) only. Any other driver pod that restarts comes up at the target "
                "(the DaemonSet template carries it)"
            )
        if not options.check_mode:
            self.execute(plan.in_phase(PHASE_SCOPE))
            self.execute(plan.in_phase(PHASE_TARGET))
            if not options.wait:
                self.warnings.append("wait is false: without the upgrade controller no driver pod was replaced")
                return self._finish(result)
        run = ManualRun(
            namespace=cluster.namespace,
            nodes=tuple(self.api.list(NODES)) if not options.check_mode else tuple(cluster.nodes),
            driver_pods=tuple(cluster.driver_pods),
            managed=tuple(sorted(cluster.managed)),
            canary_nodes=plan.canary_nodes,
            held_by_others=plan.held_by_others,
            canary_only=options.scope == SCOPE_CANARY,
            effective_policy=effective,
            target_version=target.version,
            wait_timeout=self._remaining(),
            sleep=options.wait_sleep,
            undo_other_targets=options.retry_failed_nodes,
            check_mode=options.check_mode,
            alerts=options.alerts,
            maintenance=resolve_settings(self.api, options.node_maintenance),
            failure_domain_label=options.failure_domain_label,
            max_per_domain=options.max_per_domain,
        )
        try:
            engine = run_manual_rollout(
                self.api, run, clock=self.clock.monotonic, pause=self.clock.pause, now=self.clock.now
            )
        except RolloutHaltedError as err:
            self._manual_result(result, err.result or {})
            raise RolloutHaltedError(
                self._manual_halt_message(target, err, result), node=err.node, result=self._finish(result)
            ) from err
        self._manual_result(result, engine)
        if options.check_mode:
            self.changed = plan.changes or bool(engine.get("changed"))
        else:
            self.changed = self.changed or bool(engine.get("changed"))
        return self._finish(result)

    @staticmethod
    def _manual_result(result: Dict[str, Any], engine: Mapping[str, Any]) -> None:
        timeline = list(engine.get("timeline") or [])
        result["rollout"] = dict(engine)
        result["targets"] = [entry["node"] for entry in timeline] or list(engine.get("plan", {}).get("order") or [])
        result["timeline"] = timeline_of(timeline)
        result["failures"] = manual_failures(timeline)
        result["nodes_not_granted"] = list(engine.get("nodes_not_granted") or [])
        failed = list(engine.get("nodes_failed") or [])
        result["progress"] = {
            "done": list(engine.get("nodes_done") or []) + list(engine.get("nodes_skipped") or []),
            "failed": failed,
            "in_progress": [],
            "pending": list(engine.get("nodes_not_started") or []),
        }
        if engine.get("halted"):
            result["halted"] = True
            result["halt"] = {"failed": failed, "held": result["progress"]["pending"], "in_progress": []}

    @staticmethod
    def _manual_halt_message(target: DriverTarget, err: RolloutHaltedError, result: Dict[str, Any]) -> str:
        node = err.node or (result.get("halt", {}).get("failed") or [""])[0]
        pending = result.get("progress", {}).get("pending") or []
        if not node:
            # Nothing failed: the budget (or the Maintenance Operator) let no further node start.
            return (
                f"GPU driver rollout to {target.version} (without the upgrade controller) stopped before every node "
                f"was done: {err.msg}. No node failed; {len(pending)} node(s) not started were not touched. Run the "
                "same task again to go on from where it stopped"
            )
        reason = next((f["reason"] for f in result.get("failures", []) if f["node"] == node), "") or err.msg
        if not result.get("failures") and node:
            result["failures"] = [{"node": node, "state": "", "reason": reason}]
        return (
            f"GPU driver rollout to {target.version} (without the upgrade controller) halted at node "
            f"{node or '?'}: {reason}. The node stays cordoned; {len(pending)} node(s) not yet started were not "
            f"touched. Fix the cause, then run again after `{clear_command(node or '<node>')}`, or roll back "
            "(retry_failed_nodes with the previous driver)"
        )

    # -- moving nodes between NVIDIADriver pools ---------------------------------------------------
    def move_pool(
        self,
        cluster: ClusterRead,
        *,
        nodes: Tuple[str, ...],
        writes: Sequence[Write],
        driver_name: str,
        member: bool,
        effective: Mapping[str, Any],
        result: Dict[str, Any],
    ) -> None:
        """Move nodes into (``member``) or out of an NVIDIADriver's pool without pulling the driver from under
        running GPU pods.

        A pool move replaces the node's driver pod through the DaemonSets, outside the upgrade controller, so
        nobody cordons the node or deletes its GPU pods first. This does what the controller would: cordon,
        evict the GPU pods (PodDisruptionBudgets apply), move, wait for the new driver pod, uncordon. An
        annotation on each node records the move, so an interrupted run finishes it next time.
        """
        deletion = dict(effective.get("podDeletion") or {})
        selection = PodSelection(
            gpu=True,
            exempt_label="nvidia.com/gpu-driver-upgrade-drain.skip",
            force=bool(deletion.get("force")),
            delete_emptydir_data=bool(deletion.get("deleteEmptyDir")),
        )
        by_name = {name_of(node): node for node in cluster.nodes}
        for name in nodes:
            node = by_name.get(name) or {}
            if POOL_MOVE_ANNOTATION in annotations_of(node):
                continue
            was_cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            marker = POOL_MOVE_WAS_UNSCHEDULABLE if was_cordoned else POOL_MOVE_CORDONED
            patch_node(self.api, name, annotations={POOL_MOVE_ANNOTATION: marker}, unschedulable=True)
            self.changed = True
        for name in nodes:
            drain_pods(
                self.api,
                name,
                selection=selection,
                timeout=self._remaining(),
                sleep=self.options.wait_sleep,
                clock=self.clock.monotonic,
                pause=self.clock.pause,
            )
        self.execute(writes)
        self.wait_for_pool(cluster, driver_name=driver_name, nodes=nodes, member=member, result=result)
        self._release_moved(nodes)

    def _release_moved(self, nodes: Sequence[str]) -> None:
        for name in nodes:
            node = self.api.get(NODES, name) or {}
            marker = annotations_of(node).get(POOL_MOVE_ANNOTATION)
            if marker is None:
                continue
            patch_node(
                self.api,
                name,
                annotations={POOL_MOVE_ANNOTATION: None},
                unschedulable=False if marker == POOL_MOVE_CORDONED else None,
            )
            self.changed = True

    def finish_pool_moves(self, cluster: ClusterRead, *, result: Dict[str, Any]) -> None:
        """A run interrupted during a pool move left nodes cordoned with the move annotation: finish them."""
        moving = tuple(name_of(node) for node in cluster.nodes if POOL_MOVE_ANNOTATION in annotations_of(node))
        if not moving:
            return
        canary_exists = any(name_of(cr) == self.options.canary_driver_name for cr in cluster.drivers)
        self.wait_for_pool(
            cluster, driver_name=self.options.canary_driver_name, nodes=moving, member=canary_exists, result=result
        )
        self._release_moved(moving)

    # -- writes --------------------------------------------------------------------------------
    def execute(self, writes: Sequence[Write]) -> None:
        for write in writes:
            if write.op == "create":
                self._create(write)
            elif write.op == "delete":
                if self.api.delete(REFS[write.kind], write.name) is not None:
                    self.changed = True
                    self.patches.append({"op": "delete", "kind": write.kind, "name": write.name})
            elif write.kind == "Node":
                if write.patch:
                    # Label and annotation merges need no guard: they cannot undo another writer's fields.
                    self.api.patch(NODES, write.name, write.patch)
                    self.changed = True
                    self.patches.append({"op": "patch", "kind": "Node", "name": write.name, "patch": write.patch})
            else:
                self._guarded_patch(write)

    def _guarded_patch(self, write: Write) -> None:
        """Merge patch carrying the resourceVersion it was computed from; on 409 read again and recompute."""
        ref = REFS[write.kind]
        for _attempt in range(CONFLICT_ATTEMPTS):
            current = self.api.get(ref, write.name)
            if current is None:
                raise KubeApiError(f"{write.kind} {write.name} disappeared before it could be patched", status=404)
            patch = merge_patch_for(current, write.desired)
            if not patch:
                return
            if f"{write.kind}/{write.name}" in self.options.gitops_managed:
                self._defer_to_git(write, patch)
                return
            body = apply_merge_patch(patch, {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}})
            try:
                self.api.patch(ref, write.name, body)
            except KubeApiError as err:
                if err.status == 409:
                    continue
                raise
            self.changed = True
            self.patches.append({"op": "patch", "kind": write.kind, "name": write.name, "patch": body})
            return
        raise KubeApiError(
            f"{write.kind} {write.name} kept changing under this write ({CONFLICT_ATTEMPTS} conflicts in a row)",
            status=409,
            reason="Conflict",
        )

    def _defer_to_git(self, write: Write, patch: Dict[str, Any]) -> None:
        """A field of an object Argo CD writes differs: leave it for a commit, or (after the sync) say it is missing."""
        self.gitops_deferred.append(
            deferred_change(write.kind, write.name, patch, synced=self.options.gitops_synced, why=write.why)
        )

    def _create(self, write: Write) -> None:
        ref = REFS[write.kind]
        try:
            self.api.create(ref, write.desired)
        except KubeApiError as err:
            if err.status != 409:
                raise
            # Created meanwhile (a parallel run): bring it to what this run wants instead.
            self._guarded_patch(
                Write(
                    op="patch",
                    kind=write.kind,
                    name=write.name,
                    why=write.why,
                    phase=write.phase,
                    desired={"spec": write.desired.get("spec", {})},
                )
            )
            return
        self.changed = True
        self.patches.append({"op": "create", "kind": write.kind, "name": write.name, "body": write.desired})

    # -- watching ------------------------------------------------------------------------------
    def observe(
        self, cluster: ClusterRead, *, nodes: Sequence[str]
    ) -> Tuple[Dict[str, NodeView], List[Dict[str, Any]]]:
        node_objects = [
            node
            for node in self.api.list(NODES)
            if labels_of(node).get(GPU_PRESENT_LABEL) == "true" or name_of(node) in cluster.managed
        ]
        pods = self.api.list(PODS, namespace=cluster.namespace, label_selector=DRIVER_COMPONENT_SELECTOR)
        views = node_views(node_objects, pods)
        elapsed = self.clock.monotonic() - self.started
        if self.tracker.observe(views, nodes=nodes, at=iso(self.clock.now()), elapsed=elapsed):
            # Something moved: collect the controller's Events before the API server expires them.
            self.event_log.add(self.upgrade_events())
        return views, node_objects

    def _remaining(self) -> float:
        return max(0.0, self.deadline - self.clock.monotonic())

    def watch(
        self,
        cluster: ClusterRead,
        *,
        plan: RolloutPlan,
        target: DriverTarget,
        effective: Mapping[str, Any],
        result: Dict[str, Any],
    ) -> Tuple[Dict[str, NodeView], Progress]:
        latest: Dict[str, Any] = {}
        pacer = self.pacer(cluster, plan=plan, effective=effective)
        if pacer.limits is not None:
            result["pacing"] = {
                "order": list(pacer.order),
                "limits": asdict(pacer.limits),
                "failure_domain_label": self.options.failure_domain_label,
                "released": self.released,
            }

        def observe() -> Progress:
            views, node_objects = self.observe(cluster, nodes=plan.targets)
            latest["views"], latest["nodes"] = views, node_objects
            progress = rollout_progress(views, targets=plan.targets, target_version=target.version)
            managed = [node for node in node_objects if name_of(node) in cluster.managed]
            self.pace(
                views,
                node_objects,
                progress=progress,
                pacer=pacer,
                pool=pool_from_objects(managed, domain_label=self.options.failure_domain_label),
            )
            return progress

        try:
            outcome = wait_until(
                observe,
                rollout_settled,
                timeout=self._remaining(),
                sleep=self.options.wait_sleep,
                what=f"driver {target.version} on {len(plan.targets)} node(s)",
                clock=self.clock.monotonic,
                pause=self.clock.pause,
            )
        except AlertsFiringError as err:
            self.latest_nodes = latest["nodes"]
            self.halt_for_alerts(err, plan=plan, target=target, result=result)
        except WaitTimeoutError as err:
            progress: Progress = err.result["last"]
            result["progress"] = progress.as_dict()
            result["timeline"] = build_timeline(
                nodes=plan.targets, events=self.collected_events(), observed=self.tracker.observed
            )
            raise WaitTimeoutError(
                f"{err.msg}: {len(progress.done)} of {len(plan.targets)} node(s) done, "
                f"in progress: {', '.join(progress.in_progress) or 'none'}, "
                f"not started: {', '.join(progress.pending) or 'none'}",
                result=self._finish(result),
            ) from err
        self.latest_nodes = latest["nodes"]
        result["progress"] = outcome.value.as_dict()
        if self.options.alerts is not None:
            result.update(alerts_held_for=list(self.alerts_hold.held_for), held_by_alerts=[])
        return latest["views"], outcome.value

    # -- pacing: the controller starts the nodes, the skip label keeps it from starting more -----------------
    def pacer(self, cluster: ClusterRead, *, plan: RolloutPlan, effective: Mapping[str, Any]) -> SkipLabelPacer:
        """Without failure domains the controller paces by the upgradePolicy's maxParallelUpgrades and
        maxUnavailable. With them this run releases the held targets in turn within the same two limits (nodes
        already unavailable count) and at most max_per_domain per domain, in the order of _rollout_schedule."""
        if not self.paced:
            return SkipLabelPacer(order=plan.targets)
        label = self.options.failure_domain_label
        managed = [node for node in cluster.nodes if name_of(node) in cluster.managed]
        max_unavailable, max_parallel = policy_limits(effective)
        budget = capacity_budget(max_unavailable=max_unavailable, pool_nodes=managed)
        pool = pool_from_objects(managed, domain_label=label)
        return SkipLabelPacer(
            order=tuple(rollout_order(list(plan.targets), pool=pool, canaries=[])),
            limits=ScheduleLimits(
                max_unavailable=budget.max_unavailable,
                max_parallel=max_parallel,
                max_per_domain=self.options.max_per_domain,
            ),
        )

    def pace(
        self,
        views: Mapping[str, NodeView],
        node_objects: Sequence[Mapping[str, Any]],
        *,
        progress: Progress,
        pacer: SkipLabelPacer,
        pool: Mapping[str, PoolNode],
    ) -> None:
        """While a matching alert fires, the targets not started get the skip label (the upgrade controller starts
        none of them; AlertsFiringError after the gate's wait, they stay held). Otherwise the held targets the
        pacer lets go now lose it."""
        where = progress.by_node()
        firing = self.firing_alerts()
        if firing:
            # A node that vanished cannot be held; one under a skip label already is.
            held = [name for name in where if name not in views or views[name].skipped]
            self.hold_for_alerts(node_objects, firing=firing, pending=list(pacer.to_hold(where, held=held)))
            return
        alerts_held = self.alerts_hold.nodes
        self.alerts_hold.nodes, self.alerts_hold.since = (), None
        release = pacer.pace(
            where,
            held_by_us=[name for name in where if name in views and views[name].hold],
            released=self.released,
            held=[name for name in where if name in views and views[name].skipped],
            pool=pool,
        ).release
        writes = [
            release_write(node, why="alerts stopped firing" if name_of(node) in alerts_held else "its turn")
            for node in node_objects
            if name_of(node) in release
        ]
        self.execute([write for write in writes if write is not None])
        self.released.extend(name for name in release if name not in self.released)

    def firing_alerts(self) -> List[str]:
        """The alerts of the gate firing now ([] without a gate)."""
        gate = self.options.alerts
        if gate is None:
            return []
        try:
            return [alert.describe() for alert in gate.firing()]
        except UnreadableOutputError as err:
            # Could not check is no pass: hold as if an alert fired, and say why.
            return [f"(Prometheus unreadable: {err.msg})"]

    def hold_for_alerts(
        self, node_objects: Sequence[Mapping[str, Any]], *, firing: List[str], pending: List[str]
    ) -> None:
        """Hold ``pending`` (the targets not started) while ``firing``, with an Event on each; AlertsFiringError once
        the gate's wait is over."""
        gate, hold = self.options.alerts, self.alerts_hold
        if gate is None or (not pending and not hold.nodes):
            return  # every node has started: nothing left to hold
        now = self.clock.monotonic()
        hold.since = now if hold.since is None else hold.since
        hold.held_for = tuple(sorted({*hold.held_for, *firing}))
        if pending:
            self.execute(halt_writes(node_objects, hold=pending))
            hold.nodes = tuple(sorted({*hold.nodes, *pending}))
            message = f"GPU driver rollout holds {', '.join(pending)} while alerts fire: {', '.join(firing)}"
            for node in node_objects:
                if name_of(node) in pending:
                    record_event(self.api, {"kind": "Node", "apiVersion": "v1", **node}, message=message,
                                 action="AlertsHold")  # fmt: skip
        if now - hold.since >= gate.timeout:
            raise AlertsFiringError(
                f"halted after {now - hold.since:.0f}s because Prometheus alerts matching {gate.alert_filter!r} are "
                f"firing: {', '.join(firing)}",
                result={"firing": firing},
            )

    def halt_for_alerts(
        self, err: AlertsFiringError, *, plan: RolloutPlan, target: DriverTarget, result: Dict[str, Any]
    ) -> None:
        firing = list(err.result.get("firing") or [])
        result["timeline"] = build_timeline(
            nodes=plan.targets, events=self.collected_events(), observed=self.tracker.observed
        )
        result.update(halted=True, held_by_alerts=firing, alerts_held_for=list(self.alerts_hold.held_for))
        result["halt"] = {"failed": [], "held": list(self.alerts_hold.nodes), "in_progress": []}
        message = (
            f"GPU driver rollout to {target.version} {err.msg}; {len(self.alerts_hold.nodes)} node(s) not yet "
            "started stay held with nvidia.com/gpu-driver-upgrade.skip=true (the same task run again releases them)"
        )
        raise RolloutHaltedError(message, node="", result=self._finish(result)) from err

    def wait_for_pool(
        self, cluster: ClusterRead, *, driver_name: str, nodes: Tuple[str, ...], member: bool, result: Dict[str, Any]
    ) -> None:
        """Until the nodes' driver pods run from (or, ``member`` False, away from) the NVIDIADriver's DaemonSets."""

        def observe() -> bool:
            views, _nodes = self.observe(cluster, nodes=nodes)
            owners = {
                name_of(ds): str(ref.get("name"))
                for ds in self.api.list(
                    DAEMONSETS, namespace=cluster.namespace, label_selector=DRIVER_COMPONENT_SELECTOR
                )
                for ref in (ds.get("metadata") or {}).get("ownerReferences") or []
                if ref.get("kind") == "NVIDIADriver"
            }
            return pool_settled(views, nodes=nodes, driver_name=driver_name, daemonset_owners=owners, member=member)

        what = (
            f"the canary node(s) {', '.join(nodes)} to run their driver from NVIDIADriver {driver_name}"
            if member
            else f"the canary node(s) {', '.join(nodes)} to return to the production NVIDIADriver"
        )
        try:
            wait_until(
                observe,
                bool,
                timeout=self._remaining(),
                sleep=self.options.wait_sleep,
                what=what,
                clock=self.clock.monotonic,
                pause=self.clock.pause,
            )
        except WaitTimeoutError as err:
            raise WaitTimeoutError(err.msg, result=self._finish(result)) from err

    def collected_events(self) -> List[Dict[str, Any]]:
        """Every upgrade Event seen during the run, refreshed once more now."""
        self.event_log.add(self.upgrade_events())
        return self.event_log.events

    def upgrade_events(self) -> List[Dict[str, Any]]:
        return self.api.list(
            EVENTS,
            namespace=NODE_EVENTS_NAMESPACE,
            field_selector=f"involvedObject.kind=Node,reason={UPGRADE_EVENT_REASON}",
        )

    # -- halting -------------------------------------------------------------------------------
    def halt(
        self,
        cluster: ClusterRead,
        *,
        plan: RolloutPlan,
        target: DriverTarget,
        views: Mapping[str, NodeView],
        progress: Progress,
        events: Sequence[Mapping[str, Any]],
        result: Dict[str, Any],
    ) -> None:
        decision = halt_decision(views, managed=cluster.managed, failed=progress.failed, target_version=target.version)
        holds = halt_writes(self.latest_nodes, hold=decision.hold)
        self.execute(holds)
        failures = []
        for name in decision.failed:
            node_events = [e for e in events if (e.get("involvedObject") or {}).get("name") == name]
            reason = failure_reason(views.get(name), node_events=node_events, timeline=result["timeline"].get(name, []))
            failures.append({"node": name, "state": views[name].state if name in views else "", "reason": reason})
        first = failures[0]
        result["failures"] = failures
        result["halted"] = True
        result["halt"] = {
            "failed": list(decision.failed),
            "held": list(decision.hold),
            "in_progress": list(decision.in_progress),
        }
        message = (
            f"GPU driver rollout to {target.version} halted at node {first['node']}: {first['reason']}. "
            f"{len(decision.hold)} node(s) not yet started are held with nvidia.com/gpu-driver-upgrade.skip=true"
            + (f"; {_few(decision.in_progress)} were under way and are left to finish" if decision.in_progress else "")
        )
        failed_node = next((n for n in self.latest_nodes if name_of(n) == first["node"]), None)
        if failed_node is not None:
            failed_node.setdefault("kind", "Node")
            failed_node.setdefault("apiVersion", "v1")
            record_event(self.api, failed_node, message=message, event_type="Warning", action="Halt")
        raise RolloutHaltedError(message, node=first["node"], result=self._finish(result))

    # -- results -------------------------------------------------------------------------------
    def _base_result(
        self, *, cluster: ClusterRead, target: Optional[DriverTarget], plan: RolloutPlan, preflight: Preflight
    ) -> Dict[str, Any]:
        driver_section = ((cluster.policy.get("spec") or {}).get("driver")) or {}
        return {
            "cluster_policy": name_of(cluster.policy),
            "operator_namespace": cluster.namespace,
            "uses_nvidia_driver_crd": bool(driver_section.get("useNvidiaDriverCRD")),
            "target": {"version": target.version, "repository": target.repository, "image": target.image}
            if target
            else None,
            "scope": self.options.scope,
            "canary_mode": self.options.canary_mode,
            "targets": list(plan.targets),
            "canary_nodes": list(plan.canary_nodes),
            "held_by_others": list(plan.held_by_others),
            "plan": plan.as_dict(),
            "preflight": preflight.as_dict(),
            "timeline": {},
            "failures": [],
            "halted": False,
            "gitops_changes": gitops_changes(plan, managed=self.options.gitops_managed),
            "gitops_pending": bool(gitops_changes(plan, managed=self.options.gitops_managed)),
        }

    def _finish(self, result: Dict[str, Any]) -> Dict[str, Any]:
        elapsed = self.clock.monotonic() - self.started
        self.tracker.close(at=iso(self.clock.now()), elapsed=elapsed)
        result.update(
            changed=self.changed,
            patches=list(self.patches),
            capacity=list(self.tracker.capacity),
            elapsed=round(elapsed, 3),
            api_requests=self.api.requests_sent,
            warnings=list(dict.fromkeys(self.warnings)),
        )
        return result


def _planner_view(cluster: ClusterRead) -> ClusterView:
    """The cluster read as the planner (pure) takes it."""
    return ClusterView(
        policy=cluster.policy,
        drivers=tuple(cluster.drivers),
        nodes=tuple(cluster.nodes),
        managed=cluster.managed,
        crd_has_default=cluster.crd_has_default,
    )


def check_gitops_plan(plan: RolloutPlan, *, managed: Sequence[str], canary_mode: Optional[str]) -> None:
    """GitOps mode edits fields of objects in Git; it neither creates nor deletes them (Argo CD would prune or
    restore what the manifests do not hold), so a plan that would is refused before any write."""
    if not managed:
        return
    for write in plan.writes:
        if write.op != "patch" and f"{write.kind}/{write.name}" in managed:
            raise InvalidInputError(
                f"{write.kind} {write.name} is managed in Git (gpufleet_gitops.manifests) and this step would "
                f"{write.op} it ({write.why}); GitOps mode only edits fields of managed objects"
            )
    if canary_mode == "nvidiadriver" and any(item.startswith("NVIDIADriver/") for item in managed):
        raise InvalidInputError(
            "canary_mode nvidiadriver moves nodes between NVIDIADriver pools on the cluster, which cannot wait for a "
            "sync in the middle of a node's move; with NVIDIADrivers managed in Git use canary_mode skip_label"
        )


def gitops_changes(plan: RolloutPlan, *, managed: Sequence[str]) -> List[Dict[str, Any]]:
    """The plan's merge patches of objects managed in Git (what a commit would carry), as the plan's read saw them."""
    return [
        {"kind": write.kind, "name": write.name, "patch": write.patch, "why": write.why}
        for write in plan.writes
        if write.op == "patch" and write.patch and f"{write.kind}/{write.name}" in managed
    ]


def _few(names: Sequence[str], *, shown: int = 5) -> str:
    """Names for a message: the first few, then how many more."""
    if len(names) <= shown:
        return ", ".join(names)
    return f"{', '.join(names[:shown])} and {len(names) - shown} more"


def plan_diff(plan: RolloutPlan) -> List[Dict[str, Any]]:
    """Before and after of every object the plan changes (normalized), node labels gathered in one entry."""
    entries: List[Dict[str, Any]] = []
    node_before: Dict[str, Any] = {}
    node_after: Dict[str, Any] = {}
    created: Dict[str, Dict[str, Any]] = {}
    for write in plan.writes:
        if write.kind == "Node":
            if not write.patch:
                continue
            before = write.before or node_label_view({"metadata": {"name": write.name}})
            current = node_after.get(write.name) or before["metadata"]
            node_before.setdefault(write.name, before["metadata"])
            node_after[write.name] = apply_merge_patch(current, write.patch.get("metadata", {}))
            continue
        header = f"{write.kind} {write.name}"
        if write.op == "create":
            created[write.name] = write.desired
            entries.append(
                {
                    "before": {},
                    "after": normalized_for_diff(write.desired),
                    "before_header": header,
                    "after_header": header,
                }
            )
        elif write.op == "delete":
            entries.append(
                {
                    "before": normalized_for_diff(write.before),
                    "after": {},
                    "before_header": header,
                    "after_header": header,
                }
            )
        elif write.patch:
            if write.name in created and write.kind == "NVIDIADriver":
                # The new canary pool is created pinned and then bumped: show where it ends.
                entry = next(e for e in entries if e["after_header"] == header)
                entry["after"] = normalized_for_diff(apply_merge_patch(created[write.name], write.patch))
                continue
            entries.append(
                {
                    "before": normalized_for_diff(write.before),
                    "after": normalized_for_diff(apply_merge_patch(write.before or {}, write.patch)),
                    "before_header": header,
                    "after_header": header,
                }
            )
    if node_after:
        entries.append(
            {
                "before": {"nodes": dict(sorted(node_before.items()))},
                "after": {"nodes": dict(sorted(node_after.items()))},
                "before_header": "Node labels",
                "after_header": "Node labels",
            }
        )
    return entries


def run_driver_rollout(api: KubeApi, options: DriverRolloutOptions, *, clock: Optional[Clock] = None) -> Dict[str, Any]:
    """The module's one entry point: returns the result, or raises a GpuFleetError carrying the partial result."""
    if options.scope == SCOPE_CANARY and not options.canary_mode:
        raise InvalidInputError("scope 'canary' needs canary_mode (nvidiadriver or skip_label)")
    if options.wait_sleep <= 0:
        raise InvalidInputError("wait_sleep must be greater than 0")
    if options.wait_timeout < 0:
        raise InvalidInputError("wait_timeout cannot be negative")
    return DriverRollout(api, options, clock=clock).run()


__all__ = ["ERROR", "Clock", "DriverRolloutOptions", "plan_diff", "run_driver_rollout"]
