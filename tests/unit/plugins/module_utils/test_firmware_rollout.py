"""The NIC firmware rollout's pure parts: targets, node -> BMC, GPUs back after a reboot, failures for the report."""

from __future__ import annotations

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._errors import InvalidInputError
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_flash import FlashOptions
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_plan import ComponentSpec
from ansible_collections.gpufleet.upgrade.plugins.module_utils._firmware_rollout import (
    BmcAccess,
    RolloutOptions,
    bmc_for_nodes,
    failures_of,
    firmware_diff,
    gpus_back,
    nothing_to_undo,
    rollout_target_label,
    select_targets,
)

CX7 = ComponentSpec(match="ConnectX-7", version="28.42.1000", image_path="/fw/cx7.bin", sha256="a" * 64,
                    name="firmware_cx7")  # fmt: skip


def node(name: str, *, labels: dict | None = None, bmc: str = "", ready: str = "True", boot_id: str = "b1",
         gpus: str = "8", allocatable: str = "8") -> dict:  # fmt: skip
    annotations = {"gpufleet.io/bmc-address": bmc} if bmc else {}
    return {
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations},
        "status": {
            "conditions": [{"type": "Ready", "status": ready}],
            "nodeInfo": {"bootID": boot_id},
            "capacity": {"nvidia.com/gpu": gpus},
            "allocatable": {"nvidia.com/gpu": allocatable},
        },
    }


def options(**overrides) -> RolloutOptions:
    values = {"flash": FlashOptions(components=[CX7], reboot=True), "bmc_username": "root", "bmc_password": "Pw-1"}
    values.update(overrides)
    return RolloutOptions(**values)


POOL = [
    node("gpu-worker-001", bmc="https://127.1.0.1:443"),
    node("gpu-worker-002", labels={"gpu-canary": "true"}, bmc="https://127.1.0.2:443"),
    node("gpu-worker-003"),
]


def test_scopes() -> None:
    assert select_targets(POOL, options=options(scope="canary")) == (["gpu-worker-002"], ["gpu-worker-002"])
    assert select_targets(POOL, options=options()) == (
        ["gpu-worker-001", "gpu-worker-002", "gpu-worker-003"],
        ["gpu-worker-002"],
    )
    assert select_targets(POOL, options=options(nodes=("gpu-worker-003",)))[0] == ["gpu-worker-003"]
    with pytest.raises(InvalidInputError, match="No canary node"):
        select_targets(POOL[:1], options=options(scope="canary"))
    with pytest.raises(InvalidInputError, match="not in the pool"):
        select_targets(POOL, options=options(nodes=("gpu-worker-009",)))


def test_bmc_from_the_list_then_the_inventory_map_then_the_annotation() -> None:
    listed = BmcAccess(node="gpu-worker-001", address="https://idrac-001", username="admin", password="Pw-list")
    found, missing = bmc_for_nodes(
        POOL,
        ["gpu-worker-001", "gpu-worker-002", "gpu-worker-003"],
        options=options(bmcs=(listed,), bmc_addresses={"gpu-worker-002": "https://idrac-002"}),
    )
    assert missing == ["gpu-worker-003"]
    assert (found["gpu-worker-001"].address, found["gpu-worker-001"].username) == ("https://idrac-001", "admin")
    assert (found["gpu-worker-002"].address, found["gpu-worker-002"].source) == ("https://idrac-002", "inventory")
    found, _missing = bmc_for_nodes(POOL, ["gpu-worker-002"], options=options())
    assert (found["gpu-worker-002"].address, found["gpu-worker-002"].source) == ("https://127.1.0.2:443", "annotation")
    assert found["gpu-worker-002"].password == "Pw-1" and "Pw-1" not in repr(found["gpu-worker-002"])


def test_gpus_back_needs_ready_a_new_boot_and_every_gpu() -> None:
    assert not gpus_back(node("n", boot_id="b1"), previous_boot_id="b1")  # not rebooted yet
    assert not gpus_back(node("n", boot_id="b2", ready="False"), previous_boot_id="b1")
    assert not gpus_back(node("n", boot_id="b2", allocatable="0"), previous_boot_id="b1")  # driver still loading
    assert gpus_back(node("n", boot_id="b2"), previous_boot_id="b1")
    assert gpus_back(node("n", gpus="0", allocatable="0"), previous_boot_id="")
    assert not gpus_back(None, previous_boot_id="")


