"""The optimize output is a FlashInfer-Bench TraceSet, and `kernelpro evaluate --baseline` compares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_bot_artifact import demo_results


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_results(tmp_path_factory)


def test_flashinfer_bench_loads_every_solution_a_trace_names(demo: Path) -> None:
    from flashinfer_bench import TraceSet

    target = demo / "swiglu"
    ts = TraceSet.from_path(str(target))
    assert list(ts.definitions) == ["swiglu_f32_h4096"]
    traces = [t for ts_list in ts.traces.values() for t in ts_list]
    assert traces, "traces/ holds the run's evaluation traces"
    named = {t.solution for t in traces}
    assert named <= set(ts._solution_by_name), f"traces name solutions not written: {named - set(ts._solution_by_name)}"
    # The flat trace.jsonl (the report's) and traces/ hold the same lines.
    flat = [json.loads(x)["solution"] for x in (target / "trace.jsonl").read_text().splitlines() if x.strip()]
    assert sorted(flat) == sorted(t.solution for t in traces)
    # The baseline (the PR's kernel) is a solution of its own, for `kernelpro evaluate --baseline`.
    base = json.loads((target / "baseline.json").read_text())
    assert base["name"] in ts._solution_by_name


def test_evaluate_with_a_baseline_prints_baseline_candidate_and_speedup(demo: Path, tmp_path: Path) -> None:
    t = demo / "swiglu"
    env = {**os.environ, "KERNELPRO_DEVICE": "cpu", "KERNELPRO_PROGRESS": "0"}
    out = subprocess.run(
        [sys.executable, "-m", "kernelpro.cli", "evaluate", "--definition", str(t / "definition.json"),
         "--solution", str(t / "solution.json"), "--baseline", str(t / "baseline.json"),
         "--workloads", str(t / "workloads.jsonl"), "--out", str(tmp_path / "check.jsonl"), "--trials", "1"],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "baseline ms" in out.stdout and "candidate ms" in out.stdout and "speedup" in out.stdout
    rows = [line.split() for line in out.stdout.splitlines() if line.strip().endswith("x")]
    assert rows and all(float(r[-1].rstrip("x")) > 0 for r in rows)
    lines = (tmp_path / "check.jsonl").read_text().splitlines()
    assert len({json.loads(x)["solution"] for x in lines}) == 2  # both solutions' traces
