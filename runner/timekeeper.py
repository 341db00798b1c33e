"""The parent's own view of a candidate's timing: a pipe pair it owns, its own clock, its own dice.

A candidate's process times its own calls (CUDA events, or the clock on the CPU), and everything in
that process is the candidate's to rewrite. So the parent (runner/evaluator.py) keeps what the
process cannot touch, over two pipes it created (runner/sandbox.py passes the child's ends):

- **Its clock.** The child announces the start and the end of each timing phase (one per
  workload; and, before the candidate is imported, a calibration phase of the same loop around a
  call that does nothing). The parent stamps both with ``time.perf_counter`` and refuses timings
  whose calls add up to less than the wall it saw, less the loop's own cost measured in the
  calibration (``consistent``): work moved outside the timed windows (a lazy output, a side stream,
  a clock the candidate rebound) shows up in the wall.
- **Its dice.** The inputs of the timed calls are random seeds drawn here when the phase starts
  (nothing the child could read before timing says what they are). A few of them are the secret
  seeds the trusted reference child computed outputs for (``pools``), at positions drawn here,
  indistinguishable from the rest. After each call the child commits a digest of that call's
  outputs (the sum of their bit patterns, computed in stream order right after the call); only
  then does the parent say whether that call is checked. The checked outputs must match both the
  reference and the digest committed before the decision: work skipped on calls the candidate
  hoped were unchecked, or done late once it knew, is caught.

Protocol (newline-delimited JSON; the child's side is runner/harness.py ``_Channel``):
child -> parent ``{"start": {"kind", "w", "reps"}}``, ``{"c": [i, [digest, ...]]}`` per call in
order, ``{"end": {timing summary}}``; parent -> child ``{"seeds": [...]}`` after a start,
``{"k": [i, 0|1]}`` after each commit, and after the end of a 'time' phase ``{"save": [i, ...]}``:
the checks' positions, whose outputs the child then saves.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import select
import statistics
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SUM_SLACK = 1.10
"""The timed calls may add up to this fraction of the wall, less the loop's cost, and still pass."""
MEDIAN_SLACK = {"cuda": 1.5, "cpu": 3.0}
"""... and their median times their number to the wall over this (a GPU's calls vary little)."""
LOOP_FACTOR = 2.0
"""The loop's own cost per call is allowed this many times over what its calibration took."""
FIXED_MS = {"cuda": 25.0, "cpu": 150.0}
"""Milliseconds of wall allowed per phase on top (pipe latency, the final synchronisation, and on
a shared CPU machine the scheduler)."""
CALL_SLACK = 1.1
"""On the CPU, where each call's commit reaches the parent right after the call: the median of the
parent's own per-call intervals may exceed the claimed median by this factor ..."""
CALL_MS = 5.0
"""... plus the loop's calibrated cost (``LOOP_FACTOR`` times) and these milliseconds per call (the
scheduler, the pipe). With three timed calls a fixed allowance per phase would hide 50 ms a call."""
OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z0-9_.]{1,120}")
"""An aten operator's name as the child announces it (``namespace::name.overload``)."""
_MAX_OPS = 1000
_MAX_LINE = 1 << 20


@dataclass(frozen=True)
class Phase:
    """One timing phase as the parent saw it."""

    kind: str
    """'cal' (the harness's loop around a call that does nothing, before the candidate is imported)
    or 'time' (the candidate's timed calls on one workload)."""
    workload: int
    """Index of the workload in the request."""
    reps: int
    """Calls the child announced."""
    wall_s: float = 0.0
    """Seconds between the seeds sent and the end received, on the parent's clock."""
    claimed: Mapping[str, Any] = field(default_factory=dict)
    """The child's timing summary, as it sent it at the end (untrusted numbers)."""
    checks: tuple[int, ...] = ()
    """Positions of the checked calls, in order; the j-th used the j-th pool seed."""
    digests: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    """Digest committed for each kept call, before the parent said it was kept."""
    ended: bool = False
    """Whether the end arrived after every call's commit."""
    kept: tuple[int, ...] = ()
    """Positions of every call the parent answered 'keep' for, in order: the checks and the decoys
    (calls with seeds of no reference, kept so that the answers never tell when the last check is
    past). Once the phase ended the parent names the checks, and the child saves their outputs only,
    in order."""
    calls_ms: tuple[float, ...] = ()
    """The parent's own clock between consecutive commits (the first from the seeds sent): each
    call with the harness's loop around it, as the parent saw it."""


