"""The standby ncu child (runner/standby.py): the real harness in a real sandboxed child, under a
fake ncu that writes the H200's recorded raw page to its log file and then runs the command it was
given, as ncu does. The requests run on the CPU; the GPU test runs the real ncu
(tests/test_gpu.py::test_profiling_with_a_standby_ncu_child)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from kernelpro.runner.evaluator import EvalSettings, _request
from kernelpro.runner.profiler import ProfileSettings, _ncu, _profile, merge_cache, start_standby
from kernelpro.runner.standby import NcuStandby, imports_of
from kernelpro.runner.target import Tolerance
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile, Workload, load_definition

# The fake tools write into the test's folder: they run unconfined (conftest.py).
pytestmark = pytest.mark.usefixtures("fake_tools_run_unconfined")

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "tests" / "fixtures" / "h200"
DEFINITION = load_definition(ROOT / "examples" / "demo" / "commit1" / "definitions" / "swiglu.json")
WORKLOAD = Workload.make(DEFINITION, {"M": 64})


def _solution(source: str, files: tuple[SourceFile, ...] = ()) -> Solution:
    return Solution("t", DEFINITION.name, "t", BuildSpec("triton", ("cuda",), "k.py::swiglu", destination_passing_style=False),
                    (SourceFile("k.py", source), *files))


FAST = _solution("import json\ndef swiglu(a, b):\n    return a * b\n")


@pytest.fixture
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    script = tmp_path / "bin" / "ncu"
    script.parent.mkdir()
    script.write_text(f"""#!/bin/sh
