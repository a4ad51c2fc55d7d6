"""Attention that is fast and small: online softmax, blockwise attention, KV cache, GQA.

Plain attention materialises the ``(L_q, L_k)`` score matrix of every head, so its memory
grows like ``L**2``. The functions here compute the same result without that matrix
(chapter 9):

* :func:`online_softmax` and :func:`online_softmax_stats`: softmax in one streaming pass over
  blocks of the last axis, keeping a running maximum ``m`` and a running sum ``s`` of
  ``exp(x - m)`` (Milakov & Gimelshein, 2018), then normalising.
* :func:`blockwise_attention`: the algorithm of FlashAttention (Dao et al., 2022) in plain
  PyTorch, in the loop order of FlashAttention-2 (Dao, 2023): query blocks outside, one
  division at the end, causal tiles above the diagonal skipped. Queries are cut into blocks of
  ``query_block_size`` rows and keys and values into blocks of ``block_size`` rows; for each
  query block a loop over the key blocks keeps the running maximum, the running sum and an
  un-normalised output, rescaling the last two by ``exp(m_old - m_new)`` whenever the maximum
  grows. Each tile is computed for all (batch, head) pairs at once, one batched product per
  tile; only one ``(..., query_block_size, block_size)`` tile of scores exists at any time, so
  the extra memory grows like ``L``. With autograd too: its backward pass is FlashAttention's
  (a custom ``torch.autograd.Function`` that saves the output and one log-sum-exp per query
  and recomputes each tile), where autograd through the loop would keep every tile, ``L**2``
  memory. :func:`blockwise_attention_per_head` is the same loop one (batch, head) pair at a
  time, the readable version, differentiated by ordinary autograd.
* :func:`grouped_query_attention`: ``h`` query heads sharing ``h_kv`` key/value heads (head
  ``i`` reads key/value head ``i // (h // h_kv)``, the ``repeat_interleave`` convention of
  PyTorch's ``enable_gqa``); ``h_kv = 1`` is multi-query attention. The forward pass never
  repeats the keys and values in memory (one block of keys at a time at most); the backward
  pass allocates the gradients of the keys and values for all ``h`` query heads before
  summing each group.
* :class:`KVCache`, :func:`generate`, :func:`kv_cache_bytes`: step-by-step decoding of an
  :class:`~attention_src.language_model.AttentionOnlyTransformer` with and without a cache of
  the keys and values of the tokens already seen, and the cache's size.

Windowed attention, whose cost grows like ``L * window``, is
:func:`attention_src.windowed.windowed_attention` (chapter 4); it is not repeated here.
"""

from __future__ import annotations

import itertools
import math
import time
from typing import NamedTuple

import torch

from attention_src.attention import check_qkv, scaled_dot_product_attention
from attention_src.validation import check_mask, check_positive_int, check_tensor

__all__ = [
    "online_softmax",
    "online_softmax_stats",
    "blockwise_attention",
    "blockwise_attention_per_head",
    "BlockCounts",
    "grouped_query_attention",
    "KVCache",
    "generate",
    "kv_cache_bytes",
]

# Default tile sizes of blockwise_attention: 256 queries by 512 keys, the split sizes PyTorch's
# own CPU flash-attention kernel uses for long sequences. A tile is computed for all (batch,
# head) pairs at once, so with 8 heads of float32 its scores take 8 * 256 * 512 * 4 B = 4 MiB:
# more than one core's L2 cache on the book's machine (512 KiB), less than its L3 (32 MiB).
# Larger tiles mean fewer Python-level operator calls per call of the function, smaller ones
# less memory traffic per tile; `python benchmarks/bench_attention.py --tiles` compares
# 512 x 512, 256 x 512, 256 x 256, 128 x 512 and 128 x 256 at L = 4096.
DEFAULT_BLOCK_SIZE = 512
DEFAULT_QUERY_BLOCK_SIZE = 256
LOG2_E = math.log2(math.e)


def _check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def _check_scale(scale: object) -> None:
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")


# --------------------------------------------------------------------------- online softmax


