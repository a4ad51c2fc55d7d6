"""Tests of ``attention_src.language_model``: the attention-only Transformer and the head scores.

The model is checked against an independent forward pass built from PyTorch's own
``nn.MultiheadAttention`` (weights copied with ``to_torch_multihead``) and a causal mask; the
ablation gates against zeroing the head's columns of the output projection; the two head
scores against plain-Python loops over their definitions.
"""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import attention_src as att
from attention_src import data
from attention_src.language_model import (
    AttentionOnlyTransformer,
    duplicate_token_score,
    next_token_losses,
    ov_copying_score,
    path_ablated_logits,
    prefix_matching_score,
    previous_token_score,
    train_language_model,
)
from tests.conftest import PROPERTY, TOL, seeds


def _model(seed=0, vocab=11, embed=12, heads=3, layers=2, max_len=9, dtype=torch.float64):
    torch.manual_seed(seed)
    return AttentionOnlyTransformer(vocab, embed, heads, layers, max_len).to(dtype)


def _tokens(seed, B, L, vocab):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab, (B, L), generator=g)


def _reference_forward(model: AttentionOnlyTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """The same model with PyTorch's ``nn.MultiheadAttention`` in every layer."""
    L = tokens.shape[1]
    x = model.embed(tokens) + model.pos_embed.weight[:L]  # (B, L, E)
    blocked = torch.ones(L, L, dtype=torch.bool).triu(1)  # PyTorch: True = may NOT attend
    for layer in model.layers:
        ref = att.to_torch_multihead(layer).eval()
        x = x + ref(x, x, x, attn_mask=blocked, need_weights=False)[0]
    return model.unembed(x)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_forward_equals_a_pytorch_reference(dtype):
    model = _model(dtype=dtype).eval()
    tokens = _tokens(1, 4, 9, 11)
    with torch.no_grad():
        assert torch.allclose(model(tokens), _reference_forward(model, tokens), **TOL[dtype])


def test_shapes_and_weights_are_causal_distributions():
    model = _model().eval()
    tokens = _tokens(2, 3, 7, 11)
    logits, weights = model(tokens, return_weights=True)
    assert logits.shape == (3, 7, 11)
    assert len(weights) == 2 and all(w.shape == (3, 3, 7, 7) for w in weights)
    future = torch.ones(7, 7, dtype=torch.bool).triu(1)
    for w in weights:
        assert torch.all(w[..., future] == 0)
        assert torch.allclose(w.sum(-1), torch.ones(3, 3, 7, dtype=torch.float64))


def test_logits_at_t_do_not_depend_on_later_tokens():
    model = _model().eval()
    tokens = _tokens(3, 2, 9, 11)
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % 11
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    assert torch.equal(a[:, :5], b[:, :5])
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_gates_of_one_change_nothing():
    model = _model().eval()
    tokens = _tokens(4, 2, 8, 11)
    with torch.no_grad():
        assert torch.equal(model(tokens), model(tokens, gates=torch.ones(2, 3,
                                                                         dtype=torch.float64)))


@pytest.mark.parametrize(("layer", "head"), [(0, 0), (1, 2)])
def test_a_zero_gate_equals_zeroing_the_heads_columns_of_the_output_projection(layer, head):
    model = _model().eval()
    tokens = _tokens(5, 3, 9, 11)
    gates = torch.ones(2, 3, dtype=torch.float64)
    gates[layer, head] = 0.0
    edited = copy.deepcopy(model)
    d = edited.embed_dim // edited.num_heads
    with torch.no_grad():
        edited.layers[layer].out_proj.weight[:, head * d:(head + 1) * d] = 0.0
        ablated, expected = model(tokens, gates=gates), edited(tokens)
    assert torch.allclose(ablated, expected, **TOL[torch.float64])
    assert not torch.allclose(ablated, model(tokens).detach())


def test_next_token_losses_equal_cross_entropy_position_by_position():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    tokens = _tokens(6, 2, 5, 7)
    losses = next_token_losses(logits, tokens)
    assert losses.shape == (2, 4)
    for b in range(2):
        for t in range(4):
            expected = F.cross_entropy(logits[b, t], tokens[b, t + 1])
            assert torch.allclose(losses[b, t], expected)


def _random_causal_weights(seed, *shape):
    L = shape[-1]
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(shape, generator=g, dtype=torch.float64)
    return att.masked_softmax(scores, att.causal_mask(L))


def _loop_previous_token(w):  # w: (B, L, L)
    values = [float(w[b, i, i - 1]) for b in range(w.shape[0]) for i in range(1, w.shape[1])]
    return sum(values) / len(values)


def _loop_prefix_matching(w, tokens):  # w: (B, L, L), tokens: (B, L)
    B, L = tokens.shape
    totals = []
    for b in range(B):
        for i in range(L):
            targets = [j for j in range(1, i) if tokens[b, j - 1] == tokens[b, i]]
            if targets:
                totals.append(sum(float(w[b, i, j]) for j in targets))
    return sum(totals) / len(totals)


@PROPERTY
@given(seed=seeds, B=st.integers(1, 3), L=st.integers(2, 8), heads=st.integers(1, 3))
def test_previous_token_score_equals_its_definition(seed, B, L, heads):
    w = _random_causal_weights(seed, heads, B, L, L)
    scores = previous_token_score(w)
    assert scores.shape == (heads,)
    for h in range(heads):
        assert abs(float(scores[h]) - _loop_previous_token(w[h])) < 1e-12


@PROPERTY
@given(seed=seeds, B=st.integers(1, 3), L=st.integers(4, 9), heads=st.integers(1, 3))
def test_prefix_matching_score_equals_its_definition(seed, B, L, heads):
    tokens = _tokens(seed, B, L, 2)  # two symbols: matches are likely
    w = _random_causal_weights(seed + 1, heads, B, L, L)
    has_target = any(tokens[b, j - 1] == tokens[b, i]
                     for b in range(B) for i in range(L) for j in range(1, i))
    if not has_target:  # e.g. 0 0 1 1: the score is undefined
        with pytest.raises(ValueError, match="no query has an earlier copy"):
            prefix_matching_score(w, tokens)
        return
    scores = prefix_matching_score(w, tokens)
    assert scores.shape == (heads,)
    for h in range(heads):
        assert abs(float(scores[h]) - _loop_prefix_matching(w[h], tokens)) < 1e-12


def _loop_duplicate_token(w, tokens):  # w: (B, L, L), tokens: (B, L)
    B, L = tokens.shape
    totals = []
    for b in range(B):
        for i in range(L):
            targets = [j for j in range(i) if tokens[b, j] == tokens[b, i]]
            if targets:
                totals.append(sum(float(w[b, i, j]) for j in targets))
    return sum(totals) / len(totals)


@given(seed=seeds)
@PROPERTY
def test_prefix_matching_score_on_chosen_queries_equals_its_definition(seed):
    g = torch.Generator().manual_seed(seed)
    B, L = 3, 10
    tokens = torch.randint(3, (B, L), generator=g)
    w = torch.rand(2, B, L, L, generator=g, dtype=torch.float64)
    queries = torch.rand(B, L, generator=g) < 0.5
    picked = []  # per head, plain loops: queries chosen and with a target
    for hd in range(2):
        vals = []
        for b in range(B):
            for i in range(L):
                js = [j for j in range(1, i) if tokens[b, j - 1] == tokens[b, i]]
                if queries[b, i] and js:
                    vals.append(sum(float(w[hd, b, i, j]) for j in js))
        picked.append(vals)
    if not picked[0]:
        with pytest.raises(ValueError, match="no query has an earlier copy"):
            prefix_matching_score(w, tokens, queries)
        return
    expected = torch.tensor([sum(v) / len(v) for v in picked], dtype=torch.float64)
    assert torch.allclose(prefix_matching_score(w, tokens, queries), expected,
                          **TOL[torch.float64])


@PROPERTY
@given(seed=seeds, B=st.integers(1, 3), L=st.integers(3, 9), heads=st.integers(1, 3))
def test_duplicate_token_score_equals_its_definition(seed, B, L, heads):
    tokens = _tokens(seed, B, L, 2)  # with two symbols and L >= 3 a repeat is certain
    w = _random_causal_weights(seed + 1, heads, B, L, L)
    scores = duplicate_token_score(w, tokens)
    assert scores.shape == (heads,)
    for h in range(heads):
        assert abs(float(scores[h]) - _loop_duplicate_token(w[h], tokens)) < 1e-12


def test_ideal_heads_score_one_and_uniform_heads_score_what_counting_says():
    L = 8
    previous = torch.zeros(1, L, L, dtype=torch.float64)
    previous[0, 0, 0] = 1.0
    previous[0, torch.arange(1, L), torch.arange(L - 1)] = 1.0
    assert float(previous_token_score(previous)) == 1.0
    uniform = att.masked_softmax(torch.zeros(1, L, L, dtype=torch.float64), att.causal_mask(L))
    expected = sum(1 / (i + 1) for i in range(1, L)) / (L - 1)
    assert abs(float(previous_token_score(uniform)) - expected) < 1e-12
    # a b c d a b c d: query i >= 4 has one target, key i - 3; an induction head puts 1 there
    tokens = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])
    induction = torch.zeros(1, L, L, dtype=torch.float64)
    induction[0, torch.arange(L), torch.arange(L)] = 1.0
    induction[0, torch.arange(4, L), torch.arange(1, L - 3)] = 1.0
    induction[0, torch.arange(4, L), torch.arange(4, L)] = 0.0
    assert float(prefix_matching_score(induction, tokens)) == 1.0
    assert float(prefix_matching_score(previous, tokens)) == 0.0
    duplicate = induction.roll(-1, dims=-1)  # key i - 4: the earlier copy itself
    duplicate[0, :4] = torch.eye(L, dtype=torch.float64)[:4]
    assert float(duplicate_token_score(duplicate, tokens)) == 1.0
    assert float(prefix_matching_score(duplicate, tokens)) == 0.0


