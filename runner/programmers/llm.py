"""The LLM programmer: asks any OpenAI-compatible endpoint (OpenAI, vLLM, gateways) for candidates.

One chat completion per expansion asks for all n candidates as a JSON object; the answer is parsed
robustly (JSON, a JSON object salvaged from a truncated or chatty answer, or fenced code blocks),
and every file is checked against the parent's own source paths before it becomes a Candidate.
A truncated answer is retried with twice the output budget, then once more with a request to be
concise. Endpoint trouble never stops the search (the expansion just yields nothing), except a
rejected key or an unknown model, which no retry can fix and which raise PluginError.

Profiler evidence reaches the model in one of two ways (``Context.tool_mode``). Proactive (the
default): the findings of every relevant micro-profiling tool are already in the prompt
(``Context.feedback``). Reactive: the prompt holds no findings; instead each registered tool whose
evidence the parent's profile holds is offered as a function (no parameters), plus ``list_metrics``
for the raw counters, and the model decides which to call. Each call runs the tool on the profile and
the finding (or "no problem found") goes back as a ``tool`` message; after at most ``tool_rounds``
turns of calls the model is asked for its candidates without tools. The tools it called are recorded
in each candidate's params["tools_called"].

With a local CUTLASS/CuTe checkout (KERNELPRO_CUTLASS_DIR), code-search functions are offered in
every tool mode (runner/programmers/codesearch.py: grep, read file, list directory, a shared-memory
layout check compiled by nvcc), each with a budget per expansion; the calls are recorded in each
candidate's params["code_search"].

The API key lives in the client only: it is never written into a prompt or a candidate.
"""

from __future__ import annotations

import ast
import json
import logging
import posixpath
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
import openai
from openai.types.chat import ChatCompletionMessageParam

from kernelpro.templates import environment

from ..candidate import Candidate
from ..profile import Profile
from ..search import Scored
from ..tools import ALL_CLASSES, CLASSES, Analysis, ProfilingTool, registry, render
from ..trace import Solution, SourceFile
from . import Context, PluginError
from .arch import arch_of
from .codesearch import CodeSearch, CodeSearchError, Session

if TYPE_CHECKING:
    from kernelpro.settings import Settings

log = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MAX_TOKENS = 16384
"""Output budget of the first request; a truncated answer is retried with twice as much."""
DEFAULT_TIMEOUT_S = 600.0
"""Per-request limit: a long answer from a large model takes minutes."""
LOG_TAIL_CHARS = 4000
"""How much of a failed parent's log goes into a debug prompt."""
MAX_FILE_CHARS = 200_000
"""Larger files from the model are refused (an answer is untrusted data)."""

DEFAULT_TOOL_ROUNDS = 4
"""Reactive mode: turns of tool calls before the model is told to answer."""
LIST_METRICS = "list_metrics"
"""Reactive mode: the function that returns the raw metrics block."""
NO_PROBLEM = "no problem found"
"""Start of a tool's reply when its pattern is absent."""

TOOL_BUDGET_MESSAGE = (
    "You have used all {rounds} turns of tool calls; no more tools can be called. Answer now: propose {n} "
    "candidate{s} as the JSON object described in your instructions."
)

RESTART_MESSAGE = (
    "Your previous answer was cut off. Restart, and answer concisely: propose {k} candidate{s}, "
    "keep each strategy to one sentence, return only the files you change, keep comments short, "
    "and write nothing outside the JSON object."
)

_LANGUAGE_NAMES = {"triton": "Triton", "cuda": "CUDA", "cpp": "C++/CUDA", "python": "Python",
                   "tilelang": "TileLang"}  # fmt: skip
_FENCE_LANG = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".cc": "cpp", ".h": "cpp",
               ".hpp": "cpp"}  # fmt: skip
# Info strings of fenced blocks that may hold the entry file, by its extension ("" = no tag).
_FENCE_TAGS = {"python": {"python", "py", "python3", ""}, "cuda": {"cuda", "cu", "cpp", "c++", "c", ""},
               "cpp": {"cpp", "c++", "cc", "c", "cuda", ""}}  # fmt: skip

