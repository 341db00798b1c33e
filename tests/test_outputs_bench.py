"""benchmarks/outputs.py and benchmarks/preload.py (issue 22) on the CPU: each runs here as it will on
the H200, through the evaluator's and the preload's own functions, and writes its figures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_outputs_benchmark_counts_what_the_parent_read(tmp_path: Path) -> None:
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "outputs.py"), "--m", "16", "--n", "64", "--runs", "1",
                        "--reps-cpu", "6", "--out", str(tmp_path / "o.json")],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    row, = json.loads((tmp_path / "o.json").read_text())["rows"]
    # A first run per trial (the second is bit for bit the first: a marker) and the 5 checks, no decoy.
    assert row["files"] == 3 + 5 and row["second_runs_identical"] == 3, row
    assert "| files read |" in p.stdout


def test_the_preload_benchmark_grows_the_plan_by_a_lazy_import(tmp_path: Path) -> None:
    site = tmp_path / "site" / "kpkg"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("#\n")
    # email's parser is imported inside message_from_string: no import statement of the file names it.
    (site / "k.py").write_text("import email\n\nemail.message_from_string('x: y')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), *filter(None, [os.environ.get("PYTHONPATH")])])}
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "preload.py"), "--file", "kpkg/k.py", "--runs", "1",
                        "--out", str(tmp_path / "p.json")], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    doc = json.loads((tmp_path / "p.json").read_text())
    assert "email.parser" in doc["grown"] and set(doc["rows"]) == {"plan", "plan + grown"}, doc
    assert doc["rows"]["plan + grown"]["preloaded"] > doc["rows"]["plan"]["preloaded"]
