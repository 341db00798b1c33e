"""The deterministic programmer: moves a Triton kernel's launch parameters, one knob at a time.

No network and no randomness beyond a seed derived from the parent: the same run proposes the same
candidates, so a retry that resumes from the journal continues exactly where it stopped.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from ..candidate import Candidate
from ..search import Scored
from ..trace import Solution, SourceFile
from . import Context
from .knobs import Knob, KnobError, apply_knobs, find_knobs

# The paper's finding -> transformation table shrinks, for launch parameters alone, to an order:
# bigger tiles amortise per-program overhead first, then warps match the tile, then pipelining.
_KIND_ORDER = {"block": 0, "num_warps": 1, "num_stages": 2}


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


def _knobs(solution: Solution) -> list[_FileKnob]:
    out: list[_FileKnob] = []
    for src in solution.sources:
        if src.path.endswith(".py"):
            out.extend(_FileKnob(src.path, k) for k in find_knobs(src.content))
    return out


def _describe(knobs: list[_FileKnob], settings: Mapping[str, int]) -> str:
    moves = [f"{fk.knob.name} {fk.knob.value}->{settings[fk.key]}" for fk in knobs if settings[fk.key] != fk.knob.value]
    return ", ".join(moves) or "no change"


class Tuner:
    name = "tuner"

    def _apply(self, solution: Solution, knobs: list[_FileKnob], settings: Mapping[str, int]) -> Solution | None:
        sources = []
        for src in solution.sources:
            mine = {fk.knob.name: settings[fk.key] for fk in knobs if fk.path == src.path}
            try:
                content = apply_knobs(src.content, mine) if mine else src.content
            except KnobError:
                return None
            sources.append(SourceFile(src.path, content))
        return Solution(solution.name, solution.definition, "kernelpro-tuner", solution.spec, tuple(sources))

    def _moves(self, knobs: list[_FileKnob], mode: str, seed: str) -> list[dict[str, int]]:
        current = {fk.key: fk.knob.value for fk in knobs}
        ordered = sorted(knobs, key=lambda fk: (_KIND_ORDER.get(fk.knob.kind, 9), fk.key))
        moves: list[dict[str, int]] = []
        if mode == "init":
            # Fresh seeds far from the parent: uniform samples of the whole grid.
            rng = random.Random(seed)
            for _ in range(64):
                moves.append({fk.key: rng.choice(fk.knob.choices) for fk in knobs})
            return moves
        for fk in ordered:
            choices = list(fk.knob.choices)
            i = choices.index(fk.knob.value) if fk.knob.value in choices else 0
            # Repairs shrink first (most launch failures are resource limits); optimizations grow first.
            steps = (-1, +1) if mode == "debug" else (+1, -1)
            for step in steps:
                j = i + step
                if 0 <= j < len(choices):
                    moves.append({**current, fk.key: choices[j]})
        return moves

    def propose(self, parent: Scored, mode: str, n: int, context: Context) -> list[Candidate]:
        base = parent.candidate.solution
        knobs = _knobs(base)
        if not knobs:
            return []
        out: list[Candidate] = []
        keys: set[str] = set()
        for settings in self._moves(knobs, mode, parent.candidate.key):
            sol = self._apply(base, knobs, settings)
            if sol is None:
                continue
            key = sol.content_hash()
            if key in keys or context.seen(key):
                continue
            keys.add(key)
            named = Solution(f"{context.target.name}-{key[:10]}", sol.definition, sol.author, sol.spec, sol.sources,
                             description=_describe(knobs, settings))  # fmt: skip
            out.append(Candidate(named, parent.candidate.key, mode, _describe(knobs, settings), dict(settings)))
            if len(out) >= n:
                break
        return out


def make(settings: object) -> Tuner:
    return Tuner()
