"""The tuner's search on the public corpus, against an exhaustive sweep of the same space (issue 5).

    python benchmarks/corpus.py [--out DIR] [--kernels NAME,...] [--budget 30] [--candidates 4]
                                [--reps 30] [--profile] [--e2e NAME,...] [--e2e-budget 16]
                                [--e2e-minutes 5] [--no-sweep] [--device cuda|cpu] [--tiny]

For each Triton kernel of the public corpus (../shared/corpus.md) the script builds two "pull
requests": a thin wrapper that launches the upstream @triton.jit function with a poor launch
configuration (the degraded PR), and, where upstream fixes one, the same wrapper with upstream's own
configuration. The tuner's transformation space for the kernel is the product of the knob values in
``Kernel.space`` (the knobs the tuner finds in the wrapper: block sizes, num_warps, num_stages).

1. **Sweep** (measured): every point of the space is run once in this process on the GPU: the first
   call (JIT compile included) is timed, the output is checked against the Definition's reference
   (dtype-default tolerance), and the kernel is timed with CUDA events over ``--reps`` calls with L2
   flushed before each (cold L2, like triton.testing.do_bench). The upstream wrapper as shipped is
   timed the same way.
2. **triton.autotune** over the same configurations: the pick and the wall time of the autotuned
   first call. The sweep ran first, so compiles are cached; the table also gives the cold estimate
   (autotune seconds + the sweep's first-call seconds over the space).
3. **Replay** (landscape measured, policy real): runner/search's mcts and greedy, with the REAL tuner
   programmer proposing moves from the PR (findings from one real profile of the degraded baseline
   with ``--profile``), against an oracle evaluate() that looks the proposed configuration up in the
   sweep. Proposals outside the swept space (for instance num_stages on a kernel without a loop,
   which the sweep does not vary) are skipped, not evaluated. Reported: the best found within
   ``--budget`` evaluations (the PR's kernel counts as one, as in kernelpro), its % of the sweep's
   best, evaluations to reach 95 % of it, and the GPU seconds those evaluations cost in the sweep.
4. **End to end** (``--e2e``): one real ``kernelpro optimize`` run (tuner, mcts) on a two-commit git
   repository holding the degraded PR, so the replay can be checked against the real loop (sandboxed
   evaluations, profiling, the final gate).

Markdown tables go to stdout, JSON to DIR/corpus.json. ``--device cpu --tiny`` runs the whole
pipeline on a local two-configuration kernel in Triton's interpreter (what the CPU tests run).
On the GPU machine the corpus wheels are installed as in ``.ci/gpu --corpus``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import string
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from corpus_profile import CASES, Case  # noqa: E402

LAUNCHER = "launcher.py"
T0 = time.perf_counter()


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} +{time.perf_counter() - T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Kernel:
    """One corpus kernel made into pull requests, with the tuner's space for it."""

    name: str
    """Row label, target name and --kernels key."""
    case: Case
    """Definition, reference, flops and bytes (shared with corpus_profile.py)."""
    launcher: str
    """string.Template of the PR's wrapper `run(...)`; one $placeholder per knob of the space."""
    autotuned: str
    """The same wrapper with the kernel under triton.autotune; $configs is the list of triton.Config."""
    space: tuple[tuple[str, tuple[int, ...]], ...]
    """Knob short name (as the tuner names it after 'run:') -> the values swept."""
    pr: Mapping[str, int]
    """The degraded configuration of the PR."""
    upstream: Mapping[str, int] | None = None
    """Upstream's own configuration of this kernel function, when it fixes one (not autotuned)."""
    meta_keys: tuple[str, ...] = ()
    """Knobs that are constexpr meta-parameters (in triton.Config's dict) rather than launch options."""
    defaults: Mapping[str, int] = field(default_factory=lambda: {"num_stages": 3})
    """Values of knobs outside the space, as the wrapper launches them."""

    def source(self, point: Mapping[str, int]) -> str:
        return string.Template(self.launcher).substitute({k: str(v) for k, v in point.items()})

    def points(self) -> list[dict[str, int]]:
        out: list[dict[str, int]] = [{}]
        for name, values in self.space:
            out = [{**p, name: v} for p in out for v in values]
        return out

    def key(self, point: Mapping[str, int]) -> str:
        return ",".join(f"{k}={point[k]}" for k, _ in self.space)

    def configs_code(self) -> str:
        configs = []
        for p in self.points():
            meta = ", ".join(f"{k!r}: {p[k]}" for k in self.meta_keys)
            opts = "".join(f", {k}={v}" for k, v in p.items() if k not in self.meta_keys)
            configs.append(f"triton.Config({{{meta}}}{opts})")
        return "[" + ", ".join(configs) + "]"


def _case(name: str) -> Case:
    return next(c for c in CASES if c.name == name)


WARPS = (1, 2, 4, 8, 16, 32)

