"""FlashInfer-Trace records: Definition, Workload, Solution, Trace.

The interchange format of flashinfer-bench 0.1.2 (``flashinfer_bench.data``), written as frozen
dataclasses so the runner needs no pydantic on the GPU image. ``to_json()`` emits exactly the
fields that flashinfer-bench's own models accept (tests validate it with them); ``from_json()``
reads what they write. Validation mirrors theirs, with messages that say what to fix.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .launch import Launch, LaunchError

DTYPES = (
    "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",
    "int64", "int32", "int16", "int8", "bool",
)
# What else a kernel of a real repository returns (kernelpro's extension of FlashInfer-Trace's
# dtypes: a definition that uses one is not one flashinfer-bench reads).
EXTRA_DTYPES = ("float64", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu", "uint8")
LANGUAGES = ("python", "triton", "cpp", "cuda", "tilelang")
STATUSES = (
    "PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE",
    "RUNTIME_ERROR", "COMPILE_ERROR", "TIMEOUT",
)


class FormatError(ValueError):
    """A record does not follow the FlashInfer-Trace schema; the message names the field."""


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise FormatError(msg)


def _str_tuple(value: Any, where: str) -> tuple[str, ...]:
    _need(value is None or (isinstance(value, list) and all(isinstance(v, str) and v for v in value)),
          f"{where} must be a list of non-empty strings")
    return tuple(value or ())


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


# --------------------------------------------------------------------------- Definition


@dataclass(frozen=True)
class Axis:
    """One symbolic dimension of a Definition."""

    type: str
    """"const" (fixed value) or "var" (bound from the inputs at run time)."""
    value: int | None = None
    """The size of a const axis; None for var axes."""
    description: str | None = None
    """Free text."""

    def to_json(self) -> dict[str, Any]:
        return _drop_none({"type": self.type, "value": self.value, "description": self.description})

    @staticmethod
    def from_json(d: Mapping[str, Any], where: str) -> Axis:
        _need(isinstance(d, Mapping), f"{where}: expected a mapping with 'type'")
        kind = d.get("type")
        _need(kind in ("const", "var"), f"{where}.type must be 'const' or 'var', not {kind!r}")
        value = d.get("value")
        if kind == "const":
            _need(
                isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                f"{where}: a const axis needs a non-negative integer 'value'",
            )
        return Axis(type=str(kind), value=value if kind == "const" else None, description=d.get("description"))


@dataclass(frozen=True)
class TensorSpec:
    """A named input or output of a Definition."""

    shape: tuple[str, ...] | None
    """Axis names, outermost first; None for a scalar."""
    dtype: str
    """One of DTYPES."""
    description: str | None = None
    """Free text."""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"shape": list(self.shape) if self.shape is not None else None}
        d["dtype"] = self.dtype
        if self.description is not None:
            d["description"] = self.description
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any], where: str) -> TensorSpec:
        _need(isinstance(d, Mapping), f"{where}: expected a mapping with 'shape' and 'dtype'")
        _need("shape" in d, f"{where}: 'shape' is required (a list of axis names, or null for a scalar)")
        shape = d["shape"]
        _need(
            shape is None or (isinstance(shape, list) and all(isinstance(s, str) and s for s in shape)),
            f"{where}.shape must be a list of axis names or null",
        )
        dtype = d.get("dtype")
        _need(dtype in DTYPES + EXTRA_DTYPES, f"{where}.dtype {dtype!r} is not one of {', '.join(DTYPES + EXTRA_DTYPES)}")
        return TensorSpec(tuple(shape) if shape is not None else None, str(dtype), d.get("description"))


@dataclass(frozen=True)
class Definition:
    """What a kernel computes: axes, typed inputs/outputs and a Python reference with run()."""

    name: str
    """Unique kernel name."""
    op_type: str
    """Compute category (e.g. 'elementwise', 'rmsnorm', 'gemm')."""
    axes: Mapping[str, Axis]
    """Symbolic dimensions by name."""
    inputs: Mapping[str, TensorSpec]
    """Inputs in call order."""
    outputs: Mapping[str, TensorSpec]
    """Outputs in call order (appended after inputs in destination-passing style)."""
    reference: str
    """Python source defining run(*inputs) -> output or tuple of outputs."""
    tags: tuple[str, ...] = ()
    """Free labels."""
    description: str | None = None
    """Free text."""
    constraints: tuple[str, ...] = ()
    """Python expressions over axis names that every workload satisfies."""

    def __post_init__(self) -> None:
        _need(bool(self.name), "definition.name must not be empty")
        _need(bool(self.op_type), f"definition {self.name}: op_type must not be empty")
        try:
            mod = ast.parse(self.reference)
        except SyntaxError as e:
            raise FormatError(f"definition {self.name}: reference is not valid Python: {e}") from e
        _need(
            any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in mod.body),
            f"definition {self.name}: reference must define a top-level function 'run'",
        )
        overlap = set(self.inputs) & set(self.outputs)
        _need(not overlap, f"definition {self.name}: names used as input and output: {sorted(overlap)}")
        for tname, spec in {**self.inputs, **self.outputs}.items():
            for ax in spec.shape or ():
                _need(ax in self.axes, f"definition {self.name}: tensor {tname!r} uses undefined axis {ax!r}")
        for c in self.constraints:
            try:
                ast.parse(c, mode="eval")
            except SyntaxError as e:
                raise FormatError(f"definition {self.name}: constraint {c!r} is not an expression") from e

    @property
    def var_axes(self) -> list[str]:
        return [n for n, a in self.axes.items() if a.type == "var"]

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "op_type": self.op_type,
            "axes": {k: v.to_json() for k, v in self.axes.items()},
            "inputs": {k: v.to_json() for k, v in self.inputs.items()},
            "outputs": {k: v.to_json() for k, v in self.outputs.items()},
            "reference": self.reference,
            "tags": list(self.tags),
            "constraints": list(self.constraints),
        }
        if self.description is not None:
            d["description"] = self.description
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Definition:
        _need(isinstance(d, Mapping), "a definition must be a JSON object")
        name = d.get("name")
        _need(isinstance(name, str) and bool(name), "definition: 'name' (non-empty string) is required")
        w = f"definition {name}"
        for key in ("op_type", "axes", "inputs", "outputs", "reference"):
            _need(key in d, f"{w}: '{key}' is required")
        for key in ("axes", "inputs", "outputs"):
            _need(isinstance(d[key], Mapping), f"{w}: '{key}' must be a mapping of name -> spec")
        return Definition(
            name=str(name),
            op_type=str(d["op_type"]),
            axes={k: Axis.from_json(v, f"{w}.axes.{k}") for k, v in d["axes"].items()},
            inputs={k: TensorSpec.from_json(v, f"{w}.inputs.{k}") for k, v in d["inputs"].items()},
            outputs={k: TensorSpec.from_json(v, f"{w}.outputs.{k}") for k, v in d["outputs"].items()},
            reference=str(d["reference"]),
            tags=_str_tuple(d.get("tags"), f"{w}.tags"),
            description=d.get("description"),
            constraints=_str_tuple(d.get("constraints"), f"{w}.constraints"),
        )


# --------------------------------------------------------------------------- Workload


@dataclass(frozen=True)
class InputSpec:
    """How one input of a workload is made."""

    type: str
    """"random" (seeded random data), "scalar" (a literal) or "safetensors" (a stored tensor)."""
    value: int | float | bool | None = None
    """The literal of a scalar input."""
    path: str | None = None
    """Safetensors file, relative to the trace set root."""
    tensor_key: str | None = None
    """Key of the tensor inside that file."""

    def to_json(self) -> dict[str, Any]:
        return _drop_none(
            {"type": self.type, "value": self.value, "path": self.path, "tensor_key": self.tensor_key}
        )

    @staticmethod
    def from_json(d: Mapping[str, Any], where: str) -> InputSpec:
        _need(isinstance(d, Mapping), f"{where}: expected a mapping with 'type'")
        kind = d.get("type")
        _need(kind in ("random", "scalar", "safetensors"), f"{where}.type must be random, scalar or safetensors")
        if kind == "scalar":
            _need(isinstance(d.get("value"), (int, float, bool)), f"{where}: a scalar input needs 'value'")
        if kind == "safetensors":
            _need(bool(d.get("path")) and bool(d.get("tensor_key")), f"{where}: needs 'path' and 'tensor_key'")
        return InputSpec(str(kind), d.get("value"), d.get("path"), d.get("tensor_key"))


@dataclass(frozen=True)
class Workload:
    """Concrete axis values plus how each input is made."""

    axes: Mapping[str, int]
    """Values of the Definition's variable axes."""
    inputs: Mapping[str, InputSpec]
    """One recipe per Definition input."""
    uuid: str
    """Stable identifier."""

    def to_json(self) -> dict[str, Any]:
        return {
            "axes": dict(self.axes),
            "inputs": {k: v.to_json() for k, v in self.inputs.items()},
            "uuid": self.uuid,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Workload:
        _need(isinstance(d, Mapping), "a workload must be a JSON object")
        uuid = d.get("uuid")
        _need(isinstance(uuid, str) and bool(uuid), "workload: 'uuid' (non-empty string) is required")
        axes = d.get("axes") or {}
        _need(isinstance(axes, Mapping), f"workload {uuid}: 'axes' must be a mapping of axis name -> value")
        _need(
            all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in axes.values()),
            f"workload {uuid}: axis values must be non-negative integers",
        )
        inputs = d.get("inputs") or {}
        _need(isinstance(inputs, Mapping), f"workload {uuid}: 'inputs' must be a mapping of input name -> recipe")
        return Workload(
            axes=dict(axes),
            inputs={k: InputSpec.from_json(v, f"workload {uuid}.inputs.{k}") for k, v in inputs.items()},
            uuid=str(uuid),
        )

    @staticmethod
    def make(definition: Definition, axes: Mapping[str, int], uuid: str | None = None) -> Workload:
        """A workload with random inputs (scalars need explicit recipes)."""
        missing = set(definition.var_axes) - set(axes)
        _need(not missing, f"workload for {definition.name}: no value for axes {sorted(missing)}")
        key = uuid or hashlib.sha1(
            json.dumps([definition.name, sorted(axes.items())]).encode()
        ).hexdigest()[:16]
        return Workload(
            axes={k: int(v) for k, v in axes.items()},
            inputs={n: InputSpec("random") for n in definition.inputs},
            uuid=key,
        )


