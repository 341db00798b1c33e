"""Benchmark: where the time of one optimize run goes, per candidate and per stage.

    python benchmarks/overhead.py [--budget N] [--programmer tuner|llm] [--search mcts|greedy] [--out DIR]

Runs the bundled demo (examples/demo: SwiGLU with a poor launch configuration) through the real
loop, then reads what the loop wrote (journal.jsonl: each evaluation's child wall time, start-up,
build, verify and timing phases; profiles.jsonl: profiling time) and adds the one thing the loop
does not record, the programmer's time (an LLM call; near 0 for the tuner), measured around
``propose``. Prints two markdown tables and writes DIR/overhead.json.

Stages of one candidate (all inside its sandboxed child except "programmer" and "profile"):
spawn = child wall time not inside any phase (fork or interpreter start, request/result I/O, exit);
startup = imports (torch, triton) and CUDA init; build = importing/compiling the candidate;
verify = correctness trials; time = timed calls; timeline = the launch timeline recorded after
timing (torch.profiler: CUPTI's start-up). On the CPU (Triton interpreter) the proportions are
not the GPU's: run it on the GPU machine for the real table (about 2 minutes with the default budget).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.cli import make_demo_repo
from kernelpro.runner.config import load_config
from kernelpro.runner.evaluator import EvalSettings
from kernelpro.runner.optimize import RunSettings, optimize
from kernelpro.runner.programmers import Context, Programmer
from kernelpro.runner.programmers import load as load_programmer
from kernelpro.runner.search import Scored
from kernelpro.settings import Settings

STAGES = ("spawn", "startup", "build", "verify", "time", "timeline")


@dataclass
class TimedProgrammer:
    """Delegates to a programmer and keeps the seconds each ``propose`` took."""

    inner: Programmer
    seconds: list[float] = field(default_factory=list)
    proposed: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.inner.name

    def propose(self, parent: Scored, mode: str, n: int, context: Context) -> list[Any]:
        t0 = time.perf_counter()
        try:
            out = self.inner.propose(parent, mode, n, context)
        finally:
            self.seconds.append(time.perf_counter() - t0)
        self.proposed.append(len(out))
        return out


def candidate_stages(outcome: dict[str, Any]) -> dict[str, float]:
    """Seconds by stage of one journaled evaluation."""
    phases = outcome.get("phases") or {}
    inside = {"startup": float(phases.get("startup", 0.0)), "build": float(outcome.get("build_seconds", 0.0)),
              "verify": float(phases.get("verify", 0.0)), "time": float(phases.get("time", 0.0)),
              "timeline": float(phases.get("timeline", 0.0))}
    wall = float(outcome.get("wall_seconds", 0.0))
    return {"spawn": max(0.0, wall - sum(inside.values())), **inside, "wall": wall}


def analyze(out_dir: Path, run_seconds: float, programmer: TimedProgrammer) -> dict[str, Any]:
    """The tables' data from one finished run's directory."""
    journal = [json.loads(x) for x in (out_dir / "journal.jsonl").read_text().splitlines() if x.strip()]
    result = json.loads((out_dir / "result.json").read_text())
    profiles_file = out_dir / "profiles.jsonl"
    profiles = [json.loads(x) for x in profiles_file.read_text().splitlines()] if profiles_file.exists() else []
    per = [{"index": e["index"], "status": e["outcome"]["status"], **candidate_stages(e["outcome"])}
           for e in sorted(journal, key=lambda e: e["index"])]
    n = len(per)
    llm_per_candidate = sum(programmer.seconds) / max(sum(programmer.proposed), 1)
    by_stage = {s: {"mean_s": statistics.fmean(p[s] for p in per) if per else 0.0,
                    "median_s": statistics.median(p[s] for p in per) if per else 0.0} for s in (*STAGES, "wall")}
    by_stage["programmer"] = {"mean_s": llm_per_candidate, "median_s": llm_per_candidate}
    profile_s = float(result.get("profile_seconds", 0.0))
    eval_s = sum(p["wall"] for p in per)
    prog_s = sum(programmer.seconds)
    # What is left is the final gate (3 evaluations per gated candidate) and the loop's own work.
    rest = max(0.0, run_seconds - eval_s - profile_s - prog_s)
    where = {"search evaluations": eval_s, "profiling": profile_s, "programmer": prog_s,
             "final gate + orchestration": rest}
    return {
        "device": result["device"], "hardware": result["hardware"], "programmer": programmer.name,
        "search": result["search"], "evaluations": n, "statuses": result["statuses"],
        "profiled_candidates": len(profiles), "gates": len(result["gates"]),
        "run_seconds": run_seconds,
        # One GPU works on one candidate at a time: its rate is set by the child's wall time.
        "candidates_per_minute_per_gpu": 60.0 * n / eval_s if eval_s else 0.0,
        "candidates_per_minute_end_to_end": 60.0 * n / run_seconds if run_seconds else 0.0,
        "per_candidate_by_stage": by_stage,
        "run_by_stage_s": where,
        "candidates": per,
    }


def render(d: dict[str, Any]) -> str:
    lines = []
    if d["device"] != "cuda":
        lines += ["> CPU run (Triton interpreter): stage proportions are not the GPU's.", ""]
    lines += [f"Per candidate, {d['evaluations']} evaluations on {d['hardware']} ({d['programmer']}, {d['search']}):",
              "", "| stage | mean s | median s |", "|---|---|---|"]
    for s in ("programmer", *STAGES, "wall"):
        v = d["per_candidate_by_stage"][s]
        label = "child wall (total)" if s == "wall" else s
        lines.append(f"| {label} | {v['mean_s']:.3f} | {v['median_s']:.3f} |")
    lines += ["", f"Throughput: {d['candidates_per_minute_per_gpu']:.1f} candidates/min per GPU (evaluation only), "
              f"{d['candidates_per_minute_end_to_end']:.1f}/min end to end.", "",
              f"Where the time of the run went ({d['run_seconds']:.1f} s, {d['profiled_candidates']} profiled, "
              f"{d['gates']} gated):", "", "| part | s | % |", "|---|---|---|"]
    total = d["run_seconds"] or 1.0
    for k, v in d["run_by_stage_s"].items():
        lines.append(f"| {k} | {v:.1f} | {100 * v / total:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget", type=int, default=6, help="evaluations, baseline included (default 6)")
    p.add_argument("--programmer", default="tuner", choices=("tuner", "llm"))
    p.add_argument("--search", default="greedy", choices=("mcts", "greedy"))
    p.add_argument("--out", default="benchmark-out")
    args = p.parse_args(argv)
    os.environ.setdefault("KERNELPRO_PROGRESS", "0")
    settings = Settings.from_env()
    device = settings.resolved_device()
    programmer = TimedProgrammer(load_programmer(args.programmer, settings))
    out = Path(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_demo_repo(Path(tmp) / "repo")
        target = load_config(repo / ".kernelpro.yml").target("swiglu")
        run_dir = out / "overhead-run"
        if (run_dir / "journal.jsonl").exists():
            (run_dir / "journal.jsonl").unlink()  # a resumed run would measure nothing
        t0 = time.perf_counter()
        optimize(target, repo, run_dir, programmer,
                 RunSettings(search=args.search, budget=args.budget, evaluation=EvalSettings(device=device,
                                                                                     warm_server=settings.warm_server)))
        data = analyze(run_dir, time.perf_counter() - t0, programmer)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead.json").write_text(json.dumps(data, indent=2) + "\n")
    print(render(data))
    return data


if __name__ == "__main__":
    main()
