"""`topogate gpu import`: nvidia-smi topo -m captures to bandwidth matrices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from topogate.admission.gpusets import best_gpu_set, joint_gpu_sets
from topogate.api.gpus import BANDWIDTH_ANNOTATION, node_gpu_matrix, parse_matrix, profile
from topogate.cli import main
from topogate.commands.gpuimport import bandwidth_matrix, parse_topo

DATA = Path(__file__).resolve().parent / "data"
H100 = DATA / "topo-dgx-h100.txt"  # NVSwitch: NV18 everywhere, 10 NICs, colours
L40S = DATA / "topo-pcie-l40s.txt"  # PCIe only: PIX pairs, NODE in a socket, SYS across
V100 = DATA / "topo-dgx1-v100.txt"  # hybrid cube mesh: NV1/NV2/SYS, mlx5_* columns, no NUMA


def _import(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["gpu", "import", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_dgx_h100_is_450_gbps_everywhere_and_matches_the_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = _import(capsys, str(H100))
    assert code == 0
    matrix = json.loads(out)
    assert len(matrix) == 8
    assert all(matrix[i][j] == (0 if i == j else 450) for i in range(8) for j in range(8))
    assert tuple(tuple(float(v) for v in row) for row in matrix) == profile("nvswitch-8")


def test_pcie_box(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _import(capsys, str(L40S))
    assert code == 0
    matrix = json.loads(out)
    assert matrix[0][1] == 25 and matrix[0][2] == 16 and matrix[0][4] == 10
    assert tuple(tuple(float(v) for v in row) for row in matrix) == profile("pcie-numa-8")
    choice = best_gpu_set(matrix, range(8), 2)
    assert choice is not None and choice.gpus == (0, 1)


def test_mixed_nvlink_box_keeps_four_gpus_on_nvlink() -> None:
    kinds = parse_topo(V100.read_text())
    assert kinds[0][:5] == ["X", "NV1", "NV1", "NV2", "NV2"] and kinds[0][5] == "SYS"
    matrix = bandwidth_matrix(kinds)
    assert matrix[0][3] == 50 and matrix[0][1] == 25 and matrix[0][5] == 10
    for half in ((0, 1, 2, 3), (4, 5, 6, 7)):
        found = best_gpu_set(matrix, half, 4)
        assert found is not None and found.bottleneck == 25
    result = joint_gpu_sets(matrix, range(8), [2, 2])
    assert result is not None
    group, pods = result
    assert group.bottleneck == 25  # never a set across the sockets (10)
    assert [p.bottleneck for p in pods] == [50, 50]


def test_nvlink_and_pcie_rates_are_options(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = _import(capsys, str(V100), "--nvlink-gbps", "50", "--pcie-gbps", "12")
    matrix = json.loads(out)
    assert matrix[0][3] == 100 and matrix[0][5] == 4.8


def test_outputs(capsys: pytest.CaptureFixture[str]) -> None:
    _, value, _ = _import(capsys, str(L40S))
    _, patch, _ = _import(capsys, str(L40S), "-o", "json")
    assert json.loads(patch) == {"metadata": {"annotations": {BANDWIDTH_ANNOTATION: value.strip()}}}
    _, line, _ = _import(capsys, str(L40S), "-o", "kubectl", "--node", "gpu-7")
    assert line == (
        f"kubectl annotate node gpu-7 --overwrite {BANDWIDTH_ANNOTATION}='{value.strip()}'\n"
    )
    # What it prints is what a node accepts.
    matrix = node_gpu_matrix("gpu-7", {BANDWIDTH_ANNOTATION: value}, {"nvidia.com/gpu": 8})
    assert matrix == parse_matrix(value)


def test_stdin(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(H100.read_text()))
    code, out, _ = _import(capsys, "-")
    assert code == 0 and json.loads(out)[3][5] == 450


def test_single_gpu() -> None:
    text = "\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\nGPU0\t X \t0-15\t0\t\tN/A\n"
    assert parse_topo(text) == [["X"]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hello\n", "no GPU matrix found"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV4\n", "no row for GPU1"),
        ("\tGPU0\tGPU1\nGPU0\t X \tNV4\nGPU1\tQPI\t X \n", "GPU1/GPU0: unknown link kind 'QPI'"),
        ("\tGPU0\tGPU1\nGPU0\t X \tX\nGPU1\tNV4\t X \n", "GPU0/GPU1: unexpected 'X'"),
        ("\tGPU0\tGPU1\nGPU0\t X \nGPU1\tNV4\t X \n", "GPU0 has 1 cells"),
        ("\tGPU0\tGPU2\nGPU0\t X \tNV4\nGPU2\tNV4\t X \n", "expected GPU0..GPU1 in order"),
        # A link count of 400 digits was an OverflowError traceback (int to float).
        (
            f"\tGPU0\tGPU1\nGPU0\t X \tNV{'9' * 400}\nGPU1\tNV4\t X \n",
            "is more than 1000 NVLinks",
        ),
        # More GPUs than the annotation may hold: topogate would refuse what it printed.
        (
            "\t"
            + "\t".join(f"GPU{i}" for i in range(1025))
            + "\n"
            + "".join(
                f"GPU{i}\t" + "\t".join(" X " if i == j else "SYS" for j in range(1025)) + "\n"
                for i in range(1025)
            ),
            "has 1025 GPUs; at most 1024 are supported",
        ),
    ],
)
def test_malformed_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "topo.txt"
    path.write_text(text)
    code, out, err = _import(capsys, str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"topogate gpu import: error: {path}")
    assert message in err


def test_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """One prefix per line: the command's words are never repeated inside the message."""
    code, _, err = _import(capsys, str(H100), "-o", "kubectl")
    assert (code, err) == (2, "topogate gpu import: error: -o kubectl needs --node NAME\n")
    code, _, err = _import(capsys, str(H100), "--node", "a;rm -rf /", "-o", "kubectl")
    assert (code, err) == (
        2,
        "topogate gpu import: error: --node: 'a;rm -rf /' is not a node name\n",
    )
    code, _, err = _import(capsys, str(H100), "--nvlink-gbps", "0")
    assert (code, err) == (
        2,
        "topogate gpu import: error: --nvlink-gbps: must be a positive number of GB/s\n",
    )
    code, _, err = _import(capsys, "/no/such/file")
    assert code == 2 and err.startswith("topogate gpu import: error: /no/such/file: cannot read")


def test_a_matrix_that_is_not_symmetric_is_warned_about(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "topo.txt"
    path.write_text(
        "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV4\tSYS\nGPU1\tNV2\t X \tPIX\nGPU2\tSYS\tNODE\t X \n"
    )
    code, out, err = _import(capsys, str(path))
    assert code == 0 and json.loads(out) == [[0, 100, 10], [50, 0, 25], [10, 16, 0]]
    assert err == (
        f"topogate gpu import: warning: {path}: the matrix is not symmetric: GPU0/GPU1 is NV4 "
        "but GPU1/GPU0 is NV2 (and 1 more pair(s)); each pair counts at its slower direction\n"
    )
    code, _, err = _import(capsys, str(H100))
    assert code == 0 and err == ""