def online_softmax_stats(x: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The maximum and the sum of ``exp(x - max)`` of each row, in one pass over blocks.

    Reads the last axis ``block_size`` entries at a time and keeps, per row, a running maximum
    ``m`` and a running sum ``s = sum_j exp(x_j - m)`` over the entries seen so far. When a
    block raises the maximum from ``m`` to ``m'``, the sum so far is rescaled by
    ``exp(m - m')`` before the block's terms are added (Milakov & Gimelshein, 2018):

        m' = max(m, max_j x_j),   s' = s * exp(m - m') + sum_j exp(x_j - m').

    Args:
        x: ``(..., n)`` floating point, ``n >= 1``.
        block_size: positive int, the number of entries read at a time (``>= n``: one block).

    Returns:
        m: ``(...)``, the maximum of each row.
        s: ``(...)``, ``sum_j exp(x_j - m)``, in ``[1, n]`` for a finite row.
    """
    check_tensor("x", x, min_rank=1)
    check_positive_int("block_size", block_size)
    n = x.shape[-1]
    if n == 0:
        raise ValueError(f"x must have at least one entry on its last axis, got {tuple(x.shape)}")
    m = x.new_full(x.shape[:-1], -math.inf)  # (...)
    s = x.new_zeros(x.shape[:-1])  # (...)
    for j0 in range(0, n, block_size):
        block = x[..., j0:j0 + block_size]  # (..., <= block_size)
        m_new = torch.maximum(m, block.amax(dim=-1))  # (...)
        # a row whose entries so far are all -inf has no finite maximum: shift it by 0
        shift = m_new.masked_fill(m_new == -math.inf, 0.0)  # (...)
        s = s * torch.exp(m - shift) + torch.exp(block - shift.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    return m, s


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax over the last axis from the streaming statistics of :func:`online_softmax_stats`.

    ``softmax(x)_j = exp(x_j - m) / s`` with the row's maximum ``m`` and ``s = sum_j exp(x_j -
    m)``, both gathered in one pass over blocks of ``block_size`` entries; every exponent is
    ``<= 0``, so nothing overflows, even for entries of ``1e4``.

    Args:
        x: ``(..., n)`` floating point, ``n >= 1``.
        block_size: positive int.

    Returns:
        ``(..., n)``, equal to ``torch.softmax(x, dim=-1)``.
    """
    m, s = online_softmax_stats(x, block_size)  # (...), (...)
    return torch.exp(x - m.unsqueeze(-1)) / s.unsqueeze(-1)  # (..., n)


# ----------------------------------------------------------------------- blockwise attention


class BlockCounts(NamedTuple):
    """How many (query block, key block) tiles :func:`blockwise_attention` computed."""

    computed: int
    skipped: int
    total: int


def _tile_counts(L_q: int, L_k: int, query_block_size: int, block_size: int,
                 computed: int) -> BlockCounts:
    """``BlockCounts`` of a ``(L_q, L_k)`` score matrix cut into tiles, ``computed`` of them."""
    total = -(-L_q // query_block_size) * -(-L_k // block_size)
    return BlockCounts(computed, total - computed, total)


def _future(i0: int, i1: int, j0: int, j1: int, device) -> torch.Tensor:
    """``(i1 - i0, j1 - j0)`` bool, True where key ``j`` comes after query ``i`` (hidden)."""
    keys = torch.arange(j0, j1, device=device)  # (B_k,)
    queries = torch.arange(i0, i1, device=device)  # (B_q,)
    return keys > queries.unsqueeze(-1)  # (B_q, B_k)


def _hide(scores, causal, mask, i0, i1, j0, j1):
    """Set to -inf, in place, the entries of a ``(..., B_q, B_k)`` tile of scores that a
    query may not see: keys after it (``causal``) and keys the boolean ``mask`` forbids."""
    if causal and j1 - 1 > i0:  # the tile crosses the diagonal: hide keys j > i
        scores.masked_fill_(_future(i0, i1, j0, j1, scores.device), -math.inf)
    if mask is not None:
        scores.masked_fill_(~mask[..., i0:i1, j0:j1], -math.inf)
    return scores


def _blockwise_forward(query, key, value, causal, query_block_size, block_size, mask, scale):
    """The tile loop of :func:`blockwise_attention`, every (batch, head) pair at once.

    ``query: (..., L_q, d_k)``; ``key: (..., L_k, d_k)`` and ``value: (..., L_k, d_v)`` with
    leading dimensions that broadcast to the query's (grouped-query attention passes a size-1
    group axis, so keys are shared without being copied); ``mask``: ``None`` or a boolean
    ``(..., L_q, L_k)`` view; ``scale``: a float. No autograd (the caller decides).

    Returns ``output: (..., L_q, d_v)``; ``lse: (..., L_q)``, the base-2 log-sum-exp of each
    query's row of scores, ``+inf`` for a query with no allowed key (what the backward pass
    needs to recompute the weights); and the number of tiles computed.

    Each tile is one batched product over all the leading dimensions, ``(..., B_q, d_k) @
    (..., d_k, B_k)``, written into a buffer allocated once per tile shape and reused: a fresh
    ``(..., B_q, B_k)`` result at every tile would cost the operating system a page fault per
    4 KiB of it (chapter 9 measures this). Base 2: ``exp(x) = 2 ** (x * log2(e))``, so
    ``log2(e)`` joins the scale of the queries and the loop calls ``exp2``, which PyTorch
    computes faster than ``exp`` on this CPU; the running maximum is kept in base-2 units.
    """
    L_q, L_k = query.shape[-2], key.shape[-2]
    batch = query.shape[:-2]
    d_v = value.shape[-1]
    if L_q == 0 or L_k == 0 or math.prod(batch) == 0:  # no key: the book's convention is 0
        return (query.new_zeros(*batch, L_q, d_v), query.new_full((*batch, L_q), math.inf),
                0)
    query = query * (scale * LOG2_E)  # (..., L_q, d_k): scores come out in base-2 units
    key_t = key.transpose(-2, -1)  # (..., d_k, L_k), a view
    output = query.new_empty(*batch, L_q, d_v)  # (..., L_q, d_v), filled block by block
    lse = query.new_empty(*batch, L_q)  # (..., L_q)
    buffers = {}  # (B_q, B_k) -> the (..., B_q, B_k) scores and (..., B_q, d_v) P V_b
    computed = 0
    for i0 in range(0, L_q, query_block_size):
        i1 = min(i0 + query_block_size, L_q)
        q_block = query[..., i0:i1, :]  # (..., B_q, d_k)
        # causal: query i sees keys j <= i, so keys from i1 on are unseen by the whole
        # block; key block 0 is always computed, so m, s, acc are set at its pass
        k_end = min(L_k, i1) if causal else L_k
        m = s = acc = None
        for j0 in range(0, k_end, block_size):
            j1 = min(j0 + block_size, k_end)  # causal: no key the block cannot see
            computed += 1
            if (i1 - i0, j1 - j0) not in buffers:
                buffers[i1 - i0, j1 - j0] = (query.new_empty(*batch, i1 - i0, j1 - j0),
                                             query.new_empty(*batch, i1 - i0, d_v))
            scores, pv = buffers[i1 - i0, j1 - j0]  # (..., B_q, B_k), (..., B_q, d_v)
            # (..., B_q, d_k) @ (..., d_k, B_k) -> (..., B_q, B_k), one product for all heads
            torch.matmul(q_block, key_t[..., j0:j1], out=scores)
            _hide(scores, causal, mask, i0, i1, j0, j1)
            block_max = scores.amax(dim=-1, keepdim=True)  # (..., B_q, 1)
            m_new = block_max if m is None else torch.maximum(m, block_max)  # (..., B_q, 1)
            shift = m_new
            if mask is not None:  # a row with no allowed key so far: shift by 0, not -inf
                shift = m_new.masked_fill(m_new == -math.inf, 0.0)
            p = scores.sub_(shift).exp2_()  # (..., B_q, B_k): un-normalised weights
            v_block = value[..., j0:j1, :]  # (..., B_k, d_v)
            if m is None:
                s = p.sum(dim=-1, keepdim=True)  # (..., B_q, 1)
                acc = torch.matmul(p, v_block)  # (..., B_q, B_k) @ (..., B_k, d_v)
            else:
                # (..., B_q, 1): rescales the old sum and output; 0 where the old maximum is
                # -inf (no allowed key yet, so the old sum and output are 0)
                alpha = torch.exp2(m - shift)
                s = s.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))
                acc = acc.mul_(alpha).add_(torch.matmul(p, v_block, out=pv))
            m = m_new
        # log2 of the row's sum of 2 ** score: m + log2(s); +inf where s = 0 (no allowed key)
        lse[..., i0:i1] = (m + torch.log2(s)).squeeze(-1).masked_fill_(
            s.squeeze(-1) == 0, math.inf)
        if mask is not None:  # a row with no allowed key: acc is 0, divide by 1 to get 0
            s = s.masked_fill(s == 0, 1.0)
        output[..., i0:i1, :] = acc.div_(s)  # (..., B_q, d_v)
    return output, lse, computed


def _blockwise_backward(grad_out, query, key, value, output, lse, causal, query_block_size,
                        block_size, mask, scale):
    """Gradients of :func:`_blockwise_forward` with respect to query, key and value.

    The backward pass of FlashAttention (Dao et al., 2022, Algorithm 4; loop order of
    FlashAttention-2): nothing of the forward pass's tiles was kept, so each tile of weights
    is recomputed from the queries, the keys and the saved log-sum-exp, ``P = 2 ** (S_2 -
    lse)`` with ``S_2`` the base-2 scores, and then, with ``dO`` the gradient of the output and
    ``D = rowsum(dO * O)``,

        dV += P^T dO,   dP = dO V^T,   dS = P * (dP - D),
        dQ += scale * dS K,   dK += scale * dS^T Q.

    Shapes as in :func:`_blockwise_forward`; ``grad_out``: ``(..., L_q, d_v)``. Returns
    ``(dQ, dK, dV)`` of the shapes of query, key and value (a broadcast axis of key or value
    is summed over). Extra memory: ``dQ, dK, dV``, ``D`` and a few tiles, linear in ``L``.
    """
    L_q, L_k = query.shape[-2], key.shape[-2]
    batch = query.shape[:-2]
    d_k, d_v = query.shape[-1], value.shape[-1]
    grad_query = torch.zeros_like(query)  # (..., L_q, d_k)
    grad_key = query.new_zeros(*batch, L_k, d_k)  # (..., L_k, d_k), before the broadcast sum
    grad_value = query.new_zeros(*batch, L_k, d_v)  # (..., L_k, d_v), likewise
    if L_q and L_k and math.prod(batch):
        q2 = query * (scale * LOG2_E)  # (..., L_q, d_k): base-2 scores, as in the forward
        key_t, value_t = key.transpose(-2, -1), value.transpose(-2, -1)  # views
        delta = (grad_out * output).sum(dim=-1, keepdim=True)  # (..., L_q, 1): D
        for i0 in range(0, L_q, query_block_size):
            i1 = min(i0 + query_block_size, L_q)
            d_out = grad_out[..., i0:i1, :]  # (..., B_q, d_v)
            lse_block = lse[..., i0:i1].unsqueeze(-1)  # (..., B_q, 1)
            k_end = min(L_k, i1) if causal else L_k
            for j0 in range(0, k_end, block_size):
                j1 = min(j0 + block_size, k_end)
                scores = torch.matmul(q2[..., i0:i1, :], key_t[..., j0:j1])  # (.., B_q, B_k)
                _hide(scores, causal, mask, i0, i1, j0, j1)
                p = scores.sub_(lse_block).exp2_()  # (..., B_q, B_k): the weights P
                # (..., B_k, B_q) @ (..., B_q, d_v) -> (..., B_k, d_v)
                grad_value[..., j0:j1, :] += torch.matmul(p.transpose(-2, -1), d_out)
                d_p = torch.matmul(d_out, value_t[..., j0:j1])  # (..., B_q, B_k): dP
                d_s = p.mul_(d_p.sub_(delta[..., i0:i1, :]))  # (..., B_q, B_k): dS
                # (..., B_q, B_k) @ (..., B_k, d_k) -> (..., B_q, d_k)
                grad_query[..., i0:i1, :] += scale * torch.matmul(d_s, key[..., j0:j1, :])
                # (..., B_k, B_q) @ (..., B_q, d_k) -> (..., B_k, d_k)
                grad_key[..., j0:j1, :] += scale * torch.matmul(d_s.transpose(-2, -1),
                                                                query[..., i0:i1, :])
    return grad_query, grad_key.sum_to_size(key.shape), grad_value.sum_to_size(value.shape)


class _BlockwiseAttention(torch.autograd.Function):
    """Blockwise attention with FlashAttention's backward pass: the forward pass saves only
    its inputs, its output and one log-sum-exp per query, and the backward pass recomputes
    every tile of weights, trading about a forward pass of extra arithmetic for memory linear
    in ``L`` (autograd through the tile loop would keep every tile: ``L**2`` memory).

    First-order gradients only: the backward pass is not itself differentiable, and asking
    for a graph of it (``create_graph=True``, as a gradient penalty does) raises
    ``NotImplementedError`` instead of returning wrong second derivatives. The mask is saved
    with ``save_for_backward``, so modifying it in place between the forward and the backward
    pass raises autograd's version-counter error instead of giving wrong gradients. Written
    in the old style (``forward(ctx, ...)``, no ``setup_context``), so ``torch.func``
    transforms (``vmap``, ``grad``) do not support it; nor does ``vmap`` support the
    ``out=`` products of the forward loop.
    """

    @staticmethod
    def forward(ctx, query, key, value, mask, causal, query_block_size, block_size, scale,
                counts):
        output, lse, computed = _blockwise_forward(query, key, value, causal,
                                                   query_block_size, block_size, mask, scale)
        counts.append(computed)
        # the mask too, so that an in-place change of it before backward raises (autograd's
        # version counter) rather than silently changing the recomputed weights
        ctx.save_for_backward(query, key, value, output, lse, mask)
        ctx.settings = (causal, query_block_size, block_size, scale)
        return output

    @staticmethod
    def backward(ctx, grad_out):
        if torch.is_grad_enabled():  # create_graph=True: a second derivative is wanted
            raise NotImplementedError(
                "blockwise_attention supports first-order gradients only: its backward pass "
                "(FlashAttention's, recomputing every tile) is not differentiable, so "
                "create_graph=True (double backward, a gradient penalty) is not supported; "
                "use blockwise_attention_per_head, which ordinary autograd differentiates "
                "to any order"
            )
        query, key, value, output, lse, mask = ctx.saved_tensors
        causal, query_block_size, block_size, scale = ctx.settings
        grads = _blockwise_backward(grad_out, query, key, value, output, lse, causal,
                                    query_block_size, block_size, mask, scale)
        return (*grads, None, None, None, None, None, None)


def _blockwise(query, key, value, causal, query_block_size, block_size, mask, scale):
    """``(output, BlockCounts)`` of blockwise attention on checked inputs, differentiable
    through :class:`_BlockwiseAttention` when autograd records and an input needs a
    gradient, otherwise the forward loop alone."""
    counts: list[int] = []
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        output = _BlockwiseAttention.apply(query, key, value, mask, causal, query_block_size,
                                           block_size, scale, counts)
    else:
        output, _, computed = _blockwise_forward(query, key, value, causal, query_block_size,
                                                 block_size, mask, scale)
        counts.append(computed)
    L_q, L_k = query.shape[-2], key.shape[-2]
    return output, _tile_counts(L_q, L_k, query_block_size, block_size, counts[0])


def _per_head(query, key, value, causal, query_block_size, block_size, mask, scale):
    """The loop of :func:`blockwise_attention_per_head`, on checked inputs: ``query (...,
    L_q, d_k)``, ``key (..., L_k, d_k)``, ``value (..., L_k, d_v)`` with the same leading
    dimensions; ``mask`` ``None`` or a ``(..., L_q, L_k)`` view. Differentiable by autograd,
    which keeps every tile it computes for the backward pass. Returns ``(output: (..., L_q,
    d_v), tiles computed per head)``."""
    L_q, L_k = query.shape[-2], key.shape[-2]
    batch = query.shape[:-2]
    d_v = value.shape[-1]
    n_heads = math.prod(batch)
    if L_q == 0 or L_k == 0 or n_heads == 0:  # no key: the book's convention is a zero output
        return query.new_zeros(*batch, L_q, d_v), 0
    query = query * (scale * LOG2_E)  # (..., L_q, d_k): scores come out in base-2 units
    key_t = key.transpose(-2, -1)  # (..., d_k, L_k), a view
    output = query.new_empty(*batch, L_q, d_v)  # (..., L_q, d_v), filled block by block
    computed = 0
    for head in itertools.product(*(range(n) for n in batch)):  # every (batch, head) index
        q_h = query[head]  # (L_q, d_k)
        k_t, v_h = key_t[head], value[head]  # (d_k, L_k), (L_k, d_v)
        mask_h = None if mask is None else mask[head]  # (L_q, L_k)
        for i0 in range(0, L_q, query_block_size):
            i1 = min(i0 + query_block_size, L_q)
            q_block = q_h[i0:i1]  # (B_q, d_k)
            k_end = min(L_k, i1) if causal else L_k
            m = s = acc = None
            for j0 in range(0, k_end, block_size):
                j1 = min(j0 + block_size, k_end)
                computed += 1
                scores = q_block @ k_t[:, j0:j1]  # (B_q, d_k) @ (d_k, B_k) -> (B_q, B_k)
                _hide(scores, causal, mask_h, i0, i1, j0, j1)
                # The maximum only keeps exp2() in range; the output does not depend on it,
                # so it is a constant for autograd (its gradient terms would cancel exactly).
                block_max = scores.detach().amax(dim=-1, keepdim=True)  # (B_q, 1)
                m_new = block_max if m is None else torch.maximum(m, block_max)  # (B_q, 1)
                shift = m_new
                if mask is not None:  # a row with no allowed key so far: shift by 0, not -inf
                    shift = m_new.masked_fill(m_new == -math.inf, 0.0)
                p = scores.sub_(shift).exp2_()  # (B_q, B_k): un-normalised weights, in place
                v_block = v_h[j0:j1]  # (B_k, d_v)
                if m is None:
                    s = p.sum(dim=-1, keepdim=True)  # (B_q, 1)
                    acc = p @ v_block  # (B_q, B_k) @ (B_k, d_v) -> (B_q, d_v)
                else:
                    alpha = torch.exp2(m - shift)  # (B_q, 1)
                    s = s.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))
                    acc = acc.mul_(alpha).addmm_(p, v_block)  # acc * alpha + P V_b
                m = m_new
            if mask is not None:  # a row with no allowed key: acc is 0, divide by 1 to get 0
                s = s.masked_fill(s == 0, 1.0)
            output[head][i0:i1] = acc / s  # (B_q, d_v)
    return output, computed // n_heads  # tiles per head: every head computes the same ones


