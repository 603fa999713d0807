"""Namespace objects as the twin seeds them (a Namespace the API server would have admitted, phase Active)."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def namespace_object(name: str, *, profile: str) -> Obj:
    """A Namespace object; on OpenShift the openshift-* and nvidia-* namespaces carry the cluster-monitoring label."""
    labels = {"kubernetes.io/metadata.name": name}
    if profile == "openshift" and name.startswith(("openshift-", "nvidia-")):
        labels["openshift.io/cluster-monitoring"] = "true"
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"finalizers": ["kubernetes"]},
        "status": {"phase": "Active"},
    }
