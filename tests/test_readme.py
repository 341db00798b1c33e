"""The README's configuration guide is true (issue 19, the README point).

"Configuring a kernel of a real repository" documents every key the configuration parser accepts,
each of its YAML examples is a configuration the parser takes (and its reference computes the
declared outputs), and the patches it shows for upstream Liger-Kernel kernels are the tuner's own
(tests/fixtures/upstream, as published).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
import torch

from kernelpro.knobs import apply_knobs, find_knobs
from kernelpro.runner import config
from kernelpro.runner.config import parse_config
from kernelpro.runner.trace import InputSpec
from kernelpro.setting import unified_diff

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"


def section(title: str) -> str:
    start = README.index(f"\n## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end]


def yaml_blocks() -> list[str]:
    """Every YAML block of the configuration sections, as a whole file (a target alone is wrapped)."""
    text = "".join(section(t) for t in ("A minimal `.kernelpro.yml`", "Configuring a kernel of a real repository",
                                        "CUDA targets"))
    out = []
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        if block.startswith("  - name:"):
            out.append("version: 1\ntargets:\n" + block)
        elif block.startswith("version:"):
            out.append(block)
    return out


def test_every_configuration_key_is_documented() -> None:
    guide = section("A minimal `.kernelpro.yml`") + section("Configuring a kernel of a real repository") + section(
        "CUDA targets")
    keys = {*config.TOP_KEYS, *config.TARGET_KEYS, *config.DEFINITION_KEYS, *config.WORKLOAD_KEYS,
            *config.TOLERANCE_KEYS, *config.BUDGET_KEYS, *(f.name for f in dataclasses.fields(InputSpec)),
            "grid", "block", "shared_mem", "args"}  # the last four: runner/launch.py's launch keys
    missing = sorted(k for k in keys if f"`{k}`" not in guide and not re.search(rf"[{{ ]{k}: ", guide))
    assert not missing, f"keys of .kernelpro.yml the README does not document: {missing}"


def test_the_minimal_example_has_the_stage1_formulas() -> None:
    minimal = section("A minimal `.kernelpro.yml`")
    assert re.search(r'^    flops: "[^"]+"', minimal, re.M) and re.search(r'^    bytes: "[^"]+"', minimal, re.M)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """What the examples' paths name: a swiglu definition file, a Python and a CUDA kernel."""
    (tmp_path / "definitions").mkdir()
    (tmp_path / "definitions" / "swiglu.json").write_text(json.dumps({
        "name": "swiglu", "op_type": "swiglu", "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 4096}},
        "inputs": {"a": {"shape": ["M", "N"], "dtype": "float32"}, "b": {"shape": ["M", "N"], "dtype": "float32"}},
        "outputs": {"out": {"shape": ["M", "N"], "dtype": "float32"}},
        "reference": "import torch\ndef run(a, b):\n    return torch.nn.functional.silu(a) * b\n"}))
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "swiglu.py").write_text("def swiglu(a, b):\n    return a\n")
    (tmp_path / "kernels" / "swiglu.cu").write_text(
        "#define BLOCK_SIZE 256\nconstexpr int VEC = 4;\n"
        'extern "C" __global__ void swiglu_kernel(const float* a, const float* b, float* out, long long n) {}\n')
    return tmp_path


def test_every_yaml_example_is_a_configuration_the_parser_takes(repo: Path) -> None:
    blocks = yaml_blocks()
    assert len(blocks) >= 5  # the minimal file, rms_norm, swiglu, dyt, the raw CUDA kernel
    names = []
    for block in blocks:
        for t in parse_config(block, ".kernelpro.yml", repo).targets:
            names.append(t.name)
            d = t.definition
            small = {a: 3 for a in d.var_axes} | {a: ax.value for a, ax in d.axes.items() if ax.value is not None}
            inputs = []
            for spec in d.inputs.values():
                dtype = getattr(torch, spec.dtype)
                inputs.append(torch.randn([small[a] for a in spec.shape], dtype=dtype) if spec.shape is not None
                              else torch.tensor(1e-6).item())
            namespace: dict[str, object] = {}
            exec(compile(d.reference, f"<README {t.name} reference>", "exec"), namespace)  # noqa: S102 - our README
            got = namespace["run"](*inputs)  # type: ignore[operator]
            got = got if isinstance(got, tuple) else (got,)
            for out, spec in zip(got, d.outputs.values(), strict=True):
                assert list(out.shape) == [small[a] for a in spec.shape] and out.dtype == getattr(torch, spec.dtype), t.name
    assert {"swiglu", "rms_norm", "dyt", "swiglu_cuda"} <= set(names)


def _diff_lines(block_after: str) -> list[str]:
    block = re.search(rf"{re.escape(block_after)}.*?```diff\n(.*?)```", README, re.S)
    assert block is not None, block_after
    return [line for line in block.group(1).splitlines() if line[:1] in "+-"]


def _changed(old: str, new: str) -> list[str]:
    return [line for line in unified_diff("f.py", old, new).splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def test_the_patches_shown_for_liger_kernels_are_the_tuners() -> None:
    swiglu = (UPSTREAM / "liger_swiglu.py").read_text()
    assert "def swiglu_forward(a, b, gate_multiplier: float = 1.0):" in swiglu and "return a, b, c.view(" in swiglu
    scaled = apply_knobs(swiglu, {"swiglu_forward:num_warps.scale#2": 1})
    assert _diff_lines("is scaled where the kernel is launched:") == _changed(swiglu, scaled)
    dyt = (UPSTREAM / "liger_dyt.py").read_text()
    assert "def liger_dyt_fwd(x, alpha, gamma, beta):" in dyt
    names = {k.name for k in find_knobs(dyt)}
    for quoted in re.findall(r"`(_dyt_fwd_kernel:[^`]+)`", README):
        assert quoted in names, quoted
    pinned = apply_knobs(dyt, {"_dyt_fwd_kernel:autotune.pin": 5})
    assert _diff_lines("`prune_configs_by` under `key`:") == _changed(dyt, pinned)
