"""Fuzzed validation output: mutated real tool output, truncated, wrong layout, another tool's output.

Output that is not what the gate asked for is unreadable, and unreadable is a failed gate, never a pass. The
parsers raise nothing but ``UnreadableOutputError`` and ``judge_gate`` never raises. The property on real samples
(tests/unit/fixtures/gates, copied from /work/shared/reference/samples): whatever a mutation does, a gate that
still passes reports only what the unmutated output says (its verdicts are a sub-list of the truth, no verdict
invented or altered); a line edit never turns a failing output into a pass; and dropping or garbling a line that
proves a port, a GPU or a test healthy never passes with that item left out or changed.

What cannot be told from the output alone, and so is not claimed: a whole device block, GPU row or test row that
is missing is indistinguishable from a host that has fewer of them (``rdma_min_ports`` and the expected GPU count
guard that), and deleting the line that reports a failure removes the evidence itself.
Profiles and how to run a longer campaign: tests/unit/conftest.py.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates import (
    ECC_FIELDS,
    GateSettings,
    judge_gate,
)
from ansible_collections.gpufleet.upgrade.plugins.module_utils._gates_parse import (
    UnreadableOutputError,
    ecc_counters,
    parse_dcgmi_diag,
    parse_ibstat,
    parse_kernel_xids,
    parse_prometheus_vector,
    parse_smi_query_csv,
    parse_smoke_log,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gates"
SETTINGS = GateSettings(namespace="nvidia-gpu-operator")
CONTAINER = {"rdma": "ibstat", "gpu_errors": "ecc", "dcgm_diag": "dcgm"}


def _eight_gpus() -> str:
    """What the gate's own query prints on an 8-GPU node (the real samples are single-GPU hosts)."""
    rows = [
        f"{index}, 00000000:{0x18 + 16 * index:02X}:00.0, GPU-{index:08d}-0000-0000-0000-000000000000, 0, 0, 3, 0"
        for index in range(8)
    ]
    return ", ".join(ECC_FIELDS) + "\n" + "\n".join(rows) + "\n"


SAMPLES: dict[str, list[tuple[str, str]]] = {
    "rdma": [(p.name, p.read_text()) for p in sorted((FIXTURES / "ibstat").iterdir())],
    "gpu_errors": [(p.name, p.read_text()) for p in sorted((FIXTURES / "nvidia-smi").glob("*.csv"))]
    + [("gate-query-8-gpus.csv", _eight_gpus())],
    "dcgm_diag": [(p.name, p.read_text()) for p in sorted((FIXTURES / "dcgmi").iterdir())],
}
ALL_SAMPLES = [(gate, name, text) for gate, items in SAMPLES.items() for name, text in items]


def judge(gate: str, text: str) -> tuple[bool, str]:
    passed, reason, _details = judge_gate(gate, {CONTAINER[gate]: text}, settings=SETTINGS)
    assert isinstance(passed, bool) and isinstance(reason, str)
    return passed, reason


def verdicts(gate: str, text: str) -> list[Any]:
    """What the gate's verdict rests on, item by item (ports, GPUs, tests), as the parser reads it.

    Names are left out on purpose: a garbled device or test name changes no verdict; a garbled state or result must.
    """
    if gate == "rdma":
        wanted = {layer.lower() for layer in SETTINGS.rdma_link_layers}
        return [
            (p.state, p.physical_state, p.link_layer)
            for p in parse_ibstat(text).ports
            if p.link_layer.lower() in wanted
        ]
    if gate == "gpu_errors":
        query = parse_smi_query_csv(text)
        return [("lost", bus) for bus, _message in query.lost_gpus] + [
            ("gpu", gpu.uncorrected) for gpu in ecc_counters(query)
        ]
    return [(t.result, sorted(t.failed_gpus)) for t in parse_dcgmi_diag(text).tests]


def is_sublist(part: list[Any], whole: list[Any]) -> bool:
    remaining = iter(whole)
    return all(any(item == other for other in remaining) for item in part)


# -- mutations -----------------------------------------------------------------------------------------

_NOISE = ["x", " ", "\t", ":", "|", ",", "'", "0", "9", "-", "[N/A]", "Pass", "Fail", "Active", "Down", "\x00", "é"]


