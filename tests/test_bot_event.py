"""Events -> triggers, on GitHub's real webhook payloads, and the retry permission check through
PyGithub against the fake GitHub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from github import GithubException
from github_spec import valid_webhook_example, validate_webhook, webhook_examples, write_event

from kernelpro.bot.event import EventError, Trigger, parse_command, parse_event, parse_event_file
from kernelpro.bot.permission import can_retry, permission_of

if TYPE_CHECKING:
    from fake_github import FakeGitHub


def labeled(label: str = "optimize-kernels") -> dict[str, Any]:
    payload = valid_webhook_example("pull_request", "labeled")
    payload["label"]["name"] = label
    assert validate_webhook("pull_request", "labeled", payload) == []
    return payload


def pr_comment(body: str, *, login: str = "alice", user_type: str = "User") -> dict[str, Any]:
    """A real issue_comment.created example, on a pull request, with ``body``; schema-valid."""
    payload = valid_webhook_example("issue_comment", "created")
    repo = payload["repository"]["full_name"]
    number = payload["issue"]["number"]
    payload["issue"]["pull_request"] = {
        "url": f"https://api.github.com/repos/{repo}/pulls/{number}",
        "html_url": f"https://github.com/{repo}/pull/{number}",
        "diff_url": f"https://github.com/{repo}/pull/{number}.diff",
        "patch_url": f"https://github.com/{repo}/pull/{number}.patch",
        "merged_at": None,
    }
    payload["comment"]["body"] = body
    for user in (payload["sender"], payload["comment"]["user"]):
        user["login"] = login
        user["type"] = user_type
    assert validate_webhook("issue_comment", "created", payload) == []
    return payload


# --------------------------------------------------------------------------- label


def test_every_real_labeled_example_binds_to_its_head_sha() -> None:
    examples = webhook_examples("pull_request", "labeled")
    assert examples
    for payload in examples:
        payload["label"]["name"] = "optimize-kernels"
        t = parse_event("pull_request", payload)
        assert t is not None and t.kind == "label"
        pr = payload["pull_request"]
        assert t.repo == payload["repository"]["full_name"]
        assert (t.pr, t.head_sha, t.base_sha) == (
            pr["number"],
            pr["head"]["sha"],
            pr["base"]["sha"],
        )
        assert t.head_repo == pr["head"]["repo"]["full_name"]
        assert t.sender == payload["sender"]["login"] and t.label == "optimize-kernels"
        assert t.comment_id is None and t.kernel is None and t.budget is None


def test_label_other_label_other_action_other_event() -> None:
    assert parse_event("pull_request", labeled("bug")) is None
    # GitHub label names are case-blind
    assert parse_event("pull_request", labeled("Optimize-Kernels")) is not None
    assert parse_event("pull_request", labeled("perf"), label="perf") is not None
    unlabeled = webhook_examples("pull_request", "unlabeled")[0]
    unlabeled["label"]["name"] = "optimize-kernels"
    assert parse_event("pull_request", unlabeled) is None
    assert parse_event("pull_request", webhook_examples("pull_request", "synchronize")[0]) is None
    assert parse_event("push", labeled()) is None


def test_label_fork_and_bot_own_label() -> None:
    payload = labeled()
    payload["pull_request"]["head"]["repo"]["full_name"] = "mallory/Hello-World"
    t = parse_event("pull_request", payload)
    assert t is not None and t.is_fork and t.head_repo == "mallory/Hello-World"
    same = parse_event("pull_request", labeled())
    assert same is not None and same.is_fork is False
    payload["sender"]["login"] = "kernelpro[bot]"
    assert parse_event("pull_request", payload, bot_login="kernelpro[bot]") is None


def test_label_malformed_payload_is_a_clear_error() -> None:
    payload = labeled()
    payload["pull_request"]["head"]["sha"] = "$(curl evil)"
    with pytest.raises(EventError, match=r"pull_request\.head\.sha is not a commit SHA"):
        parse_event("pull_request", payload)
    del payload["pull_request"]["head"]
    with pytest.raises(EventError, match="missing pull_request.head"):
        parse_event("pull_request", payload)


# --------------------------------------------------------------------------- retry


def test_retry_from_real_comment_example() -> None:
    payload = pr_comment("Thanks!\n  /kernelpro retry --kernel swiglu --budget 40\n")
    t = parse_event("issue_comment", payload)
    assert t == Trigger(
        kind="retry",
        repo=payload["repository"]["full_name"],
        pr=payload["issue"]["number"],
        head_sha=None,
        base_sha=None,
        head_repo=None,
        sender="alice",
        comment_id=payload["comment"]["id"],
        kernel="swiglu",
        budget=40,
        comment_at=payload["comment"]["created_at"],
    )
    assert t.is_fork is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("/kernelpro retry", (None, None)),
        ("\t /kernelpro retry\r\n", (None, None)),
        (
            "/kernelpro retry --budget=7 --kernel=kernels/swiglu.py::swiglu",
            ("kernels/swiglu.py::swiglu", 7),
        ),
        ("please\n/kernelpro retry --kernel k\n/kernelpro retry --kernel j", ("k", None)),
        ("> /kernelpro retry\n", None),
        ("  > /kernelpro retry --budget 3", None),
        ("```\n/kernelpro retry\n```", None),
        ("~~~~\n/kernelpro retry\n~~~\n/kernelpro retry\n~~~~", None),
        ("```sh\n/kernelpro retry\n```\n/kernelpro retry --budget 2", (None, 2)),
        ("say /kernelpro retry", None),
        ("/kernelpro retryall", None),
        ("/Kernelpro retry", None),
        ("", None),
    ],
)
def test_command_lines(body: str, expected: tuple[str | None, int | None] | None) -> None:
    got = parse_command(body)
    assert (got if got is None else got[:2]) == expected
    assert got is None or got[2] is None  # no commit named: bound to the head when commented


def test_a_retry_names_its_commit() -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    assert parse_command(f"/kernelpro retry {sha} --budget 3") == (None, 3, sha)
    assert parse_command(f"/kernelpro retry --kernel k {sha.upper()}") == ("k", None, sha)
    t = parse_event("issue_comment", pr_comment(f"/kernelpro retry {sha}"))
    assert t is not None and t.kind == "retry" and t.head_sha == sha
    for bad in ("0123456", sha[:39], sha + "0", f"{sha} {sha}", "g" * 40):
        with pytest.raises(EventError, match=r"usage: /kernelpro retry \[SHA\]"):
            parse_command(f"/kernelpro retry {bad}")
        # The event is not an error: an 'invalid' trigger the plan job answers on the PR with the fix.
        t = parse_event("issue_comment", pr_comment(f"/kernelpro retry {bad}"))
        assert t is not None and t.kind == "invalid" and "usage: /kernelpro retry [SHA]" in t.error


@pytest.mark.parametrize(
    "args",
    [
        "--force",
        "--budget",
        "--budget 0",
        "--budget -3",
        "--budget 1e3",
        "--budget 99999999",
        "--budget ١٢",
        "--kernel ;rm",
        "--kernel $(id)",
        "--kernel a --kernel b",
        "extra",
    ],
)
def test_bad_arguments_say_the_usage(args: str) -> None:
    t = parse_event("issue_comment", pr_comment(f"/kernelpro retry {args}"))
    assert t is not None and t.kind == "invalid"
    assert "usage: /kernelpro retry [SHA] [--kernel NAME] [--budget N]" in t.error


def test_every_command_and_an_unknown_one() -> None:
    for verb in ("help", "status", "cancel"):
        t = parse_event("issue_comment", pr_comment(f"/kernelpro {verb}"))
        assert t is not None and t.kind == verb and t.comment_id is not None
    t = parse_event("issue_comment", pr_comment("/kernelpro"))
    assert t is not None and t.kind == "help"
    t = parse_event("issue_comment", pr_comment("/kernelpro rerun"))
    assert t is not None and t.kind == "invalid" and "unknown command 'rerun'" in t.error
    assert "help, status, cancel, retry" in t.error
    # Quoted and fenced lines stay ignored, for every command.
    for body in ("> /kernelpro cancel", "```\n/kernelpro cancel\n```", "/kernelprox cancel"):
        assert parse_event("issue_comment", pr_comment(body)) is None


def test_comments_that_are_not_retries() -> None:
    assert parse_event("issue_comment", pr_comment("LGTM")) is None
    # a plain issue, not a pull request
    plain = valid_webhook_example("issue_comment", "created")
    plain["comment"]["body"] = "/kernelpro retry"
    assert "pull_request" not in plain["issue"]
    assert validate_webhook("issue_comment", "created", plain) == []
    assert parse_event("issue_comment", plain) is None
    # edited and deleted comments never trigger
    for action in ("edited", "deleted"):
        payload = pr_comment("/kernelpro retry")
        payload["action"] = action
        assert parse_event("issue_comment", payload) is None


@pytest.mark.parametrize(
    ("login", "user_type"),
    [
        ("github-actions[bot]", "Bot"),
        ("dependabot[bot]", "Bot"),
        ("renovate[bot]", "User"),
        ("kp", "Bot"),
    ],
)
def test_bots_are_ignored(login: str, user_type: str) -> None:
    assert (
        parse_event(
            "issue_comment", pr_comment("/kernelpro retry", login=login, user_type=user_type)
        )
        is None
    )


def test_own_bot_login_is_ignored() -> None:
    payload = pr_comment("/kernelpro retry", login="kernelpro-app")
    assert parse_event("issue_comment", payload, bot_login="kernelpro-app") is None
    assert parse_event("issue_comment", payload) is not None


# --------------------------------------------------------------------------- event files


def test_parse_event_file(tmp_path: Path) -> None:
    path = write_event(tmp_path / "event.json", labeled())
    t = parse_event_file("pull_request", path)
    assert t is not None and t.kind == "label"
    with pytest.raises(EventError, match="does not exist"):
        parse_event_file("pull_request", tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(EventError, match="not valid JSON"):
        parse_event_file("pull_request", tmp_path / "bad.json")
    (tmp_path / "list.json").write_text(json.dumps([1]))
    with pytest.raises(EventError, match="JSON object"):
        parse_event_file("pull_request", tmp_path / "list.json")
    with pytest.raises(EventError, match="GITHUB_EVENT_NAME"):
        parse_event_file("", path)


# --------------------------------------------------------------------------- permission


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    # Imported here: without jsonschema the fake skips, but the parsing tests above still run.
    from fake_github import FakeGitHub

    f = FakeGitHub().start()
    f.add_repo("o/r")
    for login, role in [
        ("ada", "admin"),
        ("max", "maintain"),
        ("wes", "write"),
        ("tia", "triage"),
        ("rae", "read"),
    ]:
        f.set_role("o/r", login, role)
    try:
        yield f
    finally:
        f.stop()
    f.check()


@pytest.mark.parametrize(
    ("login", "allowed", "permission"),
    [
        ("ada", True, "admin"),
        ("max", True, "write"),  # GitHub reports maintain as write
        ("wes", True, "write"),
        ("tia", False, "read"),  # and triage as read
        ("rae", False, "read"),
        ("stranger", False, "none"),  # 404: not a collaborator
        ("", False, "none"),
    ],
)
def test_can_retry(fake: FakeGitHub, login: str, allowed: bool, permission: str) -> None:
    repo = fake.client().get_repo("o/r")
    assert permission_of(repo, login) == permission
    assert can_retry(repo, login) is allowed
    asked = [r for r in fake.requests if r.template and r.template.endswith("/permission")]
    assert len(asked) == (2 if login else 0)


def test_permission_errors_other_than_404_propagate(fake: FakeGitHub) -> None:
    repo = fake.client().get_repo("o/r")
    fake.fail_next("GET", r"/permission$", 500)
    with pytest.raises(GithubException) as info:
        can_retry(repo, "wes")
    assert info.value.status == 500
    fake.fail_next("GET", r"/permission$", "rate-limit")
    with pytest.raises(GithubException):
        can_retry(repo, "wes")
    assert can_retry(repo, "wes")
