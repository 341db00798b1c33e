"""runner/tensorfile.py: the outputs file a child writes and the parent reads. Every value comes back
as it went in, as a view of the one buffer the parent read; any file it did not write is refused by
a message that says what is wrong, never parsed by an unpickler or a zip reader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelpro.runner import tensorfile
from kernelpro.runner.sandbox import read_capped, read_capped_pages
from kernelpro.runner.tensorfile import ALIGN, MAGIC, TensorFileError


def _roundtrip(values: list, tmp_path: Path) -> list:
    tensorfile.save(values, tmp_path / "out.kpt")
    assert not (tmp_path / "out.kpt.part").exists()
    return tensorfile.read(read_capped(tmp_path / "out.kpt", 1 << 30), "out.kpt")


@pytest.mark.parametrize("dtype", sorted(tensorfile.DTYPES.values(), key=str))
def test_every_dtype_comes_back_bit_for_bit(dtype: torch.dtype, tmp_path: Path) -> None:
    bits = torch.randint(0, 256, (3, 5, 8 * 16), dtype=torch.uint8)
    x = bits.view(dtype) if dtype != torch.bool else bits % 2 == 1
    got = _roundtrip([x], tmp_path)
    assert len(got) == 1 and got[0].dtype == dtype and got[0].shape == x.shape
    assert torch.equal(got[0].reshape(-1).view(torch.uint8), x.contiguous().reshape(-1).view(torch.uint8))


def test_shapes_strides_numbers_and_other_values(tmp_path: Path) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    values = [base.t(), torch.tensor(2.5), torch.empty(0, 7), 3, 1.5, True, float("nan"), "text", base[:, ::2]]
    got = _roundtrip(values, tmp_path)
    assert torch.equal(got[0], base.t()) and got[0].is_contiguous()  # written contiguous: values, not strides
    assert got[1].shape == () and float(got[1]) == 2.5
    assert got[2].shape == (0, 7)
    assert got[3:6] == [3, 1.5, True] and type(got[5]) is bool and got[6] != got[6]
    assert got[7] == {"not_a_tensor": "str"} and torch.equal(got[8], base[:, ::2])


@pytest.mark.parametrize("reader", [read_capped, read_capped_pages])
def test_tensors_are_views_of_the_buffer_the_parent_read(tmp_path: Path, reader: Any) -> None:
    tensorfile.save([torch.ones(1000), torch.zeros(10, dtype=torch.float64)], tmp_path / "o")
    data = reader(tmp_path / "o", 1 << 20)
    a, b = tensorfile.read(data)
    assert (b.data_ptr() - a.data_ptr()) % ALIGN == 0 and b.shape == (10,)  # aligned offsets of the one buffer
    start = len(data) - 80 - 4000 - (-4000 % ALIGN)
    data[start : start + 4] = b"\0\0\0\0"
    assert float(a[0]) == 0.0  # no copy: the parent's one read is all the memory the outputs use


def _file(items: list, data: bytes = b"", header: bytes | None = None) -> bytearray:
    head = header if header is not None else json.dumps({"items": items}).encode()
    pre = MAGIC + len(head).to_bytes(8, "little") + head
    return bytearray(pre + bytes(-len(pre) % ALIGN) + data)


@pytest.mark.parametrize(("data", "says"), [
    (bytearray(b"PK\x03\x04 a zip"), "no header"),
    (bytearray(MAGIC + (1 << 40).to_bytes(8, "little")), "a header of"),
    (_file([], header=b"{not json"), "not JSON"),
    (_file([], header=b"[1, 2]"), "no list of items"),
    (_file([{"tensor": "float32", "number": 1}]), "neither a tensor"),
    (_file([{"number": "1"}]), "not a number"),
    (_file([{"tensor": "object", "shape": [1], "offset": 0, "nbytes": 8}]), "element type 'object'"),
    (_file([{"tensor": "float32", "shape": [-1], "offset": 0, "nbytes": 4}]), "shape"),
    (_file([{"tensor": "float32", "shape": [1] * 17, "offset": 0, "nbytes": 4}]), "shape"),
    (_file([{"tensor": "float32", "shape": [2], "offset": 3, "nbytes": 8}], bytes(72)), "offset 3"),
    (_file([{"tensor": "float32", "shape": [2], "offset": 0, "nbytes": 4}], bytes(64)), "4 bytes at 0 for 2 elements"),
    (_file([{"tensor": "float32", "shape": [1 << 40], "offset": 0, "nbytes": 1 << 42}], bytes(64)), "bytes at 0"),
    (_file([{"tensor": "float32", "shape": [32], "offset": 64, "nbytes": 128}], bytes(128)), "in a file of"),
])
def test_a_file_it_did_not_write_is_refused_by_what_is_wrong(data: bytearray, says: str) -> None:
    with pytest.raises(TensorFileError, match=says):
        tensorfile.read(data, "w0_t0_r0")


def test_read_takes_a_writable_buffer_only() -> None:
    with pytest.raises(TypeError, match="bytearray"):
        tensorfile.read(bytes(_file([])))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="writable memoryview"):
        tensorfile.read(memoryview(bytes(_file([]))))


def test_the_judges_pages_outlive_every_name_but_the_tensors(tmp_path: Path) -> None:
    """The evaluator reads outputs into anonymous pages of its own (read_capped_pages), which the
    tensors view: they must keep the pages mapped after the buffer's last name is gone (an unmapped
    view would crash the parent), and the pages must be private: another map of the file is not them."""
    import gc

    tensorfile.save([torch.arange(1 << 20, dtype=torch.float32)], tmp_path / "o")
    (t,) = tensorfile.read(read_capped_pages(tmp_path / "o", 1 << 30))
    gc.collect()
    churn = [bytearray(1 << 22) for _ in range(8)]
    assert float(t[-1]) == (1 << 20) - 1 and len(churn) == 8
    tensorfile.save([torch.zeros(1 << 20)], tmp_path / "o")  # the child rewrites its file afterwards
    assert float(t[-1]) == (1 << 20) - 1
    assert len(read_capped_pages(tmp_path / "o", 1 << 30)) == (tmp_path / "o").stat().st_size
    (tmp_path / "empty").write_bytes(b"")
    assert len(read_capped_pages(tmp_path / "empty", 1)) == 0
