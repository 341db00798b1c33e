"""The optimize job's results directory, read as untrusted data by the publish step.

The optimize job runs the pull request's code on a GPU runner, so everything it uploads may have
been written by that code: ``summary.json`` and the per-target ``patch.diff`` are parsed here as
plain JSON and text, never imported, executed or unpickled, and this module does not import
``kernelpro.runner``. The files are bounded here; each result.json is validated by the one
definition of the format, :mod:`kernelpro.schema` (types, finite numbers in range, bounded strings
and lists, numbers that agree); every patch must be a plain unified diff that only *modifies* the
target's kernel files named by the trusted base-branch configuration (the caller passes them as
``allowed_files``). Anything else raises :class:`ArtifactError` and the publish step stops.

Layout read (written by ``kernelpro optimize``)::

    DIR/summary.json            {"targets": [<result.json of each target>], "config": "..."}
    DIR/<target>/patch.diff     the winner against the PR head; empty when the baseline stands
    DIR/<target>/report.md      never read: the tolerances travel in result.json, and a candidate
                                can put text of its own into the report (its warnings)

When ``summary.json`` is absent, ``DIR/<target>/result.json`` of every sub-directory is read instead
(one optimize job per target, artifacts downloaded side by side). The aggregate ``DIR/patch.diff``
is never read: publish applies :attr:`TargetResults.patch` of each target, which was checked
against that target's own files.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path, PurePosixPath
from typing import Any

# The records are defined once, in kernelpro.schema, and re-exported here for the bot's modules.
from kernelpro.schema import (
    TARGET_NAME,
    BaseBranch,
    Ceilings,
    Correctness,
    CurvePoint,
    Finding,
    Gate,
    ProgrammerUse,
    Reader,
    RooflineRow,
    SchemaError,
    Stage1,
    TargetResult,
    Tolerance,
    Winner,
    WorkloadTiming,
)

__all__ = [
    "MAX_PATCH_BYTES",
    "MAX_SUMMARY_BYTES",
    "ArtifactError",
    "BaseBranch",
    "Ceilings",
    "Correctness",
    "CurvePoint",
    "Finding",
    "Gate",
    "ProgrammerUse",
    "Results",
    "RooflineRow",
    "Stage1",
    "TargetResults",
    "Tolerance",
    "Winner",
    "WorkloadTiming",
    "check_patch",
    "extract_results",
    "load_results",
]

MAX_SUMMARY_BYTES = 5 * 1024 * 1024
"""summary.json (or one result.json) larger than this is refused."""
MAX_PATCH_BYTES = 1024 * 1024
"""A target's patch.diff larger than this is refused."""
MAX_PATCH_LINES = 20_000
"""A target's patch.diff with more lines than this is refused."""
MAX_REPORT_BYTES = 2 * 1024 * 1024
"""report.md larger than this is not extracted from an archive (it is never parsed)."""
MAX_TARGETS = 256
"""Most targets in one results directory."""

_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(?: .*)?")
_REFUSE = "the publish step refuses to continue (nothing was pushed or posted from these artifacts)"


class ArtifactError(ValueError):
    """An artifact of the optimize job is malformed or oversteps; publishing stops."""

    def __init__(self, file: str | Path, what: str) -> None:
        self.file = str(file)
        """The artifact file at fault."""
        self.what = what
        """What was wrong with it."""
        super().__init__(f"{self.file}: {what}; {_REFUSE}")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class TargetResults(TargetResult):
    """One target's validated result.json (:class:`kernelpro.schema.TargetResult`) and its checked patch."""

    patch: str = ""
    """The winner's unified diff against the PR head, checked; empty when the baseline stands."""
    patch_files: tuple[str, ...] = ()
    """Repository-relative files the patch modifies."""


@dataclass(frozen=True)
class Results:
    """A validated results directory."""

    targets: tuple[TargetResults, ...]
    """Per target, in the order the optimize job wrote them."""
    config_note: str
    """Where the configuration came from, as the optimize job recorded it."""

    @property
    def winners(self) -> tuple[TargetResults, ...]:
        """The targets with a verified winner."""
        return tuple(t for t in self.targets if t.winner is not None)

    @property
    def patch(self) -> str:
        """All targets' checked patches, concatenated."""
        return "".join(t.patch for t in self.targets)


# --------------------------------------------------------------------------- validation


