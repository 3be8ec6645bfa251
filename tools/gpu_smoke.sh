#!/usr/bin/env bash
# The first check on a new GPU box: about 10 minutes of short train.py runs, and ONE report
# file (its path is the last line printed). docs/gpu.md, "The smoke test", says what each
# section means. The report's sections:
#   Environment  nvidia-smi's GPUs (name, driver, memory, compute capability), TensorFlow's
#                build (CUDA, cuDNN, the compute capabilities it carries), Python and TF
#                versions, cores, /dev/shm, the CUDA_* / TF_* / NCCL_* environment
#   Start        time to the first step of the same 1-step run twice: cold (an empty CUDA
#                compile cache of its own, CUDA_CACHE_PATH under the output directory: an
#                Ampere or Hopper GPU JIT-compiles TF's PTX into it) and warm (that cache)
#   Memory       tools/plan_run.py's estimate for the GPU's memory (when it has
#                --gpu_memory), one run at the largest batch it names (or MEMORY_BATCH),
#                the GPUs' peak memory.used (nvidia-smi, sampled)
#   NCCL         (2+ GPUs) one process a GPU (the launcher, collective) vs MirroredStrategy
#                (--num_gpus=N), with NCCL_DEBUG=INFO's transports (P2P, SHM, NET)
#   Speed        images/s of ResNet-50/101 x fp32/fp16/bf16 x NCHW/NHWC on synthetic data,
#                and on real records with device vs CPU augmentation; FULL=1: every row
#   AMP          each fp16 run's "Converted N/M nodes to float16 precision" line (TF's
#                auto_mixed_precision pass, LOG(INFO): the runs use TF_CPP_MIN_LOG_LEVEL=0)
# Without a GPU (no nvidia-smi, or TensorFlow sees none) it is a CPU dry run of about a
# minute: the same report, every GPU row "skipped (no GPU)", one tiny ResNet-18 row and the
# one-process-a-GPU layout as a 2-task collective job on the CPU.
#
#   bash tools/gpu_smoke.sh
#   FULL=1 bash tools/gpu_smoke.sh
#
# Settings (environment): OUT (a new temporary directory), PYTHON (the checkout's
# .venv/bin/python, else python3), FULL (0; 1 = the whole speed matrix), BUDGET (seconds
# of runs: 600, FULL=1 0 = no limit; rows past it are marked skipped), RUN_TIMEOUT (300 s
# a run), STEPS (40 a speed row; images/s of the second half), BATCH_SIZE (64 a GPU),
# IMAGE_SIZE (224), NUM_GPUS (the NCCL section's; every GPU TensorFlow sees), DATA_DIR and
# DATA_CLASSES (real records and their class count; default the demo's, built under OUT),
# GPU_MEMORY_GB (nvidia-smi's memory.total of the first GPU), MEMORY_BATCH (plan_run.py's
# batch), DRY_RUN (1: the CPU dry run on a GPU box too).
# Exit status 0 when every run that ran trained its steps, 1 otherwise (the report is
# complete either way), 2 on a bad setting (one line, nothing written).
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
default_python=python3
if [ -x "$here/.venv/bin/python" ]; then default_python="$here/.venv/bin/python"; fi
PYTHON="${PYTHON:-$default_python}"
FULL="${FULL:-0}"
if [ "$FULL" = 1 ]; then BUDGET="${BUDGET:-0}"; else BUDGET="${BUDGET:-600}"; fi
RUN_TIMEOUT="${RUN_TIMEOUT:-300}"
STEPS="${STEPS:-40}"
BATCH_SIZE="${BATCH_SIZE:-64}"
IMAGE_SIZE="${IMAGE_SIZE:-224}"
DRY_RUN="${DRY_RUN:-0}"
for setting in FULL:"$FULL" DRY_RUN:"$DRY_RUN" BUDGET:"$BUDGET" RUN_TIMEOUT:"$RUN_TIMEOUT" \
        STEPS:"$STEPS" BATCH_SIZE:"$BATCH_SIZE" IMAGE_SIZE:"$IMAGE_SIZE" NUM_GPUS:"${NUM_GPUS:-0}" \
        DATA_CLASSES:"${DATA_CLASSES:-0}" MEMORY_BATCH:"${MEMORY_BATCH:-0}"; do
    name="${setting%%:*}" value="${setting#*:}"
    case "$value" in
        ''|*[!0-9]*) echo "gpu_smoke.sh: $name=$value is not a whole number; give e.g. $name=1" >&2
                     exit 2 ;;
    esac
