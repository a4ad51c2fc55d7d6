"""windowed_attention and band_to_dense (attention_src.windowed): attention on the band only.

Reference: the dense computation, ``scaled_dot_product_attention`` with ``band_mask`` (whose
own tests check it against its definition), and a per-query loop over the keys in the window.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attention_src.attention import scaled_dot_product_attention
from attention_src.softmax import band_mask
from attention_src.windowed import band_to_dense, windowed_attention
from tests.conftest import PROPERTY, TOL, batch_shapes, randn, seeds


def _loop_reference(q, k, v, window, causal):
    """One query at a time: softmax over the keys j with |i - j| < window (j <= i if causal)."""
    L = q.shape[-2]
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype)
    for i in range(L):
        keys = [j for j in range(L) if abs(i - j) < window and (j <= i or not causal)]
        s = q[..., i:i + 1, :] @ k[..., keys, :].transpose(-2, -1) / math.sqrt(q.shape[-1])
        out[..., i, :] = (torch.softmax(s, dim=-1) @ v[..., keys, :]).squeeze(-2)
    return out


@PROPERTY
@given(batch=batch_shapes, length=st.integers(1, 9), window=st.integers(1, 11),
       d_k=st.integers(1, 5), d_v=st.integers(1, 5), causal=st.booleans(), seed=seeds)
def test_equals_dense_attention_with_a_band_mask(batch, length, window, d_k, d_v, causal, seed):
    q = randn(seed, *batch, length, d_k)
    k = randn(seed + 1, *batch, length, d_k)
    v = randn(seed + 2, *batch, length, d_v)
    out, weights = windowed_attention(q, k, v, window, causal=causal)
    dense_out, dense_w = scaled_dot_product_attention(
        q, k, v, mask=band_mask(length, window, causal=causal))
    span = window if causal else 2 * window - 1
    assert out.shape == (*batch, length, d_v) and weights.shape == (*batch, length, span)
    torch.testing.assert_close(out, dense_out, **TOL[torch.float64])
    torch.testing.assert_close(band_to_dense(weights, window, causal), dense_w,
                               **TOL[torch.float64])
    torch.testing.assert_close(weights.sum(-1), torch.ones(*batch, length, dtype=q.dtype),
                               **TOL[torch.float64])


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [1, 2, 3, 7])
def test_equals_a_loop_over_queries(window, causal):
    q, k, v = randn(0, 2, 6, 4), randn(1, 2, 6, 4), randn(2, 2, 6, 3)
    out, _ = windowed_attention(q, k, v, window, causal=causal)
    torch.testing.assert_close(out, _loop_reference(q, k, v, window, causal),
                               **TOL[torch.float64])


def test_float32_and_scale():
    q, k, v = (randn(s, 3, 10, 8, dtype=torch.float32) for s in (5, 6, 7))
    out, _ = windowed_attention(q, k, v, 3, scale=0.5)
    ref, _ = scaled_dot_product_attention(q, k, v, mask=band_mask(10, 3), scale=0.5)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, ref, **TOL[torch.float32])


def test_window_one_returns_the_values():
    q, k, v = randn(0, 5, 4), randn(1, 5, 4), randn(2, 5, 3)
    out, weights = windowed_attention(q, k, v, 1)
    torch.testing.assert_close(out, v)
    assert torch.equal(weights, torch.ones(5, 1, dtype=torch.float64))


def test_weights_grow_linearly_with_the_length():
    sizes = []
    for L in (64, 128, 256):
        x = randn(0, L, 8)
        _, weights = windowed_attention(x, x, x, 4)
        sizes.append(weights.numel())
    assert sizes == [64 * 7, 128 * 7, 256 * 7]


def test_gradients_match_the_dense_version():
    q, k, v = (randn(s, 7, 4).requires_grad_() for s in (0, 1, 2))
    out, _ = windowed_attention(q, k, v, 2)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    dense, _ = scaled_dot_product_attention(q, k, v, mask=band_mask(7, 2))
    dense_grads = torch.autograd.grad(dense.square().sum(), (q, k, v))
    for g, h in zip(grads, dense_grads, strict=True):
        torch.testing.assert_close(g, h, **TOL[torch.float64])


def test_bad_input():
    x = randn(0, 5, 4)
    with pytest.raises(ValueError, match="at least 1"):
        windowed_attention(x, x, x, 0)
    with pytest.raises(TypeError, match="window must be an int"):
        windowed_attention(x, x, x, 2.0)
    with pytest.raises(TypeError, match="window must be an int"):
        windowed_attention(x, x, x, True)
    with pytest.raises(TypeError, match="causal must be a bool"):
        windowed_attention(x, x, x, 2, causal=1)
    with pytest.raises(ValueError, match="as many keys as queries"):
        windowed_attention(x, randn(1, 6, 4), randn(2, 6, 4), 2)
    with pytest.raises(ValueError, match="same feature size"):
        windowed_attention(x, randn(1, 5, 3), x, 2)
    with pytest.raises(ValueError, match="span 3"):
        band_to_dense(torch.ones(5, 4), 2)
    with pytest.raises(ValueError, match=r"\(\.\.\., L, span\)"):
        band_to_dense(torch.ones(3), 2)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("length,window", [(1, 1), (5, 2), (6, 3), (4, 9)])
def test_band_to_dense_of_ones_is_the_band_mask(length, window, causal):
    """Every in-band column lands on its key; columns past the ends are dropped, not folded."""
    span = window if causal else 2 * window - 1
    dense = band_to_dense(torch.ones(length, span), window, causal)
    assert torch.equal(dense, band_mask(length, window, causal=causal).float())
