"""One sticky progress comment per pull request, and reactions to ``/kernelpro retry``.

The bot keeps a single comment on each pull request and edits it as the run progresses
(queued -> kernel i/n -> done). The comment is found again by a hidden HTML marker on its first
line, through a paginated lookup of the PR's issue comments (PyGithub's ``PaginatedList``), so a
rerun, a retry or the same event delivered twice all edit the same comment instead of adding one.
Only comments written by the bot's own account count: anybody can paste the marker into a comment
of their own, and the bot could not edit it anyway.

Updates are rate-limited: a non-forced update within ``min_interval_s`` of the last write is
skipped (progress is cosmetic; the final state is always written with ``force=True``). An update
whose text is what the comment already shows makes no request.

Every string that came from the optimize job (reasons, names) is escaped with
:func:`kernelpro.bot.body.md` before it reaches Markdown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from github import GithubException
from github.Issue import Issue
from github.IssueComment import IssueComment
from github.Repository import Repository

from .body import CANCELLED_MARKER, _safe_url, fit, last_line, md, render_comment

__all__ = [
    "CANCELLED_MARKER",
    "DEFAULT_MARKER",
    "REACTIONS",
    "STATES",
    "CommentError",
    "StickyComment",
    "last_line",
    "progress_body",
]

DEFAULT_MARKER = "<!-- kernelpro:progress -->"
"""The hidden first line that identifies the sticky comment."""
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
"""Reaction contents GitHub accepts."""
STATES = ("queued", "running", "done", "failed")
"""Progress states :func:`progress_body` renders."""
class CommentError(RuntimeError):
    """The progress comment could not be read or written; the message says what and why."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _describe(exc: GithubException) -> str:
    msg = exc.data.get("message") if isinstance(exc.data, dict) else None
    return f"GitHub answered {exc.status}" + (f" ({md(msg, 200)})" if msg else "")


