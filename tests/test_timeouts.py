"""Timeouts that reach every child (issue 22): a target's `budget.timeout_s` is the limit of each
child of its run (the search, the final gate, memcheck, the base-branch comparison), profiling and
energy arms get a fixed multiple of it, and `--budget` below 1 is a usage error.

The run is the real optimize loop on a GPU-less machine with its children replaced by recorders
(the evaluator by tests/test_resume.py's landscape), so every limit a child would get is seen.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_resume import Landscape, _target

import kernelpro.runner.energy.meter as energy
import kernelpro.runner.gate as gate_mod
import kernelpro.runner.memcheck as memcheck_mod
import kernelpro.runner.optimize as loop
from kernelpro.cli import main
from kernelpro.runner.evaluator import EvalSettings, Outcome
from kernelpro.runner.evidence import Profile
from kernelpro.runner.optimize import RunSettings, optimize
from kernelpro.runner.programmers.tuner import Tuner
from kernelpro.runner.target import Budget

LIMIT = 300.0


class Recorder(Landscape):
    """The landscape, with the limit and the phase of every evaluation."""

    def __init__(self) -> None:
        super().__init__()
        self.limits: list[tuple[str, float]] = []

    def __call__(self, definition: Any, solution: Any, workloads: Any, tolerance: Any, settings: Any) -> Outcome:
        cache = str(settings.cache_dir or "")
        phase = "gate" if "kernelpro-gate-" in cache else "base" if "kernelpro-versus-" in cache else "search"
        self.limits.append((phase, settings.timeout_s))
        return super().__call__(definition, solution, workloads, tolerance, settings)


def test_a_targets_timeout_reaches_the_search_gate_memcheck_base_comparison_and_profiling(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = Recorder()
    monkeypatch.setattr(loop, "evaluate", rec)
    monkeypatch.setattr(gate_mod, "evaluate", rec)  # the gate and the base comparison
    seen: dict[str, list[float]] = {"memcheck": [], "profile": [], "standby": []}

    class Clean:
        blocks, status, errors, detail = False, "clean", 0, ""

        def to_json(self) -> dict[str, Any]:
            return {"status": "clean"}

    def memcheck(definition: Any, solution: Any, workloads: Any, es: EvalSettings, *a: Any) -> Clean:
        seen["memcheck"].append(es.timeout_s)
        return Clean()

    def profile(definition: Any, solution: Any, workloads: Any, es: EvalSettings, ps: Any, *a: Any) -> tuple[Profile, float]:
        seen["profile"].append(ps.timeout_s)
        return Profile(notes=("recorded by the test",)), 0.0

    def standby(solution: Any, ps: Any) -> None:
        seen["standby"].append(ps.timeout_s)

    monkeypatch.setattr(memcheck_mod, "memcheck", memcheck)
    monkeypatch.setattr(loop, "profile_candidate", profile)
    monkeypatch.setattr(loop, "start_standby", standby)
    target = _target(tmp_path)
    target = replace(target, budget=replace(target.budget, timeout_s=LIMIT))
    base = replace(target.solution(tmp_path), name="base-branch")
    base = replace(base, sources=(replace(base.sources[0], content=base.sources[0].content.replace("BLOCK_SIZE = ", "BLOCK_SIZE = 2 * ", 1)),))
    rs = RunSettings(search="greedy", budget=4, per_step=2, gate_top=1, evaluation=EvalSettings(device="cuda"))
    optimize(target, tmp_path, tmp_path / "out", Tuner(), rs, base_solution=base)
    by_phase: dict[str, set[float]] = {}
    for phase, limit in rec.limits:
        by_phase.setdefault(phase, set()).add(limit)
    assert by_phase == {"search": {LIMIT}, "gate": {LIMIT}, "base": {LIMIT}}, rec.limits  # each ran, with the target's limit
    assert seen["memcheck"] and set(seen["memcheck"]) == {LIMIT}, seen
    assert seen["profile"] and set(seen["profile"]) == {LIMIT * 1.5}, seen  # ncu replays: 1.5x, as 180 s of 120
    assert set(seen["standby"]) <= {LIMIT * 1.5}, seen


def test_a_targets_timeout_reaches_the_energy_arms(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    limits: list[float] = []

    def measure(definition: Any, solutions: Any, workloads: Any, device: str, s: Any, **kw: Any) -> tuple:
        limits.append(s.timeout_s)
        return ()

    monkeypatch.setattr(energy, "measure_solutions", measure)
    target = _target(tmp_path)
    target = replace(target, budget=Budget(evaluations=4, minutes=5, timeout_s=LIMIT))
    energy.nvml_meter("cuda")(target, {}, [])
    assert limits == [LIMIT * 2.5]  # an arm starts a build and warms up every workload: 300 s of 120


@pytest.mark.parametrize("command", ["optimize", "demo"])
@pytest.mark.parametrize("budget", ["0", "-3"])
def test_a_budget_below_one_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             command: str, budget: str) -> None:
    args = ["--repo", str(tmp_path), "--base", "HEAD~1", "--head", "HEAD"] if command == "optimize" else []
    rc = main([command, *args, "--out", str(tmp_path / "out"), "--budget", budget])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--budget {budget}" in err and "at least 1" in err, err
    assert not (tmp_path / "out").exists()  # refused before anything ran
