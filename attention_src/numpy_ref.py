"""NumPy versions of softmax and attention, for the early chapters (the source notes use NumPy).

They mirror :func:`attention_src.softmax.softmax` and
:func:`attention_src.attention.scaled_dot_product_attention` and are tested equal to them.
:func:`naive_softmax` is the unstable textbook formula, kept to show how it overflows.
"""

from __future__ import annotations

import numpy as np

__all__ = ["softmax", "naive_softmax", "scaled_dot_product_attention"]


def _check_float(name: str, x: object, min_rank: int) -> np.ndarray:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(f"{name} must be a floating-point array, got dtype {x.dtype}")
    if x.ndim < min_rank:
        raise ValueError(f"{name} must have at least {min_rank} dimensions, got shape {x.shape}")
    return x


def naive_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """``exp(x) / sum(exp(x))`` as written in textbooks: overflows once ``x`` exceeds ~709
    (float64) or ~88 (float32) and then returns NaN. Shown in chapter 3; do not use."""
    _check_float("x", x, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(x)
        return e / e.sum(axis=axis, keepdims=True)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Stable softmax: shift by the maximum along ``axis`` first. ``x``: any shape."""
    _check_float("x", x, 1)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def scaled_dot_product_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    mask: np.ndarray | None = None,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """``softmax(Q K^T * scale) V`` in NumPy.

    Args:
        query: ``(..., L_q, d_k)``; key: ``(..., L_k, d_k)``; value: ``(..., L_k, d_v)``;
            one floating dtype and the same leading dimensions ``...`` for all three.
        mask: boolean, broadcastable to ``(..., L_q, L_k)``, ``True`` = may attend.
        scale: default ``1/sqrt(d_k)``.

    Returns:
        output ``(..., L_q, d_v)`` and weights ``(..., L_q, L_k)`` (fully masked rows: zeros).
    """
    for name, x in (("query", query), ("key", key), ("value", value)):
        _check_float(name, x, 2)
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"query {query.shape} and key {key.shape} differ in feature size d_k")
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"key {key.shape} and value {value.shape} differ in length L_k")
    if not query.shape[:-2] == key.shape[:-2] == value.shape[:-2]:
        raise ValueError(
            f"query {query.shape}, key {key.shape} and value {value.shape} must share their "
            "leading dimensions"
        )
    if len({query.dtype, key.dtype, value.dtype}) > 1:
        raise TypeError(
            f"inputs must share one dtype, got {query.dtype}, {key.dtype} and {value.dtype}"
        )
    if scale is None:  # a Python float: NumPy then keeps float32 inputs float32
        scale = 1.0 / float(np.sqrt(query.shape[-1]))
    scores = (query @ np.swapaxes(key, -1, -2)) * scale  # (..., L_q, L_k)
    if mask is None:
        weights = softmax(scores)
    else:
        if not isinstance(mask, np.ndarray):
            raise TypeError(f"mask must be a numpy.ndarray, got {type(mask).__name__}")
        if mask.dtype != np.bool_:
            raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
        try:
            fits = np.broadcast_shapes(mask.shape, scores.shape) == scores.shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"mask {mask.shape} does not broadcast to scores {scores.shape}")
        filled = np.where(mask, scores, -np.inf)
        row_max = filled.max(axis=-1, keepdims=True)
        row_max = np.where(np.isfinite(row_max), row_max, 0.0)
        e = np.where(mask, np.exp(filled - row_max), 0.0)
        total = e.sum(axis=-1, keepdims=True)
        weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return weights @ value, weights
