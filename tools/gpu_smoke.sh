#!/usr/bin/env bash
# GPU smoke test: 3 training steps of train.py on synthetic data for each GPU count, mode
# and dtype, then one line per run with the devices, replicas, global batch and speed it
# saw, with the memory estimate of a replica and the most a GPU used (docs/gpu.md, "Smoke
# test on a GPU box", says how to read them). Two modes for N > 1
# GPUs: mirrored = one process, MirroredStrategy over the N GPUs (--num_gpus=N);
# processes = one process a GPU, a local collective job (tools/launch_local_cluster.py
# --workers N --distribution collective, NCCL between them). A few minutes on a GPU box;
# every run's whole log stays in the printed directory.
#
#   bash tools/gpu_smoke.sh
#   NUM_GPUS="1 2 4 8" DTYPES="fp32 fp16 bf16" bash tools/gpu_smoke.sh
#
# Settings (environment): NUM_GPUS (default "1 2"), MODES ("mirrored processes"; one GPU
# runs once, as mirrored), DTYPES ("fp32 fp16"), RESNET_SIZE (50), BATCH_SIZE per GPU
# (32), IMAGE_SIZE (224), VISIABLE_GPU (0; -1 leaves CUDA_VISIBLE_DEVICES as it is; the
# processes mode hands out the GPUs of CUDA_VISIBLE_DEVICES, or all, one a task), PYTHON
# (the checkout's .venv/bin/python, else python3), OUT (a new temporary directory).
# Exit status 0 when every run trained its 3 steps, 1 otherwise.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The checkout's environment (README's set-up); another Python without the requirements
# would only say so (mlimages/config/interpreter.py).
if [ -x "$here/.venv/bin/python" ]; then default_python="$here/.venv/bin/python"; else default_python=python3; fi
PYTHON="${PYTHON:-$default_python}"
NUM_GPUS="${NUM_GPUS:-1 2}"
MODES="${MODES:-mirrored processes}"
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
  for mode in $MODES; do
    if [ "$gpus" -eq 1 ] && [ "$mode" = processes ]; then
        continue   # one process of one GPU: the mirrored run's
    fi
    for dtype in $DTYPES; do
        run="$OUT/gpus${gpus}_${mode}_$dtype"
        flags=(--use_synthetic_data --class_num=1000 --resnet_size="$RESNET_SIZE"
               --image_size="$IMAGE_SIZE" --batch_size="$BATCH_SIZE" --dtype="$dtype"
               --max_iter=3 --log_interval=1 --snapshot=1000
               --model_dir="$run/model" --log_dir="$run/log")
        # The GPUs' memory in use every 200 ms (MiB): every session grows its memory on
        # demand, so the busiest GPU's largest figure is its allocator's peak + the CUDA
        # context, to hold against the estimate + margin (docs/gpu.md, "Memory").
        sampler=
        if command -v nvidia-smi > /dev/null 2>&1; then
            nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 \
                > "$run.gpu_memory" 2> /dev/null &
            sampler=$!
        fi
        if [ "$mode" = processes ]; then
            "$PYTHON" "$here/tools/launch_local_cluster.py" --workers "$gpus" \
                --distribution collective --gpus_per_task 1 --restarts 0 --timeout 1200 \
                -- "${flags[@]}" --num_gpus=1 > "$run.log" 2>&1
        else
            "$PYTHON" "$here/train.py" "${flags[@]}" --num_gpus="$gpus" \
                --visiable_gpu="$VISIABLE_GPU" > "$run.log" 2>&1
        fi
        code=$?
        if [ -n "$sampler" ]; then
            kill "$sampler" 2> /dev/null
            wait "$sampler" 2> /dev/null
        fi
        used="$(sort -n "$run.gpu_memory" 2> /dev/null | tail -1)"
        used="$(awk -v m="${used:-}" 'BEGIN { if (m == "") print "?"; else printf "%.1fGB", m * 1048576 / 1e9 }')"
        if [ "$code" -eq 0 ] && grep -q 'step 3: ' "$run.log"; then
            result=ok
        else
            result="failed (exit $code): $(grep -E 'error|Error' "$run.log" | tail -1)"
            status=1
        fi
        if [ "$mode" = processes ]; then
            # every task's GPUs as the launcher handed them out; the chief's view
            visible="$(field "$run.log" 'CUDA_VISIBLE_DEVICES\): (.*)$' | sed -E 's/, /,/g; s/ /=/g')"
            log="$(mktemp)"
            grep '^\[chief:0\]' "$run.log" > "$log"
            global="$(field "$log" '([0-9]+) a synchronous step')"
            speed="$(grep -E 'step [0-9]+: ' "$log" | tail -1 |
                     sed -E 's/.*whole job ([0-9.]+) images\/s.*/\1/')"
        else
            visible="$(field "$run.log" 'CUDA_VISIBLE_DEVICES=([0-9,]*)')"
            if [ "$visible" = "?" ]; then   # not chosen by the run: the environment's
                visible="${CUDA_VISIBLE_DEVICES-unset}"
                visible="${visible:-none}"
            fi
            log="$run.log"
            global="$(field "$log" '([0-9]+) images a step of this process')"
            speed="$(grep -E 'step [0-9]+: ' "$log" | tail -1 |
                     sed -E 's/.*\(([0-9.]+) images\/s.*/\1/')"
        fi
        echo "gpus=$gpus mode=$mode dtype=$dtype  cuda_visible=$visible" \
            " sees=$(field "$log" 'this process sees ([0-9]+) GPU')" \
            " replicas=$(field "$log" '; ([0-9]+) devices?')" \
            " global_batch=$global  images/s=$speed" \
            " estimate=$(field "$log" ': ([0-9.]+ GB) a replica' | tr -d ' ')  gpu_used=$used" \
            " status=$result"
        [ "$mode" = processes ] && rm -f "$log"
    done
  done
done
exit "$status"