def test_a_match_with_the_previous_token_itself_is_not_a_target():
    # tokens 0 0: for query 1 the "earlier copy" is key 0, whose successor is the query itself
    tokens = torch.tensor([[0, 0, 1]])
    w = torch.eye(3, dtype=torch.float64).unsqueeze(0)
    with pytest.raises(ValueError, match="no query has an earlier copy"):
        prefix_matching_score(w, tokens)


def test_training_lowers_the_loss_reproducibly_and_evaluates_on_schedule():
    def batches(step):
        return data.repeated_segments(16, 12, 6, 4, seed=step).tokens

    eval_tokens = data.repeated_segments(8, 12, 6, 4, seed=999).tokens
    calls = []

    def on_eval(step, logits, weights):
        calls.append(step)
        assert logits.shape == (8, 12, 6) and len(weights) == 2
        return {"pt": previous_token_score(weights[0].transpose(0, 1))}

    runs = []
    for _ in range(2):
        model = _model(vocab=6, embed=8, heads=2, max_len=12, dtype=torch.float32)
        calls.clear()
        runs.append(train_language_model(model, batches, 60, 1e-2, eval_tokens, 20, on_eval))
        assert calls == [0, 20, 40, 60] and not model.training
    assert torch.equal(runs[0]["losses"], runs[1]["losses"])
    losses = runs[0]["losses"]
    assert losses.shape == (60,) and losses[-10:].mean() < losses[:10].mean()
    assert [s for s, _ in runs[0]["evals"]] == [0, 20, 40, 60]


