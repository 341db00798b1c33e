"""Benchmark: what the confinement (runner/confinement.py) adds to one candidate's evaluation.

    python benchmarks/confinement.py [--n 8] [--device cpu|cuda] [--out FILE]

Evaluates the same honest candidate (the demo's SwiGLU, through the real evaluator: a reference
child once, then a sandboxed child per evaluation) ``n`` times confined and ``n`` times without
the confinement (Landlock taken away and the operator's opt-in given: the code path before issue 18,
namespaces unchanged), interleaved so that drift of the machine falls on both alike; for a fresh
interpreter and for the fork server. Prints the medians and the ratio; the confinement must add no
more than 10 % to a candidate's median time. The reference outputs are computed once per arm before
the timed evaluations (the evaluator keeps them), as a run does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelpro.runner import confinement
from kernelpro.runner.evaluator import EvalSettings, evaluate
from kernelpro.runner.sandbox import network_isolation
from kernelpro.runner.target import Tolerance
from kernelpro.runner.trace import BuildSpec, Definition, Solution, SourceFile, Workload

DEFINITION = Definition.from_json({
    "name": "swiglu_bench", "op_type": "elementwise", "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 256}},
    "inputs": {"a": {"shape": ["M", "N"], "dtype": "float32"}, "b": {"shape": ["M", "N"], "dtype": "float32"}},
    "outputs": {"out": {"shape": ["M", "N"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(a, b):\n    return torch.nn.functional.silu(a) * b\n",
})
WORKLOADS = [Workload.from_json({"axes": {"M": m}, "inputs": {"a": {"type": "random"}, "b": {"type": "random"}},
                                 "uuid": f"m{m}"}) for m in (4, 64)]
SOURCE = "import torch\n\n\ndef run(a, b):\n    return torch.nn.functional.silu(a) * b\n"
REAL_ABI = confinement.landlock_abi


def _solution(i: int) -> Solution:
    # A new name per evaluation: nothing is cached across them but the reference outputs.
    return Solution(f"honest-{i}", DEFINITION.name, "bench", BuildSpec("python", ("cpu", "cuda"), "cand.py::run",
                    destination_passing_style=False), (SourceFile("cand.py", SOURCE),))


def _arm(confined: bool) -> None:
    confinement.landlock_abi = REAL_ABI if confined else (lambda: 0)  # type: ignore[assignment]
    confinement.allow_unconfined(not confined)


def _once(es: EvalSettings, i: int) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = evaluate(DEFINITION, _solution(i), WORKLOADS, Tolerance(), es)
    seconds = time.perf_counter() - t0
    if not out.passed:
        raise SystemExit(f"the honest candidate did not pass: {out.status}\n{out.log[-2000:]}")
    return seconds, str(out.environment.get("sandbox", {}).get("confinement", ""))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="evaluations per arm and way of starting (default 8)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    base = EvalSettings(device=args.device, trials=3)
    report: dict[str, Any] = {"device": args.device, "n": args.n, "landlock_abi": REAL_ABI(),
                              "namespaces": network_isolation(args.device)[1], "ways": {}}
    print(f"Landlock ABI {REAL_ABI()}; {report['namespaces']}")
    for way, fork in (("fresh interpreter", False), ("fork server", True)):
        es = replace(base, fork_server=fork)
        times: dict[str, list[float]] = {"confined": [], "unconfined": []}
        labels: dict[str, str] = {}
        for arm in times:  # a warm-up each: the reference outputs, the fork server, the first imports
            _arm(arm == "confined")
            _once(es, -1)
        for i in range(args.n):
            for arm in (("confined", "unconfined") if i % 2 == 0 else ("unconfined", "confined")):
                _arm(arm == "confined")
                seconds, labels[arm] = _once(es, i)
                times[arm].append(seconds)
        med = {arm: statistics.median(v) for arm, v in times.items()}
        ratio = med["confined"] / med["unconfined"]
        report["ways"][way] = {"median_s": med, "ratio": ratio, "times_s": times, "confinement": labels}
        print(f"| {way} | confined {med['confined']:.3f} s | unconfined {med['unconfined']:.3f} s | "
              f"+{100 * (ratio - 1):.1f} % |")
        print(f"    confined as: {labels['confined']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    worst = max(w["ratio"] for w in report["ways"].values())
    print(f"worst ratio {worst:.3f} ({'within' if worst <= 1.10 else 'ABOVE'} the 10 % bound)")
    return 0 if worst <= 1.10 else 1


if __name__ == "__main__":
    sys.exit(main())
