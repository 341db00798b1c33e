"""Evaluate one Solution against a Definition on workloads: the trusted side of the harness.

Two children per definition, never one: a reference child (trusted code only; its outputs are
computed once per definition, workloads and seeds, held here in memory and their files deleted
before any candidate runs) and, per candidate, a child that only runs the candidate and saves what
it produced. Every correctness decision is made here, on tensors loaded with ``weights_only=True``;
nothing the candidate's process says about its own correctness is believed.

Failure is a value: every path through ``evaluate`` returns an Outcome, whatever the candidate did.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import random
import re
import statistics
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import scratch, tensorfile
from .sandbox import ChildResult, SandboxError, finite, read_capped_pages, run_child
from .target import Tolerance
from .timekeeper import OP_NAME, Timekeeper, digest_of
from .trace import (
    STATUSES,
    Correctness,
    Definition,
    Environment,
    Evaluation,
    Performance,
    Solution,
    SourceFile,
    Trace,
    Workload,
)

EVALUATOR_VERSION = 4
"""Bumped when a verdict could change: 2 = judged by the parent on saved outputs (issue 3); 3 =
timings checked against the parent's clock, secret check positions, plain outputs (issue 17); 4 = the
operators the verified calls dispatched are recorded (issue 21)."""


@dataclass(frozen=True)
class Timing:
    """Per-call latency of one solution on one workload, with its spread."""

    median_ms: float
    """Median over the timed calls."""
    p10_ms: float
    """10th percentile."""
    p90_ms: float
    """90th percentile."""
    std_ms: float
    """Standard deviation."""
    n: int
    """Timed calls."""
    mode: str = "events"
    """'events' (CUDA events around each call), 'cuda_graph' (around each replay of the call captured
    as a graph: no host launch overhead), 'events (CUDA graph capture failed: why)', or 'cpu'."""
    wall_ms: float | None = None
    """The parent's own clock per timed call: the phase's wall, from the seeds sent to the end
    received, over its calls, the harness's loop included (None where no channel timed it)."""
    loop_ms: float | None = None
    """The harness's own loop per call on this workload (its calibration phase, on the parent's clock):
    ``wall_ms - loop_ms`` against ``median_ms`` is what a GPU floor like the CPU's would bound."""

    @property
    def spread(self) -> float:
        """p90 / p10, the calls' own noise (nan when p10 is not positive): what the gate, the guard
        shapes and the search's ties take as the margin beyond gamma (runner/energy timing_noise)."""
        return self.p90_ms / self.p10_ms if self.p10_ms > 0 else math.nan

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Timing:
        mode = d.get("mode", "events")
        # Written by the candidate's process: a label for the report, kept only in a known shape.
        mode = mode[:240] if isinstance(mode, str) and mode.startswith(("events", "cuda_graph", "cpu")) else "events"
        return Timing(float(d["median_ms"]), float(d["p10_ms"]), float(d["p90_ms"]), float(d["std_ms"]), int(d["n"]), mode,
                      finite(d.get("wall_ms")), finite(d.get("loop_ms")))


@dataclass(frozen=True)
class WorkloadResult:
    """One solution on one workload."""

    uuid: str
    """The workload."""
    status: str
    """FlashInfer-Trace status."""
    log: str = ""
    """Error text, if any."""
    correctness: Mapping[str, Any] | None = None
    """max_abs, max_rel, rel_l2, trials, seeds (or the failing trial's numbers)."""
    timing: Timing | None = None
    """Solution timing when PASSED."""
    reference_timing: Timing | None = None
    """Timing of the Definition's reference, when measured."""


@dataclass(frozen=True)
class Outcome:
    """A candidate's evaluation over all its workloads (the design's 'Evaluation' record)."""

    solution_hash: str
    """Content hash of the solution (the cache key)."""
    status: str
    """PASSED only if every workload passed; otherwise the first failure's status."""
    results: tuple[WorkloadResult, ...]
    """Per workload, in order; stops at the first failure."""
    environment: Mapping[str, Any] = field(default_factory=dict)
    """hardware and library versions, from the child."""
    log: str = ""
    """The first failure's log, or the harness's own output when it crashed."""
    build_seconds: float = 0.0
    """Import/compile time."""
    wall_seconds: float = 0.0
    """Whole child-process time."""
    phases: Mapping[str, float] = field(default_factory=dict)
    """Seconds by stage inside the child: startup (imports, CUDA init), verify, time."""
    timeline: Mapping[str, Any] | None = None
    """Launch timeline summary (runner.evidence.Timeline fields) when it was asked for, or {'error': ...}."""
    timestamp: str = ""
    """When it finished (ISO 8601, UTC)."""
    warnings: tuple[str, ...] = ()
    """What the child saw that fails nothing but may make the measurement meaningless (the entry point
    ran an installed copy of a module the target's files define: IMPORT_MISMATCH)."""
    torch_ops: tuple[str, ...] = ()
    """The aten operators its verified calls dispatched (runner/harness.py _Ops), as the child reported
    them: a Triton or CUDA candidate using ones the pull request's kernel does not is refused
    (runner/screen.py delegated)."""
    imported: tuple[str, ...] = ()
    """Modules outside the candidate's tree that its build imported and its process had not (runner/
    harness.py ``_new_modules``), as the child reported them: the search grows the target's warm server
    by those of the pull request's kernel (runner/preload.py ``more``). Not journaled: hundreds of names
    that only the live baseline's evaluation uses."""

    @property
    def passed(self) -> bool:
        return self.status == "PASSED"

    def latency(self, uuid: str) -> float:
        for r in self.results:
            if r.uuid == uuid and r.timing is not None:
                return r.timing.median_ms
        return math.inf

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        del d["imported"]
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Outcome:
        results = tuple(
            WorkloadResult(
                uuid=r["uuid"], status=r["status"], log=r.get("log", ""), correctness=r.get("correctness"),
                timing=Timing.from_json(r["timing"]) if r.get("timing") else None,
                reference_timing=Timing.from_json(r["reference_timing"]) if r.get("reference_timing") else None,
            )
            for r in d["results"]
        )
        return Outcome(
            solution_hash=d["solution_hash"], status=d["status"], results=results,
            environment=d.get("environment", {}), log=d.get("log", ""),
            build_seconds=seconds(d.get("build_seconds")), wall_seconds=seconds(d.get("wall_seconds")),
            phases=clean_phases(d.get("phases")), timeline=clean_timeline(d.get("timeline"))[0],
            timestamp=d.get("timestamp", ""),
            warnings=tuple(d.get("warnings") or ()), torch_ops=tuple(d.get("torch_ops") or ()),
        )


PHASES = ("launch", "startup", "calibrate", "verify", "save", "time", "timeline", "teardown", "judge_tail", "judge",
          "judge_during", "reference", "reference_ahead")
"""The stages an Outcome's ``phases`` may name (the child's, runner/sandbox.py's, the judge's, and
``reference``: the parent's wait for the trusted reference's outputs before the candidate's child
started, which is a new reference child whenever the secret check seeds were spent; and
``reference_ahead``: the next reference's, computed beside the judging, EvalSettings.reference_ahead)."""