KERNELS = [
    Kernel(
        "liger_swiglu", _case("liger swiglu"),
        '''import torch
import triton
from liger_kernel.ops.swiglu import _swiglu_forward_kernel_tiled as KERNEL


def run(a, b):
    n_cols = a.shape[-1]
    a2, b2 = a.view(-1, n_cols), b.view(-1, n_cols)
    c = torch.empty_like(a2)
    BLOCK_SIZE = $BLOCK_SIZE
    grid = (a2.shape[0], triton.cdiv(n_cols, BLOCK_SIZE))
    KERNEL[grid](a2, b2, c, c.stride(-2), 1.0, n_cols, BLOCK_SIZE=BLOCK_SIZE, num_warps=$num_warps)
    return c.view(a.shape)
''',
        '''import torch
import triton
from liger_kernel.ops.swiglu import _swiglu_forward_kernel_tiled

KERNEL = triton.autotune(configs=$configs, key=["n_cols"])(_swiglu_forward_kernel_tiled)


def run(a, b):
    n_cols = a.shape[-1]
    a2, b2 = a.view(-1, n_cols), b.view(-1, n_cols)
    c = torch.empty_like(a2)
    grid = lambda meta: (a2.shape[0], triton.cdiv(n_cols, meta["BLOCK_SIZE"]))  # noqa: E731
    KERNEL[grid](a2, b2, c, c.stride(-2), 1.0, n_cols)
    return c.view(a.shape)
''',
        (("BLOCK_SIZE", (256, 512, 1024, 2048, 4096, 8192, 16384)), ("num_warps", WARPS)),
        {"BLOCK_SIZE": 256, "num_warps": 32}, {"BLOCK_SIZE": 1024, "num_warps": 4}, ("BLOCK_SIZE",),
    ),
    Kernel(
        "liger_softmax", _case("liger softmax"),
        # The single-block kernel: what upstream launches for rows up to 65536 wide. The multi-block
        # one does not compile under the device's Triton 3.6 (`tl.float32(-float("inf"))`: a dtype
        # is not callable there; H200, benchmarks/results-h200-session5/corpus-b.json), in any of 96
        # configurations. The block must hold the whole row, so the space starts at the row width.
        '''import torch
from liger_kernel.ops.softmax import _softmax_single_block_forward_kernel as KERNEL


def run(x):
    n_cols = x.shape[-1]
    x2 = x.contiguous().view(-1, n_cols)
    y = torch.empty_like(x2)
    BLOCK_SIZE = $BLOCK_SIZE
    KERNEL[(x2.shape[0],)](y, y.stride(0), x2, x2.stride(0), n_cols, BLOCK_SIZE=BLOCK_SIZE, num_warps=$num_warps)
    return y.view(x.shape)
''',
        '''import torch
import triton
from liger_kernel.ops.softmax import _softmax_single_block_forward_kernel

KERNEL = triton.autotune(configs=$configs, key=["n_cols"])(_softmax_single_block_forward_kernel)


def run(x):
    n_cols = x.shape[-1]
    x2 = x.contiguous().view(-1, n_cols)
    y = torch.empty_like(x2)
    KERNEL[(x2.shape[0],)](y, y.stride(0), x2, x2.stride(0), n_cols)
    return y.view(x.shape)
''',
        # One warp over a 32768 block would hold 1024 values a thread; 512 (16384 over one warp) is the
        # most any corpus sweep has compiled on the H200 (liger_swiglu), so the warps start at 2.
        (("BLOCK_SIZE", (8192, 16384, 32768)), ("num_warps", WARPS[1:])),
        # upstream: liger_kernel.ops.utils.calculate_settings(8192) = (8192, 16)
        {"BLOCK_SIZE": 32768, "num_warps": 2}, {"BLOCK_SIZE": 8192, "num_warps": 16}, ("BLOCK_SIZE",),
    ),
    Kernel(
        "liger_dyt", _case("liger dyt"),
        '''import torch
import triton
from liger_kernel.ops.dyt import _dyt_fwd_kernel as _AUTOTUNED

KERNEL = _AUTOTUNED.fn  # the bare @triton.jit function under upstream's autotuner


def run(x, alpha, gamma, beta):
    M, N = x.shape
    y = torch.empty_like(x)
    BLOCK_N = $BLOCK_N
    grid = (triton.cdiv(N, BLOCK_N), M)
    KERNEL[grid](x, y, alpha, gamma, beta, True, N, BLOCK_N=BLOCK_N, num_warps=$num_warps)
    return y
''',
        '''import torch
import triton
from liger_kernel.ops.dyt import _dyt_fwd_kernel as _AUTOTUNED

KERNEL = triton.autotune(configs=$configs, key=["N"])(_AUTOTUNED.fn)


def run(x, alpha, gamma, beta):
    M, N = x.shape
    y = torch.empty_like(x)
    grid = lambda meta: (triton.cdiv(N, meta["BLOCK_N"]), M)  # noqa: E731
    KERNEL[grid](x, y, alpha, gamma, beta, True, N)
    return y
''',
        (("BLOCK_N", (256, 512, 1024, 2048, 4096, 8192)), ("num_warps", WARPS)),
        {"BLOCK_N": 256, "num_warps": 16}, None, ("BLOCK_N",),
    ),
    Kernel(
        "liger_rms_norm", _case("liger rms_norm"),
        '''import torch
import triton
from liger_kernel.ops.rms_norm import _rms_norm_forward_kernel as KERNEL


def run(x, w):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)  # one block per row: not a tuning knob
    KERNEL[(n_rows,)](y, y.stride(0), x, x.stride(0), w, w.stride(0), rstd, rstd.stride(0), n_cols, 1e-6, 0.0, 0,
                      elementwise_affine=True, BLOCK_SIZE=BLOCK_SIZE, num_warps=$num_warps)
    return y
''',
        '''import torch
import triton
from liger_kernel.ops.rms_norm import _rms_norm_forward_kernel

KERNEL = triton.autotune(configs=$configs, key=["n_cols"])(_rms_norm_forward_kernel)


def run(x, w):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    KERNEL[(n_rows,)](y, y.stride(0), x, x.stride(0), w, w.stride(0), rstd, rstd.stride(0), n_cols, 1e-6, 0.0, 0,
                      elementwise_affine=True, BLOCK_SIZE=BLOCK_SIZE)
    return y
''',
        (("num_warps", WARPS),), {"num_warps": 2}, {"num_warps": 16},
        # The tuner scales the computed BLOCK_SIZE too (kernelpro/knobs.py); one block per row, so
        # the sweep leaves it at upstream's rule and the replay skips such moves.
        defaults={"num_stages": 3, "BLOCK_SIZE.scale": 0},
    ),
    Kernel(
        "fla_softmax", _case("fla softmax"),
        '''import torch
import triton
from fla.ops.utils.softmax import softmax_fwd_kernel as _AUTOTUNED

KERNEL = _AUTOTUNED.fn  # the bare @triton.jit function under upstream's autotuner


def run(x):
    N, D = x.shape
    p = torch.empty_like(x, dtype=torch.float)
    KERNEL[(N,)](x, p, D, triton.next_power_of_2(D), num_warps=$num_warps)
    return p
''',
        '''import torch
import triton
from fla.ops.utils.softmax import softmax_fwd_kernel as _AUTOTUNED

KERNEL = triton.autotune(configs=$configs, key=["D"])(_AUTOTUNED.fn)


def run(x):
    N, D = x.shape
    p = torch.empty_like(x, dtype=torch.float)
    KERNEL[(N,)](x, p, D, triton.next_power_of_2(D))
    return p
''',
        (("num_warps", WARPS),), {"num_warps": 1},
    ),
    Kernel(
        "flashinfer_silu_and_mul", _case("flashinfer silu_and_mul"),
        # corpus.md's "tuning headroom" case: upstream launches it with a fixed BLOCK_SIZE=1024 and
        # Triton's default 4 warps.
        '''import torch
import triton
from flashinfer.triton.kernels.activation import silu_and_mul_kernel as KERNEL


def run(x):
    b, n = x.shape
    d = n // 2
    o = torch.empty((b, d), dtype=x.dtype, device=x.device)
    BLOCK_SIZE = $BLOCK_SIZE
    KERNEL[(b, triton.cdiv(d, BLOCK_SIZE))](o, o.stride(0), None, x, x.stride(0), None, d, BLOCK_SIZE=BLOCK_SIZE,
                                            HAS_X_SCALE=False, HAS_O_SCALE=False, num_warps=$num_warps)
    return o
''',
        '''import torch
import triton
from flashinfer.triton.kernels.activation import silu_and_mul_kernel

KERNEL = triton.autotune(configs=$configs, key=["d"])(silu_and_mul_kernel)


def run(x):
    b, n = x.shape
    d = n // 2
    o = torch.empty((b, d), dtype=x.dtype, device=x.device)
    grid = lambda meta: (b, triton.cdiv(d, meta["BLOCK_SIZE"]))  # noqa: E731
    KERNEL[grid](o, o.stride(0), None, x, x.stride(0), None, d, HAS_X_SCALE=False, HAS_O_SCALE=False)
    return o
''',
        (("BLOCK_SIZE", (256, 512, 1024, 2048, 4096, 8192, 16384)), ("num_warps", WARPS)),
        {"BLOCK_SIZE": 256, "num_warps": 32}, {"BLOCK_SIZE": 1024, "num_warps": 4}, ("BLOCK_SIZE",),
    ),
    Kernel(
        "flashinfer_rms_norm", _case("flashinfer rms_norm"),
        # Two passes over the row in BLOCK_SIZE chunks; upstream's wrapper takes the whole row
        # (next_power_of_2(n)) with max(8, min(32, block // 256)) warps: 8192 and 32 here.
        '''import torch
from flashinfer.triton.kernels.norm import rms_norm_kernel as KERNEL


def run(x, w):
    b, n = x.shape
    y = torch.empty_like(x)
    KERNEL[(b,)](n=n, b=b, x_ptr=x, x_stride=x.stride(0), x_scale_ptr=None, r_ptr=None, r_stride=0, w_ptr=w,
                 o_ptr=y, o_stride=y.stride(0), o_scale_ptr=None, EPS=1e-6, BLOCK_SIZE=$BLOCK_SIZE,
                 HAS_IN_SCALE=False, HAS_OUT_SCALE=False, HAS_OUTPUT=True, HAS_RESIDUAL=False, num_warps=$num_warps)
    return y
''',
        '''import torch
import triton
from flashinfer.triton.kernels.norm import rms_norm_kernel

KERNEL = triton.autotune(configs=$configs, key=["n"])(rms_norm_kernel)


def run(x, w):
    b, n = x.shape
    y = torch.empty_like(x)
    KERNEL[(b,)](n=n, b=b, x_ptr=x, x_stride=x.stride(0), x_scale_ptr=None, r_ptr=None, r_stride=0, w_ptr=w,
                 o_ptr=y, o_stride=y.stride(0), o_scale_ptr=None, EPS=1e-6, HAS_IN_SCALE=False,
                 HAS_OUT_SCALE=False, HAS_OUTPUT=True, HAS_RESIDUAL=False)
    return y
''',
        (("BLOCK_SIZE", (256, 512, 1024, 2048, 4096, 8192)), ("num_warps", WARPS)),
        {"BLOCK_SIZE": 256, "num_warps": 32}, {"BLOCK_SIZE": 8192, "num_warps": 32}, ("BLOCK_SIZE",),
    ),
]

