"""GPU tier: real Triton compiles and CUDA-event timings on an NVIDIA GPU (`pytest -m gpu`).

These never run in CI (no GPU there). KERNELPRO_ARTIFACTS, when set, receives the demo's report
and summary so a run on the GPU machine can be quoted.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kernelpro.cli import main

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (run on the GPU machine)"),
]

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"


def _keep(path: Path) -> None:
    dest = os.environ.get("KERNELPRO_ARTIFACTS")
    if dest:
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(dest) / path.name)


def test_demo_finds_a_verified_speedup_on_the_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNELPRO_DEVICE", "cuda")
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    target = summary["targets"][0]
    _keep(out / "report.md")
    _keep(out / "summary.json")
    assert target["device"] == "cuda" and target["gpu_timings"] is True
    assert "H" in target["hardware"] or "NVIDIA" in target["hardware"]
    winner = target["winner"]
    assert winner is not None, target["stop_reason"]
    assert winner["speedup"] >= winner["gamma"]
    # Every gate row beat the baseline, and the published patch changes only the kernel file.
    assert all(w["speedup"] >= winner["gamma"] for w in winner["workloads"])
    patch = (out / "patch.diff").read_text()
    assert patch.startswith("--- a/kernels/swiglu.py")
    report = (out / "report.md").read_text()
    assert "not GPU timings" not in report
    assert "| workload | baseline ms" in report
    # Stage 1 and Stage 2 ran on real counters: an elementwise fp32 kernel is memory-bound.
    assert target["stage1"]["theory"] == "memory"
    assert "## Stage 1: roofline" in report and "## Automated Bottleneck Analysis" in report
    profiles = [json.loads(x) for x in (out / "swiglu" / "profiles.jsonl").read_text().splitlines()]
    _keep(out / "swiglu" / "profiles.jsonl")
    assert profiles and not any("ncu" in n for p in profiles for n in p["notes"]), profiles[0]["notes"]


def _solution(tmp_path: Path, name: str, source: str) -> Path:
    sol = {
        "name": name, "definition": "swiglu_f32_h4096", "author": "test",
        "spec": {"language": "triton", "target_hardware": ["cuda"], "entry_point": "kernels/swiglu.py::swiglu",
                 "destination_passing_style": False},
        "sources": [{"path": "kernels/swiglu.py", "content": source}],
    }  # fmt: skip
    p = tmp_path / f"{name}.json"
    p.write_text(json.dumps(sol))
    return p


def test_evaluate_statuses_on_the_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELPRO_DEVICE", "cuda")
    src = (DEMO / "commit2" / "kernels" / "swiglu.py").read_text()
    wl = tmp_path / "w.jsonl"
    wl.write_text(json.dumps({"axes": {"M": 256}, "inputs": {"a": {"type": "random"}, "b": {"type": "random"}},
                              "uuid": "m256"}) + "\n")  # fmt: skip
    definition = str(DEMO / "commit1" / "definitions" / "swiglu.json")
    cases = [
        ("wrong", src.replace("a * tl.sigmoid(a) * b", "a * b"), "INCORRECT_NUMERICAL"),
        ("nocompile", src.replace("tl.sigmoid(a)", "tl.sigmoidd(a)"), "COMPILE_ERROR"),
        ("oob", src.replace("mask=mask)\n    b =", "mask=mask)\n    b =").replace(
            "tl.store(out_ptr + offsets, out, mask=mask)", "tl.store(out_ptr + offsets * 1000000, out)"), "RUNTIME_ERROR"),
        ("good", src, "PASSED"),
    ]  # fmt: skip
    out = tmp_path / "t.jsonl"
    for name, source, want in cases:
        before = len(out.read_text().splitlines()) if out.exists() else 0
        rc = main(["evaluate", "--definition", definition, "--solution", str(_solution(tmp_path, name, source)),
                   "--workloads", str(wl), "--out", str(out), "--timeout", "240"])  # fmt: skip
        assert rc == 0
        line = json.loads(out.read_text().splitlines()[before])
        assert line["evaluation"]["status"] == want, (name, line["evaluation"]["log"][-800:])
    last = json.loads(out.read_text().splitlines()[-1])
    assert last["evaluation"]["performance"]["latency_ms"] > 0
    assert last["evaluation"]["environment"]["hardware"].startswith("NVIDIA")


def test_profiling_one_candidate_collects_ncu_sass_and_timeline(tmp_path):
    from kernelpro.runner.evaluator import EvalSettings
    from kernelpro.runner.profiler import profile_candidate
    from kernelpro.runner.tools import run_tools
    from kernelpro.runner.trace import BuildSpec, Solution, SourceFile, Workload, load_definition

    d = load_definition(DEMO / "commit1" / "definitions" / "swiglu.json")
    src = (DEMO / "commit2" / "kernels" / "swiglu.py").read_text()
    sol = Solution("poor", d.name, "t", BuildSpec("triton", ("cuda",), "kernels/swiglu.py::swiglu",
                   destination_passing_style=False), (SourceFile("kernels/swiglu.py", src),))  # fmt: skip
    from kernelpro.runner.evaluator import evaluate
    from kernelpro.runner.profile import Timeline
    from kernelpro.runner.target import Tolerance

    w = [Workload.make(d, {"M": 4096})]
    es = EvalSettings(device="cuda", timeline=True)
    outcome = evaluate(d, sol, w, Tolerance(), es)  # the loop's evaluation also records the timeline
    assert outcome.passed and outcome.timeline and "error" not in outcome.timeline, outcome.timeline
    timeline = Timeline(**{**outcome.timeline, "kernels": tuple(outcome.timeline["kernels"])})
    assert timeline.launch_overhead_pct < 20, timeline  # one kernel per call: no launch-overhead finding
    prof, secs = profile_candidate(d, sol, w, es, timeline=timeline)
    Path(os.environ.get("KERNELPRO_ARTIFACTS", tmp_path)).mkdir(parents=True, exist_ok=True)
    Path(os.environ.get("KERNELPRO_ARTIFACTS", tmp_path), "profile_seconds.txt").write_text(f"{secs:.2f}\n")
    assert secs <= 15.0, secs
    assert prof.notes == (), prof.notes
    assert prof.main is not None and prof.main.name.startswith("_swiglu_kernel")
    assert prof.metric("launch__registers_per_thread") is not None
    assert prof.sass is not None and prof.sass.global_load_bits.get(128, 0) == 0  # 64-element blocks: scalar loads
    assert prof.timeline is not None and prof.timeline.kernel_launches >= 1
    analysis = run_tools(prof, "memory")
    assert analysis.ran, analysis.skipped


def test_reactive_tools_end_to_end_on_the_gpu(tmp_path, monkeypatch):
    """`--tools reactive` on the H200: the loop profiles the PR's kernel for real (ncu + SASS), the
    model (the loopback fake, real wire format) asks for one tool by function call and gets the live
    finding, and its candidate is verified and timed by the gate."""
    from fake_openai import API_KEY, FakeOpenAI, calls, ok

    from kernelpro.cli import make_demo_repo

    monkeypatch.setenv("KERNELPRO_DEVICE", "cuda")
    repo = make_demo_repo(tmp_path / "repo")
    src = (repo / "kernels/swiglu.py").read_text()
    faster = src.replace("BLOCK_SIZE = 64", "BLOCK_SIZE = 1024")
    answer = {"candidates": [{"strategy": "128-bit loads", "files": [{"path": "kernels/swiglu.py", "content": faster}]}]}
    fake = FakeOpenAI().start()
    try:
        fake.script(calls("vectorization"), ok(json.dumps(answer)))
        monkeypatch.setenv("KERNELPRO_LLM_BASE_URL", fake.url)
        monkeypatch.setenv("KERNELPRO_LLM_MODEL", "fake-model")
        monkeypatch.setenv("KERNELPRO_LLM_API_KEY", API_KEY)
        out = tmp_path / "out"
        rc = main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out),
                   "--programmer", "llm", "--search", "greedy", "--budget", "2", "--tools", "reactive"])  # fmt: skip
    finally:
        fake.stop()
    assert rc == 0
    first, second = fake.requests
    assert "vectorization" in first.tool_names
    (tool_msg,) = second.tool_messages
    assert "(vectorization, ncu)" in tool_msg["content"] and "load_width_bits = 32" in tool_msg["content"]
    result = json.loads((out / "swiglu" / "result.json").read_text())
    _keep(out / "swiglu" / "report.md")
    assert result["winner"] is not None, result.get("stop_reason")
    assert result["winner"]["params"]["tools_called"] == ["vectorization"]
    assert "reactive" in (out / "swiglu" / "report.md").read_text()
    fake.check()


# --------------------------------------------------------------------------- the evaluator as a boundary


def _gpu_settings(tmp_path, **kw):
    from dataclasses import replace

    from kernelpro.runner.evaluator import EvalSettings

    return replace(EvalSettings(device="cuda", trials=5, timeout_s=240, memory_limit_mb=4096,
                                cache_dir=tmp_path / "cache"), **kw)  # fmt: skip


def _judge_gpu(tmp_path, name, source, dps=False, **kw):
    from test_adversarial import LOADS, SWIGLU, candidate

    from kernelpro.runner.evaluator import evaluate
    from kernelpro.runner.target import Tolerance

    return evaluate(SWIGLU, candidate(name, source, dps), LOADS, Tolerance(), _gpu_settings(tmp_path, **kw))


def test_adversarial_candidates_are_rejected_on_the_gpu(tmp_path):
    """Every CPU-tested hostile candidate, now on CUDA tensors (CUDA events, the caching allocator)."""
    from test_adversarial import PY_TORCH, SIMPLE, fixture

    honest = _judge_gpu(tmp_path, "honest", PY_TORCH)
    assert honest.passed, honest.log
    sandbox = honest.environment["sandbox"]
    Path(os.environ.get("KERNELPRO_ARTIFACTS", tmp_path)).mkdir(parents=True, exist_ok=True)
    Path(os.environ.get("KERNELPRO_ARTIFACTS", tmp_path), "sandbox.json").write_text(json.dumps(sandbox, indent=1))
    assert "resident-memory watchdog" in sandbox["memory"], sandbox
    wrong = {}
    for name in SIMPLE:
        source, expect, dps = fixture(name)
        outcome = _judge_gpu(tmp_path, name, source, dps)
        if outcome.status != expect:
            wrong[name] = (outcome.status, outcome.log[-600:])
    assert not wrong, wrong
    after = _judge_gpu(tmp_path, "honest-again", PY_TORCH + "\n# after the crashes\n")
    assert after.passed, after.log  # the GPU is healthy for the next candidate


SIDE_STREAM = """
import torch

