"""Launch: how a raw ``extern "C" __global__`` CUDA kernel is called, as a target describes it.

A CUDA target has no Python wrapper: its ``.kernelpro.yml`` entry names the kernel symbol and
gives the grid, the block, the dynamic shared memory and the kernel's parameter list. Sizes are
integer expressions over the definition's axis names and the integer constants the kernel source
defines (``#define BLOCK_SIZE 256``, ``constexpr int VEC = 4;``), so a tuner move that edits the
source moves the launch with it. Parameters are written as in the kernel's signature:

    args: ["const float* a", "const float* b", "float* out", "long long n = M * N"]

A name that is a definition input or output is passed as that tensor's device pointer (or, for a
scalar input, by value); an axis name is passed by value; anything else needs ``= expression``.

This module is pure: it parses, validates, evaluates and packs, and never touches a GPU (the
driver calls are in runner/driver.py), so all of it is tested on the CPU.
"""

from __future__ import annotations

import ast
import ctypes
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "FUNCTIONS",
    "KernelArg",
    "Launch",
    "LaunchError",
    "Problem",
    "evaluate",
    "expression_names",
    "pack",
    "parse_arg",
    "parse_launch",
    "source_constants",
]

# Scalar C types a kernel parameter may have -> the ctypes type that has its exact layout.
SCALAR_TYPES: Mapping[str, type[ctypes._SimpleCData[Any]]] = {
    "int": ctypes.c_int32, "int32_t": ctypes.c_int32, "signed int": ctypes.c_int32,
    "unsigned": ctypes.c_uint32, "unsigned int": ctypes.c_uint32, "uint32_t": ctypes.c_uint32,
    "long": ctypes.c_int64, "long long": ctypes.c_int64, "int64_t": ctypes.c_int64,
    "long int": ctypes.c_int64, "long long int": ctypes.c_int64, "ptrdiff_t": ctypes.c_int64,
    "unsigned long": ctypes.c_uint64, "unsigned long long": ctypes.c_uint64, "uint64_t": ctypes.c_uint64,
    "size_t": ctypes.c_uint64,
    "short": ctypes.c_int16, "int16_t": ctypes.c_int16, "unsigned short": ctypes.c_uint16,
    "uint16_t": ctypes.c_uint16, "char": ctypes.c_int8, "int8_t": ctypes.c_int8,
    "signed char": ctypes.c_int8, "unsigned char": ctypes.c_uint8, "uint8_t": ctypes.c_uint8,
    "bool": ctypes.c_bool, "float": ctypes.c_float, "double": ctypes.c_double,
}
_INTEGER_TYPES = {k for k, v in SCALAR_TYPES.items() if v not in (ctypes.c_float, ctypes.c_double, ctypes.c_bool)}
# Element types a pointer to a tensor of each dtype may be declared with (vector types included:
# a kernel that reads float4 through a float32 tensor is the usual way to get 128-bit loads).
# `void` fits every dtype.
POINTEE: Mapping[str, tuple[str, ...]] = {
    "float32": ("float", "float2", "float4"),
    "float16": ("half", "__half", "half2", "__half2"),
    "bfloat16": ("__nv_bfloat16", "nv_bfloat16", "__nv_bfloat162", "nv_bfloat162"),
    "float8_e4m3fn": ("__nv_fp8_e4m3", "uint8_t", "unsigned char", "char"),
    "float8_e5m2": ("__nv_fp8_e5m2", "uint8_t", "unsigned char", "char"),
    "float8_e4m3fnuz": ("uint8_t", "unsigned char", "char"),
    "float8_e5m2fnuz": ("uint8_t", "unsigned char", "char"),
    "float8_e8m0fnu": ("__nv_fp8_e8m0", "uint8_t", "unsigned char", "char"),
    "float64": ("double", "double2"),
    "uint8": ("uint8_t", "unsigned char", "uchar4"),
    "int64": ("long long", "int64_t", "long", "longlong2"),
    "int32": ("int", "int32_t", "int2", "int4"),
    "int16": ("short", "int16_t"),
    "int8": ("int8_t", "signed char", "char"),
    "bool": ("bool", "uint8_t", "unsigned char"),
}
# Scalar inputs of a definition are passed by value; these C types hold each dtype.
SCALAR_FOR_DTYPE: Mapping[str, tuple[str, ...]] = {
    "float32": ("float", "double"), "float16": ("float",), "bfloat16": ("float",), "float64": ("double",),
    "uint8": ("uint8_t", "unsigned char", "int"),
    "int64": ("long long", "int64_t", "long", "int", "int32_t"), "int32": ("int", "int32_t"),
    "int16": ("short", "int", "int16_t"), "int8": ("int8_t", "int", "char"), "bool": ("bool", "int"),
}


