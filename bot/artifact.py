"""The optimize job's results directory, read as untrusted data by the publish step.

The optimize job runs the pull request's code on a GPU runner, so everything it uploads may have
been written by that code: ``summary.json``, the per-target ``patch.diff`` and ``report.md`` are
parsed here as plain JSON and text, never imported, executed or unpickled, and this module does not
import ``kernelpro.runner``. Every value is checked (types, finite numbers in range, bounded
strings, bounded lists) and every patch must be a plain unified diff that only *modifies* the
target's kernel files named by the trusted base-branch configuration (the caller passes them as
``allowed_files``). Anything else raises :class:`ArtifactError` and the publish step stops.

Layout read (written by ``kernelpro optimize``)::

    DIR/summary.json            {"targets": [<result.json of each target>], "config": "..."}
    DIR/<target>/patch.diff     the winner against the PR head; empty when the baseline stands
    DIR/<target>/report.md      optional; only its ``Tolerances:`` line is parsed

When ``summary.json`` is absent, ``DIR/<target>/result.json`` of every sub-directory is read instead
(one optimize job per target, artifacts downloaded side by side). The aggregate ``DIR/patch.diff``
is never read: publish applies :attr:`TargetResults.patch` of each target, which was checked
against that target's own files.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "MAX_PATCH_BYTES",
    "MAX_SUMMARY_BYTES",
    "ArtifactError",
    "BaseBranch",
    "Ceilings",
    "Correctness",
    "CurvePoint",
    "Finding",
    "Gate",
    "Results",
    "RooflineRow",
    "Stage1",
    "TargetResults",
    "Tolerance",
    "Winner",
    "WorkloadTiming",
    "check_patch",
    "extract_results",
    "load_results",
]

MAX_SUMMARY_BYTES = 5 * 1024 * 1024
"""summary.json (or one result.json) larger than this is refused."""
MAX_PATCH_BYTES = 1024 * 1024
"""A target's patch.diff larger than this is refused."""
MAX_PATCH_LINES = 20_000
"""A target's patch.diff with more lines than this is refused."""
MAX_REPORT_BYTES = 2 * 1024 * 1024
"""report.md larger than this is refused (only its tolerance line is read)."""
MAX_NAME = 200
"""Longest identifier-like string (target, solution, status, tool, library name)."""
MAX_TEXT = 4000
"""Longest free-text string (notes, stop reasons, logs, titles)."""
MAX_LIST = 10_000
"""Longest list (curve points, gate rows, workloads, findings)."""
MAX_TARGETS = 256
"""Most targets in one results directory."""

SEVERITIES = ("critical", "high", "medium", "low", "info")
"""Finding severities, most severe first."""

_TARGET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(?: .*)?")
_TOLERANCE = re.compile(r"([A-Za-z0-9_]{1,32}) atol=([0-9.eE+-]{1,32}) rtol=([0-9.eE+-]{1,32})")
_REFUSE = "the publish step refuses to continue (nothing was pushed or posted from these artifacts)"


class ArtifactError(ValueError):
    """An artifact of the optimize job is malformed or oversteps; publishing stops."""

    def __init__(self, file: str | Path, what: str) -> None:
        self.file = str(file)
        """The artifact file at fault."""
        self.what = what
        """What was wrong with it."""
        super().__init__(f"{self.file}: {what}; {_REFUSE}")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class WorkloadTiming:
    """One workload's final-gate timing, baseline (PR kernel) against the winner."""

    uuid: str
    """Workload id."""
    axes: str
    """The workload's variable axes, e.g. ``M=4096``."""
    baseline_ms: float
    """Median time of the PR's kernel."""
    baseline_p10_ms: float | None
    """10th percentile of the PR's kernel."""
    baseline_p90_ms: float | None
    """90th percentile of the PR's kernel."""
    candidate_ms: float
    """Median time of the winner."""
    candidate_p10_ms: float | None
    """10th percentile of the winner."""
    candidate_p90_ms: float | None
    """90th percentile of the winner."""
    speedup: float
    """baseline_ms / candidate_ms."""
    speedup_low: float | None
    """Low end of the speedup's range."""
    speedup_high: float | None
    """High end of the speedup's range."""
    n: int | None
    """Timed calls."""
    baseline_energy_j: float | None
    """Energy per call of the PR's kernel in joules, when measured."""
    candidate_energy_j: float | None
    """Energy per call of the winner in joules, when measured."""
    energy_ratio: float | None = None
    """Winner / PR kernel dynamic energy (median of paired NVML windows), when measured."""
    energy_ratio_low: float | None = None
    """Low end of the ratio's 95 % bootstrap interval."""
    energy_ratio_high: float | None = None
    """High end of the ratio's 95 % bootstrap interval."""


@dataclass(frozen=True)
class Correctness:
    """Correctness evidence of the winner on one workload."""

    uuid: str
    """Workload id."""
    max_abs: float
    """Largest absolute error over all trials."""
    max_rel: float
    """Largest relative error over all trials."""
    rel_l2: float | None
    """Relative L2 error."""
    trials: int
    """Fresh seeded input sets checked."""
    seeds: tuple[int, ...]
    """The seeds of those input sets."""


@dataclass(frozen=True)
class Winner:
    """The candidate that passed the final gate."""

    solution: str
    """Solution name."""
    hash: str
    """Content hash of its sources."""
    note: str
    """The last strategy step."""
    lineage: tuple[str, ...]
    """Strategy steps from the PR's kernel to the winner, oldest first."""
    params: tuple[tuple[str, str], ...]
    """Tuned parameters, name and value as text."""
    speedup: float
    """Geometric-mean speedup over the workloads, re-measured by the gate."""
    gamma: float
    """The gate's threshold: at least this much faster on every workload."""
    workloads: tuple[WorkloadTiming, ...]
    """Per-workload timings of the gate."""
    correctness: tuple[Correctness, ...]
    """Per-workload correctness evidence of the gate."""
    memcheck: str = ""
    """compute-sanitizer memcheck of the winner: 'clean', 'not run' (no tool on the runner), '' off the GPU."""


@dataclass(frozen=True)
class Gate:
    """One final-gate attempt."""

    solution: str
    """Solution name."""
    passed: bool
    """Whether it passed."""
    speedup: float
    """Speedup measured by the gate (0 when it failed to run)."""
    reason: str
    """Why it passed or failed."""


