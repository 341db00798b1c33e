"""A fork server for sandboxed children: one process that has imported torch and the harness forks
each child, instead of a fresh interpreter paying Python and torch start-up again (3.4 s of a 4.9 s
evaluation on the H200).

The server never initialises CUDA (a forked CUDA context is unusable), so each child starts CUDA
itself, as a fresh process would. A child confines itself as ``unshare -r -n -i -p --kill-child
--mount-proc`` confines a fresh one: its own session, then user, network, pid and mount namespaces
(root in its user namespace maps to the runner's user), a fork so the harness is pid 1 of the new
pid namespace with its own /proc, and death with its parent. The server runs with the scrubbed
environment and no secrets; each child gets the variables of its request.

Protocol (one SOCK_SEQPACKET socket pair, JSON messages): the orchestrator sends
``{"id", "argv", "cwd", "env", "isolate"}`` with the write end of the child's output pipe attached
(SCM_RIGHTS); the server answers ``{"id", "pid"}`` (or ``{"id", "error"}``) and, when that child
exits, ``{"exit": pid, "code": returncode}`` (negative: killed by that signal, as subprocess says).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import itertools
import json
import os
import queue
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from . import confinement, reaper
from .environment import scrubbed_env

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x00020000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWIPC = 0x08000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 16384, 1 << 18
PR_SET_PDEATHSIG = 1
_FAILED_TO_CONFINE = 70
"""A child's exit code when it could not enter its namespaces (it never ran the harness)."""


# --------------------------------------------------------------------------- in the server


