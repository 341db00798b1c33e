"""Markdown the bot posts: the follow-up PR body, the "baseline stands" comment, the job summary.

Input is a validated :class:`~kernelpro.bot.artifact.Results`, whose text still came from the
optimize job (untrusted): every string from it goes through :func:`md` (inline Markdown) or
:func:`code_block` before it reaches a template, so hostile stop reasons, notes, finding titles or
file names cannot inject HTML, close a code fence, break a table or ``@mention`` anyone.

GitHub refuses a PR body over 65,536 characters. :func:`render_body` renders with every part, and
when the result is too long drops parts in this order, stopping as soon as it fits:

1. the best-speedup-by-evaluation chart and search details (``curve``);
2. the per-workload timing, correctness and roofline tables (``workloads``);
3. the profiling findings (``findings``);
4. every per-kernel section: one headline row per kernel remains (``sections``);
5. headline rows beyond what fits, counted in a closing line.

The headline (verified speedups) and the link to the results artifact are always kept, and a
note lists what was left out. All numbers come from the artifact; nothing is estimated except
the base branch's geometric-mean time, which is labelled as derived.
"""

from __future__ import annotations

import functools
import importlib.metadata
import math
import re
from collections.abc import Iterable, Sequence
from typing import Any

import jinja2

from kernelpro import __version__
from kernelpro.markdown import code_block, md
from kernelpro.templates import environment

from .artifact import Results, TargetResults, Winner, WorkloadTiming

__all__ = [
    "BODY_LIMIT",
    "CANCELLED_MARKER",
    "DROP_ORDER",
    "code_block",
    "fit",
    "last_line",
    "md",
    "model_label",
    "render_body",
    "render_job_summary",
    "render_comment",
    "render_no_pr_comment",
    "render_summary_comment",
]

BODY_LIMIT = 65_536
"""GitHub's limit on a PR body or comment, in characters."""
_BUDGET = BODY_LIMIT - 1_536
"""What we aim for: a margin for counting differences (GitHub may count UTF-16 units)."""
DROP_ORDER = ("curve", "workloads", "findings", "sections")
"""Parts dropped, first to last, when the body is over the limit."""
_DROP_LABELS = {
    "curve": "the best-speedup-by-evaluation charts",
    "workloads": "the per-workload timing, correctness and roofline tables",
    "findings": "the profiling findings",
    "sections": "the per-kernel sections (reproduction commands, provenance details)",
}
MAX_CHART_POINTS = 60
"""The chart samples the curve down to this many points."""
NOT_MEASURED = "not measured in this version"
MODEL_WRITTEN = "Code written by a model, verified by measurement: review it as code."
"""The first line of everything the bot says about a patch it could not recompute itself."""
CPU_TIMING = "in Triton's CPU interpreter, not a GPU timing"
"""What a speedup measured without a GPU is, said wherever the GPU wording would say "faster"
(the caveat's own words: these timings are not GPU timings; kernels ran in Triton's interpreter
on the CPU). No text the bot writes calls a kernel faster from such a run (issue 24)."""

_URL = re.compile(r"https?://[A-Za-z0-9.-]+(?::\d{1,5})?(?:/[A-Za-z0-9._~%!$&'()*+,;=:@/-]*)?")


# --------------------------------------------------------------------------- escaping


def model_label(names: Sequence[str], gpu: bool = True) -> str:
    """One line for the top of a PR body, comment or summary whose patch of ``names`` (target names)
    a model wrote: kernelpro measured it faster and correct (``gpu``: timed on a GPU; otherwise
    verified correct, with timings from the CPU interpreter), and checked nothing else about it."""
    kernels = ", ".join(f"`{n}`" if re.fullmatch(r"[A-Za-z0-9._-]{1,100}", n) else "a kernel" for n in names[:20])
    measured = ("measured it faster and correct" if gpu else
                "verified it correct (its timings are not GPU timings: Triton's interpreter on the CPU)")
    return (f"**{MODEL_WRITTEN}** The patch of {kernels} was written by a language model, not derived from "
            f"launch parameters; kernelpro {measured} on the workloads below and checked "
            "nothing else about what the code does.")


def _all_gpu(targets: Iterable[TargetResults]) -> bool:
    """Whether every one of ``targets`` was timed on a GPU: the condition for any speed claim
    about them together (as :func:`~kernelpro.bot.publish.title_for` decides the title)."""
    return all(t.gpu_timings for t in targets)


def _safe_url(url: str | None) -> str | None:
    if not url:
        return None
    url = url.strip()
    return url if _URL.fullmatch(url) and len(url) <= 500 else None


# --------------------------------------------------------------------------- numbers


