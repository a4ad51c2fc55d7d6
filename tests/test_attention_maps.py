"""The attention weights inside a Transformer (attention_src.attention_maps).

Peer: PyTorch's ``nn.Transformer`` carrying the same weights (``to_torch_transformer``), whose
``nn.MultiheadAttention`` modules are asked for their per-head weights
(``average_attn_weights=False``) on the inputs they received; fast paths off. Properties:
rows sum to 1, padded source columns and future target positions get 0, the weights reproduce
the attention output. Bad input: named errors.
"""

from __future__ import annotations

import pytest
import torch

from attention_src.attention_maps import attention_rollout, transformer_attention_weights
from attention_src.softmax import causal_mask
from attention_src.transformer import to_torch_transformer
from tests.test_transformer_model import SRC_LENS, B, H, N, S, T, _batch, _model


@pytest.fixture(autouse=True, scope="module")
def _pytorch_reference_path():
    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(was)


def _torch_weights(model, src, tgt, src_pad):
    """Per-head weights from PyTorch's own attention modules, on the inputs they were given."""
    ref = to_torch_transformer(model)
    modules = {"encoder": [layer.self_attn for layer in ref.encoder.layers],
               "decoder": [layer.self_attn for layer in ref.decoder.layers],
               "cross": [layer.multihead_attn for layer in ref.decoder.layers]}
    calls = {}
    handles = [m.register_forward_pre_hook(
        lambda mod, args, kwargs: calls.__setitem__(mod, (args, kwargs)), with_kwargs=True)
        for ms in modules.values() for m in ms]
    x_src = model._embed(model.src_embed, src)
    x_tgt = model._embed(model.tgt_embed, tgt)
    with torch.no_grad():
        ref(x_src, x_tgt, tgt_mask=~causal_mask(tgt.shape[1]),
            src_key_padding_mask=~src_pad, memory_key_padding_mask=~src_pad)
        for handle in handles:
            handle.remove()
        out = {}
        for name, ms in modules.items():
            weights = []
            for m in ms:
                args, kwargs = calls[m]
                kwargs = {**kwargs, "need_weights": True, "average_attn_weights": False,
                          "is_causal": False}
                weights.append(m(*args, **kwargs)[1])  # (B, h, L_q, L_k)
            out[name] = torch.stack(weights)
    return out


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_weights_equal_pytorchs_per_layer_and_head(norm_first):
    model = _model(norm_first)
    src, tgt, src_pad, _ = _batch()
    ours = transformer_attention_weights(model, src, tgt, src_pad)
    theirs = _torch_weights(model, src, tgt, src_pad)
    assert {k: tuple(v.shape) for k, v in ours.items()} == {
        "encoder": (N, B, H, S, S), "decoder": (N, B, H, T, T), "cross": (N, B, H, T, S)}
    for name in ours:
        torch.testing.assert_close(ours[name], theirs[name], atol=1e-12, rtol=0, msg=name)


def test_rows_sum_to_one_and_masked_keys_get_nothing():
    model = _model(True)
    src, tgt, src_pad, _ = _batch(1)
    maps = transformer_attention_weights(model, src, tgt, src_pad)
    for name, w in maps.items():
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1], dtype=w.dtype),
                                   msg=name)
    for b, length in enumerate(SRC_LENS):
        assert (maps["cross"][:, b, ..., length:] == 0).all()
        assert (maps["encoder"][:, b, ..., length:] == 0).all()
    future = ~causal_mask(T)  # (T, T), True above the diagonal
    assert (maps["decoder"][..., future] == 0).all()


