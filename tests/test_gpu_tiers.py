"""benchmarks/h200.sh splits the GPU tier into steps of about 5 minutes (two fit one 10-minute call,
or run side by side on two GPUs): every GPU test must be in exactly one of them, or a new test would
silently never run on the H200."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _collected(expr: str | None) -> set[str]:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collect-only", "-m", "gpu",
           str(ROOT / "tests" / "test_gpu.py")]  # fmt: skip
    p = subprocess.run([*cmd, *(["-k", expr] if expr else [])], capture_output=True, text=True, cwd=ROOT, timeout=120)
    return {line.split("::")[1] for line in p.stdout.splitlines() if "::" in line}


def test_the_four_tiers_hold_every_gpu_test_once() -> None:
    script = (ROOT / "benchmarks" / "h200.sh").read_text()
    tiers = dict(re.findall(r'\[(t\d)\]="([^"]+)"', script))
    assert sorted(tiers) == ["t1", "t2", "t3", "t4"]
    parts = {name: _collected(expr) for name, expr in tiers.items()}
    everything = _collected(None)
    assert len(everything) >= 18
    assert set().union(*parts.values()) == everything, everything - set().union(*parts.values())
    assert sum(len(p) for p in parts.values()) == len(everything), parts  # none in two tiers


def test_every_other_file_with_gpu_tests_is_in_a_step() -> None:
    """A GPU test outside tests/test_gpu.py runs on the H200 only if a step of h200.sh names its file."""
    script = (ROOT / "benchmarks" / "h200.sh").read_text()
    named = set(re.findall(r"tests/(test_\w+\.py)", script))
    marked = {p.name for p in (ROOT / "tests").glob("test_*.py")
              if p.name != "test_gpu.py" and re.search(r"pytest\.mark\.gpu\b", p.read_text())}
    assert marked <= named, sorted(marked - named)
