"""runner/timekeeper.py on its own: the parent's end of the timing channel, driven here as the
harness would drive it (tests/test_adversarial.py runs it with real children and real cheats)."""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Iterator

import pytest

from kernelpro.runner.timekeeper import Timekeeper

TIMING = {"rotate": 3, "reps": 20, "reps_max": 500, "reps_cpu": 3}


class Child:
    """The harness's side of the protocol, by hand."""

    def __init__(self, keeper: Timekeeper) -> None:
        self.r, self.w = (os.dup(fd) for fd in keeper.child_fds)
        self.buf = b""

    def send(self, doc: dict) -> None:
        os.write(self.w, (json.dumps(doc) + "\n").encode())

    def recv(self) -> dict:
        while b"\n" not in self.buf:
            if not select.select([self.r], [], [], 10.0)[0]:
                raise TimeoutError("the parent sent nothing in 10 s")
            chunk = os.read(self.r, 65536)
            if not chunk:
                raise EOFError("the parent closed the channel")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def phase(self, kind: str, reps: int, claimed_ms: float, busy_s: float = 0.0) -> tuple[list[int], list[int]]:
        """Seeds it got and the calls the parent said it checks; ``busy_s`` of wall spent inside."""
        self.send({"start": {"kind": kind, "w": 0, "reps": reps}})
        seeds = self.recv()["seeds"]
        checked = []
        for i in range(reps):
            time.sleep(busy_s / reps)
            self.send({"c": [i, [i]]})
            if self.recv()["k"] == [i, 1]:
                checked.append(i)
        per = claimed_ms / reps
        self.send({"end": {"median_ms": per, "p10_ms": per, "p90_ms": per, "std_ms": 0.0, "n": reps,
                           "sum_ms": claimed_ms, "mode": "cpu"}})
        if kind == "time":
            self.saved = self.recv()["save"]  # the calls whose outputs the harness saves
        return seeds, checked

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


@pytest.fixture
def keeper() -> Iterator[tuple[Timekeeper, Child]]:
    k = Timekeeper([[111, 222, 333]], "cpu", TIMING)
    child = Child(k)
    k.started()
    yield k, child
    child.close()
    k.close()


def _settle(k: Timekeeper) -> None:
    end = time.monotonic() + 5
    while (k.in_phase or k.phase("time", 0) is None) and k.problem is None and time.monotonic() < end:
        time.sleep(0.01)


def test_an_honest_phase_is_consistent_and_its_checks_are_the_secret_seeds(keeper: tuple[Timekeeper, Child]) -> None:
    k, child = keeper
    child.phase("cal", 12, 0.1)
    seeds, checked = child.phase("time", 3, 300.0, busy_s=0.3)
    _settle(k)
    assert k.consistent(0) is None, k.consistent(0)
    p = k.phase("time", 0)
    assert p is not None and p.checks == tuple(checked) and len(checked) == 3
    assert sorted(seeds[i] for i in checked) == [111, 222, 333]  # the pool, at the parent's positions
    assert p.digests == {i: (i,) for i in checked}  # committed before each answer


def test_once_a_timed_phase_is_over_the_parent_names_its_checks_and_no_decoy() -> None:
    """The harness saves the outputs of the calls named then (runner/harness.py ``_time``): the checks,
    compared with the reference, never the decoys kept among them, which nothing compares (issue 22).
    During the phase the answers are the same for both."""
    for _ in range(5):  # 5 checks among 40 calls: no decoy at all about 1 time in 220
        k = Timekeeper([[11, 22, 33, 44, 55]], "cpu", {**TIMING, "reps_cpu": 40})
        child = Child(k)
        k.started()
        try:
            child.phase("cal", 12, 0.1)
            seeds, kept = child.phase("time", 40, 40.0, busy_s=0.04)
            _settle(k)
            p = k.phase("time", 0)
            assert p is not None and k.problem is None
        finally:
            child.close()
            k.close()
        assert child.saved == list(p.checks) and set(child.saved) <= set(kept)
        assert sorted(seeds[i] for i in child.saved) == [11, 22, 33, 44, 55]
        if len(kept) > len(child.saved):
            return
    raise AssertionError("no decoy was kept in 5 phases of 40 calls")