def _reference_path_ablation(model, tokens, heads, paths):
    """Head by head with explicit matrices (row vectors, x W): layer 2's inputs named in
    ``paths`` lose the layer-1 heads ``heads``; everything else is the intact model."""
    L = tokens.shape[1]
    E, h = model.embed_dim, model.num_heads
    d = E // h
    allowed = torch.ones(L, L, dtype=torch.bool).tril()

    def head_out(layer, i, xq, xk, xv):  # one head's (B, L, E) contribution
        cols = slice(i * d, (i + 1) * d)
        wq, wk, wv = (getattr(layer, n).weight[cols].T for n in ("q_proj", "k_proj", "v_proj"))
        bq, bk, bv = (getattr(layer, n).bias[cols] for n in ("q_proj", "k_proj", "v_proj"))
        s = (xq @ wq + bq) @ (xk @ wk + bk).transpose(1, 2) / d ** 0.5  # (B, L, L)
        a = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
        return a @ (xv @ wv + bv) @ layer.out_proj.weight[:, cols].T

    x0 = model.embed(tokens) + model.pos_embed.weight[:L]
    l1, l2 = model.layers[0], model.layers[1]
    outs = [head_out(l1, i, x0, x0, x0) for i in range(h)]
    x1 = x0 + sum(outs) + l1.out_proj.bias
    x1_cut = x0 + sum(o for i, o in enumerate(outs) if i not in heads) + l1.out_proj.bias
    xq, xk, xv = (x1_cut if p in paths else x1 for p in "qkv")
    x2 = x1 + sum(head_out(l2, i, xq, xk, xv) for i in range(h)) + l2.out_proj.bias
    return model.unembed(x2)


@pytest.mark.parametrize(("heads", "paths"),
                         [([0], "q"), ([1, 2], "k"), ([2], "v"), ([0, 2], "qv"), ([1], "qkv")])
def test_path_ablation_equals_a_head_by_head_reference(heads, paths):
    model = _model().eval()
    tokens = _tokens(2, 3, 9, 11)
    with torch.no_grad():
        ours = path_ablated_logits(model, tokens, heads, paths)
        ref = _reference_path_ablation(model, tokens, heads, paths)
        intact = model(tokens)
    assert torch.allclose(ours, ref, **TOL[torch.float64])
    assert (ours - intact).abs().max() > 1e-3  # the ablation does change something


