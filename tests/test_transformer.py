"""EncoderBlock, DecoderBlock, to_torch_encoder_layer and to_torch_decoder_layer
(attention_src.transformer).

Peers: ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer(batch_first=True)`` with
copied weights. Their boolean masks mean the OPPOSITE of ours (True = blocked): pass ``~mask``,
a per-sequence padding mask as ``*_key_padding_mask`` ``(B, L)``. Independent of PyTorch: the
blocks recomputed step by step from their parameters with plain tensor operations.
Properties: permutation equivariance, causality (zero gradient from the future), dropout
statistics.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

import attention_src as att
from attention_src.softmax import causal_mask, lengths_to_mask
from attention_src.transformer import (
    DecoderBlock,
    EncoderBlock,
    to_torch_decoder_layer,
    to_torch_encoder_layer,
)
from attention_src.utils import count_parameters
from tests.conftest import PROPERTY, TOL, randn, random_mask, seeds

B, L, S, E, H, FF = 2, 5, 4, 8, 2, 16  # H even: PyTorch's fused fast paths would be eligible
CONFIGS = [(nf, act) for nf in (False, True) for act in ("relu", "gelu")]
CONFIG_IDS = [f"{'pre' if nf else 'post'}-norm-{act}" for nf, act in CONFIGS]
DTYPES = [torch.float64, torch.float32]


@pytest.fixture(autouse=True, scope="module")
def _pytorch_reference_path():
    """Compare with PyTorch's reference (Python) composition, not its fused kernels.

    In eval mode, when autograd does not record the call, ``TransformerEncoderLayer.forward``
    dispatches to the fused ``torch._transformer_encoder_layer_fwd`` and
    ``nn.MultiheadAttention`` to ``torch._native_multi_head_attention`` (the "fast path" of the
    docs), and ``nn.TransformerEncoder`` with a ``src_key_padding_mask`` goes further, through
    nested tensors (the "sparsity fast path"), returning 0 at padded positions. Whether the
    fast path runs depends on grad mode and on ``requires_grad`` of the parameters, so the
    parity tests switch it off explicitly: they then compare with the documented composition
    of sublayers whatever the caller's grad mode. ``test_torch_fast_paths_agree_...`` checks
    the fused paths separately, at the real (unpadded) positions.
    """
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(was)


@torch.no_grad()
def _randomize(module: nn.Module, seed: int) -> nn.Module:
    """Non-trivial biases and layer-norm gains, so that a mis-copied one is visible."""
    g = torch.Generator().manual_seed(seed)
    for name, p in module.named_parameters():
        if p.dim() == 1:
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            p.copy_(1.0 + 0.3 * noise if "norm" in name and "weight" in name else noise)
    return module


def _encoder(norm_first=False, activation="relu", dtype=torch.float64, seed=0, **kwargs):
    with torch.random.fork_rng():  # seed the initialisation without touching the global RNG
        torch.manual_seed(seed)
        block = EncoderBlock(E, H, FF, norm_first=norm_first, activation=activation, **kwargs)
    return _randomize(block.to(dtype), seed).eval()


def _decoder(norm_first=False, activation="relu", dtype=torch.float64, seed=0, **kwargs):
    with torch.random.fork_rng():  # seed the initialisation without touching the global RNG
        torch.manual_seed(seed)
        block = DecoderBlock(E, H, FF, norm_first=norm_first, activation=activation, **kwargs)
    return _randomize(block.to(dtype), seed).eval()


def _per_head(mask: torch.Tensor) -> torch.Tensor:
    """Our (B, L_q, L_k) mask as PyTorch's per-head attn_mask (B*h, L_q, L_k), True = blocked."""
    return ~mask.repeat_interleave(H, dim=0)


SRC_LENS = torch.tensor([L, 3])  # the second sequence is padded after 3 tokens
MEM_LENS = torch.tensor([2, S])


def _encoder_masks(kind: str):
    """(our mask, PyTorch's keyword arguments) for a mask kind of the encoder."""
    pad = lengths_to_mask(SRC_LENS, L)  # (B, L), True = real token
    causal = causal_mask(L)  # (L, L)
    if kind == "none":
        return None, {}
    if kind == "causal (L,L)":
        return causal, {"src_mask": ~causal}
    if kind == "padding (B,1,L)":
        return pad[:, None, :], {"src_key_padding_mask": ~pad}
    if kind == "causal+padding (B,L,L)":
        return causal & pad[:, None, :], {"src_mask": ~causal, "src_key_padding_mask": ~pad}
    mask = random_mask(3, B, L, L, p=0.5) | torch.eye(L, dtype=torch.bool)  # no empty row
    return mask, {"src_mask": _per_head(mask)}  # "random (B,L,L)"


