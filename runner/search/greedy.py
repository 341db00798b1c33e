"""Greedy best-first search: always expand the best working candidate not yet expanded.

The ablation baseline of the paper: it climbs the nearest hill and stops on its top.
"""

from __future__ import annotations

from . import Evaluate, Propose, Scored


def greedy(root: Scored, propose: Propose, evaluate: Evaluate, n: int) -> None:
    pool: list[Scored] = [root]
    expanded: set[str] = set()
    while True:
        frontier = [s for s in pool if s.outcome.passed and s.candidate.key not in expanded]
        if not frontier:
            return
        best = max(frontier, key=lambda s: s.speedup)
        expanded.add(best.candidate.key)
        for cand in propose(best, "optimize", n):
            scored = evaluate(cand)
            if scored is None:
                return
            pool.append(scored)
