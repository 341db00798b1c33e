"""The child side of an evaluation: build, verify and time one Solution.

Runs as ``python -m kernelpro.runner.harness REQUEST.json RESULT.json`` in a fresh process that
the parent (runner/sandbox.py) started with a scrubbed environment and a time limit. Everything
here is plain torch; the only import of candidate code is ``_build``. A candidate failure is a
status in the result file, never a crash of this process (a crash is reported by the parent).

Request: {definition, solution, workloads, device, trials, seed, tolerance{atol,rtol},
          timing{warmup, reps, target_ms, rotate}, time_reference}
Result:  {environment, build{status, log, seconds}, workloads:[{uuid, status, log,
          correctness{...}, timing{...}, reference_timing{...}}]}
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import statistics
import sys
import time
import traceback
import zlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

_STARTED = time.perf_counter()  # before torch: its import is part of the per-candidate overhead

import torch  # noqa: E402

_TORCH_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
    "bool": torch.bool,
}  # fmt: skip
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _TORCH_DTYPES[_name] = getattr(torch, _name)

_TAIL = 4000  # characters of a traceback kept in a log


class CandidateError(Exception):
    """A failure that is the candidate's fault; ``status`` says which kind."""

    def __init__(self, status: str, log: str):
        super().__init__(log)
        self.status = status
        self.log = log


def _tail(text: str) -> str:
    return text if len(text) <= _TAIL else "...\n" + text[-_TAIL:]


def _is_compile_error(exc: BaseException) -> bool:
    # Triton raises CompilationError (and subclasses) lazily at the first launch. The interpreter
    # has no compile step: what the compiler would reject (an unknown tl.* name) surfaces as an
    # InterpreterError caused by an AttributeError/NameError, so count those as compile errors too.
    if type(exc).__name__ == "InterpreterError" and isinstance(exc.__cause__, (AttributeError, NameError)):
        return True
    return any(
        c.__name__ in ("CompilationError", "CompileTimeAssertionFailure", "PTXASError")
        or c.__module__.startswith("triton.compiler")
        for c in type(exc).__mro__
    )


# --------------------------------------------------------------------------- build


def _build(solution: Mapping[str, Any], root: Path) -> Callable[..., Any]:
    src_root = root / "src"
    for f in solution["sources"]:
        p = src_root / PurePosixPath(f["path"])
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f["content"])
    if solution["spec"]["language"] == "cuda":  # raw kernel (cubin + driver launch) or torch extension
        from kernelpro.runner.cuda import BuildFailure, kernel_callable, shared_cache

        try:
            return kernel_callable(solution, shared_cache(root / "cubins"))
        except BuildFailure as e:
            raise CandidateError(e.status, _tail(e.log)) from None
    entry_file, symbol = solution["spec"]["entry_point"].split("::")
    sys.path.insert(0, str(src_root))
    module_name = PurePosixPath(entry_file).with_suffix("").as_posix().replace("/", ".")
    spec = importlib.util.spec_from_file_location(module_name, src_root / entry_file)
    if spec is None or spec.loader is None:
        raise CandidateError("COMPILE_ERROR", f"cannot load {entry_file} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:  # SystemExit too: a module that exits at import does not build
        raise CandidateError("COMPILE_ERROR", _tail(traceback.format_exc())) from None
    fn = getattr(module, symbol, None)
    if not callable(fn):
        raise CandidateError("COMPILE_ERROR", f"{entry_file} defines no callable {symbol!r}")
    return fn


def _reference(definition: Mapping[str, Any]) -> Callable[..., Any]:
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile(definition["reference"], "<reference>", "exec"), namespace)
    return namespace["run"]


# --------------------------------------------------------------------------- inputs


def _shape(definition: Mapping[str, Any], spec: Mapping[str, Any], axes: Mapping[str, int]) -> list[int]:
    out = []
    for ax in spec["shape"]:
        a = definition["axes"][ax]
        out.append(int(a["value"]) if a["type"] == "const" else int(axes[ax]))
    return out


