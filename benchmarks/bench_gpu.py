"""Attention on a CUDA GPU: the Triton kernels against PyTorch's backends (issue 25).

    python benchmarks/bench_gpu.py            # everything, CSV and meta into benchmarks/results/
    python benchmarks/bench_gpu.py --quick    # L = 512 and 2048, float16 only, a smoke test

Without a CUDA device it prints one line and exits with status 0, measuring nothing.

Methods, on ``(B, h, L, d)`` inputs (default batch 4, 16 heads, d 64) in float16 and bfloat16,
causal and not, L from 512 to 32768:

* ``triton``: ``attention_src.flash_triton.flash_attention`` (its default tiles);
* ``sdpa_default``: ``F.scaled_dot_product_attention`` letting PyTorch pick its backend;
* ``sdpa_flash``, ``sdpa_efficient``, ``sdpa_cudnn``, ``sdpa_math``: the same call restricted
  to one backend with ``torch.nn.attention.sdpa_kernel`` (a backend that refuses the inputs is
  recorded as ``unsupported``, with PyTorch's reason);
* ``plain``: the materialised formula, ``softmax(Q K^T * scale) V`` in three operations (the
  causal mask by ``masked_fill``), up to ``--plain-max`` (L^2 scores per head);
* ``blockwise``: the book's ``attention_src.efficient.blockwise_attention``, a tile loop driven
  from Python, up to ``--blockwise-max``.

For each case, ``forward`` (under ``torch.no_grad``) and ``forward_backward`` (the forward
pass with gradients on, then the backward pass of a fixed upstream gradient): the median
time of ``--repeats`` calls after ``--warmup`` calls, measured with CUDA events; the rate
``TFLOP/s`` from the useful work, ``4 B h L^2 d`` floating-point operations for the forward
pass (two products of ``2 L^2 d`` each per head), halved with the causal mask, and 2.5 times
that for the backward pass (five products instead of two), so 3.5 times for forward and
backward; the peak memory allocated
during one call beyond what was allocated before it (``torch.cuda.max_memory_allocated``);
and the largest difference between the method's output and ``sdpa_math``'s in float32 on
the same inputs (a check that every method computes the same thing). A method that runs out
of memory is recorded as ``oom`` and the next one runs.

Files: ``gpu.csv`` (one row per method, dtype, causal, L and mode) and ``gpu_meta.json``
(date, ``git describe``, the GPU's name, compute capability and memory, the driver's CUDA
version, torch, Triton and cuDNN versions, the settings of the run).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's attention_src, not an installed one

RESULTS = ROOT / "benchmarks" / "results"
LENGTHS = [512, 1024, 2048, 4096, 8192, 16384, 32768]
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
METHODS = ["triton", "sdpa_default", "sdpa_flash", "sdpa_efficient", "sdpa_cudnn", "sdpa_math",
           "plain", "blockwise"]
MODES = ["forward", "forward_backward"]
FIELDS = ["method", "dtype", "causal", "L", "mode", "status", "ms", "tflops", "peak_mib",
          "max_abs_diff", "B", "h", "d"]
NO_CUDA = "bench_gpu: no CUDA device available; nothing measured (run it on a GPU machine)"


def attention_flops(B: int, h: int, L: int, d: int, causal: bool, mode: str) -> float:
    """Useful floating-point operations of one call: ``4 B h L^2 d`` forward (``Q K^T`` and
    ``P V``, ``2 L^2 d`` each per head), halved when causal; the backward pass adds 2.5 times
    the forward's (five products of the same size)."""
    flops = 4.0 * B * h * L * L * d * (0.5 if causal else 1.0)
    return flops * (3.5 if mode == "forward_backward" else 1.0)


