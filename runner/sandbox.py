"""Run untrusted candidate code in a fresh process: scrubbed environment, own directory, no network,
a memory limit and a time limit.

Generated code is hostile. It gets no tokens or keys (the environment is rebuilt from an allowlist,
not filtered from a denylist, and checked once more against names that look like secrets), a private
temporary directory as cwd and HOME, namespaces of its own where the OS allows them (``unshare``:
a user namespace, so the runner's own rights stay outside; a network namespace with only a loopback
that is down; a pid namespace with its own /proc, so no other process, the parent included, can be
seen), and a wall-clock limit after which its whole process group is killed. The memory limit is applied by the
harness itself (runner/harness.py), after CUDA is up. A crash or a GPU fault ends only that process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import mmap
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import confinement, procstat, reaper, scratch
from .environment import SandboxError, child_variables, scrubbed_env

__all__ = ["SandboxError", "child_variables", "scrubbed_env"]  # where callers have always found them

NO_ISOLATION = "network isolation unavailable"


@dataclass(frozen=True)
class ChildResult:
    """What came back from one sandboxed run."""

    status: str
    """'OK', 'TIMEOUT' or 'CRASHED' (the process died without writing a result)."""
    result: Mapping[str, Any] | None
    """The harness's result document when status is OK."""
    log: str
    """Tail of the child's stdout/stderr."""
    seconds: float
    """Wall time of the child."""
    sandbox: Mapping[str, str] = field(default_factory=dict)
    """How the child was confined: network, and the command prefix that did it."""
    collected: Any = None
    """What ``collect`` returned (read from the child's directory before it was deleted)."""


_PROBE_CPU = "pass"
# A CUDA context inside the namespace, so a driver that refuses one is found before any candidate.
_PROBE_CUDA = ("import ctypes\nlib = ctypes.CDLL('libcuda.so.1')\nassert lib.cuInit(0) == 0, 'cuInit failed'\n"
               "n = ctypes.c_int()\nassert lib.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0\n")


# Most confined first. A user namespace (-r) drops whatever the runner's user could do outside it
# (read the parent's /proc/PID/environ, raise its limits); a pid namespace with its own /proc (-p
# --mount-proc) hides every other process; --kill-child takes the candidate down with unshare.
_CONFINED = ("--kill-child", "--mount-proc")
# -i: System V shared memory, semaphores and queues of its own, gone with it: a candidate left 1.5 GiB of
# segments in no process's memory (past the memory watchdog, until the host rebooted) and a message in
# them that the next candidate read (a red-team probe, session 27).
_VARIANTS_USER = (("-r", "-n", "-i", "-p", *_CONFINED), ("-r", "-n", "-i"))
_VARIANTS_ROOT = (("-n", "-i", "-p", *_CONFINED), ("-n", "-i"))


