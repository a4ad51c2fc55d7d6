"""Windowed ("truncated") self-attention computed on the band only (note 004, section 4.3).

``band_mask(L, window)`` (in :mod:`attention_src.softmax`) restricts each query to the keys
``|i - j| < window``, but applied to a full ``(L, L)`` score matrix it saves nothing: every
score is still computed and stored, then most are thrown away. :func:`windowed_attention`
computes only the ``2 * window - 1`` scores of each query's band (``window`` with
``causal=True``), so its scores, weights and time grow like ``L * window`` instead of ``L**2``.
Its weights come back in *band layout*, ``(..., L, span)``: column ``t`` of query ``i`` is key
``j = i - (window - 1) + t``. :func:`band_to_dense` scatters them into the ``(..., L, L)``
layout of ordinary attention, for drawing and for comparison.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attention_src.attention import check_qkv
from attention_src.softmax import masked_softmax

__all__ = ["windowed_attention", "band_to_dense"]


def _check_window(window: object, causal: object) -> None:
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window must be an int, got {type(window).__name__}")
    if window < 1:
        raise ValueError(f"window must be at least 1 (a query always sees itself), got {window}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")


def _band_validity(length: int, window: int, causal: bool,
                   device: torch.device | None = None) -> torch.Tensor:
    """``(L, span)`` boolean on ``device``: ``True`` where band column ``t`` of query ``i`` is a
    real key."""
    span = window if causal else 2 * window - 1
    i = torch.arange(length, device=device).unsqueeze(1)  # (L, 1): query positions
    t = torch.arange(span, device=device).unsqueeze(0)  # (1, span): columns of the band
    j = i - (window - 1) + t  # (L, span): the key each column holds
    return (j >= 0) & (j < length)


def windowed_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    window: int,
    causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-attention restricted to a window, computing only the scores inside it.

    Query ``i`` attends to keys ``j`` with ``|i - j| < window`` (and ``j <= i`` when
    ``causal``): the same function as ``scaled_dot_product_attention`` with
    ``mask=band_mask(L, window, causal)``, at a cost of ``O(L * window * d)`` instead of
    ``O(L**2 * d)`` in time and ``O(L * window)`` instead of ``O(L**2)`` for the weights.

    Args:
        query: ``(..., L, d_k)``.
        key: ``(..., L, d_k)``, as many keys as queries (self-attention).
        value: ``(..., L, d_v)``.
        window: positive int; ``window >= L`` gives full (or full causal) attention.
        causal: also block the keys after the query.
        scale: multiplies the scores; default ``1 / sqrt(d_k)``.

    Returns:
        output: ``(..., L, d_v)``, on the device of the inputs (all three share one).
        weights: ``(..., L, span)`` in band layout, ``span = 2 * window - 1`` (``window`` when
        ``causal``); column ``t`` of query ``i`` is key ``i - (window - 1) + t``, and columns
        that fall outside ``0 .. L - 1`` have weight 0. :func:`band_to_dense` gives ``(L, L)``.
    """
    check_qkv(query, key, value)
    _check_window(window, causal)
    length = query.shape[-2]
    if key.shape[-2] != length:
        raise ValueError(
            f"windowed self-attention needs as many keys as queries, got query "
            f"{tuple(query.shape)} and key {tuple(key.shape)}"
        )
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    span = window if causal else 2 * window - 1
    left, right = window - 1, 0 if causal else window - 1
    # Pad the length axis with zero rows so every query has a full band of `span` rows.
    key_pad = F.pad(key, (0, 0, left, right))  # (..., L + left + right, d_k)
    value_pad = F.pad(value, (0, 0, left, right))  # (..., L + left + right, d_v)
    key_win = key_pad.unfold(-2, span, 1)  # (..., L, d_k, span): a view, no copy
    value_win = value_pad.unfold(-2, span, 1)  # (..., L, d_v, span)
    # (..., L, 1, d_k) @ (..., L, d_k, span) -> (..., L, 1, span) -> (..., L, span)
    scores = ((query * scale).unsqueeze(-2) @ key_win).squeeze(-2)
    valid = _band_validity(length, window, causal, query.device)  # (L, span)
    weights = masked_softmax(scores, valid)  # (..., L, span)
    # (..., L, d_v, span) @ (..., L, span, 1) -> (..., L, d_v, 1) -> (..., L, d_v)
    output = (value_win @ weights.unsqueeze(-1)).squeeze(-1)
    return output, weights


def band_to_dense(weights: torch.Tensor, window: int, causal: bool = False) -> torch.Tensor:
    """Scatter band-layout weights ``(..., L, span)`` into the dense layout ``(..., L, L)``.

    Args:
        weights: ``(..., L, span)`` as returned by :func:`windowed_attention` with the same
            ``window`` and ``causal``; ``span`` must be ``2 * window - 1`` (``window`` causal).
        window, causal: the arguments the weights were computed with.

    Returns:
        ``(..., L, L)`` on the device of ``weights``: entry ``[i, j]`` is the weight of query
        ``i`` on key ``j``, zero outside the band.
    """
    _check_window(window, causal)
    if not isinstance(weights, torch.Tensor) or weights.dim() < 2:
        raise ValueError("weights must be a tensor of shape (..., L, span)")
    span = window if causal else 2 * window - 1
    if weights.shape[-1] != span:
        raise ValueError(
            f"weights of shape {tuple(weights.shape)} do not have span {span} columns, the "
            f"band of window={window}, causal={causal}"
        )
    length = weights.shape[-2]
    device = weights.device
    valid = _band_validity(length, window, causal, device)  # (L, span)
    i = torch.arange(length, device=device).unsqueeze(1)  # (L, 1)
    j = i - (window - 1) + torch.arange(span, device=device)  # (L, span): key of each column
    j = j.clamp(0, length - 1)  # out-of-range columns carry weight 0; park them anywhere valid
    dense = weights.new_zeros(*weights.shape[:-1], length)  # (..., L, L)
    source = weights * valid  # (..., L, span), zero outside the sequence
    return dense.scatter_add(-1, j.expand_as(source), source)
