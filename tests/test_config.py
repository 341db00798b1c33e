"""`.kernelpro.yml`: valid configs load into Targets; broken ones name the file, line and fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpro.runner.config import Config, ConfigError, load_config, match_glob, parse_config
from kernelpro.runner.trace import Axis, Definition, InputSpec, TensorSpec, Workload

REFERENCE = "import torch\n\ndef run(x, gate):\n    return x * torch.sigmoid(gate)\n"

SWIGLU = Definition(
    name="swiglu",
    op_type="elementwise",
    axes={"M": Axis("var"), "N": Axis("const", 128)},
    inputs={"x": TensorSpec(("M", "N"), "float32"), "gate": TensorSpec(("M", "N"), "float32")},
    outputs={"y": TensorSpec(("M", "N"), "float32")},
    reference=REFERENCE,
)
RMSNORM = Definition(
    name="rmsnorm",
    op_type="rmsnorm",
    axes={"B": Axis("var"), "H": Axis("const", 64)},
    inputs={"x": TensorSpec(("B", "H"), "float16"), "eps": TensorSpec(None, "float32")},
    outputs={"y": TensorSpec(("B", "H"), "float16")},
    reference="def run(x, eps):\n    return x\n",
)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "kernels" / "cuda").mkdir(parents=True)
    (tmp_path / "defs").mkdir()
    (tmp_path / "kernels" / "swiglu.py").write_text("def swiglu(x, gate):\n    return x\n")
    (tmp_path / "kernels" / "common.py").write_text("BLOCK = 128\n")
    (tmp_path / "kernels" / "rmsnorm.py").write_text("def rmsnorm(x, eps):\n    return x\n")
    (tmp_path / "defs" / "swiglu.json").write_text(json.dumps(SWIGLU.to_json()))
    (tmp_path / "defs" / "rmsnorm.json").write_text(json.dumps(RMSNORM.to_json()))
    wl_a = Workload.make(SWIGLU, {"M": 4096})
    wl_b = Workload.make(SWIGLU, {"M": 16})
    lines = [
        json.dumps(wl_a.to_json()),
        "",
        json.dumps({"definition": "swiglu", "workload": wl_b.to_json()}),
    ]
    (tmp_path / "defs" / "swiglu.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


def write(repo: Path, text: str) -> Path:
    path = repo / ".kernelpro.yml"
    path.write_text(text)
    return path


VALID = """\
version: 1
targets:
  - name: swiglu
    files: ["kernels/swiglu.py", "kernels/**/*.cu", "kernels/common.py"]
    language: triton
    entry_point: kernels/swiglu.py::swiglu
    definition:
      op_type: elementwise
      axes: {M: {type: var}, N: {type: const, value: 128}}
      inputs:
        x: {shape: [M, N], dtype: float32}
        gate: {shape: [M, N], dtype: float32}
      outputs: {y: {shape: [M, N], dtype: float32}}
      reference: |
        def run(x, gate):
            return x
    workloads:
      - {M: 8192}
      - {M: 1}
    cpu_workloads: [{M: 4}]
    tolerances: {atol: 1e-5, rtol: 2.5e-4}
    budget: {evaluations: 8, minutes: 5, timeout_s: 60}
    flops: "3*M*N"
    bytes: "12 * M * N"
  - name: rmsnorm.v2
    files: ["kernels/rmsnorm.py"]
    sources: ["kernels/rmsnorm.py", "kernels/common.py"]
    language: python
    entry_point: kernels/rmsnorm.py::rmsnorm
    destination_passing_style: true
    definition: defs/rmsnorm.json
    workloads:
      - axes: {B: 32}
        inputs: {eps: {type: scalar, value: 1e-6}}
      - {axes: {B: 7}, inputs: {x: {type: random}, eps: {type: scalar, value: 0.001}}, uuid: small}
  - name: swiglu-jsonl
    files: ["kernels/swiglu.py"]
    language: triton
    entry_point: ./kernels/swiglu.py::swiglu
    definition: defs/swiglu.json
    workloads: ["defs/swiglu.jsonl", {M: 2}]
