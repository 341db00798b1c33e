"""The child side of an evaluation: run code, save what it produced. It never judges a candidate.

Runs as ``python -m kernelpro.runner.harness REQUEST.json RESULT.json`` in a fresh process that
the parent (runner/sandbox.py) started with a scrubbed environment, no network where the OS allows
it, a memory limit and a time limit. Two kinds of child, never the same process:

- ``mode: reference`` (trusted code only): makes the seeded inputs of every trial and of the timing
  checks, runs the Definition's reference on them and saves its outputs (and, when asked, a float64
  reference) under ``ref/``. The parent loads them and deletes the files before any candidate runs.
- ``mode: evaluate`` (the candidate): builds it, runs it on the same seeded inputs (twice per trial,
  outputs poisoned differently) and saves a stream-ordered copy of what it produced under ``out/``
  (of a second run bit for bit the first, only a marker that says so), then times it. The parent
  (runner/evaluator.py) loads those tensors with ``weights_only=True`` and makes every correctness
  decision, so a candidate that overwrites this result file gains nothing.

What the candidate could still lie about is its own timing; the timing primitives are captured
before its import, checked after every call and used only through the captured references.

Request: {mode, definition, solution, workloads, device, trials, seed, timing{...}, time_reference,
          float64_reference, memory_limit_mb}
Result:  {environment, build{status, log, seconds}, phases, workloads:[{uuid, status, log, outputs,
          timing, timing_checks}]}
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import json
import math
import os
import select
import statistics
import struct
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

_STARTED = time.perf_counter()  # before torch: its import is part of the per-candidate overhead
_STARTED_WALL = time.time()  # the parent compares it with when it started the process (its launch cost)
_SAVED = [0.0]  # seconds spent copying outputs to the host and writing them for the parent


def restart_clock() -> None:
    """In a child forked from runner/forkserver.py: its start-up begins now, not at the server's."""
    global _STARTED, _STARTED_WALL
    _STARTED, _STARTED_WALL = time.perf_counter(), time.time()
    _SAVED[0] = 0.0

import torch  # noqa: E402

from . import blake3 as _blake3  # noqa: E402  (the GPU commitment's hash, watched: _PRIMITIVES)
from .driver import Kernel as _Kernel  # noqa: E402
from .tensorfile import save as _save_outputs  # noqa: E402  (bound before any candidate runs)

# Captured before any candidate code is imported: timing goes only through these references, and
# every call of the candidate is followed by a check that none of the originals was replaced.
_perf_counter = time.perf_counter
_Event = torch.cuda.Event
_record = torch.cuda.Event.record
_elapsed = torch.cuda.Event.elapsed_time
_synchronize = torch.cuda.synchronize
_current_stream = torch.cuda.current_stream
_clone_tensor = torch.Tensor.clone
_data_ptr = torch.Tensor.data_ptr
_fstat, _read, _write, _select = os.fstat, os.read, os.write, select.select
_PRIMITIVES: tuple[tuple[Any, str, Any], ...] = tuple(
    (owner, name, getattr(owner, name))
    for owner, names in (
        (time, ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns", "sleep")),
        (torch.cuda, ("Event", "synchronize", "current_stream", "Stream", "default_stream")),
        (torch.cuda.Event, ("record", "elapsed_time", "synchronize", "query", "wait")),
        (torch.cuda.Stream, ("synchronize", "wait_event", "wait_stream", "record_event")),
        (torch, ("save", "equal", "empty", "empty_like", "randn", "rand", "randint", "sum", "stack", "cat")),
        (torch.Tensor, ("clone", "copy_", "cpu", "to", "fill_", "zero_", "data_ptr", "view", "reshape", "contiguous",
                        "detach", "tolist", "numpy", "is_contiguous")),
        # The digest each timed call commits is computed by these after the call's end event: replaced,
        # they could do the call's work there, out of the timed window (a red-team candidate, session 26).
        (_blake3, ("blake3_words", "blake3_host")),
        (_blake3.Blake3, ("words", "_tree", "_launch")),
        (_Kernel, ("launch",)),
    )
    for name in names
)

_function_modes = torch._C._len_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_functional = torch._is_functional_tensor
import torch.library  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

_library_impls: set[str] = torch.library._impls  # Python registrations of kernels, torch's own included
_ATEN_IMPLS = frozenset(k for k in _library_impls if k.startswith("aten/"))
_IMPLS = [len(_library_impls)]
_TENSOR_HOOKS = {k: torch.Tensor.__dict__.get(k) for k in ("__torch_function__", "__torch_dispatch__")}
_query = torch.cuda.Event.query
_event_sync = torch.cuda.Event.synchronize
_urandom = os.urandom

_TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool,
}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
    if hasattr(torch, _name):
        _TORCH_DTYPES[_name] = getattr(torch, _name)

_TAIL = 4000  # characters of a traceback kept in a log
# Second poison for floating outputs: finite, so a candidate that skips writes "because the buffer
# already holds NaN" (or whose writes only look right against NaN) fails the second run. Where the
# dtype cannot hold it (float16's largest is 65504, float8's 448 or 57344) three quarters of its
# largest value, negated unless the dtype has no sign (float8_e8m0fnu).
_POISON_B = -7.25e4
_view = torch.Tensor.view


def _second_poison(dtype: torch.dtype) -> float:
    info = torch.finfo(dtype)
    v = min(-_POISON_B, 0.75 * info.max)
    return v if info.min > 0 else -v


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (torch.equal has no float8 kernel on the CPU: compare their bytes)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point and a.element_size() == 1:
        a, b = _view(a, torch.uint8), _view(b, torch.uint8)
    return bool(torch.equal(a, b))


class CandidateError(Exception):
    """A failure that is the candidate's fault; ``status`` says which kind."""

    def __init__(self, status: str, log: str):
        super().__init__(log)
        self.status = status
        self.log = log


def _tail(text: str) -> str:
    return text if len(text) <= _TAIL else "...\n" + text[-_TAIL:]


def _is_compile_error(exc: BaseException) -> bool:
    # Triton raises CompilationError (and subclasses) lazily at the first launch. The interpreter
    # has no compile step: what the compiler would reject (an unknown tl.* name) surfaces as an
    # InterpreterError caused by an AttributeError/NameError, so count those as compile errors too.
    if type(exc).__name__ == "InterpreterError" and isinstance(exc.__cause__, (AttributeError, NameError)):
        return True
    return any(
        c.__name__ in ("CompilationError", "CompileTimeAssertionFailure", "PTXASError")
        or c.__module__.startswith("triton.compiler")
        for c in type(exc).__mro__
    )


_GUARD: list[Any] = []  # filled at the end of this module: what _check_primitives compares against


_CHANNEL: list[Any] = [None]  # the parent's timing channel (runner/timekeeper.py), set by main()
_BOUND: list[Any] = []  # the same channel object, bound by main() before any candidate code ran


def _check_primitives(_guard: list[Any] = _GUARD, _slot: list[Any] = _CHANNEL, _bound: list[Any] = _BOUND) -> None:
    """Refuse a candidate that replaced a timing (or checking) primitive, or any of the harness's own
    names (its captured references ``_perf_counter``, ``_record``, ... rebound through sys.modules or
    a frame's globals), a function's code or defaults, or that left a torch function/dispatch mode or
    a Python override of an aten kernel in place: its times and outputs would be lies.

    The loops that time call it (and the primitives) through references bound when they were
    defined, before any candidate ran, so rebinding the module's names changes nothing they do and
    is refused here. In-process checks only raise the bar: the parent's own clock
    (runner/timekeeper.py) is what makes deeper tampering useless."""
    try:
        (own, methods, primitives, mine), = _guard
    except (TypeError, ValueError):
        raise CandidateError("RUNTIME_ERROR", "HARNESS_TAMPERED: the harness's own record of itself was "
                             "changed; a kernel must not touch the harness") from None
    if _bound and (not _slot or _slot[0] is not _bound[0]):
        raise CandidateError("RUNTIME_ERROR", "HARNESS_TAMPERED: the candidate replaced the parent's timing channel "
                             "(_CHANNEL) the harness announces its phases on; a kernel must not touch the harness")
    for owner, name, original in primitives:
        if getattr(owner, name, None) is not original:
            where = getattr(owner, "__name__", type(owner).__name__)
            raise CandidateError("RUNTIME_ERROR", f"HARNESS_TAMPERED: the candidate replaced {where}.{name}, which "
                                 "the harness times and checks with; a kernel must not touch the harness")
    for name, (obj, code, defaults) in own:
        if mine.get(name) is not obj or getattr(obj, "__code__", None) is not code or \
                getattr(obj, "__defaults__", None) is not defaults:
            raise CandidateError("RUNTIME_ERROR", f"HARNESS_TAMPERED: the candidate rebound or rewrote the harness's "
                                 f"own {name!r}; a kernel must not touch the harness")
    for (cls, name), (fn, code, defaults) in methods:
        if cls.__dict__.get(name) is not fn or getattr(fn, "__code__", None) is not code or \
                getattr(fn, "__defaults__", None) is not defaults:
            raise CandidateError("RUNTIME_ERROR", f"HARNESS_TAMPERED: the candidate rewrote the harness's own "
                                 f"{cls.__name__}.{name}; a kernel must not touch the harness")
    if _modes() or len(_library_impls) != _IMPLS[0]:
        _check_modes()


