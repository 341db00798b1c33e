"""The tuner on launch parameters that real repositories compute (issue 19, point 3).

Every source here is upstream code as published (tests/fixtures/upstream/, origin and version in each
file's header): Liger-Kernel's ``calculate_settings`` launches, FlashInfer's ``next_power_of_2`` and
``max(8, min(32, block_size // 256))`` warps, Liger's and fla's ``@triton.autotune`` comprehensions,
fla's ``@triton.heuristics`` tile and fla's autotune over a variable (no knob, and the tuner says why).
A patch must be a rule a maintainer reads (a scaled heuristic, a moved cap, a longer autotune list),
compile, round-trip through the knob finder, and be what the publish step recomputes from the setting.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import git
import pytest

from kernelpro.bot.publish import _Git, recompute
from kernelpro.knobs import KnobError, apply_knobs, explain, find_knobs
from kernelpro.runner.candidate import Candidate
from kernelpro.runner.evaluator import Outcome
from kernelpro.runner.programmers import Context
from kernelpro.runner.programmers.tuner import Tuner
from kernelpro.runner.search import Scored
from kernelpro.runner.target import Target
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile
from kernelpro.setting import apply_setting, split_setting, unified_diff

UPSTREAM = Path(__file__).parent / "fixtures" / "upstream"


def upstream(name: str) -> str:
    return (UPSTREAM / name).read_text()


def knobs(source: str) -> dict[str, int]:
    return {k.name: k.value for k in find_knobs(source)}


def changed_lines(old: str, new: str) -> list[str]:
    return [line for line in unified_diff("f.py", old, new).splitlines()
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


def check_patch(old: str, setting: dict[str, int]) -> str:
    """``setting`` applied: valid Python, read back with the same values, and (lineage) applicable
    to the original as the publish step does."""
    new = apply_knobs(old, setting)
    compile(new, "patched.py", "exec")
    assert knobs(new) == {**knobs(old), **setting}
    assert apply_setting("f.py", old, setting, lineage=True) == new
    # Back to the source's values undoes the patch exactly.
    assert apply_knobs(new, {n: knobs(old)[n] for n in setting}) == old
    return new


# --------------------------------------------------------------------------- computed launch values


def test_liger_calculate_settings_warps_are_scaled_where_the_kernel_is_launched() -> None:
    src = upstream("liger_swiglu.py")
    found = knobs(src)
    # swiglu_forward binds BLOCK_SIZE, num_warps twice (Blackwell tiles, then calculate_settings):
    # warps scale at each launch; the block size, which must cover the row, is not offered.
    assert {"swiglu_forward:num_warps.scale", "swiglu_forward:num_warps.scale#2",
            "swiglu_backward:num_warps.scale#2"} <= set(found)
    assert not any("BLOCK_SIZE" in n for n in found)
    new = check_patch(src, {"swiglu_forward:num_warps.scale#2": 1})
    assert changed_lines(src, new) == ["-            num_warps=num_warps,", "+            num_warps=min(num_warps * 2, 32),"]
    half = check_patch(src, {"swiglu_forward:num_warps.scale#2": -1})
    assert "+            num_warps=max(num_warps // 2, 1)," in changed_lines(src, half)
    assert any("`BLOCK_SIZE` is assigned 2 times in `swiglu_forward`" in n for n in explain(src))


def test_liger_rms_norm_heuristic_is_scaled_by_a_line_after_calculate_settings() -> None:
    src = upstream("liger_rms_norm.py")
    found = knobs(src)
    assert found["rms_norm_forward:num_warps.scale"] == 0 and found["rms_norm_forward:BLOCK_SIZE.scale"] == 0
    new = check_patch(src, {"rms_norm_forward:num_warps.scale": 1, "rms_norm_forward:BLOCK_SIZE.scale": 1})
    # One readable rule per value, right under the heuristic, so both launches and the returned
    # num_warps (the backward reuses it) follow it.
    assert changed_lines(src, new) == ["+    BLOCK_SIZE = BLOCK_SIZE * 2", "+    num_warps = min(num_warps * 2, 32)"]
    lines = new.splitlines()
    i = lines.index("    BLOCK_SIZE, num_warps = calculate_settings(n_cols)")
    assert lines[i + 1 : i + 3] == ["    BLOCK_SIZE = BLOCK_SIZE * 2", "    num_warps = min(num_warps * 2, 32)"]
    # A parent already moved: its next move rewrites the same line, and 0 removes it.
    again = apply_knobs(new, {"rms_norm_forward:num_warps.scale": -2, "rms_norm_forward:BLOCK_SIZE.scale": 0})
    assert changed_lines(src, again) == ["+    num_warps = max(num_warps // 4, 1)"]


ONE_BLOCK_PER_ROW = """
import torch
import triton
import triton.language as tl


