"""Greedy search, the paper's ablation (KernelPro, Appendix E).

Each iteration expands the current best working candidate (mode optimize) until the programmer has
nothing new for it. Failed candidates are then repaired (mode debug) in the paper's composite
priority: the furthest-along failure first (wrong output > crash at run time > compile error),
then the smaller numerical error, then the higher partial speedup (the workloads it did time). After
RESTART_AFTER consecutive failed evaluations, or when nothing is left to expand or repair, it
restarts from fresh seeds of the baseline (mode init). It climbs the nearest hill: a working but
slower candidate is never expanded, which is what MCTS's exploration adds.
"""

from __future__ import annotations

import math

from . import Evaluate, History, Propose, Scored

RESTART_AFTER = 4
"""Consecutive failed evaluations after which greedy restarts from the baseline."""

# Execution stage reached, higher is closer to correct.
_STAGE = {"COMPILE_ERROR": 0, "RUNTIME_ERROR": 1, "TIMEOUT": 1}
_INCORRECT_STAGE = 2


def _stage(status: str) -> int:
    return _INCORRECT_STAGE if status.startswith("INCORRECT") else _STAGE.get(status, 0)


def _max_error(s: Scored) -> float:
    errs = [float(r.correctness.get("max_abs", math.inf)) for r in s.outcome.results
            if r.correctness and r.status != "PASSED"]
    finite = [e for e in errs if math.isfinite(e)]
    return max(finite) if finite else math.inf


def _partial_speedup(s: Scored, root: Scored) -> float:
    """Geometric mean over the workloads the failed candidate did time before it failed."""
    logs = []
    for r in s.outcome.results:
        base = root.outcome.latency(r.uuid)
        if r.timing is not None and r.timing.median_ms > 0 and math.isfinite(base):
            logs.append(math.log(base / r.timing.median_ms))
    return math.exp(sum(logs) / len(logs)) if logs else 0.0


def repair_priority(s: Scored, root: Scored) -> tuple[float, float, float]:
    """Sort key, larger first: execution stage, smaller error, higher partial speedup."""
    return (_stage(s.outcome.status), -_max_error(s), _partial_speedup(s, root))


def greedy(root: Scored, propose: Propose, evaluate: Evaluate, n: int, history: History = ()) -> None:
    # One climb per start: the baseline's, then one per restart from fresh seeds. The best of the
    # whole run is whatever the caller saw evaluated; greedy only decides where to climb next.
    climb: list[Scored] = [root]
    exhausted: set[str] = set()  # nodes the programmer had nothing more for
    repaired = {s.candidate.parent for s in history if s.candidate.mode == "debug" and s.candidate.parent}
    failures = 0
    root_exhausted = False
    # Replay an interrupted run: the current climb starts at its last block of fresh seeds.
    inits = [i for i, s in enumerate(history) if s.candidate.mode == "init"]
    if inits:
        start = inits[-1]
        while start > 0 and history[start - 1].candidate.mode == "init":
            start -= 1
        climb = list(history[start:])
    else:
        climb = [root, *history]
    for s in history:
        failures = 0 if s.outcome.passed else failures + 1
    while True:
        working = [s for s in climb if s.outcome.passed]
        best = max(reversed(working), key=lambda s: s.speedup) if working else None  # ties: the most recent
        target: Scored | None = None
        mode = "init"
        if failures < RESTART_AFTER:
            if best is not None and best.candidate.key not in exhausted:
                target, mode = best, "optimize"
            else:
                broken = [s for s in climb if not s.outcome.passed and s.candidate.key not in repaired]
                if broken:
                    target, mode = max(broken, key=lambda s: repair_priority(s, root)), "debug"
                    repaired.add(target.candidate.key)
        if target is None:
            if root_exhausted:
                return
            # A fresh climb from new seeds; the baseline itself is not part of it.
            target, climb, failures = root, [], 0
        cands = propose(target, mode, n)
        if not cands:
            if mode == "init":
                root_exhausted = True
            exhausted.add(target.candidate.key)
            continue
        for cand in cands:
            scored = evaluate(cand)
            if scored is None:
                return
            climb.append(scored)
            failures = 0 if scored.outcome.passed else failures + 1
