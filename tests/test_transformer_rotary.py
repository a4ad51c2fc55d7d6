"""Rotary positions in the Transformer: ``Transformer(..., positional="rotary")`` and the
blocks' ``rotary=True`` (attention_src.transformer, attention_src.multihead).

Independent reference: the encoder and the decoder of a one-layer rotary Transformer
recomputed in this file from the model's own weights with ``torch.nn.functional``
(``linear``, ``layer_norm``, ``scaled_dot_product_attention``) and the rotary embedding of
Hugging Face ``transformers`` (Llama's ``rotate_half`` / ``apply_rotary_pos_emb``, which pair
feature ``j`` with ``j + d/2``: the head features are permuted to that layout first, which
leaves every score unchanged). Where ``transformers`` is not installed, a transcription of
those two functions stands in (labelled below). Properties: a rotary encoder sees relative
positions only (prepending masked padding changes nothing; it does for sinusoidal positions),
but is not a bag of tokens; position 0 everywhere rotates nothing; the parameters are those of
the sinusoidal model. Bad input: named errors.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attention_src.multihead import MultiHeadAttention
from attention_src.softmax import causal_mask
from attention_src.transformer import (
    DecoderBlock,
    EncoderBlock,
    Transformer,
    to_torch_decoder_layer,
    to_torch_encoder_layer,
    to_torch_transformer,
)
from tests.test_transformer_model import (  # the same sizes and batch
    FF,
    V_SRC,
    V_TGT,
    B,
    E,
    H,
    S,
    T,
    _batch,
)

try:  # the reference implementation, when installed
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, rotate_half
except ImportError:  # a transcription of the two functions of transformers' modeling_llama.py

    def rotate_half(x):
        """Rotates half the hidden dims of the input: (x1, x2) -> (-x2, x1)."""
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        q_embed = (q * cos) + (rotate_half(q) * sin)
        k_embed = (k * cos) + (rotate_half(k) * sin)
        return q_embed, k_embed


D = E // H  # d_head


@torch.no_grad()
def _model(positional="rotary", norm_first=False, num_layers=1, seed=0):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Transformer(V_SRC, V_TGT, E, H, num_layers, FF, norm_first=norm_first,
                            positional=positional)
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():  # non-trivial biases and layer-norm gains
        if p.dim() == 1:
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            p.copy_(1.0 + 0.3 * noise if "norm" in name and "weight" in name else noise)
    return model.double().eval()


# ------------------------------------------------------------------ the reference


def _hf_cos_sin(L, d, base=10000.0):
    """Llama's rotary tables: ``inv_freq = 1 / base^(2i/d)``, ``emb = cat(freqs, freqs)``;
    ``(1, L, d)`` each (a batch axis of one, as LlamaRotaryEmbedding returns them)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))  # (d/2,)
    freqs = torch.outer(torch.arange(L, dtype=torch.float64), inv_freq)  # (L, d/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (L, d)
    return emb.cos()[None], emb.sin()[None]


#: head features (2i, 2i+1) of the book's interleaved layout -> (i, i + d/2) of Llama's
HALF_LAYOUT = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])


def _heads(x, linear):
    """``(B, L, E)`` -> projected and split ``(B, h, L, d_head)``."""
    y = F.linear(x, linear.weight, linear.bias)  # (B, L, E)
    return y.view(y.shape[0], y.shape[1], H, D).transpose(1, 2)  # (B, h, L, d_head)


