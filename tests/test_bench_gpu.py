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


def test_the_triton_method_times_the_setting_it_names(monkeypatch):
    """``fit=False``: on a GPU that refuses a setting the row fails, instead of timing the
    smaller tiles that flash_attention would run for a reader under that setting's name."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("Triton is not installed")
    from attention_src import flash_triton

    seen = []
    monkeypatch.setattr(flash_triton, "flash_attention", lambda *args, **kw: seen.append(kw))
    bench_gpu.make_method("triton", False, 0.5)("q", "k", "v")
    assert seen == [{"causal": False, "scale": 0.5, "fit": False}]


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


def test_autotune_settings_per_direction_and_the_order_of_the_jobs():
    forward, backward = (bench_gpu.autotune_configs(x) for x in ("forward", "backward"))
    assert len(forward) == len(set(forward)) == 48
    assert all(c.block_m in (64, 128) and c.block_n in (32, 64, 128) for c in forward)
    assert {c.forward for c in forward} == {"plain", "split"}
    assert {c.backward for c in forward} == {"plain"}
    assert len(backward) == len(set(backward)) == 64
    assert all(c.block_m * c.block_n < 128 * 128 for c in backward)
    assert {c.backward for c in backward} == {"plain", "split"}
    assert {c.forward for c in backward} == {"plain"}
    with pytest.raises(ValueError, match="unknown direction 'sideways'"):
        bench_gpu.autotune_configs("sideways")
    jobs = bench_gpu.autotune_jobs()
    assert len(jobs) == len(set(jobs)) == 2 * 2 * (48 + 64)  # head dims x causal x settings
    assert [j[:2] for j in jobs[:1] + jobs[96:97] + jobs[224:225]] == [
        ("forward", 64), ("backward", 64), ("forward", 128)]  # d 64 first, forward first
    backward_only = bench_gpu.autotune_jobs(directions=("backward",))
    assert backward_only == [j for j in jobs if j[0] == "backward"]
    with pytest.raises(ValueError, match="unknown direction 'up'"):
        bench_gpu.autotune_jobs(directions=("up",))


def _tuned(direction, d, causal, bm, ms, status="ok"):
    return {"direction": direction, "d": d, "causal": causal, "L": 8192, "block_m": bm,
            "block_n": 64, "num_warps": 4, "num_stages": 2, "status": status, "ms": ms}


def test_the_best_setting_by_hand_read_back_from_the_csv(tmp_path):
    rows = [_tuned("forward", 64, False, 64, 1.0), _tuned("forward", 64, True, 64, 1.0),
            _tuned("forward", 64, False, 128, 0.5), _tuned("forward", 64, True, 128, 1.2),
            _tuned("forward", 64, False, 32, 0.1),  # fastest, but failed when causal:
            _tuned("forward", 64, True, 32, 0.0, "failed: out of shared memory"),
            _tuned("backward", 64, False, 32, 4.0), _tuned("backward", 64, True, 32, 3.0),
            _tuned("backward", 64, False, 64, 2.0), _tuned("backward", 64, True, 64, 9.0),
            _tuned("forward", 128, False, 64, 3.0), _tuned("forward", 128, True, 64, 2.0)]
    bench_gpu.write_csv(rows, tmp_path / "autotune.csv", bench_gpu.AUTOTUNE_FIELDS)
    for source in (rows, bench_gpu.read_csv(tmp_path / "autotune.csv")):  # strings too
        best = bench_gpu.best_configs(source)
        assert sorted(best) == [(64, "backward"), (64, "forward"), (128, "forward")]
        assert best[64, "forward"]["block_m"] == 128
        assert math.isclose(best[64, "forward"]["ms"], 1.7)
        assert best[64, "backward"]["block_m"] == 32 and best[64, "backward"]["ms"] == 7.0
        assert best[128, "forward"] == {"block_m": 64, "block_n": 64, "num_warps": 4,
                                        "num_stages": 2, "forward": "plain",
                                        "backward": "plain", "ms": 5.0}


def test_the_best_settings_go_into_the_two_tables(monkeypatch):
    ft = pytest.importorskip("attention_src.flash_triton") if _triton_ok() else None
    if ft is None:
        pytest.skip("Triton is not installed")
    monkeypatch.setattr(ft, "GPU_CONFIGS", dict(ft.GPU_CONFIGS))
    monkeypatch.setattr(ft, "GPU_BACKWARD_CONFIGS", dict(ft.GPU_BACKWARD_CONFIGS))
    before_32 = ft.GPU_CONFIGS[32]
    best = {(64, "forward"): {"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3,
                              "forward": "split", "ms": 1.5},
            (64, "backward"): {"block_m": 32, "block_n": 128, "num_warps": 4, "num_stages": 1,
                               "backward": "split", "ms": 4.0}}
    tables = bench_gpu.apply_configs(best)
    assert ft.GPU_CONFIGS[64] == ft.FlashConfig(128, 64, 8, 3, "split")
    assert ft.GPU_BACKWARD_CONFIGS[64] == ft.FlashConfig(32, 128, 4, 1, backward="split")
    assert ft.GPU_CONFIGS[32] == before_32  # an untuned head dimension keeps its setting
    assert tables["forward"][64] == [128, 64, 8, 3, "split", "plain"]
    assert tables["backward"][64] == [32, 128, 4, 1, "plain", "split"]
    lines = bench_gpu.config_lines(best)
    assert lines == [
        "GPU_CONFIGS:",
        "    64: FlashConfig(block_m=128, block_n=64, num_warps=8, num_stages=3, "
        "forward='split'),  # 1.500 ms",
        "GPU_BACKWARD_CONFIGS:",
        "    64: FlashConfig(block_m=32, block_n=128, num_warps=4, num_stages=1, "
        "backward='split'),  # 4.000 ms"]


def test_the_backward_mode_times_the_backward_pass_alone():
    g = torch.Generator().manual_seed(3)
    q, k, v, grad = (torch.randn(1, 2, 7, 8, generator=g, dtype=torch.float64)
                     for _ in range(4))
    fn = bench_gpu.make_method("sdpa_math", True, 0.4)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    fn(*leaves).backward(grad)
    backward = bench_gpu.make_call(fn, q, k, v, grad, "backward")
    for _ in range(2):  # every call gives the gradients, not their sum over calls
        for got, want in zip(backward(), leaves, strict=True):
            torch.testing.assert_close(got, want.grad, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="unknown mode 'sideways'"):
        bench_gpu.make_call(fn, q, k, v, grad, "sideways")


def _speed(method, causal, mode, ms, status="ok"):
    return {"kind": "speed", "method": method, "causal": causal, "L": 16384, "mode": mode,
            "status": status, "ms": ms}


def _memory(L, mib):
    return {"kind": "memory", "method": "triton", "causal": False, "L": L,
            "mode": "forward_backward", "status": "ok", "peak_mib": mib}


def test_the_target_verdicts_by_hand():
    rows = [_speed("triton", False, "forward", 10.0), _speed("sdpa_cudnn", False, "forward", 8.0),
            _speed("sdpa_flash", False, "forward", 12.0),
            _speed("sdpa_efficient", False, "forward", 0.1, "unsupported: no"),  # not counted
            _speed("triton", False, "backward", 20.0), _speed("sdpa_flash", False, "backward", 11),
            _speed("sdpa_flash", True, "forward", 5.0),  # no Triton row: not measured
            _memory(4096, 100.0), _memory(8192, 200.0), _memory(16384, 400.0)]
    verdicts = {v["target"]: v for v in bench_gpu.target_verdicts(rows)}
    assert list(verdicts) == ["forward causal=False", "backward causal=False",
                              "forward causal=True", "backward causal=True",
                              "memory linear in L"]
    fwd = verdicts["forward causal=False"]
    assert math.isclose(fwd["value"], 0.8) and fwd["passed"]  # 8 ms cuDNN over 10 ms
    assert "sdpa_cudnn" in fwd["detail"]
    bwd = verdicts["backward causal=False"]
    assert math.isclose(bwd["value"], 0.55) and not bwd["passed"]
    assert verdicts["forward causal=True"]["value"] is None
    assert not verdicts["forward causal=True"]["passed"]
    assert verdicts["memory linear in L"]["passed"]
    assert verdicts["memory linear in L"]["value"] == 0.0
    # a term in L^2 breaks linearity: 100, 240, 640 MiB is 1.0, 1.2 and 1.6 per 4096 keys
    quadratic = rows[:-3] + [_memory(4096, 100.0), _memory(8192, 240.0), _memory(16384, 640.0)]
    memory = bench_gpu.target_verdicts(quadratic)[-1]
    assert math.isclose(memory["value"], 0.6) and not memory["passed"]
    zero = rows[:-3] + [_memory(4096, 0.0), _memory(8192, 0.0)]  # nothing allocated: no verdict
    assert bench_gpu.target_verdicts(zero)[-1]["detail"] == "not measured"


def _triton_ok() -> bool:
    return importlib.util.find_spec("triton") is not None


def _fake_timer(monkeypatch, ft):
    """time_call runs the call once and returns a time that depends on the setting in the
    kernels' tables at that moment (so the autotune's choice is known); peak_mib runs it
    once and returns 1 MiB."""
    def time_call(fn, warmup, repeats):
        fn()
        forward, backward = ft.GPU_CONFIGS[64], ft.GPU_BACKWARD_CONFIGS[64]
        return forward.block_m / 64 + backward.block_n / 16
    monkeypatch.setattr(bench_gpu, "time_call", time_call)
    monkeypatch.setattr(bench_gpu, "peak_mib", lambda fn: (fn(), 1.0)[1])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU run needs the interpreter")
def test_autotune_and_targets_run_end_to_end_on_the_cpu_interpreter(monkeypatch, tmp_path):
    if not _triton_ok():
        pytest.skip("Triton is not installed")
    from attention_src import flash_triton as ft

    monkeypatch.setattr(ft, "GPU_CONFIGS", dict(ft.GPU_CONFIGS))
    monkeypatch.setattr(ft, "GPU_BACKWARD_CONFIGS", dict(ft.GPU_BACKWARD_CONFIGS))
    defaults = dict(ft.GPU_CONFIGS), dict(ft.GPU_BACKWARD_CONFIGS)
    small = {"forward": [ft.FlashConfig(64, 32), ft.FlashConfig(128, 32)],
             "backward": [ft.FlashConfig(32, 64), ft.FlashConfig(32, 16, backward="split")]}
    monkeypatch.setattr(bench_gpu, "autotune_configs", lambda direction="forward":
                        small[direction])
    _fake_timer(monkeypatch, ft)
    args = bench_gpu.parse(["--batch", "1", "--heads", "2", "--compile-workers", "0"])
    rows = bench_gpu.autotune(args, L=24, path=tmp_path / "autotune.csv", head_dims=(64,),
                              device="cpu")
    assert [r["status"] for r in rows] == ["ok"] * 8
    assert all(r["error"] < 1e-2 for r in rows)  # the kernels against SDPA's flash backend
    assert (ft.GPU_CONFIGS, ft.GPU_BACKWARD_CONFIGS) == defaults  # put back after each
    best = bench_gpu.best_configs(bench_gpu.read_csv(tmp_path / "autotune.csv"))
    assert (best[64, "forward"]["block_m"], best[64, "backward"]["block_n"]) == (64, 16)
    assert best[64, "backward"]["backward"] == "split"  # read back from the CSV

    rows = bench_gpu.measure_targets(args, device="cpu", length=32, memory_lengths=[16, 32])
    speed = {(r["method"], r["causal"], r["mode"]): r["status"] for r in rows
             if r["kind"] == "speed"}
    assert len(speed) == 2 * 5 * 2  # causal, methods, modes
    assert all(speed["triton", c, m] == "ok" for c in (False, True)
               for m in ("forward", "backward"))
    assert speed["sdpa_cudnn", False, "forward"].startswith("unsupported: ")  # not on a CPU
    memory = [r for r in rows if r["kind"] == "memory"]
    assert [(r["method"], r["L"]) for r in memory] == [
        ("triton", 16), ("triton", 32), ("sdpa_flash", 16), ("sdpa_flash", 32)]
    assert all(r["error"] < 1e-2 for r in rows
               if r["method"] == "triton" and r["kind"] == "speed")
    memory = bench_gpu.target_verdicts(rows)[-1]  # 1 MiB at L 16 and at L 32: not linear
    assert memory["target"] == "memory linear in L" and math.isclose(memory["value"], 0.5)


def test_the_extra_flags_parse_and_do_nothing_without_cuda(monkeypatch, capsys, tmp_path):
    args = bench_gpu.parse(["--masked-rows", "--decode", "--autotune", "--only"])
    assert args.masked_rows and args.decode and args.autotune and args.only
    assert not bench_gpu.parse([]).only
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_gpu.main(["--decode", "--only", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out == bench_gpu.NO_CUDA + "\n"


def test_a_fast_setting_that_computes_something_else_is_never_chosen(monkeypatch, tmp_path):
    """The autotune checks each setting against SDPA: here the 128-query setting is the
    fastest and doubles the output, so it is marked wrong and the next best is chosen; a
    setting Triton ruled out while compiling is marked failed without being run."""
    if not _triton_ok():
        pytest.skip("Triton is not installed")
    from attention_src import flash_triton as ft

    monkeypatch.setattr(ft, "GPU_CONFIGS", dict(ft.GPU_CONFIGS))
    monkeypatch.setattr(ft, "GPU_BACKWARD_CONFIGS", dict(ft.GPU_BACKWARD_CONFIGS))
    fast_wrong, slow_right, too_big = (ft.FlashConfig(128, 32), ft.FlashConfig(64, 32),
                                       ft.FlashConfig(128, 128))
    monkeypatch.setattr(bench_gpu, "autotune_configs", lambda direction="forward":
                        [fast_wrong, slow_right, too_big] if direction == "forward" else [])
    sdpa = bench_gpu.make_method

    def make_method(name, causal, scale):
        fn = sdpa("sdpa_math", causal, scale)
        if name == "triton":  # doubled by the 128-query setting
            return lambda q, k, v: fn(q, k, v) * (2 if ft.GPU_CONFIGS[16].block_m == 128 else 1)
        return fn
    monkeypatch.setattr(bench_gpu, "make_method", make_method)
    monkeypatch.setattr(bench_gpu, "time_call",
                        lambda fn, w, r: (fn(), ft.GPU_CONFIGS[16].block_m / 64)[1])
    monkeypatch.setattr(bench_gpu, "precompile", lambda jobs, workers: {
        job: "failed: out of resource: shared memory" if job[3] == too_big else "ok"
        for job in jobs})
    args = bench_gpu.parse(["--batch", "1", "--heads", "1", "--compile-workers", "2"])
    rows = bench_gpu.autotune(args, L=8, head_dims=(16,), device="cpu")
    status = {(r["block_m"], r["block_n"]): r["status"] for r in rows}
    assert status[128, 32].startswith("wrong: relative error ")
    assert status[64, 32] == "ok"
    assert status[128, 128] == "failed: out of resource: shared memory"
    assert bench_gpu.best_configs(rows)[16, "forward"]["block_m"] == 64


def test_the_relative_error_sees_a_nan_anywhere_and_has_no_floor():
    want = [torch.full((2, 3), 0.1), torch.ones(2, 3), torch.ones(2, 3)]
    got = [w.clone() for w in want]
    assert bench_gpu.relative_error(got, want) == 0.0
    got[1][0, 0] = math.nan  # in the second gradient: not lost by max()
    assert math.isnan(bench_gpu.relative_error(got, want))
    # a small output off by 0.003: 3 % of its largest entry, a wrong result
    assert math.isclose(bench_gpu.relative_error(want[0] + 0.003, want[0]), 0.03, rel_tol=1e-5)
    assert bench_gpu.relative_error(want[0] + 0.003, want[0]) > bench_gpu.WRONG


def test_the_autotune_reference_falls_back_to_the_math_backend_then_to_none(monkeypatch,
                                                                          capsys):
    g = torch.Generator().manual_seed(4)
    q, k, v, grad = (torch.randn(1, 1, 5, 8, generator=g, dtype=torch.float64)
                     for _ in range(4))
    want = F.scaled_dot_product_attention(q, k, v)
    real = bench_gpu.make_method
    refused = {"sdpa_flash"}

    def make_method(name, causal, scale):
        if name in refused:
            raise RuntimeError(f"{name} refuses these inputs")
        return real(name, causal, scale)
    monkeypatch.setattr(bench_gpu, "make_method", make_method)
    got = bench_gpu.reference_result(q, k, v, grad, False, "forward")
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    refused.add("sdpa_math")
    assert bench_gpu.reference_result(q, k, v, grad, False, "forward") is None
    assert "reference sdpa_math failed: sdpa_math refuses these inputs" in capsys.readouterr().out
