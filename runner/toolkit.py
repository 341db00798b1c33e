"""Where the CUDA toolkit's command-line tools are (nvcc, ncu, compute-sanitizer, ...)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def find_tool(name: str, env_var: str | None = None) -> str | None:
    """``env_var`` (a path or a command name) when set, then PATH, then the toolkit's usual homes."""
    env = os.environ.get(env_var) if env_var else None
    if env:
        return env if Path(env).is_file() else shutil.which(env)
    found = shutil.which(name)
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / name).is_file():
            return str(Path(home) / "bin" / name)
    return None
