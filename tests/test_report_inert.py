"""report.md is the optimize job's summary, which GitHub renders (issue 20): what the pull request's
code, a model or a candidate wrote reaches it inert. A failing kernel's log cannot close its fence,
and a link in it stays text."""

from __future__ import annotations

import re
from pathlib import Path

import git
import pytest

from kernelpro.cli import main, make_demo_repo

EVIL = "```\n\n[re-authorize the bot](https://evil.example/login) @maintainer\n\n```"


def test_a_failing_kernels_log_stays_inside_its_fence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    repo = make_demo_repo(tmp_path / "repo")
    kernel = repo / "kernels" / "swiglu.py"
    src = kernel.read_text()
    kernel.write_text(src.replace("    out = torch.empty_like(a)\n", f"    raise RuntimeError({EVIL!r})\n", 1))
    git.Repo(repo).git.commit("-qam", "a kernel whose error message is Markdown")
    out = tmp_path / "out"
    assert main(["optimize", "--repo", str(repo), "--base", "HEAD~2", "--head", "HEAD", "--out", str(out),
                 "--budget", "2"]) == 0
    report = (out / "swiglu" / "report.md").read_text()
    assert "failed with RUNTIME_ERROR" in report and "evil.example" in report
    # The log sits in a fence longer than any run of backticks in it; outside fences, no live link.
    fence = re.search(r"^(`{4,})\n", report, re.M)
    assert fence is not None, report
    inside = report.split(fence.group(1))[1]
    assert "https://evil.example/login" in inside
    outside = report.replace(inside, "")
    assert "](https://evil.example" not in outside and "@maintainer" not in outside
