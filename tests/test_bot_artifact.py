"""bot/artifact.py: the optimize job's results are untrusted; publish refuses anything off-limits."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernelpro.bot.artifact import (
    MAX_PATCH_BYTES,
    MAX_SUMMARY_BYTES,
    ArtifactError,
    Results,
    check_patch,
    load_results,
)

H200 = Path(__file__).resolve().parent / "fixtures" / "results_h200"
KERNEL = "kernels/swiglu.py"
ALLOWED = {"swiglu": [KERNEL]}


def demo_results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real `kernelpro demo` on the CPU, run once per session (shared by the bot test modules)."""
    out = tmp_path_factory.getbasetemp() / "kp_demo_results"
    if not (out / "summary.json").exists():
        env = {**os.environ, "KERNELPRO_DEVICE": "cpu", "KERNELPRO_PROGRESS": "0"}
        cmd = [sys.executable, "-m", "kernelpro.cli", "demo", "--out", str(out), "--budget", "4"]
        if shutil.which("kernelpro"):
            cmd = ["kernelpro", "demo", "--out", str(out), "--budget", "4"]
        subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_results(tmp_path_factory)




def edit_summary(d: Path, change: Any) -> None:
    data = json.loads((d / "summary.json").read_text())
    change(data)
    (d / "summary.json").write_text(json.dumps(data))


def refused(d: Path, *words: str, allowed: dict[str, list[str]] | None = None) -> str:
    with pytest.raises(ArtifactError) as e:
        load_results(d, allowed_files=ALLOWED if allowed is None else allowed)
    msg = str(e.value)
    assert "the publish step refuses to continue" in msg
    for w in words:
        assert w in msg, msg
    return msg


GOOD_PATCH = (H200 / "swiglu" / "patch.diff").read_text()


# --------------------------------------------------------------------------- accepted


def test_h200_results_load(h200: Path) -> None:
    r = load_results(h200, allowed_files=ALLOWED)
    assert isinstance(r, Results) and len(r.targets) == 1
    t = r.targets[0]
    assert (
        t.name == "swiglu" and t.device == "cuda" and t.gpu_timings and t.hardware == "NVIDIA_H200"
    )
    assert t.winner is not None and t.winner.speedup == pytest.approx(3.545, abs=1e-3)
    assert [g.passed for g in t.gates] == [True]
    assert t.stage1 is not None and t.stage1.bottleneck == "memory" and len(t.stage1.workloads) == 2
    assert [f.severity for f in t.findings] == ["critical", "high"]
    assert t.winner_findings == ()
    assert len(t.curve) == 16 and t.curve[-1].best_speedup == pytest.approx(3.5473)
    assert t.patch == GOOD_PATCH and t.patch_files == (KERNEL,)
    assert [(x.dtype, x.atol, x.rtol) for x in t.tolerances] == [("float32", 1e-5, 1e-5)]
    assert dict(t.libs)["triton"] == "3.6.0"
    assert r.patch == GOOD_PATCH and r.winners == (t,)
    with pytest.raises(AttributeError):
        t.name = "x"  # type: ignore[misc]


def test_real_demo_patch_accepted(demo: Path) -> None:
    r = load_results(demo, allowed_files=ALLOWED)
    t = r.targets[0]
    assert t.device == "cpu" and not t.gpu_timings and t.stage1 is None
    assert t.winner is not None and t.patch.startswith("--- a/kernels/swiglu.py")
    assert t.patch == (demo / "swiglu" / "patch.diff").read_text()
    assert check_patch(t.patch, [KERNEL]) == (KERNEL,)


def test_per_target_result_json_without_summary(demo: Path, tmp_path: Path) -> None:
    d = tmp_path / "r"
    shutil.copytree(demo, d)
    (d / "summary.json").unlink()
    r = load_results(d, allowed_files=ALLOWED)
    assert [t.name for t in r.targets] == ["swiglu"] and r.targets[0].winner is not None


def test_baseline_stands_needs_empty_patch(h200: Path) -> None:
    def no_winner(data: dict[str, Any]) -> None:
        data["targets"][0]["winner"] = None
        data["targets"][0]["gates"] = [
            {"solution": "x", "passed": False, "speedup": 1.01, "reason": "too slow"}
        ]

    edit_summary(h200, no_winner)
    refused(h200, "swiglu/patch.diff", "no verified winner")
    (h200 / "swiglu" / "patch.diff").write_text("")
    assert load_results(h200, allowed_files=ALLOWED).targets[0].winner is None


# --------------------------------------------------------------------------- patches refused


