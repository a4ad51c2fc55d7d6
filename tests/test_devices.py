"""The same code on every device (issue 21): each function that makes a tensor takes a
``device`` (or follows its inputs), and gives on that device what it gives on the CPU.

Every test takes the ``device`` fixture of ``tests/conftest.py``: ``"cpu"`` always, ``"cuda"``
when PyTorch sees a GPU (skipped otherwise). The reference is always the CPU result of the
call *without* any device argument, today's behaviour:

* masks, integer data and the data generators must be **equal**, on every device (they are
  drawn on the CPU with the CPU generator and then moved);
* floating-point results must be equal on the CPU (``device="cpu"`` runs the very same
  operations) and, on CUDA, equal within :data:`TOL`: CUDA's kernels (matrix products,
  reductions, ``exp``, ``sin``) round differently from the CPU's in the last bits, so a
  float32 result differs by a few units in the last place and a float64 one by far less.
  Most comparisons run in float64, which also rules out TF32 (that CUDA may use for float32
  products and convolutions).

The ``meta`` device (shapes without data) stands in for a second device on a CPU-only
machine, for the checks that inputs on two devices are refused with a ``ValueError`` naming
both, and that results follow their inputs.
"""

from __future__ import annotations

import math

import pytest
import torch

import attention_src as att
from attention_src import (
    compare,
    data,
    date_alignment,
    efficient,
    graph_tasks,
    head_metrics,
    language_model,
    order_task,
    profiling,
    seq2seq,
    training,
    utils,
    windowed,
)
from attention_src.validation import check_device, check_same_device
from tests.conftest import randn

#: Tolerances of a float result on CUDA against the CPU's (see the module docstring); on the
#: CPU the two must be equal.
TOL = {torch.float32: {"atol": 1e-5, "rtol": 1e-4},
       torch.float64: {"atol": 1e-10, "rtol": 1e-10}}


def same(actual: torch.Tensor, expected: torch.Tensor, device: str) -> None:
    """``actual`` (made on ``device``) is ``expected`` (made on the CPU, today's way): equal on
    the CPU, equal within :data:`TOL` on CUDA; always on a device of type ``device``."""
    assert actual.device.type == device, f"result on {actual.device}, expected {device}"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if device == "cpu" or not actual.is_floating_point():
        assert torch.equal(actual.cpu(), expected), "must equal the CPU result exactly"
    else:
        torch.testing.assert_close(actual.cpu(), expected, **TOL[expected.dtype])


def same_number(actual: float, expected: float, device: str) -> None:
    """A statistic (an accuracy, a share) computed on ``device`` is the CPU's: exactly on the
    CPU; on CUDA within 1e-6 relative, since a GPU sums a mean in another order (an accuracy of
    19/30 came out 0.63333338 on an H200 against 0.63333333 on the CPU, both float32)."""
    if device == "cpu":
        assert actual == expected
    else:
        assert actual == pytest.approx(expected, rel=1e-6, abs=1e-12)


def equal(actual: torch.Tensor, expected: torch.Tensor, device: str) -> None:
    """``actual`` is on ``device`` and equals the CPU's ``expected`` exactly, on every device."""
    assert actual.device.type == device, f"result on {actual.device}, expected {device}"
    assert actual.dtype == expected.dtype
    assert torch.equal(actual.cpu(), expected)


def seeded(seed: int, make):
    """``make()`` right after ``torch.manual_seed(seed)``: a module with known weights."""
    torch.manual_seed(seed)
    return make()


# ----------------------------------------------------------------------------- input checks
@pytest.mark.parametrize("value", ["cpu", torch.device("cpu"), "meta"])
def test_check_device_accepts_names_and_devices(value):
    assert check_device(value) == torch.device(value)
    assert check_device(None) is None


@pytest.mark.parametrize("value", [0, 1.5, b"cpu", ["cpu"]], ids=["int", "float", "bytes", "list"])
def test_check_device_names_the_type_of_anything_else(value):
    with pytest.raises(TypeError, match=rf"^device must be a str or a torch\.device .*"
                                        rf"got {type(value).__name__}$"):
        check_device(value)


def test_check_device_refuses_a_name_that_is_no_device():
    with pytest.raises(ValueError, match=r"^device='gpu0' is not a device name"):
        check_device("gpu0")


def test_check_same_device_names_both_devices():
    cpu, meta = torch.zeros(2), torch.zeros(2, device="meta")
    check_same_device(a=cpu, b=cpu.clone(), c=None)  # one device (None skipped): fine
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got a: cpu, "
                                         r"b: meta$"):
        check_same_device(a=cpu, b=meta)