def test_a_wall_the_calls_do_not_fill_is_refused(keeper: tuple[Timekeeper, Child]) -> None:
    k, child = keeper
    child.phase("cal", 12, 0.1)
    child.phase("time", 3, 3.0, busy_s=0.6)  # 600 ms of wall, 3 ms claimed
    _settle(k)
    why = k.consistent(0) or ""
    assert why.startswith("TIMING_INCONSISTENT: the timed calls add up to 3.0 ms"), why


def test_a_median_moved_by_concentrating_the_work_is_refused(keeper: tuple[Timekeeper, Child]) -> None:
    k, child = keeper
    child.phase("cal", 12, 0.1)
    child.send({"start": {"kind": "time", "w": 0, "reps": 3}})
    child.recv()
    for i in range(3):
        time.sleep(0.6 if i == 0 else 0.0)
        child.send({"c": [i, [0]]})
        child.recv()
    child.send({"end": {"median_ms": 0.01, "p10_ms": 0.01, "p90_ms": 600.0, "std_ms": 1.0, "n": 3, "sum_ms": 600.02}})
    _settle(k)
    assert (k.consistent(0) or "").startswith("TIMING_INCONSISTENT: a median of 0.0100 ms"), k.consistent(0)


@pytest.mark.parametrize("wrong", ["fewer_calls", "out_of_order", "early_end", "no_calibration"])
def test_protocol_violations_void_the_timing(keeper: tuple[Timekeeper, Child], wrong: str) -> None:
    k, child = keeper
    if wrong != "no_calibration":
        child.phase("cal", 12, 0.1)
    if wrong == "fewer_calls":  # fewer calls would mean fewer checks
        child.send({"start": {"kind": "time", "w": 0, "reps": 2}})
    elif wrong == "out_of_order":
        child.send({"start": {"kind": "time", "w": 0, "reps": 3}})
        child.recv()
        child.send({"c": [1, [0]]})
    elif wrong == "early_end":
        child.send({"start": {"kind": "time", "w": 0, "reps": 3}})
        child.recv()
        child.send({"end": {"median_ms": 1.0, "n": 3, "sum_ms": 3.0}})
    else:
        child.phase("time", 3, 3.0)
    _settle(k)
    why = k.consistent(0) or ""
    assert why.startswith("TIMING_PROTOCOL"), why


def test_a_phase_starts_only_once_the_judge_is_quiet_and_holds_it_until_its_end(keeper: tuple[Timekeeper, Child]) -> None:
    """The parent's judge (another CUDA context when it judges on the GPU) must not run while the
    child times: the seeds that start a phase wait for the comparison in progress, and the judge
    cannot take the lock again until the phase has ended."""
    import threading

    k, child = keeper
    k.quiet.acquire()  # a comparison in progress
    got: list[float] = []

    def run() -> None:
        child.send({"start": {"kind": "cal", "w": 0, "reps": 12}})
        child.recv()  # the seeds
        got.append(time.monotonic())

    t0 = time.monotonic()
    th = threading.Thread(target=run)
    th.start()
    time.sleep(0.3)
    assert not got, "the seeds went out while the judge was comparing"
    k.quiet.release()
    th.join(5)
    assert got and got[0] - t0 >= 0.3
    assert not k.quiet.acquire(blocking=False), "the judge could compare during the phase"
    for i in range(12):
        child.send({"c": [i, [i]]})
        child.recv()
    child.send({"end": {"median_ms": 0.01, "p10_ms": 0.01, "p90_ms": 0.01, "std_ms": 0.0, "n": 12,
                        "sum_ms": 0.12, "mode": "cpu"}})
    end = time.monotonic() + 5
    while k.phase("cal", 0) is None and time.monotonic() < end:
        time.sleep(0.01)
    assert k.quiet.acquire(timeout=5), "the phase ended but the judge stays locked out"
    k.quiet.release()