done
if [ -n "${DATA_DIR:-}" ] && [ "${DATA_CLASSES:-0}" -eq 0 ]; then
    echo "gpu_smoke.sh: DATA_DIR=$DATA_DIR needs DATA_CLASSES, its records' label length" \
         "(e.g. DATA_CLASSES=11166)" >&2
    exit 2
fi
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/gpu_smoke.XXXXXX")}"
mkdir -p "$OUT/runs"
REPORT="$OUT/report.md"
: > "$REPORT"
status=0
began=$SECONDS
# The runs tables: a row is its name, what it trained, what it saw (saw) and its status.
TABLE='| run | model | dtype | layout | data | augment | cuda_visible | sees | replicas |'
TABLE+=' global batch | images/s | status |'
RULE="$(echo "$TABLE" | sed -E 's/[^|]+/ --- /g')"
BLANK=' |  |  |  | '   # what a run that did not run saw

say() { printf '%s\n' "$@" | tee -a "$REPORT"; }   # the report, and the terminal
row() { say "| $1 | $2 | $3 | $4 | $5 | $6 | $7 | $8 |"; }

# The value after `pattern` on the first matching line of a log, or "?".
field() {
    local value
    value="$(grep -o -m1 -E "$2" "$1" | head -1 | sed -E "s/$2/\\1/")"
    echo "${value:-?}"
}

# Seconds a run may take: RUN_TIMEOUT, within what is left of BUDGET (0 = no budget).
time_left() {
    local left=$RUN_TIMEOUT
    if [ "$BUDGET" -gt 0 ] && [ $((BUDGET - (SECONDS - began))) -lt "$left" ]; then
        left=$((BUDGET - (SECONDS - began)))
    fi
    echo "$left"
}

# run NAME STEPS COMMAND...: runs COMMAND within time_left, its output in runs/NAME.log.
# Sets run_log, run_spawn (time of day), run_wall (s) and run_status: ok (exit 0 and a
# "step STEPS:" line), timed out, failed (exit N: its last error line) or skipped.
run() {
    local name="$1" steps="$2" limit code t0=$SECONDS
    shift 2
    run_log="$OUT/runs/$name.log" run_wall='-'
    limit="$(time_left)"
    if [ "$limit" -lt 30 ]; then
        run_status="skipped (past BUDGET=$BUDGET s; BUDGET=0 runs every row)"
        return
    fi
    run_spawn="$(date +%H:%M:%S.%N)"
    timeout --kill-after=60 "$limit" "$@" < /dev/null > "$run_log" 2>&1
    code=$?
    run_wall=$((SECONDS - t0))
    if [ "$code" -eq 0 ] && grep -q "step $steps: " "$run_log"; then
        run_status=ok
    elif [ "$code" -eq 124 ] || [ "$code" -eq 137 ]; then
        run_status="timed out after $limit s"; status=1
    else
        run_status="failed (exit $code): $(grep -E 'rror' "$run_log" | tail -1 | cut -c1-200)"
        status=1
    fi
}

# Seconds from a run's spawn (time of day) to its first "step N:" line (absl's stamp).
first_step_seconds() {
    local stamp
    stamp="$(grep -m1 -E 'step [0-9]+: ' "$1" | grep -oE '^[IWE][0-9]{4} [0-9:.]+' | cut -d' ' -f2)"
    if [ -z "$stamp" ]; then echo '?'; return; fi
    awk -v a="$2" -v b="$stamp" '
        function s(t,  p) { split(t, p, ":"); return p[1] * 3600 + p[2] * 60 + p[3] }
        BEGIN { d = s(b) - s(a); if (d < 0) d += 86400; printf "%.1f", d }'
}