# --------------------------------------------------------------------------- Solution


@dataclass(frozen=True)
class SourceFile:
    """One file of a Solution."""

    path: str
    """Relative POSIX path; no '..' and not absolute."""
    content: str
    """Full text."""

    def __post_init__(self) -> None:
        p = PurePosixPath(self.path)
        _need(bool(self.path) and not p.is_absolute() and ".." not in p.parts,
              f"source path {self.path!r} must be relative and must not contain '..'")
        # flashinfer-bench rejects empty files; an empty module is written as a comment instead.
        _need(bool(self.content), f"source {self.path!r} is empty (write at least a comment)")


@dataclass(frozen=True)
class BuildSpec:
    """How to build and call a Solution."""

    language: str
    """One of LANGUAGES."""
    target_hardware: tuple[str, ...]
    """E.g. ('cuda',) or ('cpu', 'cuda'); informative."""
    entry_point: str
    """'file.py::function'."""
    dependencies: tuple[str, ...] = ()
    """Libraries the solution needs."""
    destination_passing_style: bool = True
    """True: outputs are passed as trailing arguments; False: the function returns them."""
    binding: str | None = None
    """'tvm-ffi' or 'torch' for C++/CUDA; None otherwise."""
    launch: Launch | None = None
    """How to launch a raw CUDA kernel (kernelpro's extension, from the target's `launch`; written as
    spec.launch, a key flashinfer-bench ignores). None for every other language."""
    returns: tuple[int | str, ...] = ()
    """Where each output not written in place (in the definition's order) is in what the entry point
    returns: an index into the returned tuple, or a key (dict) or attribute name. Empty: the returned
    values are those outputs, in order (kernelpro's extension, like launch)."""
    in_place: tuple[tuple[str, str], ...] = ()
    """(output, input) pairs: the entry point writes that output into that input (kernelpro's extension)."""
    python_path: tuple[str, ...] = ()
    """Folders, relative to the repository root, that the repository's code is imported from (``src``
    for a src layout); empty: found from the sources' paths (kernelpro's extension)."""

    def __post_init__(self) -> None:
        _need(self.language in LANGUAGES, f"spec.language {self.language!r} is not one of {LANGUAGES}")
        _need(self.entry_point.count("::") == 1, f"spec.entry_point {self.entry_point!r} must be 'file::symbol'")
        _need(len(self.target_hardware) >= 1, "spec.target_hardware needs at least one entry")

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "language": self.language,
            "target_hardware": list(self.target_hardware),
            "entry_point": self.entry_point,
            "dependencies": list(self.dependencies),
            "destination_passing_style": self.destination_passing_style,
        }
        if self.binding is not None:
            d["binding"] = self.binding
        if self.launch is not None:
            d["launch"] = self.launch.to_json()
        if self.returns:
            d["returns"] = list(self.returns)
        if self.in_place:
            d["in_place"] = dict(self.in_place)
        if self.python_path:
            d["python_path"] = list(self.python_path)
        return d


