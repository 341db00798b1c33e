"""Probe: which Landlock rules does the CUDA driver need to initialise? (GPU machine; seconds.)

    python benchmarks/landlock_cuda.py

Each variant runs in a fresh interpreter: confine it with kernelpro's own ``confinement.restrict``
to the candidate policy (runner/confinement.py ``policy``) plus or minus one rule, then
``torch.cuda.init()``. Session 8 on the H200 (Linux 6.18, Landlock ABI 7) found that the driver
opens its threads' files under /proc/self/task for writing with truncation: without write and
truncate rights there, initialisation fails with CUDA error 304 ("OS call failed or operation not
supported on this OS") whatever else is allowed. Run it again when a driver or kernel update makes
confined children fail CUDA init.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import tempfile

VARIANTS = {
    "policy": "kernelpro's candidate policy as it stands",
    "policy-proc": "the same with all of /proc writable (a profiler's outer layer)",
    "root-readable": "the policy with / readable too",
}


def _child(variant: str) -> None:
    from kernelpro.runner import confinement as c

    work = tempfile.mkdtemp(prefix="kp-landlock-")
    p = c.policy([work])
    if variant == "policy-proc":
        p = dataclasses.replace(p, proc=True)
    elif variant == "root-readable":
        p = dataclasses.replace(p, readable=(*p.readable, "/"))
    abi = c.restrict(p)
    import torch

    try:
        torch.cuda.init()
        x = torch.ones(4, device="cuda")
        print(f"{variant}: OK (ABI {abi}, sum {float(x.sum())})")
    except Exception as e:  # the driver's error is the finding
        print(f"{variant}: FAIL (ABI {abi}) {str(e)[-120:]}")


def main() -> int:
    if len(sys.argv) > 1:
        _child(sys.argv[1])
        return 0
    for name, what in VARIANTS.items():
        r = subprocess.run([sys.executable, __file__, name], capture_output=True, text=True, timeout=120)
        print(f"- {what}: {(r.stdout or r.stderr).strip()[-300:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
