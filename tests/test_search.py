"""Search strategies on a synthetic landscape: no subprocess, no kernel, just plain data."""

from __future__ import annotations

import math

import pytest

from kernelpro.runner.candidate import Candidate
from kernelpro.runner.evaluator import Outcome
from kernelpro.runner.search import Scored, get_strategy
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile

SPEC = BuildSpec("python", ("cpu",), "k.py::f", destination_passing_style=False)


def _cand(x: int, parent: str | None) -> Candidate:
    sol = Solution(f"x{x}", "d", "test", SPEC, (SourceFile("k.py", f"X = {x}\n"),))
    return Candidate(sol, parent, "optimize", f"x={x}", {"x": x})


class Landscape:
    """Points 0..20 on a line; speedup by point; some points fail to compile."""

    def __init__(self, speed: dict[int, float], broken: set[int] = frozenset()):  # type: ignore[assignment]
        self.speed, self.broken = speed, broken
        self.evaluated: list[int] = []

    def propose(self, parent: Scored, mode: str, n: int) -> list[Candidate]:
        x = int(parent.candidate.params.get("x", 0))
        steps = (1, -1, 2, -2) if mode != "init" else (5, 10, 15)
        seen = set(self.evaluated)
        out = [_cand(x + s, parent.candidate.key) for s in steps if 0 <= x + s <= 20 and x + s not in seen]
        return out[:n]

    def evaluate(self, cand: Candidate) -> Scored | None:
        x = int(cand.params["x"])
        assert x not in self.evaluated, f"point {x} evaluated twice"
        self.evaluated.append(x)
        status = "COMPILE_ERROR" if x in self.broken else "PASSED"
        return Scored(cand, Outcome(cand.key, status, ()), 0.0 if x in self.broken else self.speed.get(x, 1.0))


def _run(name: str, land: Landscape, budget: int) -> float:
    base = _cand(0, None)
    root = Scored(base, Outcome(base.key, "PASSED", ()), 1.0)
    land.evaluated.append(0)
    results: list[Scored] = []

    def evaluate(c: Candidate) -> Scored | None:
        if len(land.evaluated) >= budget:
            return None
        s = land.evaluate(c)
        if s is not None:
            results.append(s)
        return s

    get_strategy(name)(root, land.propose, evaluate, 2)
    return max((s.speedup for s in results if s.outcome.passed), default=1.0)


@pytest.mark.parametrize("name", ["greedy", "mcts"])
def test_strategies_respect_budget_and_never_repeat(name: str) -> None:
    land = Landscape({x: 1.0 + 0.1 * x for x in range(21)})
    best = _run(name, land, budget=8)
    assert len(land.evaluated) == 8
    assert best > 1.0


@pytest.mark.parametrize("name", ["greedy", "mcts"])
def test_strategies_stop_when_nothing_is_left(name: str) -> None:
    land = Landscape({x: 1.0 for x in range(21)})
    _run(name, land, budget=1000)
    assert len(land.evaluated) <= 21


def test_mcts_crosses_a_valley_that_stops_greedy() -> None:
    # A local hill at 1-2, a valley of failures at 3-4, the global optimum at 15 (reachable from
    # ROOT's fresh seeds). Greedy climbs the hill and stops; MCTS re-expands ROOT.
    speed = {1: 1.5, 2: 1.6, 15: 4.0, 14: 3.0, 16: 3.0, 5: 0.5, 10: 0.9}
    greedy_best = _run("greedy", Landscape(speed, broken={3, 4}), budget=30)
    mcts_best = _run("mcts", Landscape(speed, broken={3, 4}), budget=30)
    assert greedy_best == pytest.approx(1.6)
    assert mcts_best == pytest.approx(4.0)


def test_rewards_follow_the_paper() -> None:
    c = _cand(1, None)
    assert Scored(c, Outcome(c.key, "PASSED", ()), 2.0).reward == pytest.approx(math.log(2.0))
    assert Scored(c, Outcome(c.key, "INCORRECT_NUMERICAL", ()), 0.0).reward == -2.0
    assert Scored(c, Outcome(c.key, "COMPILE_ERROR", ()), 0.0).reward == -3.0
    assert Scored(c, Outcome(c.key, "TIMEOUT", ()), 0.0).reward == -3.0


def test_unknown_strategy_names_the_choices() -> None:
    with pytest.raises(ValueError, match="choose one of greedy, mcts"):
        get_strategy("beam")


def test_tuner_puts_the_moves_findings_ask_for_first() -> None:
    from pathlib import Path

    from kernelpro.runner.programmers import Context
    from kernelpro.runner.programmers.tuner import Tuner
    from kernelpro.runner.target import Target
    from kernelpro.runner.tools import Finding

    src = (Path(__file__).parents[1] / "examples/demo/commit2/kernels/swiglu.py").read_text()
    sol = Solution("s", "d", "t", BuildSpec("triton", ("cuda",), "k.py::swiglu"), (SourceFile("k.py", src),))
    parent = Scored(Candidate(sol, None, "init", "base"), Outcome("k", "PASSED", ()), 1.0)
    target = Target("t", "triton", ("k.py",), "k.py::swiglu", None, ())  # type: ignore[arg-type]
    spills = Finding("register_spills", "high", "spills", {}, "too many live values", ("shrink the tile",))
    plain = Tuner().propose(parent, "optimize", 1, Context(target, lambda k: False, "cuda"))
    guided = Tuner().propose(parent, "optimize", 1, Context(target, lambda k: False, "cuda", findings=(spills,)))
    assert "BLOCK_SIZE 64->128" in plain[0].note  # no findings: grow the tile first
    assert "BLOCK_SIZE 64->32" in guided[0].note  # spills: shrink it first
