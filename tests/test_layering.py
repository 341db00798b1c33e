"""The layers as the design draws them, read from the source (every import, a function's included):
no import circle in the entry layer or the bot, bot/ never imports runner/, and the environment is
read in kernelpro/settings.py, apart from the reads listed here with their reason."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"kernelpro": ROOT / "kernelpro", "kernelpro.bot": ROOT / "bot", "kernelpro.runner": ROOT / "runner"}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            if package == "kernelpro" and parts and parts[0] in ("bot", "runner"):
                continue  # never the case (separate folders), but a stray copy must not count twice
            out[".".join([package, *parts])] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """Every kernelpro module ``name`` imports, wherever the import statement stands."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            # `from kernelpro import action` imports the module kernelpro.action.
            targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in MODULES else stem for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in MODULES:
                t = t.rpartition(".")[0]
            if t and t != name:
                yield t


def _circles(names: set[str]) -> list[list[str]]:
    """The import circles among ``names`` (strongly connected groups of more than one module)."""
    graph = {n: {m for m in _imports(n, MODULES[n]) if m in names} for n in names}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for n in sorted(names):
        if n not in index:
            visit(n)
    return found


def test_no_import_circle_in_the_entry_layer_or_the_bot() -> None:
    entry_and_bot = {n for n in MODULES if not n.startswith("kernelpro.runner")}
    assert _circles(entry_and_bot) == []
    assert {"kernelpro.cli", "kernelpro.action", "kernelpro.pipeline", "kernelpro.bot.plan"} <= entry_and_bot


def test_the_entry_layer_imports_downwards_only() -> None:
    """cli may start the workflow's jobs (action), the jobs run the pipeline; never the way back."""
    assert "kernelpro.cli" not in set(_imports("kernelpro.action", MODULES["kernelpro.action"]))
    assert "kernelpro.cli" not in set(_imports("kernelpro.pipeline", MODULES["kernelpro.pipeline"]))
    assert "kernelpro.action" not in set(_imports("kernelpro.pipeline", MODULES["kernelpro.pipeline"]))


def test_bot_never_imports_the_runner() -> None:
    crossing = {(n, m) for n in MODULES if n.startswith("kernelpro.bot")
                for m in _imports(n, MODULES[n]) if m.startswith("kernelpro.runner")}
    assert crossing == set()


def test_no_import_circle_in_the_runner_save_a_registry_and_its_entries() -> None:
    """runner/optimize.py and runner/report.py were one (the records they share now live in
    runner/result.py); a package that imports its own submodules to list them (runner/tools,
    runner/search) and is imported by them is the one circle allowed."""
    runner = {n for n in MODULES if n.startswith("kernelpro.runner")}
    for group in _circles(runner):
        package = min(group, key=len)
        assert all(m == package or m.startswith(package + ".") for m in group), group
    assert "kernelpro.runner.optimize" not in set(_imports("kernelpro.runner.report", MODULES["kernelpro.runner.report"]))


def _is_environ(node: ast.AST) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ")


def _env_reads(path: Path) -> Iterator[str]:
    """The KERNELPRO_* variables ``path`` reads from the process environment by a literal name:
    os.environ.get/pop/[...], os.getenv, or runner.toolkit.find_tool's variable."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        key: ast.AST | None = None
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            key = node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if (f.attr in ("get", "pop") and _is_environ(f.value)) or f.attr == "getenv":
                key = node.args[0] if node.args else None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "find_tool":
            key = node.args[1] if len(node.args) > 1 else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("KERNELPRO_"):
            yield key.value


# Reads that stay where they are, and why.
KEPT = {
    # The sandbox's channel to its child: the runner passes it to the child it starts; not a setting.
    ("runner/harness.py", "KERNELPRO_CHANNEL"),
}


def test_the_environment_is_read_once_in_settings() -> None:
    reads = {(str(path.relative_to(ROOT)), var) for path in MODULES.values() for var in _env_reads(path)
             if path != ROOT / "kernelpro" / "settings.py"}
    assert reads == KEPT
