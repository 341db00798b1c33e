"""report.md and result.json from a Result. Every number comes from our own measurement."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import jinja2

from kernelpro import __version__
from kernelpro.markdown import code_block, md
from kernelpro.schema import CurvePoint, Gate, Tolerance
from kernelpro.templates import environment

from .energy import PLACEMENT
from .evaluator import PHASES, seconds
from .roofline import ReferenceAnalysis
from .screen import REJECTED
from .tools import Analysis, bound_finding, render

if TYPE_CHECKING:
    from .result import Result, RunSettings

NOTHING_PROPOSED = "the programmer had nothing new to propose"
"""optimize's stop reason when the programmer returned no candidate at all."""
LOG_TAIL_LINES = 40
"""Lines of a failing baseline's log shown in report.md."""


def pct(x: float | None) -> str:
    """A percentage with enough digits to be non-zero: 0.42, 3.1, 74 (no '0 %' for 0.42 %)."""
    if x is None:
        return "n/a"
    a = abs(x)
    return "0" if a == 0 else f"{x:.0f}" if a >= 10 else f"{x:.1f}" if a >= 1 else f"{x:.2g}"


def log_tail(log: str, lines: int = LOG_TAIL_LINES) -> str:
    """The end of a log, where a traceback names the error."""
    return "\n".join(log.rstrip().splitlines()[-lines:])


def stages(by_stage: Mapping[str, float]) -> str:
    """The report's "time by stage" in words that add up: the candidates' processes with their own
    stages, then the judging of their outputs (beside them and after), then the builds. It printed
    "child_wall 53.29 s, ..., judge_tail 17.74 s, judge 0.0 s, judge_during 39.87 s" (the H200 demo,
    session 21), which reads as if judging came on top of a wall it partly overlaps."""
    d = dict(by_stage)
    child = d.pop("child_wall", None)
    beside, after = d.pop("judge_during", 0.0), d.pop("judge_tail", 0.0) + d.pop("judge", 0.0)
    build = d.pop("build", None)
    reference, ahead = d.pop("reference", 0.0), d.pop("reference_ahead", 0.0)
    own = ", ".join(f"{k} {v:g} s" for k, v in d.items())
    parts = [f"the candidates' processes {child:g} s ({own})" if child is not None else own]
    if beside or after:
        parts.append(f"judging their outputs {beside + after:.2f} s ({beside:g} s while they ran, {after:.2f} s after)")
    if reference and not ahead:
        parts.append(f"the reference's outputs for the secret checks, before the candidates started {reference:g} s")
    elif ahead:
        parts.append(f"the reference's outputs for the secret checks {reference + ahead:.2f} s ({reference:g} s before "
                     f"the candidates started, {ahead:g} s beside the judging)")
    if build is not None:
        parts.append(f"builds {build:g} s")
    return "; ".join(p for p in parts if p)


def _env() -> jinja2.Environment:
    # What a candidate, a model or the PR's code wrote (notes, logs, reasons, the patch) is made inert:
    # report.md is also the optimize job's summary, which GitHub renders (issue 20).
    return environment({"ms": lambda x: f"{x:.4f}" if x < 1 else f"{x:.3f}", "x": lambda x: f"{x:.2f}x",
                        "pct": pct, "md": lambda v: md(v, 2000), "block": code_block, "stages": stages})


