"""Candidate: a Solution with its lineage in the search."""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.csource import without_comments

from .trace import Solution


@dataclass(frozen=True)
class Candidate:
    """One proposed kernel and where it came from."""

    solution: Solution
    """The code."""
    parent: str | None
    """Content hash of the candidate it was derived from; None for the baseline."""
    mode: str
    """'init' (from the root), 'debug' (repairing a failed parent) or 'optimize' (improving a working one)."""
    note: str
    """The programmer's strategy note, in a sentence."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Programmer-specific settings that produced it (the tuner's knob values)."""

    @property
    def key(self) -> str:
        return self.solution.content_hash()

    def cache_dir(self, root: Path) -> Path:
        """This candidate's own Triton/cubin cache under ``root``: its profiling child starts warm from
        it (no second JIT or autotune under ncu) and SASS analysis finds only this candidate's cubins."""
        return root / self.key[:16]

    def to_json(self) -> dict[str, Any]:
        return {"solution": self.solution.to_json(), "parent": self.parent, "mode": self.mode,
                "note": self.note, "params": dict(self.params)}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Candidate:
        return Candidate(Solution.from_json(d["solution"]), d.get("parent"), d["mode"], d.get("note", ""),
                         d.get("params") or {})


def _normalized(path: str, content: str) -> str:
    if path.endswith(".py"):
        try:
            return ast.dump(ast.parse(content))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return content
    code = without_comments(content)
    # Line breaks end preprocessor directives, so they stay; empty lines go.
    return "\n".join(line.strip() for line in code.splitlines() if line.strip())


def fingerprint(solution: Solution) -> str:
    """What the code does, not how it is written: Python files by their syntax tree (comments, blank
    lines and layout dropped), C/C++ with comments and runs of blanks removed outside literals, plus
    the build spec. Two candidates with one fingerprint build the same kernels, so the loop evaluates
    only the first (as tinygrad skips a duplicate binary); a difference it cannot rule out (a string
    literal, an operator spaced differently in C) keeps them apart, which costs only an evaluation."""
    h = hashlib.sha256(repr(solution.spec).encode())
    for f in sorted(solution.sources, key=lambda f: f.path):
        h.update(f"\0{f.path}\0{_normalized(f.path, f.content)}".encode())
    return h.hexdigest()