def mutate_line(text: str, rng: random.Random) -> str:
    """One edit of one line: dropped, written twice, moved, garbled, re-indented or emptied."""
    lines = text.splitlines(keepends=True)
    if not lines:
        return rng.choice(_NOISE)
    at = rng.randrange(len(lines))
    choice = rng.randrange(6)
    if choice == 0:
        del lines[at]
    elif choice == 1:
        lines.insert(rng.randrange(len(lines) + 1), lines[at])
    elif choice == 2:
        other = rng.randrange(len(lines))
        lines[at], lines[other] = lines[other], lines[at]
    elif choice == 3:
        column = rng.randrange(len(lines[at]) + 1)
        cut = rng.randrange(3)
        lines[at] = lines[at][:column] + rng.choice(_NOISE) + lines[at][column + cut :]
    elif choice == 4:
        lines[at] = rng.choice(["", " ", "\t", "        "]) + lines[at].lstrip(" \t")
    else:
        lines[at] = "\n"
    return "".join(lines)


@st.composite
def line_edits(draw: st.DrawFn) -> tuple[str, str, str, str]:
    gate, name, text = draw(st.sampled_from(ALL_SAMPLES))
    rng = random.Random(draw(st.integers(min_value=0, max_value=2**32)))
    mutated = text
    for _mutation in range(draw(st.integers(min_value=1, max_value=3))):
        mutated = mutate_line(mutated, rng)
    return gate, name, text, mutated


# -- properties ----------------------------------------------------------------------------------------


PARSERS: list[Callable[[str], Any]] = [
    parse_smi_query_csv,
    parse_ibstat,
    parse_dcgmi_diag,
    parse_kernel_xids,
    lambda text: parse_smoke_log(text, success_line="Training smoke: OK"),
]


@given(text=st.one_of(st.text(max_size=400), st.sampled_from([t for _g, _n, t in ALL_SAMPLES])))
def test_parsers_raise_only_unreadable_output(text: str) -> None:
    for parse in PARSERS:
        try:
            parse(text)
        except UnreadableOutputError as err:
            assert err.msg
    for gate in (*CONTAINER, "smoke_training", "smoke_inference"):
        judge_gate(gate, {"ibstat": text, "ecc": text, "dcgm": text, "smoke": text, "kernel-log": text},
                   settings=SETTINGS)  # fmt: skip


@given(case=line_edits())
def test_a_line_edit_never_passes_with_a_verdict_the_output_does_not_give(case: tuple[str, str, str, str]) -> None:
    gate, name, original, mutated = case
    passed, reason = judge(gate, mutated)
    if not passed:
        return
    truth_passed = judge(gate, original)[0]
    if not truth_passed:
        # Only by taking out the very line that reports the failure (which no parser can tell from a healthy one).
        kept = set(mutated.splitlines())
        assert any(line not in kept for line in failure_lines(gate, original)), (
            f"{name}: a line edit that kept every failure line made a failing {gate} output pass ({reason})"
        )
        return
    assert is_sublist(verdicts(gate, mutated), verdicts(gate, original)), f"{name}: {reason}"


@given(gate_sample=st.sampled_from(ALL_SAMPLES), cut=st.floats(min_value=0, max_value=1, exclude_max=True))
def test_truncated_output_passes_only_with_what_it_shows_of_the_truth(gate_sample: tuple[str, str, str],
                                                                      cut: float) -> None:  # fmt: skip
    gate, name, text = gate_sample
    truncated = text[: int(len(text) * cut)]
    passed, reason = judge(gate, truncated)
    if passed:
        assert is_sublist(verdicts(gate, truncated), verdicts(gate, text)), f"{name}: {reason}"
        if gate == "dcgm_diag":
            # The table closes with a border: only text after it may be cut (a prompt, a code fence).
            assert verdicts(gate, truncated) == verdicts(gate, text), f"{name} cut at {len(truncated)}: {reason}"


@pytest.mark.parametrize(("gate", "name", "text"), ALL_SAMPLES, ids=[f"{g}-{n}" for g, n, _t in ALL_SAMPLES])
def test_another_tools_output_is_never_a_pass(gate: str, name: str, text: str) -> None:
    for other in CONTAINER:
        if other != gate:
            passed, reason = judge(other, text)
            assert not passed, f"{name} judged as {other}: {reason}"
    assert not judge_gate("smoke_training", {"smoke": text}, settings=SETTINGS)[0]


def failure_lines(gate: str, text: str) -> list[str]:
    """The lines that report a failure: a panic, a port not Active/LinkUp, a Fail or Error row."""
    lines = text.splitlines()
    if gate == "rdma":
        return [
            line
            for line in lines
            if line.startswith("ibpanic")
            or (line.strip().startswith("State:") and "Active" not in line)
            or (line.strip().startswith("Physical state:") and "LinkUp" not in line)
        ]
    return [line for line in lines if "Fail" in line or line.startswith(("| Error", "| Warning"))]


