"""Train chapter 6's induction-head experiment over several seeds and save what the chapter shows.

A two-layer, attention-only causal Transformer (``language_model.AttentionOnlyTransformer``:
width 64, 4 heads per layer, vocabulary 32, sequences of 32 tokens) learns next-token
prediction on random tokens in which a segment of 8 tokens repeats at an offset that varies
from sequence to sequence (``data.repeated_segments``). Adam, learning rate 1e-3, batches of
64 fresh sequences; the batch of step ``t`` of seed ``k`` is ``repeated_segments(64,
seed=k * 1_000_000 + t + 1)``, and seed ``k`` initialises the model after
``torch.manual_seed(k)``. Seeds 0 to 5: which layer-1 heads a seed builds its circuit from
(previous-token, duplicate-token or both) varies with the seed, so the chapter needs several.
``tools/train_ch06_seeds.py`` imports this script's settings and trains seeds 6 to 13 for
twice as long.

Every ``EVAL_EVERY`` steps the script measures, on a fixed evaluation batch of 256 sequences
(seed ``EVAL_SEED``): the mean loss on the predictable tokens of the second copy and on all
other tokens, and for every head of both layers its previous-token, prefix-matching and
duplicate-token scores. It saves, per seed (``slim``, to keep the file under 1 MB): the
final weights as one float32 vector, the loss of the first ``LIVE_STEPS`` training steps,
the loss curves and the score curves of the layer the notebook plots, and ``check_loss``:
the final weights' mean next-token loss on the evaluation batch, which the notebook
recomputes from the loaded weights. Each seed took 1 to 2 minutes on one core of the busy
2-core reference machine, over the notebook's time budget, so the notebook loads
``saved_data/ch06_induction.pt`` (about 980 kB) and re-runs the first 100 steps of seed 0
live against the saved losses.

Kernels: the file was made with PyTorch's default kernels on an AVX-512 machine, where the
notebook's live steps reproduce the saved losses bit for bit; with
``ATEN_CPU_CAPABILITY=avx2`` they differ in the last bits (up to 7e-7 over the 100 steps).

Run from the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python tools/train_ch06.py
"""

from __future__ import annotations

import time

import torch
from saved_results import save  # tools/saved_results.py, next to this script

from attention_src import data
from attention_src.language_model import (
    AttentionOnlyTransformer,
    duplicate_token_score,
    next_token_losses,
    prefix_matching_score,
    previous_token_score,
    train_language_model,
)
from attention_src.saved import SAVED_DIR

#: The chapter's settings; the notebook checks them when it loads the file.
CONFIG = {
    "vocab_size": 32, "length": 32, "segment_len": 8, "embed_dim": 64, "num_heads": 4,
    "num_layers": 2, "lr": 1e-3, "batch_size": 64, "steps": 3000,
}
SEEDS = (0, 1, 2, 3, 4, 5)
EVAL_EVERY = 50
EVAL_SEED = 1_000_000_000
EVAL_SIZE = 256
#: Steps whose training loss the file keeps, for the notebook's live re-run.
LIVE_STEPS = 100
OUT = SAVED_DIR / "ch06_induction.pt"


def build_model(seed: int) -> AttentionOnlyTransformer:
    """The chapter's model, initialised after ``torch.manual_seed(seed)``."""
    cfg = CONFIG
    torch.manual_seed(seed)
    return AttentionOnlyTransformer(cfg["vocab_size"], cfg["embed_dim"], cfg["num_heads"],
                                    cfg["num_layers"], cfg["length"])


def batch_fn(seed: int):
    """``batches(step)`` of the run with seed ``seed``: fresh sequences at every step."""
    cfg = CONFIG

    def batches(step: int) -> torch.Tensor:
        return data.repeated_segments(cfg["batch_size"], cfg["length"], cfg["vocab_size"],
                                      cfg["segment_len"], seed=seed * 1_000_000 + step + 1).tokens
    return batches


def eval_batch() -> data.RepeatedSegments:
    cfg = CONFIG
    return data.repeated_segments(EVAL_SIZE, cfg["length"], cfg["vocab_size"],
                                  cfg["segment_len"], seed=EVAL_SEED)


