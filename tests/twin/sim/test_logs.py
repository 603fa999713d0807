"""Pod logs of validation pods, checked against the shape of real tool output in reference/samples."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from gpufleet_twin.kube import logs
from gpufleet_twin.kube.state import IbPort, NodeHealth, SimState
from gpufleet_twin.machinery import errors

SAMPLES = Path(__file__).resolve().parents[4] / "shared" / "reference" / "samples"
MOMENT = 1_737_368_306.0  # Mon Jan 20 10:18:26 2025 UTC


def h100_node(**changes) -> NodeHealth:
    health = NodeHealth(
        name="gpu-worker-001",
        kernel="5.14.0-427.40.1.el9_4.x86_64",
        os_image="Red Hat Enterprise Linux CoreOS 416.94.202410211619-0",
        ostree_version="416.94.202410211619-0",
        driver_version="550.90.07",
        device_plugin_up=True,
        ib_ports=[IbPort(device=f"mlx5_{i}", port=1) for i in range(2)],
    )
    for key, value in changes.items():
        setattr(health, key, value)
    return health


def pod(command: list[str], *, gpus: int = 0, containers: int = 1) -> dict:
    container = {"name": "check", "image": "validator:1", "command": command}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    extra = [{"name": f"side-{i}", "image": "x"} for i in range(containers - 1)]
    return {
        "metadata": {"name": "gpu-check", "namespace": "default"},
        "spec": {"nodeName": "gpu-worker-001", "containers": [container, *extra]},
        "status": {"containerStatuses": [{"name": "check", "restartCount": 0, "state": {"running": {}}}]},
    }


def reader(health: NodeHealth) -> logs.PodLogReader:
    sim = SimState()
    sim.nodes[health.name] = health
    return logs.PodLogReader(sim, now=lambda: MOMENT)


def sample(relative: str) -> str:
    path = SAMPLES / relative
    if not path.is_file():
        pytest.skip("reference samples not available")
    return path.read_text()


def test_nvidia_smi_table_matches_the_real_layout() -> None:
    text = reader(h100_node()).read(pod(["nvidia-smi"]), None)
    real = sample("nvidia-smi/gpud-h100x8-550.90.07-table.txt").splitlines()
    mine = text.splitlines()
    assert mine[0] == "Mon Jan 20 10:18:26 2025"
    assert len(mine) == len(real)
    for ours, theirs in zip(mine, real, strict=True):
        assert len(ours) == len(theirs), f"column layout differs:\n{ours}\n{theirs}"
        if theirs.startswith(("| NVIDIA-SMI", "| GPU  Name", "|===", "+---")):
            assert ours == theirs
    assert mine[8] == "|   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                    0 |"


def test_nvidia_smi_query_csv_with_ecc_errors_and_na() -> None:
    health = h100_node(ecc_corrected=12, ecc_uncorrected=3)
    command = [
        "nvidia-smi",
        "--query-gpu=index,name,driver_version,memory.total,ecc.errors.corrected.volatile.total,"
        "ecc.errors.uncorrected.aggregate.total,ecc.errors.corrected.volatile.l1_cache,retired_pages.pending",
        "--format=csv",
    ]
    rows = list(csv.reader(io.StringIO(reader(health).read(pod(command, gpus=2), None)), skipinitialspace=True))
    header = sample("nvidia-smi/nge-h100-590.48.01-query-gpu.csv").splitlines()[0].split(", ")
    assert rows[0][3] == "memory.total [MiB]" and "memory.total [MiB]" in header
    assert len(rows) == 3, "a pod requesting 2 GPUs sees 2"
    assert rows[1] == ["0", "NVIDIA H100 80GB HBM3", "550.90.07", "81559 MiB", "12", "3", "[N/A]", "[N/A]"]
    assert rows[2][4:6] == ["0", "0"]
    nounits = reader(health).read(pod([*command[:2], "--format=csv,noheader,nounits"]), None)
    assert nounits.splitlines()[0].split(", ")[3] == "81559"
    unknown = reader(health).read(pod(["nvidia-smi", "--query-gpu=bogus.field", "--format=csv"]), None)
    assert unknown.startswith('Field "bogus.field" is not a valid field to query.')


def test_nvidia_smi_without_a_driver() -> None:
    text = reader(h100_node(driver_version=None)).read(pod(["nvidia-smi"]), None)
    assert text.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_ibstat_reflects_port_states() -> None:
    health = h100_node()
    health.ib_ports[1].state = "Down"
    health.ib_ports[1].physical_state = "Polling"
    text = reader(health).read(pod(["sh", "-c", "ibstat"]), None)
    blocks = text.split("CA '")[1:]
    assert [b.split("'")[0] for b in blocks] == ["mlx5_0", "mlx5_1"]
    assert "\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 400" in blocks[0]
    assert "\t\tState: Down\n\t\tPhysical state: Polling\n\t\tRate: 10" in blocks[1]
    real = sample("ibstat/gpud-h100-cx7-28.39.1002-all-active.txt")
    real_keys = [line.split(":")[0] for line in real.split("CA '")[1].splitlines()[1:]]
    ours_keys = [line.split(":")[0] for line in blocks[0].splitlines()[1:]]
    assert ours_keys == real_keys
    single = reader(health).read(pod(["ibstat", "mlx5_1"]), None)
    assert single.startswith("CA 'mlx5_1'") and "mlx5_0" not in single
    assert "ibpanic" in reader(health).read(pod(["ibstat", "mlx5_9"]), None)


def test_dcgmi_diag_dcgm3_passes_like_the_sample() -> None:
    health = h100_node()
    text = reader(health).read(pod(["dcgmi", "diag", "-r", "2"]), None)
    real = [
        line
        for line in sample("dcgmi/aws-p4de-dcgm3.3.3-535.104.12-diag-r2-pass.txt").splitlines()[1:]
        if not line.startswith("```")  # the markdown fence
    ]
    mine = text.splitlines()
    assert [line[:28] for line in mine] == [line[:28] for line in real]
    assert "| PCIe                      | Pass - All                                     |" in mine


def test_dcgmi_diag_failures_dcgm3_and_dcgm4() -> None:
    health = h100_node(dcgm_failures=["pcie:1"], ecc_uncorrected=1)
    text = reader(health).read(pod(["dcgmi", "diag", "-r", "3"]), None)
    assert "| PCIe                      | Pass - GPUs: 0, 2, 3, 4, 5, 6, 7               |" in text
    assert "|                           | Fail - GPU: 1                                  |" in text
    assert "| Warning                   | GPU 1 PCIe" in text
    assert "| Page Retirement/Row Remap | Fail                                           |" in text
    assert all(len(line) == 78 for line in text.splitlines()[1:])
    health.dcgm_version = "4.2.3"
    text4 = reader(health).read(pod(["dcgmi", "diag", "-r", "2"]), None)
    assert "| pcie                      | Fail                                           |" in text4
    assert "|                           | GPU1: Fail                                     |" in text4
    assert "| Warning: GPU1             |" in text4
    assert "| GPU Device IDs Detected   | 2330, 2330," in text4
    assert "Host engine connection invalid" in reader(h100_node(driver_version=None)).read(
        pod(["dcgmi", "diag", "-r", "1"]), None
    )


def test_log_providers_come_first_and_container_rules() -> None:
    health = h100_node()
    sim = SimState()
    sim.nodes[health.name] = health
    sim.log_providers.append(lambda p, c, n: "from a provider\n" if c == "check" else None)
    assert logs.PodLogReader(sim).read(pod(["nvidia-smi"]), "check") == "from a provider\n"
    with pytest.raises(errors.ApiError) as missing:
        logs.PodLogReader(sim).read(pod(["true"], containers=2), None)
    assert "a container name must be specified" in missing.value.message
    waiting = pod(["true"])
    waiting["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    with pytest.raises(errors.ApiError) as not_started:
        logs.PodLogReader(sim).read(waiting, "check")
    assert "is waiting to start: ContainerCreating" in not_started.value.message
    default = reader(health).read(pod(["python", "train.py"]), None)
    assert 'msg="Starting check"' in default
