"""Evaluate one Solution against a Definition on workloads: the parent side of the harness.

Failure is a value: every path through ``evaluate`` returns an Outcome, whatever the candidate did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .sandbox import run_child
from .target import Tolerance
from .trace import (
    Correctness,
    Definition,
    Environment,
    Evaluation,
    Performance,
    Solution,
    Trace,
    Workload,
)


@dataclass(frozen=True)
class Timing:
    """Per-call latency of one solution on one workload, with its spread."""

    median_ms: float
    """Median over the timed calls."""
    p10_ms: float
    """10th percentile."""
    p90_ms: float
    """90th percentile."""
    std_ms: float
    """Standard deviation."""
    n: int
    """Timed calls."""

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Timing:
        return Timing(float(d["median_ms"]), float(d["p10_ms"]), float(d["p90_ms"]), float(d["std_ms"]), int(d["n"]))


@dataclass(frozen=True)
class WorkloadResult:
    """One solution on one workload."""

    uuid: str
    """The workload."""
    status: str
    """FlashInfer-Trace status."""
    log: str = ""
    """Error text, if any."""
    correctness: Mapping[str, Any] | None = None
    """max_abs, max_rel, rel_l2, trials, seeds (or the failing trial's numbers)."""
    timing: Timing | None = None
    """Solution timing when PASSED."""
    reference_timing: Timing | None = None
    """Timing of the Definition's reference, when measured."""


@dataclass(frozen=True)
class Outcome:
    """A candidate's evaluation over all its workloads (the design's 'Evaluation' record)."""

    solution_hash: str
    """Content hash of the solution (the cache key)."""
    status: str
    """PASSED only if every workload passed; otherwise the first failure's status."""
    results: tuple[WorkloadResult, ...]
    """Per workload, in order; stops at the first failure."""
    environment: Mapping[str, Any] = field(default_factory=dict)
    """hardware and library versions, from the child."""
    log: str = ""
    """The first failure's log, or the harness's own output when it crashed."""
    build_seconds: float = 0.0
    """Import/compile time."""
    wall_seconds: float = 0.0
    """Whole child-process time."""
    phases: Mapping[str, float] = field(default_factory=dict)
    """Seconds by stage inside the child: startup (imports, CUDA init), verify, time."""
    timeline: Mapping[str, Any] | None = None
    """Launch timeline summary (runner.profile.Timeline fields) when it was asked for, or {'error': ...}."""
    timestamp: str = ""
    """When it finished (ISO 8601, UTC)."""

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"

    def latency(self, uuid: str) -> float:
        for r in self.results:
            if r.uuid == uuid and r.timing is not None:
                return r.timing.median_ms
        return math.inf

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Outcome:
        results = tuple(
            WorkloadResult(
                uuid=r["uuid"], status=r["status"], log=r.get("log", ""), correctness=r.get("correctness"),
                timing=Timing.from_json(r["timing"]) if r.get("timing") else None,
                reference_timing=Timing.from_json(r["reference_timing"]) if r.get("reference_timing") else None,
            )
            for r in d["results"]
        )  # fmt: skip
        return Outcome(
            solution_hash=d["solution_hash"], status=d["status"], results=results,
            environment=d.get("environment", {}), log=d.get("log", ""),
            build_seconds=d.get("build_seconds", 0.0), wall_seconds=d.get("wall_seconds", 0.0),
            phases=d.get("phases", {}), timeline=d.get("timeline"), timestamp=d.get("timestamp", ""),
        )  # fmt: skip


@dataclass(frozen=True)
class EvalSettings:
    """How hard the evaluator looks."""

    device: str = "cpu"
    """'cuda' or 'cpu' (Triton interpreter)."""
    trials: int = 3
    """Fresh seeded input sets checked per workload."""
    seed: int = 0
    """Base seed; each trial and workload derives its own."""
    timeout_s: float = 120.0
    """Wall-clock limit for the whole child process."""
    warmup: int = 3
    """Untimed calls before timing (JIT compile, autotune)."""
    reps: int = 20
    """Minimum timed calls on the GPU."""
    reps_max: int = 500
    """Maximum timed calls on the GPU."""
    target_ms: float = 100.0
    """Aim for this much timed GPU work per workload."""
    reps_cpu: int = 3
    """Timed calls on the CPU, where timings only show that the code runs."""
    rotate: int = 3
    """Input buffer sets the timed calls rotate through."""
    time_reference: bool = False
    """Also time the Definition's reference (for FlashInfer-Trace's reference_latency_ms)."""
    cache_dir: Path | None = None
    """Triton cache shared by candidates."""
    timeline: bool = False
    """After timing, record the launch timeline of the largest workload (GPU only)."""


def _request(definition: Definition, solution: Solution, workloads: Sequence[Workload],
             tolerance: Tolerance, s: EvalSettings) -> dict[str, Any]:  # fmt: skip
    dtypes = {spec.dtype for spec in definition.outputs.values()}
    return {
        "definition": definition.to_json(),
        "solution": solution.to_json(),
        "workloads": [w.to_json() for w in workloads],
        "device": s.device,
        "trials": s.trials,
        "seed": s.seed,
        "tolerance": {
            "atol": {d: tolerance.for_dtype(d)[0] for d in dtypes},
            "rtol": {d: tolerance.for_dtype(d)[1] for d in dtypes},
        },
        "timing": {"warmup": s.warmup, "reps": s.reps, "reps_max": s.reps_max, "target_ms": s.target_ms,
                   "reps_cpu": s.reps_cpu, "rotate": s.rotate},  # fmt: skip
        "time_reference": s.time_reference,
        "timeline": s.timeline,
    }


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def evaluate(definition: Definition, solution: Solution, workloads: Sequence[Workload],
             tolerance: Tolerance, settings: EvalSettings) -> Outcome:  # fmt: skip
    h = solution.content_hash()
    if solution.definition != definition.name:
        return Outcome(h, "COMPILE_ERROR", (), log=f"solution implements {solution.definition!r}, not {definition.name!r}",
                       timestamp=_now())  # fmt: skip
    child = run_child(_request(definition, solution, workloads, tolerance, settings),
                      timeout_s=settings.timeout_s, device=settings.device, cache_dir=settings.cache_dir)  # fmt: skip
    if child.status != "OK" or child.result is None:
        status = "TIMEOUT" if child.status == "TIMEOUT" else "RUNTIME_ERROR"
        return Outcome(h, status, (), log=child.log, wall_seconds=child.seconds, timestamp=_now())
    res = child.result
    build = res["build"]
    if build["status"] != "OK":
        return Outcome(h, build["status"], (), environment=res["environment"], log=build["log"],
                       build_seconds=build["seconds"], wall_seconds=child.seconds, timestamp=_now())  # fmt: skip
    results = tuple(
        WorkloadResult(
            uuid=r["uuid"], status=r["status"], log=r.get("log", ""), correctness=r.get("correctness"),
            timing=Timing.from_json(r["timing"]) if "timing" in r else None,
            reference_timing=Timing.from_json(r["reference_timing"]) if "reference_timing" in r else None,
        )
        for r in res["workloads"]
    )  # fmt: skip
    failed = next((r for r in results if r.status != "PASSED"), None)
    return Outcome(
        solution_hash=h,
        status=failed.status if failed else "PASSED",
        results=results,
        environment=res["environment"],
        log=failed.log if failed else "",
        build_seconds=build["seconds"],
        wall_seconds=child.seconds,
        phases=res.get("phases", {}),
        timeline=res.get("timeline"),
        timestamp=_now(),
    )


def traces(definition: Definition, solution: Solution, workloads: Sequence[Workload], outcome: Outcome) -> list[Trace]:
    """One FlashInfer-Trace line per workload; workloads never reached carry the failure too."""
    env = Environment(
        hardware=str(outcome.environment.get("hardware", "unknown")),
        libs={k: str(v) for k, v in outcome.environment.get("libs", {}).items()},
    )
    by_uuid = {r.uuid: r for r in outcome.results}
    first_bad = next((r for r in outcome.results if r.status != "PASSED"), None)
    out = []
    for w in workloads:
        r = by_uuid.get(w.uuid)
        status = r.status if r else (outcome.status if outcome.status != "PASSED" else "RUNTIME_ERROR")
        if r is not None:
            log = r.log
        elif first_bad is not None:
            log = f"not run: workload {first_bad.uuid} failed first ({first_bad.status})"
        else:
            log = outcome.log or "not run"
        correctness = performance = None
        if status in ("PASSED", "INCORRECT_NUMERICAL") and r is not None:
            c = r.correctness or {}
            correctness = Correctness(
                max_relative_error=float(c.get("max_rel", 0.0)),
                max_absolute_error=float(c.get("max_abs", 0.0)),
                extra={k: v for k, v in c.items() if k not in ("max_rel", "max_abs")},
            )
        if status == "PASSED" and r is not None and r.timing is not None:
            ref_ms = r.reference_timing.median_ms if r.reference_timing else 0.0
            performance = Performance(
                latency_ms=r.timing.median_ms,
                reference_latency_ms=ref_ms,
                speedup_factor=ref_ms / r.timing.median_ms if ref_ms and r.timing.median_ms > 0 else 0.0,
            )
        if status == "INCORRECT_NUMERICAL" and correctness is None:
            correctness = Correctness(math.nan, math.nan)
        out.append(Trace(definition.name, w, solution.name,
                         Evaluation(status, env, outcome.timestamp or _now(), log, correctness, performance)))  # fmt: skip
    return out