@dataclass(frozen=True)
class CurvePoint:
    """Best verified speedup after one evaluation of the search."""

    evaluation: int
    """1-based evaluation number."""
    best_speedup: float
    """Best verified speedup so far."""
    status: str
    """This evaluation's status (PASSED, COMPILE_ERROR, ...)."""


@dataclass(frozen=True)
class Ceilings:
    """The hardware ceilings the roofline used."""

    gpu: str
    """GPU name."""
    bandwidth_gbs: float
    """Memory bandwidth, GB/s."""
    flops_tflops: float
    """Compute peak, TFLOP/s."""
    source: str
    """Where the numbers come from."""


@dataclass(frozen=True)
class RooflineRow:
    """Stage 1 roofline position of the PR's kernel on one workload."""

    uuid: str
    """Workload id."""
    axes: str
    """The workload's variable axes."""
    intensity: float | None
    """FLOP per byte."""
    floor_ms: float | None
    """The roofline's lower bound on time."""
    baseline_ms: float | None
    """Measured time of the PR's kernel."""
    pct_of_roofline: float | None
    """floor / measured, in percent."""
    max_speedup: float | None
    """The most speedup the roofline allows."""


@dataclass(frozen=True)
class Stage1:
    """Stage 1 (roofline + ncu) classification of the PR's kernel."""

    bottleneck: str
    """compute, memory, latency, mixed or unknown."""
    theory: str
    """What the roofline says."""
    measured: str
    """What ncu says."""
    agree: bool
    """Whether the two agree."""
    note: str
    """One sentence on the classification."""
    compute_pct: float | None
    """Compute throughput, % of peak (ncu)."""
    memory_pct: float | None
    """Memory throughput, % of peak (ncu)."""
    ceilings: Ceilings | None
    """The ceilings used."""
    workloads: tuple[RooflineRow, ...]
    """Per-workload roofline rows."""


@dataclass(frozen=True)
class Finding:
    """One profiling tool's finding (title and severity; the evidence stays in the artifact)."""

    tool: str
    """The tool that found it."""
    severity: str
    """critical, high, medium, low or info."""
    title: str
    """One line."""
    expected_gain: str
    """The tool's estimate of the gain of fixing it."""
    source: str
    """ncu, sass or timeline."""


@dataclass(frozen=True)
class BaseBranch:
    """The base branch's version of the kernel, timed against the PR's."""

    status: str
    """Its evaluation status."""
    speedup_vs_head: float | None
    """Base branch's speedup over the PR's kernel (> 1: the PR made it slower); None if unknown."""
    low: float | None = None
    """Lower end of that speedup's range (head p10 / base p90), measured side by side."""
    high: float | None = None
    """Upper end (head p90 / base p10)."""
    verdict: str = ""
    """The runner's reading against its margin: slower, faster, on par, not compared ('' if absent)."""
    head_drift: float | None = None
    """How far apart the PR kernel's two interleaved medians were (a fraction)."""


@dataclass(frozen=True)
class Tolerance:
    """Numerical tolerance of one output dtype."""

    dtype: str
    """Output dtype."""
    atol: float
    """Absolute tolerance."""
    rtol: float
    """Relative tolerance."""


@dataclass(frozen=True)
class ProgrammerUse:
    """Who wrote a target's candidates, and for a model its use, as the runner counted it."""

    name: str
    """The programmer (tuner, llm, ...)."""
    model: str
    """The model's name; '' for programmers that are not a model."""
    host: str
    """The provider's host (and port), never the full URL or a credential; ''."""
    requests: int
    """Chat-completions requests sent."""
    tokens_in: int
    """Prompt tokens, as the provider counted them."""
    tokens_out: int
    """Completion tokens, as the provider counted them."""
    retries: int
    """Retries (the SDK's and kernelpro's own)."""
    errors: int
    """Requests that ended in an error."""


@dataclass(frozen=True)
class TargetResults:
    """Everything publish needs about one optimized target, validated."""

    name: str
    """Target name from the configuration (a key of ``allowed_files``)."""
    definition: str
    """FlashInfer-Trace definition name."""
    kernelpro_version: str
    """kernelpro version that produced the results."""
    device: str
    """``cuda`` or ``cpu``."""
    hardware: str
    """GPU (or CPU interpreter) name."""
    libs: tuple[tuple[str, str], ...]
    """Library versions (torch, triton, cuda, driver when recorded), sorted by name."""
    gpu_timings: bool
    """False when the timings come from the CPU interpreter."""
    search: str
    """Search strategy."""
    evaluations: int
    """Candidates evaluated."""
    resumed_from_journal: int
    """Evaluations reused from an earlier run."""
    statuses: tuple[tuple[str, int], ...]
    """Evaluation outcomes and their counts."""
    stop_reason: str
    """Why the search ended."""
    seconds: float
    """Wall time of the run."""
    baseline_status: str
    """Status of the PR's own kernel."""
    base_branch: BaseBranch | None
    """The base branch's kernel, when it exists and differs."""
    winner: Winner | None
    """The verified winner (it passed the final gate), or None when the baseline stands."""
    gates: tuple[Gate, ...]
    """Every final-gate attempt, in rank order."""
    curve: tuple[CurvePoint, ...]
    """Best verified speedup by evaluation."""
    feedback: str
    """Feedback mode (none, raw, tools)."""
    tool_mode: str | None
    """proactive or reactive, when recorded."""
    stage1: Stage1 | None
    """Stage 1 classification (GPU runs only)."""
    findings: tuple[Finding, ...]
    """Findings on the PR's kernel, severity-ordered (they steered the search)."""
    winner_findings: tuple[Finding, ...] | None
    """Findings on the winner; None when it was not profiled."""
    profile_seconds: float
    """Time spent profiling."""
    seconds_by_stage: tuple[tuple[str, float], ...]
    """Where the search time went."""
    tolerances: tuple[Tolerance, ...]
    """Output tolerances as the report states them (empty when report.md is absent)."""
    patch: str
    """The winner's unified diff against the PR head, checked; empty when the baseline stands."""
    patch_files: tuple[str, ...]
    """Repository-relative files the patch modifies."""
    confinement: str = ""
    """What confined the candidates (runner/confinement.py), as the runner recorded it; '' if not recorded."""
    programmer: ProgrammerUse | None = None
    """Who wrote the candidates; None where result.json does not say."""


