"""candidate.fingerprint and the loop's use of it: a proposal that is an evaluated candidate written
differently (comments, layout) is not evaluated again; anything that may differ is."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpro.runner.candidate import Candidate, fingerprint
from kernelpro.runner.evaluator import EvalSettings
from kernelpro.runner.optimize import RunSettings, optimize
from kernelpro.runner.search import Scored
from kernelpro.runner.target import Target
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile, Workload, load_definition

ROOT = Path(__file__).resolve().parents[1]
DEFINITION = load_definition(ROOT / "examples" / "demo" / "commit1" / "definitions" / "swiglu.json")


def _py(source: str, language: str = "python", path: str = "k.py") -> Solution:
    return Solution("t", DEFINITION.name, "t", BuildSpec(language, ("cpu",), f"{path}::swiglu", destination_passing_style=False),
                    (SourceFile(path, source),))


SILU = "import torch\n\ndef swiglu(a, b):\n    return torch.nn.functional.silu(a) * b\n"
SILU_COMMENTED = "import torch  # the ops\n\n\ndef swiglu(a, b):\n    # silu, then the gate\n    return (torch.nn.functional.silu(a)\n            * b)\n"
SILU_OTHER_COMMENT = "import torch\n\ndef swiglu(a, b):\n    return torch.nn.functional.silu(a) * b  # fused by torch\n"
GATED = "import torch\n\ndef swiglu(a, b):\n    return b * torch.nn.functional.silu(a)\n"


def test_python_layout_and_comments_do_not_count_but_code_does() -> None:
    assert fingerprint(_py(SILU)) == fingerprint(_py(SILU_COMMENTED)) == fingerprint(_py(SILU_OTHER_COMMENT))
    assert fingerprint(_py(SILU)) != fingerprint(_py(GATED))  # operands swapped: another program
    assert fingerprint(_py("x = 1\n")) != fingerprint(_py("x = 1.0\n")) != fingerprint(_py("x = True\n"))
    assert fingerprint(_py('"""doc"""\nx = 1\n')) != fingerprint(_py("x = 1\n"))  # a docstring is data
    assert fingerprint(_py(SILU)) != fingerprint(_py(SILU, language="triton"))  # the build spec counts
    assert fingerprint(_py(SILU)) != fingerprint(_py(SILU, path="other.py"))
    assert fingerprint(_py("def swiglu(:\n")) != fingerprint(_py("def swiglu( :\n"))  # unparsable: as written


CUDA = 'extern "C" __global__ void k(float* y) {\n  // one thread per element\n  y[threadIdx.x] = 1.0f; /* done */\n}\n'
CUDA_LAID_OUT = 'extern "C" __global__ void k(float* y) {\n\n    y[threadIdx.x]   = 1.0f;\n}\n'


def test_cuda_comments_and_blank_runs_do_not_count_but_literals_and_lines_do() -> None:
    cu = lambda s: _py(s, "cuda", "k.cu")  # noqa: E731
    assert fingerprint(cu(CUDA)) == fingerprint(cu(CUDA_LAID_OUT))
    assert fingerprint(cu(CUDA)) != fingerprint(cu(CUDA.replace("1.0f", "2.0f")))
    # Inside a literal nothing is a comment or a blank to squeeze.
    assert fingerprint(cu('printf("a // b");')) != fingerprint(cu('printf("a // c");'))
    assert fingerprint(cu('printf("a  b");')) != fingerprint(cu('printf("a b");'))
    assert fingerprint(cu("char c = '\"'; // x")) == fingerprint(cu("char c = '\"';"))
    # A line break ends a directive: joining lines would change the program.
    assert fingerprint(cu("#define X 1\nint y;")) != fingerprint(cu("#define X 1 int y;"))
    # A block comment is a blank, as the C preprocessor reads it.
    assert fingerprint(cu("int /* c */ y;")) == fingerprint(cu("int y;"))


class Scripted:
    """A programmer that proposes what a test lists, batch by batch."""

    def __init__(self, batches: list[list[str]]) -> None:
        self.batches = batches

    def propose(self, parent: Scored, mode: str, n: int, context: object) -> list[Candidate]:
        if not self.batches:
            return []
        return [Candidate(_py(src), parent.candidate.key, mode, f"variant {i}") for i, src in enumerate(self.batches.pop(0))]


BASE = "import torch\n\ndef swiglu(a, b):\n    return a * torch.sigmoid(a) * b\n"


@pytest.mark.parametrize("search", ["greedy", "mcts"])
def test_the_loop_evaluates_a_rewritten_candidate_once(tmp_path: Path, search: str) -> None:
    (tmp_path / "head").mkdir()
    (tmp_path / "head" / "k.py").write_text(BASE)
    w = Workload.make(DEFINITION, {"M": 16})
    target = Target("swiglu", "python", ("k.py",), "k.py::swiglu", DEFINITION, (w,))
    programmer = Scripted([[SILU, SILU_COMMENTED, GATED], [SILU_OTHER_COMMENT], []])
    rs = RunSettings(search=search, budget=6, gate_top=1, evaluation=EvalSettings(device="cpu", trials=3, timeout_s=120))
    result = optimize(target, tmp_path / "head", tmp_path / "out", programmer, rs)  # type: ignore[arg-type]
    sources = [s.candidate.solution.sources[0].content for s in result.evaluated]
    assert sources == [BASE, SILU, GATED], sources
    assert result.duplicates == 2
    assert "2 more proposals not evaluated" in (tmp_path / "out" / "report.md").read_text()
