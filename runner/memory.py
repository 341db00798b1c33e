"""Search memory: what one run has learned, carried from iteration to iteration (KernelPro, 3.4).

Append-only and scoped to a run, in the paper's five sections. Without an LLM, entries are
extracted after every evaluation by rules over plain data (statuses, speedups, strategy notes,
profiler findings), so the memory is deterministic and is rebuilt exactly when a resumed run replays
its journal. With an ``Extractor`` (an LLM, runner/extractor.py), the evaluations of one iteration
are queued and extracted by one call when the memory is next read, that is before the next prompt;
its answer is merged (deduplicated, each entry one bounded line, each section bounded). A failed
call falls back to the rules for that iteration and is logged; it never stops the search. The
model's entries cannot be recomputed, so they are appended to a journal of their own as they come
(``journal``), and a resumed run restores them instead of asking again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .search import Scored

log = logging.getLogger(__name__)

SECTIONS = {
    "search_findings": "Search findings",
    "errors_corrections": "Errors & corrections",
    "successful_patterns": "Successful patterns",
    "key_files": "Key files",
    "learnings": "Learnings",
}
NOISE = 0.02  # relative speed change below which a step is "no effect" rather than a lesson
MAX_ENTRY_CHARS = 300
"""An extracted entry is one line of at most this many characters."""
MAX_SECTION_ENTRIES = 40
"""Entries kept per section; the oldest go first (the prompt shows the latest ``per_section``)."""
MAX_NEW_PER_CALL = 8
"""Entries one extraction may add to a section."""


@dataclass(frozen=True)
class Observation:
    """One evaluation of an iteration, as an extractor sees it."""

    index: int
    """Evaluation index."""
    child: Scored
    """The evaluated candidate."""
    parent: Scored | None
    """Its parent, when known."""
    findings: tuple[Any, ...] = ()
    """Profiler findings on the candidate (runner.tools.Finding)."""

    def summary(self) -> dict[str, Any]:
        """Plain data for a prompt: no code, bounded text."""
        c, p = self.child, self.parent
        out: dict[str, Any] = {"evaluation": self.index, "mode": c.candidate.mode,
                               "change": (c.candidate.note or c.candidate.solution.name)[:300],
                               "status": c.outcome.status}
        if c.outcome.passed:
            out["speedup_vs_baseline"] = round(c.speedup, 4)
        else:
            out["error"] = _first_error_line(c.outcome.log)
        if p is not None:
            out["parent"] = {"change": (p.candidate.note or "")[:300], "status": p.outcome.status,
                             "speedup_vs_baseline": round(p.speedup, 4)}
        if self.findings:
            out["findings"] = [f"[{f.severity}] {f.title} ({f.tool})" for f in self.findings]
        return out


class Extractor(Protocol):
    """Turns one iteration's observations into new entries per section; raises on any failure."""

    def __call__(self, observations: Sequence[Observation], memory: Mapping[str, Sequence[str]]
                 ) -> Mapping[str, Sequence[str]]: ...


def clean(text: object) -> str:
    """An untrusted entry as one bounded line ('' when it is not text)."""
    if not isinstance(text, str):
        return ""
    line = " ".join(text.split())
    return line if len(line) <= MAX_ENTRY_CHARS else line[: MAX_ENTRY_CHARS - 3] + "..."


