"""runner/blake3.cu, the BLAKE3 a CUDA evaluation's timed calls commit to their outputs with, checked on
the CPU: the same functions built for the host against BLAKE3's published test vectors, and the PTX the
runner loads against what the source builds to. tests/test_gpu.py runs the kernels themselves."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from kernelpro.runner import blake3

SOURCE = blake3.PTX.with_name("blake3.cu")

# BLAKE3's test vectors (BLAKE3-team/BLAKE3, test_vectors/test_vectors.json): the input is
# ``bytes(i % 251 for i in range(n))``, the hash its first 32 bytes. They cover one block, one chunk
# (1,024 bytes) exactly and past it, and 2 to 7 chunks: every shape of the tree up to the
# promotion of an odd last node.
VECTORS = {
    0: "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
    127: "d81293fda863f008c09e92fc382a81f5a0b4a1251cba1634016a0f86a6bd640d",
    128: "f17e570564b26578c33bb7f44643f539624b05df1a76c81f30acd548c44b45ef",
    129: "683aaae9f3c5ba37eaaf072aed0f9e30bac0865137bae68b1fde4ca2aebdcb12",
    1023: "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11",
    1024: "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7",
    1025: "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444",
    2048: "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a",
    2049: "5f4d72f40d7a5f82b15ca2b2e44b1de3c2ef86c426c95c1af0b6879522563030",
    3072: "b98cb0ff3623be03326b373de6b9095218513e64f1ee2edd2525c7ad1e5cffd2",
    3073: "7124b49501012f81cc7f11ca069ec9226cecb8a2c850cfe644e327d22d3e1cd3",
    4096: "015094013f57a5277b59d8475c0501042c0b642e531b0a1c8f58d2163229e969",
    4097: "9b4052b38f1c5fc8b1f9ff7ac7b27cd242487b3d890d15c96a1c25b8aa0fb995",
    5120: "9cadc15fed8b5d854562b26a9536d9707cadeda9b143978f319ab34230535833",
    5121: "628bd2cb2004694adaab7bbd778a25df25c47b9d4155a55f8fbd79f2fe154cff",
    6144: "3e2e5b74e048f3add6d21faab3f83aa44d3b2278afb83b80b3c35164ebeca205",
    6145: "f1323a8631446cc50536a9f705ee5cb619424d46887f3c376c695b70e0f0507f",
    7168: "61da957ec2499a95d6b8023e2b0e604ec7f6b50e80a9678b89d2628e99ada77a",
}


def pattern(n: int) -> bytes:
    return bytes(i % 251 for i in range(n))


def host_library(folder: Path) -> ctypes.CDLL:
    """runner/blake3.cu's functions built for the host (``-DBLAKE3_HOST``) as a shared library."""
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler to build runner/blake3.cu for the host")
    lib = folder / "libblake3.so"
    subprocess.run([cxx, "-x", "c++", "-DBLAKE3_HOST", "-O2", "-shared", "-fPIC", "-o", str(lib), str(SOURCE)],
                   check=True, capture_output=True)
    return ctypes.CDLL(str(lib))


def host_hash(lib: ctypes.CDLL, data: bytes) -> bytes:
    out = ctypes.create_string_buffer(32)
    lib.blake3_host(data, ctypes.c_uint64(len(data)), out)
    return out.raw


def test_the_kernels_functions_compute_blake3(tmp_path: Path) -> None:
    lib = host_library(tmp_path)
    wrong = {n: host_hash(lib, pattern(n)).hex() for n in VECTORS if host_hash(lib, pattern(n)).hex() != VECTORS[n]}
    assert not wrong, wrong


def test_a_block_read_from_an_unaligned_address_hashes_the_same(tmp_path: Path) -> None:
    """A tensor's bytes may start anywhere (a view of a bfloat16 output at an odd element): whole blocks at
    an address that is not 4-byte aligned are read byte by byte, and give the same hash."""
    lib = host_library(tmp_path)
    data = pattern(3073)
    buf = ctypes.create_string_buffer(b"\0" + data, len(data) + 1)
    out = ctypes.create_string_buffer(32)
    lib.blake3_host(ctypes.c_void_p(ctypes.addressof(buf) + 1), ctypes.c_uint64(len(data)), out)
    assert out.raw.hex() == VECTORS[3073]


def test_one_changed_bit_changes_the_hash(tmp_path: Path) -> None:
    lib = host_library(tmp_path)
    data = bytearray(pattern(5121))
    before = host_hash(lib, bytes(data))
    data[4000] ^= 1
    assert host_hash(lib, bytes(data)) != before


def test_the_ptx_the_runner_loads_is_what_the_source_builds_to(tmp_path: Path) -> None:
    """runner/blake3.ptx, rebuilt with the command in runner/blake3.cu, by the nvcc that built it (its
    header names the build); its ISA version is set to 7.0 so that drivers older than nvcc's load it."""
    ptx = blake3.PTX.read_text()
    assert re.search(r"^\.version 7\.0$", ptx, re.M), "runner/blake3.ptx must declare .version 7.0"
    assert ".entry blake3_chunks(" in ptx and ".entry blake3_parents(" in ptx
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc here to rebuild runner/blake3.ptx")
    build = re.search(r"Compiler Build ID: CL-(\d+)", ptx)
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    if build is None or f"compiler.{build.group(1)}" not in version:
        pytest.skip(f"nvcc here is not the one that built runner/blake3.ptx ({build and build.group(1)})")
    out = tmp_path / "blake3.ptx"
    subprocess.run([nvcc, "-ptx", "-arch=compute_80", "-O3", "-o", str(out), str(SOURCE)], check=True,
                   capture_output=True)
    rebuilt = re.sub(r"^\.version .*$", ".version 7.0", out.read_text(), count=1, flags=re.M)
    assert rebuilt == ptx, "runner/blake3.ptx is stale: rebuild it with the command in runner/blake3.cu"


def test_the_installed_package_carries_the_kernels() -> None:
    """The runner loads the PTX from the installed package (a non-editable install has no checkout)."""
    import importlib.resources

    files = importlib.resources.files("kernelpro.runner")
    assert (files / "blake3.ptx").is_file() and (files / "blake3.cu").is_file()


def test_the_hosts_numpy_blake3_is_blake3() -> None:
    """``blake3_host``, the parent's hash of a checked file it holds on the host (a judge on the CPU, or a
    GPU that refused), against the test vectors."""
    wrong = {n: blake3.blake3_host(pattern(n)).hex() for n in VECTORS if blake3.blake3_host(pattern(n)).hex() != VECTORS[n]}
    assert not wrong, wrong


def test_a_cuda_evaluations_digest_of_host_outputs_is_the_kernels_hash(tmp_path: Path) -> None:
    """The parent's digest of a CUDA evaluation's outputs held on the host: their sums, then per tensor
    the first 16 bytes of BLAKE3 of its bytes, as the GPU commits them (the host build of the kernels'
    functions on the same bytes, for several dtypes, an odd length and an unaligned view)."""
    import struct

    import torch

    from kernelpro.runner.harness import digest_host

    lib = host_library(tmp_path)
    g = torch.Generator().manual_seed(0)
    base = torch.randn(301, 77, generator=g)
    for t in (base, base.bfloat16(), base.half().reshape(-1)[1:], base.t(), base.to(torch.int8), base > 0):
        got = digest_host([t, 3], "cuda")
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        assert got[2:] == struct.unpack("<qq", host_hash(lib, raw)[:16])
        assert got[1] == 3 and got[0] == digest_host([t], "cpu")[0]
