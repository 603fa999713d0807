"""The GPU Operator's OLM package on OpenShift: NVIDIA's ``gpu-operator-certified`` from ``certified-operators``.

NVIDIA publishes one channel per release line (``v24.9``, ``v25.3``...) plus ``stable``
(gpu-operator's OpenShift install docs, "Installing the NVIDIA GPU Operator by using the web
console/CLI").  The catalog is a fixed snapshot (``CATALOG``) whose channels end at the versions
the project's example matrix uses (``v24.9`` at 24.9.0, ``v25.3`` at 25.3.0); the twin's
Subscription starts on the channel of the installed CSV (``v24.9``) with Manual approval.  OLM
itself is ``olm``; the composition root attaches it (``attach``) on the openshift profile only
(the kubernetes profile installs the operator with Helm).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import olm
from .gpu_operator import OPERATOR_DEPLOYMENT, GpuOperator, bundle_env

if TYPE_CHECKING:
    from ..apiserver.cluster import Twin

PACKAGE = "gpu-operator-certified"
CATALOG_SOURCE = "certified-operators"
# Channel -> versions in upgrade order (the last one is the head OLM installs).
CATALOG: dict[str, tuple[str, ...]] = {
    "v24.6": ("24.6.0", "24.6.1", "24.6.2"),
    "v24.9": ("24.9.0",),
    "v25.3": ("25.3.0",),
    "v25.10": ("25.10.0", "25.10.1"),
    "v26.3": ("26.3.0",),
    "stable": ("24.9.0", "25.3.0", "25.10.1", "26.3.0"),
}

OLM_PACKAGE = olm.Package(
    name=PACKAGE,
    catalog=lambda: CATALOG,
    catalog_source=CATALOG_SOURCE,
    container="gpu-operator",
    image=lambda version: f"nvcr.io/nvidia/gpu-operator:v{version}",
    bundle=lambda version: f"registry.connect.redhat.com/nvidia/gpu-operator-bundle:v{version}",
    env=bundle_env,
    crds=("clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com"),
    display_name="NVIDIA GPU Operator",
    published_as="olm",
)


def attach(twin: Twin, operator: GpuOperator) -> olm.Olm | None:
    """OLM manages the GPU Operator on the openshift profile only (a Helm release elsewhere): its Subscription,
    InstallPlans and CSVs (``operators/olm.py``)."""
    if operator.profile != "openshift":
        return None
    return olm.attach(
        twin,
        OLM_PACKAGE,
        namespace=operator.namespace,
        deployment=OPERATOR_DEPLOYMENT,
        installed_version=operator.release.csv_version,
    )
