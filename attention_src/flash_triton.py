"""FlashAttention written in Triton: FlashAttention-2's forward kernel and a backward pass.

Chapter 9 runs FlashAttention's loop from Python, one tile at a time; here the same loop is a
GPU kernel. Triton (Tillet et al., 2019, introduced its ideas; today's interface is the
``@triton.jit`` Python one) writes a kernel as a Python function that one
*program* runs per block of the output: the program loads tiles of ``Q``, ``K`` and ``V``
from the GPU's main memory (HBM) into its registers and on-chip memory, computes on whole
tiles, and writes back only its block of the output and one number per query.

* :func:`flash_attention`: ``softmax(Q K^T * scale) V`` for ``(B, h, L, d)`` inputs, with the
  causal mask or without, differentiable (a ``torch.autograd.Function``).
* The forward kernel, one program per (block of queries ``I``, (batch, head) pair): a loop
  over the blocks of keys ``J`` with the online softmax of chapter 9 (the running maximum
  ``m``, the running sum ``s``, the un-normalised output ``U``), then ``O_I = U / s`` and the
  log-sum-exp ``l = m + log s`` of every query, saved for the backward pass. With the causal
  mask, the key blocks entirely above the diagonal are skipped and the diagonal block masked.
  Beside it, ``_forward_kernel_split`` (a setting's ``forward="split"``) visits the same tiles
  in the same order but masks only the blocks that need it, and under the causal mask starts
  the programs with the most key blocks first; under the interpreter its results are the
  plain kernel's bit for bit.
* The backward pass, FlashAttention-2's formulas (Dao, 2023) in three kernels of this book's
  own: ``D = rowsum(dO * O)`` per query; one program per block of keys accumulating ``dK_J``
  and ``dV_J`` over the query blocks; one program per block of queries accumulating ``dQ_I``
  over the key blocks. FlashAttention-2 itself runs one main kernel per block of keys and adds
  each block's share of ``dQ`` into memory with atomic additions; the separate ``dQ`` kernel
  needs no atomics, at the price of recomputing ``S``, ``P`` and ``dP = dO V^T`` a second
  time (seven tile products per tile instead of five). Both kernels recompute each tile of
  weights ``P = exp(S - l)`` from ``Q``, ``K`` and the saved ``l`` instead of storing the
  ``(L_q, L_k)`` weights. Beside the two, ``_backward_dkdv_kernel_split`` and
  ``_backward_dq_kernel_split`` (a setting's ``backward="split"``) split their loops as the
  split forward kernel does; under the interpreter their gradients are the plain kernels'
  bit for bit.

Every tile is padded: a head dimension ``d`` (16 to 128) is read into a tile of the next power
of two (Triton's tiles have power-of-two sizes) and the last block of queries or keys may be
ragged; the loads mask what lies outside the tensors and the stores write only inside them.
Sums and products accumulate in float32 whatever the input's dtype (float16, bfloat16 or
float32), and the scores are kept in base 2: ``exp(x) = exp2(x * log2(e))``, so ``log2(e)``
joins the scale and the kernels call ``exp2``, which GPUs compute natively.

**On the CPU.** Triton's interpreter (``TRITON_INTERPRET=1``) runs the same kernels on CPU
tensors with NumPy, one program after another: slow, exact enough to test against PyTorch,
and how the book runs these kernels on a machine without a GPU. The variable is read when a
kernel is defined (Triton's own, such as ``tl.zeros``, when Triton is imported), so this
module sets ``TRITON_INTERPRET=1`` itself, *before* importing Triton, when PyTorch sees no
CUDA device and the variable is unset. PyTorch may have imported Triton already
(``torch.utils.flop_counter`` does): then an ``ImportError`` says to set the variable first,
before anything else is imported. :data:`INTERPRETED` says
which way the kernels run: interpreted, they take CPU tensors; compiled, CUDA tensors only.
NumPy has no bfloat16, so under the interpreter bfloat16 inputs are computed from float32
copies of their (exactly representable) values and the results rounded to bfloat16; on a GPU
the kernels read bfloat16 and multiply bfloat16 tiles.

This module is the only one of the package that imports Triton (``pip install triton``);
``import attention_src`` works without it.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from typing import NamedTuple

import torch

from attention_src.validation import check_same_device, check_same_dtype, check_tensor

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if sys.modules.get("triton") is not None:  # its own jit functions (tl.zeros...) compiled
        raise ImportError(
            "no CUDA device, and Triton was imported before TRITON_INTERPRET=1 was set, so "
            "its language functions are not interpreted and these kernels cannot run: set "
            "TRITON_INTERPRET=1 before importing triton (or anything that imports it)")
    os.environ["TRITON_INTERPRET"] = "1"  # read by triton.jit below: run on the CPU

try:
    import triton
    import triton.language as tl
    from triton.runtime import OutOfResources
except ImportError as err:
    raise ImportError(
        "attention_src.flash_triton needs Triton, which is not installed: "
        "pip install triton (the rest of attention_src works without it). Triton is "
        "published for Linux only: on macOS or Windows run this chapter on Colab, Binder "
        "or WSL"
    ) from err

__all__ = ["flash_attention", "flash_attention_lse", "FlashConfig", "default_config",
           "INTERPRETED", "HEAD_DIMS", "DTYPES", "GPU_CONFIGS", "GPU_BACKWARD_CONFIGS",
           "INTERPRETER_CONFIG", "GPU_FLOAT32_CONFIG", "SMALLER_CONFIGS"]

#: True when the kernels run in Triton's interpreter (CPU tensors), False when they are
#: compiled for the GPU (CUDA tensors).
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") == "1"

#: The head dimensions the kernels accept (inclusive); the tile is the next power of two.
HEAD_DIMS = (16, 128)

#: The input dtypes the kernels accept.
DTYPES = (torch.float16, torch.bfloat16, torch.float32)

#: log2(e): exp(x) = exp2(x * LOG2_E). A ``tl.constexpr``, the only kind of global a kernel
#: may read.
LOG2_E = tl.constexpr(1.4426950408889634)


class FlashConfig(NamedTuple):
    """How the kernels are launched: the tile sizes and, on a GPU, Triton's launch options.

    ``block_m`` queries by ``block_n`` keys per tile (powers of two, at least 16, the
    smallest tile ``tl.dot`` multiplies); ``num_warps`` groups of 32 threads run each program;
    ``num_stages`` is how many tiles of the key loop Triton prefetches ahead (software
    pipelining). The interpreter ignores the last two.
    """

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 2
    #: the forward kernel: ``"plain"`` (:func:`_forward_kernel`, the chapter's) or
    #: ``"split"`` (:func:`_forward_kernel_split`: masks only the blocks that need it, and
    #: under the causal mask starts the longest programs first); the backward ignores it
    forward: str = "plain"
    #: the backward kernels: ``"plain"`` (:func:`_backward_dkdv_kernel` and
    #: :func:`_backward_dq_kernel`, the chapter's) or ``"split"`` (their ``_split`` versions,
    #: masking only the blocks that need it); the forward ignores it
    backward: str = "plain"


#: The forward kernels a :class:`FlashConfig` may name.
FORWARD_KERNELS = ("plain", "split")

#: The backward kernels a :class:`FlashConfig` may name.
BACKWARD_KERNELS = ("plain", "split")

#: The forward kernel's launch settings on a GPU by head-dimension tile (16, 32, 64, 128).
#: The entries for 64 and 128 are the measured autotune's (``benchmarks/bench_gpu.py
#: --autotune`` on an NVIDIA H200, torch 2.11, Triton 3.6, 2026-11-28: the least time summed
#: over causal and not at L 8192, float16, batch 4, 16 heads; the comments give that sum);
#: 16 and 32 keep readable defaults, not measured. ``--configs`` applies an autotune's
#: settings to a run; ``block_m``/``block_n`` given to :func:`flash_attention` override them.
GPU_CONFIGS = {
    16: FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=2),
    32: FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=2),
    64: FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=3,
                    forward="split"),  # 4.129 ms
    128: FlashConfig(block_m=128, block_n=128, num_warps=8, num_stages=3,
                     forward="split"),  # 6.994 ms
}

#: The backward kernels' launch settings, tuned apart from the forward's: the backward pass
#: holds more tiles at once (Q, K, V, dO, dK, dV), so its best tiles may be smaller. Measured
#: as :data:`GPU_CONFIGS` is (the backward pass alone, after a forward pass with that table's
#: setting), for 64 and 128; 16 and 32 keep readable defaults.
GPU_BACKWARD_CONFIGS = {
    16: FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=2),
    32: FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=2),
    64: FlashConfig(block_m=128, block_n=64, num_warps=4, num_stages=2,
                    backward="split"),  # 13.020 ms
    128: FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=2,
                     backward="split"),  # 22.764 ms
}

#: The launch settings of float32 inputs on a GPU, whatever the head dimension: the tables
#: above were tuned in float16, and float32 tiles take twice the shared memory (a 128 by 128
#: tile of K or V, 64 KiB, prefetched three stages deep, does not fit in an H100's or H200's
#: 227 KiB); these moderate tiles, the tables' settings before the autotune, passed the
#: native tests on the H200.
GPU_FLOAT32_CONFIG = FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=2)

#: When a GPU cannot give a program the shared memory that a table's setting needs, Triton
#: refuses the launch (``OutOfResources``), and :func:`flash_attention` retries it with the
#: first of these that fits, with no larger tiles and no more stages. The tables were tuned on an
#: H200, whose programs may use up to 227 KiB; an A100's may use 163 KiB, and many smaller
#: GPUs' (a T4, GeForce cards) 64 to 99 KiB. Tiles of fewer than 64 queries get one stage, as
#: for tiles a caller chooses (:func:`_checked_backward_tiles`).
SMALLER_CONFIGS = (
    FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=2),
    FlashConfig(block_m=64, block_n=32, num_warps=4, num_stages=1),
    FlashConfig(block_m=32, block_n=32, num_warps=4, num_stages=1),
    FlashConfig(block_m=16, block_n=16, num_warps=4, num_stages=1),
)

#: Under the interpreter every program runs in turn on one CPU core, and NumPy's cost per
#: operation dominates: small tiles keep the tests fast and still give several blocks.
INTERPRETER_CONFIG = FlashConfig(block_m=16, block_n=16)


def default_config(head_dim: int, backward: bool = False,
                   dtype: torch.dtype = torch.float16) -> FlashConfig:
    """The launch settings for a head dimension ``head_dim`` (16 to 128) and inputs of
    ``dtype``: the interpreter's small tiles; on a GPU, :data:`GPU_FLOAT32_CONFIG` for
    float32, else the table's entry for ``head_dim``'s power-of-two tile, from
    :data:`GPU_BACKWARD_CONFIGS` for the backward kernels and :data:`GPU_CONFIGS` for the
    forward one."""
    if INTERPRETED:
        return INTERPRETER_CONFIG
    if dtype == torch.float32:
        return GPU_FLOAT32_CONFIG
    table = GPU_BACKWARD_CONFIGS if backward else GPU_CONFIGS
    return table[triton.next_power_of_2(head_dim)]


# ------------------------------------------------------------------------------ kernels
# Every tensor is contiguous, with its (batch, head) pairs flattened into one axis ``bh``:
# Q and O are (BH, L_q, d), K and V are (BH, L_k, d), the log-sum-exp LSE and D are (BH, L_q),
# LSE in base 2 (l * log2(e)), the units of the kernels' scores.
# Element (bh, i, c) of Q sits at Q + bh * L_q * d + i * d + c. Indices: i a query, j a key,
# c a feature; I and J name blocks of queries and keys.


@triton.jit
def _forward_kernel(
    Q, K, V, O, LSE,  # pointers to the first element of each tensor
    L_q, L_k, d,  # lengths and head dimension (runtime integers)
    scale,  # the scale of the scores, usually 1 / sqrt(d)
    CAUSAL: tl.constexpr,  # hide key j from query i when j > i
    PRECISION: tl.constexpr,  # how tl.dot multiplies float32 tiles: "ieee" or "tf32"
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,  # queries, keys per tile
    BLOCK_D: tl.constexpr,  # d rounded up to a power of two
):
    """One program: the output rows ``O_I`` and log-sum-exps ``l_I`` of one block ``I`` of
    ``BLOCK_M`` queries of one (batch, head) pair."""
    # which block of queries, which (batch, head) pair (int64: bh * L * d may pass 2**31)
    block_i = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * L_q * d  # this pair's (L_q, d) queries
    K += bh * L_k * d
    V += bh * L_k * d
    O += bh * L_q * d
    LSE += bh * L_q

    # the indices of this program's queries i, of the features c, of a block's keys
    rows = block_i * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    cols = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,), key offsets inside a block
    row_ok = rows < L_q  # the last block of queries may be ragged
    col_ok = cols < d  # the padding features of the tile

    # Q_I, loaded once; padding rows and features read 0, which changes no dot product
    q = tl.load(Q + rows[:, None] * d + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)
    scale2 = scale * LOG2_E  # scores in base 2: exp(S) = exp2(S * log2(e))

    # the online softmax's state per query: m (running maximum, base 2), s (running sum of
    # exp2(S - m)), U (running sum of exp2(S - m) V, un-normalised output), all float32
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_M], tl.float32)
    u = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # causal: the key blocks after this block's last query (i <= (block_i + 1) * BLOCK_M - 1)
    # are entirely above the diagonal, hidden from every query here; the loop stops before
    if CAUSAL:
        k_end = tl.minimum(L_k, (block_i + 1) * BLOCK_M)
    else:
        k_end = L_k
    for start_n in range(0, k_end, BLOCK_N):
        # K_J and V_J, (BLOCK_N, BLOCK_D); keys past L_k (a ragged last block) read 0
        keys = start_n + offs_n  # (BLOCK_N,), the indices j of this block's keys
        key_ok = keys < L_k
        kv_mask = key_ok[:, None] & col_ok[None, :]
        k = tl.load(K + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)

        # S_IJ = Q_I K_J^T * scale, in base 2: (BLOCK_M, BLOCK_D) @ (BLOCK_D, BLOCK_N)
        # -> (BLOCK_M, BLOCK_N), written (M, N) below; tl.dot sums in float32
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale2  # (M, N) f32
        # hide the keys past L_k and, causal, the keys after each query (diagonal block)
        visible = key_ok[None, :]  # (1, BLOCK_N)
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])  # (BLOCK_M, BLOCK_N)
        scores = tl.where(visible, scores, float("-inf"))

        # the online softmax (chapter 9): m' = max(m, rowmax S), c = exp(m - m'),
        # P = exp(S - m'), s' = c s + rowsum P, U' = c U + P V_J. Key 0 is visible to every
        # query, so m is finite from the first block on and c = exp2(-inf) = 0 there.
        m_new = tl.maximum(m, tl.max(scores, axis=1))  # (BLOCK_M,)
        c = tl.exp2(m - m_new)  # (BLOCK_M,), the rescale factor, <= 1
        p = tl.exp2(scores - m_new[:, None])  # (BLOCK_M, BLOCK_N), 0 where hidden
        s = c * s + tl.sum(p, axis=1)
        # P in the inputs' dtype for the product (the tensor cores' input), float32 sums
        pv = tl.dot(p.to(v.dtype), v, input_precision=PRECISION)  # (BLOCK_M, BLOCK_D)
        u = c[:, None] * u + pv
        m = m_new

    # O_I = U / s, and the log-sum-exp of every query, what the backward pass recomputes
    # P = exp(S - l) from: l = m + log s, here in base 2 like m and the scores (l * log2(e))
    o = u / s[:, None]  # (BLOCK_M, BLOCK_D)
    tl.store(O + rows[:, None] * d + cols[None, :], o.to(O.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(LSE + rows, m + tl.log2(s), mask=row_ok)


@triton.jit
def _attend_key_block(
    q, K, V, start_n, offs_n, rows, cols, col_ok, m, s, u, L_k, d, scale2,
    MASK_KEYS: tl.constexpr,  # keys past L_k or past a query (ragged or diagonal block)
    CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, PRECISION: tl.constexpr,
):
    """:func:`_forward_kernel`'s loop body for one block of keys at ``start_n``, masking
    only what ``MASK_KEYS`` and ``EVEN_D`` say may need it. Returns the new ``m, s, u``."""
    keys = start_n + offs_n  # (BLOCK_N,)
    if MASK_KEYS:
        key_ok = keys < L_k
        kv_mask = key_ok[:, None] & col_ok[None, :]
        k = tl.load(K + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
    elif EVEN_D:  # a whole block, every feature real: loads without a mask
        k = tl.load(K + keys[:, None] * d + cols[None, :])
        v = tl.load(V + keys[:, None] * d + cols[None, :])
    else:
        k = tl.load(K + keys[:, None] * d + cols[None, :], mask=col_ok[None, :], other=0.0)
        v = tl.load(V + keys[:, None] * d + cols[None, :], mask=col_ok[None, :], other=0.0)
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale2  # (M, N) f32
    if MASK_KEYS:
        visible = key_ok[None, :]  # (1, BLOCK_N)
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])  # (BLOCK_M, BLOCK_N)
        scores = tl.where(visible, scores, float("-inf"))
    m_new = tl.maximum(m, tl.max(scores, axis=1))  # (BLOCK_M,)
    c = tl.exp2(m - m_new)
    p = tl.exp2(scores - m_new[:, None])
    s = c * s + tl.sum(p, axis=1)
    u = c[:, None] * u + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
    return m_new, s, u


@triton.jit
def _forward_kernel_split(
    Q, K, V, O, LSE, L_q, L_k, d, scale,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,  # d == BLOCK_D: no padding features
):
    """:func:`_forward_kernel` with its key loop split in two, the same tiles in the same
    order: the blocks every query of this program sees in full, without a mask, then the
    rest (the diagonal blocks under the causal mask, a ragged last block) with it. Causal,
    the programs take their query blocks from the last (the most key blocks) to the first,
    so that the longest ones start first."""
    if CAUSAL:
        block_i = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        block_i = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * L_q * d
    K += bh * L_k * d
    V += bh * L_k * d
    O += bh * L_q * d
    LSE += bh * L_q
    rows = block_i * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    cols = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    row_ok = rows < L_q
    col_ok = cols < d
    q = tl.load(Q + rows[:, None] * d + cols[None, :],
                mask=row_ok[:, None] & col_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)
    scale2 = scale * LOG2_E
    m = tl.full([BLOCK_M], float("-inf"), tl.float32)
    s = tl.zeros([BLOCK_M], tl.float32)
    u = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if CAUSAL:
        # whole key blocks ending at or before this block's first query, seen by all
        full_end = (block_i * BLOCK_M) // BLOCK_N * BLOCK_N
        k_end = tl.minimum(L_k, (block_i + 1) * BLOCK_M)
    else:
        full_end = (L_k // BLOCK_N) * BLOCK_N  # the whole key blocks
        k_end = L_k
    for start_n in range(0, full_end, BLOCK_N):
        m, s, u = _attend_key_block(q, K, V, start_n, offs_n, rows, cols, col_ok, m, s, u,
                                    L_k, d, scale2, False, CAUSAL, EVEN_D, PRECISION)
    for start_n in range(full_end, k_end, BLOCK_N):
        m, s, u = _attend_key_block(q, K, V, start_n, offs_n, rows, cols, col_ok, m, s, u,
                                    L_k, d, scale2, True, CAUSAL, EVEN_D, PRECISION)
    o = u / s[:, None]
    tl.store(O + rows[:, None] * d + cols[None, :], o.to(O.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])
    tl.store(LSE + rows, m + tl.log2(s), mask=row_ok)


@triton.jit
def _backward_delta_kernel(
    O, DO, DELTA,  # pointers: O and dO (BH, L_q, d), D (BH, L_q)
    L_q, d,
    BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One program: ``D_i = sum_c dO_ic O_ic`` for one block of ``BLOCK_M`` queries of one
    (batch, head) pair (the term of the softmax's Jacobian that ``dS = P (dP - D)`` needs)."""
    block_i = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    rows = block_i * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    cols = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    row_ok = rows < L_q
    mask = row_ok[:, None] & (cols < d)[None, :]
    offsets = bh * L_q * d + rows[:, None] * d + cols[None, :]  # (BLOCK_M, BLOCK_D)
    o = tl.load(O + offsets, mask=mask, other=0.0).to(tl.float32)
    do = tl.load(DO + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.store(DELTA + bh * L_q + rows, tl.sum(do * o, axis=1), mask=row_ok)  # (BLOCK_M,)


@triton.jit
def _backward_dkdv_kernel(
    Q, K, V, DO, LSE, DELTA,  # inputs: Q, dO (BH, L_q, d); K, V (BH, L_k, d); l, D (BH, L_q)
    DK, DV,  # outputs: dK, dV (BH, L_k, d)
    L_q, L_k, d, scale,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One program: ``dK_J`` and ``dV_J`` of one block ``J`` of ``BLOCK_N`` keys of one
    (batch, head) pair, summed over the blocks of queries that see them."""
    block_j = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * L_q * d
    DO += bh * L_q * d
    LSE += bh * L_q
    DELTA += bh * L_q
    K += bh * L_k * d
    V += bh * L_k * d
    DK += bh * L_k * d
    DV += bh * L_k * d

    keys = block_j * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,), the indices j
    cols = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    offs_m = tl.arange(0, BLOCK_M)  # (BLOCK_M,), query offsets inside a block
    key_ok = keys < L_k
    col_ok = cols < d
    kv_mask = key_ok[:, None] & col_ok[None, :]
    # K_J and V_J stay in registers for the whole loop: (BLOCK_N, BLOCK_D)
    k = tl.load(K + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
    scale2 = scale * LOG2_E  # scores in base 2, as in the forward kernel

    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)  # the sums dK_J, dV_J
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)

    # causal: query i sees key j only if j <= i, so the queries before this block's first
    # key, block_j * BLOCK_N, see none of its keys; the loop starts there
    if CAUSAL:
        start = block_j * BLOCK_N
    else:
        start = 0
    for start_m in range(start, L_q, BLOCK_M):
        rows = start_m + offs_m  # (BLOCK_M,), the indices i of this block's queries
        row_ok = rows < L_q
        q_mask = row_ok[:, None] & col_ok[None, :]
        q = tl.load(Q + rows[:, None] * d + cols[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + rows[:, None] * d + cols[None, :], mask=q_mask, other=0.0)
        lse = tl.load(LSE + rows, mask=row_ok, other=0.0)  # (BLOCK_M,), l_I in base 2
        delta = tl.load(DELTA + rows, mask=row_ok, other=0.0)  # (BLOCK_M,), D_I

        # recompute P_IJ = exp(S_IJ - l_I), in base 2, and zero it where hidden: the softmax
        # weights, equal to the forward pass's up to rounding (the forward never forms them
        # normalised; rows and keys outside the tensors read zeros from Q, dO, K and V and
        # would add nothing anyway; the mask says so explicitly)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale2  # (M, N)
        p = tl.exp2(scores - lse[:, None])  # (BLOCK_M, BLOCK_N)
        visible = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, p, 0.0)

        # dV_J += P_IJ^T dO_I: (BLOCK_N, BLOCK_M) @ (BLOCK_M, BLOCK_D)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)
        # dP = dO_I V_J^T, (BLOCK_M, BLOCK_N); dS = P (dP - D_I), the scores' gradient
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)
        ds = p * (dp - delta[:, None])
        # dK_J += dS^T Q_I (times the scale, once after the loop): (BLOCK_N, BLOCK_D)
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)

    tl.store(DK + keys[:, None] * d + cols[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=kv_mask)
    tl.store(DV + keys[:, None] * d + cols[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _backward_dq_kernel(
    Q, K, V, DO, LSE, DELTA,  # as in _backward_dkdv_kernel
    DQ,  # output: dQ (BH, L_q, d)
    L_q, L_k, d, scale,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """One program: ``dQ_I`` of one block ``I`` of ``BLOCK_M`` queries of one (batch, head)
    pair, summed over the blocks of keys it sees."""
    block_i = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * L_q * d
    DO += bh * L_q * d
    DQ += bh * L_q * d
    LSE += bh * L_q
    DELTA += bh * L_q
    K += bh * L_k * d
    V += bh * L_k * d

    rows = block_i * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,), the indices i
    cols = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    row_ok = rows < L_q
    col_ok = cols < d
    q_mask = row_ok[:, None] & col_ok[None, :]
    # Q_I, dO_I, l_I and D_I stay in registers for the whole loop
    q = tl.load(Q + rows[:, None] * d + cols[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + rows[:, None] * d + cols[None, :], mask=q_mask, other=0.0)
    lse = tl.load(LSE + rows, mask=row_ok, other=0.0)  # (BLOCK_M,), l_I in base 2
    delta = tl.load(DELTA + rows, mask=row_ok, other=0.0)  # (BLOCK_M,)
    scale2 = scale * LOG2_E

    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)  # the sum dQ_I

    if CAUSAL:  # the key blocks above the diagonal, as in the forward kernel
        k_end = tl.minimum(L_k, (block_i + 1) * BLOCK_M)
    else:
        k_end = L_k
    for start_n in range(0, k_end, BLOCK_N):
        keys = start_n + offs_n  # (BLOCK_N,)
        key_ok = keys < L_k
        kv_mask = key_ok[:, None] & col_ok[None, :]
        k = tl.load(K + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)

        # recompute P_IJ = exp(S_IJ - l_I), zero where hidden, as in _backward_dkdv_kernel
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale2  # (M, N)
        p = tl.exp2(scores - lse[:, None])
        visible = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, p, 0.0)

        # dS = P (dO_I V_J^T - D_I), dP recomputed as in _backward_dkdv_kernel (the price of
        # no atomic additions); dQ_I += dS K_J: (BLOCK_M, BLOCK_N) @ (BLOCK_N, BLOCK_D)
        dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)

    tl.store(DQ + rows[:, None] * d + cols[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=q_mask)


@triton.jit
def _dkdv_query_block(
    Q, DO, LSE, DELTA, start_m, offs_m, keys, cols, col_ok, k, v, dk, dv, L_q, L_k, d,
    scale2,
    MASK: tl.constexpr,  # a diagonal block (causal) or a ragged last block of queries
    CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, PRECISION: tl.constexpr,
):
    """:func:`_backward_dkdv_kernel`'s loop body for the block of queries at ``start_m``,
    masking only what ``MASK`` and ``EVEN_D`` say may need it. Returns the new ``dk, dv``.
    Unmasked, every row is a real query that sees every key of the block; a key past L_k
    (a ragged key block) then gets a weight, which may even overflow to inf, but it changes
    only its own row of ``dK`` and ``dV``, which is never stored."""
    rows = start_m + offs_m  # (BLOCK_M,)
    if MASK:
        row_ok = rows < L_q
        q_mask = row_ok[:, None] & col_ok[None, :]
        q = tl.load(Q + rows[:, None] * d + cols[None, :], mask=q_mask, other=0.0)
        do = tl.load(DO + rows[:, None] * d + cols[None, :], mask=q_mask, other=0.0)
        lse = tl.load(LSE + rows, mask=row_ok, other=0.0)
        delta = tl.load(DELTA + rows, mask=row_ok, other=0.0)
    else:
        if EVEN_D:  # every feature real: loads without a mask
            q = tl.load(Q + rows[:, None] * d + cols[None, :])
            do = tl.load(DO + rows[:, None] * d + cols[None, :])
        else:
            q = tl.load(Q + rows[:, None] * d + cols[None, :], mask=col_ok[None, :],
                        other=0.0)
            do = tl.load(DO + rows[:, None] * d + cols[None, :], mask=col_ok[None, :],
                         other=0.0)
        lse = tl.load(LSE + rows)
        delta = tl.load(DELTA + rows)
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale2  # (M, N)
    p = tl.exp2(scores - lse[:, None])  # (BLOCK_M, BLOCK_N)
    if MASK:
        visible = row_ok[:, None] & (keys < L_k)[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, p, 0.0)
    dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=PRECISION)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
    ds = p * (dp - delta[:, None])
    dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=PRECISION)
    return dk, dv


@triton.jit
def _backward_dkdv_kernel_split(
    Q, K, V, DO, LSE, DELTA, DK, DV, L_q, L_k, d, scale,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,  # d == BLOCK_D: no padding features
    DIAGONAL: tl.constexpr,  # max(BLOCK_M, BLOCK_N): the query rows whose blocks the
    # causal mask may cut, from this key block's first key on
):
    """:func:`_backward_dkdv_kernel` with its query loop split, the same tiles in the same
    order: under the causal mask the diagonal blocks with the mask, then the whole blocks
    below it without; then a ragged last block of queries with the mask. (Causal, the
    program of key block 0 has the most query blocks and already starts first.)"""
    block_j = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * L_q * d
    DO += bh * L_q * d
    LSE += bh * L_q
    DELTA += bh * L_q
    K += bh * L_k * d
    V += bh * L_k * d
    DK += bh * L_k * d
    DV += bh * L_k * d
    keys = block_j * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    cols = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    offs_m = tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    col_ok = cols < d
    kv_mask = (keys < L_k)[:, None] & col_ok[None, :]
    k = tl.load(K + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
    scale2 = scale * LOG2_E
    dk = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    if CAUSAL:
        # from this block's first key on; the query blocks that start within DIAGONAL rows
        # of it may hold a query before one of its keys
        start = block_j * BLOCK_N
        diagonal_end = tl.minimum(start + DIAGONAL, L_q)
    else:
        start = 0
        diagonal_end = 0
    # the whole query blocks after the diagonal ones, then at most one ragged block
    whole_end = diagonal_end + (L_q - diagonal_end) // BLOCK_M * BLOCK_M
    for start_m in range(start, diagonal_end, BLOCK_M):
        dk, dv = _dkdv_query_block(Q, DO, LSE, DELTA, start_m, offs_m, keys, cols, col_ok,
                                   k, v, dk, dv, L_q, L_k, d, scale2, True, CAUSAL, EVEN_D,
                                   PRECISION)
    for start_m in range(diagonal_end, whole_end, BLOCK_M):
        dk, dv = _dkdv_query_block(Q, DO, LSE, DELTA, start_m, offs_m, keys, cols, col_ok,
                                   k, v, dk, dv, L_q, L_k, d, scale2, False, CAUSAL, EVEN_D,
                                   PRECISION)
    for start_m in range(whole_end, L_q, BLOCK_M):
        dk, dv = _dkdv_query_block(Q, DO, LSE, DELTA, start_m, offs_m, keys, cols, col_ok,
                                   k, v, dk, dv, L_q, L_k, d, scale2, True, CAUSAL, EVEN_D,
                                   PRECISION)
    tl.store(DK + keys[:, None] * d + cols[None, :], (dk * scale).to(DK.dtype.element_ty),
             mask=kv_mask)
    tl.store(DV + keys[:, None] * d + cols[None, :], dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _dq_key_block(
    K, V, start_n, offs_n, rows, cols, col_ok, row_ok, q, do, lse, delta, dq, L_k, d, scale2,
    MASK: tl.constexpr,  # a diagonal block (causal) or a ragged last block of keys
    CAUSAL: tl.constexpr, EVEN_D: tl.constexpr, PRECISION: tl.constexpr,
):
    """:func:`_backward_dq_kernel`'s loop body for the block of keys at ``start_n``, masking
    only what ``MASK`` and ``EVEN_D`` say may need it. Returns the new ``dq``. Unmasked,
    a padding row of a ragged query block reads zeros, so its ``dS`` row is zero; it is
    never stored either."""
    keys = start_n + offs_n  # (BLOCK_N,)
    if MASK:
        key_ok = keys < L_k
        kv_mask = key_ok[:, None] & col_ok[None, :]
        k = tl.load(K + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
        v = tl.load(V + keys[:, None] * d + cols[None, :], mask=kv_mask, other=0.0)
    elif EVEN_D:
        k = tl.load(K + keys[:, None] * d + cols[None, :])
        v = tl.load(V + keys[:, None] * d + cols[None, :])
    else:
        k = tl.load(K + keys[:, None] * d + cols[None, :], mask=col_ok[None, :], other=0.0)
        v = tl.load(V + keys[:, None] * d + cols[None, :], mask=col_ok[None, :], other=0.0)
    scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale2  # (M, N)
    p = tl.exp2(scores - lse[:, None])
    if MASK:
        visible = row_ok[:, None] & key_ok[None, :]
        if CAUSAL:
            visible = visible & (keys[None, :] <= rows[:, None])
        p = tl.where(visible, p, 0.0)
    dp = tl.dot(do, tl.trans(v), input_precision=PRECISION)  # (BLOCK_M, BLOCK_N)
    ds = p * (dp - delta[:, None])
    dq += tl.dot(ds.to(k.dtype), k, input_precision=PRECISION)
    return dq


@triton.jit
def _backward_dq_kernel_split(
    Q, K, V, DO, LSE, DELTA, DQ, L_q, L_k, d, scale,
    CAUSAL: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    EVEN_D: tl.constexpr,  # d == BLOCK_D: no padding features
):
    """:func:`_backward_dq_kernel` with its key loop split as in
    :func:`_forward_kernel_split`: the key blocks every query of the program sees in full,
    without a mask, then the rest with it; causal, the longest programs start first. Causal
    needs ``L_q == L_k`` (:func:`flash_attention` checks it): the unmasked blocks' bound
    assumes every key before a query exists."""
    if CAUSAL:
        block_i = tl.num_programs(0) - 1 - tl.program_id(0)
    else:
        block_i = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    Q += bh * L_q * d
    DO += bh * L_q * d
    DQ += bh * L_q * d
    LSE += bh * L_q
    DELTA += bh * L_q
    K += bh * L_k * d
    V += bh * L_k * d
    rows = block_i * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    cols = tl.arange(0, BLOCK_D)  # (BLOCK_D,)
    offs_n = tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    row_ok = rows < L_q
    col_ok = cols < d
    q_mask = row_ok[:, None] & col_ok[None, :]
    q = tl.load(Q + rows[:, None] * d + cols[None, :], mask=q_mask, other=0.0)
    do = tl.load(DO + rows[:, None] * d + cols[None, :], mask=q_mask, other=0.0)
    lse = tl.load(LSE + rows, mask=row_ok, other=0.0)
    delta = tl.load(DELTA + rows, mask=row_ok, other=0.0)
    scale2 = scale * LOG2_E
    dq = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    if CAUSAL:
        full_end = (block_i * BLOCK_M) // BLOCK_N * BLOCK_N
        k_end = tl.minimum(L_k, (block_i + 1) * BLOCK_M)
    else:
        full_end = (L_k // BLOCK_N) * BLOCK_N
        k_end = L_k
    for start_n in range(0, full_end, BLOCK_N):
        dq = _dq_key_block(K, V, start_n, offs_n, rows, cols, col_ok, row_ok, q, do, lse,
                           delta, dq, L_k, d, scale2, False, CAUSAL, EVEN_D, PRECISION)
    for start_n in range(full_end, k_end, BLOCK_N):
        dq = _dq_key_block(K, V, start_n, offs_n, rows, cols, col_ok, row_ok, q, do, lse,
                           delta, dq, L_k, d, scale2, True, CAUSAL, EVEN_D, PRECISION)
    tl.store(DQ + rows[:, None] * d + cols[None, :], (dq * scale).to(DQ.dtype.element_ty),
             mask=q_mask)


# ----------------------------------------------------------------------------- launchers


def _kernel_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the kernels compute in: the input's, except bfloat16 under the interpreter
    (NumPy has no bfloat16 arithmetic), computed from exact float32 copies."""
    return torch.float32 if INTERPRETED and dtype == torch.bfloat16 else dtype


def _precision(dtype: torch.dtype) -> str:
    """How ``tl.dot`` multiplies tiles of ``dtype``: float32 in full precision ("ieee");
    float16 and bfloat16 on the tensor cores, where the setting does not apply ("tf32",
    Triton's default, which for float32 tiles would round them to TensorFloat-32's 10-bit
    mantissa, about 1e-3 relative)."""
    return "ieee" if dtype == torch.float32 else "tf32"


def _forward(q, k, v, causal, scale, config):
    """Launch the forward kernel on contiguous ``q (BH, L_q, d)``, ``k, v (BH, L_k, d)``.

    Returns ``o (BH, L_q, d)`` in the inputs' dtype and ``lse (BH, L_q)`` float32, the
    log-sum-exp of each query's scaled scores in base 2 (``l * log2(e)``)."""
    BH, L_q, d = q.shape
    L_k = k.shape[1]
    o = torch.empty_like(q)  # (BH, L_q, d)
    lse = torch.empty(BH, L_q, dtype=torch.float32, device=q.device)  # (BH, L_q)
    grid = (triton.cdiv(L_q, config.block_m), BH)  # one program per (query block, pair)
    BLOCK_D = triton.next_power_of_2(d)
    settings = {"CAUSAL": causal, "PRECISION": _precision(q.dtype), "BLOCK_M": config.block_m,
                "BLOCK_N": config.block_n, "BLOCK_D": BLOCK_D,
                "num_warps": config.num_warps, "num_stages": config.num_stages}
    if config.forward not in FORWARD_KERNELS:  # also checked by flash_attention_lse
        raise ValueError(f"unknown forward kernel {config.forward!r} in {config}; choose from "
                         f"{FORWARD_KERNELS}")
    if config.forward == "split":
        _forward_kernel_split[grid](q, k, v, o, lse, L_q, L_k, d, scale,
                                    EVEN_D=d == BLOCK_D, **settings)
    else:
        _forward_kernel[grid](q, k, v, o, lse, L_q, L_k, d, scale, **settings)
    return o, lse


def _backward(do, q, k, v, o, lse, causal, scale, config):
    """Launch the three backward kernels; every tensor contiguous, ``(BH, L, d)`` as in
    :func:`_forward`. Returns ``dq (BH, L_q, d)``, ``dk, dv (BH, L_k, d)``."""
    BH, L_q, d = q.shape
    L_k = k.shape[1]
    BLOCK_D = triton.next_power_of_2(d)
    launch = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    flags = {"CAUSAL": causal, "PRECISION": _precision(q.dtype)}
    blocks = {"BLOCK_M": config.block_m, "BLOCK_N": config.block_n, "BLOCK_D": BLOCK_D}
    if config.backward not in BACKWARD_KERNELS:  # also checked by flash_attention_lse
        raise ValueError(f"unknown backward kernel {config.backward!r} in {config}; choose "
                         f"from {BACKWARD_KERNELS}")
    delta = torch.empty(BH, L_q, dtype=torch.float32, device=q.device)  # (BH, L_q): D
    _backward_delta_kernel[(triton.cdiv(L_q, config.block_m), BH)](
        o, do, delta, L_q, d, BLOCK_M=config.block_m, BLOCK_D=BLOCK_D, **launch)
    dq = torch.empty_like(q)  # (BH, L_q, d)
    dk = torch.empty_like(k)  # (BH, L_k, d)
    dv = torch.empty_like(v)  # (BH, L_k, d)
    dkdv_grid = (triton.cdiv(L_k, config.block_n), BH)  # a program per key block
    dq_grid = (triton.cdiv(L_q, config.block_m), BH)  # a program per query block
    if config.backward == "split":
        even = {"EVEN_D": d == BLOCK_D}
        _backward_dkdv_kernel_split[dkdv_grid](
            q, k, v, do, lse, delta, dk, dv, L_q, L_k, d, scale, **flags, **blocks, **even,
            DIAGONAL=max(config.block_m, config.block_n), **launch)
        _backward_dq_kernel_split[dq_grid](
            q, k, v, do, lse, delta, dq, L_q, L_k, d, scale, **flags, **blocks, **even,
            **launch)
    else:
        _backward_dkdv_kernel[dkdv_grid](
            q, k, v, do, lse, delta, dk, dv, L_q, L_k, d, scale, **flags, **blocks, **launch)
        _backward_dq_kernel[dq_grid](
            q, k, v, do, lse, delta, dq, L_q, L_k, d, scale, **flags, **blocks, **launch)
    return dq, dk, dv


#: The setting that ran instead of each one the GPU refused, so that a refused launch is
#: tried once: ``(device, pass, dtype, head dimension, causal, refused) -> ran``.
_FITTED: dict[tuple, FlashConfig] = {}


def _smaller_configs(config: FlashConfig) -> list[FlashConfig]:
    """The :data:`SMALLER_CONFIGS` with no larger tiles and no more stages than ``config``
    (``config`` itself left out), running ``config``'s kernels."""
    size = (config.block_m, config.block_n, config.num_stages)
    return [c._replace(forward=config.forward, backward=config.backward)
            for c in SMALLER_CONFIGS
            if c.block_m <= config.block_m and c.block_n <= config.block_n
            and c.num_stages <= config.num_stages
            and (c.block_m, c.block_n, c.num_stages) != size]


def _launch_fitting(launch, config: FlashConfig, key: tuple):
    """``launch(config)``, or, when the GPU refuses it for want of shared memory (Triton
    raises ``OutOfResources``), ``launch`` with each of :func:`_smaller_configs` in turn; the
    one that ran is remembered under ``key`` and a warning names it. A remembered setting is
    launched first the next time, and the smaller ones after it if the GPU refuses it too
    (the compiled kernel also depends on the lengths). Re-raises the last refusal when none
    fits."""
    remembered = _FITTED.get((*key, config), config)
    for candidate in (remembered, *_smaller_configs(remembered)):
        try:
            result = launch(candidate)
        except OutOfResources as error:
            refused = error
            continue
        if candidate != remembered:
            _FITTED[(*key, config)] = candidate
            warnings.warn(
                f"flash_attention: this GPU cannot hold the {key[1]} kernels' tiles of "
                f"{config.block_m} x {config.block_n} with {config.num_stages} stage(s) "
                f"(tuned on an H200); they run with {candidate.block_m} x "
                f"{candidate.block_n} and {candidate.num_stages} stage(s) instead",
                RuntimeWarning, stacklevel=_caller_stacklevel())
        return result
    raise refused


def _inside(frame) -> bool:
    """Is ``frame`` in this module or in torch (``autograd.Function.apply``, the autograd
    engine's Python side, ``Tensor.backward``)? By module name, not by file path, which a
    ``sys.path`` entry such as ``..`` leaves unnormalised."""
    module = frame.f_globals.get("__name__", "")
    return module == __name__ or module == "torch" or module.startswith("torch.")


def _caller_stacklevel() -> int:
    """The ``stacklevel`` at which a warning issued by this function's caller names the first
    frame outside this module and torch: the reader's call of :func:`flash_attention`, or of
    ``backward`` where the backward pass runs on the calling thread. On a GPU the autograd
    engine runs it on a thread of its own, whose stack holds no such frame: then the warning
    names the caller's caller, a line of this module."""
    frame, level = sys._getframe(1), 1  # level 1: the function that calls warnings.warn
    while frame is not None:
        if not _inside(frame):
            return level
        frame, level = frame.f_back, level + 1
    return 2


def _fitting_key(direction: str, q: torch.Tensor, causal: bool) -> tuple:
    """What a launch's shared memory depends on, besides its setting (the lengths too, a
    little: see :func:`_launch_fitting`)."""
    return (str(q.device), direction, q.dtype, q.shape[-1], causal)


class _FlashAttention(torch.autograd.Function):
    """The kernels as one differentiable operation on ``(BH, L, d)`` contiguous tensors of
    the kernels' dtype; saves ``q, k, v, o`` and the log-sum-exp ``(BH, L_q)``, nothing of
    size ``L_q * L_k``. First-order gradients only. With ``fit`` (the tables' settings, not a
    caller's tiles) a launch the GPU refuses runs with smaller tiles
    (:func:`_launch_fitting`)."""

    @staticmethod
    def forward(ctx, q, k, v, causal, scale, config, backward_config, fit):
        def launch(c):
            return _forward(q, k, v, causal, scale, c)
        o, lse = (_launch_fitting(launch, config, _fitting_key("forward", q, causal)) if fit
                  else launch(config))
        ctx.mark_non_differentiable(lse)  # returned for the tests and the chapter only
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.settings = (causal, scale, backward_config, fit)
        return o, lse

    @staticmethod
    def backward(ctx, do, _dlse):
        if torch.is_grad_enabled():
            raise NotImplementedError(
                "flash_attention supports first-order gradients only: its backward kernels "
                "are not differentiable (create_graph=True is not supported)")
        q, k, v, o, lse = ctx.saved_tensors
        causal, scale, backward_config, fit = ctx.settings
        do = do.contiguous()

        def launch(c):
            return _backward(do, q, k, v, o, lse, causal, scale, c)
        dq, dk, dv = (_launch_fitting(launch, backward_config,
                                      _fitting_key("backward", q, causal)) if fit
                      else launch(backward_config))
        return dq, dk, dv, None, None, None, None, None


# ------------------------------------------------------------------------------- public


def _check_block(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < 16 or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= 16 (a tile tl.dot multiplies), "
                         f"got {value}")
    return value


def _checked_backward_tiles(config: FlashConfig, dtype: torch.dtype) -> FlashConfig:
    """``config`` for tiles the caller chose, which no autotune has checked: compiled for a
    GPU with half-precision inputs, tiles of fewer than 64 queries get one pipeline stage.

    On an NVIDIA H200 (Triton 3.6), in float16, 7 of the 48 backward runs with 32-query
    tiles and two stages (12 settings, each for head dimensions 64 and 128, causal and not)
    computed wrong gradients (relative error up to 0.285) and 6 more inflated ones, while all
    48 such runs with one stage were right (chapter 12; the
    saved autotune ``ch12_gpu_autotune.csv``). A Triton bug on Hopper GPUs with ``tl.trans``
    of a ``tl.dot`` result, fixed in Triton 3.7.1, may be the cause. The tables' own
    settings were checked, so only the caller's tiles pass through here."""
    if (not INTERPRETED and dtype in (torch.float16, torch.bfloat16)
            and config.block_m < 64 and config.num_stages > 1):
        return config._replace(num_stages=1)
    return config


def _check_runnable(device: torch.device) -> None:
    """Require a device the kernels run on: the CPU (or CUDA) under the interpreter, CUDA
    when they are compiled."""
    if INTERPRETED and device.type not in ("cpu", "cuda"):
        raise ValueError(f"Triton's interpreter runs on CPU tensors, got device {device.type}")
    if not INTERPRETED and device.type != "cuda":
        raise ValueError(
            f"the Triton kernels were compiled for the GPU and take CUDA tensors, got device "
            f"{device.type}; to run them on the CPU set TRITON_INTERPRET=1 before importing "
            "attention_src.flash_triton")


def _check_inputs(query, key, value, causal, scale) -> float:
    """Validate the inputs of :func:`flash_attention`; return the scale as a float."""
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(name, t, min_rank=0)  # a tensor, floating point
        if t.dim() != 4:
            raise ValueError(f"{name} must have shape (B, h, L, d), 4 dimensions, got shape "
                             f"{tuple(t.shape)}")
    check_same_dtype(query=query, key=key, value=value)
    if query.dtype not in DTYPES:
        raise TypeError(f"flash_attention takes float16, bfloat16 or float32 inputs, got "
                        f"{query.dtype}")
    check_same_device(query=query, key=key, value=value)
    shapes = {n: tuple(t.shape) for n, t in (("query", query), ("key", key), ("value", value))}
    if len({s[:2] for s in shapes.values()}) > 1:
        raise ValueError(f"query, key and value must share their batch and head sizes "
                         f"(B, h), got {shapes}")
    if key.shape[2] != value.shape[2]:
        raise ValueError(f"key and value must have the same length L_k, got key "
                         f"{shapes['key']} and value {shapes['value']}")
    if len({s[3] for s in shapes.values()}) > 1:
        raise ValueError(f"query, key and value must have the same head dimension d, got "
                         f"{shapes}")
    d = query.shape[3]
    if not HEAD_DIMS[0] <= d <= HEAD_DIMS[1]:
        raise ValueError(f"flash_attention supports head dimensions {HEAD_DIMS[0]} to "
                         f"{HEAD_DIMS[1]}, got d = {d} (shape {shapes['query']})")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__} {causal!r}")
    if causal and query.shape[2] != key.shape[2]:
        raise ValueError(
            f"causal=True needs L_q == L_k, got L_q = {query.shape[2]}, L_k = {key.shape[2]}: "
            "with unequal lengths the diagonal is ambiguous (PyTorch's "
            "scaled_dot_product_attention aligns it to the top left, FlashAttention-2 to the "
            "bottom right), so this function refuses rather than pick one")
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        kind = type(scale)  # named with its module where it is not a builtin (numpy.float32)
        name = (kind.__name__ if kind.__module__ == "builtins"
                else f"{kind.__module__}.{kind.__name__}")
        raise TypeError(f"scale must be a Python float or int, or None, got {name} {scale!r}; "
                        "convert it with float(scale)")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale}")
    return float(scale)