def _confine() -> None:
    """Enter new user, network, pid and mount namespaces, then fork: the caller becomes the waiting
    parent (it exits with the child's status) and returns only in the child, pid 1 of the new pid
    namespace, with /proc mounted for it (and empty /run and /dev/shm) and set to die with its parent."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNS) != 0:
        raise OSError(ctypes.get_errno(), "unshare failed")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
    Path("/proc/self/gid_map").write_text(f"0 {gid} 1")
    if libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "making / private failed")
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):  # die the same way, so the orchestrator sees what killed it
            signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
            os.kill(os.getpid(), os.WTERMSIG(status))
        os._exit(os.waitstatus_to_exitcode(status))
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        raise OSError(ctypes.get_errno(), "mounting /proc failed")
    confinement.empty_mounts()  # /run and /dev/shm empty here: no named socket or shared memory of the host


def _child(req: Mapping[str, Any], out_fd: int, channel: Sequence[int] = ()) -> None:
    """In the forked child: never returns. ``channel``: the parent's timing pipes (runner/timekeeper.py),
    kept as fds 3 and 4."""
    code = _FAILED_TO_CONFINE
    try:
        os.setsid()
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        high = [fcntl.fcntl(f, fcntl.F_DUPFD, 10) for f in channel]  # out of the way of 3 and 4
        for k, f in enumerate(high):
            os.dup2(f, 3 + k)
        os.closerange(3 + len(high), 1 << 16)  # the server's socket and pipes are not the candidate's
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        # What the server's imports derived from its own environment, derived again from the child's:
        # Python caches its temp folder on first use, and a preload that asked for it (peft and
        # torch.distributed do) left it at the server's /tmp, where no child may write (on the H200
        # every Liger candidate failed in Triton's first compile, session 16).
        tempfile.tempdir = None
        if req["isolate"]:
            _confine()
        elif req.get("policy"):
            confinement.supervise()  # no pid namespace: a subreaper outlives the harness and cleans up
        if req.get("policy"):
            confinement.lock_down(confinement.Policy.from_json(req["policy"]))
        code = 1
        if req.get("probe") == "cuda":
            _cuda_works()
            os._exit(0)
        if req.get("probe"):
            os._exit(0)
        from . import harness

        harness.restart_clock()
        sys.argv = [harness.__file__, *req["argv"]]  # as `python -m kernelpro.runner.harness ...` has it
        code = harness.main(list(req["argv"]))
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


class _Refuse:
    """First on sys.meta_path while a warm server preloads: a module whose file lies under a blocked
    folder (the pull request's checkout) is refused, so no code of the pull request runs outside a
    confined child, whatever an installed package or a ``.pth`` entry points at."""

    def __init__(self, blocked: Sequence[str]) -> None:
        self.blocked = tuple(os.path.realpath(b) + os.sep for b in blocked)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            places = [spec.origin or "", *(spec.submodule_search_locations or ())]
            if any((os.path.realpath(p) + os.sep).startswith(self.blocked) for p in places if p):
                raise ImportError(f"{fullname} is the pull request's own code ({places[0] or places[-1]}): "
                                  "it is imported only in a confined child")
            return None  # the finders after this one import it as usual
        return None


def _cuda_state() -> str | None:
    """Why a fork of this process could not use CUDA (a forked CUDA context is unusable), or None."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    with contextlib.suppress(Exception):
        if cuda is not None and cuda.is_initialized():
            return "torch initialised CUDA"
    return None


def _driver_loaded() -> str | None:
    """The CUDA driver library this process has mapped, if any. Mapped is not initialised: Triton 3.6's
    import maps it on the H200 (session 11). Whether a fork can then use CUDA is tried, not guessed
    (warm_server's CUDA probe)."""
    with contextlib.suppress(OSError), open("/proc/self/maps") as f:
        for line in f:
            lib = line.rsplit("/", 1)[-1].strip() if "/" in line else ""
            if lib.startswith("libcuda.so"):
                return lib
    return None


def _cuda_works() -> None:
    """In a probe child: one kernel and a copy back, or an exception (the probe's exit says which)."""
    import torch

    x = torch.ones(4, device="cuda")
    assert float((x + x).sum().item()) == 8.0


def _preload(modules: Sequence[str], blocked: Sequence[str]) -> dict[str, Any]:
    """In a warm server: import ``modules``; what was imported, what failed and why, every top-level
    module that the imports added, and why forking is unusable now (CUDA), if it is."""
    import importlib

    t0 = time.perf_counter()
    before = {m.partition(".")[0] for m in sys.modules}
    refuse = _Refuse(blocked)
    sys.meta_path.insert(0, refuse)
    # Not from the working directory ('' of `python -c`): the server's is '/', where a name the pull
    # request chose (``import tmp.x``) found any file another process had put in /tmp, and ran it here,
    # unconfined (a red-team probe, session 25). Installed packages only; each child gets '' back.
    here = [p for p in sys.path if p in ("", ".")]
    sys.path[:] = [p for p in sys.path if p not in ("", ".")]
    done, failed = [], {}
    try:
        for name in modules:
            try:
                importlib.import_module(name)
                done.append(name)
            except BaseException as e:  # noqa: BLE001 - SystemExit too: the child's own import reports it
                failed[name] = f"{type(e).__name__}: {e}"[:300]
    finally:
        sys.meta_path.remove(refuse)  # the children import as a fresh interpreter would
        sys.path[0:0] = here
    added = sorted({m.partition(".")[0] for m in sys.modules} - before)
    return {"preloaded": done, "failed": failed, "added": added, "cuda": _cuda_state(), "driver": _driver_loaded(),
            "seconds": time.perf_counter() - t0}


def _grow(modules: Sequence[str], blocked: Sequence[str], ready: Mapping[str, Any]) -> dict[str, Any]:
    """In a warm server, between two forks: import those of ``modules`` it has not, and its report
    ``ready`` with them added (``grown``: the modules imported so)."""
    got = _preload([m for m in modules if m not in sys.modules], blocked)
    return {**ready, "preloaded": [*ready.get("preloaded", ()), *got["preloaded"]],
            "grown": [*ready.get("grown", ()), *got["preloaded"]], "failed": {**ready.get("failed", {}), **got["failed"]},
            "added": sorted({*ready.get("added", ()), *got["added"]}), "cuda": got["cuda"], "driver": got["driver"],
            "seconds": float(ready.get("seconds", 0.0)) + got["seconds"]}


def serve(fd: int, warm: str = "") -> None:
    """The server's loop: fork a child per request, report each exit. ``warm``: a JSON object
    ``{"modules", "blocked"}`` for a target's warm server, which imports those modules first and
    reports what it did (``{"ready": ...}``) before the first request; later, ``{"preload": [...]}``
    (no file descriptors) imports more, between two forks, and reports again. Once an import has
    initialised CUDA it forks nothing more (a forked CUDA context is unusable): each request is
    answered with why, and the sandbox starts that child another way."""
    import torch  # noqa: F401 - imported once here: the start-up every child is spared

    from . import harness  # noqa: F401

    sock = socket.socket(fileno=fd)
    order: dict[str, Any] = json.loads(warm) if warm else {}
    ready: dict[str, Any] = {}
    if warm:
        ready = _preload(order["modules"], order["blocked"])
        sock.send(json.dumps({"ready": ready}).encode())
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ)
    sel.register(wake_r, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is sock:
                try:
                    msg, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
                except InterruptedError:
                    continue
                if not msg:
                    return  # the orchestrator is gone; its children are killed by it, not by us
                req = json.loads(msg)
                if "preload" in req and order and not fds:
                    ready = _grow(req["preload"], order["blocked"], ready)
                    sock.send(json.dumps({"ready": ready}).encode())
                    continue
                try:
                    if ready.get("cuda"):
                        raise RuntimeError(f"an import initialised CUDA in this server ({ready['cuda']})")
                    if len(fds) not in (1, 3):
                        raise ValueError("a request carries one output pipe, and maybe two channel ends")
                    pid = os.fork()
                    if pid == 0:
                        _child(req, fds[0], fds[1:])
                    reply: dict[str, Any] = {"id": req["id"], "pid": pid}
                except Exception as e:  # noqa: BLE001 - a failed spawn is an answer, not the server's end
                    reply = {"id": req.get("id"), "error": f"{type(e).__name__}: {e}"}
                for f in fds:
                    os.close(f)
                sock.send(json.dumps(reply).encode())
            else:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                while True:
                    try:
                        pid, status = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if pid == 0:
                        break
                    sock.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


# --------------------------------------------------------------------------- in the orchestrator


class Forked:
    """A forked child, as much of subprocess.Popen as the sandbox's watcher uses."""

    def __init__(self, pid: int, stdout: IO[bytes], server: ForkServer) -> None:
        self.pid, self.stdout, self._server = pid, stdout, server
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if end is not None and time.monotonic() > end:
                raise subprocess.TimeoutExpired(f"forked child {self.pid}", timeout or 0.0)
            time.sleep(0.002)  # the server answers an exit query in microseconds; a candidate's exit is waited for here
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """One server process per orchestrating process, started on first use."""

    def __init__(self, env: Mapping[str, str], warm: Mapping[str, Any] | None = None) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        order = f", {json.dumps(json.dumps(warm))}" if warm else ""
        self._proc = subprocess.Popen(
            [sys.executable, "-c", f"from kernelpro.runner.forkserver import serve; serve({theirs.fileno()}{order})"],
            # cwd "/": the server's own imports must not pick up a package of the directory it was
            # started from; each child changes into its work directory, where '' then points.
            pass_fds=(theirs.fileno(),), env=dict(env), stdin=subprocess.DEVNULL, start_new_session=True, cwd="/",
        )
        theirs.close()
        self._sock = ours
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._replies: dict[int, queue.Queue[dict[str, Any]]] = {}
        self._exits: dict[int, int] = {}
        self.probed: set[bool] = set()
        """The ``isolate`` values a probe child has shown to work with this server."""
        self.cuda: str | None = None
        """Once a CUDA probe ran: "" if a forked child used the GPU, else why it could not."""
        self.ready: dict[str, Any] | None = None
        """A warm server's report of its preload (``_preload``), once it has sent it."""
        self._ready = threading.Event()
        self._grown = threading.Event()
        self.growing = False
        """Whether a ``preload`` was sent and its report has not come yet: the server imports, and
        what it reported before (its CUDA state above all) may no longer hold."""
        self.waited_in_vain = False
        """Whether a child already waited WARM_WAIT_S for this warm server to be ready: no later one waits."""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                msg = self._sock.recv(1 << 20)
            except OSError:
                msg = b""
            if not msg:
                for waiting in list(self._replies.values()):
                    waiting.put({"error": "the fork server stopped"})
                self._ready.set()  # a server that died before its preload report: wait_ready answers now, not at its timeout
                self._grown.set()  # likewise wait_grown; ``growing`` stays set, so nothing forks from it
                return
            doc = json.loads(msg)
            if "ready" in doc:
                self.ready = doc["ready"]
                self._ready.set()
                if "grown" in doc["ready"]:
                    # What the growth imported may have initialised the driver without torch knowing:
                    # a GPU child is forked only after a probe child of the grown server used the GPU.
                    self.cuda, self.growing = None, False
                    self._grown.set()
            elif "exit" in doc:
                with self._lock:
                    self._exits[int(doc["exit"])] = int(doc["code"])
            elif (q := self._replies.get(doc.get("id"))) is not None:
                q.put(doc)

    def alive(self) -> bool:
        return self._proc.poll() is None

    def wait_ready(self, timeout_s: float) -> dict[str, Any] | None:
        """A warm server's preload report, waiting at most ``timeout_s`` for it (None: not yet, or the
        server stopped without one)."""
        self._ready.wait(timeout_s)
        return self.ready

    def preload(self, modules: Sequence[str]) -> None:
        """Ask a warm server to import ``modules`` too, between two forks; ``wait_grown`` waits for its
        report of it."""
        self._grown.clear()
        self.growing = True
        try:
            self._sock.send(json.dumps({"preload": list(modules)}).encode())
        except OSError:
            self.growing = False
            raise

    def wait_grown(self, timeout_s: float) -> dict[str, Any] | None:
        """The report that follows ``preload``, waiting at most ``timeout_s`` (None: not yet)."""
        return self.ready if self._grown.wait(timeout_s) else None

    def close(self) -> None:
        """Stop the server (its children are the sandbox's to stop); idempotent."""
        with contextlib.suppress(OSError):
            self._sock.close()
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                self._proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)

    def spawn(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str], isolate: bool,
              timeout_s: float = 60.0, probe: bool | str = False, policy: str | None = None,
              fds: Sequence[int] = ()) -> Forked:
        rid = next(self._ids)
        answer: queue.Queue[dict[str, Any]] = queue.Queue()
        self._replies[rid] = answer
        r, w = os.pipe()
        try:
            req = {"id": rid, "argv": list(argv), "cwd": str(cwd), "env": dict(env), "isolate": isolate, "probe": probe,
                   "policy": policy}
            socket.send_fds(self._sock, [json.dumps(req).encode()], [w, *fds])
        finally:
            os.close(w)
        try:
            doc = answer.get(timeout=timeout_s)
        except queue.Empty:
            doc = {"error": f"no answer from the fork server within {timeout_s:.0f} s"}
        finally:
            self._replies.pop(rid, None)
        if "pid" not in doc:
            os.close(r)
            raise OSError(f"fork server: {doc.get('error')}")
        return Forked(int(doc["pid"]), os.fdopen(r, "rb"), self)

    def exit_code(self, pid: int) -> int | None:
        with self._lock:
            return self._exits.pop(pid, None)

    def probe(self, cwd: Path, env: Mapping[str, str], isolate: bool, cuda: bool = False) -> str | None:
        """None if a child can be forked (and confined, with ``isolate``) here, and with ``cuda`` run
        a kernel on the GPU; else why not."""
        child = None
        try:
            child = self.spawn([], cwd, env, isolate, probe="cuda" if cuda else True)
            code = child.wait(timeout=60)
            said = child.stdout.read().decode(errors="replace")[-300:]
            child.stdout.close()
        except (OSError, subprocess.TimeoutExpired) as e:
            if child is not None:  # a probe that hangs (a CUDA call in a bad fork can) is not left behind
                with contextlib.suppress(OSError):
                    os.killpg(child.pid, signal.SIGKILL)
            return str(e)
        return None if code == 0 else f"exit {code}: {said.strip()}"