def outcome(r: dict[str, Any]) -> str:
    """The report's first sentence when the baseline stands: what happened, not what did not.

    A failing baseline, a programmer that proposed nothing (the tuner finding zero parameters), no
    candidate faster in the search (no gate ran) and candidates the gate refused are four different
    stories for the maintainer."""
    if r["baseline"]["status"] != "PASSED":
        return f"{r['stop_reason']}."
    if r["gates"]:
        refused = "; ".join(f"`{g['solution']}`: {g['reason']}" for g in r["gates"])
        return f"The final gate refused {len(r['gates'])} candidate(s) that were faster in the search: {refused}."
    if r["evaluations"] <= 1 and r["stop_reason"].startswith(NOTHING_PROPOSED):
        p = r["programmer"]
        who = p.get("name", "tuner")
        # optimize appends the tuner's own account of what hid the parameters: "... propose (why)".
        why = r["stop_reason"][len(NOTHING_PROPOSED):].strip().removeprefix("(").removesuffix(")")
        if who == "tuner":
            return ("The tuner found no tunable parameter in this kernel, so nothing was tried and no final gate ran"
                    + (f": {why}" if why else " (no launch keyword, constexpr block size or num_warps/num_stages "
                       "reachable from the entry point, nor a CUDA launch constant)")
                    + ". Run with `--programmer llm` to let a model rewrite the kernel, or expose the launch "
                      "parameters (BLOCK sizes as tl.constexpr arguments, num_warps at the launch).")
        return f"The programmer ({who}) proposed no candidate, so nothing was tried and no final gate ran" + (f": {why}." if why else ".")
    best = max((c["best_speedup"] for c in r["curve"]), default=1.0)
    if best > 1.0:
        return (f"No candidate reached the final gate's {r['gamma']:.2f}x in the search (the best: {best:.3f}x), "
                f"so no final gate ran ({r['stop_reason']}).")
    return f"No candidate was faster than it in the search, so no final gate ran ({r['stop_reason']})."


def lineage(result: Result, key: str) -> list[str]:
    """The strategy notes from the baseline down to a candidate, oldest first, without their final
    period (the report and the PR body join them); an ancestor that failed says so, as a step that was
    refused and repaired (a repaired candidate did not do what its broken parent's note says, a
    rejected one never ran). The report read "Call PyTorch's fused SiLU ... (REJECTED_STATIC,
    repaired); then Keep the Triton kernel ...": at a glance, a winner that calls PyTorch's SiLU."""
    by_key = {s.candidate.key: s.candidate for s in result.evaluated}
    status = {s.candidate.key: s.outcome.status for s in result.evaluated}
    notes: list[str] = []
    cand = by_key.get(key)
    while cand is not None and cand.parent is not None:
        failed = cand.key != key and status.get(cand.key, "PASSED") != "PASSED"
        note = cand.note.strip().rstrip(".")
        notes.append(f"tried “{note}”, refused ({status[cand.key]}) and repaired in the next step" if failed else note)
        cand = by_key.get(cand.parent)
    return notes[::-1]