def measure(batch: data.RepeatedSegments, logits: torch.Tensor,
            weights: list[torch.Tensor]) -> dict:
    """Losses on repeated and other tokens, and the three scores of every head."""
    losses = next_token_losses(logits, batch.tokens)  # (B, L - 1): loss on tokens 1 .. L - 1
    repeated = batch.repeated[:, 1:]  # (B, L - 1)
    per_head = [w.transpose(0, 1) for w in weights]  # each (h, B, L, L)
    return {
        "loss_repeated": float(losses[repeated].mean()),
        "loss_other": float(losses[~repeated].mean()),
        "previous_token": torch.stack([previous_token_score(w) for w in per_head]),  # (2, h)
        "prefix_matching": torch.stack([prefix_matching_score(w, batch.tokens)
                                        for w in per_head]),
        "duplicate_token": torch.stack([duplicate_token_score(w, batch.tokens)
                                        for w in per_head]),
    }


def train_seed(seed: int) -> dict:
    batch = eval_batch()
    model = build_model(seed)
    result = train_language_model(
        model, batch_fn(seed), CONFIG["steps"], lr=CONFIG["lr"], eval_tokens=batch.tokens,
        eval_every=EVAL_EVERY, on_eval=lambda step, logits, w: measure(batch, logits, w))
    evals = result["evals"]
    curves = {key: torch.tensor([e[key] for _, e in evals]) if key.startswith("loss")
              else torch.stack([e[key] for _, e in evals])  # (n_evals, 2, h)
              for key in evals[0][1]}
    with torch.no_grad():
        check_loss = float(next_token_losses(model(batch.tokens), batch.tokens).mean())
    return {"losses": result["losses"].float(), "eval_steps": torch.tensor([s for s, _ in evals]),
            "curves": curves, "state_dict": {k: v.float() for k, v in
                                             model.state_dict().items()},
            "check_loss": check_loss}


def slim(run: dict) -> dict:
    """What the notebook needs of ``train_seed``'s result, to keep the file under 1 MB.

    The weights become one float32 vector, in the order of ``model.parameters()``
    (``torch.nn.utils.vector_to_parameters`` restores them); the training losses keep their
    first ``LIVE_STEPS`` steps; the score curves keep the layer the notebook plots (layer 1
    for the previous- and duplicate-token scores, layer 2 for prefix matching), each
    ``(n_evals, h)``.
    """
    model = build_model(0)
    model.load_state_dict(run["state_dict"])
    c = run["curves"]
    return {
        "losses": run["losses"][:LIVE_STEPS].clone(),
        "weights": torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone(),
        "curves": {"loss_repeated": c["loss_repeated"], "loss_other": c["loss_other"],
                   "previous_token_layer1": c["previous_token"][:, 0].clone(),
                   "duplicate_token_layer1": c["duplicate_token"][:, 0].clone(),
                   "prefix_matching_layer2": c["prefix_matching"][:, 1].clone()},
        "check_loss": run["check_loss"],
    }


def main() -> None:
    torch.set_num_threads(1)
    runs = {}
    eval_steps = None
    for seed in SEEDS:
        start = time.perf_counter()
        run = train_seed(seed)
        c = run["curves"]
        print(f"seed {seed}: {time.perf_counter() - start:5.1f} s  loss repeated "
              f"{float(c['loss_repeated'][-1]):.3f}  other {float(c['loss_other'][-1]):.3f}  "
              f"max prev-token (layer 1) {float(c['previous_token'][-1, 0].max()):.2f}  "
              f"max prefix-matching (layer 2) {float(c['prefix_matching'][-1, 1].max()):.2f}",
              flush=True)
        eval_steps = run["eval_steps"]
        runs[seed] = slim(run)
    save({"config": dict(CONFIG), "seeds": SEEDS, "eval_every": EVAL_EVERY,
          "eval_seed": EVAL_SEED, "eval_size": EVAL_SIZE, "eval_steps": eval_steps,
          "live_steps": LIVE_STEPS, "runs": runs}, OUT)


if __name__ == "__main__":
    main()
