"""Benchmark: energy per call measured with NVML, and the choice energy-aware mode makes.

    python benchmarks/energy.py --out DIR [--windows K] [--repeats N] [--parts repeat,aa,swish,select]

(a) repeatability: one kernel measured --repeats times (K windows each): spread of the medians
    (target <= 3 %); (b) an A/A pair (the same kernel in two arms): the ratio's interval must
    contain 1; (c) the paper's Swish case: a memory-bound elementwise kernel with an IEEE division
    (tl.math.div_rn, div.rn.f32) against a fast one (`/`, div.full.f32; and libdevice.fast_dividef,
    div.approx.f32, the paper's __fdividef), same speed: the measured energy difference with its
    interval; (d) `optimize` on a tiny Swish target whose candidates are {ieee, fast} in passive and in
    active mode: active keeps the one with less measured energy, passive the speed-only choice.

Prints markdown tables and writes DIR/energy.json. About 4 minutes on an H200. Without NVML (any CPU
machine; --tiny) it prints "NVML unavailable: ..." and exits 0 after writing the reason to the JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelpro.runner.candidate import Candidate
from kernelpro.runner.energy import (
    ChildRunner,
    EnergySettings,
    EnergyUnavailable,
    NvmlDevice,
    measure,
    nvml_meter,
)
from kernelpro.runner.target import Target
from kernelpro.runner.trace import BuildSpec, Definition, Solution, SourceFile, Workload

DEFINITION = Definition.from_json({
    "name": "swish_f32", "op_type": "elementwise", "axes": {"M": {"type": "var"}},
    "inputs": {"x": {"shape": ["M"], "dtype": "float32"}}, "outputs": {"y": {"shape": ["M"], "dtype": "float32"}},
    "reference": "import torch\n\ndef run(x):\n    return x * torch.sigmoid(x)\n",
    "description": "Swish (SiLU), KernelBench level 1: memory-bound, one load and one store per element.",
})

KERNEL = '''import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import libdevice  # noqa: F401


@triton.jit
def _swish_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = {expr}
    tl.store(y_ptr + offs, y, mask=mask)


def swish(x):
    y = torch.empty_like(x)
    n = x.numel()
    _swish_kernel[(triton.cdiv(n, {block}),)](x, y, n, BLOCK={block}, num_warps={warps})
    return y
'''

# The same computation, three divisions. Triton's `/` on fp32 is div.full.f32 (MUFU.RCP-based, 2 ulp),
# tl.math.div_rn is IEEE div.rn.f32 (a refinement sequence with a slow-path branch), and
# libdevice.fast_dividef is div.approx.f32, CUDA's __fdividef (it does not run in the interpreter).
VARIANTS = {
    "ieee": "tl.math.div_rn(x, 1.0 + tl.exp(-x))",
    "fast": "x / (1.0 + tl.exp(-x))",
    "approx": "libdevice.fast_dividef(x, 1.0 + tl.exp(-x))",
}
FILE = "kernels/swish.py"


def solution(name: str, variant: str, block: int = 1024, warps: int = 4) -> Solution:
    src = KERNEL.format(expr=VARIANTS[variant], block=block, warps=warps)
    return Solution(name, DEFINITION.name, "benchmark", BuildSpec("triton", ("cuda",), f"{FILE}::swish", destination_passing_style=False),
                    (SourceFile(FILE, src),))


def target(root: Path, m: int, m_cpu: int = 4096) -> Target:
    """A repository checkout whose kernel (the baseline) is the IEEE Swish with a poor launch: 64 per program."""
    (root / "kernels").mkdir(parents=True, exist_ok=True)
    (root / FILE).write_text(solution("baseline", "ieee", block=64, warps=2).sources[0].content)
    return Target("swish", "triton", (FILE,), f"{FILE}::swish", DEFINITION, (Workload.make(DEFINITION, {"M": m}),),
                  (Workload.make(DEFINITION, {"M": m_cpu}),), bytes="8*M", flops="4*M")


class FixedProgrammer:
    """Proposes exactly the given candidates, once, from the baseline: a fixed candidate set."""

    name = "fixed"

    def __init__(self, variants: Sequence[str]) -> None:
        self.variants = list(variants)
        self.done = False

    def propose(self, parent: Any, mode: str, n: int, context: Any) -> list[Candidate]:
        if self.done or parent.candidate.parent is not None:
            return []
        self.done = True
        return [Candidate(solution(f"swish-{v}", v), parent.candidate.key, "optimize", f"{v} division, 1024 per program",
                          {"division": v}) for v in self.variants]


def _request(sol: Solution, w: Workload, device: str) -> dict[str, Any]:
    return {"definition": DEFINITION.to_json(), "solution": sol.to_json(), "workload": w.to_json(), "device": device}


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def _ci(i: dict[str, float] | Any, fmt: str = "{:.4g}") -> str:
    d = i if isinstance(i, dict) else i.__dict__
    return f"{fmt.format(d['median'])} ({fmt.format(d['low'])}-{fmt.format(d['high'])})"


def part_repeat(dev: Any, w: Workload, s: EnergySettings, repeats: int, device: str = "cuda") -> dict[str, Any]:
    runner = ChildRunner({"swish": _request(solution("swish-fast", "fast"), w, device)}, s.timeout_s)
    runs = []
    try:
        for i in range(repeats):
            m = measure(dev, runner, ["swish"], s if i == 0 else replace(s, warmup_s=0.5))
            a = m.arms["swish"]
            runs.append({"dynamic_mj": a.dynamic_mj.median, "total_mj": a.total_mj.median, "idle_w": m.idle_w,
                         "ms_per_call": a.ms_per_call, "notes": list(m.notes),
                         "counter_update_ms": m.counter_update_ms})
    finally:
        runner.close()
    dyn = [r["dynamic_mj"] for r in runs]
    tot = [r["total_mj"] for r in runs]
    spread = {"dynamic": (max(dyn) - min(dyn)) / abs(statistics.median(dyn) or math.nan),
              "total": (max(tot) - min(tot)) / abs(statistics.median(tot) or math.nan)}
    return {"runs": runs, "spread": spread, "target": 0.03, "ok": spread["dynamic"] <= 0.03}


def part_pair(dev: Any, w: Workload, s: EnergySettings, arms: dict[str, Solution], device: str = "cuda") -> dict[str, Any]:
    runner = ChildRunner({a: _request(sol, w, device) for a, sol in arms.items()}, s.timeout_s)
    try:
        m = measure(dev, runner, list(arms), s)
    finally:
        runner.close()
    return m.to_json()


def part_timing(w: Workload, variants: Sequence[str], device: str = "cuda") -> dict[str, Any]:
    from kernelpro.runner.evaluator import EvalSettings, evaluate
    from kernelpro.runner.target import Tolerance

    out = {}
    for v in variants:
        o = evaluate(DEFINITION, solution(f"swish-{v}", v), [w], Tolerance(), EvalSettings(device=device, reps=200))
        t = o.results[0].timing if o.results else None
        out[v] = {"status": o.status, "median_ms": t.median_ms if t else None, "p10_ms": t.p10_ms if t else None,
                  "p90_ms": t.p90_ms if t else None, "log": o.log[-500:]}
    return out


def part_select(tmp: Path, m: int, device: str, s: EnergySettings, profile: bool,
                open_device: Any = NvmlDevice) -> dict[str, Any]:
    from kernelpro.runner.evaluator import EvalSettings
    from kernelpro.runner.optimize import RunSettings, optimize

    out = {}
    for mode in ("passive", "active"):
        root = tmp / mode
        t = target(root / "repo", m)
        rs = RunSettings(search="greedy", budget=3, gate_top=3, energy=mode, evaluation=EvalSettings(device=device),
                         feedback="tools" if profile and mode == "active" else "none")
        t0 = time.perf_counter()
        r = optimize(t, root / "repo", root / "out", FixedProgrammer(["ieee", "fast"]), rs,
                     meter=nvml_meter(device, s, open_device=open_device))
        e = r.energy
        out[mode] = {
            "seconds": round(time.perf_counter() - t0, 1),
            "winner": r.winner.candidate.params.get("division") if r.winner else None,
            "speed_only_choice": next((g.candidate.params.get("division") for g in r.gates if g.passed), None),
            "gates": [{"division": g.candidate.params.get("division"), "passed": g.passed, "speedup": g.speedup,
                       "reason": g.reason} for g in r.gates],
            "energy": e.to_json() if e else None,
            "ratios": {e.arms[a]: e.ratio(a) for a in e.arms if a != "baseline"} if e else {},
            "choice": e.choice if e else "",
            "proxy_terms": len(e.proxy) if e else 0,
        }
        print(json.dumps({mode: out[mode]}, default=str))  # each mode as it ends: a cut run keeps the first
    return out


def main(argv: Sequence[str] | None = None, *, open_device: Any = NvmlDevice, device: str = "cuda") -> int:
    """``open_device`` and ``device`` let a CPU test drive every part through a replayed counter."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--out", default="benchmark-out")
    p.add_argument("--tiny", action="store_true", help="small shapes (CPU smoke run)")
    p.add_argument("--windows", type=int, default=5, help="windows per arm (K)")
    p.add_argument("--window-s", type=float, default=1.0, help="window length (>= 1 s on real hardware)")
    p.add_argument("--repeats", type=int, default=10, help="measurements in the repeatability part")
    p.add_argument("--parts", default="repeat,aa,swish,select")
    p.add_argument("--no-profile", action="store_true", help="active selection without ncu (no proxy)")
    args = p.parse_args(argv)
    os.environ.setdefault("KERNELPRO_PROGRESS", "0")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        dev = open_device()
    except EnergyUnavailable as e:
        print(f"{e}. Nothing measured; run this on a machine with an NVIDIA GPU and its driver.")
        report.update(nvml="unavailable", reason=str(e))
        (out / "energy.json").write_text(json.dumps(report, indent=2) + "\n")
        return 0
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        print("NVML unavailable to torch: NVML sees a GPU but torch has no CUDA device; nothing measured.")
        report.update(nvml="no cuda device for torch")
        (out / "energy.json").write_text(json.dumps(report, indent=2) + "\n")
        getattr(dev, "close", lambda: None)()
        return 0
    m = 4096 if args.tiny else 64 * 1024 * 1024  # 64M fp32: 256 MB in, 256 MB out per call
    w = Workload.make(DEFINITION, {"M": m})
    s = EnergySettings(window_s=args.window_s, windows=args.windows)
    parts = set(args.parts.split(","))
    report.update(device=dev.name, workload={"M": m}, settings=s.__dict__)
    t_all = time.perf_counter()
    print(f"# Energy on {dev.name}: Swish, M = {m} fp32 ({8 * m / 1e9:.2f} GB moved per call)\n")
    try:
        if "repeat" in parts:
            t0 = time.perf_counter()
            rep = part_repeat(dev, w, replace(s, windows=3, idle_windows=2), args.repeats, device)
            report["repeatability"] = rep
            print(f"## (a) Repeatability: {args.repeats} measurements of 3 windows each ({time.perf_counter() - t0:.0f} s)\n")
            print("| run | dynamic mJ/call | total mJ/call | idle W | ms/call |\n|---|---|---|---|---|")
            for i, r in enumerate(rep["runs"], 1):
                print(f"| {i} | {r['dynamic_mj']:.4g} | {r['total_mj']:.4g} | {r['idle_w']:.1f} | {r['ms_per_call']:.4g} |")
            print(f"\nSpread of the medians (max-min)/median: dynamic {_pct(rep['spread']['dynamic'])}, total "
                  f"{_pct(rep['spread']['total'])} (target <= 3 %: {'met' if rep['ok'] else 'NOT met'}); counter "
                  f"updates every {rep['runs'][0]['counter_update_ms'] or float('nan'):.1f} ms\n")
        if "aa" in parts:
            t0 = time.perf_counter()
            aa = part_pair(dev, w, s, {"a": solution("swish-fast", "fast"), "a2": solution("swish-fast-2", "fast")}, device)
            report["aa"] = aa
            r = aa["ratios"]["a2"]
            print(f"## (b) A/A pair ({time.perf_counter() - t0:.0f} s)\n")
            print(f"Ratio a2/a: {_ci(r, '{:.4f}')}: {'contains 1 (no significant difference)' if r['low'] <= 1 <= r['high'] else 'EXCLUDES 1'}\n")
        if "swish" in parts:
            t0 = time.perf_counter()
            timing = part_timing(w, ["ieee", "fast", "approx"], device)
            pair = part_pair(dev, w, s, {"ieee": solution("swish-ieee", "ieee"), "fast": solution("swish-fast", "fast")},
                             device)
            approx = None
            if timing["approx"]["status"] == "PASSED":
                approx = part_pair(dev, w, s, {"ieee": solution("swish-ieee", "ieee"),
                                               "approx": solution("swish-approx", "approx")}, device)
            report["swish"] = {"timing": timing, "ieee_vs_fast": pair, "ieee_vs_approx": approx}
            print(f"## (c) Swish, IEEE vs fast division ({time.perf_counter() - t0:.0f} s)\n")
            print("| division | status | CUDA-event ms (p10-p90) | dynamic mJ/call (95 % CI) | total mJ/call (95 % CI) | vs ieee (95 % CI) |")
            print("|---|---|---|---|---|---|")
            for v, mm in (("ieee", pair), ("fast", pair), ("approx", approx)):
                t = timing[v]
                ms = f"{t['median_ms']:.4f} ({t['p10_ms']:.4f}-{t['p90_ms']:.4f})" if t["median_ms"] else "n/a"
                if mm is None or v not in mm["arms"]:
                    print(f"| {v} | {t['status']} | {ms} | n/a | n/a | n/a |")
                    continue
                a = mm["arms"][v]
                ratio = _ci(mm["ratios"][v], "{:.4f}") if v in mm["ratios"] else "reference"
                print(f"| {v} | {t['status']} | {ms} | {_ci(a['dynamic_mj'])} | {_ci(a['total_mj'])} | {ratio} |")
            print()
        if "select" in parts:
            t0 = time.perf_counter()
            with tempfile.TemporaryDirectory(prefix="kernelpro-energy-bench-") as tmp:
                sel = part_select(Path(tmp), m, device, s, not args.no_profile, open_device)
            report["select"] = sel
            print(f"## (d) The choice among {{ieee, fast}} by mode ({time.perf_counter() - t0:.0f} s)\n")
            print("| mode | gates (division: speedup) | energy vs baseline | published | speed-only choice | why |")
            print("|---|---|---|---|---|---|")
            for mode, r in sel.items():
                gates = ", ".join(f"{g['division']}: {g['speedup']:.3f}x{'' if g['passed'] else ' (failed)'}" for g in r["gates"])
                ratios = ", ".join(f"{k}: {v:.4f}" if v is not None else f"{k}: n/a" for k, v in r["ratios"].items())
                print(f"| {mode} | {gates} | {ratios} | {r['winner']} | {r['speed_only_choice']} | {r['choice']} |")
            print()
    finally:
        getattr(dev, "close", lambda: None)()
        report["seconds"] = round(time.perf_counter() - t_all, 1)
        (out / "energy.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"Total {report['seconds']} s; JSON in {out / 'energy.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
