"""The plan job (trusted; no PR code runs): whether the optimize jobs run, and on what.

It decides whether to run at all (a label bound to the head SHA it was given on; `/kernelpro retry`
only from writers, approving the head the writer looked at), resolves the targets from the **base**
branch's configuration, says so in the sticky comment and the commit status, and returns the
matrix. ``/kernelpro help|status|cancel`` are answered here and run nothing.

The configuration is read by the caller's ``configured`` (kernelpro/action.py reads it with the
runner's loader): bot/ never imports runner/.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from github import GithubException

from kernelpro.settings import Settings
from kernelpro.workspace import checkouts

from .body import code_block, md, render_comment
from .change import changed_files, changed_kernels, config_snippet
from .command import reply, reply_text
from .comment import CANCELLED_MARKER, CommentError, StickyComment, progress_body
from .event import Trigger
from .job import ActionError, explain, fetch_pr, react, say_done, say_failed, status
from .permission import can_retry
from .progress import live_marker

__all__ = ["Configured", "Plan", "plan", "retry_commit"]

NO_CONFIG = "no `.kernelpro.yml` on the base branch: nothing is configured."
"""The reason the plan says there is nothing to run, as the bot's own Markdown."""


@dataclass(frozen=True)
class Plan:
    """What the plan job decided."""

    run: bool
    """Whether the optimize jobs should run."""
    targets: tuple[str, ...]
    """Target names (the matrix)."""
    pr: int
    """The pull request."""
    head_sha: str
    """The approved head commit."""
    base_sha: str
    """The base commit."""
    budget: int | None
    """Evaluations per target from `/kernelpro retry --budget N`."""
    reason: str
    """Why it runs or why not, for the log and the comment."""
    files: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Target -> its kernel files, from the base branch's configuration (the progress job's
    trusted list of what each target's results may patch)."""
    markdown: str = ""
    """``reason`` as Markdown that is already escaped, when it holds code spans the job summary
    should show as code; '' when the summary escapes ``reason`` itself (it may hold commenter text)."""


@dataclass(frozen=True)
class Configured:
    """The base branch's configuration as it bears on one pull request, read by the caller."""

    known: tuple[str, ...] = ()
    """Every configured target's name (empty when the configuration could not be read)."""
    targets: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """The targets to optimize (the asked-for kernel, else those the change touched) -> their kernel files."""
    error: str = ""
    """Why the configuration, or the kernel asked for, cannot be used ('' when it can)."""
    faults: tuple[str, ...] = ()
    """Where the configuration does not match the pull request's code (read as text, nothing run)."""


Configure = Callable[[Path, Path, str | None, Sequence[str]], Configured]
"""(base branch folder, head folder, the kernel asked for or None, the changed files) -> Configured."""


def plan(settings: Settings, checkout: Path, gh: Any, trigger: Trigger, configured: Configure) -> Plan:
    """What the plan job decides for ``trigger`` (a kernelpro trigger), said on the pull request."""
    if trigger.kind == "label" and trigger.is_fork:
        return _fork_label(settings, gh, trigger)
    try:
        if trigger.kind in ("help", "status", "cancel", "invalid"):
            return _answer(settings, gh, trigger)
        return _plan(settings, checkout, gh, trigger, configured)
    except (GithubException, CommentError) as e:
        why = explain(e, "planning") if isinstance(e, GithubException) else f"planning failed: {e}"
        say_failed(gh, trigger.repo, trigger.pr, settings, why)
        raise ActionError(why) from e


def _answer(settings: Settings, gh: Any, trigger: Any) -> Plan:
    """``/kernelpro help|status|cancel`` and unusable commands: answered on the PR, nothing runs."""
    repo = gh.get_repo(trigger.repo)
    sticky = StickyComment(repo, trigger.pr, bot_login=settings.bot_login)
    body = sticky.current_body()
    may_write = trigger.kind != "cancel" or can_retry(repo, trigger.sender)
    answered = reply(repo, trigger, sticky_body=body, may_write=may_write, label=settings.label)
    if answered.cancelled is not None:
        _cancelled(settings, repo, sticky, trigger, answered.cancelled)
    if trigger.comment_id:
        react(repo.get_issue(trigger.pr).get_comment(trigger.comment_id),
              "confused" if trigger.kind == "invalid" or not may_write else "+1")
    done = answered.log
    return Plan(False, (), trigger.pr, "", "", None, done if trigger.kind != "invalid" else f"{done}: {trigger.error}")


def _cancelled(settings: Settings, repo: Any, sticky: StickyComment, trigger: Any, run: int) -> None:
    """After GitHub accepted ``/kernelpro cancel`` of ``run``: the comment and the commit status end
    the run's queued/live state, since a cancelled run may never reach publish (a required check
    would stay pending). The status goes on the PR's head, the commit the cancelled run was approved
    on unless the author pushed since (then the pending status is on a commit no longer checked)."""
    why = f"cancelled by {trigger.sender} (/kernelpro cancel); comment /kernelpro retry to start again"
    sticky.update(progress_body("failed", kernel_i=0, kernels=0, evaluations=0, best_speedup=None, reason=why)
                  + f"\n\n{CANCELLED_MARKER}", force=True)
    try:
        head = repo.get_pull(trigger.pr).head.sha
    except GithubException as e:  # the run is stopped and the comment says so: the status is a courtesy
        print(f"::warning title=kernelpro::{explain(e, 'reading the head to end its pending status')}")
        return
    status(repo, head, "error", why, f"{settings.github_server_url}/{trigger.repo}/actions/runs/{run}")


