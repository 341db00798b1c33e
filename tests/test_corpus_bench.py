"""benchmarks/corpus.py: the corpus kernels' spaces checked statically, and the whole pipeline run in
its tiny CPU mode (Triton's interpreter, a local two-configuration kernel), as the lead runs it once
on the H200 with the real corpus."""

from __future__ import annotations

import ast
import json
import string
import sys
from pathlib import Path
from types import ModuleType

import benchfile
import pytest

from kernelpro.knobs import find_knobs

BENCH = Path(__file__).parents[1] / "benchmarks" / "corpus.py"


@pytest.fixture(scope="module")
def corpus() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))
    return benchfile.load("benchmarks/corpus.py")


def test_every_corpus_space_is_what_the_tuner_can_reach(corpus: ModuleType) -> None:
    names = [k.name for k in corpus.KERNELS]
    assert names == ["liger_swiglu", "liger_softmax", "liger_dyt", "liger_rms_norm", "fla_softmax",
                     "flashinfer_silu_and_mul", "flashinfer_rms_norm"]
    for k in [*corpus.KERNELS, corpus.TINY]:
        src = k.source(k.pr)
        knobs = {kn.name.rsplit(":", 1)[-1]: kn for kn in find_knobs(src)}
        for name, values in k.space:
            # The tuner sees each swept knob at the PR's value and may move it to every swept value.
            assert name in knobs, (k.name, name, sorted(knobs))
            assert knobs[name].value == k.pr[name]
            assert set(values) <= set(knobs[name].choices), (k.name, name)
        for name, kn in knobs.items():
            if name not in dict(k.space):
                assert kn.value == k.defaults[name], (k.name, name)  # knobs outside the space stay put
        for start in (k.pr, k.upstream):
            if start is not None:
                assert k.key(start) in {k.key(p) for p in k.points()}
        ast.parse(string.Template(k.autotuned).substitute(configs=k.configs_code()))
        assert len(k.points()) == len({k.key(p) for p in k.points()})
    assert sum(len(k.points()) for k in corpus.KERNELS) <= 200  # the sweep must fit the GPU command's 10 minutes


def test_a_tuner_candidate_maps_to_its_swept_point(corpus: ModuleType) -> None:
    k = corpus.KERNELS[0]
    assert corpus.point_of(k, {"launcher.py::run:BLOCK_SIZE": 1024, "launcher.py::run:num_warps": 4,
                               "launcher.py::run:num_stages": 3}) == {"BLOCK_SIZE": 1024, "num_warps": 4}
    # num_stages is not swept for this loop-free kernel: moving it leaves the space.
    assert corpus.point_of(k, {"launcher.py::run:BLOCK_SIZE": 1024, "launcher.py::run:num_warps": 4,
                               "launcher.py::run:num_stages": 2}) is None
    assert corpus.point_of(k, {"launcher.py::run:BLOCK_SIZE": 32, "launcher.py::run:num_warps": 4}) is None
    # The end-to-end table's reading of a winner that also moved num_stages: the H200's liger_swiglu
    # winner (benchmarks/results-h200-session5/corpus-c.json), whose config the table had printed as None.
    won = {"launcher.py::run:BLOCK_SIZE": 1024, "launcher.py::run:num_warps": 4, "launcher.py::run:num_stages": 4}
    assert corpus.point_of(k, won) is None
    assert corpus.point_of(k, won, swept_only=True) == {"BLOCK_SIZE": 1024, "num_warps": 4}
    assert corpus.unswept(k, won) == {"num_stages": 4}
    assert corpus.unswept(k, {**won, "launcher.py::run:num_stages": 3}) == {}


