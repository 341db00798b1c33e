"""The environment is read once, into Settings, at the entry point: the workflow's variables too."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kernelpro import action
from kernelpro.settings import Settings


def test_the_workflow_variables_are_settings() -> None:
    s = Settings.from_env({"KERNELPRO_BASE_SHA": "a" * 40, "KERNELPRO_HEAD_SHA": "b" * 40, "KERNELPRO_BUDGET": "12",
                           "KERNELPRO_PROGRAMMER": "llm", "KERNELPRO_PR_LABELS": "performance, kernelpro bot\nperformance",
                           "KERNELPRO_PR_REVIEWERS": "bob,\n octo/kernel-team", "NO_COLOR": "1",
                           "CUDA_VISIBLE_DEVICES": "2,5"})
    assert (s.base_sha, s.head_sha, s.budget, s.programmer) == ("a" * 40, "b" * 40, 12, "llm")
    assert s.pr_labels == ("performance", "kernelpro bot") and s.pr_reviewers == ("bob", "octo/kernel-team")
    assert s.no_color and s.visible_devices == "2,5"


def test_unset_workflow_variables_are_the_defaults() -> None:
    s = Settings.from_env({"KERNELPRO_BUDGET": "", "NO_COLOR": ""})
    assert (s.base_sha, s.head_sha, s.budget, s.programmer) == ("", "", None, "tuner")
    assert s.pr_labels == () and s.pr_reviewers == () and not s.no_color and s.visible_devices is None
    assert Settings.from_env({"CUDA_VISIBLE_DEVICES": ""}).visible_devices == ""  # set but empty: no GPU


def test_the_optimize_job_takes_its_commits_from_the_settings(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A variable set after the settings were read is not read again behind their back."""
    monkeypatch.setenv("KERNELPRO_BASE_SHA", "a" * 40)
    monkeypatch.setenv("KERNELPRO_HEAD_SHA", "b" * 40)
    args = argparse.Namespace(target="swiglu", checkout=str(tmp_path), out=str(tmp_path / "out"))
    with pytest.raises(action.ActionError, match="KERNELPRO_BASE_SHA and KERNELPRO_HEAD_SHA must come from"):
        action.cmd_optimize(args, Settings.from_env({}))
