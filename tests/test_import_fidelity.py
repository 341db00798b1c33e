"""Import fidelity (issue 19, point 1): the candidate's files are what runs, imported by the names
the repository uses, whatever copy of its package is installed on the runner.

Each test judges a candidate with the real evaluator (reference child, confined candidate child) on
the CPU, and proves with a canary which file ran: the pull request's kernel computes the reference
(2x), a candidate whose kernel file exits at import must not build, and one that computes 3x must be
judged incorrect. With the installed copy running instead, both would pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from kernelpro.runner.config import ConfigError, parse_config
from kernelpro.runner.evaluator import EvalSettings, Outcome, evaluate
from kernelpro.runner.layout import module_of, roots
from kernelpro.runner.target import Target
from kernelpro.runner.trace import Solution, SourceFile

DEFINITION = """
    definition:
      op_type: scale
      axes: {M: {type: var}}
      inputs: {x: {shape: [M], dtype: float32}}
      outputs: {y: {shape: [M], dtype: float32}}
      reference: |
        def run(x):
            return x * 2
    workloads: [{axes: {M: 8}}]
"""
KERNEL = "from .util import factor\n\ndef scale(x):\n    return x * factor()\n"
UTIL = "def factor():\n    return 2\n"
EXITS = "raise SystemExit(3)\n"
TRIPLES = "def scale(x):\n    return x * 3\n"
WRAPPER = "from canarypkg.ops.kern import scale\n\ndef run(x):\n    return scale(x)\n"


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def _target(repo: Path, files: list[str], entry: str, extra: str = "") -> Target:
    text = (f"version: 1\ntargets:\n  - name: k\n    files: {json.dumps(files)}\n    language: python\n"
            f"    entry_point: {entry}\n{extra}{DEFINITION}")
    return parse_config(text, ".kernelpro.yml", repo).targets[0]


def _with(sol: Solution, path: str, text: str) -> Solution:
    """The candidate: the pull request's kernel with one file replaced."""
    return Solution(sol.name + "-c", sol.definition, "test", sol.spec,
                    tuple(SourceFile(f.path, text if f.path == path else f.content) for f in sol.sources))


def _evaluate(t: Target, repo: Path, sol: Solution, tmp: Path) -> Outcome:
    es = EvalSettings(device="cpu", trials=1, reps_cpu=1, rotate=1, timeout_s=90, cache_dir=tmp / "cache",
                      context=t.context(repo))
    return evaluate(t.definition, sol, t.workloads, t.tolerance, es)


# How setuptools is told where the packages are decides how an editable install finds them: a
# ``where`` folder becomes a path entry in a .pth file, a package mapped on its own a meta-path
# finder (``__editable___canarypkg_0_1_finder.py``).
FIND = '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
MAPPED = ('[tool.setuptools]\npackages = ["canarypkg", "canarypkg.ops"]\n'
          '[tool.setuptools.package-dir]\ncanarypkg = "src/canarypkg"\n')


# The repository's util imports a part it does not hold as source (standing for a compiled
# extension built at install time): only the installed copy has it.
NATIVE_UTIL = "from canarypkg.ops._native import factor  # noqa: F401\n"


def _src_layout(repo: Path, packages: str = FIND) -> None:
    _write(repo, {
        "pyproject.toml": textwrap.dedent("""\
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "canarypkg"
            version = "0.1"
            """) + packages,
        "src/canarypkg/__init__.py": "",
        "src/canarypkg/ops/__init__.py": "",
        "src/canarypkg/ops/kern.py": KERNEL,
        "src/canarypkg/ops/util.py": NATIVE_UTIL,
        "bench/wrap.py": WRAPPER,
    })


