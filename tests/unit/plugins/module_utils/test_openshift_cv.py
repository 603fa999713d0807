"""ClusterVersion logic: update state, refusals, the desiredUpdate patch."""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible_collections.gpufleet.upgrade.plugins.module_utils._openshift_cv import (
    desired_update_patch,
    refusal,
    update_state,
)

SAMPLES = pathlib.Path(__file__).resolve().parents[4].parent / "shared" / "reference" / "samples" / "openshift"


def cv(*, history, desired=None, progressing="False", upgradeable="True", failing="False", spec=None):
    return {
        "spec": spec or {"channel": "stable-4.16"},
        "status": {
            "desired": {"version": desired or history[0]["version"]},
            "history": history,
            "conditions": [
                {"type": "Progressing", "status": progressing, "message": "Working towards 4.17.3"},
                {"type": "Upgradeable", "status": upgradeable, "message": "Cluster operator x should not be upgraded"},
                {"type": "Failing", "status": failing, "message": "Cluster operator etcd is degraded"},
            ],
        },
    }


DONE = {"version": "4.16.20", "state": "Completed"}


def test_real_clusterversion_sample_reads_as_completed():
    path = SAMPLES / "ocp-4.3.8-clusterversion.yaml"
    if not path.is_file():
        pytest.skip("reference samples absent")
    state = update_state(yaml.safe_load(path.read_text()), version="4.3.8")
    assert state.current == "4.3.8" and state.completed


def test_progress_then_completion():
    partial = cv(history=[{"version": "4.17.3", "state": "Partial"}, DONE], progressing="True")
    state = update_state(partial, version="4.17.3")
    assert state.current == "4.16.20" and not state.completed
    done = cv(history=[{"version": "4.17.3", "state": "Completed"}, DONE])
    assert update_state(done, version="4.17.3").completed


def test_refusals():
    base = cv(history=[DONE])
    assert "does not support downgrades" in refusal(update_state(base, version="4.16.3"), version="4.16.3")
    blocked = update_state(cv(history=[DONE], upgradeable="False"), version="4.17.3")
    assert "Upgradeable=False" in refusal(blocked, version="4.17.3")
    assert refusal(update_state(cv(history=[DONE], upgradeable="False"), version="4.16.21"), version="4.16.21") is None
    assert "Failing" in refusal(update_state(cv(history=[DONE], failing="True"), version="4.17.3"), version="4.17.3")
    assert refusal(update_state(base, version="4.17.3"), version="4.17.3") is None


def test_desired_update_patch_is_empty_once_asked():
    base = cv(history=[DONE])
    patch = desired_update_patch(base, version="4.17.3", image=None, channel="stable-4.17", force=False)
    assert patch == {
        "spec": {"channel": "stable-4.17", "desiredUpdate": {"version": "4.17.3", "force": False, "image": None}}
    }
    asked = cv(history=[DONE], spec={"channel": "stable-4.17", "desiredUpdate": {"version": "4.17.3", "force": False}})
    assert desired_update_patch(asked, version="4.17.3", image=None, channel="stable-4.17", force=False) == {}