# What a run saw, from its log: "cuda_visible | sees | replicas | global batch | images/s".
# mode: single (train.py) or processes (the launcher; the chief's lines).
saw() {
    local log="$1" mode="$2" visible global speed view
    if [ ! -f "$log" ]; then echo "$BLANK"; return; fi
    if [ "$mode" = processes ]; then
        visible="$(field "$log" 'CUDA_VISIBLE_DEVICES\): (.*)$' | sed -E 's/, /,/g; s/ /=/g')"
        view="$OUT/runs/.chief"
        grep '^\[chief:0\]' "$log" > "$view"
        global="$(field "$view" '([0-9]+) a synchronous step')"
        speed='.*whole job ([0-9.]+) images/s.*'
    else
        visible="$(field "$log" 'CUDA_VISIBLE_DEVICES=([0-9,]*)')"
        if [ "$visible" = "?" ]; then   # not chosen by the run (no GPU): the environment's
            visible="${CUDA_VISIBLE_DEVICES-unset}"
            visible="${visible:-none}"
        fi
        view="$log"
        global="$(field "$view" '([0-9]+) images a step of this process')"
        speed='.*\(([0-9.]+) images/s.*'
    fi
    speed="$(grep -E 'step [0-9]+: ' "$view" | tail -1 | sed -E "s#$speed#\\1#")"
    echo "$visible | $(field "$view" 'this process sees ([0-9]+) GPU')" \
         "| $(field "$view" '; ([0-9]+) devices?') | $global | ${speed:-?}"
    [ "$mode" = processes ] && rm -f "$view"
}

# train.py's flags of a row: RESNET DTYPE LAYOUT DATA AUGMENT STEPS NAME [IMAGE BATCH CLASSES]
row_flags() {
    local data=(--use_synthetic_data --class_num="${10:-1000}")
    if [ "$4" = real ]; then
        data=(--data_dir="$real_dir" --class_num="$real_classes" --augment_on="$5")
    fi
    printf '%s\n' "${data[@]}" --resnet_size="$1" --dtype="$2" --data_format="$3" \
        --image_size="${8:-$IMAGE_SIZE}" --batch_size="${9:-$BATCH_SIZE}" --max_iter="$6" \
        --log_interval=$(($6 / 2 > 0 ? $6 / 2 : 1)) --snapshot=100000 \
        --model_dir="$OUT/runs/$7/model" --log_dir="$OUT/runs/$7/log"
}

# TensorFlow's build info (the dict tf.sysconfig.get_build_info() returns, read from its
# file without starting TensorFlow), versions and cores.
BUILD_PROBE='import importlib.metadata, importlib.util, os, platform, runpy
path = os.path.join(os.path.dirname(importlib.util.find_spec("tensorflow").origin),
                    "python", "platform", "build_info.py")
print("Python %s, TensorFlow %s" % (platform.python_version(),
                                    importlib.metadata.version("tensorflow")))
print("build info: %s" % dict(runpy.run_path(path)["build_info"]))
print("cores: %d, this process may use %d" % (os.cpu_count(), len(os.sched_getaffinity(0))))'
# The GPUs TensorFlow sees, with their compute capability.
GPU_PROBE='import tensorflow.compat.v1 as tf
gpus = tf.config.list_physical_devices("GPU")
for gpu in gpus:
    details = tf.config.experimental.get_device_details(gpu)
    print("TF sees %s: %s, compute capability %s" % (gpu.name, details.get("device_name"),
          ".".join(map(str, details.get("compute_capability", ("?",))))))
print("TF sees %d GPU(s)" % len(gpus))'

