"""The deterministic programmer: moves a kernel's launch parameters, one knob at a time.

Triton kernels: launch keywords and constexprs on the AST (kernelpro/knobs.py). Raw CUDA kernels: threads per
block, vector width, work per thread, tile and unroll constants, `#pragma unroll` counts and
`__launch_bounds__` minimum blocks in the source text (kernelpro/cuda_knobs.py). Both are
pure text code shared with the publish step, which replays a winner's setting on the PR head.

No network and no randomness beyond a seed derived from the parent: the same run proposes the same
candidates, so a retry that resumes from the journal continues exactly where it stopped.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from kernelpro import cuda_knobs
from kernelpro.knobs import (
    Knob,
    KnobError,
    autotune_sizes,
    entry_roots,
    explain,
    find_knobs,
    reachable_functions,
)
from kernelpro.setting import apply_setting

from ..candidate import Candidate
from ..search import Scored
from ..trace import Solution, SourceFile
from . import Context

# Without findings: bigger tiles amortise per-program overhead first, then warps match the tile,
# then pipelining. CUDA: threads per block first (occupancy, bytes in flight), then wider loads,
# more work per thread, tiles, unrolling, and register caps last.
_KIND_ORDER = {"block": 0, "num_warps": 1, "num_stages": 2,
               "threads": 0, "vector": 1, "work": 2, "tile": 3, "unroll": 4, "min_blocks": 5}

# A finding -> the launch-parameter moves that address it, most direct first: (knob kind, direction).
# Scalar or uncoalesced loads and launch overhead want more work per program; register pressure and
# spills want smaller tiles or more warps to spread them; shared-memory-limited occupancy wants
# fewer pipeline stages; memory-latency stalls want deeper pipelining and more warps in flight.
# CUDA kinds: scalar loads want a wider vector; launch overhead wants more work per thread; low
# occupancy wants more threads per block or a register cap (__launch_bounds__ min blocks); spills
# want a looser cap, less unrolling and smaller tiles; latency stalls want more independent work.
FINDING_MOVES: dict[str, tuple[tuple[str, int], ...]] = {
    "vectorization": (("block", +1), ("num_warps", -1), ("vector", +1)),
    "memory_coalescing": (("block", +1), ("threads", +1)),
    "launch_overhead": (("block", +1), ("work", +1), ("threads", +1)),
    "kernel_count_fusion": (("block", +1), ("work", +1)),
    "occupancy": (("num_warps", +1), ("block", -1), ("num_stages", -1), ("threads", +1), ("min_blocks", +1),
                  ("tile", -1)),
    "high_register_usage": (("block", -1), ("num_warps", +1), ("min_blocks", +1), ("unroll", -1), ("tile", -1)),
    "register_spills": (("block", -1), ("num_warps", +1), ("num_stages", -1), ("min_blocks", -1), ("unroll", -1),
                        ("tile", -1), ("work", -1)),
    "shared_bank_conflicts": (("block", -1), ("tile", -1)),
    "warp_stall": (("num_stages", +1), ("num_warps", +1), ("work", +1), ("unroll", +1)),
    "barrier_stall": (("num_warps", -1), ("threads", -1)),
    # issue 23's tools: more programs from smaller tiles; fewer masked lanes and wider accesses from larger ones.
    "too_few_programs": (("block", -1), ("tile", -1), ("work", -1)),
    "tail_effect": (("block", -1), ("tile", -1)),
    "instruction_overhead": (("block", +1), ("vector", +1), ("num_warps", -1), ("work", +1)),
    # a latency-bound chain: more independent work per thread (unroll, prefetch), then more programs beside it
    "serial_dependency": (("unroll", +1), ("num_stages", +1), ("block", -1), ("work", -1)),
    # bytes re-read from DRAM: larger tiles reuse each operand more on chip
    "excess_traffic": (("tile", +1), ("block", +1)),
}


def _guided_order(findings: tuple[object, ...]) -> list[tuple[str, int]]:
    order: list[tuple[str, int]] = []
    for f in findings:
        for move in FINDING_MOVES.get(str(getattr(f, "tool", "")), ()):
            if move not in order:
                order.append(move)
    return order


@dataclass(frozen=True)
class _FileKnob:
    """A knob in one source file of a solution."""

    path: str
    """Source file."""
    knob: Knob
    """The knob found there."""

    @property
    def key(self) -> str:
        return f"{self.path}::{self.knob.name}"


def _cuda_launch(solution: Solution) -> tuple[str | None, tuple[str, ...] | None]:
    """The raw kernel's name and block, so launch bounds can be added to a kernel that has none."""
    launch = solution.spec.launch
    return (launch.kernel, launch.block) if launch is not None else (None, None)


def _knobs(solution: Solution) -> list[_FileKnob]:
    out: list[_FileKnob] = []
    entry = next((s for s in solution.sources if s.path == solution.entry_file), None)
    try:
        roots = entry_roots(entry.content, solution.entry_symbol) if entry is not None else None
    except SyntaxError:
        roots = None
    for src in solution.sources:
        if src.path.endswith(".py"):
            knobs = find_knobs(src.content)
            reach = reachable_functions(src.content, roots) if roots is not None else None
            if reach is not None:  # module-level knobs (shared constants) stay: reachable code may read them
                knobs = [k for k in knobs if k.name.split(":", 1)[0].split(".", 1)[0] in reach | {"<module>"}]
            out.extend(_FileKnob(src.path, k) for k in knobs)
        elif cuda_knobs.is_cuda_source(src.path):
            out.extend(_FileKnob(src.path, k) for k in cuda_knobs.find_knobs(src.content, *_cuda_launch(solution)))
    return out


