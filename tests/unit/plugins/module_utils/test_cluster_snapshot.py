"""cluster_snapshot's pure parts: what an object keeps, anonymisation, the upgrade Events, bounded lists."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._k8s_resources import NODES, PODS
from ansible_collections.gpufleet.upgrade.plugins.module_utils._snapshot import (
    LISTED_KINDS,
    Snapshot,
    SnapshotSettings,
    anonymization_map,
    anonymize,
    clean_object,
    file_name,
    is_upgrade_event,
    name_pattern,
    read_kind,
    take_snapshot,
)


def test_clean_object_blanks_inline_env_values_command_lines_and_last_applied():
    pod = {
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "managedFields": [{}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...password...}", "keep": "me"},
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "command": ["run", "--token=s3cr3t"],
                    "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "REF", "valueFrom": {"x": 1}}],
                }
            ]
        },
    }
    snapshot = Snapshot()
    cleaned = clean_object(pod, snapshot)
    text = json.dumps(cleaned)
    assert "hunter2" not in text and "s3cr3t" not in text and "password" not in text
    assert cleaned["metadata"]["annotations"] == {"keep": "me"}
    assert cleaned["spec"]["containers"][0]["env"][1] == {"name": "REF", "valueFrom": {"x": 1}}
    assert "managedFields" not in cleaned["metadata"]
    assert pod["spec"]["containers"][0]["env"][0]["value"] == "hunter2", "the original is left alone"
    assert snapshot.dropped == {
        "container env values": 1,
        "container command": 1,
        "last-applied-configuration annotations": 1,
    }


def test_clean_object_reaches_pod_templates_of_workloads():
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "env": [{"name": "K", "value": "v"}]}]}}},
    }
    cleaned = clean_object(deployment, Snapshot())
    assert cleaned["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "K", "value": ""}]


def test_anonymisation_is_stable_keyed_and_keeps_system_namespaces():
    lists = {
        file_name(NODES): [{"metadata": {"name": "gpu-a"}}],
        "api_v1_namespaces.json": [
            {"metadata": {"name": name}}
            for name in ("ml-team", "kube-system", "openshift-monitoring", "nvidia-gpu-operator", "kept")
        ],
    }
    mapping = anonymization_map(lists, salt="s1", keep_namespaces=["kept"])
    assert set(mapping) == {"gpu-a", "ml-team"}
    assert mapping == anonymization_map(lists, salt="s1", keep_namespaces=["kept"])
    assert mapping["gpu-a"] != anonymization_map(lists, salt="s2")["gpu-a"]
    pod = {
        "metadata": {"name": "driver-gpu-a", "namespace": "ml-team", "labels": {"kubernetes.io/hostname": "gpu-a"}},
        "spec": {"nodeName": "gpu-a"},
        "message": 'Node gpu-a: evicting pods/"x" -n "ml-team"',
        "other": "gpu-ab",
    }
    renamed = anonymize(pod, mapping, name_pattern(mapping))
    text = json.dumps(renamed)
    assert "gpu-a" not in text.replace("gpu-ab", "") and "ml-team" not in text
    assert renamed["spec"]["nodeName"] == mapping["gpu-a"]
    assert renamed["metadata"]["name"] == "driver-" + mapping["gpu-a"]
    assert renamed["other"] == "gpu-ab", "a longer name that only starts like a node's is not touched"


def test_upgrade_events_are_the_controllers_and_the_collections():
    assert is_upgrade_event({"reason": "GPUDriverUpgrade"})
    assert is_upgrade_event({"reason": "Cordoned", "source": {"component": "gpufleet.upgrade"}})
    assert not is_upgrade_event({"reason": "Pulled", "source": {"component": "kubelet"}})


def test_every_kind_is_one_file_and_secrets_and_configmaps_are_never_listed():
    names = [file_name(ref) for ref in LISTED_KINDS]
    assert len(names) == len(set(names))
    assert file_name(PODS) == "api_v1_pods.json"
    assert not any(ref.plural in ("secrets", "configmaps") for ref in LISTED_KINDS)


class _Pages:
    """Answers list requests page by page, as the API server does with limit/continue."""

    def __init__(self, items, *, page):
        self.items, self.page, self.queries = items, page, []

    def iter_list(self, ref, *, page_size):
        self.queries.append(page_size)
        yield from self.items


def test_a_kind_bigger_than_max_objects_fails_naming_it():
    api = _Pages([{"metadata": {"name": str(i)}} for i in range(5)], page=2)
    settings = SnapshotSettings(directory="/nonexistent", max_objects=3, page_size=2)
    with pytest.raises(InvalidInputError, match="Pod has more than max_objects=3"):
        read_kind(api, PODS, settings=settings)
    assert api.queries == [2]


class _EmptyCluster(_Pages):
    host = "https://cluster.example:6443"
    requests_sent = 0

    def get(self, ref, name, *, namespace=None):
        return None


def test_check_mode_says_changed_and_writes_no_folder(tmp_path):
    """Every run writes the folder afresh: check mode reports changed=True as the real run does, and writes nothing."""
    settings = SnapshotSettings(directory=str(tmp_path / "snapshot"))
    taken_at = "2026-11-27T00:00:00Z"
    result = take_snapshot(_EmptyCluster([], page=500), settings=settings, check_mode=True, taken_at=taken_at)
    assert result["changed"] is True and not (tmp_path / "snapshot").exists()
    result = take_snapshot(_EmptyCluster([], page=500), settings=settings, check_mode=False, taken_at=taken_at)
    assert result["changed"] is True and (tmp_path / "snapshot").is_dir()
