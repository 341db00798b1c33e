"""The file a child's outputs cross to the parent in: a JSON header and the tensors' raw bytes.

The parent reads it whole into one buffer of its own (runner/sandbox.py ``read_capped``) and makes
each tensor a view of that buffer (:func:`read`): no unpickler and no zip reader ever parses what a candidate wrote,
and nothing is copied after the read. For a 256 MB output the parent's read and load took 0.63 s
with torch.load and take 0.23 s (the child's save: 0.24 and 0.23 s; medians of 5 on the 2-core CPU
machine, `python benchmarks/tensorfile.py`), and a GPU run moves gigabytes of outputs per evaluation.

Layout: ``MAGIC``, the header's length (8 bytes, little-endian), the header (UTF-8 JSON:
``{"items": [...]}``), zero padding to a multiple of ``ALIGN``, then the data; each tensor's
``offset`` counts from the data's start and is a multiple of ``ALIGN``. An item is
``{"tensor": dtype, "shape": [...], "offset": n, "nbytes": n}``, ``{"number": value}`` or
``{"other": type name}`` (which the judge refuses by name)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

MAGIC = b"KPOUT01\n"
ALIGN = 64
MAX_HEADER = 1 << 20
"""Bytes of header a reader accepts (a few thousand outputs' worth)."""
MAX_DIMS = 16

DTYPES: dict[str, torch.dtype] = {
    name: d
    for name in ("float16", "bfloat16", "float32", "float64", "complex64", "complex128", "int8", "int16", "int32",
                 "int64", "uint8", "uint16", "uint32", "uint64", "bool", "float8_e4m3fn", "float8_e5m2",
                 "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu")
    if isinstance(d := getattr(torch, name, None), torch.dtype)
}
"""The element types an output file may hold, by the name the header gives."""


class TensorFileError(ValueError):
    """A file that is not one this module wrote: what is wrong with it, for the candidate's log."""


def _pad(n: int) -> int:
    return -n % ALIGN


def write(values: Sequence[Any], path: Path) -> None:
    """``values`` (tensors on any device, plain numbers, anything else by its type's name) into
    ``path``. A tensor is written contiguous, through a pinned host copy when it is on the GPU."""
    items: list[dict[str, Any]] = []
    blobs: list[tuple[int, torch.Tensor]] = []
    end = 0
    for v in values:
        if isinstance(v, torch.Tensor):
            t = v.detach().contiguous()
            if t.dtype not in DTYPES.values():
                items.append({"other": f"tensor of {t.dtype}"})
                continue
            nbytes = t.numel() * t.element_size()
            items.append({"tensor": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "offset": end,
                          "nbytes": nbytes})
            blobs.append((end, t))
            end += nbytes + _pad(nbytes)
        elif isinstance(v, (bool, int, float)):
            items.append({"number": v})
        else:
            items.append({"other": type(v).__name__})
    header = json.dumps({"items": items}).encode()
    with open(path, "wb") as f:
        f.write(MAGIC + len(header).to_bytes(8, "little") + header + bytes(_pad(len(MAGIC) + 8 + len(header))))
        at = 0
        for offset, t in blobs:
            f.write(bytes(offset - at))
            if t.is_cuda:  # a pinned copy is several times faster than a pageable one (torch caches the block)
                host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                host.copy_(t)
                t = host
            if t.numel():
                f.write(t.reshape(-1).view(torch.uint8).numpy().data)
            at = offset + t.numel() * t.element_size()


def read(data: bytearray | memoryview, name: str = "outputs") -> list[Any]:
    """The values in ``data`` (a whole file's bytes, as runner/sandbox.py's ``read_capped`` or
    ``read_capped_pages`` read them); each tensor a view of ``data``. Raises TensorFileError saying
    what is wrong, for any file this module would not have written."""
    def bad(why: str) -> TensorFileError:
        return TensorFileError(f"{name} is not an outputs file kernelpro wrote: {why}")

    if not isinstance(data, bytearray | memoryview) or memoryview(data).readonly:
        raise TypeError("read() takes a bytearray or a writable memoryview: tensors are views of it, and a view "
                        "needs writable memory")
    head = len(MAGIC) + 8
    if len(data) < head or data[: len(MAGIC)] != MAGIC:
        raise bad("no header")
    size = int.from_bytes(data[len(MAGIC) : head], "little")
    if size > min(MAX_HEADER, len(data) - head):
        raise bad(f"a header of {size} bytes")
    try:
        doc = json.loads(bytes(data[head : head + size]))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise bad(f"its header is not JSON ({e})") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise bad("its header has no list of items")
    start = head + size + _pad(head + size)
    out: list[Any] = []
    for k, item in enumerate(items):
        if not isinstance(item, dict) or len({"tensor", "number", "other"} & item.keys()) != 1:
            raise bad(f"item {k} is neither a tensor, a number nor another value")
        if "number" in item:
            if type(item["number"]) not in (bool, int, float):
                raise bad(f"item {k} is not a number")
            out.append(item["number"])
        elif "other" in item:
            out.append({"not_a_tensor": str(item["other"])[:100]})
        else:
            out.append(_tensor(data, start, item, k, bad))
    return out


def _tensor(data: bytearray | memoryview, start: int, item: dict[str, Any], k: int, bad: Any) -> torch.Tensor:
    dtype = DTYPES.get(item["tensor"]) if isinstance(item["tensor"], str) else None
    shape, offset, nbytes = item.get("shape"), item.get("offset"), item.get("nbytes")
    if dtype is None:
        raise bad(f"item {k} has the element type {str(item['tensor'])[:40]!r}")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(type(n) is int and n >= 0 for n in shape)):
        raise bad(f"item {k} has the shape {str(shape)[:80]}")
    if type(offset) is not int or type(nbytes) is not int or offset < 0 or offset % ALIGN:
        raise bad(f"item {k} has the offset {offset!r}")
    numel, itemsize = math.prod(shape), dtype.itemsize
    if nbytes != numel * itemsize or start + offset + nbytes > len(data):
        raise bad(f"item {k}: {nbytes} bytes at {offset} for {numel} elements of {itemsize} bytes in a file of {len(data)}")
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(data, dtype=torch.uint8, count=nbytes, offset=start + offset)
    return flat.view(dtype).reshape(shape)


def save(values: Sequence[Any], path: Path) -> None:
    """:func:`write` to ``path`` through a ``.part`` file: complete when it appears (the parent judges
    files while the child goes on)."""
    part = path.with_name(path.name + ".part")
    write(values, part)
    os.replace(part, path)
