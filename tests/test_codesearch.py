"""Code search over a CUTLASS/CuTe checkout for the LLM programmer: a temporary checkout of header
files, the path rules, the budgets, the nvcc layout probe, and scripted tool calls over the loopback
OpenAI server."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import openai
import pytest
from fake_openai import API_KEY, MODEL, FakeOpenAI, calls, ok
from test_llm import ENTRY, answer, context, parent_of, settings, variant

from kernelpro.runner.programmers import PluginError
from kernelpro.runner.programmers.codesearch import (
    GREP,
    LIST,
    READ,
    SMEM,
    Budget,
    CodeSearch,
    CodeSearchError,
)
from kernelpro.runner.programmers.llm import LLMProgrammer, make
from kernelpro.runner.target import Target

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")

LAYOUT = """#pragma once
namespace cute {
// Layout: a pair of Shape and Stride.
template <class Shape, class Stride>
struct Layout {
  Shape shape;
  Stride stride;
};
}  // namespace cute
"""
MMA = """#pragma once
namespace cute {
struct SM90_64x128x16_F32BF16BF16_SS {  // wgmma.mma_async m64n128k16
};
}
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "cutlass"
    (root / "include" / "cute" / "arch").mkdir(parents=True)
    (root / "include" / "cute" / "layout.hpp").write_text(LAYOUT)
    (root / "include" / "cute" / "arch" / "mma_sm90.hpp").write_text(MMA)
    (root / "include" / "cute" / "many.hpp").write_text("".join(f"int layout_{i};\n" for i in range(100)))
    (root / "README.md").write_text("CUTLASS\n")
    outside = tmp_path / "secret"
    outside.mkdir()
    (outside / "token.txt").write_text("ghp_secret Layout\n")
    (root / "include" / "escape").symlink_to(outside, target_is_directory=True)
    (root / "include" / "cute" / "token.hpp").symlink_to(outside / "token.txt")
    return root


def test_grep_finds_fixed_strings_and_never_follows_links(checkout: Path) -> None:
    s = CodeSearch(checkout).session()
    out = s.call(GREP, json.dumps({"pattern": "struct Layout"}))
    assert out == "include/cute/layout.hpp:5: struct Layout {"
    assert "mma_sm90.hpp:3:" in s.call(GREP, json.dumps({"pattern": "WGMMA.MMA_ASYNC", "ignore_case": True}))
    # A regular expression is just text here; the linked file and directory are never read.
    assert s.call(GREP, json.dumps({"pattern": "Lay.*t"})).startswith("No match for 'Lay.*t'")
    assert s.call(GREP, json.dumps({"pattern": "ghp_secret"})) == "No match for 'ghp_secret' in 4 files."
    many = s.call(GREP, json.dumps({"pattern": "layout_", "path": "include/cute/many.hpp"}))
    assert many.count("\n") == 40 and "narrow the path" in many


def test_paths_stay_inside_the_checkout(checkout: Path) -> None:
    s = CodeSearch(checkout).session()
    read = s.call(READ, json.dumps({"path": "include/cute/layout.hpp", "start_line": 4, "num_lines": 2}))
    assert read == "include/cute/layout.hpp, lines 4-5 of 9:\n4: template <class Shape, class Stride>\n5: struct Layout {"
    for bad, why in [("../secret/token.txt", "'..'"), ("/etc/passwd", "absolute"),
                     ("include/escape/token.txt", "symbolic link"), ("include/cute/token.hpp", "symbolic link"),
                     ("include/nope.hpp", "does not exist"), ("include/cute", "not a file"),
                     ("include/./cute/../../../secret/token.txt", "'..'")]:
        out = s.call(READ, json.dumps({"path": bad}))
        assert out.startswith(f"{READ}: ") and why in out, (bad, out)
        assert "ghp_secret" not in out
    listing = s.call(LIST, json.dumps({"path": "include"}))
    assert "cute/ (dir)" in listing and "escape (link, not followed)" in listing
    assert "link, not followed" in s.call(LIST, json.dumps({"path": "include/cute"}))
    assert "escape" in s.call(LIST, json.dumps({"path": "include/escape"}))  # refused: it is a link
    assert s.call(READ, "not json") == f"{READ}: the arguments are not valid JSON."
    assert "start_line" in s.call(READ, json.dumps({"path": "README.md", "num_lines": 5000}))


