"""Layout: how a repository's Python code is imported, so that a candidate runs as the repository would.

A wrapper imports its kernel the way the repository's own code does (``from liger_kernel.ops.x import
f`` for ``src/liger_kernel/ops/x.py``, or ``from .utils import g`` inside ``flashinfer/``). The
package of that name may also be installed on the runner (editable or not); the candidate's files
must win over it. Here: which folders the repository's code is imported from (its import roots), which
top-level names the candidate's files define, and the rest of those packages as the commit holds them
(read from git objects, like the candidate's own files), which the harness writes around the candidate's
files. Used by the parent (``context``) and by the harness child (``roots``, ``module_of``); nothing
here imports anything of the repository.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath

# What the rest of a package may weigh in a request: enough for Liger-Kernel (~1 MB of Python) and
# FlashInfer's Python package; a larger one runs with what fits and the installed copy for the rest.
MAX_CONTEXT_FILES = 3000
MAX_CONTEXT_BYTES = 24 << 20


def _norm_root(r: str) -> str:
    r = PurePosixPath(r.strip().strip("/") or ".").as_posix()
    return "" if r == "." else r


def roots(paths: Iterable[str], files: Collection[str], python_path: Sequence[str] = ()) -> dict[str, tuple[str, ...]]:
    """Top-level module or package name -> the import roots (folders relative to the repository root,
    '' for the root) it is defined under, for the Python files among ``paths``. ``files`` is every file
    of the tree (its ``__init__.py`` files say where a package starts). A file under a folder of
    ``python_path`` is imported from the deepest such folder; otherwise from the folder above its
    outermost regular package, or ``src`` for a file of a src layout without ``__init__.py`` files."""
    pp = sorted({_norm_root(r) for r in python_path}, key=len, reverse=True)
    out: dict[str, list[str]] = {}
    for path in paths:
        p = PurePosixPath(path)
        if p.suffix != ".py":
            continue
        dirs = p.parts[:-1]
        root = next((r for r in pp if r == "" or p.as_posix().startswith(r + "/")), None)
        if root is None:
            i = len(dirs)
            while i > 0 and "/".join((*dirs[:i], "__init__.py")) in files:
                i -= 1
            root = "/".join(dirs[:i]) if i < len(dirs) else ("src" if dirs and dirs[0] == "src" else "")
        depth = len(PurePosixPath(root).parts) if root else 0
        rest = p.parts[depth:]
        name = rest[0] if len(rest) > 1 else p.stem
        if name.isidentifier():
            out.setdefault(name, [])
            if root not in out[name]:
                out[name].append(root)
    return {k: tuple(v) for k, v in out.items()}


def module_of(path: str, layout: Mapping[str, Sequence[str]]) -> str | None:
    """The dotted name ``path`` is imported by under ``layout`` (from ``roots``), or None."""
    p = PurePosixPath(path)
    if p.suffix != ".py":
        return None
    for name, rs in layout.items():
        for r in rs:
            rel = p.relative_to(r) if r and p.is_relative_to(r) else (p if not r else None)
            if rel is None or rel.parts[0] not in (name, f"{name}.py"):
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if all(s.isidentifier() for s in parts):
                return ".".join(parts)
    return None


def _git(checkout: Path, *args: str, stdin: bytes | None = None) -> bytes | None:
    try:
        p = subprocess.run(["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-C", str(checkout),
                            *args], capture_output=True, timeout=120, input=stdin)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def _listing(checkout: Path, tops: Sequence[str]) -> dict[str, str] | None:
    """Path -> blob id of the regular files of HEAD (links and submodules left out); None outside git."""
    raw = _git(checkout, "ls-tree", "-r", "-z", "HEAD", "--", *tops)
    if raw is None:
        return None
    out = {}
    for entry in raw.split(b"\0"):
        meta, _, name = entry.decode(errors="replace").partition("\t")
        if meta and meta.split()[0] in ("100644", "100755"):
            out[name] = meta.split()[2]
    return out


def _walk(checkout: Path, tops: Sequence[str]) -> dict[str, str]:
    """A folder that is not a git checkout (a test's): its files, no symlink followed."""
    out: dict[str, str] = {}
    for top in tops:
        for dirpath, dirnames, filenames in os.walk(checkout / top):
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and not os.path.islink(os.path.join(dirpath, d))]
            for f in filenames:
                full = os.path.join(dirpath, f)
                if stat.S_ISREG(os.lstat(full).st_mode):
                    out[Path(full).relative_to(checkout).as_posix()] = full
            if len(out) > 4 * MAX_CONTEXT_FILES:
                return out
    return out


def _files(checkout: Path, sources: Sequence[str]) -> tuple[Mapping[str, str], bool]:
    """The files of the folders the sources are in (path -> blob id in git, else full path); whether git's."""
    tops = sorted({PurePosixPath(s).parts[0] for s in sources if len(PurePosixPath(s).parts) > 1})
    if not tops:
        return {}, False
    listing = _listing(checkout, tops)
    return (listing, True) if listing is not None else (_walk(checkout, tops), False)


def of(checkout: Path, sources: Sequence[str], python_path: Sequence[str] = ()) -> dict[str, tuple[str, ...]]:
    """``roots`` of a target's sources in the checkout's commit."""
    return roots(sources, _files(checkout, sources)[0], python_path)


def context(checkout: Path, sources: Sequence[str], python_path: Sequence[str] = ()) -> tuple[tuple[str, str], ...]:
    """(path, text) of the Python files, as the checkout's commit holds them, of every package the
    target's ``sources`` belong to (the harness writes them, then the candidate's files over them).
    Empty when there is none or it cannot be read; the installed copy then supplies the rest."""
    files, in_git = _files(checkout, sources)
    if not files:
        return ()
    listing = files if in_git else None
    layout = roots(sources, files, python_path)
    dirs = [f"{r}/{n}/" if r else f"{n}/" for n, rs in layout.items() for r in rs]
    wanted = [p for p in sorted(files) if p.endswith(".py") and p.startswith(tuple(dirs)) and p not in sources]
    wanted = wanted[:MAX_CONTEXT_FILES]
    if listing is None:
        texts = [_read(files[p]) for p in wanted]
    else:
        texts = _blobs(checkout, [files[p] for p in wanted])
    out, size = [], 0
    for p, t in zip(wanted, texts, strict=True):
        # An empty file is kept: an empty __init__.py is what makes its folder a package, and without
        # it flashinfer/triton/ read as a top-level package named triton (benchmarks/upstream.py).
        if t is None:
            continue
        size += len(t)
        if size > MAX_CONTEXT_BYTES:
            break
        out.append((p, t))
    return tuple(out)


def _read(full: str) -> str | None:
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read(MAX_CONTEXT_BYTES).decode("utf-8")
        except UnicodeDecodeError:
            return None


def _blobs(checkout: Path, shas: Sequence[str]) -> list[str | None]:
    """The texts of these blobs, in one ``git cat-file --batch`` (None for one that is not UTF-8)."""
    if not shas:
        return []
    raw = _git(checkout, "cat-file", "--batch", stdin="".join(f"{s}\n" for s in shas).encode())
    if raw is None:
        return [None] * len(shas)
    out: list[str | None] = []
    pos = 0
    for _ in shas:
        nl = raw.index(b"\n", pos)
        head = raw[pos:nl].split()
        if len(head) != 3:  # "<sha> missing"
            out.append(None)
            pos = nl + 1
            continue
        n = int(head[2])
        body = raw[nl + 1:nl + 1 + n]
        pos = nl + 1 + n + 1
        try:
            out.append(body.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(None)
    return out
