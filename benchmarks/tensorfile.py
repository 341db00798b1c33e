"""How long one output takes to cross from a child to the parent: the format before session 11
(torch.save in the child; read whole, check the zip, torch.load with weights_only in the parent)
against runner/tensorfile.py (raw bytes after a JSON header; read into one buffer, views of it).

    python benchmarks/tensorfile.py [--mb 256] [--repeats 5] [--device cpu|cuda] [--folder /tmp]

Prints a markdown table of median seconds (min..max) per step, for a float32 output of --mb MB. On a
GPU machine --device cuda starts from a GPU tensor, as a candidate's outputs do (both writers go
through a pinned host copy). The folder is where a child's work directory is (TMPDIR)."""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernelpro.runner import tensorfile  # noqa: E402
from kernelpro.runner.sandbox import read_capped  # noqa: E402


def _torch_save(x: torch.Tensor, path: Path) -> None:
    from torch.utils.serialization import config

    config.save.use_pinned_memory_for_d2h = True  # as the harness configured it before session 11
    config.save.compute_crc32 = False
    torch.save([x], path)


def _torch_load(path: Path) -> list:
    data = io.BytesIO(read_capped(path, 1 << 40))
    with zipfile.ZipFile(data) as z:  # the parent's check of the records, as it was
        assert all(r.compress_type == zipfile.ZIP_STORED for r in z.infolist())
    data.seek(0)
    return torch.load(data, weights_only=True, map_location="cpu")


def _seconds(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--folder", default=None)
    a = ap.parse_args()
    x = torch.randn(a.mb * (1 << 20) // 4, device=a.device)
    rows = []
    with tempfile.TemporaryDirectory(dir=a.folder) as d:
        old, new = Path(d) / "o.pt", Path(d) / "o.kpt"
        steps = [
            ("torch.save (child)", lambda: _torch_save(x, old)),
            ("read + torch.load (parent)", lambda: _torch_load(old)),
            ("tensorfile.save (child)", lambda: tensorfile.save([x], new)),
            ("read + tensorfile.read (parent)", lambda: tensorfile.read(read_capped(new, 1 << 40))),
        ]
        for name, fn in steps:
            s = _seconds(fn, a.repeats)
            rows.append((name, s))
        same = torch.equal(_torch_load(old)[0], tensorfile.read(read_capped(new, 1 << 40))[0])
    print(f"one float32 output of {a.mb} MB from {a.device}, {a.repeats} repeats; both formats give the same values: {same}\n")
    print("| step | median s | min..max s |\n|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {statistics.median(s):.3f} | {min(s):.3f}..{max(s):.3f} |")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
