#!/usr/bin/env bash
# The whole GPU benchmark on a lent H200, inside about 8 minutes. Run from the repository
# root on the device machine, after bench/gpu_prepare_wheels.sh here, with `.whl` carried:
#
#   bash bench/gpu_h200.sh            # results land in $OUT (or docs/gpu/ without $OUT)
#
# 0. a lowered guard that fails on the device (bench/gpu_guard_check.py, into versions.txt);
# 1. quick pass (break counts, bit-identical outputs, fullgraph) for every model on cuda,
#    four model groups in parallel (each arm still in its own fresh process);
# 2. TorchInductor timings with --device cuda --mode reduce-overhead (CUDA graphs, as in
#    the paper) and 3 processes per arm, one model at a time, smallest first, starting a
#    model only while the time budget allows one more.
# At most 8 files come back from $OUT: versions.txt, logs.txt, gpu-quick.{json,md,png},
# gpu-timing.{json,md,png}.
# It uses the machine's own torch (it cannot be fetched there) and transformers 4.52.4
# from the carried wheels; the results record both versions.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
RESULTS="${OUT:-$ROOT/docs/gpu}"
mkdir -p "$RESULTS"
BUDGET_SECONDS="${BUDGET_SECONDS:-450}"   # whole script; the device call's limit is larger
TIMING_MODELS="${TIMING_MODELS:-pegasus-causal biogpt t5 phi3-longrope}"
PYTHON="${PYTHON:-python3}"
DEVICE="${DEVICE:-cuda}"     # DEVICE=cpu dry-runs the whole script here, without a GPU
export PYTHONUNBUFFERED=1

if [ -d .whl ]; then
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$ROOT/src"
else
    echo "no .whl/: using the machine's own transformers" >&2
    export PYTHONPATH="$ROOT/src"
fi
"$PYTHON" - <<'PY' | tee "$RESULTS/versions.txt"
import torch, transformers
print("torch", torch.__version__, "cuda", torch.version.cuda,
      torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")
print("transformers", transformers.__version__)
PY
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >> "$RESULTS/versions.txt" 2>&1
# 0. a lowered guard failing on the device raises the user's error, and the process lives on.
"$PYTHON" bench/gpu_guard_check.py "$DEVICE" >> "$RESULTS/versions.txt" 2>> "$RESULTS/logs.txt"

bench() { "$PYTHON" -m benchmarks "$@"; }

# 1. quick pass, four groups in parallel.
MODEL_GROUPS=("t5,flan-t5,bart,marian" "blenderbot,pegasus-causal,biogpt,whisper"
        "phi3-longrope,layoutlmv3,longformer" "grounding-dino,clap,chronos-bolt")
QUICK_FILES=()
for index in "${!MODEL_GROUPS[@]}"; do
    file="$RESULTS/quick-$index.json"
    QUICK_FILES+=(--render "$file")
    bench --quick --device "$DEVICE" --models "${MODEL_GROUPS[$index]}" --timeout 240 --json "$file" \
        > "$RESULTS/quick-$index.log" 2>&1 &
done
wait
bench "${QUICK_FILES[@]}" --title "H200, transformers 4.52.4, quick" \
    --json "$RESULTS/gpu-quick.json" --markdown "$RESULTS/gpu-quick.md" --plot "$RESULTS/gpu-quick.png"
cat "$RESULTS"/quick-*.log >> "$RESULTS/logs.txt"
rm -f "$RESULTS"/quick-*.json "$RESULTS"/quick-*.log
echo "quick pass done at ${SECONDS}s" >&2

# 2. timings, one model at a time while the budget allows: 6 fresh processes a model
#    (3 per arm), each importing, compiling cold and calling 10 times; ~2-3 min a model.
TIMING_FILES=()
for model in $TIMING_MODELS; do
    if [ "$SECONDS" -gt $((BUDGET_SECONDS - 180)) ]; then
        echo "stopping timings before $model at ${SECONDS}s (budget ${BUDGET_SECONDS}s)" >&2
        break
    fi
    file="$RESULTS/timing-$model.json"
    bench --timing-only --device "$DEVICE" --mode reduce-overhead --repeats 3 --models "$model" --timeout 150 \
        --json "$file" 2>> "$RESULTS/logs.txt" >/dev/null && TIMING_FILES+=(--render "$file")
    echo "timed $model at ${SECONDS}s" >&2
done
if [ ${#TIMING_FILES[@]} -gt 0 ]; then
    bench "${TIMING_FILES[@]}" --title "H200, transformers 4.52.4, inductor reduce-overhead" \
        --json "$RESULTS/gpu-timing.json" --markdown "$RESULTS/gpu-timing.md" --plot "$RESULTS/gpu-timing.png"
    rm -f "$RESULTS"/timing-*.json
fi
echo "done in ${SECONDS}s" >&2