"""


def test_valid_config_inline_and_path_definitions(repo: Path) -> None:
    cfg = load_config(write(repo, VALID))
    assert isinstance(cfg, Config) and cfg.version == 1 and cfg.path == repo / ".kernelpro.yml"
    assert [t.name for t in cfg.targets] == ["swiglu", "rmsnorm.v2", "swiglu-jsonl"]

    sw = cfg.target("swiglu")
    assert sw.language == "triton" and sw.entry_point == "kernels/swiglu.py::swiglu"
    assert sw.definition.name == "swiglu"  # defaults to the target name
    assert sw.definition.var_axes == ["M"]
    # default sources: the entry file, then the literal (non-glob) paths of `files`
    assert sw.files == ("kernels/swiglu.py", "kernels/common.py")
    assert sw.globs == ("kernels/swiglu.py", "kernels/**/*.cu", "kernels/common.py")
    assert [w.axes for w in sw.workloads] == [{"M": 8192}, {"M": 1}]
    assert all(i.type == "random" for w in sw.workloads for i in w.inputs.values())
    assert set(sw.workloads[0].inputs) == {"x", "gate"}
    assert [w.axes for w in sw.workloads_for("cpu")] == [{"M": 4}]
    # YAML 1.1 reads 1e-5 (no dot) as a string; the config accepts it as a number
    assert sw.tolerance.atol == 1e-5 and sw.tolerance.rtol == 2.5e-4
    assert (sw.budget.evaluations, sw.budget.minutes, sw.budget.timeout_s) == (8, 5.0, 60.0)
    assert sw.flops == "3*M*N" and sw.bytes == "12 * M * N"
    assert sw.destination_passing_style is False

    rms = cfg.target("rmsnorm.v2")
    assert rms.definition == RMSNORM
    assert rms.files == ("kernels/rmsnorm.py", "kernels/common.py")
    assert rms.destination_passing_style is True
    w0, w1 = rms.workloads
    assert w0.axes == {"B": 32} and w0.inputs["eps"] == InputSpec("scalar", 1e-6)
    assert w0.inputs["x"] == InputSpec("random")
    assert w1.uuid == "small" and w1.inputs["eps"].value == 0.001

    sol = rms.solution(repo)  # the sources are readable and form a valid Solution
    assert [s.path for s in sol.sources] == ["kernels/rmsnorm.py", "kernels/common.py"]
    assert sol.spec.language == "python" and sol.entry_file == "kernels/rmsnorm.py"

    js = cfg.target("swiglu-jsonl")
    assert js.entry_point == "kernels/swiglu.py::swiglu"  # './' is normalised away
    assert [w.axes for w in js.workloads] == [{"M": 4096}, {"M": 16}, {"M": 2}]
    assert js.workloads[0] == Workload.make(SWIGLU, {"M": 4096})


def test_targets_for_globs(repo: Path) -> None:
    cfg = load_config(write(repo, VALID))
    names = lambda paths: [t.name for t in cfg.targets_for(paths)]  # noqa: E731
    assert names(["kernels/swiglu.py"]) == ["swiglu", "swiglu-jsonl"]
    assert names(["kernels/cuda/deep/gemm.cu"]) == ["swiglu"]
    assert names(["kernels/gemm.cu"]) == ["swiglu"]  # '**/' matches zero directories too
    assert names(["./kernels/rmsnorm.py", "README.md"]) == ["rmsnorm.v2"]
    assert names(["kernels/common.py"]) == ["swiglu"]  # sources alone do not select
    assert names(["other/kernels/swiglu.py", "kernels/gemm.cuh"]) == []
    assert names([]) == []


@pytest.mark.parametrize(
    ("pattern", "path", "ok"),
    [
        ("kernels/*.py", "kernels/a.py", True),
        ("kernels/*.py", "kernels/sub/a.py", False),
        ("**/*.cu", "a.cu", True),
        ("**/*.cu", "x/y/z/a.cu", True),
        ("kernels/**", "kernels/x/y.cu", True),
        ("kernels/", "kernels/x/y.cu", True),
        ("*.cu", "x/a.cu", False),
        ("k?.py", "k1.py", True),
        ("k[0-9].py", "k7.py", True),
        ("k[!0-9].py", "k7.py", False),
        ("a/**/b/*.h", "a/b/c.h", True),
        ("a/**/b/*.h", "a/x/y/b/c.h", True),
    ],
)
def test_match_glob(pattern: str, path: str, ok: bool) -> None:
    assert match_glob(pattern, path) is ok


def test_unknown_target_names_the_known_ones(repo: Path) -> None:
    cfg = load_config(write(repo, VALID))
    with pytest.raises(
        ConfigError, match=r"unknown kernel 'x'; known: swiglu, rmsnorm.v2, swiglu-jsonl"
    ):
        cfg.target("x")


def test_parse_config_and_repo_root(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    cfg = parse_config(VALID, "conf/kp.yml", repo)
    assert cfg.path == repo / "conf/kp.yml" and len(cfg.targets) == 3
    # a config kept elsewhere resolves its paths under the given repo root
    other = tmp_path_factory.mktemp("elsewhere") / "kp.yml"
    other.write_text(VALID)
    assert [t.name for t in load_config(other, repo_root=repo).targets][0] == "swiglu"


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="file not found. Fix: add a .kernelpro.yml"):
        load_config(Path("/nonexistent/dir/.kernelpro.yml"))


# --------------------------------------------------------------------------- broken configs

HEAD = """\
version: 1
targets:
  - name: swiglu
    files: ["kernels/swiglu.py"]
