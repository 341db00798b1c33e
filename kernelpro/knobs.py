"""Triton launch-parameter knobs, found and rewritten on the AST of a Python source file.

This is the pure, source-level half of the deterministic tuner: it never imports or runs the
code it reads. A knob is one integer literal (or one missing launch keyword) that sets a launch
parameter of a ``kernel[grid](...)`` call: a block/tile size, ``num_warps`` or ``num_stages``.

Rewrites splice new digits into the original text at the literal's exact position instead of
unparsing the AST, so comments, quoting and layout survive and the diff a reviewer sees is the
few characters that changed.

Limitations (all of them err towards finding fewer knobs, never towards an unsafe edit):

* Only keyword arguments of a launch are considered; a block size passed positionally is not.
* A launch argument that is a name is followed only to exactly one ``NAME = <int literal>``
  (or ``A, B = 128, 4``) binding in the scope Python would look it up in. Names bound twice,
  bound by a call (``calculate_settings(n)``), function parameters (even with a literal default)
  and attributes (``self.BLOCK``) are not knobs: editing one binding of several, or a default a
  caller may override, would not reliably change what the launch receives.
* Kernels decorated with ``@triton.autotune`` (or wrapped as ``triton.autotune(...)(fn)``) in the
  same file are skipped, because autotune owns their configuration. A kernel imported from
  another file cannot be inspected, so if it is autotuned its launch keywords still show up.
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
import io
import re
import tokenize
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = [
    "DEFAULT_NUM_STAGES",
    "DEFAULT_NUM_WARPS",
    "Knob",
    "KnobError",
    "apply_knobs",
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
    """``block`` (a power-of-two tile/block size), ``num_warps`` or ``num_stages``."""
    value: int
    """Current value in the source (Triton's default when the keyword is absent)."""
    choices: tuple[int, ...]
    """Allowed values, sorted ascending; always contains ``value``."""
    line: int
    """1-based line of the literal that holds the value (or where a missing keyword goes)."""


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


@dataclass
class _Scope:
    """A Python name scope, with every binding of each name made directly in it."""

    kind: str
    """``module``, ``function`` or ``class``."""
    qualname: str
    """Dotted name used in knob ids; ``<module>`` for the module."""
    parent: _Scope | None
    """Enclosing scope; None for the module."""
    bindings: dict[str, list[ast.Constant | None]] = field(default_factory=dict)
    """Name -> one entry per binding: the int literal for ``X = 128``, else None."""
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

    def __init__(self) -> None:
        self.module = _Scope("module", _MODULE, None)
        self.scope = self.module
        self.kernels: dict[str, _Kernel] = {}
        self.launches: list[tuple[ast.Call, _Scope]] = []

    # -- bindings ---------------------------------------------------------------------------

    def _bind(self, name: str, literal: ast.Constant | None) -> None:
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
        # Every other name this statement stores (chained targets, a name paired with a
        # non-literal) is a non-literal binding, which disqualifies the name as a knob.
        for target in node.targets:
            for sub in ast.walk(target):
                if (
                    isinstance(sub, ast.Name)
                    and isinstance(sub.ctx, ast.Store)
                    and id(sub) not in handled
                ):
                    self._bind(sub.id, None)
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
        tails = [_dotted_tail(d) for d in node.decorator_list]
        if "jit" not in tails and "autotune" not in tails:
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


def _mark_wrapped_kernels(tree: ast.Module, kernels: dict[str, _Kernel]) -> None:
    """``k = triton.autotune(configs=...)(triton.jit(f))`` autotunes ``k`` without a decorator."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
            continue
        tails: list[str | None] = []
        inner: ast.expr = node.value
        while isinstance(inner, ast.Call):
            tails.append(_dotted_tail(inner.func))
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
            if len(bindings) == 1 and bindings[0] is not None:
                return bindings[0], current
            return None
        first = False
        current = current.parent
    return None


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


def _scan(source: str) -> list[tuple[Knob, _Site]]:
    tree = ast.parse(source)
    collector = _Collector()
    collector.visit(tree)
    _mark_wrapped_kernels(tree, collector.kernels)
    text = _Text(source)

    # Keyed by site so a constant shared by two launches is one knob.
    found: dict[tuple[int, str | None], tuple[str, str, str, int, _Site]] = {}
    conflicting: set[tuple[int, str | None]] = set()

    def add(label: str, param: str, kind: str, value: int, site: _Site) -> None:
        key = (site.start, site.keyword)
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
        if not _looks_like_launch(call, kernel):
            continue
        given = {kw.arg for kw in call.keywords}
        for kw in call.keywords:
            if kw.arg is None:
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
            if _is_int_literal(kw.value):
                assert isinstance(kw.value, ast.Constant)
                literal = kw.value
            elif isinstance(kw.value, ast.Name):
                resolved = _resolve(kw.value.id, scope, collector.module)
                if resolved is not None:
                    literal, owner = resolved
            if literal is None:
                continue
            value = literal.value
            assert isinstance(value, int)
            if kind == "block" and (not _is_power_of_two(value) or value < min_block):
                continue
            assert literal.end_lineno is not None and literal.end_col_offset is not None
            start = text.offset(literal.lineno, literal.col_offset)
            end = text.offset(literal.end_lineno, literal.end_col_offset)
            add(owner.qualname, kw.arg, kind, value, _Site(start, end))

        missing = [k for k in ("num_warps", "num_stages") if k not in given]
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

    knobs: list[tuple[Knob, _Site]] = []
    seen: dict[str, int] = {}
    # Source order (then num_warps before num_stages at one insertion point) makes the
    # "#2" suffixes of repeated ids independent of how the launches were discovered.
    order = {None: 0, "num_warps": 1, "num_stages": 2}
    for key in sorted(found, key=lambda k: (k[0], order[k[1]])):
        if key in conflicting:
            continue
        label, param, kind, value, site = found[key]
        base = f"{label}:{param}"
        seen[base] = seen.get(base, 0) + 1
        name = base if seen[base] == 1 else f"{base}#{seen[base]}"
        knob = Knob(name, kind, value, _choices(kind, value), text.line_of(site.start))
        knobs.append((knob, site))
    return knobs


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
                  choices: Callable[[Knob], Collection[int]] | None = None) -> list[tuple[SiteT, int]]:  # fmt: skip
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
    if knob.kind == "block":
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
        replaces = [(s, v) for s, v in group if s.keyword is None]
        for site, value in replaces:
            result = result[: site.start] + str(value) + result[site.end :]
        if inserts:
            first = inserts[0][0]
            body = ", ".join(f"{s.keyword}={v}" for s, v in inserts)
            result = result[:start] + first.lead + body + first.trail + result[start:]

    if result != source:
        _check_round_trip(result, scanned, settings)
    return result


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
