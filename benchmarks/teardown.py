"""What makes a candidate child's exit slow on the GPU (issue 22)?

On the H200 a Liger SwiGLU evaluation spends 2.9-3.7 s between the harness writing its result and
the process being gone (the journal's ``teardown`` phase, benchmarks/results-h200-session17/), about
as long as everything else it does; on the CPU the same phase is 0.05 s. This starts one fresh
child per variant, each doing one thing the harness does on the GPU, then stamping the time and
calling ``os._exit`` as the harness does; the parent measures from the stamp to ``waitpid``.

    python3 benchmarks/teardown.py [--out DIR] [--repeats 3] [--device cuda|cpu] [--gb 2]

Variants: nothing (the interpreter alone), torch imported, CUDA initialised, ``--gb`` of device
memory held (and 16 times as much), ``--gb`` of pinned host memory (torch's host allocator, as
runner/tensorfile.py's copy uses), outputs written through runner/tensorfile.py (its pinned copy),
the same outputs through a pageable copy, a Triton kernel launched, a torch.profiler session (CUPTI,
the timeline); then the demo's kernel evaluated through kernelpro's own sandbox and harness, with the
phases it journals. Prints a markdown table of median seconds (min..max) and writes
DIR/teardown.json. ``--device cpu`` runs the variants that need no GPU (a smoke check).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import os, sys, time
variant, gb, folder = sys.argv[1], float(sys.argv[2]), sys.argv[3]
n = int(gb * (1 << 30)) // 4
keep = []
if variant != "nothing":
    import torch
if variant not in ("nothing", "torch"):  # every GPU variant starts from a CUDA context
    torch.cuda.init(); keep.append(torch.ones(1, device="cuda")); torch.cuda.synchronize()
if variant == "device":
    keep.append(torch.empty(n, device="cuda")); torch.cuda.synchronize()
if variant == "device_big":  # as many buffer sets of a large workload as the timing rotates through
    keep.append(torch.empty(16 * n, device="cuda")); torch.cuda.synchronize()
if variant == "pinned":
    keep.append(torch.empty(n, pin_memory=True))
if variant == "tensorfile":
    from kernelpro.runner import tensorfile  # the installed package (the checkout maps runner/ elsewhere)
    outs = [torch.randn(n // 4, device="cuda") for _ in range(4)]
    tensorfile.write(outs, os.path.join(folder, "outputs.bin"))
if variant == "pageable":  # the same outputs copied to pageable host memory instead
    outs = [torch.randn(n // 4, device="cuda") for _ in range(4)]
    with open(os.path.join(folder, "outputs.bin"), "wb") as f:
        for t in outs:
            f.write(t.cpu().reshape(-1).view(torch.uint8).numpy().data)
if variant == "triton":
    sys.path.insert(0, folder)
    from tdkernel import run
    run()
if variant == "profiler":
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
        (torch.ones(1 << 20, device="cuda") * 2).sum().item()
print(repr(time.time()), flush=True)
os._exit(0)
"""

# Triton refuses kernels defined in `-c` code (it reads their source): the kernel lives in a file.
KERNEL = '''
import torch, triton, triton.language as tl

@triton.jit
def _add(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1, mask=m)

def run():
    x = torch.zeros(1 << 20, device="cuda")
    _add[(triton.cdiv(x.numel(), 1024),)](x, x.numel(), BLOCK=1024)
    torch.cuda.synchronize()
'''

GPU_ONLY = ("cuda", "device", "device_big", "pinned", "tensorfile", "pageable", "triton", "profiler")
VARIANTS = ("nothing", "torch", *GPU_ONLY)


def one(variant: str, gb: float, folder: str) -> dict[str, float | str]:
    t0 = time.time()
    p = subprocess.Popen([sys.executable, "-c", CHILD, variant, str(gb), folder],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stderr is not None
    line = p.stdout.readline()
    p.wait()
    gone = time.time()
    if p.returncode != 0 or not line.strip():
        return {"error": f"exit {p.returncode}: {p.stderr.read()[-500:]}"}
    stamp = float(line)
    return {"teardown_s": gone - stamp, "before_s": stamp - t0}


def harness(repeats: int, device: str) -> dict[str, list[float]]:
    """The same exit inside kernelpro: the demo's kernel evaluated ``repeats`` times through
    runner/evaluator.py (its sandbox, confinement and harness), each outcome's own phases."""
    from importlib import resources

    from kernelpro.runner.evaluator import EvalSettings, evaluate
    from kernelpro.runner.target import Tolerance
    from kernelpro.runner.trace import BuildSpec, Solution, SourceFile, Workload, load_definition

    demo = resources.files("kernelpro.examples") / "demo"
    d = load_definition(Path(str(demo / "commit1" / "definitions" / "swiglu.json")))
    src = (demo / "commit2" / "kernels" / "swiglu.py").read_text()
    sol = Solution("teardown", d.name, "kernelpro", BuildSpec("triton", (device,), "kernels/swiglu.py::swiglu",
                                                              destination_passing_style=False),
                   (SourceFile("kernels/swiglu.py", src),))
    w = Workload.make(d, {"M": 16384 if device == "cuda" else 1})
    out: dict[str, list[float]] = {}
    for _ in range(repeats):
        o = evaluate(d, sol, [w], Tolerance(), EvalSettings(device=device, trials=1))
        for k in ("teardown", "launch", "startup", "verify", "save", "time"):
            out.setdefault(k, []).append(float(o.phases.get(k, float("nan"))))
        out.setdefault("wall", []).append(o.wall_seconds)
        if not o.passed:
            out.setdefault("errors", []).append(o.status)  # type: ignore[arg-type]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/kernelpro-bench/teardown"))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--gb", type=float, default=2.0)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    variants = VARIANTS if a.device == "cuda" else ("nothing", "torch")
    rows: dict[str, list[dict[str, float | str]]] = {}
    with tempfile.TemporaryDirectory(prefix="kp-teardown-") as folder:
        Path(folder, "tdkernel.py").write_text(KERNEL)
        for _ in range(a.repeats):  # interleaved: drift falls on every variant alike
            for v in variants:
                rows.setdefault(v, []).append(one(v, a.gb, folder))
    print(f"| variant ({a.gb:g} GB where sized) | teardown s, median (min..max) | start to stamp s |")
    print("|---|---|---|")
    table = {}
    for v, runs in rows.items():
        ok = [r for r in runs if "teardown_s" in r]
        if not ok:
            print(f"| {v} | failed: {runs[0].get('error')} | |")
            table[v] = {"error": runs[0].get("error")}
            continue
        td = [float(r["teardown_s"]) for r in ok]
        st = [float(r["before_s"]) for r in ok]
        print(f"| {v} | {statistics.median(td):.3f} ({min(td):.3f}..{max(td):.3f}) | {statistics.median(st):.2f} |")
        table[v] = {"teardown_s": td, "before_s": st}
    inside = harness(a.repeats, a.device)
    td = inside.get("teardown", [])
    print(f"| kernelpro's evaluation of the demo (phases: {', '.join(f'{k} {statistics.median(v):.2f}' for k, v in inside.items() if k != 'errors')}) "
          f"| {statistics.median(td):.3f} ({min(td):.3f}..{max(td):.3f}) | |")
    (a.out / "teardown.json").write_text(json.dumps({"gb": a.gb, "repeats": a.repeats, "host": os.uname().nodename,
                                                     "variants": table, "harness": inside}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
