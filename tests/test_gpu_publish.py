"""GPU tier (issue 20): what a real GPU run writes passes the publish step's own checks.

On the GPU the tuner's search goes several moves deep (a block size can leave the first move's
window), and the gate's numbers are real measurements: the publish step must accept both, i.e.
recompute the winner's patch from the PR head and the winner's parameters, byte for byte, and find
the numbers consistent (speedup = baseline / best, ranges around medians, geometric mean, gamma).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import git
import pytest

from kernelpro.bot.artifact import load_results
from kernelpro.bot.publish import _Git, recompute
from kernelpro.cli import make_demo_repo
from kernelpro.pipeline import run_optimize
from kernelpro.runner.config import load_config
from kernelpro.settings import Settings

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (run on the GPU machine)"),
]


@pytest.mark.parametrize("example", ["demo", "cuda"])
def test_a_gpu_tuner_winner_is_recomputed_by_publish(tmp_path: Path, example: str) -> None:
    repo = make_demo_repo(tmp_path / "repo", example)
    head = git.Repo(repo).head.commit.hexsha
    settings = Settings.from_env({**os.environ, "KERNELPRO_DEVICE": "cuda", "KERNELPRO_PROGRESS": "0"})
    out = tmp_path / "out"
    assert run_optimize(repo, "HEAD~1", "HEAD", out, settings, kernel=None, budget=8, programmer_name="tuner",
                        search="mcts") == 0
    config = load_config(repo / ".kernelpro.yml", repo)
    allowed = {t.name: list(t.files) for t in config.targets}
    launches = {t.name: (t.launch.kernel, tuple(t.launch.block)) for t in config.targets if t.launch is not None}
    results = load_results(out, allowed_files=allowed)  # the number checks, on real measurements
    # The baseline's own log says why it failed, where a stop reason only names the status.
    logs = [json.loads(f.read_text()).get("baseline", {}).get("log", "")[:1500] for f in out.rglob("result.json")]
    assert results.winners, ([t.stop_reason for t in results.targets], logs)
    g = _Git(repo, repo.as_uri())
    for t in results.winners:
        assert t.winner is not None and t.winner.workloads
        print(f"{t.name}: {t.winner.speedup:.3f}x, lineage {list(t.winner.lineage)}, params {dict(t.winner.params)}")
        derived, why = recompute(g, head, t, allowed[t.name], launches.get(t.name, (None, None)))
        assert derived == t.patch, why
