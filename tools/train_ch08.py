"""Train chapter 8's graph-attention experiments over several seeds and save what it shows.

Three experiments, all from ``attention_src.graph_tasks``, none needing a download:

* **karate**: Zachary's karate club (PyTorch Geometric's built-in ``KarateClub``: one labelled
  node per class, 30 test nodes); the four ``NodeClassifier`` kinds (GAT, GATv2, uniform
  neighbour weights, MLP), hidden 8 x 4 heads, dropout 0.5, 200 full-batch Adam steps
  (lr 0.01, weight decay 5e-4), seeds 0-4;
* **digits**: the symmetric 10-nearest-neighbour graph of scikit-learn's 1797 8x8 digits,
  5 labelled images per class; the same four models and training, seeds 0-2;
* **lookup**: Brody et al.'s dictionary lookup with ``k = 8`` keys; ``LookupModel`` (one GAT or
  GATv2 layer, 4 heads of width 16, no self-loops, ReLU, linear read-out), 400 Adam steps
  with cosine decay (lr 0.01) on 32 fresh graphs per step, seeds 0-2; test accuracy on 200
  fresh graphs (``lookup_accuracy``'s fixed seed).

For node classification, seed ``s`` means ``torch.manual_seed(s)`` before building the model
(and so before training, whose dropout draws from the same generator). The file keeps, per
experiment, kind and seed: the test and training accuracies and the loss curve; and the
final weights of the karate GAT and GATv2 of seed 0 and of every lookup model, from which the
notebook recomputes the recorded accuracies and draws the attention. Every seed took a few
seconds (digits: 10-20 s) on one core of the busy 2-core machine; all of it together is
over the notebook's budget, so the notebook loads ``saved_data/ch08_results.pt`` and re-runs
karate GAT seed 0 and the first ``LIVE_STEPS`` lookup steps of GATv2 seed 0 live.

Kernels: made with PyTorch's default kernels; the live re-runs agree with the saved losses
to float32 rounding (the notebook's tolerance, 1e-4, leaves room for other CPUs' kernels).

Run from the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python tools/train_ch08.py
"""

from __future__ import annotations

import time

import torch
from saved_results import save  # tools/saved_results.py, next to this script

from attention_src import graph_tasks as G
from attention_src.saved import SAVED_DIR

#: The chapter's settings; the notebook checks them when it loads the file.
CONFIG = {
    "node": {"hidden": 8, "heads": 4, "dropout": 0.5, "steps": 200, "lr": 0.01,
             "weight_decay": 5e-4},
    "digits": {"k": 10, "labelled_per_class": 5, "split_seed": 0},
    "lookup": {"k": 8, "hidden": 16, "heads": 4, "steps": 400, "batch": 32, "lr": 0.01},
    "seeds": {"karate": (0, 1, 2, 3, 4), "digits": (0, 1, 2), "lookup": (0, 1, 2)},
}
LIVE_STEPS = 30
OUT = SAVED_DIR / "ch08_results.pt"


def node_runs(name: str, data: G.GraphData, saved: dict) -> None:
    cfg = CONFIG["node"]
    classes = int(data.y.max()) + 1
    for kind in G.KINDS:
        for seed in CONFIG["seeds"][name]:
            t0 = time.perf_counter()
            torch.manual_seed(seed)
            model = G.NodeClassifier(kind, data.x.shape[1], classes, hidden=cfg["hidden"],
                                     heads=cfg["heads"], dropout=cfg["dropout"])
            run = G.train_node_classifier(model, data, steps=cfg["steps"], lr=cfg["lr"],
                                          weight_decay=cfg["weight_decay"])
            saved[name][kind, seed] = run
            if name == "karate" and seed == 0 and kind in ("gat", "gatv2"):
                saved["weights"][name, kind] = model.state_dict()
            print(f"{name:<7} {kind:<8} seed {seed}: test {run['test_acc']:.3f} "
                  f"({time.perf_counter() - t0:.1f} s)", flush=True)


def lookup_runs(saved: dict) -> None:
    cfg = CONFIG["lookup"]
    for kind in ("gat", "gatv2"):
        for seed in CONFIG["seeds"]["lookup"]:
            t0 = time.perf_counter()
            torch.manual_seed(seed)
            model = G.LookupModel(kind, cfg["k"], hidden=cfg["hidden"], heads=cfg["heads"])
            losses = G.train_lookup(model, steps=cfg["steps"], batch=cfg["batch"],
                                    lr=cfg["lr"], seed=seed)
            acc = G.lookup_accuracy(model)
            saved["lookup"][kind, seed] = {"loss": losses, "test_acc": acc}
            saved["weights"]["lookup", kind, seed] = model.state_dict()
            print(f"lookup  {kind:<8} seed {seed}: test {acc:.3f} "
                  f"({time.perf_counter() - t0:.1f} s)", flush=True)


def main() -> None:
    torch.set_num_threads(1)
    saved = {"config": CONFIG, "live_steps": LIVE_STEPS, "karate": {}, "digits": {},
             "lookup": {}, "weights": {}}
    node_runs("karate", G.karate_club(), saved)
    d = CONFIG["digits"]
    digits = G.digits_graph(k=d["k"], labelled_per_class=d["labelled_per_class"],
                            seed=d["split_seed"])
    node_runs("digits", digits, saved)
    lookup_runs(saved)
    save(saved, OUT)


if __name__ == "__main__":
    main()
