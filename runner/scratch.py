"""Scratch folders that children write in, removed whatever a child left there.

A candidate's process may leave anything in the folders it can write (its work folder, its Triton
cache): a chain of 3000 nested folders made ``shutil.rmtree`` (recursive on Python 3.11 and 3.12)
raise RecursionError in ``tempfile.TemporaryDirectory``'s clean-up, which ended the whole run in the
parent (a red-team candidate, session 25). Removal here never raises: where rmtree gives up, ``rm
-rf`` (iterative) removes the rest.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator


def remove(folder: str | os.PathLike[str]) -> None:
    """Remove ``folder`` and everything under it; never raises (what cannot be removed stays)."""
    with contextlib.suppress(RecursionError, MemoryError):
        shutil.rmtree(folder, ignore_errors=True)
    if os.path.lexists(folder):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(["rm", "-rf", "--", os.fspath(folder)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=False)


@contextlib.contextmanager
def folder(prefix: str, dir: str | os.PathLike[str] | None = None) -> Iterator[str]:  # noqa: A002 - tempfile's name
    """A new temporary folder (as ``tempfile.TemporaryDirectory``), removed on exit by :func:`remove`."""
    path = tempfile.mkdtemp(prefix=prefix, dir=dir)
    try:
        yield path
    finally:
        remove(path)