@triton.jit
def _k(X, Y, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(X + row * n_cols + cols, mask=cols < n_cols)
    tl.store(Y + row * n_cols + cols, x * 2, mask=cols < n_cols)


def launch(x):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    {grid}
    _k[grid](x, y, n_cols, BLOCK_SIZE=BLOCK_SIZE)
    return y
"""


def test_a_block_that_covers_each_programs_row_is_only_raised() -> None:
    """A loop-free kernel whose grid does not read its block covers a fixed extent per program with one
    block: a smaller block leaves part of it unwritten. Liger's RMSNorm scaled below its row was
    INCORRECT_NUMERICAL on the H200 (session 26), an evaluation spent on a known failure; its heuristic
    and a cap of it now move up only. A grid that reads the block, a function as the grid, or a kernel
    that loops over its row keep both directions."""
    src = upstream("liger_rms_norm.py")
    (rms,) = [k for k in find_knobs(src) if k.name == "rms_norm_forward:BLOCK_SIZE.scale"]
    assert rms.choices == (0, 1, 2)
    with pytest.raises(KnobError, match="is not a choice"):
        apply_knobs(src, {"rms_norm_forward:BLOCK_SIZE.scale": -1})
    assert {k.name: k.choices for k in find_knobs(upstream("flashinfer_norm.py"))}["rms_norm:block_size.scale"] == (
        -2, -1, 0, 1, 2), "FlashInfer's RMSNorm loops over its row in blocks"

    def block(grid: str, loop: bool = False) -> tuple[int, ...]:
        code = ONE_BLOCK_PER_ROW.format(grid=grid)
        if loop:
            code = code.replace("    row = tl.program_id(0)\n", "    row = tl.program_id(0)\n    for _ in range(1):\n        pass\n")
        (k,) = [k for k in find_knobs(code) if k.name == "launch:BLOCK_SIZE.scale"]
        return k.choices

    assert block("grid = (n_rows,)") == (0, 1, 2)
    assert block("grid = (n_rows, triton.cdiv(n_cols, BLOCK_SIZE))") == (-2, -1, 0, 1, 2)
    assert block("grid = lambda meta: (n_rows,)") == (-2, -1, 0, 1, 2)
    assert block("def grid(meta):\n        return (n_rows,)") == (-2, -1, 0, 1, 2)
    assert block("grid = (n_rows,)", loop=True) == (-2, -1, 0, 1, 2)
    capped = ONE_BLOCK_PER_ROW.format(grid="grid = (n_rows,)").replace(
        "triton.next_power_of_2(n_cols)", "min(4096, triton.next_power_of_2(n_cols))")
    (cap,) = [k for k in find_knobs(capped) if k.name == "launch:BLOCK_SIZE.cap"]
    assert cap.value == 4096 and cap.choices[0] == 4096 and len(cap.choices) > 1, cap


def test_flashinfer_min_max_warps_expose_their_floor_cap_and_divisor() -> None:
    src = upstream("flashinfer_norm.py")
    found = knobs(src)
    assert found["rms_norm:num_warps.floor"] == 8
    assert found["rms_norm:num_warps.cap"] == 32
    assert found["rms_norm:num_warps.div"] == 256
    assert found["rms_norm_add_residual:num_warps.div"] == 32  # min(32, triton.cdiv(block_size, 32))
    new = check_patch(src, {"rms_norm:num_warps.floor": 4, "rms_norm:num_warps.div": 512})
    assert changed_lines(src, new) == ["-    num_warps = max(8, min(32, block_size // 256))",
                                       "+    num_warps = max(4, min(32, block_size // 512))"]
    with pytest.raises(KnobError, match="not a choice"):
        apply_knobs(src, {"rms_norm:num_warps.floor": 3})


def test_values_from_a_table_a_helper_or_next_power_of_2_at_the_launch() -> None:
    # The shapes FlashInfer's and fla's wrappers use besides the ones above, written inline.
    src = textwrap.dedent('''
        _WARPS = {torch.float16: 4, torch.float32: 8}

        def launch(x, n, cfg):
            k[(n,)](x, n, BLOCK_SIZE=triton.next_power_of_2(n), TILE_N=cfg["TILE_N"], num_warps=_WARPS[x.dtype])
    ''')
    found = knobs(src)
    assert {found[f"launch:{p}.scale"] for p in ("BLOCK_SIZE", "TILE_N", "num_warps")} == {0}
    new = check_patch(src, {"launch:BLOCK_SIZE.scale": 1, "launch:TILE_N.scale": -1, "launch:num_warps.scale": 1})
    assert ('BLOCK_SIZE=triton.next_power_of_2(n) * 2, TILE_N=max(cfg["TILE_N"] // 2, 16), '
            "num_warps=min(_WARPS[x.dtype] * 2, 32)") in new


# --------------------------------------------------------------------------- autotune and heuristics


def test_liger_dyt_autotune_lists_are_extended_pruned_and_pinned_keeping_the_decorator() -> None:
    src = upstream("liger_dyt.py")
    found = knobs(src)
    assert found["_dyt_fwd_kernel:autotune.BLOCK_N.max"] == 4096
    assert found["_dyt_fwd_kernel:autotune.num_warps.min"] == 4
    assert found["_dyt_fwd_kernel:autotune.num_stages.max"] == 2
    extended = check_patch(src, {"_dyt_fwd_kernel:autotune.BLOCK_N.max": 8192,
                                 "_dyt_fwd_kernel:autotune.num_warps.max": 32})
    assert changed_lines(src, extended)[1::2] == ["+        for bn in [1024, 2048, 4096, 8192]",
                                                  "+        for nw in [4, 8, 16, 32]"]
    pruned = check_patch(src, {"_dyt_fwd_kernel:autotune.num_stages.max": 1})
    assert changed_lines(src, pruned)[1] == "+        for ns in [1]"
    pinned = check_patch(src, {"_dyt_fwd_kernel:autotune.BLOCK_N.min": 2048, "_dyt_fwd_kernel:autotune.BLOCK_N.max": 2048})
    assert "+        for bn in [2048]" in changed_lines(src, pinned)
    assert pinned.count("@triton.autotune(") == src.count("@triton.autotune(")
    with pytest.raises(KnobError, match="would be empty"):
        apply_knobs(src, {"_dyt_fwd_kernel:autotune.BLOCK_N.min": 8192})


def test_fla_heuristic_tile_cap_and_autotune_warps() -> None:
    src = upstream("fla_chunk_intra.py")
    kernel = "chunk_precond_kda_fwd_kernel_inter_solve_fused"
    found = knobs(src)
    assert found[f"{kernel}:heuristics.BK.cap"] == 64
    assert found[f"{kernel}:autotune.num_warps.max"] == 4
    new = check_patch(src, {f"{kernel}:heuristics.BK.cap": 32, f"{kernel}:autotune.num_warps.max": 8})
    assert changed_lines(src, new) == [
        "-    'BK': lambda args: min(triton.next_power_of_2(args['K']), 64),",
        "+    'BK': lambda args: min(triton.next_power_of_2(args['K']), 32),",
        "-        for num_warps in [1, 2, 4]",
        "+        for num_warps in [1, 2, 4, 8]",
    ]


def test_liger_dyt_autotune_pin_holds_one_config_up_to_a_bound_of_its_key_axis() -> None:
    # A pin is a rule over the decorator's key: up to a size of N one config, past it the autotuner's
    # own search over the whole list, which stays as written (a pin never applies to every shape).
    src = upstream("liger_dyt.py")
    found = knobs(src)
    assert found["_dyt_fwd_kernel:autotune.pin"] == 0 and found["_dyt_fwd_kernel:autotune.pin.N"] == 4096
    pin = next(k for k in find_knobs(src) if k.name == "_dyt_fwd_kernel:autotune.pin")
    assert pin.choices == tuple(range(19))  # none, or one of the comprehension's 3 x 2 x 3 configs
    pinned = check_patch(src, {"_dyt_fwd_kernel:autotune.pin": 5})
    assert changed_lines(src, pinned) == [
        "+    # N <= 4096: configs[4] (BLOCK_N=1024, num_stages=2, num_warps=8) alone, measured fastest there",
        '+    prune_configs_by={"early_config_prune": lambda configs, args, **kw: [configs[4]] '
        'if {**args, **kw}["N"] <= 4096 else configs},',
    ]
    assert pinned.count("@triton.autotune(") == src.count("@triton.autotune(")
    # The bound moves alone on a pinned source; the comment follows the rule.
    wider = check_patch(pinned, {"_dyt_fwd_kernel:autotune.pin.N": 16384})
    assert "    # N <= 16384: configs[4] (BLOCK_N=1024" in wider and '["N"] <= 16384 else configs}' in wider
    assert apply_setting("f.py", src, {"_dyt_fwd_kernel:autotune.pin": 5,
                                       "_dyt_fwd_kernel:autotune.pin.N": 16384}, lineage=True) == wider
    # Moving the list's ends in the same setting renames the pinned config in the comment...
    moved = apply_knobs(src, {"_dyt_fwd_kernel:autotune.pin": 5, "_dyt_fwd_kernel:autotune.num_warps.min": 8})
    assert "configs[4] (BLOCK_N=2048, num_stages=1, num_warps=8)" in moved  # 3 x 2 x [8, 16]
    # ...and a pin past the shortened list's end is no setting at all.
    with pytest.raises(KnobError, match="config 18 of a list of 6"):
        apply_knobs(src, {"_dyt_fwd_kernel:autotune.pin": 18, "_dyt_fwd_kernel:autotune.BLOCK_N.max": 1024})


LITERAL_AUTOTUNE = '''
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": 1024}, num_warps=4),
        triton.Config({"BLOCK_N": 2048}, num_warps=8),
        triton.Config({"BLOCK_N": 4096}, num_warps=16),
    ],
    key=["M", "N"],
)
@triton.jit
def kernel(X, M, N, BLOCK_N: tl.constexpr):
    pass
'''


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_a_pinned_literal_autotune_list_is_what_triton_runs_within_the_bounds_only(tmp_path: Path) -> None:
    # Triton's own Autotuner reads the patch (no GPU: pruning happens before any benchmark), with the
    # key axes passed positionally and as keywords, inside and past each bound.
    setting = {"kernel:autotune.pin": 2, "kernel:autotune.pin.M": 64, "kernel:autotune.pin.N": 2048}
    new = check_patch(LITERAL_AUTOTUNE, setting)
    assert '    # M <= 64 and N <= 2048: configs[1] (triton.Config({"BLOCK_N": 2048}, num_warps=8)) alone' in new
    (tmp_path / "pinned_autotune.py").write_text(new)
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("pinned_autotune")
    finally:
        sys.path.remove(str(tmp_path))
    tuner = module.kernel
    every = [c.kwargs["BLOCK_N"] for c in tuner.configs]
    for nargs, kwargs, runs in [
        ({"X": None, "M": 64, "N": 2048}, {}, [2048]),
        ({"X": None}, {"M": 8, "N": 1000}, [2048]),
        ({"X": None, "M": 65, "N": 2048}, {}, every),
        ({"X": None, "M": 64}, {"N": 2049}, every),
    ]:
        tuner.nargs = nargs
        assert [c.kwargs["BLOCK_N"] for c in tuner.prune_configs(kwargs)] == runs, (nargs, kwargs)


def test_an_inline_autotune_gets_an_inline_pin_and_a_repository_prune_is_left_alone() -> None:
    inline = textwrap.dedent('''
        import triton

        @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])
        @triton.jit
        def k(x, n, BLOCK: tl.constexpr):
            pass
    ''')
    new = check_patch(inline, {"k:autotune.pin": 1, "k:autotune.pin.n": 256})
    assert ('key=["n"], prune_configs_by={"early_config_prune": lambda configs, args, **kw: [configs[0]] '
            'if {**args, **kw}["n"] <= 256 else configs})') in new
    own = inline.replace('key=["n"]', 'key=["n"], prune_configs_by={"early_config_prune": my_prune}')
    assert not [n for n in knobs(own) if ".pin" in n]
    # One config, or no key to bound the pin by: nothing to pin.
    assert not [n for n in knobs(inline.replace(', triton.Config({"BLOCK": 128})', "")) if ".pin" in n]
    assert not [n for n in knobs(inline.replace(', key=["n"]', "")) if ".pin" in n]


def test_the_tuner_offers_a_pin_and_publish_recomputes_it() -> None:
    path = "liger_kernel/ops/dyt.py"
    src = upstream("liger_dyt.py")
    _, cands = _propose(_solution(path, src, "liger_dyt"), n=200)
    pin = next(c for c in cands if "_dyt_fwd_kernel:autotune.pin 0->1" in c.note)
    new = pin.solution.sources[0].content
    assert "[configs[0]] if {**args, **kw}[\"N\"] <= 4096 else configs" in new
    params = {k.split("::", 1)[1]: v for k, v in pin.params.items()}
    assert apply_setting(path, src, params, lineage=True) == new


def test_no_candidate_makes_the_autotuner_visit_more_than_twice_its_parents_configs() -> None:
    """Triton compiles and benchmarks every config of an autotune list in each candidate's fresh process:
    on the H200 Liger DyT's 18 configs took 6 s, and the tuner's first candidates (every list end drawn
    at once) 48 and 36 configs, 24 s and 29 s (session 26). Init draws and single moves alike stay
    within AUTOTUNE_GROWTH times the parent's; a step that extends one list still comes."""
    from kernelpro.knobs import autotune_sizes
    from kernelpro.runner.programmers.tuner import AUTOTUNE_GROWTH

    path = "liger_kernel/ops/dyt.py"
    src = upstream("liger_dyt.py")
    assert autotune_sizes(src) == {"_dyt_fwd_kernel": 18, "_dyt_bwd_kernel": 18}
    sol = _solution(path, src, "liger_dyt")
    parent = Scored(Candidate(sol, None, "init", "base"), Outcome("k", "PASSED", ()), 1.0)
    target = Target("t", "triton", (path,), sol.spec.entry_point, None, ())
    context = Context(target, lambda k: False, "cuda")
    # Session 26's first two candidates, drawn whole by the init mode (48 and 36 configs): only the second is offered.
    fwd = f"{path}::_dyt_fwd_kernel:autotune"
    drawn = [{f"{fwd}.BLOCK_N.max": 16384, f"{fwd}.BLOCK_N.min": 128, f"{fwd}.num_stages.max": 6,
              f"{fwd}.num_warps.max": 2, f"{fwd}.num_warps.min": 2},
             {f"{fwd}.BLOCK_N.max": 16384, f"{fwd}.BLOCK_N.min": 8192, f"{fwd}.num_stages.max": 3,
              f"{fwd}.num_warps.max": 32, f"{fwd}.num_warps.min": 1}]
    tuner = Tuner()
    current = {f"{path}::{k.name}": k.value for k in find_knobs(src)}
    tuner._moves = lambda *a, **k: [{**current, **d} for d in drawn]  # type: ignore[method-assign]
    offered = tuner.propose(parent, "init", 8, context)
    assert [autotune_sizes(c.solution.sources[0].content)["_dyt_fwd_kernel"] for c in offered] == [36]
    cands = Tuner().propose(parent, "optimize", 64, context)
    sizes = [autotune_sizes(c.solution.sources[0].content)["_dyt_fwd_kernel"] for c in cands]
    assert max(sizes) <= AUTOTUNE_GROWTH * 18 and any(n > 18 for n in sizes), sizes
    assert any("BLOCK_N.max 4096->8192" in c.note for c in cands), "a list extended by one step is still offered"


def test_a_heuristic_without_literals_is_scaled_in_place() -> None:
    # The shape of fla's heuristics with a tile computed by a call alone (no cap to move).
    src = textwrap.dedent('''
        import triton

        @triton.heuristics({"BLOCK_T": lambda args: triton.next_power_of_2(args["T"])})
        @triton.jit
        def k(x, T, BLOCK_T: tl.constexpr):
            pass
    ''')
    new = check_patch(src, {"k:heuristics.BLOCK_T.scale": -1})
    assert '{"BLOCK_T": lambda args: max(triton.next_power_of_2(args["T"]) // 2, 16)}' in new


# --------------------------------------------------------------------------- the tuner and publish


def _solution(path: str, content: str, entry: str) -> Solution:
    return Solution("s", "d", "t", BuildSpec("triton", ("cuda",), f"{path}::{entry}"), (SourceFile(path, content),))


def _propose(sol: Solution, n: int = 64) -> tuple[Tuner, list[Candidate]]:
    parent = Scored(Candidate(sol, None, "init", "base"), Outcome("k", "PASSED", ()), 1.0)
    target = Target("t", "triton", (sol.sources[0].path,), sol.spec.entry_point, None, ())
    tuner = Tuner()
    return tuner, tuner.propose(parent, "optimize", n, Context(target, lambda k: False, "cuda"))


def test_fla_autotune_over_a_variable_offers_nothing_and_the_tuner_says_why() -> None:
    src = upstream("fla_softmax.py")
    assert find_knobs(src) == []
    tuner, cands = _propose(_solution("fla/ops/utils/softmax.py", src, "softmax_fwd"))
    assert cands == []
    assert "`@triton.autotune` of `softmax_fwd_kernel`" in tuner.silent
    assert "NUM_WARPS_AUTOTUNE" in tuner.silent and "not a literal list" in tuner.silent
    # The H200 run of session 26 said only that; the report now shows what the constant holds.
    assert ("(a module constant, line 18: `[1, 2, 4, 8, 16] if IS_AMD else [1, 2, 4, 8, 16, 32]`; it already "
            "holds every num_warps Triton takes, 1 to 32, so the autotuner tries them all)") in tuner.silent


def test_tuner_moves_on_flashinfer_are_recomputed_by_publish(tmp_path: Path) -> None:
    path = "flashinfer/triton/norm.py"
    src = upstream("flashinfer_norm.py")
    _, cands = _propose(_solution(path, src, "rms_norm"))
    notes = " | ".join(c.note for c in cands)
    for name in ("rms_norm:num_warps.scale 0->1", "rms_norm:num_warps.div 256->512", "rms_norm:num_warps.floor 8->16"):
        assert name in notes
    winner_cand = next(c for c in cands if "rms_norm:num_warps.div 256->512" in c.note)
    new = winner_cand.solution.sources[0].content
    assert "block_size // 512" in new
    # The repository at the PR head, and the results as the optimize job records them.
    repo = tmp_path / "repo"
    (repo / "flashinfer" / "triton").mkdir(parents=True)
    (repo / path).write_text(src)
    r = git.Repo.init(repo)
    r.index.add([path])
    head = r.index.commit("upstream flashinfer norm").hexsha
    params = tuple((k, str(v)) for k, v in winner_cand.params.items())
    assert split_setting(params, [path])  # keys are <file>::<knob>
    # recompute reads the winner's params and the patched files only.
    target: Any = SimpleNamespace(winner=SimpleNamespace(params=params), patch_files=(path,))
    assert recompute(_Git(repo, repo.as_uri()), head, target, [path]) == (unified_diff(path, src, new), "")


# --------------------------------------------------------------------------- runs in Triton's interpreter

# Liger's swiglu does not run in the interpreter as published (it calls `.to` on a float argument),
# so the patched heuristic that runs is FlashInfer's: the package as published, minus its
# __init__ files (they patch the CUDA toolchain), with the tuner's patch applied to triton/norm.py.
RMS_NORM_CHECK = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from flashinfer.triton.norm import rms_norm
x, w = torch.randn(3, 300), torch.randn(300)
out = torch.empty_like(x)
rms_norm(x, w, out, 1e-6)
torch.testing.assert_close(out, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
print("ok")
"""


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton")
def test_tuned_flashinfer_rms_norm_runs_in_the_interpreter(tmp_path: Path) -> None:
    new = check_patch(upstream("flashinfer_norm.py"), {"rms_norm:num_warps.div": 512, "rms_norm:num_warps.scale": 1})
    kernels = tmp_path / "flashinfer" / "triton" / "kernels"
    kernels.mkdir(parents=True)
    for package in (kernels, kernels.parent, kernels.parent.parent):
        (package / "__init__.py").write_text("")
    (kernels / "norm.py").write_text(upstream("flashinfer_kernels_norm.py"))
    (kernels / "quant.py").write_text(upstream("flashinfer_kernels_quant.py"))
    (kernels.parent / "norm.py").write_text(new)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", RMS_NORM_CHECK, str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "ok"


@pytest.mark.gpu
def test_a_pinned_liger_dyt_runs_its_config_within_the_bound_and_autotunes_past_it(tmp_path: Path) -> None:
    """Liger's DyT as published (its liger_kernel imports from the installed wheel), pinned to configs[4]
    up to N=4096: at N=4096 Triton runs that config alone (session 11's H200, Triton 3.6: after timing it
    alone), at N=8192 it times the whole list of 18; both outputs are correct."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU (run on the GPU machine)")
    pytest.importorskip("liger_kernel")
    (tmp_path / "dyt_pinned.py").write_text(check_patch(upstream("liger_dyt.py"), {"_dyt_fwd_kernel:autotune.pin": 5}))
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module("dyt_pinned")
    finally:
        sys.path.remove(str(tmp_path))
    kernel = module._dyt_fwd_kernel
    for n, benchmarked in ((4096, False), (8192, True)):
        x = torch.randn(64, n, device="cuda", dtype=torch.bfloat16)
        alpha = torch.tensor([0.7], device="cuda", dtype=torch.bfloat16)
        gamma, beta = torch.randn(n, device="cuda", dtype=torch.bfloat16), torch.randn(n, device="cuda", dtype=torch.bfloat16)
        kernel.configs_timings = None
        y = module.liger_dyt_fwd(x, alpha, gamma, beta)
        want = (gamma.float() * torch.tanh(alpha.float() * x.float()) + beta.float()).to(x.dtype)
        torch.testing.assert_close(y, want, atol=2e-2, rtol=2e-2)
        if benchmarked:
            assert kernel.configs_timings is not None and len(kernel.configs_timings) == 18
        else:
            # One config kept. Triton 3.9 runs it without a benchmark; 3.6 (the H200's) times it alone.
            kept = list(kernel.configs_timings or {})
            assert kept in ([], [kernel.best_config]), kept
            assert kernel.best_config.kwargs["BLOCK_N"] == 1024 and kernel.best_config.num_warps == 8
            assert kernel.best_config.num_stages == 2


# --------------------------------------------------------------------------- on the GPU: the real optimize path

# Upstream launcher files as published, at the repository root (so the candidate's copy is the one
# imported), each with the corpus case whose definition checks it and a wrapper returning the output.
UPSTREAM_RUNS = {
    "liger_rms_norm": ("liger_rms_norm.py", "liger rms_norm",
                       "from liger_rms_norm import rms_norm_forward\n\n\ndef run(x, w):\n"
                       "    return rms_norm_forward(x, w, 1e-6, 0.0, 'llama', None)[0]\n"),
    "flashinfer_rms_norm": ("flashinfer_norm.py", "flashinfer rms_norm",
                            "import torch\nfrom flashinfer_norm import rms_norm\n\n\ndef run(x, w):\n"
                            "    y = torch.empty_like(x)\n    rms_norm(x, w, y, 1e-6)\n    return y\n"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(UPSTREAM_RUNS))
def test_optimize_tunes_upstream_heuristics_on_the_gpu(name: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """`kernelpro optimize --programmer tuner` on an upstream launcher as published, the pull request
    editing only a comment: the tuner's candidates move the computed heuristics (scale lines, the
    min/max rule's literals) and are evaluated; none fails to build or run because of the rewrite."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU (run on the GPU machine)")
    import json

    import yaml

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from corpus_profile import CASES
    from corpus_profile import _definition as definition

    from kernelpro.cli import main as kernelpro

    fixture, case_name, wrapper = UPSTREAM_RUNS[name]
    case = next(c for c in CASES if c.name == case_name)
    dj = definition(case).to_json()
    dj["axes"]["M"] = {"type": "var"}
    repo = git.Repo.init(tmp_path / "repo", initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "kernelpro test")
        cw.set_value("user", "email", "test@kernelpro.invalid")
    top = Path(repo.working_dir)
    (top / "definitions").mkdir()
    (top / "definitions" / f"{name}.json").write_text(json.dumps(dj, indent=1))
    config = {"version": 1, "targets": [{
        "name": name, "files": [fixture, "kp_entry.py"], "language": "triton", "entry_point": "kp_entry.py::run",
        "definition": f"definitions/{name}.json", "workloads": [{"M": 4096}],
        # 4 candidates: Liger's launcher has 2 knobs, both computed (.scale), FlashInfer's 11, 9 of them
        # computed; at 10 evaluations the Liger run was the longest of the tier, over 9 minutes under
        # 10 workers (session 17), and nothing asserted here needs more than one computed move.
        "budget": {"evaluations": 5, "minutes": 2, "timeout_s": 120}}]}
    (top / ".kernelpro.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    (top / fixture).write_text(upstream(fixture))
    (top / "kp_entry.py").write_text(wrapper)
    repo.git.add(A=True)
    repo.index.commit("upstream as published")
    (top / fixture).write_text(upstream(fixture).replace("# Upstream source,", "# Upstream source (a comment edit),", 1))
    repo.git.add(A=True)
    repo.index.commit("the pull request: a comment")
    out = tmp_path / "out"
    os.environ.setdefault("KERNELPRO_DEVICE", "cuda")
    rc = kernelpro(["optimize", "--repo", str(top), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out),
                    "--search", "mcts", "--programmer", "tuner"])
    assert rc == 0
    entries = [json.loads(x) for x in (out / name / "journal.jsonl").read_text().splitlines() if x.strip()]
    result = json.loads((out / name / "result.json").read_text())
    tuned = [e for e in entries if e["candidate"]["params"]]
    with capsys.disabled():
        print(f"\n{name}: stop={result.get('stop_reason')!r} winner={(result.get('winner') or {}).get('speedup')}")
        for e in tuned:
            print(f"  {e['outcome']['status']:22} {e['candidate']['note']}")
    assert tuned, f"the tuner proposed nothing: {result.get('stop_reason')}"
    # A setting names every knob: a candidate moved a computed value where one differs from the source.
    base = {f"{fixture}::{k.name}": k.value for k in find_knobs(upstream(fixture))}
    heuristic = [e for e in tuned if any(k.endswith((".scale", ".div", ".floor", ".cap")) and v != base.get(k)
                                         for k, v in e["candidate"]["params"].items())]
    assert heuristic, "no candidate moved a computed launch value"
    # A rewrite that breaks the build would be a kernelpro bug; a wrong block size for the data is not.
    assert not [e for e in heuristic if e["outcome"]["status"] in ("COMPILE_ERROR", "RUNTIME_ERROR")]