@dataclass(frozen=True)
class Results:
    """A validated results directory."""

    targets: tuple[TargetResults, ...]
    """Per target, in the order the optimize job wrote them."""
    config_note: str
    """Where the configuration came from, as the optimize job recorded it."""

    @property
    def winners(self) -> tuple[TargetResults, ...]:
        """The targets with a verified winner."""
        return tuple(t for t in self.targets if t.winner is not None)

    @property
    def patch(self) -> str:
        """All targets' checked patches, concatenated."""
        return "".join(t.patch for t in self.targets)


# --------------------------------------------------------------------------- validation


class _Reader:
    """Typed access to untrusted JSON; every failure names the file and the JSON path."""

    def __init__(self, file: str) -> None:
        self.file = file

    def fail(self, where: str, what: str) -> ArtifactError:
        return ArtifactError(self.file, f"{where}: {what}")

    def obj(self, v: Any, where: str) -> Mapping[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, got {type(v).__name__}")
        return v

    def lst(self, v: Any, where: str, limit: int = MAX_LIST) -> list[Any]:
        if not isinstance(v, list):
            raise self.fail(where, f"expected a list, got {type(v).__name__}")
        if len(v) > limit:
            raise self.fail(where, f"{len(v)} items, more than the limit of {limit}")
        return v

    def get(self, o: Mapping[str, Any], key: str, where: str) -> Any:
        if key not in o:
            raise self.fail(f"{where}.{key}", "missing")
        return o[key]

    def text(self, v: Any, where: str, limit: int = MAX_TEXT) -> str:
        if not isinstance(v, str):
            raise self.fail(where, f"expected a string, got {type(v).__name__}")
        if len(v) > limit:
            raise self.fail(where, f"{len(v)} characters, more than the limit of {limit}")
        return v

    def name(self, v: Any, where: str) -> str:
        return self.text(v, where, MAX_NAME)

    def opt_text(self, v: Any, where: str, limit: int = MAX_TEXT) -> str:
        return "" if v is None else self.text(v, where, limit)

    def num(self, v: Any, where: str, lo: float = 0.0, hi: float = 1e9) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.fail(where, f"expected a number, got {type(v).__name__}")
        x = float(v)
        if not math.isfinite(x):
            raise self.fail(where, f"{x} is not a finite number")
        if not lo <= x <= hi:
            raise self.fail(where, f"{x} is outside the range {lo:g}..{hi:g}")
        return x

    def opt_num(self, v: Any, where: str, lo: float = 0.0, hi: float = 1e9) -> float | None:
        return None if v is None else self.num(v, where, lo, hi)

    def int_(self, v: Any, where: str, lo: int = 0, hi: int = 10**9) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(where, f"expected an integer, got {type(v).__name__}")
        if not lo <= v <= hi:
            raise self.fail(where, f"{v} is outside the range {lo}..{hi}")
        return v

    def bool_(self, v: Any, where: str) -> bool:
        if not isinstance(v, bool):
            raise self.fail(where, f"expected true or false, got {type(v).__name__}")
        return v

    def axes(self, v: Any, where: str) -> str:
        o = self.obj(v, where)
        if len(o) > 32:
            raise self.fail(where, "more than 32 axes")
        parts = []
        for k, x in o.items():
            self.name(k, f"{where} key")
            if isinstance(x, bool) or not isinstance(x, (int, float, str)):
                raise self.fail(f"{where}.{k}", "expected a number or a string")
            if isinstance(x, float) and not math.isfinite(x):
                raise self.fail(f"{where}.{k}", f"{x} is not a finite number")
            parts.append(f"{k}={self.name(str(x), f'{where}.{k}')}")
        return ", ".join(parts)


_SPEEDUP_MAX = 1e6
_VERDICTS = frozenset({"", "slower", "faster", "on par", "not compared"})
"""The runner's readings of the PR against its base branch (runner/basebranch.py); '' in older artifacts."""
_MS_MAX = 1e7


def _workload(r: _Reader, v: Any, where: str) -> WorkloadTiming:
    o = r.obj(v, where)

    def opt(key: str, hi: float = _MS_MAX) -> float | None:
        return r.opt_num(o.get(key), f"{where}.{key}", 0.0, hi)

    return WorkloadTiming(
        uuid=r.name(r.get(o, "uuid", where), f"{where}.uuid"),
        axes=r.axes(o.get("axes", {}), f"{where}.axes"),
        baseline_ms=r.num(r.get(o, "baseline_ms", where), f"{where}.baseline_ms", 0.0, _MS_MAX),
        baseline_p10_ms=opt("baseline_p10_ms"),
        baseline_p90_ms=opt("baseline_p90_ms"),
        candidate_ms=r.num(r.get(o, "candidate_ms", where), f"{where}.candidate_ms", 0.0, _MS_MAX),
        candidate_p10_ms=opt("candidate_p10_ms"),
        candidate_p90_ms=opt("candidate_p90_ms"),
        speedup=r.num(r.get(o, "speedup", where), f"{where}.speedup", 0.0, _SPEEDUP_MAX),
        speedup_low=opt("speedup_low", _SPEEDUP_MAX),
        speedup_high=opt("speedup_high", _SPEEDUP_MAX),
        n=None if o.get("n") is None else r.int_(o["n"], f"{where}.n"),
        baseline_energy_j=opt("baseline_energy_j", 1e6),
        candidate_energy_j=opt("candidate_energy_j", 1e6),
        energy_ratio=opt("energy_ratio", _SPEEDUP_MAX),
        energy_ratio_low=opt("energy_ratio_low", _SPEEDUP_MAX),
        energy_ratio_high=opt("energy_ratio_high", _SPEEDUP_MAX),
    )


def _correctness(r: _Reader, v: Any, where: str) -> Correctness:
    o = r.obj(v, where)
    seeds = r.lst(o.get("seeds", []), f"{where}.seeds", 1000)
    return Correctness(
        uuid=r.name(r.get(o, "uuid", where), f"{where}.uuid"),
        max_abs=r.num(r.get(o, "max_abs", where), f"{where}.max_abs", 0.0, 1e30),
        max_rel=r.num(r.get(o, "max_rel", where), f"{where}.max_rel", 0.0, 1e30),
        rel_l2=r.opt_num(o.get("rel_l2"), f"{where}.rel_l2", 0.0, 1e30),
        trials=r.int_(r.get(o, "trials", where), f"{where}.trials", 0, 1_000_000),
        seeds=tuple(r.int_(s, f"{where}.seeds[{i}]", 0, 2**64) for i, s in enumerate(seeds)),
    )


def _param(r: _Reader, v: Any, where: str) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, float)):
        return f"{r.num(v, where, -1e18, 1e18):g}" if isinstance(v, float) else str(int(v))
    return r.name(v, where)


