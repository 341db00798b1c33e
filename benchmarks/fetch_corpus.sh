#!/usr/bin/env bash
# Download, on a machine with PyPI access, exactly the released packages the replay benchmark
# (benchmarks/replays.py) reads, into .corpus/replays/ (git-ignored; carry .corpus/ to the GPU
# machine, which has no network). Nothing here is committed: the kernels stay their authors' code.
#
#   bash benchmarks/fetch_corpus.sh
#
# liger-kernel (BSD-2-Clause), pure-Python wheels of about 1 MB each:
#   0.7.0  ops/dyt.py before Liger-Kernel PR #1208 (launch heuristic)
#   0.8.0  ops/dyt.py after #1208 (autotune); ops/cross_entropy.py before #1266/#1275 (tl.exp)
#   0.8.1  ops/cross_entropy.py after #1266 + #1275 (tl.exp2 with a constexpr LOG2_E)
#   0.8.5  liger_kernel's shared utilities the replayed files import (the corpus version)
# No release holds #1266 alone (its non-constexpr global LOG2_E); replays.py reconstructs that
# one-line state from 0.8.1 and says so in its output.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.corpus/replays
mkdir -p "$dest"
for v in 0.7.0 0.8.0 0.8.1 0.8.5; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: "liger-kernel==$v" -d "$dest"
done
ls -l "$dest"