def test_budgets_per_iteration(checkout: Path) -> None:
    s = CodeSearch(checkout, budget=Budget(grep_calls=2, calls=5, reply_bytes=10_000)).session()
    for _ in range(2):
        assert "layout.hpp" in s.call(GREP, json.dumps({"pattern": "Layout"}))
    assert "budget of 2 searches" in s.call(GREP, json.dumps({"pattern": "Layout"}))
    s.call(LIST, json.dumps({"path": "."}))
    s.call(LIST, json.dumps({"path": "."}))
    assert "budget of this answer is spent" in s.call(LIST, json.dumps({"path": "."}))
    # A fresh iteration has a fresh budget; the bytes of the answers are bounded too.
    small = CodeSearch(checkout, budget=Budget(reply_bytes=300)).session()
    out = small.call(GREP, json.dumps({"pattern": "layout_"}))
    assert len(out.encode()) <= 300 and out.endswith("[... cut: budget spent]")
    assert "spent" in small.call(LIST, json.dumps({"path": "."}))


def test_a_missing_checkout_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CodeSearchError, match="KERNELPRO_CUTLASS_DIR"):
        CodeSearch(tmp_path / "nope")
    with pytest.raises(PluginError, match="KERNELPRO_CUTLASS_DIR"):
        make(settings(cutlass_dir=str(tmp_path / "nope")))


def test_the_probe_input_is_a_closed_schema(checkout: Path) -> None:
    cs = CodeSearch(checkout, nvcc="/nonexistent/nvcc")
    ok_buf = {"name": "A", "dtype": "bfloat16", "shape": [2, 64, 64]}
    src, arch, limit = cs.probe_source({"arch": "sm_90a", "buffers": [ok_buf, {**ok_buf, "name": "B", "align": 128}]})
    assert arch == "sm_90a" and limit == 232_448
    assert "alignas(16) __nv_bfloat16 A[2][64][64];" in src and "alignas(128) __nv_bfloat16 B[2][64][64];" in src
    bad = [
        ({"arch": "sm_90a; rm -rf /", "buffers": [ok_buf]}, "'arch' must be one of"),
        ({"arch": "sm_90a", "buffers": [{**ok_buf, "name": "A[1]; } __global__ void evil() {"}]}, "C identifier"),
        ({"arch": "sm_90a", "buffers": [{**ok_buf, "dtype": "char*"}]}, "dtype must be one of"),
        ({"arch": "sm_90a", "buffers": [{**ok_buf, "shape": [64, "64"]}]}, "shape must be"),
        ({"arch": "sm_90a", "buffers": [{**ok_buf, "shape": [True]}]}, "shape must be"),
        ({"arch": "sm_90a", "buffers": [{**ok_buf, "align": 3}]}, "align must be"),
        ({"arch": "sm_90a", "buffers": [ok_buf, ok_buf]}, "unique"),
        ({"arch": "sm_90a", "buffers": [{**ok_buf, "extra": "x"}]}, "must be an object"),
        ({"arch": "sm_90a", "buffers": [ok_buf] * 17}, "1 to 16"),
    ]
    for args, why in bad:
        with pytest.raises(CodeSearchError, match=why.replace("[", r"\[")):
            cs.probe_source(args)


def test_the_probe_runs_nvcc_without_a_shell_with_a_timeout(checkout: Path) -> None:
    seen = {}

    def fake_run(cmd, **kw):  # type: ignore[no-untyped-def]
        seen.update(cmd=cmd, **kw)
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    cs = CodeSearch(checkout, nvcc="/opt/cuda/bin/nvcc", run=fake_run, probe_timeout_s=7)
    out = cs.session().call(SMEM, json.dumps({"arch": "sm_80", "buffers": [{"name": "A", "dtype": "half", "shape": [8]}]}))
    assert out == "smem_layout_check: nvcc took more than 7 s; no answer."
    assert seen["cmd"] == ["/opt/cuda/bin/nvcc", "-arch=sm_80", "--ptx", "probe.cu", "-o", "probe.ptx"]
    assert "shell" not in seen and seen["timeout"] == 7 and set(seen["env"]) == {"PATH", "HOME"}
    assert SMEM not in CodeSearch(checkout).session().names  # no nvcc, no probe offered


