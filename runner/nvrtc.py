"""NVRTC: CUDA's runtime compiler, through ctypes, as the cubin builder when nvcc is not installed.

The GPU image has no cuda-python, but torch's CUDA wheels bring ``libnvrtc.so`` (the
``nvidia-cuda-nvrtc`` wheel) and a toolkit has it in ``lib64``. NVRTC compiles in-process, so it is
used only inside a candidate's own sandboxed child (a compiler crash on hostile source ends that
child alone); the loop's pre-build pool in the parent process always runs nvcc in a subprocess.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import glob
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path

__all__ = ["NVRTC_FLAGS", "compile_cubin", "find_nvrtc", "nvrtc_version"]

# nvcc's DEFAULT_FLAGS in NVRTC's spelling (NVRTC always optimises device code).
NVRTC_FLAGS: tuple[str, ...] = ("--std=c++17", "--generate-line-info", "--ptxas-options=-v")


def find_nvrtc() -> str | None:
    """libnvrtc from $CUDA_HOME / /usr/local/cuda, the nvidia-cuda-nvrtc wheel, or the loader's path."""
    patterns = [f"{home}/lib64/libnvrtc.so*" for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"),
                                                          "/usr/local/cuda") if home]
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        patterns.append(f"{root}/**/lib/libnvrtc.so*")
    for pattern in patterns:
        for path in sorted(glob.glob(pattern, recursive=True), reverse=True):
            name = Path(path).name
            if "builtins" not in name and ".alt." not in name:
                return path
    return ctypes.util.find_library("nvrtc")


NVRTC_ERROR_COMPILATION = 6  # the source did not compile (every other code is the environment's)


@functools.lru_cache(maxsize=4)
def _lib(path: str) -> ctypes.CDLL:
    # libnvrtc dlopens its builtins by soname; a wheel's lib folder is not on the loader's path, so
    # load them first from beside it (dlopen then finds the copy already in the process).
    for builtins in sorted(Path(path).parent.glob("libnvrtc-builtins.so*")):
        if ".alt." not in builtins.name:
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return lib


def nvrtc_version(path: str) -> str:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _lib(path).nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    return f"nvrtc {major.value}.{minor.value}"


def _strings(items: Sequence[str]) -> ctypes.Array[ctypes.c_char_p]:
    return (ctypes.c_char_p * max(len(items), 1))(*[s.encode() for s in items])


def compile_cubin(path: str, source: str, name: str, arch: str, include_dirs: Sequence[Path],
                  flags: Sequence[str] = NVRTC_FLAGS) -> tuple[bytes | None, str, bool]:
    """(the cubin or None; NVRTC's log; whether a failure is the source's fault, hence cacheable)."""
    lib = _lib(path)
    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if rc != 0:
        return None, f"nvrtcCreateProgram failed: {lib.nvrtcGetErrorString(rc).decode()}", False
    try:
        options = [*flags, f"--gpu-architecture={arch}", *(f"--include-path={d}" for d in include_dirs)]
        rc = lib.nvrtcCompileProgram(prog, len(options), _strings(options))
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        buf = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, buf)
        log = buf.value.decode(errors="replace")
        if rc != 0:
            return None, log or lib.nvrtcGetErrorString(rc).decode(), rc == NVRTC_ERROR_COMPILATION
        lib.nvrtcGetCUBINSize(prog, ctypes.byref(size))
        out = ctypes.create_string_buffer(size.value)
        rc = lib.nvrtcGetCUBIN(prog, out)
        if rc != 0 or size.value == 0:
            return None, f"{log}\nnvrtcGetCUBIN failed: {lib.nvrtcGetErrorString(rc).decode()} (use an sm_ architecture)", False
        return out.raw[: size.value], log, False
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
