"""The optimize pipeline: a change's configured targets, each checked, optimized and reported.

``kernelpro optimize``, ``kernelpro demo`` and the workflow's optimize job (``kernelpro action
optimize``) all run it. It reads the configuration from the base branch (a pull request cannot
change its own judge), checks each target before any search (a configuration fault is said as
such, never as the PR kernel's status), runs the loop (:func:`kernelpro.runner.optimize.optimize`)
on the head, and writes the results folder: per target ``result.json``, ``report.md``,
``patch.diff`` and ``trace.jsonl``, and over all of them ``summary.json``, ``report.md``,
``patch.diff`` and ``trace.jsonl``. Nothing here talks to GitHub.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tqdm import tqdm

from kernelpro import __version__
from kernelpro.bot.change import changed_files, changed_kernels, config_snippet
from kernelpro.runner.checkout import read_source
from kernelpro.runner.config import load_config
from kernelpro.runner.energy import nvml_meter
from kernelpro.runner.evaluator import EvalSettings
from kernelpro.runner.optimize import RunSettings, optimize
from kernelpro.runner.pool import Pool, visible_gpus
from kernelpro.runner.profiler import ProfileSettings
from kernelpro.runner.programmers import load as load_programmer
from kernelpro.runner.search import get_strategy
from kernelpro.runner.smoke import (
    CONFIG_ERROR,
    fault_report,
    fault_result,
    import_warnings,
    is_reference_failure,
    smoke,
)
from kernelpro.runner.tools import load_tool_file
from kernelpro.settings import Settings
from kernelpro.workspace import checkouts


@dataclass(frozen=True)
class Request:
    """One run of the pipeline: what to optimize and how (the environment comes as Settings)."""

    repo: Path
    """The git repository."""
    base: str
    """Base ref: the branch the pull request targets (its configuration is the one read)."""
    head: str
    """Head ref: the pull request (its kernels are optimized)."""
    out: Path
    """The results folder."""
    kernel: str | None = None
    """Optimize this configured target even if the change did not touch it; None: the changed ones."""
    budget: int | None = None
    """Evaluations per target; None: each target's own budget."""
    programmer: str = "tuner"
    """Who writes candidates (a name of kernelpro.runner.programmers.REGISTRY)."""
    search: str = "mcts"
    """Search strategy (a name of kernelpro.runner.search.STRATEGIES)."""
    feedback: str = "tools"
    """Profiling feedback to the programmer: none, raw metrics, or tool findings."""
    tool_mode: str = "proactive"
    """With feedback tools: every relevant tool's findings in the prompt, or the tools offered as calls (reactive)."""
    memory: bool = True
    """Keep a search memory and show it to the programmer."""
    candidates: int | None = None
    """Candidates the programmer writes per expansion; None: RunSettings' default."""
    energy: str | None = None
    """off, passive or active; None: the configuration's ``energy:``."""
    cuda_graphs: bool = False
    """Time each call as a CUDA graph replay."""


def run_optimize(repo: Path, base: str, head: str, out: Path, settings: Settings, *, kernel: str | None,
                 budget: int | None, programmer_name: str, search: str, feedback: str = "tools",
                 tool_mode: str = "proactive", memory: bool = True, candidates: int | None = None,
                 energy: str | None = None, cuda_graphs: bool = False) -> int:
    """:func:`run` with the request spelled out as arguments; the exit code."""
    return run(Request(repo, base, head, out, kernel=kernel, budget=budget, programmer=programmer_name,
                       search=search, feedback=feedback, tool_mode=tool_mode, memory=memory,
                       candidates=candidates, energy=energy, cuda_graphs=cuda_graphs), settings)


def run(request: Request, settings: Settings) -> int:
    """Optimize the request's targets into ``request.out``; the exit code (0, 1: the programmer could
    not work, 2: the configuration is at fault)."""
    get_strategy(request.search)
    programmer = load_programmer(request.programmer, settings)
    check = getattr(programmer, "check", None)
    if callable(check):
        # Before any evaluation: a dead endpoint, a rejected key or an unknown model ends the run here.
        print(f"Checking the LLM endpoint {getattr(programmer, 'where', '')} and model {getattr(programmer, 'model', '')}")
        check()
    device = settings.resolved_device()
    if request.tool_mode == "reactive" and request.feedback == "tools" and device != "cuda":
        print("--tools reactive: there is no GPU, so no profile: the model is offered no profiling tool (only the "
              "code search when KERNELPRO_CUTLASS_DIR is set). Run on a GPU with ncu for the tools.")
    extractor = None
    if request.memory and request.programmer == "llm":  # the configured model also keeps the search memory
        from kernelpro.runner.extractor import LLMExtractor
        from kernelpro.runner.programmers.llm import LLMProgrammer

        assert isinstance(programmer, LLMProgrammer)
        extractor = LLMExtractor(programmer.client, programmer.model)
    with _gpu_pool(settings, device) as pool:
        return _run_targets(request, settings, programmer=programmer, device=device, pool=pool, extractor=extractor)


