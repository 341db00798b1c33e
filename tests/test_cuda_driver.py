"""The driver boundary on a machine without a GPU: runner/driver.py and the CUDA launcher against a
C stand-in of libcuda.so.1 built from the toolkit's own cuda.h (tests/fixtures/cuda_driver), so
the ctypes marshalling is checked at the real C ABI: widths, the stream handle, kernelParams."""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
import struct
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_cuda import FakeTensor as DeviceTensor  # what the launcher reads off a CUDA tensor

from kernelpro.runner import cuda as cuda_module
from kernelpro.runner import driver
from kernelpro.runner.config import load_config
from kernelpro.runner.cubin import build, find_nvcc
from kernelpro.runner.launch import parse_launch

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "cuda"
KERNEL = (EXAMPLE / "commit2" / "kernels" / "swiglu.cu").read_text()


def _cuda_include() -> Path | None:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
                 *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)):
        if root and (Path(root) / "include" / "cuda.h").is_file():
            return Path(root) / "include"
    return None


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    include, cc = _cuda_include(), shutil.which("cc") or shutil.which("gcc")
    if include is None or cc is None or find_nvcc() is None:
        pytest.skip("needs cuda.h, a C compiler and nvcc")
    so = tmp_path_factory.mktemp("libcuda") / "libcuda.so.1"
    subprocess.run([cc, "-shared", "-fPIC", "-Wall", "-Werror", f"-I{include}", "-o", str(so),
                    str(HERE / "fixtures" / "cuda_driver" / "fake_libcuda.c")], check=True)
    lib = ctypes.CDLL(str(so))
    lib.fake_stream.restype = ctypes.c_void_p
    lib.fake_dim.restype = ctypes.c_uint
    return lib


@pytest.fixture
def fake_driver(fake_lib: ctypes.CDLL, monkeypatch: pytest.MonkeyPatch) -> ctypes.CDLL:
    import torch

    monkeypatch.setattr(driver, "_lib", fake_lib)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: SimpleNamespace(cuda_stream=0x7F12_3456_789A))
    fake_lib.fake_reset_current()
    return fake_lib


def _expect(lib: ctypes.CDLL, sizes: list[int]) -> None:
    lib.fake_expect_params(len(sizes), (ctypes.c_int * len(sizes))(*sizes))


def _param(lib: ctypes.CDLL, i: int, size: int) -> bytes:
    buf = ctypes.create_string_buffer(size)
    lib.fake_param(i, buf)
    return buf.raw


