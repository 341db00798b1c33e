"""Wrappers are optional (issue 19, point 4): a repository's own forward function is the entry point.

``returns:`` names which of its returned values are the definition's outputs (by index, or by key or
attribute name), ``in_place:`` which outputs it writes into its inputs. Configured from a
``.kernelpro.yml`` and judged by the real evaluator (reference child, candidate child) on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpro.runner.config import ConfigError, parse_config
from kernelpro.runner.evaluator import EvalSettings, Outcome, evaluate
from kernelpro.runner.target import Target
from kernelpro.runner.trace import Solution

# A Liger-like forward: the output, then what backward needs, then launch settings.
LIGER = """import torch

def rms_norm_forward(x, w, eps):
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=1) + eps)
    y = x * rstd[:, None] * w
    return y, x, rstd, 128, 4
"""
# A FlashInfer-like fused op: returns nothing, writes both results into its inputs.
FLASHINFER = """import torch

def fused_add_rmsnorm(x, residual, w, eps):
    residual.add_(x)
    rstd = torch.rsqrt(residual.pow(2).mean(dim=1, keepdim=True) + eps)
    x.copy_(residual * rstd * w)
"""
NAMED = """import collections
import torch

Out = collections.namedtuple("Out", ["y", "rstd"])

def forward(x, w, eps):
    rstd = torch.rsqrt(x.float().pow(2).mean(dim=1) + eps)
    return {"meta": 1, "out": Out(x * rstd[:, None] * w, rstd)}["out"]
"""

RMS_DEF = """
    definition:
      op_type: rmsnorm
      axes: {M: {type: var}, N: {type: const, value: 32}}
      inputs: {x: {shape: [M, N], dtype: float32}, w: {shape: [N], dtype: float32}, eps: {shape: null, dtype: float32}}
      outputs: {y: {shape: [M, N], dtype: float32}, rstd: {shape: [M], dtype: float32}}
      reference: |
        import torch
        def run(x, w, eps):
            rstd = torch.rsqrt(x.pow(2).mean(dim=1) + eps)
            return x * rstd[:, None] * w, rstd
    workloads: [{axes: {M: 8}, inputs: {eps: {type: scalar, value: 1.0e-6}}}]
"""
FUSED_DEF = """
    definition:
      op_type: rmsnorm
      axes: {M: {type: var}, N: {type: const, value: 32}}
      inputs: {x: {shape: [M, N], dtype: float32}, residual: {shape: [M, N], dtype: float32},
               w: {shape: [N], dtype: float32}, eps: {shape: null, dtype: float32}}
      outputs: {y: {shape: [M, N], dtype: float32}, residual_out: {shape: [M, N], dtype: float32}}
      reference: |
        import torch
        def run(x, residual, w, eps):
            r = residual + x
            return r * torch.rsqrt(r.pow(2).mean(dim=1, keepdim=True) + eps) * w, r
    workloads: [{axes: {M: 8}, inputs: {eps: {type: scalar, value: 1.0e-6}}}]
