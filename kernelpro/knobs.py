"""Triton launch-parameter knobs, found and rewritten on the AST of a Python source file.

This is the pure, source-level half of the deterministic tuner: it never imports or runs the
code it reads. A knob is one integer literal (or one missing launch keyword) that sets a launch
parameter of a ``kernel[grid](...)`` call: a block/tile size, ``num_warps`` or ``num_stages``.

Launch values a repository computes are knobs too, changed as a rule a reviewer reads, never
replaced by one literal for every shape:

* ``BLOCK_SIZE, num_warps = calculate_settings(n)`` (or any single computed assignment): a line
  right after it scales the heuristic, ``num_warps = min(num_warps * 2, 32)`` (knob ``f:num_warps.scale``,
  value the log2 factor). A value assigned twice (two branches) is scaled where it is passed
  instead, for warps only: ``num_warps=min(num_warps * 2, 32)``.
* The literals of a computed value, ``num_warps = max(8, min(32, block // 256))``: its floor, cap
  and power-of-two divisor (``.floor``, ``.cap``, ``.div``); a launch expression without any is scaled.
* ``@triton.autotune``: the ints of each ``triton.Config`` in a literal list (``autotune[i].num_warps``),
  and the ends of each literal value list a config comprehension iterates (``autotune.BLOCK_N.max``:
  extend or prune the list; equal ends pin it). The decorator stays.
* A shape-bounded pin of such a list (two configs or more, under a ``key`` of names): ``autotune.pin``
  (which config, 0 for none) and ``autotune.pin.N`` per key axis (up to which size). It is written as a
  commented ``prune_configs_by`` that returns that config alone within the bounds and the whole list
  past them, so shapes beyond the bound keep the autotuner's choice. Within the bounds Triton 3.9 runs
  the one config without a benchmark; Triton 3.6 (the H200's) still times it once per key, then runs it.
  Reordering is not a knob: Triton's autotuner times every config it keeps and takes the fastest, so
  the order of a list changes only which of two equally fast configs wins; the pin picks by position.
* ``@triton.heuristics``: a tile's (``BLOCK*``, fla's ``BK``) or ``num_warps``' lambda, by its
  literals or scaled in place.

:func:`explain` says, for a launch value that is none of these, which construct hid it.

Rewrites splice new digits into the original text at the literal's exact position instead of
unparsing the AST, so comments, quoting and layout survive and the diff a reviewer sees is the
few characters that changed.

Limitations (all of them err towards finding fewer knobs, never towards an unsafe edit):

* Only keyword arguments of a launch are considered; a block size passed positionally is not.
* A launch argument that is a name is followed only to exactly one binding in the scope Python
  would look it up in: ``NAME = <int literal>`` (or ``A, B = 128, 4``) is edited, one computed
  assignment is scaled. Block sizes bound twice, function parameters (even with a literal
  default) and attributes (``self.BLOCK``) are not knobs: editing one binding of several, or a
  default a caller may override, would not reliably change what the launch receives.
* Launches of kernels decorated with ``@triton.autotune`` (or wrapped as ``triton.autotune(...)(fn)``)
  in the same file are skipped, because autotune owns their configuration: its config list is
  the knob. A kernel imported from another file cannot be inspected, so if it is autotuned its
  launch keywords still show up. Config lists read from a variable or built by a helper are not
  knobs (``explain`` names them).
* Any ``tl.constexpr`` parameter of a same-file kernel that is passed a power of two >= 16 is
  treated as a block size, even when it is really a problem dimension (``HEAD_DIM=64``); the
  tuner's correctness check is what rejects such moves.
* Block-size choices are a window around the value found in the source, so calling
  ``find_knobs`` again on a rewritten file can offer a shifted window; search from the
  original file's knobs.
* A literal launch argument is edited on its own: a grid written with a second, separate
  literal (``grid = (n // 1024,)`` next to ``BLOCK_SIZE=1024``) is not kept in step.
"""

from __future__ import annotations

import ast
import bisect
import functools
import io
import math
import re
import tokenize
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from .pysource import dotted, import_aliases, triton_decorator

__all__ = [
    "DEFAULT_NUM_STAGES",
    "DEFAULT_NUM_WARPS",
    "Knob",
    "KnobError",
    "apply_knobs",
    "explain",
    "find_knobs",
    "neighbours",
    "whole_range",
]

# Triton 3.x CUDA backend defaults (triton/backends/nvidia/compiler.py, CUDAOptions). A launch
# that omits the keyword runs with these, so they are the honest "current value" of that knob.
DEFAULT_NUM_WARPS = 4
DEFAULT_NUM_STAGES = 3

NUM_WARPS_CHOICES: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
NUM_STAGES_CHOICES: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
BLOCK_MIN = 16
BLOCK_MAX = 16384
# How far (as a factor) a block size may move from the value the author wrote: beyond that the
# kernel's register/shared-memory use changes so much that the move is almost never a win.
BLOCK_SPREAD = 64

# Names that read as tile sizes: BLOCK, BLOCK_SIZE_N, TILE_K, and suffixed forms such as
# XBLOCK / R0_BLOCK / BLOCK_SIZE_M that Inductor-style and hand-written kernels use.
_BLOCK_PREFIX = re.compile(r"^(BLOCK|TILE)(_[A-Z0-9]+)*$")
_BLOCK_SUFFIX = re.compile(r"_?BLOCK(_SIZE)?(_[A-Z0-9])?$")
# Counts of blocks are not block sizes, even though they end in BLOCK.
_COUNT_NAME = re.compile(r"^(NUM|N)_|COUNT")

_MODULE = "<module>"


SiteT = TypeVar("SiteT")


class KnobError(ValueError):
    """A knob setting names an unknown knob or a value outside the knob's choices."""


@dataclass(frozen=True)
class Knob:
    """One tunable launch parameter found in a source file."""

    name: str
    """Stable id: enclosing function qualname (or ``<module>``) ``:`` parameter, e.g. ``swiglu:BLOCK_SIZE``."""
    kind: str
    """``block`` (a power-of-two tile/block size), ``num_warps``, ``num_stages`` or ``divisor`` (a power
    of two a computed launch value is divided by: ``num_warps = block // 256``)."""
    value: int
    """Current value in the source (Triton's default when the keyword is absent)."""
    choices: tuple[int, ...]
    """Allowed values, sorted ascending; always contains ``value``."""
    line: int
    """1-based line of the literal that holds the value (or where a missing keyword goes)."""
    rule: str = ""
    """How a value that is not a literal is written: ``scale`` (the value is a log2 factor on a computed
    launch value: 1 doubles it, -1 halves it), ``list`` (an end of an autotune value list), ``pin`` (which
    autotune config runs alone, 0 for none, or up to which size of each key axis; see :func:`_pin_text`);
    empty for a literal."""


@dataclass(frozen=True)
class _Site:
    """Where in the source text a knob's value lives."""

    start: int
    """Character offset of the literal, or of the insertion point for a missing keyword."""
    end: int
    """Character offset just past the literal; equal to ``start`` for an insertion."""
    keyword: str | None = None
    """Keyword to insert (``num_warps``/``num_stages``); None when a literal is replaced."""
    lead: str = ""
    """Text before the inserted ``keyword=value`` (a separating comma when one is needed)."""
    trail: str = ""
    """Text after the inserted keyword (keeps an existing trailing comma style)."""
    rule: str = ""
    """``line`` (an adjustment line after a computed binding), ``expr`` (a computed expression wrapped
    in place), ``list`` (an autotune value list), ``pin`` (an autotune pin's ``prune_configs_by``, or where
    one goes); empty for a literal or a keyword insertion."""
    base: str = ""
    """``line``: the variable; ``expr``: the source text of the unscaled expression; ``list``: ``min``/``max``;
    ``pin``: ``pin`` or ``pin.<axis>``."""
    kind: str = ""
    """Knob kind, which picks how a scale is written (warps are capped at 32, blocks floored at 16)."""
    indent: str = ""
    """``line``: indentation of the binding; ``list``: the list's opening and closing brackets."""
    lo: int = 0
    """``line``: order of the variable in its binding (lines inserted together follow it); ``list``: its smallest value."""
    hi: int = 0
    """``list``: its largest value."""
    pin: _Pin | None = None
    """``pin``: the autotune decorator's pin as found (none pinned: index 0, default bounds)."""