# ----------------------------------------------------------------------------- pick_device
def test_pick_device_follows_cuda_availability(monkeypatch):
    monkeypatch.delenv(utils.DEVICE_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert utils.pick_device() == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert utils.pick_device() == torch.device("cuda")


def test_pick_device_reads_the_environment_variable_unless_prefer_is_given(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("ATTENTION_DEVICE", "cpu")
    assert utils.pick_device() == torch.device("cpu")  # the variable beats the GPU
    monkeypatch.setenv("ATTENTION_DEVICE", "cuda:0")
    assert utils.pick_device() == torch.device("cuda:0")
    assert utils.pick_device("cpu") == torch.device("cpu")  # prefer beats the variable
    assert utils.pick_device(torch.device("cpu")) == torch.device("cpu")


def test_pick_device_refuses_cuda_where_there_is_none(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("ATTENTION_DEVICE", raising=False)
    with pytest.raises(ValueError, match=r"^prefer='cuda' asks for CUDA, which is not "
                                         r"available here$"):
        utils.pick_device("cuda")
    monkeypatch.setenv("ATTENTION_DEVICE", "cuda")
    with pytest.raises(ValueError, match=r"^\$ATTENTION_DEVICE='cuda' asks for CUDA"):
        utils.pick_device()


def test_pick_device_bad_input(monkeypatch):
    monkeypatch.delenv("ATTENTION_DEVICE", raising=False)
    with pytest.raises(TypeError, match=r"^prefer must be a str or a torch\.device, got int$"):
        utils.pick_device(0)
    with pytest.raises(ValueError, match=r"^prefer='nonsense' is not a device name"):
        utils.pick_device("nonsense")
    monkeypatch.setenv("ATTENTION_DEVICE", "nonsense")
    with pytest.raises(ValueError, match=r"^\$ATTENTION_DEVICE='nonsense' is not a device"):
        utils.pick_device()


def test_pick_device_on_this_machine_is_one_the_fixture_runs(monkeypatch):
    monkeypatch.delenv("ATTENTION_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert utils.pick_device().type == expected


# ----------------------------------------------------------------------------- place
def test_place_draws_on_the_cpu_then_moves(device):
    ref = seeded(0, lambda: torch.nn.Linear(3, 2))
    moved = utils.place(seeded(0, lambda: torch.nn.Linear(3, 2)), device, torch.float64)
    assert utils.module_device(moved).type == device
    equal(moved.weight, ref.weight.double().detach(), device)
    assert utils.place(ref) is ref and ref.weight.dtype == torch.float32  # nothing asked


def test_place_bad_input():
    layer = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device .*got int$"):
        utils.place(layer, 0)
    with pytest.raises(TypeError, match=r"^dtype must be a floating torch\.dtype, got "
                                        r"torch\.int64$"):
        utils.place(layer, "cpu", torch.int64)


def test_module_device_of_modules_with_and_without_tensors():
    assert utils.module_device(torch.nn.ReLU()) == torch.device("cpu")
    assert utils.module_device(torch.nn.Linear(2, 2).to("meta")).type == "meta"
    norm = torch.nn.BatchNorm1d(2, affine=False).to("meta")  # buffers, no parameters
    assert utils.module_device(norm).type == "meta"


# ----------------------------------------------------------------------------- masks
def test_masks_are_made_on_the_device(device):
    equal(att.causal_mask(4, device=device), att.causal_mask(4), device)
    equal(att.causal_mask(3, 5, device=torch.device(device)), att.causal_mask(3, 5), device)
    equal(att.band_mask(6, 2, device=device), att.band_mask(6, 2), device)
    equal(att.band_mask(6, 3, causal=True, device=device), att.band_mask(6, 3, causal=True),
          device)
    lens = torch.tensor([0, 2, 5])
    equal(att.lengths_to_mask(lens.to(device), 5), att.lengths_to_mask(lens, 5), device)


def test_masks_follow_a_device_given_as_meta():
    assert att.causal_mask(3, device="meta").device.type == "meta"
    assert att.band_mask(3, 1, device="meta").shape == (3, 3)


@pytest.mark.parametrize("make", [lambda d: att.causal_mask(3, device=d),
                                  lambda d: att.band_mask(3, 1, device=d)],
                         ids=["causal_mask", "band_mask"])
def test_masks_bad_device(make):
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device .*got int$"):
        make(0)
    with pytest.raises(ValueError, match=r"^device='gpu' is not a device name"):
        make("gpu")


def test_masked_softmax_refuses_a_mask_on_another_device():
    scores = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got scores: cpu, "
                                         r"mask: meta$"):
        att.masked_softmax(scores, torch.ones(2, 3, dtype=torch.bool, device="meta"))


# ----------------------------------------------------------------------------- positions
def test_positional_tables_are_the_cpu_numbers_on_every_device(device):
    # computed on the CPU in float64 and moved: equal, not merely close, on every device
    equal(att.sinusoidal_positional_encoding(7, 6, device=device),
          att.sinusoidal_positional_encoding(7, 6), device)
    equal(att.sinusoidal_positional_encoding(5, 5, dtype=torch.float64, device=device),
          att.sinusoidal_positional_encoding(5, 5, dtype=torch.float64), device)
    from attention_src.positional import shift_rotation
    equal(shift_rotation(3, 4, device=device), shift_rotation(3, 4), device)


def test_positional_tables_bad_device():
    from attention_src.positional import shift_rotation
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device .*got int$"):
        att.sinusoidal_positional_encoding(3, 4, device=1)
    with pytest.raises(ValueError, match=r"^device='gpu' is not a device name"):
        shift_rotation(1, 4, device="gpu")


@pytest.mark.parametrize("positions", [torch.arange(5), torch.arange(5) * 0.5 - 1.0],
                         ids=["integers", "floats"])
def test_apply_rotary_with_positions_on_the_device(device, positions):
    x = randn(0, 2, 3, 5, 8)  # (B, h, L, d) float64
    same(att.apply_rotary(x.to(device), positions.to(device)), att.apply_rotary(x, positions),
         device)
    per_row = torch.arange(10).reshape(2, 1, 5)  # (B, 1, L)
    same(att.apply_rotary(x.to(device), per_row.to(device)), att.apply_rotary(x, per_row),
         device)


def test_apply_rotary_refuses_positions_on_another_device():
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got x: cpu, "
                                         r"positions: meta$"):
        att.apply_rotary(randn(0, 5, 4), torch.arange(5, device="meta"))


def test_apply_rotary_follows_x_to_the_meta_device():
    x = torch.empty(2, 5, 4, device="meta")
    assert att.apply_rotary(x, torch.arange(5, device="meta")).device.type == "meta"


# ----------------------------------------------------------------------------- attention
def test_scaled_dot_product_attention_on_the_device(device):
    q, k, v = randn(0, 2, 4, 3), randn(1, 2, 5, 3), randn(2, 2, 5, 2)
    mask = att.causal_mask(4, 5)
    out, w = att.scaled_dot_product_attention(q, k, v, mask)
    out_d, w_d = att.scaled_dot_product_attention(q.to(device), k.to(device), v.to(device),
                                                  att.causal_mask(4, 5, device=device))
    same(out_d, out, device)
    same(w_d, w, device)


def test_attention_refuses_inputs_on_two_devices():
    q = randn(0, 4, 3)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got query: cpu, "
                                         r"key: meta, value: cpu$"):
        att.scaled_dot_product_attention(q, q.to("meta"), q)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got scores: cpu, "
                                         r"value: meta$"):
        att.attention_from_scores(randn(0, 4, 4), randn(1, 4, 2).to("meta"))


def test_nadaraya_watson_on_the_device(device):
    x, y = data.noisy_curve(20, seed=3)
    query = torch.linspace(0, 5, 7, dtype=torch.float64)
    pred, w = att.nadaraya_watson(query, x, y, 0.5)
    pred_d, w_d = att.nadaraya_watson(query.to(device), x.to(device), y.to(device), 0.5)
    same(pred_d, pred, device)
    same(w_d, w, device)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got query: cpu, "
                                         r"keys: meta$"):
        att.gaussian_kernel_scores(query, x.to("meta"), 0.5)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got keys: cpu, "
                                         r"values: meta$"):
        att.nadaraya_watson(query, x, y.to("meta"), 0.5)


