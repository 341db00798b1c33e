"""Nsight Compute (ncu): one profiling launch per candidate, parsed into KernelProfile records.

The tools never see ncu itself: `collect()` runs it, `parse_csv()` turns either CSV shape it prints
into KernelProfile records keyed by *canonical* metric names (the sm_90 names in METRICS), so a
tool reads the same name whatever GPU the runner has. Every failure mode that a runner meets in
practice (ncu missing, counters not permitted, a metric this ncu does not know, a hang) becomes a
note and an empty result, never an exception: the loop goes on with SASS and timing only.

Metric names were checked against `tests/fixtures/h200/ncu_full_raw_*.csv` (the `--set full
--page raw` output of ncu 2025.3 / CUDA 13.0 on an H200): that page is the ground truth of what
this ncu knows on sm_90. The few METRICS absent from it are listed in NOT_IN_FULL_SET, with why.
"""

from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping, Sequence

from kernelpro.runner.evidence import KernelProfile

__all__ = [
    "ALIASES",
    "DERIVED",
    "METRICS",
    "NOT_IN_FULL_SET",
    "SYNONYMS",
    "collect",
    "find_ncu",
    "raw_csv_wrapper",
    "ncu_command",
    "parse_csv",
]

# --------------------------------------------------------------------------------------------
# The metric list
# --------------------------------------------------------------------------------------------

# One ncu run collects all of these (a "--metrics" run replays the kernel a few times; about 60
# metrics cost a few seconds, far less than the ~2200 of `--set full`). Canonical = sm_90 name.
METRICS: tuple[str, ...] = (
    # Speed of light and time: Stage 1 cross-checks its roofline class against these.
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    # record_gpu.py asked for dram__throughput.avg.pct_of_peak_sustained_elapsed; it is valid on
    # sm_90 but the full set reports the same quantity under this name (see SYNONYMS).
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__cycles_elapsed.avg.per_second",
    "dram__cycles_elapsed.avg.per_second",
    # Bytes moved, for the arithmetic intensity when a target has no bytes formula.
    "dram__bytes.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    # Flops from counters (thread-level, predicated-on), for the same fallback.
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    # Occupancy and its limiters (achieved occupancy = sm__warps_active...pct).
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_blocks",
    "launch__occupancy_limit_warps",
    "launch__registers_per_thread",
    "launch__block_size",
    "launch__grid_size",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__waves_per_multiprocessor",
    # The device's SM count: the grid is judged against it (Stage 1's current view, too_few_programs).
    "launch__sm_count",
    # Issue efficiency, and the load/store pipe a per-element loop saturates.
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active",
    "smsp__warps_eligible.avg.per_cycle_active",
    # Warp stalls. Each ratio is "warps stalled for this reason per issue cycle"; their sum over
    # all reasons is smsp__average_warp_latency_per_inst_issued.ratio (cycles between two issues
    # of one warp), so reason / total is the share of a warp's time lost to that reason: the
    # percentage the paper's 40 %/60 % thresholds are about (DERIVED computes the memory one).
    "smsp__average_warp_latency_per_inst_issued.ratio",
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_membar_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_tex_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_branch_resolving_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_drain_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio",
    # Hopper only: warps waiting for a wgmma (warpgroup MMA) to finish.
    "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio",
    # Rare ones, collected so the sum over reasons is complete (runner/tools reads them all).
    "smsp__average_warps_issue_stalled_imc_miss_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_misc_per_issue_active.ratio",
    "smsp__average_warps_issue_stalled_sleeping_per_issue_active.ratio",
    # Coalescing (sectors per request) and caches.
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.ratio",
    "l1tex__t_sector_hit_rate.pct",
    "lts__t_sector_hit_rate.pct",
    # Shared-memory bank conflicts: conflicts / wavefronts is the rate.
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "smsp__sass_inst_executed_op_shared_ld.sum",
    "smsp__sass_inst_executed_op_shared_st.sum",
    # Local memory (register spills, dynamically indexed local arrays).
    "l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum",
    # Instructions.
    "smsp__inst_executed.sum",
    "smsp__sass_inst_executed_op_global_ld.sum",
    "smsp__sass_inst_executed_op_global_st.sum",
    # Tensor pipes: mma.sync (HMMA) and Hopper's wgmma (HGMMA/QGMMA, the "gmma" pipe).
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active",
)

