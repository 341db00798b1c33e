"""The LLM programmer as users will run it (issue 21), against the loopback OpenAI-wire server:
failures are loud and early, max_tokens follows the settings and the model's context, truncation
keeps every complete candidate, the work is counted, and the prompt holds what the judge uses."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import openai
import pytest
from fake_openai import API_KEY, FAST_RETRY, MODEL, FakeOpenAI, error, ok
from test_llm import BASELINE, ENTRY, answer, context, parent_of, programmer, settings, variant

from kernelpro.runner.optimize import RunSettings
from kernelpro.runner.programmers import PluginError, usage
from kernelpro.runner.programmers.llm import LLMProgrammer, build_messages, make, trim_traceback
from kernelpro.runner.roofline import ReferenceAnalysis, analyze_reference, default_ceilings
from kernelpro.runner.screen import outcome as rejected
from kernelpro.runner.search import Scored
from kernelpro.runner.target import Target
from kernelpro.settings import Settings

FIXTURES = Path(__file__).parent / "fixtures"


def _user(target: Target, parent: Scored, mode: str = "optimize", **ctx: object) -> str:
    msgs = build_messages(parent, mode, 2, dataclasses.replace(context(target), **ctx))
    return str(msgs[1]["content"])


# --------------------------------------------------------------------------- loud and early


def test_a_dead_endpoint_is_found_before_the_run_with_the_fix() -> None:
    fake = FakeOpenAI().start()
    url = fake.url
    fake.stop()  # nothing listens there any more
    prog = LLMProgrammer(openai.OpenAI(base_url=url, api_key=API_KEY, max_retries=0, timeout=5), MODEL)
    with pytest.raises(PluginError) as e:
        prog.check()
    assert "nothing answers at the LLM endpoint" in str(e.value) and url in str(e.value)
    assert "Fix: start the server, or set KERNELPRO_LLM_BASE_URL" in str(e.value)


def test_a_bad_key_and_an_unknown_model_are_found_by_one_cheap_request(server: FakeOpenAI) -> None:
    with pytest.raises(PluginError, match="rejected the API key .401.*Fix: set KERNELPRO_LLM_API_KEY"):
        programmer(server, key="sk-wrong").check()
    prog = LLMProgrammer(openai.OpenAI(base_url=server.url, api_key=API_KEY, max_retries=0), "no-such-model")
    with pytest.raises(PluginError) as e:
        prog.check()
    assert "does not serve the model 'no-such-model'" in str(e.value) and MODEL in str(e.value)
    assert "Fix: set KERNELPRO_LLM_MODEL" in str(e.value)
    assert server.requests == []  # no chat request, no tokens spent
    programmer(server).check()  # a good key and a served model pass


def test_an_endpoint_without_a_models_route_is_checked_with_a_one_token_request() -> None:
    fake = FakeOpenAI(models_route=False).start()
    try:
        fake.script(ok("OK"))
        prog = programmer(fake)
        prog.check()
        (req,) = fake.requests
        assert req.body["max_tokens"] == 1
        fake.check()
    finally:
        fake.stop()


@pytest.mark.parametrize("message", ["Invalid model name passed in model=no-such-model",
                                     "The model `no-such-model` does not exist", "unknown model: no-such-model"])
def test_a_gateway_that_refuses_the_model_with_a_400_is_found_before_the_run(message: str) -> None:
    """No /models route, and a 400 (not a 404) for a model it does not serve, as LiteLLM answers."""
    fake = FakeOpenAI(models_route=False).start()
    try:
        fake.script(error(400, message=message))
        prog = LLMProgrammer(openai.OpenAI(base_url=fake.url, api_key=API_KEY, max_retries=0), "no-such-model")
        with pytest.raises(PluginError) as e:
            prog.check()
        assert "refused the model 'no-such-model' (400" in str(e.value) and "Fix: set KERNELPRO_LLM_MODEL" in str(e.value)
        fake.script(error(400, message="max_tokens must be at least 16"))  # any other 400: the endpoint works
        programmer(fake).check()
        fake.check()
    finally:
        fake.stop()


def test_expansions_that_all_fail_stop_the_search_with_the_cause(target: Target, repo_root: Path) -> None:
    fake = FakeOpenAI().start()
    try:
        fake.script(*[error(500, FAST_RETRY)] * 9)
        prog = programmer(fake)  # the SDK retries twice: three requests per expansion
        parent = parent_of(target, repo_root)
        assert prog.propose(parent, "optimize", 2, context(target)) == []
        assert prog.propose(parent, "optimize", 2, context(target)) == []
        with pytest.raises(PluginError) as e:
            prog.propose(parent, "optimize", 2, context(target))
        fake.check()
    finally:
        fake.stop()
    assert "3 expansions in a row got no answer" in str(e.value) and "answered 500" in str(e.value)
    assert "Fix: the server failed" in str(e.value)
    u = prog.usage()
    assert (u.requests, u.answered, u.errors, u.retries) == (3, 0, 3, 6) and u.all_failed
    assert usage(prog)["all_failed"] and usage(prog)["name"] == "llm"


def test_requests_tokens_retries_and_the_provider_are_counted(server: FakeOpenAI, target: Target, repo_root: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    reply = answer(("bigger blocks", {ENTRY: variant()}))
    server.script(error(500, FAST_RETRY), ok(reply))
    prog = programmer(server)
    with caplog.at_level(logging.WARNING):
        assert len(prog.propose(parent_of(target, repo_root), "optimize", 1, context(target))) == 1
    assert "answered after 1 retry" in caplog.text  # a warning, not INFO
    u = prog.usage()
    assert (u.requests, u.answered, u.errors, u.retries) == (1, 1, 0, 1)  # the SDK's retry of the 500
    words = sum(len(str(m.get("content") or "").split()) for m in server.requests[-1].messages)
    assert (u.tokens_in, u.tokens_out) == (words, len(reply.split()))  # the fake counts tokens as words
    assert u.model == MODEL and u.host == server.url.split("//")[1].split("/")[0] and u.base_url == server.url
    assert not u.all_failed and u.last_error == ""


def test_the_key_never_reaches_the_usage_or_the_base_url() -> None:
    prog = make(settings(llm_base_url="https://user:secret@gateway.example/v1"))
    assert prog.usage().base_url == "https://gateway.example/v1" and "secret" not in json.dumps(prog.usage().to_json())


# --------------------------------------------------------------------------- max_tokens


def test_max_tokens_comes_from_the_settings(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    env = {"KERNELPRO_LLM_MODEL": MODEL, "KERNELPRO_LLM_API_KEY": API_KEY, "KERNELPRO_LLM_BASE_URL": server.url,
           "KERNELPRO_LLM_MAX_TOKENS": "4096"}
    prog = make(Settings.from_env(env))
    server.script(ok(answer(("x", {ENTRY: variant()}))))
    prog.propose(parent_of(target, repo_root), "optimize", 1, context(target))
    assert server.requests[0].body["max_tokens"] == 4096
    with pytest.raises(ValueError, match="KERNELPRO_LLM_MAX_TOKENS='lots' is not a positive whole number"):
        Settings.from_env({**env, "KERNELPRO_LLM_MAX_TOKENS": "lots"})


def test_max_tokens_is_clamped_to_the_context_the_server_reports(target: Target, repo_root: Path) -> None:
    fake = FakeOpenAI(context=8192).start()
    try:
        fake.script(ok(answer(("fits", {ENTRY: variant()}))))
        prog = LLMProgrammer(openai.OpenAI(base_url=fake.url, api_key=API_KEY, max_retries=0), MODEL)  # 16384
        prog.check()
        assert prog.context == 8192
        cands = prog.propose(parent_of(target, repo_root), "optimize", 1, context(target))
        fake.check()
    finally:
        fake.stop()
    assert [c.note for c in cands] == ["fits"]
    (req,) = fake.requests  # no 400 first: the budget fitted the context from the start
    assert 1024 <= req.body["max_tokens"] < 8192 - len(req.text().split())


def test_a_400_context_exceeded_is_retried_with_a_budget_that_fits(target: Target, repo_root: Path) -> None:
    """An 8k-context server that does not report its context, asked for 16384 tokens: every request was a 400."""
    fake = FakeOpenAI(context=8192).start()
    try:
        fake.script(ok(answer(("fits", {ENTRY: variant()}))), ok(answer(("again", {ENTRY: variant(2048)}))))
        prog = LLMProgrammer(openai.OpenAI(base_url=fake.url, api_key=API_KEY, max_retries=0), MODEL)
        parent = parent_of(target, repo_root)
        first = prog.propose(parent, "optimize", 1, context(target))
        second = prog.propose(parent, "optimize", 1, context(target))
        fake.check()
    finally:
        fake.stop()
    assert [c.note for c in first + second] == ["fits", "again"]
    refused, fitted, later = fake.requests
    prompt = len(refused.text().split())
    assert refused.body["max_tokens"] == 16384 and fitted.body["max_tokens"] == 8192 - prompt - 16
    assert later.body["max_tokens"] < 8192  # the limit is remembered: no second 400
    u = prog.usage()
    assert u.context == 8192 and u.requests == 3 and u.answered == 2 and u.errors == 0 and u.retries == 1


def test_a_prompt_that_cannot_fit_the_context_is_a_clear_error(target: Target, repo_root: Path) -> None:
    fake = FakeOpenAI(context=600).start()
    try:
        prog = LLMProgrammer(openai.OpenAI(base_url=fake.url, api_key=API_KEY, max_retries=0), MODEL)
        with pytest.raises(PluginError) as e:
            prog.propose(parent_of(target, repo_root), "optimize", 1, context(target))
    finally:
        fake.stop()
    assert "leaves no room for an answer in the model's context of 600 tokens" in str(e.value)
    assert "--max-model-len" in str(e.value) and "--candidates 1" in str(e.value)


# --------------------------------------------------------------------------- truncation


def test_truncation_recovery_keeps_every_complete_candidate_of_every_answer(
    server: FakeOpenAI, target: Target, repo_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    one = answer(("first answer's", {ENTRY: variant(256)}), ("cut", {ENTRY: variant(512)}))
    two = answer(("second answer's", {ENTRY: variant(1024)}), ("cut", {ENTRY: variant(4096)}))
    server.script(ok(one[: one.index('"cut"') + 10], "length"), ok(two[: two.index('"cut"') + 10], "length"),
                  ok(answer(("restarted", {ENTRY: variant(2048)}))))
    prog = programmer(server)
    with caplog.at_level(logging.WARNING):
        cands = prog.propose(parent_of(target, repo_root), "optimize", 4, context(target))
    assert [c.note for c in cands] == ["first answer's", "second answer's", "restarted"]
    assert "cut off at 1000 tokens with 1 complete candidate(s); asking again" in caplog.text  # a warning now
    assert prog.usage().truncated == 2 and prog.usage().retries == 2


# --------------------------------------------------------------------------- reactive without profiles


def test_reactive_without_a_profile_says_so(server: FakeOpenAI, target: Target, repo_root: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    server.script(ok(answer(("x", {ENTRY: variant()}))))
    prog = programmer(server)
    with caplog.at_level(logging.WARNING):
        prog.propose(parent_of(target, repo_root), "optimize", 1, dataclasses.replace(context(target), tool_mode="reactive"))
    assert "no profiling tool is offered" in caplog.text
    assert (prog.usage().untooled, prog.usage().expansions) == (1, 1) and server.requests[0].tools == []


# --------------------------------------------------------------------------- the prompt


def _stage1(target: Target, baseline: Scored) -> ReferenceAnalysis:
    dtypes = [t.dtype for t in (*target.definition.inputs.values(), *target.definition.outputs.values())]
    return analyze_reference(target.definition, target.workloads, flops=target.flops, nbytes=target.bytes,
                             ceilings=default_ceilings("NVIDIA H200", dtypes),
                             measured_ms={w.uuid: baseline.outcome.latency(w.uuid) for w in target.workloads},
                             profile=None)


def test_the_first_prompt_holds_what_the_judge_uses(target: Target, repo_root: Path) -> None:
    base = parent_of(target, repo_root)
    user = _user(target, base, "init", stage1=_stage1(target, base), baseline=base, bottleneck="memory")
    # the tolerances and the acceptance rule, with the gate's own constant
    atol, rtol = target.tolerance.for_dtype("float32")
    assert f"`out` (float32): atol = {atol:g}, rtol = {rtol:g}" in user
    assert f"at least {RunSettings().gamma:.2f}x faster on every workload (each one, not the\n  average)" in user
    # the baseline's timings, already in the first (init) prompt
    assert "## The pull request's kernel (the baseline to beat)" in user and "{'M': 4096}: 0.2500 ms" in user
    # Stage 1: bytes per call, the floor, % of it, from the measured ceilings
    assert "Memory-bound (roofline only (no ncu): memory-bound)" in user and "Ceilings: 4250 GB/s" in user
    assert "| {'M': 4096} | 201 MB | 67.1 MFLOP | 0.333 | 0.0474 | 0.2500 | 19 % | 5.28x |" in user
    # the hardware notes: the measured ceiling, not the datasheet's 4.8 TB/s; nothing for tensor cores
    notes = user.split("## Hardware notes")[1].split("\n## ")[0]
    assert "measured ceilings: 4250 GB/s" in notes and "4.8 TB/s" not in notes and "132 SMs" in notes
    assert "wgmma" not in user and "TMA" not in notes and "memory-bound kernel should approach" in notes


def test_the_h200s_ceilings_are_not_shown_as_another_gpus() -> None:
    from kernelpro.runner.programmers.llm import gpu_hint

    h200 = default_ceilings("NVIDIA H200", ["float32"])  # roofline's defaults are the H200's, whatever the GPU
    assert "measured ceilings: 4250 GB/s" in gpu_hint("NVIDIA H200", "triton", tensor=False, ceilings=h200)[0]
    a100 = gpu_hint("NVIDIA A100-SXM4-80GB", "triton", tensor=False, ceilings=default_ceilings("NVIDIA A100", ["float32"]))
    assert a100[0].startswith("A100: 108 SMs, ~2 TB/s") and "4250" not in a100[0]


def test_a_matrix_product_keeps_its_tensor_core_notes(target: Target, repo_root: Path) -> None:
    gemm = dataclasses.replace(target, definition=dataclasses.replace(target.definition, op_type="gemm"))
    user = _user(gemm, parent_of(gemm, repo_root))
    assert "wgmma" in user and "TMA" in user


def test_a_repair_prompt_shows_only_the_candidates_frames() -> None:
    logs = json.loads((FIXTURES / "candidate_tracebacks.json").read_text())
    text = trim_traceback(logs["compile"]["log"], [ENTRY])
    assert 'File "kernels/swiglu.py", line 15, in _swiglu_kernel' in text and "tl.sigmoidd" in text
    assert "AttributeError: module 'triton.language' has no attribute 'sigmoidd'" in text
    assert "harness.py" not in text and "/work/" not in text and "site-packages" not in text and "/tmp/" not in text
    assert "frames of kernelpro's harness or libraries omitted" in text
    runtime = trim_traceback(logs["runtime"]["log"], [ENTRY])
    assert runtime.splitlines()[-1] == "AssertionError: bad size" and "_candidate_run" not in runtime


def test_the_debug_prompt_carries_the_trimmed_log(target: Target, repo_root: Path) -> None:
    log = json.loads((FIXTURES / "candidate_tracebacks.json").read_text())["compile"]["log"]
    user = _user(target, parent_of(target, repo_root, status="COMPILE_ERROR", log=log), "debug")
    assert 'File "kernels/swiglu.py", line 15' in user and "runner/harness.py" not in user


def test_the_repair_prompt_of_a_rejected_candidate_gives_the_reason(target: Target, repo_root: Path) -> None:
    base = parent_of(target, repo_root)
    why = "kernels/swiglu.py calls torch.nn.functional.silu, which the reference uses to compute the result"
    bad = Scored(base.candidate, rejected(base.candidate.solution, why), 0.0)
    user = _user(target, bad, "debug")
    assert "was rejected without being run: it breaks one of the rules" in user and why in user
    assert BASELINE.splitlines()[0] in user


def test_docs_prompts_md_is_what_the_code_renders_now() -> None:
    """docs/prompts.md shows real prompts: regenerated by docs/prompts.py, never edited by hand."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_prompts", Path(__file__).parents[1] / "docs" / "prompts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kinds = module.prompts()
    assert [t.split(" (")[0] for t, *_ in kinds][:2] == ["The first request: fresh candidates from the pull request's kernel",
                                                          "Improving a working candidate"]
    doc = (Path(__file__).parents[1] / "docs" / "prompts.md").read_text()
    for _, _, messages, _ in kinds:
        for m in messages:
            assert str(m["content"]).rstrip("\n") in doc, "docs/prompts.md is stale: run python docs/prompts.py"