def test_target_label_and_failures() -> None:
    assert rollout_target_label(options()) == "firmware_cx7=28.42.1000"
    rollback = FlashOptions(components=[ComponentSpec(match="ConnectX-7", version="28.39.1002", name="firmware_cx7")],
                            rollback=True)  # fmt: skip
    assert rollout_target_label(options(flash=rollback)) == "rollback:firmware_cx7=28.39.1002"
    result = {
        "timeline": [
            {"node": "gpu-worker-001", "outcome": "done"},
            {
                "node": "gpu-worker-003",
                "outcome": "failed",
                "failed_step": "reboot",
                "error": "BMC x: job ended Failed",
            },
        ],
        "plan": {"halted_by": [{"node": "gpu-worker-002", "why": "failed at step flash: RED004"}]},
    }
    assert failures_of(result) == [
        {"node": "gpu-worker-003", "step": "reboot", "reason": "BMC x: job ended Failed"},
        {"node": "gpu-worker-002", "step": "earlier run", "reason": "failed at step flash: RED004"},
    ]


def test_nothing_to_undo_is_what_the_inventory_shows_not_what_a_job_said() -> None:
    reports = [
        # Its job failed and the inventory shows the target still installed: nothing changed.
        {"node": "a", "needs_work": False, "pending_jobs": []},
        # The job applied part of the image: the inventory differs from the target.
        {"node": "b", "needs_work": True, "pending_jobs": []},
        # At the target, but a job waits to apply something else at the next reset.
        {"node": "c", "needs_work": False, "pending_jobs": [{"id": "JID_1"}]},
    ]
    assert nothing_to_undo(reports) == ("a",)


def test_options_are_checked() -> None:
    with pytest.raises(InvalidInputError, match="scope"):
        options(scope="everything")
    with pytest.raises(InvalidInputError, match="image_path needs its sha256"):
        FlashOptions(components=[ComponentSpec(match="BIOS", version="2.4.1", image_path="/fw/bios.bin")])
    with pytest.raises(InvalidInputError, match="image_uri needs its sha256"):
        FlashOptions(components=[ComponentSpec(match="BIOS", version="2.4.1", image_uri="https://repo/bios.bin")])
    with pytest.raises(InvalidInputError, match="exactly one of image_path and image_uri"):
        FlashOptions(components=[ComponentSpec(match="BIOS", version="2.4.1")])
    with pytest.raises(InvalidInputError, match="http"):
        FlashOptions(components=[ComponentSpec(match="BIOS", version="1", image_uri="ftp://x/y.bin", sha256="a" * 64)])
    assert FlashOptions(components=[ComponentSpec(match="BIOS")], rollback=True).rollback


def test_the_diff_shows_each_node_to_flash_before_and_after() -> None:
    old, new = {"NIC.Slot.1-1-1": "28.39.1002"}, {"NIC.Slot.1-1-1": "28.42.1000"}
    reports = [
        {"node": "gpu-worker-001", "bmc": "https://127.1.0.1:443", "versions": old, "planned_versions": new},
        {"node": "gpu-worker-002", "bmc": "https://127.1.0.2:443", "versions": new, "planned_versions": new},
        {"node": "gpu-worker-003", "bmc": "https://127.1.0.3:443", "versions": old, "planned_versions": new},
    ]
    targets = ["gpu-worker-001", "gpu-worker-003"]
    planned = firmware_diff(reports, targets, after={}, check_mode=True)
    assert planned["before"] == {
        "gpu-worker-001": {"bmc": "https://127.1.0.1:443", "firmware": old},
        "gpu-worker-003": {"bmc": "https://127.1.0.3:443", "firmware": old},
    }
    assert {node: entry["firmware"] for node, entry in planned["after"].items()} == dict.fromkeys(targets, new)
    # A real run that halted after the first node: read back where flashed, as before where not started.
    read_back = {"NIC.Slot.1-1-1": "28.42.1000", "NIC.Slot.1-1-2": "28.42.1000"}
    halted = firmware_diff(reports, targets, after={"gpu-worker-001": read_back}, check_mode=False)
    assert halted["after"]["gpu-worker-001"]["firmware"] == read_back
    assert halted["after"]["gpu-worker-003"]["firmware"] == old
    assert firmware_diff(reports, [], after={}, check_mode=True) == {"before": {}, "after": {}}