def health_lines(gate: str, text: str) -> list[int]:
    """Indexes of the lines that prove an item healthy: a port's state and link layer, a GPU's ECC row, a result."""
    lines = text.splitlines()
    if gate == "rdma":
        proving = ("State:", "Physical state:", "Link layer:")
        return [i for i, line in enumerate(lines) if line.strip().startswith(proving)]
    if gate == "gpu_errors":
        return [i for i, line in enumerate(lines) if line.strip()]  # the header names the columns, each row a GPU
    # A test's own row (its name in the first cell) with its result.
    return [i for i, line in enumerate(lines) if line.startswith("| ") and line[2:28].strip() and "Pass" in line]


@given(gate_sample=st.sampled_from(ALL_SAMPLES), data=st.data())
def test_dropping_a_line_that_proves_health_never_passes_without_it(gate_sample: tuple[str, str, str],
                                                                    data: st.DataObject) -> None:  # fmt: skip
    gate, name, text = gate_sample
    candidates = health_lines(gate, text)
    dropped = data.draw(st.sampled_from(candidates))
    lines = text.splitlines(keepends=True)
    mutated = "".join(lines[:dropped] + lines[dropped + 1 :])
    passed, reason = judge(gate, mutated)
    if passed:
        # Allowed only when what is left is the truth with one whole item (a GPU row, a test row) left out.
        left = verdicts(gate, mutated)
        assert is_sublist(left, verdicts(gate, text)) and len(left) == len(verdicts(gate, text)) - 1, (
            f"{name}: line {dropped + 1} ({lines[dropped].strip()!r}) dropped and the gate passed: {reason}"
        )


@given(answer=st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
                           lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.sampled_from(
                               ["status", "data", "resultType", "result", "value", "metric", "error"]), c, max_size=4)),
                           max_leaves=20))  # fmt: skip
def test_prometheus_answers_of_any_shape_are_read_or_unreadable(answer: Any) -> None:
    try:
        parse_prometheus_vector(answer)
    except UnreadableOutputError as err:
        assert err.msg


# -- regression examples the fuzzing found --------------------------------------------------------------


def test_ecc_output_without_its_header_is_unreadable_not_a_pass() -> None:
    # The header line moved below the rows: the first GPU's values were read as field names, every ECC counter was
    # then "not reported" and the gate passed.
    header, *rows = _eight_gpus().splitlines()
    passed, reason = judge("gpu_errors", "\n".join([*rows, header]) + "\n")
    assert not passed
    assert "output cannot be read" in reason and "ecc.errors.uncorrected.volatile.total" in reason


def test_ecc_output_of_another_query_is_unreadable_not_a_pass() -> None:
    # The table a gate did not ask for (no ECC columns): nothing in it says the GPUs are healthy.
    passed, reason = judge("gpu_errors", "index, name, uuid\n0, NVIDIA H100 80GB HBM3, GPU-0000\n")
    assert not passed and "output cannot be read" in reason


def test_a_dcgmi_table_cut_short_is_unreadable() -> None:
    text = SAMPLES["dcgm_diag"][0][1]
    cut = text[: text.index("|                           | Fail - GPU: 1")]
    passed, reason = judge("dcgm_diag", cut)
    assert not passed
    assert "output cannot be read" in reason and "cut short" in reason


@pytest.mark.parametrize("field", ["State", "Physical state", "Link layer"])
def test_an_ibstat_port_without_its_state_or_link_layer_is_unreadable(field: str) -> None:
    # A Down port whose Link layer line is missing was left out as "not InfiniBand", and the gate passed.
    text = (FIXTURES / "ibstat" / "gpud-pr482-cx7-28.39.1002-down-polling-snippet.txt").read_text()
    text = (FIXTURES / "ibstat" / "gpud-h100-cx7-28.39.1002-all-active.txt").read_text().rstrip("\n") + "\n" + text
    lines = text.splitlines(keepends=True)
    last = max(i for i, line in enumerate(lines) if line.strip().startswith(field + ":"))
    passed, reason = judge("rdma", "".join(lines[:last] + lines[last + 1 :]))
    assert not passed
    assert "output cannot be read" in reason and field in reason


def test_an_ibstat_device_with_fewer_ports_than_it_says_is_unreadable() -> None:
    text = "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 2\n\tFirmware version: 28.39.1002\n\tPort 1:\n"
    text += "\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400\n\t\tLink layer: InfiniBand\n"
    passed, reason = judge("rdma", text)
    assert not passed and "output cannot be read" in reason and "2 ports" in reason


def test_a_dcgm4_gpu_row_without_its_test_row_is_unreadable() -> None:
    # The "| memory | Pass |" row dropped: its "GPU0: Pass" row was silently ignored and the gate passed.
    text = (FIXTURES / "dcgmi" / "dcgm4.4.2-580.105.08-diag-r2-new-format-pass.txt").read_text()
    memory = next(line for line in text.splitlines(keepends=True) if line.startswith("| memory "))
    passed, reason = judge("dcgm_diag", text.replace(memory, ""))
    assert not passed and "output cannot be read" in reason and "GPU0: Pass" in reason