def _make_inputs(definition: Mapping[str, Any], workload: Mapping[str, Any], seed: int, device: str) -> list[Any]:
    gen = torch.Generator(device=device).manual_seed(seed)
    values: list[Any] = []
    for name, spec in definition["inputs"].items():
        recipe = workload["inputs"].get(name, {"type": "random"})
        if recipe["type"] == "scalar":
            values.append(recipe["value"])
            continue
        if recipe["type"] != "random":
            raise ValueError(f"input {name}: recipe {recipe['type']!r} is not supported by this harness yet")
        if spec["shape"] is None:
            values.append(float(torch.randn((), generator=gen, device=device)))
            continue
        shape, dtype = _shape(definition, spec, workload["axes"]), _TORCH_DTYPES[spec["dtype"]]
        if dtype == torch.bool:
            t = torch.rand(shape, generator=gen, device=device) < 0.5
        elif dtype.is_floating_point:
            t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(dtype)
        else:
            t = torch.randint(-64, 64, shape, generator=gen, device=device, dtype=dtype)
        values.append(t)
    return values


def _clone(values: Sequence[Any]) -> list[Any]:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _poisoned_outputs(definition: Mapping[str, Any], axes: Mapping[str, int], device: str) -> list[torch.Tensor]:
    # NaN (or an extreme integer) in every element, so an element the candidate never writes fails.
    outs = []
    for spec in definition["outputs"].values():
        dtype = _TORCH_DTYPES[spec["dtype"]]
        shape = _shape(definition, spec, axes) if spec["shape"] is not None else []
        t = torch.empty(shape, dtype=dtype, device=device)
        if dtype.is_floating_point:
            t.fill_(float("nan"))
        elif dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(torch.iinfo(dtype).min)
        outs.append(t)
    return outs


def _as_tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


# --------------------------------------------------------------------------- verify


def _compare(name: str, spec: Mapping[str, Any], got: Any, want: torch.Tensor,
             atol: float, rtol: float) -> tuple[str | None, dict[str, Any]]:  # fmt: skip
    if not isinstance(got, torch.Tensor):
        return "INCORRECT_SHAPE", {"output": name, "got_type": type(got).__name__}
    if tuple(got.shape) != tuple(want.shape):
        return "INCORRECT_SHAPE", {"output": name, "got": list(got.shape), "want": list(want.shape)}
    if got.dtype != _TORCH_DTYPES[spec["dtype"]]:
        return "INCORRECT_DTYPE", {"output": name, "got": str(got.dtype), "want": spec["dtype"]}
    # On the tensor's own device: a 64M-element comparison on the host costs seconds per trial.
    g, w = got.detach().double(), want.detach().to(got.device).double()
    if not got.dtype.is_floating_point:
        bad = int((g != w).sum())
        err = float((g - w).abs().max()) if g.numel() else 0.0
        stats = {"max_abs": err, "max_rel": err, "rel_l2": 0.0 if bad == 0 else 1.0, "mismatches": bad}
        return ("INCORRECT_NUMERICAL" if bad else None), stats
    finite_ref = torch.isfinite(w)
    diff = (g - w).abs()
    same = g.eq(w) | (g.isnan() & w.isnan())
    diff = torch.where(finite_ref, diff, torch.where(same, torch.zeros_like(diff), torch.full_like(diff, math.inf)))
    diff = torch.nan_to_num(diff, nan=math.inf)
    rel = diff / w.abs().clamp_min(1e-12)
    bound = atol + rtol * w.abs()
    mismatches = int((diff > torch.where(finite_ref, bound, torch.zeros_like(bound))).sum())
    zero = torch.zeros_like(w)
    wn = float(torch.linalg.vector_norm(torch.where(finite_ref, w, zero)))
    rel_l2 = float(torch.linalg.vector_norm(torch.where(finite_ref, diff, zero))) / max(wn, 1e-30)
    stats = {
        "max_abs": float(diff.max()) if diff.numel() else 0.0,
        "max_rel": float(rel.max()) if rel.numel() else 0.0,
        "rel_l2": rel_l2,
        "mismatches": mismatches,
    }
    return ("INCORRECT_NUMERICAL" if mismatches else None), stats


def _call(fn: Callable[..., Any], inputs: list[Any], outputs: list[torch.Tensor], dps: bool) -> tuple[Any, ...]:
    if dps:
        fn(*inputs, *outputs)
        return tuple(outputs)
    return _as_tuple(fn(*inputs))