ENCODER_MASKS = ["none", "causal (L,L)", "padding (B,1,L)", "causal+padding (B,L,L)",
                 "random (B,L,L)"]


def _decoder_masks(kind: str):
    """(our mask, our memory_mask, PyTorch's keyword arguments) for the decoder."""
    tgt_pad = lengths_to_mask(SRC_LENS, L)  # (B, L)
    mem_pad = lengths_to_mask(MEM_LENS, S)  # (B, S)
    causal = causal_mask(L)
    if kind == "none":
        return None, None, {}
    if kind == "causal":
        return causal, None, {"tgt_mask": ~causal}
    if kind == "causal+padding":
        return (causal & tgt_pad[:, None, :], None,
                {"tgt_mask": ~causal, "tgt_key_padding_mask": ~tgt_pad})
    if kind == "causal, memory padding (B,1,S)":
        return (causal, mem_pad[:, None, :],
                {"tgt_mask": ~causal, "memory_key_padding_mask": ~mem_pad})
    # "all": causal + target padding, and a random (L, S) memory mask & the memory padding
    mem_mask = random_mask(4, L, S, p=0.5)
    mem_mask[:, 0] = True  # every query keeps memory position 0 (PyTorch: NaN on empty rows)
    return (causal & tgt_pad[:, None, :], mem_mask & mem_pad[:, None, :],
            {"tgt_mask": ~causal, "tgt_key_padding_mask": ~tgt_pad, "memory_mask": ~mem_mask,
             "memory_key_padding_mask": ~mem_pad})


DECODER_MASKS = ["none", "causal", "causal+padding", "causal, memory padding (B,1,S)", "all"]


# --- parity with PyTorch --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask_kind", ENCODER_MASKS)
@pytest.mark.parametrize(("norm_first", "activation"), CONFIGS, ids=CONFIG_IDS)
def test_encoder_block_equals_torch(norm_first, activation, mask_kind, dtype):
    block = _encoder(norm_first, activation, dtype)
    ref = to_torch_encoder_layer(block)
    assert not ref.training and ref.norm_first == norm_first and ref.linear1.weight.dtype == dtype
    x = randn(1, B, L, E, dtype=dtype)
    mask, torch_kwargs = _encoder_masks(mask_kind)
    out = block(x, mask=mask)
    assert out.shape == (B, L, E)
    torch.testing.assert_close(out, ref(x, **torch_kwargs), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mask_kind", DECODER_MASKS)
@pytest.mark.parametrize(("norm_first", "activation"), CONFIGS, ids=CONFIG_IDS)
def test_decoder_block_equals_torch(norm_first, activation, mask_kind, dtype):
    block = _decoder(norm_first, activation, dtype)
    ref = to_torch_decoder_layer(block)
    assert not ref.training and ref.norm_first == norm_first and ref.norm3.weight.dtype == dtype
    x, memory = randn(1, B, L, E, dtype=dtype), randn(2, B, S, E, dtype=dtype)
    mask, memory_mask, torch_kwargs = _decoder_masks(mask_kind)
    out = block(x, memory, mask=mask, memory_mask=memory_mask)
    assert out.shape == (B, L, E)
    torch.testing.assert_close(out, ref(x, memory, **torch_kwargs), **TOL[dtype])


@pytest.mark.parametrize("shape", ["(L,L)", "(1,L,L)", "(B,L,L)", "(B,1,L)", "(1,L)"])
def test_every_broadcastable_mask_shape_gives_the_same_result(shape):
    block = _encoder()
    x = randn(2, B, L, E)
    full = causal_mask(L) & lengths_to_mask(SRC_LENS, L)[:, None, :]  # (B, L, L)
    if shape == "(L,L)":  # the same mask for both sequences: the causal one
        mask, full = causal_mask(L), causal_mask(L).expand(B, L, L)
    elif shape == "(1,L,L)":
        mask, full = causal_mask(L)[None], causal_mask(L).expand(B, L, L)
    elif shape == "(B,L,L)":
        mask = full
    elif shape == "(B,1,L)":
        mask = lengths_to_mask(SRC_LENS, L)[:, None, :]
        full = mask.expand(B, L, L)
    else:  # (1, L): block key 1 for everyone
        mask = torch.ones(1, L, dtype=torch.bool)
        mask[0, 1] = False
        full = mask.expand(B, L, L)
    torch.testing.assert_close(block(x, mask=mask), block(x, mask=full.contiguous()),
                               atol=0, rtol=0)


@torch.no_grad()
def _manual_encoder_copy(block: EncoderBlock) -> nn.TransformerEncoderLayer:
    """Copy by hand, parameter by parameter, independently of to_torch_encoder_layer."""
    ref = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, activation=block.activation_name,
                                     batch_first=True, norm_first=block.norm_first).double()
    attn = block.self_attn
    ref.self_attn.in_proj_weight[:E] = attn.q_proj.weight  # rows [W_q; W_k; W_v]
    ref.self_attn.in_proj_weight[E:2 * E] = attn.k_proj.weight
    ref.self_attn.in_proj_weight[2 * E:] = attn.v_proj.weight
    ref.self_attn.in_proj_bias[:] = torch.cat([attn.q_proj.bias, attn.k_proj.bias,
                                               attn.v_proj.bias])
    ref.self_attn.out_proj.weight[:] = attn.out_proj.weight
    ref.self_attn.out_proj.bias[:] = attn.out_proj.bias
    for name in ("linear1", "linear2", "norm1", "norm2"):
        getattr(ref, name).weight[:] = getattr(block, name).weight
        getattr(ref, name).bias[:] = getattr(block, name).bias
    return ref.eval()


