"""Hostile candidates against the real evaluator: each must be rejected with the right status.

Every file in tests/fixtures/adversarial/ games a weak harness in one known way (its docstring says
how, and its ``EXPECT:`` line the status). They run exactly as the loop runs a candidate: a trusted
reference child, the candidate in its own sandboxed child (scrubbed environment, namespaces where the
OS allows them, memory and time limits), the verdict made here on the tensors it saved. Plain torch
candidates on the CPU; the GPU-only ones (side stream, illegal address) are in tests/test_gpu.py.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from test_evaluate import DEFINITION, PY_TORCH, WORKLOADS

from kernelpro.runner import confinement
from kernelpro.runner.evaluator import EvalSettings, Outcome, evaluate
from kernelpro.runner.sandbox import NO_ISOLATION, SandboxError, network_isolation, scrubbed_env
from kernelpro.runner.target import Tolerance
from kernelpro.runner.trace import BuildSpec, Definition, Solution, SourceFile, Workload

FIXTURES = Path(__file__).parent / "fixtures" / "adversarial"
SWIGLU = Definition.from_json(DEFINITION)
LOADS = [Workload.from_json(w) for w in WORKLOADS]
# bfloat16 (tolerance 1e-2): room within it for digest_forge.py to move its outputs' bit patterns.
SWIGLU_BF16 = Definition.from_json({
    "name": "swiglu_bf16_n256", "op_type": "elementwise",
    "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 256}},
    "inputs": {"a": {"shape": ["M", "N"], "dtype": "bfloat16"}, "b": {"shape": ["M", "N"], "dtype": "bfloat16"}},
    "outputs": {"out": {"shape": ["M", "N"], "dtype": "bfloat16"}},
    "reference": "import torch\n\ndef run(a, b):\n    return torch.nn.functional.silu(a) * b\n"})
LOADS_BF16 = [Workload.from_json({"axes": {"M": 64}, "inputs": {"a": {"type": "random"}, "b": {"type": "random"}},
                                  "uuid": "m64"})]


def settings(tmp_path: Path, **kw: object) -> EvalSettings:
    # A fresh interpreter per child here; tests/test_forkserver.py judges the same candidates forked
    # (the default), so both ways of starting a child meet every adversary.
    base = EvalSettings(device="cpu", trials=5, timeout_s=90, memory_limit_mb=2048, cache_dir=tmp_path / "cache",
                        fork_server=False)
    return replace(base, **kw)  # type: ignore[arg-type]


@pytest.fixture
def unconfined(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No Landlock, and the operator's opt-in to run so: the network namespace alone stands between
    a candidate and the network (the teeth of the network tests)."""
    monkeypatch.setattr(confinement, "landlock_abi", lambda: 0)
    before = confinement.unconfined_allowed()
    confinement.allow_unconfined(True)
    yield
    confinement.allow_unconfined(before)


def candidate(name: str, source: str, dps: bool = False, definition: str = SWIGLU.name) -> Solution:
    return Solution(name, definition, "adversary", BuildSpec("python", ("cpu",), "cand.py::run", destination_passing_style=dps),
                    (SourceFile("cand.py", source),))


def fixture(name: str) -> tuple[str, str, bool]:
    source = (FIXTURES / f"{name}.py").read_text()
    expect = re.search(r"EXPECT: ([A-Z_]+)", source)
    assert expect, f"{name}.py has no EXPECT: line"
    return source, expect.group(1), source.startswith('"""DPS')


def judge(tmp_path: Path, name: str, source: str | None = None, **kw: object) -> tuple[Outcome, str]:
    text, expect, dps = fixture(name)
    outcome = evaluate(SWIGLU, candidate(name, source or text, dps), LOADS, Tolerance(), settings(tmp_path, **kw))
    return outcome, expect


SIMPLE = ["pointer_cache", "value_cache", "zeros", "partial", "skipped_writes", "late_thread", "patch_timer",
          "input_mutation", "racy", "forge_result", "forge_outputs", "odd_tensors", "segfault", "memory_hog",
          "lazy_output", "lazy_mode", "aten_override", "rebind_harness", "rebind_harness_checks",
          "precompute", "channel_proxy", "channel_proxy_deep", "forged_same", "forged_same_late", "digest_hook",
          "digest_hook_restore"]


def test_every_fixture_is_tested() -> None:
    on_disk = {p.stem for p in FIXTURES.glob("*.py")}
    tested = set(SIMPLE) | {"reads_reference", "env_secrets", "network", "sleeps", "truncate_outputs",
                            "poison_diagnostics", "hide_ops", "adaptive_skip", "memory_escape", "digest_forge",
                            "deep_folders", "huge_clock", "concentrate", "strided_view", "returned_input"}
    assert on_disk == tested
    assert len(on_disk) >= 12



def test_a_digest_forged_within_the_tolerance_after_the_checks_were_named_is_refused(tmp_path: Path) -> None:
    """digest_forge.py: timed calls that do nothing, and check files fixed up once the parent named the
    checks, to the right outputs moved within bfloat16's tolerance until their sum of bit patterns is the
    one committed for the stale output. It passed, at a median of 0.01 ms; a CPU call's commit now also
    carries a BLAKE2b of its bytes (runner/harness.py ``_strong``)."""
    bf16, loads = SWIGLU_BF16, LOADS_BF16
    text, expect, dps = fixture("digest_forge")
    outcome = evaluate(bf16, candidate("digest_forge", text, dps, definition=bf16.name), loads, Tolerance(),
                       settings(tmp_path, trials=3))
    assert outcome.status == expect and outcome.log.startswith("LATE_WRITE"), (outcome.status, outcome.log[-800:])
    honest = evaluate(bf16, candidate("honest", PY_TORCH, definition=bf16.name), loads, Tolerance(),
                      settings(tmp_path / "h", trials=3))
    assert honest.passed, honest.log


def test_what_a_candidate_leaves_behind_never_ends_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """deep_folders.py (3000 nested folders: RecursionError in the clean-up) and huge_clock.py (a 401-digit
    clock stamp: OverflowError) each ended the whole run in the parent; both are honest otherwise."""
    import tempfile

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # the children's folders, here alone
    for name in ("deep_folders", "huge_clock"):
        outcome, expect = judge(tmp_path / name, name, trials=1)
        assert outcome.status == expect, (name, outcome.status, outcome.log[-800:])
    assert not list(scratch.glob("kernelpro-cand-*")), "a candidate's folder was left behind"


def test_work_concentrated_in_one_timed_call_is_reported_at_its_true_cost(tmp_path: Path) -> None:
    """concentrate.py: 30 ms of work a call, all of a phase's done in its first call: its median was
    0.036 ms. On the CPU the parent's own intervals between commits, less the loop's cost, stand."""
    outcome, expect = judge(tmp_path, "concentrate", trials=1)
    assert outcome.status == expect, outcome.log[-800:]
    medians = [r.timing.median_ms for r in outcome.results if r.timing is not None]
    assert medians and min(medians) > 20.0, medians