"""  # lines 1-4


def body(
    *,
    language: str = "triton",
    entry: str = "kernels/swiglu.py::swiglu",
    definition: str = "defs/swiglu.json",
    workloads: str = "[{M: 64}]",
    extra: str = "",
) -> str:
    # lines 5, 6, 7, 8, then `extra` from line 9
    return (
        f"    language: {language}\n    entry_point: {entry}\n    definition: {definition}\n"
        f"    workloads: {workloads}\n{extra}"
    )


BROKEN = {
    "bad_yaml": (
        HEAD + "    language: triton: fast\n",
        5,
        ["not valid YAML", "mapping values are not allowed here", "Fix: check the indentation"],
    ),
    "unknown_key": (
        HEAD + body(workloads="[{M: 64}]").replace("workloads:", "workload:"),
        8,
        ["unknown key 'workload'", "Fix: rename it to 'workloads'", "allowed keys: name, files"],
    ),
    "missing_targets": (
        "version: 1\ntarget:\n  - name: x\n",
        2,
        ["unknown key 'target'", "Fix: rename it to 'targets'"],
    ),
    "missing_targets_entirely": (
        "version: 1\n",
        1,
        ["'targets' is required", "Fix: add `targets:`"],
    ),
    "bad_language": (
        HEAD + body(language="trition"),
        5,
        [
            "targets[0].language: 'trition' is not one of triton, cuda, python. "
            "Fix: set language to one of triton, cuda, python."
        ],
    ),
    "entry_not_in_sources": (
        HEAD + body(entry="kernels/other.py::swiglu", extra='    sources: ["kernels/swiglu.py"]\n'),
        6,
        [
            "entry file 'kernels/other.py' is not one of the sources (kernels/swiglu.py)",
            "Fix: add 'kernels/other.py' to sources",
        ],
    ),
    "bad_entry_point": (
        HEAD + body(entry="kernels/swiglu.py:swiglu"),
        6,
        ["is not 'path::symbol'", "Fix: write it as path/to/file.py::function_name"],
    ),
    "workload_axis_unknown": (
        HEAD + body(workloads="\n      - {M: 64}\n      - {K: 64, M: 2}"),
        10,
        [
            "targets[0].workloads[1]: 'K' is not an axis of definition swiglu (its variable axes: M)",
            "Fix: remove 'K' or use one of M",
        ],
    ),
    "workload_missing_axis": (
        HEAD + body(workloads="[{}]"),
        8,
        ["no value for variable axes M", "Fix: add M: <size>"],
    ),
    "definition_path_missing": (
        HEAD + body(definition="defs/nope.json"),
        7,
        ["file 'defs/nope.json' not found in the repository", "Fix: create it, or fix the path"],
    ),
    "definition_escapes_repo": (
        HEAD + body(definition="../outside.json"),
        7,
        [
            "'../outside.json' points outside the repository",
            "Fix: use a path relative to the repository root",
        ],
    ),
    "workloads_absolute_path": (
        HEAD + body(workloads="\n      - /etc/workloads.jsonl"),
        9,
        ["'/etc/workloads.jsonl' points outside the repository", "Fix:"],
    ),
    "files_glob_escapes": (
        HEAD.replace('["kernels/swiglu.py"]', '["../**/*.py"]') + body(),
        4,
        ["must be relative to the repository root and must not use '..'", "Fix: write the path"],
    ),
    "duplicate_target_name": (
        HEAD + body() + HEAD.split("\n", 2)[2] + body(),
        9,
        [
            "targets[1].name: duplicate target name 'swiglu' (first at line 3)",
            "Fix: give each target a unique name",
        ],
    ),
    "bad_tolerance_type": (
        HEAD + body(extra="    tolerances:\n      atol: 1e-5\n      rtol: tight\n"),
        11,
        [
            "targets[0].tolerances.rtol: expected a non-negative number, got 'tight'",
            "Fix: write a non-negative number",
        ],
    ),
    "tolerances_not_a_mapping": (
        HEAD + body(extra="    tolerances: 1e-5\n"),
        9,
        ["expected a mapping like {atol: 1.0e-5, rtol: 1.0e-5}", "Fix: make it a mapping"],
    ),
    "scalar_input_needs_full_form": (
        HEAD
        + body(
            definition="defs/rmsnorm.json", workloads="[{B: 4}]", entry="kernels/swiglu.py::rmsnorm"
        ),
        8,
        ["scalar inputs (eps) that need values", "Fix: use the full form"],
    ),
    "flops_not_axis": (
        HEAD + body(extra='    flops: "2*M*N*K"\n'),
        9,
        [
            "'K' in '2*M*N*K' is not an axis of the definition (M, N)",
            "Fix: use only the definition's axis names",
        ],
    ),
    "bytes_calls_function": (
        HEAD + body(extra="    bytes: __import__('os').getcwd()\n"),
        9,
        ["calls something other than min, max, abs", "Fix:"],
    ),
    "bytes_not_arithmetic": (
        HEAD + body(extra="    bytes: M.real if N else 'x'\n"),
        9,
        ["may only use numbers, axis names", "Fix:"],
    ),
    "bad_name": (
        "version: 1\ntargets:\n  - name: my kernel\n" + HEAD.split("\n", 3)[3] + body(),
        3,
        ["'my kernel' may only use letters, digits", "Fix: rename it, e.g. my_kernel"],
    ),
    "bad_version": (
        "version: 2\n" + HEAD.split("\n", 1)[1] + body(),
        1,
        ["unsupported version 2", "Fix: set `version: 1`"],
    ),
    "duplicate_yaml_key": (
        HEAD + body(extra="    language: cuda\n"),
        9,
        ["language: duplicate key (first at line 5)", "Fix: keep only one of them"],
    ),
    "missing_required": (
        "version: 1\ntargets:\n  - name: k\n    files: [a.py]\n    language: cuda\n",
        3,
        [
            "targets[0]: 'entry_point' is required",
            "Fix: add `entry_point: path/to/kernel.py::function`",
        ],
    ),
    "inline_definition_undefined_axis": (
        HEAD
        + "    language: triton\n    entry_point: kernels/swiglu.py::swiglu\n"  # lines 5-6
        + "    workloads: [{M: 64}]\n    definition:\n"  # lines 7-8
        + "      op_type: x\n      axes: {M: {type: var}}\n"  # lines 9-10
        + "      inputs: {x: {shape: [M, Q], dtype: float32}}\n"  # line 11
        + "      outputs: {y: {shape: [M], dtype: float32}}\n"
        + "      reference: 'def run(x): return x'\n",
        11,
        ["tensor 'x' uses undefined axis 'Q'", "Fix: correct the inline definition"],
    ),
    "bad_definition_json": (
        HEAD + body(definition="defs/bad.json"),
        7,
        [
            "'defs/bad.json' is not a valid FlashInfer-Trace definition",
            "'op_type' is required",
            "Fix:",
        ],
    ),
    "python_tag_is_not_executed": (
        HEAD + body(extra="    flops: !!python/object/apply:os.system ['touch pwned']\n"),
        9,
        ["cannot read this value", "Fix: remove the YAML tag"],
    ),
    "bad_budget": (
        HEAD + body(extra="    budget: {evaluations: 2.5, minutes: 0}\n"),
        9,
        [
            "budget.minutes: expected a positive number, got 0",
            "budget.evaluations: expected a whole number",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_config_names_line_and_fix(repo: Path, case: str) -> None:
    text, line, needles = BROKEN[case]
    (repo / "defs" / "bad.json").write_text(json.dumps({"name": "bad", "axes": {}}))
    with pytest.raises(ConfigError) as info:
        load_config(write(repo, text))
    msg = str(info.value)
    lines = [
        e
        for e in info.value.errors
        if e.startswith((f".kernelpro.yml:{line}:", f".kernelpro.yml:{line} "))
    ]
    assert lines, f"no error on line {line}:\n{msg}"
    for needle in needles:
        assert any(needle in e for e in lines), f"{needle!r} not in line-{line} errors:\n{msg}"
    assert all(". Fix: " in e and e.endswith(".") for e in info.value.errors), msg


def test_all_errors_are_collected(repo: Path) -> None:
    text = HEAD + body(
        language="trition", workloads="[{K: 1}]", extra="    tolerances: {atol: x}\n    flops: 1+\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(write(repo, text))
    errs = info.value.errors
    assert [e.split(":")[1] for e in errs] == ["5", "8", "8", "9", "10"], errs  # sorted by line
    assert "language" in errs[0] and "'K'" in errs[1] and "no value for variable axes M" in errs[2]
    assert "atol" in errs[3] and "not a Python expression" in errs[4]


def test_error_in_second_target_does_not_hide_first(repo: Path) -> None:
    text = HEAD + body() + "  - name: other\n    files: [x.py]\n"  # line 9
    with pytest.raises(ConfigError) as info:
        load_config(write(repo, text))
    assert {e.split(":")[1] for e in info.value.errors} == {"9"}
    assert any("'language' is required" in e for e in info.value.errors)
