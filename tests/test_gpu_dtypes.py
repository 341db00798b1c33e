"""GPU tier for issue 19's dtypes and returns (`pytest -m gpu tests/test_gpu_dtypes.py`).

A Triton kernel per output dtype, compiled for the GPU and timed with CUDA events, called through a
Liger-style forward that returns (output, BLOCK_SIZE, num_warps) and configured with `returns: [0]`.
float16 used to fail every candidate (the second poison, -7.25e4, does not fit it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpro.runner.evaluator import EvalSettings, evaluate
from kernelpro.runner.target import Tolerance
from kernelpro.runner.trace import BuildSpec, Definition, Solution, SourceFile, Workload

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (run on the GPU machine)"),
]

KERNEL = """
import torch
import triton
import triton.language as tl


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr, WIDE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    if WIDE:  # float64 in float64: through float32 it would be off by 6e-8, refused at float64's 1e-8
        y = x * 2
    else:  # the narrow kinds (float8 has no arithmetic of its own) through float32
        y = (x.to(tl.float32) * 2).to(y_ptr.dtype.element_ty)
    tl.store(y_ptr + offs, y, mask=mask)


def forward(x):
    y = torch.empty_like(x)
    BLOCK_SIZE, num_warps = 1024, 4
    _double[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, x.numel(), BLOCK_SIZE=BLOCK_SIZE,
                                                 WIDE=x.dtype == torch.float64, num_warps=num_warps)
    return y, BLOCK_SIZE, num_warps
"""


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"])
def test_every_dtype_on_the_gpu(tmp_path: Path, dtype: str) -> None:
    defn = Definition.from_json({
        "name": f"double_{dtype}", "op_type": "elementwise",
        "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 4096}},
        "inputs": {"x": {"shape": ["M", "N"], "dtype": dtype}},
        "outputs": {"y": {"shape": ["M", "N"], "dtype": dtype}},
        "reference": "import torch\n\ndef run(x):\n    return (x.double() * 2).to(x.dtype)\n",
    })
    sol = Solution("fwd", defn.name, "test", BuildSpec("triton", ("cuda",), "k.py::forward",
                                                       destination_passing_style=False, returns=(0,)),
                   (SourceFile("k.py", KERNEL),))
    es = EvalSettings(device="cuda", trials=3, timeout_s=300, cache_dir=tmp_path / "cache")
    outcome = evaluate(defn, sol, [Workload.make(defn, {"M": 1024})], Tolerance(), es)
    assert outcome.passed, outcome.log
    assert outcome.results[0].timing is not None and outcome.results[0].timing.median_ms > 0
