"""Stage 1: where a kernel sits on the roofline of this GPU, and what bounds it.

Two independent opinions, as in the paper: the theoretical bound (arithmetic intensity of each
workload against the ridge point of the *measured* ceilings) and ncu's measured throughput (% of
peak compute and memory). When they disagree the theory wins, since it describes the kernel's
ceiling rather than how the current (possibly poor) implementation uses it; both are recorded.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .profile import Profile
from .trace import Definition, Workload

# Ceilings measured on the H200 of the GPU machine (corpus.md, 2026-11-29): device-to-device copy
# 4.25 TB/s counting read + write; bf16 GEMM 678 TFLOP/s through torch at 8192^3. fp32 on CUDA
# cores is the datasheet's 67 TFLOP/s. Used when no measurement of this GPU is at hand.
H200_CEILINGS = {"bandwidth_gbs": 4250.0, "flops_tensor_tflops": 678.0, "flops_fp32_tflops": 67.0}


@dataclass(frozen=True)
class Ceilings:
    """Peak rates this GPU really reaches."""

    gpu: str
    """Device name."""
    bandwidth_gbs: float
    """DRAM bandwidth, GB/s (read + write)."""
    flops_tflops: float
    """Arithmetic peak for the kernel's datatype (tensor cores for 16-bit, CUDA cores for fp32)."""
    source: str
    """'measured' or where the numbers come from."""

    @property
    def ridge(self) -> float:
        """FLOP per byte at which the two roofs meet."""
        return self.flops_tflops * 1e12 / (self.bandwidth_gbs * 1e9)


def default_ceilings(gpu: str, dtypes: Sequence[str]) -> Ceilings:
    tensor = any(d in ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2") for d in dtypes)
    flops = H200_CEILINGS["flops_tensor_tflops"] if tensor else H200_CEILINGS["flops_fp32_tflops"]
    return Ceilings(gpu or "NVIDIA H200", H200_CEILINGS["bandwidth_gbs"], flops, "H200 measurements (corpus.md)")


@dataclass(frozen=True)
class WorkloadBound:
    """The roofline of one workload."""

    uuid: str
    """Workload id."""
    axes: Mapping[str, int]
    """Its axis values."""
    flops: float | None
    """Floating-point operations per call (from the target's formula)."""
    bytes: float | None
    """Bytes that must move per call (from the target's formula)."""
    intensity: float | None
    """flops / bytes."""
    floor_ms: float | None
    """The least time the roofline allows: max(flops / peak, bytes / bandwidth)."""
    measured_ms: float | None
    """The baseline's median."""

    @property
    def pct_of_roofline(self) -> float | None:
        """How close the baseline runs to its floor, in percent."""
        if self.floor_ms is None or not self.measured_ms:
            return None
        return 100.0 * self.floor_ms / self.measured_ms

    @property
    def max_speedup(self) -> float | None:
        """The largest speedup physics allows over the baseline on this workload."""
        if self.floor_ms is None or not self.measured_ms or self.floor_ms <= 0:
            return None
        return self.measured_ms / self.floor_ms


@dataclass(frozen=True)
class ReferenceAnalysis:
    """Stage 1's verdict on the kernel being optimized."""

    bottleneck: str
    """compute | memory | latency | mixed | unknown: the class the tools are filtered by."""
    theory: str
    """The roofline's class (compute | memory | mixed | unknown)."""
    measured: str | None
    """ncu's class from throughput % of peak, when ncu ran."""
    agree: bool | None
    """Whether the two agree (None when only one exists)."""
    ceilings: Ceilings | None
    """The roofs used."""
    workloads: tuple[WorkloadBound, ...]
    """Per workload."""
    compute_pct: float | None = None
    """ncu: sm__throughput % of peak."""
    memory_pct: float | None = None
    """ncu: memory throughput % of peak."""
    note: str = ""
    """How the class was decided, in a sentence."""


class FormulaError(ValueError):
    """A flops/bytes formula cannot be evaluated; the message says which and why."""


def evaluate_formula(expr: str, names: Mapping[str, int]) -> float:
    """A formula is arithmetic over axis names; nothing else is evaluated (no calls, no attributes)."""
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call,
               ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.Mod, ast.USub, ast.UAdd)  # fmt: skip
    funcs = {"min": min, "max": max, "abs": abs}
    tree = ast.parse(expr, mode="eval")
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise FormulaError(f"{expr!r}: {type(node).__name__} is not allowed in a formula")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in funcs):
            raise FormulaError(f"{expr!r}: only min, max and abs may be called")
        if isinstance(node, ast.Name) and node.id not in names and node.id not in funcs:
            raise FormulaError(f"{expr!r}: unknown name {node.id!r}; use axis names")
    return float(eval(compile(tree, "<formula>", "eval"), {"__builtins__": {}}, {**funcs, **names}))


