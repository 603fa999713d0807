"""playbooks/diagnose.yml on a GPU driver upgrade whose new image no registry serves (a tag not built for the
nodes' OS, a registry that is down, a missing pull secret).

The twin's kubelet cannot pull the new driver image (fault ``image_pull_fails``): the new driver pod waits in
ErrImagePull / ImagePullBackOff and never runs, so it never restarts, and the upgrade controller (k8s-operator-libs
counts restarts to call a driver pod failing) waits for it in pod-restart-required for as long as it takes: the
standstill users report. The doctor names the pod, the image and the kubelet's reason; once the image is there the
kubelet's next pull succeeds and the upgrade finishes by itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess

from .conftest import kubectl
from .test_clusterpolicy_upgrade import NEW, driver_versions, get_json, settled_policy, states, wait_for, write_requests
from .test_clusterpolicy_upgrade import twin_factory as start_twin_fixture
from .test_doctor import diagnose

pytestmark = pytest.mark.slow
twin_factory = start_twin_fixture

DRIVER_SELECTOR = "app.kubernetes.io/component=nvidia-driver"


def pulling_driver_pods(twin: TwinProcess) -> dict[str, dict[str, Any]]:
    """Driver pods waiting for an image the kubelet cannot pull, by node."""
    pods = get_json(twin, "pods", "-A", "-l", DRIVER_SELECTOR)["items"]
    return {
        pod["spec"]["nodeName"]: pod
        for pod in pods
        if any(
            (c.get("state") or {}).get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff")
            for c in pod.get("status", {}).get("containerStatuses") or []
        )
    }


def twin_seconds(twin: TwinProcess) -> float:
    return float(twin.admin("GET", "clock")["epoch_seconds"])


def test_a_driver_image_no_registry_serves_is_diagnosed_and_the_upgrade_waits_for_it(twin_factory, tmp_path):
    twin = twin_factory(nodes=3, scenario={"nodes": 3, "profile": "openshift", "workloads": False})
    settled_policy(twin, timeout=120)
    old_image = get_json(twin, "pods", "-A", "-l", DRIVER_SELECTOR)["items"][0]["spec"]["containers"][0]["image"]
    # The new version's tags (<version>-<OS>) are not in the registry.
    missing = f"{old_image.rsplit(':', 1)[0]}:{NEW}"
    twin.admin("POST", "faults", {"type": "image_pull_fails", "image": missing})
    patch = {"spec": {"driver": {"version": NEW, "upgradePolicy": {"maxParallelUpgrades": 1}}}}
    kubectl(twin, "patch", "clusterpolicy", "gpu-cluster-policy", "--type", "merge", "-p", json.dumps(patch))
    wait_for(lambda: len(pulling_driver_pods(twin)) == 1, what="a new driver pod waiting for its image", timeout=180)
    node, pod = next(iter(pulling_driver_pods(twin).items()))

    # An hour on the twin's clock later the node still waits: a pull is no restart, so nothing marks it failed.
    start = twin_seconds(twin)
    wait_for(lambda: twin_seconds(twin) - start >= 3600, what="an hour of the twin's clock", timeout=120)
    assert states(twin)[node] == "pod-restart-required", states(twin)
    pod = pulling_driver_pods(twin)[node]
    assert all(c["restartCount"] == 0 for c in pod["status"]["containerStatuses"]), pod["status"]
    assert pod["status"]["phase"] == "Pending"

    twin.admin("POST", "report/reset")
    run, result = diagnose(twin, tmp_path)
    assert run.returncode != 0, run.output[-3000:]
    assert write_requests(twin) == {}, "the diagnosis writes nothing"
    finding = next(f for f in result["findings"] if f["node"] == node and f["component"] == "gpu-driver")
    assert (finding["state"], finding["cause"]) == ("pod-restart-required", "driver_image_pull"), finding
    evidence = finding["evidence"]
    assert evidence["image"].startswith(missing + "-"), evidence
    assert evidence["reason"] == "ImagePullBackOff", evidence
    assert evidence["driver_pod"] == f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    assert f'Back-off pulling image "{evidence["image"]}"' in finding["detail"], finding["detail"]
    assert finding["remediation"] is None, "the doctor never changes images"

    # The image is pushed: the kubelet's next pull takes it, and the upgrade goes on by itself.
    twin.admin("DELETE", "faults")
    wait_for(
        lambda: set(states(twin).values()) == {"upgrade-done"} and set(driver_versions(twin).values()) == {NEW},
        what="every node on the new driver",
        timeout=300,
    )
    run, result = diagnose(twin, tmp_path)
    assert run.returncode == 0, run.output[-3000:]
    assert result["findings"] == [], result["findings"]