# The CPU stand-in: a local kernel, two configurations, small enough for Triton's interpreter.
TINY = Kernel(
    "tiny_scale",
    Case("tiny scale", {"M": 4, "N": 256}, {"x": (("M", "N"), "float32")}, {"y": (("M", "N"), "float32")},
         "import torch\ndef run(x):\n    return x * 2.0 + 1.0\n", "", "2*M*N", "8*M*N"),
    '''import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


def run(x):
    y = torch.empty_like(x)
    n = x.numel()
    BLOCK = $BLOCK
    _scale_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=4)
    return y
''',
    '''import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


KERNEL = triton.autotune(configs=$configs, key=["n"], do_bench=DO_BENCH)(_scale_kernel)


def run(x):
    y = torch.empty_like(x)
    n = x.numel()
    KERNEL[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return y
''',
    (("BLOCK", (16, 32)),), {"BLOCK": 16}, {"BLOCK": 32}, ("BLOCK",), {"num_warps": 4, "num_stages": 3},
)


# --------------------------------------------------------------------------- measuring


@dataclass
class Bench:
    """Inputs, the reference output and a timer for one kernel on one device."""

    device: str
    """'cuda' or 'cpu'."""
    inputs: list[Any]
    """Positional inputs of run(), in the Definition's order."""
    expected: Any
    """The reference's output."""
    tol: tuple[float, float]
    """(atol, rtol) for the output dtype."""
    reps: int
    """Timed calls per point."""
    flush: Any = None
    """A buffer larger than L2, zeroed before each timed call (cold L2)."""

    def sync(self) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()

    def time_ms(self, fn: Callable[[], Any]) -> float:
        import torch

        if self.device != "cuda":
            ts = []
            for _ in range(self.reps):
                t = time.perf_counter()
                fn()
                ts.append((time.perf_counter() - t) * 1e3)
            return statistics.median(ts)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.reps)]
        for s, e in zip(starts, ends, strict=True):
            self.flush.zero_()
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))


