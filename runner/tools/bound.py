"""Four tools over what bounds the kernel as written, against what should bound it (issue 23).

The paper's tools look for one pattern each (a stall, a spill, an access width). A kernel engineer
first asks something coarser: does the kernel do the work the math needs, on the whole GPU? These
tools answer that from the same ncu launch, and, where the target has flops/bytes formulas
(Profile.work), against the useful work:

- ``bound_mismatch``: Stage 1's two views disagree (the roofline says memory-bound, ncu says the
  issue slots or one pipe saturate; or the grid leaves SMs idle): the first thing to fix.
- ``instruction_overhead``: executed instructions per useful byte or FLOP, against what a
  vectorised kernel needs (serial per-element loops, masked lanes, recomputed indices).
- ``too_few_programs``: the grid against SMs x programs resident per SM.
- ``tail_effect``: the last partial wave of programs leaves slots idle.
- ``serial_dependency``: each warp walks a long chain of dependent instructions (a per-program loop
  whose iterations wait on each other) with too few warps beside it to hide the chain's latency.
- ``excess_traffic``: the bytes DRAM moved against the bytes the formulas say the call must move
  (strided or random access fetching whole sectors, operands re-read instead of reused on chip).

Thresholds come from the H200 recordings in tests/fixtures/h200 (the numbers are at each tool).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..evidence import KernelProfile, Profile, Work
from ..roofline import current_bound
from . import ALL_CLASSES, Finding, ProfilingTool
from .counters import (
    ACHIEVED_OCC,
    BLOCK_SIZE,
    ELIGIBLE,
    INST_EXECUTED,
    THEORETICAL_OCC,
    WAVES,
    binding_limiters,
    stall_metric,
    stall_shares,
)

GRID = "launch__grid_size"
SM_THROUGHPUT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"


def _main(p: Profile) -> KernelProfile:
    k = p.main
    assert k is not None  # available() guarantees it for ncu tools
    return k


def _work(p: Profile) -> Work:
    assert p.work is not None  # needs_work guarantees it
    return p.work


def _useful_units(w: Work) -> float:
    """Useful work in 'units': one per 4-byte word the call must move, one per FLOP it must do."""
    return (w.bytes or 0.0) / 4.0 + (w.flops or 0.0)


def _slots(k: KernelProfile) -> float | None:
    """Thread-instruction issue slots: warp instructions x 32 (a masked lane costs its slot too)."""
    v = k.get(INST_EXECUTED)
    return None if v is None else float(v) * 32.0


def _per_unit(p: Profile) -> float | None:
    slots, units = _slots(_main(p)), _useful_units(_work(p))
    return slots / units if slots is not None and units > 0 else None


# --- 1. bound_mismatch ----------------------------------------------------------------------------


def _mismatch(p: Profile) -> tuple[str, str] | None:
    """(title, root cause) when the ideal and the current bound disagree; None when they agree."""
    w, cur = _work(p), current_bound(_main(p))
    ideal = w.ideal
    if cur.bound == "parallelism":
        return (f"grid of {cur.grid} programs on {cur.sms} SMs: {cur.sms - (cur.grid or 0)} SMs get no work",
                "The launch makes fewer programs than the GPU has SMs, so part of the chip never runs; the ideal "
                f"kernel is {ideal}-bound over the whole GPU.")
    if ideal == "memory" and cur.bound in ("issue", "pipe", "compute"):
        what = {"issue": "issue-bound", "pipe": f"bound by its {cur.pipe} pipe", "compute": "compute-bound"}[cur.bound]
        ratio = _per_unit(p)
        more = f": {ratio:.1f} thread-instructions per 4-byte word or FLOP of useful work" if ratio else ""
        return (f"should be memory-bound, is {what}{more}",
                f"The formulas make this kernel memory-bound (it must move {(w.bytes or 0) / 1e6:.4g} MB and do "
                f"{(w.flops or 0) / 1e6:.4g} MFLOP), but ncu sees the SM busier than memory ({cur.note}): the kernel "
                "executes far more instructions than moving its bytes needs.")
    if ideal in ("memory", "compute") and cur.bound == "latency":
        return (f"should be {ideal}-bound, reaches neither roof",
                f"The formulas make this kernel {ideal}-bound, but ncu sees {cur.note}: too little work in flight "
                "(few programs or warps, dependent loads, a serial loop) to saturate either roof.")
    if ideal == "compute" and cur.bound == "memory":
        return ("should be compute-bound, is memory-bound",
                f"The formulas make this kernel compute-bound, but ncu sees {cur.note}: operands are re-read from "
                "memory instead of reused from registers or shared memory (no tiling, or tiles too small).")
    return None


def _mismatch_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    m = _mismatch(p)
    if m is None:
        return None
    title, cause = m
    w, cur = _work(p), current_bound(_main(p))
    pct = 100.0 * w.floor_ms / w.measured_ms if w.floor_ms and w.measured_ms else None
    sev = "critical" if pct is not None and pct < th["critical_pct_of_roofline"] else "high"
    recs = {
        "parallelism": ("Launch at least one program per SM, better several: split the work along another axis "
                        "(rows x column blocks, split-K), or shrink the block so the grid grows.",
                        "If each program walks its data in a loop, give each program one tile instead and let the "
                        "grid cover the data."),
        "latency": ("Put more independent work in flight: more programs (smaller tiles over a larger grid), "
                    "vector loads of several elements per thread, software pipelining of loads.",
                    "Replace per-element loops inside a program with block-wide tile operations."),
    }.get(cur.bound, ("Process whole tiles per program with block-wide operations (Triton: tl.load of a "
                      "BLOCK-wide range, tl.sum/tl.max over it; CUDA: one element per thread, 128-bit loads) "
                      "instead of a scalar per-element loop.",
                      "Remove per-element index arithmetic and masks: power-of-two blocks, masks only on the last "
                      "block, strides as constexpr where the layout is fixed."))
    ev: dict[str, object] = {"ideal_bound": w.ideal, "current_bound": cur.bound, "current_evidence": cur.note,
                             "compute_pct": cur.compute_pct, "memory_pct": cur.memory_pct, "issue_pct": cur.issue_pct,
                             "grid": cur.grid, "sms": cur.sms, "waves": cur.waves}
    if pct is not None:
        ev["pct_of_roofline"] = round(pct, 3)
    if w.max_speedup is not None:
        ev["est_speedup"] = round(w.max_speedup, 2)
    return Finding(
        tool="bound_mismatch", severity=sev, title=title,
        evidence={k: v for k, v in ev.items() if v is not None}, root_cause=cause, recommendations=recs,
        expected_gain="" if w.max_speedup is None else f"up to {w.max_speedup:.2f}x if the kernel reaches its ideal bound",
        source="ncu",
    )


BOUND_MISMATCH = ProfilingTool(
    name="bound_mismatch", source="ncu",
    required=("sm__throughput.avg.pct_of_peak_sustained_elapsed",),
    # critical below 25 % of the roofline: the issue's serial-loop kernel ran at 0.4 %, the demo's poor
    # SwiGLU launch at 23 % (0.74 ms of 0.17 ms floor on M=4096).
    thresholds={"critical_pct_of_roofline": 25.0},
    trigger=lambda p, th: _mismatch(p) is not None, analyze=_mismatch_analyze,
    affinity=ALL_CLASSES, needs_work=True,
    description="The roofline's bound (formulas) and ncu's bound of the kernel as written disagree.",
)


# --- 2. instruction_overhead ----------------------------------------------------------------------

# What a vectorised kernel needs per unit of useful work, measured on the H200: the float4 copy
# `clean` 2.5 thread-instructions per 4-byte word, the tuned demo SwiGLU 2.6 per word-or-FLOP.
_LEAN = 4.0


def _overhead_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    ratio = _per_unit(p)
    if ratio is None or ratio < th["medium"]:
        return None
    k, w = _main(p), _work(p)
    sev = "critical" if ratio >= th["critical"] else "high" if ratio >= th["high"] else "medium"
    cur = current_bound(k)
    compute, memory = cur.compute_pct or 0.0, cur.memory_pct or 0.0
    ev: dict[str, object] = {
        "thread_instructions": _slots(k), "warp_instructions": k.get(INST_EXECUTED),
        "useful_bytes": w.bytes, "useful_flops": w.flops, "per_useful_unit": round(ratio, 2),
        "lean_per_unit": _LEAN, "arithmetic": f"{k.get(INST_EXECUTED):.4g} warp inst x 32 / ({(w.bytes or 0):.4g} B / 4 "
                                              f"+ {(w.flops or 0):.4g} FLOP) = {ratio:.2f} per unit",
    }
    # Fewer instructions make the kernel faster only where the instructions are what limits it.
    if compute >= memory:
        ev["est_speedup"] = round(ratio / _LEAN, 2)
    return Finding(
        tool="instruction_overhead", severity=sev,
        title=f"{ratio:.1f} thread-instructions per useful 4-byte word or FLOP ({ratio / _LEAN:.1f}x a lean kernel)",
        evidence=ev,
        root_cause="The kernel executes many more instructions than its useful work needs: a serial loop over "
                   "elements inside each program, masked-off lanes (a block smaller than the program's threads), "
                   "recomputed indices and bounds checks, or scalar loads where one vector load would do.",
        recommendations=(
            "Make one program process a whole tile with block-wide operations (Triton: BLOCK_SIZE >= 32 x num_warps "
            "elements per program so no lane is masked, tl.load/tl.store of the tile; CUDA: one element or one "
            "128-bit vector per thread) instead of a per-element loop.",
            "Hoist index and mask arithmetic out of loops; use 128-bit loads (float4, tl.load of contiguous "
            "tiles with tl.multiple_of hints).",
            "Check SASS for the loop body: every instruction in it runs once per element.",
        ),
        expected_gain=(f"up to {ratio / _LEAN:.2f}x if the kernel is instruction-bound (ncu: compute {compute:.3g} % "
                       f">= memory {memory:.3g} %)" if "est_speedup" in ev else
                       "fewer issued instructions; the kernel is memory-bound, so speed follows only if it becomes "
                       "instruction-bound"),
        source="ncu",
    )


INSTRUCTION_OVERHEAD = ProfilingTool(
    name="instruction_overhead", source="ncu", required=(INST_EXECUTED,),
    # Real H200: clean copy 2.5, tuned SwiGLU 2.6 (quiet); the poor SwiGLU (BLOCK_SIZE 64 over 256 threads:
    # 3 of 4 lanes masked) 20.9 (high).
    thresholds={"medium": 8.0, "high": 16.0, "critical": 64.0},
    trigger=lambda p, th: (_per_unit(p) or 0.0) >= th["medium"], analyze=_overhead_analyze,
    affinity=ALL_CLASSES, needs_work=True,
    description="Executed thread-instructions per useful 4-byte word or FLOP (formulas) > 8/16/64.",
)


# --- 3. too_few_programs --------------------------------------------------------------------------


def _programs(p: Profile) -> tuple[int, int, float | None]:
    b = current_bound(_main(p))
    return b.grid or 0, b.sms, b.waves


def _few_trigger(p: Profile, th: Mapping[str, float]) -> bool:
    grid, sms, waves = _programs(p)
    if grid <= 0:
        return False
    if grid < sms:
        return True
    b = current_bound(_main(p))
    busiest = max(b.compute_pct or 0.0, b.memory_pct or 0.0)
    # Room for more resident programs matters only while neither roof is near: the real pointer_chase
    # (0.25 waves) and spills (0.5 waves) cases already keep memory 80 % busy.
    return waves is not None and waves < th["waves"] and busiest < th["busy_pct"]


def _few_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    grid, sms, waves = _programs(p)
    k = _main(p)
    b = current_bound(k)
    resident = grid / waves / sms if waves else None  # programs one SM can hold at once
    ev: dict[str, object] = {"grid": grid, "sms": sms, "sms_source": b.sms_source, "waves": waves,
                             "block_size": b.block, "achieved_occupancy_pct": b.achieved_occupancy_pct}
    if resident:
        ev["programs_per_sm_possible"] = round(resident, 1)
    if binding_limiters(k):
        ev["occupancy_limited_by"] = ", ".join(binding_limiters(k))
    if grid < sms:
        sev = "critical" if grid * 4 <= sms else "high"
        ev["est_speedup"] = round(sms / grid, 2)
        title = f"grid of {grid} programs on {sms} SMs: {sms - grid} SMs idle"
        gain = f"up to {sms / grid:.2f}x ({sms} SMs / {grid} programs) if the work spreads over every SM"
    else:
        sev = "medium"
        title = f"grid of {grid} programs fills {100 * (waves or 0):.3g} % of what {sms} SMs hold at once"
        gain = "more warps in flight to hide latency; the gain depends on how latency-bound the kernel is"
    return Finding(
        tool="too_few_programs", severity=sev, title=title, evidence=ev,
        root_cause="Too few programs for the GPU: each SM runs at most a few programs, so with a small grid "
                   "most SMs (or most of each SM's warp slots) sit idle and nothing hides memory latency. "
                   "Typical causes: one program per row of a short batch, a loop inside each program over what "
                   "could be a grid axis, or very large blocks.",
        recommendations=(
            "Grow the grid: one program per tile instead of per row (2-D grid over rows x column blocks), "
            "split-K / split reductions with a second pass, or smaller BLOCK sizes.",
            "Make the kernel persistent only when the grid is large; for small problems prefer more, smaller programs.",
            "If the problem is genuinely tiny, fuse it with its neighbours so one launch has enough work.",
        ),
        expected_gain=gain, source="ncu",
    )


TOO_FEW_PROGRAMS = ProfilingTool(
    name="too_few_programs", source="ncu", required=(GRID, WAVES, SM_THROUGHPUT),
    thresholds={"waves": 0.5, "busy_pct": 60.0},
    trigger=_few_trigger, analyze=_few_analyze, affinity=ALL_CLASSES,
    description="Grid smaller than the SM count, or < 0.5 waves while neither roof is above 60 %.",
)


# --- 4. tail_effect -------------------------------------------------------------------------------


def _tail_idle(p: Profile) -> float:
    """Share of program slots idle over the kernel when every program takes as long: the last wave is partial."""
    waves = _main(p).get(WAVES)
    if waves is None or waves < 1.0:
        return 0.0  # below one wave it is too_few_programs' case
    full = math.ceil(round(waves, 2))
    return (full - waves) / full if full else 0.0


def _tail_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    idle = _tail_idle(p)
    if idle * 100 < th["medium_pct"]:
        return None
    waves = float(_main(p).get(WAVES) or 0.0)
    full = math.ceil(round(waves, 2))
    grid, sms, _ = _programs(p)
    return Finding(
        tool="tail_effect", severity="high" if idle * 100 >= th["high_pct"] else "medium",
        title=f"{waves:.2f} waves of programs: the last wave runs {100 * (waves - full + 1):.0f} % full",
        evidence={"waves": waves, "grid": grid, "sms": sms, "idle_slot_pct": round(100 * idle, 1),
                  "est_speedup": round(full / waves, 2),
                  "arithmetic": f"({full} - {waves:.2f}) / {full} = {100 * idle:.1f} % of program slots idle"},
        root_cause="The grid is a few waves of programs and the last one is partial: while it runs, the other "
                   "SM slots have nothing to do (the tail effect).",
        recommendations=(
            "Pick the tile size so the grid is a whole number of waves, or many waves (then the tail is small).",
            "Use a persistent kernel (one program per SM slot looping over tiles) or stream-K/split-K so the "
            "last tiles are shared across SMs.",
        ),
        expected_gain=f"up to {full / waves:.2f}x ({full} / {waves:.2f} waves) if the last wave were full",
        source="ncu",
    )


TAIL_EFFECT = ProfilingTool(
    name="tail_effect", source="ncu", required=(WAVES,),
    # Real H200: gemm_wmma 2.59 waves -> 13.7 % idle (fires); clean 15.52 -> 3 %, smem_occupancy 3.88 -> 3 %,
    # exact waves (harmless_spills 2.0, barrier_stall 1.0) -> 0 (quiet).
    thresholds={"medium_pct": 10.0, "high_pct": 25.0},
    trigger=lambda p, th: _tail_idle(p) * 100 >= th["medium_pct"], analyze=_tail_analyze,
    affinity=ALL_CLASSES, description="Partial last wave of programs idles >= 10 %/25 % of the slots.",
)


# --- 5. serial_dependency -------------------------------------------------------------------------

WARP_LATENCY = "smsp__average_warp_latency_per_inst_issued.ratio"
CLOCK = "sm__cycles_elapsed.avg.per_second"
WARPS_PER_SCHEDULER = 16  # sm_90: 64 warp slots per SM over 4 schedulers (SMSPs)
_DEPENDENCY = ("long_scoreboard", "short_scoreboard", "wait")
"""Stalls of an instruction waiting on an earlier one's result: memory, MIO and fixed-latency operands."""


