"""Reproducibility and small helpers used by every chapter."""

from __future__ import annotations

import numbers
import random

import numpy as np
import torch
from torch import nn

__all__ = ["set_seed", "count_parameters"]


def set_seed(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and PyTorch, for reproducible runs.

    ``seed`` is any integer (a Python ``int`` or a NumPy integer, not a bool) in PyTorch's range
    ``[-2**63, 2**64)``; ``np.int64(7)`` seeds exactly as ``7`` does.

    Chapters that need NumPy randomness should still prefer an explicit
    ``np.random.default_rng(seed)``; the global seed covers library code that uses the legacy
    global generator.
    """
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    seed = int(seed)
    if not -(2**63) <= seed < 2**64:
        raise ValueError(f"seed must lie in [-2**63, 2**64) for torch.manual_seed, got {seed}")
    random.seed(seed)
    np.random.seed(seed % 2**32)  # noqa: NPY002 - seeds the legacy global generator on purpose
    torch.manual_seed(seed)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters (elements) of ``module``."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
