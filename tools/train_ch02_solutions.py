"""Train chapter 2's date-normalisation models for the exercise solutions and save them.

Exercise 5 of chapter 2 evaluates every scoring function (additive, dot, scaled dot, bilinear)
on a date format that only the held-out data contains, and exercise 4 compares a unidirectional
encoder with the chapter's bidirectional additive model. The chapter trains the four models of
exercise 5 but does not save them, and one run of exercise 4 proves little (its alignment
changes from seed to seed), so this script trains, exactly as the chapter does (same data, same
model sizes, same training settings):

* the chapter's four models of seed 0, one per score (exercise 5);
* for exercise 4, for every seed ``k`` of :data:`SEEDS`, an additive model with a two-way
  encoder and one with a one-way encoder, both built after the chapter's seed scheme (encoder,
  score and decoder after ``torch.manual_seed`` of ``3k``, ``3k + 1`` and ``3k + 2``; batches
  drawn with seed ``k``). The two-way model of seed 0 is the additive model above, and the
  two-way models are the additive runs of the chapter's bake-off.

It saves ``saved_data/ch02_solutions.pt``: every ``state_dict``, its per-step losses, the
settings and the source vocabulary. The notebook loads the file, evaluates every model live,
and re-runs the first training steps of some models live to check that the saved curves are
what this code produces.

Next to each ``state_dict`` the script stores ``check_loss``: the final weights' mean token
cross-entropy (``training.teacher_forced_loss``, eval mode) on a fixed batch, the first
``CHECK_PAIRS`` training pairs. The notebook recomputes it from the loaded weights, which ties
the saved weights to this run, and compares it with the end of the saved loss curve. Computing
it does not change the weights: re-running the script reproduces them bit for bit.

The saved file was made with PyTorch's AVX2 kernels (``ATEN_CPU_CAPABILITY=avx2``), as
``saved_data/ch02_bakeoff.pt`` was; make it that way again. On a processor with AVX-512,
PyTorch picks other kernels by default, whose results differ in the last bits, and over 120
steps of training such differences grow (the loss curves agree to about 1e-5 in the first
steps, the weights less closely at the end). With ``ATEN_CPU_CAPABILITY=avx2`` a re-run
reproduces the file's weights and curves bit for bit.

Run from the repository root (about two minutes on one CPU core)::

    OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2 .venv/bin/python tools/train_ch02_solutions.py
"""

from __future__ import annotations

import time

import torch
from saved_results import save  # tools/saved_results.py, next to this script

from attention_src import data, scoring, seq2seq, training
from attention_src.saved import SAVED_DIR

#: The chapter's settings; the notebook checks them when it loads the file.
CONFIG = {
    "n_train": 4000, "train_seed": 1, "embed_dim": 16, "hidden_dim": 32, "additive_width": 32,
    "steps": 120, "batch_size": 64, "lr": 0.01, "clip": 1.0, "seed": 0,
}
SCORES = ("additive", "dot", "scaled dot", "bilinear")
#: Exercise 4: seed k builds encoder, score and decoder after seeds (3k, 3k + 1, 3k + 2) and
#: draws its batches with seed k, as in the chapter's bake-off; seed 0 is the chapter's run.
SEEDS = (0, 1, 2, 3, 4)
#: ``check_loss`` is computed on the first ``CHECK_PAIRS`` training pairs.
CHECK_PAIRS = 512
OUT = SAVED_DIR / "ch02_solutions.pt"


def model_seeds(seed: int) -> tuple[int, int, int]:
    """Seeds of encoder, score and decoder for the run with seed ``seed``."""
    return (3 * seed, 3 * seed + 1, 3 * seed + 2)


def build_model(name: str, src_vocab_size: int, tgt_vocab_size: int, seed: int = 0,
                bidirectional: bool = True) -> seq2seq.Seq2Seq:
    """The chapter's ``build_model`` (``seq2seq.build_scored_seq2seq``, one seed per part).

    With ``bidirectional=False`` (exercise 4) the annotations, the keys, are ``hidden_dim``
    wide; the decoder state, the query, stays ``2 * hidden_dim`` wide.
    """
    cfg = CONFIG
    d_q = 2 * cfg["hidden_dim"]  # the decoder state: the query
    d_k = d_q if bidirectional else cfg["hidden_dim"]  # the annotations: keys and values
    return seq2seq.build_scored_seq2seq(
        src_vocab_size, tgt_vocab_size, cfg["embed_dim"], cfg["hidden_dim"],
        lambda: scoring.score_by_name(name, d_q, d_k, cfg["additive_width"]),
        bidirectional=bidirectional, decoder_hidden_dim=d_q, seeds=model_seeds(seed),
    )


def train(model: seq2seq.Seq2Seq, train_set: data.SequencePairs, steps: int,
          seed: int = 0) -> list[float]:
    cfg = CONFIG
    return training.train_seq2seq(model, train_set, steps=steps, batch_size=cfg["batch_size"],
                                  lr=cfg["lr"], clip=cfg["clip"], seed=seed)


def train_one(model: seq2seq.Seq2Seq, train_set: data.SequencePairs,
              check_set: data.SequencePairs, label: str, seed: int = 0) -> dict:
    """Train with the chapter's settings; the state_dict, the losses and the check loss."""
    start = time.perf_counter()
    losses = train(model, train_set, CONFIG["steps"], seed=seed)
    check = training.teacher_forced_loss(model, check_set)
    print(f"{label:22s} {CONFIG['steps']} steps in {time.perf_counter() - start:.1f} s, "
          f"last loss {losses[-1]:.4f}, loss on the check batch {check:.6f}")
    return {"state_dict": model.state_dict(),
            "losses": torch.tensor(losses, dtype=torch.float32), "check_loss": check}


def train_all() -> dict:
    torch.set_num_threads(1)
    cfg = CONFIG
    train_pairs = data.date_pairs(cfg["n_train"], seed=cfg["train_seed"])
    src_vocab = data.Vocab(ch for source, _ in train_pairs for ch in source)
    tgt_vocab = data.Vocab("0123456789-")
    train_set = data.encode_pairs(train_pairs, src_vocab, tgt_vocab)
    check_set = train_set.subset(slice(0, CHECK_PAIRS))
    n_src, n_tgt = len(src_vocab), len(tgt_vocab)
    models = {name: train_one(build_model(name, n_src, n_tgt), train_set, check_set, name)
              for name in SCORES}
    # Exercise 4: two-way and one-way additive models, one pair per seed
    directions: dict = {"two-way": {}, "one-way": {}}
    for seed in SEEDS:
        for label, bidirectional in (("two-way", True), ("one-way", False)):
            if bidirectional and seed == 0:  # the chapter's additive model, trained above
                directions[label][seed] = models["additive"]
                continue
            model = build_model("additive", n_src, n_tgt, seed, bidirectional)
            directions[label][seed] = train_one(model, train_set, check_set,
                                                f"{label} seed {seed}", seed=seed)
    return {"config": dict(cfg), "src_itos": src_vocab.itos, "check_pairs": CHECK_PAIRS,
            "models": models, "seeds": SEEDS, "directions": directions}


def main() -> None:
    save(train_all(), OUT)


if __name__ == "__main__":
    main()
