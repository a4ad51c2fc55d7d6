"""The whole encoder-decoder: Transformer and to_torch_transformer (attention_src.transformer).

Peer: ``torch.nn.Transformer(batch_first=True)`` carrying the same encoder and decoder stacks
(its masks mean the opposite of ours: ``True`` = blocked), with PyTorch's fused fast paths
switched off so that the reference is its documented composition. Independent of both: the
embeddings recomputed from the formula of Vaswani et al. §3.4/§3.5 with ``math.sin``; the
parameter count by hand. Properties: causality in the target, invariance to padded tokens,
weight tying, the final norms of a pre-norm stack. Bad input: named errors.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attention_src.softmax import causal_mask
from attention_src.transformer import Transformer, to_torch_transformer
from attention_src.utils import count_parameters
from tests.conftest import TOL

V_SRC, V_TGT, E, H, N, FF = 11, 13, 16, 4, 2, 24
B, S, T = 3, 7, 5  # S != T
SRC_LENS, TGT_LENS = [7, 4, 2], [5, 3, 1]


@pytest.fixture(autouse=True, scope="module")
def _pytorch_reference_path():
    """PyTorch's composition of sublayers, not its fused kernels or nested tensors (which
    return 0 at padded positions); see tests/test_transformer.py."""
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(was)


@torch.no_grad()
def _model(norm_first=False, activation="relu", dtype=torch.float64, seed=0, **kwargs):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Transformer(V_SRC, V_TGT, E, H, N, FF, norm_first=norm_first,
                            activation=activation, **kwargs)
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():  # non-trivial biases and layer-norm gains
        if p.dim() == 1:
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64)
            p.copy_(1.0 + 0.3 * noise if "norm" in name and "weight" in name else noise)
    return model.to(dtype).eval()


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, V_SRC, (B, S), generator=g)
    tgt = torch.randint(0, V_TGT, (B, T), generator=g)
    src_pad = torch.arange(S) < torch.tensor(SRC_LENS)[:, None]  # (B, S), True = real
    tgt_pad = torch.arange(T) < torch.tensor(TGT_LENS)[:, None]  # (B, T)
    return src, tgt, src_pad, tgt_pad


def _reference_logits(model, src, tgt, src_pad, tgt_pad):
    ref = to_torch_transformer(model)
    x_src = model._embed(model.src_embed, src)
    x_tgt = model._embed(model.tgt_embed, tgt)
    states = ref(x_src, x_tgt, tgt_mask=~causal_mask(tgt.shape[1]),
                 src_key_padding_mask=~src_pad, tgt_key_padding_mask=~tgt_pad,
                 memory_key_padding_mask=~src_pad)
    return model.output(states)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_equals_torch_transformer_with_padding_in_source_and_target(dtype, norm_first,
                                                                    activation):
    model = _model(norm_first, activation, dtype)
    src, tgt, src_pad, tgt_pad = _batch()
    ours = model(src, tgt, src_pad, tgt_pad)  # (B, T, V_tgt)
    assert ours.shape == (B, T, V_TGT) and ours.dtype == dtype
    torch.testing.assert_close(ours, _reference_logits(model, src, tgt, src_pad, tgt_pad),
                               **TOL[dtype])


def test_reference_tracks_a_change_in_any_weight():
    """The comparison has teeth: a reference built before one weight of the last decoder
    layer changes no longer agrees."""
    model = _model()
    src, tgt, src_pad, tgt_pad = _batch()
    before = _reference_logits(model, src, tgt, src_pad, tgt_pad)
    with torch.no_grad():
        model.decoder_layers[-1].cross_attn.v_proj.weight[0, 0] += 0.5
    assert not torch.allclose(model(src, tgt, src_pad, tgt_pad), before, atol=1e-6)


def test_the_copy_has_final_norms_exactly_when_the_stack_is_pre_norm():
    post, pre = to_torch_transformer(_model(False)), to_torch_transformer(_model(True))
    assert post.encoder.norm is None and post.decoder.norm is None
    assert isinstance(pre.encoder.norm, nn.LayerNorm) and isinstance(pre.decoder.norm,
                                                                     nn.LayerNorm)
    assert post.batch_first and not post.training
    assert _model(False).encoder_norm is None and _model(True).decoder_norm is not None


def test_embeddings_are_scaled_and_sinusoidal_positions_added():
    """Independent of the package's position table: sin/cos recomputed with ``math``."""
    model = _model()
    tokens = torch.tensor([[3, 0, 5]])
    x = model._embed(model.tgt_embed, tokens, start=2)  # positions 2, 3, 4
    for i, tok in enumerate(tokens[0].tolist()):
        pos = 2 + i
        pe = [math.sin(pos / 10000 ** (c / E)) if c % 2 == 0 else
              math.cos(pos / 10000 ** ((c - 1) / E)) for c in range(E)]
        expected = model.tgt_embed.weight[tok] * math.sqrt(E) + torch.tensor(pe)
        torch.testing.assert_close(x[0, i], expected, atol=1e-12, rtol=0)


