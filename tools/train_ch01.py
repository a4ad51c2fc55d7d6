"""Train chapter 1's three encoder-decoders and save their weights and loss curves.

Chapter 1 compares, on the string-reversal task, a GRU encoder-decoder whose decoder sees one
fixed context vector with one whose decoder attends (400 training steps each), plus the
no-attention model trained ten times longer (4,000 steps), to show that its lag is not just
slower learning. Training all three takes minutes on a CPU, more than a chapter's time budget,
so this script trains them and saves ``saved_data/ch01_models.pt``: three ``state_dict``s, their
per-step losses and the settings. The notebook loads the file, re-evaluates every model live on
the held-out test set, and re-runs the first training steps live to check that the saved curves
are what this code produces.

Next to each ``state_dict`` the script stores ``check_loss``: the final weights' mean token
cross-entropy (``training.teacher_forced_loss``, eval mode) on a fixed batch, the first
``CHECK_PAIRS`` training pairs. The notebook recomputes it from the loaded weights, which ties
the saved weights to this run, and compares it with the end of the saved loss curve.

The same three runs are repeated with every seed in ``REPLICATE_SEEDS`` (another
initialisation and another batch order, same data), saved under ``"replicates"`` in the same
form; the notebook evaluates them live and checks that its claims hold for them too. The file
is about 0.7 MB.

Run from the repository root (four to six minutes on one CPU core)::

    OMP_NUM_THREADS=1 .venv/bin/python tools/train_ch01.py
"""

from __future__ import annotations

import time

import torch
from saved_results import save  # tools/saved_results.py, next to this script

import attention_src as att
from attention_src import data, seq2seq, training
from attention_src.saved import SAVED_DIR

#: The notebook checks these settings when it loads the file.
CONFIG = {
    "num_symbols": 10, "min_len": 4, "max_len": 16, "n_train": 20000, "data_seed": 1,
    "embed_dim": 16, "hidden_dim": 32, "batch_size": 64, "lr": 0.01, "clip": 1.0, "seed": 0,
}
#: name -> (attention?, training steps)
RUNS = {
    "without attention": (False, 400),
    "with attention": (True, 400),
    "without attention, 10x steps": (False, 4000),
}
#: Seeds (model initialisation and batch order) of the replicate runs.
REPLICATE_SEEDS = (1,)
#: ``check_loss`` is computed on the first ``CHECK_PAIRS`` training pairs.
CHECK_PAIRS = 512
OUT = SAVED_DIR / "ch01_models.pt"


def train_runs(train: data.SequencePairs, vocab_size: int, seed: int) -> dict:
    """Train every model of :data:`RUNS` with ``seed``; return name -> saved entry."""
    c = CONFIG
    entries = {}
    for name, (attention, steps) in RUNS.items():
        model = seq2seq.build_gru_seq2seq(vocab_size, c["embed_dim"], c["hidden_dim"],
                                          attention=attention, seed=seed)
        start = time.perf_counter()
        losses = training.train_seq2seq(model, train, steps, batch_size=c["batch_size"],
                                        lr=c["lr"], clip=c["clip"], seed=seed,
                                        log_every=steps // 4)
        check = training.teacher_forced_loss(model, train.subset(slice(0, CHECK_PAIRS)))
        print(f"seed {seed}, {name}: {steps} steps in {time.perf_counter() - start:.0f} s, "
              f"loss on the check batch {check:.6f}")
        entries[name] = {"attention": attention, "steps": steps,
                         "state_dict": model.state_dict(),
                         "losses": torch.tensor(losses, dtype=torch.float32),
                         "check_loss": check}
    return entries


def train_all() -> dict:
    """Train every model of :data:`RUNS`, then the replicates; return what :func:`main` saves."""
    torch.set_num_threads(1)
    att.set_seed(0)
    c = CONFIG
    vocab = data.Vocab([chr(ord("a") + i) for i in range(c["num_symbols"])])
    pairs = data.reverse_task(c["n_train"], c["min_len"], c["max_len"], c["num_symbols"],
                              seed=c["data_seed"])
    train = data.encode_pairs(pairs, vocab, vocab)
    saved = {"config": dict(c), "check_pairs": CHECK_PAIRS,
             "models": train_runs(train, len(vocab), c["seed"]), "replicates": {}}
    for seed in REPLICATE_SEEDS:
        saved["replicates"][seed] = train_runs(train, len(vocab), seed)
    return saved


def main() -> None:
    save(train_all(), OUT)


if __name__ == "__main__":
    main()
