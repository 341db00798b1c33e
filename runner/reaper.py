"""Nothing a command starts outlives it (issue 22): the fork server, candidate children and what
they leave behind (daemons after a double fork or ``setsid`` included), ncu and its standby, energy
arms, pool workers, and the temporary folders that hold reference outputs.

While a command runs (``watch``) this process is a child subreaper (``PR_SET_CHILD_SUBREAPER``, no
privilege needed): a process of its tree whose parent dies is re-parented here instead of to init,
so the whole tree stays findable by parent links in /proc, whatever session or process group it put
itself in. Every temporary folder of the command lives in one folder of its own (``TMPDIR`` and
``tempfile.tempdir`` point there), removed at the end. On SIGINT, SIGTERM or SIGHUP the handler
first kills the tree and removes that folder, then raises ``Interrupted`` (a KeyboardInterrupt), so
that the unwinding that follows never waits on a hanging child. Killing before unwinding matters on
GitHub Actions, whose cancellation sends SIGINT, then SIGTERM 7.5 s later, then kills the process
tree 2.5 s after that (docs.github.com, "Workflow cancellation reference").

Exit codes follow the shells' convention for a command ended by signal N: 128 + N (130 for SIGINT,
143 for SIGTERM, 129 for SIGHUP), so ``$?`` reads the same as if the signal had killed it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from . import procstat, scratch

PR_SET_CHILD_SUBREAPER = 36
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_STOPPING = threading.Event()
_LOCK = threading.RLock()
"""Held while a child is being started and while the tree is being killed: no child starts
between the last look at the tree and the end of the kill."""


class Interrupted(KeyboardInterrupt):
    """A signal stopped the command; its processes are already gone."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class _Watch:
    """What ``watch`` changed, to undo on its way out."""

    folder: str
    """The command's temporary folder."""
    spared: frozenset[int]
    """Children that existed before the command (an in-process caller's own): never killed."""


_CURRENT: list[_Watch] = []
_SIGNAL: list[int | None] = [None]
"""The signal that stopped the last watched command (None: none did); kept after ``watch`` ends."""


def interrupted_by() -> int | None:
    """The signal that stopped the current (or last) watched command, if one did."""
    return _SIGNAL[0]


def stopping() -> bool:
    """True once a signal asked the command to stop: start no child, report no result."""
    return _STOPPING.is_set()


def check() -> None:
    """Raises Interrupted once the command is stopping: a child killed by the stop is no result
    (recorded, it would be resumed as the candidate's own crash)."""
    if _STOPPING.is_set():
        raise Interrupted(_SIGNAL[0] or signal.SIGINT)


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """Around the start of a child process: raises Interrupted once the command is stopping, and
    holds off the kill until the child exists (then it is killed with the rest)."""
    with _LOCK:
        check()
        yield


def exit_code(e: BaseException) -> int:
    """128 + the signal's number: what a shell reports for a command that signal ended."""
    return 128 + int(getattr(e, "signum", signal.SIGINT))


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state) of every process this one can see."""
    out: dict[int, tuple[int, str]] = {}
    for pid, fields in procstat.stats():
        with contextlib.suppress(ValueError, IndexError):
            out[pid] = (int(fields[1]), fields[0])
    return out


def descendants(root: int, spared: frozenset[int] = frozenset()) -> dict[int, tuple[int, str]]:
    """Every process below ``root`` (but not below a ``spared`` child of it): pid -> (parent, state)."""
    table = _table()
    below: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        below.setdefault(ppid, []).append(pid)
    found: dict[int, tuple[int, str]] = {}
    todo = [p for p in below.get(root, []) if p not in spared]
    while todo:
        pid = todo.pop()
        if pid in found:
            continue
        found[pid] = table[pid]
        todo += below.get(pid, [])
    return found


def kill_tree(spared: frozenset[int] = frozenset(), wait_s: float = 5.0) -> int:
    """SIGKILL every process below this one, again and again until none is left (a process killed
    here re-parents its children to this subreaper), and reap the ones that were this process's own;
    the number of processes still alive after ``wait_s`` (0 normally)."""
    me = os.getpid()
    end = time.monotonic() + wait_s
    with _LOCK:
        while True:
            tree = descendants(me, spared)
            alive = {pid for pid, (_, state) in tree.items() if state != "Z"}
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            for pid, (ppid, _) in tree.items():
                if ppid == me:
                    with contextlib.suppress(ChildProcessError, OSError):
                        os.waitpid(pid, os.WNOHANG)
            if not alive or time.monotonic() > end:
                return len(alive)
            time.sleep(0.005)


def _remove(folder: str) -> None:
    scratch.remove(folder)


def stop(signum: int = signal.SIGINT) -> None:
    """Stop the command now: no child starts from here on, every process it started is killed and
    its temporary folder removed. Safe to call more than once."""
    with _LOCK:
        _SIGNAL[0] = _SIGNAL[0] or signum
        _STOPPING.set()
        for w in _CURRENT:
            kill_tree(w.spared)
            _remove(w.folder)


def _on_signal(signum: int, _frame: object) -> None:
    for s in SIGNALS:  # a second signal must not cut the cleanup short
        with contextlib.suppress(ValueError, OSError):
            signal.signal(s, signal.SIG_IGN)
    stop(signum)
    raise Interrupted(signum)


def _subreaper(on: bool) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


@contextlib.contextmanager
def watch() -> Iterator[str]:
    """Run a command so that nothing it starts outlives it: yields its temporary folder. On the way
    out (normally, by an exception or by a signal), every process it started is killed and the
    folder removed; handlers, subreaper, TMPDIR and the stopping flag are as they were before (an
    in-process caller such as a test goes on unaffected)."""
    me = os.getpid()
    spared = frozenset(descendants(me))
    folder = tempfile.mkdtemp(prefix="kernelpro-run-")
    w = _Watch(folder, spared)
    _SIGNAL[0] = None
    was_subreaper = _subreaper(True)
    old_tempdir, old_env = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = folder
    os.environ["TMPDIR"] = folder  # pool workers and tools started by this command put theirs here too
    handlers: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            current = signal.getsignal(s)
            # A signal the caller ignores stays ignored (a background job's SIGINT, nohup's SIGHUP).
            if current in (signal.SIG_DFL, signal.default_int_handler):
                handlers[s] = current
                signal.signal(s, _on_signal)
    hook = threading.excepthook

    def quiet(a: threading.ExceptHookArgs) -> None:  # a thread whose child the stop killed ends without a trace
        if not isinstance(a.exc_value, Interrupted):
            hook(a)

    threading.excepthook = quiet
    _CURRENT.append(w)
    try:
        yield folder
    finally:
        threading.excepthook = hook
        for sig, h in handlers.items():
            signal.signal(sig, h)
        with _LOCK:
            kill_tree(spared)  # stragglers started while the stack unwound, and a normal end's leftovers
            _CURRENT.remove(w)
        _remove(folder)
        tempfile.tempdir = old_tempdir
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env
        if was_subreaper:
            _subreaper(False)
        _STOPPING.clear()