# Datasheet lines for the parts we know (SXM parts); the architecture notes come from arch.py.
_GPU_FACTS = {  # first match wins: GH200 before H200
    "GH200": "132 SMs, ~4 TB/s HBM3 (96 GB) or ~4.9 TB/s HBM3e (144 GB), ~989 dense BF16 TFLOP/s.",
    "H200": "132 SMs, ~4.8 TB/s HBM3e (141 GB), ~989 dense BF16 TFLOP/s.",
    "H100": "132 SMs (SXM; 114 on PCIe), ~3.35 TB/s HBM3 (80 GB; ~2 TB/s on PCIe), ~989 dense BF16 TFLOP/s.",
    "A100": "108 SMs, ~2 TB/s HBM2e (80 GB; ~1.6 TB/s for 40 GB), ~312 dense BF16 TFLOP/s.",
}
_MEMORY_BOUND = (
    "A memory-bound kernel should approach the HBM bandwidth: wide coalesced loads (16 bytes per thread), "
    "enough bytes in flight per SM, and a grid of several waves over all SMs (or a persistent grid).",
)


def gpu_hint(gpu_name: str, language: str) -> list[str]:
    """GPU-aware notes for the prompt: the part's datasheet line, its architecture with the tensor-core
    instruction shapes and memory features, and how the kernel's language reaches them; empty for GPUs
    we have no notes about."""
    a = arch_of(gpu_name)
    if a is None:
        return []
    upper = gpu_name.upper()
    sku = next((f"{key}: {facts}" for key, facts in _GPU_FACTS.items() if key in upper), None)
    return [*([sku] if sku else []), f"Architecture: {a.name}, compile target {a.sm}.", *a.notes(language),
            *_MEMORY_BOUND]  # fmt: skip


# --------------------------------------------------------------------------- reactive tools

_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what the chat-completions API accepts


def _num(v: object) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def describe(tool: ProfilingTool) -> str:
    """The function description the model sees: what the tool checks, its thresholds, its scope."""
    thresholds = ", ".join(f"{k} = {_num(v)}" for k, v in tool.thresholds.items()) or "none"
    scope = ("any kernel" if tool.affinity >= ALL_CLASSES
             else "/".join(c for c in CLASSES if c in tool.affinity) + "-bound kernels")  # fmt: skip
    return (f"{(tool.description or tool.name).strip()} Thresholds: {thresholds}. Reads the {tool.source} profile "
            f"of the current code; relevant to {scope}. Returns a diagnosis (severity, evidence, root cause, ranked "
            f"fixes) or '{NO_PROBLEM}'.")  # fmt: skip


def _function(name: str, description: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}}  # fmt: skip


def _reactive(context: Context) -> bool:
    return context.tool_mode == "reactive"


class ToolBox:
    """The functions of one reactive conversation, bound to the parent's profile.

    Offered: every tool (``Context.tools``, else the built-in registry) whose evidence the profile
    holds, except the energy-only ones unless energy is an objective (as the proactive orchestrator
    does), and ``list_metrics`` when there are metrics to list.
    """

    def __init__(self, profile: Profile, tools: Sequence[ProfilingTool], bottleneck: str = "unknown",
                 energy: bool = False) -> None:  # fmt: skip
        self.profile = profile
        self.bottleneck = bottleneck
        self.tools: dict[str, ProfilingTool] = {}
        for t in tools:
            if t.energy_only and not energy or not t.available(profile):
                continue
            if not _FUNCTION_NAME.fullmatch(t.name) or t.name == LIST_METRICS:
                log.warning("llm: tool %r is not offered: its name is not a valid function name", t.name)
                continue
            self.tools[t.name] = t
        self.metrics = render(None, profile, "raw")
        self.called: list[str] = []
        """Functions the model called, in order (repeats included)."""
        self.done = False
        """The tool-calling turns are over (answered, or the budget is spent)."""
        self._answers: dict[str, str] = {}

    @property
    def names(self) -> list[str]:
        return [*self.tools, *([LIST_METRICS] if self.metrics else [])]

    def definitions(self) -> list[dict[str, Any]]:
        """The ``tools`` array of a chat-completions request."""
        out = [_function(t.name, describe(t)) for t in self.tools.values()]
        if self.metrics:
            out.append(_function(LIST_METRICS, "The raw profiler metrics of the current code by category (ncu "
                                 "throughput, memory, occupancy, stalls), its launch timeline and SASS instruction "
                                 "mix, uninterpreted."))  # fmt: skip
        return out

    def call(self, name: str, arguments: str = "") -> str:
        """The content of the ``tool`` message that answers a call of ``name`` (these take no arguments)."""
        if name == LIST_METRICS and self.metrics:
            self.called.append(name)
            return self.metrics
        tool = self.tools.get(name)
        if tool is None:
            log.warning("llm: the model called an unknown tool %r", name)
            return f"There is no tool called {name!r}. The tools are: {', '.join(self.names)}."
        self.called.append(name)
        if name not in self._answers:
            self._answers[name] = self._run(tool)
        return self._answers[name]

    def _run(self, tool: ProfilingTool) -> str:
        try:
            finding = tool.run(self.profile)
        except Exception as e:  # a repository's own tool may be broken; the search goes on
            log.warning("llm: tool %s failed: %s: %s", tool.name, type(e).__name__, e)
            return f"The tool {tool.name} failed ({type(e).__name__}); it has no result."
        if finding is None:
            thresholds = ", ".join(f"{k} = {_num(v)}" for k, v in tool.thresholds.items())
            return f"{tool.name}: {NO_PROBLEM}" + (f" (thresholds: {thresholds})." if thresholds else ".")
        if not finding.source:
            finding = replace(finding, source=tool.source)
        # The same Markdown as a proactive prompt's finding (an empty Profile adds no metrics block).
        return render(Analysis(self.bottleneck, (finding,), (tool.name,)), Profile(), "tools")