class StickyComment:
    """The bot's one progress comment on pull request ``pr_number`` of ``repo``."""

    def __init__(
        self,
        repo: Repository,
        pr_number: int,
        *,
        marker: str = DEFAULT_MARKER,
        min_interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        bot_login: str | None = "github-actions[bot]",
    ) -> None:
        """``bot_login``: the account the bot writes as; only its comments are candidates
        (None: any author, for tokens whose login is unknown)."""
        if not marker.startswith("<!--") or not marker.endswith("-->") or "\n" in marker:
            raise ValueError("marker must be one HTML comment on one line")
        self.repo = repo
        self.pr_number = int(pr_number)
        self.marker = marker
        self.min_interval_s = float(min_interval_s)
        self.clock = clock
        self.bot_login = bot_login
        self.comment_id: int | None = None
        """Id of the sticky comment once found or created."""
        self._last_write: float | None = None
        self._last_body: str | None = None
        self._issue_obj: Issue | None = None

    # ------------------------------------------------------------------ lookup

    def _is_ours(self, c: IssueComment) -> bool:
        body = c.body or ""
        if body.split("\n", 1)[0].strip() != self.marker:
            return False
        if self.bot_login is None:
            return True
        login = c.user.login if c.user is not None else ""
        return login.lower() == self.bot_login.lower()

    def find(self) -> IssueComment | None:
        """The existing sticky comment (the oldest, should there be several), or None.

        Walks every page of the PR's comments. Raises :class:`CommentError` on a GitHub error.
        """
        issue = self._issue()
        try:
            for c in issue.get_comments():
                if self._is_ours(c):
                    self.comment_id = c.id
                    return c
        except GithubException as exc:
            raise CommentError(
                f"could not list the comments of #{self.pr_number}: {_describe(exc)}", exc.status
            ) from exc
        return None

    def current_body(self) -> str | None:
        """The sticky comment's text as GitHub has it now; None when there is none."""
        if self.comment_id is not None:
            try:
                return self._issue().get_comment(self.comment_id).body
            except GithubException as exc:
                if exc.status != 404:
                    raise CommentError(
                        f"could not read the progress comment on #{self.pr_number}: {_describe(exc)}",
                        exc.status,
                    ) from exc
                self.comment_id = None
        found = self.find()
        return found.body if found is not None else None

    # ------------------------------------------------------------------ writes

    def text(self, body: str) -> str:
        """The full comment text for ``body``: the marker first, within GitHub's limit."""
        if body.split("\n", 1)[0].strip() == self.marker:
            body = body.split("\n", 1)[1] if "\n" in body else ""
        return fit(f"{self.marker}\n{body}")

    def update(self, body: str, *, force: bool = False) -> bool:
        """Show ``body`` in the sticky comment, editing it in place or creating it once.

        Returns True when a write was made; False when skipped (a non-forced update within
        ``min_interval_s`` of the last write, or nothing changed). Raises :class:`CommentError`
        when GitHub refuses; nothing is half-written, so calling again is safe.
        """
        now = self.clock()
        text = self.text(body)
        if text == self._last_body:
            return False
        if (
            not force
            and self._last_write is not None
            and now - self._last_write < self.min_interval_s
        ):
            return False
        self._write(text)
        self._last_write = now
        self._last_body = text
        return True

    def _issue(self) -> Issue:
        if self._issue_obj is None:
            try:
                self._issue_obj = self.repo.get_issue(self.pr_number)
            except GithubException as exc:
                raise CommentError(
                    f"could not read #{self.pr_number}: {_describe(exc)}", exc.status
                ) from exc
        return self._issue_obj

    def _write(self, text: str) -> None:
        if self.comment_id is not None:
            try:
                self._issue().get_comment(self.comment_id).edit(text)
                return
            except GithubException as exc:
                if exc.status != 404:  # 404: deleted by someone; look again, or recreate
                    raise self._error("edit", exc) from exc
                self.comment_id = None
        existing = self.find()
        try:
            if existing is not None:
                if existing.body != text:
                    existing.edit(text)
                return
            self.comment_id = self._issue().create_comment(text).id
        except GithubException as exc:
            raise self._error("edit" if existing is not None else "create", exc) from exc

    def _error(self, what: str, exc: GithubException) -> CommentError:
        return CommentError(
            f"could not {what} the progress comment on #{self.pr_number}: {_describe(exc)}; "
            "a rerun of this step finds and updates the same comment",
            exc.status,
        )

    def react(self, comment_id: int, content: str) -> bool:
        """Add reaction ``content`` (eyes, +1, confused, ...) to comment ``comment_id``.

        Reactions only acknowledge a command: a GitHub error is reported as False, not raised.
        """
        if content not in REACTIONS:
            raise ValueError(f"unknown reaction {content!r}; one of {sorted(REACTIONS)}")
        try:
            self._issue().get_comment(int(comment_id)).create_reaction(content)
        except (GithubException, CommentError):
            return False
        return True


# --------------------------------------------------------------------------- progress text


def _speedup(x: float | None) -> str:
    return "none verified yet" if x is None or x <= 0 else f"{x:.2f}x"


def progress_body(
    state: Literal["queued", "running", "done", "failed"] | str,
    *,
    kernel_i: int,
    kernels: int,
    evaluations: int,
    best_speedup: float | None,
    pr_url: str | None = None,
    reason: str | None = None,
    reason_md: str | None = None,
) -> str:
    """The progress comment's Markdown (without the marker: :meth:`StickyComment.update` adds it).

    ``queued``: waiting for a GPU runner; ``running``: kernel ``kernel_i``/``kernels``, evaluations
    so far and the best verified speedup; ``done``: a link to the follow-up PR (``pr_url``) or the
    reason there is none; ``failed``: the reason the run stopped. ``reason`` is untrusted text and
    is escaped; ``pr_url`` must be a plain http(s) URL or it is left out.
    """
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}; one of {STATES}")
    n = max(int(kernels), 0)
    i = min(max(int(kernel_i), 0), n)
    evals = max(int(evaluations), 0)
    why = reason_md or (md(reason, 500) if reason else ("no verified improvement" if state == "done"
                                                        else "an unexpected error"))
    why = why.rstrip().rstrip(".")  # the template ends the sentence
    return render_comment(str(state), n=n, i=i, evaluations=evals, best=_speedup(best_speedup),
                          pr_url=_safe_url(pr_url), reason=why)