def _launch(d: Any) -> Launch | None:
    if d is None:
        return None
    _need(isinstance(d, Mapping), "solution.spec.launch must be an object (grid, block, args, ...)")
    try:
        return Launch.from_json(d)
    except LaunchError as e:
        raise FormatError(f"solution.spec.launch: {e}") from None


@dataclass(frozen=True)
class Solution:
    """A concrete implementation of a Definition. Its content hash is the cache key."""

    name: str
    """Unique name."""
    definition: str
    """Name of the Definition it implements."""
    author: str
    """Who or what wrote it (a person, 'kernelpro-tuner', a model name)."""
    spec: BuildSpec
    """Build and call instructions."""
    sources: tuple[SourceFile, ...]
    """The files."""
    description: str | None = None
    """What this solution does differently."""

    def __post_init__(self) -> None:
        _need(len(self.sources) >= 1, f"solution {self.name}: needs at least one source file")
        paths = [s.path for s in self.sources]
        _need(len(set(paths)) == len(paths), f"solution {self.name}: duplicate source paths")
        _need(self.entry_file in paths,
              f"solution {self.name}: entry file {self.entry_file!r} is not among its sources")

    @property
    def entry_file(self) -> str:
        return self.spec.entry_point.split("::")[0]

    @property
    def entry_symbol(self) -> str:
        return self.spec.entry_point.split("::")[1]

    def source(self, path: str) -> str:
        return next(s.content for s in self.sources if s.path == path)

    def content_hash(self) -> str:
        """What changes the compiled behaviour; the name and description do not count."""
        h = hashlib.sha256()
        for part in (self.spec.language, self.spec.entry_point, str(self.spec.destination_passing_style),
                     self.spec.binding or "", *self.spec.dependencies,
                     *([json.dumps(self.spec.launch.to_json(), sort_keys=True)] if self.spec.launch else []),
                     *([json.dumps([list(self.spec.returns), list(self.spec.in_place)])]
                       if self.spec.returns or self.spec.in_place else []),
                     *([json.dumps(list(self.spec.python_path))] if self.spec.python_path else []),
                     *(p for s in sorted(self.sources, key=lambda s: s.path) for p in (s.path, s.content))):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def to_json(self) -> dict[str, Any]:
        return _drop_none({
            "name": self.name,
            "definition": self.definition,
            "author": self.author,
            "spec": self.spec.to_json(),
            "sources": [{"path": s.path, "content": s.content} for s in self.sources],
            "description": self.description,
        })

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Solution:
        _need(isinstance(d, Mapping), "a solution must be a JSON object")
        for key in ("name", "definition", "author", "spec", "sources"):
            _need(key in d, f"solution: '{key}' is required")
        s = d["spec"]
        _need(isinstance(s, Mapping), "solution.spec must be an object")
        for key in ("language", "entry_point"):
            _need(key in s, f"solution.spec: '{key}' is required")
        spec = BuildSpec(
            language=s["language"],
            target_hardware=tuple(s.get("target_hardware") or ("cuda",)),
            entry_point=s["entry_point"],
            dependencies=tuple(s.get("dependencies") or ()),
            destination_passing_style=bool(s.get("destination_passing_style", True)),
            binding=s.get("binding"),
            launch=_launch(s.get("launch")),
            returns=tuple(s.get("returns") or ()),
            in_place=tuple((str(o), str(i)) for o, i in dict(s.get("in_place") or {}).items()),
            python_path=tuple(str(x) for x in s.get("python_path") or ()),
        )
        sources = d["sources"]
        _need(isinstance(sources, list) and all(isinstance(f, Mapping) and isinstance(f.get("path"), str)
                                                and isinstance(f.get("content"), str) for f in sources),
              "solution.sources must be a list of {path, content} objects")
        return Solution(
            name=d["name"],
            definition=d["definition"],
            author=d["author"],
            spec=spec,
            sources=tuple(SourceFile(f["path"], f["content"]) for f in sources),
            description=d.get("description"),
        )


