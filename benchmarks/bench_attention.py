"""Time and memory of five attention implementations against sequence length (chapter 9's data).

One command measures everything chapter 9 reads and writes its snapshot:

    python benchmarks/bench_attention.py --snapshot

(then re-execute the chapter: ``make execute NB=book/09_efficient_attention.ipynb``). Without
``--snapshot`` the results go only to the untracked ``benchmarks/results/``. It takes about
10 minutes on an idle 2-core machine, much longer on a busy one; run it on an idle machine,
since wall-clock time is what it reports first. ``--snapshot`` refuses to run (exit status 2,
nothing written) when the 1-minute load average at the start exceeds ``MAX_LOAD_PER_CPU``
(0.25) times the number of CPUs: a busy machine measures its load, not the code.
``--allow-load`` overrides the check for a trial run; the meta file then records
``"load_allowed": true`` (and ``tests/test_bench_snapshot.py`` still fails on such a snapshot).

Methods, on ``(1, 8, L, 64)`` float32 queries, keys and values (batch 1, 8 heads, d 64):

* ``plain``: the materialised formula in three torch ops, ``softmax((Q * scale) K^T) V``
  (plus one in-place ``masked_fill_`` of the precomputed causal mask when causal);
* ``book``: ``attention_src.scaled_dot_product_attention`` (materialised, returns the weights;
  causal through ``attention_src.causal_mask``);
* ``per_head``: ``attention_src.efficient.blockwise_attention_per_head``, the tile loop one
  (batch, head) pair at a time, with 512 x 512 tiles;
* ``blockwise``: ``attention_src.efficient.blockwise_attention``, every tile for all (batch,
  head) pairs at once, default tile sizes;
* ``fused``: ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's fused CPU kernel.

Time (file ``attention.csv``), measured in child processes, one per setting: one thread
(``torch.set_num_threads(1)``) and all the CPU's threads, with glibc's allocator as it comes
(``heap=default``), and one thread with the allocator told to keep freed memory
(``heap=kept``, ``attention_src.profiling.KEEP_HEAP_ENV``; L = 1024 to 4096). For each call
``attention_src.profiling.measure_call(scope="process")`` records the wall-clock time, the CPU
time of all the process's threads, in all and split into user and system mode, and the minor
page faults; the
table holds the median of each over the repeats (7 up to L = 1024, 5 up to 4096, 3 at 8192),
the methods interleaved within each repeat (fused, plain, book, per_head, blockwise, fused,
...) after one warm-up call each, so that load from other programs hits all of them alike,
and ratios to ``fused`` measured in the same child. Every output is checked against fused's
(1e-5). Without autograd. The same child times the reference product, ``(4096, 64) @ (64,
4096)``, into a fresh result and into a preallocated one (``out=``), at one thread.

Peak extra memory (file ``attention_memory.csv``): resident memory (RSS) in a child process
in which glibc's ``mallopt`` fixes the mmap threshold at 64 KiB, so that every freed buffer
larger than that goes back to the operating system; for each case, after one small warm-up
call of the method, ``/proc/self/clear_refs`` is written ``5`` to reset the peak-RSS counter
and the case runs once: ``VmHWM`` after minus ``VmRSS`` before is the peak extra memory of
that call (its output included; its inputs, allocated before, not). Modes: ``no_grad`` (all
methods, L up to 8192); with autograd (``plain``, ``per_head``, ``blockwise``, ``fused``, L up
to 4096), ``forward``: the peak during a forward pass with gradients on (what autograd saves
included) and ``forward_backward``: the peak over the forward and the backward pass.

``attention_meta.json``: date, ``git describe --always --dirty``, the files ``git status``
reports as changed, the SHA-256 of ``attention_src/efficient.py``,
``attention_src/profiling.py`` and this file (``tests/test_bench_snapshot.py`` fails when a
snapshot's hashes no longer match the files), the CPU model and its cache sizes read from
``/sys``, the page size and the transparent-huge-page setting (they decide how many page
faults a fresh allocation costs), torch's version, the thread counts, the 1-, 5- and 15-minute
load averages at the start and at the end, the bound on the start load and whether
``--allow-load`` lifted it, the matmul rates, and the run's duration.

Usage: python benchmarks/bench_attention.py [--snapshot [--allow-load]] [--quick] [--tiles]
``--quick``: L up to 1024, prints, writes nothing. ``--tiles``: compare tile sizes of
``blockwise_attention`` against fused at L = 4096, prints, writes nothing.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import datetime
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attention_src import causal_mask, scaled_dot_product_attention
from attention_src.efficient import blockwise_attention, blockwise_attention_per_head
from attention_src.profiling import KEEP_HEAP_ENV, huge_page_mode, measure_call
from attention_src.saved import record_checksum

HEADS, D = 8, 64
METHODS = ("plain", "book", "per_head", "blockwise", "fused")
GRAD_METHODS = ("plain", "per_head", "blockwise", "fused")
DEFAULT_LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
GRAD_LENGTHS = [256, 512, 1024, 2048, 4096]
KEPT_LENGTHS = [1024, 2048, 4096]
ALL_THREADS = len(os.sched_getaffinity(0))
#: a snapshot needs a 1-minute load average at the start of at most this times the CPUs
MAX_LOAD_PER_CPU = 0.25
# (heap, threads, methods, lengths): the settings timed, each in its own child process
SETTINGS = (("default", 1, METHODS, DEFAULT_LENGTHS),
            ("default", ALL_THREADS, tuple(m for m in METHODS if m != "book"), DEFAULT_LENGTHS),
            ("kept", 1, tuple(m for m in METHODS if m != "book"), KEPT_LENGTHS))
PER_HEAD_TILE = 512
ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
DATA = ROOT / "attention_src" / "saved_data"
FILES = {"attention.csv": "ch09_bench_attention.csv",
         "attention_memory.csv": "ch09_bench_memory.csv",
         "attention_meta.json": "ch09_bench_attention_meta.json"}
HASHED = ("attention_src/efficient.py", "attention_src/profiling.py",
          "benchmarks/bench_attention.py")
# Okabe-Ito colours, one per method
COLOURS = {"plain": "#D55E00", "book": "#E69F00", "per_head": "#CC79A7",
           "blockwise": "#0072B2", "fused": "#009E73"}


def repeats_for(length: int) -> int:
    """Fewer repeats where one call takes seconds."""
    return 7 if length <= 1024 else 5 if length <= 4096 else 3


def make_inputs(length: int, causal: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, HEADS, length, D, generator=g) for _ in range(3))
    mask = causal_mask(length) if causal else None  # (L, L) bool, True = may attend
    return q, k, v, mask


def make_call(method: str, q, k, v, mask, causal: bool):
    scale = 1.0 / math.sqrt(q.shape[-1])
    if method == "plain":
        kt = k.transpose(-2, -1)  # (1, h, d, L)
        if causal:
            hidden = ~mask  # (L, L), True = hidden

            def plain():
                scores = (q * scale) @ kt  # (1, h, L, L)
                return torch.softmax(scores.masked_fill_(hidden, -math.inf), dim=-1) @ v
            return plain
        return lambda: torch.softmax((q * scale) @ kt, dim=-1) @ v
    if method == "book":
        return lambda: scaled_dot_product_attention(q, k, v, mask)[0]
    if method == "per_head":
        return lambda: blockwise_attention_per_head(q, k, v, causal, PER_HEAD_TILE,
                                                    query_block_size=PER_HEAD_TILE)
    if method == "blockwise":
        return lambda: blockwise_attention(q, k, v, causal)
    if method == "fused":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    raise ValueError(f"unknown method {method!r}")


def useful_gflop(length: int, causal: bool) -> float:
    """Multiply-adds of Q K^T and P V counted as 2 FLOPs, only the pairs a query may see."""
    pairs = length * (length + 1) / 2 if causal else length * length
    return 4 * pairs * D * HEADS / 1e9


# ------------------------------------------------------------------------ timing (child)


def time_cases(methods, length: int, causal: bool, repeats: int) -> dict[str, dict]:
    """Median wall, CPU, user and system time (ms) and minor faults of each method."""
    q, k, v, mask = make_inputs(length, causal)
    order = ["fused"] + [m for m in methods if m != "fused"]  # the reference first
    calls = {m: make_call(m, q, k, v, mask, causal) for m in order}
    for m in order:  # warm-up: first-call allocations and caches are not timed
        calls[m]()
    costs: dict[str, list] = {m: [] for m in order}
    ref = None
    for r in range(repeats):
        for m in order:
            out, cost = measure_call(calls[m], scope="process")
            costs[m].append(cost)
            if r == 0 and m == "fused":
                ref = out
            elif r == 0:
                torch.testing.assert_close(out, ref, atol=1e-5, rtol=0,
                                           msg=f"{m} differs from fused at L={length}")
            del out
    return {m: {f: statistics.median(getattr(c, f) for c in costs[m])
                for f in ("wall_ms", "cpu_ms", "user_ms", "system_ms", "minor_faults")}
            for m in order}


def matmul_rates(repeats: int = 7) -> dict[str, float]:
    """The (4096, 64) @ (64, 4096) product into a fresh result and into ``out=``: GFLOP/s of
    the median wall time, and the median CPU, user and system time (ms) and faults."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4096, 64, generator=g), torch.randn(64, 4096, generator=g)
    out = torch.empty(4096, 4096)
    calls = {"fresh": lambda: a @ b, "out": lambda: torch.matmul(a, b, out=out)}
    result = {}
    for name, fn in calls.items():
        fn()
        costs = [measure_call(fn, scope="process")[1] for _ in range(repeats)]
        wall = statistics.median(c.wall_ms for c in costs)
        result[f"matmul_{name}_gflops"] = 2 * 4096 * 4096 * 64 / (wall * 1e-3) / 1e9
        for f in ("cpu_ms", "user_ms", "system_ms", "minor_faults"):
            result[f"matmul_{name}_{f}"] = statistics.median(getattr(c, f) for c in costs)
    return result