@pytest.mark.parametrize("make", [lambda **kw: att.AdditiveScore(3, 4, 5, **kw),
                                  lambda **kw: att.BilinearScore(3, 4, **kw)],
                         ids=["additive", "bilinear"])
def test_scores_are_built_on_the_device_with_the_cpu_weights(device, make):
    ref = seeded(0, lambda: make(dtype=torch.float64))
    moved = seeded(0, lambda: make(device=device, dtype=torch.float64))
    q, k = randn(0, 2, 3, 3), randn(1, 2, 6, 4)
    same(moved(q.to(device), k.to(device)), ref(q, k), device)
    for p_ref, p_moved in zip(ref.parameters(), moved.parameters(), strict=True):
        equal(p_moved.detach(), p_ref.detach(), device)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got query: cpu, "
                                         r"key: meta$"):
        ref(q, k.to("meta"))


# ----------------------------------------------------------------------------- multi-head
def _mha_pair(device, cls=att.MultiHeadAttention, dtype=torch.float64, **kw):
    """The same module built today's way (then converted) and with ``device=``, ``dtype=``."""
    ref = seeded(0, lambda: cls(8, 2, **kw).to(dtype))
    moved = seeded(0, lambda: cls(8, 2, device=device, dtype=dtype, **kw))
    for p_ref, p_moved in zip(ref.parameters(), moved.parameters(), strict=True):
        equal(p_moved.detach(), p_ref.detach(), device)  # the same weights on every device
    return ref, moved


@pytest.mark.parametrize("cls", [att.MultiHeadAttention, att.PerHeadMultiHeadAttention],
                         ids=["fused", "per_head"])
def test_multihead_attention_on_the_device(device, cls):
    ref, moved = _mha_pair(device, cls)
    q, k = randn(0, 2, 4, 8), randn(1, 2, 5, 8)
    mask = att.causal_mask(4, 5)
    out, w = ref(q, k, k, mask)
    out_d, w_d = moved(q.to(device), k.to(device), k.to(device), mask.to(device))
    same(out_d, out, device)
    same(w_d, w, device)


def test_multihead_attention_float32_on_the_device(device):
    # float32, the default dtype: on CUDA the products round differently in the last bits
    ref, moved = _mha_pair(device, dtype=torch.float32)
    x = randn(0, 2, 5, 8, dtype=torch.float32)
    same(moved(x.to(device), x.to(device), x.to(device))[0], ref(x, x, x)[0], device)


def test_multihead_self_attention_makes_its_causal_mask_on_the_device(device):
    ref, moved = _mha_pair(device, att.MultiHeadSelfAttention)
    x = randn(0, 2, 5, 8)
    pad = att.lengths_to_mask(torch.tensor([5, 3]), 5)[:, None, :]  # (B, 1, L)
    for kw in ({}, {"mask": pad}):
        out, w = ref(x, causal=True, **kw)
        kw_d = {name: m.to(device) for name, m in kw.items()}
        out_d, w_d = moved(x.to(device), causal=True, **kw_d)
        same(out_d, out, device)
        same(w_d, w, device)
    out, _ = ref(x, causal=True, need_weights=False)
    same(moved(x.to(device), causal=True, need_weights=False)[0], out, device)


def test_self_attention_is_built_on_the_device(device):
    ref = seeded(0, lambda: att.SelfAttention(4, 3, 2).double())
    moved = seeded(0, lambda: att.SelfAttention(4, 3, 2, device=device, dtype=torch.float64))
    x = randn(0, 2, 5, 4)
    out, w = ref(x)
    out_d, w_d = moved(x.to(device))
    same(out_d, out, device)
    same(w_d, w, device)


def test_multihead_attention_names_devices_that_differ():
    module = att.MultiHeadAttention(4, 2, device="meta")
    x = torch.zeros(1, 3, 4)
    with pytest.raises(ValueError, match=r"^inputs are on cpu but the module's parameters are "
                                         r"on meta; move one of them"):
        module(x, x, x)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got query: cpu, "
                                         r"key: meta, value: cpu$"):
        att.MultiHeadAttention(4, 2)(x, x.to("meta"), x)
    mhsa = att.MultiHeadSelfAttention(4, 2)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got x: cpu, "
                                         r"mask: meta$"):
        mhsa(x, mask=torch.ones(3, 3, dtype=torch.bool, device="meta"), causal=True)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got query: cpu, "
                                         r"mask: meta$"):
        att.MultiHeadAttention(4, 2)(x, x, x, torch.ones(3, 3, dtype=torch.bool, device="meta"),
                                     need_weights=False)


def test_multihead_attention_bad_device():
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device .*got int$"):
        att.MultiHeadAttention(4, 2, device=0)
    with pytest.raises(TypeError, match=r"^dtype must be a floating torch\.dtype"):
        att.MultiHeadSelfAttention(4, 2, dtype="float64")


def test_multihead_attention_runs_on_meta():
    module = att.MultiHeadSelfAttention(4, 2, device="meta")
    out, w = module(torch.empty(2, 3, 4, device="meta"), causal=True)
    assert out.device.type == "meta" and w.shape == (2, 2, 3, 3)


# ----------------------------------------------------------------------------- transformer
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_and_decoder_blocks_on_the_device(device, norm_first):
    kw = {"norm_first": norm_first, "dtype": torch.float64}
    enc = seeded(0, lambda: att.EncoderBlock(8, 2, 16, **kw)).eval()
    enc_d = seeded(0, lambda: att.EncoderBlock(8, 2, 16, device=device, **kw)).eval()
    dec = seeded(1, lambda: att.DecoderBlock(8, 2, 16, **kw)).eval()
    dec_d = seeded(1, lambda: att.DecoderBlock(8, 2, 16, device=device, **kw)).eval()
    x, memory = randn(0, 2, 5, 8), randn(1, 2, 4, 8)
    pad = att.lengths_to_mask(torch.tensor([5, 2]), 5)[:, None, :]  # (B, 1, L)
    mem_pad = att.lengths_to_mask(torch.tensor([4, 3]), 4)[:, None, :]  # (B, 1, S)
    same(enc_d(x.to(device), pad.to(device)), enc(x, pad), device)
    causal = att.causal_mask(5)
    same(dec_d(x.to(device), memory.to(device), att.causal_mask(5, device=device),
               mem_pad.to(device)),
         dec(x, memory, causal, mem_pad), device)


