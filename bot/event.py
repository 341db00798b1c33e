"""What a GitHub event asks the bot to do: a label approval, a ``/kernelpro retry``, or nothing.

Everything in a payload that a pull-request author or commenter wrote (titles, bodies, branch
names) is hostile text: it is only parsed here, never executed, expanded or passed to a shell.

- ``pull_request`` / ``labeled`` with the configured label -> a ``label`` Trigger bound to the head
  SHA in the event: the label approves that commit only, not commits pushed later.
- ``issue_comment`` / ``created`` on a pull request whose body has a line starting with
  ``/kernelpro retry`` (leading blanks allowed; quoted ``>`` lines and fenced code never count)
  -> a ``retry`` Trigger. The caller must check the commenter's permission
  (``kernelpro.bot.permission.can_retry``) before acting. A retry approves one commit, like the
  label: ``/kernelpro retry <sha>`` names it (the full SHA, as ``head_sha``); a bare one is bound
  to the commit the PR's head was when the comment was made (``comment_at``), which the caller
  establishes from the PR's timeline, and a head that moved since is not approved.
- Comments from the bot itself or any ``[bot]`` account, and everything else -> ``None``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "COMMAND",
    "DEFAULT_LABEL",
    "COMMANDS",
    "MAX_BUDGET",
    "USAGE",
    "EventError",
    "Trigger",
    "parse_command",
    "parse_event",
    "parse_event_file",
    "parse_verb",
]

DEFAULT_LABEL = "optimize-kernels"
"""The label whose addition approves a run."""
COMMAND = "/kernelpro retry"
"""The comment command that re-runs the bot."""
MAX_BUDGET = 10_000
"""The largest ``--budget`` accepted (evaluations per kernel)."""
USAGE = (f"usage: {COMMAND} [SHA] [--kernel NAME] [--budget N]  (SHA: the full 40-character commit to "
         f"optimize, by default the head when you comment; N: an integer from 1 to {MAX_BUDGET})")
"""Shown whenever a command cannot be parsed."""
MAX_EVENT_BYTES = 25 * 1024 * 1024
"""GitHub caps webhook payloads at 25 MB; a larger event file is refused."""

_KERNEL_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/\-]{0,199}")
_SHA_RE = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")
_FENCE_RE = re.compile(r"(`{3,}|~{3,})")


class EventError(ValueError):
    """An event or command that cannot be used; the message says why (and the usage)."""


@dataclass(frozen=True)
class Trigger:
    """A request to run the bot on one pull request."""

    kind: Literal["label", "retry", "help", "status", "cancel", "invalid"]
    """'label' (the approval label was added), 'retry', 'help', 'status' or 'cancel' (a
    ``/kernelpro <command>`` comment), 'invalid' (a ``/kernelpro`` line that cannot be used: ``error``)."""
    repo: str
    """Full name ``owner/name`` of the repository the event came from (the PR's base repository)."""
    pr: int
    """The pull request number."""
    head_sha: str | None
    """Head commit the label approved, or the one ``/kernelpro retry <sha>`` names; None for a bare
    retry (bound to the head when the comment was made: see ``comment_at``)."""
    base_sha: str | None
    """Base commit at labelling time; None for comments (fetch the PR)."""
    head_repo: str | None
    """Full name of the PR's head repository (a fork when != repo); None for comments or a deleted fork."""
    sender: str
    """Login of the user who added the label or wrote the comment."""
    label: str | None = None
    """The label that was added (label triggers only)."""
    comment_id: int | None = None
    """Id of the command comment, for reactions and replies (retry triggers only)."""
    kernel: str | None = None
    """Only this kernel (``--kernel NAME``); None means every changed kernel."""
    budget: int | None = None
    """Evaluation budget per kernel (``--budget N``); None means the configured default."""
    comment_at: str | None = None
    """When the command comment was created (GitHub's ISO time; retry triggers only)."""
    error: str = ""
    """Why an 'invalid' command cannot be used, and its fix (plain text, the usage included)."""

    @property
    def is_fork(self) -> bool | None:
        """Whether the head lives in another repository; None when not known from the event."""
        return None if self.head_repo is None else self.head_repo.lower() != self.repo.lower()


# --------------------------------------------------------------------------- payload access


def _get(payload: Mapping[str, Any], dotted: str) -> Any:
    node: Any = payload
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            raise EventError(f"malformed event payload: missing {dotted}")
        node = node[key]
    return node


def _str(payload: Mapping[str, Any], dotted: str) -> str:
    value = _get(payload, dotted)
    if not isinstance(value, str) or not value:
        raise EventError(f"malformed event payload: {dotted} is not a non-empty string")
    return value


def _int(payload: Mapping[str, Any], dotted: str) -> int:
    value = _get(payload, dotted)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise EventError(f"malformed event payload: {dotted} is not a positive integer")
    return value


def _sha(payload: Mapping[str, Any], dotted: str) -> str:
    value = _str(payload, dotted)
    if not _SHA_RE.fullmatch(value):
        raise EventError(f"malformed event payload: {dotted} is not a commit SHA")
    return value


def _is_bot(user: Any, bot_login: str) -> bool:
    if not isinstance(user, Mapping):
        return False
    login = user.get("login")
    return user.get("type") == "Bot" or (
        isinstance(login, str) and (login == bot_login or login.endswith("[bot]"))
    )


# --------------------------------------------------------------------------- the command


def _command_lines(body: str) -> list[str]:
    """Lines of ``body`` outside fenced code and block quotes, with leading blanks removed."""
    lines: list[str] = []
    fence: str | None = None
    for raw in body.splitlines():
        line = raw.lstrip(" \t")
        m = _FENCE_RE.match(line)
        if fence is not None:
            # A fence closes with the same character, at least as long, and nothing else after it.
            if (
                m
                and m.group(1)[0] == fence[0]
                and len(m.group(1)) >= len(fence)
                and not line[len(m.group(1)) :].strip()
            ):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        if line.startswith(">"):
            continue
        lines.append(line)
    return lines


def parse_command(body: str) -> tuple[str | None, int | None, str | None] | None:
    """``(kernel, budget, sha)`` of the first ``/kernelpro retry`` line of ``body``, or None if none.

    Raises EventError (with the usage) for unknown arguments or a bad value.
    """
    for line in _command_lines(body):
        if not line.startswith(COMMAND):
            continue
        rest = line[len(COMMAND) :]
        if rest and not rest[0].isspace():
            continue  # '/kernelpro retryfoo' is another word, not the command
        return _parse_args(rest.split())
    return None


COMMANDS = ("help", "status", "cancel", "retry")
"""The ``/kernelpro`` commands, in the order help lists them."""
_PREFIX = "/kernelpro"


def parse_verb(body: str) -> tuple[str, str] | None:
    """``(command, the rest of its line)`` of the first ``/kernelpro`` line of ``body`` outside
    quotes and fenced code, or None. The command is whatever word follows, known or not."""
    for line in _command_lines(body):
        if not line.startswith(_PREFIX):
            continue
        rest = line[len(_PREFIX):]
        if rest and not rest[0].isspace():
            continue  # '/kernelprox' is another word
        verb, _, tail = rest.strip().partition(" ")
        return verb, tail
    return None


def _parse_args(args: list[str]) -> tuple[str | None, int | None, str | None]:
    kernel: str | None = None
    budget: int | None = None
    sha: str | None = None
    seen: set[str] = set()
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            if sha is not None:
                raise EventError(f"more than one commit given; {USAGE}")
            if not _SHA_RE.fullmatch(arg.lower()):
                raise EventError(f"{arg[:40]!r} is not a full commit SHA (40 hexadecimal characters); {USAGE}")
            sha = arg.lower()
            i += 1
            continue
        name, eq, value = arg.partition("=")
        if name not in ("--kernel", "--budget"):
            raise EventError(f"unknown argument {arg[:40]!r}; {USAGE}")
        if name in seen:
            raise EventError(f"{name} given twice; {USAGE}")
        seen.add(name)
        if not eq:
            if i + 1 >= len(args):
                raise EventError(f"{name} needs a value; {USAGE}")
            i += 1
            value = args[i]
        if name == "--kernel":
            if not _KERNEL_RE.fullmatch(value):
                raise EventError(f"bad kernel name {value[:40]!r}; {USAGE}")
            kernel = value
        else:
            if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= MAX_BUDGET:
                raise EventError(f"bad budget {value[:40]!r}; {USAGE}")
            budget = int(value)
        i += 1
    return kernel, budget, sha


# --------------------------------------------------------------------------- events


def parse_event(
    name: str,
    payload: Mapping[str, Any],
    *,
    label: str = DEFAULT_LABEL,
    bot_login: str = "github-actions[bot]",
) -> Trigger | None:
    """The Trigger that event ``name`` (``GITHUB_EVENT_NAME``) with ``payload`` asks for, if any.

    Raises EventError for a malformed payload of a relevant event, or a bad retry command.
    """
    if not isinstance(payload, Mapping):
        raise EventError("malformed event payload: not a JSON object")
    action = payload.get("action")
    if name == "pull_request" and action == "labeled":
        return _labeled(payload, label, bot_login)
    if name == "issue_comment" and action == "created":
        return _comment(payload, bot_login)
    return None


def _labeled(payload: Mapping[str, Any], label: str, bot_login: str) -> Trigger | None:
    added = payload.get("label")
    if not isinstance(added, Mapping) or not isinstance(added.get("name"), str):
        return None
    # GitHub label names are unique regardless of case.
    if added["name"].casefold() != label.casefold():
        return None
    sender = payload.get("sender")
    if isinstance(sender, Mapping) and sender.get("login") == bot_login:
        return None  # the bot's own action
    head_repo = _get(payload, "pull_request.head.repo")
    return Trigger(
        kind="label",
        repo=_str(payload, "repository.full_name"),
        pr=_int(payload, "pull_request.number"),
        head_sha=_sha(payload, "pull_request.head.sha"),
        base_sha=_sha(payload, "pull_request.base.sha"),
        head_repo=_str(payload, "pull_request.head.repo.full_name") if head_repo else None,
        sender=_str(payload, "sender.login"),
        label=added["name"],
    )


def _comment(payload: Mapping[str, Any], bot_login: str) -> Trigger | None:
    issue = payload.get("issue")
    if not isinstance(issue, Mapping) or not issue.get("pull_request"):
        return None  # a plain issue, not a pull request
    comment = payload.get("comment")
    if not isinstance(comment, Mapping):
        return None
    if _is_bot(payload.get("sender"), bot_login) or _is_bot(comment.get("user"), bot_login):
        return None
    body = comment.get("body")
    if not isinstance(body, str):
        return None
    verb = parse_verb(body)
    if verb is None:
        return None
    created = comment.get("created_at")
    kind: Literal["retry", "help", "status", "cancel", "invalid"] = "retry"
    kernel, budget, sha, error = None, None, None, ""
    if verb[0] in ("", "help", "status", "cancel"):
        kind = verb[0] or "help"  # type: ignore[assignment]  # narrowed by the membership test
    else:
        try:
            parsed = parse_command(body) if verb[0] == "retry" else None
            if parsed is None:
                raise EventError(f"unknown command {verb[0][:40]!r}: the commands are {', '.join(COMMANDS)}; {USAGE}")
            kernel, budget, sha = parsed
        except EventError as e:  # answered on the pull request, with the fix
            kind, error = "invalid", str(e)
    return Trigger(
        kind=kind,
        repo=_str(payload, "repository.full_name"),
        pr=_int(payload, "issue.number"),
        head_sha=sha,
        base_sha=None,
        head_repo=None,
        sender=_str(payload, "sender.login"),
        comment_id=_int(payload, "comment.id"),
        kernel=kernel,
        budget=budget,
        comment_at=created if isinstance(created, str) else None,
        error=error,
    )


def parse_event_file(
    name: str,
    path: str | Path,
    *,
    label: str = DEFAULT_LABEL,
    bot_login: str = "github-actions[bot]",
) -> Trigger | None:
    """``parse_event`` on the JSON file at ``path`` (``GITHUB_EVENT_PATH``)."""
    p = Path(path)
    if not name:
        raise EventError("no event name (GITHUB_EVENT_NAME is empty): `kernelpro action` runs inside a GitHub "
                         "Actions job; to try it elsewhere set GITHUB_EVENT_NAME and GITHUB_EVENT_PATH")
    try:
        size = p.stat().st_size
        if size > MAX_EVENT_BYTES:
            raise EventError(f"event file {p} is {size} bytes, over the {MAX_EVENT_BYTES} limit")
        payload = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EventError(f"event file {p} does not exist (is GITHUB_EVENT_PATH set?)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise EventError(f"cannot read event file {p}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise EventError(f"event file {p} is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise EventError(f"event file {p} does not hold a JSON object")
    return parse_event(name, payload, label=label, bot_login=bot_login)