@pytest.mark.parametrize(("norm_first", "activation"), CONFIGS, ids=CONFIG_IDS)
def test_to_torch_encoder_layer_equals_a_manual_copy(norm_first, activation):
    block = _encoder(norm_first, activation)
    copied, manual = to_torch_encoder_layer(block), _manual_encoder_copy(block)
    assert set(copied.state_dict()) == set(manual.state_dict())
    for name, tensor in manual.state_dict().items():
        torch.testing.assert_close(copied.state_dict()[name], tensor, atol=0, rtol=0, msg=name)
    assert count_parameters(block) == count_parameters(copied)


def test_to_torch_decoder_layer_copies_every_parameter():
    block = _decoder(norm_first=True, activation="gelu", layer_norm_eps=1e-3)
    ref = to_torch_decoder_layer(block)
    assert count_parameters(block) == count_parameters(ref)
    assert ref.norm1.eps == ref.norm2.eps == ref.norm3.eps == 1e-3
    assert ref.activation is torch.nn.functional.gelu
    pairs = {"self_attn": block.self_attn, "multihead_attn": block.cross_attn}
    for name, mha in pairs.items():
        torch_mha = getattr(ref, name)
        torch.testing.assert_close(torch_mha.in_proj_weight, torch.cat(
            [mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]), atol=0, rtol=0)
        torch.testing.assert_close(torch_mha.out_proj.bias, mha.out_proj.bias, atol=0, rtol=0)
    torch.testing.assert_close(ref.norm3.bias, block.norm3.bias, atol=0, rtol=0)


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layer_norm_eps_is_used_and_carried(eps):
    block = _encoder(layer_norm_eps=eps)
    ref = to_torch_encoder_layer(block)
    assert ref.norm1.eps == ref.norm2.eps == eps
    x = randn(3, B, L, E, scale=0.3)  # small inputs, where eps = 0.5 matters
    torch.testing.assert_close(block(x), ref(x), **TOL[torch.float64])


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_decoder_layer_norm_eps_is_used_by_all_three_norms(eps):
    """The decoder's three layer norms (self-attention, cross-attention, feed-forward) each
    use ``layer_norm_eps``: with eps = 0.5 and small inputs, one norm left at the default
    changes the output."""
    block = _decoder(layer_norm_eps=eps)
    assert block.norm1.eps == block.norm2.eps == block.norm3.eps == eps
    ref = to_torch_decoder_layer(block)
    x = randn(3, B, L, E, scale=0.3)  # (B, L, E)
    memory = randn(4, B, S, E, scale=0.3)  # (B, S, E)
    torch.testing.assert_close(block(x, memory), ref(x, memory), **TOL[torch.float64])


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_torch_fast_paths_agree_at_real_positions(dtype, monkeypatch):
    # With the fast path on, in eval mode under no_grad, PyTorch runs its fused kernel. The
    # layer alone computes every position; nn.TransformerEncoder's sparsity fast path (nested
    # tensors) returns 0 at padded positions, so real positions are compared, and padded ones
    # are checked to be the zeros that path is documented to give, not our values.
    calls = []
    fused = torch._transformer_encoder_layer_fwd
    monkeypatch.setattr(torch, "_transformer_encoder_layer_fwd",
                        lambda *a: calls.append(1) or fused(*a))
    block = _encoder(dtype=dtype)
    layer = to_torch_encoder_layer(block)
    stack = nn.TransformerEncoder(to_torch_encoder_layer(block), 1, enable_nested_tensor=True)
    x = randn(4, B, L, E, dtype=dtype)
    pad = lengths_to_mask(SRC_LENS, L)  # (B, L)
    out = block(x, mask=pad[:, None, :])
    torch.backends.mha.set_fastpath_enabled(True)  # the module's fixture turned it off
    try:
        with torch.no_grad():
            fast_layer = layer(x, src_key_padding_mask=~pad)
            fast_stack = stack.eval()(x, src_key_padding_mask=~pad)
    finally:
        torch.backends.mha.set_fastpath_enabled(False)
    assert len(calls) == 2  # both took the fused kernel
    torch.testing.assert_close(fast_layer, out, **TOL[dtype])
    torch.testing.assert_close(fast_stack[pad], out[pad], **TOL[dtype])
    assert (fast_stack[~pad] == 0).all()


