"""Benchmark: how fast CUDA candidates build (and, on a GPU, how fast one is fully evaluated).

    python benchmarks/cuda_build.py [--variants 10] [--pool-variants 0] [--evals 5] [--out cuda_build.json]

The candidates are tuner variants of examples/cuda's kernel (one knob moved each), so every one
is a distinct source. Measured:

* cold build: each variant alone into an empty cache (nvcc -cubin for sm_90a): median and p90,
  target <= 3 s median on the H200's runner;
* cache hit: the same variants again (nothing is compiled);
* NVRTC, when libnvrtc is found: the same variants compiled in-process (what a child uses without nvcc);
* pool throughput: all single-knob variants at once on every CPU core (builds per minute);
* on a GPU only: the full evaluation of a CUDA candidate (sandboxed child: build + 5-trial verify
  + timing, then the parent's judging of the outputs), median wall time, measured as
  benchmarks/evaluator.py measures a small Triton candidate: one small workload (--eval-m, default
  M=256 as there), the reference child paid once before. Target <= 6 s. ``--eval-large`` also
  measures it on the example's own workloads (M=4096 and 16384: gigabytes of outputs to judge).

Prints a markdown table and writes the numbers as JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelpro.cuda_knobs import apply_knobs, find_knobs
from kernelpro.runner.config import load_config
from kernelpro.runner.cubin import build, cache_root, default_arch, find_nvcc, prebuild
from kernelpro.runner.trace import Solution, SourceFile

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cuda"


def _variants(base: Solution) -> list[Solution]:
    """Every single-knob move of the example kernel, in source order of the knobs."""
    src = base.source(base.entry_file)
    out = []
    for knob in find_knobs(src):
        for value in knob.choices:
            if value != knob.value:
                text = apply_knobs(src, {knob.name: value})
                out.append(Solution(f"{knob.name}={value}", base.definition, "bench", base.spec,
                                    (SourceFile(base.entry_file, text),)))
    return out


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def _evaluations(target: Any, variants: list[Any], workloads: tuple[Any, ...], tmp: Path) -> dict[str, object]:
    """Full evaluations, each timed from the call to the verdict (child and judging), with a fresh
    cache per candidate (the build is part of it); the reference child is paid first, apart."""
    from kernelpro.runner.evaluator import EvalSettings, evaluate

    def settings(name: str) -> EvalSettings:
        return EvalSettings(device="cuda", trials=5, cache_dir=tmp / name)

    t0 = time.perf_counter()
    evaluate(target.definition, variants[0], workloads, target.tolerance, settings("first"))
    first = time.perf_counter() - t0
    walls, builds, phases, statuses = [], [], [], []
    for i, s in enumerate(variants):
        t0 = time.perf_counter()
        o = evaluate(target.definition, s, workloads, target.tolerance, settings(f"eval{i}"))
        walls.append(time.perf_counter() - t0)
        builds.append(o.build_seconds)
        phases.append({k: round(float(v), 2) for k, v in o.phases.items()} | {"child": round(o.wall_seconds, 2)})
        statuses.append(o.status)
    return {"eval_median_s": statistics.median(walls), "eval_all_s": walls, "eval_first_with_reference_s": first,
            "eval_build_median_s": statistics.median(builds), "eval_statuses": statuses, "eval_phases": phases,
            "eval_workloads": [dict(w.axes) for w in workloads]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", type=int, default=10, help="variants for the cold and cached build times")
    p.add_argument("--pool-variants", type=int, default=0, help="variants for the pool (0: all single moves)")
    p.add_argument("--evals", type=int, default=5, help="full evaluations on the GPU (0 to skip)")
    p.add_argument("--eval-m", type=int, default=256, help="the workload of those evaluations (M)")
    p.add_argument("--eval-large", action="store_true", help="also evaluate on the example's own workloads")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="pool size (default: all cores)")
    p.add_argument("--out", default="cuda_build.json", help="JSON results file")
    args = p.parse_args()
    if find_nvcc() is None:
        raise SystemExit("nvcc not found: install the CUDA toolkit or set CUDA_HOME")

    import shutil

    with tempfile.TemporaryDirectory(prefix="kp-cuda-bench-") as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(EXAMPLE / "commit1", repo)
        shutil.copytree(EXAMPLE / "commit2", repo, dirs_exist_ok=True)
        target = load_config(repo / ".kernelpro.yml").target("swiglu_cuda")
        base = target.solution(repo)
        variants = _variants(base)
        arch = default_arch()
        sample = variants[: args.variants]

        cold_cache = Path(tmp) / "cold"
        cold = []
        for s in sample:
            b = build({f.path: f.content for f in s.sources}, s.entry_file, cold_cache, arch=arch)
            assert b.ok and not b.cached, (s.name, b.log[-500:])
            cold.append(b.seconds)
        hits = []
        for s in sample:
            b = build({f.path: f.content for f in s.sources}, s.entry_file, cold_cache, arch=arch)
            assert b.cached
            hits.append(b.seconds)

        from kernelpro.runner.nvrtc import find_nvrtc

        nvrtc = []
        if find_nvrtc() is not None:  # the in-process alternative a child uses when nvcc is missing
            for s in sample:
                b = build({f.path: f.content for f in s.sources}, s.entry_file, Path(tmp) / "nvrtc", arch=arch,
                          compiler="nvrtc")
                assert b.ok and not b.cached, (s.name, b.log[-500:])
                nvrtc.append(b.seconds)

        pool_set = variants[: args.pool_variants] if args.pool_variants else variants
        t0 = time.perf_counter()
        built = prebuild(pool_set, Path(tmp) / "pool", arch=arch, workers=args.workers)
        pool_wall = time.perf_counter() - t0
        assert all(b.ok for b in built), [b.log[-300:] for b in built if not b.ok]

        result: dict[str, object] = {
            "arch": arch, "cpu_cores": os.cpu_count(), "workers": args.workers, "variants": len(sample),
            "cold_median_s": statistics.median(cold), "cold_p90_s": _pct(cold, 0.9), "cold_all_s": cold,
            "hit_median_s": statistics.median(hits), "pool_builds": len(pool_set), "pool_wall_s": pool_wall,
            "pool_builds_per_min": 60 * len(pool_set) / pool_wall,
            "nvrtc_median_s": statistics.median(nvrtc) if nvrtc else None,
        }

        gpu = False
        try:
            import torch

            gpu = torch.cuda.is_available()
        except ImportError:
            pass
        if gpu and args.evals:
            from kernelpro.runner.trace import Workload

            small = (Workload.make(target.definition, {"M": args.eval_m}, uuid=f"eval-m{args.eval_m}"),)
            result.update(_evaluations(target, variants[: args.evals], small, Path(tmp) / "small"))
            if args.eval_large:
                large = _evaluations(target, variants[: args.evals], target.workloads, Path(tmp) / "large")
                result.update({f"large_{k}": v for k, v in large.items()})
            hw = torch.cuda.get_device_name(0)
        else:
            hw = "no GPU"
        result["hardware"] = hw
        # The shared-cache layout the loop uses (for the record: where the harness looks).
        result["cache_layout"] = str(cache_root(Path("<triton cache>")))

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"CUDA candidate builds ({result['arch']}, {result['cpu_cores']} CPU cores, {hw})\n")
    print("| measure | value | target |")
    print("|---|---|---|")
    print(f"| cold build, median of {len(sample)} variants | {result['cold_median_s']:.2f} s | <= 3 s |")
    print(f"| cold build, p90 | {result['cold_p90_s']:.2f} s | |")
    print(f"| cache hit, median | {result['hit_median_s'] * 1000:.1f} ms | |")
    if nvrtc:
        print(f"| NVRTC (in-process) cold build, median | {result['nvrtc_median_s']:.2f} s | |")
    print(f"| pool: {len(pool_set)} builds on {args.workers} workers | {result['pool_builds_per_min']:.0f} builds/min "
          f"({pool_wall:.1f} s) | |")
    for prefix, what in (("", f"M={args.eval_m}"), ("large_", "the example's workloads, M=4096 and 16384")):
        if f"{prefix}eval_median_s" not in result:
            continue
        print(f"| full evaluation (build + 5-trial verify + timing + judging), {what}, median of {args.evals} | "
              f"{result[f'{prefix}eval_median_s']:.2f} s (build {result[f'{prefix}eval_build_median_s']:.2f} s; "
              f"first, with the reference child: {result[f'{prefix}eval_first_with_reference_s']:.2f} s) | "
              f"{'<= 6 s' if not prefix else ''} |")
    if "eval_statuses" in result:
        print(f"\nstatuses: {result['eval_statuses']} {result.get('large_eval_statuses', '')}")
    else:
        print("| full evaluation | not measured (no GPU) | <= 6 s |")


if __name__ == "__main__":
    main()
