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
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
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


def run(name: str, v: dict[str, object], prefix: list[str], wrap: Sequence[str] = (), device: str = "cuda") -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="kp-harden-") as tmp:
        with open(os.path.join(tmp, "probe_kernel.py"), "w") as f:
            f.write(KERNEL)
        env = {k: os.environ[k] for k in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES") if k in os.environ}
        env.update(HOME=tmp, TMPDIR=tmp, TRITON_CACHE_DIR=os.path.join(tmp, "triton"), PYTHONDONTWRITEBYTECODE="1")
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
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    unshare = shutil.which("unshare")
    flags = ["-n", "-p", "--kill-child", "--mount-proc"] if os.geteuid() == 0 else ["-r", "-n", "-p", "--kill-child", "--mount-proc"]
    prefix = [unshare, *flags] if unshare else []
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
