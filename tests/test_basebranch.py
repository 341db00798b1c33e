"""runner/basebranch.py: the PR's kernel against the base branch's, from an interleaved measurement."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import git
import pytest

from kernelpro.cli import main
from kernelpro.runner import gate as gate_mod
from kernelpro.runner import optimize as optimize_mod
from kernelpro.runner.basebranch import compare
from kernelpro.runner.evaluator import Outcome, Timing, WorkloadResult
from kernelpro.runner.trace import Workload

sys.path.insert(0, str(Path(__file__).parent))
from test_optimize import ADD_CONFIG  # noqa: E402  (the same one-file Triton target)

W = (Workload({"N": 1}, {}, "w1"), Workload({"N": 2}, {}, "w2"))


def _outcome(*ms: float, status: str = "PASSED") -> Outcome:
    rows = tuple(WorkloadResult(w.uuid, status, timing=Timing(m, 0.98 * m, 1.02 * m, 0.01 * m, 100, "events"))
                 for w, m in zip(W, ms, strict=True))
    return Outcome("h", status, rows)


def test_drift_between_evaluations_cancels() -> None:
    # The H200's cross-entropy pattern: the same head kernel got faster across the run. Taken alone,
    # head (first) against base (second) would read "the PR made it 1.10x slower".
    c = compare(_outcome(1.10, 2.20), _outcome(1.00, 2.00), _outcome(0.90, 1.80), W, 1.03)
    assert c.verdict == "on par"
    assert c.speedup == pytest.approx(0.99**0.5)
    assert c.head_drift == pytest.approx(0.2 / 0.9)
    assert c.per_workload[0]["head_medians_ms"] == [1.10, 0.90]
    assert c.low < c.speedup < c.high


def test_slower_and_faster_need_the_margin_on_every_workload() -> None:
    assert compare(_outcome(1.2, 2.4), _outcome(1.0, 2.0), _outcome(1.2, 2.4), W, 1.03).verdict == "slower"
    assert compare(_outcome(0.8, 1.6), _outcome(1.0, 2.0), _outcome(0.8, 1.6), W, 1.03).verdict == "faster"
    mixed = compare(_outcome(1.2, 1.6), _outcome(1.0, 2.0), _outcome(1.2, 1.6), W, 1.03)
    assert mixed.verdict == "on par" and mixed.to_json()["measured"] == "side by side: head, base, head"


def test_a_failed_side_is_not_compared() -> None:
    c = compare(_outcome(1.0, 2.0), _outcome(1.0, 2.0, status="RUNTIME_ERROR"), _outcome(1.0, 2.0), W, 1.03)
    assert (c.status, c.verdict, c.speedup) == ("RUNTIME_ERROR", "not compared", 0.0)
    c = compare(_outcome(1.0, 2.0), _outcome(1.0, 2.0), _outcome(1.0, 2.0, status="TIMEOUT"), W, 1.03)
    assert (c.status, c.verdict) == ("PASSED", "not compared")


def test_the_loop_measures_head_base_head_and_reports_that(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    repo = git.Repo.init(tmp_path / "r", initial_branch="main")
    root = Path(repo.working_dir)
    (root / ".kernelpro.yml").write_text(ADD_CONFIG)
    (root / "k.py").write_text("import torch\n\ndef add(a, b):\n    return a + b\n")
    repo.git.add(A=True)
    repo.index.commit("base")
    (root / "k.py").write_text("import torch\n\ndef add(a, b):\n    return torch.add(a, b)\n")
    repo.git.add(A=True)
    repo.index.commit("pull request")
    order: list[str] = []
    real = optimize_mod.evaluate

    def spy(definition, solution, *a, **k):  # type: ignore[no-untyped-def]
        order.append("head" if "torch.add" in solution.sources[0].content else "base")
        return real(definition, solution, *a, **k)

    monkeypatch.setattr(optimize_mod, "evaluate", spy)
    monkeypatch.setattr(gate_mod, "evaluate", spy)  # the side-by-side comparison
    # The reading the report shows for runs whose spread overlaps (CPU timings decide nothing here).
    from kernelpro.runner import basebranch

    monkeypatch.setattr(basebranch, "verdict", lambda *a, **k: "uncertain")
    out = tmp_path / "out"
    assert main(["optimize", "--repo", str(root), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out)]) == 0
    # The search's own evaluations (head, then base), then the side-by-side run at the end.
    assert order == ["head", "base", "head", "base", "head"]
    bb = json.loads((out / "add" / "result.json").read_text())["base_branch"]
    assert bb["status"] == "PASSED" and bb["verdict"] == "uncertain"
    assert bb["measured"] == "side by side: head, base, head"
    assert len(bb["per_workload"][0]["head_medians_ms"]) == 2 and bb["low"] <= bb["speedup_vs_head"] <= bb["high"]
    report = (out / "add" / "report.md").read_text()
    assert "measured side by side (head, base, head" in report
    assert ("the speed of the base branch's: no difference established (the medians differ by the margin, the "
            "runs' spread overlaps)") in report


def _timed(median: float, p10: float, p90: float) -> Outcome:
    return Outcome("h", "PASSED", (WorkloadResult("w1", "PASSED", timing=Timing(median, p10, p90, 0.0, 500, "events")),))


def test_medians_apart_with_overlapping_runs_establish_nothing() -> None:
    """Liger's RMSNorm on the H200 (benchmarks/results-h200-session26/liger_rms_norm.result.json): the PR
    edited a comment, and the side-by-side run read "4.01x faster" from the medians while the base's run
    was slow and spread (p10 0.089, p90 0.276 ms) and the head's p90 reached 0.195 ms. Beyond the margin
    in the medians, within the spread: 'uncertain', never 'faster'."""
    head = _timed(0.040144000202417374, 0.03840000182390213, 0.0521)
    head_again = _timed(0.054416000843048096, 0.0392, 0.19466879814863206)
    base = _timed(0.18745600432157516, 0.08899840041995048, 0.27571199238300326)
    c = compare(head, base, head_again, W[:1], 1.03)
    assert c.speedup == pytest.approx(0.2493, rel=1e-3) and c.high == pytest.approx(2.187, rel=1e-3)
    assert c.verdict == "uncertain"
    # The same medians with tight runs are a difference: 'faster'; and the mirror image 'slower'.
    assert compare(_timed(0.04, 0.039, 0.041), _timed(0.187, 0.18, 0.19), _timed(0.041, 0.04, 0.042), W[:1],
                   1.03).verdict == "faster"
    assert compare(_timed(0.187, 0.18, 0.19), _timed(0.04, 0.039, 0.041), _timed(0.19, 0.185, 0.2), W[:1],
                   1.03).verdict == "slower"
    assert compare(_timed(0.187, 0.03, 0.19), _timed(0.04, 0.039, 0.25), _timed(0.19, 0.185, 0.2), W[:1],
                   1.03).verdict == "uncertain"