def _cdiv(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("cdiv by zero")
    return -(-a // b)


FUNCTIONS: Mapping[str, Any] = {"cdiv": _cdiv, "min": min, "max": max}
_QUALIFIERS = re.compile(r"\b(__restrict__|__restrict|restrict|volatile)\b")
_DECL = re.compile(r"^(?P<type>.*?[\w*&\s])\s*\b(?P<name>[A-Za-z_]\w*)\s*(?:=\s*(?P<value>.+))?$", re.S)
_CONSTANT = re.compile(
    r"^[ \t]*(?:#[ \t]*define[ \t]+(?P<macro>[A-Za-z_]\w*)[ \t]+\(?[ \t]*(?P<mval>[0-9]+)[uUlL]*[ \t]*\)?"
    r"|(?:static[ \t]+)?(?:constexpr|const)[ \t]+(?:unsigned[ \t]+|signed[ \t]+)?(?:int|long|long long|size_t|"
    r"int32_t|int64_t|uint32_t|uint64_t|short)[ \t]+(?P<cname>[A-Za-z_]\w*)[ \t]*=[ \t]*(?P<cval>[0-9]+)[uUlL]*[ \t]*;)"
    r"[ \t]*(?://.*|/\*.*\*/)?[ \t]*$",
    re.M,
)


class LaunchError(ValueError):
    """A launch description or one of its values is invalid; the message says what and how to fix it."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a launch description, located for the config's error message."""

    where: tuple[str | int, ...]
    """Path below the target's `launch` key, e.g. ('args', 2)."""
    what: str
    """What is wrong."""
    fix: str
    """How to fix it."""


@dataclass(frozen=True)
class KernelArg:
    """One kernel parameter and where its value comes from."""

    name: str
    """The parameter name (a definition tensor, an axis, or a free name with a value)."""
    ctype: str
    """Normalized C type: 'const float*', 'long long', ..."""
    source: str
    """'tensor' (a definition input/output: its device pointer), 'scalar' (a scalar input, by value),
    'axis' (an axis value) or 'value' (the expression in `value`)."""
    value: str | None = None
    """Integer expression over axes and source constants, when source is 'value'."""

    @property
    def pointer(self) -> bool:
        return self.ctype.endswith("*")

    def declaration(self) -> str:
        return f"{self.ctype} {self.name}" + (f" = {self.value}" if self.value is not None else "")


@dataclass(frozen=True)
class Launch:
    """Everything needed to call one raw kernel from the harness's positional arguments."""

    kernel: str
    """The extern "C" symbol."""
    grid: tuple[str, ...]
    """1 to 3 integer expressions (x, y, z)."""
    block: tuple[str, ...]
    """1 to 3 integer expressions (x, y, z)."""
    shared_mem: str
    """Dynamic shared memory in bytes, an integer expression."""
    args: tuple[KernelArg, ...]
    """Kernel parameters in signature order."""
    inputs: tuple[str, ...]
    """The definition's inputs, in call order: the callable's first positional arguments."""
    outputs: tuple[str, ...]
    """The definition's outputs, passed after the inputs (destination-passing style)."""
    shapes: Mapping[str, tuple[str, ...] | None]
    """Tensor name -> axis names of its shape (None for a scalar input), to read axes off the tensors."""
    dtypes: Mapping[str, str]
    """Tensor name -> dtype, to check pointer element types."""
    constants: Mapping[str, int]
    """The definition's const axes."""

    @property
    def call(self) -> tuple[str, ...]:
        return (*self.inputs, *self.outputs)

    def __hash__(self) -> int:  # the mappings are not hashable; a Solution holding this must be
        return hash(json.dumps(self.to_json(), sort_keys=True))

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "grid": list(self.grid), "block": list(self.block),
                "shared_mem": self.shared_mem, "args": [a.declaration() for a in self.args],
                "inputs": list(self.inputs), "outputs": list(self.outputs),
                "shapes": {k: None if v is None else list(v) for k, v in self.shapes.items()},
                "dtypes": dict(self.dtypes), "constants": dict(self.constants)}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Launch:
        """Read back what to_json wrote (a solution file may be hand-edited: everything is re-checked)."""
        try:
            inputs = [str(x) for x in d["inputs"]]
            outputs = [str(x) for x in d["outputs"]]
            shapes = {str(k): None if v is None else tuple(str(a) for a in v) for k, v in d["shapes"].items()}
            dtypes = {str(k): str(v) for k, v in d["dtypes"].items()}
            constants = {str(k): int(v) for k, v in d.get("constants", {}).items()}
            raw = {"grid": d["grid"], "block": d["block"], "shared_mem": d.get("shared_mem", 0), "args": d["args"]}
            kernel = str(d["kernel"])
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise LaunchError(f"spec.launch is malformed ({e!r}); regenerate the solution from .kernelpro.yml") from None
        launch, problems = parse_launch(raw, kernel, inputs, outputs, shapes, dtypes, constants)
        if launch is None:
            raise LaunchError("; ".join(f"launch.{'.'.join(map(str, p.where))}: {p.what}" for p in problems))
        return launch

    def axis_values(self, values: Sequence[Any]) -> dict[str, int]:
        """Axis values read off the tensors the harness passes (positional, in `call` order)."""
        if len(values) != len(self.call):
            raise LaunchError(f"{self.kernel}: called with {len(values)} arguments, expected {len(self.call)} "
                              f"({', '.join(self.call)})")
        axes = dict(self.constants)
        for name, v in zip(self.call, values, strict=True):
            dims = self.shapes.get(name)
            if dims is None:  # a scalar input
                continue
            shape = tuple(getattr(v, "shape", ()))
            if len(shape) != len(dims):
                raise LaunchError(f"{self.kernel}: {name} has shape {list(shape)}, expected axes {list(dims)}")
            for ax, size in zip(dims, shape, strict=True):
                if axes.setdefault(ax, int(size)) != int(size):
                    raise LaunchError(f"{self.kernel}: axis {ax} is {axes[ax]} elsewhere but {size} in {name}")
        return axes

    def geometry(self, names: Mapping[str, int]) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """(grid xyz, block xyz, dynamic shared bytes) for these axis and constant values."""

        def dims(exprs: tuple[str, ...], what: str) -> tuple[int, int, int]:
            out = [evaluate(e, names) for e in exprs] + [1] * (3 - len(exprs))
            if any(x < 0 for x in out):
                raise LaunchError(f"{what} {out} has a negative size")
            return out[0], out[1], out[2]

        smem = evaluate(self.shared_mem, names)
        if smem < 0:
            raise LaunchError(f"shared_mem = {smem} bytes is negative")
        return dims(self.grid, "grid"), dims(self.block, "block"), smem

    def names(self) -> set[str]:
        """Every non-axis name the expressions use: constants the kernel source must define."""
        exprs = [*self.grid, *self.block, self.shared_mem, *(a.value for a in self.args if a.value is not None)]
        known = set(self.constants) | {a for dims in self.shapes.values() if dims for a in dims}
        return {n for e in exprs for n in expression_names(e)} - known


# --------------------------------------------------------------------------- expressions


def _check_expression(text: str) -> ast.Expression:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise LaunchError(f"{text!r} is not an expression ({e.msg})") from None
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call,
               ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.USub, ast.UAdd)
    for node in ast.walk(tree):
        if isinstance(node, ast.Div):
            raise LaunchError(f"{text!r} divides with '/'; sizes are integers: use // to round down or cdiv(a, b) to round up")
        if not isinstance(node, allowed) or (isinstance(node, ast.Constant) and
                                             (isinstance(node.value, bool) or not isinstance(node.value, int))):
            raise LaunchError(f"{text!r} may only use integers, names, + - * // % and {', '.join(FUNCTIONS)}")
        if isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS
                                               and not node.keywords):
            raise LaunchError(f"{text!r} calls something other than {', '.join(FUNCTIONS)}")
    return tree


