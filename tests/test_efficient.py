"""attention_src.efficient: online softmax, blockwise attention, GQA, the KV cache.

References, each computed differently from the code under test: ``torch.softmax``,
``torch.nn.functional.scaled_dot_product_attention`` (PyTorch's fused kernel, with
``is_causal`` and ``enable_gqa``), the book's materialised ``scaled_dot_product_attention``
(for boolean masks and fully masked rows), keys and values repeated by ``repeat_interleave``,
and a full forward pass of the model at every decoding step.
"""

from __future__ import annotations

import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from attention_src import efficient
from attention_src.attention import scaled_dot_product_attention
from attention_src.efficient import (
    BlockCounts,
    KVCache,
    blockwise_attention,
    blockwise_attention_per_head,
    generate,
    grouped_query_attention,
    kv_cache_bytes,
    online_softmax,
    online_softmax_stats,
)
from attention_src.language_model import AttentionOnlyTransformer
from attention_src.profiling import TensorMemory
from attention_src.softmax import causal_mask
from tests.conftest import PROPERTY, TOL, qkv, qkv_and_mask, randn, random_mask, seeds

block_sizes = st.integers(1, 8)
#: Both implementations: every tile for all (batch, head) pairs at once, and one pair at a time
ATTEND = pytest.mark.parametrize("attend", [blockwise_attention, blockwise_attention_per_head],
                                 ids=["batched", "per_head"])


def _qkv(seed, batch, L_q, L_k, d_k=8, d_v=5, dtype=torch.float64, scale=1.0):
    return (randn(seed, *batch, L_q, d_k, dtype=dtype, scale=scale),
            randn(seed + 1, *batch, L_k, d_k, dtype=dtype, scale=scale),
            randn(seed + 2, *batch, L_k, d_v, dtype=dtype, scale=scale))


# ---------------------------------------------------------------------------- online softmax


@pytest.mark.parametrize("block_size", [1, 3, 10, 64])
@pytest.mark.parametrize("scale", [1.0, 1e4])
def test_online_softmax_equals_softmax(block_size, scale):
    x = randn(0, 4, 3, 10, scale=scale)
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, dim=-1),
                               **TOL[torch.float64])


def test_online_softmax_does_not_overflow_on_huge_values():
    # exp(1e4) is inf in float32 and float64: only the max subtraction keeps this finite
    x = torch.tensor([[1e4, 1e4 - 1.0, -1e4, 0.0, 1e4 + 2.0]], dtype=torch.float32)
    y = online_softmax(x, 2)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, torch.softmax(x, dim=-1), **TOL[torch.float32])


@PROPERTY
@given(n=st.integers(1, 20), block_size=block_sizes, seed=seeds)
def test_online_softmax_stats_are_the_max_and_the_shifted_sum(n, block_size, seed):
    x = randn(seed, 3, n, scale=30.0)
    m, s = online_softmax_stats(x, block_size)
    torch.testing.assert_close(m, x.amax(dim=-1), atol=0, rtol=0)
    torch.testing.assert_close(s, torch.exp(x - x.amax(-1, keepdim=True)).sum(-1),
                               **TOL[torch.float64])
    torch.testing.assert_close(online_softmax(x, block_size), torch.softmax(x, -1),
                               **TOL[torch.float64])


def test_online_softmax_with_minus_inf_entries():
    x = torch.tensor([[-math.inf, -math.inf, 1.0, 2.0], [3.0, -math.inf, -math.inf, 0.0]])
    torch.testing.assert_close(online_softmax(x, 2), torch.softmax(x, -1), **TOL[torch.float32])


# ------------------------------------------------------------------ blockwise vs PyTorch SDPA


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("L_q", "L_k", "block_size", "query_block_size"),
    [
        (64, 64, 16, 16),  # L divisible by the blocks
        (100, 100, 32, 32),  # ragged final block (100 = 3 * 32 + 4)
        (37, 53, 8, 5),  # L_q != L_k, neither divisible
        (53, 37, 8, 16),  # L_q > L_k
        (1, 9, 4, 4),  # a single query
        (9, 9, 1, 1),  # block size 1
        (20, 30, 100, 100),  # blocks larger than L
        (33, 33, 7, 128),  # all queries in one block, keys in 5
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@ATTEND
def test_blockwise_equals_torch_sdpa(attend, causal, L_q, L_k, block_size, query_block_size, dtype):
    q, k, v = _qkv(0, (2, 3), L_q, L_k, dtype=dtype)
    out = attend(q, k, v, causal=causal, block_size=block_size,
                              query_block_size=query_block_size)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert out.shape == (2, 3, L_q, 5) and out.dtype == dtype
    torch.testing.assert_close(out, ref, **TOL[dtype])


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
@pytest.mark.parametrize("causal", [False, True])
@ATTEND
def test_blockwise_batch_dimensions(attend, batch, causal):
    q, k, v = _qkv(1, batch, 23, 23)
    out = attend(q, k, v, causal, 6, query_block_size=4)
    assert out.shape == (*batch, 23, 5)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])


@ATTEND
def test_blockwise_default_blocks_on_a_long_sequence(attend):
    q, k, v = _qkv(2, (2,), 700, 700, d_k=16, d_v=16, dtype=torch.float32)
    for causal in (False, True):
        torch.testing.assert_close(attend(q, k, v, causal),
                                   F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                   **TOL[torch.float32])


@pytest.mark.parametrize("causal", [False, True])
@ATTEND
def test_blockwise_rescales_when_the_maximum_grows(attend, causal):
    # Scores rise along the keys, so every new key block raises the running maximum: an
    # accumulator that is not rescaled by exp(m_old - m_new) is wrong by a large factor.
    L, d = 32, 4
    q = torch.ones(1, L, d, dtype=torch.float64)
    k = torch.linspace(0, 8, L, dtype=torch.float64).view(1, L, 1).expand(1, L, d)
    v = randn(3, 1, L, 3)
    out = attend(q, k, v, causal, 4, query_block_size=8)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               **TOL[torch.float64])


@pytest.mark.parametrize("causal", [False, True])
@ATTEND
def test_blockwise_huge_scores_do_not_overflow(attend, causal):
    q, k, v = _qkv(4, (2,), 19, 19, dtype=torch.float32, scale=30.0)  # scores ~ 1e3..1e4
    out = attend(q, k, v, causal, 5, query_block_size=3)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               **TOL[torch.float32])


@ATTEND
def test_blockwise_scale_argument(attend):
    q, k, v = _qkv(5, (3,), 11, 13)
    for scale in (0.0, 0.1, 2.0):
        torch.testing.assert_close(
            attend(q, k, v, block_size=4, query_block_size=3, scale=scale),
            F.scaled_dot_product_attention(q, k, v, scale=scale), **TOL[torch.float64])


# ------------------------------------------------------------------------ masks and properties


