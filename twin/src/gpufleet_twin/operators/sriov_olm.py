"""OpenShift's SR-IOV Network Operator as an OLM package: ``sriov-network-operator`` from ``redhat-operators``.

Red Hat's operator index is built per OpenShift minor, so the ``stable`` channel's head follows the
cluster: on 4.16 it is a 4.16.0 build, once the cluster runs 4.17 the 4.17.0 build (OpenShift docs,
"Installing the SR-IOV Network Operator"; this is why the SR-IOV operator is upgraded after
OpenShift).  The channel lists the builds up to the cluster's minor, read from the ClusterVersion's
newest Completed history entry.  Installing a new CSV rolls the operator Deployment (``olm``) and,
as the new operator does once it runs, its config daemon DaemonSet to the new images (``sriov``
renders the DaemonSet from the operator's ``SRIOV_NETWORK_CONFIG_DAEMON_IMAGE``).  The composition
root attaches it (``attach``) on the openshift profile, after the SR-IOV and OpenShift simulations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import olm
from .sriov import CONFIG_DAEMON_IMAGE_ENV, OPENSHIFT_NAMESPACE, OPERATOR_DEPLOYMENT

if TYPE_CHECKING:
    from ..apiserver.cluster import Twin

Obj = dict[str, Any]

PACKAGE = "sriov-network-operator"
CATALOG_SOURCE = "redhat-operators"
IMAGE_BASE = "registry.redhat.io/openshift4/ose-sriov-network"
# One SR-IOV operator build per OpenShift minor (the CSV version is <minor>.0-<build date>).
BUILDS: dict[str, str] = {
    "4.16": "4.16.0-202410211619",
    "4.17": "4.17.0-202411190033",
    "4.18": "4.18.0-202502250302",
}


def minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def package(twin: Twin) -> olm.Package:
    """The package, its ``stable`` channel read from the cluster's OpenShift minor at each catalog read."""
    cv_type = twin.registry.get("config.openshift.io", "clusterversions")

    def cluster_minor() -> str:
        cv = twin.store.try_get(cv_type, None, "version") if cv_type is not None else None
        history = ((cv or {}).get("status") or {}).get("history") or []
        completed = next((h.get("version") for h in history if h.get("state") == "Completed"), None)
        return minor(str(completed or "4.16"))

    def catalog() -> dict[str, tuple[str, ...]]:
        limit = olm.version_key(cluster_minor())
        builds = tuple(b for m, b in sorted(BUILDS.items(), key=lambda i: olm.version_key(i[0]))
                       if olm.version_key(m) <= limit)  # fmt: skip
        return {"stable": builds or (BUILDS["4.16"],)}

    def roll_config_daemon(version: str) -> None:
        # The CSV's install strategy carries the operator's environment, the config daemon image included;
        # the operator (operators/sriov.py) renders its DaemonSet from it.
        deployments = twin.registry.get("apps", "deployments")
        image = f"{IMAGE_BASE}-config-daemon-rhel9:v{minor(version)}"

        def set_daemon_image(deployment: Obj) -> None:
            for container in deployment["spec"]["template"]["spec"]["containers"]:
                for variable in container.get("env") or ():
                    if variable.get("name") == CONFIG_DAEMON_IMAGE_ENV:
                        variable["value"] = image

        if deployments is not None and twin.store.try_get(deployments, OPENSHIFT_NAMESPACE, OPERATOR_DEPLOYMENT):
            twin.store.mutate(deployments, OPENSHIFT_NAMESPACE, OPERATOR_DEPLOYMENT, set_daemon_image)

    return olm.Package(
        name=PACKAGE,
        catalog=catalog,
        catalog_source=CATALOG_SOURCE,
        container="sriov-network-operator",
        image=lambda version: f"{IMAGE_BASE}-rhel9-operator:v{minor(version)}",
        bundle=lambda version: f"registry.redhat.io/openshift4/ose-sriov-network-operator-bundle:v{version}",
        crds=("sriovnetworknodepolicies.sriovnetwork.openshift.io", "sriovnetworknodestates.sriovnetwork.openshift.io"),
        display_name="SR-IOV Network Operator",
        after_install=roll_config_daemon,
    )


def attach(twin: Twin) -> olm.Olm | None:
    """OLM for the SR-IOV operator, when the SR-IOV simulation installed it in its OpenShift namespace: the
    Subscription at the channel's head and its CSV (Succeeded, owning the operator Deployment)."""
    deployment_type = twin.registry.get("apps", "deployments")
    if deployment_type is None or twin.store.try_get(deployment_type, OPENSHIFT_NAMESPACE, OPERATOR_DEPLOYMENT) is None:
        return None
    sriov_package = package(twin)
    installed = sriov_package.catalog()["stable"][-1]
    operator = olm.attach(
        twin, sriov_package, namespace=OPENSHIFT_NAMESPACE, deployment=OPERATOR_DEPLOYMENT, installed_version=installed
    )
    operator.ensure_installed_csv()
    return operator
