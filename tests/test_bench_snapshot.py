"""Chapter 9's benchmark snapshot (saved_data/ch09_bench_*) belongs to the code in this tree.

The snapshot records the SHA-256 of the files whose code produced its numbers; a change to
any of them makes the snapshot stale, and this test fails until the benchmark is run again
(``python benchmarks/bench_attention.py --snapshot``) and chapter 9 re-executed. It also
checks that the snapshot holds every case the chapter reads.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "attention_src" / "saved_data"
BENCH = ROOT / "benchmarks" / "bench_attention.py"
# mutation testing copies only the package and the tests: no benchmark, no snapshot there
pytestmark = pytest.mark.skipif(not BENCH.exists(), reason="not in a checkout of the book")


def _load_bench():
    spec = importlib.util.spec_from_file_location("bench_attention", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench() if BENCH.exists() else None
RERUN = ("re-run `python benchmarks/bench_attention.py --snapshot` and re-execute chapter 9 "
         "(`make execute NB='book/09_efficient_attention.ipynb book/09a_benchmark_method.ipynb'`)")


def _meta() -> dict:
    return json.loads((DATA / bench.FILES["attention_meta.json"]).read_text())


def _rows(name: str) -> list[dict]:
    with open(DATA / bench.FILES[name], newline="") as f:
        return list(csv.DictReader(f))


def test_the_snapshot_records_the_hash_of_every_file_that_made_it():
    assert sorted(_meta()["sha256"]) == sorted(bench.HASHED)


@pytest.mark.parametrize("name", bench.HASHED if bench else [])
def test_the_snapshot_was_made_by_the_files_in_this_tree(name):
    recorded = _meta()["sha256"][name]
    now = hashlib.sha256((ROOT / name).read_bytes()).hexdigest()
    assert now == recorded, f"{name} changed since the benchmark snapshot: {RERUN}"


def test_the_snapshot_holds_every_timed_case():
    rows = _rows("attention.csv")
    threads = _meta()["threads"]  # 1 and all the CPUs of the machine that measured it
    assert threads[0] == 1 and len(threads) <= 2 and threads[-1] == _meta()["cpus"]
    expected = set()
    for heap, n_threads, methods, lengths in bench.SETTINGS:
        n = 1 if n_threads == 1 else max(threads)
        expected |= {(m, str(L), str(c), str(n), heap) for m in methods for L in lengths
                     for c in (False, True)}
    found = [(r["method"], r["L"], r["causal"], r["threads"], r["heap"]) for r in rows]
    assert len(found) == len(set(found)), "a case appears twice"
    assert set(found) == expected, f"missing or extra cases: {RERUN}"


def test_the_snapshot_was_taken_on_an_idle_machine():
    # wall-clock times on a busy machine measure its load: the snapshot's 1-minute load
    # average at the start must be within the bound the benchmark enforces, not overridden
    meta = _meta()
    bound = bench.load_bound(meta["cpus"])
    assert meta["load_average_start"][0] <= bound, (
        f"the snapshot started at load {meta['load_average_start'][0]:.2f}, above "
        f"{bound:.2f} ({bench.MAX_LOAD_PER_CPU} x {meta['cpus']} CPUs): {RERUN} on an "
        "idle machine")
    assert not meta.get("load_allowed", False), f"taken with --allow-load: {RERUN}"
    for key in ("load_average_end", "page_size", "transparent_hugepage"):
        assert key in meta, f"the meta file lacks {key}: {RERUN}"


def test_a_snapshot_is_refused_on_a_busy_machine(monkeypatch, capsys):
    # the refusal happens before anything is measured or written
    monkeypatch.setattr(bench.os, "getloadavg", lambda: (99.0, 99.0, 99.0))
    monkeypatch.setattr(bench, "measure", lambda *a: pytest.fail("measured on a busy machine"))
    monkeypatch.setattr(bench.sys, "argv", ["bench_attention.py", "--snapshot"])
    with pytest.raises(SystemExit, match="^2$") as exit_:  # exit status 2
        bench.main()
    assert exit_.value.code == 2
    assert "refusing to snapshot" in capsys.readouterr().err


def test_the_load_bound_is_a_quarter_of_the_cpus():
    assert bench.load_bound(2) == 0.5 and bench.load_bound(8) == 2.0


def test_the_snapshot_holds_every_memory_case():
    rows = _rows("attention_memory.csv")
    expected = {(m, str(L), str(c), "no_grad") for m in bench.METHODS
                for L in bench.DEFAULT_LENGTHS for c in (False, True)}
    expected |= {(m, str(L), str(c), mode) for m in bench.GRAD_METHODS
                 for L in bench.GRAD_LENGTHS for c in (False, True)
                 for mode in ("forward", "forward_backward")}
    found = [(r["method"], r["L"], r["causal"], r["mode"]) for r in rows]
    assert len(found) == len(set(found)), "a case appears twice"
    assert set(found) == expected, f"missing or extra cases: {RERUN}"
