"""The final gate and the base-branch comparison: candidates measured side by side with the PR's kernel.

The search ranks candidates on its own measurements; these checks re-measure after it, on fresh seeds
and with more timed calls, interleaving both sides so drift in clocks or load falls on each.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import scratch
from .basebranch import BaseComparison
from .basebranch import compare as compare_base
from .candidate import Candidate
from .energy import timing_noise
from .evaluator import EvalSettings, Outcome, evaluate
from .guard import GuardShape
from .guard import check as check_guards
from .pool import Schedule
from .result import GateResult, RunSettings
from .screen import REJECTED, delegated
from .target import Target
from .trace import Solution, Workload


def home_of(schedule: Schedule | None) -> Callable[..., Any]:
    """Runs fn(*args) on the pool's home GPU when there are several, here otherwise."""
    return schedule.home if schedule is not None else lambda fn, *a: fn(*a)


def interleaved(target: Target, a: Solution, b: Solution, workloads: tuple[Workload, ...], es: EvalSettings,
                 home: Callable[..., Outcome], prefix: str = "kernelpro-interleaved-") -> tuple[Outcome, Outcome, Outcome]:
    """a, b, a again: drift between evaluations (clocks, heat, load) falls on both sides. Each
    solution has a Triton cache of its own (``a``'s two runs share one; ``es.cache_dir`` is not
    used): in one cache ``b`` could plant files (a cuda_utils.so, a slower cubin) that ``a``'s
    second run loads."""
    with scratch.folder(f"{prefix}a-") as ca, scratch.folder(f"{prefix}b-") as cb:
        ea, eb = replace(es, cache_dir=Path(ca)), replace(es, cache_dir=Path(cb))
        first = home(evaluate, target.definition, a, workloads, target.tolerance, ea)
        other = home(evaluate, target.definition, b, workloads, target.tolerance, eb)
        return first, other, home(evaluate, target.definition, a, workloads, target.tolerance, ea)


def versus_base(target: Target, head: Candidate, base: Candidate, workloads: tuple[Workload, ...], s: RunSettings,
                schedule: Schedule | None) -> BaseComparison:
    """The PR's kernel against the base branch's, measured head, base, head after the search."""
    # The search's seeds (their reference outputs are cached) and more timed calls, as in the gate.
    es = replace(s.evaluation, reps=max(s.evaluation.reps, 50))
    return compare_base(*interleaved(target, head.solution, base.solution, workloads, es, home_of(schedule),
                                     "kernelpro-versus-"), workloads, s.gamma)