def make_bench(case: Case, device: str, reps: int) -> Bench:
    import torch

    from kernelpro.runner.target import DEFAULT_TOLERANCE

    gen = torch.Generator(device="cpu").manual_seed(0)
    inputs = []
    for _name, (axes, dtype) in case.inputs.items():
        shape = [case.axes[a] for a in axes]
        inputs.append(torch.randn(shape, generator=gen, dtype=torch.float32).to(getattr(torch, dtype)).to(device))
    ns: dict[str, Any] = {}
    exec(compile(case.reference, "<reference>", "exec"), ns)  # our own reference text, not a candidate's
    expected = ns["run"](*inputs)
    out_dtype = next(iter(case.outputs.values()))[1]
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device=device) if device == "cuda" else None
    return Bench(device, inputs, expected, DEFAULT_TOLERANCE.get(out_dtype, (0.0, 0.0)), reps, flush)


def load_module(path: Path, name: str, extra: Mapping[str, Any] | None = None) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    for k, v in (extra or {}).items():
        setattr(module, k, v)
    spec.loader.exec_module(module)
    return module


def _status_of(e: BaseException) -> str:
    name = type(e).__name__
    return "COMPILE_ERROR" if "Compil" in name or "OutOfResources" in name else "RUNTIME_ERROR"


def returning(fn: Callable[..., Any], bench: Bench) -> Callable[..., Any]:
    """A destination-passing ``fn(*inputs, out)`` (FlashInfer's rms_norm as shipped) as one that
    returns its output, as ``measure`` calls it; the output is allocated per call, as the PR's wrapper
    allocates its own."""
    import torch

    def call(*inputs: Any) -> Any:
        out = torch.empty_like(bench.expected)
        fn(*inputs, out)
        return out

    return call


def measure(fn: Callable[..., Any], bench: Bench) -> dict[str, Any]:
    """One point: first call (compile included), correctness against the reference, cold-L2 timing."""
    import torch

    t = time.perf_counter()
    try:
        out = fn(*bench.inputs)
        bench.sync()
    except Exception as e:  # a configuration that does not build or launch is a data point, not a crash
        return {"status": _status_of(e), "error": f"{type(e).__name__}: {str(e)[:300]}",
                "first_call_s": round(time.perf_counter() - t, 3)}
    first = time.perf_counter() - t
    atol, rtol = bench.tol
    exp = bench.expected
    if out.shape != exp.shape:
        return {"status": "INCORRECT_SHAPE", "first_call_s": round(first, 3)}
    diff = (out.float() - exp.float()).abs()
    max_abs = float(diff.max()) if diff.numel() else 0.0
    if not torch.allclose(out.float(), exp.float(), atol=atol, rtol=rtol):
        return {"status": "INCORRECT_NUMERICAL", "max_abs": max_abs, "first_call_s": round(first, 3)}
    t = time.perf_counter()
    ms = bench.time_ms(lambda: fn(*bench.inputs))
    return {"status": "PASSED", "ms": ms, "max_abs": max_abs, "first_call_s": round(first, 3),
            "bench_s": round(time.perf_counter() - t, 3)}


def cpu_do_bench(fn: Callable[[], Any], quantiles: Any = None, **_: Any) -> Any:
    """triton.autotune's timer on the CPU (triton.testing.do_bench needs a GPU)."""
    ts = []
    for _i in range(3):
        t = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t) * 1e3)
    ms = statistics.median(ts)
    return [ms, ms, ms] if quantiles else ms


def sweep(kernel: Kernel, bench: Bench, work: Path) -> dict[str, Any]:
    points: dict[str, dict[str, Any]] = {}
    pts = kernel.points()
    say(f"{kernel.name}: sweeping {len(pts)} configurations")
    for i, p in enumerate(pts):
        path = work / f"{kernel.name}_{i}.py"
        path.write_text(kernel.source(p))
        try:
            fn = load_module(path, f"kp_sweep_{kernel.name}_{i}").run
            rec = measure(fn, bench)
        except Exception as e:  # an import failure of the wrapper itself
            rec = {"status": "COMPILE_ERROR", "error": f"{type(e).__name__}: {str(e)[:300]}", "first_call_s": 0.0}
        points[kernel.key(p)] = {"config": p, **rec}
        if (i + 1) % 10 == 0 or i + 1 == len(pts):
            best = min((r["ms"] for r in points.values() if r["status"] == "PASSED"), default=math.nan)
            say(f"{kernel.name}: {i + 1}/{len(pts)} swept, best {best:.4f} ms")
    return points


