"""The energy arms' "only the arm being measured is awake" (a red-team review of session 27). It rested
on ``os.killpg(arm_pid, SIGSTOP)`` (runner/energy/arms.py ``_signal``): a process the candidate's arm
started in a session of its own (setsid) was outside that group and kept running while its arm was
"stopped", in the baseline's windows and the idle ones, so the baseline's counter difference held the
candidate's work and the candidate's ratio dropped. The arm's whole process tree is stopped now.

NVML is not on this machine, so the counter here is the CPU time of every process of the arms
(what the GPU's counter is to GPU work: it counts whoever runs, not whose window it is). The arms,
their sandbox (namespaces, Landlock, seccomp) are the real ones.
"""

from __future__ import annotations

import os
import time

from test_adversarial import SWIGLU, candidate
from test_evaluate import PY_TORCH

from kernelpro.runner import procstat
from kernelpro.runner.energy import ChildRunner
from kernelpro.runner.energy.nvml import Reading
from kernelpro.runner.trace import Workload

HELPER = '''
import os, time

def _helper():
    main = os.getpid()
    if os.fork():
        os.wait()
        return
    os.setsid()                      # out of the arm's process group: SIGSTOP to the group misses us
    if os.fork():
        os._exit(0)
    def state():
        with open(f"/proc/{main}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    while True:
        try:
            s = state()
        except OSError:
            os._exit(0)
        if s == "T":                 # our arm is stopped: someone else's window (or an idle one)
            end = time.perf_counter() + 0.02
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(0.002)

_helper()
'''

CAND = HELPER + PY_TORCH


def _tree(roots: set[int]) -> set[int]:
    rows = {pid: int(f[1]) for pid, f in procstat.stats()}
    mine, grew = set(roots), True
    while grew:
        grew = False
        for pid, ppid in rows.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    return mine


class CpuCounter:
    """A counter of the arms' work: CPU seconds of every process below the arms' pids, as mJ at 100 W."""

    name = "cpu-time counter"

    def __init__(self, runner: ChildRunner) -> None:
        self.runner = runner
        self.tick = os.sysconf("SC_CLK_TCK")
        self.seen: dict[int, float] = {}

    def read(self) -> Reading:
        for pid, f in procstat.stats():
            if pid in _tree(set(self.runner.pids())):
                self.seen[pid] = (int(f[11]) + int(f[12])) / self.tick  # utime + stime (fields 14, 15 of the line)
        return Reading(time.perf_counter(), sum(self.seen.values()) * 100e3)

    def processes(self) -> tuple[int, ...] | None:
        return None


W = Workload.from_json({"axes": {"M": 4096}, "inputs": {"a": {"type": "random"}, "b": {"type": "random"}},
                        "uuid": "m4096"})


def _runner(cand: str) -> ChildRunner:
    reqs = {arm: {"definition": SWIGLU.to_json(), "solution": candidate(arm, src).to_json(), "workload": W.to_json(),
                  "device": "cpu"}
            for arm, src in (("baseline", PY_TORCH), ("candidate", cand))}
    return ChildRunner(reqs, timeout_s=120)


def test_a_stopped_arm_runs_nothing() -> None:
    """The invariant the energy protocol states: every arm but the one measured is stopped."""
    runner = _runner(CAND)
    try:
        time.sleep(0.3)
        c = CpuCounter(runner)
        before = c.read().energy_mj
        time.sleep(1.0)
        used = (c.read().energy_mj - before) / 100e3
    finally:
        runner.close()
    assert used < 0.05, f"a 'stopped' arm's process ran {used:.2f} CPU s in 1 s"
