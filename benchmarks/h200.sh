#!/usr/bin/env bash
# The issue-8 benchmarks on the GPU machine (no network), one step per call so each stays well
# under a 10-minute command limit. Needs the carried wheels of .ci/gpu (.whl/) and, for replays,
# .corpus/replays/ from benchmarks/fetch_corpus.sh. Tables go to stdout, JSON to $OUT.
#   bash benchmarks/h200.sh overhead      # ~2 min: per-candidate time by stage, candidates/min/GPU
#   bash benchmarks/h200.sh replays       # ~5-8 min: the 4 replays x 2 directions, tuner, budget 3;
#                                         # extra arguments go to replays.py (e.g. --only liger-ce-exp2)
#   bash benchmarks/h200.sh kernelbench   # ~4 min: 4 KernelBench-format problems at GPU sizes, tuner
#   bash benchmarks/h200.sh pool          # ~1 min: the GPU pool test (pytest -m gpu -k pool)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
repo=$PWD
step=${1:?usage: bash benchmarks/h200.sh overhead|replays|kernelbench|pool}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
python3 -m compileall -q -j 0 /tmp/site > /dev/null  # as .ci/gpu: children never write bytecode
export PYTHONPATH=/tmp/site KERNELPRO_DEVICE=cuda KERNELPRO_PROGRESS=0
out="${OUT:-/tmp/kernelpro-bench}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
# From /tmp, so the installed kernelpro (not the checkout's folders) is imported.
cd /tmp || exit 1
case "$step" in
  overhead) timeout 300 python3 "$repo/benchmarks/overhead.py" --budget 6 --out "$out" ;;
  replays) timeout 570 python3 "$repo/benchmarks/replays.py" --budget 3 --corpus "$repo/.corpus/replays" --out "$out" "${@:2}" ;;
  kernelbench) timeout 540 python3 "$repo/benchmarks/kernelbench.py" --scale 64 --budget 6 --search greedy --out "$out" ;;
  pool) timeout 300 python3 -m pytest -m gpu -p no:cacheprovider -q -rA "$repo/tests/test_gpu.py" -k pool ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
