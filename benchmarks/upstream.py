"""The public corpus as upstream publishes it, through the command users run (issues 19, 22, 23).

    python benchmarks/upstream.py [--out DIR] [--kernels NAME,...] [--budget N] [--budget-of NAME=N,...]
                                  [--anchor] [--device cuda|cpu] [--tiny]

For each kernel a git repository is laid out as upstream lays it out (Liger-Kernel: `src/liger_kernel/`,
FlashInfer: `flashinfer/`, fla: `fla/`), holding the Python files of the package installed on this
machine (the same package stays installed, as on a maintainer's runner), with a `.kernelpro.yml`
written as README "Configuring a kernel of a real repository" says: the repository's own function
as the entry point (`returns:` and `in_place:` instead of a wrapper file), the definition inline,
the Stage 1 `flops`/`bytes` formulas. The base commit holds that; the pull request edits one comment
of the kernel's file. Then, as a subprocess with its wall clock:

    kernelpro optimize --repo R --base HEAD~1 --head HEAD --out O --programmer tuner --budget N

Also the demo (`kernelpro demo --budget N`) and a kernel of our own whose programs each walk their row
one element at a time (issue 23's serial loop). With ``--anchor``, `triton.autotune` over
benchmarks/corpus.py's space for the same kernel (cold: its compiles included) in the same process,
after the run. Everything in the tables is read from what the run wrote (result.json, journal.jsonl):
issue 19's outcome table, issue 22's cost table, issue 23's Stage 1 and findings table; JSON to
DIR/upstream.json, each run's folder under DIR/runs/. ``--device cpu --tiny`` runs the same path on a
src-layout package of two files made here (what tests/test_upstream_bench.py runs).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
BF16_TOL = {"atol": 2.0e-2, "rtol": 2.0e-2}
# What a user types (README): the console script's entry point, run by this interpreter so that the
# kernelpro imported is the one installed here (a `--target` install on the GPU machine has no script).
KERNELPRO = [sys.executable, "-c", "import sys\nfrom kernelpro.cli import main\nsys.exit(main(sys.argv[1:]))"]


@dataclass(frozen=True)
class Upstream:
    """One corpus kernel as its repository publishes it, and its target as a new user writes it."""

    name: str
    """Row label, target name and --kernels key."""
    package: str
    """Installed top-level package whose Python files the repository holds."""
    root: str
    """Folder of the repository that holds the package ('src' for a src layout, '' for the root)."""
    kernel_file: str
    """The file the pull request edits (a comment only), relative to the package."""
    target: Mapping[str, Any]
    """The target's keys besides name, files and language (entry_point is relative to the package)."""
    anchor: str | None = None
    """benchmarks/corpus.py kernel whose space `--anchor` runs under triton.autotune."""
    files: Mapping[str, str] = field(default_factory=dict)
    """Files written instead of copied from an installed package (our own kernels); path -> text."""

    def path(self, rel: str) -> str:
        return "/".join(p for p in (self.root, self.package, rel) if p)


def _definition(axes: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], reference: str,
                op_type: str) -> dict[str, Any]:
    return {"op_type": op_type, "axes": dict(axes), "inputs": dict(inputs), "outputs": dict(outputs),
            "reference": reference}


def t(shape: Sequence[str] | None, dtype: str) -> dict[str, Any]:
    return {"shape": list(shape) if shape is not None else None, "dtype": dtype}


def scalar(value: Any) -> dict[str, Any]:
    return {"type": "scalar", "value": value}


M_VAR = {"type": "var"}


def const(v: int) -> dict[str, Any]:
    return {"type": "const", "value": v}


SILU_REF = "import torch\ndef run(a, b):\n    return torch.nn.functional.silu(a.float()).to(b.dtype) * b\n"
RMS_REF = ("import torch\ndef run(x, w, eps, offset, casting_mode, row_mode):\n    xf = x.float()\n"
           "    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * (offset + w)\n")
SOFTMAX_REF = "import torch\ndef run(x):\n    return torch.softmax(x.float(), -1)\n"
DYT_REF = ("import torch\ndef run(x, alpha, gamma, beta):\n"
           "    return (gamma * torch.tanh(alpha * x.float()) + beta).to(x.dtype)\n")