@ATTEND
def test_fully_masked_row_returns_zeros(attend):
    q, k, v = _qkv(6, (2,), 5, 7)
    mask = torch.ones(5, 7, dtype=torch.bool)
    mask[2] = False  # query 2 may attend to nothing
    mask[4, :4] = False  # query 4 only to keys 4.. (its first key block is fully masked)
    out = attend(q, k, v, block_size=3, query_block_size=2, mask=mask)
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, 2], torch.zeros(2, 5, dtype=q.dtype))
    ref, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])


@PROPERTY
@given(data=qkv_and_mask(), causal=st.booleans(), block_size=block_sizes,
       query_block_size=block_sizes)
@ATTEND
def test_blockwise_equals_the_book_attention(attend, data, causal, block_size, query_block_size):
    q, k, v, mask = data
    out = attend(q, k, v, causal, block_size, query_block_size=query_block_size,
                              mask=mask)
    full = mask
    if causal:
        look_ahead = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        full = mask & look_ahead
    ref, _ = scaled_dot_product_attention(q, k, v, full)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])


@PROPERTY
@given(data=qkv(scale=3.0), causal=st.booleans(), sizes=st.lists(block_sizes, min_size=4,
                                                                max_size=4))
@ATTEND
def test_blockwise_does_not_depend_on_the_block_sizes(attend, data, causal, sizes):
    q, k, v = data
    a = attend(q, k, v, causal, sizes[0], query_block_size=sizes[1])
    b = attend(q, k, v, causal, sizes[2], query_block_size=sizes[3])
    torch.testing.assert_close(a, b, **TOL[torch.float64])


@ATTEND
def test_empty_sequences_give_an_empty_or_zero_output(attend):
    q, k, v = _qkv(7, (2,), 3, 0)
    assert torch.equal(attend(q, k, v), torch.zeros(2, 3, 5, dtype=q.dtype))
    q, k, v = _qkv(7, (2,), 0, 4)
    assert attend(q, k, v).shape == (2, 0, 5)


# -------------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("causal", [False, True])
@ATTEND
def test_gradients_equal_torch_sdpa(attend, causal):
    q, k, v = (t.requires_grad_() for t in _qkv(8, (2,), 13, 13))
    out = attend(q, k, v, causal, 4, query_block_size=3)
    weights = randn(9, *out.shape)  # a random linear functional of the output
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    ref_grads = torch.autograd.grad((ref * weights).sum(), (q, k, v))
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, **TOL[torch.float64])


@ATTEND
def test_gradients_with_a_fully_masked_row_are_finite_and_correct(attend):
    q, k, v = (t.requires_grad_() for t in _qkv(10, (), 6, 6))
    mask = random_mask(11, 6, 6)
    mask[1] = False
    out = attend(q, k, v, block_size=2, query_block_size=4, mask=mask)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref, _ = scaled_dot_product_attention(q, k, v, mask)
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for g, r in zip(grads, ref_grads, strict=True):
        assert torch.isfinite(g).all()
        torch.testing.assert_close(g, r, **TOL[torch.float64])


# ------------------------------------------------------------------- causal block skipping


class _CountMatmuls(TorchFunctionMode):
    """Counts the matrix products PyTorch is asked to compute, whatever the caller."""

    PRODUCTS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm,
                torch.Tensor.mm, torch.bmm, torch.Tensor.bmm, torch.addmm, torch.Tensor.addmm,
                torch.Tensor.addmm_, torch.baddbmm, torch.Tensor.baddbmm_, torch.einsum)

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.PRODUCTS:
            self.calls += 1
        return func(*args, **(kwargs or {}))


def _tiles_with_a_visible_pair(L_q, L_k, query_block_size, block_size):
    """Tiles of the dense causal mask that hold at least one allowed (query, key) pair."""
    visible = causal_mask(max(L_q, L_k))[:L_q, :L_k]  # (L_q, L_k), True where j <= i
    count = 0
    for i0 in range(0, L_q, query_block_size):
        for j0 in range(0, L_k, block_size):
            count += bool(visible[i0:i0 + query_block_size, j0:j0 + block_size].any())
    return count


@pytest.mark.parametrize(
    ("L_q", "L_k", "block_size", "query_block_size"),
    [(64, 64, 8, 8), (100, 100, 32, 32), (37, 53, 8, 5), (53, 37, 4, 16), (128, 128, 16, 64)],
)
@ATTEND
def test_causal_skips_exactly_the_blocks_above_the_diagonal(attend, L_q, L_k, block_size,
                                                            query_block_size):
    q, k, v = _qkv(12, (2,), L_q, L_k)
    with _CountMatmuls() as mode:
        _, counts = attend(q, k, v, True, block_size,
                                        query_block_size=query_block_size, return_counts=True)
    n_tiles = math.ceil(L_q / query_block_size) * math.ceil(L_k / block_size)
    expected = _tiles_with_a_visible_pair(L_q, L_k, query_block_size, block_size)
    assert counts == BlockCounts(expected, n_tiles - expected, n_tiles)
    # one Q K^T and one P V product per computed tile: for both batch entries at once
    # (batched), or for each of the 2 entries in turn (per head)
    per_tile = 2 if attend is blockwise_attention else 2 * 2
    assert mode.calls == per_tile * expected
    _, full = attend(q, k, v, False, block_size,
                                  query_block_size=query_block_size, return_counts=True)
    assert full == BlockCounts(n_tiles, 0, n_tiles)


@ATTEND
def test_causal_computes_about_half_the_tiles(attend):
    q, k, v = _qkv(13, (), 256, 256, dtype=torch.float32)
    _, counts = attend(q, k, v, True, 32, query_block_size=32, return_counts=True)
    n = 256 // 32
    assert counts.computed == n * (n + 1) // 2  # the lower triangle and the diagonal: 36 of 64


# ------------------- the batched loop, the per-head loop and the recomputing backward pass


def _gradients(out, inputs, seed=60):
    """Gradients of a random linear functional of ``out`` with respect to ``inputs``."""
    weights = randn(seed, *out.shape, dtype=out.dtype)
    return torch.autograd.grad((out * weights).sum(), inputs)


@PROPERTY
@given(data=qkv_and_mask(), causal=st.booleans(), block_size=block_sizes,
       query_block_size=block_sizes)
def test_batched_loop_equals_the_per_head_loop(data, causal, block_size, query_block_size):
    q, k, v, mask = data
    args = dict(causal=causal, block_size=block_size, query_block_size=query_block_size,
                mask=mask, return_counts=True)
    out, counts = blockwise_attention(q, k, v, **args)
    ref, ref_counts = blockwise_attention_per_head(q, k, v, **args)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])
    assert counts == ref_counts


@PROPERTY
@given(data=qkv_and_mask(), causal=st.booleans(), block_size=block_sizes,
       query_block_size=block_sizes)
