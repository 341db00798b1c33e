"""`kernelpro action plan|optimize|publish`: the three jobs of the GitHub workflow.

plan (trusted, no PR code runs): decides whether to run at all (label bound to the head SHA it was
given on; `/kernelpro retry` only from writers), resolves the targets from the **base** branch's
configuration, says so in the sticky comment, and emits the matrix.
optimize (the GPU runner, read-only token): `kernelpro optimize` for one target.
publish (write token, no PR code runs): reads the optimize artifacts as untrusted data, checks the
patch touches only the target's files, and opens or updates the follow-up PR (or comments why not).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
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


def _github(settings: Settings) -> Any:
    from github import Auth, Github, GithubRetry

    if not settings.github_token:
        raise ActionError(
            "GITHUB_TOKEN is not set: give the step `env: GITHUB_TOKEN: ${{ github.token }}`"
        )
    # Retries with backoff on 5xx and on rate limits (waiting for the reset, at most 10 minutes);
    # 403/404/422 that are not rate limits fail at once with GitHub's message.
    retry = GithubRetry(total=5, backoff_factor=2, max_rate_limit_wait=600)
    return Github(
        base_url=settings.github_api_url, auth=Auth.Token(settings.github_token), retry=retry
    )


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


def _fetch_pr(checkout: Path, pr: int, head_sha: str, token: str | None = None) -> None:
    """Bring the PR's commits in as git data (never checked out, never run); works for forks too.
    The checkout keeps no credentials (persist-credentials: false), so a private repository needs
    the token for this one fetch, passed as an HTTP header and never written to the git config."""
    import base64

    repo = git.Repo(checkout)
    try:
        repo.commit(head_sha)
        return
    except (ValueError, git.BadName):
        pass
    args = ["--no-tags", "origin", f"+refs/pull/{pr}/head:refs/remotes/kernelpro/pr-{pr}"]
    if token:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        repo.git.execute(
            ["git", "-c", f"http.extraheader=AUTHORIZATION: basic {basic}", "fetch", *args]
        )
    else:
        repo.git.fetch(*args)


def _say_done(sticky: Any, reason: str, kernels: Sequence[Any] = (), snippet: Any = None) -> None:
    """The final comment when nothing runs; kernels without a harness get a ready-to-paste snippet."""
    from kernelpro.bot.body import code_block
    from kernelpro.bot.comment import progress_body

    body = progress_body("done", kernel_i=0, kernels=0, evaluations=0, best_speedup=None, reason=reason)
    if kernels:
        body += ("\n\nThese changed kernels have no harness yet. Add this to `.kernelpro.yml` on the base branch "
                 "and fill in the marked fields:\n\n" + code_block(snippet(kernels), "yaml"))  # fmt: skip
    sticky.update(body, force=True)


def plan(settings: Settings, checkout: Path, gh: Any = None) -> Plan:
    from kernelpro.bot.change import changed_files, changed_kernels, config_snippet
    from kernelpro.bot.comment import StickyComment, progress_body
    from kernelpro.bot.event import parse_event_file
    from kernelpro.bot.permission import can_retry
    from kernelpro.runner.config import ConfigError, load_config
    from kernelpro.workspace import checkouts

    trigger = parse_event_file(settings.event_name, settings.event_path, label=settings.label,
                               bot_login=settings.bot_login)  # fmt: skip
    if trigger is None:
        return Plan(False, (), 0, "", "", None, "not a kernelpro trigger")
    gh = gh or _github(settings)
    repo = gh.get_repo(trigger.repo)
    pr = repo.get_pull(trigger.pr)
    sticky = StickyComment(repo, trigger.pr, bot_login=settings.bot_login)
    if trigger.kind == "retry":
        issue_comment = repo.get_issue(trigger.pr).get_comment(trigger.comment_id)
        if not can_retry(repo, trigger.sender):
            issue_comment.create_reaction("confused")
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
        issue_comment.create_reaction("eyes")
        head_sha = pr.head.sha
    else:
        head_sha = trigger.head_sha or pr.head.sha
        if pr.head.sha != head_sha:
            reason = (f"commits were pushed after the `{settings.label}` label was added (labelled {head_sha[:10]}, "
                      f"head now {pr.head.sha[:10]}); they are not approved. Re-apply the label or comment "
                      "`/kernelpro retry` to optimize the new head.")  # fmt: skip
            _say_done(sticky, reason)
            return Plan(False, (), trigger.pr, head_sha, pr.base.sha, None, reason)
    base_sha = pr.base.sha
    _fetch_pr(checkout, trigger.pr, head_sha, settings.github_token)
    changed = changed_files(checkout, base_sha, head_sha)
    with checkouts(checkout, base_sha, head_sha) as co:
        cfg_path = co.base / ".kernelpro.yml"
        if not cfg_path.exists():
            kernels = changed_kernels(checkout, base_sha, head_sha)
            reason = "no `.kernelpro.yml` on the base branch: nothing is configured."
            _say_done(sticky, reason, kernels, config_snippet)
            return Plan(False, (), trigger.pr, head_sha, base_sha, None, reason)
        try:
            config = load_config(cfg_path, co.base)
            targets = (
                [config.target(trigger.kernel)] if trigger.kernel else config.targets_for(changed)
            )
        except ConfigError as e:
            reason = f"the base branch's `.kernelpro.yml` is invalid:\n\n```\n{e}\n```"
            _say_done(sticky, reason)
            return Plan(False, (), trigger.pr, head_sha, base_sha, None, reason)
        if not targets:
            kernels = changed_kernels(checkout, base_sha, head_sha)
            reason = "no configured kernel changed in this pull request."
            _say_done(sticky, reason, kernels, config_snippet)
            return Plan(False, (), trigger.pr, head_sha, base_sha, None, reason)
    names = tuple(t.name for t in targets)
    sticky.update(progress_body("queued", kernel_i=0, kernels=len(names), evaluations=0, best_speedup=None),
                  force=True)  # fmt: skip
    return Plan(
        True,
        names,
        trigger.pr,
        head_sha,
        base_sha,
        trigger.budget,
        f"optimizing {', '.join(names)}",
    )


def cmd_plan(args: Any, settings: Settings) -> int:
    p = plan(settings, Path(args.checkout))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(p.__dict__, indent=2) + "\n")
    write_outputs(settings, {"run": "true" if p.run else "false", "targets": json.dumps(list(p.targets)),
                             "pr": str(p.pr), "head_sha": p.head_sha, "base_sha": p.base_sha,
                             "budget": str(p.budget or "")})  # fmt: skip
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
    report = out / "report.md"
    if report.exists():
        _summary(settings, report.read_text()[:60_000])
    return rc


def _results_dirs(root: Path) -> list[Path]:
    if (root / "summary.json").exists():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "summary.json").exists())


def publish_results(settings: Settings, checkout: Path, results_root: Path, gh: Any = None,
                    push_url: str | None = None) -> str:  # fmt: skip
    from kernelpro.bot.artifact import Results, load_results
    from kernelpro.bot.body import render_job_summary
    from kernelpro.bot.comment import StickyComment, progress_body
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
    head_sha = trigger.head_sha or pr.head.sha
    _fetch_pr(checkout, trigger.pr, head_sha, settings.github_token)
    # The allowed files come from the trusted base-branch configuration, never from the artifacts.
    with checkouts(checkout, pr.base.sha, head_sha) as co:
        config = load_config(co.base / ".kernelpro.yml", co.base)
    allowed = {t.name: list(t.files) for t in config.targets}
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
                            is_fork=is_fork, allowed_files=allowed, sticky=sticky, run_url=settings.run_url or None,
                            programmer=os.environ.get("KERNELPRO_PROGRAMMER", "tuner"))  # fmt: skip
    except Exception as e:
        # Say it where the maintainer looks; the artifact still holds everything, so a rerun publishes.
        sticky.update(progress_body("failed", kernel_i=0, kernels=len(results.targets), evaluations=0,
                                    best_speedup=None, reason=f"publishing failed ({type(e).__name__}); rerun the "
                                    "publish job: the results are kept in the workflow's artifacts"), force=True)  # fmt: skip
        if ack is not None:
            ack.create_reaction("confused")
        raise
    if ack is not None:
        ack.create_reaction("+1")
    if published.action == "comment-only":
        _summary(settings, render_job_summary(results))
        return f"{published.action}: {published.reason}"
    best = max((t.winner.speedup for t in results.winners if t.winner is not None), default=None)
    sticky.update(progress_body("done", kernel_i=len(results.targets), kernels=len(results.targets),
                                evaluations=sum(t.evaluations for t in results.targets), best_speedup=best,
                                pr_url=published.pr_url, reason=published.reason), force=True)  # fmt: skip
    _summary(settings, render_job_summary(results))
    return f"{published.action}: {published.pr_url or published.reason}"


def cmd_publish(args: Any, settings: Settings) -> int:
    print("kernelpro publish:", publish_results(settings, Path(args.checkout), Path(args.results)))
    return 0
