"""compute-sanitizer memcheck in the final gate: how its output becomes a verdict (a fake
compute-sanitizer here, speaking as the real one does; the real one runs in tests/test_gpu.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from kernelpro.runner.evaluator import EvalSettings
from kernelpro.runner.memcheck import Memcheck, find_sanitizer, memcheck
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile, Workload, load_definition
from kernelpro.settings import Settings

# The fake tools write into the test's folder: they run unconfined (conftest.py).
pytestmark = pytest.mark.usefixtures("fake_tools_run_unconfined")

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"

# What compute-sanitizer 2025.x prints for an out-of-bounds read (abridged from its documentation).
ERRORS = """========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at _swiglu_kernel+0x1d0
=========     by thread (63,0,0) in block (1600,0,0)
=========     Address 0x7f2a4c190000 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
========= ERROR SUMMARY: 2 errors"""


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> Path:
    tool = tmp_path / "compute-sanitizer"
    tool.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\nfor a in "$@"; do last="$a"; done\n{body}\n')
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return tool


def _run(tmp_path: Path, tool: str = "compute-sanitizer") -> Memcheck:
    """memcheck with the compute-sanitizer that KERNELPRO_COMPUTE_SANITIZER names, read as the entry point reads it."""
    sanitizer = Settings.from_env({"KERNELPRO_COMPUTE_SANITIZER": str(tmp_path / tool)}).sanitizer_tool
    d = load_definition(DEMO / "commit1" / "definitions" / "swiglu.json")
    sol = Solution("t", d.name, "t", BuildSpec("triton", ("cuda",), "k.py::swiglu", destination_passing_style=False),
                   (SourceFile("k.py", "def swiglu(a, b):\n    return a\n"),))
    return memcheck(d, sol, [Workload.make(d, {"M": 64})], EvalSettings(device="cpu", timeout_s=60), None,
                    sanitizer)


def test_errors_fail_the_candidate_with_memchecks_own_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, f"cat <<'EOF'\n{ERRORS}\nEOF\nexit 99")
    m = _run(tmp_path)
    assert m.status == "errors" and m.errors == 2 and m.blocks
    assert "Invalid __global__ read of size 4 bytes" in m.detail and "out of bounds" in m.detail
    assert "COMPUTE-SANITIZER" not in m.detail
    args = (tmp_path / "args").read_text().split()
    assert args[:4] == ["--tool", "memcheck", "--error-exitcode", "99"]
    assert args[args.index("--target-processes") + 1] == "application-only"
    # Host backtraces (dozens of frames per error on the H200) pushed the first error out of the
    # log's kept tail: only device frames are asked for, and any host frame is dropped anyway.
    assert args[args.index("--show-backtrace") + 1] == "device"


def test_host_frames_never_crowd_out_the_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lines as the H200 printed them (the GPU tier on the H200, session 4; that log was not kept).
    frames = "\n".join(f"=========         Host Frame: _PyEval_EvalFrameDefault [0x{i:x}] in python3" for i in range(12))
    _fake(tmp_path, monkeypatch, f"cat <<'EOF'\n{ERRORS.replace('========= ERROR', frames + chr(10) + '========= ERROR')}\nEOF\nexit 99")
    m = _run(tmp_path)
    assert m.status == "errors" and m.detail.startswith("Invalid __global__ read") and "Host Frame" not in m.detail


def test_a_clean_run_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, """echo '{"memcheck": {"calls": 1}}' > "$last"
echo "========= ERROR SUMMARY: 0 errors\"""")
    m = _run(tmp_path)
    assert m == Memcheck("clean") and not m.blocks


def test_a_candidate_that_leaves_early_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It exits before the harness writes a result (say, on noticing the sanitizer): fail closed."""
    _fake(tmp_path, monkeypatch, 'echo "========= ERROR SUMMARY: 0 errors"\nexit 0')
    m = _run(tmp_path)
    assert m.status == "failed" and m.blocks and "CRASHED" in m.detail


def test_the_candidates_own_summary_line_does_not_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The candidate prints a clean summary; memcheck's own, printed last, says otherwise."""
    _fake(tmp_path, monkeypatch, f"echo '========= ERROR SUMMARY: 0 errors'\ncat <<'EOF'\n{ERRORS}\nEOF\nexit 99")
    assert _run(tmp_path).status == "errors"


def test_no_sanitizer_is_said_not_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_sanitizer(str(tmp_path / "absent")) is None
    m = _run(tmp_path, "absent")
    assert m.status == "not run" and not m.blocks and "KERNELPRO_COMPUTE_SANITIZER" in m.detail