def seconds(value: Any) -> float:
    """A duration the candidate's process reported (or a journal kept): a finite, non-negative float,
    else 0.0. Diagnostics only, but the report adds them up."""
    v = finite(value)
    return v if v is not None and v >= 0 else 0.0


def clean_phases(raw: Any) -> dict[str, float]:
    """Only the known stages, each a finite non-negative number of seconds: the child's ``phases`` is
    a dict its candidate can reach (a frame's locals) and fill with anything."""
    if not isinstance(raw, Mapping):
        return {}
    return {k: seconds(raw[k]) for k in PHASES if k in raw}


def clean_timeline(raw: Any) -> tuple[dict[str, Any] | None, str | None]:
    """A launch timeline with exactly runner.evidence.Timeline's fields, each of its type (or the
    child's ``{'error': text}``), and None otherwise with the reason: the profiler builds a Timeline
    from it, and the child's dict is the candidate's to rewrite."""
    if raw is None:
        return None, None
    if isinstance(raw, Mapping) and set(raw) == {"error"}:
        return {"error": str(raw["error"])[:4000]}, None
    from .evidence import Timeline

    kinds = {f.name: str(f.type) for f in fields(Timeline)}
    required = {f.name for f in fields(Timeline) if f.default is MISSING}
    if not isinstance(raw, Mapping) or not set(raw) <= set(kinds) or not required <= set(raw):
        keys = sorted(map(str, raw))[:8] if isinstance(raw, Mapping) else type(raw).__name__
        return None, f"TIMELINE_DROPPED: the candidate's process returned a timeline with other fields ({keys})"
    out: dict[str, Any] = {}
    for k, v in raw.items():
        kind = kinds[k]
        if kind == "float" and not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v >= 0:
            out[k] = float(v)
        elif kind == "int" and type(v) is int and 0 <= v < 2**53:
            out[k] = v
        elif kind.startswith("tuple") and isinstance(v, (list, tuple)) and len(v) <= 10_000 \
                and all(isinstance(x, str) and len(x) <= 1000 for x in v):
            out[k] = list(v)
        else:
            return None, f"TIMELINE_DROPPED: the candidate's process returned a timeline whose {k!r} is not a {kind}"
    return out, None


@dataclass(frozen=True)
class EvalSettings:
    """How hard the evaluator looks."""

    device: str = "cpu"
    """'cuda' or 'cpu' (Triton interpreter)."""
    trials: int = 3
    """Fresh seeded input sets checked per workload."""
    seed: int = 0
    """Base seed; each trial and workload derives its own."""
    timeout_s: float = 120.0
    """Wall-clock limit for the whole child process."""
    warmup: int = 3
    """Untimed calls before timing (JIT compile, autotune)."""
    reps: int = 20
    """Minimum timed calls on the GPU."""
    reps_max: int = 500
    """Maximum timed calls on the GPU."""
    target_ms: float = 100.0
    """Aim for this much timed GPU work per workload."""
    reps_cpu: int = 3
    """Timed calls on the CPU, where timings only show that the code runs."""
    hold_us: float = 100.0
    """Microseconds the GPU waits before each timed call's start event, after the L2 flush, so the
    host has enqueued the call before the event fires (nvbench's blocking kernel). The wait runs on
    the GPU's global timer (runner/driver.py Hold), not for a count of SM cycles. Without it a short
    kernel's time included the host's launch latency whenever the GPU had drained the loop's earlier
    work: an A/A of the demo at M=512 through the final gate called the copy faster in 34 of 100 rows
    (speedups 0.34..2.73; 17 of 100 with 50 us), and with 100 us in 0 of 100 (0.75..1.006; repeat
    spread 0.11 % at M=8192; no honest timing refused by the wall check in the 300 evaluations):
    benchmarks/results-h200-session20. 0 turns it off (benchmarks/evaluator.py --hold-us 0)."""
    timing_retries: int = 1
    """Evaluations run again when the only failure is TIMING_INCONSISTENT: an honest kernel's phase can
    outgrow the harness's calibrated loop when other work takes the host or GPU meanwhile (on the
    H200, six tests sharing them pushed a CUDA kernel's loop from 0.55 to 1.76 ms a call,
    benchmarks/results-h200-session12). A rerun that fits the parent's clock is trusted as any phase
    that fits is; a forger is refused every time, at the cost of one more evaluation."""
    rotate: int = 3
    """Input buffer sets the timed calls rotate through."""
    time_reference: bool = False
    """Also time the Definition's reference (for FlashInfer-Trace's reference_latency_ms)."""
    cache_dir: Path | None = None
    """Triton cache shared by candidates."""
    timeline: bool = False
    """After timing, record the launch timeline of the largest workload (GPU only)."""
    timeline_bar: tuple[float, tuple[tuple[str, float], ...]] | None = None
    """With ``timeline``: record it only when the candidate's geometric-mean speedup over these
    (workload uuid, baseline median ms) reaches the first value; None records it always. The loop
    profiles only the baseline and new bests, and CUPTI's start-up was 6.1 s of a candidate's 10.4 s
    on the H200 (benchmarks/results-h200-session6/overhead)."""
    cuda_graphs: bool = False
    """Time each call as a CUDA graph replay (GPU time without the host's launch overhead); a
    candidate that cannot be captured is timed call by call, and its timing says why."""
    fork_server: bool = True
    """Fork each child from a server that has imported torch already (runner/forkserver.py), confined
    as unshare would confine a fresh one (a fresh interpreter where it cannot be): on the H200 a full
    Triton evaluation took 2.11 s forked against 5.75 s with a fresh interpreter, of which start-up
    was 3.5 s (benchmarks/results-h200-evaluator-*session4*)."""
    warm_server: bool = True
    """With ``fork_server``: a search forks its candidates from the target's warm server, which has also
    imported the target's third-party modules (runner/preload.py)."""
    judge_during: bool = True
    """Judge each saved output while the child goes on (never while it times), not all after it."""
    judge_on: str = "auto"
    """Where this process compares outputs with the reference: 'auto' is the GPU of a CUDA evaluation
    (on the H200, host judging of the demo's 64M-element outputs was 97.6 s of a 112 s run of child
    time, benchmarks/results-h200-session9), falling back to the host if the GPU refuses; 'cpu' the host."""
    float64_reference: bool = False
    """Also run the reference in float64 and accept TF32-style differences by KernelOPT's error ratio."""
    memory_limit_mb: int = 32_768
    """Host memory a child may allocate beyond its start-up (RLIMIT_DATA); 0 for no limit."""
    isolate_network: bool = True
    """Run children in a network namespace of their own where the OS allows it."""
    checks: int = 5
    """Timed calls per workload whose outputs are checked, at positions the parent draws in secret
    (runner/timekeeper.py): a candidate that skips the work of half its calls passes 1 in 2**checks."""
    reference_ahead: bool = False
    """A search's: once a candidate's child has exited, compute the next reference (new secret check
    seeds) beside the judging of its outputs, where the seeds left would not serve one more candidate,
    rather than before the next child (Liger's SwiGLU, 235 MB an output, has room for one candidate's
    checks: every candidate waited for a reference child). Never while a child runs: the reference's
    GPU work would share the GPU with a candidate's timed calls."""
    context: tuple[SourceFile, ...] = ()
    """The rest of the packages the target's files belong to, at the pull request's head
    (Target.context): written before the candidate's files, so that the candidate runs as the
    repository with its files in place, whatever copy of the package is installed."""


