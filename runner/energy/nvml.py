"""The device: NVML's total-energy counter behind a two-method interface (``EnergyDevice``), so the
windowing and statistics run on a CPU against a replay of real recorded H200 samples
(tests/nvml_replay.py)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ..toolkit import first_visible_gpu


@dataclass(frozen=True)
class Reading:
    """One NVML sample."""

    t: float
    """When it was taken (seconds, the measuring process's monotonic clock)."""
    energy_mj: float
    """Total-energy counter since the driver loaded, mJ."""
    power_w: float | None = None
    """Instantaneous power reading, W."""
    sm_clock_mhz: float | None = None
    """SM clock, MHz."""
    mem_clock_mhz: float | None = None
    """Memory clock, MHz."""
    temperature_c: float | None = None
    """GPU temperature, degrees C."""
    power_limit_w: float | None = None
    """Enforced power limit, W."""


class EnergyDevice(Protocol):
    """The two things the protocol needs from NVML."""

    name: str

    def read(self) -> Reading: ...

    def processes(self) -> tuple[int, ...] | None:
        """PIDs with a compute context on the device; None when the driver does not say."""
        ...


class EnergyUnavailable(RuntimeError):
    """NVML or its energy counter cannot be used here; the message says why and what to do."""


def visible_gpu(visible: str | None) -> str:
    """The GPU to read the energy of: the one CUDA children see first (``first_visible_gpu`` of
    CUDA_VISIBLE_DEVICES), or EnergyUnavailable where that is no whole GPU."""
    first = first_visible_gpu(visible)
    if first is None:
        raise EnergyUnavailable(f"NVML energy: CUDA_VISIBLE_DEVICES={visible!r} names no whole GPU to measure "
                                "(energy is counted per physical GPU; MIG instances have no counter of their own)")
    return first


class NvmlDevice:
    """pynvml (nvidia-ml-py). Only reads; never sets clocks or power limits."""

    def __init__(self, gpu: str | None = None, clock: Callable[[], float] = time.perf_counter) -> None:
        """``gpu``: an NVML index or a GPU UUID; None: the GPU this process's CUDA children use
        (``visible_gpu`` of CUDA_VISIBLE_DEVICES)."""
        gpu = gpu if gpu is not None else visible_gpu(os.environ.get("CUDA_VISIBLE_DEVICES"))
        try:
            import pynvml
        except ImportError as e:
            raise EnergyUnavailable("NVML unavailable: pynvml is not installed (pip install nvidia-ml-py)") from e
        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            raise EnergyUnavailable(f"NVML unavailable: {e} (no NVIDIA driver on this machine?)") from e
        self._nv, self._clock = pynvml, clock
        try:
            self._h = (pynvml.nvmlDeviceGetHandleByUUID(gpu) if gpu.startswith("GPU-")
                       else pynvml.nvmlDeviceGetHandleByIndex(int(gpu)))
            name = pynvml.nvmlDeviceGetName(self._h)
            self.name = name.decode() if isinstance(name, bytes) else str(name)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._h)
        except Exception as e:  # NVMLError_NotSupported on GPUs before Volta
            self.close()
            raise EnergyUnavailable(f"NVML energy counter unavailable on GPU {gpu}: {e}") from e

    def _opt(self, fn: Callable[[], float], scale: float = 1.0) -> float | None:
        try:
            return float(fn()) * scale
        except Exception:
            return None

    def read(self) -> Reading:
        nv, h = self._nv, self._h
        return Reading(
            t=self._clock(), energy_mj=float(nv.nvmlDeviceGetTotalEnergyConsumption(h)),
            power_w=self._opt(lambda: nv.nvmlDeviceGetPowerUsage(h), 1e-3),
            sm_clock_mhz=self._opt(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
            mem_clock_mhz=self._opt(lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
            temperature_c=self._opt(lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)),
            power_limit_w=self._opt(lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h), 1e-3),
        )

    def processes(self) -> tuple[int, ...] | None:
        try:
            return tuple(int(p.pid) for p in self._nv.nvmlDeviceGetComputeRunningProcesses(self._h))
        except Exception:
            return None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nv.nvmlShutdown()