environment() {
    local probe_log="$OUT/runs/probe.log" warnings query=('--format=csv,noheader,nounits')
    say '# gpu_smoke.sh report' '' "$(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -srm)," \
        "checkout $(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')" ''
    say '## Environment' '' '```'
    "$PYTHON" -c "$BUILD_PROBE" > "$probe_log" 2>&1
    tf_gpus='?'
    if command -v nvidia-smi > /dev/null 2>&1; then
        say "$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1)"
        if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -gt 1 ]; then
            say '' "$(nvidia-smi topo -m 2>&1)"
        fi
        GPU_MEMORY_GB="${GPU_MEMORY_GB:-$(nvidia-smi --query-gpu=memory.total "${query[@]}" \
            2>/dev/null | head -1 | awk '{ printf "%.1f", $1 * 1.048576 / 1000 }')}"   # MiB -> GB (10^9, plan_run's unit)
        # No compile cache here, so that the cold run is cold; TF's own log lines.
        [ "$DRY_RUN" = 1 ] || CUDA_CACHE_DISABLE=1 TF_CPP_MIN_LOG_LEVEL=0 timeout 300 \
            "$PYTHON" -c "$GPU_PROBE" >> "$probe_log" 2>&1
        tf_gpus="$(field "$probe_log" '^TF sees ([0-9]+) GPU')"
    else
        say 'nvidia-smi: not found (no NVIDIA driver)'
    fi
    say "$(grep -E '^(Python|build info|TF sees|cores)' "$probe_log")"
    say "/dev/shm: $(df -h /dev/shm 2>/dev/null | awk 'NR == 2 { print $2 " (" $4 " free)" }')"
    say 'environment:' "$(env | grep -E '^(CUDA|TF|NCCL)_' | sort)" '```' ''
    warnings="$(grep -E '^[0-9-]+ [0-9:.]+: [WE] ' "$probe_log" | cut -c1-240 | head -12)"
    [ "$tf_gpus" != '?' ] || warnings='(TensorFlow not asked: no GPU to find)'
    say "TensorFlow's own warnings and errors as it found the GPUs (runs/probe.log):" \
        '```' "${warnings:-none}" '```' ''
    if [ "$DRY_RUN" = 1 ]; then dry='DRY_RUN=1'
    elif ! command -v nvidia-smi > /dev/null 2>&1; then dry='no nvidia-smi'
    elif [ "$tf_gpus" != "?" ] && [ "$tf_gpus" -gt 0 ]; then dry=''
    else dry="TensorFlow sees no GPU (tensorflow[and-cuda] installed? runs/probe.log)"
    fi
    if [ -n "$dry" ]; then
        say "**CPU dry run** ($dry): every GPU row is skipped; tiny CPU rows run instead." ''
    fi
}

start_section() {
    local which first name cache
    say '## Start: cold vs warm' '' \
        "The same run (ResNet-50, fp16, NHWC, synthetic, batch $BATCH_SIZE, 1 step) twice." \
        "CUDA_CACHE_PATH=$OUT/cuda_cache (CUDA_CACHE_MAXSIZE=4 GiB) was empty before the cold" \
        "run: a GPU without machine code in TF's build (Ampere, Hopper) JIT-compiles its PTX" \
        'into it; the warm run reads it (and the OS file cache is warm too).' '' \
        '| run | time to the first step (s) | wall (s) | compile cache after | status |' \
        '| --- | --- | --- | --- | --- |'
    rm -rf "$OUT/cuda_cache"   # an OUT used before: cold again
    for which in cold warm; do
        name="start_$which"
        if [ -n "$dry" ]; then say "| $which |  |  |  | skipped (no GPU) |"; continue; fi
        mapfile -t flags < <(row_flags 50 fp16 NHWC synthetic - 1 "$name")
        run "$name" 1 "$PYTHON" "$here/train.py" "${flags[@]}" --visiable_gpu=0
        first='?'
        [ "$run_status" = ok ] && first="$(first_step_seconds "$run_log" "$run_spawn")"
        cache="$({ du -sk "$OUT/cuda_cache" 2>/dev/null || echo 0; } |
                 awk '{ printf "%.1f MB", $1 / 1024 }')"
        say "| $which | $first | $run_wall | $cache | $run_status |"
        rm -rf "$OUT/runs/$name/model"
    done
    say ''
}