def _chain(p: Profile) -> dict[str, object] | None:
    """What one warp's dependency chain looks like in the counters; None when a counter is missing."""
    k = _main(p)
    b = current_bound(k)
    inst, grid, block, cpi, occ = (k.get(n) for n in (INST_EXECUTED, GRID, BLOCK_SIZE, WARP_LATENCY, ACHIEVED_OCC))
    if inst is None or not grid or not block or cpi is None or occ is None:
        return None
    shares = stall_shares(k)
    warps = float(grid) * math.ceil(float(block) / 32.0)
    per_warp = float(inst) / warps
    facts: dict[str, object] = {
        "compute_pct": b.compute_pct, "memory_pct": b.memory_pct, "issue_pct": b.issue_pct,
        "dependency_stall_pct": round(sum(shares.get(r, 0.0) for r in _DEPENDENCY), 1),
        "top_stall": max(shares, key=lambda r: shares[r]) if shares else "",
        "cycles_between_issues_per_warp": round(float(cpi), 1),
        "warp_instructions_per_warp": round(per_warp, 1),
        "warps_per_scheduler": round(float(occ) / 100.0 * WARPS_PER_SCHEDULER, 2),
        "eligible_warps_per_cycle": k.get(ELIGIBLE),
        "theoretical_occupancy_pct": k.get(THEORETICAL_OCC),
        "achieved_occupancy_pct": float(occ),
    }
    clock = k.get(CLOCK)
    if clock:
        # A warp's lifetime is its instructions times the cycles between two of them.
        facts["warp_chain_us"] = round(per_warp * float(cpi) / float(clock) * 1e6, 2)
        facts["arithmetic"] = (f"{per_warp:.4g} instructions per warp x {float(cpi):.3g} cycles between issues / "
                               f"{float(clock) / 1e9:.3g} GHz = {facts['warp_chain_us']} us per warp")
    dur = k.get("gpu__time_duration.sum")
    if dur:
        facts["kernel_us"] = round(float(dur) / 1e3, 2)
    if p.sass is not None:
        facts["sass_backward_branches"] = p.sass.backward_branches
    return facts