@dataclass(frozen=True)
class _Pin:
    """A shape-bounded pin of an ``@triton.autotune`` config list: below the bounds of its key axes the
    autotuner runs one config without benchmarking (``prune_configs_by`` returns it alone); above, it
    autotunes the whole list as written."""

    axes: tuple[str, ...]
    """The decorator's ``key`` names, the shape axes the bounds apply to."""
    index: int
    """1-based position of the pinned config in the list the autotuner builds; 0 when nothing is pinned."""
    bounds: tuple[int, ...]
    """Per axis, the largest value the pin covers (PIN_BOUND_DEFAULT each when nothing is pinned)."""
    descs: tuple[str, ...]
    """Each config of the list, in the autotuner's order, as a reviewer reads it."""
    indent: str | None
    """Indentation of the lines the pin is written on (a comment, then the keyword); None: written
    inline after ``key=[...]`` without a comment."""


@dataclass
class _Scope:
    """A Python name scope, with every binding of each name made directly in it."""

    kind: str
    """``module``, ``function`` or ``class``."""
    qualname: str
    """Dotted name used in knob ids; ``<module>`` for the module."""
    parent: _Scope | None
    """Enclosing scope; None for the module."""
    bindings: dict[str, list[ast.Constant | ast.Assign | None]] = field(default_factory=dict)
    """Name -> one entry per binding: the int literal for ``X = 128``, the statement for a computed
    ``X = f(n)`` (or ``X, Y = f(n)``), else None."""
    adjusts: dict[int, ast.Assign] = field(default_factory=dict)
    """Line -> a tuner adjustment ``X = min(X * 2, 32)`` made there (also one of X's bindings)."""
    globals: set[str] = field(default_factory=set)
    """Names declared ``global`` here."""
    nonlocals: set[str] = field(default_factory=set)
    """Names declared ``nonlocal`` here."""


@dataclass
class _Kernel:
    """What the file says about one ``@triton.jit`` function."""

    jit: bool = False
    """Decorated with ``triton.jit`` (or wrapped by it)."""
    autotuned: bool = False
    """Wrapped by ``triton.autotune``; its launches are not ours to tune."""
    constexprs: set[str] = field(default_factory=set)
    """Parameters annotated ``tl.constexpr``."""


def _is_int_literal(node: ast.AST) -> bool:
    # bool is a subclass of int, but True/False flags are never sizes.
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    )