def _patch(path_a: str, path_b: str | None = None, hunk: str = "@@ -1,1 +1,1 @@\n-x\n+y\n") -> str:
    return f"--- {path_a}\n+++ {path_b or path_a.replace('a/', 'b/', 1)}\n{hunk}"


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        (GOOD_PATCH + _patch("a/.github/workflows/x.yml"), [".github/workflows/x.yml"]),
        (_patch("a/kernels/../.github/workflows/x.yml"), ["not a plain repository path"]),
        (_patch("a/../outside.py"), ["not a plain repository path"]),
        (_patch("a//etc/passwd"), ["not a plain repository path"]),
        (
            _patch("a/kernels/other.py"),
            ["kernels/other.py", "not one of this target's kernel files"],
        ),
        (_patch("/dev/null", "b/kernels/swiglu.py"), ["creates or deletes a file"]),
        (_patch("a/kernels/swiglu.py", "/dev/null"), ["creates or deletes a file"]),
        (_patch("a/kernels/swiglu.py", hunk="@@ -0,0 +1,1 @@\n+y\n"), ["creates or empties"]),
        (
            "diff --git a/kernels/swiglu.py b/kernels/swiglu.py\nnew file mode 100644\n"
            + GOOD_PATCH,
            ["creates a file"],
        ),
        (
            "diff --git a/kernels/swiglu.py b/kernels/swiglu.py\nold mode 100644\nnew mode 120000\n",
            ["changes a file mode"],
        ),
        (
            "diff --git a/kernels/swiglu.py b/kernels/x.py\nrename from kernels/swiglu.py\nrename to kernels/x.py\n",
            ["diff --git"],
        ),
        (_patch("a/kernels/swiglu.py", "b/kernels/other.py"), ["renames"]),
        (
            "diff --git a/kernels/swiglu.py b/kernels/swiglu.py\nindex 1234567..89abcde\nGIT binary patch\nliteral 3\n",
            ["binary patch"],
        ),
        ("Binary files a/kernels/swiglu.py and b/kernels/swiglu.py differ\n", ["binary patch"]),
        (_patch("a/kernels/swiglu.py", hunk="@@ -1,2 +1,2 @@\n-x\n+y\n"), ["ends inside a hunk"]),
        (
            _patch("a/kernels/swiglu.py", hunk="@@ -1,1 +1,1 @@\n-x\n+y\n+z\n"),
            ["expected a '--- a/PATH'"],
        ),
        ("rm -rf /\n", ["expected a '--- a/PATH'"]),
    ],
)
def test_patch_refused(h200: Path, patch: str, words: list[str]) -> None:
    (h200 / "swiglu" / "patch.diff").write_text(patch)
    refused(h200, "swiglu/patch.diff", *words)


def test_github_path_refused_even_if_configured(h200: Path) -> None:
    (h200 / "swiglu" / "patch.diff").write_text(_patch("a/.github/workflows/x.yml"))
    refused(h200, ".github/workflows/x.yml", allowed={"swiglu": [".github/workflows/x.yml"]})


def test_patch_oversize_refused(h200: Path) -> None:
    big = "@@ -1,1 +1,1 @@\n-x\n+" + "y" * (MAX_PATCH_BYTES + 10) + "\n"
    (h200 / "swiglu" / "patch.diff").write_text(_patch("a/kernels/swiglu.py", hunk=big))
    refused(h200, "swiglu/patch.diff", "limit")