@dataclass(frozen=True)
class Entry:
    """One remembered fact."""

    section: str
    """One of SECTIONS."""
    text: str
    """The fact, one line."""
    evaluation: int
    """Evaluation index it came from (0 = before the search)."""
    by: str = "rules"
    """Who extracted it: 'rules' or 'llm' (model-written text: untrusted)."""


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
    extractor: Extractor | None = None
    """Extracts by an LLM call per iteration; None: by rules after every evaluation."""
    pending: list[Observation] = field(default_factory=list)
    """Evaluations since the last extraction (with an extractor)."""
    extraction_failures: int = 0
    """Extractions that failed and fell back to the rules."""
    journal: Path | None = None
    """Where entries are appended as they come (JSON lines), so a resumed run keeps the model's ones."""
    context: str = ""
    """Key of the evaluation context: a journal line of another context is not restored."""

    def restore(self) -> int:
        """Load the entries of an earlier run of this context; how many were restored."""
        if not self.enabled or self.journal is None or not self.journal.exists():
            return 0
        n = 0
        for line in self.journal.read_text().splitlines():
            try:
                d = json.loads(line)
                if d["context"] != self.context:
                    continue
                entry = Entry(str(d["section"]), str(d["text"]), int(d["evaluation"]), str(d.get("by", "llm")))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a kill
            if entry.section in SECTIONS and entry not in self.entries:
                self.entries.append(entry)
                n += 1
        return n

    def add(self, section: str, text: str, evaluation: int, by: str = "rules") -> None:
        if not self.enabled or not text or section not in SECTIONS:
            return
        norm = text.casefold()
        if any(e.section == section and e.text.casefold() == norm for e in self.entries):
            return
        self.entries.append(Entry(section, text, evaluation, by))
        if self.journal is not None:
            from .trace import append_jsonl

            append_jsonl(self.journal, [{"context": self.context, "section": section, "text": text,
                                         "evaluation": evaluation, "by": by}])
        mine = [e for e in self.entries if e.section == section]
        if len(mine) > MAX_SECTION_ENTRIES:
            self.entries.remove(mine[0])

    def sections(self) -> dict[str, list[str]]:
        return {key: [e.text for e in self.entries if e.section == key] for key in SECTIONS}

    def observe(self, index: int, child: Scored, parent: Scored | None, findings: Iterable[Any] = ()) -> None:
        """Record one evaluation: by the rules now, or queued for the iteration's extraction."""
        if not self.enabled:
            return
        if self.extractor is not None:
            self.pending.append(Observation(index, child, parent, tuple(findings)))
            return
        self._rules(index, child, parent, findings)

    def flush(self) -> None:
        """Extract the queued iteration: one call, merged; the rules when the call fails."""
        if not self.pending or self.extractor is None:
            return
        batch, self.pending = self.pending, []
        try:
            found = self.extractor(batch, self.sections())
        except Exception as e:  # an extraction is advice: whatever goes wrong, the search goes on
            self.extraction_failures += 1
            log.warning("search memory: the extraction call failed (%s: %s); using the rules for evaluations %s",
                        type(e).__name__, str(e)[:300], ", ".join(str(o.index) for o in batch))
            for o in batch:
                self._rules(o.index, o.child, o.parent, o.findings)
            return
        last = batch[-1].index
        for section, items in found.items():
            for item in list(items)[:MAX_NEW_PER_CALL]:
                self.add(section, clean(item), last, "llm")

    def _rules(self, index: int, child: Scored, parent: Scored | None, findings: Iterable[Any] = ()) -> None:
        note = child.candidate.note or child.candidate.solution.name
        if not child.outcome.passed:
            what = f"{note}: {child.outcome.status}"
            detail = _first_error_line(child.outcome.log)
            self.add("errors_corrections", f"{what} ({detail})" if detail else what, index)
        elif parent is not None and not parent.outcome.passed:
            self.add("errors_corrections", f"fixed {parent.outcome.status} of '{parent.candidate.note}' with: {note}",
                     index)
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
                     index)

    def render(self) -> str:
        """Markdown for prompts: the latest entries of each section (after extracting what is queued)."""
        if not self.enabled:
            return ""
        self.flush()
        out = []
        for key, title in SECTIONS.items():
            items = [e.text for e in self.entries if e.section == key][-self.per_section :]
            if items:
                out.append(f"### {title}")
                out.extend(f"- {t}" for t in items)
        return "\n".join(out)

    def to_json(self) -> list[dict[str, Any]]:
        self.flush()
        return [{"section": e.section, "text": e.text, "evaluation": e.evaluation, "by": e.by} for e in self.entries]
