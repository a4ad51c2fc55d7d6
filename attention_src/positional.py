"""Positional information: sinusoidal encoding and rotary position embedding.

Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5), added to the token
embeddings::

    PE[pos, 2i]   = sin(pos / 10000^(2i / d))
    PE[pos, 2i+1] = cos(pos / 10000^(2i / d))

The exponent is ``2i/d``: column pair ``i`` oscillates with wavelength ``2 pi * 10000^(2i/d)``,
from ``2 pi`` for the first pair to nearly ``2 pi * 10000`` for the last.

Rotary position embedding (RoPE; Su et al., 2021), applied to queries and keys instead: each
feature pair ``(x[2i], x[2i+1])`` of the vector at position ``m`` is rotated by the angle
``m * theta_i`` with ``theta_i = 10000^(-2i/d)``, the same frequencies as the sinusoidal table.
Because rotations compose, ``rot(q, m) . rot(k, n)`` depends on the positions only through
``m - n``.

The same rotations move the sinusoidal table: ``PE[pos + k] = PE[pos] @ R_k`` for every ``pos``,
with ``R_k = shift_rotation(k, d)`` block diagonal (row vectors, as everywhere in the book).
"""

from __future__ import annotations

import math
import numbers

import torch

from attention_src.validation import (
    check_device,
    check_positive_int,
    check_same_device,
    check_tensor,
)

__all__ = ["sinusoidal_positional_encoding", "shift_rotation", "apply_rotary"]


def _check_base(base: object) -> float:
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"base must be a real number, got {type(base).__name__}")
    if not (math.isfinite(base) and base > 0):
        raise ValueError(f"base must be positive and finite, got {base}")
    return float(base)


def _target(device: torch.device | None) -> torch.device:
    """``device``, or PyTorch's default device (the CPU unless changed) for ``None``."""
    return torch.get_default_device() if device is None else device


