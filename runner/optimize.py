"""The loop for one target: baseline -> search -> final gate -> results directory.

Inputs are plain data (a Target and a checkout of the PR head); outputs are files in DIR:
journal.jsonl (as it happens), trace.jsonl, solution.json, patch.diff, result.json, report.md.
"""

from __future__ import annotations

import difflib
import json
import math
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .candidate import Candidate
from .evaluator import EVALUATOR_VERSION, EvalSettings, Outcome, evaluate, traces
from .journal import Journal, context_key
from .memory import SearchMemory
from .profile import Profile, Timeline
from .profiler import ProfileSettings, profile_candidate
from .programmers import Context, PluginError, Programmer
from .roofline import ReferenceAnalysis, analyze_reference, default_ceilings
from .search import Scored, get_strategy
from .target import Target
from .tools import Analysis, ProfilingTool, registry, render, run_tools
from .trace import Solution, Workload, append_jsonl, dump_json


@dataclass(frozen=True)
class RunSettings:
    """How one optimize run behaves."""

    search: str = "mcts"
    """Search strategy name (runner/search)."""
    budget: int | None = None
    """Evaluations, baseline included; None takes the target's budget."""
    per_step: int = 4
    """Candidates the programmer writes per expansion."""
    gamma: float = 1.03
    """A winner must be at least this much faster than the baseline in the final gate."""
    gate_trials: int = 5
    """Fresh seeded input sets per workload in the final gate."""
    gate_top: int = 3
    """How many of the best candidates the gate tries, in rank order."""
    evaluation: EvalSettings = field(default_factory=EvalSettings)
    """Evaluator settings for search evaluations."""
    feedback: str = "tools"
    """What profiling reaches the programmer: none | raw (metrics only) | tools (findings + metrics)."""
    memory: bool = True
    """Keep a search memory and show it to the programmer (off: the ablation)."""
    tool_mode: str = "proactive"
    """With feedback 'tools': proactive (every relevant tool runs, findings in the prompt) | reactive (the
    tools are offered to the model as function calls)."""
    profiling: ProfileSettings = field(default_factory=ProfileSettings)
    """What is collected when a candidate is profiled (GPU only)."""
    extra_tools: tuple[ProfilingTool, ...] = ()
    """The repository's own tools (from its base branch)."""


@dataclass(frozen=True)
class GateResult:
    """The final gate's verdict on one candidate against the baseline, measured side by side."""

    candidate: Candidate
    """The candidate."""
    passed: bool
    """Correct on more seeds and faster than gamma on every workload."""
    speedup: float
    """Geometric mean over workloads of baseline median / candidate median."""
    per_workload: tuple[dict[str, Any], ...]
    """uuid, axes, baseline and candidate timings, speedup and its range."""
    reason: str
    """Why it failed, or 'passed'."""
    correctness: tuple[dict[str, Any], ...] = ()
    """Per workload: max errors, trials, seeds."""


@dataclass(frozen=True)
class Result:
    """What one optimize run found."""

    target: Target
    """The kernel."""
    device: str
    """'cuda' or 'cpu'."""
    baseline: Scored
    """The PR head's kernel."""
    evaluated: tuple[Scored, ...]
    """Every evaluation, baseline first, in order."""
    winner: GateResult | None
    """The verified faster kernel; None when the baseline stands."""
    gates: tuple[GateResult, ...]
    """Every gate attempt, in rank order."""
    base_branch: Scored | None
    """The base branch's version of the kernel, when it exists and differs."""
    stop_reason: str
    """Why the search ended."""
    seconds: float
    """Wall time of the run."""
    journal_resumed: int
    """Evaluations read back from an earlier run's journal."""
    journal_torn: int = 0
    """Journal lines cut short by a killed run (skipped when reading back)."""
    stage1: ReferenceAnalysis | None = None
    """Roofline classification of the pull request's kernel (GPU runs)."""
    analyses: Mapping[str, tuple[Profile, Analysis]] = field(default_factory=dict)
    """Candidate key -> its profile and Stage 2 findings (the baseline and each new best)."""
    profile_seconds: float = 0.0
    """Time spent profiling."""
    memory: tuple[dict[str, Any], ...] = ()
    """The search memory at the end: section, text, evaluation."""


ProgressFn = Callable[[int, int, Scored, float], None]


def geomean_speedup(baseline: Outcome, cand: Outcome, workloads: tuple[Workload, ...]) -> float:
    if not cand.passed or not baseline.passed:
        return 0.0
    logs = []
    for w in workloads:
        b, c = baseline.latency(w.uuid), cand.latency(w.uuid)
        if not (math.isfinite(b) and math.isfinite(c)) or c <= 0:
            return 0.0
        logs.append(math.log(b / c))
    return math.exp(sum(logs) / len(logs)) if logs else 0.0


