"""Which part of the hardened confinement stops CUDA on a GPU host (issue 18)?

Session 15 found CUDA's initialisation failing (error 304) under the seccomp filter, the per-entry
/dev rules and the empty /run and /dev/shm together; session 16 ran this on the H200: the refused
socket(AF_UNIX) call alone did it, and CUDA needs unix sockets of another type than stream
(runner/confinement.UNIX_SOCKETS_GPU, benchmarks/results-h200-session16/). This starts one child per variant, each confined as the
sandbox confines a candidate (unshare -r -n -p --kill-child --mount-proc as root or a user; then
``confinement.enter``), with only that variant's parts on, and has it initialise CUDA, run a torch
operation and a Triton kernel. Where strace is installed, the first failing variant runs again under
it and its failing calls are kept. Needs a GPU; writes a JSON table.

    python3 benchmarks/harden_probe.py --out DIR

``--timing N`` asks where the confinement's time goes instead (issue 18: through the fork server a
confined evaluation took 60-90 ms more on the H200, +3.5 % on a CPU host). Each run is a child
that, like a fork server's child, has torch and Triton imported before it confines itself; it then
times its confinement, CUDA's initialisation, its first and a second operation, and the parent
times its exit. The ``TIMING`` variants take the parts of the confinement on and off, N runs each,
interleaved. Where the machine has a C compiler, one run of the whole confinement and one of none
run again under ``calls_shim.c`` (LD_PRELOAD), which logs their sockets, connects, execs, forks,
sleeps and refused opens: the difference names what CUDA does differently when confined.

    python3 benchmarks/harden_probe.py --timing 5 --out DIR
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

# Each variant: which parts are on. Session 16's first run (all eleven of the parts alone) found the
# refused socket(AF_UNIX) call alone stops CUDA (error 304); dev rules, empty mounts and the metadata
# no-ops do not. These try the whole hardening with unix sockets allowed in narrower and wider ways.
FULL = {"seccomp": True, "dev": True, "mounts": ("/run", "/dev/shm")}
VARIANTS: dict[str, dict[str, object]] = {
    "none": {},
    "all": FULL,
    "all-unix-stream-noconnect": {**FULL, "unix": "stream", "connect": True},
    "all-unix-any-noconnect": {**FULL, "unix": "any", "connect": True},
    "all-unix-stream": {**FULL, "unix": "stream"},
    "all-unix-any": {**FULL, "unix": "any"},
    "seccomp-unix-stream-noconnect": {"seccomp": True, "unix": "stream", "connect": True},
}
# Strictest first: the one benchmarks/h200.sh's harden-on step turns on.
ORDER = ("all-unix-stream-noconnect", "all-unix-any-noconnect", "all-unix-stream", "all-unix-any")

CHILD = r"""
import json, os, sys
v = json.loads(sys.argv[1])
from kernelpro.runner import confinement as c
c.UNIX_SOCKETS = c.UNIX_SOCKETS_GPU = v.get("unix", "refuse")
c.REFUSE_CONNECT = bool(v.get("connect"))
c._EMPTY_MOUNTS = tuple(v.get("mounts", ()))
if not v.get("dev"):
    c._dev_entries = lambda: ["/dev"]
if not v.get("seccomp"):
    c.seccomp_filter = lambda *a, **k: False
tmp = sys.argv[2]
p = c.policy([tmp])
c.enter(p.to_json(), supervised=False)
print("confined: pid", os.getpid(), "seccomp", open("/proc/self/status").read().split("Seccomp:")[1].split()[0], flush=True)
import torch
if sys.argv[3] == "cpu":
    print("triton ok (cpu: confinement only)", float(torch.ones(4).sum()))
    sys.exit(0)
torch.cuda.init()
x = torch.ones(1 << 20, device="cuda")
print("torch ok", float((x * 2).sum()), flush=True)
sys.path.insert(0, tmp)
from probe_kernel import twice  # Triton reads a kernel's source from its file
twice[(1024,)](x, x.numel(), BLOCK=1024)
torch.cuda.synchronize()
print("triton ok", float(x.sum()), flush=True)
"""
KERNEL = """import triton
import triton.language as tl


