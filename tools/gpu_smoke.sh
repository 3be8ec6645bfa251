#!/usr/bin/env bash
# GPU smoke test: 3 training steps of train.py on synthetic data for each GPU count and
# dtype, then one line per run with the devices, replicas, global batch and speed it saw
# (docs/gpu.md, "Smoke test on a GPU box", says how to read them). A few minutes on a GPU
# box; every run's whole log stays in the printed directory.
#
#   bash tools/gpu_smoke.sh
#   NUM_GPUS="1 2 4 8" DTYPES="fp32 fp16 bf16" bash tools/gpu_smoke.sh
#
# Settings (environment): NUM_GPUS (default "1 2"), DTYPES ("fp32 fp16"), RESNET_SIZE (50),
# BATCH_SIZE per GPU (32), IMAGE_SIZE (224), VISIABLE_GPU (0; -1 leaves
# CUDA_VISIBLE_DEVICES as it is), PYTHON (the checkout's .venv/bin/python, else python3),
# OUT (a new temporary directory).
# Exit status 0 when every run trained its 3 steps, 1 otherwise.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The checkout's environment (README's set-up); another Python without the requirements
# would only say so (mlimages/config/interpreter.py).
if [ -x "$here/.venv/bin/python" ]; then default_python="$here/.venv/bin/python"; else default_python=python3; fi
PYTHON="${PYTHON:-$default_python}"
NUM_GPUS="${NUM_GPUS:-1 2}"
DTYPES="${DTYPES:-fp32 fp16}"
RESNET_SIZE="${RESNET_SIZE:-50}"
BATCH_SIZE="${BATCH_SIZE:-32}"
IMAGE_SIZE="${IMAGE_SIZE:-224}"
VISIABLE_GPU="${VISIABLE_GPU:-0}"
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_smoke.XXXXXX")}"
mkdir -p "$OUT"
echo "gpu_smoke.sh: ResNet-$RESNET_SIZE, batch $BATCH_SIZE per GPU, image $IMAGE_SIZE; logs in $OUT"

# The value after `pattern` on the first matching line of a log, or "?".
field() {
    local value
    value="$(grep -o -m1 -E "$2" "$1" | head -1 | sed -E "s/$2/\\1/")"
    echo "${value:-?}"
}

status=0
for gpus in $NUM_GPUS; do
    for dtype in $DTYPES; do
        run="$OUT/gpus${gpus}_$dtype"
        "$PYTHON" "$here/train.py" --use_synthetic_data --class_num=1000 \
            --resnet_size="$RESNET_SIZE" --image_size="$IMAGE_SIZE" \
            --batch_size="$BATCH_SIZE" --num_gpus="$gpus" --visiable_gpu="$VISIABLE_GPU" \
            --dtype="$dtype" --max_iter=3 --log_interval=1 --snapshot=1000 \
            --model_dir="$run/model" --log_dir="$run/log" > "$run.log" 2>&1
        code=$?
        if [ "$code" -eq 0 ] && grep -q 'step 3: ' "$run.log"; then
            result=ok
        else
            result="failed (exit $code): $(grep -E 'error|Error' "$run.log" | tail -1)"
            status=1
        fi
        visible="$(field "$run.log" 'CUDA_VISIBLE_DEVICES=([0-9,]*)')"
        if [ "$visible" = "?" ]; then   # not chosen by the run: the environment's
            visible="${CUDA_VISIBLE_DEVICES-unset}"
            visible="${visible:-none}"
        fi
        echo "gpus=$gpus dtype=$dtype  cuda_visible=$visible" \
            " sees=$(field "$run.log" 'this process sees ([0-9]+) GPU')" \
            " replicas=$(field "$run.log" '; ([0-9]+) devices?')" \
            " global_batch=$(field "$run.log" '([0-9]+) images a step of this process')" \
            " images/s=$(grep -E 'step [0-9]+: ' "$run.log" | tail -1 |
                         sed -E 's/.*\(([0-9.]+) images\/s.*/\1/')" \
            " status=$result"
    done
done
exit "$status"