def _request(definition: Definition, solution: Solution, workloads: Sequence[Workload],
             tolerance: Tolerance, s: EvalSettings) -> dict[str, Any]:
    dtypes = {spec.dtype for spec in definition.outputs.values()}
    return {
        "definition": definition.to_json(),
        "solution": solution.to_json(),
        "workloads": [w.to_json() for w in workloads],
        "device": s.device,
        "trials": s.trials,
        "seed": s.seed,
        "tolerance": {
            "atol": {d: tolerance.for_dtype(d)[0] for d in dtypes},
            "rtol": {d: tolerance.for_dtype(d)[1] for d in dtypes},
            "outputs": {n: list(tolerance.for_output(n, spec.dtype)) for n, spec in definition.outputs.items()},
        },
        "timing": {"warmup": s.warmup, "reps": s.reps, "reps_max": s.reps_max, "target_ms": s.target_ms,
                   "reps_cpu": s.reps_cpu, "rotate": s.rotate, "graphs": s.cuda_graphs,
                   "hold_us": s.hold_us},
        "time_reference": s.time_reference,
        "timeline": s.timeline,
        "timeline_bar": None if s.timeline_bar is None else {"speedup": s.timeline_bar[0],
                                                             "baseline_ms": dict(s.timeline_bar[1])},
        "float64_reference": s.float64_reference,
        "memory_limit_mb": s.memory_limit_mb,
        "checks": s.checks,
        "context": [{"path": f.path, "content": f.content} for f in s.context],
    }


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class _Reference:
    """The reference child's outputs for one (definition, workloads, seeds), held by the parent."""

    trials: tuple[tuple[list[Any], ...], ...]
    """Per workload, per trial: the reference outputs."""
    float64: tuple[tuple[list[Any], ...], ...]
    """Per workload, per trial: the float64 reference outputs (empty when not asked for)."""
    checks: tuple[tuple[list[Any], ...], ...]
    """Per workload, per timing check: the reference outputs."""
    checks64: tuple[tuple[list[Any], ...], ...]
    """Per workload, per timing check: the float64 reference outputs (empty when not asked for)."""
    timing: tuple[Timing | None, ...]
    """Per workload: the reference's own timing, when asked for."""
    environment: Mapping[str, Any]
    """hardware and libraries, as the trusted child saw them."""
    pools: tuple[tuple[int, ...], ...] = ()
    """Per workload: the secret seeds of ``checks``, drawn here (never derived from settings), which
    the parent hands a candidate's timed calls at positions of its choosing."""
    placed: _Placed = field(default_factory=lambda: _Placed(), compare=False, repr=False)
    """These outputs' copies on the judge's GPU, kept for the next candidate's judging."""


class _Placed:
    """A reference's tensors copied to the judge's GPU once for every candidate of a search, not once
    per judged file: the copy was 0.113 s of the H200 host's 0.42 s per 268 MB file
    (benchmarks/results-h200-session22, `bash benchmarks/h200.sh judge`), and a search judges every
    candidate against the same references (3 trials and 5 timing checks per workload). At most
    ``budget`` bytes per device stay (a twentieth of the GPU, at most 2 GiB): the candidates' own
    processes share that GPU. Nothing judges in place (runner/comparison.py makes new tensors), so a
    copy stays the reference's.

    A copy lives exactly as long as the host tensor it copies (a weak reference's callback drops it
    and gives its bytes back to the budget). A refreshed reference shares this object with the one it
    replaces (its trials are the same tensors), while the spent checks' tensors die: their ids are
    then free for new tensors, and a copy kept under a dead tensor's id would be served for whatever
    tensor Python puts at that address next, a check of another seed among them."""

    def __init__(self) -> None:
        # Reentrant: a tensor may die, and its callback run, inside this object's own locked step.
        self.lock = threading.RLock()
        self.copies: dict[tuple[int, str], tuple[weakref.ref[Any], Any]] = {}
        self.held: dict[str, int] = {}
        self.hits = 0

    def get(self, x: Any, device: str, budget: int | None = None) -> Any:
        """``x`` on ``device`` (a copy kept while it fits ``budget`` and ``x`` lives)."""
        key = (id(x), device)
        with self.lock:
            hit = self.copies.get(key)
            if hit is not None and hit[0]() is x:
                self.hits += 1
                return hit[1]
        y = x.to(device, non_blocking=False)
        size = y.numel() * y.element_size()
        with self.lock:
            if (y is not x and key not in self.copies
                    and self.held.get(device, 0) + size <= (_placed_budget(device) if budget is None else budget)):
                self.copies[key] = (weakref.ref(x, functools.partial(self._drop, key, size)), y)
                self.held[device] = self.held.get(device, 0) + size
        return y

    def _drop(self, key: tuple[int, str], size: int, dead: weakref.ref[Any]) -> None:
        with self.lock:
            entry = self.copies.get(key)
            if entry is not None and entry[0] is dead:
                del self.copies[key]
                self.held[key[1]] -= size


def _placed_budget(device: str) -> int:
    import torch

    total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    return min(2 << 30, total // 20)


# A search run evaluates every candidate on the same seeds and the gate on other ones: two entries.
_REFERENCES: OrderedDict[str, _Reference] = OrderedDict()
_KEEP_REFERENCES = 2
_REFERENCES_LOCK = threading.Lock()  # evaluation workers (one per GPU) may share this process


def _reference_key(req: Mapping[str, Any]) -> str:
    parts = {k: req[k] for k in ("definition", "workloads", "device", "trials", "seed", "time_reference",
                                 "float64_reference")}
    parts["rotate"] = req["timing"]["rotate"]
    parts["checks"] = req.get("checks", 0)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _load(path: Path, cap: int) -> Any:
    """A saved output file (runner/tensorfile.py), read whole into this process's memory first (at most
    ``cap`` bytes, never through a symlink or from a FIFO): never a memory map of a file the child
    still owns, which it could truncate under us (SIGBUS); its tensors are views of that copy. Raises
    OSError, or TensorFileError (a ValueError) naming what is wrong with a file it did not write."""
    return tensorfile.read(read_capped_pages(path, cap), path.name)


def _output_elements(req: Mapping[str, Any], wide: bool) -> int:
    """Elements of one call's outputs on the largest workload; ``wide``: as bytes in each output's
    own dtype (8 where it is unknown)."""
    definition, largest = req["definition"], 0
    for w in req["workloads"]:
        total = 0
        for spec in definition["outputs"].values():
            n = _DTYPE_BYTES.get(spec.get("dtype", ""), 8) if wide else 1
            for ax in spec.get("shape") or ():
                a = definition["axes"][ax]
                n *= int(a["value"]) if a["type"] == "const" else int(w["axes"][ax])
            total += n
        largest = max(largest, total)
    return largest


_DTYPE_BYTES = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2}


