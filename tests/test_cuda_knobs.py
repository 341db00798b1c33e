"""The tuner on raw CUDA kernels: knobs found in the source, rewrites that nvcc accepts, moves
ordered by the profiler's findings, no duplicates."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelpro.cuda_knobs import UNROLL_FULL, apply_knobs, find_knobs
from kernelpro.knobs import KnobError
from kernelpro.runner.candidate import Candidate
from kernelpro.runner.config import load_config
from kernelpro.runner.cubin import find_nvcc, prebuild
from kernelpro.runner.evaluator import Outcome
from kernelpro.runner.programmers import Context
from kernelpro.runner.programmers.tuner import Tuner
from kernelpro.runner.search import Scored
from kernelpro.runner.target import Target
from kernelpro.runner.tools import Finding

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "cuda"
KERNEL = (EXAMPLE / "commit2" / "kernels" / "swiglu.cu").read_text()


def test_knobs_of_the_example_kernel() -> None:
    got = {(k.name, k.kind, k.value) for k in find_knobs(KERNEL)}
    assert got == {("BLOCK_SIZE", "threads", 32), ("VEC", "vector", 1), ("ITEMS_PER_THREAD", "work", 1),
                   ("min_blocks:swiglu_kernel", "min_blocks", 0), ("pragma_unroll#1", "unroll", UNROLL_FULL),
                   ("pragma_unroll#2", "unroll", UNROLL_FULL)}
    assert all(k.value in k.choices and list(k.choices) == sorted(k.choices) for k in find_knobs(KERNEL))


def test_only_code_counts() -> None:
    src = """\
// #define BLOCK_SIZE 128   (commented out: not a knob)
/* #define VEC 4
   #pragma unroll 8 */
