"""bot/progress.py: the trusted progress job against the local GitHub.

The workflow run, its jobs and its artifacts live in the fake (every request checked against
GitHub's OpenAPI description; artifact downloads go through the real 302 to a signed URL on a
second loopback server). Time is scripted: the watcher's ``sleep`` advances the run to its next
state, so each poll sees what GitHub would show at that moment.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
from fake_github import FakeGitHub, JobState
from test_bot_artifact import H200, KERNEL

from kernelpro.bot.comment import DEFAULT_MARKER, StickyComment, progress_body
from kernelpro.bot.progress import Watcher, download_artifact, is_live, live_marker

REPO = "acme/kernels"
RUN = 4242
ALLOWED = {"swiglu": [KERNEL], "rms_norm": ["kernels/rms_norm.py"]}


def results_dir(tmp: Path, name: str, *, winner: bool = True) -> Path:
    """A real results folder (the H200 run of the demo) for target ``name``."""
    d = tmp / f"out-{name}"
    shutil.copytree(H200, d)
    for p in d.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    data = json.loads((d / "summary.json").read_text())
    t = data["targets"][0]
    t["target"] = name
    if not winner:
        t["winner"] = None
        t["stop_reason"] = "budget spent; no candidate passed the final gate"
        (d / "swiglu" / "patch.diff").unlink()
    (d / "summary.json").write_text(json.dumps(data))
    if name != "swiglu":
        (d / "swiglu").rename(d / name)
    return d


@dataclass
class World:
    fake: FakeGitHub
    tmp: Path
    jobs: dict[str, JobState]
    clock: list[float] = field(default_factory=lambda: [0.0])
    shown: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)

    def sticky(self) -> StickyComment:
        repo = self.fake.client().get_repo(REPO)
        return StickyComment(repo, 1, clock=lambda: self.clock[0])

    def comment(self) -> str:
        (c,) = [c for c in self.fake.comments.values() if c.body.startswith(DEFAULT_MARKER)]
        return c.body

    def watcher(self, steps: list[Callable[[], None]], **kw: object) -> Watcher:
        """A watcher whose every sleep records the comment, then applies the next step."""

        def sleep(s: float) -> None:
            self.shown.append(self.comment())
            self.clock[0] += s
            if steps:
                steps.pop(0)()

        repo = self.fake.client().get_repo(REPO)
        args: dict[str, object] = dict(
            run_id=RUN,
            targets=["swiglu", "rms_norm"],
            allowed_files=ALLOWED,
            sticky=self.sticky(),
            fetch=partial(download_artifact, self.fake.base_url, "t", REPO),
            run_url=f"https://github.com/{REPO}/actions/runs/{RUN}",
            sleep=sleep,
            clock=lambda: self.clock[0],
            log=self.log.append,
        )
        args.update(kw)
        return Watcher(repo.get_workflow_run(RUN), **args)  # type: ignore[arg-type]

    def writes(self) -> int:
        return sum(r.method == "PATCH" and "/issues/comments/" in r.path for r in self.fake.requests)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with FakeGitHub.running() as fake:
        fake.add_repo(REPO, sha="a" * 40)
        fake.add_pull(REPO, head_ref="feature", head_sha="b" * 40)
        fake.add_run(REPO, head_sha="b" * 40, head_branch="feature", run_id=RUN)
        plan = fake.add_job(RUN, "plan (trusted, no pull-request code)")
        fake.set_job(plan, "completed", "success")
        fake.add_job(RUN, "progress (trusted, no pull-request code)", status="in_progress")
        jobs = {t: fake.add_job(RUN, f"optimize {t}") for t in ("swiglu", "rms_norm")}
        w = World(fake, tmp_path, jobs)
        # What the plan job leaves: the queued comment, live for this run.
        queued = progress_body("queued", kernel_i=0, kernels=2, evaluations=0, best_speedup=None)
        w.sticky().update(queued + live_marker(RUN) + "\n", force=True)
        yield w


def test_one_of_two_done_then_all_finished(world: World) -> None:
    fake, jobs = world.fake, world.jobs

    def start_swiglu() -> None:
        fake.set_job(jobs["swiglu"], "in_progress")

    def swiglu_done() -> None:
        fake.upload_artifact(RUN, "kernelpro-result-0", results_dir(world.tmp, "swiglu"))
        fake.set_job(jobs["swiglu"], "completed", "success")
        fake.set_job(jobs["rms_norm"], "in_progress")

    def rms_norm_done() -> None:
        fake.upload_artifact(RUN, "kernelpro-result-1", results_dir(world.tmp, "rms_norm", winner=False))
        fake.set_job(jobs["rms_norm"], "completed", "success")

    steps = [start_swiglu, swiglu_done, lambda: None, rms_norm_done]
    snap = world.watcher(steps).watch()
    assert snap is not None and snap.finished and snap.done == 2
    first, running, one_done, unchanged = world.shown
    assert "0/2 kernel(s) done" in first and "waiting for a GPU runner" in first
    assert "0/2 kernel(s) done" in running and "running: swiglu" in running
    # One of two finished: its numbers from the real results artifact.
    assert "1/2 kernel(s) done" in one_done and "running: rms\\_norm" in one_done
    assert "Evaluations so far: 16" in one_done and "**3.55x** (swiglu)" in one_done
    assert "| swiglu | [done](" in one_done and "| 16 | **3.55x** |" in one_done
    assert unchanged == one_done
    final = world.comment()
    assert "All 2 kernel(s) finished" in final and "the baseline stands" in final
    assert is_live(final, RUN)  # publish takes it from here
    # Five polls, four texts: the unchanged poll made no request.
    assert world.writes() == 4
    # The archive came from the storage server, fetched without the token.
    assert len(fake.blob_requests) == 2
    assert all("authorization" not in h for _, h in fake.blob_requests)


def test_never_overwrites_the_final_state(world: World) -> None:
    w = world.watcher([])
    # publish wrote the final state before this poll
    world.sticky().update(progress_body("done", kernel_i=2, kernels=2, evaluations=20, best_speedup=3.5,
                                        pr_url="https://github.com/acme/kernels/pull/9"), force=True)
    before, n = world.comment(), world.writes()
    w.watch()
    assert world.comment() == before and world.writes() == n
    assert any("no longer shows this run's live progress" in line for line in world.log)


def test_failed_job_and_refused_artifact(world: World, tmp_path: Path) -> None:
    fake, jobs = world.fake, world.jobs
    hostile = results_dir(tmp_path, "swiglu")
    patch = hostile / "swiglu" / "patch.diff"
    patch.write_text(patch.read_text().replace(KERNEL, ".github/workflows/ci.yml"))

    def end() -> None:
        fake.upload_artifact(RUN, "kernelpro-result-0", hostile)
        fake.set_job(jobs["swiglu"], "completed", "success")
        fake.set_job(jobs["rms_norm"], "completed", "failure")

    snap = world.watcher([end]).watch()
    assert snap is not None and snap.finished and snap.done == 0
    body = world.comment()
    assert "An artifact was refused: kernelpro-result-0" in body and "ci.yml" in body
    assert "the job ended: failure" in body and "without results" in body
    assert any("::warning" in line and "refused" in line for line in world.log)


def test_two_artifacts_claiming_one_kernel(world: World) -> None:
    fake, jobs = world.fake, world.jobs

    def end() -> None:
        fake.upload_artifact(RUN, "kernelpro-result-0", results_dir(world.tmp, "swiglu"))
        fake.upload_artifact(RUN, "kernelpro-result-1", results_dir(world.tmp / "x", "swiglu"))
        for j in jobs.values():
            fake.set_job(j, "completed", "success")

    snap = world.watcher([end]).watch()
    assert snap is not None
    (sw,) = [k for k in snap.kernels if k.name == "swiglu"]
    assert sw.state == "failed" and "two artifacts claim" in sw.note


def test_github_errors_are_retried_at_the_next_poll(world: World) -> None:
    fake, jobs = world.fake, world.jobs
    fake.fail_next("GET", rf"/actions/runs/{RUN}/jobs$", 502)

    def end() -> None:
        for j in jobs.values():
            fake.set_job(j, "completed", "cancelled")

    snap = world.watcher([lambda: None, end]).watch()
    assert snap is not None and snap.finished
    assert any("poll failed (1/10)" in line and "502" in line for line in world.log)
    assert "the job ended: cancelled" in world.comment()


def test_gives_up_after_max_errors_and_after_max_time(world: World) -> None:
    world.fake.fail_next("GET", rf"/actions/runs/{RUN}/jobs$", 500, times=3)
    assert world.watcher([], max_errors=3).watch() is None
    assert any("giving up" in line for line in world.log)
    snap = world.watcher([], max_s=90).watch()  # the jobs never start
    assert snap is not None and not snap.finished
    assert any("stopping after 2 minutes" in line for line in world.log)


def test_an_expired_or_tampered_download_is_refused(world: World, tmp_path: Path) -> None:
    from kernelpro.bot.progress import ProgressError

    a = world.fake.upload_artifact(RUN, "kernelpro-result-0", results_dir(tmp_path, "swiglu"))
    data = download_artifact(world.fake.base_url, "t", REPO, a.id)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert "summary.json" in z.namelist() and "swiglu/patch.diff" in z.namelist()
    with pytest.raises(ProgressError, match="410"):
        a.expired = True
        download_artifact(world.fake.base_url, "t", REPO, a.id)
    a.expired = False
    with pytest.raises(Exception, match="more than the limit"):
        download_artifact(world.fake.base_url, "t", REPO, a.id, limit=100)
    import requests

    (path, _), = world.fake.blob_requests[-1:]
    r = requests.get(world.fake.blob_url + path.replace("sig=", "sig=0"), timeout=5)
    assert r.status_code == 403
    # The token never reaches the storage host, even when a client sends it there.
    r = requests.get(world.fake.blob_url + path, headers={"Authorization": "Bearer t"}, timeout=5)
    assert r.status_code == 400 and any("Authorization" in e for e in world.fake.take_errors())


def test_the_command_line_watches_until_the_jobs_are_done(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`kernelpro action progress` as the workflow runs it: event, run id and API URL from the env."""
    from github_spec import valid_webhook_example, write_event

    from kernelpro.cli import main

    for j in world.jobs.values():
        world.fake.set_job(j, "completed", "failure")
    event = valid_webhook_example("pull_request", "labeled")
    event["label"]["name"], event["repository"]["full_name"] = "optimize-kernels", REPO
    event["number"] = event["pull_request"]["number"] = 1
    path = write_event(world.tmp / "event.json", event)
    for k, v in {"GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(path), "GITHUB_TOKEN": "t",
                 "GITHUB_API_URL": world.fake.base_url, "GITHUB_RUN_ID": str(RUN),
                 "GITHUB_REPOSITORY": REPO}.items():
        monkeypatch.setenv(k, v)
    files = json.dumps(ALLOWED)
    assert main(["action", "progress", '--targets=["swiglu", "rms_norm"]', f"--files={files}", "--interval=0"]) == 0
    assert "0/2 kernel(s) done, 0 evaluation(s); all jobs finished" in capsys.readouterr().out
    assert "the job ended: failure" in world.comment()
    # Plan outputs that do not fit together are a clear error, not a traceback.
    assert main(["action", "progress", '--targets=["swiglu", "other"]', f"--files={files}"]) == 2
    assert "--files has no entry for ['other']" in capsys.readouterr().err
    assert main(["action", "progress", "--targets=swiglu", f"--files={files}"]) == 2
    assert "JSON outputs" in capsys.readouterr().err


def test_an_oversized_archive_is_refused_once(world: World, tmp_path: Path) -> None:
    fake, jobs = world.fake, world.jobs

    def end() -> None:
        fake.upload_artifact(RUN, "kernelpro-result-0", results_dir(tmp_path, "swiglu"))
        for j in jobs.values():
            fake.set_job(j, "completed", "success")

    small = partial(download_artifact, fake.base_url, "t", REPO, limit=1000)
    snap = world.watcher([end], fetch=small).watch()
    assert snap is not None and snap.finished and snap.done == 0
    assert "more than the limit of 1000 bytes" in world.comment()
    assert len(fake.blob_requests) == 1
