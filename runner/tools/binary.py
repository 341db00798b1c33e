"""The two tools over the compiled binary (cuobjdump --dump-sass, nm -D), paper Section 4.2.2.

SASS shows what the hardware will execute: which tensor-core generation was emitted (HGMMA/wgmma,
HMMA, IMMA, DMMA, BMMA) and whether registers spill (STL/LDL). ncu counters, when present, decide
whether spills actually hurt (RegisterSpillDetector cases A/B/C, Appendix B).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..evidence import Profile, SassStats
from . import ALL_CLASSES, Finding, ProfilingTool
from .counters import (
    DRAM_THROUGHPUT,
    ELIGIBLE,
    GLD_SECTORS,
    GST_SECTORS,
    ISSUE_ACTIVE,
    LOCAL_LD_SECTORS,
    LOCAL_ST_SECTORS,
    MEM_THROUGHPUT,
    REGS,
    SM_THROUGHPUT,
    binding_limiters,
    num,
    stall_shares,
)

TC_FAMILIES = ("HGMMA", "HMMA", "IMMA", "DMMA", "BMMA")


def _sass(p: Profile) -> SassStats:
    assert p.sass is not None  # available() guarantees it for sass tools
    return p.sass


def _hopper(arch: str) -> bool:
    return arch.lower().startswith("sm_90")


# --- 1. tensor_core_generation (WGMMAInstructionTool) ---------------------------------------------


def _tc_case(p: Profile, th: Mapping[str, float]) -> str | None:
    s = _sass(p)
    if s.count("HGMMA") > 0:
        return None  # the best generation on Hopper
    if s.count("HMMA") > 0:
        return "hmma_on_hopper" if _hopper(s.arch) else None
    if sum(s.count(f) for f in TC_FAMILIES) > 0:
        return None  # IMMA/DMMA/BMMA: the right unit for integer / fp64 / binary work
    if s.uses_cublas:
        return None  # tensor-core work runs in cuBLAS's own kernels, absent from this binary
    ffma, total = s.count("FFMA"), s.count("total")
    share = ffma / total * 100.0 if total else 0.0
    if ffma >= th["min_ffma"] and share >= th["ffma_share_pct"]:
        return "no_tensor_cores"
    return None


def _tc_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    case = _tc_case(p, th)
    if case is None:
        return None
    s = _sass(p)
    ev: dict[str, Any] = {"arch": s.arch, **{f: s.count(f) for f in (*TC_FAMILIES, "FFMA", "total")},
                          "uses_cublas": s.uses_cublas}
    if case == "hmma_on_hopper":
        return Finding(
            tool="tensor_core_generation", severity="high",
            title=f"HMMA ({s.count('HMMA')}) but no HGMMA/wgmma on Hopper ({s.arch})",
            evidence=ev,
            root_cause="The kernel uses Ampere-style warp-level mma.sync (HMMA). On Hopper only the warpgroup MMA "
                       "(wgmma, SASS HGMMA) reaches peak tensor throughput; HMMA caps at ~63% of it and needs "
                       "operands staged through registers.",
            recommendations=(
                "Triton: compile for sm_90a with tiles wgmma accepts - BLOCK_M >= 64 per warpgroup, num_warps a "
                "multiple of 4 (4 or 8), BLOCK_N/BLOCK_K multiples of 16, operands loaded straight into tl.dot "
                "(no tl.trans / elementwise ops on the loaded tile before the dot), num_stages >= 3.",
                "CUDA: use a CUTLASS 3.x SM90 GEMM (KernelTmaWarpSpecialized* schedules) or CuTe "
                "SM90_64xNx16 GMMA atoms; by hand: wgmma.mma_async with TMA-loaded, 128B-swizzled shared tiles.",
                "If the GEMM is standard, call cuBLAS/cuBLASLt (it emits wgmma on Hopper).",
            ),
            expected_gain="1.3-1.5x on the matmul",
            code_example="triton.Config({'BLOCK_M': 128, 'BLOCK_N': 128, 'BLOCK_K': 64}, num_warps=8, num_stages=3)",
            source="sass",
        )
    return Finding(
        tool="tensor_core_generation", severity="high",
        title=f"No tensor-core instructions; {s.count('FFMA')} FFMA ({ev['FFMA'] / max(s.count('total'), 1) * 100:.0f}% "
              "of the code) - the inner product runs on CUDA cores",
        evidence=ev,
        root_cause="The binary contains no MMA instructions of any generation and does not link cuBLAS: the "
                   "multiply-accumulate loop is scalar FFMA, ~15x below tensor-core throughput for FP16/BF16.",
        recommendations=(
            "Triton: express the product as tl.dot over tiles (BLOCK_M/N/K >= 16, fp16/bf16 inputs, or "
            "input_precision='tf32' for fp32) instead of tl.sum(a[:, :, None] * b[None, :, :]).",
            "CUDA: use wmma/mma.sync fragments, wgmma on sm_90a, or call cuBLAS/CUTLASS for the GEMM part.",
        ),
        expected_gain="3-15x on the matmul portion",
        code_example="acc += tl.dot(a, b)  # instead of tl.sum(a[:, :, None] * b[None, :, :], axis=1)",
        source="sass",
    )


TENSOR_CORE_GENERATION = ProfilingTool(
    name="tensor_core_generation", source="sass", required=("counts", "arch", "uses_cublas"),
    thresholds={"min_ffma": 64, "ffma_share_pct": 20.0},
    trigger=lambda p, th: _tc_case(p, th) is not None, analyze=_tc_analyze,
    affinity=frozenset({"compute", "mixed", "latency"}),
    description="Which tensor-core generation SASS emits: HMMA without wgmma on Hopper; FFMA loops with none.",
)


# --- 2. register_spills (RegisterSpillDetector) ---------------------------------------------------


def spill_cases(
    p: Profile, th: Mapping[str, float]
) -> tuple[dict[str, str], dict[str, float | str]] | None:
    """The paper's harmful-spill cases A/B/C that hold, with the counters; None without ncu data."""
    k = p.main
    if k is None:
        return None
    ev: dict[str, float | str] = {}
    cases: dict[str, str] = {}
    shares = stall_shares(k)
    ls = shares.get("long_scoreboard")
    compute = k.get(SM_THROUGHPUT)
    memory = k.get(MEM_THROUGHPUT)
    if memory is None:
        memory = k.get(DRAM_THROUGHPUT)
    if ls is not None:
        ev["long_scoreboard_stall_pct"] = round(ls, 1)
    if compute is not None:
        ev["compute_throughput_pct"] = float(compute)
    if memory is not None:
        ev["memory_throughput_pct"] = float(memory)
    # A: latency-bound - spills add latency while neither roof is saturated.
    if ls is not None and compute is not None and memory is not None and ls > th["a_long_scoreboard_pct"] \
            and compute < th["a_throughput_pct"] and memory < th["a_throughput_pct"]:
        cases["A"] = (
            "latency-bound: long-scoreboard stalls while neither compute nor memory is saturated"
        )
    # B: memory-bound by spills - local traffic eats the bandwidth.
    local = num(k, LOCAL_LD_SECTORS) + num(k, LOCAL_ST_SECTORS)
    glob = num(k, GLD_SECTORS) + num(k, GST_SECTORS)
    if k.get(LOCAL_LD_SECTORS) is not None:
        ratio = local / (local + glob) * 100.0 if local + glob > 0 else 0.0
        ev["local_memory_sectors"] = local
        ev["local_traffic_ratio_pct"] = round(ratio, 1)
        if memory is not None and memory > th["b_memory_pct"] and ratio > th["b_local_ratio_pct"]:
            cases["B"] = (
                "memory-bound by spills: local-memory traffic takes bandwidth from useful data"
            )
    # C: occupancy-limited - registers bind and the scheduler starves.
    binding = binding_limiters(k)
    if binding:
        ev["occupancy_limiter"] = "+".join(binding)
        issue, eligible = k.get(ISSUE_ACTIVE), k.get(ELIGIBLE)
        if issue is not None:
            ev["issue_active_pct"] = float(issue)
        if eligible is not None:
            ev["eligible_warps_per_cycle"] = float(eligible)
        starved = (issue is not None and issue < th["c_issue_active_pct"]) or (
            eligible is not None and eligible < th["c_eligible_warps"]
        )
        # Registers must bind alone: when another limit ties, fewer registers would not add warps.
        if binding == ["registers"] and starved:
            cases["C"] = "occupancy-limited: registers bind occupancy and the scheduler is starved"
    if k.get(REGS) is not None:
        ev["registers_per_thread"] = num(k, REGS)
    return cases, ev


