"""Stage 1: roofline classification against measured ceilings, cross-checked by ncu."""

from __future__ import annotations

import pytest

from kernelpro.runner.evidence import KernelProfile, Profile
from kernelpro.runner.roofline import (
    Ceilings,
    FormulaError,
    analyze_reference,
    default_ceilings,
    evaluate_formula,
    measured_class,
)
from kernelpro.runner.trace import Axis, Definition, TensorSpec, Workload

H200 = Ceilings("NVIDIA H200", 4250.0, 67.0, "test")  # fp32 CUDA-core roof: ridge ~15.8 FLOP/byte

DEF = Definition(
    name="swiglu", op_type="elementwise",
    axes={"M": Axis("var"), "N": Axis("const", 4096)},
    inputs={"a": TensorSpec(("M", "N"), "float32"), "b": TensorSpec(("M", "N"), "float32")},
    outputs={"out": TensorSpec(("M", "N"), "float32")},
    reference="def run(a, b):\n    return a * b\n",
)
W = [Workload.make(DEF, {"M": 16384})]


def _ncu(compute: float, memory: float) -> Profile:
    return Profile((KernelProfile("k", {"sm__throughput.avg.pct_of_peak_sustained_elapsed": compute,
                                        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": memory,
                                        "gpu__time_duration.sum": 1000.0}),))


def test_formulas_are_arithmetic_over_axes_only() -> None:
    assert evaluate_formula("4*M*N", {"M": 2, "N": 3}) == 24
    assert evaluate_formula("max(M, N) ** 2", {"M": 2, "N": 3}) == 9
    for bad in ("__import__('os')", "M.real", "open('x')", "K * 2"):
        with pytest.raises(FormulaError):
            evaluate_formula(bad, {"M": 2, "N": 3})


def test_memory_bound_elementwise_kernel_and_its_floor() -> None:
    a = analyze_reference(DEF, W, flops="4*M*N", nbytes="12*M*N", ceilings=H200,
                          measured_ms={W[0].uuid: 0.7195}, profile=_ncu(20.0, 90.0))
    assert (a.theory, a.measured, a.agree, a.bottleneck) == ("memory", "memory", True, "memory")
    b = a.workloads[0]
    assert b.intensity == pytest.approx(1 / 3)
    # 805 MB at 4.25 TB/s: the demo's winner (0.1886 ms on the H200) sits at 100 % of this floor.
    assert b.floor_ms == pytest.approx(12 * 16384 * 4096 / 4250e9 * 1e3)
    assert b.max_speedup == pytest.approx(0.7195 / b.floor_ms)
    assert 25 < b.pct_of_roofline < 27


def test_disagreement_trusts_the_roofline_but_neither_roof_means_latency() -> None:
    a = analyze_reference(DEF, W, flops="4*M*N", nbytes="12*M*N", ceilings=H200, measured_ms={},
                          profile=_ncu(70.0, 30.0))
    assert (a.theory, a.measured, a.agree, a.bottleneck) == ("memory", "compute", False, "memory")
    assert "trusting the roofline" in a.note
    a = analyze_reference(DEF, W, flops="4*M*N", nbytes="12*M*N", ceilings=H200, measured_ms={},
                          profile=_ncu(10.0, 25.0))
    assert a.bottleneck == "latency"


def test_without_formulas_ncu_decides_and_without_either_all_tools_run() -> None:
    a = analyze_reference(DEF, W, flops=None, nbytes=None, ceilings=H200, measured_ms={}, profile=_ncu(85, 20))
    assert (a.theory, a.bottleneck) == ("unknown", "compute")
    a = analyze_reference(DEF, W, flops=None, nbytes=None, ceilings=H200, measured_ms={}, profile=None)
    assert a.bottleneck == "unknown"


def test_compute_bound_gemm_uses_the_tensor_roof_for_16_bit() -> None:
    c = default_ceilings("NVIDIA H200", ["bfloat16"])
    assert c.flops_tflops == 678.0 and 150 < c.ridge < 170
    assert default_ceilings("NVIDIA H200", ["float32"]).flops_tflops == 67.0


def test_measured_class_thresholds() -> None:
    assert measured_class(_ncu(30, 85))[0] == "memory"
    assert measured_class(_ncu(65, 62))[0] == "mixed"
    assert measured_class(Profile())[0] is None


