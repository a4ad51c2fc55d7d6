"""Attention on a CUDA GPU: the Triton kernels against PyTorch's backends (issue 25).

    python benchmarks/bench_gpu.py            # everything, CSV and meta into benchmarks/results/
    python benchmarks/bench_gpu.py --quick    # L = 512 and 2048, float16 only, a smoke test

Without a CUDA device it prints one line and exits with status 0, measuring nothing.

Methods, on ``(B, h, L, d)`` inputs (default batch 4, 16 heads, d 64) in float16 and bfloat16,
causal and not, L from 512 to 32768:

* ``triton``: ``attention_src.flash_triton.flash_attention`` (the settings of its tables
  ``GPU_CONFIGS`` and ``GPU_BACKWARD_CONFIGS``: the defaults, or an autotune's with
  ``--configs autotune.csv``);
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

More measurements, each its own flag (``--only`` runs them without the main table):

* ``--targets``: issue 25's targets, apart from the main table so that they come first: at
  L 16384 in float16 (batch 4, 16 heads, d 64), the forward pass alone and the backward pass
  alone (of one kept forward pass) of the Triton kernel and of each SDPA backend, causal and
  not, and the Triton kernel's peak memory for forward and backward at L 4096 to 32768
  (``targets.csv``); then the verdicts (``targets.json``, printed): the fastest SDPA
  backend's time over the Triton kernel's, at least 0.8 forward and 0.6 backward, and the
  peak memory over L within 10 % of its value at the smallest L (linear in L).

* ``--masked-rows``: what each SDPA backend returns for a query row whose keys are all hidden
  by a boolean ``attn_mask``, in float32, float16 and bfloat16 (``masked_rows.csv``: the
  largest ``|o|`` on that row, and the largest difference from ``sdpa_math`` elsewhere).
* ``--decode``: one decoded token (one query per head) against a KV cache of 1k to 128k
  positions, 32 query heads of d 128 in float16 sharing 32, 8 or 1 key/value heads
  (multi-head, grouped-query, multi-query attention), by ``F.scaled_dot_product_attention``
  with ``enable_gqa=True`` and by repeating the key/value heads first (``decode.csv``: the
  time, and the bytes of ``attention_src.io_model.decode_step_cost`` over it, in GB/s).
* ``--autotune``: the Triton kernels' launch settings (``block_m``, ``block_n``, warps,
  stages, and which forward kernel: the plain one or the split one) at L 8192 in float16 for
  d 64 and 128, causal and not: 48 settings of the forward kernel timed alone, 32 of the
  backward kernels timed alone (``autotune.csv``). Their
  kernels are compiled first by ``--compile-workers`` processes at once. It prints the
  fastest per head dimension and direction as entries for ``attention_src/flash_triton.py``'s
  ``GPU_CONFIGS`` and ``GPU_BACKWARD_CONFIGS``, and the rest of the run uses them.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
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

        # fit=False: the setting a row names is the one timed (a launch the GPU refuses
        # fails, instead of running smaller tiles as flash_attention does for a reader)
        return lambda q, k, v: flash_attention(q, k, v, causal=causal, scale=scale,
                                               fit=False)
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
    autograd, ``forward_backward`` (gradients of fresh leaves, upstream gradient ``grad``),
    or ``backward``: the backward pass alone, of one forward pass run here once and kept
    (``retain_graph``); each call returns the gradients ``(dq, dk, dv)``."""
    if mode == "forward":
        def forward():
            with torch.no_grad():
                return fn(q, k, v)
        return forward
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    if mode == "backward":
        out = fn(q, k, v)

        def backward():
            q.grad = k.grad = v.grad = None  # fresh gradients, not a sum over calls
            out.backward(grad, retain_graph=True)
            return q.grad, k.grad, v.grad
        return backward
    if mode != "forward_backward":
        raise ValueError(f"unknown mode {mode!r}; choose from forward, forward_backward, "
                         "backward")

    def forward_backward():
        fn(q, k, v).backward(grad)
    return forward_backward


