"""Benchmark: where the parent's judging of one evaluation's outputs goes (issue 22).

    python benchmarks/judge.py [--device cuda|cpu] [--m 16384] [--files 6] [--out FILE]

On the H200 the demo's evaluations spend more time judging than the child spends running: in session
21's tier (timing-a, 5 evaluations) judging took 39.9 s while the children ran and 17.7 s after they had
exited, against 53.3 s of child wall. Each evaluation wrote one file per trial and poison run (3 x 2 in
the search) and one per kept timed call (5 checks and about as many decoys), for each workload: 16
files. Since session 24 a second run bit for bit its first is a marker, not a file, and only the checks
are saved: 8 files (3 + 5). At M=16384 each file is 256 MB. This times the parent's steps on files of
that size, through the evaluator's own functions:

- read: ``_load`` (``read_capped_pages`` into fresh pages of its own, tensorfile's views of them);
- digest: ``digest_of`` (the committed digest of a timed call, sums and BLAKE3, recomputed where the judge placed the
  outputs: on the GPU of a CUDA evaluation, no longer on the host);
- place: ``_placed`` (to the judge's device: the candidate's output, then the reference and its float64,
  whose GPU copies the reference keeps from the first file on, as for a search's candidates);
- compare: ``comparison.compare`` on the judge's device;
- identical: the second poison run's shortcut (the harness's ``same_run``, bit for bit the first run, on the host
  copies before anything is placed).

Prints the median of each step per file and the projected judging per evaluation. ``place`` is
split into the candidate's copy and the reference's copies (0.113 s per file on the H200 host in session
22, before the reference kept them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from kernelpro.runner import tensorfile
from kernelpro.runner.comparison import compare
from kernelpro.runner.evaluator import _load, _Placed, _placed, judge_device
from kernelpro.runner.harness import same_run
from kernelpro.runner.timekeeper import digest_of

N = 4096  # the demo's hidden size


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="the evaluation's device (default cpu)")
    ap.add_argument("--m", type=int, default=16384, help="rows of the M x 4096 float32 output (default 16384: 256 MB)")
    ap.add_argument("--files", type=int, default=6, help="files judged (default 6, a search evaluation's trial runs)")
    ap.add_argument("--per-eval", type=int, default=8, help="files per workload and evaluation, for the projection "
                    "(default 8: 3 trials' first runs and 5 checks)")
    ap.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = ap.parse_args(argv)
    on = judge_device("auto", args.device)
    gen = torch.Generator().manual_seed(0)
    want = torch.randn(args.m, N, generator=gen)
    want64 = want.double()
    got = want + 1e-7 * torch.randn(args.m, N, generator=gen)
    steps: dict[str, list[float]] = {k: [] for k in ("read", "digest", "place_candidate", "place_reference",
                                                    "compare", "identical")}
    with tempfile.TemporaryDirectory(prefix="kp-judge-") as tmp:
        paths = [Path(tmp) / f"w0_t{i}_r0.kpt" for i in range(args.files)]
        for p in paths:
            tensorfile.write([got], p)
        cap = 16 * args.m * N + (1 << 20)
        previous: list[Any] = []
        # One reference for every file, as a search's candidates share theirs: its GPU copy is made once.
        judge = SimpleNamespace(device=on, fallback="", ref=SimpleNamespace(placed=_Placed()))
        for p in paths:
            t0 = time.perf_counter()
            loaded = _load(p, cap)
            t1 = time.perf_counter()
            placed, _, _ = _placed(judge, loaded, None, None)  # type: ignore[arg-type]
            _sync(on)
            t2 = time.perf_counter()
            digest_of(placed, args.device)  # where the judge holds them, as it checks a timed call's digest (sums, BLAKE3)
            t3 = time.perf_counter()
            _, w, w64 = _placed(judge, [], [want], [want64])  # type: ignore[arg-type]
            _sync(on)
            t4 = time.perf_counter()
            verdict, stats = compare("out", "float32", placed[0], w[0], 1e-5, 1e-5, w64[0])
            _sync(on)
            t5 = time.perf_counter()
            same_run(previous, loaded)  # on the host copies, as the judge does before placing
            t6 = time.perf_counter()
            previous = loaded
            if verdict is not None:
                raise SystemExit(f"the output did not pass: {verdict} {stats}")
            for k, dt in zip(steps, (t1 - t0, t3 - t2, t2 - t1, t4 - t3, t5 - t4, t6 - t5), strict=True):
                steps[k].append(dt)
    med = {k: statistics.median(v) for k, v in steps.items()}
    per_file = sum(med.values())
    mb = args.m * N * 4 / 1e6
    print(f"judge on {on}, {args.files} files of {mb:.0f} MB (M={args.m} x {N} float32)")
    print("| step | median s per file |")
    print("|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.3f} |")
    print(f"| all | {per_file:.3f} |")
    print(f"projected: {per_file * args.per_eval:.1f} s of judging per evaluation at {args.per_eval} files of this "
          f"workload; the reference's copies {med['place_reference'] * args.per_eval:.1f} s of it")
    if args.out:
        args.out.write_text(json.dumps({"device": args.device, "judged_on": on, "m": args.m, "files": args.files,
                                        "seconds": steps, "median": med}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
