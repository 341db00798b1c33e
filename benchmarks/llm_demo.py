"""Demonstration: `kernelpro optimize --programmer llm` on the demo repository, as a user runs it,
against the loopback OpenAI-wire server (tests/fake_openai.py) scripted with what models answer:

1. the first expansion's answer: a torch-call "rewrite" (``return torch.nn.functional.silu(a) * b``,
   the kernel deleted), one that reads ``os.environ``, and a rewrite with a compile error
   (``tl.sigmoidd``); the static check refuses the first two without running them;
2. "nothing more" for the baseline, so the search repairs a broken candidate: the repair prompt
   carries the static check's reason;
3. the repair: a correct rewrite (1024-element blocks, 4 warps: 16-byte loads per thread);
then "nothing more" for every later request.

    python benchmarks/llm_demo.py --out OUT              # on the CPU here: Triton's interpreter
    KERNELPRO_DEVICE=cuda python benchmarks/llm_demo.py --out OUT    # on the H200

Prints the prompts' headings, report.md and the follow-up PR's body (bot/body.py from the results,
as the publish job renders it) and writes them under OUT. Greedy search and the memory off keep the
scripted answers in the order the loop asks for them (the memory's extraction asks the same server).
Exits with the CLI's status.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the loopback server lives with the tests

from fake_openai import API_KEY, FakeOpenAI, ok  # noqa: E402

from kernelpro import __version__  # noqa: E402
from kernelpro.cli import main as cli  # noqa: E402
from kernelpro.cli import make_demo_repo  # noqa: E402

MODEL = "demo-model"
ENTRY = "kernels/swiglu.py"


def answers(src: str) -> list[str]:
    """The scripted answers, each the JSON object the system prompt asks for."""
    torch_call = src.split("@triton.jit")[0] + (
        "def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
        "    return torch.nn.functional.silu(a) * b\n")
    environ = "import os\n" + src.replace("BLOCK_SIZE = 64", "BLOCK_SIZE = int(os.environ.get('SWIGLU_BLOCK', '1024'))")
    faster = src.replace("BLOCK_SIZE = 64", "BLOCK_SIZE = 1024").replace("num_warps=8", "num_warps=4")
    broken = faster.replace("a * tl.sigmoid(a) * b", "a * tl.sigmoidd(a) * b")
    assert len({src, torch_call, environ, faster, broken}) == 5

    def one(*cands: tuple[str, str]) -> str:
        return json.dumps({"candidates": [{"strategy": s, "files": [{"path": ENTRY, "content": c}]} for s, c in cands]})

    return [
        one(("Call PyTorch's fused SiLU: one library call instead of a hand-written kernel.", torch_call),
            ("Read the block size from the environment so it can be tuned per machine.", environ),
            ("1024-element blocks with 4 warps: each thread loads 16 bytes, and a fused sigmoid.", broken)),
        json.dumps({"candidates": []}),
        one(("Keep the Triton kernel; 1024-element blocks and 4 warps, so each thread issues 16-byte loads "
             "and the grid has 16x fewer programs.", faster)),
    ]


def pr_body(out: Path, head_sha: str) -> str:
    from kernelpro.bot.artifact import load_results
    from kernelpro.bot.body import render_body

    results = load_results(out, allowed_files={"swiglu": [ENTRY]})
    kw: dict[str, Any] = {"pr_number": 1, "head_sha": head_sha, "run_url": None, "kernelpro_version": __version__,
          "programmer": "llm", "model": MODEL}
    if "model_written" in inspect.signature(render_body).parameters:
        kw["model_written"] = [t.name for t in results.winners] if hasattr(results, "winners") else []
    return render_body(results, **kw)


def run(out: Path, budget: int = 6) -> dict[str, object]:
    """Runs the demonstration; returns what a test or the lead needs to read."""
    import git

    os.environ.setdefault("KERNELPRO_PROGRESS", "0")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kernelpro-llm-demo-") as tmp:
        repo = make_demo_repo(Path(tmp) / "demo-kernels")
        src = (repo / ENTRY).read_text()
        fake = FakeOpenAI(models=(MODEL,), fallback=ok(json.dumps({"candidates": []}))).start()
        saved = {k: os.environ.get(k) for k in ("KERNELPRO_LLM_BASE_URL", "KERNELPRO_LLM_MODEL", "KERNELPRO_LLM_API_KEY")}
        try:
            fake.script(*map(ok, answers(src)))
            os.environ.update({"KERNELPRO_LLM_BASE_URL": fake.url, "KERNELPRO_LLM_MODEL": MODEL,
                               "KERNELPRO_LLM_API_KEY": API_KEY})
            rc = cli(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out / "results"),
                      "--programmer", "llm", "--search", "greedy", "--memory", "off", "--budget", str(budget)])
            head = git.Repo(repo).head.commit.hexsha
        finally:
            fake.stop()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    report = (out / "results" / "report.md").read_text() if (out / "results" / "report.md").exists() else ""
    body = pr_body(out / "results", head) if rc == 0 else ""
    (out / "pr_body.md").write_text(body)
    prompts = [r.text() for r in fake.requests]
    (out / "requests.json").write_text(json.dumps([r.body for r in fake.requests], indent=1) + "\n")
    return {"rc": rc, "report": report, "pr_body": body, "prompts": prompts, "api_key_in_prompts":
            any(API_KEY in p for p in prompts), "unexpected": list(fake.unexpected)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="llm-demo-out", help="folder for the results, report.md and pr_body.md")
    p.add_argument("--budget", type=int, default=6, help="evaluations, baseline included (default 6)")
    args = p.parse_args(argv)
    r = run(Path(args.out), args.budget)
    prompts: list[str] = r["prompts"]  # type: ignore[assignment]
    for i, text in enumerate(prompts, 1):
        task = text.split("## Task\n", 1)[-1].split("\n")[0]
        print(f"request {i}: {task}")
    print("\n==================== report.md ====================\n")
    print(r["report"])
    print("\n==================== the follow-up PR's body ====================\n")
    print(r["pr_body"] or "(no PR: the run failed)")
    return int(r["rc"])  # type: ignore[call-overload]


if __name__ == "__main__":
    sys.exit(main())