# METRICS that the sm_90 full-set raw page does not print. All are valid ncu metrics on sm_90
# (a `--metrics METRICS` run with ncu 2025.3.1 on the H200 returned numbers for every one, in
# 3.7 s for a small CUDA program, 12.5 s for the SwiGLU demo under Python incl. its start-up):
# the full set simply carries only derived rates of these base counters, not the .sum itself.
NOT_IN_FULL_SET: frozenset[str] = frozenset(
    {
        # The full set has dram__bytes_read.sum and dram__bytes_write.sum and dram__bytes.sum's
        # rates (.per_second, .peak_sustained) only; the total is what the roofline wants.
        "dram__bytes.sum",
        # The full set has only .per_cycle_elapsed rates of these; the flop fallback needs counts.
        "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
        "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum",
        "smsp__sass_thread_inst_executed_op_fmul_pred_on.sum",
    }
)

# Names from the recorded list (tests/fixtures/record_gpu.py) deliberately *not* in METRICS:
#  - smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct: reads n/a on sm_90 (a name
#    from the pre-Volta stall vocabulary); see ALIASES/DERIVED for what stands in for it.
#  - smsp__average_warps_issue_stalled_memory_throttle_per_issue_active.ratio: reads n/a on sm_90;
#    there is no such stall reason since Volta (the raw page's pcsamp reasons have none); memory
#    back-pressure shows as lg_throttle / mio_throttle / drain instead.
#  - sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active: reads n/a on sm_90;
#    sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active is the wgmma pipe.
#  - sm__inst_executed_pipe_tensor_op_hmma.sum: absent from the full set, and on the H200 it read
#    4,194,304 for a kernel without a single HMMA (equal to its global load count), so a count
#    cannot prove tensor-core use; SASS does that. The full set's .pct rate is kept instead.
#  - smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio: absent from the full set;
#    replaced by smsp__average_warp_latency_per_inst_issued.ratio, the denominator that turns
#    every stall ratio into a share.

# Other names of a canonical metric. parse_csv fills each name of a pair from the other when
# ncu printed only one (e.g. the recorded ncu_metrics_*.csv, made with the older list), so code
# written against either name reads a value.
SYNONYMS: Mapping[str, str] = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": (
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
    ),
    # The gmma *cycles* metric reads n/a on sm_90; the wgmma pipe's utilisation is reported as
    # the instruction-issue share of that pipe. For HMMA, where sm_90 has both, the two read the
    # same (4.54 % active / 4.50 % elapsed in ncu_full_raw_poor.csv), so they are one quantity.
    "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active": (
        "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active"
    ),
}

MEMORY_DEPENDENCY_STALL = "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct"
_LONG_SCOREBOARD = "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio"
_WARP_LATENCY = "smsp__average_warp_latency_per_inst_issued.ratio"

# Per-architecture names: arch -> canonical -> the name to collect there. A canonical name not
# listed is collected under its own name. An empty string means "does not exist on this arch":
# don't ask for it (ncu 2025.3 answers n/a for an unknown name; older releases abort the run).
ALIASES: Mapping[str, Mapping[str, str]] = {
    "sm_90": {
        # "Memory dependency" (warp waits on a global/local/texture load, the L1TEX scoreboard)
        # is reported since Volta as the *long scoreboard* stall; the old name reads n/a on the
        # H200. The sm_90 ratio has another unit (warps per issue cycle), so parse_csv does not
        # copy it: DERIVED turns it into the old percentage of a warp's active cycles.
        MEMORY_DEPENDENCY_STALL: _LONG_SCOREBOARD,
    },
    # Ampere and Ada: same stall vocabulary; no wgmma, so the gmma metrics do not exist.
    # (Not checked on such a GPU: no fixture was recorded there.)
    **{
        arch: {
            MEMORY_DEPENDENCY_STALL: _LONG_SCOREBOARD,
            "smsp__average_warps_issue_stalled_gmma_per_issue_active.ratio": "",
            "sm__inst_executed_pipe_tensor_op_gmma.avg.pct_of_peak_sustained_active": "",
        }
        for arch in ("sm_80", "sm_86", "sm_87", "sm_89")
    },
}

# Canonical metrics computed from others: name -> (numerator, denominator, scale, unit).
DERIVED: Mapping[str, tuple[str, str, float, str]] = {
    # stall_long_scoreboard / warp_latency_per_inst = the fraction of a warp's active cycles spent
    # waiting on memory: exactly what the pre-Volta memory_dependency_per_warp_active.pct meant.
    MEMORY_DEPENDENCY_STALL: (_LONG_SCOREBOARD, _WARP_LATENCY, 100.0, "%"),
}

# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def _arch_names(metrics: Sequence[str], arch: str) -> list[str]:
    """Canonical names -> the names to ask ncu for on `arch`, inputs of derived ones included."""
    alias = ALIASES.get(arch, {})
    out: list[str] = []
    for canonical in metrics:
        names = [alias.get(canonical, canonical)]
        if canonical in DERIVED:
            num, den, _, _ = DERIVED[canonical]
            names = [alias.get(num, num), alias.get(den, den)]
        out.extend(n for n in names if n and n not in out)
    return out


def ncu_command(
    argv: Sequence[str],
    *,
    kernel_regex: str | None,
    metrics: Sequence[str] | None = None,
    full: bool = False,
    launch_count: int = 1,
    arch: str = "sm_90",
    ncu: str = "ncu",
) -> list[str]:
    """The ncu command line that profiles `argv` (the candidate's launcher).

    `--clock-control none`: the timing loop runs at the clocks the GPU chooses, so ncu must not
    lock them to base (it would make the profiled kernel look slower than the timed one).
    `-k regex:` restricts profiling to the candidate's own kernels (not torch's fill/copy
    kernels that prepare inputs), `-c` bounds the number of profiled launches.
    """
    cmd = [ncu, "--clock-control", "none", "--csv"]
    if kernel_regex:
        cmd += ["-k", f"regex:{kernel_regex}"]
    cmd += ["-c", str(launch_count)]
    if full:
        cmd += ["--set", "full", "--page", "raw"]
    else:
        cmd += ["--metrics", ",".join(_arch_names(METRICS if metrics is None else metrics, arch))]
    return [*cmd, *argv]


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

_IDENTITY_COLUMNS = frozenset(
    {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
     "Block Size", "Grid Size", "Device", "CC"}
)
_NONE_VALUES = frozenset({"", "n/a", "N/A", "no data", "-"})
_DIM = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")


def _number(text: str) -> float | None:
    """ncu prints '134,222,592' and '3,198,510,208.93' (thousands separators); None if not a number."""
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _dims(text: str) -> tuple[int, int, int]:
    m = _DIM.search(text or "")
    return (int(m[1]), int(m[2]), int(m[3])) if m else (0, 0, 0)


def _arch_of(cc: str) -> str:
    """ncu's 'CC' column ('9.0') -> 'sm_90'."""
    major, _, minor = (cc or "").partition(".")
    return f"sm_{major}{minor or '0'}" if major.isdigit() else "sm_90"


def _csv_rows(text: str) -> list[list[str]]:
    # ncu interleaves its own messages (==PROF==, ==WARNING==, ==ERROR==) with the CSV on stdout;
    # every CSV line it prints starts with a quoted field.
    lines = [line for line in text.splitlines() if line.startswith('"')]
    return list(csv.reader(lines))


class _Launch:
    """One profiled launch while its rows are being read."""

    def __init__(self, row: Mapping[str, str]) -> None:
        self.name = row.get("Kernel Name", "")
        self.arch = _arch_of(row.get("CC", ""))
        self.grid = _dims(row.get("Grid Size", ""))
        self.block = _dims(row.get("Block Size", ""))
        self.metrics: dict[str, float | None] = {}
        self.units: dict[str, str] = {}

    def add(self, name: str, unit: str, value: str) -> None:
        value = value.strip()
        if value in _NONE_VALUES:
            number = None
        else:
            number = _number(value)
            if number is None:
                return  # text attributes of the raw page ('PolicySpread', 'all'): not metrics
        self.metrics[name] = number
        if unit:
            self.units[name] = unit

    def profile(self) -> KernelProfile:
        metrics, units = self.metrics, self.units
        # Names printed under another name on this arch (or by an older list) -> canonical, and
        # synonyms both ways. Only fills a gap: a value ncu printed itself always wins.
        back = {v: k for k, v in ALIASES.get(self.arch, {}).items() if v and k not in DERIVED}
        pairs = [*back.items(), *SYNONYMS.items(), *((c, o) for o, c in SYNONYMS.items())]
        for other, canonical in pairs:
            if metrics.get(canonical) is None and metrics.get(other) is not None:
                metrics[canonical] = metrics[other]
                if other in units:
                    units[canonical] = units[other]
        # The total DRAM traffic, when only its parts were collected (the full set prints parts).
        read, write = metrics.get("dram__bytes_read.sum"), metrics.get("dram__bytes_write.sum")
        if metrics.get("dram__bytes.sum") is None and read is not None and write is not None:
            metrics["dram__bytes.sum"] = read + write
            units["dram__bytes.sum"] = units.get("dram__bytes_read.sum", "byte")
        for canonical, (num, den, scale, unit) in DERIVED.items():
            n, d = metrics.get(num), metrics.get(den)
            if metrics.get(canonical) is None and n is not None and d:
                metrics[canonical] = scale * n / d
                units[canonical] = unit
        return KernelProfile(
            name=self.name, metrics=metrics, units=units, grid=self.grid, block=self.block
        )