def summary(result: Result, settings: RunSettings) -> dict[str, Any]:
    """Machine-readable facts for the bot and for tests (result.json)."""
    statuses = Counter(s.outcome.status for s in result.evaluated)
    best_so_far, curve = 1.0, []
    for i, s in enumerate(result.evaluated, 1):
        if s.outcome.passed:
            best_so_far = max(best_so_far, s.speedup)
        curve.append(CurvePoint(i, round(best_so_far, 4), s.outcome.status).to_json())
    w = result.winner
    return {
        "kernelpro_version": __version__,
        "target": result.target.name,
        "definition": result.target.definition.name,
        "device": result.device,
        "hardware": result.baseline.outcome.environment.get("hardware", "unknown"),
        "confinement": str(result.baseline.outcome.environment.get("sandbox", {}).get("confinement", "not recorded")),
        "libs": dict(result.baseline.outcome.environment.get("libs", {})),
        "gpu_timings": result.device == "cuda",
        "search": settings.search,
        "evaluations": len(result.evaluated),
        "resumed_from_journal": result.journal_resumed,
        "duplicates": result.duplicates,
        "journal_torn_lines": result.journal_torn,
        "statuses": dict(statuses),
        "stop_reason": result.stop_reason,
        "seconds": round(result.seconds, 2),
        # The speedup the final gate asks of every workload at least (and the search of a candidate it gates).
        "gamma": settings.gamma,
        "baseline": {"status": result.baseline.outcome.status, "log": result.baseline.outcome.log[:2000],
                     "log_tail": log_tail(result.baseline.outcome.log),
                     "warnings": list(result.baseline.outcome.warnings),
                     "solution": result.baseline.candidate.solution.name},
        # Only the side-by-side measurement is reported: one evaluation each, minutes apart, drifted
        # by more than the margin on the H200 (runner/basebranch.py).
        "base_branch": None if result.base_branch is None else result.versus_base.to_json()
        if result.versus_base is not None else {"status": result.base_branch.outcome.status,
                                                "speedup_vs_head": None, "verdict": "not compared"},
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
            "memcheck": w.memcheck,
            "guards": w.guards,
        },
        "gates": [{**Gate(g.candidate.solution.name, g.passed, g.speedup, g.reason).to_json(),
                   "memcheck": g.memcheck, "guards": g.guards} for g in result.gates],
        # What the gate compared outputs with; the bot reads it here, never from report.md's text.
        "tolerances": [t.to_json() for t in tolerances(result)],
        "curve": curve,
        "feedback": settings.feedback,
        "tool_mode": settings.tool_mode,
        "memory_on": settings.memory,
        "candidates_per_expansion": settings.per_step,
        # The ablation switches as they would be typed, so a reader can rerun the same configuration.
        "flags": [f"--programmer {result.programmer.get('name', 'tuner')}", f"--search {settings.search}",
                  f"--feedback {settings.feedback}", f"--tools {settings.tool_mode}",
                  f"--memory {'on' if settings.memory else 'off'}", f"--candidates {settings.per_step}",
                  *(["--cuda-graphs"] if settings.evaluation.cuda_graphs else [])],
        # The exact command line of this run when the CLI made it (else the switches above).
        "command": settings.command,
        "programmer": dict(result.programmer),
        "rejected": [{"solution": s.candidate.solution.name, "note": s.candidate.note, "reason": s.outcome.log}
                     for s in result.evaluated if s.outcome.status == REJECTED],
        "memory": list(result.memory),
        "stage1": _stage1(result),
        "baseline_analysis": _analysis(result, result.baseline.candidate.key, 1.0),
        "winner_analysis": _analysis(result, w.candidate.key if w else None, w.speedup if w else 1.0),
        "profile_seconds": round(result.profile_seconds, 2),
        "energy_mode": settings.energy,
        "energy": None if result.energy is None else result.energy.to_json(),
        "energy_table": _energy_table(result),
        "energy_placement_pct": 100 * PLACEMENT,
        # Where the time went, summed over search evaluations (the gate's are not included).
        "seconds_by_stage": {
            "child_wall": round(sum(s.outcome.wall_seconds for s in result.evaluated), 2),
            # Each value through evaluator.seconds: a journal written before the parent cleaned the
            # child's phases may hold anything (a string, NaN, a dict), and the report must not crash on it.
            **{k: round(sum(seconds(_phase(s.outcome.phases, k)) for s in result.evaluated), 2)
               for k in PHASES if k not in ("calibrate", "timeline")},
            "build": round(sum(seconds(s.outcome.build_seconds) for s in result.evaluated), 2),
        },
    }


def _phase(phases: Any, key: str) -> Any:
    return phases.get(key) if isinstance(phases, Mapping) else None


def _energy_table(result: Result) -> list[dict[str, Any]]:
    """One row per workload and arm: dynamic and total mJ per call with intervals, ratio, J/GB, conditions."""
    e = result.energy
    if e is None:
        return []
    rows = []
    for w in e.workloads:
        m = w.measurement
        if m is None:
            continue
        arm_windows = [x for x in m.windows if x.kind == "arm"]
        clocks = sorted({x.sm_clock_mhz for x in arm_windows if x.sm_clock_mhz})
        temps = [x.temperature_c for x in arm_windows if x.temperature_c is not None]
        for arm, a in m.arms.items():
            r = m.ratios.get(arm)
            rows.append({"uuid": w.uuid, "arm": arm, "solution": e.arms.get(arm, arm), "winner": arm == e.winner_arm,
                         "dynamic_mj": a.dynamic_mj.median, "dynamic_low": a.dynamic_mj.low,
                         "dynamic_high": a.dynamic_mj.high, "total_mj": a.total_mj.median, "total_low": a.total_mj.low,
                         "total_high": a.total_mj.high, "ms_per_call": a.ms_per_call, "windows": a.windows,
                         "ratio": r.median if r else None, "ratio_low": r.low if r else None,
                         "ratio_high": r.high if r else None, **w.per_work(arm), "idle_w": m.idle_w,
                         "sm_clock_mhz": f"{clocks[0]:.0f}-{clocks[-1]:.0f}" if clocks else "n/a",
                         "temperature_c": f"{min(temps):.0f}-{max(temps):.0f}" if temps else "n/a",
                         "counter_update_ms": m.counter_update_ms, "notes": list(m.notes)})
    return rows


