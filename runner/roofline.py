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
from dataclasses import dataclass, replace

from kernelpro.schema import Ceilings as WireCeilings

from .evidence import KernelProfile, Profile, Work
from .trace import Definition, Workload

# Ceilings measured on the H200 of the GPU machine (corpus.md, 2026-11-29): device-to-device copy
# 4.25 TB/s counting read + write; bf16 GEMM 678 TFLOP/s through torch at 8192^3. fp32 on CUDA
# cores is the datasheet's 67 TFLOP/s. Used when no measurement of this GPU is at hand.
H200_CEILINGS = {"bandwidth_gbs": 4250.0, "flops_tensor_tflops": 678.0, "flops_fp32_tflops": 67.0}


@dataclass(frozen=True)
class Ceilings(WireCeilings):
    """Peak rates this GPU really reaches: the results format's record (kernelpro/schema.py, which
    result.json carries) with what the roofline derives from it. bandwidth_gbs counts read + write;
    flops_tflops is the peak for the kernel's datatype (tensor cores for 16-bit, CUDA cores for fp32);
    source is 'measured' or where the numbers come from."""

    @property
    def ridge(self) -> float:
        """FLOP per byte at which the two roofs meet."""
        return self.flops_tflops * 1e12 / (self.bandwidth_gbs * 1e9)


# Other parts' datasheet peaks (dense, no sparsity): DRAM GB/s, 16-bit tensor TFLOP/s, fp32 TFLOP/s. A
# part reaches ~85-90 % of them, so its floor is a little low and "the most speedup possible" a little
# high: never a false "at the roofline", and the gate's faster-than-physics check (0.9 x floor) stays
# sound. First match in the upper-cased device name wins (torch's names: "NVIDIA A100-SXM4-40GB",
# "NVIDIA H100 PCIe", "NVIDIA L40S", ...): specific variants before their family.
DATASHEETS: tuple[tuple[str, float, float, float], ...] = (
    ("GH200", 4900.0, 989.0, 67.0),
    ("H100 PCIE", 2000.0, 756.0, 51.0),
    ("H100 NVL", 3900.0, 835.0, 60.0),
    ("H100", 3350.0, 989.0, 67.0),
    ("A100-SXM4-40GB", 1555.0, 312.0, 19.5),
    ("A100-PCIE-40GB", 1555.0, 312.0, 19.5),
    ("A100 80GB PCIE", 1935.0, 312.0, 19.5),
    ("A100", 2039.0, 312.0, 19.5),
    ("B200", 8000.0, 2250.0, 80.0),
    ("L40S", 864.0, 362.0, 91.6),
    ("L40", 864.0, 181.0, 90.5),
    ("L4", 300.0, 121.0, 30.3),
    ("RTX 4090", 1008.0, 165.0, 82.6),
)


