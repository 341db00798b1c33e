"""The workflow's three jobs end to end: `kernelpro action plan|optimize|publish` against the local
GitHub (every request checked against GitHub's OpenAPI description), real git remotes, real
webhook payloads, and the real optimize loop on the CPU."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git
import pytest
from fake_github import FakeGitHub
from github_spec import valid_webhook_example, validate_webhook, write_event

from kernelpro import action
from kernelpro.cli import make_demo_repo
from kernelpro.settings import Settings

REPO = "octo/demo"


@dataclass
class World:
    """A repository on the local GitHub with PR #1 (the demo's kernel commit) and a clone of it."""

    fake: FakeGitHub
    origin: Path
    checkout: Path
    base: str
    head: str
    tmp: Path

    def settings(self, event: str, payload: dict[str, Any], **env: str) -> Settings:
        path = write_event(self.tmp / f"event-{event}.json", payload)
        out = self.tmp / "github_output"
        return Settings.from_env({"GITHUB_EVENT_NAME": event, "GITHUB_EVENT_PATH": str(path), "GITHUB_TOKEN": "t",
                                  "GITHUB_OUTPUT": str(out), "GITHUB_REPOSITORY": REPO, "KERNELPRO_DEVICE": "cpu",
                                  "KERNELPRO_PROGRESS": "0", **env})

    def comments(self) -> list[str]:
        issue = self.fake.repos[REPO].issues[1]
        return [self.fake.comments[c].body for c in issue.comments]


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    """Indirect parameters ``{"prefix": "/api/v3"}`` (GitHub Enterprise Server's API path) or
    ``{"head_repo": "mallory/demo"}`` (a pull request from a fork)."""
    kw: dict[str, Any] = getattr(request, "param", {})
    # The pull request was opened a minute before anyone comments on it: a bare retry approves the
    # head only if its commit and its push are from an earlier second than the comment (bot/plan.py).
    minute_ago = int(time.time()) - 60
    opened = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(minute_ago))  # as GitHub writes times
    with pytest.MonkeyPatch.context() as env:
        env.setenv("GIT_AUTHOR_DATE", f"{minute_ago} +0000")  # git's raw date format
        env.setenv("GIT_COMMITTER_DATE", f"{minute_ago} +0000")
        src = make_demo_repo(tmp_path / "src")
    s = git.Repo(src)
    head, base = s.head.commit.hexsha, s.head.commit.parents[0].hexsha
    origin = tmp_path / "origin.git"
    git.Repo.init(origin, bare=True)
    # GitHub keeps every PR's head at refs/pull/N/head: that is how forks' commits are fetched too.
    s.git.push(str(origin), f"{base}:refs/heads/main", f"{head}:refs/heads/feature", f"{head}:refs/pull/1/head")
    checkout = tmp_path / "checkout"
    git.Repo.clone_from(origin.as_uri(), checkout, branch="main")
    fake = FakeGitHub(prefix=kw.get("prefix", "")).start()
    fake.add_repo(REPO, sha=base)
    fake.link_git(REPO, origin)
    for pushed in fake.repos[REPO].activity:
        pushed["timestamp"] = opened
    fake.add_pull(REPO, head_ref="feature", head_sha=head, base_ref="main", base_sha=base, user="alice",
                  head_repo=kw.get("head_repo"))
    fake.set_role(REPO, "maint", "maintain")
    fake.set_role(REPO, "reader", "read")
    try:
        yield World(fake, origin, checkout, base, head, tmp_path)
    finally:
        fake.stop()
    fake.check()


def labeled(w: World, head: str | None = None) -> dict[str, Any]:
    p = valid_webhook_example("pull_request", "labeled")
    p["label"]["name"] = "optimize-kernels"
    p["repository"]["full_name"] = REPO
    p["number"] = p["pull_request"]["number"] = 1
    p["pull_request"]["head"]["sha"] = head or w.head
    p["pull_request"]["base"]["sha"] = w.base
    if p["pull_request"]["head"].get("repo"):
        head_repo = w.fake.repos[REPO].issues[1].pull.head_repo  # type: ignore[union-attr]
        p["pull_request"]["head"]["repo"]["full_name"] = head_repo
    p["sender"]["login"] = "maint"
    assert validate_webhook("pull_request", "labeled", p) == []
    return p