def _dotted_tail(node: ast.AST) -> str | None:
    """Last component of ``a.b.c`` / ``c``; looks through a call so ``jit(...)`` counts."""
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_constexpr_annotation(node: ast.expr | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(".")[-1].strip() == "constexpr"
    return _dotted_tail(node) == "constexpr"


def _is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0


def _looks_like_block(name: str) -> bool:
    upper = name.upper()
    if _COUNT_NAME.search(upper):
        return False
    return bool(_BLOCK_PREFIX.match(upper) or _BLOCK_SUFFIX.search(upper))


def _choices(kind: str, value: int) -> tuple[int, ...]:
    if kind == "num_warps":
        base: Iterable[int] = NUM_WARPS_CHOICES
    elif kind == "num_stages":
        base = NUM_STAGES_CHOICES
    else:
        lo = max(BLOCK_MIN, value // BLOCK_SPREAD)
        hi = min(BLOCK_MAX, value * BLOCK_SPREAD)
        base = (1 << k for k in range(BLOCK_MAX.bit_length()) if lo <= 1 << k <= hi)
    # The current value is always allowed, so writing back what is there is a no-op.
    return tuple(sorted({*base, value}))


class _Text:
    """Maps ast positions (1-based line, UTF-8 byte column) to offsets in the source string."""

    def __init__(self, source: str) -> None:
        self.source = source
        # Only \r\n, \r and \n end lines for the Python tokenizer; str.splitlines would also
        # split on form feeds and other characters that can appear inside a line.
        self.starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", source)]
        self._tokens: list[tokenize.TokenInfo] | None = None
        self._token_ends: list[int] = []

    def offset(self, lineno: int, col: int) -> int:
        start = self.starts[lineno - 1]
        end = self.starts[lineno] if lineno < len(self.starts) else len(self.source)
        line = self.source[start:end]
        if line.isascii():
            return start + col
        return start + len(line.encode("utf-8")[:col].decode("utf-8", errors="ignore"))

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)

    def _significant_tokens(self) -> list[tokenize.TokenInfo]:
        if self._tokens is None:
            skip = {
                tokenize.COMMENT,
                tokenize.NL,
                tokenize.NEWLINE,
                tokenize.INDENT,
                tokenize.DEDENT,
                tokenize.ENDMARKER,
            }
            # newline="" keeps \r\n and lone \r intact, matching self.starts.
            reader = io.StringIO(self.source, newline="").readline
            self._tokens = [t for t in tokenize.generate_tokens(reader) if t.type not in skip]
            # tokenize columns are characters already, unlike ast's byte columns.
            self._token_ends = [self.starts[t.end[0] - 1] + t.end[1] for t in self._tokens]
        return self._tokens

    def last_token_before(self, offset: int) -> tuple[str, int]:
        """The last significant token ending at or before ``offset``: (text, end offset)."""
        tokens = self._significant_tokens()
        i = bisect.bisect_right(self._token_ends, offset) - 1
        return tokens[i].string, self._token_ends[i]


def _store_names(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store | ast.Del):
            yield sub.id


class _Collector(ast.NodeVisitor):
    """One pass over the module: scopes with their bindings, kernels, and launch calls."""

    def __init__(self, aliases: dict[str, str]) -> None:
        self.aliases = aliases  # the module's imports: which decorators are Triton's
        self.module = _Scope("module", _MODULE, None)
        self.scope = self.module
        self.kernels: dict[str, _Kernel] = {}
        self.plain: set[str] = set()  # functions defined here that no Triton decorator makes a kernel
        self.launches: list[tuple[ast.Call, _Scope]] = []

    # -- bindings ---------------------------------------------------------------------------

    def _bind(self, name: str, literal: ast.Constant | ast.Assign | None) -> None:
        scope = self.scope
        if name in scope.globals:
            scope = self.module
        elif name in scope.nonlocals:
            # A nonlocal rebinding makes the enclosing function's name unusable as a knob; the
            # nearest enclosing function is where Python would usually find it.
            outer = scope.parent
            while outer is not None and outer.kind != "function":
                outer = outer.parent
            scope = outer or self.module
            literal = None
        scope.bindings.setdefault(name, []).append(literal)

    def visit_Assign(self, node: ast.Assign) -> None:
        handled: set[int] = set()
        if len(node.targets) == 1:
            target = node.targets[0]
            pairs: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(target, ast.Name):
                pairs = [(target, node.value)]
            elif (
                isinstance(target, ast.Tuple | ast.List)
                and isinstance(node.value, ast.Tuple | ast.List)
                and len(target.elts) == len(node.value.elts)
                and not any(isinstance(e, ast.Starred) for e in (*target.elts, *node.value.elts))
            ):
                pairs = list(zip(target.elts, node.value.elts, strict=True))
            for tgt, val in pairs:
                if isinstance(tgt, ast.Name) and _is_int_literal(val):
                    assert isinstance(val, ast.Constant)
                    self._bind(tgt.id, val)
                    handled.add(id(tgt))
        # A plain `X = f(n)` / `X, Y = f(n)` is a computed binding the tuner can adjust after it;
        # every other name this statement stores (chained targets, starred or nested unpacking) is
        # a non-literal binding, which disqualifies the name as a knob.
        computed = len(node.targets) == 1 and (
            isinstance(node.targets[0], ast.Name)
            or (isinstance(node.targets[0], ast.Tuple) and all(isinstance(e, ast.Name) for e in node.targets[0].elts))
        )
        if computed and isinstance(node.targets[0], ast.Name) and _unscaled(node.value, node.targets[0].id):
            self.scope.adjusts[node.lineno] = node
        for target in node.targets:
            for sub in ast.walk(target):
                if (
                    isinstance(sub, ast.Name)
                    and isinstance(sub.ctx, ast.Store)
                    and id(sub) not in handled
                ):
                    self._bind(sub.id, node if computed else None)
        self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if isinstance(node.target, ast.Name) and node.value is not None:
            literal = node.value if _is_int_literal(node.value) else None
            assert literal is None or isinstance(literal, ast.Constant)
            self._bind(node.target.id, literal)
        elif not isinstance(node.target, ast.Name):
            self.visit(node.target)
        if node.value is not None:
            self.visit(node.value)

    def visit_Name(self, node: ast.Name) -> None:
        # Reached only for stores outside visit_Assign: for-targets, with-as, augmented
        # assignment, walrus, del.
        if isinstance(node.ctx, ast.Store | ast.Del):
            self._bind(node.id, None)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._bind(alias.asname or alias.name.split(".")[0], None)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self._bind(alias.asname or alias.name, None)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(node.name, None)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.name:
            self._bind(node.name, None)
        self.generic_visit(node)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self._bind(node.name, None)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        if node.rest:
            self._bind(node.rest, None)
        self.generic_visit(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        # Lambdas (grid = lambda META: ...) are folded into the enclosing scope: their
        # parameters then count as extra bindings there, which can only hide a knob.
        for arg in _all_args(node.args):
            self._bind(arg.arg, None)
        self.generic_visit(node)

    # -- scopes -----------------------------------------------------------------------------

    def _child_qualname(self, name: str) -> str:
        return name if self.scope is self.module else f"{self.scope.qualname}.{name}"

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._bind(node.name, None)
        for deco in node.decorator_list:
            self.visit(deco)
        for default in (*node.args.defaults, *node.args.kw_defaults):
            if default is not None:
                self.visit(default)
        self._note_kernel(node)
        scope = _Scope("function", self._child_qualname(node.name), self.scope)
        for sub in _walk_own_scope(node.body):
            if isinstance(sub, ast.Global):
                scope.globals.update(sub.names)
            elif isinstance(sub, ast.Nonlocal):
                scope.nonlocals.update(sub.names)
        outer, self.scope = self.scope, scope
        for arg in _all_args(node.args):
            self._bind(arg.arg, None)
        for stmt in node.body:
            self.visit(stmt)
        self.scope = outer

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node.name, None)
        for expr in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(expr)
        scope = _Scope("class", self._child_qualname(node.name), self.scope)
        outer, self.scope = self.scope, scope
        for stmt in node.body:
            self.visit(stmt)
        self.scope = outer

    # -- kernels and launches ---------------------------------------------------------------

    def _note_kernel(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        tails = [triton_decorator(d, self.aliases) for d in node.decorator_list]
        if "jit" not in tails and "autotune" not in tails:
            self.plain.add(node.name)
            return
        kernel = self.kernels.setdefault(node.name, _Kernel())
        kernel.jit = kernel.jit or "jit" in tails
        kernel.autotuned = kernel.autotuned or "autotune" in tails
        for arg in _all_args(node.args):
            if _is_constexpr_annotation(arg.annotation):
                kernel.constexprs.add(arg.arg)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Subscript):
            self.launches.append((node, self.scope))
        self.generic_visit(node)


def _all_args(args: ast.arguments) -> list[ast.arg]:
    out = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    out += [a for a in (args.vararg, args.kwarg) if a is not None]
    return out


def _walk_own_scope(nodes: Sequence[ast.AST]) -> Iterator[ast.AST]:
    """Like ast.walk over ``nodes`` but not into nested functions, classes or lambdas."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


# Called by name inside a kernel, these never hold a loop of the kernel's own.
_LOOPLESS_BUILTINS = frozenset({"min", "max", "abs", "len", "int", "float", "bool", "print", "isinstance", "getattr"})


def loop_free(name: str, tree: ast.Module) -> bool | None:
    """Whether the module's function ``name`` runs no loop, itself or in the functions it calls
    that this module defines: True, False (a ``for``/``while``), or None where a call leaves the
    module (an imported helper may loop). Triton pipelines loops only: ``num_stages`` changes
    nothing in a loop-free kernel (Liger's SwiGLU on the H200: "no measurable effect" in every one of
    its 16 evaluations that moved it, session 23), so the tuner does not spend evaluations on it."""
    aliases = import_aliases(tree)
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    seen: set[str] = set()

    def free(fn: str) -> bool | None:
        if fn in seen:
            return True  # recursion: the first visit decides
        seen.add(fn)
        verdict: bool | None = True
        for node in ast.walk(defs[fn]):
            if isinstance(node, ast.For | ast.AsyncFor | ast.While | ast.comprehension):
                return False
            if not isinstance(node, ast.Call):
                continue
            parts = dotted(node.func)
            if parts is None:
                continue  # a method of a value: x.to(...), tl.load(...).cast(...)
            head = parts[0]
            if head in aliases:  # an import: Triton's own calls hold no loop of the kernel's
                if not (aliases[head] + "." + ".".join(parts[1:])).startswith("triton"):
                    verdict = None
            elif len(parts) > 1:
                continue  # a method of a local value
            elif head in defs:
                inner = free(head)
                if inner is False:
                    return False
                verdict = None if inner is None else verdict
            elif head not in _LOOPLESS_BUILTINS:
                verdict = None
        return verdict

    return free(name) if name in defs else None


def _mark_wrapped_kernels(tree: ast.Module, kernels: dict[str, _Kernel]) -> None:
    """``k = triton.autotune(configs=...)(triton.jit(f))`` autotunes ``k`` without a decorator."""
    aliases = import_aliases(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        tails: list[str | None] = []
        inner: ast.expr = node.value
        while isinstance(inner, ast.Call):
            tails.append(triton_decorator(inner.func, aliases))
            inner = inner.args[0] if inner.args else inner.func
        if "autotune" not in tails and "jit" not in tails:
            continue
        source = kernels.get(inner.id) if isinstance(inner, ast.Name) else None
        for name in _store_names(node):
            kernel = kernels.setdefault(name, _Kernel())
            kernel.jit = kernel.jit or "jit" in tails or bool(source and source.jit)
            kernel.autotuned = kernel.autotuned or "autotune" in tails
            if source is not None:
                kernel.autotuned = kernel.autotuned or source.autotuned
                kernel.constexprs |= source.constexprs


def _resolve(name: str, scope: _Scope, module: _Scope) -> tuple[ast.Constant, _Scope] | None:
    """The single int literal ``name`` is bound to as seen from ``scope``, with its scope."""
    found = _lookup(name, scope, module)
    if found is not None and len(found[0]) == 1 and isinstance(found[0][0], ast.Constant):
        return found[0][0], found[1]
    return None


def _lookup(name: str, scope: _Scope, module: _Scope) -> tuple[list[ast.Constant | ast.Assign | None], _Scope] | None:
    """Every binding of ``name`` in the scope Python finds it in from ``scope``, with that scope."""
    current: _Scope | None = scope
    first = True
    while current is not None:
        if current.kind == "class" and not first:
            # Python skips class bodies when resolving names inside methods.
            current = current.parent
            continue
        if name in current.globals:
            current = module
        bindings = current.bindings.get(name)
        if bindings is not None and name not in current.nonlocals:
            return bindings, current
        first = False
        current = current.parent
    return None


def _grid_names(grid: ast.expr, scope: _Scope, module: _Scope) -> set[str] | None:
    """The names a launch's grid reads, through one assignment of a name it reads (``grid = (n_rows,)``);
    None where it may read anything (a lambda over the launch's meta-parameters, a function or a parameter
    passed as the grid)."""
    if isinstance(grid, ast.Name):
        looked = _lookup(grid.id, scope, module)
        if looked is None or not all(isinstance(b, ast.Assign) for b in looked[0]):
            return None
    names: set[str] = set()
    for node in ast.walk(grid):
        if isinstance(node, ast.Lambda):
            return None
        if isinstance(node, ast.Name):
            names.add(node.id)
            looked = _lookup(node.id, scope, module)
            for b in looked[0] if looked is not None else ():
                if isinstance(b, ast.Assign):
                    if any(isinstance(n, ast.Lambda) for n in ast.walk(b.value)):
                        return None
                    names |= {n.id for n in ast.walk(b.value) if isinstance(n, ast.Name)}
    return names


def _looks_like_launch(call: ast.Call, kernel: _Kernel | None) -> bool:
    """Guard against ``handlers[key](x)``: only calls that read as Triton launches count."""
    if kernel is not None and kernel.jit:
        return True
    if any(
        kw.arg is not None and (kw.arg in ("num_warps", "num_stages") or _looks_like_block(kw.arg))
        for kw in call.keywords
    ):
        return True
    assert isinstance(call.func, ast.Subscript)
    grid = call.func.slice
    if isinstance(grid, ast.Tuple | ast.Lambda):
        return True
    for sub in ast.walk(grid):
        tail = _dotted_tail(sub) if isinstance(sub, ast.Name | ast.Attribute) else None
        if tail is not None and ("grid" in tail.lower() or tail == "cdiv"):
            return True
    return False


# Scale rules: a computed launch value is multiplied or divided by a power of two, never replaced by
# a literal, so the repository's own heuristic keeps choosing per shape and the diff reads as a rule.
SCALE_SHIFTS: tuple[int, ...] = (-2, -1, 0, 1, 2)
WARPS_MAX = 32
# Where a new autotune pin stops: a pin starts as "shapes up to 4096 along each key axis" (a typical
# hidden size), and the tuner moves that bound; the gate's guard shapes time both sides of it.
PIN_BOUND_DEFAULT = 4096
PIN_BOUNDS: tuple[int, ...] = tuple(1 << k for k in range(4, 25))


def _scaled(base: str, shift: int, kind: str) -> str:
    """``base`` (an expression's text) scaled by ``2**shift``: warps stay in 1..32, blocks >= 16."""
    if shift == 0:
        return base
    factor = 1 << abs(shift)
    if shift > 0:
        return f"min({base} * {factor}, {WARPS_MAX})" if kind == "num_warps" else f"{base} * {factor}"
    return f"max({base} // {factor}, {1 if kind == 'num_warps' else BLOCK_MIN})"


def _unscaled(node: ast.expr, var: str | None = None, kind: str | None = None) -> tuple[ast.expr, int] | None:
    """(base, shift) when ``node`` reads as ``_scaled(base, shift, kind)`` (``base`` the name ``var``
    when given; any kind when ``kind`` is None); else None."""

    def factor(n: ast.expr) -> int:
        return n.value.bit_length() - 1 if _is_int_literal(n) and n.value in (2, 4) else 0  # type: ignore[attr-defined]

    found: tuple[ast.expr, int] | None = None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult) and factor(node.right) and kind in (None, "block"):
        found = node.left, factor(node.right)
    elif (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2
        and not node.keywords and _is_int_literal(node.args[1]) and isinstance(node.args[0], ast.BinOp)
        and factor(node.args[0].right)
    ):
        inner, bound = node.args[0], node.args[1].value  # type: ignore[attr-defined]
        if node.func.id == "min" and isinstance(inner.op, ast.Mult) and bound == WARPS_MAX and kind in (None, "num_warps"):
            found = inner.left, factor(inner.right)
        floor = {None: (1, BLOCK_MIN), "num_warps": (1,), "block": (BLOCK_MIN,)}.get(kind, ())
        if node.func.id == "max" and isinstance(inner.op, ast.FloorDiv) and bound in floor:
            found = inner.left, -factor(inner.right)
    if found is not None and var is not None and not (isinstance(found[0], ast.Name) and found[0].id == var):
        return None
    return found


def _atom(text: str, node: ast.expr) -> str:
    """``text`` (the source of ``node``), parenthesised unless it binds tighter than ``*``."""
    simple = ast.Name | ast.Attribute | ast.Call | ast.Subscript | ast.Constant
    return text if isinstance(node, simple) else f"({text})"


def _span(text: _Text, node: ast.expr) -> tuple[int, int]:
    assert node.end_lineno is not None and node.end_col_offset is not None
    return text.offset(node.lineno, node.col_offset), text.offset(node.end_lineno, node.end_col_offset)


def _expr_site(node: ast.expr, kind: str, text: _Text) -> tuple[int, _Site]:
    """A computed expression scaled where it stands: (current shift, site)."""
    parsed = _unscaled(node, None, kind)
    base, shift = parsed if parsed is not None else (node, 0)
    b0, b1 = _span(text, base)
    start, end = _span(text, node)
    return shift, _Site(start, end, rule="expr", base=_atom(text.source[b0:b1], base), kind=kind)


def _line_site(var: str, bindings: list[ast.Constant | ast.Assign | None], owner: _Scope, kind: str,
               text: _Text) -> tuple[int, _Site] | str:
    """A computed binding ``var = f(n)`` adjusted by a line right after it: (current shift, site), or
    why it cannot be."""
    stmts = [b for b in bindings if isinstance(b, ast.Assign)]
    if len(stmts) != len(bindings):
        return f"`{var}` is a parameter, a loop variable or an import, whose value the caller or the loop sets"
    firsts = [b for b in stmts if b.lineno not in owner.adjusts]
    if len(firsts) != 1:
        return f"`{var}` is assigned {len(stmts)} times in `{owner.qualname}`, so no one assignment decides it"
    first = firsts[0]
    assert first.end_lineno is not None and first.end_col_offset is not None
    run: list[ast.Assign] = []
    line = first.end_lineno + 1
    while (adjust := owner.adjusts.get(line)) is not None and adjust.col_offset == first.col_offset:
        run.append(adjust)
        line = (adjust.end_lineno or line) + 1
    mine = [b for b in stmts if b is not first]
    if len(mine) > 1 or (mine and mine[0] not in run):
        return f"`{var}` is reassigned away from its computation in `{owner.qualname}`"
    start = text.offset(first.lineno, first.col_offset)
    indent = text.source[text.starts[first.lineno - 1] : start]
    last = run[-1] if run else first
    assert last.end_lineno is not None
    if indent.strip() or last.end_lineno >= len(text.starts):
        return f"the assignment of `{var}` shares its line with other code"
    after = text.offset(first.end_lineno, first.end_col_offset)
    rest = text.source[after : text.starts[first.end_lineno]]
    if rest.strip() and not rest.strip().startswith("#"):
        return f"the assignment of `{var}` shares its line with other code"
    newline = rest[len(rest.rstrip("\r\n")) :]
    target = first.targets[0]
    order = [e.id for e in target.elts].index(var) if isinstance(target, ast.Tuple) else 0  # type: ignore[attr-defined]
    shift = 0
    if mine:
        parsed = _unscaled(mine[0].value, var, kind)
        if parsed is None:
            return f"`{var}` is reassigned away from its computation in `{owner.qualname}`"
        shift = parsed[1]
        start, end = text.starts[mine[0].lineno - 1], text.starts[(mine[0].end_lineno or 0)]
    else:
        start = end = text.starts[last.end_lineno]
    return shift, _Site(start, end, trail=newline, rule="line", base=var, kind=kind, indent=indent, lo=order)


def _inner_knobs(expr: ast.expr, kind: str, text: _Text, label: str, prefix: str,
                 add: Callable[[str, str, str, int, _Site], None]) -> bool:
    """The literals a computed launch value is shaped by, as knobs: caps and floors (``min(x, 32)``,
    ``max(8, x)``) and power-of-two divisors (``n // 256``, ``triton.cdiv(n, 32)``). Editing one keeps
    the heuristic and moves where it saturates or how it grows, the rule a reviewer reads. True when
    any was found."""
    found = False
    for node in ast.walk(expr):
        pairs: list[tuple[str, ast.expr]] = []
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            pairs = [("cap" if node.func.id == "min" else "floor", a) for a in node.args]
        elif isinstance(node, ast.Call) and _dotted_tail(node.func) == "cdiv" and len(node.args) == 2:
            pairs = [("div", node.args[1])]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.FloorDiv | ast.RShift):
            pairs = [("div" if isinstance(node.op, ast.FloorDiv) else "shift", node.right)]
        for role, arg in pairs:
            if not _is_int_literal(arg) or role == "shift":
                continue
            value = arg.value  # type: ignore[attr-defined]
            knob_kind = "divisor" if role == "div" else kind
            if not _is_power_of_two(value) or (role == "div" and value < 2):
                continue
            if knob_kind == "num_warps" and value not in NUM_WARPS_CHOICES:
                continue
            add(label, f"{prefix}.{role}", knob_kind, value, _Site(*_span(text, arg)))
            found = True
    return found