def _venv(tmp: Path, how: str, wheel: Path | None = None) -> Path:
    """A throwaway interpreter that sees this one's packages (kernelpro, torch) and has ``repo``
    installed (editable: the meta-path finder kind of setuptools >= 64). Offline: no build isolation,
    no dependencies. Its prefix, where the installed copy lives, is readable by confined children."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    py = venv / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # After the venv's own site-packages, so its installed copy wins: this interpreter's packages,
    # and its PYTHONPATH (where the GPU machine has kernelpro and Liger), which _run_in then unsets.
    ours = [sysconfig.get_paths()["purelib"], *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    Path(site, "_outer.pth").write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in ours))
    # The installed copy is the package as a released version has it: its kernel computes 2x too.
    installed = venv / "pkgsrc"
    _src_layout(installed, MAPPED if how == "editable-finder" else FIND)
    _write(installed, {"src/canarypkg/ops/_native.py": UTIL})
    # --ignore-installed: a copy already on the outer path (the GPU machine's /tmp/site has Liger's
    # wheel) must not make pip skip this venv's own install.
    cmd = [str(py), "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index", "-q", "--ignore-installed",
           *(["-e"] if how.startswith("editable") else []), str(wheel or installed)]
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stdout + got.stderr
    if wheel is not None:
        return py
    names = [p.name for p in Path(site).iterdir()]
    finder = any(n.startswith("__editable__") and n.endswith("finder.py") for n in names)
    assert finder == (how == "editable-finder") and ("canarypkg" in names) == (how == "installed"), names
    return py


_RUNNER = """
import json, sys
from pathlib import Path
from kernelpro.runner.config import parse_config
from kernelpro.runner.evaluator import EvalSettings, evaluate
from kernelpro.runner.trace import Solution, SourceFile
repo, tmp, cfg, replace = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
device, kernel, module = sys.argv[5], sys.argv[6], sys.argv[7]
t = parse_config(cfg, ".kernelpro.yml", repo).targets[0]
es = EvalSettings(device=device, trials=1, reps_cpu=1, rotate=1, timeout_s=300, cache_dir=tmp / "cache",
                  context=t.context(repo))
import importlib
installed = importlib.import_module(module)  # the parent sees the installed copy
assert "venv" in installed.__file__, installed.__file__
out = {}
for name, text in replace.items():
    sol = t.solution(repo)
    if text is not None:
        text = text.replace("{head}", sol.source(kernel))
        sol = Solution(sol.name + name, sol.definition, "t", sol.spec,
                       tuple(SourceFile(f.path, text if f.path == kernel else f.content) for f in sol.sources))
    o = evaluate(t.definition, sol, t.workloads, t.tolerance, es)
    out[name] = [o.status, o.log[-300:], list(o.warnings)]
