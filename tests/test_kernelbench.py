"""benchmarks/kernelbench.py on the CPU: problem conversion, the paper's scoring, the tuner and the LLM
paths end to end (the LLM through the local OpenAI-compatible fake)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType

import benchfile
import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBLEMS = ROOT / "benchmarks" / "kernelbench_problems"


def _load() -> ModuleType:
    return benchfile.load("benchmarks/kernelbench.py")


kb = _load()


@pytest.fixture(autouse=True)
def _cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")


def test_problems_convert_to_targets(tmp_path: Path) -> None:
    from kernelpro.runner.target import Budget

    files = sorted(PROBLEMS.glob("*.py"))
    assert len(files) == 4
    for f in files:
        p = kb.load_problem(f, tmp_path, "solution", False, Budget())
        d = p.target.definition
        assert d.reference.count("class Model(") == 1 and "def run(" in d.reference
        assert list(d.outputs) == ["out"] and all(a.type == "const" for a in d.axes.values())
        assert (p.checkout / "solution.py").read_text().count("class ModelNew(") == 1
        assert p.target.tolerance.atol == p.target.tolerance.rtol == 1e-2
    mm = kb.load_problem(PROBLEMS / "3_matmul.py", tmp_path, "reference", True, Budget())
    assert list(mm.target.definition.inputs) == ["A", "B"]
    assert [mm.target.definition.axes[a].value for a in mm.target.definition.outputs["out"].shape] == [32, 32]
    assert "ModelNew = Model" in (mm.checkout / "solution.py").read_text()


def test_the_converted_reference_and_solution_agree_in_the_sandbox(tmp_path: Path) -> None:
    """The real evaluator: seeded construction makes Model and ModelNew share their nn.Linear weights."""
    from kernelpro.runner.evaluator import EvalSettings, evaluate
    from kernelpro.runner.target import Budget

    p = kb.load_problem(PROBLEMS / "4_linear_bias_gelu.py", tmp_path, "solution", True, Budget())
    t = p.target
    o = evaluate(t.definition, t.solution(p.checkout), t.workloads, t.tolerance,
                 EvalSettings(device="cpu", time_reference=True))
    assert o.status == "PASSED", o.log
    assert o.results[0].reference_timing is not None and math.isfinite(kb._speedup_vs_reference(o))


def test_bad_problems_are_clear_errors(tmp_path: Path) -> None:
    from kernelpro.runner.target import Budget

    f = tmp_path / "bad.py"
    f.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    with pytest.raises(kb.ProblemError, match="defines no get_inputs, get_init_inputs"):
        kb.load_problem(f, tmp_path, "reference", False, Budget())
    f.write_text(f.read_text() + "def get_inputs():\n    return [torch.ones(2)]\n"
                 "def get_init_inputs():\n    return [torch.ones(1)]\n")
    with pytest.raises(kb.ProblemError, match="only plain values"):
        kb.load_problem(f, tmp_path, "reference", False, Budget())
    good = tmp_path / "2_softmax.py"  # a valid problem with no solutions/ beside it
    good.write_text((PROBLEMS / "2_softmax.py").read_text())
    with pytest.raises(kb.ProblemError, match="--start solution needs .*use --start reference"):
        kb.load_problem(good, tmp_path / "work", "solution", False, Budget())


def test_score_follows_the_paper_protocol() -> None:
    rows = [
        {"solved": True, "speedup": 100.0},  # an outlier: capped
        {"solved": True, "speedup": 0.5},  # slower than torch: counts as it is
        {"solved": False, "speedup": 0.0},  # unsolved: 1.0x in the geomean, never fast
        {"solved": True, "speedup": 1.6},
    ]
    s = kb.score(rows, 25.0)
    assert s["geomean"] == pytest.approx((25.0 * 0.5 * 1.0 * 1.6) ** 0.25)
    assert s["geomean_by_cap"]["none"] == pytest.approx((100.0 * 0.5 * 1.6) ** 0.25)
    assert s["geomean_by_cap"]["5"] == pytest.approx((5.0 * 0.5 * 1.6) ** 0.25)
    assert s["fast_p"] == {"0": 0.75, "1": 0.5, "1.5": 0.5, "2": 0.25}
    assert s["solved"] == 3 and s["tasks"] == 4


def test_tuner_run_writes_the_table_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = kb.main(["--problems", str(PROBLEMS / "1_scaled_relu.py"), "--budget", "2", "--search", "greedy",
                    "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "kernelbench.json").read_text())
    assert saved["aggregate"] == json.loads(json.dumps(data["aggregate"]))
    (row,) = saved["rows"]
    assert row["solved"] and row["start"] == "solution" and row["evaluations"] == 2
    out = capsys.readouterr().out
    assert "| 1_scaled_relu | solution (PASSED) | yes |" in out and "fast_1.5" in out


def test_llm_path_writes_modelnew_from_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fake_openai import API_KEY, FakeOpenAI, ok

    # What a model would answer: ModelNew in Triton (the bundled starting solution, wrapped the same way).
    src = (PROBLEMS / "solutions" / "1_scaled_relu.py").read_text()
    content = kb._source_with_wrapper(src, "ModelNew", "run", [2.5], ["x"])
    answer = {"candidates": [{"strategy": "triton elementwise kernel",
                              "files": [{"path": "solution.py", "content": content}]}]}
    fake = FakeOpenAI().start()
    try:
        fake.script(ok(json.dumps(answer)), ok(json.dumps({"candidates": []})))
        monkeypatch.setenv("KERNELPRO_LLM_BASE_URL", fake.url)
        monkeypatch.setenv("KERNELPRO_LLM_MODEL", "fake-model")
        monkeypatch.setenv("KERNELPRO_LLM_API_KEY", API_KEY)
        data = kb.main(["--problems", str(PROBLEMS / "1_scaled_relu.py"), "--programmer", "llm", "--budget", "2",
                        "--search", "greedy", "--out", str(tmp_path)])
    finally:
        fake.stop()
    (row,) = data["rows"]
    assert row["start"] == "reference" and row["start_status"] == "PASSED"
    assert row["statuses"] == {"PASSED": 2}
    # The prompt carried the problem (the model is asked to write ModelNew for Model).
    assert "ModelNew = Model" in fake.requests[0].text() and "torch.relu(x) * self.scale" in fake.requests[0].text()
    assert data["aggregate"]["tasks"] == 1 and data["aggregate"]["fast_p"]["0"] == 1.0
