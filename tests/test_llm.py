"""The LLM programmer against a fake OpenAI-compatible server, through the real openai client.

No GPU, no evaluation: parents are Scored records built by hand around real Outcomes.
"""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Callable
from pathlib import Path

import openai
import pytest
from fake_openai import API_KEY, FAST_RETRY, MODEL, FakeOpenAI, error, ok

from kernelpro.runner.candidate import Candidate
from kernelpro.runner.evaluator import Outcome, Timing, WorkloadResult
from kernelpro.runner.programmers import Context, PluginError, load
from kernelpro.runner.programmers.llm import LLMProgrammer, build_messages, make, parse_reply
from kernelpro.runner.search import Scored
from kernelpro.runner.target import Target
from kernelpro.settings import Settings

DEMO = Path(__file__).resolve().parents[1] / "examples" / "demo"
ENTRY = "kernels/swiglu.py"
BASELINE = (DEMO / "commit2" / ENTRY).read_text()


def variant(block: int = 1024, warps: int = 4) -> str:
    """The demo kernel with other launch parameters: a plausible model answer."""
    out = BASELINE.replace("BLOCK_SIZE = 64", f"BLOCK_SIZE = {block}").replace("num_warps=8", f"num_warps={warps}")
    assert out != BASELINE
    return out


def answer(*candidates: tuple[str, dict[str, str]]) -> str:
    return json.dumps({"candidates": [
        {"strategy": s, "files": [{"path": p, "content": c} for p, c in files.items()]} for s, files in candidates
    ]})


# --------------------------------------------------------------------------- fixtures


def parent_of(target: Target, root: Path, status: str = "PASSED", log: str = "", speedup: float = 1.0) -> Scored:
    sol = target.solution(root)
    if status == "PASSED":
        results = tuple(
            WorkloadResult(w.uuid, "PASSED", timing=Timing(0.25, 0.24, 0.26, 0.01, 50),
                           reference_timing=Timing(0.5, 0.49, 0.51, 0.01, 50))
            for w in target.workloads
        )
    else:
        results = (WorkloadResult(target.workloads[0].uuid, status, log=log),)
    outcome = Outcome(sol.content_hash(), status, results, environment={"hardware": "NVIDIA H200"}, log=log)
    return Scored(Candidate(sol, None, "init", "the pull request's kernel"), outcome, speedup)


def context(target: Target, gpu: str = "NVIDIA H200", seen: Callable[[str], bool] = lambda k: False,
            device: str = "cuda") -> Context:
    return Context(target=target, seen=seen, device=device, gpu_name=gpu)


def programmer(server: FakeOpenAI, key: str = API_KEY, max_retries: int = 2) -> LLMProgrammer:
    client = openai.OpenAI(base_url=server.url, api_key=key, max_retries=max_retries, timeout=10)
    return LLMProgrammer(client, MODEL, max_tokens=1000)


# --------------------------------------------------------------------------- answers


def test_json_answer_gives_candidates_and_the_prompt_has_what_the_model_needs(
    server: FakeOpenAI, target: Target, repo_root: Path
) -> None:
    server.script(ok(answer(("bigger blocks, fewer warps", {ENTRY: variant(1024, 4)}),
                            ("very large blocks", {ENTRY: variant(4096, 8)}))))
    parent = parent_of(target, repo_root, speedup=1.234)
    cands = programmer(server).propose(parent, "optimize", 2, context(target))

    assert [c.note for c in cands] == ["bigger blocks, fewer warps", "very large blocks"]
    assert [c.solution.source(ENTRY) for c in cands] == [variant(1024, 4), variant(4096, 8)]
    for c in cands:
        assert c.parent == parent.candidate.key and c.mode == "optimize"
        assert c.params == {"model": MODEL, "strategy": c.note}
        assert c.solution.author == MODEL and c.solution.description == c.note
        assert c.solution.name == f"swiglu-{c.key[:10]}"
        assert c.solution.spec == parent.candidate.solution.spec

    (req,) = server.requests
    body = req.body
    assert body["model"] == MODEL and body["max_tokens"] == 1000
    assert body["response_format"] == {"type": "json_object"}
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    system, user = (m["content"] for m in body["messages"])
    assert "JSON" in system and '"candidates"' in system and "`swiglu`" in system and ENTRY in system
    assert "torch.nn.functional.silu(a) * b" in user  # the reference
    assert "_swiglu_kernel" in user and "BLOCK_SIZE = 64" in user  # the current source
    assert "1.23x" in user and "Make it faster" in user  # the mode
    assert "Propose 2 candidates" in user
    assert "{'M': 4096}" in user and "{'M': 16384}" in user  # the workloads
    assert "float32 [M, N]" in user and "constant 4096" in user  # the definition
    assert "H200" in user and "4.8 TB/s" in user and "132 SMs" in user  # the GPU hint (no Stage 1: the datasheet)
    assert "wgmma" not in user and "TMA" not in user  # an elementwise kernel has no use for tensor cores
    assert "Triton" in user and "tl.dot" in user
    assert API_KEY not in json.dumps(body)
    assert all(API_KEY not in json.dumps(c.to_json()) for c in cands)