def _launch_id(row: Mapping[str, str], fallback: int) -> int:
    v = _number(row.get("ID", ""))
    return int(v) if v is not None else fallback


def parse_csv(text: str) -> list[KernelProfile]:
    """Both CSV shapes ncu prints -> one KernelProfile per profiled launch, in ID order.

    Long form (`--metrics a,b`): one row per (launch, metric) with 'Metric Name', 'Metric Unit',
    'Metric Value'. Wide form (`--page raw`): a header of metric names, a row of units (its 'ID'
    is empty), then one row per launch. The raw page also has a few columns prefixed by a unit
    and section ('SM_B.TriageCompute.l1tex__t_sector_hit_rate.pct'), measured separately from the
    plain column of the same metric; they are kept under their prefixed names, never merged.
    """
    rows = _csv_rows(text)
    if not rows:
        return []
    header = rows[0]
    launches: dict[int, _Launch] = {}
    if "Metric Name" in header:
        for i, cells in enumerate(rows[1:]):
            row = dict(zip(header, cells, strict=False))
            key = _launch_id(row, i)
            launch = launches.setdefault(key, _Launch(row))
            launch.add(
                row.get("Metric Name", ""), row.get("Metric Unit", ""), row.get("Metric Value", "")
            )
    else:
        units: dict[str, str] = {}
        body = rows[1:]
        if body and body[0] and body[0][0] == "":  # the units row
            units = dict(zip(header, body[0], strict=False))
            body = body[1:]
        for i, cells in enumerate(body):
            row = dict(zip(header, cells, strict=False))
            launch = _Launch(row)
            for name, value in row.items():
                if name not in _IDENTITY_COLUMNS:
                    launch.add(name, units.get(name, ""), value)
            launches[_launch_id(row, i)] = launch
    return [launches[k].profile() for k in sorted(launches)]


# --------------------------------------------------------------------------------------------
# Running ncu
# --------------------------------------------------------------------------------------------

NCU_MISSING = "ncu not found: install Nsight Compute or set KERNELPRO_NCU; continuing with SASS and timing only"


def raw_csv_wrapper(ncu: str, log_file: str) -> list[str]:
    """The command prefix under which one child's profiled call is collected: METRICS as the raw
    page in CSV, written straight to ``log_file`` (not to the stdout the candidate shares, and no
    report to export with a second ncu process afterwards: 0.8 s on the H200). application-only: a
    process the candidate's import starts (a version probe, a compiler) is not injected; under the
    default ("all") each one paid ncu's start-up."""
    return [ncu, "--profile-from-start", "off", "--clock-control", "none", "--target-processes",
            "application-only", "--metrics", ",".join(METRICS), "--csv", "--page", "raw",
            "--log-file", log_file]


def find_ncu(override: str | None = None) -> str | None:
    """``override`` (Settings.ncu_tool, KERNELPRO_NCU), then PATH, then the CUDA toolkit's usual homes."""
    from kernelpro.runner.toolkit import find_tool

    return find_tool("ncu", override)


_UNKNOWN_METRIC = re.compile(
    r"(?:Failed to find metric|[Uu]nknown metric|[Ii]nvalid metric(?: name)?)\s*:?\s*'?\"?([\w.]+)"
)


# What ncu says when another profiler (DCGM's profiling module, another ncu) holds the GPU's counters:
# on the H200 two ncu children of parallel tests met it (session 17). It passes: the caller waits and
# tries again (runner/profiler.py) before it calls the profile lost.
_BUSY = ("concurrently collecting profiling data", "a driver resource was unavailable")


def counters_busy(output: str) -> bool:
    """Whether ncu failed because another profiler was collecting on the GPU at the same time."""
    return any(s in output for s in _BUSY)


