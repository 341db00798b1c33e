"""`/kernelpro help|status|cancel|retry` answered on the pull request through the local GitHub."""

# ruff: noqa: F811  (the world fixture is imported from test_action, which defines it)

from __future__ import annotations

import argparse

import pytest
from test_action import REPO, World, _reactions, _sticky, retry, world  # noqa: F401 (the fixture)

from kernelpro import action


def _plan(w: World, login: str, body: str) -> tuple[action.Plan, int]:
    payload = retry(w, login, body)
    return action.plan(w.settings("issue_comment", payload), w.checkout, w.fake.client()), payload["comment"]["id"]


def _last(w: World) -> str:
    return w.comments()[-1]


def test_help_lists_the_commands_and_who_may_use_them(world: World) -> None:
    p, cid = _plan(world, "reader", "/kernelpro help")
    assert not p.run
    text = _last(world)
    for line in ("| `/kernelpro help` | this list | anyone |", "| `/kernelpro status` |",
                 "| `/kernelpro cancel` | stop the running optimization workflow | people with write access to octo/demo |",
                 "`/kernelpro retry [SHA] [--kernel NAME] [--budget N]`", "`optimize-kernels` label"):
        assert line in text, line
    assert "&#96;" not in text
    assert _reactions(world, cid) == ["+1"]


def test_unknown_kernel_is_answered_with_the_configured_names(world: World) -> None:
    p, cid = _plan(world, "maint", "/kernelpro retry --kernel nosuch")
    assert not p.run
    text = _last(world)
    assert "--kernel nosuch: no kernel of that name is configured" in text
    assert "Name a kernel configured in the base branch's `.kernelpro.yml`: `swiglu`." in text
    assert "is invalid" not in text and "&#96;" not in text
    assert _reactions(world, cid) == ["eyes", "confused"]


@pytest.mark.parametrize("body, fix", [
    ("/kernelpro retry --budget lots", "Give `--budget` a whole number of evaluations from 1 to 10000"),
    ("/kernelpro retry --kernel", "Name a kernel configured"),
    ("/kernelpro retry abc123", "full 40-character commit SHA"),
    ("/kernelpro rerun", "Use one of the commands below"),
])
def test_every_bad_argument_is_answered_with_its_fix(world: World, body: str, fix: str) -> None:
    p, cid = _plan(world, "maint", body)
    assert not p.run
    text = _last(world)
    assert text.startswith("**kernelpro could not use this command**") and fix in text, text
    assert "usage: /kernelpro retry [SHA] [--kernel NAME] [--budget N]" in text  # in a code block, verbatim
    assert "&#96;" not in text
    assert _reactions(world, cid) == ["confused"]


def test_status_before_and_during_a_run(world: World) -> None:
    _plan(world, "reader", "/kernelpro status")
    assert "kernelpro has not run on this pull request yet" in _last(world)
    run = world.fake.add_run(REPO, head_sha=world.head)
    from test_action import labeled

    s = world.settings("pull_request", labeled(world), GITHUB_RUN_ID=str(run.id))
    assert action.plan(s, world.checkout, world.fake.client()).run
    _plan(world, "reader", "/kernelpro status")
    assert f"optimizing now in [workflow run {run.id}](https://github.com/{REPO}/actions/runs/{run.id})" in _last(world)


def test_cancel_stops_the_live_run_and_only_for_writers(world: World) -> None:
    run = world.fake.add_run(REPO, head_sha=world.head)
    from test_action import labeled

    s = world.settings("pull_request", labeled(world), GITHUB_RUN_ID=str(run.id))
    assert action.plan(s, world.checkout, world.fake.client()).run
    _, cid = _plan(world, "reader", "/kernelpro cancel")
    assert "only people with write access" in _last(world) and run.status == "in_progress"
    assert _reactions(world, cid) == ["confused"]
    _, cid = _plan(world, "maint", "/kernelpro cancel")
    assert (run.status, run.conclusion) == ("completed", "cancelled")
    assert f"[workflow run {run.id}]" in _last(world) and "was asked to stop" in _last(world)
    assert "cancelled by maint" in _sticky(world) and "kernelpro:live" not in _sticky(world)
    assert any(r.method == "POST" and r.template == "/repos/{owner}/{repo}/actions/runs/{run_id}/cancel"
               for r in world.fake.requests)
    # Nothing is live any more: a second cancel says so.
    _plan(world, "maint", "/kernelpro cancel")
    assert "nothing to cancel" in _last(world)


def test_quoted_and_fenced_commands_are_ignored(world: World) -> None:
    before = len(world.comments())
    for body in ("> /kernelpro cancel", "```\n/kernelpro help\n```"):
        p, _ = _plan(world, "maint", body)
        assert p.reason == "not a kernelpro trigger"
    assert len(world.comments()) == before + 2  # only the two comments themselves


