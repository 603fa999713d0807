"""Assembling the simulation: the entry point the CLI calls.

``populate(twin, options)`` builds ``twin.sim`` (a ``SimState``), seeds the
cluster (or loads a snapshot), applies a scenario file, wires the simulated
controllers, the fault and recorder request hooks, the admin endpoints and
the pod log reader, publishes facts, and lets the GPU Operator simulation
install itself when it is present.

``install_core(twin, sim)`` wires only the controllers (kubelet, scheduler,
node lifecycle, workload controllers, garbage collector); tests use it to
run the controllers in-process against a store.  ``install_garbage_collector``
wires the garbage collector alone (``--bare``: deletion propagation is part
of what any API client sees).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..apiserver.cluster import Controller, Twin
from ..kube.events import EventRecorder
from ..kube.garbagecollector import GarbageCollector
from ..kube.index import ClusterIndex
from ..kube.kubelet import Kubelet, KubeletTimings, annotation_behaviour
from ..kube.logs import PodLogReader
from ..kube.namespaces import namespace_object
from ..kube.nodelifecycle import LifecycleTimings, NodeLifecycleController
from ..kube.rootca import RootCACertPublisher
from ..kube.scheduler import Scheduler
from ..kube.serviceaccounts import (
    ServiceAccountAdmission,
    ServiceAccountsController,
    ensure_referenced_service_accounts,
)
from ..kube.state import SimState
from ..kube.statefulset import StatefulSetController
from ..kube.tainteviction import TaintEvictionController
from ..kube.workloads import (
    DaemonSetController,
    DeploymentController,
    JobController,
    PdbStatusController,
    ReplicaSetController,
)
from ..machinery.kinds import Kinds
from ..operators import (
    argocd,
    dcgm_exporter,
    gpu_operator,
    gpu_operator_olm,
    maintenance_operator,
    network_operator,
    openshift,
    sriov,
    sriov_olm,
)
from .faults import FaultInjector
from .recorder import Recorder
from .scenario import Scenario, load_scenario
from .seed import SeedSpec, seed_cluster
from .snapshot import continue_source_clock, load_snapshot
from .validation import install as install_validation_pods

log = logging.getLogger(__name__)

# Above this many nodes the kubelet and scheduler stop recording per-pod
# Events (Scheduled, Pulled, Started...), which would otherwise be several
# Events per pod for tens of thousands of pods.
POD_EVENTS_MAX_NODES = 200


@dataclass
class CoreSim:
    """The simulated control plane and node agents, wired to one twin."""

    kinds: Kinds
    index: ClusterIndex
    events: EventRecorder
    kubelet: Kubelet
    scheduler: Scheduler
    lifecycle: NodeLifecycleController
    taint_eviction: TaintEvictionController
    serviceaccounts: ServiceAccountsController
    root_ca: RootCACertPublisher
    daemonsets: DaemonSetController
    replicasets: ReplicaSetController
    deployments: DeploymentController
    jobs: JobController
    statefulsets: StatefulSetController
    pdbs: PdbStatusController
    garbage_collector: GarbageCollector
    extra: list[Controller] = field(default_factory=list)

    def controllers(self) -> list[Controller]:
        return [
            self.serviceaccounts,
            self.root_ca,
            self.scheduler,
            self.kubelet,
            self.lifecycle,
            self.taint_eviction,
            self.daemonsets,
            self.replicasets,
            self.deployments,
            self.jobs,
            self.statefulsets,
            self.pdbs,
            self.garbage_collector,
            *self.extra,
        ]


def install_core(
    twin: Twin,
    sim: SimState,
    *,
    kubelet_timings: KubeletTimings | None = None,
    lifecycle_timings: LifecycleTimings | None = None,
) -> CoreSim:
    """Create the core controllers for ``twin`` and append them to ``twin.controllers``."""
    kinds = Kinds.from_registry(twin.registry)
    sim.clock = twin.clock
    twin.sim = sim
    events = sim.events if isinstance(sim.events, EventRecorder) else EventRecorder(twin.store, kinds.event, twin.clock)
    sim.events = events
    if annotation_behaviour not in sim.pod_behaviours:
        sim.pod_behaviours.insert(0, annotation_behaviour)
    index = ClusterIndex(twin.store, kinds)
    core = CoreSim(
        kinds=kinds,
        index=index,
        events=events,
        kubelet=Kubelet(sim=sim, kinds=kinds, index=index, events=events, timings=kubelet_timings),
        scheduler=Scheduler(kinds=kinds, index=index, events=events, pod_events=sim.pod_events),
        lifecycle=NodeLifecycleController(sim=sim, kinds=kinds, index=index, events=events, timings=lifecycle_timings),
        taint_eviction=TaintEvictionController(sim=sim, kinds=kinds, index=index, events=events),
        serviceaccounts=ServiceAccountsController(kinds=kinds),
        root_ca=RootCACertPublisher(kinds=kinds, ca_pem=twin.ca_cert_pem.decode()),
        daemonsets=DaemonSetController(kinds=kinds, index=index, events=events),
        replicasets=ReplicaSetController(kinds=kinds, index=index, events=events),
        deployments=DeploymentController(kinds=kinds, index=index, events=events),
        jobs=JobController(kinds=kinds, index=index, events=events),
        statefulsets=StatefulSetController(kinds=kinds, index=index, events=events),
        pdbs=PdbStatusController(kinds=kinds, index=index, events=events),
        garbage_collector=GarbageCollector(kinds=kinds, index=index),
    )
    twin.controllers.extend(core.controllers())
    # The ServiceAccount admission plugin refuses pods whose ServiceAccount does not exist; with
    # the controller that makes every namespace's ``default`` (an API-only twin has neither).
    twin.store.add_admission(ServiceAccountAdmission(store=twin.store, kinds=kinds))
    return core


# API groups a plain Kubernetes cluster does not serve: OpenShift's platform APIs, and OLM's, which the
# kubernetes profile does not run (the GPU and Network Operators are Helm releases there, see
# ``gpu_operator_olm.attach``; OLM can be added to a plain cluster, but this one models clusters without it).
OPENSHIFT_ONLY_GROUPS = frozenset(
    {"config.openshift.io", "machineconfiguration.openshift.io", "image.openshift.io", "operators.coreos.com"}
)


def drop_openshift_only_apis(twin: Twin) -> list[str]:
    """Stop serving ``OPENSHIFT_ONLY_GROUPS`` (CRDs the twin or ``--crds`` installed, built-in kinds)."""
    dropped = []
    crd_type = twin.registry.get("apiextensions.k8s.io", "customresourcedefinitions")
    if crd_type is not None:
        for crd in twin.store.list(crd_type):
            if (crd.get("spec") or {}).get("group") in OPENSHIFT_ONLY_GROUPS:
                twin.store.delete(crd_type, None, crd["metadata"]["name"], immediate=True)
                dropped.append(crd["metadata"]["name"])
    for rtype in list(twin.registry.all()):
        if rtype.group in OPENSHIFT_ONLY_GROUPS:
            twin.registry.remove(rtype.group, rtype.plural)
            dropped.append(f"{rtype.plural}.{rtype.group}")
    return dropped


def install_garbage_collector(twin: Twin) -> GarbageCollector:
    """Only the garbage collector (``--bare``): an API server with kube-controller-manager's GC and nothing else."""
    kinds = Kinds.from_registry(twin.registry)
    collector = GarbageCollector(kinds=kinds, index=ClusterIndex(twin.store, kinds))
    twin.controllers.append(collector)
    return collector