class Timekeeper:
    """The parent's end of one child's timing channel: ``child_fds`` go to the child, ``started``
    closes them here and reads the child's announcements on a thread until the child is gone."""

    def __init__(self, pools: Sequence[Sequence[int]], device: str, timing: Mapping[str, Any] | None = None) -> None:
        self._pools = [list(p) for p in pools]
        self.device = device
        """The evaluation's device, as the parent set it."""
        self.graphs = bool((timing or {}).get("graphs"))
        """Whether the parent asked for CUDA graph replays (EvalSettings.cuda_graphs)."""
        self._reps = _rep_bounds(device, timing) if timing else {}
        self._dice = random.SystemRandom()
        up_r, up_w = os.pipe()  # child -> parent
        down_r, down_w = os.pipe()  # parent -> child
        self._in, self._out = up_r, down_w
        os.set_blocking(down_w, False)  # a child that stops reading fails its timing, never blocks us
        self.child_fds: tuple[int, int] = (down_r, up_w)
        """The child's (read, write) ends."""
        self._lock = threading.Lock()
        self._phases: list[Phase] = []
        self._open: dict[str, Any] | None = None
        self.problem: str | None = None
        """The first protocol violation seen, naming it; the child's timings are then void."""
        self._thread: threading.Thread | None = None
        self.quiet = threading.Lock()
        """Held by the parent's judge for each output it compares while the child runs, and by this
        channel from a phase's start until its end: the parent's GPU and CPU work never overlaps the
        child's timed calls (a judge on the GPU is another CUDA context, which the GPU time-slices
        with the child's)."""
        self._holding = False
        self.ops: set[str] = set()
        """Operator names the child announced as its verified calls dispatched them (runner/harness.py
        ``_Ops``): the parent's own copy, which only grows."""

    # ------------------------------------------------------------------ lifecycle

    def started(self) -> None:
        for fd in self.child_fds:
            os.close(fd)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def close(self) -> None:
        """After the child exited: wait for the reader (a grandchild may still hold the write end:
        then stop waiting), close ours."""
        if self._thread is not None:
            self._thread.join(timeout=2)
            if self._thread.is_alive():
                self._fail("TIMING_PROTOCOL: something of the candidate kept the timing channel open after it exited")
        self._close_out()
        if self._thread is None:  # never started: the child's ends are still ours
            for fd in self.child_fds:
                os.close(fd)
        elif not self._thread.is_alive():
            os.close(self._in)
        # else: the reader still blocks on it; the fd is closed with the process, never reused under it

    def _close_out(self) -> None:
        with self._lock:
            if self._out >= 0:
                os.close(self._out)
                self._out = -1

    # ------------------------------------------------------------------ what the evaluator asks

    @property
    def in_phase(self) -> bool:
        """Whether the child is timing now (the parent does no CPU work of its own then)."""
        return self._open is not None

    def phase(self, kind: str, workload: int) -> Phase | None:
        with self._lock:
            return next((p for p in self._phases if p.kind == kind and p.workload == workload), None)

    def calibration_ms(self, workload: int) -> float | None:
        """Milliseconds of wall per call of the harness's own loop on this workload."""
        p = self.phase("cal", workload)
        return p.wall_s * 1e3 / p.reps if p is not None and p.ended and p.reps > 0 else None

    def consistent(self, workload: int) -> str | None:
        """None if the candidate's timing on this workload fits the wall the parent saw; else why
        not, starting with the name of what it is (TIMING_INCONSISTENT or TIMING_PROTOCOL)."""
        if self.problem is not None:
            return self.problem
        p = self.phase("time", workload)
        if p is None or not p.ended:
            return "TIMING_PROTOCOL: the child never completed the timing phase of this workload over the parent's channel"
        cal = self.calibration_ms(workload)
        if cal is None:
            return "TIMING_PROTOCOL: the harness's calibration phase of this workload is missing"
        try:
            n, median, total = int(p.claimed["n"]), float(p.claimed["median_ms"]), float(p.claimed["sum_ms"])
        except (KeyError, TypeError, ValueError) as e:
            return f"TIMING_PROTOCOL: malformed timing summary at the end of the phase: {e!r}"
        if n != p.reps:
            return f"TIMING_PROTOCOL: {n} timed calls reported, {p.reps} announced"
        if not (math.isfinite(median) and math.isfinite(total) and median > 0 and total > 0):
            return f"TIMING_PROTOCOL: a median of {median} ms and a sum of {total} ms are not times"
        wall = p.wall_s * 1e3
        allow = LOOP_FACTOR * cal * p.reps + FIXED_MS.get(self.device, FIXED_MS["cpu"])
        slack = MEDIAN_SLACK.get(self.device, MEDIAN_SLACK["cpu"])
        facts = (f"the parent's clock saw {wall:.1f} ms for {p.reps} calls; the harness's own loop costs "
                 f"{cal:.3f} ms a call (allowed {allow:.1f} ms in all)")
        if wall > SUM_SLACK * total + allow:
            return (f"TIMING_INCONSISTENT: the timed calls add up to {total:.1f} ms but {facts}: work was "
                    "done outside the timed windows (lazy outputs, a side stream or thread, a rebound timer)")
        if wall > slack * n * median + allow:
            return (f"TIMING_INCONSISTENT: a median of {median:.4f} ms over {n} calls cannot fill the wall: {facts}; "
                    "the work was concentrated in a few calls to move the median")
        if self.device == "cpu" and p.calls_ms:
            # Each commit leaves right after its call on the CPU: the parent's own median per call.
            seen = statistics.median(p.calls_ms)
            if seen > CALL_SLACK * median + LOOP_FACTOR * cal + CALL_MS:
                return (f"TIMING_INCONSISTENT: a median of {median:.4f} ms a call, but the parent's clock saw a median "
                        f"of {seen:.3f} ms between the calls' commits (the harness's own loop costs {cal:.3f} ms a "
                        "call): the reported times are not the calls' own")
        return None

    # ------------------------------------------------------------------ the thread

    def _read(self) -> None:
        buf = b""
        try:
            while True:
                chunk = os.read(self._in, 65536)
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._handle(json.loads(line))
                if len(buf) > _MAX_LINE:
                    raise ValueError("an announcement longer than 1 MiB")
        except Exception as e:  # noqa: BLE001 - whatever the child wrote, it voids its timing, never the parent
            self._fail(f"TIMING_PROTOCOL: unreadable announcement from the child: {type(e).__name__}: {e}"[:500])
        finally:
            self._open = None
            self._let_go()

    def _hold(self) -> None:
        """Before a phase's seeds go out: wait for the judge's current comparison to finish (it
        holds ``quiet`` for one file at most); a judge stuck beyond a minute is not waited for."""
        self._holding = self.quiet.acquire(timeout=60.0)

    def _let_go(self) -> None:
        if self._holding:
            self._holding = False
            self.quiet.release()

    def _fail(self, why: str) -> None:
        if self.problem is None:
            self.problem = why
        self._close_out()  # the child's next read fails: it stops timing

    def _send(self, doc: Mapping[str, Any]) -> None:
        data = (json.dumps(doc) + "\n").encode()
        deadline = time.monotonic() + 30.0
        while data:
            with self._lock:
                if self._out < 0:
                    raise ValueError("the channel is closed")
                out = self._out
                try:
                    n = os.write(out, data)
                except BlockingIOError:
                    n = 0
            data = data[n:]
            if data:  # the child is not reading: give it a while, outside the lock
                if time.monotonic() > deadline:
                    raise ValueError("the child stopped reading its channel")
                select.select([], [out], [], 0.5)

    def _handle(self, msg: Any) -> None:
        if not isinstance(msg, dict) or len(msg) != 1:
            raise ValueError(f"unexpected message {str(msg)[:80]}")
        (key, value), = msg.items()
        now = time.perf_counter()
        if key == "start":
            if self._open is not None:
                raise ValueError("a phase started inside another")
            kind, wi, reps = str(value["kind"]), int(value["w"]), int(value["reps"])
            lo, hi = self._reps.get(kind, (1, 1 << 20))
            if kind not in ("cal", "time") or not 0 <= wi < len(self._pools) or not lo <= reps <= hi:
                raise ValueError(f"bad start {value}: {kind} phases have {lo} to {hi} calls")
            if self.phase(kind, wi) is not None:
                raise ValueError(f"phase {kind} of workload {wi} started twice")
            pool = self._pools[wi] if kind == "time" else []
            checks = tuple(sorted(self._dice.sample(range(reps), min(len(pool), reps))))
            seeds = [self._dice.getrandbits(62) for _ in range(reps)]
            for j, pos in enumerate(checks):
                seeds[pos] = pool[j]
            kept = tuple(sorted({*checks, *self._decoys(reps, checks)}))
            self._open = {"kind": kind, "w": wi, "reps": reps, "checks": checks, "kept": frozenset(kept), "next": 0,
                          "digests": {}, "stamps": []}
            self._hold()
            self._send({"seeds": seeds})
            self._open["t0"] = time.perf_counter()  # from the seeds on: the child can start no earlier
        elif key == "c":
            o = self._open
            if o is None:
                raise ValueError("a commit outside a phase")
            i, digest = int(value[0]), tuple(int(d) for d in value[1])
            if i != o["next"] or i >= o["reps"]:
                raise ValueError(f"commit of call {i}, expected {o['next']}")
            o["next"] = i + 1
            o["stamps"].append(now)
            keep = i in o["kept"]
            if keep:
                o["digests"][i] = digest
            self._send({"k": [i, int(keep)]})
        elif key == "end":
            o = self._open
            if o is None:
                raise ValueError("an end outside a phase")
            if o["next"] != o["reps"]:
                raise ValueError(f"the phase ended after {o['next']} of {o['reps']} commits")
            claimed = value if isinstance(value, dict) else {}
            stamps = [o["t0"], *o["stamps"]]
            calls = tuple((b - a) * 1e3 for a, b in zip(stamps, stamps[1:], strict=False))
            phase = Phase(o["kind"], o["w"], o["reps"], now - o["t0"], claimed, o["checks"], dict(o["digests"]), True,
                          tuple(sorted(o["kept"])), calls)
            with self._lock:
                self._phases.append(phase)
            self._open = None
            self._let_go()
            if phase.kind == "time":
                # The phase is over: naming the checks now tells the child nothing it could still use
                # (its digests are committed), and it saves their outputs only, not the decoys'.
                self._send({"save": list(phase.checks)})
        elif key == "op":  # any time: an operator a verified call dispatched (runner/harness.py _Ops)
            if not isinstance(value, str) or not OP_NAME.fullmatch(value):
                raise ValueError(f"malformed operator name {str(value)[:80]!r}")
            if len(self.ops) < _MAX_OPS:
                self.ops.add(value)
        else:
            raise ValueError(f"unknown message {key!r}")

    def _decoys(self, reps: int, checks: Sequence[int]) -> set[int]:
        """Calls kept besides the checks, each other call with the same chance: as many as the checks
        on average, their number and places drawn here. A candidate counting the parent's 'keep'
        answers can then never tell that the last check is behind it (a kept call may be a decoy)."""
        rest = reps - len(checks)
        if not checks or rest <= 0:
            return set()
        q = min(1.0, len(checks) / rest)
        taken = set(checks)
        return {i for i in range(reps) if i not in taken and self._dice.random() < q}


def _rep_bounds(device: str, t: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """The calls a phase may announce, from the request's timing settings (runner/harness.py
    ``_time``): a child that announces fewer gets fewer checks, so it may not."""
    sets = max(1, int(t["rotate"]))
    cal = max(4 * sets, 8)
    if device == "cuda":
        return {"cal": (cal, cal), "time": (max(sets, int(t["reps"])), max(sets, int(t["reps"]), int(t["reps_max"])))}
    cpu = max(sets, int(t["reps_cpu"]))
    return {"cal": (cal, cal), "time": (cpu, cpu)}


def digest_of(values: Sequence[Any], device: str) -> tuple[int, ...]:
    """The parent's digest of saved outputs: what the harness commits for an evaluation on ``device``
    (runner/harness.py ``_Commits``), on the device where the parent holds them: sums of bit patterns,
    then per tensor a hash that binds its bytes (BLAKE2b on the CPU, BLAKE3 on the GPU,
    runner/blake3.py): a sum alone can be met by other bytes within the tolerance."""
    from .harness import digest_host

    return digest_host(values, device)