def test_recomputing_backward_equals_autograd_through_the_per_head_loop(
        data, causal, block_size, query_block_size):
    q, k, v, mask = (t.requires_grad_() if t.is_floating_point() else t for t in data)
    args = dict(causal=causal, block_size=block_size, query_block_size=query_block_size,
                mask=mask)
    grads = _gradients(blockwise_attention(q, k, v, **args), (q, k, v))
    ref = _gradients(blockwise_attention_per_head(q, k, v, **args), (q, k, v))
    for g, r in zip(grads, ref, strict=True):
        torch.testing.assert_close(g, r, **TOL[torch.float64])


@pytest.mark.parametrize("causal", [False, True])
def test_recomputing_backward_passes_gradcheck(causal):
    # finite differences, independent of any backward formula; query 2 sees no key at all
    q, k, v = (t.requires_grad_() for t in _qkv(61, (2,), 7, 9, d_k=3, d_v=2))
    mask = random_mask(62, 7, 9, p=0.8)
    mask[2] = False

    def f(q, k, v):
        return blockwise_attention(q, k, v, causal, 4, query_block_size=3, mask=mask)

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_a_mask_modified_in_place_after_the_forward_pass_raises_in_backward():
    # the backward pass recomputes the weights from the mask: a mask changed in between would
    # give the gradients of another function, so autograd's version check must stop it
    q, k, v = (t.requires_grad_() for t in _qkv(65, (2,), 6, 6))
    mask = random_mask(66, 6, 6, p=0.7)
    mask[:, 0] = True
    out = blockwise_attention(q, k, v, block_size=2, query_block_size=3, mask=mask)
    mask.fill_(True)  # the caller reuses its mask buffer before calling backward
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        _gradients(out, (q, k, v))
    # left alone, the same call differentiates fine (the error is the mask's doing)
    mask2 = random_mask(66, 6, 6, p=0.7)
    mask2[:, 0] = True
    out = blockwise_attention(q, k, v, block_size=2, query_block_size=3, mask=mask2)
    ref = scaled_dot_product_attention(q, k, v, mask2)[0]
    for got, want in zip(_gradients(out, (q, k, v)), _gradients(ref, (q, k, v)), strict=True):
        torch.testing.assert_close(got, want, **TOL[torch.float64])


#: the whole message, word for word: it names what is unsupported and the alternative
SECOND_ORDER_MESSAGE = "^" + re.escape(
    "blockwise_attention supports first-order gradients only: its backward pass "
    "(FlashAttention's, recomputing every tile) is not differentiable, so create_graph=True "
    "(double backward, a gradient penalty) is not supported; use "
    "blockwise_attention_per_head, which ordinary autograd differentiates to any order") + "$"


@pytest.mark.parametrize("fn", [
    lambda q, k, v: blockwise_attention(q, k, v, False, 3, query_block_size=2),
    lambda q, k, v: grouped_query_attention(q, k, v, block_size=3, query_block_size=2),
], ids=["blockwise", "gqa"])
def test_second_order_gradients_raise_instead_of_being_wrong(fn):
    q, k, v = (t.requires_grad_() for t in _qkv(67, (2, 1), 5, 7, d_k=3, d_v=2))
    out = fn(q, k, v)
    with pytest.raises(NotImplementedError, match=SECOND_ORDER_MESSAGE):
        torch.autograd.grad(out.sum(), (q,), create_graph=True)
    # a gradient penalty (loss + |dL/dq|^2, differentiated again) raises too
    out = fn(q, k, v)
    with pytest.raises(NotImplementedError, match="first-order"):
        (grad_q,) = torch.autograd.grad(out.pow(2).sum(), (q,), create_graph=True)
        torch.autograd.grad(grad_q.pow(2).sum(), (k,))
    # first order, without create_graph, still works
    (grad_q,) = torch.autograd.grad(fn(q, k, v).sum(), (q,))
    assert grad_q.shape == q.shape


def test_the_per_head_loop_gives_second_order_gradients_equal_to_torch_sdpa():
    # the alternative the error names: a gradient penalty through it equals PyTorch's
    q, k, v = (t.requires_grad_() for t in _qkv(68, (2,), 5, 7, d_k=3, d_v=2))

    def penalty(out):
        (grad_q,) = torch.autograd.grad(out.sum(), (q,), create_graph=True)
        return torch.autograd.grad(out.pow(2).sum() + grad_q.pow(2).sum(), (k,))[0]

    got = penalty(blockwise_attention_per_head(q, k, v, False, 3, query_block_size=2))
    want = penalty(F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(got, want, **TOL[torch.float64])


def test_backward_of_only_the_inputs_that_need_it():
    q, k, v = _qkv(63, (2,), 10, 12)
    v.requires_grad_()
    out = blockwise_attention(q, k, v, block_size=4, query_block_size=3)
    (grad_v,) = _gradients(out, (v,))
    ref = _gradients(F.scaled_dot_product_attention(q, k, v), (v,))[0]
    torch.testing.assert_close(grad_v, ref, **TOL[torch.float64])


def test_the_custom_backward_is_used_only_where_a_gradient_is_needed():
    q, k, v = _qkv(64, (2,), 6, 6)
    assert blockwise_attention(q, k, v).grad_fn is None  # nothing requires a gradient
    q.requires_grad_()
    out, counts = blockwise_attention(q, k, v, True, 2, query_block_size=2,
                                      return_counts=True)
    assert type(out.grad_fn).__name__ == "_BlockwiseAttentionBackward"
    assert counts == BlockCounts(6, 3, 9)  # counted on the autograd path too
    with torch.no_grad():
        assert blockwise_attention(q, k, v).grad_fn is None
    # the per-head loop is differentiated by ordinary autograd, operator by operator
    assert "_Blockwise" not in type(blockwise_attention_per_head(q, k, v).grad_fn).__name__


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_gradients_equal_torch_enable_gqa(causal):
    # the key and value gradients are summed over the query heads that share them
    q = randn(65, 2, 6, 9, 4).requires_grad_()
    k = randn(66, 2, 2, 11, 4).requires_grad_()
    v = randn(67, 2, 2, 11, 3).requires_grad_()
    grads = _gradients(grouped_query_attention(q, k, v, causal, block_size=4,
                                               query_block_size=5), (q, k, v))
    ref = _gradients(F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                    enable_gqa=True), (q, k, v))
    for g, r in zip(grads, ref, strict=True):
        assert g.shape == r.shape
        torch.testing.assert_close(g, r, **TOL[torch.float64])