def _modes() -> int:
    return int(_function_modes()) + int(_dispatch_modes())


def _check_modes() -> None:
    if _modes() or any(torch.Tensor.__dict__.get(k) is not v for k, v in _TENSOR_HOOKS.items()):
        raise CandidateError("RUNTIME_ERROR", "LAZY_OUTPUT: the candidate left a torch function or dispatch mode "
                             "active, which would run its code inside the harness's own copies and checks")
    # A Python kernel for an aten op (torch defines new ops elsewhere: prims/, inductor's) that runs
    # real work; shape-only Meta kernels are harmless.
    new = {k for k in _library_impls if k.startswith("aten/") and not k.endswith("/Meta")} - _ATEN_IMPLS
    if new:
        raise CandidateError("RUNTIME_ERROR", f"LAZY_OUTPUT: the candidate overrides torch's own kernels "
                             f"({sorted(new)[:3]}), which the harness copies and checks with")
    _IMPLS[0] = len(_library_impls)  # its own custom ops are its business


def _plain(values: Sequence[Any]) -> None:
    """A call's results must exist when it returns: only plain tensors (no subclass, no functorch or
    functional wrapper, ordinary strided storage on the request's device) and plain numbers. A
    subclass could compute in ``__torch_function__`` when the harness copies it, after the timer;
    so could a mode or an override of torch's kernels left in place: refused before any copy."""
    if _modes() or len(_library_impls) != _IMPLS[0] or any(
            torch.Tensor.__dict__.get(k) is not v for k, v in _TENSOR_HOOKS.items()):
        _check_modes()
    for k, v in enumerate(values):
        if type(v) in (int, float, bool):
            continue
        if type(v) is not torch.Tensor:
            raise CandidateError("RUNTIME_ERROR", f"LAZY_OUTPUT: output {k} is a {type(v).__module__}."
                                 f"{type(v).__qualname__}, not a plain torch.Tensor: a call must return its "
                                 "results, not an object that computes them later")
        if v.layout != torch.strided or v.is_meta or _wrapped(v) or _functional(v):
            raise CandidateError("RUNTIME_ERROR", f"LAZY_OUTPUT: output {k} is not an ordinary tensor "
                                 f"(layout {v.layout}, device {v.device}, wrapped or functional): a call must "
                                 "return its results")


# --------------------------------------------------------------------------- build


class _TreeFinder:
    """Serves every module of the top-level names the candidate's tree defines from that tree first:
    the candidate's files, the rest of their packages at the pull request's head, then the installed
    copy (for what the repository does not hold as source: compiled parts). First on sys.meta_path,
    before site-packages and the finders of editable installs, so ``import pkg`` in a wrapper, the
    repository's own absolute imports and relative imports all reach the candidate's files."""

    def __init__(self, bases: Mapping[str, Sequence[str]]) -> None:
        self.bases = {k: tuple(v) for k, v in bases.items()}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        parts = fullname.split(".")
        bases = self.bases.get(parts[0])
        if bases is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, [os.path.join(b, *parts[:-1]) for b in bases])
        if spec is not None and spec.origin and spec.submodule_search_locations is not None:
            # A package's folders in every base, in order: pkgutil and __path__ users see them all.
            spec.submodule_search_locations = [d for d in (os.path.join(b, *parts) for b in bases) if os.path.isdir(d)]
        return spec

    def invalidate_caches(self) -> None:
        pass


def _installed_bases(name: str, tree: str) -> list[str]:
    """Where the installed copy of ``name`` lives (site-packages, a .pth entry, the folder an editable
    install's meta-path finder maps it to), as folders that hold it; the candidate's tree excluded."""
    out: list[str] = []
    for finder in sys.meta_path:
        if isinstance(finder, _TreeFinder) or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec(name, None)
        except Exception:  # noqa: BLE001 - a broken finder of the environment supplies nothing
            continue
        if spec is None:
            continue
        places = list(spec.submodule_search_locations or ()) or ([spec.origin] if spec.origin else [])
        for loc in places:
            base = os.path.dirname(os.path.abspath(loc))
            if not (base + os.sep).startswith(tree + os.sep) and base not in out:
                out.append(base)
        if spec.origin is not None:  # a regular package or module: the first one found is the one imported
            break
    return out


def _import_tree(req: Mapping[str, Any], src_root: Path) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Writes the rest of the candidate's packages, then puts the finder in place; the layout (name ->
    import roots) and warnings for names the harness cannot serve (imported before the candidate)."""
    from kernelpro.runner.layout import roots

    solution = req["solution"]
    written = {str(f["path"]) for f in solution["sources"]}
    for f in req.get("context") or ():
        if str(f["path"]) not in written:
            p = src_root / PurePosixPath(f["path"])
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f["content"])
    files = {*written, *(str(f["path"]) for f in req.get("context") or ())}
    layout = roots(sorted(written), files, solution["spec"].get("python_path") or ())
    warnings = []
    bases: dict[str, list[str]] = {}
    tree = os.path.abspath(src_root)
    for name, rs in layout.items():
        if name in _BEFORE:
            warnings.append(f"{name} was imported by the harness itself before the candidate ran; its installed copy "
                            f"({getattr(sys.modules.get(name), '__file__', None)}) is the one used")
            continue
        for k in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[k]  # preloaded by a standby child from the installed copy: imported again
        bases[name] = [os.path.join(tree, *PurePosixPath(r).parts) for r in rs] + _installed_bases(name, tree)
    sys.meta_path.insert(0, _TreeFinder(bases))
    importlib.invalidate_caches()
    return layout, warnings


def _foreign(solution: Mapping[str, Any], layout: Mapping[str, Sequence[str]], src_root: Path) -> list[str]:
    """A module the target's files define that was loaded from somewhere else (the installed copy won)."""
    from kernelpro.runner.layout import module_of

    out = []
    for f in solution["sources"]:
        name = module_of(str(f["path"]), layout)
        mod = sys.modules.get(name) if name else None
        got = getattr(mod, "__file__", None)
        if mod is None or not got:
            continue
        want = src_root / PurePosixPath(f["path"])
        if os.path.realpath(got) != os.path.realpath(want):
            out.append(f"IMPORT_MISMATCH: the entry point ran {name} from {got}, not the candidate's {f['path']}: "
                       "the installed copy of the package won, so the measurement is not of the candidate. Set "
                       "`python_path:` in .kernelpro.yml to the folder the repository's code is imported from")
    return out


def _build(solution: Mapping[str, Any], root: Path,
           _check_primitives: Callable[[], None] = _check_primitives,
           req: Mapping[str, Any] | None = None, warnings: list[str] | None = None,
           imported: list[str] | None = None) -> Callable[..., Any]:
    src_root = root / "src"
    for f in solution["sources"]:
        p = src_root / PurePosixPath(f["path"])
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f["content"])
    layout: dict[str, tuple[str, ...]] = {}
    if solution["spec"]["language"] != "cuda":
        layout, notes = _import_tree(req if req is not None else {"solution": solution}, src_root)
        if warnings is not None:
            warnings.extend(notes)
    if solution["spec"]["language"] == "cuda":  # raw kernel (cubin + driver launch) or torch extension
        from kernelpro.runner.cuda import BuildFailure, kernel_callable, shared_cache

        try:
            return kernel_callable(solution, shared_cache(root / "cubins"))
        except BuildFailure as e:
            raise CandidateError(e.status, _tail(e.log)) from None
    entry_file, symbol = solution["spec"]["entry_point"].split("::")
    sys.path.insert(0, str(src_root))
    from kernelpro.runner.layout import module_of

    # By the name the repository imports it by (``pkg.ops.x`` for src/pkg/ops/x.py): the module its
    # package's relative imports and the wrapper's imports reach is then this one, not a second copy.
    module_name = module_of(entry_file, layout) or PurePosixPath(entry_file).with_suffix("").as_posix().replace("/", ".")
    before = set(sys.modules)
    try:
        if module_of(entry_file, layout) and module_name.partition(".")[0] not in _BEFORE:
            module = importlib.import_module(module_name)
        else:
            spec = importlib.util.spec_from_file_location(module_name, src_root / entry_file)
            if spec is None or spec.loader is None:
                raise CandidateError("COMPILE_ERROR", f"cannot load {entry_file} as a Python module")
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
    except CandidateError:
        raise
    except BaseException:  # SystemExit too: a module that exits at import does not build
        raise CandidateError("COMPILE_ERROR", _tail(traceback.format_exc())) from None
    _check_primitives()
    if warnings is not None:
        warnings.extend(_foreign(solution, layout, src_root))
    if imported is not None:
        imported.extend(_new_modules(before, {*layout, module_name.partition(".")[0], "kernelpro"}))
    fn = getattr(module, symbol, None)
    if not callable(fn):
        raise CandidateError("COMPILE_ERROR", f"{entry_file} defines no callable {symbol!r}")
    return fn


