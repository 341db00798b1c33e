"""Live progress while the optimize jobs run, told by a trusted job that watches them.

Why a separate job: the optimize jobs run the pull request's code on the GPU runner, so they hold
a read-only token and no write secret (a token in that job would be readable by the PR's code: same
OS user, ``/proc/<pid>/environ``). The sticky comment is therefore edited by the workflow's
``progress`` job, which runs on a GitHub-hosted runner next to the optimize matrix, runs no PR
code, and needs only ``actions: read`` and ``pull-requests: write``. Every ``interval_s`` it:

1. lists the run's jobs (``GET /repos/{owner}/{repo}/actions/runs/{run_id}/jobs``, latest attempt)
   and finds each target's optimize job by its name (``optimize <target>`` in the workflow);
2. lists the run's artifacts (``GET .../actions/runs/{run_id}/artifacts``: with
   actions/upload-artifact v4 an artifact is listed as soon as its job uploaded it), downloads each
   new ``kernelpro-result-*`` archive once (``GET .../actions/artifacts/{id}/zip`` answers 302 to a
   signed storage URL, fetched *without* the token) and reads it as untrusted data:
   :func:`~kernelpro.bot.artifact.extract_results` then
   :func:`~kernelpro.bot.artifact.load_results` against the trusted kernel files from the plan;
3. renders "kernel i/n done, running: X; evaluations so far; best speedup so far" (the optimize
   jobs' words, unchecked until publish: they ran the PR's code) and
   edits the sticky comment when the text changed (rate-limited by
   :class:`~kernelpro.bot.comment.StickyComment`).

It stops when every optimize job has completed (the publish job then writes the final state),
after ``max_s``, or as soon as the comment no longer carries this run's *live* marker (publish
wrote the final state first, or a person deleted the comment): it never overwrites a final state.
Progress is cosmetic, so GitHub errors here are logged and retried at the next poll, never fatal;
after ``max_errors`` failed polls in a row the job gives up and says so in its log.

What it cannot show: how many evaluations a kernel that is still running has done. That counter
lives in the optimize job, which cannot write; it is in that job's log (linked from the table).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import requests
from github import GithubException

from kernelpro.settings import Settings

from .artifact import MAX_ZIP_BYTES, ArtifactError, TargetResults, extract_results, load_results
from .body import _safe_url, md, render_comment
from .comment import CommentError, StickyComment, last_line
from .event import Trigger

__all__ = [
    "ARTIFACT_PREFIX",
    "JOB_PREFIX",
    "KernelProgress",
    "ProgressError",
    "Snapshot",
    "Watcher",
    "download_artifact",
    "is_live",
    "live_marker",
    "render",
    "watch",
]

ARTIFACT_PREFIX = "kernelpro-result-"
"""The optimize jobs upload their results as ``kernelpro-result-<job index>``."""
JOB_PREFIX = "optimize "
"""The optimize job of target X is named ``optimize X`` (the workflow's ``name:``)."""

State = Literal["queued", "running", "done", "failed"]


class ProgressError(RuntimeError):
    """A poll failed (download, GitHub); the watcher logs it and tries again at the next poll."""


def live_marker(run_id: int | str) -> str:
    """The hidden line that says the comment shows run ``run_id``'s live progress (queued/running)."""
    return f"<!-- kernelpro:live run={str(run_id).strip()} -->"


def is_live(body: str | None, run_id: int | str) -> bool:
    """Whether ``body`` still shows run ``run_id``'s live progress (no final state written yet)."""
    return last_line(body) == live_marker(run_id)


@dataclass(frozen=True)
class KernelProgress:
    """Where one target stands."""

    name: str
    """Target name (from the trusted plan)."""
    state: State
    """queued, running, done or failed."""
    evaluations: int | None
    """Evaluations of a finished kernel (from its results); None while it runs."""
    speedup: float | None
    """Its verified speedup (passed the final gate); None when the baseline stands or not done."""
    note: str
    """Why it failed, or what a done kernel found (plain text; escaped when rendered)."""
    job_url: str | None
    """The optimize job's page on GitHub, when the job exists."""


@dataclass(frozen=True)
class Snapshot:
    """The run as one poll saw it."""

    kernels: tuple[KernelProgress, ...]
    """One per target, in plan order."""
    finished: bool
    """Every target's optimize job has completed."""
    refused: tuple[str, ...]
    """Why artifacts were refused (untrusted data that failed validation)."""

    @property
    def done(self) -> int:
        """Kernels whose results are in."""
        return sum(k.state == "done" for k in self.kernels)

    @property
    def evaluations(self) -> int:
        """Evaluations of the finished kernels."""
        return sum(k.evaluations or 0 for k in self.kernels if k.state == "done")

    @property
    def best(self) -> KernelProgress | None:
        """The finished kernel with the best verified speedup, if any has one."""
        verified = [k for k in self.kernels if k.state == "done" and k.speedup]
        return max(verified, key=lambda k: k.speedup or 0.0, default=None)


# --------------------------------------------------------------------------- rendering


def _cell(k: KernelProgress) -> tuple[str, str, str]:
    url = _safe_url(k.job_url)
    state = f"[{k.state}]({url})" if url else k.state
    if k.state == "failed" and k.note:
        state += f": {md(k.note, 200)}"
    evals = str(k.evaluations) if k.evaluations is not None else (
        "in its job log" if k.state == "running" else "")
    if k.state != "done":
        best = ""
    elif k.speedup:
        best = f"**{k.speedup:.2f}x**"
    else:
        best = md(k.note or "the baseline stands", 200)
    return state, evals, best


def render(snapshot: Snapshot, *, run_id: int | str, run_url: str | None = None,
           interval_s: float = 30.0) -> str:
    """The progress comment's Markdown (the sticky marker is added by StickyComment)."""
    best = snapshot.best
    return render_comment(
        "live", finished=snapshot.finished, n=len(snapshot.kernels), done=snapshot.done,
        running=[md(k.name, 100) for k in snapshot.kernels if k.state == "running"],
        best=(f"**{best.speedup:.2f}x** ({md(best.name, 100)})" if best and best.speedup else "none verified yet"),
        evaluations=snapshot.evaluations, rows=[(md(k.name, 100), *_cell(k)) for k in snapshot.kernels],
        refused=[md(why, 300) for why in snapshot.refused[:5]], run_url=_safe_url(run_url),
        interval=f"{interval_s:.0f}", live=live_marker(run_id))


# --------------------------------------------------------------------------- download


def download_artifact(api_url: str, token: str, repo: str, artifact_id: int, *,
                      limit: int = MAX_ZIP_BYTES, timeout: float = 60.0) -> bytes:
    """The zip archive of artifact ``artifact_id`` of ``repo``, at most ``limit`` bytes.

    GitHub answers the API request with a 302 to a short-lived signed URL on its storage host; that
    URL is fetched without the token (it needs none, and the token must not leave GitHub).
    """
    url = f"{api_url.rstrip('/')}/repos/{repo}/actions/artifacts/{int(artifact_id)}/zip"
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
               "X-GitHub-Api-Version": "2022-11-28"}
    try:
        r = requests.get(url, headers=headers, allow_redirects=False, timeout=timeout)
    except requests.RequestException as e:
        raise ProgressError(f"downloading artifact {artifact_id}: {type(e).__name__}") from None
    location = r.headers.get("Location", "")
    if r.status_code != 302 or not location:
        raise ProgressError(f"downloading artifact {artifact_id}: GitHub answered {r.status_code}, "
                            "not a redirect to the archive (does the job have `actions: read`?)")
    scheme = urlsplit(location).scheme
    if scheme != "https" and not (scheme == "http" and url.startswith("http://")):
        raise ProgressError(f"downloading artifact {artifact_id}: refusing a {scheme or 'relative'} "
                            "storage URL")
    try:
        with requests.get(location, stream=True, timeout=timeout) as b:
            if b.status_code != 200:
                raise ProgressError(f"downloading artifact {artifact_id}: the storage answered "
                                    f"{b.status_code}")
            data = bytearray()
            for chunk in b.iter_content(1 << 16):
                data += chunk
                if len(data) > limit:
                    raise ArtifactError(f"artifact {artifact_id}", f"more than the limit of {limit} bytes")
    except requests.RequestException as e:
        raise ProgressError(f"downloading artifact {artifact_id}: {type(e).__name__}") from None
    return bytes(data)


