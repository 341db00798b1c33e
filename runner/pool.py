"""The GPU pool: one evaluation worker per visible GPU, and the per-run schedule that spreads a batch
of candidates across them.

A worker is a long-lived process started with ``CUDA_VISIBLE_DEVICES=<its GPU>``; the sandboxed
child each evaluation spawns inherits that variable (it is on the sandbox's allowlist), so a
candidate only ever sees one GPU. The pool is built once at the entry point and shared by every
target of a run; a ``Schedule`` is one optimize run's view of it (its evaluate function, its
journal).

Ordering: each candidate gets its journal index when it is queued, in the order the programmer
proposed it, and is written to the journal the moment it finishes, with that index. So the file may
hold lines out of order when candidates finish out of order, but the indices (and the order the
search consumes results in) do not depend on which GPU was faster. The baseline and the final gate
run on the first GPU ("home"), so every number the report compares comes from one device.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
from multiprocessing import get_context
from typing import Any

from . import confinement
from .candidate import Candidate
from .evaluator import EvalSettings, Outcome, evaluate
from .journal import Journal
from .target import Tolerance
from .trace import Definition, Workload

# evaluate(candidate) -> Outcome, run inside a worker; must be picklable (a module-level function or
# a functools.partial of one) because it crosses into the worker process.
EvalFn = Callable[[Candidate], Outcome]


class GpuSelectionError(ValueError):
    """KERNELPRO_GPUS names something that is not a GPU of this machine."""


def visible_gpus(setting: str, env: Mapping[str, str], device_count: Callable[[], int]) -> tuple[str, ...]:
    """The GPUs to spread evaluations over, as values for CUDA_VISIBLE_DEVICES.

    ``setting`` is KERNELPRO_GPUS: 'auto' (every GPU this process can see) or a comma-separated list
    of ids from the visible set (GPU indices or UUIDs, as CUDA_VISIBLE_DEVICES takes them).
    """
    inherited = [g.strip() for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    visible = inherited if "CUDA_VISIBLE_DEVICES" in env else [str(i) for i in range(device_count())]
    if setting.strip().lower() in ("", "auto"):
        return tuple(visible)
    chosen = [g.strip() for g in setting.split(",") if g.strip()]
    unknown = [g for g in chosen if g not in visible]
    if unknown or len(set(chosen)) != len(chosen):
        raise GpuSelectionError(
            f"KERNELPRO_GPUS={setting!r} names {', '.join(unknown) or 'a GPU twice'}, but the visible GPUs are "
            f"{', '.join(visible) or 'none'}; set it to 'auto' or to a comma-separated subset of those")
    return tuple(chosen)


def _pin(gpu: str, unconfined: bool = False) -> None:
    # Runs first in the worker process: everything it starts sees this one GPU only.
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    confinement.allow_unconfined(unconfined)


def process_worker(gpu: str) -> Executor:
    """One worker process pinned to ``gpu`` (spawned, not forked: CUDA state must not be inherited)."""
    # The operator's opt-in to run unconfined crosses into the worker, which starts the candidates.
    return ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"), initializer=_pin,
                               initargs=(gpu, confinement.unconfined_allowed()))


class Pool:
    """One worker per GPU. Built at the entry point; ``with Pool(...)`` shuts the workers down."""

    def __init__(self, gpus: Sequence[str], worker: Callable[[str], Executor] = process_worker):
        if not gpus:
            raise GpuSelectionError("a GPU pool needs at least one GPU; with none, evaluate in-process")
        self.gpus = tuple(gpus)
        self._worker = worker
        self._executors: list[Executor] = [worker(g) for g in self.gpus]
        self._lock = threading.Lock()

    @property
    def home(self) -> str:
        return self.gpus[0]

    def submit(self, slot: int, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        with self._lock:
            return self._executors[slot].submit(fn, *args)

    def restart(self, slot: int) -> None:
        """Replace a worker that died (its executor is broken for good)."""
        with self._lock:
            old = self._executors[slot]
            self._executors[slot] = self._worker(self.gpus[slot])
        old.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        for ex in self._executors:
            ex.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class TargetEval:
    """A picklable evaluate(candidate) for one target: what a worker needs to run the evaluator."""

    definition: Definition
    """The kernel's Definition."""
    workloads: tuple[Workload, ...]
    """Workloads every candidate runs on."""
    tolerance: Tolerance
    """Correctness tolerances."""
    settings: EvalSettings
    """Evaluator settings."""

    def __call__(self, cand: Candidate) -> Outcome:
        es = self.settings
        if es.cache_dir is not None:  # the candidate's own cache, as in the one-GPU path
            es = replace(es, cache_dir=cand.cache_dir(es.cache_dir))
        return evaluate(self.definition, cand.solution, self.workloads, self.tolerance, es)