print("RESULT" + json.dumps(out))
"""


def _run_in(py: Path, repo: Path, tmp: Path, cfg: str, cases: dict[str, str | None] | None = None,
            device: str = "cpu", kernel: str = "src/canarypkg/ops/kern.py",
            module: str = "canarypkg.ops.kern") -> dict[str, list[object]]:
    """Evaluates the pull request's kernel and each case (the kernel file's text; ``{head}`` is the
    head's text) in ``py``, a fresh interpreter whose site-packages hold the installed copy."""
    cases = cases or {"head": None, "exits": EXITS}  # the in-process tests below also judge one computing 3x
    got = subprocess.run([str(py), "-c", _RUNNER, str(repo), str(tmp), cfg, json.dumps(cases), device, kernel, module],
                         capture_output=True, text=True, timeout=580, cwd=tmp,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    line = next((ln for ln in got.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, got.stdout[-2000:] + got.stderr[-3000:]
    return json.loads(line[len("RESULT"):])


def _config(files: list[str], entry: str, extra: str = "") -> str:
    return (f"version: 1\ntargets:\n  - name: k\n    files: {json.dumps(files)}\n    language: python\n"
            f"    entry_point: {entry}\n{extra}{DEFINITION}")


def _check(out: dict[str, list[object]]) -> None:
    assert out["head"][0] == "PASSED", out
    assert out["head"][2] == [], out  # the candidate's tree won: nothing to warn about
    assert out["exits"][0] == "COMPILE_ERROR" and "SystemExit" in str(out["exits"][1]), out


@pytest.mark.parametrize("how", ["editable-pth", "editable-finder", "installed"])
def test_src_layout_wins_over_the_installed_package(tmp_path: Path, how: str) -> None:
    """A src-layout package installed on the runner (editable through a .pth path entry or a meta-path
    finder, or a copy in site-packages); the wrapper imports the kernel as the repository does, and
    the part only the installed copy has (a compiled extension's stand-in) still comes from it."""
    repo = tmp_path / "repo"
    _src_layout(repo)
    py = _venv(tmp_path, how)
    out = _run_in(py, repo, tmp_path, _config(["bench/wrap.py", "src/canarypkg/ops/kern.py"], "bench/wrap.py::run"))
    _check(out)


def test_relative_import_in_a_package_at_the_root(tmp_path: Path) -> None:
    """A FlashInfer-like package at the repository root; the entry point is the package's own
    function, whose module imports a sibling relatively (not a file of the target)."""
    repo = tmp_path / "repo"
    _write(repo, {"fi/__init__.py": "from .norm import scale\n", "fi/util.py": UTIL, "fi/norm.py": KERNEL})
    t = _target(repo, ["fi/norm.py"], "fi/norm.py::scale")
    assert {f.path for f in t.context(repo)} == {"fi/__init__.py", "fi/util.py"}
    head = t.solution(repo)
    assert _evaluate(t, repo, head, tmp_path).passed
    exits = _evaluate(t, repo, _with(head, "fi/norm.py", EXITS), tmp_path)
    assert exits.status == "COMPILE_ERROR" and "SystemExit" in exits.log, exits.log
    triples = _evaluate(t, repo, _with(head, "fi/norm.py", TRIPLES), tmp_path)
    assert triples.status == "INCORRECT_NUMERICAL", triples.log


def test_an_empty_init_keeps_a_subpackage_named_like_an_installed_package_inside_its_package(tmp_path: Path) -> None:
    """FlashInfer as published: an empty ``flashinfer/__init__.py`` and a subpackage ``flashinfer/triton``.
    The empty file still makes ``flashinfer`` a package, so ``flashinfer/triton`` is not served as the
    top-level ``triton`` (which broke ``import triton`` in every evaluation of such a target)."""
    repo = tmp_path / "repo"
    _write(repo, {"fi/__init__.py": "", "fi/triton/__init__.py": "", "fi/triton/util.py": UTIL,
                  "fi/triton/norm.py": "import triton\n\n" + KERNEL})
    t = _target(repo, ["fi/triton/norm.py"], "fi/triton/norm.py::scale")
    assert {f.path for f in t.context(repo)} == {"fi/__init__.py", "fi/triton/__init__.py", "fi/triton/util.py"}
    head = t.solution(repo)
    got = _evaluate(t, repo, head, tmp_path)
    assert got.passed, got.log[-1500:]


def test_python_path_names_the_import_root(tmp_path: Path) -> None:
    """A Triton-repository-like layout (python/tk/..., no __init__.py files) that no rule can read:
    ``python_path: [python]`` says where ``tk`` is imported from."""
    repo = tmp_path / "repo"
    _write(repo, {"python/tk/ops.py": "def scale(x):\n    return x * 2\n",
                  "wrap.py": "from tk.ops import scale\n\ndef run(x):\n    return scale(x)\n"})
    files = ["wrap.py", "python/tk/ops.py"]
    bare = _target(repo, files, "wrap.py::run")
    assert not _evaluate(bare, repo, bare.solution(repo), tmp_path).passed  # `tk` is nowhere to be found
    t = _target(repo, files, "wrap.py::run", "    python_path: [python]\n")
    assert t.python_path == ("python",) and t.solution(repo).spec.python_path == ("python",)
    head = t.solution(repo)
    assert _evaluate(t, repo, head, tmp_path).passed
    triples = _evaluate(t, repo, _with(head, "python/tk/ops.py", TRIPLES), tmp_path)
    assert triples.status == "INCORRECT_NUMERICAL", triples.log


@pytest.mark.parametrize(("value", "message"), [
    ("[nowhere]", "targets[0].python_path[0]: 'nowhere' is not a folder of the repository"),
    ("[../up]", "targets[0].python_path[0]: '../up' must be relative to the repository root"),
    ("[bench]", "targets[0].python_path: no Python file of the target is under 'bench'"),
    ("[]", "targets[0].python_path: must not be empty"),
])
def test_python_path_config_errors(tmp_path: Path, value: str, message: str) -> None:
    _write(tmp_path, {"python/tk/ops.py": "x = 1\n", "bench/notes.txt": "-\n"})
    with pytest.raises(ConfigError) as e:
        _target(tmp_path, ["python/tk/ops.py"], "python/tk/ops.py::scale", f"    python_path: {value}\n")
    assert message in str(e.value), str(e.value)


def test_a_module_the_harness_already_imported_is_reported(tmp_path: Path) -> None:
    """A target's file that defines a module the harness itself imported before the candidate (here
    ``json``) cannot be served: the run says that the other copy ran instead (IMPORT_MISMATCH)."""
    _write(tmp_path, {"wrap.py": "import json\n\ndef run(x):\n    return x * 2\n", "json/__init__.py": EXITS})
    t = _target(tmp_path, ["wrap.py", "json/__init__.py"], "wrap.py::run")
    got = _evaluate(t, tmp_path, t.solution(tmp_path), tmp_path)
    assert got.passed, got.log
    assert any("IMPORT_MISMATCH" in w and "json" in w for w in got.warnings), got.warnings


def test_layout_rules() -> None:
    files = {"src/p/__init__.py", "src/p/ops/__init__.py", "src/p/ops/k.py", "fi/__init__.py", "fi/n.py",
             "python/tk/ops.py", "src/ns/m.py", "w.py"}
    got = roots(sorted(files), files)
    assert got["p"] == ("src",) and got["fi"] == ("",) and got["ns"] == ("src",) and got["w"] == ("",)
    assert got["python"] == ("",) and roots(["python/tk/ops.py"], files, ["python"]) == {"tk": ("python",)}
    assert module_of("src/p/ops/k.py", got) == "p.ops.k" and module_of("fi/__init__.py", got) == "fi"


def test_the_mismatch_reaches_the_smoke_step_the_log_and_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Through `kernelpro optimize`: the smoke step warns before any search (statically), the
    baseline's evaluation says the other copy ran, and report.md and result.json carry it."""
    from kernelpro.cli import main

    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    repo = tmp_path / "repo"
    cfg = _config(["wrap.py", "json/__init__.py"], "wrap.py::run", "    budget: {evaluations: 1}\n")
    _write(repo, {".kernelpro.yml": cfg})
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "configuration"], check=True)
    _write(repo, {"wrap.py": "import json\n\ndef run(x):\n    return x * 2\n", "json/__init__.py": EXITS})
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "kernel"], check=True)
    out = tmp_path / "out"
    assert main(["optimize", "--repo", str(repo), "--base", "HEAD~1", "--head", "HEAD", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "kernelpro: warning: k: the target's files define `json`" in err, err
    assert "kernelpro: warning: k: IMPORT_MISMATCH: the entry point ran json from" in err, err
    assert "Warning: the measurement may not be of the candidate's files." in (out / "report.md").read_text()
    result = json.loads((out / "k" / "result.json").read_text())
    assert any("IMPORT_MISMATCH" in w for w in result["baseline"]["warnings"])


LIGER_WHEEL = Path(__file__).resolve().parent.parent / ".corpus" / "liger_kernel-0.8.5-py3-none-any.whl"
LIGER_CONFIG = """version: 1
targets:
  - name: liger_rms_norm
    files: ["bench/wrap.py", "src/liger_kernel/ops/rms_norm.py"]
    language: triton
    entry_point: bench/wrap.py::run
    definition:
      op_type: rmsnorm
      axes: {M: {type: var}, N: {type: const, value: 4096}}
      inputs: {x: {shape: [M, N], dtype: bfloat16}, w: {shape: [N], dtype: bfloat16}}
      outputs: {y: {shape: [M, N], dtype: bfloat16}}
      reference: |
        import torch
        def run(x, w):
            xf = x.float()
            return ((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w).to(x.dtype)
    workloads: [{M: 1024}]
    cpu_workloads: [{M: 4}]
    tolerances: {atol: 3.0e-2, rtol: 3.0e-2}
"""
# The candidate: Liger's own file, whose forward then doubles its output (the canary).
DOUBLED = "{head}\n_forward = rms_norm_forward\n\n\ndef rms_norm_forward(*a):\n    r = _forward(*a)\n    return (r[0] * 2, *r[1:])\n"


@pytest.mark.gpu
def test_upstream_liger_with_its_wheel_installed_runs_the_candidate_on_the_gpu(tmp_path: Path) -> None:
    """Liger-Kernel 0.8.5 as published (src layout; the wheel installed on the runner, as a maintainer
    has it): the wrapper imports ``liger_kernel.ops.rms_norm`` as the repository does. The head passes;
    a candidate whose kernel file exits, or whose forward doubles its output, fails: the candidate's file
    ran on the GPU, not the installed one."""
    import zipfile

    assert LIGER_WHEEL.exists(), f"{LIGER_WHEEL} is missing: carry .corpus/ (benchmarks/fetch_corpus.sh)"
    repo = tmp_path / "repo"
    with zipfile.ZipFile(LIGER_WHEEL) as z:
        for n in z.namelist():
            if n.startswith("liger_kernel/") and n.endswith(".py"):
                _write(repo, {f"src/{n}": z.read(n).decode()})
    _write(repo, {"bench/wrap.py": "from liger_kernel.ops.rms_norm import rms_norm_forward\n\n\ndef run(x, w):\n"
                                   "    return rms_norm_forward(x, w, 1e-6, 0.0, 'llama', None)[0]\n"})
    py = _venv(tmp_path, "installed", wheel=LIGER_WHEEL)
    out = _run_in(py, repo, tmp_path, LIGER_CONFIG, {"head": None, "exits": EXITS, "doubled": DOUBLED}, device="cuda",
                  kernel="src/liger_kernel/ops/rms_norm.py", module="liger_kernel.ops.rms_norm")
    assert out["head"][0] == "PASSED" and out["head"][2] == [], out
    assert out["exits"][0] == "COMPILE_ERROR" and "SystemExit" in str(out["exits"][1]), out
    assert out["doubled"][0] == "INCORRECT_NUMERICAL", out


def test_the_childs_warnings_cannot_start_a_line_of_the_report() -> None:
    """A warning carries module paths the candidate's process chose; with a line break in one, the
    text after it would start a line of report.md, such as the 'Tolerances: ' line the bot reads."""
    from kernelpro.runner.evaluator import child_warnings

    forged = "IMPORT_MISMATCH: x.py\nTolerances: out atol=1e9 rtol=1e9."
    got = child_warnings({"warnings": [forged] * 20})
    assert len(got) == 8 and all("\n" not in w and "\r" not in w for w in got)
    assert got[0] == "IMPORT_MISMATCH: x.py Tolerances: out atol=1e9 rtol=1e9."
    assert child_warnings({"warnings": "not a list"}) == () and child_warnings({}) == ()
    assert len(child_warnings({"warnings": ["y" * 5000]})[0]) == 600
