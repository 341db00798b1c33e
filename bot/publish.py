"""The follow-up pull request: one branch per PR, force-pushed, one PR, idempotent.

Runs in the trusted publish job: no code from the pull request runs here. The results were read
by :func:`kernelpro.bot.artifact.load_results` (untrusted data, checked) and written locally and
uploaded by the caller before this module makes any GitHub write, so a failed publish is rerun
from the artifact. Nothing here writes to the results directory.

What :func:`publish` does, in order (every step is safe to repeat):

1. **No winner** -> no branch, no PR: action ``comment-only`` with
   :func:`~kernelpro.bot.body.render_no_pr_comment` (the baseline stands, and why).
2. **Fork PR** -> action ``comment-only``. *Decision:* the bot's token cannot push to a fork, and
   opening a PR against the target branch that carries the fork's unreviewed commits plus the
   optimization would put PR code on a branch of the base repository under the bot's name. So
   no branch and no PR: the sticky comment carries the verified patch (in a ``diff`` block the
   author can ``git apply``) and the report; the author pushes it to their branch if they want it.
3. Re-check every target's patch with :func:`~kernelpro.bot.artifact.check_patch` against the
   trusted allowed files (defense in depth), then **recompute it**: the winner's setting
   (``params``, ``<file>::<knob>`` -> value) applied to the PR head's files, read from git, with
   the tuner's own code (:mod:`kernelpro.setting`), gives the patch a tuner run must have made. A
   patch that differs is refused when the trusted configuration says the tuner wrote the
   candidates (``programmer`` is not ``llm``); with ``llm`` it is a **model-written** patch: the
   PR body, the fork comment, the job summary and the reason say so in their first line
   (:func:`~kernelpro.bot.body.model_label`) and the follow-up PR is opened as a draft (an open
   non-draft one is closed and replaced by a draft). The fork case (step 2) comes after this.
   Then in the GitPython working copy ``checkout``:
   fetch the PR head commit from ``push_url``; look at the remote branch ``kernelpro/pr-<N>``: if
   its tip was not authored by the bot (``bot_email``), a human has pushed to it and the bot stops
   touching it (action ``skipped``); otherwise apply the patches with ``git apply --index`` on a
   detached checkout of the PR head (then check that only the allowed files changed), commit as
   the bot, and force-push with a lease on the tip seen (a human push in between makes the push
   fail instead of being overwritten). Hooks are disabled for every git command.
4. Find the open PR for ``head=<owner>:kernelpro/pr-<N>`` (paginated) and edit its title and body
   (``updated``), or create it with base = the PR's head branch (``created``). A 422 "already
   exists" (a concurrent run won the race) is resolved by finding and editing that PR.

A **closed** follow-up PR (no open one for the branch; the newest closed one decides):

- *closed without merging* by a person = **declined**. A label run (or a rerun of one) for the
  same PR head it was built on (recorded in its body as a hidden ``kernelpro:head`` line)
  neither pushes nor reopens anything (action ``declined``; the comment says how to ask again).
  ``/kernelpro retry`` from a writer (``retry=True``) is that request: the branch is force-pushed
  and a **new** PR is opened (GitHub cannot reopen a PR whose branch was force-pushed), whose body
  links the old one. A label on a *new* head is a new approval and does the same.
- *merged* = done: any later run starts a fresh PR from the same branch, linking the merged one.

Failures raise :class:`PublishError` with a clear message; the state left behind (at most a pushed
branch without a PR) is what the next run starts from, so rerunning succeeds.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import git
from github import GithubException
from github.PullRequest import PullRequest
from github.Repository import Repository

from kernelpro import __version__
from kernelpro.setting import KnobError, apply_setting, split_setting, unified_diff

from .artifact import ArtifactError, Results, TargetResults, check_patch
from .body import (
    BODY_LIMIT,
    MODEL_WRITTEN,
    code_block,
    md,
    model_label,
    render_body,
    render_comment,
    render_no_pr_comment,
    render_summary_comment,
)
from .comment import StickyComment

__all__ = ["BRANCH_PREFIX", "PublishError", "Published", "branch_for", "publish", "title_for"]

BRANCH_PREFIX = "kernelpro/pr-"
"""The follow-up branch of PR N is ``kernelpro/pr-N``."""
_BUDGET = BODY_LIMIT - 1_536
_TITLE_MAX = 200

Action = Literal["created", "updated", "skipped", "comment-only", "declined"]
_HEAD_MARK = re.compile(r"<!-- kernelpro:head=([0-9a-f]{40}(?:[0-9a-f]{24})?) -->")


class PublishError(RuntimeError):
    """Publishing failed; the message says where, and that a rerun starts over safely."""


@dataclass(frozen=True)
class Published:
    """What :func:`publish` did."""

    pr_url: str | None
    """The follow-up PR (created or updated); None when there is none."""
    branch: str | None
    """``kernelpro/pr-<N>`` when a branch is involved (also when skipped); None otherwise."""
    action: Action
    """created | updated | skipped | comment-only | declined."""
    reason: str
    """Why, in a sentence (shown in the progress comment and the log)."""
    comment: str | None = None
    """For ``comment-only``: the Markdown for the sticky comment (posted when a sticky was given)."""
    commit: str | None = None
    """The commit pushed to the branch, when one was."""
    model_written: tuple[str, ...] = ()
    """Targets whose patch a model wrote (publish could not recompute it); labelled, draft PR."""
    warnings: tuple[str, ...] = ()
    """What could not be added to the follow-up PR (labels, reviewers), each with GitHub's answer."""


