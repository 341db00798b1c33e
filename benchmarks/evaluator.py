"""Benchmark: is the evaluator's measurement trustworthy and fast? Three numbers, on the demo's kernel.

    python benchmarks/evaluator.py --out DIR [--device cuda|cpu] [--tiny]

(a) A/A: the same kernel as baseline and candidate through the final gate (runner/optimize.py
    ``_gate``: B-C-B interleaved, each a fresh sandboxed evaluation); every workload row is one gate
    decision; the rate of rows that call the copy "faster" (speedup >= gamma). Target <= 1 %.
(b) Repeat timing of one kernel of >= 50 us: the median of 10 separate evaluations; spread is
    max/min of those medians. Target <= 2 %.
(c) Throughput: wall time of one full evaluation (build with a cold Triton cache, 5-trial verify,
    timing) of the small Triton kernel; median over runs, the reference child already cached.
    Target <= 5 s.

Prints a markdown table and writes DIR/evaluator.json. ``--tiny`` (with ``--device cpu``: Triton's
interpreter) runs each part at the smallest size, to check the script itself; its numbers mean
nothing. Defaults keep the GPU time near 4 minutes on an H200.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelpro.runner.candidate import Candidate
from kernelpro.runner.evaluator import EvalSettings, evaluate
from kernelpro.runner.optimize import RunSettings, _gate
from kernelpro.runner.target import Target, Tolerance
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile, Workload, load_definition

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"
ENTRY = "kernels/swiglu.py"


def _solution(name: str, source: str) -> Solution:
    spec = BuildSpec("triton", ("cuda",), f"{ENTRY}::swiglu", destination_passing_style=False)
    return Solution(name, "swiglu_f32_h4096", "benchmark", spec, (SourceFile(ENTRY, source),))


def _target(workloads: tuple[Workload, ...]) -> Target:
    definition = load_definition(DEMO / "commit1" / "definitions" / "swiglu.json")
    return Target("swiglu", "triton", (ENTRY,), f"{ENTRY}::swiglu", definition, workloads)


# The A/A's kernels: the demo's (one Triton launch), or the same function in two PyTorch launches
# (silu, then the product). The GPU's 100 us wait hides the host's submission of a call only while
# the host enqueues all of it within the wait; session 21's two-launch candidate of 7 us ran at
# 17-46 us in a third of its evaluations, in both arms of benchmarks/confinement.py.
AA_KERNELS = {"demo": None, "torch2": "import torch\n\n\ndef swiglu(a, b):\n    return torch.nn.functional.silu(a) * b\n"}


def aa(device: str, gates: int, copies: int, m: int, cache: Path, fork: bool = False, hold: float = 0.0,
       kernel: str = "demo") -> dict[str, Any]:
    base = _target(())
    workloads = tuple(Workload.make(base.definition, {"M": m}, uuid=f"aa-{i}") for i in range(copies))
    target = replace(base, workloads=workloads)
    source = AA_KERNELS[kernel] or (DEMO / "commit2" / ENTRY).read_text()
    a = Candidate(_solution("A", source), None, "init", "baseline")
    b = Candidate(_solution("A-copy", source), None, "init", "the same kernel")
    # One verification trial: this part measures the gate's timing path; (c) measures verification.
    rs = RunSettings(gate_trials=1, evaluation=EvalSettings(device=device, cache_dir=cache, timeout_s=600, fork_server=fork,
                                                            hold_us=hold))
    speedups: list[float] = []
    needed: list[float] = []
    failures: list[str] = []
    passes = 0
    for _ in range(gates):
        g = _gate(target, a, b, workloads, rs)
        if not g.per_workload:
            failures.append(g.reason)
        passes += g.passed
        speedups += [float(r["speedup"]) for r in g.per_workload]
        needed += [float(r["needed"]) for r in g.per_workload]
    # 'faster' is what the gate credits a workload with: its speedup reaches gamma or the baseline's
    # own spread where wider (runner/gate.py); 'over_gamma' the bare gamma of the gate before session 22.
    faster = sum(s >= n for s, n in zip(speedups, needed, strict=True))
    over_gamma = sum(s >= rs.gamma for s in speedups)
    return {"speedups": [round(x, 4) for x in speedups], "needed": [round(x, 4) for x in needed],
            "decisions": len(speedups), "false_faster": faster, "rate": faster / max(len(speedups), 1),
            "over_gamma": over_gamma, "over_gamma_rate": over_gamma / max(len(speedups), 1),
            "gates": gates, "gates_passed": passes,
            "gamma": rs.gamma, "speedup_min": min(speedups, default=0.0), "speedup_max": max(speedups, default=0.0),
            "speedup_median": statistics.median(speedups) if speedups else 0.0, "M": m, "kernel": kernel,
            "failures": failures}


def repeat(device: str, runs: int, m: int, cache: Path, fork: bool = False, hold: float = 0.0) -> dict[str, Any]:
    target = _target(())
    w = [Workload.make(target.definition, {"M": m}, uuid=f"rep-{m}")]
    sol = _solution("A", (DEMO / "commit2" / ENTRY).read_text())
    es = EvalSettings(device=device, trials=1, cache_dir=cache, timeout_s=600, fork_server=fork, hold_us=hold)
    medians, failures = [], []
    for _ in range(runs):
        o = evaluate(target.definition, sol, w, Tolerance(), es)
        if o.passed:
            medians.append(o.latency(w[0].uuid))
        else:
            failures.append(f"{o.status}: {o.log[-300:]}")
    spread = max(medians) / min(medians) - 1 if medians else float("nan")
    return {"runs": len(medians), "medians_ms": medians, "spread": spread, "M": m, "failures": failures}


def throughput(device: str, runs: int, m: int, tmp: Path, fork: bool = False, timeline: bool = False) -> dict[str, Any]:
    target = _target(())
    w = [Workload.make(target.definition, {"M": m}, uuid=f"thr-{m}")]
    source = (DEMO / "commit2" / ENTRY).read_text()
    walls, phases, failures = [], [], []
    for i in range(runs + 1):  # the first pays for the reference child too; it is reported apart
        es = EvalSettings(device=device, trials=5, cache_dir=tmp / f"cold-cache-{i}", timeout_s=600, fork_server=fork,
                          timeline=timeline)
        t0 = time.perf_counter()
        o = evaluate(target.definition, _solution(f"thr{i}", source), w, Tolerance(), es)
        walls.append(time.perf_counter() - t0)
        phases.append({k: round(float(v), 2) for k, v in o.phases.items()}
                      | {"build": round(o.build_seconds, 2), "child": round(o.wall_seconds, 2)})
        if not o.passed:
            failures.append(f"{o.status}: {o.log[-300:]}")
    steady = walls[1:]
    return {"runs": len(steady), "median_s": statistics.median(steady), "first_with_reference_s": walls[0],
            "walls_s": walls, "phases": phases, "M": m, "trials": 5, "failures": failures, "timeline": timeline}


class Clocks:
    """The GPU's SM clock, sampled through NVML every 10 ms while a part runs (this process never
    makes a CUDA context): whether the H200's clock, 345 MHz at idle, moves under the timed calls
    is what decides whether a ~10 us kernel's A/A is stable (results-h200-session10)."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Clocks:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML (a CPU run): no samples
            return self

        def sample() -> None:
            while not self._stop.wait(0.01):
                self.samples.append(int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(1)

    def summary(self) -> dict[str, Any]:
        s = sorted(self.samples)
        if not s:
            return {"samples": 0}
        return {"samples": len(s), "min_mhz": s[0], "p10_mhz": s[len(s) // 10], "median_mhz": s[len(s) // 2],
                "max_mhz": s[-1], "below_1000_mhz": sum(x < 1000 for x in s) / len(s)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="benchmark-out", help="folder for evaluator.json")
    p.add_argument("--device", choices=("cuda", "cpu"), default=os.environ.get("KERNELPRO_DEVICE", "cuda"))
    p.add_argument("--tiny", action="store_true", help="smallest sizes: checks the script, numbers mean nothing")
    p.add_argument("--aa-gates", type=int, default=4)
    p.add_argument("--aa-copies", type=int, default=25, help="workload copies per gate: decisions per gate")
    p.add_argument("--repeat-runs", type=int, default=10)
    p.add_argument("--throughput-runs", type=int, default=5)
    p.add_argument("--aa-kernel", default="demo", choices=sorted(AA_KERNELS),
                   help="the A/A's kernel: demo (one Triton launch) or torch2 (two PyTorch launches)")
    p.add_argument("--parts", default="aa,repeat,throughput", help="which of aa, repeat, throughput to run")
    p.add_argument("--throughput-timeline", action="store_true",
                   help="the throughput's evaluations also record the launch timeline, as a search's new best does "
                        "(EvalSettings.timeline; GPU only): its phase, CUPTI's start-up mostly, in the phases")
    p.add_argument("--hold-us", type=float, default=EvalSettings().hold_us,
                   help="microseconds the GPU waits before each timed call's start event (EvalSettings.hold_us)")
    p.add_argument("--fork-server", action=argparse.BooleanOptionalAction, default=True,
                   help="fork each child from the fork server (EvalSettings.fork_server, the default); "
                        "--no-fork-server starts a fresh interpreter per child")
    args = p.parse_args(argv)
    if args.device == "cuda" and args.tiny:
        p.error("--tiny is the CPU check of this script; on the GPU run the defaults")
    tiny = args.tiny
    m_aa, m_rep, m_thr = (1, 1, 1) if tiny else (512, 8192, 256)
    gates, copies = (1, 2) if tiny else (args.aa_gates, args.aa_copies)
    reps, thr = (2, 1) if tiny else (args.repeat_runs, args.throughput_runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kernelpro-bench-") as tmp:
        cache = Path(tmp) / "triton-cache"
        res: dict[str, Any] = {"device": args.device, "tiny": tiny, "fork_server": args.fork_server,
                               "hold_us": args.hold_us}
        fork = args.fork_server
        parts = (("aa", lambda: aa(args.device, gates, copies, m_aa, cache, fork, args.hold_us, args.aa_kernel)),
                 ("repeat", lambda: repeat(args.device, reps, m_rep, cache, fork, args.hold_us)),
                 ("throughput", lambda: throughput(args.device, thr, m_thr, Path(tmp), fork, args.throughput_timeline)))
        chosen = set(args.parts.split(","))
        if chosen - {"aa", "repeat", "throughput"}:
            p.error(f"--parts: unknown {sorted(chosen - {'aa', 'repeat', 'throughput'})}")
        for name, part in parts:
            if name not in chosen:
                continue
            t1 = time.perf_counter()
            with Clocks() as clocks:
                res[name] = part()
            res[name]["sm_clock"] = clocks.summary()
            print(f"[{name}: {time.perf_counter() - t1:.0f} s]", file=sys.stderr, flush=True)
            # Written after every part: a run stopped by a time limit still leaves what it measured.
            (out / "evaluator.json").write_text(json.dumps(res, indent=2) + "\n")
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    (out / "evaluator.json").write_text(json.dumps(res, indent=2) + "\n")
    if args.device != "cuda":
        print("> CPU run (Triton interpreter): these are not GPU timings.\n")
    print("| measurement | value | target | met |")
    print("|---|---|---|---|")
    problems: list[str] = []
    if (a := res.get("aa")) is not None:
        print(f"| A/A false 'faster' ({a['kernel']}, M={a['M']}; gamma {a['gamma']} or the baseline's spread) | "
              f"{a['false_faster']}/{a['decisions']} = {a['rate']:.1%} (speedups {a['speedup_min']:.3f}.."
              f"{a['speedup_max']:.3f}; {a['gates_passed']}/{a['gates']} gates passed) | <= 1 % | "
              f"{'yes' if a['rate'] <= 0.01 and a['decisions'] else 'NO'} |")
        print(f"| the same speedups over the bare gamma {a['gamma']} | {a['over_gamma']}/{a['decisions']} = "
              f"{a['over_gamma_rate']:.1%} | - | - |")
        problems += a["failures"]
        c = a.get("sm_clock", {})
        if c.get("samples"):
            print(f"| SM clock during the A/A (NVML, every 10 ms) | {c['min_mhz']}..{c['max_mhz']} MHz, median "
                  f"{c['median_mhz']}, {c['below_1000_mhz']:.0%} of samples below 1 GHz | - | - |")
    if (r := res.get("repeat")) is not None:
        med = r["medians_ms"]
        print(f"| repeat timing spread, M={r['M']} ({statistics.median(med) * 1e3 if med else float('nan'):.1f} us) | "
              f"{r['spread']:.2%} over {r['runs']} runs | <= 2 % (kernels >= 50 us) | "
              f"{'yes' if r['spread'] <= 0.02 else 'NO'} |")
        problems += r["failures"]
    if (t := res.get("throughput")) is not None:
        print(f"| full evaluation, small Triton kernel (M={t['M']}, 5 trials, cold Triton cache) | "
              f"{t['median_s']:.2f} s median (first, with the reference child: {t['first_with_reference_s']:.2f} s) | "
              f"<= 5 s | {'yes' if t['median_s'] <= 5 else 'NO'} |")
        if spent := [ph["timeline"] for ph in t["phases"][1:] if "timeline" in ph]:
            print(f"| of which the launch timeline (--throughput-timeline) | {statistics.median(spent):.2f} s median "
                  f"of {len(spent)} | - | - |")
        problems += t["failures"]
    for f in problems:
        print(f"\nFAILED EVALUATION: {f}", file=sys.stderr)
    print(f"\nwall time {res['wall_s']} s; JSON in {out / 'evaluator.json'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
