"""An ncu child started before it is needed, so that profiling a candidate costs only the candidate.

On the H200 profiling Liger's swiglu took 19 s, of which the ncu child spent 12 s importing
liger_kernel (it pulls in peft and torch._dynamo) and 4 s starting Python and torch
(benchmarks/results-h200-corpus_profile-session4.json). None of that depends on the candidate. A
standby is the ncu child of the next profile, started as soon as the previous one is done: it
imports the target's packages and then waits, launching nothing (so timing elsewhere is
undisturbed; a package whose import asks the driver about the GPU, as fla's does, initialises CUDA
and loads Triton's driver stub from the standby's cache, which the profiler therefore never
rewrites: runner/profiler.merge_cache), for the parent to hand it the candidate's request. The loop
then pays for CUDA, the candidate's own module and the profiled call only.

Inside, it is the same sandboxed child as any profile (runner/sandbox.py, harness ``mode:
standby``): the request arrives as ``go.json`` in its directory, the parent touches ``alive`` there
while it waits (a standby whose parent died gives up within ``heartbeat_s``), and once the request
is given its time limit counts from then. What it preloads may be the pull request's own package
(installed editable, say), so it is as untrusted as a candidate: the loop starts one only while no
reference child's outputs are on disk (runner/optimize.py: after the search's reference is in
memory, never with a multi-GPU pool, and none is left when the gate computes its own).
"""

from __future__ import annotations

import ast
import contextlib
import json
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from . import scratch
from .sandbox import ChildResult, run_child
from .trace import Solution


def imports_of(solution: Solution) -> tuple[str, ...]:
    """The absolute imports at the top of the solution's Python entry file, minus its own files'
    packages (those are the candidate's, written only when its request comes). Parsed, never run;
    a file that does not parse preloads nothing (its candidate fails to build on its own)."""
    entry = solution.spec.entry_point.split("::")[0]
    own = {PurePosixPath(f.path).parts[0].removesuffix(".py") for f in solution.sources}
    source = next((f.content for f in solution.sources if f.path == entry), None)
    if source is None or not entry.endswith(".py"):
        return ()
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ()
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return tuple(dict.fromkeys(n for n in names if n.split(".")[0] not in own))


class NcuStandby:
    """One standby ncu child. ``take`` hands it a request (once); ``close`` lets an unused one go."""

    def __init__(self, ncu: str, preload: Sequence[str], *, timeout_s: float, wait_s: float = 600.0,
                 heartbeat_s: float = 30.0, isolate: bool = True) -> None:
        """``ncu``: the ncu to run under; ``timeout_s`` limits the profile once its request is given,
        ``wait_s`` the wait for one."""
        from . import confinement
        from .evidence.ncu import raw_csv_wrapper

        self.dir = Path(tempfile.mkdtemp(prefix="kernelpro-standby-"))
        # Written by ncu's layer only (its log, read back by the profiler): the child may write its
        # cache below it, never the log (runner/confinement.tool_only).
        confinement.tool_only(self.dir)
        self.cache = self.dir / "triton-cache"
        """The child's TRITON_CACHE_DIR: fill it with the candidate's cubins before ``take``."""
        self.cache.mkdir()
        self.log = self.dir / "ncu.csv"
        self.preload = tuple(preload)
        self.isolate = isolate
        self.started = time.perf_counter()
        self._request: dict[str, Any] | None = None
        self._given: float | None = None
        self._result: ChildResult | None = None
        self._limits = (timeout_s, wait_s)
        wrapper = raw_csv_wrapper(ncu, str(self.log))
        request = {"mode": "standby", "preload": list(self.preload), "wait_s": wait_s, "heartbeat_s": heartbeat_s}
        self._thread = threading.Thread(target=self._run, args=(request, wrapper), daemon=True, name="ncu-standby")
        self._thread.start()

    def _run(self, request: dict[str, Any], wrapper: list[str]) -> None:
        # privileged: ncu reads GPU counters with the runner's own rights, which a user namespace drops.
        self._result = run_child(request, timeout_s=self._limits[0], device="cuda", cache_dir=self.cache,
                                 wrapper=wrapper, privileged=True, isolate=self.isolate, during=self._beat,
                                 deadline=self._deadline, writable=[self.dir])

    def _deadline(self) -> float:
        timeout_s, wait_s = self._limits
        return (self._given if self._given is not None else self.started + wait_s) + timeout_s

    def _beat(self, work: Path) -> None:
        # ``work`` is the child's own folder, which it may fill with links (to ~/.ssh, say): nothing
        # here opens a path of it through one, and what is written is made new (O_EXCL).
        fd = os.open(work / "alive", os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        try:
            os.utime(fd)
        finally:
            os.close(fd)
        if self._request is not None and not os.path.lexists(work / "go.json"):
            tmp = work / "go.tmp"
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(self._request))
            os.replace(tmp, work / "go.json")  # whole or absent: the child never reads half a request

    def take(self, request: dict[str, Any]) -> tuple[ChildResult, float] | None:
        """Run ``request`` in the standby; its result and the seconds since it was given. None when
        the standby was gone before it got the request (it gave up waiting, or could not start):
        run the request in a fresh child instead."""
        if self._request is not None:
            raise RuntimeError("a standby takes one request")
        self._given = time.perf_counter()
        self._request = request
        self._thread.join()
        seconds = time.perf_counter() - self._given
        r = self._result
        # A request that ran left the harness's environment in the result; a standby that gave up did not.
        if r is None or (r.status == "OK" and "environment" not in (r.result or {})):
            return None
        return r, seconds

    @property
    def up_s(self) -> float:
        """How long the standby had been up when its request was given (or until now)."""
        return (self._given or time.perf_counter()) - self.started

    def close(self) -> None:
        """An unused standby quits; the directory goes either way."""
        if self._request is None:
            self._request = {"mode": "quit"}
        self._thread.join(timeout=60)
        scratch.remove(self.dir)
