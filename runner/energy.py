"""Energy per call: NVML measurement, its statistics, the counter-based proxy and the objective.

Measurement (``measure``): NVML's total-energy counter (mJ, monotonic) differenced over windows of
back-to-back calls of >= 1 s each, the window's call count calibrated from the latency the parent
itself observes. All arms (the baseline first, then candidates) are interleaved in one run, in ABBA order (odd rounds reversed),
so slow drift (temperature, other tenants) affects them alike; idle windows (no arm may run) are
spread through the same run and their median power is subtracted (dynamic energy). Each arm runs in
a sandboxed child process of its own (``ChildRunner``); the parent reads NVML and the clock itself,
so a candidate cannot forge its energy, and every child except the one being measured is stopped
(SIGSTOP) during a window, so no arm can run on the GPU in another's window. Clocks and power limits
are logged per window and never changed.

NVML sits behind a two-method interface (``EnergyDevice``) so the windowing and statistics run on a
CPU against a replay of real recorded H200 samples (tests/nvml_replay.py).

Proxy (``proxy``): the paper's deterministic Eq. 4 over ncu counters the profiler already collects;
it ranks candidates during the search (NVML is device-wide and too slow for every candidate).

Objective (``energy_eps``, ``choose``): reward ln(speedup) + eps * ln(energy reduction), with eps
small enough that a speed difference outside the timing noise always dominates; among gate-passing
candidates within the noise of each other, active mode keeps the one with the least measured energy.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from .evidence import KernelProfile, Profile
from .toolkit import first_visible_gpu

ENERGY_MODES = ("off", "passive", "active")

# --------------------------------------------------------------------------- the device


@dataclass(frozen=True)
class Reading:
    """One NVML sample."""

    t: float
    """When it was taken (seconds, the measuring process's monotonic clock)."""
    energy_mj: float
    """Total-energy counter since the driver loaded, mJ."""
    power_w: float | None = None
    """Instantaneous power reading, W."""
    sm_clock_mhz: float | None = None
    """SM clock, MHz."""
    mem_clock_mhz: float | None = None
    """Memory clock, MHz."""
    temperature_c: float | None = None
    """GPU temperature, degrees C."""
    power_limit_w: float | None = None
    """Enforced power limit, W."""


class EnergyDevice(Protocol):
    """The two things the protocol needs from NVML."""

    name: str

    def read(self) -> Reading: ...

    def processes(self) -> tuple[int, ...] | None:
        """PIDs with a compute context on the device; None when the driver does not say."""
        ...


class EnergyUnavailable(RuntimeError):
    """NVML or its energy counter cannot be used here; the message says why and what to do."""


def visible_gpu(visible: str | None) -> str:
    """The GPU to read the energy of: the one CUDA children see first (``first_visible_gpu`` of
    CUDA_VISIBLE_DEVICES), or EnergyUnavailable where that is no whole GPU."""
    first = first_visible_gpu(visible)
    if first is None:
        raise EnergyUnavailable(f"NVML energy: CUDA_VISIBLE_DEVICES={visible!r} names no whole GPU to measure "
                                "(energy is counted per physical GPU; MIG instances have no counter of their own)")
    return first


class NvmlDevice:
    """pynvml (nvidia-ml-py). Only reads; never sets clocks or power limits."""

    def __init__(self, gpu: str | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        """``gpu``: an NVML index or a GPU UUID; None: the GPU this process's CUDA children use
        (``visible_gpu`` of CUDA_VISIBLE_DEVICES)."""
        gpu = gpu if gpu is not None else visible_gpu(os.environ.get("CUDA_VISIBLE_DEVICES"))
        try:
            import pynvml
        except ImportError as e:
            raise EnergyUnavailable("NVML unavailable: pynvml is not installed (pip install nvidia-ml-py)") from e
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            raise EnergyUnavailable(f"NVML unavailable: {e} (no NVIDIA driver on this machine?)") from e
        self._nv, self._clock = pynvml, clock
        try:
            self._h = (pynvml.nvmlDeviceGetHandleByUUID(gpu) if gpu.startswith("GPU-")
                       else pynvml.nvmlDeviceGetHandleByIndex(int(gpu)))
            name = pynvml.nvmlDeviceGetName(self._h)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._h)
        except Exception as e:  # NVMLError_NotSupported on GPUs before Volta
            self.close()
            raise EnergyUnavailable(f"NVML energy counter unavailable on GPU {gpu}: {e}") from e

    def _opt(self, fn: Callable[[], float], scale: float = 1.0) -> float | None:
        try:
            return float(fn()) * scale
        except Exception:
            return None

    def read(self) -> Reading:
        nv, h = self._nv, self._h
        return Reading(
            t=self._clock(), energy_mj=float(nv.nvmlDeviceGetTotalEnergyConsumption(h)),
            power_w=self._opt(lambda: nv.nvmlDeviceGetPowerUsage(h), 1e-3),
            sm_clock_mhz=self._opt(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            mem_clock_mhz=self._opt(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            temperature_c=self._opt(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            power_limit_w=self._opt(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h), 1e-3),
        )

    def processes(self) -> tuple[int, ...] | None:
        try:
            return tuple(int(p.pid) for p in self._nv.nvmlDeviceGetComputeRunningProcesses(self._h))
        except Exception:
            return None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nv.nvmlShutdown()


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


# --------------------------------------------------------------------------- the arms' processes

_CHILD = """
import json, os, sys
proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)  # the candidate's prints go to stderr, never into the protocol
from kernelpro.runner.energy import child_main
child_main(json.loads(open(sys.argv[1]).read()), sys.stdin, proto)
"""


def child_main(req: Mapping[str, Any], commands: Any, proto: Any) -> None:
    """In the arm's process: build, make inputs once (rotating sets), warm up, then run on command."""
    from pathlib import Path as _Path

    import torch

    from . import harness

    # Taken before the candidate is imported: rebinding the harness's names afterwards changes
    # neither what runs its calls nor what checks them (and the check refuses the rebinding).
    call, check, failure = harness._call, harness._check_primitives, harness.CandidateError
    device = req["device"]
    try:
        fn = harness._build(req["solution"], _Path.cwd(), req=req)
        dps = req["solution"]["spec"].get("destination_passing_style", True)
        sets = [(harness._make_inputs(req["definition"], req["workload"], 20_000 + i, device),
                 harness._poisoned_outputs(req["definition"], req["workload"]["axes"], device))
                for i in range(int(req.get("rotate", 3)))]
        with torch.no_grad():
            for i in range(3):
                call(fn, *sets[i % len(sets)], dps)
        if device == "cuda":
            torch.cuda.synchronize()
    except BaseException as e:  # the candidate's failure is a value for the parent
        proto.write(json.dumps({"error": f"{type(e).__name__}: {e}"[:2000]}) + "\n")
        return
    graph = _capture(fn, sets, dps) if device == "cuda" else None
    proto.write(json.dumps({"ready": True, "graph": graph is not None}) + "\n")
    i = 0
    for line in commands:
        cmd = json.loads(line)
        if "calls" not in cmd:
            return
        n = int(cmd["calls"])
        with torch.no_grad():
            if graph is not None and cmd.get("graph"):
                g, per = graph
                for _ in range(n // per):
                    g.replay()
                n %= per
            for _ in range(n):
                call(fn, *sets[i % len(sets)], dps)  # only plain tensors come back (issue 17)
                i += 1
        if device == "cuda":
            torch.cuda.synchronize()
        try:  # the harness's own references and globals, as after every timed call
            check()
        except failure as e:
            proto.write(json.dumps({"error": e.log[:2000]}) + "\n")
            return
        proto.write(json.dumps({"done": cmd["calls"]}) + "\n")


GRAPH_ROUNDS = 4
"""Rounds over the input sets captured in one CUDA graph of an energy arm."""


def _capture(fn: Any, sets: Sequence[tuple[list[Any], list[Any]]], dps: bool) -> tuple[Any, int] | None:
    """The arm's calls captured as one CUDA graph (GRAPH_ROUNDS rounds over the input sets), or None
    when the candidate cannot be captured (it synchronises, copies to the host, ...).

    Replayed, the GPU runs the kernels back to back whatever the host's launch speed: on the H200 an
    eager loop of a 35 us kernel ran 28454 calls in one arm's 1 s window and 20771 in the other's (the
    host, not the GPU, set the pace), and the A/A ratio's interval missed 1 (1.0030 [1.0026, 1.0033])."""
    import torch

    from . import harness

    per = GRAPH_ROUNDS * len(sets)
    try:
        with torch.no_grad():
            g, _ = harness.graph_of(fn, [sets[k % len(sets)] for k in range(per)], dps)
        g.replay()
        torch.cuda.synchronize()
        return g, per
    except Exception:  # noqa: BLE001 - any failure means: run this arm eagerly
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        return None


class ArmFailed(RuntimeError):
    """An arm's process could not start or died; the message has its output."""


class ChildRunner:
    """One sandboxed process per arm (scrubbed environment, own directory, own process group).

    Only the arm being run is awake: the others are stopped (SIGSTOP) so nothing of theirs reaches
    the GPU inside another arm's or an idle window.
    """

    def __init__(self, requests: Mapping[str, Mapping[str, Any]], timeout_s: float = 300.0) -> None:
        from . import confinement
        from .environment import child_variables, scrubbed_env

        self._procs: dict[str, subprocess.Popen[str]] = {}
        self._graph: dict[str, bool] = {}
        self._dirs: list[tempfile.TemporaryDirectory[str]] = []
        self._work: dict[str, Path] = {}
        self.timeout_s = timeout_s
        try:
            for arm, req in requests.items():
                tmp = tempfile.TemporaryDirectory(prefix="kernelpro-energy-")
                self._dirs.append(tmp)
                work = Path(tmp.name)
                (work / "request.json").write_text(json.dumps(req))
                cache = req.get("cache_dir")
                extra = child_variables(work, req["device"], Path(cache) if cache else None)
                # stderr to a file: a chatty candidate must not fill a pipe and block.
                with (work / "stderr.txt").open("w") as err:
                    argv = [sys.executable, "-c", _CHILD, str(work / "request.json")]
                    if confinement.landlock_abi():  # an arm runs a candidate: confined like any other run of it
                        argv = confinement.command(argv, confinement.policy([work, cache]))
                    p = subprocess.Popen(argv, cwd=work,
                                         env=scrubbed_env(extra), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True, start_new_session=True)
                self._procs[arm] = p
                self._work[arm] = work
                msg = self._reply(arm, timeout_s)
                if not msg.get("ready"):
                    raise ArmFailed(f"{arm}: {msg.get('error', 'did not start')}")
                self._graph[arm] = msg.get("graph") is True
                self._signal(arm, signal.SIGSTOP)
        except BaseException:
            self.close()
            raise

    def _signal(self, arm: str, sig: int) -> None:
        pid = self._procs[arm].pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        if sig == signal.SIGSTOP:
            # Delivery is asynchronous: wait until the arm really stands still before the next window.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WUNTRACED)

    def _reply(self, arm: str, timeout_s: float) -> dict[str, Any]:
        import selectors

        p = self._procs[arm]
        assert p.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout_s)
        sel.close()
        line = p.stdout.readline() if ready else ""
        if not line:
            self._signal(arm, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
            err = ""
            with contextlib.suppress(OSError):
                err = (self._work[arm] / "stderr.txt").read_text(errors="replace")[-1500:]
            raise ArmFailed(f"{arm}: no answer within {timeout_s:.0f} s (exit code {p.poll()}) {err}".strip())
        try:
            return dict(json.loads(line))
        except (json.JSONDecodeError, TypeError, ValueError) as e:
            raise ArmFailed(f"{arm}: unreadable answer {line[:200]!r}") from e

    def run(self, arm: str, calls: int) -> None:
        p = self._procs[arm]
        assert p.stdin is not None
        self._signal(arm, signal.SIGCONT)
        try:
            p.stdin.write(json.dumps({"calls": calls, "graph": self.graphs}) + "\n")
            p.stdin.flush()
            msg = self._reply(arm, self.timeout_s)
        finally:
            self._signal(arm, signal.SIGSTOP)
        if msg.get("done") != calls:
            raise ArmFailed(f"{arm}: unexpected answer {msg!r}")

    @property
    def graphs(self) -> bool:
        """Every arm replays CUDA graphs; one that cannot makes them all run eagerly, alike."""
        return bool(self._graph) and all(self._graph.values())

    @property
    def notes(self) -> tuple[str, ...]:
        if self.graphs:
            return ("the arms ran their calls as CUDA graph replays (kernels back to back, whatever the host's pace)",)
        eager = sorted(a for a, g in self._graph.items() if not g)
        if eager and len(eager) < len(self._graph):
            return (f"the arms ran eagerly: {', '.join(eager)} could not be captured as a CUDA graph",)
        return ()

    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self._procs.values())

    def close(self) -> None:
        for arm, p in self._procs.items():
            self._signal(arm, signal.SIGKILL)
            with contextlib.suppress(Exception):
                p.communicate(timeout=10)
        self._procs.clear()
        for d in self._dirs:
            with contextlib.suppress(OSError):
                d.cleanup()
        self._dirs.clear()


# --------------------------------------------------------------------------- per target


@dataclass(frozen=True)
class WorkloadEnergy:
    """One workload's measurement, with the work it does per call."""

    uuid: str
    """Workload id."""
    measurement: Measurement | None
    """The NVML run; None when it could not run (see note)."""
    bytes: float | None = None
    """Bytes per call from the target's formula."""
    flops: float | None = None
    """FLOP per call from the target's formula."""
    note: str = ""
    """Why there is no measurement."""

    def per_work(self, arm: str) -> dict[str, float]:
        """Dynamic joules per GB moved and per TFLOP done."""
        m = self.measurement
        if m is None or arm not in m.arms:
            return {}
        j = m.arms[arm].dynamic_mj.median / 1e3
        out = {}
        if self.bytes:
            out["j_per_gb"] = j / (self.bytes / 1e9)
        if self.flops:
            out["j_per_tflop"] = j / (self.flops / 1e12)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "bytes": self.bytes, "flops": self.flops, "note": self.note,
                "measurement": None if self.measurement is None else self.measurement.to_json(),
                "per_work": {a: self.per_work(a) for a in (self.measurement.arms if self.measurement else ())}}


DeviceFactory = Callable[[], EnergyDevice]
RunnerFactory = Callable[[Mapping[str, Mapping[str, Any]], float], Any]


def measure_solutions(definition: Any, solutions: Mapping[str, Any], workloads: Sequence[Any], device_kind: str,
                      s: EnergySettings = EnergySettings(), *, flops: str | None = None, nbytes: str | None = None,
                      open_device: DeviceFactory = NvmlDevice, make_runner: RunnerFactory = ChildRunner,
                      cache_dir: Path | None = None, **kw: Any) -> tuple[WorkloadEnergy, ...]:
    """Every workload, all arms (the first is the reference) interleaved in one run each.
    Failures are notes on the result, never exceptions."""
    from .roofline import axis_values, evaluate_formula

    def work(w: Any, expr: str | None) -> float | None:
        if not expr:
            return None
        try:
            return evaluate_formula(expr, axis_values(definition, w.axes))
        except (ValueError, SyntaxError, ZeroDivisionError):
            return None

    try:
        dev = open_device()
    except EnergyUnavailable as e:
        return tuple(WorkloadEnergy(w.uuid, None, work(w, nbytes), work(w, flops), str(e)) for w in workloads)
    out = []
    try:
        for w in workloads:
            reqs = {arm: {"definition": definition.to_json(), "solution": sol.to_json(), "workload": w.to_json(),
                          "device": device_kind, "cache_dir": str(cache_dir) if cache_dir else None}
                    for arm, sol in solutions.items()}
            try:
                runner = make_runner(reqs, s.timeout_s)
            except ArmFailed as e:
                out.append(WorkloadEnergy(w.uuid, None, work(w, nbytes), work(w, flops), f"an arm failed to start: {e}"))
                continue
            try:
                m = measure(dev, runner, list(solutions), s, **kw)
                out.append(WorkloadEnergy(w.uuid, m, work(w, nbytes), work(w, flops)))
            except ArmFailed as e:
                out.append(WorkloadEnergy(w.uuid, None, work(w, nbytes), work(w, flops), f"an arm failed: {e}"))
            finally:
                runner.close()
    finally:
        close = getattr(dev, "close", None)
        if close is not None:
            close()
    return tuple(out)


# --------------------------------------------------------------------------- the proxy (paper Eq. 4)

PJ_PER_DRAM_BYTE = 20.0
PJ_PER_EXCESS_SECTOR = 100.0
PJ_PER_LOCAL_SECTOR = 80.0
PJ_PER_INSTRUCTION = 3.0


@dataclass(frozen=True)
class ProxyEnergy:
    """The counter-based estimate for one call, split into the paper's four terms, pJ."""

    dram_pj: float
    """B1: 20 pJ per DRAM byte read or written."""
    uncoalesced_pj: float
    """B2: 100 pJ per global-load sector beyond what a coalesced access of the same width needs."""
    local_pj: float
    """B3: 80 pJ per local-memory (spill) sector."""
    instruction_pj: float
    """B4: 3 pJ per warp instruction executed."""

    @property
    def total_pj(self) -> float:
        return self.dram_pj + self.uncoalesced_pj + self.local_pj + self.instruction_pj

    def to_json(self) -> dict[str, float]:
        return {**asdict(self), "total_pj": self.total_pj}


def _kernel_proxy(profile: Profile, k: KernelProfile) -> ProxyEnergy | None:
    from .tools.counters import (
        GLD_SECTORS,
        INST_EXECUTED,
        LOCAL_LD_SECTORS,
        LOCAL_ST_SECTORS,
        coalescing,
    )

    inst = k.get(INST_EXECUTED)
    rd, wr, both = k.get("dram__bytes_read.sum"), k.get("dram__bytes_write.sum"), k.get("dram__bytes.sum")
    dram = (rd or 0.0) + (wr or 0.0) if rd is not None or wr is not None else both
    if inst is None or dram is None:
        return None
    # The paper writes S_ld * max(0, r/4 - 1), which assumes 32-bit loads and would charge a
    # vectorised 128-bit kernel (16 sectors per request, all used) three times its sectors; the
    # excess over the width-aware ideal counts only sectors that were fetched and not needed.
    c = coalescing(profile, k, "ld", {"max_coalesced_sectors": 16.0})
    sectors = k.get(GLD_SECTORS) or 0.0
    excess = sectors * (1.0 - 1.0 / c["excess"]) if c is not None and c["excess"] > 1.0 else 0.0
    local = (k.get(LOCAL_LD_SECTORS) or 0.0) + (k.get(LOCAL_ST_SECTORS) or 0.0)
    return ProxyEnergy(PJ_PER_DRAM_BYTE * dram, PJ_PER_EXCESS_SECTOR * excess, PJ_PER_LOCAL_SECTOR * local,
                       PJ_PER_INSTRUCTION * inst)


def proxy(profile: Profile | None) -> ProxyEnergy | None:
    """The proxy over every profiled launch of the candidate; None without the counters it needs."""
    if profile is None or not profile.kernels:
        return None
    parts = [_kernel_proxy(profile, k) for k in profile.kernels]
    if any(p is None for p in parts):
        return None
    return ProxyEnergy(*(sum(getattr(p, f) for p in parts if p is not None)
                         for f in ("dram_pj", "uncoalesced_pj", "local_pj", "instruction_pj")))


# --------------------------------------------------------------------------- the objective

ENERGY_RATIO_CLAMP = 4.0
"""Energy reductions are clamped to [1/4, 4] in the reward; see ``energy_eps``."""


def timing_noise(gamma: float, spreads: Sequence[float] = ()) -> float:
    """The factor below which two speedups are indistinguishable: the gate's gamma, or the measured
    timing spread (p90/p10 of the baseline) when that is wider."""
    finite = [x for x in spreads if math.isfinite(x) and x >= 1.0]
    return max([gamma, *finite])


def energy_eps(noise: float, clamp: float = ENERGY_RATIO_CLAMP) -> float:
    """eps such that energy can never outweigh a speed difference outside the noise.

    Two candidates' energy terms differ by at most eps * (ln clamp - ln(1/clamp)) = 2 eps ln clamp.
    Setting that equal to ln(noise) means a speedup ratio above the noise (ln s1 - ln s2 > ln noise)
    always wins, and energy decides only among speeds within the noise of each other. With the
    gate's gamma 1.03 and the clamp 4: eps = ln 1.03 / (2 ln 4) = 0.0107.
    """
    return math.log(noise) / (2.0 * math.log(clamp))


def energy_term(eps: float, reduction: float | None, clamp: float = ENERGY_RATIO_CLAMP) -> float:
    """eps * ln(clamped energy reduction); 0 without a reduction."""
    if reduction is None or not math.isfinite(reduction) or reduction <= 0:
        return 0.0
    return eps * math.log(min(max(reduction, 1.0 / clamp), clamp))


@dataclass(frozen=True)
class Choice:
    """The final choice among gate-passing candidates."""

    index: int
    """Index of the chosen one in the list given."""
    tied: tuple[int, ...]
    """Indices within the timing noise of the fastest."""
    reason: str
    """Why, in a sentence."""


def choose(speedups: Sequence[float], energies: Sequence[float | None], mode: str, noise: float) -> Choice:
    """Speed first. In active mode, among candidates whose speedup is within ``noise`` of the
    fastest, the one with the least energy per call wins if it beats the fastest's by more than
    PLACEMENT (unmeasured energy never wins a tie); off and passive keep the fastest."""
    if not speedups:
        raise ValueError("choose() needs at least one candidate")
    fastest = max(range(len(speedups)), key=lambda i: speedups[i])
    tied = tuple(i for i, sp in enumerate(speedups) if sp * noise >= speedups[fastest])
    if mode != "active" or len(tied) < 2:
        return Choice(fastest, tied, "fastest" if len(tied) < 2 else f"fastest ({mode} mode: energy does not choose)")
    measured = [i for i in tied if energies[i] is not None and math.isfinite(energies[i] or math.nan)]
    if not measured:
        return Choice(fastest, tied, "fastest (no energy measured for the tied candidates)")
    best = min(measured, key=lambda i: energies[i] or 0.0)
    if best == fastest:
        return Choice(best, tied, f"fastest, and the least energy of {len(tied)} within the timing noise")
    if fastest in measured and (energies[best] or 0.0) > (energies[fastest] or 0.0) * (1 - PLACEMENT):
        return Choice(fastest, tied, f"fastest: no candidate within the timing noise used less energy by more than "
                                     f"{PLACEMENT:.1%}, which one kernel in two processes differs by")
    return Choice(best, tied, f"least energy of {len(tied)} candidates within the timing noise ({noise:.3f}x) "
                              "of the fastest")


@dataclass(frozen=True)
class EnergyOutcome:
    """What the run measured and decided about energy (result.json 'energy')."""

    mode: str
    """off | passive | active."""
    eps: float = 0.0
    """Weight of the energy term in the reward (0 unless active)."""
    noise: float = 1.0
    """Timing noise factor eps was derived from."""
    workloads: tuple[WorkloadEnergy, ...] = ()
    """NVML measurements of the baseline (and the winner, and tied candidates), per workload."""
    arms: Mapping[str, str] = field(default_factory=dict)
    """Arm name -> solution name."""
    proxy: Mapping[str, dict[str, float]] = field(default_factory=dict)
    """Candidate key -> proxy terms (pJ), for the profiled candidates."""
    winner_arm: str | None = None
    """The arm of the published winner (None when the baseline stands)."""
    choice: str = ""
    """How the final choice used energy."""
    notes: tuple[str, ...] = ()
    """Why something was not measured."""

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "eps": self.eps, "noise": self.noise, "arms": dict(self.arms),
                "winner_arm": self.winner_arm, "workloads": [w.to_json() for w in self.workloads],
                "proxy": dict(self.proxy), "choice": self.choice, "notes": list(self.notes)}

    def ratio(self, arm: str) -> float | None:
        """Geometric mean over workloads of the arm's paired dynamic-energy ratio to the baseline."""
        rs = [w.measurement.ratios[arm].median for w in self.workloads
              if w.measurement is not None and arm in w.measurement.ratios]
        rs = [r for r in rs if math.isfinite(r) and r > 0]
        return math.exp(sum(map(math.log, rs)) / len(rs)) if rs else None


# A meter measures named solutions (the first is the reference) on a target's workloads.
Meter = Callable[[Any, Mapping[str, Any], Sequence[Any]], tuple[WorkloadEnergy, ...]]


def nvml_meter(device_kind: str, s: EnergySettings = EnergySettings(), cache_dir: Path | None = None,
               open_device: DeviceFactory = NvmlDevice) -> Meter:
    """The real meter: NVML in this process, each arm in a sandboxed child."""

    def meter(target: Any, solutions: Mapping[str, Any], workloads: Sequence[Any]) -> tuple[WorkloadEnergy, ...]:
        # The target's limit, not a constant of the meter's (issue 22).
        limited = replace(s, timeout_s=target.budget.energy_timeout_s) if hasattr(target, "budget") else s
        return measure_solutions(target.definition, solutions, workloads, device_kind, limited, flops=target.flops,
                                 nbytes=target.bytes, cache_dir=cache_dir, open_device=open_device)

    return meter


def notes_for_prompt(findings: Sequence[Any], current: ProxyEnergy | None, baseline: ProxyEnergy | None) -> str:
    """The prompt's energy section: the proxy of the current code and the energy-only findings."""
    lines = ["Energy is a secondary objective: never give up speed for it. Among equally fast variants, prefer "
             "the one that executes fewer instructions and moves fewer bytes (fast intrinsics such as "
             "__fdividef / tl.fdiv(..., ieee_rounding=False) where the tolerance allows, no spills, coalesced "
             "access)."]
    if current is not None:
        e = current
        lines.append(f"Counter-based energy estimate of the current code (paper Eq. 4): {e.total_pj / 1e6:.1f} uJ per "
                     f"call (DRAM {e.dram_pj / 1e6:.1f}, uncoalesced {e.uncoalesced_pj / 1e6:.1f}, spills "
                     f"{e.local_pj / 1e6:.1f}, instructions {e.instruction_pj / 1e6:.1f})"
                     + (f"; the baseline's: {baseline.total_pj / 1e6:.1f} uJ." if baseline is not None else "."))
    for f in findings:
        fix = f" Fix: {f.recommendations[0]}" if f.recommendations else ""
        lines.append(f"- [{f.severity}] {f.title} ({f.tool}).{fix}")
    return "\n".join(lines).strip()


def decide(mode: str, target: Any, baseline: Any, passing: Sequence[Any], workloads: Sequence[Any],
           meter: Meter | None, noise: float, eps: float,
           proxies: Mapping[str, ProxyEnergy]) -> tuple[Any | None, EnergyOutcome | None]:
    """After the gate: the published winner (a gate result) and the energy record.

    ``passing`` are the gate results that passed, in gate order. Off: the first, nothing measured.
    Passive: the baseline and the first are measured; the first is published. Active: the baseline
    and every passing candidate are measured in one interleaved run; among those within ``noise`` of
    the fastest, the least dynamic energy (paired ratio to the baseline) is published.
    """
    first = passing[0] if passing else None
    if mode == "off":
        return first, None
    proxy_json = {k: e.to_json() for k, e in proxies.items()}
    cands = list(passing) if mode == "active" else list(passing[:1])
    arms = {"baseline": baseline, **{f"candidate{i + 1}": g.candidate.solution for i, g in enumerate(cands)}}
    names = {a: sol.name for a, sol in arms.items()}
    if meter is None:
        return first, EnergyOutcome(mode, eps, noise, (), names, proxy_json, "candidate1" if first else None,
                                    "energy not measured: no GPU (NVML measures only on a GPU)",
                                    ("no GPU: energy was not measured",))
    measured = _paced(meter(target, arms, workloads), baseline_rows=cands[0].per_workload if cands else (),
                      arms_rows={f"candidate{i + 1}": g.per_workload for i, g in enumerate(cands)})
    notes = tuple(f"{w.uuid}: {w.note}" for w in measured if w.note)
    out = EnergyOutcome(mode, eps, noise, measured, names, proxy_json, None, "", notes)
    if not cands:
        return None, replace(out, choice="no candidate passed the gate: the baseline's energy alone")
    if mode == "active":
        c = choose([g.speedup for g in cands], [out.ratio(f"candidate{i + 1}") for i in range(len(cands))], mode, noise)
        idx, why = c.index, c.reason
    else:
        idx, why = 0, "passive: measured and reported; the choice is speed's alone"
    arm = f"candidate{idx + 1}"
    return with_energy(cands[idx], measured, arm), replace(out, winner_arm=arm, choice=why)


PACE_FLOOR = 0.1
"""An arm whose calls ran faster than this fraction of its verified median in the energy windows (on
the parent's clock) did not do the work it was verified doing there. Replayed as CUDA graphs with a
warm L2 an honest kernel runs faster than under the evaluator's cold-L2 events, so the floor is low:
it catches an arm that skips its work, not one that trims it."""


def _paced(measured: Sequence[WorkloadEnergy], baseline_rows: Sequence[Mapping[str, Any]],
           arms_rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[WorkloadEnergy, ...]:
    """Each workload's measurement, dropped (with a note naming why) where an arm's pace in its
    energy windows is inconsistent with the median the evaluator verified for it (issue 17): a
    candidate that detects its energy arm and skips the work there reports no energy at all."""
    verified: dict[tuple[str, str], float] = {}
    gpu = lambda r: str(r.get("timing_mode", "cpu")) != "cpu"  # noqa: E731 - CPU timings pace nothing on a GPU
    for r in baseline_rows:
        if r.get("baseline_ms") and gpu(r):
            verified[("baseline", r["uuid"])] = float(r["baseline_ms"])
    for arm, rows in arms_rows.items():
        for r in rows:
            if r.get("candidate_ms") and gpu(r):
                verified[(arm, r["uuid"])] = float(r["candidate_ms"])
    out = []
    for w in measured:
        m, bad = w.measurement, []
        for arm, e in (m.arms.items() if m is not None else ()):
            ms = verified.get((arm, w.uuid))
            if ms and e.ms_per_call < PACE_FLOOR * ms:
                bad.append(f"{arm} ran {e.ms_per_call:.4f} ms a call in its energy windows against a verified "
                           f"{ms:.4f} ms")
        if bad:
            w = replace(w, measurement=None, note="ENERGY_ARM_INCONSISTENT: " + "; ".join(bad)
                        + ": it did not do the verified work there, so no energy is reported")
        out.append(w)
    return tuple(out)


def with_energy(gate: Any, measured: Sequence[WorkloadEnergy], arm: str) -> Any:
    """A gate result whose per-workload rows carry dynamic energy per call (J) and the paired ratio."""
    by = {w.uuid: w.measurement for w in measured if w.measurement is not None}
    rows = []
    for r in gate.per_workload:
        m = by.get(r["uuid"])
        if m is not None and arm in m.arms and "baseline" in m.arms:
            ratio = m.ratios.get(arm)
            r = {**r, "baseline_energy_j": m.arms["baseline"].dynamic_mj.median / 1e3,
                 "candidate_energy_j": m.arms[arm].dynamic_mj.median / 1e3,
                 "energy_ratio": ratio.median if ratio else None, "energy_ratio_low": ratio.low if ratio else None,
                 "energy_ratio_high": ratio.high if ratio else None}
        rows.append(r)
    return replace(gate, per_workload=tuple(rows))
