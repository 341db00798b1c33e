"""The optimize loop's budgets and resumption, with the sandboxed evaluator replaced by a landscape.

The real evaluator is exercised end to end in test_optimize.py; here every evaluation is counted, so
the tests can say exactly what a rerun evaluates (nothing twice) and when the clock stops a search.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import kernelpro.runner.optimize as loop
from kernelpro.runner.config import parse_config
from kernelpro.runner.evaluator import EvalSettings, Outcome, Timing, WorkloadResult
from kernelpro.runner.optimize import RunSettings, optimize
from kernelpro.runner.programmers.tuner import Tuner
from kernelpro.runner.target import Budget, Target

KERNEL = (Path(__file__).parents[1] / "examples/demo/commit2/kernels/swiglu.py").read_text()
CONFIG = """
version: 1
targets:
  - name: swiglu
    files: ["k.py"]
    language: triton
    entry_point: k.py::swiglu
    definition:
      op_type: elementwise
      axes: {N: {type: var}}
      inputs: {a: {shape: [N], dtype: float32}, b: {shape: [N], dtype: float32}}
      outputs: {out: {shape: [N], dtype: float32}}
      reference: "import torch\\ndef run(a, b):\\n    return torch.nn.functional.silu(a) * b\\n"
    workloads: [{N: 4096}]
"""


def _target(tmp_path: Path) -> Target:
    (tmp_path / "k.py").write_text(KERNEL)
    return parse_config(CONFIG, ".kernelpro.yml", tmp_path).targets[0]


class Landscape:
    """Latency from the kernel's BLOCK_SIZE and num_warps; every call is counted."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, definition: Any, solution: Any, workloads: Any, tolerance: Any, settings: Any) -> Outcome:
        src = solution.sources[0].content
        self.calls.append(solution.content_hash())
        block = int(re.search(r"BLOCK_SIZE = (\d+)", src).group(1))  # type: ignore[union-attr]
        warps = int(re.search(r"num_warps=(\d+)", src).group(1))  # type: ignore[union-attr]
        ms = 1.0 / min(block, 1024) + 0.001 * abs(warps - 4)
        t = Timing(ms, ms, ms, 0.0, 10)
        ok = {"max_abs": 0.0, "max_rel": 0.0, "rel_l2": 0.0, "trials": settings.trials}
        return Outcome(solution.content_hash(), "PASSED",
                       tuple(WorkloadResult(w.uuid, "PASSED", correctness=ok, timing=t) for w in workloads))


@pytest.fixture
def land(monkeypatch: pytest.MonkeyPatch) -> Landscape:
    ls = Landscape()
    monkeypatch.setattr(loop, "evaluate", ls)
    return ls


def _settings(search: str, budget: int) -> RunSettings:
    return RunSettings(search=search, budget=budget, per_step=2, evaluation=EvalSettings(device="cpu"), gate_top=0)


@pytest.mark.parametrize("search", ["mcts", "greedy"])
def test_a_rerun_continues_the_tree_and_never_reevaluates(search: str, tmp_path: Path, land: Landscape) -> None:
    target = _target(tmp_path)
    whole = optimize(target, tmp_path, tmp_path / "whole", Tuner(), _settings(search, 12))
    first = optimize(target, tmp_path, tmp_path / "out", Tuner(), _settings(search, 5))
    calls_before = len(land.calls)
    resumed = optimize(target, tmp_path, tmp_path / "out", Tuner(), _settings(search, 12))
    new_calls = land.calls[calls_before:]
    assert resumed.journal_resumed == 5
    # Seven new evaluations, none of them one the first run made: it continued, it did not restart.
    assert len(new_calls) == 7
    assert not set(new_calls) & {s.candidate.key for s in first.evaluated}
    # And it made exactly the moves an uninterrupted run makes, parents included.
    assert [(s.candidate.key, s.candidate.parent) for s in resumed.evaluated] == \
        [(s.candidate.key, s.candidate.parent) for s in whole.evaluated]
    journal = [json.loads(x) for x in (tmp_path / "out" / "journal.jsonl").read_text().splitlines()]
    assert len(journal) == 12 and len({j["key"] for j in journal}) == 12


def test_a_finished_run_rerun_evaluates_nothing(tmp_path: Path, land: Landscape) -> None:
    target = _target(tmp_path)
    optimize(target, tmp_path, tmp_path / "out", Tuner(), _settings("mcts", 6))
    n = len(land.calls)
    again = optimize(target, tmp_path, tmp_path / "out", Tuner(), _settings("mcts", 6))
    assert len(land.calls) == n
    assert len(again.evaluated) == 6


def test_the_wall_time_budget_stops_the_search(tmp_path: Path, land: Landscape,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    target = replace(_target(tmp_path), budget=Budget(evaluations=50, minutes=2.0))
    now = [0.0]

    def clock() -> float:
        return now[0]

    def evaluate_and_wait(*a: Any) -> Outcome:
        now[0] += 45.0  # each evaluation takes 45 s of the 120 s budget
        return land(*a)

    monkeypatch.setattr(loop, "evaluate", evaluate_and_wait)
    result = optimize(target, tmp_path, tmp_path / "out", Tuner(), _settings("mcts", 50), clock=clock)
    # The baseline at 45 s, then 90 s, then 135 s: past the deadline, nothing more is started.
    assert len(result.evaluated) == 3
    assert result.stop_reason == "time budget of 2 min spent"
    assert json.loads((tmp_path / "out" / "result.json").read_text())["stop_reason"] == "time budget of 2 min spent"


def test_the_report_records_the_flags_of_the_run(tmp_path: Path, land: Landscape,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelpro.cli import main, make_demo_repo

    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    repo = make_demo_repo(tmp_path / "repo")
    out = tmp_path / "out"
    assert main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out),
                 "--budget", "4", "--search", "greedy", "--feedback", "raw", "--memory", "off",
                 "--candidates", "3"]) == 0
    result = json.loads((out / "swiglu" / "result.json").read_text())
    flags = ["--programmer tuner", "--search greedy", "--feedback raw", "--tools proactive", "--memory off",
             "--candidates 3"]
    assert result["flags"] == flags
    assert (result["search"], result["feedback"], result["memory_on"], result["candidates_per_expansion"]) == \
        ("greedy", "raw", False, 3)
    # The settings row is the whole command line (tests/test_llm_cli.py reruns it), flags included.
    assert f"| settings | `{result['command']}` |" in (out / "report.md").read_text()
    assert all(f in result["command"] for f in flags) and "--budget 4" in result["command"]
    # The first expansion of the baseline asked for three candidates.
    journal = [json.loads(x) for x in (out / "swiglu" / "journal.jsonl").read_text().splitlines()]
    assert len(journal) == 4 and all(j["candidate"]["parent"] == journal[0]["key"] for j in journal[1:])


def test_candidates_out_of_range_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from kernelpro.cli import main

    assert main(["optimize", "--repo", str(tmp_path), "--base", "a", "--head", "b", "--out", str(tmp_path / "o"),
                 "--candidates", "0"]) == 2
    assert "between 1 and 64" in capsys.readouterr().err
