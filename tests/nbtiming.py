"""pytest plugin: the CPU time of each notebook's kernel under nbval, held to the book's budget.

Loaded with ``-p tests.nbtiming`` by ``make nbtest``. nbval starts one kernel per notebook and
stops it when the notebook's last cell is done (``IPyNbFile.teardown``). Just before that stop
this plugin reads the kernel process's CPU time (user + system, of the kernel and the processes
it waited for) with psutil: the work the notebook made the machine do, from the kernel's start
(its imports included) to its last cell. Unlike wall time, it does not grow when other jobs
share the cores: under load (four other jobs on two cores) the summed wall time of a correct
suite reached 813 s. The time the test process itself spends comparing outputs is not counted.

The CPU time travels to the table in the teardown report of the notebook's last cell
(``user_properties``), so with pytest-xdist the controller, which receives every worker's
reports, prints all notebooks. A notebook whose kernel could not be read (it died) is counted
at its wall time, the sum of its items' setup, call and teardown, and marked so.

Budgets come from the book's rules: 60 s per notebook and 300 s for all of them on the 2-core
reference machine. The run fails at ``MARGIN`` times the budget, so a slower CI machine is not
flagged for noise, while a notebook that really grew is.
"""

from __future__ import annotations

import functools
from collections import defaultdict

import pytest

BUDGET_PER_NOTEBOOK_S = 60.0
BUDGET_ALL_NOTEBOOKS_S = 300.0
MARGIN = 2.0
#: The name under which a notebook's kernel CPU time rides in a report's ``user_properties``.
CPU_PROPERTY = "nbtiming_kernel_cpu_s"

_wall: dict[str, float] = defaultdict(float)   # notebook -> summed item durations (wall)
_cpu: dict[str, float] = {}                     # notebook -> its kernel's CPU seconds
_pending: dict[str, float] = {}                 # read at kernel stop, not yet in a report


def kernel_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds (user + system, own and of waited-for children) of the process ``pid``.

    ``None`` when ``pid`` is ``None`` or no such process can be read.
    """
    if pid is None:
        return None
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except (psutil.Error, OSError):
        return None
    return t.user + t.system + t.children_user + t.children_system


def _kernel_pid(nb_file) -> int | None:
    """The pid of the kernel nbval started for the notebook collector ``nb_file``, if any."""
    kernel = getattr(nb_file, "kernel", None)
    km = getattr(kernel, "km", None)  # nbval deletes km once the kernel is stopped
    provisioner = getattr(km, "provisioner", None)
    return getattr(provisioner, "pid", None)


def _notebook(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _record_cpu_before_stop(teardown):
    """Wrap ``IPyNbFile.teardown``: read the kernel's CPU time, then stop it as nbval does."""

    @functools.wraps(teardown)
    def wrapper(self):
        cpu = kernel_cpu_seconds(_kernel_pid(self))
        if cpu is not None:
            _pending[_notebook(self.nodeid)] = cpu
        return teardown(self)

    wrapper.nbtiming_wrapped = True
    return wrapper


def pytest_configure(config) -> None:
    try:
        from nbval.plugin import IPyNbFile
    except ImportError:  # pragma: no cover - nbval is pinned in requirements.txt
        return
    if not getattr(IPyNbFile.teardown, "nbtiming_wrapped", False):
        IPyNbFile.teardown = _record_cpu_before_stop(IPyNbFile.teardown)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach a stopped kernel's CPU time to the report of the phase that stopped it."""
    outcome = yield
    report = outcome.get_result()
    nb = _notebook(report.nodeid)
    if nb in _pending:
        report.user_properties.append((CPU_PROPERTY, _pending.pop(nb)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = _notebook(report.nodeid)
    if not path.endswith(".ipynb"):
        return
    _wall[path] += report.duration
    for name, value in report.user_properties:
        if name == CPU_PROPERTY:
            _cpu[path] = _cpu.get(path, 0.0) + float(value)


def notebook_seconds(cpu: dict[str, float], wall: dict[str, float]) -> dict[str, float]:
    """The time each notebook is held to: its kernel's CPU time, else (kernel unread) its wall
    time."""
    return {nb: cpu[nb] if nb in cpu else wall[nb] for nb in sorted(set(wall) | set(cpu))}


def over_budget(seconds: dict[str, float]) -> list[str]:
    """Human-readable reasons why ``seconds`` (notebook -> CPU time) breaks the budget, if any."""
    reasons = [
        f"{nb} took {t:.1f} CPU s, over {MARGIN:g} x {BUDGET_PER_NOTEBOOK_S:g} s"
        for nb, t in sorted(seconds.items())
        if t > MARGIN * BUDGET_PER_NOTEBOOK_S
    ]
    total = sum(seconds.values())
    if total > MARGIN * BUDGET_ALL_NOTEBOOKS_S:
        reasons.append(
            f"all notebooks took {total:.1f} CPU s, over {MARGIN:g} x {BUDGET_ALL_NOTEBOOKS_S:g} s"
        )
    return reasons


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if over_budget(notebook_seconds(_cpu, _wall)) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def summary_lines(cpu: dict[str, float], wall: dict[str, float]) -> list[str]:
    """The table ``make nbtest`` prints: CPU and wall seconds per notebook, then the sums."""
    seconds = notebook_seconds(cpu, wall)
    lines = [f"{'CPU s':>8}  {'wall s':>8}  notebook"]
    for nb, t in seconds.items():
        flag = "" if nb in cpu else "  (kernel CPU unread: wall time counted)"
        if t > BUDGET_PER_NOTEBOOK_S:
            flag += "  OVER BUDGET"
        lines.append(f"{t:8.1f}  {wall.get(nb, 0.0):8.1f}  {nb}{flag}")
    lines.append(f"{sum(seconds.values()):8.1f}  {sum(wall.values()):8.1f}  all notebooks "
                 "(sums; the budget counts CPU time)")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _wall and not _cpu:
        return
    tr = terminalreporter
    tr.section(
        f"notebook kernel CPU time (budget {BUDGET_PER_NOTEBOOK_S:g} s each, "
        f"{BUDGET_ALL_NOTEBOOKS_S:g} s in all)"
    )
    for line in summary_lines(_cpu, _wall):
        tr.write_line(line)
    for reason in over_budget(notebook_seconds(_cpu, _wall)):
        tr.write_line(f"FAILED time budget: {reason}", red=True)
