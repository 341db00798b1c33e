"""The results format between the runner and the bot: one target's ``result.json``, defined once.

The runner (``runner/report.py``) writes these records with ``to_json``; the publish step
(``bot/artifact.py``) reads them with ``from_json``, which trusts nothing: the optimize job runs the
pull request's code, so every value is checked (types, finite numbers in range, bounded strings and
lists, the numbers agreeing the way the gate computes them) and the first failure raises
:class:`SchemaError` naming the field. ``result.json`` carries more keys than these (logs, the
energy table, rejected candidates) for the report and for people; the bot never reads them.

Pure data: only the standard library, no torch, no ``kernelpro.runner``, so both sides import it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_LIST",
    "MAX_NAME",
    "MAX_TEXT",
    "SEVERITIES",
    "BaseBranch",
    "Ceilings",
    "Correctness",
    "CurvePoint",
    "Finding",
    "Gate",
    "GuardRow",
    "Guards",
    "ProgrammerUse",
    "Reader",
    "RooflineRow",
    "SchemaError",
    "Stage1",
    "TargetResult",
    "Tolerance",
    "Winner",
    "WorkloadTiming",
]

MAX_NAME = 200
"""Longest identifier-like string (target, solution, status, tool, library name)."""
MAX_TEXT = 4000
"""Longest free-text string (notes, stop reasons, logs, titles)."""
MAX_LIST = 10_000
"""Longest list (curve points, gate rows, workloads, findings)."""
MAX_TOLERANCES = 256
"""Most tolerance entries (one per output or output dtype)."""

SEVERITIES = ("critical", "high", "medium", "low", "info")
"""Finding severities, most severe first: the runner orders findings by it, the bot refuses others."""
VERDICTS = frozenset({"", "slower", "faster", "on par", "uncertain", "not compared"})
"""The runner's readings of the PR against its base branch (runner/basebranch.py); '' in older artifacts."""

TARGET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""A target name: it is a directory of the results, so a plain file name."""
_TOLERANCE_KEY = re.compile(r"[A-Za-z0-9_]{1,64}")
_AXIS_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_INTEGER = re.compile(r"0|-?[1-9][0-9]{0,17}")
_SPEEDUP_MAX = 1e6
_MS_MAX = 1e7
_REL = 1e-3
_ENERGY_BAND = 1.5
"""How far a median of paired energy ratios may stand from the ratio of the arms' medians."""
"""How far two numbers that must agree may differ, relatively: the runner writes full floats,
so this is rounding, not measurement noise."""


class SchemaError(ValueError):
    """A value of result.json is missing, of the wrong type, out of range or inconsistent."""

    def __init__(self, field: str, what: str) -> None:
        self.field = field
        """The JSON path of the field at fault, e.g. ``targets[0][swiglu].winner.speedup``."""
        self.what = what
        """What was wrong with it."""
        super().__init__(f"{field}: {what}")


# --------------------------------------------------------------------------- checked access


