"""bot/publish.py: the follow-up PR against the fake GitHub and real git repositories.

origin.git (bare, linked to the fake's repository) holds ``main`` (the demo's configuration
commit) and ``feature`` (the PR head: the demo's kernel commit, which the real CPU demo patch
applies to); ``work`` is the publish job's checkout.
"""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import git
import pytest
from fake_github import FakeGitHub
from test_bot_artifact import ALLOWED, KERNEL, demo_results

from kernelpro.bot.artifact import ArtifactError, Results, load_results
from kernelpro.bot.comment import DEFAULT_MARKER, CommentError, StickyComment
from kernelpro.bot.publish import Published, PublishError, publish, title_for
from kernelpro.cli import make_demo_repo

REPO = "acme/kernels"
BOT = ("kernelpro[bot]", "kernelpro-bot@users.noreply.github.com")
BRANCH = "kernelpro/pr-1"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Results:
    r = load_results(demo_results(tmp_path_factory), allowed_files=ALLOWED)
    assert r.winners
    return r


@dataclass
class World:
    fake: FakeGitHub
    origin: Path
    work: Path
    base_sha: str
    head_sha: str

    def run(self, results: Results, **kw: object) -> Published:
        args: dict[str, object] = dict(
            pr_number=1,
            results=results,
            checkout=self.work,
            push_url=self.origin.as_uri(),
            bot_name=BOT[0],
            bot_email=BOT[1],
            base_branch_of_pr="main",
            pr_head_branch="feature",
            pr_head_sha=self.head_sha,
            is_fork=False,
            allowed_files=ALLOWED,
            run_url="https://github.com/acme/kernels/actions/runs/42",
        )
        args.update(kw)
        repo = self.fake.client().get_repo(REPO)
        return publish(repo, **args)  # type: ignore[arg-type]

    def tip(self, branch: str = BRANCH) -> str | None:
        out = subprocess.run(
            ["git", "--git-dir", str(self.origin), "rev-parse", "--verify", "-q",
             f"refs/heads/{branch}"],
            capture_output=True, text=True,
        ).stdout.strip()
        return out or None

    def bot_pulls(self) -> list[int]:
        return [
            i.number
            for i in self.fake.repos[REPO].issues.values()
            if i.pull and i.pull.head_ref == BRANCH
        ]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    src = make_demo_repo(tmp_path / "src")
    s = git.Repo(src)
    head = s.head.commit.hexsha
    base = s.head.commit.parents[0].hexsha
    origin = tmp_path / "origin.git"
    git.Repo.init(origin, bare=True)
    s.git.push(str(origin), f"{base}:refs/heads/main", f"{head}:refs/heads/feature")
    work = tmp_path / "work"
    git.Repo.clone_from(origin.as_uri(), work)
    fake = FakeGitHub().start()
    fake.add_repo(REPO, sha=base)
    fake.link_git(REPO, origin)
    fake.add_pull(REPO, head_ref="feature", head_sha=head, base_ref="main", user="alice")
    try:
        yield World(fake, origin, work, base, head)
    finally:
        fake.stop()
    fake.check()


def no_winner(results: Results) -> Results:
    t = [dataclasses.replace(t, winner=None, patch="", patch_files=()) for t in results.targets]
    return dataclasses.replace(results, targets=tuple(t))


def test_label_opens_the_follow_up_pr(world: World, results: Results) -> None:
    p = world.run(results)
    assert p.action == "created" and p.branch == BRANCH and p.pr_url
    tip = world.tip()
    assert tip == p.commit
    c = git.Repo(world.origin).commit(tip)
    assert c.parents[0].hexsha == world.head_sha
    assert (c.author.email, c.committer.email) == (BOT[1], BOT[1])
    assert [d.a_path for d in c.parents[0].diff(c)] == [KERNEL]
    (n,) = world.bot_pulls()
    pr = world.fake.repos[REPO].issues[n]
    assert pr.pull is not None and pr.pull.base_ref == "feature" and pr.pull.head_sha == tip
    assert pr.title == title_for(results, 1)
    # A CPU run (Triton's interpreter) claims no speed in the title.
    assert pr.title == "kernelpro: verified launch settings for swiglu for #1 (CPU interpreter, GPU speed unknown)"
    assert pr.body and "verified kernels for #1" in pr.body and world.head_sha in pr.body
    assert "faster kernels" not in pr.body
    assert p.pr_url.endswith(f"/pull/{n}")


