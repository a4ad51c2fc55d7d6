"""Train chapter 5's probe models (one multi-head attention layer) and save them.

Chapter 5 asks what heads learn. The task (``data.offset_copy_task``): sequences of 12 random
tokens over 16 symbols; output position ``i`` must name the token at offset -1 (the previous
one) and the token at offset +2. The model (``head_metrics.OffsetReader``): token embeddings
of width 32 plus the fixed sinusoidal position table (times 2), one multi-head self-attention
layer, a linear read-out, no residual connection.

For every seed of :data:`SEEDS` the script trains the model with ``h`` = 1, 2 and 4 heads.
All three start from the same weights (the parameters have the same shapes whatever ``h``, and
each model is built after ``torch.manual_seed(seed)``) and see the same batches (seed
``BATCH_SEED + seed``): they differ only in how the 32 projected features are grouped into
heads. It also trains the one-head model of every seed for :data:`LONG_STEPS` steps (exercise 4).

Saved, for each run: the loss of every step, the ``state_dict`` and ``check_losses``, the loss
of each output on a fixed batch (``CHECK_N`` sequences drawn with seed ``CHECK_SEED``). The
notebook recomputes ``check_losses`` from the loaded weights, which ties the weights to this
run, and re-runs the first steps live against the saved curve. The file is about 0.8 MB.

Run from the repository root (about five minutes on one CPU core)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/train_ch05.py
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from saved_results import save  # tools/saved_results.py, next to this script

import attention_src as att
from attention_src import data, head_metrics

#: The chapter's settings; the notebook checks them when it loads the file.
CONFIG = {
    "vocab_size": 16, "length": 12, "embed_dim": 32, "offsets": (-1, 2), "steps": 300,
    "batch_size": 64, "lr": 0.01,
}
HEADS = (1, 2, 4)
SEEDS = (0, 1, 2, 3, 4, 5, 6, 7)
BATCH_SEED = 1000
LONG_STEPS = 2000
CHECK_N, CHECK_SEED = 512, 12345
OUT = Path(__file__).resolve().parent.parent / "book" / "data" / "ch05_heads.pt"


def build(num_heads: int, seed: int) -> head_metrics.OffsetReader:
    """The probe model with ``num_heads`` heads, its weights drawn after seeding ``seed``."""
    cfg = CONFIG
    torch.manual_seed(seed)
    return head_metrics.OffsetReader(cfg["vocab_size"], cfg["length"], cfg["embed_dim"],
                                     num_heads, num_outputs=len(cfg["offsets"]))


def check_batch() -> tuple[torch.Tensor, torch.Tensor]:
    cfg = CONFIG
    return data.offset_copy_task(CHECK_N, cfg["length"], cfg["vocab_size"], cfg["offsets"],
                                 seed=CHECK_SEED)


def run(num_heads: int, seed: int, steps: int) -> dict:
    cfg = CONFIG
    model = build(num_heads, seed)
    start = time.perf_counter()
    losses = head_metrics.train_offset_reader(
        model, cfg["offsets"], steps, batch_size=cfg["batch_size"], lr=cfg["lr"],
        seed=BATCH_SEED + seed)
    tokens, targets = check_batch()
    with torch.no_grad():
        check = head_metrics.offset_losses(model(tokens)[0], targets)
    print(f"h={num_heads} seed {seed} steps {steps}: {time.perf_counter() - start:5.1f} s, "
          f"check losses {[round(float(c), 4) for c in check]}")
    return {"losses": torch.tensor(losses, dtype=torch.float32),
            "state_dict": model.state_dict(), "check_losses": check}


def long_run(seed: int) -> dict:
    """The one-head model of ``seed`` trained for :data:`LONG_STEPS` steps; the loss of every
    step is not kept (the file must stay small), only the weights and ``check_losses``."""
    result = run(1, seed, LONG_STEPS)
    del result["losses"]
    return result


def train_all() -> dict:
    torch.set_num_threads(1)
    att.set_seed(0)
    runs = {(h, seed): run(h, seed, CONFIG["steps"]) for h in HEADS for seed in SEEDS}
    long_runs = {seed: long_run(seed) for seed in SEEDS}
    return {"config": dict(CONFIG), "heads": HEADS, "seeds": SEEDS, "batch_seed": BATCH_SEED,
            "check": (CHECK_N, CHECK_SEED), "runs": runs, "long_steps": LONG_STEPS,
            "long_runs": long_runs}


def main() -> None:
    save(train_all(), OUT)


if __name__ == "__main__":
    main()
