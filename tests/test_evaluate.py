"""`kernelpro evaluate` end to end: real Solution files, the real sandboxed child, FlashInfer-Trace out.

The CLI runs in-process through ``kernelpro.cli.main``; the reference and every candidate still run
in kernelpro's own subprocesses, in Triton's interpreter on the CPU, and the parent judges the
tensors they saved. Each trace line is checked with flashinfer-bench's own ``Trace`` model,
exactly as flashinfer-bench reads JSONL (``model_validate_json`` per line), when it is installed.
"""

from __future__ import annotations

import json
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import pytest
from test_trace_format import fib  # noqa: F401  (flashinfer-bench's models, as a fixture here)

from kernelpro.cli import main

DEF_NAME = "swiglu_f32_n256"
DEFINITION: dict[str, Any] = {
    "name": DEF_NAME,
    "op_type": "elementwise",
    "description": "silu(a) * b on [M, 256] float32 (the demo's swiglu, narrowed for the interpreter)",
    "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 256}},
    "inputs": {"a": {"shape": ["M", "N"], "dtype": "float32"},
               "b": {"shape": ["M", "N"], "dtype": "float32"}},
    "outputs": {"out": {"shape": ["M", "N"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(a, b):\n    return torch.nn.functional.silu(a) * b\n",
}
INT_DEF_NAME = "add_i32_n128"
INT_DEFINITION: dict[str, Any] = {
    "name": INT_DEF_NAME,
    "op_type": "elementwise",
    "axes": {"N": {"type": "const", "value": 128}},
    "inputs": {"x": {"shape": ["N"], "dtype": "int32"}, "y": {"shape": ["N"], "dtype": "int32"}},
    "outputs": {"z": {"shape": ["N"], "dtype": "int32"}},
    "reference": "import torch\n\ndef run(x, y):\n    return x + y\n",
}
WORKLOADS = [
    {
        "axes": {"M": 1},
        "inputs": {"a": {"type": "random"}, "b": {"type": "random"}},
        "uuid": "wl-m1",
    },
    {
        "axes": {"M": 3},
        "inputs": {"a": {"type": "random"}, "b": {"type": "random"}},
        "uuid": "wl-m3",
    },
]
UUIDS = [w["uuid"] for w in WORKLOADS]

# --------------------------------------------------------------------------- candidate sources

_KERNEL_HEAD = """
import torch
import triton
import triton.language as tl


@triton.jit
def _swiglu(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, {expr}, mask=mask)
"""
_GOOD = "a * tl.sigmoid(a) * b"

TRITON_RETURNING = (
    _KERNEL_HEAD.format(expr=_GOOD)
    + """

def run(a, b):
    out = torch.empty_like(a)
    n = a.numel()
    _swiglu[(triton.cdiv(n, 128),)](a, b, out, n, BLOCK=128)
    return out
"""
)
TRITON_DPS = (
    _KERNEL_HEAD.format(expr=_GOOD)
    + """

def run(a, b, out):
    n = a.numel()
    _swiglu[(triton.cdiv(n, 128),)](a, b, out, n, BLOCK=128)
"""
)
TRITON_DPS_HALF = (
    _KERNEL_HEAD.format(expr=_GOOD)
    + """

def run(a, b, out):
    n = a.numel()
    # Launches half the programs: the second half of `out` is never written.
    _swiglu[(triton.cdiv(n, 64) // 2,)](a, b, out, n, BLOCK=64)
"""
)
TRITON_WRONG_MATH = TRITON_RETURNING.replace(_GOOD, "a * b")
TRITON_UNKNOWN_TL = TRITON_RETURNING.replace("tl.sigmoid(a)", "tl.sigmoidd(a)")
TRITON_SYNTAX_ERROR = TRITON_RETURNING.replace("def run(a, b):", "def run(a, b:")

PY_TORCH = """
import torch


def run(a, b):
    return torch.nn.functional.silu(a) * b
"""
PY_RAISES = PY_TORCH.replace(
    "    return", "    raise RuntimeError('kaboom: candidate gave up')\n    return"
)
PY_SLEEPS = PY_TORCH.replace("    return", "    import time\n    time.sleep(60)\n    return")
PY_FLOAT64 = PY_TORCH.replace("* b\n", "* b).double()\n").replace("return torch", "return (torch")
PY_WRONG_SHAPE = PY_TORCH.replace("* b\n", "* b)[:, :128]\n").replace(
    "return torch", "return (torch"
)
PY_NO_SECRETS = PY_TORCH.replace("    return", textwrap.indent(textwrap.dedent("""
    import os
    seen = [k for k, v in os.environ.items() if v in ("sekrit", "ghp_x")]
    seen += [k for k in ("KERNELPRO_LLM_API_KEY", "GITHUB_TOKEN") if k in os.environ]
    if seen:
        raise RuntimeError(f"secrets visible: {seen}")
"""), "    ") + "    return")
PY_DUMPS_ENV = PY_TORCH.replace(
    "    return",
    "    import os\n    raise RuntimeError('ENV=' + repr(sorted(os.environ.items())))\n    return",
)

INT_TRITON = """
import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, z_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    z = tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask)
    tl.store(z_ptr + offs, {expr}, mask=mask)


def run(x, y, z):
    n = x.numel()
    _add[(triton.cdiv(n, 128),)](x, y, z, n, BLOCK=128)
"""
INT_EXACT = INT_TRITON.format(expr="z")
INT_OFF_BY_ONE = INT_TRITON.format(expr="tl.where(offs == 77, z + 1, z)")  # one element of 128

# --------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True)
def _cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    # Interpreter on the CPU everywhere (also on a GPU machine), and no torch import in the parent.
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")


@pytest.fixture
def fib_trace(request: pytest.FixtureRequest) -> Any:
    """flashinfer-bench's ``Trace`` model, or None when flashinfer-bench 0.1.2 is not installed."""
    try:
        ns: types.SimpleNamespace = request.getfixturevalue("fib")
    except pytest.skip.Exception:
        return None
    return ns.Trace


@pytest.fixture
def defs(tmp_path: Path) -> types.SimpleNamespace:
    d = tmp_path / "defs"
    d.mkdir()
    (d / "swiglu.json").write_text(json.dumps(DEFINITION, indent=2))
    (d / "add_i32.json").write_text(json.dumps(INT_DEFINITION, indent=2))
    (d / "workloads.jsonl").write_text("".join(json.dumps(w) + "\n" for w in WORKLOADS))
    return types.SimpleNamespace(swiglu=d / "swiglu.json", add_i32=d / "add_i32.json",
                                 workloads=d / "workloads.jsonl", out=tmp_path / "traces.jsonl")


def solution(tmp_path: Path, name: str, source: str, *, language: str = "triton", dps: bool = False,
             definition: str = DEF_NAME, entry: str = "kernels/cand.py::run",
             path: str = "kernels/cand.py") -> Path:
    doc = {
        "name": name,
        "definition": definition,
        "author": "tests",
        "spec": {
            "language": language,
            "target_hardware": ["cpu", "cuda"],
            "entry_point": entry,
            "dependencies": ["torch"] + (["triton"] if language == "triton" else []),
            "destination_passing_style": dps,
        },
        "sources": [{"path": path, "content": source}],
    }
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(doc, indent=2))
    return p


def evaluate(defs: types.SimpleNamespace, sol: Path, fib_trace: Any, *extra: str,
             definition: Path | None = None, workloads: Path | None | bool = True,
             trials: int = 2) -> tuple[int, list[dict[str, Any]]]:
    """Run `kernelpro evaluate`; return its exit code and the trace lines it appended."""
    before = defs.out.read_text().splitlines() if defs.out.exists() else []
    argv = ["evaluate", "--definition", str(definition or defs.swiglu), "--solution", str(sol),
            "--out", str(defs.out), "--trials", str(trials), *extra]
    if workloads is True:
        workloads = defs.workloads
    if workloads:
        argv += ["--workloads", str(workloads)]
    rc = main(argv)
    after = defs.out.read_text().splitlines() if defs.out.exists() else []
    assert after[: len(before)] == before, "evaluate must append, never rewrite"
    new = after[len(before) :]
    for line in new:
        if fib_trace is not None:
            theirs = fib_trace.model_validate_json(line)  # how flashinfer-bench reads JSONL
            assert theirs.evaluation is not None and theirs.solution == json.loads(line)["solution"]
    return rc, [json.loads(line) for line in new]


def statuses(lines: list[dict[str, Any]]) -> list[str]:
    return [t["evaluation"]["status"] for t in lines]


def assert_passed(
    lines: list[dict[str, Any]], uuids: list[str] = UUIDS, max_abs: float = 1e-5
) -> None:
    assert [t["workload"]["uuid"] for t in lines] == uuids
    for t in lines:
        ev = t["evaluation"]
        assert ev["status"] == "PASSED", ev["log"]
        assert t["definition"] in (DEF_NAME, INT_DEF_NAME)
        assert ev["performance"]["latency_ms"] > 0
        assert ev["performance"]["reference_latency_ms"] > 0
        assert ev["correctness"]["max_absolute_error"] <= max_abs
        assert ev["correctness"]["max_relative_error"] <= 1e-3
        assert ev["correctness"]["extra"]["trials"] == 2
        assert ev["environment"]["hardware"] == "cpu_triton_interpreter"
        assert "torch" in ev["environment"]["libs"]


# --------------------------------------------------------------------------- passing candidates


def test_triton_value_returning_passes(tmp_path: Path, defs: Any, fib_trace: Any,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = evaluate(defs, solution(tmp_path, "tri-ret", TRITON_RETURNING), fib_trace)
    assert rc == 0
    assert_passed(lines)
    assert all(t["solution"] == "tri-ret" for t in lines)
    out = capsys.readouterr().out
    assert "wl-m1: PASSED" in out and "wl-m3: PASSED" in out


def test_triton_destination_passing_passes(tmp_path: Path, defs: Any, fib_trace: Any) -> None:
    rc, lines = evaluate(defs, solution(tmp_path, "tri-dps", TRITON_DPS, dps=True), fib_trace)
    assert rc == 0
    assert_passed(lines)


def test_plain_python_torch_passes(tmp_path: Path, defs: Any, fib_trace: Any) -> None:
    rc, lines = evaluate(
        defs, solution(tmp_path, "py-torch", PY_TORCH, language="python"), fib_trace
    )
    assert rc == 0
    assert_passed(lines, max_abs=0.0)  # the same torch ops as the reference


def test_definition_without_var_axes_needs_no_workloads_and_ints_are_exact(
        tmp_path: Path, defs: Any, fib_trace: Any) -> None:
    good = solution(tmp_path, "int-exact", INT_EXACT, dps=True, definition=INT_DEF_NAME)
    rc, lines = evaluate(defs, good, fib_trace, definition=defs.add_i32, workloads=None)
    assert rc == 0 and len(lines) == 1
    assert lines[0]["definition"] == INT_DEF_NAME and lines[0]["workload"]["axes"] == {}
    assert_passed(lines, uuids=[lines[0]["workload"]["uuid"]], max_abs=0.0)


# --------------------------------------------------------------------------- failing candidates


def test_wrong_math_is_incorrect_numerical(tmp_path: Path, defs: Any, fib_trace: Any,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = evaluate(defs, solution(tmp_path, "wrong-math", TRITON_WRONG_MATH), fib_trace)
    assert rc == 0  # a failing candidate is a result, not a failing command
    assert statuses(lines) == ["INCORRECT_NUMERICAL"] * 2
    first = lines[0]["evaluation"]
    assert "performance" not in first
    assert 0.01 < first["correctness"]["max_absolute_error"] < 100
    extra = first["correctness"]["extra"]
    assert extra["output"] == "out" and extra["mismatches"] > 0 and extra["trial"] == 0
    assert "INCORRECT_NUMERICAL" in capsys.readouterr().out


def test_half_written_output_fails_on_nan_poison(tmp_path: Path, defs: Any, fib_trace: Any) -> None:
    rc, lines = evaluate(defs, solution(tmp_path, "half", TRITON_DPS_HALF, dps=True), fib_trace)
    assert rc == 0
    assert statuses(lines)[0] == "INCORRECT_NUMERICAL"
    corr = lines[0]["evaluation"]["correctness"]
    assert corr["max_absolute_error"] == "Infinity"  # NaN where nothing was written
    assert corr["extra"]["mismatches"] == 128  # exactly the unwritten half of [1, 256]


@pytest.mark.parametrize(
    ("name", "source"),
    [("syntax", TRITON_SYNTAX_ERROR), ("unknown-tl", TRITON_UNKNOWN_TL)],
    ids=["syntax_error", "tl.sigmoidd"],
)
def test_compile_errors(tmp_path: Path, defs: Any, fib_trace: Any, name: str, source: str) -> None:
    rc, lines = evaluate(defs, solution(tmp_path, name, source), fib_trace, trials=1)
    assert rc == 0
    assert statuses(lines) == ["COMPILE_ERROR"] * 2
    log = lines[0]["evaluation"]["log"]
    assert ("SyntaxError" in log) if name == "syntax" else ("sigmoidd" in log)
    assert all(
        "correctness" not in t["evaluation"] and "performance" not in t["evaluation"] for t in lines
    )


def test_runtime_error_keeps_the_message(tmp_path: Path, defs: Any, fib_trace: Any,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    rc, lines = evaluate(
        defs, solution(tmp_path, "raises", PY_RAISES, language="python"), fib_trace
    )
    assert rc == 0
    assert statuses(lines) == ["RUNTIME_ERROR"] * 2
    assert "RuntimeError: kaboom: candidate gave up" in lines[0]["evaluation"]["log"]
    # A workload never reached says which one failed first, not that one's traceback.
    assert lines[1]["evaluation"]["log"] == "not run: workload wl-m1 failed first (RUNTIME_ERROR)"
    assert "kaboom" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "source", "status"),
    [("f64", PY_FLOAT64, "INCORRECT_DTYPE"), ("shape", PY_WRONG_SHAPE, "INCORRECT_SHAPE")],
    ids=["float64", "half_the_columns"],
)
def test_wrong_dtype_and_shape(tmp_path: Path, defs: Any, fib_trace: Any, name: str, source: str,
                               status: str) -> None:
    rc, lines = evaluate(
        defs, solution(tmp_path, name, source, language="python"), fib_trace, trials=1
    )
    assert rc == 0
    assert statuses(lines) == [status] * 2
    log = json.loads(lines[0]["evaluation"]["log"])
    assert log["output"] == "out"
    assert (log["got"], log["want"]) == (
        ("torch.float64", "float32") if name == "f64" else ([1, 128], [1, 256])
    )


def test_integer_off_by_one_in_one_element_fails(tmp_path: Path, defs: Any, fib_trace: Any) -> None:
    bad = solution(tmp_path, "int-off1", INT_OFF_BY_ONE, dps=True, definition=INT_DEF_NAME)
    rc, lines = evaluate(defs, bad, fib_trace, definition=defs.add_i32, workloads=None, trials=1)
    assert rc == 0
    assert statuses(lines) == ["INCORRECT_NUMERICAL"]
    corr = lines[0]["evaluation"]["correctness"]
    assert corr["max_absolute_error"] == 1.0 and corr["extra"]["mismatches"] == 1


def test_timeout_kills_a_sleeping_candidate(tmp_path: Path, defs: Any, fib_trace: Any) -> None:
    t0 = time.monotonic()
    rc, lines = evaluate(defs, solution(tmp_path, "sleeps", PY_SLEEPS, language="python"), fib_trace,
                         "--timeout", "8", trials=1)
    assert time.monotonic() - t0 < 30
    assert rc == 0
    assert statuses(lines) == ["TIMEOUT"] * 2
    assert "killed after 8 s" in lines[0]["evaluation"]["log"]


# --------------------------------------------------------------------------- sandbox


def test_candidate_sees_no_secrets(tmp_path: Path, defs: Any, fib_trace: Any,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELPRO_LLM_API_KEY", "sekrit")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_x")
    monkeypatch.setenv("SOME_OTHER_SECRET", "ghp_x")
    rc, lines = evaluate(
        defs, solution(tmp_path, "no-secrets", PY_NO_SECRETS, language="python"), fib_trace
    )
    assert rc == 0
    assert_passed(lines, max_abs=0.0)

    rc, lines = evaluate(defs, solution(tmp_path, "dump-env", PY_DUMPS_ENV, language="python"), fib_trace,
                         trials=1)
    assert rc == 0 and statuses(lines)[0] == "RUNTIME_ERROR"
    log = lines[0]["evaluation"]["log"]
    assert "ENV=[" in log and "'HOME'" in log  # the candidate's environment did reach the log
    for leaked in ("KERNELPRO_LLM_API_KEY", "GITHUB_TOKEN", "SOME_OTHER_SECRET", "sekrit", "ghp_x"):
        assert leaked not in log
    assert "'TRITON_INTERPRET', '1'" in log


# --------------------------------------------------------------------------- the loop goes on


def test_good_candidate_after_failing_ones_still_passes(
    tmp_path: Path, defs: Any, fib_trace: Any
) -> None:
    rc, bad = evaluate(
        defs, solution(tmp_path, "bad", PY_RAISES, language="python"), fib_trace, trials=1
    )
    assert rc == 0 and statuses(bad) == ["RUNTIME_ERROR"] * 2
    rc, good = evaluate(defs, solution(tmp_path, "good", TRITON_DPS, dps=True), fib_trace)
    assert rc == 0
    assert_passed(good)
    all_lines = [json.loads(s) for s in defs.out.read_text().splitlines()]
    assert [t["solution"] for t in all_lines] == ["bad", "bad", "good", "good"]


def test_trace_lines_are_strict_json_even_with_nan_outputs(
    tmp_path: Path, defs: Any, fib_trace: Any
) -> None:
    evaluate(defs, solution(tmp_path, "half", TRITON_DPS_HALF, dps=True), fib_trace, trials=1)

    def refuse(token: str) -> Any:
        raise ValueError(f"bare {token} is not JSON")

    for line in defs.out.read_text().splitlines():
        json.loads(line, parse_constant=refuse)


def test_other_definition_is_a_compile_error_without_running(
    tmp_path: Path, defs: Any, fib_trace: Any
) -> None:
    sol = solution(tmp_path, "elsewhere", PY_TORCH, language="python", definition="not_this_one")
    rc, lines = evaluate(defs, sol, fib_trace)
    assert rc == 0
    assert statuses(lines) == ["COMPILE_ERROR"] * 2
    assert "not_this_one" in lines[0]["evaluation"]["log"]


# --------------------------------------------------------------------------- broken invocations


def _broken(defs: Any, capsys: pytest.CaptureFixture[str], sol: Path, **kw: Any) -> str:
    capsys.readouterr()
    rc, lines = evaluate(defs, sol, None, **kw)
    err = capsys.readouterr().err
    assert rc != 0, err
    assert lines == [] and not defs.out.exists()
    assert err.startswith("kernelpro: error: ")
    return err


def test_missing_solution_file(
    tmp_path: Path, defs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _broken(defs, capsys, tmp_path / "nope.json")
    assert "nope.json" in err and "file not found" in err


def test_invalid_json_names_the_line(
    tmp_path: Path, defs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "name": "x",\n  "definition": oops\n}\n')
    err = _broken(defs, capsys, bad)
    assert "bad.json:3:" in err and "not valid JSON" in err


def test_var_axes_without_workloads(
    tmp_path: Path, defs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _broken(
        defs, capsys, solution(tmp_path, "ok", PY_TORCH, language="python"), workloads=None
    )
    assert "variable axes" in err and "'M'" in err and "--workloads" in err


def test_entry_file_not_among_sources(
    tmp_path: Path, defs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    sol = solution(tmp_path, "lost", PY_TORCH, language="python", entry="kernels/other.py::run")
    err = _broken(defs, capsys, sol)
    assert "kernels/other.py" in err and "not among its sources" in err


def test_missing_required_option_is_a_usage_error(
    defs: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as e:
        main(["evaluate", "--definition", str(defs.swiglu)])
    assert e.value.code == 2
    assert "--solution" in capsys.readouterr().err


def test_cli_reports_the_sandbox_and_takes_a_float64_reference(
        tmp_path: Path, defs: Any, fib_trace: Any, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    rc, lines = evaluate(defs, solution(tmp_path, "py-f64", PY_TORCH, language="python"), fib_trace,
                         "--float64-reference")
    assert rc == 0
    assert_passed(lines, max_abs=0.0)
    assert all("float64_ratio" in t["evaluation"]["correctness"]["extra"] for t in lines)
    err = capsys.readouterr().err
    assert "sandbox network: " in err and "sandbox memory: RLIMIT_DATA" in err


def test_driver_version_is_read_from_the_kernel_module(tmp_path: Path) -> None:
    from kernelpro.runner.harness import _driver_version

    f = tmp_path / "version"
    f.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Sat Sep 13 2025\n"
                 "GCC version:  gcc version 12.2.0\n")
    assert _driver_version(f) == "580.159.04"
    assert _driver_version(tmp_path / "absent") is None
