"""The fault matrix's cases (issue 16), shared by tests/integration/test_fault_matrix_*.py (one file per component
group, so xdist's loadfile can spread them) and bench/soak.py: each group's setting (its matrix, its role's inputs),
one twin per group (``Groups``), one case per fault kind, and what a case runs and checks (``run_fault``).

Each case is one real ``playbooks/upgrade.yml -e stage=...`` run against the twin with one fault injected through
its admin URL, then the invariants of tests/integration/fault_matrix.py (outcome, budget, explained marks, recovery
by the printed Next, matrix and cluster agree). The cases of a group share one twin: each ends back at
``current_production`` with no mark of ours left, which is itself the proof that the tool recovered.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet_twin.process import TwinProcess, start_twin

from .browser import assert_entry_report_renders
from .fault_matrix import (
    Case,
    Group,
    Halt,
    assert_marks_explained,
    assert_matrix_agrees,
    assert_outcome,
    assert_within_budget,
    back_after_canary,
    clear_faults,
    expire_killed_lease,
    kill_group_mid_stage,
    lease_holder,
    marks,
    run_case,
    write_matrix,
)
from .test_firmware_idrac_flash import NEW_CX7, OLD_CX7, bmc_ca, write_image

CANARY = "gpu-worker-001"  # the example matrix's canary_node
KERNEL = "5.14.0-427.40.1.el9_4.x86_64"  # current_production's kernel, the twin's
NEW_MOFED = "24.10-1.0.0.0"


def firmware_inputs(twin: TwinProcess, root: pathlib.Path) -> dict[str, Any]:
    """The NIC firmware role's inputs as an operator gives them: the image, every BMC with its credentials."""
    path, sha256 = write_image(root, "ConnectX-7", NEW_CX7)
    bmcs = [
        {"node": node, "address": bmc["address"], "username": bmc["username"], "password": bmc["password"]}
        for node, bmc in sorted(twin.companion["published"]["bmcs"].items())
    ]
    return {
        "nic_firmware_images": {"firmware_cx7": {"image_path": path, "sha256": sha256}},
        "nic_firmware_bmcs": bmcs,
        "nic_firmware_bmc_ca_path": bmc_ca(twin),
        "nic_firmware_bmc_timeout": 10,
        "nic_firmware_drain_timeout": 120,
        "nic_firmware_wait_sleep": 0.2,
    }


GROUPS: dict[str, dict[str, Any]] = {
    "gpu_operator": {"canary": None},
    "network_operator": {
        "canary": {"mofed": NEW_MOFED, "status": "canary-testing", "canary_node": CANARY},
        "inputs": {"network_operator_eviction_timeout": 3, "network_operator_wait_sleep": 0.3},
    },
    "firmware": {
        "production": {"firmware_cx7": OLD_CX7},  # what the twin's NICs run
        "canary": {"firmware_cx7": NEW_CX7, "status": "canary-testing", "canary_node": CANARY},
        "inputs": firmware_inputs,
    },
    # OpenShift's SR-IOV Network Operator through OLM (the twin's openshift profile runs OpenShift 4.16, whose
    # Red Hat index offers the 4.16 build: the 4.17 build needs OpenShift 4.17 first).
    "sriov": {
        "canary": {"sriov_operator": "4.17.0", "status": "canary-testing", "canary_node": CANARY},
        "inputs": {"sriov_operator_wait_sleep": 1},
        "refused_by_design": "update OpenShift to 4.17 first",
    },
    "openshift": {
        "canary": {
            "openshift": "4.16.21",
            "kernel": "5.14.0-427.42.1.el9_4.x86_64",
            "status": "canary-testing",
            "canary_node": CANARY,
        },
        "inputs": {"openshift_wait_sleep": 1},
    },
}
# A twin of its own for a test whose change goes forward (promoted, or refused a rollback for good): the group's
# cases need theirs back at current_production.
GROUPS["openshift_forward"] = GROUPS["openshift"]


