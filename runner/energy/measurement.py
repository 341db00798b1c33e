"""One NVML measurement (``measure``): the settings and records, the statistics, and the protocol
that interleaves the arms and idle windows in one run."""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from .nvml import EnergyDevice, Reading

# --------------------------------------------------------------------------- what runs the kernels


class ArmRunner(Protocol):
    """Runs an arm's kernel ``calls`` times back to back and returns once the GPU has finished."""

    def run(self, arm: str, calls: int) -> None: ...

    def pids(self) -> tuple[int, ...]:
        """Processes of ours that may hold the GPU (not 'other tenants')."""
        ...


# --------------------------------------------------------------------------- settings and records


@dataclass(frozen=True)
class EnergySettings:
    """How an NVML measurement runs."""

    window_s: float = 1.0
    """Length of each window; >= 1 s on real hardware (the counter updates coarsely)."""
    windows: int = 6
    """Windows per arm (K)."""
    idle_windows: int = 3
    """Idle windows spread through the run (start, middle, end)."""
    warmup_s: float = 2.0
    """Discarded alternating calls before the first window, towards a thermal steady state."""
    calibrate_s: float = 0.05
    """Calibration: calls are doubled until one batch takes this long."""
    align_s: float = 0.25
    """Start and end each window on a counter update, waiting at most this long for one."""
    confidence: float = 0.95
    """Level of the bootstrap intervals."""
    resamples: int = 2000
    """Bootstrap resamples."""
    seed: int = 0
    """Bootstrap seed (results are reproducible)."""
    timeout_s: float = 300.0
    """Limit for one arm's child process to start (build, compile, warm up)."""


DEFAULTS = EnergySettings()
"""The settings a measurement runs with unless told otherwise."""


@dataclass(frozen=True)
class Window:
    """One window of the run, with the conditions it ran under."""

    kind: str
    """'idle' or 'arm'."""
    arm: str | None
    """The arm that ran (None for idle)."""
    round: int
    """Round index (rounds 2j and 2j+1 form an ABBA pair) for arm windows; -1 for idle."""
    calls: int
    """Calls in the window (0 for idle)."""
    seconds: float
    """Counter-to-counter duration."""
    loop_seconds: float
    """Time the calls themselves took (parent clock)."""
    energy_mj: float
    """Counter difference."""
    sm_clock_mhz: float | None
    """SM clock at the end of the window."""
    mem_clock_mhz: float | None
    """Memory clock at the end of the window."""
    temperature_c: float | None
    """Temperature at the end of the window."""
    power_limit_w: float | None
    """Enforced power limit at the end of the window."""

    @property
    def power_w(self) -> float:
        return self.energy_mj / self.seconds / 1e3 if self.seconds > 0 else math.nan


@dataclass(frozen=True)
class Interval:
    """A median with its bootstrap confidence interval."""

    median: float
    """Median over windows (or over paired ratios)."""
    low: float
    """Lower end of the interval."""
    high: float
    """Upper end of the interval."""

    def contains(self, x: float) -> bool:
        return self.low <= x <= self.high


@dataclass(frozen=True)
class ArmEnergy:
    """One arm's energy per call."""

    dynamic_mj: Interval
    """Energy per call above idle, mJ."""
    total_mj: Interval
    """Energy per call including the idle draw over the call's own duration, mJ."""
    ms_per_call: float
    """Latency seen by the parent in the windows (median), ms."""
    calls_per_window: int
    """Calibrated calls per window."""
    windows: int
    """Windows measured."""


@dataclass(frozen=True)
class Measurement:
    """An NVML run over several arms on one workload."""

    device: str
    """GPU name."""
    arms: Mapping[str, ArmEnergy]
    """Arm -> its energy (the first arm is the reference)."""
    ratios: Mapping[str, Interval]
    """Arm -> dynamic energy relative to the first arm (median of per-round ratios, with its interval)."""
    idle_w: float
    """Median idle power in this run, W (subtracted)."""
    windows: tuple[Window, ...]
    """Every window in order."""
    counter_update_ms: float | None
    """Observed interval between counter updates, ms (the counter's resolution in time)."""
    notes: tuple[str, ...] = ()
    """Anything that weakens the numbers."""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["arms"] = {k: asdict(v) for k, v in self.arms.items()}
        d["ratios"] = {k: asdict(v) for k, v in self.ratios.items()}
        d["windows"] = [{**asdict(w), "power_w": w.power_w} for w in self.windows]
        return d


