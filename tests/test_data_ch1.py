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
