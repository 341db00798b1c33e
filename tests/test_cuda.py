"""CUDA targets on the CPU: the launch description, the cubin cache, parameter packing, SASS of the
built cubin, and the harness path up to the launch (which needs a GPU: tests/test_gpu.py)."""

from __future__ import annotations

import ctypes
import json
import shutil
import struct
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelpro.runner.config import ConfigError, load_config
from kernelpro.runner.cubin import arch_for, build, build_solution, cache_root, find_nvcc, prebuild
from kernelpro.runner.evaluator import EvalSettings, evaluate
from kernelpro.runner.launch import (
    KernelArg,
    Launch,
    LaunchError,
    pack,
    parse_arg,
    parse_launch,
    source_constants,
)
from kernelpro.runner.launch import (
    evaluate as evaluate_expr,
)
from kernelpro.runner.trace import Solution, SourceFile

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cuda"
KERNEL = (EXAMPLE / "commit2" / "kernels" / "swiglu.cu").read_text()
needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc (the CUDA toolkit)")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(EXAMPLE / "commit1", root)
    shutil.copytree(EXAMPLE / "commit2", root, dirs_exist_ok=True)
    return root


def with_launch(repo: Path, launch: str) -> Path:
    """The example config with its `launch:` block replaced."""
    text = (repo / ".kernelpro.yml").read_text()
    start = text.index("    launch:\n")
    end = text.index("    workloads:\n")
    (repo / ".kernelpro.yml").write_text(text[:start] + launch + text[end:])
    return repo / ".kernelpro.yml"


