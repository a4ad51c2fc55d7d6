"""Adam and a cosine learning-rate decay, written out as PyTorch computes them on a CPU.

Every model in the book is trained with Adam (Kingma & Ba, 2015, Algorithm 1). For parameters
``theta``, gradient ``g`` at step ``t = 1, 2, ...``, learning rate ``lr``, decay rates
``beta1, beta2`` and ``eps``::

    m_t = beta1 m_{t-1} + (1 - beta1) g            (the gradient's running mean)
    v_t = beta2 v_{t-1} + (1 - beta2) g * g        (the running mean of its square)
    theta_t = theta_{t-1} - lr / (1 - beta1 ** t) * m_t / (sqrt(v_t / (1 - beta2 ** t)) + eps)

:class:`Adam` makes exactly these operations, in the order ``torch.optim.Adam`` makes them on
a CPU (its single-tensor path), so a run gives the same numbers bit for bit:
tests/test_optim.py compares the two step by step, and the chapters' saved training runs, made
with ``torch.optim.Adam``, are reproduced by the book's loops with this one.

Why not ``torch.optim.Adam`` itself: creating the first ``torch.optim`` optimizer in a process
imports PyTorch's compiler stack (``torch._dynamo`` and SymPy), about 2 s of CPU on the book's
reference machine, paid again by every chapter that trains a model. The update is five tensor
operations; written out, it costs nothing to import and shows what Adam does.

:class:`CosineAnnealingLR` is ``torch.optim.lr_scheduler.CosineAnnealingLR`` (with
``eta_min = 0``) for :class:`Adam`, updated by PyTorch's recursion, so its rates are PyTorch's
to the last bit too.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

import torch

__all__ = ["Adam", "CosineAnnealingLR"]


def _check_number(name: str, value: object, low: float, high: float | None = None,
                  high_open: bool = False) -> float:
    """``value`` as a float, if it is a finite real number in ``[low, high]`` (``[low, high)``
    with ``high_open``); a named ``TypeError`` or ``ValueError`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    value = float(value)
    too_high = high is not None and (value >= high if high_open else value > high)
    if not math.isfinite(value) or value < low or too_high:
        bound = "" if high is None else f", {'below' if high_open else 'at most'} {high:g}"
        raise ValueError(f"{name} must be a finite number >= {low:g}{bound}, got {value!r}")
    return value


class Adam:
    """Adam, as ``torch.optim.Adam(params, lr, betas, eps, weight_decay)`` updates on a CPU.

    Args:
        params: the tensors to train (each a leaf with ``requires_grad``), e.g.
            ``model.parameters()``.
        lr: the learning rate, ``>= 0``; may be changed between steps (``optimizer.lr = ...``).
        betas: ``(beta1, beta2)``, each in ``[0, 1)``.
        eps: added to the denominator, ``>= 0``.
        weight_decay: ``>= 0``; adds ``weight_decay * theta`` to the gradient (L2, as
            ``torch.optim.Adam`` does, not AdamW's decoupled decay).

    A parameter whose ``.grad`` is ``None`` at a step (a frozen one, with
    ``requires_grad=False``, always) is skipped and its step count does not advance, as in
    PyTorch. Complex parameters and a tensor listed twice are refused.
    """

    def __init__(self, params: Iterable[torch.Tensor], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        self.params = list(params)
        if not self.params:
            raise ValueError("Adam got an empty list of parameters")
        seen: dict[int, int] = {}
        for i, p in enumerate(self.params):
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"params[{i}] must be a tensor, got {type(p).__name__}")
            if not (p.is_leaf or p.retains_grad):  # a frozen leaf is fine: it gets no grad
                raise ValueError(f"params[{i}] (shape {tuple(p.shape)}) is not a leaf tensor: "
                                 "its gradient is never stored")
            if p.is_complex():
                raise TypeError(f"params[{i}] is complex ({p.dtype}); this Adam is real only")
            if id(p) in seen:
                raise ValueError(f"params[{i}] is params[{seen[id(p)]}] again: each tensor "
                                 "must appear once")
            seen[id(p)] = i
        self.lr = _check_number("lr", lr, 0.0)
        if not isinstance(betas, tuple | list) or len(betas) != 2:
            raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        self.beta1 = _check_number("betas[0]", betas[0], 0.0, 1.0, high_open=True)
        self.beta2 = _check_number("betas[1]", betas[1], 0.0, 1.0, high_open=True)
        self.eps = _check_number("eps", eps, 0.0)
        self.weight_decay = _check_number("weight_decay", weight_decay, 0.0)
        # per parameter, created at its first step: [steps taken, m, v]
        self.state: list[list | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
        """Forget the gradients (``p.grad = None``, as PyTorch's default does)."""
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        """One update of every parameter that has a gradient."""
        beta1, beta2, lr, eps = self.beta1, self.beta2, self.lr, self.eps
        for i, param in enumerate(self.params):
            grad = param.grad
            if grad is None:
                continue
            if self.state[i] is None:
                self.state[i] = [0.0, torch.zeros_like(param), torch.zeros_like(param)]
            state = self.state[i]
            state[0] += 1.0
            step, exp_avg, exp_avg_sq = state
            if self.weight_decay != 0:
                grad = grad.add(param, alpha=self.weight_decay)
            exp_avg.lerp_(grad, 1 - beta1)  # m_t
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)  # v_t
            bias_correction1 = 1 - beta1 ** step
            bias_correction2 = 1 - beta2 ** step
            step_size = lr / bias_correction1
            denom = (exp_avg_sq.sqrt() / bias_correction2 ** 0.5).add_(eps)
            param.addcdiv_(exp_avg, denom, value=-step_size)


class CosineAnnealingLR:
    """Decay ``optimizer.lr`` from its value now to 0 over ``t_max`` calls of :meth:`step`,
    along half a cosine: after ``t`` calls the rate is ``lr (1 + cos(pi t / t_max)) / 2``.

    Each rate is computed from the previous one, as ``torch.optim.lr_scheduler.
    CosineAnnealingLR`` (``eta_min = 0``) computes it, so the rates equal PyTorch's bit for bit
    (and, like PyTorch's, rise again after ``t_max`` calls). Call :meth:`step` after each
    optimizer step.
    """

    def __init__(self, optimizer: Adam, t_max: int):
        if not isinstance(optimizer, Adam):
            raise TypeError(f"optimizer must be an attention_src.optim.Adam, got "
                            f"{type(optimizer).__name__}")
        if isinstance(t_max, bool) or not isinstance(t_max, int) or t_max < 1:
            raise ValueError(f"t_max must be a positive int, got {t_max!r}")
        self.optimizer, self.t_max = optimizer, t_max
        self.base_lr, self.eta_min, self.t = optimizer.lr, 0.0, 0

    def step(self) -> None:
        self.t += 1
        t, t_max, eta_min = self.t, self.t_max, self.eta_min
        lr = self.optimizer.lr
        if (t - 1 - t_max) % (2 * t_max) == 0:  # at the bottom: PyTorch's restart branch
            lr = lr + (self.base_lr - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
        else:  # the ratio of this step's cosine factor to the previous one's
            lr = ((1 + math.cos(math.pi * t / t_max))
                  / (1 + math.cos(math.pi * (t - 1) / t_max)) * (lr - eta_min) + eta_min)
        self.optimizer.lr = lr
