"""Where the parent compares a candidate's outputs with the reference (EvalSettings.judge_on).

On the H200, host judging of the demo's 64M-element outputs was 97.6 s of a run's 112 s of child
time (benchmarks/results-h200-session9); a CUDA evaluation now compares on its GPU. A GPU that
refuses must never change a verdict: the judge moves to the host for good and says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpro.runner import evaluator
from kernelpro.runner.evaluator import (
    EvalSettings,
    _OutputJudge,
    _Placed,
    _placed,
    evaluate,
    judge_device,
)
from kernelpro.runner.target import Tolerance
from kernelpro.runner.trace import BuildSpec, Definition, Solution, SourceFile, Workload

torch = pytest.importorskip("torch")
CUDA = torch.cuda.is_available()


def test_the_judge_device_follows_the_setting_and_the_evaluation() -> None:
    assert judge_device("auto", "cpu") == "cpu"
    assert judge_device("cpu", "cuda") == "cpu"
    assert judge_device("auto", "cuda") == ("cuda" if CUDA else "cpu")
    with pytest.raises(ValueError, match="judge_on must be"):
        judge_device("gpu", "cuda")


@pytest.mark.skipif(CUDA, reason="the fallback needs a torch that cannot reach a GPU")
def test_a_gpu_that_refuses_moves_the_judge_to_the_host_for_good() -> None:
    judge = _OutputJudge.__new__(_OutputJudge)  # only the two fields _placed reads and writes
    judge.device, judge.fallback, judge.ref = "cuda", "", None
    got, want = [torch.ones(3)], [torch.ones(3)]
    placed = _placed(judge, got, want, None)
    assert placed[0] is got and placed[1] is want and placed[2] is None
    assert judge.device == "cpu" and judge.fallback.startswith("judged on the host: the GPU refused")


def test_the_references_device_copies_are_kept_within_their_budget() -> None:
    # 'meta' stands in for a GPU here: a copy there is a new tensor with a size and no data.
    kept = _Placed()
    a, b, c = torch.ones(256), torch.ones(256), torch.ones(512)  # 1 kB, 1 kB, 2 kB
    first = kept.get(a, "meta", budget=2048)
    assert first.device.type == "meta" and kept.get(a, "meta", budget=2048) is first and kept.hits == 1
    assert kept.get(b, "meta", budget=2048) is kept.get(b, "meta", budget=2048) and kept.hits == 2
    # Over the budget: copied for this comparison, not kept (the candidates' processes share the GPU).
    assert kept.get(c, "meta", budget=2048) is not kept.get(c, "meta", budget=2048) and kept.hits == 2
    assert kept.held == {"meta": 2048}
    # Per device: another GPU of a pool keeps copies of its own.
    assert kept.get(a, "meta:1", budget=2048) is not first
    # The host needs no copy, and none is counted.
    assert kept.get(a, "cpu", budget=2048) is a and "cpu" not in kept.held


def _double(device: str) -> tuple[Definition, Solution]:
    defn = Definition.from_json({
        "name": "double_f32", "op_type": "elementwise",
        "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 64}},
        "inputs": {"x": {"shape": ["M", "N"], "dtype": "float32"}},
        "outputs": {"y": {"shape": ["M", "N"], "dtype": "float32"}},
        "reference": "import torch\n\ndef run(x):\n    return x * 2\n",
    })
    src = "def run(x):\n    return x * 2\n"
    sol = Solution("double", defn.name, "test", BuildSpec("python", (device,), "k.py::run",
                                                          destination_passing_style=False), (SourceFile("k.py", src),))
    return defn, sol


def test_a_cpu_evaluation_is_judged_on_the_host(tmp_path: Path) -> None:
    defn, sol = _double("cpu")
    es = EvalSettings(device="cpu", trials=1, timeout_s=120, cache_dir=tmp_path / "cache")
    outcome = evaluate(defn, sol, [Workload.make(defn, {"M": 4})], Tolerance(), es)
    assert outcome.passed, outcome.log
    assert outcome.results[0].correctness["judged_on"] == "cpu"


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs an NVIDIA GPU (run on the GPU machine)")
def test_a_cuda_evaluation_is_judged_on_its_gpu_with_the_hosts_verdicts(tmp_path: Path) -> None:
    defn, sol = _double("cuda")
    wrong = Solution("half", defn.name, "test", sol.spec, (SourceFile("k.py", "def run(x):\n    return x * 2.001\n"),))
    verdicts = {}
    for on in ("auto", "cpu"):
        es = EvalSettings(device="cuda", trials=2, timeout_s=300, cache_dir=tmp_path / "cache", judge_on=on)
        good = evaluate(defn, sol, [Workload.make(defn, {"M": 4096})], Tolerance(), es)
        bad = evaluate(defn, wrong, [Workload.make(defn, {"M": 4096})], Tolerance(), es)
        assert good.passed, good.log
        assert good.results[0].correctness["judged_on"] == ("cuda" if on == "auto" else "cpu")
        hits = sum(r.placed.hits for r in evaluator._REFERENCES.values())
        # The wrong candidate was judged against the GPU copies the good one's judging left (and still failed).
        assert (hits > 0) == (on == "auto"), hits
        evaluator._REFERENCES.clear()
        verdicts[on] = (good.status, bad.status, bad.results[0].status)
    assert verdicts["auto"] == verdicts["cpu"] == ("PASSED", "INCORRECT_NUMERICAL", "INCORRECT_NUMERICAL")