# --------------------------------------------------------------------------- the watcher


_CONFLICT = "two artifacts claim this kernel; publish refuses them"


class Watcher:
    """Polls one workflow run and keeps the sticky comment up to date (see the module doc)."""

    def __init__(
        self,
        run: Any,
        *,
        run_id: int | str,
        targets: Sequence[str],
        allowed_files: Mapping[str, Sequence[str]],
        sticky: StickyComment,
        fetch: Callable[[int], bytes],
        run_url: str | None = None,
        job_prefix: str = JOB_PREFIX,
        interval_s: float = 30.0,
        max_s: float = 190 * 60.0,
        max_errors: int = 10,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        log: Callable[[str], None] = print,
    ) -> None:
        """``run``: the PyGithub WorkflowRun; ``targets`` and ``allowed_files`` come from the
        trusted plan job (target -> its kernel files); ``fetch(artifact_id)`` returns an
        artifact's zip archive (:func:`download_artifact`)."""
        missing = [t for t in targets if t not in allowed_files]
        if missing:
            raise ValueError(f"no kernel files for target(s) {missing}: pass the plan's `files` output")
        self.run = run
        self.run_id = run_id
        self.targets = tuple(targets)
        self.allowed = {k: list(v) for k, v in allowed_files.items()}
        self.sticky = sticky
        self.fetch = fetch
        self.run_url = run_url
        self.job_prefix = job_prefix
        self.interval_s = interval_s
        self.max_s = max_s
        self.max_errors = max_errors
        self.clock = clock
        self.sleep = sleep
        self.log = log
        self._seen: set[int] = set()
        self._results: dict[str, TargetResults | None] = {}
        """Target -> its validated results; None when two artifacts claimed it."""
        self._refused: list[str] = []
        self._shown: str | None = None

    # ------------------------------------------------------------------ one poll

    def _read(self, artifact_id: int, name: str) -> None:
        try:
            data = self.fetch(artifact_id)  # ProgressError: not marked seen, tried again next poll
            self._seen.add(artifact_id)
            with tempfile.TemporaryDirectory(prefix="kernelpro-progress-") as tmp:
                results = load_results(extract_results(data, Path(tmp), display=f"{name}.zip"),
                                       allowed_files=self.allowed)
        except ArtifactError as e:  # over the size limit, or invalid: never read again
            self._seen.add(artifact_id)
            self._refused.append(f"{name}: {e.what}")
            self.log(f"::warning title=kernelpro progress::artifact {name} refused: {e}")
            return
        for t in results.targets:
            if t.name in self._results:
                self._results[t.name] = None
                self._refused.append(f"{name}: {_CONFLICT} ({t.name})")
            else:
                self._results[t.name] = t

    def poll(self) -> Snapshot:
        """Read the run's jobs and new artifacts once (GitHub errors propagate)."""
        jobs = {j.name: j for j in self.run.jobs("latest")}
        for a in self.run.get_artifacts():
            if a.name.startswith(ARTIFACT_PREFIX) and not a.expired and a.id not in self._seen:
                self._read(a.id, a.name)
        kernels = [self._kernel(t, jobs.get(self.job_prefix + t)) for t in self.targets]
        finished = all(
            (j := jobs.get(self.job_prefix + t)) is not None and j.status == "completed"
            for t in self.targets
        )
        if finished:  # nothing more will come: a completed job without results has failed
            kernels = [
                k if k.state in ("done", "failed") else
                KernelProgress(k.name, "failed", None, None, "the job ended without results", k.job_url)
                for k in kernels
            ]
        return Snapshot(tuple(kernels), finished, tuple(self._refused))

    def _kernel(self, name: str, job: Any) -> KernelProgress:
        url = getattr(job, "html_url", None) if job is not None else None
        if name in self._results:
            t = self._results[name]
            if t is None:
                return KernelProgress(name, "failed", None, None, _CONFLICT, url)
            w = t.winner
            note = "" if w else "the baseline stands"
            return KernelProgress(name, "done", t.evaluations, w.speedup if w else None, note, url)
        if job is None:
            return KernelProgress(name, "queued", None, None, "", None)
        if job.status == "completed":
            if job.conclusion == "success":  # its artifact is not listed yet
                return KernelProgress(name, "running", None, None, "uploading results", url)
            return KernelProgress(name, "failed", None, None, f"the job ended: {job.conclusion}", url)
        if job.status == "in_progress":
            return KernelProgress(name, "running", None, None, "", url)
        return KernelProgress(name, "queued", None, None, "", url)

    # ------------------------------------------------------------------ the comment

    def _show(self, snapshot: Snapshot) -> bool:
        """Edit the comment if the text changed; False when the comment is no longer ours to edit."""
        text = render(snapshot, run_id=self.run_id, run_url=self.run_url, interval_s=self.interval_s)
        if text == self._shown:
            return True
        current = self.sticky.current_body()
        if not is_live(current, self.run_id):
            self.log("kernelpro progress: the comment no longer shows this run's live progress "
                     "(the final state is written, or the comment was deleted); stopping")
            return False
        if self.sticky.update(text, force=snapshot.finished):
            self._shown = text
        return True

    def watch(self) -> Snapshot | None:
        """Poll until every optimize job completed, the time is up, or the comment is final."""
        start = self.clock()
        errors = 0
        last: Snapshot | None = None
        while True:
            try:
                last = self.poll()
                if not self._show(last) or last.finished:
                    return last
                errors = 0
            except (ProgressError, CommentError, GithubException, requests.RequestException) as e:
                errors += 1
                self.log(f"::warning title=kernelpro progress::poll failed ({errors}/{self.max_errors}): {e}")
                if errors >= self.max_errors:
                    self.log("kernelpro progress: giving up; the publish job still writes the final state")
                    return last
            if self.clock() - start >= self.max_s:
                self.log(f"kernelpro progress: stopping after {self.max_s / 60:.0f} minutes; the "
                         "publish job still writes the final state")
                return last
            self.sleep(self.interval_s)


def watch(settings: Settings, gh: Any, trigger: Trigger, targets: Sequence[str], files: Mapping[str, Sequence[str]], *,
          interval_s: float = 30.0, max_s: float = 190 * 60.0, job_prefix: str = JOB_PREFIX,
          sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic) -> Snapshot | None:
    """The progress job: keep the sticky comment of ``trigger``'s pull request live until this
    workflow run's (``settings.run_id``) optimize jobs are done; ``targets`` and ``files`` are the
    trusted plan job's outputs."""
    repo = gh.get_repo(trigger.repo)
    watcher = Watcher(repo.get_workflow_run(int(settings.run_id)), run_id=settings.run_id, targets=targets,
                      allowed_files=files, sticky=StickyComment(repo, trigger.pr, bot_login=settings.bot_login, clock=clock),
                      fetch=partial(download_artifact, settings.github_api_url, settings.github_token or "", trigger.repo),
                      run_url=settings.run_url or None, job_prefix=job_prefix, interval_s=interval_s, max_s=max_s,
                      sleep=sleep, clock=clock)
    return watcher.watch()