# --------------------------------------------------------------------------- statistics


def median_ci(values: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0) -> Interval:
    """Median and its percentile-bootstrap interval (scipy.stats.bootstrap)."""
    xs = [float(v) for v in values if math.isfinite(v)]
    if not xs:
        return Interval(math.nan, math.nan, math.nan)
    med = statistics.median(xs)
    if len(xs) < 2 or max(xs) == min(xs):
        return Interval(med, min(xs), max(xs))
    try:
        import numpy as np
        from scipy.stats import bootstrap
    except ImportError:
        # A GPU image without scipy still gets an interval: the same percentile bootstrap, by hand.
        lo, hi = _percentile_bootstrap(xs, confidence, resamples, seed)
    else:
        res = bootstrap((np.asarray(xs),), np.median, confidence_level=confidence, n_resamples=resamples,
                        method="percentile", random_state=np.random.default_rng(seed))
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return Interval(med, min(lo, med), max(hi, med))


def _percentile_bootstrap(xs: Sequence[float], confidence: float, resamples: int, seed: int) -> tuple[float, float]:
    import random

    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(resamples))
    alpha = (1.0 - confidence) / 2.0
    q = statistics.quantiles(meds, n=1000, method="inclusive")
    return q[max(0, round(alpha * 1000) - 1)], q[min(998, round((1 - alpha) * 1000) - 1)]


def idle_power_w(windows: Sequence[Window]) -> float:
    idle = [w.power_w for w in windows if w.kind == "idle" and w.seconds > 0]
    return statistics.median(idle) if idle else math.nan


def dynamic_mj_per_call(w: Window, idle_w: float) -> float:
    """The window's energy above idle, per call (idle power x the whole window is subtracted)."""
    return (w.energy_mj - idle_w * 1e3 * w.seconds) / w.calls


PLACEMENT = 0.005
"""The least uncertainty of an energy ratio: two processes running the same kernel differ by this.
Three A/A runs of the Swish kernel on the H200 (sessions 5-7) read 1.0030 [1.0026, 1.0033], 1.0025
and 1.0030 [1.0000, 1.0043]: the second process was also 0.1 % slower per call in every window
(33.24 against 33.21 us, benchmarks/results-h200-session6/nvml_aa.json), a property of where its
buffers landed that no window protocol controls and the windows' spread does not show. A ratio's
interval is widened to at least this much either side, and energy breaks a speed tie only beyond it."""

MIN_ABOVE_IDLE = 0.01
"""Dynamic energy under this share of the idle energy of its window is reported as unresolved."""


def paired_ratios(arm: Mapping[int, float], ref: Mapping[int, float]) -> list[float]:
    """Per-call energy of ``arm`` over the reference arm, one ratio per ABBA pair of rounds (2j, 2j+1):
    each arm ran once early and once late in the pair, so a linear drift cancels exactly. A round
    without its partner (an odd count, or a failed window) stands alone."""
    rounds = sorted(r for r in arm if r in ref and ref[r] > 0)
    out: list[float] = []
    i = 0
    while i < len(rounds):
        r = rounds[i]
        if r % 2 == 0 and i + 1 < len(rounds) and rounds[i + 1] == r + 1:
            out.append((arm[r] + arm[r + 1]) / (ref[r] + ref[r + 1]))
            i += 2
        else:
            out.append(arm[r] / ref[r])
            i += 1
    return out


