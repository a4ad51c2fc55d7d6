"""Small statistics for the chapters' experiments: standard errors, t-intervals, safe rounding.

The chapters repeat an experiment over a few seeds or many held-out sequences and report a mean
with its uncertainty. These helpers compute those numbers once:

* ``mean_se``: the mean along one dimension and its standard error ``s / sqrt(n)``, with ``s``
  the sample standard deviation (``n - 1`` in the denominator).
* ``binomial_se``: the standard error ``sqrt(p (1 - p) / n)`` of a proportion.
* ``t_quantile``: a quantile of Student's t distribution (from SciPy).
* ``paired_t_interval``: the mean of the paired differences ``a - b`` (one per seed) and its
  two-sided t-interval, optionally Bonferroni-adjusted for a family of comparisons.
* ``round_down``, ``round_up``, ``round_up_sci``: a measured value rounded towards a bound the
  prose may state ("at least 0.31", "below 6e-04"); the rounding is exact (done on the float's
  exact binary value, or on a ``Fraction`` as it is), so the printed bound never overstates what
  was measured.
* ``exact_share``: the fraction ``k / n`` that a share of ``n`` items stands for, when it was
  stored as a float (an accuracy of 426 of 500 kept in float32 is 0.85199999...; rounded down
  as a float it would print 85.1 %, not 85.2 %).
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction

import torch

from attention_src.validation import check_tensor

__all__ = [
    "mean_se",
    "binomial_se",
    "t_quantile",
    "paired_t_interval",
    "round_down",
    "round_up",
    "round_up_sci",
    "exact_share",
]


def _check_real(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value


def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return int(value)


def mean_se(values: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean along ``dim`` and its standard error.

    Args:
        values: ``(..., n, ...)`` floating tensor; ``n = values.shape[dim]`` independent
            measurements (sequences, seeds), at least 2.
        dim: the dimension of the measurements.

    Returns:
        ``(mean, se)``, each of ``values``' shape without ``dim``: the mean and
        ``std / sqrt(n)``, with the sample standard deviation (``n - 1`` in its denominator).
    """
    check_tensor("values", values, min_rank=1)
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise TypeError(f"dim must be an int, got {type(dim).__name__}")
    if not -values.dim() <= dim < values.dim():
        raise ValueError(f"dim {dim} is out of range for values of shape {tuple(values.shape)}")
    n = values.shape[dim]
    if n < 2:
        raise ValueError(
            f"a standard error needs at least 2 values along dim {dim}, "
            f"got shape {tuple(values.shape)}"
        )
    return values.mean(dim), values.std(dim) / math.sqrt(n)


def binomial_se(p: float, n: int) -> float:
    """Standard error ``sqrt(p (1 - p) / n)`` of a proportion ``p`` measured on ``n`` outcomes.

    Args:
        p: the measured proportion, in ``[0, 1]``.
        n: the number of independent outcomes, positive.

    Returns:
        The standard error (a proportion, same unit as ``p``).
    """
    p = _check_real("p", p)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must be a proportion in [0, 1], got {p}")
    n = _check_int("n", n, 1)
    return math.sqrt(p * (1 - p) / n)


def t_quantile(p: float, df: float) -> float:
    """Quantile ``p`` of Student's t distribution with ``df`` degrees of freedom.

    ``t_quantile(0.975, 4)`` is 2.776, the factor of a 95 % two-sided interval from 5 values.

    Args:
        p: probability in ``(0, 1)``.
        df: degrees of freedom, positive (need not be an integer).
    """
    p = _check_real("p", p)
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be a probability in (0, 1), got {p}")
    df = _check_real("df", df)
    if df <= 0:
        raise ValueError(f"df must be positive, got {df}")
    # imported here, not at the top: SciPy's stats module takes about a second of CPU to
    # import, and most chapters that use this module never need a t quantile
    from scipy import stats as scipy_stats

    return float(scipy_stats.t.ppf(p, df))