def make_method(name: str, causal: bool, scale: float):
    """A function ``(q, k, v) -> output`` computing ``name`` (see the module docstring)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"sdpa_flash": SDPBackend.FLASH_ATTENTION,
                "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
                "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa_math": SDPBackend.MATH}
    if name == "triton":
        from attention_src.flash_triton import flash_attention

        return lambda q, k, v: flash_attention(q, k, v, causal=causal, scale=scale)
    if name == "sdpa_default":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                              scale=scale)
    if name in backends:
        def one_backend(q, k, v):
            with sdpa_kernel(backends[name]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        return one_backend
    if name == "plain":
        def plain(q, k, v):
            scores = (q * scale) @ k.transpose(-2, -1)  # (B, h, L, L)
            if causal:
                L = q.shape[-2]
                hidden = torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1)
                scores = scores.masked_fill(hidden, -math.inf)
            return torch.softmax(scores, dim=-1) @ v  # (B, h, L, d)
        return plain
    if name == "blockwise":
        from attention_src.efficient import blockwise_attention

        return lambda q, k, v: blockwise_attention(q, k, v, causal=causal, scale=scale)
    raise ValueError(f"unknown method {name!r}; choose from {METHODS}")


def time_call(fn, warmup: int, repeats: int) -> float:
    """Median milliseconds of ``fn()`` over ``repeats`` calls after ``warmup``, by CUDA
    events around each call."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def peak_mib(fn) -> float:
    """MiB allocated at the peak of one call of ``fn`` beyond what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def make_call(fn, q, k, v, grad, mode: str):
    """A function of no argument running ``fn`` once in ``mode``: ``forward`` without
    autograd, or ``forward_backward`` (gradients of fresh leaves, upstream gradient
    ``grad``)."""
    if mode == "forward":
        def forward():
            with torch.no_grad():
                return fn(q, k, v)
        return forward
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))

    def forward_backward():
        fn(q, k, v).backward(grad)
    return forward_backward


def measure_case(method, dtype, causal, L, args, reference) -> list[dict]:
    """The rows of one (method, dtype, causal, L): forward and forward_backward."""
    B, h, d = args.batch, args.heads, args.head_dim
    g = torch.Generator(device="cuda").manual_seed(L)
    q, k, v, grad = (torch.randn(B, h, L, d, device="cuda", dtype=dtype, generator=g)
                     for _ in range(4))
    fn = make_method(method, causal, 1 / math.sqrt(d))
    rows = []
    for mode in MODES:
        row = {"method": method, "dtype": str(dtype).removeprefix("torch."), "causal": causal,
               "L": L, "mode": mode, "B": B, "h": h, "d": d}
        call = make_call(fn, q, k, v, grad, mode)
        try:
            if mode == "forward" and reference is not None:
                with torch.no_grad():
                    ref = reference(q.float(), k.float(), v.float())
                    row["max_abs_diff"] = (fn(q, k, v).float() - ref).abs().max().item()
            ms = time_call(call, args.warmup, args.repeats)
            row.update(status="ok", ms=ms, peak_mib=peak_mib(call),
                       tflops=attention_flops(B, h, L, d, causal, mode) / (ms * 1e-3) / 1e12)
        except torch.cuda.OutOfMemoryError:
            row["status"] = "oom"
        except RuntimeError as err:  # a backend that refuses these inputs
            row["status"] = "unsupported: " + str(err).splitlines()[0][:200]
        torch.cuda.empty_cache()
        rows.append(row)
    return rows


def machine(args) -> dict:
    """The device, the versions and the settings of the run."""
    props = torch.cuda.get_device_properties(0)
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    try:
        describe = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                                  capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        describe = None
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git": describe,
        "gpu": props.name,
        "capability": f"{props.major}.{props.minor}",
        "gpu_memory_gib": round(props.total_memory / 2**30, 1),
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": triton_version,
        "cudnn": torch.backends.cudnn.version(),
        "python": platform.python_version(),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
    }


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="L 512 and 2048, float16 only")
    p.add_argument("--lengths", type=int, nargs="+", default=LENGTHS)
    p.add_argument("--dtypes", nargs="+", choices=list(DTYPES), default=list(DTYPES))
    p.add_argument("--methods", nargs="+", choices=METHODS, default=METHODS)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--plain-max", type=int, default=8192, help="largest L for plain")
    p.add_argument("--blockwise-max", type=int, default=4096, help="largest L for blockwise")
    p.add_argument("--out", type=Path, default=RESULTS, help="folder of gpu.csv, gpu_meta.json")
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.dtypes = [512, 2048], ["float16"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    rows = []
    for dtype_name in args.dtypes:
        for causal in (False, True):
            ref = make_method("sdpa_math", causal, 1 / math.sqrt(args.head_dim))
            for L in args.lengths:
                for method in args.methods:
                    if (method == "plain" and L > args.plain_max) or (
                            method == "blockwise" and L > args.blockwise_max):
                        continue
                    check = ref if L <= 4096 else None  # the float32 math reference is L^2
                    rows += measure_case(method, DTYPES[dtype_name], causal, L, args, check)
                    last = rows[-2:]
                    print(" ".join(f"{r['method']} {r['dtype']} causal={r['causal']} L={L} "
                                   f"{r['mode']}: {r['status']} {r.get('tflops', 0):.1f} "
                                   "TFLOP/s;" for r in last), flush=True)
    write_csv(rows, args.out / "gpu.csv")
    (args.out / "gpu_meta.json").write_text(json.dumps(machine(args), indent=1) + "\n")
    print(f"wrote {args.out / 'gpu.csv'} ({len(rows)} rows) and gpu_meta.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
