"""Energy per target: every workload measured for every arm (``measure_solutions``), the real meter
(``nvml_meter``), and the checks of the measured pace against the verified timings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .arms import ArmFailed, ChildRunner
from .measurement import DEFAULTS, EnergySettings, Measurement, measure
from .nvml import EnergyDevice, EnergyUnavailable, NvmlDevice


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
                      s: EnergySettings = DEFAULTS, *, flops: str | None = None, nbytes: str | None = None,
                      open_device: DeviceFactory = NvmlDevice, make_runner: RunnerFactory = ChildRunner,
                      cache_dir: Path | None = None, **kw: Any) -> tuple[WorkloadEnergy, ...]:
    """Every workload, all arms (the first is the reference) interleaved in one run each.
    Failures are notes on the result, never exceptions."""
    from ..roofline import axis_values, evaluate_formula

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


# A meter measures named solutions (the first is the reference) on a target's workloads.
Meter = Callable[[Any, Mapping[str, Any], Sequence[Any]], tuple[WorkloadEnergy, ...]]


def nvml_meter(device_kind: str, s: EnergySettings = DEFAULTS, cache_dir: Path | None = None,
               open_device: DeviceFactory = NvmlDevice) -> Meter:
    """The real meter: NVML in this process, each arm in a sandboxed child."""

    def meter(target: Any, solutions: Mapping[str, Any], workloads: Sequence[Any]) -> tuple[WorkloadEnergy, ...]:
        # The target's limit, not a constant of the meter's (issue 22).
        limited = replace(s, timeout_s=target.budget.energy_timeout_s) if hasattr(target, "budget") else s
        return measure_solutions(target.definition, solutions, workloads, device_kind, limited, flops=target.flops,
                                 nbytes=target.bytes, cache_dir=cache_dir, open_device=open_device)

    return meter


PACE_FLOOR = 0.1
"""An arm whose calls ran faster than this fraction of its verified median in the energy windows (on
the parent's clock) did not do the work it was verified doing there. Replayed as CUDA graphs with a
warm L2 an honest kernel runs faster than under the evaluator's cold-L2 events, so the floor is low:
it catches an arm that skips its work, not one that trims it."""


def _paced(measured: Sequence[WorkloadEnergy], baseline_rows: Sequence[Mapping[str, Any]],
           arms_rows: Mapping[str, Sequence[Mapping[str, Any]]], device: str | None = None) -> tuple[WorkloadEnergy, ...]:
    """Each workload's measurement, dropped (with a note naming why) where an arm's pace in its
    energy windows is inconsistent with the median the evaluator verified for it (issue 17): a
    candidate that detects its energy arm and skips the work there reports no energy at all.

    ``device`` is where the evaluator verified those medians (EvalSettings.device), as the parent
    knows it: CPU timings (the Triton interpreter) pace nothing on a GPU. Without it, a row's
    ``timing_mode`` decides, which is the parent's own too (runner/evaluator.py ``timing_mode`` sets
    it from the device and the cuda_graphs setting; the candidate's label is never kept), and only
    the exact label 'cpu' exempts a row."""
    verified: dict[tuple[str, str], float] = {}

    def gpu(r: Mapping[str, Any]) -> bool:
        if device is not None:
            return device == "cuda"
        return r.get("timing_mode") != "cpu"

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
