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

    def __init__(self, speed: dict[int, float], broken: set[int] = frozenset(),  # type: ignore[assignment]
                 seeds: tuple[int, ...] = (5, 10, 15)) -> None:
        self.speed, self.broken, self.seeds = speed, broken, seeds
        self.evaluated: list[int] = []
        self.modes: list[tuple[int, str]] = []

    def propose(self, parent: Scored, mode: str, n: int) -> list[Candidate]:
        x = int(parent.candidate.params.get("x", 0))
        self.modes.append((x, mode))
        steps = (1, -1, 2, -2) if mode != "init" else self.seeds
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
    # A local hill at 1-2, a valley of failures at 3-4, and the global optimum at 15, reachable only
    # through slower working points 5..13 (ROOT's only fresh seed is 5, itself slower than the
    # baseline). Greedy climbs the hill, repairs the valley, restarts and never builds on a slower
    # step; MCTS explores them and reaches the optimum.
    speed = {1: 1.5, 2: 1.6, 5: 0.5, 6: 0.55, 7: 0.6, 8: 0.7, 9: 0.8, 10: 0.9, 11: 1.0, 12: 1.1, 13: 1.2,
             14: 3.0, 15: 4.0, 16: 3.0}
    greedy_best = _run("greedy", Landscape(speed, broken={3, 4}, seeds=(5,)), budget=30)
    mcts_best = _run("mcts", Landscape(speed, broken={3, 4}, seeds=(5,)), budget=30)
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


def _scored(x: int, status: str, max_abs: float | None = None, timed_ms: float | None = None,
            parent: str | None = "p", mode: str = "debug") -> Scored:
    from kernelpro.runner.evaluator import Timing, WorkloadResult

    c = _cand(x, parent)
    c = Candidate(c.solution, parent, mode, c.note, c.params)
    results = []
    if timed_ms is not None:
        results.append(WorkloadResult("w0", "PASSED", timing=Timing(timed_ms, timed_ms, timed_ms, 0.0, 10)))
    if max_abs is not None:
        results.append(WorkloadResult("w1", status, correctness={"max_abs": max_abs}))
    return Scored(c, Outcome(c.key, status, tuple(results)), 0.0)


def test_greedy_repairs_the_failure_closest_to_correct_first() -> None:
    from kernelpro.runner.evaluator import Timing, WorkloadResult
    from kernelpro.runner.search.greedy import repair_priority

    base = _cand(0, None)
    root = Scored(base, Outcome(base.key, "PASSED", (WorkloadResult("w0", "PASSED", timing=Timing(2.0, 2.0, 2.0, 0, 9)),)),
                  1.0)
    compile_err = _scored(1, "COMPILE_ERROR")
    crash = _scored(2, "RUNTIME_ERROR")
    wrong_big = _scored(3, "INCORRECT_NUMERICAL", max_abs=1.0)
    wrong_small = _scored(4, "INCORRECT_NUMERICAL", max_abs=1e-3)
    wrong_small_fast = _scored(5, "INCORRECT_NUMERICAL", max_abs=1e-3, timed_ms=1.0)  # 2x on the workload it timed
    order = sorted([compile_err, crash, wrong_big, wrong_small, wrong_small_fast],
                   key=lambda s: repair_priority(s, root), reverse=True)
    assert [int(s.candidate.params["x"]) for s in order] == [5, 4, 3, 2, 1]


def test_greedy_repairs_in_priority_order_then_restarts_after_consecutive_failures() -> None:
    from kernelpro.runner.search.greedy import RESTART_AFTER

    base = _cand(0, None)
    root = Scored(base, Outcome(base.key, "PASSED", ()), 1.0)
    status = {1: "COMPILE_ERROR", 2: "INCORRECT_NUMERICAL"}
    calls: list[tuple[int, str]] = []
    evaluated: list[int] = []

    def propose(parent: Scored, mode: str, n: int) -> list[Candidate]:
        x = int(parent.candidate.params.get("x", 0))
        calls.append((x, mode))
        nxt = {(0, "optimize"): [1, 2], (2, "debug"): [3], (1, "debug"): [4], (0, "init"): [10, 11]}.get((x, mode), [])
        return [_cand(y, parent.candidate.key) for y in nxt if y not in evaluated][:n]

    def evaluate(c: Candidate) -> Scored | None:
        x = int(c.params["x"])
        evaluated.append(x)
        st = status.get(x, "PASSED" if x >= 10 else "RUNTIME_ERROR")
        return Scored(c, Outcome(c.key, st, ()), 1.2 if st == "PASSED" else 0.0)

    get_strategy("greedy")(root, propose, evaluate, 2)
    assert RESTART_AFTER == 4
    # 1, 2 fail and the best (0) has nothing more; the incorrect 2 is repaired before the compile
    # error 1, and its crashed repair 3 before 1 too; 4 fails as well: four failures in a row, so
    # greedy restarts from the baseline's fresh seeds and climbs from the best of them.
    assert calls[:7] == [(0, "optimize"), (0, "optimize"), (2, "debug"), (3, "debug"), (1, "debug"), (0, "init"),
                         (11, "optimize")]
    assert evaluated == [1, 2, 3, 4, 10, 11]


@pytest.mark.parametrize("name", ["greedy", "mcts"])
def test_a_resumed_search_continues_the_same_tree(name: str) -> None:
    speed = {1: 1.5, 2: 1.6, 5: 0.5, 6: 0.55, 7: 0.6, 8: 0.7, 9: 0.8, 10: 0.9, 11: 1.0, 12: 1.1, 13: 1.2,
             14: 3.0, 15: 4.0, 16: 3.0}
    base = _cand(0, None)
    root = Scored(base, Outcome(base.key, "PASSED", ()), 1.0)

    def run(budget: int, history: list[Scored]) -> tuple[Landscape, list[Scored]]:
        land = Landscape(speed, broken={3, 4}, seeds=(5,))
        land.evaluated = [0, *(int(s.candidate.params["x"]) for s in history)]
        out: list[Scored] = list(history)

        def evaluate(c: Candidate) -> Scored | None:
            if len(out) + 1 >= budget:
                return None
            s = land.evaluate(c)
            assert s is not None
            out.append(s)
            return s

        get_strategy(name)(root, land.propose, evaluate, 2, history)
        return land, out

    _, whole = run(30, [])
    _, first = run(9, [])
    land, resumed = run(30, first[:8])
    # Nothing evaluated twice, and the resumed run makes exactly the moves of the uninterrupted one.
    assert land.evaluated.count(int(first[0].candidate.params["x"])) == 1
    assert len(set(land.evaluated)) == len(land.evaluated)
    assert [s.candidate.key for s in resumed] == [s.candidate.key for s in whole]