def autotune(kernel: Kernel, bench: Bench, work: Path) -> dict[str, Any]:
    path = work / f"{kernel.name}_autotune.py"
    path.write_text(string.Template(kernel.autotuned).substitute(configs=kernel.configs_code()))
    extra = {"DO_BENCH": cpu_do_bench if bench.device != "cuda" else None}
    t = time.perf_counter()
    try:
        module = load_module(path, f"kp_autotune_{kernel.name}", extra)
        module.run(*bench.inputs)
        bench.sync()
    except Exception as e:
        return {"status": _status_of(e), "error": f"{type(e).__name__}: {str(e)[:300]}"}
    seconds = time.perf_counter() - t
    cfg = module.KERNEL.best_config
    picked = {**{k: int(cfg.kwargs[k]) for k in kernel.meta_keys},
              **{k: int(getattr(cfg, k)) for k, _ in kernel.space if k not in kernel.meta_keys}}
    return {"status": "PASSED", "seconds": round(seconds, 2), "pick": picked, "pick_key": kernel.key(picked)}


# --------------------------------------------------------------------------- the search, replayed


def _definition(case: Case) -> Any:
    from corpus_profile import _definition as definition

    return definition(case)


def _solution(kernel: Kernel, point: Mapping[str, int]) -> Any:
    from kernelpro.runner.trace import BuildSpec, Solution, SourceFile

    d = _definition(kernel.case)
    return Solution(f"{kernel.name}-pr", d.name, "pr", BuildSpec("triton", ("cuda",), f"{LAUNCHER}::run"),
                    (SourceFile(LAUNCHER, kernel.source(point)),))


def point_of(kernel: Kernel, params: Mapping[str, Any], *, swept_only: bool = False) -> dict[str, int] | None:
    """The swept point a tuner candidate's knob settings name, or None when it leaves the space.
    ``swept_only``: read the swept knobs alone, whatever the others were moved to (the nearest
    swept point of an end-to-end winner that also moved, say, num_stages on a loop-free kernel)."""
    names = dict(kernel.space)
    point: dict[str, int] = {}
    for short, value in _knobs(params):
        if short in names:
            if value not in names[short]:
                return None
            point[short] = value
    if not swept_only and unswept(kernel, params):
        return None
    return point if set(point) == set(names) else None


def unswept(kernel: Kernel, params: Mapping[str, Any]) -> dict[str, int]:
    """The knobs of ``params`` outside the swept space that are not at the wrapper's own values."""
    names = dict(kernel.space)
    return {k: v for k, v in dict(_knobs(params)).items() if k not in names and v != kernel.defaults.get(k, v)}


def _knobs(params: Mapping[str, Any]) -> list[tuple[str, int]]:
    """A tuner candidate's knob settings by short name ("launcher.py::run:BLOCK_SIZE" -> "BLOCK_SIZE")."""
    return [(str(k).rsplit(":", 1)[-1], int(v)) for k, v in params.items()]


def replay(kernel: Kernel, points: Mapping[str, Mapping[str, Any]], start: Mapping[str, int], strategy: str,
           budget: int, n: int, findings: tuple[Any, ...] = ()) -> dict[str, Any]:
    from kernelpro.runner.candidate import Candidate
    from kernelpro.runner.evaluator import Outcome, Timing, WorkloadResult
    from kernelpro.runner.programmers import Context
    from kernelpro.runner.programmers.tuner import Tuner
    from kernelpro.runner.search import Scored, get_strategy
    from kernelpro.runner.target import Target

    d = _definition(kernel.case)
    target = Target(kernel.name, "triton", (LAUNCHER,), f"{LAUNCHER}::run", d, ())
    base_ms = float(points[kernel.key(start)]["ms"])
    trail: list[tuple[str, float | None]] = []  # (point key, ms or None when it failed)

    def scored(cand: Candidate, key: str) -> Scored:
        rec = points[key]
        ok = rec["status"] == "PASSED"
        t = Timing(rec["ms"], rec["ms"], rec["ms"], 0.0, 1) if ok else None
        corr = {"max_abs": rec["max_abs"]} if "max_abs" in rec else None
        res = (WorkloadResult("w", rec["status"], rec.get("error", ""), corr, t),)
        trail.append((key, rec["ms"] if ok else None))
        return Scored(cand, Outcome(cand.key, rec["status"], res, log=rec.get("error", "")),
                      base_ms / rec["ms"] if ok else 0.0)

    root_cand = Candidate(_solution(kernel, start), None, "init", "the pull request")
    root = scored(root_cand, kernel.key(start))
    seen = {root_cand.key}
    tuner = Tuner()
    skipped = [0]

    def propose(parent: Scored, mode: str, k: int) -> list[Candidate]:
        ctx = Context(target, lambda h: h in seen, "cuda", findings=findings)
        inside = []
        for c in tuner.propose(parent, mode, 4096, ctx):
            if point_of(kernel, c.params) is None:
                skipped[0] += 1
            else:
                inside.append(c)
        return inside[:k]

    def evaluate(cand: Candidate) -> Scored | None:
        if len(trail) >= budget:
            return None
        seen.add(cand.key)
        p = point_of(kernel, cand.params)
        assert p is not None
        return scored(cand, kernel.key(p))

    t = time.perf_counter()
    get_strategy(strategy)(root, propose, evaluate, n)
    policy_s = time.perf_counter() - t
    sweep_best = min(r["ms"] for r in points.values() if r["status"] == "PASSED")
    best_ms, best_key, to95, gpu_s, gpu_s95 = math.inf, "", None, 0.0, None
    for i, (key, ms) in enumerate(trail, 1):
        gpu_s += float(points[key].get("first_call_s", 0.0)) + float(points[key].get("bench_s", 0.0))
        if ms is not None and ms < best_ms:
            best_ms, best_key = ms, key
        if to95 is None and sweep_best / best_ms >= 0.95:
            to95, gpu_s95 = i, gpu_s
    return {"strategy": strategy, "evaluations": len(trail), "best_ms": best_ms, "best_config": best_key,
            "speedup": base_ms / best_ms, "pct_of_sweep_best": 100.0 * sweep_best / best_ms,
            "evaluations_to_95pct": to95, "sweep_gpu_s_to_95pct": gpu_s95, "sweep_gpu_s": round(gpu_s, 2),
            "policy_s": round(policy_s, 3), "proposals_outside_space": skipped[0],
            "trail": [k for k, _ in trail]}