def gate(target: Target, base: Candidate, cand: Candidate, workloads: tuple[Workload, ...],
         s: RunSettings, floors: Mapping[str, float] | None = None, schedule: Schedule | None = None,
         guards: tuple[Sequence[GuardShape], Sequence[str]] = ((), ())) -> GateResult:
    """The final gate's verdict on ``cand`` against ``base``; ``floors`` are the roofline's lower bounds
    (ms per workload uuid), ``guards`` the guard shapes and their notes (runner/guard.py)."""
    # Fresh seeds and more trials than the search used; baseline and candidate re-measured now so
    # drift in clocks or load affects both (and on one GPU, the pool's home, when there are several).
    # Triton caches of the gate's own, one per solution (``interleaved``): a candidate of the search
    # could have planted a slower build of the baseline in the shared one, and the candidate here
    # must not plant anything the baseline's second run loads.
    home = home_of(schedule)  # every gate step on one GPU
    es = replace(s.evaluation, trials=s.gate_trials, seed=s.evaluation.seed + 7_777, reps=max(s.evaluation.reps, 50),
                 cache_dir=None)
    b, c, b2 = interleaved(target, base.solution, cand.solution, workloads, es, home, "kernelpro-gate-")
    if not b.passed or not b2.passed:
        failed = b if not b.passed else b2
        said = " ".join(failed.log.split())[-300:]  # one line: the report lists reasons as bullets
        return GateResult(cand, False, 0.0, (), f"baseline failed in the gate: {failed.status}: {said}")
    if not c.passed:
        return GateResult(cand, False, 0.0, (), f"{c.status} on more seeds: {c.log[:300]}")
    if (why := delegated(c.torch_ops, b.torch_ops + b2.torch_ops, target.language)) is not None:
        return GateResult(cand, False, 0.0, (), f"{REJECTED} in the gate: {why}")
    rows: list[dict[str, Any]] = []
    ok = True
    logs = []
    short: list[str] = []
    for w in workloads:
        bt = [r.timing for o in (b, b2) for r in o.results if r.uuid == w.uuid and r.timing]
        ct = next(r.timing for r in c.results if r.uuid == w.uuid and r.timing)
        # Interleaved B-C-B: the candidate must beat the slower-looking side of neither.
        b_med = min(t.median_ms for t in bt)
        sp = b_med / ct.median_ms
        lo = min(t.p10_ms for t in bt) / ct.p90_ms
        hi = max(t.p90_ms for t in bt) / ct.p10_ms
        # A speedup inside the baseline's own spread is not one: an A/A of a 7 us kernel of two PyTorch
        # launches measured 1.09x on a copy of itself (benchmarks/results-h200-session22). The margin
        # is the guard's and the search's tie (runner/energy/objective.timing_noise), per workload.
        need = timing_noise(s.gamma, [t.spread for t in bt])
        if sp < need:
            ok = False
            short.append(f"{w.uuid}: {sp:.3f}x, needs {need:.3f}x")
        logs.append(math.log(sp))
        rows.append({"uuid": w.uuid, "axes": dict(w.axes), "baseline_ms": b_med,
                     "baseline_p10_ms": min(t.p10_ms for t in bt), "baseline_p90_ms": max(t.p90_ms for t in bt),
                     "candidate_ms": ct.median_ms, "candidate_p10_ms": ct.p10_ms, "candidate_p90_ms": ct.p90_ms,
                     "speedup": sp, "speedup_low": lo, "speedup_high": hi, "needed": need, "n": ct.n,
                     "timing_mode": ct.mode})
    correctness = tuple({"uuid": r.uuid, **(r.correctness or {})} for r in c.results)
    speed = math.exp(sum(logs) / len(logs))
    reason = "passed" if ok else (f"not faster than {s.gamma:.2f}x, or the baseline's own timing spread (p90/p10) "
                                  f"where wider, on every workload: {'; '.join(short[:4])}"
                                  + (f" and {len(short) - 4} more" if len(short) > 4 else ""))
    guarded = None
    if ok and (guards[0] or guards[1]):  # shapes nobody listed must not get slower (runner/guard.py)
        guarded = check_guards(target, base.solution, cand, guards[0], es, home, s.gamma, guards[1])
        ok, reason = guarded.passed, guarded.reason
    mc = None
    if ok and es.device == "cuda" and s.memcheck:  # the slowest check, for a candidate that passed the rest
        from .memcheck import memcheck

        mc = home(memcheck, target.definition, cand.solution, workloads, replace(es, cache_dir=None), None,
                  s.sanitizer_tool)
        if mc.blocks:
            ok, reason = False, (f"compute-sanitizer memcheck found {mc.errors} error(s): {mc.detail[:300]}"
                                 if mc.status == "errors" else
                                 f"compute-sanitizer memcheck did not finish cleanly ({mc.detail[:300]}): refused")
    # Faster than physics allows means the measurement or the check was fooled: never publish it.
    impossible = [w.uuid for w, r in zip(workloads, rows, strict=True)
                  if floors and floors.get(w.uuid) and float(r["candidate_ms"]) < 0.9 * floors[w.uuid]]
    if impossible:
        ok, reason = False, f"faster than the roofline allows on {', '.join(impossible)}: flagged, not published"
    return GateResult(cand, ok, speed, tuple(rows), reason, correctness, None if mc is None else mc.to_json(),
                      None if guarded is None else guarded.to_json())
