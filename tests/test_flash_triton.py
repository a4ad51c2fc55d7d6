"""attention_src.flash_triton: FlashAttention's Triton kernels, run by Triton's interpreter.

Without a GPU the kernels run under ``TRITON_INTERPRET=1`` on CPU tensors (set below, before
the module is imported, since Triton reads it when a kernel is defined); with one, natively on
CUDA tensors (the ``device`` parameter follows what is available). Skipped without Triton.

References, each computed differently from the kernels: ``F.scaled_dot_product_attention``
in float64 on the same (exactly representable) inputs, and in the inputs' own dtype;
``torch.logsumexp`` of the materialised scaled scores; the book's
``efficient.blockwise_attention`` (a consistency check between two implementations of the
same tile loop, not an independent reference).

Tolerances, against the float64 reference, on outputs and the gradients of q, k and v:

* float32: ``|x - ref| <= 1e-5 + 1e-5 |ref|`` (the kernels multiply float32 tiles in full
  precision, ``input_precision="ieee"``, and accumulate in float32). Measured on the CPU: at
  most 9e-7 on values of order 1, except dQ and dK with a single key (exactly 0, computed as
  ``P (dP - D)`` with ``dP = D``): 3.8e-6 and 5.8e-6, where SDPA in float32 gives 1.3e-6 and
  3.4e-6.
* float16 / bfloat16: ``max |x - ref| <= tol * max(1, max |ref|)`` with ``tol`` = 1e-3 /
  8e-3 (about 2 units in the last place of the output; measured at most 3.9e-4 / 2.2e-3
  relative to the largest entry, SDPA in that dtype 6.8e-4 / 4.3e-3), *and* no more than
  twice the error of SDPA run in that dtype plus one unit of rounding. Under the
  interpreter bfloat16 is computed from float32 copies (NumPy has no bfloat16), so its
  error is mostly the rounding of the results.

Sizes are small (the interpreter runs every program in turn with NumPy): the whole file takes
about 20 s on one CPU core.
"""

from __future__ import annotations

import _thread
import ast
import importlib.util
import inspect
import math
import os
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():  # before the kernels are defined: run them on the CPU
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

from attention_src import flash_triton  # noqa: E402
from attention_src.efficient import blockwise_attention  # noqa: E402
from attention_src.flash_triton import flash_attention, flash_attention_lse  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: Where the kernels run: CPU tensors under the interpreter, CUDA tensors when compiled.
DEVICES = [
    pytest.param("cpu", id="cpu", marks=pytest.mark.skipif(
        not flash_triton.INTERPRETED,
        reason="the kernels are compiled for the GPU (TRITON_INTERPRET is not 1)")),
    pytest.param("cuda", id="cuda", marks=pytest.mark.skipif(
        not torch.cuda.is_available(), reason="CUDA is not available on this machine")),
]

#: float16 / bfloat16: the bound on max |x - ref| relative to max(1, max |ref|).
HALF_TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
#: One unit of rounding (2 ** -mantissa bits) of each dtype.
UNIT = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


def inputs(seed, B, h, L_q, L_k, d, dtype=torch.float32, device="cpu"):
    """``q (B, h, L_q, d)``, ``k, v (B, h, L_k, d)``, ``grad (B, h, L_q, d)``: standard
    normal, drawn on the CPU in float32, then rounded to ``dtype`` and moved."""
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, h, L_q, d), (B, h, L_k, d), (B, h, L_k, d), (B, h, L_q, d)]
    return [torch.randn(s, generator=g).to(dtype).to(device) for s in shapes]