FI_SILU_REF = ("import torch\ndef run(x):\n    d = x.shape[-1] // 2\n"
               "    return torch.nn.functional.silu(x[:, :d]) * x[:, d:]\n")
FI_RMS_REF = ("import torch\ndef run(x, w, out, eps):\n    xf = x.float()\n"
              "    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)\n")

SERIAL = '''"""Row sums, one program per row, as a port of a scalar CPU loop reads (issue 23's serial loop)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _rowsum_kernel(x_ptr, out_ptr, n):
    row = x_ptr + tl.program_id(0).to(tl.int64) * n
    acc = 0.0
    for i in range(n):
        acc += tl.load(row + i)
    tl.store(out_ptr + tl.program_id(0), acc)


def rowsum(x):
    # One program per row.
    out = torch.empty(x.shape[0], device=x.device, dtype=torch.float32)
    _rowsum_kernel[(x.shape[0],)](x, out, x.shape[1], num_warps=4)
    return out
'''

TINY = '''"""x * 2 + 1, a block per program (the --tiny row)."""
import torch
import triton
import triton.language as tl


@triton.jit
def _affine_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)


def affine(x):
    # A small block for a start.
    y = torch.empty_like(x)
    n = x.numel()
    BLOCK = 32
    _affine_kernel[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK, num_warps=4)
    return y
'''