def _ref_attention(attn, x_q, x_kv, mask, rotary):
    """Multi-head attention from ``attn``'s weights with F.scaled_dot_product_attention;
    ``mask``: boolean ``(B, 1, L_q, L_k)``, True = may attend; rotary: Llama's rotation of the
    queries and keys (positions 0..L-1) in Llama's feature layout."""
    q, k, v = _heads(x_q, attn.q_proj), _heads(x_kv, attn.k_proj), _heads(x_kv, attn.v_proj)
    if rotary:
        cos, sin = _hf_cos_sin(q.shape[2], D)
        q, k = apply_rotary_pos_emb(q[..., HALF_LAYOUT], k[..., HALF_LAYOUT], cos, sin)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, h, L_q, d_head)
    out = out.transpose(1, 2).reshape(x_q.shape[0], x_q.shape[1], E)  # (B, L_q, E)
    return F.linear(out, attn.out_proj.weight, attn.out_proj.bias)


def _ln(norm, x):
    return F.layer_norm(x, (E,), norm.weight, norm.bias, norm.eps)


def _ff(block, x):
    hidden = F.relu(F.linear(x, block.linear1.weight, block.linear1.bias))
    return F.linear(hidden, block.linear2.weight, block.linear2.bias)


def _ref_sublayers(block, x, sublayers, norms, norm_first):
    for sublayer, norm in zip(sublayers, norms, strict=True):
        x = x + sublayer(_ln(norm, x)) if norm_first else _ln(norm, x + sublayer(x))
    return x


def _ref_encode(model, src, src_pad):
    """The memory of a one-layer rotary model, ``(B, S, E)``, with no positions added."""
    block = model.encoder_layers[0]
    x = F.embedding(src, model.src_embed.weight) * math.sqrt(E)  # (B, S, E)
    mask = src_pad[:, None, None, :]  # (B, 1, 1, S): real keys only
    x = _ref_sublayers(block, x, [lambda y: _ref_attention(block.self_attn, y, y, mask, True),
                                  lambda y: _ff(block, y)],
                       [block.norm1, block.norm2], model.norm_first)
    return x if model.encoder_norm is None else _ln(model.encoder_norm, x)


def _ref_decode(model, tgt, memory, tgt_pad, src_pad):
    """The decoder states of a one-layer rotary model, ``(B, T, E)``: rotated causal
    self-attention, cross-attention not rotated."""
    block = model.decoder_layers[0]
    x = F.embedding(tgt, model.tgt_embed.weight) * math.sqrt(E)  # (B, T, E)
    self_mask = (torch.ones(T, T, dtype=torch.bool).tril() & tgt_pad[:, None, :])[:, None]
    cross_mask = src_pad[:, None, None, :]  # (B, 1, 1, S)
    x = _ref_sublayers(
        block, x,
        [lambda y: _ref_attention(block.self_attn, y, y, self_mask, True),
         lambda y: _ref_attention(block.cross_attn, y, memory, cross_mask, False),
         lambda y: _ff(block, y)],
        [block.norm1, block.norm2, block.norm3], model.norm_first)
    return x if model.decoder_norm is None else _ln(model.decoder_norm, x)