# --------------------------------------------------------------------------- Trace


def _finite_or_str(x: float) -> float | str:
    # flashinfer-bench serialises inf/nan as strings (ser_json_inf_nan="strings").
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return _finite_or_str(value)
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


@dataclass(frozen=True)
class Correctness:
    """How close the outputs came to the reference."""

    max_relative_error: float = 0.0
    """Largest elementwise relative error."""
    max_absolute_error: float = 0.0
    """Largest elementwise absolute error."""
    extra: Mapping[str, Any] | None = None
    """More evidence: trials, seeds, tolerances, relative L2, ..."""

    def to_json(self) -> dict[str, Any]:
        return _drop_none({
            "max_relative_error": _finite_or_str(self.max_relative_error),
            "max_absolute_error": _finite_or_str(self.max_absolute_error),
            "extra": _json_safe(self.extra) if self.extra is not None else None,
        })


@dataclass(frozen=True)
class Performance:
    """Timing of the solution and of the reference."""

    latency_ms: float = 0.0
    """Median latency of the solution."""
    reference_latency_ms: float = 0.0
    """Median latency of the Definition's reference."""
    speedup_factor: float = 0.0
    """reference_latency_ms / latency_ms."""

    def to_json(self) -> dict[str, Any]:
        return {"latency_ms": self.latency_ms, "reference_latency_ms": self.reference_latency_ms,
                "speedup_factor": self.speedup_factor}


