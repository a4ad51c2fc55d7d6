"""attention_src.stats against published tables, hand-computed examples and closed forms.

References independent of the implementation: Student's t quantiles from printed tables and
from the closed forms for 1, 2 and 4 degrees of freedom; standard errors worked by hand; the
binomial standard error against the sample standard error of a 0/1 vector; exact rounding
checked with ``fractions.Fraction``.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attention_src.stats import (
    binomial_se,
    exact_share,
    mean_se,
    paired_t_interval,
    round_down,
    round_up,
    round_up_sci,
    t_quantile,
)
from tests.conftest import PROPERTY, randn, seeds

# ---------------------------------------------------------------- t quantiles


@pytest.mark.parametrize(
    ("p", "df", "table"),
    [  # two-sided 95 %, 90 %, 99 % columns of a printed t table (3 decimals)
        (0.975, 4, 2.776),
        (0.975, 1, 12.706),
        (0.975, 9, 2.262),
        (0.975, 30, 2.042),
        (0.95, 10, 1.812),
        (0.995, 4, 4.604),
        (0.9975, 4, 5.598),  # Bonferroni for 10 comparisons, 5 seeds
        (0.025, 4, -2.776),
    ],
)
def test_t_quantile_matches_printed_tables(p, df, table):
    assert abs(t_quantile(p, df) - table) < 5e-4


def test_t_quantile_tends_to_the_normal_quantile():
    assert abs(t_quantile(0.975, 1e7) - 1.959964) < 1e-5


def _t4_cdf(t: float) -> float:
    x = t / math.sqrt(4 + t * t)
    return 0.5 + 0.75 * (x - x**3 / 3)


@PROPERTY
@given(st.floats(0.001, 0.999))
def test_t_quantile_inverts_closed_form_cdfs(p):
    # df = 1 (Cauchy) and df = 2 have closed-form quantiles; df = 4 a closed-form CDF
    assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9, abs=1e-9)
    assert t_quantile(p, 2) == pytest.approx(
        (2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-9, abs=1e-9
    )
    assert _t4_cdf(t_quantile(p, 4)) == pytest.approx(p, abs=1e-12)


def test_t_quantile_rejects_bad_input():
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"p must be a probability in \(0, 1\), got"):
            t_quantile(bad, 4)
    with pytest.raises(ValueError, match="df must be positive, got 0.0"):
        t_quantile(0.9, 0)
    with pytest.raises(ValueError, match="df must be finite, got nan"):
        t_quantile(0.9, math.nan)
    with pytest.raises(TypeError, match="p must be a real number, got str"):
        t_quantile("0.975", 4)
    with pytest.raises(TypeError, match="df must be a real number, got bool"):
        t_quantile(0.975, True)


# ---------------------------------------------------------------- mean and standard error


def test_mean_se_by_hand():
    mean, se = mean_se(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64))
    # mean 2.5; squared deviations 2.25 + 0.25 + 0.25 + 2.25 = 5, s^2 = 5 / 3
    assert float(mean) == 2.5
    assert float(se) == pytest.approx(math.sqrt(5 / 3) / 2, abs=1e-15)


def test_mean_se_along_a_dimension_by_hand():
    values = torch.tensor([[0.0, 2.0], [4.0, 2.0], [8.0, 2.0]], dtype=torch.float64)
    mean, se = mean_se(values, dim=0)  # (3, 2) -> (2,)
    torch.testing.assert_close(mean, torch.tensor([4.0, 2.0], dtype=torch.float64))
    # column 0: s^2 = (16 + 0 + 16) / 2 = 16, se = 4 / sqrt(3); column 1 is constant
    torch.testing.assert_close(se, torch.tensor([4 / math.sqrt(3), 0.0], dtype=torch.float64))


@PROPERTY
@given(seeds, st.lists(st.integers(2, 5), min_size=1, max_size=3), st.data())
def test_mean_se_equals_numpy(seed, shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    values = randn(seed, *shape)
    mean, se = mean_se(values, dim=dim)
    ref = values.numpy()
    np.testing.assert_allclose(mean.numpy(), ref.mean(axis=dim), atol=1e-12)
    n = ref.shape[dim]
    np.testing.assert_allclose(se.numpy(), ref.std(axis=dim, ddof=1) / np.sqrt(n), atol=1e-12)


def test_mean_se_rejects_bad_input():
    with pytest.raises(ValueError, match=r"at least 2 values along dim -1, got shape \(3, 1\)"):
        mean_se(torch.ones(3, 1))
    with pytest.raises(ValueError, match=r"dim 2 is out of range for values of shape \(3, 4\)"):
        mean_se(torch.ones(3, 4), dim=2)
    with pytest.raises(TypeError, match="values must be a floating-point tensor, got dtype"):
        mean_se(torch.ones(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="values must be a torch.Tensor, got list"):
        mean_se([1.0, 2.0])
    with pytest.raises(TypeError, match="dim must be an int, got float"):
        mean_se(torch.ones(3), dim=0.0)


# ---------------------------------------------------------------- binomial standard error


def test_binomial_se_by_hand():
    assert binomial_se(0.5, 100) == pytest.approx(0.05, abs=1e-15)  # sqrt(0.25 / 100)
    assert binomial_se(0.9, 400) == pytest.approx(0.015, abs=1e-15)  # sqrt(0.09 / 400)
    assert binomial_se(0.0, 10) == 0.0 and binomial_se(1.0, 10) == 0.0


@PROPERTY
@given(st.integers(2, 200), st.data())
def test_binomial_se_is_the_se_of_a_zero_one_sample(n, data):
    # a 0/1 vector with k ones: its sample variance is n/(n-1) p(1-p), p = k/n
    k = data.draw(st.integers(0, n))
    outcomes = torch.zeros(n, dtype=torch.float64)
    outcomes[:k] = 1.0
    _, se = mean_se(outcomes)
    assert binomial_se(k / n, n) == pytest.approx(
        float(se) * math.sqrt((n - 1) / n), rel=1e-12, abs=1e-15
    )


def test_binomial_se_rejects_bad_input():
    with pytest.raises(ValueError, match=r"p must be a proportion in \[0, 1\], got 1.2"):
        binomial_se(1.2, 10)
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        binomial_se(0.5, 0)
    with pytest.raises(TypeError, match="n must be an int, got float"):
        binomial_se(0.5, 10.0)
    with pytest.raises(ValueError, match="p must be finite, got nan"):
        binomial_se(math.nan, 10)


# ---------------------------------------------------------------- paired t-interval

A5 = torch.tensor([3.0, 4.0, 5.0, 6.0, 7.0], dtype=torch.float64)
B5 = torch.tensor([2.0, 2.0, 2.0, 2.0, 2.0], dtype=torch.float64)


def test_paired_t_interval_by_hand():
    # differences 1..5: mean 3, s^2 = 10 / 4 = 2.5, se = sqrt(0.5); t_{0.975,4} = 2.776 (table)
    mean, low, high = paired_t_interval(A5, B5)
    assert mean == 3.0
    assert low == pytest.approx(3 - 2.776 * math.sqrt(0.5), abs=5e-4)
    assert high == pytest.approx(3 + 2.776 * math.sqrt(0.5), abs=5e-4)
    # Bonferroni for 10 comparisons: t_{1 - 0.05/20, 4} = t_{0.9975,4} = 5.598 (table)
    mean, low, high = paired_t_interval(A5, B5, n_comparisons=10)
    assert (low, high) == pytest.approx((3 - 5.598 * 0.5**0.5, 3 + 5.598 * 0.5**0.5), abs=5e-4)
    # 90 %: t_{0.95,4} = 2.132 (table)
    _, low, _ = paired_t_interval(A5, B5, level=0.9)
    assert low == pytest.approx(3 - 2.132 * math.sqrt(0.5), abs=5e-4)


def test_paired_t_interval_accepts_integer_tensors():
    assert paired_t_interval(A5.long(), B5.long()) == paired_t_interval(A5, B5)


@PROPERTY
@given(seeds, st.integers(2, 8), st.integers(1, 20), st.floats(-5, 5))
def test_paired_t_interval_properties(seed, n, m, shift):
    a, b = randn(seed, n), randn(seed + 1, n)
    mean, low, high = paired_t_interval(a, b)
    assert mean == pytest.approx(float((a - b).mean()), abs=1e-12)
    assert low <= mean <= high and high - mean == pytest.approx(mean - low, abs=1e-12)
    # only the differences matter: shifting both samples changes nothing
    shifted = paired_t_interval(a + shift, b + shift)
    assert shifted == pytest.approx((mean, low, high), abs=1e-9)
    # swapping the samples mirrors the interval
    assert paired_t_interval(b, a) == pytest.approx((-mean, -high, -low), abs=1e-12)
    # adjusting for more comparisons widens it
    _, a_low, a_high = paired_t_interval(a, b, n_comparisons=m + 1)
    assert a_low < low and a_high > high


def test_paired_t_interval_covers_the_true_mean_at_its_level():
    # 4000 experiments of 5 normal pairs with true difference 0: about 95 % cover it
    g = torch.Generator().manual_seed(0)
    diffs = torch.randn(4000, 5, generator=g, dtype=torch.float64)
    covered = sum(
        low < 0 < high
        for _, low, high in (paired_t_interval(d, torch.zeros(5, dtype=torch.float64))
                             for d in diffs)
    )
    # binomial se of the coverage: sqrt(0.95 * 0.05 / 4000) = 0.0034; 4 se either side
    assert abs(covered / 4000 - 0.95) < 4 * 0.0035


def test_paired_t_interval_rejects_bad_input():
    with pytest.raises(ValueError, match=r"must be paired.*shapes \(5,\) and \(4,\)"):
        paired_t_interval(A5, B5[:4])
    with pytest.raises(ValueError, match=r"a must have shape \(n,\), got \(5, 1\)"):
        paired_t_interval(A5[:, None], B5)
    with pytest.raises(ValueError, match="at least 2 pairs, got 1"):
        paired_t_interval(A5[:1], B5[:1])
    with pytest.raises(TypeError, match="b must be a torch.Tensor, got list"):
        paired_t_interval(A5, [2.0] * 5)
    with pytest.raises(TypeError, match="a must hold real numbers, got dtype torch.bool"):
        paired_t_interval(A5 > 4, B5)
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\), got 95.0"):
        paired_t_interval(A5, B5, level=95)
    with pytest.raises(ValueError, match="n_comparisons must be at least 1, got 0"):
        paired_t_interval(A5, B5, n_comparisons=0)
    with pytest.raises(TypeError, match="n_comparisons must be an int, got float"):
        paired_t_interval(A5, B5, n_comparisons=2.0)


# ---------------------------------------------------------------- safe rounding


def test_rounding_by_hand():
    assert round_down(0.316, 2) == 0.31 and round_up(0.311, 2) == 0.32
    assert round_down(-0.311, 2) == -0.32 and round_up(-0.316, 2) == -0.31
    assert round_down(2.0, 3) == 2.0 and round_up(2.0, 0) == 2.0
    assert round_down(1.2345, 0) == 1.0 and round_up(1.2345, 0) == 2.0
    # the float 0.29 is 0.28999999999999998..., below 0.29: a lower bound is 0.28
    assert round_down(0.29, 2) == 0.28 and round_up(0.29, 2) == 0.29


def test_round_up_sci_by_hand():
    assert round_up_sci(5.2e-4) == "6e-04"
    assert round_up_sci(9.2e-4) == "1e-03"  # 10e-04 moves to the next power
    assert round_up_sci(0.03) == "3e-02"  # the float 0.03 is just below 0.03
    assert round_up_sci(1234.5) == "2e+03"
    assert round_up_sci(7.0) == "7e+00"


@PROPERTY
@given(st.floats(-1e6, 1e6, allow_nan=False), st.integers(0, 6))
def test_rounding_gives_the_nearest_safe_bound(x, d):
    exact, step = Fraction(x), Fraction(1, 10**d)
    low, high = Fraction(str(round_down(x, d))), Fraction(str(round_up(x, d)))
    assert low <= exact < low + step  # the printed text is a lower bound, one step at most
    assert high - step < exact <= high
    assert low * 10**d == int(low * 10**d)  # at most d decimals
    assert round_down(-x, d) == -round_up(x, d)


@PROPERTY
@given(st.floats(1e-300, 1e300))
def test_round_up_sci_is_the_nearest_one_digit_upper_bound(x):
    text = round_up_sci(x)
    digit, exponent = text.split("e")
    assert digit in "123456789" and len(digit) == 1
    bound = Fraction(int(digit)) * Fraction(10) ** int(exponent)
    assert Fraction(x) <= bound  # an upper bound ...
    below = Fraction(int(digit) - 1) * Fraction(10) ** int(exponent) if digit != "1" else (
        Fraction(9) * Fraction(10) ** (int(exponent) - 1))
    assert below < Fraction(x)  # ... and the next one-digit number down is not
    assert text == f"{float(bound):.0e}"  # Python's own '.0e' spelling


def test_rounding_rejects_bad_input():
    with pytest.raises(ValueError, match="decimals must be at least 0, got -1"):
        round_down(0.5, -1)
    with pytest.raises(TypeError, match="decimals must be an int, got float"):
        round_up(0.5, 2.0)
    with pytest.raises(ValueError, match="x must be finite, got inf"):
        round_up(math.inf, 2)
    with pytest.raises(TypeError, match="x must be a real number, got str"):
        round_down("0.5", 2)
    for bad in (0.0, -1e-3):
        with pytest.raises(ValueError, match="x must be positive to round to a significant"):
            round_up_sci(bad)


# ---------------------------------------------------------------- boundaries and names


def test_two_values_are_enough_by_hand():
    # n = 2: mean 2, s = sqrt(((1 - 2)^2 + (3 - 2)^2) / 1) = sqrt(2), se = s / sqrt(2) = 1
    mean, se = mean_se(torch.tensor([1.0, 3.0], dtype=torch.float64))
    assert float(mean) == 2.0 and float(se) == pytest.approx(1.0, abs=1e-15)
    # paired differences 1 and 3: the same mean and se, t_{0.975,1} = 12.706 (table)
    mean, low, high = paired_t_interval(torch.tensor([3.0, 5.0]), torch.tensor([2.0, 2.0]))
    assert mean == 2.0
    assert (low, high) == pytest.approx((2 - 12.706, 2 + 12.706), abs=5e-4)
    # a single outcome: sqrt(0.5 * 0.5 / 1)
    assert binomial_se(0.5, 1) == 0.5


def test_mean_se_accepts_every_dim_from_minus_rank():
    values = torch.tensor([[0.0, 2.0], [4.0, 2.0], [8.0, 2.0]], dtype=torch.float64)
    for a, b in zip(mean_se(values, dim=-2), mean_se(values, dim=0), strict=True):
        assert torch.equal(a, b)


def test_each_argument_names_itself_when_rejected():
    with pytest.raises(TypeError, match=r"^dim must be an int, got bool"):
        mean_se(torch.ones(3, 2), dim=True)
    with pytest.raises(TypeError, match=r"^p must be a real number, got str"):
        binomial_se("0.5", 10)
    with pytest.raises(TypeError, match=r"^n must be an int, got bool"):
        binomial_se(0.5, True)
    with pytest.raises(ValueError, match=r"^p must be finite, got inf"):
        t_quantile(math.inf, 3)
    with pytest.raises(ValueError, match=r"^df must be finite, got inf"):
        t_quantile(0.9, math.inf)
    with pytest.raises(TypeError, match=r"^x must be a real number, got str"):
        round_up_sci("1e-3")
    with pytest.raises(ValueError, match=r"^x must be finite, got nan"):
        round_up_sci(math.nan)


def test_paired_t_interval_names_each_bad_argument():
    with pytest.raises(TypeError, match=r"^a must be a torch\.Tensor, got tuple"):
        paired_t_interval((1.0, 2.0), B5)
    with pytest.raises(TypeError, match=r"^b must hold real numbers, got dtype torch\.complex64"):
        paired_t_interval(A5, torch.ones(5, dtype=torch.complex64))
    with pytest.raises(ValueError, match=r"^b must have shape \(n,\), got \(5, 1\)"):
        paired_t_interval(A5, B5[:, None])
    with pytest.raises(TypeError, match=r"^level must be a real number, got str"):
        paired_t_interval(A5, B5, level="95%")
    with pytest.raises(ValueError, match=r"^level must be finite, got nan"):
        paired_t_interval(A5, B5, level=math.nan)
    for level in (0.0, 1.0):  # both ends of (0, 1) are excluded
        with pytest.raises(ValueError, match=r"^level must be in \(0, 1\), got"):
            paired_t_interval(A5, B5, level=level)
    with pytest.raises(TypeError, match=r"^n_comparisons must be an int, got bool"):
        paired_t_interval(A5, B5, n_comparisons=True)


@pytest.mark.parametrize(
    ("x", "text"),
    [(0.09999999999999999, "1e-01"), (999.9999999999999, "1e+03"),
     (9.999999999999999e-05, "1e-04"), (1e23, "1e+23")],
)
def test_round_up_sci_just_below_a_power_of_ten(x, text):
    # floats where floor(log10(x)) is one too high (log10 rounds up to the integer): the
    # exact correction must still give the next power of ten, which is the bound
    assert Fraction(x) < Fraction(10) ** int(text[2:])
    assert round_up_sci(x) == text


def test_importing_stats_leaves_scipy_stats_unimported():
    """SciPy's stats module costs about a second of CPU to import, in every chapter's kernel
    that imports this module; only ``t_quantile`` needs it, so it is imported there."""
    import subprocess
    import sys

    code = ("import sys, attention_src.stats as s; "
            "assert 'scipy.stats' not in sys.modules, 'imported at import'; "
            "s.t_quantile(0.975, 4); assert 'scipy.stats' in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# ---------------------------------------------------------------- shares of a count


def test_exact_share_recovers_the_count_a_float32_accuracy_stands_for():
    stored = float(torch.tensor(426 / 500, dtype=torch.float32))  # 0.8519999980926514
    assert stored < 0.852
    assert exact_share(stored, 500) == Fraction(426, 500)
    # the reason it exists: the float rounds to a bound the count does not have
    assert round_down(100 * stored, 1) == 85.1
    assert round_down(100 * exact_share(stored, 500), 1) == 85.2
    assert exact_share(np.float32(484 / 500), 500) == Fraction(484, 500)
    assert exact_share(0.0, 7) == 0 and exact_share(1.0, 7) == 1


def test_rounding_a_fraction_is_exact():
    # the float 85.2 is 85.2000000000000028...: a safe upper bound of the float is 85.3, of the
    # fraction 852/10 it is 85.2 itself
    assert round_up(85.2, 1) == 85.3
    assert round_up(Fraction(852, 10), 1) == 85.2 and round_down(Fraction(852, 10), 1) == 85.2
    assert round_down(Fraction(52, 66) * 100, 1) == 78.7  # 78.7878...
    assert round_up(Fraction(52, 66) * 100, 1) == 78.8
    assert round_down(np.int64(3), 2) == 3.0 and round_up(7, 0) == 7.0


@PROPERTY
@given(st.integers(1, 10_000), st.data())
def test_exact_share_of_any_float32_count(n, data):
    k = data.draw(st.integers(0, n))
    stored = float(torch.tensor(k / n, dtype=torch.float32))
    assert exact_share(stored, n) == Fraction(k, n)


def test_exact_share_of_a_large_float32_count():
    # 999,999 of 1,000,000 in float32 is 0.99999898672103882: share * n is 0.01 from k
    stored = float(torch.tensor(999_999 / 1_000_000, dtype=torch.float32))
    assert exact_share(stored, 1_000_000) == Fraction(999_999, 1_000_000)
    with pytest.raises(ValueError, match="is not a count of n = 1000000 items"):
        exact_share(0.5 + 0.4 / 1_000_000, 1_000_000)  # 0.4 from a whole number


def test_exact_share_bad_input():
    with pytest.raises(ValueError, match=r"share = 0.5 is not a count of n = 3 items"):
        exact_share(0.5, 3)
    with pytest.raises(ValueError, match=r"share must be in \[0, 1\], got 1.5"):
        exact_share(1.5, 10)
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        exact_share(0.5, 0)
    with pytest.raises(TypeError, match="n must be an int, got float"):
        exact_share(0.5, 10.0)
    with pytest.raises(TypeError, match="share must be a real number, got str"):
        exact_share("0.5", 10)
    with pytest.raises(ValueError, match="share must be finite, got nan"):
        exact_share(float("nan"), 10)
