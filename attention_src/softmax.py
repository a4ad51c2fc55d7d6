"""Softmax, masked softmax and the masks attention uses.

Convention (the same as ``torch.nn.functional.scaled_dot_product_attention``'s boolean
``attn_mask``): a mask is a boolean tensor, ``True`` where a query **may** attend to a key.
"""

from __future__ import annotations

import torch

from attention_src.validation import (
    check_device,
    check_mask,
    check_positive_int,
    check_same_device,
    check_tensor,
)

__all__ = [
    "softmax", "masked_softmax", "lengths_to_mask", "causal_mask", "band_mask", "softmax_jacobian",
]


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax, written out: ``exp(x - max) / sum(exp(x - max))``.

    Subtracting the maximum along ``dim`` changes nothing mathematically (softmax is invariant
    to adding a constant) but keeps every exponent <= 0, so ``exp`` cannot overflow.

    Args:
        x: scores, any shape ``(...)``, floating point.
        dim: the axis to normalise over (the key axis, last, in attention).

    Returns:
        Tensor of the shape of ``x``; entries in [0, 1] that sum to 1 along ``dim``.
    """
    check_tensor("x", x, min_rank=1)
    shifted = x - x.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)


def masked_softmax(
    scores: torch.Tensor,
    mask: torch.Tensor | None = None,
    dim: int = -1,
    *,
    inplace: bool = False,
) -> torch.Tensor:
    """Softmax over ``dim`` that gives masked positions exactly zero weight.

    A row in which every position is masked gets all-zero weights (there is nothing to attend
    to), never NaN, and its gradient is zero, not NaN.

    This is :func:`softmax` with a mask; it calls PyTorch's fused ``torch.softmax`` for speed,
    and the tests check that both agree.

    Args:
        scores: ``(..., L_q, L_k)`` floating point.
        mask: boolean, broadcastable to ``scores``, ``True`` = may attend; ``None`` = no mask.
            On the device of ``scores`` (``ValueError`` naming both devices otherwise).
        dim: axis to normalise over.
        inplace: overwrite ``scores`` with the weights instead of allocating a new tensor of
            the same size. For inference only (it is refused while autograd records
            ``scores``): at ``(B, h, L, L)`` the weights are the largest tensor of attention,
            and not allocating a second one saves about half the softmax time on a CPU.

    Returns:
        weights: the shape of ``scores`` (``scores`` itself when ``inplace``).
    """
    check_tensor("scores", scores, min_rank=1)
    if mask is not None:
        check_mask(mask, scores.shape)
        check_same_device(scores=scores, mask=mask)
    if inplace:
        if scores.requires_grad and torch.is_grad_enabled():
            raise ValueError("inplace=True needs scores that autograd does not record")
        return _masked_softmax_inplace(scores, mask, dim)
    if mask is None:
        return torch.softmax(scores, dim=dim)
    # The most negative finite number, not -inf: a fully masked row then stays finite through
    # softmax (and its backward pass) before the final selection sets it to zero. torch.where
    # selects what masked_fill would write, bit for bit, gradients included, in 1.28 to 1.87
    # times less CPU time forward and backward (three runs of benchmarks/bench_softmax.py;
    # most with a mask broadcast over batch and heads).
    lowest = torch.finfo(scores.dtype).min
    weights = torch.softmax(torch.where(mask, scores, lowest), dim=dim)  # (..., L_q, L_k)
    # contiguous, as the masked_fill form returned them (where's result takes the layout of a
    # permuted mask, such as causal_mask(L).T); no copy when it already is
    return torch.where(mask, weights, 0.0).contiguous()


def _masked_softmax_inplace(
    scores: torch.Tensor, mask: torch.Tensor | None, dim: int
) -> torch.Tensor:
    """The same computation as :func:`masked_softmax`, written over ``scores`` in place.

    A masked entry's ``exp`` is never taken: PyTorch's CPU ``exp`` leaves its fast vector path
    for inputs far below -87 (``exp(-3.4e38)`` took 5 times as long as ``exp`` of ordinary
    scores), so masked entries are set to 0 before it and to what ``exp(lowest - max)`` is
    after it: exactly 0, except in a row whose maximum is the lowest float itself (every
    allowed score ``-inf`` or that lowest value), where it is 1. The weights are those of the
    plain computation (masked entries set to the lowest float, ``exp(s - max)``, divided by the
    row's sum, masked entries zeroed), bit for bit.
    """
    if mask is None:
        scores.sub_(scores.amax(dim=dim, keepdim=True)).exp_()  # exp(s - max), each <= 1
        return scores.div_(scores.sum(dim=dim, keepdim=True))
    masked, lowest = ~mask, torch.finfo(scores.dtype).min
    scores.masked_fill_(masked, lowest)  # out of the row's max
    top = scores.amax(dim=dim, keepdim=True)
    scores.sub_(top)  # s - max
    scores.masked_fill_(masked, 0.0).exp_()  # exp(s - max), each <= 1; 1 where masked
    scores.masked_fill_(masked, 0.0)  # exp(lowest - max): 0, unless max is lowest ...
    at_lowest = top == lowest
    if bool(at_lowest.any()):
        scores.masked_fill_(masked & at_lowest, 1.0)  # ... where it is exp(0) = 1
    scores.div_(scores.sum(dim=dim, keepdim=True))
    return scores.masked_fill_(masked, 0.0)  # a fully masked row: zeros


def lengths_to_mask(valid_lens: torch.Tensor, max_len: int) -> torch.Tensor:
    """Padding mask from sequence lengths: position ``j`` is valid when ``j < valid_lens``.

    Args:
        valid_lens: ``(...)`` integer tensor of lengths, each in ``[0, max_len]``.
        max_len: the padded length ``L_k``.

    Returns:
        mask: ``(..., max_len)`` boolean, on the device of ``valid_lens``. For scores
        ``(B, L_q, L_k)`` and lengths ``(B,)`` use ``lengths_to_mask(valid_lens, L_k)[:, None,
        :]`` (one row, shared by every query).
    """
    check_positive_int("max_len", max_len)
    if not isinstance(valid_lens, torch.Tensor):
        raise TypeError(f"valid_lens must be a torch.Tensor, got {type(valid_lens).__name__}")
    if valid_lens.is_floating_point() or valid_lens.dtype == torch.bool:
        raise TypeError(f"valid_lens must be an integer tensor, got dtype {valid_lens.dtype}")
    if valid_lens.numel() and (valid_lens.min() < 0 or valid_lens.max() > max_len):
        raise ValueError(
            f"valid_lens must lie in [0, {max_len}], got values from "
            f"{int(valid_lens.min())} to {int(valid_lens.max())}"
        )
    positions = torch.arange(max_len, device=valid_lens.device)
    return positions < valid_lens.unsqueeze(-1)  # (..., 1) vs (max_len,) -> (..., max_len)


def causal_mask(
    length_q: int, length_k: int | None = None, *, device: str | torch.device | None = None
) -> torch.Tensor:
    """Causal (look-ahead) mask: query ``i`` may attend to keys ``j <= i``.

    Args:
        length_q: number of queries ``L_q``.
        length_k: number of keys ``L_k`` (default ``L_q``). With ``L_k > L_q`` the queries are
            aligned to the *end* of the keys, as when new tokens attend to a cache of old ones.
        device: where to make the mask (a ``str`` or ``torch.device``); default PyTorch's
            default device, the CPU unless changed.

    Returns:
        mask: ``(L_q, L_k)`` boolean, lower triangular for ``L_q == L_k``.
    """
    length_k = length_q if length_k is None else length_k
    check_positive_int("length_q", length_q)
    check_positive_int("length_k", length_k)
    device = check_device(device)
    full = torch.ones(length_q, length_k, dtype=torch.bool, device=device)
    return full.tril(diagonal=length_k - length_q)


def band_mask(
    length: int, window: int, causal: bool = False, *,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """Banded (windowed, "truncated") self-attention mask: each query sees only nearby keys.

    Query ``i`` may attend to key ``j`` when ``|i - j| < window``: itself and ``window - 1``
    neighbours on each side, ``2 * window - 1`` keys in all (fewer at the ends). With
    ``causal=True`` only the ``window`` keys ``i - window < j <= i`` remain, the sliding
    window of a causal language model.

    Args:
        length: sequence length ``L`` (self-attention: ``L_q = L_k = L``).
        window: positive int; ``window >= L`` keeps every key (causal: every earlier key).
        causal: also block the keys after the query.
        device: where to make the mask (a ``str`` or ``torch.device``); default PyTorch's
            default device, the CPU unless changed.

    Returns:
        mask: ``(L, L)`` boolean, ``True`` = may attend.
    """
    check_positive_int("length", length)
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window must be an int, got {type(window).__name__}")
    if window < 1:
        raise ValueError(
            f"window must be at least 1 (a query always sees itself), got {window}"
        )
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    device = check_device(device)
    # |i - j| < window  <=>  -(window - 1) <= j - i <= window - 1: a band of diagonals, built
    # on one boolean (L, L) tensor (no int64 (L, L) temporaries for i - j)
    upper = 0 if causal else window - 1
    full = torch.ones(length, length, dtype=torch.bool, device=device)
    return full.triu(-(window - 1)).tril(upper)  # (L, L)


def softmax_jacobian(weights: torch.Tensor) -> torch.Tensor:
    """Jacobian of the softmax, given its output: ``J = diag(p) - p^T p`` for each row ``p``.

    With ``p = softmax(s)`` over the last axis, ``J[..., i, j] = dp_i / ds_j
    = p_i * (delta_ij - p_j)``. The matrix is symmetric, its rows sum to 0 (adding a constant
    to every score changes nothing), and it vanishes when ``p`` is one-hot: a saturated softmax
    passes no gradient back to its scores. By the chain rule the gradient reaching the scores
    is ``dL/ds = J @ dL/dp``.

    Args:
        weights: ``(..., n)``, softmax outputs (each row non-negative, summing to 1) over the
            last axis; floating point. Any leading batch axes.

    Returns:
        jacobian: ``(..., n, n)``, with ``jacobian[..., i, j] = d weights_i / d scores_j``.
    """
    check_tensor("weights", weights, min_rank=1)
    # (..., n, n) diagonal of p, minus the outer product p_i p_j
    return torch.diag_embed(weights) - weights.unsqueeze(-1) * weights.unsqueeze(-2)
