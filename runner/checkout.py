"""The pull request's files, read from git objects, never through the work tree.

A pull request controls its work tree: a kernel file that is a symlink to ``/proc/self/environ``
(or to ``~/.git-credentials``) would be read by the orchestrator, with its secrets, and copied into
the results. So a file of a checkout is read as the blob its commit records: a symlink, a
submodule, a folder or a path outside the checkout is refused with the reason. A folder that is not
a git checkout (a test's, ``kernelpro evaluate``'s) is read without following any symlink.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path, PurePosixPath


class CheckoutError(ValueError):
    """A file of the checkout cannot be used as a kernel source; the message says why and what to do."""


def _relative(path: str) -> PurePosixPath:
    p = PurePosixPath(path)
    if not path or p.is_absolute() or any(part in ("..", "") for part in p.parts) or str(p) == ".":
        raise CheckoutError(f"{path!r}: not a path inside the repository; name the kernel's files relative "
                            "to the repository root, without '..'")
    return p


def _git(checkout: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    # No hooks, no fsmonitor, no external diff or filter of the checkout's own config can run here.
    return subprocess.run(["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-C", str(checkout),
                           *args], capture_output=True, timeout=60, stdin=subprocess.DEVNULL)


def _in_git(checkout: Path) -> bool:
    try:
        p = _git(checkout, "rev-parse", "--is-inside-work-tree")
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0 and p.stdout.strip() == b"true"


def read_source(checkout: Path, path: str) -> str:
    """The text of ``path`` as the checkout's commit (HEAD) holds it. Raises CheckoutError."""
    rel = _relative(path)
    if not _in_git(checkout):
        return _read_plain(checkout, rel)
    listing = _git(checkout, "ls-tree", "-z", "HEAD", "--", str(rel))
    if listing.returncode != 0:
        raise CheckoutError(f"{rel}: git ls-tree failed in {checkout}: {listing.stderr.decode(errors='replace')[-300:]}")
    entry = listing.stdout.split(b"\0")[0].decode(errors="replace")
    if not entry:
        raise CheckoutError(f"{rel}: not a file of the commit (missing, or a folder on its way is a symlink); "
                            "commit the kernel's source files themselves")
    meta, _, _name = entry.partition("\t")
    mode, kind, sha = meta.split()
    if mode == "120000":
        raise CheckoutError(f"{rel} is a symbolic link in the commit; kernelpro reads no file through a link. "
                            "Commit the kernel's source itself at that path")
    if kind == "commit":
        raise CheckoutError(f"{rel} is a git submodule; kernelpro reads sources of the repository itself only. "
                            "Copy the kernel into the repository or point .kernelpro.yml at a file in it")
    if kind != "blob":
        raise CheckoutError(f"{rel} is a {kind}, not a file; name the kernel's source files in .kernelpro.yml")
    blob = _git(checkout, "cat-file", "blob", sha)
    if blob.returncode != 0:
        raise CheckoutError(f"{rel}: git cat-file failed: {blob.stderr.decode(errors='replace')[-300:]}")
    return _text(rel, blob.stdout)


def _text(rel: PurePosixPath, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckoutError(f"{rel}: not UTF-8 text ({e.reason}); a kernel source must be text") from None


def _read_plain(root: Path, rel: PurePosixPath) -> str:
    """Walk down from ``root`` one name at a time, refusing a symlink at every step."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, flags | os.O_DIRECTORY)
    except OSError as e:
        raise CheckoutError(f"{root}: cannot open the checkout ({e.strerror})") from None
    try:
        for i, part in enumerate(rel.parts):
            last = i == len(rel.parts) - 1
            try:
                nxt = os.open(part, flags | os.O_NONBLOCK | (0 if last else os.O_DIRECTORY), dir_fd=fd)
            except OSError as e:
                what = "a symbolic link" if os.path.islink(root.joinpath(*rel.parts[: i + 1])) else e.strerror
                raise CheckoutError(f"{rel}: cannot read {'/'.join(rel.parts[: i + 1])} ({what}); kernelpro reads "
                                    "no file through a link. Put the kernel's source itself there") from None
            os.close(fd)
            fd = nxt
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise CheckoutError(f"{rel} is not a regular file; name the kernel's source files in .kernelpro.yml")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return _text(rel, b"".join(chunks))
    finally:
        os.close(fd)
