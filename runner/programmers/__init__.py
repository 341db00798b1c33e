"""Programmers write candidates. One interface, chosen by name from an explicit registry.

Each entry names the module that implements it and the pip extra to install when an import
fails, so a missing dependency is a clear instruction rather than a traceback.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..candidate import Candidate
    from ..search import Scored
    from ..target import Target


@dataclass(frozen=True)
class Context:
    """What a programmer may know when it writes candidates."""

    target: Target
    """The kernel being optimized."""
    seen: Callable[[str], bool]
    """Whether a solution content hash was already evaluated (never propose it again)."""
    device: str
    """'cuda' or 'cpu'."""
    gpu_name: str = ""
    """Marketing name of the GPU, for prompts."""
    bottleneck: str = "unknown"
    """Stage 1 class of the kernel (compute | memory | latency | mixed | unknown)."""
    feedback: str = ""
    """Profiler feedback on the parent, already rendered for a prompt (empty when feedback is off)."""
    findings: tuple[Any, ...] = ()
    """The parent's Findings (runner.tools.Finding), severity-ordered, for programmers that act on them."""
    memory: str = ""
    """The run's search memory, rendered for a prompt (empty when memory is off)."""
    profile: Any = None
    """The parent's Profile (runner.evidence.Profile), or its nearest profiled ancestor's; None when unprofiled."""
    tool_mode: str = "proactive"
    """How the tools' evidence reaches a model: proactive (findings in the prompt) | reactive (offered as
    function calls that the model chooses from; the llm programmer then leaves `feedback` out)."""
    tools: tuple[Any, ...] = ()
    """The registered ProfilingTools (built-in plus the repository's own), for reactive mode; empty means
    the built-in registry."""
    energy_notes: str = ""
    """Energy mode active: the energy-only findings and the proxy estimate, for a subordinate prompt section."""
    energy: bool = False
    """Energy is an objective (mode active): reactive mode offers the energy-only tools too."""
    gamma: float = 1.03
    """The final gate's rule: a winner is at least this much faster than the baseline on every workload."""
    stage1: Any = None
    """Stage 1's roofline of the pull request's kernel (runner.roofline.ReferenceAnalysis); None off the GPU."""
    baseline: Any = None
    """The pull request's kernel as evaluated (runner.search.Scored): its timings go into every prompt."""


class Programmer(Protocol):
    """Writes up to n new candidates from a parent, in mode init | debug | optimize."""

    name: str

    def propose(self, parent: Scored, mode: str, n: int, context: Context) -> list[Candidate]: ...


@dataclass(frozen=True)
class Plugin:
    """A registry entry."""

    name: str
    """What users pass to --programmer."""
    factory: str
    """'module:attribute' of a callable taking Settings and returning a Programmer."""
    extra: str | None
    """pip extra that brings its dependencies, or None."""
    summary: str
    """One line for --help."""


REGISTRY: dict[str, Plugin] = {
    p.name: p
    for p in (
        Plugin("tuner", "kernelpro.runner.programmers.tuner:make", None,
               "deterministic launch-parameter transformations; no network"),
        Plugin("llm", "kernelpro.runner.programmers.llm:make", None,
               "any OpenAI-compatible endpoint (KERNELPRO_LLM_BASE_URL, KERNELPRO_LLM_MODEL, key)"),
    )
}


class PluginError(RuntimeError):
    """A plug-in cannot be loaded or cannot work (a dead endpoint, a rejected key); the message says what
    to install or set."""


def usage(programmer: Programmer, extractor: object = None) -> dict[str, Any]:
    """What the report says about who wrote the candidates: the name, and for programmers that count
    their work (the llm one: model, endpoint host, requests, tokens, retries, errors), those counts.
    An ``extractor`` that counts its requests (runner/extractor.py: the search memory's, on the same
    endpoint) adds them to the totals, and its share is kept under ``extraction``."""
    counts = getattr(programmer, "usage", None)
    name = getattr(programmer, "name", None) or type(programmer).__name__  # a test's stand-in may have none
    used = {"name": name, **(counts().to_json() if callable(counts) else {})}
    extra = getattr(extractor, "counts", None)
    if "model" in used and isinstance(extra, dict) and extra.get("requests"):
        for key in ("requests", "answered", "errors", "tokens_in", "tokens_out"):
            used[key] = int(used.get(key, 0)) + int(extra.get(key, 0))
        used["extraction"] = dict(extra)
    return used


def load(name: str, settings: object) -> Programmer:
    plugin = REGISTRY.get(name)
    if plugin is None:
        raise PluginError(f"unknown programmer {name!r}; choose one of {', '.join(REGISTRY)}")
    module_name, attr = plugin.factory.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        hint = f"pip install 'kernelpro[{plugin.extra}]'" if plugin.extra else "reinstall kernelpro"
        raise PluginError(f"programmer {name!r} needs {e.name}: {hint}") from e
    factory: Callable[[object], Programmer] = getattr(module, attr)
    return factory(settings)
