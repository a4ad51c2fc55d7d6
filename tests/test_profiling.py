"""attention_src.profiling: tensor memory, matrix-product work, CPU time, fitted exponents.

References: byte counts computed by hand from the shapes (``numel * element_size``),
PyTorch's own ``torch.utils.flop_counter.FlopCounterMode`` (2 FLOPs per multiply-add) and
exact power laws.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

from attention_src import profiling
from attention_src.profiling import TensorMemory, best_ms, matmul_macs, peak_bytes, slope
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
