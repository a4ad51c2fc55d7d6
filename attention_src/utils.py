"""Reproducibility and small helpers used by every chapter."""

from __future__ import annotations

import numbers
import os
import random

import numpy as np
import torch
from torch import nn

from attention_src.validation import check_device

__all__ = ["set_seed", "count_parameters", "DEVICE_ENV", "pick_device", "place",
           "module_device"]


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


def place(module: nn.Module, device: str | torch.device | None = None,
          dtype: torch.dtype | None = None) -> nn.Module:
    """Move a freshly built ``module`` to ``device`` and convert it to ``dtype``, in place.

    The modules of the package take ``device=`` and ``dtype=`` keyword arguments and call
    this at the end of their ``__init__``: the parameters are drawn on the CPU, from the
    CPU generator, exactly as without the arguments, and then moved, so a seed gives the
    same initial weights on every device. ``None`` leaves the device (or dtype) as built.

    Raises ``TypeError`` for a ``device`` that is not a ``str`` or ``torch.device``, or a
    ``dtype`` that is not a floating ``torch.dtype``; ``ValueError`` for a string that names
    no device.
    """
    device = check_device(device)
    if dtype is not None and (not isinstance(dtype, torch.dtype) or not dtype.is_floating_point):
        raise TypeError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    if device is not None or dtype is not None:
        module.to(device=device, dtype=dtype)
    return module


def module_device(module: nn.Module) -> torch.device:
    """The device of ``module``'s first parameter, or of its first buffer; the CPU for a
    module with neither. The training loops move their batches there."""
    for tensor in module.parameters():
        return tensor.device
    for tensor in module.buffers():
        return tensor.device
    return torch.device("cpu")


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