def _layout(name: str, out_shape: list[str], reference: str) -> tuple[Definition, list[Workload]]:
    d = Definition.from_json({
        "name": name, "op_type": "layout", "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 64}},
        "inputs": {"a": {"shape": ["M", "N"], "dtype": "float32"}},
        "outputs": {"out": {"shape": out_shape, "dtype": "float32"}},
        "reference": f"import torch\n\ndef run(a):\n    return {reference}\n"})
    return d, [Workload.from_json({"axes": {"M": 32}, "inputs": {"a": {"type": "random"}}, "uuid": "m32"})]


@pytest.mark.parametrize(("name", "out_shape", "reference", "why"), [
    ("strided_view", ["N", "M"], "a.t().contiguous()", "not contiguous"),
    ("returned_input", ["M", "N"], "a.clone()", "LAZY_OUTPUT: output 0 is memory of an input"),
])
def test_a_returned_view_or_input_is_no_result(tmp_path: Path, name: str, out_shape: list[str], reference: str,
                                              why: str) -> None:
    """A transpose returned as ``a.t()``, a copy returned as ``a``: no work in the call, and the harness's
    copy after it (outside the timer) did it. The honest kernel of each passes (the control)."""
    d, loads = _layout(f"{name}_f32", out_shape, reference)
    text, expect, dps = fixture(name)
    outcome = evaluate(d, candidate(name, text, dps, definition=d.name), loads, Tolerance(), settings(tmp_path, trials=1))
    assert outcome.status == expect and why in outcome.log, (outcome.status, outcome.log[-600:])
    honest = evaluate(d, candidate("honest", f"def run(a):\n    return {reference}\n", definition=d.name), loads,
                      Tolerance(), settings(tmp_path / "h", trials=1))
    assert honest.passed, honest.log

def test_an_honest_candidate_passes_the_same_checks(tmp_path: Path) -> None:
    """The control: without it, every rejection below could come from a harness that rejects all."""
    outcome = evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), settings(tmp_path))
    assert outcome.passed, outcome.log
    c = outcome.results[0].correctness or {}
    assert c["trials"] == 5 and c["runs_per_trial"] == 2 and c["timing_checks"] == 3
    assert outcome.environment["sandbox"]["memory"].startswith("RLIMIT_DATA")


def test_the_judge_reads_each_trials_first_run_and_the_checks_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 22: the harness marks a second run bit for bit its first instead of saving it again, and
    saves only the timed calls the parent names once the phase is over (its checks, not the decoys
    kept among them): at 235 MB a file (Liger's SwiGLU on the H200) those were 8 of 16 files a
    candidate wrote and the parent read. A candidate whose second run differs is saved and judged
    in full, and passes where it is within tolerance."""
    from kernelpro.runner import evaluator

    loaded: list[str] = []
    real = evaluator._load

    def load(path: Path, cap: int) -> object:
        if path.parent.name == "out":
            loaded.append(path.name)
        return real(path, cap)

    monkeypatch.setattr(evaluator, "_load", load)
    # 40 timed calls, 5 of them checks: the parent keeps about as many decoys (none in 1 of 220 runs).
    outcome = evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS[:1], Tolerance(), settings(tmp_path, reps_cpu=40))
    assert outcome.passed, outcome.log
    c = outcome.results[0].correctness or {}
    assert c["second_runs_identical"] == c["trials"] == 5 and c["timing_checks"] == 5
    # As a set: an evaluation run again after TIMING_INCONSISTENT (a loaded machine) reads the same names.
    assert set(loaded) == {f"w0_t{t}_r0.kpt" for t in range(5)} | {f"w0_c{j}.kpt" for j in range(5)}

    loaded.clear()
    # Every other call scaled by 1 + 4e-7 (three float32 steps above 1): a trial's two runs always differ,
    # by far less than the tolerance. (Random noise of 1e-6 rounded to the same float32 about 1 time in 8.)
    noisy = ("import torch\n\n_calls = [0]\n\n\ndef run(a, b):\n    _calls[0] += 1\n"
             "    return (1 + 4e-7 * (_calls[0] % 2)) * torch.nn.functional.silu(a) * b\n")
    outcome = evaluate(SWIGLU, candidate("noisy", noisy), LOADS[:1], Tolerance(), settings(tmp_path / "n", trials=2))
    assert outcome.passed, outcome.log
    c = outcome.results[0].correctness or {}
    assert c["second_runs_identical"] == 0
    assert {f"w0_t{t}_r1.kpt" for t in range(2)} <= set(loaded)


def test_a_second_run_with_nan_where_the_answer_is_nan_is_still_bit_for_bit_the_first(tmp_path: Path) -> None:
    """NaN is not equal to NaN, but its bits are its bits: a kernel whose answer holds NaN (the square
    root of a negative input) gets the marker, not a second file of the same bits."""
    sqrt = "import torch\n\ndef run(a, b):\n    return torch.sqrt(a) * b\n"
    definition = Definition.from_json({**SWIGLU.to_json(), "name": "sqrt_mul", "reference": sqrt})
    outcome = evaluate(definition, candidate("sqrt", sqrt, definition="sqrt_mul"), LOADS[1:], Tolerance(),
                       settings(tmp_path, trials=2))
    assert outcome.passed, outcome.log
    assert (outcome.results[0].correctness or {})["second_runs_identical"] == 2


@pytest.mark.parametrize("name", SIMPLE)
def test_hostile_candidate_is_rejected(tmp_path: Path, name: str) -> None:
    outcome, expect = judge(tmp_path, name)
    assert outcome.status == expect, (outcome.status, outcome.log[-1500:])
    log = outcome.log
    why = {
        "zeros": "all zeros",
        "skipped_writes": "second poison",
        "patch_timer": "replaced time.perf_counter",
        "input_mutation": "modified an input",
        "forge_result": "malformed status 'PASSED'",
        "forge_outputs": "produced no outputs",
        "memory_hog": "alloc",
        "odd_tensors": "unreadable outputs",
        "late_thread": "NaN-poisoned",
        # issue 17: each break is refused by name, not by some other accident
        "lazy_output": "LAZY_OUTPUT",
        "lazy_mode": "LAZY_OUTPUT",
        "aten_override": "LAZY_OUTPUT",
        "rebind_harness": "HARNESS_TAMPERED",
        "rebind_harness_checks": "TIMING_INCONSISTENT",  # no in-process check is left: the parent's clock
        "precompute": "TIMING_INCONSISTENT",
        # the review of issue 17: the log's first word names the cheat
        "channel_proxy": "HARNESS_TAMPERED",
        "channel_proxy_deep": "TIMING_INCONSISTENT",
        # session 26: work moved into the harness's digest, after the end event
        "digest_hook": "replaced torch.sum",
        "digest_hook_restore": "replaced torch.sum",
    }.get(name)
    assert why is None or why in log, log[-1500:]
    if name.startswith("channel_proxy"):
        assert log.startswith(why), log[:300]
    if why == "TIMING_INCONSISTENT":  # measured again (EvalSettings.timing_retries) and refused again
        assert any(w.startswith("TIMING_RERUN: 1 earlier run") for w in outcome.warnings), outcome.warnings


def _where(outcome: Outcome) -> dict[str, object]:
    detail = json.loads(outcome.log) if outcome.log.startswith("{") else {"log": outcome.log[:80]}
    return {k: detail.get(k) for k in ("output", "trial", "run", "timed_call", "log")}


@pytest.mark.parametrize("name", ["value_cache", "partial", "forge_outputs", "odd_tensors"])  # deterministic: which file fails first
def test_judging_while_the_child_runs_reaches_the_verdict_of_judging_after_it(tmp_path: Path, name: str) -> None:
    """The parent judges each output file as the child completes it; the first wrong file, and so
    the verdict, must be the one a judgement after the child's exit finds."""
    during, expect = judge(tmp_path / "during", name)
    after, _ = judge(tmp_path / "after", name, judge_during=False)
    assert during.status == after.status == expect, (during.log[:300], after.log[:300])
    assert _where(during) == _where(after)


def test_an_honest_candidates_outputs_are_judged_while_it_runs(tmp_path: Path) -> None:
    outcome = evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), settings(tmp_path))
    assert outcome.passed, outcome.log
    assert outcome.phases["judge_during"] > 0 and "judge" in outcome.phases