def _prepare(query, key, value, causal, block_size, query_block_size, mask, scale,
             return_counts):
    """Check the arguments of the blockwise functions; return ``(mask view or None,
    scale as a float)``."""
    check_qkv(query, key, value)
    _check_bool("causal", causal)
    check_positive_int("block_size", block_size)
    check_positive_int("query_block_size", query_block_size)
    _check_bool("return_counts", return_counts)
    _check_scale(scale)
    L_q, L_k = query.shape[-2], key.shape[-2]
    if mask is not None:
        target = (*query.shape[:-2], L_q, L_k)
        check_mask(mask, target)
        mask = mask.expand(target)  # (..., L_q, L_k): a view, no memory
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    return mask, float(scale)


def blockwise_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    causal: bool = False,
    block_size: int = DEFAULT_BLOCK_SIZE,
    *,
    query_block_size: int = DEFAULT_QUERY_BLOCK_SIZE,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    return_counts: bool = False,
):
    """Scaled dot-product attention computed tile by tile, never holding ``(L_q, L_k)`` scores.

    The algorithm of FlashAttention (Dao et al., 2022) in plain PyTorch, with the loop order
    of FlashAttention-2 (Dao, 2023; FlashAttention-1 loops over key blocks outside and
    rescales the output at every step). For each block of
    ``query_block_size`` queries, loop over the blocks of ``block_size`` keys and values,
    keeping per query a running maximum ``m``, a running sum ``s`` and an un-normalised output
    ``o``. A tile of scores ``S = Q_b K_b^T * scale`` updates them as

        m' = max(m, rowmax(S)),   P = exp(S - m'),
        s' = s * exp(m - m') + rowsum(P),   o' = o * exp(m - m') + P V_b,

    and the output is ``o / s``. This equals ``softmax(Q K^T * scale) V`` (up to rounding).
    Each tile is computed for every (batch, head) pair at once, one batched product per tile
    (:func:`blockwise_attention_per_head` is the same loop one pair at a time). With
    ``causal=True`` (top-left aligned, as
    ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``: query ``i`` sees keys
    ``j <= i``) the key blocks entirely after a query block are skipped, roughly half of them;
    only the tiles that cross the diagonal are masked.

    Memory: besides the output, one ``(..., query_block_size, block_size)`` tile of scores and
    a few tensors of the size of the output, linear in ``L``. With autograd this holds as well:
    the backward pass is FlashAttention's (a custom ``torch.autograd.Function``), which saves
    only the output and one log-sum-exp per query and recomputes each tile, at the price of
    computing every tile's scores a second time.

    Limits of the backward pass: first-order gradients only (``create_graph=True``, e.g. a
    gradient penalty, raises ``NotImplementedError``; :func:`blockwise_attention_per_head`
    is differentiable to any order). The accumulators (running sums, ``dQ``, ``dK``, ``dV``)
    are kept in the input's dtype, so in bfloat16 the gradients' error against a float64
    reference is up to about twice that of ``F.scaled_dot_product_attention`` in bfloat16,
    which accumulates in float32 (1.4 to 2.1 times for dQ, dK, dV in one causal case, L =
    70). ``torch.func`` transforms (``vmap``, ``grad``) are not supported: the function is an
    old-style ``autograd.Function`` without ``setup_context``, and the forward loop's
    ``matmul(..., out=)`` has no batching rule. Modifying ``mask`` in place between the
    forward and the backward pass raises (autograd's version check).

    Args:
        query: ``(..., L_q, d_k)``.
        key: ``(..., L_k, d_k)``.
        value: ``(..., L_k, d_v)``; ``...`` are the same batch dimensions (0 or more) for all
            three, e.g. ``(B, h)``.
        causal: hide the keys after each query (``j > i``).
        block_size: positive int, keys (and values) per block.
        query_block_size: positive int, queries per block (keyword only).
        mask: optional boolean, broadcastable to ``(..., L_q, L_k)``, ``True`` = may attend
            (the book's convention); combined with ``causal`` by AND. A query with no allowed
            key gets a zero output, and zero gradients (keyword only).
        scale: multiplies the scores; default ``1 / sqrt(d_k)`` (keyword only).
        return_counts: also return a :class:`BlockCounts` of the tiles computed and skipped
            (per (batch, head) pair: every pair computes the same tiles).

    Returns:
        output: ``(..., L_q, d_v)``; with ``return_counts=True``, ``(output, BlockCounts)``.
    """
    mask, scale = _prepare(query, key, value, causal, block_size, query_block_size, mask,
                           scale, return_counts)
    output, counts = _blockwise(query, key, value, causal, query_block_size, block_size, mask,
                                scale)
    return (output, counts) if return_counts else output