class Joined:
    """The functions of one conversation: the profiling tools (reactive mode) and the code search."""

    def __init__(self, box: ToolBox | None, code: Session | None) -> None:
        self.box = box
        self.code = code
        self.done = False
        """The tool-calling turns are over (answered, or the budget is spent)."""

    @property
    def names(self) -> list[str]:
        return [*(self.box.names if self.box else []), *(self.code.names if self.code else [])]

    def definitions(self) -> list[dict[str, Any]]:
        return [*(self.box.definitions() if self.box else []), *(self.code.definitions() if self.code else [])]

    def call(self, name: str, arguments: str) -> str:
        if self.code is not None and name in self.code.names:
            return self.code.call(name, arguments)
        if self.box is not None:
            return self.box.call(name, arguments)
        return f"There is no function {name!r}; the functions are {', '.join(self.names)}."


def toolbox(context: Context) -> ToolBox | None:
    """The functions to offer for this context: None unless reactive with a profile that has evidence."""
    profile = context.profile
    if not _reactive(context) or profile is None:
        return None
    box = ToolBox(profile, context.tools or registry(), context.bottleneck, context.energy)
    return box if box.names else None


# --------------------------------------------------------------------------- prompts


def _fenced(text: str, lang: str = "") -> str:
    """A Markdown code block that survives backticks inside the text."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return environment({"fenced": _fenced})


def _ext(path: str) -> str:
    return posixpath.splitext(path)[1].lower()


def _log_tail(parent: Scored) -> str:
    text = parent.outcome.log
    if not text.strip():
        text = next((r.log for r in parent.outcome.results if r.status != "PASSED" and r.log), "")
    text = text.strip()
    if len(text) > LOG_TAIL_CHARS:
        text = "[...]\n" + text[-LOG_TAIL_CHARS:]
    return text or "(the log is empty)"


def build_messages(parent: Scored, mode: str, n: int, context: Context, tool_rounds: int = DEFAULT_TOOL_ROUNDS,
                   code_tools: Sequence[str] = ()) -> list[ChatCompletionMessageParam]:  # fmt: skip
    """The system and user messages for one request. In reactive mode they hold no findings, and
    name the tools on offer instead."""
    target = context.target
    base = parent.candidate.solution
    language = base.spec.language
    box = toolbox(context)
    common = {
        "tools": box.names if box is not None else [],
        "code_tools": list(code_tools),
        "language": language,
        "language_name": _LANGUAGE_NAMES.get(language, language),
        "entry_file": base.entry_file,
        "entry_symbol": base.entry_symbol,
        "paths": [s.path for s in base.sources],
        "dps": base.spec.destination_passing_style,
        # A raw CUDA kernel is launched by kernelpro from this description, not by the sources: the
        # model must keep the symbol, the parameter list and the macros the sizes read.
        "launch": base.spec.launch,
        "launch_args": [a.declaration() for a in base.spec.launch.args] if base.spec.launch is not None else [],
    }
    workloads = target.workloads_for(context.device)
    axes_of = {w.uuid: w.axes for w in (*target.workloads, *target.cpu_workloads)}
    timings = [
        {"axes": dict(axes_of.get(r.uuid, {"uuid": r.uuid})), "ms": r.timing.median_ms,
         "ref_ms": r.reference_timing.median_ms if r.reference_timing else None}
        for r in parent.outcome.results if r.timing is not None
    ]  # fmt: skip
    env = _env()
    system = env.get_template("prompt_system.md.j2").render(**common)
    user = env.get_template("prompt_user.md.j2").render(
        **common,
        mode=mode,
        n=n,
        status=parent.outcome.status,
        log=_log_tail(parent) if mode == "debug" else "",
        speedup=parent.speedup,
        timings=timings,
        device=context.device,
        gpu_name=context.gpu_name,
        hint=gpu_hint(context.gpu_name, language),
        d=target.definition,
        feedback="" if _reactive(context) else context.feedback,
        memory=context.memory,
        energy_notes=context.energy_notes,
        tool_rounds=tool_rounds,
        bottleneck=context.bottleneck,
        workloads=[dict(w.axes) for w in workloads],
        entry_point=base.spec.entry_point,
        files=[{"path": s.path, "content": s.content, "lang": _FENCE_LANG.get(_ext(s.path), "")}
               for s in base.sources],  # fmt: skip
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Reply:
    """One assistant turn."""

    text: str
    """Its content ('' when none)."""
    finish: str | None
    """finish_reason."""
    calls: tuple[tuple[str, str, str], ...] = ()
    """(id, function name, arguments) of each tool call."""


@dataclass(frozen=True)
class Draft:
    """One candidate as the model wrote it, before any check."""

    strategy: str
    """The model's one-line description of the idea."""
    files: tuple[tuple[str, str], ...]
    """(path as the model wrote it, full content) pairs."""


