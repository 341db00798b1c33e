"""The LLM programmer: asks any OpenAI-compatible endpoint (OpenAI, vLLM, gateways) for candidates.

One chat completion per expansion asks for all n candidates as a JSON object; the answer is parsed
robustly (JSON, a JSON object salvaged from a truncated or chatty answer, or fenced code blocks),
and every file is checked against the parent's own source paths before it becomes a Candidate.
A truncated answer is retried with twice the output budget, then once more with a request to be
concise; every complete candidate recovered from any of these answers is kept. The output budget is
clamped to the model's context when the server reports it (vLLM's ``max_model_len``), and a 400 that
says the context is exceeded is retried once with a budget that fits.

Failures are loud: ``check()`` (called before the baseline runs) asks the endpoint for its models, so
a dead endpoint, a rejected key or an unknown model stops the run before any evaluation, with the
cause and the fix. During the search, a transient failure costs one expansion; three expansions in a
row that got no answer at all raise PluginError (the run stops and exits non-zero). ``usage()``
counts requests, tokens, retries and errors for the report.

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
import bisect
import itertools
import json
import logging
import posixpath
import re
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import jinja2
import openai
from openai.types.chat import ChatCompletionMessageParam

from kernelpro.templates import environment

from ..candidate import Candidate
from ..evidence import Profile
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
"""Output budget of the first request (KERNELPRO_LLM_MAX_TOKENS); a truncated answer is retried with twice as
much, both clamped to the model's context when it is known."""
MIN_OUTPUT_TOKENS = 1024
"""Less room than this for the answer after the prompt: the prompt does not fit the model's context."""
CHARS_PER_TOKEN = 3.0
"""Prompt size estimate without the model's tokenizer; code runs 3-4 characters a token, so this errs long."""
FAILED_EXPANSIONS = 3
"""Expansions in a row without a single answer before the endpoint is declared unusable."""
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
                   "tilelang": "TileLang"}
_FENCE_LANG = {".py": "python", ".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".cc": "cpp", ".h": "cpp",
               ".hpp": "cpp"}
# Info strings of fenced blocks that may hold the entry file, by its extension ("" = no tag).
_FENCE_TAGS = {"python": {"python", "py", "python3", ""}, "cuda": {"cuda", "cu", "cpp", "c++", "c", ""},
               "cpp": {"cpp", "c++", "cc", "c", "cuda", ""}}

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


_MATRIX_OPS = re.compile(r"(@|\b(matmul|mm|bmm|addmm|baddbmm|einsum|linear|conv\w*|scaled_dot_product_attention|"
                         r"tensordot|dot)\s*\()")
_MATRIX_TYPES = ("gemm", "matmul", "linear", "attention", "conv", "mla", "gqa", "mha", "moe")


def uses_tensor_cores(op_type: str, reference: str, bottleneck: str = "unknown") -> bool:
    """Whether tensor cores can do this kernel's work: a matrix product in the reference or its type, or a
    compute-bound class. Elementwise, reduction and normalization kernels cannot use them."""
    return (bottleneck == "compute" or any(k in op_type.lower() for k in _MATRIX_TYPES)
            or bool(_MATRIX_OPS.search(reference)))


def gpu_hint(gpu_name: str, language: str, *, tensor: bool = True, ceilings: Any = None,
             bottleneck: str = "unknown") -> list[str]:
    """GPU-aware notes for the prompt, filtered to what the kernel's class can use: the part's line (with
    the measured ceilings instead of the datasheet's when Stage 1 has them), its architecture, the
    tensor-core instruction shapes and tile-copy features only when ``tensor`` (a matrix product), and
    how the kernel's language reaches them; empty for GPUs we have no notes about."""
    a = arch_of(gpu_name)
    if a is None:
        return []
    upper = gpu_name.upper()
    key = next((k for k in _GPU_FACTS if k in upper), None)
    sku = f"{key}: {_GPU_FACTS[key]}" if key else None
    # Only measured ceilings replace the datasheet line: roofline.default_ceilings may be another
    # part's datasheet, or the H200's on a GPU it does not know.
    measured_here = ceilings is not None and (ceilings.source == "measured" or key == "H200" and
                                               ceilings.source.startswith("H200 measurements"))
    if sku is not None and ceilings is not None and measured_here:
        sms = sku.split(",")[0]
        sku = (f"{sms}; measured ceilings: {ceilings.bandwidth_gbs:.0f} GB/s DRAM (read + write), "
               f"{ceilings.flops_tflops:.0f} TFLOP/s for this kernel's datatype ({ceilings.source}). The datasheet's "
               "peaks are not reached in practice; judge the kernel against these.")
    notes = list(a.notes(language)) if tensor else [m for m in a.memory if "TMA" not in m and "cp.async" not in m]
    streaming = not tensor or bottleneck in ("memory", "latency")
    return [*([sku] if sku else []), f"Architecture: {a.name}, compile target {a.sm}.", *notes,
            *(_MEMORY_BOUND if streaming else ())]


