"""The publish job (write token; no PR code runs): the optimize jobs' results as a follow-up pull
request, a comment, or a stated reason, and the final state of the sticky comment and the commit
status.

The results are untrusted data (the optimize jobs ran the pull request's code): which files each
target may patch, and the raw CUDA launch its knobs are read with, come from the trusted base
branch's configuration through the caller's ``limits`` (kernelpro/action.py reads it with the
runner's loader: bot/ never imports runner/); who wrote the candidates comes from the workflow's
settings, never from the artifact. Which targets to expect comes from the plan job (its ``targets``
output, ``Settings.plan_targets``): a target whose optimize job failed uploaded nothing, and the
final comment still has its row; when no job uploaded anything, the comment and the commit status
say so instead of staying queued and pending.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from github import GithubException

from kernelpro.settings import Settings
from kernelpro.workspace import checkouts

from .artifact import Results, load_results
from .body import _safe_url, md, render_comment, render_job_summary, render_summary_comment
from .comment import CANCELLED_MARKER, CommentError, StickyComment, last_line, progress_body
from .event import Trigger
from .job import ActionError, explain, fetch_pr, react, status, summary
from .publish import Launch, publish
from .status import verdict

__all__ = ["Limits", "publish_results"]

BOT_EMAIL = "41898282+github-actions[bot]@users.noreply.github.com"
"""The commit e-mail of github-actions[bot]."""
NO_RESULTS = "no optimize job uploaded results"
NO_RESULTS_WHY = (f"{NO_RESULTS}: every optimize job failed or the run was cancelled. Fix what their logs say, then "
                  "comment /kernelpro retry or add the label again")
"""Why publish stops when there is nothing to publish (the comment and the commit status say it)."""
_RETRY_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
"""A target name that `/kernelpro retry --kernel` takes and a code span shows as it is."""


@dataclass(frozen=True)
class Limits:
    """What the trusted base-branch configuration allows the results to change."""

    files: Mapping[str, Sequence[str]]
    """Target name -> the kernel files its patch may touch."""
    launches: Mapping[str, Launch]
    """Target name -> its raw CUDA kernel and block, to recompute a tuner patch (CUDA targets only)."""


def _results_dirs(root: Path) -> list[Path]:
    if not root.is_dir():  # actions/download-artifact found no artifact to download
        return []
    if (root / "summary.json").exists():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "summary.json").exists())


def publish_results(settings: Settings, checkout: Path, results_root: Path, gh: Any, trigger: Trigger,
                    limits: Callable[[Path], Limits], push_url: str | None = None,
                    head_sha: str | None = None) -> str:
    """Publish the optimize results for ``trigger`` (a kernelpro trigger). ``limits``: what the base
    branch's configuration (its folder) allows. ``head_sha``: the commit plan approved and optimize
    ran on (the plan job's output); the follow-up commit is built on it even if the PR moved on since."""
    repo = gh.get_repo(trigger.repo)
    pr = repo.get_pull(trigger.pr)
    head_sha = head_sha or trigger.head_sha
    if not head_sha:
        # Never the PR's head now: after a `/kernelpro retry` it may hold commits nobody approved (issue 20).
        raise ActionError("publish needs the commit plan approved and optimize ran on: pass the plan job's "
                          "`head_sha` output as the action's `head` input (examples/workflows/kernelpro.yml does)")
    sticky = StickyComment(repo, trigger.pr, bot_login=settings.bot_login)
    ack = repo.get_issue(trigger.pr).get_comment(trigger.comment_id) if trigger.comment_id else None
    if settings.optimize_result == "cancelled":
        # The workflow's publish job runs after a cancel too (`if: always()`, so that failed runs are
        # said): what finished before the cancel is not published, and a comment the cancel wrote stays.
        return _cancelled_run(settings, repo, sticky, head_sha)
    dirs = _results_dirs(results_root)
    if not dirs:
        raise _nothing_to_publish(settings, repo, sticky, ack, head_sha)
    fetch_pr(checkout, trigger.pr, head_sha, settings.github_token, (pr.base.ref, pr.base.sha))
    # The allowed files, and the raw CUDA launch each target's knobs are read with (so publish can
    # recompute tuner patches), come from the trusted base-branch configuration, never from the artifacts.
    with checkouts(checkout, pr.base.sha, head_sha) as co:
        allowed = limits(co.base)
    parts = [load_results(d, allowed_files=allowed.files) for d in dirs]
    results = Results(tuple(t for p in parts for t in p.targets), parts[0].config_note)
    # A target whose optimize job failed uploaded nothing: only plan's list still knows it.
    missing = [t for t in settings.plan_targets if t not in {r.name for r in results.targets}]
    is_fork = pr.head.repo is None or pr.head.repo.full_name.lower() != trigger.repo.lower()
    if push_url is None:
        server = settings.github_server_url.split("://", 1)
        push_url = (
            f"{server[0]}://x-access-token:{settings.github_token}@{server[1]}/{trigger.repo}.git"
        )
    try:
        # No sticky: a comment-only outcome's text comes back (published.comment) and is posted
        # below with the rows of the targets that have no results, like every other final state.
        published = publish(repo, pr_number=trigger.pr, results=results, checkout=checkout, push_url=push_url,
                            bot_name=settings.bot_login, bot_email=BOT_EMAIL,
                            base_branch_of_pr=pr.base.ref, pr_head_branch=pr.head.ref, pr_head_sha=head_sha,
                            is_fork=is_fork, allowed_files=allowed.files, launches=allowed.launches, sticky=None,
                            run_url=settings.run_url or None,
                            # Who wrote the candidates, from the workflow's configuration (never the
                            # artifact): anything but llm makes publish refuse a patch it cannot recompute.
                            programmer=settings.programmer,
                            retry=trigger.kind == "retry", base_sha=pr.base.sha,
                            # Triage of the follow-up PR, from the workflow (action inputs pr-labels, pr-reviewers).
                            labels=settings.pr_labels, reviewers=settings.pr_reviewers)
    except Exception as e:
        # Say it where the maintainer looks; the artifact still holds everything, so a rerun publishes.
        why = explain(e, "publishing") if isinstance(e, GithubException) else f"publishing failed: {e}"
        try:
            sticky.update(progress_body("failed", kernel_i=0, kernels=len(results.targets), evaluations=0,
                                        best_speedup=None, reason=f"{why}. Rerun the publish job: the results are "
                                        "kept in the workflow's artifacts"), force=True)
            if ack is not None:
                ack.create_reaction("confused")
        except (GithubException, CommentError) as e2:
            print(f"::warning title=kernelpro::could not write the failure to the sticky comment: {e2}")
        status(repo, head_sha, "error", "publishing failed; see the kernelpro comment", settings.run_url or None)
        raise ActionError(why) from e
    summary(settings, render_job_summary(results, published.model_written))
    for w in published.warnings:
        print(f"::warning title=kernelpro::the follow-up pull request has no {w}")
    status(repo, head_sha, "success", verdict(results, published.pr_url, published.model_written),
            published.pr_url or settings.run_url or None)
    if published.action == "comment-only" and published.comment is not None:
        done = published.comment
    else:  # the model label (when a model wrote a patch) leads the sticky comment too
        done = render_summary_comment(results, pr_number=trigger.pr, head_sha=head_sha, base_sha=pr.base.sha,
                                      pr_url=published.pr_url, reason=published.reason,
                                      run_url=settings.run_url or None, model_written=published.model_written)
    try:
        sticky.update(with_missing(done, missing, settings.run_url or None), force=True)
    except CommentError as e:
        why = f"{published.action} {published.pr_url or published.reason}, but the progress comment could not say so: {e}"
        with contextlib.suppress(CommentError):  # a second try often gets through a transient error
            sticky.update(progress_body("failed", kernel_i=len(results.targets), kernels=len(results.targets),
                                        evaluations=0, best_speedup=None, reason=why), force=True)
        raise ActionError(why) from e
    if ack is not None:
        try:  # only an acknowledgement: the work is published, so this must not fail the job
            ack.create_reaction("+1")
        except GithubException as e:
            print(f"::warning title=kernelpro::{explain(e, 'the +1 reaction on the retry comment')}")
    return f"{published.action}: {published.pr_url or published.reason}"


def _nothing_to_publish(settings: Settings, repo: Any, sticky: StickyComment, ack: Any, head_sha: str) -> ActionError:
    """No optimize job uploaded results (each failed, or the run was cancelled): the comment's
    queued or live state and the pending status must not outlive the run (a required check would
    wait forever), so both say so; returns the error that fails the job."""
    why = NO_RESULTS_WHY
    body = stopped_body(why, len(settings.plan_targets), settings.run_url)
    try:
        sticky.update(body, force=True)
    except CommentError as e:
        print(f"::warning title=kernelpro::could not write the failure to the sticky comment: {e}")
    if ack is not None:
        react(ack, "confused")
    status(repo, head_sha, "error", f"{NO_RESULTS}; see the kernelpro comment", settings.run_url or None)
    return ActionError(f"{why} (the results folder holds no kernelpro-result-* artifact)")


CANCELLED = "the run was cancelled before its optimize jobs finished: nothing is published"
CANCELLED_WHY = f"{CANCELLED}. Comment /kernelpro retry or add the label again to start again"


def stopped_body(why: str, kernels: int, run_url: str) -> str:
    """The final comment of a run that published nothing (no results, or cancelled): ``why`` and the run's link."""
    return render_comment("failed", n=kernels, i=0, evaluations=0, reason=md(why, 500), run_url=_safe_url(run_url))


def _cancelled_run(settings: Settings, repo: Any, sticky: StickyComment, head_sha: str) -> str:
    """The run was cancelled (``/kernelpro cancel`` or the Actions tab): no follow-up pull request from
    whatever finished before; the comment and the commit status end its queued or live state. A
    comment that already says who cancelled it (bot/plan.py) is kept."""
    body = stopped_body(CANCELLED_WHY, len(settings.plan_targets), settings.run_url)
    try:
        said = sticky.current_body() or ""
        if last_line(said) != CANCELLED_MARKER:  # bot/plan.py's marker, in the one place the bot writes it
            sticky.update(body, force=True)
    except CommentError as e:
        print(f"::warning title=kernelpro::could not write the cancel to the sticky comment: {e}")
    status(repo, head_sha, "error", f"{CANCELLED}; comment /kernelpro retry to start again", settings.run_url or None)
    return f"cancelled: {CANCELLED}"


def with_missing(text: str, names: Sequence[str], run_url: str | None) -> str:
    """The final comment ``text`` with a row per target in ``names`` (planned, no results): in its
    summary table, so every kernel is in one table, or in a table of their own when it has none."""
    if not names:
        return text
    kernels = [{"name": f"`{n}`" if _RETRY_NAME.fullmatch(n) else md(n, 100),
                "retry": n if _RETRY_NAME.fullmatch(n) else ""} for n in names]
    lines = text.split("\n")
    top = next((i for i, line in enumerate(lines) if line.startswith("| kernel |")), None)
    if top is None:
        rows = render_comment("missing", kernels=kernels, columns=2, header=True, run_url=_safe_url(run_url))
        return text.rstrip("\n") + "\n\n" + rows
    end = top
    while end + 1 < len(lines) and lines[end + 1].startswith("|"):
        end += 1
    rows = render_comment("missing", kernels=kernels, columns=lines[top].count("|") - 1, header=False,
                          run_url=_safe_url(run_url))
    return "\n".join([*lines[: end + 1], *rows.rstrip("\n").split("\n"), *lines[end + 1:]])
