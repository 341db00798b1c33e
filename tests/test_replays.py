"""benchmarks/replays.py: the replay repositories, the verdicts, and one replay end to end on the CPU."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType

import benchfile
import git
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    return benchfile.load("benchmarks/replays.py")


rp = _load()
SOFTMAX = next(r for r in rp.REPLAYS if r.name == "triton-softmax-persistent")
by_name = {r.name: r for r in rp.REPLAYS}


def _result(head: str = "PASSED", base: str | None = "PASSED", base_vs_head: float = 1.0,
            winner: float | None = None, device: str = "cuda") -> dict:
    return {"baseline": {"status": head}, "device": device, "stop_reason": "budget spent",
            "base_branch": None if base is None else {"status": base, "speedup_vs_head": base_vs_head},
            "winner": None if winner is None else {"speedup": winner}}


def test_both_directions_swap_base_and_head(tmp_path: Path) -> None:
    for direction, base_src, head_src in (("forward", rp.SOFTMAX_ROW, rp.SOFTMAX_PERSISTENT),
                                          ("reverse", rp.SOFTMAX_PERSISTENT, rp.SOFTMAX_ROW)):
        repo = git.Repo(rp.make_repo(tmp_path / direction, SOFTMAX, direction, False, 3))
        base, head = repo.commit("HEAD~1"), repo.commit("HEAD")
        assert (base.tree / "kernels/softmax.py").data_stream.read().decode() == base_src
        assert (head.tree / "kernels/softmax.py").data_stream.read().decode() == head_src
        # The configuration is on the base: the pull request changes only the kernel.
        assert [d.a_path for d in base.diff(head)] == ["kernels/softmax.py"]
        cfg = yaml.safe_load((base.tree / ".kernelpro.yml").data_stream.read())
        assert cfg["targets"][0]["workloads"] == [{"M": 8, "N": 64}]


def test_verdicts() -> None:
    gain, noise, comp = by_name["liger-ce-exp2"], by_name["liger-dyt-autotune"], by_name["liger-ce-1266-only"]
    # Reverse of a known gain: the base is 1.15x faster; the tuner found nothing.
    v = rp.verdict(gain, "reverse", _result(base_vs_head=1.15))
    assert v["answered"] and "regression seen" in v["verdict"] and "not recovered" in v["verdict"]
    assert v["verdict"].startswith("PR vs base 0.870x: regression seen")
    assert v["pr_vs_base"] == pytest.approx(1 / 1.15)
    assert "(recovered)" in rp.verdict(gain, "reverse", _result(base_vs_head=1.15, winner=1.12))["verdict"]
    v = rp.verdict(gain, "reverse", _result(base_vs_head=1.01))
    assert not v["answered"] and "regression not seen" in v["verdict"]
    assert rp.verdict(gain, "forward", _result(base_vs_head=0.87))["answered"]
    assert rp.verdict(noise, "forward", _result(base_vs_head=0.99))["answered"]
    assert not rp.verdict(noise, "forward", _result(base_vs_head=0.90))["answered"]
    # The PR that does not compile: the run survives and says why; the reverse measures a broken base.
    v = rp.verdict(comp, "forward", _result(head="COMPILE_ERROR"))
    assert v["answered"] and v["verdict"].startswith("head COMPILE_ERROR; run ended cleanly")
    assert rp.verdict(comp, "reverse", _result(base="COMPILE_ERROR"))["answered"]
    cpu = rp.verdict(comp, "forward", _result(device="cpu"))
    assert not cpu["answered"] and "interpreter" in cpu["verdict"]
    assert math.isnan(rp.verdict(noise, "forward", _result(base=None))["pr_vs_base"])
    # The runner's side-by-side reading decides over the bare ratio, and its range is shown.
    side = _result(base_vs_head=1.05)
    side["base_branch"].update(verdict="on par", low=0.98, high=1.11)
    v = rp.verdict(noise, "forward", side)
    assert v["answered"] and v["verdict"] == "PR vs base 0.952x (0.901-1.020): within the 1.03x gate margin"
    side["base_branch"]["verdict"] = "faster"
    assert rp.verdict(gain, "forward", side)["verdict"].endswith(": faster")
    assert not rp.verdict(gain, "reverse", side)["answered"]


def test_the_1266_reconstruction_changes_exactly_one_line() -> None:
    with pytest.raises(ValueError, match="no longer has the constexpr LOG2_E line"):
        rp.without_constexpr_log2e("LOG2_E = 1.0\n")
    src = "import triton.language as tl\nLOG2_E = tl.constexpr(1.4426950408889634)\nX = 1\n"
    assert rp.without_constexpr_log2e(src) == "import triton.language as tl\nLOG2_E = 1.4426950408889634\nX = 1\n"
    if (rp.CORPUS / "liger_kernel-0.8.1-py3-none-any.whl").exists():
        real = rp.wheel_file("0.8.1", rp.CE_FILE)
        changed = [(a, b) for a, b in zip(real.splitlines(), rp.without_constexpr_log2e(real).splitlines(), strict=True)
                   if a != b]
        assert len(changed) == 1


def test_missing_wheels_are_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(rp.CorpusMissing, match="run `bash benchmarks/fetch_corpus.sh`"):
        rp.wheel_file("0.8.0", rp.CE_FILE, corpus=tmp_path)


def test_softmax_replay_end_to_end_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    rows = rp.main(["--only", "triton-softmax-persistent", "--directions", "reverse", "--budget", "2",
                    "--out", str(tmp_path)])
    (row,) = rows
    assert row["exit_code"] == 0 and row["head"] == row["base"] == "PASSED" and row["evaluations"] == 2
    assert row["answered"] and math.isfinite(row["pr_vs_base"]) and row["pr_vs_base"] > 0
    saved = json.loads((tmp_path / "replays.json").read_text())
    assert saved["rows"][0]["verdict"] == row["verdict"]
    assert (tmp_path / "replays" / "triton-softmax-persistent-reverse" / "report.md").exists()
    assert "| triton-softmax-persistent | reverse | measure | PASSED | PASSED |" in capsys.readouterr().out