def _winner(r: _Reader, v: Any, where: str) -> Winner:
    o = r.obj(v, where)
    params = r.obj(o.get("params", {}), f"{where}.params")
    if len(params) > 256:
        raise r.fail(f"{where}.params", "more than 256 parameters")
    return Winner(
        solution=r.name(r.get(o, "solution", where), f"{where}.solution"),
        hash=r.name(o.get("hash", ""), f"{where}.hash"),
        note=r.opt_text(o.get("note"), f"{where}.note"),
        lineage=tuple(
            r.text(x, f"{where}.lineage[{i}]")
            for i, x in enumerate(r.lst(o.get("lineage", []), f"{where}.lineage", 1000))
        ),  # fmt: skip
        params=tuple(
            (r.name(k, f"{where}.params key"), _param(r, x, f"{where}.params.{k}"))
            for k, x in params.items()
        ),  # fmt: skip
        speedup=r.num(r.get(o, "speedup", where), f"{where}.speedup", 1.0, _SPEEDUP_MAX),
        gamma=r.num(r.get(o, "gamma", where), f"{where}.gamma", 1.0, 100.0),
        workloads=tuple(
            _workload(r, x, f"{where}.workloads[{i}]")
            for i, x in enumerate(r.lst(o.get("workloads", []), f"{where}.workloads", 1000))
        ),  # fmt: skip
        correctness=tuple(
            _correctness(r, x, f"{where}.correctness[{i}]")
            for i, x in enumerate(r.lst(o.get("correctness", []), f"{where}.correctness", 1000))
        ),  # fmt: skip
        memcheck=_memcheck(r, o.get("memcheck"), f"{where}.memcheck"),
    )


def _memcheck(r: _Reader, v: Any, where: str) -> str:
    """A winner's memcheck: clean, or not run; anything else could not have passed the gate."""
    if v is None:
        return ""
    status = r.name(r.get(r.obj(v, where), "status", where), f"{where}.status")
    if status not in ("clean", "not run"):
        raise r.fail(f"{where}.status", f"{status!r}: a winner's memcheck is 'clean' or 'not run'")
    return status


def _finding(r: _Reader, v: Any, where: str) -> Finding:
    o = r.obj(v, where)
    sev = r.name(r.get(o, "severity", where), f"{where}.severity")
    if sev not in SEVERITIES:
        raise r.fail(f"{where}.severity", f"{sev[:40]!r} is not one of {', '.join(SEVERITIES)}")
    return Finding(
        tool=r.name(r.get(o, "tool", where), f"{where}.tool"),
        severity=sev,
        title=r.text(r.get(o, "title", where), f"{where}.title", 1000),
        expected_gain=r.opt_text(o.get("expected_gain"), f"{where}.expected_gain", 1000),
        source=r.name(o.get("source", ""), f"{where}.source"),
    )


def _findings(r: _Reader, v: Any, where: str) -> tuple[Finding, ...] | None:
    if v is None:
        return None
    o = r.obj(v, where)
    items = r.lst(o.get("findings", []), f"{where}.findings", 1000)
    found = [_finding(r, x, f"{where}.findings[{i}]") for i, x in enumerate(items)]
    return tuple(sorted(found, key=lambda f: SEVERITIES.index(f.severity)))


def _stage1(r: _Reader, v: Any, where: str) -> Stage1 | None:
    if v is None:
        return None
    o = r.obj(v, where)
    c = o.get("ceilings")
    ceilings = None
    if c is not None:
        co = r.obj(c, f"{where}.ceilings")
        ceilings = Ceilings(
            gpu=r.name(co.get("gpu", ""), f"{where}.ceilings.gpu"),
            bandwidth_gbs=r.num(r.get(co, "bandwidth_gbs", f"{where}.ceilings"), f"{where}.ceilings.bandwidth_gbs", 0.0, 1e7),
            flops_tflops=r.num(r.get(co, "flops_tflops", f"{where}.ceilings"), f"{where}.ceilings.flops_tflops", 0.0, 1e7),
            source=r.text(co.get("source", ""), f"{where}.ceilings.source", 1000),
        )  # fmt: skip
    rows = []
    for i, x in enumerate(r.lst(o.get("workloads", []), f"{where}.workloads", 1000)):
        w, wo = f"{where}.workloads[{i}]", r.obj(x, f"{where}.workloads[{i}]")
        rows.append(RooflineRow(
            uuid=r.name(r.get(wo, "uuid", w), f"{w}.uuid"),
            axes=r.axes(wo.get("axes", {}), f"{w}.axes"),
            intensity=r.opt_num(wo.get("intensity"), f"{w}.intensity", 0.0, 1e12),
            floor_ms=r.opt_num(wo.get("floor_ms"), f"{w}.floor_ms", 0.0, _MS_MAX),
            baseline_ms=r.opt_num(wo.get("baseline_ms"), f"{w}.baseline_ms", 0.0, _MS_MAX),
            pct_of_roofline=r.opt_num(wo.get("pct_of_roofline"), f"{w}.pct_of_roofline", 0.0, 1e4),
            max_speedup=r.opt_num(wo.get("max_speedup"), f"{w}.max_speedup", 0.0, 1e9),
        ))  # fmt: skip
    return Stage1(
        bottleneck=r.name(o.get("bottleneck", "unknown"), f"{where}.bottleneck"),
        theory=r.name(o.get("theory", ""), f"{where}.theory"),
        measured=r.name(o.get("measured", ""), f"{where}.measured"),
        agree=r.bool_(o.get("agree", True), f"{where}.agree"),
        note=r.opt_text(o.get("note"), f"{where}.note"),
        compute_pct=r.opt_num(o.get("compute_pct"), f"{where}.compute_pct", 0.0, 1e4),
        memory_pct=r.opt_num(o.get("memory_pct"), f"{where}.memory_pct", 0.0, 1e4),
        ceilings=ceilings,
        workloads=tuple(rows),
    )


