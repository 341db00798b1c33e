"""Benchmark: KernelBench-format problems through kernelpro, with any programmer.

    python benchmarks/kernelbench.py [--problems DIR|FILE ...] [--programmer tuner|llm]
                                     [--start solution|reference] [--budget N] [--search mcts|greedy]
                                     [--cap 25] [--out DIR]

A problem is a Python file with ``Model`` (an nn.Module), ``get_inputs()`` and ``get_init_inputs()``
(ScalingIntelligence/KernelBench's format). Each becomes a kernelpro target: a Definition whose
reference is ``Model(*get_init_inputs()).forward`` (built after ``torch.manual_seed(0)``), inputs
and outputs typed from one call on the meta device, and a Solution that builds ``ModelNew`` the
same way and calls it. The search starts from ``solutions/<problem file name>`` when it exists
(``--start solution``, the default for the tuner, which improves kernels but does not write them)
or from the reference itself (``--start reference``, the default for ``--programmer llm``: the
model writes ModelNew from scratch, as in KernelBench).

The score follows the KernelPro paper's protocol (Section 5 and Appendix C): the speedup of a task
is eager PyTorch's time over the final kernel's, both measured by kernelpro in the same child
(reference timed beside the candidate); the final kernel is the gate's verified winner, else the
starting point. A task is solved when that kernel is correct. The table gives the geometric mean
speedup with unsolved tasks scored 1.0x and each task's speedup clamped to min(speedup, cap)
(25x in the paper's ablations; 5/10/20 shown too), and fast_p, the fraction of tasks that are
solved and faster than p, for p in 0, 1, 1.5, 2 (fast_0 = correctness rate). Correctness uses
KernelBench's tolerance (atol = rtol = 1e-2) unless --strict takes kernelpro's dtype defaults.

``--programmer llm`` needs KERNELPRO_LLM_BASE_URL, KERNELPRO_LLM_MODEL and a key (see README).
On a CPU the kernels run in Triton's interpreter: the protocol runs, the speedups mean nothing.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import runpy
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpro.runner.evaluator import EvalSettings, Outcome
from kernelpro.runner.optimize import RunSettings, optimize
from kernelpro.runner.programmers import load as load_programmer
from kernelpro.runner.target import Budget, Target, Tolerance
from kernelpro.runner.trace import Axis, Definition, TensorSpec, Workload
from kernelpro.settings import Settings

HERE = Path(__file__).resolve().parent
PROBLEMS = HERE / "kernelbench_problems"
FAST_P = (0.0, 1.0, 1.5, 2.0)
CAPS = (5.0, 10.0, 20.0, 25.0)
SEED = 0

# Appended to the problem's (or solution's) own source: build the module once per device with the
# seed KernelBench uses, so Model and ModelNew get identical parameters, then call it.
_WRAPPER = '''

# ---- kernelpro: KernelBench protocol (seeded construction, one instance per device) ----
_KP_INIT = {init!r}
_KP_MODELS = {{}}


def {entry}({args}):
    import torch as _kp_torch

    dev = {first}.device
    m = _KP_MODELS.get(dev)
    if m is None:
        _kp_torch.manual_seed({seed})
        m = _KP_MODELS[dev] = {cls}(*_KP_INIT).to(dev)
    with _kp_torch.no_grad():
        return m({args})
'''


class ProblemError(ValueError):
    """A problem file that does not follow KernelBench's format."""


@dataclass(frozen=True)
class Problem:
    """One KernelBench-format problem, converted."""

    name: str
    """File stem."""
    target: Target
    """The kernelpro target (reference = Model.forward)."""
    checkout: Path
    """Folder holding the starting solution file (the 'PR head')."""
    start: str
    """'solution' or 'reference': where the search started."""


def _check_literal(init: Sequence[Any]) -> None:
    try:
        if eval(repr(list(init)), {}) != list(init):  # noqa: S307 (our own repr of plain values)
            raise ValueError
    except Exception:  # noqa: BLE001 (any failure means the values do not round-trip)
        raise ProblemError(f"get_init_inputs() returned {init!r}; only plain values (numbers, strings, tuples) "
                           "can be written into the solution; build tensors inside __init__") from None


def _source_with_wrapper(src: str, cls: str, entry: str, init: Sequence[Any], args: Sequence[str]) -> str:
    _check_literal(init)
    return src + _WRAPPER.format(init=list(init), entry=entry, args=", ".join(args), first=args[0], seed=SEED, cls=cls)


