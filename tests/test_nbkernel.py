"""The nbval plugin in ``tests/nbkernel.py`` really starts kernels on Unix sockets."""

from __future__ import annotations

import os
import stat

import nbval.kernel
import pytest

from tests import nbkernel


@pytest.fixture
def ipc_kernel_manager(monkeypatch):
    monkeypatch.setattr(nbval.kernel, "KernelManager", nbval.kernel.KernelManager)
    monkeypatch.setattr(nbval.kernel, "start_new_kernel", nbval.kernel.start_new_kernel)
    nbkernel.pytest_configure(config=None)
    assert nbval.kernel.KernelManager is nbkernel.IpcKernelManager
    return nbval.kernel.KernelManager


def test_kernel_runs_code_over_unix_sockets(ipc_kernel_manager):
    kernel = nbval.kernel.RunningKernel(nbval.kernel.CURRENT_ENV_KERNEL_NAME, startup_timeout=60)
    try:
        info = kernel.km.get_connection_info()
        assert info["transport"] == "ipc"
        assert os.path.isabs(info["ip"]) and len(info["ip"]) < 90
        for port_name in ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port"):
            path = f"{info['ip']}-{info[port_name]}"
            assert stat.S_ISSOCK(os.stat(path).st_mode), path
        assert _run_cell(kernel, "print(6 * 7)") == ("42\n", [])
    finally:
        kernel.stop()


def test_two_kernel_managers_get_separate_socket_directories(ipc_kernel_manager):
    first, second = ipc_kernel_manager(), ipc_kernel_manager()
    assert first.transport == second.transport == "ipc"
    assert os.path.dirname(first.ip) != os.path.dirname(second.ip)


def test_a_kernel_that_dies_while_starting_is_started_once_more(monkeypatch):
    calls = []

    def flaky_start(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "manager", "client"

    monkeypatch.setattr(nbkernel, "_start_new_kernel", flaky_start)
    monkeypatch.setattr(nbkernel, "retried_starts", [])
    assert nbkernel.start_new_kernel_with_retry(cwd="book") == ("manager", "client")
    assert len(calls) == 2
    assert nbkernel.retried_starts == ["book: Kernel died before replying to kernel_info"]


def test_a_kernel_that_dies_twice_fails(monkeypatch):
    def dead_start(*args, **kwargs):
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(nbkernel, "_start_new_kernel", dead_start)
    monkeypatch.setattr(nbkernel, "retried_starts", [])
    with pytest.raises(RuntimeError, match="Kernel died"):
        nbkernel.start_new_kernel_with_retry(cwd="book")


def test_a_socket_path_too_long_for_linux_keeps_tcp(monkeypatch, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(nbkernel.tempfile, "tempdir", str(deep))
    manager = nbkernel.IpcKernelManager()
    assert manager.transport == "tcp"
    assert manager.ip == "127.0.0.1"


def _run_cell(kernel, code: str) -> tuple[str, list[str]]:
    """Run ``code`` in ``kernel``; its printed text and the error names and values it raised."""
    msg_id = kernel.execute_cell_input(code, allow_stdin=False)
    kernel.await_reply(msg_id, timeout=60)
    text, errors = [], []
    while True:
        msg = kernel.get_message(stream="iopub", timeout=30)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "stream":
            text.append(msg["content"]["text"])
        if msg["msg_type"] == "error":
            errors.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return "".join(text), errors


def test_a_shown_figure_without_axis_labels_fails_its_cell(ipc_kernel_manager):
    kernel = nbval.kernel.RunningKernel(nbval.kernel.CURRENT_ENV_KERNEL_NAME, startup_timeout=60)
    try:
        setup = "import matplotlib.pyplot as plt\nprint(plt.show.__name__)"
        assert _run_cell(kernel, setup) == ("show_checked\n", [])
        labelled = ("fig, ax = plt.subplots()\nax.plot([1, 2], [3, 4])\n"
                    "ax.set_xlabel('length L')\nax.set_ylabel('time (ms)')\nplt.show()")
        assert _run_cell(kernel, labelled)[1] == []
        unlabelled = ("fig, ax = plt.subplots()\nax.plot([1, 2], [3, 4])\n"
                      "ax.set_xlabel('length L')\nplt.show()")
        _, errors = _run_cell(kernel, unlabelled)
        assert errors == ["AssertionError: figure without axis labels: axes 0 '': no y label"]
    finally:
        kernel.stop()