def _ms(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:.4f}" if x < 1 else f"{x:.3f}"


def _x(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.0f} %"


def _sci(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2e}"


def _geomean(xs: Iterable[float]) -> float | None:
    vals = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in vals) / len(vals)) if vals else None


def _spread(mid: float, lo: float | None, hi: float | None) -> str:
    return f"{_ms(mid)} ({_ms(lo)}-{_ms(hi)})" if lo is not None and hi is not None else _ms(mid)


def _energy(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x * 1e3:.3f} mJ" if x >= 1e-3 else f"{x * 1e6:.1f} µJ"


# --------------------------------------------------------------------------- view models


def _libs(t: TargetResults) -> dict[str, str]:
    return dict(t.libs)


def _driver(t: TargetResults) -> str | None:
    libs = _libs(t)
    for k in ("driver", "nvidia_driver", "cuda_driver"):
        if k in libs:
            return libs[k]
    return None


def _gate_text(w: Winner, gpu: bool = True) -> str:
    trials = sorted({c.trials for c in w.correctness})
    trials_s = "/".join(str(n) for n in trials) if trials else "n/a"
    pace = (f"at least {_x(w.gamma)} faster than the PR's kernel" if gpu
            else f"at least {_x(w.gamma)} the PR's kernel's speed {CPU_TIMING},")
    return (f"passed the final gate: {pace} on every one of "
            f"{len(w.workloads)} workload(s), re-measured side by side (gamma = {w.gamma:g}), and correct on "
            f"{trials_s} fresh seeded input set(s) per workload{_MEMCHECK.get(w.memcheck, '')}")


_MEMCHECK = {
    "clean": "; compute-sanitizer memcheck found no memory errors",
    "not run": "; compute-sanitizer memcheck was not run (not found on the runner)",
}


def _guards(w: Winner) -> tuple[str, list[dict[str, str]], list[str]]:
    """The winner's guard shapes for the body: a one-line verdict (with the range of PR/candidate
    ratios), a row per shape, and the notes on shapes not derived. A reviewer sees which sizes
    beyond the configured workloads were timed, so 'faster' is not read as 'faster everywhere'."""
    g = w.guards
    if g is None:
        return "none timed (turned off, or written by an older kernelpro)", [], []
    ratios = [s.speedup for s in g.shapes if s.speedup is not None]
    span = f" (PR / candidate {_x(min(ratios))} to {_x(max(ratios))})" if ratios else ""
    line = (f"{len(ratios)} shape(s) beyond the listed workloads, none slower than the PR's kernel beyond the "
            f"noise{span}") if ratios else "no shape beyond the listed workloads could be timed"
    if g.skipped:
        line += f"; {len(g.skipped)} not judged (the PR's kernel fails there)"
    rows = [{"axes": md(s.axes, 80), "why": md(s.why, 120), "baseline": _ms(s.baseline_ms), "best": _ms(s.candidate_ms),
             "ratio": _x(s.speedup), "noise": "n/a" if s.noise is None else f"{s.noise:.3f}",
             "verdict": md(s.verdict, 40)} for s in g.shapes[:40]]
    rows += [{"axes": md(s.axes, 80), "why": md(s.why, 120), "baseline": "-", "best": "-", "ratio": "-", "noise": "-",
              "verdict": "not judged: " + md(s.reason, 120)} for s in g.skipped[:20]]
    return line, rows, [md(n, 300) for n in g.notes[:10]]


