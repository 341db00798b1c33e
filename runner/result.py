"""What one optimize run is asked to do (RunSettings) and what it found (Result, GateResult).

Records only: runner/optimize.py produces them and runner/report.py renders them, so the report needs
nothing of the loop (they were an import circle).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .basebranch import BaseComparison
from .candidate import Candidate
from .energy import EnergyOutcome
from .evaluator import EvalSettings
from .evidence import Profile
from .profiler import ProfileSettings
from .roofline import ReferenceAnalysis
from .search import Scored
from .target import Target
from .tools import Analysis, ProfilingTool


@dataclass(frozen=True)
class RunSettings:
    """How one optimize run behaves."""

    search: str = "mcts"
    """Search strategy name (runner/search)."""
    budget: int | None = None
    """Evaluations, baseline included; None takes the target's budget."""
    per_step: int = 4
    """Candidates the programmer writes per expansion."""
    gamma: float = 1.03
    """A winner must be at least this much faster than the baseline in the final gate."""
    gate_trials: int = 5
    """Fresh seeded input sets per workload in the final gate."""
    gate_top: int = 3
    """How many of the best candidates the gate tries, in rank order."""
    memcheck: bool = True
    """On the GPU, the gate also runs each candidate that passed it so far under compute-sanitizer memcheck."""
    sanitizer_tool: str | None = None
    """compute-sanitizer to run it with (Settings.sanitizer_tool); None: PATH, then the toolkit's homes."""
    evaluation: EvalSettings = field(default_factory=EvalSettings)
    """Evaluator settings for search evaluations."""
    feedback: str = "tools"
    """What profiling reaches the programmer: none | raw (metrics only) | tools (findings + metrics)."""
    memory: bool = True
    """Keep a search memory and show it to the programmer (off: the ablation)."""
    tool_mode: str = "proactive"
    """With feedback 'tools': proactive (every relevant tool runs, findings in the prompt) | reactive (the
    tools are offered to the model as function calls)."""
    profiling: ProfileSettings = field(default_factory=ProfileSettings)
    """What is collected when a candidate is profiled (GPU only)."""
    extra_tools: tuple[ProfilingTool, ...] = ()
    """The repository's own tools (from its base branch)."""
    energy: str = "off"
    """off | passive (NVML measures the baseline and the winner after the gate; the search is unchanged) |
    active (also the proxy term in the reward, the energy-only tools, the prompt's energy notes, and the
    least measured energy among gate-passing candidates within the timing noise)."""
    tie_noise: float | None = None
    """Speedup factor within which candidates count as equally fast; None: the gate's gamma or the
    baseline's measured p90/p10 spread, whichever is wider."""
    command: str = ""
    """The command line that reproduces this run (the CLI sets it; the report's settings row shows it)."""
    guard_bytes: float | None = None
    """Largest guard shape (inputs and outputs, bytes); None: runner/guard.py's cap for the device."""


@dataclass(frozen=True)
class GateResult:
    """The final gate's verdict on one candidate against the baseline, measured side by side."""

    candidate: Candidate
    """The candidate."""
    passed: bool
    """Correct on more seeds and faster than gamma (or the baseline's p90/p10 where wider) on every workload."""
    speedup: float
    """Geometric mean over workloads of baseline median / candidate median."""
    per_workload: tuple[dict[str, Any], ...]
    """uuid, axes, baseline and candidate timings, speedup and its range."""
    reason: str
    """Why it failed, or 'passed'."""
    correctness: tuple[dict[str, Any], ...] = ()
    """Per workload: max errors, trials, seeds."""
    memcheck: Mapping[str, Any] | None = None
    """compute-sanitizer memcheck of the candidate (runner.memcheck.Memcheck.to_json); None off the GPU."""
    guards: Mapping[str, Any] | None = None
    """The guard shapes' verdict (runner.guard.GuardCheck.to_json); None when none were timed."""


@dataclass(frozen=True)
class Result:
    """What one optimize run found."""

    target: Target
    """The kernel."""
    device: str
    """'cuda' or 'cpu'."""
    baseline: Scored
    """The PR head's kernel."""
    evaluated: tuple[Scored, ...]
    """Every evaluation, baseline first, in order."""
    winner: GateResult | None
    """The verified faster kernel; None when the baseline stands."""
    gates: tuple[GateResult, ...]
    """Every gate attempt, in rank order."""
    base_branch: Scored | None
    """The base branch's version of the kernel, when it exists and differs."""
    stop_reason: str
    """Why the search ended."""
    seconds: float
    """Wall time of the run."""
    journal_resumed: int
    """Evaluations read back from an earlier run's journal."""
    journal_torn: int = 0
    """Journal lines cut short by a killed run (skipped when reading back)."""
    stage1: ReferenceAnalysis | None = None
    """Roofline classification of the pull request's kernel (GPU runs)."""
    analyses: Mapping[str, tuple[Profile, Analysis]] = field(default_factory=dict)
    """Candidate key -> its profile and Stage 2 findings (the baseline and each new best)."""
    profile_seconds: float = 0.0
    """Time spent profiling."""
    memory: tuple[dict[str, Any], ...] = ()
    """The search memory at the end: section, text, evaluation."""
    energy: EnergyOutcome | None = None
    """Energy mode, measurements and how they were used; None when energy is off."""
    duplicates: int = 0
    """Proposals not evaluated because they build the same code as an evaluated candidate."""
    versus_base: BaseComparison | None = None
    """The PR's kernel against the base branch's, measured side by side after the search (None when
    there is no different base version, or one of them failed its evaluation)."""
    programmer: Mapping[str, Any] = field(default_factory=dict)
    """Who wrote the candidates (runner.programmers.usage): name, and for the llm one its model, endpoint
    host and counts of requests, tokens, retries and errors."""