# --- an independent hand computation ----------------------------------------------------------


def _hand_attention(mha, x_q, x_kv, mask):
    """Multi-head attention from mha's parameters with plain ops, one sequence and head at a
    time. x_q: (B, L_q, E), x_kv: (B, L_k, E), mask: None or broadcastable to (B, L_q, L_k)."""
    b_count, L_q, width = x_q.shape
    L_k, d = x_kv.shape[1], width // mha.num_heads
    q = x_q @ mha.q_proj.weight.T + mha.q_proj.bias  # (B, L_q, E)
    k = x_kv @ mha.k_proj.weight.T + mha.k_proj.bias  # (B, L_k, E)
    v = x_kv @ mha.v_proj.weight.T + mha.v_proj.bias
    full = torch.ones(b_count, L_q, L_k, dtype=torch.bool) if mask is None else (
        mask.expand(b_count, L_q, L_k))
    heads = torch.zeros_like(q)
    for b in range(b_count):
        for i in range(mha.num_heads):
            cols = slice(i * d, (i + 1) * d)
            scores = q[b, :, cols] @ k[b, :, cols].T / math.sqrt(d)  # (L_q, L_k)
            scores = torch.where(full[b], scores, -math.inf)
            e = torch.exp(scores - scores.max(dim=1, keepdim=True).values)
            heads[b, :, cols] = (e / e.sum(dim=1, keepdim=True)) @ v[b, :, cols]
    return heads @ mha.out_proj.weight.T + mha.out_proj.bias


def _hand_norm(norm, x):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # the biased variance, as LayerNorm
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def _hand_ff(block, x):
    hidden = x @ block.linear1.weight.T + block.linear1.bias
    if block.activation_name == "relu":
        hidden = torch.where(hidden > 0, hidden, 0.0)
    else:  # the exact GELU: x * Phi(x)
        hidden = hidden * 0.5 * (1.0 + torch.erf(hidden / math.sqrt(2.0)))
    return hidden @ block.linear2.weight.T + block.linear2.bias


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(("norm_first", "activation"), CONFIGS, ids=CONFIG_IDS)
def test_encoder_block_equals_a_hand_computation(norm_first, activation, masked):
    block = _encoder(norm_first, activation, seed=7)
    x = randn(8, B, L, E)
    mask = causal_mask(L) & lengths_to_mask(SRC_LENS, L)[:, None, :] if masked else None
    with torch.no_grad():
        if norm_first:
            h = x + _hand_attention(block.self_attn, *[_hand_norm(block.norm1, x)] * 2, mask)
            expected = h + _hand_ff(block, _hand_norm(block.norm2, h))
        else:
            h = _hand_norm(block.norm1, x + _hand_attention(block.self_attn, x, x, mask))
            expected = _hand_norm(block.norm2, h + _hand_ff(block, h))
        torch.testing.assert_close(block(x, mask=mask), expected, **TOL[torch.float64])


@pytest.mark.parametrize(("norm_first", "activation"), CONFIGS, ids=CONFIG_IDS)
def test_decoder_block_equals_a_hand_computation(norm_first, activation):
    block = _decoder(norm_first, activation, seed=9)
    x, memory = randn(10, B, L, E), randn(11, B, S, E)
    mask, memory_mask = causal_mask(L), lengths_to_mask(MEM_LENS, S)[:, None, :]
    with torch.no_grad():
        if norm_first:
            n1 = _hand_norm(block.norm1, x)
            h = x + _hand_attention(block.self_attn, n1, n1, mask)
            h = h + _hand_attention(block.cross_attn, _hand_norm(block.norm2, h), memory,
                                    memory_mask)
            expected = h + _hand_ff(block, _hand_norm(block.norm3, h))
        else:
            h = _hand_norm(block.norm1, x + _hand_attention(block.self_attn, x, x, mask))
            h = _hand_norm(block.norm2,
                           h + _hand_attention(block.cross_attn, h, memory, memory_mask))
            expected = _hand_norm(block.norm3, h + _hand_ff(block, h))
        out = block(x, memory, mask=mask, memory_mask=memory_mask)
        torch.testing.assert_close(out, expected, **TOL[torch.float64])


