"""Search memory: rules over plain data, five sections, rendered into prompts, switchable off."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpro.runner.candidate import Candidate
from kernelpro.runner.evaluator import Outcome
from kernelpro.runner.memory import SearchMemory
from kernelpro.runner.search import Scored
from kernelpro.runner.tools import Finding
from kernelpro.runner.trace import BuildSpec, Solution, SourceFile

SPEC = BuildSpec("triton", ("cuda",), "k.py::f")


def _s(note: str, status: str = "PASSED", speedup: float = 1.0, log: str = "") -> Scored:
    sol = Solution(note, "d", "t", SPEC, (SourceFile("k.py", f"# {note}\n"),))
    return Scored(Candidate(sol, None, "optimize", note), Outcome("h", status, (), log=log), speedup)


def test_rules_fill_the_five_sections() -> None:
    m = SearchMemory()
    m.key_files(["k.py", "util.py"], "k.py::f")
    base = _s("baseline")
    bad = _s("BLOCK_SIZE 1024->8192", "COMPILE_ERROR", log="Traceback...\nOutOfResources: shared memory, Required: 262144")
    good = _s("BLOCK_SIZE 64->1024", speedup=3.4)
    slower = _s("num_warps 4->32", speedup=2.0)
    m.observe(1, good, base, [Finding("vectorization", "high", "Global loads are scalar", {}, "x", ("y",))])
    m.observe(2, bad, good)
    m.observe(3, _s("BLOCK_SIZE 8192->2048", speedup=3.3), bad)
    m.observe(4, slower, good)
    text = m.render()
    for title in ("Search findings", "Errors & corrections", "Successful patterns", "Key files", "Learnings"):
        assert f"### {title}" in text
    assert "BLOCK_SIZE 64->1024: 1.00x -> 3.40x" in text
    assert "COMPILE_ERROR (OutOfResources: shared memory, Required: 262144)" in text
    assert "fixed COMPILE_ERROR of 'BLOCK_SIZE 1024->8192' with: BLOCK_SIZE 8192->2048" in text
    assert "slower, avoid: num_warps 4->32: 3.40x -> 2.00x" in text
    assert "- k.py (entry point k.py::f)" in text
    assert "[high] Global loads are scalar (vectorization)" in text


def test_off_means_empty_and_duplicates_are_kept_once() -> None:
    off = SearchMemory(enabled=False)
    off.observe(1, _s("a", "TIMEOUT"), _s("b"))
    assert off.render() == "" and off.entries == []
    on = SearchMemory()
    for i in range(3):
        on.observe(i, _s("a", "TIMEOUT"), _s("b"))
    assert len(on.entries) == 1


@pytest.mark.parametrize("memory", ["on", "off"])
def test_optimize_records_memory_in_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, memory: str) -> None:
    from kernelpro.cli import main, make_demo_repo

    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    repo = make_demo_repo(tmp_path / "repo")
    out = tmp_path / "out"
    assert main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out),
                 "--budget", "3", "--search", "greedy", "--memory", memory]) == 0
    result = json.loads((out / "swiglu" / "result.json").read_text())
    assert result["memory_on"] is (memory == "on")
    if memory == "on":
        sections = {e["section"] for e in result["memory"]}
        assert {"key_files", "successful_patterns"} <= sections
        assert "Search memory" in (out / "report.md").read_text()
    else:
        assert result["memory"] == []


def test_the_llm_prompt_carries_the_memory(target, repo_root) -> None:  # type: ignore[no-untyped-def]
    from test_llm import parent_of

    from kernelpro.runner.programmers import Context
    from kernelpro.runner.programmers.llm import build_messages

    m = SearchMemory()
    m.observe(1, _s("BLOCK_SIZE 64->1024", speedup=3.4), _s("baseline"))
    ctx = Context(target, lambda k: False, "cuda", gpu_name="NVIDIA H200", memory=m.render())
    user = build_messages(parent_of(target, repo_root), "optimize", 2, ctx)[1]["content"]
    assert "## Search memory" in str(user) and "BLOCK_SIZE 64->1024: 1.00x -> 3.40x" in str(user)
    assert "## Search memory" not in str(build_messages(parent_of(target, repo_root), "optimize", 2,
                                                        Context(target, lambda k: False, "cuda"))[1]["content"])
