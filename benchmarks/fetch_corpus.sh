#!/usr/bin/env bash
# Build .corpus/ (git-ignored) on a machine with PyPI access: exactly the released packages the GPU
# steps read, to carry to the GPU machine (no network there). Nothing here is committed: the kernels
# stay their authors' code.
#
#   bash benchmarks/fetch_corpus.sh            # .corpus/: Liger and fla wheels, FlashInfer's Triton folder
#   bash benchmarks/fetch_corpus.sh replays    # also .corpus/replays/ for benchmarks/replays.py
#
# .corpus/ (benchmarks/corpus*.py, tests/test_knobs_heuristics.py, tests/test_import_fidelity.py):
#   liger-kernel 0.8.5 and fla-core 0.6.0: pure-Python wheels, installed as they are.
#   flashinfer-python 0.7.4: its wheel is 101 MB and its package imports a JIT stack (tvm_ffi,
#   cuda-python, cutlass-dsl) that the GPU image lacks, so only its Triton folder is carried, as
#   published, in .corpus/site/flashinfer/triton. That folder imports two names from flashinfer.utils
#   (triton/utils.py); .corpus/site/flashinfer/utils.py holds those two definitions copied from the
#   same wheel (GPUArchitectureError, get_compute_capability with its get_device_properties), and
#   flashinfer/__init__.py is empty.
# .corpus/replays/ (benchmarks/replays.py), liger-kernel (BSD-2-Clause), about 1 MB each:
#   0.7.0  ops/dyt.py before Liger-Kernel PR #1208 (launch heuristic)
#   0.8.0  ops/dyt.py after #1208 (autotune); ops/cross_entropy.py before #1266/#1275 (tl.exp)
#   0.8.1  ops/cross_entropy.py after #1266 + #1275 (tl.exp2 with a constexpr LOG2_E)
#   0.8.5  liger_kernel's shared utilities the replayed files import (the corpus version)
# No release holds #1266 alone (its non-constexpr global LOG2_E); replays.py reconstructs that
# one-line state from 0.8.1 and says so in its output.
set -euo pipefail
cd "$(dirname "$0")/.."
get() { python3 -m pip download --quiet --no-deps --only-binary=:all: "$@"; }
mkdir -p .corpus/site
get liger-kernel==0.8.5 fla-core==0.6.0 -d .corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
get flashinfer-python==0.7.4 -d "$tmp"
python3 - "$tmp"/flashinfer_python-0.7.4-*.whl .corpus/site <<'PY'
import re, sys, zipfile
from pathlib import Path

wheel, site = zipfile.ZipFile(sys.argv[1]), Path(sys.argv[2])
for name in wheel.namelist():
    if name.startswith("flashinfer/triton/") and name.endswith(".py"):
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_bytes(wheel.read(name))
utils = wheel.read("flashinfer/utils.py").decode()

def block(pattern: str) -> str:  # one top-level definition with its decorators, as published
    m = re.search(rf"(?ms)^((?:@[^\n]*\n)*){pattern}.*?(?=^\S)", utils)
    assert m, f"flashinfer/utils.py of 0.7.4 no longer defines {pattern}"
    return m.group(0).rstrip() + "\n"

(site / "flashinfer" / "__init__.py").write_text("")
(site / "flashinfer" / "utils.py").write_text(
    "# The two names flashinfer/triton/utils.py imports, copied from flashinfer-python 0.7.4's flashinfer/utils.py\n"
    "# (Apache-2.0) by benchmarks/fetch_corpus.sh; the rest of that module needs FlashInfer's JIT stack.\n"
    "import functools\nfrom typing import Tuple\n\nimport torch\n\n\n"
    + "\n\n".join(block(p) for p in (r"class GPUArchitectureError\b", r"def get_device_properties\b",
                                     r"def get_compute_capability\b")))
PY
if [ "${1:-}" = replays ]; then
  mkdir -p .corpus/replays
  for v in 0.7.0 0.8.0 0.8.1 0.8.5; do get "liger-kernel==$v" -d .corpus/replays; done
fi
ls -l .corpus .corpus/site/flashinfer
