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
  with one thread, ``torch.set_num_threads(1)``, every operator runs in this thread). For a
  call on a CUDA device (``device="cuda"``) it is the GPU's time between two CUDA events
  around the call instead: a GPU kernel runs after its launch returns, so the CPU's time
  would measure the launch, not the work.
* :class:`CpuCost`, :func:`measure_call` and :func:`median_cost`: what a call costs, split
  as the operating system accounts for it: wall-clock time, CPU time in user mode (the
  program's own instructions), CPU time in system mode (the kernel working for it: page
  faults, memory mapping) and minor page faults (``getrusage``; Linux). A fresh tensor larger
  than glibc's ``mmap`` threshold is new memory from the kernel, and the first write to each
  4 KiB page of it is a page fault, paid in system time; ``best_ms`` and
  ``time.thread_time`` count that time together with the arithmetic, this split does not.
* :func:`mean_cost`: the mean :class:`CpuCost` per call over as many calls as fill a given
  CPU time, long enough for the user/system split, which the kernel makes per clock tick, to
  mean something for calls shorter than a tick (chapter 7).
* :func:`best_ms_interleaved`: the best CPU time of each of several calls, timed in turn over
  a few rounds, so that a busy moment of the machine spoils one round, not one call.
* :data:`KEEP_HEAP_ENV`: the environment variables that tell glibc's allocator to keep freed
  memory in the process, so that a repeated allocation is not a fresh mapping again (they
  act at the start of a process: set them for a child process).
* :func:`set_heap`: the same choice made inside a running process with glibc's ``mallopt``,
  in one of two states, every freed block kept or every large one handed back;
  :func:`heap_control_missing` says why it cannot work where it cannot (not Linux with glibc).
* :func:`slope`: the least-squares exponent ``p`` of ``y ~ c * x**p``.
"""

from __future__ import annotations

import ctypes
import math
import numbers
import os
import platform
import resource
import statistics
import sys
import time
import weakref
from collections.abc import Callable, Hashable, Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attention_src.validation import check_positive_int

__all__ = ["TensorMemory", "peak_bytes", "matmul_macs", "cuda_to_sync", "best_ms",
           "best_ms_interleaved",
           "CpuCost", "measure_call", "median_cost", "mean_cost", "KEEP_HEAP_ENV", "HEAP_STATES",
           "heap_control_missing", "set_heap", "HUGE_PAGE_MODE_FILE",
           "huge_page_mode", "slope"]

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


def cuda_to_sync(device: object) -> torch.device | None:
    """The CUDA device a timing must wait for, or ``None`` for a timing on the CPU.

    ``device``: ``None`` or a CPU device (the CPU's clocks are right), or a CUDA device (a
    ``torch.device`` or its name, e.g. ``"cuda"``), which must be available.
    """
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(
            f"device must be None, a str or a torch.device, got {type(device).__name__}")
    try:
        dev = torch.device(device)
    except RuntimeError as err:  # torch's message for a name it does not know
        raise ValueError(f"device {device!r} is not a device name: {err}") from None
    if dev.type == "cpu":
        return None
    if dev.type != "cuda":
        raise ValueError(f"timing supports CPU and CUDA devices, got device {dev}")
    if not torch.cuda.is_available():
        raise ValueError(f"device {dev} was asked for, but CUDA is not available here")
    return dev


def best_ms(fn: Callable, repeats: int = 3, *, device: object = None) -> float:
    """Best time of ``repeats`` calls of ``fn()``, in ms, after one warm-up call; no autograd.

    On the CPU (``device=None`` or ``"cpu"``): the CPU time of the calling thread
    (``time.thread_time``). On a CUDA device: the GPU's time between two CUDA events recorded
    before and after the call, once all queued work has finished; the CPU's time would only
    count the kernels' launches, since a kernel runs after its launch returns. The minimum,
    not the mean: load from other processes only ever adds time.
    """
    _check_callable(fn)
    check_positive_int("repeats", repeats)
    cuda = cuda_to_sync(device)
    times = []
    with torch.no_grad():
        fn()  # warm-up
        for _ in range(repeats):
            if cuda is None:
                start = time.thread_time()
                fn()
                times.append(time.thread_time() - start)
                continue
            begin, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            torch.cuda.synchronize(cuda)  # earlier work is not this call's
            begin.record()
            fn()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / 1e3)  # elapsed_time is in ms
    return 1e3 * min(times)


#: glibc's malloc, told by these variables (read when a process starts) never to serve an
#: allocation with a memory mapping of its own (``MALLOC_MMAP_MAX_=0``: every block comes
#: from the heap) and to return freed heap memory to the operating system only above 64 GiB
#: of free memory at the top of the heap: after a first call, a repeated call reuses the
#: pages it touched before instead of mapping (and faulting in) new ones. Both are
#: documented values (``mallopt(3)``: ``M_MMAP_MAX`` 0 "disables the use of mmap";
#: ``M_TRIM_THRESHOLD`` has no upper limit, unlike ``M_MMAP_THRESHOLD``, whose maximum is
#: 32 MiB on 64-bit systems and which older glibc refuses above it). Pass them to a child
#: process, e.g. ``subprocess.run(cmd, env={**os.environ, **KEEP_HEAP_ENV})``; other C
#: libraries ignore them.
KEEP_HEAP_ENV = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(2**36)}

# mallopt's parameter numbers, from glibc's malloc.h
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_MMAP_MAX = -1, -3, -4

#: The two states :func:`set_heap` sets, as ``(mallopt parameter, value)`` pairs, all values
#: within the limits ``mallopt(3)`` documents. ``"kept"``: no allocation is a mapping of its
#: own (``M_MMAP_MAX`` 0) and the heap is never trimmed (``M_TRIM_THRESHOLD`` -1), so freed
#: memory stays in the process. ``"returned"``: every block above 128 KiB is a mapping of its
#: own (``M_MMAP_THRESHOLD``, glibc's starting value, fixed) and goes back to the operating
#: system when freed, and the top of the heap is trimmed above 128 KiB (``M_TRIM_THRESHOLD``,
#: its default); ``M_MMAP_MAX`` is back at its default, 65536.
HEAP_STATES = {
    "kept": ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, -1)),
    "returned": ((_M_MMAP_MAX, 65536), (_M_MMAP_THRESHOLD, 128 * 1024),
                 (_M_TRIM_THRESHOLD, 128 * 1024)),
}


def heap_control_missing() -> str | None:
    """Why :func:`set_heap` cannot work on this system, as a sentence; ``None`` where it can.

    It needs Linux (where ``getrusage`` also counts per thread, ``RUSAGE_THREAD``) and the GNU
    C library, whose ``mallopt`` it calls; macOS, Windows or a Linux with musl lack them.
    """
    if not sys.platform.startswith("linux"):
        return f"the allocator settings need Linux with glibc; this system is {sys.platform}"
    libc, _ = platform.libc_ver()
    if libc != "glibc":
        return f"the allocator settings need glibc; this Linux has {libc or 'another C library'}"
    return None


#: where Linux says how it gives out transparent huge pages, e.g. ``always [madvise] never``
HUGE_PAGE_MODE_FILE = "/sys/kernel/mm/transparent_hugepage/enabled"


def huge_page_mode(path: str | os.PathLike = HUGE_PAGE_MODE_FILE) -> str:
    """The kernel's transparent-huge-page mode: the bracketed word of ``path``.

    ``"always"`` (any large allocation may get 2 MiB pages, so one page fault provides 512
    times the memory of a 4 KiB one), ``"madvise"`` (only memory a program asks huge pages
    for), ``"never"``; ``"unknown"`` where the file is absent or unreadable (not Linux) or
    names no mode. Page-fault counts are comparable only between runs with the same mode.

    Raises ``TypeError`` when ``path`` is not a string or path.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    try:
        text = Path(path).read_text()
    except OSError:
        return "unknown"
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else "unknown"


