"""CPU time of attention_src.masked_softmax, forward and backward, against two references.

``masked_softmax`` with autograd on (the path training takes) selects with ``torch.where``:
the lowest finite score where a key is hidden, then zeros where it is hidden. It replaced
two ``masked_fill`` calls around ``torch.softmax`` that give the same weights and gradients
bit for bit (``tests/test_softmax.py`` checks it). This measures, in one run and on the same
scores, for each case:

* ``where``: ``attention_src.masked_softmax(scores, mask)``, forward and backward;
* ``masked_fill``: the form it replaced,
  ``torch.softmax(scores.masked_fill(~mask, lowest), -1).masked_fill(~mask, 0)``;
* ``softmax``: ``torch.softmax(scores, -1)`` with no mask at all, the floor for any masked
  softmax built on it.

Each time is the user-mode CPU time per call (``attention_src.profiling.mean_cost``: calls
repeated until they fill ``--min-ms`` of CPU time, after one warm-up call), at one thread;
the three are measured in turn, ``--rounds`` times, and the median of the rounds is
reported, with the ratios ``masked_fill / where`` (how much faster the selection is) and
``where / softmax`` (what the mask costs). Target: ``masked_fill / where >= 1`` in every case
(the selection is never the slower form). Cases: a causal ``(L, L)`` mask and a padding mask
``(B, 1, 1, L)``, both broadcast over batch and heads, and a full ``(B, h, L, L)`` mask, for
float32 scores ``(B, h, L, L)`` of a few training-sized shapes.

Usage: python benchmarks/bench_softmax.py [--rounds 5] [--min-ms 60]
Writes ``benchmarks/results/bench_softmax.json`` (untracked).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from attention_src import causal_mask, masked_softmax
from attention_src.profiling import mean_cost

TARGET = 1.0
SHAPES = [(256, 4, 32, 32), (32, 8, 64, 64), (64, 4, 128, 128)]  # (B, h, L, L)


def masks(shape: tuple[int, ...], generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The three masks of a case, each broadcastable to ``shape`` ``(B, h, L, L)``."""
    batch, _, length, _ = shape
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=generator)
    padding = torch.arange(length) < lengths[:, None]  # (B, L)
    return {
        "causal (L, L)": causal_mask(length, length),
        "padding (B, 1, 1, L)": padding[:, None, None, :],  # (B, L) -> (B, 1, 1, L)
        "full (B, h, L, L)": torch.rand(shape, generator=generator) < 0.7,
    }


def forward_backward(form: str, scores: torch.Tensor, mask: torch.Tensor,
                     grad_out: torch.Tensor):
    """A function that runs ``form`` forward and backward once."""
    lowest = torch.finfo(scores.dtype).min

    def where():
        return masked_softmax(scores, mask)

    def masked_fill():
        return torch.softmax(scores.masked_fill(~mask, lowest), dim=-1).masked_fill(~mask, 0.0)

    def softmax():
        return torch.softmax(scores, dim=-1)

    forward = {"where": where, "masked_fill": masked_fill, "softmax": softmax}[form]

    def run():
        with torch.enable_grad():  # mean_cost turns autograd off around its calls
            return torch.autograd.grad(forward(), scores, grad_out)

    return run


def bench(rounds: int, min_ms: float) -> list[dict]:
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for shape in SHAPES:
        scores = torch.randn(shape, generator=generator).requires_grad_()
        grad_out = torch.randn(shape, generator=generator)
        for name, mask in masks(shape, generator).items():
            calls = {form: forward_backward(form, scores, mask, grad_out)
                     for form in ("where", "masked_fill", "softmax")}
            # the same gradients, bit for bit, before timing them
            (grad_where,), (grad_fill,) = calls["where"](), calls["masked_fill"]()
            assert torch.equal(grad_where, grad_fill), (shape, name)
            user_ms: dict[str, list[float]] = {form: [] for form in calls}
            for _ in range(rounds):
                for form, fn in calls.items():
                    user_ms[form].append(mean_cost(fn, min_ms, warm_up=1).user_ms)
            ms = {form: statistics.median(times) for form, times in user_ms.items()}
            rows.append({"shape": list(shape), "mask": name, **{f"{k}_ms": v
                                                               for k, v in ms.items()},
                         "masked_fill_over_where": ms["masked_fill"] / ms["where"],
                         "where_over_softmax": ms["where"] / ms["softmax"]})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--min-ms", type=float, default=60.0)
    args = p.parse_args()
    rows = bench(args.rounds, args.min_ms)
    print(f"masked_softmax forward + backward, float32, 1 thread, user CPU ms per call, "
          f"median of {args.rounds} rounds")
    print(f"{'shape (B, h, L, L)':20s} {'mask':22s} {'where':>8s} {'m_fill':>8s} "
          f"{'softmax':>8s} {'fill/where':>10s} {'where/sm':>9s}  target fill/where >= {TARGET}")
    for r in rows:
        flag = "ok" if r["masked_fill_over_where"] >= TARGET else "UNDER"
        print(f"{str(tuple(r['shape'])):20s} {r['mask']:22s} {r['where_ms']:8.2f} "
              f"{r['masked_fill_ms']:8.2f} {r['softmax_ms']:8.2f} "
              f"{r['masked_fill_over_where']:10.2f} {r['where_over_softmax']:9.2f}  {flag}")
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    (out / "bench_softmax.json").write_text(json.dumps({"args": vars(args), "rows": rows},
                                                       indent=2))


if __name__ == "__main__":
    main()
