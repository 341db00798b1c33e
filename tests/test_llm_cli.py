"""`kernelpro optimize --programmer llm` end to end on the CPU (Triton interpreter), as users run it
(issue 21): the reward hacks are refused by the static check and the repair prompt says why, a dead
or refusing endpoint ends the run loudly, and the report names who wrote the candidates, counts the
work, and gives the exact command that reproduces the run."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_openai import API_KEY, FakeOpenAI, error

from kernelpro.cli import main, make_demo_repo

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")


def _llm_env(monkeypatch: pytest.MonkeyPatch, url: str, model: str = "fake-model") -> None:
    monkeypatch.setenv("KERNELPRO_LLM_BASE_URL", url)
    monkeypatch.setenv("KERNELPRO_LLM_MODEL", model)
    monkeypatch.setenv("KERNELPRO_LLM_API_KEY", API_KEY)


def _demo() -> Any:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import llm_demo
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return llm_demo


def test_the_demonstration_refuses_the_hacks_and_repairs_with_the_reason(tmp_path: Path) -> None:
    """benchmarks/llm_demo.py (the H200 demonstration) on the CPU: a torch-call answer, an os.environ
    answer and a compile error, then a correct rewrite as the repair of the rejected torch call."""
    r = _demo().run(tmp_path / "demo")
    assert r["rc"] == 0 and r["unexpected"] == [] and not r["api_key_in_prompts"]
    out = tmp_path / "demo" / "results" / "swiglu"
    result = json.loads((out / "result.json").read_text())
    assert result["statuses"] == {"PASSED": 2, "REJECTED_STATIC": 2, "COMPILE_ERROR": 1}
    reasons = {x["note"].split(":")[0]: x["reason"] for x in result["rejected"]}
    assert "calls torch.nn.functional.silu, which the reference uses" in reasons["Call PyTorch's fused SiLU"]
    assert "imports os" in reasons["Read the block size from the environment so it can be tuned per machine."]
    # the winner is the Triton rewrite; the patch keeps the kernel
    w = result["winner"]
    assert w is not None and w["note"].startswith("Keep the Triton kernel")
    assert w["lineage"][0].startswith("tried “Call PyTorch's fused SiLU")
    assert w["lineage"][0].endswith("refused (REJECTED_STATIC) and repaired in the next step")
    assert w["lineage"][1].startswith("Keep the Triton kernel") and not w["lineage"][1].endswith(".")
    report = (out / "report.md").read_text()
    assert "repaired in the next step; then Keep the Triton kernel" in report and "programs.." not in report
    patch = (out / "patch.diff").read_text()
    assert "-    BLOCK_SIZE = 64" in patch and "@triton.jit" not in patch and "silu" not in patch
    # the repair loop got the static check's reason
    prompts = r["prompts"]
    assert "was rejected without being run" in prompts[2] and "torch.nn.functional.silu" in prompts[2]
    # rejected candidates never ran: journaled as such, and in the trace as the schema allows
    journal = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    assert [e["outcome"]["status"] for e in journal].count("REJECTED_STATIC") == 2
    assert all(e["outcome"]["results"] == [] for e in journal if e["outcome"]["status"] == "REJECTED_STATIC")
    traces = [json.loads(line) for line in (out / "trace.jsonl").read_text().splitlines()]
    refused = [t for t in traces if "rejected by the static check" in t["evaluation"]["log"]]
    assert len(refused) == 2 * 2 and {t["evaluation"]["status"] for t in refused} == {"COMPILE_ERROR"}
    # the report names the programmer, the model and the host, counts the work, gives the command
    report = str(r["report"])
    p = result["programmer"]
    assert p["name"] == "llm" and p["model"] == "demo-model" and p["host"].startswith("127.0.0.1:")
    assert p["requests"] == len(prompts) and p["answered"] == p["requests"] and p["errors"] == 0
    assert p["tokens_in"] > 0 and p["tokens_out"] > 0
    assert f"| programmer | llm: model `demo-model` at {p['host']}; {p['requests']} requests ({p['requests']} answered, " \
           "0 failed), 0 retries" in report
    assert "REJECTED_STATIC: kernels/swiglu.py calls torch.nn.functional.silu" in report
    cmd = shlex.split(result["command"])
    assert cmd[:3] == ["KERNELPRO_DEVICE=cpu", f"KERNELPRO_LLM_BASE_URL=http://{p['host']}/v1",
                       "KERNELPRO_LLM_MODEL=demo-model"]
    assert cmd[3:5] == ["kernelpro", "optimize"] and cmd[cmd.index("--programmer") + 1] == "llm"
    assert f"| settings | `{result['command']}` |" in report and API_KEY not in result["command"]
    assert "programmer: llm, model: demo-model" in str(r["pr_body"])


def test_the_settings_row_reruns_the_same_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_demo_repo(tmp_path / "repo")
    first = tmp_path / "first"
    assert main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(first),
                 "--search", "greedy", "--budget", "3", "--memory", "off"]) == 0
    result = json.loads((first / "swiglu" / "result.json").read_text())
    words = shlex.split(result["command"])
    env = dict(w.split("=", 1) for w in words[: words.index("kernelpro")])
    args = words[words.index("kernelpro") + 1:]
    assert env == {"KERNELPRO_DEVICE": "cpu"} and args[args.index("--programmer") + 1] == "tuner"
    again = tmp_path / "again"
    args[args.index("--out") + 1] = str(again)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(args) == 0
    keys = [[json.loads(x)["key"] for x in (d / "swiglu" / "journal.jsonl").read_text().splitlines()]
            for d in (first, again)]
    assert keys[0] == keys[1] and len(keys[0]) == 3


def test_a_dead_endpoint_ends_the_run_before_the_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeOpenAI().start()
    url = fake.url
    fake.stop()
    repo = make_demo_repo(tmp_path / "repo")
    _llm_env(monkeypatch, url)
    rc = main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(tmp_path / "out"),
               "--programmer", "llm"])
    err = capsys.readouterr().err
    assert rc == 2 and not (tmp_path / "out" / "swiglu").exists()
    assert f"nothing answers at the LLM endpoint {url}" in err and "Fix: start the server" in err


def test_a_run_where_every_request_failed_exits_non_zero_with_cause_and_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The endpoint lists the model but refuses every chat request (400): that is not "no ideas"."""
    fake = FakeOpenAI(fallback=error(400, message="Unsupported value: 'messages' is malformed.")).start()
    repo = make_demo_repo(tmp_path / "repo")
    try:
        _llm_env(monkeypatch, fake.url)
        rc = main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(tmp_path / "out"),
                   "--programmer", "llm", "--search", "greedy", "--budget", "3", "--memory", "off",
                   "--tools", "reactive"])
    finally:
        fake.stop()
    out, err = capsys.readouterr()
    assert rc == 1
    assert "--tools reactive: there is no GPU, so no profile: the model is offered no profiling tool" in out
    assert "every request to the LLM endpoint failed" in err and "answered 400" in err and "Fix: check that" in err
    result = json.loads((tmp_path / "out" / "swiglu" / "result.json").read_text())
    p = result["programmer"]
    assert p["all_failed"] and p["requests"] == p["errors"] >= 1 and p["answered"] == 0
    assert result["stop_reason"].startswith("every request to the LLM endpoint failed")
    report = (tmp_path / "out" / "swiglu" / "report.md").read_text()
    assert "**Every request failed:**" in report and "offered no profiling tool in" in report


