"""jinja2 templates shipped as package data, and the one way to load them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any

import jinja2


def environment(filters: Mapping[str, Callable[..., Any]] | None = None) -> jinja2.Environment:
    """Markdown output: no HTML autoescaping, undefined names fail loudly instead of rendering blank."""
    root = resources.files(__name__)
    env = jinja2.Environment(
        loader=jinja2.FunctionLoader(lambda name: (root / name).read_text()),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(filters or {})
    return env