_SERVER: ForkServer | None = None
_SERVER_LOCK = threading.Lock()
_REFUSED: dict[bool, str] = {}


def server(env: Mapping[str, str], cwd: Path, isolate: bool) -> ForkServer | None:
    """This process's fork server (started again if it died), or None where a forked child cannot
    be confined as ``isolate`` asks (then the sandbox starts a fresh interpreter, as without it)."""
    global _SERVER
    with _SERVER_LOCK:
        if isolate in _REFUSED:
            return None
        if _SERVER is None or not _SERVER.alive():
            with reaper.starting():  # never a new server once the command is stopping (runner/reaper.py)
                _SERVER = ForkServer(env)
        if isolate not in _SERVER.probed:
            why = _SERVER.probe(cwd, env, isolate)
            if why is not None:
                _REFUSED[isolate] = why
                return None
            _SERVER.probed.add(isolate)
        return _SERVER


# --------------------------------------------------------------------------- a target's warm server

@dataclass(frozen=True)
class Warm:
    """The warm server of one target (issue 22): the fork server that has also imported the target's
    third-party modules."""

    label: str
    """The target's name, as the report gives it."""
    server: ForkServer
    """The server process."""
    modules: tuple[str, ...]
    """What it was asked to preload."""


_WARM: list[Warm] = []