def retry(w: World, login: str, body: str = "/kernelpro retry") -> dict[str, Any]:
    p = valid_webhook_example("issue_comment", "created")
    p["repository"]["full_name"] = REPO
    p["issue"]["number"] = 1
    # what GitHub sends for a comment on a pull request (issue.pull_request, schema-checked below)
    p["issue"]["pull_request"] = {
        "url": f"https://api.github.com/repos/{REPO}/pulls/1",
        "html_url": f"https://github.com/{REPO}/pull/1",
        "diff_url": f"https://github.com/{REPO}/pull/1.diff",
        "patch_url": f"https://github.com/{REPO}/pull/1.patch",
        "merged_at": None,
    }
    c = w.fake.add_comment(REPO, 1, body, user=login)
    p["comment"]["id"], p["comment"]["body"], p["comment"]["created_at"] = c.id, body, c.created_at
    for u in (p["sender"], p["comment"]["user"]):
        u["login"], u["type"] = login, "User"
    assert validate_webhook("issue_comment", "created", p) == []
    return p


def test_label_plans_the_changed_kernel(world: World) -> None:
    s = world.settings("pull_request", labeled(world))
    p = action.plan(s, world.checkout, world.fake.client())
    assert (p.run, p.targets, p.head_sha, p.base_sha) == (True, ("swiglu",), world.head, world.base)
    assert "Queued" in _sticky(world) and "Will be optimized: swiglu." in _sticky(world)
    # The same event delivered twice: still one comment.
    assert action.plan(s, world.checkout, world.fake.client()).run
    assert len(world.comments()) == 1


def _push_unconfigured_relu(world: World, tmp_path: Path, branch: str) -> str:
    """A relu kernel that no .kernelpro.yml target names, committed on top of ``branch`` and pushed
    as the PR's head (branch feature, refs/pull/1/head); its SHA."""
    author = git.Repo.clone_from(world.origin.as_uri(), tmp_path / "author", branch=branch)
    (tmp_path / "author" / "kernels").mkdir(exist_ok=True)
    (tmp_path / "author" / "kernels" / "relu.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef _relu(x_ptr, n, B: tl.constexpr):\n"
        "    o = tl.program_id(0) * B + tl.arange(0, B)\n    tl.store(x_ptr + o, tl.maximum(tl.load(x_ptr + o), 0))\n")
    author.index.add(["kernels/relu.py"])
    author.index.commit("a relu kernel nobody configured")
    sha = author.head.commit.hexsha
    author.git.push("origin", f"+{sha}:refs/heads/feature", f"+{sha}:refs/pull/1/head")
    return sha


def test_changed_kernels_without_harness_are_named_next_to_the_targets(world: World, tmp_path: Path) -> None:
    sha = _push_unconfigured_relu(world, tmp_path, "feature")
    p = action.plan(world.settings("pull_request", labeled(world, head=sha)), world.checkout, world.fake.client())
    assert p.run and p.targets == ("swiglu",)
    body = _sticky(world)
    assert "Will be optimized: swiglu." in body and "no harness" in body
    assert "```yaml" in body and "_relu" in body and "kernels/relu.py" in body