# --- properties ---------------------------------------------------------------------------------

ENCODERS = [_encoder(nf, act, seed=i) for i, (nf, act) in enumerate(CONFIGS)]
DECODERS = [_decoder(nf, act, seed=i) for i, (nf, act) in enumerate(CONFIGS)]
configs = st.integers(0, len(CONFIGS) - 1)


@PROPERTY
@given(seed=seeds, config=configs, length=st.integers(1, 6), data=st.data())
def test_encoder_block_is_permutation_equivariant(seed, config, length, data):
    perm = torch.as_tensor(data.draw(st.permutations(range(length))))
    block = ENCODERS[config]
    x = randn(seed, B, length, E)
    torch.testing.assert_close(block(x[:, perm]), block(x)[:, perm], atol=1e-12, rtol=0)


def _assert_causal(out: torch.Tensor, x: torch.Tensor) -> None:
    """Output position t has zero gradient w.r.t. inputs after t, and non-zero w.r.t. x_t."""
    g = torch.Generator().manual_seed(0)
    for t in range(x.shape[1]):
        weights = torch.randn(out[:, t].shape, generator=g, dtype=out.dtype)
        (grad,) = torch.autograd.grad((out[:, t] * weights).sum(), x, retain_graph=True)
        assert (grad[:, t + 1:] == 0).all(), f"output {t} depends on later inputs"
        assert (grad[:, t] != 0).any()


@PROPERTY
@given(seed=seeds, config=configs, length=st.integers(1, 6))
def test_causal_encoder_block_ignores_the_future(seed, config, length):
    x = randn(seed, B, length, E).requires_grad_()
    _assert_causal(ENCODERS[config](x, mask=causal_mask(length)), x)


@PROPERTY
@given(seed=seeds, config=configs, length=st.integers(1, 6), mem_length=st.integers(1, 4))
def test_decoder_self_attention_with_causal_mask_ignores_the_future(seed, config, length,
                                                                     mem_length):
    x = randn(seed, B, length, E).requires_grad_()
    memory = randn(seed + 1, B, mem_length, E)
    _assert_causal(DECODERS[config](x, memory, mask=causal_mask(length)), x)


def test_without_a_mask_the_future_does_leak():
    # The converse, so that the causal property tests can fail: the mask is what stops it.
    for block in (ENCODERS[0], DECODERS[0]):
        x = randn(5, B, L, E).requires_grad_()
        out = block(x) if isinstance(block, EncoderBlock) else block(x, randn(6, B, S, E))
        (grad,) = torch.autograd.grad(out[:, 0].sum(), x)
        assert (grad[:, 1:] != 0).any()


# --- dropout ------------------------------------------------------------------------------------

P = 0.3


def test_dropout_changes_the_output_in_training_only():
    enc = _encoder(dropout=P)
    plain = _encoder(dropout=0.0)
    x = randn(0, B, L, E)
    torch.testing.assert_close(enc(x), plain(x), atol=0, rtol=0)  # eval: no dropout at all
    enc.train()
    torch.manual_seed(0)
    first, second = enc(x), enc(x)
    assert not torch.allclose(first, second) and not torch.allclose(first, plain(x))
    torch.testing.assert_close(plain.train()(x), plain.eval()(x), atol=0, rtol=0)  # p = 0
    dec, dec_plain = _decoder(dropout=P), _decoder(dropout=0.0)
    memory = randn(1, B, S, E)
    torch.testing.assert_close(dec(x, memory), dec_plain(x, memory), atol=0, rtol=0)
    dec.train()
    assert not torch.allclose(dec(x, memory), dec(x, memory))


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_dropout_statistics_match_p(kind):
    """Every dropout module zeroes a fraction p of its inputs and scales the rest by 1/(1-p)."""
    torch.manual_seed(0)
    cls = EncoderBlock if kind == "encoder" else DecoderBlock
    block = cls(32, 4, 128, dropout=P, activation="gelu").double().train()  # gelu: no zeros
    names = ["dropout", "dropout1", "dropout2"] + (["dropout3"] if kind == "decoder" else [])
    seen = {}

    def record(name):
        def hook(module, inputs, output):
            seen[name] = (inputs[0].detach(), output.detach())
        return hook

    for name in names:
        getattr(block, name).register_forward_hook(record(name))
    x = randn(0, 4, 16, 32)
    block(x) if kind == "encoder" else block(x, randn(1, 4, 8, 32))
    assert set(seen) == set(names)  # every dropout module is on the path
    for name, (before, after) in seen.items():
        live = before != 0
        dropped = (after == 0) & live
        n = int(live.sum())
        fraction = float(dropped.sum()) / n
        assert abs(fraction - P) < 4 * math.sqrt(P * (1 - P) / n), (name, fraction, n)
        kept = live & ~dropped
        torch.testing.assert_close(after[kept], before[kept] / (1 - P), atol=1e-12, rtol=0)


