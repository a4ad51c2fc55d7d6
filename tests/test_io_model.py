"""attention_src.io_model: HBM element counts of Algorithms 0 and 1 of FlashAttention (Dao et al.,
2022), checked against hand counts, a loop-by-loop simulation of Algorithm 1, scaling
properties and bad input; the roofline helpers against hand values."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from attention_src import io_model as io

ROOT = Path(__file__).resolve().parents[1]


def simulate_flash(N: int, d: int, M: int) -> int:
    """Walk Algorithm 1's loops and count every element loaded from or stored to HBM.

    Block sizes recomputed here from the paper (line 1). A ragged last block holds only the
    rows that exist (``min(start + B, N) - start``), and only those are counted."""
    B_c = math.ceil(M / (4 * d))
    B_r = min(math.ceil(M / (4 * d)), d)
    count = N * d + N + N                        # line 2: O, l, m initialised in HBM
    for j0 in range(0, N, B_c):                  # line 5: key/value blocks
        rows_kv = min(j0 + B_c, N) - j0
        count += rows_kv * d + rows_kv * d       # line 6: load K_j, V_j
        for i0 in range(0, N, B_r):              # line 7: query blocks
            rows = min(i0 + B_r, N) - i0
            count += rows * d + rows * d + rows + rows   # line 8: load Q_i, O_i, l_i, m_i
            count += rows * d                    # line 12: write O_i
            count += rows + rows                 # line 13: write l_i, m_i
    return count


def test_standard_hand_count_N4_d2():
    # Algorithm 0 with N=4, d=2: read Q, K = 2*4*2 = 16; write S = 4*4 = 16; read S = 16;
    # write P = 16; read P, V = 16 + 8 = 24; write O = 8. Total 96 = 4*16 + 4*8.
    c = io.standard_attention_hbm_elements(4, 2)
    assert c == {"read_QK": 16, "write_S": 16, "read_S": 16, "write_P": 16, "read_PV": 24,
                 "write_O": 8, "total": 96}


def test_standard_is_4N2_plus_4Nd():
    for N, d in [(1, 1), (7, 3), (4096, 64), (1000, 128)]:
        assert io.standard_attention_hbm_elements(N, d)["total"] == 4 * N * N + 4 * N * d


def test_flash_hand_count_N4_d2_M16():
    # B_c = ceil(16 / 8) = 2, B_r = min(2, 2) = 2, T_r = T_c = 2.
    # init: O (4*2 = 8) + l (4) + m (4) = 16. Load K_j, V_j: over j, 2*4*2 = 16.
    # Per j, over i: load Q_i, O_i (2*2 each), l_i, m_i (2 each) = 12 per i, 24 per j;
    # write O_i (4), l_i, m_i (2 each) = 8 per i, 16 per j. Two j's: reads 48, writes 32.
    # Total 16 + 16 + 48 + 32 = 112 (more than standard's 96 at this toy size).
    assert io.flash_block_sizes(4, 2, 16) == {"B_c": 2, "B_r": 2, "T_r": 2, "T_c": 2}
    assert io.flash_attention_hbm_elements(4, 2, 16) == {
        "init_write": 16, "read_KV": 16, "read_QOlm": 48, "write_Olm": 32, "total": 112}


def test_flash_hand_count_ragged_N5_d2_M16():
    # B_c = B_r = 2, T_c = T_r = 3 with blocks of 2, 2, 1 rows (the last one counted as 1 row).
    # init 10 + 5 + 5 = 20; K, V: 2*5*2 = 20; per j, over i: reads 5*(2*2 + 2) = 30, writes
    # 5*(2 + 2) = 20; three j's: 90 + 60. Total 20 + 20 + 90 + 60 = 190.
    assert io.flash_block_sizes(5, 2, 16)["T_c"] == 3
    assert io.flash_attention_hbm_elements(5, 2, 16)["total"] == 190 == simulate_flash(5, 2, 16)


@pytest.mark.parametrize("N,d,M", [
    (4, 2, 16), (5, 2, 16), (17, 3, 50), (33, 4, 4), (64, 8, 256), (100, 16, 1000),
    (129, 5, 7), (10, 4, 1000), (1, 1, 1), (257, 32, 4096),
])
def test_flash_formula_equals_loop_simulation(N, d, M):
    assert io.flash_attention_hbm_elements(N, d, M)["total"] == simulate_flash(N, d, M)


def test_flash_block_sizes_B_r_capped_at_d():
    # M = 4096, d = 8: ceil(4096 / 32) = 128 for B_c, B_r = min(128, 8) = 8.
    assert io.flash_block_sizes(100, 8, 4096) == {"B_c": 128, "B_r": 8, "T_r": 13, "T_c": 1}


def test_flash_decreases_as_M_grows():
    N, d = 4096, 64
    totals = [io.flash_attention_hbm_elements(N, d, M)["total"] for M in range(64, 70000, 997)]
    assert all(b <= a for a, b in zip(totals, totals[1:], strict=False))
    assert totals[-1] < totals[0] / 100


def test_flash_below_standard_at_realistic_size():
    # 100 KB of SRAM in 2-byte elements: M = 51200. B_c = 200, T_c = ceil(4096 / 200) = 21.
    N, d, M = 4096, 64, 100 * 1024 // 2
    flash = io.flash_attention_hbm_elements(N, d, M)["total"]
    standard = io.standard_attention_hbm_elements(N, d)["total"]
    assert flash == 3 * N * d + 2 * N + 21 * N * (3 * d + 4) == 17_653_760
    assert flash < standard / 3


def test_flash_scales_as_N2_d2_over_M():
    d = 64

    def f(N, M):
        return io.flash_attention_hbm_elements(N, d, M)["total"]

    # doubling N multiplies by ~4, doubling M divides by ~2 (block sizes divide N exactly here)
    assert f(8192, 2**14) / f(4096, 2**14) == pytest.approx(4, rel=0.02)
    assert f(8192, 2**14) / f(8192, 2**15) == pytest.approx(2, rel=0.02)
    # and the constant: total ~ 12 (1 + 4 / (3 d)) N^2 d^2 / M for large N
    for N, M in [(4096, 2**14), (16384, 2**16), (8192, 2**13)]:
        assert f(N, M) * M / (N * N * d * d) == pytest.approx(12 * (1 + 4 / (3 * d)), rel=0.02)


def test_attention_flops_matches_bench_gpu():
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert io.attention_flops(4, 2) == 128.0       # 4 * 16 * 2
    assert io.attention_flops(4, 2, causal=True) == 64.0
    for causal in (False, True):
        assert io.attention_flops(1024, 64, causal) == bench.attention_flops(
            1, 1, 1024, 64, causal, "forward")


def test_arithmetic_intensity_and_roofline_hand_values():
    assert io.arithmetic_intensity(100, 8) == 12.5
    # 1e12 FLOP at 1e12 FLOP/s = 1 s; 1e9 bytes at 1e12 B/s = 1 ms: compute-bound, 1 s.
    assert io.roofline_seconds(1e12, 1e9, 1e12, 1e12) == 1.0
    # 1e9 FLOP = 1 ms; 4e12 bytes at 2e12 B/s = 2 s: memory-bound.
    assert io.roofline_seconds(1e9, 4e12, 1e12, 2e12) == 2.0


def test_gpu_specs_published_numbers():
    h100, h200 = io.GPU_SPECS["H100 SXM"], io.GPU_SPECS["H200 SXM"]
    assert h100["tflops_dense_bf16"] == h200["tflops_dense_bf16"] == pytest.approx(1979 / 2, 1e-3)
    assert (h100["hbm_tb_per_s"], h100["hbm_gb"]) == (3.35, 80)
    assert (h200["hbm_tb_per_s"], h200["hbm_gb"]) == (4.8, 141)
    # ridge point of the H100: ~295 FLOP per byte
    assert h100["tflops_dense_bf16"] / h100["hbm_tb_per_s"] == pytest.approx(295.3, abs=0.1)


@pytest.mark.parametrize("call,exc,match", [
    (lambda: io.standard_attention_hbm_elements(4.0, 2), TypeError, "N must be an int"),
    (lambda: io.standard_attention_hbm_elements(True, 2), TypeError, "N must be an int"),
    (lambda: io.standard_attention_hbm_elements(4, 0), ValueError, "d must be positive"),
    (lambda: io.flash_attention_hbm_elements(4, 2, -16), ValueError, "sram_elements"),
    (lambda: io.flash_attention_hbm_elements(4, 8, 7), ValueError, "M=7 must be >= d=8"),
    (lambda: io.flash_attention_hbm_elements(4, 2, "16"), TypeError, "sram_elements"),
    (lambda: io.attention_flops(4, 2, causal=1), TypeError, "causal must be a bool"),
    (lambda: io.arithmetic_intensity(10, 0), ValueError, "bytes must be > 0"),
    (lambda: io.arithmetic_intensity("10", 1), TypeError, "flops must be a number"),
    (lambda: io.arithmetic_intensity(-1, 1), ValueError, "flops must be finite"),
    (lambda: io.arithmetic_intensity(1, math.nan), ValueError, "bytes must be finite"),
    (lambda: io.roofline_seconds(1, 1, 0, 1), ValueError, "peak_flops and bandwidth"),
    (lambda: io.roofline_seconds(1, 1, 1, 0), ValueError, "peak_flops and bandwidth"),
])
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_decode_step_cost_hand_count():
    # 2 query heads sharing 1 kv head, cache 3, d 4, 2 bytes: flops 4*2*3*4 = 96;
    # elements 2*1*3*4 (K, V) + 2*2*4 (q, o) = 24 + 16 = 40, bytes 80
    cost = io.decode_step_cost(3, 2, 1, 4, bytes_per_element=2)
    assert cost == {"flops": 96.0, "bytes": 80.0, "intensity": 1.2}


def test_decode_step_cost_equals_a_counted_loop():
    # the cost read off an explicit decode step: one query per head against the cache
    import torch

    B, h, h_kv, L, d = 1, 8, 2, 37, 16
    q = torch.randn(B, h, 1, d)
    cache_k, cache_v = torch.randn(B, h_kv, L, d), torch.randn(B, h_kv, L, d)
    group = h // h_kv
    flops = 0
    for head in range(h):
        k, v = cache_k[:, head // group], cache_v[:, head // group]  # (B, L, d)
        scores = q[:, head] @ k.transpose(-1, -2)  # (B, 1, L): L dot products of length d
        flops += 2 * L * d
        _ = scores.softmax(-1) @ v  # (B, 1, d): d dot products of length L
        flops += 2 * L * d
    elements = cache_k.numel() + cache_v.numel() + 2 * q.numel()
    cost = io.decode_step_cost(L, h, h_kv, d, bytes_per_element=4)
    assert cost["flops"] == flops and cost["bytes"] == 4 * elements


def test_decode_step_cost_properties():
    mha = io.decode_step_cost(8192, 32, 32, 128)
    gqa = io.decode_step_cost(8192, 32, 8, 128)
    mqa = io.decode_step_cost(8192, 32, 1, 128)
    assert mha["flops"] == gqa["flops"] == mqa["flops"]
    # the cache dominates the bytes: intensity about 1 FLOP/byte for multi-head in fp16,
    # growing about with the group size heads / kv_heads
    assert 0.99 < mha["intensity"] < 1.0
    assert 3.9 < gqa["intensity"] < 4.0 and 25 < mqa["intensity"] < 32
    # linear in the cache length, up to the fixed q/o traffic
    long = io.decode_step_cost(16384, 32, 8, 128)
    assert long["flops"] == 2 * gqa["flops"] and 1.99 < long["bytes"] / gqa["bytes"] < 2.0


@pytest.mark.parametrize("args,exc,match", [
    ((0, 8, 8, 64), ValueError, "cache_length"),
    ((16, 8, 3, 64), ValueError, "heads=8 must be a multiple of kv_heads=3"),
    ((16, 8, 8, 64.0), TypeError, "head_dim"),
    ((16, 8, 8, 64, 0), ValueError, "bytes_per_element"),
])
def test_decode_step_cost_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        io.decode_step_cost(*args)
