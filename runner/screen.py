"""The static check of a candidate, before it runs: the rules the prompt states, enforced.

A model rewarded for speed finds the cheapest way to look fast: return the reference's own torch
call (``torch.nn.functional.silu(a) * b`` "won" 5601x over a Triton kernel it deleted), read the
environment, import ``os``. The sandbox confines what such code can do; this check refuses it
before it costs an evaluation, and its reason goes to the repair prompt like a compiler error.

Every rule is relative to the pull request's own kernel (the baseline, which is never screened:
the PR's code is what it is): what the baseline already does, a candidate may keep doing.

1. The language is kept: a Triton target still defines a ``@triton.jit`` kernel and launches one
   from its entry point; a CUDA target still has a ``__global__`` kernel in its C/C++ sources.
2. The operation is not delegated: no call of a function the definition's reference uses (resolved
   through the candidate's imports: ``F.silu`` is ``torch.nn.functional.silu``), no new torch
   computation in a Triton or CUDA target's host code (allocation, views and metadata are fine), no
   new cuBLAS/cuDNN/ATen compute call in C/C++.
3. Imports and calls stay within an allowlist: torch (less its escape hatches: cpp_extension,
   torch.ops, torch.library, torch.compile, ...), triton for Triton targets, a few pure standard
   modules, and what the baseline imports; no ``os``/``sys``/``subprocess``/``socket``/``ctypes``/
   ``importlib`` reached by any attribute path (``torch.os.environ`` included), no ``eval``,
   ``exec``, ``compile``, ``open``, ``__import__``, ``setattr``, ``getattr`` on a module, and no
   interpreter internals (``__builtins__``, ``__globals__``, ``__subclasses__``, ...).
4. The entry point keeps its signature (a raw CUDA kernel launched by kernelpro, its parameter list).

This is a screen, not a proof: what it cannot see (arithmetic on tensors in host code, say) the
evaluator's checks and the sandbox still judge.
"""

from __future__ import annotations

import ast
import posixpath
import re
from collections.abc import Iterator, Mapping

from kernelpro.csource import without_comments
from kernelpro.pysource import import_aliases

from .evaluator import Outcome
from .trace import Solution

REJECTED = "REJECTED_STATIC"
"""The journal's and the report's status of a candidate this check refused (it never ran), or that
ran and dispatched PyTorch's operators to do its work (``delegated``)."""

TRACE_STATUS = "COMPILE_ERROR"
"""What a refused candidate is in FlashInfer-Trace lines, whose schema has no status of its own for it."""

# Not ``operator``: attrgetter and methodcaller are getattr by another name (an audit reached os.environ
# through ``operator.attrgetter('o' + 's')(torch)``).
_SAFE_MODULES = frozenset({"torch", "math", "functools", "typing", "itertools", "dataclasses", "__future__",
                           "collections", "enum", "numbers", "abc"})
# Names that evaluate strings or look attributes up by a computed name, wherever they are reached from.
_DENIED_NAMES = frozenset({"attrgetter", "methodcaller", "ForwardRef", "get_type_hints", "_evaluate", "_eval_type",
                           "_python_dispatch", "TorchDispatchMode", "TorchFunctionMode"})
_TRITON_MODULES = frozenset({"triton"})
# Reachable from an allowed module, these run other code, compile other languages or leave the process.
_DENIED_TORCH = ("torch.utils.cpp_extension", "torch.ops", "torch.library", "torch.compile", "torch.jit",
                 "torch._C", "torch._dynamo", "torch._inductor", "torch.hub", "torch.load", "torch.save",
                 "torch.classes", "torch.cuda.cudart", "torch.backends")
# Names of modules that reach the operating system, whatever path leads to them (torch.os is os).
_SYSTEM = frozenset({"os", "sys", "subprocess", "socket", "ctypes", "importlib", "builtins", "shutil", "pickle",
                     "marshal", "multiprocessing", "inspect", "gc", "environ", "getenv", "posix", "nt", "pty",
                     "signal", "sysconfig", "tempfile", "pathlib", "io", "urllib", "http", "runpy"})
_DENIED_CALLS = frozenset({"__import__", "eval", "exec", "compile", "open", "globals", "locals", "vars", "breakpoint",
                           "setattr", "delattr"})
