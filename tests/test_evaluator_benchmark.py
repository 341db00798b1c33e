"""benchmarks/evaluator.py in its tiny CPU mode: the script the lead runs once on the H200 must
have no bug there, so every part of it runs here first (Triton's interpreter, smallest sizes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tiny_mode_runs_every_part_and_writes_the_json(tmp_path: Path) -> None:
    env = {**os.environ, "KERNELPRO_PROGRESS": "0"}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "evaluator.py"), "--device", "cpu", "--tiny",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=600, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "not GPU timings" in p.stdout and "| A/A false 'faster'" in p.stdout
    res = json.loads((tmp_path / "evaluator.json").read_text())
    assert res["device"] == "cpu" and res["tiny"] is True
    assert res["aa"]["decisions"] == 2 and res["aa"]["failures"] == []
    assert res["repeat"]["runs"] == 2 and len(res["repeat"]["medians_ms"]) == 2
    assert res["throughput"]["runs"] == 1 and res["throughput"]["median_s"] > 0
    assert set(res["throughput"]["phases"][0]) >= {"startup", "verify", "time", "build"}


def test_tiny_is_refused_on_the_gpu(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "evaluator.py"), "--device", "cuda", "--tiny",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--tiny is the CPU check" in p.stderr