def load_problem(path: Path, work: Path, start: str, strict: bool, budget: Budget) -> Problem:
    import torch

    src = path.read_text()
    ns = runpy.run_path(str(path))
    missing = [k for k in ("Model", "get_inputs", "get_init_inputs") if k not in ns]
    if missing:
        raise ProblemError(f"{path}: defines no {', '.join(missing)}; a KernelBench problem needs Model, "
                           "get_inputs and get_init_inputs")
    torch.manual_seed(SEED)
    inputs = list(ns["get_inputs"]())
    init = list(ns["get_init_inputs"]())
    bad = [i for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)]
    if bad:
        raise ProblemError(f"{path}: get_inputs() item(s) {bad} are not tensors; kernelpro generates tensor inputs "
                           "only: fold scalars into get_init_inputs")
    params = [p for p in inspect.signature(ns["Model"].forward).parameters if p != "self"]
    if len(params) != len(inputs):
        raise ProblemError(f"{path}: Model.forward takes {params} but get_inputs() returns {len(inputs)} tensors")
    _check_literal(init)
    # Output shapes and dtypes without running the model for real (KernelBench's large problems are GBs);
    # an op with no meta kernel falls back to one real call on the CPU.
    try:
        with torch.device("meta"):
            torch.manual_seed(SEED)
            out = ns["Model"](*init)(*[x.to("meta") for x in inputs])
    except Exception:  # noqa: BLE001 (any failure: try the real thing)
        try:
            torch.manual_seed(SEED)
            with torch.no_grad():
                out = ns["Model"](*init)(*inputs)
        except Exception as e:  # noqa: BLE001
            raise ProblemError(f"{path}: Model(*get_init_inputs())(*get_inputs()) fails: {type(e).__name__}: {e}") from e
    outs = out if isinstance(out, tuple) else (out,)
    axes: dict[str, Axis] = {}

    def spec(name: str, t: torch.Tensor) -> TensorSpec:
        dims = []
        for j, n in enumerate(t.shape):
            axes[f"{name}_{j}"] = Axis("const", int(n))
            dims.append(f"{name}_{j}")
        return TensorSpec(tuple(dims), str(t.dtype).removeprefix("torch."))

    in_specs = {p: spec(p, x) for p, x in zip(params, inputs, strict=True)}
    out_specs = {f"out{i}" if len(outs) > 1 else "out": spec(f"out{i}", o) for i, o in enumerate(outs)}
    definition = Definition(
        name=f"kernelbench_{path.stem}", op_type="kernelbench", axes=axes, inputs=in_specs, outputs=out_specs,
        reference=_source_with_wrapper(src, "Model", "run", init, params),
        description=f"KernelBench-format problem {path.name}",
    )
    workload = Workload.make(definition, {})
    sol_path = path.parent / "solutions" / path.name
    if start == "solution" and not sol_path.exists():
        raise ProblemError(f"{path}: --start solution needs {sol_path}; use --start reference to begin from Model")
    body = sol_path.read_text() if start == "solution" else src + "\n\nModelNew = Model\n"
    checkout = work / path.stem
    checkout.mkdir(parents=True, exist_ok=True)
    (checkout / "solution.py").write_text(_source_with_wrapper(body, "ModelNew", "run", init, params))
    target = Target(
        name=path.stem.replace(".", "_"), language="triton" if start == "solution" else "python",
        files=("solution.py",), entry_point="solution.py::run", definition=definition, workloads=(workload,),
        tolerance=Tolerance() if strict else Tolerance(1e-2, 1e-2), budget=budget,
    )
    return Problem(path.stem, target, checkout, start)


def _speedup_vs_reference(outcome: Outcome) -> float:
    """Geometric mean over workloads of reference time / kernel time, from one evaluation."""
    logs = []
    for r in outcome.results:
        if r.timing is None or r.reference_timing is None or r.timing.median_ms <= 0:
            return math.nan
        logs.append(math.log(r.reference_timing.median_ms / r.timing.median_ms))
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def score(rows: Sequence[dict[str, Any]], cap: float | None) -> dict[str, Any]:
    """The paper's aggregate: geomean with unsolved = 1.0x and min(speedup, cap); fast_p."""
    def capped(r: dict[str, Any], c: float | None) -> float:
        s = r["speedup"] if r["solved"] and math.isfinite(r["speedup"]) and r["speedup"] > 0 else 1.0
        return min(s, c) if c else s

    def geo(c: float | None) -> float:
        return math.exp(sum(math.log(capped(r, c)) for r in rows) / len(rows)) if rows else math.nan

    n = len(rows) or 1
    return {
        "tasks": len(rows),
        "solved": sum(r["solved"] for r in rows),
        "geomean": geo(cap),
        "cap": cap,
        "geomean_by_cap": {("none" if c is None else f"{c:g}"): geo(c) for c in (*CAPS, None)},
        "fast_p": {f"{p:g}": sum(1 for r in rows if r["solved"] and r["speedup"] > p) / n for p in FAST_P},
    }


