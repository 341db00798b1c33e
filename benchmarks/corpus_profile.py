"""Stage 1 and Stage 2 on the public corpus (../shared/corpus.md), through kernelpro's own path.

    python benchmarks/corpus_profile.py [--out DIR] [--only NAME]

For each kernel: evaluate the upstream wrapper against its reference (timing), profile it once
(ncu + SASS + timeline, each in its own sandboxed child), classify it on the roofline and run the
micro-profiling tools. Needs the GPU machine with liger-kernel 0.8.5, fla-core 0.6.0 and
flashinfer-python 0.7.4's `flashinfer/triton` importable (see .ci/gpu --corpus). Prints a markdown
table and writes DIR/corpus_profile.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from kernelpro.runner.evaluator import EvalSettings, evaluate, reference_ready
from kernelpro.runner.evidence import Timeline
from kernelpro.runner.profiler import ProfileSettings, profile_candidate, start_standby
from kernelpro.runner.roofline import analyze_reference, default_ceilings
from kernelpro.runner.target import Tolerance
from kernelpro.runner.tools import run_tools
from kernelpro.runner.trace import (
    Axis,
    BuildSpec,
    Definition,
    Solution,
    SourceFile,
    TensorSpec,
    Workload,
)


@dataclass(frozen=True)
class Case:
    """One corpus kernel as a Definition plus a wrapper Solution around the upstream code."""

    name: str
    """Row label."""
    axes: dict[str, int]
    """Constant axes (all of them: shapes are fixed here)."""
    inputs: dict[str, tuple[tuple[str, ...], str]]
    """name -> (axes, dtype)."""
    outputs: dict[str, tuple[tuple[str, ...], str]]
    """name -> (axes, dtype)."""
    reference: str
    """def run(...) in torch."""
    wrapper: str
    """def run(...) calling the upstream wrapper."""
    flops: str
    """FLOPs per call."""
    nbytes: str
    """Bytes per call."""
    dps: bool = False
    """Destination-passing wrapper."""


CASES = [
    Case("liger swiglu", {"M": 8192, "N": 14336}, {"a": (("M", "N"), "bfloat16"), "b": (("M", "N"), "bfloat16")},
         {"c": (("M", "N"), "bfloat16")},
         "import torch\ndef run(a, b):\n    return torch.nn.functional.silu(a.float()).to(b.dtype) * b\n",
         "from liger_kernel.ops.swiglu import swiglu_forward\ndef run(a, b):\n    return swiglu_forward(a, b)[2]\n",
         "6*M*N", "6*M*N"),
    Case("liger rms_norm", {"M": 4096, "N": 8192}, {"x": (("M", "N"), "bfloat16"), "w": (("N",), "bfloat16")},
         {"y": (("M", "N"), "bfloat16")},
         "import torch\ndef run(x, w):\n    xf = x.float()\n"
         "    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w\n",
         "from liger_kernel.ops.rms_norm import rms_norm_forward\n"
         "def run(x, w):\n    return rms_norm_forward(x, w, 1e-6, 0.0, 'llama', None)[0]\n",
         "4*M*N", "4*M*N + 2*N + 4*M"),
    Case("liger softmax", {"M": 4096, "N": 8192}, {"x": (("M", "N"), "float32")}, {"y": (("M", "N"), "float32")},
         "import torch\ndef run(x):\n    return torch.softmax(x, -1)\n",
         "from liger_kernel.ops.softmax import _softmax_forward\ndef run(x):\n    return _softmax_forward(x)[0]\n",
         "5*M*N", "8*M*N"),
    Case("liger dyt", {"M": 8192, "N": 4096, "O": 1},
         {"x": (("M", "N"), "bfloat16"), "alpha": (("O",), "bfloat16"), "gamma": (("N",), "bfloat16"),
          "beta": (("N",), "bfloat16")}, {"y": (("M", "N"), "bfloat16")},
         "import torch\ndef run(x, alpha, gamma, beta):\n    return (gamma * torch.tanh(alpha * x.float()) + beta).to(x.dtype)\n",
         "from liger_kernel.ops.dyt import liger_dyt_fwd\ndef run(x, alpha, gamma, beta):\n"
         "    return liger_dyt_fwd(x, alpha, gamma, beta)\n",
         "4*M*N", "4*M*N + 4*N"),
    Case("flashinfer silu_and_mul", {"M": 8192, "N2": 28672, "N": 14336}, {"x": (("M", "N2"), "bfloat16")},
         {"y": (("M", "N"), "bfloat16")},
         "import torch\ndef run(x):\n    d = x.shape[-1] // 2\n    return torch.nn.functional.silu(x[:, :d]) * x[:, d:]\n",
         "from flashinfer.triton.activation import silu_and_mul\ndef run(x):\n    return silu_and_mul(x)\n",
         "6*M*N", "6*M*N"),
    Case("flashinfer rms_norm", {"M": 4096, "N": 8192}, {"x": (("M", "N"), "bfloat16"), "w": (("N",), "bfloat16")},
         {"y": (("M", "N"), "bfloat16")},
         "import torch\ndef run(x, w):\n    xf = x.float()\n"
         "    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)\n",
         "from flashinfer.triton.norm import rms_norm\ndef run(x, w, y):\n    rms_norm(x, w, y, 1e-6)\n",
         "4*M*N", "4*M*N + 2*N", dps=True),
    Case("fla softmax", {"M": 4096, "N": 8192}, {"x": (("M", "N"), "float32")}, {"y": (("M", "N"), "float32")},
         "import torch\ndef run(x):\n    return torch.softmax(x.float(), -1)\n",
         "from fla.ops.utils.softmax import softmax_fwd\ndef run(x):\n    return softmax_fwd(x)\n",
         "5*M*N", "8*M*N"),
]


def _definition(c: Case) -> Definition:
    return Definition(
        name=c.name.replace(" ", "_"), op_type="corpus",
        axes={k: Axis("const", v) for k, v in c.axes.items()},
        inputs={k: TensorSpec(s, d) for k, (s, d) in c.inputs.items()},
        outputs={k: TensorSpec(s, d) for k, (s, d) in c.outputs.items()},
        reference=c.reference,
    )


def ncu_import(module: str) -> None:
    """Where a package's import time goes inside an ncu child, against the same import without ncu:
    `python -X importtime`, with CUDA initialised before the import, and (what the profiling
    harness does now) after it."""
    import re
    import subprocess
    import sys

    from kernelpro.runner.evidence.ncu import find_ncu

    cuda = "import torch; torch.zeros(1, device='cuda'); "
    timed = f"t = time.perf_counter(); import {module}; print(f'IMPORT {{time.perf_counter() - t:.2f}}'); "
    ncu = find_ncu()
    wrap = [ncu or "ncu", "--profile-from-start", "off", "--target-processes", "application-only"]
    runs = {"without ncu, CUDA first": ([], "import time; " + cuda + timed),
            "with ncu, CUDA first": (wrap, "import time; " + cuda + timed),
            "with ncu, import first (the harness now)": (wrap, "import time, torch; " + timed + cuda)}
    for label, (wrapper, code) in runs.items():
        if wrapper and ncu is None:
            print(f"{label}: ncu not found")
            continue
        t0 = time.perf_counter()
        p = subprocess.run([*wrapper, sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True)
        took = re.search(r"IMPORT ([0-9.]+)", p.stdout)
        print(f"{label}: import {took.group(1) if took else '?'} s, process {time.perf_counter() - t0:.1f} s")
        rows = [(int(m.group(2)), m.group(3).strip()) for m in re.finditer(r"import time:\s+(\d+) \|\s+(\d+) \|(.*)", p.stderr)]
        for us, name in sorted(rows, reverse=True)[:8]:
            print(f"    {us / 1e6:7.2f} s cumulative  {name}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="benchmark-out")
    p.add_argument("--only", help="comma-separated parts of kernel names: profile only those")
    p.add_argument("--standby", action=argparse.BooleanOptionalAction, default=True,
                   help="profile as the loop does, with a standby ncu child started before the evaluation "
                        "(runner/standby.py); --no-standby: a fresh ncu child only")
    p.add_argument("--cold", action=argparse.BooleanOptionalAction, default=True,
                   help="also profile once more with a fresh ncu child, to compare")
    p.add_argument("--ncu-import", metavar="MODULE", help="instead: time importing MODULE after CUDA is up, "
                   "with and without ncu around the process, and list what ncu slows down most")
    args = p.parse_args()
    if args.ncu_import:
        ncu_import(args.ncu_import)
        return
    es = EvalSettings(device="cuda", trials=2, timeout_s=300, timeline=True)  # the timeline as the loop takes it
    rows = []
    for c in CASES:
        if args.only and not any(part in c.name for part in args.only.split(",")):
            continue
        d = _definition(c)
        sol = Solution(f"{d.name}-upstream", d.name, "upstream", BuildSpec("python", ("cuda",), "wrapper.py::run",
                       destination_passing_style=c.dps), (SourceFile("wrapper.py", c.wrapper),))
        w = Workload.make(d, {})
        cache = Path(tempfile.mkdtemp(prefix="kp-corpus-cache-"))  # this kernel's Triton cache, as the loop keeps one
        # As in the loop: the standby starts once the reference is computed, before the evaluation it overlaps.
        ready = reference_ready(d, sol, [w], Tolerance(), es)
        standby = start_standby(sol, ProfileSettings()) if args.standby and ready else None
        outcome = evaluate(d, sol, [w], Tolerance(), replace(es, cache_dir=cache))
        row: dict[str, object] = {"kernel": c.name, "status": outcome.status}
        if outcome.passed:
            t0 = time.perf_counter()
            tl = outcome.timeline
            timeline = Timeline(**{**tl, "kernels": tuple(tl["kernels"])}) if tl and "error" not in tl else None
            prof, secs = profile_candidate(d, sol, [w], es, timeline=timeline, triton_cache=cache, standby=standby)
            if args.cold and args.standby:
                cold, cold_secs = profile_candidate(d, sol, [w], es, timeline=timeline, triton_cache=cache)
                row.update({"cold_profile_s": round(cold_secs, 1), "cold_stages": dict(cold.stages),
                            "cold_kernels": len(cold.kernels)})
            dtypes = [s[1] for s in (*c.inputs.values(), *c.outputs.values())]
            stage1 = analyze_reference(d, [w], flops=c.flops, nbytes=c.nbytes,
                                       ceilings=default_ceilings(str(outcome.environment.get("hardware", "")), dtypes),
                                       measured_ms={w.uuid: outcome.latency(w.uuid)}, profile=prof)
            analysis = run_tools(prof, stage1.bottleneck)
            b = stage1.workloads[0]
            row.update({
                "ms": outcome.latency(w.uuid), "floor_ms": b.floor_ms, "pct_of_roofline": b.pct_of_roofline,
                "theory": stage1.theory, "ncu": stage1.measured, "class": stage1.bottleneck,
                "sol_compute_pct": stage1.compute_pct, "sol_memory_pct": stage1.memory_pct,
                "findings": [f"{f.severity}:{f.tool}" for f in analysis.findings], "ran": len(analysis.ran),
                "profile_s": round(secs, 1), "wall_s": round(time.perf_counter() - t0, 1), "notes": list(prof.notes),
                "stages": dict(prof.stages),
                # The same import in the evaluation's child, without ncu: what ncu adds to it.
                "eval_import_s": round(outcome.build_seconds, 2), "eval_startup_s": round(outcome.phases.get("startup", 0.0), 2),
            })
        else:
            if standby is not None:
                standby.close()
            row["log"] = outcome.log[-600:]
        rows.append(row)
        print(json.dumps(row), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus_profile.json").write_text(json.dumps(rows, indent=2) + "\n")
    print("\n| kernel | ms | % of roofline | roofline class | ncu SOL compute / memory % | Stage 1 | findings | profiling s"
          f"{' (standby up before: s)' if args.standby else ''} | of which ncu child (its import; the import without ncu) | "
          "fresh ncu child: profiling s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["status"] != "PASSED":
            print(f"| {r['kernel']} | {r['status']} | | | | | | | | |")
            continue
        sol = f"{r['sol_compute_pct'] or 0:.0f} / {r['sol_memory_pct'] or 0:.0f}"
        st: dict = r.get("stages", {})  # type: ignore[assignment]
        findings = ", ".join(r["findings"]) or "none"  # type: ignore[arg-type]
        up = f" ({st['ncu.standby']:.1f})" if "ncu.standby" in st else ""
        print(f"| {r['kernel']} | {r['ms']:.4f} | {r['pct_of_roofline']:.0f} | {r['theory']} | {sol} | {r['class']} | "
              f"{findings} | {r['profile_s']}{up} | "
              f"{st.get('ncu', 0):.1f} ({st.get('ncu.import', 0):.1f}; {r.get('eval_import_s', 0)} without ncu) | "
              f"{r.get('cold_profile_s', 'n/a')} |")


if __name__ == "__main__":
    main()
