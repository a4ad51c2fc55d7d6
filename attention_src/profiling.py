"""Measuring what a computation costs: tensor memory, matrix-product work, CPU time (chapter 9).

* :class:`TensorMemory`: a ``TorchDispatchMode`` that sees every PyTorch operator run inside
  a ``with`` block. It adds up the bytes of each *new* tensor storage an operator returns,
  subtracts them when Python frees the last tensor on that storage, and keeps the peak. Views
  and in-place results share the storage of an input, so they are not new memory. It also
  counts the operators called, by name, and the multiply-adds of the matrix products
  (``mm``, ``bmm``, ``addmm``, ``baddbmm`` and their in-place forms). What it cannot see is
  scratch memory allocated *inside* one operator (a fused kernel's tiles, for example).
* :func:`peak_bytes` and :func:`matmul_macs`: the peak extra bytes and the multiply-adds of
  one call.
* :func:`best_ms`: the best CPU time of the calling thread over a few calls, after a
  warm-up call (``time.thread_time``: time other processes hold the core is not counted;
  with one thread, ``torch.set_num_threads(1)``, every operator runs in this thread).
* :func:`slope`: the least-squares exponent ``p`` of ``y ~ c * x**p``.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterator

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attention_src.validation import check_positive_int

__all__ = ["TensorMemory", "peak_bytes", "matmul_macs", "best_ms", "slope"]

#: The matrix-product operators whose work :class:`TensorMemory` counts; for each, the last
#: two positional arguments are the factors ``(..., m, k)`` and ``(..., k, n)``.
PRODUCTS = frozenset({"mm", "bmm", "addmm", "addmm_", "baddbmm", "baddbmm_"})


def _tensors(obj) -> Iterator[torch.Tensor]:
    """Every tensor in ``obj``, looking inside lists, tuples and dicts."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


class TensorMemory(TorchDispatchMode):
    """Peak bytes of the tensors PyTorch operators allocate inside a ``with`` block.

    Attributes:
        now: bytes of the storages allocated in the block and still alive.
        peak: the largest value ``now`` reached.
        calls: ``{operator name: number of calls}``.
        macs: multiply-adds of the matrix products: ``m * k * n`` for a
            ``(..., m, k) @ (..., k, n)`` product (times the batch size).
    """

    def __init__(self):
        super().__init__()
        self.live: dict[int, list[int]] = {}  # storage address -> [bytes, tensors on it]
        self.now = 0
        self.peak = 0
        self.calls: dict[str, int] = {}
        self.macs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        self.calls[name] = self.calls.get(name, 0) + 1
        if name in PRODUCTS:
            a, b = args[-2:]  # (..., m, k) @ (..., k, n): m * k * n multiply-adds each
            self.macs += a.numel() * b.shape[-1]
        inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
        for t in _tensors(out):
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0:
                continue
            if key not in self.live:
                if key in inputs:  # a view of, or an in-place result on, earlier memory
                    continue
                self.live[key] = [nbytes, 0]
                self.now += nbytes
                self.peak = max(self.peak, self.now)
            self.live[key][1] += 1  # one more tensor on this storage
            weakref.finalize(t, self._release, key)
        return out

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:  # the last tensor on this storage is gone
            self.now -= entry[0]
            del self.live[key]


def _check_callable(fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")


def peak_bytes(fn: Callable, *args, **kwargs) -> int:
    """Peak extra bytes of ``fn(*args, **kwargs)`` without autograd, its output included
    (the arguments, allocated before, are not counted)."""
    _check_callable(fn)
    with torch.no_grad(), TensorMemory() as mem:
        out = fn(*args, **kwargs)
        del out
    return mem.peak


def matmul_macs(fn: Callable, *args, **kwargs) -> int:
    """Multiply-adds of the matrix products ``fn(*args, **kwargs)`` runs, without autograd."""
    _check_callable(fn)
    with torch.no_grad(), TensorMemory() as mem:
        fn(*args, **kwargs)
    return mem.macs


def best_ms(fn: Callable, repeats: int = 3) -> float:
    """Best CPU time of the calling thread over ``repeats`` calls of ``fn()``, in ms.

    One warm-up call first (first-call allocations are not timed); no autograd. The minimum,
    not the mean: load from other processes only ever adds time.
    """
    _check_callable(fn)
    check_positive_int("repeats", repeats)
    times = []
    with torch.no_grad():
        fn()  # warm-up
        for _ in range(repeats):
            start = time.thread_time()
            fn()
            times.append(time.thread_time() - start)
    return 1e3 * min(times)


def slope(xs, ys) -> float:
    """The exponent ``p`` of ``y ~ c * x**p``: least-squares slope of ``log y`` on ``log x``.

    Args:
        xs, ys: sequences of the same length ``>= 2`` of positive finite numbers, ``xs`` not
            all equal.
    """
    x = np.asarray(xs, dtype=float)
    y = np.asarray(ys, dtype=float)
    if x.ndim != 1 or x.shape != y.shape or len(x) < 2:
        raise ValueError(
            f"xs and ys must be 1-D of the same length >= 2, got shapes {x.shape}, {y.shape}"
        )
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y)) and np.all(x > 0)
            and np.all(y > 0)):
        raise ValueError(f"xs and ys must be positive and finite, got {list(x)}, {list(y)}")
    if np.all(x == x[0]):
        raise ValueError(f"xs must not all be equal, got {list(x)}")
    return float(np.polyfit(np.log2(x), np.log2(y), 1)[0])

