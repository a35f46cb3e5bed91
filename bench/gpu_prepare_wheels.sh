#!/usr/bin/env bash
# Run HERE (a machine with PyPI) before bench/gpu_h200.sh: downloads into .whl/ the wheels
# the GPU machine lacks for a transformers 4.52.4 run (it has Python 3.12, its own torch
# and a transformers 5.x, and no network). Pass `.whl` in the device run's `carry`.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
mkdir -p .whl
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl \
    "transformers==4.52.4" "tokenizers==0.21.4" "huggingface_hub==0.36.2"
ls -la .whl
