"""Counting memory traffic: HBM accesses of standard attention and FlashAttention, and the roofline.

The counts follow Dao et al. (2022), "FlashAttention: Fast and Memory-Efficient Exact Attention
with IO-Awareness": Algorithm 0 (standard attention) and Algorithm 1 (FlashAttention forward),
for one head with ``N`` queries and ``N`` keys of head dimension ``d``. Counts are in
**elements** (multiply by the bytes per element, 2 for fp16/bf16, to get bytes). Theorem 2:
standard attention needs Theta(N d + N^2) HBM accesses, FlashAttention Theta(N^2 d^2 / M) for an
SRAM of ``M`` elements with ``d <= M <= N d``.
"""

from __future__ import annotations

import math

from attention_src.validation import check_positive_int

__all__ = [
    "standard_attention_hbm_elements", "flash_attention_hbm_elements", "flash_block_sizes",
    "arithmetic_intensity", "attention_flops", "roofline_seconds", "decode_step_cost",
    "GPU_SPECS",
]

# Published numbers; "tflops_dense_bf16" is the dense (no sparsity) BF16/FP16 tensor-core peak,
# half the data sheets' "with sparsity" figure.
GPU_SPECS: dict[str, dict[str, float]] = {
    # NVIDIA H100 Tensor Core GPU data sheet, SXM column: BF16/FP16 tensor core 1,979 TFLOPS
    # with sparsity (989.4 dense), GPU memory 80 GB, bandwidth 3.35 TB/s. NVIDIA H100 Tensor Core
    # GPU Architecture whitepaper (GH100): H100 SXM5 has 132 SMs; shared memory configurable up
    # to 228 KB per SM.
    "H100 SXM": {"tflops_dense_bf16": 989.4, "hbm_tb_per_s": 3.35, "hbm_gb": 80,
                 "smem_kb_per_sm": 228, "sm_count": 132},
    # NVIDIA H200 Tensor Core GPU data sheet, SXM column: BF16/FP16 tensor core 1,979 TFLOPS with
    # sparsity (989.4 dense), GPU memory 141 GB, bandwidth 4.8 TB/s. (SM count and shared memory
    # are not on the data sheet; left out.)
    "H200 SXM": {"tflops_dense_bf16": 989.4, "hbm_tb_per_s": 4.8, "hbm_gb": 141},
}


def _check_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return float(value)


def standard_attention_hbm_elements(N: int, d: int) -> dict[str, int]:
    """HBM element reads and writes of Algorithm 0 (standard attention), one head.

    Line 1: load Q, K (``N d`` each), write ``S = Q K^T`` (``N^2``). Line 2: read S (``N^2``),
    write ``P = softmax(S)`` (``N^2``). Line 3: load P (``N^2``) and V (``N d``), write
    ``O = P V`` (``N d``). Total ``4 N^2 + 4 N d`` elements.

    Returns:
        dict of element counts by step (``read_QK``, ``write_S``, ``read_S``, ``write_P``,
        ``read_PV``, ``write_O``) and ``total``.
    """
    N, d = check_positive_int("N", N), check_positive_int("d", d)
    steps = {"read_QK": 2 * N * d, "write_S": N * N, "read_S": N * N, "write_P": N * N,
             "read_PV": N * N + N * d, "write_O": N * d}
    return {**steps, "total": sum(steps.values())}