def summarize(windows: Sequence[Window], arms: Sequence[str], s: EnergySettings,
              device: str = "", counter_update_ms: float | None = None,
              notes: Sequence[str] = ()) -> Measurement:
    """The statistics of a run: per-arm medians with intervals and paired ratios to the first arm."""
    idle = idle_power_w(windows)
    out_notes = list(notes)
    if not math.isfinite(idle):
        out_notes.append("no idle window: dynamic energy equals total energy")
        idle = 0.0
    by_arm: dict[str, ArmEnergy] = {}
    per_round: dict[str, dict[int, float]] = {}
    for arm in arms:
        ws = [w for w in windows if w.kind == "arm" and w.arm == arm and w.calls > 0]
        dyn = [dynamic_mj_per_call(w, idle) for w in ws]
        # The kernel's share of the idle draw is idle power x its own duration, not x the window's
        # tail spent waiting for a counter update.
        tot = [d + idle * 1e3 * w.loop_seconds / w.calls for d, w in zip(dyn, ws, strict=True)]
        per_round[arm] = {w.round: d for w, d in zip(ws, dyn, strict=True)}
        by_arm[arm] = ArmEnergy(
            dynamic_mj=median_ci(dyn, s.confidence, s.resamples, s.seed),
            total_mj=median_ci(tot, s.confidence, s.resamples, s.seed),
            ms_per_call=statistics.median(w.loop_seconds / w.calls * 1e3 for w in ws) if ws else math.nan,
            calls_per_window=max((w.calls for w in ws), default=0), windows=len(ws),
        )
        # Idle power drifts by about a percent between windows; a draw below that is not resolved.
        above = [d * w.calls / (idle * 1e3 * w.seconds) for d, w in zip(dyn, ws, strict=True) if idle > 0 and w.seconds > 0]
        if dyn and (statistics.median(dyn) <= 0 or above and statistics.median(above) < MIN_ABOVE_IDLE):
            out_notes.append(f"{arm}: no energy above idle was measured (under {MIN_ABOVE_IDLE:.0%} of the idle draw "
                             "over a window, which idle subtraction cannot resolve): its numbers are not meaningful")
    ratios: dict[str, Interval] = {}
    if arms:
        ref = per_round.get(arms[0], {})
        for arm in arms[1:]:
            r = median_ci(paired_ratios(per_round[arm], ref), s.confidence, s.resamples, s.seed)
            ratios[arm] = Interval(r.median, min(r.low, r.median * (1 - PLACEMENT)), max(r.high, r.median * (1 + PLACEMENT)))
    return Measurement(device, by_arm, ratios, idle, tuple(windows), counter_update_ms, tuple(out_notes))


# --------------------------------------------------------------------------- the protocol


def _fresh(device: EnergyDevice, limit_s: float, clock: Callable[[], float],
           sleep: Callable[[float], None]) -> Reading:
    """The first reading after the counter's next update (or the last one after ``limit_s``): its value
    and its time then belong together, whatever the counter's update interval."""
    now = device.read().energy_mj
    r = device.read()
    t0 = clock()
    while r.energy_mj == now and clock() - t0 < limit_s:
        sleep(0.0005)
        r = device.read()
    return r


def counter_update_ms(device: EnergyDevice, limit_s: float, clock: Callable[[], float],
                      sleep: Callable[[float], None]) -> float | None:
    """Median time between counter updates, from polling it for up to ``limit_s``."""
    changes: list[float] = []
    last = device.read()
    t0 = clock()
    while clock() - t0 < limit_s and len(changes) < 6:
        sleep(0.0005)
        r = device.read()
        if r.energy_mj != last.energy_mj:
            changes.append(r.t)
        last = r
    gaps = [b - a for a, b in zip(changes, changes[1:], strict=False)]
    return statistics.median(gaps) * 1e3 if gaps else None


def loop_seconds(window_s: float, tick_ms: float | None) -> float:
    """How long an arm's calls run in one window. Against a counter that updates every ``tick_ms``,
    (m + 1/2) updates: each loop then ends half an update from the next one, so a few ms more or
    less before an arm's process starts its calls never moves its window's end to another update.
    On the H200 loops of 0.996 s against updates every 100.4 ms ended just before or just after
    the tenth, per arm: an A/A pair read 0.9951 [0.9905, 0.9968] (results-h200-session6)."""
    if not tick_ms or tick_ms <= 0:
        return window_s
    tick = tick_ms / 1e3
    return (max(1, round(window_s / tick)) + 0.5) * tick


