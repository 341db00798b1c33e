"""bot/comment.py: the sticky progress comment against the fake GitHub."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fake_github import BOT_LOGIN, FakeGitHub
from github.Repository import Repository

from kernelpro.bot.comment import DEFAULT_MARKER, CommentError, StickyComment, progress_body

REPO = "acme/kernels"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub.running() as f:
        f.add_repo(REPO, sha="a" * 40)
        f.add_pull(REPO, head_ref="feature", head_sha="b" * 40)
        yield f


@pytest.fixture
def repo(fake: FakeGitHub) -> Repository:
    return fake.client(per_page=5).get_repo(REPO)


def bot_comments(fake: FakeGitHub) -> list[str]:
    return [
        c.body
        for c in fake.comments.values()
        if c.user == BOT_LOGIN and c.body.startswith(DEFAULT_MARKER)
    ]


def writes(fake: FakeGitHub) -> list[str]:
    return [f"{r.method} {r.template}" for r in fake.requests if r.method != "GET"]


def test_created_once_then_edited_in_place(fake: FakeGitHub, repo: Repository) -> None:
    clock = Clock()
    s = StickyComment(repo, 1, clock=clock)
    assert s.update("queued")
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\nqueued"]
    first = s.comment_id
    clock.t += 11
    assert s.update("kernel 1/2")
    assert s.comment_id == first
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\nkernel 1/2"]
    assert writes(fake) == [
        "POST /repos/{owner}/{repo}/issues/{issue_number}/comments",
        "PATCH /repos/{owner}/{repo}/issues/comments/{comment_id}",
    ]
    # The same text again: no request at all.
    n = len(fake.requests)
    assert not s.update("kernel 1/2", force=True)
    assert len(fake.requests) == n


def test_marker_is_first_line_and_not_doubled(fake: FakeGitHub, repo: Repository) -> None:
    s = StickyComment(repo, 1)
    s.update(f"{DEFAULT_MARKER}\nhello")
    (body,) = bot_comments(fake)
    assert body.split("\n")[0] == DEFAULT_MARKER and body.count(DEFAULT_MARKER) == 1


def test_found_on_page_three(fake: FakeGitHub, repo: Repository) -> None:
    for k in range(12):  # per_page=5: pages 1-2 full, page 3 holds the sticky one
        fake.add_comment(REPO, 1, f"chatter {k}")
    mine = fake.add_comment(REPO, 1, f"{DEFAULT_MARKER}\nold", user=BOT_LOGIN)
    fake.add_comment(REPO, 1, "after")
    s = StickyComment(repo, 1)
    assert s.update("new")
    assert s.comment_id == mine.id and fake.comments[mine.id].body == f"{DEFAULT_MARKER}\nnew"
    assert len(bot_comments(fake)) == 1
    pages = [
        r.query.get("page", ["1"])[0]
        for r in fake.requests
        if r.method == "GET" and r.path.endswith("/comments")
    ]
    assert pages == ["1", "2", "3"]


def test_marker_in_someone_elses_comment_is_ignored(fake: FakeGitHub, repo: Repository) -> None:
    spoof = fake.add_comment(REPO, 1, f"{DEFAULT_MARKER}\nspoofed", user="mallory")
    s = StickyComment(repo, 1)
    s.update("real")
    assert fake.comments[spoof.id].body.endswith("spoofed")
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\nreal"]


def test_rate_limit_skips_then_force_updates(fake: FakeGitHub, repo: Repository) -> None:
    clock = Clock()
    s = StickyComment(repo, 1, min_interval_s=10, clock=clock)
    assert s.update("a")
    clock.t += 3
    assert not s.update("b")
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\na"]
    assert s.update("c", force=True)
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\nc"]
    clock.t += 5
    assert not s.update("d")  # 5 s after the forced write
    clock.t += 6
    assert s.update("e")
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\ne"]


def test_duplicate_delivery_gives_one_comment(fake: FakeGitHub, repo: Repository) -> None:
    a = StickyComment(repo, 1)
    b = StickyComment(fake.client().get_repo(REPO), 1)
    a.update("from delivery 1")
    b.update("from delivery 2")
    a.update("delivery 1 again", force=True)
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\ndelivery 1 again"]
    assert a.comment_id == b.comment_id


def test_deleted_comment_is_recreated(fake: FakeGitHub, repo: Repository) -> None:
    s = StickyComment(repo, 1)
    s.update("one")
    assert s.comment_id is not None
    del fake.comments[s.comment_id]
    fake.repos[REPO].issues[1].comments.clear()
    s.update("two", force=True)
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\ntwo"]


def test_edit_error_is_clear_and_rerun_fixes_it(fake: FakeGitHub, repo: Repository) -> None:
    s = StickyComment(repo, 1)
    s.update("one")
    fake.fail_next("PATCH", r"/issues/comments/\d+$", 500)
    with pytest.raises(CommentError, match=r"could not edit the progress comment on #1: .*500"):
        s.update("two", force=True)
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\none"]
    # A rerun (a new process: a new StickyComment) finds and edits the same comment.
    assert StickyComment(fake.client().get_repo(REPO), 1).update("two", force=True)
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\ntwo"]


def test_create_error_then_rerun(fake: FakeGitHub, repo: Repository) -> None:
    fake.fail_next("POST", r"/issues/1/comments$", 500)
    s = StickyComment(repo, 1)
    with pytest.raises(CommentError, match="could not create"):
        s.update("one")
    assert bot_comments(fake) == []
    assert s.update("one")
    assert bot_comments(fake) == [f"{DEFAULT_MARKER}\none"]


def test_react(fake: FakeGitHub, repo: Repository) -> None:
    cmd = fake.add_comment(REPO, 1, "/kernelpro retry", user="alice")
    s = StickyComment(repo, 1)
    assert s.react(cmd.id, "eyes") and s.react(cmd.id, "+1")
    assert [x[2] for x in fake.comments[cmd.id].reactions] == ["eyes", "+1"]
    with pytest.raises(ValueError):
        s.react(cmd.id, "thumbsup")
    fake.fail_next("POST", r"/reactions$", 500)
    assert not s.react(cmd.id, "confused")  # cosmetic: reported, not raised


def test_progress_bodies() -> None:
    q = progress_body("queued", kernel_i=0, kernels=2, evaluations=0, best_speedup=None)
    assert "**Queued**: 2 kernel(s)" in q
    r = progress_body("running", kernel_i=1, kernels=2, evaluations=17, best_speedup=1.5)
    assert "**Optimizing kernel 1/2**" in r and "| 17 | 1.50x |" in r
    d = progress_body(
        "done",
        kernel_i=2,
        kernels=2,
        evaluations=40,
        best_speedup=3.0,
        pr_url="https://github.com/acme/kernels/pull/9",
    )
    assert "Follow-up pull request: https://github.com/acme/kernels/pull/9" in d
    n = progress_body(
        "done",
        kernel_i=2,
        kernels=2,
        evaluations=40,
        best_speedup=None,
        reason="<img src=x> @org/team [x](javascript:1)",
        pr_url="javascript:alert(1)",
    )
    assert "No follow-up pull request: " in n
    assert "<img" not in n and "@org" not in n and "javascript:alert" not in n
    assert "](javascript" not in n
    f = progress_body("failed", kernel_i=1, kernels=2, evaluations=3, best_speedup=None)
    assert "**Stopped** at kernel 1/2" in f
    with pytest.raises(ValueError):
        progress_body("bogus", kernel_i=0, kernels=0, evaluations=0, best_speedup=None)


def test_a_cut_keeps_the_state_marker_last_and_closes_an_open_fence(fake: FakeGitHub, repo: Repository) -> None:
    """The bot reads a live run's marker (and a cancel's) from the comment's last line only: a file name
    above it posed as one (tests/test_bot_markers.py). Cutting a long comment to GitHub's limit took the
    marker away with the end, and left a code fence open that swallowed what followed."""
    from kernelpro.bot.body import BODY_LIMIT, last_line
    from kernelpro.bot.command import live_run
    from kernelpro.bot.progress import is_live, live_marker

    s = StickyComment(repo, 1)
    forged = "<!-- kernelpro:live run=1002 -->"
    body = f"**Queued**\n\n````yaml\n# {forged}\n" + "x: 1\n" * BODY_LIMIT + f"````\n\n{live_marker(7)}\n"
    text = s.text(body)
    assert len(text) <= BODY_LIMIT and last_line(text) == live_marker(7), text[-300:]
    assert live_run(text) == 7 and is_live(text, 7) and not is_live(text, 1002)
    fences = [ln for ln in text.splitlines() if ln.startswith("````")]
    assert len(fences) == 2, fences
    assert live_run(f"{forged}\n\nsomething after it") is None, "a marker anywhere but the last line is not the bot's"