def install_request_recorder(twin: Twin) -> Recorder:
    """The request recorder alone (``--bare``): ``GET /admin/report`` counts what the API served, so a benchmark of
    a client's reads can count them on an API-only cluster whose objects no controller changes."""
    recorder = Recorder(twin=twin, kinds=Kinds.from_registry(twin.registry))
    twin.after_request.append(recorder.after_request)
    twin.routes.extend(recorder.routes())
    return recorder


def populate(twin: Twin, options: dict[str, Any]) -> None:
    """Build the simulated cluster into ``twin`` from the CLI options.

    Options: ``nodes`` (int), ``profile`` ("openshift" | "kubernetes"),
    ``scenario`` (path or None), ``from_snapshot`` (directory or None),
    ``crds`` (already loaded by the CLI; ignored here), ``distributed_training``
    (bool: seed the StatefulSet training job too), ``argocd`` (bool: run the Argo CD
    application controller, ``operators/argocd.py``; the scenario key ``argocd`` too) and
    ``argocd_poll`` (its poll in simulated seconds, default 180) and ``maintenance_operator`` (bool: run the
    NVIDIA Maintenance Operator, ``operators/maintenance_operator.py``; the scenario key ``maintenance_operator`` too,
    whose mapping is the MaintenanceOperatorConfig ``default``'s spec).  Values a scenario
    file sets win over ``nodes``/``profile`` (the CLI cannot tell a default
    from a value typed on the command line).
    """
    scenario_path = options.get("scenario")
    scenario = load_scenario(Path(scenario_path)) if scenario_path else Scenario()
    profile = scenario.profile or options.get("profile") or "kubernetes"
    nodes = scenario.nodes if scenario.nodes is not None else int(options.get("nodes") or 0)
    spec = scenario.seed_spec(nodes=nodes, profile=profile)
    if options.get("distributed_training"):
        spec = dataclasses.replace(spec, distributed_training=True)
    snapshot_dir = options.get("from_snapshot")
    if snapshot_dir:
        continue_source_clock(twin.clock, Path(snapshot_dir))
    sim = SimState(clock=twin.clock, profile=profile, started_at=twin.clock.now())
    sim.pod_events = nodes <= POD_EVENTS_MAX_NODES
    sim.olm_cluster_policy = scenario.olm_cluster_policy
    for version, kernels in scenario.driver_builds.items():
        sim.driver_builds[version] = set(kernels)
    twin.sim = sim
    if profile != "openshift":
        drop_openshift_only_apis(twin)
    kinds = Kinds.from_registry(twin.registry)
    sim.events = EventRecorder(twin.store, kinds.event, twin.clock, ttl_seconds=scenario.event_ttl_seconds)
    if snapshot_dir:
        loaded = load_snapshot(twin, sim, Path(snapshot_dir), profile=profile)
        twin.published["snapshot"] = loaded.summary()
        seeded_nodes = loaded.node_names
        # The namespaces every profile has, in case the dump did not include them.
        for namespace in SeedSpec(nodes=0, profile=profile, workloads=False).namespaces():
            if twin.store.try_get(kinds.namespace, None, namespace) is None:
                twin.store.create(kinds.namespace, namespace_object(namespace, profile=profile))
        ensure_referenced_service_accounts(twin.store, kinds)
    else:
        seeded = seed_cluster(twin, sim, spec)
        seeded_nodes = seeded.worker_names
    recorder = Recorder(twin=twin, kinds=kinds)
    sim.recorder = recorder
    install_core(twin, sim)
    if options.get("argocd") or scenario.argocd is not None:
        # Before the faults, so that a scenario's Argo CD faults find the controller.
        poll = options.get("argocd_poll") or (scenario.argocd or {}).get("poll_seconds") or argocd.POLL_SECONDS
        argocd.install(twin, poll_seconds=float(poll))
    if options.get("maintenance_operator") or scenario.maintenance_operator is not None:
        maintenance_operator.install(twin, config=scenario.maintenance_operator or None)
    faults = FaultInjector(twin=twin, sim=sim, kinds=kinds)
    faults.add_many(scenario.faults)
    twin.controllers.append(faults)
    twin.before_request.append(faults.before_request)
    twin.after_request.append(recorder.after_request)
    twin.routes.extend(faults.routes())
    twin.routes.extend(recorder.routes())
    twin.pod_logs = PodLogReader(sim).read
    twin.published.update(
        {
            "profile": profile,
            "gpu_worker_nodes": seeded_nodes,
            "gpu_operator_namespace": spec.gpu_operator_namespace,
            "network_operator_namespace": spec.network_operator_namespace,
            "sim_started_at": twin.clock.iso(sim.started_at),
            "admin_endpoints": [f"{method} {path}" for method, path, _ in twin.routes],
        }
    )
    # The operators after the node basics, in the order a cluster runs them:
    # the GPU Operator (and OLM for it on OpenShift), the Network Operator, SR-IOV, then the
    # OpenShift machine-config and cluster-version operators, and OLM for OpenShift's SR-IOV operator.
    gpu_operator_olm.attach(twin, gpu_operator.install(twin))
    network_operator.install(twin)
    sriov.install(twin)
    platform = openshift.install(twin)
    if platform is not None and platform.pool_type is not None and platform.cv_type is not None:
        # OpenShift's own SR-IOV Network Operator is an OLM operator (redhat-operators, channel stable).
        sriov_olm.attach(twin)
    # Check pods (nvidia-smi, ibstat, dcgmi diag, PyTorch smoke tests) run to completion.
    install_validation_pods(twin)
    # Each GPU node's dcgm-exporter /metrics, for a Prometheus scraping the twin.
    dcgm_exporter.install(twin)
