"""Benchmark: the demo kernel optimized by each search strategy.

    python benchmarks/demo.py [--budget N] [--out DIR]

Prints a markdown table and writes DIR/demo.json.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from kernelpro.cli import make_demo_repo
from kernelpro.pipeline import run_optimize
from kernelpro.settings import Settings


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--budget", type=int, default=16)
    p.add_argument("--out", default="benchmark-out")
    args = p.parse_args()
    os.environ.setdefault("KERNELPRO_PROGRESS", "0")
    settings = Settings.from_env()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_demo_repo(Path(tmp) / "repo")
        for search in ("mcts", "greedy"):
            out = Path(args.out) / search
            t0 = time.perf_counter()
            run_optimize(repo, "HEAD~1", "HEAD", out, settings, kernel=None, budget=args.budget,
                         programmer_name="tuner", search=search)
            wall = time.perf_counter() - t0
            r = json.loads((out / "swiglu" / "result.json").read_text())
            best = max(c["best_speedup"] for c in r["curve"])
            to95 = next(c["evaluation"] for c in r["curve"] if c["best_speedup"] >= 0.95 * best)
            rows.append({"search": search, "device": r["device"], "hardware": r["hardware"],
                         "evaluations": r["evaluations"], "search_best": best, "evals_to_95pct": to95,
                         "verified_speedup": r["winner"]["speedup"] if r["winner"] else None,
                         "wall_s": round(wall, 1), "s_per_eval": round(wall / max(r["evaluations"], 1), 2)})
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "demo.json").write_text(json.dumps(rows, indent=2) + "\n")
    if rows and rows[0]["device"] != "cuda":
        print("> CPU run (Triton interpreter): these are not GPU timings.\n")
    print("| search | hardware | evaluations | best in search | evals to 95% | verified speedup | wall s | s/eval |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        v = f"{r['verified_speedup']:.2f}x" if r["verified_speedup"] else "none"
        print(f"| {r['search']} | {r['hardware']} | {r['evaluations']} | {r['search_best']:.2f}x | "
              f"{r['evals_to_95pct']} | {v} | {r['wall_s']} | {r['s_per_eval']} |")


if __name__ == "__main__":
    main()