"""


def target(repo: Path, source: str, entry: str, definition: str, extra: str = "") -> Target:
    (repo / "ops").mkdir(exist_ok=True)
    (repo / "ops" / "k.py").write_text(source)
    text = (f"version: 1\ntargets:\n  - name: k\n    files: [ops/k.py]\n    language: python\n"
            f"    entry_point: ops/k.py::{entry}\n{extra}{definition}")
    return parse_config(text, ".kernelpro.yml", repo).targets[0]


def run(t: Target, repo: Path, tmp_path: Path) -> Outcome:
    sol: Solution = t.solution(repo)
    es = EvalSettings(device="cpu", trials=2, reps_cpu=2, rotate=2, timeout_s=90, cache_dir=tmp_path / "cache")
    return evaluate(t.definition, sol, t.workloads, t.tolerance, es)


def test_returns_by_index_picks_the_outputs(tmp_path: Path) -> None:
    t = target(tmp_path, LIGER, "rms_norm_forward", RMS_DEF, "    returns: [0, 2]\n")
    assert t.returns == (0, 2) and t.solution(tmp_path).spec.returns == (0, 2)
    outcome = run(t, tmp_path, tmp_path)
    assert outcome.passed, outcome.log
    # The same function without `returns:` is judged on all five returned values, and fails.
    bare = run(target(tmp_path, LIGER, "rms_norm_forward", RMS_DEF), tmp_path, tmp_path)
    assert bare.status == "INCORRECT_SHAPE" and "returned 5 outputs" in bare.log


def test_returns_by_name_and_wrong_place(tmp_path: Path) -> None:
    t = target(tmp_path, NAMED, "forward", RMS_DEF, "    returns: {rstd: rstd, y: y}\n")
    assert t.returns == ("y", "rstd")
    outcome = run(t, tmp_path, tmp_path)
    assert outcome.passed, outcome.log
    swapped = run(target(tmp_path, LIGER, "rms_norm_forward", RMS_DEF, "    returns: [2, 0]\n"), tmp_path, tmp_path)
    assert swapped.status == "INCORRECT_SHAPE"
    missing = run(target(tmp_path, LIGER, "rms_norm_forward", RMS_DEF, "    returns: [0, 7]\n"), tmp_path, tmp_path)
    assert missing.status == "RUNTIME_ERROR" and "returned 5 values, which has no 7" in missing.log


def test_outputs_written_in_place(tmp_path: Path) -> None:
    t = target(tmp_path, FLASHINFER, "fused_add_rmsnorm", FUSED_DEF, "    in_place: {y: x, residual_out: residual}\n")
    assert t.in_place == (("y", "x"), ("residual_out", "residual"))
    outcome = run(t, tmp_path, tmp_path)
    assert outcome.passed, outcome.log
    # Undeclared, the same function returns None and modifies its inputs, which fails.
    bare = run(target(tmp_path, FLASHINFER, "fused_add_rmsnorm", FUSED_DEF), tmp_path, tmp_path)
    assert not bare.passed and ("modified an input" in bare.log or "NoneType" in bare.log), bare.log
    # Declared but wrong (residual not updated): the in-place output is checked like any other.
    lazy = FLASHINFER.replace("    residual.add_(x)\n", "    residual = residual + x\n")
    wrong = run(target(tmp_path, lazy, "fused_add_rmsnorm", FUSED_DEF,
                       "    in_place: {y: x, residual_out: residual}\n"), tmp_path, tmp_path)
    assert wrong.status == "INCORRECT_NUMERICAL" and "residual_out" in wrong.log


def test_in_place_and_returns_together(tmp_path: Path) -> None:
    source = FLASHINFER.replace("    x.copy_(residual * rstd * w)\n", "    return 7, residual * rstd * w\n")
    t = target(tmp_path, source, "fused_add_rmsnorm", FUSED_DEF, "    in_place: {residual_out: residual}\n    returns: [1]\n")
    outcome = run(t, tmp_path, tmp_path)
    assert outcome.passed, outcome.log


@pytest.mark.parametrize(("extra", "message"), [
    ("    returns: [0, 1, 2]\n", "targets[0].returns: 3 place(s) for 2 returned output(s) (y, rstd)"),
    ("    returns: {y: 0, z: 1}\n", "targets[0].returns: z is not an output returned by the entry point"),
    ("    returns: [0, -1]\n", "targets[0].returns: -1 is neither an index (0, 1, ...) nor a name"),
    ("    returns: [0, 2]\n    destination_passing_style: true\n",
     "targets[0].returns: 'returns' describes an entry point that returns its outputs"),
    ("    in_place: {y: w}\n", "targets[0].in_place.y: output y (float32 [M, N]) cannot be written into input w"),
    ("    in_place: {y: eps}\n", "targets[0].in_place.y: 'eps' is not a tensor input of the definition"),
    ("    in_place: {q: x}\n", "targets[0].in_place.q: unknown key 'q'"),
])
def test_config_errors(tmp_path: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        target(tmp_path, LIGER, "rms_norm_forward", RMS_DEF, extra)
    assert message in str(e.value), str(e.value)
    assert "Fix: " in str(e.value)
