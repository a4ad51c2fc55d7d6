"""Time and peak memory of four attention implementations against sequence length.

Methods, all on ``(1, 8, L, 64)`` float32 queries, keys and values (batch 1, 8 heads, d 64),
without autograd:

* ``plain``: the materialised formula in three torch ops, ``softmax((Q * scale) K^T) V``
  (plus one in-place ``masked_fill_`` of the precomputed causal mask when causal);
* ``book``: ``attention_src.scaled_dot_product_attention`` (materialised, returns the weights;
  causal through ``attention_src.causal_mask``);
* ``blockwise``: ``attention_src.blockwise_attention`` with its default tile sizes;
* ``fused``: ``torch.nn.functional.scaled_dot_product_attention``, PyTorch's fused CPU kernel.

Time: CPU time of the calling thread (``time.thread_time``), not wall-clock time: with one
thread (``OMP_NUM_THREADS=1``, as ``make bench`` sets) every operator runs in this thread, and
the time other processes hold the core is not counted, so a busy shared machine does not
inflate it (it still slows each call a little, through shared caches and memory bandwidth).
The median over repeats (7 up to L = 1024, 5 up to 4096, 3 at 8192), the methods interleaved
within each repeat (fused, plain, book, blockwise, fused, ...) after one warm-up call each, so
what load remains hits all of them alike; reported also as a ratio to ``fused`` measured in
the same run. Every output is checked against fused's (1e-5).

Peak extra memory: measured as resident memory (RSS), in a separate child process (one
import, not one process per case): glibc's ``mallopt`` fixes the mmap threshold at 64 KiB so
that every freed buffer larger than that goes back to the operating system, then, for each
case, after one small warm-up call of the method, ``/proc/self/clear_refs`` is written ``5`` to
reset the peak-RSS counter and the case runs once: ``VmHWM`` after minus ``VmRSS`` before is
the peak extra memory of that call (its output included; its inputs, allocated before, not).
The malloc setting would change timings, which is why timing happens in this process and
memory in the child.

Writes ``benchmarks/results/attention.csv`` (one row per method, L and causal),
``attention.png`` (log-log time and memory against L) and ``attention_meta.json`` (date,
``git describe --always --dirty``, the files ``git status`` reports as changed or untracked,
the SHA-256 of ``attention_src/efficient.py``, the clock, load, threads, the GFLOP/s of a
plain ``(4096, 64) @ (64, 4096)`` matmul, targets).
Targets, printed with whether they hold: blockwise time <= 1.3x fused at L = 4096 (causal and
not; 1.2x is the aim) and blockwise peak extra memory at L = 8192 <= 1/8 of plain's.

``benchmarks/results/`` is not tracked by git. Chapter 9 reads a tracked snapshot,
``book/data/ch09_bench_attention.csv`` and ``ch09_bench_attention_meta.json``, written only
by the explicit step ``python benchmarks/bench_attention.py --snapshot`` (a copy of the last
full run's files); after a snapshot, re-execute the chapter (``make execute
NB=book/09_efficient_attention.ipynb``), as after retraining a model.

Usage: python benchmarks/bench_attention.py [--lengths 256 512 ...] [--quick] [--snapshot]
(a run with other lengths than the default 256 .. 8192 prints its figures but writes nothing)
Run with OMP_NUM_THREADS=1 (as ``make bench`` does); a whole run takes about 5 minutes on an
idle 2-core machine, up to 8 under load.
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
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attention_src import blockwise_attention, causal_mask, scaled_dot_product_attention

HEADS, D = 8, 64
METHODS = ("plain", "book", "blockwise", "fused")
DEFAULT_LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
TIME_TARGET, TIME_AIM, MEMORY_TARGET = 1.3, 1.2, 1 / 8
RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
SNAPSHOT = {"attention.csv": ROOT / "book" / "data" / "ch09_bench_attention.csv",
            "attention_meta.json": ROOT / "book" / "data" / "ch09_bench_attention_meta.json"}
CLOCK = "time.thread_time (CPU time of the calling thread; one thread)"
# Okabe-Ito colours, one per method
COLOURS = {"plain": "#D55E00", "book": "#E69F00", "blockwise": "#0072B2", "fused": "#009E73"}


def repeats_for(length: int) -> int:
    """Fewer repeats where one call takes seconds (the whole run stays within ~6 minutes)."""
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
        return lambda: scaled_dot_product_attention(q, k, v, mask)
    if method == "blockwise":
        return lambda: blockwise_attention(q, k, v, causal)
    if method == "fused":
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    raise ValueError(f"unknown method {method!r}")


def useful_gflop(length: int, causal: bool) -> float:
    """Multiply-adds of Q K^T and P V counted as 2 FLOPs, only the pairs a query may see."""
    pairs = length * (length + 1) / 2 if causal else length * length
    return 4 * pairs * D * HEADS / 1e9


def time_cases(length: int, causal: bool, repeats: int) -> dict[str, float]:
    """Median time of each method; every output is checked against the fused kernel's."""
    q, k, v, mask = make_inputs(length, causal)
    calls = {m: make_call(m, q, k, v, mask, causal) for m in METHODS}
    order = ["fused"] + [m for m in METHODS if m != "fused"]  # the reference first
    for m in order:  # warm-up: first-call allocations and caches are not timed
        calls[m]()
    times: dict[str, list[float]] = {m: [] for m in METHODS}
    ref = None
    for r in range(repeats):
        for m in order:
            start = time.thread_time()  # CPU time of this thread (see the docstring)
            out = calls[m]()
            times[m].append(time.thread_time() - start)
            out = out[0] if isinstance(out, tuple) else out
            if r == 0 and m == "fused":
                ref = out
            elif r == 0:
                torch.testing.assert_close(out, ref, atol=1e-5, rtol=0,
                                           msg=f"{m} differs from fused at L={length}")
            del out
    return {m: statistics.median(t) for m, t in times.items()}


