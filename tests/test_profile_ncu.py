"""ncu collection and parsing, on ncu output recorded on the H200 (tests/fixtures/h200)."""

from __future__ import annotations

import csv
import os
import stat
import time
from pathlib import Path

import pytest

from kernelpro.runner.evidence import KernelProfile, Profile
from kernelpro.runner.evidence.ncu import (
    ALIASES,
    DERIVED,
    MEMORY_DEPENDENCY_STALL,
    METRICS,
    NCU_MISSING,
    NOT_IN_FULL_SET,
    collect,
    find_ncu,
    ncu_command,
    parse_csv,
)
from kernelpro.settings import Settings

# The fake tools write into the test's folder: they run unconfined (conftest.py).
pytestmark = pytest.mark.usefixtures("fake_tools_run_unconfined")

H200 = Path(__file__).parent / "fixtures" / "h200"
LONG_SB = "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
LATENCY = "smsp__average_warp_latency_per_inst_issued.ratio"


def _fixture(name: str) -> str:
    return (H200 / name).read_text()


def _one(name: str) -> KernelProfile:
    kernels = parse_csv(_fixture(name))
    assert len(kernels) == 1
    return kernels[0]


# ---------------------------------------------------------------- parsing the four fixtures


@pytest.mark.parametrize(
    "name",
    [
        "ncu_metrics_poor.csv",
        "ncu_metrics_tuned.csv",
        "ncu_full_raw_poor.csv",
        "ncu_full_raw_tuned.csv",
    ],
)
def test_every_fixture_parses_to_one_swiglu_launch(name: str) -> None:
    k = _one(name)
    assert k.name == "_swiglu_kernel"
    assert k.units["gpu__time_duration.sum"] == "ns"
    assert k.units["launch__registers_per_thread"] == "register/thread"


def test_metric_list_values_are_exact() -> None:
    poor, tuned = _one("ncu_metrics_poor.csv"), _one("ncu_metrics_tuned.csv")
    assert poor.get("gpu__time_duration.sum") == 179712
    assert tuned.get("gpu__time_duration.sum") == 44640
    assert poor.get("launch__registers_per_thread") == 16
    assert tuned.get("launch__registers_per_thread") == 32
    # thousands separators, decimals
    assert poor.get("dram__bytes_read.sum") == 134_222_592
    assert poor.get("dram__cycles_elapsed.avg.per_second") == pytest.approx(3_198_510_208.93)
    assert poor.get("sm__warps_active.avg.pct_of_peak_sustained_active") == pytest.approx(79.02)
    assert poor.units["dram__bytes_read.sum"] == "byte"
    # grid/block from the "Grid Size"/"Block Size" columns
    assert (poor.grid, poor.block) == ((262144, 1, 1), (256, 1, 1))
    assert (tuned.grid, tuned.block) == ((16384, 1, 1), (128, 1, 1))
    assert tuned.get("launch__grid_size") == 16384 and tuned.get("launch__block_size") == 128


def test_na_reads_as_none_but_the_name_is_kept() -> None:
    k = _one("ncu_metrics_poor.csv")
    for name in (
        "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct",
        "smsp__average_warps_issue_stalled_memory_throttle_per_issue_active.ratio",
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
    ):
        assert name in k.metrics and k.get(name) is None
    # the old list has the stall ratio but not the denominator: nothing is invented
    assert k.get(LONG_SB) == pytest.approx(21.20)


def test_older_names_fill_the_canonical_one() -> None:
    # the recorded list asked for dram__throughput...; the canonical name is the full set's
    k = _one("ncu_metrics_poor.csv")
    assert k.get("gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed") == pytest.approx(21.92)
    assert k.get("dram__throughput.avg.pct_of_peak_sustained_elapsed") == pytest.approx(21.92)
    # and the other way: the raw page has only gpu__dram_throughput; code using the older name
    # (runner/tools) still reads it
    raw = _one("ncu_full_raw_tuned.csv")
    assert raw.get("dram__throughput.avg.pct_of_peak_sustained_elapsed") == pytest.approx(84.26)
    # the n/a gmma cycles metric is filled from the wgmma pipe's issue share when that is known
    gmma = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"
    assert k.get(gmma) is None and raw.get(gmma) == 0


