"""The launch timeline of a call, from torch.profiler (CUPTI through Kineto); nsys is not needed.

Two halves, so the arithmetic is testable without a GPU:

- :func:`record` profiles ``repeats`` calls of a function, each inside a ``record_function`` range
  named :data:`CALL_MARKER` and followed (outside the range) by a device synchronize, exports the
  Chrome trace (the stable format) and returns its events as plain dicts.
- :func:`summarize` turns such an event list (recorded, loaded from a fixture, or synthetic) into a
  per-call :class:`~kernelpro.runner.evidence.Timeline`.

Event dict: ``{"name", "cat", "ts_us", "dur_us", "args"?}``. ``cat`` is Kineto's: ``kernel``,
``gpu_memcpy``, ``gpu_memset``, ``cuda_runtime``, ``cuda_driver``, ``cpu_op``, and
``user_annotation`` for the call markers.

Per call ``i`` with host range ``[s_i, e_i]`` (the marker) and the next marker at ``s_{i+1}``:
host API events (runtime/driver) count when they lie inside ``[s_i, e_i]`` (so the synchronize
:func:`record` adds between calls is not counted); GPU activities count when they start in
``[s_i, s_{i+1})``. The call's wall time runs from ``s_i`` to the later of ``e_i`` and the end of
its last GPU activity: launches are asynchronous, so the host range alone would miss the kernel
time of a call that does not synchronize. Gaps are idle stretches between consecutive GPU
activities (kernels, copies, memsets; overlaps merged) longer than max(1 % of the call's wall
time, 5 us), as in the paper. Without markers the whole trace is taken as ``calls`` calls.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from . import Timeline

CALL_MARKER = "kernelpro_call"
"""Name of the record_function range around each profiled call."""

GAP_MIN_US = 5.0
"""Floor of the adaptive gap threshold (us)."""
GAP_FRACTION = 0.01
"""Fraction of the call's end-to-end time in the adaptive gap threshold."""

GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
API_CATS = frozenset({"cuda_runtime", "cuda_driver"})
KEEP_CATS = GPU_CATS | API_CATS
SYNC_CALLS = frozenset({
    "cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
})
_KEEP_ARGS = ("correlation", "bytes", "grid", "block", "stream", "device", "kind",
              "registers per thread", "shared memory", "External id")
# cudaMemcpyKind values, for runtime events that carry a 'kind' argument
_MEMCPY_KIND = {1: "HtoD", 2: "DtoH", "1": "HtoD", "2": "DtoH"}


def gap_threshold_us(wall_us: float) -> float:
    """The paper's adaptive threshold: max(1 % of end-to-end time, 5 us)."""
    return max(GAP_FRACTION * wall_us, GAP_MIN_US)


def is_launch(name: str) -> bool:
    """cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel, cuLaunchKernelEx, cooperative..."""
    return name.startswith(("cudaLaunch", "cuLaunch")) and "HostFunc" not in name


# ----------------------------------------------------------------------------- recording