class Groups:
    """One twin per component group, started when its first case asks for it and shared by the group's cases.
    A case that fails leaves its twin in a state nobody vouches for: the group's next case gets a fresh one."""

    def __init__(self, root: pytest.TempPathFactory) -> None:
        self._root = root
        self._started: dict[str, Group] = {}

    def __getitem__(self, name: str) -> Group:
        if name not in self._started:
            root = self._root.mktemp(name)
            twin = start_twin(nodes=6, profile="openshift", time_scale=600, workdir=root / "twin")
            setting = GROUPS[name]
            write_matrix(root, setting["canary"], setting.get("production"))
            inputs = setting.get("inputs", {})
            inputs = inputs(twin, root) if callable(inputs) else dict(inputs)
            group = Group(
                name=name,
                twin=twin,
                workspace=root,
                inputs=inputs,
                refused_by_design=setting.get("refused_by_design", ""),
            )
            twin.admin("POST", "budget", {"maxUnavailable": group.budget, "scope": "nvidia.com/gpu.present=true"})
            self._started[name] = group
        return self._started[name]

    @contextlib.contextmanager
    def case(self, name: str) -> Iterator[Group]:
        try:
            yield self[name]
        except BaseException:
            self.stop(name)
            raise

    def stop(self, name: str) -> None:
        group = self._started.pop(name)
        assert group.twin.stop() == 0, group.twin.log_path.read_text()[-2000:]

    def stop_all(self) -> None:
        for name in list(self._started):
            self.stop(name)


def group_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Groups]:
    """The ``groups`` fixture of tests/integration/conftest.py: one pool per test module, its twins stopped after."""
    pool = Groups(tmp_path_factory)
    yield pool
    pool.stop_all()


def fault(spec: dict[str, Any]) -> Any:
    return lambda twin: twin.admin("POST", "faults", spec)


CASES: list[tuple[str, Case]] = [
    (
        "gpu_operator",
        Case(
            "api-5xx-burst",
            "canary",
            fault({"type": "api_errors", "code": 503, "verb": "patch", "resource": "nodes", "count": 6}),
            clear_faults,
            None,
        ),
    ),
    (
        "gpu_operator",
        Case(
            "429-burst",
            "canary",
            fault(
                {
                    "type": "api_errors",
                    "code": 429,
                    "verb": ["create", "get"],
                    "resource": "*",
                    "count": 8,
                    "retry_after": 1,
                }
            ),
            clear_faults,
            None,
        ),
    ),
    (
        "gpu_operator",
        Case(
            "driver-build-fails",
            "canary",
            fault({"type": "driver_build_fails", "kernel": KERNEL}),
            clear_faults,
            Halt(
                CANARY,
                "pod-restart-required",
                "no kernel-devel package matches the running kernel",
                diagnosis="driver_pod_crashloop",
            ),
            {"upgrade_wait_timeout": 600},
        ),
    ),
    (
        "network_operator",
        Case(
            "409-conflicts",
            "canary",
            fault({"type": "conflict", "verb": ["update", "patch"], "resource": "nodes", "count": 4}),
            clear_faults,
            None,
        ),
    ),
    (
        "network_operator",
        Case(
            "mofed-build-fails",
            "canary",
            fault({"type": "mofed_build_fails", "kernel": KERNEL}),
            clear_faults,
            Halt(CANARY, "reload-mofed", "no driver package"),
        ),
    ),
    (
        "firmware",
        Case(
            "bmc-unreachable",
            "canary",
            lambda twin: twin.admin("POST", f"bmc/{CANARY}/fault", {"type": "unresponsive", "mode": "refuse"}),
            lambda twin: twin.admin("DELETE", f"bmc/{CANARY}/fault"),
            Halt(CANARY, "BMC", "refused"),
        ),
    ),
    (
        "firmware",
        Case(
            "bmc-job-fails",
            "canary",
            lambda twin: twin.admin(
                "POST",
                f"bmc/{CANARY}/fault",
                {"type": "job-fails", "messageId": "RED004", "message": "Unable to apply the update"},
            ),
            lambda twin: twin.admin("DELETE", f"bmc/{CANARY}/fault"),
            Halt(CANARY, "reboot", "Unable to apply the update"),
        ),
    ),
    (
        "openshift",
        Case(
            "node-never-ready",
            "canary",
            fault({"type": "node_never_returns", "node": CANARY}),
            clear_faults,
            Halt(CANARY, "MachineConfigPool gpu-canary", "Timed out"),
            {"upgrade_wait_timeout": 60},
        ),
    ),
    (
        "sriov",
        Case(
            "sriov-5xx-burst",
            "canary",
            fault(
                {
                    "type": "api_errors",
                    "code": 503,
                    "verb": "get",
                    "resource": "subscriptions",
                    "count": 2,
                }
            ),
            clear_faults,
            # Retried through the burst; then the preflight finds OLM offers no 4.17 build on OpenShift 4.16: refused
            # before anything changed, saying to update OpenShift first (no fault to clear: its Next is not run).
            Halt(CANARY, "OLM offers", "update OpenShift to 4.17 first"),
            {"upgrade_wait_timeout": 10},
            next_runs=False,
        ),
    ),
    (
        "gpu_operator",
        Case(
            "node-already-cordoned",
            "canary",
            fault({"type": "cordon", "node": CANARY}),
            clear_faults,
            # Not refused in preflight: the driver changes, then the gates cannot be scheduled on the cordoned node.
            Halt(CANARY, "smoke_training", "could not run"),
        ),
    ),
]


