"""One of benchmarks/*.py or docs/*.py, loaded as a module for the CPU tests of the scripts the lead runs
on the H200 (the folders are not packages)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(relative: str) -> ModuleType:
    """``relative`` (e.g. ``benchmarks/replays.py``) under a name of its own, registered in sys.modules
    while it runs: dataclasses look their module up then."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(f"kp_{path.parent.name}_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
