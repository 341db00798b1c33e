#!/usr/bin/env bash
# The issue-8 benchmarks on the GPU machine (no network), one step per call so each stays well
# under a 10-minute command limit. Needs the carried wheels of .ci/gpu (.whl/) and, for replays,
# .corpus/replays/ from benchmarks/fetch_corpus.sh. Tables go to stdout, JSON to $OUT.
#   bash benchmarks/h200.sh overhead      # ~2 min: per-candidate time by stage, candidates/min/GPU
#   bash benchmarks/h200.sh replays       # ~5-8 min: the 4 replays x 2 directions, tuner, budget 3;
#                                         # extra arguments go to replays.py (e.g. --only liger-ce-exp2)
#   bash benchmarks/h200.sh kernelbench   # ~4 min: 4 KernelBench-format problems at GPU sizes, tuner
#   bash benchmarks/h200.sh pool          # ~1 min: the GPU pool test (pytest -m gpu -k pool)
#   bash benchmarks/h200.sh tier1|tier2|tier3  # the GPU test tier (pytest -m gpu) in three calls of
#                                         # under 10 minutes each; together every test of tests/test_gpu.py
#   bash benchmarks/h200.sh measure       # ~8 min: the targets of issues 3, 4 and 7 measured again
#                                         # (CUDA evaluation, profiling on Liger and fla, energy part d,
#                                         # Triton evaluation throughput); needs .corpus/
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
repo=$PWD
step=${1:?usage: bash benchmarks/h200.sh overhead|replays|kernelbench|pool|tier1|tier2|tier3|measure}
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
  tier1|tier2|tier3)
    declare -A tiers=(
      [tier1]="demo or profiling or graph or memcheck or nvml or side_stream or patched or illegal or fork"
      [tier2]="cuda_example or cuda_candidate or scalar or extension or launcher or pool or reactive"
      [tier3]="evaluate_statuses or energy_passive or adversarial"
    )
    export KERNELPRO_ARTIFACTS="$out"
    timeout 580 python3 -m pytest -m gpu -p no:cacheprovider -q -rA --durations=0 "$repo/tests/test_gpu.py" \
      -k "${tiers[$step]}" 2>&1 | tee "$out/$step.log" ;;
  measure)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$repo"/.corpus/*.whl && \
      cp -r "$repo"/.corpus/site/* /tmp/site/ && python3 -m compileall -q -j 0 /tmp/site > /dev/null
    timeout 100 python3 "$repo/benchmarks/cuda_build.py" --variants 3 --evals 5 --eval-large --out "$out/cuda_build.json" 2>&1 | tee "$out/cuda_build.log"
    timeout 60 python3 "$repo/benchmarks/corpus_profile.py" --ncu-import liger_kernel.ops.swiglu 2>&1 | tee "$out/ncu_import.log"
    timeout 150 python3 "$repo/benchmarks/corpus_profile.py" --out "$out" --only "liger swiglu,liger dyt,fla softmax" 2>&1 | tee "$out/corpus_profile.log"
    timeout 60 python3 "$repo/benchmarks/evaluator.py" --parts throughput --out "$out" 2>&1 | tee "$out/evaluator.log"
    timeout 45 python3 "$repo/benchmarks/evaluator.py" --parts throughput --fork-server --out "$out/fork" 2>&1 | tee "$out/evaluator_fork.log"
    timeout 180 python3 "$repo/benchmarks/energy.py" --parts select --out "$out" 2>&1 | tee "$out/energy_select.log" ;;
  *) echo "unknown step $step" >&2; exit 2 ;;
esac
