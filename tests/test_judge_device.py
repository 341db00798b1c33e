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



def test_a_kept_copy_dies_with_the_host_tensor_it_copies() -> None:
    # A refreshed reference keeps this object for its trials, while its spent checks die: a copy kept
    # under a dead tensor's id was served for the next tensor Python put at that address (200 of 200
    # such tensors got a stale copy before; on a GPU, a check of another seed).
    kept = _Placed()
    a = torch.ones(256)
    kept.get(a, "meta", budget=4096)
    assert kept.held == {"meta": 1024} and len(kept.copies) == 1
    dead = id(a)
    del a
    assert kept.copies == {} and kept.held == {"meta": 0}  # and its budget is free for the new checks
    for _ in range(1000):  # a tensor at the dead one's address (CPython reuses it at once, as a rule)
        b = torch.ones(128)
        if id(b) == dead:
            assert kept.get(b, "meta", budget=4096).shape == (128,) and kept.hits == 0
            break
        del b

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
    # The wait for the reference's outputs (computed for this first evaluation) is the parent's phase.
    assert outcome.phases["reference"] > 0


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



@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs an NVIDIA GPU (run on the GPU machine)")
def test_references_refreshed_every_candidate_judge_each_against_its_own_seeds(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Liger's SwiGLU (235 MB an output) has room for one candidate's secret seeds in POOL_BYTES, so each
    # candidate computes the reference again: the GPU copies of the spent checks must not be served
    # for the new ones (they were, from the third evaluation on, under a reused id).
    monkeypatch.setattr(evaluator, "POOL_BYTES", 1)  # one candidate's checks a reference
    defn, sol = _double("cuda")
    es = EvalSettings(device="cuda", trials=2, timeout_s=300, cache_dir=tmp_path / "cache")
    statuses = [evaluate(defn, sol, [Workload.make(defn, {"M": 4096})], Tolerance(), es).status for _ in range(5)]
    assert statuses == ["PASSED"] * 5
    (ref,) = evaluator._REFERENCES.values()
    live = {id(t) for group in (*ref.trials, *ref.checks) for outs in group for t in outs}
    assert {k for k, _ in ref.placed.copies} <= live
    evaluator._REFERENCES.clear()