def test_the_timing_mode_is_recorded_and_only_in_a_known_shape(tmp_path: Path) -> None:
    from kernelpro.runner.evaluator import Timing

    outcome = evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), settings(tmp_path, cuda_graphs=True))
    assert outcome.passed and {r.timing.mode for r in outcome.results if r.timing} == {"cpu"}  # graphs are CUDA's
    row = {"median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0, "std_ms": 0.0, "n": 3}
    assert Timing.from_json(row).mode == "events"
    assert Timing.from_json({**row, "mode": "cuda_graph"}).mode == "cuda_graph"
    assert Timing.from_json({**row, "mode": "events (CUDA graph capture failed: x)"}).mode.startswith("events (")
    assert Timing.from_json({**row, "mode": "<script>"}).mode == "events"  # the child's words, never shown raw
    assert Timing.from_json({**row, "mode": ["cuda_graph"]}).mode == "events"


def test_nothing_is_judged_while_the_child_times(tmp_path: Path) -> None:
    from kernelpro.runner.evaluator import _follow

    class Judge:
        finished, calls = False, 0

        def advance(self, quiet: object = None) -> None:
            assert quiet is keeper.quiet  # each comparison also holds the channel's lock
            self.calls += 1

    class Keeper:  # the parent's channel (runner/timekeeper.py), not a file the child could touch
        in_phase = True
        quiet = threading.Lock()

    j, keeper = Judge(), Keeper()
    _follow([j], keeper)  # type: ignore[list-item, arg-type]
    assert j.calls == 0
    keeper.in_phase = False
    _follow([j, Judge()], keeper)  # type: ignore[list-item, arg-type]
    assert j.calls == 1  # and the second workload waits for the first to be judged whole


def test_pointer_cache_is_caught_by_the_timed_calls_alone(tmp_path: Path) -> None:
    """With one trial (no perturbed trial), only the checked timed calls on re-randomised, reused
    buffers can tell: the cache returns what it computed for the buffer's previous values."""
    outcome, _ = judge(tmp_path, "pointer_cache", trials=1)
    assert outcome.status == "INCORRECT_NUMERICAL", outcome.log
    assert '"timed_call"' in outcome.log and "pointers" in outcome.log


def test_value_cache_is_caught_by_the_half_changed_trial(tmp_path: Path) -> None:
    outcome, _ = judge(tmp_path, "value_cache")
    assert outcome.status == "INCORRECT_NUMERICAL"
    assert json.loads(outcome.log)["trial"] == 4  # the last trial repeats trial 0 with a new second half


def test_reference_outputs_are_nowhere_to_be_found(tmp_path: Path) -> None:
    outcome, expect = judge(tmp_path, "reads_reference")
    assert outcome.status == expect
    assert "no reference outputs visible" in outcome.log and "evaluator cache 0 entries" in outcome.log


SECRETS = {"GITHUB_TOKEN": "ghp_adversarialTEST123", "KERNELPRO_LLM_API_KEY": "sk-adversarialTEST456",
           "OPENAI_API_KEY": "sk-openaiTEST789", "AWS_SECRET_ACCESS_KEY": "awsTEST000",
           "ACTIONS_RUNTIME_TOKEN": "actionsTEST111"}


def test_secrets_cannot_be_exfiltrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in SECRETS.items():
        monkeypatch.setenv(k, v)
    outcome, expect = judge(tmp_path, "env_secrets")
    assert outcome.status == expect
    assert "EXFILTRATED=" in outcome.log and "'HOME'" in outcome.log  # it did dump what it could see
    for k, v in SECRETS.items():
        assert k not in outcome.log and v not in outcome.log
    if network_isolation("cpu")[0]:
        # Its own pid namespace: /proc holds the candidate alone, not the parent with the secrets.
        assert "proc1" in outcome.log and "procNone" not in outcome.log


def test_scrubbed_env_refuses_a_secret_even_when_asked_to_pass_one() -> None:
    with pytest.raises(SandboxError, match="GITHUB_TOKEN"):
        scrubbed_env({"GITHUB_TOKEN": "x"})
    assert not [k for k in scrubbed_env({"HOME": "/tmp"}) if "TOKEN" in k or "KEY" in k]


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    got: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                got.append(conn.recv(4096))

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1], got
    srv.close()


def test_no_network_in_the_sandbox(tmp_path: Path, listener: tuple[int, list[bytes]], request: pytest.FixtureRequest) -> None:
    port, got = listener
    text, expect, _ = fixture("network")
    source = text.replace("PORT = 0", f"PORT = {port}")
    if not network_isolation("cpu")[0]:
        pytest.skip(f"this machine cannot make a network namespace: {network_isolation('cpu')[1]}")
    outcome, _ = judge(tmp_path, "network", source)
    assert outcome.status == expect
    assert any(w in outcome.log.lower() for w in ("unreachable", "refused", "permission denied")), outcome.log[-800:]
    assert got == []
    assert outcome.environment["sandbox"]["network"].startswith("isolated")
    # The same candidate without the namespace (and without Landlock's TCP rule) reaches the listener:
    # the check above has teeth.
    request.getfixturevalue("unconfined")
    outcome, _ = judge(tmp_path, "network", source, isolate_network=False)
    assert "connected and sent" in outcome.log
    assert got and got[0].startswith(b"EXFILTRATED")
    assert outcome.environment["sandbox"]["network"] == f"{NO_ISOLATION}: turned off"