def test_blocks_name_devices_that_differ():
    block = att.EncoderBlock(4, 2, 8, device="meta")
    with pytest.raises(ValueError, match=r"^x is on cpu but the block's parameters are on "
                                         r"meta; move one of them"):
        block(torch.zeros(1, 3, 4))
    dec = att.DecoderBlock(4, 2, 8)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got x: cpu, "
                                         r"memory: meta$"):
        dec(torch.zeros(1, 3, 4), torch.zeros(1, 2, 4, device="meta"))
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device .*got float$"):
        att.DecoderBlock(4, 2, 8, device=1.0)


# ----------------------------------------------------------------------------- chapter 9
def test_blockwise_and_grouped_query_attention_on_the_device(device):
    q, k, v = randn(0, 2, 4, 9, 3), randn(1, 2, 4, 7, 3), randn(2, 2, 4, 7, 2)
    for causal in (False, True):
        out = att.blockwise_attention(q, k, v, causal, block_size=3, query_block_size=2)
        out_d = att.blockwise_attention(q.to(device), k.to(device), v.to(device), causal,
                                        block_size=3, query_block_size=2)
        same(out_d, out, device)
    k2, v2 = k[:, :2], v[:, :2]  # h_kv = 2 key/value heads for h = 4 query heads
    out = att.grouped_query_attention(q, k2, v2, causal=True, block_size=3)
    out_d = att.grouped_query_attention(q.to(device), k2.to(device), v2.to(device),
                                        causal=True, block_size=3)
    same(out_d, out, device)


def _language_model(device=None, seed=0):
    return seeded(seed, lambda: language_model.AttentionOnlyTransformer(
        11, 8, 2, 2, max_len=12, device=device, dtype=torch.float64))


def test_kv_cache_on_the_device(device):
    cache, cache_d = efficient.KVCache(), efficient.KVCache()
    for step in range(3):
        k, v = randn(step, 1, 2, 2, 3), randn(step + 9, 1, 2, 2, 4)
        keys, values = cache.append(k, v)
        keys_d, values_d = cache_d.append(k.to(device), v.to(device))
        equal(keys_d, keys, device)
        equal(values_d, values, device)


@pytest.mark.parametrize("use_cache", [True, False], ids=["cached", "uncached"])
def test_generate_on_the_device(device, use_cache):
    model, model_d = _language_model(), _language_model(device)
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    tokens, logits = efficient.generate(model, prompt, 6, use_cache=use_cache)
    tokens_d, logits_d = efficient.generate(model_d, prompt.to(device), 6, use_cache=use_cache)
    equal(tokens_d, tokens, device)  # float64 logits: no near-tie flips the argmax
    same(logits_d, logits, device)


def test_language_model_analyses_on_the_device(device):
    model, model_d = _language_model(), _language_model(device)
    tokens = data.repeated_segments(3, length=12, vocab_size=11, segment_len=3, seed=1).tokens
    tokens_d = tokens.to(device)
    targets = torch.ones(3, 11, dtype=torch.bool)
    logits, weights = model(tokens, return_weights=True)
    logits_d, weights_d = model_d(tokens_d, return_weights=True)
    same(logits_d, logits, device)
    same(weights_d[1], weights[1], device)
    ablated = language_model.head_ablation_losses(model, tokens, targets, 0)
    ablated_d = language_model.head_ablation_losses(model_d, tokens_d, targets.to(device), 0)
    for name in ablated:
        same(ablated_d[name], ablated[name], device)
    same(language_model.path_ablation_rises(model_d, tokens_d, targets.to(device)),
         language_model.path_ablation_rises(model, tokens, targets), device)
    same(language_model.mean_ablated_logits(model_d, tokens_d, [(0, 1)], tokens_d),
         language_model.mean_ablated_logits(model, tokens, [(0, 1)], tokens), device)
    heads_d, heads = weights_d[1].transpose(0, 1), weights[1].transpose(0, 1)  # (h, B, L, L)
    same(language_model.prefix_matching_score(heads_d, tokens_d),
         language_model.prefix_matching_score(heads, tokens), device)


def test_train_language_model_moves_the_batches_to_the_model(device):
    def batches(step):  # on the CPU, as a chapter draws them
        return data.repeated_segments(4, length=10, vocab_size=11, segment_len=3,
                                      seed=step).tokens

    eval_tokens = batches(100)
    runs = []
    for dev in (None, device):
        model = _language_model(dev)
        runs.append(language_model.train_language_model(
            model, batches, 3, eval_tokens=eval_tokens, eval_every=2,
            on_eval=lambda step, logits, weights: {"device": logits.device.type,
                                                   "loss": float(logits.sum())}))
    ref, run = runs
    same(run["losses"].to(device), ref["losses"], device)
    assert [e["device"] for _, e in run["evals"]] == [device] * 3
    for (_, e), (_, e_ref) in zip(run["evals"], ref["evals"], strict=True):
        # a sum of 440 float64 logits: abs_tol too, for a sum near 0
        assert math.isclose(e["loss"], e_ref["loss"], rel_tol=1e-9, abs_tol=1e-9)


# ----------------------------------------------------------------------------- graphs
@pytest.mark.parametrize("cls", [att.GraphAttention, att.GraphAttentionV2], ids=["gat", "gatv2"])
def test_graph_attention_on_the_device(device, cls):
    ref = seeded(0, lambda: cls(5, 3, heads=2, dtype=torch.float64))
    moved = seeded(0, lambda: cls(5, 3, heads=2, device=device, dtype=torch.float64))
    x = randn(0, 6, 5)
    edges = torch.tensor([[0, 1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 0, 3]])
    out, (e, alpha) = ref(x, edges, return_attention=True)
    out_d, (e_d, alpha_d) = moved(x.to(device), edges.to(device), return_attention=True)
    same(out_d, out, device)
    equal(e_d, e, device)
    same(alpha_d, alpha, device)
    same(att.attention_to_dense(e_d, alpha_d, 6), att.attention_to_dense(e, alpha, 6), device)


