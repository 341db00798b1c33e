"""The five tools over the launch timeline of one call (torch.profiler/CUPTI; the paper used nsys)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ..evidence import Profile, Timeline
from . import ALL_CLASSES, Finding, ProfilingTool


def _tl(p: Profile) -> Timeline:
    assert p.timeline is not None  # available() guarantees it for timeline tools
    return p.timeline


def _kernel_list(t: Timeline) -> str:
    counts = Counter(t.kernels)
    return ", ".join(f"{name} x{n}" if n > 1 else name for name, n in counts.items())


# --- 1. launch_overhead (LaunchOverheadDetector) --------------------------------------------------


def _launch_fires(t: Timeline, th: Mapping[str, float]) -> bool:
    # One launch per call has no launches to merge: its non-kernel time is the host's own work after
    # the launch (the wrapper's Python, and the harness's call around it, which the timeline cannot
    # tell apart: a real H200 single-kernel call read 29 % with 182 us of kernel in 840 us of wall).
    # It is worth a finding only when that host work is longer than the kernel itself (over half the
    # span), so that even a pipelined caller leaves the GPU idle.
    if t.kernel_launches < 1:
        return False
    return t.launch_overhead_pct > (th["single_launch"] if t.kernel_launches == 1 else th["high"])


def _host_bound(t: Timeline, th: Mapping[str, float]) -> Finding:
    pct = t.launch_overhead_pct
    host_us = pct / 100.0 * t.kernel_us / max(1.0 - pct / 100.0, 0.01)
    speedup = 1.0 / (1.0 - min(pct, 99.0) / 100.0)
    return Finding(
        tool="launch_overhead", severity="medium",
        title=f"one kernel per call, but the host works {host_us:.1f} us per call after launching {t.kernel_us:.1f} us "
              "of kernel (host-bound call)",
        evidence={"launch_overhead_pct": pct, "wall_us": t.wall_us, "kernel_us": t.kernel_us,
                  "host_us_after_launch": round(host_us, 1), "kernel_launches": 1,
                  "est_speedup": round(speedup, 2),
                  "arithmetic": f"1 / (1 - {pct:.3g} %) = {speedup:.2f}x if the host work after the launch vanished"},
        root_cause="There is a single launch, so nothing to fuse or batch: the time is host-side Python around the "
                   "launch (grid and meta-parameter computation, autotune/heuristics lookups, output allocation, "
                   "argument checks), and part of it may be the harness's own call. A caller that launches back to "
                   "back waits on it whenever it is longer than the kernel.",
        recommendations=(
            "Cache everything computed per call from shapes alone: the grid lambda's result, strides, "
            "meta-parameters and heuristics results (functools.lru_cache keyed on the shapes).",
            "Avoid per-call allocations and copies in the wrapper: no torch.empty/zeros of scratch buffers or "
            ".contiguous() on every call; let the caller pass the output (destination-passing style).",
            "Keep checks that need no data (shapes, dtypes) cheap, and none that synchronise (.item(), .cpu()).",
        ),
        expected_gain=f"up to {speedup:.2f}x for callers that launch back to back (1 / (1 - {pct:.3g} %))",
        source="timeline",
    )


def _launch_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    t = _tl(p)
    pct = t.launch_overhead_pct
    if not _launch_fires(t, th):
        return None
    if t.kernel_launches == 1:
        return _host_bound(t, th)
    speedup = 1.0 / (1.0 - min(pct, 99.0) / 100.0)
    return Finding(
        tool="launch_overhead", severity="critical" if pct > th["critical"] else "high",
        title=f"{pct:.0f}% of the call's time from its first launch on runs no kernel (launch overhead)",
        evidence={"launch_overhead_pct": pct, "wall_us": t.wall_us, "kernel_us": t.kernel_us,
                  **({"span_us": round(t.span_us, 1)} if t.span_us > 0 else {}),
                  "kernel_launches": t.kernel_launches, "avg_launch_ns": t.avg_launch_ns,
                  "est_speedup": round(speedup, 2)},
        root_cause="The GPU finishes each kernel faster than the host can launch the next: Python dispatch, "
                   "argument packing and cudaLaunchKernel (a few us each) dominate, so the GPU idles.",
        recommendations=(
            "Capture the call in a CUDA Graph (torch.cuda.CUDAGraph / torch.compile(mode='reduce-overhead'); CUDA: "
            "cudaStreamBeginCapture ... cudaGraphLaunch) so one launch replays all kernels.",
            "Fuse the kernels into one (one Triton program doing all elementwise steps; CUDA: a single kernel with "
            "the epilogue fused) so there is one launch per call.",
            "Do more work per launch (batch several problems, persistent kernel) and keep host-side Python out "
            "of the hot path (cache grid/meta-parameters, avoid per-call autotune lookups).",
        ),
        expected_gain=f"up to {speedup:.2f}x (1 / (1 - {pct:.0f}%))",
        code_example=("g = torch.cuda.CUDAGraph()\nwith torch.cuda.graph(g):\n    out = fn(*args)\n"
                      "g.replay()  # per call"),
        source="timeline",
    )


LAUNCH_OVERHEAD = ProfilingTool(
    name="launch_overhead", source="timeline",
    required=("launch_overhead_pct", "avg_launch_ns", "kernel_launches"),
    thresholds={"high": 20.0, "critical": 40.0, "single_launch": 50.0},
    # No kernel, no launch overhead: the real H200 `memcpy` timeline (.cpu() then .cuda(), 0 kernels)
    # reads 100 % "overhead" because nothing covers the wall time; its copies and syncs are what
    # host_device_copies and synchronization report.
    trigger=lambda p, th: _launch_fires(_tl(p), th),
    analyze=_launch_analyze,
    affinity=ALL_CLASSES, description="Wall time not covered by kernels > 20 %/40 % over several launches "
                                      "(CUDA graphs, fusion); > 50 % for one launch (host-side Python); est. 1/(1-p).",
)


# --- 2. kernel_count_fusion -----------------------------------------------------------------------


def _fusion_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    t = _tl(p)
    n = t.kernel_launches
    if n < th["medium"]:
        return None
    names = _kernel_list(t) or "(names not recorded)"
    return Finding(
        tool="kernel_count_fusion", severity="high" if n >= th["high"] else "medium",
        title=f"{n} kernels per call: {names}",
        evidence={"kernel_launches": n, "kernels": names, "kernel_us": t.kernel_us, "wall_us": t.wall_us},
        root_cause="Each kernel writes its result to global memory and the next reads it back, and each launch "
                   "costs host time: intermediate tensors make the call pay for memory traffic and launches that a "
                   "single kernel would not.",
        recommendations=(
            f"Fuse {names} into one kernel: in Triton, compute every step inside one @triton.jit program and "
            "keep intermediates in registers; in CUDA, one __global__ that reads inputs once and writes the final "
            "output (epilogue fusion).",
            "Remove helper kernels launched by the wrapper (.contiguous(), .to(dtype), torch.zeros fills, "
            "torch.cat) by handling strides/dtypes/initialisation inside the kernel.",
            "If fusion is not possible, capture the sequence in a CUDA Graph.",
        ),
        expected_gain=f"up to {n}x fewer launches and no round-trips of intermediates through DRAM",
        source="timeline",
    )


KERNEL_COUNT_FUSION = ProfilingTool(
    name="kernel_count_fusion", source="timeline", required=("kernel_launches", "kernels"),
    thresholds={"medium": 2, "high": 4},
    trigger=lambda p, th: _tl(p).kernel_launches >= th["medium"], analyze=_fusion_analyze,
    affinity=ALL_CLASSES, description="Several kernels per call -> fuse them (names the kernels).",
)


# --- 3. synchronization ---------------------------------------------------------------------------


def _sync_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    t = _tl(p)
    if t.syncs < th["medium"]:
        return None
    return Finding(
        tool="synchronization", severity="high" if t.syncs >= th["high"] else "medium",
        title=f"{t.syncs} host-device synchronisation(s) per call",
        evidence={"syncs": t.syncs, "memcpy_d2h": t.memcpy_d2h, "wall_us": t.wall_us},
        root_cause="The host blocks until the GPU drains (torch.cuda.synchronize, .item(), .cpu(), .tolist(), "
                   "printing a CUDA tensor, cudaDeviceSynchronize/cudaMemcpy): the launch queue empties and the "
                   "next kernel starts from a cold pipeline.",
        recommendations=(
            "Remove synchronising calls from the wrapper: no .item()/.cpu()/bool(tensor) on CUDA tensors, compute "
            "sizes from shapes (host ints), not from tensor values.",
            "CUDA: replace cudaDeviceSynchronize/cudaMemcpy with stream-ordered cudaMemcpyAsync and events; "
            "let the caller synchronise once.",
            "Keep data-dependent control (e.g. early exit) on the device: predicate inside the kernel.",
        ),
        expected_gain="removes one GPU pipeline drain (~5-20 us) per sync",
        source="timeline",
    )


SYNCHRONIZATION = ProfilingTool(
    name="synchronization", source="timeline", required=("syncs",),
    thresholds={"medium": 1, "high": 3},
    trigger=lambda p, th: _tl(p).syncs >= th["medium"], analyze=_sync_analyze,
    affinity=ALL_CLASSES, description="Device/stream synchronisations per call > 0.",
)


# --- 4. gaps --------------------------------------------------------------------------------------


def _gap_pct(t: Timeline) -> float:
    return t.gap_us / t.wall_us * 100.0 if t.wall_us > 0 else 0.0


def _gaps_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    t = _tl(p)
    share = _gap_pct(t)
    if t.gaps < 1 or share < th["min_pct"]:
        return None
    sev = "high" if share >= th["high_pct"] else "medium" if share >= th["medium_pct"] else "low"
    return Finding(
        tool="gaps", severity=sev,
        title=f"{t.gaps} idle gap(s) between kernels, {t.gap_us:.1f} us ({share:.0f}% of the call)",
        evidence={"gaps": t.gaps, "gap_us": t.gap_us, "gap_pct": round(share, 1),
                  "gap_threshold_us": t.gap_threshold_us, "wall_us": t.wall_us,
                  "est_speedup": round(1 / max(1 - share / 100.0, 0.01), 2)},
        root_cause="The GPU waits for the host between kernels (longer than the adaptive threshold "
                   f"max(1 % of wall, 5 us) = {t.gap_threshold_us:.1f} us): host-side work between launches - "
                   "Python logic, allocations, autotuning lookups, implicit syncs - sits on the critical path.",
        recommendations=(
            "Move host work out of the launch sequence (precompute grids, strides and meta-parameters; allocate "
            "outputs once).",
            "Capture the sequence in a CUDA Graph, or fuse the kernels so no host step separates them.",
            "Launch independent kernels on separate streams so one fills the other's gap.",
        ),
        expected_gain=f"up to {1 / max(1 - share / 100.0, 0.01):.2f}x if the gaps close",
        source="timeline",
    )


GAPS = ProfilingTool(
    name="gaps", source="timeline", required=("gaps", "gap_us", "gap_threshold_us"),
    # Each gap must exceed the paper's adaptive max(1 % of wall, 5 us); together they must also cost
    # >= 5 % of the call to be worth a directive. Real H200 numbers: the one-matmul control `clean`
    # has a 5-30 us gap between cuBLAS's workspace memset and its GEMM in some calls, 9.9 us per call
    # on average = 1.3 % of its 763 us: it fired as 'low'. The real gap cases are far above 5 %:
    # many_kernels 65.5 us of 626 (10.5 %), sync 47 of 530 (8.9 %), memcpy 572 of 2215 (25.8 %).
    thresholds={"min_pct": 5.0, "medium_pct": 10.0, "high_pct": 30.0},
    trigger=lambda p, th: _tl(p).gaps >= 1 and _gap_pct(_tl(p)) >= th["min_pct"], analyze=_gaps_analyze,
    affinity=ALL_CLASSES, description="Idle gaps between kernels above max(1 % of wall, 5 us), together >= 5 % of the call.",
)


# --- 5. host_device_copies ------------------------------------------------------------------------


def _copies(t: Timeline) -> int:
    return t.memcpy_h2d + t.memcpy_d2h


def _copies_analyze(p: Profile, th: Mapping[str, float]) -> Finding | None:
    t = _tl(p)
    n = _copies(t)
    if n < 1:
        return None
    big = t.memcpy_bytes >= th["high_bytes"]
    return Finding(
        tool="host_device_copies", severity="high" if big or t.memcpy_d2h > 0 else "medium",
        title=f"{n} host-device copies per call ({t.memcpy_h2d} H2D, {t.memcpy_d2h} D2H, {t.memcpy_bytes} bytes)",
        evidence={"memcpy_h2d": t.memcpy_h2d, "memcpy_d2h": t.memcpy_d2h, "memcpy_bytes": t.memcpy_bytes,
                  "wall_us": t.wall_us},
        root_cause="Data crosses PCIe/NVLink-C2C on every call (torch.tensor(...) of host data, .cpu(), "
                   "device=... transfers, cudaMemcpy of constants); a D2H copy also synchronises the host.",
        recommendations=(
            "Create constants and lookup tables on the device once (cache them outside the call), allocate "
            "outputs with torch.empty(..., device=x.device).",
            "Keep results on the device; return tensors instead of Python numbers.",
            "If a copy is unavoidable, use pinned host memory and non_blocking=True / cudaMemcpyAsync on the "
            "kernel's stream, overlapped with compute.",
        ),
        expected_gain="removes the copy time and, for D2H, a pipeline drain per call",
        source="timeline",
    )


HOST_DEVICE_COPIES = ProfilingTool(
    name="host_device_copies", source="timeline", required=("memcpy_h2d", "memcpy_d2h", "memcpy_bytes"),
    thresholds={"high_bytes": float(1 << 20)},
    trigger=lambda p, th: _copies(_tl(p)) >= 1, analyze=_copies_analyze,
    affinity=ALL_CLASSES, description="Host<->device memcpy per call.",
)


TOOLS = (LAUNCH_OVERHEAD, KERNEL_COUNT_FUSION, SYNCHRONIZATION, GAPS, HOST_DEVICE_COPIES)
