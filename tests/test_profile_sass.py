"""SASS statistics: recorded Triton SASS from the H200, and real cubins built here with nvcc."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from kernelpro.runner.evidence import SassStats
from kernelpro.runner.evidence.sass import (
    FAMILIES,
    SassError,
    disassemble,
    find_cuobjdump,
    parse_sass,
    sass_stats,
    triton_cubins,
    uses_cublas,
)
from kernelpro.settings import Settings

H200 = Path(__file__).parent / "fixtures" / "h200"
CUDA = Path(__file__).parent / "fixtures" / "cuda"
NVCC = shutil.which("nvcc")
# What CI uses (DESIGN.md, testing tiers): nvcc -cubin for Hopper's "a" target, so wgmma is legal.
GENCODE = "-gencode=arch=compute_90a,code=sm_90a"


# ---------------------------------------------------------------- recorded Triton SASS


def test_poor_swiglu_loads_32_bits_at_a_time() -> None:
    s = parse_sass((H200 / "sass_poor.txt").read_text())
    assert s.arch == "sm_90a"
    assert s.functions == ("_swiglu_kernel",)
    assert s.global_load_bits == {32: 2}
    assert s.count("LDG") == 2 and s.count("STG") == 1
    assert s.count("MUFU") == 2
    assert s.count("total") == 48  # every /*addr*/ line, NOPs included
    assert s.count("NOP") == 9


def test_tuned_swiglu_loads_128_bits_at_a_time() -> None:
    s = parse_sass((H200 / "sass_tuned.txt").read_text())
    assert s.arch == "sm_90a"
    assert s.functions == ("_swiglu_kernel",)
    assert s.global_load_bits == {128: 4}
    assert s.count("MUFU") == 16 and s.count("FMUL") == 56 and s.count("FADD") == 16
    assert s.count("total") == 160


def test_no_tensor_cores_in_an_elementwise_kernel() -> None:
    for variant in ("poor", "tuned"):
        s = parse_sass((H200 / f"sass_{variant}.txt").read_text())
        # HFMA2.MMA is an fp16x2 FMA issued on the MMA pipe, not a tensor-core MMA
        assert s.count("HFMA2") >= 1
        assert all(s.count(f) == 0 for f in ("HMMA", "HGMMA", "IMMA", "DMMA", "QGMMA", "LDGSTS"))
        assert set(FAMILIES) <= set(s.counts)  # explicit zeros


def test_parser_details() -> None:
    text = """
Fatbin elf code:
================
arch = sm_80
	code for sm_80
		Function : old
        /*0000*/                   HMMA.16816.F32 R0, R2, R4, R0 ;   /* 0x0 */
                                                                      /* 0x0 */
	code for sm_90a
		Function : k
	.headerflags	@"EF_CUDA_SM90"
        /*0000*/              @!P1 LDG.E.U8 R0, desc[UR4][R2.64] ;    /* 0x0000000402008981 */
                                                                      /* 0x000722000c1e1900 */
        /*0010*/               @P0 LDG.E.64.CONSTANT R4, desc[UR4][R2.64] ;
        /*0020*/                   LDG.E.LTC128B.S16 R6, desc[UR4][R2.64] ;
        /*0030*/                   LDG.E R7, desc[UR4][R2.64] ;
        /*0040*/                   { LDG.E.128 R8, desc[UR4][R2.64] ; }
        /*0050*/                   HGMMA.64x8x16.F32 R24, gdesc[UR4], RZ, !UPT, gsb0 ;
        /*0060*/                   NOP;
		..........
