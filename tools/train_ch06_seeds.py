"""Train chapter 6's induction experiment on eight more seeds, for twice as long, and summarise.

``tools/train_ch06.py`` trains seeds 0 to 5 for 3,000 steps and saves their weights. This
script trains seeds 6 to 13 with exactly the same model, batches, optimiser and evaluation
(it imports them from ``train_ch06``), but for 6,000 steps, and keeps the weights at two
budgets: after 3,000 steps (the chapter's budget; the same weights a 3,000-step run ends
with, since a step's batch depends only on the seed and the step and Adam has no schedule)
and after 6,000. For each seed and budget it measures, on the chapter's evaluation batch
(256 sequences, seed ``EVAL_SEED``), with the package's functions:

* the loss on the repeated tokens and on the others (per-sequence means), the three head
  scores of every head of both layers, and the step of the phase change (the first
  evaluation, every 50 steps, at which the repeated tokens' loss is 1 nat below the rest);
* for each layer-1 head and each input of layer 2 (queries, keys, values), the rise in the
  repeated tokens' loss when the head is removed from that input alone
  (``language_model.path_ablation_rises``), mean and standard error over sequences;
* for each layer-2 head, the share of tokens whose own logit is the largest in the head's
  OV circuit and the mean rank of the own logit (``own_logit_ranks`` of ``ov_circuits``),
  the same share for the four heads' summed circuit, and the eigenvalue score
  (``ov_copying_score``);
* the repeated tokens' loss with all layer-2 heads off and with only one of them on
  (``head_ablation_losses``).

A standard error shrinks with the number of sequences, so a bar of "so many standard errors"
decides borderline heads differently on different batches. The path ablation is therefore
also run on a second, larger batch of ``BIG_SIZE`` (2,048) fresh sequences (seed
``BIG_SEED``), for these seeds at both budgets and for seeds 0 to 5 (their 3,000-step
weights, loaded from ``saved_data/ch06_induction.pt``): the mean rise and its standard error
over the 2,048 sequences, the mean over each block of ``BLOCK`` (256) sequences, to show how
much a 256-sequence batch moves it, and the layer-1 previous- and duplicate-token scores on
the same batch.

It saves ``saved_data/ch06_seeds.pt`` (about 260 kB): per seed, the loss curves every 50
steps to step 6,000, the summaries at both budgets and ``check_loss`` (the 3,000-step
weights' mean next-token loss on the evaluation batch); the path-ablation results on the
large batch (``"big"``); and the 3,000-step weights of seed ``SHOW_SEED`` (8), from which
the notebook recomputes that seed's summary live.

Each seed took about 3 minutes of CPU time on one core of the 2-core reference machine
(AVX2 kernels, no AVX-512: a run on another processor may differ in the last bits of the
losses and, through the training's sensitivity near the phase change, in later steps); the
path ablation on the large batch about 5 s per model.
``--seeds`` trains a subset and ``--cache DIR`` keeps each trained run in ``DIR``, so two
processes can share the work and the summaries can be recomputed without training::

    OMP_NUM_THREADS=1 .venv/bin/python tools/train_ch06_seeds.py --cache /tmp/ch06 --seeds 6 7
    OMP_NUM_THREADS=1 .venv/bin/python tools/train_ch06_seeds.py --cache /tmp/ch06

Run from the repository root; without ``--seeds`` it trains (or loads) all eight seeds and
writes the file.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import train_ch06 as base  # tools/train_ch06.py, next to this script
from saved_results import save

from attention_src import data
from attention_src import language_model as lm
from attention_src.saved import SAVED_DIR
from attention_src.stats import mean_se

SEEDS = tuple(range(6, 14))
#: The chapter's budget, and the longer one.
BUDGETS = (3000, 6000)
#: The seed whose 3,000-step weights the file keeps, for the notebook's live check.
SHOW_SEED = 8
#: The large batch of the path ablation: its seed (no training or evaluation batch uses it),
#: its size, and the size of the blocks whose means are kept.
BIG_SEED = 2_000_000_000
BIG_SIZE = 2048
BLOCK = 256
OUT = SAVED_DIR / "ch06_seeds.pt"
FIRST = OUT.parent / "ch06_induction.pt"  # seeds 0 to 5, written by train_ch06.py


def train(seed: int) -> dict:
    """Train ``seed`` for ``max(BUDGETS)`` steps; the weights at every budget, the curves."""
    batch = base.eval_batch()
    model = base.build_model(seed)
    snapshots = {}

    def on_eval(step: int, logits: torch.Tensor, weights: list[torch.Tensor]) -> dict:
        if step in BUDGETS:  # evaluated before that step's update: after `step` updates
            snapshots[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return base.measure(batch, logits, weights)

    result = lm.train_language_model(
        model, base.batch_fn(seed), max(BUDGETS), lr=base.CONFIG["lr"],
        eval_tokens=batch.tokens, eval_every=base.EVAL_EVERY, on_eval=on_eval)
    evals = result["evals"]
    return {"weights": snapshots,
            "eval_steps": torch.tensor([s for s, _ in evals]),
            "loss_repeated": torch.tensor([e["loss_repeated"] for _, e in evals]),
            "loss_other": torch.tensor([e["loss_other"] for _, e in evals])}


def phase_step(eval_steps: torch.Tensor, loss_repeated: torch.Tensor,
               loss_other: torch.Tensor) -> int | None:
    """The first evaluation step at which the repeated loss is 1 nat below the rest."""
    below = torch.nonzero(loss_other - loss_repeated > 1.0)
    return int(eval_steps[int(below[0])]) if len(below) else None


def summarise(model: lm.AttentionOnlyTransformer, batch: data.RepeatedSegments) -> dict:
    """What the chapter reports about one trained model (see the module's docstring)."""
    tokens, targets = batch.tokens, batch.repeated[:, 1:]  # (B, L), (B, L - 1)
    model.eval()
    with torch.no_grad():
        logits, weights = model(tokens, return_weights=True)
    per_head = [w.transpose(0, 1) for w in weights]  # each (h, B, L, L)
    repeated = lm.sequence_losses(logits, tokens, targets).double()  # (B,)
    other = lm.sequence_losses(logits, tokens, ~targets).double()  # (B,)
    rise_mean, rise_se = mean_se(lm.path_ablation_rises(model, tokens, targets).double())
    ranks = lm.own_logit_ranks(lm.ov_circuits(model, 1))  # (h, V)
    joint = lm.own_logit_ranks(lm.ov_circuits(model, 1).sum(0))  # (V,)
    ablation = lm.head_ablation_losses(model, tokens, targets, 1)
    return {
        "loss_repeated": float(repeated.mean()), "loss_other": float(other.mean()),
        "gap_se": float(mean_se(other - repeated)[1]),
        "previous": torch.stack([lm.previous_token_score(w) for w in per_head]),  # (2, h)
        "duplicate": torch.stack([lm.duplicate_token_score(w, tokens) for w in per_head]),
        "prefix": torch.stack([lm.prefix_matching_score(w, tokens) for w in per_head]),
        "path_rise": rise_mean, "path_se": rise_se,  # (h, 3) each, paths q, k, v
        "own_max": (ranks == 1).double().mean(-1),  # (h,)
        "own_rank": ranks.double().mean(-1),  # (h,)
        "own_max_joint": float((joint == 1).double().mean()),
        "copying": lm.ov_copying_score(model, 1),  # (h,)
        "loss_intact": float(ablation["intact"].double().mean()),
        "loss_none": float(ablation["none"].double().mean()),  # every layer-2 head off
        "loss_only": ablation["only"].double().mean(-1),  # (h,): head r the only one on
    }


def big_batch() -> data.RepeatedSegments:
    cfg = base.CONFIG
    return data.repeated_segments(BIG_SIZE, cfg["length"], cfg["vocab_size"],
                                  cfg["segment_len"], seed=BIG_SEED)


def path_effects(model: lm.AttentionOnlyTransformer, batch: data.RepeatedSegments) -> dict:
    """Path-ablation rises of every layer-1 head on the large batch, and its layer-1 scores."""
    tokens, targets = batch.tokens, batch.repeated[:, 1:]  # (N, L), (N, L - 1)
    model.eval()
    rises = lm.path_ablation_rises(model, tokens, targets).double()  # (h, 3, N)
    h, n = rises.shape[0], rises.shape[-1]
    mean, se = mean_se(rises)  # (h, 3) each
    # (h, 3, N) -> (h, 3, N / BLOCK, BLOCK) -> block means (h, 3, N / BLOCK) -> (N / BLOCK, h, 3)
    blocks = rises.reshape(h, 3, n // BLOCK, BLOCK).mean(-1).permute(2, 0, 1)
    with torch.no_grad():
        _, weights = model(tokens, return_weights=True)
    first = weights[0].transpose(0, 1)  # layer 1: (B, h, L, L) -> (h, B, L, L)
    return {"path_rise": mean, "path_se": se, "block_rise": blocks.contiguous(),
            "previous": lm.previous_token_score(first),  # (h,)
            "duplicate": lm.duplicate_token_score(first, tokens)}


def first_seeds_effects(batch: data.RepeatedSegments) -> dict:
    """``path_effects`` of seeds 0 to 5 after 3,000 steps, from their saved weights."""
    first = torch.load(FIRST)
    out = {}
    for seed in first["seeds"]:
        model = base.build_model(seed)
        torch.nn.utils.vector_to_parameters(first["runs"][seed]["weights"], model.parameters())
        out[seed] = {BUDGETS[0]: path_effects(model, batch)}
    return out


def load_or_train(seed: int, cache: Path | None) -> dict:
    path = None if cache is None else cache / f"seed{seed}.pt"
    if path is not None and path.exists():
        return torch.load(path)
    start = time.process_time()
    run = train(seed)
    print(f"seed {seed}: trained {max(BUDGETS)} steps in {time.process_time() - start:.0f} s "
          "of CPU time", flush=True)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(run, path)
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="*", default=None,
                        help="train only these seeds (into --cache) and write no file")
    parser.add_argument("--cache", type=Path, default=None,
                        help="folder that keeps each trained run, reused when present")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.seeds:
        for seed in args.seeds:
            load_or_train(seed, args.cache)
        return
    batch, big = base.eval_batch(), big_batch()
    runs, effects = {}, first_seeds_effects(big)
    for seed in SEEDS:
        run = load_or_train(seed, args.cache)
        model = base.build_model(seed)
        summaries = {}
        effects[seed] = {}
        for budget in BUDGETS:
            model.load_state_dict(run["weights"][budget])
            summaries[budget] = summarise(model, batch)
            effects[seed][budget] = path_effects(model, big)
        model.load_state_dict(run["weights"][BUDGETS[0]])
        with torch.no_grad():
            check_loss = float(lm.next_token_losses(model(batch.tokens), batch.tokens).mean())
        runs[seed] = {
            "phase_step": phase_step(run["eval_steps"], run["loss_repeated"],
                                     run["loss_other"]),
            "loss_repeated": run["loss_repeated"], "loss_other": run["loss_other"],
            "summary": summaries, "check_loss": check_loss,
        }
        s = summaries[BUDGETS[0]]
        print(f"seed {seed}: phase change at {runs[seed]['phase_step']}, repeated "
              f"{s['loss_repeated']:.3f}, layer-1 Q/K rises "
              f"{s['path_rise'][:, :2].numpy().round(2).tolist()}", flush=True)
    show = base.build_model(SHOW_SEED)
    show.load_state_dict(load_or_train(SHOW_SEED, args.cache)["weights"][BUDGETS[0]])
    save({"config": dict(base.CONFIG) | {"steps": max(BUDGETS)}, "seeds": SEEDS,
          "budgets": BUDGETS, "eval_every": base.EVAL_EVERY, "eval_seed": base.EVAL_SEED,
          "eval_size": base.EVAL_SIZE, "runs": runs, "show_seed": SHOW_SEED,
          "big": {"seed": BIG_SEED, "size": BIG_SIZE, "block": BLOCK, "runs": effects},
          "show_weights": torch.nn.utils.parameters_to_vector(show.parameters()).detach()
          .clone()}, OUT)


if __name__ == "__main__":
    main()
