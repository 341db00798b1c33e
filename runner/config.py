"""The ``.kernelpro.yml`` schema: a repository's kernels as validated :class:`Target` records.

Every problem is reported as ``FILE:LINE: WHERE: WHAT. Fix: HOW.``, all of them at once, with the
line taken from PyYAML's composed node tree. Globs follow GitHub Actions' path filters: they are
anchored at the repository root, ``*`` and ``?`` stay inside one path segment, ``**`` crosses
directories (``**/*.cu`` matches at any depth) and a trailing ``/`` means everything below.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from .launch import Launch, parse_launch
from .target import Budget, Target, Tolerance
from .trace import Definition, FormatError, Workload, load_json, load_workloads

CONFIG_NAME = ".kernelpro.yml"
VERSIONS = (1,)
CONFIG_LANGUAGES = ("triton", "cuda", "python")
TOP_KEYS = ("version", "targets", "tools", "energy")
ENERGY_MODES = ("off", "passive", "active")
TARGET_KEYS = (
    "name", "files", "sources", "language", "entry_point", "destination_passing_style",
    "definition", "workloads", "cpu_workloads", "tolerances", "budget", "flops", "bytes", "launch",
    "binding", "returns", "in_place", "guard_shapes", "python_path",
)
REQUIRED_TARGET_KEYS = ("name", "files", "language", "entry_point", "definition", "workloads")
DEFINITION_KEYS = ("name", "op_type", "axes", "inputs", "outputs", "reference", "tags",
                   "description", "constraints")
WORKLOAD_KEYS = ("axes", "inputs", "uuid")
TOLERANCE_KEYS = ("atol", "rtol")
BUDGET_KEYS = ("evaluations", "minutes", "timeout_s")
FORMULA_FUNCTIONS = ("min", "max", "abs")
# trace.py's from_json raises FormatError, but some malformed shapes slip through as these:
_FORMAT_ERRORS = (FormatError, AttributeError, KeyError, TypeError)
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]+")
_GLOB_CHARS = set("*?[")
_FIX = {
    "targets": "add `targets:` with a list of kernels, each with name, files, language, "
    "entry_point, definition and workloads",
    "name": "add `name: my_kernel` (letters, digits, '_', '.', '-')",
    "files": 'add `files: ["path/to/kernel.py"]`, the globs whose changes select this kernel',
    "language": "add `language: triton` (or cuda, python)",
    "entry_point": "add `entry_point: path/to/kernel.py::function`",
    "definition": "add `definition: defs/my_kernel.json`, or an inline mapping with op_type, "
    "axes, inputs, outputs and reference",
    "workloads": "add `workloads: [{M: 1024}]`: axis values, full workload mappings "
    "({axes, inputs, uuid}) or paths to .jsonl workload files",
    "op_type": "add `op_type: elementwise` (any category name) to the definition",
    "axes": "add `axes: {M: {type: var}, N: {type: const, value: 4096}}` to the definition",
    "inputs": "add `inputs: {x: {shape: [M, N], dtype: float32}}` to the definition",
    "outputs": "add `outputs: {y: {shape: [M, N], dtype: float32}}` to the definition",
    "reference": "add `reference: |` with Python source defining `def run(...)`",
}


class ConfigError(ValueError):
    """An invalid ``.kernelpro.yml``; ``errors`` holds one ``FILE:LINE: ... Fix: ...`` per problem."""

    def __init__(self, errors: str | Iterable[str]) -> None:
        self.errors: list[str] = [errors] if isinstance(errors, str) else list(errors)
        super().__init__("\n".join(self.errors))


@dataclass(frozen=True)
class Config:
    """A parsed, validated ``.kernelpro.yml``."""

    path: Path
    """The file it was read from."""
    version: int
    """Schema version (1)."""
    targets: tuple[Target, ...]
    """The kernels, in file order."""
    tools: tuple[Path, ...] = ()
    """The repository's own micro-profiling tools: Python files defining TOOLS = (ProfilingTool(...), ...).
    Read from the base branch only, since they run in kernelpro's own process."""
    energy: str = "off"
    """off | passive (measure and report energy) | active (also prefer the cheaper of equally fast kernels)."""

    def targets_for(self, changed_paths: Iterable[str]) -> list[Target]:
        """Targets any of whose globs match any of the changed repository-relative paths."""
        paths = [_norm(p) for p in changed_paths]
        return [t for t in self.targets if any(match_glob(g, p) for g in t.globs for p in paths)]

    def target(self, name: str) -> Target:
        for t in self.targets:
            if t.name == name:
                return t
        known = ", ".join(t.name for t in self.targets) or "(none)"
        raise ConfigError(f"unknown kernel {name!r}; known: {known}")


def _norm(path: str) -> str:
    p = path.replace("\\", "/")
    while p.startswith("./"):
        p = p[2:]
    return p


