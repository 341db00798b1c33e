"""The loop for one target: baseline -> search -> final gate -> results directory.

Inputs are plain data (a Target and a checkout of the PR head); outputs are files in DIR:
journal.jsonl (as it happens), trace.jsonl, solution.json, patch.diff, result.json, report.md.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import math
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .basebranch import BaseComparison
from .basebranch import compare as compare_base
from .candidate import Candidate, fingerprint
from .checkout import CheckoutError, read_source
from .cubin import BuildPool, cache_root
from .energy import (
    EnergyOutcome,
    Meter,
    ProxyEnergy,
    decide,
    energy_eps,
    notes_for_prompt,
    proxy,
    timing_noise,
)
from .evaluator import EVALUATOR_VERSION, EvalSettings, Outcome, evaluate, reference_ready, traces
from .forkserver import cool
from .guard import GuardShape
from .guard import check as check_guards
from .guard import shapes_for as guard_shapes_for
from .journal import Journal, context_key
from .memory import Extractor, SearchMemory
from .pool import Pool, Schedule, TargetEval
from .preload import start as start_warm
from .profile import Profile, Timeline
from .profiler import ProfileSettings, profile_candidate, start_standby
from .programmers import Context, PluginError, Programmer, usage
from .roofline import ReferenceAnalysis, analyze_reference, default_ceilings
from .screen import REJECTED, for_trace
from .screen import check as screen_check
from .screen import outcome as rejected_outcome
from .search import Scored, get_strategy
from .smoke import is_reference_failure
from .standby import NcuStandby
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
    memcheck: bool = True
    """On the GPU, the gate also runs each candidate that passed it so far under compute-sanitizer memcheck."""
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
    energy: str = "off"
    """off | passive (NVML measures the baseline and the winner after the gate; the search is unchanged) |
    active (also the proxy term in the reward, the energy-only tools, the prompt's energy notes, and the
    least measured energy among gate-passing candidates within the timing noise)."""
    tie_noise: float | None = None
    """Speedup factor within which candidates count as equally fast; None: the gate's gamma or the
    baseline's measured p90/p10 spread, whichever is wider."""
    command: str = ""
    """The command line that reproduces this run (the CLI sets it; the report's settings row shows it)."""
    guard_bytes: float | None = None
    """Largest guard shape (inputs and outputs, bytes); None: runner/guard.py's cap for the device."""


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
    memcheck: Mapping[str, Any] | None = None
    """compute-sanitizer memcheck of the candidate (runner.memcheck.Memcheck.to_json); None off the GPU."""
    guards: Mapping[str, Any] | None = None
    """The guard shapes' verdict (runner.guard.GuardCheck.to_json); None when none were timed."""


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
    energy: EnergyOutcome | None = None
    """Energy mode, measurements and how they were used; None when energy is off."""
    duplicates: int = 0
    """Proposals not evaluated because they build the same code as an evaluated candidate."""
    versus_base: BaseComparison | None = None
    """The PR's kernel against the base branch's, measured side by side after the search (None when
    there is no different base version, or one of them failed its evaluation)."""
    programmer: Mapping[str, Any] = field(default_factory=dict)
    """Who wrote the candidates (runner.programmers.usage): name, and for the llm one its model, endpoint
    host and counts of requests, tokens, retries and errors."""


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


def _home(schedule: Schedule | None) -> Callable[..., Any]:
    """Runs fn(*args) on the pool's home GPU when there are several, here otherwise."""
    return schedule.home if schedule is not None else lambda fn, *a: fn(*a)


def _interleaved(target: Target, a: Solution, b: Solution, workloads: tuple[Workload, ...], es: EvalSettings,
                 home: Callable[..., Outcome]) -> tuple[Outcome, Outcome, Outcome]:  # fmt: skip
    """a, b, a again: drift between evaluations (clocks, heat, load) falls on both sides."""
    first = home(evaluate, target.definition, a, workloads, target.tolerance, es)
    other = home(evaluate, target.definition, b, workloads, target.tolerance, es)
    return first, other, home(evaluate, target.definition, a, workloads, target.tolerance, es)