def errors(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as e:
        load_config(path)
    return e.value.errors


# --------------------------------------------------------------------------- config


def test_example_config_loads_a_cuda_target(repo: Path) -> None:
    t = load_config(repo / ".kernelpro.yml").target("swiglu_cuda")
    assert t.language == "cuda" and t.entry_point == "kernels/swiglu.cu::swiglu_kernel"
    assert t.destination_passing_style is True  # the harness allocates the outputs
    assert t.launch is not None and t.launch.kernel == "swiglu_kernel"
    assert t.launch.grid == ("cdiv(M * N, BLOCK_SIZE * VEC * ITEMS_PER_THREAD)",) and t.launch.block == ("BLOCK_SIZE",)
    assert [(a.name, a.ctype, a.source) for a in t.launch.args] == [
        ("a", "const float*", "tensor"), ("b", "const float*", "tensor"), ("out", "float*", "tensor"),
        ("n", "long long", "value")]
    assert t.launch.names() == {"BLOCK_SIZE", "VEC", "ITEMS_PER_THREAD"}
    sol = t.solution(repo)
    assert sol.spec.launch == t.launch
    # The launch travels inside the Solution (spec.launch), survives JSON and counts in the content hash.
    again = Solution.from_json(json.loads(json.dumps(sol.to_json())))
    assert again == sol and again.content_hash() == sol.content_hash()
    other = with_launch(repo, '    launch:\n      grid: ["cdiv(M * N, BLOCK_SIZE)"]\n      block: [BLOCK_SIZE]\n'
                              '      args: ["const float* a", "const float* b", "float* out", "long long n = M * N"]\n')
    assert load_config(other).target("swiglu_cuda").solution(repo).content_hash() != sol.content_hash()


def test_flashinfer_bench_accepts_a_solution_with_a_launch(repo: Path) -> None:
    fib = pytest.importorskip("flashinfer_bench.data")
    sol = load_config(repo / ".kernelpro.yml").target("swiglu_cuda").solution(repo)
    theirs = fib.Solution.model_validate(sol.to_json())  # spec.launch is an extra key they ignore
    assert theirs.spec.language == fib.SupportedLanguages.CUDA and theirs.spec.entry_point == sol.spec.entry_point


def test_launch_errors_name_line_and_fix(repo: Path) -> None:
    path = with_launch(repo, """\
    launch:
      grid: ["M / 4", 1, 2, 3]
      block: [BLOCK_SIZE]
      shared_mem: "open('x')"
      args:
        - "const float* a"
        - "const half* b"
        - "const float* out"
        - "long long n"
        - "const float* __restrict__ a"
      extra: 1
""")
    errs = errors(path)
    text = "\n".join(errs)
    assert all(e.startswith(".kernelpro.yml:") and ". Fix: " in e for e in errs), errs
    assert "launch.grid: expected 1 to 3 sizes (x, y, z), got 4" in text
    assert "launch.shared_mem: \"open('x')\" calls something other than cdiv, min, max" in text
    assert "launch.args[1]: 'const half* b': b holds float32, but the pointer is to half" in text
    assert "launch.args[2]: 'const float* out': out is an output; the kernel writes it, so it cannot be const" in text
    assert "launch.args[3]: 'long long n': n is neither a tensor nor an axis of the definition" in text
    assert "launch.args[4]: parameter a appears twice" in text
    assert "launch.extra: unknown key 'extra'" in text
    # Lines point at the offending list items.
    line = {e.split(":")[1] for e in errs if "args[1]" in e}
    assert line == {str(1 + path.read_text().splitlines().index('        - "const half* b"'))}


def test_division_and_missing_launch_and_wrong_language(repo: Path) -> None:
    path = with_launch(repo, '    launch:\n      grid: ["M * N / 64"]\n      block: [64]\n'
                             '      args: ["const float* a", "const float* b", "float* out"]\n')
    assert any("divides with '/'" in e and "cdiv(a, b)" in e for e in errors(path))
    path = with_launch(repo, "")
    assert any("a cuda target needs 'launch'" in e for e in errors(path))
    text = (EXAMPLE / "commit1" / ".kernelpro.yml").read_text().replace("language: cuda", "language: triton")
    (repo / ".kernelpro.yml").write_text(text)
    assert any("'launch' describes how to call a raw CUDA kernel, but language is triton" in e for e in errors(repo / ".kernelpro.yml"))
    text = (EXAMPLE / "commit1" / ".kernelpro.yml").read_text().replace("language: cuda", "language: cuda\n    destination_passing_style: false")
    (repo / ".kernelpro.yml").write_text(text)
    assert any("writes its outputs through pointers" in e for e in errors(repo / ".kernelpro.yml"))


def test_outputs_must_be_passed(repo: Path) -> None:
    path = with_launch(repo, '    launch:\n      grid: [1]\n      block: [1]\n      args: ["const float* a", "const float* b"]\n')
    assert any("outputs out are not passed to the kernel" in e for e in errors(path))


# --------------------------------------------------------------------------- launch


TENSORS = {"x": ("float16", False), "eps": ("scalar:float32", False), "y": ("float16", True)}


@pytest.mark.parametrize(("decl", "want"), [
    ("const half* __restrict__ x", KernelArg("x", "const half*", "tensor")),
    ("const __half *x", KernelArg("x", "const __half*", "tensor")),
    ("void* y", KernelArg("y", "void*", "tensor")),
    ("half2 * const y", KernelArg("y", "half2*", "tensor")),
    ("float eps", KernelArg("eps", "float", "scalar")),
    ("int M", KernelArg("M", "int", "axis")),
    ("unsigned long long total = M * H", KernelArg("total", "unsigned long long", "value", "M * H")),
])
def test_parse_arg(decl: str, want: KernelArg) -> None:
    assert parse_arg(decl, TENSORS, ["M", "H"]) == want


@pytest.mark.parametrize(("decl", "message"), [
    ("half x", "declare it as a pointer"),
    ("const float* x", "holds float16, but the pointer is to float"),
    ("double* eps", "scalar float32 input passed by value"),
    ("float M", "give it an integer type"),
    ("int x = 3", "its value comes from there"),
    ("float s = M * 2", "must have an integer type"),
    ("int s = M / 2", "divides with '/'"),
    ("wibble q", "unknown C type 'wibble'"),
    ("float** x", "pointers to pointers"),
    ("42", "not a parameter declaration"),
])
def test_parse_arg_errors(decl: str, message: str) -> None:
    with pytest.raises(LaunchError, match=message.replace("(", r"\(").replace("*", r"\*")):
        parse_arg(decl, TENSORS, ["M", "H"])


def test_expressions_are_integer_and_safe() -> None:
    names = {"M": 1000, "BLOCK": 128}
    assert evaluate_expr("cdiv(M, BLOCK)", names) == 8
    assert evaluate_expr("max(1, min(M // 7, 4)) * -(-3) % 5", names) == 2
    for bad in ("__import__('os')", "M.real", "M if M else 1", "[M]", "M ** 2", "1.5", "True", "cdiv(M, b=1)"):
        with pytest.raises(LaunchError):
            evaluate_expr(bad, names)
    with pytest.raises(LaunchError, match="uses 'Q', which is neither an axis nor an integer constant"):
        evaluate_expr("Q + 1", names)
    with pytest.raises(LaunchError, match="divides by zero"):
        evaluate_expr("M // (BLOCK - 128)", names)


def test_source_constants() -> None:
    src = ("#define BLOCK_SIZE 256\n  #  define VEC (4)  // floats\nconstexpr int TILE = 64;\n"
           "static constexpr unsigned int K = 8u;\n#define NAME foo\n#define TWICE 1\n#define TWICE 2\n"
           "int not_constant = 3;\n#define EXPR (2*BLOCK_SIZE)\n")
    assert source_constants({"a.cu": src}) == {"BLOCK_SIZE": 256, "VEC": 4, "TILE": 64, "K": 8}


class FakeTensor:
    """What the launcher reads off a CUDA tensor (there is none on this machine)."""

    def __init__(self, ptr: int, shape: tuple[int, ...]) -> None:
        self.ptr, self.shape = ptr, shape
        self.device = SimpleNamespace(type="cuda")

    def data_ptr(self) -> int:
        return self.ptr

    def is_contiguous(self) -> bool:
        return True


def test_pack_lays_out_every_parameter_as_its_c_type() -> None:
    args = (KernelArg("x", "const half*", "tensor"), KernelArg("eps", "float", "scalar"), KernelArg("M", "int", "axis"),
            KernelArg("n", "long long", "value", "M * H"), KernelArg("flag", "unsigned char", "value", "1"),
            KernelArg("d", "double", "scalar"))
    x = FakeTensor(0x7F00_1234_5678, (3, 4))
    params, storage = pack(args, {"x": x, "eps": 1e-6, "d": 2.5}, {"M": 3, "H": 2**31})
    raw = [ctypes.string_at(params[i], ctypes.sizeof(s)) for i, s in enumerate(storage)]
    assert raw == [struct.pack("<Q", 0x7F00_1234_5678), struct.pack("<f", 1e-6), struct.pack("<i", 3),
                   struct.pack("<q", 3 * 2**31), b"\x01", struct.pack("<d", 2.5)]
    with pytest.raises(LaunchError, match="does not fit in int; declare it with a wider type"):
        pack((KernelArg("n", "int", "value", "M * H"),), {}, {"M": 3, "H": 2**31})
    with pytest.raises(LaunchError, match="expected a tensor"):
        pack((KernelArg("x", "float*", "tensor"),), {"x": 3.0}, {})
    import torch

    with pytest.raises(LaunchError, match="must be contiguous"):
        pack((KernelArg("x", "float*", "tensor"),), {"x": torch.zeros(4, 3).t()}, {})
    with pytest.raises(LaunchError, match="the tensor is on cpu; CUDA kernels need tensors on the GPU"):
        pack((KernelArg("x", "float*", "tensor"),), {"x": torch.zeros(4)}, {})


def test_launch_reads_axes_off_tensors_and_evaluates_the_geometry() -> None:
    launch, problems = parse_launch(
        {"grid": ["cdiv(M, ROWS)", "H // 64"], "block": ["THREADS", 2], "shared_mem": "THREADS * 4",
         "args": ["const half* x", "float eps", "half* y", "int M"]},
        "k", ["x", "eps"], ["y"], {"x": ("M", "H"), "eps": None, "y": ("M", "H")},
        {"x": "float16", "eps": "float32", "y": "float16"}, {"H": 128})
    assert launch is not None and not problems
    assert Launch.from_json(json.loads(json.dumps(launch.to_json()))) == launch
    axes = launch.axis_values([FakeTensor(1, (10, 128)), 0.5, FakeTensor(2, (10, 128))])
    assert axes == {"H": 128, "M": 10}
    assert launch.geometry({**axes, "ROWS": 4, "THREADS": 256}) == ((3, 2, 1), (256, 2, 1), 1024)
    with pytest.raises(LaunchError, match="axis M is 10 elsewhere but 11 in y"):
        launch.axis_values([FakeTensor(1, (10, 128)), 0.5, FakeTensor(2, (11, 128))])
    with pytest.raises(LaunchError, match="called with 2 arguments, expected 3"):
        launch.axis_values([FakeTensor(1, (10, 128)), 0.5])


# --------------------------------------------------------------------------- cubin


@needs_nvcc
def test_cache_hit_miss_and_compile_error(tmp_path: Path) -> None:
    cache = tmp_path / "cubins"
    first = build({"k.cu": KERNEL}, "k.cu", cache, arch="sm_90a")
    assert first.ok and not first.cached and first.cubin is not None and first.cubin.read_bytes()[:4] == b"\x7fELF"
    assert "Used" in first.log and "registers" in first.log  # ptxas -v resource usage
    second = build({"k.cu": KERNEL}, "k.cu", cache, arch="sm_90a")
    assert second.cached and second.key == first.key and second.cubin == first.cubin
    assert second.seconds < first.seconds
    changed = build({"k.cu": KERNEL.replace("#define VEC 1", "#define VEC 4")}, "k.cu", cache, arch="sm_90a")
    assert changed.ok and not changed.cached and changed.key != first.key
    other_arch = build({"k.cu": KERNEL}, "k.cu", cache, arch="sm_80")
    assert other_arch.ok and other_arch.key != first.key
    # A header is part of the key even though the entry file did not change.
    inc = '#include "tile.cuh"\n' + KERNEL
    h1 = build({"k.cu": inc, "tile.cuh": "#pragma once\n"}, "k.cu", cache, arch="sm_90a")
    h2 = build({"k.cu": inc, "tile.cuh": "#pragma once\n// v2\n"}, "k.cu", cache, arch="sm_90a")
    assert h1.ok and h2.ok and h1.key != h2.key
    broken = {"k.cu": KERNEL.replace("expf(-a)", "expff(-a)")}
    bad = build(broken, "k.cu", cache, arch="sm_90a")
    assert bad.status == "COMPILE_ERROR" and 'identifier "expff" is undefined' in bad.log and str(tmp_path) not in bad.log
    again = build(broken, "k.cu", cache, arch="sm_90a")
    assert again.cached and again.status == "COMPILE_ERROR" and again.log == bad.log


def test_includes_outside_the_solution_are_refused(tmp_path: Path) -> None:
    for inc in ('"/proc/self/environ"', "<../../etc/passwd>", "SECRET_PATH"):
        b = build({"k.cu": f"#include {inc}\n" + KERNEL}, "k.cu", tmp_path, arch="sm_90a", nvcc="/bin/false")
        assert b.status == "COMPILE_ERROR" and "include" in b.log, b.log


@needs_nvcc
def test_concurrent_builds_of_one_source_compile_once(tmp_path: Path) -> None:
    src = {"k.cu": KERNEL.replace("#define BLOCK_SIZE 32", "#define BLOCK_SIZE 128")}
    results = []
    threads = [threading.Thread(target=lambda: results.append(build(src, "k.cu", tmp_path, arch="sm_90a")))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({r.key for r in results}) == 1 and all(r.ok for r in results)
    assert sum(not r.cached for r in results) == 1  # the others waited on the lock and read the cache


@needs_nvcc
def test_prebuild_then_the_harness_child_finds_the_cubin(repo: Path, tmp_path: Path) -> None:
    target = load_config(repo / ".kernelpro.yml").target("swiglu_cuda")
    base = target.solution(repo)
    variants = [base] + [
        Solution(f"v{b}", base.definition, "t", base.spec,
                 (SourceFile(base.entry_file, KERNEL.replace("#define BLOCK_SIZE 32", f"#define BLOCK_SIZE {b}")),))
        for b in (64, 128)
    ]
    shared = tmp_path / "shared"
    built = prebuild(variants, cache_root(shared), workers=2)
    assert [b.ok for b in built] == [True, True, True] and len({b.key for b in built}) == 3
    assert all(b.cached for b in prebuild(variants, cache_root(shared), workers=2))
    # The child process (scrubbed environment, cache shared through TRITON_CACHE_DIR) reuses the
    # cubin, gets past the build, and stops at the launch: there is no GPU here.
    mtime = built[0].cubin.stat().st_mtime if built[0].cubin else 0
    o = evaluate(target.definition, base, target.cpu_workloads, target.tolerance, EvalSettings(device="cpu", cache_dir=shared))
    assert o.status == "RUNTIME_ERROR" and "CUDA targets need an NVIDIA GPU" in o.log, o.log
    assert built[0].cubin is not None and built[0].cubin.stat().st_mtime == mtime
    assert len(list(cache_root(shared).glob("*/*/kernel.cubin"))) == 3  # nothing rebuilt under another key


@needs_nvcc
def test_harness_reports_compile_errors_and_missing_constants(repo: Path, tmp_path: Path) -> None:
    target = load_config(repo / ".kernelpro.yml").target("swiglu_cuda")
    base = target.solution(repo)
    es = EvalSettings(device="cpu", cache_dir=tmp_path / "shared")

    def variant(text: str) -> Solution:
        return Solution("v", base.definition, "t", base.spec, (SourceFile(base.entry_file, text),))

    o = evaluate(target.definition, variant(KERNEL.replace("vo.v[k] =", "vo.v[k] = undefined_fn() +")),
                 target.cpu_workloads, target.tolerance, es)
    assert o.status == "COMPILE_ERROR" and "undefined_fn" in o.log, o.log
    o = evaluate(target.definition, variant(KERNEL.replace("#define VEC 1 ", "// no VEC\nconstexpr int VEC = 1; ")),
                 target.cpu_workloads, target.tolerance, es)
    assert o.status == "RUNTIME_ERROR", o.log  # constexpr constants count too: it built, only the launch is missing
    o = evaluate(target.definition, variant(KERNEL.replace("#define VEC 1 ", "#define VEC_WIDTH 1 ").replace("VEC>", "VEC_WIDTH>")
                 .replace("* VEC", "* VEC_WIDTH").replace("k < VEC", "k < VEC_WIDTH").replace("+ VEC", "+ VEC_WIDTH")),
                 target.cpu_workloads, target.tolerance, es)
    assert o.status == "COMPILE_ERROR" and "the launch uses VEC, but no source defines it" in o.log, o.log


@needs_nvcc
def test_sass_of_the_built_cubin(tmp_path: Path) -> None:
    from kernelpro.runner.evidence.sass import find_cuobjdump, sass_stats, triton_cubins

    if find_cuobjdump() is None:
        pytest.skip("no cuobjdump")
    scalar = build({"k.cu": KERNEL}, "k.cu", cache_root(tmp_path), arch="sm_90a")
    vector = build({"k.cu": KERNEL.replace("#define VEC 1 ", "#define VEC 4 ")}, "k.cu", cache_root(tmp_path), arch="sm_90a")
    assert scalar.cubin is not None and vector.cubin is not None
    s, v = sass_stats(scalar.cubin), sass_stats(vector.cubin)
    assert s.arch == "sm_90a" and "swiglu_kernel" in s.functions
    assert s.global_load_bits.get(128, 0) == 0 and s.global_load_bits.get(32, 0) > 0
    assert v.global_load_bits.get(128, 0) > 0  # VEC 4: 128-bit loads, what the vectorization tool asks for
    # The profiler looks for cubins under the shared cache, where CUDA builds live too.
    assert set(triton_cubins(tmp_path)) == {scalar.cubin, vector.cubin}


def test_arch_for() -> None:
    assert arch_for(9, 0) == "sm_90a" and arch_for(8, 6) == "sm_86" and arch_for(10, 0) == "sm_100a"


def test_build_timing_is_reported(tmp_path: Path) -> None:
    b = build({"k.cu": KERNEL}, "missing.cu", tmp_path, arch="sm_90a", nvcc="/bin/true")
    assert b.status == "COMPILE_ERROR" and "not among the sources" in b.log
    t0 = time.perf_counter()
    assert build_solution(Solution.from_json({
        "name": "x", "definition": "d", "author": "a", "spec": {"language": "cuda", "entry_point": "k.cu::k"},
        "sources": [{"path": "k.cu", "content": '#include "/etc/passwd"\n'}]}), tmp_path, arch="sm_90a").status == "COMPILE_ERROR"
    assert time.perf_counter() - t0 < 5


def test_optimize_on_the_cpu_skips_cuda_targets_with_a_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelpro.cli import main, make_demo_repo

    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    repo = make_demo_repo(tmp_path / "repo", "cuda")
    assert (repo / "kernels" / "swiglu.cu").read_text() == KERNEL
    assert main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(tmp_path / "out")]) == 0
    assert "swiglu_cuda: skipped, CUDA targets need an NVIDIA GPU" in capsys.readouterr().out