@needs_nvcc
def test_the_probe_measures_the_layout_with_nvcc(checkout: Path) -> None:
    s = CodeSearch(checkout, nvcc=NVCC).session()
    fits = s.call(SMEM, json.dumps({"arch": "sm_90a", "buffers": [
        {"name": "A", "dtype": "bfloat16", "shape": [3, 128, 64], "align": 128},
        {"name": "B", "dtype": "float8_e4m3", "shape": [3, 64, 128]},
        {"name": "barriers", "dtype": "uint64", "shape": [3]}]}))
    # 49152 + 24576 + 24 bytes, padded to the struct's 128-byte alignment.
    assert fits.startswith("FITS: sizeof(SharedStorage) = 73856 bytes") and "dynamic shared memory" in fits
    too_big = s.call(SMEM, json.dumps({"arch": "sm_80", "buffers": [{"name": "A", "dtype": "float", "shape": [256, 256]}]}))
    assert too_big.startswith("DOES NOT FIT") and "166912 bytes" in too_big


def test_the_model_searches_the_checkout_before_answering(
        server: FakeOpenAI, target: Target, repo_root: Path, checkout: Path) -> None:
    """Proactive mode (the default): the code-search functions are offered by themselves; the model
    greps, reads what it found, checks a layout, then answers; every result went back to it."""
    server.script(
        calls(GREP, arguments=json.dumps({"pattern": "wgmma"})),
        calls(READ, arguments=json.dumps({"path": "include/cute/arch/mma_sm90.hpp"})),
        calls(SMEM, arguments=json.dumps({"arch": "sm_90a", "buffers": [{"name": "A", "dtype": "half", "shape": [4]}]})),
        ok(answer(("bigger blocks, after reading CuTe", {ENTRY: variant(1024, 4)}))),
    )
    probe_runs = []

    def fake_run(cmd, cwd, **kw):  # type: ignore[no-untyped-def]
        probe_runs.append(cmd)
        (Path(cwd) / "probe.ptx").write_text(".global .align 8 .u64 kernelpro_smem_bytes = 16;\n")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    client = openai.OpenAI(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=10)
    prog = LLMProgrammer(client, MODEL, max_tokens=1000, codesearch=CodeSearch(checkout, nvcc="nvcc", run=fake_run))
    (cand,) = prog.propose(parent_of(target, repo_root), "optimize", 1, context(target))
    assert cand.params["code_search"] == [GREP, READ, SMEM] and "tools_called" not in cand.params
    first = server.requests[0]
    assert first.tool_names == [GREP, READ, LIST, SMEM]
    smem_schema = first.tools[3]["function"]["parameters"]
    assert smem_schema["properties"]["arch"]["enum"][0] == "sm_75" and smem_schema["additionalProperties"] is False
    assert "## Code search (a local CUTLASS/CuTe checkout)" in first.text() and "smem_layout_check" in first.text()
    replies = [m["content"] for m in server.requests[-1].tool_messages]
    assert replies[0] == "include/cute/arch/mma_sm90.hpp:3: struct SM90_64x128x16_F32BF16BF16_SS {  // wgmma.mma_async m64n128k16"
    assert replies[1].startswith("include/cute/arch/mma_sm90.hpp, lines 1-5 of 5:")
    assert replies[2].startswith("FITS: sizeof(SharedStorage) = 16 bytes") and len(probe_runs) == 1
    assert str(checkout) not in json.dumps([r.body for r in server.requests])  # the model sees relative paths only


def test_make_offers_code_search_from_settings(server: FakeOpenAI, checkout: Path) -> None:
    prog = make(settings(llm_base_url=server.url, cutlass_dir=str(checkout)))
    assert prog.codesearch is not None and prog.codesearch.root == checkout.resolve()
    assert make(settings(llm_base_url=server.url)).codesearch is None
    assert os.path.isdir(checkout)
