#!/usr/bin/env bash
# The benchmark suite under transformers 4.52.4, the version of the paper's evaluation.
#
#   bench/run_tf452.sh                          # quick: counts, equality, fullgraph (all models)
#   bench/run_tf452.sh --models t5,biogpt --repeats 3   # TorchInductor timings too
#   bench/run_tf452.sh --train-only --train-backends aot_eager   # the training step alone
#
# Creates .venv-bench-tf452 (once) with torch==2.13.0 and transformers==4.52.4, installs
# graphmend into it (editable, no deps), and writes docs/results-tf452-<kind>.{json,md,png}.
# Any arguments are passed to `graphmend bench`; with none, --quick is used.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/bench/_venv.sh"
VENV="$ROOT/.venv-bench-tf452"
make_bench_venv "$VENV" "transformers==4.52.4"

if [ $# -eq 0 ]; then set -- --quick; fi
KIND=timing
for argument in "$@"; do
    [ "$argument" = "--quick" ] && KIND=quick
    [ "$argument" = "--train-only" ] && KIND=train
done
PREFIX="$ROOT/docs/results-tf452-$KIND"
cd "$ROOT"
# bench/reproduce.sh renders one page from both versions' JSON: it sets RESULTS_JSON_ONLY=1.
outputs=(--json "$PREFIX.json")
if [ "${RESULTS_JSON_ONLY:-0}" != 1 ]; then outputs+=(--markdown "$PREFIX.md" --plot "$PREFIX.png"); fi
"$VENV/bin/python" -m benchmarks "$@" \
    --title "transformers 4.52.4, $KIND" \
    "${outputs[@]}"