def attempt(row: dict, measure) -> dict:
    """``row`` updated with ``status="ok"`` and the dict ``measure()`` returns, or with the
    status of its failure: ``oom``; ``unsupported: ...`` (a ``RuntimeError``, as a backend
    refusing the inputs raises); ``failed: ...`` (anything else, e.g. Triton's compile and
    resource errors, which are not ``RuntimeError``s). Frees the allocator's cache after."""
    try:
        row.update(status="ok", **measure())
    except torch.cuda.OutOfMemoryError:
        row["status"] = "oom"
    except RuntimeError as err:
        row["status"] = "unsupported: " + _first_line(err)
    except Exception as err:  # noqa: BLE001 - the run goes on to the next case
        row["status"] = "failed: " + _first_line(err)
    torch.cuda.empty_cache()
    return row


def _first_line(err: BaseException) -> str:
    return (str(err).splitlines() or [type(err).__name__])[0][:200]


def relative_error(got, want) -> float:
    """``max |got - want| / max |want|`` in float32, the largest over tensors (or over
    equal-length sequences of them, such as three gradients); NaN when any is NaN. A check
    for gross errors between two half-precision computations (a setting that computes
    something else), not a fine one: the kernels' tests are that."""
    if isinstance(got, torch.Tensor):
        got, want = [got], [want]
    errors = [float((g.float() - w.float()).abs().max()) / max(float(w.float().abs().max()),
                                                               1e-30)
              for g, w in zip(got, want, strict=True)]
    return math.nan if any(math.isnan(e) for e in errors) else max(errors)


#: above this relative error (see :func:`relative_error`) a setting computes something else:
#: float16 results of two correct kernels differ by a few 1e-3 of the largest entry
WRONG = 2e-2


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

        def measure(mode=mode, call=call):
            out = {}
            if mode == "forward" and reference is not None:
                with torch.no_grad():
                    ref = reference(q.float(), k.float(), v.float())
                    out["max_abs_diff"] = (fn(q, k, v).float() - ref).abs().max().item()
            ms = time_call(call, args.warmup, args.repeats)
            return dict(out, ms=ms, peak_mib=peak_mib(call),
                        tflops=attention_flops(B, h, L, d, causal, mode) / (ms * 1e-3) / 1e12)
        rows.append(attempt(row, measure))
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


AUTOTUNE_FIELDS = ["direction", "d", "causal", "L", "block_m", "block_n", "num_warps",
                   "num_stages", "forward", "backward", "status", "ms", "error"]
AUTOTUNE_HEAD_DIMS = (64, 128)
#: what the autotune checks each setting's results against
AUTOTUNE_REFERENCE = "sdpa_flash"
DIRECTIONS = ("forward", "backward")


def autotune_configs(direction: str = "forward"):
    """The launch settings tried. Forward: tiles of 64 or 128 queries by 32, 64 or 128 keys,
    4 or 8 warps, 2 or 3 stages, the plain or the split kernel (48). Backward, whose kernels
    hold more tiles at once (Q, K, V, dO and two float32 accumulators): tiles of 32 to 128
    queries by 32 to 128 keys without the largest (128 by 128), 4 or 8 warps, 1 or 2 stages,
    the plain or the split kernels (64)."""
    from attention_src.flash_triton import FlashConfig

    if direction == "forward":
        return [FlashConfig(bm, bn, w, st, kernel) for bm in (64, 128) for bn in (32, 64, 128)
                for w in (4, 8) for st in (2, 3) for kernel in ("plain", "split")]
    if direction == "backward":
        tiles = [(bm, bn) for bm in (32, 64, 128) for bn in (32, 64, 128) if bm * bn < 128 * 128]
        return [FlashConfig(bm, bn, w, st, backward=kernel) for bm, bn in tiles
                for w in (4, 8) for st in (1, 2) for kernel in ("plain", "split")]
    raise ValueError(f"unknown direction {direction!r}; choose from {DIRECTIONS}")


def autotune_jobs(head_dims=AUTOTUNE_HEAD_DIMS, directions=DIRECTIONS) -> list[tuple]:
    """Every ``(direction, d, causal, config)`` the autotune times, in its order: per head
    dimension, the forward settings (causal and not), then the backward ones (of
    ``directions``, both by default)."""
    for direction in directions:
        if direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {direction!r}; choose from {DIRECTIONS}")
    return [(direction, d, causal, config) for d in head_dims for direction in DIRECTIONS
            if direction in directions
            for causal in (False, True) for config in autotune_configs(direction)]