def _base_branch(t: TargetResults, short: bool = False) -> str:
    """The PR's kernel against the base branch's: a sentence for the PR body, or ``short`` for a
    table cell of the comment. One reading of the runner's verdict for both."""
    bb = t.base_branch
    if bb is None:
        return "no different version on the base branch" if short else \
            "not timed: the base branch has no different version of this kernel"
    if bb.status != "PASSED":
        failed = f"base branch's kernel did not pass ({md(bb.status, 60)})"
        return failed if short else f"the {failed}, so no comparison"
    if not bb.speedup_vs_head:
        return "not compared" if short else "not compared: a kernel failed when the two were re-measured side by side"
    rel = 1.0 / bb.speedup_vs_head
    if not t.gpu_timings:
        # Timed in Triton's interpreter: a ratio, never a verdict of faster or slower.
        if short:
            return f"{_x(rel)} the base's speed in the CPU interpreter"
        return f"the PR's kernel runs at {_x(rel)} the speed of the base branch's, {CPU_TIMING}"
    # The runner's verdict holds its margin; an artifact without one (older runner) falls back to 3 %.
    reading = bb.verdict or ("slower" if rel < 0.97 else "faster" if rel > 1.03 else "on par")
    if short:
        return {"slower": f"**the PR made it slower** ({_x(rel)} the base's speed)",
                "faster": f"the PR made it faster ({_x(rel)})",
                "uncertain": f"not established ({_x(rel)}, the runs' spread overlaps)"}.get(reading, f"on par ({_x(rel)})")
    est = ""
    if t.winner is not None and t.winner.workloads and (g := _geomean(w.baseline_ms for w in t.winner.workloads)):
        est = f"; base branch ≈ {_ms(g / bb.speedup_vs_head)} ms geometric mean (derived)"
    span = (f" ({_x(1.0 / bb.high)}-{_x(1.0 / bb.low)}, measured side by side: head, base, head)"
            if bb.low and bb.high else "")
    if reading == "slower":
        verdict = f"**the PR made this kernel slower**: its kernel runs at {_x(rel)}{span} the speed of the base branch's"
    elif reading == "faster":
        verdict = f"the PR's own change is {_x(rel)}{span} the speed of the base branch's kernel"
    elif reading == "uncertain":
        verdict = (f"no difference established: the medians put the PR's kernel at {_x(rel)}{span} the speed of the "
                   "base branch's, but the runs' spread overlaps (one of the three measurements was far from the others)")
    else:
        verdict = f"the PR's kernel is on par with the base branch's ({_x(rel)}{span}): no difference beyond the margin"
    return verdict + est


def _roofline(t: TargetResults) -> str:
    s = t.stage1
    if s is None:
        return (
            "not measured (no GPU profile in this run)"
            if t.gpu_timings
            else "not measured (no GPU)"
        )
    cand = {w.uuid: w.candidate_ms for w in t.winner.workloads} if t.winner else {}
    before = [r.pct_of_roofline for r in s.workloads if r.pct_of_roofline is not None]
    after = [100.0 * r.floor_ms / cand[r.uuid] for r in s.workloads
             if r.floor_ms is not None and cand.get(r.uuid)]

    def rng(xs: Sequence[float]) -> str:
        lo, hi = min(xs), max(xs)
        return _pct(lo) if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f} %"

    parts = []
    if before:
        parts.append(f"PR's kernel at {rng(before)} of the roofline floor")
    if after:
        parts.append(f"the winner at {rng(after)}")
    return ", ".join(parts) if parts else "no roofline rows"


def _stage1_class(t: TargetResults) -> str:
    s = t.stage1
    if s is None:
        return "n/a"
    text = f"**{md(s.bottleneck, 40)}-bound**"
    if s.note:
        text += f" ({md(s.note, 300)})"
    return text


def _energy_row(t: TargetResults) -> str:
    w = t.winner
    rows = [
        x
        for x in (w.workloads if w else ())
        if x.baseline_energy_j is not None or x.candidate_energy_j is not None
    ]
    if not rows:
        return ""  # energy was off: say nothing rather than "not measured"
    return "; ".join(
        f"{md(x.axes, 80)}: {_energy(x.baseline_energy_j)} -> {_energy(x.candidate_energy_j)}"
        + _energy_ratio(x)
        for x in rows
    )


def _energy_ratio(x: WorkloadTiming) -> str:
    if x.energy_ratio is None:
        return ""
    ci = (f", 95 % CI {x.energy_ratio_low:.3f}-{x.energy_ratio_high:.3f}"
          if x.energy_ratio_low is not None and x.energy_ratio_high is not None else "")
    return f" (x{x.energy_ratio:.3f}{ci}; dynamic, NVML)"


def _chart(t: TargetResults) -> str | None:
    pts = list(t.curve)
    if not pts:
        return None
    if len(pts) > MAX_CHART_POINTS:
        step = math.ceil(len(pts) / MAX_CHART_POINTS)
        pts = pts[::step] + ([pts[-1]] if (len(pts) - 1) % step else [])
    top = max(p.best_speedup for p in pts)
    ymax = max(1.0, math.ceil(top * 1.1 * 10) / 10)
    xs = ", ".join(str(p.evaluation) for p in pts)
    ys = ", ".join(f"{p.best_speedup:.3f}" for p in pts)
    return ("```mermaid\nxychart-beta\n"
            '    title "Best speedup found by the search (search-time timings)"\n'
            f'    x-axis "evaluation" [{xs}]\n'
            f'    y-axis "speedup (x)" 0 --> {ymax:g}\n'
            f"    line [{ys}]\n```")


_RUN = re.compile(r"https?://[^/]+/([A-Za-z0-9._-]+/[A-Za-z0-9._-]+)/actions/runs/([0-9]+)(?:/.*)?")