_side = None


def run(a, b):
    # Launches the work on a side stream and returns without making the caller's stream wait:
    # events recorded on the caller's stream time nothing.
    global _side
    _side = _side or torch.cuda.Stream()
    out = torch.empty_like(a)
    _side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(_side):
        torch.cuda._sleep(5_000_000)
        out.copy_(torch.nn.functional.silu(a) * b)
    return out
"""

PATCH_EVENT = """
import torch

_real = torch.cuda.Event.elapsed_time


def run(a, b):
    torch.cuda.Event.elapsed_time = lambda self, end: _real(self, end) / 100
    return torch.nn.functional.silu(a) * b
"""

OOB = """
import torch
import triton
import triton.language as tl


@triton.jit
def _k(a_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs * 100000000, tl.load(a_ptr + offs, mask=offs < n))


def run(a, b):
    out = torch.empty_like(a)
    _k[(triton.cdiv(a.numel(), 256),)](a, out, a.numel(), BLOCK=256)
    return out
"""


def test_side_stream_work_is_not_rewarded(tmp_path):
    outcome = _judge_gpu(tmp_path, "side-stream", SIDE_STREAM)
    assert outcome.status == "INCORRECT_NUMERICAL", outcome.log[-800:]


def test_patched_cuda_event_timer_is_rejected(tmp_path):
    outcome = _judge_gpu(tmp_path, "patch-event", PATCH_EVENT)
    assert outcome.status == "RUNTIME_ERROR" and "elapsed_time" in outcome.log, outcome.log[-800:]


def test_illegal_memory_access_ends_only_that_candidate(tmp_path):
    from test_adversarial import PY_TORCH

    crash = _judge_gpu(tmp_path, "oob", OOB)
    assert crash.status == "RUNTIME_ERROR", crash.log[-800:]
    after = _judge_gpu(tmp_path, "after-oob", PY_TORCH)
    assert after.passed, after.log
