"""A raw CUDA kernel Solution as the Python callable the harness calls like any entry point
(and, for `binding: torch`, a torch extension's own function: runner/extension.py).

build (runner/cubin.py, cached) -> load (runner/driver.py) -> a function taking the definition's
inputs then its outputs, that reads the axis values off the tensors, evaluates the target's grid,
block and shared memory, packs the parameters (runner/launch.py) and launches on torch's current
stream. Raised errors are the candidate's: the harness reports them as COMPILE_ERROR (build) or
RUNTIME_ERROR (load, launch, a fault that surfaces at the next synchronize).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .cubin import arch_for, build, cache_root
from .launch import Launch, LaunchError, source_constants

__all__ = ["BuildFailure", "kernel_callable", "shared_cache"]


class BuildFailure(Exception):
    """The solution cannot be turned into a callable; ``status`` is the FlashInfer-Trace status."""

    def __init__(self, status: str, log: str) -> None:
        super().__init__(log)
        self.status = status
        self.log = log


def shared_cache(fallback: Path) -> Path:
    """The cubin cache of this evaluation: inside the cache directory the sandbox shares between
    candidates (TRITON_CACHE_DIR), so the loop's pre-built cubins are found; else ``fallback``."""
    shared = os.environ.get("TRITON_CACHE_DIR")
    return cache_root(Path(shared)) if shared else Path(fallback)


def _arch() -> str:
    import torch

    return arch_for(*torch.cuda.get_device_capability()) if torch.cuda.is_available() else "sm_90a"


def kernel_callable(solution: Mapping[str, Any], cache: Path) -> Callable[..., Any]:
    """Build and load a CUDA solution (its JSON form, as in the harness request)."""
    spec = solution["spec"]
    if spec.get("binding") == "torch":  # the sources wrap the kernel themselves: a torch extension
        from .extension import ExtensionError, extension_callable

        try:
            return extension_callable(solution, cache)[0]
        except ExtensionError as e:
            raise BuildFailure(e.status, e.log) from None
    if spec.get("launch") is None:
        raise BuildFailure("COMPILE_ERROR", "a cuda solution needs spec.launch (grid, block, args): raw kernels "
                           "are launched from the target's description; add `launch:` to the target in .kernelpro.yml")
    try:
        launch = Launch.from_json(spec["launch"])
    except LaunchError as e:
        raise BuildFailure("COMPILE_ERROR", f"spec.launch: {e}") from None
    sources = {f["path"]: f["content"] for f in solution["sources"]}
    entry, symbol = spec["entry_point"].split("::")
    if symbol != launch.kernel:
        raise BuildFailure("COMPILE_ERROR", f"entry point symbol {symbol!r} differs from spec.launch.kernel {launch.kernel!r}")
    constants = source_constants(sources)
    if missing := sorted(launch.names() - set(constants)):
        raise BuildFailure("COMPILE_ERROR", f"the launch uses {', '.join(missing)}, but no source defines "
                           f"{'it' if len(missing) == 1 else 'them'} as an integer constant "
                           f"(#define {missing[0]} 256, or constexpr int {missing[0]} = 256;)")
    result = build(sources, entry, cache, arch=_arch(), compiler="auto")  # NVRTC where nvcc is missing
    if not result.ok or result.cubin is None:
        raise BuildFailure("COMPILE_ERROR", result.log)
    import torch

    from .driver import CudaDriverError, NoGpuError, load_kernel

    try:
        kernel = load_kernel(result.cubin, launch.kernel, torch.cuda.current_device() if torch.cuda.is_available() else 0)
    except (NoGpuError, CudaDriverError) as e:
        raise BuildFailure("RUNTIME_ERROR", str(e)) from None
    return _launcher(launch, kernel, constants)


def _launcher(launch: Launch, kernel: Any, constants: Mapping[str, int]) -> Callable[..., None]:
    import torch

    from .launch import evaluate, pack

    geometry: dict[tuple[tuple[str, int], ...], tuple[dict[str, int], dict[str, int], Any]] = {}

    def call(*values: Any) -> None:
        axes = launch.axis_values(values)
        key = tuple(sorted(axes.items()))
        if key not in geometry:  # evaluated once per shape: the timed calls pay only packing and the launch
            names = {**constants, **axes}
            computed = {a.name: evaluate(a.value, names) for a in launch.args if a.value is not None}
            geometry[key] = (names, computed, launch.geometry(names))
        names, computed, (grid, block, smem) = geometry[key]
        if 0 in grid:
            return  # an empty problem: nothing to launch (a zero grid is an error for the driver)
        params, storage = pack(launch.args, {**computed, **dict(zip(launch.call, values, strict=True))}, names)
        kernel.launch(grid, block, smem, params, torch.cuda.current_stream().cuda_stream)
        del storage  # kept alive until the launch has copied the parameters

    call.__name__ = launch.kernel
    return call