def test_candidates_failing_everywhere_leave_the_baseline_and_open_no_pr(world: World) -> None:
    from test_bot_artifact import H200

    out = world.tmp / "results" / "kernelpro-result-0"
    shutil.copytree(H200, out)
    data = json.loads((out / "summary.json").read_text())
    t = data["targets"][0]
    t.update(winner=None, gates=[], statuses={"PASSED": 1, "COMPILE_ERROR": 9, "RUNTIME_ERROR": 6},
             stop_reason="budget spent (16 evaluations)",
             curve=[{"evaluation": i + 1, "best_speedup": 1.0, "status": "PASSED" if i == 0 else "COMPILE_ERROR"}
                    for i in range(16)])
    (out / "summary.json").write_text(json.dumps(data))
    (out / "swiglu" / "patch.diff").unlink()
    s = world.settings("pull_request", labeled(world), GITHUB_STEP_SUMMARY=str(world.tmp / "summary.md"))
    msg = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri())
    assert msg.startswith("comment-only:")
    body = _sticky(world)
    assert "the baseline stands" in body and "no candidate passed verification" in body
    assert [i.number for i in world.fake.repos[REPO].issues.values() if i.pull] == [1]
    assert "kernelpro/pr-1" not in git.Repo(world.origin).git.for_each_ref("--format=%(refname)")
    assert "the PR's kernel stands" in (world.tmp / "summary.md").read_text()


def test_a_push_after_the_label_is_not_approved(world: World) -> None:
    s = world.settings("pull_request", labeled(world, head="f" * 40))
    p = action.plan(s, world.checkout, world.fake.client())
    assert not p.run and "not approved" in p.reason
    assert any("not approved" in b for b in world.comments())


def _reactions(w: World, comment_id: int) -> list[str]:
    return [content for _, _, content in w.fake.comments[comment_id].reactions]


def test_retry_from_a_reader_is_refused_politely(world: World) -> None:
    payload = retry(world, "reader")
    s = world.settings("issue_comment", payload)
    p = action.plan(s, world.checkout, world.fake.client())
    assert not p.run and p.reason == "retry refused: no write access"
    assert any("only honoured from people with write access" in b for b in world.comments())
    assert _reactions(world, payload["comment"]["id"]) == ["confused"]


def test_retry_from_a_maintainer_runs_with_its_arguments(world: World) -> None:
    payload = retry(world, "maint", "/kernelpro retry --kernel swiglu --budget 3")
    s = world.settings("issue_comment", payload)
    p = action.plan(s, world.checkout, world.fake.client())
    assert (p.run, p.targets, p.budget, p.head_sha) == (True, ("swiglu",), 3, world.head)
    assert _reactions(world, payload["comment"]["id"]) == ["eyes"]


def test_no_changed_kernel_says_so(world: World, tmp_path: Path) -> None:
    author = git.Repo.clone_from(world.origin.as_uri(), tmp_path / "author", branch="main")
    (tmp_path / "author" / "README.md").write_text("docs only\n")
    author.index.add(["README.md"])
    author.index.commit("docs")
    docs = author.head.commit.hexsha
    author.git.push("origin", f"{docs}:refs/heads/feature", f"+{docs}:refs/pull/1/head", "--force")
    s = world.settings("pull_request", labeled(world, head=docs))
    p = action.plan(s, world.checkout, world.fake.client())
    assert not p.run and "no configured kernel changed" in p.reason