echo "$@" >> "{tmp_path}/args"
prev=""
while [ $# -gt 0 ]; do
  a="$1"; shift
  if [ "$prev" = "--log-file" ]; then log="$a"; cat "{H200 / "ncu_full_raw_tuned.csv"}" > "$a"; break; fi
  prev="$a"
done
exec "$@"
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _req(solution: Solution = FAST) -> dict:
    return {**_request(DEFINITION, solution, [WORKLOAD], Tolerance(), EvalSettings(device="cpu")), "mode": "profile"}


def test_the_request_runs_after_the_imports_and_its_clock_starts_when_given(fake_ncu: Path) -> None:
    sb = NcuStandby(str(fake_ncu), ["json", "kernelpro_no_such_module"], timeout_s=60)
    try:
        time.sleep(3.0)  # the standby starts Python and torch meanwhile, as during an evaluation
        taken = sb.take(_req())
        assert taken is not None
        child, seconds = taken
        assert child.status == "OK", child.log
        doc = child.result or {}
        assert doc["standby"]["preloaded"] == ["json"] and doc["standby"]["failed"] == ["kernelpro_no_such_module"]
        assert doc["standby"]["waited_s"] > 0 and doc["build"]["status"] == "OK"
        # Start-up, imports and the wait are the standby's, not the candidate's; the seconds since the
        # request are less than the child's whole life.
        assert doc["phases"]["startup"] < 1.0 and seconds < child.seconds and sb.up_s >= 3.0
        assert "cudart" in doc["profile"]["error"] or "CUDA" in doc["profile"]["error"]  # no GPU here
        assert sb.log.read_text().startswith(H200.joinpath("ncu_full_raw_tuned.csv").read_text()[:200])
    finally:
        sb.close()
    assert not sb.dir.exists()


def test_the_profilers_ncu_step_takes_the_standby(fake_ncu: Path) -> None:
    sb = NcuStandby(str(fake_ncu), imports_of(FAST), timeout_s=60)
    stages: dict[str, float] = {}
    try:
        kernels, notes = _ncu(DEFINITION, FAST, WORKLOAD, EvalSettings(device="cpu"), ProfileSettings(ncu_tool=str(fake_ncu)), sb.cache, stages, sb)
    finally:
        sb.close()
    assert [k.name for k in kernels] == ["_swiglu_kernel"] and notes == []
    # The candidate's clock starts when it is handed over: its start-up is not the standby's.
    assert stages["ncu.standby"] > 0 and stages["ncu.startup"] < 1.0 and stages["ncu"] < 30, stages
    args = (fake_ncu.parent.parent / "args").read_text().splitlines()
    assert len(args) == 1 and "--log-file" in args[0]  # one ncu child: the standby's


def test_an_expired_standby_gives_way_to_a_fresh_child(fake_ncu: Path) -> None:
    sb = NcuStandby(str(fake_ncu), [], timeout_s=60, wait_s=0.5)
    # It gives up 0.5 s after its child is up; how long the start takes depends on the machine's
    # load (a fixed 4 s sleep failed at load 8 on 2 cores), so wait for the thread itself.
    sb._thread.join(timeout=60)
    stages: dict[str, float] = {}
    try:
        assert not sb._thread.is_alive()  # it gave up waiting and left a result saying so
        kernels, _ = _ncu(DEFINITION, FAST, WORKLOAD, EvalSettings(device="cpu"), ProfileSettings(ncu_tool=str(fake_ncu)), sb.cache, stages, sb)
    finally:
        sb.close()
    assert [k.name for k in kernels] == ["_swiglu_kernel"] and "ncu.standby" not in stages
    assert len((fake_ncu.parent.parent / "args").read_text().splitlines()) == 2


def test_a_standby_that_fails_gives_way_to_a_fresh_child_and_says_so(tmp_path: Path, fake_ncu: Path) -> None:
    """Should ncu not take to a process that waits before CUDA (not seen on the H200 yet), the
    profile is still taken, in a fresh child, and the note says what happened."""
    # This ncu gives up on a standby request (the harness's request.json says mode standby).
    # Like ncu, it says why in its log file, not on stderr (the H200's crashed standby left no stderr).
    refuse = ('for a in "$@"; do case "$a" in *request.json) grep -q standby "$a" && '
              '{ echo "==ERROR== the application did not connect" >> "$log"; exit 7; };; esac; done\n')
    fake_ncu.write_text(fake_ncu.read_text().replace('exec "$@"', refuse + 'exec "$@"'))
    sb = NcuStandby(str(fake_ncu), [], timeout_s=60)
    stages: dict[str, float] = {}
    try:
        kernels, notes = _ncu(DEFINITION, FAST, WORKLOAD, EvalSettings(device="cpu"), ProfileSettings(ncu_tool=str(fake_ncu)), sb.cache, stages, sb)
    finally:
        sb.close()
    assert [k.name for k in kernels] == ["_swiglu_kernel"] and "ncu.standby" not in stages
    assert len(notes) == 1 and "standby ncu child failed (CRASHED" in notes[0] and "did not connect" in notes[0], notes


def test_a_standby_whose_ncu_found_the_counters_busy_says_so_not_crashed(tmp_path: Path, fake_ncu: Path) -> None:
    """H200, session 21: a parallel test's ncu held the counters while the standby's ncu started, and
    the note read "the standby ncu child failed (CRASHED: ...)". ncu's own log says why (its busy
    message, as the H200 printed it); the note names the other profiler. A candidate printing the same
    words does not change the note: they are read from ncu's log alone."""
    busy = ("for a in \"$@\"; do case \"$a\" in *request.json) grep -q standby \"$a\" && "
            "{ echo '==ERROR== Profiling failed because a driver resource was unavailable. Ensure that no other tool "
            "(like DCGM) is concurrently collecting profiling data.' >> \"$log\"; exit 9; };; esac; done\n")
    fake_ncu.write_text(fake_ncu.read_text().replace('exec "$@"', busy + 'exec "$@"'))
    sb = NcuStandby(str(fake_ncu), [], timeout_s=60)
    try:
        kernels, notes = _ncu(DEFINITION, FAST, WORKLOAD, EvalSettings(device="cpu"), ProfileSettings(ncu_tool=str(fake_ncu)),
                              sb.cache, {}, sb)
    finally:
        sb.close()
    assert [k.name for k in kernels] == ["_swiglu_kernel"]
    assert notes == ["the standby ncu child could not read the GPU's counters: another profiler (DCGM's profiling "
                     "module, or another ncu) held them; profiled again in a fresh one"], notes


STUB = """import mmap, os, pathlib, signal
# A package whose import builds and loads a library into the Triton cache, as fla's import builds
# and loads Triton's cuda_utils.so there (fla/utils/hardware.py asks the driver at import time).
_path = pathlib.Path(os.environ["TRITON_CACHE_DIR"], "stub", "cuda_utils.so")
if not _path.exists():
    _path.parent.mkdir(parents=True, exist_ok=True)
    _path.write_bytes(b"A" * 4096)
_file = open(_path, "rb")
_map = mmap.mmap(_file.fileno(), 0, access=mmap.ACCESS_READ)
_seen = bytes(_map[:])


def check():
    if bytes(_map[:]) != _seen:  # the loaded code changed under the process: what a SIGSEGV follows
        os.kill(os.getpid(), signal.SIGSEGV)
"""


def test_filling_the_standbys_cache_leaves_what_it_loaded_alone(tmp_path: Path, fake_ncu: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """On the H200 the standby of fla softmax died with exit code 11 in 3 runs of 3, Liger's never:
    fla's import loads a library from the Triton cache, and the profiler then copied the evaluation's
    cache over the standby's, rewriting that library in place. The evaluation's cache is merged in
    without touching a file the standby has."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "kp_stub_loader.py").write_text(STUB)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(lib), os.environ.get("PYTHONPATH")])))
    solution = _solution("import kp_stub_loader\ndef swiglu(a, b):\n    kp_stub_loader.check()\n    return a * b\n")
    evaluated = tmp_path / "evaluated-cache"  # the evaluation child's Triton cache: the same library, rebuilt
    (evaluated / "stub").mkdir(parents=True)
    (evaluated / "stub" / "cuda_utils.so").write_bytes(b"B" * 4096)
    (evaluated / "kern").mkdir()
    (evaluated / "kern" / "_swiglu_kernel.cubin").write_bytes(b"cubin")
    (evaluated / "kern" / "link.cubin").symlink_to(tmp_path / "secret")
    (tmp_path / "secret").write_text("the runner's own file")
    sb = NcuStandby(str(fake_ncu), imports_of(solution), timeout_s=60)
    try:
        assert imports_of(solution) == ("kp_stub_loader",)
        deadline = time.monotonic() + 60
        while not (sb.cache / "stub" / "cuda_utils.so").exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # the standby's import has loaded the library
        profile = _profile(DEFINITION, solution, [WORKLOAD], EvalSettings(device="cpu"),
                           ProfileSettings(sass=False, timeline=False, ncu_tool=str(fake_ncu)), None, evaluated, sb)
        assert (sb.cache / "stub" / "cuda_utils.so").read_bytes() == b"A" * 4096
        assert (sb.cache / "kern" / "_swiglu_kernel.cubin").read_bytes() == b"cubin"
        assert not (sb.cache / "kern" / "link.cubin").exists()  # a link of the candidate's is not followed
    finally:
        sb.close()
    assert profile.notes == () and [k.name for k in profile.kernels] == ["_swiglu_kernel"], profile.notes
    assert len((fake_ncu.parent.parent / "args").read_text().splitlines()) == 1  # the standby did the profile


def test_merge_cache_adds_only_what_is_missing_and_never_rewrites_in_place(tmp_path: Path) -> None:
    import mmap

    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "a").mkdir(parents=True)
    (dst / "a").mkdir(parents=True)
    (src / "a" / "lib.so").write_bytes(b"new" * 100)
    (src / "a" / "k.cubin").write_bytes(b"k")
    (dst / "a" / "lib.so").write_bytes(b"old" * 100)
    with open(dst / "a" / "lib.so", "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        assert merge_cache(src, dst) == 1
        assert m[:3] == b"old"
    assert (dst / "a" / "k.cubin").read_bytes() == b"k" and merge_cache(src, dst) == 0
    assert not any(p.name.endswith(".part") for p in dst.rglob("*"))


def test_merged_cache_groups_name_the_files_where_they_now_are(tmp_path: Path) -> None:
    """Triton's group files list a kernel's files by absolute path. Copied as they were, they sent the
    profiled child back to the candidate's cache, which it may not read (EACCES: ncu profiled no kernel
    in any `kernelpro optimize` run on the H200, session 16): they must point into the merged cache."""
    import json

    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "H").mkdir(parents=True)
    dst.mkdir()
    (src / "H" / "k.cubin").write_bytes(b"cubin")
    (src / "H" / "k.json").write_text("{}")
    (src / "H" / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": str(src / "H" / "k.cubin"),
                                                                          "k.json": str(src / "H" / "k.json")}}))
    (src / "H" / "__grp__evil.json").write_text(json.dumps({"child_paths": {"x": "/etc/passwd"}}))
    assert merge_cache(src, dst) == 3
    group = json.loads((dst / "H" / "__grp__k.json").read_text())
    assert group == {"child_paths": {"k.cubin": str(dst / "H" / "k.cubin"), "k.json": str(dst / "H" / "k.json")}}
    assert not (dst / "H" / "__grp__evil.json").exists()  # Triton compiles that one again


def test_the_time_limit_counts_from_the_request(fake_ncu: Path) -> None:
    """A standby that waited longer than the limit still gives its request the whole limit; a
    request that hangs is killed at the limit after it was given, not later."""
    hang = _solution("import time\ntime.sleep(60)\ndef swiglu(a, b):\n    return a\n")
    sb = NcuStandby(str(fake_ncu), [], timeout_s=4)
    try:
        time.sleep(5.0)
        taken = sb.take(_req(hang))
    finally:
        sb.close()
    assert taken is not None
    child, seconds = taken
    assert child.status == "TIMEOUT" and "killed after 4 s" in child.log and 3.5 < seconds < 10, (child.status, seconds)


def test_close_lets_an_unused_standby_go_at_once(fake_ncu: Path) -> None:
    sb = NcuStandby(str(fake_ncu), [], timeout_s=60)
    time.sleep(2.0)
    t0 = time.perf_counter()
    sb.close()
    assert time.perf_counter() - t0 < 5 and not sb._thread.is_alive() and not sb.dir.exists()
    with pytest.raises(RuntimeError):
        sb.take(_req())


def test_a_standby_whose_parent_is_gone_gives_up(tmp_path: Path) -> None:
    from kernelpro.runner.harness import _standby

    (tmp_path / "alive").touch()
    old = time.time() - 60
    os.utime(tmp_path / "alive", (old, old))
    t0 = time.perf_counter()
    taken, info = _standby({"preload": [], "wait_s": 600, "heartbeat_s": 30}, tmp_path)
    assert taken is None and info["expired"] and time.perf_counter() - t0 < 2
    (tmp_path / "alive").touch()
    (tmp_path / "go.json").write_text(json.dumps({"mode": "quit"}))
    assert _standby({"preload": ["json"], "wait_s": 600}, tmp_path)[0] is None


def test_imports_of_reads_the_entry_files_absolute_imports() -> None:
    sol = _solution(
        "import torch\nimport triton.language as tl\nfrom liger_kernel.ops.utils import calculate_settings\n"
        "from . import sibling\nfrom helpers.maths import f\nimport os, json\n"
        "def swiglu(a, b):\n    import late_import\n    return a\n",
        (SourceFile("helpers/maths.py", "def f(): pass\n"),),
    )
    assert imports_of(sol) == ("torch", "triton.language", "liger_kernel.ops.utils", "os", "json")
    assert imports_of(_solution("def swiglu(:\n")) == ()


def test_no_standby_without_ncu_or_when_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    if Path("/usr/local/cuda/bin/ncu").is_file():
        pytest.skip("a real ncu is installed in /usr/local/cuda; find_ncu would find it")
    assert start_standby(FAST, ProfileSettings()) is None
    assert start_standby(FAST, ProfileSettings(ncu_tool=str(tmp_path / "absent"))) is None
    assert start_standby(FAST, ProfileSettings(standby=False)) is None


def test_the_loop_starts_its_standby_after_the_reference_and_closes_it_however_it_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The standby's preloads may be the pull request's own package: it starts only once the
    search's reference outputs are in memory (their files gone), yet before the baseline's
    evaluation, so the baseline's profile finds it ready; a run that breaks after that still closes
    it (it would otherwise wait, unused, for its time limit)."""
    from kernelpro.runner import optimize as loop
    from kernelpro.runner.evaluator import Outcome, Timing, WorkloadResult
    from kernelpro.runner.optimize import RunSettings, optimize
    from kernelpro.runner.target import Target

    events: list[str] = []

    class Spare:
        def close(self) -> None:
            events.append("closed")

    def start(solution: Solution, ps: ProfileSettings) -> Spare:
        events.append("started")
        return Spare()

    def evaluate(definition: object, solution: Solution, *args: object) -> Outcome:
        events.append("evaluated")
        checked = {"max_abs": 0.0, "max_rel": 0.0, "rel_l2": 0.0}
        timed = Timing(1.0, 0.9, 1.1, 0.05, 10)
        return Outcome(solution.content_hash(), "PASSED", (WorkloadResult(WORKLOAD.uuid, "PASSED", "", checked, timed),))

    def reference_ready(*args: object) -> bool:
        events.append("reference")
        return True

    def registry(*args: object) -> None:
        raise RuntimeError("the tool registry broke")

    for name, fake in (("start_standby", start), ("evaluate", evaluate), ("reference_ready", reference_ready),
                       ("registry", registry)):
        monkeypatch.setattr(loop, name, fake)
    (tmp_path / "head" / "kernels").mkdir(parents=True)
    (tmp_path / "head" / "kernels" / "swiglu.py").write_text((ROOT / "examples" / "demo" / "commit2" / "kernels" / "swiglu.py").read_text())
    target = Target("swiglu", "triton", ("kernels/swiglu.py",), "kernels/swiglu.py::swiglu", DEFINITION, (WORKLOAD,))
    with pytest.raises(RuntimeError, match="the tool registry broke"):
        optimize(target, tmp_path / "head", tmp_path / "out", object(), RunSettings(evaluation=EvalSettings(device="cuda")))  # type: ignore[arg-type]
    assert events == ["reference", "started", "evaluated", "closed"]


def test_reference_ready_computes_the_reference_once(tmp_path: Path) -> None:
    from kernelpro.runner.evaluator import reference_ready
    from kernelpro.runner.trace import Definition

    es = EvalSettings(device="cpu", cache_dir=tmp_path / "cache", seed=913)
    assert reference_ready(DEFINITION, FAST, [WORKLOAD], Tolerance(), es)
    t0 = time.perf_counter()
    assert reference_ready(DEFINITION, FAST, [WORKLOAD], Tolerance(), es)  # cached: no child this time
    assert time.perf_counter() - t0 < 0.5
    broken = Definition.from_json({**DEFINITION.to_json(), "reference": "def run(a, b):\n    raise ValueError('no')\n"})
    assert not reference_ready(broken, FAST, [WORKLOAD], Tolerance(), es)