class _FixedDropout(nn.Module):
    """A dropout whose mask is fixed (seeded), to put the same mask in both models."""

    def __init__(self, seed: int, p: float = P):
        super().__init__()
        self.seed, self.p = seed, p

    def forward(self, x):
        g = torch.Generator().manual_seed(self.seed)
        keep = torch.rand(x.shape, generator=g) >= self.p
        return x * keep / (1 - self.p)


@pytest.mark.parametrize(("norm_first", "activation"), CONFIGS, ids=CONFIG_IDS)
def test_dropout_sits_where_pytorch_puts_it(norm_first, activation):
    """In training mode, with the same random numbers, the blocks equal PyTorch's layers.

    The attention-weight dropout (inside scaled_dot_product_attention), the feed-forward
    ``dropout`` and the last sublayer's output dropout draw the same random numbers in the same
    order and shapes as PyTorch's, so equal seeds give equal masks. ``dropout1`` (and the
    decoder's ``dropout2``) act on an attention output that ``nn.MultiheadAttention`` returns
    as a transposed (L, B, E) view, so the same seed lays its mask out differently; those get a
    fixed mask, the same module in both models.
    """
    x, memory = randn(0, B, L, E), randn(1, B, S, E)
    enc = _encoder(norm_first, activation, dropout=P).train()
    ref = to_torch_encoder_layer(enc)
    assert ref.training
    enc.dropout1 = ref.dropout1 = _FixedDropout(seed=1)
    torch.manual_seed(5)
    out = enc(x, mask=causal_mask(L))
    torch.manual_seed(5)
    torch.testing.assert_close(out, ref(x, src_mask=~causal_mask(L)), **TOL[torch.float64])
    dec = _decoder(norm_first, activation, dropout=P).train()
    ref = to_torch_decoder_layer(dec)
    dec.dropout1 = ref.dropout1 = _FixedDropout(seed=2)
    dec.dropout2 = ref.dropout2 = _FixedDropout(seed=3)
    torch.manual_seed(6)
    out = dec(x, memory, mask=causal_mask(L))
    torch.manual_seed(6)
    torch.testing.assert_close(out, ref(x, memory, tgt_mask=~causal_mask(L)),
                               **TOL[torch.float64])


def test_to_torch_layers_keep_the_dropout_rate_and_the_mode():
    enc, dec = _encoder(dropout=P), _decoder(dropout=P)
    ref_enc, ref_dec = to_torch_encoder_layer(enc), to_torch_decoder_layer(dec)
    assert not ref_enc.training and not ref_dec.training
    for ref in (ref_enc, ref_dec):
        assert ref.dropout.p == ref.dropout1.p == ref.dropout2.p == P
        assert ref.self_attn.dropout == P
    assert ref_dec.dropout3.p == ref_dec.multihead_attn.dropout == P
    assert to_torch_encoder_layer(enc.train()).training
    assert to_torch_decoder_layer(dec.train()).training


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [EncoderBlock, DecoderBlock])
def test_blocks_reject_bad_constructor_arguments(cls):
    with pytest.raises(ValueError, match=r"embed_dim \(10\) must be divisible by num_heads \(4\)"):
        cls(10, 4, 16)
    with pytest.raises(ValueError, match="ff_dim must be positive, got 0"):
        cls(8, 2, 0)
    with pytest.raises(ValueError, match="ff_dim must be positive, got -3"):
        cls(8, 2, -3)
    with pytest.raises(TypeError, match="ff_dim must be an int, got float"):
        cls(8, 2, 16.0)
    with pytest.raises(ValueError, match="num_heads must be positive, got 0"):
        cls(8, 0, 16)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.0"):
        cls(8, 2, 16, dropout=1.0)
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got -0.1"):
        cls(8, 2, 16, dropout=-0.1)
    with pytest.raises(TypeError, match="dropout must be a number, got str"):
        cls(8, 2, 16, dropout="0.1")
    with pytest.raises(ValueError, match="activation must be 'relu' or 'gelu', got 'tanh'"):
        cls(8, 2, 16, activation="tanh")
    with pytest.raises(ValueError, match="activation must be 'relu' or 'gelu', got <function"):
        cls(8, 2, 16, activation=torch.nn.functional.relu)
    with pytest.raises(ValueError, match="layer_norm_eps must be positive, got 0"):
        cls(8, 2, 16, layer_norm_eps=0)
    with pytest.raises(TypeError, match="layer_norm_eps must be a number, got NoneType"):
        cls(8, 2, 16, layer_norm_eps=None)