def sinusoidal_positional_encoding(
    length: int, dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float32, *,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """The sinusoidal position table.

    Args:
        length: number of positions ``L``.
        dim: encoding width ``d`` (an odd ``d`` drops the last cosine column).
        base: the ``10000`` of the formula; positive and finite.
        dtype: floating dtype of the result.
        device: where the table goes (a ``str`` or ``torch.device``; default PyTorch's
            default device). It is computed on the CPU in float64 and then moved, so every
            device gets the same numbers.

    Returns:
        pe: ``(length, dim)``; row ``pos`` is the encoding of position ``pos``.
    """
    check_positive_int("length", length)
    check_positive_int("dim", dim)
    _check_base(base)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    device = check_device(device)
    position = torch.arange(length, dtype=torch.float64, device="cpu").unsqueeze(1)  # (L, 1)
    two_i = torch.arange(0, dim, 2, dtype=torch.float64, device="cpu")  # (ceil(d/2),)
    angle = position / base ** (two_i / dim)  # (L, 1) / (ceil(d/2),) -> (L, ceil(d/2))
    pe = torch.empty(length, 2 * angle.shape[1], dtype=torch.float64, device="cpu")
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe[:, :dim].to(dtype=dtype, device=_target(device))


def shift_rotation(
    k: int, dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float64, *,
    device: str | torch.device | None = None,
) -> torch.Tensor:
    """The matrix ``R_k`` that moves the sinusoidal encoding ``k`` positions on.

    ``PE[pos + k] = PE[pos] @ R_k`` for every ``pos`` (row vectors), with ``PE`` from
    ``sinusoidal_positional_encoding(length, dim, base)``. ``R_k`` is block diagonal: block
    ``i`` (rows and columns ``2i, 2i+1``) is ``[[cos b, -sin b], [sin b, cos b]]`` with
    ``b = k / base^(2i / dim)``. It is orthogonal and ``R_{-k} = R_k^T``.

    Args:
        k: the shift in positions, any int (negative moves back).
        dim: encoding width ``d``, positive and even (an odd ``d`` has a sine column
            without its cosine, which no linear map of that column moves).
        base: the ``10000`` of the formula; positive and finite.
        dtype: floating dtype of the result.
        device: where the matrix goes (default PyTorch's default device); computed on the
            CPU in float64 and then moved, the same numbers on every device.

    Returns:
        ``R_k``: ``(dim, dim)``.
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k must be an int, got {type(k).__name__}")
    check_positive_int("dim", dim)
    if dim % 2:
        raise ValueError(f"dim must be even (sine and cosine pairs), got {dim}")
    _check_base(base)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    device = check_device(device)
    two_i = torch.arange(0, dim, 2, dtype=torch.float64, device="cpu")  # (d/2,)
    angle = int(k) / base ** (two_i / dim)  # (d/2,): b_i
    c, s = angle.cos(), angle.sin()  # (d/2,) each
    blocks = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (d/2, 2, 2)
    return torch.block_diag(*blocks).to(dtype=dtype, device=_target(device))  # (d, d)


def apply_rotary(
    x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0
) -> torch.Tensor:
    """Rotary position embedding: rotate each feature pair of ``x`` by its position's angle.

    Feature pair ``i`` (features ``2i`` and ``2i+1``, the interleaved layout of Su et al.) of
    the vector at position ``m`` is rotated by ``m * base^(-2i/d)``::

        out[2i]   = x[2i] cos(m theta_i) - x[2i+1] sin(m theta_i)
        out[2i+1] = x[2i] sin(m theta_i) + x[2i+1] cos(m theta_i)

    Apply it to queries and keys (not values) before the scores: then
    ``apply_rotary(q, m) . apply_rotary(k, n)`` depends on ``m`` and ``n`` only through
    ``m - n``. (Some libraries pair feature ``j`` with ``j + d/2`` instead; that is the same
    rotation after a fixed permutation of the features.)

    Args:
        x: ``(..., L, d)`` floating-point, ``d`` even.
        positions: the position of each vector, integers or floats: either ``(L,)``, shared
            by every leading index of ``x``, or with one axis per axis of ``x.shape[:-1]``, each
            of size 1 or equal to ``x``'s (for ``x`` of shape ``(B, h, L, d)`` and one row of
            positions per sequence, ``(B, 1, L)``). Any other rank is rejected rather than
            broadcast from the left, which would silently line ``(B, L)`` positions up with the
            heads when ``B == h``. On the device of ``x`` (``ValueError`` naming both
            devices otherwise).
        base: the ``10000`` of the frequencies; positive and finite.

    Returns:
        ``(..., L, d)``, same dtype and device as ``x``; the norm of every vector is unchanged.
        The frequencies are computed on the CPU and moved to ``x``'s device, so the angles
        agree on every device; their cosines and sines may differ in the last bit.
    """
    check_tensor("x", x, min_rank=2)
    d = x.shape[-1]
    if d % 2:
        raise ValueError(
            f"apply_rotary rotates feature pairs, so the last dimension of x must be even, "
            f"got x of shape {tuple(x.shape)} (d = {d})"
        )
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    if positions.dtype == torch.bool or positions.is_complex():
        raise TypeError(f"positions must hold integers or real numbers, got {positions.dtype}")
    check_same_device(x=x, positions=positions)
    if positions.is_floating_point() and not bool(torch.isfinite(positions).all()):
        raise ValueError(f"positions must be finite, got {positions.tolist()}")
    target = tuple(x.shape[:-1])  # (..., L)
    shape = tuple(positions.shape)
    fits = len(shape) in (1, len(target)) and shape[-1] == target[-1] and all(
        p in (1, t) for p, t in zip(reversed(shape), reversed(target), strict=False)
    )
    if not fits:
        raise ValueError(
            f"positions of shape {shape} must be (L,) = ({target[-1]},) or have one axis per "
            f"axis of x.shape[:-1] = {target}, each 1 or equal (x has shape {tuple(x.shape)})"
        )
    base = _check_base(base)
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64, device="cpu") / d)  # (d/2,)
    theta = theta.to(x.device)
    # (..., L, 1) * (d/2,) -> (..., L, d/2): angle m * theta_i of every position and pair
    angle = positions.to(torch.float64).unsqueeze(-1) * theta
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., L, d/2) each
    out_even = x_even * cos - x_odd * sin
    out_odd = x_even * sin + x_odd * cos
    return torch.stack((out_even, out_odd), dim=-1).flatten(-2)  # (..., L, d/2, 2) -> (..., L, d)
