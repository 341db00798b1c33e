"""Target: one kernel to optimize, and how its candidates are judged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .checkout import read_source
from .launch import Launch
from .layout import context as package_context
from .trace import BuildSpec, Definition, Solution, SourceFile, Workload

# Defaults per output dtype: (atol, rtol). Wider for low-precision types, where legitimate
# reorderings (exp2 for exp, fused multiply-add) move the last bits.
DEFAULT_TOLERANCE: Mapping[str, tuple[float, float]] = {
    "float64": (1e-8, 1e-8),
    "float32": (1e-5, 1e-5),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
    "float8_e4m3fn": (1e-1, 1e-1),
    "float8_e5m2": (1e-1, 1e-1),
    "float8_e4m3fnuz": (1e-1, 1e-1),
    "float8_e5m2fnuz": (1e-1, 1e-1),
    # Powers of two only: a scale rounded the other way (ceil against round) is one step, 2x, away.
    "float8_e8m0fnu": (0.0, 1.0),
    "float4_e2m1": (5e-1, 5e-1),
}


@dataclass(frozen=True)
class Tolerance:
    """Numerical tolerance; None means the dtype default (exact for integers and bool)."""

    atol: float | None = None
    """Absolute tolerance."""
    rtol: float | None = None
    """Relative tolerance."""
    outputs: tuple[tuple[str, Tolerance], ...] = ()
    """Per output name, what it sets overrides the values above (a bf16 output and an fp32
    statistic of the same kernel need different ones)."""

    def for_dtype(self, dtype: str) -> tuple[float, float]:
        atol, rtol = DEFAULT_TOLERANCE.get(dtype, (0.0, 0.0))
        return (atol if self.atol is None else self.atol, rtol if self.rtol is None else self.rtol)

    def for_output(self, name: str, dtype: str) -> tuple[float, float]:
        """(atol, rtol) of one output: its own, else the target's, else its dtype's default."""
        atol, rtol = self.for_dtype(dtype)
        own = dict(self.outputs).get(name)
        if own is None:
            return atol, rtol
        return (atol if own.atol is None else own.atol, rtol if own.rtol is None else own.rtol)


@dataclass(frozen=True)
class Budget:
    """How much search a target gets."""

    evaluations: int = 24
    """Candidate evaluations, the baseline included."""
    minutes: float = 30.0
    """Wall-clock limit for the whole search of this target."""
    timeout_s: float = 120.0
    """Wall-clock limit for one child of this target's run: each evaluation of the search and the gate,
    memcheck and the base-branch comparison; profiling and energy arms get a multiple of it."""

    @property
    def profile_timeout_s(self) -> float:
        """A profiling child's limit: ncu replays every kernel once per counter pass (180 s of 120)."""
        return self.timeout_s * 1.5

    @property
    def energy_timeout_s(self) -> float:
        """An energy arm's limit to start: build, compile and warm up every workload (300 s of 120)."""
        return self.timeout_s * 2.5


@dataclass(frozen=True)
class Target:
    """One kernel: where it lives, what it computes, on which workloads it is judged."""

    name: str
    """Unique name inside the repository's .kernelpro.yml."""
    language: str
    """'triton' or 'cuda' (or 'python')."""
    files: tuple[str, ...]
    """Repository-relative paths of the kernel's source files (the Solution's sources)."""
    entry_point: str
    """'path/in/repo.py::function' called by the harness."""
    definition: Definition
    """What the kernel computes."""
    workloads: tuple[Workload, ...]
    """Workloads for GPU runs."""
    cpu_workloads: tuple[Workload, ...] = ()
    """Smaller workloads for CPU runs (Triton interpreter); the GPU ones are used when empty."""
    destination_passing_style: bool = False
    """True when the entry point takes its outputs as trailing arguments."""
    tolerance: Tolerance = field(default_factory=Tolerance)
    """Numerical tolerance."""
    budget: Budget = field(default_factory=Budget)
    """Search budget."""
    globs: tuple[str, ...] = ()
    """Globs from the config whose changes select this target."""
    flops: str | None = None
    """Python expression over axis names: floating-point operations per call (roofline)."""
    bytes: str | None = None
    """Python expression over axis names: bytes that must move per call (roofline)."""
    launch: Launch | None = None
    """How the harness calls a raw CUDA kernel (language 'cuda'); None otherwise."""
    binding: str | None = None
    """'torch' for a cuda target built as a torch extension (its sources define the wrapper)."""
    returns: tuple[int | str, ...] = ()
    """Where the outputs are in what the entry point returns (BuildSpec.returns); empty: in order."""
    in_place: tuple[tuple[str, str], ...] = ()
    """(output, input): outputs the entry point writes into one of its inputs."""
    python_path: tuple[str, ...] = ()
    """Folders (repository-relative) the repository's code is imported from; empty: found (runner/layout.py)."""
    guard: bool = True
    """Whether the final gate also times guard shapes derived from the workloads (runner/guard.py)."""
    guard_shapes: tuple[Mapping[str, int], ...] = ()
    """Axis values the final gate times beyond the derived guard shapes (``guard_shapes:``)."""

    def workloads_for(self, device: str) -> tuple[Workload, ...]:
        return self.workloads if device == "cuda" or not self.cpu_workloads else self.cpu_workloads

    def solution(self, checkout: Path, name: str | None = None, author: str = "baseline") -> Solution:
        """The kernel as its commit holds it (read from git objects, not the work tree): its files
        become the Solution's sources. Symlinks, submodules and paths outside the checkout are refused
        (runner/checkout.py's CheckoutError says which and why)."""
        sources = tuple(SourceFile(f, read_source(checkout, f)) for f in self.files)
        return Solution(
            name=name or f"{self.name}-baseline",
            definition=self.definition.name,
            author=author,
            spec=BuildSpec(
                language=self.language,
                target_hardware=("cuda",),
                entry_point=self.entry_point,
                destination_passing_style=self.destination_passing_style,
                launch=self.launch,
                binding=self.binding,
                returns=self.returns,
                in_place=self.in_place,
                python_path=self.python_path,
            ),
            sources=sources,
        )

    def context(self, checkout: Path) -> tuple[SourceFile, ...]:
        """The rest of the packages the target's files belong to, as the checkout's commit holds them:
        the candidate runs as the repository with its files in place (runner/layout.py)."""
        if self.language == "cuda":
            return ()
        # An empty file (a package's __init__.py) becomes a comment: FlashInfer-Trace refuses empty sources.
        return tuple(SourceFile(p, t or "# empty in the repository\n")
                     for p, t in package_context(checkout, self.files, self.python_path))
