"""Search memory: what one run has learned, carried from iteration to iteration (KernelPro, 3.4).

Append-only and scoped to a run, in the paper's five sections. Entries are extracted after every
evaluation by rules over plain data (statuses, speedups, strategy notes, profiler findings), so
the memory is deterministic and is rebuilt exactly when a resumed run replays its journal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .search import Scored

SECTIONS = {
    "search_findings": "Search findings",
    "errors_corrections": "Errors & corrections",
    "successful_patterns": "Successful patterns",
    "key_files": "Key files",
    "learnings": "Learnings",
}
NOISE = 0.02  # relative speed change below which a step is "no effect" rather than a lesson


@dataclass(frozen=True)
class Entry:
    """One remembered fact."""

    section: str
    """One of SECTIONS."""
    text: str
    """The fact, one line."""
    evaluation: int
    """Evaluation index it came from (0 = before the search)."""


def _first_error_line(log: str) -> str:
    lines = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln or ln.startswith("{"):
            return ln[:200]
    return lines[-1][:200] if lines else ""


@dataclass
class SearchMemory:
    """The run's memory; ``enabled=False`` keeps it empty (the ablation)."""

    enabled: bool = True
    """Off for the --memory off ablation."""
    per_section: int = 12
    """Most recent entries kept per section in the prompt."""
    entries: list[Entry] = field(default_factory=list)
    """Everything remembered, in order."""

    def add(self, section: str, text: str, evaluation: int) -> None:
        if not self.enabled or not text:
            return
        if any(e.section == section and e.text == text for e in self.entries):
            return
        self.entries.append(Entry(section, text, evaluation))

    def observe(self, index: int, child: Scored, parent: Scored | None, findings: Iterable[Any] = ()) -> None:
        """Rules that turn one evaluation into entries."""
        note = child.candidate.note or child.candidate.solution.name
        if not child.outcome.passed:
            what = f"{note}: {child.outcome.status}"
            detail = _first_error_line(child.outcome.log)
            self.add("errors_corrections", f"{what} ({detail})" if detail else what, index)
        elif parent is not None and not parent.outcome.passed:
            self.add("errors_corrections", f"fixed {parent.outcome.status} of '{parent.candidate.note}' with: {note}",
                     index)  # fmt: skip
        elif parent is not None and parent.speedup > 0:
            ratio = child.speedup / parent.speedup
            step = f"{note}: {parent.speedup:.2f}x -> {child.speedup:.2f}x"
            if ratio > 1 + NOISE:
                self.add("successful_patterns", step, index)
            elif ratio < 1 - NOISE:
                self.add("learnings", f"slower, avoid: {step}", index)
            else:
                self.add("learnings", f"no measurable effect: {step}", index)
        for f in findings:
            self.add("search_findings", f"[{f.severity}] {f.title} ({f.tool})", index)

    def key_files(self, files: Iterable[str], entry_point: str, index: int = 0) -> None:
        for f in files:
            self.add("key_files", f"{f}" + (f" (entry point {entry_point})" if entry_point.startswith(f + "::") else ""),
                     index)  # fmt: skip

    def render(self) -> str:
        """Markdown for prompts: the latest entries of each section."""
        if not self.enabled:
            return ""
        out = []
        for key, title in SECTIONS.items():
            items = [e.text for e in self.entries if e.section == key][-self.per_section :]
            if items:
                out.append(f"### {title}")
                out.extend(f"- {t}" for t in items)
        return "\n".join(out)

    def to_json(self) -> list[dict[str, Any]]:
        return [{"section": e.section, "text": e.text, "evaluation": e.evaluation} for e in self.entries]