def set_heap(state: str) -> None:
    """Fix glibc's allocator in one state of :data:`HEAP_STATES`: ``"kept"`` or ``"returned"``.

    By default glibc hands a freed block larger than its *mmap threshold* back to the
    operating system, and raises that threshold (from 128 KiB up to 32 MiB) as the process
    frees large blocks, so whether a repeated call gets fresh pages, and pays a page fault
    for each, depends on what the process did before. After ``set_heap`` it does not: in
    ``"kept"`` a repeated call reuses the memory of the last one, in ``"returned"`` every
    block above 128 KiB is fresh memory on every call. The setting holds for the whole
    process, every thread, until the next ``set_heap``. It cannot be undone: once any of
    these parameters is set, glibc never goes back to moving its threshold, and the memory
    kept in ``"kept"`` stays with the process until it is trimmed in ``"returned"``. Call it
    in a process that measures in the states it sets from then on (a notebook, a child
    process), not in one whose other measurements expect glibc's default.

    Raises ``ValueError`` for another state, ``RuntimeError`` where
    :func:`heap_control_missing` gives a reason or ``mallopt`` refuses a value.
    """
    if not isinstance(state, str) or state not in HEAP_STATES:
        raise ValueError(f"state must be one of {tuple(HEAP_STATES)}, got {state!r}")
    why_not = heap_control_missing()
    if why_not is not None:
        raise RuntimeError(why_not)
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    for param, value in HEAP_STATES[state]:
        if mallopt(param, value) != 1:  # mallopt returns 1 on success, 0 on error
            raise RuntimeError(f"mallopt({param}, {value}) was refused")

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


