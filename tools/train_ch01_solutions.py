"""Train the models of the worked solutions to chapter 1's exercises 2 and 3, and save them.

* Exercise 2 (a bigger bottleneck): the model without attention on the reversal task, with
  ``hidden_dim=64`` instead of 32, so that its context vector ``C`` has 128 numbers.
* Exercise 3 (copy instead of reverse): the models without and with attention, at the
  chapter's sizes, trained on the copy task (target = source) built from the chapter's
  training strings.

Every run uses chapter 1's settings (``tools/train_ch01.py``: data, batch size, learning rate,
clipping, 400 steps). The copy-task runs are repeated with every seed in ``REPLICATE_SEEDS``
(another initialisation and batch order, same data) and saved in the same form, so that the
notebook can check its claims on a second seed. Training takes about a minute on one CPU core,
more than the solutions notebook's time budget allows, so the notebook loads
``saved_data/ch01_solutions.pt`` (about 0.8 MB), evaluates every model live, and re-runs the
first training steps live to check that the saved loss curves are what this code produces.

Next to each ``state_dict`` the script stores ``check_loss``: the final weights' mean token
cross-entropy (``training.teacher_forced_loss``, eval mode) on a fixed batch, the first
``CHECK_PAIRS`` pairs of the model's own training set. The notebook recomputes it from the
loaded weights, which ties the saved weights to this run, and compares it with the end of the
saved loss curve.

Run from the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python tools/train_ch01_solutions.py
"""

from __future__ import annotations

import time

import torch
from saved_results import save  # tools/saved_results.py, next to this script

import attention_src as att
from attention_src import data, seq2seq, training
from attention_src.saved import SAVED_DIR

#: The notebook checks these settings when it loads the file (chapter 1's, see train_ch01.py).
CONFIG = {
    "num_symbols": 10, "min_len": 4, "max_len": 16, "n_train": 20000, "data_seed": 1,
    "embed_dim": 16, "batch_size": 64, "lr": 0.01, "clip": 1.0, "seed": 0, "steps": 400,
}
#: name -> (task, attention?, hidden_dim)
RUNS = {
    "reverse, without attention, hidden 64": ("reverse", False, 64),
    "copy, without attention": ("copy", False, 32),
    "copy, with attention": ("copy", True, 32),
}
#: Seeds (model initialisation and batch order) of the replicate runs of the copy task.
REPLICATE_SEEDS = (1,)
#: ``check_loss`` is computed on the first ``CHECK_PAIRS`` pairs of the run's training set.
CHECK_PAIRS = 512
OUT = SAVED_DIR / "ch01_solutions.pt"


def training_sets() -> tuple[data.Vocab, dict[str, data.SequencePairs]]:
    """The vocabulary and the encoded training pairs of both tasks (the chapter's strings)."""
    c = CONFIG
    vocab = data.Vocab([chr(ord("a") + i) for i in range(c["num_symbols"])])
    reverse = data.reverse_task(c["n_train"], c["min_len"], c["max_len"], c["num_symbols"],
                                seed=c["data_seed"])
    copy = [(src, list(src)) for src, _ in reverse]  # the copy task: target = source
    return vocab, {"reverse": data.encode_pairs(reverse, vocab, vocab),
                   "copy": data.encode_pairs(copy, vocab, vocab)}


def train_run(name: str, vocab_size: int, train: dict, seed: int) -> dict:
    """Train run ``name`` of :data:`RUNS` with ``seed``; return its saved entry."""
    c = CONFIG
    task, attention, hidden_dim = RUNS[name]
    model = seq2seq.build_gru_seq2seq(vocab_size, c["embed_dim"], hidden_dim,
                                      attention=attention, seed=seed)
    start = time.perf_counter()
    losses = training.train_seq2seq(model, train[task], c["steps"], batch_size=c["batch_size"],
                                    lr=c["lr"], clip=c["clip"], seed=seed,
                                    log_every=c["steps"] // 4)
    check = training.teacher_forced_loss(model, train[task].subset(slice(0, CHECK_PAIRS)))
    print(f"seed {seed}, {name}: {c['steps']} steps in {time.perf_counter() - start:.0f} s, "
          f"loss on the check batch {check:.6f}")
    return {"task": task, "attention": attention, "hidden_dim": hidden_dim,
            "steps": c["steps"], "state_dict": model.state_dict(),
            "losses": torch.tensor(losses, dtype=torch.float32), "check_loss": check}


def train_all() -> dict:
    """Train every run of :data:`RUNS`, then the copy-task replicates; return what is saved."""
    torch.set_num_threads(1)
    att.set_seed(0)
    vocab, train = training_sets()
    models = {name: train_run(name, len(vocab), train, CONFIG["seed"]) for name in RUNS}
    replicates = {}
    for seed in REPLICATE_SEEDS:
        replicates[seed] = {}
        for name, (task, _, _) in RUNS.items():
            if task == "copy":
                replicates[seed][name] = train_run(name, len(vocab), train, seed)
    return {"config": dict(CONFIG), "check_pairs": CHECK_PAIRS, "models": models,
            "replicates": replicates}


def main() -> None:
    save(train_all(), OUT)


if __name__ == "__main__":
    main()