@pytest.mark.parametrize("kind", ["encoder", "decoder"])
def test_blocks_reject_bad_inputs_and_masks(kind):
    block = _encoder() if kind == "encoder" else _decoder()
    memory = randn(0, B, S, E)

    def call(x, mask=None):
        return block(x, mask=mask) if kind == "encoder" else block(x, memory, mask=mask)

    x = randn(1, B, L, E)
    with pytest.raises(ValueError, match=r"x must have at least 3 dimensions, got shape \(5, 8\)"):
        call(x[0])
    with pytest.raises(ValueError, match=r"x must be \(B, L, E\), got shape \(1, 2, 5, 8\)"):
        call(x[None])
    with pytest.raises(ValueError, match=r"x must have embed_dim = 8 features, got shape "
                                         r"\(2, 5, 6\)"):
        call(x[..., :6])
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got dtype "
                                        "torch.int64"):
        call(x.long())
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got list"):
        call(x.tolist())
    with pytest.raises(TypeError, match=r"x has dtype torch.float32 but the block's parameters "
                                        r"have dtype torch.float64.*block.to\(torch.float32\)"):
        call(x.float())
    with pytest.raises(ValueError, match=r"mask of shape \(2, 5\) does not broadcast to the "
                                         r"scores' shape \(2, 5, 5\)"):
        call(x, mask=lengths_to_mask(SRC_LENS, L))  # forgot [:, None, :]
    with pytest.raises(ValueError, match=r"mask of shape \(6, 6\) .* \(2, 5, 5\)"):
        call(x, mask=causal_mask(L + 1))
    with pytest.raises(ValueError, match=r"mask of shape \(1, 2, 5, 5\) .* \(2, 5, 5\)"):
        call(x, mask=causal_mask(L).expand(1, B, L, L))
    with pytest.raises(TypeError, match=r"mask must have dtype torch.bool \(True = may attend\),"
                                        r" got torch.float64"):
        call(x, mask=causal_mask(L).double())
    with pytest.raises(TypeError, match="mask must be a boolean torch.Tensor, got list"):
        call(x, mask=causal_mask(L).tolist())


def test_decoder_rejects_bad_memory_and_memory_masks():
    block = _decoder()
    x, memory = randn(0, B, L, E), randn(1, B, S, E)
    with pytest.raises(ValueError, match=r"memory must have at least 3 dimensions, got shape "
                                         r"\(4, 8\)"):
        block(x, memory[0])
    with pytest.raises(ValueError, match=r"memory must be \(B, S, E\), got shape \(1, 2, 4, 8\)"):
        block(x, memory[None])
    with pytest.raises(ValueError, match=r"memory must have the batch size of x, got memory "
                                         r"\(1, 4, 8\) and x \(2, 5, 8\)"):
        block(x, memory[:1])
    with pytest.raises(ValueError, match=r"memory must have embed_dim = 8 features, got shape "
                                         r"\(2, 4, 6\)"):
        block(x, memory[..., :6])
    with pytest.raises(TypeError, match="memory must be a floating-point tensor.*torch.int64"):
        block(x, memory.long())
    with pytest.raises(TypeError, match="one dtype, got x: torch.float64, memory: torch.float32"):
        block(x, memory.float())
    with pytest.raises(ValueError, match=r"memory_mask of shape \(2, 1, 5\) does not broadcast "
                                         r"to the scores' shape \(2, 5, 4\)"):
        block(x, memory, memory_mask=lengths_to_mask(SRC_LENS, L)[:, None, :])  # L, not S
    with pytest.raises(TypeError, match="memory_mask must have dtype torch.bool"):
        block(x, memory, memory_mask=torch.ones(B, 1, S))


def test_to_torch_functions_reject_the_other_block():
    with pytest.raises(TypeError, match="block must be an EncoderBlock, got DecoderBlock"):
        to_torch_encoder_layer(_decoder())
    with pytest.raises(TypeError, match="block must be a DecoderBlock, got EncoderBlock"):
        to_torch_decoder_layer(_encoder())


def test_repr_names_the_norm_order_and_exports():
    assert "norm_first=True" in repr(_encoder(norm_first=True))
    assert "cross_attn" in repr(_decoder()) and "GELU" in repr(_decoder(activation="gelu"))
    assert att.EncoderBlock is EncoderBlock and att.DecoderBlock is DecoderBlock
    assert att.to_torch_encoder_layer is to_torch_encoder_layer
    assert att.to_torch_decoder_layer is to_torch_decoder_layer