def test_plan_optimize_publish_opens_one_follow_up_pr(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = world.tmp / "summary.md"
    s = world.settings("pull_request", labeled(world), GITHUB_STEP_SUMMARY=str(summary))
    p = action.plan(s, world.checkout, world.fake.client())
    assert p.run
    out = _optimize(world, s, p.base_sha, p.head_sha, monkeypatch)
    assert json.loads((out / "summary.json").read_text())["targets"][0]["winner"] is not None
    msg = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri())
    assert msg.startswith("created:")
    # The `kernelpro` commit status on the approved head: pending from plan, then the verdict with the PR's link.
    st = [(x["sha"], x["state"], x["context"], x["description"], x.get("target_url")) for x in world.fake.statuses]
    (n,) = [i.number for i in world.fake.repos[REPO].issues.values() if i.pull and i.pull.head_ref == "kernelpro/pr-1"]
    assert st == [(world.head, "pending", "kernelpro", "optimizing 1 kernel(s)", None),
                  (world.head, "success", "kernelpro",
                   f"verified candidates (CPU interpreter: no GPU timing); follow-up #{n}", msg.split(" ", 1)[1])]
    # The final sticky comment is the summary: verdict, caveat, follow-up link.
    assert "verified; CPU interpreter timing" in _sticky(world) and "**These timings are not GPU timings.**" in _sticky(world)
    # GITHUB_STEP_SUMMARY: optimize's report, then publish's table.
    assert "## kernelpro" in summary.read_text() and "| `swiglu` | " in summary.read_text()
    again = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                   push_url=world.origin.as_uri())
    assert again.startswith("updated:")  # the same event delivered twice: one branch, one PR
    pulls = [i for i in world.fake.repos[REPO].issues.values() if i.pull and i.pull.head_ref == "kernelpro/pr-1"]
    assert len(pulls) == 1
    done = [b for b in world.comments() if "<!-- kernelpro:progress -->" in b]
    assert len(done) == 1 and "/pull/" in done[0]
    # A writer's /kernelpro retry updates that PR: no duplicate.
    r = world.settings("issue_comment", retry(world, "maint"))
    msg = action.publish_results(r, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri(), head_sha=p.head_sha)
    assert msg.startswith("updated:") and msg.endswith(f"/pull/{pulls[0].number}")
    # A maintainer closes the follow-up PR unmerged: declined. The label's event again publishes nothing...
    (old,) = pulls
    world.fake.close_pull(REPO, old.number)
    msg = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri())
    assert msg.startswith("declined:") and "closed without merging" in _sticky(world)
    # ...until a writer asks with /kernelpro retry: a new PR that links the declined one.
    msg = action.publish_results(r, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri(), head_sha=p.head_sha)
    assert msg.startswith("created:")
    (new,) = [i for i in world.fake.repos[REPO].issues.values()
              if i.pull and i.pull.head_ref == "kernelpro/pr-1" and i.state == "open"]
    assert new.number != old.number and (new.body or "").startswith(f"Supersedes #{old.number}")


def test_a_kernel_without_harness_gets_a_config_snippet(world: World, tmp_path: Path) -> None:
    sha = _push_unconfigured_relu(world, tmp_path, "main")
    p = action.plan(world.settings("pull_request", labeled(world, head=sha)), world.checkout, world.fake.client())
    assert not p.run and "no configured kernel changed" in p.reason
    (body,) = [b for b in world.comments() if "<!-- kernelpro:progress -->" in b]
    assert "_relu" in body and "targets:" in body  # a ready-to-paste .kernelpro.yml snippet


def test_publish_acknowledges_a_retry_with_a_thumbs_up(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = retry(world, "maint", "/kernelpro retry --budget 3")
    s = world.settings("issue_comment", payload)
    p = action.plan(s, world.checkout, world.fake.client())
    _optimize(world, s, p.base_sha, p.head_sha, monkeypatch)
    # A retry's event names no commit: publish builds on the one plan approved, never the PR's head now.
    with pytest.raises(action.ActionError, match="pass the plan job's `head_sha` output"):
        action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                               push_url=world.origin.as_uri())
    msg = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri(), head_sha=p.head_sha)
    assert msg.startswith("created:")
    assert _reactions(world, payload["comment"]["id"]) == ["eyes", "+1"]


def _second_target_on_base(w: World, tmp_path: Path) -> str:
    """A new base commit whose configuration has two targets over the PR's kernel file."""
    base = git.Repo.clone_from(w.origin.as_uri(), tmp_path / "maintainer", branch="main")
    cfg = tmp_path / "maintainer" / ".kernelpro.yml"
    text = cfg.read_text()
    second = text[text.index("  - name: swiglu"):].replace("name: swiglu", "name: swiglu_big", 1)
    cfg.write_text(text + second)
    base.index.add([".kernelpro.yml"])
    base.index.commit("a second target")
    sha = base.head.commit.hexsha
    base.git.push("origin", "main")
    pull = w.fake.repos[REPO].issues[1].pull
    assert pull is not None
    pull.base_sha = sha
    return sha