def test_isolation_unavailable_is_recorded_not_fatal() -> None:
    prefix, why = network_isolation("cpu", unshare="false")  # a binary that always fails
    assert prefix == () and why.startswith(NO_ISOLATION) and "exit 1" in why
    prefix, why = network_isolation("cpu", unshare="no-such-unshare-binary")
    assert prefix == () and "no unshare" in why


def test_sleeping_past_the_limit_is_a_timeout(tmp_path: Path) -> None:
    outcome, expect = judge(tmp_path, "sleeps", timeout_s=20)
    assert outcome.status == expect and "killed after 20 s" in outcome.log


def test_a_crash_ends_only_that_candidate(tmp_path: Path) -> None:
    crash, _ = judge(tmp_path, "segfault")
    assert crash.status == "RUNTIME_ERROR" and "exit code -11" in crash.log
    after = evaluate(SWIGLU, candidate("after", PY_TORCH), LOADS, Tolerance(), settings(tmp_path))
    assert after.passed, after.log


def test_the_parent_kills_a_group_above_its_resident_memory_limit() -> None:
    """The limit that also holds under CUDA (where RLIMIT_DATA is not set): a process of the group
    that touches 1.5 GiB is killed at 400 MiB, quickly, and its output tail survives."""
    import subprocess
    import sys
    import time

    from kernelpro.runner.sandbox import _watch

    hog = "import time; print('start', flush=True); x = b'x' * (1536 * 2**20); time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", hog], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    t0 = time.perf_counter()
    ended = _watch(proc, lambda: t0 + 60, 400)
    assert ended.reason == "memory" and ended.rss_mb > 400 and "start" in ended.log
    assert time.perf_counter() - t0 < 20 and proc.returncode == -9


def test_a_childs_triton_cache_keeps_its_autotune_picks(tmp_path: Path) -> None:
    """With a cache, autotune results are cached in it, so the profiler's child (started on a copy
    of the candidate's cache) neither recompiles nor re-benchmarks every config."""
    from kernelpro.runner.sandbox import child_variables

    env = child_variables(tmp_path, "cuda", tmp_path / "cache")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "cache") and env["TRITON_CACHE_AUTOTUNING"] == "1"
    assert "TRITON_CACHE_AUTOTUNING" not in child_variables(tmp_path, "cuda", None)
    assert child_variables(tmp_path, "cpu", None)["TRITON_INTERPRET"] == "1"


def test_profiling_stages_split_the_childs_time_by_what_its_harness_reported() -> None:
    from kernelpro.runner.profiler import _child_stages

    stages: dict[str, float] = {}
    doc = {"phases": {"startup": 1.5}, "build": {"seconds": 3.25}, "profile": {"warmup_s": 0.5, "profiled_s": 2.0,
                                                                               "profiled": "w0"}}
    _child_stages(stages, "ncu", 9.0, doc)
    assert stages == {"ncu": 9.0, "ncu.startup": 1.5, "ncu.import": 3.25, "ncu.warmup": 0.5, "ncu.profiled": 2.0}
    _child_stages(stages, "timeline", 4.0, None)  # a crashed child: its wall time only
    assert stages["timeline"] == 4.0 and "timeline.import" not in stages


def test_the_gate_builds_in_a_triton_cache_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate of the search shares the Triton cache and could plant a slow build of the
    baseline there; the final gate's evaluations use fresh caches, removed afterwards."""
    import kernelpro.runner.gate as gate_mod
    import kernelpro.runner.optimize as opt
    from kernelpro.runner.candidate import Candidate
    from kernelpro.runner.target import Target

    seen: list[Path | None] = []

    def spy(*args: object) -> Outcome:
        seen.append(args[-1].cache_dir)  # type: ignore[attr-defined]
        return evaluate(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(gate_mod, "evaluate", spy)
    target = Target("swiglu", "python", ("cand.py",), "cand.py::run", SWIGLU, tuple(LOADS))
    base = Candidate(candidate("base", PY_TORCH), None, "init", "baseline")
    shared = tmp_path / "shared-cache"
    rs = opt.RunSettings(gate_trials=5, evaluation=settings(tmp_path, cache_dir=shared))
    g = opt._gate(target, base, base, tuple(LOADS), rs)
    assert g.per_workload and g.correctness[0]["trials"] == 5
    # PR, candidate, PR: the PR's two runs share a cache, the candidate builds in one of its own (issue 18).
    assert len(seen) == 3 and seen[0] == seen[2] != seen[1] and None not in seen
    assert shared not in seen and not any(c.exists() for c in seen if c is not None)


def test_a_baseline_that_fails_in_the_gate_is_reported_with_its_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H200 a gate refused a 3.7x candidate with only "baseline failed in the gate:
    RUNTIME_ERROR": nobody could tell why (session 17). The reason carries the baseline's log tail."""
    import dataclasses

    import kernelpro.runner.gate as gate_mod
    import kernelpro.runner.optimize as opt
    from kernelpro.runner.candidate import Candidate
    from kernelpro.runner.target import Target

    calls: list[int] = []

    def failing_first(*args: object) -> Outcome:
        calls.append(1)
        o = evaluate(*args)  # type: ignore[arg-type]
        if len(calls) == 1:
            return dataclasses.replace(o, status="RUNTIME_ERROR", log="Traceback ...\nRuntimeError: CUDA error: out of memory\n")
        return o

    monkeypatch.setattr(gate_mod, "evaluate", failing_first)
    target = Target("swiglu", "python", ("cand.py",), "cand.py::run", SWIGLU, tuple(LOADS))
    base = Candidate(candidate("base", PY_TORCH), None, "init", "baseline")
    rs = opt.RunSettings(gate_trials=2, evaluation=settings(tmp_path))
    g = opt._gate(target, base, base, tuple(LOADS), rs)
    assert not g.passed
    assert g.reason == "baseline failed in the gate: RUNTIME_ERROR: Traceback ... RuntimeError: CUDA error: out of memory", g.reason


@pytest.mark.parametrize(("candidate_ms", "passes"), [(0.85, False), (0.7, True)])
def test_the_gate_credits_no_speedup_inside_the_baselines_own_spread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, candidate_ms: float, passes: bool) -> None:
    """On the H200 an A/A of a 7 us kernel of two PyTorch launches measured 1.09x against a copy of
    itself, and 3 of 100 workloads passed the bare gamma 1.03 (session 22). The gate now asks, per
    workload, for gamma or the baseline's p90/p10 where wider: 1.18x inside a 1.33 spread is none."""
    import dataclasses

    import kernelpro.runner.gate as gate_mod
    import kernelpro.runner.optimize as opt
    from kernelpro.runner.candidate import Candidate
    from kernelpro.runner.evaluator import Timing
    from kernelpro.runner.target import Target

    calls: list[int] = []

    def timed(*args: object) -> Outcome:
        calls.append(1)
        o = evaluate(*args)  # type: ignore[arg-type]
        # B, C, B: the baseline at 1 ms with a p90/p10 of 1.2/0.9, the candidate steady at candidate_ms.
        t = Timing(candidate_ms, candidate_ms, candidate_ms, 0.0, 50) if len(calls) == 2 else Timing(1.0, 0.9, 1.2, 0.1, 50)
        return dataclasses.replace(o, results=tuple(dataclasses.replace(r, timing=t) for r in o.results))

    monkeypatch.setattr(gate_mod, "evaluate", timed)
    target = Target("swiglu", "python", ("cand.py",), "cand.py::run", SWIGLU, tuple(LOADS))
    base = Candidate(candidate("base", PY_TORCH), None, "init", "baseline")
    g = opt._gate(target, base, base, tuple(LOADS), opt.RunSettings(gate_trials=2, evaluation=settings(tmp_path)))
    assert [round(r["needed"], 3) for r in g.per_workload] == [1.333] * len(LOADS)
    assert g.passed is passes, g.reason
    if not passes:
        assert g.reason.startswith("not faster than 1.03x, or the baseline's own timing spread (p90/p10) where wider")
        assert f"{LOADS[0].uuid}: 1.176x, needs 1.333x" in g.reason


