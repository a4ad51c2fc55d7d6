"""Tests of ``attention_src.kernel_regression``: Nadaraya-Watson regression as attention pooling.

References: a hand-computed three-point example, and an independent NumPy implementation of the
textbook formula ``sum_i K(x - x_i) y_i / sum_j K(x - x_j)`` with the *normalised* Gaussian
density as ``K`` (so it also checks that the constant cancels). Properties: predictions lie
between the smallest and largest value, a huge bandwidth gives the mean, a tiny one the nearest
neighbour's value, and a mask removes keys exactly.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attention_src as att
from attention_src.kernel_regression import gaussian_kernel_scores, nadaraya_watson
from tests.conftest import PROPERTY, randn, seeds

sizes = st.integers(1, 12)
bandwidths = st.floats(0.5, 5.0)


def numpy_nadaraya_watson(query, keys, values, h):
    """The textbook estimator, written independently: sum K v / sum K, K the Gaussian pdf."""
    q, k, v = (np.asarray(t, dtype=np.float64) for t in (query, keys, values))
    kernel = np.exp(-((q[:, None] - k[None, :]) ** 2) / (2 * h**2)) / (math.sqrt(2 * math.pi) * h)
    if v.ndim == 1:
        return (kernel * v[None, :]).sum(1) / kernel.sum(1)
    return (kernel @ v) / kernel.sum(1, keepdims=True)


def test_exported_at_top_level():
    assert att.nadaraya_watson is nadaraya_watson
    assert att.gaussian_kernel_scores is gaussian_kernel_scores


def test_hand_computed_three_points():
    # keys 0, 1, 2 with values 1, 2, 4; query 1, h = 1: scores -1/2, 0, -1/2, so with
    # a = exp(-1/2) the weights are (a, 1, a) / (1 + 2a) and the prediction (2 + 5a) / (1 + 2a).
    keys = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    values = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    query = torch.tensor([1.0], dtype=torch.float64)
    pred, weights = nadaraya_watson(query, keys, values, bandwidth=1.0)
    a = math.exp(-0.5)
    expected_w = torch.tensor([[a, 1.0, a]], dtype=torch.float64) / (1 + 2 * a)
    assert weights.shape == (1, 3) and pred.shape == (1,)
    torch.testing.assert_close(weights, expected_w, rtol=1e-12, atol=1e-12)
    assert pred.item() == pytest.approx((2 + 5 * a) / (1 + 2 * a), rel=1e-12)
    assert pred.item() == pytest.approx(2.274068, abs=1e-6)


def test_scores_hand_computed():
    scores = gaussian_kernel_scores(torch.tensor([0.0, 2.0]), torch.tensor([0.0, 1.0, 4.0]), 2.0)
    # -(q - k)^2 / (2 * 4)
    expected = torch.tensor([[0.0, -1 / 8, -16 / 8], [-4 / 8, -1 / 8, -4 / 8]])
    torch.testing.assert_close(scores, expected)


@PROPERTY
@given(seed=seeds, L_q=sizes, L_k=sizes, h=bandwidths, d=st.sampled_from([None, 1, 3]))
def test_equals_independent_numpy_formula(seed, L_q, L_k, h, d):
    query = randn(seed, L_q, scale=3.0)
    keys = randn(seed + 1, L_k, scale=3.0)
    values = randn(seed + 2, L_k) if d is None else randn(seed + 2, L_k, d)
    pred, weights = nadaraya_watson(query, keys, values, h)
    expected = numpy_nadaraya_watson(query, keys, values, h)
    assert pred.shape == ((L_q,) if d is None else (L_q, d))
    assert weights.shape == (L_q, L_k)
    np.testing.assert_allclose(pred.numpy(), expected, rtol=1e-10, atol=1e-10)


@PROPERTY
@given(seed=seeds, L_q=sizes, L_k=sizes, h=st.floats(1e-3, 1e3))
def test_weights_are_a_distribution_and_prediction_is_within_the_values(seed, L_q, L_k, h):
    query = randn(seed, L_q, scale=3.0)
    keys = randn(seed + 1, L_k, scale=3.0)
    values = randn(seed + 2, L_k)
    pred, weights = nadaraya_watson(query, keys, values, h)
    assert bool((weights >= 0).all())
    torch.testing.assert_close(weights.sum(-1), torch.ones(L_q, dtype=torch.float64))
    eps = 1e-12
    assert bool((pred >= values.min() - eps).all() and (pred <= values.max() + eps).all())


@PROPERTY
@given(seed=seeds, L_q=sizes, L_k=sizes)
def test_infinite_bandwidth_gives_the_mean(seed, L_q, L_k):
    query = randn(seed, L_q, scale=3.0)
    keys = randn(seed + 1, L_k, scale=3.0)
    values = randn(seed + 2, L_k)
    pred, weights = nadaraya_watson(query, keys, values, bandwidth=1e8)
    torch.testing.assert_close(weights, torch.full((L_q, L_k), 1 / L_k, dtype=torch.float64))
    torch.testing.assert_close(pred, values.mean().expand(L_q))


@PROPERTY
@given(seed=seeds, L_q=sizes, L_k=st.integers(2, 12))
def test_tiny_bandwidth_gives_the_nearest_neighbour(seed, L_q, L_k):
    keys = torch.arange(L_k, dtype=torch.float64)  # distinct, 1 apart
    query = torch.rand(L_q, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    query = query * 0.8 - 0.4 + torch.randint(0, L_k, (L_q,), generator=torch.Generator()
                                              .manual_seed(seed + 1))  # within 0.4 of a key
    values = randn(seed + 2, L_k)
    pred, weights = nadaraya_watson(query, keys, values, bandwidth=1e-2)
    nearest = (query[:, None] - keys[None, :]).abs().argmin(-1)
    torch.testing.assert_close(pred, values[nearest])
    assert bool((weights.argmax(-1) == nearest).all())


def test_two_dimensional_values_are_pooled_column_by_column():
    query, keys = randn(0, 5), randn(1, 7)
    values = randn(2, 7, 3)
    pred, _ = nadaraya_watson(query, keys, values, 0.7)
    for j in range(3):
        col, _ = nadaraya_watson(query, keys, values[:, j], 0.7)
        torch.testing.assert_close(pred[:, j], col)


def test_leave_one_out_mask_equals_dropping_the_key():
    x, y = randn(0, 6), randn(1, 6)
    pred, weights = nadaraya_watson(x, x, y, 0.8, mask=~torch.eye(6, dtype=torch.bool))
    assert bool((weights.diagonal() == 0).all())
    for i in range(6):
        keep = torch.arange(6) != i
        alone, _ = nadaraya_watson(x[i : i + 1], x[keep], y[keep], 0.8)
        torch.testing.assert_close(pred[i : i + 1], alone)


def test_a_query_with_every_key_masked_gets_zero_weights():
    pred, weights = nadaraya_watson(randn(0, 2), randn(1, 3), randn(2, 3), 1.0,
                                    mask=torch.tensor([[True, False, True], [False] * 3]))
    assert weights[1].abs().sum() == 0 and pred[1] == 0
    torch.testing.assert_close(weights[0].sum(), torch.tensor(1.0, dtype=torch.float64))


def test_float32_works_and_matches_float64():
    query, keys, values = randn(0, 4), randn(1, 9), randn(2, 9)
    p64, _ = nadaraya_watson(query, keys, values, 0.5)
    p32, w32 = nadaraya_watson(query.float(), keys.float(), values.float(), 0.5)
    assert p32.dtype == w32.dtype == torch.float32
    torch.testing.assert_close(p32.double(), p64, rtol=1e-5, atol=1e-5)


def test_gradient_with_respect_to_query_and_values():
    query = randn(0, 3).requires_grad_()
    keys = randn(1, 5)
    values = randn(2, 5).requires_grad_()
    assert torch.autograd.gradcheck(lambda q, v: nadaraya_watson(q, keys, v, 0.9)[0],
                                    (query, values))


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (([1.0], "k", "v", 1.0), TypeError, "query must be a torch.Tensor"),
        (("q", torch.zeros(2, dtype=torch.long), "v", 1.0), TypeError, "keys must be a float"),
        (("q", torch.zeros(2, 1), "v", 1.0), ValueError, r"keys must be 1-D.*\(2, 1\)"),
        (("q", torch.zeros(0), "v", 1.0), ValueError, "keys is empty"),
        (("q", "k", [1.0, 2.0], 1.0), TypeError, "values must be a torch.Tensor"),
        (("q", "k", torch.zeros(3), 1.0), ValueError, r"values must be \(L_k,\).*L_k = 2"),
        (("q", "k", torch.zeros(2, 2, 2), 1.0), ValueError, r"got values \(2, 2, 2\)"),
        (("q", "k", torch.zeros(2, dtype=torch.float64), 1.0), TypeError, "share one dtype"),
        ((torch.zeros(3, dtype=torch.float64), "k", "v", 1.0), TypeError, "share one dtype"),
        ((torch.zeros(3, 1), "k", "v", 1.0), ValueError, r"query must be 1-D.*\(3, 1\)"),
        (("q", "k", "v", 0.0), ValueError, "bandwidth must be positive"),
        (("q", "k", "v", -1.0), ValueError, "bandwidth must be positive"),
        (("q", "k", "v", math.inf), ValueError, "finite"),
        (("q", "k", "v", math.nan), ValueError, "finite"),
        (("q", "k", "v", True), TypeError, "bandwidth must be a positive number"),
        (("q", "k", "v", "1"), TypeError, "bandwidth must be a positive number"),
    ],
)
def test_bad_input_raises_a_clear_error(args, error, message):
    defaults = {"q": torch.zeros(3), "k": torch.zeros(2), "v": torch.zeros(2)}
    args = [defaults.get(a, a) if isinstance(a, str) and a in defaults else a for a in args]
    with pytest.raises(error, match=message):
        nadaraya_watson(*args)


def test_bad_mask_raises():
    q, k, v = torch.zeros(3), torch.zeros(2), torch.zeros(2)
    with pytest.raises(ValueError, match="does not broadcast"):
        nadaraya_watson(q, k, v, 1.0, mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match="torch.bool"):
        nadaraya_watson(q, k, v, 1.0, mask=torch.ones(3, 2))


@pytest.mark.parametrize("name,position", [("query", 0), ("keys", 1)])
def test_scores_name_the_argument_at_fault(name, position):
    good = [torch.zeros(3), torch.zeros(2)]
    for bad, error, message in (
        ([1.0, 2.0], TypeError, rf"^{name} must be a torch\.Tensor, got list$"),
        (torch.zeros(2, 1), ValueError,
         rf"^{name} must be 1-D \(one scalar per point\), got shape \(2, 1\)$"),
        (torch.zeros(0), ValueError, rf"^{name} is empty: need at least one point$"),
        (torch.zeros(()), ValueError, rf"^{name} must have at least 1 dimensions"),
    ):
        args = list(good)
        args[position] = bad
        with pytest.raises(error, match=message):
            gaussian_kernel_scores(*args, 1.0)


def test_scores_and_regression_reject_mixed_dtypes_naming_both():
    f32, f64 = torch.zeros(3), torch.zeros(2, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"^query \(torch\.float32\) and keys \(torch\.float64\) "
                                        r"must share one dtype$"):
        gaussian_kernel_scores(f32, f64, 1.0)
    with pytest.raises(TypeError, match=r"^keys \(torch\.float64\) and values "
                                        r"\(torch\.float32\) must share one dtype$"):
        nadaraya_watson(f32.double(), f64, torch.zeros(2), 1.0)
    with pytest.raises(TypeError, match=r"^values must be a torch\.Tensor, got ndarray$"):
        nadaraya_watson(f32, f32, np.zeros(3), 1.0)


def test_regression_values_message_names_the_shapes():
    with pytest.raises(ValueError, match=r"^values must be \(L_k,\) or \(L_k, d\) with L_k = 2 "
                                         r"\(one per key\), got values \(3, 1\) for keys "
                                         r"\(2,\)$"):
        nadaraya_watson(torch.zeros(1), torch.zeros(2), torch.zeros(3, 1), 1.0)


@pytest.mark.parametrize("bandwidth", [0.05, 0.5, 1, 3])
def test_any_positive_bandwidth_is_accepted_ints_included(bandwidth):
    """Bandwidths below 1 are the interesting ones (wiggly fits); a Python int is a number."""
    q, k = torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.5, 2.0])
    scores = gaussian_kernel_scores(q, k, bandwidth)
    expected = -((q[:, None] - k[None, :]) ** 2) / (2 * float(bandwidth) ** 2)
    torch.testing.assert_close(scores, expected)


@pytest.mark.parametrize("bad,type_name", [(True, "bool"), ("1", "str"), (None, "NoneType"),
                                           (torch.tensor(1.0), "Tensor")])
def test_bandwidth_of_the_wrong_type_is_named(bad, type_name):
    with pytest.raises(TypeError, match=rf"^bandwidth must be a positive number, got "
                                        rf"{type_name}$"):
        gaussian_kernel_scores(torch.zeros(2), torch.zeros(2), bad)


@pytest.mark.parametrize("bad", [0.0, -0.5, math.inf, -math.inf, math.nan])
def test_bandwidth_must_be_positive_and_finite(bad):
    with pytest.raises(ValueError, match=r"^bandwidth must be positive and finite, got "):
        gaussian_kernel_scores(torch.zeros(2), torch.zeros(2), bad)


def test_a_key_mask_of_shape_L_k_is_shared_by_every_query():
    """A (L_k,) mask broadcasts over the queries: the same as the (L_q, L_k) mask it repeats."""
    q, k, v = randn(0, 4), randn(1, 5), randn(2, 5)
    keep = torch.tensor([True, False, True, True, False])
    pred, w = nadaraya_watson(q, k, v, 0.8, mask=keep)
    pred_full, w_full = nadaraya_watson(q, k, v, 0.8, mask=keep.expand(4, 5))
    torch.testing.assert_close(w, w_full, rtol=0, atol=0)
    ref, ref_w = nadaraya_watson(q, k[keep], v[keep], 0.8)
    torch.testing.assert_close(pred, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(w[:, keep], ref_w, rtol=1e-12, atol=1e-12)
    assert bool((w[:, ~keep] == 0).all())


def test_regression_names_keys_and_query_when_they_are_bad():
    v = torch.zeros(2)
    with pytest.raises(TypeError, match=r"^keys must be a torch\.Tensor, got list$"):
        nadaraya_watson(torch.zeros(3), [0.0, 1.0], v, 1.0)
    with pytest.raises(ValueError, match=r"^keys must be 1-D \(one scalar per point\), got "
                                         r"shape \(2, 1\)$"):
        nadaraya_watson(torch.zeros(3), torch.zeros(2, 1), v, 1.0)
    with pytest.raises(ValueError, match=r"^keys is empty: need at least one point$"):
        nadaraya_watson(torch.zeros(3), torch.zeros(0), torch.zeros(0), 1.0)
    with pytest.raises(ValueError, match=r"^query must be 1-D \(one scalar per point\), got "
                                         r"shape \(3, 1\)$"):
        nadaraya_watson(torch.zeros(3, 1), torch.zeros(2), v, 1.0)
    pred, _ = nadaraya_watson(torch.zeros(3), torch.zeros(2), torch.zeros(2, 4), 1.0)
    assert pred.shape == (3, 4)  # (L_k, d) values are the other accepted layout