_RELEASE = re.compile(r"[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}(?:-[0-9A-Za-z.-]{1,40})?")
"""A kernelpro version that names a release tag (``v`` + semantic version): the only version text
that goes into the install command (the artifact's is untrusted; a shell would run the rest)."""
_GITHUB_REPO = re.compile(r"https://github\.com/[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")


@functools.cache
def _kernelpro_repo() -> str | None:
    """The repository kernelpro is published from, as its installed metadata declares it (the
    ``Source`` project URL, which names the repository of the example workflow's ``uses:`` lines)."""
    try:
        entries = importlib.metadata.metadata("kernelpro").get_all("Project-URL") or []
    except importlib.metadata.PackageNotFoundError:
        return None
    urls = dict((label.strip().lower(), url.strip()) for label, _, url in (e.partition(",") for e in entries))
    for key in ("source", "repository", "homepage"):
        url = urls.get(key, "").removesuffix(".git").rstrip("/")
        if _GITHUB_REPO.fullmatch(url):
            return url
    return None


def _install(version: str) -> list[str]:
    """The command that installs the kernelpro that produced the results: its release tag
    ``v<version>`` (the one the workflow's ``uses:`` line pins), with the engine (torch, triton)."""
    note = "   # the kernelpro that produced these results"
    if not _RELEASE.fullmatch(version):
        version, note = __version__, "   # the results record no release version: this is the publishing kernelpro's"
    repo = _kernelpro_repo()
    if repo is None:
        return [f"# install kernelpro v{version} with its engine extra (the repository it came from is not recorded)"]
    # The tag's source archive: pip builds it as the action builds its checkout, and needs no git.
    return [f'python -m pip install "kernelpro[engine] @ {repo}/archive/refs/tags/v{version}.tar.gz"{note}']


def _repro(name: str, head_sha: str, base_sha: str, run_url: str | None, evaluations: int,
           version: str = __version__) -> str:
    """Commands that run as written: install the kernelpro ``version`` that produced the results,
    the real run, artifact pattern, head and base (no placeholders), and an evaluation that prints
    baseline, candidate and speedup per workload."""
    m = _RUN.fullmatch(run_url or "")
    lines = _install(version)
    if m:
        lines += [f"gh run download {m.group(2)} -R {m.group(1)} --pattern 'kernelpro-result-*' --dir kernelpro-results",
                  f"cd \"$(dirname \"$(find kernelpro-results -path '*/{name}/baseline.json' | head -n 1)\")\""]
    else:
        lines += [f"cd results/{name}   # the results folder of a local `kernelpro optimize --out results`"]
    lines += ["kernelpro evaluate --definition definition.json --solution solution.json --baseline baseline.json "
              "--workloads workloads.jsonl --out check.jsonl   # prints baseline ms, candidate ms, speedup"]
    if base_sha:
        lines += ["# or search again from the PR head, in a clone of the repository:",
                  f"git fetch origin {head_sha} {base_sha}",
                  f"kernelpro optimize --repo . --base {base_sha} --head {head_sha} --kernel {name} "
                  f"--budget {max(evaluations, 1)} --out results"]
    return "\n".join(lines)