def test_default_arch_asks_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelpro.runner.cubin import default_arch

    smi = tmp_path / "nvidia-smi"
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    for out, want in (("8.6\n8.6\n", "sm_86"), ("9.0\n", "sm_90a"), ("", "sm_90a"), ("No devices were found\n", "sm_90a")):
        smi.write_text(f"#!/bin/sh\nprintf '{out}'\n")
        smi.chmod(0o755)
        assert default_arch() == want, out
    # A host of an sm_90 GPU 0 and an sm_86 GPU 1, the runner pinned to GPU 1: asked about GPU 1.
    smi.write_text('#!/bin/sh\n[ "$1" = -i ] || { printf "9.0\\n8.6\\n"; exit; }\n'
                   'case "$2" in 0) echo 9.0;; 1|GPU-b) echo 8.6;; *) exit 6;; esac\n')
    for visible, want in (("1", "sm_86"), ("GPU-b,0", "sm_86"), ("0", "sm_90a"), (None, "sm_90a"), ("MIG-x", "sm_90a")):
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert default_arch() == want, visible


EXT_CONFIG = """\
version: 1
targets:
  - name: swiglu_ext
    files: ["kernels/swiglu_ext.cpp"]
    language: cuda
    binding: torch
    entry_point: kernels/swiglu_ext.cpp::swiglu
    definition: definitions/swiglu.json
    workloads: [{M: 4096}]
    cpu_workloads: [{M: 1}]
"""
EXT_SOURCE = """\
#include <torch/extension.h>
#include "scale.h"
torch::Tensor swiglu(torch::Tensor a, torch::Tensor b) { return a * torch::sigmoid(a) * b * kScale; }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("swiglu", &swiglu, "silu(a) * b"); }
"""


