"""Train chapter 2's four date-normalisation models for the exercise solutions and save them.

Exercise 5 of chapter 2 evaluates every scoring function (additive, dot, scaled dot, bilinear)
on a date format that only the held-out data contains, and exercise 4 compares a unidirectional
encoder with the chapter's bidirectional additive model. The chapter trains these four models
but does not save them, and training all four takes longer than the solutions notebook's time
budget, so this script trains them exactly as the chapter does (same data, same seeds, same
model sizes, same training settings) and saves ``book/data/ch02_solutions.pt``: four
``state_dict``s, their per-step losses, the settings and the source vocabulary. The notebook
loads the file, evaluates every model live, and re-runs the first training steps of each model
live to check that the saved curves are what this code produces.

Next to each ``state_dict`` the script stores ``check_loss``: the final weights' mean token
cross-entropy (``training.teacher_forced_loss``, eval mode) on a fixed batch, the first
``CHECK_PAIRS`` training pairs. The notebook recomputes it from the loaded weights, which ties
the saved weights to this run, and compares it with the end of the saved loss curve. Computing
it does not change the weights: re-running the script reproduces them bit for bit.

The saved file was made with PyTorch's AVX2 kernels. On a processor with AVX-512, PyTorch
picks other kernels by default, whose results differ in the last bits, and over 120 steps of
training such differences grow (the loss curves agree to about 1e-5 in the first steps, the
weights less closely at the end). ``ATEN_CPU_CAPABILITY=avx2`` selects the AVX2 kernels, and
with it a re-run reproduces the file's weights and curves bit for bit.

Run from the repository root (about 20 seconds on one CPU core)::

    OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2 .venv/bin/python tools/train_ch02_solutions.py
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from saved_results import save  # tools/saved_results.py, next to this script

import attention_src as att
from attention_src import data, scoring, seq2seq, training

#: The chapter's settings; the notebook checks them when it loads the file.
CONFIG = {
    "n_train": 4000, "train_seed": 1, "embed_dim": 16, "hidden_dim": 32, "additive_width": 32,
    "steps": 120, "batch_size": 64, "lr": 0.01, "clip": 1.0, "seed": 0,
}
SCORES = ("additive", "dot", "scaled dot", "bilinear")
#: ``check_loss`` is computed on the first ``CHECK_PAIRS`` training pairs.
CHECK_PAIRS = 512
OUT = Path(__file__).resolve().parent.parent / "book" / "data" / "ch02_solutions.pt"


def make_score(name: str, d: int, d_a: int) -> att.Score:
    """A fresh scoring function for queries and keys of width ``d`` (``d_a``: additive)."""
    return scoring.score_by_name(name, d, d, d_a)


def build_model(name: str, src_vocab_size: int, tgt_vocab_size: int) -> seq2seq.Seq2Seq:
    """The chapter's ``build_model`` (``seq2seq.build_scored_seq2seq``, one seed per part)."""
    cfg = CONFIG
    d = 2 * cfg["hidden_dim"]  # bidirectional annotations: keys, values and queries
    return seq2seq.build_scored_seq2seq(
        src_vocab_size, tgt_vocab_size, cfg["embed_dim"], cfg["hidden_dim"],
        lambda: make_score(name, d, cfg["additive_width"]),
    )


def train(model: seq2seq.Seq2Seq, train_set: data.SequencePairs, steps: int) -> list[float]:
    cfg = CONFIG
    return training.train_seq2seq(model, train_set, steps=steps, batch_size=cfg["batch_size"],
                                  lr=cfg["lr"], clip=cfg["clip"], seed=cfg["seed"])


def train_all() -> dict:
    torch.set_num_threads(1)
    cfg = CONFIG
    train_pairs = data.date_pairs(cfg["n_train"], seed=cfg["train_seed"])
    src_vocab = data.Vocab(ch for source, _ in train_pairs for ch in source)
    tgt_vocab = data.Vocab("0123456789-")
    train_set = data.encode_pairs(train_pairs, src_vocab, tgt_vocab)
    check_set = train_set.subset(slice(0, CHECK_PAIRS))
    models = {}
    for name in SCORES:
        model = build_model(name, len(src_vocab), len(tgt_vocab))
        start = time.perf_counter()
        losses = train(model, train_set, cfg["steps"])
        check = training.teacher_forced_loss(model, check_set)
        print(f"{name:10s} {cfg['steps']} steps in {time.perf_counter() - start:.1f} s, "
              f"last loss {losses[-1]:.4f}, loss on the check batch {check:.6f}")
        models[name] = {"state_dict": model.state_dict(),
                        "losses": torch.tensor(losses, dtype=torch.float32),
                        "check_loss": check}
    return {"config": dict(cfg), "src_itos": src_vocab.itos, "check_pairs": CHECK_PAIRS,
            "models": models}


def main() -> None:
    save(train_all(), OUT)


if __name__ == "__main__":
    main()