_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_adversarial import LOADS, SWIGLU, candidate, fixture, settings
from kernelpro.runner.evaluator import evaluate
from kernelpro.runner.target import Tolerance
from pathlib import Path
source, _, dps = fixture("env_secrets")
es = settings(Path(sys.argv[2]), isolate_network=sys.argv[3] == "1", trials=1)
o = evaluate(SWIGLU, candidate("env", source, dps), LOADS, Tolerance(), es)
print(json.dumps({"status": o.status, "log": o.log, "sandbox": o.environment["sandbox"]}))
"""


@pytest.mark.parametrize("isolate", [True, False], ids=["namespaces", "no_namespaces"])
def test_secrets_in_the_orchestrators_own_environment_stay_there(tmp_path: Path, isolate: bool) -> None:
    """The secrets are in the initial environment of the process that runs the evaluation (as in a
    workflow step), where /proc/PID/environ shows them; the candidate reads every environ it can reach.
    With or without namespaces it finds none: the orchestrator makes itself non-dumpable."""
    import os
    import subprocess
    import sys

    if not isolate and os.geteuid() == 0:
        pytest.skip("as root a process reads any environ (CAP_SYS_PTRACE) unless a user namespace drops it: "
                    "without namespaces the runner must not be root (docs/github.md)")
    if isolate and not network_isolation("cpu")[0]:
        pytest.skip(f"no namespaces on this machine: {network_isolation('cpu')[1]}")
    env = {**os.environ, **SECRETS}
    p = subprocess.run([sys.executable, "-c", _DRIVER, str(Path(__file__).parent), str(tmp_path), "1" if isolate else "0"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["status"] == "RUNTIME_ERROR" and "EXFILTRATED=" in res["log"]
    assert res["sandbox"]["parent"] == "parent not dumpable"
    if not isolate:
        assert re.search(r"proc\d+': 'unreadable: Permission denied", res["log"]), res["log"][-1500:]
    for k, v in SECRETS.items():
        assert k not in res["log"] and v not in res["log"]


def test_the_profile_child_imports_the_candidate_before_anything_else(tmp_path: Path) -> None:
    """In profile mode the build comes first (before CUDA, under ncu); the result still separates
    start-up from the import, and a candidate that does not import is reported as such."""
    from kernelpro.runner.evaluator import _request
    from kernelpro.runner.sandbox import run_child

    slow_import = "import time\ntime.sleep(0.5)\n" + PY_TORCH
    req = {**_request(SWIGLU, candidate("slow", slow_import), LOADS[:1], Tolerance(), settings(tmp_path)), "mode": "profile"}
    child = run_child(req, timeout_s=60, device="cpu")
    assert child.status == "OK" and child.result is not None, child.log
    assert child.result["build"]["status"] == "OK" and child.result["build"]["seconds"] >= 0.5
    assert 0 <= child.result["phases"]["startup"] < child.seconds - 0.5  # the import is not start-up
    assert "error" in child.result["profile"]  # no CUDA here: profiling itself fails, as a value
    broken = {**req, "solution": candidate("broken", "raise ImportError('no such package')\n").to_json()}
    child = run_child(broken, timeout_s=60, device="cpu")
    assert child.status == "OK" and child.result["build"]["status"] != "OK" and "profile" not in child.result


_TRUNCATING = """
import json, sys
sys.path.insert(0, sys.argv[1])
from test_adversarial import LOADS, SWIGLU, candidate, fixture, settings
from kernelpro.runner.evaluator import evaluate
from kernelpro.runner.target import Tolerance
from pathlib import Path
source, _, dps = fixture("truncate_outputs")
o = evaluate(SWIGLU, candidate("truncating", source, dps), LOADS, Tolerance(), settings(Path(sys.argv[2]), trials=2))
print(json.dumps({"status": o.status, "log": o.log[-500:]}))
"""


def test_truncating_an_output_file_cannot_crash_the_parent(tmp_path: Path) -> None:
    """Issue 17, break 4: the candidate truncates an output file the parent has read and may still
    hold. A parent that memory-mapped it dies of SIGBUS on its next access (exit -7: no outcome, no
    journal); one that read the bytes into its own memory judges the candidate as any other."""
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", _TRUNCATING, str(Path(__file__).parent), str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-1500:])
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["status"] == fixture("truncate_outputs")[1], res


@pytest.mark.parametrize("pages", [False, True], ids=["bytearray", "pages"])
def test_the_parent_reads_a_childs_file_only_as_a_capped_regular_file(tmp_path: Path, pages: bool) -> None:
    """No symlink followed (to a secret, or /dev/zero), no FIFO waited on, no file larger than its
    contents can need: each is refused with an error the judge turns into a verdict. The same for
    the outputs' reader into fresh pages (read_capped_pages)."""
    import os

    from kernelpro.runner import sandbox

    read_capped = sandbox.read_capped_pages if pages else sandbox.read_capped
    (tmp_path / "ok").write_bytes(b"x" * 100)
    assert read_capped(tmp_path / "ok", 100) == b"x" * 100
    with pytest.raises(OSError, match="more than"):
        read_capped(tmp_path / "ok", 99)
    (tmp_path / "link").symlink_to(tmp_path / "ok")
    with pytest.raises(OSError):
        read_capped(tmp_path / "link", 1000)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        read_capped(tmp_path / "fifo", 1000)  # opened non-blocking: no writer, no wait