KERNELS = [
    Upstream("liger_swiglu", "liger_kernel", "src", "ops/swiglu.py", {
        "entry_point": "ops/swiglu.py::swiglu_forward", "returns": [2],
        "definition": _definition({"M": M_VAR, "N": const(14336)},
                                  {"a": t(["M", "N"], "bfloat16"), "b": t(["M", "N"], "bfloat16")},
                                  {"c": t(["M", "N"], "bfloat16")}, SILU_REF, "swiglu"),
        "workloads": [{"M": 8192}], "cpu_workloads": [{"M": 2}], "tolerances": BF16_TOL,
        "flops": "6*M*N", "bytes": "6*M*N"}, anchor="liger_swiglu"),
    Upstream("liger_rms_norm", "liger_kernel", "src", "ops/rms_norm.py", {
        "entry_point": "ops/rms_norm.py::rms_norm_forward", "returns": [0],
        "definition": _definition({"M": M_VAR, "N": const(8192)},
                                  {"x": t(["M", "N"], "bfloat16"), "w": t(["N"], "bfloat16"), "eps": t(None, "float32"),
                                   "offset": t(None, "float32"), "casting_mode": t(None, "int32"),
                                   "row_mode": t(None, "int32")},
                                  {"y": t(["M", "N"], "bfloat16")}, RMS_REF, "rmsnorm"),
        "workloads": [{"axes": {"M": 4096}, "inputs": {"eps": scalar(1e-6), "offset": scalar(0.0),
                                                       "casting_mode": scalar(0), "row_mode": scalar(0)}}],
        "cpu_workloads": [{"axes": {"M": 2}, "inputs": {"eps": scalar(1e-6), "offset": scalar(0.0),
                                                        "casting_mode": scalar(0), "row_mode": scalar(0)}}],
        "tolerances": BF16_TOL, "flops": "4*M*N", "bytes": "4*M*N + 2*N + 4*M"}, anchor="liger_rms_norm"),
    Upstream("liger_softmax", "liger_kernel", "src", "ops/softmax.py", {
        "entry_point": "ops/softmax.py::_softmax_forward", "returns": [0],
        "definition": _definition({"M": M_VAR, "N": const(8192)}, {"x": t(["M", "N"], "float32")},
                                  {"y": t(["M", "N"], "float32")}, SOFTMAX_REF, "softmax"),
        "workloads": [{"M": 4096}], "cpu_workloads": [{"M": 2}], "flops": "5*M*N", "bytes": "8*M*N"}),
    Upstream("liger_dyt", "liger_kernel", "src", "ops/dyt.py", {
        "entry_point": "ops/dyt.py::liger_dyt_fwd",
        "definition": _definition({"M": M_VAR, "N": const(4096), "one": const(1)},
                                  {"x": t(["M", "N"], "bfloat16"), "alpha": t(["one"], "bfloat16"),
                                   "gamma": t(["N"], "bfloat16"), "beta": t(["N"], "bfloat16")},
                                  {"y": t(["M", "N"], "bfloat16")}, DYT_REF, "dyt"),
        "workloads": [{"M": 8192}], "cpu_workloads": [{"M": 2}], "tolerances": BF16_TOL,
        "flops": "4*M*N", "bytes": "4*M*N + 4*N"}),
    Upstream("flashinfer_silu_and_mul", "flashinfer", "", "triton/kernels/activation.py", {
        "entry_point": "triton/activation.py::silu_and_mul", "sources": ["triton/activation.py"],
        "definition": _definition({"M": M_VAR, "N2": const(28672), "N": const(14336)},
                                  {"x": t(["M", "N2"], "bfloat16")}, {"y": t(["M", "N"], "bfloat16")},
                                  FI_SILU_REF, "silu_and_mul"),
        "workloads": [{"M": 8192}], "cpu_workloads": [{"M": 2}], "tolerances": BF16_TOL,
        "flops": "6*M*N", "bytes": "6*M*N"}),
    Upstream("flashinfer_rms_norm", "flashinfer", "", "triton/kernels/norm.py", {
        "entry_point": "triton/norm.py::rms_norm", "sources": ["triton/norm.py"], "in_place": {"y": "out"},
        "definition": _definition({"M": M_VAR, "N": const(8192)},
                                  {"x": t(["M", "N"], "bfloat16"), "w": t(["N"], "bfloat16"),
                                   "out": t(["M", "N"], "bfloat16"), "eps": t(None, "float32")},
                                  {"y": t(["M", "N"], "bfloat16")}, FI_RMS_REF, "rmsnorm"),
        "workloads": [{"axes": {"M": 4096}, "inputs": {"eps": scalar(1e-6)}}],
        "cpu_workloads": [{"axes": {"M": 2}, "inputs": {"eps": scalar(1e-6)}}],
        "tolerances": BF16_TOL, "flops": "4*M*N", "bytes": "6*M*N + 2*N"}, anchor="flashinfer_rms_norm"),
    Upstream("fla_softmax", "fla", "", "ops/utils/softmax.py", {
        "entry_point": "ops/utils/softmax.py::softmax_fwd",
        "definition": _definition({"M": M_VAR, "N": const(8192)}, {"x": t(["M", "N"], "float32")},
                                  {"y": t(["M", "N"], "float32")}, SOFTMAX_REF, "softmax"),
        "workloads": [{"M": 4096}], "cpu_workloads": [{"M": 2}], "flops": "5*M*N", "bytes": "8*M*N"},
        anchor="fla_softmax"),
    Upstream("serial_rowsum", "rowsum", "", "kernels.py", {
        "entry_point": "kernels.py::rowsum",
        "definition": _definition({"M": M_VAR, "N": M_VAR}, {"x": t(["M", "N"], "float32")},
                                  {"y": t(["M"], "float32")},
                                  "import torch\ndef run(x):\n    return x.double().sum(-1).float()\n", "rowsum"),
        "workloads": [{"M": 264, "N": 65536}], "cpu_workloads": [{"M": 2, "N": 64}],
        "tolerances": {"atol": 1e-2, "rtol": 1e-4},
        "flops": "M*N", "bytes": "4*M*N + 4*M"}, files={"__init__.py": "", "kernels.py": SERIAL}),
]
TINY_KERNEL = Upstream("tiny_affine", "tinypkg", "src", "ops.py", {
    "entry_point": "ops.py::affine",
    "definition": _definition({"N": M_VAR}, {"x": t(["N"], "float32")}, {"y": t(["N"], "float32")},
                              "import torch\ndef run(x):\n    return x * 2.0 + 1.0\n", "affine"),
    "workloads": [{"N": 4096}], "flops": "2*N", "bytes": "8*N"}, files={"__init__.py": "", "ops.py": TINY})


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def installed_files(package: str) -> dict[str, str]:
    """The package's Python files as installed here (relative path -> text): what its repository holds."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{package} is not installed here: install it first (GPU machine: .ci/gpu --corpus)")
    top = Path(next(iter(spec.submodule_search_locations)))
    return {p.relative_to(top).as_posix(): p.read_text() for p in sorted(top.rglob("*.py"))
            if "__pycache__" not in p.parts}


def comment_edit(text: str) -> str:
    """The pull request: one comment of the file reworded; nothing a compiler or interpreter sees."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.lstrip().startswith("#") and not line.startswith("#!"):
            lines[i] = line.rstrip("\n") + " (reworded in the pull request)\n"
            return "".join(lines)
    return text + "# A comment added by the pull request.\n"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "kernelpro bench", "GIT_AUTHOR_EMAIL": "bench@kernelpro.invalid",
           "GIT_COMMITTER_NAME": "kernelpro bench", "GIT_COMMITTER_EMAIL": "bench@kernelpro.invalid"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def make_repo(k: Upstream, repo: Path, budget: int) -> dict[str, Any]:
    """Upstream's layout with the installed files, the target as a user writes it, base + PR commits."""
    files = dict(k.files) if k.files else installed_files(k.package)
    for rel, text in files.items():
        p = repo / k.path(rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    target = {"name": k.name, "files": [k.path(k.kernel_file)], "language": "triton", **k.target}
    target["entry_point"] = k.path(target["entry_point"])
    if "sources" in target:
        target["sources"] = [k.path(k.kernel_file)] + [k.path(s) for s in target["sources"]]
    target["budget"] = {"evaluations": budget, "minutes": 20, "timeout_s": 120}
    config = {"version": 1, "targets": [target]}
    (repo / ".kernelpro.yml").write_text(yaml.safe_dump(config, sort_keys=False, width=110))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "upstream as published")
    kernel = repo / k.path(k.kernel_file)
    kernel.write_text(comment_edit(kernel.read_text()))
    git(repo, "commit", "-q", "-am", "the pull request: a comment")
    return config


