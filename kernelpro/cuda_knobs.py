"""CUDA knobs: the tunable constants of a raw CUDA kernel, found and rewritten in its source text.

The CUDA half of the deterministic tuner (kernelpro/knobs.py is the Triton half). A knob
is an integer the kernel author already wrote and that only changes how the work is laid out:

* ``#define NAME <int>`` / ``constexpr int NAME = <int>;`` whose name reads as threads per block
  (BLOCK_SIZE, THREADS, NUM_THREADS), a vector width (VEC, VEC_SIZE), work per thread
  (ITEMS_PER_THREAD, ..._PER_THREAD), a tile (TILE_M, BLOCK_N, TILE) or an unroll factor (UNROLL);
* the count after ``#pragma unroll`` (a bare pragma is the value ``UNROLL_FULL``);
* the minimum resident blocks of ``__launch_bounds__(max_threads[, min_blocks])`` (0: absent),
  named after the kernel that follows (``min_blocks:swiglu_kernel``). When the target's kernel has
  no launch bounds and its block size is spelled with constants only, the knob still exists (at 0)
  and a move inserts ``__launch_bounds__(<block>, N)`` before the kernel's name.

Every rewrite swaps one integer literal for another, toggles the count of a pragma, or adds or
drops ``, N`` inside ``__launch_bounds__(...)``: the result is valid C++ whenever the input was,
by construction. Whether it is still *correct* (a VEC that does not divide a row, a tile that
overflows shared memory) is the evaluator's call. Comments and string literals are masked before
scanning, so a ``#define`` in a comment is never edited.

The launch follows the source: a target's grid and block are expressions over these constants
(runner/launch.py), so moving BLOCK_SIZE moves the launch in step and the follow-up PR changes
only the kernel file.

Limitations (all err towards fewer knobs): a name defined more than once (an #ifdef ladder) is not
a knob; ``#pragma unroll EXPR`` with a non-literal count is left alone; ``__launch_bounds__``
with a third argument (max blocks per cluster) is left alone; no pragma or launch bound is ever
inserted where the author wrote none (launch bounds on the target's own kernel excepted, see above).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from . import csource
from .knobs import Knob, KnobError, checked_edits

__all__ = ["CUDA_SUFFIXES", "UNROLL_FULL", "apply_knobs", "find_knobs", "is_cuda_source", "whole_range"]

CUDA_SUFFIXES = (".cu", ".cuh")
UNROLL_FULL = 1 << 16  # stands for a bare `#pragma unroll`: unroll completely, the most unrolled
THREADS_CHOICES = (32, 64, 128, 256, 512, 1024)
VECTOR_CHOICES = (1, 2, 4, 8)
WORK_CHOICES = (1, 2, 4, 8, 16)
UNROLL_CHOICES = (1, 2, 4, 8, 16)
MIN_BLOCKS_CHOICES = (0, 1, 2, 3, 4, 6, 8)
TILE_SPREAD = 4  # a tile may move this factor from the author's value (shared memory grows quadratically)

_KINDS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("threads", re.compile(r"^(BLOCK_?SIZE|BLOCK_THREADS|(NUM_|N_?)?THREADS(_PER_BLOCK)?|BLOCK_DIM(_[XYZ])?|TPB|WARPS_PER_BLOCK)$")),
    ("vector", re.compile(r"^(VEC|VEC_?(SIZE|WIDTH|LEN)|VECTOR_(SIZE|WIDTH)|PACK_SIZE)$")),
    ("work", re.compile(r"^([A-Z]+_)*PER_THREAD$|^(ROWS|COLS|ITEMS|ELEMS)_PER_(BLOCK|WARP)$")),
    ("tile", re.compile(r"^(TILE(_[A-Z0-9]+)?|BLOCK_[MNK]|B[MNK]|TILE_SIZE_[MNK])$")),
    ("unroll", re.compile(r"^(UNROLL(_[A-Z0-9]+)?|[A-Z0-9_]+_UNROLL)$")),
)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]+\(?[ \t]*(?P<value>[0-9]+)(?P<suffix>[uUlL]*)"
                     r"[ \t]*\)?[ \t]*$", re.M)
_CONSTEXPR = re.compile(r"^[ \t]*(?:static[ \t]+)?(?:constexpr|const)[ \t]+(?:unsigned[ \t]+|signed[ \t]+)?"
                        r"(?:int|long|long long|size_t|int32_t|int64_t|uint32_t|uint64_t|short)[ \t]+"
                        r"(?P<name>[A-Za-z_]\w*)[ \t]*=[ \t]*(?P<value>[0-9]+)(?P<suffix>[uUlL]*)[ \t]*;[ \t]*$", re.M)
_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+unroll\b(?P<rest>[^\n]*)$", re.M)
_BOUNDS = re.compile(r"\b__launch_bounds__[ \t]*\(")


def is_cuda_source(path: str) -> bool:
    return path.endswith(CUDA_SUFFIXES)


def _kind(name: str) -> str | None:
    for kind, pattern in _KINDS:
        if pattern.match(name):
            return kind
    return None


def _choices(kind: str, value: int) -> tuple[int, ...]:
    base: tuple[int, ...]
    if kind == "threads":
        base = THREADS_CHOICES
    elif kind == "vector":
        base = VECTOR_CHOICES
    elif kind == "work":
        base = WORK_CHOICES
    elif kind == "unroll":
        base = (*UNROLL_CHOICES, UNROLL_FULL)
    elif kind == "min_blocks":
        base = MIN_BLOCKS_CHOICES
    else:
        lo, hi = max(1, value // TILE_SPREAD), max(1, value * TILE_SPREAD)
        base = tuple(1 << k for k in range(11) if lo <= 1 << k <= hi)
    return tuple(sorted({*base, value}))


@dataclass(frozen=True)
class _Site:
    """Where a knob's value lives in the text, and how to write a new one there."""

    start: int
    """Offset of the text to replace."""
    end: int
    """Offset just past it."""
    style: str
    """'literal' (digits), 'pragma' (what follows `#pragma unroll`), 'bounds' (the argument list of
    __launch_bounds__, without its parentheses) or 'insert' (before a kernel name without bounds)."""
    first: str = ""
    """For 'bounds' and 'insert': the max-threads argument (as written, or the launch's block)."""