def _gate(target: Target, base: Candidate, cand: Candidate, workloads: tuple[Workload, ...],
          s: RunSettings, floors: Mapping[str, float] | None = None) -> GateResult:  # fmt: skip
    # Fresh seeds and more trials than the search used; baseline and candidate re-measured now so
    # drift in clocks or load affects both.
    # A Triton cache of the gate's own: a candidate of the search could have planted a slower build
    # of the baseline in the shared one (one planted now is undone by taking the faster baseline).
    with tempfile.TemporaryDirectory(prefix="kernelpro-gate-") as cache:
        es = replace(s.evaluation, trials=s.gate_trials, seed=s.evaluation.seed + 7_777, reps=max(s.evaluation.reps, 50),
                     cache_dir=Path(cache))  # fmt: skip
        b = evaluate(target.definition, base.solution, workloads, target.tolerance, es)
        c = evaluate(target.definition, cand.solution, workloads, target.tolerance, es)
        b2 = evaluate(target.definition, base.solution, workloads, target.tolerance, es)
    if not b.passed or not b2.passed:
        return GateResult(cand, False, 0.0, (), f"baseline failed in the gate: {b.status if not b.passed else b2.status}")
    if not c.passed:
        return GateResult(cand, False, 0.0, (), f"{c.status} on more seeds: {c.log[:300]}")
    rows: list[dict[str, Any]] = []
    ok = True
    logs = []
    for w in workloads:
        bt = [r.timing for o in (b, b2) for r in o.results if r.uuid == w.uuid and r.timing]
        ct = next(r.timing for r in c.results if r.uuid == w.uuid and r.timing)
        # Interleaved B-C-B: the candidate must beat the slower-looking side of neither.
        b_med = min(t.median_ms for t in bt)
        sp = b_med / ct.median_ms
        lo = min(t.p10_ms for t in bt) / ct.p90_ms
        hi = max(t.p90_ms for t in bt) / ct.p10_ms
        ok &= sp >= s.gamma
        logs.append(math.log(sp))
        rows.append({"uuid": w.uuid, "axes": dict(w.axes), "baseline_ms": b_med,
                     "baseline_p10_ms": min(t.p10_ms for t in bt), "baseline_p90_ms": max(t.p90_ms for t in bt),
                     "candidate_ms": ct.median_ms, "candidate_p10_ms": ct.p10_ms, "candidate_p90_ms": ct.p90_ms,
                     "speedup": sp, "speedup_low": lo, "speedup_high": hi, "n": ct.n})  # fmt: skip
    correctness = tuple({"uuid": r.uuid, **(r.correctness or {})} for r in c.results)
    speed = math.exp(sum(logs) / len(logs))
    reason = "passed" if ok else f"not faster than {s.gamma:.2f}x on every workload"
    # Faster than physics allows means the measurement or the check was fooled: never publish it.
    impossible = [w.uuid for w, r in zip(workloads, rows, strict=True)
                  if floors and floors.get(w.uuid) and float(r["candidate_ms"]) < 0.9 * floors[w.uuid]]  # fmt: skip
    if impossible:
        ok, reason = False, f"faster than the roofline allows on {', '.join(impossible)}: flagged, not published"
    return GateResult(cand, ok, speed, tuple(rows), reason, correctness)


