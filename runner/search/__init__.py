"""Search strategies: small functions over plain data, chosen by name from an explicit registry.

A strategy gets the evaluated baseline, a ``propose`` callable (the programmer), an ``evaluate``
callable (the sandboxed evaluator behind the journal), the candidates per expansion and the
``history`` of an earlier, interrupted run (journaled evaluations in order, with their parent links)
from which it rebuilds its state before proposing anything: a retry continues the same tree. It
returns when the budget is spent or nothing new can be proposed. Failures are values (reward -2 / -3),
never exceptions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..candidate import Candidate
from ..evaluator import Outcome

INCORRECT_REWARD = -2.0
CRASH_REWARD = -3.0


@dataclass(frozen=True)
class Scored:
    """An evaluated candidate."""

    candidate: Candidate
    """What was evaluated."""
    outcome: Outcome
    """What the evaluator found."""
    speedup: float
    """Geometric-mean speedup over the baseline across workloads; 0.0 when it failed."""
    energy_reduction: float | None = None
    """Baseline / candidate counter-based energy (runner.energy.proxy); None when not profiled."""
    energy_eps: float = 0.0
    """Weight of the energy term (0 unless energy is active); see runner.energy.energy_eps."""

    @property
    def reward(self) -> float:
        # The energy term (eps * ln(energy reduction)) belongs here, added to the speed term of a
        # passing candidate only, so failures keep their fixed penalties.
        if self.outcome.passed:
            # Lexicographic: eps is small enough that a speed difference outside the timing noise
            # always outweighs the (clamped) energy term.
            from ..energy import energy_term

            return math.log(max(self.speedup, 1e-9)) + energy_term(self.energy_eps, self.energy_reduction)
        if self.outcome.status.startswith("INCORRECT"):
            return INCORRECT_REWARD
        return CRASH_REWARD


# propose(parent, mode, n) -> up to n new candidates (never ones already evaluated)
Propose = Callable[[Scored, str, int], list[Candidate]]
# evaluate(candidate) -> Scored, or None when the budget is spent
Evaluate = Callable[[Candidate], "Scored | None"]
History = Sequence[Scored]


class Strategy(Protocol):
    def __call__(self, root: Scored, propose: Propose, evaluate: Evaluate, n: int, history: History = (), /) -> None:
        ...  # positional: strategies name their own parameters


def _strategies() -> dict[str, Strategy]:
    from .greedy import greedy
    from .mcts import mcts

    return {"greedy": greedy, "mcts": mcts}


STRATEGIES = ("mcts", "greedy")


def get_strategy(name: str) -> Strategy:
    table = _strategies()
    if name not in table:
        raise ValueError(f"unknown search strategy {name!r}; choose one of {', '.join(sorted(table))}")
    return table[name]
