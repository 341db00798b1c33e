"""benchmarks/h200.sh splits the GPU tier into steps that fit the 10-minute calls (tier-par,
tier-timing-a, tier-timing-b, tier-timing-c over every file; t1-t4 over tests/test_gpu.py): every GPU test must be
in exactly one part of a split, or a new test would silently never run on the H200."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _selection(exprs: list[str]) -> dict[str, tuple[set[str], set[int]]]:
    """Every GPU test of every file that has any, as `file::test[id]`: its markers and which of ``exprs``
    select it with `-k` (tests/gpu_selection.py), from one collection."""
    files = [str(p) for p in sorted((ROOT / "tests").glob("test_*.py")) if re.search(r"pytest\.mark\.gpu\b", p.read_text())]
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "gpu_selection", "--collect-only",
           "-m", "gpu", *files]
    env = {**os.environ, "KERNELPRO_SELECT": json.dumps(exprs),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))}
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, env=env)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("KERNELPRO_SELECTION ")), None)
    assert line is not None, p.stdout[-2000:] + p.stderr[-2000:]
    found = json.loads(line.removeprefix("KERNELPRO_SELECTION "))
    return {node.split("tests/", 1)[1]: (set(v["marks"]), set(v["k"])) for node, v in found.items()}


def test_the_four_tiers_hold_every_gpu_test_once() -> None:
    script = (ROOT / "benchmarks" / "h200.sh").read_text()
    tiers = dict(re.findall(r'\[(t\d)\]="([^"]+)"', script))
    assert sorted(tiers) == ["t1", "t2", "t3", "t4"]
    names = sorted(tiers)
    selected = {node: ks for node, (_, ks) in _selection([tiers[n] for n in names]).items()
                if node.startswith("test_gpu.py::")}
    parts = {name: {node for node, ks in selected.items() if i in ks} for i, name in enumerate(names)}
    everything = set(selected)
    assert len(everything) >= 18
    assert set().union(*parts.values()) == everything, everything - set().union(*parts.values())
    assert sum(len(p) for p in parts.values()) == len(everything), parts  # none in two tiers


def test_the_four_parts_of_the_tier_hold_every_gpu_test_once() -> None:
    """`bash .ci/gpu` (and h200.sh's tier-* steps, one call each) runs the tier as par (no gpu_timing,
    under pytest-xdist), timing-a, timing-b and timing-c (alone on the GPU): every GPU test of every
    file in exactly one part, no timing test among the parallel ones, the demo's two readers in one part."""
    script = (ROOT / ".ci" / "gpu").read_text()
    found_a = re.search(r'^TIMING_A="([^"]+)"$', script, re.M)
    found_c = re.search(r'^TIMING_C="([^"]+)"$', script, re.M)
    assert found_a and found_c, "TIMING_A or TIMING_C is gone from .ci/gpu"
    timing_a, timing_c = found_a.group(1), found_c.group(1)
    assert '-m "gpu and not gpu_timing" -n' in script
    assert '-m "gpu and gpu_timing" -k "($TIMING_A)' in script
    assert '-m "gpu and gpu_timing" -k "not ($TIMING_A) and not ($TIMING_C)' in script
    assert '-m "gpu and gpu_timing" -k "($TIMING_C) and not ($TIMING_A)' in script
    assert "parts=(par timing-a timing-b timing-c)" in script
    h200 = (ROOT / "benchmarks" / "h200.sh").read_text()
    assert "tier-par|tier-timing-a|tier-timing-b|tier-timing-c)" in h200 and '.ci/gpu" --part "${1#tier-}"' in h200
    found = _selection([f"({timing_a})", f"not ({timing_a}) and not ({timing_c})", f"({timing_c}) and not ({timing_a})"])
    par = {node for node, (marks, _) in found.items() if "gpu_timing" not in marks}
    a, b, c = ({node for node, (marks, ks) in found.items() if "gpu_timing" in marks and i in ks} for i in range(3))
    everything = set(found)
    assert len(everything) >= 40 and a and b and c
    assert par | a | b | c == everything, sorted(everything - (par | a | b | c))
    assert len(par) + len(a) + len(b) + len(c) == len(everything)
    assert not par & (a | b | c)  # the timing parts hold gpu_timing tests only (their -m)
    # tests/conftest.py's gpu_demo is session-scoped: one run for both only within one pytest process.
    assert {"test_gpu.py::test_demo_finds_a_verified_speedup_on_the_gpu",
            "test_guard.py::test_the_demo_on_the_gpu_reports_its_guard_shapes"} <= a
