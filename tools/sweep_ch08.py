"""Chapter 8's heads-by-keys sweep of the dictionary lookup, GAT against GATv2, several seeds.

What it runs, all with ``attention_src.graph_tasks.lookup_run`` (one ``LookupModel``: one
attention layer without self-loops, ReLU, a linear read-out; 400 Adam steps with cosine
decay, lr 0.01, 32 fresh graphs per step; accuracy on a fixed test set of 200 new graphs;
per-head top-key agreement and asked-key hits on 100 other new graphs):

* **sweep**: keys ``k`` in (4, 8, 16) x heads ``h`` in (1, 2, 4, 8, 16, 32) x seeds 0-4, for
  GAT and GATv2, with **matched parameter counts**: GATv2's heads have width 16, GAT's the
  width ``matched_gat_hidden(k, h, 16)`` (26 at these k), which makes GAT's parameter count
  the nearest an integer width can get to GATv2's (equal at k = 4, within 2 % otherwise; GAT
  needs wider heads because GATv2 has two projections, query and key, where GAT has one);
* **book**: the chapter's own, unmatched setting (k = 8, 4 heads of width 16 for both, so GAT
  has 1,800 parameters and GATv2 2,952) over seeds 0-9; its seeds 0-2 are the runs that
  ``tools/train_ch08.py`` saved (the notebook checks that they agree).

Seed ``s`` is ``torch.manual_seed(s)`` before the model is built and the training graphs'
generator seed. The results go to ``book/data/ch08_sweep.json`` (a few tens of kB): one
record per run, with the parameter count, test accuracy, mean loss of the last 50 steps and
the per-head measurements; the CPU seconds of each run are kept for the record only.

Cost: about 20 minutes of CPU time on one core of the 2-core reference machine (a run takes
1-2 s at k = 4 and up to about 40 s at k = 16 with 32 heads). Kernels: PyTorch's default
CPU kernels, one thread; the notebook re-runs one cell of the sweep live and requires the
same accuracies and losses within 1e-4, which leaves room for other CPUs' kernels.

Run from the repository root::

    OMP_NUM_THREADS=1 .venv/bin/python tools/sweep_ch08.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from attention_src import graph_tasks as G

#: The sweep's settings; the notebook checks them when it loads the file.
CONFIG = {
    "keys": (4, 8, 16),
    "heads": (1, 2, 4, 8, 16, 32),
    "seeds": (0, 1, 2, 3, 4),
    "gatv2_hidden": 16,
    "steps": 400, "batch": 32, "lr": 0.01,
    "book": {"k": 8, "heads": 4, "hidden": 16, "seeds": tuple(range(10))},
}
OUT = Path(__file__).resolve().parents[1] / "book" / "data" / "ch08_sweep.json"


def run(kind: str, k: int, heads: int, hidden: int, seed: int) -> dict:
    t0 = time.process_time()
    rec = G.lookup_run(kind, k, heads, hidden, seed, steps=CONFIG["steps"],
                       batch=CONFIG["batch"], lr=CONFIG["lr"])
    rec["cpu_s"] = round(time.process_time() - t0, 1)
    print(f"{kind:<6} k {k:>2} h {heads:>2} d {hidden:>2} seed {seed}: {rec['params']:>6} "
          f"parameters, test {rec['test_acc']:.3f} ({rec['cpu_s']} s)", flush=True)
    return rec


def main() -> None:
    torch.set_num_threads(1)
    out = {"config": CONFIG, "book": [], "sweep": []}
    b = CONFIG["book"]
    for kind in ("gat", "gatv2"):
        for seed in b["seeds"]:
            out["book"].append(run(kind, b["k"], b["heads"], b["hidden"], seed))
    for k in CONFIG["keys"]:
        for heads in CONFIG["heads"]:
            width = {"gatv2": CONFIG["gatv2_hidden"],
                     "gat": G.matched_gat_hidden(k, heads, CONFIG["gatv2_hidden"])}
            for kind in ("gat", "gatv2"):
                for seed in CONFIG["seeds"]:
                    out["sweep"].append(run(kind, k, heads, width[kind], seed))
            OUT.write_text(json.dumps(out, indent=0) + "\n")  # partial results, kept
    OUT.write_text(json.dumps(out, indent=0) + "\n")
    total = sum(r["cpu_s"] for r in out["book"] + out["sweep"])
    print(f"saved {OUT.relative_to(OUT.parents[2])} ({OUT.stat().st_size / 1e3:.0f} kB), "
          f"{total / 60:.0f} min of CPU time")


if __name__ == "__main__":
    main()