# --------------------------------------------------------------------------- reactive tools

_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what the chat-completions API accepts


def _num(v: object) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def describe(tool: ProfilingTool) -> str:
    """The function description the model sees: what the tool checks, its thresholds, its scope."""
    thresholds = ", ".join(f"{k} = {_num(v)}" for k, v in tool.thresholds.items()) or "none"
    scope = ("any kernel" if tool.affinity >= ALL_CLASSES
             else "/".join(c for c in CLASSES if c in tool.affinity) + "-bound kernels")
    return (f"{(tool.description or tool.name).strip()} Thresholds: {thresholds}. Reads the {tool.source} profile "
            f"of the current code; relevant to {scope}. Returns a diagnosis (severity, evidence, root cause, ranked "
            f"fixes) or '{NO_PROBLEM}'.")


def _function(name: str, description: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}}


def _reactive(context: Context) -> bool:
    return context.tool_mode == "reactive"


class ToolBox:
    """The functions of one reactive conversation, bound to the parent's profile.

    Offered: every tool (``Context.tools``, else the built-in registry) whose evidence the profile
    holds, except the energy-only ones unless energy is an objective (as the proactive orchestrator
    does), and ``list_metrics`` when there are metrics to list.
    """

    def __init__(self, profile: Profile, tools: Sequence[ProfilingTool], bottleneck: str = "unknown",
                 energy: bool = False) -> None:
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
                                 "mix, uninterpreted."))
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


_FRAME = re.compile(r'^(\s*)File "([^"]+)", line (\d+), in (.*)$')
_ABS_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+)")


def trim_traceback(text: str, paths: Sequence[str]) -> str:
    """A traceback as the candidate's author needs it: only the frames in the candidate's own files (by
    their repository paths), the others (kernelpro's harness, torch, triton) folded into one line each
    run, and no absolute path of this machine left anywhere."""

    def own(path: str) -> str | None:
        return next((p for p in paths if path == p or path.endswith("/" + p)), None)

    out: list[str] = []
    skipped = 0
    skipping = False
    for line in text.splitlines():
        m = _FRAME.match(line)
        if m is not None:
            mine = own(m.group(2))
            skipping = mine is None
            if skipping:
                skipped += 1
                continue
            if skipped:
                out.append(f"{m.group(1)}[{skipped} frame{'s' if skipped > 1 else ''} of kernelpro's harness or "
                           "libraries omitted]")
                skipped = 0
            out.append(f'{m.group(1)}File "{mine}", line {m.group(3)}, in {m.group(4)}')
            continue
        if skipping and line.startswith((" ", "\t")) and line.strip():
            continue  # the source line (and carets) of a skipped frame
        if skipped:
            out.append(f"  [{skipped} frame{'s' if skipped > 1 else ''} of kernelpro's harness or libraries omitted]")
            skipped = 0
        skipping = False
        out.append(_ABS_PATH.sub(lambda p: own(p.group(0)) or p.group(1), line))
    return "\n".join(out)