def timing_child(threads: int, methods, lengths) -> dict:
    torch.set_num_threads(threads)
    rows = []
    with torch.no_grad():
        extra = matmul_rates() if threads == 1 else {}
        for length in lengths:
            for causal in (False, True):
                med = time_cases(methods, length, causal, repeats_for(length))
                for m in methods:
                    rows.append({"method": m, "L": length, "causal": causal, **med[m],
                                 "repeats": repeats_for(length)})
                line = "  ".join(f"{m} {med[m]['wall_ms']:8.1f}" for m in methods)
                print(f"  threads {threads} L={length:5d} {'causal' if causal else 'full  '} "
                      f"wall ms: {line}", file=sys.stderr, flush=True)
    return {"rows": rows, "threads": torch.get_num_threads(), **extra}


# ------------------------------------------------------------------------ memory (child)


def _proc_status() -> dict[str, int]:
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                name, rest = line.split(":")
                values[name] = int(rest.split()[0]) * 1024  # kB -> bytes
    return values


def _reset_peak() -> int:
    """Reset the peak-RSS counter (VmHWM) to the current RSS; return the current RSS."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _proc_status()["VmRSS"]


def memory_child(lengths: list[int], grad: bool) -> dict[str, float]:
    """Peak extra RSS in bytes of each (method, L, causal[, mode])."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD: fixed, so freed buffers are unmapped
    libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD: return freed heap tops as well
    methods = GRAD_METHODS if grad else METHODS
    results = {}
    for causal in (False, True):
        small = make_inputs(256, causal)
        for t in small[:3]:
            t.requires_grad_(grad)
        for m in methods:  # warm-up of each code path at a small size
            out = make_call(m, *small, causal)()
            if grad:
                out.backward(torch.ones_like(out))
        for length in lengths:
            q, k, v, mask = make_inputs(length, causal)
            for m in methods:
                for t in (q, k, v):
                    t.requires_grad_(grad)
                    t.grad = None
                call = make_call(m, q, k, v, mask, causal)
                with torch.set_grad_enabled(grad):
                    before = _reset_peak()
                    out = call()
                    forward = _proc_status()["VmHWM"] - before
                    if grad:
                        out.backward(torch.ones_like(out))
                        results[f"{m},{length},{int(causal)},forward_backward"] = max(
                            _proc_status()["VmHWM"] - before, 0)
                    del out
                mode = "forward" if grad else "no_grad"
                results[f"{m},{length},{int(causal)},{mode}"] = max(forward, 0)
            del q, k, v, mask
    return results