def _chain_holds(f: Mapping[str, object], th: Mapping[str, float]) -> bool:
    def num(name: str) -> float:
        v = f.get(name)
        return float(v) if isinstance(v, (int, float)) else 0.0

    theoretical = f.get("theoretical_occupancy_pct")
    return (
        max(num("compute_pct"), num("memory_pct")) < th["busy_pct"]  # neither roof near: latency-bound
        and num("dependency_stall_pct") >= th["dependency_pct"]  # warps wait on earlier results
        and num("warp_instructions_per_warp") >= th["min_inst_per_warp"]  # a long per-warp stream: a loop
        and num("warps_per_scheduler") <= th["max_warps_per_scheduler"]  # few warps to hide each wait
        # Nothing ready in most cycles. Not lower: ptxas unrolls a scalar Triton loop by 4 (4 loads, then 4
        # dependent adds), so 2 warps per scheduler still issue in about a quarter of the cycles.
        and num("eligible_warps_per_cycle") < th["eligible"]
        # A launch whose resources cap the warps is occupancy's finding (smem_occupancy), not a chain.
        and (theoretical is None or float(theoretical) >= th["min_theoretical_pct"])  # type: ignore[arg-type]
        and f.get("sass_backward_branches", 1) != 0  # with SASS: straight-line code is no serial loop
    )