def test_graph_attention_names_devices_that_differ():
    layer = att.GraphAttention(2, 2, device="meta")
    edges = torch.tensor([[0], [1]])
    with pytest.raises(ValueError, match=r"^x is on cpu but the layer's parameters are on "
                                         r"meta; move one of them"):
        layer(torch.zeros(2, 2), edges)
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got x: cpu, "
                                         r"edge_index: meta$"):
        att.GraphAttentionV2(2, 2)(torch.zeros(2, 2), edges.to("meta"))


def test_graph_data_generators_on_the_device(device):
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    ref, moved = graph_tasks.lookup_batch(3, 2, gen()), graph_tasks.lookup_batch(
        3, 2, gen(), device=device)
    for a, b in zip(moved, ref, strict=True):
        equal(a, b, device)
    karate, karate_d = graph_tasks.karate_club(), graph_tasks.karate_club(device=device)
    for a, b in zip(karate_d, karate, strict=True):
        equal(a, b, device)
    points = randn(0, 9, 2)
    equal(graph_tasks.knn_graph(points.to(device), 3, symmetric=True),
          graph_tasks.knn_graph(points, 3, symmetric=True), device)


def test_digits_graph_on_the_device(device):
    ref, moved = graph_tasks.digits_graph(k=3), graph_tasks.digits_graph(k=3, device=device)
    for a, b in zip(moved, ref, strict=True):
        equal(a, b, device)


def test_graph_training_and_measurements_on_the_device(device):
    data_cpu = graph_tasks.karate_club()
    results = []
    for dev in (None, device):
        model = seeded(0, lambda dev=dev: graph_tasks.NodeClassifier(
            "gatv2", 34, 4, dropout=0.0, device=dev, dtype=torch.float64))
        graph = data_cpu._replace(x=data_cpu.x.double())  # stays on the CPU: the loop moves it
        results.append(graph_tasks.train_node_classifier(model, graph, steps=5))
    ref, run = results
    same_number(run["train_acc"], ref["train_acc"], device)
    same_number(run["test_acc"], ref["test_acc"], device)
    torch.testing.assert_close(torch.tensor(run["loss"]), torch.tensor(ref["loss"]),
                               **TOL[torch.float64])
    lookups = []
    for dev in (None, device):  # float32: the lookup graphs are float32
        model = seeded(1, lambda dev=dev: graph_tasks.LookupModel(
            "gat", 3, hidden=4, heads=2, device=dev))
        losses = graph_tasks.train_lookup(model, steps=3, batch=4)
        probe = graph_tasks.lookup_batch(3, 5, torch.Generator().manual_seed(7),
                                         device=utils.module_device(model))
        lookups.append((losses, graph_tasks.lookup_accuracy(model, batch=5),
                        graph_tasks.asked_key_hits(model, probe)[1]))
    (loss_ref, acc_ref, weight_ref), (loss, acc, weight) = lookups
    torch.testing.assert_close(torch.tensor(loss), torch.tensor(loss_ref), **TOL[torch.float32])
    torch.testing.assert_close(torch.tensor(weight), torch.tensor(weight_ref),
                               **TOL[torch.float32])
    if device == "cpu":  # on CUDA a near-tie of two logits may flip an argmax
        assert acc == acc_ref


def test_graph_measurements_follow_their_inputs(device):
    edges = torch.tensor([[0, 1, 2, 0], [1, 2, 0, 2]])
    alpha = torch.tensor([[1.0], [0.5], [1.0], [0.5]], dtype=torch.float64)
    same(graph_tasks.attention_entropy(edges.to(device), alpha.to(device), 3),
         graph_tasks.attention_entropy(edges, alpha, 3), device)
    same(graph_tasks.uniform_entropy(edges.to(device), 3), graph_tasks.uniform_entropy(edges, 3),
         device)
    a, mask = randn(0, 4, 5), torch.rand(4, 5, generator=torch.Generator().manual_seed(0)) < 0.8
    same_number(graph_tasks.ranking_consistency(a.to(device), mask.to(device)),
                graph_tasks.ranking_consistency(a, mask), device)
    layout = graph_tasks.spring_layout(edges, 3, iterations=5)
    assert (graph_tasks.spring_layout(edges.to(device), 3, iterations=5) == layout).all()
    logits, y = randn(1, 4, 3), torch.tensor([0, 1, 2, 0])
    train = torch.tensor([True, True, False, True])
    same_number(graph_tasks.accuracy(logits.to(device), y.to(device), train.to(device)),
                graph_tasks.accuracy(logits, y, train), device)


def test_graph_measurements_name_devices_that_differ():
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got attention: cpu, "
                                         r"mask: meta$"):
        graph_tasks.ranking_consistency(randn(0, 2, 2), torch.ones(2, 2, dtype=torch.bool,
                                                                   device="meta"))
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got logits: cpu, "
                                         r"y: cpu, mask: meta$"):
        graph_tasks.accuracy(randn(0, 2, 2), torch.tensor([0, 1]),
                             torch.ones(2, dtype=torch.bool, device="meta"))
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device"):
        graph_tasks.lookup_batch(2, 1, torch.Generator(), device=3)
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device, got "
                                        r"NoneType$"):
        graph_tasks.karate_club().to(None)


# ----------------------------------------------------------------------------- data
def test_data_generators_give_the_cpu_data_on_every_device(device):
    seg, seg_d = data.repeated_segments(4, seed=5), data.repeated_segments(4, seed=5,
                                                                           device=device)
    for name in ("tokens", "repeated", "first", "second"):
        equal(getattr(seg_d, name), getattr(seg, name), device)
    for a, b in zip(data.offset_copy_task(5, seed=2, device=device),
                    data.offset_copy_task(5, seed=2), strict=True):
        equal(a, b, device)
    stream, stream_d = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    for _ in range(2):  # a stream of batches from one generator
        for a, b in zip(data.offset_copy_task(3, seed=stream_d, device=device),
                        data.offset_copy_task(3, seed=stream), strict=True):
            equal(a, b, device)
    for a, b in zip(data.noisy_curve(9, seed=1, device=device), data.noisy_curve(9, seed=1),
                    strict=True):
        equal(a, b, device)
    equal(data.running_example(device=device).embeddings, data.running_example().embeddings,
          device)
    gen, gen_d = torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)
    for a, b in zip(order_task.previous_token_task(4, 5, 9, gen_d, device=device),
                    order_task.previous_token_task(4, 5, 9, gen), strict=True):
        equal(a, b, device)