def test_torch_extension_config_errors(repo: Path) -> None:
    (repo / ".kernelpro.yml").write_text(EXT_CONFIG.replace("binding: torch", "binding: tvm-ffi"))
    assert any("binding 'tvm-ffi' is not supported here" in e for e in errors(repo / ".kernelpro.yml"))
    (repo / ".kernelpro.yml").write_text(EXT_CONFIG.replace("binding: torch", "binding: torch\n    launch: {grid: [1], block: [1], args: []}"))
    assert any("'launch' is for raw kernels" in e for e in errors(repo / ".kernelpro.yml"))
    (repo / ".kernelpro.yml").write_text(EXT_CONFIG.replace("language: cuda", "language: triton"))
    assert any("binding 'torch' is not supported here" in e for e in errors(repo / ".kernelpro.yml"))


@pytest.mark.slow
def test_torch_extension_target_builds_once_and_runs_on_the_cpu(repo: Path, tmp_path: Path) -> None:
    """A cuda target with `binding: torch` builds through torch.utils.cpp_extension into a build
    directory keyed by its sources. On this CPU machine the extension is C++ only (torch here has no
    CUDA); on the GPU tests/test_gpu.py builds a .cu one."""
    import shutil as sh

    if sh.which("ninja") is None and not __import__("torch.utils.cpp_extension").utils.cpp_extension.is_ninja_available():
        pytest.skip("torch extensions need ninja")
    (repo / "kernels" / "swiglu_ext.cpp").write_text(EXT_SOURCE)
    (repo / "kernels" / "scale.h").write_text("#pragma once\nconstexpr float kScale = 1.0f;\n")
    (repo / ".kernelpro.yml").write_text(EXT_CONFIG.replace('files: ["kernels/swiglu_ext.cpp"]',
                                                            'files: ["kernels/swiglu_ext.cpp", "kernels/scale.h"]'))
    target = load_config(repo / ".kernelpro.yml").target("swiglu_ext")
    assert target.binding == "torch" and target.launch is None and target.destination_passing_style is False
    sol = target.solution(repo)
    assert sol.spec.binding == "torch" and [s.path for s in sol.sources] == ["kernels/swiglu_ext.cpp", "kernels/scale.h"]
    es = EvalSettings(device="cpu", cache_dir=tmp_path / "shared", timeout_s=900)
    first = evaluate(target.definition, sol, target.cpu_workloads, target.tolerance, es)
    assert first.status == "PASSED", first.log[-2000:]
    second = evaluate(target.definition, sol, target.cpu_workloads, target.tolerance, es)
    assert second.status == "PASSED" and second.build_seconds < first.build_seconds / 3, (first.build_seconds, second.build_seconds)
    assert len(list((cache_root(tmp_path / "shared") / "torch-ext").glob("*/*/.built"))) == 1
    # A changed header is a new build; a broken one is a COMPILE_ERROR with the compiler's words.
    broken = Solution("b", sol.definition, "t", sol.spec, (sol.sources[0], SourceFile("kernels/scale.h", "constexpr float kScale = ;\n")))
    bad = evaluate(target.definition, broken, target.cpu_workloads, target.tolerance, es)
    assert bad.status == "COMPILE_ERROR" and "scale.h" in bad.log and "error" in bad.log, bad.log[-1500:]