# --------------------------------------------------------------------------- end to end


def e2e(kernel: Kernel, work: Path, keep: Path, budget: int, minutes: float, device: str) -> dict[str, Any]:
    """One real `kernelpro optimize` run on a two-commit repository holding the degraded PR; its report,
    result and journal are copied to ``keep``."""
    import git
    import yaml

    from kernelpro.cli import main as kernelpro

    d = _definition(kernel.case)
    first_axis = next(iter(kernel.case.axes))
    dj = d.to_json()
    dj["axes"][first_axis] = {"type": "var"}
    root = work / f"e2e-{kernel.name}"
    repo = git.Repo.init(root / "repo", initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "kernelpro corpus benchmark")
        cw.set_value("user", "email", "bench@kernelpro.invalid")
    top = Path(repo.working_dir)
    (top / "definitions").mkdir()
    (top / "definitions" / f"{kernel.name}.json").write_text(json.dumps(dj, indent=1))
    config = {"version": 1, "targets": [{
        "name": kernel.name, "files": [LAUNCHER], "language": "triton", "entry_point": f"{LAUNCHER}::run",
        "definition": f"definitions/{kernel.name}.json", "workloads": [{first_axis: kernel.case.axes[first_axis]}],
        "budget": {"evaluations": budget, "minutes": minutes, "timeout_s": 120}}]}
    (top / ".kernelpro.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    repo.git.add(A=True)
    repo.index.commit("kernelpro configuration")
    (top / LAUNCHER).write_text(kernel.source(kernel.pr))
    repo.git.add(A=True)
    repo.index.commit("the pull request: a poor launch configuration")
    out = root / "out"
    say(f"{kernel.name}: kernelpro optimize (tuner, mcts, budget {budget}, {minutes:g} min)")
    t = time.perf_counter()
    os.environ["KERNELPRO_DEVICE"] = device
    os.environ.setdefault("KERNELPRO_PROGRESS", "0")
    rc = kernelpro(["optimize", "--repo", str(top), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out),
                    "--search", "mcts", "--programmer", "tuner"])
    wall = time.perf_counter() - t
    res = json.loads((out / kernel.name / "result.json").read_text()) if rc == 0 else {}
    keep.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "result.json", "journal.jsonl", "profiles.jsonl"):
        if (out / kernel.name / name).exists():
            (keep / name).write_text((out / kernel.name / name).read_text())
    profiles = keep / "profiles.jsonl"
    # Seconds of each profile in the order taken: the baseline's first, then each new best's.
    profile_s = [json.loads(x)["seconds"] for x in profiles.read_text().splitlines() if x.strip()] if profiles.exists() else []
    winner = res.get("winner") or {}
    params = winner.get("params", {})
    point = point_of(kernel, params, swept_only=True) if winner else None
    best_search = max((c["best_speedup"] for c in res.get("curve", [])), default=None)
    # Issue 22: seconds per evaluation (each sandboxed child's wall time) and how each child started
    # (forked from the target's warm server, the plain fork server, or a fresh interpreter, and why).
    journal = keep / "journal.jsonl"
    outcomes = [d["outcome"] for x in (journal.read_text().splitlines() if journal.exists() else ())
                if x.strip() and isinstance(d := json.loads(x), dict) and isinstance(d.get("outcome"), dict)]
    eval_s = [float(o["wall_seconds"]) for o in outcomes if o.get("wall_seconds")]
    spawns: dict[str, int] = {}
    for o in outcomes:
        how = str(((o.get("environment") or {}).get("sandbox") or {}).get("spawn", "fresh interpreter"))
        spawns[how] = spawns.get(how, 0) + 1
    return {"rc": rc, "wall_s": round(wall, 1), "evaluations": res.get("evaluations"),
            "eval_s_median": round(statistics.median(eval_s), 2) if eval_s else None,
            "candidates_per_min": round(60 * len(eval_s) / wall, 1) if eval_s and wall else None, "spawn": spawns,
            "stop_reason": res.get("stop_reason"), "best_search_speedup": best_search, "profile_s": profile_s,
            "winner_speedup": winner.get("speedup"), "winner_config": kernel.key(point) if point else None,
            "winner_unswept": unswept(kernel, params), "winner_params": params or None,
            "report": str(keep / "report.md")}


# --------------------------------------------------------------------------- main


def _floor_ms(kernel: Kernel, hardware: str) -> float | None:
    from kernelpro.runner.roofline import analyze_reference, default_ceilings
    from kernelpro.runner.trace import Workload

    d = _definition(kernel.case)
    w = Workload.make(d, {})
    dtypes = [s[1] for s in (*kernel.case.inputs.values(), *kernel.case.outputs.values())]
    a = analyze_reference(d, [w], flops=kernel.case.flops, nbytes=kernel.case.nbytes,
                          ceilings=default_ceilings(hardware, dtypes), measured_ms={w.uuid: 1.0}, profile=None)
    return a.workloads[0].floor_ms if a.workloads else None


def _profile_findings(kernel: Kernel, device: str) -> tuple[tuple[Any, ...], list[str]]:
    """Stage 2 findings of one real profile of the degraded PR (GPU only)."""
    from kernelpro.runner.evaluator import EvalSettings
    from kernelpro.runner.profiler import profile_candidate
    from kernelpro.runner.tools import run_tools
    from kernelpro.runner.trace import Workload

    d = _definition(kernel.case)
    w = Workload.make(d, {})
    prof, secs = profile_candidate(d, _solution(kernel, kernel.pr), [w], EvalSettings(device=device, timeout_s=300))
    analysis = run_tools(prof, "memory")
    say(f"{kernel.name}: profiled the PR in {secs:.0f} s: {[f.tool for f in analysis.findings]}")
    return analysis.findings, [f"{f.severity}:{f.tool}" for f in analysis.findings]


