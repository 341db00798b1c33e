"""Every dtype a kernel may return, through the real evaluator on the CPU (issue 19, point 2).

For each dtype: inputs are made in it, the outputs are poisoned in it (NaN, then a finite value the
dtype can hold: -7.25e4 does not fit float16 and used to fail every float16 candidate, the pull
request's own included), an honest plain-torch candidate passes and one that leaves half its output
unwritten fails. Tolerances can be set per output.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from kernelpro.runner.config import parse_config
from kernelpro.runner.evaluator import EvalSettings, evaluate
from kernelpro.runner.harness import _make_inputs, _poisoned_outputs, _second_poison
from kernelpro.runner.target import Tolerance
from kernelpro.runner.trace import BuildSpec, Definition, Solution, SourceFile, Workload

FLOATS = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz",
          "float8_e5m2fnuz", "float8_e8m0fnu"]
INTEGERS = ["int8", "int16", "int32", "int64", "uint8", "bool"]

# The reference doubles its input (an exact operation in every float kind, float8 included:
# computed in float64 and cast back) and negates booleans.
REFERENCE = """import torch

def run(x):
    if x.dtype == torch.bool:
        return ~x
    if x.dtype.is_floating_point:
        return (x.double() * 2).to(x.dtype)
    return x + 1
"""
HONEST = """import torch

def run(x, y):
    if x.dtype == torch.bool:
        y.copy_(torch.logical_not(x))
    elif x.dtype.is_floating_point:
        y.copy_((x.double() + x.double()).to(x.dtype))
    else:
        y.copy_(x + 1)
"""
# Writes only the first half: the second half keeps whatever poison the harness put there.
HALF = HONEST.replace("def run(x, y):\n", "def run(x, y):\n    x, y = x[: len(x) // 2], y[: len(y) // 2]\n")
assert HALF != HONEST


def definition(dtype: str) -> Definition:
    return Definition.from_json({
        "name": f"double_{dtype}", "op_type": "elementwise",
        "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 16}},
        "inputs": {"x": {"shape": ["M", "N"], "dtype": dtype}},
        "outputs": {"y": {"shape": ["M", "N"], "dtype": dtype}},
        "reference": REFERENCE,
    })


def solution(defn: Definition, source: str) -> Solution:
    return Solution("cand", defn.name, "test", BuildSpec("python", ("cpu",), "cand.py::run"),
                    (SourceFile("cand.py", source),))


def settings(tmp_path: Path) -> EvalSettings:
    return EvalSettings(device="cpu", trials=2, reps_cpu=2, rotate=2, timeout_s=90, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS)
def test_every_dtype_is_judged(tmp_path: Path, dtype: str) -> None:
    defn = definition(dtype)
    loads = [Workload.make(defn, {"M": 8})]
    good = evaluate(defn, solution(defn, HONEST), loads, Tolerance(), settings(tmp_path))
    assert good.passed, good.log
    assert good.results[0].correctness is not None and good.results[0].correctness["runs_per_trial"] == 2
    half = evaluate(defn, solution(defn, HALF), loads, Tolerance(), settings(tmp_path))
    assert half.status == "INCORRECT_NUMERICAL", (half.status, half.log)


@pytest.mark.parametrize("dtype", FLOATS)
def test_poisons_fit_the_dtype(dtype: str) -> None:
    d = getattr(torch, dtype)
    defn = definition(dtype).to_json()
    first, second = (_poisoned_outputs(defn, {"M": 4}, "cpu", s)[0].float() for s in (False, True))
    assert first.isnan().all()
    assert second.isfinite().all() and (second == float(torch.tensor(_second_poison(d)).to(d).float())).all()
    assert abs(float(second[0, 0])) >= 64  # far from any plausible output of a unit-scale kernel


def test_float64_inputs_are_drawn_in_float64() -> None:
    defn = definition("float64").to_json()
    (x,) = _make_inputs(defn, Workload.make(definition("float64"), {"M": 64}).to_json(), 3, "cpu")
    assert x.dtype == torch.float64
    assert not torch.equal(x, x.float().double())  # not float32 values widened


def test_unsigned_inputs_are_in_range() -> None:
    defn = definition("uint8")
    (x,) = _make_inputs(defn.to_json(), Workload.make(defn, {"M": 64}).to_json(), 3, "cpu")
    assert x.dtype == torch.uint8 and int(x.max()) < 64 and int(x.max()) > 0


STAT = """import torch

def run(x):
    y = (x.float() * 2).to(x.dtype)
    return y, x.float().pow(2).mean(dim=1)
"""
# y exact; the statistic off by 1e-3 relative: beyond float32's default, within its own tolerance.
STAT_CAND = """import torch

def run(x):
    return (x.float() * 2).to(x.dtype), x.float().pow(2).mean(dim=1) * 1.001
"""


def test_tolerances_per_output(tmp_path: Path) -> None:
    defn = Definition.from_json({
        "name": "stat", "op_type": "norm", "axes": {"M": {"type": "var"}, "N": {"type": "const", "value": 16}},
        "inputs": {"x": {"shape": ["M", "N"], "dtype": "bfloat16"}},
        "outputs": {"y": {"shape": ["M", "N"], "dtype": "bfloat16"}, "ms": {"shape": ["M"], "dtype": "float32"}},
        "reference": STAT,
    })
    sol = replace(solution(defn, STAT_CAND), spec=BuildSpec("python", ("cpu",), "cand.py::run",
                                                             destination_passing_style=False))
    loads = [Workload.make(defn, {"M": 8})]
    strict = evaluate(defn, sol, loads, Tolerance(), settings(tmp_path))
    assert strict.status == "INCORRECT_NUMERICAL" and '"output": "ms"' in strict.log
    tol = Tolerance(outputs=(("ms", Tolerance(atol=1e-2, rtol=1e-2)),))
    assert tol.for_output("y", "bfloat16") == (1e-2, 1e-2) and tol.for_output("ms", "float32") == (1e-2, 1e-2)
    assert Tolerance(atol=0.5, outputs=(("ms", Tolerance(rtol=0.1)),)).for_output("ms", "float32") == (0.5, 0.1)
    loose = evaluate(defn, sol, loads, tol, settings(tmp_path))
    assert loose.passed, loose.log


def test_config_reads_tolerances_per_output(tmp_path: Path) -> None:
    (tmp_path / "k.py").write_text("def run(x):\n    return x\n")
    text = """\
version: 1
targets:
  - name: stat
    files: [k.py]
    language: python
    entry_point: k.py::run
    definition:
      op_type: norm
      axes: {M: {type: var}}
      inputs: {x: {shape: [M], dtype: bfloat16}}
      outputs: {y: {shape: [M], dtype: bfloat16}, ms: {shape: [M], dtype: float32}}
      reference: "def run(x):\\n    return x, x.float()\\n"
    workloads: [{M: 4}]
    tolerances: {atol: 2.0e-2, ms: {rtol: 1.0e-4}}
"""
    t = parse_config(text, ".kernelpro.yml", tmp_path).targets[0]
    assert t.tolerance.for_output("y", "bfloat16") == (2e-2, 1e-2)
    assert t.tolerance.for_output("ms", "float32") == (2e-2, 1e-4)
    from kernelpro.runner.config import ConfigError

    with pytest.raises(ConfigError) as e:
        parse_config(text.replace("ms: {rtol", "mss: {rtol"), ".kernelpro.yml", tmp_path)
    assert ".kernelpro.yml:14: targets[0].tolerances.mss: unknown key 'mss'" in str(e.value)
    assert "rename it to 'ms'" in str(e.value)
