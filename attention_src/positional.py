"""Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5).

    PE[pos, 2i]   = sin(pos / 10000^(2i / d))
    PE[pos, 2i+1] = cos(pos / 10000^(2i / d))

The exponent is ``2i/d``: column pair ``i`` oscillates with wavelength ``2 pi * 10000^(2i/d)``,
from ``2 pi`` for the first pair to nearly ``2 pi * 10000`` for the last.
"""

from __future__ import annotations

import math
import numbers

import torch

from attention_src.validation import check_positive_int

__all__ = ["sinusoidal_positional_encoding"]


def sinusoidal_positional_encoding(
    length: int, dim: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The sinusoidal position table.

    Args:
        length: number of positions ``L``.
        dim: encoding width ``d`` (an odd ``d`` drops the last cosine column).
        base: the ``10000`` of the formula; positive and finite.
        dtype: floating dtype of the result.

    Returns:
        pe: ``(length, dim)``; row ``pos`` is the encoding of position ``pos``.
    """
    check_positive_int("length", length)
    check_positive_int("dim", dim)
    if isinstance(base, bool) or not isinstance(base, numbers.Real):
        raise TypeError(f"base must be a real number, got {type(base).__name__}")
    if not (math.isfinite(base) and base > 0):
        raise ValueError(f"base must be positive and finite, got {base}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)  # (L, 1)
    two_i = torch.arange(0, dim, 2, dtype=torch.float64)  # (ceil(d/2),)
    angle = position / base ** (two_i / dim)  # (L, 1) / (ceil(d/2),) -> (L, ceil(d/2))
    pe = torch.empty(length, 2 * angle.shape[1], dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe[:, :dim].to(dtype)