def _fork_label(settings: Settings, gh: Any, trigger: Any) -> Plan:
    """A label on a fork's pull request: GitHub gives this event a read-only token and no secrets,
    so nothing could be published; a maintainer's `/kernelpro retry` runs with this repository's
    token instead. Nothing runs; the comment is attempted (it succeeds only where the repository
    sends write tokens to fork workflows) and the reason is in the log and the job summary."""
    def why(fork: str) -> str:
        return (f"this pull request comes from a fork ({fork}): GitHub runs `pull_request` workflows "
                "of forks with a read-only token and no secrets, so kernelpro cannot comment or publish from "
                "this label. A maintainer can comment `/kernelpro retry` on the pull request instead: that "
                "runs with this repository's token, after a permission check.")

    reason = why(trigger.head_repo or "")
    try:
        StickyComment(gh.get_repo(trigger.repo), trigger.pr, bot_login=settings.bot_login).update(
            progress_body("done", kernel_i=0, kernels=0, evaluations=0, best_speedup=None, reason=reason),
            force=True)
    except (GithubException, CommentError) as e:
        print(f"::notice title=kernelpro::{reason} (the comment could not be written: {e})")
    return Plan(False, (), trigger.pr, trigger.head_sha or "", trigger.base_sha or "", None, reason,
                markdown=why(md(trigger.head_repo or "", 100)))


_HEAD_EVENTS = ("committed", "head_ref_force_pushed", "head_ref_restored")
"""Timeline events that move a pull request's head."""


def retry_commit(repo: Any, pr: Any, trigger: Any) -> tuple[str, str]:
    """The commit a writer's ``/kernelpro retry`` approves, or ("", a reply saying why none and how
    to retry). ``/kernelpro retry <sha>`` approves that commit if it is still the head. A bare
    retry approves the head the comment was made on: the PR's timeline (GitHub's order) must show
    the current head before the comment and no push after it, the head's commit must not be dated
    after the comment (a commit cannot be pushed before it was made), and the head repository's
    activity log (server time, unlike commit dates) must record no update of the head branch after
    the comment. Anything else is a head that moved after the maintainer looked: not approved. The
    log and the comment's time have whole seconds, so a push in the comment's second counts as after
    it, and a log that cannot be read approves nothing (the reply asks for ``retry <sha>``)."""
    head, n = pr.head.sha, trigger.pr

    def refused(why: str) -> tuple[str, str]:
        return "", reply_text("unapproved", why=why, pr=n, sha=trigger.head_sha or "", head=head).strip()

    if trigger.head_sha:
        return (head, "") if trigger.head_sha == head else refused("not_head")
    before: list[str] = []
    after: list[str] = []
    found = False
    for event in repo.get_issue(n).get_timeline():
        data = event.raw_data if isinstance(event.raw_data, dict) else {}
        kind = data.get("event")
        if kind == "commented" and data.get("id") == trigger.comment_id:
            found = True
        elif kind in _HEAD_EVENTS:
            sha = data.get("sha") or data.get("commit_id") or ""
            (after if found else before).append(sha)
            if kind == "committed" and sha == head:
                committed = (data.get("committer") or {}).get("date") or ""
                if found or _not_before(committed, trigger.comment_at):
                    after.append(sha)
    if not found:
        return refused("not_found")
    if after or head not in before:
        return refused("moved")
    pushed = _pushed_after(pr, trigger.comment_at)
    if pushed is None:
        return refused("unverified")
    return refused("moved") if pushed else (head, "")


def _pushed_after(pr: Any, when: str | None) -> bool | None:
    """Whether the head repository's activity log (``GET /repos/{o}/{r}/activity``, server time)
    records an update of the PR's head branch at or after ``when``. Commit dates and the timeline's
    order of commits are the author's to choose; this is not. None when it cannot tell (the API
    refused, the fork is gone, or the log is not a list): the caller approves nothing then."""
    head_repo = pr.head.repo
    if head_repo is None:
        return None
    try:
        _, data = head_repo._requester.requestJsonAndCheck(
            "GET", f"{head_repo.url}/activity",
            parameters={"ref": f"refs/heads/{pr.head.ref}", "direction": "desc", "per_page": 100})
    except GithubException:
        return None
    if not isinstance(data, list):
        return None
    return any(not isinstance(a, dict) or _not_before(str(a.get("timestamp", "")), when) for a in data)


