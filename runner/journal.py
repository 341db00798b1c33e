"""The journal: one JSON line per evaluation, written (and fsynced) the moment it finishes.

A killed run loses at most the evaluation in flight; a rerun with the same output directory
reads the journal back and never evaluates identical sources twice. Each line carries the cache
key: the solution's content hash plus everything else that changes the answer (device, workloads,
tolerances, evaluator settings).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .candidate import Candidate
from .evaluator import Outcome
from .trace import append_jsonl


def context_key(parts: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Entry:
    """One journaled evaluation."""

    index: int
    """Order of evaluation in this output directory, from 0."""
    candidate: Candidate
    """What was evaluated."""
    outcome: Outcome
    """What came out."""
    context: str
    """Key of the evaluation context (device, workloads, tolerances, settings)."""


class Journal:
    def __init__(self, path: Path, context: str):
        self.path = path
        self.context = context
        self._entries: dict[str, Entry] = {}
        self._order: list[Entry] = []
        self.skipped_lines = 0
        self._next = 0
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    d = json.loads(line)
                    e = Entry(d["index"], Candidate.from_json(d["candidate"]), Outcome.from_json(d["outcome"]), d["context"])
                except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                    # A line cut short by a kill; everything before it is intact.
                    self.skipped_lines += 1
                    continue
                if e.context == context:
                    self._entries[e.candidate.key] = e
                    self._order.append(e)
        # Evaluations on several GPUs finish out of order; their indices say the order they were queued in.
        self._order.sort(key=lambda e: e.index)
        self._next = self._order[-1].index + 1 if self._order else 0

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._order)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._order)

    def get(self, key: str) -> Entry | None:
        return self._entries.get(key)

    def reserve(self) -> int:
        """The index the next evaluation will carry, taken now (for evaluations that finish out of order)."""
        self._next += 1
        return self._next - 1

    def append(self, candidate: Candidate, outcome: Outcome, index: int | None = None) -> Entry:
        e = Entry(self.reserve() if index is None else index, candidate, outcome, self.context)
        append_jsonl(self.path, [{"index": e.index, "context": e.context, "key": candidate.key,
                                  "candidate": candidate.to_json(), "outcome": outcome.to_json()}])
        self._entries[candidate.key] = e
        self._order.append(e)
        return e