@pytest.mark.parametrize(("causal", "tiles"), [(False, 4 * 3), (True, 3 + 3 + 2 + 1)])
def test_backward_recomputes_each_computed_tile_with_five_products(causal, tiles):
    # 13 queries in 4 blocks of 4 (the last ragged), 9 keys in 3 blocks of 4: causal skips
    # the tiles above the diagonal in the backward pass as in the forward pass. Per tile:
    # S = Q K^T, dV += P^T dO, dP = dO V^T, dQ += dS K, dK += dS^T Q
    q, k, v = (t.requires_grad_() for t in _qkv(68, (2, 3), 13, 9))
    out, counts = blockwise_attention(q, k, v, causal, 4, query_block_size=4,
                                      return_counts=True)
    assert counts.computed == tiles
    weights = randn(69, *out.shape)
    with TensorMemory() as mem:  # a dispatch mode: it sees the operators of the backward pass
        (out * weights).sum().backward()
    assert mem.calls["bmm"] == 5 * tiles and "mm" not in mem.calls


def test_tiles_are_written_into_reused_buffers():
    # every Q K^T product and every P V product but the first of a query block writes into
    # a buffer allocated once per tile shape: a fresh result per tile would be fresh memory
    # from the operating system each time (page faults)
    ops = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            ops.append(str(func))
            return func(*args, **(kwargs or {}))

    q, k, v = _qkv(70, (2, 3), 10, 11)  # query blocks of 4, 4, 2; key blocks of 4, 4, 3
    with torch.no_grad(), Record():
        blockwise_attention(q, k, v, block_size=4, query_block_size=4)
    assert ops.count("aten.bmm.out") == 9 + 3 * 2  # all 9 Q K^T, 2 P V per query block
    assert ops.count("aten.bmm.default") == 3  # the first P V of each query block
    # output, lse, and two buffers for each of the 4 tile shapes: (4 or 2) x (4 or 3)
    assert ops.count("aten.new_empty.default") == 1 + 1 + 2 * 4
    q, k, v = _qkv(71, (), 6, 5)
    ops.clear()
    with torch.no_grad(), Record():
        blockwise_attention(q, k, v, block_size=4, query_block_size=4)
    assert ops.count("aten.mm.out") == 4 + 2 and ops.count("aten.mm.default") == 2


@pytest.mark.parametrize("causal", [False, True])
def test_tile_buffers_have_the_shapes_of_the_tiles(causal):
    # a buffer of the wrong shape would still give the right output: PyTorch resizes an out=
    # tensor, with a warning; with warnings as errors, every buffer must fit its products
    q, k, v = _qkv(74, (2, 3), 10, 11)  # query blocks at 0, 4, 8; key blocks at 0, 4, 8
    mask = random_mask(75, 10, 11)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = blockwise_attention(q, k, v, causal, 4, query_block_size=4, mask=mask)
        gqa = grouped_query_attention(q, k[:, :1], v[:, :1], causal, block_size=4,
                                      query_block_size=4)
    full = mask & causal_mask(11)[:10] if causal else mask
    torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, full)[0],
                               **TOL[torch.float64])
    torch.testing.assert_close(gqa, F.scaled_dot_product_attention(
        q, k[:, :1], v[:, :1], is_causal=causal, enable_gqa=True), **TOL[torch.float64])


def _forward_memory(fn, L, grad, block=16):
    """Extra bytes of one call at length L: ``(alive after the call with the output kept,
    peak during it)``, with or without autograd."""
    q, k, v = _qkv(72, (2,), L, L, d_k=4, d_v=4, dtype=torch.float32)
    for t in (q, k, v):
        t.requires_grad_(grad)
    with TensorMemory() as mem:
        out = fn(q, k, v, True, block, query_block_size=block)
    alive = mem.now
    del out
    return alive, mem.peak


def test_the_recomputing_forward_keeps_only_the_output_and_one_number_per_query():
    for L in (32, 64, 128):
        alive, peak = _forward_memory(blockwise_attention, L, grad=True)
        assert alive == 2 * L * (4 + 1) * 4  # output (2, L, 4) and lse (2, L), float32
        assert _forward_memory(blockwise_attention, L, grad=False)[0] == 2 * L * 4 * 4
        assert peak < 2 * L * L * 4  # never a full (L, L) matrix per batch entry


def test_autograd_through_the_per_head_loop_keeps_every_tile():
    # the saved tensors grow like L^2: each causal 16 x 16 tile of weights, and more
    alive = {L: _forward_memory(blockwise_attention_per_head, L, grad=True)[0]
             for L in (32, 64, 128)}
    for L, bytes_ in alive.items():
        n = L // 16
        assert bytes_ > 2 * (n * (n + 1) // 2) * 16 * 16 * 4  # every computed tile's P
    assert alive[128] - alive[64] > 3 * (alive[64] - alive[32])  # growing steps: not affine


def _backward_peak(L, block=16):
    q, k, v = (t.requires_grad_() for t in _qkv(73, (2,), L, L, d_k=4, d_v=4,
                                                   dtype=torch.float32))
    out = blockwise_attention(q, k, v, True, block, query_block_size=block)
    weights = torch.ones_like(out)
    with TensorMemory() as mem:
        out.backward(weights)
    return mem.peak


def test_the_recomputing_backward_needs_memory_linear_in_L():
    peaks = [_backward_peak(L) for L in (64, 128, 256, 512)]
    # dQ, dK, dV, D and a scaled copy of Q grow by a fixed number of bytes per token, the
    # tiles are of fixed size: doubling L at most doubles the peak (L^2 would quadruple it)
    for a, b in zip(peaks, peaks[1:], strict=False):
        assert b <= 2 * a
    assert peaks[-1] < 2 * 512 * 512 * 4 / 8  # far below one (L, L) matrix per entry


# ---------------------------------------------------------------------- grouped-query attention


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("h", "h_kv"), [(8, 2), (6, 3), (4, 1), (4, 4)])
def test_gqa_equals_torch_enable_gqa_and_repeated_heads(causal, h, h_kv):
    q = randn(14, 2, h, 11, 8)
    k = randn(15, 2, h_kv, 17, 8)
    v = randn(16, 2, h_kv, 17, 3)
    out = grouped_query_attention(q, k, v, causal, block_size=4, query_block_size=3)
    assert out.shape == (2, h, 11, 3)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(out, ref, **TOL[torch.float64])
    group = h // h_kv
    k_rep, v_rep = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k_rep, v_rep,
                                                                   is_causal=causal),
                               **TOL[torch.float64])


def test_gqa_without_batch_dimensions_and_with_scale():
    q, k, v = randn(17, 4, 5, 6), randn(18, 2, 7, 6), randn(19, 2, 7, 6)
    out = grouped_query_attention(q, k, v, scale=0.5)
    k_rep, v_rep = k.repeat_interleave(2, dim=0), v.repeat_interleave(2, dim=0)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k_rep, v_rep, scale=0.5),
                               **TOL[torch.float64])


# --------------------------------------------------------------------------------- KV cache