def expression_names(text: str) -> set[str]:
    """Names an expression reads (functions excluded). Raises LaunchError when it is not a valid one."""
    tree = _check_expression(text)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(FUNCTIONS)


def evaluate(text: str, names: Mapping[str, int]) -> int:
    """Integer value of a launch expression; raises LaunchError naming what is missing or wrong."""
    tree = _check_expression(text)

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            assert isinstance(node.value, int)  # _check_expression admits integer literals only
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise LaunchError(f"{text!r} uses {node.id!r}, which is neither an axis nor an integer constant "
                                  f"of the kernel source (known: {', '.join(sorted(names)) or 'none'})")
            return int(names[node.id])
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return a + b
            if isinstance(node.op, ast.Sub):
                return a - b
            if isinstance(node.op, ast.Mult):
                return a * b
            if b == 0:
                raise LaunchError(f"{text!r} divides by zero")
            return a // b if isinstance(node.op, ast.FloorDiv) else a % b
        assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        try:
            return int(FUNCTIONS[node.func.id](*(ev(x) for x in node.args)))
        except (TypeError, ZeroDivisionError) as e:
            raise LaunchError(f"{text!r}: {node.func.id}(...) {e}") from None

    return ev(tree)


def source_constants(sources: Mapping[str, str]) -> dict[str, int]:
    """Integer constants defined at the start of a line in the sources: ``#define NAME 128`` and
    ``constexpr int NAME = 128;``. A name defined twice with different values is left out, since
    the launch could not know which one the kernel sees."""
    found: dict[str, set[int]] = {}
    for text in sources.values():
        for m in _CONSTANT.finditer(text):
            name, value = (m["macro"], m["mval"]) if m["macro"] else (m["cname"], m["cval"])
            found.setdefault(name, set()).add(int(value))
    return {k: next(iter(v)) for k, v in found.items() if len(v) == 1}


