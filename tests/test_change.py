"""bot/change.py against real git repositories made in tmp_path and text fixtures."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import git
import pytest
import yaml

from kernelpro.bot.change import (
    ChangeError,
    Kernel,
    changed_files,
    changed_kernels,
    config_snippet,
    find_kernels,
    read_file,
)

ACTOR = git.Actor("Test", "test@example.com")


def commit(repo: git.Repo, message: str, files: dict[str, str | None]) -> git.Commit:
    """Write (or, for None, delete) files in the work tree and commit them."""
    root = Path(repo.working_tree_dir or ".")
    for rel, text in files.items():
        p = root / rel
        if text is None:
            repo.index.remove([rel], working_tree=True)
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        repo.index.add([rel])
    return repo.index.commit(message, author=ACTOR, committer=ACTOR)


def dedent(s: str) -> str:
    return textwrap.dedent(s).lstrip("\n")


ADD_PY = dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


    @triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"])
    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


    def add(x, y):
        out = x.new_empty(x.shape)
        add_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
        return out
    """
)

RELU_CU = dedent(
    """
    #include <cuda_runtime.h>

    __global__ void relu(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
    }

    __global__ void square(const float* x, float* y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = x[i] * x[i];
    }
    """
)


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    """main: kernels/add.py, kernels/relu.cu, README.md, old.txt, to_move.py; then branch
    'feature' forks, and main moves on afterwards (like a fork whose base branch advanced)."""
    r = git.Repo.init(tmp_path / "repo", initial_branch="main")
    with r.config_writer() as cw:
        cw.set_value("user", "name", "Test")
        cw.set_value("user", "email", "test@example.com")
    commit(
        r,
        "initial",
        {
            "kernels/add.py": ADD_PY,
            "kernels/relu.cu": RELU_CU,
            "README.md": "# demo\n",
            "old.txt": "to be deleted\n",
            "to_move.py": ADD_PY.replace("add_kernel", "moved_kernel"),
        },
    )
    fork_point = r.head.commit
    # main moves on after the fork: these changes must not count as the PR's.
    commit(r, "main moves on", {"main_only.py": ADD_PY.replace("add_kernel", "main_kernel")})
    commit(r, "main edits relu", {"kernels/relu.cu": RELU_CU.replace("0.f ? x[i]", "0.0f ? x[i]")})
    feature = r.create_head("feature", fork_point)
    feature.checkout()
    return r


def root(r: git.Repo) -> Path:
    return Path(r.working_tree_dir or ".")


# --------------------------------------------------------------------------- changed_files


def test_changed_files_three_dot_add_modify_rename_delete(repo: git.Repo) -> None:
    commit(
        repo,
        "add + modify",
        {"kernels/new.py": ADD_PY.replace("add_kernel", "new_kernel"), "README.md": "# demo 2\n"},
    )
    repo.git.mv("to_move.py", "kernels/moved.py")
    repo.index.commit("rename", author=ACTOR, committer=ACTOR)
    commit(repo, "delete", {"old.txt": None})
    files = changed_files(root(repo), "main", "feature")
    # main_only.py and kernels/relu.cu changed on main after the fork: not the PR's changes.
    assert files == ["README.md", "kernels/moved.py", "kernels/new.py"]


def test_changed_files_accepts_shas_and_odd_paths(repo: git.Repo) -> None:
    head = commit(repo, "odd names", {"dir with space/ünï.cu": RELU_CU, 'a"b.py': "x = 1\n"})
    base_sha = repo.heads.main.commit.hexsha
    assert changed_files(root(repo), base_sha, head.hexsha) == ['a"b.py', "dir with space/ünï.cu"]


def test_changed_files_no_changes(repo: git.Repo) -> None:
    assert changed_files(root(repo), "main", "feature") == []