def flash_block_sizes(N: int, d: int, sram_elements: int) -> dict[str, int]:
    """Algorithm 1, lines 1 and 3: ``B_c = ceil(M / (4 d))``, ``B_r = min(ceil(M / (4 d)), d)``,
    ``T_r = ceil(N / B_r)``, ``T_c = ceil(N / B_c)``, for an SRAM of ``M = sram_elements``
    elements (``M >= d`` required)."""
    N, d = check_positive_int("N", N), check_positive_int("d", d)
    M = check_positive_int("sram_elements", sram_elements)
    if M < d:
        raise ValueError(f"sram_elements M={M} must be >= d={d} (Theorem 2 needs d <= M)")
    B_c = -(-M // (4 * d))
    B_r = min(B_c, d)
    return {"B_c": B_c, "B_r": B_r, "T_r": -(-N // B_r), "T_c": -(-N // B_c)}


def flash_attention_hbm_elements(N: int, d: int, sram_elements: int) -> dict[str, int]:
    """HBM element reads and writes of Algorithm 1 (FlashAttention forward), one head.

    Line 2: initialise O (``N d``), l and m (``N`` each) in HBM: ``N d + 2 N`` writes.
    Lines 5-6: for each of the ``T_c`` key/value blocks, load K_j, V_j: ``2 N d`` over all j.
    Lines 7-8: for each query block i (inside each j), load Q_i, O_i (``B_r d`` each), l_i, m_i
    (``B_r`` each). Lines 12-13: write O_i, l_i, m_i back. Over all i that is ``N (2 d + 2)``
    reads and ``N (d + 2)`` writes per key/value block. Total
    ``N d + 2 N + 2 N d + T_c N (3 d + 4)`` ~ ``12 N^2 d^2 / M`` elements.

    Ragged blocks: when ``B_r`` or ``B_c`` does not divide N, the last block has fewer rows and
    only its real rows are counted (no padding), so the count does not depend on ``B_r``.

    Args:
        N: sequence length (queries = keys). d: head dimension.
        sram_elements: on-chip SRAM size M in elements (bytes / bytes per element), ``M >= d``.

    Returns:
        dict with ``init_write``, ``read_KV``, ``read_QOlm``, ``write_Olm``, ``total`` (elements).
    """
    T_c = flash_block_sizes(N, d, sram_elements)["T_c"]
    steps = {"init_write": N * d + 2 * N, "read_KV": 2 * N * d,
             "read_QOlm": T_c * N * (2 * d + 2), "write_Olm": T_c * N * (d + 2)}
    return {**steps, "total": sum(steps.values())}


def arithmetic_intensity(flops: float, bytes: float) -> float:
    """Floating-point operations per byte moved (FLOP/byte); ``bytes`` must be > 0."""
    flops, bytes = _check_number("flops", flops), _check_number("bytes", bytes)
    if bytes == 0:
        raise ValueError("bytes must be > 0 for an arithmetic intensity")
    return flops / bytes


def attention_flops(N: int, d: int, causal: bool = False) -> float:
    """FLOPs of one attention forward, one head: ``4 N^2 d`` (``Q K^T`` and ``P V``,
    ``2 N^2 d`` each), halved when causal (the convention of ``benchmarks/bench_gpu.py``)."""
    N, d = check_positive_int("N", N), check_positive_int("d", d)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    return 4.0 * N * N * d * (0.5 if causal else 1.0)


def roofline_seconds(flops: float, bytes: float, peak_flops: float, bandwidth: float) -> float:
    """Roofline time in seconds: ``max(flops / peak_flops, bytes / bandwidth)``, with
    ``peak_flops`` in FLOP/s and ``bandwidth`` in bytes/s (both > 0)."""
    flops, bytes = _check_number("flops", flops), _check_number("bytes", bytes)
    peak, bw = _check_number("peak_flops", peak_flops), _check_number("bandwidth", bandwidth)
    if peak == 0 or bw == 0:
        raise ValueError(f"peak_flops and bandwidth must be > 0, got {peak_flops}, {bandwidth}")
    return max(flops / peak, bytes / bw)


def decode_step_cost(cache_length: int, heads: int, kv_heads: int, head_dim: int,
                     bytes_per_element: int = 2) -> dict[str, float]:
    """The work and the memory traffic of attention for one decoded token, one layer.

    The new token's ``heads`` queries (``head_dim`` each) meet a KV cache of ``cache_length``
    positions held by ``kv_heads`` key/value heads (``kv_heads == heads``: multi-head;
    ``1 < kv_heads < heads``: grouped-query; ``kv_heads == 1``: multi-query attention), each
    key/value head shared by ``heads // kv_heads`` query heads.

    * FLOPs: ``4 * heads * cache_length * head_dim`` (per query head, ``q k^T`` and ``p V``,
      ``2 * cache_length * head_dim`` each; the softmax's few operations per key left out).
    * Bytes: the cache read once, ``2 * kv_heads * cache_length * head_dim`` elements (K and
      V), plus the query read and the output written, ``2 * heads * head_dim`` elements, times
      ``bytes_per_element`` (2 for float16/bfloat16). The scores stay on chip.

    Returns:
        dict with ``flops``, ``bytes`` and ``intensity`` (FLOP per byte).
    """
    cache_length = check_positive_int("cache_length", cache_length)
    heads = check_positive_int("heads", heads)
    kv_heads = check_positive_int("kv_heads", kv_heads)
    head_dim = check_positive_int("head_dim", head_dim)
    size = check_positive_int("bytes_per_element", bytes_per_element)
    if heads % kv_heads:
        raise ValueError(f"heads={heads} must be a multiple of kv_heads={kv_heads}")
    flops = 4.0 * heads * cache_length * head_dim
    nbytes = float(size * (2 * kv_heads * cache_length * head_dim + 2 * heads * head_dim))
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}
