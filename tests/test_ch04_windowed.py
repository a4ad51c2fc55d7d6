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


@pytest.mark.parametrize("fn", ["windowed_attention", "band_to_dense"])
def test_window_and_causal_errors_name_the_argument_and_what_was_given(fn):
    x = randn(0, 5, 4)

    def call(window, causal=False):
        if fn == "windowed_attention":
            return windowed_attention(x, x, x, window, causal=causal)
        return band_to_dense(torch.ones(5, 3), window, causal)

    with pytest.raises(TypeError, match=r"^window must be an int, got float$"):
        call(2.0)
    with pytest.raises(TypeError, match=r"^window must be an int, got bool$"):
        call(True)
    with pytest.raises(TypeError, match=r"^window must be an int, got NoneType$"):
        call(None)
    for bad in (0, -3):
        with pytest.raises(ValueError, match=rf"^window must be at least 1 \(a query always "
                                             rf"sees itself\), got {bad}$"):
            call(bad)
    with pytest.raises(TypeError, match=r"^causal must be a bool, got int$"):
        call(2, causal=1)
    with pytest.raises(TypeError, match=r"^causal must be a bool, got NoneType$"):
        call(2, causal=None)


def test_window_one_is_the_smallest_window_and_two_needs_three_columns():
    """window = 1 (the boundary of the check) is accepted; window = 2 has span 3, causal 2."""
    x = randn(0, 4, 2)
    assert windowed_attention(x, x, x, 1)[1].shape == (4, 1)
    assert windowed_attention(x, x, x, 2)[1].shape == (4, 3)
    assert windowed_attention(x, x, x, 2, causal=True)[1].shape == (4, 2)
    assert band_to_dense(torch.ones(4, 1), 1).shape == (4, 4)


def test_causal_defaults_to_false_in_both_functions():
    q, k, v = randn(0, 6, 3), randn(1, 6, 3), randn(2, 6, 2)
    out, w = windowed_attention(q, k, v, 3)
    out_f, w_f = windowed_attention(q, k, v, 3, causal=False)
    assert torch.equal(out, out_f) and torch.equal(w, w_f)
    assert torch.equal(band_to_dense(w, 3), band_to_dense(w, 3, causal=False))
    assert torch.equal(band_to_dense(torch.ones(6, 5), 3), band_mask(6, 3).float())


def test_band_to_dense_messages_name_the_expected_layout():
    with pytest.raises(ValueError, match=r"^weights must be a tensor of shape \(\.\.\., L, "
                                         r"span\)$"):
        band_to_dense(torch.ones(3), 2)
    with pytest.raises(ValueError, match=r"^weights must be a tensor of shape"):
        band_to_dense([[1.0, 1.0, 1.0]], 2)
    with pytest.raises(ValueError, match=r"^weights of shape \(2, 5, 4\) do not have span 3 "
                                         r"columns, the band of window=2, causal=False$"):
        band_to_dense(torch.ones(2, 5, 4), 2)
    with pytest.raises(ValueError, match=r"^weights of shape \(5, 3\) do not have span 2 "
                                         r"columns, the band of window=2, causal=True$"):
        band_to_dense(torch.ones(5, 3), 2, causal=True)


def test_band_to_dense_by_hand_with_a_batch_axis():
    """L = 3, window = 2: band column t of query i is key i - 1 + t. Entries numbered 1..9 land
    at hand-placed positions; columns off the sequence (query 0's t = 0, query 2's t = 2)
    vanish."""
    band = torch.arange(1.0, 10.0).reshape(3, 3)
    expected = torch.tensor([[2.0, 3.0, 0.0], [4.0, 5.0, 6.0], [0.0, 7.0, 8.0]])
    assert torch.equal(band_to_dense(band, 2), expected)
    batch = torch.stack([band, 10 * band])  # (2, 3, 3)
    assert torch.equal(band_to_dense(batch, 2), torch.stack([expected, 10 * expected]))
    causal = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])  # column t: key i - 1 + t
    assert torch.equal(band_to_dense(causal, 2, causal=True),
                       torch.tensor([[2.0, 0.0, 0.0], [3.0, 4.0, 0.0], [0.0, 5.0, 6.0]]))


def test_windowed_default_scale_is_one_over_sqrt_d_k():
    q, k, v = randn(0, 2, 5, 4), randn(1, 2, 5, 4), randn(2, 2, 5, 3)
    out, w = windowed_attention(q, k, v, 2)
    out_s, w_s = windowed_attention(q, k, v, 2, scale=0.5)
    torch.testing.assert_close(out, out_s, rtol=0, atol=1e-15)
    torch.testing.assert_close(w, w_s, rtol=0, atol=1e-15)


def test_windowed_attention_of_length_one_with_batch_axes():
    """Size-1 axes must not be squeezed away: (2, 1, 1, d) in, (2, 1, 1, d_v) out."""
    q, k, v = randn(0, 2, 1, 1, 3), randn(1, 2, 1, 1, 3), randn(2, 2, 1, 1, 2)
    out, w = windowed_attention(q, k, v, 3)
    assert out.shape == (2, 1, 1, 2) and w.shape == (2, 1, 1, 5)
    torch.testing.assert_close(out, v)


def test_windowed_attention_keeps_the_inputs_device():
    """The band's validity mask is built on the inputs' device. On a CPU-only build the one
    other device is ``meta`` (shapes without data): the result must stay there, with the
    shapes of the CPU result."""
    q = torch.empty(2, 5, 4, device="meta")
    out, weights = windowed_attention(q, q, q, 2)
    assert out.device.type == "meta" and weights.device.type == "meta"
    assert out.shape == (2, 5, 4) and weights.shape == (2, 5, 3)