@pytest.mark.parametrize("max_len", [None, 40])
def test_kv_cache_holds_what_was_appended(max_len):
    cache = KVCache(max_len)
    assert cache.length == 0 and cache.nbytes == 0 and cache.allocated_nbytes == 0
    ks, vs = [], []
    for step, t in enumerate([5, 1, 1, 20, 1]):
        k, v = randn(20 + step, 2, 3, t, 4), randn(40 + step, 2, 3, t, 6)
        ks.append(k)
        vs.append(v)
        keys, values = cache.append(k, v)
        assert torch.equal(keys, torch.cat(ks, dim=2))
        assert torch.equal(values, torch.cat(vs, dim=2))
    assert cache.length == 28
    assert cache.nbytes == 2 * 3 * 28 * (4 + 6) * 8
    assert cache.allocated_nbytes >= cache.nbytes
    if max_len is not None:
        assert cache.allocated_nbytes == 2 * 3 * 40 * (4 + 6) * 8


def test_kv_cache_bytes_matches_the_cache():
    cache = KVCache()
    cache.append(randn(0, 1, 2, 9, 16, dtype=torch.float32),
                 randn(1, 1, 2, 9, 16, dtype=torch.float32))
    assert cache.nbytes == kv_cache_bytes(1, 2, 16, 9, torch.float32)
    assert kv_cache_bytes(32, 8, 128, 4096, torch.float16) == 2 * 32 * 8 * 128 * 4096 * 2
    assert kv_cache_bytes(2, 4, 8, 10, batch=3) == 2 * 2 * 3 * 4 * 10 * 8 * 4


@pytest.mark.parametrize("num_layers", [1, 2, 3])
def test_generate_with_cache_equals_without(num_layers):
    torch.manual_seed(num_layers)
    model = AttentionOnlyTransformer(vocab_size=13, embed_dim=24, num_heads=3,
                                     num_layers=num_layers, max_len=40)
    prompt = torch.randint(0, 13, (2, 7))
    timings: list[float] = []
    tokens, logits = generate(model, prompt, 25, use_cache=True, timings=timings)
    ref_tokens, ref_logits = generate(model, prompt, 25, use_cache=False)
    assert tokens.shape == (2, 32) and logits.shape == (2, 25, 13) and len(timings) == 25
    assert torch.equal(tokens[:, :7], prompt)
    assert torch.equal(tokens, ref_tokens)
    torch.testing.assert_close(logits, ref_logits, atol=1e-4, rtol=1e-5)
    # the logits at each step are those of a full forward pass on the tokens so far
    with torch.no_grad():
        full = model(tokens[:, :-1])[:, 6:]  # (2, 25, 13)
    torch.testing.assert_close(logits, full, atol=1e-4, rtol=1e-5)
    assert torch.equal(logits.argmax(-1), tokens[:, 7:])
    assert model.training  # generate restores the mode it found


# -------------------------------------------------------------------------------- bad input


def test_bad_inputs_raise_clear_errors():
    q, k, v = _qkv(30, (2,), 4, 6)
    with pytest.raises(ValueError, match="block_size must be positive, got 0"):
        blockwise_attention(q, k, v, block_size=0)
    with pytest.raises(TypeError, match="block_size must be an int, got float"):
        blockwise_attention(q, k, v, block_size=2.0)
    with pytest.raises(ValueError, match="query_block_size must be positive, got -1"):
        blockwise_attention(q, k, v, query_block_size=-1)
    with pytest.raises(ValueError, match=r"same feature size d_k.*\(2, 4, 8\).*\(2, 6, 7\)"):
        blockwise_attention(q, k[..., :7], v)
    with pytest.raises(ValueError, match=r"same length L_k.*\(2, 6, 8\).*\(2, 5, 5\)"):
        blockwise_attention(q, k, v[:, :5])
    with pytest.raises(TypeError, match="floating-point tensor, got dtype torch.int64"):
        blockwise_attention(q.long(), k, v)
    with pytest.raises(TypeError, match="causal must be a bool, got int"):
        blockwise_attention(q, k, v, causal=1)
    with pytest.raises(TypeError, match="mask must have dtype torch.bool"):
        blockwise_attention(q, k, v, mask=torch.ones(4, 6))
    with pytest.raises(ValueError, match=r"mask of shape \(5, 6\) does not broadcast"):
        blockwise_attention(q, k, v, mask=torch.ones(5, 6, dtype=torch.bool))
    with pytest.raises(TypeError, match="scale must be a float or None, got str"):
        blockwise_attention(q, k, v, scale="1")
    with pytest.raises(TypeError, match="block_size must be an int"):
        online_softmax(q, 1.5)
    with pytest.raises(ValueError, match="at least one entry on its last axis"):
        online_softmax(torch.zeros(3, 0), 2)


def test_gqa_bad_inputs():
    q, k, v = randn(0, 2, 6, 5, 4), randn(1, 2, 4, 7, 4), randn(2, 2, 4, 7, 3)
    with pytest.raises(ValueError, match=r"h = 6 must be a multiple of .* h_kv = 4"):
        grouped_query_attention(q, k, v)
    with pytest.raises(ValueError, match="same number of heads h_kv"):
        grouped_query_attention(q, k[:, :3], v[:, :2])
    with pytest.raises(ValueError, match="must share their batch dimensions"):
        grouped_query_attention(q, k[:1], v[:1])
    with pytest.raises(ValueError, match="same feature size d_k"):
        grouped_query_attention(q, k[:, :3, :, :3], v[:, :3])
    with pytest.raises(TypeError, match="causal must be a bool"):
        grouped_query_attention(q, k[:, :3], v[:, :3], causal="yes")
    with pytest.raises(ValueError, match="at least 3 dimensions"):
        grouped_query_attention(q[0, 0], k[0, 0], v[0, 0])


def test_kv_cache_and_generate_bad_inputs():
    cache = KVCache(max_len=4)
    with pytest.raises(ValueError, match=r"must be \(B, h_kv, t, d\)"):
        cache.append(randn(0, 1, 2, 3, 4, 5), randn(0, 1, 2, 3, 4, 5))
    with pytest.raises(ValueError, match="must agree on"):
        cache.append(randn(0, 1, 2, 3, 4), randn(0, 1, 2, 2, 4))
    cache.append(randn(0, 1, 2, 3, 4), randn(0, 1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"do not match the cache's"):
        cache.append(randn(0, 1, 3, 1, 4), randn(0, 1, 3, 1, 4))
    with pytest.raises(ValueError, match="at most max_len = 4 positions; it has 3 and 2"):
        cache.append(randn(0, 1, 2, 2, 4), randn(0, 1, 2, 2, 4))
    with pytest.raises(TypeError, match="share one dtype"):
        cache.append(randn(0, 1, 2, 1, 4), randn(0, 1, 2, 1, 4, dtype=torch.float32))
    with pytest.raises(ValueError, match="max_len must be positive"):
        KVCache(max_len=0)
    model = AttentionOnlyTransformer(5, 8, 2, 1, max_len=10)
    prompt = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(ValueError, match="exceeds the model's max_len = 10"):
        generate(model, prompt, 8)
    with pytest.raises(TypeError, match="model must be an AttentionOnlyTransformer"):
        generate(torch.nn.Linear(2, 2), prompt, 2)
    with pytest.raises(TypeError, match="use_cache must be a bool"):
        generate(model, prompt, 2, use_cache=None)
    with pytest.raises(ValueError, match="n_new must be positive"):
        generate(model, prompt, 0)
    with pytest.raises(ValueError, match="length must be an int >= 0"):
        kv_cache_bytes(1, 1, 1, -1)
    with pytest.raises(TypeError, match="dtype must be a torch.dtype"):
        kv_cache_bytes(1, 1, 1, 1, dtype="float32")


def test_generate_rejects_an_empty_prompt_and_a_bad_timings_argument():
    model = AttentionOnlyTransformer(5, 8, 2, 1, max_len=10)
    with pytest.raises(ValueError, match="at least one token, got L_0 = 0"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 2)
    with pytest.raises(TypeError, match="timings must be a list or None, got tuple"):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 2, timings=())