# --------------------------------------------------------------------------- arguments


def _normalize_type(text: str) -> str:
    t = _QUALIFIERS.sub(" ", text)
    t = re.sub(r"\*\s*const\b", "*", t)  # `float* const p`: the pointer itself is const; same ABI
    t = re.sub(r"\s*\*\s*", "*", t)
    t = re.sub(r"\s+", " ", t).strip()
    return t.replace("*", "*").replace(" *", "*")


def parse_arg(text: str, tensors: Mapping[str, tuple[str, bool]], axes: Sequence[str]) -> KernelArg:
    """One parameter declaration. ``tensors``: name -> (dtype, is_output); scalar inputs have
    dtype prefixed with 'scalar:'. Raises LaunchError with the fix in the message."""
    m = _DECL.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise LaunchError(f"{text!r} is not a parameter declaration like 'const float* x' or 'int n = M * N'")
    ctype, name, value = _normalize_type(m["type"]), m["name"], m["value"]
    base = ctype.removeprefix("const ").strip()
    pointer = base.endswith("*")
    if pointer:
        pointee = base[:-1].strip()
        if pointee.endswith("*"):
            raise LaunchError(f"{text!r}: pointers to pointers cannot be passed from a tensor")
    elif base not in SCALAR_TYPES and not (name in tensors and not tensors[name][0].startswith("scalar:")):
        raise LaunchError(f"{text!r}: unknown C type {base!r}; use a pointer for tensors or one of "
                          f"{', '.join(sorted(SCALAR_TYPES))}")
    if value is not None:
        if name in tensors or name in axes:
            raise LaunchError(f"{text!r}: {name} is a definition {'tensor' if name in tensors else 'axis'}, "
                              "its value comes from there; drop '= ...' or rename the parameter")
        if pointer or base not in _INTEGER_TYPES:
            raise LaunchError(f"{text!r}: a computed value must have an integer type such as int or long long")
        expression_names(value)
        return KernelArg(name, ctype, "value", value.strip())
    if name in tensors:
        dtype, is_output = tensors[name]
        if dtype.startswith("scalar:"):
            dtype = dtype.removeprefix("scalar:")
            if pointer or base not in SCALAR_FOR_DTYPE.get(dtype, ()):
                ok = " or ".join(SCALAR_FOR_DTYPE.get(dtype, ("float",)))
                raise LaunchError(f"{text!r}: {name} is a scalar {dtype} input passed by value; declare it {ok}")
            return KernelArg(name, ctype, "scalar")
        if not pointer:
            raise LaunchError(f"{text!r}: {name} is a {dtype} tensor; declare it as a pointer, e.g. "
                              f"'{'' if is_output else 'const '}{POINTEE.get(dtype, ('void',))[0]}* {name}'")
        pointee = base[:-1].strip()
        if pointee != "void" and pointee not in POINTEE.get(dtype, ()):
            raise LaunchError(f"{text!r}: {name} holds {dtype}, but the pointer is to {pointee}; use "
                              f"{' or '.join(POINTEE.get(dtype, ('void',)))} (or void)")
        if is_output and ctype.startswith("const "):
            raise LaunchError(f"{text!r}: {name} is an output; the kernel writes it, so it cannot be const")
        return KernelArg(name, ctype, "tensor")
    if name in axes:
        if pointer or base not in _INTEGER_TYPES:
            raise LaunchError(f"{text!r}: axis {name} is passed by value; give it an integer type such as int")
        return KernelArg(name, ctype, "axis")
    known = ", ".join([*tensors, *axes])
    raise LaunchError(f"{text!r}: {name} is neither a tensor nor an axis of the definition ({known}); name one "
                      f"of them, or give it a value: '{ctype} {name} = M * N'")