def default_ceilings(gpu: str, dtypes: Sequence[str]) -> Ceilings:
    """The ceilings of ``gpu`` (a device name; '' for the H200): the H200's as measured here, another
    part's datasheet, or for a part in neither the H200's, saying so in ``source`` (the report and
    the prompt show it), so no floor is passed off as this GPU's."""
    tensor = any(d in ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2") for d in dtypes)
    name = gpu or "NVIDIA H200"
    upper = name.upper()
    if "H200" in upper and "GH200" not in upper:
        flops = H200_CEILINGS["flops_tensor_tflops"] if tensor else H200_CEILINGS["flops_fp32_tflops"]
        return Ceilings(name, H200_CEILINGS["bandwidth_gbs"], flops, "H200 measurements (corpus.md)")
    for key, bandwidth, tensor_tflops, fp32_tflops in DATASHEETS:
        if key in upper:
            return Ceilings(name, bandwidth, tensor_tflops if tensor else fp32_tflops,
                            f"datasheet of the {key} (dense peaks; not measured on this GPU)")
    flops = H200_CEILINGS["flops_tensor_tflops"] if tensor else H200_CEILINGS["flops_fp32_tflops"]
    return Ceilings(name, H200_CEILINGS["bandwidth_gbs"], flops,
                    f"the H200's: {name[:60]} is not in kernelpro's table, so floors and % of roofline are an "
                    "H200's, not this GPU's")


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
    """The median of the kernel analysed: the pull request's, or a candidate's (``measured_as``)."""

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
    current: KernelBound | None = None
    """What the pull request's kernel, as written, is bound by (ncu); None without ncu."""

    @property
    def max_speedup(self) -> float | None:
        """The most speedup physics allows on every workload: the least measured / floor."""
        bounds = [b for b in self.workloads if b.max_speedup is not None]
        return min(b.max_speedup for b in bounds) if bounds else None  # type: ignore[type-var]

    def measured_as(self, measured_ms: Mapping[str, float | None]) -> ReferenceAnalysis:
        """The same roofline over another kernel's medians (workload uuid -> ms): what is left to gain
        over a candidate. The findings on the demo's winner, at 0.197 ms against a 0.190 ms floor,
        promised "at most 3.71x", the pull request kernel's room (H200, session 21)."""
        def ms(uuid: str) -> float | None:
            v = measured_ms.get(uuid)
            return v if v is not None and math.isfinite(v) and v > 0 else None  # untimed: no bound from it

        return replace(self, workloads=tuple(replace(b, measured_ms=ms(b.uuid)) for b in self.workloads))

    def bound_note(self) -> str:
        """The arithmetic of max_speedup, for a finding's evidence."""
        bounds = [b for b in self.workloads if b.max_speedup is not None]
        if not bounds:
            return ""
        b = min(bounds, key=lambda x: x.max_speedup or 0.0)
        axes = ", ".join(f"{k}={v}" for k, v in b.axes.items()) or b.uuid
        return f"{b.measured_ms:.4g} ms measured / {b.floor_ms:.4g} ms roofline floor = {b.max_speedup:.2f}x on {axes}"

    def work(self) -> Work | None:
        """The useful work of the workload the profiler runs (the largest), with the Stage 1 bound."""
        if not self.workloads or all(b.flops is None and b.bytes is None for b in self.workloads):
            return None
        # runner/profiler.py profiles max(workloads, key=sum of axes): the same one here.
        b = max(self.workloads, key=lambda x: sum(x.axes.values()))
        return Work(b.uuid, b.flops, b.bytes, self.theory, b.floor_ms, b.measured_ms, self.max_speedup,
                    self.bound_note())


# --- the current kernel's bound (ncu) -------------------------------------------------------------

H200_SMS = 132
"""SMs of an H200, used when the profile does not record the device's count."""
_PIPE_PREFIXES = ("sm__pipe_", "sm__inst_executed_pipe_")
_PIPE_SUFFIX = ".avg.pct_of_peak_sustained_active"


@dataclass(frozen=True)
class KernelBound:
    """What the kernel as written is bound by, from one ncu launch (Stage 1's second view)."""

    bound: str
    """memory | issue | pipe | compute (issue/pipe counters missing) | latency | parallelism | mixed."""
    compute_pct: float | None
    """SM throughput (ncu SOL compute), % of peak."""
    memory_pct: float | None
    """Memory throughput (ncu SOL memory, the busiest memory unit), % of peak."""
    issue_pct: float | None
    """Issue slots used (smsp__issue_active), % of peak."""
    pipe: str
    """The busiest execution pipe ('' when no pipe counter was collected)."""
    pipe_pct: float | None
    """Its utilisation, % of peak."""
    achieved_occupancy_pct: float | None
    """Achieved warps per SM, % of the maximum."""
    theoretical_occupancy_pct: float | None
    """Warps per SM the launch configuration allows, % of the maximum."""
    grid: int | None
    """Programs (thread blocks) launched."""
    block: int | None
    """Threads per program."""
    sms: int
    """SMs of the GPU."""
    sms_source: str
    """Where sms comes from: 'ncu' (recorded device property) or 'H200 default'."""
    waves: float | None
    """Programs / (SMs x programs resident per SM): below 1 the GPU has room for more."""
    note: str
    """The verdict in a sentence, with the numbers."""


def _busiest_pipe(k: KernelProfile) -> tuple[str, float | None]:
    pipes = {n: float(v) for n, v in k.metrics.items() if v is not None and n.endswith(_PIPE_SUFFIX)
             and n.startswith(_PIPE_PREFIXES) and "tensor_op" not in n}
    if not pipes:
        return "", None
    name, pct = max(pipes.items(), key=lambda kv: kv[1])
    short = name.removesuffix(_PIPE_SUFFIX)
    for p in _PIPE_PREFIXES:
        short = short.removeprefix(p)
    return short.removesuffix("_cycles_active"), pct


def sm_count(k: KernelProfile) -> tuple[int, str]:
    for name in ("launch__sm_count", "device__attribute_multiprocessor_count"):
        v = k.get(name)
        if v:
            return int(v), "ncu"
    return H200_SMS, "H200 default"


def current_bound(k: KernelProfile) -> KernelBound:
    """Classify the kernel as written: the SOL pair first, then which compute resource saturates.

    'parallelism' when fewer programs than SMs are launched (some SMs never get work);
    'latency' when neither SOL reaches 40 %; 'memory' / compute-side when one SOL leads by 10 points,
    the compute side named 'issue' when the issue slots are as busy as the SM (>= 90 % of its SOL:
    too many instructions), else 'pipe' (one execution pipe saturates); 'mixed' otherwise.
    """
    compute = k.get("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    memory = k.get("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    if memory is None:
        memory = k.get("dram__throughput.avg.pct_of_peak_sustained_elapsed")
    issue = k.get("smsp__issue_active.avg.pct_of_peak_sustained_active")
    pipe, pipe_pct = _busiest_pipe(k)
    grid = k.get("launch__grid_size") or (k.grid[0] * k.grid[1] * k.grid[2] if any(k.grid) else None)
    block = k.get("launch__block_size") or (k.block[0] * k.block[1] * k.block[2] if any(k.block) else None)
    sms, src = sm_count(k)
    waves = k.get("launch__waves_per_multiprocessor")
    c, m = compute or 0.0, memory or 0.0
    if grid is not None and grid < sms:
        bound = "parallelism"
        note = f"grid of {int(grid)} programs on {sms} SMs: {sms - int(grid)} SMs get no work"
    elif compute is None and memory is None:
        bound, note = "mixed", "ncu throughput counters missing"
    elif max(c, m) < 40.0:
        bound = "latency"
        note = f"neither roof is near (compute {c:.3g} %, memory {m:.3g} %): the kernel waits on latency"
    elif m >= c + 10:
        bound, note = "memory", f"memory {m:.3g} % vs compute {c:.3g} % of peak"
    elif c >= m + 10:
        if issue is not None and issue >= 0.9 * c and (pipe_pct is None or issue >= pipe_pct - 5):
            bound, note = "issue", f"compute {c:.3g} % vs memory {m:.3g} %, issue slots {issue:.3g} % busy"
        elif pipe_pct is not None:
            bound, note = "pipe", f"compute {c:.3g} % vs memory {m:.3g} %, {pipe} pipe {pipe_pct:.3g} % busy"
        else:
            bound, note = "compute", f"compute {c:.3g} % vs memory {m:.3g} % (no issue or pipe counters)"
    else:
        bound, note = "mixed", f"compute {c:.3g} % and memory {m:.3g} % of peak"
    return KernelBound(bound, compute, memory, issue, pipe, pipe_pct,
                       k.get("sm__warps_active.avg.pct_of_peak_sustained_active"),
                       k.get("sm__maximum_warps_per_active_cycle_pct"),
                       None if grid is None else int(grid), None if block is None else int(block),
                       sms, src, waves, note)


class FormulaError(ValueError):
    """A flops/bytes formula cannot be evaluated; the message says which and why."""


_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call,
               ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Pow, ast.Mod, ast.USub, ast.UAdd)
# A definition's constraints also compare and combine (``M % 64 == 0 and N <= 8192``).
_LOGIC = (*_ARITHMETIC, ast.Compare, ast.BoolOp, ast.operator, ast.unaryop, ast.boolop, ast.cmpop)


def evaluate_formula(expr: str, names: Mapping[str, int], logic: bool = False) -> float:
    """A formula is arithmetic over axis names; nothing else is evaluated (no calls, no attributes).
    ``logic``: a constraint, which may also compare and combine (its truth as 1.0 or 0.0)."""
    allowed = _LOGIC if logic else _ARITHMETIC
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


def axis_values(definition: Definition, axes: Mapping[str, int]) -> dict[str, int]:
    """Every axis's value: the definition's constants, then ``axes`` (a workload's variable ones)."""
    values = {n: int(a.value) for n, a in definition.axes.items() if a.type == "const" and a.value is not None}
    values.update({k: int(v) for k, v in axes.items()})
    return values


def workload_bounds(definition: Definition, workloads: Sequence[Workload], flops: str | None, nbytes: str | None,
                    ceilings: Ceilings | None, measured_ms: Mapping[str, float]) -> tuple[WorkloadBound, ...]:
    out = []
    for w in workloads:
        names = axis_values(definition, w.axes)
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
                      profile: Profile | None) -> ReferenceAnalysis:
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
    current = current_bound(profile.main) if profile is not None and profile.main is not None else None
    return ReferenceAnalysis(final, theory, measured, agree, ceilings, bounds, compute, memory, note, current)