def test_raw_page_has_every_metric_but_the_documented_exceptions() -> None:
    for variant in ("poor", "tuned"):
        text = _fixture(f"ncu_full_raw_{variant}.csv")
        header = next(csv.reader([ln for ln in text.splitlines() if ln.startswith('"')]))
        missing = {m for m in METRICS if m not in header}
        assert (
            missing
            == NOT_IN_FULL_SET
            == {
                "dram__bytes.sum",
                "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
                "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
                "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
            }
        )
        k = parse_csv(text)[0]
        assert len(k.metrics) > 500
        # dram__bytes.sum is filled from read + write; the flop counts stay absent
        read, write = k.get("dram__bytes_read.sum"), k.get("dram__bytes_write.sum")
        assert read is not None and write is not None
        assert k.get("dram__bytes.sum") == read + write
        assert {m for m in METRICS if k.get(m) is None} == NOT_IN_FULL_SET - {"dram__bytes.sum"}


def test_metrics_list_is_about_fifty_unique_names() -> None:
    assert 50 <= len(METRICS) <= 72
    assert len(set(METRICS)) == len(METRICS)
    assert MEMORY_DEPENDENCY_STALL not in METRICS  # reads n/a on sm_90


def test_raw_page_values_units_and_launch_shape() -> None:
    poor, tuned = _one("ncu_full_raw_poor.csv"), _one("ncu_full_raw_tuned.csv")
    assert poor.get("gpu__time_duration.sum") == 179200
    assert poor.get("launch__registers_per_thread") == 16
    assert tuned.get("launch__registers_per_thread") == 32
    assert (tuned.grid, tuned.block) == ((16384, 1, 1), (128, 1, 1))
    assert poor.units["smsp__warps_eligible.avg.per_cycle_active"] == "warp"
    assert poor.get("smsp__issue_active.avg.pct_of_peak_sustained_active") == pytest.approx(41.79)
    # text attributes of the raw page are not metrics
    assert "launch__cluster_scheduling_policy" not in poor.metrics
    # "UNIT.Section." columns are separate measurements: kept apart from the plain metric
    assert poor.get("l1tex__t_sector_hit_rate.pct") == pytest.approx(66.67)
    assert poor.get("SM_B.TriageCompute.l1tex__t_sector_hit_rate.pct") is None
    assert poor.get("TPC.TriageCompute.sm__cycles_active.avg") == pytest.approx(350_783.98)


def test_memory_dependency_stall_is_derived_from_long_scoreboard_on_sm90() -> None:
    k = _one("ncu_full_raw_poor.csv")
    assert ALIASES["sm_90"][MEMORY_DEPENDENCY_STALL] == LONG_SB
    assert DERIVED[MEMORY_DEPENDENCY_STALL][:2] == (LONG_SB, LATENCY)
    expected = 100 * 21.23 / 29.68  # long scoreboard ratio / cycles per issued instruction
    assert k.get(MEMORY_DEPENDENCY_STALL) == pytest.approx(expected)
    assert k.units[MEMORY_DEPENDENCY_STALL] == "%"
    # the SwiGLU kernel is memory-bound: most of a warp's time waits on loads
    assert 60 < expected < 80
    # the stall ratios add up to the latency: the denominator is the right one
    stalls = sum(
        v for n, v in k.metrics.items() if n.startswith("smsp__average_warps_issue_stalled_") and v
    )
    assert stalls == pytest.approx(k.get(LATENCY), rel=0.01)


def _relabel(text: str, launch_id: str, kernel: str) -> list[str]:
    rows = [ln for ln in text.splitlines() if ln.startswith('"')]
    return [ln.replace('"0","1250","python3.12","127.0.0.1","_swiglu_kernel"',
                       f'"{launch_id}","1250","python3.12","127.0.0.1","{kernel}"') for ln in rows[1:]]


def test_several_launches_come_back_in_id_order() -> None:
    text = _fixture("ncu_metrics_poor.csv")
    header = next(ln for ln in text.splitlines() if ln.startswith('"ID"'))
    body = (
        _relabel(text, "2", "third") + _relabel(text, "0", "first") + _relabel(text, "10", "last")
    )
    kernels = parse_csv("==PROF== noise\n" + "\n".join([header, *body]) + "\n==WARNING== x\n")
    assert [k.name for k in kernels] == ["first", "third", "last"]
    assert all(k.get("gpu__time_duration.sum") == 179712 for k in kernels)
    # Profile.main picks the longest launch
    assert Profile(kernels=tuple(kernels)).metric("launch__registers_per_thread") == 16


