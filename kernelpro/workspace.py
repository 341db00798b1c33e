"""Detached checkouts of the base and head of a change, as git worktrees in a temporary folder.

Reading the kernel and its configuration from the refs themselves (not the caller's working tree)
means a dirty or differently checked-out repository cannot change what is optimized.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import git


class WorkspaceError(ValueError):
    """A ref or repository cannot be checked out; the message says how to fix it."""


@dataclass(frozen=True)
class Checkouts:
    """Both sides of a change."""

    base: Path
    """The base ref, checked out."""
    head: Path
    """The head ref, checked out."""
    base_sha: str
    """Commit of the base."""
    head_sha: str
    """Commit of the head."""


def _resolve(repo: git.Repo, ref: str) -> str:
    try:
        return repo.commit(ref).hexsha
    except (git.BadName, ValueError, git.GitCommandError):
        raise WorkspaceError(
            f"unknown ref {ref!r} in {repo.working_dir}: fetch it first (git fetch origin {ref}) or pass a commit SHA"
        ) from None


@contextlib.contextmanager
def checkouts(repo_path: Path, base: str, head: str) -> Iterator[Checkouts]:
    try:
        repo = git.Repo(repo_path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise WorkspaceError(f"{repo_path} is not a git repository: pass --repo the root of a clone") from None
    base_sha, head_sha = _resolve(repo, base), _resolve(repo, head)
    with tempfile.TemporaryDirectory(prefix="kernelpro-wt-") as tmp:
        paths = {"base": Path(tmp) / "base", "head": Path(tmp) / "head"}
        try:
            for side, sha in (("base", base_sha), ("head", head_sha)):
                repo.git.worktree("add", "--detach", "--quiet", str(paths[side]), sha)
            yield Checkouts(paths["base"], paths["head"], base_sha, head_sha)
        finally:
            for p in paths.values():
                if p.exists():
                    repo.git.worktree("remove", "--force", str(p))
            repo.git.worktree("prune")