# --- bad input, boundaries and defaults, argument by argument (issue 13) ----------------------


@pytest.mark.parametrize("cls", [EncoderBlock, DecoderBlock])
def test_blocks_name_each_integer_argument(cls):
    args = {"embed_dim": 8, "num_heads": 2, "ff_dim": 16}
    for name in args:
        with pytest.raises(ValueError, match=rf"^{name} must be positive, got 0$"):
            cls(**(args | {name: 0}))
        with pytest.raises(TypeError, match=rf"^{name} must be an int, got float$"):
            cls(**(args | {name: 2.0}))


@pytest.mark.parametrize("cls", [EncoderBlock, DecoderBlock])
def test_blocks_refuse_bools_and_unhashable_settings(cls):
    """``True`` is an int to Python, but not a dropout rate or an eps; a list is no
    activation name (and must not reach the dict lookup)."""
    with pytest.raises(TypeError, match=r"^dropout must be a number, got bool$"):
        cls(8, 2, 16, dropout=True)
    with pytest.raises(TypeError, match=r"^layer_norm_eps must be a number, got bool$"):
        cls(8, 2, 16, layer_norm_eps=True)
    with pytest.raises(ValueError, match=r"^activation must be 'relu' or 'gelu', got \['relu'\]$"):
        cls(8, 2, 16, activation=["relu"])


@pytest.mark.parametrize("cls", [EncoderBlock, DecoderBlock])
def test_blocks_accept_the_ends_of_the_valid_ranges(cls):
    """dropout 0 and just below 1, the smallest positive eps: all valid."""
    assert cls(8, 2, 16, dropout=0.0).dropout.p == 0.0
    assert cls(8, 2, 16, dropout=0.999).dropout1.p == 0.999
    assert cls(8, 2, 16, layer_norm_eps=5e-324).norm1.eps == 5e-324


@pytest.mark.parametrize(("cls", "extra"), [(EncoderBlock, ()), (DecoderBlock, ((B, S, E),))])
def test_block_defaults_are_no_dropout_post_norm_relu_and_eps_1e_5(cls, extra):
    """The documented defaults: a block built without them computes exactly what one built with
    ``dropout=0.0, norm_first=False, activation="relu", layer_norm_eps=1e-5`` does."""
    with torch.random.fork_rng():
        torch.manual_seed(3)
        implicit = cls(E, H, FF).double()
        torch.manual_seed(3)
        explicit = cls(E, H, FF, dropout=0.0, norm_first=False, activation="relu",
                       layer_norm_eps=1e-5).double()
    assert (implicit.norm_first, implicit.activation_name, implicit.layer_norm_eps) == (
        False, "relu", 1e-5)
    assert all(m.p == 0.0 for m in implicit.modules() if isinstance(m, nn.Dropout))
    x = randn(5, B, L, E, scale=3.0)
    args = [x] + [randn(6, *shape) for shape in extra]
    # training mode: any dropout left on would show
    assert torch.equal(implicit.train()(*args), explicit.train()(*args))


def test_blocks_never_compute_the_attention_weights_they_would_discard(monkeypatch):
    """Like PyTorch's layers, the blocks call their attentions with ``need_weights=False``: the
    fused kernel, no ``(B, h, L, S)`` weight tensor. The weights path is made to fail here, so
    a block that took it (the same numbers, more memory) would be caught."""
    import attention_src.multihead as multihead

    def weights_path(*args, **kwargs):
        raise AssertionError("the block asked for attention weights")

    monkeypatch.setattr(multihead, "scaled_dot_product_attention", weights_path)
    x, memory = randn(0, B, L, E), randn(1, B, S, E)
    for mode in ("eval", "train"):
        enc = getattr(_encoder(dropout=P), mode)()
        dec = getattr(_decoder(dropout=P), mode)()
        assert enc(x, mask=causal_mask(L)).shape == (B, L, E)
        assert dec(x, memory, mask=causal_mask(L)).shape == (B, L, E)
    with pytest.raises(AssertionError, match="asked for attention weights"):
        enc.self_attn(x, x, x)  # the spy is live: the default need_weights=True reaches it


@pytest.mark.parametrize("cls", [EncoderBlock, DecoderBlock])
def test_blocks_check_the_dropout_range_themselves(cls):
    """The block refuses p = 1 before it looks at the later arguments (MultiHeadAttention's
    own check, reached only after them, would report the activation instead)."""
    for p in (1.0, 1.5):
        with pytest.raises(ValueError, match=rf"^dropout must be in \[0, 1\), got {p}$"):
            cls(8, 2, 16, dropout=p, activation="tanh", layer_norm_eps=0.0)