@functools.lru_cache(maxsize=512)
def _glob_re(pattern: str) -> re.Pattern[str]:
    pat = _norm(pattern) + ("**" if pattern.endswith("/") else "")
    out, i = [], 0
    while i < len(pat):
        if pat.startswith("**/", i):
            out.append("(?:[^/]*/)*")
            i += 3
        elif pat.startswith("**", i):
            out.append(".*")
            i += 2
        elif pat[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pat[i] == "?":
            out.append("[^/]")
            i += 1
        elif pat[i] == "[" and (j := pat.find("]", i + 2)) != -1:
            body = pat[i + 1 : j].replace("\\", "\\\\")
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = j + 1
        else:
            out.append(re.escape(pat[i]))
            i += 1
    return re.compile("".join(out))


def match_glob(pattern: str, path: str) -> bool:
    """Whether a repository-relative path matches a config glob (see the module docstring)."""
    return _glob_re(pattern).fullmatch(_norm(path)) is not None


# --------------------------------------------------------------------------- parsing


def _clean(text: str) -> str:
    return text.strip().rstrip(".")


def _fmt(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in values)


class _Parser:
    """Walks the composed YAML tree, constructing values node by node, collecting errors."""

    def __init__(self, filename: str, repo_root: Path) -> None:
        self.filename = filename
        self.repo_root = repo_root
        self.errors: list[tuple[int, str]] = []
        self.tools: list[Path] = []
        self.energy = "off"
        self._c = SafeConstructor()

    # -- helpers
    def err(self, node: yaml.Node | None, where: str, msg: str, fix: str) -> None:
        line = node.start_mark.line + 1 if node is not None else 1
        head = f"{where}: " if where else ""
        self.errors.append(
            (line, f"{self.filename}:{line}: {head}{_clean(msg)}. Fix: {_clean(fix)}.")
        )

    def yaml_error(self, e: yaml.MarkedYAMLError) -> None:
        line = e.problem_mark.line + 1 if e.problem_mark is not None else 1
        msg = f"{self.filename}:{line}: cannot read this value ({_clean(str(e.problem))})"
        self.errors.append((line, f"{msg}. Fix: remove the YAML tag; plain values are enough."))

    def value(self, node: yaml.Node) -> Any:
        return self._c.construct_object(node, deep=True)

    def pairs(self, node: yaml.MappingNode) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        self._c.flatten_mapping(node)  # resolves '<<' merge keys in place
        return {str(self.value(k)): (k, v) for k, v in node.value}

    def check_duplicates(self, node: yaml.Node, seen: set[int]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, yaml.Node] = {}
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    if k.value in first:
                        self.err(k, k.value, f"duplicate key (first at line {first[k.value].start_mark.line + 1})",
                                 "keep only one of them")
                    first.setdefault(k.value, k)
                self.check_duplicates(v, seen)
        elif isinstance(node, yaml.SequenceNode):
            for v in node.value:
                self.check_duplicates(v, seen)

    def mapping(self, node: yaml.Node, where: str, allowed: Sequence[str], required: Sequence[str] = (),
                what: str = "a mapping") -> dict[str, tuple[yaml.Node, yaml.Node]] | None:
        if not isinstance(node, yaml.MappingNode):
            self.err(node, where, f"expected {what}, got {self.value(node)!r}",
                     f"make it a mapping (key: value lines) with the keys {_fmt(allowed)}")
            return None
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        guessed = set()
        for key, (kn, vn) in self.pairs(node).items():
            if key in allowed:
                out[key] = (kn, vn)
                continue
            close = difflib.get_close_matches(key, allowed, n=1)
            guessed.update(close)
            hint = f"rename it to '{close[0]}'" if close else "remove it"
            self.err(kn, f"{where}.{key}" if where else key, f"unknown key '{key}'",
                     f"{hint} (allowed keys: {_fmt(allowed)})")
        for key in required:
            if key not in out and key not in guessed:
                self.err(node, where, f"'{key}' is required", _FIX.get(key, f"add '{key}'"))
        return out

    def string(self, node: yaml.Node, where: str, fix: str) -> str | None:
        v = self.value(node)
        if isinstance(v, str) and v.strip():
            return v
        self.err(node, where, f"expected a non-empty string, got {v!r}", fix)
        return None

    def number(self, node: yaml.Node, where: str, positive: bool = False) -> float | None:
        v = self.value(node)
        try:  # YAML 1.1 reads 1e-5 (no dot) as a string
            x = float(v) if not isinstance(v, bool) and isinstance(v, (int, float, str)) else None
        except ValueError:
            x = None
        if x is None or x != x or x < 0 or (positive and x == 0):
            need = "a positive number" if positive else "a non-negative number"
            self.err(node, where, f"expected {need}, got {v!r}", f"write {need}, e.g. {where.rsplit('.', 1)[-1]}: 1.0e-5"
                     if not positive else f"write {need}, e.g. {where.rsplit('.', 1)[-1]}: 10")
            return None
        return x

    def rel_path(self, node: yaml.Node, where: str, text: str, glob: bool = False) -> bool:
        """A repository-relative path (or glob) without '..' and not absolute."""
        p = PurePosixPath(_norm(text))
        if p.is_absolute() or PureWindowsPath(text).drive or ".." in p.parts:
            self.err(node, where, f"'{text}' must be relative to the repository root and must not use '..'",
                     "write the path from the repository root, e.g. kernels/my_kernel.py")
            return False
        if not glob and _GLOB_CHARS & set(text):
            self.err(node, where, f"'{text}' is a glob, but exact file paths are needed here",
                     "list the files one by one")
            return False
        return True

    def repo_file(self, node: yaml.Node, where: str, text: str) -> Path | None:
        """Resolve a repository-relative file that must exist and stay inside the repository."""
        root = self.repo_root.resolve()
        p = PurePosixPath(_norm(text))
        full = (root / p).resolve()
        if p.is_absolute() or PureWindowsPath(text).drive or not full.is_relative_to(root):
            self.err(node, where, f"'{text}' points outside the repository",
                     "use a path relative to the repository root that stays inside it")
            return None
        if not full.is_file():
            self.err(node, where, f"file '{text}' not found in the repository",
                     f"create it, or fix the path (relative to {self.repo_root})")
            return None
        return full

    def str_list(self, node: yaml.Node, where: str, fix: str) -> list[tuple[yaml.Node, str]] | None:
        items = node.value if isinstance(node, yaml.SequenceNode) else [node]
        out = []
        for i, n in enumerate(items):
            w = f"{where}[{i}]" if isinstance(node, yaml.SequenceNode) else where
            s = self.string(n, w, fix)
            if s is not None:
                out.append((n, s))
        if not items:
            self.err(node, where, "must not be empty", fix)
        return out if len(out) == len(items) and items else None

    # -- document
    def document(self, root: yaml.Node | None) -> tuple[int, list[Target]]:
        if root is None:
            self.err(None, "", "the file is empty", _FIX["targets"])
            return 1, []
        self.check_duplicates(root, set())
        top = self.mapping(
            root, "", TOP_KEYS, ("targets",), "a mapping with 'version' and 'targets'"
        )
        if top is None:
            return 1, []
        version = 1
        if "version" in top:
            vn = top["version"][1]
            v = self.value(vn)
            if v in VERSIONS and not isinstance(v, bool):
                version = int(v)
            else:
                self.err(
                    vn, "version", f"unsupported version {v!r}", f"set `version: {VERSIONS[-1]}`"
                )
        if "tools" in top:
            tnode = top["tools"][1]
            items = self.str_list(tnode, "tools", "list Python files, e.g. tools: [kernelpro_tools.py]") or []
            for n, text in items:
                if self.rel_path(n, "tools", text):
                    f = self.repo_file(n, "tools", text)
                    if f is not None:
                        self.tools.append(f)
        if "energy" in top:
            en = top["energy"][1]
            v = self.value(en)
            # YAML 1.1 reads a bare `off` as False.
            mode = "off" if v is False else v
            if mode in ENERGY_MODES:
                self.energy = str(mode)
            else:
                self.err(en, "energy", f"{v!r} is not one of {_fmt(ENERGY_MODES)}",
                         "set `energy: passive` to measure and report energy, `energy: active` to also prefer the "
                         "cheaper of equally fast kernels, or `energy: off`")
        if "targets" not in top:
            return version, []
        tn = top["targets"][1]
        if not isinstance(tn, yaml.SequenceNode) or not tn.value:
            self.err(tn, "targets", "expected a non-empty list of kernels", _FIX["targets"])
            return version, []
        targets: list[Target] = []
        names: dict[str, int] = {}
        for i, item in enumerate(tn.value):
            try:
                t = self.target(item, f"targets[{i}]", names)
            except yaml.MarkedYAMLError as e:  # e.g. an unknown !tag met while constructing a value
                self.yaml_error(e)
                continue
            if t is not None:
                targets.append(t)
        return version, targets

    def target(self, node: yaml.Node, where: str, names: dict[str, int]) -> Target | None:
        m = self.mapping(
            node, where, TARGET_KEYS, REQUIRED_TARGET_KEYS, "a mapping describing one kernel"
        )
        if m is None:
            return None
        n_errors = len(self.errors)
        f: dict[str, Any] = {}

        def at(key: str) -> tuple[yaml.Node, str] | None:
            return (m[key][1], f"{where}.{key}") if key in m else None

        if a := at("name"):
            name = self.string(*a, _FIX["name"])
            if name is not None and not _NAME_RE.fullmatch(name):
                self.err(a[0], a[1], f"{name!r} may only use letters, digits, '_', '.' and '-'",
                         f"rename it, e.g. {re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}")
            elif name is not None and name in names:
                self.err(a[0], a[1], f"duplicate target name {name!r} (first at line {names[name]})",
                         "give each target a unique name")
            elif name is not None:
                names[name] = a[0].start_mark.line + 1
                f["name"] = name
        globs: list[str] = []
        if a := at("files"):
            items = self.str_list(*a, _FIX["files"])
            if items is not None and all(self.rel_path(n, a[1], s, glob=True) for n, s in items):
                globs = [_norm(s) for _, s in items]
                f["globs"] = tuple(globs)
        if a := at("language"):
            lang = self.value(a[0])
            if lang in CONFIG_LANGUAGES:
                f["language"] = lang
            else:
                self.err(a[0], a[1], f"{lang!r} is not one of {_fmt(CONFIG_LANGUAGES)}",
                         f"set language to one of {_fmt(CONFIG_LANGUAGES)}")
        entry_file = None
        if a := at("entry_point"):
            ep = self.string(*a, _FIX["entry_point"])
            parts = ep.split("::") if ep is not None else []
            if ep is None:
                pass
            elif (
                len(parts) != 2
                or not parts[0]
                or not all(s.isidentifier() for s in parts[1].split("."))
            ):
                self.err(a[0], a[1], f"{ep!r} is not 'path::symbol'",
                         "write it as path/to/file.py::function_name")
            elif self.rel_path(a[0], a[1], parts[0]):
                entry_file = _norm(parts[0])
                f["entry_point"] = f"{entry_file}::{parts[1]}"
        if a := at("sources"):
            items = self.str_list(*a, 'list the files that form the kernel, e.g. ["kernels/k.py"]')
            if items is not None and all(self.rel_path(n, a[1], s) for n, s in items):
                sources = list(dict.fromkeys(_norm(s) for _, s in items))
                if entry_file is not None and entry_file not in sources:
                    self.err(m["entry_point"][1], f"{where}.entry_point",
                             f"entry file '{entry_file}' is not one of the sources ({_fmt(sources)})",
                             f"add '{entry_file}' to sources, or point entry_point at one of them")
                f["files"] = tuple(sources)
        elif entry_file is not None:
            literal = [g for g in globs if not _GLOB_CHARS & set(g) and not g.endswith("/")]
            f["files"] = tuple(dict.fromkeys([entry_file, *literal]))
        if a := at("destination_passing_style"):
            dps = self.value(a[0])
            if isinstance(dps, bool):
                f["destination_passing_style"] = dps
            else:
                self.err(a[0], a[1], f"expected true or false, got {dps!r}",
                         "set destination_passing_style: true (outputs passed as trailing arguments) or false")
        defn = None
        if a := at("definition"):
            defn = self.definition(*a, f.get("name") or "kernel")
            if defn is not None:
                f["definition"] = defn
        for key in ("workloads", "cpu_workloads"):
            if (a := at(key)) and defn is not None:
                wls = self.workloads(*a, defn)
                if wls is not None:
                    f[key] = tuple(wls)
        binding = None
        if a := at("binding"):
            binding = self.value(a[0])
            if binding != "torch" or f.get("language") != "cuda":
                self.err(a[0], a[1], f"binding {binding!r} is not supported here; `binding: torch` is for a cuda "
                         "target whose sources bind their function with PYBIND11_MODULE or TORCH_LIBRARY",
                         "write binding: torch with language: cuda, or remove binding")
            elif "launch" in m:
                self.err(a[0], a[1], "a torch-extension target calls its own wrapper; 'launch' is for raw kernels",
                         "keep either binding: torch or launch")
            else:
                f["binding"] = binding
        if a := at("launch"):
            if (launch := self.launch(*a, defn, f.get("entry_point"), f.get("language"))) is not None:
                f["launch"] = launch
        elif f.get("language") == "cuda" and binding is None:
            self.err(node, where, "a cuda target needs 'launch': how to call its kernel",
                     'add launch: {grid: ["cdiv(M * N, BLOCK_SIZE)"], block: [BLOCK_SIZE], '
                     'args: ["const float* x", "float* y", "int n = M * N"]}, or binding: torch when the '
                     "sources wrap the kernel in a torch extension")
        if f.get("language") == "cuda" and "binding" in f:
            if entry_file is not None and not entry_file.endswith((".cu", ".cpp", ".cc", ".cxx")):
                self.err(m["entry_point"][1], f"{where}.entry_point", f"'{entry_file}' is not a .cu or .cpp file",
                         "write entry_point: path/to/ext.cu::function (the name PYBIND11_MODULE defines, or "
                         "namespace.op for TORCH_LIBRARY)")
        elif f.get("language") == "cuda":
            if f.get("destination_passing_style") is False:
                self.err(m["destination_passing_style"][1], f"{where}.destination_passing_style",
                         "a raw CUDA kernel writes its outputs through pointers the harness allocates",
                         "remove destination_passing_style (it is always true for cuda targets)")
            f["destination_passing_style"] = True
            if entry_file is not None and not entry_file.endswith((".cu", ".cuh")):
                self.err(m["entry_point"][1], f"{where}.entry_point", f"'{entry_file}' is not a .cu file",
                         "write entry_point: path/to/kernel.cu::kernel_symbol (the extern \"C\" __global__ name)")
        if defn is not None and ("returns" in m or "in_place" in m):
            self.outputs_from(m, where, defn, f)
        if (a := at("guard_shapes")) and defn is not None:
            self.guard_shapes(*a, defn, f)
        if (a := at("tolerances")) and (tol := self.tolerances(*a, defn)) is not None:
            f["tolerance"] = tol
        if a := at("budget"):
            bm = self.mapping(
                a[0], a[1], BUDGET_KEYS, what="a mapping like {evaluations: 24, minutes: 30}"
            )
            if bm is not None:
                b: dict[str, Any] = {}
                for k, (_, v) in bm.items():
                    x = self.number(v, f"{a[1]}.{k}", positive=True)
                    if k == "evaluations" and x is not None and x != int(x):
                        self.err(
                            v,
                            f"{a[1]}.{k}",
                            f"expected a whole number, got {x}",
                            "write an integer, e.g. 24",
                        )
                    elif x is not None:
                        b[k] = int(x) if k == "evaluations" else x
                f["budget"] = Budget(**b)
        for key in ("flops", "bytes"):
            if a := at(key):
                formula = self.formula(*a, defn)
                if formula is not None:
                    f[key] = formula
        if a := at("python_path"):
            self.python_path(*a, f)
        if len(self.errors) > n_errors or not all(k in f for k in ("name", "files", "entry_point",
                                                                     "language", "definition", "workloads")):
            return None
        return Target(**f)

    def python_path(self, node: yaml.Node, where: str, f: dict[str, Any]) -> None:
        """``python_path: [src]``: the folders the repository's code is imported from, when the layout
        does not say (no ``__init__.py`` files, or a package under another folder than src/)."""
        fix = "list folders relative to the repository root that the code is imported from, e.g. python_path: [src]"
        items = self.str_list(node, where, fix)
        if items is None:
            return
        out = []
        for i, (n, text) in enumerate(items):
            w = f"{where}[{i}]" if isinstance(node, yaml.SequenceNode) else where
            if not self.rel_path(n, w, text):
                continue
            rel = _norm(text).strip("/") or "."
            full = (self.repo_root / rel).resolve()
            if not full.is_relative_to(self.repo_root.resolve()) or not full.is_dir():
                self.err(n, w, f"'{text}' is not a folder of the repository",
                         f"{fix}; '.' is the repository root")
                continue
            out.append("" if rel == "." else rel)
        files = [x for x in f.get("files", ()) if x.endswith(".py")]
        for r in out:
            if files and not any(r == "" or x.startswith(r + "/") for x in files):
                self.err(node, where, f"no Python file of the target is under '{r or '.'}' ({_fmt(files)})",
                         "name the folder that holds the target's package, e.g. src for src/pkg/module.py")
        f["python_path"] = tuple(dict.fromkeys(out))

    def outputs_from(self, m: dict[str, tuple[yaml.Node, yaml.Node]], where: str, defn: Definition,
                     f: dict[str, Any]) -> None:
        """``in_place: {OUTPUT: INPUT}`` and ``returns:`` (a list, one entry per other output in the
        definition's order, or ``{OUTPUT: where}``; where = an index into the returned tuple, or a key
        or attribute name) into f's in_place and returns."""
        if f.get("destination_passing_style") or f.get("language") == "cuda" and f.get("binding") is None:
            key = "returns" if "returns" in m else "in_place"
            self.err(m[key][0], f"{where}.{key}", f"'{key}' describes an entry point that returns its outputs, but "
                     "this one takes them as trailing arguments (destination_passing_style)",
                     f"remove '{key}', or set destination_passing_style: false")
            return
        pairs: dict[str, str] = {}
        if "in_place" in m:
            node, w = m["in_place"][1], f"{where}.in_place"
            im = self.mapping(node, w, tuple(defn.outputs), what="a mapping OUTPUT: INPUT, e.g. {y: x}")
            for out, (_, vn) in (im or {}).items():
                inp, o = self.value(vn), defn.outputs[out]
                spec = defn.inputs.get(inp) if isinstance(inp, str) else None
                if spec is None or spec.shape is None:
                    tensors = [n for n, t in defn.inputs.items() if t.shape is not None]
                    self.err(vn, f"{w}.{out}", f"{inp!r} is not a tensor input of the definition",
                             f"name the input that {out} is written into, one of {_fmt(tensors)}")
                elif (spec.shape, spec.dtype) != (o.shape, o.dtype):
                    self.err(vn, f"{w}.{out}", f"output {out} ({o.dtype} [{_fmt(o.shape or [])}]) cannot be written "
                             f"into input {inp} ({spec.dtype} [{_fmt(spec.shape)}])",
                             "give them the same shape and dtype in the definition, or correct the pair")
                else:
                    pairs[out] = inp
            f["in_place"] = tuple(pairs.items())
        rest = [o for o in defn.outputs if o not in pairs]
        if "returns" not in m:
            return
        node, w = m["returns"][1], f"{where}.returns"
        example = f"returns: [{', '.join(str(i) for i in range(len(rest)))}] or {{{rest[0] if rest else 'y'}: 0}}"
        raw = self.value(node)
        if isinstance(raw, Mapping):
            unknown, missing = [k for k in raw if k not in rest], [o for o in rest if o not in raw]
            if unknown or missing:
                what = (f"{_fmt(unknown)} {'is' if len(unknown) == 1 else 'are'} not an output returned by the entry point"
                        if unknown else f"no place given for output(s) {_fmt(missing)}")
                self.err(node, w, what, f"name each output not written in place ({_fmt(rest) or 'none'}) once, e.g. "
                         f"{example}")
                return
            places = [raw[o] for o in rest]
        else:
            places = raw if isinstance(raw, list) else [raw]
            if len(places) != len(rest):
                self.err(node, w, f"{len(places)} place(s) for {len(rest)} returned output(s) ({_fmt(rest) or 'none'})",
                         f"give one place per output, in the definition's order, e.g. {example}")
                return
        for p in places:
            if isinstance(p, bool) or not (isinstance(p, int) and p >= 0 or isinstance(p, str) and p.isidentifier()):
                self.err(node, w, f"{p!r} is neither an index (0, 1, ...) nor a name",
                         f"write an index into the returned tuple or the key/attribute holding the output, e.g. {example}")
                return
        f["returns"] = tuple(places)

    def guard_shapes(self, node: yaml.Node, where: str, defn: Definition, f: dict[str, Any]) -> None:
        """``guard_shapes: false`` (the final gate times only the listed workloads) or a list of axis
        values the gate times besides the guard shapes it derives (runner/guard.py)."""
        raw = self.value(node) if isinstance(node, yaml.ScalarNode) else None
        fix = ("write guard_shapes: false to turn guard shapes off, or a list of axis values such as "
               f"[{{{', '.join(f'{a}: 3000' for a in defn.var_axes) or 'M: 3000'}}}]")
        if isinstance(node, yaml.ScalarNode):
            if raw is False:
                f["guard"] = False
            elif raw is not True:
                self.err(node, where, f"expected false or a list of axis values, got {raw!r}", fix)
            return
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            self.err(node, where, "expected false or a non-empty list of axis values", fix)
            return
        shapes: list[dict[str, int]] = []
        for i, item in enumerate(node.value):
            w = f"{where}[{i}]"
            if not isinstance(item, yaml.MappingNode):
                self.err(item, w, "expected a mapping of axis values", fix)
                continue
            axes = {k: self.value(v) for k, (_, v) in self.pairs(item).items()}
            if self.check_workload(item, w, defn, axes, None):
                shapes.append({k: int(v) for k, v in axes.items()})
        f["guard_shapes"] = tuple(shapes)

    def tolerances(self, node: yaml.Node, where: str, defn: Definition | None) -> Tolerance | None:
        """``{atol, rtol}`` for every output, and ``{OUTPUT: {atol, rtol}}`` for one output."""
        # Without a valid definition (its own error is reported) any output name is let through.
        names = tuple(defn.outputs) if defn is not None else tuple(
            self.pairs(node) if isinstance(node, yaml.MappingNode) else ())
        tm = self.mapping(node, where, (*TOLERANCE_KEYS, *names),
                          what="a mapping like {atol: 1.0e-5, rtol: 1.0e-5} (per output: {y: {atol: 1.0e-2}})")
        if tm is None:
            return None
        n_errors = len(self.errors)
        own: dict[str, Tolerance] = {}
        top: dict[str, float | None] = {}
        for k, (_, v) in tm.items():
            if k in TOLERANCE_KEYS:
                top[k] = self.number(v, f"{where}.{k}")
                continue
            om = self.mapping(v, f"{where}.{k}", TOLERANCE_KEYS,
                              what=f"a mapping like {{atol: 1.0e-2, rtol: 1.0e-2}} for output {k}")
            if om is not None:
                vals = {t: self.number(x, f"{where}.{k}.{t}") for t, (_, x) in om.items()}
                own[k] = Tolerance(vals.get("atol"), vals.get("rtol"))
        if len(self.errors) > n_errors:
            return None
        return Tolerance(top.get("atol"), top.get("rtol"), tuple(own.items()))

    def launch(self, node: yaml.Node, where: str, defn: Definition | None, entry_point: str | None,
               language: str | None) -> Launch | None:
        if language is not None and language != "cuda":
            self.err(node, where, f"'launch' describes how to call a raw CUDA kernel, but language is {language}",
                     "remove launch, or set language: cuda")
            return None
        if defn is None or entry_point is None:
            return None
        tensors = {**defn.inputs, **defn.outputs}
        launch, problems = parse_launch(
            self.value(node), entry_point.split("::")[1], list(defn.inputs), list(defn.outputs),
            {n: t.shape for n, t in tensors.items()}, {n: t.dtype for n, t in tensors.items()},
            {n: int(a.value) for n, a in defn.axes.items() if a.type == "const" and a.value is not None},
        )
        for p in problems:
            sub, path = node, where
            for step in p.where:
                if isinstance(step, int) and isinstance(sub, yaml.SequenceNode) and step < len(sub.value):
                    sub, path = sub.value[step], f"{path}[{step}]"
                elif isinstance(step, str) and isinstance(sub, yaml.MappingNode) and step in (pm := self.pairs(sub)):
                    sub, path = pm[step][1], f"{path}.{step}"
                else:
                    path = f"{path}.{step}" if isinstance(step, str) else f"{path}[{step}]"
            self.err(sub, path, p.what, p.fix)
        return launch

    def _locate(self, node: yaml.Node, msg: str) -> yaml.Node:
        """Best guess at the node of an inline definition that a FormatError message names."""
        if not isinstance(node, yaml.MappingNode):
            return node
        m = self.pairs(node)
        for sect, key in re.findall(r"\.(axes|inputs|outputs)\.([A-Za-z0-9_]+)", msg):
            if (
                sect in m
                and isinstance(sub := m[sect][1], yaml.MappingNode)
                and key in (sm := self.pairs(sub))
            ):
                return sm[key][1]
        if t := re.search(r"tensor '([^']+)'", msg):
            for sect in ("inputs", "outputs"):
                if (
                    sect in m
                    and isinstance(sub := m[sect][1], yaml.MappingNode)
                    and t[1] in (sm := self.pairs(sub))
                ):
                    return sm[t[1]][1]
        for key in ("reference", "constraints", "op_type", "name"):
            if key in msg and key in m:
                return m[key][1]
        return node

    def definition(self, node: yaml.Node, where: str, default_name: str) -> Definition | None:
        if isinstance(node, yaml.ScalarNode):
            path = self.string(node, where, _FIX["definition"])
            full = self.repo_file(node, where, path) if path is not None else None
            if full is None:
                return None
            try:
                return Definition.from_json(load_json(full))
            except _FORMAT_ERRORS as e:
                self.err(node, where, f"'{path}' is not a valid FlashInfer-Trace definition: {e}",
                         "correct the definition JSON (see flashinfer-bench's Definition schema)")
                return None
        dm = self.mapping(node, where, DEFINITION_KEYS, ("op_type", "axes", "inputs", "outputs", "reference"),
                          "a definition path or an inline definition mapping")
        if dm is None or not all(
            k in dm for k in ("op_type", "axes", "inputs", "outputs", "reference")
        ):
            return None
        d = {k: self.value(v) for k, (_, v) in dm.items()}
        d.setdefault("name", default_name)
        try:
            return Definition.from_json(d)
        except _FORMAT_ERRORS as e:
            self.err(self._locate(node, str(e)), where, str(e), "correct the inline definition")
            return None

    def workloads(self, node: yaml.Node, where: str, defn: Definition) -> list[Workload] | None:
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            self.err(node, where, "expected a non-empty list", _FIX["workloads"])
            return None
        out: list[Workload] = []
        n_errors = len(self.errors)
        for i, item in enumerate(node.value):
            w = f"{where}[{i}]"
            if isinstance(item, yaml.ScalarNode):
                path = self.string(item, w, _FIX["workloads"])
                full = self.repo_file(item, w, path) if path is not None else None
                if full is None or path is None:
                    continue
                try:
                    loaded = load_workloads(full)
                except _FORMAT_ERRORS as e:
                    self.err(item, w, f"'{path}' is not a workload JSONL file: {e}",
                             "write one FlashInfer-Trace workload (or workload trace) per line")
                    continue
                if not loaded:
                    self.err(
                        item, w, f"'{path}' holds no workloads", "add at least one workload line"
                    )
                for j, wl in enumerate(loaded):
                    if self.check_workload(
                        item, f"{w} ('{path}' line {j + 1})", defn, wl.axes, wl.inputs
                    ):
                        out.append(wl)
            elif isinstance(item, yaml.MappingNode) and "axes" in self.pairs(item):
                wm = self.mapping(item, w, WORKLOAD_KEYS)
                if wm is not None:
                    wl2 = self.full_workload(item, w, defn, wm)
                    if wl2 is not None:
                        out.append(wl2)
            elif isinstance(item, yaml.MappingNode):
                axes = {k: self.value(v) for k, (_, v) in self.pairs(item).items()}
                scalars = [n for n, s in defn.inputs.items() if s.shape is None]
                if scalars:
                    self.err(item, w, f"definition {defn.name} has scalar inputs ({_fmt(scalars)}) that need values",
                             f"use the full form: {{axes: {{...}}, inputs: {{{scalars[0]}: {{type: scalar, value: 1.0}}}}}}")
                elif self.check_workload(item, w, defn, axes, None):
                    out.append(Workload.make(defn, axes))
            else:
                self.err(
                    item,
                    w,
                    "expected axis values, a workload mapping or a .jsonl path",
                    _FIX["workloads"],
                )
        return out if len(self.errors) == n_errors else None

    def full_workload(self, node: yaml.Node, where: str, defn: Definition,
                      wm: dict[str, tuple[yaml.Node, yaml.Node]]) -> Workload | None:
        axes = self.value(wm["axes"][1])
        if not isinstance(axes, Mapping):
            self.err(
                wm["axes"][1],
                f"{where}.axes",
                "expected a mapping of axis values",
                "write e.g. axes: {M: 1024}",
            )
            return None
        inputs = self.value(wm["inputs"][1]) if "inputs" in wm else {}
        if not isinstance(inputs, Mapping) or not all(
            isinstance(v, Mapping) for v in inputs.values()
        ):
            self.err(wm["inputs"][1], f"{where}.inputs", "expected a mapping of input name -> recipe",
                     "write e.g. inputs: {x: {type: random}, eps: {type: scalar, value: 1.0e-6}}")
            return None
        recipes: dict[str, Any] = {}
        for name, spec in defn.inputs.items():
            r = dict(inputs.get(name, {"type": "random"} if spec.shape is not None else {}))
            if r.get("type") == "scalar" and isinstance(r.get("value"), str):
                with contextlib.suppress(ValueError):
                    r["value"] = float(r["value"])
            recipes[name] = r
        recipes.update({k: dict(v) for k, v in inputs.items() if k not in defn.inputs})
        uuid = self.value(wm["uuid"][1]) if "uuid" in wm else None
        if not self.check_workload(node, where, defn, axes, recipes):
            return None
        try:
            return Workload.from_json({"axes": axes, "inputs": recipes,
                                       "uuid": str(uuid) if uuid else Workload.make(defn, axes).uuid})
        except _FORMAT_ERRORS as e:
            self.err(wm.get("inputs", wm["axes"])[1], where, str(e), "correct the input recipes")
            return None

    def check_workload(self, node: yaml.Node, where: str, defn: Definition, axes: Mapping[Any, Any],
                       inputs: Mapping[str, Any] | None) -> bool:
        ok = True
        var = defn.var_axes
        for k, v in axes.items():
            if k not in var:
                kind = "a const axis" if k in defn.axes else "not an axis"
                self.err(node, where, f"'{k}' is {kind} of definition {defn.name} (its variable axes: {_fmt(var) or 'none'})",
                         f"remove '{k}'" + (f" or use one of {_fmt(var)}" if var else ""))
                ok = False
            elif isinstance(v, bool) or not isinstance(v, int) or v < 0:
                self.err(
                    node,
                    where,
                    f"axis {k} = {v!r} is not a non-negative integer",
                    f"write e.g. {k}: 1024",
                )
                ok = False
        if missing := [a for a in var if a not in axes]:
            self.err(node, where, f"no value for variable axes {_fmt(missing)} of definition {defn.name}",
                     f"add {', '.join(f'{a}: <size>' for a in missing)}")
            ok = False
        if inputs is not None:
            if unknown := [k for k in inputs if k not in defn.inputs]:
                self.err(node, where, f"inputs {_fmt(unknown)} are not inputs of definition {defn.name} "
                         f"({_fmt(defn.inputs)})", f"remove {_fmt(unknown)}")
                ok = False
            if missing := [k for k in defn.inputs if not inputs.get(k)]:
                self.err(node, where, f"no recipe for inputs {_fmt(missing)}",
                         f"add e.g. {missing[0]}: {{type: scalar, value: 1.0}} under inputs")
                ok = False
        return ok

    def formula(self, node: yaml.Node, where: str, defn: Definition | None) -> str | None:
        v = self.value(node)
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            self.err(node, where, f"expected an expression, got {v!r}", 'write e.g. "2*M*N*K"')
            return None
        text = str(v)
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as e:
            self.err(
                node,
                where,
                f"{text!r} is not a Python expression ({e.msg})",
                'write e.g. "2*M*N*K"',
            )
            return None
        allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Constant, ast.Name, ast.Load, ast.Call,
                   ast.operator, ast.unaryop)
        axes = set(defn.axes) if defn is not None else None
        for n in ast.walk(tree):
            if not isinstance(n, allowed) or (
                isinstance(n, ast.Constant) and not isinstance(n.value, (int, float))
            ):
                self.err(node, where, f"{text!r} may only use numbers, axis names, + - * / // % ** and "
                         f"{_fmt(FORMULA_FUNCTIONS)}", 'write e.g. "2*M*N*K"')
                return None
            if isinstance(n, ast.Call) and not (
                isinstance(n.func, ast.Name) and n.func.id in FORMULA_FUNCTIONS
            ):
                self.err(node, where, f"{text!r} calls something other than {_fmt(FORMULA_FUNCTIONS)}",
                         'write e.g. "2*M*N*K"')
                return None
            if (
                isinstance(n, ast.Name)
                and n.id not in FORMULA_FUNCTIONS
                and axes is not None
                and n.id not in axes
            ):
                self.err(node, where, f"'{n.id}' in {text!r} is not an axis of the definition ({_fmt(sorted(axes))})",
                         "use only the definition's axis names")
                return None
        return text