def test_a_garbage_output_file_is_a_verdict_never_a_crash(tmp_path: Path) -> None:
    """What the judge raises on a file the candidate wrote becomes that candidate's status."""
    import torch

    from kernelpro.runner.evaluator import _OutputJudge, _Verdict

    judge = _OutputJudge.__new__(_OutputJudge)
    judge.cap, judge.named = 1 << 20, [("out", None)]
    (tmp_path / "bad.pt").write_bytes(b"PK\x03\x04 not a zip")
    with pytest.raises(_Verdict, match="unreadable outputs"):
        judge._judge(tmp_path / "bad.pt", None, None, {"trial": 0})
    # A torch.save file (the format before session 11) is no longer read at all: nothing unpickles.
    torch.save([torch.zeros(1000)], tmp_path / "pickled.pt")
    with pytest.raises(_Verdict, match="not an outputs file kernelpro wrote: no header"):
        judge._judge(tmp_path / "pickled.pt", None, None, {"trial": 0})


def test_no_two_candidates_see_the_same_secret_seeds(tmp_path: Path) -> None:
    """The secret seeds of the checked timed calls are never handed to two candidates: one could
    leave the seeds it saw where the next reads them (the shared Triton cache). When every seed of
    a reference was handed out, the reference is computed again with new ones."""
    from kernelpro.runner.evaluator import _pool_size, _reference_for, _request

    s = settings(tmp_path, trials=1)
    req = _request(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), s)
    size = _pool_size(req)
    assert size >= s.checks * 2
    seen: set[int] = set()
    first = None
    for k in range(size // s.checks):
        got = _reference_for(req, s, take=s.checks)
        assert not isinstance(got, str), got
        ref, offset = got
        first = first or ref
        assert ref is first and offset == k * s.checks
        mine = {x for p in ref.pools for x in p[offset:offset + s.checks]}
        assert len(mine) == s.checks * len(LOADS) and not mine & seen
        seen |= mine
    fresh = _reference_for(req, s, take=s.checks)
    assert not isinstance(fresh, str) and fresh[0] is not first and fresh[1] == 0
    assert not {x for p in fresh[0].pools for x in p} & seen
    # Only the spent check outputs were computed again: the trials' are the same objects.
    assert first is not None and fresh[0].trials is first.trials and fresh[0].checks is not first.checks
    assert len(fresh[0].checks[0]) == size



def test_a_search_computes_the_next_reference_beside_the_judging_never_reusing_a_seed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the seeds left would not serve one more candidate (Liger's SwiGLU: room for one candidate's
    checks), a search's evaluation computes the next reference once its child has exited, beside its
    judging, and waits for it before it returns: the next candidate's child starts at once, on seeds
    no candidate saw, and no reference child runs beside a candidate's."""
    import kernelpro.runner.evaluator as ev

    monkeypatch.setattr(ev, "POOL_BYTES", 1)  # one candidate's checks a reference
    monkeypatch.setattr(ev, "_REFERENCES", ev.OrderedDict())
    monkeypatch.setattr(ev, "_POOL_USED", {})
    order: list[str] = []
    running: list[str] = []
    caches: list[tuple[str, object]] = []
    real_child, real_keeper = ev.run_child, ev.Timekeeper

    def child(req: dict, **kw: object) -> object:
        mode = req.get("mode", "evaluate")
        assert not running, f"a {mode} child started while a {running} child ran"
        running.append(mode)
        caches.append((mode, kw["cache_dir"]))
        collect = kw["collect"]

        def exited(*a: object) -> object:  # collect runs once the child's process has exited
            running.remove(mode)
            order.append(mode)
            return collect(*a)  # type: ignore[operator]

        try:
            return real_child(req, **{**kw, "collect": exited})
        finally:
            if mode in running:
                running.remove(mode)

    handed: list[set[int]] = []

    def keeper(pools: list, *a: object, **kw: object) -> object:
        handed.append({x for p in pools for x in p})
        return real_keeper(pools, *a, **kw)

    monkeypatch.setattr(ev, "run_child", child)
    monkeypatch.setattr(ev, "Timekeeper", keeper)
    s = settings(tmp_path, trials=1, reference_ahead=True)
    outcomes = [ev.evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), s) for _ in range(3)]
    assert [o.status for o in outcomes] == ["PASSED"] * 3, outcomes[0].log
    # The first reference before the first child; every later one during the evaluation before its own.
    assert order == ["reference", "evaluate", "reference"] * 1 + ["evaluate", "reference"] * 2, order
    assert all(o.phases["reference_ahead"] > 0 for o in outcomes)
    assert len(handed) == 3 and all(len(h) == s.checks * len(LOADS) for h in handed)
    assert not (handed[0] & handed[1] or handed[1] & handed[2] or handed[0] & handed[2])
    # A reference computed after a candidate ran never uses a candidate's Triton cache, where that
    # candidate could have planted a build of a kernel the reference runs: a fresh one of its own.
    assert {c for m, c in caches if m == "reference"} == {None}
    assert {c for m, c in caches if m == "evaluate"} == {s.cache_dir}
    # Without it (a single evaluation, the gate) nothing is computed ahead.
    order.clear()
    ev.evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), replace(s, reference_ahead=False))
    assert order == ["evaluate"] and len(handed) == 4 and not handed[3] & (handed[0] | handed[1] | handed[2])