def _gpu_pool(settings: Settings, device: str) -> Any:
    """One evaluation worker per GPU when there are several; nothing (in-process evaluation) otherwise."""
    if device != "cuda":
        return contextlib.nullcontext(None)
    import torch

    env = {} if settings.visible_devices is None else {"CUDA_VISIBLE_DEVICES": settings.visible_devices}
    gpus = visible_gpus(settings.gpus, env, torch.cuda.device_count)
    return Pool(gpus) if len(gpus) > 1 else contextlib.nullcontext(None)


def _print_snippet(kernels: list[Any]) -> None:
    if kernels:
        print("Changed kernels without a harness; paste this into .kernelpro.yml:\n")
        print(config_snippet(kernels))


def _run_targets(request: Request, settings: Settings, *, programmer: Any, device: str, pool: Any,
                 extractor: Any) -> int:
    repo, base, head, out, kernel, budget = request.repo, request.base, request.head, request.out, request.kernel, request.budget
    out.mkdir(parents=True, exist_ok=True)
    changed = changed_files(repo, base, head)
    with checkouts(repo, base, head) as co:
        # The configuration comes from the base branch: a pull request cannot change its own judge.
        config_path, config_note = co.base / ".kernelpro.yml", "base branch"
        if not config_path.exists():
            config_path, config_note = co.head / ".kernelpro.yml", "pull request head (not on the base branch)"
            if os.path.lexists(config_path):
                read_source(co.head, ".kernelpro.yml")  # a symlink (to /proc/self/environ, say) is refused here
        if not config_path.exists():
            print("No .kernelpro.yml on the base branch or the head: nothing is configured.")
            _print_snippet(changed_kernels(repo, base, head))
            return 0
        config = load_config(config_path, config_path.parent)
        # Only the base branch's tools run: they execute in this process, outside the sandbox.
        extra_tools = tuple(t for f in config.tools for t in load_tool_file(f)) if config_note == "base branch" else ()
        if config.tools and not extra_tools:
            print("The repository's own tools are ignored: they are not on the base branch.")
        targets = [config.target(kernel)] if kernel else config.targets_for(changed)
        if not targets:
            print(f"No configured kernel changed between {base} and {head} ({len(changed)} files changed).")
            _print_snippet(changed_kernels(repo, base, head))
            return 0
        print(f"kernelpro {__version__}: {len(targets)} target(s) on {device}; configuration from the {config_note}")
        # The command line overrides the configuration; NVML is read only where there is a GPU.
        energy_mode = request.energy or config.energy
        meter = None
        if energy_mode != "off" and device == "cuda":
            meter = nvml_meter(device)
        if energy_mode != "off":
            print(f"Energy: {energy_mode}" + ("" if meter else " (no GPU: energy is not measured)"))
        if device == "cpu":
            print("No GPU: kernels run in Triton's interpreter on the CPU; timings are not GPU timings.")
        reports, patches, summaries = [], [], []
        failed: list[str] = []
        config_faults: list[str] = []
        trace_all = out / "trace.jsonl"
        trace_all.write_text("")
        for target in targets:
            if target.language == "cuda" and device != "cuda":
                print(f"{target.name}: skipped, CUDA targets need an NVIDIA GPU (this run is on the CPU); run on a "
                      "GPU machine, or set KERNELPRO_DEVICE=cuda there")
                continue
            t_out = out / target.name
            # Before any search: a fault of the configuration is reported as such, never as the PR kernel's status.
            faults = smoke(target, co.head, device, target.budget.timeout_s)
            for w in import_warnings(target, co.head):
                print(f"kernelpro: warning: {w}", file=sys.stderr)
            if faults:
                t_out.mkdir(parents=True, exist_ok=True)
                (t_out / "result.json").write_text(json.dumps(fault_result(target, device, faults), indent=2) + "\n")
                (t_out / "report.md").write_text(fault_report(target, faults))
                (t_out / "patch.diff").write_text("")
                reports.append((t_out / "report.md").read_text())
                summaries.append(json.loads((t_out / "result.json").read_text()))
                config_faults.extend(str(f) for f in faults)
                print(f"{target.name}: not optimized, its configuration does not match the code (below)")
                continue
            base_solution = None
            if all((co.base / f).exists() for f in target.files):
                try:
                    base_solution = target.solution(co.base, name=f"{target.name}-base-branch")
                except (OSError, ValueError):
                    base_solution = None
            rs = RunSettings(search=request.search, budget=budget,
                             evaluation=EvalSettings(device=device, cuda_graphs=request.cuda_graphs,
                                                     warm_server=settings.warm_server),
                             feedback=request.feedback, tool_mode=request.tool_mode, extra_tools=extra_tools,
                             memory=request.memory, per_step=request.candidates or RunSettings.per_step,
                             energy=energy_mode, sanitizer_tool=settings.sanitizer_tool,
                             profiling=ProfileSettings(ncu_tool=settings.ncu_tool,
                                                       cuobjdump_tool=settings.cuobjdump_tool))
            rs = replace(rs, command=reproduce(request, settings, rs, device=device, base_sha=co.base_sha,
                                               head_sha=co.head_sha, kernel=target.name, programmer=programmer.name,
                                               budget=budget or target.budget.evaluations))
            progress = _progress(settings, budget or target.budget.evaluations, target.name)
            try:
                result = optimize(target, co.head, t_out, programmer, rs, base_solution=base_solution,
                                  progress=progress, extractor=extractor, pool=pool, meter=meter)
            finally:
                progress.close()
            for w in result.baseline.outcome.warnings:  # the installed copy ran, not the repository's files
                print(f"kernelpro: warning: {target.name}: {w}", file=sys.stderr)
            if is_reference_failure(result.baseline.outcome.log):
                # The reference failed on a workload larger than the smoke step's: the configuration's fault too.
                data = json.loads((t_out / "result.json").read_text())
                data["baseline"]["status"] = CONFIG_ERROR
                (t_out / "result.json").write_text(json.dumps(data, indent=2) + "\n")
                config_faults.append(f"{target.name}: {result.stop_reason}")
            reports.append((t_out / "report.md").read_text())
            patches.append((t_out / "patch.diff").read_text())
            summaries.append(json.loads((t_out / "result.json").read_text()))
            with trace_all.open("a") as f:
                f.write((t_out / "trace.jsonl").read_text())
            if result.stop_reason.startswith(("the programmer failed", "every request to the LLM endpoint failed")):
                failed.append(f"{target.name}: {result.stop_reason}")
            w = result.winner
            verdict = (f"verified speedup {w.speedup:.2f}x ({'; then '.join(summaries[-1]['winner']['lineage'])})" if w
                       else f"the pull request's kernel stands ({result.stop_reason})")
            print(f"{target.name}: {verdict}; {len(result.evaluated)} evaluations in {result.seconds:.0f} s")
    (out / "report.md").write_text("\n\n---\n\n".join(reports))
    (out / "patch.diff").write_text("".join(patches))
    (out / "summary.json").write_text(json.dumps({"targets": summaries, "config": config_note}, indent=2) + "\n")
    if reports:
        print(f"Report: {out / 'report.md'}")
    else:
        print("No report: no target was optimized (see the reasons above).")
    if config_faults:
        for line in config_faults:
            print(f"kernelpro: error: {line}", file=sys.stderr)
        print("kernelpro: the configuration is at fault, not the pull request's kernel; `kernelpro check-config "
              "--run` checks it again", file=sys.stderr)
        return 2
    if failed:
        # The results are written, but a run whose programmer could not work is not a result: say why, non-zero.
        for line in failed:
            print(f"kernelpro: error: {line}", file=sys.stderr)
        return 1
    return 0


