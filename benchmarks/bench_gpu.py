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

Three more measurements, each its own flag (``--only`` runs them without the main table):

* ``--masked-rows``: what each SDPA backend returns for a query row whose keys are all hidden
  by a boolean ``attn_mask``, in float32, float16 and bfloat16 (``masked_rows.csv``: the
  largest ``|o|`` on that row, and the largest difference from ``sdpa_math`` elsewhere).
* ``--decode``: one decoded token (one query per head) against a KV cache of 1k to 128k
  positions, 32 query heads of d 128 in float16 sharing 32, 8 or 1 key/value heads
  (multi-head, grouped-query, multi-query attention), by ``F.scaled_dot_product_attention``
  with ``enable_gqa=True`` and by repeating the key/value heads first (``decode.csv``: the
  time, and the bytes of ``attention_src.io_model.decode_step_cost`` over it, in GB/s).
* ``--autotune``: the Triton kernels' launch settings (``block_m``, ``block_n``, warps,
  stages) timed forward and forward+backward at L 8192 in float16 for d 64 and 128, causal and
  not (``autotune.csv``); it prints the fastest per head dimension as ``GPU_CONFIGS``
  entries for ``attention_src/flash_triton.py``.
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


MASK_BACKENDS = ["sdpa_math", "sdpa_efficient", "sdpa_cudnn", "sdpa_flash"]
MASKED_FIELDS = ["backend", "dtype", "status", "masked_row_max_abs", "other_rows_max_diff"]


def masked_rows(device: str = "cuda") -> list[dict]:
    """Each backend on ``(1, 2, 8, 64)`` inputs whose boolean mask hides every key from query
    row 3: the largest ``|o|`` on that row, and the largest difference from ``sdpa_math`` on
    the other rows (float32 reference)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"sdpa_math": SDPBackend.MATH, "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
                "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION,
                "sdpa_flash": SDPBackend.FLASH_ATTENTION}
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v = (torch.randn(1, 2, 8, 64, device=device, generator=g) for _ in range(3))
    mask = torch.ones(8, 8, dtype=torch.bool, device=device)  # (L_q, L_k), True = visible
    mask[3] = False  # row 3 sees no key
    with sdpa_kernel(SDPBackend.MATH):
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (1, 2, 8, 64)
    others = torch.arange(8, device=device) != 3
    rows = []
    for name, backend in backends.items():
        for dtype_name, dtype in (("float32", torch.float32), *DTYPES.items()):
            row = {"backend": name, "dtype": dtype_name}
            try:
                with sdpa_kernel(backend):
                    out = F.scaled_dot_product_attention(q.to(dtype), k.to(dtype), v.to(dtype),
                                                         attn_mask=mask).float()
                row.update(status="ok", masked_row_max_abs=out[..., 3, :].abs().max().item(),
                           other_rows_max_diff=(out - ref)[..., others, :].abs().max().item())
            except RuntimeError as err:
                row["status"] = "unsupported: " + str(err).splitlines()[0][:200]
            rows.append(row)
    return rows


DECODE_LENGTHS = [1024, 4096, 16384, 65536, 131072]
DECODE_KV_HEADS = [32, 8, 1]
DECODE_FIELDS = ["method", "kv_heads", "cache_length", "status", "ms", "gb_per_s", "B", "h",
                 "d"]


def decode_step(method: str):
    """``(q (B, h, 1, d), k, v (B, h_kv, L, d)) -> (B, h, 1, d)``: ``sdpa_gqa`` lets
    ``F.scaled_dot_product_attention`` share the key/value heads (``enable_gqa=True``);
    ``sdpa_repeat`` copies each key/value head ``h // h_kv`` times first."""
    if method == "sdpa_gqa":
        return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    if method == "sdpa_repeat":
        def repeat(q, k, v):
            group = q.shape[1] // k.shape[1]
            k = k.repeat_interleave(group, dim=1)  # (B, h_kv, L, d) -> (B, h, L, d)
            v = v.repeat_interleave(group, dim=1)
            return F.scaled_dot_product_attention(q, k, v)
        return repeat
    raise ValueError(f"unknown decode method {method!r}; choose sdpa_gqa or sdpa_repeat")


def measure_decode(args) -> list[dict]:
    """Time one decoded token against each cache length and number of key/value heads."""
    from attention_src.io_model import decode_step_cost

    B, h, d = 1, 32, 128
    rows = []
    for kv_heads in DECODE_KV_HEADS:
        for L in DECODE_LENGTHS:
            g = torch.Generator(device="cuda").manual_seed(L)
            q = torch.randn(B, h, 1, d, device="cuda", dtype=torch.float16, generator=g)
            k, v = (torch.randn(B, kv_heads, L, d, device="cuda", dtype=torch.float16,
                                generator=g) for _ in range(2))
            nbytes = B * decode_step_cost(L, h, kv_heads, d)["bytes"]
            for method in ("sdpa_gqa", "sdpa_repeat"):
                row = {"method": method, "kv_heads": kv_heads, "cache_length": L, "B": B,
                       "h": h, "d": d}
                fn = decode_step(method)
                try:
                    ms = time_call(make_call(fn, q, k, v, None, "forward"), args.warmup,
                                   args.repeats * 5)
                    row.update(status="ok", ms=ms, gb_per_s=nbytes / (ms * 1e-3) / 1e9)
                except (RuntimeError, torch.cuda.OutOfMemoryError) as err:
                    row["status"] = "failed: " + str(err).splitlines()[0][:200]
                torch.cuda.empty_cache()
                rows.append(row)
                print(f"decode {method} h_kv={kv_heads} L={L}: {row['status']} "
                      f"{row.get('ms', 0):.4f} ms", flush=True)
    return rows


