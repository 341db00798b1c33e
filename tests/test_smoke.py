"""Faults land where they belong (issue 19, point 5): the configuration's, not the PR kernel's.

Before any search a trusted smoke step reads the target's files (nothing of the pull request runs),
checks the entry point names a function its file defines, and runs the definition's reference on
the smallest workload in the evaluator's reference child. A failure is a configuration error with
its cause and fix: exit 2 from `kernelpro optimize` and `kernelpro check-config --run`, and a
comment on the pull request that blames the configuration.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import git
import pytest
from test_action import World, _sticky, labeled, world  # noqa: F401  (world is a fixture)

from kernelpro import action
from kernelpro.cli import main
from kernelpro.runner.config import parse_config
from kernelpro.runner.smoke import CONFIG_ERROR, reference_fault, static_faults
from kernelpro.runner.target import Target

KERNEL = "import torch\n\n\ndef scale(x):\n    return x * 2\n"
CONFIG = """\
version: 1
targets:
  - name: scale
    files: [ops/k.py]
    language: python
    entry_point: ops/k.py::{entry}
    definition:
      op_type: elementwise
      axes: {{M: {{type: var}}, N: {{type: const, value: 8}}}}
      inputs: {{x: {{shape: [M, N], dtype: float32}}}}
      outputs: {{y: {{shape: [M, N], dtype: {dtype}}}}}
      reference: |
        import torch
        def run(x):
            {body}
    workloads: [{{M: 64}}, {{M: 2}}]
    budget: {{evaluations: 2, minutes: 5, timeout_s: 120}}