# ----------------------------------------------------------------------------- the parent


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT,
                             check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def file_hashes() -> dict[str, str]:
    """SHA-256 of the files whose code produced the numbers."""
    return {name: hashlib.sha256((ROOT / name).read_bytes()).hexdigest() for name in HASHED}


def machine() -> dict:
    """The CPU's model, cores and cache sizes as the operating system reports them."""
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    caches = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
            shared = (index / "shared_cpu_list").read_text().strip()
        except OSError:
            continue
        if kind != "Instruction":
            caches[f"L{level}"] = {"size": size, "shared_cpu_list": shared}
    return {"cpu_model": model, "cpus": ALL_THREADS, "caches": caches,
            "libc": " ".join(platform.libc_ver()), "page_size": os.sysconf("SC_PAGE_SIZE"),
            "transparent_hugepage": huge_page_mode()}


def load_bound(cpus: int = ALL_THREADS) -> float:
    """The largest 1-minute load average at the start that a snapshot accepts."""
    return MAX_LOAD_PER_CPU * cpus


def run_child(args: list[str], env_extra: dict | None = None, threads: int = 1) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)})
    env.update(env_extra or {})
    child = subprocess.run([sys.executable, __file__, *args], capture_output=False,
                           stdout=subprocess.PIPE, text=True, check=True, env=env)
    return json.loads(child.stdout.strip().splitlines()[-1])


