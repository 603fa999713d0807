"""The NVIDIA Maintenance Operator requests, their pure parts (the engine's use of them is in test_rollout_engine;
the requests against a served operator run on the twin in tests/integration/test_node_maintenance.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    GC_IGNORE_ANNOTATION,
    RDMA_EVICTION_FILTER,
    REQUESTOR_FAILED,
    MaintenanceSettings,
    conditions_after,
    drain_spec,
    holders,
    maintenance_choice_from_params,
    ready_reason,
    release_action,
    request_action,
    request_body,
    requestor_failed,
    validate_settings,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._node_maintenance import (
    GPU_EVICTION_FILTER as GPU_FILTER,
)

OURS = "gpufleet.upgrade"
MAINTENANCE = MaintenanceSettings(requestor_id=OURS, drain=drain_spec(resource_filters=(GPU_FILTER,), timeout=300))


def request(owner: str, *, joined=(), deleting: bool = False, reason: str = "") -> dict:
    obj = {"metadata": {"name": "nvidia-operator-n1"}, "spec": {"requestorID": owner, "nodeName": "n1"}}
    if joined:
        obj["spec"]["additionalRequestors"] = list(joined)
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-11-28T10:00:00Z"
    if reason:
        obj["status"] = {"conditions": [{"type": "Ready", "status": str(reason == "Ready"), "reason": reason}]}
    return obj


def test_the_request_is_named_to_be_shared_exempt_from_garbage_collection_and_drains_gpu_pods():
    body = request_body(MAINTENANCE, "gpu-worker-001")
    assert body["metadata"]["name"] == "nvidia-operator-gpu-worker-001"
    assert body["metadata"]["namespace"] == "default"
    assert body["metadata"]["annotations"] == {GC_IGNORE_ANNOTATION: "true"}
    assert body["spec"] == {
        "requestorID": OURS,
        "nodeName": "gpu-worker-001",
        "cordon": True,
        "drainSpec": {
            "force": False,
            "deleteEmptyDir": False,
            "timeoutSeconds": 300,
            "podEvictionFilters": [{"byResourceNameRegex": "nvidia.com/gpu-*"}],
        },
    }
    assert "podEvictionFilters" not in drain_spec(resource_filters=(), timeout=60, pod_selector="app=x")
    assert drain_spec(resource_filters=(), timeout=60, pod_selector="app=x")["podSelector"] == "app=x"
    both = drain_spec(resource_filters=(GPU_FILTER, RDMA_EVICTION_FILTER), timeout=60)
    assert both["podEvictionFilters"] == [
        {"byResourceNameRegex": "nvidia.com/gpu-*"},
        {"byResourceNameRegex": "nvidia.com/rdma*"},
    ]


@pytest.mark.parametrize(
    ("existing", "asked", "given_back"),
    [
        (None, "create", "none"),
        (request(OURS), "ours", "delete"),
        (request(OURS, joined=["nvidia.network.operator"]), "ours", "delete"),
        (request("nvidia.network.operator"), "join", "none"),
        (request("nvidia.network.operator", joined=[OURS]), "joined", "leave"),
        (request("nvidia.network.operator", deleting=True), "wait-deleted", "none"),
    ],
)
def test_create_own_or_join_and_delete_or_leave(existing, asked, given_back):
    assert request_action(existing, OURS) == asked
    assert release_action(existing, OURS) == given_back


def test_the_operators_progress_and_the_holders_are_read_from_the_request():
    assert ready_reason(None) == "" and ready_reason(request(OURS)) == ""
    assert ready_reason(request(OURS, reason="Draining")) == "Draining"
    assert holders(request("a", joined=["b", "c"])) == ("a", "b", "c")


def test_bad_settings_are_refused_naming_the_option():
    with pytest.raises(InvalidInputError, match=r"node_maintenance\.requestor_id"):
        validate_settings(MaintenanceSettings(requestor_id=" "))
    with pytest.raises(InvalidInputError, match=r"node_maintenance\.timeout"):
        validate_settings(MaintenanceSettings(timeout=-1))
    choice = maintenance_choice_from_params({"mode": "never", "requestor_id": "me", "namespace": "ops", "timeout": 5})
    assert choice.mode == "never" and choice.settings == MaintenanceSettings(
        requestor_id="me", namespace="ops", timeout=5
    )
    assert maintenance_choice_from_params(None).mode == "auto"


def test_a_failed_requestor_says_so_on_its_request_and_takes_it_back_when_it_resumes():
    ready = request(OURS, reason="Ready")
    assert not requestor_failed(ready)
    marked = conditions_after(ready, failed=True, message="x" * 40000, moment="2026-11-28T10:00:00Z")
    assert marked[0] == ready["status"]["conditions"][0]  # the operator's Ready condition is kept as it is
    assert {key: marked[1][key] for key in ("type", "status", "reason", "lastTransitionTime")} == {
        "type": REQUESTOR_FAILED,
        "status": "True",
        "reason": "FailedMaintenance",
        "lastTransitionTime": "2026-11-28T10:00:00Z",
    }
    assert len(marked[1]["message"]) == 32768
    failed = {**ready, "status": {"conditions": marked}}
    assert requestor_failed(failed)
    assert conditions_after(failed, failed=False, message="", moment="") == ready["status"]["conditions"]