def test_a_failed_judge_is_freed_with_its_evaluation_without_a_garbage_collection(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge keeps its failure; the failure's traceback held the judge's frames, and they the judge, its
    reference and the candidate's loaded outputs (on a GPU, their copies too): a cycle that only a full
    garbage collection freed, a GB and more per failing Liger candidate in a search's long-lived parent."""
    import gc
    import weakref

    import kernelpro.runner.evaluator as ev

    judges: list[weakref.ref] = []
    real_init = ev._OutputJudge.__init__

    def init(self: object, *a: object, **kw: object) -> None:
        real_init(self, *a, **kw)  # type: ignore[arg-type]
        judges.append(weakref.ref(self))

    monkeypatch.setattr(ev._OutputJudge, "__init__", init)
    wrong = candidate("wrong", PY_TORCH.replace("* b", "* b * 1.5"))
    gc.collect()
    gc.disable()
    try:
        outcome = ev.evaluate(SWIGLU, wrong, LOADS, Tolerance(), settings(tmp_path, trials=1))
        assert outcome.status == "INCORRECT_NUMERICAL", outcome.log
        assert judges and [j() for j in judges] == [None] * len(judges)
    finally:
        gc.enable()

def test_only_an_inconsistent_timing_is_measured_again_and_the_rerun_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """A loaded host can stretch an honest phase past its calibrated loop: such an evaluation runs once
    more (its warnings say so); any other failure, or a second refusal past the retries, stands."""
    import kernelpro.runner.evaluator as ev
    from kernelpro.runner.evaluator import EvalSettings, WorkloadResult

    def outcome(status: str, log: str = "") -> Outcome:
        return Outcome("h", status, (WorkloadResult("w", status, log),), log=log)

    inconsistent = outcome("RUNTIME_ERROR", "TIMING_INCONSISTENT: the timed calls add up to 20.7 ms but ...")
    for queue, retries, want, runs in [
        ([inconsistent, outcome("PASSED")], 1, "PASSED", 2),
        ([inconsistent, inconsistent, outcome("PASSED")], 1, "RUNTIME_ERROR", 2),
        ([inconsistent, inconsistent, outcome("PASSED")], 2, "PASSED", 3),
        ([inconsistent], 0, "RUNTIME_ERROR", 1),
        ([outcome("RUNTIME_ERROR", "TIMING_PROTOCOL: 3 timed calls reported, 4 announced")], 1, "RUNTIME_ERROR", 1),
        ([outcome("INCORRECT_NUMERICAL", "TIMING_INCONSISTENT: a candidate's own words")], 1, "INCORRECT_NUMERICAL", 1),
        ([outcome("RUNTIME_ERROR", "a crash that prints TIMING_INCONSISTENT: later")], 1, "RUNTIME_ERROR", 1),
    ]:
        left = list(queue)
        monkeypatch.setattr(ev, "_evaluate_once", lambda *a, left=left: left.pop(0))
        got = ev.evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), EvalSettings(timing_retries=retries))
        assert (got.status, len(queue) - len(left)) == (want, runs), (queue, retries)
        notes = [w for w in got.warnings if w.startswith("TIMING_RERUN:")]
        assert len(notes) == (runs > 1) and all(f"{runs - 1} earlier run(s)" in n and "20.7 ms" in n for n in notes)


# --------------------------------------------------------------------------- issue 17's review


def test_poisoned_diagnostics_never_reach_the_journal_or_the_report(tmp_path: Path) -> None:
    """Break 1: the child's ``phases``, ``build.seconds`` and ``timeline`` are the candidate's to
    rewrite; the parent keeps only the known phases as finite seconds, drops a timeline it did not
    ask for (with a warning naming it), and a journal written before that no longer crashes the report."""
    import math

    from kernelpro.runner.evaluator import PHASES, clean_timeline
    from kernelpro.runner.evaluator import seconds as secs
    from kernelpro.runner.report import _phase

    outcome, expect = judge(tmp_path, "poison_diagnostics")
    assert outcome.status == expect == "PASSED", outcome.log
    assert set(outcome.phases) <= set(PHASES) and "evil" not in outcome.phases
    assert all(type(v) is float and math.isfinite(v) and v >= 0 for v in outcome.phases.values()), outcome.phases
    assert outcome.phases["startup"] == 0.0 and outcome.build_seconds == 0.0 and outcome.timeline is None
    assert outcome.warnings and outcome.warnings[-1].startswith("TIMELINE_DROPPED"), outcome.warnings
    # a journal line of the old evaluator, poisoned: a resume reads it clean
    old = {**outcome.to_json(), "phases": {"startup": "x", "verify": math.nan, "evil": {"a": 1}, "time": 1.5},
           "build_seconds": math.inf, "timeline": {"bogus_field": 1, "kernels": []}}
    back = Outcome.from_json(old)
    assert back.phases == {"startup": 0.0, "verify": 0.0, "time": 1.5} and back.build_seconds == 0.0
    assert back.timeline is None
    # the report's summary adds up whatever an Outcome holds
    assert sum(secs(_phase(p, "startup")) for p in ({"startup": "x"}, {"startup": 2.0}, None)) == 2.0
    good = {"wall_us": 10.0, "kernel_launches": 2, "kernel_us": 5.0, "gaps": 0, "gap_us": 0.0,
            "gap_threshold_us": 5.0, "launch_overhead_pct": 50.0, "avg_launch_ns": 100.0, "syncs": 0,
            "kernels": ["k"]}
    assert clean_timeline(good)[0] == good
    assert clean_timeline({**good, "kernels": [1]})[0] is None
    assert clean_timeline({**good, "gaps": "1"})[0] is None
    assert clean_timeline({"error": "boom"})[0] == {"error": "boom"}


def test_the_timing_mode_is_the_parents_not_the_childs_label() -> None:
    """Break 2: the parent sets the mode from the device and the cuda_graphs setting; with graphs
    the child may say the capture failed; any other label is a protocol violation."""
    from kernelpro.runner.evaluator import _Verdict, timing_mode

    assert timing_mode("cpu", "cpu", True) == "cpu"
    assert timing_mode("events", "cuda", False) == "events"
    assert timing_mode("cuda_graph", "cuda", True) == "cuda_graph"
    failed = timing_mode("events (CUDA graph capture failed: it\nsynchronised)", "cuda", True)
    assert failed == "events (CUDA graph capture failed: it synchronised)"
    for label, device, graphs in (("cuda_graph", "cpu", True), ("cuda_graph (forged label)", "cuda", True),
                                  ("cuda_graph", "cuda", False), ("events", "cuda", True), (["cpu"], "cpu", False),
                                  ("events (CUDA graph capture failed: x)", "cuda", False)):
        with pytest.raises(_Verdict) as e:
            timing_mode(label, device, graphs)
        assert e.value.log.startswith("TIMING_PROTOCOL"), e.value.log


def test_an_honest_slow_candidate_fits_the_parents_clock_call_by_call(tmp_path: Path) -> None:
    """The control of channel_proxy_deep: 45 ms of honest work a call passes the per-call check."""
    src = "import time\nimport torch\n\ndef run(a, b):\n    time.sleep(0.045)\n    return torch.nn.functional.silu(a) * b\n"
    outcome = evaluate(SWIGLU, candidate("slow", src), LOADS, Tolerance(), settings(tmp_path))
    assert outcome.passed, outcome.log
    assert all(r.timing and r.timing.median_ms > 40 for r in outcome.results)
    # The parent's own figures per call go with each timing (the numbers a GPU floor needs from honest
    # kernels first, docs/timing.md), and the journal keeps them.
    for r in Outcome.from_json(json.loads(json.dumps(outcome.to_json()))).results:
        t = r.timing
        assert t is not None and t.wall_ms is not None and t.loop_ms is not None, t
        assert 0 < t.loop_ms < 40 < t.median_ms <= t.wall_ms < t.median_ms + t.loop_ms + 20, t