def _compile_job(job) -> tuple:
    """In a worker process: run ``job``'s kernels once on small inputs (L 256, which Triton
    specialises as it does L 8192: both are multiples of 16), so that their compiled code
    lands in Triton's on-disk cache, shared with the process that times them. Returns
    ``(job, status)``."""
    direction, d, causal, config = job
    try:
        from attention_src import flash_triton

        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(1, 256, d, device="cuda", dtype=torch.float16, generator=g)
                       for _ in range(4))
        # the backward settings are timed after a forward pass with the forward table's
        forward = config if direction == "forward" else flash_triton.GPU_CONFIGS[d]
        o, lse = flash_triton._forward(q, k, v, causal, 1 / math.sqrt(d), forward)
        if direction == "backward":
            flash_triton._backward(do, q, k, v, o, lse, causal, 1 / math.sqrt(d), config)
        torch.cuda.synchronize()
        return job, "ok"
    except Exception as err:  # noqa: BLE001 - sorted below
        # Triton's own errors (out of shared memory, a failed compile) rule the setting
        # out; anything else (a CUDA context this worker could not make...) does not say
        # the setting is bad: the timing process tries it itself
        triton_error = any(c.__module__.startswith("triton") for c in type(err).__mro__)
        return job, ("failed: " if triton_error else "retry: ") + _first_line(err)


