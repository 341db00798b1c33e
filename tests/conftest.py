"""Shared fixtures. No test may reach a network peer beyond loopback: a real model provider or
GitHub would make a test depend on the outside world (and spend money)."""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_openai import FakeOpenAI, NetworkGuard

from kernelpro.runner import confinement
from kernelpro.runner.config import load_config
from kernelpro.runner.sandbox import network_isolation
from kernelpro.runner.target import Target

CONFINEMENT = confinement.available("-p" in network_isolation("cpu")[0])
if not CONFINEMENT.sufficient:
    # A machine that cannot confine candidates as a run requires (a CI runner with neither user
    # namespaces nor Landlock ABI 6): kernelpro refuses to run them there; the suite tests everything
    # else with the operator's opt-in, and tests/test_confinement.py shows the refusal itself.
    confinement.allow_unconfined(True)
# As the CLI does before any candidate runs: every kernelpro module imported once, up front, so no
# test's first child pays for it inside its time limits.
confinement.preload()


def pytest_report_header() -> str:
    return f"kernelpro confinement: {CONFINEMENT.description}" + (
        "" if CONFINEMENT.sufficient else " (not enough for a run: the suite runs candidates with the opt-in)")

# The GPU tests that ran longest in the --durations of sessions 5-11, longest first. Under pytest-xdist
# (.ci/gpu --part par, one test per step) they start first, so the part ends when its longest test
# does instead of when a long test picked up last does (longest-processing-time-first scheduling).
GPU_LONGEST_FIRST = ("test_optimize_tunes_upstream_heuristics", "test_the_demonstration_on_the_gpu",
                     "test_a_gpu_tuner_winner_is_recomputed_by_publish", "test_sigint_during_the_demo",
                     "test_a_gpu_result_json_round_trips", "test_a_pinned_liger_dyt", "test_gpu_pool_spreads",
                     "test_reactive_tools_end_to_end", "test_cuda_torch_extension_target",
                     "test_sigterm_during_the_energy_arms", "test_upstream_liger_with_its_wheel")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        return next((i for i, name in enumerate(GPU_LONGEST_FIRST) if item.name.startswith(name)), len(GPU_LONGEST_FIRST))
    items.sort(key=rank)  # stable: every other test keeps its collection order


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With KERNELPRO_FAILURES set (.ci/gpu), each failure's report is written there the moment it
    happens: a GPU part stopped by its time limit, or a pytest-xdist worker that died, still leaves
    why the tests before it failed (pytest prints them only at the end)."""
    folder = os.environ.get("KERNELPRO_FAILURES")
    if folder and (report.when == "call" or report.failed) and not os.environ.get("PYTEST_XDIST_WORKER"):
        # And a line per test as it ends, beside them: what a part stopped by its limit spent its time on.
        Path(folder).parent.mkdir(parents=True, exist_ok=True)
        with (Path(folder).parent / "progress.txt").open("a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {report.outcome:7} {report.duration:7.1f} s  {report.nodeid} ({report.when})\n")
    if folder and report.failed:
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", report.nodeid)[-150:]
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{name}.{report.when}.txt").write_text(
            f"{report.nodeid} ({report.when}, {report.duration:.1f} s)\n\n{report.longreprtext}\n"
            + "".join(f"\n--- {title}\n{text}" for title, text in report.sections))


DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"
ENTRY = "kernels/swiglu.py"
BASELINE = (DEMO / "commit2" / ENTRY).read_text()


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[NetworkGuard]:
    """Any connection beyond loopback (api.openai.com included) is refused and fails the test."""
    guard = NetworkGuard().install(monkeypatch)
    yield guard
    guard.check()


@pytest.fixture
def fake_tools_run_unconfined(monkeypatch: pytest.MonkeyPatch) -> None:
    """For tests whose fake ncu/compute-sanitizer report their arguments into the test's folder,
    which a confined process may not write (tests/test_confinement.py): they run as under the
    operator's opt-in, without Landlock (tests/test_gpu_confinement.py runs the real tools confined)."""
    monkeypatch.setattr(confinement, "landlock_abi", lambda: 0)
    monkeypatch.setattr(confinement, "_ALLOW_UNCONFINED", [True])


@pytest.fixture
def server() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    try:
        yield fake
    finally:
        fake.stop()
    fake.check()


@pytest.fixture(scope="session")
def gpu_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One `kernelpro demo --budget 5` on the GPU, read by the tests of tests/test_gpu.py and
    tests/test_guard.py that each ran their own with 8 (the costliest step of the GPU tier: every
    evaluation moves the 16M- and 64M-element outputs through files). The tuner's proposals are
    seeded by their parent: evaluations 2 and 3 of sessions 9 and 10 beat the pull request's kernel
    3.5x and 2.8x, so with five a winner is still gated, profiled and its guard shapes timed, as with
    eight. Its output folder; the exit status in the file `rc` beside it."""
    from kernelpro.cli import main

    out = tmp_path_factory.mktemp("gpu-demo") / "demo"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELPRO_DEVICE", "cuda")
        rc = main(["demo", "--out", str(out), "--budget", "5"])
    (out.parent / "rc").write_text(str(rc))
    return out


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Target:
    """The demo repository's swiglu target, loaded through .kernelpro.yml as the runner does."""
    repo = tmp_path_factory.mktemp("demo")
    shutil.copytree(DEMO / "commit1", repo, dirs_exist_ok=True)
    shutil.copytree(DEMO / "commit2", repo, dirs_exist_ok=True)
    return load_config(repo / ".kernelpro.yml").target("swiglu")


@pytest.fixture(scope="module")
def repo_root(target: Target, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("checkout")
    (root / "kernels").mkdir()
    (root / ENTRY).write_text(BASELINE)
    return root




@pytest.fixture
def h200(tmp_path: Path) -> Path:
    """A writable copy of a real H200 run's results folder (tests/fixtures/results_h200), as the
    publish job receives it."""
    d = tmp_path / "results"
    shutil.copytree(Path(__file__).resolve().parent / "fixtures" / "results_h200", d)
    for p in d.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return d
