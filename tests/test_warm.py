"""A target's warm fork server (issue 22): children are forked from a server that has also imported
the target's third-party modules, once; the candidate's own modules are never served from it; a
preload that initialises CUDA sends children elsewhere; the pull request's code is never preloaded.

The third-party package is a fake installed on PYTHONPATH (a folder under tmp) whose import is slow
and records who imported it: the server runs without HOME (the scrubbed environment), each child with
HOME set to its work folder, and a child is Landlocked read-only outside that folder anyway, so the
record holds the server's imports only.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kernelpro.runner import forkserver, preload
from kernelpro.runner.config import parse_config
from kernelpro.runner.evaluator import EvalSettings, Outcome, evaluate
from kernelpro.runner.target import Target
from kernelpro.runner.trace import Solution, SourceFile

SLOW_S = 1.5
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
# Imported by the server only if at all: a child has HOME, the server has none.
HELPER = f"""
import os, time
time.sleep({SLOW_S})
if "HOME" not in os.environ:
    with open({{log!r}}, "a") as f:
        f.write("server\\n")
FACTOR = {{factor}}
"""
KERNEL = "import helperpkg\n\ndef run(x):\n    return x * helperpkg.FACTOR\n"


def _stop_servers() -> None:
    forkserver.cool()
    if forkserver._SERVER is not None:
        forkserver._SERVER.close()
        forkserver._SERVER = None


@pytest.fixture(autouse=True)
def _servers_of_this_test() -> Iterator[None]:
    """A server's sys.path is the PYTHONPATH it started with: each test's fake packages need their own."""
    _stop_servers()
    yield
    _stop_servers()


def _setup(tmp: Path, monkeypatch: pytest.MonkeyPatch, kernel: str = KERNEL,
           extra: dict[str, str] | None = None) -> tuple[Target, Path, Path]:
    site, repo = tmp / "site", tmp / "repo"
    log = tmp / "imports.log"
    files = {site / "helperpkg" / "__init__.py": HELPER.format(log=str(log), factor=2), repo / "kern.py": kernel,
             **{repo / k: v for k, v in (extra or {}).items()}}
    for p, text in files.items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    # Before the runner's own PYTHONPATH, if it has one (the GPU machine's kernelpro is in /tmp/site).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.syspath_prepend(str(site))  # as a runner that has it installed: children may read it
    text = (f"version: 1\ntargets:\n  - name: k\n    files: {json.dumps(['kern.py'])}\n    language: python\n"
            f"    entry_point: kern.py::run\n{DEFINITION}")
    return parse_config(text, ".kernelpro.yml", repo).targets[0], repo, log


def _evaluate(t: Target, repo: Path, sol: Solution, tmp: Path) -> Outcome:
    es = EvalSettings(device="cpu", trials=1, reps_cpu=1, rotate=1, timeout_s=90, cache_dir=tmp / "cache",
                      context=t.context(repo))
    return evaluate(t.definition, sol, t.workloads, t.tolerance, es)


def _warm(t: Target, repo: Path) -> dict:
    sol = t.solution(repo)
    plan = preload.start(t.name, sol, t.context(repo), "cpu", blocked=(str(repo),))
    assert plan.modules == ("helperpkg",) and plan.tree == ("kern",), plan
    server = forkserver._WARM[-1].server
    ready = server.wait_ready(120)
    assert ready is not None, "the warm server never reported its preload"
    return ready


def test_the_preload_happens_once_in_the_server_not_per_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t, repo, log = _setup(tmp_path, monkeypatch)
    ready = _warm(t, repo)
    assert ready["preloaded"] == ["helperpkg"] and ready["cuda"] is None, ready
    outcomes = [_evaluate(t, repo, t.solution(repo), tmp_path) for _ in range(2)]
    for o in outcomes:
        assert o.passed, o.log
        assert o.environment["sandbox"]["spawn"] == "forked from the warm server of target k (preloaded: helperpkg)"
        # The slow import is the server's: a child that imported helperpkg itself would take SLOW_S.
        assert o.build_seconds < SLOW_S / 2, o.build_seconds
    assert log.read_text().splitlines() == ["server"]


# A module of the installed package that its own code imports only when a function runs: what
# liger_kernel's ``torch.compiler.disable`` at import does to torch._dynamo (no import statement says so).
LAZY = f"""
import os, time
time.sleep({SLOW_S})
if "HOME" not in os.environ:
    with open({{log!r}}, "a") as f:
        f.write("server lazy\\n")
