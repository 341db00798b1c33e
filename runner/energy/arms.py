"""The arms' processes: each arm runs its candidate in a sandboxed child of its own (``ChildRunner``),
built through the harness's public arm API; only the arm being measured is awake."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import scratch

_CHILD = """
import json, os, sys
proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)  # the candidate's prints go to stderr, never into the protocol
from kernelpro.runner.energy.arms import child_main
child_main(json.loads(open(sys.argv[1]).read()), sys.stdin, proto)
"""


def child_main(req: Mapping[str, Any], commands: Any, proto: Any) -> None:
    """In the arm's process: build, make inputs once (rotating sets), warm up, then run on command."""
    from pathlib import Path as _Path

    import torch

    from .. import harness

    # The harness's public arm API: its call and check are bound before the candidate is imported.
    failure = harness.CandidateError
    device = req["device"]
    try:
        arm = harness.ArmCalls(req, _Path.cwd(), int(req.get("rotate", 3)))
        with torch.no_grad():
            for i in range(3):
                arm.call(i)
        if device == "cuda":
            torch.cuda.synchronize()
    except BaseException as e:  # the candidate's failure is a value for the parent
        proto.write(json.dumps({"error": f"{type(e).__name__}: {e}"[:2000]}) + "\n")
        return
    graph = _capture(arm) if device == "cuda" else None
    proto.write(json.dumps({"ready": True, "graph": graph is not None}) + "\n")
    i = 0
    for line in commands:
        cmd = json.loads(line)
        if "calls" not in cmd:
            return
        n = int(cmd["calls"])
        with torch.no_grad():
            if graph is not None and cmd.get("graph"):
                g, per = graph
                for _ in range(n // per):
                    g.replay()
                n %= per
            for _ in range(n):
                arm.call(i)
                i += 1
        if device == "cuda":
            torch.cuda.synchronize()
        try:  # the harness's own references and globals, as after every timed call
            arm.check()
        except failure as e:
            proto.write(json.dumps({"error": e.log[:2000]}) + "\n")
            return
        proto.write(json.dumps({"done": cmd["calls"]}) + "\n")


GRAPH_ROUNDS = 4
"""Rounds over the input sets captured in one CUDA graph of an energy arm."""


def _until_stopped(pids: set[int], limit_s: float = 2.0) -> None:
    """Wait (``limit_s`` at most) until each of ``pids`` is stopped or gone: SIGSTOP arrives asynchronously."""
    import time

    from .. import procstat

    end = time.monotonic() + limit_s
    left = set(pids)
    while left and time.monotonic() < end:
        running = {pid for pid, fields in procstat.stats() if pid in left and fields[0] not in ("T", "t", "Z", "X")}
        left &= running
        if left:
            time.sleep(0.001)


def _capture(arm: Any) -> tuple[Any, int] | None:
    """The arm's calls captured as one CUDA graph (GRAPH_ROUNDS rounds over the input sets), or None
    when the candidate cannot be captured (it synchronises, copies to the host, ...).

    Replayed, the GPU runs the kernels back to back whatever the host's launch speed: on the H200 an
    eager loop of a 35 us kernel ran 28454 calls in one arm's 1 s window and 20771 in the other's (the
    host, not the GPU, set the pace), and the A/A ratio's interval missed 1 (1.0030 [1.0026, 1.0033])."""
    import torch

    try:
        with torch.no_grad():
            g, per = arm.graph(GRAPH_ROUNDS)
        g.replay()
        torch.cuda.synchronize()
        return g, per
    except Exception:  # noqa: BLE001 - any failure means: run this arm eagerly
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()
        return None


class ArmFailed(RuntimeError):
    """An arm's process could not start or died; the message has its output."""


class ChildRunner:
    """One sandboxed process per arm (scrubbed environment, own directory, own process group).

    Only the arm being run is awake: the others are stopped (SIGSTOP) so nothing of theirs reaches
    the GPU inside another arm's or an idle window.
    """

    def __init__(self, requests: Mapping[str, Mapping[str, Any]], timeout_s: float = 300.0) -> None:
        self._procs: dict[str, subprocess.Popen[str]] = {}
        self._graph: dict[str, bool] = {}
        self._stopped: dict[str, set[int]] = {}
        """Per arm, the processes of its tree the last SIGSTOP reached: the SIGCONT goes to each."""
        self._dirs: list[str] = []  # scratch folders, removed by scratch.remove
        self._work: dict[str, Path] = {}
        self._err: dict[str, int] = {}
        self.timeout_s = timeout_s
        self.sandbox: dict[str, str] = {}
        """How the arms were confined (as a sandboxed child's ``sandbox``): network and confinement."""
        try:
            for arm, req in requests.items():
                self._start(arm, req)
                msg = self._reply(arm, timeout_s)
                if not msg.get("ready"):
                    raise ArmFailed(f"{arm}: {msg.get('error', 'did not start')}")
                self._graph[arm] = msg.get("graph") is True
                self._signal(arm, signal.SIGSTOP)
        except BaseException:
            self.close()
            raise

    def _start(self, arm: str, req: Mapping[str, Any]) -> None:
        """An arm runs a candidate: confined like any other run of it (runner/sandbox.py's run_child),
        in namespaces of its own where the machine gives them (no network, no other process to
        see), under Landlock and the seccomp filter; refused (SandboxError) where that is not
        enough and the operator did not opt in."""
        from .. import confinement
        from ..environment import child_variables, scrubbed_env
        from ..sandbox import network_isolation

        device = str(req["device"])
        prefix, network = network_isolation(device)
        confined = confinement.required(pid_namespace="-p" in prefix)
        self.sandbox = {"network": network, "confinement": confined.description}
        tmp = tempfile.mkdtemp(prefix="kernelpro-energy-")
        self._dirs.append(tmp)
        work = Path(tmp)
        self._work[arm] = work
        (work / "request.json").write_text(json.dumps(req))
        # A Triton cache of this arm's own (one folder per solution, kept across workloads): what one
        # arm's candidate writes there is never loaded by another's process.
        cache = Path(req["cache_dir"]) / hashlib.sha256(arm.encode()).hexdigest()[:16] if req.get("cache_dir") else None
        extra = child_variables(work, device, cache)
        # stderr to a file: a chatty candidate must not fill a pipe and block. Read back through this
        # process's own descriptor, never by its name (the candidate may replace it with a link).
        err = os.open(work / "stderr.txt", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._err[arm] = err
        argv = [sys.executable, "-c", _CHILD, str(work / "request.json")]
        if confined.landlock:
            argv = confinement.command(argv, confinement.policy([work, cache]))
        self._procs[arm] = subprocess.Popen([*prefix, *argv], cwd=work, env=scrubbed_env(extra), stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)

    def _stderr(self, arm: str, chars: int = 1500) -> str:
        fd = self._err.get(arm)
        if fd is None:
            return ""
        try:
            size = os.fstat(fd).st_size
            return os.pread(fd, 4 * chars, max(0, size - 4 * chars)).decode(errors="replace")[-chars:]
        except OSError:
            return ""

    def _signal(self, arm: str, sig: int) -> None:
        """Stop or resume the arm's whole process tree. Its process group was not enough: a process the
        candidate put in a session of its own ran on while its arm stood still, in the other arm's
        windows and the idle ones, where the counter charges its work to them (a red-team probe, session 27)."""
        from .. import confinement

        pid = self._procs[arm].pid
        if sig in (signal.SIGSTOP, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)  # first: it forks nothing while its tree is stopped
        if sig == signal.SIGSTOP:
            self._stopped[arm] = confinement.stop_below(pid) | {pid}
            # Delivery is asynchronous: wait until the arm really stands still before the next window.
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WUNTRACED)
            _until_stopped(self._stopped[arm] - {pid})
            return
        # A kill reaches the whole tree as it is now (stopped first, so nothing forks meanwhile); a resume,
        # what the stop reached.
        tree = confinement.stop_below(pid) if sig == signal.SIGKILL else set()
        for p in sorted(self._stopped.pop(arm, set()) | tree | {pid}):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    def _reply(self, arm: str, timeout_s: float) -> dict[str, Any]:
        import selectors

        p = self._procs[arm]
        assert p.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout_s)
        sel.close()
        line = p.stdout.readline() if ready else ""
        if not line:
            self._signal(arm, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=10)
            err = self._stderr(arm)
            raise ArmFailed(f"{arm}: no answer within {timeout_s:.0f} s (exit code {p.poll()}) {err}".strip())
        try:
            return dict(json.loads(line))
        except (json.JSONDecodeError, TypeError, ValueError) as e:
            raise ArmFailed(f"{arm}: unreadable answer {line[:200]!r}") from e

    def run(self, arm: str, calls: int) -> None:
        p = self._procs[arm]
        assert p.stdin is not None
        self._signal(arm, signal.SIGCONT)
        try:
            p.stdin.write(json.dumps({"calls": calls, "graph": self.graphs}) + "\n")
            p.stdin.flush()
            msg = self._reply(arm, self.timeout_s)
        finally:
            self._signal(arm, signal.SIGSTOP)
        if msg.get("done") != calls:
            raise ArmFailed(f"{arm}: unexpected answer {msg!r}")

    @property
    def graphs(self) -> bool:
        """Every arm replays CUDA graphs; one that cannot makes them all run eagerly, alike."""
        return bool(self._graph) and all(self._graph.values())

    @property
    def notes(self) -> tuple[str, ...]:
        if self.graphs:
            return ("the arms ran their calls as CUDA graph replays (kernels back to back, whatever the host's pace)",)
        eager = sorted(a for a, g in self._graph.items() if not g)
        if eager and len(eager) < len(self._graph):
            return (f"the arms ran eagerly: {', '.join(eager)} could not be captured as a CUDA graph",)
        return ()

    def pids(self) -> tuple[int, ...]:
        return tuple(p.pid for p in self._procs.values())

    def close(self) -> None:
        for arm, p in self._procs.items():
            self._signal(arm, signal.SIGKILL)
            with contextlib.suppress(Exception):
                p.communicate(timeout=10)
        self._procs.clear()
        for fd in self._err.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._err.clear()
        for d in self._dirs:
            scratch.remove(d)
        self._dirs.clear()


