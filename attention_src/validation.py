"""Input checks shared by every function of the package.

Attention code fails in unhelpful ways on bad input: a mismatched mask broadcasts silently, an
integer tensor raises deep inside ``matmul``, a wrong feature size surfaces as a cryptic shape
error three calls down. These helpers turn each of those into a ``TypeError`` or ``ValueError``
at the public function's door, naming the argument and the shapes at fault.
"""

from __future__ import annotations

import torch

__all__ = ["check_tensor", "check_same_dtype", "check_mask", "check_positive_int",
           "check_device", "check_same_device"]


def check_tensor(name: str, x: object, min_rank: int = 2) -> torch.Tensor:
    """Require a floating-point tensor of rank at least ``min_rank``; return it unchanged."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if not torch.is_floating_point(x):
        raise TypeError(
            f"{name} must be a floating-point tensor, got dtype {x.dtype}; "
            f"convert it first, e.g. {name}.float()"
        )
    if x.dim() < min_rank:
        raise ValueError(
            f"{name} must have at least {min_rank} dimensions, got shape {tuple(x.shape)}"
        )
    return x


def check_same_dtype(**tensors: torch.Tensor) -> None:
    """Require every keyword tensor to share one dtype."""
    dtypes = {name: t.dtype for name, t in tensors.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{n}: {d}" for n, d in dtypes.items())
        raise TypeError(f"inputs must share one dtype, got {listed}")


def check_mask(mask: object, target_shape: torch.Size | tuple[int, ...], name: str = "mask"):
    """Require a boolean mask that broadcasts to ``target_shape`` without enlarging it.

    ``True`` means "may attend". A mask whose broadcast with the scores would change the scores'
    shape (extra leading dimensions, or a size that is neither 1 nor the target size) is an
    error rather than a silent broadcast.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"{name} must be a boolean torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"{name} must have dtype torch.bool (True = may attend), got {mask.dtype}; "
            f"for a 0/1 mask use {name}.bool()"
        )
    target = tuple(target_shape)
    shape = tuple(mask.shape)
    fits = len(shape) <= len(target) and all(
        m in (1, t) for m, t in zip(reversed(shape), reversed(target), strict=False)
    )
    if not fits:
        raise ValueError(
            f"{name} of shape {shape} does not broadcast to the scores' shape {target}"
        )
    return mask


def check_positive_int(name: str, value: object) -> int:
    """Require a positive Python int (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def check_device(device: object, name: str = "device") -> torch.device | None:
    """Require ``None`` (PyTorch's default device) or a device given as a ``str`` or a
    ``torch.device``; return it as a ``torch.device`` (``None`` unchanged).

    Raises ``TypeError`` naming the type of anything else (an ``int`` index too: write
    ``"cuda:0"``), ``ValueError`` for a string that names no device.
    """
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(
            f"{name} must be a str or a torch.device (e.g. 'cpu', 'cuda'), "
            f"got {type(device).__name__}"
        )
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"{name}={device!r} is not a device name: {err}") from None


def check_same_device(**tensors: torch.Tensor | None) -> None:
    """Require every keyword tensor (``None`` entries are skipped) to live on one device.

    Raises ``ValueError`` naming each tensor and its device, e.g. ``query: cuda:0, mask: cpu``
    (PyTorch's own error comes later, from deep inside an operation).
    """
    devices = {name: t.device for name, t in tensors.items() if isinstance(t, torch.Tensor)}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{n}: {d}" for n, d in devices.items())
        raise ValueError(f"inputs must be on one device, got {listed}")