def test_unknown_ref_message_names_ref_and_fix(repo: git.Repo) -> None:
    with pytest.raises(ChangeError) as e:
        changed_files(root(repo), "origin/nope", "feature")
    msg = str(e.value)
    assert "unknown ref 'origin/nope'" in msg
    assert "git fetch origin origin/nope" in msg and "commit SHA" in msg
    assert str(root(repo)) in msg
    assert isinstance(e.value, ValueError)
    with pytest.raises(ChangeError, match="unknown ref 'deadbeef"):
        changed_files(root(repo), "main", "deadbeef" * 5)


@pytest.mark.parametrize("ref", ["--output=/tmp/x", "", "main feature", "a\nb"])
def test_refs_that_look_like_options_are_refused(repo: git.Repo, ref: str) -> None:
    with pytest.raises(ChangeError, match="invalid ref"):
        changed_files(root(repo), ref, "feature")


def test_not_a_git_repository(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    with pytest.raises(ChangeError, match="is not a git repository"):
        changed_files(tmp_path / "plain", "main", "HEAD")
    with pytest.raises(ChangeError, match="does not exist"):
        changed_files(tmp_path / "missing", "main", "HEAD")


def test_unrelated_histories(repo: git.Repo) -> None:
    orphan = git.Commit.create_from_tree(
        repo, repo.head.commit.tree, "orphan", parent_commits=[], head=False
    )
    with pytest.raises(ChangeError, match="no common ancestor.*fetch-depth: 0"):
        changed_files(root(repo), "main", orphan.hexsha)


# --------------------------------------------------------------------------- read_file


def test_read_file(repo: git.Repo) -> None:
    commit(repo, "edit", {"README.md": "# changed\n"})
    r = root(repo)
    assert read_file(r, "feature", "README.md") == "# changed\n"
    assert read_file(r, "main", "README.md") == "# demo\n"
    assert read_file(r, "main", "./kernels/relu.cu") is not None
    assert read_file(r, "main", "nope.txt") is None
    assert read_file(r, "feature", "main_only.py") is None  # only on main
    assert read_file(r, "main", "kernels") is None  # a directory
    assert read_file(r, "main", "../etc/passwd") is None
    with pytest.raises(ChangeError, match="unknown ref"):
        read_file(r, "no-such-branch", "README.md")


# --------------------------------------------------------------------------- changed_kernels


def names(kernels: list[Kernel]) -> list[tuple[str, str]]:
    return [(k.path, k.name) for k in kernels]


def test_changed_kernels_new_file_reports_all(repo: git.Repo) -> None:
    commit(repo, "new", {"k/new.py": ADD_PY})
    ks = changed_kernels(root(repo), "main", "feature")
    assert names(ks) == [("k/new.py", "add_kernel"), ("k/new.py", "scale_kernel")]
    assert all(k.language == "triton" for k in ks)
    assert ks[0].line == 6  # the def line, below the decorator


def test_changed_kernels_only_the_changed_triton_kernel(repo: git.Repo) -> None:
    edited = ADD_PY.replace("* 2, mask", "* 3, mask")  # scale_kernel's body
    edited = edited.replace(
        "pid = tl.program_id(0)", "pid = tl.program_id(0)  # a comment"
    )  # add_kernel: comment only
    edited = "# header comment\n\n" + edited  # moves every line
    commit(repo, "edit", {"kernels/add.py": edited})
    assert names(changed_kernels(root(repo), "main", "feature")) == [
        ("kernels/add.py", "scale_kernel")
    ]


def test_changed_kernels_decorator_change_counts(repo: git.Repo) -> None:
    commit(repo, "tune", {"kernels/add.py": ADD_PY.replace("num_warps=4", "num_warps=8")})
    assert names(changed_kernels(root(repo), "main", "feature")) == [
        ("kernels/add.py", "scale_kernel")
    ]


def test_changed_kernels_wrapper_only_change_reports_none(repo: git.Repo) -> None:
    commit(repo, "wrapper", {"kernels/add.py": ADD_PY.replace("BLOCK=1024)", "BLOCK=512)")})
    assert changed_files(root(repo), "main", "feature") == ["kernels/add.py"]
    assert changed_kernels(root(repo), "main", "feature") == []


def test_changed_kernels_new_kernel_in_existing_file(repo: git.Repo) -> None:
    extra = ADD_PY + "\n\n@triton.jit\ndef extra_kernel(x):\n    pass\n"
    commit(repo, "extra", {"kernels/add.py": extra})
    assert names(changed_kernels(root(repo), "main", "feature")) == [
        ("kernels/add.py", "extra_kernel")
    ]


def test_changed_kernels_rename(repo: git.Repo) -> None:
    repo.git.mv("to_move.py", "kernels/moved.py")
    repo.index.commit("pure rename", author=ACTOR, committer=ACTOR)
    r = root(repo)
    assert changed_files(r, "main", "feature") == ["kernels/moved.py"]
    assert changed_kernels(r, "main", "feature") == []  # same kernels as at the old path
    text = (r / "kernels/moved.py").read_text().replace("* 2, mask", "* 4, mask")
    commit(repo, "rename + edit", {"kernels/moved.py": text})
    assert names(changed_kernels(r, "main", "feature")) == [("kernels/moved.py", "scale_kernel")]


def test_changed_kernels_cuda_by_body(repo: git.Repo) -> None:
    commit(repo, "cu", {"kernels/relu.cu": RELU_CU.replace("x[i] * x[i]", "__fmul_rn(x[i], x[i])")})
    ks = changed_kernels(root(repo), "main", "feature")
    assert names(ks) == [("kernels/relu.cu", "square")]
    assert ks[0].language == "cuda" and ks[0].line == 8


def test_changed_kernels_ignores_base_only_changes_and_deletions(repo: git.Repo) -> None:
    # relu.cu and main_only.py changed on main after the fork; the PR deletes to_move.py.
    commit(repo, "delete", {"to_move.py": None})
    assert changed_kernels(root(repo), "main", "feature") == []


def test_changed_kernels_skips_binary_and_other_files(repo: git.Repo) -> None:
    r = root(repo)
    (r / "blob.cu").write_bytes(b"\0\x01__global__ void k() {}")
    repo.index.add(["blob.cu"])
    commit(
        repo,
        "misc",
        {"notes.txt": "@triton.jit\ndef k(): pass\n", "broken.py": "@triton.jit\ndef k(:\n"},
    )
    assert changed_kernels(r, "main", "feature") == []


# --------------------------------------------------------------------------- find_kernels: Triton


def triton_names(text: str) -> list[str]:
    return [k.name for k in find_kernels("m.py", dedent(text))]


def test_triton_decorator_forms() -> None:
    src = """
        import triton
        import triton as tr
        import triton.language as tl
        from triton import jit as tjit, autotune, heuristics
        from triton.runtime.jit import jit as runtime_jit
        from triton.experimental import gluon

        @triton.jit
        def plain(x): pass

        @triton.jit(do_not_specialize=["n"])
        def called(x, n): pass

        @tr.jit()
        def aliased(x): pass

        @tjit
        def imported(x): pass

        @autotune(configs=[], key=["n"])
        @heuristics({"EVEN": lambda a: a["n"] % 2 == 0})
        @tjit
        def stacked(x, n): pass

        @triton.heuristics(values={"B": lambda a: 1})
        @triton.jit
        def heur(x): pass

        @runtime_jit
        def runtime(x): pass

        @gluon.jit
        def glu(x): pass

        def factory():
            @triton.jit
            def nested(x): pass
            return nested

        class Ops:
            @staticmethod
            @triton.jit
            def method(x): pass
        """
    assert triton_names(src) == [
        "plain",
        "called",
        "aliased",
        "imported",
        "stacked",
        "heur",
        "runtime",
        "glu",
        "nested",
        "method",
    ]


def test_triton_lookalikes_are_not_kernels() -> None:
    src = """
        import triton
        import triton.language as tl
        from numba import jit
        import torch

        @jit
        def numba_fn(x): pass

        @tl.jit
        def not_triton(x): pass

        @torch.jit.script
        def scripted(x): pass

        @triton.autotune(configs=[], key=[])
        def autotune_without_jit(x): pass

        @triton.testing.perf_report([])
        def bench(x): pass

        def triton_jit(x):
            '''@triton.jit in a docstring'''
            s = "@triton.jit\\ndef in_string(): pass"
            # @triton.jit
            return s
        """
    assert triton_names(src) == []


def test_triton_without_import_and_shadowed_jit() -> None:
    # A file that uses triton.jit without importing it (star import) still counts;
    # a bare 'jit' that is not triton's does not.
    assert triton_names("from common import *\n\n@triton.jit\ndef k(x): pass\n") == ["k"]
    assert triton_names("@jit\ndef k(x): pass\n") == []


def test_triton_syntax_errors_and_other_files() -> None:
    assert find_kernels("bad.py", "import triton\n@triton.jit\ndef k(:\n    pass\n") == []
    assert find_kernels("nul.py", "import triton\x00\n") == []
    assert find_kernels("k.txt", "import triton\n@triton.jit\ndef k(): pass\n") == []
    assert find_kernels("k.py", "") == []


def test_kernel_fields() -> None:
    k = find_kernels("pkg/k.py", ADD_PY)[1]
    assert k == Kernel(path="pkg/k.py", name="scale_kernel", language="triton", line=15)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(k, "name", "x")  # noqa: B010


# --------------------------------------------------------------------------- find_kernels: CUDA


def cuda(text: str, path: str = "k.cu") -> list[tuple[str, int]]:
    return [(k.name, k.line) for k in find_kernels(path, dedent(text))]


def test_cuda_declaration_forms() -> None:
    src = """
        #include <cuda_fp16.h>
        template <typename T, int BLOCK = (4 > 2 ? 256 : 128)>
        __global__ void __launch_bounds__(BLOCK, 2)
        templated(const T* __restrict__ x, T* y) {
            if (x) { y[0] = T(1'000'000); }
        }

        extern "C" __global__ void
        c_linkage(float* y)
        {
            y[0] = 1.f;
        }

        extern "C" {
        __global__ void in_block(float* y) { y[0] = 2.f; }
        }

        static __global__ __attribute__((unused)) void with_attr(void) {}

        __global__
        void
        ret_on_own_line(int n) {}

        void __global__ keyword_after_type(int n) {}

        template <int N>
        __global__ typename std::enable_if<(N > 0), void>::type enabled(float* y) {}

        namespace ns {
        __global__ void in_namespace(float* y) {}
        }
        """
    assert cuda(src) == [
        ("templated", 4),
        ("c_linkage", 9),
        ("in_block", 15),
        ("with_attr", 18),
        ("ret_on_own_line", 22),
        ("keyword_after_type", 24),
        ("enabled", 27),
        ("in_namespace", 30),
    ]


def test_cuda_comments_strings_and_macros_are_not_kernels() -> None:
    src = r"""
        // __global__ void line_comment(int);
        /* __global__ void block_comment(int);
           __global__ void still_comment(int); */
        #define KERNEL(name) __global__ void name(float* x)
        #define LONG_MACRO(name) \
            __global__ void name(float* x) { }
        const char* s = "__global__ void in_string() { \" }";
        const char* r = R"cu(__global__ void in_raw(int) { })cu";
        char brace = '{';
        char quote = '"';
        __global__ void real(float* x) { const char* t = "}"; char c = '}'; /* } */ }
        """
    assert cuda(src) == [("real", 11)]


def test_cuda_forward_declarations_and_specializations() -> None:
    src = """
        __global__ void only_declared(int n);
        __global__ void fwd(int n);
        template <typename T> __global__ void tk(T* x);

        __global__ void fwd(int n) { }
        template <typename T> __global__ void tk(T* x) { }
        template <> __global__ void tk<float>(float* x) { }
        template __global__ void tk<double>(double*);
        """
    # one Kernel per name; a definition is preferred over a forward declaration
    assert cuda(src, "k.cuh") == [("only_declared", 1), ("fwd", 5), ("tk", 6)]


def test_cuda_file_kinds_and_unterminated_comment() -> None:
    body = "__global__ void k(int n) {}\n"
    assert cuda(body, "a.cuda") == [("k", 1)]
    assert cuda(body, "a.CU") == [("k", 1)]
    assert cuda(body, "a.cpp") == []
    assert cuda("/* never closed\n" + body) == []
    assert cuda("__global__ int x;\n" + body) == [("k", 2)]


# --------------------------------------------------------------------------- config_snippet


def test_config_snippet_parses_and_has_one_target_per_kernel() -> None:
    kernels = [
        Kernel("kernels/add.py", "add_kernel", "triton", 6),
        Kernel("csrc/relu.cu", "relu", "cuda", 3),
        Kernel("other/add.py", "add_kernel", "triton", 9),  # same name, other file
        Kernel("weird: path #1.py", "k", "triton", 1),
    ]
    text = config_snippet(kernels)
    assert text.startswith("#") and "FILL_ME" in text
    data = yaml.safe_load(text)
    targets = data["targets"]
    assert [t["name"] for t in targets] == ["add_kernel", "relu", "add-add_kernel", "k"]
    assert len({t["name"] for t in targets}) == len(targets)
    for t, k in zip(targets, kernels, strict=True):
        assert t["language"] == k.language
        assert t["files"] == [k.path]
        if k.language == "cuda":  # a raw kernel: its own symbol, and how to launch it
            assert t["entry_point"] == f"{k.path}::{k.name}" and set(t["launch"]) == {"grid", "block", "args"}
        else:
            assert t["entry_point"] == f"{k.path}::WRAPPER_FUNCTION" and "launch" not in t
        d = t["definition"]
        assert set(d) >= {"name", "op_type", "axes", "inputs", "outputs", "reference"}
        assert "def run(" in d["reference"]
        assert t["workloads"] and set(t["workloads"][0]["axes"]) <= set(d["axes"])


def test_config_snippet_definition_is_valid_flashinfer_trace() -> None:
    from kernelpro.runner.trace import Definition  # the runner is allowed in tests, not in bot/

    text = config_snippet(find_kernels("k/add.py", ADD_PY))
    for t in yaml.safe_load(text)["targets"]:
        d = Definition.from_json(t["definition"])
        assert d.name == t["name"]
        ns: dict[str, Any] = {}
        exec(compile(d.reference, "reference", "exec"), ns)  # the placeholder fails closed
        with pytest.raises(NotImplementedError):
            ns["run"](None)


def test_cuda_snippet_fails_closed_until_its_parameters_are_filled_in(tmp_path: Path) -> None:
    from kernelpro.runner.config import ConfigError, load_config

    (tmp_path / "csrc").mkdir()
    (tmp_path / ".kernelpro.yml").write_text(config_snippet([Kernel("csrc/relu.cu", "relu", "cuda", 3)]))
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / ".kernelpro.yml")
    assert any("launch.args[0]" in m and "FILL_ME" in m for m in e.value.errors), e.value.errors


def test_config_snippet_empty() -> None:
    assert config_snippet([]) == ""


def test_bot_does_not_import_the_runner() -> None:
    import kernelpro.bot.change as change

    text = Path(change.__file__).read_text()
    assert "runner" not in [
        part
        for line in text.splitlines()
        if line.startswith(("import ", "from "))
        for part in line.replace(".", " ").split()
    ]