def test_patch_symlink_refused(h200: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(GOOD_PATCH)
    (h200 / "swiglu" / "patch.diff").unlink()
    (h200 / "swiglu" / "patch.diff").symlink_to(secret)
    refused(h200, "swiglu/patch.diff", "symbolic link")


# --------------------------------------------------------------------------- summary refused


def test_unknown_target_refused(h200: Path) -> None:
    refused(h200, "summary.json", "'swiglu' is not a target", allowed={"gemm": ["kernels/gemm.py"]})


def test_target_name_with_path_refused(h200: Path) -> None:
    edit_summary(h200, lambda d: d["targets"][0].update(target="../swiglu"))
    refused(h200, "summary.json", "not a valid target name", allowed={"../swiglu": [KERNEL]})


def test_nan_speedup_refused(h200: Path) -> None:
    text = (
        (h200 / "summary.json")
        .read_text()
        .replace('"speedup": 3.5450878127698213', '"speedup": NaN', 1)
    )
    (h200 / "summary.json").write_text(text)
    refused(h200, "summary.json", "NaN", "not a finite number")


def test_infinite_and_out_of_range_numbers_refused(h200: Path) -> None:
    text = (h200 / "summary.json").read_text()
    (h200 / "summary.json").write_text(text.replace('"gamma": 1.03', '"gamma": 1e999', 1))
    refused(h200, "summary.json", "winner.gamma", "not a finite number")
    (h200 / "summary.json").write_text(text.replace('"gamma": 1.03', '"gamma": -3', 1))
    refused(h200, "summary.json", "winner.gamma", "outside the range")
    (h200 / "summary.json").write_text(text.replace('"evaluations": 16', '"evaluations": "16"', 1))
    refused(h200, "summary.json", "evaluations", "expected an integer")


def test_oversize_summary_refused(h200: Path) -> None:
    edit_summary(h200, lambda d: d.update(padding="x" * (MAX_SUMMARY_BYTES + 1)))
    refused(h200, "summary.json", "limit")


def test_long_string_refused(h200: Path) -> None:
    edit_summary(h200, lambda d: d["targets"][0].update(stop_reason="x" * 100_000))
    refused(h200, "summary.json", "stop_reason", "characters")


def test_not_json_refused(h200: Path) -> None:
    (h200 / "summary.json").write_text("{'targets': []")
    refused(h200, "summary.json", "not valid JSON")


def test_unverified_winner_refused(h200: Path) -> None:
    edit_summary(h200, lambda d: d["targets"][0].update(gates=[]))
    refused(h200, "summary.json", "no passed final-gate row")


def test_duplicate_target_refused(h200: Path) -> None:
    edit_summary(h200, lambda d: d["targets"].append(d["targets"][0]))
    refused(h200, "appears twice")


def test_bad_severity_refused(h200: Path) -> None:
    edit_summary(
        h200, lambda d: d["targets"][0]["baseline_analysis"]["findings"][0].update(severity="<b>")
    )
    refused(h200, "summary.json", "severity")



def test_base_branch_side_by_side_fields_load_and_a_bad_verdict_is_refused(h200: Path) -> None:
    side = {"status": "PASSED", "speedup_vs_head": 1.2, "low": 1.1, "high": 1.3, "verdict": "slower",
            "head_drift": 0.05, "per_workload": [], "measured": "side by side: head, base, head"}
    edit_summary(h200, lambda d: d["targets"][0].update(base_branch=side))
    bb = load_results(h200, allowed_files=ALLOWED).targets[0].base_branch
    assert bb is not None and (bb.speedup_vs_head, bb.low, bb.high, bb.verdict, bb.head_drift) == (
        1.2, 1.1, 1.3, "slower", 0.05)
    edit_summary(h200, lambda d: d["targets"][0]["base_branch"].update(verdict="<b>much</b> slower"))
    refused(h200, "base_branch.verdict", "not one of")

# --------------------------------------------------------------------------- zip archives (progress job)


def _zip(entries: dict[str, bytes], *, symlink: str | None = None) -> bytes:
    import io
    import stat as st
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (st.S_IFLNK | 0o777) << 16
            z.writestr(info, "/etc/passwd")
    return buf.getvalue()


def test_extract_results_reads_only_what_publish_reads(h200: Path, tmp_path: Path) -> None:
    from kernelpro.bot.artifact import extract_results

    files = {p.relative_to(h200).as_posix(): p.read_bytes() for p in h200.rglob("*") if p.is_file()}
    files["swiglu/journal.jsonl"] = b"{}\n" * 10  # traces and journals stay in the archive
    out = extract_results(_zip(files), tmp_path / "x")
    got = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert got == ["summary.json", "swiglu/patch.diff", "swiglu/report.md"]
    assert load_results(out, allowed_files=ALLOWED).targets[0].winner is not None


@pytest.mark.parametrize(
    ("entries", "symlink", "why"),
    [
        ({"../summary.json": b"{}"}, None, "not a plain relative path"),
        ({"/etc/x": b""}, None, "not a plain relative path"),
        ({}, "summary.json", "symbolic link"),
        ({"summary.json": b" " * (MAX_SUMMARY_BYTES + 1)}, None, "more than the limit"),
        ({"swiglu/patch.diff": b"x" * (MAX_PATCH_BYTES + 1)}, None, "more than the limit"),
    ],
)
def test_extract_results_refuses_hostile_archives(
    tmp_path: Path, entries: dict[str, bytes], symlink: str | None, why: str
) -> None:
    from kernelpro.bot.artifact import extract_results

    with pytest.raises(ArtifactError, match=why):
        extract_results(_zip(entries, symlink=symlink), tmp_path / "x")
    assert not (tmp_path / "summary.json").exists()


def test_extract_results_refuses_a_non_zip(tmp_path: Path) -> None:
    from kernelpro.bot.artifact import extract_results

    with pytest.raises(ArtifactError, match="not a readable zip archive"):
        extract_results(b"PK\x03\x04 not really", tmp_path / "x")