def _log_tail(parent: Scored) -> str:
    text = parent.outcome.log
    if not text.strip():
        text = next((r.log for r in parent.outcome.results if r.status != "PASSED" and r.log), "")
    text = trim_traceback(text.strip(), [s.path for s in parent.candidate.solution.sources]).strip()
    if len(text) > LOG_TAIL_CHARS:
        text = "[...]\n" + text[-LOG_TAIL_CHARS:]
    return text or "(the log is empty)"


def _tolerances(target: Any) -> list[dict[str, Any]]:
    tol = target.tolerance
    out = []
    for name, t in target.definition.outputs.items():
        atol, rtol = tol.for_output(name, t.dtype) if hasattr(tol, "for_output") else tol.for_dtype(t.dtype)
        out.append({"name": name, "dtype": t.dtype, "atol": f"{atol:g}", "rtol": f"{rtol:g}"})
    return out


def _timings(scored: Any, axes_of: Mapping[str, Any]) -> list[dict[str, Any]]:
    if scored is None:
        return []
    return [{"axes": dict(axes_of.get(r.uuid, {"uuid": r.uuid})), "ms": r.timing.median_ms}
            for r in scored.outcome.results if r.timing is not None]


def _si(x: float | None, unit: str) -> str:
    if x is None:
        return "n/a"
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _stage1_rows(stage1: Any) -> list[dict[str, Any]]:
    if stage1 is None or not any(b.floor_ms for b in stage1.workloads):
        return []
    return [{"axes": dict(b.axes), "bytes": _si(b.bytes, "B"), "flops": _si(b.flops, "FLOP"),
             "intensity": f"{b.intensity:.3g}" if b.intensity is not None else "n/a",
             "floor_ms": f"{b.floor_ms:.4f}" if b.floor_ms else "n/a",
             "baseline_ms": f"{b.measured_ms:.4f}" if b.measured_ms else "n/a",
             "pct": f"{b.pct_of_roofline:.0f} %" if b.pct_of_roofline is not None else "n/a",
             "max_speedup": f"{b.max_speedup:.2f}x" if b.max_speedup is not None else "n/a"}
            for b in stage1.workloads]


def build_messages(parent: Scored, mode: str, n: int, context: Context, tool_rounds: int = DEFAULT_TOOL_ROUNDS,
                   code_tools: Sequence[str] = ()) -> list[ChatCompletionMessageParam]:
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
    ]
    d = target.definition
    stage1 = context.stage1
    tensor = uses_tensor_cores(d.op_type or "", d.reference, context.bottleneck)
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
        hint=gpu_hint(context.gpu_name, language, tensor=tensor, bottleneck=context.bottleneck,
                      ceilings=stage1.ceilings if stage1 is not None and context.device == "cuda" else None),
        d=d,
        tolerances=_tolerances(target),
        gamma=context.gamma,
        baseline_timings=_timings(context.baseline, axes_of),
        stage1=stage1,
        stage1_rows=_stage1_rows(stage1),
        feedback="" if _reactive(context) else context.feedback,
        memory=context.memory,
        energy_notes=context.energy_notes,
        tool_rounds=tool_rounds,
        bottleneck=context.bottleneck,
        workloads=[dict(w.axes) for w in workloads],
        entry_point=base.spec.entry_point,
        files=[{"path": s.path, "content": s.content, "lang": _FENCE_LANG.get(_ext(s.path), "")}
               for s in base.sources],
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


# What decoding or parsing a model's text may raise besides ValueError/SyntaxError: a reply of a
# thousand '[' (or a file of a thousand '+ 1') ended the whole optimization (a red-team probe, session 27).
_TOO_DEEP = (RecursionError, MemoryError)


def _loads(text: str) -> Any:
    try:
        return _DECODER.decode(text)
    except (ValueError, *_TOO_DEEP):
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
        except (ValueError, *_TOO_DEEP):
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


_FENCE_OPEN = re.compile(r"[ \t]*(`{3,})[ \t]*([\w+.#-]*)")