def forward_backward(fn, q, k, v, grad, **kwargs):
    """``[output, dq, dk, dv]`` of ``fn(q, k, v, **kwargs)`` with upstream gradient ``grad``."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = fn(q, k, v, **kwargs)
    out.backward(grad.to(out.dtype))
    return [out.detach(), q.grad, k.grad, v.grad]


def sdpa(q, k, v, causal=False, scale=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def flash(q, k, v, causal=False, scale=None, **blocks):
    return flash_attention(q, k, v, causal, scale, **blocks)


def _line_of(function, text: str) -> int:
    """The line number of the first line of ``function`` that contains ``text``."""
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


#: Where the fallback's warnings should point: the lines that call into flash_triton.
FLASH_CALL_LINE = _line_of(flash, "return flash_attention(")
BACKWARD_CALL_LINE = _line_of(forward_backward, "out.backward(")


def reference(q, k, v, grad, causal=False, scale=None):
    """SDPA in float64 on the CPU, on the same values: ``[output, dq, dk, dv]``."""
    q, k, v, grad = (t.detach().cpu().double() for t in (q, k, v, grad))
    return forward_backward(sdpa, q, k, v, grad, causal=causal, scale=scale)


NAMES = ("output", "dq", "dk", "dv")


# ------------------------------------------------------------------- against SDPA, float32


@pytest.mark.parametrize(
    ("causal", "L_q", "L_k", "d", "blocks"),
    [
        (False, 70, 70, 16, {}),  # ragged last tiles (70 = 4 * 16 + 6), 5 x 5 tiles
        (True, 70, 70, 24, {}),  # causal: tiles above the diagonal skipped; d padded to 32
        (False, 17, 70, 64, {}),  # L_q != L_k
        (False, 70, 1, 128, {}),  # one key
        (True, 1, 1, 16, {}),  # one query
        (True, 17, 17, 128, {}),  # d = 128, the largest head dimension
        (True, 70, 70, 16, {"block_m": 32, "block_n": 16}),  # a query tile over 2 key tiles
        (True, 70, 70, 16, {"block_m": 16, "block_n": 32}),  # a key tile over 2 query tiles
    ],
)
def test_float32_output_and_gradients_match_sdpa_in_float64(device, causal, L_q, L_k, d,
                                                             blocks):
    q, k, v, grad = inputs(L_q + L_k + d, 1, 2, L_q, L_k, d, device=device)
    got = forward_backward(flash, q, k, v, grad, causal=causal, **blocks)
    want = reference(q, k, v, grad, causal)
    for name, x, ref in zip(NAMES, got, want, strict=True):
        assert x.dtype == torch.float32 and x.device.type == device, name
        torch.testing.assert_close(x.cpu().double(), ref, rtol=1e-5, atol=1e-5, msg=name)


def test_batch_and_heads_are_independent_and_scale_is_used(device):
    """B = 2, h = 3 (six programs per block row) and a scale other than 1 / sqrt(d)."""
    q, k, v, grad = inputs(7, 2, 3, 20, 20, 32, device=device)
    got = forward_backward(flash, q, k, v, grad, causal=True, scale=0.3)
    want = reference(q, k, v, grad, causal=True, scale=0.3)
    for name, x, ref in zip(NAMES, got, want, strict=True):
        torch.testing.assert_close(x.cpu().double(), ref, rtol=1e-5, atol=1e-5, msg=name)


def test_non_contiguous_inputs_give_the_same_result(device):
    """(B, L, h, d) tensors seen as (B, h, L, d), the layout a projection gives."""
    q, k, v, _ = inputs(3, 1, 2, 24, 24, 16, device=device)
    q_t, k_t, v_t = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    assert not q_t.is_contiguous()
    assert torch.equal(flash(q_t, k_t, v_t), flash(q, k, v))


# --------------------------------------------------------------- float16 and bfloat16


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize(("causal", "L_q", "L_k", "d"),
                         [(False, 17, 70, 64), (True, 70, 70, 24)])
def test_half_precision_matches_float64_and_sdpa_in_that_dtype(device, dtype, causal, L_q,
                                                               L_k, d):
    q, k, v, grad = inputs(L_q * d, 1, 2, L_q, L_k, d, dtype=dtype, device=device)
    got = forward_backward(flash, q, k, v, grad, causal=causal)
    same_dtype = forward_backward(sdpa, q, k, v, grad, causal=causal)
    want = reference(q, k, v, grad, causal)
    for name, x, y, ref in zip(NAMES, got, same_dtype, want, strict=True):
        assert x.dtype == dtype, name
        size = max(1.0, ref.abs().max().item())
        err = (x.cpu().double() - ref).abs().max().item()
        err_sdpa = (y.cpu().double() - ref).abs().max().item()
        assert err <= HALF_TOL[dtype] * size, (name, err, size)
        assert err <= 2 * err_sdpa + UNIT[dtype] * size, (name, err, err_sdpa)


# ------------------------------------------------------------------- the log-sum-exp


@pytest.mark.parametrize(("causal", "L", "scale"), [(False, 37, None), (True, 37, 0.7)])
def test_saved_log_sum_exp_is_logsumexp_of_the_scaled_scores(device, causal, L, scale):
    q, k, v, _ = inputs(11, 1, 2, L, L, 24, device=device)
    out, lse = flash_attention_lse(q, k, v, causal, scale)
    assert lse.shape == (1, 2, L) and lse.dtype == torch.float32 and not lse.requires_grad
    scores = (q.double() @ k.double().transpose(-2, -1)).cpu() * (scale or 1 / math.sqrt(24))
    if causal:
        hidden = torch.ones(L, L, dtype=torch.bool).triu(1)  # key j > query i
        scores = scores.masked_fill(hidden, -math.inf)
    torch.testing.assert_close(lse.cpu().double(), torch.logsumexp(scores, dim=-1),
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(out, flash(q, k, v, causal, scale))


# ------------------------------------------------------------------------ properties


def test_permuting_keys_and_values_together_leaves_the_output_unchanged(device):
    q, k, v, _ = inputs(5, 1, 2, 20, 45, 16, device=device)
    perm = torch.randperm(45, generator=torch.Generator().manual_seed(0)).to(device)
    torch.testing.assert_close(flash(q, k[:, :, perm], v[:, :, perm]), flash(q, k, v),
                               rtol=1e-5, atol=1e-6)


def test_causal_rows_do_not_see_later_keys_or_values(device):
    """Changing the keys and values after position t leaves rows 0..t exactly as they were,
    the diagonal tile's hidden entries included (t = 20 falls inside the second tile)."""
    q, k, v, _ = inputs(9, 1, 2, 40, 40, 16, device=device)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 21:] = 100.0
    v2[:, :, 21:] = -100.0
    before, after = flash(q, k, v, causal=True), flash(q, k2, v2, causal=True)
    assert torch.equal(before[:, :, :21], after[:, :, :21])
    assert not torch.equal(before[:, :, 21:], after[:, :, 21:])


