"""Train chapter 5's probe models (one multi-head attention layer) and save them.

Chapter 5 asks what heads learn. The task (``data.offset_copy_task``): sequences of 12 random
tokens over 16 symbols; output position ``i`` must name the token at offset -1 (the previous
one) and the token at offset +2. The model (``head_metrics.OffsetReader``): token embeddings
of width 32 plus the fixed sinusoidal position table (times 2), one multi-head self-attention
layer, a linear read-out, no residual connection.

For every seed of :data:`SEEDS` the script trains the model with ``h`` = 1, 2 and 4 heads, 300
steps each (24 models).
All three start from the same weights (the parameters have the same shapes whatever ``h``, and
each model is built after ``torch.manual_seed(seed)``) and see the same batches (seed
``BATCH_SEED + seed``): they differ only in how the 32 projected features are grouped into
heads. It also trains the one-head model of every seed for :data:`LONG_STEPS` steps (exercise 4;
these 8 runs are 16,000 of the 23,200 training steps of ``ch05_heads.pt``).

Saved in ``saved_data/ch05_heads.pt``, for each run: the loss of every step, the ``state_dict``
and ``check_losses``, the loss of each output on a fixed batch (``CHECK_N`` sequences drawn with
seed ``CHECK_SEED``). The notebook recomputes ``check_losses`` from the loaded weights, which ties
the weights to this run, and re-runs the first steps live against the saved curve. The file is
about 0.9 MB.

Saved in ``saved_data/ch05_side.json`` (a few kB): the CPU time (``time.process_time``, one
thread) of each group of runs, and a control: the 24 short runs again with the position table
unscaled (``position_scale=1``), with each run's check losses, each head's preferred offset on
the fixed batch and the first step at which the 10-step running mean of the loss falls below 0.1.

Run from the repository root (about 150 s of CPU time on one core, 40 s of it for the 24
models: 23,200 training steps in ``ch05_heads.pt`` and 7,200 in the control, about 5 ms a step;
``ch05_side.json`` records the CPU time of the run that wrote it)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/train_ch05.py

``--side-only`` trains everything again but leaves ``ch05_heads.pt`` as it is and writes only
``ch05_side.json``, with the largest difference between the re-runs' check losses and the saved
ones (``side_only_check_loss_gap``). Training does not reproduce the saved weights bit for bit
on every CPU: PyTorch's vector kernels (AVX2, AVX-512, ...) round differently in the last bits,
and 300 Adam steps amplify that (on an AVX2-only machine the losses part from the second step
on, and a one-head run ends about 1e-3 nats away). The chapter re-runs the first 40 steps live
and compares them with the saved curve within a relative 1e-4.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from saved_results import save  # tools/saved_results.py, next to this script

import attention_src as att
from attention_src import data, head_metrics
from attention_src.saved import SAVED_DIR, record_checksum

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
OUT = SAVED_DIR / "ch05_heads.pt"
SIDE = OUT.with_name("ch05_side.json")
#: The control's position scale (the chapter's models use OffsetReader's default, 2).
CONTROL_SCALE = 1.0
#: A run counts as solved at the first step where the 10-step running mean is below this.
SOLVED, WINDOW = 0.1, 10


def build(num_heads: int, seed: int, **kwargs) -> head_metrics.OffsetReader:
    """The probe model with ``num_heads`` heads, its weights drawn after seeding ``seed``;
    ``kwargs`` go to ``OffsetReader`` (the control passes ``position_scale``)."""
    cfg = CONFIG
    torch.manual_seed(seed)
    return head_metrics.OffsetReader(cfg["vocab_size"], cfg["length"], cfg["embed_dim"],
                                     num_heads, num_outputs=len(cfg["offsets"]), **kwargs)


def check_batch() -> tuple[torch.Tensor, torch.Tensor]:
    cfg = CONFIG
    return data.offset_copy_task(CHECK_N, cfg["length"], cfg["vocab_size"], cfg["offsets"],
                                 seed=CHECK_SEED)


def run(num_heads: int, seed: int, steps: int, **kwargs) -> dict:
    cfg = CONFIG
    model = build(num_heads, seed, **kwargs)
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


def solved_at(losses: list[float] | torch.Tensor) -> int | None:
    """First step (counted from 1) at which the running mean of :data:`WINDOW` losses ends
    below :data:`SOLVED`, or ``None``; the chapter applies the same rule to its curves."""
    smooth = torch.as_tensor(losses, dtype=torch.float64).unfold(0, WINDOW, 1).mean(-1)
    below = (smooth < SOLVED).nonzero()
    return int(below[0]) + WINDOW if len(below) else None


def control_run(num_heads: int, seed: int) -> dict:
    """A short run with the position table unscaled; kept: what the control reports."""
    cfg = CONFIG
    model = build(num_heads, seed, position_scale=CONTROL_SCALE)
    losses = head_metrics.train_offset_reader(
        model, cfg["offsets"], cfg["steps"], batch_size=cfg["batch_size"], lr=cfg["lr"],
        seed=BATCH_SEED + seed)
    tokens, targets = check_batch()
    with torch.no_grad():
        logits, weights = model(tokens)  # weights: (N, h, L, L)
    check = head_metrics.offset_losses(logits, targets)
    prefs = head_metrics.preferred_offset(weights.mean(0)).tolist()
    print(f"control h={num_heads} seed {seed}: check losses "
          f"{[round(float(c), 4) for c in check]}, preferred offsets {prefs}")
    return {"heads": num_heads, "seed": seed, "check_losses": [float(c) for c in check],
            "preferred_offsets": prefs, "solved_at": solved_at(losses)}


def timed(fn, *args):
    """``fn(*args)`` and the CPU time it took, in seconds (one thread: process time)."""
    start = time.process_time()
    result = fn(*args)
    return result, time.process_time() - start


def train_all() -> tuple[dict, dict]:
    """Everything the chapter loads: the saved models and the side results."""
    torch.set_num_threads(1)
    att.set_seed(0)
    cpu = {}
    runs, cpu["short_runs"] = timed(lambda: {
        (h, seed): run(h, seed, CONFIG["steps"]) for h in HEADS for seed in SEEDS})
    long_runs, cpu["long_runs"] = timed(lambda: {seed: long_run(seed) for seed in SEEDS})
    control, cpu["control_runs"] = timed(lambda: [
        control_run(h, seed) for h in HEADS for seed in SEEDS])
    cpu["total"] = sum(cpu.values())
    saved = {"config": dict(CONFIG), "heads": HEADS, "seeds": SEEDS, "batch_seed": BATCH_SEED,
             "check": (CHECK_N, CHECK_SEED), "runs": runs, "long_steps": LONG_STEPS,
             "long_runs": long_runs}
    side = {
        "cpu_seconds": {k: round(v, 1) for k, v in cpu.items()},
        "training_steps": {"short_runs": len(runs) * CONFIG["steps"],
                           "long_runs": len(long_runs) * LONG_STEPS,
                           "control_runs": len(control) * CONFIG["steps"]},
        "torch": torch.__version__,
        "check_losses": {f"{h},{s}": [float(c) for c in r["check_losses"]]
                         for (h, s), r in runs.items()},
        "long_check_losses": {str(s): [float(c) for c in r["check_losses"]]
                              for s, r in long_runs.items()},
        "control": {"position_scale": CONTROL_SCALE, "runs": control},
    }
    return saved, side


def check_loss_gap(saved: dict, old: dict) -> float:
    """The largest difference between the check losses of the runs in ``saved`` and ``old``."""
    pairs = [(saved["runs"][k], old["runs"][k]) for k in old["runs"]]
    pairs += [(saved["long_runs"][k], old["long_runs"][k]) for k in old["long_runs"]]
    return max(float((new["check_losses"] - prev["check_losses"]).abs().max())
               for new, prev in pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--side-only", action="store_true",
                        help="keep ch05_heads.pt; check the runs reproduce it, write the side file")
    args = parser.parse_args()
    saved, side = train_all()
    if args.side_only:
        gap = check_loss_gap(saved, torch.load(OUT))
        side["side_only_check_loss_gap"] = gap
        print(f"{OUT.name} kept; largest check-loss difference of the re-runs: {gap:.2e}")
    else:
        save(saved, OUT)
    SIDE.write_text(json.dumps(side, indent=1) + "\n")
    record_checksum(SIDE)
    print(f"wrote {SIDE.name}: CPU seconds {side['cpu_seconds']}")


if __name__ == "__main__":
    main()