def _fenced_blocks(text: str) -> Iterator[tuple[int, str, str]]:
    """(offset of the opening line, language tag, content) of each fenced block, each opening line
    closed by the nearest later line of exactly its fence, as a non-greedy regular expression would
    pair them, in one pass: the expression rescanned the rest of the answer from every opening line
    left unclosed, and 3,000 of them (60 kB) took 15 s of CPU (a red-team probe, session 27)."""
    lines = text.split("\n")
    starts = list(itertools.accumulate((len(ln) + 1 for ln in lines), initial=0))
    closers: dict[str, list[int]] = {}
    for i, ln in enumerate(lines):
        bare = ln.strip(" \t")
        if len(bare) >= 3 and not bare.strip("`"):
            closers.setdefault(bare, []).append(i)
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        j = None
        # As the expression backtracked: the opening run's full length first, then shorter ones down to 3
        # (a shorter run leaves the language tag unread); the block holds at least one line.
        for n in range(len(m.group(1)), 2, -1) if m else ():
            later = closers.get("`" * n, [])
            k = bisect.bisect_right(later, i + 1)
            if k < len(later):
                j = later[k]
                break
        if m is not None and j is not None:
            lang = m.group(2) if n == len(m.group(1)) else ""
            yield starts[i], lang, "\n".join(lines[i + 1 : j])
            i = j + 1
        else:
            i += 1


def _prose_before(text: str, pos: int) -> str:
    for line in reversed(text[:pos].splitlines()):
        line = line.strip().strip("#*-: ").strip()
        if line and not line.startswith("```"):
            return line
    return ""


def _fenced_drafts(text: str, entry_file: str) -> list[Draft]:
    tags = _FENCE_TAGS.get(_FENCE_LANG.get(_ext(entry_file), "python"), {""})
    out = []
    for start, lang, body in _fenced_blocks(text):
        if lang.lower() in tags and body.strip():
            out.append(Draft(_prose_before(text, start), ((entry_file, body + "\n"),)))
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
        except (ValueError, *_TOO_DEEP) as e:
            return f"{src.path} cannot be parsed ({type(e).__name__}: nested too deeply or null bytes)"
        if src.path == solution.entry_file and not _defines(module, solution.entry_symbol):
            return f"{src.path} no longer defines the entry point {solution.entry_symbol!r}"
    entry = solution.source(solution.entry_file)
    if _ext(solution.entry_file) != ".py" and not re.search(rf"\b{re.escape(solution.entry_symbol)}\b", entry):
        return f"{solution.entry_file} no longer mentions the entry point {solution.entry_symbol!r}"
    return None


# --------------------------------------------------------------------------- endpoint trouble


@dataclass(frozen=True)
class Usage:
    """What the llm programmer asked of its endpoint in one run, for the report and the exit status."""

    model: str
    """The model name (KERNELPRO_LLM_MODEL)."""
    base_url: str
    """The endpoint's base URL, without credentials (KERNELPRO_LLM_BASE_URL)."""
    host: str
    """Its host (and port), as the report names the provider."""
    max_tokens: int
    """The output budget of a first request (KERNELPRO_LLM_MAX_TOKENS or the default)."""
    context: int | None
    """The model's context in tokens as the server reported it (or a 400 revealed it); None: unknown."""
    requests: int
    """Chat-completions requests sent (the SDK's own retries of one request are counted in ``retries``)."""
    answered: int
    """Requests that got an answer."""
    errors: int
    """Requests that ended in an error (after the SDK's retries)."""
    retries: int
    """The SDK's retries (429, 5xx, connection) plus kernelpro's own (truncation, context, adapting to the server)."""
    tokens_in: int
    """Prompt tokens, as the server counted them."""
    tokens_out: int
    """Completion tokens, as the server counted them."""
    truncated: int
    """Answers cut off at the output budget."""
    expansions: int
    """Times the search asked for candidates."""
    untooled: int
    """Reactive mode: expansions for which no profiling tool could be offered (no profile: no GPU or no ncu)."""
    last_error: str
    """The last error, with its fix; empty when none."""

    @property
    def all_failed(self) -> bool:
        """Requests were sent and not one was answered: the endpoint, not the search, is the problem."""
        return self.requests > 0 and self.answered == 0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "all_failed": self.all_failed}


_CONTEXT_LIMIT = re.compile(r"maximum context length is (\d+)|context length of (?:only )?(\d+)|"
                            r"context window (?:of|is) (\d+)", re.I)