def run_optimize(k: Upstream | None, work: Path, budget: int, device: str, env_extra: Mapping[str, str]) -> dict[str, Any]:
    """`kernelpro optimize` (or `kernelpro demo` for k None) as a subprocess; its wall clock and files."""
    out = work / "out"
    env = {**os.environ, "KERNELPRO_DEVICE": device, "KERNELPRO_PROGRESS": "0", **env_extra}
    if k is None:
        cmd = [*KERNELPRO, "demo", "--budget", str(budget), "--out", str(out)]
    else:
        repo = work / "repo"
        repo.mkdir(parents=True)
        make_repo(k, repo, budget)
        cmd = [*KERNELPRO, "optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out),
               "--programmer", "tuner", "--search", "mcts", "--budget", str(budget)]
    say(f"{k.name if k else 'demo'}: {' '.join(cmd[3:])}")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work)
    wall = time.perf_counter() - t0
    (work / "stdout.txt").write_text(p.stdout)
    (work / "stderr.txt").write_text(p.stderr)
    results = sorted(out.glob("*/result.json"))
    row: dict[str, Any] = {"rc": p.returncode, "wall_s": round(wall, 1), "stdout_tail": p.stdout[-1500:],
                           "stderr_tail": p.stderr[-1500:]}
    if not results:
        return row
    folder = results[0].parent
    flat = work.parent.parent / "files"  # beside runs/: shallow enough to come back from the GPU machine
    flat.mkdir(exist_ok=True)
    for f in ("report.md", "result.json", "profiles.jsonl", "journal.jsonl"):
        if (folder / f).exists():
            shutil.copyfile(folder / f, flat / f"{work.name}.{f}")
    row.update(summarize(json.loads(results[0].read_text()), journal(folder / "journal.jsonl")))
    row["report"] = str(folder / "report.md")
    return row


