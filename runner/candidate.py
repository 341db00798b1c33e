"""Candidate: a Solution with its lineage in the search."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
                "note": self.note, "params": dict(self.params)}  # fmt: skip

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Candidate:
        return Candidate(Solution.from_json(d["solution"]), d.get("parent"), d["mode"], d.get("note", ""),
                         d.get("params") or {})  # fmt: skip