def test_path_ablation_of_no_head_is_the_intact_model_and_all_paths_differ_from_gating():
    model = _model(layers=3).eval()
    tokens = _tokens(3, 2, 9, 11)
    with torch.no_grad():
        assert torch.equal(path_ablated_logits(model, tokens, [], "qkv"), model(tokens))
        # removing a head from all three inputs of layer 2 differs from zeroing it only by
        # its direct path to the logits (it stays in the stream): check that relation on a
        # 2-layer model through the gates
        model2 = _model().eval()
        gates = torch.ones(2, 3, dtype=torch.float64)
        gates[0, 1] = 0.0
        gated = model2(tokens, gates=gates)
        x0 = model2.embed(tokens) + model2.pos_embed.weight[:9]
        full, _ = model2._attend(model2.layers[0], x0, att.causal_mask(9), None)
        cut, _ = model2._attend(model2.layers[0], x0, att.causal_mask(9), gates[0])
        direct = (full - cut) @ model2.unembed.weight.T  # the head's direct logit effect
        ours = path_ablated_logits(model2, tokens, [1], "qkv")
    assert torch.allclose(ours, gated + direct, **TOL[torch.float64])


def test_ov_copying_score_is_one_for_a_copier_minus_one_for_a_suppressor():
    model = AttentionOnlyTransformer(4, 4, 2, 1, 3).double()
    with torch.no_grad():
        for lin in (model.layers[0].v_proj, model.layers[0].out_proj, model.unembed):
            lin.weight.copy_(torch.eye(4))
        model.embed.weight.copy_(2 * torch.eye(4))
        assert torch.allclose(ov_copying_score(model, 0), torch.ones(2, dtype=torch.float64))
        model.layers[0].out_proj.weight.mul_(-1)
        assert torch.allclose(ov_copying_score(model, 0), -torch.ones(2, dtype=torch.float64))
        # a dead head (head 1: its value columns zero) has a zero circuit: score 0, not NaN,
        # and the live head keeps its score
        model.layers[0].v_proj.weight[2:] = 0.0
        assert ov_copying_score(model, 0).tolist() == [-1.0, 0.0]
        model.layers[0].v_proj.weight.zero_()
        assert ov_copying_score(model, 0).tolist() == [0.0, 0.0]


def test_ov_copying_score_equals_numpy_eigenvalues_of_the_circuit():
    np = pytest.importorskip("numpy")
    model = _model(vocab=7, embed=12, heads=3)
    for layer in range(2):
        lay = model.layers[layer]
        got = ov_copying_score(model, layer)
        for i in range(3):
            cols = slice(4 * i, 4 * i + 4)
            # nn.Linear convention: logits = W_U (W_o[:, cols] (W_v[cols] e_t)): column t
            m = (model.unembed.weight @ lay.out_proj.weight[:, cols] @ lay.v_proj.weight[cols]
                 @ model.embed.weight.T).detach().numpy()
            eig = np.linalg.eigvals(m)
            assert abs(float(got[i]) - eig.real.sum() / np.abs(eig).sum()) < 1e-10