def _chain_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    f = _chain(p)
    if f is None or not _chain_holds(f, th):
        return None
    busiest_name, busiest = max((("memory", float(f["memory_pct"] or 0.0)),  # type: ignore[arg-type]
                                 ("compute", float(f["compute_pct"] or 0.0))), key=lambda x: x[1])  # type: ignore[arg-type]
    busiest = max(busiest, 1.0)  # a roof under 1 % would promise 100x+ on noise
    sev = "critical" if busiest < th["critical_busy_pct"] else "high" if busiest < th["high_busy_pct"] else "medium"
    ev = {k: v for k, v in f.items() if v is not None}
    # Hiding the waits with the same instructions cannot beat the busiest unit. The usual fix (a tile per
    # program) also removes the per-element instructions, so this is no ceiling on the fix: the roofline
    # is, and no est_speedup is claimed (bound_finding then states Stage 1's bound beside this one).
    hide = 100.0 / busiest
    arith = f"100 % / {busiest:.3g} % ({busiest_name}, the busiest unit) = {hide:.2f}x"
    cap = p.work.max_speedup if p.work is not None else None
    if cap is not None and cap > 0 and cap < hide:
        arith = f"min({arith}, {cap:.2f}x from Stage 1) = {cap:.2f}x"
        hide = cap
    ev["latency_hiding_speedup"] = round(hide, 2)
    ev["latency_hiding_arithmetic"] = arith
    per_warp, cpi = float(f["warp_instructions_per_warp"]), float(f["cycles_between_issues_per_warp"])  # type: ignore[arg-type]
    return Finding(
        tool="serial_dependency", severity=sev,
        title=(f"serial dependency chain: each warp runs {per_warp:.3g} instructions, one every {cpi:.0f} cycles, "
               f"with {f['warps_per_scheduler']} warps per scheduler to hide the waits"),
        evidence=ev,
        root_cause=(f"Each program walks its data in a loop whose iterations wait on each other (an accumulator, a "
                    f"running state, a load whose address or use follows the previous one): {f['dependency_stall_pct']} % "
                    f"of the warps' stall cycles wait on an earlier result (top: {f['top_stall']}), and with only "
                    f"{f['warps_per_scheduler']} warps per scheduler nothing else is ready to issue "
                    f"({f['eligible_warps_per_cycle']:.3g} eligible warps per cycle). Neither roof is near (compute "
                    f"{f['compute_pct']} %, memory {f['memory_pct']} %): the kernel's time is the length of its "
                    "chains, not its work."),
        recommendations=(
            "Spread the loop over the lanes: give each program a tile and reduce it with block-wide operations "
            "(Triton: acc of BLOCK elements, acc += tl.load(ptr + start + tl.arange(0, BLOCK)), tl.sum(acc) after "
            "the loop; CUDA: each thread a strided subset, then a warp-shuffle or block reduction) instead of one "
            "element per iteration.",
            "Break the chain inside a thread: several independent accumulators (unroll by 4-8 and sum them at the "
            "end) and loads for the next iterations issued before the current result is used (Triton: "
            "tl.range(..., num_stages=3) or loop_unroll_factor; CUDA: #pragma unroll with independent partial sums).",
            "If the recurrence is truly sequential (scan, RNN or SSM state), split it: a chunked scan (each chunk "
            "scanned in parallel, then one pass over the chunk carries), or put independent sequences "
            "(batch x channel) on separate lanes and programs.",
            "More programs: split the loop axis across the grid (split-K style partial results and a second pass "
            "or atomics) so more warps share each SM.",
        ),
        expected_gain=(f"up to {hide:.2f}x from hiding the waits with the same instructions ({arith}); a tile "
                       "per program also removes the per-element instructions, so the fix can reach the roofline"),
        code_example=("acc = tl.zeros((BLOCK,), tl.float32)\n"
                      "for start in range(0, n, BLOCK):\n"
                      "    acc += tl.load(row + start + offs, mask=start + offs < n, other=0.0)\n"
                      "tl.store(out + pid, tl.sum(acc))"),
        source="ncu",
    )


