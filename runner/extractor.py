"""Search-memory extraction by an LLM: one chat completion per iteration, five sections as JSON.

The model sees the memory so far and a plain-data summary of the iteration's evaluations (changes,
statuses, speedups, first error lines, findings; never code or keys) and answers with new entries per
section. Its answer is untrusted: only the five known sections, only strings, and SearchMemory cuts
each entry to one bounded line and bounds each section. Any failure (endpoint error, truncation, no
JSON) raises ExtractionError, on which SearchMemory falls back to its rules for that iteration.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import jinja2
import openai

from kernelpro.templates import environment

from .memory import SECTIONS, Observation

log = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 2000
"""Output budget of one extraction: a handful of one-line entries."""
MAX_OBSERVATION_CHARS = 12_000
"""The iteration's summary is cut to this many characters in the prompt."""


class ExtractionError(RuntimeError):
    """The extraction call gave nothing usable; the message says why."""


def _fenced(text: str, lang: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return environment({"fenced": _fenced})


def build_prompt(observations: Sequence[Observation], memory: Mapping[str, Sequence[str]]) -> str:
    summary = json.dumps([o.summary() for o in observations], indent=1)
    if len(summary) > MAX_OBSERVATION_CHARS:
        summary = summary[:MAX_OBSERVATION_CHARS] + "\n[... cut]"
    return _env().get_template("prompt_memory.md.j2").render(
        sections=SECTIONS, memory={k: list(memory.get(k, ())) for k in SECTIONS},
        has_memory=any(memory.get(k) for k in SECTIONS), observations=summary)


def parse(text: str) -> dict[str, list[str]]:
    """The five sections from an answer; raises ExtractionError when there is no such JSON object."""
    s = text.strip()
    try:
        payload: Any = json.loads(s)
    except ValueError:
        i, j = s.find("{"), s.rfind("}")
        try:
            payload = json.loads(s[i : j + 1]) if 0 <= i < j else None
        except ValueError:
            payload = None
    if not isinstance(payload, Mapping):
        raise ExtractionError(f"the answer is not a JSON object: {s[:120]!r}")
    known = {k: v for k, v in payload.items() if k in SECTIONS}
    if not known:
        raise ExtractionError(f"the answer names none of the sections {', '.join(SECTIONS)}")
    return {k: [x for x in v if isinstance(x, str)] if isinstance(v, list) else [] for k, v in known.items()}


class LLMExtractor:
    """Extracts memory entries with a chat model behind an OpenAI-compatible endpoint."""

    def __init__(self, client: openai.OpenAI, model: str, *, max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.calls = 0
        """Extraction calls made (for the report and tests)."""
        self.counts = {"requests": 0, "answered": 0, "errors": 0, "tokens_in": 0, "tokens_out": 0}
        """Requests sent to the endpoint (each attempt), answered, failed, and the tokens the server
        counted: the report adds them to the llm programmer's use of the same endpoint."""
        self._json_mode = True
        self._token_param = "max_tokens"

    def __call__(self, observations: Sequence[Observation], memory: Mapping[str, Sequence[str]]
                 ) -> dict[str, list[str]]:
        prompt = build_prompt(observations, memory)
        self.calls += 1
        for _ in range(3):
            kwargs: dict[str, Any] = {self._token_param: self.max_tokens}
            if self._json_mode:
                kwargs["response_format"] = {"type": "json_object"}
            self.counts["requests"] += 1
            try:
                resp = self.client.chat.completions.create(
                    model=self.model, messages=[{"role": "user", "content": prompt}], **kwargs)
            except openai.BadRequestError as e:
                self.counts["errors"] += 1
                if self._json_mode and "response_format" in str(e):
                    self._json_mode = False
                    continue
                if self._token_param == "max_tokens" and "max_completion_tokens" in str(e):
                    self._token_param = "max_completion_tokens"
                    continue
                raise ExtractionError(f"the endpoint refused the request ({e.status_code}: {e.message})") from e
            except openai.APIError as e:
                self.counts["errors"] += 1
                raise ExtractionError(f"{type(e).__name__}: {e}") from e
            self.counts["answered"] += 1
            if resp.usage is not None:
                self.counts["tokens_in"] += int(resp.usage.prompt_tokens or 0)
                self.counts["tokens_out"] += int(resp.usage.completion_tokens or 0)
            if not resp.choices:
                raise ExtractionError("the answer has no choices")
            choice = resp.choices[0]
            if choice.finish_reason == "length":
                raise ExtractionError(f"the answer was cut off at {self.max_tokens} tokens")
            return parse(choice.message.content or "")
        raise ExtractionError("the endpoint refused every form of the request")