def silence(solution: Solution) -> str:
    """Why ``solution`` offers the tuner no knob, naming the constructs that hid them (a value assigned
    twice, a parameter, an autotune list read from a variable), for the run's stop reason and report."""
    notes: list[str] = []
    unreached = 0
    for src in solution.sources:
        if not src.path.endswith(".py"):
            continue
        try:
            notes += [f"{src.path}: {n}" for n in explain(src.content)]
            unreached += len(find_knobs(src.content))
        except SyntaxError:
            notes.append(f"{src.path} does not parse")
    if unreached:
        notes.append(f"{unreached} launch parameter(s) are in functions the entry point "
                     f"{solution.spec.entry_point} does not reach")
    if not notes:
        files = ", ".join(s.path for s in solution.sources) or "no file"
        return (f"no launch parameter in {files}: no Triton launch `kernel[grid](...)` with a block size or "
                "num_warps, no @triton.autotune or @triton.heuristics, and no CUDA launch constant")
    shown = "; ".join(notes[:4]) + (f"; and {len(notes) - 4} more" if len(notes) > 4 else "")
    return f"no launch parameter the tuner can change: {shown}"


# A candidate's autotune lists may hold at most this many times the configs its parent's do: Triton
# compiles and benchmarks every config in each candidate's fresh process. On the H200 (session 26) Liger
# DyT's 18 configs took 6 s of its evaluation, and the tuner's first two candidates, with 48 and 36
# (every list end drawn at once), 24 s and 29 s: four evaluations filled a 300 s run.
AUTOTUNE_GROWTH = 2


def _autotune_bounded(parent: Solution, child: Solution) -> bool:
    """Whether no autotune list of ``child`` holds more than AUTOTUNE_GROWTH times its parent's configs."""
    before = {s.path: autotune_sizes(s.content) for s in parent.sources if s.path.endswith(".py")}
    for src in child.sources:
        if src.path.endswith(".py"):
            old = before.get(src.path, {})
            if any(n > AUTOTUNE_GROWTH * old.get(k, n) for k, n in autotune_sizes(src.content).items()):
                return False
    return True


def _describe(knobs: list[_FileKnob], settings: Mapping[str, int]) -> str:
    moves = [f"{fk.knob.name} {fk.knob.value}->{settings[fk.key]}" for fk in knobs if settings[fk.key] != fk.knob.value]
    return ", ".join(moves) or "no change"


class Tuner:
    name = "tuner"
    silent = ""
    """Set when the last parent had no knob: why (:func:`silence`), for the run's stop reason."""

    def _apply(self, solution: Solution, knobs: list[_FileKnob], settings: Mapping[str, int]) -> Solution | None:
        sources = []
        for src in solution.sources:
            mine = {fk.knob.name: settings[fk.key] for fk in knobs if fk.path == src.path}
            try:  # the code the publish step replays the winner's setting with (kernelpro/setting.py)
                content = apply_setting(src.path, src.content, mine, *_cuda_launch(solution))
            except KnobError:
                return None
            sources.append(SourceFile(src.path, content))
        return Solution(solution.name, solution.definition, "kernelpro-tuner", solution.spec, tuple(sources))

    def _moves(self, knobs: list[_FileKnob], mode: str, seed: str,
               findings: tuple[object, ...] = ()) -> list[dict[str, int]]:
        current = {fk.key: fk.knob.value for fk in knobs}
        ordered = sorted(knobs, key=lambda fk: (_KIND_ORDER.get(fk.knob.kind, 9), fk.key))
        moves: list[dict[str, int]] = []
        if mode == "init":
            # Fresh seeds far from the parent: uniform samples of the whole grid.
            rng = random.Random(seed)
            for _ in range(64):
                moves.append({fk.key: rng.choice(fk.knob.choices) for fk in knobs})
            return moves

        def step(fk: _FileKnob, direction: int) -> dict[str, int] | None:
            choices = list(fk.knob.choices)
            i = choices.index(fk.knob.value) if fk.knob.value in choices else 0
            j = i + direction
            return {**current, fk.key: choices[j]} if 0 <= j < len(choices) else None

        # Moves the findings ask for come first, in the findings' severity order.
        if mode == "optimize":
            for kind, direction in _guided_order(findings):
                for fk in ordered:
                    m = step(fk, direction) if fk.knob.kind == kind else None
                    if m is not None and m not in moves:
                        moves.append(m)
        for fk in ordered:
            # Repairs shrink first (most launch failures are resource limits); optimizations grow first.
            for direction in (-1, +1) if mode == "debug" else (+1, -1):
                m = step(fk, direction)
                if m is not None and m not in moves:
                    moves.append(m)
        return moves

    def propose(self, parent: Scored, mode: str, n: int, context: Context) -> list[Candidate]:
        base = parent.candidate.solution
        knobs = _knobs(base)
        self.silent = "" if knobs else silence(base)
        if not knobs:
            return []
        out: list[Candidate] = []
        keys: set[str] = set()
        for settings in self._moves(knobs, mode, parent.candidate.key, context.findings):
            sol = self._apply(base, knobs, settings)
            if sol is None or not _autotune_bounded(base, sol):
                continue
            key = sol.content_hash()
            if key in keys or context.seen(key):
                continue
            keys.add(key)
            named = Solution(f"{context.target.name}-{key[:10]}", sol.definition, sol.author, sol.spec, sol.sources,
                             description=_describe(knobs, settings))
            out.append(Candidate(named, parent.candidate.key, mode, _describe(knobs, settings), dict(settings)))
            if len(out) >= n:
                break
        return out


def make(settings: object) -> Tuner:
    return Tuner()
