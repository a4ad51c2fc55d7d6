"""Forward time of attention_src.MultiHeadAttention against torch.nn.MultiheadAttention.

Both modules hold the same weights (``to_torch_multihead``) and see the same input; timings are
interleaved (ours, theirs, ours, ...) so machine load affects both alike, and the report is the
ratio of medians ``ours / torch`` measured in this run. Target: <= 1.2 in each mode.

Modes:
* ``weights``    need_weights=True: per-head weights (B, h, L, L) are returned
                 (torch: need_weights=True, average_attn_weights=False);
* ``no-weights`` need_weights=False: ours calls PyTorch's fused scaled_dot_product_attention;
                 torch may take its native fast path.
Each mode is timed for inference (eval, no_grad) and for a training forward (grad enabled).

Usage: python benchmarks/bench_multihead.py [--batch 8 --length 512 --embed 512 --heads 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from attention_src import MultiHeadAttention, to_torch_multihead

TARGET = 1.2


def _time(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def bench(batch: int, length: int, embed: int, heads: int, repeats: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    ours = MultiHeadAttention(embed, heads).eval()
    theirs = to_torch_multihead(ours).eval()
    x = torch.randn(batch, length, embed)
    with torch.no_grad():  # same function before timing anything
        a, wa = ours(x, x, x)
        b, wb = theirs(x, x, x, need_weights=True, average_attn_weights=False)
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(wa, wb, rtol=1e-4, atol=1e-6)

    cases = {
        "weights": (lambda: ours(x, x, x, need_weights=True),
                    lambda: theirs(x, x, x, need_weights=True, average_attn_weights=False)),
        "no-weights": (lambda: ours(x, x, x, need_weights=False),
                       lambda: theirs(x, x, x, need_weights=False)),
    }
    results = {}
    for grad in (False, True):
        for mode, (f_ours, f_theirs) in cases.items():
            label = f"{mode} ({'training forward' if grad else 'inference'})"
            with torch.set_grad_enabled(grad):
                for f in (f_ours, f_theirs):  # warm-up
                    f()
                t_ours, t_theirs = [], []
                for _ in range(repeats):
                    t_ours += _time(f_ours, 1)
                    t_theirs += _time(f_theirs, 1)
            m_ours, m_theirs = statistics.median(t_ours), statistics.median(t_theirs)
            results[label] = {"ours_ms": 1e3 * m_ours, "torch_ms": 1e3 * m_theirs,
                              "ratio": m_ours / m_theirs}
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--length", type=int, default=512)
    p.add_argument("--embed", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--repeats", type=int, default=15)
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = p.parse_args()
    res = bench(args.batch, args.length, args.embed, args.heads, args.repeats, args.threads)
    print(f"MultiHeadAttention vs nn.MultiheadAttention: B={args.batch} L={args.length} "
          f"E={args.embed} h={args.heads}, {args.threads} thread(s), median of {args.repeats}")
    print(f"{'mode':36s} {'ours ms':>9s} {'torch ms':>9s} {'ratio':>7s}  target <= {TARGET}")
    for label, r in res.items():
        flag = "ok" if r["ratio"] <= TARGET else "OVER"
        print(f"{label:36s} {r['ours_ms']:9.1f} {r['torch_ms']:9.1f} {r['ratio']:7.2f}  {flag}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_multihead.json").write_text(json.dumps({"args": vars(args), "results": res},
                                                         indent=2))


if __name__ == "__main__":
    main()
