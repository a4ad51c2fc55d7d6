"""scaled_dot_product_attention and attention_from_scores (attention_src.attention).

Peers: ``torch.nn.functional.scaled_dot_product_attention`` (its boolean ``attn_mask`` has our
convention, True = may attend) and a hand softmax of the scores. Hand-computed cases: the 3x3
Query/Key/Value demo of the source note seed 002, worked out in plain Python.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import attention_src as att
from attention_src import numpy_ref
from attention_src.attention import (
    attention_from_scores,
    check_qkv,
    scaled_dot_product_attention,
)
from attention_src.softmax import causal_mask, lengths_to_mask
from tests.conftest import (
    PROPERTY,
    TOL,
    check_dropout_rate,
    qkv,
    qkv_and_mask,
    randn,
    random_mask,
    seeds,
)

DTYPES = [torch.float32, torch.float64]

# (batch dims, L_q, L_k, d_k, d_v): L_q != L_k and d_k != d_v in most, 0, 1 and 2 batch dims
SHAPES = [
    ((), 3, 5, 4, 2),
    ((), 4, 2, 3, 3),
    ((2,), 4, 3, 5, 6),
    ((3,), 1, 1, 1, 1),
    ((2, 3), 2, 5, 3, 7),
    ((2, 2), 6, 4, 8, 2),
]
MASKS = ["none", "padding", "causal", "causal+padding", "random"]


def _make_mask(kind: str, batch: tuple[int, ...], L_q: int, L_k: int, seed: int):
    """A mask of the given kind, in the broadcast shape a user would write."""
    if kind == "none":
        return None
    if kind == "random":
        return random_mask(seed, *batch, L_q, L_k)
    if kind == "causal":
        return causal_mask(L_q, L_k)  # (L_q, L_k), shared by every batch entry
    # padding: one row per sequence, (B, 1, L_k) or (B, 1, 1, L_k) or (1, L_k) unbatched
    if batch:
        lens = torch.arange(batch[0]) % L_k + 1  # 1..L_k valid keys per sequence
        pad = lengths_to_mask(lens, L_k).reshape(batch[0], *[1] * len(batch[1:]), 1, L_k)
    else:
        pad = torch.ones(1, L_k, dtype=torch.bool)
        pad[0, -1] = L_k == 1  # mask the last key (unless it is the only one)
    return pad if kind == "padding" else pad & causal_mask(L_q, L_k)


def _hand_weights(q, k, scale, mask):
    """softmax(q k^T * scale) with -inf at masked positions, fully masked rows set to 0."""
    scores = (q @ k.transpose(-2, -1)) * scale
    if mask is None:
        return torch.softmax(scores, dim=-1)
    full = mask.expand_as(scores)
    w = torch.softmax(scores.masked_fill(~full, -math.inf), dim=-1)
    return torch.nan_to_num(w, nan=0.0)  # fully masked rows: 0/0 -> 0, the documented result


# --- peers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("scale", [None, 0.37])
def test_equals_torch_sdpa(shape, kind, dtype, scale):
    batch, L_q, L_k, d_k, d_v = shape
    q = randn(1, *batch, L_q, d_k, dtype=dtype)
    k = randn(2, *batch, L_k, d_k, dtype=dtype)
    v = randn(3, *batch, L_k, d_v, dtype=dtype)
    mask = _make_mask(kind, batch, L_q, L_k, seed=4)
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    assert out.shape == (*batch, L_q, d_v) and out.dtype == dtype
    assert w.shape == (*batch, L_q, L_k) and w.dtype == dtype
    torch.testing.assert_close(out, ref, **TOL[dtype])
    eff_scale = 1 / math.sqrt(d_k) if scale is None else scale
    torch.testing.assert_close(w, _hand_weights(q, k, eff_scale, mask), **TOL[dtype])
    torch.testing.assert_close(out, w @ v, **TOL[dtype])


@pytest.mark.parametrize("L", [1, 4])
def test_causal_mask_equals_torch_is_causal_when_square(L):
    q, k, v = randn(0, 2, L, 3), randn(1, 2, L, 3), randn(2, 2, L, 5)
    out, _ = scaled_dot_product_attention(q, k, v, mask=causal_mask(L))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])


@PROPERTY
@given(qkv_and_mask(), st.sampled_from([None, 0.0, 0.5, 2.0]))
def test_equals_torch_sdpa_property(data, scale):
    q, k, v, mask = data
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])
    eff_scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    torch.testing.assert_close(w, _hand_weights(q, k, eff_scale, mask), **TOL[torch.float64])


def test_top_level_export_is_the_same_function():
    assert att.scaled_dot_product_attention is scaled_dot_product_attention


# --- hand-computed cases (seed 002: Query/Key/Value 3x3 demo) ------------------------------

QUERY = [[1, 0, 2], [2, 2, 2], [2, 1, 3]]
KEY = [[0, 1, 1], [4, 4, 0], [2, 3, 1]]
VALUE = [[1, 2, 3], [2, 8, 0], [2, 6, 3]]

# Query @ Key^T worked out by hand, e.g. row 0: (1,0,2).(0,1,1)=2, .(4,4,0)=4, .(2,3,1)=4
SEED_SCORES = [
    [2.0, 4.0, 4.0],
    [4.0, 16.0, 12.0],
    [4.0, 12.0, 10.0],
]


def _plain_softmax(row: list[float]) -> list[float]:
    exps = [math.exp(s) for s in row]
    total = sum(exps)
    return [e / total for e in exps]


def _plain_matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    return [[sum(a[i][t] * b[t][j] for t in range(len(b))) for j in range(len(b[0]))]
            for i in range(len(a))]


def _seed_tensors(dtype):
    return (torch.tensor(QUERY, dtype=dtype), torch.tensor(KEY, dtype=dtype),
            torch.tensor(VALUE, dtype=dtype))


def test_seed_scores_literal_agrees_with_plain_python():
    # guards the literal matrix against a typo: recompute it with plain Python dot products
    assert _plain_matmul(QUERY, [list(c) for c in zip(*KEY, strict=True)]) == SEED_SCORES


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_seed_002_unscaled_hand_case(dtype):
    weights = [_plain_softmax(row) for row in SEED_SCORES]
    # row 0 by hand: exp(2), exp(4), exp(4) -> 1/(1+2e^2), e^2/(1+2e^2), e^2/(1+2e^2)
    e2 = math.exp(2)
    assert weights[0] == pytest.approx([1 / (1 + 2 * e2), e2 / (1 + 2 * e2), e2 / (1 + 2 * e2)])
    outputs = _plain_matmul(weights, VALUE)
    q, k, v = _seed_tensors(dtype)
    tol = TOL[dtype]

    out, w = scaled_dot_product_attention(q, k, v, scale=1.0)
    torch.testing.assert_close(w, torch.tensor(weights, dtype=dtype), **tol)
    torch.testing.assert_close(out, torch.tensor(outputs, dtype=dtype), **tol)

    np_dtype = {torch.float32: "float32", torch.float64: "float64"}[dtype]
    qn, kn, vn = (t.numpy().astype(np_dtype) for t in (q, k, v))
    out_np, w_np = numpy_ref.scaled_dot_product_attention(qn, kn, vn, scale=1.0)
    torch.testing.assert_close(torch.from_numpy(w_np), torch.tensor(weights, dtype=dtype), **tol)
    torch.testing.assert_close(torch.from_numpy(out_np), torch.tensor(outputs, dtype=dtype), **tol)


def test_seed_002_default_scale_hand_case():
    scale = 1 / math.sqrt(3)  # d_k = 3
    weights = [_plain_softmax([s * scale for s in row]) for row in SEED_SCORES]
    outputs = _plain_matmul(weights, VALUE)
    q, k, v = _seed_tensors(torch.float64)
    out, w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(w, torch.tensor(weights, dtype=torch.float64), **TOL[torch.float64])
    torch.testing.assert_close(out, torch.tensor(outputs, dtype=torch.float64),
                               **TOL[torch.float64])
    out_np, w_np = numpy_ref.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy())
    assert out_np.tolist() == pytest.approx([pytest.approx(r, abs=1e-12) for r in outputs])
    assert w_np.tolist() == pytest.approx([pytest.approx(r, abs=1e-12) for r in weights])


def test_hand_case_with_mask():
    # query 0 may not see key 1; query 1 sees only key 0
    mask = torch.tensor([[True, False, True], [True, False, False], [True, True, True]])
    q, k, v = _seed_tensors(torch.float64)
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, scale=1.0)
    w0 = _plain_softmax([2.0, 4.0])  # keys 0 and 2 of query 0
    expected_w = [[w0[0], 0.0, w0[1]], [1.0, 0.0, 0.0], _plain_softmax(SEED_SCORES[2])]
    torch.testing.assert_close(w, torch.tensor(expected_w, dtype=torch.float64), atol=1e-12,
                               rtol=0)
    torch.testing.assert_close(out[1], v[0], atol=1e-12, rtol=0)


# --- properties ----------------------------------------------------------------------------


@PROPERTY
@given(qkv_and_mask())
def test_weights_are_a_distribution_and_masked_entries_are_zero(data):
    q, k, v, mask = data
    _, w = scaled_dot_product_attention(q, k, v, mask=mask)
    full = mask.expand_as(w)
    assert (w >= 0).all()
    assert (w[~full] == 0).all()
    sums = w.sum(-1)
    valid = full.any(-1)
    torch.testing.assert_close(sums[valid], torch.ones_like(sums[valid]))
    assert (sums[~valid] == 0).all()


@PROPERTY
@given(qkv_and_mask())
def test_each_output_row_lies_in_the_convex_hull_of_the_values(data):
    q, k, v, mask = data
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    # output = weights @ value with the weights in the simplex: a convex combination
    torch.testing.assert_close(out, w @ v, atol=1e-12, rtol=0)
    full = mask.expand(w.shape)
    v_rows = v.unsqueeze(-3).expand(*w.shape, v.shape[-1])  # (..., L_q, L_k, d_v)
    allowed = full.unsqueeze(-1)
    hi = torch.where(allowed, v_rows, -math.inf).amax(-2)  # (..., L_q, d_v)
    lo = torch.where(allowed, v_rows, math.inf).amin(-2)
    valid = full.any(-1)
    assert (out[valid] <= hi[valid] + 1e-12).all()
    assert (out[valid] >= lo[valid] - 1e-12).all()
    assert (out[~valid] == 0).all()  # fully masked query: zero output


@PROPERTY
@given(qkv_and_mask())
def test_scale_zero_gives_the_mean_of_the_unmasked_values(data):
    q, k, v, mask = data
    out, w = scaled_dot_product_attention(q, k, v, mask=mask, scale=0.0)
    full = mask.expand(w.shape).to(v.dtype)  # (..., L_q, L_k)
    count = full.sum(-1, keepdim=True)
    expected = (full @ v) / count.clamp(min=1)  # mean of the unmasked value rows
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    out_nomask, _ = scaled_dot_product_attention(q, k, v, scale=0.0)
    torch.testing.assert_close(out_nomask, v.mean(-2, keepdim=True).expand_as(out_nomask),
                               atol=1e-12, rtol=0)


@PROPERTY
@given(qkv(), st.data())
def test_permuting_keys_with_values_changes_nothing_and_queries_permute_outputs(t, data):
    q, k, v = t
    pk = torch.as_tensor(data.draw(st.permutations(range(k.shape[-2]))))
    pq = torch.as_tensor(data.draw(st.permutations(range(q.shape[-2]))))
    out, w = scaled_dot_product_attention(q, k, v)
    out_k, w_k = scaled_dot_product_attention(q, k[..., pk, :], v[..., pk, :])
    torch.testing.assert_close(out_k, out, atol=1e-12, rtol=0)
    torch.testing.assert_close(w_k, w[..., pk], atol=1e-12, rtol=0)
    out_q, _ = scaled_dot_product_attention(q[..., pq, :], k, v)
    torch.testing.assert_close(out_q, out[..., pq, :], atol=1e-12, rtol=0)


# --- dropout -------------------------------------------------------------------------------


def test_dropout_acts_on_the_weights_and_returns_them_undropped():
    q, k, v = randn(0, 2, 5, 4), randn(1, 2, 6, 4), randn(2, 2, 6, 3)
    out0, w0 = scaled_dot_product_attention(q, k, v)
    torch.manual_seed(123)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=0.4)
    torch.manual_seed(123)
    expected = F.dropout(w0, p=0.4, training=True) @ v
    torch.testing.assert_close(w, w0, atol=0, rtol=0)  # weights before dropout
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=0)
    assert not torch.allclose(out, out0)



@pytest.mark.parametrize("p", [0.2, 0.5])
@pytest.mark.parametrize("fn", ["scaled_dot_product_attention", "attention_from_scores"])
def test_dropout_zeroes_weights_at_rate_p_and_rescales_the_rest(fn, p):
    """With one-hot values (the identity) the output is the weights after dropout: over 200
    draws the fraction of zeros is p within 5 binomial SE and every kept weight is w / (1 - p)
    (see check_dropout_rate; a rate off by 0.1 fails)."""
    q, k = randn(0, 4, 5, 3), randn(1, 4, 6, 3)
    one_hot = torch.eye(6, dtype=torch.float64).expand(4, 6, 6)   # value: (B, L_k, d_v = L_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(3)              # (B, L_q, L_k)
    w = scores.softmax(dim=-1)                                    # before dropout
    torch.manual_seed(3)
    if fn == "scaled_dot_product_attention":
        draws = [scaled_dot_product_attention(q, k, one_hot, dropout_p=p)[0] for _ in range(200)]
    else:
        draws = [attention_from_scores(scores, one_hot, dropout_p=p)[0] for _ in range(200)]
    check_dropout_rate(torch.stack(draws), w, p)                 # (200, B, L_q, L_k)


def test_attention_from_scores_equals_sdpa_on_given_scores():
    q, k, v = randn(0, 3, 4, 5), randn(1, 3, 6, 5), randn(2, 3, 6, 2)
    mask = random_mask(3, 3, 1, 6)
    scores = (q @ k.transpose(-2, -1)) * 0.7
    out, w = attention_from_scores(scores, v, mask)
    ref_out, ref_w = scaled_dot_product_attention(q, k, v, mask=mask, scale=0.7)
    torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=0)
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)


# --- bad input -----------------------------------------------------------------------------


def test_rejects_query_key_feature_mismatch():
    with pytest.raises(ValueError, match=r"feature size d_k: query \(2, 3, 4\) has 4, "
                                         r"key \(2, 5, 3\) has 3"):
        scaled_dot_product_attention(torch.ones(2, 3, 4), torch.ones(2, 5, 3), torch.ones(2, 5, 6))


def test_rejects_key_value_length_mismatch():
    with pytest.raises(ValueError, match=r"same length L_k: key \(5, 4\) has 5, "
                                         r"value \(4, 6\) has 4"):
        scaled_dot_product_attention(torch.ones(3, 4), torch.ones(5, 4), torch.ones(4, 6))


def test_rejects_leading_dims_mismatch():
    with pytest.raises(ValueError, match=r"leading dimensions.*'query': \(2,\), 'key': \(3,\)"):
        scaled_dot_product_attention(torch.ones(2, 3, 4), torch.ones(3, 5, 4), torch.ones(3, 5, 6))
    # missing batch dim on one input: no silent broadcast
    with pytest.raises(ValueError, match=r"leading dimensions.*'value': \(\)"):
        scaled_dot_product_attention(torch.ones(2, 3, 4), torch.ones(2, 5, 4), torch.ones(5, 6))


@pytest.mark.parametrize("bad", ["query", "key", "value"])
def test_rejects_rank_below_two(bad):
    t = {"query": torch.ones(3, 4), "key": torch.ones(5, 4), "value": torch.ones(5, 2)}
    t[bad] = torch.ones(4)
    with pytest.raises(ValueError,
                       match=rf"{bad} must have at least 2 dimensions, got shape \(4,\)"):
        scaled_dot_product_attention(**t)


@pytest.mark.parametrize("bad", ["query", "key", "value"])
def test_rejects_integer_and_non_tensor_inputs(bad):
    t = {"query": torch.ones(3, 4), "key": torch.ones(5, 4), "value": torch.ones(5, 2)}
    t[bad] = torch.ones(t[bad].shape, dtype=torch.int64)
    with pytest.raises(TypeError, match=rf"{bad} must be a floating-point tensor, got dtype "
                                        r"torch.int64"):
        scaled_dot_product_attention(**t)
    t[bad] = [[1.0] * 4] * 3
    with pytest.raises(TypeError, match=rf"{bad} must be a torch.Tensor, got list"):
        scaled_dot_product_attention(**t)


def test_rejects_mixed_dtypes():
    with pytest.raises(TypeError, match="one dtype.*query: torch.float32, key: torch.float64"):
        scaled_dot_product_attention(torch.ones(3, 4), torch.ones(5, 4, dtype=torch.float64),
                                     torch.ones(5, 2))


def test_rejects_bad_masks():
    q, k, v = torch.ones(2, 3, 4), torch.ones(2, 5, 4), torch.ones(2, 5, 6)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 3, 4\) does not broadcast to the "
                                         r"scores' shape \(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(2, 3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask of shape \(1, 2, 3, 5\) .* \(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(1, 2, 3, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 1, 5\) .* \(2, 3, 5\)"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(3, 1, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must have dtype torch.bool.*got torch.float32"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(2, 3, 5))
    with pytest.raises(TypeError, match="mask must have dtype torch.bool.*got torch.uint8"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(5, dtype=torch.uint8))


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_rejects_dropout_out_of_range(p):
    q = torch.ones(3, 4)
    with pytest.raises(ValueError, match=rf"dropout_p must be in \[0, 1\), got {p}"):
        scaled_dot_product_attention(q, q, q, dropout_p=p)


def test_attention_from_scores_rejects_mismatched_value():
    with pytest.raises(ValueError, match=r"scores \(3, 4\) have 4 keys but value \(5, 2\) has 5"):
        attention_from_scores(torch.ones(3, 4), torch.ones(5, 2))


def test_attention_from_scores_rejects_bad_types():
    with pytest.raises(TypeError, match="value must be a torch.Tensor, got list"):
        attention_from_scores(torch.ones(3, 4), [[1.0]] * 4)
    with pytest.raises(TypeError, match="scores must be a torch.Tensor, got NoneType"):
        attention_from_scores(None, torch.ones(4, 2))
    with pytest.raises(TypeError, match="one dtype.*scores: torch.float32, value: torch.float64"):
        attention_from_scores(torch.ones(3, 4), torch.ones(4, 2, dtype=torch.float64))


# --- extreme but valid input ---------------------------------------------------------------


def test_scores_of_order_1e4_are_finite_and_match_torch():
    # entries ~1e2 in query and key: scores ~1e4, far beyond exp's float32 range (~88)
    q, k, v = randn(0, 2, 4, 6, scale=1e2), randn(1, 2, 5, 6, scale=1e2), randn(2, 2, 5, 3)
    assert (q @ k.transpose(-2, -1)).abs().max() > 1e4
    for dtype in DTYPES:
        qd, kd, vd = q.to(dtype), k.to(dtype), v.to(dtype)
        out, w = scaled_dot_product_attention(qd, kd, vd, scale=1.0)
        assert torch.isfinite(out).all() and torch.isfinite(w).all()
        ref = F.scaled_dot_product_attention(qd, kd, vd, scale=1.0)
        torch.testing.assert_close(out, ref, **TOL[dtype])
    out, _ = scaled_dot_product_attention(q, k, v)  # default scale, float64
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL[torch.float64])


def test_bfloat16_matches_torch_loosely():
    q, k, v = randn(0, 2, 3, 7, 16), randn(1, 2, 3, 9, 16), randn(2, 2, 3, 9, 8)
    mask = random_mask(3, 2, 1, 1, 9) | (torch.arange(9) == 0)
    qb, kb, vb = (t.to(torch.bfloat16) for t in (q, k, v))
    out, w = scaled_dot_product_attention(qb, kb, vb, mask=mask)
    assert out.dtype == w.dtype == torch.bfloat16
    # bfloat16 keeps 8 significant bits (unit roundoff 2^-9 ~ 0.002, one ulp of a value in
    # [2, 4) is 2^-6 ~ 0.016). We round the scaled queries, the scores and the weights to
    # bfloat16 in turn; PyTorch's CPU kernel accumulates in float32 and rounds once. Outputs
    # (|out| <~ 3) may therefore differ by one or two ulps: 2e-2 absolute + 2e-2 relative.
    ref = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask)
    torch.testing.assert_close(out, ref, atol=2e-2, rtol=2e-2)
    ref64 = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out.double(), ref64, atol=2e-2, rtol=2e-2)


def test_float64_is_kept_and_exact_to_1e_10():
    q, k, v = randn(0, 5, 3), randn(1, 4, 3), randn(2, 4, 2)
    out, w = scaled_dot_product_attention(q, k, v)
    assert out.dtype == w.dtype == torch.float64
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-10, rtol=0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fully_masked_row_gives_zeros_and_finite_gradients(dtype):
    q = randn(0, 2, 3, 4, dtype=dtype).requires_grad_(True)
    k = randn(1, 2, 5, 4, dtype=dtype).requires_grad_(True)
    v = randn(2, 2, 5, 3, dtype=dtype).requires_grad_(True)
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[1, 0] = False  # query 0 of batch 1 sees nothing
    out, w = scaled_dot_product_attention(q, k, v, mask=mask)
    assert (out[1, 0] == 0).all() and (w[1, 0] == 0).all()
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    (out.sum() + (w * randn(3, 2, 3, 5, dtype=dtype)).sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[1, 0] == 0).all()  # the masked query influences nothing


@PROPERTY
@given(seed=seeds)
def test_float32_agrees_with_float64(seed):
    q, k, v = randn(seed, 2, 4, 8), randn(seed + 1, 2, 6, 8), randn(seed + 2, 2, 6, 5)
    out32, _ = scaled_dot_product_attention(q.float(), k.float(), v.float())
    out64, _ = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out32.double(), out64, atol=1e-5, rtol=0)


def test_one_dimensional_key_mask_broadcasts_like_a_row():
    q, k, v = randn(0, 2, 3, 4), randn(1, 2, 5, 4), randn(2, 2, 5, 3)
    keys = torch.tensor([True, False, True, True, False])
    out1, w1 = scaled_dot_product_attention(q, k, v, mask=keys)
    out2, w2 = scaled_dot_product_attention(q, k, v, mask=keys[None, :])
    torch.testing.assert_close(out1, out2, atol=0, rtol=0)
    torch.testing.assert_close(w1, w2, atol=0, rtol=0)
    assert (w1[..., ~keys] == 0).all()


def test_attention_from_scores_rejects_mismatched_leading_dims():
    """scores (B, L_q, L_k) with an unbatched value (L_k, d_v) must not broadcast silently."""
    scores = torch.randn(2, 3, 4)
    value = torch.randn(4, 5)
    with pytest.raises(ValueError, match=r"\(2, 3, 4\).*\(4, 5\)"):
        attention_from_scores(scores, value)


# --- bad input named per argument, boundaries and defaults ---------------------------------


def test_attention_from_scores_by_default_leaves_scores_untouched():
    """inplace defaults to False: the caller's scores are not turned into the weights, even
    with autograd off (where overwriting them would be allowed)."""
    scores, value = randn(0, 2, 3, 4), randn(1, 2, 4, 5)
    before = scores.clone()
    with torch.no_grad():
        out, w = attention_from_scores(scores, value)
    assert torch.equal(scores, before) and w.data_ptr() != scores.data_ptr()
    torch.testing.assert_close(w, torch.softmax(before, dim=-1), atol=1e-12, rtol=0)
    torch.testing.assert_close(out, w @ value, atol=1e-12, rtol=0)


def test_attention_from_scores_names_the_mismatch_in_a_batch():
    # batched scores (B, L_q, L_k) = (2, 3, 4): the key count is the LAST axis (4), not L_q
    with pytest.raises(ValueError, match=r"^scores \(2, 3, 4\) have 4 keys but value "
                                         r"\(2, 5, 2\) has 5 rows$"):
        attention_from_scores(torch.ones(2, 3, 4), torch.ones(2, 5, 2))
    with pytest.raises(ValueError, match=r"^scores \(2, 3, 4\) and value \(3, 4, 5\) must share "
                                         r"their leading \(batch\) dimensions$"):
        attention_from_scores(torch.ones(2, 3, 4), torch.ones(3, 4, 5))
    with pytest.raises(ValueError, match=r"^dropout_p must be in \[0, 1\), got 1\.0$"):
        attention_from_scores(torch.ones(3, 4), torch.ones(4, 2), dropout_p=1.0)


@pytest.mark.parametrize("bad", ["scores", "value"])
def test_attention_from_scores_messages_start_with_the_argument(bad):
    t = {"scores": torch.ones(3, 4), "value": torch.ones(4, 2)}
    t[bad] = torch.ones(4)
    with pytest.raises(ValueError, match=rf"^{bad} must have at least 2 dimensions"):
        attention_from_scores(**t)
    t[bad] = torch.ones(3, 4, dtype=torch.int64)
    with pytest.raises(TypeError, match=rf"^{bad} must be a floating-point tensor"):
        attention_from_scores(**t)


def test_check_qkv_names_each_mismatch():
    q, k, v = torch.ones(2, 3, 4), torch.ones(2, 5, 4), torch.ones(2, 5, 6)
    check_qkv(q, k, v)  # valid: no error
    with pytest.raises(ValueError, match=r"^query and key must have the same feature size d_k: "
                                         r"query \(2, 3, 4\) has 4, key \(2, 5, 3\) has 3$"):
        check_qkv(q, torch.ones(2, 5, 3), v)
    with pytest.raises(ValueError, match=r"^key and value must have the same length L_k: key "
                                         r"\(2, 5, 4\) has 5, value \(2, 4, 6\) has 4$"):
        check_qkv(q, k, torch.ones(2, 4, 6))
    with pytest.raises(ValueError, match=r"^query, key and value must share their leading "
                                         r"dimensions, got \{'query': \(2,\), 'key': \(2,\), "
                                         r"'value': \(3,\)\}$"):
        check_qkv(q, k, torch.ones(3, 5, 6))


@pytest.mark.parametrize("with_mask", [False, True])
def test_attention_from_scores_inplace_turns_the_scores_into_the_weights(with_mask):
    """inplace=True (inference only) reuses the scores' memory for the weights, as documented:
    the returned weights ARE the scores tensor, with the values of the allocating call."""
    scores, value = randn(0, 2, 3, 4), randn(1, 2, 4, 5)
    mask = torch.tensor([True, False, True, True]) if with_mask else None
    ref_out, ref_w = attention_from_scores(scores, value, mask)
    with torch.no_grad():
        out, w = attention_from_scores(scores, value, mask, inplace=True)
    assert w.data_ptr() == scores.data_ptr()
    torch.testing.assert_close(w, ref_w, atol=1e-12, rtol=0)
    torch.testing.assert_close(out, ref_out, atol=1e-12, rtol=0)


def test_a_value_of_another_dtype_is_named_among_the_callers_arguments():
    """The dtype check names query, key and value (the caller's arguments), not the internal
    scores that a later check would compare with the value."""
    q = k = torch.ones(3, 4)
    with pytest.raises(TypeError, match=r"^inputs must share one dtype, got query: "
                                        r"torch\.float32, key: torch\.float32, value: "
                                        r"torch\.float64$"):
        scaled_dot_product_attention(q, k, torch.ones(3, 2, dtype=torch.float64))
