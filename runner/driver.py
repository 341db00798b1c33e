"""Driver: the few CUDA driver API calls that load a cubin and launch a kernel, through ctypes.

No torch C++ extension and no cuda-python (the GPU image has neither): libcuda.so.1 is opened
directly. torch owns the device's primary context; this module retains the same one, so kernels
run in torch's context on torch's current stream and its events time them like any torch op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["CudaDriverError", "Hold", "Kernel", "NoGpuError", "load_kernel"]

CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
_DEFAULT_DYNAMIC_SMEM = 48 * 1024  # above this a kernel must opt in (cuFuncSetAttribute)


class NoGpuError(RuntimeError):
    """There is no NVIDIA driver (or no GPU) in this process."""


class CudaDriverError(RuntimeError):
    """A driver call failed; the message has the call and CUDA's error name."""


_lib: ctypes.CDLL | None = None


def _driver() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        errors = []
        for name in ("libcuda.so.1", ctypes.util.find_library("cuda") or "libcuda.so"):
            try:
                _lib = ctypes.CDLL(name)
                break
            except OSError as e:
                errors.append(str(e))
        else:
            raise NoGpuError("CUDA targets need an NVIDIA GPU: the CUDA driver (libcuda.so.1) is not installed "
                             f"here ({errors[0]}). Run on a machine with an NVIDIA GPU and driver.")
    return _lib


def _check(code: int, call: str) -> None:
    if code == 0:
        return
    name = ctypes.c_char_p()
    desc = ctypes.c_char_p()
    lib = _driver()
    lib.cuGetErrorName(code, ctypes.byref(name))
    lib.cuGetErrorString(code, ctypes.byref(desc))
    label = name.value.decode() if name.value else f"CUresult {code}"
    text = desc.value.decode() if desc.value else ""
    raise CudaDriverError(f"{call} failed: {label} ({text})")


def _context(device: int) -> ctypes.c_void_p:
    """torch's primary context of ``device``, made current on this thread."""
    lib = _driver()
    _check(lib.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    _check(lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    _check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    _check(lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


class Kernel:
    """One loaded kernel function; call ``launch`` with its geometry and packed parameters."""

    def __init__(self, image: bytes, name: str, device: int = 0, label: str = "") -> None:
        lib = _driver()
        self.name = name
        self.ctx = _context(device)
        self.module = ctypes.c_void_p()
        _check(lib.cuModuleLoadData(ctypes.byref(self.module), ctypes.c_char_p(image)), f"cuModuleLoadData({label or name})")
        self.function = ctypes.c_void_p()
        _check(lib.cuModuleGetFunction(ctypes.byref(self.function), self.module, name.encode()),
               f"cuModuleGetFunction({name!r}) (is the kernel extern \"C\" and __global__?)")
        self._smem_limit = _DEFAULT_DYNAMIC_SMEM
        self._lib = lib

    def sibling(self, name: str) -> Kernel:
        """Another kernel of the module this one was loaded from: no second load, no second JIT."""
        other = object.__new__(Kernel)
        other.name, other.ctx, other.module, other._lib = name, self.ctx, self.module, self._lib
        other._smem_limit = _DEFAULT_DYNAMIC_SMEM
        other.function = ctypes.c_void_p()
        _check(self._lib.cuModuleGetFunction(ctypes.byref(other.function), self.module, name.encode()),
               f"cuModuleGetFunction({name!r})")
        return other

    def launch(self, grid: Sequence[int], block: Sequence[int], shared_bytes: int, params: Any, stream: int) -> None:
        lib = self._lib
        current = ctypes.c_void_p()
        _check(lib.cuCtxGetCurrent(ctypes.byref(current)), "cuCtxGetCurrent")
        if current.value != self.ctx.value:
            _check(lib.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        if shared_bytes > self._smem_limit:
            _check(lib.cuFuncSetAttribute(self.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          ctypes.c_int(shared_bytes)),
                   f"cuFuncSetAttribute(max dynamic shared memory = {shared_bytes} bytes)")
            self._smem_limit = shared_bytes
        gx, gy, gz = grid
        bx, by, bz = block
        _check(lib.cuLaunchKernel(self.function, ctypes.c_uint(gx), ctypes.c_uint(gy), ctypes.c_uint(gz),
                                  ctypes.c_uint(bx), ctypes.c_uint(by), ctypes.c_uint(bz), ctypes.c_uint(shared_bytes),
                                  ctypes.c_void_p(stream), params, None),
               f"cuLaunchKernel({self.name}, grid={tuple(grid)}, block={tuple(block)}, shared={shared_bytes})")


def load_kernel(cubin: Path, name: str, device: int = 0) -> Kernel:
    """Load ``name`` from a cubin into ``device``'s primary context. Raises NoGpuError without a
    driver, CudaDriverError when the driver refuses (wrong architecture, missing symbol)."""
    _driver()  # no driver is the error to report, before any file
    return Kernel(Path(cubin).read_bytes(), name, device, Path(cubin).name)


# Spins until the GPU's global timer (nanoseconds, independent of the SM clock) has advanced by its
# argument. PTX, so the driver compiles it for whatever GPU it runs on; no toolkit needed.
HOLD_PTX = """
.version 7.0
.target sm_70
.address_size 64
.visible .entry kernelpro_hold(.param .u64 ns)
{
  .reg .u64 %t0, %t1, %ns, %d;
  .reg .pred %p;
  ld.param.u64 %ns, [ns];
  mov.u64 %t0, %globaltimer;
WAIT:
  mov.u64 %t1, %globaltimer;
  sub.u64 %d, %t1, %t0;
  setp.lt.u64 %p, %d, %ns;
  @%p bra WAIT;
  ret;
}
"""


class Hold:
    """One thread spinning on the GPU for a fixed time, on a stream: the host enqueues what follows
    while the GPU waits, so an event recorded after it times the GPU's work, not the host's launch
    (nvbench's blocking kernel, bounded by time rather than by SM cycles, which DVFS stretches)."""

    def __init__(self, device: int = 0) -> None:
        self.kernel = Kernel(HOLD_PTX.encode() + b"\0", "kernelpro_hold", device, "the hold kernel's PTX")
        self._ns = ctypes.c_uint64(0)
        self._params = (ctypes.c_void_p * 1)(ctypes.addressof(self._ns))

    def __call__(self, microseconds: float, stream: int) -> None:
        self._ns.value = max(0, int(microseconds * 1000))
        self.kernel.launch((1, 1, 1), (1, 1, 1), 0, self._params, stream)