def _computed_knobs(expr: ast.expr, kind: str, text: _Text, label: str, prefix: str,
                    add: Callable[[str, str, str, int, _Site], None]) -> None:
    """Knobs of a computed value written where it is used: its literals when it has some (the rule a
    reviewer reads), else a scale; an expression the tuner already scaled is read back as that scale."""
    if _unscaled(expr, None, kind) is not None or not _inner_knobs(expr, kind, text, label, prefix, add):
        add(label, f"{prefix}.scale", kind, *_expr_site(expr, kind, text))


def _list_style(kind: str, values: Sequence[int]) -> bool:
    """Whether ``values`` is what :func:`_list_values` writes for its ends: ascending doublings (pipeline
    stages: ascending by one)."""
    if not values or any(v <= 0 for v in values):
        return False
    return list(values) == _list_values(kind, values[0], values[-1])


def _list_values(kind: str, lo: int, hi: int) -> list[int]:
    out: list[int] = []
    v = lo
    while v <= hi:
        out.append(v)
        v = v + 1 if kind == "num_stages" else v * 2
    return out


def _config_role(elt: ast.expr) -> dict[str, tuple[str, str]]:
    """Variable -> (knob kind, config key) for the names a ``triton.Config(...)`` expression uses as a
    launch value."""
    roles: dict[str, tuple[str, str]] = {}
    if not isinstance(elt, ast.Call) or _dotted_tail(elt.func) != "Config":
        return roles
    if elt.args and isinstance(elt.args[0], ast.Dict):
        for k, v in zip(elt.args[0].keys, elt.args[0].values, strict=True):
            if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Name):
                roles[v.id] = ("block", k.value)
    for kw in elt.keywords:
        if kw.arg in ("num_warps", "num_stages") and isinstance(kw.value, ast.Name):
            roles[kw.value.id] = (kw.arg, kw.arg)
    return roles


