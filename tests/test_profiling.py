"""attention_src.profiling: tensor memory, matrix-product work, CPU time, fitted exponents.

References: byte counts computed by hand from the shapes (``numel * element_size``),
PyTorch's own ``torch.utils.flop_counter.FlopCounterMode`` (2 FLOPs per multiply-add),
exact power laws, and for the CPU-time split, work whose cost is known: one page fault per
4 KiB page of fresh memory (numpy buffers), a spin and a sleep of known length, a worker
thread, and fake clocks.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import threading
import time
import types
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from attention_src import profiling
from attention_src.profiling import (
    HEAP_STATES,
    KEEP_HEAP_ENV,
    CpuCost,
    TensorMemory,
    best_ms,
    best_ms_interleaved,
    heap_control_missing,
    huge_page_mode,
    matmul_macs,
    mean_cost,
    measure_call,
    median_cost,
    peak_bytes,
    set_heap,
    slope,
)
from tests.conftest import PROPERTY


def _plain_attention(query, key, value):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])  # (..., L, L)
    weights = torch.softmax(scores, dim=-1)  # (..., L, L)
    return weights @ value  # (..., L, d_v)


@pytest.mark.parametrize(("L", "d_k", "d_v"), [(16, 8, 8), (64, 16, 4), (100, 8, 12)])
def test_plain_attention_allocates_two_score_matrices_and_the_output(L, d_k, d_v):
    g = torch.Generator().manual_seed(L)
    q, k = torch.randn(2, 1, L, d_k, generator=g)
    v = torch.randn(1, L, d_v, generator=g)
    # scores and weights, L x L float32 each, alive together in softmax, plus the output
    assert peak_bytes(_plain_attention, q, k, v) == 4 * (2 * L * L + L * d_v)


def test_views_and_in_place_operations_are_not_new_memory():
    x = torch.randn(64, 32)
    assert peak_bytes(lambda t: t.transpose(0, 1), x) == 0
    assert peak_bytes(lambda t: t[:10].view(5, 64), x) == 0
    y = x.clone()
    assert peak_bytes(lambda t: t.mul_(2.0).add_(1.0), y) == 0
    assert peak_bytes(lambda t: t * 2.0, x) == 64 * 32 * 4  # a new tensor is counted


def test_memory_is_released_when_the_last_tensor_on_it_is_freed():
    n_bytes = 1000 * 8

    def two_in_turn():
        a = torch.ones(1000, dtype=torch.float64)
        view = a[:10]  # a second tensor on a's storage
        del a
        b = torch.zeros(1000, dtype=torch.float64)  # a still alive through the view
        del view  # now a's storage is gone
        c = torch.zeros(1000, dtype=torch.float64)  # reuses the freed amount
        return b, c

    with torch.no_grad(), TensorMemory() as mem:
        out = two_in_turn()
        assert mem.now == 2 * n_bytes
        del out
    assert mem.peak == 2 * n_bytes  # a and b together, never a, b and c
    assert mem.now == 0 and mem.live == {}


def test_calls_are_counted_by_operator_name():
    x = torch.randn(4, 4)
    with TensorMemory() as mem:
        torch.softmax(x @ x, dim=-1)
        x @ x
    assert mem.calls["mm"] == 2 and mem.calls["_softmax"] == 1


@pytest.mark.parametrize(
    "product",
    [
        lambda g: torch.randn(7, 5, generator=g) @ torch.randn(5, 3, generator=g),  # mm
        lambda g: torch.randn(4, 7, 5, generator=g) @ torch.randn(4, 5, 3, generator=g),  # bmm
        lambda g: torch.randn(2, 3, 7, 5, generator=g) @ torch.randn(5, 9, generator=g),
        lambda g: torch.addmm(torch.randn(7, 3, generator=g), torch.randn(7, 5, generator=g),
                              torch.randn(5, 3, generator=g)),
        lambda g: torch.baddbmm(torch.randn(2, 7, 3, generator=g),
                                torch.randn(2, 7, 5, generator=g),
                                torch.randn(2, 5, 3, generator=g)),
    ],
)
def test_macs_equal_flop_counter_mode_on_plain_products(product):
    counter = FlopCounterMode(display=False)
    with counter:
        product(torch.Generator().manual_seed(0))
    macs = matmul_macs(product, torch.Generator().manual_seed(0))
    assert macs > 0 and 2 * macs == counter.get_total_flops()


def test_in_place_addmm_counts_as_addmm():
    # FlopCounterMode does not count the in-place addmm_ that blockwise attention uses to
    # accumulate P V; the counter must, with the work of the same product out of place
    def in_place(g):
        return torch.randn(7, 3, generator=g).addmm_(torch.randn(7, 5, generator=g),
                                                     torch.randn(5, 3, generator=g))

    counter = FlopCounterMode(display=False)
    with counter:
        torch.addmm(torch.randn(7, 3), torch.randn(7, 5), torch.randn(5, 3))
    assert 2 * matmul_macs(in_place, torch.Generator().manual_seed(0)) == (
        counter.get_total_flops()) == 2 * 7 * 5 * 3


def test_best_ms_is_the_minimum_cpu_time_after_a_warm_up():
    calls = []

    def work():
        calls.append(1)
        torch.randn(200, 200) @ torch.randn(200, 200)

    ms = best_ms(work, repeats=3)
    assert len(calls) == 4  # one warm-up and three timed calls
    assert 0 < ms < 10_000


@given(p=st.floats(-3, 3), c=st.floats(0.01, 100),
       xs=st.lists(st.floats(1, 1e4), min_size=2, max_size=6, unique=True))
@PROPERTY
def test_slope_recovers_the_exponent_of_a_power_law(p, c, xs):
    if max(xs) / min(xs) < 1.5:
        return  # too close together for a well-conditioned fit
    assert slope(xs, [c * x**p for x in xs]) == pytest.approx(p, abs=1e-6)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        peak_bytes(3)
    with pytest.raises(TypeError, match="fn must be callable, got str"):
        matmul_macs("mm")
    with pytest.raises(ValueError, match="repeats must be positive, got 0"):
        best_ms(lambda: None, repeats=0)
    with pytest.raises(ValueError, match=r"same length >= 2, got shapes \(3,\), \(2,\)"):
        slope([1, 2, 4], [1, 2])
    with pytest.raises(ValueError, match=r"same length >= 2, got shapes \(1,\), \(1,\)"):
        slope([1], [1])
    with pytest.raises(ValueError, match="positive and finite"):
        slope([1, 2], [0, 1])
    with pytest.raises(ValueError, match="must not all be equal"):
        slope([2, 2], [1, 3])


# ------------------------------------------- contract details the tests above left open


class _FakeClock:
    """Stands in for the ``time`` module inside ``attention_src.profiling``: its thread clock
    moves only when the timed function says so, so the expected best time is exact."""

    def __init__(self, start: float = 100.0):
        self.now = start  # a clock that does not start at 0, as a real thread clock

    def thread_time(self) -> float:
        return self.now


@pytest.mark.parametrize(("repeats", "best"), [(None, 3.0), (1, 4.0), (4, 1.0)])
def test_best_ms_is_the_minimum_of_the_timed_calls_in_ms(monkeypatch, repeats, best):
    clock = _FakeClock()
    monkeypatch.setattr(profiling, "time", clock)
    # seconds each call takes: the 0.5 s warm-up is not timed; then 4, 3, 5, 1 ms
    durations = iter([0.5, 0.004, 0.003, 0.005, 0.001])

    def work():
        clock.now += next(durations)

    # the default is 3 timed calls: min(4, 3, 5) ms, not the 1 ms of a fourth call
    ms = best_ms(work) if repeats is None else best_ms(work, repeats=repeats)
    assert ms == pytest.approx(best, abs=1e-9)


def test_keyword_arguments_are_passed_to_the_measured_function():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    assert matmul_macs(torch.mm, a, mat2=b) == 7 * 5 * 3
    # float64 ones: 8 bytes each; float32 (the default dtype) would be half
    assert peak_bytes(torch.ones, 1000, dtype=torch.float64) == 8000


def test_macs_add_up_over_the_products_of_a_block():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    c, d = torch.randn(4, 6, 2), torch.randn(4, 2, 9)
    assert matmul_macs(lambda: (a @ b, c @ d)) == 7 * 5 * 3 + 4 * 6 * 2 * 9


def test_an_out_argument_is_not_new_memory():
    # the out= tensor reaches the operator as a keyword argument: earlier memory
    x, y = torch.randn(64, 32), torch.empty(64, 32)
    assert peak_bytes(lambda: torch.mul(x, 2.0, out=y)) == 0


def test_every_output_of_a_multi_output_operator_is_counted():
    # a storage of one byte counts one byte; an empty output counts nothing and does not stop
    # the count of the outputs after it (the optimisers' _foreach_ kernels return lists)
    assert peak_bytes(lambda: torch.zeros(1, dtype=torch.uint8)) == 1
    assert peak_bytes(torch._foreach_add, [torch.empty(0), torch.ones(10)], 1.0) == 10 * 4


def test_slope_boundaries_and_exact_inputs():
    # two points are enough, and 1 is a valid x and y (log 1 = 0)
    assert slope([1, 2], [1, 4]) == pytest.approx(2.0, abs=1e-12)
    # exact rationals and ints beyond int64 are real numbers too: converted to float
    assert slope([Fraction(1), Fraction(2), Fraction(4)],
                 [Fraction(1, 2), Fraction(2), Fraction(8)]) == pytest.approx(2.0, abs=1e-12)
    assert slope([2**70, 2**71, 2**72], [2**90, 2**93, 2**96]) == pytest.approx(3.0, abs=1e-9)


@pytest.mark.parametrize(
    ("xs", "ys"),
    [([0.0, 1.0], [1.0, 2.0]), ([-1.0, 1.0], [1.0, 2.0]), ([1.0, math.inf], [1.0, 2.0]),
     ([1.0, 2.0], [1.0, math.nan]), ([1.0, 2.0], [-1.0, 2.0])],
)
def test_slope_rejects_each_non_positive_or_non_finite_value(xs, ys):
    with pytest.raises(ValueError, match=r"^xs and ys must be positive and finite, got"):
        slope(xs, ys)


def test_slope_rejects_two_dimensional_input():
    with pytest.raises(ValueError, match=r"^xs and ys must be 1-D .* shapes \(2, 2\), \(2, 2\)"):
        slope([[1, 2], [3, 4]], [[1, 2], [3, 4]])


_LIBRARIES = []  # custom-operator libraries defined by these tests, kept alive


def _view_and_copy_op():
    """A custom operator that returns a view of its input, then a fresh copy of it."""
    try:
        return torch.ops.tensor_memory_test.view_and_copy
    except AttributeError:
        pass
    lib = torch.library.Library("tensor_memory_test", "DEF")
    lib.define("view_and_copy(Tensor(a) x) -> (Tensor(a), Tensor)")
    lib.impl("view_and_copy", lambda x: (x.view(x.shape), x.clone()),
             "CompositeExplicitAutograd")
    _LIBRARIES.append(lib)  # deleting a Library would remove its operator
    return torch.ops.tensor_memory_test.view_and_copy


def test_each_output_is_judged_on_its_own_after_a_view():
    # the view (earlier memory) is not counted, the copy after it is
    x = torch.ones(10)
    with TensorMemory() as mem:
        view, copy = _view_and_copy_op()(x)
        assert mem.now == 10 * 4 and mem.calls == {"view_and_copy": 1}
    assert peak_bytes(_view_and_copy_op(), x) == 10 * 4


# ------------------------------------------------ CPU time split into user and system time

_MIB64 = 64 * 2**20
_PAGE = 4096


def _fresh_faults_min() -> int:
    """The fewest faults that 64 MiB of fresh memory can take: one per 4 KiB page, or one
    per 2 MiB page where transparent huge pages are on for every mapping ("always")."""
    always = huge_page_mode() == "always"
    return _MIB64 // (2 * 2**20 if always else _PAGE)


def _touch_fresh_memory():
    """Write one byte per page of a fresh 64 MiB buffer: above glibc's mmap threshold, so new
    pages from the kernel, each a minor fault on its first write. (A bytearray: plain malloc
    in this thread; numpy would ask the kernel for 2 MiB pages, 512 times fewer faults.)"""
    buf = bytearray(_MIB64)
    buf[::_PAGE] = b"\x01" * (_MIB64 // _PAGE)
    return buf


_FRESH_CHILD = """
import json
from attention_src.profiling import mean_cost, measure_call
from tests.test_profiling import _MIB64, _touch_fresh_memory
{body}
print(json.dumps(cost._asdict()))
"""


def _cost_in_a_fresh_process(body: str) -> profiling.CpuCost:
    """The ``cost`` that ``body`` computes in a new Python process. A test worker's allocator
    has a history: a freed region at the top of its heap can hand back a 64 MiB buffer whose
    pages are already the process's, without a single fault (it happened in CI to
    ``measure_call``, and to ``mean_cost`` once the workers ran the test files in another
    order). A new process has no such region, so the buffer is fresh memory by construction."""
    import json

    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", _FRESH_CHILD.format(body=body)], env=env,
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"the child failed:\n{done.stderr[-2000:]}"
    return profiling.CpuCost(**json.loads(done.stdout))


def test_measure_call_returns_the_result_and_counts_the_faults_of_fresh_memory():
    """In a fresh process (see ``_cost_in_a_fresh_process``)."""
    cost = _cost_in_a_fresh_process(
        "out, cost = measure_call(_touch_fresh_memory)\n"
        "assert len(out) == _MIB64 and out[0] == 1")
    # one fault per 4 KiB page (a few more for the allocator's bookkeeping)
    assert _MIB64 // _PAGE <= cost.minor_faults < 1.1 * _MIB64 // _PAGE
    assert cost.system_ms > 0  # the kernel zero-fills each page: system time, not user time
    # the precise clock and the tick-sampled split agree to a few ticks
    assert cost.user_ms + cost.system_ms == pytest.approx(cost.cpu_ms, rel=0.2, abs=20)


def test_reused_memory_costs_no_faults():
    buf = _touch_fresh_memory()  # faulted in here, before the measurement
    twos = b"\x02" * (_MIB64 // _PAGE)

    def write():
        buf[::_PAGE] = twos

    _, cost = measure_call(write)
    assert cost.minor_faults < 100


def test_user_time_is_the_program_s_own_work_and_wall_time_includes_waiting():
    def spin_then_sleep():
        total = 0
        # this thread's own instructions, no system call: about 0.1 s of user time, so the
        # kernel's own accounting noise (10 ms was seen on a loaded machine) cannot outweigh it
        for i in range(5_000_000):
            total += i
        time.sleep(0.1)  # waiting: wall-clock time, no CPU time
        return total

    total, cost = measure_call(spin_then_sleep)
    assert total == 5_000_000 * 4_999_999 // 2
    assert cost.cpu_ms > 0
    assert cost.wall_ms >= 100 + 0.9 * cost.cpu_ms  # the sleep is wall time, not CPU time
    assert cost.user_ms >= cost.system_ms


def test_thread_scope_sees_only_the_calling_thread_and_process_scope_all_threads():
    def in_another_thread():
        worker = threading.Thread(target=_touch_fresh_memory)
        worker.start()
        worker.join()

    _, mine = measure_call(in_another_thread, scope="thread")
    _, everyone = measure_call(in_another_thread, scope="process")
    _, default = measure_call(in_another_thread)
    assert mine.minor_faults < 1000 and default.minor_faults < 1000  # default: the thread
    assert everyone.minor_faults >= _fresh_faults_min()


class _FakeUsage:
    """Stands in for ``resource`` and ``time`` inside ``attention_src.profiling``: each call
    of the measured function moves the clocks and the fault counter by given amounts."""

    RUSAGE_SELF, RUSAGE_THREAD = "self", "thread"

    def __init__(self):
        self.wall, self.cpu, self.user, self.system, self.faults = 10.0, 5.0, 20.0, 30.0, 40
        self.asked = []

    def getrusage(self, who):
        self.asked.append(who)
        return types.SimpleNamespace(ru_utime=self.user, ru_stime=self.system,
                                     ru_minflt=self.faults)

    def perf_counter(self):
        return self.wall

    def thread_time(self):
        self.asked.append("thread clock")
        return self.cpu

    def process_time(self):
        self.asked.append("process clock")
        return self.cpu

    def step(self, wall, cpu, user, system, faults):
        self.wall += wall
        self.cpu += cpu
        self.user += user
        self.system += system
        self.faults += faults


@pytest.mark.parametrize(("repeats", "median"), [(None, (5.0, 6.0, 3.0, 2.0, 30)),
                                                 (1, (9.0, 8.0, 1.0, 4.0, 10)),
                                                 (2, (7.0, 7.0, 2.0, 5.0, 15))])
def test_median_cost_is_the_median_of_each_field_after_a_warm_up(monkeypatch, repeats, median):
    fake = _FakeUsage()
    monkeypatch.setattr(profiling, "resource", fake)
    monkeypatch.setattr(profiling, "time", fake)
    monkeypatch.setattr(profiling, "_SCOPES", {"thread": "thread", "process": "self"})
    # seconds per call: the warm-up (huge) is not measured; then five calls
    steps = iter([(100, 100, 100, 100, 1000), (0.009, 0.008, 0.001, 0.004, 10),
                  (0.005, 0.006, 0.003, 0.006, 20), (0.002, 0.004, 0.005, 0.002, 40),
                  (0.001, 0.003, 0.004, 0.001, 50), (0.006, 0.007, 0.002, 0.0, 30)])
    calls = []

    def work():
        calls.append(torch.is_grad_enabled())
        fake.step(*next(steps))

    cost = median_cost(work) if repeats is None else median_cost(work, repeats=repeats)
    assert len(calls) == 1 + (5 if repeats is None else repeats)  # the default is 5
    assert not any(calls)  # no autograd
    assert cost == pytest.approx(CpuCost(*median), abs=1e-9)
    assert set(fake.asked) == {"thread", "thread clock"}
    fake.asked.clear()
    median_cost(lambda: fake.step(0, 0, 0, 0, 0), repeats=1, scope="process")
    assert set(fake.asked) == {"self", "process clock"}


def test_cpu_cost_functions_name_each_bad_argument():
    with pytest.raises(TypeError, match="fn must be callable, got int"):
        measure_call(3)
    with pytest.raises(TypeError, match="fn must be callable, got str"):
        median_cost("f")
    with pytest.raises(ValueError, match="scope must be 'thread' or 'process', got 'all'"):
        measure_call(lambda: None, scope="all")
    with pytest.raises(ValueError, match="scope must be 'thread' or 'process', got None"):
        median_cost(lambda: None, scope=None)
    with pytest.raises(ValueError, match="repeats must be positive, got 0"):
        median_cost(lambda: None, repeats=0)
    with pytest.raises(TypeError, match="repeats must be an int, got float"):
        median_cost(lambda: None, repeats=2.0)


_CHILD = """
import resource
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
ones = b"\x01" * (64 * 2**20 // 4096)
first = bytearray(64 * 2**20); first[::4096] = ones; del first
before = faults()
second = bytearray(64 * 2**20); second[::4096] = ones
print(faults() - before)
"""


@pytest.mark.parametrize("keep", [False, True])
def test_keep_heap_env_lets_a_repeated_allocation_reuse_its_pages(keep):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    if keep:
        env.update(KEEP_HEAP_ENV)
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                         text=True, check=True)
    faults = int(out.stdout.strip())
    if keep:  # the second buffer is the first one's pages, already faulted in
        assert faults < 1000
    else:  # a new mapping: one fault per page again
        assert faults >= _fresh_faults_min()


def test_thread_scope_without_per_thread_accounting_says_what_to_use(monkeypatch):
    # where the OS has no RUSAGE_THREAD (not Linux), the thread scope is refused by name
    monkeypatch.setattr(profiling, "_SCOPES", {"thread": None, "process": "self"})
    with pytest.raises(ValueError, match=r"^scope='thread' needs RUSAGE_THREAD \(Linux\); "
                                         r"use scope='process'$"):
        measure_call(lambda: None)


def test_keep_heap_env_uses_documented_values_only():
    # mallopt(3): M_MMAP_MAX 0 disables mmap; M_TRIM_THRESHOLD has no upper limit; the mmap
    # threshold, whose documented maximum is 32 MiB on 64-bit systems, is not needed at all
    assert KEEP_HEAP_ENV == {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**36)}


# ------------------------------------------------ the allocator fixed in one of two states

_SET_HEAP_CHILD = """
import resource, sys
from attention_src.profiling import set_heap
ones = b"\\x01" * (64 * 2**20 // 4096)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for state in sys.argv[1:]:
    set_heap(state)
    first = bytearray(64 * 2**20); first[::4096] = ones; del first
    before = faults()
    second = bytearray(64 * 2**20); second[::4096] = ones; del second
    print(faults() - before)
"""


@pytest.mark.skipif(heap_control_missing() is not None, reason="needs Linux with glibc")
def test_set_heap_keeps_or_returns_freed_memory_and_switches_both_ways():
    # in a child process: mallopt's settings cannot be undone, and would change this one's
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    states = ["returned", "kept", "returned", "kept"]
    out = subprocess.run([sys.executable, "-c", _SET_HEAP_CHILD, *states], env=env,
                         capture_output=True, text=True, check=True)
    faults = [int(line) for line in out.stdout.split()]
    for state, count in zip(states, faults, strict=True):
        if state == "kept":  # the second buffer is the first one's pages, faulted in before
            assert count < 1000
        else:  # a fresh mapping: one fault per page again
            assert count >= _fresh_faults_min()


class _FakeLibc:
    """Stands in for ``ctypes.CDLL(None)``: records each ``mallopt`` call, answers ``ok``."""

    def __init__(self, ok: int = 1):
        self.calls = []

        def mallopt(param, value):  # a function: ctypes' argtypes can be set on it
            self.calls.append((param, value))
            return ok

        self.mallopt = mallopt


@pytest.mark.parametrize("state", ["kept", "returned"])
def test_set_heap_passes_the_documented_values_in_order(monkeypatch, state):
    libc = _FakeLibc()
    monkeypatch.setattr(profiling, "heap_control_missing", lambda: None)
    monkeypatch.setattr(profiling.ctypes, "CDLL", lambda name: libc)
    set_heap(state)
    # malloc.h: M_TRIM_THRESHOLD -1, M_MMAP_THRESHOLD -3, M_MMAP_MAX -4; mallopt(3): mmap off
    # with M_MMAP_MAX 0 (default 65536), no trimming with -1, thresholds of 128 KiB
    expected = {"kept": [(-4, 0), (-1, -1)],
                "returned": [(-4, 65536), (-3, 131072), (-1, 131072)]}[state]
    assert libc.calls == expected == list(HEAP_STATES[state])


def test_set_heap_reports_a_value_mallopt_refuses(monkeypatch):
    libc = _FakeLibc(ok=0)
    monkeypatch.setattr(profiling, "heap_control_missing", lambda: None)
    monkeypatch.setattr(profiling.ctypes, "CDLL", lambda name: libc)
    with pytest.raises(RuntimeError, match=r"^mallopt\(-4, 0\) was refused$"):
        set_heap("kept")
    assert libc.calls == [(-4, 0)]  # stops at the first refusal


@pytest.mark.parametrize("state", ["default", "KEPT", 3, None])
def test_set_heap_names_a_state_it_does_not_know(state):
    with pytest.raises(ValueError, match=r"^state must be one of \('kept', 'returned'\), got "
                       + re.escape(repr(state)) + "$"):
        set_heap(state)


@pytest.mark.parametrize(("system", "libc", "reason"), [
    ("darwin", ("", ""), "the allocator settings need Linux with glibc; this system is darwin"),
    ("win32", ("", ""), "the allocator settings need Linux with glibc; this system is win32"),
    ("linux", ("", ""), "the allocator settings need glibc; this Linux has another C library"),
    ("linux", ("musl", "1.2"), "the allocator settings need glibc; this Linux has musl"),
    ("linux", ("glibc", "2.36"), None),
])
def test_heap_control_says_why_it_cannot_work(monkeypatch, system, libc, reason):
    monkeypatch.setattr(profiling, "sys", types.SimpleNamespace(platform=system))
    monkeypatch.setattr(profiling.platform, "libc_ver", lambda: libc)
    assert heap_control_missing() == reason
    if reason is not None:  # set_heap refuses with the same sentence, before any mallopt
        monkeypatch.setattr(profiling.ctypes, "CDLL", lambda name: pytest.fail("called"))
        with pytest.raises(RuntimeError, match="^" + re.escape(reason) + "$"):
            set_heap("kept")


# ------------------------------------------- mean cost over calls, interleaved best times


@pytest.mark.parametrize(("min_ms", "calls"), [(None, 4), (60.0, 2), (1, 1), (90, 3)])
def test_mean_cost_averages_over_calls_that_fill_min_ms(monkeypatch, min_ms, calls):
    fake = _FakeUsage()
    monkeypatch.setattr(profiling, "resource", fake)
    monkeypatch.setattr(profiling, "time", fake)
    monkeypatch.setattr(profiling, "_SCOPES", {"thread": "thread", "process": "self"})
    grads = []

    def work():  # each call: 40 ms wall, 30 ms CPU, 20 ms user, 10 ms system, 6 faults
        grads.append(torch.is_grad_enabled())
        fake.step(0.04, 0.03, 0.02, 0.01, 6)

    # the default is 100 ms: four calls of 30 ms (120 ms), after three warm-up calls
    cost = mean_cost(work) if min_ms is None else mean_cost(work, min_ms)
    assert len(grads) == 3 + calls and not any(grads)
    assert cost == pytest.approx(CpuCost(40.0, 30.0, 20.0, 10.0, 6.0), abs=1e-9)
    grads.clear()
    mean_cost(work, 30, warm_up=0)  # exactly 30 ms: one call is enough
    assert len(grads) == 1
    fake.asked.clear()
    mean_cost(work, 1, warm_up=1, scope="process")
    assert set(fake.asked) == {"self", "process clock"}


def test_mean_cost_counts_the_faults_of_fresh_memory_per_call():
    """In a fresh process (see ``_cost_in_a_fresh_process``): each call's 64 MiB buffer is
    freed before the next, handed back to the kernel, and faulted in anew."""
    cost = _cost_in_a_fresh_process("cost = mean_cost(_touch_fresh_memory, 1, warm_up=1)")
    assert _fresh_faults_min() <= cost.minor_faults < 1.1 * _MIB64 // _PAGE
    assert cost.system_ms > 0


def test_best_ms_interleaved_takes_each_call_s_fastest_round_in_turns(monkeypatch):
    order = []
    times = {"a": iter([5.0, 3.0, 4.0, 9.0, 8.0, 1.0]), "b": iter([2.0, 7.0, 6.0, 6.0, 1.5, 6.0])}

    def fake_best_ms(fn, repeats=3, *, device=None):
        assert repeats == 1 and device is None  # the device is passed on to best_ms
        key = fn()
        order.append(key)
        return next(times[key])

    monkeypatch.setattr(profiling, "best_ms", fake_best_ms)
    best = best_ms_interleaved({"a": lambda: "a", "b": lambda: "b"})
    assert best == {"a": 3.0, "b": 1.5} and list(best) == ["a", "b"]  # 5 rounds by default
    assert order == ["a", "b"] * 5  # in turns, not all rounds of one call first
    order.clear()
    assert best_ms_interleaved({"b": lambda: "b", "a": lambda: "a"}, rounds=1) == {
        "b": 6.0, "a": 1.0}
    assert order == ["b", "a"]


def test_mean_cost_and_best_ms_interleaved_name_each_bad_argument():
    with pytest.raises(TypeError, match="^fn must be callable, got int$"):
        mean_cost(3)
    with pytest.raises(TypeError, match="^min_ms must be a number of milliseconds, got str$"):
        mean_cost(lambda: None, "100")
    with pytest.raises(TypeError, match="^min_ms must be a number of milliseconds, got bool$"):
        mean_cost(lambda: None, True)
    for bad in (0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="^min_ms must be positive and finite, got "):
            mean_cost(lambda: None, bad)
    with pytest.raises(TypeError, match="^warm_up must be an int, got float$"):
        mean_cost(lambda: None, warm_up=1.0)
    with pytest.raises(ValueError, match="^warm_up must be at least 0, got -1$"):
        mean_cost(lambda: None, warm_up=-1)
    with pytest.raises(ValueError, match="^scope must be 'thread' or 'process', got 'all'$"):
        mean_cost(lambda: None, scope="all")
    with pytest.raises(TypeError, match=r"^calls must be a mapping \{key: function\}, got list$"):
        best_ms_interleaved([lambda: None])
    with pytest.raises(TypeError, match=r"^calls\['b'\] must be callable, got int$"):
        best_ms_interleaved({"a": lambda: None, "b": 2})
    with pytest.raises(ValueError, match="^rounds must be positive, got 0$"):
        best_ms_interleaved({"a": lambda: None}, rounds=0)


def test_mean_cost_stops_at_exactly_min_ms_of_the_default_100(monkeypatch):
    fake = _FakeUsage()
    monkeypatch.setattr(profiling, "resource", fake)
    monkeypatch.setattr(profiling, "time", fake)
    monkeypatch.setattr(profiling, "_SCOPES", {"thread": "thread", "process": "self"})
    fake.cpu = 0.0  # from 0, the sums below are exact in binary floating point
    calls = []

    def work():  # 50 ms of CPU a call: two calls are exactly 0.1 s (0.05 + 0.05 == 0.1)
        calls.append(1)
        fake.step(0.05, 0.05, 0.05, 0.0, 0)

    mean_cost(work, warm_up=0)  # 100 ms by default: two calls reach it exactly
    assert len(calls) == 2
    calls.clear()
    mean_cost(work, 100.05, warm_up=0)  # 0.1 s falls short of 100.05 ms: a third call
    assert len(calls) == 3


# ----------------------------------------------------------------------------- huge_page_mode


@pytest.mark.parametrize("text, mode", [
    ("always [madvise] never\n", "madvise"),   # this machine's file, as Linux writes it
    ("[always] madvise never\n", "always"),
    ("always madvise [never]\n", "never"),
    ("always madvise never\n", "unknown"),      # no bracketed word
    ("never] [\n", "unknown"),                  # brackets the wrong way round
    ("", "unknown"),
])
def test_huge_page_mode_reads_the_bracketed_word(tmp_path, text, mode):
    path = tmp_path / "enabled"
    path.write_text(text)
    assert huge_page_mode(path) == mode
    assert huge_page_mode(str(path)) == mode


def test_huge_page_mode_is_unknown_without_the_file(tmp_path):
    assert huge_page_mode(tmp_path / "absent") == "unknown"
    assert huge_page_mode(tmp_path) == "unknown"  # a folder cannot be read as text


def test_huge_page_mode_of_this_kernel_is_one_of_linux_modes():
    expected = {"always", "madvise", "never"} if Path(profiling.HUGE_PAGE_MODE_FILE).exists() \
        else {"unknown"}
    assert huge_page_mode() in expected


@pytest.mark.parametrize("bad", [None, 3, b"/sys/kernel/mm/transparent_hugepage/enabled"])
def test_huge_page_mode_rejects_a_path_of_the_wrong_type(bad):
    with pytest.raises(TypeError, match=f"got {type(bad).__name__}"):
        huge_page_mode(bad)