def paired_t_interval(
    a: torch.Tensor, b: torch.Tensor, level: float = 0.95, n_comparisons: int = 1
) -> tuple[float, float, float]:
    """Mean of the paired differences ``a - b`` and its two-sided t-interval.

    ``a[i]`` and ``b[i]`` are measured on the same unit (seed, sequence). With ``d = a - b``,
    ``n`` differences and ``se = std(d) / sqrt(n)``, the interval is
    ``mean(d) -/+ t * se`` with ``t = t_quantile(1 - (1 - level) / (2 m), n - 1)``, where
    ``m = n_comparisons``: for ``m > 1`` the Bonferroni adjustment, so that ``m`` such
    intervals hold all at once with probability at least ``level``.

    Args:
        a: ``(n,)`` measurements, ``n >= 2`` (any real dtype; computed in float64).
        b: ``(n,)`` the paired measurements.
        level: confidence level in ``(0, 1)``.
        n_comparisons: size ``m`` of the family of intervals, at least 1.

    Returns:
        ``(mean, low, high)`` as floats, in the unit of ``a``.
    """
    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
        if x.dtype == torch.bool or x.is_complex():
            raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
        if x.dim() != 1:
            raise ValueError(f"{name} must have shape (n,), got {tuple(x.shape)}")
    if a.shape != b.shape:
        raise ValueError(
            f"a and b must be paired, one value each per unit: got shapes "
            f"{tuple(a.shape)} and {tuple(b.shape)}"
        )
    if len(a) < 2:
        raise ValueError(f"a t-interval needs at least 2 pairs, got {len(a)}")
    level = _check_real("level", level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    m = _check_int("n_comparisons", n_comparisons, 1)
    diff = a.double() - b.double()  # (n,)
    mean = float(diff.mean())
    half = t_quantile(1 - (1 - level) / (2 * m), len(diff) - 1) * float(diff.std()) / math.sqrt(
        len(diff)
    )
    return mean, mean - half, mean + half


def _check_decimals(decimals: object) -> int:
    return _check_int("decimals", decimals, 0)


def _exact(name: str, value: object) -> Fraction:
    """``value`` as an exact fraction: a ``Fraction`` or an int as it is, a float's binary value."""
    checked = _check_real(name, value)  # the type and finiteness
    if isinstance(value, numbers.Integral):
        return Fraction(int(value))
    if isinstance(value, Fraction):
        return value
    return Fraction(checked)


def exact_share(share: float, n: int) -> Fraction:
    """The fraction ``k / n`` that ``share`` stands for: ``k`` of ``n`` items, stored as a float.

    An accuracy over ``n`` held-out items is a count divided by ``n``, but a float (above all a
    float32) holds it only approximately: 426 / 500 in float32 is 0.8519999980926514.
    ``round_down(100 * share, 1)`` then prints 85.1 for a true 85.2 %; ``round_down(100 *
    exact_share(share, 500), 1)`` prints 85.2.

    Args:
        share: a real number in ``[0, 1]`` (a Python float, a NumPy or a 0-d tensor's ``float``).
        n: the number of items, ``>= 1``.

    Raises:
        ValueError: if ``share * n`` is not within ``max(1e-3, n * 2**-23)`` of a whole
            number (float32's rounding of a share, scaled by ``n``): then ``share`` is not a
            count of ``n`` items (a mean over seeds, say), and rounding it to one would change
            its value.
    """
    share = _check_real("share", share)
    n = _check_int("n", n, 1)
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share must be in [0, 1], got {share}")
    k = round(share * n)
    # a float32 share is within 2**-24 of k / n (relative), so share * n is within about
    # 6e-8 n of k: the tolerance grows with n, and stays far below 1/2 up to n = 2**21
    if abs(share * n - k) > max(1e-3, n * 2.0**-23):
        raise ValueError(
            f"share = {share!r} is not a count of n = {n} items: share * n = {share * n!r} is "
            f"{abs(share * n - k):.3g} from the nearest whole number"
        )
    return Fraction(k, n)


def round_down(x: float, decimals: int) -> float:
    """``x`` rounded *down* to ``decimals`` decimal places: a lower bound safe to print.

    The rounding uses the exact value of the float ``x``, so ``str(round_down(x, d))`` is never
    above ``x`` (``round_down(0.316, 2) == 0.31``, ``round_down(-0.311, 2) == -0.32``). A
    ``Fraction`` is rounded as it is (``round_up(Fraction(852, 10), 1) == 85.2``, where the float
    85.2, a little above 85.2, rounds up to 85.3).

    Args:
        x: a finite real number; a ``Fraction`` or an int is used exactly.
        decimals: number of decimal places, ``>= 0``.
    """
    exact = _exact("x", x)
    decimals = _check_decimals(decimals)
    scale = 10**decimals
    return math.floor(exact * scale) / scale


def round_up(x: float, decimals: int) -> float:
    """``x`` rounded *up* to ``decimals`` decimal places: an upper bound safe to print.

    The mirror of ``round_down``: ``str(round_up(x, d))`` is never below ``x``
    (``round_up(0.311, 2) == 0.32``).
    """
    exact = _exact("x", x)
    decimals = _check_decimals(decimals)
    scale = 10**decimals
    return math.ceil(exact * scale) / scale


def round_up_sci(x: float) -> str:
    """Positive ``x`` rounded *up* to one significant digit, as text: ``'6e-04'`` for 5.2e-4.

    An upper bound safe to print in scientific notation, in Python's ``'.0e'`` format; a
    rounding that reaches 10 moves to the next power (``round_up_sci(9.2e-4) == '1e-03'``).
    """
    x = _check_real("x", x)
    if x <= 0:
        raise ValueError(f"x must be positive to round to a significant digit, got {x}")
    exact = Fraction(x)
    e = math.floor(math.log10(x))  # a float estimate, corrected exactly below
    while Fraction(10) ** e > exact:
        e -= 1
    while Fraction(10) ** (e + 1) <= exact:
        e += 1
    digit = math.ceil(exact / Fraction(10) ** e)  # 1 .. 10
    if digit == 10:
        digit, e = 1, e + 1
    return f"{digit}e{e:+03d}"
