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
* :class:`CpuCost`, :func:`measure_call` and :func:`median_cost`: what a call costs, split
  as the operating system accounts for it: wall-clock time, CPU time in user mode (the
  program's own instructions), CPU time in system mode (the kernel working for it: page
  faults, memory mapping) and minor page faults (``getrusage``; Linux). A fresh tensor larger
  than glibc's ``mmap`` threshold is new memory from the kernel, and the first write to each
  4 KiB page of it is a page fault, paid in system time; ``best_ms`` and
  ``time.thread_time`` count that time together with the arithmetic, this split does not.
* :data:`KEEP_HEAP_ENV`: the environment variables that tell glibc's allocator to keep freed
  memory in the process, so that a repeated allocation is not a fresh mapping again (they
  act at the start of a process: set them for a child process).
* :func:`slope`: the least-squares exponent ``p`` of ``y ~ c * x**p``.
"""

from __future__ import annotations

import resource
import statistics
import time
import weakref
from collections.abc import Callable, Iterator
from typing import NamedTuple

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attention_src.validation import check_positive_int

__all__ = ["TensorMemory", "peak_bytes", "matmul_macs", "best_ms", "CpuCost", "measure_call",
           "median_cost", "KEEP_HEAP_ENV", "slope"]

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


#: glibc's malloc, told by these variables (read when a process starts) to serve every
#: allocation below 4 GiB from its heap and never to return freed heap memory to the
#: operating system: after a first call, a repeated call reuses the pages it touched before
#: instead of mapping (and faulting in) new ones. Pass them to a child process, e.g.
#: ``subprocess.run(cmd, env={**os.environ, **KEEP_HEAP_ENV})``; other C libraries ignore them.
KEEP_HEAP_ENV = {"MALLOC_MMAP_THRESHOLD_": str(2**32), "MALLOC_TRIM_THRESHOLD_": str(2**36)}

_SCOPES = {"thread": getattr(resource, "RUSAGE_THREAD", None), "process": resource.RUSAGE_SELF}


class CpuCost(NamedTuple):
    """What one call cost (or the median of several calls, field by field).

    Attributes:
        wall_ms: wall-clock time (``time.perf_counter``), which counts the time other
            processes held the CPU, and the waits of all threads.
        cpu_ms: CPU time, from the precise clock (``time.thread_time`` or
            ``time.process_time``): user and system time together.
        user_ms: CPU time in user mode: the instructions of the program and its libraries.
        system_ms: CPU time in system mode: the kernel at work for the call, here mostly
            handling page faults (zero-filling the pages of fresh memory).
        minor_faults: page faults served without reading from disk, each a 4 KiB page
            touched for the first time since it was mapped.

    The kernel splits CPU time into user and system time by sampling at each clock tick
    (every few milliseconds), so ``user_ms + system_ms`` matches ``cpu_ms`` only for calls
    much longer than a tick, and a call shorter than one may show 0 for both.
    """

    wall_ms: float
    cpu_ms: float
    user_ms: float
    system_ms: float
    minor_faults: float


_CLOCKS = {"thread": "thread_time", "process": "process_time"}


def _check_scope(scope: object) -> int:
    if scope not in _SCOPES:
        raise ValueError(f"scope must be 'thread' or 'process', got {scope!r}")
    who = _SCOPES[scope]
    if who is None:  # pragma: no cover - only where the OS lacks per-thread accounting
        raise ValueError("scope='thread' needs RUSAGE_THREAD (Linux); use scope='process'")
    return who


def measure_call(fn: Callable, *, scope: str = "thread") -> tuple[object, CpuCost]:
    """Call ``fn()`` once; return its result and a :class:`CpuCost` of the call.

    ``scope="thread"`` counts the CPU time and faults of the calling thread only (with one
    PyTorch thread, ``torch.set_num_threads(1)``, every operator runs in it);
    ``scope="process"`` those of all the threads of the process (with several intra-op
    threads, their CPU times add up, so ``cpu_ms`` may exceed ``wall_ms``). Autograd is
    left as the caller set it. See :class:`CpuCost` for what each field measures.
    """
    _check_callable(fn)
    who = _check_scope(scope)
    clock = getattr(time, _CLOCKS[scope])  # looked up at each call: a test may replace time
    before, cpu, start = resource.getrusage(who), clock(), time.perf_counter()
    out = fn()
    wall, cpu, after = time.perf_counter() - start, clock() - cpu, resource.getrusage(who)
    return out, CpuCost(1e3 * wall, 1e3 * cpu, 1e3 * (after.ru_utime - before.ru_utime),
                        1e3 * (after.ru_stime - before.ru_stime),
                        after.ru_minflt - before.ru_minflt)


def median_cost(fn: Callable, repeats: int = 5, *, scope: str = "thread") -> CpuCost:
    """The median :class:`CpuCost` of ``repeats`` calls of ``fn()``, field by field, after
    one warm-up call; without autograd. See :func:`measure_call` for ``scope``."""
    _check_callable(fn)
    check_positive_int("repeats", repeats)
    _check_scope(scope)
    with torch.no_grad():
        fn()  # warm-up: first-call allocations and one-time setup are not measured
        costs = []
        for _ in range(repeats):
            out, cost = measure_call(fn, scope=scope)
            del out  # freed before the next call, as a caller that drops it would
            costs.append(cost)
    return CpuCost(*(statistics.median(field) for field in zip(*costs, strict=True)))


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