def test_the_example_launches_with_its_geometry_and_parameters(fake_driver: ctypes.CDLL, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE / "commit1", repo)
    shutil.copytree(EXAMPLE / "commit2", repo, dirs_exist_ok=True)
    sol = load_config(repo / ".kernelpro.yml").target("swiglu_cuda").solution(repo)
    fake_driver.fake_set_kernel(b"swiglu_kernel")
    call = cuda_module.kernel_callable(sol.to_json(), tmp_path / "cache")  # nvcc build + load, as in the child
    _expect(fake_driver, [8, 8, 8, 8])
    m = 3
    a, b, out = (DeviceTensor(0x7F00_0000_0000 + i * 0x100_0000, (m, 4096)) for i in range(3))
    call(a, b, out)
    assert fake_driver.fake_launches() == 1
    assert [fake_driver.fake_dim(i) for i in range(7)] == [m * 4096 // 32, 1, 1, 32, 1, 1, 0]
    assert fake_driver.fake_stream() == 0x7F12_3456_789A
    assert [struct.unpack("<Q", _param(fake_driver, i, 8))[0] for i in range(3)] == [a.ptr, b.ptr, out.ptr]
    assert struct.unpack("<q", _param(fake_driver, 3, 8))[0] == m * 4096
    # Context made current once at load; the launch finds it current and does not set it again.
    calls = fake_driver.fake_set_current_calls()
    call(a, b, out)
    assert fake_driver.fake_set_current_calls() == calls and fake_driver.fake_launches() == 2
    fake_driver.fake_reset_current()  # another library switched contexts on this thread: restored
    call(a, b, out)
    assert fake_driver.fake_set_current_calls() == calls + 1 and fake_driver.fake_launches() == 3
    # An empty problem launches nothing (a zero grid is an error for the driver).
    call(*(DeviceTensor(t.ptr, (0, 4096)) for t in (a, b, out)))
    assert fake_driver.fake_launches() == 3


def test_large_dynamic_shared_memory_opts_in_and_scalars_pack(fake_driver: ctypes.CDLL, tmp_path: Path) -> None:
    src = "#define ROWS 4\nextern \"C\" __global__ void rows(const float* x, float alpha, float* y, int M, int r) {}\n"
    built = build({"k.cu": src}, "k.cu", tmp_path, arch="sm_90a")
    assert built.ok and built.cubin is not None
    launch, problems = parse_launch(
        {"grid": ["cdiv(M, ROWS)", 2], "block": [128, 2], "shared_mem": "ROWS * N * 4",
         "args": ["const float* x", "float alpha", "float* y", "int M", "int r = ROWS"]},
        "rows", ["x", "alpha"], ["y"], {"x": ("M", "N"), "alpha": None, "y": ("M", "N")},
        {"x": "float32", "alpha": "float32", "y": "float32"}, {"N": 4096})
    assert launch is not None, problems
    fake_driver.fake_set_kernel(b"rows")
    call = cuda_module._launcher(launch, driver.load_kernel(built.cubin, "rows"), {"ROWS": 4})
    _expect(fake_driver, [8, 4, 8, 4, 4])
    x, y = DeviceTensor(0x1000, (9, 4096)), DeviceTensor(0x2000, (9, 4096))
    call(x, 0.25, y)
    value = ctypes.c_int()
    assert fake_driver.fake_attribute(ctypes.byref(value)) == driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    assert value.value == 4 * 4096 * 4
    assert [fake_driver.fake_dim(i) for i in range(7)] == [3, 2, 1, 128, 2, 1, 65536]
    assert struct.unpack("<f", _param(fake_driver, 1, 4))[0] == 0.25
    assert struct.unpack("<i", _param(fake_driver, 3, 4))[0] == 9 and struct.unpack("<i", _param(fake_driver, 4, 4))[0] == 4


def test_driver_errors_name_the_call_and_the_cuda_error(fake_driver: ctypes.CDLL, tmp_path: Path) -> None:
    built = build({"k.cu": KERNEL}, "k.cu", tmp_path, arch="sm_90a")
    assert built.cubin is not None
    fake_driver.fake_set_kernel(b"other_name")
    with pytest.raises(driver.CudaDriverError, match=r"cuModuleGetFunction\('swiglu_kernel'\).*CUDA_ERROR_NOT_FOUND"):
        driver.load_kernel(built.cubin, "swiglu_kernel")
    fake_driver.fake_set_kernel(b"swiglu_kernel")
    k = driver.load_kernel(built.cubin, "swiglu_kernel")
    params = (ctypes.c_void_p * 1)()
    with pytest.raises(driver.CudaDriverError, match=r"cuLaunchKernel\(swiglu_kernel, grid=\(1, 1, 1\), block=\(2048, 1, 1\).*CUDA_ERROR_INVALID_VALUE"):
        k.launch((1, 1, 1), (2048, 1, 1), 0, params, 0)
    not_a_cubin = tmp_path / "x.cubin"
    not_a_cubin.write_bytes(b"garbage")
    with pytest.raises(driver.CudaDriverError, match="CUDA_ERROR_INVALID_IMAGE"):
        driver.load_kernel(not_a_cubin, "swiglu_kernel")


def test_no_driver_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(driver, "_lib", None)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError(f"{name}: cannot open")))
    with pytest.raises(driver.NoGpuError, match="CUDA targets need an NVIDIA GPU"):
        driver.load_kernel(Path("k.cubin"), "k")


def test_the_hold_kernel_is_valid_ptx_and_launches_one_thread_with_its_nanoseconds(fake_driver: ctypes.CDLL,
                                                                                    tmp_path: Path) -> None:
    """EvalSettings.hold_us's wait (runner/driver.py Hold): PTX that ptxas assembles for the H200, loaded
    as text, launched as one thread on torch's stream with the wait in nanoseconds."""
    ptxas = shutil.which("ptxas")
    if ptxas is not None:
        (tmp_path / "hold.ptx").write_text(driver.HOLD_PTX)
        got = subprocess.run([ptxas, "-arch=sm_90", str(tmp_path / "hold.ptx"), "-o", str(tmp_path / "hold.cubin")],
                             capture_output=True, text=True)
        assert got.returncode == 0, got.stderr
    fake_driver.fake_set_kernel(b"kernelpro_hold")
    _expect(fake_driver, [8])
    hold, before = driver.Hold(), fake_driver.fake_launches()
    hold(20.5, 0x7F12_3456_789A)
    assert fake_driver.fake_launches() == before + 1
    assert [fake_driver.fake_dim(i) for i in range(7)] == [1, 1, 1, 1, 1, 1, 0]
    assert fake_driver.fake_stream() == 0x7F12_3456_789A
    assert struct.unpack("<Q", _param(fake_driver, 0, 8))[0] == 20_500
    hold(-3, 0)
    assert struct.unpack("<Q", _param(fake_driver, 0, 8))[0] == 0


@pytest.mark.gpu
def test_on_the_gpu_the_hold_waits_its_time_whatever_the_clock() -> None:
    """The wait is on the global timer: 100 us measured by CUDA events around it, at least, whether the
    GPU idles at 345 MHz or runs at its boost clock (the cycle spin it replaces took 0.1 to 0.6 ms)."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU (run on the GPU machine)")
    hold = driver.Hold()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    got = []
    for _ in range(5):
        start.record()
        hold(100.0, torch.cuda.current_stream().cuda_stream)
        end.record()
        end.synchronize()
        got.append(start.elapsed_time(end))
    assert all(0.099 <= ms < 5.0 for ms in got), got
