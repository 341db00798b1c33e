"""The LLM prompt is built from jinja2 parts: base strategies, input language, mode, GPU-aware notes
(architecture and tensor-core instruction shapes), findings, memory."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_llm import context, parent_of

from kernelpro.runner.candidate import Candidate
from kernelpro.runner.programmers.arch import ARCHS, arch_of
from kernelpro.runner.programmers.llm import build_messages
from kernelpro.runner.search import Scored
from kernelpro.runner.target import Target
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile

TEMPLATES = Path(__file__).parents[1] / "templates"


def _text(target: Target, parent: Scored, mode: str = "optimize", gpu: str = "NVIDIA H200", **ctx: str) -> tuple[str, str]:
    msgs = build_messages(parent, mode, 2, dataclasses.replace(context(target, gpu=gpu), **ctx))
    return str(msgs[0]["content"]), str(msgs[1]["content"])


def _gemm(target: Target) -> Target:
    """The demo target as a matrix product: hardware notes keep the tensor-core shapes only for those."""
    return dataclasses.replace(target, definition=dataclasses.replace(target.definition, op_type="gemm"))


def _as(parent: Scored, language: str, path: str, content: str) -> Scored:
    sol = parent.candidate.solution
    spec = BuildSpec(language, ("cuda",), f"{path}::swiglu")
    new = Solution(sol.name, sol.definition, sol.author, spec, (SourceFile(path, content),))
    return Scored(Candidate(new, None, "init", "x"), parent.outcome, parent.speedup)


def test_the_prompt_templates_are_parts() -> None:
    user = (TEMPLATES / "prompt_user.md.j2").read_text()
    for part in ("mode", "findings", "memory", "language", "gpu"):
        assert f'{{% include "prompt_part_{part}.md.j2" %}}' in user
    assert '{% include "prompt_part_strategies.md.j2" %}' in (TEMPLATES / "prompt_system.md.j2").read_text()


def test_base_strategies_and_modes(target: Target, repo_root: Path) -> None:
    parent = parent_of(target, repo_root, speedup=1.5)
    system, user = _text(target, parent)
    assert "How experts make a kernel faster" in system and "Move fewer bytes" in system
    assert "runs at 1.50x the baseline's speed" in user
    assert "from scratch" in _text(target, parent, "init")[1]
    broken = parent_of(target, repo_root, status="RUNTIME_ERROR", log="CUDA error: illegal address")
    debug = _text(target, broken, "debug")[1]
    assert "failed with status RUNTIME_ERROR" in debug and "illegal address" in debug


@pytest.mark.parametrize(("language", "path", "expect", "absent"), [
    ("triton", "kernels/swiglu.py", "## Writing fast Triton", "__launch_bounds__"),
    ("cuda", "kernels/swiglu.cu", "__launch_bounds__(threads, min_blocks)", "## Writing fast Triton"),
    ("python", "kernels/swiglu.py", "## Writing fast Python", "__launch_bounds__"),
])
def test_the_language_part_follows_the_input_language(target: Target, repo_root: Path, language: str, path: str,
                                                      expect: str, absent: str) -> None:
    base = parent_of(target, repo_root)
    parent = _as(base, language, path, "void swiglu() {}\n" if path.endswith(".cu") else "def swiglu(a, b):\n    pass\n")
    _, user = _text(_gemm(target), parent)
    assert expect in user and absent not in user
    # The GPU part follows the language too: CuTe for CUDA, tl.dot for Triton, matmul ops for PyTorch.
    lang_line = {"triton": "In Triton, tl.dot lowers to wgmma", "cuda": "SM90_64xNx16 MMA atoms",
                 "python": "From PyTorch, tensor cores"}[language]
    assert lang_line in user


@pytest.mark.parametrize(("gpu", "arch", "shape", "not_in"), [
    ("NVIDIA H200", "Hopper (GH100), compile target sm_90a", "m64nNk16 for fp16/bf16", "tcgen05"),
    ("NVIDIA H100 80GB HBM3", "Hopper", "wgmma.mma_async", "tcgen05"),
    ("NVIDIA A100-SXM4-80GB", "Ampere (GA100), compile target sm_80", "mma.sync.aligned.m16n8k16", "wgmma"),
    ("NVIDIA A10G", "Ampere (GA10x), compile target sm_86", "m16n8k16", "wgmma"),
    ("NVIDIA L40S", "Ada (AD10x), compile target sm_89", "m16n8k32 for fp8 (e4m3/e5m2)", "wgmma"),
    ("NVIDIA B200", "Blackwell (GB100), compile target sm_100a", "tcgen05.mma", "m16n8k8"),
    ("Tesla T4", "Turing (TU10x), compile target sm_75", "mma.sync m16n8k8 for fp16", "cp.async ("),
])
def test_gpu_aware_notes_name_the_architecture_and_its_tensor_core_shapes(
        target: Target, repo_root: Path, gpu: str, arch: str, shape: str, not_in: str) -> None:
    _, user = _text(_gemm(target), parent_of(target, repo_root), gpu=gpu)
    notes = user.split(f"## Hardware notes ({gpu})")[1].split("\n## ")[0]
    assert arch in notes and shape in notes and not_in not in notes
    # The demo's elementwise kernel keeps the architecture, without the tensor-core instruction shapes.
    _, user = _text(target, parent_of(target, repo_root), gpu=gpu)
    notes = user.split(f"## Hardware notes ({gpu})")[1].split("\n## ")[0]
    assert arch in notes and shape not in notes and "memory-bound kernel should approach" in notes


def test_unknown_gpus_and_cpu_runs_get_no_hardware_notes(target: Target, repo_root: Path) -> None:
    for gpu in ("", "AMD Instinct MI300X", "NVIDIA A1000"):
        _, user = _text(target, parent_of(target, repo_root), gpu=gpu)
        assert "## Hardware notes" not in user, gpu


def test_arch_names_do_not_shadow_each_other() -> None:
    cases = {"NVIDIA GH200 480GB": "Hopper", "NVIDIA H20": "Hopper", "NVIDIA A100 80GB PCIe": "Ampere (GA100)",
             "NVIDIA A10": "Ampere (GA10x)", "NVIDIA L4": "Ada", "NVIDIA L40": "Ada",
             "NVIDIA GeForce RTX 4090": "Ada", "NVIDIA GeForce RTX 3090": "Ampere (GA10x)",
             "NVIDIA RTX 6000 Ada Generation": "Ada", "NVIDIA GB200": "Blackwell"}
    for name, family in cases.items():
        a = arch_of(name)
        assert a is not None and a.name.startswith(family), (name, a)
    assert len({a.sm for a in ARCHS}) == len(ARCHS)


def test_findings_and_memory_parts(target: Target, repo_root: Path) -> None:
    _, user = _text(target, parent_of(target, repo_root), feedback="[high] Global loads are scalar",
                    memory="### Learnings\n- num_warps 32 was slower")
    assert "## Automated Bottleneck Analysis" in user and "[high] Global loads are scalar" in user
    assert "## Search memory" in user and "num_warps 32 was slower" in user
    _, bare = _text(target, parent_of(target, repo_root))
    assert "## Automated Bottleneck Analysis" not in bare and "## Search memory" not in bare


def test_a_raw_cuda_kernel_prompt_shows_the_launch_kernelpro_makes(target: Target, repo_root: Path,
                                                                   tmp_path: Path) -> None:
    # The launch lives in .kernelpro.yml, not in the sources: a model that renamed the symbol or a
    # macro the grid reads would get a COMPILE_ERROR it could not explain.
    from kernelpro.cli import make_demo_repo
    from kernelpro.runner.config import load_config

    repo = make_demo_repo(tmp_path / "repo", "cuda")
    sol = load_config(repo / ".kernelpro.yml").target("swiglu_cuda").solution(repo)
    assert sol.spec.launch is not None
    base = parent_of(target, repo_root)
    parent = Scored(Candidate(sol, None, "init", "x"), base.outcome, base.speedup)
    _, user = _text(target, parent)
    launch = sol.spec.launch
    assert f"kernelpro launches `{launch.kernel}` itself" in user
    assert all(a.declaration() in user for a in launch.args) and ", ".join(launch.block) in user
    triton_user = _text(target, base)[1]
    assert "kernelpro launches" not in triton_user
