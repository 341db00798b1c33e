"""The GPU pool's scheduling, on the CPU: real worker processes, GPUs as labels, the evaluator replaced by
a function that reports which CUDA_VISIBLE_DEVICES it saw."""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

import pytest

from kernelpro.runner.candidate import Candidate
from kernelpro.runner.evaluator import Outcome
from kernelpro.runner.journal import Journal
from kernelpro.runner.pool import GpuSelectionError, Pool, Schedule, visible_gpus
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile


def cand(i: int, **params: object) -> Candidate:
    src = f"def run(x):\n    return x + {i}\n"
    sol = Solution(f"c{i}", "add", "test", BuildSpec("python", ("cpu",), "k.py::run"), (SourceFile("k.py", src),))
    return Candidate(sol, None, "optimize", f"candidate {i}", params)


def fake_evaluate(c: Candidate) -> Outcome:
    """Stands in for the evaluator inside a worker: sleeps as told, dies as told, says where it ran."""
    if c.params.get("die"):
        os._exit(3)  # the worker process dies, as an OOM kill would end it
    start = time.time()
    time.sleep(float(c.params.get("sleep", 0.0)))
    return Outcome(c.key, "PASSED", (), environment={"gpu": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
                                                     "start": start, "end": time.time()})


def test_visible_gpus_from_the_environment_and_the_setting() -> None:
    assert visible_gpus("auto", {}, lambda: 3) == ("0", "1", "2")
    assert visible_gpus("auto", {"CUDA_VISIBLE_DEVICES": "2,5"}, lambda: 2) == ("2", "5")
    assert visible_gpus("auto", {"CUDA_VISIBLE_DEVICES": ""}, lambda: 0) == ()
    assert visible_gpus("1, 0", {}, lambda: 2) == ("1", "0")
    with pytest.raises(GpuSelectionError, match=r"names 7, but the visible GPUs are 2, 5; set it to 'auto'"):
        visible_gpus("7", {"CUDA_VISIBLE_DEVICES": "2,5"}, lambda: 2)
    with pytest.raises(GpuSelectionError, match="a GPU twice"):
        visible_gpus("0,0", {}, lambda: 2)


def test_a_pool_needs_a_gpu() -> None:
    with pytest.raises(GpuSelectionError, match="at least one GPU"):
        Pool(())


@pytest.fixture(scope="module")
def pool() -> Pool:
    with Pool(("gpu-a", "gpu-b", "gpu-c")) as p:
        # Every worker started (a spawned interpreter) before any test times a batch: on a loaded CI
        # machine two workers were still starting while the first slept its 1.5 s, and nothing ran
        # beside it (stop 35's local CI).
        for slot in range(3):
            p.submit(slot, os.getpid).result(timeout=120)
        yield p  # type: ignore[misc]


