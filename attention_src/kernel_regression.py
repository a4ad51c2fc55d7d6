"""Nadaraya-Watson kernel regression: attention pooling with nothing to learn (chapter 1).

Given training pairs ``(x_i, y_i)``, the Nadaraya-Watson estimator (Nadaraya, 1964; Watson,
1964) predicts at a point ``x`` the kernel-weighted average of the ``y_i``::

    f(x) = sum_i K(x - x_i) y_i / sum_j K(x - x_j)

In the language of attention, ``x`` is a **query**, the ``x_i`` are **keys** and the ``y_i``
are **values**: the weights ``K(x - x_i) / sum_j K(x - x_j)`` are non-negative, sum to 1 over
the keys, and are largest for the keys closest to the query. For the Gaussian kernel
``K(u) = exp(-u^2 / (2 sigma^2))`` the weights are exactly a softmax over the keys of the scores
``-(x - x_i)^2 / (2 sigma^2)`` (the kernel's normalising constant cancels in the ratio), so the
estimator is attention with a fixed, hand-chosen scoring function and one knob, the bandwidth
``sigma``.

* :func:`gaussian_kernel_scores`: the scores ``-(q - k)^2 / (2 sigma^2)``, shape ``(L_q, L_k)``.
* :func:`nadaraya_watson`: predictions and attention weights for a batch of queries.
"""

from __future__ import annotations

import math

import torch

from attention_src.softmax import masked_softmax, softmax
from attention_src.validation import check_mask, check_same_device, check_tensor

__all__ = ["gaussian_kernel_scores", "nadaraya_watson"]


def _check_points(name: str, x: object) -> torch.Tensor:
    check_tensor(name, x, min_rank=1)
    if x.dim() != 1:
        raise ValueError(f"{name} must be 1-D (one scalar per point), got shape {tuple(x.shape)}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty: need at least one point")
    return x


def _check_bandwidth(bandwidth: object) -> float:
    if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)):
        raise TypeError(f"bandwidth must be a positive number, got {type(bandwidth).__name__}")
    if not (math.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(f"bandwidth must be positive and finite, got {bandwidth}")
    return float(bandwidth)


def gaussian_kernel_scores(
    query: torch.Tensor, keys: torch.Tensor, bandwidth: float
) -> torch.Tensor:
    """Scores of a Gaussian kernel: ``s_ij = -(q_i - k_j)^2 / (2 sigma^2)``.

    ``exp(s_ij)`` is the Gaussian kernel ``K(q_i - k_j)`` without its normalising constant,
    so ``softmax(s)`` over the keys gives the Nadaraya-Watson weights.

    Args:
        query: ``(L_q,)`` query points, floating point.
        keys: ``(L_k,)`` key points (the training inputs), same dtype as ``query``.
        bandwidth: ``sigma > 0``, the kernel's width (in units of ``x``).

    Returns:
        scores: ``(L_q, L_k)``, all ``<= 0``; ``0`` where a key equals the query.
    """
    _check_points("query", query)
    _check_points("keys", keys)
    sigma = _check_bandwidth(bandwidth)
    if query.dtype != keys.dtype:
        raise TypeError(f"query ({query.dtype}) and keys ({keys.dtype}) must share one dtype")
    check_same_device(query=query, keys=keys)
    diff = query[:, None] - keys[None, :]  # (L_q, 1) - (1, L_k) -> (L_q, L_k)
    return -(diff**2) / (2 * sigma**2)


def nadaraya_watson(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    bandwidth: float,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nadaraya-Watson regression with a Gaussian kernel, written as attention pooling.

    ``weights = softmax(-(q_i - k_j)^2 / (2 sigma^2))`` over the keys ``j``, and
    ``prediction_i = sum_j weights_ij values_j``.

    Args:
        query: ``(L_q,)`` points at which to predict.
        keys: ``(L_k,)`` training inputs ``x_j``.
        values: ``(L_k,)`` training targets ``y_j``, or ``(L_k, d)`` for ``d`` targets per
            point; same dtype as ``keys``.
        bandwidth: ``sigma > 0``. Small ``sigma``: each query listens to its nearest keys only (a
            wiggly fit); large ``sigma``: every key gets nearly the same weight (the fit tends to
            the mean of the values).
        mask: optional boolean ``(L_q, L_k)`` (or broadcastable to it), ``True`` = the query
            may use that key; e.g. ``~torch.eye(n, dtype=torch.bool)`` for leave-one-out
            predictions at the training points. A query with no usable key gets weights 0 and
            prediction 0.

    Returns:
        prediction: ``(L_q,)`` (or ``(L_q, d)`` for 2-D ``values``);
        weights: ``(L_q, L_k)``, each row non-negative and summing to 1.
    """
    _check_points("keys", keys)
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"values must be a torch.Tensor, got {type(values).__name__}")
    if values.dim() not in (1, 2) or values.shape[0] != keys.shape[0]:
        raise ValueError(
            f"values must be (L_k,) or (L_k, d) with L_k = {keys.shape[0]} (one per key), "
            f"got values {tuple(values.shape)} for keys {tuple(keys.shape)}"
        )
    if values.dtype != keys.dtype:
        raise TypeError(f"keys ({keys.dtype}) and values ({values.dtype}) must share one dtype")
    check_same_device(keys=keys, values=values)
    scores = gaussian_kernel_scores(query, keys, bandwidth)  # (L_q, L_k)
    if mask is None:
        weights = softmax(scores, dim=-1)  # (L_q, L_k), each row sums to 1
    else:
        check_mask(mask, scores.shape)
        weights = masked_softmax(scores, mask, dim=-1)
    # (L_q, L_k) @ (L_k,) -> (L_q,), or (L_q, L_k) @ (L_k, d) -> (L_q, d)
    return weights @ values, weights
