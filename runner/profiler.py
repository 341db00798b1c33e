"""Collect a Profile for one candidate: ncu, SASS and the launch timeline, in launches of their own.

Profiling never shares a process with timing: ncu replays kernels and torch.profiler adds
overhead, so each runs in its own sandboxed child. Whatever cannot be collected (no ncu, counters
not permitted, no cuobjdump) becomes a note in the Profile, and the loop goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import confinement, scratch
from .evaluator import EvalSettings, _request
from .evidence import KernelProfile, Profile, SassStats, Timeline
from .sandbox import read_capped, run_child
from .standby import NcuStandby, imports_of
from .target import Tolerance
from .trace import Definition, Solution, Workload


@dataclass(frozen=True)
class ProfileSettings:
    """What to collect."""

    ncu: bool = True
    """Run Nsight Compute."""
    sass: bool = True
    """Disassemble the candidate's binaries."""
    timeline: bool = True
    """Record the launch timeline with torch.profiler."""
    timeout_s: float = 180.0
    """Limit for each profiling child."""
    standby: bool = True
    """Keep the next profile's ncu child started ahead, its imports done (runner/standby.py)."""
    ncu_tool: str | None = None
    """ncu to run (Settings.ncu_tool); None: PATH, then the CUDA toolkit's homes."""
    cuobjdump_tool: str | None = None
    """cuobjdump to disassemble with (Settings.cuobjdump_tool); None: PATH, the toolkit, triton's copy."""


def start_standby(solution: Solution, ps: ProfileSettings) -> NcuStandby | None:
    """A standby for the next ncu profile of ``solution``'s target (its entry file's imports
    preloaded), or None where ncu is off, missing or standbys are turned off."""
    from .evidence.ncu import find_ncu

    ncu = find_ncu(ps.ncu_tool) if ps.ncu and ps.standby else None
    return NcuStandby(ncu, imports_of(solution), timeout_s=ps.timeout_s) if ncu is not None else None


def merge_cache(src: Path, dst: Path) -> int:
    """Copy into the Triton cache ``dst`` the regular files of ``src`` it lacks; the count copied.

    A file ``dst`` already has is left alone: Triton's cache paths are content hashes, and a standby
    may have loaded it. On the H200 the standby of fla softmax died with exit code 11 in 3 runs of 3
    while Liger's never did (benchmarks/results-h200-session5/); fla's import asks Triton's driver
    about the GPU, which builds and loads ``cuda_utils.so`` from the standby's cache, and
    ``shutil.copytree`` then rewrote that loaded library in place with the evaluation's copy. Each
    new file therefore arrives whole under a temporary name and is renamed into place. No link is
    followed, on either side: ``src`` was written by the candidate's own child, and ``dst`` is
    written by the live standby child (a link there, to ~/.ssh say, must not turn this copy into a
    write of the runner's files); a file of ``src`` that is not regular, or too large, is left out."""
    copied = 0
    for root, _dirs, files in os.walk(src):  # followlinks=False: a linked folder is not entered
        rel = Path(root).relative_to(src).parts
        into: int | None = None
        try:
            for name in sorted(files):
                try:
                    data: bytes | bytearray = read_capped(Path(root, name), _CACHE_FILE_CAP)
                    if name.startswith("__grp__"):
                        data = _regrouped(data, src, dst)
                    if into is None:
                        into = _open_dirs(dst, rel)
                except (OSError, ValueError):
                    continue  # a link, a FIFO, too large, gone, a group not of src; or a folder of dst that is a link
                if _exists(name, into):
                    continue  # there already (whatever it is)
                part = f".{name}.{os.getpid()}.part"
                try:
                    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                                 dir_fd=into)
                    with os.fdopen(fd, "wb") as f:
                        f.write(data)
                    os.replace(part, name, src_dir_fd=into, dst_dir_fd=into)
                except OSError:
                    continue
                copied += 1
        finally:
            if into is not None:
                os.close(into)
    return copied


def _regrouped(data: bytes | bytearray, src: Path, dst: Path) -> bytes:
    """A Triton cache group file (``__grp__NAME.json``: each of a kernel's files by absolute path)
    pointing into ``dst`` instead of ``src``. Copied as it was, it sent the profiled child to the
    candidate's own cache, which it may not read: Triton's open() failed with EACCES and ncu profiled
    no kernel in every `kernelpro optimize` run on the H200 (session 16). ValueError for a group that
    names a file outside ``src``: left out, Triton then compiles that kernel again."""
    group = json.loads(bytes(data))
    paths = group.get("child_paths") if isinstance(group, dict) else None
    if not isinstance(paths, dict):
        raise ValueError("not a Triton cache group")
    moved = {}
    for child, path in paths.items():
        p = Path(str(path))
        rel = p.relative_to(src) if p.is_relative_to(src) else p.relative_to(src.resolve())  # ValueError outside src
        if ".." in rel.parts:
            raise ValueError(f"{path} leaves {src}")
        moved[child] = str(dst / rel)
    return json.dumps({**group, "child_paths": moved}).encode()