# ------------------------------------------------- planted bugs the tests above did not catch


def test_kv_cache_rejects_a_dtype_other_than_its_own():
    # a float32 append into a float64 cache must not be cast silently
    cache = KVCache()
    cache.append(randn(0, 1, 2, 3, 4), randn(1, 1, 2, 3, 4))  # float64
    with pytest.raises(ValueError, match=r"\(torch.float32\) do not match .*\(torch.float64\)"):
        cache.append(randn(2, 1, 2, 1, 4, dtype=torch.float32),
                     randn(3, 1, 2, 1, 4, dtype=torch.float32))
    assert cache.length == 3  # nothing was appended


def test_kv_cache_rejects_a_value_width_other_than_its_own():
    cache = KVCache()
    cache.append(randn(0, 1, 2, 3, 4), randn(1, 1, 2, 3, 6))  # d_k = 4, d_v = 6
    with pytest.raises(ValueError, match=r"value \(1, 2, 1, 5\).*do not match"):
        cache.append(randn(2, 1, 2, 1, 4), randn(3, 1, 2, 1, 5))


def test_kv_cache_doubles_its_storage_when_full():
    # amortised growth: the capacity doubles (from 16), it does not grow to the exact length
    cache = KVCache()
    capacities = []
    for step in range(100):
        cache.append(randn(step, 1, 1, 1, 2), randn(step + 1, 1, 1, 1, 2))
        capacity = cache.allocated_nbytes // (2 * 2 * 8)  # 1 head, d = 2, float64
        if not capacities or capacities[-1] != capacity:
            capacities.append(capacity)
    assert capacities == [16, 32, 64, 128]
    assert cache.length == 100 and cache.nbytes == 100 * 2 * 2 * 8


def test_generate_accepts_the_longest_legal_request():
    # the prompt and the generated tokens but the last are fed to the model:
    # L_0 + n_new - 1 = max_len is allowed, one more token is not
    torch.manual_seed(0)
    model = AttentionOnlyTransformer(5, 8, 2, 1, max_len=10)
    prompt = torch.zeros(1, 4, dtype=torch.long)
    for use_cache in (True, False):
        tokens, logits = generate(model, prompt, 7, use_cache=use_cache)
        assert tokens.shape == (1, 11) and logits.shape == (1, 7, 5)
    with pytest.raises(ValueError, match="prompt length 4 \\+ n_new 8 - 1 exceeds"):
        generate(model, prompt, 8)


def test_gqa_rejects_zero_key_value_heads_bad_blocks_and_scale():
    q, k, v = randn(0, 2, 4, 5, 3), randn(1, 2, 2, 7, 3), randn(2, 2, 2, 7, 3)
    with pytest.raises(ValueError, match=r"h = 4 must be a multiple of .* h_kv = 0"):
        grouped_query_attention(q, k[:, :0], v[:, :0])
    with pytest.raises(ValueError, match="block_size must be positive, got 0"):
        grouped_query_attention(q, k, v, block_size=0)
    with pytest.raises(ValueError, match="query_block_size must be positive, got -2"):
        grouped_query_attention(q, k, v, query_block_size=-2)
    with pytest.raises(TypeError, match="scale must be a float or None, got str"):
        grouped_query_attention(q, k, v, scale="0.5")


@ATTEND
def test_blockwise_rejects_a_non_bool_return_counts(attend):
    q, k, v = _qkv(31, (), 4, 4)
    with pytest.raises(TypeError, match="return_counts must be a bool, got int"):
        attend(q, k, v, return_counts=1)


# --------------------------------------------- argument names, boundaries and edge cases


def test_online_softmax_of_a_single_vector():
    # the last axis may be the only one: m and s are then 0-d
    x = randn(50, 7, scale=3.0)
    m, s = online_softmax_stats(x, 3)
    assert m.shape == () and s.shape == ()
    assert float(m) == float(x.max())
    torch.testing.assert_close(online_softmax(x, 3), torch.softmax(x, dim=-1),
                               **TOL[torch.float64])


def test_online_softmax_names_each_bad_argument():
    with pytest.raises(TypeError, match=r"^x must be a torch\.Tensor, got list"):
        online_softmax([1.0, 2.0], 2)
    with pytest.raises(TypeError, match=r"^x must be a floating-point tensor"):
        online_softmax_stats(torch.ones(3, dtype=torch.int64), 2)
    with pytest.raises(ValueError, match=r"^x must have at least 1 dimensions, got shape \(\)"):
        online_softmax_stats(torch.tensor(1.0), 2)
    with pytest.raises(ValueError, match=r"^x must have at least one entry on its last axis"):
        online_softmax_stats(torch.zeros(3, 0), 2)
    with pytest.raises(ValueError, match=r"^block_size must be positive, got 0"):
        online_softmax_stats(torch.zeros(3, 2), 0)


@ATTEND
def test_blockwise_names_each_bad_argument(attend):
    q, k, v = _qkv(32, (2,), 4, 6)
    with pytest.raises(TypeError, match=r"^causal must be a bool, got int"):
        attend(q, k, v, causal=1)
    with pytest.raises(TypeError, match=r"^return_counts must be a bool, got str"):
        attend(q, k, v, return_counts="yes")
    with pytest.raises(ValueError, match=r"^block_size must be positive, got 0"):
        attend(q, k, v, block_size=0)
    with pytest.raises(ValueError, match=r"^query_block_size must be positive, got 0"):
        attend(q, k, v, query_block_size=0)
    with pytest.raises(TypeError, match=r"^scale must be a float or None, got bool"):
        attend(q, k, v, scale=True)
    with pytest.raises(TypeError, match=r"^query must be a torch\.Tensor, got list"):
        attend([[1.0]], k, v)