def _versus_base(target: Target, head: Candidate, base: Candidate, workloads: tuple[Workload, ...], s: RunSettings,
                 schedule: Schedule | None) -> BaseComparison:  # fmt: skip
    # The search's seeds (their reference outputs are cached) and more timed calls, as in the gate.
    with tempfile.TemporaryDirectory(prefix="kernelpro-versus-") as cache:
        es = replace(s.evaluation, reps=max(s.evaluation.reps, 50), cache_dir=Path(cache))
        return compare_base(*_interleaved(target, head.solution, base.solution, workloads, es, _home(schedule)),
                            workloads, s.gamma)  # fmt: skip


def _gate(target: Target, base: Candidate, cand: Candidate, workloads: tuple[Workload, ...],
          s: RunSettings, floors: Mapping[str, float] | None = None, schedule: Schedule | None = None,
          guards: tuple[Sequence[GuardShape], Sequence[str]] = ((), ())) -> GateResult:  # fmt: skip
    # Fresh seeds and more trials than the search used; baseline and candidate re-measured now so
    # drift in clocks or load affects both (and on one GPU, the pool's home, when there are several).
    # A Triton cache of the gate's own: a candidate of the search could have planted a slower build
    # of the baseline in the shared one (one planted now is undone by taking the faster baseline).
    home = _home(schedule)  # every gate step on one GPU
    with tempfile.TemporaryDirectory(prefix="kernelpro-gate-") as cache:
        es = replace(s.evaluation, trials=s.gate_trials, seed=s.evaluation.seed + 7_777, reps=max(s.evaluation.reps, 50),
                     cache_dir=Path(cache))  # fmt: skip
        b, c, b2 = _interleaved(target, base.solution, cand.solution, workloads, es, home)
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
                     "speedup": sp, "speedup_low": lo, "speedup_high": hi, "n": ct.n,
                     "timing_mode": ct.mode})  # fmt: skip
    correctness = tuple({"uuid": r.uuid, **(r.correctness or {})} for r in c.results)
    speed = math.exp(sum(logs) / len(logs))
    reason = "passed" if ok else f"not faster than {s.gamma:.2f}x on every workload"
    guarded = None
    if ok and (guards[0] or guards[1]):  # shapes nobody listed must not get slower (runner/guard.py)
        guarded = check_guards(target, base.solution, cand, guards[0], es, home, s.gamma, guards[1])
        ok, reason = guarded.passed, guarded.reason
    mc = None
    if ok and es.device == "cuda" and s.memcheck:  # the slowest check, for a candidate that passed the rest
        from .memcheck import memcheck

        mc = home(memcheck, target.definition, cand.solution, workloads, replace(es, cache_dir=None), None)
        if mc.blocks:
            ok, reason = False, (f"compute-sanitizer memcheck found {mc.errors} error(s): {mc.detail[:300]}"
                                 if mc.status == "errors" else
                                 f"compute-sanitizer memcheck did not finish cleanly ({mc.detail[:300]}): refused")  # fmt: skip
    # Faster than physics allows means the measurement or the check was fooled: never publish it.
    impossible = [w.uuid for w, r in zip(workloads, rows, strict=True)
                  if floors and floors.get(w.uuid) and float(r["candidate_ms"]) < 0.9 * floors[w.uuid]]  # fmt: skip
    if impossible:
        ok, reason = False, f"faster than the roofline allows on {', '.join(impossible)}: flagged, not published"
    return GateResult(cand, ok, speed, tuple(rows), reason, correctness, None if mc is None else mc.to_json(),
                      None if guarded is None else guarded.to_json())  # fmt: skip


def _spreads(outcome: Outcome) -> list[float]:
    return [r.timing.p90_ms / r.timing.p10_ms for r in outcome.results if r.timing is not None and r.timing.p10_ms > 0]