def test_embeddings_start_at_the_scale_of_the_positions():
    """Drawn from N(0, 1/E): times sqrt(E), unit variance per feature, like the sinusoidal
    positions' (PyTorch's default N(0, 1) would give variance E)."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = Transformer(400, 300, 64, 4, 1, 32)
    for embedding in (model.src_embed, model.tgt_embed):
        scaled_var = float((embedding.weight.detach() * math.sqrt(64)).double().var())
        assert 0.9 < scaled_var < 1.1, scaled_var  # 25,600 draws or more: +-0.03 or so
    assert 0.4 < float(model.positions.double().var()) < 0.6  # sin and cos: mean square 1/2


def test_target_is_causal_and_padded_source_tokens_are_ignored():
    model = _model(norm_first=True)
    src, tgt, src_pad, _ = _batch()
    logits = model(src, tgt, src_pad)
    later = tgt.clone()
    later[:, 3] = (later[:, 3] + 1) % V_TGT  # change target position 3
    changed = model(src, later, src_pad)
    torch.testing.assert_close(changed[:, :3], logits[:, :3], atol=1e-12, rtol=0)
    assert not torch.allclose(changed[:, 3:], logits[:, 3:])
    padded = src.clone()
    padded[~src_pad] = (padded[~src_pad] + 3) % V_SRC  # change only padded source tokens
    torch.testing.assert_close(model(padded, tgt, src_pad), logits, atol=1e-12, rtol=0)


def test_tied_output_shares_the_target_embedding_and_the_parameter_count_is_as_counted():
    untied, tied = _model(), _model(tie_output=True)
    assert tied.output.weight is tied.tgt_embed.weight
    attention = 4 * (E * E + E)  # W_q, W_k, W_v, W_o with biases
    ffn = E * FF + FF + FF * E + E
    norm = 2 * E
    encoder = N * (attention + ffn + 2 * norm)
    decoder = N * (2 * attention + ffn + 3 * norm)
    embeddings = V_SRC * E + V_TGT * E
    output = V_TGT * E + V_TGT
    assert count_parameters(untied) == embeddings + encoder + decoder + output
    assert count_parameters(tied) == count_parameters(untied) - V_TGT * E
    pre = _model(norm_first=True)
    assert count_parameters(pre) == count_parameters(untied) + 2 * norm


def test_runs_on_the_device_as_on_the_cpu(device):
    model = _model(dtype=torch.float32)
    src, tgt, src_pad, tgt_pad = _batch()
    expected = model(src, tgt, src_pad, tgt_pad)
    moved = _model(dtype=torch.float32).to(device)
    got = moved(src.to(device), tgt.to(device), src_pad.to(device), tgt_pad.to(device))
    torch.testing.assert_close(got.cpu(), expected, atol=1e-4, rtol=0)
    made_there = Transformer(V_SRC, V_TGT, E, H, N, FF, device=device, dtype=torch.float64)
    assert made_there.positions.device.type == torch.device(device).type
    assert made_there.output.weight.dtype == torch.float64


@pytest.mark.parametrize("kwargs, error, match", [
    ({"num_layers": 0}, ValueError, "num_layers"),
    ({"embed_dim": 18}, ValueError, "divisible"),
    ({"src_vocab_size": 0}, ValueError, "src_vocab_size"),
    ({"dropout": 1.0}, ValueError, "dropout"),
    ({"activation": "tanh"}, ValueError, "activation"),
    ({"max_len": -1}, ValueError, "max_len"),
])
def test_bad_construction_is_named(kwargs, error, match):
    args = dict(src_vocab_size=V_SRC, tgt_vocab_size=V_TGT, embed_dim=E, num_heads=H,
                num_layers=N, ff_dim=FF)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        Transformer(**args)


def test_bad_input_is_named():
    model = _model()
    src, tgt, src_pad, tgt_pad = _batch()
    with pytest.raises(TypeError, match="src must hold int64"):
        model(src.int(), tgt)
    with pytest.raises(ValueError, match=r"tgt holds ids outside \[0, 13\)"):
        model(src, tgt + V_TGT)
    with pytest.raises(ValueError, match="src must be \\(B, L\\)"):
        model(src[0], tgt)
    with pytest.raises(ValueError, match="max_len = 4"):
        Transformer(V_SRC, V_TGT, E, H, N, FF, max_len=4)(src, tgt)
    with pytest.raises(ValueError, match="share the batch size"):
        model(src[:2], tgt)
    with pytest.raises(TypeError, match="src_padding must be boolean"):
        model(src, tgt, src_pad.long())
    with pytest.raises(ValueError, match=r"tgt_padding must have the tokens' shape"):
        model(src, tgt, src_pad, tgt_pad[:, :2])
    empty = tgt_pad.clone()
    empty[1] = False
    with pytest.raises(ValueError, match=r"no real token in sequence\(s\) \[1\]"):
        model(src, tgt, src_pad, empty)
    with pytest.raises(TypeError, match="src must be a torch.Tensor"):
        model.encode([[1, 2]])
    with pytest.raises(TypeError, match="src_padding must be a torch.Tensor or None"):
        model(src, tgt, [[True] * S] * B)
    with pytest.raises(ValueError, match="src is on meta but the model is on cpu"):
        model.encode(src.to("meta"))
    assert "norm_first=False, tie_output=False" in repr(model)
    with pytest.raises(TypeError, match="model must be a Transformer"):
        to_torch_transformer(nn.Linear(2, 2))
