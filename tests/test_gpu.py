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


def test_nvml_energy_per_call_on_the_gpu(tmp_path):
    """The NVML protocol on the real device: an A/A pair of the Swish kernel in sandboxed arms."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import energy as bench

    from kernelpro.runner.energy import ChildRunner, EnergySettings, NvmlDevice, measure
    from kernelpro.runner.trace import Workload

    w = Workload.make(bench.DEFINITION, {"M": 16 * 1024 * 1024})
    reqs = {a: bench._request(bench.solution(f"swish-{a}", "fast"), w, "cuda") for a in ("a", "a2")}
    dev = NvmlDevice()
    runner = ChildRunner(reqs, timeout_s=300)
    try:
        m = measure(dev, runner, ["a", "a2"], EnergySettings(windows=3, warmup_s=1.0))
    finally:
        runner.close()
        dev.close()
    (tmp_path / "nvml_aa.json").write_text(json.dumps(m.to_json(), indent=2))
    _keep(tmp_path / "nvml_aa.json")
    assert 20 < m.idle_w < 400, m.idle_w
    for arm in ("a", "a2"):
        a = m.arms[arm]
        assert a.dynamic_mj.median > 0 and a.total_mj.median > a.dynamic_mj.median, a
        assert a.calls_per_window * a.ms_per_call / 1e3 >= 0.9  # windows of about 1 s or more
    assert abs(m.ratios["a2"].median - 1.0) < 0.05, m.ratios
    assert all(x.sm_clock_mhz and x.power_limit_w for x in m.windows)


def test_optimize_with_energy_passive_on_the_gpu(tmp_path, monkeypatch):
    """`kernelpro optimize --energy passive`: the winner's gate rows carry NVML energy per call."""
    from kernelpro.cli import make_demo_repo

    monkeypatch.setenv("KERNELPRO_DEVICE", "cuda")
    repo = make_demo_repo(tmp_path / "repo")
    out = tmp_path / "out"
    assert main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out),
                 "--budget", "4", "--feedback", "none", "--energy", "passive"]) == 0  # fmt: skip
    result = json.loads((out / "swiglu" / "result.json").read_text())
    _keep(out / "swiglu" / "result.json")
    energy = result["energy"]
    assert result["energy_mode"] == "passive" and energy["notes"] == [], energy["notes"]
    assert all(w["measurement"] is not None for w in energy["workloads"])
    if result["winner"]:
        row = result["winner"]["workloads"][0]
        assert row["baseline_energy_j"] > 0 and row["candidate_energy_j"] > 0 and row["energy_ratio"] > 0
    assert "## Energy (passive)" in (out / "swiglu" / "report.md").read_text()