class Schedule:
    """One optimize run on a pool: queue candidates, hand out each one's Outcome in proposal order."""

    def __init__(self, pool: Pool, fn: EvalFn, journal: Journal):
        self.pool = pool
        self.fn = fn
        self.journal = journal
        self.placement: dict[str, str] = {}
        """Candidate key -> the GPU it ran on."""
        # Re-entrant: a future that is already done runs its callback inside _dispatch.
        self._lock = threading.RLock()
        self._queue: deque[tuple[Candidate, int, EvalFn]] = deque()
        self._busy = [False] * len(pool.gpus)
        self._results: dict[str, Future[Outcome]] = {}
        self._held = 0

    def submit(self, cands: Sequence[Candidate], fn: EvalFn | None = None) -> None:
        """Queue a batch; candidates already journaled or queued are skipped. ``fn`` evaluates this
        batch instead of the schedule's own (the loop's settings of the moment: its timeline bar)."""
        with self._lock:
            for c in cands:
                if c.key in self._results or self.journal.get(c.key) is not None:
                    continue
                self._results[c.key] = Future()
                self._queue.append((c, self.journal.reserve(), fn or self.fn))
            self._dispatch()

    def result(self, cand: Candidate) -> Outcome:
        """The candidate's Outcome, queueing it first if nobody did; blocks until it is known."""
        hit = self.journal.get(cand.key)
        if hit is not None:
            return hit.outcome
        self.submit([cand])
        return self._results[cand.key].result()

    def drain(self) -> None:
        """Drop queued candidates nobody will consume; wait for the running ones (they are journaled)."""
        with self._lock:
            dropped = [c for c, _, _ in self._queue]
            self._queue.clear()
            running = [f for k, f in self._results.items() if not f.done() and all(k != c.key for c in dropped)]
            for c in dropped:
                self._results.pop(c.key).cancel()
        for f in running:
            f.exception()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the queue and wait for running candidates: for work that must have the GPUs to itself
        (profiling replays kernels under ncu; a candidate timed beside it would be slowed down)."""
        with self._lock:
            self._held += 1
            running = [f for f in self._results.values() if not f.done() and f not in self._queued_futures()]
        for f in running:
            f.exception()
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1
                self._dispatch()

    def _queued_futures(self) -> list[Future[Outcome]]:
        return [self._results[c.key] for c, _, _ in self._queue if c.key in self._results]

    def home(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` on the home GPU once nothing else of this run is in flight."""
        self.drain()
        return self.pool.submit(0, fn, *args).result()

    def _dispatch(self) -> None:
        # Called with the lock held: give each idle worker the oldest queued candidate.
        if self._held:
            return
        for slot, busy in enumerate(self._busy):
            if busy or not self._queue:
                continue
            cand, index, fn = self._queue.popleft()
            self._busy[slot] = True
            self.placement[cand.key] = self.pool.gpus[slot]
            try:
                fut = self.pool.submit(slot, fn, cand)
            except RuntimeError as e:  # the executor was already broken or shut down
                failed: Future[Outcome] = Future()
                failed.set_exception(e)
                fut = failed
            fut.add_done_callback(functools.partial(self._done, cand, index, slot))

    def _done(self, cand: Candidate, index: int, slot: int, fut: Future[Outcome]) -> None:
        err = fut.exception() if not fut.cancelled() else RuntimeError("cancelled")
        if err is None:
            outcome = fut.result()
            with self._lock:
                self.journal.append(cand, outcome, index=index)
        else:
            # The worker process itself died (not the candidate's sandbox child, whose failures come
            # back as statuses): a value for the search, not journaled, so a rerun evaluates it again.
            outcome = Outcome(cand.key, "RUNTIME_ERROR", (), log=(
                f"the evaluation worker on GPU {self.pool.gpus[slot]} failed ({type(err).__name__}: {err}); "
                "not journaled, so rerunning the same command evaluates this candidate again"))
            self.pool.restart(slot)
        with self._lock:
            self._busy[slot] = False
            res = self._results.get(cand.key)
            self._dispatch()
        if res is not None and not res.done():
            res.set_result(outcome)
