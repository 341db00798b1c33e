"""The trusted smoke step before any search: is the configuration right, whatever the PR's kernel does?

A reference that raises, an entry point that names a function its file does not define, a kernel
file that is not in the commit: each would otherwise surface as the pull request's kernel failing
(RUNTIME_ERROR, COMPILE_ERROR) and blame the wrong person. Here they are configuration errors that
say the cause and the fix. Nothing of the pull request runs: its files are read as text (from git
objects) and parsed, and only the definition's reference (the base branch's configuration) runs,
in the evaluator's own reference child, on the smallest workload.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelpro import __version__

from .checkout import CheckoutError, read_source
from .target import Target
from .trace import Workload

REFERENCE_FAILED = "the definition's reference failed"
"""How the evaluator's Outcome log starts when the reference, not the candidate, failed."""
CONFIG_ERROR = "CONFIG_ERROR"
"""The baseline status a results directory records for a target stopped by its configuration."""


@dataclass(frozen=True)
class ConfigFault:
    """A configuration error found before any search."""

    target: str
    """The target's name."""
    cause: str
    """What is wrong."""
    fix: str
    """What to change."""

    def __str__(self) -> str:
        return f"{self.target}: configuration error: {self.cause.rstrip('.')}. Fix: {self.fix.rstrip('.')}."


def _defined_names(tree: ast.Module) -> set[str] | None:
    """Names the module binds at its top level; None when it cannot be known without running it
    (``from x import *``, a module ``__getattr__``, writes through ``globals()``)."""
    names: set[str] = set()
    for node in tree.body:
        names |= _bound(node)
    if "*" in names or "__getattr__" in names:
        return None
    if any(isinstance(n, ast.Name) and n.id in ("globals", "setattr") for n in ast.walk(tree)):
        return None
    return names


def _bound(node: ast.stmt) -> set[str]:
    out: set[str] = set()
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.add(node.name)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):  # definitions under a guard count
        for body in ("body", "orelse", "finalbody"):
            for sub in getattr(node, body, []):
                out |= _bound(sub)
        for h in getattr(node, "handlers", []):
            for sub in h.body:
                out |= _bound(sub)
    return out