def test_raw_page_with_two_launches() -> None:
    rows = [ln for ln in _fixture("ncu_full_raw_tuned.csv").splitlines() if ln.startswith('"')]
    second = rows[2].replace('"0","1323"', '"1","1323"', 1)
    kernels = parse_csv("\n".join([rows[0], rows[1], second, rows[2]]))
    assert len(kernels) == 2 and kernels[0].get("gpu__time_duration.sum") == 44704
    assert kernels[1].units["gpu__time_duration.sum"] == "ns"


def test_empty_or_noise_only_output() -> None:
    assert parse_csv("") == []
    assert parse_csv("==PROF== Disconnected\n==WARNING== No kernels were profiled.\n") == []


# ---------------------------------------------------------------- the command


def test_ncu_command_shape() -> None:
    cmd = ncu_command(["python3", "launch.py"], kernel_regex="_swiglu_kernel", launch_count=3)
    assert cmd[:9] == [
        "ncu",
        "--clock-control",
        "none",
        "--csv",
        "-k",
        "regex:_swiglu_kernel",
        "-c",
        "3",
        "--metrics",
    ]
    assert cmd[9].split(",") == list(METRICS)
    assert cmd[10:] == ["python3", "launch.py"]
    full = ncu_command(["./a.out"], kernel_regex="k", full=True)
    assert full == ["ncu", "--clock-control", "none", "--csv", "-k", "regex:k", "-c", "1",
                    "--set", "full", "--page", "raw", "./a.out"]
    assert "-k" not in ncu_command(["./a.out"], kernel_regex=None)


def test_ncu_command_maps_names_per_arch() -> None:
    mem = ncu_command(["x"], kernel_regex="k", metrics=[MEMORY_DEPENDENCY_STALL, LONG_SB])
    asked = mem[mem.index("--metrics") + 1].split(",")
    # never the name that reads n/a; its inputs instead, each once
    assert asked == [LONG_SB, LATENCY]
    ampere = ncu_command(["x"], kernel_regex="k", arch="sm_80")
    names = ampere[ampere.index("--metrics") + 1].split(",")
    assert not any("gmma" in n for n in names)  # no wgmma before Hopper: ncu would reject them
    assert len(names) == len(METRICS) - 2


# ---------------------------------------------------------------- collect() with a fake ncu

# Recorded on the H200 (ncu 2025.3.1, 2026-11-29): a made-up metric name is not an error for this
# ncu, it comes back as n/a; a regex that matches nothing prints the kernels that did run.
UNKNOWN_METRIC_OUTPUT = """\
==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling results may be inconsistent.
==PROF== Connected to process 534 (/work/main/out/kp-ncu-probe/probe)
probe done: no error
==PROF== Disconnected from process 534
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","534","probe","127.0.0.1","probe_kernel(const float4 *, float4 *, int)","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","ns","44,640"
"0","534","probe","127.0.0.1","probe_kernel(const float4 *, float4 *, int)","1","7","(256, 1, 1)","(16384, 1, 1)","0","9.0","Command line profiler metrics","smsp__no_such_metric_at_all.sum","","n/a"
"""
NO_KERNEL_OUTPUT = """\
==WARNING== Note: Running with unmodified GPU clocks. If not controlled otherwise, profiling results may be inconsistent.
==PROF== Connected to process 603 (/work/main/out/kp-ncu-probe/probe)
probe done: no error
==PROF== Disconnected from process 603
==WARNING== No kernels were profiled.
Available Kernels:
1. probe_kernel
"""