def _verify(fn: Callable[..., Any], ref: Callable[..., Any], req: Mapping[str, Any],
            workload: Mapping[str, Any], device: str) -> dict[str, Any]:  # fmt: skip
    definition, dps = req["definition"], req["solution"]["spec"].get("destination_passing_style", True)
    atol, rtol = req["tolerance"]["atol"], req["tolerance"]["rtol"]
    worst: dict[str, float] = {"max_abs": 0.0, "max_rel": 0.0, "rel_l2": 0.0}
    seeds = []
    for trial in range(req["trials"]):
        seed = (req["seed"] * 1_000_003 + trial * 7919 + zlib.crc32(workload["uuid"].encode()) % 65521) % (2**31)
        seeds.append(seed)
        inputs = _make_inputs(definition, workload, seed, device)
        with torch.no_grad():
            want = _as_tuple(ref(*_clone(inputs)))
        mine = _clone(inputs)
        try:
            with torch.no_grad():
                got = _call(fn, mine, _poisoned_outputs(definition, workload["axes"], device), dps)
            if device == "cuda":
                torch.cuda.synchronize()
        except BaseException as exc:  # SystemExit too; the harness must outlive the candidate
            status = "COMPILE_ERROR" if _is_compile_error(exc) else "RUNTIME_ERROR"
            raise CandidateError(status, _tail(traceback.format_exc())) from None
        if len(got) != len(definition["outputs"]):
            raise CandidateError("INCORRECT_SHAPE", f"returned {len(got)} outputs, the definition has {len(definition['outputs'])}")
        for (name, spec), g, w in zip(definition["outputs"].items(), got, want, strict=False):
            a, r = atol.get(spec["dtype"], 0.0), rtol.get(spec["dtype"], 0.0)
            verdict, stats = _compare(name, spec, g, w.to(device) if isinstance(w, torch.Tensor) else w, a, r)
            if verdict is not None:
                stats.update({"trial": trial, "seed": seed, "atol": a, "rtol": r})
                raise CandidateError(verdict, json.dumps({"output": name, **stats}))
            for k in worst:
                worst[k] = max(worst[k], float(stats[k]))
    return {**worst, "trials": req["trials"], "seeds": seeds}


# --------------------------------------------------------------------------- time