def _new_modules(before: set[str], tree: set[str], most: int = 5000) -> list[str]:
    """The modules imported since ``before`` outside the top-level names ``tree``: what a target's warm
    server could have imported for this child (runner/preload.py ``more``). Liger's package calls
    ``torch.compiler.disable`` at import, which imports torch._dynamo: no import statement says so."""
    return sorted(m for m in sys.modules if m not in before and m.partition(".")[0] not in tree)[:most]


def _ownership(req: Mapping[str, Any]) -> tuple[int, frozenset[int]]:
    """The definition's number of outputs, and the positions of those the configuration says are
    written into an input (``_call``'s ``own``)."""
    written = (req["solution"]["spec"].get("in_place") or {}) if isinstance(req.get("solution"), Mapping) else {}
    names = list(req["definition"]["outputs"])
    return len(names), frozenset(k for k, name in enumerate(names) if name in written)


def _outputs_of(fn: Callable[..., Any], req: Mapping[str, Any]) -> Callable[..., Any]:
    """The entry point as a function returning exactly the definition's outputs, in order, where the
    configuration says which of its returned values they are (``returns``) or which inputs it writes
    them into (``in_place``): a repository's own forward function needs no wrapper file."""
    spec = req["solution"]["spec"]
    returns, in_place = list(spec.get("returns") or ()), dict(spec.get("in_place") or {})
    if not returns and not in_place:
        return fn
    inputs, outputs = list(req["definition"]["inputs"]), list(req["definition"]["outputs"])

    def pick(got: Any, where: int | str) -> Any:
        try:
            if isinstance(where, int):
                return _as_tuple(got)[where]
            return got[where] if isinstance(got, Mapping) else getattr(got, where)
        except (IndexError, KeyError, AttributeError, TypeError):
            kind = f"{len(got)} values" if isinstance(got, (tuple, list)) else type(got).__name__
            raise CandidateError("RUNTIME_ERROR", f"the entry point returned {kind}, which has no {where!r} "
                                 "(the configuration's `returns:` says where each output is)") from None

    def entry(*args: Any) -> tuple[Any, ...]:
        got = fn(*args)
        rest = iter(returns) if returns else iter(range(len(outputs)))
        return tuple(args[inputs.index(in_place[o])] if o in in_place else pick(got, next(rest)) for o in outputs)

    return entry


def _reference(definition: Mapping[str, Any]) -> Callable[..., Any]:
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(definition["reference"], "<reference>", "exec"), namespace)
    return namespace["run"]


# --------------------------------------------------------------------------- inputs


def _shape(definition: Mapping[str, Any], spec: Mapping[str, Any], axes: Mapping[str, int]) -> list[int]:
    out = []
    for ax in spec["shape"]:
        a = definition["axes"][ax]
        out.append(int(a["value"]) if a["type"] == "const" else int(axes[ax]))
    return out


def _make_inputs(definition: Mapping[str, Any], workload: Mapping[str, Any], seed: int, device: str) -> list[Any]:
    gen = torch.Generator(device=device).manual_seed(seed)
    values: list[Any] = []
    for name, spec in definition["inputs"].items():
        recipe = workload["inputs"].get(name, {"type": "random"})
        if recipe["type"] == "scalar":
            values.append(recipe["value"])
            continue
        if recipe["type"] != "random":
            raise ValueError(f"input {name}: recipe {recipe['type']!r} is not supported by this harness yet")
        if spec["shape"] is None:
            values.append(float(torch.randn((), generator=gen, device=device)))
            continue
        shape, dtype = _shape(definition, spec, workload["axes"]), _TORCH_DTYPES[spec["dtype"]]
        if dtype == torch.bool:
            t = torch.rand(shape, generator=gen, device=device) < 0.5
        elif dtype.is_floating_point:
            # float64 drawn as float64: values rounded to float32 would hide a kernel that computes in float32.
            wide = torch.float64 if dtype == torch.float64 else torch.float32
            t = torch.randn(shape, generator=gen, device=device, dtype=wide).to(dtype)
        else:
            low = 0 if torch.iinfo(dtype).min == 0 else -64
            t = torch.randint(low, 64, shape, generator=gen, device=device, dtype=dtype)
        values.append(t)
    return values


def trial_seed(base: int, trial: int, uuid: str) -> int:
    return (base * 1_000_003 + trial * 7919 + zlib.crc32(uuid.encode()) % 65521) % (2**31)


def _trial_inputs(definition: Mapping[str, Any], workload: Mapping[str, Any], base: int, trial: int,
                  trials: int, device: str) -> list[Any]:
    """Fresh seeded inputs per trial. The last trial (of two or more) repeats trial 0 with only the
    second half of every tensor changed: a cache keyed on part of the values returns stale output."""
    uuid = workload["uuid"]
    if trials < 2 or trial != trials - 1:
        return _make_inputs(definition, workload, trial_seed(base, trial, uuid), device)
    first = _make_inputs(definition, workload, trial_seed(base, 0, uuid), device)
    fresh = _make_inputs(definition, workload, trial_seed(base, trial, uuid), device)
    for x, f in zip(first, fresh, strict=True):
        if isinstance(x, torch.Tensor) and x.numel() >= 2:
            flat, half = x.view(-1), x.numel() // 2
            flat[half:] = f.reshape(-1)[half:]
    return first


def _clone(values: Sequence[Any]) -> list[Any]:
    return [_clone_tensor(v) if isinstance(v, torch.Tensor) else v for v in values]


def _poisoned_outputs(definition: Mapping[str, Any], axes: Mapping[str, int], device: str,
                      second: bool = False) -> list[torch.Tensor]:
    """Outputs filled with a poison in every element, so an element the candidate never writes fails:
    NaN first, a finite odd value the second time (an extreme integer, or its opposite)."""
    outs = []
    for spec in definition["outputs"].values():
        dtype = _TORCH_DTYPES[spec["dtype"]]
        shape = _shape(definition, spec, axes) if spec["shape"] is not None else []
        t = torch.empty(shape, dtype=dtype, device=device)
        if dtype.is_floating_point:
            t.fill_(_second_poison(dtype) if second else float("nan"))
        elif dtype == torch.bool:
            t.fill_(not second)
        else:
            t.fill_(torch.iinfo(dtype).max if second else torch.iinfo(dtype).min)
        outs.append(t)
    return outs


def _prime_allocator(definition: Mapping[str, Any], axes: Mapping[str, int], device: str, second: bool) -> None:
    # For candidates that allocate their own outputs: hand the caching allocator freed blocks full of
    # poison, so an output made with torch.empty and left partly unwritten shows poison, not the
    # previous call's (correct) values.
    for t in _poisoned_outputs(definition, axes, device, second):
        del t


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _call(fn: Callable[..., Any], inputs: list[Any], outputs: list[torch.Tensor], dps: bool,
          own: tuple[int, frozenset[int]] | None = None,
          _plain: Callable[[Sequence[Any]], None] = _plain, _data_ptr: Any = _data_ptr) -> tuple[Any, ...]:
    """One call; what it returns is checked to be results, not promises of them (``_plain``), and, with
    ``own`` (the verified and timed calls: the definition's number of outputs, and the positions of
    those written into inputs), each returned output new and dense (``_own``)."""
    if dps:
        where = [(_data_ptr(o), o.shape, o.stride()) for o in outputs]
        fn(*inputs, *outputs)
        if [(_data_ptr(o), o.shape, o.stride()) for o in outputs] != where:
            raise CandidateError("RUNTIME_ERROR", "LAZY_OUTPUT: the call swapped the storage of an output the "
                                 "harness gave it; it must write its results into that memory")
        _plain(outputs)
        return tuple(outputs)
    got = _as_tuple(fn(*inputs))
    _plain(got)
    if own is not None and len(got) == own[0]:  # another count is the parent's INCORRECT_SHAPE, with its hint
        _own(got, inputs, own[1])
    return got


