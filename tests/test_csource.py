"""kernelpro/csource.py: the one reading of C/C++/CUDA comments and literals that the bot's kernel
finder, the CUDA tuner, the candidate fingerprint and the static check share (issue 25, point 5:
three maskers before, only one of which knew raw strings and digit separators)."""

from __future__ import annotations

from pathlib import Path

from kernelpro.csource import masked, spans, without_comments

ROOT = Path(__file__).resolve().parents[1]

TRICKY = '''#include <cstdio>
#define STR(x) \\
  #x
const char* a = "// not a comment";  /* a "comment" */
const char* r = R"py(x = "y" // z
)py";
int n = 1'000'000;  // digit separators
char q = '\\'';
__global__ void k(float* y) { y[0] = n; }  /* __global__ void fake() {} */
'''


def test_raw_strings_digit_separators_and_quotes_in_comments() -> None:
    kinds = [(TRICKY[s:e], k) for s, e, k in spans(TRICKY)]
    assert ('"// not a comment"', "literal") in kinds
    assert ('/* a "comment" */', "comment") in kinds
    assert ('R"py(x = "y" // z\n)py"'[1:], "literal") in kinds  # the literal starts at its quote
    assert ("'\\''", "literal") in kinds
    assert not any("000" in text for text, _ in kinds)  # 1'000'000 is a number
    m = masked(TRICKY)
    assert len(m) == len(TRICKY) and m.count("\n") == TRICKY.count("\n")
    assert "__global__ void k" in m and "fake" not in m and "not a comment" not in m
    assert "1'000'000" in m
    p = masked(TRICKY, preprocessor=True)
    assert "#include" not in p and "#x" not in p and "const char* a" in p


def test_without_comments_keeps_literals_as_written_and_makes_runs_one_blank() -> None:
    out = without_comments('int  a = 1;   /* x */   // y\nconst char* s = "a  /* b */  c";\n')
    assert out == 'int a = 1; \nconst char* s = "a  /* b */  c";\n'


def test_every_c_source_of_the_tree_keeps_its_code_and_literals() -> None:
    """On every C file of the repository (the three readings it replaced agreed on all of them):
    masking keeps offsets and leaves no comment; dropping comments keeps every literal as written."""
    files = [p for ext in ("*.cu", "*.cuh", "*.cpp") for p in ROOT.glob(f"examples/**/{ext}")]
    files += [p for ext in ("*.cu", "*.cuh", "*.cpp") for p in ROOT.glob(f"tests/**/{ext}")]
    assert files
    for f in files:
        text = f.read_text()
        m = masked(text)
        assert len(m) == len(text) and "//" not in m and "/*" not in m, f
        bare = without_comments(text)
        assert [text[s:e] for s, e, k in spans(text) if k == "literal"] == \
            [bare[s:e] for s, e, k in spans(bare) if k == "literal"], f
        assert not any(k == "comment" for _, _, k in spans(bare)), f
