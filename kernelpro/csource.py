"""Facts read from C/C++/CUDA source as text, shared by the bot (which kernels a pull request
changed), the CUDA tuner (which constants it may change) and the runner (a candidate's fingerprint
and its static check): one reading of comments and literals for all of them, so that a rule never
fires on a comment and a comment never hides code. Pure text: no torch, no runner, no GitHub.

The scanner knows what a C++17 reader must: ``//`` and ``/* */`` comments, string and character
literals with escapes (a stray quote ends at its line, so it cannot swallow the file), raw strings
``R"delim( ... )delim"`` and digit separators (``1'000'000`` is a number, not a character literal).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

_RAW_OPEN = re.compile(r'R"([^()\\\s]{0,16})\(')


def _literal_end(text: str, i: int, quote: str) -> int:
    """Index just past the literal that opens at text[i]; it ends at an unescaped newline at the latest."""
    j, n = i + 1, len(text)
    while j < n:
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == quote:
            return j + 1
        if ch == "\n":
            return j
        j += 1
    return n


def spans(text: str) -> Iterator[tuple[int, int, str]]:
    """(start, end, kind) of every comment ('comment') and string or character literal ('literal'),
    in order; ``text[start:end]`` is the whole comment or literal, quotes included."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "/" and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            yield i, j, "comment"
        elif c == "/" and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            yield i, j, "comment"
        elif c == '"':
            m = _RAW_OPEN.match(text, i - 1) if i and text[i - 1] == "R" else None
            if m:
                close = ")" + m.group(1) + '"'
                j = text.find(close, m.end())
                j = n if j < 0 else j + len(close)
            else:
                j = _literal_end(text, i, '"')
            yield i, j, "literal"
        elif c == "'":
            k = i - 1
            while k >= 0 and (text[k].isalnum() or text[k] in "_.'"):
                k -= 1
            if k + 1 < i and text[k + 1].isdigit():  # a digit separator: 1'000'000
                i += 1
                continue
            j = _literal_end(text, i, "'")
            yield i, j, "literal"
        else:
            i += 1
            continue
        i = max(j, i + 1)


def masked(text: str, preprocessor: bool = False) -> str:
    """``text`` with comments and literals (and, with ``preprocessor``, directive lines with their
    continuations) blanked: offsets and newlines kept, so positions and line numbers still match."""
    out = list(text)
    for start, end, _ in spans(text):
        for k in range(start, end):
            if out[k] != "\n":
                out[k] = " "
    result = "".join(out)
    if not preprocessor:
        return result
    lines = result.split("\n")
    continued = False
    for idx, line in enumerate(lines):
        if continued or line.lstrip().startswith("#"):
            continued = line.rstrip().endswith("\\")
            lines[idx] = " " * len(line)
    return "\n".join(lines)


_BLANKS = re.compile(r"[ \t\f\v]+")


def without_comments(text: str) -> str:
    """``text`` with each run of comments and blanks outside literals made one blank, literals kept
    as written, newlines kept (they end preprocessor directives)."""
    parts: list[str] = []
    stretch: list[str] = []  # code since the last literal, comments already one blank each
    at = 0
    for start, end, kind in spans(text):
        stretch.append(text[at:start])
        if kind == "comment":
            stretch.append(" ")
        else:
            parts += [_BLANKS.sub(" ", "".join(stretch)), text[start:end]]
            stretch = []
        at = end
    stretch.append(text[at:])
    parts.append(_BLANKS.sub(" ", "".join(stretch)))
    return "".join(parts)