def nn_linear():
    return torch.nn.Linear(2, 2)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: m(torch.zeros(2, 3)), TypeError, "integer tensor"),
        (lambda m: m(torch.zeros(3, dtype=torch.long)), ValueError, "must be \\(B, L\\)"),
        (lambda m: m(torch.full((1, 3), 11)), ValueError, "token ids must lie in \\[0, 11\\)"),
        (lambda m: m(torch.zeros(1, 10, dtype=torch.long)), ValueError, "exceeds max_len"),
        (lambda m: m(torch.zeros(1, 3, dtype=torch.long), gates=torch.ones(3, 2)),
         ValueError, "gates must be \\(num_layers, num_heads\\)"),
        (lambda m: AttentionOnlyTransformer(11, 10, 3, 2, 9), ValueError, "divisible"),
        (lambda m: AttentionOnlyTransformer(11, 12, 3, 0, 9), ValueError,
         "num_layers must be positive"),
        (lambda m: previous_token_score(torch.ones(2, 3, 4)), ValueError, "\\(\\.\\.\\., L, L\\)"),
        (lambda m: previous_token_score(torch.ones(3, 3)), ValueError, "\\(\\.\\.\\., B, L, L\\)"),
        (lambda m: prefix_matching_score(torch.ones(2, 4, 4), torch.zeros(2, 5, dtype=torch.long)),
         ValueError, "must match tokens"),
        (lambda m: next_token_losses(torch.ones(2, 4, 3), torch.zeros(2, 5, dtype=torch.long)),
         ValueError, "must agree"),
        (lambda m: prefix_matching_score(torch.ones(2, 4, 4), torch.zeros(2, 4, dtype=torch.long),
                                         torch.ones(2, 4)),
         ValueError, "queries must be a bool tensor shaped like tokens"),
        (lambda m: prefix_matching_score(torch.ones(2, 4, 4), torch.zeros(2, 4, dtype=torch.long),
                                         torch.ones(2, 3, dtype=torch.bool)),
         ValueError, "queries must be a bool tensor shaped like tokens"),
        (lambda m: train_language_model(m, lambda s: None, 5, eval_every=2), ValueError,
         "eval_every needs"),
        (lambda m: train_language_model(m, lambda s: None, 5, eval_every=-1), ValueError,
         "eval_every must be an int >= 0"),
        (lambda m: next_token_losses(torch.ones(2, 1, 3), torch.zeros(2, 1, dtype=torch.long)),
         ValueError, "need L >= 2"),
        (lambda m: m(torch.zeros(1, 0, dtype=torch.long)), ValueError, "at least one position"),
        (lambda m: path_ablated_logits(m, torch.zeros(1, 3, dtype=torch.long), [3], "q"),
         ValueError, "heads must be ints in \\[0, 3\\)"),
        (lambda m: path_ablated_logits(m, torch.zeros(1, 3, dtype=torch.long), [1, 1], "q"),
         ValueError, "must not repeat"),
        (lambda m: path_ablated_logits(m, torch.zeros(1, 3, dtype=torch.long), [1], "qx"),
         ValueError, "paths must be distinct letters"),
        (lambda m: path_ablated_logits(m, torch.zeros(1, 3, dtype=torch.long), [1], ""),
         ValueError, "paths must be distinct letters"),
        (lambda m: path_ablated_logits(_model(layers=1), torch.zeros(1, 3, dtype=torch.long),
                                       [0], "q"), ValueError, "at least 2 layers"),
        (lambda m: path_ablated_logits(None, torch.zeros(1, 3, dtype=torch.long), [0], "q"),
         TypeError, "must be an AttentionOnlyTransformer"),
        (lambda m: ov_copying_score(m, 2), ValueError, "layer must be an int in \\[0, 2\\)"),
        (lambda m: ov_copying_score(nn_linear(), 0), TypeError,
         "must be an AttentionOnlyTransformer"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call(_model())


# --- bad input, boundaries and defaults, argument by argument (issue 13) ----------------------


@pytest.mark.parametrize("name", ["vocab_size", "embed_dim", "num_heads", "num_layers",
                                  "max_len"])
def test_each_constructor_argument_is_named_when_not_positive(name):
    args = {"vocab_size": 11, "embed_dim": 12, "num_heads": 3, "num_layers": 2, "max_len": 9}
    with pytest.raises(ValueError, match=rf"^{name} must be positive, got 0$"):
        AttentionOnlyTransformer(**(args | {name: 0}))
    with pytest.raises(TypeError, match=rf"^{name} must be an int, got float$"):
        AttentionOnlyTransformer(**(args | {name: 2.0}))


def test_tokens_that_are_not_a_tensor_or_out_of_range_are_refused_by_name():
    model = _model()
    with pytest.raises(TypeError, match=r"^tokens must be a torch\.Tensor, got list$"):
        model([[1, 2, 3]])
    with pytest.raises(TypeError, match=r"^tokens must be an integer tensor \(int64\), got "
                                        r"dtype torch\.float32$"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match=r"^tokens must be \(B, L\), got shape \(1, 1, 3\)$"):
        model(torch.zeros(1, 1, 3, dtype=torch.long))
    # a negative id is as wrong as one >= V; both ends of [0, V) are named
    with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 11\), got values from "
                                         r"-1 to 4$"):
        model(torch.tensor([[0, -1, 4]]))
    with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 11\), got values from "
                                         r"0 to 11$"):
        model(torch.tensor([[0, 11, 4]]))