# Cases that expose a bug not fixed here: strict, so the fix turns them into failures to remove the mark; with
# ``raises`` only that failure is expected (any other broken invariant still fails the case).
KNOWN_BUGS: dict[str, dict[str, Any]] = {}


def known_bug(name: str) -> list[pytest.MarkDecorator]:
    return [pytest.mark.xfail(strict=True, **KNOWN_BUGS[name])] if name in KNOWN_BUGS else []


# Cases whose stage report is also looked at in a real browser (tests/integration/browser.py): a MOFED rollout
# and a halted NIC firmware rollout, besides the GPU Operator canary and promotion of test_upgrade_flow.
BROWSER_CHECKS = {"409-conflicts": "canary-mofed", "bmc-job-fails": "canary-firmware-halted"}


def cases_of(*names: str, mark_long: bool = False) -> list[Any]:
    """``test_fault``'s parameters for the cases of the groups ``names``, their ids as before the split. With
    ``mark_long`` each case is marked ``long`` (make test-long) but those BROWSER_CHECKS looks at in a browser:
    ``make test`` keeps them, so the MOFED and the halted firmware reports are rendered on every run."""

    def marks(name: str) -> list[pytest.MarkDecorator]:
        return known_bug(name) + ([pytest.mark.long] if mark_long and name not in BROWSER_CHECKS else [])

    return [pytest.param(g, c, id=f"{g}-{c.name}", marks=marks(c.name)) for g, c in CASES if g in names]


def run_fault(groups: Groups, group_name: str, case: Case) -> None:
    """One case on its group's twin, its invariants, and a look at its report in a browser for BROWSER_CHECKS."""
    with groups.case(group_name) as group:
        run_case(group, case)
        if case.name in BROWSER_CHECKS:
            ledger = json.loads((group.workspace / "reports" / "upgrade-ledger.json").read_text())["entries"]
            entry = [e for e in ledger if e["stage"] == case.stage][-1]
            assert entry["nodes"], entry
            assert_entry_report_renders(group.workspace / "reports", entry, name=BROWSER_CHECKS[case.name])


def sigkill_then_rerun(group: Group) -> None:
    twin = group.twin
    baseline = marks(twin)
    twin.admin("POST", "report/reset")
    duration = 600
    kill_group_mid_stage(group, "canary", lease_duration=duration, until=lambda: CANARY in marks(twin))
    assert lease_holder(twin), "the killed run's Lease is still held"
    assert_within_budget(twin, group.budget)

    # Its Lease expires after its duration on the twin's clock; the re-run takes it over and finishes.
    expire_killed_lease(twin, duration)
    before = marks(twin)
    rerun = group.run("canary", upgrade_lease_duration=duration)
    assert_outcome(group, "canary", rerun, None)
    assert_marks_explained(twin, before)
    back_after_canary(group)  # rollback, or for a change with no way back (OpenShift) the bake and the promote
    assert_within_budget(twin, group.budget)
    assert_matrix_agrees(group, baseline)


def case_named(name: str) -> tuple[str, Case]:
    return next((group, case) for group, case in CASES if case.name == name)