VALUE = 2
"""
LAZY_KERNEL = "import helperpkg\n\nFACTOR = helperpkg.load()\n\n\ndef run(x):\n    return x * FACTOR\n"


def test_what_the_pull_requests_build_imported_besides_the_plan_grows_the_warm_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t, repo, log = _setup(tmp_path, monkeypatch, kernel=LAZY_KERNEL)
    site = tmp_path / "site" / "helperpkg"
    (site / "lazy.py").write_text(LAZY.format(log=str(log)))
    with (site / "__init__.py").open("a") as f:
        f.write("\n\ndef load():\n    from helperpkg.lazy import VALUE\n    return VALUE\n")
    _warm(t, repo)
    sol, context = t.solution(repo), t.context(repo)
    first = _evaluate(t, repo, sol, tmp_path)
    assert first.passed, first.log
    assert first.build_seconds >= SLOW_S and "helperpkg.lazy" in first.imported, (first.build_seconds, first.imported)
    assert "kern" not in first.imported  # the tree's own modules are never reported
    # Only modules of the packages the plan preloads, never the tree's: nothing the syntax did not allow.
    assert preload.more(sol, context, ["kern.x", "os.path", "helperpkg.lazy", "helperpkg"]) == ("helperpkg.lazy",)
    server = forkserver._WARM[-1].server
    assert forkserver.grow(preload.more(sol, context, first.imported))  # the same server, between two forks
    ready = server.wait_grown(120)
    assert ready is not None and ready["preloaded"] == ["helperpkg", "helperpkg.lazy"], ready
    assert ready["grown"] == ["helperpkg.lazy"] and forkserver._WARM[-1].server is server
    second = _evaluate(t, repo, sol, tmp_path)
    assert second.passed, second.log
    assert second.build_seconds < SLOW_S / 2 and second.imported == (), (second.build_seconds, second.imported)
    assert second.environment["sandbox"]["spawn"] == ("forked from the warm server of target k (preloaded: helperpkg; "
                                                      "and 1 more modules the pull request's kernel's build imported)")
    assert log.read_text().splitlines() == ["server", "server lazy"]


def test_a_search_grows_the_warm_server_by_its_baselines_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through `kernelpro optimize`: started before the baseline with the plan, and grown after it by
    what the baseline's build imported besides."""
    from test_optimize import _kernel_repo

    from kernelpro.cli import main
    from kernelpro.runner import optimize as loop

    t, _, log = _setup(tmp_path, monkeypatch, kernel=LAZY_KERNEL)
    site = tmp_path / "site" / "helperpkg"
    (site / "lazy.py").write_text(LAZY.format(log=str(log)))
    with (site / "__init__.py").open("a") as f:
        f.write("\n\ndef load():\n    from helperpkg.lazy import VALUE\n    return VALUE\n")
    grown: list[tuple[str, ...]] = []
    real = loop.grow_warm
    monkeypatch.setattr(loop, "grow_warm", lambda extra: (grown.append(tuple(extra)), real(extra))[1])
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    config = (f"version: 1\ntargets:\n  - name: k\n    files: [k.py]\n    language: python\n"
              f"    entry_point: k.py::run\n{DEFINITION}")
    root = _kernel_repo(tmp_path, LAZY_KERNEL, config)
    assert main(["optimize", "--repo", str(root), "--base", "HEAD~1", "--head", "HEAD", "--out", str(tmp_path / "o"),
                 "--budget", "1"]) == 0
    assert grown == [("helperpkg.lazy",)]
    assert not forkserver.warm_running()
    # One evaluation, said so (fla softmax's H200 report of session 26 read "1 evaluations").
    assert ", 1 evaluation, " in (tmp_path / "o" / "k" / "report.md").read_text()