def test_encoded_pairs_and_the_date_task_on_the_device(device):
    src_vocab, tgt_vocab = data.Vocab("abc"), data.Vocab("abc")
    pairs = data.reverse_task(6, 1, 4, num_symbols=3, seed=0)
    ref = data.encode_pairs(pairs, src_vocab, tgt_vocab)
    moved = data.encode_pairs(pairs, src_vocab, tgt_vocab, device=device)
    for name in ("src", "src_len", "tgt_in", "tgt_out"):
        equal(getattr(moved, name), getattr(ref, name), device)
    task = data.date_translation_task(n_train=30, n_test=5, draw=20)
    task_d = data.date_translation_task(n_train=30, n_test=5, draw=20, device=device)
    assert task_d.train_pairs == task.train_pairs and task_d.test_pairs == task.test_pairs
    for part in ("train_set", "test_set"):
        for name in ("src", "src_len", "tgt_in", "tgt_out"):
            equal(getattr(getattr(task_d, part), name), getattr(getattr(task, part), name),
                  device)


@pytest.mark.parametrize("make", [
    lambda d: data.repeated_segments(2, device=d),
    lambda d: data.offset_copy_task(2, device=d),
    lambda d: data.noisy_curve(2, device=d),
    lambda d: data.running_example(device=d),
    lambda d: data.encode_pairs([("a", "a")], data.Vocab("a"), data.Vocab("a"), device=d),
    lambda d: order_task.previous_token_task(2, 2, 3, device=d),
], ids=["repeated_segments", "offset_copy_task", "noisy_curve", "running_example",
        "encode_pairs", "previous_token_task"])
def test_data_generators_bad_device(make):
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device .*got int$"):
        make(0)
    with pytest.raises(ValueError, match=r"^device='gpu' is not a device name"):
        make("gpu")


def test_sequence_pairs_to_bad_device():
    pairs = data.encode_pairs([("a", "a")], data.Vocab("a"), data.Vocab("a"))
    assert pairs.to("meta").src.device.type == "meta"
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device, got "
                                        r"NoneType$"):
        pairs.to(None)


# ----------------------------------------------------------------------------- chapters 4-5
def test_windowed_attention_and_band_to_dense_on_the_device(device):
    q, k, v = randn(0, 2, 7, 3), randn(1, 2, 7, 3), randn(2, 2, 7, 2)
    for causal in (False, True):
        out, w = windowed.windowed_attention(q, k, v, 2, causal)
        out_d, w_d = windowed.windowed_attention(q.to(device), k.to(device), v.to(device), 2,
                                                 causal)
        same(out_d, out, device)
        same(w_d, w, device)
        same(windowed.band_to_dense(w_d, 2, causal), windowed.band_to_dense(w, 2, causal),
             device)


def test_band_to_dense_follows_its_weights_to_meta():
    dense = windowed.band_to_dense(torch.empty(2, 5, 3, device="meta"), 2)
    assert dense.device.type == "meta" and dense.shape == (2, 5, 5)


def test_head_metrics_on_the_device(device):
    w = torch.softmax(randn(0, 2, 4, 5), dim=-1)
    same(head_metrics.attention_entropy(w.to(device)), head_metrics.attention_entropy(w),
         device)
    offsets, profile = head_metrics.offset_profile(w)
    offsets_d, profile_d = head_metrics.offset_profile(w.to(device))
    equal(offsets_d, offsets, device)
    same(profile_d, profile, device)
    equal(head_metrics.preferred_offset(w.to(device)), head_metrics.preferred_offset(w), device)
    ref, moved = _mha_pair(device, att.MultiHeadSelfAttention)
    x = randn(1, 2, 5, 8)
    with head_metrics.ablate_heads(ref, [1]):
        out = ref(x)[0]
    with head_metrics.ablate_heads(moved, [1]):
        out_d = moved(x.to(device))[0]
    same(out_d, out, device)


def test_train_offset_reader_on_the_device(device):
    runs = []
    for dev in (None, device):
        model = seeded(0, lambda dev=dev: head_metrics.OffsetReader(
            8, 6, 8, 2, device=dev, dtype=torch.float64))
        losses = head_metrics.train_offset_reader(model, (-1, 2), steps=3, batch_size=4)
        tokens, _ = data.offset_copy_task(3, 6, 8, (-1, 2), seed=1)
        logits, _ = model(tokens.to(utils.module_device(model)))
        runs.append((losses, logits))
    (loss_ref, logits_ref), (losses, logits) = runs
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(loss_ref), **TOL[torch.float64])
    same(logits, logits_ref.detach(), device)


def test_order_task_on_the_device(device):
    kwargs = {"steps": 3, "batch_size": 4, "length": 5, "vocab_size": 7, "d_model": 6}
    model, losses = order_task.train_order_model("rotary", 11, **kwargs)
    model_d, losses_d = order_task.train_order_model("rotary", 11, device=device, **kwargs)
    assert utils.module_device(model_d).type == device
    torch.testing.assert_close(torch.tensor(losses_d), torch.tensor(losses),
                               **TOL[torch.float32])
    tokens, targets = order_task.previous_token_task(6, 5, 7,
                                                     torch.Generator().manual_seed(2))
    # the accuracy of the device model on CPU batches (it moves them) is the CPU model's; in
    # float32 on CUDA a near-tie of two logits may flip one of the 24 predictions
    gap = abs(order_task.order_accuracy(model_d, tokens, targets)
              - order_task.order_accuracy(model, tokens, targets))
    assert gap == 0 if device == "cpu" else gap <= 1 / 24 + 1e-12


# ----------------------------------------------------------------------------- chapters 1-2
def _seq2seq(device=None):
    return seq2seq.build_gru_seq2seq(6, 4, 5, attention=True, seed=3, device=device).double()


