"""Facts read from Python source by its syntax tree, shared by the bot (which kernels a pull request
changed) and the runner (what a candidate calls): one reading of imports for both halves. Pure
text: no torch, no runner, no GitHub."""

from __future__ import annotations

import ast


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> fully qualified name, for every import anywhere in the module (``import a.b``
    binds ``a``; ``from a import b as c`` binds ``c`` to ``a.b``; relative and star imports bind
    nothing we can name)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                if a.name != "*":
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


# Fully qualified names of Triton's kernel decorators, and what each makes of a function.
_TRITON_DECORATORS = {
    "triton.jit": "jit",
    "triton.runtime.jit": "jit",
    "triton.runtime.jit.jit": "jit",
    "triton.experimental.gluon.jit": "jit",
    "triton.autotune": "autotune",
    "triton.runtime.autotune": "autotune",
    "triton.runtime.autotuner.autotune": "autotune",
    "triton.heuristics": "heuristics",
    "triton.runtime.heuristics": "heuristics",
    "triton.runtime.autotuner.heuristics": "heuristics",
}


def dotted(node: ast.expr) -> list[str] | None:
    """``a.b.c`` as ["a", "b", "c"]; None for anything but names and attributes."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return parts[::-1]


def triton_decorator(decorator: ast.expr, aliases: dict[str, str]) -> str | None:
    """'jit', 'autotune' or 'heuristics' where ``decorator`` (called or not) is Triton's, read
    through the module's imports (``aliases``, from :func:`import_aliases`): ``@jit`` after ``from
    triton import jit`` is, ``@numba.jit`` is not. A bare ``triton.`` name with no visible import
    (a star import, an injected global) is taken at its word."""
    if isinstance(decorator, ast.Call):  # @triton.jit(do_not_specialize=...), @triton.autotune(configs=...)
        decorator = decorator.func
    parts = dotted(decorator)
    if parts is None:
        return None
    head = parts[0]
    if head in aliases:
        qualified = ".".join([aliases[head], *parts[1:]])
    elif head == "triton":
        qualified = ".".join(parts)
    else:
        return None
    return _TRITON_DECORATORS.get(qualified)