def optimize(target: Target, head_checkout: Path, out_dir: Path, programmer: Programmer, settings: RunSettings,
             *, base_solution: Solution | None = None, progress: ProgressFn | None = None,
             clock: Callable[[], float] = time.perf_counter, extractor: Extractor | None = None,
             pool: Pool | None = None, meter: Meter | None = None) -> Result:  # fmt: skip
    """``clock`` (seconds, monotonic) measures the wall-time budget; tests pass their own. ``extractor``
    keeps the search memory by an LLM call per iteration (None: by rules). ``pool``: one evaluation
    worker per GPU when there are several. ``meter`` measures energy (runner.energy.nvml_meter on
    a GPU); without one, energy modes other than off record that nothing was measured."""
    spare: list[NcuStandby | None] = [None]  # the next profile's standby ncu child (runner/standby.py)
    try:
        return _optimize(target, head_checkout, out_dir, programmer, settings, base_solution, progress, clock,
                         extractor, pool, meter, spare)  # fmt: skip
    finally:
        if spare[0] is not None:  # however the run ended, no standby outlives it
            spare[0].close()
        cool()


def _optimize(target: Target, head_checkout: Path, out_dir: Path, programmer: Programmer, settings: RunSettings,
              base_solution: Solution | None, progress: ProgressFn | None, clock: Callable[[], float],
              extractor: Extractor | None, pool: Pool | None, meter: Meter | None,
              spare: list[NcuStandby | None]) -> Result:  # fmt: skip
    t0 = clock()
    out_dir.mkdir(parents=True, exist_ok=True)
    # The target's limit reaches every child of its run (search, gate, memcheck, base-branch comparison,
    # profiling), resolved once before anything uses the settings (issue 22); energy arms: runner/energy.py.
    settings = replace(settings, evaluation=replace(settings.evaluation, timeout_s=target.budget.timeout_s),
                       profiling=replace(settings.profiling, timeout_s=target.budget.profile_timeout_s))  # fmt: skip
    es = settings.evaluation
    if es.cache_dir is None:
        es = replace(es, cache_dir=out_dir / ".triton-cache")
    if not es.context:  # the candidate runs as the repository at the head with its files in place
        es = replace(es, context=target.context(head_checkout))
    # The search's evaluations record the launch timeline that profiling a candidate reuses; the
    # gate's and the base comparison's (settings.evaluation) need none.
    timelines = es.device == "cuda" and settings.feedback != "none"
    settings = replace(settings, evaluation=es)
    device = es.device
    workloads = target.workloads_for(device)
    budget = settings.budget or target.budget.evaluations
    ctx_key = context_key({
        "definition": target.definition.to_json(), "workloads": [w.to_json() for w in workloads],
        "tolerance": [target.tolerance.atol, target.tolerance.rtol,
                      *([[(n, t.atol, t.rtol) for n, t in target.tolerance.outputs]] if target.tolerance.outputs else [])],
        "device": device, "trials": es.trials,
        "seed": es.seed, "evaluator": EVALUATOR_VERSION,  # verdicts of an older evaluator are not resumed
    })  # fmt: skip
    journal = Journal(out_dir / "journal.jsonl", ctx_key)
    resumed = len(journal)
    deadline = t0 + target.budget.minutes * 60
    trace_path = out_dir / "trace.jsonl"
    trace_path.write_text("")
    state: dict[str, Any] = {"baseline": None, "best": 1.0, "count": 0, "duplicates": 0, "noise": 1.0}
    prints: dict[str, str] = {}  # fingerprint -> key of the first evaluated candidate with it
    evaluated: list[Scored] = []

    def timeline_bar() -> tuple[float, tuple[tuple[str, float], ...]] | None:
        # Only a candidate the loop will profile needs its timeline (bounded_eval's rule: a new
        # best, or with energy active one within the noise of it); the baseline always is.
        base: Outcome | None = state["baseline"]
        if base is None:
            return None
        return state["best"] / state["noise"], tuple((w.uuid, base.latency(w.uuid)) for w in workloads)

    def pool_eval() -> TargetEval:
        # A batch's bar is the one of its proposal: a candidate that clears it but is beaten by
        # another of the same batch records a timeline it will not need, never the reverse.
        return TargetEval(target.definition, workloads, target.tolerance,
                          replace(es, timeline=timelines, timeline_bar=timeline_bar()))  # fmt: skip

    # Several GPUs: a batch is evaluated concurrently, one candidate per GPU; one GPU: in this process.
    # The schedule's own evaluation (no bar yet) serves the baseline and the base branch.
    schedule = Schedule(pool, pool_eval(), journal) if pool is not None and len(pool.gpus) > 1 else None

    def run_eval(cand: Candidate, may_profile: bool = True) -> Outcome:
        hit = journal.get(cand.key)
        if hit is not None:
            return hit.outcome
        if schedule is not None:
            # With nothing in flight (baseline, base branch) the first idle GPU is the home one.
            return schedule.result(cand)
        outcome = evaluate(target.definition, cand.solution, workloads, target.tolerance,
                           replace(es, cache_dir=triton_cache(cand), timeline=timelines and may_profile,
                                   timeline_bar=timeline_bar()))  # fmt: skip
        journal.append(cand, outcome)
        return outcome

    def triton_cache(cand: Candidate) -> Path:
        assert es.cache_dir is not None
        return cand.cache_dir(es.cache_dir)

    def record(cand: Candidate, outcome: Outcome) -> Scored:
        base: Outcome | None = state["baseline"]
        speed = 1.0 if base is None else geomean_speedup(base, outcome, workloads)
        scored = Scored(cand, outcome, speed)
        evaluated.append(scored)
        prints.setdefault(fingerprint(cand.solution), cand.key)
        append_jsonl(trace_path, [t.to_json() for t in traces(target.definition, cand.solution, workloads,
                                                                for_trace(outcome))])  # fmt: skip
        if outcome.passed:
            state["best"] = max(state["best"], speed)
        if progress:
            progress(len(evaluated), budget, scored, state["best"])
        return scored

    baseline_cand = Candidate(target.solution(head_checkout), None, "init", "the pull request's kernel")
    rejections: dict[str, str | None] = {}

    def rejection(cand: Candidate) -> str | None:
        """Why the static check refuses a proposed candidate (runner/screen.py); the PR's own kernel is never
        screened, every programmer's candidate is, before it is built or run."""
        if cand.key not in rejections:
            rejections[cand.key] = screen_check(cand.solution, baseline_cand.solution, target.definition.reference,
                                                target.language)  # fmt: skip
        return rejections[cand.key]

    def screened_eval(cand: Candidate) -> Outcome:
        why = rejection(cand)
        if why is None:
            return run_eval(cand)
        hit = journal.get(cand.key)
        if hit is not None and hit.outcome.status == REJECTED:
            return hit.outcome
        outcome = rejected_outcome(cand.solution, why)
        journal.append(cand, outcome)
        return outcome

    # The next profile's ncu child, started ahead so its start-up and imports overlap other work. Only
    # once the search's reference is in memory: the imports it preloads may be the pull request's own
    # package, which must not run while a reference child's outputs are on disk (computed here, before
    # the baseline's evaluation; the gate's come after the last standby is closed). With a pool, other
    # GPUs' workers compute theirs later, so no standby there. The first one imports while the baseline
    # is evaluated: started after it, the baseline's profile waited for Liger's 12 s of imports.
    standbys = (device == "cuda" and settings.feedback != "none" and schedule is None
                and reference_ready(target.definition, baseline_cand.solution, workloads, target.tolerance, es))

    def refill() -> None:
        if standbys and not state.get("gating"):
            spare[0] = start_standby(baseline_cand.solution, settings.profiling)

    def next_standby() -> NcuStandby | None:
        taken, spare[0] = spare[0], None
        return taken

    refill()
    # The target's warm fork server (runner/preload.py), like a standby only once the reference is in memory.
    if es.fork_server and es.warm_server and schedule is None and (standbys or reference_ready(target.definition, baseline_cand.solution,
                                                                            workloads, target.tolerance, es)):  # fmt: skip
        start_warm(target.name, baseline_cand.solution, es.context, device, blocked=(str(head_checkout),))
    baseline = record(baseline_cand, run_eval(baseline_cand))
    state["baseline"] = baseline.outcome

    base_branch = None
    if base_solution is not None and base_solution.content_hash() != baseline_cand.key:
        bc = Candidate(base_solution, None, "init", "the base branch's kernel")
        o = run_eval(bc, may_profile=False)
        base_branch = Scored(bc, o, geomean_speedup(baseline.outcome, o, workloads))
        append_jsonl(trace_path, [t.to_json() for t in traces(target.definition, bc.solution, workloads, o)])

    stop = "budget spent"
    if not baseline.outcome.passed:
        stop = f"the pull request's kernel fails verification ({baseline.outcome.status}); nothing to optimize"
        if is_reference_failure(baseline.outcome.log):  # the judge failed, not the kernel it judges
            last = ([ln for ln in baseline.outcome.log.strip().splitlines() if ln.strip()] or [""])[-1].strip()
            stop = (f"configuration error, not the pull request's kernel: the definition's reference fails on a "
                    f"workload ({last[:300]}); correct `reference` in .kernelpro.yml")  # fmt: skip
        return _finish(target, device, baseline, evaluated, None, (), base_branch, stop, t0, resumed, out_dir,
                       head_checkout, settings, journal_torn=journal.skipped_lines, clock=clock,
                       programmer=usage(programmer))  # fmt: skip

    analyses: dict[str, tuple[Profile, Analysis]] = {}
    tools = registry(settings.extra_tools)
    active = settings.energy == "active"
    noise = settings.tie_noise or timing_noise(settings.gamma, _spreads(baseline.outcome))
    eps = energy_eps(noise) if active else 0.0
    state["noise"] = noise if active else 1.0
    proxies: dict[str, ProxyEnergy] = {}
    energy_tools = {t.name for t in tools if t.energy_only}
    stage1 = None
    prof_time = [0.0]

    def recorded_timeline(key: str) -> Timeline | None:
        hit = journal.get(key)
        t = hit.outcome.timeline if hit is not None else None
        return Timeline(**{**t, "kernels": tuple(t.get("kernels", ()))}) if t and "error" not in t else None

    def profile(cand: Candidate) -> None:
        if device != "cuda" or settings.feedback == "none" or cand.key in analyses:
            return
        # With several GPUs no candidate is timed while ncu replays kernels.
        with schedule.exclusive() if schedule is not None else contextlib.nullcontext():
            prof, secs = profile_candidate(target.definition, cand.solution, workloads, es, settings.profiling,
                                           recorded_timeline(cand.key), triton_cache(cand), next_standby())  # fmt: skip
        refill()
        prof_time[0] += secs
        bottleneck = stage1.bottleneck if stage1 is not None else "unknown"
        analyses[cand.key] = (prof, run_tools(prof, bottleneck, tools, energy=active, stage1=stage1))
        if active and (e := proxy(prof)) is not None:
            proxies[cand.key] = e
        log_profile(cand.key, secs)

    def log_profile(key: str, secs: float) -> None:
        prof, analysis = analyses[key]
        append_jsonl(out_dir / "profiles.jsonl", [{"key": key, "seconds": round(secs, 2), "stages": dict(prof.stages),
                                                  "notes": list(prof.notes), "findings": [f.to_json() for f in analysis.findings]}])  # fmt: skip

    if device == "cuda":
        dtypes = [t.dtype for t in (*target.definition.inputs.values(), *target.definition.outputs.values())]
        base_prof = None
        if settings.feedback != "none":
            base_prof, secs = profile_candidate(target.definition, baseline_cand.solution, workloads, es,
                                                settings.profiling, recorded_timeline(baseline_cand.key),
                                                triton_cache(baseline_cand), next_standby())  # fmt: skip
            refill()
            prof_time[0] += secs
        stage1 = analyze_reference(
            target.definition, workloads, flops=target.flops, nbytes=target.bytes,
            ceilings=default_ceilings(str(baseline.outcome.environment.get("hardware", "")), dtypes),
            measured_ms={w.uuid: baseline.outcome.latency(w.uuid) for w in workloads}, profile=base_prof,
        )  # fmt: skip
        if base_prof is not None:
            analyses[baseline_cand.key] = (base_prof, run_tools(base_prof, stage1.bottleneck, tools, energy=active,
                                                                stage1=stage1))  # fmt: skip
            log_profile(baseline_cand.key, secs)
            if active and (e := proxy(base_prof)) is not None:
                proxies[baseline_cand.key] = e

    memory = SearchMemory(enabled=settings.memory, extractor=extractor, context=ctx_key,
                          journal=out_dir / "memory.jsonl" if extractor is not None else None)  # fmt: skip
    restored = memory.restore()
    memory.key_files(target.files, target.entry_point)
    if baseline_cand.key in analyses and not restored:
        memory.observe(0, baseline, None, analyses[baseline_cand.key][1].findings)

    def bounded_eval(cand: Candidate) -> Scored | None:
        if len(evaluated) >= budget or clock() > deadline:
            return None
        before = state["best"]
        scored = record(cand, screened_eval(cand))
        # Findings on each new best steer the next proposals; with energy active, a candidate as fast
        # as the best (within the noise) is profiled too, so the proxy can rank it against the best.
        if scored.outcome.passed and (scored.speedup > before or active and scored.speedup * noise >= before):
            profile(cand)
        base_e, e = proxies.get(baseline_cand.key), proxies.get(cand.key)
        if active and base_e is not None and e is not None and e.total_pj > 0:
            scored = replace(scored, energy_reduction=base_e.total_pj / e.total_pj, energy_eps=eps)
            evaluated[-1] = scored
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
        if active:
            # Energy findings go to their own, subordinate prompt section (energy_for), not here.
            analysis = replace(analysis, findings=tuple(f for f in analysis.findings if f.tool not in energy_tools))
        return render(analysis, prof, settings.feedback), analysis.findings, prof

    def energy_for(key: str | None) -> str:
        if not active:
            return ""
        by_key = {x.candidate.key: x.candidate for x in evaluated}
        while key is not None and key not in analyses:
            c = by_key.get(key)
            key = c.parent if c is not None else None
        found = [f for f in analyses[key][1].findings if f.tool in energy_tools] if key is not None else []
        return notes_for_prompt(found, proxies.get(key) if key else None, proxies.get(baseline_cand.key))

    context = Context(target=target, seen=lambda k: any(s.candidate.key == k for s in evaluated), device=device,
                      gpu_name=str(baseline.outcome.environment.get("hardware", "")),
                      bottleneck=stage1.bottleneck if stage1 is not None else "unknown",
                      tool_mode=settings.tool_mode if settings.feedback == "tools" else "proactive",
                      tools=tools, energy=active, gamma=settings.gamma, stage1=stage1, baseline=baseline)  # fmt: skip

    halted: list[str] = []
    # CUDA candidates compile on every CPU core while the GPU measures the first of the batch.
    builds = BuildPool() if target.language == "cuda" and es.cache_dir is not None else None

    def distinct(cands: list[Candidate]) -> list[Candidate]:
        """Drop a proposal that builds the same code as an evaluated one, or as one before it in this
        batch, in another layout or with other comments (candidate.fingerprint): it would cost an
        evaluation and tell nothing new. Content-identical ones are left to the journal, as before."""
        out, batch = [], dict(prints)
        for c in cands:
            first = batch.setdefault(fingerprint(c.solution), c.key)
            if first != c.key:
                state["duplicates"] += 1
                continue
            out.append(c)
        return out

    def propose(parent: Scored, mode: str, n: int) -> list[Candidate]:
        if halted or len(evaluated) >= budget or clock() > deadline:
            return []  # nothing could be evaluated: spare the programmer (and an LLM's tokens) the call
        text, findings, prof = feedback_for(parent.candidate.key)
        try:
            cands = distinct(programmer.propose(parent, mode, n, replace(context, feedback=text, findings=findings,
                                                                         profile=prof, memory=memory.render(),
                                                                         energy_notes=energy_for(parent.candidate.key))))  # fmt: skip
            if builds is not None:
                new = [c for c in cands if journal.get(c.key) is None and rejection(c) is None]
                builds.submit([c.solution for c in new], [cache_root(triton_cache(c)) for c in new])
            if schedule is not None:
                schedule.submit([c for c in cands[: max(0, budget - len(evaluated))] if rejection(c) is None],
                                pool_eval())  # fmt: skip
            return cands
        except PluginError as e:
            # Pointless to retry (bad key, unknown model): stop searching, keep what was found.
            halted.append(str(e))
            return []

    # A resumed run rebuilds the search from its journal (parent links included) and goes on from there.
    done = {baseline_cand.key, base_branch.candidate.key if base_branch is not None else ""}
    history: list[Scored] = []
    for entry in journal:
        if entry.candidate.key not in done and len(evaluated) < budget:
            done.add(entry.candidate.key)
            parent = next((x for x in evaluated if x.candidate.key == entry.candidate.parent), None)
            # An entry the static check now refuses (a journal of an older kernelpro) does not count as run.
            why = rejection(entry.candidate)
            history.append(record(entry.candidate, entry.outcome if why is None else
                                  rejected_outcome(entry.candidate.solution, why)))  # fmt: skip
            if not restored:  # the model's entries came back from memory.jsonl: no need to ask again
                memory.observe(len(evaluated) - 1, history[-1], parent)
    try:
        get_strategy(settings.search)(baseline, propose, bounded_eval, settings.per_step, history)
    finally:
        if builds is not None:
            builds.close()
    if halted:
        stop = f"the programmer failed: {halted[0]}"
    elif (used := usage(programmer)).get("all_failed"):
        stop = f"every request to the LLM endpoint failed: {used.get('last_error')}"
    elif len(evaluated) < budget and clock() <= deadline:
        # The tuner says which construct hid the launch parameters when it found none (Tuner.silent).
        why = getattr(programmer, "silent", "")
        stop = f"the programmer had nothing new to propose ({why})" if why else "the programmer had nothing new to propose"
    elif clock() > deadline:
        stop = f"time budget of {target.budget.minutes:g} min spent"

    # Active: the reward (speed, then the proxy within the noise) orders the gate; otherwise speed alone.
    ranked = sorted((s for s in evaluated[1:] if s.outcome.passed and s.speedup > 1.0),
                    key=lambda s: -(s.reward if active else s.speedup))  # fmt: skip
    gates: list[GateResult] = []
    passing: list[GateResult] = []
    first_speed = 0.0
    floors = {b.uuid: b.floor_ms for b in stage1.workloads if b.floor_ms} if stage1 is not None else None
    if schedule is not None:
        schedule.drain()
    state["gating"] = True
    cool()  # the gate's children start from the plain fork server, as any fresh run's would
    if (unused := next_standby()) is not None:
        unused.close()  # nothing of ncu is left when the gate times and the meter measures energy
    guards = guard_shapes_for(target, device, settings.guard_bytes) if ranked else ((), ())
    for s in ranked[: settings.gate_top]:
        if passing and not (active and s.speedup * noise >= first_speed):
            break  # active mode also gates the candidates as fast as the first winner, for the tie-break
        g = _gate(target, baseline_cand, s.candidate, workloads, settings, floors, schedule, guards)
        gates.append(g)
        if g.passed:
            passing.append(g)
            first_speed = first_speed or s.speedup
    winner, energy = decide(settings.energy, target, baseline_cand.solution, passing, workloads, meter, noise, eps,
                            proxies)  # fmt: skip
    versus = None
    if base_branch is not None and base_branch.outcome.passed and baseline.outcome.passed:
        versus = _versus_base(target, baseline_cand, base_branch.candidate, workloads, settings, schedule)
    if winner is not None:
        profile(winner.candidate)
    return _finish(target, device, baseline, evaluated, winner, tuple(gates), base_branch, stop, t0, resumed,
                   out_dir, head_checkout, settings, stage1, analyses, prof_time[0], tuple(memory.to_json()),
                   journal.skipped_lines, energy, clock=clock, duplicates=state["duplicates"], versus=versus,
                   programmer=usage(programmer))  # fmt: skip


