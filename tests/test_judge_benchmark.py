"""benchmarks/judge.py (h200.sh step judge, issue 22) on the CPU: the script must run there as it will
on the H200, through the evaluator's own functions, and write each step's seconds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_judge_benchmark_times_each_step_of_small_files(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "judge.py"), "--m", "64", "--files", "2",
                        "--out", str(tmp_path / "j.json")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads((tmp_path / "j.json").read_text())
    assert doc["judged_on"] == "cpu" and doc["files"] == 2
    assert set(doc["median"]) == {"read", "digest", "place_candidate", "place_reference", "compare", "identical"}
    assert all(len(v) == 2 and all(x >= 0 for x in v) for v in doc["seconds"].values())
    assert "| compare |" in p.stdout and "projected:" in p.stdout