def _fake_ncu(tmp_path: Path, body: str, name: str = "ncu") -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    script = bindir / name
    script.write_text(f'#!/bin/sh\necho "$@" > "{tmp_path}/args"\n{body}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


@pytest.fixture
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """PATH holds only the fake ncu (and /bin for sh); no other way to find a real one."""
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin")
    return tmp_path


def test_collect_parses_what_ncu_prints(fake_path: Path) -> None:
    _fake_ncu(fake_path, f'cat "{H200 / "ncu_metrics_tuned.csv"}"')
    kernels, notes = collect(["python3", "launch.py", "k.py"], kernel_regex="_swiglu_kernel")
    assert notes == []
    assert [k.get("gpu__time_duration.sum") for k in kernels] == [44640]
    args = (fake_path / "args").read_text().split()
    assert args[:7] == ["--clock-control", "none", "--csv", "-k", "regex:_swiglu_kernel", "-c", "1"]
    assert args[-3:] == ["python3", "launch.py", "k.py"]


def test_collect_honours_kernelpro_ncu(fake_path: Path) -> None:
    script = _fake_ncu(fake_path, f'cat "{H200 / "ncu_metrics_poor.csv"}"', name="my-ncu")
    ncu = Settings.from_env({"KERNELPRO_NCU": str(script)}).ncu_tool
    assert find_ncu(ncu) == str(script) and find_ncu() is None  # my-ncu is not named ncu: only the setting finds it
    kernels, notes = collect(["./a.out"], kernel_regex="k", ncu_path=find_ncu(ncu))
    assert len(kernels) == 1 and notes == []


def test_collect_without_ncu(fake_path: Path) -> None:
    if Path("/usr/local/cuda/bin/ncu").is_file():
        pytest.skip("a real ncu is installed in /usr/local/cuda; find_ncu would find it")
    assert find_ncu() is None
    assert collect(["./a.out"], kernel_regex="k") == ([], [NCU_MISSING])
    assert collect(["./a.out"], kernel_regex="k", ncu_path=str(fake_path / "nope")) == (
        [],
        [NCU_MISSING],
    )
    assert (
        NCU_MISSING
        == "ncu not found: install Nsight Compute or set KERNELPRO_NCU; continuing with SASS and timing only"
    )


def test_collect_counters_not_permitted(fake_path: Path) -> None:
    _fake_ncu(
        fake_path,
        'echo "==PROF== Connected to process 1 (/usr/bin/python3)"\n'
        'echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU '
        'Performance Counters on the target device 0." >&2\nexit 1',
    )
    kernels, notes = collect(["./a.out"], kernel_regex="k")
    assert kernels == [] and len(notes) == 1
    assert "ERR_NVGPUCTRPERM" in notes[0]
    assert "NVreg_RestrictProfilingToAdminUsers=0" in notes[0] and "root" in notes[0]


def test_collect_timeout_kills_ncu_and_says_so(fake_path: Path) -> None:
    _fake_ncu(fake_path, "sleep 30 & wait")
    t0 = time.monotonic()
    kernels, notes = collect(["./a.out"], kernel_regex="k", timeout_s=1)
    assert time.monotonic() - t0 < 15  # the sleeping child was killed with its group
    assert kernels == [] and len(notes) == 1 and "timed out after 1 s" in notes[0]


def test_collect_names_an_unknown_metric_that_reads_na(fake_path: Path) -> None:
    _fake_ncu(fake_path, f"cat <<'EOF'\n{UNKNOWN_METRIC_OUTPUT}EOF")
    kernels, notes = collect(
        ["./probe"], kernel_regex="probe_kernel",
        metrics=["gpu__time_duration.sum", "smsp__no_such_metric_at_all.sum"],
    )
    assert kernels[0].get("gpu__time_duration.sum") == 44640
    assert len(notes) == 1 and "smsp__no_such_metric_at_all.sum" in notes[0]
    assert "gpu__time_duration.sum" not in notes[0]


def test_collect_names_an_unknown_metric_that_ncu_rejects(fake_path: Path) -> None:
    # older ncu releases stop with an error instead of printing n/a
    _fake_ncu(fake_path, 'echo "==ERROR== Failed to find metric smsp__bogus.sum" >&2\nexit 1')
    kernels, notes = collect(["./a.out"], kernel_regex="k")
    assert kernels == [] and len(notes) == 1
    assert "smsp__bogus.sum" in notes[0] and "ALIASES" in notes[0]


def test_collect_when_the_regex_matches_nothing(fake_path: Path) -> None:
    _fake_ncu(fake_path, f"cat <<'EOF'\n{NO_KERNEL_OUTPUT}EOF")
    kernels, notes = collect(["./probe"], kernel_regex="no_such_kernel")
    assert kernels == []
    assert notes == [
        "ncu profiled no kernel matching regex:no_such_kernel (kernels launched: probe_kernel); "
        "continuing with SASS and timing only"
    ]


def test_collect_reports_other_failures(fake_path: Path) -> None:
    _fake_ncu(fake_path, 'echo "==ERROR== The application returned an error code (11)."\nexit 11')
    kernels, notes = collect(["./a.out"], kernel_regex="k")
    assert kernels == [] and notes == [
        "ncu exited with 11: ==ERROR== The application returned an error code (11)."
    ]


def _profile_with_fake_ncu(fake_path: Path, stages: dict[str, float]) -> tuple[list, list[str]]:
    """The profiler's ncu step for the demo's kernel, with whatever fake ncu is on PATH."""
    from kernelpro.runner.evaluator import EvalSettings
    from kernelpro.runner.profiler import ProfileSettings, _ncu
    from kernelpro.runner.trace import BuildSpec, Solution, SourceFile, Workload, load_definition

    d = load_definition(Path(__file__).resolve().parents[1] / "examples" / "demo" / "commit1" / "definitions" / "swiglu.json")
    sol = Solution("t", d.name, "t", BuildSpec("triton", ("cuda",), "k.py::swiglu", destination_passing_style=False),
                   (SourceFile("k.py", "def swiglu(a, b):\n    return a\n"),))
    return _ncu(d, sol, Workload.make(d, {"M": 64}), EvalSettings(device="cuda"), ProfileSettings(),
                fake_path / "cache", stages)


def test_the_profiler_reads_ncus_csv_from_its_own_log_file(fake_path: Path) -> None:
    """One ncu run, its raw page written as CSV to --log-file (not the stdout the candidate shares,
    and no report to export with a second ncu): a fake ncu writes the H200's recorded raw page there
    and the harness's result where the command line says."""
    _fake_ncu(fake_path, f"""
log=""; prev=""
for a in "$@"; do [ "$prev" = "--log-file" ] && log="$a"; prev="$a"; last="$a"; done
echo "==PROF== Connected to process 1" > "$log"
cat "{H200 / "ncu_full_raw_tuned.csv"}" >> "$log"
echo '{{"phases": {{"startup": 1.5}}, "build": {{"seconds": 2.0}}, "profile": {{"warmup_s": 0.5, "profiled_s": 0.25}}}}' > "$last"
echo "the candidate printed this" """)
    stages: dict[str, float] = {}
    kernels, notes = _profile_with_fake_ncu(fake_path, stages)
    assert [k.name for k in kernels] == ["_swiglu_kernel"] and notes == []
    assert stages["ncu.import"] == 2.0 and stages["ncu.profiled"] == 0.25 and "ncu_export" not in stages
    args = (fake_path / "args").read_text().split()
    assert args[args.index("--target-processes") + 1] == "application-only"
    assert args[args.index("--page") + 1] == "raw" and "--csv" in args and "-o" not in args


def test_the_profiler_says_why_ncu_left_no_kernels(fake_path: Path) -> None:
    _fake_ncu(fake_path, """
log=""; prev=""
for a in "$@"; do [ "$prev" = "--log-file" ] && log="$a"; prev="$a"; done
echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters" > "$log"
exit 1""")
    kernels, notes = _profile_with_fake_ncu(fake_path, {})
    assert kernels == [] and len(notes) == 2 and "NVreg_RestrictProfilingToAdminUsers=0" in notes[0]
    # ...and how far the profiled child got, with its own output (this fake ncu never started it).
    assert notes[1] == "the profiled child reached: nothing; its output: exit code 1", notes[1]


def test_a_profiled_call_that_failed_is_named_in_the_note(fake_path: Path) -> None:
    """ncu ran, the harness imported the candidate, but its profiled call raised (on the H200 a child
    could not make a temp folder): the note carries the harness's own words, not only ncu's "No
    kernels were profiled", so the report says why Stage 1 has no measured view (session 16)."""
    _fake_ncu(fake_path, """
log=""; prev=""
for a in "$@"; do [ "$prev" = "--log-file" ] && log="$a"; prev="$a"; last="$a"; done
echo "==WARNING== No kernels were profiled." > "$log"
echo '{"build": {"status": "OK", "seconds": 0.2}, "profile": {"error": "PermissionError: [Errno 13] Permission denied: /tmp/tmpab"}}' > "$last"
""")
    stages: dict[str, float] = {}
    kernels, notes = _profile_with_fake_ncu(fake_path, stages)
    assert kernels == [] and stages["ncu.import"] == 0.2, stages
    assert notes[-1].startswith("the profiled child reached: import; its output: (none); the harness said: "
                                "profiled call: PermissionError: [Errno 13] Permission denied: /tmp/tmpab"), notes


# What ncu printed on the H200 when another ncu (a parallel test's) held the GPU's counters (session 17,
# report.md of tests/test_gpu.py::test_reactive_tools_end_to_end_on_the_gpu under 10 workers); the first
# sentence as Nsight Compute's FAQ words it, the rest as recorded.
BUSY_OUTPUT = (
    "==ERROR== Profiling failed because a driver resource was unavailable. Ensure that no other tool (like "
    "DCGM) is concurrently collecting profiling data. See https://docs.nvidia.com/nsight-compute/ProfilingGuide/"
    "index.html#faq for more details.\n"
    '==ERROR== Failed to profile "_swiglu_kernel" in process 25\n'
    "==PROF== Trying to shutdown target application\n"
    "==ERROR== The application returned an error code (9).\n"
)


def _busy_ncu(fake_path: Path, busy_times: int) -> None:
    """A fake ncu whose first ``busy_times`` runs meet another profiler, then writes the H200's page."""
    (fake_path / "busy.txt").write_text(BUSY_OUTPUT)
    _fake_ncu(fake_path, f"""
log=""; prev=""
for a in "$@"; do [ "$prev" = "--log-file" ] && log="$a"; prev="$a"; last="$a"; done
echo run >> "{fake_path}/runs"
if [ "$(wc -l < "{fake_path}/runs")" -le {busy_times} ]; then cat "{fake_path}/busy.txt" > "$log"; exit 9; fi
echo "==PROF== Connected to process 1" > "$log"
cat "{H200 / "ncu_full_raw_tuned.csv"}" >> "$log"
echo '{{"phases": {{"startup": 1.5}}, "build": {{"seconds": 2.0}}, "profile": {{"warmup_s": 0.5, "profiled_s": 0.25}}}}' > "$last" """)


def test_ncu_waits_out_another_profiler_and_stays_in_the_namespaces(fake_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ncu at once on one GPU: the second fails with "concurrently collecting profiling data".
    It is tried again in the same confinement after a wait; before, the profiler took it for a failure
    of the namespaces, ran ncu without network isolation and said so (H200, session 17)."""
    from kernelpro.runner import profiler

    monkeypatch.setattr(profiler, "_BUSY_WAITS_S", (0.01, 0.01, 0.01))
    _busy_ncu(fake_path, 2)
    stages: dict[str, float] = {}
    kernels, notes = _profile_with_fake_ncu(fake_path, stages)
    assert [k.name for k in kernels] == ["_swiglu_kernel"] and notes == [], notes
    assert len((fake_path / "runs").read_text().split()) == 3 and stages["ncu.busy_wait"] == pytest.approx(0.02)


def test_ncu_busy_through_every_attempt_says_what_to_do(fake_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelpro.runner import profiler

    monkeypatch.setattr(profiler, "_BUSY_WAITS_S", (0.01, 0.01))
    _busy_ncu(fake_path, 99)
    kernels, notes = _profile_with_fake_ncu(fake_path, {})
    assert kernels == [] and len((fake_path / "runs").read_text().split()) == 3  # no run outside the namespaces
    assert notes[0].startswith("ncu: another profiler (DCGM's profiling module, or another ncu) was collecting") \
        and "dcgmi profile --pause" in notes[0], notes
    assert not any("without network isolation" in n for n in notes), notes


def test_a_candidate_printing_ncus_words_buys_no_waits_and_no_note(fake_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The profiled child's output sits beside ncu's in what the profiler reads back: ncu's words are
    taken from its own log only, so a candidate that prints "concurrently collecting profiling data"
    or ERR_NVGPUCTRPERM neither makes the profiler wait and run ncu again nor writes the report's note."""
    from kernelpro.runner import profiler

    monkeypatch.setattr(profiler, "_BUSY_WAITS_S", (0.01, 0.01, 0.01))
    (fake_path / "busy.txt").write_text(BUSY_OUTPUT)
    _fake_ncu(fake_path, f"""
log=""; prev=""
for a in "$@"; do [ "$prev" = "--log-file" ] && log="$a"; prev="$a"; done
echo run >> "{fake_path}/runs"
cat "{fake_path}/busy.txt"
echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission"
echo "==WARNING== No kernels were profiled." > "$log" """)
    stages: dict[str, float] = {}
    kernels, notes = _profile_with_fake_ncu(fake_path, stages)
    assert kernels == [] and "ncu.busy_wait" not in stages
    assert len((fake_path / "runs").read_text().split()) <= 2  # the first run, and at most the one outside the namespaces
    assert not any("another profiler" in n or "NVreg_RestrictProfilingToAdminUsers" in n for n in notes), notes
    assert notes[0] == "ncu exited with 1: ==WARNING== No kernels were profiled.", notes  # ncu's own words