def _kernel(t: TargetResults, head_sha: str, base_sha: str = "", run_url: str | None = None) -> dict[str, Any]:
    w = t.winner
    name = _name(t)
    statuses = ", ".join(f"{md(k, 40)} {v}" for k, v in t.statuses) or "none"
    search = (f"{md(t.search, 40)}, {t.evaluations} evaluation(s) ({statuses})"
              + (f", {t.resumed_from_journal} read back from the journal" if t.resumed_from_journal else "")
              + f", {t.seconds:.0f} s"
              + (f" (profiling {t.profile_seconds:.0f} s)" if t.profile_seconds else "")
              + f"; stopped: {md(t.stop_reason, 300)}")
    if t.feedback:
        search += f"; feedback {md(t.feedback, 20)}" + (
            f", tools {md(t.tool_mode, 20)}" if t.tool_mode else ""
        )
    fixed = {f.tool for f in t.winner_findings} if t.winner_findings is not None else None
    findings = [{"severity": md(f.severity, 20), "title": md(f.title, 300), "tool": md(f.tool, 60),
                 "source": md(f.source, 20),
                 "status": "" if fixed is None else ("not found in the winner" if f.tool not in fixed else "still present")}
                for f in t.findings[:20]]
    winner: dict[str, Any] | None = None
    if w is not None:
        base_g = _geomean(x.baseline_ms for x in w.workloads)
        best_g = _geomean(x.candidate_ms for x in w.workloads)
        guard_line, guard_rows, guard_notes = _guards(w)
        winner = {
            "guards": guard_line,
            "guard_rows": guard_rows,
            "guard_notes": guard_notes,
            "speedup": _x(w.speedup),
            "verdict": f"{_x(w.speedup)} faster" if t.gpu_timings else f"verified correct; {_x(w.speedup)} {CPU_TIMING}",
            "gate": _gate_text(w, t.gpu_timings),
            "baseline_time": f"{_ms(base_g)} ms" if base_g else "n/a",
            "best_time": f"{_ms(best_g)} ms" if best_g else "n/a",
            "lineage": "; then ".join(md(x, 200) for x in w.lineage[:20]) or md(w.note, 300),
            "params": ", ".join(f"{md(k, 100)} = {md(v, 40)}" for k, v in w.params[:30]),
            "files": ", ".join(md(f, 200) for f in t.patch_files),
            "workloads": [
                {
                    "axes": md(x.axes, 80),
                    "baseline": _spread(x.baseline_ms, x.baseline_p10_ms, x.baseline_p90_ms),
                    "best": _spread(x.candidate_ms, x.candidate_p10_ms, x.candidate_p90_ms),
                    "speedup": _x(x.speedup)
                    + (
                        f" ({_x(x.speedup_low)}-{_x(x.speedup_high)})"
                        if x.speedup_low is not None and x.speedup_high is not None
                        else ""
                    ),
                    "n": "n/a" if x.n is None else str(x.n),
                }
                for x in w.workloads
            ],
            "correctness": [
                {
                    "axes": md(axes_of.get(c.uuid, c.uuid), 80),
                    "trials": c.trials,
                    "seeds": ", ".join(str(s) for s in c.seeds[:8])
                    + (" ..." if len(c.seeds) > 8 else ""),
                    "max_abs": _sci(c.max_abs),
                    "max_rel": _sci(c.max_rel),
                    "rel_l2": _sci(c.rel_l2),
                }
                for axes_of in [{x.uuid: x.axes for x in w.workloads}]
                for c in w.correctness
            ],
        }
    s = t.stage1
    roofline_rows = []
    if s is not None:
        cand = {x.uuid: x.candidate_ms for x in w.workloads} if w else {}
        for r in s.workloads:
            after = (
                100.0 * r.floor_ms / cand[r.uuid]
                if r.floor_ms is not None and cand.get(r.uuid)
                else None
            )
            roofline_rows.append({"axes": md(r.axes, 80), "intensity": "n/a" if r.intensity is None else f"{r.intensity:.3g}",
                                  "floor": _ms(r.floor_ms), "baseline": _ms(r.baseline_ms),
                                  "before": _pct(r.pct_of_roofline), "after": _pct(after), "max": _x(r.max_speedup)})
    ceilings = None
    if s is not None and s.ceilings is not None:
        c = s.ceilings
        ceilings = f"{c.bandwidth_gbs:g} GB/s, {c.flops_tflops:g} TFLOP/s ({md(c.source, 100)})"
    gates_failed = [f"{md(g.solution, 60)}: {md(g.reason, 200)}" for g in t.gates if not g.passed][
        :10
    ]
    tol = (
        "; ".join(f"{md(x.dtype, 32)} atol={x.atol:g} rtol={x.rtol:g}" for x in t.tolerances)
        or "not recorded in result.json (written by an older kernelpro); see the artifact's report.md"
    )
    libs = _libs(t)
    return {
        "name": name,
        "gpu": t.gpu_timings,
        "hardware": md(t.hardware, 100),
        "winner": winner,
        "stop_reason": md(t.stop_reason, 300),
        "baseline_status": md(t.baseline_status, 40),
        "gates_failed": gates_failed,
        "base_branch": _base_branch(t),
        "roofline": _roofline(t),
        "stage1": _stage1_class(t),
        "compute_pct": None if s is None or s.compute_pct is None else _pct(s.compute_pct),
        "memory_pct": None if s is None or s.memory_pct is None else _pct(s.memory_pct),
        "ceilings": ceilings,
        "roofline_rows": roofline_rows,
        "energy": _energy_row(t),
        "findings": findings,
        "more_findings": max(0, len(t.findings) - 20),
        "tolerances": tol,
        "chart": _chart(t),
        "curve_len": len(t.curve),
        "search": search,
        "repro": code_block(_repro(name, head_sha, base_sha, run_url, t.evaluations, t.kernelpro_version), "bash"),
        "provenance": {
            "kernelpro": md(t.kernelpro_version, 40),
            "gpu": md(t.hardware, 100),
            "driver": md(_driver(t) or "not recorded", 60),
            "torch": md(libs.get("torch", "not recorded"), 60),
            "triton": md(libs.get("triton", "not recorded"), 60),
            "cuda": md(libs.get("cuda", "not recorded"), 60),
        },
    }


