"""`kernelpro action plan|optimize|publish|progress`: the jobs of the GitHub workflow, wired.

plan (trusted, no PR code runs): decides whether to run at all (label bound to the head SHA it was
given on; `/kernelpro retry` only from writers), resolves the targets from the **base** branch's
configuration, says so in the sticky comment, and emits the matrix (kernelpro.bot.plan).
optimize (the GPU runner, read-only token): `kernelpro optimize` for one target (kernelpro.pipeline),
then seals the results folder before the upload.
publish (write token, no PR code runs): reads the optimize artifacts as untrusted data, checks the
patch touches only the target's files, and opens or updates the follow-up PR (or comments why not)
(kernelpro.bot.followup).
progress (trusted, no PR code runs; next to the optimize matrix): watches the run's jobs and
artifacts and keeps the sticky comment live (kernelpro.bot.progress).

This module is where the two halves meet: it reads the event named by the settings, builds the
GitHub client, and reads the base branch's configuration with the runner's loader for the bot's
steps (bot/ never imports runner/). GitHub errors are said as in kernelpro.bot.job.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernelpro import pipeline
from kernelpro.bot import followup, progress
from kernelpro.bot import plan as planning
from kernelpro.bot.body import md
from kernelpro.bot.command import reply_text
from kernelpro.bot.event import Trigger, parse_event_file
from kernelpro.bot.followup import Limits
from kernelpro.bot.job import ActionError, connect, explain, retry_policy, summary, write_outputs
from kernelpro.bot.plan import Configured, Plan
from kernelpro.outbox import seal, secret_values
from kernelpro.pipeline import Request
from kernelpro.runner.config import ConfigError, load_config
from kernelpro.runner.smoke import static_faults
from kernelpro.settings import Settings

__all__ = ["ActionError", "Plan", "explain", "plan", "publish_results", "retry_policy", "seal_results",
           "watch_progress"]


def _trigger(settings: Settings) -> Trigger | None:
    """The kernelpro trigger in the event that started the job, or None when it is not one."""
    return parse_event_file(settings.event_name, settings.event_path, label=settings.label,
                            bot_login=settings.bot_login)


def configured(base: Path, head: Path, kernel: str | None, changed: Sequence[str]) -> Configured:
    """The base branch's configuration (the folder ``base``) as the plan job needs it: the targets
    ``kernel`` names, else those ``changed`` touched, and where it does not match the head's code."""
    known: tuple[str, ...] = ()
    try:
        config = load_config(base / ".kernelpro.yml", base)
        known = tuple(t.name for t in config.targets)
        targets = [config.target(kernel)] if kernel else config.targets_for(changed)
    except ConfigError as e:
        return Configured(known, error=str(e))
    # Read as text, nothing run (static_faults): the plan job runs no code of the pull request.
    faults = tuple(str(f) for t in targets for f in static_faults(t, head)) if targets else ()
    return Configured(known, tuple((t.name, tuple(t.files)) for t in targets), faults=faults)


def limits(base: Path) -> Limits:
    """What the base branch's configuration (the folder ``base``) lets the results change."""
    config = load_config(base / ".kernelpro.yml", base)
    return Limits({t.name: list(t.files) for t in config.targets},
                  {t.name: (t.launch.kernel, tuple(t.launch.block)) for t in config.targets if t.launch is not None})


def plan(settings: Settings, checkout: Path, gh: Any = None) -> Plan:
    trigger = _trigger(settings)
    if trigger is None:
        return Plan(False, (), 0, "", "", None, "not a kernelpro trigger")
    return planning.plan(settings, checkout, gh or connect(settings), trigger, configured)


def publish_results(settings: Settings, checkout: Path, results_root: Path, gh: Any = None,
                    push_url: str | None = None, head_sha: str | None = None) -> str:
    """Publish the optimize results. ``head_sha``: the commit plan approved and optimize ran on
    (the plan job's output); the follow-up commit is built on it even if the PR moved on since."""
    trigger = _trigger(settings)
    if trigger is None:
        return "not a kernelpro trigger"
    return followup.publish_results(settings, checkout, results_root, gh or connect(settings), trigger, limits,
                                    push_url=push_url, head_sha=head_sha)


