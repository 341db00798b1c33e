"""The `kernelpro` command: the one place where settings are read and collaborators are built."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

import git

from kernelpro import __version__, pipeline
from kernelpro.pipeline import Request
from kernelpro.runner import confinement, reaper
from kernelpro.runner.config import ConfigError, load_config
from kernelpro.runner.evaluator import EvalSettings, evaluate, traces
from kernelpro.runner.evidence import Profile
from kernelpro.runner.evidence import ncu as ncu_report
from kernelpro.runner.evidence.sass import (
    SassError,
    disassemble,
    find_cuobjdump,
    parse_sass,
    uses_cublas,
)
from kernelpro.runner.evidence.timeline import summarize
from kernelpro.runner.programmers import REGISTRY, PluginError
from kernelpro.runner.roofline import measured_class
from kernelpro.runner.sandbox import SandboxError
from kernelpro.runner.search import STRATEGIES
from kernelpro.runner.smoke import import_warnings, smoke
from kernelpro.runner.target import Tolerance
from kernelpro.runner.tools import FEEDBACK_MODES, registry, render, run_tools
from kernelpro.runner.trace import (
    FormatError,
    Workload,
    append_jsonl,
    load_definition,
    load_solution,
    load_workloads,
)
from kernelpro.settings import Settings
from kernelpro.workspace import WorkspaceError


class UsageError(Exception):
    """A broken invocation; the message states the cause and the fix."""


def _err(msg: str) -> int:
    print(f"kernelpro: error: {msg}", file=sys.stderr)
    return 2


# --------------------------------------------------------------------------- check-config


def cmd_check_config(args: argparse.Namespace, settings: Settings) -> int:
    path = Path(args.path)
    if path.is_dir():
        path = path / ".kernelpro.yml"
    config = load_config(path, Path(args.repo) if args.repo else None)
    faults: list[str] = []
    for t in config.targets:
        for w in import_warnings(t, Path(args.repo) if args.repo else path.parent):
            print(f"warning: {w}")
        if args.run:
            # The smoke step `optimize` runs before any search: files, entry point, the reference on the
            # smallest workload (in the evaluator's reference child).
            root = Path(args.repo) if args.repo else path.parent
            found = smoke(t, root, settings.resolved_device(), t.budget.timeout_s)
            faults += [str(f) for f in found]
            if found:
                continue
        ran = ", reference ran on the smallest workload" if args.run else ""
        print(f"ok: target {t.name} ({t.language}, {t.entry_point}, {len(t.workloads)} workloads{ran})")
    if faults:
        raise ConfigError(faults)
    print(f"{path}: valid, {len(config.targets)} target(s), energy {config.energy}")
    return 0


# --------------------------------------------------------------------------- evaluate


def cmd_evaluate(args: argparse.Namespace, settings: Settings) -> int:
    definition = load_definition(args.definition)
    solution = load_solution(args.solution)
    if args.workloads:
        workloads = load_workloads(args.workloads)
    elif not definition.var_axes:
        workloads = [Workload.make(definition, {})]
    else:
        raise UsageError(f"definition {definition.name} has variable axes {definition.var_axes}: "
                         "pass --workloads W.jsonl with their values")
    if not workloads:
        raise UsageError(f"{args.workloads} holds no workloads")
    device = settings.resolved_device()
    es = EvalSettings(device=device, timeout_s=args.timeout, trials=args.trials, time_reference=True,
                      float64_reference=args.float64_reference, cuda_graphs=args.cuda_graphs)
    outcome = evaluate(definition, solution, workloads, Tolerance(args.atol, args.rtol), es)
    lines = traces(definition, solution, workloads, outcome)
    append_jsonl(args.out, [t.to_json() for t in lines])
    for t in lines:
        ev = t.evaluation
        assert ev is not None
        perf = f" {ev.performance.latency_ms:.4f} ms" if ev.performance else ""
        print(f"{t.workload.uuid}: {ev.status}{perf}")
    if not outcome.passed:
        print(outcome.log.strip()[-1500:], file=sys.stderr)
    for k, v in outcome.environment.get("sandbox", {}).items():
        print(f"sandbox {k}: {v}", file=sys.stderr)
    if args.baseline:
        # The same checks and timing for the baseline, then baseline, candidate and speedup side by side.
        base_sol = load_solution(args.baseline)
        base_out = evaluate(definition, base_sol, workloads, Tolerance(args.atol, args.rtol), es)
        base_lines = traces(definition, base_sol, workloads, base_out)
        append_jsonl(args.out, [t.to_json() for t in base_lines])
        base_ms = {t.workload.uuid: t.evaluation.performance.latency_ms for t in base_lines
                   if t.evaluation is not None and t.evaluation.performance is not None}
        print(f"{'workload':<40} {'baseline ms':>12} {'candidate ms':>13} {'speedup':>8}")
        for t in lines:
            ev = t.evaluation
            cand = ev.performance.latency_ms if ev is not None and ev.performance is not None else None
            b = base_ms.get(t.workload.uuid)
            x = f"{b / cand:.2f}x" if b and cand else "n/a"
            print(f"{t.workload.uuid[:40]:<40} {b if b is not None else float('nan'):>12.4f} "
                  f"{cand if cand is not None else float('nan'):>13.4f} {x:>8}")
        if not base_out.passed:
            print(f"the baseline did not pass: {base_out.log.strip()[-500:]}", file=sys.stderr)
    return 0


# --------------------------------------------------------------------------- optimize


def _check_budget(budget: int | None) -> None:
    """``--budget`` below 1 would fall back to the configuration's budget unnoticed (0 is falsy)."""
    if budget is not None and budget < 1:
        raise UsageError(f"--budget {budget}: give at least 1 evaluation per target (the pull request's kernel "
                         "counts as one), or leave --budget out for the target's own budget")