_DECODER = json.JSONDecoder(strict=False)  # tolerate raw newlines inside strings


def _loads(text: str) -> Any:
    try:
        return _DECODER.decode(text)
    except ValueError:
        return None


def _json_payload(text: str) -> Any:
    s = text.strip()
    payload = _loads(s)
    if payload is not None:
        return payload
    m = re.search(r"```(?:json)?[ \t]*\n(.*?)\n[ \t]*```", s, re.S)
    if m and (payload := _loads(m.group(1))) is not None:
        return payload
    i, j = s.find("{"), s.rfind("}")
    return _loads(s[i : j + 1]) if 0 <= i < j else None


def _salvage(text: str) -> list[Any]:
    """Complete candidate objects from a JSON answer that was cut off (or is otherwise broken)."""
    out: list[Any] = []
    end = 0
    for m in re.finditer(r'\{\s*"(?:strategy|files)"', text):
        if m.start() < end:
            continue
        try:
            obj, end = _DECODER.raw_decode(text, m.start())
        except ValueError:
            continue
        out.append(obj)
    return out


def _items(payload: Any) -> list[Any]:
    if isinstance(payload, Mapping):
        if isinstance(payload.get("candidates"), list):
            return list(payload["candidates"])
        if "files" in payload:
            return [payload]
    if isinstance(payload, list):
        return payload
    return []


def _draft(item: Any) -> Draft | None:
    if not isinstance(item, Mapping):
        return None
    strategy = item.get("strategy") or item.get("description") or ""
    files = item.get("files")
    pairs: list[tuple[str, str]] = []
    if isinstance(files, Mapping):  # {"path": "content"}
        pairs = [(k, v) for k, v in files.items() if isinstance(k, str) and isinstance(v, str)]
    elif isinstance(files, list):
        for f in files:
            if isinstance(f, Mapping) and isinstance(f.get("path"), str) and isinstance(f.get("content"), str):
                pairs.append((f["path"], f["content"]))
    if not pairs:
        return None
    return Draft(str(strategy), tuple(pairs))


_FENCE_RE = re.compile(r"^[ \t]*(`{3,})[ \t]*([\w+.#-]*)[^\n]*\n(.*?)\n[ \t]*\1[ \t]*$", re.S | re.M)


def _prose_before(text: str, pos: int) -> str:
    for line in reversed(text[:pos].splitlines()):
        line = line.strip().strip("#*-: ").strip()
        if line and not line.startswith("```"):
            return line
    return ""


