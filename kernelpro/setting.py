"""A tuner setting applied to source text: the one code path of the tuner and of the publish step.

A setting maps ``<file>::<knob>`` (a knob of :mod:`kernelpro.knobs` in a Python file, of
:mod:`kernelpro.cuda_knobs` in a CUDA file) to an integer. The tuner applies one to a parent's
sources to make each candidate and records it as the candidate's ``params``; the winner's
``params`` are in the results artifact. The publish step, which trusts nothing the optimize job
(it runs the pull request's code) wrote, reads the PR head's files from git, applies the winner's
setting to them with this same code and writes the unified diff itself with :func:`unified_diff`
(the diff ``kernelpro optimize`` writes as ``patch.diff``): a tuner patch that differs from it was
not made by the tuner.

Pure text: nothing here imports torch or ``kernelpro.runner``, and nothing it reads is imported or
run.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from . import cuda_knobs
from .knobs import KnobError, apply_knobs

__all__ = ["KnobError", "apply_setting", "split_setting", "unified_diff"]

_VALUE = re.compile(r"-?[0-9]{1,12}")


def apply_setting(path: str, source: str, values: Mapping[str, int], kernel: str | None = None,
                  block: tuple[str, ...] | None = None, *, lineage: bool = False) -> str:
    """``source`` (the file ``path``) with each knob named in ``values`` (knob name -> value) set.

    ``kernel`` and ``block`` are the target's raw-kernel launch (CUDA launch bounds need them).
    ``lineage``: accept any value a chain of tuner moves can reach (a winner's setting applied to
    the PR head), not only one move's window. Raises KnobError for an unknown knob, a value off its
    range, a file that is neither Python nor CUDA, or a rewrite that does not round-trip.
    """
    if not values:
        return source
    if cuda_knobs.is_cuda_source(path):
        return cuda_knobs.apply_knobs(source, values, kernel, block, lineage=lineage)
    if path.endswith(".py"):
        return apply_knobs(source, values, lineage=lineage)
    raise KnobError(f"{path} is neither a Python nor a CUDA source, so it has no knobs")


def split_setting(params: Iterable[tuple[str, object]], files: Iterable[str]) -> dict[str, dict[str, int]]:
    """A recorded setting (``("<file>::<knob>", value)`` pairs, values as integers or their decimal
    text) as file -> {knob: value}, for the files in ``files`` only.

    Raises KnobError for a key without ``::``, a file outside ``files``, a value that is not a
    whole number, or a knob named twice: such a record was not written by the tuner.
    """
    allowed = set(files)
    out: dict[str, dict[str, int]] = {}
    for key, raw in params:
        path, sep, name = str(key).partition("::")
        if not sep or not path or not name:
            raise KnobError(f"parameter {str(key)[:100]!r} is not '<file>::<knob>'")
        if path not in allowed:
            raise KnobError(f"parameter {str(key)[:100]!r} names a file that is not one of the target's")
        text = str(raw) if not isinstance(raw, bool) else ""
        if not _VALUE.fullmatch(text):
            raise KnobError(f"parameter {str(key)[:100]!r} = {text[:40]!r} is not a whole number")
        knobs = out.setdefault(path, {})
        if name in knobs:
            raise KnobError(f"parameter {str(key)[:100]!r} appears twice")
        knobs[name] = int(text)
    return out


def unified_diff(path: str, old: str, new: str) -> str:
    """The unified diff of one file, exactly as ``kernelpro optimize`` writes it in ``patch.diff``."""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"))
