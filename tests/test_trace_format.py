"""Our FlashInfer-Trace records against flashinfer-bench 0.1.2's own pydantic models.

flashinfer-bench is installed with ``pip install --no-deps -r requirements-test.txt``. Its
top-level ``__init__`` imports torch and the whole benchmark stack, so the four schema modules of
``flashinfer_bench.data`` are loaded on their own (they need only pydantic; ``flashinfer_bench.utils``
imports torch lazily): the two packages are stood in by empty modules while the files load, and
``sys.modules`` is restored afterwards so nothing else sees the stand-ins.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import json
import math
import sys
import types
from typing import Any

import pytest

from kernelpro.runner.trace import (
    DTYPES,
    LANGUAGES,
    STATUSES,
    Axis,
    BuildSpec,
    Correctness,
    Definition,
    Environment,
    Evaluation,
    InputSpec,
    Performance,
    Solution,
    SourceFile,
    TensorSpec,
    Trace,
    Workload,
)

REASON = (
    "needs flashinfer-bench 0.1.2 and pydantic 2: pip install --no-deps -r requirements-test.txt"
)
PKG = "flashinfer_bench"


@pytest.fixture(scope="module")
def fib() -> types.SimpleNamespace:
    pytest.importorskip("pydantic", minversion="2", reason=REASON)
    spec = importlib.util.find_spec(PKG)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(REASON)
    version = importlib.metadata.version("flashinfer-bench")
    if version != "0.1.2":
        pytest.skip(f"flashinfer-bench {version} is installed; these tests pin the 0.1.2 schema")
    root = list(spec.submodule_search_locations)[0]
    ours = lambda k: k == PKG or k.startswith(PKG + ".")  # noqa: E731
    saved = {k: v for k, v in sys.modules.items() if ours(k)}
    try:
        for name, path in ((PKG, root), (f"{PKG}.data", f"{root}/data")):
            if name not in sys.modules:
                stub = types.ModuleType(name)
                stub.__path__ = [path]
                sys.modules[name] = stub
        mods = {m: importlib.import_module(f"{PKG}.data.{m}") for m in ("definition", "workload", "solution", "trace")}
    except ImportError as e:
        pytest.skip(f"{REASON} ({e})")
    finally:
        for k in [k for k in sys.modules if ours(k)]:
            del sys.modules[k]
        sys.modules.update(saved)
    ns = types.SimpleNamespace(
        **{k: v for m in mods.values() for k, v in vars(m).items() if not k.startswith("_")}
    )
    for model in (ns.Definition, ns.Workload, ns.Solution, ns.Trace):
        assert model.__pydantic_complete__
    return ns


def strip_none(x: Any) -> Any:
    """Compare JSON without caring whether absent optional fields are omitted or null."""
    if isinstance(x, dict):
        return {k: strip_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [strip_none(v) for v in x]
    return x


def as_json(record: Any) -> Any:
    return json.loads(json.dumps(record.to_json()))  # through text, as it travels in files


DEFINITION = Definition(
    name="fused_add_rmsnorm_h4096",
    op_type="rmsnorm",
    axes={
        "batch_size": Axis("var", description="tokens"),
        "hidden_size": Axis("const", 4096),
    },
    inputs={
        "hidden_states": TensorSpec(("batch_size", "hidden_size"), "bfloat16"),
        "residual": TensorSpec(("batch_size", "hidden_size"), "bfloat16", "added first"),
        "weight": TensorSpec(("hidden_size",), "bfloat16"),
        "eps": TensorSpec(None, "float32", "scalar epsilon"),
    },
    outputs={"output": TensorSpec(("batch_size", "hidden_size"), "bfloat16")},
    reference=(
        "import torch\n\ndef run(hidden_states, residual, weight, eps):\n"
        "    x = (hidden_states + residual).float()\n"
        "    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight).bfloat16()\n"
    ),
    tags=("status:verified", "model:llama"),
    description="Fused add + RMSNorm.",
    constraints=("batch_size >= 1", "hidden_size % 128 == 0"),
)
WORKLOAD = Workload(
    axes={"batch_size": 7},
    inputs={
        "hidden_states": InputSpec("random"),
        "residual": InputSpec("random"),
        "weight": InputSpec("safetensors", path="blob/w.safetensors", tensor_key="weight"),
        "eps": InputSpec("scalar", 1e-6),
    },
    uuid="6a7f2c1e-0001",
)
SOLUTION = Solution(
    name="rmsnorm_triton_v1",
    definition=DEFINITION.name,
    author="kernelpro-tuner",
    spec=BuildSpec(
        language="triton",
        target_hardware=("cuda",),
        entry_point="kernels/rmsnorm.py::fused_add_rmsnorm",
        dependencies=("triton",),
        destination_passing_style=False,
    ),
    sources=(
        SourceFile("kernels/rmsnorm.py", "import triton\n\ndef fused_add_rmsnorm(*a):\n    pass\n"),
        SourceFile("kernels/common.py", "BLOCK = 1024\n"),
    ),
    description="one program per row",
)
ENV = Environment("NVIDIA_H200", {"torch": "2.8.0", "triton": "3.4.0", "cuda": "12.8"})


def trace(evaluation: Evaluation | None, solution: str | None = SOLUTION.name) -> Trace:
    return Trace(
        definition=DEFINITION.name, workload=WORKLOAD, solution=solution, evaluation=evaluation
    )


def test_enums_match(fib: types.SimpleNamespace) -> None:
    assert tuple(d.value for d in fib.DType) == DTYPES
    assert tuple(x.value for x in fib.SupportedLanguages) == LANGUAGES
    assert tuple(s.value for s in fib.EvaluationStatus) == STATUSES


def test_definition_validates(fib: types.SimpleNamespace) -> None:
    ours = as_json(DEFINITION)
    theirs = fib.Definition.model_validate(ours)
    assert theirs.const_axes == {"hidden_size": 4096} and theirs.var_axes == ["batch_size"]
    assert theirs.inputs["eps"].shape is None
    assert strip_none(theirs.model_dump(mode="json")) == strip_none(ours)
    assert Definition.from_json(ours) == DEFINITION


def test_workload_validates(fib: types.SimpleNamespace) -> None:
    ours = as_json(WORKLOAD)
    theirs = fib.Workload.model_validate(ours)
    assert isinstance(theirs.inputs["eps"], fib.ScalarInput) and theirs.inputs["eps"].value == 1e-6
    assert isinstance(theirs.inputs["hidden_states"], fib.RandomInput)
    assert isinstance(theirs.inputs["weight"], fib.SafetensorsInput)
    assert strip_none(theirs.model_dump(mode="json")) == strip_none(ours)
    assert Workload.from_json(ours) == WORKLOAD
    made = Workload.make(DEFINITION, {"batch_size": 3})  # random recipes only
    fib.Workload.model_validate(as_json(made))


def test_solution_validates(fib: types.SimpleNamespace) -> None:
    ours = as_json(SOLUTION)
    theirs = fib.Solution.model_validate(ours)
    assert theirs.spec.language == fib.SupportedLanguages.TRITON
    assert theirs.spec.destination_passing_style is False
    assert (
        str(theirs.get_entry_path()) == "kernels/rmsnorm.py"
        and theirs.get_entry_symbol() == "fused_add_rmsnorm"
    )
    assert strip_none(theirs.model_dump(mode="json")) == strip_none(ours)
    assert Solution.from_json(ours) == SOLUTION


@pytest.mark.parametrize(
    ("evaluation", "status"),
    [
        (
            Evaluation(
                "PASSED", ENV, "2025-06-01T12:00:00Z", log="ok",
                correctness=Correctness(1.2e-3, 3.1e-5, {"trials": 3, "seeds": [0, 1, 2]}),
                performance=Performance(0.0123, 0.0456, 0.0456 / 0.0123),
            ),
            "PASSED",
        ),
        (
            Evaluation(
                "INCORRECT_NUMERICAL", ENV, "2025-06-01T12:01:00Z", log="max abs err 0.5 > atol",
                correctness=Correctness(0.75, 0.5),
            ),
            "INCORRECT_NUMERICAL",
        ),
        (
            Evaluation(
                "COMPILE_ERROR", ENV, "2025-06-01T12:02:00Z",
                log="triton.compiler.errors.CompilationError: at 12:8:\n  x = tl.load(ptr + offs\n        ^",
            ),
            "COMPILE_ERROR",
        ),
    ],
    ids=["passed", "incorrect_numerical", "compile_error"],
)
def test_trace_validates(fib: types.SimpleNamespace, evaluation: Evaluation, status: str) -> None:
    ours = as_json(trace(evaluation))
    theirs = fib.Trace.model_validate(ours)
    assert theirs.evaluation.status.value == status
    assert theirs.evaluation.log == evaluation.log
    assert theirs.is_successful() is (status == "PASSED")
    assert theirs.evaluation.environment.libs == dict(ENV.libs)
    if evaluation.correctness is not None:
        assert (
            theirs.evaluation.correctness.max_relative_error
            == evaluation.correctness.max_relative_error
        )
    if evaluation.performance is not None:
        assert theirs.evaluation.performance.speedup_factor == pytest.approx(0.0456 / 0.0123)
    assert strip_none(theirs.model_dump(mode="json")) == strip_none(ours)


def test_non_finite_errors_and_workload_trace(fib: types.SimpleNamespace) -> None:
    ev = Evaluation("INCORRECT_NUMERICAL", ENV, "2025-06-01T12:03:00Z",
                    correctness=Correctness(float("nan"), float("inf")))
    theirs = fib.Trace.model_validate(as_json(trace(ev)))
    assert math.isnan(theirs.evaluation.correctness.max_relative_error)
    assert math.isinf(theirs.evaluation.correctness.max_absolute_error)
    wl_only = fib.Trace.model_validate(as_json(trace(None, solution=None)))
    assert wl_only.is_workload_trace()


@pytest.mark.parametrize("status", STATUSES)
def test_every_status_we_can_build_loads_there(fib: types.SimpleNamespace, status: str) -> None:
    corr = Correctness(0.1, 0.1) if status in ("PASSED", "INCORRECT_NUMERICAL") else None
    perf = Performance(1.0, 2.0, 2.0) if status == "PASSED" else None
    ev = Evaluation(
        status, ENV, "2025-06-01T00:00:00Z", log=status.lower(), correctness=corr, performance=perf
    )
    fib.Evaluation.model_validate(as_json(ev))


def test_their_json_reads_back(fib: types.SimpleNamespace) -> None:
    d = fib.Definition(
        name="gemm_n4096",
        op_type="gemm",
        axes={"M": fib.AxisVar(), "N": fib.AxisConst(value=4096), "K": fib.AxisConst(value=1024)},
        inputs={"A": fib.TensorSpec(shape=["M", "K"], dtype="float16"),
                "B": fib.TensorSpec(shape=["N", "K"], dtype="float16"),
                "alpha": fib.TensorSpec(shape=None, dtype="float32")},
        outputs={"C": fib.TensorSpec(shape=["M", "N"], dtype="float16")},
        reference="def run(A, B, alpha):\n    return alpha * (A @ B.T)\n",
    )
    dj = json.loads(json.dumps(d.model_dump(mode="json")))
    ours_d = Definition.from_json(dj)
    assert ours_d.axes["N"] == Axis("const", 4096) and ours_d.axes["M"] == Axis("var")
    assert ours_d.inputs["alpha"].shape is None and ours_d.var_axes == ["M"]
    assert strip_none(ours_d.to_json()) == strip_none(dj)

    w = fib.Workload(axes={"M": 33},
                     inputs={"A": fib.RandomInput(), "B": fib.RandomInput(),
                             "alpha": fib.ScalarInput(value=0.5)},
                     uuid="w-1")
    wj = json.loads(json.dumps(w.model_dump(mode="json")))
    ours_w = Workload.from_json(wj)
    assert ours_w.inputs["alpha"] == InputSpec("scalar", 0.5) and ours_w.axes == {"M": 33}
    assert strip_none(ours_w.to_json()) == strip_none(wj)

    s = fib.Solution(
        name="gemm_cuda_v1", definition=d.name, author="someone",
        spec=fib.BuildSpec(language="cuda", target_hardware=["cuda"], entry_point="gemm.cu::run",
                           destination_passing_style=True, binding="torch"),
        sources=[fib.SourceFile(path="gemm.cu", content="__global__ void k() {}\n"),
                 fib.SourceFile(path="include/tile.h", content="#pragma once\n")],
    )
    sj = json.loads(json.dumps(s.model_dump(mode="json")))
    ours_s = Solution.from_json(sj)
    assert ours_s.spec.binding == "torch" and ours_s.spec.destination_passing_style is True
    assert ours_s.entry_file == "gemm.cu" and [f.path for f in ours_s.sources] == [
        "gemm.cu",
        "include/tile.h",
    ]
    assert strip_none(ours_s.to_json()) == strip_none(sj)
