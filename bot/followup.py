"""The publish job (write token; no PR code runs): the optimize jobs' results as a follow-up pull
request, a comment, or a stated reason, and the final state of the sticky comment and the commit
status.

The results are untrusted data (the optimize jobs ran the pull request's code): which files each
target may patch, and the raw CUDA launch its knobs are read with, come from the trusted base
branch's configuration through the caller's ``limits`` (kernelpro/action.py reads it with the
runner's loader: bot/ never imports runner/); who wrote the candidates comes from the workflow's
settings, never from the artifact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from github import GithubException

from kernelpro.settings import Settings
from kernelpro.workspace import checkouts

from .artifact import Results, load_results
from .body import render_job_summary, render_summary_comment
from .comment import CommentError, StickyComment, progress_body
from .event import Trigger
from .job import ActionError, explain, fetch_pr, status, summary
from .publish import Launch, publish
from .status import verdict

__all__ = ["Limits", "publish_results"]

BOT_EMAIL = "41898282+github-actions[bot]@users.noreply.github.com"
"""The commit e-mail of github-actions[bot]."""


@dataclass(frozen=True)
class Limits:
    """What the trusted base-branch configuration allows the results to change."""

    files: Mapping[str, Sequence[str]]
    """Target name -> the kernel files its patch may touch."""
    launches: Mapping[str, Launch]
    """Target name -> its raw CUDA kernel and block, to recompute a tuner patch (CUDA targets only)."""


def _results_dirs(root: Path) -> list[Path]:
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
    head_sha = head_sha or trigger.head_sha or pr.head.sha
    fetch_pr(checkout, trigger.pr, head_sha, settings.github_token, (pr.base.ref, pr.base.sha))
    # The allowed files, and the raw CUDA launch each target's knobs are read with (so publish can
    # recompute tuner patches), come from the trusted base-branch configuration, never from the artifacts.
    with checkouts(checkout, pr.base.sha, head_sha) as co:
        allowed = limits(co.base)
    parts = [load_results(d, allowed_files=allowed.files) for d in _results_dirs(results_root)]
    if not parts:
        raise ActionError(
            f"no results under {results_root}: did the optimize jobs upload their artifacts?"
        )
    results = Results(tuple(t for p in parts for t in p.targets), parts[0].config_note)
    is_fork = pr.head.repo is None or pr.head.repo.full_name.lower() != trigger.repo.lower()
    if push_url is None:
        server = settings.github_server_url.split("://", 1)
        push_url = (
            f"{server[0]}://x-access-token:{settings.github_token}@{server[1]}/{trigger.repo}.git"
        )
    sticky = StickyComment(repo, trigger.pr, bot_login=settings.bot_login)
    ack = repo.get_issue(trigger.pr).get_comment(trigger.comment_id) if trigger.comment_id else None
    try:
        published = publish(repo, pr_number=trigger.pr, results=results, checkout=checkout, push_url=push_url,
                            bot_name=settings.bot_login, bot_email=BOT_EMAIL,
                            base_branch_of_pr=pr.base.ref, pr_head_branch=pr.head.ref, pr_head_sha=head_sha,
                            is_fork=is_fork, allowed_files=allowed.files, launches=allowed.launches, sticky=sticky,
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
    status(repo, head_sha, "success", verdict(results, published.pr_url),
            published.pr_url or settings.run_url or None)
    if published.action != "comment-only":  # comment-only outcomes were posted by publish()
        # The model label (when a model wrote a patch) leads the sticky comment too.
        done = render_summary_comment(results, pr_number=trigger.pr, head_sha=head_sha, base_sha=pr.base.sha,
                                      pr_url=published.pr_url, reason=published.reason,
                                      run_url=settings.run_url or None, model_written=published.model_written)
        try:
            sticky.update(done, force=True)
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