"""
GOOD = {"entry": "scale", "dtype": "float32", "body": "return x * 2"}


def config(repo: Path, **kw: str) -> str:
    return CONFIG.format(**{**GOOD, **kw})


def target(repo: Path, source: str = KERNEL, **kw: str) -> Target:
    (repo / "ops").mkdir(parents=True, exist_ok=True)
    (repo / "ops" / "k.py").write_text(source)
    return parse_config(config(repo, **kw), ".kernelpro.yml", repo).targets[0]


# --------------------------------------------------------------------------- static (nothing runs)


def test_entry_point_the_file_does_not_define(tmp_path: Path) -> None:
    (fault,) = static_faults(target(tmp_path, entry="scale_fwd"), tmp_path)
    assert "ops/k.py defines no 'scale_fwd' (its functions: scale)" in str(fault)
    assert "did you mean scale?" in fault.fix and str(fault).startswith("scale: configuration error: ")


@pytest.mark.parametrize("source", [
    "from .impl import scale\n",                        # the repository's own re-export
    "from .impl import *\n",                            # cannot be known without running it
    "import torch\nif torch.cuda.is_available():\n    def scale(x):\n        return x\nelse:\n    scale = None\n",
    "def scale(x:\n",                                   # the PR's syntax error: its COMPILE_ERROR, not ours
])
def test_entry_points_that_may_exist_are_not_faults(tmp_path: Path, source: str) -> None:
    assert static_faults(target(tmp_path, source), tmp_path) == []


def test_missing_entry_file(tmp_path: Path) -> None:
    t = target(tmp_path)
    (tmp_path / "ops" / "k.py").unlink()
    (fault,) = static_faults(t, tmp_path)
    assert "the entry point's file ops/k.py cannot be read at this commit" in fault.cause
    assert "renamed or deleted" in fault.fix


# --------------------------------------------------------------------------- the reference (trusted child)


def test_reference_that_raises(tmp_path: Path) -> None:
    fault = reference_fault(target(tmp_path, body="return x / 0 + undefined_name"), tmp_path, "cpu")
    assert fault is not None
    assert "the definition's reference fails on the smallest workload (M=2)" in fault.cause
    assert "NameError" in fault.cause and "undefined_name" in fault.cause
    assert "correct `reference`" in fault.fix


def test_reference_that_returns_another_dtype(tmp_path: Path) -> None:
    fault = reference_fault(target(tmp_path, dtype="bfloat16"), tmp_path, "cpu")
    assert fault is not None
    assert "returns y as float32 [2, 8] on the smallest workload (M=2); the definition declares bfloat16 [2, 8]" in (
        fault.cause)


def test_a_correct_reference_is_no_fault(tmp_path: Path) -> None:
    assert reference_fault(target(tmp_path), tmp_path, "cpu") is None


# --------------------------------------------------------------------------- the command line


def test_check_config_run(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    target(tmp_path)
    (tmp_path / ".kernelpro.yml").write_text(config(tmp_path))
    assert main(["check-config", str(tmp_path), "--run"]) == 0
    assert "reference ran on the smallest workload" in capsys.readouterr().out
    (tmp_path / ".kernelpro.yml").write_text(config(tmp_path, body="raise ValueError('reference is broken')"))
    assert main(["check-config", str(tmp_path)]) == 0  # without --run: the file is well-formed
    capsys.readouterr()
    assert main(["check-config", str(tmp_path), "--run"]) == 2
    err = capsys.readouterr().err
    assert "scale: configuration error: the definition's reference fails on the smallest workload (M=2): " \
           "ValueError: reference is broken. Fix: correct `reference`" in err


def repo_with(tmp_path: Path, cfg: str, kernel: str = KERNEL) -> Path:
    """commit 1 the configuration, commit 2 the kernel (the pull request)."""
    root = tmp_path / "repo"
    r = git.Repo.init(root, initial_branch="main")
    with r.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.invalid")
    (root / ".kernelpro.yml").write_text(cfg)
    r.index.add([".kernelpro.yml"])
    r.index.commit("configuration")
    (root / "ops").mkdir()
    (root / "ops" / "k.py").write_text(kernel)
    r.index.add(["ops/k.py"])
    r.index.commit("kernel")
    return root


@pytest.mark.parametrize(("kw", "cause"), [
    ({"body": "return x.missing_method()"}, "the definition's reference fails on the smallest workload (M=2): "
     "AttributeError: 'Tensor' object has no attribute 'missing_method'"),
    ({"entry": "scale_v2"}, "entry_point ops/k.py::scale_v2: ops/k.py defines no 'scale_v2' (its functions: scale)"),
])
def test_optimize_exits_2_and_blames_the_configuration(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch, kw: dict[str, str],
                                                      cause: str) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    repo, out = repo_with(tmp_path, CONFIG.format(**{**GOOD, **kw})), tmp_path / "out"
    rc = main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 2, captured
    assert f"kernelpro: error: scale: configuration error: {cause}" in captured.err
    assert "RUNTIME_ERROR" not in captured.out + captured.err and "COMPILE_ERROR" not in captured.out
    (t,) = json.loads((out / "summary.json").read_text())["targets"]
    assert t["baseline"]["status"] == CONFIG_ERROR and t["evaluations"] == 0
    assert t["stop_reason"].startswith("configuration error in .kernelpro.yml, not the pull request's kernel: ")
    assert not (out / "scale" / "journal.jsonl").exists()  # nothing of the pull request was evaluated
    assert "Configuration error: nothing was optimized" in (out / "report.md").read_text()
    # The publish step reads it as any result (untrusted data) and the comment states the configuration's fault.
    from kernelpro.bot.artifact import load_results
    from kernelpro.bot.body import render_no_pr_comment

    results = load_results(out, allowed_files={"scale": ["ops/k.py"]})
    comment = render_no_pr_comment(results)
    assert "configuration error in .kernelpro.yml, not the pull request" in comment
    assert "fails verification" not in comment


def test_a_reference_failing_on_a_larger_workload_is_the_configuration_too(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    body = "assert x.shape[0] <= 2, 'the reference only handles two rows'\n            return x * 2"
    repo, out = repo_with(tmp_path, CONFIG.format(**{**GOOD, "body": body})), tmp_path / "out"
    rc = main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out)])
    captured = capsys.readouterr()
    assert rc == 2, captured
    assert "configuration error, not the pull request's kernel: the definition's reference fails on a workload " \
           "(AssertionError: the reference only handles two rows)" in captured.err
    (t,) = json.loads((out / "summary.json").read_text())["targets"]
    assert t["baseline"]["status"] == CONFIG_ERROR
    from kernelpro.bot.artifact import load_results

    (read,) = load_results(out, allowed_files={"scale": ["ops/k.py"]}).targets
    assert read.baseline_status == CONFIG_ERROR and read.stop_reason.startswith("configuration error")


def test_an_empty_report_is_not_announced(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    cuda = textwrap.dedent("""\
        version: 1
        targets:
          - name: k
            files: [ops/k.cu]
            language: cuda
            entry_point: ops/k.cu::k
            definition: {op_type: e, axes: {N: {type: var}}, inputs: {x: {shape: [N], dtype: float32}},
                         outputs: {y: {shape: [N], dtype: float32}}, reference: "def run(x):\\n    return x\\n"}
            workloads: [{N: 4}]
            launch: {grid: [1], block: [32], args: ["const float* x", "float* y", "int n = N"]}
        """)
    root = repo_with(tmp_path, cuda)
    (root / "ops" / "k.cu").write_text('extern "C" __global__ void k(const float* x, float* y, int n) {}\n')
    g = git.Repo(root)
    g.index.add(["ops/k.cu"])
    g.index.commit("cuda kernel")
    out = tmp_path / "out"
    assert main(["optimize", "--repo", str(root), "--base", "HEAD~2", "--head", "HEAD", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (out / "report.md").read_text() == ""
    assert "Report:" not in printed and "No report: no target was optimized" in printed


def test_no_gate_ran_is_not_called_a_failed_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    repo, out = repo_with(tmp_path, config(tmp_path)), tmp_path / "out"
    assert main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    t = json.loads((out / "summary.json").read_text())["targets"][0]
    assert t["baseline"]["status"] == "PASSED" and t["gates"] == []
    assert "No candidate passed the final gate" not in report
    # The tuner found no launch parameter in this kernel: the report says so, and that no gate ran.
    assert "The tuner found no tunable parameter in this kernel, so nothing was tried and no final gate ran" in report


# --------------------------------------------------------------------------- the pull request


def test_plan_says_the_configuration_does_not_match_the_pull_request(world: World, tmp_path: Path) -> None:  # noqa: F811
    author = git.Repo.clone_from(world.origin.as_uri(), tmp_path / "author", branch="feature")
    path = tmp_path / "author" / "kernels" / "swiglu.py"
    path.write_text(path.read_text().replace("def swiglu(", "def swiglu_forward("))
    author.index.add(["kernels/swiglu.py"])
    author.index.commit("rename the entry point")
    sha = author.head.commit.hexsha
    author.git.push("origin", f"+{sha}:refs/heads/feature", f"+{sha}:refs/pull/1/head")
    p = action.plan(world.settings("pull_request", labeled(world, head=sha)), world.checkout, world.fake.client())
    assert not p.run
    assert "kernels/swiglu.py defines no 'swiglu' (its functions: _swiglu_kernel, swiglu_forward)" in p.reason
    assert "swiglu_forward? write entry_point: kernels/swiglu.py::<function to call>" in p.reason
    body = _sticky(world)  # the same, as Markdown-escaped text
    assert "does not match this pull request's code" in body and "the configuration is at fault" in body
    assert "defines no" in body and r"swiglu\_forward? write entry\_point" in body
