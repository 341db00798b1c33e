"""benchmarks/upstream.py: every corpus target is a configuration kernelpro accepts, the pull request
is a comment, and the whole path (a repository, `kernelpro optimize` as a subprocess, the three
tables read from what it wrote) runs in its tiny CPU mode, as the lead runs it on the H200."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "upstream.py"


@pytest.fixture(scope="module")
def upstream() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))
    spec = importlib.util.spec_from_file_location("kp_upstream_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_target_is_a_valid_configuration(upstream: ModuleType, tmp_path: Path) -> None:
    """Each corpus target's .kernelpro.yml parses (the packages need not be installed: the kernel's
    file is a stand-in here), names the file the pull request edits, and the edit is a comment."""
    from kernelpro.runner.config import parse_config

    for k in upstream.KERNELS:
        files = dict(k.files) or {"__init__.py": "", k.target["entry_point"].split("::")[0]: "def f(*a):\n    return a\n",
                                  **{s: "# a source\n" for s in k.target.get("sources", [])},
                                  k.kernel_file: "# upstream\nimport torch\n"}
        repo = tmp_path / k.name
        repo.mkdir()
        config = upstream.make_repo(upstream.Upstream(k.name, k.package, k.root, k.kernel_file, k.target, None, files),
                                    repo, 4)
        target = parse_config((repo / ".kernelpro.yml").read_text(), ".kernelpro.yml", repo).targets[0]
        assert target.name == k.name and config["targets"][0]["files"] == [k.path(k.kernel_file)]
        diff = upstream.git(repo, "diff", "HEAD~1", "HEAD", "--unified=0")
        changed = [ln for ln in diff.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
        assert len(changed) == 2 and all(ln[1:].lstrip().startswith("#") for ln in changed), changed


def test_the_tiny_run_goes_through_kernelpro_optimize_and_fills_the_tables(upstream: ModuleType, tmp_path: Path) -> None:
    rc = upstream.main(["--device", "cpu", "--tiny", "--budget", "3", "--out", str(tmp_path)])
    assert rc == 0
    (row,) = json.loads((tmp_path / "upstream.json").read_text())
    assert row["rc"] == 0 and row["evaluations"] == 3 and row["baseline_status"] == "PASSED"
    assert row["knobs"] and row["baseline_ms"] and row["seconds_per_eval"], row
    assert "warm" in row["spawn"] or "fork server" in row["spawn"], row["spawn"]
    text = (tmp_path / "upstream.md").read_text()
    assert "| tiny_affine | 0 | 3 |" in text and "### Issue 22" in text and "### Issue 23" in text
    # The parent's clock per call against the median, for every timed workload of the run's evaluations.
    unseen = row["unseen_over_median"]
    assert len(unseen) >= 3 and all(u > 0.5 for u in unseen), unseen
    assert f"| tiny_affine | {len(unseen)} |" in text and "### Timing integrity" in text
    assert (tmp_path / "files" / "tiny_affine.result.json").exists()