def run_problem(problem: Problem, out: Path, programmer: Any, rs: RunSettings) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = optimize(problem.target, problem.checkout, out / problem.name, programmer, rs)
    final_key = result.winner.candidate.key if result.winner else result.baseline.candidate.key
    final = next(s for s in result.evaluated if s.candidate.key == final_key)
    solved = final.outcome.passed
    return {
        "problem": problem.name, "start": problem.start, "start_status": result.baseline.outcome.status,
        "solved": solved, "speedup": _speedup_vs_reference(final.outcome) if solved else 0.0,
        "start_speedup": _speedup_vs_reference(result.baseline.outcome) if result.baseline.outcome.passed else 0.0,
        "verified_gain_over_start": result.winner.speedup if result.winner else 1.0,
        "evaluations": len(result.evaluated), "statuses": dict(_count(s.outcome.status for s in result.evaluated)),
        "stop_reason": result.stop_reason, "wall_s": round(time.perf_counter() - t0, 1),
        "hardware": str(result.baseline.outcome.environment.get("hardware", "unknown")), "device": result.device,
    }


def _count(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for i in items:
        out[i] = out.get(i, 0) + 1
    return out


def render(rows: Sequence[dict[str, Any]], agg: dict[str, Any], programmer: str) -> str:
    lines = []
    if rows and rows[0]["device"] != "cuda":
        lines += ["> CPU run (Triton interpreter): the protocol runs, the speedups are not GPU speedups.", ""]
    lines += [f"Programmer `{programmer}`, {agg['tasks']} tasks on {rows[0]['hardware'] if rows else '-'}:", "",
              "| problem | start | solved | speedup vs torch | start vs torch | verified gain | evaluations | wall s |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['problem']} | {r['start']} ({r['start_status']}) | {'yes' if r['solved'] else 'no'} | "
                     f"{r['speedup']:.2f}x | {r['start_speedup']:.2f}x | {r['verified_gain_over_start']:.2f}x | "
                     f"{r['evaluations']} | {r['wall_s']} |")
    g = agg["geomean_by_cap"]
    fp = agg["fast_p"]
    lines += ["", "| geomean (cap " + f"{agg['cap']:g}" + ") | " + " | ".join(f"cap {k}" for k in g) +
              " | " + " | ".join(f"fast_{k}" for k in fp) + " |",
              "|---|" + "---|" * (len(g) + len(fp)),
              f"| {agg['geomean']:.2f}x | " + " | ".join(f"{v:.2f}x" for v in g.values()) + " | " +
              " | ".join(f"{v:.0%}" for v in fp.values()) + " |"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--problems", nargs="*", default=[str(PROBLEMS)], help="problem files or folders of them")
    p.add_argument("--programmer", default="tuner", choices=("tuner", "llm"))
    p.add_argument("--start", choices=("solution", "reference"), help="default: solution (tuner), reference (llm)")
    p.add_argument("--budget", type=int, default=8, help="evaluations per problem, starting point included")
    p.add_argument("--minutes", type=float, default=10.0, help="wall-clock limit per problem")
    p.add_argument("--search", default="mcts", choices=("mcts", "greedy"))
    p.add_argument("--feedback", choices=("none", "raw", "tools"),
                   help="profiling reaching the programmer; default: tools for llm (the paper), none for the tuner")
    p.add_argument("--cap", type=float, default=25.0, help="outlier cap for the headline geomean (0: none)")
    p.add_argument("--strict", action="store_true", help="kernelpro's dtype tolerances instead of KernelBench's 1e-2")
    p.add_argument("--scale", type=int, default=1,
                   help="KERNELBENCH_SCALE for the bundled problems (1: CI sizes; 64: GPU sizes)")
    p.add_argument("--out", default="benchmark-out")
    args = p.parse_args(argv)
    os.environ.setdefault("KERNELPRO_PROGRESS", "0")
    os.environ["KERNELBENCH_SCALE"] = str(args.scale)
    settings = Settings.from_env()
    device = settings.resolved_device()
    programmer = load_programmer(args.programmer, settings)
    start = args.start or ("solution" if args.programmer == "tuner" else "reference")
    files: list[Path] = []
    for item in map(Path, args.problems):
        files += sorted(f for f in item.glob("*.py")) if item.is_dir() else [item]
    if not files:
        raise SystemExit(f"no problem files in {' '.join(args.problems)}")
    out = Path(args.out) / "kernelbench"
    feedback = args.feedback or ("tools" if args.programmer == "llm" else "none")
    rs = RunSettings(search=args.search, budget=args.budget, feedback=feedback,
                     evaluation=EvalSettings(device=device, time_reference=True))
    rows = []
    work = Path(tempfile.mkdtemp(prefix="kernelbench-"))
    try:
        for f in files:
            problem = load_problem(f, work, start, args.strict, Budget(args.budget, args.minutes, 300.0))
            shutil.rmtree(out / problem.name, ignore_errors=True)  # fresh search, not a journal resume
            rows.append(run_problem(problem, out, programmer, rs))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    agg = score(rows, args.cap or None)
    data = {"programmer": args.programmer, "start": start, "search": args.search, "budget": args.budget,
            "feedback": feedback,
            "device": device, "rows": rows, "aggregate": agg}
    out.mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "kernelbench.json").write_text(json.dumps(data, indent=2) + "\n")
    print(render(rows, agg, args.programmer))
    return data


if __name__ == "__main__":
    main()