def precompile(jobs, workers: int) -> dict:
    """Compile ``jobs``' kernels in ``workers`` processes at once (compiling, not running,
    is most of an autotune's time, and it needs only the CPU). Returns ``{job: status}``;
    an empty dict when the pool itself fails (the timing loop then compiles as it goes)."""
    import concurrent.futures
    import multiprocessing

    try:
        with concurrent.futures.ProcessPoolExecutor(
                workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            return dict(pool.map(_compile_job, jobs, chunksize=4))
    except Exception as err:  # noqa: BLE001 - a pool that cannot start is not fatal
        print(f"precompile: the pool failed ({err!r}); compiling while timing", flush=True)
        return {}


def autotune(args, L: int = 8192, path: Path | None = None, head_dims=AUTOTUNE_HEAD_DIMS,
             device: str = "cuda") -> list[dict]:
    """Time every :func:`autotune_jobs` entry at L 8192, float16, ``--batch`` and ``--heads``
    (4 and 16) on ``device``, one head dimension after the other (d 64 first): its kernels
    compiled first by ``--compile-workers`` processes at once (0: none), then the forward
    kernel timed alone for each forward setting, and the backward pass alone (three kernels,
    :func:`make_call`'s ``backward``, after a forward pass with the forward table's setting)
    for each backward setting. Each setting's output (forward) or gradients (backward) are
    compared with SDPA's flash backend on the same inputs: a relative error above
    :data:`WRONG` makes its status ``wrong`` (never chosen). The rows so far are rewritten to
    ``path`` after each one, and the best settings are printed after each head dimension
    (a run cut short keeps them)."""
    from attention_src import flash_triton

    B, h = args.batch, args.heads
    rows = []
    for d in head_dims:
        jobs = autotune_jobs((d,), getattr(args, "directions", DIRECTIONS))
        compiled = {}
        if args.compile_workers > 0:
            started = time.perf_counter()
            compiled = precompile(jobs, args.compile_workers)
            counts = {}
            for status in compiled.values():
                kind = status.split(":")[0]
                counts[kind] = counts.get(kind, 0) + 1
            print(f"d {d}: {len(jobs)} settings compiled in {time.perf_counter() - started:.0f}"
                  f" s: {counts or 'the pool failed, compiling while timing'}", flush=True)
        g = torch.Generator(device=device).manual_seed(d)
        q, k, v, grad = (torch.randn(B, h, L, d, device=device, dtype=torch.float16,
                                     generator=g) for _ in range(4))
        references = {}  # (direction, causal) -> SDPA's output or gradients, or None
        for direction, _, causal, config in jobs:
            if (direction, causal) not in references:
                references[direction, causal] = reference_result(q, k, v, grad, causal,
                                                                 direction)
            table = (flash_triton.GPU_CONFIGS if direction == "forward"
                     else flash_triton.GPU_BACKWARD_CONFIGS)
            original = table[d]
            row = {"direction": direction, "d": d, "causal": causal, "L": L,
                   **config._asdict()}
            status = compiled.get((direction, d, causal, config), "ok")

            def measure(direction=direction, causal=causal, status=status,
                        want=references[direction, causal], d=d, tensors=(q, k, v, grad)):
                if status.startswith("failed: "):  # Triton ruled it out when compiling
                    raise ValueError(status.removeprefix("failed: "))
                fn = make_method("triton", causal, 1 / math.sqrt(d))
                call = make_call(fn, *tensors, direction)
                error = None if want is None else relative_error(call(), want)
                ms = time_call(call, args.warmup, args.repeats)
                if error is not None and not error <= WRONG:  # NaN too
                    raise ArithmeticError(f"wrong: relative error {error:.3g}")
                return {"ms": ms, "error": "unchecked" if error is None else error}
            table[d] = config
            try:
                attempt(row, measure)
            finally:
                table[d] = original
            if row["status"].startswith("failed: wrong: "):
                row["status"] = row["status"].removeprefix("failed: ")
            rows.append(row)
            if path is not None:
                write_csv(rows, path, AUTOTUNE_FIELDS)
        del q, k, v, grad, references
        torch.cuda.empty_cache()
        print("\n".join(config_lines(best_configs(rows))), flush=True)
    return rows


def reference_result(q, k, v, grad, causal: bool, direction: str):
    """SDPA's output (``direction`` forward) or gradients (backward) for the autotune's
    check: its flash backend, else its math backend; ``None`` when neither runs (the
    settings are then timed unchecked)."""
    for name in (AUTOTUNE_REFERENCE, "sdpa_math"):
        try:
            ref = make_method(name, causal, 1 / math.sqrt(q.shape[-1]))
            return make_call(ref, q, k, v, grad, direction)()
        except Exception as err:  # noqa: BLE001 - the next reference, or none
            print(f"reference {name} failed: {_first_line(err)}", flush=True)
            torch.cuda.empty_cache()
    return None


def best_configs(rows: list[dict]) -> dict[tuple[int, str], dict]:
    """Per head dimension and direction, the setting with the least time summed over causal
    and not (only settings that ran in both): ``{(d, direction): {block_m, block_n,
    num_warps, num_stages, ms}}``."""
    best = {}
    keys = sorted({(int(r["d"]), r["direction"]) for r in rows})
    for d, direction in keys:
        totals: dict[tuple, float] = {}
        counts: dict[tuple, int] = {}
        for r in rows:
            if int(r["d"]) != d or r["direction"] != direction or r["status"] != "ok":
                continue
            key = (*(int(r[f]) for f in ("block_m", "block_n", "num_warps", "num_stages")),
                   r.get("forward") or "plain", r.get("backward") or "plain")
            totals[key] = totals.get(key, 0.0) + float(r["ms"])
            counts[key] = counts.get(key, 0) + 1
        complete = [key for key, n in counts.items() if n == 2]
        if complete:
            key = min(complete, key=totals.__getitem__)
            best[d, direction] = dict(zip(("block_m", "block_n", "num_warps", "num_stages",
                                           "forward", "backward"), key, strict=True),
                                      ms=totals[key])
    return best


def read_csv(path: Path) -> list[dict]:
    with Path(path).open(newline="") as f:
        return list(csv.DictReader(f))


def apply_configs(best: dict[tuple[int, str], dict]) -> dict[str, dict[int, list]]:
    """Put ``best`` (from :func:`best_configs`) into ``flash_triton``'s tables, the forward
    settings into ``GPU_CONFIGS`` and the backward ones into ``GPU_BACKWARD_CONFIGS``.
    Returns both tables as they now are, for the run's meta file."""
    from attention_src import flash_triton

    tables = {"forward": flash_triton.GPU_CONFIGS,
              "backward": flash_triton.GPU_BACKWARD_CONFIGS}
    for (d, direction), setting in best.items():
        tables[direction][d] = flash_triton.FlashConfig(
            setting["block_m"], setting["block_n"], setting["num_warps"], setting["num_stages"],
            setting.get("forward", "plain"), setting.get("backward", "plain"))
    return {direction: {d: list(c) for d, c in table.items()}
            for direction, table in tables.items()}


def config_lines(best: dict[tuple[int, str], dict]) -> list[str]:
    """``best`` as lines to paste into ``attention_src/flash_triton.py``'s two tables."""
    lines = []
    for direction, table in (("forward", "GPU_CONFIGS"), ("backward", "GPU_BACKWARD_CONFIGS")):
        lines.append(f"{table}:")
        for (d, which), b in sorted(best.items()):
            if which == direction:
                kernel = "".join(f", {which}={b[which]!r}" for which in DIRECTIONS
                                 if b.get(which, "plain") != "plain")
                lines.append(f"    {d}: FlashConfig(block_m={b['block_m']}, "
                             f"block_n={b['block_n']}, num_warps={b['num_warps']}, "
                             f"num_stages={b['num_stages']}{kernel}),  # {b['ms']:.3f} ms")
    return lines


TARGET_L = 16384
TARGET_METHODS = ["triton", "sdpa_default", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"]
TARGETS = {"forward": 0.8, "backward": 0.6}  # the Triton kernel's speed over the fastest SDPA
MEMORY_LENGTHS = [4096, 8192, 16384, 32768]
TARGET_FIELDS = ["kind", "method", "causal", "L", "mode", "status", "ms", "peak_mib", "error"]


def measure_targets(args, device: str = "cuda", length: int = TARGET_L,
                    memory_lengths=MEMORY_LENGTHS) -> list[dict]:
    """The issue's targets, measured first and apart from the main table: at L ``length``
    (16384), float16, the forward and the backward pass (each alone) of the Triton kernel and
    of every SDPA backend, causal and not (the Triton rows with their relative error against
    the flash backend's output or gradients, :func:`relative_error`); then the Triton
    kernel's peak memory for forward and backward at each of ``memory_lengths`` (4096 to
    32768), the flash backend's beside it."""
    B, h, d = args.batch, args.heads, args.head_dim
    rows = []
    g = torch.Generator(device=device).manual_seed(length)
    q, k, v, grad = (torch.randn(B, h, length, d, device=device, dtype=torch.float16,
                                 generator=g) for _ in range(4))
    for causal in (False, True):
        for method in TARGET_METHODS:
            fn = make_method(method, causal, 1 / math.sqrt(d))
            for mode in ("forward", "backward"):
                row = {"kind": "speed", "method": method, "causal": causal, "L": length,
                       "mode": mode}

                def measure(mode=mode, fn=fn, causal=causal, method=method,
                            tensors=(q, k, v, grad)):
                    call = make_call(fn, *tensors, mode)
                    out = {"ms": time_call(call, args.warmup, args.repeats)}
                    if method == "triton":
                        want = reference_result(*tensors, causal, mode)
                        if want is not None:
                            out["error"] = relative_error(call(), want)
                    return out
                rows.append(attempt(row, measure))
                print(row, flush=True)
    del q, k, v, grad
    for method in ("triton", "sdpa_flash"):
        fn = make_method(method, False, 1 / math.sqrt(d))
        for L in memory_lengths:
            g = torch.Generator(device=device).manual_seed(L)
            q, k, v, grad = (torch.randn(B, h, L, d, device=device, dtype=torch.float16,
                                         generator=g) for _ in range(4))
            row = {"kind": "memory", "method": method, "causal": False, "L": L,
                   "mode": "forward_backward"}
            rows.append(attempt(row, lambda fn=fn, q=q, k=k, v=v, grad=grad: {
                "peak_mib": peak_mib(make_call(fn, q, k, v, grad, "forward_backward"))}))
            del q, k, v, grad
            torch.cuda.empty_cache()
            print(row, flush=True)
    return rows


def target_verdicts(rows: list[dict]) -> list[dict]:
    """The targets from :func:`measure_targets`' rows. Speed, per (causal, mode): the
    fastest SDPA backend's time over the Triton kernel's (1 = as fast; the target is at
    least 0.8 forward, 0.6 backward). Memory: the Triton kernel's peak over L at each L
    against its value at the smallest L (linear in L: every ratio within 10 % of 1; a
    quadratic term would double it at each doubling of L). A speed target fails whatever
    the ratio when the Triton kernel's relative error is above :data:`WRONG`."""
    verdicts = []
    for causal in (False, True):
        for mode, target in TARGETS.items():
            ok = {r["method"]: float(r["ms"]) for r in rows
                  if r["kind"] == "speed" and str(r["causal"]) == str(causal)
                  and r["mode"] == mode and r["status"] == "ok"}
            sdpa = {m: t for m, t in ok.items() if m.startswith("sdpa_")}
            if "triton" not in ok or not sdpa:
                verdicts.append({"target": f"{mode} causal={causal}", "value": None,
                                 "bound": f">= {target}", "passed": False,
                                 "detail": "not measured"})
                continue
            fastest = min(sdpa, key=sdpa.__getitem__)
            ratio = sdpa[fastest] / ok["triton"]
            errors = [float(r["error"]) for r in rows
                      if r["kind"] == "speed" and r["method"] == "triton"
                      and str(r["causal"]) == str(causal) and r["mode"] == mode
                      and r["status"] == "ok" and r.get("error") not in (None, "")]
            right = all(e <= WRONG for e in errors)  # NaN fails
            detail = (f"triton {ok['triton']:.3f} ms, fastest {fastest} {sdpa[fastest]:.3f} ms"
                      + (f", triton's relative error {errors[0]:.2g}" if errors else ""))
            verdicts.append({"target": f"{mode} causal={causal}", "value": ratio,
                             "bound": f">= {target}", "passed": ratio >= target and right,
                             "detail": detail if right else "WRONG RESULT: " + detail})
    memory = sorted((int(r["L"]), float(r["peak_mib"])) for r in rows
                    if r["kind"] == "memory" and r["method"] == "triton" and r["status"] == "ok")
    if len(memory) >= 2 and all(peak > 0 for _, peak in memory):
        per_token = [peak / L for L, peak in memory]
        worst = max(abs(p / per_token[0] - 1) for p in per_token)
        verdicts.append({"target": "memory linear in L", "value": worst, "bound": "<= 0.1",
                         "passed": worst <= 0.1,
                         "detail": ", ".join(f"L {L}: {peak:.0f} MiB" for L, peak in memory)})
    else:
        verdicts.append({"target": "memory linear in L", "value": None, "bound": "<= 0.1",
                         "passed": False, "detail": "not measured"})
    return verdicts


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
        "settings": {k: str(v) if isinstance(v, Path) else v
                     for k, v in vars(args).items() if k != "out"},
        "flash_triton_configs": getattr(args, "applied_configs", None),
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
    p.add_argument("--directions", nargs="+", choices=DIRECTIONS, default=list(DIRECTIONS),
                   help="the autotune's directions (both by default)")
    p.add_argument("--compile-workers", type=int, default=max(1, min(14, (os.cpu_count() or 2)
                                                                       - 2)),
                   help="processes compiling the autotune's kernels at once (0: none)")
    p.add_argument("--configs", type=Path, default=None,
                   help="an autotune.csv: run with its best settings in the kernels' tables")
    p.add_argument("--targets", action="store_true",
                   help="the targets at L 16384 in float16 (targets.csv, targets.json)")
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
    if args.configs is not None:  # the kernels run with a measured autotune's settings
        best = best_configs(read_csv(args.configs))
        args.applied_configs = apply_configs(best)
        print("\n".join(["settings from " + str(args.configs), *config_lines(best)]),
              flush=True)
    (args.out / "gpu_meta.json").write_text(json.dumps(machine(args), indent=1) + "\n")
    if args.autotune:
        best = best_configs(autotune(args, path=args.out / "autotune.csv"))
        args.applied_configs = apply_configs(best)  # what follows in this run uses them
        print("\n".join(config_lines(best)), flush=True)
        (args.out / "gpu_meta.json").write_text(json.dumps(machine(args), indent=1) + "\n")
    if args.targets:
        rows = measure_targets(args)
        write_csv(rows, args.out / "targets.csv", TARGET_FIELDS)
        verdicts = target_verdicts(rows)
        (args.out / "targets.json").write_text(json.dumps(verdicts, indent=1) + "\n")
        for v in verdicts:
            value = "—" if v["value"] is None else f"{v['value']:.3f}"
            print(f"{'PASS' if v['passed'] else 'FAIL'}  {v['target']:<24} {value:>6} "
                  f"({v['bound']})  {v['detail']}", flush=True)
    if args.masked_rows:
        write_csv(masked_rows(), args.out / "masked_rows.csv", MASKED_FIELDS)
        print(f"wrote {args.out / 'masked_rows.csv'}", flush=True)
    if args.decode:
        write_csv(measure_decode(args), args.out / "decode.csv", DECODE_FIELDS)
        print(f"wrote {args.out / 'decode.csv'}", flush=True)
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