def reproduce(request: Request, settings: Settings, rs: RunSettings, *, device: str, base_sha: str,
              head_sha: str, kernel: str, budget: int, programmer: str) -> str:
    """The command line that reruns one target's optimization exactly: the environment it reads (never the
    key), the commits by SHA, and every switch with the value this run used."""
    env = [f"KERNELPRO_DEVICE={device}"]
    if programmer == "llm":
        from kernelpro.runner.programmers.llm import OPENAI_BASE_URL, _without_credentials

        env += [f"KERNELPRO_LLM_BASE_URL={_without_credentials(settings.llm_base_url or OPENAI_BASE_URL)}",
                f"KERNELPRO_LLM_MODEL={settings.llm_model}"]
        if settings.llm_max_tokens:
            env.append(f"KERNELPRO_LLM_MAX_TOKENS={settings.llm_max_tokens}")
        if settings.cutlass_dir:  # the prompts then offer the code tools over that checkout
            env.append(f"KERNELPRO_CUTLASS_DIR={settings.cutlass_dir}")
    args = ["kernelpro", "optimize", "--repo", str(request.repo), "--base", base_sha, "--head", head_sha,
            "--out", str(request.out), "--kernel", kernel, "--budget", str(budget), "--programmer",
            programmer, "--search", rs.search, "--feedback", rs.feedback, "--tools", rs.tool_mode,
            "--memory", "on" if rs.memory else "off", "--candidates", str(rs.per_step),
            "--energy", rs.energy, *(["--cuda-graphs"] if request.cuda_graphs else [])]
    return shlex.join([*env, *args])


def _progress(settings: Settings, total: int, label: str) -> Any:
    # A bar only on a terminal: redrawn into a log (CI, a pipe, a file) it is noise. Without one, a
    # line each time the search's best improves, and the caller's final line per kernel.
    draw = settings.progress and sys.stderr.isatty() and not settings.no_color
    bar = tqdm(total=total, desc=label, unit="eval", disable=not draw, file=sys.stderr)
    shown = {"best": 0.0}

    def update(i: int, budget: int, scored: Any, best: float) -> None:
        bar.total = budget
        bar.update(1)
        bar.set_postfix_str(f"last {scored.outcome.status}, best verified-in-search {best:.2f}x")
        if not draw and best > shown["best"]:
            shown["best"] = best
            print(f"[{label}] evaluation {i}/{budget}: new best in the search {best:.2f}x "
                  f"({scored.outcome.status})", file=sys.stderr)

    update.close = bar.close  # type: ignore[attr-defined]
    return update