def _target(file: str, v: Any, where: str, allowed: Mapping[str, Sequence[str]]) -> TargetResult:
    """One target's result.json, validated by :mod:`kernelpro.schema`; the name is checked against
    the trusted configuration first, so a stranger's target is refused before anything else is read."""
    try:
        name = v.get("target") if isinstance(v, dict) else None
        if isinstance(name, str) and TARGET_NAME.fullmatch(name) and name not in allowed:
            known = ", ".join(sorted(allowed)) or "none"
            raise SchemaError(f"{where}.target", f"{name!r} is not a target of the base branch's "
                              f"configuration (known: {known})")
        return TargetResult.from_json(v, where)
    except SchemaError as e:
        raise ArtifactError(file, str(e)) from None


# --------------------------------------------------------------------------- files


def _read(path: Path, limit: int, display: str) -> bytes:
    """A regular file's bytes, refusing symlinks, special files and anything over ``limit``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ArtifactError(display, "missing") from None
    if stat.S_ISLNK(st.st_mode):
        raise ArtifactError(display, "is a symbolic link; artifacts must be plain files")
    if not stat.S_ISREG(st.st_mode):
        raise ArtifactError(display, "is not a regular file")
    if st.st_size > limit:
        raise ArtifactError(display, f"{st.st_size} bytes, more than the limit of {limit}")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ArtifactError(display, f"more than the limit of {limit} bytes")
    return data


def _text(data: bytes, display: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ArtifactError(display, f"not UTF-8 text ({e.reason} at byte {e.start})") from None


def _json(path: Path, display: str) -> Any:
    text = _text(_read(path, MAX_SUMMARY_BYTES, display), display)

    def no_constants(c: str) -> Any:
        raise ArtifactError(display, f"contains {c}, which is not a finite number")

    try:
        return json.loads(text, parse_constant=no_constants)
    except RecursionError:
        raise ArtifactError(display, "nested too deeply") from None
    except json.JSONDecodeError as e:
        raise ArtifactError(
            display, f"not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})"
        ) from None


def _safe_path(p: str) -> bool:
    """A plain repository-relative POSIX path: no absolute, no ``..``, no ``.git``/``.github``."""
    if not p or len(p) > 1000 or p.startswith("/") or "\\" in p or ":" in p.split("/", 1)[0]:
        return False
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in p) or p != p.strip():
        return False
    parts = PurePosixPath(p).parts
    if p.endswith("/") or "/".join(parts) != p:
        return False  # "a//b", "./a", trailing slash: not the canonical spelling
    return not any(x in ("", ".", "..") or x.lower() in (".git", ".github") for x in parts)


def check_patch(text: str, allowed: Sequence[str], display: str = "patch.diff") -> tuple[str, ...]:
    """Check that ``text`` is a unified diff that only modifies files in ``allowed``.

    Accepted: ``--- a/PATH`` / ``+++ b/PATH`` pairs (optionally after ``diff --git a/PATH b/PATH``
    and an ``index`` line), each followed by hunks whose line counts match their headers.
    Refused: any path not in ``allowed`` or not plain (absolute, ``..``, ``.github/**``), different
    a/ and b/ paths (renames), ``/dev/null`` or an empty side (creation or deletion), mode lines
    (symlinks, executables), binary patches, copies, and anything unparsable. Returns the files
    modified, in order.
    """
    if len(text.encode("utf-8")) > MAX_PATCH_BYTES:
        raise ArtifactError(display, f"more than the limit of {MAX_PATCH_BYTES} bytes")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_PATCH_LINES:
        raise ArtifactError(
            display, f"{len(lines)} lines, more than the limit of {MAX_PATCH_LINES}"
        )
    if "\r" in text or "\x00" in text:
        raise ArtifactError(
            display, "contains carriage returns or NUL bytes; only plain text diffs are accepted"
        )
    allowed_set = set(allowed)
    for a in allowed_set:
        if not _safe_path(a):
            raise ArtifactError(
                "the base branch's configuration",
                f"kernel file {a!r} is not a plain repository path",
            )
    files: list[str] = []
    i = 0

    def bad(what: str) -> ArtifactError:
        return ArtifactError(display, f"line {i + 1}: {what}")

    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            m = re.fullmatch(r"diff --git a/(\S+) b/(\S+)", line)
            if m is None or m.group(1) != m.group(2) or m.group(1) not in allowed_set:
                raise bad(
                    f"a 'diff --git' header for a file that is not one of this target's kernel files: {line[:200]!r}"
                )
            i += 1
            continue
        if line.startswith("index "):
            if not re.fullmatch(r"index [0-9a-f]{7,64}\.\.[0-9a-f]{7,64}( 100644)?", line):
                raise bad("an 'index' line with a file mode; mode changes are not accepted")
            i += 1
            continue
        for word, why in (("new file mode", "creates a file"), ("deleted file mode", "deletes a file"),
                          ("old mode", "changes a file mode"), ("new mode", "changes a file mode"),
                          ("rename ", "renames a file"), ("copy ", "copies a file"),
                          ("similarity index", "renames or copies a file"),
                          ("dissimilarity index", "rewrites a file"),
                          ("GIT binary patch", "is a binary patch"), ("Binary files", "is a binary patch")):
            if line.startswith(word):
                raise bad(f"{why}; only modifications of the target's kernel files are accepted")
        if not line.startswith("--- "):
            raise bad(f"expected a '--- a/PATH' file header, got {line[:80]!r}")
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise bad("a '--- ' header without its '+++ ' line")
        old, new = line[4:].split("\t", 1)[0], lines[i + 1][4:].split("\t", 1)[0]
        if old == "/dev/null" or new == "/dev/null":
            raise bad(
                "creates or deletes a file; only modifications of the target's kernel files are accepted"
            )
        if not (old.startswith("a/") and new.startswith("b/")):
            raise bad(
                f"file paths must be 'a/PATH' and 'b/PATH', got {old[:80]!r} and {new[:80]!r}"
            )
        old, new = old[2:], new[2:]
        for p in (old, new):
            if not _safe_path(p):
                raise bad(
                    f"{p[:200]!r} is not a plain repository path (absolute, '..', '.git' or '.github')"
                )
        if old != new:
            raise bad(f"renames {old!r} to {new!r}; only modifications are accepted")
        if old not in allowed_set:
            raise bad(f"touches {old!r}, which is not one of this target's kernel files "
                      f"({', '.join(sorted(allowed_set)) or 'none'})")
        if old in files:
            raise bad(f"{old!r} appears twice")
        files.append(old)
        i += 2
        hunks = 0
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.fullmatch(lines[i])
            if m is None:
                raise bad(f"malformed hunk header {lines[i][:80]!r}")
            o_start, n_start = int(m.group(1)), int(m.group(3))
            o_len = 1 if m.group(2) is None else int(m.group(2))
            n_len = 1 if m.group(4) is None else int(m.group(4))
            if (o_start == 0 and o_len == 0) or (n_start == 0 and n_len == 0):
                raise bad("a hunk that creates or empties a file; only modifications are accepted")
            i += 1
            while o_len > 0 or n_len > 0:
                if i >= len(lines):
                    raise bad("the patch ends inside a hunk")
                body = lines[i]
                tag = body[:1]
                if tag == " ":
                    o_len, n_len = o_len - 1, n_len - 1
                elif tag == "-":
                    o_len -= 1
                elif tag == "+":
                    n_len -= 1
                elif body.startswith("\\ "):
                    pass
                elif body == "":
                    raise bad("an empty line inside a hunk")
                else:
                    raise bad(f"unexpected line inside a hunk: {body[:80]!r}")
                if o_len < 0 or n_len < 0:
                    raise bad("a hunk longer than its header says")
                i += 1
            while i < len(lines) and lines[i].startswith("\\ "):
                i += 1
            hunks += 1
        if hunks == 0:
            raise bad(f"no hunks for {old!r}")
    return tuple(files)


def load_results(dir: Path, *, allowed_files: Mapping[str, Sequence[str]]) -> Results:
    """Read and validate a results directory written by ``kernelpro optimize``.

    ``allowed_files`` maps each target name of the trusted (base-branch) configuration to the
    repository-relative kernel files that target may change. Raises :class:`ArtifactError` on any
    violation; the message names the file and what was wrong.
    """
    dir = Path(dir)
    summary = dir / "summary.json"
    if os.path.lexists(summary):
        r, top_data = Reader(), _json(summary, "summary.json")
        try:
            top = r.obj(top_data, "(top level)")
            items = r.lst(r.get(top, "targets", "(top level)"), "targets", MAX_TARGETS)
            config_note = r.opt_text(top.get("config"), "config", 1000)
        except SchemaError as e:
            raise ArtifactError("summary.json", str(e)) from None
        parsed = [_target("summary.json", x, f"targets[{i}]", allowed_files) for i, x in enumerate(items)]
    else:
        try:
            subdirs = sorted(p for p in dir.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError as e:
            raise ArtifactError(str(dir), f"cannot be read ({e.strerror})") from None
        if len(subdirs) > MAX_TARGETS:
            raise ArtifactError(str(dir), f"more than {MAX_TARGETS} target directories")
        parsed, config_note = [], ""
        for sub in subdirs:
            file = f"{sub.name}/result.json"
            parsed.append(_target(file, _json(sub / "result.json", file), "(top level)", allowed_files))
        if not parsed:
            raise ArtifactError("summary.json", "missing, and no DIR/<target>/result.json either")
    seen: set[str] = set()
    out: list[TargetResults] = []
    # Not from_json of the subclass: patch and patch_files never come from result.json.
    wire = [f.name for f in fields(TargetResult)]
    for t in parsed:
        if t.name in seen:
            raise ArtifactError("summary.json", f"target {t.name!r} appears twice")
        seen.add(t.name)
        display = f"{t.name}/patch.diff"
        p = dir / t.name / "patch.diff"
        patch = _text(_read(p, MAX_PATCH_BYTES, display), display) if os.path.lexists(p) else ""
        files = check_patch(patch, allowed_files[t.name], display) if patch else ()
        if t.winner is not None and not patch:
            raise ArtifactError(display, f"empty or missing, but {t.name!r} has a verified winner")
        if t.winner is None and patch:
            raise ArtifactError(display, f"not empty, but {t.name!r} has no verified winner")
        out.append(TargetResults(**{k: getattr(t, k) for k in wire}, patch=patch, patch_files=files))
    return Results(targets=tuple(out), config_note=config_note)


# --------------------------------------------------------------------------- zip archives

MAX_ZIP_BYTES = 256 * 1024 * 1024
"""A downloaded artifact archive larger than this is refused."""
MAX_ZIP_MEMBERS = 20_000
"""An archive with more entries than this is refused."""
_MEMBER = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9._-]{0,99}/)?(?:summary\.json|result\.json|patch\.diff|report\.md)")
_LIMITS = {"summary.json": MAX_SUMMARY_BYTES, "result.json": MAX_SUMMARY_BYTES,
           "patch.diff": MAX_PATCH_BYTES, "report.md": MAX_REPORT_BYTES}


def extract_results(data: bytes, dest: Path, *, display: str = "artifact.zip") -> Path:
    """Unpack the files :func:`load_results` reads from an artifact's zip archive into ``dest``.

    The archive is untrusted: only ``summary.json`` and ``<target>/{result.json,patch.diff,
    report.md}`` are extracted (everything else, e.g. traces and journals, is skipped unread),
    each through a bounded read whatever size its header claims; absolute or ``..`` names,
    symbolic links, duplicate names, encrypted entries and oversized archives are refused.
    Returns ``dest``; pass it to :func:`load_results`.
    """
    import io
    import zipfile

    if len(data) > MAX_ZIP_BYTES:
        raise ArtifactError(display, f"{len(data)} bytes, more than the limit of {MAX_ZIP_BYTES}")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as e:
        raise ArtifactError(display, f"not a readable zip archive ({e})") from None
    if len(infos) > MAX_ZIP_MEMBERS:
        raise ArtifactError(display, f"{len(infos)} entries, more than the limit of {MAX_ZIP_MEMBERS}")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    for info in infos:
        name = info.filename
        if info.is_dir() or not _MEMBER.fullmatch(name):
            if not _safe_path(name.rstrip("/")):
                raise ArtifactError(display, f"entry {name[:200]!r} is not a plain relative path")
            continue
        if name in seen:
            raise ArtifactError(display, f"entry {name!r} appears twice")
        seen.add(name)
        if stat.S_ISLNK(info.external_attr >> 16):
            raise ArtifactError(display, f"entry {name!r} is a symbolic link")
        if info.flag_bits & 0x1:
            raise ArtifactError(display, f"entry {name!r} is encrypted")
        limit = _LIMITS[name.rsplit("/", 1)[-1]]
        try:
            with archive.open(info) as f:
                body = f.read(limit + 1)
        except (zipfile.BadZipFile, NotImplementedError, ValueError, EOFError, OSError) as e:
            raise ArtifactError(display, f"entry {name!r} cannot be read ({e})") from None
        if len(body) > limit:
            raise ArtifactError(display, f"entry {name!r} is more than the limit of {limit} bytes")
        out = dest / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(body)
    return dest
