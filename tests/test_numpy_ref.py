"""NumPy versions (attention_src.numpy_ref) equal the torch versions."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attention_src import numpy_ref
from attention_src.attention import scaled_dot_product_attention
from attention_src.softmax import softmax
from tests.conftest import PROPERTY, TOL, qkv, qkv_and_mask, randn, seeds


@PROPERTY
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=4), seed=seeds, data=st.data())
def test_softmax_equals_torch(shape, seed, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = randn(seed, *shape, scale=10.0)
    ours = numpy_ref.softmax(x.numpy(), axis=axis)
    np.testing.assert_allclose(ours, softmax(x, dim=axis).numpy(), atol=1e-14, rtol=0)
    np.testing.assert_allclose(ours, torch.softmax(x, dim=axis).numpy(), atol=1e-14, rtol=0)


@PROPERTY
@given(qkv(), st.sampled_from([None, 0.0, 1.0, 0.3]))
def test_sdpa_without_mask_equals_torch(t, scale):
    q, k, v = t
    out, w = numpy_ref.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(), scale=scale)
    ref_out, ref_w = scaled_dot_product_attention(q, k, v, scale=scale)
    np.testing.assert_allclose(out, ref_out.numpy(), atol=1e-10, rtol=0)
    np.testing.assert_allclose(w, ref_w.numpy(), atol=1e-10, rtol=0)


@PROPERTY
@given(qkv_and_mask())
def test_sdpa_with_mask_equals_torch(t):
    q, k, v, mask = t
    out, w = numpy_ref.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(),
                                                    mask=mask.numpy())
    ref_out, ref_w = scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_allclose(out, ref_out.numpy(), atol=1e-10, rtol=0)
    np.testing.assert_allclose(w, ref_w.numpy(), atol=1e-10, rtol=0)
    assert np.all(w[~np.broadcast_to(mask.numpy(), w.shape)] == 0)


def test_fully_masked_rows_give_zeros():
    q, k, v = (randn(i, 2, 3, 4).numpy() for i in range(3))
    mask = np.ones((2, 3, 3), dtype=bool)
    mask[0, 1] = False
    mask[1] = False
    with np.errstate(all="raise"):  # no warning either (no 0/0, no exp overflow)
        out, w = numpy_ref.scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.all(w[0, 1] == 0) and np.all(out[0, 1] == 0)
    assert np.all(w[1] == 0) and np.all(out[1] == 0)
    ref_out, _ = scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)),
                                              mask=torch.from_numpy(mask))
    np.testing.assert_allclose(out, ref_out.numpy(), atol=1e-10, rtol=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept_and_float32_matches_torch(dtype):
    q, k, v = (randn(i, 2, 3, 5, 4).numpy().astype(dtype) for i in range(3))
    mask = np.tril(np.ones((5, 5), dtype=bool))
    for m in (None, mask):
        out, w = numpy_ref.scaled_dot_product_attention(q, k, v, mask=m)
        assert out.dtype == dtype and w.dtype == dtype
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        ref_out, _ = scaled_dot_product_attention(tq, tk, tv,
                                                  mask=None if m is None else torch.from_numpy(m))
        tol = TOL[tq.dtype]
        np.testing.assert_allclose(out, ref_out.numpy(), atol=tol["atol"], rtol=0)
    assert numpy_ref.softmax(q).dtype == dtype


def test_naive_softmax_overflows_where_softmax_does_not():
    x = np.array([[1000.0, 999.0, 0.0]])
    naive = numpy_ref.naive_softmax(x)  # exp(1000) = inf, inf / inf = nan
    assert np.isnan(naive).any()
    stable = numpy_ref.softmax(x)
    assert np.all(np.isfinite(stable))
    e = np.exp(-1.0)
    np.testing.assert_allclose(stable, [[1 / (1 + e), e / (1 + e), 0.0]], atol=1e-15)
    x32 = np.array([100.0, 0.0], dtype=np.float32)  # exp(100) overflows float32 (max ~88.7)
    assert np.isnan(numpy_ref.naive_softmax(x32)).any()
    assert np.all(np.isfinite(numpy_ref.softmax(x32)))


@PROPERTY
@given(seed=seeds)
def test_naive_softmax_equals_softmax_on_small_scores(seed):
    x = randn(seed, 3, 4).numpy()
    np.testing.assert_allclose(numpy_ref.naive_softmax(x), numpy_ref.softmax(x), atol=1e-15,
                               rtol=1e-14)


def test_rejects_bad_input():
    a = np.ones((3, 4))
    sdpa = numpy_ref.scaled_dot_product_attention
    with pytest.raises(TypeError, match="x must be a numpy.ndarray, got list"):
        numpy_ref.softmax([1.0, 2.0])
    with pytest.raises(TypeError, match="x must be a floating-point array, got dtype int64"):
        numpy_ref.naive_softmax(np.array([1, 2], dtype=np.int64))
    with pytest.raises(ValueError, match=r"x must have at least 1 dimensions, got shape \(\)"):
        numpy_ref.softmax(np.array(1.0))
    with pytest.raises(TypeError, match="key must be a numpy.ndarray, got Tensor"):
        sdpa(a, torch.ones(3, 4), a)
    with pytest.raises(TypeError, match="value must be a floating-point array, got dtype bool"):
        sdpa(a, a, np.ones((3, 4), dtype=bool))
    with pytest.raises(ValueError, match=r"query must have at least 2 dimensions, got shape "
                                         r"\(4,\)"):
        sdpa(np.ones(4), a, a)
    with pytest.raises(ValueError, match=r"query \(3, 4\) and key \(3, 5\) differ in feature "
                                         r"size d_k"):
        sdpa(a, np.ones((3, 5)), a)
    with pytest.raises(ValueError, match=r"key \(3, 4\) and value \(2, 4\) differ in length L_k"):
        sdpa(a, a, np.ones((2, 4)))
    with pytest.raises(TypeError, match="mask must be boolean.*got dtype float64"):
        sdpa(a, a, a, mask=np.ones((3, 3)))
    with pytest.raises(ValueError, match=r"mask \(3, 2\) does not broadcast to scores \(3, 3\)"):
        sdpa(a, a, a, mask=np.ones((3, 2), dtype=bool))
    with pytest.raises(ValueError, match=r"mask \(1, 3, 3\) does not broadcast to scores "
                                         r"\(3, 3\)"):
        sdpa(a, a, a, mask=np.ones((1, 3, 3), dtype=bool))  # no silent broadcast


def test_rejects_what_the_torch_version_rejects():
    sdpa = numpy_ref.scaled_dot_product_attention
    q, k, v = np.ones((2, 3, 4)), np.ones((3, 5, 4)), np.ones((3, 5, 6))
    with pytest.raises(ValueError, match=r"query \(2, 3, 4\), key \(3, 5, 4\) and value "
                                         r"\(3, 5, 6\) must share their leading dimensions"):
        sdpa(q, k, v)
    with pytest.raises(ValueError, match=r"key \(2, 5, 4\) and value \(5, 6\) must share"):
        sdpa(q, np.ones((2, 5, 4)), np.ones((5, 6)))  # missing batch dim: no silent broadcast
    with pytest.raises(TypeError, match="mask must be a numpy.ndarray, got list"):
        sdpa(q[0], q[0], q[0], mask=[[True] * 3] * 3)
    with pytest.raises(TypeError, match="one dtype, got float32, float64 and float64"):
        sdpa(q[0].astype(np.float32), q[0], q[0])


def test_naive_softmax_overflow_gives_nan_without_raising_or_warning():
    """The overflow is the lesson, so it must come back as NaN, silently, whatever the caller's
    NumPy error settings: under ``np.errstate(all="raise")`` exp(1000) and inf / inf would
    otherwise raise FloatingPointError."""
    x = np.array([[1000.0, 0.0], [1.0, 2.0]])
    with np.errstate(all="raise"):
        naive = numpy_ref.naive_softmax(x)
    assert np.isnan(naive[0]).any()
    e = np.exp(1.0)
    np.testing.assert_allclose(naive[1], [1 / (1 + e), e / (1 + e)], atol=1e-15)


def test_naive_softmax_normalises_along_the_given_axis():
    x = np.array([[0.0, 1.0, 2.0], [3.0, 3.0, 3.0]])
    cols = numpy_ref.naive_softmax(x, axis=0)
    np.testing.assert_allclose(cols.sum(axis=0), np.ones(3), atol=1e-15)
    col0 = np.exp([0.0, 3.0]) / np.exp([0.0, 3.0]).sum()
    np.testing.assert_allclose(cols[:, 0], col0, atol=1e-15)
    np.testing.assert_allclose(numpy_ref.naive_softmax(x[1]), np.full(3, 1 / 3), atol=1e-15)


def test_sdpa_with_one_allowed_key_per_row_puts_all_weight_on_it():
    """A hand case: each query may attend to exactly one key, so its weight is exactly 1 and
    its output is that key's value, whatever the scores."""
    q, k, v = (randn(i, 3, 2).numpy() * 50 for i in range(3))
    mask = np.array([[False, True, False], [True, False, False], [False, False, True]])
    out, w = numpy_ref.scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_array_equal(w, mask.astype(float))
    np.testing.assert_allclose(out, v[[1, 0, 2]], atol=1e-12)


