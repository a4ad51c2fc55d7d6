"""Tests of the chapter-1 generators in ``attention_src.data``: ``noisy_curve`` and
``curve_target`` (the data of the Nadaraya-Watson example)."""

from __future__ import annotations

import math

import pytest
import torch

from attention_src.data import curve_target, noisy_curve


def test_curve_target_hand_values():
    x = torch.tensor([0.0, math.pi / 4, math.pi / 2], dtype=torch.float64)
    expected = torch.tensor([0.0, 1 + 0.6 * math.pi / 4, 0.6 * math.pi / 2], dtype=torch.float64)
    torch.testing.assert_close(curve_target(x), expected)


def test_noisy_curve_shapes_order_range_and_dtype():
    x, y = noisy_curve(200, x_max=3.0, seed=1)
    assert x.shape == y.shape == (200,)
    assert x.dtype == y.dtype == torch.float64
    assert bool((x[1:] >= x[:-1]).all()), "x must be sorted"
    assert 0.0 <= float(x.min()) and float(x.max()) <= 3.0
    x32, y32 = noisy_curve(5, dtype=torch.float32)
    assert x32.dtype == y32.dtype == torch.float32


def test_noise_free_samples_lie_on_the_curve_and_noise_has_the_requested_size():
    x, y = noisy_curve(50, noise=0.0, seed=3)
    torch.testing.assert_close(y, curve_target(x))
    x, y = noisy_curve(20000, noise=0.4, seed=4)
    residual = y - curve_target(x)
    assert abs(float(residual.mean())) < 0.02
    assert abs(float(residual.std()) - 0.4) < 0.02


def test_noisy_curve_is_deterministic_by_seed():
    a, b, c = noisy_curve(10, seed=7), noisy_curve(10, seed=7), noisy_curve(10, seed=8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n": 0}, ValueError, "n must be positive"),
        ({"n": 2.5}, TypeError, "n must be an int"),
        ({"n": 5, "noise": -0.1}, ValueError, "noise must be"),
        ({"n": 5, "noise": math.nan}, ValueError, "noise must be"),
        ({"n": 5, "x_max": 0.0}, ValueError, "x_max must be positive"),
        ({"n": 5, "x_max": math.inf}, ValueError, "x_max must be positive"),
    ],
)
def test_noisy_curve_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        noisy_curve(**kwargs)


# --- defaults, boundaries, the documented generator and anchored messages (issue 13) --------

import numpy as np  # noqa: E402


def test_noisy_curve_defaults():
    x, y = noisy_curve(30)
    x_ref, y_ref = noisy_curve(30, noise=0.4, x_max=5.0, seed=0, dtype=torch.float64)
    assert torch.equal(x, x_ref) and torch.equal(y, y_ref)


def test_noisy_curve_draws_from_the_documented_numpy_generator():
    # docstring: x uniform on [0, x_max], then eps ~ N(0, noise**2), both from
    # np.random.default_rng(seed); x is sorted, y = f(x) + eps
    rng = np.random.default_rng(11)
    x_ref = np.sort(rng.uniform(0.0, 3.0, size=40))
    eps_ref = rng.normal(0.0, 0.7, size=40)
    y_ref = np.sin(2 * x_ref) + 0.6 * x_ref + eps_ref
    x, y = noisy_curve(40, noise=0.7, x_max=3.0, seed=11)
    np.testing.assert_allclose(x.numpy(), x_ref, rtol=0, atol=1e-15)
    np.testing.assert_allclose(y.numpy(), y_ref, rtol=0, atol=1e-12)


def test_noisy_curve_spans_zero_to_x_max():
    # 500 uniform draws on [0, 3]: P(min > 0.1) = P(max < 2.9) = (1 - 1/30)**500 < 1e-7
    x, _ = noisy_curve(500, x_max=3.0, seed=2)
    assert float(x.min()) < 0.1 and float(x.max()) > 2.9
    assert abs(float(x.mean()) - 1.5) < 5 * 3.0 / (12 * 500) ** 0.5  # 5 standard errors


@pytest.mark.parametrize("x_max", [0.5, 1.0, 1e-3])
def test_noisy_curve_accepts_any_positive_x_max(x_max):
    x, _ = noisy_curve(50, x_max=x_max, seed=5)
    assert 0.0 <= float(x.min()) and float(x.max()) <= x_max
    assert float(x.max()) > 0.5 * x_max


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"noise": -0.1}, r"^noise must be a finite number >= 0, got -0.1$"),
        ({"noise": math.inf}, r"^noise must be a finite number >= 0, got inf$"),
        ({"x_max": 0.0}, r"^x_max must be positive and finite, got 0.0$"),
        ({"x_max": -1.0}, r"^x_max must be positive and finite, got -1.0$"),
        ({"x_max": math.nan}, r"^x_max must be positive and finite, got nan$"),
    ],
)
def test_noisy_curve_messages_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        noisy_curve(5, **kwargs)
    with pytest.raises(ValueError, match=r"^n must be positive, got 0$"):
        noisy_curve(0)