# Interpreter internals: from any object they lead to builtins, globals and every loaded module.
_INTERNALS = frozenset({"__builtins__", "__globals__", "__subclasses__", "__code__", "__closure__", "__dict__",
                        "__class__", "__bases__", "__base__", "__mro__", "__getattribute__", "__getattr__", "__import__",
                        "__loader__", "__spec__", "__self__", "__func__", "__reduce__", "__reduce_ex__", "__setattr__",
                        "__delattr__", "__module__", "__defaults__", "__kwdefaults__", "__wrapped__",
                        # frames, tracebacks, generators and coroutines: from a frame, the caller's
                        # locals (the harness's own records), its globals and builtins
                        "__traceback__", "tb_frame", "tb_next", "f_back", "f_locals", "f_globals", "f_builtins",
                        "f_code", "f_trace", "f_lasti", "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code",
                        "cr_await", "cr_origin", "ag_frame", "ag_code", "ag_await", "co_consts", "co_names",
                        "_getframe", "currentframe", "getinnerframes", "getouterframes",
                        "walk_stack", "walk_tb", "extract_stack", "get_referrers", "get_referents"})
# torch functions that allocate, describe or move memory: any host code may call them.
_NEUTRAL_TORCH = frozenset({"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
                            "full_like", "arange", "tensor", "as_tensor", "as_strided", "device", "dtype", "Size",
                            "finfo", "iinfo", "is_tensor", "is_floating_point", "is_complex", "get_default_dtype",
                            "result_type", "promote_types", "broadcast_shapes", "no_grad", "inference_mode",
                            "set_grad_enabled"})
_NEUTRAL_TORCH_PREFIXES = ("torch.cuda.", "torch.nn.Module", "torch.nn.Parameter", "torch.testing.")
# Tensor methods that allocate, view, describe or convert: any host code may call them.
_NEUTRAL_METHODS = frozenset({
    "size", "dim", "numel", "nelement", "stride", "storage_offset", "is_contiguous", "contiguous", "view", "view_as",
    "reshape", "reshape_as", "flatten", "unflatten", "unsqueeze", "squeeze", "permute", "transpose", "t", "expand",
    "expand_as", "narrow", "select", "unbind", "chunk", "split", "to", "type", "float", "half", "bfloat16", "double",
    "int", "long", "bool", "cpu", "cuda", "data_ptr", "element_size", "item", "tolist", "new_empty", "new_zeros",
    "new_ones", "new_full", "new_tensor", "zero_", "fill_", "copy_", "clone", "detach", "requires_grad_",
    "get_device", "untyped_storage", "record_stream", "as_strided", "movedim", "is_floating_point",
    # not tensor-specific: dicts, lists, strings and the module system in ordinary host code
    "items", "keys", "values", "get", "append", "extend", "format", "join", "startswith", "endswith", "update",
    "setdefault", "pop", "insert", "__init__", "register_buffer", "parameters",
})
# Tensor methods that compute (a representative set: the elementwise, reduction and linear-algebra ones).
_COMPUTE_METHODS = frozenset({
    "abs", "add", "add_", "addmm", "all", "amax", "amin", "any", "argmax", "argmin", "baddbmm", "bmm", "ceil", "clamp",
    "clamp_", "clip", "cos", "cumsum", "cumprod", "div", "div_", "dot", "einsum", "eq", "erf", "exp", "exp_", "exp2",
    "expm1", "floor", "gather", "ge", "gelu", "gt", "index_select", "le", "lerp", "log", "log_softmax", "log1p",
    "logsumexp", "lt", "masked_fill", "matmul", "max", "maximum", "mean", "min", "minimum", "mm", "mul", "mul_",
    "mv", "ne", "neg", "norm", "pow", "prod", "reciprocal", "relu", "relu_", "round", "rsqrt", "scatter",
    "scatter_add", "sigmoid", "sigmoid_", "sign", "silu", "sin", "softmax", "sort", "sqrt", "square", "std", "sub",
    "sub_", "sum", "tanh", "tanh_", "topk", "tril", "triu", "var", "where", "cross", "outer", "kron",
})
# C/C++: library calls that do a whole operation, and system access.
_C_LIBRARY = re.compile(r"\b(cublas\w*|cublasLt\w*|cudnn\w*|(?:at|torch)::(?:(?:native|nn|functional)::)*(?!empty\w*\b|zeros\w*\b|ones\w*\b|"
                        r"Tensor\b|ScalarType\b|Device\w*\b|kFloat\w*|kHalf\b|kBFloat16\b|k\w+\b|cuda::)\w+)\s*\(")