# Whole identifiers only (\b), so a long run of words without '(' fails in linear time.
_NAME_AFTER_BOUNDS = re.compile(r"(?:\s*[A-Za-z_]\w*\b)*?\s*(?P<name>[A-Za-z_]\w*)\s*\(")


def _threads_expr(block: tuple[str, ...] | None) -> str | None:
    """The launch's threads per block as C++, when every dimension is a name or an integer."""
    if not block or not all(re.fullmatch(r"[A-Za-z_]\w*|[0-9]+", d.strip()) for d in block):
        return None
    return " * ".join(d.strip() for d in block)


def _scan(source: str, kernel: str | None = None, block: tuple[str, ...] | None = None) -> list[tuple[Knob, _Site]]:
    masked = csource.masked(source)
    found: list[tuple[Knob, _Site]] = []
    constants: dict[str, list[tuple[int, int, int]]] = {}
    for pattern in (_DEFINE, _CONSTEXPR):
        for m in pattern.finditer(masked):
            constants.setdefault(m["name"], []).append((m.start("value"), m.end("value"), int(m["value"])))
    for name, sites in constants.items():
        kind = _kind(name)
        if kind is None or len(sites) != 1:
            continue
        start, end, value = sites[0]
        if value <= 0:
            continue
        found.append((Knob(name, kind, value, _choices(kind, value), masked.count("\n", 0, start) + 1),
                      _Site(start, end, "literal")))
    for i, m in enumerate(_PRAGMA.finditer(masked), start=1):
        rest = m["rest"].strip()
        if rest and not re.fullmatch(r"\(?\s*[0-9]+\s*\)?", rest):
            continue  # a count the author computed (`#pragma unroll VEC`): theirs to keep
        value = int(re.sub(r"\D", "", rest)) if rest else UNROLL_FULL
        if value <= 0:
            continue
        start = m.start("rest")
        found.append((Knob(f"pragma_unroll#{i}", "unroll", value, _choices("unroll", value),
                           masked.count("\n", 0, start) + 1), _Site(start, m.end("rest"), "pragma")))
    bounded: set[str] = set()
    for i, m in enumerate(_BOUNDS.finditer(masked), start=1):
        depth, j = 1, m.end()
        commas: list[int] = []
        while j < len(masked) and depth:
            if masked[j] == "(":
                depth += 1
            elif masked[j] == ")":
                depth -= 1
            elif masked[j] == "," and depth == 1:
                commas.append(j)
            j += 1
        if depth or len(commas) > 1:
            continue
        inner_start, inner_end = m.end(), j - 1
        after = _NAME_AFTER_BOUNDS.match(masked[j : j + 512])
        label = f"min_blocks:{after['name']}" if after else f"min_blocks#{i}"
        if after:
            bounded.add(after["name"])
        first = source[inner_start:commas[0] if commas else inner_end].strip()
        if commas:
            second = masked[commas[0] + 1 : inner_end].strip()
            if not second.isdigit():
                continue
            value = int(second)
        else:
            value = 0
        found.append((Knob(label, "min_blocks", value, _choices("min_blocks", value),
                           masked.count("\n", 0, inner_start) + 1), _Site(inner_start, inner_end, "bounds", first)))
    threads = _threads_expr(block)
    if kernel and threads and kernel not in bounded:
        decl = re.search(rf"\b__global__\b[^;{{}}()]*?\b(?P<name>{re.escape(kernel)})\s*\(", masked)
        if decl is not None:
            at = decl.start("name")
            found.append((Knob(f"min_blocks:{kernel}", "min_blocks", 0, _choices("min_blocks", 0),
                               masked.count("\n", 0, at) + 1), _Site(at, at, "insert", threads)))
    found.sort(key=lambda ks: ks[1].start)
    return found


