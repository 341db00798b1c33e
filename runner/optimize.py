"""The loop for one target: baseline -> search -> final gate -> results directory.

Inputs are plain data (a Target and a checkout of the PR head); outputs are files in DIR:
journal.jsonl (as it happens), trace.jsonl, solution.json, patch.diff, result.json, report.md.
The loop is a ``Run`` whose methods are its steps; the final gate and the base-branch comparison are
runner/gate.py, the records it produces (and RunSettings) runner/result.py.
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import math
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .basebranch import BaseComparison
from .candidate import Candidate, fingerprint
from .checkout import CheckoutError, read_source
from .cubin import BuildPool, cache_root
from .energy import EnergyOutcome, EnergyPolicy, Meter, ProxyEnergy, timing_noise
from .evaluator import EVALUATOR_VERSION, Outcome, evaluate, reference_ready, traces
from .evidence import Profile, Timeline
from .forkserver import cool
from .forkserver import grow as grow_warm
from .gate import gate as final_gate
from .gate import versus_base
from .guard import shapes_for as guard_shapes_for
from .journal import Journal, context_key
from .memory import Extractor, SearchMemory
from .pool import Pool, Schedule, TargetEval
from .preload import more as more_preload
from .preload import start as start_warm
from .profiler import profile_candidate, start_standby
from .programmers import Context, PluginError, Programmer, usage
from .report import NOTHING_PROPOSED, render_report, summary
from .result import GateResult, Result, RunSettings
from .roofline import ReferenceAnalysis, analyze_reference, default_ceilings
from .screen import REJECTED, delegated, for_trace, refused
from .screen import check as screen_check
from .screen import outcome as rejected_outcome
from .search import Scored, get_strategy
from .smoke import is_reference_failure
from .standby import NcuStandby
from .target import Target
from .tools import Analysis, ProfilingTool, registry, render, run_tools
from .trace import Solution, Workload, append_jsonl, dump_json

ProgressFn = Callable[[int, int, Scored, float], None]
# The final gate, under the name tests/test_gpu.py and benchmarks/evaluator.py import from here.
_gate = final_gate


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


def _spreads(outcome: Outcome) -> list[float]:
    return [r.timing.spread for r in outcome.results if r.timing is not None]


def resolve(settings: RunSettings, target: Target, head_checkout: Path, out_dir: Path) -> RunSettings:
    """The run's settings, resolved once before anything uses them. The target's limit reaches every
    child of its run (search, gate, memcheck, base-branch comparison; profiling by its own multiple;
    energy arms: runner/energy/meter.py) (issue 22); the Triton cache lies in the results directory unless one
    was given; the candidate runs as the repository at the head with its files in place."""
    ev = settings.evaluation
    evaluation = replace(ev, timeout_s=target.budget.timeout_s,
                         cache_dir=out_dir / ".triton-cache" if ev.cache_dir is None else ev.cache_dir,
                         context=ev.context or target.context(head_checkout))
    return replace(settings, evaluation=evaluation,
                   profiling=replace(settings.profiling, timeout_s=target.budget.profile_timeout_s))


def optimize(target: Target, head_checkout: Path, out_dir: Path, programmer: Programmer, settings: RunSettings,
             *, base_solution: Solution | None = None, progress: ProgressFn | None = None,
             clock: Callable[[], float] = time.perf_counter, extractor: Extractor | None = None,
             pool: Pool | None = None, meter: Meter | None = None) -> Result:
    """``clock`` (seconds, monotonic) measures the wall-time budget; tests pass their own. ``extractor``
    keeps the search memory by an LLM call per iteration (None: by rules). ``pool``: one evaluation
    worker per GPU when there are several. ``meter`` measures energy (runner.energy.nvml_meter on
    a GPU); without one, energy modes other than off record that nothing was measured."""
    with contextlib.ExitStack() as after:  # however the run ends, last in first out:
        after.callback(cool)  # no warm fork server outlives it
        run = Run(target, head_checkout, out_dir, programmer, settings, base_solution=base_solution,
                  progress=progress, clock=clock, extractor=extractor, pool=pool, meter=meter)
        after.callback(run.close)  # nor a standby profiler
        return run.run()


class Run:
    """One optimize run: the state of its search and the steps that change it.

    ``run`` is the order of things: the baseline, the search (``propose`` and ``evaluate``, which the
    strategy calls; ``evaluate`` ``record``s and ``profile``s), the final ``gate``, the results directory
    (``finish``). Construction starts no process; ``close`` stops the standby profiler a run may leave."""

    def __init__(self, target: Target, head_checkout: Path, out_dir: Path, programmer: Programmer,
                 settings: RunSettings, *, base_solution: Solution | None = None, progress: ProgressFn | None = None,
                 clock: Callable[[], float] = time.perf_counter, extractor: Extractor | None = None,
                 pool: Pool | None = None, meter: Meter | None = None) -> None:
        self.t0 = clock()
        out_dir.mkdir(parents=True, exist_ok=True)
        self.target, self.head_checkout, self.out_dir, self.programmer = target, head_checkout, out_dir, programmer
        self.base_solution, self.progress, self.clock = base_solution, progress, clock
        self.settings = s = resolve(settings, target, head_checkout, out_dir)
        self.es = es = s.evaluation
        # The search's evaluations record the launch timeline that profiling a candidate reuses; the
        # gate's and the base comparison's need none.
        self.timelines = es.device == "cuda" and s.feedback != "none"
        self.device = es.device
        self.workloads = target.workloads_for(self.device)
        self.budget = s.budget or target.budget.evaluations
        self.energy = EnergyPolicy(s.energy, meter)
        """What the run does with energy; its noise and energy-only tools are set after the baseline."""
        tol = target.tolerance
        ctx_key = context_key({
            "definition": target.definition.to_json(), "workloads": [w.to_json() for w in self.workloads],
            "tolerance": [tol.atol, tol.rtol, *([[(n, t.atol, t.rtol) for n, t in tol.outputs]] if tol.outputs else [])],
            "device": self.device, "trials": es.trials,
            "seed": es.seed, "evaluator": EVALUATOR_VERSION,  # verdicts of an older evaluator are not resumed
        })
        self.journal = Journal(out_dir / "journal.jsonl", ctx_key)
        self.resumed = len(self.journal)
        self.deadline = self.t0 + target.budget.minutes * 60
        self.trace_path = out_dir / "trace.jsonl"
        self.trace_path.write_text("")
        self.evaluated: list[Scored] = []
        """Every evaluation in order; the first is the pull request's kernel (``baseline``)."""
        self.best = 1.0
        """The best passing speedup so far."""
        self.prints: dict[str, str] = {}
        """Fingerprint -> key of the first evaluated candidate with it."""
        self.duplicates = 0
        self.rejections: dict[str, str | None] = {}
        self.base_branch: Scored | None = None
        # After the baseline: the tools and the energy policy's tie noise (settings of the run that
        # need the baseline's measurements, or that must not run before it: test_standby).
        self.tools: tuple[ProfilingTool, ...] = ()
        self.stage1: ReferenceAnalysis | None = None
        self.analyses: dict[str, tuple[Profile, Analysis]] = {}
        self.proxies: dict[str, ProxyEnergy] = {}
        self.profile_seconds = 0.0
        self.memory = SearchMemory(enabled=s.memory, extractor=extractor, context=ctx_key,
                                   journal=out_dir / "memory.jsonl" if extractor is not None else None)
        self.restored = 0
        self.halted: str | None = None
        """Why the programmer cannot go on (a PluginError): the search stops, keeping what it found."""
        self.propose_failed: str | None = None
        """The last error the programmer raised on one expansion (which then proposed nothing)."""
        self.builds: BuildPool | None = None
        self.standbys = False
        self.spare: NcuStandby | None = None
        """The next profile's standby ncu child (runner/standby.py)."""
        self.gating = False
        # Several GPUs: a batch is evaluated concurrently, one candidate per GPU; one GPU: in this process.
        # The schedule's own evaluation (no bar yet) serves the baseline and the base branch.
        self.schedule = Schedule(pool, self._pool_eval(), self.journal) if pool is not None and len(pool.gpus) > 1 else None
        self.head = Candidate(target.solution(head_checkout), None, "init", "the pull request's kernel")

    @property
    def baseline(self) -> Scored:
        """The pull request's kernel, evaluated: the run's first record."""
        return self.evaluated[0]

    def run(self) -> Result:
        self._start_children()
        baseline = self.record(self.head, self._measure(self.head))
        self._grow_warm(baseline.outcome)
        self.base_branch = self._measure_base_branch()
        if not baseline.outcome.passed:
            return self.finish(self._refused(baseline.outcome))
        self.tools = registry(self.settings.extra_tools)
        self.energy = self.energy.calibrated(
            self.settings.tie_noise or timing_noise(self.settings.gamma, _spreads(baseline.outcome)), self.tools)
        if self.device == "cuda":
            self._classify()
        self.restored = self.memory.restore()
        self.memory.key_files(self.target.files, self.target.entry_point)
        if self.head.key in self.analyses and not self.restored:
            self.memory.observe(0, baseline, None, self.analyses[self.head.key][1].findings)
        self.search()
        stop = self._stop_reason()
        winner, gates, energy = self.gate()
        versus = None
        if self.base_branch is not None and self.base_branch.outcome.passed and baseline.outcome.passed:
            versus = versus_base(self.target, self.head, self.base_branch.candidate, self.workloads, self.settings,
                                 self.schedule)
        if winner is not None:
            self.profile(winner.candidate)
        return self.finish(stop, winner, gates, energy, versus)

    def close(self) -> None:
        """However the run ended, no standby outlives it."""
        if self.spare is not None:
            self.spare.close()

    # -- the steps

    def record(self, cand: Candidate, outcome: Outcome) -> Scored:
        """One evaluation, in order: scored against the baseline, traced, reported to ``progress``."""
        speed = 1.0 if not self.evaluated else geomean_speedup(self.baseline.outcome, outcome, self.workloads)
        scored = Scored(cand, outcome, speed)
        self.evaluated.append(scored)
        self.prints.setdefault(fingerprint(cand.solution), cand.key)
        append_jsonl(self.trace_path, [t.to_json() for t in traces(self.target.definition, cand.solution,
                                                                   self.workloads, for_trace(outcome))])
        if outcome.passed:
            self.best = max(self.best, speed)
        if self.progress:
            self.progress(len(self.evaluated), self.budget, scored, self.best)
        return scored

    def evaluate(self, cand: Candidate) -> Scored | None:
        """The strategy's evaluate: None once the budget or the time is spent."""
        if len(self.evaluated) >= self.budget or self.clock() > self.deadline:
            return None
        before = self.best
        scored = self.record(cand, self._screened(cand))
        # Findings on each new best steer the next proposals; with energy active, a candidate as fast
        # as the best (within the noise) is profiled too, so the proxy can rank it against the best.
        if scored.outcome.passed and self.energy.profiles(scored.speedup, before):
            self.profile(cand)
        scored = self.evaluated[-1] = self.energy.scored(scored, self.proxies.get(self.head.key),
                                                         self.proxies.get(cand.key))
        parent = next((x for x in self.evaluated if x.candidate.key == cand.parent), None)
        found = self.analyses[cand.key][1].findings if cand.key in self.analyses else ()
        self.memory.observe(len(self.evaluated) - 1, scored, parent, found)
        return scored

    def profile(self, cand: Candidate) -> None:
        """Profile a candidate and run the tools over it (GPU, feedback on; once per candidate)."""
        if self.device != "cuda" or self.settings.feedback == "none" or cand.key in self.analyses:
            return
        # With several GPUs no candidate is timed while ncu replays kernels.
        with self.schedule.exclusive() if self.schedule is not None else contextlib.nullcontext():
            prof, secs = profile_candidate(self.target.definition, cand.solution, self.workloads, self.es,
                                           self.settings.profiling, self._recorded_timeline(cand.key),
                                           self._triton_cache(cand), self._next_standby())
        self._refill()
        self.profile_seconds += secs
        self._analyze(cand.key, prof, secs)

    def propose(self, parent: Scored, mode: str, n: int) -> list[Candidate]:
        """The strategy's propose: the programmer's new candidates, with the feedback on ``parent``."""
        if self.halted or len(self.evaluated) >= self.budget or self.clock() > self.deadline:
            return []  # nothing could be evaluated: spare the programmer (and an LLM's tokens) the call
        text, findings, prof = self._feedback(parent.candidate.key)
        try:
            cands = self._distinct(self.programmer.propose(parent, mode, n, self._context(
                feedback=text, findings=findings, profile=prof, memory=self.memory.render(),
                energy_notes=self._energy_notes(parent.candidate.key))))
            if self.builds is not None:
                new = [c for c in cands if self.journal.get(c.key) is None and self.rejection(c) is None]
                self.builds.submit([c.solution for c in new], [cache_root(self._triton_cache(c)) for c in new])
            if self.schedule is not None:
                self.schedule.submit([c for c in cands[: max(0, self.budget - len(self.evaluated))]
                                      if self.rejection(c) is None], self._pool_eval())
            return cands
        except PluginError as e:
            # Pointless to retry (bad key, unknown model): stop searching, keep what was found.
            self.halted = str(e)
            return []
        except Exception as e:  # noqa: BLE001 - one expansion fails, never the run and what it found
            # The programmer reads untrusted text (a model's answer, the pull request's source): whatever
            # it raised on one (RecursionError on a thousand '[', a red-team probe of session 27) costs
            # that expansion, and the stop reason says so if nothing was proposed at all.
            self.propose_failed = f"{type(e).__name__}: {e}"[:300]
            print(f"kernelpro: the programmer failed on one expansion ({self.propose_failed})", file=sys.stderr)
            return []

    def search(self) -> None:
        """The strategy's search, resumed from the journal of an earlier run of this context."""
        # CUDA candidates compile on every CPU core while the GPU measures the first of the batch.
        self.builds = BuildPool() if self.target.language == "cuda" and self.es.cache_dir is not None else None
        history = self._resume()
        try:
            get_strategy(self.settings.search)(self.baseline, self.propose, self.evaluate, self.settings.per_step,
                                               history)
        finally:
            if self.builds is not None:
                self.builds.close()

    def gate(self) -> tuple[GateResult | None, tuple[GateResult, ...], EnergyOutcome | None]:
        """The final gate over the best candidates in rank order: the winner, every attempt, the energy record."""
        s = self.settings
        # Active: the reward (speed, then the proxy within the noise) orders the gate; otherwise speed alone.
        # Only candidates at gamma or more in the search: the gate asks at least that of every workload,
        # and refusing one costs three fresh processes (~80 s for Liger's SwiGLU on the H200, where three
        # candidates at 1.01x took 240 s of a 403 s run; benchmarks/results-h200-session23).
        ranked = sorted((x for x in self.evaluated[1:] if x.outcome.passed and x.speedup >= s.gamma),
                        key=lambda x: -self.energy.rank(x))
        gates: list[GateResult] = []
        passing: list[GateResult] = []
        first_speed = 0.0
        stage1 = self.stage1
        floors = {b.uuid: b.floor_ms for b in stage1.workloads if b.floor_ms} if stage1 is not None else None
        if self.schedule is not None:
            self.schedule.drain()
        self.gating = True
        cool()  # the gate's children start from the plain fork server, as any fresh run's would
        if (unused := self._next_standby()) is not None:
            unused.close()  # nothing of ncu is left when the gate times and the meter measures energy
        guards = guard_shapes_for(self.target, self.device, s.guard_bytes) if ranked else ((), ())
        for x in ranked[: s.gate_top]:
            if passing and not self.energy.gates_also(x.speedup, first_speed):
                break  # active mode also gates the candidates as fast as the first winner, for the tie-break
            g = final_gate(self.target, self.head, x.candidate, self.workloads, s, floors, self.schedule, guards)
            gates.append(g)
            if g.passed:
                passing.append(g)
                first_speed = first_speed or x.speedup
        winner, energy = self.energy.decide(self.target, self.head.solution, passing, self.workloads, self.proxies)
        return winner, tuple(gates), energy

    def finish(self, stop: str, winner: GateResult | None = None, gates: tuple[GateResult, ...] = (),
               energy: EnergyOutcome | None = None, versus: BaseComparison | None = None) -> Result:
        """The Result, and the results directory's files."""
        target, out_dir, baseline = self.target, self.out_dir, self.baseline
        memory, programmer = tuple(self.memory.to_json()), usage(self.programmer, self.memory.extractor)
        result = Result(target, self.device, baseline, tuple(self.evaluated), winner, gates, self.base_branch, stop,
                        self.clock() - self.t0, self.resumed, self.journal.skipped_lines, self.stage1,
                        dict(self.analyses), self.profile_seconds, memory, energy, self.duplicates, versus,
                        dict(programmer))
        best = winner.candidate.solution if winner else baseline.candidate.solution
        (out_dir / "solution.json").write_text(dump_json(best.to_json()))
        # The definition and workloads beside the solution make the report's reproduction command work.
        (out_dir / "definition.json").write_text(dump_json(target.definition.to_json()))
        (out_dir / "workloads.jsonl").write_text(
            "".join(json.dumps(w.to_json()) + "\n" for w in target.workloads_for(self.device)))
        (out_dir / "baseline.json").write_text(dump_json(baseline.candidate.solution.to_json()))
        _trace_set(out_dir, target, [baseline, *self.evaluated])
        diff = patch(target, self.head_checkout, best) if winner else ""
        (out_dir / "patch.diff").write_text(diff)
        (out_dir / "result.json").write_text(dump_json(summary(result, self.settings)))
        (out_dir / "report.md").write_text(render_report(result, self.settings, diff))
        return result

    # -- evaluation

    def rejection(self, cand: Candidate) -> str | None:
        """Why the static check refuses a proposed candidate (runner/screen.py); the PR's own kernel is never
        screened, every programmer's candidate is, before it is built or run."""
        if cand.key not in self.rejections:
            self.rejections[cand.key] = screen_check(cand.solution, self.head.solution,
                                                     self.target.definition.reference, self.target.language)
        return self.rejections[cand.key]

    def _measure(self, cand: Candidate, may_profile: bool = True) -> Outcome:
        """The journal's outcome, else the pool's, else a sandboxed evaluation here (journaled)."""
        hit = self.journal.get(cand.key)
        if hit is not None:
            return hit.outcome
        if self.schedule is not None:
            # With nothing in flight (baseline, base branch) the first idle GPU is the home one.
            return self.schedule.result(cand)
        outcome = evaluate(self.target.definition, cand.solution, self.workloads, self.target.tolerance,
                           replace(self.es, cache_dir=self._triton_cache(cand), timeline=self.timelines and may_profile,
                                   timeline_bar=self._timeline_bar(), reference_ahead=True))
        self.journal.append(cand, outcome)
        return outcome

    def _screened(self, cand: Candidate) -> Outcome:
        why = self.rejection(cand)
        if why is None:
            outcome = self._measure(cand)  # journaled as measured: the rule is applied again on resume
            ran = delegated(outcome.torch_ops, self.baseline.outcome.torch_ops, self.target.language) \
                if outcome.passed else None
            return outcome if ran is None else refused(cand.solution, ran)
        hit = self.journal.get(cand.key)
        if hit is not None and hit.outcome.status == REJECTED:
            return hit.outcome
        outcome = rejected_outcome(cand.solution, why)
        self.journal.append(cand, outcome)
        return outcome

    def _triton_cache(self, cand: Candidate) -> Path:
        assert self.es.cache_dir is not None  # resolve() set it
        return cand.cache_dir(self.es.cache_dir)

    def _timeline_bar(self) -> tuple[float, tuple[tuple[str, float], ...]] | None:
        # Only a candidate the loop will profile needs its timeline (evaluate's rule: a new best, or
        # with energy active one within the noise of it); the baseline always is.
        if not self.evaluated:
            return None
        base = self.baseline.outcome
        return self.energy.timeline_bar(self.best), tuple((w.uuid, base.latency(w.uuid)) for w in self.workloads)

    def _pool_eval(self) -> TargetEval:
        # A batch's bar is the one of its proposal: a candidate that clears it but is beaten by
        # another of the same batch records a timeline it will not need, never the reverse.
        return TargetEval(self.target.definition, self.workloads, self.target.tolerance,
                          replace(self.es, timeline=self.timelines, timeline_bar=self._timeline_bar(), reference_ahead=True))

    def _measure_base_branch(self) -> Scored | None:
        if self.base_solution is None or self.base_solution.content_hash() == self.head.key:
            return None
        bc = Candidate(self.base_solution, None, "init", "the base branch's kernel")
        o = self._measure(bc, may_profile=False)
        append_jsonl(self.trace_path, [t.to_json() for t in traces(self.target.definition, bc.solution, self.workloads, o)])
        return Scored(bc, o, geomean_speedup(self.baseline.outcome, o, self.workloads))

    def _refused(self, outcome: Outcome) -> str:
        """The stop reason when the pull request's kernel fails its own evaluation."""
        if is_reference_failure(outcome.log):  # the judge failed, not the kernel it judges
            last = ([ln for ln in outcome.log.strip().splitlines() if ln.strip()] or [""])[-1].strip()
            return (f"configuration error, not the pull request's kernel: the definition's reference fails on a "
                    f"workload ({last[:300]}); correct `reference` in .kernelpro.yml")
        return f"the pull request's kernel fails verification ({outcome.status}); nothing to optimize"

    # -- the processes that start ahead of their use

    def _start_children(self) -> None:
        # The next profile's ncu child, started ahead so its start-up and imports overlap other work. Only
        # once the search's reference is in memory: the imports it preloads may be the pull request's own
        # package, which must not run while a reference child's outputs are on disk (computed here, before
        # the baseline's evaluation; the gate's come after the last standby is closed). With a pool, other
        # GPUs' workers compute theirs later, so no standby there. The first one imports while the baseline
        # is evaluated: started after it, the baseline's profile waited for Liger's 12 s of imports.
        t, es = self.target, self.es
        self.standbys = (self.device == "cuda" and self.settings.feedback != "none" and self.schedule is None
                         and reference_ready(t.definition, self.head.solution, self.workloads, t.tolerance, es))
        self._refill()
        # The target's warm fork server (runner/preload.py), like a standby only once the reference is in memory.
        if es.fork_server and es.warm_server and self.schedule is None and (
                self.standbys or reference_ready(t.definition, self.head.solution, self.workloads, t.tolerance, es)):
            start_warm(t.name, self.head.solution, es.context, self.device, blocked=(str(self.head_checkout),))

    def _grow_warm(self, outcome: Outcome) -> None:
        """The warm server also imports what the pull request's kernel's build imported besides its plan
        (runner/preload.py ``more``), before the base branch's evaluation, the profile and the search."""
        extra = more_preload(self.head.solution, self.es.context, outcome.imported) if outcome.passed else ()
        if extra:
            grow_warm(extra)

    def _refill(self) -> None:
        if self.standbys and not self.gating:
            self.spare = start_standby(self.head.solution, self.settings.profiling)

    def _next_standby(self) -> NcuStandby | None:
        taken, self.spare = self.spare, None
        return taken

    # -- profiles and what the programmer is shown

    def _classify(self) -> None:
        """Stage 1 (roofline) of the pull request's kernel, and its profile unless feedback is off (GPU)."""
        t, head = self.target, self.head
        dtypes = [x.dtype for x in (*t.definition.inputs.values(), *t.definition.outputs.values())]
        base_prof, secs = None, 0.0
        if self.settings.feedback != "none":
            base_prof, secs = profile_candidate(t.definition, head.solution, self.workloads, self.es,
                                                self.settings.profiling, self._recorded_timeline(head.key),
                                                self._triton_cache(head), self._next_standby())
            self._refill()
            self.profile_seconds += secs
        outcome = self.baseline.outcome
        self.stage1 = analyze_reference(
            t.definition, self.workloads, flops=t.flops, nbytes=t.bytes,
            ceilings=default_ceilings(str(outcome.environment.get("hardware", "")), dtypes),
            measured_ms={w.uuid: outcome.latency(w.uuid) for w in self.workloads}, profile=base_prof,
        )
        if base_prof is not None:
            self._analyze(head.key, base_prof, secs)

    def _analyze(self, key: str, prof: Profile, secs: float) -> None:
        """The tools' findings on a profile (and its energy proxy when energy is active), logged."""
        bottleneck = self.stage1.bottleneck if self.stage1 is not None else "unknown"
        stage1 = self.stage1
        scored = next((s for s in self.evaluated if s.candidate.key == key), None)
        if stage1 is not None and key != self.head.key and scored is not None and scored.outcome.passed:
            # A candidate's findings are capped by its own distance to the floor, not the PR kernel's.
            stage1 = stage1.measured_as({w.uuid: scored.outcome.latency(w.uuid) for w in self.workloads})
        analysis = run_tools(prof, bottleneck, self.tools, energy=self.energy.active, stage1=stage1)
        self.analyses[key] = (prof, analysis)
        if (e := self.energy.proxy(prof)) is not None:
            self.proxies[key] = e
        append_jsonl(self.out_dir / "profiles.jsonl", [{"key": key, "seconds": round(secs, 2), "stages": dict(prof.stages),
                                                       "notes": list(prof.notes), "findings": [f.to_json() for f in analysis.findings]}])

    def _recorded_timeline(self, key: str) -> Timeline | None:
        hit = self.journal.get(key)
        t = hit.outcome.timeline if hit is not None else None
        return Timeline(**{**t, "kernels": tuple(t.get("kernels", ()))}) if t and "error" not in t else None

    def _profiled(self, key: str | None) -> str | None:
        """``key`` when that candidate was profiled, else its nearest profiled ancestor's; None: none was."""
        by_key = {x.candidate.key: x.candidate for x in self.evaluated}
        while key is not None and key not in self.analyses:
            c = by_key.get(key)
            key = c.parent if c is not None else None
        return key

    def _feedback(self, key: str) -> tuple[str, tuple, Profile | None]:
        # The parent's own analysis, else its nearest profiled ancestor's.
        found = self._profiled(key)
        if found is None:
            return "", (), None
        prof, analysis = self.analyses[found]
        # Energy findings go to their own, subordinate prompt section (_energy_notes), not here.
        analysis = replace(analysis, findings=self.energy.feedback(analysis.findings))
        return render(analysis, prof, self.settings.feedback), analysis.findings, prof

    def _energy_notes(self, key: str) -> str:
        found = self._profiled(key)
        findings = self.analyses[found][1].findings if found is not None else ()
        return self.energy.notes(findings, self.proxies.get(found) if found else None, self.proxies.get(self.head.key))

    def _context(self, **shown: Any) -> Context:
        """What the programmer may know, with ``shown``: the feedback of this proposal."""
        s, baseline = self.settings, self.baseline
        return Context(target=self.target, seen=lambda k: any(x.candidate.key == k for x in self.evaluated),
                       device=self.device, gpu_name=str(baseline.outcome.environment.get("hardware", "")),
                       bottleneck=self.stage1.bottleneck if self.stage1 is not None else "unknown",
                       tool_mode=s.tool_mode if s.feedback == "tools" else "proactive", tools=self.tools,
                       energy=self.energy.active, gamma=s.gamma, stage1=self.stage1, baseline=baseline, **shown)

    def _distinct(self, cands: list[Candidate]) -> list[Candidate]:
        """Drop a proposal that builds the same code as an evaluated one, or as one before it in this
        batch, in another layout or with other comments (candidate.fingerprint): it would cost an
        evaluation and tell nothing new. Content-identical ones are left to the journal, as before."""
        out, batch = [], dict(self.prints)
        for c in cands:
            first = batch.setdefault(fingerprint(c.solution), c.key)
            if first != c.key:
                self.duplicates += 1
                continue
            out.append(c)
        return out

    # -- the end of the search

    def _resume(self) -> list[Scored]:
        """A resumed run rebuilds the search from its journal (parent links included) and goes on from there."""
        done = {self.head.key, self.base_branch.candidate.key if self.base_branch is not None else ""}
        history: list[Scored] = []
        for entry in self.journal:
            if entry.candidate.key not in done and len(self.evaluated) < self.budget:
                done.add(entry.candidate.key)
                parent = next((x for x in self.evaluated if x.candidate.key == entry.candidate.parent), None)
                # An entry the static check now refuses (a journal of an older kernelpro) does not count as run.
                why = self.rejection(entry.candidate)
                history.append(self.record(entry.candidate, entry.outcome if why is None else
                                           rejected_outcome(entry.candidate.solution, why)))
                if not self.restored:  # the model's entries came back from memory.jsonl: no need to ask again
                    self.memory.observe(len(self.evaluated) - 1, history[-1], parent)
        return history

    def _stop_reason(self) -> str:
        if self.halted:
            return f"the programmer failed: {self.halted}"
        if (used := usage(self.programmer)).get("all_failed"):
            return f"every request to the LLM endpoint failed: {used.get('last_error')}"
        if len(self.evaluated) < self.budget and self.clock() <= self.deadline:
            # The tuner says which construct hid the launch parameters when it found none (Tuner.silent).
            why = getattr(self.programmer, "silent", "") or (
                f"the programmer failed: {self.propose_failed}" if self.propose_failed else "")
            return f"{NOTHING_PROPOSED} ({why})" if why else NOTHING_PROPOSED
        if self.clock() > self.deadline:
            return f"time budget of {self.target.budget.minutes:g} min spent"
        return "budget spent"


def patch(target: Target, head_checkout: Path, solution: Solution) -> str:
    chunks: list[str] = []
    for src in solution.sources:
        try:  # from the commit, never through a link of the work tree
            old = read_source(head_checkout, src.path)
        except CheckoutError:
            old = ""
        if old != src.content:
            chunks.extend(difflib.unified_diff(old.splitlines(True), src.content.splitlines(True),
                                               f"a/{src.path}", f"b/{src.path}"))
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