class Reader:
    """Typed access to untrusted JSON; every failure names the JSON path."""

    def fail(self, where: str, what: str) -> SchemaError:
        return SchemaError(where, what)

    def obj(self, v: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, got {type(v).__name__}")
        return v

    def lst(self, v: Any, where: str, limit: int = MAX_LIST) -> list[Any]:
        if not isinstance(v, list):
            raise self.fail(where, f"expected a list, got {type(v).__name__}")
        if len(v) > limit:
            raise self.fail(where, f"{len(v)} items, more than the limit of {limit}")
        return v

    def get(self, o: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in o:
            raise self.fail(f"{where}.{key}", "missing")
        return o[key]

    def text(self, v: Any, where: str, limit: int = MAX_TEXT) -> str:
        if not isinstance(v, str):
            raise self.fail(where, f"expected a string, got {type(v).__name__}")
        if len(v) > limit:
            raise self.fail(where, f"{len(v)} characters, more than the limit of {limit}")
        return v

    def name(self, v: Any, where: str) -> str:
        return self.text(v, where, MAX_NAME)

    def opt_text(self, v: Any, where: str, limit: int = MAX_TEXT) -> str:
        return "" if v is None else self.text(v, where, limit)

    def num(self, v: Any, where: str, lo: float = 0.0, hi: float = 1e9) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(where, f"expected a number, got {type(v).__name__}")
        x = float(v)
        if not math.isfinite(x):
            raise self.fail(where, f"{x} is not a finite number")
        if not lo <= x <= hi:
            raise self.fail(where, f"{x} is outside the range {lo:g}..{hi:g}")
        return x

    def opt_num(self, v: Any, where: str, lo: float = 0.0, hi: float = 1e9) -> float | None:
        return None if v is None else self.num(v, where, lo, hi)

    def int_(self, v: Any, where: str, lo: int = 0, hi: int = 10**9) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(where, f"expected an integer, got {type(v).__name__}")
        if not lo <= v <= hi:
            raise self.fail(where, f"{v} is outside the range {lo}..{hi}")
        return v

    def bool_(self, v: Any, where: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(where, f"expected true or false, got {type(v).__name__}")
        return v

    def axes(self, v: Any, where: str) -> str:
        """``{"M": 4096}`` -> ``"M=4096"``; names and values that would make that text ambiguous
        (``,`` or ``=`` inside) are refused, so :func:`_axes_json` reads it back."""
        o = self.obj(v, where)
        if len(o) > 32:
            raise self.fail(where, "more than 32 axes")
        parts = []
        for k, x in o.items():
            if not _AXIS_NAME.fullmatch(self.name(k, f"{where} key")):
                raise self.fail(f"{where} key", f"{k[:40]!r} is not an axis name (letters, digits, _)")
            if isinstance(x, bool) or not isinstance(x, (int, float, str)):
                raise self.fail(f"{where}.{k}", "expected a number or a string")
            if isinstance(x, float) and not math.isfinite(x):
                raise self.fail(f"{where}.{k}", f"{x} is not a finite number")
            value = self.name(str(x), f"{where}.{k}")
            if "," in value or "=" in value:
                raise self.fail(f"{where}.{k}", "an axis value may not contain ',' or '='")
            parts.append(f"{k}={value}")
        return ", ".join(parts)

    def param(self, v: Any, where: str) -> str:
        if isinstance(v, bool) or v is None:
            return str(v)
        if isinstance(v, (int, float)):
            return f"{self.num(v, where, -1e18, 1e18):g}" if isinstance(v, float) else str(int(v))
        return self.name(v, where)

    def pairs(self, v: Any, where: str, as_int: bool) -> tuple[tuple[str, Any], ...]:
        o = self.obj(v if v is not None else {}, where)
        if len(o) > 256:
            raise self.fail(where, "more than 256 entries")
        return tuple((self.name(k, f"{where} key"),
                      self.int_(x, f"{where}.{k}") if as_int else self.num(x, f"{where}.{k}", 0.0, 1e9))
                     for k, x in o.items())

    def items(self, v: Any, where: str, limit: int = MAX_LIST) -> list[tuple[str, Any]]:
        """A list's entries with their JSON paths."""
        return [(f"{where}[{i}]", x) for i, x in enumerate(self.lst(v, where, limit))]


_R = Reader()


def _axes_json(axes: str) -> dict[str, int | float | str]:
    """The inverse of :meth:`Reader.axes`: ``"M=4096, K=8"`` -> ``{"M": 4096, "K": 8}``."""
    out: dict[str, int | float | str] = {}
    for part in axes.split(", ") if axes else ():
        k, _, v = part.partition("=")
        out[k] = int(v) if _INTEGER.fullmatch(v) else v
    return out


def _opt(x: Any, f: Any) -> Any:
    return None if x is None else f(x)


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class WorkloadTiming:
    """One workload's final-gate timing, baseline (PR kernel) against the winner."""

    uuid: str
    """Workload id."""
    axes: str
    """The workload's variable axes, e.g. ``M=4096``."""
    baseline_ms: float
    """Median time of the PR's kernel."""
    baseline_p10_ms: float | None
    """10th percentile of the PR's kernel."""
    baseline_p90_ms: float | None
    """90th percentile of the PR's kernel."""
    candidate_ms: float
    """Median time of the winner."""
    candidate_p10_ms: float | None
    """10th percentile of the winner."""
    candidate_p90_ms: float | None
    """90th percentile of the winner."""
    speedup: float
    """baseline_ms / candidate_ms."""
    speedup_low: float | None
    """Low end of the speedup's range."""
    speedup_high: float | None
    """High end of the speedup's range."""
    n: int | None
    """Timed calls."""
    baseline_energy_j: float | None
    """Energy per call of the PR's kernel in joules, when measured."""
    candidate_energy_j: float | None
    """Energy per call of the winner in joules, when measured."""
    energy_ratio: float | None = None
    """Winner / PR kernel dynamic energy (median of paired NVML windows), when measured."""
    energy_ratio_low: float | None = None
    """Low end of the ratio's 95 % bootstrap interval."""
    energy_ratio_high: float | None = None
    """High end of the ratio's 95 % bootstrap interval."""
    needed: float | None = None
    """The speedup the gate asked for: gamma, or the PR kernel's p90/p10 where wider (runner/gate.py)."""

    def to_json(self) -> dict[str, Any]:
        # Energy keys only when measured: result.json says nothing of energy a run did not measure.
        out = {"uuid": self.uuid, "axes": _axes_json(self.axes), "baseline_ms": self.baseline_ms,
               "baseline_p10_ms": self.baseline_p10_ms, "baseline_p90_ms": self.baseline_p90_ms,
               "candidate_ms": self.candidate_ms, "candidate_p10_ms": self.candidate_p10_ms,
               "candidate_p90_ms": self.candidate_p90_ms, "speedup": self.speedup, "speedup_low": self.speedup_low,
               "speedup_high": self.speedup_high, "n": self.n}
        for k in ("baseline_energy_j", "candidate_energy_j", "energy_ratio", "energy_ratio_low", "energy_ratio_high",
                  "needed"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out

    @classmethod
    def from_json(cls, v: Any, where: str = "workload") -> WorkloadTiming:
        r, o = _R, _R.obj(v, where)

        def opt(key: str, hi: float = _MS_MAX) -> float | None:
            return r.opt_num(o.get(key), f"{where}.{key}", 0.0, hi)

        return cls(
            uuid=r.name(r.get(o, "uuid", where), f"{where}.uuid"),
            axes=r.axes(o.get("axes", {}), f"{where}.axes"),
            baseline_ms=r.num(r.get(o, "baseline_ms", where), f"{where}.baseline_ms", 0.0, _MS_MAX),
            baseline_p10_ms=opt("baseline_p10_ms"),
            baseline_p90_ms=opt("baseline_p90_ms"),
            candidate_ms=r.num(r.get(o, "candidate_ms", where), f"{where}.candidate_ms", 0.0, _MS_MAX),
            candidate_p10_ms=opt("candidate_p10_ms"),
            candidate_p90_ms=opt("candidate_p90_ms"),
            speedup=r.num(r.get(o, "speedup", where), f"{where}.speedup", 0.0, _SPEEDUP_MAX),
            speedup_low=opt("speedup_low", _SPEEDUP_MAX),
            speedup_high=opt("speedup_high", _SPEEDUP_MAX),
            n=None if o.get("n") is None else r.int_(o["n"], f"{where}.n"),
            baseline_energy_j=opt("baseline_energy_j", 1e6),
            candidate_energy_j=opt("candidate_energy_j", 1e6),
            energy_ratio=opt("energy_ratio", _SPEEDUP_MAX),
            energy_ratio_low=opt("energy_ratio_low", _SPEEDUP_MAX),
            energy_ratio_high=opt("energy_ratio_high", _SPEEDUP_MAX),
            needed=opt("needed", _SPEEDUP_MAX),
        )


@dataclass(frozen=True)
class Correctness:
    """Correctness evidence of the winner on one workload."""

    uuid: str
    """Workload id."""
    max_abs: float
    """Largest absolute error over all trials."""
    max_rel: float
    """Largest relative error over all trials."""
    rel_l2: float | None
    """Relative L2 error."""
    trials: int
    """Fresh seeded input sets checked."""
    seeds: tuple[int, ...]
    """The seeds of those input sets."""

    def to_json(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "max_abs": self.max_abs, "max_rel": self.max_rel, "rel_l2": self.rel_l2,
                "trials": self.trials, "seeds": list(self.seeds)}

    @classmethod
    def from_json(cls, v: Any, where: str = "correctness") -> Correctness:
        r, o = _R, _R.obj(v, where)
        return cls(
            uuid=r.name(r.get(o, "uuid", where), f"{where}.uuid"),
            max_abs=r.num(r.get(o, "max_abs", where), f"{where}.max_abs", 0.0, 1e30),
            max_rel=r.num(r.get(o, "max_rel", where), f"{where}.max_rel", 0.0, 1e30),
            rel_l2=r.opt_num(o.get("rel_l2"), f"{where}.rel_l2", 0.0, 1e30),
            trials=r.int_(r.get(o, "trials", where), f"{where}.trials", 0, 1_000_000),
            seeds=tuple(r.int_(s, w, 0, 2**64) for w, s in r.items(o.get("seeds", []), f"{where}.seeds", 1000)),
        )


@dataclass(frozen=True)
class Winner:
    """The candidate that passed the final gate."""

    solution: str
    """Solution name."""
    hash: str
    """Content hash of its sources."""
    note: str
    """The last strategy step."""
    lineage: tuple[str, ...]
    """Strategy steps from the PR's kernel to the winner, oldest first."""
    params: tuple[tuple[str, str], ...]
    """Tuned parameters, name and value as text."""
    speedup: float
    """Geometric-mean speedup over the workloads, re-measured by the gate."""
    gamma: float
    """The gate's threshold: at least this much faster on every workload."""
    workloads: tuple[WorkloadTiming, ...]
    """Per-workload timings of the gate."""
    correctness: tuple[Correctness, ...]
    """Per-workload correctness evidence of the gate."""
    memcheck: str = ""
    """compute-sanitizer memcheck of the winner: 'clean', 'not run' (no tool on the runner), '' off the GPU."""
    guards: Guards | None = None
    """The guard shapes the gate timed beyond the listed workloads; None when none were (turned off, older kernelpro)."""

    def to_json(self) -> dict[str, Any]:
        return {"solution": self.solution, "hash": self.hash, "note": self.note, "lineage": list(self.lineage),
                "params": dict(self.params), "speedup": self.speedup, "gamma": self.gamma,
                "workloads": [w.to_json() for w in self.workloads],
                "correctness": [c.to_json() for c in self.correctness],
                "memcheck": {"status": self.memcheck} if self.memcheck else None,
                "guards": _opt(self.guards, Guards.to_json)}

    @classmethod
    def from_json(cls, v: Any, where: str = "winner") -> Winner:
        r, o = _R, _R.obj(v, where)
        params = r.obj(o.get("params", {}), f"{where}.params")
        if len(params) > 256:
            raise r.fail(f"{where}.params", "more than 256 parameters")
        return cls(
            solution=r.name(r.get(o, "solution", where), f"{where}.solution"),
            hash=r.name(o.get("hash", ""), f"{where}.hash"),
            note=r.opt_text(o.get("note"), f"{where}.note"),
            lineage=tuple(r.text(x, w) for w, x in r.items(o.get("lineage", []), f"{where}.lineage", 1000)),
            params=tuple((r.name(k, f"{where}.params key"), r.param(x, f"{where}.params.{k}"))
                         for k, x in params.items()),
            speedup=r.num(r.get(o, "speedup", where), f"{where}.speedup", 1.0, _SPEEDUP_MAX),
            gamma=r.num(r.get(o, "gamma", where), f"{where}.gamma", 1.0, 100.0),
            workloads=tuple(WorkloadTiming.from_json(x, w)
                            for w, x in r.items(o.get("workloads", []), f"{where}.workloads", 1000)),
            correctness=tuple(Correctness.from_json(x, w)
                              for w, x in r.items(o.get("correctness", []), f"{where}.correctness", 1000)),
            memcheck=_memcheck(o.get("memcheck"), f"{where}.memcheck"),
            guards=_opt(o.get("guards"), lambda g: Guards.from_json(g, f"{where}.guards")),
        )


def _memcheck(v: Any, where: str) -> str:
    """A winner's memcheck: clean, or not run; anything else could not have passed the gate."""
    if v is None:
        return ""
    status = _R.name(_R.get(_R.obj(v, where), "status", where), f"{where}.status")
    if status not in ("clean", "not run"):
        raise _R.fail(f"{where}.status", f"{status!r}: a winner's memcheck is 'clean' or 'not run'")
    return status


GUARD_VERDICTS = frozenset({"ok", "slower", "not timed", "not reached"})
"""runner/guard.py's readings of one guard shape (a candidate's status where it failed one)."""


@dataclass(frozen=True)
class GuardRow:
    """One guard shape the final gate timed (or could not judge) beyond the listed workloads."""

    axes: str
    """Its variable axes, e.g. ``M=2048``."""
    why: str
    """How it was chosen, e.g. 'M=2048: a smaller power of two than listed'."""
    verdict: str
    """``ok``, ``slower``, ``not timed``, ``not reached``, a candidate's status, or '' for a shape not judged."""
    baseline_ms: float | None = None
    """Median time of the PR's kernel there (the slower of its two runs)."""
    candidate_ms: float | None = None
    """Median time of the candidate there."""
    speedup: float | None = None
    """baseline_ms / candidate_ms."""
    noise: float | None = None
    """The factor within which a ratio below 1 still counts as even (runner/energy.timing_noise)."""
    reason: str = ""
    """Why the shape was not judged (the PR's kernel fails there); '' for a judged one."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"axes": _axes_json(self.axes), "why": self.why}
        if self.reason:
            return {**out, "reason": self.reason}
        for k in ("baseline_ms", "candidate_ms", "speedup", "noise"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return {**out, "verdict": self.verdict}

    @classmethod
    def from_json(cls, v: Any, where: str, skipped: bool = False) -> GuardRow:
        r, o = _R, _R.obj(v, where)

        def opt(key: str, hi: float = _MS_MAX) -> float | None:
            return r.opt_num(o.get(key), f"{where}.{key}", 0.0, hi)

        return cls(
            axes=r.axes(r.get(o, "axes", where), f"{where}.axes"),
            why=r.text(o.get("why", ""), f"{where}.why", 300),
            verdict="" if skipped else r.name(r.get(o, "verdict", where), f"{where}.verdict"),
            baseline_ms=opt("baseline_ms"),
            candidate_ms=opt("candidate_ms"),
            speedup=opt("speedup", _SPEEDUP_MAX),
            noise=opt("noise", 100.0),
            reason=r.text(r.get(o, "reason", where), f"{where}.reason", 500) if skipped else "",
        )


@dataclass(frozen=True)
class Guards:
    """The final gate's verdict on the guard shapes for one candidate (runner/guard.py's GuardCheck)."""

    passed: bool
    """Correct on every guard shape and nowhere slower than the PR's kernel beyond the noise."""
    reason: str
    """Why it was refused, or 'passed'."""
    shapes: tuple[GuardRow, ...]
    """The shapes judged, in the order timed."""
    skipped: tuple[GuardRow, ...]
    """The shapes not judged, each with its reason."""
    notes: tuple[str, ...]
    """Shapes not derived, and why (memory cap, constraints, stored inputs, turned off)."""

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "reason": self.reason, "shapes": [s.to_json() for s in self.shapes],
                "skipped": [s.to_json() for s in self.skipped], "notes": list(self.notes)}

    @classmethod
    def from_json(cls, v: Any, where: str = "guards") -> Guards:
        r, o = _R, _R.obj(v, where)
        shapes = tuple(GuardRow.from_json(x, w) for w, x in r.items(o.get("shapes", []), f"{where}.shapes", 256))
        for i, s in enumerate(shapes):
            at = f"{where}.shapes[{i}]"
            if s.speedup is not None and s.baseline_ms and s.candidate_ms and not _close(s.speedup, s.baseline_ms / s.candidate_ms):
                raise r.fail(f"{at}.speedup", f"{s.speedup:.6g} is not baseline_ms / candidate_ms")
        return cls(
            passed=r.bool_(r.get(o, "passed", where), f"{where}.passed"),
            reason=r.opt_text(o.get("reason"), f"{where}.reason", 1000),
            shapes=shapes,
            skipped=tuple(GuardRow.from_json(x, w, skipped=True)
                          for w, x in r.items(o.get("skipped", []), f"{where}.skipped", 256)),
            notes=tuple(r.text(x, w, 500) for w, x in r.items(o.get("notes", []), f"{where}.notes", 64)),
        )


@dataclass(frozen=True)
class Gate:
    """One final-gate attempt."""

    solution: str
    """Solution name."""
    passed: bool
    """Whether it passed."""
    speedup: float
    """Speedup measured by the gate (0 when it failed to run)."""
    reason: str
    """Why it passed or failed."""

    def to_json(self) -> dict[str, Any]:
        return {"solution": self.solution, "passed": self.passed, "speedup": self.speedup, "reason": self.reason}

    @classmethod
    def from_json(cls, v: Any, where: str = "gate") -> Gate:
        r, o = _R, _R.obj(v, where)
        return cls(
            solution=r.name(r.get(o, "solution", where), f"{where}.solution"),
            passed=r.bool_(r.get(o, "passed", where), f"{where}.passed"),
            speedup=r.num(r.get(o, "speedup", where), f"{where}.speedup", 0.0, _SPEEDUP_MAX),
            reason=r.opt_text(o.get("reason"), f"{where}.reason"),
        )


@dataclass(frozen=True)
class CurvePoint:
    """Best verified speedup after one evaluation of the search."""

    evaluation: int
    """1-based evaluation number."""
    best_speedup: float
    """Best verified speedup so far."""
    status: str
    """This evaluation's status (PASSED, COMPILE_ERROR, ...)."""

    def to_json(self) -> dict[str, Any]:
        return {"evaluation": self.evaluation, "best_speedup": self.best_speedup, "status": self.status}

    @classmethod
    def from_json(cls, v: Any, where: str = "curve") -> CurvePoint:
        r, o = _R, _R.obj(v, where)
        return cls(
            evaluation=r.int_(r.get(o, "evaluation", where), f"{where}.evaluation", 1, 10**7),
            best_speedup=r.num(r.get(o, "best_speedup", where), f"{where}.best_speedup", 0.0, _SPEEDUP_MAX),
            status=r.name(o.get("status", ""), f"{where}.status"),
        )


@dataclass(frozen=True)
class Ceilings:
    """The hardware ceilings the roofline used."""

    gpu: str
    """GPU name."""
    bandwidth_gbs: float
    """Memory bandwidth, GB/s."""
    flops_tflops: float
    """Compute peak, TFLOP/s."""
    source: str
    """Where the numbers come from."""

    def to_json(self) -> dict[str, Any]:
        return {"gpu": self.gpu, "bandwidth_gbs": self.bandwidth_gbs, "flops_tflops": self.flops_tflops,
                "source": self.source}

    @classmethod
    def from_json(cls, v: Any, where: str = "ceilings") -> Ceilings:
        r, o = _R, _R.obj(v, where)
        return cls(
            gpu=r.name(o.get("gpu", ""), f"{where}.gpu"),
            bandwidth_gbs=r.num(r.get(o, "bandwidth_gbs", where), f"{where}.bandwidth_gbs", 0.0, 1e7),
            flops_tflops=r.num(r.get(o, "flops_tflops", where), f"{where}.flops_tflops", 0.0, 1e7),
            source=r.text(o.get("source", ""), f"{where}.source", 1000),
        )


@dataclass(frozen=True)
class RooflineRow:
    """Stage 1 roofline position of the PR's kernel on one workload."""

    uuid: str
    """Workload id."""
    axes: str
    """The workload's variable axes."""
    intensity: float | None
    """FLOP per byte."""
    floor_ms: float | None
    """The roofline's lower bound on time."""
    baseline_ms: float | None
    """Measured time of the PR's kernel."""
    pct_of_roofline: float | None
    """floor / measured, in percent."""
    max_speedup: float | None
    """The most speedup the roofline allows."""

    def to_json(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "axes": _axes_json(self.axes), "intensity": self.intensity,
                "floor_ms": self.floor_ms, "baseline_ms": self.baseline_ms,
                "pct_of_roofline": self.pct_of_roofline, "max_speedup": self.max_speedup}

    @classmethod
    def from_json(cls, v: Any, where: str = "workload") -> RooflineRow:
        r, o = _R, _R.obj(v, where)
        return cls(
            uuid=r.name(r.get(o, "uuid", where), f"{where}.uuid"),
            axes=r.axes(o.get("axes", {}), f"{where}.axes"),
            intensity=r.opt_num(o.get("intensity"), f"{where}.intensity", 0.0, 1e12),
            floor_ms=r.opt_num(o.get("floor_ms"), f"{where}.floor_ms", 0.0, _MS_MAX),
            baseline_ms=r.opt_num(o.get("baseline_ms"), f"{where}.baseline_ms", 0.0, _MS_MAX),
            pct_of_roofline=r.opt_num(o.get("pct_of_roofline"), f"{where}.pct_of_roofline", 0.0, 1e4),
            max_speedup=r.opt_num(o.get("max_speedup"), f"{where}.max_speedup", 0.0, 1e9),
        )


@dataclass(frozen=True)
class Stage1:
    """Stage 1 (roofline + ncu) classification of the PR's kernel."""

    bottleneck: str
    """compute, memory, latency, mixed or unknown."""
    theory: str
    """What the roofline says."""
    measured: str
    """What ncu says."""
    agree: bool
    """Whether the two agree."""
    note: str
    """One sentence on the classification."""
    compute_pct: float | None
    """Compute throughput, % of peak (ncu)."""
    memory_pct: float | None
    """Memory throughput, % of peak (ncu)."""
    ceilings: Ceilings | None
    """The ceilings used."""
    workloads: tuple[RooflineRow, ...]
    """Per-workload roofline rows."""

    def to_json(self) -> dict[str, Any]:
        return {"bottleneck": self.bottleneck, "theory": self.theory, "measured": self.measured,
                "agree": self.agree, "note": self.note, "compute_pct": self.compute_pct,
                "memory_pct": self.memory_pct, "ceilings": _opt(self.ceilings, Ceilings.to_json),
                "workloads": [w.to_json() for w in self.workloads]}

    @classmethod
    def from_json(cls, v: Any, where: str = "stage1") -> Stage1:
        r, o = _R, _R.obj(v, where)
        c = o.get("ceilings")
        return cls(
            bottleneck=r.name(o.get("bottleneck", "unknown"), f"{where}.bottleneck"),
            theory=r.name(o.get("theory", ""), f"{where}.theory"),
            measured=r.name(o.get("measured", ""), f"{where}.measured"),
            agree=r.bool_(o.get("agree", True), f"{where}.agree"),
            note=r.opt_text(o.get("note"), f"{where}.note"),
            compute_pct=r.opt_num(o.get("compute_pct"), f"{where}.compute_pct", 0.0, 1e4),
            memory_pct=r.opt_num(o.get("memory_pct"), f"{where}.memory_pct", 0.0, 1e4),
            ceilings=None if c is None else Ceilings.from_json(c, f"{where}.ceilings"),
            workloads=tuple(RooflineRow.from_json(x, w)
                            for w, x in r.items(o.get("workloads", []), f"{where}.workloads", 1000)),
        )


@dataclass(frozen=True)
class Finding:
    """One profiling tool's finding (title and severity; the evidence stays in the artifact)."""

    tool: str
    """The tool that found it."""
    severity: str
    """One of :data:`SEVERITIES`."""
    title: str
    """One line."""
    expected_gain: str
    """The tool's estimate of the gain of fixing it."""
    source: str
    """ncu, sass or timeline."""

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "severity": self.severity, "title": self.title,
                "expected_gain": self.expected_gain, "source": self.source}

    @classmethod
    def from_json(cls, v: Any, where: str = "finding") -> Finding:
        r, o = _R, _R.obj(v, where)
        sev = r.name(r.get(o, "severity", where), f"{where}.severity")
        if sev not in SEVERITIES:
            raise r.fail(f"{where}.severity", f"{sev[:40]!r} is not one of {', '.join(SEVERITIES)}")
        return cls(
            tool=r.name(r.get(o, "tool", where), f"{where}.tool"),
            severity=sev,
            title=r.text(r.get(o, "title", where), f"{where}.title", 1000),
            expected_gain=r.opt_text(o.get("expected_gain"), f"{where}.expected_gain", 1000),
            source=r.name(o.get("source", ""), f"{where}.source"),
        )


def _findings(v: Any, where: str) -> tuple[Finding, ...] | None:
    """An analysis object's findings, severity-ordered; None when there is no analysis."""
    if v is None:
        return None
    items = _R.items(_R.obj(v, where).get("findings", []), f"{where}.findings", 1000)
    found = [Finding.from_json(x, w) for w, x in items]
    return tuple(sorted(found, key=lambda f: SEVERITIES.index(f.severity)))


@dataclass(frozen=True)
class BaseBranch:
    """The base branch's version of the kernel, timed against the PR's."""

    status: str
    """Its evaluation status."""
    speedup_vs_head: float | None
    """Base branch's speedup over the PR's kernel (> 1: the PR made it slower); None if unknown."""
    low: float | None = None
    """Lower end of that speedup's range (head p10 / base p90), measured side by side."""
    high: float | None = None
    """Upper end (head p90 / base p10)."""
    verdict: str = ""
    """The runner's reading against its margin: slower, faster, on par, not compared ('' if absent)."""
    head_drift: float | None = None
    """How far apart the PR kernel's two interleaved medians were (a fraction)."""

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "speedup_vs_head": self.speedup_vs_head, "low": self.low,
                "high": self.high, "verdict": self.verdict, "head_drift": self.head_drift}

    @classmethod
    def from_json(cls, v: Any, where: str = "base_branch") -> BaseBranch:
        r, o = _R, _R.obj(v, where)
        sv = r.opt_num(o.get("speedup_vs_head"), f"{where}.speedup_vs_head", 0.0, _SPEEDUP_MAX)
        verdict = o.get("verdict", "")
        if verdict not in VERDICTS:
            raise r.fail(f"{where}.verdict", f"not one of {', '.join(sorted(VERDICTS))}")
        return cls(
            r.name(o.get("status", ""), f"{where}.status"), sv or None,  # 0.0: not measured
            r.opt_num(o.get("low"), f"{where}.low", 0.0, _SPEEDUP_MAX),
            r.opt_num(o.get("high"), f"{where}.high", 0.0, _SPEEDUP_MAX), verdict,
            r.opt_num(o.get("head_drift"), f"{where}.head_drift", 0.0, _SPEEDUP_MAX),
        )