def parse_launch(raw: Any, kernel: str, inputs: Sequence[str], outputs: Sequence[str],
                 shapes: Mapping[str, tuple[str, ...] | None], dtypes: Mapping[str, str],
                 constants: Mapping[str, int]) -> tuple[Launch | None, list[Problem]]:
    """Validate a target's `launch` mapping against its definition; every problem is collected.

    ``shapes`` maps each input and output to its axis names (None for a scalar input), ``dtypes``
    to its dtype."""
    problems: list[Problem] = []
    if not isinstance(raw, Mapping):
        return None, [Problem((), f"expected a mapping, got {raw!r}",
                              'write launch: {grid: ["cdiv(M * N, BLOCK_SIZE)"], block: [BLOCK_SIZE], '
                              'args: ["const float* x", "float* y", "int n = M * N"]}')]
    allowed = ("grid", "block", "shared_mem", "args")
    for k in raw:
        if k not in allowed:
            problems.append(Problem((str(k),), f"unknown key '{k}'", f"remove it (allowed keys: {', '.join(allowed)})"))
    for k in ("grid", "block", "args"):
        if k not in raw:
            problems.append(Problem((), f"'{k}' is required", {
                "grid": 'add grid: ["cdiv(M * N, BLOCK_SIZE)"] (1 to 3 expressions: x, y, z)',
                "block": "add block: [BLOCK_SIZE] (1 to 3 expressions: x, y, z)",
                "args": 'add args: the kernel parameters in order, e.g. ["const float* x", "float* y", "int n = M * N"]',
            }[k]))

    def dims(key: str) -> tuple[str, ...]:
        v = raw.get(key)
        items = v if isinstance(v, list) else [v]
        if not 1 <= len(items) <= 3:
            problems.append(Problem((key,), f"expected 1 to 3 sizes (x, y, z), got {len(items)}",
                                    f"write {key}: [x] or [x, y] or [x, y, z]"))
            return ()
        out = []
        for i, item in enumerate(items):
            where = (key, i) if isinstance(v, list) else (key,)
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                problems.append(Problem(where, f"expected an integer expression, got {item!r}", 'write e.g. "cdiv(M, 128)"'))
                continue
            try:
                expression_names(str(item))
                out.append(str(item).strip())
            except LaunchError as e:
                problems.append(Problem(where, str(e), 'write an integer expression, e.g. "cdiv(M * N, BLOCK_SIZE)"'))
        return tuple(out)

    grid = dims("grid") if "grid" in raw else ()
    block = dims("block") if "block" in raw else ()
    smem = raw.get("shared_mem", 0)
    smem_text = "0"
    if isinstance(smem, bool) or not isinstance(smem, (int, str)):
        problems.append(Problem(("shared_mem",), f"expected bytes as an integer expression, got {smem!r}",
                                'write e.g. shared_mem: "BLOCK_SIZE * 4"'))
    else:
        try:
            expression_names(str(smem))
            smem_text = str(smem).strip()
        except LaunchError as e:
            problems.append(Problem(("shared_mem",), str(e), 'write e.g. shared_mem: "BLOCK_SIZE * 4"'))
    tensors: dict[str, tuple[str, bool]] = {}
    for n in (*inputs, *outputs):
        dtype = dtypes[n]
        tensors[n] = (f"scalar:{dtype}" if shapes.get(n) is None else dtype, n in outputs)
    axes = list(dict.fromkeys([*constants, *(a for s in shapes.values() if s for a in s)]))
    args: list[KernelArg] = []
    raw_args = raw.get("args", [])
    if not isinstance(raw_args, list) or ("args" in raw and not raw_args):
        problems.append(Problem(("args",), "expected a non-empty list of parameter declarations",
                                'write args: ["const float* x", "float* y", "int n = M * N"]'))
        raw_args = []
    seen: set[str] = set()
    for i, text in enumerate(raw_args):
        try:
            arg = parse_arg(text, tensors, axes)
        except LaunchError as e:
            problems.append(Problem(("args", i), str(e), "declare it as in the kernel's signature"))
            continue
        if arg.name in seen:
            problems.append(Problem(("args", i), f"parameter {arg.name} appears twice", "list each parameter once"))
        seen.add(arg.name)
        args.append(arg)
    if raw_args and not problems:
        missing = [n for n in outputs if n not in seen]
        if missing:
            problems.append(Problem(("args",), f"outputs {', '.join(missing)} are not passed to the kernel, so it "
                                    "cannot write them", f"add e.g. 'float* {missing[0]}' where the kernel takes it"))
    if problems:
        return None, problems
    return Launch(kernel, grid, block, smem_text, tuple(args), tuple(inputs), tuple(outputs),
                  {n: None if s is None else tuple(s) for n, s in shapes.items()}, dict(dtypes), dict(constants)), []