def _flash_attention_base2(query, key, value, causal, scale, block_m, block_n, fit):
    """:func:`flash_attention_lse`'s work, with the log-sum-exp left in base 2, as the kernels
    save it (``l2 = l * log2(e)``): ``output (B, h, L_q, d)`` and ``l2 (B, h, L_q)``.
    :func:`flash_attention`, which returns the output only, skips the conversion (on a GPU,
    one launch fewer per call)."""
    scale = _check_inputs(query, key, value, causal, scale)
    B, h, L_q, d = query.shape
    L_k = key.shape[2]
    if block_m is not None:
        _check_block("block_m", block_m)
    if block_n is not None:
        _check_block("block_n", block_n)
    if not isinstance(fit, bool):
        raise TypeError(f"fit must be a bool, got {type(fit).__name__} {fit!r}")
    # the forward and backward kernels' settings; given tile sizes replace both tables'
    config, backward_config = (
        c._replace(block_m=c.block_m if block_m is None else block_m,
                   block_n=c.block_n if block_n is None else block_n)
        for c in (default_config(d, dtype=query.dtype),
                  default_config(d, backward=True, dtype=query.dtype)))
    if config.forward not in FORWARD_KERNELS:
        raise ValueError(f"unknown forward kernel {config.forward!r} in {config}; choose from "
                         f"{FORWARD_KERNELS}")
    if backward_config.backward not in BACKWARD_KERNELS:
        raise ValueError(f"unknown backward kernel {backward_config.backward!r} in "
                         f"{backward_config}; choose from {BACKWARD_KERNELS}")
    if block_m is not None:
        backward_config = _checked_backward_tiles(backward_config, query.dtype)
    _check_runnable(query.device)  # last: every other error is the same on every machine
    if L_q == 0 or L_k == 0 or B * h == 0:  # no query or no key: the book's zero output,
        # connected to the inputs so that a backward pass gives them zero gradients
        zeros = query.new_zeros(B, h, L_q, d) + 0 * (query.sum() + key.sum() + value.sum())
        lse2 = torch.full((B, h, L_q), -math.inf, device=query.device)  # log of an empty sum
        return zeros, lse2
    dtype = _kernel_dtype(query.dtype)
    # (B, h, L, d) -> (B * h, L, d), contiguous, in the kernels' dtype
    q = query.reshape(B * h, L_q, d).to(dtype).contiguous()  # (BH, L_q, d)
    k = key.reshape(B * h, L_k, d).to(dtype).contiguous()  # (BH, L_k, d)
    v = value.reshape(B * h, L_k, d).to(dtype).contiguous()  # (BH, L_k, d)
    # the tables' settings may be too large for a smaller GPU: then smaller tiles run; a
    # caller's tiles run as given
    fit = fit and block_m is None and block_n is None
    o, lse2 = _FlashAttention.apply(q, k, v, causal, scale, config, backward_config, fit)
    o = o.to(query.dtype).reshape(B, h, L_q, d)  # (BH, L_q, d) -> (B, h, L_q, d)
    return o, lse2.reshape(B, h, L_q)  # (BH, L_q) -> (B, h, L_q)


