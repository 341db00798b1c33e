"""Benchmark: the outputs one evaluation saves and its parent reads (issue 22).

    python benchmarks/outputs.py [--device cpu|cuda] [--m 8192] [--n 4096] [--runs 4] [--out FILE]
                                 [--pool-candidates K] [--no-ahead]

A candidate's child saves a file per trial run and per kept timed call, and the parent reads each one
whole; on the H200 Liger's SwiGLU (235 MB a file) wrote and read 16 of them per evaluation, 1.3 s of
saving in the child and about 5 s of judging in the parent (benchmarks/results-h200-session23). This
evaluates a deterministic torch candidate (silu(a) * b, float32, M x N) through the real evaluator, as
the search does (3 trials, 5 checks), ``--runs`` times after a first one that computes the reference,
and counts what the parent read (the evaluator's own ``_load``): files, megabytes, and the phases of
the child (save) and of the parent (judge while the child runs, judge after it exited), and the
parent's wait for the reference's outputs before the child (``reference``: a new reference child
whenever the secret check seeds ran out) or beside the judging (``--ahead``, the search's way,
EvalSettings.reference_ahead). ``--pool-candidates 1`` sizes the seed pool as Liger's SwiGLU gets
it on the H200 (one candidate's checks a reference). Prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelpro.runner import evaluator
from kernelpro.runner.evaluator import EvalSettings, evaluate
from kernelpro.runner.target import Tolerance
from kernelpro.runner.trace import BuildSpec, Definition, Solution, SourceFile, Workload

CANDIDATE = "import torch\n\n\ndef run(a, b):\n    return torch.nn.functional.silu(a) * b\n"


def _definition(n: int) -> Definition:
    return Definition.from_json({
        "name": f"swiglu_f32_n{n}", "op_type": "elementwise",
        "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": n}},
        "inputs": {"a": {"shape": ["M", "N"], "dtype": "float32"}, "b": {"shape": ["M", "N"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["M", "N"], "dtype": "float32"}},
        "reference": CANDIDATE,
    })


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--m", type=int, default=8192, help="rows (default 8192)")
    ap.add_argument("--n", type=int, default=4096, help="columns (default 4096: 134 MB of float32 a file)")
    ap.add_argument("--runs", type=int, default=4, help="evaluations measured after the first (default 4)")
    ap.add_argument("--reps-cpu", type=int, default=12, help="timed calls on the CPU (default 12)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    ap.add_argument("--pool-candidates", type=int, default=0,
                    help="candidates a reference's secret seeds serve (default: as POOL_BYTES allows)")
    ap.add_argument("--ahead", action=argparse.BooleanOptionalAction, default=True,
                    help="compute the next reference beside the judging, as a search does (default: on)")
    args = ap.parse_args(argv)
    definition = _definition(args.n)
    workloads = [Workload.from_json({"axes": {"M": args.m}, "inputs": {"a": {"type": "random"}, "b": {"type": "random"}},
                                     "uuid": f"m{args.m}"})]
    solution = Solution("outputs", definition.name, "benchmark",
                        BuildSpec("python", (args.device,), "cand.py::run", destination_passing_style=False),
                        (SourceFile("cand.py", CANDIDATE),))
    sizes: dict[str, int] = {}  # by name: an evaluation run again (TIMING_INCONSISTENT, once) counts once
    real = evaluator._load

    def load(path: Path, cap: int) -> Any:
        if path.parent.name == "out":
            sizes[path.name] = path.stat().st_size
        return real(path, cap)

    evaluator._load = load  # type: ignore[assignment]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kp-outputs-") as tmp:
        settings = EvalSettings(device=args.device, trials=3, checks=5, timeout_s=600, memory_limit_mb=0,
                                cache_dir=Path(tmp) / "cache", reps_cpu=args.reps_cpu, reference_ahead=args.ahead)
        if args.pool_candidates:  # the bytes one candidate's checks take, as evaluator._pool_size counts them
            evaluator.POOL_BYTES = args.pool_candidates * args.m * args.n * 4 * settings.checks
        for i in range(args.runs + 1):
            sizes.clear()
            t0 = time.perf_counter()
            o = evaluate(definition, solution, workloads, Tolerance(), settings)
            wall = time.perf_counter() - t0  # the evaluation's own, from its call to its return
            if not o.passed:
                raise SystemExit(f"the candidate did not pass: {o.status}\n{o.log[-2000:]}")
            if i:  # the first also computed the reference
                p = o.phases
                rows.append({"files": len(sizes), "mb": sum(sizes.values()) / 1e6, "save": p.get("save", 0.0),
                             "judge_during": p.get("judge_during", 0.0), "judge_tail": p.get("judge_tail", 0.0),
                             "reference": p.get("reference", 0.0), "reference_ahead": p.get("reference_ahead", 0.0),
                             "wall": wall,
                             "second_runs_identical": (o.results[0].correctness or {}).get("second_runs_identical")})
    print(f"{args.runs} evaluations on {args.device}, M={args.m} x N={args.n} float32 "
          f"({args.m * args.n * 4 / 1e6:.0f} MB an output), 3 trials, 5 checks, the next reference "
          + ("beside the judging" if args.ahead else "before the child"))
    print("| files read | MB read | save s | judge while the child ran s | judge after it exited s "
          "| reference before the child s | reference beside the judging s | wall s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['files']} | {r['mb']:.0f} | {r['save']:.2f} | {r['judge_during']:.2f} | {r['judge_tail']:.2f} "
              f"| {r['reference']:.2f} | {r['reference_ahead']:.2f} | {r['wall']:.2f} |")
    med = {k: statistics.median(r[k] for r in rows)
           for k in ("files", "mb", "save", "judge_during", "judge_tail", "reference", "reference_ahead", "wall")}
    print(f"| median {med['files']:.0f} | {med['mb']:.0f} | {med['save']:.2f} | {med['judge_during']:.2f} "
          f"| {med['judge_tail']:.2f} | {med['reference']:.2f} | {med['reference_ahead']:.2f} | {med['wall']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"device": args.device, "m": args.m, "n": args.n, "rows": rows, "median": med},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
