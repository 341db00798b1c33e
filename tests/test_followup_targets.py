"""publish learns every target plan listed (the example workflow -> the action -> Settings), so a
target whose optimize job failed and uploaded nothing is still named in the final comment."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kernelpro.settings import Settings

ROOT = Path(__file__).resolve().parents[1]


def test_the_workflow_gives_publish_the_plans_targets() -> None:
    example = yaml.safe_load((ROOT / "examples" / "workflows" / "kernelpro.yml").read_text())
    (step,) = [s for s in example["jobs"]["publish"]["steps"] if s.get("with", {}).get("mode") == "publish"]
    assert step["with"]["targets"] == "${{ needs.plan.outputs.targets }}"
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    (run,) = [s for s in action["runs"]["steps"] if s.get("id") == "kernelpro"]
    assert run["env"]["KERNELPRO_TARGETS"] == "${{ inputs.targets }}"
    assert "publish" in action["inputs"]["targets"]["description"]


def test_settings_read_the_targets_once() -> None:
    assert Settings.from_env({}).plan_targets == ()
    assert Settings.from_env({"KERNELPRO_TARGETS": "[]"}).plan_targets == ()
    got = Settings.from_env({"KERNELPRO_TARGETS": '["swiglu", "swiglu_big", "swiglu"]'}).plan_targets
    assert got == ("swiglu", "swiglu_big")
    for bad in ("swiglu", '{"swiglu": 1}', "[1]"):
        with pytest.raises(ValueError, match="pass the plan job's `targets` output"):
            Settings.from_env({"KERNELPRO_TARGETS": bad})
