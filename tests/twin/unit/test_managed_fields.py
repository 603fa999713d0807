"""managedFields of HTTP writes: the manager that changed a field owns it, with the time of its last change."""

from __future__ import annotations

from gpufleet_twin.apiserver.managed_fields import manager_of, record


def pool(paused: bool, **extra) -> dict:
    return {"metadata": {"name": "worker", "uid": "u", **extra}, "spec": {"paused": paused, "maxUnavailable": 1}}


def owners(obj: dict) -> dict:
    return {e["manager"]: (e["time"], e["fieldsV1"]) for e in obj["metadata"]["managedFields"]}


def test_a_changed_field_moves_to_its_new_manager_and_equal_writes_change_nothing():
    created = pool(False)
    record(None, created, manager="installer", operation="Update", api_version="v1", now="2026-01-01T00:00:00Z")
    assert owners(created) == {
        "installer": ("2026-01-01T00:00:00Z", {"f:spec": {"f:maxUnavailable": {}, "f:paused": {}}})
    }
    paused = pool(True, managedFields=created["metadata"]["managedFields"])
    record(created, paused, manager="oc", operation="Update", api_version="v1", now="2026-02-01T00:00:00Z")
    found = owners(paused)
    assert found["oc"] == ("2026-02-01T00:00:00Z", {"f:spec": {"f:paused": {}}})
    assert found["installer"] == ("2026-01-01T00:00:00Z", {"f:spec": {"f:maxUnavailable": {}}})
    again = pool(True, managedFields=paused["metadata"]["managedFields"])
    record(paused, again, manager="someone", operation="Update", api_version="v1", now="2026-03-01T00:00:00Z")
    assert "someone" not in owners(again) and owners(again)["oc"][0] == "2026-02-01T00:00:00Z"


def test_the_manager_is_the_field_manager_or_the_user_agent_up_to_its_first_slash():
    assert manager_of("gpufleet.upgrade", "OpenAPI-Generator/29.0.0/python") == "gpufleet.upgrade"
    assert manager_of("", "OpenAPI-Generator/29.0.0/python") == "OpenAPI-Generator"
    assert manager_of("", "kubectl-patch/v1.31.0 (linux/amd64)") == "kubectl-patch"