def patch(target: Target, head_checkout: Path, solution: Solution) -> str:
    chunks: list[str] = []
    for src in solution.sources:
        try:  # from the commit, never through a link of the work tree
            old = read_source(head_checkout, src.path)
        except CheckoutError:
            old = ""
        if old != src.content:
            chunks.extend(difflib.unified_diff(old.splitlines(True), src.content.splitlines(True),
                                               f"a/{src.path}", f"b/{src.path}"))  # fmt: skip
    return "".join(chunks)


def _trace_set(out_dir: Path, target: Target, scored: Sequence[Scored]) -> None:
    """The FlashInfer-Bench TraceSet layout beside the flat files (``TraceSet.from_path(out_dir)``
    loads it): definitions/, solutions/ (every solution a trace names) and traces/."""
    safe = re.compile(r"[^A-Za-z0-9._-]")
    name = safe.sub("_", target.definition.name)[:100] or "definition"
    for sub in ("definitions", "solutions", "traces"):
        (out_dir / sub).mkdir(exist_ok=True)
    (out_dir / "definitions" / f"{name}.json").write_text(dump_json(target.definition.to_json()))
    seen: set[str] = set()
    for sc in scored:
        sol = sc.candidate.solution
        if sol.name in seen:
            continue
        seen.add(sol.name)
        stem = safe.sub("_", sol.name)[:100] or "solution"
        (out_dir / "solutions" / f"{stem}-{hashlib.sha256(sol.name.encode()).hexdigest()[:8]}.json").write_text(
            dump_json(sol.to_json()))
    trace = out_dir / "trace.jsonl"
    if trace.exists():
        shutil.copyfile(trace, out_dir / "traces" / f"{name}.jsonl")


