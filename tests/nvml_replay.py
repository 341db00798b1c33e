"""A replay of the NVML energy counter from samples recorded on the H200 (tests/fixtures/h200/nvml.json).

Not invented numbers: idle power is the counter's slope over the recorded 2 s idle, busy power its
slope over the recorded 2 s of back-to-back calls, and a call takes the recorded loop time divided
by the recorded call count. Time is virtual, so a 1 s window costs nothing. The counter reads in
whole mJ, as NVML's does. A test may scale an arm's dynamic power (a cheaper candidate), add a slow
linear drift to both, or a seeded per-window jitter of the size the issue reports for real windows.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelpro.runner.energy import Reading

RECORDING = Path(__file__).parent / "fixtures" / "h200" / "nvml.json"


@dataclass(frozen=True)
class Recorded:
    """The facts taken from the recording."""

    idle_w: float
    busy_w: float
    call_s: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    power_limit_w: float
    device: str

    @staticmethod
    def load(path: Path = RECORDING) -> Recorded:
        d = json.loads(path.read_text())
        i0, i1 = d["idle"]
        s, e = d["loop"]["start"], d["loop"]["end"]
        return Recorded(
            idle_w=(i1["energy_mJ"] - i0["energy_mJ"]) / (i1["t"] - i0["t"]) / 1e3,
            busy_w=(e["energy_mJ"] - s["energy_mJ"]) / (e["t"] - s["t"]) / 1e3,
            call_s=(e["t"] - s["t"]) / d["loop"]["calls"],
            sm_clock_mhz=e["sm_clock_MHz"], mem_clock_mhz=e["mem_clock_MHz"],
            power_limit_w=e["power_limit_mW"] / 1e3, device=d["device"],
        )


@dataclass
class Clock:
    """Virtual time shared by the device and the runner."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += max(s, 1e-6)  # polling also advances time, so loops end


class RealClock(Clock):
    """Wall time, for driving real processes: the replayed counter then sees only idle power."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()

    @property  # type: ignore[override]
    def now(self) -> float:
        return time.perf_counter() - self._t0

    def sleep(self, s: float) -> None:
        time.sleep(s)


@dataclass
class ReplayDevice:
    """NVML as the protocol sees it, integrating recorded power over virtual time."""

    rec: Recorded
    clock: Clock
    drift_w_per_s: float = 0.0
    name: str = "NVIDIA H200 (replay)"
    energy_mj: float = 0.0
    _last_t: float = 0.0
    _busy_w: float | None = None
    extra_pids: tuple[int, ...] = ()
    tick_s: float = 0.0
    """The counter updates only every tick_s (0: continuously), holding the value of the last update."""
    lag_s: float = 0.0
    """With tick_s: each update reports the energy up to lag_s before it (the H200's windows that
    ended just before an update read 2.7 % less energy per call than those that took one more)."""
    _history: list[tuple[float, float]] = field(default_factory=lambda: [(0.0, 0.0)])

    def _advance(self) -> None:
        dt = self.clock.now - self._last_t
        if dt > 0:
            mid = (self.clock.now + self._last_t) / 2
            p = (self._busy_w if self._busy_w is not None else self.rec.idle_w) + self.drift_w_per_s * mid
            self.energy_mj += p * 1e3 * dt
            self._last_t = self.clock.now
            self._history.append((self.clock.now, self.energy_mj))

    def _energy_at(self, t: float) -> float:
        # Power is constant between history points, so energy is linear between them.
        for (t0, e0), (t1, e1) in zip(self._history, self._history[1:], strict=False):
            if t0 <= t <= t1:
                return e0 + (e1 - e0) * (t - t0) / (t1 - t0)
        return self.energy_mj

    def busy(self, seconds: float, power_w: float) -> None:
        self._advance()
        self._busy_w = power_w
        self.clock.now += seconds
        self._advance()
        self._busy_w = None

    def read(self) -> Reading:
        self._advance()
        e = (self._energy_at(max(0.0, math.floor(self.clock.now / self.tick_s) * self.tick_s - self.lag_s))
             if self.tick_s else self.energy_mj)
        return Reading(self.clock.now, float(math.floor(e)), self._busy_w or self.rec.idle_w,
                       self.rec.sm_clock_mhz, self.rec.mem_clock_mhz, 40.0, self.rec.power_limit_w)

    def processes(self) -> tuple[int, ...] | None:
        return self.extra_pids


@dataclass
class ReplayRunner:
    """Arms as the recorded kernel: each call takes the recorded time at the recorded busy power,
    its dynamic part scaled by the arm's factor, with optional seeded jitter per run."""

    device: ReplayDevice
    dynamic_scale: dict[str, float] = field(default_factory=dict)
    time_scale: dict[str, float] = field(default_factory=dict)
    jitter: float = 0.0
    seed: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    delay_s: dict[str, float] = field(default_factory=dict)
    """Idle time before an arm's calls start (its process answering the command)."""

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def run(self, arm: str, calls: int) -> None:
        r = self.device.rec
        dyn = (r.busy_w - r.idle_w) * self.dynamic_scale.get(arm, 1.0)
        noise = 1.0 + self._rng.gauss(0.0, self.jitter) if self.jitter else 1.0
        self.device.clock.now += self.delay_s.get(arm, 0.0)
        self.device.busy(calls * r.call_s * self.time_scale.get(arm, 1.0), r.idle_w + dyn * noise)
        self.calls[arm] = self.calls.get(arm, 0) + calls

    def pids(self) -> tuple[int, ...]:
        return ()


def replay(**kw: object) -> tuple[Clock, ReplayDevice, ReplayRunner]:
    clock = Clock()
    dev = ReplayDevice(Recorded.load(), clock, **{k: v for k, v in kw.items() if k in ("drift_w_per_s", "extra_pids", "tick_s", "lag_s")})  # type: ignore[arg-type]
    runner = ReplayRunner(dev, **{k: v for k, v in kw.items() if k in ("dynamic_scale", "time_scale", "jitter", "seed", "delay_s")})  # type: ignore[arg-type]
    return clock, dev, runner
