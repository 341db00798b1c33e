"""The optimize job's results folder as it leaves the GPU runner: plain files, no secret.

The optimize job runs the pull request's code, and that code can write into the results folder
(DESIGN.md, the threat model). What the folder holds is uploaded as an artifact that anyone who
can read the repository's Actions can download, and ``actions/upload-artifact`` follows symbolic
links. So before the upload, :func:`seal` walks the folder without following any link and removes

- symbolic links (a link to ``~/.ssh/id_ed25519`` would upload the key), hard links (a second
  name of a file outside), and anything that is not a directory or a regular file;
- every file that holds one of the secret values kernelpro itself holds (the LLM key, a GitHub
  token, any variable of its environment named like a secret), raw or in the simple spellings a
  leak would use (reversed, hex, base64 at each alignment, percent-encoded).

Each removal is a :class:`Removal` the optimize step reports as an error; the workflow's copy step
(examples/workflows/kernelpro.yml) keeps only regular single-link files as a second line.
"""

from __future__ import annotations

import base64
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

__all__ = ["LARGEST", "MIN_SECRET", "Removal", "seal", "secret_values", "spellings"]

LARGEST = 1 << 30
"""Bytes (apparent size) above which a file is removed unread: nothing kernelpro writes comes near, and
a candidate's sparse file of 1 TiB would have kept the secret scan reading for hours (session 27)."""
MIN_SECRET = 8
"""Shorter values are not treated as secrets (too many false matches, and no real key is that short)."""
_SECRET_NAME = re.compile(r"(?i)(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH)")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class Removal:
    """One entry taken out of the results folder before the upload."""

    path: str
    """The entry, relative to the results folder."""
    why: str
    """What it was (a link, a special file) or which secret it held (by name, never by value)."""


def secret_values(env: Mapping[str, str], extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """Name -> value of the secrets kernelpro holds: ``extra`` (e.g. the settings' LLM key and
    token) and every variable of ``env`` whose name reads like a secret, at least
    :data:`MIN_SECRET` characters long."""
    out = {k: v for k, v in env.items() if _SECRET_NAME.search(k) and len(v) >= MIN_SECRET}
    for k, v in (extra or {}).items():
        if v and len(v) >= MIN_SECRET:
            out[k] = v
    return out


def spellings(value: str) -> set[bytes]:
    """``value`` as bytes, and as a leak would spell it: reversed, hex, base64 (standard and URL-safe)
    whatever its offset in the encoded stream, percent-encoded."""
    raw = value.encode("utf-8")
    out = {raw, raw[::-1], raw.hex().encode(), raw.hex().upper().encode(), quote(value, safe="").encode()}
    for shift in range(3):
        # The value preceded by `shift` bytes: the part of its encoding that does not depend on them.
        enc = base64.b64encode(b"\0" * shift + raw)
        # Character k covers bits 6k..6k+5 of the stream: only those inside the value's bytes count.
        start, end = (shift * 4 + 2) // 3, (shift + len(raw)) * 4 // 3
        core = enc[start:end]
        if len(core) >= MIN_SECRET:
            out.add(core)
            out.add(core.replace(b"+", b"-").replace(b"/", b"_"))
    return {s for s in out if len(s) >= MIN_SECRET}


def _walk(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry below ``root``, by lstat, descending into real directories only."""
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for e in entries:
        p = Path(e.path)
        try:
            st = os.lstat(p)
        except OSError:
            continue
        yield p, st
        if stat.S_ISDIR(st.st_mode):
            yield from _walk(p)


def _holds(path: Path, needles: Iterable[tuple[str, bytes]]) -> str | None:
    """The name of the first secret whose spelling ``path`` holds (read without following links)."""
    pairs = list(needles)
    if not pairs:
        return None
    keep = max(len(n) for _, n in pairs) - 1
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return "(unreadable)"
    with os.fdopen(fd, "rb") as f:
        tail = b""
        while chunk := f.read(_CHUNK):
            window = tail + chunk
            for name, needle in pairs:
                if needle in window:
                    return name
            tail = window[-keep:] if keep > 0 else b""
    return None


def seal(root: Path, secrets: Mapping[str, str]) -> list[Removal]:
    """Remove from ``root`` what must not be uploaded (module doc); returns what was removed.

    A ``root`` that is itself a symbolic link or not a directory is removed (unlinked) whole.
    """
    root = Path(root)
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return []
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(root)
        return [Removal(".", "the results folder itself is a symbolic link or not a folder")]
    needles = [(name, s) for name, v in secrets.items() for s in sorted(spellings(v))]
    removed: list[Removal] = []
    for p, st in list(_walk(root)):
        rel = p.relative_to(root).as_posix()
        why = None
        if stat.S_ISLNK(st.st_mode):
            why = "a symbolic link (the upload would follow it out of the results folder)"
        elif stat.S_ISDIR(st.st_mode):
            continue
        elif not stat.S_ISREG(st.st_mode):
            why = "not a regular file (a FIFO, socket or device)"
        elif st.st_nlink > 1:
            why = "a hard link (a second name of a file that may live outside the results folder)"
        elif st.st_size > LARGEST:
            why = f"larger than {LARGEST >> 30} GiB, more than any result of kernelpro's (removed unread)"
        elif (name := next((n for n, x in needles if x in rel.encode("utf-8", "surrogateescape")), None)) is not None:
            why = f"its name holds the value of {name}, a secret kernelpro holds"
            rel = "(a name holding a secret)"
        elif (name := _holds(p, needles)) is not None:
            why = f"it holds the value of {name}, a secret kernelpro holds"
        if why is not None:
            try:
                os.unlink(p)
            except OSError as exc:
                why += f"; removing it failed ({exc.strerror})"
            removed.append(Removal(rel, why))
    return removed