def run_kernel(kernel: Kernel, args: argparse.Namespace, work: Path, hardware: str) -> dict[str, Any]:
    bench = make_bench(kernel.case, args.device, args.reps)
    row: dict[str, Any] = {"kernel": kernel.name, "space": {k: list(v) for k, v in kernel.space},
                           "pr": kernel.key(kernel.pr), "upstream": kernel.key(kernel.upstream) if kernel.upstream else None}
    if kernel.case.wrapper:
        path = work / f"{kernel.name}_upstream.py"
        path.write_text(kernel.case.wrapper)
        try:
            shipped = load_module(path, f"kp_up_{kernel.name}").run
            row["upstream_wrapper"] = measure(returning(shipped, bench) if kernel.case.dps else shipped, bench)
        except Exception as e:
            row["upstream_wrapper"] = {"status": "COMPILE_ERROR", "error": f"{type(e).__name__}: {e}"[:300]}
    points = sweep(kernel, bench, work)
    row["sweep"] = points
    passed = {k: r for k, r in points.items() if r["status"] == "PASSED"}
    if kernel.key(kernel.pr) not in passed:
        row["error"] = f"the degraded PR itself fails: {points[kernel.key(kernel.pr)]}"
        return row
    best_key = min(passed, key=lambda k: passed[k]["ms"])
    row["sweep_best"] = {"config": best_key, "ms": passed[best_key]["ms"]}
    row["sweep_seconds"] = round(sum(r.get("first_call_s", 0) + r.get("bench_s", 0) for r in points.values()), 1)
    row["floor_ms"] = _floor_ms(kernel, hardware) if args.device == "cuda" else None
    say(f"{kernel.name}: autotune over the same {len(points)} configurations")
    row["autotune"] = autotune(kernel, bench, work)
    at = row["autotune"]
    if at.get("status") == "PASSED":
        at["pick_ms"] = points.get(at["pick_key"], {}).get("ms")
        at["cold_estimate_s"] = round(at["seconds"] + sum(r.get("first_call_s", 0) for r in points.values()), 1)
    findings: tuple[Any, ...] = ()
    if args.profile and args.device == "cuda":
        try:
            findings, row["findings"] = _profile_findings(kernel, args.device)
        except Exception as e:  # profiling is optional evidence; the replay runs without it
            row["findings_error"] = f"{type(e).__name__}: {e}"[:300]
    row["searches"] = []
    starts = [("pr", kernel.pr)] + ([("upstream", kernel.upstream)] if kernel.upstream else [])
    for label, start in starts:
        if kernel.key(start) not in passed:
            continue
        for strategy in ("mcts", "greedy"):
            r = replay(kernel, points, start, strategy, args.budget, args.candidates, findings)
            r["start"] = label
            row["searches"].append(r)
            say(f"{kernel.name} from {label}: {strategy} found {r['best_ms']:.4f} ms ({r['pct_of_sweep_best']:.1f} % "
                f"of the sweep best) in {r['evaluations']} evaluations")
    return row


