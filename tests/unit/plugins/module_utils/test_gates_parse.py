"""Parsers of validation pod output, on real tool output (tests/unit/fixtures/gates) and broken output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates_parse import (
    UnreadableOutputError,
    ecc_counters,
    excerpt,
    parse_dcgmi_diag,
    parse_ibstat,
    parse_kernel_xids,
    parse_prometheus_vector,
    parse_smi_query_csv,
    parse_smoke_log,
    smi_value,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gates"


def sample(kind: str, name: str) -> str:
    return (FIXTURES / kind / name).read_text()


# -- nvidia-smi --query-gpu ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fields", "bus_id"),
    [
        ("nge-h100-590.48.01-query-gpu.csv", 212, "00000000:00:09.0"),
        ("nge-h100-mig-590.48.01-query-gpu.csv", 212, "00000000:00:09.0"),
        ("nge-h200-590.48.01-query-gpu.csv", 212, "00000000:83:00.0"),
        ("nge-l40s-595.80-query-gpu.csv", 202, "00000000:01:00.0"),
    ],
)
def test_real_query_csv_parses_with_units_stripped_and_no_values_as_none(name: str, fields: int, bus_id: str) -> None:
    query = parse_smi_query_csv(sample("nvidia-smi", name))
    assert len(query.rows) == 1
    row = query.rows[0]
    assert len(row) == fields
    assert row["pci.bus_id"] == bus_id
    assert row["memory.total"].endswith("MiB")  # "memory.total [MiB]" header -> key without the unit
    assert row["retired_pages.pending"] is None  # "[N/A]"
    assert "fan.speed" in row
    gpus = ecc_counters(query)
    assert [(gpu.index, gpu.corrected, gpu.uncorrected) for gpu in gpus] == [("0", 0, 0)]
    assert gpus[0].key == "GPU-00000000-0000-0000-0000-000000000000"


def test_deprecated_and_na_cells_are_no_value() -> None:
    assert smi_value("[Requested functionality has been deprecated]") is None
    assert smi_value("[N/A]") is None
    assert smi_value("N/A") is None
    assert smi_value(" 0 ") == "0"


def test_ecc_not_reported_stays_none_and_aggregate_wins() -> None:
    text = (
        "index, pci.bus_id, uuid, ecc.errors.corrected.volatile.total, ecc.errors.uncorrected.volatile.total, "
        "ecc.errors.corrected.aggregate.total, ecc.errors.uncorrected.aggregate.total\n"
        "0, 00000000:19:00.0, GPU-a, 1, 0, 7, 2\n"
        "1, 00000000:3B:00.0, GPU-b, [N/A], [N/A], [N/A], [N/A]\n"
    )
    first, second = ecc_counters(parse_smi_query_csv(text))
    assert (first.corrected, first.uncorrected) == (7, 2)
    assert (second.corrected, second.uncorrected) == (None, None)


def test_gpu_off_the_bus_lines_are_kept_apart_from_the_table() -> None:
    text = (
        "Unable to determine the device handle for GPU0000:DB:00.0: Unknown Error\n"
        "index, uuid, ecc.errors.uncorrected.aggregate.total\n0, GPU-a, 0\n"
    )
    query = parse_smi_query_csv(text)
    assert query.lost_gpus == [("0000:DB:00.0", "Unknown Error")]
    assert len(query.rows) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "printed nothing"),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
            "NVIDIA driver is installed and running.\n",
            "nvidia-smi failed",
        ),
        ('Field "ecc.mode.bogus" is not a valid field to query.\n\n', "nvidia-smi failed"),
        ("index, uuid\n0, GPU-a, extra\n", "has 3 values for 2 fields"),
        ("hello world\n", "no header row"),
    ],
)
def test_broken_query_output_is_unreadable(text: str, expected: str) -> None:
    with pytest.raises(UnreadableOutputError, match=expected):
        parse_smi_query_csv(text)


def test_non_numeric_counter_is_unreadable() -> None:
    with pytest.raises(UnreadableOutputError, match="expected a count"):
        ecc_counters(parse_smi_query_csv("index, ecc.errors.uncorrected.aggregate.total\n0, lots\n"))


# -- ibstat -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "devices", "not_active", "panic"),
    [
        ("gpud-a100-mt4126-28.37.1014-all-active.txt", 9, [], False),
        ("gpud-azure-a100-mt4124-20.41.1000-ibpanic.txt", 8, [], True),
        ("gpud-h100-cx7-28.39.1002-all-active.txt", 12, [], False),
        (
            "gpud-h100-cx7-28.39.1002-cx6dx-some-down-a.txt",
            12,
            [
                ("mlx5_2/1", "Down", "Disabled", "Ethernet"),
                ("mlx5_7/1", "Down", "Disabled", "Ethernet"),
                ("mlx5_8/1", "Down", "Disabled", "Ethernet"),
            ],
            False,
        ),
        (
            "gpud-h100-cx7-28.39.1002-cx6dx-some-down-b.txt",
            12,
            [("mlx5_11/1", "Down", "Disabled", "Ethernet"), ("mlx5_5/1", "Down", "Disabled", "Ethernet")],
            False,
        ),
        (
            "gpud-pr482-cx7-28.39.1002-down-polling-snippet.txt",
            1,
            [("mlx5_10/1", "Down", "Polling", "InfiniBand")],
            False,
        ),
        ("l2fwd-cx6dx-mt4125-22.32.2004-ethernet-100.txt", 2, [], False),
        (
            "netop-sriov-pod-cx6vf-mt4124-20.28.4000-down-linkup.txt",
            1,
            [("mlx5_7/1", "Down", "LinkUp", "InfiniBand")],
            False,
        ),
    ],
)
def test_real_ibstat_output(name: str, devices: int, not_active: list, panic: bool) -> None:
    report = parse_ibstat(sample("ibstat", name))
    assert len(report.devices) == devices
    down = [(p.name, p.state, p.physical_state, p.link_layer) for p in report.ports if p.state != "Active"]
    assert sorted(down) == sorted(not_active)
    assert bool(report.panic) is panic
    assert all(port.rate for port in report.ports)


def test_ibstat_reads_firmware_type_and_rate() -> None:
    report = parse_ibstat(sample("ibstat", "gpud-a100-mt4126-28.37.1014-all-active.txt"))
    first = report.devices[0]
    assert (first.name, first.ca_type, first.firmware) == ("mlx5_0", "MT4126", "22.35.2302")
    assert {(p.link_layer, p.rate) for p in report.ports} == {("Ethernet", 200), ("InfiniBand", 200)}


def test_ibstat_panic_alone_is_read_not_unreadable() -> None:
    report = parse_ibstat("ibpanic: [1234] main: stat of IB device 'mlx5_9' failed: No such file or directory\n")
    assert report.devices == []
    assert "mlx5_9" in report.panic


@pytest.mark.parametrize(
    "text",
    [
        "",
        "sh: ibstat: command not found\n",
        "CA 'mlx5_0'\n\tPort 1:\n\t\tState Active\n",
        "CA 'x'\n\tPort 1:\n\t\tRate: fast\n",
    ],
)
def test_broken_ibstat_is_unreadable(text: str) -> None:
    with pytest.raises(UnreadableOutputError):
        parse_ibstat(text)


# -- dcgmi diag -----------------------------------------------------------------------------


def test_dcgm3_all_pass_with_prompt_and_fence_around_the_table() -> None:
    report = parse_dcgmi_diag(sample("dcgmi", "aws-p4de-dcgm3.3.3-535.104.12-diag-r2-pass.txt"))
    assert (report.dcgm_version, report.driver_version, report.layout) == ("3.3.3", "535.104.12", 3)
    assert report.failed_tests == []
    names = [test.name for test in report.tests]
    assert names[:2] == ["Denylist", "NVML Library"]
    assert ("PCIe", "Integration") in [(test.name, test.category) for test in report.tests]


def test_dcgm3_fail_on_one_gpu_with_wrapped_warning() -> None:
    report = parse_dcgmi_diag(sample("dcgmi", "aws-g5-a10g-dcgm3.3.9-570.195.03-diag-targeted-power-fail.txt"))
    (failed,) = report.failed_tests
    assert (failed.name, failed.category, failed.failed_gpus, failed.passed_gpus) == (
        "Targeted Power",
        "Stress",
        [1],
        [0, 2, 3],
    )
    warning = failed.messages[0]
    assert warning.kind == "Warning"
    # dcgmi cut this at 45 characters mid-word ("desire" / "d power"): joined back exactly.
    assert warning.text == (
        "GPU 1 Max power of 224.1 did not reach desired power minimum target_power_min_ratio of 224.2 for GPU 1 "
        "Verify that the clock speeds and GPU utilization are high."
    )
    assert [m.kind for m in failed.messages[1:]] == ["Info", "Info", "Info"]
    eud = next(test for test in report.tests if test.name == "EUD Test")
    assert eud.result == "Skip" and not eud.failed


def test_dcgm3_deployment_fail_with_long_error() -> None:
    report = parse_dcgmi_diag(sample("dcgmi", "azure-nd-h200-dcgm3.1.8-550.127.08-diag-r1-persistence-fail.txt"))
    (failed,) = report.failed_tests
    assert failed.name == "Persistence Mode"
    assert failed.messages[0].kind == "Error"
    assert failed.messages[0].text.startswith("Persistence mode for GPU 0 is currently disabled. The DCGM diagnostic")
    assert "for GPU 5 is currently disabled" in failed.messages[0].text
    assert [test.name for test in report.tests][-1] == "Inforom"


def test_dcgm4_layout_with_per_gpu_rows() -> None:
    report = parse_dcgmi_diag(sample("dcgmi", "dcgm4.4.2-580.105.08-diag-r2-new-format-pass.txt"))
    assert report.layout == 4
    assert [(t.name, t.category, t.result, t.passed_gpus) for t in report.tests] == [
        ("software", "Deployment", "Pass", [0]),
        ("memory", "Hardware", "Pass", [0]),
        ("pcie", "Integration", "Pass", [0]),
    ]


def test_dcgm4_failing_gpu_row_fails_the_test() -> None:
    text = sample("dcgmi", "dcgm4.4.2-580.105.08-diag-r2-new-format-pass.txt").replace(
        "| pcie                      | Pass                                           |\n"
        "|                           | GPU0: Pass                                     |",
        "| pcie                      | Fail                                           |\n"
        "|                           | GPU0: Fail                                     |\n"
        "| Warning: GPU0             | GPU 0 PCIe link width x8 is below the expecte  |\n"
        "|                           | d x16.                                         |",
    )
    report = parse_dcgmi_diag(text)
    (failed,) = report.failed_tests
    assert (failed.name, failed.failed_gpus) == ("pcie", [0])
    assert failed.messages[0].gpu == 0
    assert failed.messages[0].text == "GPU 0 PCIe link width x8 is below the expected x16."


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Error: unable to establish a connection to the specified host: localhost\n"
            "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n",
            "unable to establish a connection",
        ),
        ("", "no result table"),
        (
            "+----+\n| Diagnostic                | Result                                         |\n+====+\n",
            "no test results",
        ),
        (
            "| Diagnostic                | Result                                         |\n"
            "|-----  Deployment  --------+------------------------------------------------|\n"
            "| Denylist                  | maybe                                          |\n",
            "has no result",
        ),
    ],
)
def test_broken_dcgmi_output_is_unreadable(text: str, expected: str) -> None:
    with pytest.raises(UnreadableOutputError, match=expected):
        parse_dcgmi_diag(text)


# -- kernel log, Prometheus, smoke ---------------------------------------------------------------


def test_kernel_log_xids_in_both_driver_formats() -> None:
    text = (
        "[    0.000000] Linux version 5.14.0-427.40.1.el9_4.x86_64\n"
        "[ 3600.000000] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "[ 3700.123456] NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double "
        "bit error (DBE) has been detected on GPU in the framebuffer at partition 0, subpartition 0.\n"
    )
    events = parse_kernel_xids(text)
    assert [(event.bus_id, event.xid) for event in events] == [("0000:3b:00", 79), ("0000:19:00", 48)]
    assert events[0].message.endswith("GPU has fallen off the bus.")
    assert parse_kernel_xids("[    1.0] nothing to see\n") == []


@pytest.mark.parametrize("text", ["", "\n\n", "dmesg: read kernel buffer failed: Operation not permitted\n"])
def test_unreadable_kernel_log(text: str) -> None:
    with pytest.raises(UnreadableOutputError):
        parse_kernel_xids(text)


def test_prometheus_vector_and_errors() -> None:
    answer = json.loads(
        '{"status":"success","data":{"resultType":"vector","result":['
        '{"metric":{"__name__":"DCGM_FI_DEV_XID_ERRORS","gpu":"3","Hostname":"gpu-worker-004"},"value":[1.7e9,"79"]}]}}'
    )
    (sample_,) = parse_prometheus_vector(answer)
    assert (sample_.labels["gpu"], sample_.value) == ("3", 79.0)
    with pytest.raises(UnreadableOutputError, match="did not answer"):
        parse_prometheus_vector({"status": "error", "error": "parse error"})
    with pytest.raises(UnreadableOutputError, match="expected a vector"):
        parse_prometheus_vector({"status": "success", "data": {"resultType": "matrix", "result": []}})


def test_smoke_log_success_error_and_silence() -> None:
    ok = parse_smoke_log("Training smoke: OK\nshape: (1000, 1000)\n", success_line="Training smoke: OK")
    assert ok.passed
    failed = parse_smoke_log(
        'Traceback (most recent call last):\n  File "<string>", line 6, in <module>\n'
        "RuntimeError: CUDA error: uncorrectable ECC error encountered\n",
        success_line="Training smoke: OK",
    )
    assert not failed.passed
    assert failed.reason == "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    assert parse_smoke_log("", success_line="x").reason == "the smoke script printed nothing"
    assert "never printed" in parse_smoke_log("hello\n", success_line="Inference smoke: OK").reason


def test_excerpt_keeps_head_and_tail() -> None:
    text = "a" * 1000 + "b" * 1000
    short = excerpt(text, limit=100)
    assert short.startswith("a" * 50) and short.endswith("b" * 50)
    assert "1900 characters left out" in short
    assert excerpt("small") == "small"