AUTOTUNE_FIELDS = ["d", "causal", "L", "block_m", "block_n", "num_warps", "num_stages",
                   "status", "forward_ms", "forward_backward_ms"]


def autotune_configs():
    """The launch settings tried: tiles of 64 or 128 queries by 32, 64 or 128 keys, 4 or 8
    warps, 2 or 3 stages."""
    from attention_src.flash_triton import FlashConfig

    return [FlashConfig(bm, bn, w, st) for bm in (64, 128) for bn in (32, 64, 128)
            for w in (4, 8) for st in (2, 3)]


def autotune(args, L: int = 8192, path: Path | None = None) -> list[dict]:
    """Time every :func:`autotune_configs` entry for d 64 and 128, causal and not; the rows
    so far are rewritten to ``path`` after each one (a run cut short keeps them)."""
    from attention_src import flash_triton

    B, h = 4, 16
    rows = []
    for d in (64, 128):
        original = flash_triton.GPU_CONFIGS[d]
        g = torch.Generator(device="cuda").manual_seed(d)
        q, k, v, grad = (torch.randn(B, h, L, d, device="cuda", dtype=torch.float16,
                                     generator=g) for _ in range(4))
        try:
            for causal in (False, True):
                fn = make_method("triton", causal, 1 / math.sqrt(d))
                for config in autotune_configs():
                    flash_triton.GPU_CONFIGS[d] = config
                    row = {"d": d, "causal": causal, "L": L, **config._asdict()}
                    try:
                        row["forward_ms"] = time_call(make_call(fn, q, k, v, grad, "forward"),
                                                      args.warmup, args.repeats)
                        row["forward_backward_ms"] = time_call(
                            make_call(fn, q, k, v, grad, "forward_backward"), args.warmup,
                            args.repeats)
                        row["status"] = "ok"
                    except Exception as err:  # noqa: BLE001 - e.g. out of shared memory
                        row["status"] = "failed: " + str(err).splitlines()[0][:200]
                    rows.append(row)
                    if path is not None:
                        write_csv(rows, path, AUTOTUNE_FIELDS)
        finally:
            flash_triton.GPU_CONFIGS[d] = original
    return rows


def best_configs(rows: list[dict]) -> dict[int, dict]:
    """Per head dimension, the setting with the least forward+backward time summed over
    causal and not (only settings that ran in both)."""
    best = {}
    for d in sorted({r["d"] for r in rows}):
        totals: dict[tuple, float] = {}
        counts: dict[tuple, int] = {}
        for r in rows:
            if r["d"] != d or r["status"] != "ok":
                continue
            key = (r["block_m"], r["block_n"], r["num_warps"], r["num_stages"])
            totals[key] = totals.get(key, 0.0) + r["forward_backward_ms"]
            counts[key] = counts.get(key, 0) + 1
        complete = [key for key, n in counts.items() if n == 2]
        if complete:
            key = min(complete, key=totals.__getitem__)
            best[d] = dict(zip(("block_m", "block_n", "num_warps", "num_stages"), key,
                               strict=True), forward_backward_ms=totals[key])
    return best


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


def write_csv(rows: list[dict], path: Path, fields: list[str] = FIELDS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
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
    p.add_argument("--masked-rows", action="store_true", help="fully masked rows per backend")
    p.add_argument("--decode", action="store_true", help="one decoded token against the cache")
    p.add_argument("--autotune", action="store_true", help="time the kernels' launch settings")
    p.add_argument("--only", action="store_true",
                   help="run only the flagged extra measurements, not the main table")
    args = p.parse_args(argv)
    if args.quick:
        args.lengths, args.dtypes = [512, 2048], ["float16"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not torch.cuda.is_available():
        print(NO_CUDA)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_meta.json").write_text(json.dumps(machine(args), indent=1) + "\n")
    if args.masked_rows:
        write_csv(masked_rows(), args.out / "masked_rows.csv", MASKED_FIELDS)
        print(f"wrote {args.out / 'masked_rows.csv'}", flush=True)
    if args.decode:
        write_csv(measure_decode(args), args.out / "decode.csv", DECODE_FIELDS)
        print(f"wrote {args.out / 'decode.csv'}", flush=True)
    if args.autotune:
        tuned = autotune(args, path=args.out / "autotune.csv")
        for d, best in best_configs(tuned).items():
            print(f"    {d}: FlashConfig(block_m={best['block_m']}, block_n={best['block_n']}, "
                  f"num_warps={best['num_warps']}, num_stages={best['num_stages']}),  "
                  f"# {best['forward_backward_ms']:.3f} ms", flush=True)
    if args.only:
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
                    write_csv(rows, args.out / "gpu.csv")  # a run cut short keeps its rows
                    last = rows[-2:]
                    print(" ".join(f"{r['method']} {r['dtype']} causal={r['causal']} L={L} "
                                   f"{r['mode']}: {r['status']} {r.get('tflops', 0):.1f} "
                                   "TFLOP/s;" for r in last), flush=True)
    print(f"wrote {args.out / 'gpu.csv'} ({len(rows)} rows) and gpu_meta.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