def _fenced_drafts(text: str, entry_file: str) -> list[Draft]:
    tags = _FENCE_TAGS.get(_FENCE_LANG.get(_ext(entry_file), "python"), {""})
    out = []
    for m in _FENCE_RE.finditer(text):
        if m.group(2).lower() in tags and m.group(3).strip():
            out.append(Draft(_prose_before(text, m.start()), ((entry_file, m.group(3) + "\n"),)))
    return out


def parse_reply(text: str, entry_file: str) -> list[Draft]:
    """Candidates from a model's answer: JSON first, then salvaged JSON objects, then fenced code
    blocks (each one a candidate for the entry file)."""
    drafts = [d for d in map(_draft, _items(_json_payload(text))) if d is not None]
    if not drafts:
        drafts = [d for d in map(_draft, _salvage(text)) if d is not None]
    if not drafts:
        drafts = _fenced_drafts(text, entry_file)
    return drafts


# --------------------------------------------------------------------------- checks


def _defines(module: ast.Module, symbol: str) -> bool:
    for node in module.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == symbol:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == symbol for t in node.targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name.split(".")[0]) == symbol for a in node.names
        ):
            return True
    return False


def _resolve_path(path: str, allowed: Sequence[str]) -> str | None:
    p = posixpath.normpath(path.strip().replace("\\", "/"))
    while p.startswith("./"):
        p = p[2:]
    if p in allowed:
        return p
    if "/" not in p:  # a bare file name, when exactly one source has it
        hits = [a for a in allowed if posixpath.basename(a) == p]
        return hits[0] if len(hits) == 1 else None
    return None


def _why_invalid(solution: Solution) -> str | None:
    for src in solution.sources:
        if len(src.content) > MAX_FILE_CHARS:
            return f"{src.path} is larger than {MAX_FILE_CHARS} characters"
        if _ext(src.path) != ".py":
            continue
        try:
            module = ast.parse(src.content)
        except SyntaxError as e:
            return f"{src.path} is not valid Python ({e.msg}, line {e.lineno})"
        if src.path == solution.entry_file and not _defines(module, solution.entry_symbol):
            return f"{src.path} no longer defines the entry point {solution.entry_symbol!r}"
    entry = solution.source(solution.entry_file)
    if _ext(solution.entry_file) != ".py" and not re.search(rf"\b{re.escape(solution.entry_symbol)}\b", entry):
        return f"{solution.entry_file} no longer mentions the entry point {solution.entry_symbol!r}"
    return None


# --------------------------------------------------------------------------- the programmer