_CACHE_FILE_CAP = 256 << 20
"""The largest file of a candidate's Triton cache copied (cubins and launchers are megabytes)."""
_LOG_CAP = 64 << 20
"""The most of ncu's log read back."""
_BUSY_WAITS_S = (2.0, 4.0, 8.0)
"""Waits before each new attempt while another profiler holds the GPU's counters (ncu's "concurrently
collecting profiling data"): another kernel's profile takes seconds, so 3 tries over 14 s outlast it."""


def _exists(name: str, folder: int) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _open_dirs(top: Path, parts: Sequence[str]) -> int:
    """An fd of ``top``/``parts``, each folder made where missing, none entered through a link."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(top, flags)
    try:
        for part in parts:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o755, dir_fd=fd)
            nxt = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_log(path: Path) -> str:
    """A log file a child's layer wrote (ncu's): '' where absent; never through a link, regular
    files only, at most ``_LOG_CAP`` bytes (runner/sandbox.read_capped). Raises OSError on a refusal,
    which is that candidate's failure."""
    try:
        return bytes(read_capped(path, _LOG_CAP)).decode(errors="replace")
    except FileNotFoundError:
        return ""


STANDBY_BUSY = ("the standby ncu child could not read the GPU's counters: another profiler (DCGM's profiling "
                "module, or another ncu) held them; profiled again in a fresh one")
"""The note of a standby whose ncu found the counters held by another profiler (its own log says so)."""