def _name(t: TargetResults) -> str:
    """The target name for a code span: load_results allows only ``[A-Za-z0-9._-]``, so it is inert."""
    return t.name if re.fullmatch(r"[A-Za-z0-9._-]{1,100}", t.name) else "invalid-name"


def _headline(t: TargetResults) -> dict[str, str]:
    w = t.winner
    return {
        "name": _name(t),
        "result": ("the PR's kernel stands" if w is None else f"**{_x(w.speedup)}** faster, verified" if t.gpu_timings
                   else f"verified correct; **{_x(w.speedup)}** {CPU_TIMING}"),
        "detail": (
            f"gate gamma {w.gamma:g}, {len(w.workloads)} workload(s)"
            if w
            else md(t.stop_reason, 200)
        ),
        "hardware": md(t.hardware, 60) + ("" if t.gpu_timings else " (not GPU timings)")
        + (f"; candidates confined by {md(t.confinement, 200)}" if t.confinement else ""),
        "evaluations": str(t.evaluations),
    }


# --------------------------------------------------------------------------- rendering


def _env() -> jinja2.Environment:
    return environment()


def render_body(results: Results, *, pr_number: int, head_sha: str, run_url: str | None,
                kernelpro_version: str, programmer: str, model: str | None,
                model_written: Sequence[str] = (), base_sha: str = "") -> str:
    """The follow-up PR's body, always within :data:`BODY_LIMIT` characters (see the module doc).
    ``model_written``: targets whose patch a model wrote (publish could not derive it), named in
    the first line by :func:`model_label`."""
    # Only a hex SHA goes into the text (and the reproduction command); anything else is a bug upstream.
    head = head_sha.lower() if re.fullmatch(r"[0-9a-fA-F]{7,64}", head_sha) else "unknown"
    base = base_sha.lower() if re.fullmatch(r"[0-9a-fA-F]{7,64}", base_sha or "") else ""
    url = _safe_url(run_url)
    ctx: dict[str, Any] = {
        "pr": int(pr_number),
        "head_sha": head,
        "run_url": url,
        "artifact_url": f"{url}#artifacts" if url else None,
        "kernelpro_version": md(kernelpro_version, 40),
        "programmer": md(programmer, 60),
        "model": md(model, 100) if model else None,
        "winners": [_headline(t) for t in results.winners],
        # Only a run whose every winner was timed on a GPU is called faster (the title's rule).
        "faster": bool(results.winners) and _all_gpu(results.winners),
        "headlines": [_headline(t) for t in results.targets],
        "n_targets": len(results.targets),
        "cpu": [_name(t) for t in results.targets if not t.gpu_timings],
        "guarded": any(t.winner.guards is not None and t.winner.guards.shapes for t in results.winners if t.winner),
        "kernels": [_kernel(t, head, base, url) for t in results.targets],
        "not_measured": NOT_MEASURED,
        "model_label": model_label(model_written, _all_gpu(results.targets)) if model_written else None,
    }
    template = _env().get_template("pr_body.md.j2")
    dropped: list[str] = []
    for level in range(len(DROP_ORDER) + 1):
        dropped = list(DROP_ORDER[:level])
        show = {part: part not in dropped for part in DROP_ORDER}
        omitted = [_DROP_LABELS[p] for p in dropped]
        body = template.render(**ctx, show=show, omitted=omitted, more_headlines=0)
        if len(body) <= _BUDGET:
            return body
    # Still too long with headline rows only: keep as many rows as fit and count the rest.
    rows = ctx["headlines"]
    lo, hi = 0, len(rows)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        body = template.render(**{**ctx, "headlines": rows[:mid]}, show=show, omitted=omitted,
                               more_headlines=len(rows) - mid)
        lo, hi = (mid, hi) if len(body) <= _BUDGET else (lo, mid - 1)
    body = template.render(**{**ctx, "headlines": rows[:lo]}, show=show, omitted=omitted,
                           more_headlines=len(rows) - lo)
    # A pathological fixed part; never exceed the limit.
    return fit(body, note="\n\n*(cut to fit GitHub's limit; the full report is in the results artifact)*\n")


def render_no_pr_comment(results: Results, *, run_url: str | None = None, pr_number: int | None = None,
                         head_sha: str = "", base_sha: str = "") -> str:
    """The sticky comment when no kernel has a verified winner: the baseline stands, and why
    (the same summary as :func:`render_summary_comment`, with no follow-up pull request)."""
    return render_summary_comment(results, pr_number=pr_number, head_sha=head_sha, base_sha=base_sha,
                                  run_url=run_url, reason="no candidate beat the pull request's kernel by "
                                  "the verified margin")


