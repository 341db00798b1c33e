"""Benchmark: real performance commits replayed as pull requests, in both directions.

    bash benchmarks/fetch_corpus.sh            # once, on a machine with PyPI (liger-kernel wheels)
    python benchmarks/replays.py [--only NAME ...] [--directions forward reverse] [--budget N]
                                 [--feedback none|raw|tools] [--out DIR]

Each replay is a local git repository whose base commit holds one side of a known upstream change
and whose head (the "pull request") holds the other, plus a .kernelpro.yml target for the kernel.
``forward`` replays the change as it was merged (base = before, PR = after); ``reverse`` replays its
undoing (base = after, PR = before), where the bot should see the regression against the base
branch and, ideally, win the speed back. ``kernelpro optimize`` runs with the tuner on each.

| replay | upstream change | the question |
|---|---|---|
| liger-ce-exp2 | Liger-Kernel #1266 + #1275, ops/cross_entropy.py: tl.exp -> tl.exp2(x * LOG2_E) (0.8.0 -> 0.8.1) | is the known gain measured, and recovered in reverse? |
| liger-ce-1266-only | #1266 alone: LOG2_E a plain global inside @triton.jit, rejected by newer Triton (reconstructed) | does the run survive a PR (or a base) that does not compile? |
| liger-dyt-autotune | Liger-Kernel #1208, ops/dyt.py: launch heuristic -> triton.autotune (0.7.0 -> 0.8.0) | is a 1-5 % change reported as noise, not as a gain? |
| triton-softmax-persistent | triton tutorial 02 (#3766 -> #3893): a program per row -> persistent programs sized by occupancy (our own re-implementation) | which way does it go on this GPU, at N=256 and N=4096? |

The liger sources are the released wheels that bracket each commit (.corpus/replays/, see
fetch_corpus.sh); their shared utilities come from liger-kernel 0.8.5. No release holds #1266
without #1275, so that state is reconstructed from 0.8.1 by the documented one-line change
(``LOG2_E = tl.constexpr(1.44...)`` -> ``LOG2_E = 1.44...``), and the output says so. Triton's
interpreter does not enforce the constexpr rule, so on a CPU that case compiles: only the GPU run
shows the compile error; nor can the DyT replay run there (liger's libdevice tanh and
triton.autotune need a GPU), so its CPU rows report the failure. Prints a markdown table and writes DIR/replays.json. On the GPU the
default set takes about 5 minutes (``--feedback none`` skips ncu; pass ``tools`` for the full loop).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
import yaml

from kernelpro.pipeline import run_optimize
from kernelpro.runner.basebranch import verdict as verdict_of
from kernelpro.settings import Settings

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parent / ".corpus" / "replays"
GAMMA = 1.03  # the final gate's margin: what kernelpro calls a real difference


class CorpusMissing(FileNotFoundError):
    """A wheel the replay needs is not in .corpus/replays."""


def wheel_file(version: str, member: str, corpus: Path = CORPUS) -> str:
    whl = corpus / f"liger_kernel-{version}-py3-none-any.whl"
    if not whl.exists():
        raise CorpusMissing(f"{whl} is missing: run `bash benchmarks/fetch_corpus.sh` (needs PyPI) and carry .corpus/")
    with zipfile.ZipFile(whl) as z:
        return z.read(member).decode()


def without_constexpr_log2e(src: str) -> str:
    """Liger #1266 alone: the same exp2 code with LOG2_E a plain Python float (what #1275 fixed)."""
    old = "LOG2_E = tl.constexpr(1.4426950408889634)"
    if old not in src:
        raise ValueError("liger-kernel 0.8.1's cross_entropy.py no longer has the constexpr LOG2_E line")
    return src.replace(old, "LOG2_E = 1.4426950408889634")


# ---------------------------------------------------------------- our own softmax pair (triton tutorial 02)

SOFTMAX_ROW = '''"""Row softmax, one program per row (the tutorial's shape before #3893; written for kernelpro)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_row_kernel(x_ptr, y_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    y = torch.empty_like(x)
    BLOCK = triton.next_power_of_2(cols)
    _softmax_row_kernel[(rows,)](x, y, x.stride(0), cols, BLOCK=BLOCK, num_warps=4)
    return y
'''