def test_a_batch_is_spread_over_every_gpu_and_journaled_in_proposal_order(pool: Pool, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl", "ctx")
    s = Schedule(pool, fake_evaluate, journal)
    # The first candidate is slowest, so the others finish (and are written) before it.
    batch = [cand(0, sleep=1.5), cand(1, sleep=0.1), cand(2, sleep=0.1), cand(3), cand(4), cand(5)]
    s.submit(batch)
    outcomes = [s.result(c) for c in batch]
    assert all(o.passed for o in outcomes)
    slow = outcomes[0].environment
    during = [o for o in outcomes[1:] if o.environment["start"] < slow["end"] and o.environment["end"] > slow["start"]]
    assert during, "nothing ran while the slow candidate was running: the batch was not concurrent"
    # Each candidate saw exactly the GPU it was placed on, and all three GPUs were used.
    assert [o.environment["gpu"] for o in outcomes] == [s.placement[c.key] for c in batch]
    assert set(s.placement.values()) == {"gpu-a", "gpu-b", "gpu-c"}
    lines = [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text().splitlines()]
    assert lines[-1]["key"] == batch[0].key, "the slow first candidate should have finished last"
    assert {x["key"]: x["index"] for x in lines} == {c.key: i for i, c in enumerate(batch)}
    # Read back, the journal is in index order whatever order the lines were written in.
    assert [e.candidate.key for e in Journal(tmp_path / "journal.jsonl", "ctx")] == [c.key for c in batch]


def test_a_dead_worker_loses_only_its_own_candidate(pool: Pool, tmp_path: Path) -> None:
    journal = Journal(tmp_path / "journal.jsonl", "ctx")
    s = Schedule(pool, fake_evaluate, journal)
    batch = [cand(10, sleep=0.3), cand(11, die=True), cand(12, sleep=0.3), cand(13), cand(14)]
    s.submit(batch)
    outcomes = {c.key: s.result(c) for c in batch}
    dead = outcomes[batch[1].key]
    assert dead.status == "RUNTIME_ERROR"
    assert f"worker on GPU {s.placement[batch[1].key]} failed" in dead.log and "rerunning" in dead.log
    assert all(outcomes[c.key].passed for c in batch if c is not batch[1])
    journaled = {e.candidate.key for e in Journal(tmp_path / "journal.jsonl", "ctx")}
    assert journaled == {c.key for c in batch} - {batch[1].key}, "the others' results must all be kept"
    # The dead worker was replaced: its GPU takes work again.
    after = [cand(20 + i, sleep=0.2) for i in range(3)]
    s.submit(after)
    assert all(s.result(c).passed for c in after)
    assert {s.placement[c.key] for c in after} == set(pool.gpus)


def test_a_rerun_resumes_from_the_journal(pool: Pool, tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    first = Schedule(pool, fake_evaluate, Journal(path, "ctx"))
    done = [cand(30), cand(31)]
    first.submit(done)
    assert all(first.result(c).passed for c in done)
    again = Schedule(pool, fake_evaluate, Journal(path, "ctx"))
    batch = [*done, cand(32)]
    again.submit(batch)
    assert [again.result(c).passed for c in batch] == [True, True, True]
    assert set(again.placement) == {batch[2].key}, "journaled candidates were evaluated again"
    indices = sorted(e.index for e in Journal(path, "ctx"))
    assert indices == [0, 1, 2]


def test_drain_drops_the_queue_and_waits_for_running_work(tmp_path: Path) -> None:
    calls: list[str] = []

    def slow(c: Candidate) -> Outcome:
        calls.append(c.key)
        time.sleep(0.3)
        return Outcome(c.key, "PASSED", ())

    def thread_worker(gpu: str) -> Executor:
        return ThreadPoolExecutor(max_workers=1)

    with Pool(("x", "y"), worker=thread_worker) as p:
        journal = Journal(tmp_path / "journal.jsonl", "ctx")
        s = Schedule(p, slow, journal)
        s.submit([cand(i) for i in range(6)])
        s.drain()
        assert len(calls) == 2, "queued candidates nobody consumed were still evaluated"
        assert len(journal) == 2
        # The home GPU runs the gate's evaluations once the batch has drained.
        assert s.home(lambda: "on home") == "on home"


@pytest.mark.slow
def test_optimize_on_two_gpus_evaluates_the_same_candidates_as_on_one(target, repo_root, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop with a pool of two (fake) GPUs, real evaluator in the workers (Triton interpreter)."""
    from kernelpro.runner.optimize import RunSettings, optimize
    from kernelpro.runner.programmers import load
    from kernelpro.settings import Settings

    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    programmer = load("tuner", Settings.from_env({"KERNELPRO_DEVICE": "cpu"}))
    # Baseline + one batch of 4: the proposals do not depend on (noisy CPU) timings.
    rs = RunSettings(search="greedy", budget=5, gate_top=1)
    one = optimize(target, repo_root, tmp_path / "one", programmer, rs)
    with Pool(("gpu-a", "gpu-b")) as p:
        two = optimize(target, repo_root, tmp_path / "two", programmer, rs, pool=p)
    assert [s.candidate.key for s in two.evaluated] == [s.candidate.key for s in one.evaluated]
    assert [s.outcome.status for s in two.evaluated] == [s.outcome.status for s in one.evaluated]
    lines = [json.loads(x) for x in (tmp_path / "two" / "journal.jsonl").read_text().splitlines()]
    assert sorted(x["index"] for x in lines) == list(range(len(two.evaluated)))
    by_index = {x["index"]: x["key"] for x in lines}
    assert [by_index[i] for i in range(len(lines))] == [s.candidate.key for s in two.evaluated]


def test_exclusive_holds_the_queue_and_waits_for_running_work(tmp_path: Path) -> None:
    """Profiling (ncu) needs the GPUs to itself: nothing is timed while it runs."""
    import threading

    active: list[str] = []
    started: list[str] = []
    lock = threading.Lock()

    def tracked(c: Candidate) -> Outcome:
        with lock:
            active.append(c.key)
            started.append(c.key)
        time.sleep(0.2)
        with lock:
            active.remove(c.key)
        return Outcome(c.key, "PASSED", ())

    def thread_worker(gpu: str) -> Executor:
        return ThreadPoolExecutor(max_workers=1)

    with Pool(("x", "y"), worker=thread_worker) as p:
        s = Schedule(p, tracked, Journal(tmp_path / "journal.jsonl", "ctx"))
        batch = [cand(i) for i in range(6)]
        s.submit(batch)
        assert s.result(batch[0]).passed
        with s.exclusive():
            assert active == [], "a candidate ran while the GPUs were held"
            before = len(started)
            time.sleep(0.3)
            assert len(started) == before, "the queue moved while held"
        assert all(s.result(c).passed for c in batch)
        assert sorted(e.index for e in s.journal) == list(range(6))


def test_a_bad_gpu_selection_is_a_clear_cli_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from kernelpro.cli import main, make_demo_repo

    repo = make_demo_repo(tmp_path / "repo")
    monkeypatch.setenv("KERNELPRO_DEVICE", "cuda")
    monkeypatch.setenv("KERNELPRO_GPUS", "3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    rc = main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(tmp_path / "o")])
    assert rc == 2
    assert "KERNELPRO_GPUS='3' names 3, but the visible GPUs are 0, 1" in capsys.readouterr().err
