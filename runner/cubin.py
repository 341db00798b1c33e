"""Cubin: a raw CUDA kernel compiled for one GPU architecture, built once per content.

``nvcc -cubin -gencode=arch=compute_90a,code=sm_90a`` turns a Solution's .cu (and the headers it
includes) into a cubin the driver loads directly, with no host code, no linker and no torch
extension (a 10-line ``load_inline`` extension took 72 s on the H200; a cubin takes ~1.5 s).

Builds are content-addressed: the key hashes every source file, the flags, the architecture and
nvcc's own version string, so identical sources are never compiled twice, a changed byte in any
header is a new build, and a toolkit upgrade invalidates everything. A per-key file lock makes a
build that is already running elsewhere (the loop's pre-build pool, another candidate's child
process) a wait instead of a second compile. Compile errors are cached too: the same broken source
fails in microseconds the next time.

Candidate sources are hostile: nvcc runs with an environment rebuilt from an allowlist (an
``#include "/proc/self/environ"`` would otherwise print the parent's secrets into the build log)
and includes may not leave the solution (absolute, ``..`` and computed ``#include``s are refused).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from . import confinement
from .toolkit import find_tool, first_visible_gpu

__all__ = [
    "DEFAULT_FLAGS",
    "Build",
    "BuildPool",
    "arch_for",
    "build",
    "build_solution",
    "cache_root",
    "default_arch",
    "find_nvcc",
    "locked",
    "prebuild",
    "unsafe_include",
]

# -O3 is nvcc's default for device code, spelled out so the key says it; -lineinfo costs nothing at
# run time and lets ncu attribute stalls to source lines; -Xptxas -v puts registers, spills and
# shared memory per kernel into the build log the programmer sees.
DEFAULT_FLAGS: tuple[str, ...] = ("-O3", "-std=c++17", "-lineinfo", "-Xptxas", "-v")
CUBIN_NAME = "kernel.cubin"
_ENV_ALLOWED = ("PATH", "LANG", "LC_ALL", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?P<spec>"[^"\n]*"|<[^>\n]*>|[^\s]+)', re.M)
_LOG_TAIL = 8000


@dataclass(frozen=True)
class Build:
    """The outcome of compiling one solution's CUDA sources."""

    status: str
    """'OK' or 'COMPILE_ERROR'."""
    cubin: Path | None
    """The compiled binary in the cache when OK."""
    log: str
    """nvcc's output (ptxas -v resource usage when OK, the errors otherwise)."""
    seconds: float
    """Wall time of this call, waiting for a concurrent build included."""
    cached: bool
    """True when the result came from the cache without compiling."""
    key: str
    """Content hash: sources, flags, architecture, nvcc version."""

    @property
    def ok(self) -> bool:
        return self.status == "OK"


def find_nvcc() -> str | None:
    """nvcc on PATH, else under $CUDA_HOME / $CUDA_PATH / /usr/local/cuda."""
    return find_tool("nvcc")


@functools.lru_cache(maxsize=8)
def _nvcc_version(nvcc: str) -> str:
    p = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, env=_env(None))
    return p.stdout.strip().splitlines()[-1] if p.stdout.strip() else p.stderr.strip()


def arch_for(major: int, minor: int) -> str:
    """The nvcc architecture for a compute capability. Hopper (9.0) and Blackwell (10.x) get the
    'a' variant so wgmma / tcgen05 are available: the cubin only ever runs on the GPU it was built for."""
    return f"sm_{major}{minor}" + ("a" if major in (9, 10) else "")


