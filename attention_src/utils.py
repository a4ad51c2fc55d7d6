"""Reproducibility and small helpers used by every chapter."""

from __future__ import annotations

import numbers
import os
import random

import numpy as np
import torch
from torch import nn

__all__ = ["set_seed", "count_parameters", "DEVICE_ENV", "pick_device"]


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


#: The environment variable that overrides :func:`pick_device`, e.g. ``ATTENTION_DEVICE=cpu``.
DEVICE_ENV = "ATTENTION_DEVICE"


def pick_device(prefer: str | torch.device | None = None) -> torch.device:
    """The device a chapter runs on: ``prefer`` if given, else ``$ATTENTION_DEVICE`` if set,
    else the first CUDA GPU when PyTorch sees one, else the CPU.

    Raises ``ValueError`` when the device asked for (argument or variable) is not a device
    name, or is a CUDA device while CUDA is unavailable; ``TypeError`` for a ``prefer`` that is
    neither a string nor a ``torch.device``.
    """
    source = "prefer"
    if prefer is None and os.environ.get(DEVICE_ENV):
        prefer, source = os.environ[DEVICE_ENV], f"${DEVICE_ENV}"
    if prefer is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not isinstance(prefer, (str, torch.device)):
        raise TypeError(f"prefer must be a str or a torch.device, got {type(prefer).__name__}")
    try:
        device = torch.device(prefer)
    except RuntimeError as err:
        raise ValueError(f"{source}={prefer!r} is not a device name: {err}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"{source}={prefer!r} asks for CUDA, which is not available here")
    return device