const char* s = "#define TILE 32";
#define WARP_SIZE 32          // not a tuning name
#ifdef WIDE
#define THREADS 512
#else
#define THREADS 128
#endif
#define TILE_M (64)
constexpr int ITEMS_PER_THREAD = 4;
__global__ void __launch_bounds__(THREADS, 2, 1) k3() {}
__global__ void __launch_bounds__(THREADS * (2), 4) k2() {
#pragma unroll VEC
    for (;;) {}
#pragma unroll (2)
    for (;;) {}
}
"""
    got = {(k.name, k.kind, k.value) for k in find_knobs(src)}
    assert got == {("TILE_M", "tile", 64), ("ITEMS_PER_THREAD", "work", 4), ("min_blocks:k2", "min_blocks", 4),
                   ("pragma_unroll#2", "unroll", 2)}
    out = apply_knobs(src, {"TILE_M": 128, "min_blocks:k2": 0, "pragma_unroll#2": UNROLL_FULL, "ITEMS_PER_THREAD": 1})
    assert "#define TILE_M (128)" in out and "__launch_bounds__(THREADS * (2))" in out
    assert "#pragma unroll\n" in out and "constexpr int ITEMS_PER_THREAD = 1;" in out
    assert "// #define BLOCK_SIZE 128" in out and '"#define TILE 32"' in out and "__launch_bounds__(THREADS, 2, 1)" in out


def test_apply_is_identity_on_current_values_and_checks_its_input() -> None:
    assert apply_knobs(KERNEL, {k.name: k.value for k in find_knobs(KERNEL)}) == KERNEL
    with pytest.raises(KnobError, match="unknown knob 'NOPE'"):
        apply_knobs(KERNEL, {"NOPE": 1})
    with pytest.raises(KnobError, match="is not a choice for knob 'BLOCK_SIZE'"):
        apply_knobs(KERNEL, {"BLOCK_SIZE": 48})
    out = apply_knobs(KERNEL, {"BLOCK_SIZE": 1024, "min_blocks:swiglu_kernel": 2, "pragma_unroll#2": 4})
    assert {k.name: k.value for k in find_knobs(out)} == {
        "BLOCK_SIZE": 1024, "VEC": 1, "ITEMS_PER_THREAD": 1, "min_blocks:swiglu_kernel": 2, "pragma_unroll#1": UNROLL_FULL,
        "pragma_unroll#2": 4}
    assert "__launch_bounds__(BLOCK_SIZE, 2)" in out and "#pragma unroll 4\n" in out
    # Only the digits changed: same lines, same layout.
    assert len(out.splitlines()) == len(KERNEL.splitlines())


UNBOUNDED = KERNEL.replace("void __launch_bounds__(BLOCK_SIZE)\n", "void\n")


def test_launch_bounds_are_added_to_the_targets_kernel_when_it_has_none() -> None:
    assert "__launch_bounds__" not in UNBOUNDED
    assert "min_blocks:swiglu_kernel" not in {k.name for k in find_knobs(UNBOUNDED)}  # no launch known: no knob
    knobs = {k.name: k for k in find_knobs(UNBOUNDED, "swiglu_kernel", ("BLOCK_SIZE",))}
    assert knobs["min_blocks:swiglu_kernel"].value == 0
    assert apply_knobs(UNBOUNDED, {"min_blocks:swiglu_kernel": 0}, "swiglu_kernel", ("BLOCK_SIZE",)) == UNBOUNDED
    out = apply_knobs(UNBOUNDED, {"min_blocks:swiglu_kernel": 2}, "swiglu_kernel", ("BLOCK_SIZE",))
    assert "void\n__launch_bounds__(BLOCK_SIZE, 2) swiglu_kernel(" in out
    # From there on it is an ordinary launch bound of that kernel.
    assert {k.name: k.value for k in find_knobs(out)}["min_blocks:swiglu_kernel"] == 2
    two_d = apply_knobs(UNBOUNDED, {"min_blocks:swiglu_kernel": 1}, "swiglu_kernel", ("BX", "4"))
    assert "__launch_bounds__(BX * 4, 1) swiglu_kernel(" in two_d
    # A block written with arithmetic is not copied into C++ (Python's // is not C's).
    assert "min_blocks:swiglu_kernel" not in {k.name for k in find_knobs(UNBOUNDED, "swiglu_kernel", ("T // 2",))}


@pytest.mark.skipif(find_nvcc() is None, reason="needs nvcc")
def test_every_single_move_and_the_corners_compile(tmp_path: Path) -> None:
    from kernelpro.runner.trace import BuildSpec, Solution, SourceFile

    knobs = find_knobs(KERNEL)
    settings = [{k.name: c} for k in knobs for c in k.choices if c != k.value]
    settings += [{k.name: max(k.choices) for k in knobs}, {k.name: min(k.choices) for k in knobs}]
    spec = BuildSpec("cuda", ("cuda",), "k.cu::swiglu_kernel")
    sols = [Solution(f"s{i}", "d", "t", spec, (SourceFile("k.cu", apply_knobs(KERNEL, s)),)) for i, s in enumerate(settings)]
    inserted = apply_knobs(UNBOUNDED, {"min_blocks:swiglu_kernel": 4}, "swiglu_kernel", ("BLOCK_SIZE",))
    sols.append(Solution("inserted", "d", "t", spec, (SourceFile("k.cu", inserted),)))
    settings.append({"inserted": 4})
    built = prebuild(sols, tmp_path, arch="sm_90a")
    bad = [(s, b.log[-400:]) for s, b in zip(settings, built, strict=True) if not b.ok]
    assert not bad, bad
    assert len({b.key for b in built}) == len(settings)


# --------------------------------------------------------------------------- the tuner


@pytest.fixture(scope="module")
def cuda_target(tmp_path_factory: pytest.TempPathFactory) -> tuple[Target, Path]:
    repo = tmp_path_factory.mktemp("cuda")
    shutil.copytree(EXAMPLE / "commit1", repo, dirs_exist_ok=True)
    shutil.copytree(EXAMPLE / "commit2", repo, dirs_exist_ok=True)
    return load_config(repo / ".kernelpro.yml").target("swiglu_cuda"), repo


def finding(tool: str) -> Finding:
    return Finding(tool, "high", tool, {}, "", ())


def propose(target: Target, repo: Path, mode: str, n: int, findings: tuple[Finding, ...] = (),
            seen: set[str] | None = None) -> list[Candidate]:
    sol = target.solution(repo)
    parent = Scored(Candidate(sol, None, "init", "the pull request's kernel"), Outcome(sol.content_hash(), "PASSED", ()), 1.0)
    ctx = Context(target=target, seen=lambda k: k in (seen or set()), device="cuda", findings=findings)
    return Tuner().propose(parent, mode, n, ctx)


def test_findings_order_the_moves(cuda_target: tuple[Target, Path]) -> None:
    target, repo = cuda_target
    plain = propose(target, repo, "optimize", 3)
    assert [c.note for c in plain] == ["BLOCK_SIZE 32->64", "VEC 1->2", "ITEMS_PER_THREAD 1->2"]
    vec = propose(target, repo, "optimize", 2, (finding("vectorization"),))
    assert vec[0].note == "VEC 1->2"
    spills = propose(target, repo, "optimize", 2, (finding("register_spills"),))
    assert spills[0].note == "pragma_unroll#1 65536->16"  # no cap to loosen (no min blocks): unroll less first
    occupancy = propose(target, repo, "optimize", 2, (finding("occupancy"),))
    assert [c.note for c in occupancy] == ["BLOCK_SIZE 32->64", "min_blocks:swiglu_kernel 0->1"]
    launch = propose(target, repo, "optimize", 1, (finding("launch_overhead"),))
    assert launch[0].note == "ITEMS_PER_THREAD 1->2"
    assert all(c.solution.sources[0].path == "kernels/swiglu.cu" and c.solution.spec == target.solution(repo).spec
               for c in plain + vec + spills)  # only the kernel file changes; the launch stays the target's


def test_proposals_are_deterministic_unique_and_skip_seen(cuda_target: tuple[Target, Path]) -> None:
    target, repo = cuda_target
    # init samples the whole grid; optimize and debug step one knob (6 knobs, all at an edge here).
    for mode, count in (("init", 12), ("optimize", 6), ("debug", 6)):
        a = propose(target, repo, mode, 12)
        assert [c.key for c in a] == [c.key for c in propose(target, repo, mode, 12)]
        assert len({c.key for c in a}) == len(a) == count
        assert target.solution(repo).content_hash() not in {c.key for c in a}
    first = propose(target, repo, "optimize", 4)
    later = propose(target, repo, "optimize", 4, seen={c.key for c in first[:2]})
    assert [c.key for c in later[:2]] == [c.key for c in first[2:]]


def test_repairs_shrink_first(cuda_target: tuple[Target, Path]) -> None:
    target, repo = cuda_target
    moved = propose(target, repo, "optimize", 1)[0]  # BLOCK_SIZE 64: now it can go both ways
    parent = Scored(moved, Outcome(moved.key, "RUNTIME_ERROR", ()), 0.0)
    ctx = Context(target=target, seen=lambda k: False, device="cuda")
    notes = [c.note for c in Tuner().propose(parent, "debug", 3, ctx)]
    assert notes == ["BLOCK_SIZE 64->32", "BLOCK_SIZE 64->128", "VEC 1->2"]


def test_moves_compose_from_a_moved_parent(cuda_target: tuple[Target, Path]) -> None:
    target, repo = cuda_target
    child = propose(target, repo, "optimize", 1)[0]
    parent = Scored(child, Outcome(child.key, "PASSED", ()), 1.5)
    ctx = Context(target=target, seen=lambda k: False, device="cuda")
    grand = Tuner().propose(parent, "optimize", 1, ctx)[0]
    assert grand.note == "BLOCK_SIZE 64->128"
    values = {k.name: k.value for k in find_knobs(grand.solution.sources[0].content)}
    assert values["BLOCK_SIZE"] == 128 and values["VEC"] == 1


def test_the_tuner_adds_launch_bounds_for_register_pressure(cuda_target: tuple[Target, Path]) -> None:
    from kernelpro.runner.trace import Solution, SourceFile

    target, repo = cuda_target
    base = target.solution(repo)
    sol = Solution(base.name, base.definition, base.author, base.spec, (SourceFile(base.entry_file, UNBOUNDED),))
    parent = Scored(Candidate(sol, None, "init", "pr"), Outcome(sol.content_hash(), "PASSED", ()), 1.0)
    ctx = Context(target=target, seen=lambda k: False, device="cuda", findings=(finding("high_register_usage"),))
    first = Tuner().propose(parent, "optimize", 1, ctx)[0]
    assert first.note == "min_blocks:swiglu_kernel 0->1"
    assert "__launch_bounds__(BLOCK_SIZE, 1) swiglu_kernel(" in first.solution.sources[0].content


def test_scanning_hostile_text_stays_fast() -> None:
    import time

    src = "__launch_bounds__(256) " + "word " * 5000 + ";\n" + "#pragma unroll " + "9" * 50 + "x\n" + "/*" * 1000
    t0 = time.perf_counter()
    find_knobs(src, "k", ("T",))
    assert time.perf_counter() - t0 < 2.0