def record(
    fn: Callable[[], object], *, repeats: int = 5, warmup: int = 2, cpu_ops: bool = False
) -> list[dict[str, Any]]:
    """Profile ``repeats`` calls of ``fn`` (after ``warmup`` unprofiled ones) and return the events.

    Activities are CPU + CUDA when CUDA is available, else CPU only (then only the call markers,
    and the cpu_op events when ``cpu_ops``, come back). ``cpu_ops`` keeps the aten operator
    events, which :func:`summarize` does not need (they make traces of many small ops large).
    """
    import torch
    from torch.autograd.profiler import profile, record_function

    cuda = torch.cuda.is_available()

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    for _ in range(warmup):
        fn()
    sync()
    # The Kineto profiler that torch.profiler.profile drives (its prepare_trace), without the
    # ``hasattr(torch, "_inductor")`` there, which imports torch._inductor and torch._dynamo: 4.5-5.4 s
    # of each demo candidate's timeline on the H200 (session 23), where a Liger child, which has them
    # preloaded, took 0.05 s.
    with profile(use_cpu=True, use_device="cuda" if cuda else None, use_kineto=True) as prof:
        for _ in range(repeats):
            with record_function(CALL_MARKER):
                fn()
            sync()
    try:
        with tempfile.TemporaryDirectory(prefix="kp-trace-") as d:
            path = os.path.join(d, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
        return events_from_chrome_trace(trace, cpu_ops=cpu_ops)
    except Exception:  # noqa: BLE001 - the profiler's own event list is the fallback
        return _events_from_profiler(prof, cpu_ops=cpu_ops)


def events_from_chrome_trace(
    trace: Mapping[str, Any] | list[Any], *, cpu_ops: bool = False
) -> list[dict[str, Any]]:
    """Plain event dicts from a Chrome trace as torch.profiler exports it (complete 'X' events)."""
    raw = trace.get("traceEvents", []) if isinstance(trace, Mapping) else trace
    out: list[dict[str, Any]] = []
    for e in raw:
        if not isinstance(e, Mapping) or e.get("ph") != "X":
            continue
        cat, name = str(e.get("cat", "")), str(e.get("name", ""))
        marker = name == CALL_MARKER and not cat.startswith("gpu")
        if not (marker or cat in KEEP_CATS or (cpu_ops and cat == "cpu_op")):
            continue
        try:
            ev: dict[str, Any] = {
                "name": name,
                "cat": cat,
                "ts_us": round(float(e["ts"]), 3),
                "dur_us": round(float(e.get("dur", 0.0)), 3),
            }
        except (KeyError, TypeError, ValueError):
            continue
        args = e.get("args")
        if isinstance(args, Mapping):
            kept = {k: args[k] for k in _KEEP_ARGS if k in args}
            if kept:
                ev["args"] = kept
        out.append(ev)
    out.sort(key=lambda ev: ev["ts_us"])
    return out


def _events_from_profiler(prof: Any, *, cpu_ops: bool) -> list[dict[str, Any]]:
    """Fallback when the Chrome trace cannot be exported: torch's FunctionEvent list."""
    out: list[dict[str, Any]] = []
    for e in prof.events() or ():
        name = str(getattr(e, "name", ""))
        tr = getattr(e, "time_range", None)
        if tr is None:
            continue
        if name == CALL_MARKER:
            cat = "user_annotation"
        elif name.startswith("cuda") or (name.startswith("cu") and name[2:3].isupper()):
            cat = "cuda_runtime"
        elif cpu_ops:
            cat = "cpu_op"
        else:
            continue
        out.append({"name": name, "cat": cat, "ts_us": float(tr.start),
                    "dur_us": float(tr.end - tr.start)})
        for k in getattr(e, "kernels", ()) or ():
            ktr = getattr(k, "time_range", None) or tr
            out.append({"name": str(getattr(k, "name", "")), "cat": "kernel",
                        "ts_us": float(ktr.start), "dur_us": float(getattr(k, "duration", 0.0))})
    out.sort(key=lambda ev: ev["ts_us"])
    return out


# ----------------------------------------------------------------------------- summarizing


def _end(e: Mapping[str, Any]) -> float:
    return float(e["ts_us"]) + float(e.get("dur_us", 0.0))


def _memcpy_direction(e: Mapping[str, Any]) -> str | None:
    name = str(e.get("name", ""))
    for d in ("HtoD", "DtoH", "DtoD", "HtoH", "PtoP"):
        if d in name:
            return d
    kind = (e.get("args") or {}).get("kind")
    return _MEMCPY_KIND.get(kind) if kind is not None else None


def _gaps(activities: Iterable[Mapping[str, Any]], threshold: float) -> tuple[int, float]:
    """Idle stretches longer than ``threshold`` between GPU activities (overlaps merged)."""
    spans = sorted((float(e["ts_us"]), _end(e)) for e in activities)
    n, total = 0, 0.0
    busy_end: float | None = None
    for start, end in spans:
        if busy_end is not None:
            idle = start - busy_end
            if idle > threshold:
                n += 1
                total += idle
        busy_end = end if busy_end is None else max(busy_end, end)
    return n, total


class _Call:
    __slots__ = ("start", "end", "next_start")

    def __init__(self, start: float, end: float, next_start: float) -> None:
        self.start, self.end, self.next_start = start, end, next_start


def _calls(events: list[Mapping[str, Any]]) -> list[_Call]:
    markers = sorted(
        (e for e in events if e.get("name") == CALL_MARKER and not str(e.get("cat", "")).startswith("gpu")),
        key=lambda e: float(e["ts_us"]),
    )
    if markers:
        out = []
        for i, m in enumerate(markers):
            nxt = float(markers[i + 1]["ts_us"]) if i + 1 < len(markers) else float("inf")
            out.append(_Call(float(m["ts_us"]), _end(m), nxt))
        return out
    timed = [e for e in events if "ts_us" in e]
    if not timed:
        return []
    lo = min(float(e["ts_us"]) for e in timed)
    hi = max(_end(e) for e in timed)
    # No markers: one window spanning everything; summarize divides its totals by `calls`.
    return [_Call(lo, hi, float("inf"))]


def summarize(events: Iterable[Mapping[str, Any]], calls: int = 1) -> Timeline:
    """Per-call averages of a recorded event list.

    With :data:`CALL_MARKER` ranges in the events, each range is one call and the averages are
    over the ranges found (``calls`` is then only a fallback); without them the whole trace is
    one window whose totals are divided by ``calls``.
    """
    evs = [e for e in events if isinstance(e, Mapping) and "ts_us" in e]
    windows = _calls(evs)
    if not windows:
        return Timeline(0.0, 0, 0.0, 0, 0.0, GAP_MIN_US, 0.0, 0.0, 0)
    has_markers = any(e.get("name") == CALL_MARKER for e in evs)
    divisor = len(windows) if has_markers else max(int(calls), 1)

    gpu = sorted((e for e in evs if e.get("cat") in GPU_CATS), key=lambda e: float(e["ts_us"]))
    api = [e for e in evs if e.get("cat") in API_CATS]

    wall = kern_us = gap_us = thr_sum = span_us = lead_us = 0.0
    launches = gaps = syncs = h2d = d2h = nbytes = 0
    launch_durs: list[float] = []
    first_names: tuple[str, ...] | None = None
    for w in windows:
        g = [e for e in gpu if w.start <= float(e["ts_us"]) < w.next_start]
        a = [e for e in api if w.start <= float(e["ts_us"]) <= w.end]
        kernels = [e for e in g if e.get("cat") == "kernel"]
        end = max([w.end, *(_end(e) for e in g)])
        call_wall = max(end - w.start, 0.0)
        per_call_wall = call_wall / divisor if not has_markers else call_wall
        thr = gap_threshold_us(per_call_wall)
        n_gap, t_gap = _gaps(g, thr)
        wall += call_wall
        thr_sum += thr
        gaps += n_gap
        gap_us += t_gap
        kern_us += sum(float(e.get("dur_us", 0.0)) for e in kernels)
        # Launch overhead counts from the first launch on: the wrapper's Python before it (shape
        # checks, allocation) is not launch overhead, and a single kernel must not look 40 % idle.
        launch_ts = [float(e["ts_us"]) for e in a if is_launch(str(e.get("name", "")))]
        first_launch = min(launch_ts) if launch_ts else w.start
        span_us += max(end - first_launch, 0.0)
        # The first kernel's own launch latency (API call to kernel start, ~10 us under the profiler)
        # is exposed only because each profiled call starts on an idle, synchronised GPU; in a
        # pipelined model it hides behind the previous call. Only idle time after the first kernel
        # started counts (the H200 corpus: single-kernel Liger wrappers read 20-45 % otherwise).
        if kernels:
            lead_us += max(min(float(e["ts_us"]) for e in kernels) - first_launch, 0.0)
        launches += len(kernels)
        if first_names is None:
            first_names = tuple(str(e.get("name", "")) for e in kernels)
        launch_durs += [float(e.get("dur_us", 0.0)) for e in a if is_launch(str(e.get("name", "")))]
        syncs += sum(1 for e in a if e.get("name") in SYNC_CALLS)
        copies = [e for e in g if e.get("cat") == "gpu_memcpy"]
        if not copies:  # no device-side copy records: fall back to the runtime calls' kinds
            copies = [e for e in a if "Memcpy" in str(e.get("name", "")) and _memcpy_direction(e)]
        for e in copies:
            d = _memcpy_direction(e)
            if d not in ("HtoD", "DtoH"):
                continue
            h2d += d == "HtoD"
            d2h += d == "DtoH"
            b = (e.get("args") or {}).get("bytes")
            if isinstance(b, (int, float)):
                nbytes += int(b)

    wall_us = wall / divisor
    kernel_us = kern_us / divisor
    span = span_us / divisor
    busy_span = span - lead_us / divisor
    overhead = (busy_span - kernel_us) / span * 100.0 if span > 0 else 0.0
    return Timeline(
        wall_us=wall_us,
        kernel_launches=round(launches / divisor),
        kernel_us=kernel_us,
        gaps=round(gaps / divisor),
        gap_us=gap_us / divisor,
        gap_threshold_us=thr_sum / len(windows) if has_markers else gap_threshold_us(wall_us),
        launch_overhead_pct=min(max(overhead, 0.0), 100.0),
        avg_launch_ns=(sum(launch_durs) / len(launch_durs) * 1000.0) if launch_durs else 0.0,
        syncs=round(syncs / divisor),
        memcpy_h2d=round(h2d / divisor),
        memcpy_d2h=round(d2h / divisor),
        memcpy_bytes=round(nbytes / divisor),
        kernels=first_names or (),
        span_us=span,
    )



def load_events(path: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """Events and call count from a file written by tests/fixtures/record_firing.py
    (``{"calls": n, "events": [...]}``), a bare event list, or a raw Chrome trace."""
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, list):
        return data, 1
    if "traceEvents" in data:
        return events_from_chrome_trace(data), 1
    return list(data.get("events", [])), int(data.get("calls", 1) or 1)