WARM_WAIT_S = 60.0
"""How long a child waits for its target's warm server to finish a preload or a growth under way
before it starts without it (once per server): so the pull request's kernel, whose evaluation starts
while the server still imports, forks from it as every candidate after it does. On the H200 (session
26) Liger DyT's first evaluation, a fresh interpreter beside the preload, timed 0.113 ms where the
same kernel forked warm seconds later timed 0.045 ms, and every candidate of the search looked 2.5x
faster than it. A child that does not wait imports the same modules itself, which takes as long."""


def warm(label: str, modules: Sequence[str], env: Mapping[str, str], blocked: Sequence[str] = ()) -> None:
    """Start the warm server of target ``label`` (in place of any other), which preloads ``modules``
    with ``env`` (the scrubbed one) and refuses to import anything under ``blocked``."""
    cool()
    if not modules:
        return
    with _SERVER_LOCK, reaper.starting():
        _WARM.append(Warm(label, ForkServer(env, {"modules": list(modules), "blocked": list(blocked)}), tuple(modules)))


def grow(modules: Sequence[str]) -> bool:
    """Have the running warm server import ``modules`` too (runner/preload.py ``more``); False if none runs."""
    with _SERVER_LOCK:
        w = _WARM[-1] if _WARM else None
        if w is None or not w.server.alive():
            return False
        with contextlib.suppress(OSError):
            w.server.preload(modules)
            return True
    return False


