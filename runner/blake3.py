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
bytes with the same BLAKE3 is not possible. Where the parent holds a checked file on the host (a judge
on the CPU, or a GPU that refused), ``blake3_host`` computes the same hash with numpy.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PTX", "Blake3", "blake3_host", "blake3_words"]

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
        # The argument slots are shared: evaluation workers (one per GPU) may judge in threads of one process.
        self._lock = threading.Lock()

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
        with self._lock:
            return self._tree(t, n, chunks, stream)

    def _tree(self, t: Any, n: int, chunks: int, stream: int) -> Any:
        import torch

        a = torch.empty(8 * chunks, dtype=torch.int32, device=t.device)
        b = torch.empty(8 * ((chunks + 1) // 2), dtype=torch.int32, device=t.device) if chunks > 1 else a
        self._launch(self.chunks, chunks, (t.data_ptr() if n else a.data_ptr(), n, chunks, a.data_ptr()), stream)
        count = chunks
        while count > 1:
            self._launch(self.parents, (count + 1) // 2, (a.data_ptr(), count, b.data_ptr()), stream)
            a, b, count = b, a, (count + 1) // 2
        return a[:4].view(torch.int64)


_LOADED: dict[int, Blake3] = {}
_LOADING = threading.Lock()


def blake3_words(tensor: Any) -> Any:
    """``Blake3.words`` with the kernels of the tensor's GPU, loaded the first time one is asked for."""
    index = tensor.device.index if tensor.device.index is not None else 0
    with _LOADING:
        if index not in _LOADED:
            _LOADED[index] = Blake3(index)
    return _LOADED[index].words(tensor)


_IV = np.array([0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19],
               dtype=np.uint32)
_PERMUTATION = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8]
_G = [(0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15), (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13),
      (3, 4, 9, 14)]
_START, _END, _PARENT, _ROOT = 1, 2, 4, 8


def _rotr(x: np.ndarray, n: int) -> np.ndarray:
    return (x >> np.uint32(n)) | (x << np.uint32(32 - n))


def _compress(cv: np.ndarray, m: np.ndarray, counter: np.ndarray, length: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """BLAKE3's compression of many blocks at once: ``cv`` (8, k), ``m`` (16, k) uint32; the new (8, k)."""
    k = cv.shape[1]
    s = [cv[i].copy() for i in range(8)] + [np.full(k, _IV[i], np.uint32) for i in range(4)]
    s += [(counter & 0xFFFFFFFF).astype(np.uint32), (counter >> np.uint64(32)).astype(np.uint32),
          length.astype(np.uint32), flags.astype(np.uint32)]
    w = [m[i] for i in range(16)]
    for r in range(7):
        for g, (a, b, c, d) in enumerate(_G):
            x, y = w[2 * g], w[2 * g + 1]
            s[a] = s[a] + s[b] + x
            s[d] = _rotr(s[d] ^ s[a], 16)
            s[c] = s[c] + s[d]
            s[b] = _rotr(s[b] ^ s[c], 12)
            s[a] = s[a] + s[b] + y
            s[d] = _rotr(s[d] ^ s[a], 8)
            s[c] = s[c] + s[d]
            s[b] = _rotr(s[b] ^ s[c], 7)
        if r < 6:
            w = [w[_PERMUTATION[i]] for i in range(16)]
    return np.stack([s[i] ^ s[i + 8] for i in range(8)])


def _words(data: np.ndarray) -> np.ndarray:
    """Bytes, zero-padded to whole 4-byte words, as little-endian uint32."""
    pad = (-len(data)) % 4
    return np.concatenate([data, np.zeros(pad, np.uint8)]).view("<u4").astype(np.uint32) if pad else \
        np.ascontiguousarray(data).view("<u4").astype(np.uint32)


def blake3_host(data: bytes | np.ndarray) -> bytes:
    """The 32-byte BLAKE3 of ``data`` on the host, with numpy: the full chunks a block at a time, all at once.
    runner/blake3.cu's tree: chunk chaining values, then neighbours merged pairwise, an odd last going up."""
    b = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data.reshape(-1).view(np.uint8)
    n = len(b)
    chunks = max(1, -(-n // _CHUNK))
    full = 0 if chunks == 1 else n // _CHUNK  # a lone chunk is the root: the per-block path below
    with np.errstate(over="ignore"):
        cvs = []
        if full:
            words = _words(b[: full * _CHUNK]).reshape(full, 16, 16)
            cv = np.repeat(_IV[:, None], full, axis=1)
            counter = np.arange(full, dtype=np.uint64)
            for blk in range(16):
                flags = np.full(full, (_START if blk == 0 else 0) | (_END if blk == 15 else 0), np.uint32)
                cv = _compress(cv, words[:, blk, :].T, counter, np.full(full, 64, np.uint32), flags)
            cvs.append(cv)
        for i in range(full, chunks):  # the last chunk when partial, or the only one (it is the root)
            part = b[i * _CHUNK: (i + 1) * _CHUNK]
            blocks = max(1, -(-len(part) // 64))
            cv = _IV[:, None].copy()
            for blk in range(blocks):
                piece = part[blk * 64: (blk + 1) * 64]
                m = _words(np.concatenate([piece, np.zeros(64 - len(piece), np.uint8)]))[:, None]
                last = blk + 1 == blocks
                f = (_START if blk == 0 else 0) | (_END if last else 0) | (_ROOT if last and chunks == 1 else 0)
                cv = _compress(cv, m, np.array([i], np.uint64), np.array([len(piece)], np.uint32),
                               np.array([f], np.uint32))
            cvs.append(cv)
        nodes = np.concatenate(cvs, axis=1)  # (8, chunks)
        while nodes.shape[1] > 1:
            count = nodes.shape[1]
            pairs = count // 2
            m = np.concatenate([nodes[:, 0: 2 * pairs: 2], nodes[:, 1: 2 * pairs: 2]])
            merged = _compress(np.repeat(_IV[:, None], pairs, axis=1), m, np.zeros(pairs, np.uint64),
                               np.full(pairs, 64, np.uint32), np.full(pairs, _PARENT | (_ROOT if count == 2 else 0), np.uint32))
            nodes = np.concatenate([merged, nodes[:, 2 * pairs:]], axis=1)
    return nodes[:, 0].astype("<u4").tobytes()
