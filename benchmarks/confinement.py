"""Benchmark: what the confinement (runner/confinement.py) adds to one candidate's evaluation.

    python benchmarks/confinement.py [--n 16] [--n-fork 32] [--device cpu|cuda] [--out FILE]

Evaluates the same honest candidate (the demo's SwiGLU, through the real evaluator: a reference
child once, then a sandboxed child per evaluation) ``n`` times confined and ``n`` times without
the confinement (Landlock taken away and the operator's opt-in given: the code path before issue 18,
namespaces unchanged), interleaved so that drift of the machine falls on both alike; for a fresh
interpreter and for the fork server. Two costs, each bounded at +10 %: the evaluation's wall time,
and the candidate's own median time (the kernel as the evaluator timed it, on the largest workload).
Each is judged on the Hodges-Lehmann ratio (the median of every confined/unconfined pair's ratio),
printed with a bootstrap 90 % interval and beside the plain ratio of medians: on the H200 an
evaluation's wall time is bimodal (about 0.67 s or 0.88 s through the fork server, in both arms;
session 20), so with 8 runs a ratio of medians moved with how many runs of each arm fell in the slow
mode (1.03 in session 19, 1.25 in session 20). The reference outputs are computed once per arm
before the timed evaluations (the evaluator keeps them), as a run does.

An evaluation's cost is its wall time less the time it spent refilling the reference's secret check
seeds: once every seed is handed out, the evaluator computes the reference's check outputs again in
a child of its own (runner/evaluator.py ``_reference_for``: 0.34-0.40 s through the fork server,
about 3.4 s in a fresh interpreter on the H200). That falls on whichever evaluation finds the pool
empty, whatever its arm: in session 21's first run both fork-server refills fell in the confined arm
and made +8.5 % of a cost that is +3.7 % without them. The refills are timed and reported apart.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelpro.runner import confinement, evaluator
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
_REFERENCE = evaluator._reference_for
_REFILLS: list[float] = []


def _timed_reference(*args: Any, **kwargs: Any) -> Any:
    """The evaluator's own ``_reference_for``, timed: what an evaluation spends on the reference."""
    t0 = time.perf_counter()
    try:
        return _REFERENCE(*args, **kwargs)
    finally:
        _REFILLS.append(time.perf_counter() - t0)


def time_the_reference() -> None:
    """Put ``_timed_reference`` where ``evaluate`` looks the reference up, the evaluator's module."""
    evaluator._reference_for = _timed_reference


def _solution(i: int) -> Solution:
    # A new name per evaluation: nothing is cached across them but the reference outputs.
    return Solution(f"honest-{i}", DEFINITION.name, "bench", BuildSpec("python", ("cpu", "cuda"), "cand.py::run",
                    destination_passing_style=False), (SourceFile("cand.py", SOURCE),))


def _arm(confined: bool) -> None:
    confinement.landlock_abi = REAL_ABI if confined else (lambda: 0)  # type: ignore[assignment]
    confinement.allow_unconfined(not confined)


def _once(es: EvalSettings, i: int) -> tuple[float, float, float, str, dict[str, float]]:
    """One evaluation: its wall seconds less the reference's, the reference's seconds (a refill of its
    check seeds, where one fell here), the candidate's median ms on the largest workload, the
    confinement the sandbox reported, and the evaluation's phases (where the cost sits)."""
    _REFILLS.clear()
    t0 = time.perf_counter()
    out = evaluate(DEFINITION, _solution(i), WORKLOADS, Tolerance(), es)
    seconds, reference = time.perf_counter() - t0, sum(_REFILLS)
    if not out.passed:
        raise SystemExit(f"the honest candidate did not pass: {out.status}\n{out.log[-2000:]}")
    return (seconds - reference, reference, out.latency(WORKLOADS[-1].uuid),
            str(out.environment.get("sandbox", {}).get("confinement", "")), dict(out.phases))


