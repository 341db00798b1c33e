"""The environment a sandboxed child gets: an allowlist of the runner's variables, never a secret,
plus the child's own (its folder as HOME and TMPDIR, the Triton cache). Every process kernelpro
starts for PR code (candidates, references, profilers, energy arms, the warm server, tools on a
candidate's files) gets its variables from here."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

# Variables a CUDA/Triton process needs; nothing else crosses into the candidate's process.
_ALLOWED = (
    "PATH", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
    "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "TRITON_PTXAS_PATH", "TRITON_CUOBJDUMP_PATH",
    "TRITON_NVDISASM_PATH", "TRITON_LIBCUDA_PATH", "PYTHONPATH", "VIRTUAL_ENV",
    "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS",
)
# Names that must never reach a candidate, whatever the allowlist or a caller's extras say.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|CREDENTIAL|PRIVATE|^AWS_|^ACTIONS_|"
                          r"^GITHUB_|^GH_|^KERNELPRO_LLM|^OPENAI_|^AZURE_|^GOOGLE_|^HF_|^SSH_", re.I)


class SandboxError(RuntimeError):
    """The sandbox itself is misconfigured (never the candidate's fault)."""


def scrubbed_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _ALLOWED if k in os.environ}
    env.update(extra or {})
    leaked = sorted(k for k in env if _SECRET_NAME.search(k))
    if leaked:
        raise SandboxError(f"refusing to start a candidate with {leaked} in its environment; "
                           "remove them from the sandbox's extra variables")
    return env


def child_variables(work: Path, device: str, cache_dir: Path | None) -> dict[str, str]:
    """The variables a child gets on top of the scrubbed environment."""
    extra = {"HOME": str(work), "TMPDIR": str(work), "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    if device == "cpu":
        extra["TRITON_INTERPRET"] = "1"
    if cache_dir is not None:
        # Compiled kernels are keyed by their source hash; sharing the cache skips recompiles.
        extra["TRITON_CACHE_DIR"] = str(cache_dir)
        # Autotune picks are kept there too: a later child of the same candidate (the profiler's,
        # the gate's) reuses the pick instead of benchmarking every config again, which under ncu
        # cost seconds per autotuned kernel. Each candidate has its own cache, so no pick is shared.
        extra["TRITON_CACHE_AUTOTUNING"] = "1"
    return extra