@triton.jit
def twice(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)
"""


def _child_env(tmp: str) -> dict[str, str]:
    """A probe child's environment: the paths it needs, and a home, temp and Triton cache in ``tmp``."""
    env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES") if k in os.environ}
    env.update(HOME=tmp, TMPDIR=tmp, TRITON_CACHE_DIR=os.path.join(tmp, "triton"), PYTHONDONTWRITEBYTECODE="1")
    return env


# --timing: which part of the confinement costs time, and where (CUDA's start, the operations, exit).
TIMING: dict[str, dict[str, bool]] = {
    "none": {},
    "landlock": {"landlock": True},
    "seccomp": {"seccomp": True},
    "seccomp-connect-ok": {"seccomp": True, "connect_ok": True},
    "full": {"landlock": True, "seccomp": True},
    "full-connect-ok": {"landlock": True, "seccomp": True, "connect_ok": True},
}
CHILD_TIMING = r"""
import json, os, sys, time
t = {"start": time.monotonic()}
v = json.loads(sys.argv[1])
import torch, triton  # noqa: F401 - a fork server's child has them imported before it confines itself
t["imported"] = time.monotonic()
from kernelpro.runner import confinement as c
c.REFUSE_CONNECT = not v.get("connect_ok")
p = c.policy([sys.argv[2]])
t["policy"] = time.monotonic()
if v.get("landlock"):
    if not v.get("seccomp"):
        c.seccomp_filter = lambda *a, **k: False
    c.restrict(p)
elif v.get("seccomp"):
    c.seccomp_filter(unix=p.unix)
t["confined"] = time.monotonic()
dev = sys.argv[3]
if dev == "cuda":
    torch.cuda.init()
t["cuda_init"] = time.monotonic()
x = torch.ones(1 << 20, device=dev)
torch.cuda.synchronize() if dev == "cuda" else None
t["first_op"] = time.monotonic()
y = torch.nn.functional.silu(x) * x
torch.cuda.synchronize() if dev == "cuda" else None
t["second_op"] = time.monotonic()
print("TIMES " + json.dumps(t), flush=True)
"""
STAGES = ("imported", "policy", "confined", "cuda_init", "first_op", "second_op")


def timed(name: str, v: dict[str, bool], prefix: list[str], device: str, shim: str | None = None) -> dict[str, object]:
    """One run of ``CHILD_TIMING``: the seconds of each stage after the previous one, and its exit."""
    with tempfile.TemporaryDirectory(prefix="kp-harden-") as tmp:
        env = _child_env(tmp)
        if shim:
            env.update(LD_PRELOAD=shim, KP_SHIM_FD="2")
        t0 = time.monotonic()
        p = subprocess.run([*prefix, sys.executable, "-c", CHILD_TIMING, json.dumps(v), tmp, device], capture_output=True,
                           text=True, env=env, timeout=240, stdin=subprocess.DEVNULL)
        end = time.monotonic()
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("TIMES ")), None)
    row: dict[str, object] = {"variant": name, "rc": p.returncode, "wall": end - t0}
    if line is None:
        row["error"] = (p.stdout + p.stderr)[-3000:]
        return row
    t = json.loads(line[6:])
    prev = t["start"]
    for k in STAGES:
        row[k] = t[k] - prev
        prev = t[k]
    row["exit"] = end - prev
    if shim:
        row["calls"] = p.stderr.splitlines()[-3000:]
    return row


