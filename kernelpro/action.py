"""`kernelpro action plan|optimize|publish`: the three jobs of the GitHub workflow.

plan (trusted, no PR code runs): decides whether to run at all (label bound to the head SHA it was
given on; `/kernelpro retry` only from writers), resolves the targets from the **base** branch's
configuration, says so in the sticky comment, and emits the matrix.
optimize (the GPU runner, read-only token): `kernelpro optimize` for one target.
publish (write token, no PR code runs): reads the optimize artifacts as untrusted data, checks the
patch touches only the target's files, and opens or updates the follow-up PR (or comments why not).
progress (trusted, no PR code runs; next to the optimize matrix): watches the run's jobs and
artifacts and keeps the sticky comment live (kernelpro.bot.progress).

GitHub errors: requests are retried with backoff where that is safe (5xx and rate limits; a POST
only when GitHub did not process it, i.e. a rate limit); anything else stops the job with a
message that says what failed and what to do, in the log and in the sticky comment.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import git

from kernelpro.settings import Settings


class ActionError(RuntimeError):
    """The job cannot go on; the message says why and what to do."""


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


def retry_policy(total: int = 5, backoff_factor: float = 2.0, max_rate_limit_wait: float = 600) -> Any:
    """PyGithub's retry, limited to what is safe to repeat.

    GET, PUT, DELETE and PATCH (the bot's PATCHes set a whole title/body) are retried on 5xx with
    exponential backoff; a rate limit (403/429 with the rate-limit headers) is waited out for at
    most ``max_rate_limit_wait`` s and retried for every method, since GitHub did not process that
    request. A POST that got a 5xx is *not* repeated: GitHub may have created the comment or pull
    request already, and a rerun finds it instead of making a second. 403/404/422 that are not
    rate limits fail at once with GitHub's message.
    """
    from github import GithubRetry
    from urllib3.util.retry import Retry

    class SafeRetry(GithubRetry):
        def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
            if method.upper() == "POST" and status_code not in (403, 429):
                return False
            return bool(super().is_retry(method, status_code, has_retry_after))

    return SafeRetry(total=total, backoff_factor=backoff_factor, max_rate_limit_wait=max_rate_limit_wait,
                     status_forcelist=[*range(500, 600), 429],
                     allowed_methods=Retry.DEFAULT_ALLOWED_METHODS | {"GET", "POST", "PATCH"})  # fmt: skip


def _github(settings: Settings) -> Any:
    from github import Auth, Github

    if not settings.github_token:
        raise ActionError(
            "GITHUB_TOKEN is not set: give the step `env: GITHUB_TOKEN: ${{ github.token }}`"
        )
    return Github(
        base_url=settings.github_api_url, auth=Auth.Token(settings.github_token), retry=retry_policy()
    )


def explain(exc: Exception, doing: str) -> str:
    """One sentence for a failed GitHub request: what failed, GitHub's answer, and what to do."""
    from github import GithubException, RateLimitExceededException

    if not isinstance(exc, GithubException):
        return f"{doing} failed: {exc}"
    data = exc.data if isinstance(exc.data, dict) else {}
    said = f" ({str(data.get('message'))[:200]})" if data.get("message") else ""
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    status = exc.status
    if isinstance(exc, RateLimitExceededException) or headers.get("x-ratelimit-remaining") == "0" or status == 429:
        reset = headers.get("x-ratelimit-reset")
        when = time.strftime("%H:%M UTC", time.gmtime(int(reset))) if reset and reset.isdigit() else "the reset"
        hint = f"the token's API rate limit is used up; rerun this job after {when}"
    elif status == 401:
        hint = "the token was refused (expired or revoked); rerun the job for a fresh one"
    elif status == 403:
        hint = ("the token lacks a permission for this: check the job's `permissions:` against "
                "docs/github.md (a `pull_request` event from a fork gets a read-only token)")
    elif status == 404:
        hint = "the repository, pull request or comment is gone, or the token cannot see it"
    elif status == 422:
        hint = "GitHub refused the request as invalid"
    elif status >= 500:
        hint = "GitHub had a server error and retries did not help; rerun this job"
    else:
        hint = "see the job log"
    return f"{doing} failed: GitHub answered {status}{said}; {hint}"


def _react(comment: Any, content: str) -> None:
    """Acknowledge a command; a reaction GitHub refuses is logged, never fatal (it only says hello)."""
    from github import GithubException

    try:
        comment.create_reaction(content)
    except GithubException as e:
        print(f"::warning title=kernelpro::{explain(e, f'the {content} reaction on the command')}")


def _say_failed(gh: Any, repo_name: str, pr: int, settings: Settings, why: str) -> None:
    """Best effort: the failure in the sticky comment too (the log has it in any case)."""
    from github import GithubException

    from kernelpro.bot.comment import CommentError, StickyComment, progress_body

    try:
        sticky = StickyComment(gh.get_repo(repo_name), pr, bot_login=settings.bot_login)
        sticky.update(progress_body("failed", kernel_i=0, kernels=0, evaluations=0, best_speedup=None,
                                    reason=why), force=True)  # fmt: skip
    except (GithubException, CommentError) as e:
        print(f"::warning title=kernelpro::could not write the failure to the sticky comment either: {e}")


def write_outputs(settings: Settings, values: dict[str, str]) -> None:
    if not settings.github_output:
        return
    with open(settings.github_output, "a", encoding="utf-8") as f:
        for k, v in values.items():
            f.write(f"{k}={v}\n")


def _summary(settings: Settings, text: str) -> None:
    if settings.step_summary:
        with open(settings.step_summary, "a", encoding="utf-8") as f:
            f.write(text + "\n")


def _fetch_pr(checkout: Path, pr: int, head_sha: str, token: str | None = None,
              base: tuple[str, str] | None = None) -> None:  # fmt: skip
    """Bring the PR's commits in as git data (never checked out, never run); works for forks too.
    ``base``: (branch, sha) of the PR's base, fetched too when the checkout predates it (the base
    branch moved after the job's checkout). The checkout keeps no credentials
    (persist-credentials: false), so a private repository needs the token for these fetches,
    passed as an HTTP header and never written to the git config."""
    import base64

    repo = git.Repo(checkout)

    def have(sha: str) -> bool:
        try:
            repo.commit(sha)
            return True
        except (ValueError, git.BadName):
            return False

    wanted = [(head_sha, f"+refs/pull/{pr}/head:refs/remotes/kernelpro/pr-{pr}")]
    if base is not None:
        wanted.append((base[1], f"+refs/heads/{base[0]}:refs/remotes/kernelpro/base-{pr}"))
    refspecs = [spec for sha, spec in wanted if not have(sha)]
    if not refspecs:
        return
    args = ["--no-tags", "origin", *refspecs]
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        repo.git.execute(
            ["git", "-c", f"http.extraheader=AUTHORIZATION: basic {basic}", "fetch", *args]
        )
    else:
        repo.git.fetch(*args)


def _say_done(sticky: Any, reason: str, kernels: Sequence[Any] = (), snippet: Any = None, detail: str = "") -> None:
    """The final comment when nothing runs; kernels without a harness get a ready-to-paste snippet.
    ``detail``: text shown verbatim in a code block (a configuration error), never escaped into entities."""
    from kernelpro.bot.body import code_block
    from kernelpro.bot.comment import progress_body

    body = progress_body("done", kernel_i=0, kernels=0, evaluations=0, best_speedup=None, reason=reason)
    if detail:
        body += "\n" + code_block(detail) + "\n"
    if kernels:
        body += ("\n\nThese changed kernels have no harness yet. Add this to `.kernelpro.yml` on the base branch "
                 "and fill in the marked fields:\n\n" + code_block(snippet(kernels), "yaml"))  # fmt: skip
    sticky.update(body, force=True)


def plan(settings: Settings, checkout: Path, gh: Any = None) -> Plan:
    from github import GithubException

    from kernelpro.bot.comment import CommentError
    from kernelpro.bot.event import parse_event_file

    trigger = parse_event_file(settings.event_name, settings.event_path, label=settings.label,
                               bot_login=settings.bot_login)  # fmt: skip
    if trigger is None:
        return Plan(False, (), 0, "", "", None, "not a kernelpro trigger")
    gh = gh or _github(settings)
    if trigger.kind == "label" and trigger.is_fork:
        return _fork_label(settings, gh, trigger)
    try:
        if trigger.kind in ("help", "status", "cancel", "invalid"):
            return _answer(settings, gh, trigger)
        return _plan(settings, checkout, gh, trigger)
    except (GithubException, CommentError) as e:
        why = explain(e, "planning") if isinstance(e, GithubException) else f"planning failed: {e}"
        _say_failed(gh, trigger.repo, trigger.pr, settings, why)
        raise ActionError(why) from e


def _answer(settings: Settings, gh: Any, trigger: Any) -> Plan:
    """``/kernelpro help|status|cancel`` and unusable commands: answered on the PR, nothing runs."""
    from kernelpro.bot.command import live_run, reply
    from kernelpro.bot.comment import StickyComment, progress_body
    from kernelpro.bot.permission import can_retry

    repo = gh.get_repo(trigger.repo)
    sticky = StickyComment(repo, trigger.pr, bot_login=settings.bot_login)
    body = sticky.current_body()
    may_write = trigger.kind != "cancel" or can_retry(repo, trigger.sender)
    done = reply(repo, trigger, sticky_body=body, may_write=may_write, label=settings.label)
    run = live_run(body)
    if trigger.kind == "cancel" and may_write and run is not None:
        sticky.update(progress_body("failed", kernel_i=0, kernels=0, evaluations=0, best_speedup=None,
                                    reason=f"cancelled by {trigger.sender} (/kernelpro cancel); comment "
                                    "/kernelpro retry to start again"), force=True)  # fmt: skip
    if trigger.comment_id:
        _react(repo.get_issue(trigger.pr).get_comment(trigger.comment_id),
               "confused" if trigger.kind == "invalid" or not may_write else "+1")  # fmt: skip
    return Plan(False, (), trigger.pr, "", "", None, done if trigger.kind != "invalid" else f"{done}: {trigger.error}")


def _names(value: str) -> tuple[str, ...]:
    """A comma- or newline-separated list of labels or logins (``org/team`` for a team); a label may
    hold spaces."""
    return tuple(dict.fromkeys(x.strip() for x in value.replace("\n", ",").split(",") if x.strip()))


def _status(repo: Any, sha: str, state: Any, text: str, url: str | None) -> None:
    """The ``kernelpro`` commit status on the PR head; a refusal is a warning, never a failure."""
    from kernelpro.bot.status import set_status

    why = set_status(repo, sha, state, text, url)
    if why:
        print(f"::warning title=kernelpro::the commit status on {sha[:12]} was not set: {why}")


def _fork_label(settings: Settings, gh: Any, trigger: Any) -> Plan:
    """A label on a fork's pull request: GitHub gives this event a read-only token and no secrets,
    so nothing could be published; a maintainer's `/kernelpro retry` runs with this repository's
    token instead. Nothing runs; the comment is attempted (it succeeds only where the repository
    sends write tokens to fork workflows) and the reason is in the log and the job summary."""
    from github import GithubException

    from kernelpro.bot.comment import CommentError, StickyComment, progress_body

    reason = (f"this pull request comes from a fork ({trigger.head_repo}): GitHub runs `pull_request` workflows "
              "of forks with a read-only token and no secrets, so kernelpro cannot comment or publish from "
              "this label. A maintainer can comment `/kernelpro retry` on the pull request instead: that "
              "runs with this repository's token, after a permission check.")  # fmt: skip
    try:
        StickyComment(gh.get_repo(trigger.repo), trigger.pr, bot_login=settings.bot_login).update(
            progress_body("done", kernel_i=0, kernels=0, evaluations=0, best_speedup=None, reason=reason),
            force=True)  # fmt: skip
    except (GithubException, CommentError) as e:
        print(f"::notice title=kernelpro::{reason} (the comment could not be written: {e})")
    return Plan(False, (), trigger.pr, trigger.head_sha or "", trigger.base_sha or "", None, reason)


_HEAD_EVENTS = ("committed", "head_ref_force_pushed", "head_ref_restored")
"""Timeline events that move a pull request's head."""


def retry_commit(repo: Any, pr: Any, trigger: Any) -> tuple[str, str]:
    """The commit a writer's ``/kernelpro retry`` approves, or ("", a reply saying why none and how
    to retry). ``/kernelpro retry <sha>`` approves that commit if it is still the head. A bare
    retry approves the head the comment was made on: the PR's timeline (GitHub's order) must show
    the current head before the comment and no push after it, the head's commit must not be dated
    after the comment (a commit cannot be pushed before it was made), and the head repository's
    activity log (server time, unlike commit dates) must record no update of the head branch after
    the comment. Anything else is a head that moved after the maintainer looked: not approved."""
    head, n = pr.head.sha, trigger.pr
    again = f"Review the pull request at {head[:12]}, then comment `/kernelpro retry {head}` to optimize exactly that commit."
    if trigger.head_sha:
        if trigger.head_sha != head:
            return "", (f"`/kernelpro retry {trigger.head_sha}` names a commit that is not the head of #{n} "
                        f"(now {head[:12]}), so nothing runs. {again}")  # fmt: skip
        return head, ""
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
                if found or _later(committed, trigger.comment_at):
                    after.append(sha)
    if not found:
        return "", (f"kernelpro could not find this `/kernelpro retry` in the timeline of #{n}, so it cannot tell "
                    f"which commit it approves and nothing runs. {again}")  # fmt: skip
    if after or head not in before or _pushed_after(pr, trigger.comment_at):
        return "", (f"The head of #{n} moved after this `/kernelpro retry` (it is now {head[:12]}): commits pushed "
                    f"after a maintainer's comment are not approved by it, so nothing runs. {again}")  # fmt: skip
    return head, ""


def _pushed_after(pr: Any, when: str | None) -> bool:
    """Whether the head repository's activity log (``GET /repos/{o}/{r}/activity``, server time)
    records an update of the PR's head branch after ``when``. Commit dates and the timeline's
    order of commits are the author's to choose; this is not. False when it cannot tell (the API
    refused, or the fork is gone): the timeline's checks still apply."""
    from github import GithubException

    head_repo = pr.head.repo
    if head_repo is None:
        return False
    try:
        _, data = head_repo._requester.requestJsonAndCheck(
            "GET", f"{head_repo.url}/activity",
            parameters={"ref": f"refs/heads/{pr.head.ref}", "direction": "desc", "per_page": 100})  # fmt: skip
    except GithubException:
        return False
    return any(isinstance(a, dict) and _later(str(a.get("timestamp", "")), when) for a in data or [])


def _later(when: str, than: str | None) -> bool:
    """Whether ISO time ``when`` is after ``than``; True when either cannot be read (fail closed)."""
    from datetime import datetime

    try:
        return datetime.fromisoformat(when.replace("Z", "+00:00")) > datetime.fromisoformat(
            (than or "").replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return True


def _plan(settings: Settings, checkout: Path, gh: Any, trigger: Any) -> Plan:
    from kernelpro.bot.body import code_block, md
    from kernelpro.bot.change import changed_files, changed_kernels, config_snippet
    from kernelpro.bot.comment import StickyComment, progress_body
    from kernelpro.bot.permission import can_retry
    from kernelpro.bot.progress import live_marker
    from kernelpro.runner.config import ConfigError, load_config
    from kernelpro.runner.smoke import static_faults
    from kernelpro.workspace import checkouts

    repo = gh.get_repo(trigger.repo)
    pr = repo.get_pull(trigger.pr)
    sticky = StickyComment(repo, trigger.pr, bot_login=settings.bot_login)
    if trigger.kind == "retry":
        issue_comment = repo.get_issue(trigger.pr).get_comment(trigger.comment_id)
        if not can_retry(repo, trigger.sender):
            _react(issue_comment, "confused")
            repo.get_issue(trigger.pr).create_comment(
                f"Thanks! `/kernelpro retry` runs code from this pull request on a GPU runner, so it is only "
                f"honoured from people with write access to {trigger.repo}. A maintainer can start it."
            )
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
            _react(issue_comment, "confused")
            repo.get_issue(trigger.pr).create_comment(refused)
            return Plan(False, (), trigger.pr, pr.head.sha, pr.base.sha, None, refused)
        _react(issue_comment, "eyes")
    else:
        head_sha = trigger.head_sha or pr.head.sha
        if pr.head.sha != head_sha:
            reason = (f"commits were pushed after the `{settings.label}` label was added (labelled {head_sha[:10]}, "
                      f"head now {pr.head.sha[:10]}); they are not approved. Re-apply the label or comment "
                      "`/kernelpro retry` to optimize the new head.")  # fmt: skip
            _say_done(sticky, reason)
            return Plan(False, (), trigger.pr, head_sha, pr.base.sha, None, reason)
    base_sha = pr.base.sha
    _fetch_pr(checkout, trigger.pr, head_sha, settings.github_token, (pr.base.ref, base_sha))
    changed = changed_files(checkout, base_sha, head_sha)
    with checkouts(checkout, base_sha, head_sha) as co:
        cfg_path = co.base / ".kernelpro.yml"
        if not cfg_path.exists():
            kernels = changed_kernels(checkout, base_sha, head_sha)
            reason = "no `.kernelpro.yml` on the base branch: nothing is configured."
            _say_done(sticky, reason, kernels, config_snippet)
            return Plan(False, (), trigger.pr, head_sha, base_sha, None, reason)
        names_known: list[str] = []
        try:
            config = load_config(cfg_path, co.base)
            names_known = [t.name for t in config.targets]
            targets = (
                [config.target(trigger.kernel)] if trigger.kernel else config.targets_for(changed)
            )
        except ConfigError as e:
            if trigger.kernel and names_known and trigger.kernel not in names_known:
                # A typo in the command, not a broken configuration: answer the command with the names.
                from kernelpro.bot.command import reply

                bad = replace(trigger, kind="invalid", error=f"--kernel {trigger.kernel}: no kernel of that name is "
                              "configured in the base branch's .kernelpro.yml")  # fmt: skip
                reply(repo, bad, sticky_body=None, may_write=True, label=settings.label,
                      known_kernels=names_known)  # fmt: skip
                _react(repo.get_issue(trigger.pr).get_comment(trigger.comment_id), "confused")
                return Plan(False, (), trigger.pr, head_sha, base_sha, None, bad.error)
            reason = "the base branch's .kernelpro.yml is invalid (the error below); fix it on the base branch"
            _say_done(sticky, reason, detail=str(e))
            return Plan(False, (), trigger.pr, head_sha, base_sha, None, f"{reason}: {e}")
        if not targets:
            kernels = changed_kernels(checkout, base_sha, head_sha)
            reason = "no configured kernel changed in this pull request."
            _say_done(sticky, reason, kernels, config_snippet)
            return Plan(False, (), trigger.pr, head_sha, base_sha, None, reason)
        # Read as text, nothing run: a configuration that names a file or function the pull request does not
        # have is the configuration's fault, said here, not a failure of the PR's kernel on the GPU runner.
        faults = [str(f) for t in targets for f in static_faults(t, co.head)]
        if faults:
            reason = ("the base branch's .kernelpro.yml does not match this pull request's code, so nothing was run "
                      "(the configuration is at fault, not the kernel): " + " ".join(faults).rstrip("."))  # fmt: skip
            _say_done(sticky, reason)
            return Plan(False, (), trigger.pr, head_sha, base_sha, None, reason)
    names = tuple(t.name for t in targets)
    queued = progress_body("queued", kernel_i=0, kernels=len(names), evaluations=0, best_speedup=None)
    queued += f"\nWill be optimized: {', '.join(md(n, 100) for n in names)}.\n"
    covered = {f for t in targets for f in t.files}
    uncovered = [] if trigger.kernel else [k for k in changed_kernels(checkout, base_sha, head_sha)
                                           if k.path not in covered]  # fmt: skip
    if uncovered:
        queued += ("\nThese changed kernels have no harness, so they are not optimized. Add this to `.kernelpro.yml` "
                   "on the base branch and fill in the marked fields:\n\n"
                   + code_block(config_snippet(uncovered), "yaml") + "\n")  # fmt: skip
    # The live marker lets the progress job edit this comment until publish writes the final state.
    sticky.update(queued + (live_marker(settings.run_id) + "\n" if settings.run_id else ""), force=True)
    _status(repo, head_sha, "pending", f"optimizing {len(names)} kernel(s)", settings.run_url or None)
    return Plan(
        True,
        names,
        trigger.pr,
        head_sha,
        base_sha,
        trigger.budget,
        f"optimizing {', '.join(names)}",
        tuple((t.name, tuple(t.files)) for t in targets),
    )


def cmd_plan(args: Any, settings: Settings) -> int:
    p = plan(settings, Path(args.checkout))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(p.__dict__, indent=2) + "\n")
    write_outputs(settings, {"run": "true" if p.run else "false", "targets": json.dumps(list(p.targets)),
                             "pr": str(p.pr), "head_sha": p.head_sha, "base_sha": p.base_sha,
                             "budget": str(p.budget or ""), "files": json.dumps(dict(p.files))})  # fmt: skip
    print(f"kernelpro plan: {p.reason}")
    _summary(settings, f"### kernelpro plan\n\n{p.reason}")
    return 0


def cmd_optimize(args: Any, settings: Settings) -> int:
    from kernelpro.cli import run_optimize

    base, head = os.environ.get("KERNELPRO_BASE_SHA", ""), os.environ.get("KERNELPRO_HEAD_SHA", "")
    if not base or not head:
        raise ActionError(
            "KERNELPRO_BASE_SHA and KERNELPRO_HEAD_SHA must come from the plan job's outputs"
        )
    budget = int(os.environ["KERNELPRO_BUDGET"]) if os.environ.get("KERNELPRO_BUDGET") else None
    out = Path(args.out)
    rc = run_optimize(Path(args.checkout), base, head, out, settings, kernel=args.target, budget=budget,
                      programmer_name=os.environ.get("KERNELPRO_PROGRAMMER", "tuner"), search="mcts")  # fmt: skip
    if seal_results(out, settings):
        rc = rc or 1
    report = out / "report.md"
    if report.is_file() and not report.is_symlink():
        _summary(settings, report.read_text(errors="replace")[:60_000])
    return rc


def _command_text(text: str) -> str:
    """Text for one workflow-command line: a newline in a file name cannot start a command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def seal_results(out: Path, settings: Settings) -> bool:
    """Before the upload: take links, special files and anything holding a secret kernelpro holds
    out of the results folder (kernelpro.outbox), each with an error line; True if any was."""
    from kernelpro.outbox import seal, secret_values

    secrets = secret_values(os.environ, {"KERNELPRO_LLM_API_KEY": settings.llm_api_key,
                                         "GITHUB_TOKEN": settings.github_token})  # fmt: skip
    removed = seal(out, secrets)
    for r in removed:
        print(f"::error title=kernelpro::removed {_command_text(r.path[:300])} from the results before the "
              f"upload: {r.why}. The optimize job ran the pull request's code, which can write there; "
              "nothing it left that could leak a file or a secret is uploaded")  # fmt: skip
    return bool(removed)


def _results_dirs(root: Path) -> list[Path]:
    if (root / "summary.json").exists():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "summary.json").exists())


def publish_results(settings: Settings, checkout: Path, results_root: Path, gh: Any = None,
                    push_url: str | None = None, head_sha: str | None = None) -> str:  # fmt: skip
    """Publish the optimize results. ``head_sha``: the commit plan approved and optimize ran on
    (the plan job's output); the follow-up commit is built on it even if the PR moved on since."""
    from github import GithubException

    from kernelpro.bot.artifact import Results, load_results
    from kernelpro.bot.body import render_job_summary
    from kernelpro.bot.comment import CommentError, StickyComment, progress_body
    from kernelpro.bot.event import parse_event_file
    from kernelpro.bot.publish import publish
    from kernelpro.runner.config import load_config
    from kernelpro.workspace import checkouts

    trigger = parse_event_file(settings.event_name, settings.event_path, label=settings.label,
                               bot_login=settings.bot_login)  # fmt: skip
    if trigger is None:
        return "not a kernelpro trigger"
    gh = gh or _github(settings)
    repo = gh.get_repo(trigger.repo)
    pr = repo.get_pull(trigger.pr)
    head_sha = head_sha or trigger.head_sha or pr.head.sha
    _fetch_pr(checkout, trigger.pr, head_sha, settings.github_token, (pr.base.ref, pr.base.sha))
    # The allowed files come from the trusted base-branch configuration, never from the artifacts.
    with checkouts(checkout, pr.base.sha, head_sha) as co:
        config = load_config(co.base / ".kernelpro.yml", co.base)
    allowed = {t.name: list(t.files) for t in config.targets}
    # The raw CUDA launch each target's knobs are read with, so publish can recompute tuner patches.
    launches = {t.name: (t.launch.kernel, tuple(t.launch.block)) for t in config.targets if t.launch is not None}
    parts = [load_results(d, allowed_files=allowed) for d in _results_dirs(results_root)]
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
                            bot_name=settings.bot_login, bot_email="41898282+github-actions[bot]@users.noreply.github.com",
                            base_branch_of_pr=pr.base.ref, pr_head_branch=pr.head.ref, pr_head_sha=head_sha,
                            is_fork=is_fork, allowed_files=allowed, launches=launches, sticky=sticky,
                            run_url=settings.run_url or None,
                            # Who wrote the candidates, from the workflow's configuration (never the
                            # artifact): anything but llm makes publish refuse a patch it cannot recompute.
                            programmer=os.environ.get("KERNELPRO_PROGRAMMER", "tuner"),
                            retry=trigger.kind == "retry", base_sha=pr.base.sha,
                            # Triage of the follow-up PR, from the workflow (action inputs pr-labels, pr-reviewers).
                            labels=_names(os.environ.get("KERNELPRO_PR_LABELS", "")),
                            reviewers=_names(os.environ.get("KERNELPRO_PR_REVIEWERS", "")))  # fmt: skip
    except Exception as e:
        # Say it where the maintainer looks; the artifact still holds everything, so a rerun publishes.
        why = explain(e, "publishing") if isinstance(e, GithubException) else f"publishing failed: {e}"
        try:
            sticky.update(progress_body("failed", kernel_i=0, kernels=len(results.targets), evaluations=0,
                                        best_speedup=None, reason=f"{why}. Rerun the publish job: the results are "
                                        "kept in the workflow's artifacts"), force=True)  # fmt: skip
            if ack is not None:
                ack.create_reaction("confused")
        except (GithubException, CommentError) as e2:
            print(f"::warning title=kernelpro::could not write the failure to the sticky comment: {e2}")
        _status(repo, head_sha, "error", "publishing failed; see the kernelpro comment", settings.run_url or None)
        raise ActionError(why) from e
    _summary(settings, render_job_summary(results, published.model_written))
    for w in published.warnings:
        print(f"::warning title=kernelpro::the follow-up pull request has no {w}")
    from kernelpro.bot.status import verdict

    _status(repo, head_sha, "success", verdict(results, published.pr_url),
            published.pr_url or settings.run_url or None)  # fmt: skip
    if published.action != "comment-only":  # comment-only outcomes were posted by publish()
        from kernelpro.bot.body import render_summary_comment

        # The model label (when a model wrote a patch) leads the sticky comment too.
        done = render_summary_comment(results, pr_number=trigger.pr, head_sha=head_sha, base_sha=pr.base.sha,
                                      pr_url=published.pr_url, reason=published.reason,
                                      run_url=settings.run_url or None, model_written=published.model_written)  # fmt: skip
        try:
            sticky.update(done, force=True)
        except CommentError as e:
            why = f"{published.action} {published.pr_url or published.reason}, but the progress comment could not say so: {e}"
            with contextlib.suppress(CommentError):  # a second try often gets through a transient error
                sticky.update(progress_body("failed", kernel_i=len(results.targets), kernels=len(results.targets),
                                            evaluations=0, best_speedup=None, reason=why), force=True)  # fmt: skip
            raise ActionError(why) from e
    if ack is not None:
        try:  # only an acknowledgement: the work is published, so this must not fail the job
            ack.create_reaction("+1")
        except GithubException as e:
            print(f"::warning title=kernelpro::{explain(e, 'the +1 reaction on the retry comment')}")
    return f"{published.action}: {published.pr_url or published.reason}"


def cmd_publish(args: Any, settings: Settings) -> int:
    head = getattr(args, "head_sha", None) or None
    print("kernelpro publish:", publish_results(settings, Path(args.checkout), Path(args.results), head_sha=head))
    return 0


def _plan_lists(targets_json: str, files_json: str) -> tuple[list[str], dict[str, list[str]]]:
    """The plan job's `targets` and `files` outputs, checked (they are passed on the command line)."""
    try:
        targets, files = json.loads(targets_json), json.loads(files_json)
    except json.JSONDecodeError as e:
        raise ActionError(f"--targets and --files must be the plan job's JSON outputs: {e}") from None
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ActionError("--targets must be a JSON list of target names (the plan job's `targets` output)")
    if not isinstance(files, dict) or not all(
        isinstance(v, list) and all(isinstance(f, str) for f in v) for v in files.values()
    ):
        raise ActionError("--files must be a JSON object target -> [kernel files] (the plan job's `files` output)")
    missing = [t for t in targets if t not in files]
    if missing:
        raise ActionError(f"--files has no entry for {missing}: pass the same plan's `targets` and `files`")
    return targets, files


def watch_progress(settings: Settings, targets: list[str], files: dict[str, list[str]], gh: Any = None, *,
                   interval_s: float = 30.0, max_s: float = 190 * 60.0, job_prefix: str = "optimize ",
                   sleep: Any = time.sleep, clock: Any = time.monotonic) -> Any:  # fmt: skip
    """The progress job: keep the sticky comment live until the optimize jobs are done."""
    from functools import partial

    from kernelpro.bot.comment import StickyComment
    from kernelpro.bot.event import parse_event_file
    from kernelpro.bot.progress import Watcher, download_artifact

    trigger = parse_event_file(settings.event_name, settings.event_path, label=settings.label,
                               bot_login=settings.bot_login)  # fmt: skip
    if trigger is None:
        print("kernelpro progress: not a kernelpro trigger")
        return None
    if not settings.run_id.isdigit():
        raise ActionError("GITHUB_RUN_ID is not set: `kernelpro action progress` runs inside the workflow run it watches")
    gh = gh or _github(settings)
    repo = gh.get_repo(trigger.repo)
    watcher = Watcher(repo.get_workflow_run(int(settings.run_id)), run_id=settings.run_id, targets=targets,
                      allowed_files=files, sticky=StickyComment(repo, trigger.pr, bot_login=settings.bot_login, clock=clock),
                      fetch=partial(download_artifact, settings.github_api_url, settings.github_token or "", trigger.repo),
                      run_url=settings.run_url or None, job_prefix=job_prefix, interval_s=interval_s, max_s=max_s,
                      sleep=sleep, clock=clock)  # fmt: skip
    return watcher.watch()


def cmd_progress(args: Any, settings: Settings) -> int:
    targets, files = _plan_lists(args.targets, args.files)
    snap = watch_progress(settings, targets, files, interval_s=args.interval, max_s=args.max_minutes * 60,
                          job_prefix=args.job_prefix)  # fmt: skip
    if snap is not None:
        print(f"kernelpro progress: {snap.done}/{len(snap.kernels)} kernel(s) done, "
              f"{snap.evaluations} evaluation(s); {'all jobs finished' if snap.finished else 'stopped watching'}")  # fmt: skip
    return 0