def test_prompts_for_init_and_debug_and_other_gpus(target: Target, repo_root: Path) -> None:
    init = build_messages(parent_of(target, repo_root), "init", 3, context(target, gpu="NVIDIA A100-SXM4-80GB"))
    text = "\n".join(str(m["content"]) for m in init)
    assert "from scratch" in text and "Propose 3 candidates" in text
    assert "wgmma" not in text and "A100" in text

    log = "Traceback (most recent call last):\n" + "noise\n" * 2000 + "triton.CompilationError: BLOCK too big"
    broken = parent_of(target, repo_root, status="COMPILE_ERROR", log=log)
    debug = build_messages(broken, "debug", 1, context(target, gpu="NVIDIA H100 80GB HBM3"))
    text = "\n".join(str(m["content"]) for m in debug)
    assert "failed with status COMPILE_ERROR" in text
    assert "triton.CompilationError: BLOCK too big" in text and len(text) < len(log)  # the tail only
    assert "3.35 TB/s" in text and "Propose 1 candidate, as" in text

    cpu = build_messages(parent_of(target, repo_root), "optimize", 2, context(target, gpu="", device="cpu"))
    text = "\n".join(str(m["content"]) for m in cpu)
    judged = text.split("Workloads it is judged on")[1].split("##")[0]
    assert "interpreter" in text and "{'M': 1}" in judged and "{'M': 4096}" not in judged  # CPU workloads