memory_section() {
    local plan='' estimate batch="${MEMORY_BATCH:-}" samples="$OUT/runs/memory_samples.csv"
    local sampler peak before flags query=('--query-gpu=index,memory.used' '--format=csv,noheader,nounits')
    local model=(--resnet_size=101 --class_num=11166 --image_size="$IMAGE_SIZE" --dtype=fp32)
    say '## Memory at the estimated largest batch' ''
    if [ -n "$dry" ]; then say 'skipped (no GPU)' ''; return; fi
    [ "$batch" != 0 ] || batch=''
    if "$PYTHON" "$here/tools/plan_run.py" --help 2>/dev/null | grep -q -- '--gpu_memory'; then
        plan="$("$PYTHON" "$here/tools/plan_run.py" --gpu_memory "$GPU_MEMORY_GB" "${model[@]}" \
                --batch_size=512 --use_synthetic_data --train_images 1000000 2>&1 | grep -i 'memory')"
        say "plan_run.py --gpu_memory $GPU_MEMORY_GB (ResNet-101, 11,166 classes, fp32, batch" \
            '512 asked):' '```' "${plan:-no memory line}" '```'
        # the largest batch its memory line says fits
        [ -n "$batch" ] || batch="$(printf '%s\n' "$plan" |
                                   grep -oE -- 'largest --batch_size that fits [0-9]+' |
                                   grep -oE '[0-9]+$' | head -1)"
    else
        say 'memory estimate: not available (tools/plan_run.py has no --gpu_memory option)'
    fi
    if [ -z "$batch" ]; then
        say 'no batch to run at: not available (MEMORY_BATCH=N runs the row)' ''
        return
    fi
    mapfile -t flags < <(row_flags 101 fp32 auto synthetic - 5 memory "$IMAGE_SIZE" "$batch" 11166)
    nvidia-smi "${query[@]}" > "$samples.before" 2>&1
    nvidia-smi "${query[@]}" -lms 500 > "$samples" 2>&1 &
    sampler=$!
    run memory 5 "$PYTHON" "$here/train.py" "${flags[@]}" --visiable_gpu=0
    kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null
    [ -f "$run_log" ] || : > "$samples"   # skipped: nothing measured
    estimate="$(grep -m1 'memory: estimate' "$run_log" 2> /dev/null | sed -E 's/^.*\] //')"
    peak="$(awk -F', *' '$2 + 0 > m { m = $2 + 0; g = $1 }
        END { if (g != "") printf "%d MiB on GPU %s", m, g; else print "not available" }' "$samples")"
    before="$(awk -F', *' '{ printf "%sGPU %s %s MiB", (NR > 1 ? ", " : ""), $1, $2 }' "$samples.before")"
    say "ResNet-101, 11,166 classes, fp32, --data_format=auto, batch $batch, 5 steps: $run_status" \
        "peak memory.used (nvidia-smi every 0.5 s): $peak; before the run: $before" \
        "train.py's estimate: ${estimate:-not available (no \"memory: estimate\" line in runs/memory.log)}" ''
    rm -rf "$OUT/runs/memory/model"
}

# NCCL's version and transports in a log (NCCL_DEBUG=INFO): "count x transport" of its
# "via" lines.
transports() {
    local found
    [ -f "$1" ] || { echo 'not run'; return; }
    found="$(grep -E 'NCCL INFO' "$1" | grep -oE ' via [A-Za-z0-9/_]+' | sed 's/ via //' |
             sort | uniq -c | awk '{ printf "%s%d x %s", (NR > 1 ? ", " : ""), $1, $2 }')"
    echo "$(grep -m1 -oE 'NCCL version [0-9.a-z+]+' "$1" || echo 'no NCCL version line')," \
         "${found:-no NCCL transport line}"
}

# The one-process-a-GPU job of GPUS tasks: NAME GPUS STEPS then train.py's flags.
processes_run() {
    local name="$1" gpus="$2" steps="$3"
    shift 3
    NCCL_DEBUG=INFO run "$name" "$steps" "$PYTHON" "$here/tools/launch_local_cluster.py" \
        --workers "$gpus" --distribution collective --gpus_per_task 1 --restarts 0 \
        --timeout "$(time_left)" -- "$@" --num_gpus=1
}