def test_the_extreme_token_ids_and_lengths_are_accepted():
    """ids 0 and V - 1 are valid, and so are L = 1 and L = max_len; L = 0 and L = max_len + 1
    are not."""
    model = _model().eval()
    with torch.no_grad():
        assert model(torch.tensor([[0, 10, 0]])).shape == (1, 3, 11)
        assert model(torch.tensor([[10]])).shape == (1, 1, 11)
        assert model(torch.zeros(2, 9, dtype=torch.long)).shape == (2, 9, 11)
    with pytest.raises(ValueError, match=r"^tokens must hold at least one position, got L = 0$"):
        model(torch.zeros(1, 0, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^sequence length 10 exceeds max_len = 9$"):
        model(torch.zeros(1, 10, dtype=torch.long))


def test_gates_must_be_a_float_tensor_and_may_have_another_float_dtype():
    model = _model(dtype=torch.float32).eval()
    tokens = _tokens(7, 2, 6, 11)
    with pytest.raises(TypeError, match=r"^gates must be a floating-point tensor, got dtype "
                                        r"torch\.int64"):
        model(tokens, gates=torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"^gates must be a torch\.Tensor, got list$"):
        model(tokens, gates=[[1.0] * 3] * 2)
    with pytest.raises(ValueError, match=r"^gates must have at least 2 dimensions, got shape "
                                         r"\(6,\)$"):
        model(tokens, gates=torch.ones(6))
    with pytest.raises(ValueError, match=r"^gates must be \(num_layers, num_heads\) = \(2, 3\), "
                                         r"got shape \(3, 2\)$"):
        model(tokens, gates=torch.ones(3, 2))
    # float64 gates on a float32 model: converted to the model's dtype, same logits
    gates = torch.ones(2, 3)
    gates[1, 0] = 0.0
    with torch.no_grad():
        single = model(tokens, gates=gates)
        double = model(tokens, gates=gates.double())
    assert double.dtype == torch.float32
    assert torch.equal(single, double)


def test_next_token_losses_name_their_bad_arguments_and_accept_two_positions():
    tokens = torch.tensor([[1, 2], [0, 3]])
    with pytest.raises(TypeError, match=r"^logits must be a floating-point tensor"):
        next_token_losses(torch.zeros(2, 2, 4, dtype=torch.long), tokens)
    with pytest.raises(ValueError, match=r"^logits must have at least 3 dimensions, got shape "
                                         r"\(2, 2\)$"):
        next_token_losses(torch.zeros(2, 2), tokens)
    with pytest.raises(ValueError, match=r"^logits \(B, L, V\) and tokens \(B, L\) must agree, "
                                         r"got \(2, 2, 4, 1\) and \(2, 2\)$"):
        next_token_losses(torch.zeros(2, 2, 4, 1), tokens)
    with pytest.raises(TypeError, match=r"^tokens must be a torch\.Tensor, got list$"):
        next_token_losses(torch.zeros(2, 2, 4), [[1, 2], [0, 3]])
    # an id outside [0, V) of the logits: named, whichever end
    with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 3\), got values from "
                                         r"0 to 3$"):
        next_token_losses(torch.zeros(2, 2, 3), tokens)
    with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 4\), got values from "
                                         r"-2 to 3$"):
        next_token_losses(torch.zeros(2, 2, 4), torch.tensor([[1, 2], [-2, 3]]))
    # L = 2, the shortest valid length: one prediction each, uniform logits give log V
    losses = next_token_losses(torch.zeros(2, 2, 4, dtype=torch.float64), tokens)
    assert losses.shape == (2, 1)
    assert torch.allclose(losses, torch.full((2, 1), math.log(4), dtype=torch.float64))


def test_previous_token_score_needs_two_positions_and_takes_the_shortest():
    with pytest.raises(ValueError, match=r"^previous_token_score needs L >= 2 \(no query has a "
                                         r"previous token\)$"):
        previous_token_score(torch.ones(2, 1, 1))
    with pytest.raises(TypeError, match=r"^weights must be a floating-point tensor"):
        previous_token_score(torch.ones(2, 3, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"^weights must be a torch\.Tensor, got list$"):
        previous_token_score([[[1.0]]])
    with pytest.raises(ValueError, match=r"^weights must be self-attention weights \(\.\.\., L, "
                                         r"L\), got shape \(2, 3, 4\)$"):
        previous_token_score(torch.ones(2, 3, 4))
    # L = 2: one query (position 1), whose weight on key 0 is the score; B = 1 and B = 2
    w = torch.tensor([[[1.0, 0.0], [0.25, 0.75]], [[1.0, 0.0], [0.5, 0.5]]])
    assert float(previous_token_score(w)) == pytest.approx(0.375)
    assert float(previous_token_score(w[:1])) == pytest.approx(0.25)


def test_match_scores_name_bad_weights_tokens_and_queries():
    tokens = torch.tensor([[0, 1, 0, 1]])
    w = torch.eye(4, dtype=torch.float64).unsqueeze(0)
    with pytest.raises(ValueError, match=r"^no query has an earlier copy of its token: the score "
                                         r"is undefined$"):
        prefix_matching_score(w, torch.tensor([[0, 1, 2, 3]]))
    with pytest.raises(ValueError, match=r"^no query has an earlier copy of its token"):
        duplicate_token_score(w, torch.tensor([[0, 1, 2, 3]]))
    with pytest.raises(TypeError, match=r"^weights must be a floating-point tensor"):
        prefix_matching_score(w.long(), tokens)
    with pytest.raises(TypeError, match=r"^tokens must be an integer tensor"):
        duplicate_token_score(w, tokens.float())
    with pytest.raises(ValueError, match=r"^weights \(\.\.\., B, L, L\) must match tokens \(B, "
                                         r"L\), got \(4, 4\) and \(1, 4\)$"):
        prefix_matching_score(w[0], tokens)
    with pytest.raises(ValueError, match=r"^queries must be a bool tensor shaped like tokens "
                                         r"\(1, 4\), got torch\.float32 \(1, 4\)$"):
        prefix_matching_score(w, tokens, torch.ones(1, 4))
    with pytest.raises(ValueError, match=r"^queries must be a bool tensor shaped like tokens "
                                         r"\(1, 4\), got torch\.bool \(4,\)$"):
        prefix_matching_score(w, tokens, torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^queries must be a bool tensor shaped like tokens "
                                         r"\(1, 4\), got list \(\)$"):
        prefix_matching_score(w, tokens, [[True] * 4])


@pytest.mark.parametrize("layer", [True, 1.0, -1, 2])
def test_ov_copying_score_refuses_a_layer_that_is_not_an_index(layer):
    with pytest.raises(ValueError, match=rf"^layer must be an int in \[0, 2\), got "
                                         rf"{re.escape(repr(layer))}$"):
        ov_copying_score(_model(), layer)


def test_ov_copying_score_reads_the_last_layer():
    """layer = num_layers - 1 is valid: the score of a 2-layer model's second layer."""
    model = _model()
    assert ov_copying_score(model, 1).shape == (3,)


@pytest.mark.parametrize("heads", [[True], [1.5], [-1], [3]])
def test_path_ablation_refuses_heads_that_are_not_head_indices(heads):
    tokens = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"^heads must be ints in \[0, 3\), got "
                                         + re.escape(repr(heads)) + "$"):
        path_ablated_logits(_model(), tokens, heads, "q")


