"""report.md and result.json from a Result. Every number comes from our own measurement."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import jinja2

from kernelpro import __version__
from kernelpro.templates import environment

if TYPE_CHECKING:
    from .optimize import Result, RunSettings


def _env() -> jinja2.Environment:
    return environment({"ms": lambda x: f"{x:.4f}" if x < 1 else f"{x:.3f}", "x": lambda x: f"{x:.2f}x"})


def lineage(result: Result, key: str) -> list[str]:
    """The strategy notes from the baseline down to a candidate, oldest first."""
    by_key = {s.candidate.key: s.candidate for s in result.evaluated}
    notes: list[str] = []
    cand = by_key.get(key)
    while cand is not None and cand.parent is not None:
        notes.append(cand.note)
        cand = by_key.get(cand.parent)
    return notes[::-1]


def summary(result: Result, settings: RunSettings) -> dict[str, Any]:
    """Machine-readable facts for the bot and for tests (result.json)."""
    statuses = Counter(s.outcome.status for s in result.evaluated)
    best_so_far, curve = 1.0, []
    for i, s in enumerate(result.evaluated, 1):
        if s.outcome.passed:
            best_so_far = max(best_so_far, s.speedup)
        curve.append({"evaluation": i, "best_speedup": round(best_so_far, 4), "status": s.outcome.status})
    w = result.winner
    return {
        "kernelpro_version": __version__,
        "target": result.target.name,
        "definition": result.target.definition.name,
        "device": result.device,
        "hardware": result.baseline.outcome.environment.get("hardware", "unknown"),
        "libs": dict(result.baseline.outcome.environment.get("libs", {})),
        "gpu_timings": result.device == "cuda",
        "search": settings.search,
        "evaluations": len(result.evaluated),
        "resumed_from_journal": result.journal_resumed,
        "statuses": dict(statuses),
        "stop_reason": result.stop_reason,
        "seconds": round(result.seconds, 2),
        "baseline": {"status": result.baseline.outcome.status, "log": result.baseline.outcome.log[:2000],
                     "solution": result.baseline.candidate.solution.name},  # fmt: skip
        "base_branch": None if result.base_branch is None else {
            "status": result.base_branch.outcome.status,
            "speedup_vs_head": result.base_branch.speedup,
        },
        "winner": None if w is None else {
            "solution": w.candidate.solution.name,
            "hash": w.candidate.key,
            "note": w.candidate.note,
            "lineage": lineage(result, w.candidate.key),
            "params": dict(w.candidate.params),
            "speedup": w.speedup,
            "gamma": settings.gamma,
            "workloads": list(w.per_workload),
            "correctness": list(w.correctness),
        },
        "gates": [{"solution": g.candidate.solution.name, "passed": g.passed, "speedup": g.speedup,
                   "reason": g.reason} for g in result.gates],  # fmt: skip
        "curve": curve,
        # Where the time went, summed over search evaluations (the gate's are not included).
        "seconds_by_stage": {
            "child_wall": round(sum(s.outcome.wall_seconds for s in result.evaluated), 2),
            **{k: round(sum(s.outcome.phases.get(k, 0.0) for s in result.evaluated), 2)
               for k in ("startup", "verify", "time")},
            "build": round(sum(s.outcome.build_seconds for s in result.evaluated), 2),
        },
    }


def render_report(result: Result, settings: RunSettings, patch: str = "") -> str:
    data = summary(result, settings)
    best_search = max((s for s in result.evaluated[1:] if s.outcome.passed), key=lambda s: s.speedup, default=None)
    failures = [s for s in result.evaluated if not s.outcome.passed]
    return _env().get_template("report.md.j2").render(
        r=data,
        result=result,
        settings=settings,
        best_search=best_search,
        failures=failures[:10],
        axes={w.uuid: ", ".join(f"{k}={v}" for k, v in w.axes.items())
              for w in result.target.workloads_for(result.device)},  # fmt: skip
        patch=patch,
        tolerance={d: result.target.tolerance.for_dtype(d) for d in
                   sorted({o.dtype for o in result.target.definition.outputs.values()})},  # fmt: skip
    )