def _axis_values(definition: Definition, workload: Workload) -> dict[str, int]:
    values = {n: int(a.value) for n, a in definition.axes.items() if a.type == "const" and a.value is not None}
    values.update({k: int(v) for k, v in workload.axes.items()})
    return values


def workload_bounds(definition: Definition, workloads: Sequence[Workload], flops: str | None, nbytes: str | None,
                    ceilings: Ceilings | None, measured_ms: Mapping[str, float]) -> tuple[WorkloadBound, ...]:  # fmt: skip
    out = []
    for w in workloads:
        names = _axis_values(definition, w)
        f = evaluate_formula(flops, names) if flops else None
        b = evaluate_formula(nbytes, names) if nbytes else None
        ai = f / b if f is not None and b else None
        floor = None
        if ceilings is not None and (f is not None or b is not None):
            t_compute = (f or 0.0) / (ceilings.flops_tflops * 1e12)
            t_memory = (b or 0.0) / (ceilings.bandwidth_gbs * 1e9)
            floor = max(t_compute, t_memory) * 1e3
        out.append(WorkloadBound(w.uuid, dict(w.axes), f, b, ai, floor, measured_ms.get(w.uuid)))
    return tuple(out)


def theory_class(bounds: Sequence[WorkloadBound], ceilings: Ceilings | None) -> str:
    ais = [b.intensity for b in bounds if b.intensity is not None]
    if not ais or ceilings is None:
        return "unknown"
    # Geometric mean over workloads; within a factor of 2 of the ridge both roofs matter.
    ai = math.exp(sum(math.log(max(a, 1e-12)) for a in ais) / len(ais))
    ratio = ai / ceilings.ridge
    return "memory" if ratio < 0.5 else "compute" if ratio > 2.0 else "mixed"


def measured_class(profile: Profile | None) -> tuple[str | None, float | None, float | None]:
    if profile is None or profile.main is None:
        return None, None, None
    compute = profile.metric("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    memory = profile.metric("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    if memory is None:
        memory = profile.metric("dram__throughput.avg.pct_of_peak_sustained_elapsed")
    if compute is None or memory is None:
        return None, compute, memory
    if max(compute, memory) < 40.0:
        # Neither roof is near: the kernel waits on latency (too little parallelism or dependent loads).
        return "latency", compute, memory
    if memory >= 60.0 and memory > compute + 10:
        return "memory", compute, memory
    if compute >= 60.0 and compute > memory + 10:
        return "compute", compute, memory
    return "mixed", compute, memory


def analyze_reference(definition: Definition, workloads: Sequence[Workload], *, flops: str | None,
                      nbytes: str | None, ceilings: Ceilings | None, measured_ms: Mapping[str, float],
                      profile: Profile | None) -> ReferenceAnalysis:  # fmt: skip
    bounds = workload_bounds(definition, workloads, flops, nbytes, ceilings, measured_ms)
    theory = theory_class(bounds, ceilings)
    measured, compute, memory = measured_class(profile)
    if theory != "unknown" and measured is not None:
        agree = theory == measured
        if agree:
            final, note = theory, f"roofline and ncu agree: {theory}-bound"
        elif measured == "latency":
            # A theoretically memory/compute-bound kernel that reaches neither roof is, for now,
            # latency-bound: say so, the tools for its class still apply.
            final, note = "latency", f"roofline says {theory}-bound, but ncu sees neither roof above 40 %: latency-bound"
        else:
            final, note = theory, f"roofline says {theory}-bound, ncu suggests {measured}-bound; trusting the roofline"
    elif theory != "unknown":
        agree, final, note = None, theory, f"roofline only (no ncu): {theory}-bound"
    elif measured is not None:
        agree, final, note = None, measured, f"ncu only (no flops/bytes formulas in .kernelpro.yml): {measured}-bound"
    else:
        agree, final, note = None, "unknown", "no flops/bytes formulas and no ncu counters: every tool runs"
    return ReferenceAnalysis(final, theory, measured, agree, ceilings, bounds, compute, memory, note)