SERIAL_DEPENDENCY = ProfilingTool(
    name="serial_dependency", source="ncu",
    required=(INST_EXECUTED, GRID, BLOCK_SIZE, WARP_LATENCY, ACHIEVED_OCC, ELIGIBLE, SM_THROUGHPUT,
              stall_metric("long_scoreboard")),
    # Real H200 controls stay out on one condition each at least: clean/tuned/uncoalesced are memory-bound
    # (74-84 %), pointer_chase is 61 % memory-busy, smem_occupancy's warps are capped by shared memory
    # (theoretical 12.5 %), spills/harmless_spills keep 7.7/14.7 warps per scheduler, barrier_stall waits on
    # barriers (dependency 8.6 %), triton_wgmma issues from a 25 % theoretical occupancy with 23 % dependency.
    thresholds={"busy_pct": 40.0, "dependency_pct": 60.0, "min_inst_per_warp": 256.0,
                "max_warps_per_scheduler": 4.0, "eligible": 0.5, "min_theoretical_pct": 50.0,
                "critical_busy_pct": 10.0, "high_busy_pct": 25.0},
    trigger=lambda p, th: (f := _chain(p)) is not None and _chain_holds(f, th), analyze=_chain_analyze,
    affinity=ALL_CLASSES,
    description="Latency-bound long per-warp loop: dependency stalls >= 60 %, <= 4 warps per scheduler, neither roof >= 40 %.",
)