@pytest.mark.parametrize("paths", ["qq", "Q", "X", "qx", ["q"], "", None])
def test_path_ablation_refuses_paths_that_are_not_distinct_letters_of_qkv(paths):
    tokens = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"^paths must be distinct letters from 'qkv', got "
                                         + re.escape(repr(paths)) + "$"):
        path_ablated_logits(_model(), tokens, [0], paths)


def test_path_ablation_names_a_model_that_is_not_ours_and_a_short_one():
    tokens = torch.zeros(1, 3, dtype=torch.long)
    with pytest.raises(TypeError, match=r"^model must be an AttentionOnlyTransformer, got "
                                        r"NoneType$"):
        path_ablated_logits(None, tokens, [0], "q")
    for function in (path_ablated_logits, ov_copying_score):
        args = (tokens, [0], "q") if function is path_ablated_logits else (0,)
        with pytest.raises(TypeError, match=r"^model must be an AttentionOnlyTransformer, got "
                                            r"Linear$"):
            function(nn_linear(), *args)
    with pytest.raises(ValueError, match=r"^path ablation needs at least 2 layers, got 1$"):
        path_ablated_logits(_model(layers=1), tokens, [0], "q")


def test_path_ablation_in_a_deeper_model_runs_the_later_layers_intact():
    """Three layers: the first two as in the head-by-head reference, then layer 3 as PyTorch's
    ``nn.MultiheadAttention`` on the (ablated) stream, then the unembedding."""
    model = _model(layers=3).eval()
    tokens = _tokens(8, 2, 9, 11)
    two_layers = copy.deepcopy(model)
    two_layers.unembed = torch.nn.Identity()  # the reference then returns the stream x_2
    blocked = torch.ones(9, 9, dtype=torch.bool).triu(1)  # PyTorch: True = may NOT attend
    with torch.no_grad():
        x2 = _reference_path_ablation(two_layers, tokens, [1], "qk")
        third = att.to_torch_multihead(model.layers[2]).eval()
        x3 = x2 + third(x2, x2, x2, attn_mask=blocked, need_weights=False)[0]
        ours = path_ablated_logits(model, tokens, [1], "qk")
        intact = model(tokens)
    assert torch.allclose(ours, model.unembed(x3), **TOL[torch.float64])
    assert (ours - intact).abs().max() > 1e-3


def _fixed_batches(tokens):
    return lambda step: tokens


