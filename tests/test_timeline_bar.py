"""The launch timeline is recorded only for candidates the loop will profile.

CUPTI's start-up cost 6.1 s of a candidate's 10.4 s on the H200 (benchmarks/results-h200-session6/),
and only the baseline and each new best are profiled. The parent hands each evaluation a bar (the best
speedup so far and the baseline's medians); the child applies the parent's own rule to its medians.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_resume import Landscape, _target

import kernelpro.runner.optimize as loop
from kernelpro.runner.evaluator import EvalSettings, Outcome, _request
from kernelpro.runner.harness import _reaches
from kernelpro.runner.optimize import RunSettings, optimize
from kernelpro.runner.programmers.tuner import Tuner
from kernelpro.runner.target import Tolerance


def _entry(uuid: str, ms: float | None) -> dict[str, Any]:
    return {"uuid": uuid, "status": "OUTPUTS", **({"timing": {"median_ms": ms}} if ms is not None else {})}


def test_the_child_applies_the_geometric_mean_rule() -> None:
    bar = {"speedup": 2.0, "baseline_ms": {"a": 4.0, "b": 1.0}}
    assert _reaches(None, [_entry("a", 9.0)])  # no bar: always (the baseline)
    assert _reaches(bar, [_entry("a", 1.0), _entry("b", 1.0)])  # 4x and 1x: geomean exactly 2
    assert not _reaches(bar, [_entry("a", 1.0), _entry("b", 1.1)])  # a little under 2
    assert not _reaches(bar, [_entry("a", 0.5), _entry("b", 4.0)])  # 8x on one cannot hide 0.25x on the other
    # A median the bar cannot judge records the timeline rather than lose it.
    assert _reaches(bar, [_entry("a", 4.0), _entry("c", 4.0)])
    assert _reaches(bar, [_entry("a", None)])
    assert _reaches(bar, [_entry("a", 0.0)])


def test_the_bar_reaches_the_child_in_its_request(tmp_path: Path) -> None:
    target = _target(tmp_path)
    sol = target.solution(tmp_path)
    w = target.workloads_for("cpu")
    es = EvalSettings(device="cpu", timeline=True, timeline_bar=(1.5, ((w[0].uuid, 0.25),)))
    req = _request(target.definition, sol, w, Tolerance(), es)
    assert req["timeline"] is True and req["timeline_bar"] == {"speedup": 1.5, "baseline_ms": {w[0].uuid: 0.25}}
    assert _request(target.definition, sol, w, Tolerance(), EvalSettings(device="cpu"))["timeline_bar"] is None


class BarLandscape(Landscape):
    """Also keeps each evaluation's timeline bar and the latency it returned."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Any, float]] = []

    def __call__(self, definition: Any, solution: Any, workloads: Any, tolerance: Any, settings: Any) -> Outcome:
        o = super().__call__(definition, solution, workloads, tolerance, settings)
        self.seen.append((settings.timeline_bar, o.results[0].timing.median_ms))  # type: ignore[union-attr]
        return o


@pytest.mark.parametrize("search", ["mcts", "greedy"])
def test_only_a_new_best_clears_the_bar(search: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    land = BarLandscape()
    monkeypatch.setattr(loop, "evaluate", land)
    target = _target(tmp_path)
    rs = RunSettings(search=search, budget=10, per_step=2, evaluation=EvalSettings(device="cpu"), gate_top=0)
    optimize(target, tmp_path, tmp_path / "out", Tuner(), rs)
    (bar0, base_ms), *rest = land.seen
    assert bar0 is None  # the baseline's is always recorded: it is always profiled
    assert rest, "the search evaluated nothing"
    best = 1.0
    cleared = []
    for bar, ms in rest:
        speed, medians = bar
        assert speed == pytest.approx(best) and dict(medians) == {target.workloads_for("cpu")[0].uuid: base_ms}
        got = _reaches({"speedup": speed, "baseline_ms": dict(medians)}, [_entry(medians[0][0], ms)])
        assert got == (base_ms / ms >= best)
        cleared.append(got)
        best = max(best, base_ms / ms)
    assert any(cleared) and not all(cleared), "the landscape should give both new bests and others"


class ThreadPool:
    """A Pool's interface with threads for GPUs, so the landscape replaces the evaluator in the workers."""

    def __init__(self, gpus: tuple[str, ...]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.gpus = gpus
        self._ex = [ThreadPoolExecutor(1) for _ in gpus]

    def submit(self, slot: int, fn: Any, *args: Any) -> Any:
        return self._ex[slot].submit(fn, *args)

    def restart(self, slot: int) -> None:
        raise AssertionError("no worker dies here")

    def close(self) -> None:
        for ex in self._ex:
            ex.shutdown()


def test_a_pools_batches_carry_the_bar_of_their_proposal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelpro.runner.pool as pool_mod

    land = BarLandscape()
    monkeypatch.setattr(pool_mod, "evaluate", land)
    target = _target(tmp_path)
    rs = RunSettings(search="greedy", budget=9, per_step=4, evaluation=EvalSettings(device="cpu"), gate_top=0)
    pool = ThreadPool(("gpu-a", "gpu-b"))
    try:
        optimize(target, tmp_path, tmp_path / "out", Tuner(), rs, pool=pool)  # type: ignore[arg-type]
    finally:
        pool.close()
    (bar0, base_ms), *rest = land.seen
    assert bar0 is None and rest
    bars = [bar for bar, _ in rest]
    assert all(bar is not None and dict(bar[1]) == {target.workloads_for("cpu")[0].uuid: base_ms} for bar in bars)
    # The bar rises with the best found, batch by batch (never above what the best was).
    assert bars[0][0] == pytest.approx(1.0) and max(b[0] for b in bars) > 1.0
    assert max(b[0] for b in bars) <= max(base_ms / ms for _, ms in rest) + 1e-9