def _spill_counts(p: Profile) -> tuple[int, int]:
    s = _sass(p)
    return s.count("STL"), s.count("LDL")


def _spill_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    stl, ldl = _spill_counts(p)
    if stl + ldl <= 0:
        return None
    ev: dict[str, float | str] = {"STL": stl, "LDL": ldl}
    judged = spill_cases(p, th)
    cases: dict[str, str] = {}
    if judged is None:
        sev = "medium"
        cause = ("The binary stores and reloads registers through local memory (thread-private DRAM, cached in L1/L2); "
                 "no ncu counters were collected, so whether the spills cost time is not known.")
    else:
        cases, more = judged
        ev.update(more)
        if not cases:
            return None  # spills exist but none of A/B/C: harmless (paper, Appendix B)
        sev = "critical" if "B" in cases else "high"
        ev["cases"] = ",".join(sorted(cases))
        cause = (
            "Register demand exceeds what the compiler was allowed per thread, so values are spilled to local "
            "memory; " + "; ".join(f"case {c}: {d}" for c, d in sorted(cases.items())) + "."
        )
    return Finding(
        tool="register_spills", severity=sev,
        title=f"Register spills: {stl} STL / {ldl} LDL in SASS" + (f" (harmful: case {ev['cases']})" if cases else ""),
        evidence=ev, root_cause=cause,
        recommendations=(
            "Reduce register pressure per thread: Triton: smaller tiles (BLOCK_M/BLOCK_N), fewer num_stages, or more "
            "num_warps for the same tile so each thread holds fewer accumulator elements; CUDA: smaller per-thread "
            "tiles/unroll factors, no dynamically indexed local arrays.",
            "CUDA: give the compiler a realistic budget with __launch_bounds__(threads, minBlocks) instead of a tight "
            "-maxrregcount that forces spills; check with -Xptxas -v (spill stores/loads).",
            "Split the kernel (or its epilogue) so fewer values are live at once; keep large per-thread arrays in "
            "shared memory.",
        ),
        expected_gain="2-10x if spilling is eliminated" if cases else "up to 2x, depending on spill frequency",
        code_example="__global__ void __launch_bounds__(128, 4) kernel(...);  // nvcc -Xptxas -v",
        source="sass",
    )


REGISTER_SPILLS = ProfilingTool(
    name="register_spills", source="sass", required=("counts",),
    thresholds={"a_long_scoreboard_pct": 15.0, "a_throughput_pct": 50.0, "b_memory_pct": 60.0,
                "b_local_ratio_pct": 30.0, "c_issue_active_pct": 30.0, "c_eligible_warps": 0.6},
    trigger=lambda p, th: sum(_spill_counts(p)) > 0, analyze=_spill_analyze, affinity=ALL_CLASSES,
    description="STL/LDL spills in SASS, judged harmful by the paper's cases A/B/C when ncu counters exist.",
)


TOOLS = (TENSOR_CORE_GENERATION, REGISTER_SPILLS)