@pytest.mark.gpu
def test_the_demonstration_on_the_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same demonstration on the H200: real compiles, timings, Stage 1 and profiles in the prompts.
    KERNELPRO_ARTIFACTS receives the report and the PR body to quote."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU (run on the GPU machine)")
    monkeypatch.setenv("KERNELPRO_DEVICE", "cuda")
    r = _demo().run(tmp_path / "demo")
    print(r["report"], "\n\n=== PR body ===\n\n", r["pr_body"])
    if dest := os.environ.get("KERNELPRO_ARTIFACTS"):
        Path(dest).mkdir(parents=True, exist_ok=True)
        shutil.copy(tmp_path / "demo" / "results" / "swiglu" / "report.md", Path(dest) / "llm-demo-report.md")
        shutil.copy(tmp_path / "demo" / "pr_body.md", Path(dest) / "llm-demo-pr-body.md")
    assert r["rc"] == 0 and r["unexpected"] == []
    result = json.loads((tmp_path / "demo" / "results" / "swiglu" / "result.json").read_text())
    assert result["device"] == "cuda" and result["statuses"].get("REJECTED_STATIC") == 2
    assert result["statuses"].get("COMPILE_ERROR") == 1
    assert result["winner"] is not None and result["winner"]["note"].startswith("Keep the Triton kernel")
    first = r["prompts"][0]
    assert "## Stage 1: roofline of the pull request's kernel" in first and "Ceilings: " in first
    assert "## Automated Bottleneck Analysis" in first and "wgmma" not in first
    assert result["command"].startswith("KERNELPRO_DEVICE=cuda ")


def test_a_candidate_that_hands_the_work_to_torch_at_run_time_is_refused(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21's audit: the kernel kept behind a branch that never launches it, and SiLU called
    through a local name (`act = torch.nn.functional.silu`), passed the static check and was published
    as "verified 2690x". What its calls dispatched (aten::silu, aten::mul; the PR's kernel: neither)
    refuses it after it ran, with the reason the repair prompt gets; nothing is published."""
    demo = _demo()

    def answers(src: str) -> list[str]:
        hack = src.replace(
            "    _swiglu_kernel[grid](a, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)\n    return out\n",
            "    if n_elements < 0:\n        _swiglu_kernel[grid](a, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)\n"
            "    act = torch.nn.functional.silu\n    return act(a) * b\n")
        assert hack != src
        return [json.dumps({"candidates": [{"strategy": "Let the fused activation path handle small blocks.",
                                             "files": [{"path": demo.ENTRY, "content": hack}]}]})]

    monkeypatch.setattr(demo, "answers", answers)
    r = demo.run(tmp_path / "demo", budget=2)
    out = tmp_path / "demo" / "results" / "swiglu"
    result = json.loads((out / "result.json").read_text())
    assert r["rc"] == 0 and result["statuses"] == {"PASSED": 1, "REJECTED_STATIC": 1}, result["statuses"]
    assert result["winner"] is None and (out / "patch.diff").read_text() == ""
    (refused,) = result["rejected"]
    assert refused["reason"].startswith("rejected by the rules after it ran: ")
    assert "(aten::mul, aten::silu)" in refused["reason"] and "Triton kernels" in refused["reason"]
    assert "ran, then refused: its calls computed with PyTorch operators" in (out / "report.md").read_text()
    # its measurement stays in the journal (so a resumed run judges it again), with what it dispatched
    journal = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    assert "aten::silu" in journal[-1]["outcome"]["torch_ops"] and "aten::silu" not in journal[0]["outcome"]["torch_ops"]