def test_a_grown_import_that_initialises_cuda_ends_the_servers_forks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forked CUDA context is unusable: once the server's growth initialised CUDA (here a module that
    makes torch say so, as a real one would by touching the GPU), it forks nothing more, even for a
    request sent before its report arrived, and the child starts from the plain server instead."""
    t, repo, _ = _setup(tmp_path, monkeypatch)
    (tmp_path / "site" / "helperpkg" / "touch.py").write_text("import torch\ntorch.cuda.is_initialized = lambda: True\n")
    _warm(t, repo)
    server = forkserver._WARM[-1].server
    assert forkserver.grow(["helperpkg.touch"])
    ready = server.wait_grown(120)
    assert ready is not None and ready["cuda"] == "torch initialised CUDA", ready
    with pytest.raises(OSError, match="an import initialised CUDA in this server"):
        server.spawn([], tmp_path, {}, False, probe=True)
    o = _evaluate(t, repo, t.solution(repo), tmp_path)
    assert o.passed, o.log
    spawn = o.environment["sandbox"]["spawn"]
    assert "preloading helperpkg, helperpkg.touch initialised CUDA" in spawn, spawn


def test_a_candidate_that_defines_a_preloaded_package_runs_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t, repo, _ = _setup(tmp_path, monkeypatch)
    _warm(t, repo)
    sol = t.solution(repo)
    # The candidate brings its own helperpkg, whose factor is wrong: it must run (and be refused),
    # not the installed copy the warm server holds (which would pass).
    own = Solution(sol.name + "-c", sol.definition, "test", sol.spec,
                   (*sol.sources, SourceFile("helperpkg/__init__.py", "FACTOR = 3\n")))
    o = _evaluate(t, repo, own, tmp_path)
    assert not o.passed and o.status == "INCORRECT_NUMERICAL", (o.status, o.log[-500:])
    spawn = o.environment["sandbox"]["spawn"]
    assert "has imported helperpkg, which this candidate defines" in spawn and "warm server of target k" in spawn, spawn


def test_an_edit_to_a_tree_module_the_installed_copy_also_has_is_what_runs(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # The target's own package (helperpkg/ops.py in the repository) is installed too; the server
    # must not preload it, and the candidate's edit of it is what its child runs.
    kernel = "import helperpkg.ops\nimport json\n\ndef run(x):\n    return x * helperpkg.ops.factor()\n"
    t, repo, log = _setup(tmp_path, monkeypatch, kernel, {"helperpkg/__init__.py": "", "helperpkg/ops.py": "def factor():\n    return 2\n"})
    t = parse_config((f"version: 1\ntargets:\n  - name: k\n    files: {json.dumps(['kern.py', 'helperpkg/ops.py'])}\n"
                      f"    language: python\n    entry_point: kern.py::run\n{DEFINITION}"), ".kernelpro.yml", repo).targets[0]
    sol = t.solution(repo)
    plan = preload.start(t.name, sol, t.context(repo), "cpu")
    assert "helperpkg" in plan.tree and not any(m.partition(".")[0] == "helperpkg" for m in plan.modules), plan
    assert plan.modules == ("json",), plan
    assert forkserver._WARM[-1].server.wait_ready(120) is not None
    edited = Solution(sol.name + "-c", sol.definition, "test", sol.spec,
                      tuple(SourceFile(f.path, "def factor():\n    return 3\n" if f.path == "helperpkg/ops.py" else f.content)
                            for f in sol.sources))
    o = _evaluate(t, repo, edited, tmp_path)
    assert o.status == "INCORRECT_NUMERICAL", (o.status, o.log[-500:])
    assert o.environment["sandbox"]["spawn"] == "forked from the warm server of target k (preloaded: json)"
    assert _evaluate(t, repo, sol, tmp_path).passed
    assert not log.exists()  # the installed helperpkg was never imported by the server


def test_a_preload_that_asks_for_the_temp_folder_leaves_each_child_its_own(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Python caches its temp folder on first use (tempfile.tempdir). A preloaded package that asked
    for it (peft, torch.distributed do) fixed it to the server's, /tmp, where no child may write: on
    the H200 every Liger candidate forked from the warm server failed in Triton's first compile
    (PermissionError in tempfile.mkdtemp, session 16) while the pull request's kernel, run before
    the warm server was up, passed. Each child must use its own TMPDIR again."""
    kernel = ("import helperpkg\n\ndef run(x):\n    import tempfile\n"
              "    with tempfile.TemporaryDirectory() as d:\n        open(d + '/probe', 'w').write('x')\n"
              "    return x * helperpkg.FACTOR\n")
    t, repo, _ = _setup(tmp_path, monkeypatch, kernel)
    helper = tmp_path / "site" / "helperpkg" / "__init__.py"
    helper.write_text("import tempfile\ntempfile.gettempdir()\n" + helper.read_text())
    _warm(t, repo)
    o = _evaluate(t, repo, t.solution(repo), tmp_path)
    assert o.environment["sandbox"]["spawn"].startswith("forked from the warm server"), o.environment["sandbox"]
    assert o.passed, (o.status, o.log[-800:])