def test_retry_updates_the_same_pr_with_a_new_commit(
    world: World, results: Results, tmp_path: Path
) -> None:
    first = world.run(results)
    old_tip = world.tip()
    again = world.run(results)  # the same event delivered twice: nothing new
    assert again.action == "updated" and again.pr_url == first.pr_url
    assert world.bot_pulls() == [2]
    # The author pushes to the PR, a maintainer comments /kernelpro retry.
    author = git.Repo.clone_from(world.origin.as_uri(), tmp_path / "author", branch="feature")
    (tmp_path / "author" / "README.md").write_text("more docs\n")
    author.index.add(["README.md"])
    author.index.commit("docs")
    author.git.push("origin", "feature")
    new_head = author.head.commit.hexsha
    world.fake.repos[REPO].issues[2].body = "stale"
    retry = world.run(results, pr_head_sha=new_head)
    assert retry.action == "updated" and retry.pr_url == first.pr_url
    assert world.tip() == retry.commit != old_tip
    assert git.Repo(world.origin).commit(retry.commit).parents[0].hexsha == new_head
    assert world.bot_pulls() == [2]
    assert world.fake.repos[REPO].issues[2].body != "stale"
    assert world.fake.repos[REPO].issues[2].pull.head_sha == retry.commit  # type: ignore[union-attr]


def test_human_commit_on_the_branch_is_left_alone(
    world: World, results: Results, tmp_path: Path
) -> None:
    world.run(results)
    human = git.Repo.clone_from(world.origin.as_uri(), tmp_path / "human", branch=BRANCH)
    (tmp_path / "human" / "NOTES.md").write_text("mine\n")
    human.index.add(["NOTES.md"])
    human.index.commit("human tweak", author=git.Actor("Alice", "alice@example.com"),
                       committer=git.Actor("Alice", "alice@example.com"))
    human.git.push("origin", BRANCH)
    tip = world.tip()
    body = world.fake.repos[REPO].issues[2].body
    n_writes = sum(r.method != "GET" for r in world.fake.requests)
    p = world.run(results)
    assert p.action == "skipped" and BRANCH in p.reason
    assert "alice@&#8203;example.com" in p.reason  # escaped: it goes into Markdown
    assert world.tip() == tip and world.fake.repos[REPO].issues[2].body == body
    assert sum(r.method != "GET" for r in world.fake.requests) == n_writes


def test_fork_gets_the_patch_in_the_comment(world: World, results: Results) -> None:
    sticky = StickyComment(world.fake.client().get_repo(REPO), 1)
    p = world.run(results, is_fork=True, sticky=sticky)
    assert p.action == "comment-only" and p.pr_url is None and "fork" in p.reason
    assert world.tip() is None and world.bot_pulls() == []
    (c,) = [c for c in world.fake.comments.values() if c.body.startswith(DEFAULT_MARKER)]
    assert "```diff\n--- a/kernels/swiglu.py" in c.body and "cannot push to" in c.body
    # The summary of the run, not the follow-up PR's body (there is no follow-up PR to describe).
    assert "| `swiglu` | verified; CPU interpreter timing |" in c.body and "**These timings are not GPU timings.**" in c.body
    assert "faster kernels for #1" not in c.body and "This pull request applies" not in c.body
    # The patch in the comment applies to the PR head as it stands.
    assert p.comment is not None and results.patch in p.comment


def test_no_winner_is_comment_only(world: World, results: Results) -> None:
    sticky = StickyComment(world.fake.client().get_repo(REPO), 1)
    p = world.run(no_winner(results), sticky=sticky)
    assert p.action == "comment-only" and p.branch is None and p.pr_url is None
    assert world.tip() is None and world.bot_pulls() == []
    (c,) = [c for c in world.fake.comments.values() if c.body.startswith(DEFAULT_MARKER)]
    assert "the baseline stands" in c.body


def test_patch_outside_the_allowed_files_is_refused(world: World, results: Results) -> None:
    with pytest.raises(ArtifactError, match="refuses"):
        world.run(results, allowed_files={"swiglu": ["kernels/other.py"]})
    assert world.tip() is None and world.bot_pulls() == []


def test_head_moved_and_gone(world: World, results: Results) -> None:
    with pytest.raises(PublishError, match="no longer on feature"):
        world.run(results, pr_head_sha="c" * 40)
    assert world.tip() is None


@pytest.mark.parametrize("status", [422, 500])
def test_create_pr_error_then_rerun(world: World, results: Results, status: int) -> None:
    world.fake.fail_next("POST", r"/repos/acme/kernels/pulls$", status)
    with pytest.raises(PublishError, match=rf"opening the pull request .*{status}.*rerunning"):
        world.run(results)
    assert world.tip() is not None and world.bot_pulls() == []  # branch only: rerun fixes it
    p = world.run(results)
    assert p.action == "created" and len(world.bot_pulls()) == 1


def test_edit_pr_error_then_rerun(world: World, results: Results) -> None:
    world.run(results)
    world.fake.fail_next("PATCH", r"/pulls/2$", 500)
    with pytest.raises(PublishError, match="updating pull request #2"):
        world.run(results)
    p = world.run(results)
    assert p.action == "updated" and world.bot_pulls() == [2]


def test_lookup_error_then_rerun(world: World, results: Results) -> None:
    world.run(results)
    world.fake.fail_next("GET", r"/repos/acme/kernels/pulls$", 500)
    with pytest.raises(PublishError, match="looking for an open pull request"):
        world.run(results)
    assert world.run(results).action == "updated" and world.bot_pulls() == [2]


