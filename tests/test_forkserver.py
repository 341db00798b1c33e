"""runner/forkserver.py: children forked from a server that imported torch once must be as confined,
and judged exactly as, children started as fresh interpreters under unshare."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_adversarial import (
    LOADS,
    SECRETS,
    SIMPLE,
    SWIGLU,
    candidate,
    fixture,
    judge,
    listener,  # noqa: F401 - the fixture
    settings,
    unconfined,  # noqa: F401 - the fixture
)
from test_evaluate import PY_TORCH

from kernelpro.runner import forkserver
from kernelpro.runner.evaluator import evaluate
from kernelpro.runner.sandbox import network_isolation
from kernelpro.runner.target import Tolerance

FORKED = "forked from the fork server"

isolated = pytest.mark.skipif(not network_isolation("cpu")[0], reason="this machine cannot make namespaces")


def test_an_honest_candidate_passes_and_starts_in_a_fraction_of_the_time(tmp_path: Path) -> None:
    fresh = evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), settings(tmp_path / "a"))
    forked = evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), settings(tmp_path / "b", fork_server=True))
    assert fresh.passed and forked.passed, (fresh.log, forked.log)
    assert forked.environment["sandbox"].get("spawn") == FORKED and "spawn" not in fresh.environment["sandbox"]
    assert forked.environment["sandbox"]["network"] == fresh.environment["sandbox"]["network"]
    # torch is imported already: what is left of start-up is the harness's own few lines.
    assert forked.phases["startup"] < 0.5 < fresh.phases["startup"], (forked.phases, fresh.phases)


@pytest.mark.parametrize("name", SIMPLE)
def test_every_hostile_candidate_gets_the_same_verdict_when_forked(tmp_path: Path, name: str) -> None:
    outcome, expect = judge(tmp_path, name, fork_server=True)
    assert outcome.status == expect, (outcome.status, outcome.log[-1500:])


@isolated
def test_a_forked_child_is_pid_1_of_its_own_namespace_with_no_secrets(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    outcome, expect = judge(tmp_path, "env_secrets", fork_server=True)
    assert outcome.status == expect and outcome.environment["sandbox"].get("spawn") == FORKED
    assert "EXFILTRATED=" in outcome.log and "proc1" in outcome.log and "procNone" not in outcome.log
    for k, v in SECRETS.items():
        assert k not in outcome.log and v not in outcome.log


@isolated
def test_a_forked_child_has_no_network(tmp_path: Path, listener: tuple[int, list[bytes]],  # noqa: F811
                                       request: pytest.FixtureRequest) -> None:
    port, got = listener
    text, expect, _ = fixture("network")
    source = text.replace("PORT = 0", f"PORT = {port}")
    outcome, _ = judge(tmp_path, "network", source, fork_server=True)
    assert outcome.status == expect and got == []
    assert any(w in outcome.log.lower() for w in ("unreachable", "refused", "permission denied")), outcome.log[-800:]
    # Forked without isolation (turned off) nor Landlock, the same candidate reaches the listener: the
    # check has teeth.
    request.getfixturevalue("unconfined")
    outcome, _ = judge(tmp_path, "network", source, isolate_network=False, fork_server=True)
    assert outcome.environment["sandbox"].get("spawn") == FORKED
    assert got and got[0].startswith(b"EXFILTRATED")


def test_a_forked_child_is_killed_at_its_time_limit_and_its_crash_is_its_own(tmp_path: Path) -> None:
    outcome, expect = judge(tmp_path, "sleeps", timeout_s=20, fork_server=True)
    assert outcome.status == expect and "killed after 20 s" in outcome.log
    crash, _ = judge(tmp_path, "segfault", fork_server=True)
    assert crash.status == "RUNTIME_ERROR" and "exit code -11" in crash.log, crash.log[-500:]
    after = evaluate(SWIGLU, candidate("after", PY_TORCH), LOADS, Tolerance(), settings(tmp_path, fork_server=True))
    assert after.passed, after.log


def test_where_a_child_cannot_be_confined_a_fresh_interpreter_is_started(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkserver, "_REFUSED", {True: "no namespaces here", False: "no namespaces here"})
    outcome = evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), settings(tmp_path, fork_server=True))
    assert outcome.passed and "spawn" not in outcome.environment["sandbox"]


def test_a_dead_server_is_started_again(tmp_path: Path) -> None:
    first = evaluate(SWIGLU, candidate("one", PY_TORCH), LOADS, Tolerance(), settings(tmp_path, fork_server=True))
    assert first.passed and forkserver._SERVER is not None
    forkserver._SERVER._proc.kill()
    forkserver._SERVER._proc.wait()
    again = evaluate(SWIGLU, candidate("two", PY_TORCH), LOADS, Tolerance(), settings(tmp_path, fork_server=True))
    assert again.passed and again.environment["sandbox"].get("spawn") == FORKED


def test_children_are_forked_by_default(tmp_path: Path) -> None:
    from kernelpro.runner.evaluator import EvalSettings

    outcome = evaluate(SWIGLU, candidate("default", PY_TORCH), LOADS, Tolerance(),
                       EvalSettings(device="cpu", cache_dir=tmp_path / "cache"))
    assert outcome.passed and outcome.environment["sandbox"].get("spawn") == FORKED, outcome.environment


def test_a_warm_server_that_dies_before_its_report_is_seen_at_once(tmp_path: Path) -> None:
    """Session 11 on the H200: a warm server that could not import kernelpro died at once, and
    wait_ready still waited its whole 300 s. Its death now answers the wait."""
    import time

    srv = forkserver.ForkServer({"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)},
                                {"modules": ["json"], "blocked": []})
    try:
        srv._proc.kill()
        start = time.monotonic()
        assert srv.wait_ready(60) is None
        assert time.monotonic() - start < 10
    finally:
        srv.close()