def test_cancel_ends_the_pending_status(world: World) -> None:
    """A cancelled run's pending `kernelpro` status would block a required check forever."""
    run = world.fake.add_run(REPO, head_sha=world.head)
    from test_action import labeled

    s = world.settings("pull_request", labeled(world), GITHUB_RUN_ID=str(run.id))
    assert action.plan(s, world.checkout, world.fake.client()).run
    assert world.fake.statuses[-1]["state"] == "pending"
    _plan(world, "reader", "/kernelpro cancel")  # refused: the run goes on, so does its status
    # GitHub refuses the cancel (the run completed meanwhile): the comment and status stay as they are.
    world.fake.fail_next("POST", r"/actions/runs/\d+/cancel$", 409)
    _plan(world, "maint", "/kernelpro cancel")
    assert "could not cancel" in _last(world) and "kernelpro:live" in _sticky(world)
    assert world.fake.statuses[-1]["state"] == "pending"
    _plan(world, "maint", "/kernelpro cancel")
    last = world.fake.statuses[-1]
    assert (last["sha"], last["state"]) == (world.head, "error")
    assert last["description"].startswith("cancelled by maint") and "/kernelpro retry" in last["description"]
    assert last["target_url"] == f"https://github.com/{REPO}/actions/runs/{run.id}"


@pytest.mark.parametrize("how", ["command", "actions-tab"])
def test_publish_after_a_cancel_opens_nothing(world: World, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """The workflow's publish job runs after a cancel too (`if: always()`): what an optimize job
    finished before the cancel is not published, a "cancelled by" comment stays, and a run cancelled
    from the Actions tab (no command) is said to be cancelled, its status ended."""
    from test_action import _optimize, labeled

    run = world.fake.add_run(REPO, head_sha=world.head)
    s = world.settings("pull_request", labeled(world), GITHUB_RUN_ID=str(run.id))
    p = action.plan(s, world.checkout, world.fake.client())
    assert p.run
    _optimize(world, s, p.base_sha, p.head_sha, monkeypatch)  # this job finished before the cancel
    if how == "command":
        _plan(world, "maint", "/kernelpro cancel")
    after = world.settings("pull_request", labeled(world), GITHUB_RUN_ID=str(run.id),
                           KERNELPRO_OPTIMIZE_RESULT="cancelled")
    msg = action.publish_results(after, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri(), head_sha=p.head_sha)
    assert msg.startswith("cancelled: the run was cancelled before its optimize jobs finished")
    assert not [i for i in world.fake.repos[REPO].issues.values() if i.pull and i.pull.head_ref == "kernelpro/pr-1"]
    body = _sticky(world)
    assert "kernelpro:live" not in body and "Follow-up pull request" not in body
    assert ("cancelled by maint" in body) if how == "command" else ("the run was cancelled" in body), body
    last = world.fake.statuses[-1]
    assert (last["sha"], last["state"]) == (world.head, "error") and "cancelled" in last["description"]
    # The same results with the jobs' result "failure" (one job failed, none cancelled) are published.
    failed = world.settings("pull_request", labeled(world), GITHUB_RUN_ID=str(run.id),
                            KERNELPRO_OPTIMIZE_RESULT="failure")
    assert not action.publish_results(failed, world.checkout, world.tmp / "results", world.fake.client(),
                                      push_url=world.origin.as_uri(), head_sha=p.head_sha).startswith("cancelled")


def test_the_plan_summary_escapes_the_commenter_text(world: World) -> None:
    """The job summary is Markdown: what a commenter wrote is escaped there like everywhere else,
    and the bot's own code spans stay code spans (no `&#96;` entities)."""
    summary = world.tmp / "summary.md"

    def plan_summary(login: str, body: str) -> str:
        summary.write_text("")
        s = world.settings("issue_comment", retry(world, login, body), GITHUB_STEP_SUMMARY=str(summary),
                           GITHUB_API_URL=world.fake.base_url)  # cmd_plan builds its own client
        assert action.cmd_plan(argparse.Namespace(checkout=str(world.checkout), out=str(world.tmp / "plan")), s) == 0
        return summary.read_text()

    text = plan_summary("maint", "/kernelpro @everyone<img/src=x>")  # the unknown verb is quoted back
    assert text.startswith("### kernelpro plan") and "unknown command" in text
    assert "@everyone" not in text and "@&#8203;everyone" in text
    assert "<img" not in text and "&lt;img" in text
    other = "0" * 40
    text = plan_summary("maint", f"/kernelpro retry {other}")
    assert f"`/kernelpro retry {other}` names a commit that is not the head of #1" in text
    assert "&#96;" not in text


PLAN_TEXTS = ("only honoured from people with write access", "names a commit that is not the head",
              "could not find this `/kernelpro retry`", "moved after this `/kernelpro retry`",
              "Will be optimized", "no harness, so they are not optimized", "### kernelpro plan")


def test_the_plan_replies_come_from_the_templates() -> None:
    """Every Markdown the plan job writes is a template's, with the templates' escaping rules."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    templates = "".join((root / "templates" / n).read_text() for n in ("command.md.j2", "comment.md.j2"))
    code = (root / "bot" / "plan.py").read_text() + (root / "kernelpro" / "action.py").read_text()
    for text in PLAN_TEXTS:
        assert text in templates and text not in code, text
