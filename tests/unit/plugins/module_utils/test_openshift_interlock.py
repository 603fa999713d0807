"""Kernel interlock logic: matrix rules, driver toolkit tags, build pods and their outcome."""

from __future__ import annotations

from ansible_collections.gpufleet.upgrade.plugins.module_utils._matrix_catalog import load_catalog
from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_interlock import (
    ERROR,
    build_outcome,
    build_pod,
    build_pods,
    build_pods_diff,
    driver_image,
    driver_toolkit,
    halted,
    matrix_findings,
    plan_builds,
    rhcos_minor,
)

PREVIOUS = {"openshift": "4.16.20", "kernel": "5.14.0-427.40.1.el9_4.x86_64", "gpu_operator": "v24.9.0",
            "gpu_driver": "550.127.05"}  # fmt: skip


def tag(name, image):
    return {"name": name, "from": {"kind": "DockerImage", "name": image}}


def test_matrix_allows_the_rhel94_kernel_of_417_and_refuses_a_rhel96_one():
    ok = {**PREVIOUS, "openshift": "4.17.3", "kernel": "5.14.0-427.42.1.el9_4.x86_64"}
    findings = matrix_findings(ok, previous=PREVIOUS, catalog=load_catalog())
    assert not halted(findings), [f.as_dict() for f in findings]
    wrong = {**ok, "kernel": "5.14.0-570.35.1.el9_6.x86_64"}
    findings = matrix_findings(wrong, previous=PREVIOUS, catalog=load_catalog())
    assert any(f.check == "matrix_openshift_kernel" and f.severity == ERROR for f in findings)


def test_driver_toolkit_follows_latest_after_an_update():
    # Shape of openshift/driver-toolkit's imagestream after an update: old tag kept, latest = new RHCOS.
    stream = {"spec": {"tags": [tag("416.94.1-0", "img-a"), tag("417.94.2-0", "img-b"), tag("latest", "img-b")]}}
    toolkit = driver_toolkit(stream)
    assert (toolkit.rhcos, toolkit.image, toolkit.tags) == ("417.94.2-0", "img-b", ["416.94.1-0", "417.94.2-0"])
    assert driver_toolkit(stream, rhcos="418.94.3-0") is None
    assert driver_toolkit(None) is None
    assert rhcos_minor("417.94.202410250757-0") == "4.17"


def test_build_pod_builds_without_loading_and_outcomes_read_from_status():
    pod = build_pod(name="b", namespace="ns", dtk_image="dtk", builder_image="drv", driver_version="550.127.05",
                    what="gpu-driver", rhcos="417.94.2-0")  # fmt: skip
    assert pod["spec"]["restartPolicy"] == "Never"
    assert [c["image"] for c in pod["spec"]["containers"]] == ["drv", "dtk"]
    failed = {"status": {"phase": "Failed", "containerStatuses": [
        {"name": "driver-build", "state": {"terminated": {"message": "does not build for kernel K"}}}]}}  # fmt: skip
    outcome = build_outcome(failed)
    assert outcome.done and not outcome.succeeded and "kernel K" in outcome.message
    assert not build_outcome({"status": {"phase": "Running"}}).done
    assert build_outcome({"status": {"phase": "Succeeded"}}).succeeded
    assert driver_image({"repository": "nvcr.io/nvidia", "image": "driver"}, version="550.127.05",
                        rhcos="417.94.2-0") == "nvcr.io/nvidia/driver:550.127.05-rhcos4.17"  # fmt: skip


SPECS = [
    {"what": "gpu-driver", "version": "550.127.05", "image": "nvcr.io/nvidia/driver:550.127.05-rhcos4.17"},
    {"what": "mofed-driver", "version": "24.10-0.7.0.0",
     "image": "nvcr.io/nvidia/mellanox/doca-driver:24.10-0.7.0.0-rhcos4.17-amd64"},
]  # fmt: skip


def test_build_pods_are_named_after_what_they_build_on_which_toolkit():
    pods = build_pods(SPECS, namespace="nvidia-gpu-operator", dtk_image="dtk-a", rhcos="417.94.2-0")
    names = [pod["metadata"]["name"] for pod in pods]
    assert [name.rsplit("-", 1)[0] for name in names] == ["gpufleet-build-gpu-driver", "gpufleet-build-mofed-driver"]
    assert names == [p["metadata"]["name"] for p in build_pods(SPECS, namespace="x", dtk_image="dtk-a", rhcos="r")]
    again = build_pods(SPECS, namespace="nvidia-gpu-operator", dtk_image="dtk-b", rhcos="418.94.3-0")
    assert not set(names) & {pod["metadata"]["name"] for pod in again}  # another toolkit, other pods
    assert {pod["metadata"]["namespace"] for pod in pods} == {"nvidia-gpu-operator"}
    assert [pod["spec"]["containers"][0]["image"] for pod in pods] == [spec["image"] for spec in SPECS]


def test_plan_builds_creates_missing_pods_and_takes_over_an_earlier_runs():
    pods = build_pods(SPECS, namespace="ns", dtk_image="dtk", rhcos="417.94.2-0")
    gpu, mofed = (pod["metadata"]["name"] for pod in pods)
    fresh = plan_builds(pods, {})
    assert fresh.create == pods and fresh.leftovers == [] and fresh.changes
    failed = {**pods[0], "status": {"phase": "Failed"}}
    running = {**pods[1], "status": {"phase": "Running"}}
    resumed = plan_builds(pods, {gpu: failed, mofed: running})
    # The failed build is deleted and built again; the running one is waited for, then deleted.
    assert [p["metadata"]["name"] for p in resumed.create] == [gpu]
    assert [p["metadata"]["name"] for p in resumed.leftovers] == [gpu, mofed] and resumed.changes
    assert not plan_builds([], {}).changes


def test_build_pods_diff_shows_the_pods_created_and_the_leftovers_deleted():
    pods = build_pods(SPECS, namespace="ns", dtk_image="dtk", rhcos="417.94.2-0")
    gpu, mofed = (pod["metadata"]["name"] for pod in pods)
    diff = build_pods_diff(plan_builds(pods, {}))
    assert diff["before"] == {"pods": {}} and list(diff["after"]["pods"]) == [gpu, mofed]
    assert diff["after"]["pods"][gpu]["spec"] == pods[0]["spec"] and diff["after_header"]
    earlier = {
        **pods[1],
        "metadata": {**pods[1]["metadata"], "uid": "u-1", "resourceVersion": "42", "creationTimestamp": "t"},
        "status": {"phase": "Succeeded"},
    }
    diff = build_pods_diff(plan_builds(pods, {mofed: earlier}))
    assert list(diff["after"]["pods"]) == [gpu] and list(diff["before"]["pods"]) == [mofed]
    # As a person compares it: no status, no server-managed metadata.
    assert diff["before"]["pods"][mofed] == pods[1]
    assert build_pods_diff(plan_builds([], {})) == {**diff, "before": {"pods": {}}, "after": {"pods": {}}}
