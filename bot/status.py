"""kernelpro's verdict as a commit status on the pull request's head (context ``kernelpro``), so the
PR's checks list and branch protection show it: pending while a run optimizes, then success with
the verdict and a link to the follow-up PR (or the run), or error when publishing failed, when no
optimize job uploaded results (bot/followup.py) or when ``/kernelpro cancel`` stopped the run
(bot/plan.py): it never stays pending, which would block a required check.

A status is a courtesy next to the sticky comment: a GitHub error is returned as a reason (and
logged by the caller), never raised, so it cannot fail a run whose work is done.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from github import GithubException

from .artifact import Results

__all__ = ["CONTEXT", "set_status", "verdict"]

CONTEXT = "kernelpro"
"""The status context: what branch protection names to require it."""
_LIMIT = 140
"""GitHub cuts a status description at 140 characters."""


def verdict(results: Results, pr_url: str | None, model_written: Sequence[str] = ()) -> str:
    """One line for the status: the verified speedups (never from a non-GPU run) or why not; a patch a
    model wrote says so first, as the PR's checks list is where many maintainers read it (issue 20)."""
    winners = [t for t in results.winners if t.winner is not None]
    gpu = [t for t in winners if t.gpu_timings]
    if gpu:
        parts = [f"{t.name} {t.winner.speedup:.2f}x" for t in gpu if t.winner is not None]
        text = "faster, verified: " + ", ".join(parts)
    elif winners:
        text = "verified candidates (CPU interpreter: no GPU timing)"
    else:
        text = "the baseline stands: no verified improvement"
    if pr_url and (m := re.search(r"/pull/([0-9]+)$", pr_url)):
        text += f"; follow-up #{m.group(1)}"
    if model_written:
        text = "model-written code, review it: " + text
    return text if len(text) <= _LIMIT else text[: _LIMIT - 1] + "…"


def set_status(repo: Any, sha: str, state: Literal["pending", "success", "failure", "error"],
               description: str, target_url: str | None) -> str | None:
    """Set the ``kernelpro`` status of commit ``sha``; None when done, else why it was not."""
    if not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", sha or ""):
        return f"not a full commit SHA: {sha[:80]!r}"
    body: dict[str, Any] = {"state": state, "context": CONTEXT, "description": description[:_LIMIT]}
    if target_url and re.fullmatch(r"https?://\S{1,500}", target_url):
        body["target_url"] = target_url
    try:
        repo._requester.requestJsonAndCheck("POST", f"{repo.url}/statuses/{sha}", input=body)
    except GithubException as e:
        hint = " (the job needs `statuses: write`)" if e.status in (403, 404) else ""
        return f"GitHub answered {e.status}{hint}"
    return None