def _pairs_num(r: _Reader, v: Any, where: str, as_int: bool) -> tuple[tuple[str, Any], ...]:
    o = r.obj(v if v is not None else {}, where)
    if len(o) > 256:
        raise r.fail(where, "more than 256 entries")
    return tuple((r.name(k, f"{where} key"),
                  r.int_(x, f"{where}.{k}") if as_int else r.num(x, f"{where}.{k}", 0.0, 1e9))
                 for k, x in o.items())  # fmt: skip


def _programmer(r: _Reader, v: Any, where: str) -> ProgrammerUse | None:
    if v is None or v == {}:
        return None
    o = r.obj(v, where)

    def count(key: str) -> int:
        return r.int_(o.get(key, 0), f"{where}.{key}", 0, 10**12)

    return ProgrammerUse(
        name=r.name(r.get(o, "name", where), f"{where}.name"),
        model=r.opt_text(o.get("model"), f"{where}.model", 200),
        host=r.opt_text(o.get("host"), f"{where}.host", 200),
        requests=count("requests"), tokens_in=count("tokens_in"), tokens_out=count("tokens_out"),
        retries=count("retries"), errors=count("errors"),
    )


def _target(r: _Reader, v: Any, where: str, allowed: Mapping[str, Sequence[str]]) -> TargetResults:
    o = r.obj(v, where)
    name = r.name(r.get(o, "target", where), f"{where}.target")
    if not _TARGET_NAME.fullmatch(name):
        raise r.fail(f"{where}.target", f"{name[:60]!r} is not a valid target name")
    if name not in allowed:
        known = ", ".join(sorted(allowed)) or "none"
        raise r.fail(
            f"{where}.target",
            f"{name!r} is not a target of the base branch's configuration (known: {known})",
        )
    w = f"{where}[{name}]"
    libs = r.obj(o.get("libs", {}), f"{w}.libs")
    if len(libs) > 64:
        raise r.fail(f"{w}.libs", "more than 64 libraries")
    baseline = r.obj(o.get("baseline", {}), f"{w}.baseline")
    bb = o.get("base_branch")
    base_branch = None
    if bb is not None:
        bo = r.obj(bb, f"{w}.base_branch")
        sv = r.opt_num(
            bo.get("speedup_vs_head"), f"{w}.base_branch.speedup_vs_head", 0.0, _SPEEDUP_MAX
        )
        verdict = bo.get("verdict", "")
        if verdict not in _VERDICTS:
            raise r.fail(f"{w}.base_branch.verdict", f"not one of {', '.join(sorted(_VERDICTS))}")
        base_branch = BaseBranch(
            r.name(bo.get("status", ""), f"{w}.base_branch.status"), sv or None,
            r.opt_num(bo.get("low"), f"{w}.base_branch.low", 0.0, _SPEEDUP_MAX),
            r.opt_num(bo.get("high"), f"{w}.base_branch.high", 0.0, _SPEEDUP_MAX), verdict,
            r.opt_num(bo.get("head_drift"), f"{w}.base_branch.head_drift", 0.0, _SPEEDUP_MAX),
        )
    gates = []
    for i, x in enumerate(r.lst(o.get("gates", []), f"{w}.gates")):
        g, go = f"{w}.gates[{i}]", r.obj(x, f"{w}.gates[{i}]")
        gates.append(Gate(
            solution=r.name(r.get(go, "solution", g), f"{g}.solution"),
            passed=r.bool_(r.get(go, "passed", g), f"{g}.passed"),
            speedup=r.num(r.get(go, "speedup", g), f"{g}.speedup", 0.0, _SPEEDUP_MAX),
            reason=r.opt_text(go.get("reason"), f"{g}.reason"),
        ))  # fmt: skip
    curve = []
    for i, x in enumerate(r.lst(o.get("curve", []), f"{w}.curve")):
        c, co = f"{w}.curve[{i}]", r.obj(x, f"{w}.curve[{i}]")
        curve.append(CurvePoint(
            evaluation=r.int_(r.get(co, "evaluation", c), f"{c}.evaluation", 1, 10**7),
            best_speedup=r.num(r.get(co, "best_speedup", c), f"{c}.best_speedup", 0.0, _SPEEDUP_MAX),
            status=r.name(co.get("status", ""), f"{c}.status"),
        ))  # fmt: skip
    winner = None if o.get("winner") is None else _winner(r, o["winner"], f"{w}.winner")
    if winner is not None and not any(g.passed and g.solution == winner.solution for g in gates):
        raise r.fail(
            f"{w}.winner",
            f"{winner.solution!r} has no passed final-gate row, so it is not a verified winner",
        )
    device = r.name(r.get(o, "device", w), f"{w}.device")
    if device not in ("cuda", "cpu"):
        raise r.fail(f"{w}.device", f"{device[:40]!r} is neither 'cuda' nor 'cpu'")
    tool_mode = o.get("tool_mode")
    out = TargetResults(
        name=name,
        definition=r.name(o.get("definition", ""), f"{w}.definition"),
        kernelpro_version=r.name(o.get("kernelpro_version", "unknown"), f"{w}.kernelpro_version"),
        device=device,
        hardware=r.name(o.get("hardware", "unknown"), f"{w}.hardware"),
        libs=tuple(
            sorted(
                (r.name(k, f"{w}.libs key"), r.name(str(x), f"{w}.libs.{k}"))
                for k, x in libs.items()
            )
        ),
        gpu_timings=r.bool_(o.get("gpu_timings", device == "cuda"), f"{w}.gpu_timings")
        and device == "cuda",
        search=r.name(o.get("search", ""), f"{w}.search"),
        evaluations=r.int_(o.get("evaluations", 0), f"{w}.evaluations", 0, 10**7),
        resumed_from_journal=r.int_(
            o.get("resumed_from_journal", 0), f"{w}.resumed_from_journal", 0, 10**7
        ),
        statuses=_pairs_num(r, o.get("statuses"), f"{w}.statuses", True),
        stop_reason=r.text(r.get(o, "stop_reason", w), f"{w}.stop_reason"),
        seconds=r.num(o.get("seconds", 0.0), f"{w}.seconds", 0.0, 1e8),
        baseline_status=r.name(baseline.get("status", "unknown"), f"{w}.baseline.status"),
        base_branch=base_branch,
        winner=winner,
        gates=tuple(gates),
        curve=tuple(curve),
        feedback=r.name(o.get("feedback", ""), f"{w}.feedback"),
        tool_mode=None if tool_mode is None else r.name(tool_mode, f"{w}.tool_mode"),
        stage1=_stage1(r, o.get("stage1"), f"{w}.stage1"),
        findings=_findings(r, o.get("baseline_analysis"), f"{w}.baseline_analysis") or (),
        winner_findings=_findings(r, o.get("winner_analysis"), f"{w}.winner_analysis"),
        profile_seconds=r.num(o.get("profile_seconds", 0.0), f"{w}.profile_seconds", 0.0, 1e8),
        seconds_by_stage=_pairs_num(r, o.get("seconds_by_stage"), f"{w}.seconds_by_stage", False),
        tolerances=(),
        patch="",
        patch_files=(),
        confinement=r.opt_text(o.get("confinement"), f"{w}.confinement", 300),
        programmer=_programmer(r, o.get("programmer"), f"{w}.programmer"),
    )
    _consistent(r, w, out)
    return out