def journal(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def _ms(outcome: Mapping[str, Any]) -> list[float]:
    return [r["timing"]["median_ms"] for r in outcome.get("results", []) if r.get("timing")]


def _unseen(entries: Sequence[Mapping[str, Any]]) -> list[float]:
    """Per timed workload of every evaluation: the parent's clock per call, less the harness's own loop,
    over the median the child reported (Timing.wall_ms, loop_ms): on a GPU the room a floor like the
    CPU's would leave honest kernels (docs/timing.md, the wall's allowance per call)."""
    out = []
    for e in entries:
        for r in e["outcome"].get("results", []):
            t = r.get("timing") or {}
            if t.get("wall_ms") is not None and t.get("loop_ms") is not None and t.get("median_ms"):
                out.append(round((t["wall_ms"] - t["loop_ms"]) / t["median_ms"], 3))
    return out


def summarize(result: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The tables' cells, from what the run wrote."""
    winner = result.get("winner") or {}
    stage1 = result.get("stage1") or {}
    floors = [w.get("floor_ms") for w in stage1.get("workloads", [])]
    base = next((e for e in entries if e["candidate"].get("parent") is None and not e["candidate"].get("params")), None)
    base_ms = _ms(base["outcome"]) if base else []
    win_ms = [w["candidate_ms"] for w in winner.get("workloads", [])]
    knobs = sorted({k.split("::", 1)[-1] for e in entries for k in (e["candidate"].get("params") or {})})
    walls = [e["outcome"].get("wall_seconds") for e in entries if e["outcome"].get("wall_seconds") is not None]
    current = stage1.get("current") or {}
    findings = (result.get("baseline_analysis") or {}).get("findings") or []
    gates = result.get("gates") or []
    guards = (winner.get("guards") or (gates[0].get("guards") if gates else None) or {})

    def pct(ms: list[float]) -> list[float | None]:
        return [round(100 * f / m, 2) if f and m else None for f, m in zip(floors, ms, strict=False)]

    return {
        "evaluations": result.get("evaluations"), "statuses": result.get("statuses"),
        "stop_reason": result.get("stop_reason"), "seconds": result.get("seconds"),
        "baseline_status": (result.get("baseline") or {}).get("status"),
        "baseline_log_tail": ((result.get("baseline") or {}).get("log_tail") or "")[-600:],
        "baseline_ms": base_ms, "winner_ms": win_ms, "speedup": winner.get("speedup"),
        "winner_note": winner.get("note"), "floor_ms": floors,
        "pct_floor_before": pct(base_ms), "pct_floor_after": pct(win_ms) if win_ms else [],
        "knobs": knobs, "gates": [{"passed": g.get("passed"), "reason": g.get("reason")} for g in gates],
        "guards": [{"axes": s.get("axes"), "speedup": s.get("speedup"), "verdict": s.get("verdict")}
                   for s in guards.get("shapes", [])],
        "seconds_per_eval": walls, "spawn": _spawns(entries), "failures": _failures(entries),
        "unseen_over_median": _unseen(entries),
        "stage1": {"ideal": stage1.get("theory"), "current": current.get("bound") if current else stage1.get("measured"),
                   "bottleneck": stage1.get("bottleneck"), "note": stage1.get("note"),
                   "evidence": current.get("note") if current else None},
        "findings": [{"tool": f.get("tool"), "severity": f.get("severity"), "title": f.get("title")}
                     for f in findings[:3]],
        "profile_seconds": result.get("profile_seconds"),
    }


def _failures(entries: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per status other than PASSED: how many, and the first such evaluation's log tail and spawn path
    (session 15's table said "no gain" for Liger rows whose candidates had all failed)."""
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        o = e["outcome"]
        status = str(o.get("status"))
        if status == "PASSED":
            continue
        first = out.setdefault(status, {"count": 0, "index": e.get("index"),
                                        "spawn": ((o.get("environment") or {}).get("sandbox") or {}).get("spawn"),
                                        "log_tail": str(o.get("log") or "")[-1200:]})
        first["count"] += 1
    return out


def _spawns(entries: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many children came from the warm server, the plain fork server, or a fresh interpreter."""
    counts: dict[str, int] = {}
    for e in entries:
        how = str(((e["outcome"].get("environment") or {}).get("sandbox") or {}).get("spawn", "?"))
        kind = "warm" if how.startswith("forked from the warm") else "fork server" if how.startswith("forked") else how[:40]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def anchor(name: str, device: str) -> dict[str, Any]:
    """triton.autotune over corpus.py's space for the kernel, cold (every config compiled and timed by
    the first call), then the kernel it picked timed as corpus.py times a point."""
    import string

    sys.path.insert(0, str(HERE))
    import corpus

    kernel = next(k for k in corpus.KERNELS if k.name == name)
    bench = corpus.make_bench(kernel.case, device, 30)
    with tempfile.TemporaryDirectory(prefix="kp-anchor-") as d:
        path = Path(d) / f"{name}_autotune.py"
        path.write_text(string.Template(kernel.autotuned).substitute(configs=kernel.configs_code()))
        extra = {"DO_BENCH": corpus.cpu_do_bench if device != "cuda" else None}
        t0 = time.perf_counter()
        module = corpus.load_module(path, f"kp_anchor_{name}", extra)
        module.run(*bench.inputs)
        bench.sync()
        seconds = time.perf_counter() - t0
        cfg = module.KERNEL.best_config
        point = corpus.measure(module.run, bench)
    return {"status": point["status"], "seconds": round(seconds, 2), "configs": len(kernel.points()),
            "pick": {**cfg.kwargs, "num_warps": cfg.num_warps}, "ms": point.get("ms")}


def _f(v: Any, spec: str = ".4f") -> str:
    if v is None or v == []:
        return "-"
    if isinstance(v, list):
        return ", ".join(_f(x, spec) for x in v)
    return format(v, spec) if isinstance(v, float) else str(v)


def tables(rows: Sequence[Mapping[str, Any]]) -> str:
    out = ["### Issue 19: the corpus as published, through `kernelpro optimize` (tuner, mcts)", "",
           "| kernel | rc | evaluations | knobs the tuner found | baseline ms | result ms | speedup | % of floor before -> after "
           "| guard shapes (ratio) | outcome | wall s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        guards = ", ".join(f"{'/'.join(f'{a}={v}' for a, v in (g['axes'] or {}).items())} {_f(g['speedup'], '.2f')}x"
                           for g in r.get("guards", [])) or "-"
        outcome = r.get("stop_reason") or f"no result.json (rc {r['rc']})"
        if r.get("speedup"):
            outcome = f"verified: {r.get('winner_note')}"
        elif r.get("gates"):
            outcome = f"no verified gain: {r['gates'][0]['reason']}; {r.get('stop_reason')}"
        failed = r.get("failures") or {}
        if failed:
            first = next(iter(failed.values()))
            why = " ".join(first["log_tail"].strip().splitlines()[-1:])[:160]
            counts = ", ".join(f"{v['count']} {k}" for k, v in failed.items())
            outcome = f"{counts} (first: {why}); {outcome}"
        out.append(f"| {r['name']} | {r['rc']} | {r.get('evaluations', '-')} | {', '.join(r.get('knobs', [])) or 'none'} "
                   f"| {_f(r.get('baseline_ms'))} | {_f(r.get('winner_ms'))} | {_f(r.get('speedup'), '.2f')} "
                   f"| {_f(r.get('pct_floor_before'), '.1f')} -> {_f(r.get('pct_floor_after'), '.1f')} | {guards} "
                   f"| {outcome[:400]} | {r['wall_s']} |")
    out += ["", "### Issue 22: cost per evaluation (journal `wall_seconds`)", "",
            "| kernel | server | evaluations | median s/eval | min..max s | candidates/min | wall s (start to report) |",
            "|---|---|---|---|---|---|---|"]
    for r in rows:
        w = r.get("seconds_per_eval") or []
        med = statistics.median(w) if w else None
        out.append(f"| {r['name']}{' (cold)' if r.get('cold') else ''} | {', '.join(f'{k} {v}' for k, v in (r.get('spawn') or {}).items())} | {len(w)} "
                   f"| {_f(med, '.2f')} | {_f(min(w) if w else None, '.2f')}..{_f(max(w) if w else None, '.2f')} "
                   f"| {_f(60 / med if med else None, '.1f')} | {r['wall_s']} |")
        if r.get("anchor"):
            a = r["anchor"]
            out.append(f"| {r['name']}: triton.autotune anchor ({a.get('configs')} configs, cold) | in-process | - "
                       f"| - | - | - | {a.get('seconds', a.get('status'))} (pick {a.get('pick')}, {_f(a.get('ms'))} ms) |")
    out += ["", "### Issue 23: Stage 1's two views and the top findings of the pull request's kernel", "",
            "| kernel | ideal kernel bound by | this kernel bound by (ncu) | top findings |", "|---|---|---|---|"]
    for r in rows:
        s = r.get("stage1") or {}
        fs = "; ".join(f"[{f.get('severity')}] {f.get('title')} ({f.get('tool')})" for f in r.get("findings", [])) or "-"
        out.append(f"| {r['name']} | {s.get('ideal') or '-'} | {s.get('current') or '-'}: {(s.get('evidence') or '')[:140]} "
                   f"| {fs} |")
    out += ["", "### Timing integrity: the parent's clock per call, less the harness's loop, over the reported median", "",
            "(1.0: the wall holds nothing but the calls; what an honest kernel reaches is what a GPU floor may allow)", "",
            "| kernel | timed workloads | median | max |", "|---|---|---|---|"]
    for r in rows:
        u = r.get("unseen_over_median") or []
        out.append(f"| {r['name']} | {len(u)} | {_f(statistics.median(u) if u else None, '.3f')} | {_f(max(u) if u else None, '.3f')} |")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="benchmark-out")
    names = ["demo", *(k.name for k in KERNELS)]
    p.add_argument("--kernels", help=f"comma-separated subset of: {', '.join(names)} (default all)")
    p.add_argument("--budget", type=int, default=8, help="evaluations per kernel, the PR's included (default 8)")
    p.add_argument("--budget-of", default="", help="per-kernel budgets, NAME=N,...")
    p.add_argument("--cold", default="", help="kernels run once more with KERNELPRO_WARM_SERVER=0, NAME=N,...")
    p.add_argument("--anchor", action="store_true", help="triton.autotune over the same space after each run that has one")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--tiny", action="store_true", help="only a two-file src-layout package made here")
    a = p.parse_args(argv)
    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    budgets = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in a.budget_of.split(",") if kv}
    cold = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in a.cold.split(",") if kv}
    if a.tiny:
        plan: list[tuple[str, Upstream | None]] = [(TINY_KERNEL.name, TINY_KERNEL)]
    else:
        chosen = a.kernels.split(",") if a.kernels else names
        unknown = set(chosen) - set(names)
        if unknown:
            p.error(f"unknown kernels {sorted(unknown)}; choose from {names}")
        by_name = {k.name: k for k in KERNELS}
        plan = [(n, by_name.get(n)) for n in chosen]
    rows: list[dict[str, Any]] = []
    for name, k in plan:
        runs = [(name, budgets.get(name, a.budget), {})]
        if name in cold:
            runs.append((name, cold[name], {"KERNELPRO_WARM_SERVER": "0"}))
        for label, budget, env in runs:
            work = out / "runs" / (label + ("-cold" if env else ""))
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            row = {"name": label, "budget": budget, "cold": bool(env),
                   **run_optimize(k, work, budget, a.device, env)}
            if a.anchor and k is not None and k.anchor and not env:
                try:
                    row["anchor"] = anchor(k.anchor, a.device)
                except Exception as e:  # the anchor is a reference row; its failure is a cell, not the end
                    row["anchor"] = {"status": f"{type(e).__name__}: {str(e)[:200]}"}
            rows.append(row)
            say(f"{label}: rc {row['rc']}, {row['wall_s']} s, {row.get('evaluations')} evaluations, "
                f"speedup {row.get('speedup')}, stop {row.get('stop_reason')!r}")
            for status, f in (row.get("failures") or {}).items():
                say(f"{label}: {f['count']} {status}, the first (evaluation {f['index']}, {f['spawn']}):\n{f['log_tail']}")
            (out / "upstream.json").write_text(json.dumps(rows, indent=1))
    text = tables(rows)
    (out / "upstream.md").write_text(text + "\n")
    print(text)
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