def timing(n: int, prefix: list[str], out: str, device: str) -> None:
    rows = [timed(name, v, prefix, device) for _ in range(n) for name, v in TIMING.items()]
    errors = [r for r in rows if "error" in r]
    for r in errors[:3]:
        print(f"{r['variant']}: rc {r['rc']}\n{r['error']}", flush=True)
    cols = (*STAGES[2:], "exit", "wall")
    print("| variant | " + " | ".join(f"{c} (ms)" for c in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name in TIMING:
        mine = [r for r in rows if r["variant"] == name and "error" not in r]
        if mine:
            print(f"| {name} | " + " | ".join(f"{1e3 * statistics.median(float(r[c]) for r in mine):.1f}"  # type: ignore[arg-type]
                                                for c in cols) + f" |  ({len(mine)} runs)", flush=True)
    logs = {}
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc:
        shim = os.path.join(out, "calls_shim.so")
        src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls_shim.c")
        built = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", shim, src, "-ldl"], capture_output=True, text=True)
        if built.returncode:
            print("calls_shim.c did not build:", built.stderr[-1000:])
        else:
            for name in ("none", "full"):
                r = timed(name, TIMING[name], prefix, device, shim)
                logs[name] = r
                calls = r.get("calls", [])
                print(f"--- {name} under calls_shim (cuda_init {1e3 * float(r.get('cuda_init', 0)):.1f} ms): "  # type: ignore[arg-type]
                      f"{len(calls)} lines, the last 60:", flush=True)
                print("\n".join(calls[-60:]), flush=True)
    with open(os.path.join(out, "timing.json"), "w") as f:
        json.dump({"unshare": prefix, "rows": rows, "shim": logs}, f, indent=1)


def run(name: str, v: dict[str, object], prefix: list[str], wrap: Sequence[str] = (), device: str = "cuda") -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="kp-harden-") as tmp:
        with open(os.path.join(tmp, "probe_kernel.py"), "w") as f:
            f.write(KERNEL)
        env = _child_env(tmp)
        t = time.perf_counter()
        p = subprocess.run([*prefix, *wrap, sys.executable, "-c", CHILD, json.dumps(v), tmp, device], capture_output=True,
                           text=True, env=env, timeout=240, stdin=subprocess.DEVNULL)
        return {"variant": name, "parts": v, "rc": p.returncode, "seconds": round(time.perf_counter() - t, 1),
                "ok": p.returncode == 0 and "triton ok" in p.stdout, "stdout": p.stdout[-2000:], "stderr": p.stderr[-4000:]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--device", default="cuda", help="cpu: the confinement alone, no CUDA (to try the probe here)")
    ap.add_argument("--timing", type=int, default=0, help="N: where the confinement's time goes, N runs per variant")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    unshare = shutil.which("unshare")
    flags = ["-n", "-p", "--kill-child", "--mount-proc"] if os.geteuid() == 0 else ["-r", "-n", "-p", "--kill-child", "--mount-proc"]
    prefix = [unshare, *flags] if unshare else []
    if a.timing:
        timing(a.timing, prefix, a.out, a.device)
        return 0
    rows = []
    for name, v in VARIANTS.items():
        if a.only and name not in a.only.split(","):
            continue
        r = run(name, v, prefix, device=a.device)
        rows.append(r)
        print(f"{name:24} ok={r['ok']} rc={r['rc']} {r['seconds']} s  {r['stderr'].strip()[-300:]!r}", flush=True)
    strace = shutil.which("strace")
    failed = [r for r in rows if not r["ok"]]
    if strace and failed:
        for r in failed[:3]:
            log = os.path.join(a.out, f"strace-{r['variant']}.txt")
            s = run(r["variant"] + "+strace", r["parts"], prefix, [strace, "-f", "-qq", "-o", log], a.device)
            rows.append(s)
            with open(log, errors="replace") as f:  # the failing calls only, the last of them
                failing = [ln for ln in f if "= -1 " in ln and "ENOENT" not in ln]
            with open(log, "w") as f:
                f.writelines(failing[-600:])
            print(f"strace of {r['variant']}: rc={s['rc']}, {log}", flush=True)
    ok = {r["variant"] for r in rows if r["ok"]}
    pick = next((n for n in ORDER if n in ok), None)
    with open(os.path.join(a.out, "harden.json"), "w") as f:
        json.dump({"unshare": prefix, "strace": strace, "pick": pick, "pick_parts": VARIANTS.get(pick or ""),
                   "rows": rows}, f, indent=1)
    print(f"strictest variant CUDA and Triton ran under: {pick}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