@dataclass(frozen=True)
class Environment:
    """Where an evaluation ran."""

    hardware: str
    """E.g. 'NVIDIA_H200' or 'cpu (triton interpreter)'."""
    libs: Mapping[str, str] = field(default_factory=dict)
    """Library versions."""

    def to_json(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "libs": dict(self.libs)}


@dataclass(frozen=True)
class Evaluation:
    """The outcome of one solution on one workload."""

    status: str
    """One of STATUSES."""
    environment: Environment
    """Where it ran."""
    timestamp: str
    """ISO 8601."""
    log: str = ""
    """Error text or notes."""
    correctness: Correctness | None = None
    """Present for PASSED and INCORRECT_NUMERICAL."""
    performance: Performance | None = None
    """Present for PASSED only."""

    def __post_init__(self) -> None:
        _need(self.status in STATUSES, f"evaluation status {self.status!r} is not one of {STATUSES}")
        # Same invariants as flashinfer-bench's validator, so every trace we write loads there.
        if self.status == "PASSED":
            _need(self.correctness is not None and self.performance is not None,
                  "a PASSED evaluation carries correctness and performance")
        elif self.status == "INCORRECT_NUMERICAL":
            _need(self.correctness is not None and self.performance is None,
                  "an INCORRECT_NUMERICAL evaluation carries correctness and no performance")
        else:
            _need(self.correctness is None and self.performance is None,
                  f"a {self.status} evaluation carries neither correctness nor performance")

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "status": self.status,
            "environment": self.environment.to_json(),
            "timestamp": self.timestamp,
            "log": self.log,
        }
        if self.correctness is not None:
            d["correctness"] = self.correctness.to_json()
        if self.performance is not None:
            d["performance"] = self.performance.to_json()
        return d


@dataclass(frozen=True)
class Trace:
    """One solution on one workload, with its evaluation."""

    definition: str
    """Definition name."""
    workload: Workload
    """The workload evaluated."""
    solution: str | None = None
    """Solution name; None for a workload-only trace."""
    evaluation: Evaluation | None = None
    """The result; None for a workload-only trace."""

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"definition": self.definition, "workload": self.workload.to_json()}
        if self.solution is not None:
            d["solution"] = self.solution
        if self.evaluation is not None:
            d["evaluation"] = self.evaluation.to_json()
        return d


# --------------------------------------------------------------------------- files


def load_json(path: str | Path) -> Any:
    p = Path(path)
    try:
        return json.loads(p.read_text())
    except FileNotFoundError:
        raise FormatError(f"{p}: file not found") from None
    except json.JSONDecodeError as e:
        raise FormatError(f"{p}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None


def load_definition(path: str | Path) -> Definition:
    try:
        return Definition.from_json(load_json(path))
    except FormatError as e:
        raise FormatError(f"{path}: {e}") from None


def load_solution(path: str | Path) -> Solution:
    try:
        return Solution.from_json(load_json(path))
    except FormatError as e:
        raise FormatError(f"{path}: {e}") from None


def load_workloads(path: str | Path) -> list[Workload]:
    """A JSONL file of workloads, or of workload traces ({definition, workload})."""
    out = []
    p = Path(path)
    try:
        lines = p.read_text().splitlines()
    except FileNotFoundError:
        raise FormatError(f"{p}: file not found") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            out.append(Workload.from_json(d.get("workload", d)))
        except (json.JSONDecodeError, FormatError, KeyError, TypeError, AttributeError) as e:
            raise FormatError(f"{p}:{i}: not a workload ({e})") from None
    return out


def dump_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"


def append_jsonl(path: str | Path, records: Iterable[Mapping[str, Any]]) -> None:
    """Append and flush to disk, line by line, so a killed process loses at most one line."""
    import os

    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            # allow_nan=False: a bare NaN/Infinity is not JSON, and strict readers (jq, JS) reject it.
            f.write(json.dumps(_json_safe(r), separators=(",", ":"), allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