def _ncu(definition: Definition, solution: Solution, workload: Workload, es: EvalSettings,
         ps: ProfileSettings, cache: Path, stages: dict[str, float],
         standby: NcuStandby | None = None) -> tuple[list, list[str]]:
    from .evidence.ncu import (
        NCU_MISSING,
        counters_busy,
        find_ncu,
        notes_for,
        parse_csv,
        raw_csv_wrapper,
    )

    ncu = find_ncu(ps.ncu_tool)
    if ncu is None:
        return [], [NCU_MISSING]
    req = {**_request(definition, solution, [workload], Tolerance(), es), "mode": "profile"}
    notes: list[str] = []
    with scratch.folder("kernelpro-ncu-") as tmp:
        # ncu's log folder: written by ncu's layer alone, never by the harness and candidate below it
        # (one swapped the log for a link to an SSH key, which was read back into the profile).
        confinement.tool_only(tmp)

        def attempt(isolate: bool, fresh: bool = False) -> tuple[Any, list, str]:
            taken = standby.take(req) if standby is not None and isolate and not fresh else None
            if standby is not None and taken is not None and taken[0].status == "OK":
                (child, seconds), out = taken, standby.log
                stages["ncu.standby"] = standby.up_s
            else:
                if standby is not None and taken is not None:
                    # Whatever broke the standby (ncu, the wait, the candidate), one fresh child decides.
                    # ncu writes its own words (the crash, the signal) to its log file, not to stderr.
                    if counters_busy(_tail_of(standby.log, 4000)):  # ncu's own log: not the candidate's words
                        # Not the standby's fault: another profiler held the GPU's counters (on the H200, a
                        # parallel test's ncu; on a runner, DCGM). The note said "failed (CRASHED: ...)".
                        notes.append(STANDBY_BUSY)
                    else:
                        said = f"{taken[0].log.strip()} {_tail_of(standby.log)}".strip()
                        notes.append(f"the standby ncu child failed ({taken[0].status}: {said[-300:]}); "
                                     "profiled in a fresh one")
                out = Path(tmp) / "ncu.csv"
                out.unlink(missing_ok=True)
                # privileged: ncu reads GPU counters with the runner's own rights, which a user namespace drops.
                child = run_child(req, timeout_s=ps.timeout_s, device="cuda", cache_dir=cache,
                                  wrapper=raw_csv_wrapper(ncu, str(out)), privileged=True, isolate=isolate,
                                  writable=[Path(tmp)])
                seconds = child.seconds
            _child_stages(stages, "ncu", seconds, child.result)
            try:
                text = read_log(out)
            except OSError as e:  # a link, a FIFO, a huge file: what the candidate made of it, its failure
                return replace(child, status="CRASHED"), [], f"ncu's log was refused: {e}"
            return child, (parse_csv(text) if child.status == "OK" else []), text

        child, kernels, text = attempt(True)
        # ncu's own log only: the candidate's output is beside it in child.log, and a candidate that
        # printed ncu's words must not buy itself waits or a note of its choosing.
        for wait in _BUSY_WAITS_S:  # another profiler held the counters: it ends soon, as ours does
            if kernels or not counters_busy(text):
                break
            stages["ncu.busy_wait"] = stages.get("ncu.busy_wait", 0.0) + wait
            time.sleep(wait)
            child, kernels, text = attempt(True, fresh=True)
        # Busy counters are no less busy outside the namespaces: notes_for says what to do about them.
        if not kernels and not counters_busy(text) and child.sandbox.get("network", "").startswith("isolated"):
            # ncu inside the namespaces failed: once more outside them (a verified candidate), and say
            # so, with what ncu said (on the H200 the note alone could not be acted on, session 17).
            first = " ".join(f"{child.status}: {text.strip()[-300:]}".split())
            child, kernels, text = attempt(False)
            if kernels:
                notes.append(f"ncu failed inside the sandbox's namespaces ({first}) and ran without network isolation")
        if not kernels:
            # Counters not permitted, unknown metrics, ...: ncu's own words, turned into a fix. The
            # harness's own output and how far it got are kept too: on the H200, runs of `kernelpro`
            # started as `python -c` profiled no kernel while the same runs inside pytest did, and ncu's
            # words alone ("No kernels were profiled") did not say why (session 15).
            said = f"{child.log}\n{text}"
            reached = ", ".join(k for k in ("import", "warmup", "profiled") if f"ncu.{k}" in stages) or "nothing"
            own = f"the profiled child reached: {reached}; its output: {child.log.strip()[-600:] or '(none)'}"
            # The candidate's own failure under ncu, in the harness's words (ncu's say only "no kernels").
            doc = child.result if isinstance(child.result, dict) else {}
            build, prof = doc.get("build"), doc.get("profile")
            harness_said = []
            if isinstance(build, dict) and build.get("status") not in (None, "OK"):
                harness_said.append(f"build {build.get('status')}: {str(build.get('log') or '').strip()[-400:]}")
            if isinstance(prof, dict) and prof.get("error"):
                harness_said.append(f"profiled call: {str(prof.get('error')).strip()[-400:]}")
            if harness_said:
                own += "; the harness said: " + " | ".join(harness_said)
            # ncu's words are read from its own log alone (the candidate prints beside them in child.log).
            if child.status == "OK":
                return [], [*(notes_for(text, 1) or [*notes, f"ncu recorded no kernel of the candidate: {text.strip()[-300:]}"]), own]
            return [], [*(notes_for(text, 1) or [*notes, f"ncu run failed ({child.status}): {said.strip()[-300:]}"]), own]
        return kernels, notes


def _tail_of(path: Path, chars: int = 300) -> str:
    """The last ``chars`` of a text file, on one line; empty when it is absent."""
    try:
        return " ".join(read_log(path)[-chars:].split())
    except OSError as e:
        return f"(its log was refused: {e})"


def _child_stages(stages: dict[str, float], name: str, seconds: float, result: Any) -> None:
    """The child's wall time, split by what its harness reported: Python/torch start-up, the
    candidate's import (its package's own import included), the warm-up call, the profiled part."""
    stages[name] = seconds
    doc = result if isinstance(result, dict) else {}
    for key, value in (("startup", doc.get("phases", {}).get("startup")), ("import", doc.get("build", {}).get("seconds")),
                       *((k.removesuffix("_s"), v) for k, v in doc.get("profile", {}).items() if k.endswith("_s"))):
        if isinstance(value, (int, float)):
            stages[f"{name}.{key}"] = float(value)


def _disassemble_all(cache: Path, into: dict[Path, str], cuobjdump: str | None) -> None:
    """Every cubin the candidate's evaluation left, disassembled while its ncu child runs (which
    cubins ran is known only after it); a failure here is met again, and reported, in _sass."""
    from concurrent.futures import ThreadPoolExecutor

    from .evidence.sass import SassError, disassemble, find_cuobjdump, triton_cubins

    tool, cubins = find_cuobjdump(cuobjdump), triton_cubins(cache)
    if tool is None or not cubins:
        return

    def one(c: Path) -> None:
        with contextlib.suppress(SassError):
            into[c] = disassemble(c, tool)

    with ThreadPoolExecutor(max_workers=min(8, len(cubins))) as pool:
        list(pool.map(one, cubins))