@functools.lru_cache(maxsize=8)
def network_isolation(device: str, unshare: str | None = "unshare", privileged: bool = False) -> tuple[tuple[str, ...], str]:
    """(command prefix, description): the first unshare variant under which a probe runs (and, for
    CUDA, initialises the driver); else no prefix and why not. ``privileged`` (a profiler that needs
    the runner's own rights to read GPU counters) tries the variants without a user namespace first."""
    path = shutil.which(unshare) if unshare else None
    if path is None:
        return (), f"{NO_ISOLATION}: no unshare (util-linux) on PATH"
    root = os.geteuid() == 0
    variants = (_VARIANTS_ROOT + _VARIANTS_USER if privileged else _VARIANTS_USER + _VARIANTS_ROOT) if root \
        else _VARIANTS_USER
    errors = []
    for flags in variants:
        prefix = (path, *flags)
        probe = [*prefix, sys.executable, "-c", _PROBE_CUDA if device == "cuda" else _PROBE_CPU]
        try:
            p = subprocess.run(probe, capture_output=True, text=True, timeout=120, env=scrubbed_env(),
                               stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            errors.append(f"unshare {' '.join(flags)}: {e}")
            continue
        if p.returncode == 0:
            return prefix, f"isolated (unshare {' '.join(flags)}: own network namespace)"
        errors.append(f"unshare {' '.join(flags)}: exit {p.returncode} {p.stderr.strip()[-200:]}")
    return (), f"{NO_ISOLATION}: " + "; ".join(errors)


@functools.lru_cache(maxsize=1)
def protect_parent() -> str:
    """Make this process non-dumpable before it starts any candidate: a process of the same user can
    then no longer read its memory or /proc/PID/environ (where the LLM key and tokens are), with or
    without namespaces. Its children are dumpable again after their exec, so nothing else changes."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE = 4
            return f"parent not protected: prctl failed (errno {ctypes.get_errno()})"
        return "parent not dumpable"
    except (OSError, AttributeError) as e:
        return f"parent not protected: {e}"


def run_child(request: Mapping[str, Any], *, timeout_s: float, device: str,
              cache_dir: Path | None = None, wrapper: Sequence[str] = (), isolate: bool = True,
              privileged: bool = False, memory_limit_mb: int = 0,
              collect: Callable[[Path, Mapping[str, Any], float], Any] | None = None,
              during: Callable[[Path], None] | None = None, variables: Mapping[str, str] | None = None,
              fork: bool = False, deadline: Callable[[], float] | None = None,
              writable: Sequence[Path] = (), timekeeper: Any = None) -> ChildResult:
    """``wrapper`` prefixes the command (a profiler such as ncu runs the harness under itself).
    ``collect(work_dir, result, seconds)`` reads what the child left in its directory, which is
    deleted when this returns; ``during(work_dir)`` is called again and again on a thread while the
    child runs (what it raises is its own business); ``variables`` are added to its environment.
    ``memory_limit_mb`` caps the resident memory of the child's whole process group, watched from
    here (the child's own RLIMIT_DATA is set by the harness). ``fork``: fork the child from this
    process's fork server (runner/forkserver.py) where it can be confined as unshare would; without
    a wrapper only, since a profiler must start the process it profiles. ``deadline``, asked again
    and again, replaces start + ``timeout_s`` as the time (``time.perf_counter``) the child is killed
    at: a standby's limit starts when its request is given (runner/standby.py). ``writable``: folders
    the child may write besides its own (a profiler's report); everything else it sees read-only
    (runner/confinement.py). Raises SandboxError where the confinement is unavailable and the
    operator did not opt in to run unconfined. ``timekeeper`` (runner/timekeeper.py): the child
    inherits its two pipe ends (named in KERNELPRO_CHANNEL) and it reads them while the child runs."""
    prefix, network = network_isolation(device, privileged=privileged) if isolate else ((), f"{NO_ISOLATION}: turned off")
    confined = confinement.required(pid_namespace="-p" in prefix)
    sandbox = {"network": network, "parent": protect_parent(), "confinement": confined.description}
    # The fork server confines a child exactly as the most confined user-namespace variant does.
    forkable = fork and not wrapper and (not prefix or tuple(prefix[1:]) == _VARIANTS_USER[0])
    with scratch.folder("kernelpro-cand-") as tmp:
        work = Path(tmp)
        (work / "request.json").write_text(json.dumps(request))
        env = scrubbed_env({**child_variables(work, device, cache_dir), **(variables or {})})
        cmd = [*wrapper, sys.executable, "-m", "kernelpro.runner.harness",
               str(work / "request.json"), str(work / "result.json")]
        rules = confinement.policy([work, cache_dir, *writable], tools=wrapper[:1]) if confined.landlock else None
        if rules and wrapper:  # the profiler's layer lets the harness write its threads' /proc files; the harness's own forbids the rest
            inner = confinement.command(cmd[len(wrapper):], rules, supervised=False)
            cmd = confinement.command([*wrapper, *inner], dataclasses.replace(rules, proc=True))
        elif rules:
            cmd = confinement.command(cmd, rules)
        cmd = [*prefix, *cmd]
        reaper.check()
        server, spawned = _server_for(request, work, bool(prefix)) if forkable else (None, "")
        t0, wall0 = time.perf_counter(), time.time()
        proc: Any = None
        if server is not None:
            with contextlib.suppress(OSError):  # the server died: a fresh interpreter, as without it
                proc = server.spawn(cmd[-2:], work, _channel(env, timekeeper, forked=True), isolate=bool(prefix),
                                    policy=rules.to_json() if rules else None,
                                    fds=timekeeper.child_fds if timekeeper else ())
                sandbox["spawn"] = spawned
        elif spawned:
            sandbox["spawn"] = spawned
        if proc is None:
            with reaper.starting():  # none starts once the command is stopping (runner/reaper.py)
                proc = subprocess.Popen(
                    cmd, cwd=work, env=_channel(env, timekeeper, forked=False), stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                    pass_fds=timekeeper.child_fds if timekeeper else (),
                )
        if timekeeper is not None:
            timekeeper.started()
        # Without a pid namespace a supervisor stands between us and the candidate: SIGTERM lets it
        # kill the candidate's whole tree (runner/confinement.py) before it goes.
        proc.kernelpro_supervised = rules is not None and "-p" not in prefix
        stop = threading.Event()
        follower = threading.Thread(target=_follow, args=(during, work, stop), daemon=True) if during else None
        if follower is not None:
            follower.start()
        try:
            ended = _watch(proc, deadline or (lambda: t0 + timeout_s), memory_limit_mb)
        finally:
            exited = time.time()  # the child's exit, before the judge's tail: its teardown ends here
            stop.set()
            if follower is not None:
                follower.join()
        reaper.check()  # killed by a stop, not by its own fault: no result, never journaled
        seconds, wall1 = time.perf_counter() - t0, time.time()
        log = ended.log
        if ended.reason == "timeout":
            return ChildResult("TIMEOUT", None, f"killed after {timeout_s:.0f} s\n{log}", seconds, sandbox)
        if ended.reason == "memory":
            return ChildResult("CRASHED", None, f"MEMORY_LIMIT: killed: its processes (with every one descended "
                               f"from it) held {ended.rss_mb:.0f} MiB of host memory, "
                               f"above the limit of {memory_limit_mb} MiB\n{log}", seconds, sandbox)
        result_file = work / "result.json"
        if proc.returncode != 0 or not result_file.exists():
            return ChildResult("CRASHED", None, f"exit code {proc.returncode}\n{log}", seconds, sandbox)
        try:
            doc = json.loads(read_capped(result_file, _RESULT_CAP))
        except (OSError, ValueError, RecursionError) as e:  # JSON and UTF-8 errors are ValueErrors
            return ChildResult("CRASHED", None, f"unreadable result ({e})\n{log}", seconds, sandbox)
        if not isinstance(doc, dict):
            return ChildResult("CRASHED", None, f"malformed result (not an object)\n{log}", seconds, sandbox)
        _split_wall(doc, wall0, exited, wall1)
        collected = collect(work, doc, seconds) if collect is not None else None
        return ChildResult("OK", doc, log, seconds, sandbox, collected)


_RESULT_CAP = 256 << 20


def read_capped(path: Path, cap: int) -> bytearray:
    """A file a child wrote, read whole into this process's memory: never through a symlink, never
    a FIFO or device (opened non-blocking, then it must be a regular file), at most ``cap`` bytes.
    Nothing the child does to the file afterwards (truncating it, say) can reach this process, as it
    could through a memory map (SIGBUS). Raises OSError (ValueError included) on each refusal."""
    view = _read_whole(path, cap, bytearray)
    # The bytearray itself, unless the file shrank while it was read (then a copy of what was there).
    return view.obj if isinstance(view.obj, bytearray) and len(view) == len(view.obj) else bytearray(view)


def read_capped_pages(path: Path, cap: int) -> memoryview:
    """:func:`read_capped` for outputs of hundreds of megabytes, which tensors then view
    (runner/tensorfile.py): read straight into fresh anonymous pages of this process, not a bytearray,
    which Python zero-fills before the read: that fill was three quarters of reading a 268 MB file
    (0.136 of 0.18 s here, session 22). The pages are this process's own memory, filled by a copy:
    the file's later fate cannot reach them, as with :func:`read_capped`."""
    return _read_whole(path, cap, _fresh_pages)


def _fresh_pages(size: int) -> memoryview:
    # The kernel hands out zeroed pages on first touch, which the read's copy is: no second pass.
    # Private (a shared anonymous map is shmem, slower to fault) and in huge pages where the kernel
    # allows them on request (THP "madvise", the common default), as numpy does for large arrays:
    # 268 MB read in 0.04 s, against 0.137 s in 4 kB pages and 0.184 s into a bytearray (2 cores here).
    if not size:
        return memoryview(bytearray())
    pages = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        with contextlib.suppress(OSError):  # THP off: 4 kB pages, still no zero-fill pass
            pages.madvise(mmap.MADV_HUGEPAGE)
    return memoryview(pages)


def _read_whole(path: Path, cap: int, alloc: Callable[[int], Any]) -> memoryview:
    """The file's bytes in a buffer of ``alloc(size)``, truncated or grown as the file was meanwhile."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(f"{path.name} is not a regular file")
        if st.st_size > cap:
            raise OSError(f"{path.name} holds {st.st_size} bytes, more than the {cap} its contents can need")
        view = memoryview(alloc(st.st_size))
        got = 0
        while got < len(view):
            n = os.readv(fd, [view[got : got + (1 << 26)]])
            if not n:
                break
            got += n
        if got < len(view):  # truncated while it was read: what was there
            return view[:got]
        grown = bytearray()
        while True:  # grown since: at most the cap in all
            chunk = os.read(fd, min(1 << 24, cap + 1 - len(view) - len(grown)))
            if not chunk:
                return memoryview(bytearray(view) + grown) if grown else view
            grown += chunk
            if len(view) + len(grown) > cap:
                raise OSError(f"{path.name} grew past {cap} bytes while it was read")
    finally:
        os.close(fd)


def _channel(env: dict[str, str], timekeeper: Any, forked: bool) -> dict[str, str]:
    """The child's environment, naming its ends of the timing channel: the fork server puts them at
    3 and 4 (runner/forkserver.py); a fresh process inherits the parent's numbers."""
    if timekeeper is None:
        return env
    r, w = (3, 4) if forked else timekeeper.child_fds
    return {**env, "KERNELPRO_CHANNEL": f"{r},{w}"}


def _fork_server(work: Path, isolate: bool) -> Any:
    from .forkserver import server

    return server(scrubbed_env({"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}), work, isolate)


def _server_for(request: Mapping[str, Any], work: Path, isolate: bool) -> tuple[Any, str]:
    """The server a child forks from (the target's warm one, else the plain one; None: a fresh
    interpreter) and how the report says the child started ('' where nothing needs saying)."""
    server, spawned = _warm_server(request, work, isolate)
    if server is not None:
        return server, spawned
    not_warm, server = spawned, _fork_server(work, isolate)
    if not not_warm:  # no warm server runs
        return server, "forked from the fork server" if server is not None else ""
    # One runs but could not serve this child: the report says why.
    return server, f"forked from the fork server (not the warm one: {not_warm})" if server is not None \
        else f"fresh interpreter: {not_warm}"


def _warm_server(request: Mapping[str, Any], work: Path, isolate: bool) -> tuple[Any, str]:
    """The target's warm server (runner/forkserver.py) for a candidate's child, and how the report
    says it started; never for the reference (computed from the plain server, or before a warm one
    runs), nor for a candidate whose own packages the warm server imported (runner/preload.py)."""
    from .forkserver import warm_running, warm_server
    from .preload import tree_names
    from .trace import Solution, SourceFile

    if not warm_running() or request.get("mode") == "reference" or not isinstance(request.get("solution"), dict):
        return None, ""
    try:
        solution = Solution.from_json(request["solution"])
        context = [SourceFile(str(f["path"]), str(f["content"])) for f in request.get("context") or ()]
    except Exception:  # noqa: BLE001 - a request this cannot read is served as without a warm server
        return None, ""
    return warm_server(tree_names(solution, context), work, isolate, cuda=str(request.get("device", "")).startswith("cuda"))


def _follow(during: Callable[[Path], None], work: Path, stop: threading.Event) -> None:
    while not stop.wait(0.05):
        try:
            during(work)
        except Exception:  # noqa: BLE001 - only a head start: what it missed is done after the exit
            return


def _split_wall(doc: dict[str, Any], popen: float, exited: float, joined: float) -> None:
    """Add to the child's own phases what only the parent sees: 'launch' (process start, sandbox and
    the interpreter up to the harness's first line), 'teardown' (from the result written to the
    process gone: CUDA context destruction) and 'judge_tail' (from the exit to the end of the judging
    that overlapped the child: once the timing phase is over the follower judges every file left in
    one go, which session 18's journals showed inside 'teardown' when the exit was read after it).
    Diagnostics only; nothing is decided on them."""
    clock, phases = doc.get("clock"), doc.get("phases")
    if not (isinstance(clock, dict) and isinstance(phases, dict)):
        return
    started, ended = finite(clock.get("started")), finite(clock.get("ended"))
    if started is not None and ended is not None:
        phases["launch"] = max(0.0, started - popen)
        phases["teardown"] = max(0.0, exited - ended)
    phases["judge_tail"] = max(0.0, joined - exited)


def finite(value: Any) -> float | None:
    """A number a child wrote (a clock reading, a duration): a finite float, else None. A 401-digit
    int raised OverflowError in the parent (runner/evaluator.py ``seconds`` reads through this too)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        v = float(value)
    except OverflowError:
        return None
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class _Ended:
    """How a watched child ended."""

    reason: str
    """'exit', 'timeout' or 'memory'."""
    log: str
    """The last 4000 characters it printed."""
    rss_mb: float = 0.0
    """Resident memory of its group when it was killed for memory."""


def _watch(proc: subprocess.Popen[bytes], deadline: Callable[[], float], memory_limit_mb: int) -> _Ended:
    """Wait for the child, killing its group at the deadline or above the memory limit. Its output
    is drained on a thread and only the tail kept: a candidate that prints gigabytes costs nothing."""
    tail = bytearray()

    def drain() -> None:
        assert proc.stdout is not None
        for chunk in iter(lambda: proc.stdout.read(65536), b""):  # type: ignore[union-attr]
            tail.extend(chunk)
            del tail[:-16384]

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    reason, rss = "exit", 0.0
    known: dict[int, str] = {}  # every process seen descended from the child: pid -> its start time
    while proc.poll() is None:
        reaper.check()  # the stop killed it; a forked child's exit may never be reported by the killed server
        if time.perf_counter() > deadline():
            reason = "timeout"
        elif memory_limit_mb > 0 and (rss := _tree_rss_mb(proc.pid, known)) > memory_limit_mb:
            reason = "memory"
        if reason != "exit":
            _stop(proc)
            break
        # Woken by the exit itself, not at the next 50 ms tick: each evaluation's "teardown" held
        # 0-50 ms of this loop's sleep (issue 22).
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)
    proc.wait()
    # Stray threads or grandchildren of the candidate die with it: nothing of it outlives the call,
    # a helper that left the group (setsid) included, where the watchdog saw it.
    _kill_group(proc)
    _kill_known(known)
    reader.join(timeout=5)
    return _Ended(reason, tail.decode(errors="replace")[-4000:], rss)


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _tree_rss_mb(root: int, known: dict[int, str] | None = None) -> float:
    """Resident memory (shared pages included: the kernel's rss counts anonymous, file and shmem
    pages, so a MAP_SHARED mapping, which RLIMIT_DATA does not count, is in it) of every process
    descended from ``root`` through its parent pids, whatever its process group or session (a helper
    that called setsid is still a child), plus those in ``root``'s group. ``known`` (pid -> start
    time) keeps every descendant seen in an earlier sample: one orphaned since (reparented outside
    the tree) is still counted while it lives. One pass over /proc."""
    known = {} if known is None else known
    rows: dict[int, tuple[int, int, str, int]] = {}  # pid -> (ppid, pgid, start time, rss pages)
    for pid, fields in procstat.stats():
        with contextlib.suppress(ValueError, IndexError):
            rows[pid] = (int(fields[1]), int(fields[2]), fields[19], int(fields[21]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _, _) in rows.items():
        children.setdefault(ppid, []).append(pid)
    mine = {pid for pid, row in rows.items() if row[1] == root or pid == root}
    mine |= {pid for pid, start in known.items() if pid in rows and rows[pid][2] == start}
    todo = list(mine)
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in mine:
                mine.add(c)
                todo.append(c)
    for pid in mine:
        known[pid] = rows[pid][2]
    return sum(rows[pid][3] for pid in mine) * _PAGE / 2**20


def _kill_known(known: Mapping[int, str]) -> None:
    """SIGKILL each process the watchdog saw descended from the child, if it is still that process
    (same start time): one that left the child's group is not reached by killing the group."""
    if not known:
        return
    alive = {pid: fields[19] for pid, fields in procstat.stats() if pid in known and len(fields) > 19}
    for pid, start in alive.items():
        if start == known[pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """A supervised child (runner/confinement.py) gets SIGTERM first: its supervisor then kills what
    the candidate left behind, daemons in sessions of their own included, and itself; then (and for
    any other child at once) SIGKILL to the whole group."""
    if getattr(proc, "kernelpro_supervised", False):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, signal.SIGTERM)
        end = time.perf_counter() + 2.0
        while proc.poll() is None and time.perf_counter() < end:
            time.sleep(0.01)
    _kill_group(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