def matmul_gflops(repeats: int = 7) -> float:
    """GFLOP/s of a plain (4096, 64) @ (64, 4096) matmul, median time of ``repeats``."""
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4096, 64, generator=g), torch.randn(64, 4096, generator=g)
    a @ b
    times = []
    for _ in range(repeats):
        start = time.thread_time()
        a @ b
        times.append(time.thread_time() - start)
    return 2 * 4096 * 4096 * 64 / statistics.median(times) / 1e9


# ------------------------------------------------------------------------ memory (child)


def _proc_status() -> dict[str, int]:
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmHWM:", "VmRSS:")):
                name, rest = line.split(":")
                values[name] = int(rest.split()[0]) * 1024  # kB -> bytes
    return values


def measure_memory(lengths: list[int]) -> dict[str, float]:
    """Peak extra RSS in bytes of each (method, L, causal); run in a child process."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD: fixed, so freed buffers are unmapped
    libc.mallopt(-1, 128 * 1024)  # M_TRIM_THRESHOLD: return freed heap tops as well
    results = {}
    with torch.no_grad():
        for causal in (False, True):
            small = make_inputs(256, causal)
            for m in METHODS:  # warm-up of each code path at a small size
                make_call(m, *small, causal)()
            for length in lengths:
                q, k, v, mask = make_inputs(length, causal)
                for m in METHODS:
                    call = make_call(m, q, k, v, mask, causal)
                    with open("/proc/self/clear_refs", "w") as f:
                        f.write("5")  # reset VmHWM (the peak RSS) to the current RSS
                    before = _proc_status()["VmRSS"]
                    out = call()
                    peak = _proc_status()["VmHWM"]
                    del out
                    results[f"{m},{length},{int(causal)}"] = max(peak - before, 0)
                del q, k, v, mask
    return results


# ----------------------------------------------------------------------------- reporting


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT,
                             check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def provenance() -> dict:
    """What code produced the numbers: ``git describe --always --dirty``, the files git
    reports as modified or untracked, and the SHA-256 of the blockwise implementation."""
    source = ROOT / "attention_src" / "efficient.py"
    status = _git("status", "--porcelain", "--untracked-files=all")
    return {"commit": _git("describe", "--always", "--dirty"),
            "git_status": status.splitlines() if status != "unknown" else ["unknown"],
            "efficient_py_sha256": hashlib.sha256(source.read_bytes()).hexdigest()}


def snapshot() -> None:
    """Copy the last full run's CSV and metadata into book/data/ for chapter 9."""
    for name, target in SNAPSHOT.items():
        if not (RESULTS / name).exists():
            sys.exit(f"no {RESULTS / name}: run the full benchmark first")
        shutil.copyfile(RESULTS / name, target)
        print(f"copied {RESULTS / name} -> {target.relative_to(ROOT)}")
    print("now re-execute chapter 9: make execute NB=book/09_efficient_attention.ipynb")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for m in METHODS:
        for causal, style in ((False, "-"), (True, "--")):
            sel = [r for r in rows if r["method"] == m and r["causal"] == causal]
            lengths = [r["L"] for r in sel]
            label = f"{m}{' (causal)' if causal else ''}"
            axes[0].plot(lengths, [r["time_s"] for r in sel], style, marker="o",
                         color=COLOURS[m], label=label)
            mem = [(r["L"], r["peak_extra_mib"]) for r in sel if r["peak_extra_mib"] > 0]
            if mem:
                axes[1].plot(*zip(*mem, strict=True), style, marker="o", color=COLOURS[m],
                             label=label)
    axes[0].set(xscale="log", yscale="log", xlabel="sequence length L (tokens)",
                ylabel="median CPU time per call (s)", title="Time, 8 heads, d = 64, float32")
    axes[1].set(xscale="log", yscale="log", xlabel="sequence length L (tokens)",
                ylabel="peak extra memory (MiB)", title="Peak extra resident memory")
    for ax in axes:
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xticks(sorted({r["L"] for r in rows}))
        ax.set_xticklabels([str(x) for x in sorted({r["L"] for r in rows})])
        ax.grid(True, which="major", alpha=0.3)
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=DEFAULT_LENGTHS)
    p.add_argument("--quick", action="store_true", help="L up to 1024, for a smoke test")
    p.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--plot-only", action="store_true",
                   help="redraw attention.png from the stored attention.csv")
    p.add_argument("--snapshot", action="store_true",
                   help="copy the last full run's results into book/data/ for chapter 9")
    args = p.parse_args()
    if args.snapshot:
        snapshot()
        return
    if args.plot_only:
        with open(RESULTS / "attention.csv") as f:
            rows = [{**r, "L": int(r["L"]), "causal": r["causal"] == "True",
                     "time_s": float(r["time_s"]), "peak_extra_mib": float(r["peak_extra_mib"])}
                    for r in csv.DictReader(f)]
        plot(rows, RESULTS / "attention.png")
        return
    lengths = [x for x in args.lengths if x <= 1024] if args.quick else args.lengths
    if args.memory_child:
        print(json.dumps(measure_memory(lengths)))
        return

    started = time.perf_counter()
    load = os.getloadavg()
    print(f"attention: batch 1, {HEADS} heads, d {D}, float32, {torch.get_num_threads()} "
          f"thread(s); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; clock {CLOCK}")
    child = subprocess.run([sys.executable, __file__, "--memory-child", "--lengths",
                            *map(str, lengths)], capture_output=True, text=True, check=True)
    memory = json.loads(child.stdout.strip().splitlines()[-1])
    print(f"memory measured in a child process ({time.perf_counter() - started:.0f} s)")

    gflops_matmul = matmul_gflops()
    rows = []
    with torch.no_grad():
        for length in lengths:
            for causal in (False, True):
                times = time_cases(length, causal, repeats_for(length))
                for m in METHODS:
                    mem = memory[f"{m},{length},{int(causal)}"]
                    mem_fused = memory[f"fused,{length},{int(causal)}"]
                    rows.append({
                        "method": m, "L": length, "causal": causal,
                        "time_s": times[m], "time_ratio_fused": times[m] / times["fused"],
                        "peak_extra_mib": mem / 2**20,
                        "mem_ratio_fused": mem / mem_fused if mem_fused else float("nan"),
                        "gflops": useful_gflop(length, causal) / times[m],
                        "repeats": repeats_for(length),
                    })
                line = "  ".join(f"{m} {times[m] * 1e3:8.1f} ms" for m in METHODS)
                print(f"L={length:5d} {'causal' if causal else 'full  '} {line}")

    partial = lengths != DEFAULT_LENGTHS  # a partial run prints, but keeps the stored results
    if not partial:
        write_results(rows)
    report(rows, lengths, gflops_matmul, load, started, partial)