def _summary(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    q = statistics.quantiles(s, n=10) if len(s) >= 2 else [s[0]] * 9
    return {
        "median_ms": statistics.median(s),
        "p10_ms": q[0],
        "p90_ms": q[-1],
        "mean_ms": statistics.fmean(s),
        "std_ms": statistics.pstdev(s),
        "min_ms": s[0],
        "n": len(s),
    }


def _time(fn: Callable[..., Any], req: Mapping[str, Any], workload: Mapping[str, Any],
          device: str, dps: bool) -> dict[str, float]:  # fmt: skip
    """Median of per-call times. Inputs rotate among buffer sets; on the GPU the L2 is flushed
    before every call and times come from CUDA events, never from the candidate."""
    t = req["timing"]
    definition = req["definition"]
    sets = [
        (_make_inputs(definition, workload, 10_000 + i, device), _poisoned_outputs(definition, workload["axes"], device))
        for i in range(t["rotate"])
    ]
    with torch.no_grad():
        for i in range(t["warmup"]):
            _call(fn, *sets[i % len(sets)], dps)
        if device == "cuda":
            torch.cuda.synchronize()
            flush = torch.empty(int(2 * torch.cuda.get_device_properties(0).L2_cache_size), dtype=torch.int8, device="cuda")
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            # Size the rep count from one timed call so tiny and huge kernels both get ~target_ms.
            start.record()
            _call(fn, *sets[0], dps)
            end.record()
            torch.cuda.synchronize()
            est = max(start.elapsed_time(end), 1e-3)
            reps = int(min(t["reps_max"], max(t["reps"], t["target_ms"] / est)))
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            for i, (s, e) in enumerate(pairs):
                flush.zero_()
                s.record()
                _call(fn, *sets[i % len(sets)], dps)
                e.record()
            torch.cuda.synchronize()
            samples = [s.elapsed_time(e) for s, e in pairs]
        else:
            samples = []
            for i in range(t["reps_cpu"]):
                t0 = time.perf_counter()
                _call(fn, *sets[i % len(sets)], dps)
                samples.append((time.perf_counter() - t0) * 1e3)
    return _summary(samples)


# --------------------------------------------------------------------------- main


def _environment(device: str) -> dict[str, Any]:
    libs = {"torch": torch.__version__, "python": sys.version.split()[0]}
    try:
        import triton

        libs["triton"] = triton.__version__
    except ImportError:
        pass
    if device == "cuda":
        hardware = torch.cuda.get_device_name(0).replace(" ", "_")
        libs["cuda"] = str(torch.version.cuda)
    else:
        hardware = "cpu" + ("_triton_interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "")
    return {"hardware": hardware, "libs": libs}


def _one_call(fn: Callable[..., Any], req: Mapping[str, Any], device: str) -> Callable[[], Any]:
    """A call of the candidate on the request's first workload, inputs made once (for profiling)."""
    workload = req["workloads"][0]
    dps = req["solution"]["spec"].get("destination_passing_style", True)
    inputs = _make_inputs(req["definition"], workload, 1, device)
    outputs = _poisoned_outputs(req["definition"], workload["axes"], device)
    return lambda: _call(fn, inputs, outputs, dps)


def _profile(fn: Callable[..., Any], req: Mapping[str, Any], device: str) -> dict[str, Any]:
    """One warm-up call (JIT compile, autotune), then one call inside cudaProfilerStart/Stop, so an
    ncu started with --profile-from-start off sees the candidate's kernels and nothing of ours."""
    call = _one_call(fn, req, device)
    with torch.no_grad():
        call()
        torch.cuda.synchronize()
        cudart = torch.cuda.cudart()
        cudart.cudaProfilerStart()
        call()
        torch.cuda.synchronize()
        cudart.cudaProfilerStop()
    return {"profiled": req["workloads"][0]["uuid"]}


def _timeline(fn: Callable[..., Any], req: Mapping[str, Any], device: str) -> dict[str, Any]:
    from kernelpro.runner.profile.timeline import record

    call = _one_call(fn, req, device)
    with torch.no_grad():
        events = record(call, repeats=5, warmup=2)
    return {"events": events, "calls": 5}


def run(req: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    device = req["device"]
    result: dict[str, Any] = {"environment": _environment(device), "workloads": []}
    t0 = time.perf_counter()
    phases = result["phases"] = {"startup": t0 - _STARTED, "verify": 0.0, "time": 0.0}
    try:
        fn = _build(req["solution"], workdir)
        result["build"] = {"status": "OK", "log": "", "seconds": time.perf_counter() - t0}
    except CandidateError as e:
        result["build"] = {"status": e.status, "log": e.log, "seconds": time.perf_counter() - t0}
        return result
    mode = req.get("mode", "evaluate")
    if mode in ("profile", "timeline"):
        try:
            result[mode] = (_profile if mode == "profile" else _timeline)(fn, req, device)
        except BaseException:
            result[mode] = {"error": _tail(traceback.format_exc())}
        return result
    ref = _reference(req["definition"])
    dps = req["solution"]["spec"].get("destination_passing_style", True)
    for workload in req["workloads"]:
        entry: dict[str, Any] = {"uuid": workload["uuid"], "status": "PASSED", "log": ""}
        try:
            t1 = time.perf_counter()
            entry["correctness"] = _verify(fn, ref, req, workload, device)
            t2 = time.perf_counter()
            entry["timing"] = _time(fn, req, workload, device, dps)
            phases["verify"] += t2 - t1
            phases["time"] += time.perf_counter() - t2
            if req.get("time_reference"):
                entry["reference_timing"] = _time(lambda *a: _as_tuple(ref(*a)), req, workload, device, False)
        except CandidateError as e:
            entry.update(status=e.status, log=e.log)
            if e.status == "INCORRECT_NUMERICAL":
                entry["correctness"] = json.loads(e.log) if e.log.startswith("{") else {}
        except BaseException:
            entry.update(status="RUNTIME_ERROR", log=_tail(traceback.format_exc()))
        result["workloads"].append(entry)
        if entry["status"] != "PASSED":
            break  # one failing workload decides the candidate; do not spend time on the rest
    else:
        if req.get("timeline") and device == "cuda":
            # After all timing, in the process that already holds the compiled kernel: a separate
            # child would pay Python, torch, CUDA and Triton start-up again for a few calls.
            try:
                from dataclasses import asdict

                from kernelpro.runner.profile.timeline import summarize

                largest = max(req["workloads"], key=lambda w: sum(w["axes"].values()))
                data = _timeline(fn, {**req, "workloads": [largest]}, device)
                result["timeline"] = asdict(summarize(data["events"], data["calls"]))
            except BaseException:
                result["timeline"] = {"error": _tail(traceback.format_exc())}
    return result


def main(argv: list[str]) -> int:
    request_path, result_path = Path(argv[0]), Path(argv[1])
    req = json.loads(request_path.read_text())
    result = run(req, request_path.parent)
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, allow_nan=True))
    tmp.replace(result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
