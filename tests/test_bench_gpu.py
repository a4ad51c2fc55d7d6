"""benchmarks/bench_gpu.py on a machine without a GPU: it exits 0 with one line, and its
pieces that do not need CUDA (the FLOP count, the methods, the CSV) are right.

The methods are checked on tiny CPU inputs against ``F.scaled_dot_product_attention``'s math
backend in float64 (1e-10): the benchmark compares them, so they must compute one thing.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "benchmarks" / "bench_gpu.py")
bench_gpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_gpu)


def test_without_cuda_it_prints_one_line_and_exits_0(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gpu.main(["--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == bench_gpu.NO_CUDA + "\n"
    assert not any(tmp_path.iterdir())


def test_flop_count_forward_causal_and_backward():
    forward = bench_gpu.attention_flops(4, 16, 4096, 64, False, "forward")
    assert forward == 4 * 4 * 16 * 4096**2 * 64
    assert bench_gpu.attention_flops(4, 16, 4096, 64, True, "forward") == forward / 2
    assert bench_gpu.attention_flops(4, 16, 4096, 64, False, "forward_backward") == 3.5 * forward


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("method", ["sdpa_default", "sdpa_math", "plain", "blockwise"])
def test_the_methods_compute_attention(method, causal):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 9, 16, generator=g, dtype=torch.float64) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3)
    got = bench_gpu.make_method(method, causal, 0.3)(q, k, v)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-10)
    grad = torch.ones_like(q)
    bench_gpu.make_call(bench_gpu.make_method(method, causal, 0.3), q, k, v, grad,
                        "forward_backward")()  # runs: a backward pass exists
    with torch.no_grad():
        assert torch.equal(bench_gpu.make_call(bench_gpu.make_method(method, causal, 0.3),
                                               q, k, v, grad, "forward")(), got)


def test_an_unknown_method_is_named():
    with pytest.raises(ValueError, match="unknown method 'fast'"):
        bench_gpu.make_method("fast", False, 1.0)


def test_quick_and_the_csv_columns(tmp_path):
    args = bench_gpu.parse(["--quick"])
    assert args.lengths == [512, 2048] and args.dtypes == ["float16"]
    assert bench_gpu.parse([]).lengths == [512, 1024, 2048, 4096, 8192, 16384, 32768]
    row = {"method": "plain", "dtype": "float16", "causal": False, "L": 512, "mode": "forward",
           "status": "ok", "ms": 1.0, "tflops": 2.0, "peak_mib": 3.0, "max_abs_diff": 0.0,
           "B": 4, "h": 16, "d": 64}
    bench_gpu.write_csv([row], tmp_path / "gpu.csv")
    with (tmp_path / "gpu.csv").open() as f:
        (read,) = list(csv.DictReader(f))
    assert list(read) == bench_gpu.FIELDS and read["tflops"] == "2.0"
    assert math.isclose(float(read["ms"]), 1.0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU run needs the interpreter")
def test_the_triton_method_on_the_cpu_interpreter():
    if importlib.util.find_spec("triton") is None:  # not imported here: the module must
        pytest.skip("Triton is not installed")  # import it, after TRITON_INTERPRET=1
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 20, 16, generator=g) for _ in range(3))
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    got = bench_gpu.make_method("triton", True, 0.25)(q, k, v)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)


def test_masked_rows_on_the_cpu_zeros_and_refusals():
    # on a CPU the math and flash backends run, efficient and cuDNN refuse: a refusal is a
    # row with its reason, not a crash
    rows = bench_gpu.masked_rows(device="cpu")
    assert [(r["backend"], r["dtype"]) for r in rows] == [
        (b, t) for b in bench_gpu.MASK_BACKENDS for t in ("float32", "float16", "bfloat16")]
    by = {(r["backend"], r["dtype"]): r for r in rows}
    for dtype in ("float32", "float16", "bfloat16"):
        math_row = by["sdpa_math", dtype]
        assert math_row["status"] == "ok" and math_row["masked_row_max_abs"] == 0.0
        assert math_row["other_rows_max_diff"] < (1e-6 if dtype == "float32" else 0.05)
        for refused in ("sdpa_efficient", "sdpa_cudnn"):
            assert by[refused, dtype]["status"].startswith("unsupported: ")
            assert "masked_row_max_abs" not in by[refused, dtype]
    assert set(rows[0]) <= set(bench_gpu.MASKED_FIELDS)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("method", ["sdpa_gqa", "sdpa_repeat"])
def test_the_decode_step_is_grouped_query_attention(method, kv_heads):
    from attention_src.efficient import grouped_query_attention

    g = torch.Generator().manual_seed(kv_heads)
    q = torch.randn(2, 4, 1, 16, generator=g, dtype=torch.float64)  # one new token
    k, v = (torch.randn(2, kv_heads, 11, 16, generator=g, dtype=torch.float64)
            for _ in range(2))
    got = bench_gpu.decode_step(method)(q, k, v)
    torch.testing.assert_close(got, grouped_query_attention(q, k, v), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="unknown decode method 'fast'"):
        bench_gpu.decode_step("fast")


def test_autotune_configs_and_the_best_setting_by_hand():
    configs = bench_gpu.autotune_configs()
    assert len(configs) == len(set(configs)) == 24
    assert all(c.block_m in (64, 128) and c.block_n in (32, 64, 128) for c in configs)

    def row(d, causal, bm, ms, status="ok"):
        return {"d": d, "causal": causal, "block_m": bm, "block_n": 64, "num_warps": 4,
                "num_stages": 2, "status": status, "forward_backward_ms": ms}

    rows = [row(64, False, 64, 1.0), row(64, True, 64, 1.0),  # total 2.0
            row(64, False, 128, 0.5), row(64, True, 128, 1.2),  # total 1.7: the best
            row(64, False, 32, 0.1), row(64, True, 32, 0.0, "failed: smem"),  # incomplete
            row(128, False, 64, 3.0), row(128, True, 64, 2.0)]
    best = bench_gpu.best_configs(rows)
    assert best[64]["block_m"] == 128 and math.isclose(best[64]["forward_backward_ms"], 1.7)
    assert best[128]["block_m"] == 64 and best[128]["forward_backward_ms"] == 5.0


def test_the_extra_flags_parse_and_do_nothing_without_cuda(monkeypatch, capsys, tmp_path):
    args = bench_gpu.parse(["--masked-rows", "--decode", "--autotune", "--only"])
    assert args.masked_rows and args.decode and args.autotune and args.only
    assert not bench_gpu.parse([]).only
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gpu.main(["--decode", "--only", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == bench_gpu.NO_CUDA + "\n"
