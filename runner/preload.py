"""Preload: which modules a target's warm fork server imports before it forks candidates (issue 22).

A Liger-Kernel candidate spent ~70 % of its evaluation importing ``liger_kernel``'s dependencies
again in every child. None of them is the candidate's: what the candidate tree defines (its files'
top-level names, with the rest of those packages as the head holds them) is always imported fresh
in the child (runner/harness.py serves it from the candidate's files). So the warm server imports
exactly the third-party modules the tree's code imports at module level: the imports of the
candidate's files and of every tree module they reach (their packages' ``__init__`` files
included, since Python runs those first), minus every name the tree defines. Read from the syntax
tree, never run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .layout import module_of, roots
from .trace import Solution, SourceFile

MAX_FILES = 2000
"""Tree files parsed at most while following imports (Liger's package is ~200)."""


@dataclass(frozen=True)
class Preload:
    """What a target's warm server imports, and what it must never import."""

    modules: tuple[str, ...]
    """Dotted names of third-party modules, in first-seen order."""
    tree: tuple[str, ...]
    """Top-level names the candidate tree defines: never preloaded, always the child's own import."""


def tree_names(solution: Solution, context: Sequence[SourceFile] = ()) -> tuple[str, ...]:
    """The top-level module names a solution's files define, as the harness lays them out."""
    written = [f.path for f in solution.sources]
    files = {*written, *(f.path for f in context)}
    return tuple(sorted(roots(sorted(written), files, solution.spec.python_path)))


def plan(solution: Solution, context: Sequence[SourceFile] = ()) -> Preload:
    """The modules to preload for candidates of ``solution`` (the pull request's kernel)."""
    if solution.spec.language == "cuda":
        return Preload((), ())
    written = [f.path for f in solution.sources]
    texts = {f.path: f.content for f in context}
    texts.update({f.path: f.content for f in solution.sources})
    layout = roots(sorted(written), set(texts), solution.spec.python_path)
    tree = tuple(sorted(layout))
    by_module = {m: p for p in texts if (m := module_of(p, layout))}
    todo = [p for p in written if p.endswith(".py")]
    for p in list(todo):  # importing a.b.c runs a/__init__.py and a/b/__init__.py first
        todo += _parents(module_of(p, layout), by_module)
    seen: set[str] = set()
    out: dict[str, None] = {}
    while todo and len(seen) < MAX_FILES:
        path = todo.pop(0)
        if path in seen:
            continue
        seen.add(path)
        me = module_of(path, layout) or PurePosixPath(path).with_suffix("").name
        package = me if path.endswith("__init__.py") else me.rpartition(".")[0]
        for name, names in _imports(texts[path], package):
            if name.partition(".")[0] not in tree:
                if _module(name):
                    out.setdefault(name)
                continue
            for m in (name, *(f"{name}.{n}" for n in names)):
                if m in by_module:
                    todo.append(by_module[m])
                    todo += _parents(m, by_module)
    return Preload(tuple(out), tree)


def _parents(module: str | None, by_module: dict[str, str]) -> list[str]:
    parts = (module or "").split(".")
    return [by_module[m] for i in range(1, len(parts)) if (m := ".".join(parts[:i])) in by_module]


def _imports(source: str, package: str) -> Iterator[tuple[str, tuple[str, ...]]]:
    """(module, names taken from it) for each import that runs when the module is imported: function
    bodies and ``if TYPE_CHECKING:`` blocks left out; relative imports resolved against ``package``."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            todo += node.orelse
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, ()
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                if node.level - 1 > len(parts):
                    continue
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([base] if base else [])])
            if base:
                yield base, tuple(a.name for a in node.names if a.name != "*")
        else:
            todo += list(ast.iter_child_nodes(node))


def start(label: str, solution: Solution, context: Sequence[SourceFile], device: str,
          blocked: Sequence[str] = ()) -> Preload:
    """Start the warm server of a target (runner/forkserver.py) for candidates of ``solution``: with the
    scrubbed environment and the variables every child of ``device`` gets (a Triton kernel defined at
    import is then defined as in the child), refusing any module under ``blocked`` (the pull request's
    checkout). Call it only once the trusted reference outputs are in memory; a search whose settings
    say ``warm_server=False`` (KERNELPRO_WARM_SERVER=0, the "before" row of benchmarks/corpus.py) never calls it."""
    from .environment import child_variables, scrubbed_env
    from .forkserver import warm

    todo = plan(solution, context)
    fixed = {k: v for k, v in child_variables(Path("/"), device, None).items() if k not in ("HOME", "TMPDIR")}
    warm(label, todo.modules, scrubbed_env(fixed), blocked)
    return todo


def more(solution: Solution, context: Sequence[SourceFile], imported: Sequence[str]) -> tuple[str, ...]:
    """What the warm server of ``solution``'s target should import besides its plan (runner/forkserver.py
    ``grow``: the running server imports them between two forks), from the modules the
    pull request's kernel's build imported (runner/harness.py ``_new_modules``): Liger's package calls
    ``torch.compiler.disable`` at import, which imports torch._dynamo, and no import statement says so
    (a child's import of Liger's tree: 0.61 s, and 0.13 s with it preloaded, on the 2-core CI machine:
    benchmarks/preload.py). Only modules of packages the plan preloads already, never the tree's: the pull
    request chooses nothing the syntax of its imports did not let it choose."""
    todo = plan(solution, context)
    tops = {m.partition(".")[0] for m in todo.modules}
    return tuple(m for m in imported
                 if m.partition(".")[0] in tops - set(todo.tree) and m not in todo.modules and _module(m))


def _module(name: str) -> bool:
    """Whether the warm server may import ``name``: a module's import, never a program's run (a
    ``__main__`` module runs its program when imported: ``unittest.__main__`` starts a test discovery)."""
    return "__main__" not in name.split(".")