def static_faults(target: Target, checkout: Path) -> list[ConfigFault]:
    """What is wrong with the target's files and entry point at this checkout, read as text."""
    faults: list[ConfigFault] = []
    entry_file, symbol = target.entry_point.split("::")
    texts: dict[str, str] = {}
    for f in target.files:
        try:
            texts[f] = read_source(checkout, f)
        except CheckoutError as e:
            what = "the entry point's file" if f == entry_file else "a source file of the target"
            faults.append(ConfigFault(target.name, f"{what} {f} cannot be read at this commit: {e}",
                                      f"point entry_point/sources in .kernelpro.yml at the kernel's files as the "
                                      f"pull request has them (was {f} renamed or deleted?)"))
    text = texts.get(entry_file)
    if text is None:
        return faults
    head = symbol.split(".")[0]
    if target.language == "cuda":
        if target.binding is None and not re.search(rf"\b{re.escape(symbol)}\b", text):
            faults.append(ConfigFault(target.name, f"entry_point {target.entry_point}: {entry_file} has no kernel "
                                      f"named {symbol}", f"write entry_point: {entry_file}::<the extern \"C\" "
                                      "__global__ function's name>"))
        return faults
    try:
        tree = ast.parse(text, filename=entry_file)
    except SyntaxError:
        return faults  # the pull request's code does not parse: its COMPILE_ERROR, not the configuration's
    names = _defined_names(tree)
    if names is not None and head not in names:
        funcs = sorted(n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
        close = [n for n in funcs if n.lower() == head.lower() or head in n or n in head][:3]
        hint = f"did you mean {', '.join(close)}? " if close else ""
        faults.append(ConfigFault(target.name, f"entry_point {target.entry_point}: {entry_file} defines no {head!r} "
                                  f"(its functions: {', '.join(funcs) or 'none'})",
                                  f"{hint}write entry_point: {entry_file}::<function to call>, or add that function "
                                  "to the file"))
    return faults


def smallest(workloads: Sequence[Workload]) -> Workload:
    """The workload with the least work (product of its axis values)."""
    def size(w: Workload) -> int:
        n = 1
        for v in w.axes.values():
            n *= max(int(v), 1)
        return n

    return min(workloads, key=size)


def _shape(target: Target, name: str, axes: Mapping[str, int]) -> tuple[int, ...] | None:
    spec = target.definition.outputs[name]
    if spec.shape is None:
        return ()
    dims = []
    for a in spec.shape:
        ax = target.definition.axes[a]
        dims.append(int(ax.value) if ax.type == "const" and ax.value is not None else int(axes[a]))
    return tuple(dims)


def reference_fault(target: Target, checkout: Path, device: str, timeout_s: float = 300.0) -> ConfigFault | None:
    """Runs the definition's reference on the smallest workload, in the evaluator's reference child,
    and checks it returns the definition's outputs (count, shape, dtype)."""
    import torch

    from .evaluator import EvalSettings, reference_outputs

    w = smallest(target.workloads_for(device))
    where = ", ".join(f"{k}={v}" for k, v in w.axes.items()) or "no variable axes"
    fix_ref = ("correct `reference` in the definition: `run(...)` takes the inputs in the definition's order and "
               "returns its outputs in order; `kernelpro check-config --run` checks it without a pull request")
    es = EvalSettings(device=device, trials=1, rotate=1, timeout_s=timeout_s, time_reference=False)
    try:
        solution = target.solution(checkout)
    except (CheckoutError, OSError, ValueError):
        solution = None  # static_faults reports the unreadable file
    if solution is None:
        return None
    got = reference_outputs(target.definition, solution, [w], target.tolerance, es)
    if isinstance(got, str):
        lines = [ln.strip() for ln in got.strip().splitlines() if ln.strip()]
        last = next((ln for ln in reversed(lines) if not ln.startswith(("File ", "^", "~"))), lines[-1] if lines else "")
        return ConfigFault(target.name, f"the definition's reference fails on the smallest workload ({where}): "
                           f"{last[:400]}", fix_ref)
    names = list(target.definition.outputs)
    if len(got) != len(names):
        return ConfigFault(target.name, f"the definition's reference returns {len(got)} value(s) on the smallest "
                           f"workload ({where}); the definition has {len(names)} output(s) ({', '.join(names)})", fix_ref)
    for name, value in zip(names, got, strict=True):
        spec = target.definition.outputs[name]
        want = _shape(target, name, w.axes)
        if not isinstance(value, torch.Tensor):
            return ConfigFault(target.name, f"the definition's reference returns a {type(value).__name__} for output "
                               f"{name}, not a tensor", fix_ref)
        dtype = str(value.dtype).removeprefix("torch.")
        if tuple(value.shape) != want or dtype != spec.dtype:
            return ConfigFault(target.name, f"the definition's reference returns {name} as {dtype} {list(value.shape)} "
                               f"on the smallest workload ({where}); the definition declares {spec.dtype} {list(want or ())}",
                               "make the reference return what the definition declares, or correct the output's shape "
                               "or dtype in the definition")
    return None


# What the harness imports before any candidate code, besides the standard library's modules.
_HARNESS_IMPORTS = frozenset({"torch", "triton", "numpy", "kernelpro", "yaml", "jinja2"})


def import_warnings(target: Target, checkout: Path) -> list[str]:
    """Top-level names the target's files define that the evaluator cannot serve from the candidate's
    files, because it imports a module of that name itself before the candidate runs: another copy
    would be measured (each evaluation says so again, as IMPORT_MISMATCH). Static: nothing runs."""
    import sys

    from .layout import of

    if target.language == "cuda":
        return []
    taken = _HARNESS_IMPORTS | ({m.partition(".")[0] for m in list(sys.modules)} & set(sys.stdlib_module_names))
    try:
        names = of(checkout, target.files, target.python_path)
    except OSError:
        return []
    return [f"{target.name}: the target's files define `{n}` (under {', '.join(r or '.' for r in rs)}), a module the "
            f"evaluator imports itself before any candidate runs, so candidates would run that copy, not the "
            f"repository's; rename the folder or set `python_path:` so that the kernel's package has its own name"
            for n, rs in sorted(names.items()) if n in taken]


def smoke(target: Target, checkout: Path, device: str, timeout_s: float = 300.0) -> list[ConfigFault]:
    """Every configuration error of one target found without running the pull request's code."""
    faults = static_faults(target, checkout)
    if faults:
        return faults
    ref = reference_fault(target, checkout, device, timeout_s)
    return [ref] if ref is not None else []


def is_reference_failure(log: str) -> bool:
    """Whether an evaluation failed because the reference did (the configuration's fault)."""
    return log.startswith(REFERENCE_FAILED)


def fault_result(target: Target, device: str, faults: Sequence[ConfigFault]) -> dict[str, Any]:
    """result.json of a target the smoke step stopped: read by the publish step like any other, so
    the pull request's comment says the configuration is at fault, not its kernel."""
    text = " ".join(f"{f.cause.rstrip('.')}. Fix: {f.fix.rstrip('.')}." for f in faults)
    return {"kernelpro_version": __version__, "target": target.name, "definition": target.definition.name,
            "device": device, "gpu_timings": device == "cuda", "evaluations": 0, "statuses": {},
            "stop_reason": f"configuration error in .kernelpro.yml, not the pull request's kernel: {text}"[:3900],
            "seconds": 0.0, "baseline": {"status": CONFIG_ERROR, "log": "", "solution": ""}, "base_branch": None,
            "winner": None, "gates": [], "curve": [], "config_errors": [str(f) for f in faults]}


def fault_report(target: Target, faults: Sequence[ConfigFault]) -> str:
    lines = [f"# kernelpro: {target.name}", "", "**Configuration error: nothing was optimized.** The configuration "
             "does not match the code, so no measurement would say anything about the pull request's kernel.", ""]
    lines += [f"- {f.cause.rstrip('.')}. **Fix:** {f.fix.rstrip('.')}." for f in faults]
    return "\n".join(lines) + "\n"

