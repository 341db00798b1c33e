"""System V IPC between candidates (a red-team review of session 27). A candidate's child shared the
host's IPC namespace: neither ``unshare -r -n -p`` (runner/sandbox.py) nor the fork server's namespaces
(runner/forkserver.py ``_confine``) gave it one of its own, and neither Landlock nor the seccomp filter
refused shmget/msgget/semget. Segments it made outlived it (``kernel.shm_rmid_forced`` is 0 by default):
1.5 GiB held by the kernel in no process's memory, past the memory watchdog, until the host rebooted,
and a message in them that the next candidate read. Children now get an IPC namespace of their own
(``-i``, CLONE_NEWIPC), the filter refuses System V IPC where unix sockets are refused (no GPU), and the
screen refuses a CUDA candidate's host code that calls it."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_adversarial import LOADS, SWIGLU, candidate, settings

from kernelpro.runner.evaluator import evaluate
from kernelpro.runner.screen import _C_SYSTEM
from kernelpro.runner.target import Tolerance

KEY = 0x6B7072F0  # the keys this test uses: KEY .. KEY + 7
SEG = 64 << 20

COMMON = f'''
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
libc.shmdt.argtypes = [ctypes.c_void_p]
KEY, SEG = {KEY}, {SEG}
'''

LEAVES = COMMON + '''
made = 0
for i in range(6):                          # one segment attached at a time, filled, detached
    sid = libc.shmget(KEY + i, SEG, 0o1000 | 0o600)   # IPC_CREAT
    if sid < 0:
        break                               # refused (the filter): nothing is left
    p = libc.shmat(sid, None, 0)
    ctypes.memset(p, 0x41, SEG)
    if i == 0:
        ctypes.memmove(p, b"seeds I saw: 123 456 789\\0", 25)
    libc.shmdt(p)

import torch

def run(a, b):
    return torch.nn.functional.silu(a) * b
'''

READS = COMMON + '''
sid = libc.shmget(KEY, 0, 0)
if sid >= 0:
    p = libc.shmat(sid, None, 0o10000)      # SHM_RDONLY
    raise RuntimeError("left by an earlier candidate: " + ctypes.string_at(p, 24).decode())

import torch

def run(a, b):
    return torch.nn.functional.silu(a) * b
'''


def _ours() -> list[int]:
    libc = ctypes.CDLL(None, use_errno=True)
    return [sid for i in range(8) if (sid := libc.shmget(KEY + i, 0, 0)) >= 0]


@pytest.fixture
def clean() -> Iterator[None]:
    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for sid in _ours():
            libc.shmctl(sid, 0, None)  # IPC_RMID, this test's own keys only

    drop()
    yield
    drop()


@pytest.mark.parametrize("isolate", [True, False], ids=["namespaces", "no-namespaces"])
def test_nothing_a_candidate_makes_in_system_v_ipc_outlives_it(tmp_path: Path, clean: None, isolate: bool) -> None:
    first = evaluate(SWIGLU, candidate("leaves", LEAVES), LOADS, Tolerance(),
                     settings(tmp_path / "a", trials=1, fork_server=True, isolate_network=isolate))
    left = _ours()
    second = evaluate(SWIGLU, candidate("reads", READS), LOADS, Tolerance(),
                      settings(tmp_path / "b", trials=1, fork_server=True, isolate_network=isolate))
    assert first.passed, first.log[-500:]
    assert not left, f"{len(left)} System V segments ({len(left) * SEG >> 20} MiB) outlived the candidate's evaluation"
    assert second.passed and "left by an earlier candidate" not in second.log, second.log[-500:]


def test_the_screen_refuses_a_cuda_candidates_process_and_ipc_calls() -> None:
    for src in ("int id = shmget(0x6b70726f, 1 << 30, 01600); void *p = shmat(id, 0, 0);",
                "if (fork() == 0) { setsid(); }", "daemon(0, 0);", "posix_spawn(&pid, path, 0, 0, argv, envp);"):
        assert _C_SYSTEM.search(src), src
