"""The static check (runner/screen.py) on the demo's Triton kernel, the CUDA example and the
KernelBench solutions: the known reward hacks are refused with a reason, honest rewrites pass."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelpro.runner.config import load_config
from kernelpro.runner.screen import REJECTED, check, for_trace, outcome
from kernelpro.runner.target import Target
from kernelpro.runner.trace import STATUSES, BuildSpec, Solution, SourceFile

ROOT = Path(__file__).resolve().parents[1]
EMPTY = "    out = torch.empty_like(a)\n"
LAUNCH = "    _swiglu_kernel[grid](a, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)\n"


def _target(example: str, tmp: Path) -> tuple[Target, Solution]:
    shutil.copytree(ROOT / "examples" / example / "commit1", tmp, dirs_exist_ok=True)
    shutil.copytree(ROOT / "examples" / example / "commit2", tmp, dirs_exist_ok=True)
    target = load_config(tmp / ".kernelpro.yml").targets[0]
    return target, target.solution(tmp)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Target, Solution]:
    return _target("demo", tmp_path_factory.mktemp("demo"))


def _with(base: Solution, content: str) -> Solution:
    return Solution(base.name, base.definition, "model", base.spec, (SourceFile(base.sources[0].path, content),))


def _why(demo: tuple[Target, Solution], content: str) -> str | None:
    target, base = demo
    return check(_with(base, content), base, target.definition.reference, target.language)


def test_the_torch_call_of_the_issue_is_refused_with_its_reason(demo: tuple[Target, Solution]) -> None:
    src = demo[1].sources[0].content
    why = _why(demo, src.replace(EMPTY, "    return torch.nn.functional.silu(a) * b\n"))
    assert why is not None and "torch.nn.functional.silu" in why and "reference" in why and "rule 5" in why
    # the same call through an alias, with the kernel deleted as the issue's candidate did
    why = _why(demo, "import torch\nimport torch.nn.functional as F\n\n\ndef swiglu(a, b):\n    return F.silu(a) * b\n")
    assert why is not None and "torch.nn.functional.silu" in why
    why = _why(demo, "import torch\nfrom torch.nn.functional import silu as s\n\n\ndef swiglu(a, b):\n    return s(a) * b\n")
    assert why is not None and "torch.nn.functional.silu" in why


def test_reading_the_environment_is_refused(demo: tuple[Target, Solution]) -> None:
    src = demo[1].sources[0].content
    why = _why(demo, "import os\n" + src.replace("BLOCK_SIZE = 64", "BLOCK_SIZE = int(os.environ.get('B', '1024'))"))
    assert why is not None and "imports os" in why and "rule 3" in why
    # no import at all: torch's own reference to os
    why = _why(demo, src.replace("BLOCK_SIZE = 64", "BLOCK_SIZE = int(torch.os.environ.get('B', '1024'))"))
    assert why is not None and "torch.os.environ" in why


@pytest.mark.parametrize(("change", "expect"), [
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = __import__('os').cpu_count()"), "__import__"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = getattr(torch, 'os').cpu_count()"), "getattr() on the module `torch`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = eval('1024')"), "eval"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = len(().__class__.__subclasses__())"), "interpreter internal"),
    (("import torch\n", "import torch\nimport subprocess\n"), "imports subprocess"),
    (("import torch\n", "import torch\nimport ctypes\n"), "imports ctypes"),
    (("import torch\n", "import torch\nfrom importlib import import_module\n"), "imports importlib"),
    (("import torch\n", "import torch\nfrom torch.utils.cpp_extension import load_inline\n"), "cpp_extension"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = torch.ops.aten.numel(a)"), "torch.ops"),
    ((EMPTY, "    return a * torch.sigmoid(a) * b\n"), "torch.sigmoid in host code"),
    ((EMPTY, "    return a * a.sigmoid() * b\n"), ".sigmoid()"),
    ((LAUNCH, ""), "no longer launches a @triton.jit kernel"),
    (("def swiglu(a: torch.Tensor, b: torch.Tensor)", "def swiglu(a, b, block=1024)"), "must keep its signature"),
    (("def swiglu(a: torch.Tensor, b: torch.Tensor)", "def swiglu(x, y)"), "must keep its signature"),
    # issue 21's audit: the allowlist escaped through allowed modules
    (("import torch\n", "import torch\nimport operator\n"), "imports operator"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = functools.partial(getattr, torch, 'o' + 's')().cpu_count()"),
     "passes `getattr` around"),
    (("BLOCK_SIZE = 64", "m = torch\n    BLOCK_SIZE = getattr(m, 'o' + 's').cpu_count()"), "computed or private name"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = [getattr][0](torch, 'os').cpu_count()"), "passes `getattr` around"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = typing.ForwardRef(\"__import__('os').cpu_count()\")._evaluate(None, None, "
      "frozenset())"), "evaluates text"),
    (("import torch\n", "import torch\nfrom typing import get_type_hints\n"), "evaluates text"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = torch.cuda.jiterator._create_jit_fn('x')"), "private"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = torch.utils._python_dispatch.TorchDispatchMode"), "python_dispatch"),
    # issue 17's review (break 3): frames lead to the harness's own locals (its record of the dispatched
    # operators, its result) however they are reached: a traceback, a generator, a coroutine
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = 64\n    try:\n        raise ValueError()\n    except ValueError as e:\n"
      "        tb = e.__traceback__"), "interpreter internal `__traceback__`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = len(tb.tb_frame)"), "interpreter internal `tb_frame`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = len(tb.tb_next)"), "interpreter internal `tb_next`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = len(frame.f_back)"), "interpreter internal `f_back`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = len(frame.f_locals)"), "interpreter internal `f_locals`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = len(frame.f_globals)"), "interpreter internal `f_globals`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = len(frame.f_builtins)"), "interpreter internal `f_builtins`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = frame.f_code.co_argcount"), "interpreter internal `f_code`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = len((x for x in ()).gi_frame)"), "interpreter internal `gi_frame`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = g.gi_code.co_argcount"), "interpreter internal `gi_code`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = c.cr_frame"), "interpreter internal `cr_frame`"),
    (("BLOCK_SIZE = 64", "BLOCK_SIZE = a.ag_frame"), "interpreter internal `ag_frame`"),
])
def test_other_escapes_are_refused(demo: tuple[Target, Solution], change: tuple[str, str], expect: str) -> None:
    src = demo[1].sources[0].content
    assert change[0] in src
    why = _why(demo, src.replace(*change))
    assert why is not None and expect in why, why


@pytest.mark.parametrize("change", [
    ("BLOCK_SIZE = 64", "BLOCK_SIZE = 1024"),
    ("num_warps=8", "num_warps=4"),
    ("def swiglu(a: torch.Tensor, b: torch.Tensor)", "def swiglu(a, b)"),  # annotations are not the signature
    ("BLOCK_SIZE = 64", "BLOCK_SIZE = 8 * torch.cuda.get_device_properties(0).multi_processor_count"),
    ("import torch\n", "import math\nimport torch\n"),
    ("    out = a * tl.sigmoid(a) * b\n", "    out = a / (1.0 + tl.exp(-a)) * b\n"),
    ("    n_elements = a.numel()\n", "    n_elements = a.view(-1).shape[0]\n"),
    (LAUNCH, "    launch = _swiglu_kernel[grid]\n    launch(a, b, out, n_elements, BLOCK_SIZE=BLOCK_SIZE, num_warps=8)\n"),
])
def test_honest_rewrites_pass(demo: tuple[Target, Solution], change: tuple[str, str]) -> None:
    src = demo[1].sources[0].content
    assert change[0] in src
    assert _why(demo, src.replace(*change)) is None


def test_what_the_baseline_does_a_candidate_may_keep(demo: tuple[Target, Solution]) -> None:
    """The PR's own code is never screened: a baseline that reads os.environ lets its candidates do it too."""
    target, base = demo
    src = "import os\n" + base.sources[0].content.replace("num_warps=8", "num_warps=int(os.environ.get('W', '8'))")
    own = _with(base, src)
    assert check(own, base, target.definition.reference, target.language) is not None  # as a candidate
    cand = _with(base, src.replace("BLOCK_SIZE = 64", "BLOCK_SIZE = 1024"))
    assert check(cand, own, target.definition.reference, target.language) is None  # derived from that baseline


