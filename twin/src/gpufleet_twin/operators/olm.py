"""The smallest faithful Operator Lifecycle Manager, for the OLM packages the composition root gives it.

What an operator upgrade on OpenShift goes through (operator-framework/api
``operators/v1alpha1`` types, OLM's catalog and OLM operators):

- a ``Subscription`` (``operators.coreos.com/v1alpha1``) names the package,
  the catalog and a ``channel`` (NVIDIA publishes one per GPU Operator release
  line, ``v24.9``, ``v25.3``..., plus ``stable``);
- when the channel's head is not the installed CSV, OLM creates an
  ``InstallPlan`` for it (``spec.clusterServiceVersionNames``) and the
  Subscription goes ``UpgradePending`` with ``status.installPlanRef``; with
  ``installPlanApproval: Manual`` the plan waits in ``RequiresApproval`` until
  somebody sets ``spec.approved: true``;
- an approved plan goes ``Installing``: the bundle's CRDs are applied first,
  then the new CSV is created (it ``replaces`` the old one, which goes
  ``Replacing`` and is deleted) and its Deployment rolls the operator image;
  the plan goes ``Complete``, the Subscription ``AtLatestKnown`` with the new
  ``installedCSV``; the CSV is ``Succeeded`` once its Deployment is available;
- OLM never downgrades: a channel whose head is older than the installed CSV
  fails resolution (condition ``ResolutionFailed``).  The supported way back
  (OLM's "uninstall your operator" task, OpenShift's "installing a specific
  version of an Operator") is to delete the Subscription, then the CSV, and
  subscribe again with ``startingCSV`` set to the older CSV: a Subscription
  with no ``installedCSV`` plans its ``startingCSV`` (it must be an entry of
  its channel, else resolution fails naming it) instead of the channel head;
  once installed, a newer head gets its own plan (which waits for approval
  under ``installPlanApproval: Manual``);
- the operator Deployment is owned by its CSV (``ownerReferences``, as OLM's
  install strategy writes it): a new CSV adopts it before the old CSV goes, and
  deleting the CSV lets the garbage collector delete the Deployment (and so
  the operator) while the CRDs and the CRs such as the ClusterPolicy stay; the
  next install creates the Deployment again from the CSV's install strategy;
- the catalog is served read-only as ``PackageManifest``
  (``packages.operators.coreos.com/v1``, in ``openshift-marketplace``, labels
  ``catalog`` and ``catalog-namespace``) with every channel's ``currentCSV``
  and ``entries`` (name, version), as the package server lists it; the fault
  ``olm_bundle_pruned`` {version, package?} takes a bundle out of the catalog
  (a catalog update that pruned it) until it ends.

This module knows no operator: each ``Package`` (its catalog, images, CRDs, and what installing
a new CSV does besides rolling the operator Deployment) lives with its operator
(``gpu_operator_olm``: the GPU Operator's certified package; ``sriov_olm``: OpenShift's SR-IOV
Network Operator), and the composition root (``harness/build.py``) attaches OLM to the operators
it installed on the openshift profile (``attach``).

Left out: CatalogSources as objects, OperatorGroups, dependency resolution, the package server's
refusal of writes to PackageManifests (the twin serves them as a CRD: do not write them),
skipRange/replaces graphs (a plan goes straight to the channel head), bundle
unpacking jobs, and the bundle's CRD contents (the CRDs the twin serves stay
as they are; the plan lists the step).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..kube import podutil
from ..machinery import errors
from ..machinery.kinds import Kinds
from ..machinery.registry import ResourceType
from ..machinery.store import WatchEvent
from ..machinery.wake import Waker

if TYPE_CHECKING:
    from ..apiserver.cluster import Twin

log = logging.getLogger(__name__)

Obj = dict[str, Any]

GROUP = "operators.coreos.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
# The package server's read-only view of the catalogs (``oc get packagemanifests -n openshift-marketplace``).
PACKAGES_GROUP = "packages.operators.coreos.com"
PACKAGES_VERSION = "v1"
CATALOG_NAMESPACE = "openshift-marketplace"
OLM_COMPONENT = "operator-lifecycle-manager"
# Simulated seconds between two reads of a catalog that changes with the cluster.
CATALOG_RESYNC_SECONDS = 60.0
# Simulated seconds an approved plan takes to unpack the bundle and apply its steps.
INSTALL_SECONDS = 30.0


def csv_name(version: str, package: str) -> str:
    return f"{package}.v{version}"


@dataclass(frozen=True)
class Package:
    """One OLM package the twin serves: its catalog and what installing a CSV does."""

    name: str
    catalog: Callable[[], dict[str, tuple[str, ...]]]
    catalog_source: str
    container: str  # the operator container in the Deployment
    image: Callable[[str], str]  # CSV version -> operator image
    bundle: Callable[[str], str]  # CSV version -> bundle image
    crds: tuple[str, ...]
    display_name: str
    # CSV version -> the variables the bundle sets on the operator container (image defaults such as
    # DRIVER_MANAGER_IMAGE); None: the Deployment's own are kept.
    env: Callable[[str], dict[str, str]] | None = None
    # Called after the Deployment rolled to a new version (the new operator re-renders its operands).
    after_install: Callable[[str], None] | None = None
    # The key of ``twin.published`` its facts go under; None: ``olm_packages[<name>]``.
    published_as: str | None = None


def version_of_csv(name: str) -> str:
    return name.rsplit(".v", 1)[-1] if ".v" in name else ""


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def _schemaless_crd(
    *,
    kind: str,
    plural: str,
    short_names: list[str],
    columns: list[Obj],
    group: str = GROUP,
    version: str = VERSION,
) -> Obj:
    """A CRD as OLM ships it for our purpose: spec and status kept whole (OLM's own CRDs are much larger)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}", "labels": {"gpufleet.io/twin-minimal-crd": "true"}},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": short_names,
                "categories": ["olm"],
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": columns,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


SUBSCRIPTION_CRD = _schemaless_crd(
    kind="Subscription",
    plural="subscriptions",
    short_names=["sub", "subs"],
    columns=[
        {"name": "Package", "type": "string", "jsonPath": ".spec.name"},
        {"name": "Source", "type": "string", "jsonPath": ".spec.source"},
        {"name": "Channel", "type": "string", "jsonPath": ".spec.channel"},
    ],
)
INSTALLPLAN_CRD = _schemaless_crd(
    kind="InstallPlan",
    plural="installplans",
    short_names=["ip"],
    columns=[
        {"name": "CSV", "type": "string", "jsonPath": ".spec.clusterServiceVersionNames[0]"},
        {"name": "Approval", "type": "string", "jsonPath": ".spec.approval"},
        {"name": "Approved", "type": "boolean", "jsonPath": ".spec.approved"},
    ],
)

# Served by the package server in real OLM (an aggregated API); here a CRD the OLM model writes.
PACKAGEMANIFEST_CRD = _schemaless_crd(
    kind="PackageManifest",
    plural="packagemanifests",
    short_names=[],
    columns=[
        {"name": "Catalog", "type": "string", "jsonPath": ".status.catalogSourceDisplayName"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ],
    group=PACKAGES_GROUP,
    version=PACKAGES_VERSION,
)
CATALOG_DISPLAY_NAMES = {
    "certified-operators": ("Certified Operators", "Red Hat"),
    "redhat-operators": ("Red Hat Operators", "Red Hat"),
}


@dataclass
class _Kinds:
    subscription: ResourceType
    installplan: ResourceType
    csv: ResourceType
    packagemanifest: ResourceType | None = None


class Olm:
    """OLM's catalog and OLM operators for one package, as one simulated controller."""

    name = "olm"

    def __init__(
        self,
        twin: Twin,
        *,
        namespace: str,
        deployment: str,
        installed_version: str,
        package: Package,
    ) -> None:
        self.package = package
        self.twin = twin
        self.store = twin.store
        self.kinds = Kinds.from_registry(twin.registry)
        self.namespace = namespace
        self.deployment = deployment
        self.installed_version = installed_version
        self._installing: dict[str, float] = {}  # InstallPlan name -> when its install finishes
        self._bundle_deployment: Obj | None = None
        self.olm: _Kinds | None = None

    def catalog(self) -> dict[str, tuple[str, ...]]:
        """The package's channels as the catalog serves them now: bundles a catalog update pruned are gone
        (fault ``olm_bundle_pruned``), and a channel left without bundles with them."""
        pruned = {version for package, version in getattr(self.twin.sim, "olm_pruned_bundles", ()) or ()
                  if package == self.package.name}  # fmt: skip
        channels = {
            channel: tuple(v for v in versions if v not in pruned)
            for channel, versions in self.package.catalog().items()
        }
        return {channel: versions for channel, versions in channels.items() if versions}

    # -- wiring -------------------------------------------------------------------------------------------
    def install(self) -> None:
        crd_type = self.twin.registry.get("apiextensions.k8s.io", "customresourcedefinitions")
        csv_type = self.twin.registry.get(GROUP, "clusterserviceversions")
        if crd_type is None or csv_type is None:
            log.warning("OLM not simulated: no CRD or ClusterServiceVersion kind registered")
            return
        register_olm_kinds(self.twin)
        subscription = self.twin.registry.get(GROUP, "subscriptions")
        installplan = self.twin.registry.get(GROUP, "installplans")
        assert subscription is not None and installplan is not None, "CRDs register their kinds when created"
        self.olm = _Kinds(
            subscription=subscription,
            installplan=installplan,
            csv=csv_type,
            packagemanifest=self.twin.registry.get(PACKAGES_GROUP, "packagemanifests"),
        )
        deployment = self.store.try_get(self.kinds.deployment, self.namespace, self.deployment)
        if deployment is not None:
            # The bundle's Deployment as its CSV's install strategy carries it (the operator image aside): what a
            # reinstall creates again after the CSV, and with it the Deployment, was deleted.
            self._bundle_deployment = json.loads(
                json.dumps(
                    {
                        "metadata": {"labels": deployment["metadata"].get("labels") or {}},
                        "spec": {k: v for k, v in deployment["spec"].items() if k != "strategy"},
                    }
                )
            )
        self.seed()
        self.reconcile_packagemanifest()
        self.twin.controllers.append(self)
        facts = {
            "subscription": self.package.name,
            "namespace": self.namespace,
            "channels": {channel: list(versions) for channel, versions in self.package.catalog().items()},
        }
        if self.package.published_as is not None:
            self.twin.published[self.package.published_as] = facts
        else:
            self.twin.published.setdefault("olm_packages", {})[self.package.name] = facts

    def seed(self) -> None:
        assert self.olm is not None
        package = self.package.name
        if self.store.try_get(self.olm.subscription, self.namespace, package) is not None:
            return
        installed = csv_name(self.installed_version, package)
        channel = next(
            (
                c
                for c, versions in self.package.catalog().items()
                if c != "stable" and self.installed_version in versions
            ),
            "stable",
        )
        created = self.store.create(
            self.olm.subscription,
            {
                "apiVersion": API_VERSION,
                "kind": "Subscription",
                "metadata": {
                    "name": package,
                    "namespace": self.namespace,
                    "labels": {f"operators.coreos.com/{package}.{self.namespace}": ""},
                },
                "spec": {
                    "channel": channel,
                    "installPlanApproval": "Manual",
                    "name": package,
                    "source": self.package.catalog_source,
                    "sourceNamespace": CATALOG_NAMESPACE,
                    "startingCSV": installed,
                },
            },
        )
        self._write_status(
            self.olm.subscription,
            created,
            {"currentCSV": installed, "installedCSV": installed, "state": "AtLatestKnown", **self._stamp()},
        )
        self.adopt_deployment(installed)

    def ensure_installed_csv(self) -> None:
        """The installed version's CSV, Succeeded, as the operator's install left it, when no seed brought it (the
        operator simulation seeds none); the operator Deployment is then owned by it."""
        if self.olm is None:
            return  # not simulated (install found no CSV kind)
        package = self.package.name
        name = csv_name(self.installed_version, package)
        if self.store.try_get(self.olm.csv, self.namespace, name) is None:
            created = self.store.create(
                self.olm.csv,
                {
                    "apiVersion": API_VERSION,
                    "kind": "ClusterServiceVersion",
                    "metadata": {
                        "name": name,
                        "namespace": self.namespace,
                        "labels": {f"operators.coreos.com/{package}.{self.namespace}": ""},
                    },
                    "spec": {"displayName": self.package.display_name, "version": self.installed_version},
                },
            )
            message = "install strategy completed with no errors"
            self._write_status(
                self.olm.csv, created, {"phase": "Succeeded", "reason": "InstallSucceeded", "message": message}
            )
        self.adopt_deployment(name)

    def adopt_deployment(self, csv: str) -> None:
        """The operator Deployment is owned by its CSV, as OLM's install strategy writes it (not a controller
        reference: the CSV does not manage it as a ReplicaSet would); deleting the CSV deletes the operator."""
        assert self.olm is not None
        owner = self.store.try_get(self.olm.csv, self.namespace, csv)
        if owner is None or self.store.try_get(self.kinds.deployment, self.namespace, self.deployment) is None:
            return
        reference = {**podutil.owner_reference(owner, block_owner_deletion=False), "controller": False}

        def own(deployment: Obj) -> None:
            deployment["metadata"]["ownerReferences"] = [reference]
            deployment["metadata"].setdefault("labels", {})["olm.owner"] = csv

        current = self.store.get(self.kinds.deployment, self.namespace, self.deployment)
        if (current["metadata"].get("ownerReferences") or []) != [reference]:
            self.store.mutate(self.kinds.deployment, self.namespace, self.deployment, own)

    # -- the controller -----------------------------------------------------------------------------------
    async def run(self, twin: Twin) -> None:
        assert self.olm is not None
        keys = (self.olm.subscription.key, self.olm.installplan.key, self.olm.csv.key, self.kinds.deployment.key)
        waker = Waker(self.store, twin.clock, resources=keys, on_event=self._relevant)
        while True:
            try:
                self.reconcile_once()
            except errors.ApiError as exc:  # a write lost a race: the next pass retries it
                log.debug("olm reconcile: %s", exc)
            now = twin.clock.now()
            wait = min((at - now for at in self._installing.values()), default=None)
            # A catalog that changes (Red Hat's per-minor index, a pruned bundle) is re-read on OLM's resync.
            wait = min(wait, CATALOG_RESYNC_SECONDS) if wait is not None else CATALOG_RESYNC_SECONDS
            await waker.wait(None if wait is None else max(wait, 0.0))
            await asyncio.sleep(0)

    def _relevant(self, event: WatchEvent) -> bool:
        meta = event.obj.get("metadata") or {}
        return meta.get("namespace") == self.namespace

    def reconcile_once(self) -> None:
        assert self.olm is not None
        self.reconcile_packagemanifest()
        for subscription in self.store.list(self.olm.subscription, self.namespace):
            if (subscription.get("spec") or {}).get("name") == self.package.name:
                self.reconcile_subscription(subscription)
        for plan in self.store.list(self.olm.installplan, self.namespace):
            self.reconcile_installplan(plan)
        self.reconcile_csvs()

    def reconcile_packagemanifest(self) -> None:
        """The package as the package server lists it: every channel with its head and its entries (newest
        first), from the catalog as it is now."""
        assert self.olm is not None
        rtype = self.olm.packagemanifest
        if rtype is None:
            return
        source = self.package.catalog_source
        display, publisher = CATALOG_DISPLAY_NAMES.get(source, (source, ""))
        channels = self.catalog()
        status = {
            "catalogSource": source,
            "catalogSourceDisplayName": display,
            "catalogSourcePublisher": publisher,
            "catalogSourceNamespace": CATALOG_NAMESPACE,
            "packageName": self.package.name,
            "defaultChannel": "stable" if "stable" in channels else next(iter(channels), ""),
            "channels": [
                {
                    "name": channel,
                    "currentCSV": csv_name(versions[-1], self.package.name),
                    "currentCSVDesc": {"displayName": self.package.display_name, "version": versions[-1]},
                    "entries": [
                        {"name": csv_name(version, self.package.name), "version": version}
                        for version in reversed(versions)
                    ],
                }
                for channel, versions in channels.items()
            ],
        }
        current = self.store.try_get(rtype, CATALOG_NAMESPACE, self.package.name)
        if current is None:
            namespace_type = self.kinds.namespace
            if self.store.try_get(namespace_type, None, CATALOG_NAMESPACE) is None:
                self.store.create(namespace_type, {"metadata": {"name": CATALOG_NAMESPACE}})
            current = self.store.create(
                rtype,
                {
                    "apiVersion": f"{PACKAGES_GROUP}/{PACKAGES_VERSION}",
                    "kind": "PackageManifest",
                    "metadata": {
                        "name": self.package.name,
                        "namespace": CATALOG_NAMESPACE,
                        "labels": {
                            "catalog": source,
                            "catalog-namespace": CATALOG_NAMESPACE,
                            "operatorframework.io/arch.amd64": "supported",
                            "operatorframework.io/os.linux": "supported",
                        },
                    },
                    "spec": {},
                },
            )
        if (current.get("status") or {}) != status:

            def change(o: Obj) -> None:
                o["status"] = status

            self.store.mutate(rtype, CATALOG_NAMESPACE, self.package.name, change, subresource="status")

    def reconcile_subscription(self, subscription: Obj) -> None:
        assert self.olm is not None
        spec = subscription.get("spec") or {}
        status = dict(subscription.get("status") or {})
        installed = str(status.get("installedCSV") or "")
        channel = str(spec.get("channel") or "stable")
        package = self.package.name
        versions = self.catalog().get(channel)
        if not versions:
            self._resolution_failed(
                subscription,
                f"no operators found in channel {channel} of package {package} in the catalog "
                f"referenced by subscription {subscription['metadata']['name']}",
            )
            return
        head = csv_name(versions[-1], package)
        starting = str(spec.get("startingCSV") or "")
        if not installed and starting and starting != head:
            # A new Subscription installs its startingCSV first (the way to install an older version).
            if version_of_csv(starting) not in versions:
                self._resolution_failed(
                    subscription,
                    f"constraints not satisfiable: no operators found with name {starting} in channel {channel} "
                    f"of package {package} in the catalog referenced by subscription "
                    f"{subscription['metadata']['name']}, subscription {subscription['metadata']['name']} exists",
                )
                return
            head = starting
        if head == installed:
            self._write_status(
                self.olm.subscription,
                subscription,
                {**_without(status, "conditions"), "currentCSV": head, "state": "AtLatestKnown", **self._stamp()},
            )
            return
        if installed and version_key(versions[-1]) < version_key(version_of_csv(installed)):
            self._resolution_failed(
                subscription,
                f"constraints not satisfiable: {head} of channel {channel} is older than the installed {installed}; "
                "OLM does not downgrade operators",
            )
            return
        plan = self._plan_for(head, subscription)
        if plan is None:
            approval = str(spec.get("installPlanApproval") or "Automatic")
            uid = subscription["metadata"].get("uid", "")
            plan = self.store.create(
                self.olm.installplan,
                {
                    "apiVersion": API_VERSION,
                    "kind": "InstallPlan",
                    "metadata": {
                        # OLM's names are random (generateName "install-"); this one is stable per Subscription.
                        "name": "install-" + hashlib.sha256(f"{self.namespace}/{head}/{uid}".encode()).hexdigest()[:5],
                        "namespace": self.namespace,
                        "ownerReferences": [podutil.owner_reference(subscription, block_owner_deletion=False)],
                        "labels": {f"operators.coreos.com/{package}.{self.namespace}": ""},
                    },
                    "spec": {
                        "approval": approval,
                        "approved": approval == "Automatic",
                        "clusterServiceVersionNames": [head],
                        "generation": int(status.get("installPlanGeneration") or 0) + 1,
                    },
                },
            )
            self._write_status(
                self.olm.installplan,
                plan,
                {
                    "phase": "RequiresApproval" if approval == "Manual" else "Installing",
                    "catalogSources": [self.package.catalog_source],
                    "bundleLookups": [
                        {
                            "path": self.package.bundle(version_of_csv(head)),
                            "identifier": head,
                            "catalogSourceRef": {"name": self.package.catalog_source, "namespace": CATALOG_NAMESPACE},
                        }
                    ],
                    "plan": [
                        *(
                            {
                                "resolving": head,
                                "resource": {"kind": "CustomResourceDefinition", "name": crd},
                                "status": "Unknown",
                            }
                            for crd in self.package.crds
                        ),
                        {
                            "resolving": head,
                            "resource": {"kind": "ClusterServiceVersion", "name": head},
                            "status": "Unknown",
                        },
                    ],
                },
            )
        plan_meta = plan["metadata"]
        reference = {
            "apiVersion": API_VERSION,
            "kind": "InstallPlan",
            "name": plan_meta["name"],
            "namespace": self.namespace,
            "uid": plan_meta.get("uid", ""),
        }
        self._write_status(
            self.olm.subscription,
            subscription,
            {
                **_without(status, "conditions"),
                "currentCSV": head,
                "state": "UpgradePending",
                "installPlanRef": reference,
                "installplan": {k: reference[k] for k in ("apiVersion", "kind", "name")} | {"uuid": reference["uid"]},
                "installPlanGeneration": int((plan.get("spec") or {}).get("generation") or 1),
                **self._stamp(),
            },
        )

    def reconcile_installplan(self, plan: Obj) -> None:
        assert self.olm is not None
        spec, status = plan.get("spec") or {}, dict(plan.get("status") or {})
        name = plan["metadata"]["name"]
        phase = status.get("phase")
        now = self.twin.clock.now()
        if phase == "RequiresApproval" and spec.get("approved"):
            phase = "Installing"
            self._write_status(self.olm.installplan, plan, {**status, "phase": phase})
        if phase != "Installing":
            return
        if not self._referenced(name):
            return  # superseded by a later resolution: OLM leaves it alone
        done_at = self._installing.setdefault(name, now + INSTALL_SECONDS)
        if now < done_at:
            return
        self._installing.pop(name, None)
        target = str((spec.get("clusterServiceVersionNames") or [""])[0])
        self._install_csv(target)
        steps = [{**step, "status": "Created"} for step in status.get("plan") or []]
        self._write_status(self.olm.installplan, plan, {**status, "phase": "Complete", "plan": steps})
        for subscription in self.store.list(self.olm.subscription, self.namespace):
            if ((subscription.get("status") or {}).get("installPlanRef") or {}).get("name") == name:
                self._write_status(
                    self.olm.subscription,
                    subscription,
                    {
                        **(subscription.get("status") or {}),
                        "installedCSV": target,
                        "currentCSV": target,
                        "state": "AtLatestKnown",
                        **self._stamp(),
                    },
                )

    def _install_csv(self, target: str) -> None:
        """The plan's steps: the new CSV replaces the old one and rolls the operator Deployment's image (or, after
        an uninstall deleted it with its CSV, creates it again from the install strategy)."""
        assert self.olm is not None
        version = version_of_csv(target)
        package = self.package.name
        old = [
            c for c in self.store.list(self.olm.csv, self.namespace) if c["metadata"]["name"].startswith(f"{package}.")
        ]
        old = [c for c in old if c["metadata"]["name"] != target]
        replaces = old[0]["metadata"]["name"] if old else ""
        if self.store.try_get(self.olm.csv, self.namespace, target) is None:
            template = old[0] if old else {"spec": {"displayName": self.package.display_name}}
            spec = {k: v for k, v in (template.get("spec") or {}).items() if k not in ("install", "replaces")}
            created = self.store.create(
                self.olm.csv,
                {
                    "apiVersion": API_VERSION,
                    "kind": "ClusterServiceVersion",
                    "metadata": {
                        "name": target,
                        "namespace": self.namespace,
                        "labels": {f"operators.coreos.com/{package}.{self.namespace}": ""},
                    },
                    "spec": {**spec, "version": version, **({"replaces": replaces} if replaces else {})},
                },
            )
            self._write_status(
                self.olm.csv,
                created,
                {
                    "phase": "Installing",
                    "reason": "InstallWaiting",
                    "message": f"installing: waiting for deployment {self.deployment} to become ready",
                },
            )

        current = self.store.try_get(self.kinds.deployment, self.namespace, self.deployment)
        source = current if current is not None else self._bundle_deployment
        if source is None:
            log.warning("operator Deployment %s/%s not found and no bundle template", self.namespace, self.deployment)
            return
        # OLM writes the Deployment from the CSV's install strategy (spec.install.spec.deployments): the
        # bundle's spec with the new operator image; the bundle sets no update strategy (RollingUpdate).
        bundle_spec = {k: v for k, v in source["spec"].items() if k != "strategy"}
        bundle_spec = json.loads(json.dumps(bundle_spec))
        for container in bundle_spec["template"]["spec"]["containers"]:
            if container.get("name") == self.package.container:
                container["image"] = self.package.image(version)
                if self.package.env is not None:
                    bundle_env = self.package.env(version)
                    kept = [e for e in container.get("env") or [] if e.get("name") not in bundle_env]
                    container["env"] = kept + [{"name": name, "value": value} for name, value in bundle_env.items()]

        def install_strategy(csv: Obj) -> None:
            csv["spec"]["install"] = {
                "strategy": "deployment",
                "spec": {"deployments": [{"name": self.deployment, "spec": bundle_spec}]},
            }

        def roll(deployment: Obj) -> None:
            deployment["spec"] = json.loads(json.dumps(bundle_spec))
            deployment["metadata"].setdefault("labels", {})["olm.owner"] = target

        try:
            self.store.mutate(self.olm.csv, self.namespace, target, install_strategy)
            if current is None:
                labels = dict((source.get("metadata") or {}).get("labels") or {})
                self.store.create(
                    self.kinds.deployment,
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": self.deployment, "namespace": self.namespace, "labels": labels},
                        "spec": json.loads(json.dumps(bundle_spec)),
                    },
                )
            self.store.mutate(self.kinds.deployment, self.namespace, self.deployment, roll)
            # The new CSV owns the Deployment before the old one goes, or the collector would take it along.
            self.adopt_deployment(target)
        except errors.ApiError as exc:
            log.warning("operator Deployment not updated: %s", exc)
            return
        for csv in old:
            self._write_status(
                self.olm.csv,
                csv,
                {"phase": "Replacing", "reason": "BeingReplaced", "message": f"being replaced by csv: {target}"},
            )
            try:
                self.store.delete(self.olm.csv, self.namespace, csv["metadata"]["name"])
            except errors.ApiError as exc:
                log.debug("old CSV not deleted: %s", exc)
        if self.package.after_install is not None:
            self.package.after_install(version)

    def reconcile_csvs(self) -> None:
        """A CSV is Succeeded once its Deployment has rolled out (the OLM operator's install strategy check)."""
        assert self.olm is not None
        deployment = self.store.try_get(self.kinds.deployment, self.namespace, self.deployment)
        if deployment is None:
            return
        spec, status = deployment.get("spec") or {}, deployment.get("status") or {}
        replicas = int(spec.get("replicas", 1))
        rolled = (
            int(status.get("observedGeneration") or 0) >= int(deployment["metadata"].get("generation") or 0)
            and int(status.get("updatedReplicas") or 0) == replicas
            and int(status.get("replicas") or 0) == replicas  # the old pods are gone (rollout complete)
            and int(status.get("availableReplicas") or 0) >= replicas
        )
        for csv in self.store.list(self.olm.csv, self.namespace):
            phase = (csv.get("status") or {}).get("phase")
            if phase == "Installing" and rolled:
                self._write_status(
                    self.olm.csv,
                    csv,
                    {
                        "phase": "Succeeded",
                        "reason": "InstallSucceeded",
                        "message": "install strategy completed with no errors",
                    },
                )

    # -- helpers --------------------------------------------------------------------------------------------
    def _plan_for(self, csv: str, subscription: Obj) -> Obj | None:
        """The Subscription's own plan for the CSV (plans of a deleted Subscription wait for the collector)."""
        assert self.olm is not None
        uid = subscription["metadata"].get("uid")
        for plan in self.store.list(self.olm.installplan, self.namespace):
            names = (plan.get("spec") or {}).get("clusterServiceVersionNames") or []
            owners = {ref.get("uid") for ref in plan["metadata"].get("ownerReferences") or []}
            if csv in names and uid in owners and (plan.get("status") or {}).get("phase") != "Failed":
                return plan
        return None

    def _referenced(self, plan_name: str) -> bool:
        assert self.olm is not None
        return any(
            ((sub.get("status") or {}).get("installPlanRef") or {}).get("name") == plan_name
            for sub in self.store.list(self.olm.subscription, self.namespace)
        )

    def _resolution_failed(self, subscription: Obj, message: str) -> None:
        assert self.olm is not None
        status = dict(subscription.get("status") or {})
        condition = {
            "type": "ResolutionFailed",
            "status": "True",
            "reason": "ConstraintsNotSatisfiable",
            "message": message,
            "lastTransitionTime": self.twin.clock.iso(),
        }
        previous = next((c for c in status.get("conditions") or [] if c.get("type") == "ResolutionFailed"), None)
        if previous is not None and previous.get("message") == message:
            condition["lastTransitionTime"] = previous.get("lastTransitionTime", condition["lastTransitionTime"])
        self._write_status(self.olm.subscription, subscription, {**status, "conditions": [condition]})

    def _stamp(self) -> Obj:
        return {"lastUpdated": self.twin.clock.iso()}

    def _write_status(self, rtype: ResourceType, obj: Obj, status: Obj) -> None:
        current = self.store.try_get(rtype, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if current is None:
            return
        old = dict(current.get("status") or {})
        if _without(old, "lastUpdated") == _without(status, "lastUpdated"):
            return

        def change(o: Obj) -> None:
            o["status"] = status

        self.store.mutate(rtype, self.namespace, obj["metadata"]["name"], change, subresource="status")


def _without(mapping: Obj, key: str) -> Obj:
    return {k: v for k, v in mapping.items() if k != key}


def register_olm_kinds(twin: Twin) -> bool:
    """Serve Subscription, InstallPlan and PackageManifest (their CRDs), as OLM installs them; False without CRDs.

    The snapshot loader calls it first, so a cluster's own Subscriptions load before the OLM model starts.
    """
    crd_type = twin.registry.get("apiextensions.k8s.io", "customresourcedefinitions")
    if crd_type is None or twin.registry.get(GROUP, "clusterserviceversions") is None:
        return False
    for crd in (SUBSCRIPTION_CRD, INSTALLPLAN_CRD, PACKAGEMANIFEST_CRD):
        if twin.registry.get(crd["spec"]["group"], crd["spec"]["names"]["plural"]) is None:
            twin.store.create(crd_type, crd)
    return True


def attach(twin: Twin, package: Package, *, namespace: str, deployment: str, installed_version: str) -> Olm:
    """Seed the package's Subscription for the operator Deployment ``namespace/deployment`` running
    ``installed_version`` and start OLM for it (the composition root calls it per OLM-managed operator)."""
    operator = Olm(
        twin, namespace=namespace, deployment=deployment, installed_version=installed_version, package=package
    )
    operator.install()
    return operator