def render_comment(state: str, **ctx: Any) -> str:
    """A sticky-comment state from ``comment.md.j2`` (queued, running, failed, done, summary, fork).

    Every value in ``ctx`` must already be escaped (:func:`md`, :func:`code_block`, a safe URL):
    the template adds no escaping of its own, exactly like the PR body's."""
    base: dict[str, Any] = {"model_label": None, "n": 0, "i": 0, "evaluations": 0, "best": "", "reason": "",
                            "pr_url": None, "run_url": None, "programmers": [],
                            # fork: "found a faster kernel" only when the caller says every winner was timed
                            # on a GPU; otherwise "a verified kernel change", and the summary below says the rest.
                            "gpu": False}
    return fit(_env().get_template("comment.md.j2").render(**{**base, **ctx, "state": state}))


def _floor_pct(t: TargetResults) -> str:
    s = t.stage1
    if s is None:
        return "n/a (no GPU profile)" if t.gpu_timings else "n/a (no GPU)"
    cand = {w.uuid: w.candidate_ms for w in t.winner.workloads} if t.winner else {}
    after = [100.0 * r.floor_ms / cand[r.uuid] for r in s.workloads if r.floor_ms is not None and cand.get(r.uuid)]
    before = [r.pct_of_roofline for r in s.workloads if r.pct_of_roofline is not None]
    xs, who = (after, "") if after else (before, " (PR's kernel)")
    if not xs:
        return "n/a"
    lo, hi = min(xs), max(xs)
    return (_pct(lo) if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f} %") + who


def _energy_cell(t: TargetResults) -> str | None:
    ratios = [x.energy_ratio for x in (t.winner.workloads if t.winner else ()) if x.energy_ratio]
    g = _geomean(r for r in ratios if r is not None)
    return None if g is None else f"x{g:.2f} per call (NVML)"


def _summary_row(t: TargetResults) -> dict[str, Any]:
    w = t.winner
    speedup, why = "n/a", ""
    if w is not None:
        lows = [x.speedup_low if x.speedup_low is not None else x.speedup for x in w.workloads]
        highs = [x.speedup_high if x.speedup_high is not None else x.speedup for x in w.workloads]
        speedup = f"**{_x(w.speedup)}**" + (f" ({_x(min(lows))}-{_x(max(highs))})" if lows and highs else "")
        verdict = "faster, verified" if t.gpu_timings else "verified; CPU interpreter timing"
    else:
        verdict = "the baseline stands"
        why = md(t.stop_reason, 300)
        if t.baseline_status not in ("PASSED", "CONFIG_ERROR"):  # CONFIG_ERROR: its reason blames the configuration
            why = f"the PR's kernel fails verification ({md(t.baseline_status, 40)}): {why}"
        failed = [f"{md(g.solution, 60)} ({md(g.reason, 120)})" for g in t.gates if not g.passed][:3]
        if failed:
            why += "; failed the final gate: " + "; ".join(failed)
        elif t.baseline_status == "PASSED":
            best = max((c.best_speedup for c in t.curve), default=1.0)
            # optimize gates only candidates at the gate's gamma or more in the search (runner/optimize.py)
            why += (f"; the best candidate was {_x(best)} in the search, under the final gate's {_x(t.gamma)}, so no "
                    "gate ran" if t.gamma is not None and 1.0 < best < t.gamma
                    else "; no candidate passed verification and beat the PR's kernel")
    return {"name": _name(t), "verdict": verdict, "speedup": speedup, "floor": _floor_pct(t),
            "energy": _energy_cell(t) or "not measured", "base": _base_branch(t, short=True), "why": why,
            "measured_energy": _energy_cell(t) is not None}