_PROMPT_TOKENS = re.compile(r"(\d+) in the messages|(?:has|contains at least) (\d+) input tokens|"
                            r"messages resulted in (\d+) tokens|prompt \((\d+) tokens\)", re.I)
_UNKNOWN_MODEL = re.compile(r"(?i)\bmodel\b.{0,80}\b(not found|does not exist|unknown|invalid|not supported|"
                            r"no such|not available)|\b(unknown|invalid|unsupported) model")
"""A 400's words for a model the endpoint does not serve (a 400 for any other reason still proves the
endpoint read the request with this key)."""
_CONTEXT_KEYS = ("max_model_len", "context_length", "context_window", "max_context_length", "max_input_tokens")


def _first_int(m: re.Match[str] | None) -> int | None:
    return next((int(g) for g in m.groups() if g), None) if m is not None else None


def context_of(entry: Any) -> int | None:
    """The context length a /models entry reports: vLLM's max_model_len, OpenRouter's context_length, ..."""
    extra = dict(getattr(entry, "model_extra", None) or {}) if entry is not None else {}
    top = extra.get("top_provider")
    if isinstance(top, Mapping):
        extra = {**{k: v for k, v in top.items() if k in _CONTEXT_KEYS}, **extra}
    for key in _CONTEXT_KEYS:
        v = extra.get(key)
        if isinstance(v, (int, float)) and v > 0:
            return int(v)
    return None


def _estimate_tokens(messages: Sequence[Any], tools: Sequence[Any] | None = None) -> int:
    chars = sum(len(str(m.get("content") or "")) + 16 for m in messages if isinstance(m, Mapping))
    chars += len(json.dumps(list(tools or ())))
    return int(chars / CHARS_PER_TOKEN) + 64


def _host(url: str) -> str:
    parts = urlsplit(url)
    return parts.hostname + (f":{parts.port}" if parts.port else "") if parts.hostname else url


def _without_credentials(url: str) -> str:
    parts = urlsplit(url)
    if parts.username or parts.password:
        parts = parts._replace(netloc=_host(url))
    return parts.geturl().rstrip("/")


# --------------------------------------------------------------------------- the programmer


