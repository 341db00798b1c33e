"""examples/arc/values.yaml against the keys the gha-runner-scale-set chart documents (its values.yaml,
chart 0.14) and the properties docs/scale.md promises: one GPU per ephemeral runner, no privileges."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
VALUES = ROOT / "examples" / "arc" / "values.yaml"

# Top-level keys of the chart's values.yaml; anything else is silently ignored by helm, so a typo
# would quietly drop a setting.
CHART_KEYS = {
    "githubConfigUrl", "githubConfigSecret", "runnerScaleSetName", "runnerScaleSetLabels", "proxy",
    "maxRunners", "minRunners", "runnerGroup", "githubServerTLS", "keyVault", "containerMode",
    "listenerTemplate", "listenerMetrics", "template", "controllerServiceAccount", "namespaceOverride",
    "annotations", "labels", "resourceMeta",
}
# Fields of a Kubernetes PodSpec / Container this file may use.
POD_SPEC_KEYS = {"runtimeClassName", "nodeSelector", "tolerations", "automountServiceAccountToken",
                 "securityContext", "containers", "initContainers", "volumes", "serviceAccountName"}
CONTAINER_KEYS = {"name", "image", "command", "args", "env", "resources", "securityContext", "volumeMounts"}


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    doc = yaml.safe_load(VALUES.read_text())
    assert isinstance(doc, dict)
    return doc


def test_only_keys_the_chart_knows(values: dict[str, Any]) -> None:
    assert set(values) <= CHART_KEYS, set(values) - CHART_KEYS
    spec = values["template"]["spec"]
    assert set(spec) <= POD_SPEC_KEYS, set(spec) - POD_SPEC_KEYS
    for c in spec["containers"]:
        assert set(c) <= CONTAINER_KEYS, set(c) - CONTAINER_KEYS


def test_required_connection_and_scaling(values: dict[str, Any]) -> None:
    assert re.fullmatch(r"https://github\.com/[^/\s]+(/[^/\s]+)?", values["githubConfigUrl"])
    # A secret's name (pre-created), not credentials inlined into a values file.
    assert isinstance(values["githubConfigSecret"], str) and values["githubConfigSecret"]
    assert isinstance(values["minRunners"], int) and isinstance(values["maxRunners"], int)
    assert 0 <= values["minRunners"] <= values["maxRunners"]
    assert values["runnerGroup"] and values["runnerGroup"].lower() != "default", "use a restricted runner group"
    assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,44}", values["runnerScaleSetName"])


def test_runner_container_has_one_gpu_and_no_privileges(values: dict[str, Any]) -> None:
    assert "containerMode" not in values, "kernelpro needs no docker-in-docker or container hooks"
    spec = values["template"]["spec"]
    runner = spec["containers"][0]
    assert runner["name"] == "runner"  # the chart finds the runner container by this name
    assert runner["command"] == ["/home/runner/run.sh"]
    assert runner["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert runner["resources"]["requests"]["nvidia.com/gpu"] == 1
    sc = runner["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["automountServiceAccountToken"] is False
    assert len(spec["containers"]) == 1, "a sidecar would share the pod with pull-request code"


def test_docs_and_workflow_agree_on_how_jobs_reach_the_pool(values: dict[str, Any]) -> None:
    doc = (ROOT / "docs" / "scale.md").read_text()
    assert f"runs-on: {values['runnerScaleSetName']}" in doc
    workflow = yaml.safe_load((ROOT / "examples" / "workflows" / "kernelpro.yml").read_text())
    # The workflow as shipped targets classic self-hosted runners; docs/scale.md says what to change.
    assert workflow["jobs"]["optimize"]["runs-on"] == ["self-hosted", "gpu"]
    assert "[self-hosted, gpu]" in doc