_REL = 1e-3
"""How far two numbers that must agree may differ, relatively: the runner writes full floats,
so this is rounding, not measurement noise."""


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL * max(abs(a), abs(b)) + 1e-12


def _ordered(*xs: float | None) -> bool:
    """Whether the given values (None skipped) are ascending, within rounding."""
    vals = [x for x in xs if x is not None]
    return all(a <= b * (1 + 1e-6) + 1e-12 for a, b in zip(vals, vals[1:], strict=False))


def _consistent(r: _Reader, w: str, t: TargetResults) -> None:
    """The numbers publish shows must agree with each other the way the runner computes them
    (runner/optimize.py's gate): an artifact that says 3.5x over a 1.1x measurement is refused."""
    win = t.winner
    if win is not None:
        where = f"{w}.winner"
        if not win.workloads:
            raise r.fail(f"{where}.workloads", "a verified winner without the gate's per-workload timings")
        uuids = {x.uuid for x in win.workloads}
        if len(uuids) != len(win.workloads):
            raise r.fail(f"{where}.workloads", "a workload appears twice")
        for i, x in enumerate(win.workloads):
            at = f"{where}.workloads[{i}]"
            if x.baseline_ms <= 0 or x.candidate_ms <= 0:
                raise r.fail(at, "a time of 0 ms cannot have been measured")
            if not _close(x.speedup, x.baseline_ms / x.candidate_ms):
                raise r.fail(f"{at}.speedup", f"{x.speedup:.6g} is not baseline_ms / candidate_ms "
                             f"({x.baseline_ms:.6g} / {x.candidate_ms:.6g} = {x.baseline_ms / x.candidate_ms:.6g})")
            for side, lo, mid, hi in (("baseline", x.baseline_p10_ms, x.baseline_ms, x.baseline_p90_ms),
                                      ("candidate", x.candidate_p10_ms, x.candidate_ms, x.candidate_p90_ms),
                                      ("speedup", x.speedup_low, x.speedup, x.speedup_high),
                                      ("energy_ratio", x.energy_ratio_low, x.energy_ratio, x.energy_ratio_high)):
                if mid is not None and not _ordered(lo, mid, hi):
                    raise r.fail(at, f"the {side} range {lo}..{hi} does not contain its median {mid}")
            if x.speedup < win.gamma * (1 - _REL):
                raise r.fail(f"{at}.speedup", f"{x.speedup:.4g} is below the gate's gamma {win.gamma:g}, "
                             "so this winner did not pass the gate on this workload")
        geo = math.exp(sum(math.log(x.speedup) for x in win.workloads) / len(win.workloads))
        if not _close(win.speedup, geo):
            raise r.fail(f"{where}.speedup", f"{win.speedup:.6g} is not the geometric mean of the "
                         f"per-workload speedups ({geo:.6g})")
        for g in t.gates:
            if g.passed and g.solution == win.solution and not _close(g.speedup, win.speedup):
                raise r.fail(f"{w}.gates", f"the gate measured {g.speedup:.6g} for {g.solution!r}, "
                             f"the winner says {win.speedup:.6g}")
        for c in win.correctness:
            if c.uuid not in uuids:
                raise r.fail(f"{where}.correctness", f"workload {c.uuid!r} is not one of the gate's workloads")
        floors = {x.uuid: x.floor_ms for x in (t.stage1.workloads if t.stage1 else ()) if x.floor_ms}
        for x in win.workloads:
            floor = floors.get(x.uuid)
            if floor is not None and x.candidate_ms < 0.9 * floor:
                raise r.fail(f"{where}.workloads", f"{x.candidate_ms:.6g} ms on {x.uuid!r} is faster than the "
                             f"roofline floor {floor:.6g} ms allows, which the gate refuses")
    bb = t.base_branch
    if bb is not None and bb.speedup_vs_head is not None and not _ordered(bb.low, bb.speedup_vs_head, bb.high):
        raise r.fail(f"{w}.base_branch", f"the range {bb.low}..{bb.high} does not contain {bb.speedup_vs_head}")
    for a, b in zip(t.curve, t.curve[1:], strict=False):
        if b.evaluation <= a.evaluation or b.best_speedup < a.best_speedup * (1 - _REL):
            raise r.fail(f"{w}.curve", "the best speedup so far must never fall, by evaluation in order")


# --------------------------------------------------------------------------- files


