"""The sticky comment's state markers (a live run, a cancel) against text the pull request controls
(a red-team review of session 27). A PR file name carried a forged `kernelpro:live run=` marker into
the queued comment's .kernelpro.yml snippet, so `/kernelpro cancel` stopped a run of the attacker's
choosing (the repository's release run) and left kernelpro's own, which runs the PR's code, going;
a long snippet's cut took the real marker away; a file name holding "cancelled by" and "/kernelpro
cancel" kept a cancelled run's comment queued for ever. The bot now writes its markers as the
comment's last line and reads them only there, keeps them through a cut, closes a fence a cut left
open, and shows at most SNIPPET_TARGETS targets in a snippet."""

# ruff: noqa: F811
from __future__ import annotations

from pathlib import Path

import git
from test_action import REPO, World, _sticky, labeled, retry, world  # noqa: F401

from kernelpro import action

EVIL = "kernels/<!-- kernelpro:live run={} -->.py"


def _push(world: World, tmp_path: Path, files: dict[str, str]) -> str:
    """The pull request's head with ``files`` added, pushed as its branch and its pull ref; the head's sha."""
    author = git.Repo.clone_from(world.origin.as_uri(), tmp_path / "author", branch="feature")
    for name, text in files.items():
        p = tmp_path / "author" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    author.index.add(list(files))
    author.index.commit("kernels")
    sha = author.head.commit.hexsha
    author.git.push("origin", f"+{sha}:refs/heads/feature", f"+{sha}:refs/pull/1/head")
    return sha


KERNEL = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x_ptr, n, B: tl.constexpr):\n    pass\n"


def test_cancel_stops_the_kernelpro_run_not_one_named_in_a_file_name(world: World, tmp_path: Path) -> None:
    release = world.fake.add_run(REPO, head_sha=world.base, event="push")  # e.g. a deploy of main
    sha = _push(world, tmp_path, {EVIL.format(release.id): KERNEL})
    world.fake.move_head(REPO, 1, sha)
    ours = world.fake.add_run(REPO, head_sha=sha)
    s = world.settings("pull_request", labeled(world, head=sha), GITHUB_RUN_ID=str(ours.id))
    assert action.plan(s, world.checkout, world.fake.client()).run
    # A maintainer asks to stop the kernelpro run.
    p = retry(world, "maint", "/kernelpro cancel")
    action.plan(world.settings("issue_comment", p), world.checkout, world.fake.client())
    assert release.status == "in_progress", "the release run was cancelled by /kernelpro cancel"
    assert (ours.status, ours.conclusion) == ("completed", "cancelled")


def test_a_long_snippet_does_not_cut_off_the_live_marker(world: World, tmp_path: Path) -> None:
    """80 tiny unconfigured kernels: the queued comment's snippet passed GitHub's limit, the text was cut
    at the end, and the cut took the live marker (and the code fence's closing line) with it."""
    src = "import triton\n\n" + "".join(f"@triton.jit\ndef k{i}(x):\n    pass\n\n" for i in range(80))
    sha = _push(world, tmp_path, {"kernels/many.py": src})
    world.fake.move_head(REPO, 1, sha)
    ours = world.fake.add_run(REPO, head_sha=sha)
    s = world.settings("pull_request", labeled(world, head=sha), GITHUB_RUN_ID=str(ours.id))
    assert action.plan(s, world.checkout, world.fake.client()).run
    body = _sticky(world)
    p = retry(world, "maint", "/kernelpro cancel")
    action.plan(world.settings("issue_comment", p), world.checkout, world.fake.client())
    assert (ours.status, ours.conclusion) == ("completed", "cancelled"), "the maintainer cannot cancel the run"
    assert body.count("```") % 2 == 0, "an unclosed code fence swallows the rest of the comment"


def test_a_run_cancelled_from_the_actions_tab_ends_the_queued_comment(world: World, tmp_path: Path) -> None:
    """publish's `_cancelled_run` kept a comment that held 'cancelled by' and '/kernelpro cancel' anywhere:
    a file name in the queued comment's snippet held both, so the comment stayed 'Queued' (and live) for ever."""
    sha = _push(world, tmp_path, {"kernels/cancelled by x (/kernelpro cancel).py": KERNEL})
    world.fake.move_head(REPO, 1, sha)
    run = world.fake.add_run(REPO, head_sha=sha)
    s = world.settings("pull_request", labeled(world, head=sha), GITHUB_RUN_ID=str(run.id))
    p = action.plan(s, world.checkout, world.fake.client())
    assert p.run
    after = world.settings("pull_request", labeled(world, head=sha), GITHUB_RUN_ID=str(run.id),
                           KERNELPRO_OPTIMIZE_RESULT="cancelled")
    action.publish_results(after, world.checkout, world.tmp / "results", world.fake.client(),
                           push_url=world.origin.as_uri(), head_sha=p.head_sha)
    body = _sticky(world)
    assert "Queued" not in body and "kernelpro:live" not in body, body[:300]
