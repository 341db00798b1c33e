"""What the workflow's GitHub jobs (plan, publish, progress) share: the client, its retries, one
sentence per failed request, and the small courtesies (reactions, the commit status, the failure
in the sticky comment) that must never fail a job.

GitHub errors: requests are retried with backoff where that is safe (5xx and rate limits; a POST
only when GitHub did not process it, i.e. a rate limit); anything else stops the job with a
message that says what failed and what to do, in the log and in the sticky comment.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import git
from github import Auth, Github, GithubException, GithubRetry, RateLimitExceededException
from urllib3.util.retry import Retry

from kernelpro.settings import Settings

from .body import code_block
from .comment import CommentError, StickyComment, progress_body
from .status import set_status

__all__ = ["ActionError", "connect", "explain", "fetch_pr", "react", "retry_policy", "say_done", "say_failed",
           "status", "summary", "write_outputs"]


class ActionError(RuntimeError):
    """The job cannot go on; the message says why and what to do."""


def retry_policy(total: int = 5, backoff_factor: float = 2.0, max_rate_limit_wait: float = 600) -> Any:
    """PyGithub's retry, limited to what is safe to repeat.

    GET, PUT, DELETE and PATCH (the bot's PATCHes set a whole title/body) are retried on 5xx with
    exponential backoff; a rate limit (403/429 with the rate-limit headers) is waited out for at
    most ``max_rate_limit_wait`` s and retried for every method, since GitHub did not process that
    request. A POST that got a 5xx is *not* repeated: GitHub may have created the comment or pull
    request already, and a rerun finds it instead of making a second. 403/404/422 that are not
    rate limits fail at once with GitHub's message.
    """

    class SafeRetry(GithubRetry):
        def is_retry(self, method: str, status_code: int, has_retry_after: bool = False) -> bool:
            if method.upper() == "POST" and status_code not in (403, 429):
                return False
            return bool(super().is_retry(method, status_code, has_retry_after))

    return SafeRetry(total=total, backoff_factor=backoff_factor, max_rate_limit_wait=max_rate_limit_wait,
                     status_forcelist=[*range(500, 600), 429],
                     allowed_methods=Retry.DEFAULT_ALLOWED_METHODS | {"GET", "POST", "PATCH"})


def connect(settings: Settings) -> Github:
    """The client of a job, with the token and API root of the settings and :func:`retry_policy`."""
    if not settings.github_token:
        raise ActionError("GITHUB_TOKEN is not set: give the step `env: GITHUB_TOKEN: ${{ github.token }}`")
    return Github(base_url=settings.github_api_url, auth=Auth.Token(settings.github_token), retry=retry_policy())


def explain(exc: Exception, doing: str) -> str:
    """One sentence for a failed GitHub request: what failed, GitHub's answer, and what to do."""
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


def react(comment: Any, content: str) -> None:
    """Acknowledge a command; a reaction GitHub refuses is logged, never fatal (it only says hello)."""
    try:
        comment.create_reaction(content)
    except GithubException as e:
        print(f"::warning title=kernelpro::{explain(e, f'the {content} reaction on the command')}")


def status(repo: Any, sha: str, state: Literal["pending", "success", "failure", "error"], text: str,
           url: str | None) -> None:
    """The ``kernelpro`` commit status on the PR head; a refusal is a warning, never a failure."""
    why = set_status(repo, sha, state, text, url)
    if why:
        print(f"::warning title=kernelpro::the commit status on {sha[:12]} was not set: {why}")


def say_failed(gh: Any, repo_name: str, pr: int, settings: Settings, why: str) -> None:
    """Best effort: the failure in the sticky comment too (the log has it in any case)."""
    try:
        sticky = StickyComment(gh.get_repo(repo_name), pr, bot_login=settings.bot_login)
        sticky.update(progress_body("failed", kernel_i=0, kernels=0, evaluations=0, best_speedup=None,
                                    reason=why), force=True)
    except (GithubException, CommentError) as e:
        print(f"::warning title=kernelpro::could not write the failure to the sticky comment either: {e}")


def say_done(sticky: Any, reason: str, kernels: Sequence[Any] = (), snippet: Callable[[Any], str] | None = None,
             detail: str = "", markdown: bool = False) -> None:
    """The final comment when nothing runs; kernels without a harness get a ready-to-paste snippet.
    ``detail``: text shown verbatim in a code block (a configuration error), never escaped into entities;
    ``markdown``: ``reason`` is the bot's own Markdown (fixed text, hex SHAs, the configured label)."""
    body = progress_body("done", kernel_i=0, kernels=0, evaluations=0, best_speedup=None,
                         **({"reason_md": reason} if markdown else {"reason": reason}))
    if detail:
        body += "\n" + code_block(detail) + "\n"
    if kernels and snippet is not None:
        body += ("\n\nThese changed kernels have no harness yet. Add this to `.kernelpro.yml` on the base branch "
                 "and fill in the marked fields:\n\n" + code_block(snippet(kernels), "yaml"))
    sticky.update(body, force=True)


def write_outputs(settings: Settings, values: dict[str, str]) -> None:
    """The step's outputs (GITHUB_OUTPUT), for the jobs after it."""
    if not settings.github_output:
        return
    with open(settings.github_output, "a", encoding="utf-8") as f:
        for k, v in values.items():
            f.write(f"{k}={v}\n")


def summary(settings: Settings, text: str) -> None:
    """``text`` in the job summary (GITHUB_STEP_SUMMARY), when there is one."""
    if settings.step_summary:
        with open(settings.step_summary, "a", encoding="utf-8") as f:
            f.write(text + "\n")


def fetch_pr(checkout: Path, pr: int, head_sha: str, token: str | None = None,
             base: tuple[str, str] | None = None) -> None:
    """Bring the PR's commits in as git data (never checked out, never run); works for forks too.
    ``base``: (branch, sha) of the PR's base, fetched too when the checkout predates it (the base
    branch moved after the job's checkout). The checkout keeps no credentials
    (persist-credentials: false), so a private repository needs the token for these fetches,
    passed as an HTTP header and never written to the git config."""
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
        repo.git.execute(["git", "-c", f"http.extraheader=AUTHORIZATION: basic {basic}", "fetch", *args])
    else:
        repo.git.fetch(*args)