def test_the_tiny_cpu_run_sweeps_autotunes_replays_and_runs_kernelpro(
        corpus: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    monkeypatch.chdir(tmp_path)
    # As on the GPU: the sweep, autotune and replays in one command, the end-to-end run in another.
    assert corpus.main(["--device", "cpu", "--tiny", "--reps", "2", "--out", str(tmp_path / "sweep")]) == 0
    assert "### End to end" not in capsys.readouterr().out
    rc = corpus.main(["--device", "cpu", "--tiny", "--out", str(tmp_path / "out"), "--no-sweep", "--sweep-json",
                      str(tmp_path / "sweep" / "corpus.json"), "--e2e", "tiny_scale", "--e2e-budget", "2"])
    assert rc == 0
    data = json.loads((tmp_path / "out" / "corpus.json").read_text())
    (row,) = data["rows"]
    assert set(row["sweep"]) == {"BLOCK=16", "BLOCK=32"}
    assert all(r["status"] == "PASSED" and r["ms"] > 0 for r in row["sweep"].values())
    best = min(row["sweep"], key=lambda k: row["sweep"][k]["ms"])
    assert row["sweep_best"]["config"] == best
    assert row["autotune"]["status"] == "PASSED" and row["autotune"]["pick_key"] in row["sweep"]
    searches = {(s["start"], s["strategy"]): s for s in row["searches"]}
    assert set(searches) == {("pr", "mcts"), ("pr", "greedy"), ("upstream", "mcts"), ("upstream", "greedy")}
    for s in searches.values():
        # Two points: the search sees both, so it finds the sweep's best; the real tuner also proposed
        # num_warps/num_stages moves, which leave the swept space and are skipped.
        assert s["best_config"] == best and s["pct_of_sweep_best"] == pytest.approx(100.0)
        assert s["evaluations"] <= 2 and s["evaluations_to_95pct"] is not None
        assert s["proposals_outside_space"] > 0
    assert searches[("pr", "mcts")]["trail"][0] == "BLOCK=16"
    e = row["e2e"]
    assert e["rc"] == 0 and e["evaluations"] == 2 and e["profile_s"] == []  # no profiling without a GPU
    # Issue 22's table: seconds per evaluation and how each of the two children started.
    assert e["eval_s_median"] > 0 and sum(e["spawn"].values()) == 2, e
    assert (tmp_path / "out" / "e2e-tiny_scale" / "report.md").exists()
    text = capsys.readouterr().out
    assert "| tiny_scale | pr |" in text and "### End to end" in text


def test_an_unknown_kernel_is_a_clear_error(corpus: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert corpus.main(["--device", "cpu", "--kernels", "nope"]) == 2
    assert "choose from liger_swiglu" in capsys.readouterr().err


def _bowl(k, fail: set[str] = frozenset()) -> dict[str, dict]:  # type: ignore[no-untyped-def,assignment]
    """A smooth synthetic landscape over a kernel's space: best at block 4096, 8 warps, 2 stages."""
    import math

    pts = {}
    for p in k.points():
        b = math.log2(p.get("BLOCK_SIZE", p.get("BLOCK_N", 4096)))
        w = math.log2(p["num_warps"])
        ms = 0.2 + 0.02 * (b - 12) ** 2 + 0.03 * (w - 3) ** 2 + 0.01 * abs(p.get("num_stages", 2) - 2)
        key = k.key(p)
        pts[key] = ({"config": p, "status": "COMPILE_ERROR", "error": "OutOfResources", "first_call_s": 1.0}
                    if key in fail else {"config": p, "status": "PASSED", "ms": ms, "first_call_s": 1.0, "bench_s": 0.1})
    return pts


def test_the_replay_drives_the_real_tuner_over_every_corpus_space(corpus: ModuleType) -> None:
    for k in corpus.KERNELS:
        pts = _bowl(k)
        best = min(r["ms"] for r in pts.values())
        r = corpus.replay(k, pts, k.pr, "mcts", 30, 4)
        assert r["evaluations"] <= 30 and len(set(r["trail"])) == len(r["trail"])  # never the same point twice
        assert r["trail"][0] == k.key(k.pr)
        assert r["pct_of_sweep_best"] >= 95.0, (k.name, r)
        assert r["best_ms"] >= best
        assert r["speedup"] == pytest.approx(pts[k.key(k.pr)]["ms"] / r["best_ms"])


def test_failing_points_are_failures_in_the_search_not_crashes(corpus: ModuleType) -> None:
    k = corpus.KERNELS[0]
    fail = {k.key(p) for p in k.points() if p["BLOCK_SIZE"] >= 8192}
    pts = _bowl(k, fail)
    for strategy in ("mcts", "greedy"):
        r = corpus.replay(k, pts, k.pr, strategy, 30, 4)
        assert r["best_config"] not in fail


def test_roofline_floor_uses_the_h200_ceilings(corpus: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    k = corpus.KERNELS[0]  # swiglu: 6*M*N bytes at ~4.25 TB/s
    floor = corpus._floor_ms(k, "NVIDIA H200")
    assert floor == pytest.approx(6 * 8192 * 14336 / 4.25e12 * 1e3, rel=0.1)
    pts = _bowl(k)
    row = {"kernel": k.name, "pr": k.key(k.pr), "upstream": k.key(k.upstream), "sweep": pts, "floor_ms": floor,
           "sweep_best": {"config": "x", "ms": 0.2}, "searches": [corpus.replay(k, pts, k.pr, "mcts", 30, 4) | {"start": "pr"}],
           "autotune": {"status": "PASSED", "pick_key": k.key(k.upstream), "pick_ms": 0.3, "seconds": 2.0,
                        "cold_estimate_s": 40.0}}
    corpus.print_tables([row], 30)
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| liger_swiglu | pr |"))
    assert line.rstrip(" |").split("|")[-1].strip() == f"{100 * floor / row['searches'][0]['best_ms']:.0f}"


def test_out_of_time_kernels_are_skipped_and_the_tables_still_print(
        corpus: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert corpus.main(["--device", "cpu", "--tiny", "--minutes", "0", "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "corpus.json").read_text())["rows"]
    assert row["error"] == "skipped: out of time"
    assert "| tiny_scale | | skipped: out of time |" in capsys.readouterr().out


def test_a_destination_passing_upstream_wrapper_is_measured_not_a_type_error(corpus: ModuleType) -> None:
    """FlashInfer's rms_norm ships as run(x, w, y): on the H200 its "as shipped" column read
    RUNTIME_ERROR ("missing 1 required positional argument: 'y'") until it was called as such."""
    import torch

    x = torch.randn(4, 8)
    bench = corpus.Bench("cpu", [x], torch.nn.functional.silu(x), (1e-5, 1e-5), 2)

    def shipped(a: torch.Tensor, y: torch.Tensor) -> None:
        y.copy_(torch.nn.functional.silu(a))

    assert corpus.measure(shipped, bench)["status"] == "RUNTIME_ERROR"
    r = corpus.measure(corpus.returning(shipped, bench), bench)
    assert r["status"] == "PASSED" and r["max_abs"] == 0.0