def _config_descs(arg: ast.expr, text: _Text) -> tuple[str, ...] | None:
    """Each config of an autotune list in the order the autotuner builds it, as a reviewer reads it;
    None when the list is not literal (a variable, a helper's result, a filtered comprehension)."""
    if isinstance(arg, ast.List | ast.Tuple):
        if not arg.elts or not all(isinstance(e, ast.Call) and _dotted_tail(e.func) == "Config" for e in arg.elts):
            return None
        return tuple(" ".join((ast.get_source_segment(text.source, e) or "?").split()) for e in arg.elts)
    if not isinstance(arg, ast.ListComp | ast.GeneratorExp):
        return None
    roles = _config_role(arg.elt)
    combos: list[list[str]] = [[]]
    for gen in arg.generators:
        if gen.ifs or gen.is_async or not isinstance(gen.target, ast.Name) or not isinstance(gen.iter, ast.List | ast.Tuple):
            return None
        if not gen.iter.elts or not all(_is_int_literal(e) for e in gen.iter.elts):
            return None
        label = roles.get(gen.target.id, ("", gen.target.id))[1]
        # Comprehensions iterate the outer loop slowest, as itertools.product does.
        combos = [c + [f"{label}={e.value}"] for c in combos for e in gen.iter.elts]  # type: ignore[attr-defined]
    return tuple(", ".join(c) for c in combos)


def _read_pin(value: ast.expr, axes: Sequence[str]) -> tuple[int, tuple[int, ...]] | None:
    """(1-based config, bounds) when ``value`` is the ``prune_configs_by`` a pin writes (:func:`_pin_text`)
    over ``axes``; None for any other value, which is the repository's own and not a knob."""
    if not (isinstance(value, ast.Dict) and len(value.keys) == 1 and isinstance(value.keys[0], ast.Constant)
            and value.keys[0].value == "early_config_prune" and isinstance(value.values[0], ast.Lambda)):
        return None
    fn = value.values[0]
    if [a.arg for a in fn.args.args] != ["configs", "args"] or fn.args.kwarg is None or fn.args.kwarg.arg != "kw":
        return None
    body = fn.body
    if not (isinstance(body, ast.IfExp) and isinstance(body.orelse, ast.Name) and body.orelse.id == "configs"
            and isinstance(body.body, ast.List) and len(body.body.elts) == 1):
        return None
    pick = body.body.elts[0]
    if not (isinstance(pick, ast.Subscript) and isinstance(pick.value, ast.Name) and pick.value.id == "configs"
            and _is_int_literal(pick.slice) and pick.slice.value >= 0):  # type: ignore[attr-defined]
        return None
    tests = body.test.values if isinstance(body.test, ast.BoolOp) and isinstance(body.test.op, ast.And) else [body.test]
    bounds: list[int] = []
    for axis, test in zip(axes, tests, strict=False):
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.LtE)
                and _is_int_literal(test.comparators[0]) and isinstance(test.left, ast.Subscript)
                and isinstance(test.left.slice, ast.Constant) and test.left.slice.value == axis):
            return None
        bounds.append(test.comparators[0].value)  # type: ignore[attr-defined]
    if len(tests) != len(axes):
        return None
    return pick.slice.value + 1, tuple(bounds)  # type: ignore[attr-defined]


# How the comment above a pin this module wrote ends: today's wording first, then that of sessions
# before 11 ("without autotuning", untrue where Triton 3.6 still times the one config it keeps).
_PIN_SAYS = ("alone, measured fastest there", "without autotuning, measured fastest there")


def _pin_text(pin: _Pin, index: int, bounds: Sequence[int]) -> str:
    """The ``prune_configs_by`` keyword (after a comment saying what it does, on its own lines) that runs
    config ``index`` (1-based) alone for shapes within ``bounds``; empty for index 0 (nothing pinned)."""
    if index == 0:
        return ""
    if index > len(pin.descs):
        raise KnobError(f"an autotune pin of config {index} of a list of {len(pin.descs)}")
    test = " and ".join(f'{{**args, **kw}}["{a}"] <= {b}' for a, b in zip(pin.axes, bounds, strict=True))
    value = f'{{"early_config_prune": lambda configs, args, **kw: [configs[{index - 1}]] if {test} else configs}}'
    if pin.indent is None:
        return f", prune_configs_by={value}"
    where = " and ".join(f"{a} <= {b}" for a, b in zip(pin.axes, bounds, strict=True))
    comment = f"# {where}: configs[{index - 1}] ({pin.descs[index - 1]}) {_PIN_SAYS[0]}"
    return f"{pin.indent}{comment}\n{pin.indent}prune_configs_by={value},\n"


def _pin_site(deco: ast.Call, axes: tuple[str, ...], descs: tuple[str, ...], text: _Text) -> _Site | None:
    """Where the pin of an autotune decorator is, or goes (after its ``key=[...]``); None when the
    decorator has a ``prune_configs_by`` of its own or a layout the pin cannot be written into."""
    named = {kw.arg: kw for kw in deco.keywords if kw.arg}
    key = named["key"]
    k_start, k_end = _span(text, key.value)
    k_line = text.line_of(k_end)
    own = named.get("prune_configs_by")
    if own is not None:
        read = _read_pin(own.value, axes)
        if read is None:
            return None
        index, bounds = read
        p_start, p_end = _span(text, own.value)
        line = text.line_of(p_end)
        kw_start = text.offset(own.lineno, own.col_offset)
        indent = text.source[text.starts[own.lineno - 1] : kw_start]
        rest = text.source[p_end : text.starts[line] if line < len(text.starts) else len(text.source)]
        if not indent.strip() and line < len(text.starts) and rest.strip() == ",":
            start = text.starts[own.lineno - 1]
            above = text.source[text.starts[own.lineno - 2] : start].strip() if own.lineno >= 2 else ""
            if above.startswith("#") and above.endswith(_PIN_SAYS):  # the pin's own comment goes with it
                start = text.starts[own.lineno - 2]
            return _Site(start, text.starts[line], rule="pin", pin=_Pin(axes, index, bounds, descs, indent))
        if text.source[k_end:kw_start] == ", " and own.end_col_offset is not None:
            return _Site(k_end, p_end, rule="pin", pin=_Pin(axes, index, bounds, descs, None))
        return None
    default = (PIN_BOUND_DEFAULT,) * len(axes)
    indent = text.source[text.starts[key.lineno - 1] : text.offset(key.lineno, key.col_offset)]
    rest = text.source[k_end : text.starts[k_line] if k_line < len(text.starts) else len(text.source)]
    if not indent.strip() and k_line < len(text.starts) and re.fullmatch(r"\s*,\s*(#.*)?\s*", rest):
        at = text.starts[k_line]
        return _Site(at, at, rule="pin", pin=_Pin(axes, 0, default, descs, indent))
    if text.source[k_end : k_end + 1] in (",", ")") and k_start < k_end:
        return _Site(k_end, k_end, rule="pin", pin=_Pin(axes, 0, default, descs, None))
    return None


