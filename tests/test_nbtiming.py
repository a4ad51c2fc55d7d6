"""The notebook time budget of ``make nbtest`` (``tests/nbtiming.py``) counts kernel CPU time.

Unit tests of the budget arithmetic and of the plumbing (kernel pid -> CPU seconds -> report ->
table), and one end-to-end run of nbval with the plugin, on two processes as ``make nbtest``
runs it, on a notebook that sleeps: the sleep is wall time the budget must not count.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from tests import nbtiming

ROOT = Path(__file__).resolve().parent.parent  # where `tests` imports from

LIMIT = nbtiming.MARGIN * nbtiming.BUDGET_PER_NOTEBOOK_S
LIMIT_ALL = nbtiming.MARGIN * nbtiming.BUDGET_ALL_NOTEBOOKS_S


def test_budget_constants_are_the_books_rules():
    assert (nbtiming.BUDGET_PER_NOTEBOOK_S, nbtiming.BUDGET_ALL_NOTEBOOKS_S,
            nbtiming.MARGIN) == (60.0, 300.0, 2.0)


def test_notebooks_within_budget_pass():
    assert nbtiming.over_budget({}) == []
    assert nbtiming.over_budget({"a.ipynb": 59.0, "b.ipynb": LIMIT}) == []  # at the limit: ok


def test_a_notebook_over_twice_its_budget_fails_and_is_named():
    reasons = nbtiming.over_budget({"a.ipynb": 30.0, "b.ipynb": LIMIT + 0.1})
    assert reasons == [f"b.ipynb took {LIMIT + 0.1:.1f} CPU s, over 2 x 60 s"]


def test_the_sum_over_twice_the_total_budget_fails():
    seconds = {f"{i}.ipynb": 100.0 for i in range(6)}  # 600 s: at the limit
    assert nbtiming.over_budget(seconds) == []
    seconds["6.ipynb"] = 1.0
    assert nbtiming.over_budget(seconds) == [
        f"all notebooks took {LIMIT_ALL + 1:.1f} CPU s, over 2 x 300 s"]


def test_cpu_time_is_counted_and_wall_time_only_where_the_kernel_was_not_read():
    wall = {"a.ipynb": 400.0, "b.ipynb": 7.0}
    cpu = {"a.ipynb": 30.0}
    assert nbtiming.notebook_seconds(cpu, wall) == {"a.ipynb": 30.0, "b.ipynb": 7.0}
    # the 400 s of wall time (a loaded machine) breaks nothing: the kernel worked 30 s
    assert nbtiming.over_budget(nbtiming.notebook_seconds(cpu, wall)) == []
    assert nbtiming.over_budget(wall) != []


def test_the_table_shows_cpu_and_wall_seconds_and_flags():
    lines = nbtiming.summary_lines({"a.ipynb": 61.25, "b.ipynb": 2.0},
                                   {"a.ipynb": 90.0, "b.ipynb": 3.0, "c.ipynb": 4.0})
    assert lines[0].split() == ["CPU", "s", "wall", "s", "notebook"]
    assert lines[1].split()[:3] == ["61.2", "90.0", "a.ipynb"] and lines[1].endswith(
        "OVER BUDGET")
    assert lines[2].split() == ["2.0", "3.0", "b.ipynb"]
    assert lines[3].split()[:3] == ["4.0", "4.0", "c.ipynb"] and "wall time counted" in lines[3]
    assert lines[4].split()[:2] == ["67.2", "97.0"]


def test_kernel_cpu_seconds_reads_a_process_and_grows_with_its_work():
    assert nbtiming.kernel_cpu_seconds(None) is None
    before = nbtiming.kernel_cpu_seconds(os.getpid())
    start = time.process_time()
    while time.process_time() - start < 0.3:
        pass
    after = nbtiming.kernel_cpu_seconds(os.getpid())
    assert after - before == pytest.approx(time.process_time() - start, abs=0.05)
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    assert nbtiming.kernel_cpu_seconds(int(done.stdout)) is None  # exited and reaped


def test_the_teardown_wrapper_reads_the_kernel_before_nbval_stops_it(monkeypatch):
    monkeypatch.setattr(nbtiming, "_pending", {})
    stopped = []

    def nbval_teardown(self):  # as nbval: the kernel manager is gone once stopped
        stopped.append(dict(nbtiming._pending))
        del self.kernel.km

    nb_file = SimpleNamespace(
        nodeid="book/x.ipynb",
        kernel=SimpleNamespace(km=SimpleNamespace(provisioner=SimpleNamespace(pid=os.getpid()))))
    nbtiming._record_cpu_before_stop(nbval_teardown)(nb_file)
    assert stopped and stopped[0]["book/x.ipynb"] > 0
    assert nbtiming._pending["book/x.ipynb"] == stopped[0]["book/x.ipynb"]
    # a notebook whose kernel is already gone records nothing
    monkeypatch.setattr(nbtiming, "_pending", {})
    nbtiming._record_cpu_before_stop(lambda self: None)(SimpleNamespace(nodeid="y.ipynb",
                                                                        kernel=None))
    assert nbtiming._pending == {}


def test_reports_carry_the_cpu_time_to_the_table(monkeypatch):
    monkeypatch.setattr(nbtiming, "_wall", nbtiming.defaultdict(float))
    monkeypatch.setattr(nbtiming, "_cpu", {})
    for when, duration, props in [("setup", 2.0, []), ("call", 1.5, []),
                                  ("teardown", 0.5, [(nbtiming.CPU_PROPERTY, 3.25)])]:
        nbtiming.pytest_runtest_logreport(pytest.TestReport(
            "book/x.ipynb::Cell 0", ("book/x.ipynb", 0, "Cell 0"), {}, "passed", None, when,
            duration=duration, user_properties=props))
    nbtiming.pytest_runtest_logreport(pytest.TestReport(
        "tests/test_a.py::test_b", ("tests/test_a.py", 0, "test_b"), {}, "passed", None, "call",
        duration=99.0))
    assert dict(nbtiming._wall) == {"book/x.ipynb": 4.0}
    assert nbtiming._cpu == {"book/x.ipynb": 3.25}


def test_an_over_budget_run_fails_the_session_only_when_it_passed(monkeypatch):
    monkeypatch.setattr(nbtiming, "_wall", {"a.ipynb": 10.0})
    monkeypatch.setattr(nbtiming, "_cpu", {"a.ipynb": LIMIT + 1})
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    nbtiming.pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    monkeypatch.setattr(nbtiming, "_cpu", {"a.ipynb": LIMIT - 1})
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    nbtiming.pytest_sessionfinish(session, pytest.ExitCode.OK)
    assert session.exitstatus == pytest.ExitCode.OK


def test_nbval_with_the_plugin_counts_the_kernels_work_not_its_sleep(tmp_path):
    """End to end, as ``make nbtest`` runs (nbval, the IPC kernel plugin, a pytest-xdist
    worker): a notebook that sleeps 2 s and computes for 1 s of CPU."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import time\ntime.sleep(2)"),
                nbformat.v4.new_code_cell(
                    "start = time.process_time()\n"
                    "while time.process_time() - start < 1.0:\n    pass")]
    nbformat.write(nb, tmp_path / "timing.ipynb")
    # the book's root first, then whatever path this run already has (packages installed
    # beside the interpreter's, as on a machine that carries its own)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
         "--nbval", "--nbval-current-env", "-p", "tests.nbtiming", "-p", "tests.nbkernel",
         "-n", "1", str(tmp_path / "timing.ipynb")],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    row = re.search(r"^\s*([\d.]+)\s+([\d.]+)\s+\S*timing\.ipynb\s*$", result.stdout, re.M)
    assert row, result.stdout[-2000:]
    cpu, wall = float(row[1]), float(row[2])
    assert cpu >= 1.0, (cpu, wall)  # the busy loop, plus the kernel's start
    assert cpu <= wall - 1.5, (cpu, wall)  # the 2 s sleep is not counted
    assert "wall time counted" not in result.stdout