class LLMProgrammer:
    """Writes candidates with a chat model behind an OpenAI-compatible endpoint."""

    name = "llm"

    def __init__(self, client: openai.OpenAI, model: str, *, max_tokens: int = DEFAULT_MAX_TOKENS,
                 temperature: float | None = None, tool_rounds: int = DEFAULT_TOOL_ROUNDS,
                 codesearch: CodeSearch | None = None) -> None:
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
        self.context: int | None = None
        """The model's context in tokens (from check() or a 400 that names it); None: unknown."""
        self._n: dict[str, int] = dict.fromkeys(("requests", "answered", "errors", "retries", "tokens_in",
                                                 "tokens_out", "truncated", "expansions", "untooled"), 0)
        self._last_error = ""
        self._streak = 0  # expansions in a row without an answer

    @property
    def where(self) -> str:
        return _without_credentials(str(self.client.base_url))

    def usage(self) -> Usage:
        return Usage(self.model, self.where, _host(self.where), self.max_tokens, self.context, **self._n,
                     last_error=self._last_error)

    # ---- before the run

    def check(self) -> None:
        """One cheap request before the baseline is evaluated: the endpoint answers, accepts the key and
        serves the model; and the model's context, when the server reports it, bounds max_tokens.
        Raises PluginError with the cause and the fix."""
        try:
            models = list(self.client.models.list().data)
        except openai.APIStatusError as e:
            if e.status_code in (404, 405, 501):  # no /models route (some gateways): ask the model itself
                self._ping()
                return
            fatal = self._fatal(e)
            if fatal is not None:
                raise fatal from e
            raise PluginError(f"the LLM endpoint {self.where} answered {e.status_code} to GET /models ({e.message}). "
                              f"Fix: {self._fix(e)}") from e
        except openai.APIError as e:
            raise PluginError(self._explain(e)) from e
        ids = [m.id for m in models]
        entry = next((m for m in models if m.id == self.model), None)
        if entry is None and ids:
            try:
                entry = self.client.models.retrieve(self.model)
            except openai.NotFoundError as e:
                raise PluginError(
                    f"the LLM endpoint {self.where} does not serve the model {self.model!r}; it serves "
                    f"{', '.join(sorted(ids)[:12])}{' ...' if len(ids) > 12 else ''}. Fix: set KERNELPRO_LLM_MODEL "
                    "to one of these."
                ) from e
            except openai.APIError:
                entry = None  # a gateway that lists some models and resolves others: the search will tell
        self.context = context_of(entry)
        if self.context is not None and self.max_tokens > self.context - MIN_OUTPUT_TOKENS:
            log.warning("llm: %s has a context of %d tokens; max_tokens %d is clamped to what each prompt leaves",
                        self.model, self.context, self.max_tokens)

    def _ping(self) -> None:
        for _ in range(2):
            try:
                self._n["requests"] += 1
                self.client.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "OK?"}],
                                                    **{self._token_param: 1})  # type: ignore[call-overload]
                self._n["answered"] += 1
                return
            except openai.BadRequestError as e:
                self._n["errors"] += 1
                if self._token_param == "max_tokens" and "max_completion_tokens" in str(e):
                    self._token_param = "max_completion_tokens"
                    continue
                if _UNKNOWN_MODEL.search(str(e.message)):  # gateways (LiteLLM, ...) refuse a model with a 400
                    raise PluginError(
                        f"the LLM endpoint {self.where} refused the model {self.model!r} (400: {e.message}). Fix: set "
                        "KERNELPRO_LLM_MODEL to a model that the endpoint serves.") from e
                return  # the endpoint read the request, with this key, for this model: enough
            except openai.APIStatusError as e:
                self._n["errors"] += 1
                fatal = self._fatal(e)
                raise (fatal or PluginError(self._explain(e))) from e
            except openai.APIError as e:
                self._n["errors"] += 1
                raise PluginError(self._explain(e)) from e

    def _explain(self, e: Exception) -> str:
        """The cause and the fix of a failed request, in the words a user needs."""
        if isinstance(e, openai.APIStatusError):
            fatal = self._fatal(e)
            if fatal is not None:
                return str(fatal)
            return f"the LLM endpoint {self.where} answered {e.status_code} ({e.message}). Fix: {self._fix(e)}"
        if isinstance(e, openai.APITimeoutError):
            return (f"the LLM endpoint {self.where} did not answer within {self.client.timeout} s. Fix: check that "
                    "the server is up and not overloaded (a large model on a busy server takes minutes), or use a "
                    "faster model.")
        if isinstance(e, openai.APIConnectionError):
            cause = e.__cause__ or e
            return (f"nothing answers at the LLM endpoint {self.where} ({type(cause).__name__}: {cause}). Fix: start "
                    "the server, or set KERNELPRO_LLM_BASE_URL to its OpenAI-compatible base URL (it usually ends in "
                    f"/v1; `curl {self.where}/models` should answer).")
        return f"the request to the LLM endpoint {self.where} failed ({type(e).__name__}: {e})."

    def _fix(self, e: openai.APIStatusError) -> str:
        if e.status_code == 429:
            return (f"the provider's rate limit or quota for {self.model!r} is spent (the SDK retried "
                    f"{self.client.max_retries} times); raise it, or wait and rerun the same command (the journal "
                    "resumes the run).")
        if e.status_code >= 500:
            return "the server failed; check its logs, then rerun the same command (the journal resumes the run)."
        if _CONTEXT_LIMIT.search(str(e.message)):
            return ("the prompt does not fit the model's context: serve the model with a longer context (vLLM: "
                    "--max-model-len), use a model with a larger one, or ask for fewer candidates (--candidates 1).")
        return (f"check that {self.where} speaks the OpenAI chat-completions API and serves {self.model!r} "
                "(KERNELPRO_LLM_BASE_URL, KERNELPRO_LLM_MODEL).")

    def _fail(self, e: Exception) -> None:
        self._n["errors"] += 1
        if isinstance(e, (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)):
            self._n["retries"] += self.client.max_retries  # the SDK retried these before giving up
        self._last_error = self._explain(e)

    # ---- one request

    def _budget(self, messages: Sequence[Any], max_tokens: int, tools: Sequence[Any] | None) -> int:
        """max_tokens, clamped to what the model's context leaves after the prompt (when it is known)."""
        if self.context is None:
            return max_tokens
        return max(MIN_OUTPUT_TOKENS, min(max_tokens, self.context - _estimate_tokens(messages, tools)))

    def _create(self, messages: list[ChatCompletionMessageParam], max_tokens: int,
                tools: list[dict[str, Any]] | None = None) -> Reply:
        max_tokens = self._budget(messages, max_tokens, tools)
        refit = False
        for _ in range(5):
            kwargs: dict[str, Any] = {self._token_param: max_tokens}
            json_mode = self._json_mode and (not tools or self._json_with_tools)
            if json_mode:
                kwargs["response_format"] = {"type": "json_object"}
            if tools:
                kwargs["tools"] = tools
            if self.temperature is not None:
                kwargs["temperature"] = self.temperature
            self._n["requests"] += 1
            try:
                raw = self.client.chat.completions.with_raw_response.create(model=self.model, messages=messages,
                                                                            **kwargs)
                if taken := int(getattr(raw, "retries_taken", 0) or 0):
                    self._n["retries"] += taken
                    log.warning("llm: %s answered after %d retr%s (rate limit, server error or connection)",
                                self.where, taken, "y" if taken == 1 else "ies")
                resp = raw.parse()
            except openai.BadRequestError as e:
                text = str(e)
                limit = _first_int(_CONTEXT_LIMIT.search(text))
                if limit is not None and not refit:
                    # An 8k-context server asked for 16k tokens: retry once with what fits, and keep the limit.
                    self.context = limit
                    prompt = _first_int(_PROMPT_TOKENS.search(text)) or _estimate_tokens(messages, tools)
                    fit = limit - prompt - 16
                    if fit < MIN_OUTPUT_TOKENS:
                        self._fail(e)
                        raise PluginError(f"the prompt (~{prompt} tokens) leaves no room for an answer in the model's "
                                          f"context of {limit} tokens at {self.where}. Fix: {self._fix(e)}") from e
                    log.warning("llm: %s has a context of %d tokens; asking again with max_tokens %d instead of %d",
                                self.model, limit, min(fit, max_tokens), max_tokens)
                    max_tokens, refit = min(fit, max_tokens), True
                    self._n["retries"] += 1
                    continue
                if json_mode and "response_format" in text:
                    if tools:
                        log.info("llm: the endpoint does not take JSON mode together with tools; "
                                 "JSON mode on the final turn only")
                        self._json_with_tools = False
                    else:
                        log.info("llm: the endpoint has no JSON mode; asking without it")
                        self._json_mode = False
                    self._n["retries"] += 1
                    continue
                if self._token_param == "max_tokens" and "max_completion_tokens" in text:
                    log.info("llm: the model wants max_completion_tokens instead of max_tokens")
                    self._token_param = "max_completion_tokens"
                    self._n["retries"] += 1
                    continue
                self._fail(e)
                if tools and "tool" in text.lower():
                    raise PluginError(
                        f"the LLM endpoint {self.where} rejected function calling ({e.status_code}: "
                        f"{e.message}). Fix: use --tools proactive, or a model and server with tool calling (vLLM: "
                        "--enable-auto-tool-choice --tool-call-parser ...)."
                    ) from e
                raise
            except openai.APIError as e:
                self._fail(e)
                raise
            self._n["answered"] += 1
            if resp.usage is not None:
                self._n["tokens_in"] += int(resp.usage.prompt_tokens or 0)
                self._n["tokens_out"] += int(resp.usage.completion_tokens or 0)
                log.debug("llm: %s prompt + %s completion tokens", resp.usage.prompt_tokens,
                          resp.usage.completion_tokens)
            if not resp.choices:
                return Reply("", None)
            choice = resp.choices[0]
            calls = []
            for c in choice.message.tool_calls or ():
                fn = getattr(c, "function", None)  # custom (non-function) tool calls are not ours
                if fn is not None:
                    calls.append((c.id, str(fn.name), str(fn.arguments or "")))
            return Reply(choice.message.content or "", choice.finish_reason, tuple(calls))
        raise AssertionError("unreachable")  # each retry above flips a flag that cannot flip back, or refits once

    def _ask(self, conversation: list[ChatCompletionMessageParam], max_tokens: int, box: Joined | None,
             n: int) -> Reply:
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
                               for i, name, args in reply.calls]})
            for call_id, name, args in reply.calls:
                conversation.append({"role": "tool", "tool_call_id": call_id, "content": box.call(name, args)})
            log.info("llm: the model called %s", ", ".join(name for _, name, _ in reply.calls))
        box.done = True
        log.info("llm: %d turns of tool calls spent; asking for the answer", self.tool_rounds)
        conversation.append({"role": "user", "content": TOOL_BUDGET_MESSAGE.format(
            rounds=self.tool_rounds, n=n, s="" if n == 1 else "s")})
        return self._create(conversation, max_tokens)

    def _fatal(self, e: openai.APIStatusError) -> PluginError | None:
        where = self.where
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
                    extra: Mapping[str, Any] | None = None) -> list[Candidate]:
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
                           description=strategy)
            out.append(Candidate(sol, parent.candidate.key, mode, strategy,
                                 {"model": self.model, "strategy": strategy, **(extra or {})}))
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
        self._n["expansions"] += 1
        if _reactive(context) and profiling is None:
            self._n["untooled"] += 1
            if self._n["untooled"] == 1:
                log.warning("llm: --tools reactive, but the parent has no profile (profiles need a GPU with ncu): no "
                            "profiling tool is offered to the model")
        answered = self._n["answered"]
        # Every complete candidate of every answer (a cut-off one included), in the order they came.
        merged: list[Candidate] = []
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
                            self.where, e.status_code, e.message)
                break
            except openai.APIError as e:  # connection trouble, timeouts, malformed responses
                log.warning("llm: request to %s failed (%s: %s); no candidates from this expansion",
                            self.where, type(e).__name__, e)
                break
            text, finish = reply.text, reply.finish
            extra: dict[str, Any] = {}
            if _reactive(context):
                extra["tools_called"] = list(profiling.called) if profiling is not None else []
            if code is not None:
                extra["code_search"] = list(code.called)
            found = self._candidates(parse_reply(text, entry_file), parent, mode, n, context, extra or None)
            keys = {c.key for c in merged}
            merged.extend(c for c in found if c.key not in keys)
            if finish != "length":
                if not found:
                    log.warning("llm: the answer held no usable candidate (finish_reason=%s)", finish)
                break
            self._n["truncated"] += 1
            if i < 2:
                self._n["retries"] += 1
            log.warning("llm: answer %d was cut off at %d tokens with %d complete candidate(s); %s", i + 1, max_tokens,
                        len(found), "asking again" if i < 2 else "giving up")
        # Three expansions in a row without one answer: the endpoint is down or refuses us; say so and stop.
        self._streak = self._streak + 1 if self._n["answered"] == answered else 0
        if self._streak >= FAILED_EXPANSIONS:
            raise PluginError(f"{self._streak} expansions in a row got no answer from the LLM endpoint: "
                              f"{self._last_error or 'no request succeeded'}")
        return merged[:n]


def make(settings: Settings) -> LLMProgrammer:
    missing = []
    if not settings.llm_model:
        missing.append("KERNELPRO_LLM_MODEL (the model name)")
    if not settings.llm_api_key:
        missing.append("KERNELPRO_LLM_API_KEY or OPENAI_API_KEY (any non-empty value for a vLLM server "
                       "started without --api-key)")
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
                           max_retries=2, timeout=DEFAULT_TIMEOUT_S)
    return LLMProgrammer(client, settings.llm_model, codesearch=codesearch,
                         max_tokens=settings.llm_max_tokens or DEFAULT_MAX_TOKENS)
