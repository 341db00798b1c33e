"""Benchmark: does the order of evaluation bias a comparison? A replay's two kernels evaluated
alternately, head, base, head, base, head, each in its own child as the loop does.

    python benchmarks/order.py [--only NAME ...] [--rounds N] [--out DIR]

The optimize loop measures the pull request's kernel first (its evaluation also computes the
reference outputs) and the base branch's kernel second, and reports their ratio. If the first
evaluation of a run were systematically faster or slower, that ratio would carry the bias and the
same pair replayed in both directions would disagree. Here each kernel is measured several times
in alternation: within-kernel spread across evaluations against the between-kernel difference.
Prints a markdown table and writes DIR/order.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from replays import CORPUS, REPLAYS, _site, make_repo

from kernelpro.runner.config import load_config
from kernelpro.runner.evaluator import EvalSettings, evaluate
from kernelpro.workspace import checkouts


def run_pair(name: str, rounds: int, device: str, tmp: Path) -> list[dict[str, Any]]:
    replay = next(r for r in REPLAYS if r.name == name)
    repo = make_repo(tmp / name, replay, "forward", device == "cuda", 3)
    rows = []
    with checkouts(repo, "HEAD~1", "HEAD") as co:
        config = load_config(co.base / ".kernelpro.yml", co.base)
        (target,) = config.targets
        sides = {"head": target.solution(co.head), "base": target.solution(co.base, name=f"{target.name}-base")}
        workloads = target.workloads_for(device)
        order = [("head", "base")[i % 2] for i in range(2 * rounds + 1)]
        for i, side in enumerate(order):
            es = EvalSettings(device=device, cache_dir=tmp / f"cache-{name}-{side}")
            o = evaluate(target.definition, sides[side], workloads, target.tolerance, es)
            for r in o.results:
                t = r.timing
                rows.append({"replay": name, "index": i, "side": side, "status": o.status, "workload": r.uuid,
                             "median_ms": t.median_ms if t else math.nan, "p10_ms": t.p10_ms if t else math.nan,
                             "p90_ms": t.p90_ms if t else math.nan, "n": t.n if t else 0,
                             "wall_s": round(o.wall_seconds, 2)})
            print(f"[{name}] {i + 1}/{len(order)} {side}: {o.status} "
                  + ", ".join(f"{r.timing.median_ms:.4f} ms" for r in o.results if r.timing), flush=True)
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = ["| replay | workload | evaluation order: median ms (p10-p90) | head spread % | base spread % | head/base |",
             "|---|---|---|---|---|---|"]
    for key in sorted({(r["replay"], r["workload"]) for r in rows}):
        rs = [r for r in rows if (r["replay"], r["workload"]) == key]
        seq = ", ".join(f"{r['side'][0]}{r['index']} {r['median_ms']:.4f} ({r['p10_ms']:.4f}-{r['p90_ms']:.4f})" for r in rs)
        med = {s: [r["median_ms"] for r in rs if r["side"] == s] for s in ("head", "base")}
        spread = {s: 100 * (max(v) - min(v)) / min(v) if v else math.nan for s, v in med.items()}
        ratio = statistics.median(med["head"]) / statistics.median(med["base"]) if med["head"] and med["base"] else math.nan
        lines.append(f"| {key[0]} | {key[1]} | {seq} | {spread['head']:.1f} | {spread['base']:.1f} | {ratio:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", default=["liger-ce-exp2", "liger-dyt-autotune"],
                   choices=[r.name for r in REPLAYS])
    p.add_argument("--rounds", type=int, default=2, help="head/base pairs; one more head evaluation closes the run")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--out", default="benchmark-out")
    a = p.parse_args(argv)
    import torch

    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    rows: list[dict[str, Any]] = []
    site = _site(CORPUS)
    if site is not None:  # as replays.py: the children import liger's utilities through PYTHONPATH
        os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (str(site), os.environ.get("PYTHONPATH", "")) if x)
    try:
        with tempfile.TemporaryDirectory(prefix="order-") as tmp:
            for name in a.only:
                rows += run_pair(name, a.rounds, device, Path(tmp))
    finally:
        if site is not None:
            shutil.rmtree(site, ignore_errors=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "order.json").write_text(json.dumps(rows, indent=1))
    print(render(rows))


if __name__ == "__main__":
    main()