def cool() -> None:
    """Stop the warm server, if one runs: the final gate's children start from the plain server."""
    with _SERVER_LOCK:
        while _WARM:
            _WARM.pop().server.close()


def warm_running() -> bool:
    """Whether a target's warm server was started and not stopped yet."""
    return bool(_WARM)


def warm_server(tree: Collection[str], cwd: Path, isolate: bool,
                cuda: bool = False) -> tuple[ForkServer | None, str]:
    """The warm server for a child whose candidate defines the top-level names ``tree`` (and runs on
    the GPU, with ``cuda``), and how the report says the child was started; (None, why not) where one
    runs but cannot serve this child, (None, "") where none runs."""
    w = _WARM[-1] if _WARM else None
    if w is None:
        return None, ""
    waited = _settle(w.server)
    ready = w.server.ready
    if ready is None:
        return None, f"the warm server of target {w.label} had not finished its preload in {WARM_WAIT_S:.0f} s"
    if ready.get("cuda"):
        return None, (f"preloading {', '.join(ready['preloaded'])} initialised CUDA ({ready['cuda']}), and a "
                      "forked CUDA context is unusable")
    if not w.server.alive():
        return None, f"the warm server of target {w.label} stopped"
    if w.server.growing:
        # A child forked now would come after imports whose effect on CUDA nobody has seen yet.
        return None, (f"the warm server of target {w.label} was still importing what the pull request's "
                      "kernel's build imported")
    stale = sorted(set(tree) & set(ready.get("added", ())))
    if stale:
        return None, (f"the warm server of target {w.label} has imported {', '.join(stale)}, which this "
                      "candidate defines: its own copy is imported in a fresh one")
    with _SERVER_LOCK:
        if isolate not in w.server.probed:
            why = w.server.probe(cwd, {}, isolate)
            if why is not None:
                return None, f"a child of the warm server of target {w.label} could not be confined: {why}"
            w.server.probed.add(isolate)
        if cuda and ready.get("driver") and w.server.cuda is None:
            # The preload mapped the driver without initialising it: a fork can then use the GPU,
            # unless something initialised it after all. One probe child runs a kernel and says which.
            why = w.server.probe(cwd, scrubbed_env(), isolate, cuda=True)
            w.server.cuda = "" if why is None else why
    if cuda and w.server.cuda:
        return None, (f"preloading {', '.join(ready['preloaded'])} loaded the CUDA driver ({ready['driver']}) "
                      f"and a child forked after it could not use the GPU: {w.server.cuda}")
    grown = ready.get("grown") or []
    named = [m for m in ready["preloaded"] if m not in set(grown)]
    besides = f"; and {len(grown)} more modules the pull request's kernel's build imported" if grown else ""
    after = f", after waiting {waited:.1f} s for it" if waited >= 0.05 else ""
    return w.server, (f"forked from the warm server of target {w.label} "
                      f"(preloaded: {', '.join(named) or 'nothing'}{besides}{after})")


def _settle(server: ForkServer) -> float:
    """Wait for ``server``'s preload and any growth under way, WARM_WAIT_S at most, unless a child
    already waited for it in vain; the seconds waited."""
    if server.waited_in_vain or (server.ready is not None and not server.growing):
        return 0.0
    t0 = time.perf_counter()
    if server.wait_ready(WARM_WAIT_S) is None or (
            server.growing and server.wait_grown(max(0.0, t0 + WARM_WAIT_S - time.perf_counter())) is None):
        server.waited_in_vain = True
    return time.perf_counter() - t0
