#!/usr/bin/env bash
# Issue 25's checks on a lent GPU machine, as one prepared command (its image has Python 3.12,
# PyTorch, Triton, pytest and hypothesis; nothing is installed). From the repository root:
#
#   bash benchmarks/gpu_session.sh "$OUT"      # about 9 minutes on an H100 or H200
#
# 1. the Triton kernels' tests, compiled and run natively on the GPU (TRITON_INTERPRET unset);
# 2. bench_gpu.py --quick, a smoke test of every method;
# 3. fully masked rows per backend, decoding against the KV cache, and the kernels' autotune
#    (at most AUTOTUNE_SECONDS, default 200);
# 4. the full benchmark (L 512 to 32768, float16 and bfloat16, causal and not), stopped after
#    BENCH_SECONDS (default 240); gpu.csv, masked_rows.csv, decode.csv, autotune.csv and
#    gpu_meta.json land in the folder given (default benchmarks/results), with each step's
#    log beside them.
set -uo pipefail
out=${1:-benchmarks/results}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'" || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/device.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_flash_triton.py 2>&1 | tee "$out/tests.log"
python3 benchmarks/bench_gpu.py --quick --out "$out/quick" 2>&1 | tee "$out/quick.log"
python3 benchmarks/bench_gpu.py --masked-rows --decode --only --out "$out/extra" 2>&1 \
    | tee "$out/extra.log"
timeout "${AUTOTUNE_SECONDS:-200}" python3 benchmarks/bench_gpu.py --autotune --only \
    --out "$out/autotune" 2>&1 | tee "$out/autotune.log"
timeout "${BENCH_SECONDS:-240}" python3 benchmarks/bench_gpu.py --out "$out" 2>&1 \
    | tee "$out/bench.log"