# Process creation and System V IPC too (session 27's red-team review: a double fork with setsid ran
# on while its energy arm stood still; shared memory segments outlived the candidate). Not `clone(`:
# a torch extension's `x.clone()` is that too.
_C_SYSTEM = re.compile(r"\b(system|popen|getenv|secure_getenv|fopen|open|dlopen|dlsym|execve?|execvp|fork|vfork|"
                       r"daemon|setsid|posix_spawnp?|socket|connect|syscall|shmget|shmat|semget|msgget)\s*\(|"
                       # Named, not only called: `extern char **environ`, `auto f = &std::system; f(...)`.
                       r"\b(?:__)?environ\b|\b(?:std::)?(?:system|freopen|fdopen|openat|mmap|popen|getenv)\b|\b(?:std::)?[io]?fstream\b|#\s*include\s*[<\"](?:unistd|dlfcn|"
                       r"sys/socket|netinet/\w+|sys/syscall)(?:\.h)?[>\"]")
_C_EXTENSIONS = {".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp"}


def check(candidate: Solution, baseline: Solution, reference: str, language: str) -> str | None:
    """Why ``candidate`` may not run, in a sentence the model can act on; None when it passes."""
    for src in candidate.sources:
        if _ext(src.path) == ".py":
            try:
                ast.parse(src.content)
            except (SyntaxError, ValueError) as e:
                return f"{src.path} is not valid Python ({getattr(e, 'msg', e)})"
    base_py = _python(baseline)
    cand_py = _python(candidate)
    ref = _parse(reference)
    for why in (_imports(cand_py, base_py, language), _delegation(cand_py, base_py, ref, language),
                _language(candidate, baseline, cand_py, base_py, language), _c_rules(candidate, baseline),
                _signature(candidate, baseline)):
        if why is not None:
            return why
    return None


def outcome(solution: Solution, reason: str) -> Outcome:
    """The journal's record of a refused candidate: never built, never run."""
    return Outcome(solution.content_hash(), REJECTED, (), log=f"rejected by the static check, not run: {reason}")


# --------------------------------------------------------------------------- what the calls dispatched

# Operators that allocate, fill, view or inspect memory and compute nothing of the operation: a
# candidate may use them though the pull request's kernel does not. Copies and casts (clone, copy_,
# _to_copy) are not among them: moved into torch, they are part of the work.
NEUTRAL_OPS = frozenset(f"aten::{n}" for n in (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like", "new_zeros",
    "ones", "ones_like", "new_ones", "full", "full_like", "new_full", "fill_", "zero_", "lift_fresh", "detach",
    "alias", "view", "_unsafe_view", "_reshape_alias", "reshape", "as_strided", "expand", "t", "transpose",
    "permute", "squeeze", "unsqueeze", "flatten", "unflatten", "slice", "select", "narrow", "split",
    "split_with_sizes", "chunk", "unbind", "view_as", "expand_as", "resolve_conj", "resolve_neg", "resize_",
    "record_stream", "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel", "is_nonzero",
))


def delegated(ops: tuple[str, ...], baseline_ops: tuple[str, ...], language: str) -> str | None:
    """Why a Triton or CUDA candidate's verified calls handed the operation to PyTorch: they dispatched
    aten operators that compute (not ``NEUTRAL_OPS``) and that the pull request's kernel does not use.
    The static check reads the source; this reads what ran, however the source reached torch (an
    alias, an operator, a method, a C++ extension's host code). None for Python targets, whose
    language is torch."""
    if language not in ("triton", "cuda"):
        return None
    extra = sorted(set(ops) - set(baseline_ops) - NEUTRAL_OPS)
    if not extra:
        return None
    shown = ", ".join(extra[:8]) + (f" and {len(extra) - 8} more" if len(extra) > 8 else "")
    return (f"its calls computed with PyTorch operators the pull request's kernel does not use ({shown}): the "
            f"operation must run in the target's own {language.title() if language == 'triton' else 'CUDA'} "
            "kernels, not be handed to torch (allocating, viewing and filling memory is fine)")


