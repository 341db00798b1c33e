"""A GitHub App installation token in the trusted jobs: the bot writes as the App, finds its own
sticky comment by the App's login, and opens the follow-up PR as the App (whose pushes and pull
requests start the repository's CI, unlike GITHUB_TOKEN's), with the configured labels and reviewers."""

# ruff: noqa: F811  (the world fixture is imported from test_action, which defines it)

from __future__ import annotations

import pytest
from test_action import REPO, World, _optimize, labeled, world  # noqa: F401 (the fixture)

from kernelpro import action

APP = "kernelpro-app[bot]"


def test_an_app_token_writes_as_the_app_with_labels_and_reviewers(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    world.fake.token_user = APP  # every write made with this token is the App's
    world.fake.set_role(REPO, "bob", "write")
    env = {"KERNELPRO_BOT_LOGIN": APP, "KERNELPRO_PR_LABELS": "performance, kernelpro bot",
           "KERNELPRO_PR_REVIEWERS": "bob, octo/kernel-team"}  # the action's pr-labels and pr-reviewers
    s = world.settings("pull_request", labeled(world), **env)
    p = action.plan(s, world.checkout, world.fake.client(token="ghs_app_installation_token"))
    assert p.run
    _optimize(world, s, p.base_sha, p.head_sha, monkeypatch)
    msg = action.publish_results(s, world.checkout, world.tmp / "results",
                                 world.fake.client(token="ghs_app_installation_token"),
                                 push_url=world.origin.as_uri())
    assert msg.startswith("created:")
    (pr,) = [i for i in world.fake.repos[REPO].issues.values() if i.pull and i.pull.head_ref == "kernelpro/pr-1"]
    assert pr.user == APP
    assert pr.labels == ["performance", "kernelpro bot"]
    assert pr.pull is not None and pr.pull.reviewers == ["bob", "team:kernel-team"]
    # One sticky comment, the App's, edited from queued to the final summary.
    stickies = [world.fake.comments[c] for c in world.fake.repos[REPO].issues[1].comments
                if world.fake.comments[c].body.startswith("<!-- kernelpro:progress -->")]
    assert [c.user for c in stickies] == [APP]
    assert "**Follow-up pull request:**" in stickies[0].body
    assert {x["creator"]["login"] for x in world.fake.statuses} == {APP}


def test_refused_labels_and_reviewers_leave_the_follow_up_pr_and_warn(world: World, monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """GitHub refuses the labels (no permission) and the reviewers (an unknown team answers 422): the
    follow-up PR stands, the verdict status is set, and the job log says what is missing and why."""
    env = {"KERNELPRO_PR_LABELS": "performance", "KERNELPRO_PR_REVIEWERS": "octo/no-such-team"}
    s = world.settings("pull_request", labeled(world), **env)
    p = action.plan(s, world.checkout, world.fake.client())
    _optimize(world, s, p.base_sha, p.head_sha, monkeypatch)
    world.fake.fail_next("POST", r"/issues/\d+/labels$", 403)
    world.fake.fail_next("POST", r"/pulls/\d+/requested_reviewers$", 422)
    capsys.readouterr()
    msg = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri(), head_sha=p.head_sha)
    assert msg.startswith("created:")
    (pr,) = [i for i in world.fake.repos[REPO].issues.values() if i.pull and i.pull.head_ref == "kernelpro/pr-1"]
    assert pr.labels == [] and pr.pull is not None and pr.pull.reviewers == []
    log = capsys.readouterr().out
    assert "::warning title=kernelpro::the follow-up pull request has no labels performance: GitHub answered 403" in log
    assert "::warning title=kernelpro::the follow-up pull request has no reviewers octo/no-such-team: GitHub answered 422" in log
    assert world.fake.statuses[-1]["state"] == "success"
