"""Energy per call: NVML measurement, its statistics, the counter-based proxy, the objective and the
policy that applies them to a run. One module each:

    nvml.py         the device (NVML's counter behind ``EnergyDevice``)
    measurement.py  the settings, records and statistics of one measurement, and its protocol (``measure``)
    arms.py         the arms' sandboxed processes (``ChildRunner``, the harness's ``ArmCalls`` inside)
    meter.py        every workload and arm of a target (``measure_solutions``, ``nvml_meter``, pace checks)
    proxy.py        the counter-based proxy (paper Eq. 4) and the prompt's energy section
    objective.py    the reward's energy term and the choice among tied candidates
    policy.py       ``EnergyPolicy``: what a run does with energy, built once; ``EnergyOutcome``: its record

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

from .arms import (
    GRAPH_ROUNDS,
    ArmFailed,
    ChildRunner,
    child_main,
)
from .measurement import (
    DEFAULTS,
    MIN_ABOVE_IDLE,
    PLACEMENT,
    ArmEnergy,
    ArmRunner,
    EnergySettings,
    Interval,
    Measurement,
    Window,
    counter_update_ms,
    dynamic_mj_per_call,
    idle_power_w,
    loop_seconds,
    measure,
    median_ci,
    paired_ratios,
    summarize,
)
from .meter import (
    PACE_FLOOR,
    Meter,
    WorkloadEnergy,
    measure_solutions,
    nvml_meter,
    with_energy,
)
from .nvml import (
    EnergyDevice,
    EnergyUnavailable,
    NvmlDevice,
    Reading,
    visible_gpu,
)
from .objective import (
    ENERGY_RATIO_CLAMP,
    Choice,
    choose,
    energy_eps,
    energy_term,
    timing_noise,
)
from .policy import (
    EnergyOutcome,
    EnergyPolicy,
    decide,
)
from .proxy import (
    PJ_PER_DRAM_BYTE,
    PJ_PER_EXCESS_SECTOR,
    PJ_PER_INSTRUCTION,
    PJ_PER_LOCAL_SECTOR,
    ProxyEnergy,
    notes_for_prompt,
    proxy,
)

__all__ = [
    "ArmEnergy",
    "ArmFailed",
    "ArmRunner",
    "ChildRunner",
    "Choice",
    "DEFAULTS",
    "ENERGY_RATIO_CLAMP",
    "EnergyDevice",
    "EnergyOutcome",
    "EnergyPolicy",
    "EnergySettings",
    "EnergyUnavailable",
    "GRAPH_ROUNDS",
    "Interval",
    "MIN_ABOVE_IDLE",
    "Measurement",
    "Meter",
    "NvmlDevice",
    "PACE_FLOOR",
    "PJ_PER_DRAM_BYTE",
    "PJ_PER_EXCESS_SECTOR",
    "PJ_PER_INSTRUCTION",
    "PJ_PER_LOCAL_SECTOR",
    "PLACEMENT",
    "ProxyEnergy",
    "Reading",
    "Window",
    "WorkloadEnergy",
    "child_main",
    "choose",
    "counter_update_ms",
    "decide",
    "dynamic_mj_per_call",
    "energy_eps",
    "energy_term",
    "idle_power_w",
    "loop_seconds",
    "measure",
    "measure_solutions",
    "median_ci",
    "notes_for_prompt",
    "nvml_meter",
    "paired_ratios",
    "proxy",
    "summarize",
    "timing_noise",
    "visible_gpu",
    "with_energy",
]