def watch_progress(settings: Settings, targets: list[str], files: dict[str, list[str]], gh: Any = None, *,
                   interval_s: float = 30.0, max_s: float = 190 * 60.0, job_prefix: str = "optimize ",
                   sleep: Any = time.sleep, clock: Any = time.monotonic) -> Any:
    """The progress job: keep the sticky comment live until the optimize jobs are done."""
    trigger = _trigger(settings)
    if trigger is None:
        print("kernelpro progress: not a kernelpro trigger")
        return None
    if not settings.run_id.isdigit():
        raise ActionError("GITHUB_RUN_ID is not set: `kernelpro action progress` runs inside the workflow run it watches")
    return progress.watch(settings, gh or connect(settings), trigger, targets, files, interval_s=interval_s,
                          max_s=max_s, job_prefix=job_prefix, sleep=sleep, clock=clock)


def cmd_plan(args: Any, settings: Settings) -> int:
    p = plan(settings, Path(args.checkout))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(p.__dict__, indent=2) + "\n")
    write_outputs(settings, {"run": "true" if p.run else "false", "targets": json.dumps(list(p.targets)),
                             "pr": str(p.pr), "head_sha": p.head_sha, "base_sha": p.base_sha,
                             "budget": str(p.budget or ""), "files": json.dumps(dict(p.files))})
    print(f"kernelpro plan: {p.reason}")
    # The reason can quote the commenter: Markdown escaped like every reply, unless plan already did.
    summary(settings, reply_text("summary", text=p.markdown or md(p.reason, 4000)).rstrip("\n"))
    return 0


def cmd_optimize(args: Any, settings: Settings) -> int:
    if not settings.base_sha or not settings.head_sha:
        raise ActionError("KERNELPRO_BASE_SHA and KERNELPRO_HEAD_SHA must come from the plan job's outputs")
    out = Path(args.out)
    rc = pipeline.run(Request(Path(args.checkout), settings.base_sha, settings.head_sha, out, kernel=args.target,
                              budget=settings.budget, programmer=settings.programmer, search="mcts"), settings)
    if seal_results(out, settings):
        rc = rc or 1
    report = out / "report.md"
    if report.is_file() and not report.is_symlink():
        summary(settings, report.read_text(errors="replace")[:60_000])
    return rc


def _command_text(text: str) -> str:
    """Text for one workflow-command line: a newline in a file name cannot start a command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def seal_results(out: Path, settings: Settings) -> bool:
    """Before the upload: take links, special files and anything holding a secret kernelpro holds
    out of the results folder (kernelpro.outbox), each with an error line; True if any was."""
    # The whole environment is searched, not only the settings: a secret kernelpro never reads is still one.
    secrets = secret_values(os.environ, {"KERNELPRO_LLM_API_KEY": settings.llm_api_key,
                                         "GITHUB_TOKEN": settings.github_token})
    removed = seal(out, secrets)
    for r in removed:
        print(f"::error title=kernelpro::removed {_command_text(r.path[:300])} from the results before the "
              f"upload: {r.why}. The optimize job ran the pull request's code, which can write there; "
              "nothing it left that could leak a file or a secret is uploaded")
    return bool(removed)


def cmd_publish(args: Any, settings: Settings) -> int:
    head = getattr(args, "head_sha", None) or None
    print("kernelpro publish:", publish_results(settings, Path(args.checkout), Path(args.results), head_sha=head))
    return 0


def _plan_lists(targets_json: str, files_json: str) -> tuple[list[str], dict[str, list[str]]]:
    """The plan job's `targets` and `files` outputs, checked (they are passed on the command line)."""
    try:
        targets, files = json.loads(targets_json), json.loads(files_json)
    except json.JSONDecodeError as e:
        raise ActionError(f"--targets and --files must be the plan job's JSON outputs: {e}") from None
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ActionError("--targets must be a JSON list of target names (the plan job's `targets` output)")
    if not isinstance(files, dict) or not all(
        isinstance(v, list) and all(isinstance(f, str) for f in v) for v in files.values()
    ):
        raise ActionError("--files must be a JSON object target -> [kernel files] (the plan job's `files` output)")
    missing = [t for t in targets if t not in files]
    if missing:
        raise ActionError(f"--files has no entry for {missing}: pass the same plan's `targets` and `files`")
    return targets, files


def cmd_progress(args: Any, settings: Settings) -> int:
    targets, files = _plan_lists(args.targets, args.files)
    snap = watch_progress(settings, targets, files, interval_s=args.interval, max_s=args.max_minutes * 60,
                          job_prefix=args.job_prefix)
    if snap is not None:
        print(f"kernelpro progress: {snap.done}/{len(snap.kernels)} kernel(s) done, "
              f"{snap.evaluations} evaluation(s); {'all jobs finished' if snap.finished else 'stopped watching'}")
    return 0