def test_progress_during_the_run_then_done(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """plan -> optimize (one of two targets for real) while the progress job watches -> publish."""
    from kernelpro.bot.progress import is_live

    base = _second_target_on_base(world, world.tmp)
    p_ = labeled(world)
    p_["pull_request"]["base"]["sha"] = base
    env = {"GITHUB_RUN_ID": "77", "GITHUB_API_URL": world.fake.base_url}
    s = world.settings("pull_request", p_, **env)


    class PlanArgs:  # `kernelpro action plan`, which reaches GitHub through GITHUB_API_URL
        checkout, out = str(world.checkout), str(world.tmp / "plan")

    assert action.cmd_plan(PlanArgs, s) == 0
    outputs = dict(line.split("=", 1) for line in (world.tmp / "github_output").read_text().splitlines())
    assert outputs["run"] == "true" and json.loads(outputs["targets"]) == ["swiglu", "swiglu_big"]
    assert json.loads(outputs["files"]) == {"swiglu": ["kernels/swiglu.py"], "swiglu_big": ["kernels/swiglu.py"]}
    targets, files = action._plan_lists(outputs["targets"], outputs["files"])  # what the workflow passes
    p = argparse.Namespace(base_sha=outputs["base_sha"], head_sha=outputs["head_sha"])
    fake = world.fake
    fake.add_run(REPO, head_sha=world.head, head_branch="feature", run_id=77)
    jobs = {t: fake.add_job(77, f"optimize {t}") for t in targets}

    # The optimize job of swiglu, for real (CPU); its artifact is what the progress job reads.
    out = _optimize(world, s, p.base_sha, p.head_sha, monkeypatch)
    evaluations = json.loads((out / "summary.json").read_text())["targets"][0]["evaluations"]

    seen: list[str] = []

    def sticky_text() -> str:
        (b,) = [b for b in world.comments() if b.startswith("<!-- kernelpro:progress -->")]
        return b

    steps = [
        lambda: (fake.set_job(jobs["swiglu"], "in_progress"), fake.set_job(jobs["swiglu_big"], "in_progress")),
        lambda: (fake.upload_artifact(77, "kernelpro-result-0", out), fake.set_job(jobs["swiglu"], "completed", "success")),
        lambda: fake.set_job(jobs["swiglu_big"], "completed", "failure"),
    ]

    now = [0.0]

    def sleep(interval: float) -> None:
        seen.append(sticky_text())
        now[0] += interval
        steps.pop(0)()

    queued = sticky_text()  # as plan left it
    assert "Queued" in queued and is_live(queued, 77)
    snap = action.watch_progress(s, targets, files, world.fake.client(), sleep=sleep, clock=lambda: now[0])
    assert snap is not None and snap.finished and not steps
    waiting, running, one_of_two = seen
    assert "0/2 kernel(s) done" in waiting and "waiting for a GPU runner" in waiting
    assert "0/2 kernel(s) done" in running and "running: swiglu, swiglu\\_big" in running
    assert "1/2 kernel(s) done" in one_of_two and "running: swiglu\\_big" in one_of_two
    assert f"Evaluations so far: {evaluations}" in one_of_two and f"| {evaluations} |" in one_of_two
    assert "All 2 kernel(s) finished" in sticky_text() and "the job ended: failure" in sticky_text()

    # publish writes the final state: done, with the follow-up PR; the live marker is gone.
    msg = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri(), head_sha=p.head_sha)
    assert msg.startswith("created:")
    done = sticky_text()
    assert "**Follow-up pull request:**" in done and "/pull/" in done and not is_live(done, 77)
    # A late poll of the progress job leaves the final state alone.
    n = len(world.fake.requests)
    again = action.watch_progress(s, targets, files, world.fake.client(), sleep=sleep, clock=lambda: now[0])
    assert again is not None and sticky_text() == done
    assert not [r for r in world.fake.requests[n:] if r.method != "GET"]