def _stage1(result: Result) -> dict[str, Any] | None:
    return stage1_json(result.stage1)


def stage1_json(a: ReferenceAnalysis | None) -> dict[str, Any] | None:
    """Stage 1 for result.json and the report: the ideal bound (formulas), the current one (ncu)."""
    if a is None:
        return None
    c = a.current
    return {
        "bottleneck": a.bottleneck, "theory": a.theory, "measured": a.measured, "agree": a.agree, "note": a.note,
        "compute_pct": a.compute_pct, "memory_pct": a.memory_pct,
        "max_speedup": a.max_speedup, "bound_note": a.bound_note(),
        "current": None if c is None else {
            "bound": c.bound, "note": c.note, "compute_pct": c.compute_pct, "memory_pct": c.memory_pct,
            "issue_pct": c.issue_pct, "pipe": c.pipe, "pipe_pct": c.pipe_pct,
            "achieved_occupancy_pct": c.achieved_occupancy_pct, "theoretical_occupancy_pct": c.theoretical_occupancy_pct,
            "grid": c.grid, "block": c.block, "sms": c.sms, "sms_source": c.sms_source, "waves": c.waves},
        "ceilings": None if a.ceilings is None else a.ceilings.to_json(),
        "workloads": [{"uuid": b.uuid, "axes": dict(b.axes), "flops": b.flops, "bytes": b.bytes, "intensity": b.intensity,
                       "floor_ms": b.floor_ms, "baseline_ms": b.measured_ms, "pct_of_roofline": b.pct_of_roofline,
                       "max_speedup": b.max_speedup} for b in a.workloads],
    }


def _analysis(result: Result, key: str | None, speedup: float) -> dict[str, Any] | None:
    """Findings of one candidate, their promises capped by Stage 1: a candidate already ``speedup`` times
    faster than the baseline has that much less left before the roofline floor."""
    if key is None or key not in result.analyses:
        return None
    prof, analysis = result.analyses[key]
    cap = result.stage1.max_speedup if result.stage1 is not None else None
    if cap is not None and speedup > 0:
        cap = max(cap / speedup, 1.0)
        note = f"{result.stage1.bound_note()}" + (f", divided by this candidate's {speedup:.2f}x" if speedup != 1.0 else "")  # type: ignore[union-attr]
        analysis = Analysis(analysis.bottleneck, tuple(bound_finding(f, cap, note) for f in analysis.findings),
                            analysis.ran, analysis.skipped)
    return {"findings": [f.to_json() for f in analysis.findings], "ran": list(analysis.ran), "notes": list(prof.notes),
            "text": render(analysis, prof, "tools")}


def render_report(result: Result, settings: RunSettings, patch: str = "") -> str:
    data = summary(result, settings)
    best_search = max((s for s in result.evaluated[1:] if s.outcome.passed), key=lambda s: s.speedup, default=None)
    failures = [s for s in result.evaluated if not s.outcome.passed]
    return _env().get_template("report.md.j2").render(
        r=data,
        outcome=outcome(data),
        result=result,
        settings=settings,
        best_search=best_search,
        failures=failures[:10],
        axes={w.uuid: ", ".join(f"{k}={v}" for k, v in w.axes.items())
              for w in result.target.workloads_for(result.device)},
        patch=patch,
        tolerance={t.dtype: (t.atol, t.rtol) for t in tolerances(result)},
    )


def tolerances(result: Result) -> tuple[Tolerance, ...]:
    """The tolerances the gate applied, for result.json and report.md alike: by output dtype, or by
    output name when the configuration sets some per output."""
    tol, outputs = result.target.tolerance, result.target.definition.outputs
    if tol.outputs:
        return tuple(Tolerance(n, *tol.for_output(n, o.dtype)) for n, o in outputs.items())
    return tuple(Tolerance(d, *tol.for_dtype(d)) for d in sorted({o.dtype for o in outputs.values()}))