SOFTMAX_PERSISTENT = '''"""Row softmax with persistent programs: as many as fit on the GPU at once, each looping over rows
(the tutorial's shape after #3893; written for kernelpro)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_persistent_kernel(x_ptr, y_ptr, stride, n_rows, n_cols, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    start = tl.program_id(0)
    step = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    for row in tl.range(start, n_rows, step, num_stages=STAGES):
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
        x = x - tl.max(x, axis=0)
        e = tl.exp(x)
        tl.store(y_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


def _programs(x: torch.Tensor, num_warps: int) -> int:
    if x.device.type != "cuda":
        return 4  # the interpreter has no SMs to fill
    props = torch.cuda.get_device_properties(x.device)
    # Occupancy from warps alone (2048 threads per SM on Hopper): enough programs to fill every SM.
    return props.multi_processor_count * max(1, 2048 // (32 * num_warps))


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, cols = x.shape
    y = torch.empty_like(x)
    BLOCK = triton.next_power_of_2(cols)
    num_warps = 8
    grid = (min(rows, _programs(x, num_warps)),)
    _softmax_persistent_kernel[grid](x, y, x.stride(0), rows, cols, BLOCK=BLOCK, STAGES=2, num_warps=num_warps)
    return y
'''

CE_WRAPPER = '''"""Forward cross-entropy through Liger's cross_entropy_forward (mean reduction, no gradient)."""

import torch

from kernels.cross_entropy import cross_entropy_forward


def ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    # kernelpro draws integer inputs in [-64, 64); labels must be valid classes.
    labels = target.remainder(logits.shape[1])
    loss, _, _, _, _ = cross_entropy_forward(logits, labels, None, -100, 0.0, 0.0, "mean", None, False)
    return loss
'''
CE_REFERENCE = '''import torch
def run(logits, target):
    labels = target.remainder(logits.shape[1])
    return torch.nn.functional.cross_entropy(logits.float(), labels, reduction="mean").to(logits.dtype)
'''
DYT_WRAPPER = '''"""DyT forward through Liger's liger_dyt_fwd."""

from kernels.dyt import liger_dyt_fwd


def dyt(x, alpha, gamma, beta):
    return liger_dyt_fwd(x, alpha, gamma, beta)
'''
DYT_REFERENCE = '''import torch
def run(x, alpha, gamma, beta):
    return (gamma.float() * torch.tanh(alpha.float() * x.float()) + beta.float()).to(x.dtype)
'''
SOFTMAX_REFERENCE = "import torch\ndef run(x):\n    return torch.softmax(x, dim=-1)\n"


@dataclass(frozen=True)
class Replay:
    """One upstream change, its two sides and the target that judges them."""

    name: str
    """Row label and --only key."""
    change: str
    """What the upstream change did, with its PR numbers."""
    expect: str
    """'gain' (after is faster), 'noise' (within a few %), 'compile' (one side does not compile), 'measure'."""
    before: Callable[[], str]
    """The kernel file before the change."""
    after: Callable[[], str]
    """The kernel file after the change."""
    kernel_path: str
    """Where the kernel file lives in the replay repository."""
    extra_files: Mapping[str, str]
    """Other files of the target (the wrapper the harness calls)."""
    entry_point: str
    """file::function the harness calls."""
    definition: Callable[[bool], dict[str, Any]]
    """Inline definition for .kernelpro.yml; the argument says GPU (True) or CPU sizes and dtypes."""
    workloads: Callable[[bool], list[dict[str, int]]]
    """Workloads (GPU or CPU)."""
    tolerances: Mapping[str, float]
    """atol/rtol."""
    note: str = ""
    """Anything reconstructed rather than released, said in the output."""
    needs_corpus: bool = True
    """Reads liger-kernel wheels from .corpus/replays."""


def _ce_definition(gpu: bool) -> dict[str, Any]:
    dt = "bfloat16" if gpu else "float32"
    return {"op_type": "cross_entropy", "axes": {"BT": {"type": "var"}, "V": {"type": "var"}},
            "inputs": {"logits": {"shape": ["BT", "V"], "dtype": dt}, "target": {"shape": ["BT"], "dtype": "int64"}},
            "outputs": {"loss": {"shape": [], "dtype": dt}}, "reference": CE_REFERENCE}