def cmd_optimize(args: argparse.Namespace, settings: Settings) -> int:
    _check_budget(args.budget)
    if args.candidates is not None and not 1 <= args.candidates <= 64:
        print(f"--candidates {args.candidates}: give between 1 and 64 candidates per expansion", file=sys.stderr)
        return 2
    if args.tools == "reactive" and args.feedback != "tools":
        print(f"--tools reactive offers the tools' findings; it needs --feedback tools, not {args.feedback}",
              file=sys.stderr)
        return 2
    return pipeline.run(Request(Path(args.repo), args.base, args.head, Path(args.out), kernel=args.kernel,
                                budget=args.budget, programmer=args.programmer, search=args.search,
                                feedback=args.feedback, tool_mode=args.tools, memory=args.memory == "on",
                                candidates=args.candidates, energy=args.energy, cuda_graphs=args.cuda_graphs),
                        settings)


# --------------------------------------------------------------------------- tools, analyze


def cmd_tools(args: argparse.Namespace, settings: Settings) -> int:
    tools = registry()
    rows = [{"name": t.name, "source": t.source, "required": list(t.required), "thresholds": dict(t.thresholds),
             "affinity": sorted(t.affinity), "energy_only": t.energy_only, "description": t.description}
            for t in tools]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| tool | source | affinity | thresholds | description |")
    print("|---|---|---|---|---|")
    for r in rows:
        th = ", ".join(f"{k} {v:g}" for k, v in r["thresholds"].items())
        aff = ", ".join(r["affinity"]) + (" (energy only)" if r["energy_only"] else "")
        print(f"| {r['name']} | {r['source']} | {aff} | {th} | {r['description']} |")
    return 0


def cmd_analyze(args: argparse.Namespace, settings: Settings) -> int:
    if not (args.ncu_csv or args.ncu_rep or args.cubin or args.so or args.timeline or args.sass):
        raise UsageError("give at least one of --ncu-csv, --ncu-rep, --cubin, --so, --sass, --timeline")
    kernels: list[Any] = []
    if args.ncu_csv:
        kernels = ncu_report.parse_csv(Path(args.ncu_csv).read_text())
    if args.ncu_rep:
        ncu = ncu_report.find_ncu(settings.ncu_tool)
        if ncu is None:
            raise UsageError("--ncu-rep needs Nsight Compute's ncu to read the report; export it where ncu exists "
                             "with `ncu --import F --csv --page raw > F.csv` and pass --ncu-csv")
        p = subprocess.run([ncu, "--import", args.ncu_rep, "--csv", "--page", "raw"], capture_output=True, text=True)
        kernels = ncu_report.parse_csv(p.stdout)
    if (args.ncu_csv or args.ncu_rep) and not kernels:
        raise UsageError("no kernel found in the ncu output: was it written with --csv (--page raw or --metrics)?")
    sass = None
    binary = args.cubin or args.so
    if binary:
        try:
            stats = parse_sass(disassemble(Path(binary), find_cuobjdump(settings.cuobjdump_tool)))
        except SassError as e:
            raise UsageError(str(e)) from None
        sass = replace(stats, uses_cublas=uses_cublas(Path(binary))) if args.so else stats
    elif args.sass:
        sass = parse_sass(Path(args.sass).read_text())
    timeline = None
    if args.timeline:
        data = json.loads(Path(args.timeline).read_text())
        events = data["events"] if isinstance(data, dict) else data
        calls = int(data.get("calls", 1)) if isinstance(data, dict) else 1
        timeline = summarize(events, calls)
    profile = Profile(tuple(kernels), sass, timeline)
    bottleneck = args.bottleneck or measured_class(profile)[0] or "unknown"
    analysis = run_tools(profile, bottleneck, energy=args.energy)
    if args.json:
        print(json.dumps({"bottleneck": bottleneck, "ran": list(analysis.ran), "skipped": dict(analysis.skipped),
                          "findings": [f.to_json() for f in analysis.findings]}, indent=2))
    else:
        print(f"Bottleneck: {bottleneck}" + ("" if args.bottleneck else " (from ncu throughput)"))
        print(render(analysis, profile, "tools"))
    return 0