def test_a_child_that_dies_inside_a_phase_frees_the_judge() -> None:
    k = Timekeeper([[1]], "cpu", TIMING)
    child = Child(k)
    k.started()
    child.send({"start": {"kind": "cal", "w": 0, "reps": 12}})
    child.recv()
    child.close()  # gone mid-phase
    k.close()
    assert k.quiet.acquire(timeout=5)


def test_the_judge_compares_nothing_while_the_channel_holds_quiet(tmp_path) -> None:
    import threading

    from kernelpro.runner.evaluator import _OutputJudge

    (tmp_path / "out").mkdir()
    for n in ("a.pt", "b.pt"):
        (tmp_path / "out" / n).write_bytes(b"x")
    j = object.__new__(_OutputJudge)
    j.work, j.jobs, j.done, j.timed, j.failed, j.device = tmp_path, [(n, None, None, {}) for n in ("a.pt", "b.pt")], 0, True, None, "cpu"
    judged: list[str] = []
    j._judge = lambda path, *a: judged.append(path.name)  # type: ignore[method-assign]
    quiet = threading.Lock()
    quiet.acquire()  # the child is timing
    j.advance(quiet=quiet)
    assert judged == [] and j.done == 0
    quiet.release()
    j.advance(quiet=quiet)
    assert judged == ["a.pt", "b.pt"] and j.done == 2 and quiet.acquire(blocking=False)


def _harness_phase(tmp_path, save: object) -> tuple[dict | Exception, list[str]]:
    """The harness's timing loop (runner/harness.py ``_time``), in this process, against a parent by
    hand that keeps calls 1 and 3 of 6 and then asks to save ``save``."""
    import threading

    from kernelpro.runner import harness

    up_r, up_w = os.pipe()
    down_r, down_w = os.pipe()
    req = {"timing": {"rotate": 3, "warmup": 0, "reps_cpu": 6, "hold_us": 0.0}, "checks": 2,
           "definition": {"axes": {"n": {"type": "var"}},
                          "inputs": {"x": {"shape": ["n"], "dtype": "float32"}},
                          "outputs": {"y": {"shape": ["n"], "dtype": "float32"}}}}

    def parent() -> None:
        child = Child.__new__(Child)
        child.r, child.w, child.buf = up_r, down_w, b""
        reps = child.recv()["start"]["reps"]
        child.send({"seeds": list(range(1, reps + 1))})
        for i in range(reps):
            assert child.recv()["c"][0] == i
            child.send({"k": [i, int(i in (1, 3))]})
        child.recv()  # the end
        child.send({"save": save})

    helper = threading.Thread(target=parent, daemon=True)
    helper.start()
    names: list[str] = []
    try:
        got: dict | Exception = harness._time(lambda x: (x * 2,), req, {"axes": {"n": 64}, "inputs": {}}, "cpu", False,
                                              (tmp_path, 0, names), _bound=[harness._Channel(down_r, up_w)])
    except harness.CandidateError as e:
        got = e
    helper.join(timeout=10)
    for fd in (up_r, up_w, down_r, down_w):
        os.close(fd)
    return got, names


def test_the_harness_saves_the_calls_the_parent_names_and_no_call_it_never_kept(tmp_path) -> None:
    got, names = _harness_phase(tmp_path / "a", [1])
    assert isinstance(got, dict) and got["n"] == 6, got
    assert names == ["w0_c0.kpt"] and sorted(p.name for p in (tmp_path / "a").iterdir()) == names
    got, names = _harness_phase(tmp_path / "b", [1, 2])  # call 2 was never kept: a parent's bug, named
    assert isinstance(got, Exception) and "TIMING_PROTOCOL" in str(got), got
    assert names == []
