"""pytest plugin: time each notebook under nbval and fail the run when one is over budget.

Loaded with ``-p tests.nbtiming`` by ``make nbtest``. nbval turns every cell into a test item;
a notebook's time is the sum of its items' setup, call and teardown (the kernel start is in the
first item's setup). With pytest-xdist the controller receives every worker's reports, so the
table covers all notebooks.

Budgets come from the book's rules: 60 s per notebook and 300 s for all of them on the 2-core
reference machine. The run fails at ``MARGIN`` times the budget, so a slower CI machine is not
flagged for noise, while a notebook that really grew is.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

BUDGET_PER_NOTEBOOK_S = 60.0
BUDGET_ALL_NOTEBOOKS_S = 300.0
MARGIN = 2.0

_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = report.nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):
        _seconds[path] += report.duration


def over_budget(seconds: dict[str, float]) -> list[str]:
    """Human-readable reasons why ``seconds`` (notebook -> time) breaks the budget, if any."""
    reasons = [
        f"{nb} took {t:.1f} s, over {MARGIN:g} x {BUDGET_PER_NOTEBOOK_S:g} s"
        for nb, t in sorted(seconds.items())
        if t > MARGIN * BUDGET_PER_NOTEBOOK_S
    ]
    total = sum(seconds.values())
    if total > MARGIN * BUDGET_ALL_NOTEBOOKS_S:
        reasons.append(
            f"all notebooks took {total:.1f} s, over {MARGIN:g} x {BUDGET_ALL_NOTEBOOKS_S:g} s"
        )
    return reasons


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if over_budget(_seconds) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _seconds:
        return
    tr = terminalreporter
    tr.section(
        f"notebook execution time (budget {BUDGET_PER_NOTEBOOK_S:g} s each, "
        f"{BUDGET_ALL_NOTEBOOKS_S:g} s in all)"
    )
    for nb, t in sorted(_seconds.items()):
        flag = "  OVER BUDGET" if t > BUDGET_PER_NOTEBOOK_S else ""
        tr.write_line(f"{t:8.1f} s  {nb}{flag}")
    tr.write_line(f"{sum(_seconds.values()):8.1f} s  all notebooks (sum of per-notebook times)")
    for reason in over_budget(_seconds):
        tr.write_line(f"FAILED time budget: {reason}", red=True)
