"""Replies to the ``/kernelpro`` commands that start no optimization: help, status, cancel, and
every command that cannot be used (answered on the pull request with its fix, never silently).

Who may do what: ``help`` and ``status`` anyone (they only read what the PR's comments already
show); ``cancel`` and ``retry`` need write access, like the label. ``cancel`` stops the workflow
run the sticky comment names as live (its ``kernelpro:live run=`` marker, written by the plan job
of the run that is optimizing), through the Actions API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from github import GithubException

from kernelpro.templates import environment

from .body import code_block, md
from .comment import last_line
from .event import MAX_BUDGET, Trigger

__all__ = ["Answered", "live_run", "reply", "reply_text"]

_LIVE = re.compile(r"<!-- kernelpro:live run=([0-9]{1,20}) -->")


def reply_text(kind: str, **ctx: Any) -> str:
    """A command reply from ``command.md.j2``; every value in ``ctx`` must already be escaped."""
    base: dict[str, Any] = {"repo": "", "label": "optimize-kernels", "max_budget": MAX_BUDGET, "text": "",
                            "error": "", "fix": ""}
    return environment().get_template("command.md.j2").render(**{**base, **ctx, "kind": kind})


@dataclass(frozen=True)
class Answered:
    """What :func:`reply` did."""

    log: str
    """What was done, for the job log."""
    cancelled: int | None = None
    """The workflow run GitHub accepted to cancel (``/kernelpro cancel``); None when none was."""


def live_run(sticky_body: str | None) -> int | None:
    """The run id the sticky comment names as optimizing now, or None (no run is live)."""
    m = _LIVE.fullmatch(last_line(sticky_body))
    return int(m.group(1)) if m else None


def _fix(error: str, known: list[str]) -> str:
    head = error.split("; usage", 1)[0]  # the usage names every option: match on what went wrong
    if "unknown command" in head:
        return "Use one of the commands below, on a line of its own."
    if "budget" in head:
        return f"Give `--budget` a whole number of evaluations from 1 to {MAX_BUDGET}, e.g. `--budget 64`."
    if "kernel" in head:
        names = ", ".join(f"`{n}`" for n in known if re.fullmatch(r"[A-Za-z0-9._:/-]{1,100}", n))
        return ("Name a kernel configured in the base branch's `.kernelpro.yml`"
                + (f": {names}." if names else " (its `targets`)."))
    if "SHA" in head or "commit" in head:
        return "Name the full 40-character commit SHA of the pull request's head, or leave it out."
    return "Correct the command as the usage above says."


def reply(repo: Any, trigger: Trigger, *, sticky_body: str | None, may_write: bool, label: str,
          known_kernels: list[str] | None = None) -> Answered:
    """Answer ``trigger`` (help, status, cancel or invalid) on its pull request; returns what was
    done. GitHub errors on the cancel itself are answered too, not raised."""
    issue = repo.get_issue(trigger.pr)
    cancelled: int | None = None
    who = md(trigger.repo, 100)
    if trigger.kind == "help":
        text = reply_text("help", repo=who, label=md(label, 50))
    elif trigger.kind == "status":
        run = live_run(sticky_body)
        link = f"https://github.com/{trigger.repo}/actions/runs/{run}" if run else ""
        if sticky_body is None:
            text = reply_text("status", text="kernelpro has not run on this pull request yet. Add the "
                              f"`{md(label, 50)}` label or comment `/kernelpro retry` to start it.")
        elif run:
            text = reply_text("status", text=f"optimizing now in [workflow run {run}]({link}); the progress "
                              "comment above is updated as kernels finish.")
        else:
            first = next((ln for ln in sticky_body.splitlines()[1:] if ln.strip() and not ln.startswith("###")), "")
            text = reply_text("status", text="no run is in progress. The last result, from the kernelpro comment "
                              f"above: {first[:300]}")
    elif trigger.kind == "cancel":
        run = live_run(sticky_body)
        if not may_write:
            text = reply_text("invalid", error=code_block("/kernelpro cancel: only people with write access "
                              f"to {trigger.repo} may stop a run"), fix="A maintainer can cancel it.")
        elif run is None:
            text = reply_text("status", text="no kernelpro run is in progress on this pull request, so there "
                              "is nothing to cancel.")
        else:
            try:
                status, _, _ = repo._requester.requestJson("POST", f"{repo.url}/actions/runs/{run}/cancel")
                ok = status in (202, 204)
                why = "" if ok else f"GitHub answered {status}"
            except GithubException as e:
                ok, why = False, f"GitHub answered {e.status}"
            link = f"https://github.com/{trigger.repo}/actions/runs/{run}"
            cancelled = run if ok else None
            text = (reply_text("cancelled", text=f"[workflow run {run}]({link}) was asked to stop; its jobs end "
                               f"within a minute. Comment `/kernelpro retry` to start again.")
                    if ok else reply_text("status", text=f"could not cancel [workflow run {run}]({link}) "
                                          f"({why}); cancel it from the Actions tab."))
    else:
        text = reply_text("invalid", error=code_block(trigger.error), fix=_fix(trigger.error, known_kernels or []))
    issue.create_comment(text)
    return Answered(f"answered /kernelpro {trigger.kind}", cancelled)