def _finish(target: Target, device: str, baseline: Scored, evaluated: list[Scored], winner: GateResult | None,
            gates: tuple[GateResult, ...], base_branch: Scored | None, stop: str, t0: float, resumed: int,
            out_dir: Path, head_checkout: Path, settings: RunSettings, stage1: ReferenceAnalysis | None = None,
            analyses: Mapping[str, tuple[Profile, Analysis]] | None = None, profile_seconds: float = 0.0,
            memory: tuple[dict[str, Any], ...] = (), journal_torn: int = 0,
            energy: EnergyOutcome | None = None, clock: Callable[[], float] = time.perf_counter,
            duplicates: int = 0, versus: BaseComparison | None = None,
            programmer: Mapping[str, Any] | None = None) -> Result:  # fmt: skip
    result = Result(target, device, baseline, tuple(evaluated), winner, gates, base_branch, stop,
                    clock() - t0, resumed, journal_torn, stage1, dict(analyses or {}), profile_seconds, memory,
                    energy, duplicates, versus, dict(programmer or {}))  # fmt: skip
    best = winner.candidate.solution if winner else baseline.candidate.solution
    (out_dir / "solution.json").write_text(dump_json(best.to_json()))
    # The definition and workloads beside the solution make the report's reproduction command work.
    (out_dir / "definition.json").write_text(dump_json(target.definition.to_json()))
    (out_dir / "workloads.jsonl").write_text(
        "".join(json.dumps(w.to_json()) + "\n" for w in target.workloads_for(device)))
    (out_dir / "baseline.json").write_text(dump_json(baseline.candidate.solution.to_json()))
    _trace_set(out_dir, target, [baseline, *evaluated])
    diff = patch(target, head_checkout, best) if winner else ""
    (out_dir / "patch.diff").write_text(diff)
    from .report import render_report, summary

    (out_dir / "result.json").write_text(dump_json(summary(result, settings)))
    (out_dir / "report.md").write_text(render_report(result, settings, diff))
    return result
