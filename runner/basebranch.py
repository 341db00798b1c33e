"""The pull request's kernel against the base branch's, measured side by side.

One evaluation of each, minutes apart, is not a comparison. On the H200 one Liger cross-entropy
kernel measured 1.109, 0.964 and 0.944 ms in three evaluations of a single run, a drift of 17 %
against a p10-p90 spread of about 5 % within each (benchmarks/order.py,
benchmarks/results-h200-session6/order.json). Taken one after the other, the pull request's kernel
looked 1.115x faster than the base branch's in one direction of the replay and 1.089x faster in the
other. So the two are measured interleaved, head, base, head, as the final gate measures a winner:
the base's median is set against the geometric mean of the head's two, and its range runs from the
least to the most favourable pairing of their p10 and p90.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .evaluator import Outcome
from .target import Workload


@dataclass(frozen=True)
class BaseComparison:
    """The base branch's kernel timed between two timings of the pull request's."""

    status: str
    """The base branch kernel's status in the side-by-side run ('PASSED', or the first failure)."""
    speedup: float
    """Geometric mean over workloads of head ms / base ms: > 1, the base branch's kernel is faster
    (the pull request made it slower); 0.0 when not measured."""
    low: float
    """Geometric mean of the per-workload lower ends (head p10 / base p90)."""
    high: float
    """Geometric mean of the per-workload upper ends (head p90 / base p10)."""
    verdict: str
    """'slower' (the pull request's kernel is slower by the margin on every workload, beyond the runs'
    spread), 'faster', 'on par', 'uncertain' (the medians differ by the margin, the spread does not) or
    'not compared' (a side failed)."""
    per_workload: tuple[dict[str, Any], ...]
    """uuid, axes, head_ms (and each of its two medians), base_ms, their p10/p90, ratio, low, high."""
    head_drift: float
    """Largest relative difference between the head's two medians on one workload: the drift the
    interleaving cancels, to read the ratio against."""

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "speedup_vs_head": self.speedup, "low": self.low, "high": self.high,
                "verdict": self.verdict, "per_workload": list(self.per_workload), "head_drift": self.head_drift,
                "measured": "side by side: head, base, head"}


def verdict(ratios: Sequence[float], gamma: float, lows: Sequence[float] = (), highs: Sequence[float] = ()) -> str:
    """Head ms / base ms per workload -> 'slower' (the pull request's kernel, by the margin on every
    workload), 'faster', 'on par', or 'uncertain': the medians differ by the margin but the runs'
    spread does not (a workload whose least favourable pairing of p10 and p90, ``lows``/``highs``,
    crosses 1). On the H200 Liger's RMSNorm, whose PR only edited a comment, read "4.01x faster"
    from medians while its range ran 0.46x-7.18x and the head's own two medians differed by 35.6 %
    (session 26): a claim no maintainer should be shown."""
    if all(r >= gamma for r in ratios):
        return "slower" if all(lo > 1.0 for lo in lows) else "uncertain"
    if all(r <= 1 / gamma for r in ratios):
        return "faster" if all(hi < 1.0 for hi in highs) else "uncertain"
    return "on par"


def _timing(o: Outcome, uuid: str) -> Any:
    return next((r.timing for r in o.results if r.uuid == uuid and r.timing is not None), None)


def compare(head: Outcome, base: Outcome, head_again: Outcome, workloads: Sequence[Workload],
            gamma: float) -> BaseComparison:
    """Pure: the three outcomes of an interleaved measurement -> the comparison."""
    failed = next((o for o in (head, head_again) if not o.passed), None)
    if failed is not None or not base.passed:
        return BaseComparison(base.status, 0.0, 0.0, 0.0, "not compared", (), 0.0)
    rows, logs, lows, highs, drift = [], [], [], [], 0.0
    for w in workloads:
        h1, h2, b = _timing(head, w.uuid), _timing(head_again, w.uuid), _timing(base, w.uuid)
        if h1 is None or h2 is None or b is None or min(h1.median_ms, h2.median_ms, b.median_ms) <= 0:
            return BaseComparison(base.status, 0.0, 0.0, 0.0, "not compared", (), 0.0)
        h_ms = math.sqrt(h1.median_ms * h2.median_ms)
        drift = max(drift, abs(h1.median_ms - h2.median_ms) / min(h1.median_ms, h2.median_ms))
        ratio = h_ms / b.median_ms
        lo = min(h1.p10_ms, h2.p10_ms) / b.p90_ms
        hi = max(h1.p90_ms, h2.p90_ms) / b.p10_ms if b.p10_ms > 0 else ratio
        logs.append(math.log(ratio))
        lows.append(math.log(lo) if lo > 0 else math.log(ratio))
        highs.append(math.log(hi))
        rows.append({"uuid": w.uuid, "axes": dict(w.axes), "head_ms": h_ms, "head_medians_ms": [h1.median_ms, h2.median_ms],
                     "head_p10_ms": min(h1.p10_ms, h2.p10_ms), "head_p90_ms": max(h1.p90_ms, h2.p90_ms),
                     "base_ms": b.median_ms, "base_p10_ms": b.p10_ms, "base_p90_ms": b.p90_ms,
                     "ratio": ratio, "low": lo, "high": hi})
    mean = lambda xs: math.exp(sum(xs) / len(xs))  # noqa: E731
    reading = verdict([r["ratio"] for r in rows], gamma, [r["low"] for r in rows], [r["high"] for r in rows])
    return BaseComparison("PASSED", mean(logs), mean(lows), mean(highs), reading, tuple(rows), drift)