def test_fenced_code_fallback(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    reply = (
        "Here are two ideas.\n\n**Candidate 1: larger tiles.**\n```python\n" + variant(2048, 4)
        + "```\n\nCandidate 2: vectorised loads with more warps\n\n```py\n" + variant(1024, 16)
        + "```\nHope this helps!"
    )
    server.script(ok(reply))
    cands = programmer(server).propose(parent_of(target, repo_root), "optimize", 4, context(target))
    assert [c.solution.source(ENTRY) for c in cands] == [variant(2048, 4), variant(1024, 16)]
    assert [c.note for c in cands] == ["Candidate 1: larger tiles.", "Candidate 2: vectorised loads with more warps"]


def test_json_inside_prose_and_files_as_a_mapping() -> None:
    text = 'Sure!\n```json\n{"candidates": [{"strategy": "s", "files": {"kernels/swiglu.py": "x = 1\\n"}}]}\n```'
    (d,) = parse_reply(text, ENTRY)
    assert d.strategy == "s" and d.files == ((ENTRY, "x = 1\n"),)


def test_candidates_writing_other_files_are_dropped(
    server: FakeOpenAI, target: Target, repo_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(ok(answer(
        ("also patch the harness", {ENTRY: variant(256), "runner/harness.py": "print('pwned')\n"}),
        ("escape the checkout", {"../../etc/profile": "echo hi\n"}),
        ("new helper module", {"kernels/helpers.py": "X = 1\n"}),
        ("same name, other folder", {"other/swiglu.py": variant(512)}),
        ("fine, relative spelling", {"./kernels/swiglu.py": variant(512)}),
        ("fine, bare file name", {"swiglu.py": variant(1024)}),
    )))
    with caplog.at_level(logging.WARNING):
        cands = programmer(server).propose(parent_of(target, repo_root), "optimize", 4, context(target))
    assert [c.note for c in cands] == ["fine, relative spelling", "fine, bare file name"]
    assert all([s.path for s in c.solution.sources] == [ENTRY] for c in cands)
    assert "runner/harness.py" in caplog.text and "kernels/helpers.py" in caplog.text


def test_invalid_seen_duplicate_and_surplus_candidates_are_skipped(
    server: FakeOpenAI, target: Target, repo_root: Path
) -> None:
    parent = parent_of(target, repo_root)
    seen_sol = parent.candidate.solution.sources[0]
    seen_key = type(parent.candidate.solution)(
        "x", parent.candidate.solution.definition, "x", parent.candidate.solution.spec,
        (type(seen_sol)(ENTRY, variant(128)),)).content_hash()
    server.script(ok(answer(
        ("syntax error", {ENTRY: "def swiglu(a, b:\n"}),
        ("lost the entry point", {ENTRY: "def other(a, b):\n    return a\n"}),
        ("unchanged", {ENTRY: BASELINE}),
        ("already evaluated", {ENTRY: variant(128)}),
        ("first", {ENTRY: variant(256)}),
        ("same as first", {ENTRY: variant(256)}),
        ("second", {ENTRY: variant(512)}),
        ("third, over n", {ENTRY: variant(2048)}),
    )))
    ctx = context(target, seen=lambda k: k == seen_key)
    cands = programmer(server).propose(parent, "optimize", 2, ctx)
    assert [c.note for c in cands] == ["first", "second"]


# --------------------------------------------------------------------------- truncation


def test_truncation_doubles_max_tokens_then_asks_to_restart_concisely(
    server: FakeOpenAI, target: Target, repo_root: Path
) -> None:
    cut = answer(("a", {ENTRY: variant(256)}))[:60]
    server.script(ok(cut, "length"), ok(cut, "length"), ok(answer(("concise", {ENTRY: variant(1024)}))))
    cands = programmer(server).propose(parent_of(target, repo_root), "optimize", 4, context(target))
    assert [c.note for c in cands] == ["concise"]

    first, second, third = server.requests
    assert first.body["max_tokens"] == 1000
    assert second.body["max_tokens"] == 2000 and second.messages == first.messages
    assert third.body["max_tokens"] == 2000
    assert third.messages[:-1] == first.messages
    assert third.messages[-1]["role"] == "user"
    assert third.messages[-1]["content"].startswith("Your previous answer was cut off. Restart, and answer concisely")
    assert "2 candidates" in third.messages[-1]["content"]


def test_truncated_three_times_gives_up_with_what_parsed(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    full = answer(("complete one", {ENTRY: variant(256)}), ("cut one", {ENTRY: variant(512)}))
    cut = full[: full.index("cut one") + 20]
    server.script(ok(cut, "length"), ok(cut[:50], "length"), ok("", "length"))
    cands = programmer(server).propose(parent_of(target, repo_root), "optimize", 2, context(target))
    assert [c.note for c in cands] == ["complete one"]  # salvaged from the first answer
    assert len(server.requests) == 3


# --------------------------------------------------------------------------- endpoint errors


def test_server_errors_are_retried_by_the_sdk(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    server.script(error(500, FAST_RETRY), error(500, FAST_RETRY), ok(answer(("after retries", {ENTRY: variant()}))))
    cands = programmer(server).propose(parent_of(target, repo_root), "optimize", 1, context(target))
    assert [c.note for c in cands] == ["after retries"] and len(server.requests) == 3


def test_rate_limit_exhausted_gives_no_candidates(
    server: FakeOpenAI, target: Target, repo_root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(*[error(429, FAST_RETRY)] * 3)
    with caplog.at_level(logging.WARNING):
        cands = programmer(server).propose(parent_of(target, repo_root), "optimize", 2, context(target))
    assert cands == [] and len(server.requests) == 3
    assert "429" in caplog.text


def test_unreachable_endpoint_gives_no_candidates(target: Target, repo_root: Path) -> None:
    fake = FakeOpenAI().start()
    url = fake.url
    fake.stop()  # nothing listens there any more
    client = openai.OpenAI(base_url=url, api_key=API_KEY, max_retries=0, timeout=5)
    cands = LLMProgrammer(client, MODEL).propose(parent_of(target, repo_root), "optimize", 2, context(target))
    assert cands == []


def test_bad_key_raises_plugin_error_with_the_fix(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    with pytest.raises(PluginError, match="KERNELPRO_LLM_API_KEY") as e:
        programmer(server, key="sk-wrong").propose(parent_of(target, repo_root), "optimize", 2, context(target))
    assert "401" in str(e.value) and "sk-wrong" not in str(e.value)
    assert len(server.requests) == 1  # not retried


def test_unknown_model_raises_plugin_error_with_the_fix(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    server.script(error(404))
    with pytest.raises(PluginError, match="KERNELPRO_LLM_MODEL"):
        programmer(server).propose(parent_of(target, repo_root), "optimize", 2, context(target))


def test_endpoint_without_json_mode(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    server.script(error(400, message="'response_format' of type 'json_object' is not supported with this model."),
                  ok(answer(("plain", {ENTRY: variant()}))))
    prog = programmer(server)
    cands = prog.propose(parent_of(target, repo_root), "optimize", 1, context(target))
    assert [c.note for c in cands] == ["plain"]
    assert "response_format" in server.requests[0].body and "response_format" not in server.requests[1].body


def test_model_that_wants_max_completion_tokens(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    msg = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
    server.script(error(400, message=msg), ok(answer(("reasoning", {ENTRY: variant()}))))
    cands = programmer(server).propose(parent_of(target, repo_root), "optimize", 1, context(target))
    assert [c.note for c in cands] == ["reasoning"]
    assert server.requests[1].body["max_completion_tokens"] == 1000 and "max_tokens" not in server.requests[1].body


# --------------------------------------------------------------------------- make()


def settings(**kw: str | None) -> Settings:
    base = {"device": "cpu", "llm_base_url": None, "llm_model": MODEL, "llm_api_key": API_KEY,
            "github_token": None, "progress": False}
    return Settings(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("missing", "names"), [("llm_model", ["KERNELPRO_LLM_MODEL"]),
                                                ("llm_api_key", ["KERNELPRO_LLM_API_KEY", "OPENAI_API_KEY"])])
def test_make_without_model_or_key_names_the_variables(missing: str, names: list[str]) -> None:
    with pytest.raises(PluginError) as e:
        make(settings(**{missing: None}))
    for var in (*names, "KERNELPRO_LLM_BASE_URL"):
        assert var in str(e.value)


def test_make_builds_a_client_from_settings(server: FakeOpenAI) -> None:
    prog = make(settings(llm_base_url=server.url))
    assert isinstance(prog, LLMProgrammer) and prog.model == MODEL
    assert str(prog.client.base_url).rstrip("/") == server.url and prog.client.max_retries == 2
    assert str(make(settings()).client.base_url).startswith("https://api.openai.com/v1")
    assert isinstance(load("llm", settings(llm_base_url=server.url)), LLMProgrammer)
    with pytest.raises(PluginError, match="KERNELPRO_LLM_MODEL"):
        load("llm", Settings.from_env({}))


# --------------------------------------------------------------------------- end to end


def test_end_to_end_on_the_demo_kernel(server: FakeOpenAI, target: Target, repo_root: Path) -> None:
    server.script(ok(answer(("BLOCK_SIZE 64 -> 1024 and 4 warps: fewer, fuller programs", {ENTRY: variant()}))))
    parent = parent_of(target, repo_root, speedup=1.0)
    prog = make(settings(llm_base_url=server.url))
    (cand,) = prog.propose(parent, "optimize", 1, context(target))
    src = cand.solution.source(ENTRY)
    compile(ast.parse(src), ENTRY, "exec")
    assert cand.solution.content_hash() != parent.candidate.solution.content_hash() == parent.candidate.key
    assert cand.solution.definition == target.definition.name == "swiglu_f32_h4096"
    assert cand.solution.spec.entry_point == target.entry_point
    assert Candidate.from_json(json.loads(json.dumps(cand.to_json()))) == cand


def test_the_fake_server_fails_loudly_on_an_unscripted_request(target: Target, repo_root: Path) -> None:
    fake = FakeOpenAI().start()
    try:
        cands = programmer(fake).propose(parent_of(target, repo_root), "optimize", 1, context(target))
    finally:
        fake.stop()
    assert cands == []  # the programmer swallows the 400 ...
    with pytest.raises(AssertionError, match="no scripted reply left"):
        fake.check()  # ... but the test does not
