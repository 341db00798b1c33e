"""Who may ask for a retry: users with write access, as the GitHub API reports it.

The check is ``GET /repos/{owner}/{repo}/collaborators/{username}/permission``. Its ``permission``
field holds the legacy base role (``admin``, ``write``, ``read``, ``none``; GitHub maps ``maintain``
to ``write`` and ``triage`` to ``read``); ``maintain`` is also accepted as written, for servers that
report it. ``author_association`` from the event payload is never used: it describes the
relationship to the repository's owner, not access, and it is not checked against the API.
"""

from __future__ import annotations

from github import GithubException
from github.Repository import Repository

__all__ = ["RETRY_PERMISSIONS", "can_retry", "permission_of"]

RETRY_PERMISSIONS = frozenset({"admin", "maintain", "write"})
"""Base permissions whose holders may run ``/kernelpro retry``."""


def permission_of(gh_repo: Repository, login: str) -> str:
    """``login``'s base permission on ``gh_repo``; ``'none'`` for a user GitHub does not know there.

    Errors other than 404 (403, rate limits, 5xx) propagate: the caller reports them, nothing runs.
    """
    if not login:
        return "none"
    try:
        permission = gh_repo.get_collaborator_permission(login)
    except GithubException as exc:
        if exc.status == 404:
            return "none"
        raise
    return permission if isinstance(permission, str) else "none"


def can_retry(gh_repo: Repository, login: str) -> bool:
    """Whether ``login`` may trigger a retry on ``gh_repo`` (write, maintain or admin)."""
    return permission_of(gh_repo, login) in RETRY_PERMISSIONS