def render_summary_comment(results: Results, *, pr_number: int | None = None, head_sha: str = "",
                           base_sha: str = "", pr_url: str | None = None, reason: str | None = None,
                           run_url: str | None = None, model_written: Sequence[str] = (),
                           follow_note: str = "") -> str:
    """The final sticky comment: a headline (never a speed claim from a non-GPU run), what was
    compared, per kernel the verdict, speedup with its range, % of the roofline floor, energy
    when measured and the PR-vs-base verdict, then the follow-up PR, the run and its artifact.
    ``reason``: untrusted text (escaped here); ``follow_note``: already-escaped text."""
    rows = [_summary_row(t) for t in results.targets]
    winners = [t for t in results.winners if t.winner is not None]
    gpu_winners = [t for t in winners if t.gpu_timings]
    if gpu_winners:
        g = _geomean(t.winner.speedup for t in gpu_winners if t.winner is not None)
        names = ", ".join(f"`{_name(t)}`" for t in gpu_winners[:5]) + (" and more" if len(gpu_winners) > 5 else "")
        headline = f"kernelpro makes {names} {_x(g)} faster" + (" (geometric mean)" if len(gpu_winners) > 1 else "")
    elif winners:
        headline = ("kernelpro found verified candidates in Triton's CPU interpreter: they are correct, "
                    "and their speed on a GPU is unknown")
    else:
        headline = "kernelpro: the baseline stands"
    head = head_sha.lower() if re.fullmatch(r"[0-9a-fA-F]{7,64}", head_sha or "") else ""
    base = base_sha.lower() if re.fullmatch(r"[0-9a-fA-F]{7,64}", base_sha or "") else ""
    url = _safe_url(pr_url)
    return render_comment(
        "summary", headline=headline, rows=rows, energy=any(r["measured_energy"] for r in rows),
        cpu=[_name(t) for t in results.targets if not t.gpu_timings],
        compared=pr_number is not None and bool(head), pr=int(pr_number or 0),
        head_sha=head[:12], base_sha=base[:12], pr_url=url, follow_note=follow_note,
        reason=md(reason, 500) if reason and not url else "", run_url=_safe_url(run_url),
        model_label=model_label(model_written, _all_gpu(results.targets)) if model_written else None,
        programmers=[_model_use(t) for t in results.targets if t.programmer is not None and t.programmer.model],
    )


def _model_use(t: TargetResults) -> dict[str, Any]:
    """A model programmer's use of its provider for one kernel, escaped (issue 21: the comment counts
    requests, tokens, retries and errors, and names the model and the provider's host)."""
    p = t.programmer
    assert p is not None
    return {"kernel": _name(t), "name": md(p.name, 40), "model": md(p.model, 100), "host": md(p.host, 100),
            "requests": p.requests, "tokens_in": p.tokens_in, "tokens_out": p.tokens_out,
            "retries": p.retries, "errors": p.errors}


def render_job_summary(results: Results, model_written: Sequence[str] = ()) -> str:
    """A short Markdown table for ``GITHUB_STEP_SUMMARY`` (the publish check's page); its first line
    is :func:`model_label` when a model wrote a published patch."""
    lines = [model_label(model_written, _all_gpu(results.targets)), ""] if model_written else []
    lines += ["## kernelpro", ""]
    if any(not t.gpu_timings for t in results.targets):
        lines += [
            "> **These timings are not GPU timings** (no GPU: Triton's interpreter on the CPU).",
            "",
        ]
    lines += ["| kernel | result | evaluations | hardware | stopped |", "|---|---|---|---|---|"]
    for t in results.targets:
        h = _headline(t)
        lines.append(
            f"| `{h['name']}` | {h['result']} | {h['evaluations']} | {h['hardware']} | {md(t.stop_reason, 120)} |"
        )
    return fit("\n".join(lines) + "\n")


CANCELLED_MARKER = "<!-- kernelpro:cancelled -->"
"""The hidden last line of a comment that ``/kernelpro cancel`` ended (bot/plan.py)."""
# State markers the bot writes as a comment's last line (bot/progress.py's live marker, the cancel's),
# and reads from there alone: text above them (a file name in the queued comment's .kernelpro.yml
# snippet) posed as a live marker and sent /kernelpro cancel to a run of the attacker's choosing
# (a red-team probe, session 27).
_STATE_MARKER = re.compile(r"<!-- kernelpro:(?:live run=[0-9]{1,20}|cancelled) -->")
_CUT = "\n\n*(cut to fit GitHub's limit; the rest is in the results artifact)*\n"


def last_line(body: str | None) -> str:
    """A comment's last non-empty line, stripped: where the bot's state markers are, and only there."""
    lines = [ln for ln in (body or "").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def _close_fences(text: str) -> str:
    """``text`` with a code fence a cut left open closed, so it cannot swallow what follows."""
    fence = ""
    for line in text.splitlines():
        run = len(line) - len(line.lstrip("`"))
        if not fence and run >= 3:
            fence = "`" * run
        elif fence and run >= len(fence) and not line.strip("`").strip():
            fence = ""
    return f"{text}\n{fence}" if fence else text


def fit(text: str, note: str = _CUT) -> str:
    """``text`` within GitHub's limit for a comment or body: cut, with ``note`` saying so, a code fence
    the cut left open closed, and a state marker on its last line kept last (a cut took a live marker
    with the end of a long comment, and /kernelpro cancel then found no run to stop)."""
    if len(text) <= _BUDGET:
        return text
    state = last_line(text)
    tail = ""
    if _STATE_MARKER.fullmatch(state):
        text, tail = text.rstrip()[: -len(state)].rstrip("\n"), f"\n{state}"
    return _close_fences(text[: _BUDGET - len(tail) - len(note) - 64]) + note + tail
