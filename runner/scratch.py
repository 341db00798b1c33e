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


def larger_than(folder: str | os.PathLike[str], limit: int) -> bool:
    """Whether the files under ``folder`` (links not followed) add up to more than ``limit`` bytes by
    their apparent sizes, which a sparse file makes as large as it likes for no disk; stops counting
    once past it, and never raises."""
    total, todo = 0, [os.fspath(folder)]
    while todo:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as entries:
            for e in entries:
                with contextlib.suppress(OSError):
                    if e.is_dir(follow_symlinks=False):
                        todo.append(e.path)
                    elif e.is_file(follow_symlinks=False):
                        total += e.stat(follow_symlinks=False).st_size
                        if total > limit:
                            return True
    return False