PERSISTENCE_FAIL = "azure-nd-h200-dcgm3.1.8-550.127.08-diag-r1-persistence-fail.txt"
PERSISTENCE_ROW = "| Persistence Mode          | Fail                                           |\n"


def test_a_dcgmi_test_listed_twice_is_unreadable() -> None:
    # A passing row copied over the failing one: the Error rows then hung under the copy and the gate passed.
    text = (FIXTURES / "dcgmi" / PERSISTENCE_FAIL).read_text()
    passed, reason = judge(
        "dcgm_diag",
        text.replace(
            PERSISTENCE_ROW, "| Inforom                   | Pass                                           |\n"
        ),
    )
    assert not passed and "output cannot be read" in reason and "Inforom" in reason and "twice" in reason


def test_a_dcgmi_error_row_fails_the_test_it_belongs_to() -> None:
    # The Fail row itself lost: the Error rows dcgmi prints only for a failure still fail the gate.
    text = (FIXTURES / "dcgmi" / PERSISTENCE_FAIL).read_text()
    passed, reason = judge("dcgm_diag", text.replace(PERSISTENCE_ROW, ""))
    assert not passed and "Persistence mode for GPU 0 is currently disab" in reason


def test_a_dcgmi_result_in_the_metadata_section_is_unreadable() -> None:
    # The Deployment section line lost: its tests were read as metadata and a Fail among them was not seen.
    text = (FIXTURES / "dcgmi" / PERSISTENCE_FAIL).read_text()
    section = next(line for line in text.splitlines(keepends=True) if "Deployment" in line)
    passed, reason = judge("dcgm_diag", text.replace(section, ""))
    assert not passed and "output cannot be read" in reason and "Metadata" in reason


def test_a_dcgmi_table_without_its_metadata_is_unreadable() -> None:
    text = (FIXTURES / "dcgmi" / "dcgm4.4.2-580.105.08-diag-r2-new-format-pass.txt").read_text()
    lines = text.splitlines(keepends=True)
    header = next(i for i, line in enumerate(lines) if line.startswith("| Diagnostic"))
    moved = lines[:header] + lines[header + 1 : header + 7] + [lines[header]] + lines[header + 7 :]
    passed, reason = judge("dcgm_diag", "".join(moved))
    assert not passed and "output cannot be read" in reason and "DCGM Version" in reason


def test_a_dcgmi_test_that_names_fewer_gpus_than_detected_is_unreadable() -> None:
    # "Pass - GPUs: 0, 2, 3" without its "Fail - GPU: 1" row: GPU 1 was never judged and the gate passed.
    text = (FIXTURES / "dcgmi" / "aws-g5-a10g-dcgm3.3.9-570.195.03-diag-targeted-power-fail.txt").read_text()
    cut = text.replace("|                           | Fail - GPU: 1                                  |\n", "")
    passed, reason = judge("dcgm_diag", cut)
    assert not passed and "output cannot be read" in reason and "0, 2, 3 of the 4" in reason


def test_a_gpu_listed_twice_is_unreadable() -> None:
    header, first, *rows = _eight_gpus().splitlines()
    passed, reason = judge("gpu_errors", "\n".join([header, first, first, *rows]) + "\n")
    assert not passed and "output cannot be read" in reason and "twice" in reason


def test_an_ibstat_port_line_written_twice_is_unreadable() -> None:
    # "State: Down" followed by a stray "State: Active": the last one won and the port passed.
    text = "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n\tPort 1:\n"
    text += "\t\tState: Down\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
    text += "\t\tRate: 400\n\t\tLink layer: InfiniBand\n"
    passed, reason = judge("rdma", text)
    assert not passed and "output cannot be read" in reason and "State" in reason


def _one_port(rate: str) -> str:
    return (
        "CA 'mlx5_0'\n\tCA type: MT4129\n\tNumber of ports: 1\n\tFirmware version: 28.39.1002\n\tPort 1:\n"
        f"\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: {rate}\n\t\tLink layer: InfiniBand\n"
    )


def test_an_ibstat_rate_of_inf_is_unreadable_not_a_traceback() -> None:
    # int(float("inf")) raised OverflowError out of the parser.
    with pytest.raises(UnreadableOutputError, match="rate 'inf' is not a number"):
        parse_ibstat(_one_port("inf"))


def test_an_fdr10_rate_is_read() -> None:
    # ibstat prints "Rate: 40 (FDR10)" on FDR10 links (rdma-core infiniband-diags/ibstat.c, port_dump).
    assert parse_ibstat(_one_port("40 (FDR10)")).ports[0].rate == 40