def _optimize(w: World, s: Settings, base: str, head: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The optimize job for swiglu, for real on the CPU (budget 3), into results/kernelpro-result-0.
    The plan job's outputs reach it as KERNELPRO_BASE_SHA, KERNELPRO_HEAD_SHA and KERNELPRO_BUDGET."""
    s = dataclasses.replace(s, base_sha=base, head_sha=head, budget=3)
    out = w.tmp / "results" / "kernelpro-result-0"
    args = argparse.Namespace(target="swiglu", checkout=str(w.checkout), out=str(out))
    assert action.cmd_optimize(args, s) == 0
    return out


def _sticky(w: World) -> str:
    (body,) = [b for b in w.comments() if b.startswith("<!-- kernelpro:progress -->")]
    return body


FORK = {"head_repo": "mallory/demo"}


@pytest.mark.parametrize("world", [FORK], indirect=True)
def test_a_label_on_a_fork_does_not_run_and_says_why(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    s = world.settings("pull_request", labeled(world))
    # GitHub gives a fork's pull_request event a read-only token: the comment is refused.
    world.fake.fail_next("POST", r"/issues/1/comments$", 403)
    p = action.plan(s, world.checkout, world.fake.client())
    assert not p.run and "fork" in p.reason and "/kernelpro retry" in p.reason
    assert world.comments() == []
    assert "::notice title=kernelpro::" in capsys.readouterr().out
    # Where the repository sends write tokens to fork workflows, the comment says it.
    p = action.plan(s, world.checkout, world.fake.client())
    assert not p.run and "comes from a fork" in _sticky(world)


@pytest.mark.parametrize("world", [FORK], indirect=True)
def test_a_retry_on_a_fork_puts_the_patch_in_the_comment(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    payload = retry(world, "maint", "/kernelpro retry --budget 3")
    s = world.settings("issue_comment", payload)
    p = action.plan(s, world.checkout, world.fake.client())
    assert p.run and p.head_sha == world.head  # fetched from refs/pull/1/head: the fork's commit
    _optimize(world, s, p.base_sha, p.head_sha, monkeypatch)
    msg = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri(), head_sha=p.head_sha)
    assert msg.startswith("comment-only:") and "fork" in msg
    body = _sticky(world)
    assert "cannot push to" in body and "```diff\n--- a/kernels/swiglu.py" in body
    heads = git.Repo(world.origin).git.for_each_ref("--format=%(refname)", "refs/heads")
    assert "kernelpro/pr-1" not in heads  # no branch in the base repository
    assert [i.number for i in world.fake.repos[REPO].issues.values() if i.pull] == [1]
    assert _reactions(world, payload["comment"]["id"]) == ["eyes", "+1"]


@pytest.mark.parametrize("world", [{"prefix": "/api/v3"}], indirect=True)
def test_github_enterprise_server_api_url(world: World) -> None:
    assert world.fake.base_url.endswith("/api/v3")
    s = world.settings("pull_request", labeled(world), GITHUB_API_URL=world.fake.base_url)
    p = action.plan(s, world.checkout)  # the client is built from GITHUB_API_URL
    assert p.run and p.targets == ("swiglu",)
    assert world.fake.requests and "Queued" in _sticky(world)


def test_safe_retries(world: World) -> None:
    from github import Auth, Github, GithubException

    gh = Github(base_url=world.fake.base_url, auth=Auth.Token("t"), retry=action.retry_policy(),
                seconds_between_requests=None, seconds_between_writes=None)
    fake, repo = world.fake, gh.get_repo(REPO)
    fake.fail_next("GET", r"/pulls/1$", 502)
    assert repo.get_pull(1).number == 1  # a GET is retried
    c = fake.add_comment(REPO, 1, "x", user="github-actions[bot]")
    fake.fail_next("PATCH", rf"/issues/comments/{c.id}$", 503)
    repo.get_issue(1).get_comment(c.id).edit("y")  # so is a PATCH (it sets the whole body)
    assert fake.comments[c.id].body == "y"
    fake.fail_next("POST", r"/issues/1/comments$", 500)
    with pytest.raises(GithubException) as e:
        repo.get_issue(1).create_comment("once")
    posts = [r for r in fake.requests if r.method == "POST" and r.path.endswith("/issues/1/comments")]
    assert len(posts) == 1  # never repeated: GitHub may have created it
    assert "server error" in action.explain(e.value, "commenting") and "rerun this job" in action.explain(e.value, "x")
    fake.fail_next("POST", r"/reactions$", "rate-limit", retry_after=1)
    start = time.monotonic()
    repo.get_issue(1).get_comment(c.id).create_reaction("eyes")  # a rate-limited POST was not processed
    assert time.monotonic() - start >= 0.9 and _reactions(world, c.id) == ["eyes"]
    fake.fail_next("GET", r"/pulls/1$", 404)
    with pytest.raises(GithubException) as e:
        repo.get_pull(1)
    assert "cannot see it" in action.explain(e.value, "reading the pull request")
    assert sum(r.method == "GET" and r.path.endswith("/pulls/1") for r in fake.requests) == 3  # 404: once


def test_github_errors_at_each_write_then_a_rerun_finishes(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = world.fake
    payload = retry(world, "maint", "/kernelpro retry --budget 3")
    s = world.settings("issue_comment", payload)
    # plan: the sticky comment is needed, so its failure stops plan (and is said in a comment)...
    fake.fail_next("POST", r"/issues/1/comments$", 422)
    with pytest.raises(action.ActionError, match="planning failed: could not create the progress comment on #1: GitHub answered 422"):
        action.plan(s, world.checkout, fake.client())
    assert "**Stopped**" in _sticky(world) and "GitHub answered 422" in _sticky(world)
    # ...the eyes reaction only acknowledges, so the rerun goes on without it.
    fake.fail_next("POST", r"/issues/comments/\d+/reactions$", 500)
    p = action.plan(s, world.checkout, fake.client())
    assert p.run and "Queued" in _sticky(world)
    _optimize(world, s, p.base_sha, p.head_sha, monkeypatch)

    def publish() -> str:
        return action.publish_results(s, world.checkout, world.tmp / "results", fake.client(),
                                      push_url=world.origin.as_uri(), head_sha=p.head_sha)

    for method, path, status, said in [
        ("POST", r"/repos/octo/demo/pulls$", 500, "opening the pull request"),
        ("PATCH", r"/issues/comments/\d+$", 502, "the progress comment could not say so"),
        ("PATCH", r"/pulls/\d+$", 422, "updating pull request"),
    ]:
        fake.fail_next(method, path, status)
        with pytest.raises(action.ActionError, match=said):
            publish()
        assert str(status) in _sticky(world)  # said where the maintainer looks
    fake.fail_next("POST", r"/issues/comments/\d+/reactions$", 403)
    assert publish().startswith("updated:")  # a refused +1 does not fail a published run
    assert publish().startswith("updated:")
    bot_prs = [i for i in fake.repos[REPO].issues.values() if i.pull and i.pull.head_ref == "kernelpro/pr-1"]
    assert len(bot_prs) == 1 and "**Follow-up pull request:**" in _sticky(world) and "/pull/" in _sticky(world)
    reactions = _reactions(world, payload["comment"]["id"])
    assert reactions[-1] == "+1" and "confused" in reactions  # the failed runs said so too


@pytest.mark.parametrize("downloaded", [False, True], ids=["no-folder", "empty-folder"])
def test_publish_without_results_ends_the_queued_comment_and_the_pending_status(world: World,
                                                                                downloaded: bool) -> None:
    """Every optimize job failed, or the run was cancelled: no artifact to download. The comment must
    not stay "Queued" (with its live marker) nor the status pending (a required check would block)."""
    s = world.settings("pull_request", labeled(world), GITHUB_RUN_ID="77")
    p = action.plan(s, world.checkout, world.fake.client())
    assert p.run and "kernelpro:live run=77" in _sticky(world) and world.fake.statuses[-1]["state"] == "pending"
    results = world.tmp / "results"
    if downloaded:
        results.mkdir()
    with pytest.raises(action.ActionError, match="no optimize job uploaded results"):
        action.publish_results(s, world.checkout, results, world.fake.client(), push_url=world.origin.as_uri(),
                               head_sha=p.head_sha)
    body = _sticky(world)
    assert "**Stopped**" in body and "no optimize job uploaded results" in body, body
    assert f"[Workflow run](https://github.com/{REPO}/actions/runs/77): its job logs say what happened" in body
    assert "Queued" not in body and "kernelpro:live" not in body
    last = world.fake.statuses[-1]
    assert (last["sha"], last["state"], last["target_url"]) == (
        world.head, "error", f"https://github.com/{REPO}/actions/runs/77")
    assert "no optimize job uploaded results" in last["description"]


def test_a_kernel_whose_optimize_job_failed_keeps_its_row(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two targets planned, one optimize job uploaded nothing: the final comment still names it."""
    base = _second_target_on_base(world, world.tmp)
    payload = labeled(world)
    payload["pull_request"]["base"]["sha"] = base
    p = action.plan(world.settings("pull_request", payload), world.checkout, world.fake.client())
    assert p.targets == ("swiglu", "swiglu_big")
    _optimize(world, world.settings("pull_request", payload), p.base_sha, p.head_sha, monkeypatch)
    # The workflow gives publish the plan's `targets` output (the action's `targets` input).
    s = world.settings("pull_request", payload, KERNELPRO_TARGETS=json.dumps(list(p.targets)), GITHUB_RUN_ID="77")
    msg = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri(), head_sha=p.head_sha)
    assert msg.startswith("created:")
    lines = _sticky(world).splitlines()
    header = next(ln for ln in lines if ln.startswith("| kernel |"))
    table = lines[lines.index(header):]
    table = table[: next(i for i, ln in enumerate(table) if not ln.startswith("|"))]
    (row,) = [ln for ln in table if ln.startswith("| `swiglu_big` |")]
    assert "its optimize job failed and uploaded no results" in row, row
    assert f"(its log in the [workflow run](https://github.com/{REPO}/actions/runs/77) says why)" in row
    assert "`/kernelpro retry --kernel swiglu_big` runs it again" in row
    assert row.count("|") == header.count("|")  # a row of the same table, not a second one
    assert any(ln.startswith("| `swiglu` |") for ln in table)


def test_a_kernel_without_results_is_named_when_no_pr_is_opened(world: World) -> None:
    """The comment-only outcome (no verified winner) names the target without results too."""
    from test_bot_artifact import H200

    out = world.tmp / "results" / "kernelpro-result-0"
    shutil.copytree(H200, out)
    data = json.loads((out / "summary.json").read_text())
    data["targets"][0].update(winner=None, gates=[], stop_reason="budget spent (16 evaluations)")
    (out / "summary.json").write_text(json.dumps(data))
    (out / "swiglu" / "patch.diff").unlink()
    s = world.settings("pull_request", labeled(world), KERNELPRO_TARGETS='["swiglu", "swiglu_big"]')
    msg = action.publish_results(s, world.checkout, world.tmp / "results", world.fake.client(),
                                 push_url=world.origin.as_uri())
    assert msg.startswith("comment-only:")
    body = _sticky(world)
    assert "the baseline stands" in body
    (row,) = [ln for ln in body.splitlines() if ln.startswith("| `swiglu_big` |")]
    assert "its optimize job failed and uploaded no results" in row
