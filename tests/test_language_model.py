"""Tests of ``attention_src.language_model``: the attention-only Transformer and the head scores.

The model is checked against an independent forward pass built from PyTorch's own
``nn.MultiheadAttention`` (weights copied with ``to_torch_multihead``) and a causal mask; the
ablation gates against zeroing the head's columns of the output projection; the two head
scores against plain-Python loops over their definitions.
"""

from __future__ import annotations

import copy

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
        (lambda m: train_language_model(m, lambda s: None, 5, eval_every=2), ValueError,
         "eval_every needs"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call(_model())