def test_seq2seq_training_and_evaluation_on_the_device(device):
    pairs = data.reverse_task(12, 1, 4, num_symbols=3, seed=0)
    vocab = data.Vocab("abc")
    encoded = data.encode_pairs(pairs, vocab, vocab)  # stays on the CPU: the loops move it
    results = []
    for dev in (None, device):
        model = _seq2seq(dev)
        losses = training.train_seq2seq(model, encoded, steps=3, batch_size=4)
        loss = training.teacher_forced_loss(model, encoded)
        token_acc, exact = training.seq2seq_accuracy(model, encoded)
        results.append((losses, loss, token_acc, exact))
    (losses_ref, loss_ref, acc_ref, exact_ref), (losses, loss, acc, exact) = results
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(losses_ref),
                               **TOL[torch.float64])
    assert math.isclose(loss, loss_ref, rel_tol=1e-9)
    same(acc, acc_ref, "cpu")  # the results come back on the data's device
    equal(exact, exact_ref, "cpu")
    by_len = training.mean_by_length(acc.to(device), encoded.src_len.to(device))
    for a, b in zip(by_len, training.mean_by_length(acc_ref, encoded.src_len), strict=True):
        same(a, b, device)


def test_seq2seq_decodes_on_the_device_with_lengths_on_either_device(device):
    model, model_d = _seq2seq(), _seq2seq(device)
    src = torch.tensor([[3, 4, 5], [5, 3, 0]])
    src_len = torch.tensor([3, 2])
    tokens, weights = model.greedy_decode(src, src_len, 4, bos_id=1)
    for lengths in (src_len, src_len.to(device)):  # CPU lengths, as pack_padded_sequence wants
        tokens_d, weights_d = model_d.greedy_decode(src.to(device), lengths, 4, bos_id=1)
        equal(tokens_d, tokens, device)
        same(weights_d, weights, device)


def test_mean_by_length_names_devices_that_differ():
    with pytest.raises(ValueError, match=r"^inputs must be on one device, got values: cpu, "
                                         r"lengths: meta$"):
        training.mean_by_length(torch.ones(2), torch.ones(2, dtype=torch.long, device="meta"))


def test_field_attention_mass_on_the_device(device):
    sources = ["july 19, 2020", "19.07.2020"]
    w = torch.softmax(randn(0, 2, 11, 13), dim=-1)
    mass, chance = date_alignment.field_attention_mass(w, sources)
    mass_d, chance_d = date_alignment.field_attention_mass(w.to(device), sources)
    assert chance_d == chance
    for name in mass:
        same(mass_d[name], mass[name], device)


# ----------------------------------------------------------------------------- chapter 7
def test_compare_on_the_device(device):
    for kind in compare.KINDS:
        assert compare.path_length(kind, 9, device=device) == compare.path_length(kind, 9)
    stack = seeded(0, lambda: compare.make_stack("restricted", 2, 4, dtype=torch.float64))
    stack_d = seeded(0, lambda: compare.make_stack("restricted", 2, 4, device=device,
                                                   dtype=torch.float64))
    x = randn(0, 2, 6, 4)
    same(stack_d(x.to(device)), stack(x), device)


def test_train_pixel_classifier_on_the_device(device):
    images = torch.rand(20, 8, 8, generator=torch.Generator().manual_seed(0),
                        dtype=torch.float64)
    labels = torch.arange(20) % 10
    runs = []
    for dev in (None, device):
        model = seeded(0, lambda dev=dev: compare.PixelClassifier(
            "attention", d=4, device=dev, dtype=torch.float64))
        runs.append(compare.train_pixel_classifier(model, images, labels, torch.arange(16),
                                                   seed=1, steps=3, batch=5))
    torch.testing.assert_close(torch.tensor(runs[1]), torch.tensor(runs[0]),
                               **TOL[torch.float64])


def test_compare_bad_device():
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device .*got int$"):
        compare.path_length("recurrent", 3, device=0)
    with pytest.raises(TypeError, match=r"^device must be a str or a torch\.device .*got int$"):
        compare.PixelClassifier("attention", device=0)


# ----------------------------------------------------------------------------- profiling
def test_profiling_timers_take_a_cpu_device():
    calls = []

    def fn():
        calls.append(1)
        return torch.ones(3).sum()

    for device in (None, "cpu", torch.device("cpu")):
        assert profiling.best_ms(fn, repeats=2, device=device) >= 0.0
        out, cost = profiling.measure_call(fn, device=device)
        assert float(out) == 3.0 and cost.cpu_ms >= 0.0
        assert profiling.median_cost(fn, repeats=1, device=device).wall_ms >= 0.0
        times = profiling.best_ms_interleaved({"a": fn, "b": fn}, rounds=1, device=device)
        assert list(times) == ["a", "b"] and min(times.values()) >= 0.0
    assert profiling.cuda_to_sync("cpu") is None and profiling.cuda_to_sync(None) is None