def branch_for(pr_number: int) -> str:
    """The one follow-up branch of PR ``pr_number``."""
    return f"{BRANCH_PREFIX}{int(pr_number)}"


def title_for(results: Results, pr_number: int) -> str:
    """``kernelpro: <speedup>x faster <kernels> for #<N>``; a run without a GPU claims no speed."""
    winners = results.winners
    speedups = [t.winner.speedup for t in winners if t.winner is not None]
    if not speedups:
        return f"kernelpro: no faster kernels for #{int(pr_number)}"
    if len(speedups) == 1:
        x = f"{speedups[0]:.2f}x"
    else:
        geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups))
        x = f"{geo:.2f}x (geometric mean)"
    names = [re.sub(r"[^A-Za-z0-9._-]", "", t.name) for t in winners]
    suffix = f" for #{int(pr_number)}"
    if not all(t.gpu_timings for t in winners):
        # Timed in Triton's CPU interpreter: correct, but no speed on a GPU can be claimed.
        kernels = ", ".join(names) if len(names) <= 3 else f"{len(names)} kernels"
        return f"kernelpro: verified launch settings for {kernels}{suffix} (CPU interpreter, GPU speed unknown)"[:_TITLE_MAX]
    kernels = ", ".join(names)
    if len(f"kernelpro: {x} faster {kernels}{suffix}") > _TITLE_MAX:
        kernels = f"{len(names)} kernels"
    return f"kernelpro: {x} faster {kernels}{suffix}"


# --------------------------------------------------------------------------- git


def _redact(url: str) -> str:
    """``url`` without credentials (push URLs carry a token)."""
    try:
        s = urlsplit(url)
    except ValueError:
        return "<url>"
    if s.username or s.password:
        host = s.hostname or ""
        if s.port:
            host += f":{s.port}"
        return urlunsplit((s.scheme, "***@" + host, s.path, s.query, s.fragment))
    return url