def _own(got: Sequence[Any], inputs: Sequence[Any], in_place: frozenset[int]) -> None:
    """A returned output is a result of the call's own: not a strided view (``a.t()`` returned for a
    transpose did no work, and the copy the harness then made, after the timer, did it: 13x faster
    than the honest kernel, a red-team candidate of session 25), nor memory of an input."""
    mine = {x.untyped_storage().data_ptr() for x in inputs if isinstance(x, torch.Tensor) and x.numel()}
    for k, g in enumerate(got):
        if k in in_place or not isinstance(g, torch.Tensor) or not g.numel():
            continue
        if not g.is_contiguous():
            raise CandidateError("INCORRECT_SHAPE", json.dumps(
                {"output_index": k, "reason": "not contiguous: a strided view is not a result (the copy that "
                 "lays it out would be the work)", "stride": list(g.stride())}))
        if g.untyped_storage().data_ptr() in mine:
            raise CandidateError("RUNTIME_ERROR", f"LAZY_OUTPUT: output {k} is memory of an input, not a result "
                                 "of the call (declare it `in_place:` where the kernel writes it there)")


class _Ops(TorchDispatchMode):
    """Records the aten operators a call dispatches, its host code's and a C++ extension's alike: a
    Triton or CUDA candidate that hands the operation to PyTorch is refused by the parent
    (runner/screen.py delegated), whatever path its source took to reach torch."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # False keeps __torch_dispatch__ unwrapped: torch's dynamo guard imports torch._dynamo on its
        # first call (about 900 modules and triton, 1.8 s in every evaluation child), and triton
        # imported before the candidate sets its interpreter mode breaks the CPU interpreter.
        return False

    def __init__(self, seen: set[str], channel: Any = None) -> None:
        super().__init__()
        self.seen, self.channel = seen, channel
        self.sent: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func._schema.name)
        self.seen.add(name)
        if name not in self.sent:
            # To the parent as soon as it is seen (once per call): its copy only grows, so a candidate
            # that clears the harness's record afterwards (through a frame) hides nothing.
            self.sent.add(name)
            if self.channel is not None:
                self.channel.send({"op": name})
        return func(*args, **(kwargs or {}))


def _watched(fn: Callable[..., Any], seen: set[str], _Ops: Any = _Ops, _bound: list[Any] = _BOUND) -> Callable[..., Any]:
    """``fn`` with its dispatched operators added to ``seen`` and sent to the parent over its channel
    (bound before the candidate ran); the mode ends before the harness's own checks of the call's
    outputs (which refuse a mode left active)."""
    def call(*args: Any) -> Any:
        with _Ops(seen, _bound[0] if _bound else None):
            return fn(*args)
    return call


def _snapshot(values: Sequence[Any], _clone_tensor: Any = _clone_tensor) -> list[Any]:
    """A copy ordered on the current stream right after the call returned, before any device-wide
    synchronisation: work the candidate left running on a side stream or thread is not in it."""
    return [_clone_tensor(v.detach()) if isinstance(v, torch.Tensor) else v for v in values]


def _save(values: Sequence[Any], path: Path) -> str:
    t0 = _perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    _save_outputs(values, path)  # complete when it appears: the parent judges files while this process goes on
    _SAVED[0] += _perf_counter() - t0
    return path.name


def _mark(path: Path) -> str:
    """An empty file saying that a trial's second run returned what its first did."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path.name


def same_run(first: Sequence[Any], second: Sequence[Any]) -> bool:
    """Whether a trial's second run returned bit for bit what its first did: tensors of the same
    dtype, shape, strides and device; plain numbers of the same type and bits. Here, where anything
    else is saved and left to the parent, and in the parent on the loaded files (runner/evaluator.py),
    which then judges a second run no further."""
    if len(first) != len(second):
        return False
    for a, b in zip(first, second, strict=True):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride() or a.device != b.device:
                return False
            if a.dtype.is_floating_point and a.element_size() in _INTS:  # bits: NaN where NaN is the answer too
                a, b = _view(a, _INTS[a.element_size()]), _view(b, _INTS[b.element_size()])
            if not _same(a, b):
                return False
        elif not (type(a) is type(b) and isinstance(a, (bool, int, float)) and _scalar_bits(a) == _scalar_bits(b)):
            return False
    return True


def _sync(device: str, _synchronize: Any = _synchronize) -> None:
    if device == "cuda":
        _synchronize()


def _fail_from(exc: BaseException) -> CandidateError:
    if isinstance(exc, CandidateError):
        return exc
    status = "COMPILE_ERROR" if _is_compile_error(exc) else "RUNTIME_ERROR"
    return CandidateError(status, _tail(traceback.format_exc()))


# --------------------------------------------------------------------------- reference (trusted)