def parse_config(text: str, filename: str, repo_root: Path) -> Config:
    """Parse and validate config text; ``filename`` is what messages call the file."""
    p = _Parser(filename, Path(repo_root))
    try:
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        what = _clean(": ".join(x for x in (e.context, e.problem) if x)) or "syntax error"
        raise ConfigError(f"{filename}:{line}:{col}: not valid YAML ({what}). Fix: check the indentation, "
                          f"colons and quoting at line {line}, column {col}.") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{filename}:1: not valid YAML ({_clean(str(e))}). Fix: save the file as "
                          "UTF-8 text in YAML syntax.") from None
    try:
        version, targets = p.document(root)
    except yaml.MarkedYAMLError as e:
        p.yaml_error(e)
        version, targets = 1, []
    if p.errors:
        raise ConfigError(msg for _, msg in sorted(p.errors, key=lambda e: e[0]))
    path = Path(filename)
    return Config(path=path if path.is_absolute() else Path(repo_root) / path, version=version,
                  targets=tuple(targets), tools=tuple(p.tools), energy=p.energy)


def load_config(path: Path, repo_root: Path | None = None) -> Config:
    """Read ``.kernelpro.yml``; definition and workload paths resolve under ``repo_root``
    (default: the file's folder)."""
    path = Path(path)
    root = Path(repo_root) if repo_root is not None else path.parent
    try:
        name = str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{name}: file not found. Fix: add a {CONFIG_NAME} at the repository root."
        ) from None
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"{name}:1: not UTF-8 text ({e.reason}). Fix: save the file as UTF-8."
        ) from None
    cfg = parse_config(text, name, root)
    return Config(path=path, version=cfg.version, targets=cfg.targets, tools=cfg.tools, energy=cfg.energy)
