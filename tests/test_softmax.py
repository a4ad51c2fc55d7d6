"""softmax, masked_softmax, lengths_to_mask and causal_mask (attention_src.softmax)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import attention_src as att
from attention_src.softmax import causal_mask, lengths_to_mask, masked_softmax, softmax
from tests.conftest import PROPERTY, broadcast_masks, randn, seeds

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


# --- softmax -------------------------------------------------------------------------------


@PROPERTY
@given(shape=shapes, seed=seeds, data=st.data(), dtype=st.sampled_from([torch.float32,
                                                                       torch.float64]))
def test_softmax_equals_torch_softmax(shape, seed, data, dtype):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    x = randn(seed, *shape, dtype=dtype, scale=5.0)
    tol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim), atol=tol, rtol=tol)


def test_softmax_hand_case():
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    total = math.exp(1) + math.exp(2) + math.exp(3)
    expected = [math.exp(1) / total, math.exp(2) / total, math.exp(3) / total]
    assert softmax(x).tolist() == pytest.approx(expected, rel=1e-14)


def test_softmax_does_not_overflow_on_large_scores():
    x = torch.tensor([[1e4, 1e4 - 1.0, -1e4], [1000.0, 0.0, 0.0]], dtype=torch.float32)
    out = softmax(x)
    assert torch.isfinite(out).all()
    e = math.exp(-1.0)
    torch.testing.assert_close(out[0], torch.tensor([1 / (1 + e), e / (1 + e), 0.0]))
    torch.testing.assert_close(out[1], torch.tensor([1.0, 0.0, 0.0]))


@PROPERTY
@given(shape=shapes, seed=seeds, c=st.floats(-1e3, 1e3))
def test_softmax_is_invariant_to_adding_a_constant(shape, seed, c):
    x = randn(seed, *shape)
    torch.testing.assert_close(softmax(x + c), softmax(x), atol=1e-12, rtol=1e-9)


def test_softmax_rejects_bad_input():
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        softmax([1.0, 2.0])
    with pytest.raises(TypeError, match="floating-point.*torch.int64"):
        softmax(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"at least 1 dimensions, got shape \(\)"):
        softmax(torch.tensor(1.0))


# --- masked_softmax ------------------------------------------------------------------------


@st.composite
def scores_and_mask(draw):
    shape = draw(st.lists(st.integers(1, 5), min_size=2, max_size=4).map(tuple))
    scores = randn(draw(seeds), *shape, scale=3.0)
    return scores, draw(broadcast_masks(shape))


@PROPERTY
@given(scores_and_mask())
def test_masked_softmax_weights_are_a_distribution_and_masked_entries_are_zero(sm):
    scores, mask = sm
    w = masked_softmax(scores, mask)
    full = mask.expand_as(w)
    assert w.shape == scores.shape
    assert (w >= 0).all()
    assert (w[~full] == 0).all()  # exactly zero, not just small
    sums = w.sum(-1)
    any_valid = full.any(-1)
    torch.testing.assert_close(sums[any_valid], torch.ones_like(sums[any_valid]))
    assert (sums[~any_valid] == 0).all()  # fully masked rows: all zero


@PROPERTY
@given(scores_and_mask(), st.data())
def test_masked_softmax_ignores_a_constant_added_to_a_row(sm, data):
    scores, mask = sm
    consts = randn(data.draw(seeds), *scores.shape[:-1], 1, scale=100.0)
    torch.testing.assert_close(
        masked_softmax(scores + consts, mask), masked_softmax(scores, mask), atol=1e-12, rtol=1e-9
    )


@PROPERTY
@given(scores_and_mask())
def test_masked_softmax_is_the_softmax_of_the_unmasked_scores(sm):
    scores, mask = sm
    w = masked_softmax(scores, mask)
    full = mask.expand_as(scores)
    flat_s, flat_m, flat_w = (t.reshape(-1, scores.shape[-1]) for t in (scores, full, w))
    for s_row, m_row, w_row in zip(flat_s, flat_m, flat_w, strict=True):
        if not m_row.any():
            assert (w_row == 0).all()
            continue
        expected = torch.zeros_like(s_row)
        expected[m_row] = softmax(s_row[m_row])  # the hand softmax on the kept entries only
        torch.testing.assert_close(w_row, expected, atol=1e-12, rtol=1e-12)


#: An integer dtype of each float dtype's width, to compare floats bit for bit (-0.0 with 0.0).
_BITS = {torch.float64: torch.int64, torch.float32: torch.int32, torch.float16: torch.int16,
         torch.bfloat16: torch.int16}


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """NaN in the same places, and every other entry the same bit pattern (sign included)."""
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(
        a.contiguous().view(_BITS[a.dtype])[~nan], b.contiguous().view(_BITS[b.dtype])[~nan])


@PROPERTY
@given(scores_and_mask(), st.sampled_from([torch.float64, torch.float32, torch.float16,
                                           torch.bfloat16]), seeds,
       st.sampled_from([-1, -2]), st.sampled_from(["contiguous", "scores", "mask"]))
def test_masked_softmax_equals_its_masked_fill_form_bit_for_bit(sm, dtype, seed, dim, permuted):
    """A consistency check, not evidence of correctness (the other masked_softmax tests are):
    ``masked_softmax`` selects with ``torch.where``, which was chosen for speed, and must give
    exactly the weights and gradients of the form it replaced, two ``masked_fill`` calls
    around ``torch.softmax``: the same bits (signs of zeros included) and the same contiguous
    layout. Broadcast masks, every floating dtype, either of the last two dims, scores or a
    mask stored transposed, rows with a -inf or a +inf score (NaN weights in both forms,
    except where masked) and, among the drawn masks, fully masked rows."""
    scores, mask = sm
    scores = scores.to(dtype)
    scores.view(-1)[::3] = -math.inf  # some allowed and some masked scores overflowed
    scores.view(-1)[1::11] = math.inf  # and a few the other way: NaN weights, but not masked
    if permuted == "scores":  # the same values, stored transposed
        scores = scores.transpose(-1, -2).contiguous().transpose(-1, -2)
    elif permuted == "mask":
        mask = mask.transpose(-1, -2).contiguous().transpose(-1, -2)
    lowest = torch.finfo(dtype).min
    grad_out = randn(seed, *scores.shape).to(dtype)
    results = []
    for form in ("where", "masked_fill"):
        leaf = scores.clone().requires_grad_()
        if form == "where":
            weights = masked_softmax(leaf, mask, dim=dim)
        else:
            weights = torch.softmax(leaf.masked_fill(~mask, lowest), dim=dim).masked_fill(
                ~mask, 0.0)
        (grad,) = torch.autograd.grad(weights, leaf, grad_out)
        results.append((weights.detach(), grad))
    (w_where, g_where), (w_fill, g_fill) = results
    assert w_where.dtype == dtype and w_where.shape == scores.shape
    assert w_where.stride() == w_fill.stride()
    assert _same_bits(w_where, w_fill)
    assert _same_bits(g_where, g_fill)


def test_masked_softmax_without_mask_is_softmax():
    x = randn(0, 2, 3, 4)
    torch.testing.assert_close(masked_softmax(x), softmax(x), atol=1e-15, rtol=0)
    torch.testing.assert_close(masked_softmax(x, dim=0), softmax(x, dim=0), atol=1e-15, rtol=0)


def test_masked_softmax_along_another_dim():
    x = randn(1, 4, 3)
    mask = torch.tensor([[True, False, True]] * 4)
    mask[0] = False
    w = masked_softmax(x, mask, dim=0)
    # column 1 is masked for every query: along dim 0 it is a fully masked "row"
    torch.testing.assert_close(w.sum(0), torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64))
    assert (w[~mask] == 0).all()


def test_fully_masked_row_gives_zero_weights_and_finite_zero_gradient():
    scores = randn(3, 2, 3, 4).requires_grad_(True)
    mask = torch.ones(2, 3, 4, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of batch 0 may attend to nothing
    mask[1, 2, :2] = False
    w = masked_softmax(scores, mask)
    assert (w[0, 1] == 0).all()
    (w * randn(4, 2, 3, 4)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert (scores.grad[0, 1] == 0).all()
    assert (scores.grad[1, 2, :2] == 0).all()  # masked entries get no gradient


@pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")
def test_fully_masked_row_produces_no_nan_anywhere_in_the_backward_pass():
    # Filling masked scores with -inf instead of the lowest finite number gives the same
    # weights and (after masked_fill's backward) the same gradient, but NaN inside softmax's
    # backward; anomaly detection turns such an intermediate NaN into an error.
    scores = randn(8, 2, 4).requires_grad_(True)
    mask = torch.tensor([[False] * 4, [True, False, True, True]])
    with torch.autograd.detect_anomaly(check_nan=True):
        (masked_softmax(scores, mask) * randn(9, 2, 4)).sum().backward()
    assert torch.isfinite(scores.grad).all() and (scores.grad[0] == 0).all()


def test_masked_softmax_gradient_equals_minus_inf_reference():
    scores = randn(5, 3, 4)
    mask = torch.tensor([[True, True, False, True]] * 3)
    upstream = randn(6, 3, 4)
    ours = scores.clone().requires_grad_(True)
    (masked_softmax(ours, mask) * upstream).sum().backward()
    ref = scores.clone().requires_grad_(True)
    (torch.softmax(ref.masked_fill(~mask, -math.inf), -1) * upstream).sum().backward()
    torch.testing.assert_close(ours.grad, ref.grad, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_masked_softmax_low_precision_fully_masked_row(dtype):
    scores = torch.randn(2, 3).to(dtype)
    mask = torch.tensor([[False, False, False], [True, False, True]])
    w = masked_softmax(scores, mask)
    assert w.dtype == dtype
    assert (w[0] == 0).all()
    assert torch.isfinite(w).all()
    torch.testing.assert_close(w[1].sum(), torch.tensor(1.0, dtype=dtype))


def test_masked_softmax_rejects_bad_masks():
    scores = torch.zeros(2, 3, 4)
    with pytest.raises(TypeError, match="torch.bool.*got torch.float32"):
        masked_softmax(scores, torch.ones(2, 3, 4))
    with pytest.raises(TypeError, match="torch.bool.*got torch.int64"):
        masked_softmax(scores, torch.ones(2, 3, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="mask must be a boolean torch.Tensor, got list"):
        masked_softmax(scores, [[True] * 4])
    with pytest.raises(ValueError, match=r"mask of shape \(3, 3\) .* \(2, 3, 4\)"):
        masked_softmax(scores, torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 3, 4\) .* \(2, 3, 4\)"):
        masked_softmax(scores, torch.ones(2, 1, 3, 4, dtype=torch.bool))
    # more leading dimensions than the scores, even of size 1: no silent broadcast
    with pytest.raises(ValueError, match=r"mask of shape \(1, 2, 3, 4\) .* \(2, 3, 4\)"):
        masked_softmax(scores, torch.ones(1, 2, 3, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="scores must be a torch.Tensor"):
        masked_softmax(None, torch.ones(4, dtype=torch.bool))


# --- lengths_to_mask -----------------------------------------------------------------------


@PROPERTY
@given(data=st.data(), batch=st.lists(st.integers(1, 4), min_size=0, max_size=2),
       max_len=st.integers(1, 8))
def test_lengths_to_mask_matches_a_python_loop(data, batch, max_len):
    n = math.prod(batch)
    lens = data.draw(st.lists(st.integers(0, max_len), min_size=n, max_size=n))
    valid = torch.tensor(lens, dtype=torch.long).reshape(batch)
    mask = lengths_to_mask(valid, max_len)
    assert mask.dtype == torch.bool
    assert mask.shape == (*batch, max_len)
    flat = mask.reshape(n, max_len)
    for b, length in enumerate(lens):
        assert flat[b].tolist() == [j < length for j in range(max_len)]


def test_lengths_to_mask_example_and_int32():
    mask = lengths_to_mask(torch.tensor([0, 2, 3], dtype=torch.int32), 3)
    assert mask.tolist() == [[False, False, False], [True, True, False], [True, True, True]]
    empty = lengths_to_mask(torch.tensor([], dtype=torch.long), 2)
    assert empty.shape == (0, 2)


def test_lengths_to_mask_rejects_bad_lengths():
    with pytest.raises(ValueError,
                       match=r"valid_lens must lie in \[0, 3\], got values from 0 to 4"):
        lengths_to_mask(torch.tensor([0, 4]), 3)
    with pytest.raises(ValueError, match=r"\[0, 3\], got values from -1 to 2"):
        lengths_to_mask(torch.tensor([-1, 2]), 3)
    with pytest.raises(TypeError, match="integer tensor, got dtype torch.float32"):
        lengths_to_mask(torch.tensor([1.0, 2.0]), 3)
    with pytest.raises(TypeError, match="integer tensor, got dtype torch.bool"):
        lengths_to_mask(torch.tensor([True]), 3)
    with pytest.raises(TypeError, match="valid_lens must be a torch.Tensor, got list"):
        lengths_to_mask([1, 2], 3)
    with pytest.raises(ValueError, match="max_len must be positive, got 0"):
        lengths_to_mask(torch.tensor([0]), 0)
    with pytest.raises(TypeError, match="max_len must be an int, got float"):
        lengths_to_mask(torch.tensor([1]), 3.0)
    with pytest.raises(TypeError, match="max_len must be an int, got bool"):
        lengths_to_mask(torch.tensor([1]), True)


# --- causal_mask ---------------------------------------------------------------------------


@PROPERTY
@given(L_q=st.integers(1, 12), L_k=st.none() | st.integers(1, 12))
@example(L_q=3, L_k=5).via("queries aligned to the end of a longer key sequence")
@example(L_q=5, L_k=2).via("more queries than keys: the first rows see nothing")
@example(L_q=4, L_k=None).via("square")
def test_causal_mask_matches_definition(L_q, L_k):
    mask = causal_mask(L_q, L_k)
    n_k = L_q if L_k is None else L_k
    assert mask.shape == (L_q, n_k)
    assert mask.dtype == torch.bool
    # query i is the (n_k - L_q + i)-th token: it sees keys up to and including itself
    for i in range(L_q):
        for j in range(n_k):
            assert bool(mask[i, j]) == (j <= i + n_k - L_q), (i, j)
    expected = torch.ones(L_q, n_k, dtype=torch.bool).tril(diagonal=n_k - L_q)
    assert torch.equal(mask, expected)


def test_causal_mask_square_is_lower_triangular_and_last_query_sees_all():
    assert causal_mask(3).tolist() == [[True, False, False], [True, True, False], [True] * 3]
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True] * 4]
    assert att.causal_mask(1, 5).all()


def test_causal_mask_rejects_bad_lengths():
    with pytest.raises(ValueError, match="length_q must be positive, got 0"):
        causal_mask(0)
    with pytest.raises(ValueError, match="length_k must be positive, got -2"):
        causal_mask(3, -2)
    with pytest.raises(TypeError, match="length_q must be an int, got float"):
        causal_mask(2.5)
    with pytest.raises(TypeError, match="length_k must be an int, got Tensor"):
        causal_mask(2, torch.tensor(3))


@pytest.mark.parametrize("with_mask", [False, True])
def test_inplace_masked_softmax_equals_the_allocating_one(with_mask):
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(2, 3, 4, 5, generator=gen, dtype=torch.float64) * 10
    mask = torch.rand(2, 1, 4, 5, generator=gen) > 0.4 if with_mask else None
    if with_mask:
        mask[0, 0, 1] = False  # one fully masked row
    expected = masked_softmax(scores, mask)
    work = scores.clone()
    result = masked_softmax(work, mask, inplace=True)
    assert result.data_ptr() == work.data_ptr()  # no new tensor
    torch.testing.assert_close(result, expected, rtol=0, atol=1e-12)
    if with_mask:
        assert torch.all(result[0, :, 1] == 0)


def test_inplace_is_refused_while_autograd_records():
    scores = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(ValueError, match="inplace"):
        masked_softmax(scores, inplace=True)


def test_attention_without_autograd_equals_attention_with_it():
    """scaled_dot_product_attention takes the in-place path under no_grad: same numbers."""
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 5, 3, generator=gen, dtype=torch.float64) for _ in range(3))
    q.requires_grad_(True)
    mask = torch.tensor([True, True, False, True, False])
    out_grad, w_grad = att.scaled_dot_product_attention(q, k, v, mask)
    with torch.no_grad():
        out, w = att.scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, out_grad.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(w, w_grad.detach(), rtol=0, atol=1e-12)


# --- bad input named per argument, boundaries and defaults ---------------------------------


def test_softmax_messages_name_the_x_argument():
    with pytest.raises(TypeError, match=r"^x must be a torch\.Tensor, got list$"):
        softmax([1.0, 2.0])
    with pytest.raises(TypeError, match=r"^x must be a floating-point tensor, got dtype "
                                        r"torch\.int64"):
        softmax(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"^x must have at least 1 dimensions, got shape \(\)$"):
        softmax(torch.tensor(1.0))


def test_masked_softmax_accepts_a_vector_and_names_scores_when_rejecting_a_scalar():
    # rank 1 is the boundary: a single row of scores with a key mask is valid input
    scores = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    keep = torch.tensor([True, False, True])
    e1, e3 = math.exp(1.0), math.exp(3.0)
    expected = [e1 / (e1 + e3), 0.0, e3 / (e1 + e3)]
    assert masked_softmax(scores, keep).tolist() == pytest.approx(expected, rel=1e-14)
    assert masked_softmax(scores).tolist() == pytest.approx(softmax(scores).tolist(), rel=1e-14)
    with pytest.raises(ValueError,
                       match=r"^scores must have at least 1 dimensions, got shape \(\)$"):
        masked_softmax(torch.tensor(1.0))
    with pytest.raises(TypeError, match=r"^scores must be a floating-point tensor, got dtype "
                                        r"torch\.int64"):
        masked_softmax(torch.tensor([1, 2]))
    with pytest.raises(TypeError, match=r"^scores must be a torch\.Tensor, got NoneType$"):
        masked_softmax(None)


@pytest.mark.parametrize("with_mask", [False, True])
def test_masked_softmax_by_default_leaves_scores_untouched(with_mask):
    """inplace defaults to False: the caller's scores survive the call, with or without
    autograd recording them."""
    scores = randn(11, 3, 4)
    before = scores.clone()
    mask = torch.tensor([True, False, True, True]) if with_mask else None
    with torch.no_grad():
        w = masked_softmax(scores, mask)
    assert torch.equal(scores, before) and w.data_ptr() != scores.data_ptr()
    leaf = before.clone().requires_grad_(True)
    masked_softmax(leaf, mask).sum().backward()  # allowed: nothing is overwritten
    assert torch.equal(leaf.detach(), before)


def test_inplace_refusal_names_the_option_and_needs_both_conditions():
    scores = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(ValueError,
                       match=r"^inplace=True needs scores that autograd does not record$"):
        masked_softmax(scores, inplace=True)
    # refused only when autograd records the scores: a plain tensor with grad mode on, or a
    # leaf that requires grad under no_grad, may be overwritten
    plain = torch.randn(3, 4)
    expected = torch.softmax(plain, dim=-1)
    torch.testing.assert_close(masked_softmax(plain.clone(), inplace=True), expected)
    expected_leaf = torch.softmax(scores.detach(), dim=-1)
    with torch.no_grad():
        torch.testing.assert_close(masked_softmax(scores, inplace=True), expected_leaf)


@pytest.mark.parametrize("with_mask", [False, True])
def test_each_row_is_shifted_by_its_own_maximum(with_mask):
    """Rows of very different scales in float32: shifting every row by one global maximum
    would underflow the low row to exp(-2000) = 0 and give 0/0 = NaN. Reference: the softmax
    of each row alone (exact values worked out by hand)."""
    scores = torch.tensor([[1000.0, 999.0, 998.0], [-1000.0, -1001.0, -1002.0]])
    e1, e2 = math.exp(-1.0), math.exp(-2.0)
    row = [1 / (1 + e1 + e2), e1 / (1 + e1 + e2), e2 / (1 + e1 + e2)]
    expected = torch.tensor([row, row])
    mask = torch.ones(2, 3, dtype=torch.bool) if with_mask else None
    torch.testing.assert_close(softmax(scores), expected)
    torch.testing.assert_close(masked_softmax(scores, mask), expected)
    torch.testing.assert_close(masked_softmax(scores.clone(), mask, inplace=True), expected)
    # the same along dim 0 (columns of very different scales)
    cols = scores.T.contiguous()
    mask_t = None if mask is None else mask.T.contiguous()
    torch.testing.assert_close(softmax(cols, dim=0), expected.T)
    torch.testing.assert_close(masked_softmax(cols.clone(), mask_t, dim=0, inplace=True),
                               expected.T)


def test_lengths_to_mask_messages_name_their_argument():
    with pytest.raises(TypeError, match=r"^valid_lens must be a torch\.Tensor, got list$"):
        lengths_to_mask([1, 2], 3)
    with pytest.raises(TypeError, match=r"^valid_lens must be an integer tensor, got dtype "
                                        r"torch\.float32$"):
        lengths_to_mask(torch.tensor([1.0]), 3)
    with pytest.raises(ValueError, match=r"^max_len must be positive, got 0$"):
        lengths_to_mask(torch.tensor([0]), 0)
    with pytest.raises(TypeError, match=r"^max_len must be an int, got float$"):
        lengths_to_mask(torch.tensor([0]), 2.0)


def test_lengths_to_mask_bounds_are_inclusive_on_both_ends():
    # 0 and max_len are both valid lengths; -1 and max_len + 1 are not
    assert lengths_to_mask(torch.tensor([0, 3]), 3).tolist() == [[False] * 3, [True] * 3]
    with pytest.raises(ValueError, match=r"^valid_lens must lie in \[0, 3\], got values from "
                                         r"-1 to 3$"):
        lengths_to_mask(torch.tensor([-1, 3]), 3)
    with pytest.raises(ValueError, match=r"got values from 0 to 4$"):
        lengths_to_mask(torch.tensor([0, 4]), 3)


def test_lengths_to_mask_stays_on_the_device_of_the_lengths():
    # the meta device (shapes without data) stands in for a GPU on this CPU-only test machine
    lens = torch.empty(2, 0, dtype=torch.long, device="meta")
    mask = lengths_to_mask(lens, 3)
    assert mask.device.type == "meta" and mask.shape == (2, 0, 3)


def test_lengths_to_mask_of_a_two_dimensional_batch():
    # lengths (2, 3) -> mask (2, 3, max_len=4), each row from its own length
    lens = torch.tensor([[0, 1, 4], [2, 3, 1]])
    mask = lengths_to_mask(lens, 4)
    assert mask.shape == (2, 3, 4)
    for b in range(2):
        for t in range(3):
            assert mask[b, t].tolist() == [j < int(lens[b, t]) for j in range(4)]


def test_causal_and_band_mask_messages_name_their_argument():
    with pytest.raises(ValueError, match=r"^length_q must be positive, got 0$"):
        causal_mask(0, 3)
    with pytest.raises(ValueError, match=r"^length_k must be positive, got 0$"):
        causal_mask(3, 0)
    with pytest.raises(ValueError, match=r"^length must be positive, got 0$"):
        att.band_mask(0, 2)
    with pytest.raises(TypeError, match=r"^length must be an int, got float$"):
        att.band_mask(2.0, 2)
    with pytest.raises(ValueError, match=r"^window must be at least 1 \(a query always sees "
                                         r"itself\), got 0$"):
        att.band_mask(3, 0)
    with pytest.raises(TypeError, match=r"^window must be an int, got float$"):
        att.band_mask(3, 2.5)
    with pytest.raises(TypeError, match=r"^causal must be a bool, got int$"):
        att.band_mask(3, 1, causal=1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_inplace_equals_the_allocating_path_where_the_allowed_scores_are_the_lowest(dtype):
    """Rows whose allowed scores are all -inf (scores that overflowed) or all the dtype's
    lowest value: there the masked entries' exp(lowest - max) is 1, not 0, and both paths must
    give the same finite weights (zeros for the -inf row), never NaN. Also ordinary and fully
    masked rows, in the same tensor."""
    lowest = torch.finfo(dtype).min
    scores = torch.tensor([[-math.inf, -math.inf, 1.0, 1.0],
                           [lowest, lowest, 1.0, 1.0],
                           [0.5, -1.0, 2.0, 3.0],
                           [1.0, 2.0, 3.0, 4.0]], dtype=dtype)
    mask = torch.tensor([[True, True, False, False],
                         [True, True, False, False],
                         [True, False, True, True],
                         [False, False, False, False]])
    expected = masked_softmax(scores, mask)
    got = masked_softmax(scores.clone(), mask, inplace=True)
    assert not torch.isnan(got).any()
    assert torch.equal(got[0], torch.zeros(4, dtype=dtype))  # as the allocating path gives
    for row in (0, 1, 3):  # the edge rows: exactly
        assert torch.equal(got[row], expected[row]), row
    # the ordinary row: PyTorch's fused softmax rounds differently, by an ulp at most
    torch.testing.assert_close(got[2], expected[2])