@pytest.mark.parametrize("gpu, bandwidth, fp32, bf16, source", [
    ("NVIDIA H200", 4250.0, 67.0, 678.0, "H200 measurements"),
    ("NVIDIA GH200 480GB", 4900.0, 67.0, 989.0, "datasheet of the GH200"),
    ("NVIDIA H100 80GB HBM3", 3350.0, 67.0, 989.0, "datasheet of the H100 "),
    ("NVIDIA H100 PCIe", 2000.0, 51.0, 756.0, "datasheet of the H100 PCIE"),
    ("NVIDIA A100-SXM4-40GB", 1555.0, 19.5, 312.0, "datasheet of the A100-SXM4-40GB"),
    ("NVIDIA A100-SXM4-80GB", 2039.0, 19.5, 312.0, "datasheet of the A100 "),
    ("NVIDIA L40S", 864.0, 91.6, 362.0, "datasheet of the L40S"),
    ("NVIDIA L4", 300.0, 30.3, 121.0, "datasheet of the L4 "),
])
def test_each_gpu_gets_its_own_ceilings_and_says_where_they_come_from(gpu: str, bandwidth: float, fp32: float,
                                                                      bf16: float, source: str) -> None:
    """A roofline drawn with the H200's bandwidth on an A100 calls a kernel at the A100's roof 50 %
    of it: each part's own numbers, and their source in the report and the prompt."""
    c, t = default_ceilings(gpu, ["float32"]), default_ceilings(gpu, ["bfloat16"])
    assert (c.gpu, c.bandwidth_gbs, c.flops_tflops, t.flops_tflops) == (gpu, bandwidth, fp32, bf16)
    assert c.source.startswith(source)


def test_an_unknown_gpu_says_its_floors_are_the_h200s() -> None:
    c = default_ceilings("NVIDIA RTX PRO 6000 Blackwell", ["float32"])
    assert c.bandwidth_gbs == 4250.0 and "is not in kernelpro's table" in c.source and "not this GPU's" in c.source


def test_a_candidates_room_is_measured_from_its_own_median_not_the_pull_requests() -> None:
    """Session 21, H200: the findings on the demo's winner (0.1974 ms on M=16384, the floor 0.1895 ms)
    promised "at most 3.71x", the room of the pull request's kernel (0.7031 ms)."""
    from kernelpro.runner.tools import counters, run_tools

    a = analyze_reference(DEF, W, flops="4*M*N", nbytes="12*M*N", ceilings=H200,
                          measured_ms={W[0].uuid: 0.7031}, profile=_ncu(46.0, 24.0))
    winner = a.measured_as({W[0].uuid: 0.1974})
    assert a.max_speedup == pytest.approx(0.7031 / a.workloads[0].floor_ms)
    assert winner.max_speedup == pytest.approx(0.1974 / a.workloads[0].floor_ms) and winner.max_speedup < 1.05
    assert "0.1974 ms measured" in winner.bound_note() and winner.workloads[0].floor_ms == a.workloads[0].floor_ms
    assert a.measured_as({W[0].uuid: float("inf")}).max_speedup is None  # an untimed candidate: no bound
    # A real profile whose loads are scalar: the vectorization finding, capped by each kernel's room.
    from test_tools import _real

    prof = _real("scalar_loads")
    pr = next(f for f in run_tools(prof, "memory", (counters.VECTORIZATION,), stage1=a).findings)
    near = next(f for f in run_tools(prof, "memory", (counters.VECTORIZATION,), stage1=winner).findings)
    assert pr.severity == "high" and "at most 3.71x" in pr.expected_gain
    assert near.severity == "low" and near.evidence["severity_capped"].startswith("high -> low")
    assert "at most 1.04x" in near.expected_gain and "within 4 % of its floor" in near.expected_gain


def test_the_run_caps_a_profiled_candidates_findings_by_its_own_median(tmp_path) -> None:
    """runner/optimize.Run._analyze: the pull request's kernel against its own median, a candidate
    (the winner, profiled after the gate) against the candidate's; both logged to profiles.jsonl."""
    import json
    from types import SimpleNamespace

    from test_tools import _real

    from kernelpro.runner.optimize import Run
    from kernelpro.runner.tools import counters

    a = analyze_reference(DEF, W, flops="4*M*N", nbytes="12*M*N", ceilings=H200,
                          measured_ms={W[0].uuid: 0.7031}, profile=_ncu(46.0, 24.0))

    def scored(key: str, ms: float) -> SimpleNamespace:
        return SimpleNamespace(candidate=SimpleNamespace(key=key),
                               outcome=SimpleNamespace(passed=True, latency=lambda uuid: ms))

    run = SimpleNamespace(stage1=a, head=SimpleNamespace(key="pr"), evaluated=[scored("pr", 0.7031), scored("win", 0.1974)],
                          workloads=W, tools=(counters.VECTORIZATION,), energy=SimpleNamespace(active=False, proxy=lambda p: None),
                          analyses={}, proxies={}, out_dir=tmp_path)
    for key in ("pr", "win"):
        Run._analyze(run, key, _real("scalar_loads"), 1.0)  # type: ignore[arg-type]
    gains = {key: run.analyses[key][1].findings[0].expected_gain for key in ("pr", "win")}
    assert "at most 3.71x" in gains["pr"] and "at most 1.04x" in gains["win"], gains
    logged = [json.loads(line) for line in (tmp_path / "profiles.jsonl").read_text().splitlines()]
    assert [r["findings"][0]["severity"] for r in logged] == ["high", "low"]