# --------------------------------------------------------------------------- packing


def _tensor_pointer(name: str, value: Any) -> int:
    try:
        contiguous, device, ptr = value.is_contiguous(), value.device, value.data_ptr()
    except AttributeError:
        raise LaunchError(f"{name}: expected a tensor, got {type(value).__name__}") from None
    if not contiguous:
        raise LaunchError(f"{name}: the kernel takes a raw pointer, so the tensor must be contiguous")
    if device.type != "cuda":
        raise LaunchError(f"{name}: the tensor is on {device}; CUDA kernels need tensors on the GPU")
    return int(ptr)


def pack(args: Sequence[KernelArg], values: Mapping[str, Any], names: Mapping[str, int]
         ) -> tuple[ctypes.Array[ctypes.c_void_p], list[Any]]:
    """The ``kernelParams`` array of cuLaunchKernel: one pointer per parameter to storage of exactly
    the declared C type. Returns (array, storage); keep the storage alive until the launch returns."""
    storage: list[Any] = []
    for a in args:
        if a.source == "tensor":  # the only pointers (parse_arg makes every other kind a value)
            storage.append(ctypes.c_void_p(_tensor_pointer(a.name, values[a.name])))
            continue
        ctype = SCALAR_TYPES[a.ctype.removeprefix("const ")]
        if a.source == "scalar":
            raw = values[a.name]
        elif a.source == "axis":
            raw = names[a.name]
        elif a.name in values:  # computed once per shape by the caller
            raw = values[a.name]
        else:
            assert a.value is not None
            raw = evaluate(a.value, names)
        if ctype in (ctypes.c_float, ctypes.c_double):
            storage.append(ctype(float(raw)))
            continue
        v = int(raw)
        bits = ctypes.sizeof(ctype) * 8
        lo, hi = (0, 2**bits - 1) if ctype in (ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32, ctypes.c_uint64) \
            else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        if ctype is ctypes.c_bool:
            lo, hi = 0, 1
        if not lo <= v <= hi:
            raise LaunchError(f"{a.name} = {v} does not fit in {a.ctype}; declare it with a wider type (long long)")
        storage.append(ctype(v))
    params = (ctypes.c_void_p * max(len(storage), 1))(*[ctypes.addressof(s) for s in storage])
    return params, storage
