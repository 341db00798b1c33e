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
