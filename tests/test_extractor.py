"""Search memory kept by an LLM: one call per iteration against the loopback OpenAI server, merged,
bounded and deduplicated; any failure of that call falls back to the rules without stopping anything."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import openai
import pytest
from fake_openai import API_KEY, MODEL, FakeOpenAI, error, ok

from kernelpro.runner.candidate import Candidate
from kernelpro.runner.evaluator import Outcome
from kernelpro.runner.extractor import ExtractionError, LLMExtractor, parse
from kernelpro.runner.memory import MAX_ENTRY_CHARS, MAX_NEW_PER_CALL, SearchMemory
from kernelpro.runner.search import Scored
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile

SPEC = BuildSpec("triton", ("cuda",), "k.py::f")


def _s(note: str, status: str = "PASSED", speedup: float = 1.0, log: str = "") -> Scored:
    sol = Solution(note, "d", "t", SPEC, (SourceFile("k.py", f"# {note}\n"),))
    return Scored(Candidate(sol, None, "optimize", note), Outcome("h", status, (), log=log), speedup)


def _extractor(server: FakeOpenAI) -> LLMExtractor:
    return LLMExtractor(openai.OpenAI(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=10), MODEL)


def _answer(**sections: list[object]) -> str:
    return json.dumps({k: sections.get(k, []) for k in ("search_findings", "errors_corrections",
                                                       "successful_patterns", "key_files", "learnings")})


def _iteration(m: SearchMemory) -> None:
    base = _s("baseline")
    m.observe(1, _s("BLOCK_SIZE 64->1024", speedup=3.4), base)
    m.observe(2, _s("BLOCK_SIZE 64->16384", "COMPILE_ERROR", log="Traceback\nOutOfResources: shared memory"), base)


def test_one_call_per_iteration_merged_into_the_five_sections(server: FakeOpenAI) -> None:
    m = SearchMemory(extractor=_extractor(server))
    m.key_files(["k.py"], "k.py::f")
    _iteration(m)
    server.script(ok(_answer(
        successful_patterns=["BLOCK_SIZE 64->1024 gave 3.4x: fewer, fuller programs"],
        errors_corrections=["BLOCK_SIZE 16384 overflows shared memory (OutOfResources)"],
        key_files=["K.PY (entry point k.py::f)", 42],  # a case-insensitive repeat and a non-string: dropped
        learnings=["x" * 1000],
        bogus=["not a section"],
    )))
    text = m.render()
    assert len(server.requests) == 1
    req = server.requests[0]
    assert req.body["response_format"] == {"type": "json_object"} and req.body["model"] == MODEL
    prompt = req.text()
    # The model sees the memory so far and the iteration as plain data: changes, statuses, errors.
    assert "k.py (entry point k.py::f)" in prompt
    assert "BLOCK_SIZE 64->1024" in prompt and "COMPILE_ERROR" in prompt and "OutOfResources: shared memory" in prompt
    assert "3.4" in prompt
    assert "### Successful patterns\n- BLOCK_SIZE 64->1024 gave 3.4x: fewer, fuller programs" in text
    assert "BLOCK_SIZE 16384 overflows shared memory" in text
    sections = m.sections()
    assert sections["key_files"] == ["k.py (entry point k.py::f)"]
    assert len(sections["learnings"][0]) == MAX_ENTRY_CHARS and "\n" not in sections["learnings"][0]
    assert "not a section" not in text
    # Nothing new queued: rendering again makes no call.
    m.render()
    assert len(server.requests) == 1


def test_an_extraction_adds_a_bounded_number_of_entries(server: FakeOpenAI) -> None:
    m = SearchMemory(extractor=_extractor(server))
    _iteration(m)
    server.script(ok(_answer(learnings=[f"lesson {i}" for i in range(50)])))
    m.render()
    assert m.sections()["learnings"] == [f"lesson {i}" for i in range(MAX_NEW_PER_CALL)]


@pytest.mark.parametrize("reply", [error(500), ok("I think the kernel is fine."), ok(_answer(), "length"),
                                   ok(json.dumps({"notes": ["x"]}))])
def test_a_failed_extraction_falls_back_to_the_rules(server: FakeOpenAI, caplog: pytest.LogCaptureFixture,
                                                     reply: object) -> None:
    m = SearchMemory(extractor=_extractor(server))
    rules = SearchMemory()
    _iteration(m)
    _iteration(rules)
    server.script(reply)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING):
        text = m.render()
    assert text == rules.render() and text
    assert m.extraction_failures == 1
    assert "the extraction call failed" in caplog.text and "using the rules for evaluations 1, 2" in caplog.text


def test_memory_off_makes_no_call(server: FakeOpenAI) -> None:
    m = SearchMemory(enabled=False, extractor=_extractor(server))
    _iteration(m)
    assert m.render() == "" and m.to_json() == []
    assert server.requests == []


def test_parse_refuses_what_is_not_the_five_sections() -> None:
    assert parse('Sure! {"learnings": ["a", 3, null], "errors_corrections": "not a list"}') == {
        "learnings": ["a"], "errors_corrections": []}
    with pytest.raises(ExtractionError, match="not a JSON object"):
        parse("no")
    with pytest.raises(ExtractionError, match="none of the sections"):
        parse('{"summary": "x"}')


def test_the_loop_extracts_between_iterations_and_the_next_prompt_has_it(
        server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """optimize() with the LLM programmer and the LLM extractor on one endpoint: programmer, memory,
    programmer, in that order, and the second prompt carries what the extraction found; no new
    evaluation, no new extraction."""
    import test_resume

    from kernelpro.runner.evaluator import EvalSettings
    from kernelpro.runner.optimize import RunSettings, optimize
    from kernelpro.runner.programmers.llm import LLMProgrammer

    land = test_resume.Landscape()
    monkeypatch.setattr("kernelpro.runner.optimize.evaluate", land)
    target = test_resume._target(tmp_path)
    src = (tmp_path / "k.py").read_text()
    faster = src.replace("BLOCK_SIZE = 64", "BLOCK_SIZE = 512")
    client = openai.OpenAI(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=10)
    server.script(
        ok(json.dumps({"candidates": [{"strategy": "bigger blocks", "files": [{"path": "k.py", "content": faster}]}]})),
        ok(_answer(successful_patterns=["BLOCK_SIZE 64->512 made it 8x faster"])),
        ok(json.dumps({"candidates": []})),
        ok(json.dumps({"candidates": []})),  # greedy's restart from fresh seeds: nothing either
    )
    rs = RunSettings(search="greedy", budget=4, per_step=1, evaluation=EvalSettings(device="cpu"), gate_top=0)
    result = optimize(target, tmp_path, tmp_path / "out", LLMProgrammer(client, MODEL, max_tokens=1000), rs,
                      extractor=LLMExtractor(client, MODEL))
    assert len(server.requests) == 4
    assert "candidates" in server.requests[0].text() and "search memory" in server.requests[1].text()
    assert "BLOCK_SIZE 64->512 made it 8x faster" in server.requests[2].text()
    assert "Propose 1 candidate" in server.requests[3].text()
    assert {"section": "successful_patterns", "text": "BLOCK_SIZE 64->512 made it 8x faster", "evaluation": 1,
            "by": "llm"} in list(result.memory)
    report = (tmp_path / "out" / "report.md").read_text()
    # The model's words, made inert Markdown (report.md is also the job's summary, issue 20).
    assert "successful_patterns (evaluation 1, extracted by the model): BLOCK\\_SIZE 64-&gt;512 made it 8x faster" in report
    # The extraction's request is the endpoint's too: counted in the totals, its share named.
    used = result.programmer
    assert (used["requests"], used["answered"], used["errors"]) == (4, 4, 0), used
    assert used["extraction"]["requests"] == 1 and used["tokens_in"] > used["extraction"]["tokens_in"] > 0
    assert "4 requests (4 answered, 0 failed)" in report
    assert f"search-memory extraction among them: 1 requests, {used['extraction']['tokens_in']} tokens in" in report


def test_a_resumed_run_restores_the_models_memory_instead_of_asking_again(
        server: FakeOpenAI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import test_resume

    from kernelpro.runner.evaluator import EvalSettings
    from kernelpro.runner.optimize import RunSettings, optimize
    from kernelpro.runner.programmers.llm import LLMProgrammer

    monkeypatch.setattr("kernelpro.runner.optimize.evaluate", test_resume.Landscape())
    target = test_resume._target(tmp_path)
    src = (tmp_path / "k.py").read_text()

    def cand(block: int) -> object:
        return ok(json.dumps({"candidates": [{"strategy": f"BLOCK_SIZE {block}", "files": [
            {"path": "k.py", "content": src.replace("BLOCK_SIZE = 64", f"BLOCK_SIZE = {block}")}]}]}))

    client = openai.OpenAI(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=10)

    def run(budget: int) -> object:
        rs = RunSettings(search="greedy", budget=budget, per_step=1, evaluation=EvalSettings(device="cpu"), gate_top=0)
        return optimize(target, tmp_path, tmp_path / "out", LLMProgrammer(client, MODEL, max_tokens=1000), rs,
                        extractor=LLMExtractor(client, MODEL))

    server.script(cand(512), ok(_answer(successful_patterns=["512 beat 64"])), cand(1024),
                  ok(_answer(successful_patterns=["1024 beat 512"])))
    run(3)
    assert len(server.requests) == 4
    # The rerun asks the programmer once, with the restored memory, then extracts only the new evaluation.
    server.script(cand(2048), ok(_answer(learnings=["2048 changed little"])))
    result = run(4)
    assert len(server.requests) == 6
    assert "512 beat 64" in server.requests[4].text() and "1024 beat 512" in server.requests[4].text()
    extraction = server.requests[5].text().split("## The latest iteration")[1]
    assert "BLOCK_SIZE 2048" in extraction and extraction.count('"evaluation":') == 1  # the new one only
    texts = [e["text"] for e in result.memory]  # type: ignore[attr-defined]
    assert texts.count("512 beat 64") == 1 and "2048 changed little" in texts