def hodges_lehmann(confined: list[float], unconfined: list[float], resamples: int = 2000,
                   seed: int = 0) -> tuple[float, float, float]:
    """The median of c/u over every (confined, unconfined) pair, and a bootstrap 90 % interval of it:
    robust to a bimodal machine, where the ratio of the two medians is not."""
    def hl(c: list[float], u: list[float]) -> float:
        return statistics.median(x / y for x in c for y in u)

    rng = random.Random(seed)
    boots = sorted(hl(rng.choices(confined, k=len(confined)), rng.choices(unconfined, k=len(unconfined)))
                   for _ in range(resamples))
    return hl(confined, unconfined), boots[int(0.05 * resamples)], boots[int(0.95 * resamples) - 1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=16, help="evaluations per arm through a fresh interpreter (default 16)")
    ap.add_argument("--n-fork", type=int, default=32,
                    help="evaluations per arm through the fork server (default 32: 0.7 s each on the H200, with a "
                         "bimodal timing phase)")
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    time_the_reference()
    base = EvalSettings(device=args.device, trials=3)
    report: dict[str, Any] = {"device": args.device, "n": args.n, "n_fork": args.n_fork, "landlock_abi": REAL_ABI(),
                              "namespaces": network_isolation(args.device)[1], "ways": {}}
    print(f"Landlock ABI {REAL_ABI()}; {report['namespaces']}")
    for way, fork in (("fresh interpreter", False), ("fork server", True)):
        es = replace(base, fork_server=fork)
        times: dict[str, list[float]] = {"confined": [], "unconfined": []}
        kernel: dict[str, list[float]] = {"confined": [], "unconfined": []}
        phases: dict[str, list[dict[str, float]]] = {"confined": [], "unconfined": []}
        refills: dict[str, list[float]] = {"confined": [], "unconfined": []}
        labels: dict[str, str] = {}
        for arm in times:  # a warm-up each: the reference outputs, the fork server, the first imports
            _arm(arm == "confined")
            _once(es, -1)
        for i in range(args.n_fork if fork else args.n):
            for arm in (("confined", "unconfined") if i % 2 == 0 else ("unconfined", "confined")):
                _arm(arm == "confined")
                seconds, reference, ms, labels[arm], ph = _once(es, i)
                times[arm].append(seconds)
                refills[arm].append(reference)
                kernel[arm].append(ms)
                phases[arm].append(ph)
        row: dict[str, Any] = {"times_s": times, "kernel_ms": kernel, "phases_s": phases,
                               "reference_s": refills, "confinement": labels}
        for what, xs in (("evaluation", times), ("kernel", kernel)):
            med = {arm: statistics.median(v) for arm, v in xs.items()}
            hl, lo, hi = hodges_lehmann(xs["confined"], xs["unconfined"])
            row[what] = {"median": med, "ratio_of_medians": med["confined"] / med["unconfined"],
                         "ratio": hl, "ratio_90": [lo, hi]}
            unit = "s" if what == "evaluation" else "ms"
            print(f"| {way} | {what} | confined {med['confined']:.4g} {unit} | unconfined {med['unconfined']:.4g} {unit} | "
                  f"Hodges-Lehmann {100 * (hl - 1):+.1f} % (90 %: {100 * (lo - 1):+.1f}..{100 * (hi - 1):+.1f}) | "
                  f"ratio of medians {100 * (med['confined'] / med['unconfined'] - 1):+.1f} % |")
        report["ways"][way] = row
        slow = {arm: [r for r in v if r > 0.01] for arm, v in refills.items()}
        print("    reference refills (not in the evaluation's time): " + ", ".join(
            f"{arm} {len(v)} ({', '.join(f'{r:.2f}' for r in v) or '-'} s)" for arm, v in slow.items()))
        names = sorted({k for ps in phases.values() for ph in ps for k in ph})
        print("    phase medians, confined / unconfined (s): " + ", ".join(
            f"{k} {statistics.median(ph.get(k, 0.0) for ph in phases['confined']):.3f} / "
            f"{statistics.median(ph.get(k, 0.0) for ph in phases['unconfined']):.3f}" for k in names))
        print(f"    confined as: {labels['confined']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    worst = max(w[what]["ratio"] for w in report["ways"].values() for what in ("evaluation", "kernel"))
    print(f"worst ratio {worst:.3f} ({'within' if worst <= 1.10 else 'ABOVE'} the 10 % bound)")
    return 0 if worst <= 1.10 else 1


if __name__ == "__main__":
    sys.exit(main())