def refused(solution: Solution, reason: str) -> Outcome:
    """The record of a candidate that ran but broke the rules (``delegated``): its measurement is not kept."""
    return Outcome(solution.content_hash(), REJECTED, (), log=f"rejected by the rules after it ran: {reason}")


def for_trace(o: Outcome) -> Outcome:
    """The outcome as FlashInfer-Trace lines can carry it (their status enum has no static rejection)."""
    return o if o.status != REJECTED else Outcome(o.solution_hash, TRACE_STATUS, (), o.environment, o.log)


# --------------------------------------------------------------------------- Python


def _ext(path: str) -> str:
    return posixpath.splitext(path)[1].lower()


def _parse(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def _python(solution: Solution) -> dict[str, ast.Module]:
    out = {}
    for src in solution.sources:
        if _ext(src.path) == ".py" and (m := _parse(src.content)) is not None:
            out[src.path] = m
    return out


def _dotted(node: ast.AST, aliases: Mapping[str, str]) -> str | None:
    """``F.silu`` -> ``torch.nn.functional.silu`` when F is an import alias; None for anything else."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def _imported(modules: Mapping[str, ast.Module]) -> set[str]:
    out: set[str] = set()
    for m in modules.values():
        for node in ast.walk(m):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                out.add(node.module)
    return out


def _under(name: str, roots: set[str] | frozenset[str]) -> bool:
    return any(name == r or name.startswith(r + ".") for r in roots)


def _denied_torch(name: str) -> str | None:
    return next((d for d in _DENIED_TORCH if name == d or name.startswith(d + ".")), None)


def _imports(cand: Mapping[str, ast.Module], base: Mapping[str, ast.Module], language: str) -> str | None:
    base_imports = _imported(base)
    allowed = set(_SAFE_MODULES) | (_TRITON_MODULES if language in ("triton", "python") else set()) | base_imports
    # What the pull request's own code already does, a candidate may keep doing.
    base_attrs = {_source(n) for m in base.values() for n in ast.walk(m) if isinstance(n, ast.Attribute)}
    base_dotted = {d for m in base.values() for n in ast.walk(m) if isinstance(n, ast.Attribute)
                   if (d := _dotted(n, import_aliases(m))) is not None}
    base_called = {n.func.id for m in base.values() for n in ast.walk(m)
                   if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    for path, m in cand.items():
        aliases = import_aliases(m)
        called = {id(n.func) for n in ast.walk(m) if isinstance(n, ast.Call)}
        own = {p.removesuffix(".py").replace("/", ".") for p in cand} | {posixpath.basename(p)[:-3] for p in cand}
        for node in ast.walk(m):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if isinstance(node, ast.ImportFrom) and node.level:
                    continue  # the target's own files, relatively
                mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for mod in mods:
                    if isinstance(node, ast.ImportFrom):
                        full = [f"{mod}.{a.name}" for a in node.names]
                    else:
                        full = [mod]
                    for f in full:
                        # Denied unless the pull request's own code imports that very part of torch.
                        if (d := _denied_torch(f)) is not None and not any(_under(b, {d}) for b in base_imports):
                            return f"{path} imports {f}: {d} runs code outside the kernel; write the kernel instead"
                    if not _under(mod, allowed) and not _under(mod, own):
                        return (f"{path} imports {mod}, which is not allowed: a candidate may import only "
                                f"{', '.join(sorted(allowed - {'__future__'}))} (rule 3)")
            elif isinstance(node, ast.Attribute):
                if _source(node) in base_attrs:
                    continue
                if node.attr in _DENIED_NAMES:
                    return (f"{path} uses `{_source(node)}`, which evaluates text or looks names up at run time: "
                            "name what you use (rule 3)")
                if node.attr.startswith("_") and not node.attr.startswith("__") and not (
                        isinstance(node.value, ast.Name) and node.value.id not in aliases):
                    return (f"{path} reaches the private `{_source(node)}`: a kernel uses the public API of what it "
                            "imports (rule 3)")
                if node.attr in _SYSTEM:
                    return (f"{path} reaches `{node.attr}` (`{_source(node)}`): no environment, file, process or "
                            "network access from a kernel (rule 3)")
                if node.attr in _INTERNALS:
                    return f"{path} uses the interpreter internal `{node.attr}` (`{_source(node)}`) (rule 3)"
                name = _dotted(node, aliases)
                if name is not None and name not in base_dotted and (d := _denied_torch(name)) is not None:
                    return f"{path} uses {name}: {d} runs code outside the kernel; write the kernel instead"
            elif isinstance(node, ast.Name) and node.id in _INTERNALS:
                return f"{path} uses the interpreter internal `{node.id}` (rule 3)"
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in called \
                    and node.id in (_DENIED_CALLS | {"getattr"} | _DENIED_NAMES) and node.id not in base_called:
                # Passed around rather than called (functools.partial(getattr, ...), [eval][0](...)).
                return f"{path} passes `{node.id}` around: no dynamic code or attribute tricks in a kernel (rule 3)"
            if isinstance(node, ast.ImportFrom) and any(a.name in _DENIED_NAMES for a in node.names):
                return (f"{path} imports {', '.join(a.name for a in node.names if a.name in _DENIED_NAMES)}, which "
                        "evaluates text or looks names up at run time (rule 3)")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                fn = node.func.id
                if fn in _DENIED_CALLS and fn not in base_called:
                    return f"{path} calls `{fn}()`: no dynamic code, file or attribute tricks in a kernel (rule 3)"
                if fn == "getattr" and node.args and _is_module(node.args[0], aliases):
                    return (f"{path} calls getattr() on the module `{_source(node.args[0])}`: name what you use "
                            "(rule 3)")
                if fn == "getattr" and fn not in base_called and not (
                        len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                        and isinstance(node.args[1].value, str) and not node.args[1].value.startswith("_")):
                    return (f"{path} calls getattr() with a computed or private name: name what you use "
                            "(rule 3)")
    return None


def _is_module(node: ast.AST, aliases: Mapping[str, str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in aliases
    return isinstance(node, ast.Attribute) and _dotted(node, aliases) is not None


def _source(node: ast.AST) -> str:
    try:
        return ast.unparse(node)[:80]
    except Exception:  # an odd node: the name of its type will do
        return type(node).__name__


def _jit_functions(module: ast.Module, aliases: Mapping[str, str]) -> set[str]:
    """Names of the module's functions decorated by triton.jit (directly or under autotune/heuristics)."""
    out = set()
    for node in ast.walk(module):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                fn = d.func if isinstance(d, ast.Call) else d
                if _dotted(fn, aliases) in ("triton.jit", "triton.language.jit"):
                    out.add(node.name)
    return out


def _host_functions(module: ast.Module, jit: set[str]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(module):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in jit:
            yield node


def _host_nodes(module: ast.Module, jit: set[str]) -> Iterator[ast.AST]:
    """Every node outside the bodies of @triton.jit functions (those are Triton, not torch)."""
    stack: list[ast.AST] = [module]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef) and node.name in jit:
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _launches(module: ast.Module, jit: set[str], entry: str | None) -> bool:
    """Whether code reachable from ``entry`` (any host code when None) launches a jit kernel: ``k[grid](...)``."""
    functions = {f.name: f for f in module.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    classes = {c.name: c for c in module.body if isinstance(c, ast.ClassDef)}
    todo: list[ast.AST]
    if entry is None:
        todo = [module]
    elif entry in classes:
        todo = [classes[entry]]
    elif entry in functions:
        todo = [functions[entry]]
    else:
        return False
    seen: set[str] = set()
    while todo:
        node = todo.pop()
        for sub in ast.walk(node):
            # kernel[grid](...), launcher = kernel[grid], kernel.run(...): any of them reaches the kernel.
            k = sub.value if isinstance(sub, ast.Subscript) else sub.value if (
                isinstance(sub, ast.Attribute) and sub.attr in ("run", "warmup")) else None
            name = k.id if isinstance(k, ast.Name) else k.attr if isinstance(k, ast.Attribute) else ""
            if name in jit:
                return True
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id not in seen:
                seen.add(sub.func.id)
                if sub.func.id in functions and sub.func.id not in jit:
                    todo.append(functions[sub.func.id])
    return False


def _triton_shape(modules: Mapping[str, ast.Module], entry_file: str, entry_symbol: str) -> tuple[bool, bool]:
    """(defines a jit kernel anywhere, the entry point launches one from its own file)."""
    has_jit = launched = False
    for path, m in modules.items():
        jit = _jit_functions(m, import_aliases(m))
        has_jit |= bool(jit)
        if path == entry_file and jit:
            launched = _launches(m, jit, entry_symbol)
    return has_jit, launched


def _language(cand_sol: Solution, base_sol: Solution, cand: Mapping[str, ast.Module],
              base: Mapping[str, ast.Module], language: str) -> str | None:
    if language == "triton":
        b_jit, b_launch = _triton_shape(base, base_sol.entry_file, base_sol.entry_symbol)
        c_jit, c_launch = _triton_shape(cand, cand_sol.entry_file, cand_sol.entry_symbol)
        if b_jit and not c_jit:
            return ("the target is a Triton kernel and the candidate defines no @triton.jit kernel any more: "
                    "keep the computation in a Triton kernel (rule 5)")
        if b_launch and not c_launch:
            return (f"`{cand_sol.entry_symbol}` no longer launches a @triton.jit kernel (`kernel[grid](...)`): the "
                    "computation must stay in the Triton kernel (rule 5)")
    if language == "cuda" and _has_global(base_sol) and not _has_global(cand_sol):
        return ("the target is a CUDA kernel and the candidate has no __global__ kernel any more: keep the "
                "computation in CUDA (rule 5)")
    return None


def _calls(module: ast.Module, jit: set[str]) -> tuple[set[str], set[str], bool]:
    """(resolved dotted names called, method names called on values that are not modules, uses `@`) in
    host code."""
    aliases = import_aliases(module)
    names, methods, matmul = set(), set(), False
    for node in _host_nodes(module, jit):
        if isinstance(node, ast.Call):
            name = _dotted(node.func, aliases)
            if name is not None:
                names.add(name)
            elif isinstance(node.func, ast.Attribute):
                methods.add(node.func.attr)
            elif isinstance(node.func, ast.Name) and node.func.id in aliases:
                names.add(aliases[node.func.id])
        elif isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, ast.MatMult):
            matmul = True
    return names, methods, matmul


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _neutral_torch(name: str) -> bool:
    return (name.startswith(_NEUTRAL_TORCH_PREFIXES) or _short(name) in _NEUTRAL_TORCH
            or not name.startswith("torch."))


def _delegation(cand: Mapping[str, ast.Module], base: Mapping[str, ast.Module], ref: ast.Module | None,
                language: str) -> str | None:
    b_names, b_methods, b_matmul = set(), set(), False
    for m in base.values():
        n, me, mm = _calls(m, _jit_functions(m, import_aliases(m)))
        b_names |= n
        b_methods |= me
        b_matmul |= mm
    r_names, r_methods, r_matmul = _calls(ref, set()) if ref is not None else (set(), set(), False)
    # The reference's library calls (torch's, or another package's); not its math.sqrt for a scale.
    r_names = {n for n in r_names if n.split(".")[0] not in _SAFE_MODULES - {"torch"}
               and not (n.startswith("torch.") and _neutral_torch(n))}
    kernel_target = language in ("triton", "cuda")
    for path, m in cand.items():
        names, methods, matmul = _calls(m, _jit_functions(m, import_aliases(m)))
        for name in sorted(names - b_names):
            if name in r_names or (_short(name) in {_short(r) for r in r_names} and name.startswith("torch.")):
                return (f"{path} calls {name}, which the reference uses to compute the result: the speedup must come "
                        "from the kernel, not from the library (rule 5)")
            if kernel_target and name.startswith("torch.") and not _neutral_torch(name):
                return (f"{path} computes with {name} in host code: in a {language} target the computation stays in "
                        "the kernel; host code may only allocate, view and launch (rule 5)")
        for meth in sorted(methods - b_methods - _NEUTRAL_METHODS):
            if meth in r_methods or (kernel_target and meth in _COMPUTE_METHODS) or (
                    meth in {_short(r) for r in r_names} and meth in _COMPUTE_METHODS):
                return (f"{path} calls the tensor method .{meth}() in host code: the computation stays in the kernel "
                        "(rule 5)")
        if matmul and not b_matmul and (r_matmul or kernel_target):
            return f"{path} multiplies matrices with `@` in host code: the speedup must come from the kernel (rule 5)"
    return None


def _signature(cand: Solution, base: Solution) -> str | None:
    if _ext(base.entry_file) == ".py":
        b = _parse(base.source(base.entry_file)) if base.entry_file in [s.path for s in base.sources] else None
        c = _parse(cand.source(cand.entry_file)) if cand.entry_file in [s.path for s in cand.sources] else None
        if b is None or c is None:
            return None
        bf, cf = _entry_def(b, base.entry_symbol), _entry_def(c, cand.entry_symbol)
        if isinstance(bf, ast.ClassDef):
            for meth in ("__init__", "forward", "__call__"):
                bm, cm = _method(bf, meth), _method(cf, meth) if isinstance(cf, ast.ClassDef) else None
                if bm is not None and (cm is None or _params(bm) != _params(cm)):
                    return (f"`{base.entry_symbol}.{meth}` must keep its parameters `({_params_text(bm)})` "
                            "(rule 1)")
            return None
        if isinstance(bf, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not isinstance(cf, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return None  # rebound by assignment or import: the entry-point check before this one judged it
            if _params(bf) != _params(cf):
                return (f"`{base.entry_symbol}` must keep its signature `({_params_text(bf)})`, not "
                        f"`({_params_text(cf)})` (rule 1)")
        return None
    if base.spec.launch is not None:
        b_params, c_params = _c_params(base, base.entry_symbol), _c_params(cand, cand.entry_symbol)
        if b_params is not None and b_params != c_params:
            return (f"the kernel `{base.entry_symbol}` must keep its parameter list `({b_params})`: kernelpro "
                    "launches it with those arguments (rule 1)")
    return None


def _entry_def(module: ast.Module, symbol: str) -> ast.AST | None:
    hit = None
    for node in module.body:  # the last definition wins, as at import time
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == symbol:
            hit = node
    return hit


def _method(cls: ast.ClassDef, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    return next((n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
                None)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[object, ...]:
    a = fn.args
    return (tuple(x.arg for x in (*a.posonlyargs, *a.args)), a.vararg is not None, tuple(x.arg for x in a.kwonlyargs),
            a.kwarg is not None, len(a.defaults))


def _params_text(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return ast.unparse(fn.args)


# --------------------------------------------------------------------------- C/C++


def _c_sources(solution: Solution) -> str:
    # Comments out, literals kept: a rule never fires on a comment.
    return "\n".join(without_comments(s.content) for s in solution.sources
                     if _ext(s.path) in _C_EXTENSIONS)


def _has_global(solution: Solution) -> bool:
    return "__global__" in _c_sources(solution)


def _c_rules(cand: Solution, base: Solution) -> str | None:
    c, b = _c_sources(cand), _c_sources(base)
    if not c:
        return None
    b_lib = {m.group(1) for m in _C_LIBRARY.finditer(b)}
    for m in _C_LIBRARY.finditer(c):
        if m.group(1) not in b_lib:
            return (f"the C/C++ source calls {m.group(1)}(): a library routine does not make the kernel faster; "
                    "write the kernel (rule 5)")
    b_sys = {m.group(0) for m in _C_SYSTEM.finditer(b)}
    for m in _C_SYSTEM.finditer(c):
        if m.group(0) not in b_sys:
            return f"the C/C++ source uses `{m.group(0).strip()}`: no environment, file, process or network access (rule 3)"
    return None


def _c_params(solution: Solution, symbol: str) -> str | None:
    pat = re.compile(rf"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                     rf"{re.escape(symbol)}\s*\(([^)]*)\)")
    m = pat.search(_c_sources(solution))
    return None if m is None else " ".join(m.group(1).split())