# --------------------------------------------------------------------------- demo


def make_demo_repo(dest: Path, example: str = "demo") -> Path:
    """A bundled example (examples/demo: Triton, examples/cuda: a raw CUDA kernel) as a real git
    repository: commit 1 the configuration, commit 2 the kernel."""
    root = resources.files("kernelpro.examples") / example
    kernel = "a CUDA SwiGLU kernel" if example == "cuda" else "a Triton SwiGLU kernel"
    repo = git.Repo.init(dest, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "kernelpro demo")
        cw.set_value("user", "email", "demo@kernelpro.invalid")
    for step, message in (("commit1", "Add kernelpro configuration"), ("commit2", f"Add {kernel}")):
        src = Path(str(root / step))
        shutil.copytree(src, dest, dirs_exist_ok=True)
        repo.git.add(A=True)
        repo.index.commit(message)
    return dest


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    _check_budget(args.budget)
    out = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="kernelpro-demo-") as tmp:
        repo = make_demo_repo(Path(tmp) / "demo-kernels")
        print(f"Demo repository: 2 commits (configuration, then a SwiGLU Triton kernel); optimizing HEAD~1..HEAD -> {out}")
        return pipeline.run(Request(repo, "HEAD~1", "HEAD", out, budget=args.budget, search=args.search), settings)


# --------------------------------------------------------------------------- main


def _action(mode: str) -> Any:
    def run(args: argparse.Namespace, settings: Settings) -> int:
        # The GitHub jobs bring PyGithub in: imported only for `kernelpro action`.
        from kernelpro import action

        return int(getattr(action, f"cmd_{mode}")(args, settings))

    return run


