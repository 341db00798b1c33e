"""Profiler evidence for one candidate: ncu counters, SASS instruction counts, the launch timeline.

Plain records; the collectors live beside this file (ncu.py, sass.py, timeline.py) and the
micro-profiling tools (runner/tools) read only these records, so a tool can be tested on a
fixture recorded on real hardware without a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class KernelProfile:
    """ncu's view of one kernel launch."""

    name: str
    """Kernel function name as ncu reports it (demangled)."""
    metrics: Mapping[str, float | None]
    """Canonical (sm_90) metric name -> value; None where ncu printed n/a."""
    units: Mapping[str, str] = field(default_factory=dict)
    """Canonical metric name -> unit as ncu printed it ('%', 'byte', 'inst', ...)."""
    grid: tuple[int, int, int] = (0, 0, 0)
    """Grid size of the launch."""
    block: tuple[int, int, int] = (0, 0, 0)
    """Block size of the launch."""

    def get(self, name: str) -> float | None:
        return self.metrics.get(name)


@dataclass(frozen=True)
class SassStats:
    """What the compiled binary contains, from cuobjdump --dump-sass (and nm -D for libraries)."""

    arch: str
    """Target of the code, e.g. 'sm_90a'."""
    counts: Mapping[str, int]
    """Opcode family -> static count: HGMMA, HMMA, IMMA, DMMA, BMMA, LDGSTS, UTMALDG, UBLKCP, STL,
    LDL, MUFU, LDG, STG, LDS, STS, BAR, FFMA, ..., and 'total'."""
    global_load_bits: Mapping[int, int] = field(default_factory=dict)
    """Width in bits of global loads (32, 64, 128) -> static count."""
    functions: tuple[str, ...] = ()
    """Kernel functions found in the binary."""
    uses_cublas: bool = False
    """The shared object links cuBLAS (its tensor-core work runs in library kernels)."""
    backward_branches: int = 0
    """BRA instructions to a lower address: the loops of the code (the BRA-to-itself after EXIT is not one)."""

    def count(self, family: str) -> int:
        return int(self.counts.get(family, 0))


@dataclass(frozen=True)
class Timeline:
    """The launch timeline of one call, from torch.profiler (CUPTI); nsys is not needed."""

    wall_us: float
    """End-to-end time of the profiled call(s) on the host."""
    kernel_launches: int
    """Kernels launched per call."""
    kernel_us: float
    """Sum of kernel durations on the GPU."""
    gaps: int
    """Idle gaps between kernels longer than the adaptive threshold."""
    gap_us: float
    """Total time in those gaps."""
    gap_threshold_us: float
    """max(1 % of wall time, 5 us), as in the paper."""
    launch_overhead_pct: float
    """Share of ``span_us`` in which no kernel ran, the first kernel's own launch latency left out
    (runner/evidence/timeline.py ``summarize``): not a share of ``wall_us``."""
    avg_launch_ns: float
    """Mean host-side launch API time."""
    syncs: int
    """Device/stream synchronisations per call."""
    memcpy_h2d: int = 0
    """Host-to-device copies per call."""
    memcpy_d2h: int = 0
    """Device-to-host copies per call."""
    memcpy_bytes: int = 0
    """Bytes copied between host and device per call."""
    kernels: tuple[str, ...] = ()
    """Kernel names in launch order."""
    span_us: float = 0.0
    """Per call, from the first launch to the later of the last kernel's end and the call's return:
    what ``launch_overhead_pct`` is a share of (0: recorded before it was kept)."""


@dataclass(frozen=True)
class Work:
    """What the profiled call must do at least, from the target's flops/bytes formulas (Stage 1's ideal view)."""

    workload: str
    """Uuid of the workload the profile ran (the largest, as runner/profiler.py picks it)."""
    flops: float | None
    """Floating-point operations the call needs (the `flops` formula)."""
    bytes: float | None
    """Bytes the call must move (the `bytes` formula)."""
    ideal: str
    """What the ideal kernel is bound by: memory | compute | mixed | unknown (the roofline)."""
    floor_ms: float | None
    """The least time the roofline allows for this workload."""
    measured_ms: float | None
    """The baseline's median on this workload."""
    max_speedup: float | None
    """The most speedup physics allows on every workload (measured / floor, the least over workloads)."""
    bound_note: str = ""
    """The arithmetic of max_speedup, e.g. '0.758 ms measured / 0.682 ms floor = 1.11x on M=4096'."""


@dataclass(frozen=True)
class Profile:
    """Everything collected for one candidate; any part may be missing, with the reason in notes."""

    kernels: tuple[KernelProfile, ...] = ()
    """ncu, one entry per profiled launch of the candidate's own kernels."""
    sass: SassStats | None = None
    """The candidate's binary."""
    timeline: Timeline | None = None
    """The launch timeline."""
    notes: tuple[str, ...] = ()
    """Why something is missing (ncu absent, counters not permitted, ...)."""
    stages: tuple[tuple[str, float], ...] = ()
    """Where the profiling time went, in seconds per stage (ncu child, its start-up and import, ...)."""
    work: Work | None = None
    """The useful work and Stage 1 bound of the profiled call; None without flops/bytes formulas."""

    @property
    def main(self) -> KernelProfile | None:
        """The launch that took longest: the one the tools judge."""
        if not self.kernels:
            return None
        return max(self.kernels, key=lambda k: k.get("gpu__time_duration.sum") or 0.0)

    def metric(self, name: str) -> float | None:
        k = self.main
        return None if k is None else k.get(name)
