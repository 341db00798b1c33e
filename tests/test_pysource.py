"""kernelpro/pysource.py: one reading of Triton's decorators for the bot's kernel finder and the
tuner (issue 25, point 5: the tuner took any name ending in "jit" for Triton's)."""

from __future__ import annotations

import ast

from kernelpro.bot.change import find_kernels
from kernelpro.knobs import find_knobs
from kernelpro.pysource import import_aliases, triton_decorator

SOURCE = '''
import numba
import triton
import triton.language as tl
from triton import jit as tjit, autotune
from triton.runtime import heuristics


@numba.jit
def not_a_kernel(x_ptr, BLOCK: tl.constexpr):
    pass


@tjit
def k(x_ptr, BLOCK: tl.constexpr):
    tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)


def launch(x):
    k[(1,)](x, BLOCK=128)
    not_a_kernel[(1,)](x, BLOCK=256)
'''


def test_decorators_are_read_through_the_imports() -> None:
    tree = ast.parse(SOURCE)
    aliases = import_aliases(tree)
    kinds = {f.name: [triton_decorator(d, aliases) for d in f.decorator_list]
             for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert kinds == {"not_a_kernel": [None], "k": ["jit"], "launch": []}
    deco = ast.parse("@autotune(configs=[])\n@heuristics({})\ndef f(): pass\n").body[0]
    assert isinstance(deco, ast.FunctionDef)
    assert [triton_decorator(d, aliases) for d in deco.decorator_list] == ["autotune", "heuristics"]
    assert triton_decorator(ast.parse("triton.jit", mode="eval").body, {}) == "jit"  # no visible import


def test_the_bot_and_the_tuner_agree_on_which_functions_are_kernels() -> None:
    assert [k.name for k in find_kernels("k.py", SOURCE)] == ["k"]
    blocks = {knob.value for knob in find_knobs(SOURCE) if knob.kind == "block"}
    assert blocks == {128}, blocks  # k's launch; numba's function launched with 256 is no Triton kernel