@ATTEND
def test_blockwise_counts_of_an_empty_input(attend):
    # no key, no query or no head: nothing is computed, every tile is skipped
    for batch, L_q, L_k, total in (((2,), 5, 0, 0), ((2,), 0, 7, 0), ((0,), 5, 7, 3 * 2)):
        q, k, v = _qkv(33, batch, L_q, L_k)
        out, counts = attend(q, k, v, True, 4, query_block_size=2,
                                          return_counts=True)
        assert out.shape == (*batch, L_q, 5) and not out.any()
        assert counts == BlockCounts(0, total, total)
        assert all(type(c) is int for c in counts)


@ATTEND
def test_blockwise_counts_are_ints_per_head(attend):
    q, k, v = _qkv(34, (3, 2), 10, 10)
    _, counts = attend(q, k, v, True, 4, query_block_size=4, return_counts=True)
    # 3 x 3 tiles of 4 (the last ragged); causal keeps the 6 on and below the diagonal
    assert counts == BlockCounts(6, 3, 9)
    assert all(type(c) is int for c in counts)


@ATTEND
def test_blockwise_single_key_and_many_batch_dimensions(attend):
    # one key: every query's output is that key's value; five batch dimensions broadcast
    q, k, v = _qkv(35, (2,), 6, 1)
    torch.testing.assert_close(attend(q, k, v, block_size=2, query_block_size=4),
                               v.expand(2, 6, 5), **TOL[torch.float64])
    q, k, v = _qkv(36, (1, 2, 1, 2, 1), 6, 7)
    for causal in (False, True):
        torch.testing.assert_close(
            attend(q, k, v, causal, 3, query_block_size=4),
            F.scaled_dot_product_attention(q, k, v, is_causal=causal), **TOL[torch.float64])


@pytest.mark.parametrize("causal", [False, True])
@ATTEND
def test_blockwise_when_the_maximum_falls(attend, causal):
    # Scores fall steeply along the keys: the running maximum is set by key block 0 and must
    # stay there. Shifting each block by its own maximum instead would make the rescaling
    # factor exp(m_old - m_new) overflow float32 (drops of ~100 per block).
    L, d = 32, 4
    q = torch.full((1, L, d), 5.0)
    k = torch.linspace(40, 0, L).view(1, L, 1).expand(1, L, d)
    v = randn(37, 1, L, 3, dtype=torch.float32)
    out = attend(q, k, v, causal, 4, query_block_size=8)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                               **TOL[torch.float32])


@ATTEND
def test_blockwise_rows_of_very_different_scale_share_a_tile(attend):
    # query 0 scores about +200, query 1 about -200 against the same keys: each row needs its
    # own maximum, one maximum per tile would underflow row 1's weights to 0 (0 / 0)
    g = torch.Generator().manual_seed(38)
    k = torch.rand(1, 6, 4, generator=g) + 1.0  # (1, 6, 4) entries in [1, 2)
    q = torch.tensor([[[40.0] * 4, [-40.0] * 4, [0.1] * 4]])  # (1, 3, 4)
    v = torch.randn(1, 6, 3, generator=g)
    out = attend(q, k, v, block_size=3, query_block_size=3)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v),
                               **TOL[torch.float32])


@ATTEND
def test_blockwise_mask_with_huge_scores(attend):
    # a boolean mask and scores of ~1e3: the masked path must still shift by the maximum
    q, k, v = _qkv(39, (2,), 9, 11, dtype=torch.float32, scale=30.0)
    mask = random_mask(40, 9, 11)
    mask[:, 0] = True  # every query sees at least one key
    out = attend(q, k, v, block_size=4, query_block_size=3, mask=mask)
    assert torch.isfinite(out).all()
    ref, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, ref, **TOL[torch.float32])


def test_gqa_names_each_bad_argument():
    q, k, v = randn(0, 2, 4, 5, 3), randn(1, 2, 2, 7, 3), randn(2, 2, 2, 7, 3)
    for name, args in (("query", (q[0, 0], k, v)), ("key", (q, k[0, 0], v)),
                       ("value", (q, k, v[0, 0]))):
        with pytest.raises(ValueError, match=rf"^{name} must have at least 3 dimensions"):
            grouped_query_attention(*args)
    with pytest.raises(TypeError, match=r"^value must be a torch\.Tensor, got list"):
        grouped_query_attention(q, k, [1.0])
    for args in ((q, k[:1], v), (q, k, v[:1])):  # only the key's, only the value's batch
        with pytest.raises(ValueError, match=r"^query \(\.\.\., h, L_q, d_k\), key and value "
                                             r"\(\.\.\., h_kv, L_k, d\) must share their batch"):
            grouped_query_attention(*args)
    with pytest.raises(ValueError, match=r"^key and value must have the same number of heads"):
        grouped_query_attention(q, k, v[:, :1])
    with pytest.raises(TypeError, match=r"^causal must be a bool, got NoneType"):
        grouped_query_attention(q, k, v, causal=None)


def test_kv_cache_names_each_bad_argument():
    good = randn(0, 1, 2, 3, 4)  # (B, h_kv, t, d)
    for name, args in (("key", ([1.0], good)), ("value", (good, [1.0]))):
        with pytest.raises(TypeError, match=rf"^{name} must be a torch\.Tensor, got list"):
            KVCache().append(*args)
    for name, args in (("key", (good[0], good)), ("value", (good, good[0]))):
        with pytest.raises(ValueError, match=rf"^{name} must have at least 4 dimensions"):
            KVCache().append(*args)
    with pytest.raises(TypeError, match=r"^key must be a floating-point tensor"):
        KVCache().append(good.long(), good)
    for args in ((good[None], good), (good, good[None])):  # one of the two is 5-D
        with pytest.raises(ValueError, match=r"^key and value must be \(B, h_kv, t, d\)"):
            KVCache().append(*args)
    with pytest.raises(ValueError, match=r"^key and value must agree on \(B, h_kv, t\)"):
        KVCache().append(good, good[:, :1])
    with pytest.raises(TypeError, match=r"^key and value must share one dtype"):
        KVCache().append(good, good.float())
    with pytest.raises(TypeError, match=r"^max_len must be an int, got float"):
        KVCache(max_len=4.0)
    with pytest.raises(ValueError, match=r"^max_len must be positive, got 0"):
        KVCache(max_len=0)


def test_kv_cache_rejects_a_key_width_other_than_its_own():
    cache = KVCache()
    cache.append(randn(0, 1, 2, 3, 4), randn(1, 1, 2, 3, 6))  # d_k = 4, d_v = 6
    with pytest.raises(ValueError, match=r"^key \(1, 2, 1, 5\) / value \(1, 2, 1, 6\) "
                                         r"\(torch\.float64\) do not match the cache's"):
        cache.append(randn(2, 1, 2, 1, 5), randn(3, 1, 2, 1, 6))
    assert cache.length == 3


