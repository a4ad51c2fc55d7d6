#!/usr/bin/env bash
# Issue 25's checks on a lent GPU machine, as one prepared command (its image has Python 3.12,
# PyTorch, Triton, pytest, pytest-xdist and hypothesis; nothing is installed). From the
# repository root:
#
#   bash benchmarks/gpu_session.sh "$OUT"      # stops by itself after SESSION_SECONDS (560)
#
# The native tests alone (about 2 minutes with the machine's start):
#
#   AUTOTUNE_SECONDS=0 TARGETS_SECONDS=0 EXTRA_SECONDS=0 BENCH_SECONDS=0 \
#       bash benchmarks/gpu_session.sh "$OUT"
#
# In order of what matters most, each step with a time limit, cut short where the session's
# time is running out:
# 1. the Triton kernels' tests, compiled and run natively on the GPU (TRITON_INTERPRET unset),
#    8 processes at once (compiling is most of their time);
# 2. the autotune of the forward and backward kernels' launch settings, d 64 then d 128,
#    each setting checked against SDPA (autotune.csv);
# 3. the targets at L 16384 in float16 with the autotune's settings (targets.csv,
#    targets.json, printed as PASS/FAIL lines);
# 4. fully masked rows per backend and decoding against the KV cache (masked_rows.csv,
#    decode.csv);
# 5. the full table (L 512 to 32768, float16 then bfloat16, causal and not) with the
#    autotune's settings, for whatever time is left (gpu.csv, gpu_meta.json).
# A step's limit comes from its variable (TESTS_SECONDS ...); 0 skips the step.
# Everything, logs included, is packed after each step into OUT/session.tar.gz (the device
# tool brings back at most 8 files), and a summary is printed last and kept as
# OUT/summary.txt.
set -uo pipefail
out=${1:-benchmarks/results}
mkdir -p "$out"
out=$(cd "$out" && pwd)
base=$(mktemp -d)
work="$base/gpu_session"
mkdir -p "$work"
total=${SESSION_SECONDS:-560}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:$PWD/benchmarks${PYTHONPATH:+:$PYTHONPATH}"
# caches in the temporary folder, whatever the home folder allows; the autotune's compiling
# processes hand their kernels to the timing process through Triton's cache
export TRITON_CACHE_DIR="$base/triton" MPLCONFIGDIR="$base/matplotlib"
unset TRITON_INTERPRET

pack() { tar -czf "$out/session.tar.gz" -C "$base" gpu_session; }

# step NAME LIMIT COMMAND...: run COMMAND for at most LIMIT seconds and what the session has
# left (keeping 20 s to pack and summarise), its output in NAME.log
step() {
    local name=$1 limit=$2 left
    shift 2
    left=$(( total - SECONDS - 20 ))
    (( limit > left )) && limit=$left
    if (( limit < 15 )); then
        echo "== $name: skipped, $left s left" | tee "$work/$name.log"
        return
    fi
    echo "== $name (at most $limit s, at $SECONDS s)"
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$work/$name.log"
    echo "== $name: exit ${PIPESTATUS[0]} at $SECONDS s" | tee -a "$work/$name.log"
    pack
}

python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || exit 1
{ nvidia-smi --query-gpu=name,memory.total,driver_version,compute_mode --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} 2>&1 | tee "$work/device.txt"
# what was measured, by content (the machine's copy of the tree may have no git history)
sha256sum attention_src/*.py benchmarks/bench_gpu.py benchmarks/gpu_session.sh \
    > "$work/sources.sha256"

# -v: each test's verdict is printed as it ends, so a run cut short still names a failure
step tests "${TESTS_SECONDS:-180}" python3 -m pytest -v -p no:cacheprovider -n 8 \
    tests/test_flash_triton.py tests/test_bench_gpu.py
# AUTOTUNE_ARGS="--directions backward": tune one direction only, the other keeping the
# table's settings in attention_src/flash_triton.py
step autotune "${AUTOTUNE_SECONDS:-200}" python3 benchmarks/bench_gpu.py --autotune --only \
    --warmup 1 --repeats 5 ${AUTOTUNE_ARGS:-} --out "$work/autotune"
configs=()
[[ -s "$work/autotune/autotune.csv" ]] && configs=(--configs "$work/autotune/autotune.csv")
step targets "${TARGETS_SECONDS:-70}" python3 benchmarks/bench_gpu.py --targets --only \
    "${configs[@]}" --out "$work/targets"
step extra "${EXTRA_SECONDS:-40}" python3 benchmarks/bench_gpu.py --masked-rows --decode \
    --only --out "$work/extra"
step bench "${BENCH_SECONDS:-$total}" python3 benchmarks/bench_gpu.py "${configs[@]}" \
    --out "$work/table"

{
    echo "== summary"
    cat "$work/device.txt"
    echo "tests: $(grep -E 'passed|failed|error' "$work/tests.log" | tail -1)"
    [[ -s "$work/autotune/autotune.csv" ]] && python3 -c "import bench_gpu as b
print('\n'.join(b.config_lines(b.best_configs(b.read_csv('$work/autotune/autotune.csv')))))" \
        2>&1 | sed 's/^/    /' 
    grep -E '^(PASS|FAIL) ' "$work/targets.log" 2>/dev/null
    for f in autotune/autotune.csv targets/targets.csv extra/masked_rows.csv extra/decode.csv \
             table/gpu.csv; do
        [[ -f "$work/$f" ]] && echo "$f: $(( $(wc -l < "$work/$f") - 1 )) rows"
    done
    echo "packed in $out/session.tar.gz at $SECONDS s"
} 2>&1 | tee "$work/summary.txt"
pack
cp "$work/summary.txt" "$out/summary.txt"