def test_no_key_gives_zeros_and_zero_gradients(device):
    q, k, v, grad = inputs(1, 1, 2, 5, 0, 16, device=device)
    out, dq, dk, dv = forward_backward(flash, q, k, v, grad)
    assert out.shape == (1, 2, 5, 16) and not out.any() and not dq.any()
    assert dk.shape == dv.shape == (1, 2, 0, 16)
    _, lse = flash_attention_lse(q, k, v)
    assert torch.all(lse == -math.inf)
    assert flash(q[:, :, :0], q[:, :, :0], q[:, :, :0], causal=True).shape == (1, 2, 0, 16)


# -------------------------------------------------- the book's blockwise attention


def test_consistent_with_the_books_blockwise_attention(device):
    """Two implementations of the same tile loop (not an independent reference): the kernels
    in float32 against ``efficient.blockwise_attention`` in float64 and in float32, with the
    same tiles (16 x 16), causal, forward and backward."""
    q, k, v, grad = inputs(21, 1, 2, 40, 40, 16, device=device)
    got = forward_backward(flash, q, k, v, grad, causal=True)
    for dtype in (torch.float64, torch.float32):
        x = [t.detach().cpu().to(dtype) for t in (q, k, v, grad)]
        book = forward_backward(blockwise_attention, *x, causal=True, block_size=16,
                                query_block_size=16)
        for name, a, b in zip(NAMES, got, book, strict=True):
            torch.testing.assert_close(a.cpu().double(), b.double(), rtol=1e-5, atol=1e-5,
                                       msg=f"{name} against {dtype}")


# ------------------------------------------------------------------------- bad input