def blockwise_attention_per_head(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    causal: bool = False,
    block_size: int = DEFAULT_BLOCK_SIZE,
    *,
    query_block_size: int = DEFAULT_QUERY_BLOCK_SIZE,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    return_counts: bool = False,
):
    """:func:`blockwise_attention` one (batch, head) pair at a time: the readable loop.

    The same algorithm, arguments and result (shapes: ``query (..., L_q, d_k)``, ``key (...,
    L_k, d_k)``, ``value (..., L_k, d_v)``, output ``(..., L_q, d_v)``), with the tiles of one
    head computed before the next head's: ``h`` times as many operator calls, each ``h``
    times smaller, which leaves a second CPU core (or a GPU) little to do per call.
    Differentiable by ordinary autograd, which keeps every tile of weights it computes for the
    backward pass, so with gradients on its memory grows like ``L**2``.
    """
    mask, scale = _prepare(query, key, value, causal, block_size, query_block_size, mask,
                           scale, return_counts)
    output, computed = _per_head(query, key, value, causal, query_block_size, block_size, mask,
                                 scale)
    L_q, L_k = query.shape[-2], key.shape[-2]
    counts = _tile_counts(L_q, L_k, query_block_size, block_size, computed)
    return (output, counts) if return_counts else output


# -------------------------------------------------------------------- grouped-query attention