@dataclass(frozen=True)
class Tolerance:
    """Numerical tolerance the gate applied to one output, as report.md states it."""

    dtype: str
    """Output dtype, or the output's name where the configuration sets tolerances per output."""
    atol: float
    """Absolute tolerance."""
    rtol: float
    """Relative tolerance."""

    def to_json(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "atol": self.atol, "rtol": self.rtol}

    @classmethod
    def from_json(cls, v: Any, where: str = "tolerance") -> Tolerance:
        r, o = _R, _R.obj(v, where)
        key = r.name(r.get(o, "dtype", where), f"{where}.dtype")
        if not _TOLERANCE_KEY.fullmatch(key):
            raise r.fail(f"{where}.dtype", f"{key[:40]!r} is not a dtype or output name (letters, digits, _)")
        return cls(key, r.num(r.get(o, "atol", where), f"{where}.atol", 0.0, 1e30),
                   r.num(r.get(o, "rtol", where), f"{where}.rtol", 0.0, 1e30))


@dataclass(frozen=True)
class ProgrammerUse:
    """Who wrote a target's candidates, and for a model its use, as the runner counted it."""

    name: str
    """The programmer (tuner, llm, ...)."""
    model: str
    """The model's name; '' for programmers that are not a model."""
    host: str
    """The provider's host (and port), never the full URL or a credential; ''."""
    requests: int
    """Chat-completions requests sent."""
    tokens_in: int
    """Prompt tokens, as the provider counted them."""
    tokens_out: int
    """Completion tokens, as the provider counted them."""
    retries: int
    """Retries (the SDK's and kernelpro's own)."""
    errors: int
    """Requests that ended in an error."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "model": self.model, "host": self.host, "requests": self.requests,
                "tokens_in": self.tokens_in, "tokens_out": self.tokens_out, "retries": self.retries,
                "errors": self.errors}

    @classmethod
    def from_json(cls, v: Any, where: str = "programmer") -> ProgrammerUse:
        r, o = _R, _R.obj(v, where)

        def count(key: str) -> int:
            return r.int_(o.get(key, 0), f"{where}.{key}", 0, 10**12)

        return cls(
            name=r.name(r.get(o, "name", where), f"{where}.name"),
            model=r.opt_text(o.get("model"), f"{where}.model", 200),
            host=r.opt_text(o.get("host"), f"{where}.host", 200),
            requests=count("requests"), tokens_in=count("tokens_in"), tokens_out=count("tokens_out"),
            retries=count("retries"), errors=count("errors"),
        )


@dataclass(frozen=True)
class TargetResult:
    """One target's ``result.json``: what the publish step reads of an optimize run, validated."""

    name: str
    """Target name from the configuration (``target`` in the JSON)."""
    definition: str
    """FlashInfer-Trace definition name."""
    kernelpro_version: str
    """kernelpro version that produced the results."""
    device: str
    """``cuda`` or ``cpu``."""
    hardware: str
    """GPU (or CPU interpreter) name."""
    libs: tuple[tuple[str, str], ...]
    """Library versions (torch, triton, cuda, driver when recorded), sorted by name."""
    gpu_timings: bool
    """False when the timings come from the CPU interpreter."""
    search: str
    """Search strategy."""
    evaluations: int
    """Candidates evaluated."""
    resumed_from_journal: int
    """Evaluations reused from an earlier run."""
    statuses: tuple[tuple[str, int], ...]
    """Evaluation outcomes and their counts."""
    stop_reason: str
    """Why the search ended."""
    seconds: float
    """Wall time of the run."""
    baseline_status: str
    """Status of the PR's own kernel."""
    base_branch: BaseBranch | None
    """The base branch's kernel, when it exists and differs."""
    winner: Winner | None
    """The verified winner (it passed the final gate), or None when the baseline stands."""
    gates: tuple[Gate, ...]
    """Every final-gate attempt, in rank order."""
    curve: tuple[CurvePoint, ...]
    """Best verified speedup by evaluation."""
    feedback: str
    """Feedback mode (none, raw, tools)."""
    tool_mode: str | None
    """proactive or reactive, when recorded."""
    stage1: Stage1 | None
    """Stage 1 classification (GPU runs only)."""
    findings: tuple[Finding, ...]
    """Findings on the PR's kernel, severity-ordered (they steered the search)."""
    winner_findings: tuple[Finding, ...] | None
    """Findings on the winner; None when it was not profiled."""
    profile_seconds: float
    """Time spent profiling."""
    seconds_by_stage: tuple[tuple[str, float], ...]
    """Where the search time went."""
    tolerances: tuple[Tolerance, ...]
    """Output tolerances the gate applied; empty in result.json written before they travelled there
    (those are not recovered from report.md, whose text a candidate can influence)."""
    confinement: str = ""
    """What confined the candidates (runner/confinement.py), as the runner recorded it; '' if not recorded."""
    programmer: ProgrammerUse | None = None
    """Who wrote the candidates; None where result.json does not say."""
    gamma: float | None = None
    """The speedup the final gate asks of every workload at least (and of a candidate in the search
    before it gates it); None where result.json does not say."""

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.name, "definition": self.definition, "kernelpro_version": self.kernelpro_version,
            "device": self.device, "hardware": self.hardware, "libs": dict(self.libs),
            "gpu_timings": self.gpu_timings, "search": self.search, "evaluations": self.evaluations,
            "resumed_from_journal": self.resumed_from_journal, "statuses": dict(self.statuses),
            "stop_reason": self.stop_reason, "seconds": self.seconds, "baseline": {"status": self.baseline_status},
            "base_branch": _opt(self.base_branch, BaseBranch.to_json), "winner": _opt(self.winner, Winner.to_json),
            "gates": [g.to_json() for g in self.gates], "curve": [c.to_json() for c in self.curve],
            "feedback": self.feedback, "tool_mode": self.tool_mode, "stage1": _opt(self.stage1, Stage1.to_json),
            "baseline_analysis": {"findings": [f.to_json() for f in self.findings]},
            "winner_analysis": _opt(self.winner_findings, lambda fs: {"findings": [f.to_json() for f in fs]}),
            "profile_seconds": self.profile_seconds, "seconds_by_stage": dict(self.seconds_by_stage),
            "tolerances": [t.to_json() for t in self.tolerances], "confinement": self.confinement,
            "programmer": _opt(self.programmer, ProgrammerUse.to_json), "gamma": self.gamma,
        }

    @classmethod
    def from_json(cls, v: Any, where: str = "(top level)") -> TargetResult:
        r, o = _R, _R.obj(v, where)
        name = r.name(r.get(o, "target", where), f"{where}.target")
        if not TARGET_NAME.fullmatch(name):
            raise r.fail(f"{where}.target", f"{name[:60]!r} is not a valid target name")
        w = f"{where}[{name}]"
        libs = r.obj(o.get("libs", {}), f"{w}.libs")
        if len(libs) > 64:
            raise r.fail(f"{w}.libs", "more than 64 libraries")
        baseline = r.obj(o.get("baseline", {}), f"{w}.baseline")
        gates = tuple(Gate.from_json(x, g) for g, x in r.items(o.get("gates", []), f"{w}.gates"))
        winner = None if o.get("winner") is None else Winner.from_json(o["winner"], f"{w}.winner")
        if winner is not None and not any(g.passed and g.solution == winner.solution for g in gates):
            raise r.fail(f"{w}.winner", f"{winner.solution!r} has no passed final-gate row, so it is not a verified winner")
        device = r.name(r.get(o, "device", w), f"{w}.device")
        if device not in ("cuda", "cpu"):
            raise r.fail(f"{w}.device", f"{device[:40]!r} is neither 'cuda' nor 'cpu'")
        tool_mode = o.get("tool_mode")
        bb, prog = o.get("base_branch"), o.get("programmer")
        out = cls(
            name=name,
            definition=r.name(o.get("definition", ""), f"{w}.definition"),
            kernelpro_version=r.name(o.get("kernelpro_version", "unknown"), f"{w}.kernelpro_version"),
            device=device,
            hardware=r.name(o.get("hardware", "unknown"), f"{w}.hardware"),
            libs=tuple(sorted((r.name(k, f"{w}.libs key"), r.name(str(x), f"{w}.libs.{k}")) for k, x in libs.items())),
            gpu_timings=r.bool_(o.get("gpu_timings", device == "cuda"), f"{w}.gpu_timings") and device == "cuda",
            search=r.name(o.get("search", ""), f"{w}.search"),
            evaluations=r.int_(o.get("evaluations", 0), f"{w}.evaluations", 0, 10**7),
            resumed_from_journal=r.int_(o.get("resumed_from_journal", 0), f"{w}.resumed_from_journal", 0, 10**7),
            statuses=r.pairs(o.get("statuses"), f"{w}.statuses", True),
            stop_reason=r.text(r.get(o, "stop_reason", w), f"{w}.stop_reason"),
            seconds=r.num(o.get("seconds", 0.0), f"{w}.seconds", 0.0, 1e8),
            baseline_status=r.name(baseline.get("status", "unknown"), f"{w}.baseline.status"),
            base_branch=None if bb is None else BaseBranch.from_json(bb, f"{w}.base_branch"),
            winner=winner,
            gates=gates,
            curve=tuple(CurvePoint.from_json(x, c) for c, x in r.items(o.get("curve", []), f"{w}.curve")),
            feedback=r.name(o.get("feedback", ""), f"{w}.feedback"),
            tool_mode=None if tool_mode is None else r.name(tool_mode, f"{w}.tool_mode"),
            stage1=_opt(o.get("stage1"), lambda s: Stage1.from_json(s, f"{w}.stage1")),
            findings=_findings(o.get("baseline_analysis"), f"{w}.baseline_analysis") or (),
            winner_findings=_findings(o.get("winner_analysis"), f"{w}.winner_analysis"),
            profile_seconds=r.num(o.get("profile_seconds", 0.0), f"{w}.profile_seconds", 0.0, 1e8),
            seconds_by_stage=r.pairs(o.get("seconds_by_stage"), f"{w}.seconds_by_stage", False),
            # Absent in result.json of older runs and of targets the smoke step stopped: nothing stated.
            tolerances=tuple(Tolerance.from_json(x, t) for t, x in
                             r.items(o.get("tolerances", []), f"{w}.tolerances", MAX_TOLERANCES)),
            confinement=r.opt_text(o.get("confinement"), f"{w}.confinement", 300),
            programmer=None if prog is None or prog == {} else ProgrammerUse.from_json(prog, f"{w}.programmer"),
            gamma=r.opt_num(o.get("gamma"), f"{w}.gamma", 1.0, _SPEEDUP_MAX),
        )
        _consistent(w, out)
        return out