def test_a_preload_that_loads_the_cuda_driver_forks_gpu_children_only_after_a_probe_used_the_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A preload that mapped the CUDA driver (Triton 3.6's import does, on the H200: session 11) is not
    refused on sight: mapped is not initialised. One probe child forked after it runs a kernel, and only
    its failure sends GPU children elsewhere. Here (no GPU) the probe fails, as a fork after an
    initialised driver would, and the report says why; a CPU child still forks warm."""
    # What a driver load looks like from /proc/self/maps: a mapped file named libcuda.so.1.
    kernel = "import cudapkg\n\ndef run(x):\n    return x * 2\n"
    t, repo, _ = _setup(tmp_path, monkeypatch, kernel)
    fake = tmp_path / "site" / "lib" / "libcuda.so.1"  # readable by a child, as the real one is
    fake.parent.mkdir()
    fake.write_bytes(b"\0" * 4096)
    cudapkg = f"import mmap\n_f = open({str(fake)!r}, 'rb')\nMAP = mmap.mmap(_f.fileno(), 0, prot=mmap.PROT_READ)\n"
    (tmp_path / "site" / "cudapkg.py").write_text(cudapkg)
    sol = t.solution(repo)
    assert preload.start(t.name, sol, t.context(repo), "cpu").modules == ("cudapkg",)
    server = forkserver._WARM[-1].server
    ready = server.wait_ready(120)
    assert ready is not None and ready["driver"] == "libcuda.so.1" and ready["cuda"] is None, ready
    o = _evaluate(t, repo, sol, tmp_path)
    assert o.passed, (o.environment["sandbox"], o.log)
    assert o.environment["sandbox"]["spawn"] == "forked from the warm server of target k (preloaded: cudapkg)"
    got, why = forkserver.warm_server(("kern",), tmp_path, isolate=False, cuda=True)
    assert got is None and "loaded the CUDA driver (libcuda.so.1)" in why and "could not use the GPU" in why, why
    assert server.cuda, "the probe's answer is kept: one probe per server"
    assert forkserver.warm_server(("kern",), tmp_path, isolate=False, cuda=False)[0] is server



def test_while_it_grows_the_warm_server_forks_nothing_and_its_cuda_probe_is_redone_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A growth may initialise the driver without torch knowing (cudaGetDeviceCount at import): a child
    forked while the server still imports, or a GPU child forked on the probe of the server before it
    grew, could find CUDA unusable and fail as the candidate's fault. So none is forked meanwhile (a
    child waits for the growth, here longer than it may, WARM_WAIT_S), and the probe is asked again of
    the grown server."""
    t, repo, _ = _setup(tmp_path, monkeypatch)
    (tmp_path / "site" / "helperpkg" / "slow.py").write_text("import time\ntime.sleep(3)\n")
    _warm(t, repo)
    server = forkserver._WARM[-1].server
    server.cuda = ""  # as after a probe child of the server before growth used the GPU
    monkeypatch.setattr(forkserver, "WARM_WAIT_S", 0.3)
    assert forkserver.grow(["helperpkg.slow"])
    got, why = forkserver.warm_server(("kern",), tmp_path, isolate=False)
    assert got is None and "was still importing what the pull request's kernel's build imported" in why, why
    assert server.waited_in_vain
    assert server.wait_grown(120) is not None and not server.growing
    assert server.cuda is None, "the grown server's CUDA is probed again before a GPU child forks from it"
    assert forkserver.warm_server(("kern",), tmp_path, isolate=False)[0] is server


def test_the_pull_requests_kernel_waits_for_the_preload_and_forks_warm_like_the_candidates(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pull request's kernel is evaluated while the warm server still imports (runner/optimize.py
    starts it just before). It was a fresh interpreter, every candidate after it a warm fork: on the
    H200 Liger DyT's timed 0.113 ms that way and 0.045 ms forked warm seconds later, so every candidate
    of the search looked 2.5x faster (session 26). It now waits for the preload and forks from it, and
    the journal's spawn line says how long it waited; so does a child that comes while the server grows."""
    t, repo, log = _setup(tmp_path, monkeypatch)
    sol = t.solution(repo)
    preload.start(t.name, sol, t.context(repo), "cpu", blocked=(str(repo),))
    server = forkserver._WARM[-1].server
    assert server.ready is None, "the preload sleeps SLOW_S: the first evaluation starts before it is done"
    o = _evaluate(t, repo, sol, tmp_path)
    assert o.passed, o.log
    spawn = o.environment["sandbox"]["spawn"]
    assert spawn.startswith("forked from the warm server of target k (preloaded: helperpkg, after waiting "), spawn
    assert o.build_seconds < SLOW_S / 2, "the child imported helperpkg itself"
    assert log.read_text().splitlines() == ["server"]
    (tmp_path / "site" / "helperpkg" / "slow.py").write_text("import time\ntime.sleep(1)\n")
    assert forkserver.grow(["helperpkg.slow"])
    o = _evaluate(t, repo, sol, tmp_path)
    assert o.passed and ", after waiting " in o.environment["sandbox"]["spawn"], o.environment["sandbox"]
    assert "1 more modules the pull request's kernel's build imported" in o.environment["sandbox"]["spawn"]


def test_a_preload_that_outlasts_the_wait_is_waited_for_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package whose import takes longer than WARM_WAIT_S costs the wait once: the next child starts
    at once, from the plain server, and says why."""
    t, repo, _ = _setup(tmp_path, monkeypatch)
    monkeypatch.setattr(forkserver, "WARM_WAIT_S", 0.2)
    sol = t.solution(repo)
    preload.start(t.name, sol, t.context(repo), "cpu", blocked=(str(repo),))
    for _ in range(2):
        got, why = forkserver.warm_server(("kern",), tmp_path, isolate=False)
        assert got is None and why == "the warm server of target k had not finished its preload in 0 s", why
    assert forkserver._WARM[-1].server.waited_in_vain

def test_the_pull_requests_own_code_is_never_preloaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # prcode.py lies in the checkout but outside the candidate's tree (another top-level module of the
    # repository): imported by the unconfined server it would be the pull request's code running there.
    marker = tmp_path / "ran-in-server"
    kernel = "import prcode\n\ndef run(x):\n    return x * 2\n"
    prcode = f"import os\nif 'HOME' not in os.environ:\n    open({str(marker)!r}, 'w').write('ran')\n"
    t, repo, _ = _setup(tmp_path, monkeypatch, kernel, {"prcode.py": prcode})
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path / 'site'}:{repo}")
    monkeypatch.syspath_prepend(str(repo))
    sol = t.solution(repo)
    assert preload.start(t.name, sol, t.context(repo), "cpu", blocked=(str(repo),)).modules == ("prcode",)
    ready = forkserver._WARM[-1].server.wait_ready(120)
    assert ready is not None and "prcode" in ready["failed"] and "pull request's own code" in ready["failed"]["prcode"]
    assert not marker.exists()
    assert _evaluate(t, repo, sol, tmp_path).passed  # the confined child imports it itself



def test_the_warm_server_never_imports_from_its_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server runs `python -c` from '/', so '' on its path was '/': a name the pull request chose
    (``import tmp.x``) imported any file another process had put in /tmp, run in the server, unconfined
    (a red-team probe, session 25). Its preload imports installed packages only."""
    t, repo, _ = _setup(tmp_path, monkeypatch)
    name = f"kp_warm_probe_{os.getpid()}"
    planted, ran = Path("/tmp") / f"{name}.py", tmp_path / "ran"
    planted.write_text(f"open({str(ran)!r}, 'w').write('ran')\n")
    try:
        _warm(t, repo)
        server = forkserver._WARM[-1].server
        assert forkserver.grow([f"tmp.{name}"])
        ready = server.wait_grown(120)
        assert ready is not None and f"tmp.{name}" in ready["failed"], ready
        assert not ran.exists(), "a file of /tmp was run in the warm server"
        o = _evaluate(t, repo, t.solution(repo), tmp_path)  # and its children still import their own folder
        assert o.passed, o.log
    finally:
        planted.unlink()

def test_a_main_module_is_never_preloaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The unconfined server imports modules, it never runs programs: ``unittest.__main__`` starts a test
    discovery when imported. Neither the plan (an import statement of the pull request) nor the growth
    (a name its baseline's child reported) asks for one."""
    kernel = "import unittest.__main__\nimport helperpkg\n\ndef run(x):\n    return x * helperpkg.FACTOR\n"
    t, repo, _ = _setup(tmp_path, monkeypatch, kernel)
    sol, context = t.solution(repo), t.context(repo)
    assert preload.plan(sol, context).modules == ("helperpkg",)
    assert preload.more(sol, context, ["helperpkg.__main__", "helperpkg.sub.__main__", "helperpkg.sub"]) == ("helperpkg.sub",)


def test_a_cooled_warm_server_is_gone_and_children_fork_from_the_plain_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t, repo, _ = _setup(tmp_path, monkeypatch)
    _warm(t, repo)
    server = forkserver._WARM[-1].server
    forkserver.cool()
    assert not forkserver._WARM and not server.alive()
    o = _evaluate(t, repo, t.solution(repo), tmp_path)
    assert o.passed and o.environment["sandbox"]["spawn"] == "forked from the fork server"


@pytest.mark.parametrize("switch", ["0", "1"])
def test_the_benchmarks_before_row_starts_no_warm_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         switch: str) -> None:
    """KERNELPRO_WARM_SERVER=0, read once into Settings and carried by EvalSettings: a search through
    `kernelpro optimize` never starts the target's warm server (with it set to 1, it does)."""
    from test_optimize import _kernel_repo

    from kernelpro.cli import main
    from kernelpro.runner import optimize as loop
    from kernelpro.settings import Settings

    assert Settings.from_env({"KERNELPRO_WARM_SERVER": switch}).warm_server is (switch == "1")
    started: list[str] = []
    real = loop.start_warm
    monkeypatch.setattr(loop, "start_warm", lambda label, *a, **k: (started.append(label), real(label, *a, **k))[1])
    monkeypatch.setenv("KERNELPRO_DEVICE", "cpu")
    monkeypatch.setenv("KERNELPRO_PROGRESS", "0")
    monkeypatch.setenv("KERNELPRO_WARM_SERVER", switch)
    root = _kernel_repo(tmp_path, "import torch\n\ndef add(a, b):\n    return a + b\n")
    assert main(["optimize", "--repo", str(root), "--base", "HEAD~1", "--head", "HEAD", "--out", str(tmp_path / "o"),
                 "--budget", "1"]) == 0
    assert started == ([] if switch == "0" else ["add"])
    assert not forkserver.warm_running()  # and none outlives the run


TRITON_KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def run(x):
    y = torch.empty_like(x)
    _scale[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
'''


@pytest.mark.gpu
def test_on_the_gpu_a_triton_target_forks_from_its_warm_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """H200: importing torch, triton and triton.language initialises no CUDA (Triton 3.6 maps the driver:
    session 11), so after one probe child ran a kernel, candidates fork warm and verify on the GPU;
    liger_kernel's import (where installed) says which path it takes."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU (run on the GPU machine)")
    t, repo, _ = _setup(tmp_path, monkeypatch, TRITON_KERNEL)
    sol = t.solution(repo)
    plan = preload.start(t.name, sol, t.context(repo), "cuda", blocked=(str(repo),))
    assert plan.modules == ("torch", "triton", "triton.language"), plan
    ready = forkserver._WARM[-1].server.wait_ready(300)
    assert ready is not None and ready["cuda"] is None and not ready["failed"], ready
    print("warm server's preload:", ready)
    es = EvalSettings(device="cuda", trials=1, timeout_s=120, cache_dir=tmp_path / "cache", context=t.context(repo))
    outcomes = [evaluate(t.definition, sol, t.workloads, t.tolerance, es) for _ in range(2)]
    for o in outcomes:
        assert o.passed, o.log
        assert o.environment["sandbox"]["spawn"].startswith("forked from the warm server of target k"), o.environment
    print("warm build s:", [o.build_seconds for o in outcomes], "phases:", [dict(o.phases) for o in outcomes])
    if importlib.util.find_spec("liger_kernel") is not None:
        wrapper = "import torch\nfrom liger_kernel.ops.swiglu import LigerSiLUMulFunction\n\ndef run(x):\n    return x * 2\n"
        t2, repo2, _ = _setup(tmp_path / "liger", monkeypatch, wrapper)
        sol2 = t2.solution(repo2)
        assert "liger_kernel.ops.swiglu" in preload.start(t2.name, sol2, t2.context(repo2), "cuda").modules
        ready = forkserver._WARM[-1].server.wait_ready(300)
        assert ready is not None and not ready["failed"], ready
        o = evaluate(t2.definition, sol2, t2.workloads, t2.tolerance, replace(es, cache_dir=tmp_path / "c2",
                                                                              context=t2.context(repo2)))
        assert o.passed, o.log
        print("liger_kernel:", o.environment["sandbox"]["spawn"], "build s:", o.build_seconds, "preload:", ready)