def test_sdpa_hand_example_with_default_and_explicit_scale():
    """Two keys, d_k = 4: scores are q.k / 2 by default; softmax of (0, 1) and of (0, 2)."""
    q = np.array([[1.0, 1.0, 0.0, 0.0]])
    k = np.array([[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    v = np.array([[0.0], [1.0]])
    _, w = numpy_ref.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(w, [[1 / (1 + np.e), np.e / (1 + np.e)]], atol=1e-15)
    _, w1 = numpy_ref.scaled_dot_product_attention(q, k, v, scale=1.0)
    e2 = np.exp(2.0)
    np.testing.assert_allclose(w1, [[1 / (1 + e2), e2 / (1 + e2)]], atol=1e-15)


def test_sdpa_feature_size_check_uses_the_last_axis_with_batch_dims():
    """With a batch axis, d_k is still the last axis of query and key: (2, 3, 4) query and
    (2, 5, 4) key are compatible; (2, 4, 3) query and (2, 4, 4) key are not."""
    sdpa = numpy_ref.scaled_dot_product_attention
    out, w = sdpa(np.ones((2, 3, 4)), np.ones((2, 5, 4)), np.ones((2, 5, 6)))
    assert out.shape == (2, 3, 6) and w.shape == (2, 3, 5)
    with pytest.raises(ValueError, match=r"^query \(2, 4, 3\) and key \(2, 4, 4\) differ in "
                                         r"feature size d_k$"):
        sdpa(np.ones((2, 4, 3)), np.ones((2, 4, 4)), np.ones((2, 4, 4)))
    with pytest.raises(ValueError, match=r"^key \(2, 3, 4\) and value \(2, 4, 3\) differ in "
                                         r"length L_k$"):
        sdpa(np.ones((2, 3, 4)), np.ones((2, 3, 4)), np.ones((2, 4, 3)))


@pytest.mark.parametrize("bad", [[1.0], 1.0, torch.ones(2)])
def test_softmax_rejects_non_arrays_naming_x(bad):
    with pytest.raises(TypeError, match=rf"^x must be a numpy\.ndarray, got "
                                        rf"{type(bad).__name__}$"):
        numpy_ref.softmax(bad)
    with pytest.raises(TypeError, match=rf"^x must be a numpy\.ndarray, got "
                                        rf"{type(bad).__name__}$"):
        numpy_ref.naive_softmax(bad)


def test_softmax_and_naive_softmax_accept_one_dimensional_input():
    x = np.array([0.0, np.log(3.0)])
    np.testing.assert_allclose(numpy_ref.softmax(x), [0.25, 0.75], atol=1e-15)
    np.testing.assert_allclose(numpy_ref.naive_softmax(x), [0.25, 0.75], atol=1e-15)
    with pytest.raises(ValueError, match=r"^x must have at least 1 dimensions, got shape \(\)$"):
        numpy_ref.naive_softmax(np.array(0.5))


def test_sdpa_rejects_a_non_array_or_non_boolean_mask_by_name():
    a = np.ones((3, 4))
    sdpa = numpy_ref.scaled_dot_product_attention
    with pytest.raises(TypeError, match=r"^mask must be a numpy\.ndarray, got Tensor$"):
        sdpa(a, a, a, mask=torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"^mask must be boolean \(True = may attend\), got "
                                        r"dtype int64$"):
        sdpa(a, a, a, mask=np.ones((3, 3), dtype=np.int64))
    for i, name in enumerate(("query", "key", "value")):
        ints = [a, a, a]
        ints[i] = a.astype(np.int64)
        with pytest.raises(TypeError, match=rf"^{name} must be a floating-point array, got "
                                            r"dtype int64$"):
            sdpa(*ints)
        vector = [a, a, a]
        vector[i] = a[0]
        with pytest.raises(ValueError, match=rf"^{name} must have at least 2 dimensions, got "
                                             r"shape \(4,\)$"):
            sdpa(*vector)


def test_masked_sdpa_emits_no_warning_of_any_kind():
    """Chapters print these results: a RuntimeWarning (0/0, overflow) or a UserWarning (e.g.
    NumPy's 'where used without out, expect uninitialised memory') would leak into the page."""
    q, k, v = (randn(i, 2, 3, 4).numpy() for i in range(3))
    mask = np.array([[True, False, False], [False, False, False], [True, True, True]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, w = numpy_ref.scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.all(w[:, 1] == 0) and np.all(out[:, 1] == 0)
    np.testing.assert_array_equal(w[:, 0], np.broadcast_to([1.0, 0.0, 0.0], (2, 3)))


@pytest.mark.parametrize("length", [3, 40])
def test_fully_masked_rows_are_exactly_zero_at_any_size(length):
    """Small and large score matrices (NumPy and the C allocator recycle memory differently by
    size), with the first and the last query fully masked: their weights must be written as
    zeros, not left as whatever the memory held."""
    q, k, v = (randn(i, 2, length, 4).numpy() for i in range(3))
    mask = np.ones((length, length), dtype=bool)
    mask[0] = False
    mask[-1] = False
    for _ in range(3):
        out, w = numpy_ref.scaled_dot_product_attention(q, k, v, mask=mask)
        assert np.all(w[:, [0, -1]] == 0) and np.all(out[:, [0, -1]] == 0)
        np.testing.assert_allclose(w[:, 1:-1].sum(-1), 1.0, atol=1e-12)


def test_numpy_softmax_shifts_each_row_by_its_own_maximum():
    # one shift for the whole array would send the second row to exp(-1000) = 0, then 0/0
    x = np.array([[0.0, 0.0], [-1000.0, -1001.0]])
    expected = np.array([[0.5, 0.5], [1 / (1 + np.exp(-1.0)), 1 / (1 + np.exp(1.0))]])
    np.testing.assert_allclose(numpy_ref.softmax(x), expected, rtol=1e-12)
    np.testing.assert_allclose(numpy_ref.softmax(x.T, axis=0), expected.T, rtol=1e-12)
