"""benchmarks/teardown.py (h200.sh step teardown, issue 22) runs its CPU variants here: a benchmark
that fails on the GPU machine costs device time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "teardown.py"


def test_the_cpu_variants_run_and_their_exits_are_timed(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(BENCH), "--device", "cpu", "--repeats", "1", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((tmp_path / "teardown.json").read_text())
    assert set(doc["variants"]) == {"nothing", "torch"}
    for name, v in doc["variants"].items():
        assert "error" not in v, (name, v)
        assert 0 <= v["teardown_s"][0] < 10 and v["before_s"][0] > 0, (name, v)
    assert "| torch |" in p.stdout
    inside = doc["harness"]  # the demo's kernel through kernelpro's own evaluator, its journaled phases
    assert "errors" not in inside and len(inside["teardown"]) == 1 and 0 <= inside["teardown"][0] < 10, inside