# --- 6. excess_traffic ----------------------------------------------------------------------------

DRAM_READ, DRAM_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"


def _traffic(p: Profile) -> tuple[float, float, float] | None:
    """(DRAM bytes read, written, useful bytes of the formula); None without them."""
    k, w = _main(p), _work(p)
    r, wr = k.get(DRAM_READ), k.get(DRAM_WRITE)
    if r is None or not w.bytes:
        return None
    return float(r), float(wr or 0.0), float(w.bytes)


def _traffic_ratio(p: Profile) -> float:
    t = _traffic(p)
    # Writes can read low (dirty lines still in L2 when the kernel ends): that only makes the tool quieter.
    return (t[0] + t[1]) / t[2] if t else 0.0


def _traffic_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    t = _traffic(p)
    ratio = _traffic_ratio(p)
    if t is None or ratio < th["medium"]:
        return None
    read, write, useful = t
    cur = current_bound(_main(p))
    sev = "critical" if ratio >= th["critical"] else "high" if ratio >= th["high"] else "medium"
    ev: dict[str, object] = {
        "dram_read_bytes": read, "dram_write_bytes": write, "useful_bytes": useful, "traffic_ratio": round(ratio, 2),
        "arithmetic": f"({read:.4g} B read + {write:.4g} B written) / {useful:.4g} B the formula needs = {ratio:.2f}x",
        "current_bound": cur.bound,
    }
    # Time follows DRAM bytes only where DRAM is what limits the kernel.
    if cur.bound == "memory":
        ev["est_speedup"] = round(ratio, 2)
    return Finding(
        tool="excess_traffic", severity=sev,
        title=f"DRAM moves {ratio:.1f}x the bytes the call needs ({(read + write) / 1e6:.4g} MB for {useful / 1e6:.4g} MB)",
        evidence=ev,
        root_cause="The kernel fetches data it does not use or fetches the same data several times: strided or "
                   "random accesses pull whole 32-byte sectors for a few useful bytes, lines are evicted before "
                   "their neighbours are read, or operands are re-read from memory by every program instead of "
                   "being reused from shared memory or registers.",
        recommendations=(
            "Read each input once, contiguously: consecutive lanes on consecutive addresses (transpose through a "
            "shared-memory tile when the layout is strided), and keep a row in registers or shared memory across "
            "passes (softmax, norms) instead of reading it again.",
            "Reuse operands on chip: tile so each program loads a block once and reuses it (Triton: larger "
            "BLOCK_M/BLOCK_N for tl.dot, grouped program order (GROUP_M) so neighbouring programs share L2 lines).",
            "If the kernel must gather (indices, pointer chasing), sort or bucket the indices so a warp's accesses "
            "share sectors.",
            "If the traffic is genuinely needed, the `bytes` formula in .kernelpro.yml is too low: fix it so Stage 1 "
            "bounds the right floor.",
        ),
        expected_gain=(f"up to {ratio:.2f}x ({ev['arithmetic']}) if DRAM traffic falls to what the formula needs"
                       if "est_speedup" in ev else
                       f"less DRAM traffic and energy; the kernel is {cur.bound}-bound as written, so speed follows "
                       "only where memory becomes the limit"),
        source="ncu",
    )


EXCESS_TRAFFIC = ProfilingTool(
    name="excess_traffic", source="ncu", required=(DRAM_READ,),
    # Real H200, with each kernel's own formula: the float4 and 32-bit copies move 0.83x/0.86x, the demo
    # SwiGLU 0.94x (quiet); the strided copy 8.4x and the pointer chase 9.6x (fire).
    thresholds={"medium": 1.5, "high": 3.0, "critical": 8.0},
    trigger=lambda p, th: _traffic_ratio(p) >= th["medium"], analyze=_traffic_analyze,
    affinity=ALL_CLASSES, needs_work=True,
    description="DRAM bytes read + written against the `bytes` formula >= 1.5x/3x/8x.",
)


TOOLS = (BOUND_MISMATCH, INSTRUCTION_OVERHEAD, TOO_FEW_PROGRAMS, TAIL_EFFECT, SERIAL_DEPENDENCY, EXCESS_TRAFFIC)