def notes_for(output: str, returncode: int) -> list[str]:
    notes: list[str] = []
    if counters_busy(output):
        notes.append(
            "ncu: another profiler (DCGM's profiling module, or another ncu) was collecting on this GPU "
            "through every attempt, so no counters could be read. Pause DCGM profiling on the runner "
            "while kernelpro runs (`dcgmi profile --pause`, `--resume` after) or give kernelpro a GPU no "
            "other job profiles; continuing with SASS and timing only"
        )
        return notes
    if "ERR_NVGPUCTRPERM" in output:
        notes.append(
            "ncu: ERR_NVGPUCTRPERM: this user may not read the GPU performance counters. Allow "
            "it with the driver option NVreg_RestrictProfilingToAdminUsers=0 (e.g. "
            "'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in /etc/modprobe.d/, then "
            "reload the driver or reboot), or run the runner as root (or with CAP_SYS_ADMIN); "
            "continuing with SASS and timing only"
        )
        return notes
    unknown = sorted(set(_UNKNOWN_METRIC.findall(output)))
    if unknown:
        notes.append(
            f"ncu does not know metric(s) {', '.join(unknown)} on this GPU/ncu version: add a "
            "per-arch entry in kernelpro.runner.evidence.ncu.ALIASES; continuing with SASS and "
            "timing only"
        )
    for line in output.splitlines():
        if line.startswith("==WARNING== Unable to access the following"):
            notes.append("ncu: " + line.removeprefix("==WARNING== ").strip())
    if returncode != 0 and not unknown:
        errors = [ln for ln in output.splitlines() if ln.startswith("==ERROR==")]
        tail = "; ".join(errors[-3:]) or output.strip()[-300:]
        notes.append(f"ncu exited with {returncode}: {tail}")
    return notes


def collect(
    argv: Sequence[str],
    *,
    kernel_regex: str | None,
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
    ncu_path: str | None = None,
    metrics: Sequence[str] | None = None,
    full: bool = False,
    launch_count: int = 1,
    arch: str = "sm_90",
) -> tuple[list[KernelProfile], list[str]]:
    """Profile `argv` under ncu. Returns (kernels, notes); never raises for ncu's own failures."""
    ncu = ncu_path or find_ncu()
    if ncu is None or shutil.which(ncu) is None:
        return [], [NCU_MISSING]
    cmd = ncu_command(
        argv, kernel_regex=kernel_regex, metrics=metrics, full=full,
        launch_count=launch_count, arch=arch, ncu=ncu,
    )
    try:
        # A session of its own, so a timeout can end ncu *and* the application it launched.
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
    except OSError as e:
        return [], [f"ncu could not be started ({e}); continuing with SASS and timing only"]
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=10)
        return [], [
            f"ncu timed out after {timeout_s:g} s (profiling replays each kernel once per metric "
            "pass); continuing with SASS and timing only"
        ]
    output = out + "\n" + err
    notes = notes_for(output, proc.returncode)
    kernels = parse_csv(out)
    if kernels and not full:
        # ncu 2025.3 does not fail on a metric it does not know: it prints the value 'n/a' (seen on
        # the H200 for a made-up name, as for the old memory-dependency stall). Name them.
        asked = _arch_names(METRICS if metrics is None else metrics, arch)
        na = [n for n in asked if any(n in k.metrics and k.metrics[n] is None for k in kernels)]
        if na:
            notes.append(
                f"ncu returned n/a for {len(na)} metric(s) on this GPU: {', '.join(na)}; it does "
                "not know them here (add a per-arch entry in "
                "kernelpro.runner.evidence.ncu.ALIASES); the tools that need them stay quiet"
            )
    if not kernels and not notes:
        regex = f" matching regex:{kernel_regex}" if kernel_regex else ""
        available = _available_kernels(output)
        seen = f" (kernels launched: {', '.join(available)})" if available else ""
        notes.append(f"ncu profiled no kernel{regex}{seen}; continuing with SASS and timing only")
    return kernels, notes


def _available_kernels(output: str) -> list[str]:
    """The list ncu prints after '==WARNING== No kernels were profiled.' ('1. probe_kernel')."""
    lines = output.splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.startswith("Available Kernels"))
    except StopIteration:
        return []
    names: list[str] = []
    for ln in lines[start + 1 :]:
        m = re.match(r"\s*\d+\.\s+(.+)", ln)
        if not m:
            break
        names.append(m[1].strip())
    return names
