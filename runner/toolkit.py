"""Where the CUDA toolkit's command-line tools are (nvcc, ncu, compute-sanitizer, ...), and which GPU
the driver's own tools (nvidia-smi, NVML) should be asked about."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def find_tool(name: str, override: str | None = None) -> str | None:
    """``override`` (a path or a command name: the operator's setting, kernelpro.settings) when set,
    then PATH, then the toolkit's usual homes."""
    if override:
        return override if Path(override).is_file() else shutil.which(override)
    found = shutil.which(name)
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / name).is_file():
            return str(Path(home) / "bin" / name)
    return None


def first_visible_gpu(visible: str | None) -> str | None:
    """The GPU that CUDA children see first, as nvidia-smi and NVML name it: the first entry of
    CUDA_VISIBLE_DEVICES (``visible``; None: unset, so "0"), an index or a GPU UUID. Those tools
    ignore the variable and count every GPU of the host, so a runner pinned to GPU 1 that asked them
    plainly would hear about GPU 0. None where it names no whole GPU (empty, -1, a MIG instance).
    An index means the same GPU to both where the host's GPUs are alike (CUDA then orders them by
    PCI bus, as the tools do) or CUDA_DEVICE_ORDER=PCI_BUS_ID is set; a UUID is exact."""
    first = ("0" if visible is None else visible).split(",")[0].strip()
    return None if not first or first == "-1" or first.startswith("MIG-") else first