def flash_attention_lse(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    fit: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`flash_attention`, and the log-sum-exp the forward kernel saves.

    Same arguments. Returns ``output (B, h, L_q, d)`` (differentiable) and ``lse (B, h,
    L_q)``, float32, not differentiable: ``l_i = log sum_j exp(scale * q_i . k_j)`` over the
    keys query ``i`` sees, in natural-log units (``-inf`` when there is no key)."""
    o, lse2 = _flash_attention_base2(query, key, value, causal, scale, block_m, block_n, fit)
    return o, lse2 * math.log(2)  # base 2 -> natural log: l = l2 * ln 2


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    causal: bool = False,
    scale: float | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    fit: bool = True,
) -> torch.Tensor:
    """``softmax(query key^T * scale) value``, computed by the Triton kernels of this module.

    The same result as ``torch.nn.functional.scaled_dot_product_attention(query, key, value,
    is_causal=causal, scale=scale)``, never holding the ``(L_q, L_k)`` scores: the forward
    kernel keeps only ``block_m x block_n`` tiles and saves one log-sum-exp per query, and the
    backward kernels recompute each tile of weights from it (as FlashAttention-2 does).

    Args:
        query: ``(B, h, L_q, d)``, float16, bfloat16 or float32, ``16 <= d <= 128``.
        key: ``(B, h, L_k, d)``, same dtype and device.
        value: ``(B, h, L_k, d)``, same dtype and device.
        causal: query ``i`` sees only keys ``j <= i``; needs ``L_q == L_k``.
        scale: positive, the factor of the scores; ``None`` for ``1 / sqrt(d)``.
        block_m, block_n: queries and keys per tile (powers of two, at least 16), in the
            forward and the backward kernels; ``None`` for :func:`default_config`'s (16
            under the interpreter; on a GPU, the forward and backward tables' entries, or,
            on a GPU with too little shared memory for them, the first of
            :data:`SMALLER_CONFIGS` that fits, with a ``RuntimeWarning``).
        fit: ``False`` runs the tables' settings as they are, refused or not (a benchmark
            times the setting it names); tiles given by ``block_m`` or ``block_n`` always
            run as given.

    Returns:
        ``(B, h, L_q, d)``, in the inputs' dtype; zeros when ``L_k = 0``.

    Raises:
        TypeError: a non-tensor, an integer tensor, mismatched dtypes, a dtype other than
            float16/bfloat16/float32, a non-bool ``causal`` or ``fit``, a non-number
            ``scale``.
        ValueError: a rank other than 4, mismatched batch, head, length or head-dimension
            sizes, ``d`` outside 16..128, inputs on different devices or on a device the
            kernels cannot run on, ``causal`` with ``L_q != L_k``, ``scale <= 0``, a block
            size that is not a power of two >= 16.
        triton.runtime.OutOfResources: on a GPU without the shared memory for the tiles the
            caller chose (or the tables' with ``fit=False``), or for the smallest of
            :data:`SMALLER_CONFIGS`.
    """
    return _flash_attention_base2(query, key, value, causal, scale, block_m, block_n, fit)[0]