def default_arch() -> str:
    """The visible GPU's architecture, from nvidia-smi so the calling process does not initialise
    CUDA (the loop's parent process never touches the GPU); sm_90a (H100/H200) without a GPU.
    nvidia-smi is asked about the GPU CUDA children see first (it ignores CUDA_VISIBLE_DEVICES).
    The harness child asks torch instead; when the two disagree the child simply builds its own."""
    smi = shutil.which("nvidia-smi")
    if smi:
        gpu = first_visible_gpu(os.environ.get("CUDA_VISIBLE_DEVICES"))
        with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
            p = subprocess.run([smi, *(["-i", gpu] if gpu else []), "--query-gpu=compute_cap", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30, env=_env(None))
            first = p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else ""
            if re.fullmatch(r"[0-9]+\.[0-9]+", first.strip()):
                major, minor = first.strip().split(".")
                return arch_for(int(major), int(minor))
    return "sm_90a"


def cache_root(shared_cache: Path) -> Path:
    """Where cubins live inside the cache directory candidates share (the sandbox hands it to them as
    TRITON_CACHE_DIR); the profiler's SASS step finds them there like Triton's own cubins."""
    return Path(shared_cache) / "kernelpro-cuda"


def _env(work: Path | None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _ENV_ALLOWED if k in os.environ}
    if work is not None:
        env.update(HOME=str(work), TMPDIR=str(work))
    return env


def _key(sources: Mapping[str, str], entry: str, arch: str, flags: Sequence[str], version: str) -> str:
    h = hashlib.sha256()
    for part in ("kernelpro-cubin-1", version, arch, entry, *flags,
                 *(p for path in sorted(sources) for p in (path, sources[path]))):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def unsafe_include(sources: Mapping[str, str]) -> str | None:
    """Why the sources may not be compiled (an include that leaves the solution), or None."""
    for path, text in sources.items():
        for m in _INCLUDE.finditer(text):
            spec = m["spec"]
            if spec[0] not in "<\"":
                return f"{path}: '#include {spec}' is a computed include; write the header name literally"
            name = spec[1:-1].strip()
            p = PurePosixPath(name)
            if p.is_absolute() or ".." in p.parts or name.startswith("~"):
                return f"{path}: '#include {spec}' reaches outside the solution; include only its own files and system headers"
    return None


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (created if missing), across threads and processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cached(entry_dir: Path, key: str, t0: float) -> Build | None:
    meta = entry_dir / "build.json"
    if not meta.is_file():
        return None
    try:
        d = json.loads(meta.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    cubin = entry_dir / CUBIN_NAME
    if d.get("status") == "OK" and not cubin.is_file():
        return None
    return Build(d["status"], cubin if d["status"] == "OK" else None, d.get("log", ""), time.perf_counter() - t0,
                 True, key)


def build(sources: Mapping[str, str], entry: str, cache: Path, *, arch: str, flags: Sequence[str] = DEFAULT_FLAGS,
          nvcc: str | None = None, timeout_s: float = 300.0, compiler: str = "nvcc") -> Build:
    """Compile ``entry`` (a path in ``sources``) to a cubin for ``arch`` (e.g. 'sm_90a'), or return
    the cached result of an identical earlier build. ``compiler``: 'nvcc' (a subprocess), 'nvrtc'
    (in this process: only inside a sandboxed child) or 'auto' (nvcc, else NVRTC)."""
    t0 = time.perf_counter()
    tool = (nvcc or find_nvcc()) if compiler in ("nvcc", "auto") else None
    if tool is None and compiler in ("nvrtc", "auto"):
        from .nvrtc import NVRTC_FLAGS, find_nvrtc, nvrtc_version

        lib = find_nvrtc()
        if lib is not None:
            tool, flags = f"nvrtc:{lib}", NVRTC_FLAGS
    if tool is None:
        return Build("COMPILE_ERROR", None, "nvcc not found: install the CUDA toolkit (nvcc) or set CUDA_HOME"
                     + (", or install NVRTC (the nvidia-cuda-nvrtc wheel)" if compiler != "nvcc" else ""),
                     time.perf_counter() - t0, False, "")
    if not re.fullmatch(r"sm_[0-9]+[af]?", arch):
        raise ValueError(f"architecture {arch!r} is not like sm_90a")
    if entry not in sources:
        return Build("COMPILE_ERROR", None, f"entry file {entry} is not among the sources", 0.0, False, "")
    unsafe = unsafe_include(sources)
    if unsafe is not None:
        return Build("COMPILE_ERROR", None, unsafe, time.perf_counter() - t0, False, "")
    version = nvrtc_version(tool.removeprefix("nvrtc:")) if tool.startswith("nvrtc:") else _nvcc_version(tool)
    key = _key(sources, entry, arch, flags, version)
    entry_dir = Path(cache) / key[:2] / key
    hit = _cached(entry_dir, key, t0)
    if hit is not None:
        return hit
    with locked(Path(cache) / key[:2] / f"{key}.lock"):
        hit = _cached(entry_dir, key, t0)  # built by whoever held the lock before us
        if hit is not None:
            return hit
        return _compile(sources, entry, entry_dir, arch, flags, tool, timeout_s, key, t0)


def _compile(sources: Mapping[str, str], entry: str, entry_dir: Path, arch: str, flags: Sequence[str], tool: str,
             timeout_s: float, key: str, t0: float) -> Build:
    entry_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".build-", dir=entry_dir.parent) as tmp:
        work = Path(tmp)
        src = work / "src"
        for path, text in sources.items():
            dest = src / PurePosixPath(path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
        out = work / CUBIN_NAME
        if tool.startswith("nvrtc:"):
            from .nvrtc import compile_cubin

            image, log, source_fault = compile_cubin(tool.removeprefix("nvrtc:"), sources[entry], entry, arch,
                                                     [(src / PurePosixPath(entry)).parent, src, *_toolkit_includes()],
                                                     flags)
            if image is None and not source_fault:  # NVRTC itself failed: not cached, not the source's fault
                return Build("COMPILE_ERROR", None, log[-_LOG_TAIL:], time.perf_counter() - t0, False, key)
            if image is not None:
                out.write_bytes(image)
            return _store(entry_dir, work, out, image is not None, log, ["nvrtc", *flags], key, t0)
        number = arch.removeprefix("sm_")
        cmd = [tool, "-cubin", f"-gencode=arch=compute_{number},code=sm_{number}", *flags,
               "-I", str((src / PurePosixPath(entry)).parent), "-I", str(src), "-o", str(out), str(src / entry)]
        # The source is a candidate's: nvcc reads the system and the toolkit, writes only its folder (an
        # #include of a secret file, or of /proc/self/environ, finds nothing to print).
        run = confinement.command(cmd, confinement.policy([work])) if confinement.landlock_abi() else cmd
        try:
            p = subprocess.run(run, cwd=src, env=_env(work), capture_output=True, text=True, timeout=timeout_s,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            # Not cached: a loaded machine may finish it next time.
            return Build("COMPILE_ERROR", None, f"nvcc did not finish within {timeout_s:.0f} s",
                         time.perf_counter() - t0, False, key)
        log = (p.stdout + p.stderr).replace(str(src) + "/", "")
        if p.returncode < 0:  # killed by a signal (out of memory, say): not the source's fault
            return Build("COMPILE_ERROR", None, f"nvcc was killed (signal {-p.returncode})\n{log[-_LOG_TAIL:]}",
                         time.perf_counter() - t0, False, key)
        return _store(entry_dir, work, out, p.returncode == 0 and out.is_file(), log, cmd[1:-1], key, t0)


def _toolkit_includes() -> list[Path]:
    """The toolkit's headers (cuda_fp16.h, ...) for NVRTC, when a toolkit is installed."""
    homes = (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")
    return [Path(h) / "include" for h in homes if h and (Path(h) / "include" / "cuda_fp16.h").is_file()][:1]


def _store(entry_dir: Path, work: Path, out: Path, ok: bool, log: str, command: list[str], key: str,
           t0: float) -> Build:
    """Move a finished build (success or compile error) into the cache, atomically."""
    src = work / "src"
    log = log.replace(str(src) + "/", "")
    log = log if len(log) <= _LOG_TAIL else "...\n" + log[-_LOG_TAIL:]
    staged = work / "entry"
    staged.mkdir()
    if ok:
        out.replace(staged / CUBIN_NAME)
    (staged / "build.json").write_text(json.dumps({"status": "OK" if ok else "COMPILE_ERROR", "log": log,
                                                  "command": command, "seconds": time.perf_counter() - t0}))
    if entry_dir.exists():  # a stale, incomplete entry (a killed build); ours replaces it
        shutil.rmtree(entry_dir, ignore_errors=True)
    staged.replace(entry_dir)
    return Build("OK" if ok else "COMPILE_ERROR", entry_dir / CUBIN_NAME if ok else None, log,
                 time.perf_counter() - t0, False, key)


def _sources_of(solution: Any) -> tuple[dict[str, str], str]:
    """(path -> text, entry file) of a Solution record or its JSON form."""
    if isinstance(solution, Mapping):
        return {f["path"]: f["content"] for f in solution["sources"]}, solution["spec"]["entry_point"].split("::")[0]
    return {s.path: s.content for s in solution.sources}, solution.entry_file


def build_solution(solution: Any, cache: Path, *, arch: str, flags: Sequence[str] = DEFAULT_FLAGS) -> Build:
    """Build a CUDA Solution (record or JSON) into ``cache``."""
    sources, entry = _sources_of(solution)
    return build(sources, entry, cache, arch=arch, flags=flags)


def _is_cuda(solution: Any) -> bool:
    """A raw CUDA kernel (torch extensions build through cpp_extension in the harness instead)."""
    if isinstance(solution, Mapping):
        return bool(solution["spec"]["language"] == "cuda" and solution["spec"].get("binding") != "torch")
    return bool(solution.spec.language == "cuda" and solution.spec.binding != "torch")


def prebuild(solutions: Sequence[Any], cache: Path, *, arch: str | None = None,
             workers: int | None = None) -> list[Build]:
    """Build the CUDA solutions among ``solutions`` in parallel (one nvcc per CPU core) and wait;
    the harness child then finds each cubin in the cache. Other languages are skipped."""
    cuda = [s for s in solutions if _is_cuda(s)]
    if not cuda:
        return []
    chosen = arch or default_arch()
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        return list(pool.map(lambda s: build_solution(s, cache, arch=chosen), cuda))


class BuildPool:
    """Builds in the background while the GPU measures: ``submit`` returns at once; a candidate's
    child process that needs a cubin still being built waits on its lock rather than compiling again."""

    def __init__(self, *, arch: str | None = None, workers: int | None = None) -> None:
        self.arch = arch or default_arch()
        self._pool = ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1, thread_name_prefix="nvcc")
        self.futures: list[Future[Build]] = []

    def submit(self, solutions: Sequence[Any], caches: Sequence[Path]) -> None:
        """``caches``: one cubin cache per solution (the loop gives each candidate its own, where its
        evaluation child looks and its profile's SASS sees only its cubin)."""
        for s, cache in zip(solutions, caches, strict=True):
            if _is_cuda(s):
                self.futures.append(self._pool.submit(build_solution, s, Path(cache), arch=self.arch))

    def wait(self) -> list[Build]:
        return [f.result() for f in self.futures]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