def optimize(target: Target, head_checkout: Path, out_dir: Path, programmer: Programmer, settings: RunSettings,
             *, base_solution: Solution | None = None, progress: ProgressFn | None = None) -> Result:  # fmt: skip
    t0 = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    es = settings.evaluation
    if es.cache_dir is None:
        es = replace(es, cache_dir=out_dir / ".triton-cache")
    if es.device == "cuda" and settings.feedback != "none":
        es = replace(es, timeline=True)
    settings = replace(settings, evaluation=es)
    device = es.device
    workloads = target.workloads_for(device)
    budget = settings.budget or target.budget.evaluations
    es = replace(es, timeout_s=min(es.timeout_s, target.budget.timeout_s))
    ctx_key = context_key({
        "definition": target.definition.to_json(), "workloads": [w.to_json() for w in workloads],
        "tolerance": [target.tolerance.atol, target.tolerance.rtol], "device": device, "trials": es.trials,
        "seed": es.seed, "evaluator": EVALUATOR_VERSION,  # verdicts of an older evaluator are not resumed
    })  # fmt: skip
    journal = Journal(out_dir / "journal.jsonl", ctx_key)
    resumed = len(journal)
    deadline = t0 + target.budget.minutes * 60
    trace_path = out_dir / "trace.jsonl"
    trace_path.write_text("")
    state: dict[str, Any] = {"baseline": None, "best": 1.0, "count": 0}
    evaluated: list[Scored] = []

    def run_eval(cand: Candidate) -> Outcome:
        hit = journal.get(cand.key)
        if hit is not None:
            return hit.outcome
        outcome = evaluate(target.definition, cand.solution, workloads, target.tolerance, es)
        journal.append(cand, outcome)
        return outcome

    def record(cand: Candidate, outcome: Outcome) -> Scored:
        base: Outcome | None = state["baseline"]
        speed = 1.0 if base is None else geomean_speedup(base, outcome, workloads)
        scored = Scored(cand, outcome, speed)
        evaluated.append(scored)
        append_jsonl(trace_path, [t.to_json() for t in traces(target.definition, cand.solution, workloads, outcome)])
        if outcome.passed:
            state["best"] = max(state["best"], speed)
        if progress:
            progress(len(evaluated), budget, scored, state["best"])
        return scored

    baseline_cand = Candidate(target.solution(head_checkout), None, "init", "the pull request's kernel")
    baseline = record(baseline_cand, run_eval(baseline_cand))
    state["baseline"] = baseline.outcome

    base_branch = None
    if base_solution is not None and base_solution.content_hash() != baseline_cand.key:
        bc = Candidate(base_solution, None, "init", "the base branch's kernel")
        o = run_eval(bc)
        base_branch = Scored(bc, o, geomean_speedup(baseline.outcome, o, workloads))
        append_jsonl(trace_path, [t.to_json() for t in traces(target.definition, bc.solution, workloads, o)])

    stop = "budget spent"
    if not baseline.outcome.passed:
        stop = f"the pull request's kernel fails verification ({baseline.outcome.status}); nothing to optimize"
        return _finish(target, device, baseline, evaluated, None, (), base_branch, stop, t0, resumed, out_dir,
                       head_checkout, settings, journal_torn=journal.skipped_lines)  # fmt: skip

    analyses: dict[str, tuple[Profile, Analysis]] = {}
    tools = registry(settings.extra_tools)
    stage1 = None
    prof_time = [0.0]

    def recorded_timeline(key: str) -> Timeline | None:
        hit = journal.get(key)
        t = hit.outcome.timeline if hit is not None else None
        return Timeline(**{**t, "kernels": tuple(t.get("kernels", ()))}) if t and "error" not in t else None

    def profile(cand: Candidate) -> None:
        if device != "cuda" or settings.feedback == "none" or cand.key in analyses:
            return
        prof, secs = profile_candidate(target.definition, cand.solution, workloads, es, settings.profiling,
                                       recorded_timeline(cand.key))  # fmt: skip
        prof_time[0] += secs
        bottleneck = stage1.bottleneck if stage1 is not None else "unknown"
        analyses[cand.key] = (prof, run_tools(prof, bottleneck, tools))
        append_jsonl(out_dir / "profiles.jsonl", [{"key": cand.key, "seconds": round(secs, 2), "notes": list(prof.notes),
                                                  "findings": [f.to_json() for f in analyses[cand.key][1].findings]}])  # fmt: skip

    if device == "cuda":
        dtypes = [t.dtype for t in (*target.definition.inputs.values(), *target.definition.outputs.values())]
        base_prof = None
        if settings.feedback != "none":
            base_prof, secs = profile_candidate(target.definition, baseline_cand.solution, workloads, es,
                                                settings.profiling, recorded_timeline(baseline_cand.key))  # fmt: skip
            prof_time[0] += secs
        stage1 = analyze_reference(
            target.definition, workloads, flops=target.flops, nbytes=target.bytes,
            ceilings=default_ceilings(str(baseline.outcome.environment.get("hardware", "")), dtypes),
            measured_ms={w.uuid: baseline.outcome.latency(w.uuid) for w in workloads}, profile=base_prof,
        )  # fmt: skip
        if base_prof is not None:
            analyses[baseline_cand.key] = (base_prof, run_tools(base_prof, stage1.bottleneck, tools))

    memory = SearchMemory(enabled=settings.memory)
    memory.key_files(target.files, target.entry_point)
    if baseline_cand.key in analyses:
        memory.observe(0, baseline, None, analyses[baseline_cand.key][1].findings)

    def bounded_eval(cand: Candidate) -> Scored | None:
        if len(evaluated) >= budget or time.perf_counter() > deadline:
            return None
        before = state["best"]
        scored = record(cand, run_eval(cand))
        if scored.outcome.passed and scored.speedup > before:
            profile(cand)  # findings on each new best steer the next proposals
        parent = next((x for x in evaluated if x.candidate.key == cand.parent), None)
        found = analyses[cand.key][1].findings if cand.key in analyses else ()
        memory.observe(len(evaluated) - 1, scored, parent, found)
        return scored

    def feedback_for(key: str | None) -> tuple[str, tuple, Profile | None]:
        # The parent's own analysis, else its nearest profiled ancestor's.
        by_key = {x.candidate.key: x.candidate for x in evaluated}
        while key is not None and key not in analyses:
            c = by_key.get(key)
            key = c.parent if c is not None else None
        if key is None:
            return "", (), None
        prof, analysis = analyses[key]
        return render(analysis, prof, settings.feedback), analysis.findings, prof

    context = Context(target=target, seen=lambda k: any(s.candidate.key == k for s in evaluated), device=device,
                      gpu_name=str(baseline.outcome.environment.get("hardware", "")),
                      bottleneck=stage1.bottleneck if stage1 is not None else "unknown",
                      tool_mode=settings.tool_mode if settings.feedback == "tools" else "proactive",
                      tools=tools)  # fmt: skip

    halted: list[str] = []

    def propose(parent: Scored, mode: str, n: int) -> list[Candidate]:
        if halted:
            return []
        text, findings, prof = feedback_for(parent.candidate.key)
        try:
            return programmer.propose(parent, mode, n, replace(context, feedback=text, findings=findings,
                                                               profile=prof, memory=memory.render()))  # fmt: skip
        except PluginError as e:
            # Pointless to retry (bad key, unknown model): stop searching, keep what was found.
            halted.append(str(e))
            return []

    get_strategy(settings.search)(baseline, propose, bounded_eval, settings.per_step)
    if halted:
        stop = f"the programmer failed: {halted[0]}"
    elif len(evaluated) < budget and time.perf_counter() <= deadline:
        stop = "the programmer had nothing new to propose"
    elif time.perf_counter() > deadline:
        stop = f"time budget of {target.budget.minutes:g} min spent"

    ranked = sorted((s for s in evaluated[1:] if s.outcome.passed and s.speedup > 1.0), key=lambda s: -s.speedup)
    gates: list[GateResult] = []
    winner = None
    floors = {b.uuid: b.floor_ms for b in stage1.workloads if b.floor_ms} if stage1 is not None else None
    for s in ranked[: settings.gate_top]:
        g = _gate(target, baseline_cand, s.candidate, workloads, settings, floors)
        gates.append(g)
        if g.passed:
            winner = g
            break
    if winner is not None:
        profile(winner.candidate)
    return _finish(target, device, baseline, evaluated, winner, tuple(gates), base_branch, stop, t0, resumed,
                   out_dir, head_checkout, settings, stage1, analyses, prof_time[0], tuple(memory.to_json()),
                   journal.skipped_lines)  # fmt: skip


