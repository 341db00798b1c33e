"""Guard shapes reach the follow-up PR body (issue 19, shapes beyond the configured workloads).

The final gate times the winner on shapes nobody listed (runner/guard.py); result.json carries that
verdict in ``winner.guards`` (GuardCheck.to_json), the publish step reads it as checked records
(kernelpro/schema.py Guards) and the body lists every shape with its PR / candidate ratio, so a
reviewer does not read "faster on the workloads" as "faster everywhere".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_bot_artifact import ALLOWED, H200, demo_results

from kernelpro.bot.artifact import ArtifactError, load_results
from kernelpro.bot.body import md, render_body
from kernelpro.runner.guard import GuardCheck

SHA = "0123456789abcdef0123456789abcdef01234567"


def _row(m: int, why: str, base: float, cand: float) -> dict[str, Any]:
    # Exactly the keys runner/guard.py's check writes for a timed shape.
    return {"uuid": f"guard-{m}", "axes": {"M": m}, "why": why, "baseline_ms": base, "candidate_ms": cand,
            "speedup": base / cand, "noise": 1.04, "n": 120, "verdict": "ok"}


GUARDS = GuardCheck(
    True, "passed",
    (_row(2048, "M=2048: a smaller power of two than listed", 0.0412, 0.0340),
     _row(32768, "M=32768: a larger power of two than listed", 1.402, 1.431),
     _row(4097, "M=4097: an odd size", 0.0911, 0.0702)),
    ({"uuid": "guard-1", "axes": {"M": 1}, "why": "M=1: the smallest size", "reason": "the pull request's kernel fails here (RUNTIME_ERROR)"},),
    ("M=65536: over the memory cap of the guard shapes (17.2 GB)",),
)


def _results(tmp_path: Path, guards: dict[str, Any] | None) -> Path:
    d = tmp_path / "r"
    shutil.copytree(H200, d)
    for p in d.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    data = json.loads((d / "summary.json").read_text())
    data["targets"][0]["winner"]["guards"] = guards
    (d / "summary.json").write_text(json.dumps(data))
    return d


def body(results_dir: Path) -> str:
    results = load_results(results_dir, allowed_files=ALLOWED)
    return render_body(results, pr_number=7, head_sha=SHA, run_url=None, kernelpro_version="0.1.0",
                       programmer="tuner", model=None)


def test_guard_shapes_and_their_ratios_are_in_the_pr_body(tmp_path: Path) -> None:
    text = body(_results(tmp_path, GUARDS.to_json()))
    assert "**Shapes measured:**" in text and "guard shapes around them" in text
    assert "**Shapes not measured:**" not in text
    assert ("| guard shapes | 3 shape(s) beyond the listed workloads, none slower than the PR's kernel beyond the "
            "noise (PR / candidate 0.98x to 1.30x); 1 not judged (the PR's kernel fails there) |") in text
    assert "<summary>Guard shapes (sizes the configuration does not list, final gate)</summary>" in text
    for row in ("| M=2048 | M=2048: a smaller power of two than listed | 0.0412 | 0.0340 | 1.21x | 1.040 | ok |",
                "| M=32768 | M=32768: a larger power of two than listed | 1.402 | 1.431 | 0.98x | 1.040 | ok |",
                "| M=4097 | M=4097: an odd size | 0.0911 | 0.0702 | 1.30x | 1.040 | ok |",
                "| M=1 | M=1: the smallest size | - | - | - | - | not judged: the pull request's kernel fails here "
                "\\(RUNTIME\\_ERROR\\) |",
                "- M=65536: over the memory cap of the guard shapes \\(17.2 GB\\)"):
        assert row in text, row
    assert text.count("<details>") == text.count("</details>")


def test_the_cpu_demo_winner_guard_shapes_reach_the_body(tmp_path_factory: pytest.TempPathFactory) -> None:
    # The real `kernelpro demo`: the runner's final gate writes winner.guards, publish reads and shows it.
    directory = demo_results(tmp_path_factory)
    (target,) = load_results(directory, allowed_files=ALLOWED).winners
    assert target.winner is not None and target.winner.guards is not None and target.winner.guards.shapes
    text = body(directory)
    assert "**Shapes measured:**" in text and "| guard shapes | " in text
    for s in target.winner.guards.shapes:
        assert f"| {md(s.axes, 80)} | {md(s.why, 120)} | " in text
        assert s.speedup is not None and f"{s.speedup:.2f}x" in text


def test_without_guard_shapes_the_body_says_only_the_workloads_were_measured(tmp_path: Path) -> None:
    text = body(_results(tmp_path, None))
    assert "**Shapes not measured:**" in text
    assert "| guard shapes | none timed (turned off, or written by an older kernelpro) |" in text
    assert "<summary>Guard shapes" not in text


def test_a_winner_the_guard_shapes_refused_is_not_a_winner(tmp_path: Path) -> None:
    refused = GuardCheck(False, "slower than the pull request's kernel beyond the noise on guard shape(s)",
                         (_row(2048, "M=2048: a smaller power of two than listed", 0.030, 0.041),))
    with pytest.raises(ArtifactError, match=r"winner\.guards.*not a verified winner"):
        load_results(_results(tmp_path, refused.to_json()), allowed_files=ALLOWED)
    forged = json.loads(json.dumps(GUARDS.to_json()))
    forged["shapes"][0]["speedup"] = 3.0  # the ratio the body shows must be the times' ratio
    with pytest.raises(ArtifactError, match=r"guards\.shapes\[0\]\.speedup"):
        load_results(_results(tmp_path / "forged", forged), allowed_files=ALLOWED)


def test_guard_text_from_the_artifact_is_escaped(tmp_path: Path) -> None:
    hostile = json.loads(json.dumps(GUARDS.to_json()))
    hostile["shapes"][0]["why"] = "<img src=x onerror=alert(1)> @octocat | `x`"
    hostile["notes"] = ["\n## injected heading [x](javascript:alert(1))"]
    text = body(_results(tmp_path, hostile))
    assert "<img" not in text and "@octocat" not in text and "\n## injected" not in text
    assert "&lt;img src=x onerror=alert\\(1\\)&gt; @&#8203;octocat \\| &#96;x&#96;" in text
