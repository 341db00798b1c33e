"""The eight tools over Nsight Compute counters (paper Section 4, Appendix B).

Every metric name here is the canonical sm_90 name and was checked against the H200 recordings in
``tests/fixtures/h200`` (the 50-metric CSV and the raw page of ``--set full``). Names that read
``n/a`` on Hopper (``smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct``,
``..._stalled_memory_throttle_...``) are never required: the warp-stall tools work from the
``smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio`` family, turned into a share of
all stall cycles (reason / sum of reasons * 100) so that thresholds in percent apply.

The helpers at the top are shared with ``energy_only.py``, ``binary.py`` and ``bound.py``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..evidence import KernelProfile, Profile
from . import ALL_CLASSES, Finding, ProfilingTool

# --- metric names (sm_90) -------------------------------------------------------------------------

SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM_THROUGHPUT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_THROUGHPUT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
ACHIEVED_OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL_OCC = "sm__maximum_warps_per_active_cycle_pct"
OCC_LIMITS = {
    "registers": "launch__occupancy_limit_registers",
    "shared_mem": "launch__occupancy_limit_shared_mem",
    "blocks": "launch__occupancy_limit_blocks",
    "warps": "launch__occupancy_limit_warps",
}
REGS = "launch__registers_per_thread"
BLOCK_SIZE = "launch__block_size"
WAVES = "launch__waves_per_multiprocessor"
SMEM_STATIC = "launch__shared_mem_per_block_static"
SMEM_DYNAMIC = "launch__shared_mem_per_block_dynamic"
ISSUE_ACTIVE = "smsp__issue_active.avg.pct_of_peak_sustained_active"
ELIGIBLE = "smsp__warps_eligible.avg.per_cycle_active"

GLD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
GLD_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"
GST_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"
GST_REQUESTS = "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"
GLD_BYTES_PER_SECTOR = "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio"
GST_BYTES_PER_SECTOR = "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio"
GLD_INST = "smsp__sass_inst_executed_op_global_ld.sum"
LOCAL_LD_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum"
LOCAL_ST_SECTORS = "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum"
L1_HIT = "l1tex__t_sector_hit_rate.pct"
L2_HIT = "lts__t_sector_hit_rate.pct"

BANK_LD = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"
BANK_ST = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"
SHARED_WAVEFRONTS_LD = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"
SHARED_WAVEFRONTS_ST = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"
SHARED_INST_LD = "smsp__sass_inst_executed_op_shared_ld.sum"
SHARED_INST_ST = "smsp__sass_inst_executed_op_shared_st.sum"

TENSOR_HMMA = "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"
TENSOR_GMMA = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
TENSOR_ANY = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
INST_EXECUTED = "smsp__inst_executed.sum"
FFMA_THREAD_INST = "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum"


def stall_metric(reason: str) -> str:
    return f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"


STALL_REASONS = (
    "long_scoreboard", "short_scoreboard", "barrier", "branch_resolving", "membar", "memory_throttle",
    "mio_throttle", "lg_throttle", "math_pipe_throttle", "tex_throttle", "wait", "not_selected",
    "no_instruction", "dispatch_stall", "drain", "imc_miss", "gmma", "misc", "sleeping",
)
"""Stall reasons ncu reports on sm_90 ('selected' is issuing, not a stall, and is left out)."""

CORE_STALLS = tuple(stall_metric(r) for r in ("long_scoreboard", "short_scoreboard", "barrier"))
"""The stall ratios every warp-stall tool needs; the rest are read when present."""


# --- shared helpers -------------------------------------------------------------------------------


def memory_pct(k: KernelProfile) -> float | None:
    """DRAM throughput (% of peak), else ncu's memory SOL (the busiest memory unit; the raw page of
    ``--set full`` has only the latter)."""
    v = k.get(DRAM_THROUGHPUT)
    return k.get(MEM_THROUGHPUT) if v is None else v


def num(k: KernelProfile, name: str, default: float = 0.0) -> float:
    v = k.get(name)
    return default if v is None else float(v)


def stall_shares(k: KernelProfile) -> dict[str, float]:
    """Each stall reason as a percentage of all stall cycles (reasons n/a on this arch are left out)."""
    raw = {r: k.get(stall_metric(r)) for r in STALL_REASONS}
    vals = {r: float(v) for r, v in raw.items() if v is not None and v >= 0}
    total = sum(vals.values())
    if total <= 0:
        return {r: 0.0 for r in vals}
    return {r: v / total * 100.0 for r, v in vals.items()}


def sectors_per_request(k: KernelProfile, op: str) -> float | None:
    sectors, requests = (GLD_SECTORS, GLD_REQUESTS) if op == "ld" else (GST_SECTORS, GST_REQUESTS)
    s, r = k.get(sectors), k.get(requests)
    if s is None or r is None or r <= 0:
        return None
    return float(s) / float(r)


def load_width_bits(profile: Profile) -> float | None:
    """Average width of global loads in the binary (SASS), weighted by static count."""
    sass = profile.sass
    if sass is None or not sass.global_load_bits:
        return None
    n = sum(sass.global_load_bits.values())
    return sum(b * c for b, c in sass.global_load_bits.items()) / n if n else None


def coalescing(
    profile: Profile, k: KernelProfile, op: str, th: Mapping[str, float]
) -> dict[str, float] | None:
    """How far the global accesses of one kind are from fully coalesced.

    A warp whose 32 threads each read ``w`` consecutive bits needs ``w / 8`` 32-byte sectors per
    request (4 for 32-bit, 16 for 128-bit). The best evidence is ncu's own bytes-used-per-sector
    (32 = every fetched byte used); otherwise sectors/request is compared with the ideal for the load
    width SASS shows; without SASS the width is unknown, and only ratios beyond any coalesced pattern
    (more than 16 sectors, the 128-bit ideal) are counted, so vectorised kernels are never flagged.
    Returns sectors/request, the ideal, and 'excess' (fetched / needed), or None without data.
    """
    spr = sectors_per_request(k, op)
    if spr is None:
        return None
    out: dict[str, float] = {"sectors_per_request": round(spr, 2)}
    bps = k.get(GLD_BYTES_PER_SECTOR if op == "ld" else GST_BYTES_PER_SECTOR)
    width = load_width_bits(profile) if op == "ld" else None
    if bps is not None and bps > 0:
        out["bytes_used_per_sector"] = float(bps)
        out["excess"] = round(32.0 / float(bps), 2)
        out["ideal_sectors_per_request"] = round(spr / out["excess"], 2)
    elif width is not None:
        ideal = max(width / 8.0, 1.0)
        out["load_width_bits"] = round(width, 1)
        out["ideal_sectors_per_request"] = ideal
        out["excess"] = round(spr / ideal, 2)
    else:
        cap = th.get("max_coalesced_sectors", 16.0)
        out["ideal_sectors_per_request"] = cap
        out["excess"] = round(max(spr / cap, 1.0), 2)
    return out


def severity(value: float, levels: Mapping[str, float], *, above: bool = True) -> str | None:
    """The highest severity whose threshold ``value`` reaches (>= when above, <= otherwise)."""
    for sev in ("critical", "high", "medium", "low"):
        t = levels.get(sev)
        if t is not None and (value >= t if above else value <= t):
            return sev
    return None


def binding_limiters(k: KernelProfile) -> list[str]:
    """The launch__occupancy_limit_* (blocks per SM) that bind: all those tied at the minimum."""
    known = {n: float(v) for n, m in OCC_LIMITS.items() if (v := k.get(m)) is not None}
    if not known:
        return []
    low = min(known.values())
    return [n for n, v in known.items() if v == low]


def _main(p: Profile) -> KernelProfile:
    k = p.main
    assert k is not None  # available() guarantees it for ncu tools
    return k


# --- 1. warp_stall --------------------------------------------------------------------------------

_STALL_CAUSE = {
    "long_scoreboard": "Warps wait on long-latency loads (global/local memory, ~400+ cycles) tracked by the "
    "long scoreboard: each thread issues a load and immediately needs its result, with too few independent "
    "loads in flight to hide DRAM latency (the Hopper form of the 'memory dependency' stall).",
    "short_scoreboard": "Warps wait on MIO results (shared memory, special-function MUFU ops, shuffles): "
    "typically shared-memory bank conflicts or a dependency chain through shared memory.",
    "barrier": "Warps wait at __syncthreads()/tl barriers for the slowest warp of the block: load imbalance, "
    "too many sync points, or divergent work before the barrier.",
    "branch_resolving": "Warps wait for branch targets to resolve: data- or thread-id-dependent divergent paths.",
    "mio_throttle": "The MIO queue (shared memory, special math, shuffles) is full: too many shared-memory "
    "or MUFU instructions per unit of work.",
    "lg_throttle": "The local/global memory queue is full: too many narrow (32-bit) memory instructions, or "
    "register spills, flood the LSU.",
    "memory_throttle": "The memory pipeline is saturated by pending requests.",
    "math_pipe_throttle": "An arithmetic pipe is saturated: the kernel is compute-bound on that pipe.",
    "wait": "Fixed-latency dependencies: each instruction waits a few cycles for the previous one "
    "(low instruction-level parallelism).",
    "membar": "Warps wait on memory fences (__threadfence / atomics with strong ordering).",
    "no_instruction": "The instruction cache misses or the warp has nothing fetched: very large unrolled code "
    "or short kernels dominated by start-up.",
    "gmma": "Warps wait for warpgroup MMA (wgmma) results before the accumulator is consumed.",
    "tex_throttle": "The texture pipe is saturated.",
    "dispatch_stall": "The dispatcher could not issue the selected instruction (pipeline conflict).",
    "drain": "Warps wait at exit for their outstanding stores to drain.",
    "imc_miss": "Warps wait on immediate-constant cache misses.",
}

_STALL_RECS: dict[str, tuple[str, ...]] = {
    "long_scoreboard": (
        "Move more bytes per instruction and keep more loads in flight: Triton: raise BLOCK_SIZE (and keep "
        "num_warps so each thread owns >= 16 contiguous bytes: 4 fp32, 8 fp16/bf16, 16 fp8) so every thread issues 128-bit loads; "
        "CUDA: use float4/uint4 loads and process several elements per thread (grid-stride loop, unrolled).",
        "Prefetch the next tile while computing the current one: Triton: num_stages=3-4 in the autotune "
        "configs of a tl.dot loop; CUDA: cp.async double buffering (Ampere+) or TMA (cp.async.bulk) on Hopper.",
        "Cache reused data in shared memory instead of re-reading global memory; use __ldg / "
        "tl.load(..., cache_modifier='.ca') for read-only data that is reused.",
        "Make sure accesses are coalesced (consecutive threads -> consecutive addresses).",
        "Raise occupancy (more warps per SM) so the scheduler has other warps to issue while loads are pending.",
    ),
    "short_scoreboard": (
        "Remove shared-memory bank conflicts: pad shared arrays (__shared__ float A[32][33]) or swizzle the layout; "
        "in Triton let tl.dot choose the layout instead of manual tl.trans/reshape through shared memory.",
        "Keep values in registers instead of round-tripping through shared memory; use warp shuffles "
        "(__shfl_sync) for intra-warp exchange.",
        "Replace accurate math with fast intrinsics where the tolerance allows (__expf, __fdividef) to "
        "shorten MUFU dependency chains.",
    ),
    "barrier": (
        "Replace block-wide __syncthreads() with warp-level primitives (__shfl_xor_sync, __reduce_add_sync, "
        "cooperative_groups::tiled_partition) when the data exchange stays inside a warp.",
        "Reduce the number of barriers per iteration; balance work across the warps of a block.",
        "Triton: lower num_warps for reductions over short rows (fewer warps to synchronise), or use tl.reduce "
        "on a layout that keeps the reduction inside a warp.",
        "Never put __syncthreads() inside divergent conditionals.",
    ),
    "branch_resolving": (
        "Replace data-dependent branches by predication/arithmetic: result = cond * v1 + (1 - cond) * v2, "
        "tl.where in Triton.",
        "Reorganise or sort data so the threads of a warp take the same path; hoist uniform conditions out of loops.",
        "Use separate kernels (or constexpr specialisation in Triton) for distinct code paths.",
    ),
    "mio_throttle": (
        "Issue fewer, wider shared-memory accesses (LDS.128 / ldmatrix) and fewer MUFU ops per element.",
        "Move intra-warp exchanges from shared memory to shuffles; use fast-math intrinsics.",
    ),
    "lg_throttle": (
        "Vectorise global accesses so one instruction moves 16 bytes per thread: CUDA float4 loads; Triton "
        "a BLOCK_SIZE / num_warps ratio giving each thread >= 16 contiguous bytes (4 fp32, 8 fp16/bf16, 16 fp8).",
        "Remove register spills (local memory traffic shares this queue).",
    ),
    "memory_throttle": (
        "Reduce the number of outstanding memory transactions: vectorise and coalesce accesses.",
    ),
    "math_pipe_throttle": (
        "Move matrix work to tensor cores (tl.dot / wgmma / mma.sync) or to a less loaded pipe (fp16x2 HFMA2, "
        "integer ops on the ALU), or reduce the arithmetic per element.",
    ),
    "wait": (
        "Increase instruction-level parallelism: unroll loops and interleave independent accumulators "
        "(#pragma unroll, several partial sums; Triton: larger BLOCK_SIZE per program).",
    ),
    "membar": (
        "Drop unnecessary __threadfence() calls; use relaxed or scoped atomics (cuda::atomic_ref with "
        "memory_order_relaxed, atom.relaxed.gpu) where ordering is not needed.",
    ),
    "no_instruction": (
        "Reduce code size (less unrolling, fewer template instantiations in one kernel) or do more work per "
        "launch so start-up is amortised.",
    ),
    "gmma": (
        "Overlap wgmma with the next tile's loads (producer/consumer warp specialisation, more pipeline stages); "
        "wait on wgmma only when the accumulator is consumed (wgmma.wait_group with depth > 0).",
    ),
}

_MEMORY_STALLS = frozenset({"long_scoreboard", "lg_throttle", "memory_throttle", "drain"})


def _loads_coalesced(p: Profile, k: KernelProfile, th: Mapping[str, float]) -> bool:
    """Global loads fetch no more than ``coalesced_excess`` x the sectors they need (True without data)."""
    c = coalescing(p, k, "ld", th)
    return c is None or c["excess"] < th["coalesced_excess"]


def _warp_stall_trigger(p: Profile, th: Mapping[str, float]) -> bool:
    shares = stall_shares(_main(p))
    return bool(shares) and max(shares.values()) > th["high"]


def _warp_stall_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    k = _main(p)
    shares = stall_shares(k)
    dominant = max(shares, key=lambda r: shares[r])
    value = shares[dominant]
    if value <= th["high"] or dominant == "not_selected":
        return None  # 'not selected' means warps were eligible: nothing is starving the scheduler
    dram = memory_pct(k)
    if dominant in _MEMORY_STALLS and dram is not None and dram >= th["saturated_memory_pct"] \
            and _loads_coalesced(p, k, th):
        # Memory stalls near the DRAM roof with every fetched byte used are the signature of a
        # bandwidth-bound kernel doing its job; only moving fewer bytes helps. Real H200 numbers
        # (tests/fixtures/h200): the float4 copy control `clean` stalls 92 % on long scoreboard at
        # 74 % of DRAM peak with 32 of 32 bytes used per sector, and the demo's tuned SwiGLU 84 %:
        # both at their roof. The bar was 80 %, which flagged the copy; 60 % is ncu's own SOL rule
        # ("below 60 % of peak typically indicate latency issues"). Uncoalesced traffic is never
        # "doing its job": `uncoalesced` (81 % DRAM, 4 of 32 bytes used) and `pointer_chase`
        # (61 %, 4 of 32) still fire, since their DRAM bandwidth goes to bytes nobody reads.
        return None
    top = sorted(shares.items(), key=lambda kv: -kv[1])[:5]
    evidence: dict[str, float | str] = {f"{r}_stall_pct": round(v, 1) for r, v in top}
    evidence["dominant"] = dominant
    evidence[f"{dominant}_ratio"] = num(k, stall_metric(dominant))
    if dram is not None:
        evidence["memory_throughput_pct"] = dram
    sev = "critical" if value >= th["critical"] else "high"
    code = None
    if dominant in ("long_scoreboard", "lg_throttle"):
        code = ("# Triton: one program handles a 1024-wide block, 4 warps -> 8 elements per thread (2x 128-bit loads\n"
                "# of fp32, one of fp16/bf16)\n"
                "BLOCK_SIZE, num_warps = 1024, 4\n"
                "// CUDA: float4 loads\n"
                "float4 v = reinterpret_cast<const float4*>(x)[i];")
    elif dominant == "barrier":
        code = ("// CUDA: warp reduction without __syncthreads()\n"
                "for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);")
    return Finding(
        tool="warp_stall", severity=sev,
        title=f"{value:.0f}% of stall cycles are '{dominant.replace('_', ' ')}' stalls",
        evidence=evidence,
        root_cause=_STALL_CAUSE.get(dominant, "Warps are not issuing; the dominant reason is " + dominant + "."),
        recommendations=_STALL_RECS.get(dominant, ("Profile with ncu --set full and inspect the source "
                                                   "counters (SourceCounters section) for the stalling lines.",)),
        expected_gain="1.5-3x depending on the stall type" if sev == "critical" else "1.2-2x",
        code_example=code, source="ncu",
    )


WARP_STALL = ProfilingTool(
    name="warp_stall", source="ncu", required=CORE_STALLS,
    thresholds={"high": 40.0, "critical": 60.0, "saturated_memory_pct": 60.0, "coalesced_excess": 2.0},
    trigger=_warp_stall_trigger, analyze=_warp_stall_analyze, affinity=ALL_CLASSES,
    description="Dominant warp-stall reason (share of stall cycles, argmax) with a reason-specific fix; 40 %/60 %.",
)


# --- 2. barrier_stall -----------------------------------------------------------------------------


def _barrier_share(p: Profile) -> float:
    return stall_shares(_main(p)).get("barrier", 0.0)


def _barrier_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    k = _main(p)
    share = _barrier_share(p)
    if share < th["high"]:
        return None
    sev = "critical" if share >= th["critical"] else "high"
    return Finding(
        tool="barrier_stall", severity=sev,
        title=f"{share:.0f}% of stall cycles wait at block barriers",
        evidence={"barrier_stall_pct": round(share, 1), "barrier_ratio": num(k, stall_metric("barrier")),
                  "block_size": num(k, BLOCK_SIZE)},
        root_cause="Warps of a block reach __syncthreads() (Triton: the barriers around tl.dot/reductions and "
                   "shared-memory layout conversions) at different times: the block waits for its slowest warp. "
                   "Causes are load imbalance, a barrier per loop iteration, or large blocks.",
        recommendations=(
            "Replace block-wide barriers with warp-level primitives where the exchange stays inside a warp "
            "(__shfl_xor_sync / __reduce_add_sync; cooperative_groups::tiled_partition<32>).",
            "Double-buffer shared memory so one barrier per tile suffices instead of two.",
            "Use smaller blocks (Triton: fewer num_warps) so fewer warps wait on each other; balance per-warp work.",
            "On Hopper use mbarrier-based producer/consumer pipelines (TMA + mbarrier arrive/wait) instead of "
            "__syncthreads() between load and compute phases.",
            "Never place __syncthreads() inside divergent branches (also a correctness bug).",
        ),
        expected_gain="1.2-2x",
        code_example="for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);",
        source="ncu",
    )


BARRIER_STALL = ProfilingTool(
    name="barrier_stall", source="ncu", required=CORE_STALLS,
    thresholds={"high": 30.0, "critical": 50.0},
    trigger=lambda p, th: _barrier_share(p) >= th["high"], analyze=_barrier_analyze, affinity=ALL_CLASSES,
    description="Barrier (__syncthreads) stalls >= 30 % of stall cycles.",
)


# --- 3. memory_coalescing -------------------------------------------------------------------------


def _coalescing_all(p: Profile, th: Mapping[str, float]) -> dict[str, dict[str, float]]:
    k = _main(p)
    out = {}
    for op in ("ld", "st"):
        c = coalescing(p, k, op, th)
        if c is not None:
            out[op] = c
    return out


def _coalescing_trigger(p: Profile, th: Mapping[str, float]) -> bool:
    return any(c["excess"] >= th["high"] for c in _coalescing_all(p, th).values())


def _coalescing_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    cs = _coalescing_all(p, th)
    bad = {op: c for op, c in cs.items() if c["excess"] >= th["high"]}
    if not bad:
        return None
    worst = max(c["excess"] for c in bad.values())
    sev = "critical" if worst >= th["critical"] else "high"
    evidence: dict[str, float] = {}
    for op, c in cs.items():
        for key, v in c.items():
            evidence[f"global_{op}_{key}"] = v
    k = _main(p)
    mem = memory_pct(k)
    if mem is not None:
        evidence["memory_throughput_pct"] = mem
    for name, label in ((L1_HIT, "l1_hit_rate_pct"), (L2_HIT, "l2_hit_rate_pct")):
        val = k.get(name)
        if val is not None:
            evidence[label] = val
    which = " and ".join({"ld": "loads", "st": "stores"}[op] for op in bad)
    return Finding(
        tool="memory_coalescing", severity=sev,
        title=f"Uncoalesced global {which}: {worst:.1f}x more sectors fetched than the access width needs",
        evidence=evidence,
        root_cause="Consecutive threads of a warp touch addresses that are not consecutive (strided, transposed "
                   "or gathered indexing), so one warp request spans many 32-byte sectors and most fetched bytes "
                   "are thrown away; the kernel pays DRAM/L2 bandwidth for data it does not use.",
        recommendations=(
            "Make the fastest-varying thread index walk the contiguous (stride-1) dimension: CUDA: index "
            "x[row * ld + threadIdx.x], not x[threadIdx.x * ld + col]; Triton: put tl.arange on the last "
            "(contiguous) axis of the pointer block and pass strides so offs_n * stride_n has stride_n == 1.",
            "For transposes, stage a tile through shared memory (load coalesced, write coalesced from the "
            "transposed tile, pad to [32][33]); in Triton load the tile with its natural order and use tl.trans.",
            "Convert array-of-structs to struct-of-arrays so each field is contiguous.",
            "For gathers, sort or bucket the indices so neighbouring threads read neighbouring rows.",
        ),
        expected_gain=f"up to {min(worst, 8.0):.1f}x less memory traffic on the affected accesses",
        code_example="// strided (bad):  v = x[tid * stride];\n// coalesced:       v = x[blockIdx.x * blockDim.x + tid];",
        source="ncu",
    )


MEMORY_COALESCING = ProfilingTool(
    name="memory_coalescing", source="ncu", required=(GLD_SECTORS, GLD_REQUESTS),
    # excess = sectors fetched / sectors needed for the access width. 2x (e.g. 8 sectors/request for
    # 32-bit loads, half of each sector wasted) is the point where DRAM traffic doubles; 4x (16 sectors
    # for 32-bit loads, i.e. every thread in its own sector pair) is the classic strided pattern.
    thresholds={"high": 2.0, "critical": 4.0, "max_coalesced_sectors": 16.0},
    trigger=_coalescing_trigger, analyze=_coalescing_analyze,
    affinity=frozenset({"memory", "latency", "mixed"}),
    description="Global sectors/request against the ideal for the access width (l1tex sectors/requests, ld and st).",
)


# --- 4. vectorization -----------------------------------------------------------------------------


def _vector_evidence(p: Profile, th: Mapping[str, float]) -> dict[str, float] | None:
    """Evidence that global loads are narrower than 128 bits where wider loads would do."""
    k = _main(p)
    spr = sectors_per_request(k, "ld")
    if spr is None:
        return None
    ev: dict[str, float] = {"global_ld_sectors_per_request": round(spr, 2)}
    if num(k, GLD_REQUESTS) < th["min_requests"]:
        return None  # too little traffic to matter
    shares = stall_shares(k)
    if shares:
        # Narrow loads cost time only when warps wait on memory. Real H200 numbers: the `barrier_stall`
        # fixture has 32-bit loads (8448 requests, 0.4 % of DRAM peak) but 88 % barrier and < 1 %
        # long-scoreboard stalls: wider loads would change nothing, yet it fired. Every case where
        # the loads matter is far above 20 %: scalar_loads 82 %, the demo's poor SwiGLU 76 %,
        # gemm_ffma 76 % (lg_throttle 47 + long scoreboard 29), smem_occupancy 87 %.
        mem_stall = shares.get("long_scoreboard", 0.0) + shares.get("lg_throttle", 0.0)
        ev["memory_stall_pct"] = round(mem_stall, 1)
        if mem_stall < th["min_memory_stall_pct"]:
            return None
    sass = p.sass
    if sass is not None and sass.global_load_bits:
        total = sum(sass.global_load_bits.values())
        narrow = sum(c for b, c in sass.global_load_bits.items() if b < th["target_bits"])
        ev["narrow_load_share_pct"] = round(narrow / total * 100.0, 1)
        ev["load_width_bits"] = round(load_width_bits(p) or 0.0, 1)
        for b, c in sorted(sass.global_load_bits.items()):
            ev[f"sass_ldg_{b}bit"] = c
        if ev["narrow_load_share_pct"] < th["narrow_share_pct"]:
            return None
        # Narrow but uncoalesced loads are memory_coalescing's business, not a width problem.
        width = ev["load_width_bits"]
        if spr > 2 * max(width / 8.0, 1.0):
            return None
    else:
        # Without SASS: a coalesced warp request of w-bit loads spans w/8 sectors, so <= 4 sectors
        # per request means each thread moves at most 4 bytes per load instruction.
        if spr > th["narrow_sectors_per_request"]:
            return None
        ev["bytes_per_thread_per_load"] = round(spr, 1)  # spr sectors * 32 B / 32 threads
    dram = memory_pct(k)
    if dram is not None:
        ev["memory_throughput_pct"] = dram
    if k.get(GLD_INST) is not None:
        ev["global_load_instructions"] = num(k, GLD_INST)
    return ev


def _vector_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    ev = _vector_evidence(p, th)
    if ev is None:
        return None
    dram = ev.get("memory_throughput_pct")
    sev = "high" if dram is None or dram < th["saturated_memory_pct"] else "medium"
    # The width the evidence shows, not an assumed 32 bits: the demo's winner on the H200 (64-bit
    # loads) read "scalar (<= 32 bits); 4x" beside its own sass_ldg_64bit (session 21).
    width = float(ev.get("load_width_bits") or 8.0 * float(ev.get("bytes_per_thread_per_load", 4.0)))
    width = max(width, 8.0)
    factor = th["target_bits"] / width
    widths = sorted(p.sass.global_load_bits) if p.sass is not None else []
    what = f"{widths[0]}-bit" if len(widths) == 1 else f"{width:.0f} bits on average" if widths else f"{width:.0f}-bit"
    return Finding(
        tool="vectorization", severity=sev,
        title=f"Global loads are {what} per thread; {th['target_bits']:.0f}-bit loads would move {factor:.3g}x more "
              "per instruction",
        evidence=ev,
        root_cause=f"Each thread loads {width:.0f} bits per instruction, so the kernel needs {factor:.3g}x the load "
                   f"instructions, LSU requests and scoreboard entries of a {th['target_bits']:.0f}-bit "
                   f"({th['target_bits'] / 8:.0f}-byte) access; with few bytes in flight per warp, DRAM latency is not "
                   "hidden and bandwidth stays below peak.",
        recommendations=(
            "Triton: raise BLOCK_SIZE relative to num_warps so each thread owns >= 16 contiguous bytes (4 fp32, "
            "8 fp16/bf16, 16 fp8), e.g. BLOCK_SIZE=1024 with num_warps=4 (8 elements/thread); keep offsets "
            "provably contiguous and aligned (tl.multiple_of / tl.max_contiguous on offsets, sizes divisible by 16).",
            "CUDA: load 16 bytes per thread through reinterpret_cast on 16-byte aligned pointers (float4 for fp32; "
            "uint4 read as 4 __half2 or __nv_bfloat162 for fp16/bf16), with a scalar tail loop for the remainder.",
            "Keep tensors contiguous and 16-byte aligned (torch .contiguous(); cudaMalloc is 256-byte aligned).",
        ),
        expected_gain=f"up to {factor:.3g}x on memory-bound elementwise kernels ({factor:.3g}x fewer load instructions)",
        code_example=("# Triton\nBLOCK_SIZE, num_warps = 1024, 4\n"
                      "// CUDA, fp32 (fp16/bf16: uint4, 8 elements)\nfloat4 a = reinterpret_cast<const float4*>(x)[i]; "
                      "// i < n/4"),
        source="ncu",
    )


VECTORIZATION = ProfilingTool(
    name="vectorization", source="ncu", required=(GLD_SECTORS, GLD_REQUESTS),
    thresholds={"target_bits": 128, "narrow_share_pct": 50.0, "narrow_sectors_per_request": 4.5,
                "saturated_memory_pct": 60.0, "min_requests": 1024, "min_memory_stall_pct": 20.0},
    trigger=lambda p, th: _vector_evidence(p, th) is not None, analyze=_vector_analyze,
    affinity=frozenset({"memory", "latency", "mixed"}),
    description="32-bit global loads where 128-bit ones fit (sectors/request ~4, SASS LDG widths).",
)


# --- 5. occupancy ---------------------------------------------------------------------------------

MAX_WARPS_PER_SM = 64  # sm_90


def _occupancy_facts(p: Profile) -> dict[str, float | str]:
    k = _main(p)
    limits = {name: num(k, metric) for name, metric in OCC_LIMITS.items()}
    binding = binding_limiters(k)
    limiter = "+".join(binding)
    warps_per_block = max(1.0, -(-num(k, BLOCK_SIZE, 32.0) // 32))
    theoretical = k.get(THEORETICAL_OCC)
    if theoretical is None:
        theoretical = min(100.0, limits[binding[0]] * warps_per_block / MAX_WARPS_PER_SM * 100.0)
    facts: dict[str, float | str] = {
        "achieved_occupancy_pct": num(k, ACHIEVED_OCC), "theoretical_occupancy_pct": float(theoretical),
        "limiter": limiter, "blocks_per_sm": limits[binding[0]], "warps_per_block": warps_per_block,
        **{f"limit_{n}_blocks": v for n, v in limits.items()},
    }
    for name, label in ((REGS, "registers_per_thread"), (WAVES, "waves_per_sm")):
        v = k.get(name)
        if v is not None:
            facts[label] = float(v)
    smem = num(k, SMEM_STATIC) + num(k, SMEM_DYNAMIC)
    if smem:
        facts["shared_mem_per_block"] = smem
    return facts


def _occupancy_problem(p: Profile, th: Mapping[str, float]) -> str | None:
    f = _occupancy_facts(p)
    theo, ach = float(f["theoretical_occupancy_pct"]), float(f["achieved_occupancy_pct"])
    waves = f.get("waves_per_sm")
    if theo < th["high"]:
        return "theoretical"
    if isinstance(waves, float) and waves < th["min_waves"]:
        return "grid"
    if theo > 0 and ach / theo * 100.0 < th["achieved_ratio_pct"]:
        return "achieved"
    return None


_LIMITER_RECS = {
    "registers": (
        "Cut registers per thread: CUDA __launch_bounds__(threads, minBlocksPerSM) or -maxrregcount; "
        "Triton: fewer elements per thread (smaller BLOCK_SIZE per num_warps, smaller BLOCK_M/BLOCK_N tiles) "
        "or fewer num_stages.",
        "Split a long kernel body into phases so fewer values are live at once.",
    ),
    "shared_mem": (
        "Cut shared memory per block: Triton: lower num_stages or BLOCK_K; CUDA: smaller tiles, fewer "
        "pipeline stages, reuse one buffer for several phases.",
        "Request the large carve-out: cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100).",
    ),
    "blocks": (
        "Blocks are tiny: the SM holds at most 32 blocks, so small blocks cap the warps it can hold. Use >= 128 "
        "threads per block (CUDA) / num_warps >= 4 (Triton), doing more work per block.",
    ),
    "warps": (
        "Warps limit only when blocks are very large; use blocks of 128-256 threads so the last block of each "
        "SM is not refused for lack of a few warp slots.",
    ),
}


def _occupancy_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    problem = _occupancy_problem(p, th)
    if problem is None:
        return None
    f = _occupancy_facts(p)
    theo, ach = float(f["theoretical_occupancy_pct"]), float(f["achieved_occupancy_pct"])
    limiter = str(f["limiter"])
    if problem == "theoretical":
        sev = "critical" if theo < th["critical"] else "high"
        title = f"Occupancy capped at {theo:.0f}% by {limiter.replace('_', ' ')} ({f['blocks_per_sm']:.0f} blocks/SM)"
        cause = (f"The {limiter.replace('_', ' ')} limit lets only {f['blocks_per_sm']:.0f} blocks of "
                 f"{f['warps_per_block']:.0f} warps onto an SM ({theo:.0f}% of its 64 warp slots), so there are "
                 "too few warps to hide memory and pipeline latency.")
        recs = tuple(r for n in limiter.split("+") for r in _LIMITER_RECS.get(n, ())) + (
            "Alternatively increase per-warp ILP (several independent accumulators) if the lower occupancy is deliberate.",
        )
        gain = "1.3-3x for latency-bound kernels"
    elif problem == "grid":
        sev = "high"
        title = (
            f"The grid fills only {float(f['waves_per_sm']) * 100:.0f}% of one wave across the SMs"
        )
        cause = "Fewer blocks are launched than the GPU can run at once: SMs sit idle for the whole kernel."
        recs = (
            "Launch more, smaller blocks (Triton: smaller BLOCK_SIZE / BLOCK_M so the grid has >= 2x the 132 "
            "SMs' worth of programs); use split-K or a persistent kernel over a work queue for small problems.",
        )
        gain = "up to 1/(wave fraction)"
    else:
        sev = "medium"
        title = f"Achieved occupancy {ach:.0f}% is far below the theoretical {theo:.0f}%"
        waves = float(f.get("waves_per_sm") or 0.0)
        if waves >= th["many_waves"]:
            # The demo's winner on the H200 (124 waves per SM) was told its last partial wave might be
            # the cause (session 21): with that many waves the tail is at most 1/waves of the time.
            cause = (f"With {waves:.0f} waves of blocks per SM the last partial wave costs at most "
                     f"{100 / waves:.1f} % of the time, so the tail is not the cause: warps finish at different "
                     "times within each wave (imbalanced work per block), or blocks are so short that the SMs "
                     "retire them faster than new ones are launched, so fewer warps are resident than the limits allow.")
        else:
            cause = (
                "Warps finish at different times (imbalanced work per block), or the last partial wave leaves SMs "
                "half empty (tail effect), so fewer warps are resident than the limits allow."
            )
        recs = (
            "Balance work per block; make the grid a multiple of the SM count times blocks/SM, or use a "
            "persistent grid-stride loop (CUDA) / a persistent program loop over tiles (Triton).",
        )
        gain = "1.1-1.3x"
    return Finding(tool="occupancy", severity=sev, title=title, evidence=f, root_cause=cause,
                   recommendations=recs, expected_gain=gain,
                   code_example="__global__ void __launch_bounds__(256, 2) k(...)" if "registers" in limiter else None,
                   source="ncu")


OCCUPANCY = ProfilingTool(
    name="occupancy", source="ncu", required=(ACHIEVED_OCC, BLOCK_SIZE, *OCC_LIMITS.values()),
    thresholds={"critical": 25.0, "high": 50.0, "achieved_ratio_pct": 70.0, "min_waves": 1.0, "many_waves": 8.0},
    trigger=lambda p, th: _occupancy_problem(p, th) is not None, analyze=_occupancy_analyze,
    affinity=ALL_CLASSES,
    description="Theoretical/achieved occupancy and the binding launch__occupancy_limit_*.",
)


# --- 6. high_register_usage (Listing 2) -----------------------------------------------------------


def _regs_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    k = _main(p)
    regs = num(k, REGS, 32.0)
    if regs < th["warning"]:
        return None
    critical = regs >= th["critical"]
    ev: dict[str, float | str] = {"registers_per_thread": regs}
    binding = binding_limiters(k)
    if binding:
        ev["occupancy_limiter"] = "+".join(binding)
    local = num(k, LOCAL_LD_SECTORS) + num(k, LOCAL_ST_SECTORS)
    ev["local_memory_sectors"] = local
    return Finding(
        tool="high_register_usage", severity="high" if critical else "medium",
        title=f"{regs:.0f} registers/thread - may spill to local memory and limits occupancy",
        evidence=ev,
        root_cause="Register demand is close to the physical file: spills to local memory are 10-100x slower "
                   "than registers, and each extra register reduces the warps an SM can hold (65536 registers/SM).",
        recommendations=(
            "Guide the compiler: CUDA __launch_bounds__(maxThreads, minBlocks) or -maxrregcount=N; Triton: "
            "reduce the tile (BLOCK_M/BLOCK_N/BLOCK_K) or elements per thread, or lower num_stages.",
            "Shorten live ranges: recompute cheap values, avoid large per-thread arrays with dynamic indexing.",
            "Split the kernel or stage data in shared memory.",
        ),
        expected_gain="2-10x if it eliminates spilling; otherwise from the occupancy regained",
        code_example="__global__ void __launch_bounds__(256, 2) kernel(...);",
        source="ncu",
    )


HIGH_REGISTER_USAGE = ProfilingTool(
    name="high_register_usage", source="ncu", required=(REGS,),
    thresholds={"warning": 96.0, "critical": 128.0},
    trigger=lambda p, th: num(_main(p), REGS, 32.0) >= th["warning"], analyze=_regs_analyze,
    affinity=ALL_CLASSES, description="Registers per thread >= 96 (medium) / >= 128 (high), Listing 2.",
)


# --- 7. shared_bank_conflicts ---------------------------------------------------------------------


def bank_conflict_share(k: KernelProfile) -> tuple[float, dict[str, float]] | None:
    """Share (%) of shared-memory wavefronts that bank conflicts added, with the evidence.

    The denominator is the shared load/store wavefronts when collected (each conflict is an extra
    wavefront), else the shared load/store instructions (ideal: one wavefront each); None when there
    are no conflicts or no denominator.
    """
    conflicts = num(k, BANK_LD) + num(k, BANK_ST)
    if conflicts <= 0:
        return None
    ev = {"bank_conflicts_ld": num(k, BANK_LD), "bank_conflicts_st": num(k, BANK_ST)}
    wf_ld, wf_st = k.get(SHARED_WAVEFRONTS_LD), k.get(SHARED_WAVEFRONTS_ST)
    if wf_ld is not None and wf_st is not None and wf_ld + wf_st > 0:
        wavefronts = float(wf_ld + wf_st)
        ev["shared_wavefronts"] = wavefronts
    else:
        i_ld, i_st = k.get(SHARED_INST_LD), k.get(SHARED_INST_ST)
        if i_ld is None or i_st is None or i_ld + i_st <= 0:
            return None
        ev["shared_instructions"] = float(i_ld + i_st)
        wavefronts = float(i_ld + i_st) + conflicts
    share = min(conflicts / wavefronts * 100.0, 100.0)
    ev["conflict_wavefront_pct"] = round(share, 1)
    ev["avg_ways"] = round(wavefronts / max(wavefronts - conflicts, 1.0), 2)
    return share, ev


def _bank_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    r = bank_conflict_share(_main(p))
    if r is None or r[0] < th["medium"]:
        return None
    share, ev = r
    sev = (
        severity(share, {"critical": th["critical"], "high": th["high"], "medium": th["medium"]})
        or "medium"
    )
    return Finding(
        tool="shared_bank_conflicts", severity=sev,
        title=f"Shared-memory bank conflicts: {share:.0f}% of shared wavefronts are replays (~{ev['avg_ways']:.1f}-way)",
        evidence=ev,
        root_cause="Several threads of a warp address different 4-byte words in the same one of the 32 banks, so "
                   "the access is replayed once per conflicting word; typical for column access of a row-major "
                   "tile whose row length is a multiple of 32 words.",
        recommendations=(
            "Pad the shared array by one word per row (__shared__ float tile[32][33]) or XOR-swizzle the column "
            "index (col ^ row) so a column maps to 32 different banks.",
            "Triton: let tl.dot/the compiler choose shared layouts (avoid manual transposes via tl.reshape/"
            "tl.permute of shared tiles); on Hopper feed wgmma from TMA-swizzled (128B swizzle) tiles.",
            "Use ldmatrix / LDS.128 vector accesses laid out so a warp reads consecutive 16-byte chunks.",
        ),
        expected_gain=f"up to {ev['avg_ways']:.1f}x on shared-memory-bound phases",
        code_example="__shared__ float tile[32][33];  // +1 padding: column reads hit 32 banks",
        source="ncu",
    )


SHARED_BANK_CONFLICTS = ProfilingTool(
    name="shared_bank_conflicts", source="ncu", required=(BANK_LD, BANK_ST),
    thresholds={"medium": 10.0, "high": 25.0, "critical": 50.0},
    trigger=lambda p, th: (r := bank_conflict_share(_main(p))) is not None and r[0] >= th["medium"],
    analyze=_bank_analyze, affinity=ALL_CLASSES,
    description="l1tex shared-memory bank conflicts as a share of shared wavefronts (>= 10/25/50 %).",
)


# --- 8. tensor_core_underutilization --------------------------------------------------------------


def _tensor_util(k: KernelProfile) -> float | None:
    vals = [
        float(v)
        for v in (k.get(TENSOR_HMMA), k.get(TENSOR_GMMA), k.get(TENSOR_ANY))
        if v is not None
    ]
    return max(vals) if vals else None


def _tensor_evidence(p: Profile, th: Mapping[str, float]) -> dict[str, float] | None:
    k = _main(p)
    util = _tensor_util(k)
    if util is None or util >= th["low"]:
        return None
    sm = num(k, SM_THROUGHPUT)
    if sm < th["compute_busy_pct"]:
        return None  # the SMs are not busy: more math throughput would not help
    ev = {"tensor_pipe_utilization_pct": util, "sm_throughput_pct": sm}
    ffma, inst = k.get(FFMA_THREAD_INST), k.get(INST_EXECUTED)
    if ffma is not None and inst:
        share = float(ffma) / 32.0 / float(inst) * 100.0
        ev["ffma_share_of_instructions_pct"] = round(share, 1)
        if share < th["fma_share_pct"]:
            return None  # busy on something other than multiply-adds: not matmul-like
    return ev


def _tensor_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    ev = _tensor_evidence(p, th)
    if ev is None:
        return None
    return Finding(
        tool="tensor_core_underutilization", severity="critical",
        title=f"Compute-bound on CUDA cores: tensor pipes {ev['tensor_pipe_utilization_pct']:.1f}% busy "
              f"while the SMs are {ev['sm_throughput_pct']:.0f}% busy",
        evidence=ev,
        root_cause="The multiply-accumulate work runs as scalar FFMA on the CUDA cores; H200 tensor cores deliver "
                   "~15x the dense FP16/BF16 (and ~7x TF32) throughput of FP32 FFMA.",
        recommendations=(
            "Rewrite the matmul as a cuBLAS/CUTLASS GEMM (CUTLASS 3.x SM90 collective with wgmma) or, in Triton, "
            "express the inner product as tl.dot on BLOCK_M x BLOCK_K and BLOCK_K x BLOCK_N tiles (>= 16 each, "
            "64+ for wgmma) with fp16/bf16 inputs or allow_tf32/input_precision='tf32' for fp32.",
            "CUDA by hand: mma.sync / wmma fragments (HMMA), or wgmma.mma_async on sm_90a for full Hopper throughput.",
            "Use fp16/bf16 (or fp8 e4m3 on Hopper) operands with fp32 accumulation where the tolerance allows.",
        ),
        expected_gain="3-15x on the matmul portion",
        code_example="acc = tl.dot(a_tile, b_tile, acc)  # Triton: tensor cores (wgmma on sm_90a)",
        source="ncu",
    )


TENSOR_CORE_UNDERUTILIZATION = ProfilingTool(
    name="tensor_core_underutilization", source="ncu", required=(TENSOR_HMMA, SM_THROUGHPUT),
    thresholds={"low": 10.0, "compute_busy_pct": 50.0, "fma_share_pct": 10.0},
    trigger=lambda p, th: _tensor_evidence(p, th) is not None, analyze=_tensor_analyze,
    affinity=frozenset({"compute", "mixed"}),
    description="Tensor pipe utilisation < 10 % on a compute-bound, FFMA-heavy kernel.",
)


TOOLS = (WARP_STALL, BARRIER_STALL, MEMORY_COALESCING, VECTORIZATION, OCCUPANCY, HIGH_REGISTER_USAGE,
         SHARED_BANK_CONFLICTS, TENSOR_CORE_UNDERUTILIZATION)