def measure_call(fn: Callable, *, scope: str = "thread",
                 device: object = None) -> tuple[object, CpuCost]:
    """Call ``fn()`` once; return its result and a :class:`CpuCost` of the call.

    ``scope="thread"`` counts the CPU time and faults of the calling thread only (with one
    PyTorch thread, ``torch.set_num_threads(1)``, every operator runs in it);
    ``scope="process"`` those of all the threads of the process (with several intra-op
    threads, their CPU times add up, so ``cpu_ms`` may exceed ``wall_ms``). Autograd is
    left as the caller set it. See :class:`CpuCost` for what each field measures. With a
    CUDA ``device``, the call's GPU work is waited for before and after it
    (``torch.cuda.synchronize``), so ``wall_ms`` includes it; the CPU fields then count the
    launches and the waiting.
    """
    _check_callable(fn)
    who = _check_scope(scope)
    cuda = cuda_to_sync(device)
    clock = getattr(time, _CLOCKS[scope])  # looked up at each call: a test may replace time
    if cuda is not None:
        torch.cuda.synchronize(cuda)
    before, cpu, start = resource.getrusage(who), clock(), time.perf_counter()
    out = fn()
    if cuda is not None:
        torch.cuda.synchronize(cuda)
    wall, cpu, after = time.perf_counter() - start, clock() - cpu, resource.getrusage(who)
    return out, CpuCost(1e3 * wall, 1e3 * cpu, 1e3 * (after.ru_utime - before.ru_utime),
                        1e3 * (after.ru_stime - before.ru_stime),
                        after.ru_minflt - before.ru_minflt)


def median_cost(fn: Callable, repeats: int = 5, *, scope: str = "thread",
                device: object = None) -> CpuCost:
    """The median :class:`CpuCost` of ``repeats`` calls of ``fn()``, field by field, after
    one warm-up call; without autograd. See :func:`measure_call` for ``scope`` and
    ``device``."""
    _check_callable(fn)
    check_positive_int("repeats", repeats)
    _check_scope(scope)
    cuda_to_sync(device)
    with torch.no_grad():
        fn()  # warm-up: first-call allocations and one-time setup are not measured
        costs = []
        for _ in range(repeats):
            out, cost = measure_call(fn, scope=scope, device=device)
            del out  # freed before the next call, as a caller that drops it would
            costs.append(cost)
    return CpuCost(*(statistics.median(field) for field in zip(*costs, strict=True)))


def mean_cost(fn: Callable, min_ms: float = 100.0, *, warm_up: int = 3,
              scope: str = "thread") -> CpuCost:
    """The mean :class:`CpuCost` per call of ``fn()`` over as many calls as take ``min_ms``
    of CPU time (at least one call), after ``warm_up`` calls; without autograd.

    The kernel splits CPU time into user and system time once per clock tick (every few
    milliseconds), so the split of one short call is mostly 0 or a whole tick; summed over
    ``min_ms`` of calls and divided by their number it is a mean per call. Each call's result
    is dropped before the next call. See :func:`measure_call` for ``scope``.
    """
    _check_callable(fn)
    if isinstance(min_ms, bool) or not isinstance(min_ms, numbers.Real):
        raise TypeError(f"min_ms must be a number of milliseconds, got {type(min_ms).__name__}")
    if not (math.isfinite(min_ms) and min_ms > 0):
        raise ValueError(f"min_ms must be positive and finite, got {min_ms}")
    if isinstance(warm_up, bool) or not isinstance(warm_up, int):
        raise TypeError(f"warm_up must be an int, got {type(warm_up).__name__}")
    if warm_up < 0:
        raise ValueError(f"warm_up must be at least 0, got {warm_up}")
    _check_scope(scope)
    clock = getattr(time, _CLOCKS[scope])

    def calls_until_min_ms() -> int:
        calls, start = 0, clock()
        while True:
            fn()  # the result is dropped here, before the next call
            calls += 1
            if clock() - start >= min_ms / 1e3:
                return calls

    with torch.no_grad():
        for _ in range(warm_up):  # first-call allocations; the allocator settles
            fn()
        calls, total = measure_call(calls_until_min_ms, scope=scope)
    return CpuCost(*(field / calls for field in total))


def best_ms_interleaved(calls: Mapping[Hashable, Callable], rounds: int = 5, *,
                        device: object = None) -> dict[Hashable, float]:
    """Best CPU time (ms) of each call in ``calls``, ``{key: fn}``, over ``rounds`` rounds.

    Each round times every call once with ``best_ms(fn, repeats=1)`` (a warm-up call, then one
    timed call), in the order of ``calls``; a call's result is its fastest round. Taking turns
    means that a moment when another process holds the CPU spoils one round of every call,
    not every round of one call. Returns ``{key: ms}`` in the order of ``calls``. ``device``
    as in :func:`best_ms` (a CUDA device: GPU time between CUDA events).
    """
    if not isinstance(calls, Mapping):
        raise TypeError(f"calls must be a mapping {{key: function}}, got {type(calls).__name__}")
    for key, fn in calls.items():
        if not callable(fn):
            raise TypeError(f"calls[{key!r}] must be callable, got {type(fn).__name__}")
    check_positive_int("rounds", rounds)
    cuda_to_sync(device)
    best = {key: math.inf for key in calls}
    for _ in range(rounds):
        for key, fn in calls.items():
            best[key] = min(best[key], best_ms(fn, repeats=1, device=device))
    return best


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

