"""The parent-side comparison (runner/comparison.py) on hand-made tensors, and the float64 gate
end to end through the evaluator."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelpro.runner.comparison import FLOAT64_RATIO, compare, rel_l2_bound
from kernelpro.runner.evaluator import EvalSettings, evaluate
from kernelpro.runner.target import Tolerance
from kernelpro.runner.trace import BuildSpec, Definition, Solution, SourceFile, Workload

ATOL = RTOL = 1e-5


def ref(seed: int = 0, n: int = 4096, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)) * scale


def test_exact_copy_passes_with_zero_error() -> None:
    w = ref()
    verdict, stats = compare("out", "float32", w.clone(), w, ATOL, RTOL)
    assert verdict is None and stats["max_abs"] == 0 and stats["rel_l2"] == 0 and stats["mismatches"] == 0


def test_zeros_fail_even_where_every_element_is_within_atol() -> None:
    w = ref(scale=1e-7)  # all |w| << atol: elementwise, zeros would pass
    verdict, stats = compare("out", "float32", torch.zeros_like(w), w, ATOL, RTOL)
    assert stats["mismatches"] == 0
    assert verdict == "INCORRECT_NUMERICAL" and "all zeros" in stats["reason"]


def test_a_systematic_error_below_atol_fails_on_relative_l2() -> None:
    w = ref(scale=1e-6)
    verdict, stats = compare("out", "float32", w * 1.5, w, ATOL, RTOL)
    assert stats["mismatches"] == 0 and stats["rel_l2"] == pytest.approx(0.5, rel=1e-3)
    assert verdict == "INCORRECT_NUMERICAL" and "relative L2" in stats["reason"]
    assert rel_l2_bound(RTOL) < 0.5


def test_nan_and_inf_where_the_reference_is_finite_fail() -> None:
    w = ref()
    for bad in (float("nan"), float("inf")):
        g = w.clone()
        g[17] = bad
        verdict, stats = compare("out", "float32", g, w, ATOL, RTOL)
        assert verdict == "INCORRECT_NUMERICAL" and stats["nonfinite"] == 1 and stats["mismatches"] == 1


def test_nan_in_the_reference_must_be_matched() -> None:
    w = ref()
    w[3] = float("nan")
    assert compare("out", "float32", w.clone(), w, ATOL, RTOL)[0] is None
    g = w.clone()
    g[3] = 0.0
    assert compare("out", "float32", g, w, ATOL, RTOL)[0] == "INCORRECT_NUMERICAL"


def test_layout_shape_dtype_and_type() -> None:
    w = ref(n=64).reshape(8, 8)
    assert compare("out", "float32", w.t().contiguous().t(), w, ATOL, RTOL)[0] == "INCORRECT_SHAPE"
    assert compare("out", "float32", w.reshape(64), w, ATOL, RTOL)[0] == "INCORRECT_SHAPE"
    assert compare("out", "float32", w.double(), w, ATOL, RTOL)[0] == "INCORRECT_DTYPE"
    assert compare("out", "float32", {"not_a_tensor": "Foo"}, w, ATOL, RTOL) == (
        "INCORRECT_SHAPE", {"output": "out", "got_type": "Foo"})


def test_integers_are_exact() -> None:
    w = torch.arange(100, dtype=torch.int32)
    g = w.clone()
    g[5] += 1
    assert compare("z", "int32", w.clone(), w, 0.0, 0.0)[0] is None
    verdict, stats = compare("z", "int32", g, w, 1.0, 1.0)  # tolerances do not apply to integers
    assert verdict == "INCORRECT_NUMERICAL" and stats["mismatches"] == 1


def test_float64_ratio_accepts_rounding_like_the_reference_and_rejects_worse() -> None:
    exact = torch.randn(1 << 14, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    native = exact.float()
    # Rounding of the same size as the reference's own (a TF32-like pipeline): fails 1e-9, passes the ratio.
    close = (exact * (1 + 3e-8 * torch.randn(exact.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64))).float()
    verdict, stats = compare("out", "float32", close, native, 1e-9, 1e-9, exact)
    assert verdict is None and stats["accepted_by"] == "float64 reference ratio" and stats["mismatches"] > 0
    assert stats["float64_ratio"] <= FLOAT64_RATIO
    worse = native + 1e-4
    verdict, stats = compare("out", "float32", worse, native, 1e-9, 1e-9, exact)
    assert verdict == "INCORRECT_NUMERICAL" and stats["float64_ratio"] > FLOAT64_RATIO


GEMM = Definition.from_json({
    "name": "gemm_f32", "op_type": "gemm", "axes": {"M": {"type": "const", "value": 32},
                                                    "K": {"type": "const", "value": 8192}},
    "inputs": {"a": {"shape": ["M", "K"], "dtype": "float32"}, "b": {"shape": ["K", "M"], "dtype": "float32"}},
    "outputs": {"out": {"shape": ["M", "M"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(a, b):\n    return a @ b\n",
})


def _sol(name: str, body: str) -> Solution:
    src = f"import torch\n\n\ndef run(a, b):\n    return {body}\n"
    spec = BuildSpec("python", ("cpu",), "c.py::run", destination_passing_style=False)
    return Solution(name, GEMM.name, "t", spec, (SourceFile("c.py", src),))


def test_float64_reference_end_to_end(tmp_path: Path) -> None:
    """A GEMM accumulated in float64 differs from the float32 reference by more than a tight
    tolerance, but is closer to the float64 truth: accepted by the ratio, and only with it on."""
    w = [Workload.make(GEMM, {})]
    tight = Tolerance(atol=1e-7, rtol=1e-7)
    es = EvalSettings(device="cpu", trials=2, cache_dir=tmp_path, float64_reference=True, memory_limit_mb=2048)
    better = _sol("f64acc", "(a.double() @ b.double()).float()")
    out = evaluate(GEMM, better, w, tight, es)
    assert out.passed, out.log
    c = out.results[0].correctness or {}
    assert c["float64_ratio"] < 1.0  # closer to float64 than the reference itself
    assert c["max_abs"] > 1e-7  # and outside the tight tolerance: only the ratio let it through
    off = evaluate(GEMM, better, w, tight, replace(es, float64_reference=False))
    assert off.status == "INCORRECT_NUMERICAL", off.log
    wrong = evaluate(GEMM, _sol("drift", "(a @ b) * (1 + 1e-4)"), w, tight, es)
    assert wrong.status == "INCORRECT_NUMERICAL"
    assert json.loads(wrong.log)["float64_ratio"] > 10
