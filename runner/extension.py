"""Extension: a cuda target whose sources carry their own wrapper (PYBIND11_MODULE or TORCH_LIBRARY),
built by torch.utils.cpp_extension and called like any Python entry point.

A torch extension compiles torch's headers with the host compiler, which is what makes it slow
(72 s for a 10-line ``load_inline`` on the H200's runner), so every build is kept: the build
directory is keyed by the sources, the flags, the architecture and the torch/CUDA versions, ninja
runs with MAX_JOBS set to the CPU cores, and an identical candidate (a retry, the final gate, the
base branch's copy) finds everything built and only imports it. A per-key lock makes a second
process wait for a build in progress instead of racing it. Failed builds are not cached.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from .cubin import locked, unsafe_include

__all__ = ["COMPILE_UNITS", "extension_callable"]

COMPILE_UNITS = (".cu", ".cpp", ".cc", ".cxx")
EXTRA_CFLAGS = ("-O3",)
EXTRA_CUDA_CFLAGS = ("-O3", "-lineinfo")
_LOG_TAIL = 8000


class ExtensionError(Exception):
    """The extension did not build or load; ``status`` is COMPILE_ERROR (the log says why)."""

    def __init__(self, log: str) -> None:
        super().__init__(log)
        self.status = "COMPILE_ERROR"
        self.log = log if len(log) <= _LOG_TAIL else "...\n" + log[-_LOG_TAIL:]


def _arch_list() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}" + ("a" if major in (9, 10) else "")


def extension_callable(solution: Mapping[str, Any], cache: Path) -> tuple[Callable[..., Any], float, bool]:
    """(the entry function, build seconds, whether the build was already there). Raises
    ExtensionError with the compiler's output."""
    import torch
    from torch.utils import cpp_extension

    sources = {f["path"]: f["content"] for f in solution["sources"]}
    entry, symbol = solution["spec"]["entry_point"].split("::")
    if (why := unsafe_include(sources)) is not None:
        raise ExtensionError(why)
    units = sorted(p for p in sources if p.endswith(COMPILE_UNITS))
    if entry not in units:
        raise ExtensionError(f"entry file {entry} is not a .cu or .cpp file among the sources")
    arch = _arch_list()
    h = hashlib.sha256()
    for part in ("kernelpro-ext-1", torch.__version__, str(torch.version.cuda), arch or "cpu", *EXTRA_CFLAGS,
                 *EXTRA_CUDA_CFLAGS, *(p for path in sorted(sources) for p in (path, sources[path]))):
        h.update(part.encode())
        h.update(b"\0")
    key = h.hexdigest()
    build_dir = Path(cache) / "torch-ext" / key[:2] / key
    src = build_dir / "src"
    for path, text in sources.items():
        dest = src / PurePosixPath(path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists() or dest.read_text() != text:  # unchanged files keep their mtime: ninja stays idle
            dest.write_text(text)
    python_module = any("PYBIND11_MODULE" in sources[u] for u in units)
    # Read by cpp_extension when it builds: one ninja job per core, code for this GPU only.
    os.environ["MAX_JOBS"] = str(os.cpu_count() or 1)
    if arch is not None:
        os.environ["TORCH_CUDA_ARCH_LIST"] = arch
    t0 = time.perf_counter()
    done = build_dir / ".built"
    cached = done.exists()
    with locked(build_dir.parent / f"{key}.lock"):
        try:
            module = cpp_extension.load(
                name=f"kp_ext_{key[:16]}", sources=[str(src / u) for u in units], build_directory=str(build_dir),
                extra_cflags=list(EXTRA_CFLAGS), extra_cuda_cflags=list(EXTRA_CUDA_CFLAGS),
                extra_include_paths=[str(src), str((src / entry).parent)], is_python_module=python_module,
                verbose=False,
            )
        except Exception as e:  # cpp_extension raises RuntimeError with the compiler output, or ImportError
            raise ExtensionError(str(e).replace(str(src) + "/", "")) from None
        done.touch()
    seconds = time.perf_counter() - t0
    fn: Any = None
    if python_module:
        fn = getattr(module, symbol, None)
    elif "." in symbol:
        namespace, op = symbol.rsplit(".", 1)
        fn = getattr(getattr(torch.ops, namespace, None), op, None)
    if not callable(fn):
        where = "PYBIND11_MODULE" if python_module else "TORCH_LIBRARY (write the entry symbol as namespace.op)"
        raise ExtensionError(f"the extension built, but {where} defines no callable {symbol!r}")
    return fn, seconds, cached