def find_knobs(source: str, kernel: str | None = None, block: tuple[str, ...] | None = None) -> list[Knob]:
    """Every knob in a CUDA source, in source order. ``kernel`` and ``block`` (the target's launch)
    let launch bounds be inserted on that kernel when it has none."""
    return [k for k, _ in _scan(source, kernel, block)]


def _render(site: _Site, value: int) -> str:
    if site.style == "literal":
        return str(value)
    if site.style == "pragma":
        return "" if value == UNROLL_FULL else f" {value}"
    if site.style == "insert":
        return "" if value == 0 else f"__launch_bounds__({site.first}, {value}) "
    return site.first if value == 0 else f"{site.first}, {value}"


def whole_range(knob: Knob) -> tuple[int, ...]:
    """Every value a chain of tuner moves can give ``knob`` (a tile's window moves with each step)."""
    if knob.kind == "tile":
        return tuple(sorted({*(1 << k for k in range(11)), *knob.choices}))
    return knob.choices


def apply_knobs(source: str, settings: Mapping[str, int], kernel: str | None = None,
                block: tuple[str, ...] | None = None, *, lineage: bool = False) -> str:
    """``source`` with each named knob set; unnamed knobs keep their value and the current values
    give back ``source`` unchanged. Raises KnobError for an unknown knob or a value off its choices
    (with ``lineage``, off :func:`whole_range`: the setting of a winner several moves away)."""
    scanned = {k.name: (k, s) for k, s in _scan(source, kernel, block)}
    edits = checked_edits(scanned, settings, whole_range if lineage else None)
    result = source
    for site, value in sorted(edits, key=lambda e: -e[0].start):
        result = result[: site.start] + _render(site, value) + result[site.end :]
    if result != source:
        after = {k.name: k.value for k in find_knobs(result, kernel, block)}
        want = {n: settings.get(n, k.value) for n, (k, _) in scanned.items()}
        if after != want:
            raise KnobError(f"rewrite did not round-trip: expected {want}, found {after}")
    return result
