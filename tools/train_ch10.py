"""Train chapter 10's Transformers and its recurrent baseline over several seeds; save the results.

Chapter 10 trains the whole Transformer on dates written in four locales ("3 septembre 2026",
"3. September 2026" -> "2026-09-03") and compares it with chapter 2's recurrent encoder-decoder
with additive attention, on the same data: 8,000 training dates of at most 24 characters and
1,000 held-out dates of any length (the longer ones test length generalisation). Besides the
two architectures, the script trains one Transformer for each training ingredient left out
(warm-up, label smoothing, dropout, weight tying), post-norm as well as pre-norm blocks,
rotary instead of sinusoidal positions and a Transformer with about as many parameters as the
recurrent model. Every configuration in :data:`CONFIGS` runs with each seed of :data:`SEEDS`.

Each run records the loss of every step, which held-out dates come out exactly right every
``eval_every`` steps (greedy decoding, as the chapter scores) with the training CPU time up to
that step (evaluation excluded), the total training CPU time, and at the end
the held-out loss without smoothing (``training.teacher_forced_loss``, on every held-out date
and on those of trained lengths, ``test_loss_short``), the token accuracy and
which held-out dates came out exactly right (so the chapter can split them by length). The
``state_dict`` of the seed-0 models of :data:`SAVED_CONFIGS` is saved with its ``check_loss``,
the final weights' loss on the first ``CHECK_PAIRS`` training pairs, which the notebook
recomputes to tie the weights to this run.

Seed ``k``: the model is built after ``torch.manual_seed(k)`` (the recurrent model after seeds
``3k, 3k + 1, 3k + 2``, as chapter 2 builds it) and the batches are drawn with seed ``k``;
dropout draws from the global generator, seeded ``1000 + k`` before training.

One run takes one to three minutes on one core. Runs are kept in ``--cache`` (one file each),
so the work can be split over processes and resumed; ``--assemble`` gathers them into
``saved_data/ch10_transformer.pt``. Run from the repository root::

    export OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=avx2
    .venv/bin/python tools/train_ch10.py --only gru,pre,post &   # one process a core
    .venv/bin/python tools/train_ch10.py --only pre_nowarm,post_nowarm,... &
    wait; .venv/bin/python tools/train_ch10.py --assemble
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from saved_results import save  # tools/saved_results.py, next to this script

from attention_src import data, scoring, seq2seq, training
from attention_src.saved import SAVED_DIR
from attention_src.transformer import Transformer
from attention_src.utils import count_parameters

#: The data, the shared training settings and the main Transformer's shape.
CONFIG = {
    "n_train": 8000, "n_test": 1000, "train_seed": 1, "test_seed": 2, "max_train_length": 24,
    "steps": 1500, "batch_size": 64, "clip": 1.0, "eval_every": 100,
    "embed_dim": 64, "num_heads": 4, "num_layers": 2, "ff_dim": 128, "max_len": 64,
    "warmup": 200, "rnn_embed_dim": 16, "rnn_hidden_dim": 32, "rnn_additive_width": 32,
    "rnn_lr": 0.01,
}
#: The main Transformer: pre-norm, warm-up, label smoothing 0.1, dropout 0.1, tied output.
MAIN = {"norm_first": True, "warmup": True, "label_smoothing": 0.1, "dropout": 0.1,
        "tie_output": True, "positional": "sinusoidal", "embed_dim": 64, "ff_dim": 128}
#: Each configuration: the main Transformer with one or two settings changed.
CONFIGS = {
    "gru": None,  # chapter 2's recurrent encoder-decoder with additive attention
    "pre": {},
    "post": {"norm_first": False},
    "pre_nowarm": {"warmup": False},
    "post_nowarm": {"norm_first": False, "warmup": False},
    "pre_ls0": {"label_smoothing": 0.0},
    "pre_drop0": {"dropout": 0.0},
    "pre_untied": {"tie_output": False},
    "pre_rotary": {"positional": "rotary"},
    "pre_small": {"embed_dim": 32, "ff_dim": 64},
}
SEEDS = (0, 1, 2)
SAVED_CONFIGS = ("gru", "pre", "pre_rotary")
CHECK_PAIRS = 512
OUT = SAVED_DIR / "ch10_transformer.pt"
CACHE = Path(".cache/ch10_runs")


def task() -> data.MultilocaleDateTask:
    cfg = CONFIG
    return data.multilocale_date_task(n_train=cfg["n_train"], n_test=cfg["n_test"],
                                      train_seed=cfg["train_seed"], test_seed=cfg["test_seed"],
                                      max_train_length=cfg["max_train_length"])


def settings(name: str) -> dict | None:
    """The Transformer settings of configuration ``name`` (None: the recurrent model)."""
    return None if CONFIGS[name] is None else {**MAIN, **CONFIGS[name]}


def build(name: str, seed: int, src_vocab_size: int, tgt_vocab_size: int) -> torch.nn.Module:
    cfg, s = CONFIG, settings(name)
    if s is None:
        d = 2 * cfg["rnn_hidden_dim"]  # bidirectional annotations: keys, values and queries
        return seq2seq.build_scored_seq2seq(
            src_vocab_size, tgt_vocab_size, cfg["rnn_embed_dim"], cfg["rnn_hidden_dim"],
            lambda: scoring.score_by_name("additive", d, d, cfg["rnn_additive_width"]),
            seeds=(3 * seed, 3 * seed + 1, 3 * seed + 2))
    torch.manual_seed(seed)
    extra = {} if s["positional"] == "sinusoidal" else {"positional": s["positional"]}
    return Transformer(src_vocab_size, tgt_vocab_size, s["embed_dim"], cfg["num_heads"],
                       cfg["num_layers"], s["ff_dim"], dropout=s["dropout"],
                       norm_first=s["norm_first"], tie_output=s["tie_output"],
                       max_len=cfg["max_len"], **extra)


def optimiser_settings(name: str) -> dict:
    """The keyword arguments of ``training.train_seq2seq`` for configuration ``name``."""
    cfg, s = CONFIG, settings(name)
    if s is None:
        return {"lr": cfg["rnn_lr"]}
    rate = training.warmup_inverse_sqrt(s["embed_dim"], cfg["warmup"])
    # without warm-up: the peak rate from the first step, then the same decay
    schedule = rate if s["warmup"] else (lambda t: rate(max(t, cfg["warmup"])))
    return {"lr": 1.0, "schedule": schedule, "betas": (0.9, 0.98), "eps": 1e-9,
            "label_smoothing": s["label_smoothing"]}


def run_one(name: str, seed: int, t: data.MultilocaleDateTask) -> dict:
    cfg = CONFIG
    model = build(name, seed, len(t.src_vocab), len(t.tgt_vocab))
    curve_steps, curve_each, curve_cpu = [], [], []
    eval_cpu = 0.0  # CPU time spent evaluating, not training

    def evaluate(step: int) -> None:
        nonlocal eval_cpu
        if step % cfg["eval_every"] == 0:
            before = time.process_time()
            _, exact = training.seq2seq_accuracy(model, t.test_set)
            curve_steps.append(step)
            curve_each.append(exact.clone())
            curve_cpu.append(before - start - eval_cpu)
            eval_cpu += time.process_time() - before

    torch.manual_seed(1000 + seed)
    start = time.process_time()
    losses = training.train_seq2seq(model, t.train_set, steps=cfg["steps"],
                                    batch_size=cfg["batch_size"], clip=cfg["clip"], seed=seed,
                                    on_step=evaluate, **optimiser_settings(name))
    cpu = time.process_time() - start - eval_cpu
    token, exact = training.seq2seq_accuracy(model, t.test_set)
    run = {"losses": torch.tensor(losses, dtype=torch.float32),
           "curve_steps": torch.tensor(curve_steps),
           "curve_exact_each": torch.stack(curve_each),  # (evaluations, held-out dates)
           "curve_cpu_seconds": torch.tensor(curve_cpu),
           "cpu_seconds": cpu, "parameters": count_parameters(model),
           "test_loss": training.teacher_forced_loss(model, t.test_set),
           "test_loss_short": training.teacher_forced_loss(
               model, t.test_set.subset(t.test_set.src_len <= cfg["max_train_length"])),
           "token": float(token.double().mean()), "exact": float(exact.double().mean()),
           "exact_each": exact.clone()}
    if name in SAVED_CONFIGS and seed == 0:
        run["state_dict"] = model.state_dict()
        run["check_loss"] = training.teacher_forced_loss(
            model, t.train_set.subset(slice(0, CHECK_PAIRS)))
    return run


def train(names: list[str], seeds: tuple[int, ...], cache: Path) -> None:
    torch.set_num_threads(1)
    t = task()
    cache.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        for name in names:
            path = cache / f"{name}_{seed}.pt"
            if path.exists():
                continue
            run = run_one(name, seed, t)
            torch.save(run, path)
            short = t.test_set.src_len <= CONFIG["max_train_length"]
            print(f"{name:12s} seed {seed}  {run['parameters']:7d} params  "
                  f"{run['cpu_seconds']:5.0f} s CPU  held-out loss {run['test_loss']:.4f}  "
                  f"exact {run['exact']:.3f} (short {run['exact_each'][short].double().mean():.3f}"
                  f", long {run['exact_each'][~short].double().mean():.3f})", flush=True)


def assemble(cache: Path) -> dict:
    t = task()
    runs = {name: {seed: torch.load(cache / f"{name}_{seed}.pt", weights_only=False)
                   for seed in SEEDS} for name in CONFIGS}
    return {"config": dict(CONFIG), "main": dict(MAIN), "configs": dict(CONFIGS),
            "seeds": SEEDS, "check_pairs": CHECK_PAIRS, "src_itos": t.src_vocab.itos,
            "tgt_itos": t.tgt_vocab.itos, "test_src_len": t.test_set.src_len.clone(),
            "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(CONFIGS),
                        help="comma-separated configurations to train (default: all)")
    parser.add_argument("--seeds", default=",".join(map(str, SEEDS)))
    parser.add_argument("--cache", type=Path, default=CACHE)
    parser.add_argument("--assemble", action="store_true",
                        help="gather the cached runs into the saved file")
    args = parser.parse_args()
    if args.assemble:
        save(assemble(args.cache), OUT)
        return
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(CONFIGS))
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {list(CONFIGS)}")
    train(names, tuple(int(s) for s in args.seeds.split(",")), args.cache)


if __name__ == "__main__":
    main()
