"""`kernelpro tools list` and `kernelpro analyze` on the real H200 recordings (tests/fixtures/h200)
and on a cubin built here by nvcc (skipped without nvcc)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kernelpro.cli import main
from kernelpro.runner.evidence.sass import find_cuobjdump
from kernelpro.runner.tools import registry

H200 = Path(__file__).parent / "fixtures" / "h200"
CUDA = Path(__file__).parent / "fixtures" / "cuda"
NAMES = {t.name for t in registry()}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _findings(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, dict[str, Any]]:
    out = _json(capsys, ["analyze", *argv, "--json"])
    return {f["tool"]: f for f in out["findings"]}


# --- tools list -----------------------------------------------------------------------------------


def test_tools_list_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| tool | source |") and lines[1].startswith("|---")
    rows = [line.split("|")[1].strip() for line in lines[2:]]
    assert len(NAMES) == 25 and set(rows) == NAMES and len(rows) == 25
    assert any("energy only" in line for line in lines)


def test_tools_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _json(capsys, ["tools", "list", "--json"])
    assert len(rows) == 25 and {r["name"] for r in rows} == NAMES
    for r in rows:
        assert {"name", "source", "required", "thresholds", "affinity"} <= set(r)
        assert (
            r["source"] in ("ncu", "sass", "timeline")
            and r["required"]
            and r["thresholds"]
            and r["affinity"]
        )
    by = {r["name"]: r for r in rows}
    assert (
        by["warp_stall"]["thresholds"]["high"] == 40
        and by["launch_overhead"]["thresholds"]["critical"] == 40
    )
    assert "compute" not in by["memory_coalescing"]["affinity"]


# --- analyze on real recordings -------------------------------------------------------------------


def test_analyze_finds_uncoalesced_loads(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["analyze", "--ncu-csv", str(H200 / "ncu_uncoalesced.csv"),
                         "--sass", str(H200 / "sass_uncoalesced.txt"), "--json"])
    tools = {f["tool"]: f for f in out["findings"]}
    assert out["bottleneck"] in (
        "memory",
        "latency",
        "mixed",
    )  # from ncu throughput: DRAM 81 %, SM 9 %
    f = tools["memory_coalescing"]
    assert (
        f["severity"] == "critical"
        and f["source"] == "ncu"
        and f["evidence"]["global_ld_excess"] == 8.0
    )
    assert out["bottleneck"] == "memory" and "register_spills" in out["ran"]  # the SASS was read


def test_analyze_markdown_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--ncu-csv", str(H200 / "ncu_uncoalesced.csv")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Bottleneck: ") and "(from ncu throughput)" in out
    assert "memory_coalescing" in out and "Metrics (ncu):" in out


def test_analyze_timeline_finds_launch_overhead(capsys: pytest.CaptureFixture[str]) -> None:
    tools = _findings(capsys, ["--timeline", str(H200 / "timeline_launch_overhead.json")])
    f = tools["launch_overhead"]
    assert f["severity"] == "critical" and f["evidence"]["launch_overhead_pct"] > 90
    assert f["evidence"]["kernel_launches"] == 1000 and "kernel_count_fusion" in tools
    # The control: one matmul per call, nothing to say.
    assert _findings(capsys, ["--timeline", str(H200 / "timeline_clean.json")]) == {}


def test_analyze_compute_bottleneck_finds_tensor_core_problems(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = _json(capsys, ["analyze", "--ncu-csv", str(H200 / "ncu_gemm_ffma.csv"), "--sass",
                         str(H200 / "sass_gemm_ffma.txt"), "--bottleneck", "compute", "--json"])
    tools = {f["tool"] for f in out["findings"]}
    assert out["bottleneck"] == "compute" and "tensor_core_underutilization" in tools
    assert "not relevant" in out["skipped"]["vectorization"]  # memory tools are filtered out
    wmma = _findings(capsys, ["--ncu-csv", str(H200 / "ncu_gemm_wmma.csv"), "--sass",
                              str(H200 / "sass_gemm_wmma.txt"), "--bottleneck", "compute"])
    assert "wgmma" in wmma["tensor_core_generation"]["title"]


def test_analyze_energy_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--ncu-csv", str(H200 / "ncu_high_registers.csv"), "--bottleneck", "compute"]
    assert "energy_uncoalesced_access" not in _findings(capsys, argv)
    assert "energy_uncoalesced_access" in _findings(capsys, [*argv, "--energy"])


# --- analyze on a cubin built by nvcc -------------------------------------------------------------


@pytest.mark.parametrize(("name", "flags", "tool"), [
    ("hmma_mma_sync", [], "tensor_core_generation"),
    ("spill_local", ["-maxrregcount=32"], "register_spills"),
])
def test_analyze_cubin(capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, flags: list[str],
                       tool: str) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not on PATH: the CI image has /usr/local/bin/nvcc (CUDA 13.0)")
    if find_cuobjdump() is None:
        pytest.skip("no cuobjdump (neither CUDA nor the triton wheel)")
    cubin = tmp_path / f"{name}.cubin"
    cmd = [
        nvcc,
        "-cubin",
        "-gencode=arch=compute_90a,code=sm_90a",
        *flags,
        "-o",
        str(cubin),
        str(CUDA / f"{name}.cu"),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    out = _json(capsys, ["analyze", "--cubin", str(cubin), "--json"])
    assert out["bottleneck"] == "unknown"  # no ncu: no class, every speed tool runs
    tools = {f["tool"]: f for f in out["findings"]}
    assert tool in tools and tools[tool]["source"] == "sass"
    if tool == "register_spills":
        assert tools[tool]["severity"] == "medium"  # harm unknown without ncu
    assert out["skipped"]["occupancy"] == "no ncu evidence"


# --- errors ---------------------------------------------------------------------------------------


def test_analyze_without_inputs_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze"]) == 2
    err = capsys.readouterr().err
    assert "give at least one of --ncu-csv" in err and "--timeline" in err


def test_analyze_ncu_csv_without_a_kernel_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "empty.csv"
    empty.write_text("==PROF== Connected to process 1234\n==WARNING== No kernels were profiled.\n")
    assert main(["analyze", "--ncu-csv", str(empty)]) == 2
    assert "no kernel found in the ncu output" in capsys.readouterr().err


def test_analyze_ncu_rep_without_ncu_exits_2_with_the_fix(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no ncu here
    monkeypatch.setattr(
        "kernelpro.runner.evidence.ncu.find_ncu", lambda override=None: None
    )  # nor in /usr/local/cuda
    rep = tmp_path / "x.ncu-rep"
    rep.write_bytes(b"\0")
    assert main(["analyze", "--ncu-rep", str(rep)]) == 2
    err = capsys.readouterr().err
    assert "--ncu-rep needs Nsight Compute" in err and "ncu --import" in err and "--ncu-csv" in err