def _dyt_definition(gpu: bool) -> dict[str, Any]:
    dt = "bfloat16" if gpu else "float32"
    return {"op_type": "dyt", "axes": {"M": {"type": "var"}, "N": {"type": "var"}, "ONE": {"type": "const", "value": 1}},
            "inputs": {"x": {"shape": ["M", "N"], "dtype": dt}, "alpha": {"shape": ["ONE"], "dtype": dt},
                       "gamma": {"shape": ["N"], "dtype": dt}, "beta": {"shape": ["N"], "dtype": dt}},
            "outputs": {"y": {"shape": ["M", "N"], "dtype": dt}}, "reference": DYT_REFERENCE}


def _softmax_definition(gpu: bool) -> dict[str, Any]:
    return {"op_type": "softmax", "axes": {"M": {"type": "var"}, "N": {"type": "var"}},
            "inputs": {"x": {"shape": ["M", "N"], "dtype": "float32"}},
            "outputs": {"y": {"shape": ["M", "N"], "dtype": "float32"}}, "reference": SOFTMAX_REFERENCE}


CE_FILE = "liger_kernel/ops/cross_entropy.py"
REPLAYS: tuple[Replay, ...] = (
    Replay("liger-ce-exp2", "Liger #1266 + #1275: online softmax tl.exp -> tl.exp2(x * LOG2_E) (liger-kernel 0.8.0 -> 0.8.1)",
           "gain", lambda: wheel_file("0.8.0", CE_FILE), lambda: wheel_file("0.8.1", CE_FILE),
           "kernels/cross_entropy.py", {"kernels/ce_wrapper.py": CE_WRAPPER}, "kernels/ce_wrapper.py::ce",
           _ce_definition, lambda gpu: [{"BT": 8192, "V": 128256}] if gpu else [{"BT": 4, "V": 256}],
           {"atol": 1e-2, "rtol": 2e-2}),
    Replay("liger-ce-1266-only", "Liger #1266 alone: exp2 with LOG2_E a plain global inside @triton.jit (0.8.0 -> #1266)",
           "compile", lambda: wheel_file("0.8.0", CE_FILE), lambda: without_constexpr_log2e(wheel_file("0.8.1", CE_FILE)),
           "kernels/cross_entropy.py", {"kernels/ce_wrapper.py": CE_WRAPPER}, "kernels/ce_wrapper.py::ce",
           _ce_definition, lambda gpu: [{"BT": 8192, "V": 128256}] if gpu else [{"BT": 4, "V": 256}],
           {"atol": 1e-2, "rtol": 2e-2},
           note="reconstructed: no release holds #1266 without #1275; 0.8.1 with `LOG2_E = tl.constexpr(...)` "
                "turned back into a plain float, the one line #1275 changed"),
    Replay("liger-dyt-autotune", "Liger #1208: DyT launch heuristic -> triton.autotune (liger-kernel 0.7.0 -> 0.8.0)",
           "noise", lambda: wheel_file("0.7.0", "liger_kernel/ops/dyt.py"),
           lambda: wheel_file("0.8.0", "liger_kernel/ops/dyt.py"), "kernels/dyt.py",
           {"kernels/dyt_wrapper.py": DYT_WRAPPER}, "kernels/dyt_wrapper.py::dyt", _dyt_definition,
           lambda gpu: [{"M": 8192, "N": 4096}] if gpu else [{"M": 4, "N": 256}], {"atol": 1e-2, "rtol": 1e-2}),
    Replay("triton-softmax-persistent", "triton tutorial 02 (#3766 -> #3893): program per row -> persistent programs",
           "measure", lambda: SOFTMAX_ROW, lambda: SOFTMAX_PERSISTENT, "kernels/softmax.py", {},
           "kernels/softmax.py::softmax", _softmax_definition,
           lambda gpu: [{"M": 4096, "N": 256}, {"M": 4096, "N": 4096}] if gpu else [{"M": 8, "N": 64}],
           {"atol": 1e-5, "rtol": 1e-5},
           note="our own re-implementation of both tutorial versions (the tutorial's code is not copied)",
           needs_corpus=False),
)


