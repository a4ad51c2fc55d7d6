"""Wall time of executing each notebook of the book, against the 60-second budget.

Every notebook listed in ``_toc.yml`` (``tests/toc.py`` gives the list, as for nbval) is
executed once, in memory, with nbclient and the ``python3`` kernel, from the notebook's own
folder; nothing is written back to the notebooks. The wall time of each, from kernel start to
the last cell, is appended to ``benchmarks/results/notebooks.csv`` with the date, commit
(``git describe --always --dirty``, ``+untracked`` when git sees untracked files) and load, so
the file keeps the history of the book's cost as it grows; it is the one tracked file of
``benchmarks/results/`` (see ``.gitignore``). Cost: it executes every notebook once, one after
another, so it takes as long as all of them together (the sum is printed at the end: 331 s
for 20 notebooks on 2026-11-22). Run with ``OMP_NUM_THREADS=1`` (as ``make bench`` does), the
setting of ``make execute`` and the nbval tests.

Usage: python benchmarks/bench_notebooks.py [book/01_motivation.ipynb ...]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"
BUDGET_S = 60.0


def notebooks_in_toc() -> list[str]:
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "toc.py")], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    return out.stdout.split()


def commit() -> str:
    """``git describe --always --dirty``, plus ``+untracked`` if git sees untracked files
    (a new notebook or module is part of what was measured, too)."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                             text=True, check=True, cwd=ROOT)
        untracked = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                                   capture_output=True, text=True, check=True, cwd=ROOT)
        new = any(line.startswith("??") for line in untracked.stdout.splitlines())
        return out.stdout.strip() + ("+untracked" if new else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run_notebook(path: Path) -> tuple[float, str]:
    """Execute ``path`` in memory; return (wall seconds, "ok" or the error's first line)."""
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    try:
        client.execute()
        status = "ok"
    except Exception as err:  # report and go on: one broken notebook must not hide the rest
        status = f"error: {str(err).strip().splitlines()[0][:80]}" if str(err).strip() else (
            f"error: {type(err).__name__}")
    return time.perf_counter() - start, status


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", help="default: every notebook in _toc.yml")
    args = p.parse_args()
    notebooks = args.notebooks or notebooks_in_toc()
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    rev = commit()
    load = os.getloadavg()[0]
    print(f"executing {len(notebooks)} notebooks, commit {rev}, OMP_NUM_THREADS="
          f"{os.environ.get('OMP_NUM_THREADS', 'unset')}, load average {load:.2f}")
    rows = []
    for name in notebooks:
        seconds, status = run_notebook(ROOT / name)
        within = seconds <= BUDGET_S and status == "ok"
        rows.append({"date": date, "commit": rev, "notebook": name,
                     "seconds": f"{seconds:.1f}", "budget_s": f"{BUDGET_S:.0f}",
                     "within_budget": within, "status": status, "load": f"{load:.2f}"})
        flag = "ok" if within else "OVER BUDGET" if status == "ok" else status
        print(f"{name:60s} {seconds:6.1f} s  {flag}", flush=True)
    total = sum(float(r["seconds"]) for r in rows)
    over = [r["notebook"] for r in rows if not r["within_budget"]]
    print(f"total {total:.0f} s for {len(rows)} notebooks; budget {BUDGET_S:.0f} s each; "
          f"{'all within' if not over else f'{len(over)} over or failing: ' + ', '.join(over)}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / "notebooks.csv"
    new = not path.exists()
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new:
            writer.writeheader()
        writer.writerows(rows)
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
