"""The revision hash both driver upgrade controllers compare driver pods against (operators/upgrade_controller.py).

``latest_revision_hash`` is k8s-operator-libs' ``GetDaemonsetControllerRevisionHash`` (pkg/upgrade/pod_manager.go):
the ControllerRevisions the DaemonSet's selector matches and whose name starts with the DaemonSet's name, the
highest ``revision`` of them, its name without ``<daemonset>-``.  Against a real store.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet_twin.apiserver import builtin_types
from gpufleet_twin.machinery.clock import SimClock
from gpufleet_twin.machinery.kinds import Kinds
from gpufleet_twin.machinery.registry import Registry
from gpufleet_twin.machinery.store import Store
from gpufleet_twin.operators.upgrade_controller import latest_revision_hash

Obj = dict[str, Any]
NAMESPACE = "gpu-operator"
# An OpenShift driver DaemonSet: dots and dashes in its name.
DAEMONSET = "nvidia-driver-daemonset-416.94.202410211619-0"
SELECTOR = {"app": DAEMONSET}


@pytest.fixture
def store() -> tuple[Store, Kinds]:
    registry = Registry()
    for rtype in builtin_types.BUILTIN_TYPES:
        registry.add(rtype)
    return Store(registry, SimClock(time_scale=1.0, start=1_760_000_000.0)), Kinds.from_registry(registry)


def daemonset(name: str = DAEMONSET, selector: dict[str, str] | None = None) -> Obj:
    return {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"selector": {"matchLabels": selector or SELECTOR}},
    }


def add_revision(
    store: tuple[Store, Kinds], name: str, revision: int, labels: dict[str, str], namespace: str = NAMESPACE
) -> None:
    the_store, kinds = store
    if the_store.try_get(kinds.namespace, None, namespace) is None:
        the_store.create(kinds.namespace, {"metadata": {"name": namespace}})
    the_store.create(
        kinds.controllerrevision,
        {
            "metadata": {"name": name, "namespace": namespace, "labels": {**labels, "controller-revision-hash": "x"}},
            "data": {},
            "revision": revision,
        },
    )


def test_the_highest_revision_wins_whatever_the_order_and_its_name_loses_the_daemonset_prefix(store) -> None:
    add_revision(store, f"{DAEMONSET}-6d4f8b7c9", 1, SELECTOR)
    add_revision(store, f"{DAEMONSET}-5f7d8c9b6", 3, SELECTOR)
    add_revision(store, f"{DAEMONSET}-7b9c6d5f4", 2, SELECTOR)
    assert latest_revision_hash(store[0], store[1], daemonset()) == "5f7d8c9b6"


def test_only_revisions_the_daemonsets_selector_matches_in_its_namespace_count(store) -> None:
    add_revision(store, f"{DAEMONSET}-5f7d8c9b6", 2, SELECTOR)
    # Named after the DaemonSet, newer, but with other labels: another selector's revision.
    add_revision(store, f"{DAEMONSET}-8c6b5d4f7", 7, {"app": "nvidia-driver-daemonset"})
    # Same name and labels in another namespace.
    add_revision(store, f"{DAEMONSET}-9d7c6b5f8", 9, SELECTOR, namespace="other")
    assert latest_revision_hash(store[0], store[1], daemonset()) == "5f7d8c9b6"


def test_a_revision_the_selector_matches_but_named_after_another_daemonset_does_not_count(store) -> None:
    """Upstream's fix for DaemonSets that share a selector (k8s-operator-libs cf74a6e): the name must start with
    the DaemonSet's; a selector match alone would take the other DaemonSet's newer revision."""
    add_revision(store, f"{DAEMONSET}-5f7d8c9b6", 2, SELECTOR)
    add_revision(store, "nvidia-driver-daemonset-417.94.202501-0-8c6b5d4f7", 5, SELECTOR)
    assert latest_revision_hash(store[0], store[1], daemonset()) == "5f7d8c9b6"


def test_no_matching_revision_gives_none(store) -> None:
    add_revision(store, "mofed-ubuntu22.04-ds-5f7d8c9b6", 1, {"app": "mofed-ubuntu22.04"})
    assert latest_revision_hash(store[0], store[1], daemonset()) is None