nccl_section() {
    local gpus="${NUM_GPUS:-0}" flags nccl
    [ "$gpus" -gt 0 ] || gpus="${tf_gpus/\?/0}"
    say '## Several GPUs: one process a GPU vs MirroredStrategy (NCCL)' ''
    if [ -n "$dry" ]; then
        say 'The one-process-a-GPU layout as a 2-task collective job on the CPU (RING instead' \
            'of NCCL; each task still gets its own CUDA_VISIBLE_DEVICES).' '' "$TABLE" "$RULE"
        mapfile -t flags < <(row_flags 18 fp32 NHWC synthetic - 3 processes 32 2 10)
        processes_run processes 2 3 "${flags[@]}"
        row 'processes x 2' 'ResNet-18 (32 px, CPU)' fp32 NHWC synthetic - \
            "$(saw "$run_log" processes)" "$run_status"
        row 'mirrored x 2' '' '' '' '' '' "$BLANK" 'skipped (no GPU)'
        say ''
        rm -rf "$OUT/runs/processes/model"
        return
    fi
    if [ "$gpus" -lt 2 ]; then say "skipped ($gpus GPU: NUM_GPUS=N with N >= 2 GPUs)" ''; return; fi
    say "ResNet-50, fp16, NHWC, synthetic, batch $BATCH_SIZE a GPU, $STEPS steps, NCCL_DEBUG=INFO," \
        "$gpus GPUs; nvidia-smi topo -m (above) tells NVLink (NV#) from PCIe paths." '' \
        "$TABLE" "$RULE"
    mapfile -t flags < <(row_flags 50 fp16 NHWC synthetic - "$STEPS" processes)
    processes_run processes "$gpus" "$STEPS" "${flags[@]}"
    nccl="$(transports "$run_log")"
    row "processes x $gpus" ResNet-50 fp16 NHWC synthetic - "$(saw "$run_log" processes)" "$run_status"
    mapfile -t flags < <(row_flags 50 fp16 NHWC synthetic - "$STEPS" mirrored)
    NCCL_DEBUG=INFO run mirrored "$STEPS" "$PYTHON" "$here/train.py" "${flags[@]}" \
        --num_gpus="$gpus" --visiable_gpu=0
    row "mirrored x $gpus" ResNet-50 fp16 NHWC synthetic - "$(saw "$run_log" single)" "$run_status"
    say '' "NCCL transports, one process a GPU: $nccl" \
        "NCCL transports, MirroredStrategy: $(transports "$run_log")" ''
    rm -rf "$OUT/runs/processes/model" "$OUT/runs/mirrored/model"
}

# The speed rows, "RESNET DTYPE LAYOUT DATA AUGMENT" each: the default subset, or FULL=1's
# whole matrix (real records with both augmentations).
speed_rows() {
    local resnet dtype layout data
    if [ "$FULL" = 1 ]; then
        for resnet in 50 101; do for dtype in fp32 fp16 bf16; do for layout in NCHW NHWC; do
            for data in 'synthetic -' 'real device' 'real cpu'; do
                echo "$resnet $dtype $layout $data"
            done
        done; done; done
    else
        printf '%s\n' '50 fp16 NHWC synthetic -' '50 fp16 NCHW synthetic -' \
            '50 fp32 NHWC synthetic -' '50 fp32 NCHW synthetic -' '50 bf16 NHWC synthetic -' \
            '101 fp16 NHWC synthetic -' '50 fp16 NHWC real device' '50 fp16 NHWC real cpu'
    fi
}

# The real records: DATA_DIR, else the demo's (mlimages/demo.py), built once under OUT.
real_records() {
    local log="$OUT/runs/demo_records.log"
    if [ -n "${DATA_DIR:-}" ]; then real_dir="$DATA_DIR" real_classes="$DATA_CLASSES"; return; fi
    (cd "$here" && timeout "$(time_left)" "$PYTHON" -c 'import sys
from mlimages import demo
print(demo.make_dataset(sys.argv[1]))
print(len(demo.CLASSES))' "$OUT/demo") > "$log" 2>&1
    real_dir="$(tail -2 "$log" | head -1)" real_classes="$(tail -1 "$log")"
    case "$real_classes" in ''|*[!0-9]*) real_dir='' ;; esac
}

