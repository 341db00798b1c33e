"""Run untrusted candidate code in a fresh process: scrubbed environment, own directory, time limit.

Generated code is hostile. It gets no tokens or keys (the environment is rebuilt from an allowlist,
not filtered from a denylist), a private temporary directory as cwd and HOME, and a wall-clock
limit after which its whole process group is killed. A crash or a GPU fault ends only that process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Variables a CUDA/Triton process needs; nothing else crosses into the candidate's process.
_ALLOWED = (
    "PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
    "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH",
    "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH", "PYTHONPATH", "VIRTUAL_ENV",
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
)  # fmt: skip


def scrubbed_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _ALLOWED if k in os.environ}
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class ChildResult:
    """What came back from one sandboxed run."""

    status: str
    """'OK', 'TIMEOUT' or 'CRASHED' (the process died without writing a result)."""
    result: Mapping[str, Any] | None
    """The harness's result document when status is OK."""
    log: str
    """Tail of the child's stdout/stderr."""
    seconds: float
    """Wall time of the child."""


def run_child(request: Mapping[str, Any], *, timeout_s: float, device: str,
              cache_dir: Path | None = None, wrapper: Sequence[str] = ()) -> ChildResult:  # fmt: skip
    """``wrapper`` prefixes the command (a profiler such as ncu runs the harness under itself)."""
    with tempfile.TemporaryDirectory(prefix="kernelpro-cand-") as tmp:
        work = Path(tmp)
        (work / "request.json").write_text(json.dumps(request))
        extra = {"HOME": str(work), "TMPDIR": str(work), "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        if device == "cpu":
            extra["TRITON_INTERPRET"] = "1"
        if cache_dir is not None:
            # Compiled kernels are keyed by their source hash; sharing the cache skips recompiles.
            extra["TRITON_CACHE_DIR"] = str(cache_dir)
        cmd = [*wrapper, sys.executable, "-m", "kernelpro.runner.harness",
               str(work / "request.json"), str(work / "result.json")]  # fmt: skip
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=work, env=scrubbed_env(extra), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            out, _ = proc.communicate(timeout=timeout_s)
            timed_out = False
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            out, _ = proc.communicate()
            timed_out = True
        seconds = time.perf_counter() - t0
        log = out.decode(errors="replace")[-4000:]
        if timed_out:
            return ChildResult("TIMEOUT", None, f"killed after {timeout_s:.0f} s\n{log}", seconds)
        result_file = work / "result.json"
        if proc.returncode != 0 or not result_file.exists():
            return ChildResult("CRASHED", None, f"exit code {proc.returncode}\n{log}", seconds)
        try:
            return ChildResult("OK", json.loads(result_file.read_text()), log, seconds)
        except json.JSONDecodeError as e:
            return ChildResult("CRASHED", None, f"unreadable result ({e})\n{log}", seconds)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
