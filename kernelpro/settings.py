"""The environment, read once at the entry point into typed settings and passed down from there."""

from __future__ import annotations

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
        )

    def resolved_device(self) -> str:
        if self.device in ("cuda", "cpu"):
            return self.device
        try:
            import torch
        except ImportError:
            return "cpu"
        return "cuda" if torch.cuda.is_available() else "cpu"