class LLMProgrammer:
    """Writes candidates with a chat model behind an OpenAI-compatible endpoint."""

    name = "llm"

    def __init__(self, client: openai.OpenAI, model: str, *, max_tokens: int = DEFAULT_MAX_TOKENS,
                 temperature: float | None = None, tool_rounds: int = DEFAULT_TOOL_ROUNDS,
                 codesearch: CodeSearch | None = None) -> None:  # fmt: skip
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.tool_rounds = tool_rounds
        """Reactive mode: turns of tool calls before the model must answer."""
        self.codesearch = codesearch
        """A local CUTLASS/CuTe checkout offered through code-search functions; None: not offered."""
        # Adapted once per endpoint when it rejects them (reasoning models, servers without JSON mode,
        # servers that take JSON mode or tools but not both in one request).
        self._token_param = "max_tokens"
        self._json_mode = True
        self._json_with_tools = True

    # ---- one request

    def _create(self, messages: list[ChatCompletionMessageParam], max_tokens: int,
                tools: list[dict[str, Any]] | None = None) -> Reply:  # fmt: skip
        for _ in range(4):
            kwargs: dict[str, Any] = {self._token_param: max_tokens}
            json_mode = self._json_mode and (not tools or self._json_with_tools)
            if json_mode:
                kwargs["response_format"] = {"type": "json_object"}
            if tools:
                kwargs["tools"] = tools
            if self.temperature is not None:
                kwargs["temperature"] = self.temperature
            try:
                resp = self.client.chat.completions.create(model=self.model, messages=messages, **kwargs)
            except openai.BadRequestError as e:
                text = str(e)
                if json_mode and "response_format" in text:
                    if tools:
                        log.info("llm: the endpoint does not take JSON mode together with tools; "
                                 "JSON mode on the final turn only")  # fmt: skip
                        self._json_with_tools = False
                    else:
                        log.info("llm: the endpoint has no JSON mode; asking without it")
                        self._json_mode = False
                    continue
                if self._token_param == "max_tokens" and "max_completion_tokens" in text:
                    log.info("llm: the model wants max_completion_tokens instead of max_tokens")
                    self._token_param = "max_completion_tokens"
                    continue
                if tools and "tool" in text.lower():
                    raise PluginError(
                        f"the LLM endpoint {self.client.base_url} rejected function calling ({e.status_code}: "
                        f"{e.message}). Fix: use --tools proactive, or a model and server with tool calling (vLLM: "
                        "--enable-auto-tool-choice --tool-call-parser ...)."
                    ) from e
                raise
            if resp.usage is not None:
                log.debug("llm: %s prompt + %s completion tokens", resp.usage.prompt_tokens,
                          resp.usage.completion_tokens)  # fmt: skip
            if not resp.choices:
                return Reply("", None)
            choice = resp.choices[0]
            calls = []
            for c in choice.message.tool_calls or ():
                fn = getattr(c, "function", None)  # custom (non-function) tool calls are not ours
                if fn is not None:
                    calls.append((c.id, str(fn.name), str(fn.arguments or "")))
            return Reply(choice.message.content or "", choice.finish_reason, tuple(calls))
        raise AssertionError("unreachable")  # each retry above flips a flag that cannot flip back

    def _ask(self, conversation: list[ChatCompletionMessageParam], max_tokens: int, box: Joined | None,
             n: int) -> Reply:  # fmt: skip
        """One answer. In reactive mode the first call lets the model call tools first: the calls and
        their results are appended to ``conversation``, so later attempts carry the evidence."""
        if box is None or box.done:
            return self._create(conversation, max_tokens)
        tools = box.definitions()
        for _ in range(self.tool_rounds):
            reply = self._create(conversation, max_tokens, tools)
            if not reply.calls:
                box.done = True
                return reply
            conversation.append({
                "role": "assistant", "content": reply.text or None,
                "tool_calls": [{"id": i, "type": "function", "function": {"name": name, "arguments": args}}
                               for i, name, args in reply.calls]})  # fmt: skip
            for call_id, name, args in reply.calls:
                conversation.append({"role": "tool", "tool_call_id": call_id, "content": box.call(name, args)})
            log.info("llm: the model called %s", ", ".join(name for _, name, _ in reply.calls))
        box.done = True
        log.info("llm: %d turns of tool calls spent; asking for the answer", self.tool_rounds)
        conversation.append({"role": "user", "content": TOOL_BUDGET_MESSAGE.format(
            rounds=self.tool_rounds, n=n, s="" if n == 1 else "s")})  # fmt: skip
        return self._create(conversation, max_tokens)

    def _fatal(self, e: openai.APIStatusError) -> PluginError | None:
        where = str(self.client.base_url)
        if isinstance(e, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return PluginError(
                f"the LLM endpoint {where} rejected the API key ({e.status_code}: {e.message}). Fix: set "
                "KERNELPRO_LLM_API_KEY (or OPENAI_API_KEY) to a key that this endpoint accepts, with access "
                f"to the model {self.model!r}."
            )
        if isinstance(e, openai.NotFoundError):
            return PluginError(
                f"the LLM endpoint {where} answered 404 for model {self.model!r} ({e.message}). Fix: set "
                "KERNELPRO_LLM_MODEL to a model that the endpoint serves, and KERNELPRO_LLM_BASE_URL to its "
                "OpenAI-compatible base URL (it usually ends in /v1)."
            )
        return None

    # ---- candidates

    def _candidates(self, drafts: Sequence[Draft], parent: Scored, mode: str, n: int, context: Context,
                    extra: Mapping[str, Any] | None = None) -> list[Candidate]:  # fmt: skip
        base = parent.candidate.solution
        paths = [s.path for s in base.sources]
        out: list[Candidate] = []
        keys = {parent.candidate.key}
        for draft in drafts:
            changes: dict[str, str] = {}
            for path, content in draft.files:
                resolved = _resolve_path(path, paths)
                if resolved is None:
                    log.warning("llm: dropped a candidate that writes %r, which is not one of %s", path, paths)
                    changes = {}
                    break
                changes[resolved] = content
            if not changes or not all(c.strip() for c in changes.values()):
                continue
            strategy = " ".join(draft.strategy.split())[:300] or "rewrite by the model"
            sources = tuple(SourceFile(s.path, changes.get(s.path, s.content)) for s in base.sources)
            draft_sol = Solution(base.name, base.definition, self.model, base.spec, sources)
            why = _why_invalid(draft_sol)
            if why is not None:
                log.warning("llm: dropped a candidate (%s): %s", strategy, why)
                continue
            key = draft_sol.content_hash()
            if key in keys or context.seen(key):
                continue
            keys.add(key)
            sol = Solution(f"{context.target.name}-{key[:10]}", base.definition, self.model, base.spec, sources,
                           description=strategy)  # fmt: skip
            out.append(Candidate(sol, parent.candidate.key, mode, strategy,
                                 {"model": self.model, "strategy": strategy, **(extra or {})}))  # fmt: skip
            if len(out) >= n:
                break
        return out

    def _attempts(self, n: int) -> Iterator[tuple[int, ChatCompletionMessageParam | None]]:
        """(max_tokens, a message to append) per attempt: as asked, doubled, then 'restart concisely'."""
        yield self.max_tokens, None
        yield 2 * self.max_tokens, None
        k = max(1, (n + 1) // 2)
        yield 2 * self.max_tokens, {"role": "user", "content": RESTART_MESSAGE.format(k=k, s="" if k == 1 else "s")}

    def propose(self, parent: Scored, mode: str, n: int, context: Context) -> list[Candidate]:
        if n <= 0:
            return []
        code = self.codesearch.session() if self.codesearch is not None else None
        conversation = build_messages(parent, mode, n, context, self.tool_rounds, code.names if code else ())
        profiling = toolbox(context)
        box = Joined(profiling, code) if profiling is not None or code is not None else None
        entry_file = parent.candidate.solution.entry_file
        best: list[Candidate] = []
        for i, (max_tokens, restart) in enumerate(self._attempts(n)):
            # The first attempt may grow the conversation with tool calls and their results.
            msgs = conversation if restart is None else [*conversation, restart]
            try:
                reply = self._ask(msgs, max_tokens, box, n)
            except openai.APIStatusError as e:
                fatal = self._fatal(e)
                if fatal is not None:
                    raise fatal from e
                log.warning("llm: %s answered %s (%s); no candidates from this expansion",
                            self.client.base_url, e.status_code, e.message)  # fmt: skip
                break
            except openai.APIError as e:  # connection trouble, timeouts, malformed responses
                log.warning("llm: request to %s failed (%s: %s); no candidates from this expansion",
                            self.client.base_url, type(e).__name__, e)  # fmt: skip
                break
            text, finish = reply.text, reply.finish
            extra: dict[str, Any] = {}
            if _reactive(context):
                extra["tools_called"] = list(profiling.called) if profiling is not None else []
            if code is not None:
                extra["code_search"] = list(code.called)
            found = self._candidates(parse_reply(text, entry_file), parent, mode, n, context, extra or None)
            if len(found) >= len(best):
                best = found
            if finish != "length":
                if not found:
                    log.warning("llm: the answer held no usable candidate (finish_reason=%s)", finish)
                break
            log.info("llm: answer %d was cut off at %d tokens; %s", i + 1, max_tokens,
                     "retrying" if i < 2 else "giving up")  # fmt: skip
        return best[:n]


def make(settings: Settings) -> LLMProgrammer:
    missing = []
    if not settings.llm_model:
        missing.append("KERNELPRO_LLM_MODEL (the model name)")
    if not settings.llm_api_key:
        missing.append("KERNELPRO_LLM_API_KEY or OPENAI_API_KEY (any non-empty value for a vLLM server "
                       "started without --api-key)")  # fmt: skip
    if missing:
        raise PluginError(
            "programmer 'llm' needs " + " and ".join(missing) + "; set KERNELPRO_LLM_BASE_URL as well for "
            f"vLLM or a gateway (default: {OPENAI_BASE_URL}). Or use --programmer tuner, which needs no model."
        )
    assert settings.llm_model is not None
    codesearch = None
    if settings.cutlass_dir:
        try:
            codesearch = CodeSearch(Path(settings.cutlass_dir), nvcc=shutil.which("nvcc"))
        except CodeSearchError as e:
            raise PluginError(str(e)) from e
    client = openai.OpenAI(base_url=settings.llm_base_url or OPENAI_BASE_URL, api_key=settings.llm_api_key,
                           max_retries=2, timeout=DEFAULT_TIMEOUT_S)  # fmt: skip
    return LLMProgrammer(client, settings.llm_model, codesearch=codesearch)
