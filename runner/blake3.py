"""BLAKE3 of a tensor's bytes where they are, on the GPU: a CUDA evaluation's commitment to its outputs.

A timed call commits to its outputs before the parent says whether the call is checked
(runner/harness.py ``_Commits``). A sum of bit patterns alone is linear: a candidate that did no work
in its timed calls could, once told which calls were checked, compute their right outputs and move a
few elements within the tolerance until their sum was the one it had committed
(tests/fixtures/adversarial/digest_forge.py). The CPU's commits add a BLAKE2b of the bytes; copying
every timed call's outputs to the host for one would cost more than the call, so a CUDA evaluation's
commits add BLAKE3 computed on the GPU, in stream order right after the call, by runner/blake3.cu
(PTX built with nvcc, loaded through runner/driver.py: no compiler needed on the runner). The parent
recomputes it on the checked outputs it loaded (runner/timekeeper.py ``digest_of``); finding other
bytes with the same BLAKE3 is not possible.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

__all__ = ["PTX", "Blake3"]

PTX = Path(__file__).with_name("blake3.ptx")
_THREADS = 128
_CHUNK = 1024


class Blake3:
    """The two kernels of runner/blake3.cu, loaded once into ``device``'s primary context (torch's)."""

    def __init__(self, device: int = 0) -> None:
        from .driver import Kernel

        self.device = device
        self.chunks = Kernel(PTX.read_bytes() + b"\0", "blake3_chunks", device, PTX.name)
        self.parents = self.chunks.sibling("blake3_parents")
        self._args = [ctypes.c_uint64(0) for _ in range(4)]
        self._params = (ctypes.c_void_p * 4)(*(ctypes.addressof(a) for a in self._args))

    def _launch(self, kernel: Any, threads: int, values: tuple[int, ...], stream: int) -> None:
        for a, v in zip(self._args, values, strict=False):
            a.value = v
        kernel.launch(((threads + _THREADS - 1) // _THREADS, 1, 1), (_THREADS, 1, 1), 0, self._params, stream)

    def words(self, tensor: Any) -> Any:
        """The first 16 bytes of BLAKE3 of ``tensor``'s bytes (row-major), as two int64 (little-endian)
        on its GPU, enqueued on the current stream: nothing waits for it."""
        import torch

        t = tensor.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        n = t.numel() * t.element_size()
        chunks = max(1, -(-n // _CHUNK))
        stream = torch.cuda.current_stream(t.device).cuda_stream
        a = torch.empty(8 * chunks, dtype=torch.int32, device=t.device)
        b = torch.empty(8 * ((chunks + 1) // 2), dtype=torch.int32, device=t.device) if chunks > 1 else a
        self._launch(self.chunks, chunks, (t.data_ptr() if n else a.data_ptr(), n, chunks, a.data_ptr()), stream)
        count = chunks
        while count > 1:
            self._launch(self.parents, (count + 1) // 2, (a.data_ptr(), count, b.data_ptr()), stream)
            a, b, count = b, a, (count + 1) // 2
        return a[:4].view(torch.int64)


_LOADED: dict[int, Blake3] = {}


def blake3_words(tensor: Any) -> Any:
    """``Blake3.words`` with the kernels of the tensor's GPU, loaded the first time one is asked for."""
    index = tensor.device.index if tensor.device.index is not None else 0
    if index not in _LOADED:
        _LOADED[index] = Blake3(index)
    return _LOADED[index].words(tensor)