def _sass(cache: Path, kernels: Sequence[KernelProfile], ready: Mapping[Path, str],
          cuobjdump: str | None) -> tuple[SassStats | None, list[str]]:
    from .evidence.sass import SassError, disassemble, find_cuobjdump, launched_cubins, parse_sass

    cubins = launched_cubins(cache, [(k.name, k.block[0] * k.block[1] * k.block[2]) for k in kernels])
    if not cubins:
        return None, ["no cubin found for SASS analysis (not a Triton kernel, or nothing was compiled)"]
    tool = find_cuobjdump(cuobjdump)
    if tool is None:
        return None, ["cuobjdump not found: no SASS analysis"]
    try:
        return parse_sass("\n".join(ready[c] if c in ready else disassemble(c, tool) for c in cubins)), []
    except SassError as e:
        return None, [f"SASS analysis failed: {e}"]


def _timeline(definition: Definition, solution: Solution, workload: Workload, es: EvalSettings,
              ps: ProfileSettings, cache: Path, stages: dict[str, float]) -> tuple[Timeline | None, list[str]]:
    from .evidence.timeline import summarize

    req = {**_request(definition, solution, [workload], Tolerance(), es), "mode": "timeline"}
    child = run_child(req, timeout_s=ps.timeout_s, device="cuda", cache_dir=cache)
    _child_stages(stages, "timeline", child.seconds, child.result)
    data = (child.result or {}).get("timeline", {})
    if child.status != "OK" or "events" not in data:
        return None, [f"timeline failed ({child.status}): {(data.get('error') or child.log).strip()[-300:]}"]
    return summarize(data["events"], int(data["calls"])), []


def profile_candidate(definition: Definition, solution: Solution, workloads: Sequence[Workload],
                      es: EvalSettings, ps: ProfileSettings = ProfileSettings(),
                      timeline: Timeline | None = None, triton_cache: Path | None = None,
                      standby: NcuStandby | None = None) -> tuple[Profile, float]:
    """Profile on the largest workload (the one where the kernel's own behaviour dominates).
    A timeline recorded by the evaluation (EvalSettings.timeline) is reused instead of a new child;
    ``triton_cache``, the Triton cache this candidate alone was evaluated with, is copied in first so
    the ncu child neither compiles nor autotunes again (it must hold no other candidate's cubins).
    ``standby``, an ncu child started earlier (runner/standby.py), runs the ncu part if it is still
    there; it is used up (closed) either way."""
    t0 = time.perf_counter()
    try:
        if es.device != "cuda":
            return Profile(notes=("no GPU: no profiling",)), 0.0
        return _profile(definition, solution, workloads, es, ps, timeline, triton_cache, standby), time.perf_counter() - t0
    finally:
        if standby is not None:
            standby.close()


def _profile(definition: Definition, solution: Solution, workloads: Sequence[Workload], es: EvalSettings,
             ps: ProfileSettings, timeline: Timeline | None, triton_cache: Path | None,
             standby: NcuStandby | None) -> Profile:
    workload = max(workloads, key=lambda w: sum(w.axes.values()))
    es = replace(es, cache_dir=None)
    notes: list[str] = []
    kernels: list = []
    sass = None
    stages: dict[str, float] = {}
    with scratch.folder("kernelpro-prof-") as tmp:
        # Fresh, or the standby's own: every cubin in it is this candidate's (a standby's imports may
        # have put Triton's driver stubs there, never a kernel of ours).
        cache = standby.cache if standby is not None and ps.ncu else Path(tmp) / "triton-cache"
        if triton_cache is not None and triton_cache.is_dir():
            merge_cache(triton_cache, cache)
        ready: dict[Path, str] = {}
        early = threading.Thread(target=_disassemble_all, args=(cache, ready, ps.cuobjdump_tool), daemon=True)
        if ps.sass:
            early.start()
        if ps.ncu:
            kernels, n = _ncu(definition, solution, workload, es, ps, cache, stages, standby)
            notes += n
        if ps.timeline and timeline is None:
            timeline, n = _timeline(definition, solution, workload, es, ps, cache, stages)
            notes += n
        if ps.sass:
            t1 = time.perf_counter()
            early.join()
            sass, n = _sass(cache, kernels, ready, ps.cuobjdump_tool)
            stages["sass"] = time.perf_counter() - t1
            notes += n
    rounded = tuple((k, round(v, 2)) for k, v in stages.items())
    return Profile(tuple(kernels), sass, timeline, tuple(notes), rounded)