@pytest.mark.parametrize("positional, stack, kind", [
    ("sinusoidal", "decoder_layers", "cross"),
    ("rotary", "encoder_layers", "encoder"),  # the recorded call carries the rotation
    ("rotary", "decoder_layers", "decoder"),
])
def test_the_weights_reproduce_the_last_layers_attention_output(positional, stack, kind):
    """Weights times the values, through W_o, is the module's output: the weights are the
    ones the model used (for a rotary model, with its queries and keys rotated)."""
    model = _model(False, positional=positional)
    src, tgt, src_pad, _ = _batch(2)
    maps = transformer_attention_weights(model, src, tgt, src_pad)
    layer = getattr(model, stack)[-1]
    attn = layer.cross_attn if kind == "cross" else layer.self_attn
    seen = {}
    handle = attn.register_forward_hook(lambda m, args, kwargs, out: seen.update(
        args=args, kwargs=kwargs, out=out[0]), with_kwargs=True)
    with torch.no_grad():
        model(src, tgt, src_padding=src_pad)
        handle.remove()
        values = seen["args"][2]  # (B, L_k, E)
        v = attn._split_heads(attn.v_proj(values))  # (B, h, L_k, d_head)
        heads = maps[kind][-1] @ v  # (B, h, L_q, d_head)
        L_q = heads.shape[2]
        concat = heads.transpose(1, 2).reshape(B, L_q, -1)  # (B, L_q, E)
    torch.testing.assert_close(attn.out_proj(concat), seen["out"], atol=1e-12, rtol=0)


def test_training_mode_is_restored_and_hooks_removed():
    model = _model(True).train()
    src, tgt, src_pad, _ = _batch()
    transformer_attention_weights(model, src, tgt, src_pad)
    assert model.training
    assert all(not m._forward_pre_hooks for m in model.modules())


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="attention_src Transformer, got Linear"):
        transformer_attention_weights(torch.nn.Linear(2, 2), None, None)
    model = _model()
    src, tgt, _, _ = _batch()
    with pytest.raises(ValueError, match="src and tgt must share the batch size"):
        transformer_attention_weights(model, src, tgt[:1])
    with pytest.raises(TypeError, match="int64"):
        transformer_attention_weights(model, src.float(), tgt)
    assert not any(m._forward_pre_hooks for m in model.modules())  # removed after an error


# -- attention rollout (Abnar & Zuidema, 2020) -----------------------------------------------

def test_rollout_of_a_hand_computed_two_layer_case():
    # layer 1: token 0 reads itself, token 1 reads token 0; layer 2: both read token 1
    w1 = torch.tensor([[1.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    w2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=torch.float64)
    weights = torch.stack([w1, w2])[:, None, None]  # (N=2, B=1, h=1, 2, 2)
    # with residual 1/2: A1 = [[1, 0], [.5, .5]], A2 = [[.5, .5], [0, 1]]
    # R = A2 @ A1 = [[.75, .25], [.5, .5]]
    expected = torch.tensor([[[0.75, 0.25], [0.5, 0.5]]], dtype=torch.float64)
    assert torch.allclose(attention_rollout(weights), expected, atol=1e-15)
    # without the residual it is the plain product: both rows end on token 0
    assert torch.allclose(attention_rollout(weights, residual=0.0),
                          torch.tensor([[[1.0, 0.0], [1.0, 0.0]]], dtype=torch.float64))


def test_rollout_averages_heads_and_keeps_rows_distributions():
    g = torch.Generator().manual_seed(0)
    weights = torch.softmax(torch.randn(3, 2, 4, 5, 5, generator=g, dtype=torch.float64), -1)
    r = attention_rollout(weights)
    assert r.shape == (2, 5, 5)
    assert (r.sum(-1) - 1).abs().max().item() < 1e-12 and bool((r >= 0).all())
    # the heads enter only through their mean
    same_mean = weights.mean(2, keepdim=True).expand_as(weights)
    assert torch.allclose(attention_rollout(same_mean), r, atol=1e-14)
    # one layer: (1 - residual) * mean + residual * I
    one = attention_rollout(weights[:1], residual=0.25)
    assert torch.allclose(one, 0.75 * weights[0].mean(1) + 0.25 * torch.eye(5,
                                                                              dtype=torch.float64))


@pytest.mark.parametrize("bad, error", [
    (torch.ones(2, 1, 1, 3, 3, dtype=torch.int64), TypeError),
    ([[1.0]], TypeError),
    (torch.ones(1, 1, 3, 3), ValueError),
    (torch.ones(1, 1, 1, 3, 4), ValueError),
])
def test_rollout_rejects_bad_weights(bad, error):
    with pytest.raises(error, match="weights"):
        attention_rollout(bad)


@pytest.mark.parametrize("residual", [1.0, -0.1, True])
def test_rollout_rejects_a_bad_residual(residual):
    with pytest.raises(ValueError, match="residual"):
        attention_rollout(torch.ones(1, 1, 1, 2, 2) / 2, residual=residual)