def _real(x, pad):
    return x[pad]  # (number of real tokens, E): padded positions are nobody's business


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_encoder_equals_sdpa_with_hugging_faces_rotary(norm_first):
    model = _model(norm_first=norm_first)
    src, _, src_pad, _ = _batch()
    with torch.no_grad():
        got = model.encode(src, src_pad[:, None, :])
        want = _ref_encode(model, src, src_pad)
    torch.testing.assert_close(_real(got, src_pad), _real(want, src_pad), atol=1e-10, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoder_equals_sdpa_with_hugging_faces_rotary_causal(norm_first):
    model = _model(norm_first=norm_first, seed=1)
    src, tgt, src_pad, tgt_pad = _batch(1)
    with torch.no_grad():
        memory = model.encode(src, src_pad[:, None, :])
        tgt_mask = causal_mask(T) & tgt_pad[:, None, :]  # (B, T, T)
        got = model.decode(tgt, memory, tgt_mask, src_pad[:, None, :])
        want = _ref_decode(model, tgt, memory, tgt_pad, src_pad)
        torch.testing.assert_close(_real(got, tgt_pad), _real(want, tgt_pad), atol=1e-10,
                                   rtol=0)
        logits = model(src, tgt, src_pad, tgt_pad)
        torch.testing.assert_close(_real(logits, tgt_pad),
                                   _real(model.output(want), tgt_pad), atol=1e-10, rtol=0)


def test_a_rotary_encoder_block_alone_equals_the_reference():
    """The block's own option, outside a model: rotary=True, a padding mask."""
    with torch.random.fork_rng():
        torch.manual_seed(2)
        block = EncoderBlock(E, H, FF, rotary=True, dtype=torch.float64).eval()
        x = torch.randn(B, S, E, dtype=torch.float64)
    _, _, src_pad, _ = _batch()
    mask = src_pad[:, None, None, :]
    want = _ref_sublayers(block, x, [lambda y: _ref_attention(block.self_attn, y, y, mask, True),
                                     lambda y: _ff(block, y)], [block.norm1, block.norm2], False)
    with torch.no_grad():
        got = block(x, src_pad[:, None, :])
    torch.testing.assert_close(_real(got, src_pad), _real(want, src_pad), atol=1e-10, rtol=0)


# ------------------------------------------------------------------ properties


def _shifted(src, src_pad, k):
    """The same sentences after ``k`` masked padding tokens (id 3, masked out)."""
    filler = torch.full((B, k), 3, dtype=src.dtype)
    return (torch.cat([filler, src], 1),
            torch.cat([torch.zeros(B, k, dtype=torch.bool), src_pad], 1))


@pytest.mark.parametrize("k", [1, 5])
def test_masked_padding_in_front_changes_nothing_for_rotary_but_does_for_sinusoidal(k):
    """Rotary attention sees only differences of positions: moving every real token k places
    to the right changes no score. The sinusoidal model sees absolute positions: it changes."""
    src, _, src_pad, _ = _batch(2)
    src2, pad2 = _shifted(src, src_pad, k)
    differences = {}
    for positional in ("rotary", "sinusoidal"):
        model = _model(positional, num_layers=2, norm_first=True, seed=3)
        with torch.no_grad():
            memory = model.encode(src, src_pad[:, None, :])  # (B, S, E)
            shifted = model.encode(src2, pad2[:, None, :])[:, k:]  # the same tokens
        differences[positional] = float((_real(memory, src_pad)
                                         - _real(shifted, src_pad)).abs().max())
    assert differences["rotary"] < 1e-10
    assert differences["sinusoidal"] > 1e-2


def test_the_rotary_encoder_is_not_a_bag_of_tokens():
    """Without positions, swapping two source tokens would only swap their memory rows; with
    rotary positions, the other rows change too."""
    model = _model(num_layers=2, seed=4)
    src = torch.tensor([[2, 5, 7, 9, 4, 6]])
    swapped = src[:, [0, 4, 2, 3, 1, 5]]  # tokens at 1 and 4 exchanged
    with torch.no_grad():
        memory, memory2 = model.encode(src), model.encode(swapped)
    others = [0, 2, 3, 5]
    change = (memory[:, others] - memory2[:, others]).abs().amax(dim=-1)  # (1, 4): per row
    assert float(change.min()) > 1e-3  # 0.04 to 0.13 here


def test_rotary_at_position_zero_everywhere_rotates_nothing():
    with torch.random.fork_rng():
        torch.manual_seed(5)
        attn = MultiHeadAttention(E, H, dtype=torch.float64).eval()
        x = torch.randn(2, 6, E, dtype=torch.float64)
    plain, _ = attn(x, x, x)
    zero, _ = attn(x, x, x, rotary_positions=torch.zeros(6, dtype=torch.int64))
    assert torch.equal(zero, plain)
    moved, _ = attn(x, x, x, rotary_positions=torch.arange(6))
    assert not torch.allclose(moved, plain)


def test_sinusoidal_is_the_default_and_rotary_has_the_same_parameters():
    """Same seed: the same parameters drawn in the same order, whichever positions; the
    default is sinusoidal, bit for bit."""
    models = {}
    for positional in (None, "sinusoidal", "rotary"):
        extra = {} if positional is None else {"positional": positional}
        with torch.random.fork_rng():
            torch.manual_seed(6)
            models[positional] = Transformer(V_SRC, V_TGT, E, H, 2, FF, **extra).eval()
    default, sinusoidal, rotary = models.values()
    for a, b in ((default, sinusoidal), (default, rotary)):
        assert list(a.state_dict()) == list(b.state_dict())
        for name, p in a.state_dict().items():
            assert torch.equal(p, b.state_dict()[name]), name
    src, tgt, src_pad, tgt_pad = _batch()
    with torch.no_grad():
        assert torch.equal(default(src, tgt, src_pad, tgt_pad),
                           sinusoidal(src, tgt, src_pad, tgt_pad))
        assert not torch.allclose(default(src, tgt, src_pad, tgt_pad),
                                  rotary(src, tgt, src_pad, tgt_pad))
    assert default.positional == "sinusoidal" and rotary.positional == "rotary"
    assert rotary.positions is None
    assert all(layer.rotary for layer in [*rotary.encoder_layers, *rotary.decoder_layers])
    assert not any(layer.rotary for layer in [*default.encoder_layers, *default.decoder_layers])
    assert "positional='rotary'" in repr(rotary) and "rotary" not in repr(default)


def test_max_len_still_bounds_a_rotary_model():
    with torch.random.fork_rng():
        model = Transformer(V_SRC, V_TGT, E, H, 1, FF, max_len=4, positional="rotary")
    with pytest.raises(ValueError, match="src has length 5, more than the model's max_len = 4"):
        model.encode(torch.zeros(1, 5, dtype=torch.int64))


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("positional", ["learned", "Rotary", None, 1])
def test_an_unknown_positional_is_named(positional):
    with pytest.raises(ValueError, match=r"^positional must be 'sinusoidal' or 'rotary', got "):
        Transformer(V_SRC, V_TGT, E, H, 1, FF, positional=positional)


def test_an_odd_head_width_is_named():
    text = (r"d_head = embed_dim / num_heads must be even, got embed_dim = 12, num_heads = 4, "
            r"d_head = 3$")
    with pytest.raises(ValueError, match=text):
        Transformer(V_SRC, V_TGT, 12, 4, 1, FF, positional="rotary")
    for block in (EncoderBlock, DecoderBlock):
        with pytest.raises(ValueError, match=text):
            block(12, 4, FF, rotary=True)
        block(12, 4, FF)  # without rotary positions an odd d_head is fine
        with pytest.raises(TypeError, match="^rotary must be a bool, got str$"):
            block(E, H, FF, rotary="yes")
    Transformer(V_SRC, V_TGT, 12, 4, 1, FF)


def test_pytorch_has_no_rotary_transformer():
    model = _model()
    with pytest.raises(ValueError, match=r"^PyTorch's nn.Transformer has no rotary positions"):
        to_torch_transformer(model)
    with pytest.raises(ValueError, match=r"^PyTorch's nn.TransformerEncoderLayer .* no rotary"):
        to_torch_encoder_layer(model.encoder_layers[0])
    with pytest.raises(ValueError, match=r"^PyTorch's nn.TransformerEncoderLayer .* no rotary"):
        to_torch_decoder_layer(model.decoder_layers[0])


def test_rotary_positions_need_one_length_for_queries_and_keys():
    attn = MultiHeadAttention(E, H)
    q, kv = torch.zeros(2, 3, E), torch.zeros(2, 5, E)
    with pytest.raises(ValueError, match=r"need L_q == L_k, got query \(2, 3, 16\) and key "
                                         r"\(2, 5, 16\)$"):
        attn(q, kv, kv, rotary_positions=torch.arange(3))