# --------------------------------------------------------------------------- consistency


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL * max(abs(a), abs(b)) + 1e-12


def _ordered(*xs: float | None) -> bool:
    """Whether the given values (None skipped) are ascending, within rounding."""
    vals = [x for x in xs if x is not None]
    return all(a <= b * (1 + 1e-6) + 1e-12 for a, b in zip(vals, vals[1:], strict=False))


def _consistent(w: str, t: TargetResult) -> None:
    """The numbers publish shows must agree with each other the way the runner computes them
    (runner/optimize.py's gate): an artifact that says 3.5x over a 1.1x measurement is refused."""
    fail = _R.fail
    win = t.winner
    if win is not None:
        where = f"{w}.winner"
        if not win.workloads:
            raise fail(f"{where}.workloads", "a verified winner without the gate's per-workload timings")
        uuids = {x.uuid for x in win.workloads}
        if len(uuids) != len(win.workloads):
            raise fail(f"{where}.workloads", "a workload appears twice")
        for i, x in enumerate(win.workloads):
            at = f"{where}.workloads[{i}]"
            if x.baseline_ms <= 0 or x.candidate_ms <= 0:
                raise fail(at, "a time of 0 ms cannot have been measured")
            if not _close(x.speedup, x.baseline_ms / x.candidate_ms):
                raise fail(f"{at}.speedup", f"{x.speedup:.6g} is not baseline_ms / candidate_ms "
                           f"({x.baseline_ms:.6g} / {x.candidate_ms:.6g} = {x.baseline_ms / x.candidate_ms:.6g})")
            for side, lo, mid, hi in (("baseline", x.baseline_p10_ms, x.baseline_ms, x.baseline_p90_ms),
                                      ("candidate", x.candidate_p10_ms, x.candidate_ms, x.candidate_p90_ms),
                                      ("speedup", x.speedup_low, x.speedup, x.speedup_high),
                                      ("energy_ratio", x.energy_ratio_low, x.energy_ratio, x.energy_ratio_high)):
                if mid is not None and not _ordered(lo, mid, hi):
                    raise fail(at, f"the {side} range {lo}..{hi} does not contain its median {mid}")
            if x.energy_ratio is not None and x.baseline_energy_j and x.candidate_energy_j and not (
                    1 / _ENERGY_BAND <= x.energy_ratio / (x.candidate_energy_j / x.baseline_energy_j) <= _ENERGY_BAND):
                # A median of paired ratios, not the ratio of the medians: close to it, never far.
                raise fail(f"{at}.energy_ratio", f"{x.energy_ratio:.4g} is far from the measured energies' ratio "
                           f"({x.candidate_energy_j:.4g} J / {x.baseline_energy_j:.4g} J)")
            if x.speedup < win.gamma * (1 - _REL):
                raise fail(f"{at}.speedup", f"{x.speedup:.4g} is below the gate's gamma {win.gamma:g}, "
                           "so this winner did not pass the gate on this workload")
        geo = math.exp(sum(math.log(x.speedup) for x in win.workloads) / len(win.workloads))
        if not _close(win.speedup, geo):
            raise fail(f"{where}.speedup", f"{win.speedup:.6g} is not the geometric mean of the "
                       f"per-workload speedups ({geo:.6g})")
        for g in t.gates:
            if g.passed and g.solution == win.solution and not _close(g.speedup, win.speedup):
                raise fail(f"{w}.gates", f"the gate measured {g.speedup:.6g} for {g.solution!r}, "
                           f"the winner says {win.speedup:.6g}")
        if win.guards is not None and (not win.guards.passed or any(s.verdict == "slower" for s in win.guards.shapes)):
            raise fail(f"{where}.guards", "the guard shapes refused this candidate, so it is not a verified winner")
        for c in win.correctness:
            if c.uuid not in uuids:
                raise fail(f"{where}.correctness", f"workload {c.uuid!r} is not one of the gate's workloads")
        floors = {x.uuid: x.floor_ms for x in (t.stage1.workloads if t.stage1 else ()) if x.floor_ms}
        for x in win.workloads:
            floor = floors.get(x.uuid)
            if floor is not None and x.candidate_ms < 0.9 * floor:
                raise fail(f"{where}.workloads", f"{x.candidate_ms:.6g} ms on {x.uuid!r} is faster than the "
                           f"roofline floor {floor:.6g} ms allows, which the gate refuses")
    for i, row in enumerate(t.stage1.workloads if t.stage1 else ()):
        at = f"{w}.stage1.workloads[{i}]"
        if not row.floor_ms or not row.baseline_ms:
            continue
        if row.pct_of_roofline is not None and not _close(row.pct_of_roofline, 100 * row.floor_ms / row.baseline_ms):
            raise fail(f"{at}.pct_of_roofline", f"{row.pct_of_roofline:.6g} is not 100 x floor_ms / baseline_ms "
                       f"({100 * row.floor_ms / row.baseline_ms:.6g})")
        if row.max_speedup is not None and not _close(row.max_speedup, row.baseline_ms / row.floor_ms):
            raise fail(f"{at}.max_speedup", f"{row.max_speedup:.6g} is not baseline_ms / floor_ms "
                       f"({row.baseline_ms / row.floor_ms:.6g})")
    bb = t.base_branch
    if bb is not None and bb.speedup_vs_head is not None and not _ordered(bb.low, bb.speedup_vs_head, bb.high):
        raise fail(f"{w}.base_branch", f"the range {bb.low}..{bb.high} does not contain {bb.speedup_vs_head}")
    for a, b in zip(t.curve, t.curve[1:], strict=False):
        if b.evaluation <= a.evaluation or b.best_speedup < a.best_speedup * (1 - _REL):
            raise fail(f"{w}.curve", "the best speedup so far must never fall, by evaluation in order")