def _nvrtc() -> str | None:
    from kernelpro.runner.nvrtc import find_nvrtc

    return find_nvrtc()


@pytest.mark.skipif(_nvrtc() is None, reason="needs libnvrtc (a CUDA toolkit or the nvidia-cuda-nvrtc wheel)")
def test_nvrtc_builds_cubins_into_the_same_cache(tmp_path: Path) -> None:
    from kernelpro.runner.evidence.sass import find_cuobjdump, sass_stats

    inc = '#include "tile.cuh"\n' + KERNEL.replace("#define VEC 1 ", "#define VEC TILE_VEC ")
    sources = {"k/k.cu": inc, "k/tile.cuh": "#pragma once\n#define TILE_VEC 4\n"}
    b = build(sources, "k/k.cu", tmp_path, arch="sm_90a", compiler="nvrtc")
    assert b.ok and b.cubin is not None and b.cubin.read_bytes()[:4] == b"\x7fELF", b.log
    again = build(sources, "k/k.cu", tmp_path, arch="sm_90a", compiler="nvrtc")
    assert again.cached and again.key == b.key
    if find_nvcc() is not None:  # the compiler is part of the key: an nvcc build is another entry
        assert build(sources, "k/k.cu", tmp_path, arch="sm_90a").key != b.key
    if find_cuobjdump() is not None:
        stats = sass_stats(b.cubin)
        assert "swiglu_kernel" in stats.functions and stats.global_load_bits.get(128, 0) > 0
    bad = build({"k.cu": KERNEL.replace("expf(-a)", "expff(-a)")}, "k.cu", tmp_path, arch="sm_90a", compiler="nvrtc")
    assert bad.status == "COMPILE_ERROR" and "expff" in bad.log
    with pytest.raises(ValueError, match="not like sm_90a"):
        build(sources, "k/k.cu", tmp_path, arch="compute_90a", compiler="nvrtc")