def _pin_knobs(fn: ast.FunctionDef | ast.AsyncFunctionDef, deco: ast.Call, arg: ast.expr | None, text: _Text,
               add: Callable[[str, str, str, int, _Site], None]) -> None:
    """Knobs of an autotune list's shape-bounded pin: ``autotune.pin`` (which config, 0 for none) and
    ``autotune.pin.<axis>`` (up to which size of each key axis it holds). Offered for literal lists of
    two configs or more under a ``key`` of literal names."""
    named = {kw.arg: kw.value for kw in deco.keywords if kw.arg}
    key = named.get("key")
    if arg is None or not isinstance(key, ast.List | ast.Tuple) or not key.elts:
        return
    if not all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in key.elts):
        return
    axes = tuple(e.value for e in key.elts)  # type: ignore[attr-defined]
    descs = _config_descs(arg, text)
    if descs is None or len(descs) < 2:
        return
    site = _pin_site(deco, axes, descs, text)
    if site is None or site.pin is None:
        return
    pin = site.pin
    add(fn.name, "autotune.pin", "config", pin.index, replace(site, base="pin"))
    for axis, bound in zip(axes, pin.bounds, strict=True):
        add(fn.name, f"autotune.pin.{axis}", "bound", bound, replace(site, base=f"pin.{axis}"))


_ALL_WARPS = {1, 2, 4, 8, 16, 32}  # every num_warps Triton launches with


def _binding_note(tree: ast.Module, iterable: ast.expr, key: str, text: _Text) -> str:
    """What a config list's values are when they come from a module constant bound once (fla's
    ``NUM_WARPS_AUTOTUNE = [1, 2, 4, 8, 16] if IS_AMD else [1, 2, 4, 8, 16, 32]``): the tuner edits only
    lists written in the decorator, and says so with the constant's line and value."""
    if not isinstance(iterable, ast.Name):
        return ""
    bound = [n for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
             and isinstance(n.targets[0], ast.Name) and n.targets[0].id == iterable.id]
    if len(bound) != 1:
        return ""
    value = bound[0].value
    shown = ast.get_source_segment(text.source, value) or "?"
    lists = [v for v in ((value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,))
             if isinstance(v, ast.List | ast.Tuple) and all(_is_int_literal(e) for e in v.elts)]
    full = key == "num_warps" and any({e.value for e in v.elts} >= _ALL_WARPS for v in lists)  # type: ignore[attr-defined]
    return (f" (a module constant, line {bound[0].lineno}: `{shown[:80]}`"
            + ("; it already holds every num_warps Triton takes, 1 to 32, so the autotuner tries them all" if full else "")
            + ")")


def _triton_decorators(tree: ast.Module) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, ast.Call, str, ast.expr | None]]:
    """(function, decorator, "autotune" or "heuristics", its configs or values argument) of every
    ``@triton.autotune(...)`` and ``@triton.heuristics(...)`` in ``tree``."""
    aliases = import_aliases(tree)
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in fn.decorator_list:
            tail = triton_decorator(deco, aliases)
            if isinstance(deco, ast.Call) and tail in ("autotune", "heuristics"):
                named = {kw.arg: kw.value for kw in deco.keywords if kw.arg}
                yield fn, deco, tail, named.get("configs" if tail == "autotune" else "values",
                                                deco.args[0] if deco.args else None)


