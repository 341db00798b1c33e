"""Issue 18 on the GPU: the confinement is on for every child that touches the GPU (the candidate's,
ncu's, compute-sanitizer's), and they still work: CUDA initialises under Landlock, ncu writes its
report into the one folder it may write, memcheck runs, a CUDA source is built by a confined nvcc.
Run on the GPU machine: ``pytest -m gpu tests/test_gpu_confinement.py``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (run on the GPU machine)"),
]

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"
FIXTURES = Path(__file__).parent / "fixtures" / "adversarial"


def _swiglu() -> tuple[Any, Any, list[Any]]:
    from kernelpro.runner.trace import BuildSpec, Solution, SourceFile, Workload, load_definition

    d = load_definition(DEMO / "commit1" / "definitions" / "swiglu.json")
    src = (DEMO / "commit2" / "kernels" / "swiglu.py").read_text()
    sol = Solution("poor", d.name, "t", BuildSpec("triton", ("cuda",), "kernels/swiglu.py::swiglu",
                   destination_passing_style=False), (SourceFile("kernels/swiglu.py", src),))
    return d, sol, [Workload.make(d, {"M": 4096})]


def test_a_confined_gpu_candidate_passes_and_says_how_it_was_confined() -> None:
    from kernelpro.runner import confinement
    from kernelpro.runner.evaluator import EvalSettings, evaluate
    from kernelpro.runner.target import Tolerance

    assert confinement.landlock_abi() >= 1, "the GPU machine has no Landlock: kernelpro refuses to run there"
    d, sol, w = _swiglu()
    for fork in (False, True):
        out = evaluate(d, sol, w, Tolerance(), EvalSettings(device="cuda", fork_server=fork))
        assert out.passed, out.log[-2000:]
        conf = out.environment["sandbox"]["confinement"]
        assert conf.startswith("Landlock ABI") and "UNCONFINED" not in conf, conf


def test_ncu_and_sass_run_confined_and_still_profile(tmp_path: Path) -> None:
    from kernelpro.runner.evaluator import EvalSettings
    from kernelpro.runner.profiler import profile_candidate

    d, sol, w = _swiglu()
    prof, _secs = profile_candidate(d, sol, w, EvalSettings(device="cuda"))
    assert prof.notes == (), prof.notes  # ncu wrote its report from inside the confinement
    assert prof.metric("launch__registers_per_thread") is not None
    assert prof.sass is not None  # cuobjdump, confined, read the candidate's cubin


def test_memcheck_runs_confined() -> None:
    from kernelpro.runner.evaluator import EvalSettings
    from kernelpro.runner.memcheck import memcheck

    d, sol, w = _swiglu()
    got = memcheck(d, sol, w, EvalSettings(device="cuda"), None)
    assert got.status == "clean", got


def test_a_gpu_candidate_finds_no_reference_outputs_and_cannot_write_outside(tmp_path: Path) -> None:
    from test_adversarial import LOADS, SWIGLU, candidate

    from kernelpro.runner.evaluator import EvalSettings, evaluate
    from kernelpro.runner.target import Tolerance

    probe = f"/tmp/kernelpro-gpu-confinement-probe-{os.getpid()}"  # per pytest-xdist worker
    source = (FIXTURES / "reads_reference.py").read_text().replace(
        "    raise RuntimeError(f\"no reference outputs visible",
        f"    try:\n        open({probe!r}, 'w').write('x')\n    except OSError as e:\n        searched.append(str(e))\n"
        "    raise RuntimeError(f\"no reference outputs visible")
    assert probe in source
    out = evaluate(SWIGLU, candidate("reads_reference", source), LOADS, Tolerance(), EvalSettings(device="cuda"))
    assert out.status == "RUNTIME_ERROR" and "no reference outputs visible" in out.log, out.log[-1500:]
    assert "Permission denied" in out.log and not Path(probe).exists(), out.log[-1500:]