def test_cuda_targets_stay_cuda_and_keep_the_launch_signature(tmp_path: Path) -> None:
    target, base = _target("cuda", tmp_path)
    src = base.sources[0].content
    ref = target.definition.reference

    def why(content: str) -> str | None:
        return check(_with(base, content), base, ref, target.language)

    assert why(src.replace("#define BLOCK_SIZE 32", "#define BLOCK_SIZE 256")) is None
    assert "cublasSgemm" in (why(src + "\nvoid f(cublasHandle_t h) { cublasSgemm(h); }\n") or "")
    assert "getenv" in (why(src + '\nstatic const char* k = getenv("KEY");\n') or "")
    assert "parameter list" in (why(src.replace("long long n)", "long long n, int extra)", 1)) or "")
    no_kernel = src.replace("__global__", "__device__")
    assert "no __global__ kernel" in (why(no_kernel) or "")
    assert why(src.replace("// ", "// getenv( in a comment ", 1)) is None  # comments are not code
    # named, not only called (issue 21's audit): the environment block, a reopened stream, system by pointer
    assert "environ" in (why(src + "\nextern char **environ;\n") or "")
    assert "freopen" in (why(src + '\nvoid g() { freopen("/etc/passwd", "r", stdin); }\n') or "")
    assert "std::system" in (why(src + '\nvoid h() { auto s = &std::system; s("true"); }\n') or "")