@pytest.mark.parametrize("timer", [
    lambda d: profiling.best_ms(lambda: None, device=d),
    lambda d: profiling.measure_call(lambda: None, device=d),
    lambda d: profiling.median_cost(lambda: None, device=d),
    lambda d: profiling.best_ms_interleaved({"a": lambda: None}, device=d),
], ids=["best_ms", "measure_call", "median_cost", "best_ms_interleaved"])
def test_profiling_timers_bad_device(timer, monkeypatch):
    with pytest.raises(TypeError, match=r"^device must be None, a str or a torch\.device, got "
                                        r"int$"):
        timer(0)
    with pytest.raises(ValueError, match=r"^device 'gpu' is not a device name"):
        timer("gpu")
    with pytest.raises(ValueError, match=r"^timing supports CPU and CUDA devices, got device "
                                         r"meta$"):
        timer("meta")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^device cuda was asked for, but CUDA is not "
                                         r"available here$"):
        timer("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_profiling_timers_wait_for_the_gpu():
    """On CUDA the timers wait for the kernels, so a product that takes the GPU a measurable
    time is timed at more than its launch: 8 products of 4096 x 4096 matrices in float32 are
    5.5e11 multiply-adds (1.1e12 floating-point operations), over 10 ms below 110 TFLOP/s
    (an H100 or H200 does about 60 in float32 without TF32, PyTorch's default for products);
    their launches take well under a millisecond."""
    a = torch.randn(4096, 4096, device="cuda")

    def work():
        for _ in range(8):
            a @ a

    assert profiling.cuda_to_sync("cuda") == torch.device("cuda")
    assert profiling.best_ms(work, repeats=2, device="cuda") > 10.0
    _, cost = profiling.measure_call(work, device="cuda")
    assert cost.wall_ms > 10.0
    assert profiling.median_cost(work, repeats=1, device="cuda").wall_ms > 10.0
    assert profiling.best_ms_interleaved({"work": work}, rounds=1, device="cuda")["work"] > 10.0


# ----------------------------------------------------------------------------- meta stand-in
@pytest.mark.parametrize("make", [
    lambda: att.SelfAttention(4, 3, 2, device="meta"),
    lambda: att.MultiHeadAttention(4, 2, device="meta"),
    lambda: att.PerHeadMultiHeadAttention(4, 2, device="meta"),
    lambda: att.EncoderBlock(4, 2, 8, device="meta"),
    lambda: att.DecoderBlock(4, 2, 8, device="meta"),
    lambda: att.GraphAttention(3, 2, heads=2, device="meta"),
    lambda: att.GraphAttentionV2(3, 2, device="meta"),
    lambda: att.AdditiveScore(2, 3, 4, device="meta"),
    lambda: att.BilinearScore(2, 3, device="meta"),
    lambda: head_metrics.OffsetReader(5, 4, 4, 2, device="meta"),
    lambda: order_task.OrderSelfAttention(5, 4, "sinusoidal", device="meta"),
    lambda: language_model.AttentionOnlyTransformer(5, 4, 2, 1, 6, device="meta"),
    lambda: graph_tasks.MeanAggregation(3, 2, device="meta"),
    lambda: graph_tasks.NodeClassifier("gat", 3, 2, device="meta"),
    lambda: graph_tasks.LookupModel("gatv2", 2, device="meta"),
    lambda: compare.PixelClassifier("convolution", d=2, device="meta"),
    lambda: compare.make_stack("recurrent", 2, 3, device="meta"),
    lambda: seq2seq.build_gru_seq2seq(5, 3, 4, attention=True, device="meta"),
    lambda: seq2seq.build_scored_seq2seq(5, 6, 3, 4, lambda: att.BilinearScore(8, 8),
                                         device="meta"),
], ids=["SelfAttention", "MultiHeadAttention", "PerHeadMultiHeadAttention", "EncoderBlock",
        "DecoderBlock", "GraphAttention", "GraphAttentionV2", "AdditiveScore", "BilinearScore",
        "OffsetReader", "OrderSelfAttention", "AttentionOnlyTransformer", "MeanAggregation",
        "NodeClassifier", "LookupModel", "PixelClassifier", "make_stack", "build_gru_seq2seq",
        "build_scored_seq2seq"])
def test_modules_are_placed_on_the_device_they_are_given(make):
    """On a CPU-only machine ``meta`` stands in for the GPU: every parameter and buffer of a
    module built with ``device=`` is there."""
    module = make()
    tensors = [*module.parameters(), *module.buffers()]
    assert tensors and all(t.device.type == "meta" for t in tensors)


@pytest.mark.parametrize("make", [
    lambda: att.sinusoidal_positional_encoding(3, 4, device="meta"),
    lambda: data.repeated_segments(2, device="meta").tokens,
    lambda: data.offset_copy_task(2, device="meta")[1],
    lambda: data.noisy_curve(3, device="meta")[1],
    lambda: data.running_example(device="meta").embeddings,
    lambda: order_task.previous_token_task(2, 3, 4, device="meta")[0],
    lambda: graph_tasks.lookup_batch(2, 1, torch.Generator(), device="meta").x,
    lambda: graph_tasks.karate_club(device="meta").edge_index,
    lambda: windowed.band_to_dense(torch.empty(3, 1, device="meta"), 1),
], ids=["sinusoidal", "repeated_segments", "offset_copy_task", "noisy_curve",
        "running_example", "previous_token_task", "lookup_batch", "karate_club",
        "band_to_dense"])
def test_tensors_are_made_on_the_device_they_are_given_or_follow(make):
    assert make().device.type == "meta"


@pytest.mark.parametrize("make", [
    lambda **kw: compare.SelfAttentionLayer(3, **kw),
    lambda **kw: compare.RestrictedSelfAttentionLayer(3, 2, **kw),
    lambda **kw: compare.RecurrentLayer(3, **kw),
    lambda **kw: compare.LSTMLayer(3, forget_bias=1.0, **kw),
    lambda **kw: compare.ConvLayer(3, 2, centred=False, **kw),
], ids=["SelfAttentionLayer", "RestrictedSelfAttentionLayer", "RecurrentLayer", "LSTMLayer",
        "ConvLayer"])
def test_compare_layers_on_the_device(device, make):
    ref = seeded(0, lambda: make(dtype=torch.float64))
    moved = seeded(0, lambda: make(device=device, dtype=torch.float64))
    for p_ref, p_moved in zip(ref.parameters(), moved.parameters(), strict=True):
        equal(p_moved.detach(), p_ref.detach(), device)
    x = randn(0, 2, 5, 3)
    same(moved(x.to(device)).detach(), ref(x).detach(), device)


def test_seq2seq_modules_on_the_device(device):
    def build(**kw):
        torch.manual_seed(0)
        encoder = seq2seq.GRUEncoder(6, 3, 4, **kw)
        decoder = seq2seq.AttentionDecoder(6, 3, 5, encoder.output_dim,
                                           att.AdditiveScore(5, 8, 4, **kw), **kw)
        context = seq2seq.ContextDecoder(6, 3, 5, encoder.output_dim, **kw)
        return seq2seq.Seq2Seq(encoder, decoder, **kw), seq2seq.Seq2Seq(encoder, context, **kw)

    refs, moved = build(dtype=torch.float64), build(device=device, dtype=torch.float64)
    src, src_len = torch.tensor([[3, 4, 5], [5, 3, 0]]), torch.tensor([3, 2])
    tgt_in = torch.tensor([[1, 3, 4], [1, 5, 0]])
    for ref, model in zip(refs, moved, strict=True):
        logits, weights = ref(src, src_len, tgt_in)
        logits_d, weights_d = model(src.to(device), src_len, tgt_in.to(device))
        same(logits_d.detach(), logits.detach(), device)
        if weights is not None:
            same(weights_d.detach(), weights.detach(), device)
