"""Liger DyT baseline anomaly (session 26): is the PR kernel's first evaluation slow because the standby
ncu child and the warm server, started by Run._start_children just before it, are importing while it
times? And is the inflation host latency (fixed by a longer hold) or GPU-side interference?

Run on one H200 from the kernelpro checkout, in the environment benchmarks/h200.sh sets up (liger_kernel,
ncu installed):   bash benchmarks/h200.sh overlap      (~2-2.5 min; benchmarks/startup_overlap.py)

Arms, each a fresh evaluation of the PR's kernel in a fresh Triton cache (autotune in verify, as entry 0):
  A quiet      no standby, no warm server
  B as-run     start_standby + start_warm exactly as _start_children, then evaluate at once (entry 0); since
               session 27 the child waits for the warm server's preload and forks from it (WARM_WAIT_S)
  C hold2000   as B, hold_us=2000 (host has 2 ms to enqueue s, kernel and e before the GPU reaches s)
  D standby    as B without the warm server (attribution): a fresh interpreter beside the standby's start,
               as entry 0 was before session 27
Prints median/p10/p90, the time phase, the per-call loop, spawn, and during each arm's time phase: SM clock,
GPU util, other processes on the GPU (nvidia-smi pmon) and host CPU busy % / runnable tasks (/proc/stat).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path("benchmarks").resolve()))
import upstream  # noqa: E402

from kernelpro.runner.config import load_config  # noqa: E402
from kernelpro.runner.evaluator import EvalSettings, evaluate, reference_ready  # noqa: E402
from kernelpro.runner.forkserver import cool  # noqa: E402
from kernelpro.runner.preload import start as start_warm  # noqa: E402
from kernelpro.runner.profiler import ProfileSettings, start_standby  # noqa: E402
from kernelpro.workspace import checkouts  # noqa: E402

work = Path(tempfile.mkdtemp(prefix="dyt-overlap-"))
out = Path(os.environ.get("OUT", work))
cpu: list[tuple[float, float, int]] = []  # (wall, busy fraction of all CPUs, runnable tasks)


def _cpu_sampler() -> None:
    def read() -> tuple[list[int], int]:
        lines = Path("/proc/stat").read_text().splitlines()
        v = [int(x) for x in lines[0].split()[1:]]
        run = next(int(ln.split()[1]) for ln in lines if ln.startswith("procs_running"))
        return v, run
    prev, _ = read()
    while True:
        time.sleep(0.1)
        cur, run = read()
        d = [c - p for c, p in zip(cur, prev, strict=True)]
        idle = d[3] + d[4]
        cpu.append((time.time(), 1 - idle / max(1, sum(d)), run))
        prev = cur


threading.Thread(target=_cpu_sampler, daemon=True).start()
smi_log, pmon_log = open(out / "smi.csv", "w"), open(out / "pmon.txt", "w")  # noqa: SIM115 (open for the run)
smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,clocks.mem,utilization.gpu,power.draw",
                        "--format=csv,noheader,nounits", "-lms", "100"], stdout=smi_log)
pmon = subprocess.Popen(["nvidia-smi", "pmon", "-s", "u", "-d", "1", "-o", "T"], stdout=pmon_log)
print("cpus", os.cpu_count(), "affinity", len(os.sched_getaffinity(0)),
      "cgroup cpu.max", (Path("/sys/fs/cgroup/cpu.max").read_text().strip() if Path("/sys/fs/cgroup/cpu.max").exists() else "-"))

k = next(x for x in upstream.KERNELS if x.name == "liger_dyt")
repo = work / "repo"
repo.mkdir()
upstream.make_repo(k, repo, 3)
rows = []
with checkouts(repo, "HEAD~1", "HEAD") as co:
    (t,) = load_config(co.base / ".kernelpro.yml", co.base).targets
    head, wl = t.solution(co.head), t.workloads_for("cuda")
    es0 = EvalSettings(device="cuda", timeout_s=120, context=t.context(co.head), reference_ahead=True, timeline=True)
    assert reference_ready(t.definition, head, wl, t.tolerance, es0), "reference failed"
    ps = ProfileSettings()

    def arm(name: str, standby: bool, warm: bool, hold_us: float = 100.0) -> None:
        es = replace(es0, cache_dir=work / f"cache-{name}", hold_us=hold_us)
        sb = start_standby(head, ps) if standby else None
        if warm:
            start_warm(t.name, head, es.context, "cuda", blocked=(str(co.head),))
        o = evaluate(t.definition, head, wl, t.tolerance, es)
        t1 = time.time()
        p, r = o.phases, o.results[0] if o.results else None
        tm = r.timing if r is not None else None
        # the time phase on the wall clock (child start = end - wall; phases in the order the child runs them)
        start = t1 - o.wall_seconds
        ts = start + p.get("launch", 0) + p.get("startup", 0) + p.get("calibrate", 0) + o.build_seconds + p.get("verify", 0)
        te = ts + p.get("time", 0)
        win = [c for c in cpu if ts <= c[0] <= te]
        row = {"arm": name, "status": o.status, "standby": bool(sb), "hold_us": hold_us,
               "median": tm and round(tm.median_ms, 4), "p10": tm and round(tm.p10_ms, 4),
               "p90": tm and round(tm.p90_ms, 4), "time_s": round(p.get("time", 0), 3),
               "loop_ms": tm and round(p.get("time", 0) / tm.n * 1e3, 2), "build_s": round(o.build_seconds, 2),
               "verify_s": round(p.get("verify", 0), 2),
               "kernel_us": (o.timeline or {}).get("kernel_us"), "launch_ns": (o.timeline or {}).get("avg_launch_ns"),
               "cpu_busy": win and round(sum(c[1] for c in win) / len(win), 2), "runnable_max": win and max(c[2] for c in win),
               "time_window": [time.strftime("%H:%M:%S", time.localtime(ts)), round(te - ts, 2)],
               "spawn": o.environment.get("sandbox", {}).get("spawn", "")[:60],
               "standby_up_s": sb and round(sb.up_s, 1)}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if sb is not None:
            sb.close()
        cool()

    arm("A-quiet", False, False)
    arm("B-as-run", True, True)
    arm("C-as-run-hold2000", True, True, 2000.0)
    arm("D-standby-only", True, False)
smi.terminate()
pmon.terminate()
(out / "rows.json").write_text(json.dumps(rows, indent=1))
print("smi/pmon logs in", out, "- read them at each arm's time_window (SM clock, other pids with sm%)")