def measure(lengths: list[int], quick: bool) -> tuple[list[dict], list[dict], dict]:
    timing_rows, extra = [], {}
    for heap, threads, methods, setting_lengths in SETTINGS:
        use = [x for x in setting_lengths if x in lengths] or lengths[-1:]
        started = time.perf_counter()
        data = run_child(["--timing-child", "--threads", str(threads), "--methods", *methods,
                          "--lengths", *map(str, use)],
                         KEEP_HEAP_ENV if heap == "kept" else None, threads)
        print(f"timed heap={heap}, {data['threads']} thread(s) "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        for r in data["rows"]:
            timing_rows.append({**r, "threads": data["threads"], "heap": heap})
        if heap == "default" and threads == 1:
            extra.update({k: v for k, v in data.items() if k.startswith("matmul")})
    for r in timing_rows:
        ref = next(f for f in timing_rows if f["method"] == "fused" and f["L"] == r["L"]
                   and f["causal"] == r["causal"] and f["threads"] == r["threads"]
                   and f["heap"] == r["heap"])
        r["wall_ratio_fused"] = r["wall_ms"] / ref["wall_ms"]
        r["cpu_ratio_fused"] = r["cpu_ms"] / ref["cpu_ms"]
        r["gflops_wall"] = useful_gflop(r["L"], r["causal"]) / (r["wall_ms"] * 1e-3)
    memory_rows = []
    for grad, mem_lengths in ((False, lengths), (True, [x for x in GRAD_LENGTHS
                                                        if x in lengths] or lengths[:1])):
        started = time.perf_counter()
        data = run_child(["--memory-child", *(["--grad"] if grad else []), "--lengths",
                          *map(str, mem_lengths)])
        print(f"memory measured, {'with' if grad else 'without'} autograd "
              f"({time.perf_counter() - started:.0f} s)", flush=True)
        for key, value in data.items():
            m, length, causal, mode = key.split(",")
            memory_rows.append({"method": m, "L": int(length), "causal": causal == "1",
                                "mode": mode, "peak_extra_mib": value / 2**20})
    return timing_rows, memory_rows, extra


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v)
                             for k, v in r.items()})