def _read(path: Path, limit: int, display: str) -> bytes:
    """A regular file's bytes, refusing symlinks, special files and anything over ``limit``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ArtifactError(display, "missing") from None
    if stat.S_ISLNK(st.st_mode):
        raise ArtifactError(display, "is a symbolic link; artifacts must be plain files")
    if not stat.S_ISREG(st.st_mode):
        raise ArtifactError(display, "is not a regular file")
    if st.st_size > limit:
        raise ArtifactError(display, f"{st.st_size} bytes, more than the limit of {limit}")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ArtifactError(display, f"more than the limit of {limit} bytes")
    return data


def _text(data: bytes, display: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ArtifactError(display, f"not UTF-8 text ({e.reason} at byte {e.start})") from None


def _json(path: Path, display: str) -> Any:
    text = _text(_read(path, MAX_SUMMARY_BYTES, display), display)

    def no_constants(c: str) -> Any:
        raise ArtifactError(display, f"contains {c}, which is not a finite number")

    try:
        return json.loads(text, parse_constant=no_constants)
    except RecursionError:
        raise ArtifactError(display, "nested too deeply") from None
    except json.JSONDecodeError as e:
        raise ArtifactError(
            display, f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
        ) from None


def _safe_path(p: str) -> bool:
    """A plain repository-relative POSIX path: no absolute, no ``..``, no ``.git``/``.github``."""
    if not p or len(p) > 1000 or p.startswith("/") or "\\" in p or ":" in p.split("/", 1)[0]:
        return False
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in p) or p != p.strip():
        return False
    parts = PurePosixPath(p).parts
    if p.endswith("/") or "/".join(parts) != p:
        return False  # "a//b", "./a", trailing slash: not the canonical spelling
    return not any(x in ("", ".", "..") or x.lower() in (".git", ".github") for x in parts)


def check_patch(text: str, allowed: Sequence[str], display: str = "patch.diff") -> tuple[str, ...]:
    """Check that ``text`` is a unified diff that only modifies files in ``allowed``.

    Accepted: ``--- a/PATH`` / ``+++ b/PATH`` pairs (optionally after ``diff --git a/PATH b/PATH``
    and an ``index`` line), each followed by hunks whose line counts match their headers.
    Refused: any path not in ``allowed`` or not plain (absolute, ``..``, ``.github/**``), different
    a/ and b/ paths (renames), ``/dev/null`` or an empty side (creation or deletion), mode lines
    (symlinks, executables), binary patches, copies, and anything unparsable. Returns the files
    modified, in order.
    """
    if len(text.encode("utf-8")) > MAX_PATCH_BYTES:
        raise ArtifactError(display, f"more than the limit of {MAX_PATCH_BYTES} bytes")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_PATCH_LINES:
        raise ArtifactError(
            display, f"{len(lines)} lines, more than the limit of {MAX_PATCH_LINES}"
        )
    if "\r" in text or "\x00" in text:
        raise ArtifactError(
            display, "contains carriage returns or NUL bytes; only plain text diffs are accepted"
        )
    allowed_set = set(allowed)
    for a in allowed_set:
        if not _safe_path(a):
            raise ArtifactError(
                "the base branch's configuration",
                f"kernel file {a!r} is not a plain repository path",
            )
    files: list[str] = []
    i = 0

    def bad(what: str) -> ArtifactError:
        return ArtifactError(display, f"line {i + 1}: {what}")

    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            m = re.fullmatch(r"diff --git a/(\S+) b/(\S+)", line)
            if m is None or m.group(1) != m.group(2) or m.group(1) not in allowed_set:
                raise bad(
                    f"a 'diff --git' header for a file that is not one of this target's kernel files: {line[:200]!r}"
                )
            i += 1
            continue
        if line.startswith("index "):
            if not re.fullmatch(r"index [0-9a-f]{7,64}\.\.[0-9a-f]{7,64}( 100644)?", line):
                raise bad("an 'index' line with a file mode; mode changes are not accepted")
            i += 1
            continue
        for word, why in (("new file mode", "creates a file"), ("deleted file mode", "deletes a file"),
                          ("old mode", "changes a file mode"), ("new mode", "changes a file mode"),
                          ("rename ", "renames a file"), ("copy ", "copies a file"),
                          ("similarity index", "renames or copies a file"),
                          ("dissimilarity index", "rewrites a file"),
                          ("GIT binary patch", "is a binary patch"), ("Binary files", "is a binary patch")):  # fmt: skip
            if line.startswith(word):
                raise bad(f"{why}; only modifications of the target's kernel files are accepted")
        if not line.startswith("--- "):
            raise bad(f"expected a '--- a/PATH' file header, got {line[:80]!r}")
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise bad("a '--- ' header without its '+++ ' line")
        old, new = line[4:].split("\t", 1)[0], lines[i + 1][4:].split("\t", 1)[0]
        if old == "/dev/null" or new == "/dev/null":
            raise bad(
                "creates or deletes a file; only modifications of the target's kernel files are accepted"
            )
        if not (old.startswith("a/") and new.startswith("b/")):
            raise bad(
                f"file paths must be 'a/PATH' and 'b/PATH', got {old[:80]!r} and {new[:80]!r}"
            )
        old, new = old[2:], new[2:]
        for p in (old, new):
            if not _safe_path(p):
                raise bad(
                    f"{p[:200]!r} is not a plain repository path (absolute, '..', '.git' or '.github')"
                )
        if old != new:
            raise bad(f"renames {old!r} to {new!r}; only modifications are accepted")
        if old not in allowed_set:
            raise bad(f"touches {old!r}, which is not one of this target's kernel files "
                      f"({', '.join(sorted(allowed_set)) or 'none'})")  # fmt: skip
        if old in files:
            raise bad(f"{old!r} appears twice")
        files.append(old)
        i += 2
        hunks = 0
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.fullmatch(lines[i])
            if m is None:
                raise bad(f"malformed hunk header {lines[i][:80]!r}")
            o_start, n_start = int(m.group(1)), int(m.group(3))
            o_len = 1 if m.group(2) is None else int(m.group(2))
            n_len = 1 if m.group(4) is None else int(m.group(4))
            if (o_start == 0 and o_len == 0) or (n_start == 0 and n_len == 0):
                raise bad("a hunk that creates or empties a file; only modifications are accepted")
            i += 1
            while o_len > 0 or n_len > 0:
                if i >= len(lines):
                    raise bad("the patch ends inside a hunk")
                body = lines[i]
                tag = body[:1]
                if tag == " ":
                    o_len, n_len = o_len - 1, n_len - 1
                elif tag == "-":
                    o_len -= 1
                elif tag == "+":
                    n_len -= 1
                elif body.startswith("\\ "):
                    pass
                elif body == "":
                    raise bad("an empty line inside a hunk")
                else:
                    raise bad(f"unexpected line inside a hunk: {body[:80]!r}")
                if o_len < 0 or n_len < 0:
                    raise bad("a hunk longer than its header says")
                i += 1
            while i < len(lines) and lines[i].startswith("\\ "):
                i += 1
            hunks += 1
        if hunks == 0:
            raise bad(f"no hunks for {old!r}")
    return tuple(files)


def _tolerances(data: str) -> tuple[Tolerance, ...]:
    for line in data.splitlines():
        if line.startswith("Tolerances: "):
            out = []
            for m in _TOLERANCE.finditer(line[:2000]):
                try:
                    a, r = float(m.group(2).rstrip(".")), float(m.group(3).rstrip("."))
                except ValueError:
                    continue
                if math.isfinite(a) and math.isfinite(r) and a >= 0 and r >= 0:
                    out.append(Tolerance(m.group(1), a, r))
            return tuple(out[:32])
    return ()


def load_results(dir: Path, *, allowed_files: Mapping[str, Sequence[str]]) -> Results:
    """Read and validate a results directory written by ``kernelpro optimize``.

    ``allowed_files`` maps each target name of the trusted (base-branch) configuration to the
    repository-relative kernel files that target may change. Raises :class:`ArtifactError` on any
    violation; the message names the file and what was wrong.
    """
    dir = Path(dir)
    summary = dir / "summary.json"
    if os.path.lexists(summary):
        r = _Reader("summary.json")
        top = r.obj(_json(summary, r.file), "(top level)")
        items = r.lst(r.get(top, "targets", "(top level)"), "targets", MAX_TARGETS)
        config_note = r.opt_text(top.get("config"), "config", 1000)
        parsed = [_target(r, x, f"targets[{i}]", allowed_files) for i, x in enumerate(items)]
    else:
        try:
            subdirs = sorted(p for p in dir.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError as e:
            raise ArtifactError(str(dir), f"cannot be read ({e.strerror})") from None
        if len(subdirs) > MAX_TARGETS:
            raise ArtifactError(str(dir), f"more than {MAX_TARGETS} target directories")
        parsed, config_note = [], ""
        for sub in subdirs:
            r = _Reader(f"{sub.name}/result.json")
            parsed.append(
                _target(r, _json(sub / "result.json", r.file), "(top level)", allowed_files)
            )
        if not parsed:
            raise ArtifactError("summary.json", "missing, and no DIR/<target>/result.json either")
    seen: set[str] = set()
    out: list[TargetResults] = []
    for t in parsed:
        if t.name in seen:
            raise ArtifactError("summary.json", f"target {t.name!r} appears twice")
        seen.add(t.name)
        display = f"{t.name}/patch.diff"
        p = dir / t.name / "patch.diff"
        patch = _text(_read(p, MAX_PATCH_BYTES, display), display) if os.path.lexists(p) else ""
        files = check_patch(patch, allowed_files[t.name], display) if patch else ()
        if t.winner is not None and not patch:
            raise ArtifactError(display, f"empty or missing, but {t.name!r} has a verified winner")
        if t.winner is None and patch:
            raise ArtifactError(display, f"not empty, but {t.name!r} has no verified winner")
        rp = dir / t.name / "report.md"
        tol = _tolerances(_text(_read(rp, MAX_REPORT_BYTES, f"{t.name}/report.md"), f"{t.name}/report.md")) \
            if os.path.lexists(rp) else ()  # fmt: skip
        out.append(replace(t, patch=patch, patch_files=files, tolerances=tol))
    return Results(targets=tuple(out), config_note=config_note)


# --------------------------------------------------------------------------- zip archives

MAX_ZIP_BYTES = 256 * 1024 * 1024
"""A downloaded artifact archive larger than this is refused."""
MAX_ZIP_MEMBERS = 20_000
"""An archive with more entries than this is refused."""
_MEMBER = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]{0,99}/)?(?:summary\.json|result\.json|patch\.diff|report\.md)")
_LIMITS = {"summary.json": MAX_SUMMARY_BYTES, "result.json": MAX_SUMMARY_BYTES,
           "patch.diff": MAX_PATCH_BYTES, "report.md": MAX_REPORT_BYTES}  # fmt: skip


def extract_results(data: bytes, dest: Path, *, display: str = "artifact.zip") -> Path:
    """Unpack the files :func:`load_results` reads from an artifact's zip archive into ``dest``.

    The archive is untrusted: only ``summary.json`` and ``<target>/{result.json,patch.diff,
    report.md}`` are extracted (everything else, e.g. traces and journals, is skipped unread),
    each through a bounded read whatever size its header claims; absolute or ``..`` names,
    symbolic links, duplicate names, encrypted entries and oversized archives are refused.
    Returns ``dest``; pass it to :func:`load_results`.
    """
    import io
    import zipfile

    if len(data) > MAX_ZIP_BYTES:
        raise ArtifactError(display, f"{len(data)} bytes, more than the limit of {MAX_ZIP_BYTES}")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise ArtifactError(display, f"not a readable zip archive ({e})") from None
    if len(infos) > MAX_ZIP_MEMBERS:
        raise ArtifactError(display, f"{len(infos)} entries, more than the limit of {MAX_ZIP_MEMBERS}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    for info in infos:
        name = info.filename
        if info.is_dir() or not _MEMBER.fullmatch(name):
            if not _safe_path(name.rstrip("/")):
                raise ArtifactError(display, f"entry {name[:200]!r} is not a plain relative path")
            continue
        if name in seen:
            raise ArtifactError(display, f"entry {name!r} appears twice")
        seen.add(name)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise ArtifactError(display, f"entry {name!r} is a symbolic link")
        if info.flag_bits & 0x1:
            raise ArtifactError(display, f"entry {name!r} is encrypted")
        limit = _LIMITS[name.rsplit("/", 1)[-1]]
        try:
            with archive.open(info) as f:
                body = f.read(limit + 1)
        except (zipfile.BadZipFile, NotImplementedError, ValueError, EOFError, OSError) as e:
            raise ArtifactError(display, f"entry {name!r} cannot be read ({e})") from None
        if len(body) > limit:
            raise ArtifactError(display, f"entry {name!r} is more than the limit of {limit} bytes")
        out = dest / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(body)
    return dest