def _output_cap(req: Mapping[str, Any]) -> int:
    """Bytes a saved output file can need for the largest workload: every output in float64 (the
    widest), twice over for the container, plus a MiB."""
    return 16 * _output_elements(req, wide=False) + (1 << 20)


POOL_BYTES = 1 << 31
"""Host memory the secret check outputs of one reference may hold: room for several candidates."""
_POOL_USED: dict[str, int] = {}  # reference key -> secret seeds handed out so far


def _pool_size(req: Mapping[str, Any]) -> int:
    """Secret seeds per workload the reference computes outputs for: ``checks`` for each of up to 16
    candidates (fewer where their outputs are large), so that no two candidates ever see the same
    secret seed (one could leave the seeds it saw where the next can read them: the Triton cache)."""
    c = int(req.get("checks", 0))
    wide = 2 if req.get("float64_reference") else 1
    one = max(1, _output_elements(req, wide=True)) * wide * max(1, len(req["workloads"])) * max(1, c)
    return c * max(1, min(16, POOL_BYTES // one))


def _reference_for(req: Mapping[str, Any], s: EvalSettings, take: int = 0,
                   need: int | None = None) -> tuple[_Reference, int] | str:
    """The cached reference outputs and the first of ``take`` secret check seeds per workload
    reserved for one candidate (computed again, with new seeds, where fewer than ``need``, by default
    ``take``, are left), or why they could not be computed."""
    key = _reference_key(req)
    need = take if need is None else need
    with _REFERENCES_LOCK:
        old = _REFERENCES.get(key)
        if old is not None and _POOL_USED.get(key, 0) + need <= len(old.pools[0]):
            _REFERENCES.move_to_end(key)
            offset = _POOL_USED.get(key, 0)
            _POOL_USED[key] = offset + take
            return old, offset

    cap = _output_cap(req)
    dice = random.SystemRandom()
    pools = tuple(tuple(dice.getrandbits(62) for _ in range(_pool_size(req))) for _ in req["workloads"])

    def collect(work: Path, doc: Mapping[str, Any], _seconds: float) -> _Reference:
        entries = doc["workloads"]
        fresh = _Reference(
            trials=tuple(tuple(_load(work / "ref" / f, cap) for f in e["trials"]) for e in entries),
            float64=tuple(tuple(_load(work / "ref" / f, cap) for f in e["float64"]) for e in entries),
            checks=tuple(tuple(_load(work / "ref" / f, cap) for f in e["checks"]) for e in entries),
            checks64=tuple(tuple(_load(work / "ref" / f, cap) for f in e["checks64"]) for e in entries),
            timing=tuple(Timing.from_json(e["timing"]) if e.get("timing") else None for e in entries),
            environment=doc["environment"],
            pools=pools,
        )
        # Spent seeds only: the trials' outputs (and the reference's timing) are the same as before.
        return fresh if old is None else replace(old, checks=fresh.checks, checks64=fresh.checks64, pools=pools)

    again = {"trials": 0, "time_reference": False} if old is not None else {}
    # No candidate's Triton cache (cache_dir None: a fresh one in the child's own folder): a reference
    # computed again runs after candidates did, ahead of the next one in the last one's folder, or in the
    # gate in the baseline's, where a candidate could have planted a build of a kernel the reference runs.
    child = run_child({**req, **again, "mode": "reference", "check_seeds": [list(p) for p in pools]},
                      timeout_s=s.timeout_s, device=s.device, cache_dir=None, isolate=s.isolate_network,
                      memory_limit_mb=_watchdog_mb(s), collect=collect, fork=s.fork_server)
    if child.status != "OK" or not isinstance(child.collected, _Reference):
        return f"the definition's reference failed ({child.status}), so nothing can be verified:\n{child.log}"
    with _REFERENCES_LOCK:
        _REFERENCES[key] = child.collected
        _POOL_USED[key] = take
        while len(_REFERENCES) > _KEEP_REFERENCES:
            _POOL_USED.pop(_REFERENCES.popitem(last=False)[0], None)
    return child.collected, 0


def reference_ready(definition: Definition, solution: Solution, workloads: Sequence[Workload], tolerance: Tolerance,
                    settings: EvalSettings) -> bool:
    """Compute (or find cached) the reference outputs ``evaluate`` would use for these arguments,
    so that their files are written, loaded and deleted now, before anything else starts."""
    return not isinstance(_reference_for(_request(definition, solution, workloads, tolerance, settings), settings), str)


def reference_outputs(definition: Definition, solution: Solution, workloads: Sequence[Workload], tolerance: Tolerance,
                      settings: EvalSettings) -> list[Any] | str:
    """The reference's outputs of the first trial of the first workload, or why the reference failed
    (runner/smoke.py checks the configuration with them before any search)."""
    got = _reference_for(_request(definition, solution, workloads, tolerance, settings), settings)
    return got if isinstance(got, str) else list(got[0].trials[0][0])


class _Verdict(Exception):
    """A workload's failure, found while judging the candidate's outputs."""

    def __init__(self, status: str, log: str, correctness: Mapping[str, Any] | None = None):
        super().__init__(log)
        self.status, self.log, self.correctness = status, log, correctness


class _OutputJudge:
    """Every saved output of workload ``wi`` against the reference, in the order the child writes
    them: ``advance`` judges the files complete so far (called while the child still runs, so judging
    overlaps its work), ``result`` the rest once it has exited: the worst errors, or the _Verdict of
    the first wrong file. File names are the parent's own, never taken from the child's result."""

    def __init__(self, work: Path, wi: int, definition: Definition, ref: _Reference, tol: Mapping[str, Any],
                 trials: int, seeds: list[int], keeper: Timekeeper, cap: int, offset: int,
                 device: str = "cpu") -> None:
        self.work, self.tol, self.trials, self.seeds, self.n_checks = work, tol, trials, seeds, 0
        self.wi, self.ref, self.keeper, self.cap, self.offset = wi, ref, keeper, cap, offset
        self.named = list(definition.outputs.items())
        self.jobs: list[tuple[str, Any, Any, dict[str, Any]]] = [(f"w{wi}_t{t}_r{r}.kpt", ref.trials[wi][t], ref.float64[wi][t] if ref.float64[wi] else None,
                      {"trial": t, "seed": seeds[t], "run": ("NaN-poisoned", "second poison")[r]})
                     for t in range(trials) for r in (0, 1)]
        self.timed = False  # whether the checked timed calls' jobs are known (once their phase ended)
        self.done = 0
        self.worst: dict[str, float] = {"max_abs": 0.0, "max_rel": 0.0, "rel_l2": 0.0}
        self.ratios: list[float] = []
        self.identical = 0  # second runs bit for bit their first (the harness's marker, or compared here)
        self.marked: list[int] = []  # jobs taken as their marker while the child ran (``_marked``)
        self.previous: list[Any] = []
        self.failed: Exception | None = None  # a _Verdict, or what judging a garbage file raised
        self.device = device  # where outputs are compared (judge_device of EvalSettings.judge_on)
        self.fallback = ""  # why a GPU judge moved to the host

    @property
    def finished(self) -> bool:
        return self.failed is not None or (self.timed and self.done == len(self.jobs))

    def _timed_jobs(self, final: bool) -> bool:
        """Add the checked timed calls' files, once the parent's channel says which calls they were."""
        phase = self.keeper.phase("time", self.wi)
        if phase is None:
            if final:
                self.failed = _Verdict("RUNTIME_ERROR", "TIMING_PROTOCOL: the candidate's process never completed "
                                       "its timing phase over the parent's channel")
            return False
        ref, wi, o = self.ref, self.wi, self.offset
        # Once its phase ended the child saved the checks' outputs only (the parent named them then),
        # in order: each against the reference of the pool seed placed there and its committed digest.
        for j, pos in enumerate(phase.checks):
            self.jobs.append((f"w{wi}_c{j}.kpt", ref.checks[wi][o + j], ref.checks64[wi][o + j] if ref.checks64[wi] else None,
                              {"timed_call": pos, "digest": phase.digests.get(pos), "reason_if_wrong": "a timed call, "
                               "at a position drawn in secret by the parent, returned wrong outputs (work skipped on "
                               "calls it hoped were unchecked, or a cache keyed on pointers?)"}))
        self.n_checks, self.timed = len(phase.checks), True
        return True

    def advance(self, final: bool = False, quiet: threading.Lock | None = None) -> None:
        """Judge the files complete so far; with ``quiet`` (the timing channel's, while the child
        runs) each comparison holds it and stops where the child is timing."""
        while not self.finished:
            if self.done == len(self.jobs) and not self._timed_jobs(final):
                return
            if self.finished:
                return
            fname, want, want64, where = self.jobs[self.done]
            path = self.work / "out" / fname
            if not path.is_file() and where.get("run") == "second poison" and path.with_suffix(".same").is_file():
                # The harness found this run bit for bit the first, judged just before: the same verdict.
                # (The candidate could write this marker itself, as it could write a copy of the first
                # run's file: a second run on the same inputs was never more than that.) Once the child
                # has exited, a file saved after all wins over the marker (``_marked``).
                self.identical += 1
                self.marked.append(self.done)
                self.done += 1
                continue
            if not path.is_file():  # the harness renames a file into place once it is complete
                if final:
                    self.failed = _Verdict("RUNTIME_ERROR", f"the candidate's process produced no outputs for {where}")
                return
            if quiet is not None and not quiet.acquire(blocking=False):
                return  # the child is timing: this judge's work waits
            try:
                self._judge(path, want, want64, where)
                if quiet is not None:
                    self._settle()
            except Exception as e:  # noqa: BLE001 - a verdict, or a file the candidate wrote that is garbage
                self.failed = _bare(e)
                return
            finally:
                if quiet is not None:
                    quiet.release()
            self.done += 1

    def _settle(self) -> None:
        """Finish this judge's queued GPU work before letting the child time."""
        if self.device != "cpu":
            import torch

            torch.cuda.synchronize()

    def _judge(self, path: Path, want: Any, want64: Any, where: dict[str, Any]) -> None:
        from .comparison import compare
        from .harness import same_run

        try:
            got = _load(path, self.cap)
        except Exception as e:  # a file the candidate wrote is data, and may be garbage
            raise _Verdict("RUNTIME_ERROR", f"unreadable outputs for {where}: {e}") from None
        if not isinstance(got, list) or len(got) != len(self.named):
            n = len(got) if isinstance(got, list) else 1
            raise _Verdict("INCORRECT_SHAPE", f"returned {n} outputs, the definition has {len(self.named)}")
        # On the host, before anything is copied to the GPU: a second run identical to the first costs
        # one comparison of host memory, not two copies to the GPU and a comparison there.
        if where.get("run") == "second poison" and same_run(self.previous, got):
            self.identical += 1
            return  # bit for bit the first run of this trial, which passed: the same verdict, for free
        self.previous = got
        got, want, want64 = _placed(self, got, want, want64)
        if "digest" in where:
            # Where the outputs now are: on the GPU a sum of a 235 MB file is a fraction of a millisecond,
            # on the host 0.057 s (the H200 host, session 22); exact integers either way.
            committed = where.pop("digest")
            if committed is None or tuple(committed) != digest_of(got, self.keeper.device):
                raise _Verdict("RUNTIME_ERROR", f"LATE_WRITE: the saved outputs of timed call {where['timed_call']} "
                               "are not what the call had written when it returned (their digest, committed to the "
                               "parent before it said which calls it checks, differs): work done after the call, "
                               "once the candidate knew the call was checked, or on a stream the harness never saw")
        for k, ((name, spec), g) in enumerate(zip(self.named, got, strict=True)):
            a, r = self.tol["outputs"][name]
            verdict, stats = compare(name, spec.dtype, g, want[k], a, r, want64[k] if want64 else None)
            if verdict is not None:
                detail = {"output": name, **stats, **where, "atol": a, "rtol": r}
                detail.pop("reason_if_wrong", None) if "timed_call" not in where else None
                raise _Verdict(verdict, json.dumps(detail), detail if verdict == "INCORRECT_NUMERICAL" else None)
            for key in self.worst:
                self.worst[key] = max(self.worst[key], float(stats[key]))
            if "float64_ratio" in stats:
                self.ratios.append(float(stats["float64_ratio"]))

    def _marked(self) -> None:
        """After the child exited: a second run taken as its marker while the child ran, whose file
        exists now, is judged from that file. A marker planted ahead (the candidate's own, at import)
        no longer stands in for a second run saved later, wrong (a red-team candidate, session 25)."""
        for k in self.marked:
            fname, want, want64, where = self.jobs[k]
            path = self.work / "out" / fname
            if self.failed is None and path.is_file():
                self.identical -= 1
                try:
                    self.previous = []  # judged in full: the first run it followed is no longer at hand
                    self._judge(path, want, want64, where)
                except Exception as e:  # noqa: BLE001 - as in advance
                    self.failed = _bare(e)
        self.marked = []

    def result(self) -> dict[str, Any]:
        self.advance(final=True)
        self._marked()
        if self.failed is not None:
            failed, self.failed = self.failed, None  # raised once: it is the caller's now
            try:
                raise failed
            finally:
                del failed  # this frame, in the traceback, must not hold the exception back
        out: dict[str, Any] = {**self.worst, "trials": self.trials, "seeds": self.seeds, "runs_per_trial": 2,
                               "second_runs_identical": self.identical, "timing_checks": self.n_checks}
        if self.ratios:
            out["float64_ratio"] = max(self.ratios)
        out["judged_on"] = self.fallback or self.device
        return out


def _bare(e: Exception) -> Exception:
    """``e`` without the frames it was raised through, nor the exception it was raised in: a judge
    keeps its failure, and those frames hold the judge, its reference and the failed candidate's
    outputs (on the GPU too), a cycle only a full garbage collection frees: a search's failing Liger
    candidates each kept a reference's checks and their own outputs, over a GB, for as long."""
    e.__traceback__, e.__context__, e.__cause__ = None, None, None
    return e


def child_warnings(build: Mapping[str, Any]) -> tuple[str, ...]:
    """The child's warnings (IMPORT_MISMATCH), as the candidate's process wrote them: its words, so
    at most 8, each one line of at most 600 characters. A line break would let a module path the
    candidate chose start a line of report.md of its own that a reader takes for kernelpro's (the bot
    no longer parses report.md: its tolerances come from result.json, kernelpro/schema.py)."""
    raw = build.get("warnings")
    return tuple(" ".join(str(w).split())[:600] for w in raw[:8]) if isinstance(raw, list) else ()


_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def child_imports(build: Mapping[str, Any]) -> tuple[str, ...]:
    """The modules a child's build imported (``build['imported']``), as its candidate's process wrote
    them: only dotted names of at most 200 characters, at most 5000 of them."""
    raw = build.get("imported")
    if not isinstance(raw, (list, tuple)):
        return ()
    return tuple(m for m in raw[:5000] if isinstance(m, str) and len(m) <= 200 and _MODULE.fullmatch(m))


def judge_device(setting: str, device: str) -> str:
    """Where outputs are compared: the GPU of a CUDA evaluation unless told 'cpu' (or CUDA is not
    usable in this process)."""
    if setting not in ("auto", "cpu", "cuda"):
        raise ValueError(f"judge_on must be 'auto', 'cpu' or 'cuda', not {setting!r}")
    if setting == "cpu" or not device.startswith("cuda"):
        return "cpu"
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _placed(judge: _OutputJudge, got: list[Any], want: Any, want64: Any) -> tuple[list[Any], Any, Any]:
    """The candidate's outputs and the reference's, on the judge's device. The digest check has been
    done on the loaded host copy already; a GPU that refuses (out of memory, a lost context) moves
    this judge to the host for good, so a verdict never depends on the GPU's state."""
    if judge.device == "cpu":
        return got, want, want64
    import torch

    placed = judge.ref.placed if judge.ref is not None else None

    def on(x: Any, device: str, kept: bool = False) -> Any:
        if isinstance(x, torch.Tensor):
            return placed.get(x, device) if kept and placed is not None else x.to(device, non_blocking=False)
        if isinstance(x, (list, tuple)):
            return type(x)(on(v, device, kept) for v in x)
        return x

    try:
        # The GPU by index: the reference's copies are kept per GPU (a pool's workers judge on theirs).
        device = judge.device if judge.device != "cuda" else f"cuda:{torch.cuda.current_device()}"
        return on(got, device), on(want, device, True), on(want64, device, True)
    except Exception as e:  # noqa: BLE001 - out of memory, a lost context, a torch built without CUDA
        judge.device, judge.fallback = "cpu", f"judged on the host: the GPU refused ({e!s:.200})"
        return got, want, want64


def _follow(judges: Sequence[_OutputJudge], keeper: Timekeeper) -> None:
    """While the child runs: judge what it has written, workload by workload, in order. Never while
    it times (the parent's channel says so): the parent's CPU work must not slow its launches."""
    if keeper.in_phase:
        return
    for j in judges:
        j.advance(quiet=keeper.quiet)
        if not j.finished:
            return


def _timing(entry: Mapping[str, Any], child_seconds: float, spent_ms: list[float], keeper: Timekeeper,
            wi: int) -> Timing:
    """The candidate's own timing, read as untrusted numbers: the summary it sent over the parent's
    channel when its timing phase ended (what result.json says is ignored), well-formed, positive,
    and consistent with the wall the parent's own clock saw (runner/timekeeper.py)."""
    why = keeper.consistent(wi)
    if why is not None:
        raise _Verdict("RUNTIME_ERROR", why)
    phase = keeper.phase("time", wi)
    try:
        t = dict(phase.claimed) if phase is not None else entry["timing"]
        timing = Timing.from_json(t)
        total = float(t.get("sum_ms", timing.median_ms * timing.n))
    except (KeyError, TypeError, ValueError) as e:
        raise _Verdict("RUNTIME_ERROR", f"malformed timing from the candidate's process: {e}") from None
    # The parent's figures, never the child's (its summary may carry fields of these names).
    wall = phase.wall_s * 1e3 / phase.reps if phase is not None and phase.reps > 0 else None
    timing = replace(timing, mode=timing_mode(t.get("mode"), keeper.device, keeper.graphs), wall_ms=wall,
                     loop_ms=keeper.calibration_ms(wi) if wall is not None else None)
    values = (timing.median_ms, timing.p10_ms, timing.p90_ms, total)
    if timing.n < 1 or not all(math.isfinite(v) and v > 0 for v in values) or not (
            timing.p10_ms <= timing.median_ms <= timing.p90_ms):
        raise _Verdict("RUNTIME_ERROR", f"implausible timing from the candidate's process: {dict(t)}")
    if keeper.device == "cpu" and phase is not None and phase.calls_ms:
        # On the CPU each commit reaches the parent right after its call, so the parent's own intervals,
        # less the loop's calibrated cost, are what a call took. A median claimed below their mean is
        # work concentrated in one call (all of a phase's outputs computed in its first, from the seeds
        # in the harness's frame: 40 ms a call reported as 0.036 ms, a red-team candidate of session 25)
        # or hidden between calls, inside the phase's fixed allowance: the parent's figure stands.
        seen = statistics.fmean(phase.calls_ms) - (keeper.calibration_ms(wi) or 0.0)
        if seen > timing.median_ms:
            timing = replace(timing, median_ms=seen, p90_ms=max(timing.p90_ms, seen))
    spent_ms.append(total)
    if sum(spent_ms) > child_seconds * 1e3 * 1.05 + 5:
        raise _Verdict("RUNTIME_ERROR", f"the candidate's process reported {sum(spent_ms):.0f} ms of timed calls "
                       f"in a process that lived {child_seconds * 1e3:.0f} ms: its timer was tampered with")
    return timing


def timing_mode(label: Any, device: str, graphs: bool) -> str:
    """The timing's mode as the parent knows it: from the device and the ``cuda_graphs`` setting, not
    from the candidate's label. With CUDA graphs the child may say the capture failed and it timed
    with events (kept, the reason one line of at most 200 characters); any other label it sends is a
    protocol violation (``TIMING_PROTOCOL``), never shown."""
    if device != "cuda":
        allowed: tuple[str, ...] = ("cpu",)
    elif not graphs:
        allowed = ("events",)
    else:
        allowed = ("cuda_graph",)
        failed = "events (CUDA graph capture failed: "
        if isinstance(label, str) and label.startswith(failed) and label.endswith(")"):
            why = " ".join(label[len(failed):-1].split())[:200]
            return f"{failed}{why})"
    if isinstance(label, str) and label in allowed:
        return label
    raise _Verdict("RUNTIME_ERROR", f"TIMING_PROTOCOL: the candidate's process labelled its timing "
                   f"{str(label)[:60]!r}; on {device}{' with CUDA graphs' if graphs else ''} the parent allows "
                   f"only {' or '.join(repr(a) for a in allowed)}{' or a failed capture' if graphs and device == 'cuda' else ''}")


def _judges(definition: Definition, workloads: Sequence[Workload], req: Mapping[str, Any], ref: _Reference,
            work: Path, keeper: Timekeeper, offset: int, device: str) -> list[_OutputJudge]:
    from .harness import trial_seed

    cap = _output_cap(req)
    return [_OutputJudge(work, wi, definition, ref, req["tolerance"], req["trials"],
                         [trial_seed(req["seed"], t, w.uuid) for t in range(req["trials"])], keeper, cap, offset,
                         device)
            for wi, w in enumerate(workloads)]


def _judge(workloads: Sequence[Workload], ref: _Reference, judges: Sequence[_OutputJudge],
           doc: Mapping[str, Any], seconds: float, keeper: Timekeeper) -> list[WorkloadResult]:
    results: list[WorkloadResult] = []
    entries = doc.get("workloads")
    if not isinstance(entries, list) or len(entries) > len(workloads):
        return [WorkloadResult(workloads[0].uuid, "RUNTIME_ERROR", "malformed result from the candidate's process")]
    spent: list[float] = []
    for wi, (w, e) in enumerate(zip(workloads, entries, strict=False)):
        try:
            if not isinstance(e, dict) or e.get("uuid") != w.uuid:
                raise _Verdict("RUNTIME_ERROR", f"malformed result from the candidate's process for {w.uuid}")
            status, log = str(e.get("status")), str(e.get("log", ""))
            if status != "OUTPUTS":
                # The child may only report its own failures; it cannot report a pass.
                if status not in STATUSES or status == "PASSED":
                    raise _Verdict("RUNTIME_ERROR", f"malformed status {status[:40]!r} from the candidate's process")
                corr = json.loads(log) if status == "INCORRECT_NUMERICAL" and log.startswith("{") else None
                raise _Verdict(status, log, corr)
            correctness = judges[wi].result()
            results.append(WorkloadResult(w.uuid, "PASSED", "", correctness, _timing(e, seconds, spent, keeper, wi),
                                          ref.timing[wi]))
        except _Verdict as v:
            results.append(WorkloadResult(w.uuid, v.status, v.log, v.correctness))
            break
        except Exception as e:  # tensors the candidate wrote are data; odd ones must not stop the loop
            results.append(WorkloadResult(w.uuid, "RUNTIME_ERROR", f"its outputs could not be judged: {e!r}"[:2000]))
            break
    else:
        if len(entries) < len(workloads) and (not results or results[-1].status == "PASSED"):
            missing = workloads[len(entries)].uuid
            results.append(WorkloadResult(missing, "RUNTIME_ERROR", "the candidate's process stopped before this workload"))
    return results


CACHE_LIMIT = 2 << 30
"""Bytes a candidate's compile cache may hold after its child (apparent sizes): a real one holds a few
MiB of cubins and launchers. A candidate left a sparse file of 1 TiB there, in the results folder, which
the secret scan before the upload would have read for hours (a red-team probe, session 27)."""


def evaluate(definition: Definition, solution: Solution, workloads: Sequence[Workload],
             tolerance: Tolerance, settings: EvalSettings) -> Outcome:
    outcome = _evaluated(definition, solution, workloads, tolerance, settings)
    cache = settings.cache_dir
    if cache is not None and scratch.larger_than(cache, CACHE_LIMIT):
        scratch.remove(cache)
        note = (f"CACHE_DROPPED: the candidate's compile cache held more than {CACHE_LIMIT >> 30} GiB after its "
                "evaluation; it was removed")
        outcome = replace(outcome, warnings=(*outcome.warnings, note))
    return outcome


def _evaluated(definition: Definition, solution: Solution, workloads: Sequence[Workload],
               tolerance: Tolerance, settings: EvalSettings) -> Outcome:
    outcome = _guarded(definition, solution, workloads, tolerance, settings)
    earlier: list[str] = []
    while _inconsistent(outcome) and len(earlier) < settings.timing_retries:
        earlier.append(outcome.log)
        outcome = _guarded(definition, solution, workloads, tolerance, settings)
    if not earlier:
        return outcome
    said = "; ".join(f"run {i + 1}: {log[:300]}" for i, log in enumerate(earlier))
    note = (f"TIMING_RERUN: {len(earlier)} earlier run(s) of this evaluation were refused as TIMING_INCONSISTENT "
            f"and measured again ({said})")
    return replace(outcome, warnings=(*outcome.warnings, note))


def _guarded(definition: Definition, solution: Solution, workloads: Sequence[Workload],
             tolerance: Tolerance, settings: EvalSettings) -> Outcome:
    """One evaluation whose failure is a value: whatever the candidate's process left behind that
    kernelpro then trips on (a result.json with a 401-digit number, a folder 3000 levels deep: red-team
    candidates of session 25 ended the whole run) is this candidate's UNJUDGEABLE, never the run's end.
    A sandbox that cannot be confined (SandboxError) and a stop of the command still end it."""
    try:
        return _evaluate_once(definition, solution, workloads, tolerance, settings)
    except SandboxError:
        raise
    except Exception as e:  # noqa: BLE001 - failures are values here
        return Outcome(solution.content_hash(), "RUNTIME_ERROR", (), timestamp=_now(),
                       log=f"UNJUDGEABLE: kernelpro could not evaluate it: {e!r}"[:2000])


def _inconsistent(outcome: Outcome) -> bool:
    """Refused only because its timing phase did not fit the parent's clock (runner/timekeeper.py)."""
    return (outcome.status == "RUNTIME_ERROR" and outcome.log.startswith("TIMING_INCONSISTENT:")
            and all(r.status in ("PASSED", "RUNTIME_ERROR") for r in outcome.results))


def _evaluate_once(definition: Definition, solution: Solution, workloads: Sequence[Workload],
                   tolerance: Tolerance, settings: EvalSettings) -> Outcome:
    h = solution.content_hash()
    if solution.definition != definition.name:
        return Outcome(h, "COMPILE_ERROR", (), log=f"solution implements {solution.definition!r}, not {definition.name!r}",
                       timestamp=_now())
    req = _request(definition, solution, workloads, tolerance, settings)
    t_ref = time.perf_counter()
    got = _reference_for(req, settings, take=settings.checks)
    if isinstance(got, str):
        return Outcome(h, "RUNTIME_ERROR", (), log=got, timestamp=_now())
    ref, offset = got

    # After the child exited; overlapped with it; and, before it, the reference's (issue 22: Liger's
    # SwiGLU has room for one candidate's check outputs in POOL_BYTES, so each candidate waits for a
    # reference child, a cost no phase of the candidate's own showed).
    judged = {"judge": 0.0, "judge_during": 0.0, "reference": time.perf_counter() - t_ref}
    on = judge_device(settings.judge_on, settings.device)
    judges: list[_OutputJudge] = []
    keeper = Timekeeper([p[offset:offset + settings.checks] for p in ref.pools], settings.device, req["timing"])

    def judges_in(work: Path) -> list[_OutputJudge]:  # the work directory is known once the child starts
        if not judges:
            judges.extend(_judges(definition, workloads, req, ref, work, keeper, offset, on))
        return judges

    def during(work: Path) -> None:
        t0 = time.perf_counter()
        _follow(judges_in(work), keeper)
        judged["judge_during"] += time.perf_counter() - t0

    ahead: list[threading.Thread] = []

    def refresh() -> None:
        t0 = time.perf_counter()
        # What fails here (the reference, or a stop of the run) is met again, and said, by the next evaluation.
        with contextlib.suppress(Exception):
            _reference_for(req, settings, take=0, need=settings.checks)
        judged["reference_ahead"] = time.perf_counter() - t0

    def collect(work: Path, doc: Mapping[str, Any], seconds: float) -> list[WorkloadResult]:
        t0 = time.perf_counter()
        if settings.reference_ahead and settings.checks:
            ahead.append(threading.Thread(target=refresh, name="kernelpro-reference-ahead", daemon=True))
            ahead[0].start()
        try:
            return _judge(workloads, ref, judges_in(work), doc, seconds, keeper)
        except Exception as e:  # noqa: BLE001 - judging fails as this candidate's status, never as a crash
            return [WorkloadResult(workloads[0].uuid, "RUNTIME_ERROR", f"UNJUDGEABLE: {e!r}"[:2000])]
        finally:
            judged["judge"] = time.perf_counter() - t0

    try:
        child = run_child(req, timeout_s=settings.timeout_s, device=settings.device, cache_dir=settings.cache_dir,
                          isolate=settings.isolate_network, memory_limit_mb=_watchdog_mb(settings), collect=collect,
                          during=during if settings.judge_during else None, fork=settings.fork_server,
                          timekeeper=keeper)
    finally:
        keeper.close()
        for thread in ahead:  # done before anything else may use the GPU (the next child, a profiler)
            thread.join()
    environment = {**ref.environment, "sandbox": {**child.sandbox, **_memory(child, settings)}}
    if child.status != "OK" or child.result is None:
        status = "TIMEOUT" if child.status == "TIMEOUT" else "RUNTIME_ERROR"
        return Outcome(h, status, (), environment=environment, log=child.log, wall_seconds=child.seconds,
                       timestamp=_now())
    res = child.result
    build: Mapping[str, Any] = res["build"] if isinstance(res.get("build"), dict) else {"status": "RUNTIME_ERROR"}
    build_seconds = seconds(build.get("seconds"))
    warnings = child_warnings(build)
    if build.get("status") != "OK":
        bstatus = str(build.get("status"))
        bstatus = bstatus if bstatus in ("COMPILE_ERROR", "RUNTIME_ERROR") else "RUNTIME_ERROR"
        return Outcome(h, bstatus, (), environment=environment, log=str(build.get("log", "")),
                       build_seconds=build_seconds, wall_seconds=child.seconds, timestamp=_now(),
                       warnings=warnings)
    results = tuple(child.collected or ())
    failed = next((r for r in results if r.status != "PASSED"), None)
    phases: Mapping[str, float] = {**clean_phases(res.get("phases")), **judged}
    timeline, dropped = None, None
    if settings.device == "cuda" and settings.timeline:  # recorded only then (runner/harness.py run)
        timeline, dropped = clean_timeline(res.get("timeline"))
    elif res.get("timeline") is not None:
        dropped = "TIMELINE_DROPPED: the candidate's process returned a timeline nobody asked for"
    if dropped is not None:
        warnings = (*warnings, dropped)
    return Outcome(
        solution_hash=h,
        status=failed.status if failed else ("PASSED" if results else "RUNTIME_ERROR"),
        results=results,
        environment=environment,
        log=failed.log if failed else ("" if results else "no workload results"),
        build_seconds=build_seconds,
        wall_seconds=child.seconds,
        phases=phases,
        timeline=timeline,
        timestamp=_now(),
        warnings=warnings,
        torch_ops=_torch_ops(res.get("workloads"), keeper.ops),
        imported=child_imports(build),
    )


def _torch_ops(entries: Any, announced: Any = ()) -> tuple[str, ...]:
    """The operators the verified calls dispatched: those the child announced over the parent's channel
    as each was first seen in a call (``announced``, the parent's own copy: clearing the harness's
    record afterwards hides nothing), and those its result lists (it can only add to them). Only
    names of an operator's shape are kept. The static check (runner/screen.py) is the first line;
    this one sees what its source hides."""
    ops: set[str] = {o for o in announced if isinstance(o, str) and OP_NAME.fullmatch(o)}
    for e in entries if isinstance(entries, list) else ():
        got = e.get("torch_ops") if isinstance(e, dict) else None
        ops.update(o for o in (got if isinstance(got, list) else ())[:1000] if isinstance(o, str) and OP_NAME.fullmatch(o))
    return tuple(sorted(ops))


# Resident memory of torch, CUDA and Triton before the candidate allocates anything.
_STARTUP_MB = 4096


def _watchdog_mb(s: EvalSettings) -> int:
    return s.memory_limit_mb + _STARTUP_MB if s.memory_limit_mb > 0 else 0


def _memory(child: ChildResult, s: EvalSettings) -> dict[str, str]:
    env = (child.result or {}).get("environment")
    limit = env.get("memory_limit") if isinstance(env, dict) else None
    watch = f"resident-memory watchdog at {_watchdog_mb(s)} MiB" if s.memory_limit_mb > 0 else "no watchdog"
    return {"memory": f"{limit}; {watch}" if limit else watch}


def traces(definition: Definition, solution: Solution, workloads: Sequence[Workload], outcome: Outcome) -> list[Trace]:
    """One FlashInfer-Trace line per workload; workloads never reached carry the failure too."""
    env = Environment(
        hardware=str(outcome.environment.get("hardware", "unknown")),
        libs={k: str(v) for k, v in outcome.environment.get("libs", {}).items()},
    )
    by_uuid = {r.uuid: r for r in outcome.results}
    first_bad = next((r for r in outcome.results if r.status != "PASSED"), None)
    out = []
    for w in workloads:
        r = by_uuid.get(w.uuid)
        status = r.status if r else (outcome.status if outcome.status != "PASSED" else "RUNTIME_ERROR")
        if r is not None:
            log = r.log
        elif first_bad is not None:
            log = f"not run: workload {first_bad.uuid} failed first ({first_bad.status})"
        else:
            log = outcome.log or "not run"
        correctness = performance = None
        if status in ("PASSED", "INCORRECT_NUMERICAL") and r is not None:
            c = r.correctness or {}
            correctness = Correctness(
                max_relative_error=float(c.get("max_rel", 0.0)),
                max_absolute_error=float(c.get("max_abs", 0.0)),
                extra={k: v for k, v in c.items() if k not in ("max_rel", "max_abs")},
            )
        if status == "PASSED" and r is not None and r.timing is not None:
            ref_ms = r.reference_timing.median_ms if r.reference_timing else 0.0
            performance = Performance(
                latency_ms=r.timing.median_ms,
                reference_latency_ms=ref_ms,
                speedup_factor=ref_ms / r.timing.median_ms if ref_ms and r.timing.median_ms > 0 else 0.0,
            )
        if status == "INCORRECT_NUMERICAL" and correctness is None:
            correctness = Correctness(math.nan, math.nan)
        out.append(Trace(definition.name, w, solution.name,
                         Evaluation(status, env, outcome.timestamp or _now(), log, correctness, performance)))
    return out