def _fmt(v: Any, spec: str = ".4f") -> str:
    return "n/a" if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def print_tables(rows: Sequence[Mapping[str, Any]], budget: int) -> None:
    print(f"\n### Search within {budget} evaluations vs the exhaustive sweep (landscape measured, policy real)\n")
    print("| kernel | start | baseline ms | search | found ms (config) | speedup | sweep best ms (config) | "
          "% of sweep best | evaluations to 95 % | GPU s to 95 % | % of roofline (found) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "sweep_best" not in row:
            print(f"| {row['kernel']} | | {row.get('error', 'no result')[:80]} | | | | | | | | |")
            continue
        sb = row["sweep_best"]
        for s in row["searches"]:
            base = row["sweep"][row["pr"] if s["start"] == "pr" else row["upstream"]]["ms"]
            roof = 100.0 * row["floor_ms"] / s["best_ms"] if row.get("floor_ms") else None
            print(f"| {row['kernel']} | {s['start']} | {_fmt(base)} | {s['strategy']} | {_fmt(s['best_ms'])} "
                  f"({s['best_config']}) | {_fmt(s['speedup'], '.2f')}x | {_fmt(sb['ms'])} ({sb['config']}) | "
                  f"{_fmt(s['pct_of_sweep_best'], '.1f')} | {s['evaluations_to_95pct'] or 'not reached'} | "
                  f"{_fmt(s['sweep_gpu_s_to_95pct'], '.1f')} | {_fmt(roof, '.0f')} |")
    print("\n### The sweep and triton.autotune over the same space\n")
    print("| kernel | configurations | failing | sweep GPU s | upstream as shipped ms | autotune pick (ms) | "
          "autotune s (cached compiles) | autotune s, cold estimate |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "sweep" not in row:
            continue
        fails = sum(1 for r in row["sweep"].values() if r["status"] != "PASSED")
        up = row.get("upstream_wrapper", {})
        at = row.get("autotune", {})
        pick = f"{at.get('pick_key')} ({_fmt(at.get('pick_ms'))})" if at.get("status") == "PASSED" else at.get("error", "")[:60]
        print(f"| {row['kernel']} | {len(row['sweep'])} | {fails} | {row.get('sweep_seconds')} | "
              f"{_fmt(up.get('ms')) if up.get('status') == 'PASSED' else up.get('status', 'n/a')} | {pick} | "
              f"{at.get('seconds', 'n/a')} | {at.get('cold_estimate_s', 'n/a')} |")
    e2es = [r for r in rows if "e2e" in r]
    if e2es:
        print("\n### End to end: kernelpro optimize (tuner, mcts) on the degraded PR\n")
        print("| kernel | evaluations | wall s | best search speedup | verified winner | winner config | "
              "replay's speedup for that config | stop | profiles s (the baseline's first) |")
        print("|---|---|---|---|---|---|---|---|---|")
        for row in e2es:
            e = row["e2e"]
            predicted = None
            if e.get("winner_config") and row.get("sweep", {}).get(e["winner_config"], {}).get("ms"):
                predicted = row["sweep"][row["pr"]]["ms"] / row["sweep"][e["winner_config"]]["ms"]
            # A knob the sweep held fixed (num_stages on a loop-free kernel) is named: the replay's
            # figure is then that of the nearest swept point, not of the winner itself.
            extra = ", ".join(f"{k}={v}" for k, v in (e.get("winner_unswept") or {}).items())
            config = f"{e.get('winner_config')}" + (f" (and {extra}, not swept)" if extra else "")
            print(f"| {row['kernel']} | {e.get('evaluations')} | {e.get('wall_s')} | "
                  f"{_fmt(e.get('best_search_speedup'), '.2f')} | {_fmt(e.get('winner_speedup'), '.2f')} | "
                  f"{config} | {_fmt(predicted, '.2f')} | {e.get('stop_reason')} | "
                  f"{', '.join(f'{x:g}' for x in e.get('profile_s') or []) or 'none'} |")
        print("\n| kernel | s per evaluation (median) | evaluations per minute | how the children started |")
        print("|---|---|---|---|")
        for row in e2es:
            e = row["e2e"]
            spawns = "; ".join(f"{n}x {how}" for how, n in (e.get("spawn") or {}).items())
            print(f"| {row['kernel']} | {e.get('eval_s_median')} | {e.get('candidates_per_min')} | {spawns} |")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="benchmark-out", help="folder for corpus.json")
    p.add_argument("--kernels", help=f"comma-separated subset of: {', '.join(k.name for k in KERNELS)}")
    p.add_argument("--budget", type=int, default=30, help="evaluations per search, the PR included (default 30)")
    p.add_argument("--candidates", type=int, default=4, help="candidates per expansion (default 4)")
    p.add_argument("--reps", type=int, default=30, help="timed calls per configuration (default 30)")
    p.add_argument("--profile", action="store_true", help="one ncu/SASS/timeline profile of each degraded PR "
                   "(about 40-60 s each on the H200) whose findings steer the tuner")
    p.add_argument("--e2e", default="", help="comma-separated kernels to also run through `kernelpro optimize`")
    p.add_argument("--e2e-budget", type=int, default=16, help="evaluations of the end-to-end run (default 16)")
    p.add_argument("--e2e-minutes", type=float, default=5.0, help="wall-time budget of each end-to-end run")
    p.add_argument("--no-sweep", action="store_true", help="only the end-to-end runs")
    p.add_argument("--sweep-json", help="with --no-sweep: an earlier run's corpus.json, so the end-to-end table "
                   "can compare the winner with the measured sweep")
    p.add_argument("--minutes", type=float, default=8.0, help="start no new kernel (nor end-to-end run) after this "
                   "many minutes, so the tables are printed inside a 10-minute command limit (default 8)")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--tiny", action="store_true", help="the local two-configuration kernel instead of the corpus")
    args = p.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    kernels = [TINY] if args.tiny else KERNELS
    if args.kernels:
        wanted = [x.strip() for x in args.kernels.split(",") if x.strip()]
        unknown = [w for w in wanted if w not in {k.name for k in kernels}]
        if unknown:
            print(f"unknown kernel(s) {', '.join(unknown)}; choose from {', '.join(k.name for k in kernels)}",
                  file=sys.stderr)
            return 2
        kernels = [k for k in kernels if k.name in wanted]
    e2e_names = {x.strip() for x in args.e2e.split(",") if x.strip()}
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda, but torch sees no GPU; use --device cpu --tiny on a machine without one", file=sys.stderr)
        return 2
    hardware = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    earlier: dict[str, dict[str, Any]] = {}
    if args.sweep_json:
        earlier = {r["kernel"]: r for r in json.loads(Path(args.sweep_json).read_text())["rows"]}
    with tempfile.TemporaryDirectory(prefix="kp-corpus-") as tmp:
        work = Path(tmp)
        for kernel in kernels:
            if args.no_sweep and kernel.name not in e2e_names:
                continue
            if time.perf_counter() - T0 > args.minutes * 60:
                say(f"{kernel.name}: skipped, past --minutes {args.minutes:g}")
                rows.append({"kernel": kernel.name, "pr": kernel.key(kernel.pr), "error": "skipped: out of time"})
                continue
            row: dict[str, Any] = earlier.get(kernel.name, {"kernel": kernel.name, "pr": kernel.key(kernel.pr)})
            if not args.no_sweep:
                try:
                    row = run_kernel(kernel, args, work, hardware)
                except Exception as e:  # one kernel's trouble (a missing wheel) does not end the sweep
                    row["error"] = f"{type(e).__name__}: {e}"[:500]
                    say(f"{kernel.name}: {row['error']}")
            if kernel.name in e2e_names:
                try:
                    row["e2e"] = e2e(kernel, work, out / f"e2e-{kernel.name}", args.e2e_budget, args.e2e_minutes,
                                     args.device)
                except Exception as e:
                    row["e2e"] = {"error": f"{type(e).__name__}: {e}"[:500]}
                    say(f"{kernel.name}: end to end failed: {row['e2e']['error']}")
            rows.append(row)
            (out / "corpus.json").write_text(json.dumps({"hardware": hardware, "device": args.device,
                                                         "budget": args.budget, "rows": rows}, indent=1) + "\n")
    (out / "corpus.json").write_text(json.dumps({"hardware": hardware, "device": args.device, "budget": args.budget,
                                                 "rows": rows}, indent=1) + "\n")
    print_tables(rows, args.budget)
    say(f"done; JSON in {out / 'corpus.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
