"""Scaled dot-product attention, the operation at the heart of the book.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Each query is compared with every key (a dot product), the scores of one query are turned
into a probability distribution over the keys (softmax along the key axis), and the query's
output is the average of the values weighted by that distribution.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attention_src.softmax import masked_softmax
from attention_src.validation import check_same_device, check_same_dtype, check_tensor

__all__ = ["scaled_dot_product_attention", "attention_from_scores", "check_qkv"]


def check_qkv(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
    """Validate the shapes of an attention call's query, key and value.

    Requires floating tensors of one dtype and one device with rank >= 2, equal leading
    (batch) dimensions, query and key feature sizes equal (they are compared by a dot
    product), and as many values as keys (each value belongs to one key).
    """
    check_tensor("query", query)
    check_tensor("key", key)
    check_tensor("value", value)
    check_same_dtype(query=query, key=key, value=value)
    check_same_device(query=query, key=key, value=value)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same feature size d_k: query {tuple(query.shape)} has "
            f"{query.shape[-1]}, key {tuple(key.shape)} has {key.shape[-1]}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length L_k: key {tuple(key.shape)} has "
            f"{key.shape[-2]}, value {tuple(value.shape)} has {value.shape[-2]}"
        )
    batch = {n: tuple(t.shape[:-2]) for n, t in (("query", query), ("key", key), ("value", value))}
    if len(set(batch.values())) > 1:
        raise ValueError(f"query, key and value must share their leading dimensions, got {batch}")


def attention_from_scores(
    scores: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    *,
    inplace: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Second half of every attention variant: masked softmax, then a weighted sum of values.

    Args:
        scores: ``(..., L_q, L_k)``, one score per (query, key) pair, from any scoring function.
        value: ``(..., L_k, d_v)``.
        mask: boolean, broadcastable to ``scores``, ``True`` = may attend.
        dropout_p: probability of zeroing a weight before the weighted sum (applied whenever
            it is > 0, as in ``torch.nn.functional.scaled_dot_product_attention``).
        inplace: turn ``scores`` into the weights in place (inference only; see
            :func:`~attention_src.softmax.masked_softmax`).

    Returns:
        output: ``(..., L_q, d_v)``.
        weights: ``(..., L_q, L_k)``, before dropout; each row sums to 1 (0 if fully masked).
    """
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    check_tensor("scores", scores)
    check_tensor("value", value)
    check_same_dtype(scores=scores, value=value)
    check_same_device(scores=scores, value=value)
    if scores.shape[:-2] != value.shape[:-2]:
        raise ValueError(
            f"scores {tuple(scores.shape)} and value {tuple(value.shape)} must share their "
            "leading (batch) dimensions"
        )
    if scores.shape[-1] != value.shape[-2]:
        raise ValueError(
            f"scores {tuple(scores.shape)} have {scores.shape[-1]} keys but value "
            f"{tuple(value.shape)} has {value.shape[-2]} rows"
        )
    weights = masked_softmax(scores, mask, inplace=inplace)  # (..., L_q, L_k)
    dropped = F.dropout(weights, p=dropout_p, training=True) if dropout_p > 0 else weights
    output = dropped @ value  # (..., L_q, L_k) @ (..., L_k, d_v) -> (..., L_q, d_v)
    return output, weights


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, ``softmax(Q K^T * scale) V``, returning its weights too.

    Args:
        query: ``(..., L_q, d_k)``.
        key: ``(..., L_k, d_k)``.
        value: ``(..., L_k, d_v)``. ``...`` is any number (0 or more) of batch dimensions,
            the same for all three.
        mask: boolean, broadcastable to ``(..., L_q, L_k)``; ``True`` = may attend. The same
            convention as the boolean ``attn_mask`` of
            ``torch.nn.functional.scaled_dot_product_attention``.
        scale: multiplies the scores; default ``1 / sqrt(d_k)``. ``scale=0`` makes every weight
            equal, so each output is the mean of the (unmasked) values.
        dropout_p: dropout on the weights, applied whenever > 0.

    Returns:
        output: ``(..., L_q, d_v)``.
        weights: ``(..., L_q, L_k)``, rows summing to 1 (all zero where a row is fully masked).
    """
    check_qkv(query, key, value)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    # Scale the queries, not the scores: the same result, L_q*d_k multiplications, not L_q*L_k.
    scores = (query * scale) @ key.transpose(-2, -1)  # (..., L_q, d_k) @ (..., d_k, L_k)
    # The scores are ours alone, so when autograd is off they can become the weights in place.
    inplace = not (torch.is_grad_enabled() and scores.requires_grad)
    return attention_from_scores(scores, value, mask, dropout_p, inplace=inplace)
