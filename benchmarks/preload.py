"""Benchmark: what a child still imports after the target's warm server preloaded (issue 22).

    python benchmarks/preload.py --file liger_kernel/ops/swiglu.py [--runs 5] [--out FILE]

The warm server imports the third-party modules the target's files import (runner/preload.py ``plan``,
read from their syntax) and, once the pull request's kernel was evaluated, the modules of those
packages that its build imported besides (``more``: Liger's package calls ``torch.compiler.disable`` at
import, which imports torch._dynamo). ``--file`` is a file of an installed package (on PYTHONPATH),
taken as the pull request's kernel with the rest of its package as the tree. For the plan alone, and
for the plan grown as the search grows it, fresh interpreters import those modules and then time the
import of the kernel's module, which every candidate's child pays (its tree is never preloaded).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

from kernelpro.runner.preload import more, plan
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile

CHILD = """
import importlib, json, sys, time
for m in json.loads(sys.argv[1]):
    try:
        importlib.import_module(m)
    except BaseException:
        pass
before = set(sys.modules)
t0 = time.perf_counter()
importlib.import_module(sys.argv[2])
seconds = time.perf_counter() - t0
top = sys.argv[2].partition(".")[0]
print(json.dumps({"seconds": seconds, "new": sorted(m for m in sys.modules if m not in before and m.partition(".")[0] != top)}))
"""


def _child(modules: tuple[str, ...], target: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(list(modules)), target], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--file", required=True, help="the kernel's file, relative to its installed package's parent")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    top = args.file.split("/")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{top} is not an installed package here (PYTHONPATH?)")
    root = Path(next(iter(spec.submodule_search_locations))).parent
    files = sorted(root.glob(f"{top}/**/*.py"))
    context = [SourceFile(str(p.relative_to(root)), p.read_text() or "#\n") for p in files if str(p.relative_to(root)) != args.file]
    kernel = SourceFile(args.file, (root / args.file).read_text())
    solution = Solution("pr", "d", "benchmark", BuildSpec("triton", ("cuda",), f"{args.file}::f"), (kernel,))
    target = args.file.removesuffix(".py").replace("/", ".")
    base = plan(solution, context).modules
    grown = (*base, *more(solution, context, _child(base, target)["new"]))
    rows = {}
    for label, modules in (("plan", base), ("plan + grown", grown)):
        runs = [_child(modules, target)["seconds"] for _ in range(args.runs)]
        rows[label] = {"preloaded": len(modules), "median_s": statistics.median(runs), "min_s": min(runs), "max_s": max(runs)}
    print(f"import of {target} in a child, after the warm server's preload ({args.runs} fresh interpreters each)")
    print("| preload | modules | median s | min..max s |")
    print("|---|---|---|---|")
    for label, r in rows.items():
        print(f"| {label} | {r['preloaded']} | {r['median_s']:.3f} | {r['min_s']:.3f}..{r['max_s']:.3f} |")
    print(f"grown by: {', '.join(grown[len(base):][:8])}{' ...' if len(grown) - len(base) > 8 else ''}")
    if args.out:
        args.out.write_text(json.dumps({"file": args.file, "rows": rows, "grown": list(grown[len(base):])}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