def test_clearing_the_record_of_dispatched_operators_hides_nothing(tmp_path: Path) -> None:
    """Break 5: each operator goes to the parent as soon as a call dispatches it; the parent's copy
    is what the search's ``delegated`` rule reads."""
    from kernelpro.runner.screen import delegated

    outcome, expect = judge(tmp_path, "hide_ops")
    assert outcome.status == expect == "PASSED", outcome.log
    assert {"aten::exp", "aten::div", "aten::mul"} <= set(outcome.torch_ops), outcome.torch_ops
    why = delegated(outcome.torch_ops, (), "triton")
    assert why is not None and "aten::exp" in why


def test_counting_the_parents_keep_answers_does_not_tell_when_the_checks_are_over(tmp_path: Path) -> None:
    """Break 7: the parent keeps decoy calls besides the secret checks, so a candidate that skips its
    work once it has seen as many 'keep' answers as there are checks skips on a check (it would pass
    by luck about 2 % of the time: one more evaluation, as the final gate makes, is allowed)."""
    for attempt in range(3):
        outcome, expect = judge(tmp_path / str(attempt), "adaptive_skip", reps_cpu=40)
        if outcome.status == expect:
            break
    assert outcome.status == expect, outcome.log[:500]
    assert '"timed_call"' in outcome.log and "drawn in secret" in outcome.log


def test_the_number_of_kept_calls_is_drawn() -> None:
    from kernelpro.runner.timekeeper import Timekeeper

    keeper = Timekeeper([[1, 2, 3, 4, 5]], "cpu")
    try:
        counts = {len(keeper._decoys(40, list(range(5)))) for _ in range(200)}
        assert len(counts) > 3 and max(counts) > 0 and all(c <= 35 for c in counts)
        assert keeper._decoys(3, [0, 1, 2]) == set()  # every call checked: nothing to hide among
    finally:
        keeper.close()


def test_a_helper_that_leaves_the_group_cannot_escape_the_memory_limit(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Break 4: a setsid helper filling shared memory is counted (every descendant, shared pages
    included) and the child is killed by name."""
    from kernelpro.runner import evaluator

    monkeypatch.setattr(evaluator, "_STARTUP_MB", 1024)  # the watchdog at 1.5 GiB, the helper maps 3
    outcome, expect = judge(tmp_path, "memory_escape", memory_limit_mb=512)
    assert outcome.status == expect, outcome.log[:500]
    assert outcome.log.startswith("MEMORY_LIMIT"), outcome.log[:500]


def test_gpu_timing_waits_on_the_gpu_before_every_timed_call_by_default(tmp_path: Path) -> None:
    """Without the GPU's wait before each start event, a short kernel's time held the host's launch
    latency whenever the GPU had drained the loop's earlier work: an A/A through the final gate on the
    H200 called the copy faster in 34 of 100 rows, and 0 of 100 with a 100 us wait
    (benchmarks/results-h200-session20). Every GPU evaluation asks for it unless told otherwise: the
    search's, the gate's and the base comparison's settings all derive from these defaults."""
    from kernelpro.runner.evaluator import _request
    from kernelpro.runner.result import RunSettings

    for es in (EvalSettings(device="cuda"), RunSettings().evaluation, replace(RunSettings().evaluation, reps=50, trials=5)):
        req = _request(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), es)
        assert req["timing"]["hold_us"] == 100.0


def test_the_judges_tail_after_the_exit_is_its_own_phase_not_the_childs_teardown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The follower judges outputs while the child runs, and once the timing phase is over it judges
    every file left in one go. The child's exit was read after that thread was joined, so 'teardown'
    held the judging (session 18: teardown = time + judging within 0.35 s in 9 journals). The exit is
    read before the join now; the wait for the judge is 'judge_tail'."""
    from kernelpro.runner import evaluator

    real = evaluator._follow
    held = {"done": False}

    def slow(judges, keeper):  # type: ignore[no-untyped-def]
        if not held["done"]:  # the first head start outlasts the child by about 3 s
            held["done"] = True
            time.sleep(3.0)
        real(judges, keeper)

    monkeypatch.setattr(evaluator, "_follow", slow)
    out = evaluate(SWIGLU, candidate("honest", PY_TORCH), LOADS, Tolerance(), settings(tmp_path, trials=1))
    assert out.passed, out.log
    assert out.phases["judge_tail"] > 1.0, out.phases
    assert out.phases["teardown"] < out.phases["judge_tail"], out.phases


def test_the_timing_channel_takes_no_method_on_its_instance() -> None:
    """A red-team candidate of session 26 set ``send`` on the channel instance: the class-level checks of
    _check_primitives saw nothing (the parent's clock refused it, TIMING_INCONSISTENT). The channel has no
    instance dictionary now, so the assignment itself fails in the candidate."""
    import os

    from kernelpro.runner.harness import _Channel

    r, w = os.pipe()
    try:
        channel = _Channel(r, w)
        with pytest.raises(AttributeError):
            channel.send = lambda doc: None  # type: ignore[method-assign]
    finally:
        os.close(r)
        os.close(w)


SPARSE_CACHE = '''
import os
# Written before the import of torch: one file of 1 TiB in the candidate's compile cache, holding no block.
_d = os.environ["TRITON_CACHE_DIR"]
with open(os.path.join(_d, "0" * 16 + ".cubin"), "wb") as f:
    f.truncate(1 << 40)

import torch

def run(a, b):
    return torch.nn.functional.silu(a) * b
'''


def test_a_compile_cache_past_its_limit_is_dropped_and_the_upload_reads_no_huge_file(tmp_path: Path) -> None:
    """A candidate's Triton cache lies in the results folder, and the secret scan before the upload
    (kernelpro/outbox.py seal) read every byte of every file there: a sparse file of 1 TiB, which costs
    the candidate no disk and no time, would have kept it reading for hours and the run's results from
    being uploaded (a red-team probe, session 27). The cache is removed past CACHE_LIMIT, with a
    warning, and seal removes any file past LARGEST unread."""
    from kernelpro.outbox import LARGEST, seal

    out = tmp_path / "out"
    cache = out / ".triton-cache" / "0123456789abcdef"  # as Run._triton_cache lays it out
    outcome = evaluate(SWIGLU, candidate("sparse", SPARSE_CACHE), LOADS, Tolerance(),
                       settings(tmp_path, trials=1, cache_dir=cache))
    assert outcome.passed, outcome.log[-500:]
    assert any(w.startswith("CACHE_DROPPED") for w in outcome.warnings), outcome.warnings
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < 1 << 30
    huge = out / "trace.jsonl"
    with open(huge, "wb") as f:
        f.truncate(LARGEST + 1)
    t0 = time.perf_counter()
    removed = seal(out, {"KERNELPRO_LLM_API_KEY": "sk-0123456789abcdefghij"})
    assert time.perf_counter() - t0 < 5 and not huge.exists()
    assert [r.path for r in removed] == ["trace.jsonl"] and "removed unread" in removed[0].why
