"""NumPy versions (attention_src.numpy_ref) equal the torch versions."""

from __future__ import annotations

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
