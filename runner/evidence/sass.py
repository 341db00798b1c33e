"""SASS: what the compiled binary contains, from `cuobjdump --dump-sass` (and `nm -D` for cuBLAS).

Static instruction counts answer questions ncu cannot answer reliably: does the kernel use the
tensor cores at all and which generation (HMMA = mma.sync, HGMMA = Hopper's wgmma), does it use
cp.async (LDGSTS) or TMA (UTMALDG/UBLKCP), does it spill (STL/LDL), how wide are its global loads.
No GPU is needed: CI runs this on cubins built by nvcc and on recorded Triton output.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from kernelpro.runner import confinement
from kernelpro.runner.evidence import SassStats

__all__ = [
    "FAMILIES",
    "SassError",
    "disassemble",
    "find_cuobjdump",
    "parse_sass",
    "sass_stats",
    "triton_cubins",
    "uses_cublas",
]

# Opcode families always present in SassStats.counts (0 when absent), so a tool can tell "none"
# from "not looked for". Any other opcode found is counted too, under its own family.
FAMILIES: tuple[str, ...] = (
    # Tensor cores: Hopper warpgroup MMA (fp16/bf16/tf32, fp8, int8, binary), then mma.sync ones.
    "HGMMA", "QGMMA", "IGMMA", "BGMMA", "HMMA", "IMMA", "DMMA", "BMMA",
    # Asynchronous copies: cp.async (LDGSTS), TMA tensor loads/stores, bulk copies.
    "LDGSTS", "UTMALDG", "UTMASTG", "UTMAPF", "UBLKCP",
    # Local memory (spills, dynamically indexed local arrays).
    "STL", "LDL",
    # Memory and barriers.
    "LDG", "STG", "LDS", "STS", "LDSM", "BAR",
    # Special functions and fp32 arithmetic.
    "MUFU", "FFMA", "FADD", "FMUL",
)


class SassError(RuntimeError):
    """cuobjdump is missing, or it could not disassemble the file."""


# --------------------------------------------------------------------------------------------
# Finding and running cuobjdump
# --------------------------------------------------------------------------------------------


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_cuobjdump(override: str | None = None) -> str | None:
    """``override`` (Settings.cuobjdump_tool, KERNELPRO_CUOBJDUMP), PATH, $CUDA_HOME/bin, then the
    copy the triton wheel ships.

    The last one matters on CI: the CPU image has nvcc but not the whole toolkit, while
    `triton/backends/nvidia/bin/` carries cuobjdump + nvdisasm for Triton's own use.
    """
    if override:
        found = override if _executable(Path(override)) else shutil.which(override)
        if found:
            return found
    found = shutil.which("cuobjdump")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and _executable(Path(home) / "bin" / "cuobjdump"):
            return str(Path(home) / "bin" / "cuobjdump")
    # find_spec locates the package without importing it (importing triton takes seconds).
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for root in spec.submodule_search_locations:
            candidate = Path(root) / "backends" / "nvidia" / "bin" / "cuobjdump"
            if _executable(candidate):
                return str(candidate)
    return None


def disassemble(path: Path, cuobjdump: str | None = None, *, timeout_s: float = 120) -> str:
    """`cuobjdump --dump-sass` of a cubin, a shared object or an executable ('' if it has no
    device code). Raises SassError when cuobjdump is missing or fails (not a CUDA binary)."""
    tool = cuobjdump or find_cuobjdump()
    if tool is None:
        raise SassError(
            "cuobjdump not found: install the CUDA toolkit, `pip install triton` (it ships one), "
            "or set KERNELPRO_CUOBJDUMP"
        )
    path = Path(path)
    if not path.is_file():
        raise SassError(f"cannot disassemble {path}: no such file")
    try:
        # Confined: the cubin comes from a candidate's cache, and cuobjdump parses it.
        p = confinement.run_tool([tool, "--dump-sass", str(path)], [path.parent], timeout_s)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SassError(f"{tool} --dump-sass {path} failed: {e}") from e
    if "does not contain device code" in p.stderr:
        # A host-only library (one that only calls cuBLAS, say): no SASS, and that is an answer.
        return ""
    if p.returncode != 0:
        # stderr also carries a harmless "nvdisasm warning : Disassembling Std Elf to Old format"
        # on Triton cubins, so only a non-zero exit is an error.
        raise SassError(
            f"{tool} --dump-sass {path} exited with {p.returncode}: {p.stderr.strip()[-500:]}"
        )
    return p.stdout


# --------------------------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------------------------

# "        /*00c0*/              @!P0 LDG.E R0, desc[UR4][R2.64] ;   /* 0x0000000402008981 */"
# The address comment introduces an instruction; the trailing /* 0x... */ (and the next line,
# which holds only the second half of the encoding) are the binary, not instructions.
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$")
_ARCH = re.compile(r"code for (sm_\w+)")
_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_ADDRESS = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/")
_TARGET = re.compile(r"\bBRA(?:\.\S+)?\s+(?:`?\(?)0x([0-9a-fA-F]+)")
# Width modifiers of a load: LDG.E.128, LDG.E.64.CONSTANT, LDG.E.U8, LDG.E.S16 ...
# (LTC128B is an L2 prefetch hint, not a width; it does not match these exact tokens).
_WIDTHS = {"8": 8, "U8": 8, "S8": 8, "16": 16, "U16": 16, "S16": 16,
           "32": 32, "64": 64, "128": 128}


def _mnemonic(body: str) -> str | None:
    """'@!P1 LDG.E.128 R4, desc[...]' -> 'LDG.E.128' (predicate stripped)."""
    tokens = body.replace("{", " ").replace("}", " ").split()
    while tokens and tokens[0].startswith("@"):
        tokens = tokens[1:]
    if not tokens:
        return None
    return tokens[0].rstrip(";") or None


def _arch_number(arch: str) -> int:
    m = re.search(r"(\d+)", arch)
    return int(m[1]) if m else 0


def parse_sass(text: str, arch: str | None = None) -> SassStats:
    """cuobjdump --dump-sass output -> static counts per opcode family.

    A fat binary holds one section per target ("code for sm_80", "code for sm_90a"); counting all
    of them would add up code that never runs together, so only the sections of one target are
    counted: `arch` if given, else the newest one present (what a Hopper runner executes).
    """
    sections: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        m = _ARCH.search(line)
        if m:
            current = []
            sections.append((m[1], current))
        elif current is not None:
            current.append(line)
    if not sections:  # a bare listing without the header: count it all
        sections = [("", text.splitlines())]
    chosen = arch or max((a for a, _ in sections), key=_arch_number)

    counts: Counter[str] = Counter({f: 0 for f in FAMILIES})
    widths: Counter[int] = Counter()
    functions: list[str] = []
    total = back = 0
    for section_arch, lines in sections:
        if section_arch != chosen:
            continue
        for line in lines:
            fm = _FUNCTION.match(line)
            if fm:
                if fm[1] not in functions:
                    functions.append(fm[1])
                continue
            im = _INSTRUCTION.match(line)
            if not im:
                continue
            mnemonic = _mnemonic(im[1])
            if mnemonic is None:
                continue
            family, *modifiers = mnemonic.split(".")
            counts[family] += 1
            total += 1
            if family == "BRA":
                # A loop closes with a branch back; cuobjdump prints absolute targets.
                am, tm = _ADDRESS.match(line), _TARGET.search(im[1])
                if am and tm and int(tm[1], 16) < int(am[1], 16):
                    back += 1
            if family == "LDG":
                # Plain LDG.E is a 32-bit load; .64/.128 vectorised; .U8/.S16 narrow.
                bits = next((_WIDTHS[m] for m in modifiers if m in _WIDTHS), 32)
                widths[bits] += 1
    counts["total"] = total
    return SassStats(
        arch=chosen,
        counts=dict(counts),
        global_load_bits=dict(sorted(widths.items())),
        functions=tuple(functions),
        backward_branches=back,
    )


# --------------------------------------------------------------------------------------------
# Libraries and Triton's cache
# --------------------------------------------------------------------------------------------


def uses_cublas(path: Path) -> bool:
    """Does this shared object (or executable) link cuBLAS? From its dynamic symbols (`nm -D`).

    A kernel that calls cublasGemmEx does its tensor-core work in library kernels, which the
    candidate's own SASS does not show: the tools must not report "no tensor cores" for it.
    False when nm is missing or the file is not an ELF object with dynamic symbols (a cubin).
    """
    nm = shutil.which("nm")
    path = Path(path)
    if nm is None or not path.is_file():
        return False
    with path.open("rb") as f:
        if f.read(4) != b"\x7fELF":
            return False
    try:
        p = confinement.run_tool([nm, "-D", str(path)], [path.parent], 60)  # a candidate's build: confined
    except (OSError, subprocess.TimeoutExpired):
        return False
    if p.returncode != 0:
        return False
    # Lines look like "                 U cublasCreate_v2@libcublas.so.13": the name is last.
    return any(
        line.split()[-1].startswith("cublas") for line in p.stdout.splitlines() if line.split()
    )


def triton_cubins(cache_dir: Path) -> list[Path]:
    """Every cubin Triton wrote under its cache (TRITON_CACHE_DIR), oldest first."""
    cache_dir = Path(cache_dir)
    if not cache_dir.is_dir():
        return []
    return sorted(cache_dir.rglob("*.cubin"), key=lambda p: (p.stat().st_mtime, str(p)))


def launched_cubins(cache_dir: Path, launches: Sequence[tuple[str, int]]) -> list[Path]:
    """The cubins of the kernels that ran: (name, threads per block) of each profiled launch, matched
    against the metadata Triton writes beside each cubin. An autotuned kernel leaves one cubin per
    config it tried; only the config that ran says anything about the candidate (and disassembling
    every one cost seconds). Every cubin when nothing matches or nothing is known."""
    cubins = triton_cubins(cache_dir)
    picked = []
    for c in cubins:
        try:
            meta = json.loads(c.with_suffix(".json").read_text())
        except (OSError, ValueError):
            continue
        name, warps = meta.get("name", c.stem), meta.get("num_warps")
        if any(n == name and (not isinstance(warps, int) or not threads or warps * 32 == threads) for n, threads in launches):
            picked.append(c)
    return picked or cubins


def sass_stats(path: Path, cuobjdump: str | None = None) -> SassStats:
    """disassemble + parse_sass + uses_cublas: the SassStats of one built binary."""
    stats = parse_sass(disassemble(path, cuobjdump))
    if path.suffix == ".cubin":
        return stats
    return SassStats(
        arch=stats.arch,
        counts=stats.counts,
        global_load_bits=stats.global_load_bits,
        functions=stats.functions,
        uses_cublas=uses_cublas(path),
        backward_branches=stats.backward_branches,
    )