speed_section() {
    local resnet dtype layout data augment name flags
    local records="the demo's (64 px JPEGs, 12 classes: the input pipeline at its lightest)"
    say '## Speed' '' "1 GPU, batch $BATCH_SIZE, image $IMAGE_SIZE, $STEPS steps: images/s of" \
        "the last $((STEPS / 2)) (the log's last interval). Real records: ${DATA_DIR:-$records}." \
        '' "$TABLE" "$RULE"
    real_dir='' real_classes=''
    while read -r resnet dtype layout data augment; do
        name="speed_r${resnet}_${dtype}_${layout}_${data}_$augment"
        set -- "$name" "ResNet-$resnet" "$dtype" "$layout" "$data" "$augment"
        if [ -n "$dry" ]; then row "$@" "$BLANK" 'skipped (no GPU)'; continue; fi
        # (past the budget, run below marks the row skipped)
        if [ "$data" = real ] && [ -z "$real_dir" ] && [ "$(time_left)" -ge 30 ]; then
            real_records
            if [ -z "$real_dir" ]; then
                row "$@" "$BLANK" 'skipped (no records: runs/demo_records.log)'
                continue
            fi
        fi
        mapfile -t flags < <(row_flags "$resnet" "$dtype" "$layout" "$data" "$augment" "$STEPS" "$name")
        run "$name" "$STEPS" "$PYTHON" "$here/train.py" "${flags[@]}" --visiable_gpu=0
        row "$@" "$(saw "$run_log" single)" "$run_status"
        rm -rf "$OUT/runs/$name/model"
    done < <(speed_rows)
    if [ -n "$dry" ]; then
        mapfile -t flags < <(row_flags 18 fp32 NHWC synthetic - 3 cpu 32 2 10)
        run cpu 3 "$PYTHON" "$here/train.py" "${flags[@]}" --visiable_gpu=0
        row cpu 'ResNet-18 (32 px, CPU)' fp32 NHWC synthetic - "$(saw "$run_log" single)" "$run_status"
        rm -rf "$OUT/runs/cpu/model"
    fi
    say ''
}

# Each fp16 run's largest "Converted N/M nodes" line (the training graph's: TF logs one a
# graph it rewrites), else TF's reason ("No (suitable) GPUs detected, skipping ...").
amp_section() {
    local log line found=0 converted='Converted [0-9]+/[0-9]+ nodes to float16 precision using [0-9]+'
    say '## AMP: nodes converted to float16' ''
    if [ -n "$dry" ]; then
        say 'skipped (no GPU: TensorFlow rewrites fp16 graphs only on a GPU)' ''
        return
    fi
    say "TF's auto_mixed_precision pass, from each fp16 run's log (TF_CPP_MIN_LOG_LEVEL=0):" \
        "the training graph's line, and the passes logged." ''
    for log in "$OUT"/runs/start_*.log "$OUT"/runs/*fp16*.log "$OUT"/runs/processes.log \
            "$OUT"/runs/mirrored.log; do
        [ -f "$log" ] || continue
        found=1
        line="$(grep -oE "$converted cast\\(s\\) to float16" "$log" | sort -t/ -k2 -n | tail -1)"
        [ -n "$line" ] || line="no line; $(grep -m1 'auto_mixed_precision\.cc' "$log" |
                                          sed -E 's/^.*\] //' | cut -c1-160)"
        say "- $(basename "$log" .log): $line ($(grep -cE "$converted" "$log") pass(es))"
    done
    [ "$found" = 1 ] || say '- no fp16 run ran'
    say ''
}

environment
# Every run: TF's own log lines (the AMP count, its GPU warnings) and a compile cache of
# its own.
export TF_CPP_MIN_LOG_LEVEL=0 CUDA_CACHE_PATH="$OUT/cuda_cache" CUDA_CACHE_MAXSIZE=4294967296 \
    CUDA_CACHE_DISABLE=0
start_section
memory_section
nccl_section
speed_section
amp_section
say "Took $((SECONDS - began)) s; every run's whole log is in $OUT/runs." ''
echo "gpu_smoke.sh: the report: $REPORT"
exit "$status"