def write_results(rows: list[dict]) -> None:
    RESULTS.mkdir(exist_ok=True)
    with open(RESULTS / "attention.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v)
                             for k, v in r.items()})
    plot(rows, RESULTS / "attention.png")


def report(rows, lengths, gflops_matmul, load, started, partial) -> None:
    def row(m, length, causal):
        return next(r for r in rows if r["method"] == m and r["L"] == length
                    and r["causal"] == causal)

    print(f"\n{'method':10s} {'L':>5s} {'mask':6s} {'time ms':>9s} {'x fused':>8s} "
          f"{'GFLOP/s':>8s} {'mem MiB':>9s} {'x fused':>8s}")
    for r in rows:
        if r["L"] in (lengths[-1], 4096):
            print(f"{r['method']:10s} {r['L']:5d} {'causal' if r['causal'] else 'full':6s} "
                  f"{r['time_s'] * 1e3:9.1f} {r['time_ratio_fused']:8.2f} {r['gflops']:8.1f} "
                  f"{r['peak_extra_mib']:9.1f} {r['mem_ratio_fused']:8.1f}")
    print(f"plain (4096, 64) @ (64, 4096) matmul: {gflops_matmul:.1f} GFLOP/s")

    targets = {}
    if 4096 in lengths:
        for causal in (False, True):
            ratio = row("blockwise", 4096, causal)["time_ratio_fused"]
            name = f"blockwise time / fused, L=4096, {'causal' if causal else 'full'}"
            targets[name] = {"value": ratio, "target": TIME_TARGET, "aim": TIME_AIM,
                             "holds": ratio <= TIME_TARGET}
            verdict = "ok" if ratio <= TIME_AIM else "ok (above the 1.2 aim)" if (
                ratio <= TIME_TARGET) else "MISSED"
            print(f"TARGET {name}: {ratio:.3f} <= {TIME_TARGET}: {verdict}")
    if 8192 in lengths:
        for causal in (False, True):
            ratio = (row("blockwise", 8192, causal)["peak_extra_mib"]
                     / row("plain", 8192, causal)["peak_extra_mib"])
            name = f"blockwise memory / plain, L=8192, {'causal' if causal else 'full'}"
            targets[name] = {"value": ratio, "target": MEMORY_TARGET,
                             "holds": ratio <= MEMORY_TARGET}
            print(f"TARGET {name}: {ratio:.4f} <= {MEMORY_TARGET:.3f}: "
                  f"{'ok' if ratio <= MEMORY_TARGET else 'MISSED'}")
    load_end = os.getloadavg()
    meta = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        **provenance(), "clock": CLOCK, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "heads": HEADS, "d": D, "batch": 1,
        "load_average_start": load, "load_average_end": load_end,
        "matmul_4096x64x4096_gflops": gflops_matmul, "targets": targets,
        "seconds": time.perf_counter() - started,
    }
    if partial:
        print(f"load average at the end {load_end[0]:.2f}; partial run (--lengths or --quick): "
              f"results not written ({meta['seconds']:.0f} s)")
        return
    (RESULTS / "attention_meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(f"load average at the end {load_end[0]:.2f}; wrote {RESULTS}/attention.csv, "
          f"attention.png, attention_meta.json ({meta['seconds']:.0f} s); chapter 9 reads "
          f"book/data/, updated only by --snapshot")


if __name__ == "__main__":
    main()
