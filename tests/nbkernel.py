"""pytest plugin: nbval's kernels talk over Unix sockets, not TCP ports.

Loaded with ``-p tests.nbkernel`` by ``make nbtest``. With ``-n 2`` two pytest-xdist workers
start a kernel at the same moment. jupyter_client chooses a kernel's five TCP ports by binding
to port 0 and releasing them before the kernel starts, so another process can take one of those
ports in between (another kernel, or a client's outgoing connection). The kernel then fails to
bind, exits, and nbval reports every cell of that notebook as
"Kernel died before replying to kernel_info"; this happened once in CI. Sockets named after a
directory that belongs to one kernel cannot collide, and nothing else changes: same kernel,
same messages.

As a second guard, a kernel that still dies while starting is started once more, and the run's
summary says so: a kernel start is infrastructure, not the book, and one retry cannot hide a
notebook that fails.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import nbval.kernel
from jupyter_client.manager import KernelManager

#: Longest Unix socket path Linux accepts is 107 bytes; the kernel appends "-<port>" (6 bytes).
MAX_SOCKET_PREFIX = 100


class IpcKernelManager(KernelManager):
    """A ``KernelManager`` whose kernel listens on Unix sockets in a private temp directory.

    If the temporary directory's path is too long for a socket name (a very long ``TMPDIR``),
    the manager keeps TCP, and the retry below remains the guard.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        socket_dir = tempfile.mkdtemp(prefix="nbval-kernel-")
        atexit.register(shutil.rmtree, socket_dir, ignore_errors=True)
        prefix = os.path.join(socket_dir, "k")
        if len(os.fsencode(prefix)) <= MAX_SOCKET_PREFIX:
            self.transport = "ipc"
            self.ip = prefix


_start_new_kernel = nbval.kernel.start_new_kernel
retried_starts: list[str] = []


#: Run in each kernel before the notebook: shown figures must label their axes.
FIGURE_CHECK = Path(__file__).resolve().with_name("figure_check.py")


def start_new_kernel_with_retry(*args, **kwargs):
    """nbval's ``start_new_kernel``, tried a second time if the kernel dies while starting.

    The kernel first runs tests/figure_check.py (see there).
    """
    kwargs.setdefault("extra_arguments", [f"--IPKernelApp.exec_files={FIGURE_CHECK}"])
    try:
        return _start_new_kernel(*args, **kwargs)
    except RuntimeError as error:  # "Kernel died before replying to kernel_info"
        retried_starts.append(f"{kwargs.get('cwd')}: {error}")
        return _start_new_kernel(*args, **kwargs)


def pytest_configure(config) -> None:
    # nbval.kernel looks both names up in its own module at call time.
    nbval.kernel.KernelManager = IpcKernelManager
    nbval.kernel.start_new_kernel = start_new_kernel_with_retry


def pytest_terminal_summary(terminalreporter) -> None:
    for line in retried_starts:
        terminalreporter.write_line(f"nbkernel: kernel start retried once ({line})")
