"""The environment, read once at the entry point into typed settings and passed down from there."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """Everything kernelpro takes from the environment."""

    device: str
    """'cuda', 'cpu' or 'auto' (KERNELPRO_DEVICE; auto picks cuda when torch sees a GPU)."""
    llm_base_url: str | None
    """OpenAI-compatible endpoint (KERNELPRO_LLM_BASE_URL, else OPENAI_BASE_URL)."""
    llm_model: str | None
    """Model name (KERNELPRO_LLM_MODEL)."""
    llm_api_key: str | None
    """Key for the endpoint (KERNELPRO_LLM_API_KEY, else OPENAI_API_KEY). Never passed to candidates."""
    github_token: str | None
    """Token for the GitHub API (GITHUB_TOKEN)."""
    progress: bool
    """Draw terminal progress bars (off when KERNELPRO_PROGRESS=0 or CI=true)."""
    github_api_url: str = "https://api.github.com"
    """REST API root (GITHUB_API_URL; GitHub Enterprise Server sets its own)."""
    github_server_url: str = "https://github.com"
    """Web and git root (GITHUB_SERVER_URL)."""
    github_repository: str = ""
    """owner/name of the repository the workflow runs in (GITHUB_REPOSITORY)."""
    event_name: str = ""
    """GITHUB_EVENT_NAME."""
    event_path: str = ""
    """GITHUB_EVENT_PATH: the webhook payload that triggered the run."""
    github_output: str = ""
    """GITHUB_OUTPUT: where a step's outputs are written."""
    step_summary: str = ""
    """GITHUB_STEP_SUMMARY: the job summary file."""
    run_url: str = ""
    """Link to this workflow run (from GITHUB_SERVER_URL, GITHUB_REPOSITORY and GITHUB_RUN_ID)."""
    run_id: str = ""
    """GITHUB_RUN_ID: this workflow run (the progress job watches its jobs and artifacts)."""
    label: str = "optimize-kernels"
    """The approving label (KERNELPRO_LABEL)."""
    bot_login: str = "github-actions[bot]"
    """Login the bot's own comments come from (KERNELPRO_BOT_LOGIN)."""
    cutlass_dir: str | None = None
    """A local CUTLASS/CuTe checkout the llm programmer may search (KERNELPRO_CUTLASS_DIR); None: no code search."""
    gpus: str = "auto"
    """GPUs to spread evaluations over (KERNELPRO_GPUS): 'auto' (every visible one) or ids like '0,1'."""
    allow_unconfined: bool = False
    """Run candidates where their confinement is unavailable (KERNELPRO_ALLOW_UNCONFINED=1, or the
    --allow-unconfined flag): the operator's explicit acceptance that PR code then has the runner user's rights."""
    llm_max_tokens: int | None = None
    """Output budget of the llm programmer's first request (KERNELPRO_LLM_MAX_TOKENS); None: its default."""
    warm_server: bool = True
    """Fork a target's candidates from a warm server that preloaded its imports (KERNELPRO_WARM_SERVER=0:
    never; the "before" row of benchmarks/corpus.py)."""
    base_sha: str = ""
    """The base commit the plan job resolved (KERNELPRO_BASE_SHA, its base_sha output): the optimize job's base."""
    head_sha: str = ""
    """The head commit the plan job approved (KERNELPRO_HEAD_SHA, its head_sha output): the optimize job's head."""
    budget: int | None = None
    """Evaluations per target from `/kernelpro retry --budget N` (KERNELPRO_BUDGET, the plan's budget output)."""
    programmer: str = "tuner"
    """Who writes candidates in the workflow (KERNELPRO_PROGRAMMER, the action's input): the optimize job runs
    it; the publish job refuses a patch it cannot recompute unless it is llm (never read from the artifact)."""
    pr_labels: tuple[str, ...] = ()
    """Labels for the follow-up pull request (KERNELPRO_PR_LABELS, comma- or newline-separated)."""
    pr_reviewers: tuple[str, ...] = ()
    """Reviewers asked on the follow-up pull request (KERNELPRO_PR_REVIEWERS; ``org/team`` for a team)."""
    plan_targets: tuple[str, ...] = ()
    """Every target the plan job listed (KERNELPRO_TARGETS, its `targets` output as a JSON list): publish
    names those whose optimize job uploaded no results, which it cannot learn from the artifacts."""
    no_color: bool = False
    """NO_COLOR is set: no progress bar even on a terminal, a line per new best instead."""
    visible_devices: str | None = None
    """CUDA_VISIBLE_DEVICES as this process inherited it (None: unset, every GPU is visible)."""
    optimize_result: str = ""
    """The optimize jobs' result as the workflow saw it (KERNELPRO_OPTIMIZE_RESULT, `needs.optimize.result`:
    success, failure, cancelled or skipped): publish opens nothing after a cancelled run."""
    ncu_tool: str | None = None
    """Nsight Compute's ncu, a path or a command (KERNELPRO_NCU); None: PATH, then the CUDA toolkit's homes."""
    cuobjdump_tool: str | None = None
    """cuobjdump (KERNELPRO_CUOBJDUMP); None: PATH, the CUDA toolkit, then the copy the triton wheel ships."""
    sanitizer_tool: str | None = None
    """compute-sanitizer for the gate's memcheck (KERNELPRO_COMPUTE_SANITIZER); None: PATH, then the toolkit."""

    @staticmethod
    def from_env(env: Mapping[str, str] | None = None) -> Settings:
        e = os.environ if env is None else env
        return Settings(
            device=e.get("KERNELPRO_DEVICE", "auto"),
            llm_base_url=e.get("KERNELPRO_LLM_BASE_URL") or e.get("OPENAI_BASE_URL"),
            llm_model=e.get("KERNELPRO_LLM_MODEL"),
            llm_api_key=e.get("KERNELPRO_LLM_API_KEY") or e.get("OPENAI_API_KEY"),
            github_token=e.get("GITHUB_TOKEN"),
            progress=e.get("KERNELPRO_PROGRESS", "1") != "0" and e.get("CI", "").lower() != "true",
            github_api_url=e.get("GITHUB_API_URL", "https://api.github.com"),
            github_server_url=e.get("GITHUB_SERVER_URL", "https://github.com"),
            github_repository=e.get("GITHUB_REPOSITORY", ""),
            event_name=e.get("GITHUB_EVENT_NAME", ""),
            event_path=e.get("GITHUB_EVENT_PATH", ""),
            github_output=e.get("GITHUB_OUTPUT", ""),
            step_summary=e.get("GITHUB_STEP_SUMMARY", ""),
            run_url=(f"{e.get('GITHUB_SERVER_URL', 'https://github.com')}/{e['GITHUB_REPOSITORY']}/actions/runs/"
                     f"{e['GITHUB_RUN_ID']}" if e.get("GITHUB_REPOSITORY") and e.get("GITHUB_RUN_ID") else ""),
            run_id=e.get("GITHUB_RUN_ID", ""),
            label=e.get("KERNELPRO_LABEL", "optimize-kernels"),
            bot_login=e.get("KERNELPRO_BOT_LOGIN", "github-actions[bot]"),
            cutlass_dir=e.get("KERNELPRO_CUTLASS_DIR") or None,
            gpus=e.get("KERNELPRO_GPUS", "auto"),
            allow_unconfined=e.get("KERNELPRO_ALLOW_UNCONFINED", "").strip().lower() in ("1", "true", "yes"),
            llm_max_tokens=_positive(e, "KERNELPRO_LLM_MAX_TOKENS"),
            warm_server=e.get("KERNELPRO_WARM_SERVER", "1") != "0",
            base_sha=e.get("KERNELPRO_BASE_SHA", ""),
            head_sha=e.get("KERNELPRO_HEAD_SHA", ""),
            budget=int(e["KERNELPRO_BUDGET"]) if e.get("KERNELPRO_BUDGET") else None,
            programmer=e.get("KERNELPRO_PROGRAMMER", "tuner"),
            pr_labels=names(e.get("KERNELPRO_PR_LABELS", "")),
            pr_reviewers=names(e.get("KERNELPRO_PR_REVIEWERS", "")),
            plan_targets=_json_names(e, "KERNELPRO_TARGETS"),
            no_color=bool(e.get("NO_COLOR")),
            visible_devices=e.get("CUDA_VISIBLE_DEVICES"),
            optimize_result=e.get("KERNELPRO_OPTIMIZE_RESULT", "").strip().lower(),
            ncu_tool=e.get("KERNELPRO_NCU") or None,
            cuobjdump_tool=e.get("KERNELPRO_CUOBJDUMP") or None,
            sanitizer_tool=e.get("KERNELPRO_COMPUTE_SANITIZER") or None,
        )

    def resolved_device(self) -> str:
        if self.device in ("cuda", "cpu"):
            return self.device
        try:
            import torch
        except ImportError:
            return "cpu"
        return "cuda" if torch.cuda.is_available() else "cpu"


def names(value: str) -> tuple[str, ...]:
    """A comma- or newline-separated list of labels or logins (``org/team`` for a team); a label may
    hold spaces."""
    return tuple(dict.fromkeys(x.strip() for x in value.replace("\n", ",").split(",") if x.strip()))


def _json_names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    text = env.get(name, "").strip()
    try:
        value = json.loads(text) if text else []
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{name}={text[:200]!r} is not a JSON list of names; pass the plan job's `targets` "
                         "output (the action's `targets` input), or unset it")
    return tuple(dict.fromkeys(value))


def _positive(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) <= 0:
        raise ValueError(f"{name}={text!r} is not a positive whole number of tokens; set it to e.g. 16384, or unset it")
    return int(text)