def _reference_run(req: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    """Inputs and reference outputs of every trial and timing check, saved for the parent."""
    definition, device = req["definition"], req["device"]
    ref = _reference(definition)
    trials, base = req["trials"], req["seed"]
    entries = []
    for wi, workload in enumerate(req["workloads"]):
        entry: dict[str, Any] = {"uuid": workload["uuid"], "trials": [], "checks": [], "float64": [],
                                 "checks64": []}

        def outputs(inputs: list[Any], kind: str, name: str, entry: dict[str, Any] = entry) -> None:
            entry[kind].append(_save(_as_tuple(ref(*_clone(inputs))), workdir / "ref" / f"{name}.kpt"))
            if req.get("float64_reference"):
                wide = [x.double() if isinstance(x, torch.Tensor) and x.dtype.is_floating_point else x for x in inputs]
                entry["float64" if kind == "trials" else "checks64"].append(
                    _save(_as_tuple(ref(*wide)), workdir / "ref" / f"{name}_f64.kpt"))

        with torch.no_grad():
            for t in range(trials):
                outputs(_trial_inputs(definition, workload, base, t, trials, device), "trials", f"w{wi}_t{t}")
            # The parent's secret seeds of the checked timed calls (runner/timekeeper.py): it puts them
            # at positions of its choosing among the candidate's timed calls.
            for j, seed in enumerate(req["check_seeds"][wi]):
                outputs(_make_inputs(definition, workload, int(seed), device), "checks", f"w{wi}_c{j}")
        if req.get("time_reference"):
            entry["timing"] = _time(lambda *a: _as_tuple(ref(*a)), req, workload, device, False, None)
        entries.append(entry)
    return {"workloads": entries}


# --------------------------------------------------------------------------- candidate


def _candidate_run(fn: Callable[..., Any], req: Mapping[str, Any], workload: Mapping[str, Any], wi: int,
                   workdir: Path, _check_primitives: Callable[[], None] = _check_primitives,
                   _call: Any = _call, _snapshot: Any = _snapshot, _sync: Any = _sync,
                   _same_run: Any = same_run, _mark: Any = _mark) -> dict[str, Any]:
    """Run every trial twice (NaN poison, then a finite one) and save the outputs of both (of the second
    only a marker where it is bit for bit the first); then time."""
    definition, device = req["definition"], req["device"]
    dps = req["solution"]["spec"].get("destination_passing_style", True)
    trials, base = req["trials"], req["seed"]
    own = _ownership(req)
    files: list[list[str]] = []
    ops: set[str] = set()  # what the verified calls dispatched (every trial, both runs)
    for t in range(trials):
        inputs = _trial_inputs(definition, workload, base, t, trials, device)
        runs: list[str] = []
        first: list[Any] = []
        for second in (False, True):
            mine = _clone(inputs)
            try:
                with torch.no_grad():
                    outs = _poisoned_outputs(definition, workload["axes"], device, second)
                    if not dps:
                        _prime_allocator(definition, workload["axes"], device, second)
                    got = _snapshot(_call(_watched(fn, ops), mine, outs, dps, own))
                _sync(device)
                _check_primitives()
            except BaseException as exc:  # SystemExit too; the harness must outlive the candidate
                raise _fail_from(exc) from None
            written = {i for _, i in req["solution"]["spec"].get("in_place", {}).items()}
            for name, before, after in zip(definition["inputs"], inputs, mine, strict=True):
                if isinstance(before, torch.Tensor) and name not in written and not _same(before, after):
                    raise CandidateError("INCORRECT_NUMERICAL", json.dumps(
                        {"input": name, "trial": t, "reason": "the call modified an input, which the "
                         "definition does not declare as an output"}))
            if second and _same_run(first, got):
                # Bit for bit the first run, which the parent judges in full: a marker, not a second
                # copy of the outputs to write and read (Liger's SwiGLU: 235 MB a file, issue 22).
                runs.append(_mark(workdir / "out" / f"w{wi}_t{t}_r1.same"))
            else:
                runs.append(_save(got, workdir / "out" / f"w{wi}_t{t}_r{int(second)}.kpt"))
            first = got
        files.append(runs)
    timing_checks: list[str] = []
    t0 = _perf_counter()
    # The parent knows the phase from its channel (and judges nothing meanwhile): no marker file.
    timing = _time(fn, req, workload, device, dps, (workdir / "out", wi, timing_checks))
    return {"outputs": files, "timing": timing, "timing_checks": timing_checks, "time_seconds": _perf_counter() - t0,
            "torch_ops": sorted(ops)}


# --------------------------------------------------------------------------- time


class _Channel:
    """The child's end of the parent's timing channel (runner/timekeeper.py): two pipes the parent
    created and owns. Announcements go out; seeds and check decisions come in, each only after the
    parent got what it waits for. Its pipes are checked to still be the inherited ones before use."""

    # No instance dictionary: a method set on the instance (``channel.send = proxy``) would pass the
    # class-level checks of _check_primitives (a red-team candidate, session 26).
    __slots__ = ("r", "w", "buf", "ids")

    def __init__(self, rfd: int, wfd: int) -> None:
        self.r, self.w, self.buf = rfd, wfd, b""
        self.ids = (_fstat(rfd).st_ino, _fstat(wfd).st_ino)
        os.set_blocking(rfd, False)

    def _same(self) -> None:
        try:
            ok = (_fstat(self.r).st_ino, _fstat(self.w).st_ino) == self.ids
        except OSError:
            ok = False
        if not ok:
            raise CandidateError("RUNTIME_ERROR", "HARNESS_TAMPERED: the parent's timing channel was replaced")

    def send(self, doc: Mapping[str, Any]) -> None:
        self._same()
        data = (json.dumps(doc) + "\n").encode()
        try:
            while data:
                data = data[_write(self.w, data):]
        except OSError as e:
            raise CandidateError("RUNTIME_ERROR", f"TIMING_PROTOCOL: the parent's channel is closed ({e})") from None

    def recv(self, block: bool = True) -> Any:
        while b"\n" not in self.buf:
            self._same()
            if block:
                ready, _, _ = _select([self.r], [], [], 120.0)
                if not ready:
                    raise CandidateError("RUNTIME_ERROR", "TIMING_PROTOCOL: no answer from the parent in 120 s")
            try:
                chunk = _read(self.r, 65536)
            except BlockingIOError:
                if block:
                    continue
                return None
            if not chunk:
                raise CandidateError("RUNTIME_ERROR", "TIMING_PROTOCOL: the parent closed the timing channel "
                                     "(it refused what this process announced)")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


_INTS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _scalar_bits(v: Any) -> int:
    return int(v) if isinstance(v, (bool, int)) else int.from_bytes(struct.pack("<d", float(v)), "little", signed=True)


def _wrap64(x: int) -> int:
    return (x + 2**63) % 2**64 - 2**63


def _digest(values: Sequence[Any], _sum: Any = torch.sum, _stack: Any = torch.stack
            ) -> tuple[torch.Tensor | None, list[int]]:
    """A digest of a call's outputs, enqueued in stream order: per tensor the sum of its elements'
    bit patterns (exact integer arithmetic, so the parent recomputes it on the CPU bit for bit), per
    plain number its bits. It commits the call to what it returned before it learns if it is checked."""
    tensors = [_view(v, _INTS[v.element_size()]) for v in values if isinstance(v, torch.Tensor)]
    sums = _stack([_sum(t, dtype=torch.int64) for t in tensors]) if tensors else None
    return sums, [_scalar_bits(v) for v in values if not isinstance(v, torch.Tensor)]


def _two_int64(digest: bytes) -> list[int]:
    """A hash's first 16 bytes as two signed little-endian 64-bit numbers: how a commit carries it."""
    return [int.from_bytes(digest[:8], "little", signed=True), int.from_bytes(digest[8:16], "little", signed=True)]


def _strong(values: Sequence[Any], _blake2b: Any = hashlib.blake2b) -> list[int]:
    """Per tensor on the host, a cryptographic hash of its dtype, shape and bytes (BLAKE2b, 128 bits,
    as two signed 64-bit numbers). A sum of bit patterns is linear: a candidate that skipped a timed
    call's work, once told which calls were checks, could compute their right outputs and move a few
    elements within the tolerance until their sum was the one it had committed (a red-team candidate
    did, session 25). Finding bytes of a given BLAKE2b is not possible. A CUDA evaluation's commits
    carry ``_strong_gpu``'s instead: its outputs stay on the GPU."""
    out: list[int] = []
    for v in values:
        if isinstance(v, torch.Tensor):
            t = v.detach().contiguous()
            h = _blake2b(f"{t.dtype}{tuple(t.shape)}".encode(), digest_size=16)
            h.update(t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b"")
            out += _two_int64(h.digest())
    return out


def _strong_gpu(values: Sequence[Any], _words: Any = _blake3.blake3_words) -> list[torch.Tensor]:
    """Per tensor, the first 128 bits of BLAKE3 of its bytes as two int64 on its GPU (runner/blake3.py),
    enqueued on the current stream: ``_strong``'s guarantee without copying the outputs to the host.
    Its dtype and shape are the saved file's, which the parent checks against the definition."""
    return [_words(v) for v in values if isinstance(v, torch.Tensor)]


def digest_host(values: Sequence[Any], device: str) -> tuple[int, ...]:
    """The digest ``_Commits`` commits for an evaluation on ``device``, computed by the parent on the
    tensors it loaded, where they are (on the host, or the copies it placed on its GPU): the sums,
    the plain numbers, then per tensor the hash that binds its bytes (BLAKE2b on the CPU, BLAKE3 on
    the GPU; a tensor the parent holds on the host, a judge on the CPU's, hashed there with numpy)."""
    sums, scalars = _digest(values)
    digest = tuple(_wrap64(int(x)) for x in (sums.tolist() if sums is not None else [])) + tuple(scalars)
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    if device == "cpu":
        return digest + tuple(_strong([v.cpu() for v in tensors]))
    words: list[int] = []
    for v in tensors:
        if v.is_cuda:
            words += [_wrap64(int(x)) for x in _strong_gpu([v])[0].tolist()]
        else:
            words += _two_int64(_blake3.blake3_host(v.detach().contiguous().reshape(-1).view(torch.uint8).numpy()))
    return digest + tuple(words)


def _summary(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    # inclusive: with few samples the default method extrapolates below the minimum (negative p10).
    q = statistics.quantiles(s, n=10, method="inclusive") if len(s) >= 2 else [s[0]] * 9
    return {
        "median_ms": statistics.median(s),
        "p10_ms": q[0],
        "p90_ms": q[-1],
        "mean_ms": statistics.fmean(s),
        "std_ms": statistics.pstdev(s),
        "min_ms": s[0],
        "n": len(s),
        "sum_ms": sum(s),
    }


def _refill(buffers: list[Any], fresh: list[Any]) -> None:
    for b, f in zip(buffers, fresh, strict=True):
        if isinstance(b, torch.Tensor):
            b.copy_(f)


def _seed() -> int:
    return int.from_bytes(_urandom(8), "little") >> 2


def _warm_digest(outputs: Sequence[Any], _digest: Any = _digest, _strong_gpu: Any = _strong_gpu) -> None:
    """``_Commits.commit``'s GPU work once, waited for."""
    sums, _ = _digest(outputs)
    if sums is not None:
        host = torch.empty(3 * int(sums.numel()), dtype=torch.int64, pin_memory=True)
        host.copy_(torch.cat([sums, *_strong_gpu(outputs)]), non_blocking=True)
        torch.cuda.synchronize()


class _Commits:
    """The timed calls' digests on their way to the parent, and its answers: which calls it checks.
    A call's outputs stay in their ring slot until the parent has answered for it (the slot is not
    reused before), so a checked call's outputs are copied from the slot the call wrote."""

    def __init__(self, channel: _Channel | None, device: str) -> None:
        self.channel, self.device = channel, device
        self.pending: list[tuple[int, Any, int, list[int], list[int], Any]] = []  # (call, sums then hashes, number of sums, scalars, host hashes, event)
        self.answered: set[int] = set()
        self.slots: dict[int, Sequence[Any]] = {}  # call -> its outputs, until answered
        self.kept: dict[int, list[Any]] = {}

    def commit(self, i: int, outputs: Sequence[Any], _record: Any = _record, _Event: Any = _Event,
               _digest: Any = _digest, _strong: Any = _strong, _strong_gpu: Any = _strong_gpu,
               _cat: Any = torch.cat, _empty: Any = torch.empty) -> None:
        self.slots[i] = outputs
        if self.channel is None:
            self.answered.add(i)
            return
        # Sums, plain numbers, then the hashes that bind the bytes (runner/timekeeper.py digest_of).
        sums, scalars = _digest(outputs)
        n = 0 if sums is None else int(sums.numel())
        strong: list[int] = []
        event = None
        if self.device == "cpu":
            strong = _strong(outputs)
        elif sums is not None:
            host = _empty(3 * n, dtype=torch.int64, pin_memory=True)
            host.copy_(_cat([sums, *_strong_gpu(outputs)]), non_blocking=True)
            event = _Event()
            _record(event)
            sums = host
        self.pending.append((i, sums, n, scalars, strong, event))

    def pump(self, wait_for: int | None = None, _query: Any = _query, _event_sync: Any = _event_sync,
             _snapshot: Any = _snapshot) -> None:
        """Send the digests that are ready and take the answers that came; with ``wait_for``, block
        until the parent has answered for that call."""
        if self.channel is None:
            return
        while True:
            while self.pending and (self.pending[0][-1] is None or _query(self.pending[0][-1])
                                    or (wait_for is not None and self.pending[0][0] <= wait_for)):
                i, sums, n, scalars, strong, event = self.pending.pop(0)
                if event is not None:
                    _event_sync(event)
                parts = [_wrap64(int(x)) for x in sums.tolist()] if sums is not None else []
                self.channel.send({"c": [i, parts[:n] + scalars + parts[n:] + strong]})
            block = wait_for is not None and wait_for not in self.answered
            msg = self.channel.recv(block=block)
            if msg is None:
                return
            i, keep = msg["k"]
            self.answered.add(i)
            outs = self.slots.pop(i)
            if keep:
                self.kept[i] = _snapshot(outs)
            if wait_for is not None and wait_for in self.answered and not self.pending:
                return

    def free(self, i: int) -> None:
        """Before call ``i + ring`` reuses the slot of call ``i``."""
        if i >= 0 and i not in self.answered:
            self.pump(wait_for=i)
        self.slots.pop(i, None)


_HOLD: list[Any] = []


def _hold_kernel() -> Any:
    """The GPU's timed wait (runner/driver.py Hold), loaded by the first phase that asks for one: the
    calibration phase, before any candidate code ran."""
    if not _HOLD:
        from .driver import Hold

        _HOLD.append(Hold(torch.cuda.current_device()))
    return _HOLD[0]


def _time(fn: Callable[..., Any], req: Mapping[str, Any], workload: Mapping[str, Any], device: str, dps: bool,
          checks: tuple[Path, int, list[str]] | None, kind: str = "time",
          _check_primitives: Callable[[], None] = _check_primitives, _call: Any = _call, _record: Any = _record,
          _elapsed: Any = _elapsed, _synchronize: Any = _synchronize, _perf_counter: Any = _perf_counter,
          _Event: Any = _Event, _sync: Any = _sync, _snapshot: Any = _snapshot,
          _summary: Any = _summary, _refill: Any = _refill, _make_inputs: Any = _make_inputs,
          _bound: list[Any] = _BOUND) -> dict[str, Any]:
    """Median of per-call times (each call, or with ``timing.graphs`` each CUDA graph replay of it).

    Inputs rotate among buffer sets re-randomised in place before every call (same pointers, new
    values) from seeds the parent draws when this phase starts, over its channel; a few of them are
    seeds the trusted reference computed outputs for, at positions only the parent knows. Outputs
    rotate through a ring of slots. After each call the digest of its outputs goes to the parent,
    which then says whether that call is kept (a check, or a decoy among them); once the phase is
    over it names the checks, and only their outputs are saved. The
    parent stamps the phase's start and end with its own clock. On the GPU the L2 is flushed before
    every call and times come from CUDA events captured before the candidate was imported.
    ``kind='cal'``: the same loop around the harness's own null call, before the candidate exists."""
    t = req["timing"]
    definition = req["definition"]
    own = _ownership(req)
    # The channel main() bound before any candidate code ran, never what _CHANNEL holds now (a
    # candidate could put a proxy there; _check_primitives refuses that by name).
    channel = _bound[0] if checks is not None and _bound else None
    n_sets = max(1, t["rotate"])
    hold_us = max(0.0, min(float(t.get("hold_us", 0.0)), 10_000.0))
    ring = 2 * n_sets  # room for the parent's answers to lag the calls without stalling them
    sets = [_make_inputs(definition, workload, 10_000 + i, device) for i in range(n_sets)]
    slots = [_poisoned_outputs(definition, workload["axes"], device) for _ in range(ring)]
    mode = "events" if device == "cuda" else "cpu"
    with torch.no_grad():
        for i in range(t["warmup"]):
            _call(fn, sets[i % n_sets], slots[i % ring], dps, own)
        _sync(device)
        _check_primitives()
        samples: list[float] = []
        graphs: list[tuple[Any, tuple[Any, ...]]] | str | None = None
        flush = None
        if device == "cuda":
            flush = torch.empty(int(2 * torch.cuda.get_device_properties(0).L2_cache_size), dtype=torch.int8, device="cuda")
            start, end = _Event(enable_timing=True), _Event(enable_timing=True)
            # Size the rep count from one timed call so tiny and huge kernels both get ~target_ms.
            _record(start)
            _call(fn, sets[0], slots[0], dps, own)
            _record(end)
            _synchronize()
            _check_primitives()
            est = max(_elapsed(start, end), 1e-3)
            reps = max(n_sets, int(min(t["reps_max"], max(t["reps"], t["target_ms"] / est))))
            if t.get("graphs") and kind == "time":
                graphs = _capture(fn, [(sets[k % n_sets], slots[k]) for k in range(ring)], dps)
                mode = "cuda_graph" if not isinstance(graphs, str) else f"events (CUDA graph capture failed: {graphs})"
        else:
            reps = max(n_sets, t["reps_cpu"])
        if kind == "cal":
            reps = max(2 * ring, 8)
        hold = _hold_kernel() if hold_us and flush is not None else None
        stream = _current_stream().cuda_stream if hold is not None else 0
        pairs = [(_Event(enable_timing=True), _Event(enable_timing=True)) for _ in range(reps)] if flush is not None else []
        commits = _Commits(channel, device)
        if channel is not None and device == "cuda":
            # One-off costs of the digest (the hash's PTX loaded and compiled by the driver, the first
            # pinned buffer) before the parent's clock starts: inside the calibration phase they would
            # swell the loop cost the wall check allows twice per timed call (a red-team finding, session 26).
            _warm_digest(slots[0])
        if channel is not None:
            channel.send({"start": {"kind": kind, "w": checks[1] if checks else 0, "reps": reps}})
            seeds = [int(s) for s in channel.recv()["seeds"]]
            if len(seeds) != reps:
                raise CandidateError("RUNTIME_ERROR", "TIMING_PROTOCOL: the parent sent the wrong number of seeds")
        else:
            seeds = [_seed() for _ in range(reps)]
        for i in range(reps):
            k = i % ring
            commits.free(i - ring)
            inputs = sets[i % n_sets]
            _refill(inputs, _make_inputs(definition, workload, seeds[i], device))
            if flush is not None:
                s, e = pairs[i]
                flush.zero_()
                if hold is not None:  # EvalSettings.hold_us: the host enqueues the call while the GPU waits
                    hold(hold_us, stream)
                _record(s)
                if isinstance(graphs, list):
                    # Refilled in place above: the graph reads the new values through the same pointers.
                    graphs[k][0].replay()
                    got = graphs[k][1]
                else:
                    got = _call(fn, inputs, slots[k], dps, own)
                _record(e)
            else:
                t0 = _perf_counter()
                got = _call(fn, inputs, slots[k], dps, own)
                samples.append((_perf_counter() - t0) * 1e3)
            # Before the harness copies, digests and commits (out of the timed window): a primitive the
            # call replaced would run there, doing the call's work after its end event.
            _check_primitives()
            # The candidate's own tensors are copied into the slot in stream order, right after the
            # call: what it writes into them later is not what the digest committed.
            outs = got if dps or isinstance(graphs, list) else _snapshot(got)
            commits.commit(i, outs)
            commits.pump()
        _sync(device)
        for i in range(max(0, reps - ring), reps):
            commits.free(i)
        _sync(device)  # the checked calls' copies
        _check_primitives()
        if flush is not None:
            samples = [_elapsed(s, e) for s, e in pairs]
        summary = {**_summary(samples), "mode": mode}
        save: list[int] = []
        if channel is not None:
            channel.send({"end": summary})
            if kind == "time":
                # Only now, the phase over, does the parent say which kept calls were its checks: their
                # outputs are saved, the decoys' are not (nobody compares them with anything).
                save = channel.recv()["save"]
                if not (isinstance(save, list) and all(type(i) is int and i in commits.kept for i in save)):
                    raise CandidateError("RUNTIME_ERROR", "TIMING_PROTOCOL: the parent asked to save calls "
                                         "that were not kept")
    if checks is not None and kind == "time":
        folder, wi, names = checks
        for j, i in enumerate(sorted(save)):
            names.append(_save(commits.kept[i], folder / f"w{wi}_c{j}.kpt"))
    return summary


class ArmCalls:
    """An energy arm's candidate, built in this process with its rotating input sets, and the
    harness's own call and check (runner/energy/arms.py): what the arm runs on command."""

    def __init__(self, req: Mapping[str, Any], workdir: Path, rotate: int = 3,
                 _call: Any = _call, _check: Callable[[], None] = _check_primitives) -> None:
        # Bound before the candidate is imported (as defaults, at the harness's import): rebinding the
        # harness's names afterwards changes neither what runs its calls nor what checks them.
        self._call, self.check = _call, _check
        device = req["device"]
        self.fn = _build(req["solution"], workdir, req=req)
        self.dps: bool = req["solution"]["spec"].get("destination_passing_style", True)
        self.sets = [(_make_inputs(req["definition"], req["workload"], 20_000 + i, device),
                      _poisoned_outputs(req["definition"], req["workload"]["axes"], device)) for i in range(rotate)]

    def call(self, i: int) -> None:
        """The candidate's call on input set ``i`` (mod the sets); only plain tensors come back (issue 17)."""
        self._call(self.fn, *self.sets[i % len(self.sets)], self.dps)

    def graph(self, rounds: int) -> tuple[Any, int]:
        """``rounds`` rounds over the input sets captured as one CUDA graph, and its calls; raises what
        the capture raised."""
        per = rounds * len(self.sets)
        g, _ = graph_of(self.fn, [self.sets[k % len(self.sets)] for k in range(per)], self.dps)
        return g, per


def graph_of(fn: Callable[..., Any], calls: Sequence[tuple[list[Any], list[Any]]], dps: bool,
             _check_primitives: Callable[[], None] = _check_primitives, _call: Any = _call) -> tuple[Any, tuple[Any, ...]]:
    """``calls`` (inputs, outputs), in order, captured as one CUDA graph after a warm-up of the same
    calls on a side stream (as capture asks): the graph and what its last call returns. Raises what
    the capture raised (a candidate that synchronises, copies to the host, ...)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for inputs, outputs in calls:
            _call(fn, inputs, outputs, dps)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    got: tuple[Any, ...] = ()
    with torch.cuda.graph(g):
        for inputs, outputs in calls:
            got = _call(fn, inputs, outputs, dps)
    _check_primitives()
    return g, got


def _capture(fn: Callable[..., Any], sets: Sequence[tuple[list[Any], list[torch.Tensor]]],
             dps: bool) -> list[tuple[Any, tuple[Any, ...]]] | str:
    """One CUDA graph per (input set, output slot) (a call on those pointers) and the outputs it
    writes, or why the candidate could not be captured (it synchronises, copies to the host, uses a
    side stream, ...). Replays leave out the host's launch overhead: the GPU time of the call alone."""
    try:
        captured = [graph_of(fn, [one], dps) for one in sets]
        _synchronize()
        _check_primitives()
        return captured
    except CandidateError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure to capture: time it call by call
        with contextlib.suppress(Exception):  # the eager calls that follow say if the GPU is unusable
            _synchronize()
        return f"{type(e).__name__}: {e}".splitlines()[0][:200]


# --------------------------------------------------------------------------- main


def _environment(device: str) -> dict[str, Any]:
    libs = {"torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        # Its version without its import (half a second a child): a CUDA target never loads Triton.
        from importlib.metadata import PackageNotFoundError, version

        libs["triton"] = version("triton")
    except PackageNotFoundError:
        pass
    if device == "cuda":
        hardware = torch.cuda.get_device_name(0).replace(" ", "_")
        libs["cuda"] = str(torch.version.cuda)
        driver = _driver_version()
        if driver:
            libs["driver"] = driver
    else:
        hardware = "cpu" + ("_triton_interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "")
    return {"hardware": hardware, "libs": libs}


def _driver_version(path: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    # The kernel module's own line ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04 ...");
    # no NVML needed, and absent (None) where the driver is not a Linux kernel module.
    try:
        line = path.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    words = [w for w in line.split() if w[:1].isdigit() and "." in w]
    return words[0] if words else None


def _limit_memory(megabytes: int) -> str:
    """Cap the data segment (heap and private writable mappings) at what the process uses now plus
    ``megabytes``. RLIMIT_AS would break CUDA, which reserves terabytes of address space; set after
    torch and CUDA are initialised, so only the candidate's own allocations count against it."""
    if megabytes <= 0:
        return "no memory limit"
    try:
        import resource

        used_kb = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                       if line.startswith("VmData:"))
        limit = used_kb * 1024 + megabytes * 2**20
        resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
        return f"RLIMIT_DATA {limit // 2**20} MiB ({megabytes} MiB above start-up)"
    except (ImportError, OSError, ValueError, StopIteration) as e:
        return f"memory limit unavailable: {e}"


def _one_call(fn: Callable[..., Any], req: Mapping[str, Any], device: str) -> Callable[[], Any]:
    """A call of the candidate on the request's first workload, inputs made once (for profiling)."""
    workload = req["workloads"][0]
    dps = req["solution"]["spec"].get("destination_passing_style", True)
    inputs = _make_inputs(req["definition"], workload, 1, device)
    outputs = _poisoned_outputs(req["definition"], workload["axes"], device)
    return lambda: _call(fn, inputs, outputs, dps)


def _profile(fn: Callable[..., Any], req: Mapping[str, Any], device: str) -> dict[str, Any]:
    """One warm-up call (JIT compile, autotune), then one call inside cudaProfilerStart/Stop, so an
    ncu started with --profile-from-start off sees the candidate's kernels and nothing of ours."""
    t0 = _perf_counter()
    call = _one_call(fn, req, device)
    with torch.no_grad():
        call()
        torch.cuda.synchronize()
        t1 = _perf_counter()
        cudart = torch.cuda.cudart()
        cudart.cudaProfilerStart()
        call()
        torch.cuda.synchronize()
        cudart.cudaProfilerStop()
    # ncu replays the profiled call once per metric pass: that share is ncu's, the warm-up is ours.
    return {"profiled": req["workloads"][0]["uuid"], "warmup_s": t1 - t0, "profiled_s": _perf_counter() - t1}


def _memcheck(fn: Callable[..., Any], req: Mapping[str, Any], device: str) -> dict[str, Any]:
    """One call per workload on fresh inputs, under compute-sanitizer memcheck (started around this
    process): every out-of-bounds or misaligned access of the candidate's kernels is reported."""
    with torch.no_grad():
        for w in req["workloads"]:
            _one_call(fn, {**req, "workloads": [w]}, device)()
            _sync(device)
    return {"calls": len(req["workloads"])}


def _timeline(fn: Callable[..., Any], req: Mapping[str, Any], device: str) -> dict[str, Any]:
    from kernelpro.runner.evidence.timeline import record

    call = _one_call(fn, req, device)
    with torch.no_grad():
        events = record(call, repeats=5, warmup=2)
    return {"events": events, "calls": 5}


def _calibrate(req: Mapping[str, Any], workdir: Path) -> None:
    """The timing loop of every workload around a call that does nothing (returning poisoned outputs
    where the candidate returns its own, so their copies are in it too), announced to the parent."""
    dps = req["solution"]["spec"].get("destination_passing_style", True)
    for wi, workload in enumerate(req["workloads"]):
        fixed = _poisoned_outputs(req["definition"], workload["axes"], req["device"])
        _time((lambda *a: None) if dps else (lambda *a, f=tuple(fixed): f), req, workload, req["device"], dps,
              (workdir / "out", wi, []), kind="cal")


def _timed_build(req: Mapping[str, Any], workdir: Path) -> tuple[Callable[..., Any] | None, dict[str, Any]]:
    t0 = _perf_counter()
    warnings: list[str] = []
    imported: list[str] = []
    try:
        fn = _outputs_of(_build(req["solution"], workdir, req=req, warnings=warnings, imported=imported), req)
        return fn, {"status": "OK", "log": "", "seconds": _perf_counter() - t0, "warnings": warnings,
                    "imported": imported}
    except CandidateError as e:
        return None, {"status": e.status, "log": e.log, "seconds": _perf_counter() - t0, "warnings": warnings}


def run(req: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    device = req["device"]
    mode = req.get("mode", "evaluate")
    # Under ncu the candidate is imported before CUDA starts: ncu's injection begins with CUDA, and
    # on the H200 importing liger_kernel inside the ncu child took 7.8 s of its 15
    # (benchmarks/corpus_profile.py --ncu-import measures the import with and without ncu).
    early = _timed_build(req, workdir) if mode == "profile" else None
    result: dict[str, Any] = {"environment": _environment(device), "workloads": []}
    if device == "cuda":
        torch.zeros(1, device="cuda")  # the CUDA context exists before the memory limit applies
    # Under CUDA the driver's own private mappings could count against RLIMIT_DATA; there the
    # parent's resident-memory watchdog (runner/sandbox.py) is the limit.
    result["environment"]["memory_limit"] = (_limit_memory(int(req.get("memory_limit_mb", 0))) if device == "cpu"
                                             else "no RLIMIT_DATA under CUDA")
    t0 = _perf_counter()
    before = early[1]["seconds"] if early else 0.0
    phases = result["phases"] = {"startup": t0 - _STARTED - before, "verify": 0.0, "time": 0.0}
    if mode == "reference":
        result.update(_reference_run(req, workdir))
        result["build"] = {"status": "OK", "log": "", "seconds": 0.0}
        phases["verify"] = _perf_counter() - t0
        return result
    if mode == "evaluate" and _BOUND:
        # Before the candidate is imported: what the harness's own timing loop costs, seen by the
        # parent's clock, so it can tell that cost from work a candidate hid outside its timed calls.
        t1 = _perf_counter()
        try:
            _calibrate(req, workdir)
        except BaseException:
            result["build"] = {"status": "RUNTIME_ERROR", "log": "the harness's calibration failed:\n"
                               + _tail(traceback.format_exc()), "seconds": 0.0}
            return result
        phases["calibrate"] = _perf_counter() - t1
    built, result["build"] = early or _timed_build(req, workdir)
    if built is None:
        return result
    fn = built
    if mode in ("profile", "timeline", "memcheck"):
        try:
            result[mode] = {"profile": _profile, "timeline": _timeline, "memcheck": _memcheck}[mode](fn, req, device)
        except BaseException:
            result[mode] = {"error": _tail(traceback.format_exc())}
        return result
    for wi, workload in enumerate(req["workloads"]):
        entry: dict[str, Any] = {"uuid": workload["uuid"], "status": "OUTPUTS", "log": ""}
        t1 = _perf_counter()
        try:
            entry.update(_candidate_run(fn, req, workload, wi, workdir))
        except BaseException as exc:
            fail = _fail_from(exc)
            entry.update(status=fail.status, log=fail.log)
        spent = float(entry.get("time_seconds", 0.0))
        phases["verify"] += _perf_counter() - t1 - spent
        phases["time"] += spent
        result["workloads"].append(entry)
        if entry["status"] != "OUTPUTS":
            break  # one failing workload decides the candidate; do not spend time on the rest
    else:
        if req.get("timeline") and device == "cuda" and _reaches(req.get("timeline_bar"), result["workloads"]):
            # After all timing, in the process that already holds the compiled kernel: a separate
            # child would pay Python, torch, CUDA and Triton start-up again for a few calls.
            t2 = _perf_counter()
            try:
                from dataclasses import asdict

                from kernelpro.runner.evidence.timeline import summarize

                largest = max(req["workloads"], key=lambda w: sum(w["axes"].values()))
                data = _timeline(fn, {**req, "workloads": [largest]}, device)
                result["timeline"] = asdict(summarize(data["events"], data["calls"]))
            except BaseException:
                result["timeline"] = {"error": _tail(traceback.format_exc())}
            phases["timeline"] = _perf_counter() - t2  # CUPTI's start-up (before session 27 also torch._dynamo's import)
    return result


def _reaches(bar: Mapping[str, Any] | None, entries: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the timed workloads' geometric-mean speedup over ``bar``'s baseline medians reaches
    its ``speedup`` (the parent's own rule for profiling a candidate, on the same medians); True
    without a bar, or where a median is missing (the timeline is then recorded, not lost)."""
    if not bar:
        return True
    logs = []
    for e in entries:
        base = bar["baseline_ms"].get(e["uuid"])
        ms = (e.get("timing") or {}).get("median_ms")
        if not base or not ms or ms <= 0 or base <= 0:
            return True
        logs.append(math.log(base / ms))
    return not logs or math.exp(sum(logs) / len(logs)) >= bar["speedup"]


def _standby(req: Mapping[str, Any], workdir: Path) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """``mode: standby``: an ncu child started before it is needed (runner/standby.py). It pays
    Python's, torch's and the kernel package's imports while the loop does other work, then waits,
    launching nothing, for the parent to write the real request to ``go.json``. Gives up (None)
    when the parent's heartbeat file goes stale (the parent died) or after ``wait_s``."""
    preloaded, failed = [], []
    for name in req.get("preload", ()):
        try:
            importlib.import_module(name)
            preloaded.append(name)
        except BaseException:  # noqa: BLE001 - the candidate's own import reports what is wrong
            failed.append(name)
    ready = _perf_counter()
    go, alive = workdir / "go.json", workdir / "alive"
    deadline = ready + float(req.get("wait_s", 600.0))
    info: dict[str, Any] = {"preloaded": preloaded, "failed": failed, "preload_s": ready - _STARTED}
    while not go.exists():
        now = _perf_counter()
        with contextlib.suppress(OSError):
            if now > deadline or time.time() - alive.stat().st_mtime > float(req.get("heartbeat_s", 30.0)):
                return None, {**info, "expired": True}
        time.sleep(0.005)
    info["waited_s"] = _perf_counter() - ready
    request = json.loads(go.read_text())
    return (None if request.get("mode") == "quit" else request), info


def main(argv: list[str]) -> int:
    request_path, result_path = Path(argv[0]), Path(argv[1])
    req = json.loads(request_path.read_text())
    with contextlib.suppress(OSError):  # read once; the candidate finds no request to read
        request_path.unlink()
    fds = os.environ.pop("KERNELPRO_CHANNEL", "")
    if fds:  # the parent's timing channel (runner/timekeeper.py): two inherited pipe ends
        r, w = (int(x) for x in fds.split(","))
        _CHANNEL[0] = _Channel(r, w)
        _BOUND[:] = [_CHANNEL[0]]
    standby = None
    if req.get("mode") == "standby":
        taken, standby = _standby(req, request_path.parent)
        if taken is None:
            result_path.write_text(json.dumps({"standby": standby}))
            return 0
        # What the standby spent before the request is not this candidate's cost: its clock starts now.
        global _STARTED
        _STARTED, req = _perf_counter(), taken
    result = run(req, request_path.parent)
    if standby is not None:
        result["standby"] = standby
    if isinstance(result.get("phases"), dict):
        result["phases"]["save"] = _SAVED[0]  # part of verify (and of time, for the timed calls' checks)
    result["clock"] = {"started": _STARTED_WALL, "ended": time.time()}
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, allow_nan=True))
    tmp.replace(result_path)
    return 0


# Every function, class and captured reference of this module as it was before any candidate code
# ran: _check_primitives compares them after every call (a module's globals are reachable through
# sys.modules or any frame, so they are watched rather than hidden).
_HARNESS_GLOBALS = globals()
_OWN: dict[str, tuple[Any, Any, Any]] = {
    k: (v, getattr(v, "__code__", None), getattr(v, "__defaults__", None))
    for k, v in list(_HARNESS_GLOBALS.items())
    if not k.startswith("__") and k not in ("_STARTED", "_STARTED_WALL", "_CHANNEL", "_name")
    and not isinstance(v, (list, dict, set))
}
_METHODS: dict[tuple[type, str], tuple[Any, Any, Any]] = {  # checked as _OWN is: rebinding a method is rebinding
    (cls, k): (f, f.__code__, f.__defaults__)
    for cls in (_Channel, _Commits, _Ops) for k, f in vars(cls).items() if hasattr(f, "__code__")
}
_GUARD.append((tuple(_OWN.items()), tuple(_METHODS.items()), _PRIMITIVES, _HARNESS_GLOBALS))
# Top-level modules imported before any candidate code (torch, triton, kernelpro, ...): a repository
# that defines one of them cannot have its own served (the harness's copy is already in use).
_BEFORE = frozenset(m.partition(".")[0] for m in list(sys.modules))

if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: a candidate's leftover threads and atexit hooks do not get to run
    # (or crash the process) once the result is written.
    os._exit(code)