class _Git:
    """git in ``checkout`` with hooks off, no prompts, and errors that never show credentials."""

    def __init__(self, checkout: Path, push_url: str) -> None:
        try:
            self.repo = git.Repo(checkout)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise PublishError(f"{checkout} is not a git working copy") from exc
        self.url = push_url
        self.secret_free = _redact(push_url)

    def __call__(self, *args: str) -> str:
        env = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
        try:
            out: str = self.repo.git.execute(
                ["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args],
                env={**os.environ, **env},
            )
        except git.GitCommandError as exc:
            msg = f"{exc.stderr or exc.stdout or exc}".strip().replace(self.url, self.secret_free)
            cmd = " ".join(a.replace(self.url, self.secret_free) for a in args)
            raise PublishError(f"git {cmd} failed: {msg}") from None
        return out


def _remote_tip(g: _Git, branch: str) -> str | None:
    out = g("ls-remote", "--", g.url, f"refs/heads/{branch}")
    for line in out.splitlines():
        sha, _, ref = line.partition("\t")
        if ref == f"refs/heads/{branch}":
            return sha
    return None


def _fetch(g: _Git, ref: str, local: str) -> None:
    g("fetch", "--no-tags", "--no-recurse-submodules", g.url, f"+{ref}:{local}")


def _has_commit(g: _Git, sha: str) -> bool:
    try:
        g("cat-file", "-e", f"{sha}^{{commit}}")
    except PublishError:
        return False
    return True


def _head_text(g: _Git, sha: str, path: str) -> str:
    """A regular file of commit ``sha`` as text, from git objects (never the work tree)."""
    try:
        blob = g.repo.commit(sha).tree[path]
    except (KeyError, ValueError, git.BadName) as exc:
        raise KnobError(f"{path} is not a file of the PR head {sha[:12]}") from exc
    if blob.type != "blob" or blob.mode not in (0o100644, 0o100755):
        raise KnobError(f"{path} is not a regular file in the PR head {sha[:12]}")
    data: bytes = blob.data_stream.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise KnobError(f"{path} in the PR head is not UTF-8 text") from exc


Launch = tuple[str | None, tuple[str, ...] | None]
"""A CUDA target's kernel name and block expressions (from the trusted configuration)."""


def recompute(g: _Git, head_sha: str, t: TargetResults, files: Sequence[str],
              launch: Launch = (None, None)) -> tuple[str | None, str]:
    """The patch the winner of ``t`` must be if the tuner made it: its setting applied to the PR
    head's ``files`` (read from git) with the tuner's code, as ``kernelpro optimize`` writes it.
    Returns (patch, "") or (None, why it cannot be derived)."""
    assert t.winner is not None
    try:
        setting = split_setting(t.winner.params, files)
        if not setting:
            return None, "the winner records no tuner parameters"
        texts = {p: _head_text(g, head_sha, p) for p in setting}
        new = {p: apply_setting(p, texts[p], v, *launch, lineage=True) for p, v in setting.items()}
    except KnobError as exc:
        return None, md(str(exc), 300)
    changed = {p for p in setting if new[p] != texts[p]}
    if changed != set(t.patch_files):
        return None, (f"the winner's parameters change {', '.join(sorted(md(p, 100) for p in changed)) or 'nothing'}, "
                      f"the patch changes {', '.join(md(p, 100) for p in t.patch_files)}")
    return "".join(unified_diff(p, texts[p], new[p]) for p in t.patch_files), ""


# --------------------------------------------------------------------------- comments


def _on_gpu(results: Results) -> bool:
    """Whether every winner was timed on a GPU: only then may the bot's text call a kernel faster."""
    return bool(results.winners) and all(t.gpu_timings for t in results.winners)


def _fork_comment(results: Results, patch: str, pr_number: int, label: str = "", *,
                  head_sha: str = "", run_url: str | None = None) -> str:
    """The sticky comment of a fork's pull request: the patch to apply and the same summary as any
    final comment (never the follow-up PR's body, which speaks of a pull request that does not exist)."""
    summary = render_summary_comment(results, pr_number=pr_number, head_sha=head_sha, run_url=run_url)
    summary = summary.split("\n", 2)[2] if summary.startswith("### kernelpro\n") else summary
    for block in (code_block(patch, "diff"), ""):
        text = render_comment("fork", pr=int(pr_number), patch=block, summary=summary,
                              model_label=label or None, gpu=_on_gpu(results))
        if len(text) <= _BUDGET:
            return text
    return text[:_BUDGET]


def _post(sticky: StickyComment | None, text: str) -> None:
    if sticky is not None:
        sticky.update(text, force=True)


# --------------------------------------------------------------------------- GitHub


def _gh_error(what: str, exc: GithubException, *, pushed: bool = True) -> PublishError:
    msg = exc.data.get("message") if isinstance(exc.data, dict) else None
    errors = exc.data.get("errors") if isinstance(exc.data, dict) else None
    detail = f" ({md(msg, 200)})" if msg else ""
    if isinstance(errors, list) and errors:
        detail += f" {md(str(errors[0]), 200)}"
    state = "the branch is in place, and " if pushed else "nothing was pushed yet; "
    return PublishError(
        f"{what}: GitHub answered {exc.status}{detail}; {state}rerunning "
        "the publish step from the results artifact finishes the job"
    )


def _pr_from(repo: Repository, branch: str, state: str) -> PullRequest | None:
    """The newest PR in ``state`` from ``branch`` of this repository (GitHub lists the newest first)."""
    owner = repo.full_name.split("/")[0]
    for pr in repo.get_pulls(state=state, head=f"{owner}:{branch}"):
        if pr.head.ref == branch:
            return pr
    return None


def head_marker(sha: str) -> str:
    """The hidden line in a follow-up PR's body naming the PR head it was built on."""
    return f"<!-- kernelpro:head={sha} -->"


def _close_ready(repo: Repository, branch: str) -> int | None:
    """Before model-written code is pushed to ``branch``: a ready (non-draft) pull request from it is
    closed, so no ready pull request ever shows model code (the REST API cannot turn it into a draft;
    a draft replaces it). Its number, or None when there was none; closing that fails stops the
    publish before the push (an audit found the push first, then a failed close, left model code in a
    ready pull request whose body said tuner-verified)."""
    try:
        existing = _pr_from(repo, branch, "open")
    except GithubException as exc:
        raise _gh_error(f"looking for an open pull request from {branch}", exc) from exc
    if existing is None or existing.draft:
        return None
    try:
        existing.edit(state="closed")
    except GithubException as exc:
        raise _gh_error(f"closing #{existing.number} to replace it with a draft", exc) from exc
    return existing.number


def _open_or_update(
    repo: Repository, *, branch: str, base: str, title: str, body: str, draft: bool = False
) -> tuple[PullRequest, Action]:
    try:
        existing = _pr_from(repo, branch, "open")
    except GithubException as exc:
        raise _gh_error(f"looking for an open pull request from {branch}", exc) from exc
    if existing is not None and draft and not existing.draft:
        # _close_ready closed it before the push; one reopened since is closed now, as it was.
        _close_ready(repo, branch)
        body += f"\nReplaces #{existing.number}, which was not a draft.\n"
        existing = None
    if existing is None:
        try:
            created = repo.create_pull(
                base=base, head=branch, title=title, body=body, maintainer_can_modify=False,
                draft=draft,
            )
            return created, "created"
        except GithubException as exc:
            if exc.status != 422:
                raise _gh_error(f"opening the pull request from {branch}", exc) from exc
            try:  # "A pull request already exists": a concurrent run opened it
                existing = _pr_from(repo, branch, "open")
            except GithubException:
                existing = None
            if existing is None:
                raise _gh_error(f"opening the pull request from {branch}", exc) from exc
    try:
        existing.edit(title=title, body=body)
    except GithubException as exc:
        raise _gh_error(f"updating pull request #{existing.number}", exc) from exc
    return existing, "updated"


# --------------------------------------------------------------------------- publish


def publish(
    repo: Repository,
    *,
    pr_number: int,
    results: Results,
    checkout: Path,
    push_url: str,
    bot_name: str,
    bot_email: str,
    base_branch_of_pr: str,
    pr_head_branch: str,
    pr_head_sha: str,
    is_fork: bool,
    allowed_files: Mapping[str, Sequence[str]] | None = None,
    launches: Mapping[str, Launch] | None = None,
    sticky: StickyComment | None = None,
    run_url: str | None = None,
    kernelpro_version: str = __version__,
    programmer: str = "unknown",
    model: str | None = None,
    retry: bool = False,
    base_sha: str = "",
    labels: Sequence[str] = (),
    reviewers: Sequence[str] = (),
) -> Published:
    """Publish ``results`` for PR ``pr_number`` (see the module docstring for every case).

    ``allowed_files``: target name -> kernel files from the trusted base-branch configuration;
    every patch is re-checked against it (without it, against the files the loader recorded).
    ``sticky``: when given, comment-only outcomes are posted to it (forced update).
    ``launches``: target name -> its raw CUDA kernel and block (trusted configuration), for
    recomputing CUDA tuner patches. ``programmer``: who wrote the candidates, from the trusted
    workflow configuration (never the artifact): anything but ``llm`` means every winner's patch
    must be the one its parameters give, and any other is refused.
    ``base_branch_of_pr`` is the branch the PR targets, named in the commit message.
    ``base_sha``: the PR's base commit, for the reproduction commands. ``labels`` and
    ``reviewers`` (logins, or ``org/team``) go on the follow-up PR; refusals are ``warnings``.
    ``retry``: the run comes from ``/kernelpro retry`` (a writer's explicit request), which
    publishes again after a declined (closed unmerged) follow-up PR.
    Raises :class:`PublishError` (git or GitHub failures, a patch that does not apply) and
    :class:`~kernelpro.bot.artifact.ArtifactError` (a patch that fails the re-check).
    """
    n = int(pr_number)
    if not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", pr_head_sha or ""):
        raise PublishError(f"PR head {pr_head_sha[:80]!r} is not a full commit SHA")
    branch = branch_for(n)

    if not results.winners:
        text = render_no_pr_comment(results, run_url=run_url, pr_number=n, head_sha=pr_head_sha)
        _post(sticky, text)
        return Published(None, None, "comment-only", "no candidate beat the PR's kernel", text)

    # Defense in depth: the loader checked these against the trusted configuration already.
    patches: list[tuple[str, str]] = []
    allowed_all: set[str] = set()
    for t in results.winners:
        allowed = allowed_files.get(t.name) if allowed_files is not None else t.patch_files
        if allowed is None:
            raise ArtifactError(f"{t.name}/patch.diff", "its target is not in the configuration")
        files = check_patch(t.patch, list(allowed), f"{t.name}/patch.diff")
        if not files:
            raise ArtifactError(f"{t.name}/patch.diff", "a verified winner with an empty patch")
        patches.append((t.name, t.patch))
        allowed_all.update(files)

    # Recompute: the optimize job ran the PR's code, so its patch is only what it says it is if
    # publish can derive it from the head's text (git) and the winner's parameters.
    g = _Git(Path(checkout), push_url)
    if not _has_commit(g, pr_head_sha) and not is_fork:
        _fetch(g, f"refs/heads/{pr_head_branch}", f"refs/kernelpro/head/{n}")
    if not _has_commit(g, pr_head_sha):
        raise PublishError(
            f"the PR head {pr_head_sha} is no longer on {pr_head_branch} (a new push?); "
            "label the pull request again or comment /kernelpro retry"
        )
    model_written: list[str] = []
    for t in results.winners:
        mine = list(allowed_files.get(t.name) or ()) if allowed_files is not None else list(t.patch_files)
        derived, why = recompute(g, pr_head_sha, t, mine, (launches or {}).get(t.name, (None, None)))
        if derived is not None and derived == t.patch:
            continue
        if programmer != "llm":
            raise ArtifactError(
                f"{t.name}/patch.diff",
                f"is not the patch the winner's parameters give on the PR head {pr_head_sha[:12]} "
                f"({why or 'the patch differs from the one publish derived'}); the candidates of this "
                "run were written by the tuner, whose patches publish recomputes and must match exactly",
            )
        model_written.append(t.name)
    label = model_label(model_written, gpu=_on_gpu(results)) if model_written else ""

    body = render_body(results, pr_number=n, head_sha=pr_head_sha, run_url=run_url,
                       kernelpro_version=kernelpro_version, programmer=programmer,
                       model=model, model_written=model_written, base_sha=base_sha)
    title = title_for(results, n)

    if is_fork:
        text = _fork_comment(results, results.patch, n, label, head_sha=pr_head_sha, run_url=run_url)
        _post(sticky, text)
        return Published(
            None,
            None,
            "comment-only",
            (f"{MODEL_WRITTEN} " if label else "") + "the pull request comes from a fork, which the bot cannot "
            "push to; the patch is in the comment",
            text,
            model_written=tuple(model_written),
        )

    # A closed follow-up PR and no open one: declined or merged (module docstring).
    try:
        is_open = _pr_from(repo, branch, "open") is not None
        closed = _pr_from(repo, branch, "closed")
    except GithubException as exc:
        raise _gh_error(f"looking for an open pull request from {branch}", exc, pushed=False) from exc
    note = ""
    if closed is not None and closed.merged_at is not None:
        note = f"Follows #{closed.number}, which was merged."
    elif closed is not None:
        m = _HEAD_MARK.search(closed.body or "")
        if not is_open and not retry and (m is None or m.group(1) == pr_head_sha):
            return Published(None, branch, "declined",
                             f"the follow-up pull request #{closed.number} was closed without merging, so kernelpro "
                             f"treats it as declined and publishes nothing again for the same head "
                             f"({pr_head_sha[:10]}); comment `/kernelpro retry` to open a new one")
        note = (f"Supersedes #{closed.number}, which was closed without merging (GitHub cannot reopen a pull "
                "request whose branch was force-pushed, so this is a new one).")
    if note and label:  # the label stays the first line
        body = body.replace(label, f"{label}\n\n{note}", 1)
    elif note:
        body = f"{note}\n\n{body}"
    body += f"\n{head_marker(pr_head_sha)}\n"

    # The remote branch: a human's commit on it means hands off.
    tip = _remote_tip(g, branch)
    if tip is not None:
        _fetch(g, f"refs/heads/{branch}", f"refs/kernelpro/remote/{n}")
        author = g("log", "-1", "--format=%ae", tip).strip()
        if author.lower() != bot_email.lower():
            return Published(
                None,
                branch,
                "skipped",
                f"someone else pushed to {branch} (its last commit is by "
                f"{md(author, 100)}), so the bot leaves it alone; delete the branch to let "
                "kernelpro publish again",
            )

    g("checkout", "--quiet", "--force", "--detach", pr_head_sha)
    # No `git clean`: the caller may keep the results directory inside the checkout. Untracked
    # files are harmless, since only the index (the applied patches) is committed.
    with tempfile.TemporaryDirectory(prefix="kernelpro-patch-") as tmp:
        for name, patch in patches:
            p = Path(tmp) / f"{name}.diff"
            p.write_text(patch, encoding="utf-8")
            try:
                g("apply", "--index", "--whitespace=nowarn", "--", str(p))
            except PublishError as exc:
                g("reset", "--quiet", "--hard", pr_head_sha)
                raise PublishError(
                    f"the patch of {name} does not apply to {pr_head_sha[:12]}: {exc}"
                ) from None
    changed = set(g("diff", "--cached", "--name-only", "-z").split("\0")) - {""}
    if not changed or not changed <= allowed_all:
        g("reset", "--quiet", "--hard", pr_head_sha)
        raise PublishError(
            f"applying the patches changed {sorted(changed)[:5]}, not only {sorted(allowed_all)}"
        )

    actor = git.Actor(bot_name, bot_email)
    message = (
        f"{title}\n\n" + (f"Code written by a model ({', '.join(model_written)}), verified by measurement: "
                           "review it as code.\n" if model_written else "")
        + f"Applied on top of {pr_head_sha} ({pr_head_branch}, PR #{n} into "
        f"{base_branch_of_pr}).\nGenerated by kernelpro {kernelpro_version}."
    )
    commit = g.repo.index.commit(
        message, author=actor, committer=actor, skip_hooks=True, parent_commits=None
    )
    sha = commit.hexsha
    if model_written and (replaced := _close_ready(repo, branch)) is not None:
        body += f"\nReplaces #{replaced}, which was not a draft.\n"
    lease = f"refs/heads/{branch}:{tip or ''}"
    g("push", "--quiet", "--no-verify", f"--force-with-lease={lease}", "--", g.url,
      f"{sha}:refs/heads/{branch}")

    pr, action = _open_or_update(repo, branch=branch, base=pr_head_branch, title=title, body=body,
                                 draft=bool(model_written))
    reason = "opened the follow-up pull request" if action == "created" else (
        "updated the follow-up pull request (branch force-pushed)")
    if model_written:
        reason = f"{MODEL_WRITTEN} {reason} as a draft"
    warnings = _triage(pr, labels, reviewers)
    return Published(pr.html_url, branch, action, reason, None, sha, tuple(model_written), warnings)


def _triage(pr: PullRequest, labels: Sequence[str], reviewers: Sequence[str]) -> tuple[str, ...]:
    """The configured labels and reviewers on the follow-up PR. They help a maintainer find it, and
    the PR stands without them: a refusal (an unknown team, no permission) is a warning, not a failure."""
    warnings: list[str] = []
    if labels:
        try:
            # PyGithub's add_to_labels sends a bare list; the documented body is {"labels": [...]}.
            pr._requester.requestJsonAndCheck("POST", f"{pr.issue_url}/labels", input={"labels": list(labels)})
        except GithubException as exc:
            warnings.append(f"labels {', '.join(labels)}: GitHub answered {exc.status}")
    users = [r for r in reviewers if "/" not in r]
    teams = [r.split("/", 1)[1] for r in reviewers if "/" in r]  # org/team -> the team's slug
    if users or teams:
        try:
            pr.create_review_request(reviewers=users, team_reviewers=teams)
        except GithubException as exc:
            warnings.append(f"reviewers {', '.join(reviewers)}: GitHub answered {exc.status}")
    return tuple(warnings)
