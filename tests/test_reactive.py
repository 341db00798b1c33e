"""Reactive tool use: the micro-profiling tools offered to the model as function calls.

Real evidence: the H200 recording of the poor SwiGLU launch (tests/fixtures/h200: the raw page of
ncu --set full, and its SASS), parsed by the project's own parsers. On it warp_stall and
vectorization fire and the other ncu/SASS tools stay quiet (tests/test_tools.py). The model is the
fake OpenAI server on loopback, through the real openai client; nothing reaches a real provider.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest
from fake_openai import API_KEY, MODEL, FakeOpenAI, NetworkGuard, calls, error, ok
from test_llm import ENTRY, answer, parent_of, variant

from kernelpro.runner.evidence import Profile
from kernelpro.runner.evidence.ncu import parse_csv
from kernelpro.runner.evidence.sass import parse_sass
from kernelpro.runner.programmers import Context, PluginError
from kernelpro.runner.programmers.llm import (
    LIST_METRICS,
    LLMProgrammer,
    ToolBox,
    build_messages,
    describe,
)
from kernelpro.runner.target import Target
from kernelpro.runner.tools import Finding, ProfilingTool, registry, render, run_tools

H200 = Path(__file__).resolve().parent / "fixtures" / "h200"
TOOLS = {t.name: t for t in registry()}

# The tools whose evidence (ncu counters, SASS) the recording holds; the timeline tools have none and
# the energy-only tools are not offered (energy is not an objective of the search).
AVAILABLE = ["too_few_programs", "tail_effect", "serial_dependency", "warp_stall", "barrier_stall", "memory_coalescing", "vectorization", "occupancy", "high_register_usage",
             "shared_bank_conflicts", "tensor_core_underutilization", "tensor_core_generation", "register_spills"]


# --------------------------------------------------------------------------- fixtures














@pytest.fixture(scope="module")
def profile() -> Profile:
    (kernel,) = parse_csv((H200 / "ncu_full_raw_poor.csv").read_text())
    return Profile(kernels=(kernel,), sass=parse_sass((H200 / "sass_poor.txt").read_text()))


def context(target: Target, profile: Profile | None, tool_mode: str, tools: tuple[ProfilingTool, ...] = ()) -> Context:
    """A context as optimize() builds it: the proactive feedback and findings are always filled in,
    so the reactive tests show that the programmer leaves them out."""
    kw: dict[str, Any] = {"target": target, "seen": lambda k: False, "device": "cuda", "gpu_name": "NVIDIA H200",
                          "bottleneck": "memory", "profile": profile, "tool_mode": tool_mode, "tools": tools}
    if profile is not None:
        analysis = run_tools(profile, "memory")
        kw |= {"feedback": render(analysis, profile, "tools"), "findings": analysis.findings}
    return Context(**kw)


def programmer(server: FakeOpenAI, tool_rounds: int = 4) -> LLMProgrammer:
    client = openai.OpenAI(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=10)
    return LLMProgrammer(client, MODEL, max_tokens=1000, tool_rounds=tool_rounds)


# --------------------------------------------------------------------------- the conversation


def test_reactive_offers_one_function_per_available_tool_and_returns_the_real_finding(
    server: FakeOpenAI, target: Target, repo_root: Path, profile: Profile
) -> None:
    server.script(calls("vectorization"), ok(answer(("128-bit loads: BLOCK_SIZE 1024, 4 warps", {ENTRY: variant()}))))
    ctx = context(target, profile, "reactive")
    (cand,) = programmer(server).propose(parent_of(target, repo_root), "optimize", 1, ctx)

    first, second = server.requests
    # One function per tool with evidence, plus list_metrics; none takes parameters.
    assert first.tool_names == [*AVAILABLE, LIST_METRICS]
    assert all(t["type"] == "function" and t["function"]["parameters"]["properties"] == {} for t in first.tools)
    by_name = {t["function"]["name"]: t["function"]["description"] for t in first.tools}
    for name in AVAILABLE:
        tool = TOOLS[name]
        assert by_name[name] == describe(tool) and by_name[name].startswith(tool.description)
        assert all(f"{k} = {v:g}" in by_name[name] for k, v in tool.thresholds.items())
    assert "memory/latency/mixed-bound" in by_name["vectorization"] and "relevant to any kernel" in by_name["warp_stall"]
    assert first.body["response_format"] == {"type": "json_object"}  # OpenAI takes both together
    # No findings and no metrics in the prompt: the model has to ask.
    text = first.text()
    assert ctx.feedback and "long scoreboard" in ctx.feedback
    finding = TOOLS["vectorization"].run(profile)
    assert finding is not None and finding.severity == "high"
    for absent in ("Automated Bottleneck Analysis", "long scoreboard", finding.title, "dram__throughput"):
        assert absent not in text
    assert "## Profiling tools (Stage 1: memory-bound)" in text and "`vectorization`" in text and "4 turns" in text
    assert "call the profiling tools" in first.messages[0]["content"]

    # The call, answered with the real finding, in the wire format.
    assistant, tool = second.messages[2:]
    assert assistant == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "vectorization", "arguments": "{}"}}]}
    assert second.tool_messages == [tool] and tool["tool_call_id"] == "call_1"
    content = tool["content"]
    assert content.startswith(f"1. **[high] {finding.title}** (vectorization, ncu): ")
    assert "load_width_bits = 32" in content and "sass_ldg_32bit = 2" in content  # the recorded evidence
    assert finding.root_cause in content and all(f"Fix {i}: {r}" in content for i, r in enumerate(finding.recommendations, 1))
    assert content.split(". ", 1)[1] in ctx.feedback  # word for word what the proactive prompt shows
    assert second.tool_names == first.tool_names  # it may call more

    assert cand.params == {"model": MODEL, "strategy": cand.note, "tools_called": ["vectorization"]}
    assert cand.solution.source(ENTRY) == variant()


def test_quiet_tools_list_metrics_and_unknown_names_in_one_turn(
    server: FakeOpenAI, target: Target, repo_root: Path, profile: Profile
) -> None:
    server.script(calls("barrier_stall", LIST_METRICS, "nvtx_magic", "warp_stall"),
                  ok(answer(("wider loads", {ENTRY: variant(2048, 8)}))))
    (cand,) = programmer(server).propose(parent_of(target, repo_root), "optimize", 1, context(target, profile, "reactive"))
    quiet, metrics, unknown, stall = (m["content"] for m in server.requests[1].tool_messages)
    thresholds = ", ".join(f"{k} = {v:g}" for k, v in TOOLS["barrier_stall"].thresholds.items())
    assert quiet == f"barrier_stall: no problem found (thresholds: {thresholds})."
    assert metrics == render(None, profile, "raw") and "dram__throughput.avg.pct_of_peak_sustained_elapsed = 21.99" in metrics
    assert unknown.startswith("There is no tool called 'nvtx_magic'") and "vectorization" in unknown
    assert "[critical] 74% of stall cycles are 'long scoreboard' stalls" in stall  # 74.1 % in the recording
    assert [m["tool_call_id"] for m in server.requests[1].tool_messages] == ["call_1", "call_2", "call_3", "call_4"]
    assert cand.params["tools_called"] == ["barrier_stall", LIST_METRICS, "warp_stall"]


def test_the_round_budget_ends_a_model_that_only_calls_tools(
    server: FakeOpenAI, target: Target, repo_root: Path, profile: Profile
) -> None:
    server.script(*[calls("warp_stall")] * 3, ok(answer(("finally", {ENTRY: variant()}))))
    (cand,) = programmer(server, tool_rounds=3).propose(parent_of(target, repo_root), "optimize", 2,
                                                        context(target, profile, "reactive"))
    assert len(server.requests) == 4
    assert all(r.tool_names for r in server.requests[:3])
    last = server.requests[3]
    assert "tools" not in last.body and last.body["response_format"] == {"type": "json_object"}
    assert last.messages[-1] == {"role": "user", "content": (
        "You have used all 3 turns of tool calls; no more tools can be called. Answer now: propose 2 candidates "
        "as the JSON object described in your instructions.")}
    assert len(last.tool_messages) == 3
    assert cand.params["tools_called"] == ["warp_stall"] * 3


def test_proactive_mode_sends_no_tools_and_injects_the_findings(
    server: FakeOpenAI, target: Target, repo_root: Path, profile: Profile
) -> None:
    server.script(ok(answer(("as the findings say", {ENTRY: variant()}))))
    (cand,) = programmer(server).propose(parent_of(target, repo_root), "optimize", 1, context(target, profile, "proactive"))
    (req,) = server.requests
    assert "tools" not in req.body
    text = req.text()
    assert "## Automated Bottleneck Analysis (Stage 1: memory-bound)" in text
    assert "74% of stall cycles are 'long scoreboard' stalls" in text and "Global loads are 32-bit per thread" in text
    assert "Profiling tools" not in text and "call the profiling tools" not in text
    assert cand.params == {"model": MODEL, "strategy": "as the findings say"}


def test_reactive_without_a_profile_offers_nothing(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    server.script(ok(answer(("blind", {ENTRY: variant()}))))
    (cand,) = programmer(server).propose(parent_of(target, repo_root), "optimize", 1, context(target, None, "reactive"))
    (req,) = server.requests
    assert "tools" not in req.body and "Profiling tools" not in req.text()
    assert cand.params["tools_called"] == []


# --------------------------------------------------------------------------- endpoints and recovery


def test_endpoint_that_rejects_json_mode_with_tools_gets_it_on_the_final_turn_only(
    server: FakeOpenAI, target: Target, repo_root: Path, profile: Profile
) -> None:
    server.script(error(400, message="Invalid parameter: 'response_format' cannot be combined with 'tools'."),
                  calls("vectorization"), calls("occupancy"), ok(answer(("after tools", {ENTRY: variant()}))))
    (cand,) = programmer(server, tool_rounds=2).propose(parent_of(target, repo_root), "optimize", 1,
                                                        context(target, profile, "reactive"))
    rejected, *turns, final = server.requests
    assert "response_format" in rejected.body and rejected.tools
    assert all(r.tools and "response_format" not in r.body for r in turns)
    assert "tools" not in final.body and final.body["response_format"] == {"type": "json_object"}
    assert cand.params["tools_called"] == ["vectorization", "occupancy"]


def test_truncated_answer_after_tool_calls_is_retried_with_the_evidence(
    server: FakeOpenAI, target: Target, repo_root: Path, profile: Profile
) -> None:
    cut = answer(("a", {ENTRY: variant(256)}))[:60]
    server.script(calls("vectorization"), ok(cut, "length"), ok(answer(("doubled", {ENTRY: variant()}))))
    (cand,) = programmer(server).propose(parent_of(target, repo_root), "optimize", 1, context(target, profile, "reactive"))
    _, truncated, retry = server.requests
    assert truncated.body["max_tokens"] == 1000 and retry.body["max_tokens"] == 2000
    assert retry.messages == truncated.messages and len(retry.tool_messages) == 1  # the finding is kept
    assert "tools" not in retry.body
    assert cand.note == "doubled" and cand.params["tools_called"] == ["vectorization"]


def test_endpoint_without_function_calling_stops_with_the_fix(
    server: FakeOpenAI, target: Target, repo_root: Path, profile: Profile
) -> None:
    server.script(error(400, message='"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'))
    with pytest.raises(PluginError, match="--tools proactive"):
        programmer(server).propose(parent_of(target, repo_root), "optimize", 1, context(target, profile, "reactive"))


def test_repository_tools_are_offered_and_a_broken_one_does_not_stop_the_search(
    server: FakeOpenAI, target: Target, repo_root: Path, profile: Profile
) -> None:
    def boom(p: Profile, t: Any) -> Finding | None:
        raise ZeroDivisionError("bad tool")

    always = ProfilingTool("team_rule", "sass", (), {"max_mufu": 1}, lambda p, t: True,
                           lambda p, t: Finding("team_rule", "medium", "MUFU in an elementwise kernel", {"MUFU": 2},
                                                "sigmoid via exp", ("use the fast path",)),
                           description="Our team's rule.")
    broken = ProfilingTool("broken_rule", "sass", (), {}, lambda p, t: True, boom, description="Broken.")
    energy = next(t for t in registry() if t.energy_only and t.available(profile))
    tools = (*registry(), always, broken)
    server.script(calls("team_rule", "broken_rule"), ok(answer(("team", {ENTRY: variant()}))))
    ctx = context(target, profile, "reactive", tools)
    (cand,) = programmer(server).propose(parent_of(target, repo_root), "optimize", 1, ctx)
    first, second = server.requests
    assert first.tool_names == [*AVAILABLE, "team_rule", "broken_rule", LIST_METRICS] and energy.name not in first.tool_names
    good, bad = (m["content"] for m in second.tool_messages)
    assert "**[medium] MUFU in an elementwise kernel** (team_rule, sass): MUFU = 2" in good
    assert bad == "The tool broken_rule failed (ZeroDivisionError); it has no result."
    assert cand.params["tools_called"] == ["team_rule", "broken_rule"]


def test_toolbox_and_prompt_on_their_own(target: Target, repo_root: Path, profile: Profile) -> None:
    box = ToolBox(profile, registry(), "memory")
    assert box.names == [*AVAILABLE, LIST_METRICS] and box.called == []
    assert box.call("vectorization") == box.call("vectorization") and box.called == ["vectorization"] * 2
    assert describe(TOOLS["occupancy"]).startswith(TOOLS["occupancy"].description)
    # An empty profile (no ncu, no SASS, no timeline) offers nothing, not even list_metrics.
    assert ToolBox(Profile(), registry()).names == []
    msgs = build_messages(parent_of(target, repo_root), "optimize", 2, context(target, profile, "reactive"), 3)
    assert "in at most 3 turns" in str(msgs[1]["content"])


# --------------------------------------------------------------------------- the harness itself


def test_the_fake_server_speaks_the_tool_call_wire_format(server: FakeOpenAI) -> None:
    client = openai.OpenAI(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=10)
    server.script(calls("vectorization", "warp_stall"))
    fn = [{"type": "function", "function": {"name": "vectorization", "parameters": {"type": "object", "properties": {}}}}]
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], tools=fn)
    body = json.loads(raw.http_response.text)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][1] == {
        "id": "call_2", "type": "function", "function": {"name": "warp_stall", "arguments": "{}"}}
    parsed = raw.parse().choices[0].message.tool_calls
    assert parsed is not None and [c.id for c in parsed] == ["call_1", "call_2"]

    # Like the real API, a tool call left unanswered is a 400, and the fake remembers it.
    unanswered = [{"role": "user", "content": "hi"}, choice["message"]]
    with pytest.raises(openai.BadRequestError, match="call_1, call_2"):
        client.chat.completions.create(model=MODEL, messages=unanswered, tools=fn)
    with pytest.raises(AssertionError, match="did not have response messages"):
        server.check()
    server.unexpected.clear()


def test_the_network_guard_refuses_real_providers(target: Target, repo_root: Path, no_network: NetworkGuard) -> None:
    client = openai.OpenAI(api_key=API_KEY, max_retries=0, timeout=5)  # the real api.openai.com
    cands = LLMProgrammer(client, MODEL).propose(parent_of(target, repo_root), "optimize", 1,
                                                 context(target, None, "proactive"))
    assert cands == []  # the programmer swallows the connection error ...
    assert any("api.openai.com" in a for a in no_network.attempts)
    with pytest.raises(AssertionError, match="api.openai.com"):
        no_network.check()  # ... but the autouse fixture fails the test at teardown
    no_network.attempts.clear()
