#!/usr/bin/env bash
# Build everything the GPU machine (no network) needs carried, on a machine with PyPI access:
#   .whl/     kernelpro's wheel (of the working tree: commit first) and the packages the GPU image
#             lacks: GitPython (gitdb, smmap), PyGithub (pyjwt, pynacl, cryptography, cffi, pycparser),
#             pytest-xdist (execnet) for the tier's part par, openai and its dependencies for the LLM
#             programmer's GPU test
#   .corpus/  benchmarks/fetch_corpus.sh: Liger and fla wheels, FlashInfer's Triton folder
# Then: run(command="bash benchmarks/h200.sh tier-par", carry=[".whl", ".corpus"]).
#   bash benchmarks/carry.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ -z "$(git status --porcelain --untracked-files=no)" ] || echo "note: the wheel holds uncommitted changes" >&2
py=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
rm -rf build .whl
mkdir -p .whl
python3 -m pip wheel -q --no-deps . -w .whl
python3 -m pip download -q --no-deps "${py[@]}" -d .whl GitPython gitdb smmap pytest-xdist execnet \
  PyGithub pyjwt pynacl cryptography cffi pycparser
# jsonschema for the fake GitHub (it checks requests against the OpenAPI description) in the GPU tests that publish
python3 -m pip download -q --no-deps "${py[@]}" -d .whl jsonschema jsonschema-specifications referencing attrs rpds-py
python3 -m pip download -q "${py[@]}" -d .whl openai
bash benchmarks/fetch_corpus.sh > /dev/null
du -sh .whl .corpus