GRAPHS_HELP = ("time each call as a CUDA graph replay: the GPU time without the host's launch overhead (a "
               "candidate that cannot be captured is timed call by call, and its timing says why)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelpro", description="Makes GPU kernels faster and proves it.")
    p.add_argument("--version", action="version", version=f"kernelpro {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("check-config", help="validate a .kernelpro.yml")
    c.add_argument("path", help=".kernelpro.yml (or the folder holding it)")
    c.add_argument("--repo", help="repository root for relative paths (default: the file's folder)")
    c.add_argument("--run", action="store_true",
                   help="also check each target as `optimize` does before any search: its files exist, its entry "
                        "point is defined, and the definition's reference runs on the smallest workload and returns "
                        "the declared outputs")
    c.set_defaults(fn=cmd_check_config)

    e = sub.add_parser("evaluate", help="build, verify and time one Solution; append FlashInfer-Trace lines")
    e.add_argument("--definition", required=True, help="FlashInfer-Trace Definition JSON")
    e.add_argument("--solution", required=True, help="FlashInfer-Trace Solution JSON")
    e.add_argument("--workloads", help="JSONL of workloads (or workload traces)")
    e.add_argument("--out", required=True, help="trace JSONL to append to")
    e.add_argument("--baseline", help="a second Solution JSON (the PR's kernel) to time the same way; "
                   "prints baseline, candidate and speedup per workload")
    e.add_argument("--timeout", type=float, default=300.0, help="seconds for each of the two children, reference and candidate (default 300)")
    e.add_argument("--trials", type=int, default=5, help="fresh seeded input sets per workload (default 5)")
    e.add_argument("--float64-reference", action="store_true",
                   help="also run the reference in float64; accept TF32-style differences by KernelOPT's ratio")
    e.add_argument("--cuda-graphs", action="store_true", help=GRAPHS_HELP)
    e.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: per dtype)")
    e.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: per dtype)")
    e.set_defaults(fn=cmd_evaluate)

    o = sub.add_parser("optimize", help="optimize the kernels a change touched")
    o.add_argument("--repo", required=True, help="git repository")
    o.add_argument("--base", required=True, help="base ref (the branch the PR targets)")
    o.add_argument("--head", required=True, help="head ref (the PR)")
    o.add_argument("--out", required=True, help="results directory")
    o.add_argument("--kernel", help="optimize this configured target even if unchanged")
    o.add_argument("--budget", type=int, help="evaluations per target (default: the target's budget)")
    o.add_argument("--programmer", default="tuner", choices=sorted(REGISTRY), help="who writes candidates")
    o.add_argument("--search", default="mcts", choices=STRATEGIES, help="search strategy (default mcts)")
    o.add_argument("--feedback", default="tools", choices=FEEDBACK_MODES,
                   help="profiling feedback to the programmer: none, raw metrics, or tool findings (default)")
    o.add_argument("--tools", default="proactive", choices=("proactive", "reactive"),
                   help="with --feedback tools: run every relevant tool and put the findings in the prompt "
                        "(proactive, default), or offer the tools to the model as function calls (reactive; "
                        "--programmer llm)")
    o.add_argument("--memory", default="on", choices=("on", "off"),
                   help="keep a search memory and show it to the programmer (default on)")
    o.add_argument("--candidates", type=int, metavar="N",
                   help="candidates the programmer writes per expansion (default 4)")
    o.add_argument("--energy", choices=("off", "passive", "active"),
                   help="energy per call: off, passive (NVML measures the baseline and the winner; the search is "
                        "unchanged) or active (also prefer the cheaper of equally fast kernels); default: the "
                        "configuration's `energy:`, else off")
    o.add_argument("--cuda-graphs", action="store_true", help=GRAPHS_HELP)
    o.set_defaults(fn=cmd_optimize)

    tl = sub.add_parser("tools", help="the micro-profiling tools")
    tl_sub = tl.add_subparsers(dest="tools_command", required=True)
    tll = tl_sub.add_parser("list", help="every registered tool with its source, thresholds and affinity")
    tll.add_argument("--json", action="store_true", help="machine-readable output")
    tll.set_defaults(fn=cmd_tools)

    ac = sub.add_parser("action", help="the jobs of the GitHub workflow (plan, optimize, publish)")
    ac_sub = ac.add_subparsers(dest="action_command", required=True)
    acp = ac_sub.add_parser("plan", help="decide, check permission, list targets (trusted; runs no PR code)")
    acp.add_argument("--out", default="kernelpro-plan", help="folder for plan.json")
    acp.add_argument("--checkout", default=".", help="a clone of the repository (base branch) with full history")
    acp.set_defaults(fn=_action("plan"))
    aco = ac_sub.add_parser("optimize", help="optimize one planned target (the GPU job)")
    aco.add_argument("--target", required=True, help="target name from the plan's matrix")
    aco.add_argument("--out", default="kernelpro-out", help="results folder (uploaded as the artifact)")
    aco.add_argument("--checkout", default=".", help="the repository checkout")
    aco.set_defaults(fn=_action("optimize"))
    acu = ac_sub.add_parser("publish", help="open or update the follow-up PR from the results (runs no PR code)")
    acu.add_argument("--results", required=True, help="the downloaded optimize artifacts")
    acu.add_argument("--checkout", default=".", help="a clone of the repository with full history")
    acu.add_argument("--head-sha", default="", help="the head commit the plan approved (its head_sha output)")
    acu.set_defaults(fn=_action("publish"))
    acw = ac_sub.add_parser("progress", help="keep the sticky comment live while the optimize jobs run (runs no PR code)")
    acw.add_argument("--targets", required=True, help="the plan job's `targets` output (JSON list)")
    acw.add_argument("--files", required=True, help="the plan job's `files` output (JSON: target -> kernel files)")
    acw.add_argument("--interval", type=float, default=30.0, help="seconds between polls (default 30)")
    acw.add_argument("--max-minutes", type=float, default=190.0, help="stop watching after this long (default 190)")
    acw.add_argument("--job-prefix", default="optimize ", help="the optimize jobs' names before the target name")
    acw.set_defaults(fn=_action("progress"))

    a = sub.add_parser("analyze", help="findings from saved profiler outputs; no GPU needed")
    a.add_argument("--ncu-csv", help="ncu --csv output (--page raw or --metrics)")
    a.add_argument("--ncu-rep", help="an .ncu-rep report (needs ncu installed to read it)")
    a.add_argument("--cubin", help="a cubin to disassemble (cuobjdump)")
    a.add_argument("--so", help="a shared object to disassemble; also checks for cuBLAS (nm -D)")
    a.add_argument("--sass", help="saved cuobjdump --dump-sass text")
    a.add_argument("--timeline", help="events recorded by kernelpro's timeline collector (JSON)")
    a.add_argument("--bottleneck", choices=("compute", "memory", "latency", "mixed"),
                   help="Stage 1 class to filter tools by (default: from ncu throughput)")
    a.add_argument("--energy", action="store_true", help="also run the energy-only tools")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    a.set_defaults(fn=cmd_analyze)

    d = sub.add_parser("demo", help="optimize the bundled example repository end to end")
    d.add_argument("--out", default="kernelpro-demo", help="results directory (default ./kernelpro-demo)")
    d.add_argument("--budget", type=int, help="evaluations (default: the example's budget)")
    d.add_argument("--search", default="mcts", choices=STRATEGIES, help="search strategy (default mcts)")
    d.set_defaults(fn=cmd_demo)
    for runs_candidates in (e, o, aco, d):
        runs_candidates.add_argument("--allow-unconfined", action="store_true", help=UNCONFINED_HELP)
    return p