def measure(device: EnergyDevice, runner: ArmRunner, arms: Sequence[str], s: EnergySettings = EnergySettings(),
            *, clock: Callable[[], float] = time.perf_counter,
            sleep: Callable[[float], None] = time.sleep) -> Measurement:
    """Calibrate, warm up, then K rounds of one window per arm (ABBA: odd rounds reversed) with idle windows spread in."""
    notes: list[str] = list(getattr(runner, "notes", ()))
    procs, ours = set(device.processes() or ()), set(runner.pids()) | {os.getpid()}
    if procs & ours or not ours - {os.getpid()}:
        others = len(procs - ours)
    else:
        # In a container NVML reports host PIDs, which never match ours: count instead.
        others = len(procs) - len(runner.pids())
    if others > 0:
        listed = ", ".join(map(str, sorted(procs - ours)))
        notes.append(f"{others} other process(es) hold the GPU ({listed}): their draw is in every window")
    tick = counter_update_ms(device, 3 * s.align_s, clock, sleep)
    if tick is None:
        notes.append(f"the energy counter did not change within {3 * s.align_s:.2f} s while idle: windows are "
                     "not aligned to its updates")
    elif tick > 0.1 * s.window_s * 1e3:
        notes.append(f"the energy counter updates every {tick:.0f} ms, coarse against {s.window_s:g} s windows")
    calls: dict[str, int] = {}
    loop_s = loop_seconds(s.window_s, tick)
    for arm in arms:
        n = 1
        while True:
            t0 = clock()
            runner.run(arm, n)
            dt = clock() - t0
            if dt >= s.calibrate_s or n >= 1 << 24:
                break
            n *= 2
        calls[arm] = max(1, math.ceil(loop_s / max(dt / n, 1e-9)))
    end = clock() + s.warmup_s
    while s.warmup_s > 0 and clock() < end:
        for arm in arms:
            # Re-calibrated as the GPU warms: clocks ramp up from idle, so the first estimate is slow.
            # Two sizes of run: the slope is the time per call, the rest is the arm's fixed cost per
            # command (its process answering), which delays the loop's end in every window too.
            n = max(2, calls[arm] // 4)
            t0 = clock()
            runner.run(arm, n // 2)
            t1 = clock()
            runner.run(arm, n)
            t2 = clock()
            plain = max(t2 - t1, 1e-9) / n  # the fixed cost spread over the calls: the old estimate
            slope = ((t2 - t1) - (t1 - t0)) / (n - n // 2)
            # Noise (the interpreter, a clock ramping between the two runs) can make the slope
            # nonsense, even <= 0, which would ask for an endless loop: then the plain estimate.
            per_call = slope if 0.5 * plain <= slope <= plain else plain
            fixed = min(max(0.0, (t2 - t1) - n * per_call), loop_s / 2)
            calls[arm] = max(1, min(math.ceil((loop_s - fixed) / per_call), 4 * calls[arm]))
    windows: list[Window] = []
    k = max(1, s.windows)
    idle_at = sorted({round(i * k / max(s.idle_windows - 1, 1)) for i in range(s.idle_windows)}) if s.idle_windows else []

    def window(kind: str, arm: str | None, rnd: int) -> None:
        r0 = _fresh(device, s.align_s, clock, sleep)
        t0 = clock()
        if arm is None:
            sleep(s.window_s)
        else:
            runner.run(arm, calls[arm])
        loop = clock() - t0
        # The tail until the next update is in the window; idle subtraction takes it back out.
        r1 = _fresh(device, s.align_s, clock, sleep)
        windows.append(Window(kind, arm, rnd, 0 if arm is None else calls[arm], r1.t - r0.t, loop,
                              r1.energy_mj - r0.energy_mj, r1.sm_clock_mhz, r1.mem_clock_mhz, r1.temperature_c,
                              r1.power_limit_w))

    for rnd in range(k + 1):
        if rnd in idle_at:
            window("idle", None, -1)
        if rnd < k:
            # ABBA: odd rounds run the arms in reverse, so a steady drift (the H200 warmed from 42 to
            # 48 C over an A/A run whose second arm always ran last: ratio 1.0095, interval [1.0076,
            # 1.0139]) weighs on every arm alike within each pair of rounds.
            for arm in (arms if rnd % 2 == 0 else list(reversed(arms))):
                window("arm", arm, rnd)
    sm = {w.sm_clock_mhz for w in windows if w.kind == "arm" and w.sm_clock_mhz}
    if len(sm) > 1 and max(sm) > 1.05 * min(sm):
        notes.append(f"the SM clock moved between windows ({min(sm):.0f}-{max(sm):.0f} MHz): power or thermal "
                     "throttling; ABBA pairing cancels only slow, steady changes")
    return summarize(windows, arms, s, device.name, tick, notes)