def _qkv(shape_q=(1, 2, 8, 16), shape_k=(1, 2, 8, 16), shape_v=None, dtype=torch.float32):
    shape_v = shape_k if shape_v is None else shape_v
    return [torch.zeros(s, dtype=dtype) for s in (shape_q, shape_k, shape_v)]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        (_qkv((2, 8, 16), (2, 8, 16)), {}, ValueError, r"4 dimensions, got shape \(2, 8, 16\)"),
        (_qkv((1, 1, 2, 8, 16), (1, 1, 2, 8, 16)), {}, ValueError,
         r"query must have shape \(B, h, L, d\), 4 dimensions, got shape \(1, 1, 2, 8, 16\)"),
        (_qkv((1, 2, 8, 8), (1, 2, 8, 8)), {}, ValueError, r"16 to 128, got d = 8"),
        (_qkv((1, 2, 8, 136), (1, 2, 8, 136)), {}, ValueError, r"16 to 128, got d = 136"),
        (_qkv(dtype=torch.float64), {}, TypeError, "float16, bfloat16 or float32"),
        (_qkv(dtype=torch.int64), {}, TypeError, "floating-point tensor"),
        ([torch.zeros(1, 2, 8, 16), torch.zeros(1, 2, 8, 16, dtype=torch.float16),
          torch.zeros(1, 2, 8, 16)], {}, TypeError, "share one dtype"),
        ([torch.zeros(1, 2, 8, 16), torch.zeros(1, 2, 8, 16, device="meta"),
          torch.zeros(1, 2, 8, 16)], {}, ValueError, "one device"),
        (_qkv((1, 2, 8, 16), (1, 3, 8, 16)), {}, ValueError, "batch and head sizes"),
        (_qkv((2, 2, 8, 16), (1, 2, 8, 16)), {}, ValueError, "batch and head sizes"),
        (_qkv(shape_v=(1, 2, 9, 16)), {}, ValueError, "same length L_k"),
        (_qkv(shape_v=(1, 2, 8, 32)), {}, ValueError, "same head dimension d"),
        (_qkv((1, 2, 8, 16), (1, 2, 9, 16)), {"causal": True}, ValueError,
         r"causal=True needs L_q == L_k, got L_q = 8, L_k = 9"),
        (_qkv(), {"causal": 1}, TypeError, "causal must be a bool, got int 1"),
        (_qkv(), {"fit": "no"}, TypeError, "fit must be a bool, got str 'no'"),
        (_qkv(), {"fit": 1}, TypeError, "fit must be a bool, got int 1"),
        (_qkv(), {"scale": 0.0}, ValueError, "scale must be a positive finite number"),
        (_qkv(), {"scale": -1.0}, ValueError, "scale must be a positive finite number"),
        (_qkv(), {"scale": math.nan}, ValueError, "scale must be a positive finite number"),
        (_qkv(), {"scale": math.inf}, ValueError, "scale must be a positive finite number"),
        (_qkv(), {"scale": "0.1"}, TypeError, "scale must be a Python float or int, or None, "
         "got str '0.1'"),
        (_qkv(), {"scale": True}, TypeError, "scale must be a Python float or int, or None"),
        (_qkv(), {"scale": np.float32(0.1)}, TypeError,
         r"got numpy.float32 .*; convert it with float\(scale\)"),
        (_qkv(), {"block_m": 24}, ValueError, "block_m must be a power of two >= 16"),
        (_qkv(), {"block_n": 8}, ValueError, "block_n must be a power of two >= 16"),
        (_qkv(), {"block_m": 16.0}, TypeError, "block_m must be an int, got float 16.0"),
        ([[0.0] * 16, *_qkv()[1:]], {}, TypeError, "query must be a torch.Tensor"),
    ],
    ids=["rank-3", "rank-5", "d-8", "d-136", "float64", "int64", "dtypes", "devices", "heads",
         "batch", "value-length", "value-dim", "causal-lengths", "causal-int", "fit-str",
         "fit-int", "scale-0",
         "scale-neg", "scale-nan", "scale-inf", "scale-str", "scale-bool", "scale-numpy-float32",
         "block-m-24",
         "block-n-8", "block-m-float", "list"],
)
def test_bad_input_is_refused_with_a_named_error(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        flash_attention(*args, **kwargs)


def test_a_device_the_kernels_cannot_run_on_is_refused(monkeypatch):
    monkeypatch.setattr(flash_triton, "INTERPRETED", True)  # as if interpreted (checks only)
    with pytest.raises(ValueError, match="interpreter runs on CPU tensors, got device meta"):
        flash_attention(*(t.to("meta") for t in _qkv()))
    monkeypatch.setattr(flash_triton, "INTERPRETED", False)  # as if compiled for a GPU
    with pytest.raises(ValueError, match="compiled for the GPU and take CUDA tensors, got "
                                         "device cpu; to run them on the CPU set TRITON_INT"):
        flash_attention(*_qkv())


def test_float32_tiles_are_multiplied_in_full_precision():
    """On a GPU, Triton's default for float32 tiles is TensorFloat-32 (inputs rounded to a
    10-bit mantissa, ~1e-3 relative), too coarse for the float32 tolerance above; the
    interpreter multiplies in float32 whatever the setting, so only the setting is checked
    here (the float32 tests check its effect when a GPU runs them)."""
    assert flash_triton._precision(torch.float32) == "ieee"
    assert flash_triton._precision(torch.float16) == flash_triton._precision(torch.bfloat16)


def test_second_derivatives_are_refused(device):
    q, k, v, _ = inputs(2, 1, 1, 4, 4, 16, device=device)
    q.requires_grad_()
    out = flash(q, k, v)
    (dq,) = torch.autograd.grad(out.sum(), q, create_graph=False)
    assert dq.shape == q.shape
    with pytest.raises(NotImplementedError, match="first-order gradients only"):
        torch.autograd.grad(flash(q, k, v).sum(), q, create_graph=True)


# ------------------------------------------------------------- settings and import


def test_default_config_small_tiles_interpreted_and_the_gpu_table_by_head_dim(monkeypatch):
    monkeypatch.setattr(flash_triton, "INTERPRETED", True)
    assert flash_triton.default_config(24) == flash_triton.INTERPRETER_CONFIG
    assert flash_triton.INTERPRETER_CONFIG[:2] == (16, 16)
    monkeypatch.setattr(flash_triton, "INTERPRETED", False)
    assert flash_triton.default_config(24) is flash_triton.GPU_CONFIGS[32]
    assert flash_triton.default_config(128) is flash_triton.GPU_CONFIGS[128]
    assert sorted(flash_triton.GPU_CONFIGS) == [16, 32, 64, 128]
    # the backward kernels read their own table
    monkeypatch.setitem(flash_triton.GPU_BACKWARD_CONFIGS, 64, flash_triton.FlashConfig(32, 16))
    assert flash_triton.default_config(40, backward=True) == flash_triton.FlashConfig(32, 16)
    assert flash_triton.default_config(40) is flash_triton.GPU_CONFIGS[64]
    assert sorted(flash_triton.GPU_BACKWARD_CONFIGS) == [16, 32, 64, 128]
    # float32 on a GPU: one moderate setting (the tables were tuned in float16)
    for backward in (False, True):
        assert flash_triton.default_config(
            128, backward, dtype=torch.float32) is flash_triton.GPU_FLOAT32_CONFIG
        assert flash_triton.default_config(
            128, backward, dtype=torch.bfloat16) is flash_triton.default_config(128, backward)
    assert flash_triton.GPU_FLOAT32_CONFIG[:2] == (64, 64)
    monkeypatch.setattr(flash_triton, "INTERPRETED", True)
    assert flash_triton.default_config(128, dtype=torch.float32) == \
        flash_triton.INTERPRETER_CONFIG


def test_the_backward_kernels_are_launched_with_the_backward_settings(monkeypatch, device):
    """Distinct forward and backward tiles: each pass gets its own, and the gradients still
    match SDPA's (float64 reference)."""
    forward_tiles = flash_triton.FlashConfig(block_m=32, block_n=16)
    backward_tiles = flash_triton.FlashConfig(block_m=16, block_n=32)
    monkeypatch.setattr(flash_triton, "default_config",
                        lambda d, backward=False, **_: (backward_tiles if backward
                                                        else forward_tiles))
    seen = {}
    for name in ("_forward", "_backward"):
        launch = getattr(flash_triton, name)

        def spy(*args, _launch=launch, _name=name):
            seen[_name] = args[-1]  # the config, the last argument of both
            return _launch(*args)
        monkeypatch.setattr(flash_triton, name, spy)
    q, k, v, grad = inputs(5, 1, 2, 45, 45, 24, device=device)
    got = forward_backward(flash, q, k, v, grad, causal=True)
    assert seen == {"_forward": forward_tiles, "_backward": backward_tiles}
    for x, ref in zip(got, reference(q, k, v, grad, causal=True), strict=True):
        torch.testing.assert_close(x.cpu().double(), ref, rtol=1e-5, atol=1e-5)
    # tile sizes given to the call replace both passes' tiles
    forward_backward(flash, q, k, v, grad, causal=True, block_m=16, block_n=16)
    assert {c[:2] for c in seen.values()} == {(16, 16)}


def test_only_this_module_imports_triton():
    """``import attention_src`` must work without Triton."""
    for path in sorted((ROOT / "attention_src").glob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                names |= {f"{node.module}.{a.name}" for a in node.names}
        uses_triton = any(n.startswith("triton") or "flash_triton" in n for n in names)
        assert uses_triton == (path.name == "flash_triton.py"), path.name


def _load_copy(monkeypatch):
    """Execute flash_triton.py afresh as another module, with Triton made unimportable."""
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.language", None)
    spec = importlib.util.spec_from_file_location(
        "flash_triton_copy", ROOT / "attention_src" / "flash_triton.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


def test_without_triton_the_import_error_says_pip_install_triton(monkeypatch):
    with pytest.raises(ImportError, match="needs Triton, which is not installed: pip install "
                                          "triton"):
        _load_copy(monkeypatch)


def test_without_a_gpu_the_module_sets_triton_interpret_before_defining_kernels(monkeypatch):
    # set, then removed: monkeypatch restores the variable as it was (unset on a GPU
    # machine) however the module under test changes it
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ImportError, match="pip install triton"):
        _load_copy(monkeypatch)  # stops at the import of Triton, after the environment
    assert os.environ["TRITON_INTERPRET"] == "1"
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # set by the user: left alone
    with pytest.raises(ImportError, match="pip install triton"):
        _load_copy(monkeypatch)
    assert os.environ["TRITON_INTERPRET"] == "0"


def test_triton_imported_before_the_variable_is_an_import_error(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # recorded, so restored afterwards
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    spec = importlib.util.spec_from_file_location(
        "flash_triton_copy", ROOT / "attention_src" / "flash_triton.py")
    with pytest.raises(ImportError, match="Triton was imported before TRITON_INTERPRET=1"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert "TRITON_INTERPRET" not in os.environ


# ------------------------------------------------- the split forward kernel, beside the plain


@pytest.mark.parametrize(("causal", "L_q", "L_k", "d", "block_m", "block_n"), [
    (False, 45, 45, 32, 16, 16),  # ragged last key block, every feature real
    (False, 20, 70, 24, 16, 32),  # L_q != L_k, padding features, taller key blocks
    (True, 45, 45, 32, 16, 16),
    (True, 64, 64, 24, 32, 16),  # two key blocks per query block: one whole, one diagonal
    (True, 50, 50, 16, 16, 32),  # a key block wider than a query block
], ids=["full-ragged", "Lq<Lk-d24", "causal-ragged", "causal-32x16", "causal-16x32"])
def test_the_split_forward_kernel_gives_the_plain_kernels_numbers(monkeypatch, device, causal,
                                                                  L_q, L_k, d, block_m,
                                                                  block_n):
    """Same tiles in the same order, masks only where needed, causal blocks in reverse:
    under the interpreter every output and log-sum-exp is bit for bit the plain kernel's;
    compiled, within float32 rounding. Gradients (the same backward) match SDPA's."""
    q, k, v, grad = inputs(11, 2, 2, L_q, L_k, d, device=device)
    tiles = flash_triton.FlashConfig(block_m, block_n)
    outs = {}
    for kernel in flash_triton.FORWARD_KERNELS:
        monkeypatch.setattr(flash_triton, "default_config",
                            lambda head_dim, backward=False, _k=kernel, **_: tiles._replace(
                                forward=_k))
        outs[kernel] = flash_attention_lse(q, k, v, causal)
    for plain, split in zip(outs["plain"], outs["split"], strict=True):
        if flash_triton.INTERPRETED:
            assert torch.equal(plain, split)
        else:
            torch.testing.assert_close(split, plain, rtol=1e-6, atol=1e-6)
    got = forward_backward(flash, q, k, v, grad, causal=causal)
    for x, ref in zip(got, reference(q, k, v, grad, causal=causal), strict=True):
        torch.testing.assert_close(x.cpu().double(), ref, rtol=1e-5, atol=1e-5)


def test_an_unknown_forward_kernel_is_named(monkeypatch):
    monkeypatch.setattr(flash_triton, "default_config",
                        lambda head_dim, backward=False, **_: flash_triton.FlashConfig(
                            16, 16, forward="fused"))
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="unknown forward kernel 'fused'"):
        flash_attention(q, k, v)


# ---------------------------------------------- the split backward kernels, beside the plain


@pytest.mark.parametrize(("causal", "L_q", "L_k", "d", "block_m", "block_n"), [
    (False, 45, 45, 32, 16, 16),  # ragged last query and key blocks, every feature real
    (False, 20, 70, 24, 16, 32),  # L_q != L_k, padding features, taller key blocks
    (True, 45, 45, 32, 16, 16),
    (True, 64, 64, 24, 32, 16),  # a query block wider than a key block: one diagonal block
    (True, 50, 50, 16, 16, 32),  # a key block wider than a query block: two diagonal blocks
    (True, 40, 40, 32, 32, 16),  # the diagonal blocks run past L_q (the bound is clamped)
], ids=["full-ragged", "Lq<Lk-d24", "causal-ragged", "causal-32x16", "causal-16x32",
        "causal-clamped"])
def test_the_split_backward_kernels_give_the_plain_kernels_gradients(monkeypatch, device,
                                                                     causal, L_q, L_k, d,
                                                                     block_m, block_n):
    """Same tiles in the same order, masks only where needed, causal query blocks of the dQ
    kernel in reverse: under the interpreter every gradient is bit for bit the plain
    kernels'; compiled, within float32 rounding; and both match SDPA's."""
    q, k, v, grad = inputs(13, 2, 2, L_q, L_k, d, device=device)
    tiles = flash_triton.FlashConfig(block_m, block_n)
    grads = {}
    for kernel in flash_triton.BACKWARD_KERNELS:
        monkeypatch.setattr(flash_triton, "default_config",
                            lambda head_dim, backward=False, _k=kernel, **_: tiles._replace(
                                backward=_k))
        grads[kernel] = forward_backward(flash, q, k, v, grad, causal=causal)
    for plain, split in zip(grads["plain"], grads["split"], strict=True):
        if flash_triton.INTERPRETED:
            assert torch.equal(plain, split)
        else:
            torch.testing.assert_close(split, plain, rtol=1e-6, atol=1e-6)
    for x, ref in zip(grads["split"], reference(q, k, v, grad, causal=causal), strict=True):
        torch.testing.assert_close(x.cpu().double(), ref, rtol=1e-5, atol=1e-5)


def test_an_unknown_backward_kernel_is_named(monkeypatch):
    monkeypatch.setattr(flash_triton, "default_config",
                        lambda head_dim, backward=False, **_: flash_triton.FlashConfig(
                            16, 16, backward="atomic"))
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="unknown backward kernel 'atomic'"):
        flash_attention(q, k, v)
    with pytest.raises(ValueError, match="unknown backward kernel 'atomic'"):
        flash_triton._backward(*(torch.zeros(1, 16, 16),) * 5, torch.zeros(1, 16), False,
                               0.25, flash_triton.FlashConfig(16, 16, backward="atomic"))


def test_flash_attention_asks_for_the_settings_of_its_dtype(monkeypatch, device):
    """float32 inputs get float32's settings on a GPU (the tables were tuned in float16):
    the call passes its dtype to default_config, for each pass."""
    seen = []
    real = flash_triton.default_config

    def spy(head_dim, backward=False, dtype=torch.float16):
        seen.append((head_dim, backward, dtype))
        return real(head_dim, backward, dtype)
    monkeypatch.setattr(flash_triton, "default_config", spy)
    for dtype in (torch.float32, torch.float16):
        flash_attention(*(t.to(device) for t in _qkv(dtype=dtype)))
    assert seen == [(16, False, torch.float32), (16, True, torch.float32),
                    (16, False, torch.float16), (16, True, torch.float16)]


def test_chosen_small_query_tiles_get_one_backward_stage_on_a_gpu(monkeypatch):
    """Compiled, half precision, tiles the caller chose with fewer than 64 queries: the
    backward runs with one pipeline stage (two stages gave wrong gradients on an H200);
    float32, 64-query tiles and the tables' own settings are left alone."""
    seen = []

    def apply(q, k, v, causal, scale, config, backward_config, fit):
        seen.append(backward_config)
        return torch.zeros_like(q), torch.zeros(q.shape[:2])
    monkeypatch.setattr(flash_triton._FlashAttention, "apply", apply)
    monkeypatch.setattr(flash_triton, "_check_runnable", lambda device: None)
    monkeypatch.setattr(flash_triton, "_kernel_dtype", lambda dtype: dtype)
    monkeypatch.setattr(flash_triton, "INTERPRETED", False)
    monkeypatch.setitem(flash_triton.GPU_BACKWARD_CONFIGS, 16,
                        flash_triton.FlashConfig(32, 64, 4, 2, backward="split"))
    for dtype, block_m in ((torch.float16, 32), (torch.bfloat16, 16), (torch.float16, 64),
                           (torch.float32, 32), (torch.float16, None)):
        flash_attention(*_qkv(dtype=dtype), block_m=block_m)
    assert [c.num_stages for c in seen] == [1, 1, 2, 2, 2]
    assert seen[0] == flash_triton.FlashConfig(32, 64, 4, 1, backward="split")
    assert seen[-1] == flash_triton.GPU_BACKWARD_CONFIGS[16]  # the table's, unchanged


# ------------------------------------------- a GPU with less shared memory than the tables'


def _gpu_with_little_shared_memory(monkeypatch, limit):
    """Launches as on a GPU that refuses every setting whose ``block_m * block_n *
    num_stages`` exceeds ``limit[pass]`` (Triton's ``OutOfResources``, as a compiled launch
    raises it; the interpreter never does); ``limit`` may be changed between calls. The
    tables' setting for every head dimension is 64 x 64 with three stages. Returns the
    settings each pass was launched with, in order."""
    from triton.runtime import OutOfResources

    big = flash_triton.FlashConfig(block_m=64, block_n=64, num_warps=4, num_stages=3)
    monkeypatch.setattr(flash_triton, "default_config", lambda d, backward=False, **_: big)
    monkeypatch.setattr(flash_triton, "_FITTED", {})
    launched = {"_forward": [], "_backward": []}
    for name in launched:
        real = getattr(flash_triton, name)

        def refusing(*args, _real=real, _name=name):
            config = args[-1]
            launched[_name].append(config[:4])
            size = config.block_m * config.block_n * config.num_stages
            if size > limit[_name]:
                raise OutOfResources(size * 256, limit[_name] * 256, "shared memory")
            return _real(*args)
        monkeypatch.setattr(flash_triton, name, refusing)
    return launched


#: What the fallback tries from the tables' 64 x 64 x 3 down to 32 x 32 with one stage.
TRIED = [(64, 64, 4, 3), (64, 64, 4, 2), (64, 32, 4, 1), (32, 32, 4, 1)]


def test_the_tables_tiles_too_large_for_the_gpu_fall_back_to_smaller_ones_once(monkeypatch,
                                                                                device):
    """Refused settings are tried in turn until one fits; the result is still attention (the
    float64 reference); a warning names both settings; the next call launches the fitting
    one directly, without a warning; another head dimension, dtype or mask starts again from
    the table's setting."""
    limit = {"_forward": 32 * 32, "_backward": 32 * 32}
    launched = _gpu_with_little_shared_memory(monkeypatch, limit)
    q, k, v, grad = inputs(8, 1, 2, 45, 45, 24, device=device)
    with pytest.warns(RuntimeWarning, match=r"forward kernels' tiles of 64 x 64 with 3 "
                      r"stage\(s\).*run with 32 x 32 and 1 stage") as forward_warning:
        with pytest.warns(RuntimeWarning, match=r"backward kernels' tiles of 64 x 64") as \
                backward_warning:
            got = forward_backward(flash, q, k, v, grad, causal=True)
    assert launched == {"_forward": TRIED, "_backward": TRIED}
    # the inner block records both warnings (and passes the forward one on to the outer)
    where = {str(w.message).split(" kernels'")[0].split()[-1]: (w.filename, w.lineno)
             for w in backward_warning}  # "forward" or "backward": (file, line)
    assert [(w.filename, w.lineno) for w in forward_warning] == [where["forward"]]
    # the forward warning names the caller's line: flash's call of flash_attention
    assert where["forward"] == (__file__, FLASH_CALL_LINE)
    if device == "cpu":  # the backward runs on this thread: the line of out.backward(...)
        assert where["backward"] == (__file__, BACKWARD_CALL_LINE)
    for x, ref in zip(got, reference(q, k, v, grad, causal=True), strict=True):
        torch.testing.assert_close(x.cpu().double(), ref, rtol=1e-5, atol=1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        forward_backward(flash, q, k, v, grad, causal=True)
    assert launched["_forward"][4:] == launched["_backward"][4:] == [(32, 32, 4, 1)]
    for kind in ({"causal": False}, {"d": 32}, {"dtype": torch.float16}):
        before = len(launched["_forward"])
        qq, kk, vv, _ = inputs(8, 1, 2, 45, 45, kind.get("d", 24),
                               dtype=kind.get("dtype", torch.float32), device=device)
        with pytest.warns(RuntimeWarning):
            flash(qq, kk, vv, causal=kind.get("causal", True))
        assert launched["_forward"][before:] == TRIED, kind


def test_a_backward_on_a_thread_of_its_own_warns_at_this_modules_line(monkeypatch, device):
    """On a GPU the autograd engine runs the backward pass on a thread of its own, whose
    stack holds only torch and flash_triton: the warning then names flash_triton's line
    (the caller's caller of the warning), not a line of torch. Reproduced on the CPU with a
    bare thread that starts in torch's ``Tensor.backward``."""
    limit = {"_forward": 64 * 64 * 3, "_backward": 32 * 32}  # the forward fits
    _gpu_with_little_shared_memory(monkeypatch, limit)
    q, k, v, grad = inputs(11, 1, 1, 20, 20, 16, device=device)
    q.requires_grad_()
    out = flash(q, k, v)
    with pytest.warns(RuntimeWarning, match="backward kernels' tiles") as record:
        _thread.start_new_thread(torch.Tensor.backward, (out, grad))  # no Python caller
        deadline = time.monotonic() + 120
        while q.grad is None and time.monotonic() < deadline:
            time.sleep(0.01)
    assert q.grad is not None, "the backward pass on its own thread did not finish"
    assert [os.path.basename(w.filename) for w in record] == ["flash_triton.py"]
    assert record[0].lineno == _line_of(flash_triton._FlashAttention.backward,
                                        "_launch_fitting(")


def test_a_remembered_setting_the_gpu_refuses_later_falls_back_further(monkeypatch, device):
    """The kernel compiled for a call depends on more than the remembered key (the lengths):
    a remembered setting that is refused is followed by the smaller ones, not an error."""
    limit = {"_forward": 64 * 64 * 2, "_backward": 64 * 64 * 2}
    launched = _gpu_with_little_shared_memory(monkeypatch, limit)
    q, k, v, _ = inputs(10, 1, 1, 20, 20, 16, device=device)
    with pytest.warns(RuntimeWarning, match=r"run with 64 x 64 and 2 stage"):
        flash(q, k, v)
    limit["_forward"] = 32 * 32
    with pytest.warns(RuntimeWarning, match=r"run with 32 x 32 and 1 stage"):
        got = flash(q, k, v)
    assert launched["_forward"] == [*TRIED[:2], *TRIED[1:]]
    torch.testing.assert_close(got.double(), sdpa(q.double(), k.double(), v.double()),
                               rtol=1e-5, atol=1e-5)


def test_tiles_the_caller_chose_or_fit_false_run_as_given(monkeypatch, device):
    """A caller's tiles (both, or one of them) run as given in both passes, refused or not,
    and so do the tables' with ``fit=False``; when even 16 x 16 with one stage does not fit,
    the last refusal is raised; an error other than a refusal is not retried."""
    from triton.runtime import OutOfResources

    q, k, v, grad = inputs(9, 1, 1, 20, 20, 16, device=device)
    limit = {"_forward": 32 * 32, "_backward": 32 * 32}
    launched = _gpu_with_little_shared_memory(monkeypatch, limit)
    for blocks in ({"block_m": 64, "block_n": 64}, {"block_m": 64}, {"block_n": 64},
                   {"fit": False}):
        before = len(launched["_forward"])
        with pytest.raises(OutOfResources, match=r"shared memory, Required: 3145728"):
            flash(q, k, v, **blocks)
        assert launched["_forward"][before:] == [(64, 64, 4, 3)], blocks
    # the forward fits and the backward is refused: the backward keeps the caller's tiles
    limit["_forward"] = 64 * 64 * 3
    with pytest.raises(OutOfResources, match=r"shared memory, Required: 3145728"):
        forward_backward(flash, q, k, v, grad, block_m=64, block_n=64)
    assert launched["_backward"] == [(64, 64, 4, 3)]
    limit["_forward"] = 16 * 16 - 1
    with pytest.raises(OutOfResources, match=r"Required: 65536, Hardware limit: 65280"):
        flash(q, k, v)
    assert launched["_forward"][-1] == (16, 16, 4, 1)
    # any other error: raised at once
    calls = []

    def broken(*args):
        calls.append(args[-1])
        raise RuntimeError("an unrelated failure")
    monkeypatch.setattr(flash_triton, "_forward", broken)
    with pytest.raises(RuntimeError, match="an unrelated failure"):
        flash(q, k, v)
    assert len(calls) == 1


def test_the_smaller_settings_shrink_and_keep_the_kernels():
    """Each fallback uses no larger tiles and no more stages than the one before; tiles of
    fewer than 64 queries get one stage (32-query tiles with two gave wrong gradients on an
    H200); the refused setting's kernels are kept."""
    configs = flash_triton.SMALLER_CONFIGS
    for a, b in zip(configs[:-1], configs[1:], strict=True):
        assert b.block_m <= a.block_m and b.block_n <= a.block_n
        assert b.num_stages <= a.num_stages and b[:4] != a[:4]
    assert all(c.num_stages == 1 for c in configs if c.block_m < 64)
    split = flash_triton.FlashConfig(128, 64, 8, 3, forward="split", backward="split")
    smaller = flash_triton._smaller_configs(split)
    assert [c[:4] for c in smaller] == [c[:4] for c in configs]
    assert {(c.forward, c.backward) for c in smaller} == {("split", "split")}
    # a setting already among them is not retried, nor larger tiles, nor more stages
    assert [c[:4] for c in flash_triton._smaller_configs(configs[1])] == \
        [c[:4] for c in configs[2:]]
    one_stage = flash_triton.FlashConfig(64, 64, 4, 1)
    assert [c[:4] for c in flash_triton._smaller_configs(one_stage)] == \
        [c[:4] for c in configs[1:]]
    narrow = flash_triton.FlashConfig(128, 32, 4, 3)
    assert [c[:4] for c in flash_triton._smaller_configs(narrow)] == \
        [c[:4] for c in configs[1:]]