def plot(rows: list[dict], memory_rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for m in METHODS:
        for threads, style in ((1, "-"), (ALL_THREADS, ":")):
            sel = [r for r in rows if r["method"] == m and not r["causal"]
                   and r["threads"] == threads and r["heap"] == "default"]
            if sel:
                axes[0].plot([r["L"] for r in sel], [r["wall_ratio_fused"] for r in sel],
                             style, marker="o", color=COLOURS[m],
                             label=f"{m}, {threads} thread(s)")
        sel = [r for r in memory_rows if r["method"] == m and not r["causal"]
               and r["mode"] == "no_grad" and r["peak_extra_mib"] > 0]
        if sel:
            axes[1].plot([r["L"] for r in sel], [r["peak_extra_mib"] for r in sel], "-",
                         marker="o", color=COLOURS[m], label=m)
    axes[0].set(xscale="log", yscale="log", xlabel="sequence length L (tokens)",
                ylabel="median wall time / fused kernel's", title="Time, 8 heads, d = 64")
    axes[1].set(xscale="log", yscale="log", xlabel="sequence length L (tokens)",
                ylabel="peak extra memory (MiB)", title="Peak extra resident memory")
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(rows: list[dict], memory_rows: list[dict], extra: dict) -> None:
    print(f"\n{'method':10s} {'L':>5s} {'mask':6s} {'thr':>3s} {'heap':7s} {'wall ms':>9s} "
          f"{'x fused':>8s} {'user ms':>8s} {'sys ms':>7s} {'faults':>8s}")
    for r in rows:
        if r["L"] == 4096:
            print(f"{r['method']:10s} {r['L']:5d} {'causal' if r['causal'] else 'full':6s} "
                  f"{r['threads']:3d} {r['heap']:7s} {r['wall_ms']:9.1f} "
                  f"{r['wall_ratio_fused']:8.2f} {r['user_ms']:8.1f} {r['system_ms']:7.1f} "
                  f"{r['minor_faults']:8.0f}")
    for r in memory_rows:
        if r["L"] == 4096 and not r["causal"]:
            print(f"memory {r['method']:10s} L=4096 {r['mode']:17s} "
                  f"{r['peak_extra_mib']:9.1f} MiB")
    for k, v in extra.items():
        if k.endswith("gflops"):
            print(f"{k}: {v:.1f} GFLOP/s")


def tile_sweep() -> None:
    """Wall time of blockwise_attention with several tile sizes against fused, L = 4096."""
    q, k, v, _ = make_inputs(4096, False)
    sizes = [(512, 512), (256, 512), (256, 256), (128, 512), (128, 256)]
    for threads in sorted({1, ALL_THREADS}):
        torch.set_num_threads(threads)
        calls = {"fused": lambda: F.scaled_dot_product_attention(q, k, v)}
        for bq, bk in sizes:
            calls[f"{bq}x{bk}"] = (lambda bq=bq, bk=bk: blockwise_attention(
                q, k, v, block_size=bk, query_block_size=bq))
        walls: dict[str, list[float]] = {n: [] for n in calls}
        with torch.no_grad():
            for fn in calls.values():
                fn()
            for _ in range(5):
                for n, fn in calls.items():
                    walls[n].append(measure_call(fn, scope="process")[1].wall_ms)
        ref = statistics.median(walls["fused"])
        print(f"{threads} thread(s): " + ", ".join(
            f"{n} {statistics.median(w) / ref:.3f}" for n, w in walls.items()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--snapshot", action="store_true",
                   help="also write the results into attention_src/saved_data/ for chapter 9")
    p.add_argument("--allow-load", action="store_true",
                   help="snapshot even on a busy machine (recorded in the meta file)")
    p.add_argument("--quick", action="store_true", help="L up to 1024; writes nothing")
    p.add_argument("--tiles", action="store_true", help="compare tile sizes at L = 4096")
    p.add_argument("--timing-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--grad", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--methods", nargs="+", default=list(METHODS), help=argparse.SUPPRESS)
    p.add_argument("--lengths", type=int, nargs="+", default=DEFAULT_LENGTHS,
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.timing_child:
        print(json.dumps(timing_child(args.threads, args.methods, args.lengths)))
        return
    if args.memory_child:
        print(json.dumps(memory_child(args.lengths, args.grad)))
        return
    if args.tiles:
        tile_sweep()
        return
    if args.quick and args.snapshot:
        sys.exit("--quick measures too little for a snapshot")
    lengths = [x for x in DEFAULT_LENGTHS if x <= 1024] if args.quick else DEFAULT_LENGTHS
    started = time.perf_counter()
    load = os.getloadavg()
    if args.snapshot and load[0] > load_bound() and not args.allow_load:
        print(f"refusing to snapshot: the 1-minute load average is {load[0]:.2f}, above "
              f"{load_bound():.2f} ({MAX_LOAD_PER_CPU} x {ALL_THREADS} CPUs); a busy machine "
              "measures its load, not the code. Run it on an idle machine (or pass "
              "--allow-load for a trial, which the meta file records).", file=sys.stderr)
        sys.exit(2)
    print(f"attention: batch 1, {HEADS} heads, d {D}, float32; threads 1 and {ALL_THREADS}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    rows, memory_rows, extra = measure(lengths, args.quick)
    report(rows, memory_rows, extra)
    if args.quick:
        print(f"quick run: nothing written ({time.perf_counter() - started:.0f} s)")
        return
    load_end = os.getloadavg()
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": _git("describe", "--always", "--dirty"),
        "git_status": _git("status", "--porcelain", "--untracked-files=no").splitlines(),
        "sha256": file_hashes(), **machine(), "torch": torch.__version__,
        "threads": sorted({1, ALL_THREADS}), "heads": HEADS, "d": D, "batch": 1,
        "per_head_tile": PER_HEAD_TILE, "kept_heap_env": KEEP_HEAP_ENV,
        "load_average_start": load, "load_average_end": load_end,
        "max_start_load": load_bound(), "load_allowed": bool(args.allow_load), **extra,
        "seconds": time.perf_counter() - started,
    }
    RESULTS.mkdir(exist_ok=True)
    write_csv(rows, RESULTS / "attention.csv")
    write_csv(memory_rows, RESULTS / "attention_memory.csv")
    (RESULTS / "attention_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    plot(rows, memory_rows, RESULTS / "attention.png")
    print(f"load average at the end {load_end[0]:.2f}; wrote {RESULTS}/attention.csv, "
          f"attention_memory.csv, attention_meta.json, attention.png ({meta['seconds']:.0f} s)")
    if args.snapshot:
        for name, target in FILES.items():
            shutil.copyfile(RESULTS / name, DATA / target)
            record_checksum(DATA / target)
            print(f"snapshot: {DATA / target}")
        print("now re-execute chapter 9: make execute NB=book/09_efficient_attention.ipynb")


if __name__ == "__main__":
    main()
