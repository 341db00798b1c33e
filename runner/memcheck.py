"""compute-sanitizer memcheck on a candidate, one of the final gate's checks (GPU only).

The candidate's harness runs one call per workload on fresh inputs under `compute-sanitizer --tool
memcheck`. A kernel that reads or writes out of bounds can still produce the right numbers (the
memory it touches happens to be mapped), and timing and output checks never see it; memcheck does.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .evaluator import EvalSettings, _request
from .sandbox import run_child
from .target import Tolerance
from .toolkit import find_tool
from .trace import Definition, Solution, Workload

ERROR_EXIT = 99
"""compute-sanitizer's exit code when it found errors (--error-exitcode)."""

_SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) error")


@dataclass(frozen=True)
class Memcheck:
    """What memcheck said about one candidate."""

    status: str
    """'clean'; 'errors'; 'failed' (it ran but did not finish cleanly: the gate fails closed, since a
    candidate could leave early to escape it); or 'not run' (no compute-sanitizer on this machine)."""
    errors: int = 0
    """Errors memcheck counted."""
    detail: str = ""
    """The first errors as memcheck printed them, or why it did not run."""

    @property
    def blocks(self) -> bool:
        """Whether the gate must refuse the candidate."""
        return self.status in ("errors", "failed")

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "errors": self.errors, "detail": self.detail}


def find_sanitizer(override: str | None = None) -> str | None:
    """``override`` (Settings.sanitizer_tool, KERNELPRO_COMPUTE_SANITIZER), then PATH, then the CUDA
    toolkit's usual homes."""
    return find_tool("compute-sanitizer", override)


def _first_errors(log: str, limit: int = 1200) -> str:
    lines = [ln.removeprefix("========= ").strip() for ln in log.splitlines() if ln.startswith("=========")]
    keep = [ln for ln in lines if ln and not ln.startswith(("COMPUTE-SANITIZER", "Saved host backtrace", "Host Frame"))]
    return "\n".join(keep)[:limit]


def memcheck(definition: Definition, solution: Solution, workloads: Sequence[Workload], es: EvalSettings,
             cache: Path | None, sanitizer: str | None = None) -> Memcheck:
    tool = find_sanitizer(sanitizer)
    if tool is None:
        return Memcheck("not run", detail="compute-sanitizer not found (install the CUDA toolkit or set "
                        "KERNELPRO_COMPUTE_SANITIZER)")
    wrapper = [tool, "--tool", "memcheck", "--error-exitcode", str(ERROR_EXIT), "--target-processes",
               "application-only", "--print-limit", "10", "--show-backtrace", "device"]
    req = {**_request(definition, solution, workloads, Tolerance(), es), "mode": "memcheck"}
    # Without torch's caching allocator every tensor is an allocation of its own, so a read just past
    # a tensor's end is outside any allocation memcheck knows of (inside a cached segment it is not).
    child = run_child(req, timeout_s=es.timeout_s, device=es.device, cache_dir=cache, wrapper=wrapper,
                      isolate=es.isolate_network, variables={"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"})
    found = _SUMMARY.findall(child.log)
    errors = int(found[-1]) if found else 0
    if errors or (child.status == "CRASHED" and f"exit code {ERROR_EXIT}" in child.log):
        return Memcheck("errors", max(errors, 1), _first_errors(child.log))
    ran = (child.result or {}).get("memcheck")
    if child.status == "OK" and isinstance(ran, dict) and "calls" in ran and found:
        return Memcheck("clean")
    why = "timed out" if child.status == "TIMEOUT" else f"{child.status}: {child.log.strip()[-400:]}"
    if isinstance(ran, dict) and "error" in ran:
        why = f"the candidate failed under memcheck: {str(ran['error'])[-400:]}"
    return Memcheck("failed", detail=why)