def test_kv_cache_fills_exactly_to_max_len_in_one_storage():
    # the storage is allocated once, at the first append, and holds exactly max_len positions
    cache = KVCache(max_len=5)
    pointers = set()
    for step, t in enumerate([3, 2]):
        keys, values = cache.append(randn(step, 1, 2, t, 4), randn(step + 9, 1, 2, t, 4))
        pointers.add(keys.untyped_storage().data_ptr())
        assert cache.allocated_nbytes == 2 * 2 * 5 * 4 * 8
    assert len(pointers) == 1 and cache.length == 5 and cache.nbytes == cache.allocated_nbytes
    with pytest.raises(ValueError, match=r"^the cache holds at most max_len = 5 positions; it "
                                         r"has 5 and 1 more were appended"):
        cache.append(randn(3, 1, 2, 1, 4), randn(4, 1, 2, 1, 4))


def test_kv_cache_grows_only_when_full():
    # without max_len: the capacity is 16 up to 16 positions, 32 from the 17th on, ...
    per_position = 2 * 2 * 8  # keys and values, 1 head, d = 2, float64
    cache = KVCache()
    for n in range(1, 34):
        cache.append(randn(n, 1, 1, 1, 2), randn(n + 1, 1, 1, 1, 2))
        expected = 16 if n <= 16 else 32 if n <= 32 else 64
        assert cache.allocated_nbytes == expected * per_position, n
    # a first append longer than 16 positions gets storage for all of it
    big = KVCache()
    keys, _ = big.append(randn(0, 1, 1, 40, 2), randn(1, 1, 1, 40, 2))
    assert keys.shape == (1, 1, 40, 2) and big.allocated_nbytes == 40 * per_position


@pytest.mark.parametrize("name", ["num_layers", "h_kv", "d", "batch"])
def test_kv_cache_bytes_names_each_bad_argument(name):
    args = {"num_layers": 2, "h_kv": 2, "d": 4, "length": 3, "batch": 1}
    args[name] = 0
    with pytest.raises(ValueError, match=rf"^{name} must be positive, got 0"):
        kv_cache_bytes(**args)


def test_kv_cache_bytes_length_is_an_int_from_zero():
    assert kv_cache_bytes(2, 2, 4, 0) == 0  # an empty cache costs nothing
    assert kv_cache_bytes(2, 2, 4, 1) == 2 * 2 * 2 * 4 * 4
    for bad in (2.5, True, -1):
        with pytest.raises(ValueError, match=r"^length must be an int >= 0, got "):
            kv_cache_bytes(2, 2, 4, bad)
    with pytest.raises(TypeError, match=r"^dtype must be a torch\.dtype, got str"):
        kv_cache_bytes(2, 2, 4, 3, dtype="float16")


def _count_full_forward_passes(model):
    calls = []
    model.register_forward_hook(lambda module, args, output: calls.append(1))
    return calls


def test_generate_uses_the_cache_by_default():
    # with the cache, the model's full forward pass is never run; without it, once a step
    torch.manual_seed(1)
    model = AttentionOnlyTransformer(7, 8, 2, 2, max_len=12)
    calls = _count_full_forward_passes(model)
    prompt = torch.randint(0, 7, (2, 3))
    tokens, _ = generate(model, prompt, 4)
    assert calls == []
    ref, _ = generate(model, prompt, 4, use_cache=False)
    assert len(calls) == 4 and torch.equal(tokens, ref)


@pytest.mark.parametrize("L0", [1, 2])
def test_generate_with_the_shortest_prompts(L0):
    # a one-token prompt is allowed; a two-token prompt is the shortest one that needs the
    # causal mask inside the cached prompt pass (two layers: the second reads the first's
    # output at position 0, which must not have seen position 1)
    torch.manual_seed(L0)
    model = AttentionOnlyTransformer(11, 16, 2, 2, max_len=20)
    prompt = torch.randint(0, 11, (2, L0))
    tokens, logits = generate(model, prompt, 6)
    ref_tokens, ref_logits = generate(model, prompt, 6, use_cache=False)
    torch.testing.assert_close(logits, ref_logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(tokens, ref_tokens)


def test_generate_sizes_each_cache_exactly(monkeypatch):
    # one cache per layer, allocated for the L_0 + n_new - 1 positions fed to the model and
    # full at the end: no reallocation, no unused storage
    made = []

    class RecordingCache(KVCache):
        def __init__(self, max_len=None):
            super().__init__(max_len)
            made.append(self)

    monkeypatch.setattr(efficient, "KVCache", RecordingCache)
    torch.manual_seed(2)
    model = AttentionOnlyTransformer(7, 8, 2, 3, max_len=12)
    generate(model, torch.randint(0, 7, (1, 4)), 5)
    assert len(made) == 3
    for cache in made:
        assert cache.max_len == cache.length == 4 + 5 - 1
        assert cache.allocated_nbytes == cache.nbytes > 0


def test_generate_times_each_step(monkeypatch):
    # a thread clock that advances 0.25 s at each reading: every step reads it twice
    class FakeClock:
        now = 100.0

        def thread_time(self):
            self.now += 0.25
            return self.now

    monkeypatch.setattr(efficient, "time", FakeClock())
    torch.manual_seed(3)
    model = AttentionOnlyTransformer(7, 8, 2, 1, max_len=12)
    for use_cache in (True, False):
        timings = []
        generate(model, torch.randint(0, 7, (1, 3)), 4, use_cache=use_cache, timings=timings)
        assert timings == [0.25] * 4


def test_generate_names_each_bad_argument():
    model = AttentionOnlyTransformer(5, 8, 2, 1, max_len=10)
    prompt = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(TypeError, match=r"^model must be an AttentionOnlyTransformer, got Linear"):
        generate(torch.nn.Linear(2, 2), prompt, 2)
    with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 5\), got values from 0 "
                                         r"to 5"):
        generate(model, torch.tensor([[0, 5]]), 2)
    with pytest.raises(ValueError, match=r"^n_new must be positive, got 0"):
        generate(model, prompt, 0)
    with pytest.raises(TypeError, match=r"^use_cache must be a bool, got int"):
        generate(model, prompt, 2, use_cache=1)
    with pytest.raises(ValueError, match=r"^the prompt must hold at least one token, got "
                                         r"L_0 = 0$"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 2)


@ATTEND
def test_blockwise_masked_prefix_then_very_negative_scores(attend):
    # query 0 may not see key block 0 (keys 0-3); all its scores are about -190. A bug once
    # clamped the running maximum to 0 after the fully masked block, and these underflowed.
    g = torch.Generator().manual_seed(41)
    q = torch.full((1, 2, 4), -10.0)
    k = torch.rand(1, 8, 4, generator=g) + 9.0
    v = torch.randn(1, 8, 3, generator=g)
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[0, :4] = False
    out = attend(q, k, v, block_size=4, query_block_size=2, mask=mask)
    ref, _ = scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, ref, **TOL[torch.float32])
