"""Writes docs/prompts.md: one real prompt of each kind the llm programmer sends, rendered by the code
that sends them (runner/programmers/llm.py), for the demo target (examples/demo).

    python docs/prompts.py            # rewrites docs/prompts.md

The inputs are recorded, not invented: the PR kernel's H200 timings are the README's demo row
(0.1856 ms at M=4096, 0.7202 ms at M=16384), its profile is the ncu and SASS recording of that kernel
on the H200 (tests/fixtures/h200/*_poor.*), the compile error's log is a real evaluation's
(tests/fixtures/candidate_tracebacks.json), and the rejection reason is runner/screen.py's verdict on
the torch-call answer of issue 21.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from kernelpro.runner.candidate import Candidate
from kernelpro.runner.config import load_config
from kernelpro.runner.evaluator import Outcome, Timing, WorkloadResult
from kernelpro.runner.evidence import Profile
from kernelpro.runner.evidence.ncu import parse_csv
from kernelpro.runner.evidence.sass import parse_sass
from kernelpro.runner.optimize import RunSettings
from kernelpro.runner.programmers import Context
from kernelpro.runner.programmers.llm import build_messages, toolbox
from kernelpro.runner.roofline import analyze_reference, default_ceilings
from kernelpro.runner.screen import check
from kernelpro.runner.screen import outcome as rejected
from kernelpro.runner.search import Scored
from kernelpro.runner.tools import registry, render, run_tools
from kernelpro.runner.trace import Solution, SourceFile

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "fixtures" / "h200"
GPU = "NVIDIA H200"
PR_MS = {4096: 0.1856, 16384: 0.7202}  # README, Performance, the demo's baseline on the H200
STEP_MS = {4096: 0.0529, 16384: 0.1885}  # README: the winner of the same run (for the optimize prompt)


def _scored(sol: Solution, target: Any, ms: dict[int, float] | None, status: str = "PASSED", log: str = "",
            parent: str | None = None, note: str = "the pull request's kernel", mode: str = "init") -> Scored:
    if ms is not None:
        results = tuple(WorkloadResult(w.uuid, "PASSED", timing=Timing(ms[w.axes["M"]], ms[w.axes["M"]] * 0.99,
                                                                         ms[w.axes["M"]] * 1.01, 0.0, 50))
                        for w in target.workloads)
        speed = (PR_MS[4096] / ms[4096] * PR_MS[16384] / ms[16384]) ** 0.5
    else:
        results, speed = (WorkloadResult(target.workloads[0].uuid, status, log=log),), 0.0
    outcome = Outcome(sol.content_hash(), status, results, environment={"hardware": GPU}, log=log)
    return Scored(Candidate(sol, parent, mode, note), outcome, speed)


def prompts() -> list[tuple[str, str, list[dict[str, Any]], list[dict[str, Any]]]]:
    """(title, what it shows, messages, tools) per kind."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)
        shutil.copytree(ROOT / "examples" / "demo" / "commit1", repo, dirs_exist_ok=True)
        shutil.copytree(ROOT / "examples" / "demo" / "commit2", repo, dirs_exist_ok=True)
        target = load_config(repo / ".kernelpro.yml").target("swiglu")
        base_sol = target.solution(repo)
    src = base_sol.sources[0].content
    entry = base_sol.sources[0].path

    def sol(content: str) -> Solution:
        return Solution(base_sol.name, base_sol.definition, "model", base_sol.spec, (SourceFile(entry, content),))

    baseline = _scored(base_sol, target, PR_MS)
    profile = Profile(tuple(parse_csv((H200 / "ncu_full_raw_poor.csv").read_text())),
                      parse_sass((H200 / "sass_poor.txt").read_text()))
    dtypes = [t.dtype for t in (*target.definition.inputs.values(), *target.definition.outputs.values())]
    stage1 = analyze_reference(target.definition, target.workloads, flops=target.flops, nbytes=target.bytes,
                               ceilings=default_ceilings(GPU, dtypes),
                               measured_ms={w.uuid: baseline.outcome.latency(w.uuid) for w in target.workloads},
                               profile=profile)
    analysis = run_tools(profile, stage1.bottleneck, registry())
    ctx = Context(target=target, seen=lambda k: False, device="cuda", gpu_name=GPU, bottleneck=stage1.bottleneck,
                  feedback=render(analysis, profile, "tools"), findings=analysis.findings, profile=profile,
                  gamma=RunSettings().gamma, stage1=stage1, baseline=baseline)

    faster = src.replace("BLOCK_SIZE = 64", "BLOCK_SIZE = 1024").replace("num_warps=8", "num_warps=4")
    step = _scored(sol(faster), target, STEP_MS, parent=baseline.candidate.key, mode="init",
                   note="1024-element blocks with 4 warps: 16-byte loads per thread")
    log = json.loads((ROOT / "tests" / "fixtures" / "candidate_tracebacks.json").read_text())["compile"]["log"]
    broken = _scored(sol(faster.replace("a * tl.sigmoid(a) * b", "a * tl.sigmoidd(a) * b")), target, None,
                     "COMPILE_ERROR", log, baseline.candidate.key, "fused sigmoid", "init")
    torch_call = sol(src.split("@triton.jit")[0] + "def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:\n"
                     "    return torch.nn.functional.silu(a) * b\n")
    why = check(torch_call, base_sol, target.definition.reference, target.language)
    assert why is not None
    refused = Scored(Candidate(torch_call, baseline.candidate.key, "init", "call PyTorch's fused SiLU"),
                     rejected(torch_call, why), 0.0)
    reactive = dataclasses.replace(ctx, tool_mode="reactive", feedback="")
    box = toolbox(reactive)
    return [
        ("The first request: fresh candidates from the pull request's kernel (`init`, proactive tools)",
         "The system prompt (rules, answer format, base strategies) and the first user prompt: the judge's "
         "tolerances and gate rule, the baseline's timings, Stage 1's roofline against the measured ceilings, "
         "the findings of the micro-profiling tools on the H200 profile, hardware notes filtered to an "
         "elementwise kernel, the definition and the code.",
         build_messages(baseline, "init", 4, ctx), []),
        ("Improving a working candidate (`optimize`)",
         "The candidate's own timings and speedup; the rest as above (the system prompt is the same and is left out).",
         build_messages(step, "optimize", 4, ctx)[1:], []),
        ("Repairing a candidate that failed (`debug`, a compile error)",
         "The log of a real evaluation, trimmed to the candidate's own frames (kernelpro's harness and the "
         "libraries folded, no path of the machine).",
         build_messages(broken, "debug", 1, ctx)[1:], []),
        ("Repairing a candidate the static check refused (`debug`, REJECTED_STATIC)",
         "The torch-call answer of issue 21 never ran; the repair prompt gives runner/screen.py's reason.",
         build_messages(refused, "debug", 1, ctx)[1:], []),
        ("Reactive tools (`--tools reactive`)",
         "No findings in the prompt; the tools whose evidence the profile holds are offered as functions "
         "(their definitions below the prompt), and the model calls the ones it wants.",
         build_messages(baseline, "init", 4, reactive)[1:], box.definitions() if box is not None else []),
    ]


def main() -> int:
    parts = ["# The prompts of the llm programmer", "",
             "Generated by `python docs/prompts.py` from the demo target (`examples/demo`) with the code that sends "
             "them (`runner/programmers/llm.py`, `templates/prompt_*.md.j2`); do not edit by hand. The inputs are "
             "recorded on the H200, not invented: see the script's docstring.", ""]
    for title, what, messages, tools in prompts():
        parts += [f"## {title}", "", what, ""]
        for m in messages:
            text = str(m["content"])
            # A fence longer than any run of backticks inside, so the prompt's own code blocks survive.
            fence = "`" * max(4, 1 + max((len(x) for x in re.findall(r"`+", text)), default=0))
            parts += [f"### {m['role']}", "", f"{fence}markdown", text.rstrip("\n"), fence, ""]
        if tools:
            parts += ["### tools (the request's `tools` array)", "", "```json", json.dumps(tools, indent=1), "```", ""]
    (Path(__file__).parent / "prompts.md").write_text("\n".join(parts))
    print(f"wrote {Path(__file__).parent / 'prompts.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