def _not_before(when: str, than: str | None) -> bool:
    """Whether ISO time ``when`` is at or after ``than`` (both have whole seconds on GitHub, so the
    same second may be either side); True when either cannot be read (fail closed)."""
    try:
        return datetime.fromisoformat(when.replace("Z", "+00:00")) >= datetime.fromisoformat(
            (than or "").replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return True


def _plan(settings: Settings, checkout: Path, gh: Any, trigger: Trigger, configured: Configure) -> Plan:
    repo = gh.get_repo(trigger.repo)
    pr = repo.get_pull(trigger.pr)
    sticky = StickyComment(repo, trigger.pr, bot_login=settings.bot_login)
    if trigger.kind == "retry":
        issue_comment = repo.get_issue(trigger.pr).get_comment(trigger.comment_id)
        if not can_retry(repo, trigger.sender):
            react(issue_comment, "confused")
            repo.get_issue(trigger.pr).create_comment(reply_text("refused", repo=md(trigger.repo, 100)))
            return Plan(
                False,
                (),
                trigger.pr,
                pr.head.sha,
                pr.base.sha,
                None,
                "retry refused: no write access",
            )
        head_sha, refused = retry_commit(repo, pr, trigger)
        if refused:
            react(issue_comment, "confused")
            repo.get_issue(trigger.pr).create_comment(refused)
            # The reply's code spans (the command to use) stay code in the job summary too.
            return Plan(False, (), trigger.pr, pr.head.sha, pr.base.sha, None, refused, markdown=refused)
        react(issue_comment, "eyes")
    else:
        head_sha = trigger.head_sha or pr.head.sha
        if pr.head.sha != head_sha:
            reason = (f"commits were pushed after the `{settings.label}` label was added (labelled {head_sha[:10]}, "
                      f"head now {pr.head.sha[:10]}); they are not approved. Re-apply the label or comment "
                      "`/kernelpro retry` to optimize the new head.")
            say_done(sticky, reason, markdown=True)
            # Markdown as it is: the label is the workflow's own setting and the SHAs are hex.
            return Plan(False, (), trigger.pr, head_sha, pr.base.sha, None, reason, markdown=reason)
    base_sha = pr.base.sha
    fetch_pr(checkout, trigger.pr, head_sha, settings.github_token, (pr.base.ref, base_sha))
    changed = changed_files(checkout, base_sha, head_sha)
    with checkouts(checkout, base_sha, head_sha) as co:
        cfg_path = co.base / ".kernelpro.yml"
        if not cfg_path.exists():
            kernels = changed_kernels(checkout, base_sha, head_sha)
            reason = NO_CONFIG
            say_done(sticky, reason, kernels, config_snippet, markdown=True)
            return Plan(False, (), trigger.pr, head_sha, base_sha, None, reason, markdown=reason)
        read = configured(co.base, co.head, trigger.kernel, changed)
    if read.error:
        if trigger.kernel and read.known and trigger.kernel not in read.known:
            # A typo in the command, not a broken configuration: answer the command with the names.
            bad = replace(trigger, kind="invalid", error=f"--kernel {trigger.kernel}: no kernel of that name is "
                          "configured in the base branch's .kernelpro.yml")
            reply(repo, bad, sticky_body=None, may_write=True, label=settings.label,
                  known_kernels=list(read.known))
            react(repo.get_issue(trigger.pr).get_comment(trigger.comment_id), "confused")
            return Plan(False, (), trigger.pr, head_sha, base_sha, None, bad.error)
        reason = "the base branch's .kernelpro.yml is invalid (the error below); fix it on the base branch"
        say_done(sticky, reason, detail=read.error)
        return Plan(False, (), trigger.pr, head_sha, base_sha, None, f"{reason}: {read.error}")
    if not read.targets:
        kernels = changed_kernels(checkout, base_sha, head_sha)
        reason = "no configured kernel changed in this pull request."
        say_done(sticky, reason, kernels, config_snippet)
        return Plan(False, (), trigger.pr, head_sha, base_sha, None, reason)
    # Read as text, nothing run: a configuration that names a file or function the pull request does not
    # have is the configuration's fault, said here, not a failure of the PR's kernel on the GPU runner.
    if read.faults:
        reason = ("the base branch's .kernelpro.yml does not match this pull request's code, so nothing was run "
                  "(the configuration is at fault, not the kernel): " + " ".join(read.faults).rstrip("."))
        say_done(sticky, reason)
        return Plan(False, (), trigger.pr, head_sha, base_sha, None, reason)
    names = tuple(name for name, _ in read.targets)
    covered = {f for _, files in read.targets for f in files}
    uncovered = [] if trigger.kernel else [k for k in changed_kernels(checkout, base_sha, head_sha)
                                           if k.path not in covered]
    # The live marker lets the progress job edit this comment until publish writes the final state.
    sticky.update(render_comment("queued", n=len(names), targets=[md(n, 100) for n in names],
                                 snippet=code_block(config_snippet(uncovered), "yaml") if uncovered else "",
                                 live=live_marker(settings.run_id) if settings.run_id else ""), force=True)
    status(repo, head_sha, "pending", f"optimizing {len(names)} kernel(s)", settings.run_url or None)
    return Plan(
        True,
        names,
        trigger.pr,
        head_sha,
        base_sha,
        trigger.budget,
        f"optimizing {', '.join(names)}",
        read.targets,
    )