def patch(target: Target, head_checkout: Path, solution: Solution) -> str:
    chunks: list[str] = []
    for src in solution.sources:
        old = (head_checkout / src.path).read_text() if (head_checkout / src.path).exists() else ""
        if old != src.content:
            chunks.extend(difflib.unified_diff(old.splitlines(True), src.content.splitlines(True),
                                               f"a/{src.path}", f"b/{src.path}"))  # fmt: skip
    return "".join(chunks)


def _finish(target: Target, device: str, baseline: Scored, evaluated: list[Scored], winner: GateResult | None,
            gates: tuple[GateResult, ...], base_branch: Scored | None, stop: str, t0: float, resumed: int,
            out_dir: Path, head_checkout: Path, settings: RunSettings, stage1: ReferenceAnalysis | None = None,
            analyses: Mapping[str, tuple[Profile, Analysis]] | None = None, profile_seconds: float = 0.0,
            memory: tuple[dict[str, Any], ...] = (), journal_torn: int = 0) -> Result:  # fmt: skip
    result = Result(target, device, baseline, tuple(evaluated), winner, gates, base_branch, stop,
                    time.perf_counter() - t0, resumed, journal_torn, stage1, dict(analyses or {}), profile_seconds, memory)  # fmt: skip
    best = winner.candidate.solution if winner else baseline.candidate.solution
    (out_dir / "solution.json").write_text(dump_json(best.to_json()))
    # The definition and workloads beside the solution make the report's reproduction command work.
    (out_dir / "definition.json").write_text(dump_json(target.definition.to_json()))
    (out_dir / "workloads.jsonl").write_text(
        "".join(json.dumps(w.to_json()) + "\n" for w in target.workloads_for(device)))
    diff = patch(target, head_checkout, best) if winner else ""
    (out_dir / "patch.diff").write_text(diff)
    from .report import render_report, summary

    (out_dir / "result.json").write_text(dump_json(summary(result, settings)))
    (out_dir / "report.md").write_text(render_report(result, settings, diff))
    return result
