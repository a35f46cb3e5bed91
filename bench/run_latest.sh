#!/usr/bin/env bash
# The benchmark suite under the newest transformers 5.x that installed here: 5.24.0.
#
#   bench/run_latest.sh                         # quick: counts, equality, fullgraph (all models)
#   bench/run_latest.sh --models t5 --repeats 3 # TorchInductor timings too
#
# Creates .venv-bench-latest (once) with torch==2.13.0 and transformers==5.24.0, installs
# graphmend into it (editable, no deps), and writes docs/results-latest-<kind>.{json,md,png}.
# Any arguments are passed to `graphmend bench`; with none, --quick is used.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/bench/_venv.sh"
VENV="$ROOT/.venv-bench-latest"
TRANSFORMERS_VERSION="${TRANSFORMERS_VERSION:-5.24.0}"
make_bench_venv "$VENV" "transformers==$TRANSFORMERS_VERSION"

if [ $# -eq 0 ]; then set -- --quick; fi
KIND=timing
for argument in "$@"; do
    [ "$argument" = "--quick" ] && KIND=quick
    [ "$argument" = "--train-only" ] && KIND=train
done
PREFIX="$ROOT/docs/results-latest-$KIND"
cd "$ROOT"
# bench/reproduce.sh renders one page from both versions' JSON: it sets RESULTS_JSON_ONLY=1.
outputs=(--json "$PREFIX.json")
if [ "${RESULTS_JSON_ONLY:-0}" != 1 ]; then outputs+=(--markdown "$PREFIX.md" --plot "$PREFIX.png"); fi
"$VENV/bin/python" -m benchmarks "$@" \
    --title "transformers $TRANSFORMERS_VERSION, $KIND" \
    "${outputs[@]}"