def test_comment_edit_error_on_comment_only_then_rerun(world: World, results: Results) -> None:
    repo = world.fake.client().get_repo(REPO)
    StickyComment(repo, 1).update("queued")
    world.fake.fail_next("PATCH", r"/issues/comments/\d+$", 500)
    with pytest.raises(CommentError, match="500"):
        world.run(no_winner(results), sticky=StickyComment(repo, 1))
    p = world.run(no_winner(results), sticky=StickyComment(repo, 1))
    assert p.action == "comment-only"
    (c,) = [c for c in world.fake.comments.values() if c.body.startswith(DEFAULT_MARKER)]
    assert "the baseline stands" in c.body


def test_push_url_credentials_never_in_errors(world: World, results: Results) -> None:
    url = "https://x-access-token:SECRET123@127.0.0.1:9/acme/kernels.git"
    with pytest.raises(PublishError) as e:
        world.run(results, push_url=url)
    assert "SECRET123" not in str(e.value)


def test_results_dir_is_not_touched(world: World, tmp_path_factory: pytest.TempPathFactory) -> None:
    d = demo_results(tmp_path_factory)
    before = {p: p.read_bytes() for p in d.rglob("*") if p.is_file()}
    world.run(load_results(d, allowed_files=ALLOWED))
    assert {p: p.read_bytes() for p in d.rglob("*") if p.is_file()} == before


# --------------------------------------------------------------------------- a closed follow-up PR


def test_closed_unmerged_is_declined_for_the_same_head(world: World, results: Results) -> None:
    first = world.run(results)
    (n,) = world.bot_pulls()
    world.fake.close_pull(REPO, n)  # a maintainer closes it without merging
    tip, writes = world.tip(), sum(r.method != "GET" for r in world.fake.requests)
    again = world.run(results)  # the label again (or the same event redelivered) on the same head
    assert again.action == "declined" and again.pr_url is None and f"#{n}" in again.reason
    assert "/kernelpro retry" in again.reason
    assert world.tip() == tip == first.commit  # nothing pushed
    assert sum(r.method != "GET" for r in world.fake.requests) == writes  # nothing reopened
    assert world.fake.repos[REPO].issues[n].state == "closed"


def test_retry_after_a_decline_opens_a_new_pr_linking_the_old(world: World, results: Results) -> None:
    world.run(results)
    (old,) = world.bot_pulls()
    world.fake.close_pull(REPO, old)
    retry = world.run(results, retry=True)
    assert retry.action == "created"
    new = [n for n in world.bot_pulls() if n != old]
    assert len(new) == 1 and retry.pr_url and retry.pr_url.endswith(f"/pull/{new[0]}")
    body = world.fake.repos[REPO].issues[new[0]].body or ""
    assert body.startswith(f"Supersedes #{old}, which was closed without merging")
    assert world.fake.repos[REPO].issues[old].state == "closed"  # not reopened
    assert world.tip() == retry.commit
    # A second delivery of that retry updates the new PR: still one open follow-up PR.
    assert world.run(results, retry=True).action == "updated"
    assert [n for n in world.bot_pulls() if world.fake.repos[REPO].issues[n].state == "open"] == new


def test_a_label_on_a_new_head_after_a_decline_publishes_again(
    world: World, results: Results, tmp_path: Path
) -> None:
    world.run(results)
    (old,) = world.bot_pulls()
    world.fake.close_pull(REPO, old)
    author = git.Repo.clone_from(world.origin.as_uri(), tmp_path / "author", branch="feature")
    (tmp_path / "author" / "README.md").write_text("more docs\n")
    author.index.add(["README.md"])
    author.index.commit("docs")
    author.git.push("origin", "feature")
    p = world.run(results, pr_head_sha=author.head.commit.hexsha)
    assert p.action == "created" and len(world.bot_pulls()) == 2


def test_merged_is_done_and_a_retry_starts_a_fresh_pr(world: World, results: Results) -> None:
    world.run(results)
    (old,) = world.bot_pulls()
    world.fake.close_pull(REPO, old, merged=True)
    for retry in (False, True):  # a label run or a retry: both start fresh after a merge
        p = world.run(results, retry=retry)
        assert p.action in ("created", "updated")
    new = [n for n in world.bot_pulls() if n != old]
    assert len(new) == 1
    assert (world.fake.repos[REPO].issues[new[0]].body or "").startswith(f"Follows #{old}, which was merged")


def test_closed_pr_lookup_error_pushes_nothing(world: World, results: Results) -> None:
    world.run(results)
    (old,) = world.bot_pulls()
    world.fake.close_pull(REPO, old)
    tip = world.tip()
    world.fake.fail_next("GET", r"/repos/acme/kernels/pulls$", 502, times=2)
    with pytest.raises(PublishError, match="502.*nothing was pushed yet"):
        world.run(results, retry=True)
    assert world.tip() == tip
