"""kernelpro/schema.py: the results format is defined once; the runner writes it, the bot reads it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from test_bot_artifact import ALLOWED, demo_results, edit_summary, refused

from kernelpro.bot.artifact import ArtifactError, load_results
from kernelpro.bot.body import render_body
from kernelpro.schema import (
    SEVERITIES,
    Finding,
    SchemaError,
    TargetResult,
    Tolerance,
    Winner,
    WorkloadTiming,
)

FORGED = "Tolerances: float32 atol=1e+30 rtol=1e+30; bfloat16 atol=7 rtol=7."


def _body(d: Path) -> str:
    return render_body(load_results(d, allowed_files=ALLOWED), pr_number=7, head_sha="0" * 40, run_url=None,
                       kernelpro_version="0.1.0", programmer="tuner", model=None)


def _wire(t: TargetResult) -> dict[str, Any]:
    return {f.name: getattr(t, f.name) for f in fields(TargetResult)}


def test_the_runners_result_json_round_trips_through_the_bots_reader(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # The real `kernelpro demo` on the CPU: runner/report.py wrote result.json and summary.json.
    from kernelpro.runner.target import DEFAULT_TOLERANCE

    out = demo_results(tmp_path_factory)
    written = json.loads((out / "swiglu" / "result.json").read_text())
    record = TargetResult.from_json(written)
    assert TargetResult.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert record.winner is not None and record.curve and record.gates and record.winner.workloads
    # The tolerances travel in result.json, as the gate applied them (float32 defaults for the demo).
    assert [(t.dtype, t.atol, t.rtol) for t in record.tolerances] == [("float32", *DEFAULT_TOLERANCE["float32"])]
    # The bot's reader of the whole directory sees the same records, plus the checked patch.
    bot = load_results(out, allowed_files=ALLOWED).targets[0]
    assert _wire(bot) == _wire(record) and bot.patch_files == ("kernels/swiglu.py",)
    # What the runner wrote for the bot is exactly what the records write (keys and values).
    for key in ("curve", "tolerances"):
        assert written[key] == record.to_json()[key], key
    for mine, theirs in zip(record.to_json()["gates"], written["gates"], strict=True):
        assert mine == {k: theirs[k] for k in mine}


def test_every_record_round_trips(h200: Path) -> None:
    t = load_results(h200, allowed_files=ALLOWED).targets[0]
    wire = TargetResult(**_wire(t))
    again = TargetResult.from_json(json.loads(json.dumps(wire.to_json())))
    assert again == wire
    assert t.stage1 is not None and t.stage1.ceilings is not None and t.findings and t.tolerances
    assert t.winner is not None and t.winner.params and t.winner.correctness


def test_a_forged_tolerances_line_in_report_md_changes_nothing(h200: Path) -> None:
    before = load_results(h200, allowed_files=ALLOWED)
    text_before = _body(h200)
    report = h200 / "swiglu" / "report.md"
    # A candidate's text reaching report.md, at the top and in place of the real line.
    report.write_text(FORGED + "\n" + report.read_text().replace("Tolerances: float32 atol=1e-05 rtol=1e-05.", FORGED))
    after = load_results(h200, allowed_files=ALLOWED)
    assert after == before
    assert [(x.dtype, x.atol, x.rtol) for x in after.targets[0].tolerances] == [("float32", 1e-5, 1e-5)]
    assert _body(h200) == text_before and "1e+30" not in text_before
    report.unlink()
    assert load_results(h200, allowed_files=ALLOWED) == before


def test_older_results_without_tolerances_say_so_and_do_not_read_the_report(h200: Path) -> None:
    # Decision: result.json from before the field is still read; its tolerances are not recorded,
    # and report.md (forgeable) is not consulted in their place.
    edit_summary(h200, lambda d: d["targets"][0].pop("tolerances"))
    (h200 / "swiglu" / "report.md").write_text(FORGED + "\n")
    t = load_results(h200, allowed_files=ALLOWED).targets[0]
    assert t.tolerances == ()
    text = _body(h200)
    assert "not recorded in result.json" in text and "1e+30" not in text


@pytest.mark.parametrize(("tolerances", "words"), [
    ("float32 atol=1e-5", ["tolerances: expected a list, got str"]),
    ([{"dtype": "float32", "atol": -1.0, "rtol": 0.0}], ["tolerances[0].atol", "outside the range"]),
    ([{"dtype": "float32", "atol": 1e-5}], ["tolerances[0].rtol", "missing"]),
    ([{"dtype": "float32 atol=9", "atol": 0.0, "rtol": 0.0}], ["tolerances[0].dtype", "not a dtype or output name"]),
    ([{"dtype": "float32", "atol": "NaN", "rtol": 0.0}], ["tolerances[0].atol", "expected a number"]),
    ([{"dtype": "float32", "atol": 0.0, "rtol": 0.0}] * 257, ["tolerances", "more than the limit of 256"]),
])
def test_crafted_tolerances_are_refused_naming_the_field(h200: Path, tolerances: Any, words: list[str]) -> None:
    edit_summary(h200, lambda d: d["targets"][0].__setitem__("tolerances", tolerances))
    msg = refused(h200, "summary.json: targets[0][swiglu].", *words)
    assert "ArtifactError" not in msg


def test_from_json_names_the_field_at_fault() -> None:
    good = {"uuid": "u", "axes": {"M": 4096}, "baseline_ms": 2.0, "candidate_ms": 1.0, "speedup": 2.0}
    assert WorkloadTiming.from_json(good).axes == "M=4096"
    assert WorkloadTiming.from_json(good).to_json()["axes"] == {"M": 4096}
    with pytest.raises(SchemaError) as e:
        WorkloadTiming.from_json({**good, "candidate_ms": True}, "w")
    assert e.value.field == "w.candidate_ms" and "expected a number, got bool" in str(e.value)
    with pytest.raises(SchemaError) as e:
        WorkloadTiming.from_json({**good, "axes": {"M": "1, N=2"}}, "w")
    assert e.value.field == "w.axes.M"  # "M=1, N=2" would read back as two axes
    with pytest.raises(SchemaError) as e:
        Winner.from_json({"solution": "s", "speedup": 2.0, "gamma": 1.03, "memcheck": {"status": "errors"}})
    assert e.value.field == "winner.memcheck.status"
    with pytest.raises(SchemaError) as e:
        Tolerance.from_json([], "tolerances[3]")
    assert str(e.value) == "tolerances[3]: expected an object, got list"
    assert issubclass(ArtifactError, ValueError) and issubclass(SchemaError, ValueError)


def test_one_list_of_severities_for_runner_and_bot() -> None:
    import kernelpro.runner.tools as tools

    assert tools.SEVERITIES is SEVERITIES
    for s in SEVERITIES:  # every severity the runner orders, the bot accepts
        assert Finding.from_json({"tool": "t", "severity": s, "title": "x"}).severity == s


def test_schema_and_artifact_import_neither_torch_nor_the_runner() -> None:
    code = ("import sys, kernelpro.schema, kernelpro.bot.artifact; "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith('kernelpro.runner')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.gpu
def test_a_gpu_result_json_round_trips_with_stage1_and_findings(tmp_path: Path) -> None:
    # On the GPU result.json also carries Stage 1 (ceilings, roofline rows) and the tools' findings.
    import os

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU (run on the GPU machine)")
    from kernelpro.cli import make_demo_repo
    from kernelpro.pipeline import run_optimize
    from kernelpro.settings import Settings

    repo = make_demo_repo(tmp_path / "repo", "demo")
    settings = Settings.from_env({**os.environ, "KERNELPRO_DEVICE": "cuda", "KERNELPRO_PROGRESS": "0"})
    out = tmp_path / "out"
    assert run_optimize(repo, "HEAD~1", "HEAD", out, settings, kernel=None, budget=4, programmer_name="tuner",
                        search="mcts") == 0
    written = json.loads((out / "swiglu" / "result.json").read_text())
    record = TargetResult.from_json(written)
    assert TargetResult.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert record.device == "cuda" and record.tolerances
    assert record.stage1 is not None and record.stage1.ceilings is not None and record.stage1.workloads
    assert written["stage1"]["ceilings"] == record.stage1.ceilings.to_json()
    print(f"findings {[(f.severity, f.tool) for f in record.findings]}, winner {record.winner and record.winner.speedup}")
    bot = load_results(out, allowed_files=ALLOWED).targets[0]
    assert _wire(bot) == _wire(record)