def test_kernelbench_solutions_pass_against_their_reference_baseline() -> None:
    """The KernelBench path starts from the reference (torch) and asks for Triton: the solutions pass."""
    problems = ROOT / "benchmarks" / "kernelbench_problems"
    for p in sorted(problems.glob("*.py")):
        ref = p.read_text()
        base = Solution("b", "d", "x", _spec(), (SourceFile("solution.py", ref),))
        cand = Solution("c", "d", "x", _spec(), (SourceFile("solution.py", (problems / "solutions" / p.name).read_text()),))
        assert check(cand, base, ref, "python") is None, p.name


def _spec() -> BuildSpec:
    return BuildSpec("python", ("cuda",), "solution.py::ModelNew", destination_passing_style=False)


def test_the_outcome_is_a_value_and_its_trace_line_fits_the_schema(demo: tuple[Target, Solution]) -> None:
    o = outcome(demo[1], "it calls torch.nn.functional.silu")
    assert o.status == REJECTED and not o.passed and o.results == () and "not run" in o.log and "silu" in o.log
    assert REJECTED not in STATUSES and for_trace(o).status in STATUSES and for_trace(o).log == o.log


EXT = """#include <torch/extension.h>

__global__ void swiglu_kernel(const float* a, const float* b, float* out, long n) {
  long i = blockIdx.x * 256L + threadIdx.x;
  if (i < n) out[i] = a[i] / (1.0f + __expf(-a[i])) * b[i];
}

torch::Tensor swiglu(torch::Tensor a, torch::Tensor b) {
  auto out = torch::empty_like(a);
  long n = a.numel();
  swiglu_kernel<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
      a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("swiglu", &swiglu); }
"""


@pytest.mark.parametrize(("body", "expect"), [
    ("  return torch::silu(a) * b;\n", "torch::silu"),
    ("  return at::native::silu(a) * b;\n", "at::native::silu"),
    ("  return torch::nn::functional::silu(a) * b;\n", "torch::nn::functional::silu"),
    (None, None),  # a launch-size change only
])
def test_a_torch_extension_target_keeps_its_kernel(body: str | None, expect: str | None) -> None:
    from kernelpro.runner.trace import BuildSpec

    spec = BuildSpec("cuda", ("cuda",), "ext/swiglu.cu::swiglu", destination_passing_style=False, binding="torch")
    base = Solution("b", "d", "x", spec, (SourceFile("ext/swiglu.cu", EXT),))
    src = EXT.replace("256", "512") if body is None else EXT.replace("  auto out = torch::empty_like(a);\n", body)
    why = check(Solution("c", "d", "x", spec, (SourceFile("ext/swiglu.cu", src),)), base,
                "import torch\n\ndef run(a, b):\n    return torch.nn.functional.silu(a) * b\n", "cuda")
    assert (why is None) if expect is None else (why is not None and expect in why), why


def test_a_baseline_that_builds_an_extension_may_keep_doing_so() -> None:
    from kernelpro.runner.trace import BuildSpec

    py = "import torch\nfrom torch.utils.cpp_extension import load_inline\n\n_m = load_inline('k', '', cuda_sources=['{}'])\n\n\ndef swiglu(a, b):\n    return _m.swiglu(a, b)\n"
    spec = BuildSpec("cuda", ("cuda",), "k.py::swiglu", destination_passing_style=False)
    base = Solution("b", "d", "x", spec, (SourceFile("k.py", py.format("A")),))
    cand = Solution("c", "d", "x", spec, (SourceFile("k.py", py.format("B")),))
    assert check(cand, base, "def run(a, b):\n    return a\n", "cuda") is None
    fresh = Solution("b", "d", "x", spec, (SourceFile("k.py", "import torch\n\n\ndef swiglu(a, b):\n    return a\n"),))
    assert "cpp_extension" in (check(cand, fresh, "def run(a, b):\n    return a\n", "cuda") or "")


def test_what_the_calls_dispatched_is_judged_against_the_pull_requests_kernel() -> None:
    """The runtime half of rule 5 (runner/screen.py delegated): operators that compute and that the
    PR's kernel does not dispatch refuse a Triton or CUDA candidate, whatever its source looked like;
    allocation and views never do; a Python target's language is torch."""
    from kernelpro.runner.screen import NEUTRAL_OPS, delegated

    base = ("aten::empty_like",)
    assert delegated(("aten::empty_like", "aten::view"), base, "triton") is None
    why = delegated(("aten::empty_like", "aten::silu", "aten::mul"), base, "triton")
    assert why is not None and "aten::mul, aten::silu" in why and "Triton kernels" in why
    assert "CUDA kernels" in (delegated(("aten::sigmoid",), (), "cuda") or "")
    assert delegated(("aten::mul",), ("aten::mul",), "triton") is None  # the PR's kernel does it too
    assert delegated(("aten::silu",), (), "python") is None
    assert "aten::clone" not in NEUTRAL_OPS and "aten::_to_copy" not in NEUTRAL_OPS  # copies are work
    many = tuple(f"aten::op{i}" for i in range(12))
    assert "and 4 more" in (delegated(many, (), "triton") or "")