UNCONFINED_HELP = ("run candidates even where their confinement (Landlock; a pid namespace or Landlock ABI 6) is "
                   "unavailable; RISK: the pull request's code then runs with this user's rights: it can read and "
                   "write its files (kernelpro's installation, the checkout's .git, the results) and outlive the "
                   "run. Also KERNELPRO_ALLOW_UNCONFINED=1. See docs/github.md, Runner hardening")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = Settings.from_env()
        confinement.allow_unconfined(settings.allow_unconfined or bool(getattr(args, "allow_unconfined", False)))
        if hasattr(args, "allow_unconfined"):  # a command that runs candidates: nothing imported after they ran
            confinement.preload()
            return _watched(args, settings)
        return int(args.fn(args, settings))
    except ConfigError as e:
        print(str(e), file=sys.stderr)
        return 2
    except (UsageError, FormatError, PluginError, WorkspaceError, SandboxError, ValueError) as e:
        return _err(str(e))
    except BrokenPipeError:
        # `kernelpro tools list | head`: the reader went away; that is not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        # GitHub API failures and the action's own errors: one clear line, no traceback.
        from github import GithubException

        from kernelpro.action import ActionError

        if isinstance(e, ActionError):
            return _err(str(e))
        if isinstance(e, GithubException):
            return _err(f"GitHub API error {e.status}: {e.data}; the results are in the artifact, rerun this job "
                        "to publish them")
        raise
    except KeyboardInterrupt as e:
        return _interrupted(args, int(getattr(e, "signum", signal.SIGINT)))


def _watched(args: argparse.Namespace, settings: Settings) -> int:
    """A command that runs candidates: nothing it starts outlives it, however it ends (runner/reaper.py)."""
    try:
        with reaper.watch():
            return int(args.fn(args, settings))
    except BaseException:
        # A stop by signal is reported as such even where the unwinding it caused raised something else.
        if (signum := reaper.interrupted_by()) is None:
            raise
        return _interrupted(args, signum)


def _interrupted(args: argparse.Namespace, signum: int) -> int:
    """The message and exit code of a command a signal stopped: 128 + its number, as shells report it
    (130 for SIGINT, 143 for SIGTERM), and where the work done so far is."""
    command = " ".join(str(getattr(args, k)) for k in ("command", "action_command") if getattr(args, k, None))
    out = Path(str(getattr(args, "out", "") or "."))
    if args.command == "evaluate":
        where = (f"evaluate keeps no journal: the trace lines of the evaluations that finished are in {out}; "
                 "rerun the command to evaluate again")
    elif hasattr(args, "allow_unconfined"):
        journals = sorted(str(j) for j in out.glob("*/journal.jsonl") if j.stat().st_size)
        where = (f"the evaluations that finished are in the journal ({', '.join(journals)})" if journals else
                 f"no evaluation had finished (each target's journal is {out / 'TARGET' / 'journal.jsonl'})")
        where += "; rerun the same command with the same --out to resume"
    else:
        where = "rerun the command"
    ended = "every process it started was ended and its temporary files removed; " if hasattr(args, "allow_unconfined") else ""
    print(f"kernelpro: {command} interrupted by {signal.Signals(signum).name}: {ended}{where}", file=sys.stderr)
    return 128 + signum


if __name__ == "__main__":
    sys.exit(main())