def test_train_language_model_defaults_are_lr_1e_3_and_no_evaluation():
    tokens = _tokens(9, 4, 6, 11)
    implicit, explicit = _model(dtype=torch.float32), _model(dtype=torch.float32)
    a = train_language_model(implicit, _fixed_batches(tokens), 3)
    b = train_language_model(explicit, _fixed_batches(tokens), 3, lr=1e-3, eval_tokens=None,
                             eval_every=0, on_eval=None)
    assert torch.equal(a["losses"], b["losses"]) and a["evals"] == b["evals"] == []
    for p, q in zip(implicit.parameters(), explicit.parameters(), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize("lr", [1e-3, 0.05])
def test_one_training_step_is_a_hand_written_adam_step(lr):
    """Adam's first step moves each weight by ``lr * g / (|g| + eps)`` (bias-corrected moments
    ``m = g``, ``v = g^2``), for ``g`` the gradient of the mean next-token loss."""
    tokens = _tokens(10, 3, 7, 11)
    model = _model()
    before = copy.deepcopy(model)
    loss = next_token_losses(before(tokens), tokens).mean()
    grads = torch.autograd.grad(loss, list(before.parameters()))
    out = train_language_model(model, _fixed_batches(tokens), 1, lr=lr)
    assert out["losses"].shape == (1,) and float(out["losses"][0]) == pytest.approx(loss.item())
    for p, p0, g in zip(model.parameters(), before.parameters(), grads, strict=True):
        expected = p0 - lr * g / (g.abs() + 1e-8)
        assert torch.allclose(p, expected, atol=1e-9, rtol=0), (p - expected).abs().max()


def test_train_language_model_names_its_bad_arguments():
    model = _model()
    batches = _fixed_batches(_tokens(11, 2, 5, 11))
    eval_tokens = _tokens(12, 2, 5, 11)

    def on_eval(step, logits, weights):
        return {}

    with pytest.raises(ValueError, match=r"^steps must be positive, got 0$"):
        train_language_model(model, batches, 0)
    with pytest.raises(TypeError, match=r"^steps must be an int, got float$"):
        train_language_model(model, batches, 2.0)
    for bad in (True, 1.5, -1):
        with pytest.raises(ValueError, match=r"^eval_every must be an int >= 0 \(0: no "
                                             rf"evaluation\), got {bad!r}$"):
            train_language_model(model, batches, 2, eval_tokens=eval_tokens, eval_every=bad,
                                 on_eval=on_eval)
    for kwargs in ({"eval_tokens": eval_tokens}, {"on_eval": on_eval}, {}):
        with pytest.raises(ValueError, match=r"^eval_every needs eval_tokens and on_eval$"):
            train_language_model(model, batches, 2, eval_every=1, **kwargs)


@torch.no_grad()
def _with_random_biases(model: AttentionOnlyTransformer, seed: int) -> AttentionOnlyTransformer:
    """The projections' biases start at zero; give them values, so that a bias added with the
    wrong sign, or twice, or not at all, shows."""
    g = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@pytest.mark.parametrize("layers", [2, 3])
def test_path_ablation_and_forward_carry_every_bias(layers):
    model = _with_random_biases(_model(layers=layers), 13).eval()
    tokens = _tokens(14, 2, 9, 11)
    blocked = torch.ones(9, 9, dtype=torch.bool).triu(1)  # PyTorch: True = may NOT attend
    no_unembed = copy.deepcopy(model)
    no_unembed.unembed = torch.nn.Identity()  # the reference then returns the stream x_2
    with torch.no_grad():
        assert torch.allclose(model(tokens), _reference_forward(model, tokens),
                              **TOL[torch.float64])
        x = _reference_path_ablation(no_unembed, tokens, [0, 2], "kv")
        for layer in model.layers[2:]:
            ref = att.to_torch_multihead(layer).eval()
            x = x + ref(x, x, x, attn_mask=blocked, need_weights=False)[0]
        ours = path_ablated_logits(model, tokens, [0, 2], "kv")
    assert torch.allclose(ours, model.unembed(x), **TOL[torch.float64])


def test_training_asks_batches_for_each_step_in_order_and_evaluates_after_the_last():
    seen, evaluated = [], []
    tokens = _tokens(15, 2, 6, 11)

    def batches(step):
        seen.append(step)
        return tokens

    model = _model()

    def on_eval(step, logits, weights):
        # called in eval mode with the current model's logits and weights, computed without
        # autograd
        assert not model.training and not logits.requires_grad
        with torch.no_grad():
            expected_logits, expected_weights = model(tokens, return_weights=True)
        assert torch.equal(logits, expected_logits)
        assert len(weights) == 2 and all(torch.equal(w, e) for w, e in
                                         zip(weights, expected_weights, strict=True))
        evaluated.append(step)
        return {"step": step}

    out = train_language_model(model, batches, 5, eval_tokens=tokens, eval_every=2,
                               on_eval=on_eval)
    assert seen == [0, 1, 2, 3, 4]
    assert evaluated == [0, 2, 4, 5] and out["evals"] == [(s, {"step": s}) for s in evaluated]