def grouped_query_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    causal: bool = False,
    *,
    scale: float | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    query_block_size: int = DEFAULT_QUERY_BLOCK_SIZE,
) -> torch.Tensor:
    """Attention in which groups of query heads share one key head and one value head.

    With ``h`` query heads and ``h_kv`` key/value heads (``h % h_kv == 0``), query head ``i``
    attends with key/value head ``i // (h // h_kv)``: the result of repeating each key/value
    head ``h // h_kv`` times with ``repeat_interleave`` and running ordinary multi-head
    attention, the convention of PyTorch's ``enable_gqa=True``. ``h_kv = h`` is multi-head
    attention, ``h_kv = 1`` multi-query attention. The forward pass never materialises the
    repeat in full: the group axis broadcasts inside :func:`blockwise_attention`'s tiles
    (the batched product copies one block of keys at a time), so the key/value cache of a
    decoder is ``h / h_kv`` times smaller. Differentiable like :func:`blockwise_attention`
    (first order only); the gradient of a shared key or value head is the sum over the query
    heads that read it. The backward pass does repeat: it allocates ``dK`` and ``dV`` for all
    ``h`` query heads, ``(..., h_kv, h // h_kv, L_k, d)``, before summing each group.

    Args:
        query: ``(..., h, L_q, d_k)``.
        key: ``(..., h_kv, L_k, d_k)``.
        value: ``(..., h_kv, L_k, d_v)``; ``...`` the same batch dimensions, e.g. ``(B,)``.
        causal: query ``i`` sees keys ``j <= i`` (top-left aligned).
        scale: multiplies the scores; default ``1 / sqrt(d_k)``.
        block_size, query_block_size: tile sizes, as in :func:`blockwise_attention`.

    Returns:
        ``(..., h, L_q, d_v)``.
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, t, min_rank=3)
    if key.shape[:-3] != query.shape[:-3] or value.shape[:-3] != query.shape[:-3]:
        raise ValueError(
            f"query (..., h, L_q, d_k), key and value (..., h_kv, L_k, d) must share their "
            f"batch dimensions, got query {tuple(query.shape)}, key {tuple(key.shape)}, value "
            f"{tuple(value.shape)}"
        )
    if key.shape[-3] != value.shape[-3]:
        raise ValueError(
            f"key and value must have the same number of heads h_kv, got key "
            f"{tuple(key.shape)} and value {tuple(value.shape)}"
        )
    h, h_kv = query.shape[-3], key.shape[-3]
    if h_kv == 0 or h % h_kv:
        raise ValueError(
            f"the query heads h = {h} must be a multiple of the key/value heads h_kv = {h_kv} "
            f"(query {tuple(query.shape)}, key {tuple(key.shape)})"
        )
    # Same checks as ordinary attention, on one query head per key/value head.
    check_qkv(query[..., :h_kv, :, :], key, value)
    _check_bool("causal", causal)
    check_positive_int("block_size", block_size)
    check_positive_int("query_block_size", query_block_size)
    _check_scale(scale)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    group = h // h_kv
    batch = query.shape[:-3]
    # (..., h, L_q, d_k) -> (..., h_kv, group, L_q, d_k): head i = kv * group + r
    q = query.reshape(*batch, h_kv, group, *query.shape[-2:])
    k = key.unsqueeze(-3)  # (..., h_kv, L_k, d_k) -> (..., h_kv, 1, L_k, d_k)
    v = value.unsqueeze(-3)  # (..., h_kv, L_k, d_v) -> (..., h_kv, 1, L_k, d_v)
    out, _ = _blockwise(q, k, v, causal, query_block_size, block_size, None, float(scale))
    # (..., h_kv, group, L_q, d_v) -> (..., h, L_q, d_v)
    return out.reshape(*batch, h, *out.shape[-2:])


# ------------------------------------------------------------------------------ the KV cache


def kv_cache_bytes(num_layers: int, h_kv: int, d: int, length: int,
                   dtype: torch.dtype = torch.float32, batch: int = 1) -> int:
    """Bytes of the keys and values a decoder caches: ``2 * layers * batch * h_kv * L * d``
    numbers of ``dtype`` (``d``: the width of one head's key, and of its value)."""
    for name, value in (("num_layers", num_layers), ("h_kv", h_kv), ("d", d),
                        ("batch", batch)):
        check_positive_int(name, value)
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be an int >= 0, got {length!r}")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, got {type(dtype).__name__}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * batch * h_kv * length * d * itemsize


class KVCache:
    """The keys and values one attention layer has seen, for step-by-step decoding.

    :meth:`append` adds the keys and values of ``t`` new positions and returns those of all
    ``n`` positions so far, so a new query attends to the whole prefix without recomputing
    its keys and values. With ``max_len`` the storage ``(B, h_kv, max_len, d)`` is allocated
    at the first append; without it, the storage doubles when full (amortised constant cost
    per position; ``torch.cat`` at every step would copy the whole cache each time).

    Attributes:
        length: the number of positions ``n`` held.
        nbytes: bytes of the keys and values held (``n`` positions), what the cache costs.
        allocated_nbytes: bytes of the storage reserved (``>= nbytes``).
    """

    def __init__(self, max_len: int | None = None):
        if max_len is not None:
            check_positive_int("max_len", max_len)
        self.max_len = max_len
        self._keys: torch.Tensor | None = None  # (B, h_kv, capacity, d_k)
        self._values: torch.Tensor | None = None  # (B, h_kv, capacity, d_v)
        self.length = 0

    @property
    def nbytes(self) -> int:
        if self._keys is None:
            return 0
        per_position = (self._keys[:, :, :1].numel() * self._keys.element_size()
                        + self._values[:, :, :1].numel() * self._values.element_size())
        return self.length * per_position

    @property
    def allocated_nbytes(self) -> int:
        if self._keys is None:
            return 0
        return (self._keys.numel() * self._keys.element_size()
                + self._values.numel() * self._values.element_size())

    def append(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add ``key: (B, h_kv, t, d_k)`` and ``value: (B, h_kv, t, d_v)``; return all keys
        ``(B, h_kv, n, d_k)`` and values ``(B, h_kv, n, d_v)`` so far (views of the cache)."""
        check_tensor("key", key, min_rank=4)
        check_tensor("value", value, min_rank=4)
        if key.dim() != 4 or value.dim() != 4:
            raise ValueError(
                f"key and value must be (B, h_kv, t, d), got key {tuple(key.shape)} and value "
                f"{tuple(value.shape)}"
            )
        if key.shape[:3] != value.shape[:3]:
            raise ValueError(
                f"key and value must agree on (B, h_kv, t), got key {tuple(key.shape)} and "
                f"value {tuple(value.shape)}"
            )
        if key.dtype != value.dtype:
            raise TypeError(f"key and value must share one dtype, got {key.dtype}, {value.dtype}")
        t = key.shape[2]
        if self._keys is not None:
            held_k, held_v = self._keys, self._values
            if (key.shape[:2] != held_k.shape[:2] or key.shape[3] != held_k.shape[3]
                    or value.shape[3] != held_v.shape[3] or key.dtype != held_k.dtype):
                raise ValueError(
                    f"key {tuple(key.shape)} / value {tuple(value.shape)} ({key.dtype}) do "
                    f"not match the cache's (B, h_kv, ., d) = {tuple(held_k.shape)} / "
                    f"{tuple(held_v.shape)} ({held_k.dtype})"
                )
        new_length = self.length + t
        if self.max_len is not None and new_length > self.max_len:
            raise ValueError(
                f"the cache holds at most max_len = {self.max_len} positions; it has "
                f"{self.length} and {t} more were appended"
            )
        capacity = 0 if self._keys is None else self._keys.shape[2]
        if new_length > capacity:
            if self.max_len is not None:
                new_capacity = self.max_len
            else:
                new_capacity = max(new_length, 2 * capacity, 16)
            B, h_kv = key.shape[:2]
            keys = key.new_empty(B, h_kv, new_capacity, key.shape[3])  # (B, h_kv, cap, d_k)
            values = value.new_empty(B, h_kv, new_capacity, value.shape[3])  # (.., cap, d_v)
            if self._keys is not None:
                keys[:, :, :self.length] = self._keys[:, :, :self.length]
                values[:, :, :self.length] = self._values[:, :, :self.length]
            self._keys, self._values = keys, values
        self._keys[:, :, self.length:new_length] = key
        self._values[:, :, self.length:new_length] = value
        self.length = new_length
        return self._keys[:, :, :new_length], self._values[:, :, :new_length]


def _check_model(model: object):
    from attention_src.language_model import AttentionOnlyTransformer

    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
    return model


def _forward_cached(model, tokens: torch.Tensor, caches: list[KVCache]) -> torch.Tensor:
    """Logits ``(B, t, V)`` of ``t`` new tokens ``(B, t)`` at positions ``n .. n + t - 1``,
    appending their keys and values to ``caches`` (one per layer; ``n`` = what they hold)."""
    B, t = tokens.shape
    start = caches[0].length
    positions = torch.arange(start, start + t, device=tokens.device)  # (t,)
    x = model.embed(tokens) + model.pos_embed(positions)  # (B, t, E)
    # new query start + a sees keys j <= start + a: all cached keys and a causal part
    mask = None
    if t > 1:
        keys_pos = torch.arange(start + t, device=tokens.device)  # (n + t,)
        mask = keys_pos <= positions.unsqueeze(-1)  # (t, n + t)
    for layer, cache in zip(model.layers, caches, strict=True):
        q = layer._split_heads(layer.q_proj(x))  # (B, t, E) -> (B, h, t, d)
        k = layer._split_heads(layer.k_proj(x))  # (B, h, t, d)
        v = layer._split_heads(layer.v_proj(x))  # (B, h, t, d)
        keys, values = cache.append(k, v)  # (B, h, n + t, d_head) each
        heads, _ = scaled_dot_product_attention(q, keys, values, mask)  # (B, h, t, d)
        # (B, h, t, d) -> (B, t, h, d) -> (B, t, E)
        concat = heads.transpose(1, 2).reshape(B, t, model.embed_dim)
        x = x + layer.out_proj(concat)
    return model.unembed(x)  # (B, t, V)


def generate(model, tokens: torch.Tensor, n_new: int, use_cache: bool = True,
             timings: list[float] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding of ``n_new`` tokens, with or without a KV cache.

    Without the cache, step ``k`` runs the whole model on all ``L_0 + k`` tokens so far and
    keeps the last position's logits: the keys and values of the prefix are recomputed at
    every step, ``O(n**2)`` work per step for a length ``n``. With it, the prompt is run once
    (filling one :class:`KVCache` per layer) and each later step runs the model on the newest
    token only, its query attending to the cached keys and values: ``O(n)`` per step. Both
    give the same logits up to rounding, so the same tokens.

    Args:
        model: an :class:`~attention_src.language_model.AttentionOnlyTransformer`.
        tokens: ``(B, L_0)`` int64 prompt, ``L_0 >= 1``; ``L_0 + n_new - 1 <= model.max_len``.
        n_new: positive int, tokens to generate.
        use_cache: decode with a KV cache.
        timings: if a list is given, the CPU time of this thread in seconds of each step is
            appended to it (``time.thread_time``: not counting time another process had the
            core, which wall-clock time would).

    Returns:
        tokens: ``(B, L_0 + n_new)``, the prompt followed by the generated tokens.
        logits: ``(B, n_new, V)``, the logits each generated token was chosen from.
    """
    from attention_src.language_model import _check_tokens

    model = _check_model(model)
    _check_tokens(tokens, model.vocab_size)
    check_positive_int("n_new", n_new)
    _check_bool("use_cache", use_cache)
    if timings is not None and not isinstance(timings, list):
        raise TypeError(f"timings must be a list or None, got {type(timings).__name__}")
    B, L0 = tokens.shape
    if L0 == 0:
        raise ValueError("the prompt must hold at least one token, got L_0 = 0")
    if L0 + n_new - 1 > model.max_len:
        raise ValueError(
            f"prompt length {L0} + n_new {n_new} - 1 exceeds the model's max_len = "
            f"{model.max_len}"
        )
    was_training = model.training
    model.eval()
    caches = [KVCache(max_len=L0 + n_new - 1) for _ in model.layers] if use_cache else None
    out, all_logits = tokens, []
    try:
        with torch.no_grad():
            for step in range(n_new):
                start = time.thread_time()
                if use_cache:
                    new = out if step == 0 else out[:, -1:]  # (B, L_0) prompt, then (B, 1)
                    logits = _forward_cached(model, new, caches)[:, -1]  # (B, V)
                else:
                    logits = model(out)[:, -1]  # (B, L, V) -> (B, V)
                next_token = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
                out = torch.cat([out, next_token], dim=1)  # (B, L + 1)
                all_logits.append(logits)
                if timings is not None:
                    timings.append(time.thread_time() - start)
    finally:
        model.train(was_training)
    return out, torch.stack(all_logits, dim=1)  # (B, n_new, V)