def _decorator_knobs(tree: ast.Module, text: _Text, add: Callable[[str, str, str, int, _Site], None],
                     notes: list[str]) -> None:
    """Knobs of ``@triton.autotune`` config lists (values in ``triton.Config``s, the ends of the value
    lists a config comprehension iterates) and of ``@triton.heuristics`` values (scaled in place)."""
    for fn, deco, tail, arg in _triton_decorators(tree):
        where = f"`@triton.{tail}` of `{fn.name}` (line {deco.lineno})"
        if tail == "heuristics":
            if not isinstance(arg, ast.Dict):
                notes.append(f"{where}: its values are not a dict the tuner can read")
                continue
            for k, v in zip(arg.keys, arg.values, strict=True):
                key = k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else ""
                # fla names its tiles BK, BT, BV: a heuristic computes them from the problem sizes.
                tile = key and (_looks_like_block(key) or re.fullmatch(r"B[A-Z]{1,2}", key))
                kind = "num_warps" if key == "num_warps" else "block" if tile else ""
                # Literals inside the heuristic are its readable rule; without any, it is scaled.
                if kind and isinstance(v, ast.Lambda):
                    _computed_knobs(v.body, kind, text, fn.name, f"heuristics.{key}", add)
            continue
        _pin_knobs(fn, deco, arg, text, add)
        if isinstance(arg, ast.List | ast.Tuple) and arg.elts:
            for i, cfg in enumerate(arg.elts):
                if not isinstance(cfg, ast.Call) or _dotted_tail(cfg.func) != "Config":
                    continue
                pairs: list[tuple[str, str, ast.expr]] = [
                    (kw.arg, kw.arg, kw.value) for kw in cfg.keywords if kw.arg in ("num_warps", "num_stages")
                ]
                if cfg.args and isinstance(cfg.args[0], ast.Dict):
                    pairs += [("block", k.value, v) for k, v in zip(cfg.args[0].keys, cfg.args[0].values, strict=True)
                              if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                for kind, key, v in pairs:
                    if not _is_int_literal(v) or (kind == "block" and not _is_power_of_two(v.value)):  # type: ignore[attr-defined]
                        continue
                    start, end = _span(text, v)
                    add(fn.name, f"autotune[{i}].{key}", kind, v.value, _Site(start, end))  # type: ignore[attr-defined]
        elif isinstance(arg, ast.ListComp | ast.GeneratorExp):
            roles = _config_role(arg.elt)
            for gen in arg.generators:
                if not isinstance(gen.target, ast.Name) or gen.target.id not in roles:
                    continue
                kind, key = roles[gen.target.id]
                values = [e.value for e in gen.iter.elts if _is_int_literal(e)] if isinstance(gen.iter, ast.List | ast.Tuple) else []  # type: ignore[attr-defined]
                if not isinstance(gen.iter, ast.List | ast.Tuple) or len(values) != len(gen.iter.elts):
                    shown = ast.get_source_segment(text.source, gen.iter) or "?"
                    notes.append(f"{where}: `{key}` takes its values from `{shown[:60]}`, not a literal list"
                                 + _binding_note(tree, gen.iter, key, text))
                    continue
                if not _list_style(kind, values):
                    notes.append(f"{where}: the `{key}` values {values} are not consecutive "
                                 f"{'integers' if kind == 'num_stages' else 'powers of two'}")
                    continue
                start, end = _span(text, gen.iter)
                brackets = text.source[start] + text.source[end - 1]
                for end_name, value in (("min", values[0]), ("max", values[-1])):
                    site = _Site(start, end, rule="list", base=end_name, kind=kind, indent=brackets,
                                 lo=values[0], hi=values[-1])
                    add(fn.name, f"autotune.{key}.{end_name}", kind, value, site)
        else:
            code = ast.get_source_segment(text.source, arg) if arg is not None else "nothing"
            notes.append(f"{where}: its configs come from `{(code or '?')[:60]}`, which the tuner cannot "
                         "read (a list of triton.Config, or a comprehension over literal lists, it can)")


def autotune_sizes(source: str) -> dict[str, int]:
    """Configs each ``@triton.autotune`` of ``source`` lists, by kernel, where the tuner can count them (a
    literal list, or a comprehension over literal lists without conditions): what Triton compiles and
    benchmarks in every fresh process that first calls the kernel. Empty where ``source`` does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    sizes: dict[str, int] = {}
    for fn, _, tail, arg in _triton_decorators(tree):
        if tail != "autotune":
            continue
        if isinstance(arg, ast.List | ast.Tuple):
            sizes[fn.name] = len(arg.elts)
        elif isinstance(arg, ast.ListComp | ast.GeneratorExp) and all(
                isinstance(g.iter, ast.List | ast.Tuple) and not g.ifs for g in arg.generators):
            sizes[fn.name] = math.prod([len(g.iter.elts) for g in arg.generators if isinstance(g.iter, ast.List | ast.Tuple)])
    return sizes


def _scan(source: str) -> list[tuple[Knob, _Site]]:
    return _scan_notes(source)[0]


def _scan_notes(source: str) -> tuple[list[tuple[Knob, _Site]], list[str]]:
    """The knobs of ``source`` and, for each launch value that is not one, why."""
    tree = ast.parse(source)
    collector = _Collector(import_aliases(tree))
    collector.visit(tree)
    _mark_wrapped_kernels(tree, collector.kernels)
    text = _Text(source)
    notes: list[str] = []

    # Keyed by site (and, for lines inserted after one binding, by variable) so a constant shared
    # by two launches is one knob.
    Key = tuple[int, str | None, str]
    found: dict[Key, tuple[str, str, str, int, _Site]] = {}
    conflicting: set[Key] = set()
    # Block sizes that may only grow: every launch they reach covers a fixed extent per program with
    # one block (a loop-free kernel whose grid does not read the block). Liger's RMSNorm scaled below
    # its row was INCORRECT_NUMERICAL on the H200 (session 26): an evaluation spent on a known failure.
    grow_only: dict[Key, bool] = {}

    def add(label: str, param: str, kind: str, value: int, site: _Site, whole: bool = False) -> None:
        key = (site.start, site.keyword, site.base)
        grow_only[key] = grow_only.get(key, True) and whole
        if key in found:
            if found[key][2] != kind:
                conflicting.add(key)
            return
        found[key] = (label, param, kind, value, site)

    for call, scope in collector.launches:
        assert isinstance(call.func, ast.Subscript)
        kernel_name = _dotted_tail(call.func.value)
        kernel = collector.kernels.get(kernel_name) if kernel_name else None
        if kernel is not None and kernel.autotuned:
            continue
        if kernel is None and kernel_name in collector.plain:  # defined here, and not Triton's (@numba.jit)
            continue
        if not _looks_like_launch(call, kernel):
            continue
        given = {kw.arg for kw in call.keywords}
        # Once per launch, for a written num_stages and an inserted one alike.
        stageless = kernel_name is not None and loop_free(kernel_name, tree) is True
        grid = _grid_names(call.func.slice, scope, collector.module) if stageless else None
        for kw in call.keywords:
            if kw.arg is None:
                continue
            if kw.arg == "num_stages" and stageless:
                notes.append(f"`num_stages` of `{kernel_name}` in `{scope.qualname}` (line {kw.value.lineno}) is not "
                             f"tuned: the kernel has no loop for Triton to pipeline")
                continue
            if kw.arg in ("num_warps", "num_stages"):
                kind = kw.arg
                min_block = 0
            elif _looks_like_block(kw.arg):
                kind, min_block = "block", 1
            elif kernel is not None and kw.arg in kernel.constexprs:
                # Unnamed constexprs are only taken when tile-sized: small powers of two are
                # far more often flags, strides or counts than block sizes.
                kind, min_block = "block", BLOCK_MIN
            else:
                continue
            literal: ast.Constant | None = None
            owner = scope
            # One block per program over an extent the grid does not divide by it: smaller leaves part unwritten.
            here: Callable[[str, str, str, int, _Site], None] = add
            if kind == "block" and grid is not None and not ({n.id for n in ast.walk(kw.value) if isinstance(n, ast.Name)} & grid):
                here = functools.partial(add, whole=True)
            # Computed values are scaled, never replaced: named block sizes and warps only (an
            # unnamed constexpr may be a problem size, and stages do not scale).
            scalable = kind == "num_warps" or (kind == "block" and min_block == 1)
            shown = ast.get_source_segment(source, kw.value) or "?"
            where = f"`{kw.arg}={shown[:60]}` in `{scope.qualname}` (line {kw.value.lineno})"
            if _is_int_literal(kw.value):
                assert isinstance(kw.value, ast.Constant)
                literal = kw.value
            elif isinstance(kw.value, ast.Name):
                looked = _lookup(kw.value.id, scope, collector.module)
                bindings, owner = looked if looked is not None else ([], collector.module)
                if len(bindings) == 1 and isinstance(bindings[0], ast.Constant):
                    literal = bindings[0]
                elif not scalable:
                    # An unnamed constexpr is more often a problem size than a tile: not worth a note.
                    if min_block != BLOCK_MIN:
                        notes.append(f"{where}: a computed {kw.arg} is not tuned")
                    continue
                else:
                    made = _line_site(kw.value.id, bindings, owner, kind, text) if bindings else "not assigned in this file"
                    if isinstance(made, tuple):
                        here(owner.qualname, f"{kw.value.id}.scale", kind, *made)
                        first = next(b for b in bindings if isinstance(b, ast.Assign) and b.lineno not in owner.adjusts)
                        if isinstance(first.targets[0], ast.Name):
                            _inner_knobs(first.value, kind, text, owner.qualname, kw.value.id, here)
                    elif kind == "num_warps":
                        # Warps feed nothing but the launch, so scaling them where they are passed is safe.
                        here(scope.qualname, f"{kw.arg}.scale", kind, *_expr_site(kw.value, kind, text))
                    else:
                        notes.append(f"{where}: {made}")
                    continue
            elif scalable:
                _computed_knobs(kw.value, kind, text, scope.qualname, kw.arg, here)
                continue
            else:
                if min_block != BLOCK_MIN:
                    notes.append(f"{where}: a computed {kw.arg} is not tuned")
                continue
            if literal is None:
                continue
            value = literal.value
            assert isinstance(value, int)
            if kind == "block" and (not _is_power_of_two(value) or value < min_block):
                continue
            assert literal.end_lineno is not None and literal.end_col_offset is not None
            start = text.offset(literal.lineno, literal.col_offset)
            end = text.offset(literal.end_lineno, literal.end_col_offset)
            here(owner.qualname, kw.arg, kind, value, _Site(start, end))

        missing = [k for k in ("num_warps", "num_stages") if k not in given and not (k == "num_stages" and stageless)]
        # **kwargs may already carry num_warps; inserting it again would be a TypeError.
        if not missing or None in given:
            continue
        assert call.end_lineno is not None and call.end_col_offset is not None
        close = text.offset(call.end_lineno, call.end_col_offset) - 1
        if not call.args and not call.keywords:
            anchor, lead, trail = close, "", ""
        else:
            token, anchor = text.last_token_before(close)
            lead, trail = (" ", ",") if token == "," else (", ", "")
        for keyword in missing:
            value = DEFAULT_NUM_WARPS if keyword == "num_warps" else DEFAULT_NUM_STAGES
            site = _Site(anchor, anchor, keyword, lead, trail)
            add(scope.qualname, keyword, keyword, value, site)

    _decorator_knobs(tree, text, add, notes)

    knobs: list[tuple[Knob, _Site]] = []
    seen: dict[str, int] = {}
    # Source order (then num_warps before num_stages at one insertion point) makes the
    # "#2" suffixes of repeated ids independent of how the launches were discovered.
    order = {None: 0, "num_warps": 1, "num_stages": 2}
    for key in sorted(found, key=lambda k: (k[0], order[k[1]], found[k][4].lo, k[2])):
        if key in conflicting:
            continue
        label, param, kind, value, site = found[key]
        base = f"{label}:{param}"
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}#{seen[base]}"
        rule = {"line": "scale", "expr": "scale"}.get(site.rule, site.rule)
        if rule == "scale":
            choices = SCALE_SHIFTS
        elif rule == "pin":
            assert site.pin is not None
            choices = tuple(range(len(site.pin.descs) + 1)) if kind == "config" else PIN_BOUNDS
            choices = tuple(sorted({*choices, value}))
        elif rule == "list":
            choices = NUM_WARPS_CHOICES if kind == "num_warps" else _choices(kind, value)
            choices = tuple(sorted({*choices, value}))
        else:
            choices = _choices(kind, value)
        if grow_only.get(key) and kind == "block":
            choices = tuple(c for c in choices if c >= (min(value, 0) if rule == "scale" else value))
        knobs.append((Knob(name, kind, value, choices, text.line_of(site.start), rule), site))
    return knobs, notes


def explain(source: str) -> list[str]:
    """Why launch values of ``source`` that look tunable are not knobs (one sentence each, in the
    order met); empty when every one is. Raises SyntaxError if ``source`` does not parse."""
    return _scan_notes(source)[1]


def find_knobs(source: str) -> list[Knob]:
    """All tunable launch parameters in ``source``, in source order.

    Raises SyntaxError if ``source`` does not parse.
    """
    return [knob for knob, _ in _scan(source)]


def entry_roots(entry_source: str, symbol: str) -> frozenset[str]:
    """Names the entry point can reach in other files: its own symbol and every name the entry file
    imports with ``from ... import``."""
    roots = {symbol}
    for node in ast.walk(ast.parse(entry_source)):
        if isinstance(node, ast.ImportFrom):
            # The imported name is what the other file defines (an `as` alias is only local here).
            roots.update(a.name for a in node.names)
    return frozenset(roots)


def reachable_functions(source: str, roots: Iterable[str]) -> frozenset[str] | None:
    """Top-level functions of ``source`` that ``roots`` reach by referring to them by name, directly
    or through each other; None when ``source`` defines none of the roots (then nothing can be ruled
    out). A launch in a function the entry point never reaches (a backward pass beside the forward
    the PR's entry calls) is not a knob: changing it cannot change what the gate measures, and noise
    could let it through."""
    tree = ast.parse(source)
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    todo = [r for r in roots if r in defs]
    if not todo:
        return None
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs)
    return frozenset(seen)


def checked_edits(scanned: Mapping[str, tuple[Knob, SiteT]], settings: Mapping[str, int],
                  choices: Callable[[Knob], Collection[int]] | None = None) -> list[tuple[SiteT, int]]:
    """The (site, new value) edits ``settings`` asks of the knobs ``scanned`` in a source (Triton's
    or CUDA's); KnobError for an unknown knob or a value off its choices (``choices(knob)`` when
    given, else ``knob.choices``)."""
    edits: list[tuple[SiteT, int]] = []
    for name, value in settings.items():
        if name not in scanned:
            known = ", ".join(sorted(scanned)) or "none"
            raise KnobError(f"unknown knob {name!r} (known: {known})")
        knob, site = scanned[name]
        allowed = knob.choices if choices is None else choices(knob)
        if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
            raise KnobError(f"{value!r} is not a choice for knob {name!r}: {tuple(sorted(allowed))}")
        if value != knob.value:
            edits.append((site, value))
    return edits


def whole_range(knob: Knob) -> tuple[int, ...]:
    """Every value a chain of tuner moves can give ``knob``: its kind's whole range, where
    ``knob.choices`` is one move's window around the value in the source."""
    if knob.rule:  # a scale's or an autotune list's choices are its whole range already
        return knob.choices
    if knob.kind in ("block", "divisor"):
        base: Iterable[int] = (1 << k for k in range(BLOCK_MAX.bit_length()) if BLOCK_MIN <= 1 << k <= BLOCK_MAX)
        return tuple(sorted({*base, *knob.choices}))
    return knob.choices


def apply_knobs(source: str, settings: Mapping[str, int], *, lineage: bool = False) -> str:
    """``source`` with each knob named in ``settings`` set to its value.

    Knobs not named keep their value; a setting equal to the current value changes nothing, so
    applying the current values returns ``source`` unchanged. Raises KnobError for an unknown
    knob name or a value outside the knob's choices (with ``lineage``, outside :func:`whole_range`:
    the setting of a winner several moves away from this source).
    """
    scanned = {knob.name: (knob, site) for knob, site in _scan(source)}
    edits = checked_edits(scanned, settings, whole_range if lineage else None)

    result = source
    # Right to left so earlier offsets stay valid; inserts at one call point are merged so
    # num_warps and num_stages land in a single, well-punctuated keyword list.
    by_start: dict[int, list[tuple[_Site, int]]] = {}
    for site, value in edits:
        by_start.setdefault(site.start, []).append((site, value))
    for start in sorted(by_start, reverse=True):
        group = by_start[start]
        inserts = sorted(
            ((s, v) for s, v in group if s.keyword is not None),
            key=lambda sv: sv[0].keyword != "num_warps",
        )
        replaces = [(s, v) for s, v in group if s.keyword is None and s.rule == ""]
        ruled = [(s, v) for s, v in group if s.rule]
        if ruled:
            result = result[:start] + _render(ruled) + result[max(s.end for s, _ in ruled) :]
        for site, value in replaces:
            result = result[: site.start] + str(value) + result[site.end :]
        if inserts:
            first = inserts[0][0]
            body = ", ".join(f"{s.keyword}={v}" for s, v in inserts)
            result = result[:start] + first.lead + body + first.trail + result[start:]

    if result != source:
        result = _refresh_pins(result)
        _check_round_trip(result, scanned, settings)
    return result


def _refresh_pins(source: str) -> str:
    """``source`` with each autotune pin's comment describing the config it pins in the list as it is
    now (a setting that pins and moves a comprehension's ends at once changes which config that is);
    KnobError when the pinned position is past the list's end."""
    for knob, site in sorted(_scan(source), key=lambda ks: -ks[1].start):
        if site.pin is None or knob.kind != "config" or site.pin.index == 0:
            continue
        text = _pin_text(site.pin, site.pin.index, site.pin.bounds)
        if source[site.start : site.end] != text:
            source = source[: site.start] + text + source[site.end :]
    return source


def _render(group: Sequence[tuple[_Site, int]]) -> str:
    """The text of rule sites that start at one offset: adjustment lines after one binding (in the
    binding's order), one scaled expression, or one autotune list with its new ends."""
    first = group[0][0]
    if first.rule == "pin":
        assert first.pin is not None
        pin, chosen = first.pin, {s.base: v for s, v in group}
        bounds = [chosen.get(f"pin.{a}", b) for a, b in zip(pin.axes, pin.bounds, strict=True)]
        return _pin_text(pin, chosen.get("pin", pin.index), bounds)
    if first.rule == "list":
        ends = {"min": first.lo, "max": first.hi} | {s.base: v for s, v in group}
        if ends["min"] > ends["max"]:
            raise KnobError(f"an autotune list from {ends['min']} to {ends['max']} would be empty")
        values = _list_values(first.kind, ends["min"], ends["max"])
        body = ", ".join(map(str, values)) + ("," if first.indent == "()" and len(values) == 1 else "")
        return first.indent[0] + body + first.indent[1]
    if first.rule == "expr":
        return _scaled(first.base, group[0][1], first.kind)
    lines = sorted(group, key=lambda sv: sv[0].lo)
    return "".join(f"{s.indent}{s.base} = {_scaled(s.base, v, s.kind)}{s.trail}" for s, v in lines if v)


def _check_round_trip(
    result: str, before: Mapping[str, tuple[Knob, _Site]], settings: Mapping[str, int]
) -> None:
    try:
        after = {knob.name: knob.value for knob in find_knobs(result)}
    except SyntaxError as exc:
        raise KnobError(f"rewrite produced invalid Python: {exc}") from exc
    expected = {name: settings.get(name, knob.value) for name, (knob, _) in before.items()}
    if after != expected:
        raise KnobError(f"rewrite did not round-trip: expected {expected}, found {after}")


def neighbours(knobs: Sequence[Knob], current: Mapping[str, int]) -> list[dict[str, int]]:
    """One-step moves from ``current``: each knob to its next choice down, then up.

    Each move is a full setting of every knob in ``knobs`` (missing entries of ``current``
    default to the knob's source value). Order follows ``knobs``, down before up, so the search
    is deterministic. Raises KnobError if ``current`` names a knob not in ``knobs``.
    """
    names = {knob.name for knob in knobs}
    unknown = sorted(set(current) - names)
    if unknown:
        raise KnobError(f"unknown knob(s) in current setting: {unknown}")
    base = {knob.name: current.get(knob.name, knob.value) for knob in knobs}
    moves: list[dict[str, int]] = []
    for knob in knobs:
        value = base[knob.name]
        # bisect rather than index() so a current value off the grid still has neighbours.
        below = bisect.bisect_left(knob.choices, value) - 1
        above = bisect.bisect_right(knob.choices, value)
        for i in (below, above):
            if 0 <= i < len(knob.choices):
                moves.append({**base, knob.name: knob.choices[i]})
    return moves