"""
    s = parse_sass(text)
    assert s.arch == "sm_90a"  # the newest target of a fat binary, not both added up
    assert s.functions == ("k",)
    assert s.global_load_bits == {8: 1, 16: 1, 32: 1, 64: 1, 128: 1}
    assert s.count("LDG") == 5 and s.count("HGMMA") == 1 and s.count("HMMA") == 0
    assert s.count("total") == 7
    old = parse_sass(text, arch="sm_80")
    assert old.functions == ("old",) and old.count("HMMA") == 1 and old.count("total") == 1
    assert parse_sass("").count("total") == 0


# ---------------------------------------------------------------- finding and running cuobjdump


def test_find_cuobjdump_prefers_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = tmp_path / "my-cuobjdump"
    tool.write_text("#!/bin/sh\necho '	code for sm_90a'\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    found = find_cuobjdump(Settings.from_env({"KERNELPRO_CUOBJDUMP": str(tool)}).cuobjdump_tool)
    assert found == str(tool)
    cubin = tmp_path / "x.cubin"
    cubin.write_bytes(b"\x7fELF")
    assert disassemble(cubin, found).strip() == "code for sm_90a"


def test_find_cuobjdump_falls_back_to_the_triton_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", "/nonexistent")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    found = find_cuobjdump()
    if Path("/usr/local/cuda/bin/cuobjdump").is_file():
        assert found == "/usr/local/cuda/bin/cuobjdump"
    else:
        assert found is not None and found.endswith("triton/backends/nvidia/bin/cuobjdump")


def test_disassemble_errors_are_clear(tmp_path: Path) -> None:
    text = tmp_path / "not-a-binary.cubin"
    text.write_text("hello\n")
    with pytest.raises(SassError, match="no such file"):
        disassemble(tmp_path / "missing.cubin", cuobjdump="/bin/true")
    with pytest.raises(SassError, match="failed"):
        disassemble(text, cuobjdump=str(tmp_path / "no-cuobjdump"))
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("no cuobjdump (neither CUDA nor the triton wheel)")
    with pytest.raises(SassError, match="exited with"):
        disassemble(text, cuobjdump=tool)


def test_triton_cubins(tmp_path: Path) -> None:
    assert triton_cubins(tmp_path / "absent") == []
    a = tmp_path / "AAA" / "_k.cubin"
    b = tmp_path / "BBB" / "_k2.cubin"
    for p in (a, b):
        p.parent.mkdir()
        p.write_bytes(b"\x7fELF")
    (tmp_path / "AAA" / "_k.ptx").write_text("")
    assert sorted(triton_cubins(tmp_path)) == [a, b]


# ---------------------------------------------------------------- real cubins built by nvcc

BUILDS = {
    "hmma_mma_sync": [],
    "wgmma_hgmma": [],
    "spill_local": ["-maxrregcount=32"],
    "cp_async": [],
    "float4_loads": [],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if NVCC is None:
        pytest.skip("nvcc not on PATH: the CI image has /usr/local/bin/nvcc (CUDA 13.0)")
    if find_cuobjdump() is None:
        pytest.skip("no cuobjdump (neither CUDA nor the triton wheel)")
    out = tmp_path_factory.mktemp("cubins")
    cubins: dict[str, Path] = {}
    for name, flags in BUILDS.items():
        cubin = out / f"{name}.cubin"
        cmd = [NVCC, "-cubin", GENCODE, *flags, "-o", str(cubin), str(CUDA / f"{name}.cu")]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, f"{' '.join(cmd)}\n{p.stderr}"
        cubins[name] = cubin
    return cubins


def _stats(built: dict[str, Path], name: str) -> SassStats:
    s = sass_stats(built[name])
    assert s.arch == "sm_90a"
    return s


def test_mma_sync_is_hmma(built: dict[str, Path]) -> None:
    s = _stats(built, "hmma_mma_sync")
    assert s.count("HMMA") >= 1 and s.count("HGMMA") == 0
    assert s.functions == ("_Z11hmma_kernelPKjS0_Pf",)  # cuobjdump prints mangled names


def test_wgmma_is_hgmma(built: dict[str, Path]) -> None:
    s = _stats(built, "wgmma_hgmma")
    assert s.count("HGMMA") >= 1 and s.count("HMMA") == 0


def test_dynamic_local_array_spills(built: dict[str, Path]) -> None:
    s = _stats(built, "spill_local")
    assert s.count("STL") > 0 and s.count("LDL") > 0


def test_cp_async_is_ldgsts(built: dict[str, Path]) -> None:
    s = _stats(built, "cp_async")
    assert s.count("LDGSTS") >= 1
    assert s.global_load_bits == {}  # LDGSTS is its own family, not an LDG


def test_float4_loads_are_128_bit(built: dict[str, Path]) -> None:
    s = _stats(built, "float4_loads")
    assert s.global_load_bits.get(128, 0) >= 2  # float4_kernel: a and b
    assert s.global_load_bits.get(32, 0) >= 2  # scalar_kernel
    assert len(s.functions) == 2


# ---------------------------------------------------------------- cuBLAS


def test_uses_cublas_false_on_a_cubin_and_on_text(built: dict[str, Path], tmp_path: Path) -> None:
    assert uses_cublas(built["float4_loads"]) is False
    (tmp_path / "t.so").write_text("not elf")
    assert uses_cublas(tmp_path / "t.so") is False
    assert uses_cublas(tmp_path / "missing.so") is False


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or shutil.which("nm") is None:
        pytest.skip("needs a C compiler and nm")
    return cc


def test_uses_cublas_reads_dynamic_symbols(tmp_path: Path) -> None:
    # A shared object that calls cuBLAS but is linked without it (undefined symbols are allowed in
    # a .so): nm -D shows 'U cublasCreate_v2', as it would for one linked with -lcublas.
    cc = _cc()
    for name, body in {
        "calls": "extern int cublasCreate_v2(void**); int f(void){void*h; return cublasCreate_v2(&h);}",
        "plain": "int f(void){ return 0; }",
    }.items():
        (tmp_path / f"{name}.c").write_text(body + "\n")
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / f"lib{name}.so"),
                        str(tmp_path / f"{name}.c")], check=True, timeout=120)
    assert uses_cublas(tmp_path / "libcalls.so") is True
    assert uses_cublas(tmp_path / "libplain.so") is False
    # a host-only library has no SASS: that is not an error, and cuBLAS use is still reported
    if find_cuobjdump() is not None:
        s = sass_stats(tmp_path / "libcalls.so")
        assert s.uses_cublas is True and s.count("total") == 0


def test_uses_cublas_on_a_library_linked_with_cublas(tmp_path: Path) -> None:
    if NVCC is None:
        pytest.skip("nvcc not on PATH")
    so = tmp_path / "libkp_cublas.so"
    cmd = [NVCC, "-shared", "-Xcompiler", "-fPIC", GENCODE, "-o", str(so),
           str(CUDA / "cublas_user.cu"), "-lcublas"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.skip(f"cuBLAS headers/library not installed here: {p.stderr.strip()[-200:]}")
    assert uses_cublas(so) is True


def test_only_the_cubins_of_the_kernels_that_ran_are_disassembled(tmp_path: Path) -> None:
    """An autotuned kernel leaves one cubin per config it tried; ncu names the launch that ran
    (name, threads per block), and only that config's cubin describes the candidate."""
    from kernelpro.runner.evidence.sass import launched_cubins

    def cubin(folder: str, name: str, warps: int) -> Path:
        d = tmp_path / folder
        d.mkdir()
        (d / f"{name}.json").write_text(json.dumps({"name": name, "num_warps": warps, "shared": 0}))
        (d / f"{name}.cubin").write_bytes(b"\x7fELF")
        return d / f"{name}.cubin"

    w4, w8, other = cubin("a", "_dyt_fwd", 4), cubin("b", "_dyt_fwd", 8), cubin("c", "_helper", 4)
    assert launched_cubins(tmp_path, [("_dyt_fwd", 256)]) == [w8]
    assert sorted(launched_cubins(tmp_path, [("_dyt_fwd", 128), ("_helper", 128)])) == sorted([w4, other])
    assert sorted(launched_cubins(tmp_path, [("_dyt_fwd", 0)])) == sorted([w4, w8])  # threads unknown: by name
    # ncu missing (no launches) or a name no cubin has: every cubin, as before.
    assert sorted(launched_cubins(tmp_path, [])) == sorted([w4, w8, other])
    assert sorted(launched_cubins(tmp_path, [("cutlass_gemm", 128)])) == sorted([w4, w8, other])


def test_the_profiler_disassembles_early_and_keeps_only_the_launched_config(built: dict[str, Path], tmp_path: Path) -> None:
    """Every cubin is disassembled while the ncu child runs; the SASS judged is the launched one's."""
    import shutil

    from kernelpro.runner.evidence import KernelProfile
    from kernelpro.runner.profiler import _disassemble_all, _sass

    for folder, name in (("A", "float4_loads"), ("B", "spill_local")):
        (tmp_path / folder).mkdir()
        shutil.copy(built[name], tmp_path / folder / "_k.cubin")
        warps = 4 if name == "float4_loads" else 8  # two configs of one autotuned kernel
        (tmp_path / folder / "_k.json").write_text(json.dumps({"name": "_k", "num_warps": warps}))
    ready: dict[Path, str] = {}
    _disassemble_all(tmp_path, ready, None)
    assert len(ready) == 2 and all("code for sm_90a" in text for text in ready.values())
    launched = KernelProfile("_k", {}, block=(128, 1, 1))
    sass, notes = _sass(tmp_path, [launched], ready, None)
    assert notes == [] and sass is not None
    assert sass.global_load_bits.get(128, 0) >= 2 and sass.count("STL") == 0  # not the spilling config