def make_repo(root: Path, replay: Replay, direction: str, gpu: bool, budget: int) -> Path:
    """base commit = one side, head commit = the other; .kernelpro.yml on the base."""
    base_src, head_src = (replay.before(), replay.after()) if direction == "forward" else (replay.after(), replay.before())
    repo = git.Repo.init(root)
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "kernelpro-bench")
        cw.set_value("user", "email", "bench@kernelpro.invalid")
    files = [replay.kernel_path, *replay.extra_files]
    config = {"version": 1, "targets": [{
        "name": replay.name.replace("-", "_"), "files": files, "language": "triton",
        "entry_point": replay.entry_point, "definition": replay.definition(gpu),
        "workloads": replay.workloads(gpu), "tolerances": dict(replay.tolerances),
        "budget": {"evaluations": budget, "minutes": 10, "timeout_s": 240},
    }]}
    (root / ".kernelpro.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    for path, text in {replay.kernel_path: base_src, **replay.extra_files}.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    repo.index.add([".kernelpro.yml", *files])
    repo.index.commit("base")
    (root / replay.kernel_path).write_text(head_src)
    repo.index.add([replay.kernel_path])
    repo.index.commit(f"pull request: {direction} {replay.name}")
    return root


def verdict(replay: Replay, direction: str, r: Mapping[str, Any]) -> dict[str, Any]:
    """What the run says about the replay's question, from result.json."""
    head_ok = r["baseline"]["status"] == "PASSED"
    base = r.get("base_branch") or {}
    base_ok = base.get("status") == "PASSED"
    # > 1: the base branch's kernel is faster than the pull request's (the PR regressed).
    base_vs_head = float(base.get("speedup_vs_head") or 0.0) if base_ok and head_ok else math.nan
    found = float(r["winner"]["speedup"]) if r.get("winner") else 1.0
    # The runner's reading of its side-by-side measurement (head, base, head); by the margin alone otherwise.
    reading = base.get("verdict") or (verdict_of([base_vs_head], GAMMA) if math.isfinite(base_vs_head) else "")
    span = (f" ({1 / base['high']:.3f}-{1 / base['low']:.3f})" if math.isfinite(base_vs_head) and base.get("low")
            and base.get("high") else "")
    if replay.expect == "compile":
        broken = "head" if direction == "forward" else "base"
        status = r["baseline"]["status"] if broken == "head" else base.get("status", "not measured")
        ok = status == "COMPILE_ERROR"
        text = (f"{broken} {status}; run ended cleanly ({r['stop_reason']})" if ok
                else f"{broken} {status}: no compile error here (the interpreter does not enforce constexpr globals)"
                if r["device"] == "cpu" else f"{broken} {status}: expected COMPILE_ERROR")
    elif not head_ok:
        ok, text = False, f"the PR's kernel failed: {r['baseline']['status']}"
    elif replay.expect == "noise":
        ok = reading == "on par"
        text = (f"PR vs base {1 / base_vs_head:.3f}x{span}: {'within' if ok else 'outside'} the {GAMMA:.2f}x gate margin"
                if math.isfinite(base_vs_head) else "base branch not measured")
    elif replay.expect == "gain" and direction == "reverse":
        seen = reading == "slower"
        recovered = seen and found >= 0.95 * base_vs_head
        ok = seen
        text = (f"PR vs base {1 / base_vs_head:.3f}x{span}: regression {'seen' if seen else 'not seen'}; "
                f"search found {found:.3f}x ({'recovered' if recovered else 'not recovered'})"
                if math.isfinite(base_vs_head) else "base branch not measured")
    elif replay.expect == "gain":
        ok = reading == "faster"
        text = f"PR vs base {1 / base_vs_head:.3f}x{span}: {reading}" if math.isfinite(base_vs_head) else "base branch not measured"
    else:
        ok = math.isfinite(base_vs_head)
        text = f"PR vs base {1 / base_vs_head:.3f}x{span}: {reading}" if ok else "base branch not measured"
    return {"answered": ok, "verdict": text, "pr_vs_base": (1 / base_vs_head) if base_vs_head else math.nan,
            "found": found}


def run_one(replay: Replay, direction: str, out: Path, settings: Settings, budget: int, feedback: str,
            gpu: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"replay-{replay.name}-") as tmp:
        repo = make_repo(Path(tmp) / "repo", replay, direction, gpu, budget)
        run_out = out / f"{replay.name}-{direction}"
        shutil.rmtree(run_out, ignore_errors=True)
        rc = run_optimize(repo, "HEAD~1", "HEAD", run_out, settings, kernel=None, budget=budget,
                          programmer_name="tuner", search="greedy", feedback=feedback)
    (r,) = json.loads((run_out / "summary.json").read_text())["targets"]
    v = verdict(replay, direction, r)
    return {"replay": replay.name, "direction": direction, "expect": replay.expect, "exit_code": rc,
            "head": r["baseline"]["status"], "base": (r.get("base_branch") or {}).get("status", "-"),
            "evaluations": r["evaluations"], "statuses": r["statuses"], "winner": r["winner"] is not None,
            "stop_reason": r["stop_reason"], "wall_s": round(time.perf_counter() - t0, 1), "device": r["device"],
            "hardware": r["hardware"], "change": replay.change, "note": replay.note, **v}


def _site(corpus: Path) -> Path | None:
    """liger-kernel 0.8.5 unpacked (a pure-Python wheel) for the utilities the replayed files import."""
    try:
        import liger_kernel  # noqa: F401

        return None
    except ImportError:
        pass
    whl = corpus / "liger_kernel-0.8.5-py3-none-any.whl"
    if not whl.exists():
        return None
    site = Path(tempfile.mkdtemp(prefix="replay-site-"))
    with zipfile.ZipFile(whl) as z:
        z.extractall(site)
    return site


def render(rows: list[dict[str, Any]]) -> str:
    lines = []
    if rows and rows[0]["device"] != "cuda":
        lines += ["> CPU run (Triton interpreter): timings are not GPU timings.", ""]
    lines += ["| replay | direction | expect | PR kernel | base kernel | PR vs base | verified speedup found | "
              "evaluations | answered | verdict |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pvb = f"{r['pr_vs_base']:.3f}x" if math.isfinite(r["pr_vs_base"]) else "-"
        lines.append(f"| {r['replay']} | {r['direction']} | {r['expect']} | {r['head']} | {r['base']} | {pvb} | "
                     f"{r['found']:.3f}x | {r['evaluations']} | {'yes' if r['answered'] else 'no'} | {r['verdict']} |")
    notes = sorted({f"{r['replay']}: {r['note']}" for r in rows if r["note"]})
    if notes:
        lines += ["", *[f"- {n}" for n in notes]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", choices=[r.name for r in REPLAYS], help="replays to run (default: all)")
    p.add_argument("--directions", nargs="*", default=["forward", "reverse"], choices=("forward", "reverse"))
    p.add_argument("--budget", type=int, default=3, help="evaluations per run, the PR's kernel included")
    p.add_argument("--feedback", default="none", choices=("none", "raw", "tools"))
    p.add_argument("--corpus", default=str(CORPUS), help="folder of the liger-kernel wheels (fetch_corpus.sh)")
    p.add_argument("--out", default="benchmark-out")
    args = p.parse_args(argv)
    os.environ.setdefault("KERNELPRO_PROGRESS", "0")
    settings = Settings.from_env()
    gpu = settings.resolved_device() == "cuda"
    corpus = Path(args.corpus)
    chosen = [r for r in REPLAYS if not args.only or r.name in args.only]
    site = _site(corpus)
    if site is not None:
        # The sandboxed children keep PYTHONPATH (it is on their allowlist): they import liger's utilities.
        os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (str(site), os.environ.get("PYTHONPATH", "")) if x)
    out = Path(args.out) / "replays"
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []

    def save() -> None:
        # After every run: a run cut short by a time limit still leaves the rows it finished.
        (Path(args.out) / "replays.json").write_text(json.dumps({"rows": rows, "skipped": skipped}, indent=2) + "\n")

    try:
        for replay in chosen:
            if replay.needs_corpus and not (corpus / "liger_kernel-0.8.5-py3-none-any.whl").exists():
                skipped.append(f"{replay.name}: no liger-kernel wheels in {corpus}; run benchmarks/fetch_corpus.sh")
                continue
            for direction in args.directions:
                rows.append(run_one(replay, direction, out, settings, args.budget, args.feedback, gpu))
                save()
                print(render(rows[-1:]), flush=True)
    finally:
        if site is not None:
            shutil.rmtree(site, ignore_errors=True)
    save()
    print("\n" + render(rows))
    for s in skipped:
        print(f"\nskipped {s}")
    return rows


if __name__ == "__main__":
    main()
