"""The previous-token task and OrderSelfAttention (attention_src.order_task), chapter 4."""

from __future__ import annotations

import math

import pytest
import torch

from attention_src.order_task import (
    IGNORE,
    OrderSelfAttention,
    order_accuracy,
    previous_token_task,
    train_order_model,
)


def test_task_shapes_distinct_tokens_and_targets():
    gen = torch.Generator().manual_seed(0)
    tokens, targets = previous_token_task(50, 6, 9, gen)
    assert tokens.shape == targets.shape == (50, 6) and tokens.dtype == torch.int64
    assert all(len(set(row.tolist())) == 6 for row in tokens)
    assert int(tokens.min()) >= 0 and int(tokens.max()) < 9
    assert bool((targets[:, 0] == IGNORE).all())
    assert torch.equal(targets[:, 1:], tokens[:, :-1])
    again, _ = previous_token_task(50, 6, 9, torch.Generator().manual_seed(0))
    assert torch.equal(tokens, again)


def test_task_bad_input():
    with pytest.raises(ValueError, match="at most vocab_size"):
        previous_token_task(3, 10, 5)
    with pytest.raises(ValueError, match="n"):
        previous_token_task(0, 2, 5)


@pytest.mark.parametrize("positions", ["none", "sinusoidal", "rotary"])
def test_model_shapes(positions):
    model = OrderSelfAttention(12, 8, positions, max_len=10)
    logits, weights = model(torch.randint(0, 12, (3, 7)))
    assert logits.shape == (3, 7, 12) and weights.shape == (3, 7, 7)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 7))


def test_without_positions_the_model_is_permutation_equivariant():
    torch.manual_seed(0)
    model = OrderSelfAttention(12, 8, "none").double()
    tokens = torch.randint(0, 12, (2, 7))
    perm = torch.randperm(7)
    logits, _ = model(tokens)
    logits_perm, _ = model(tokens[:, perm])
    torch.testing.assert_close(logits_perm, logits[:, perm], atol=1e-10, rtol=0)


@pytest.mark.parametrize("positions", ["sinusoidal", "rotary"])
def test_with_positions_it_is_not(positions):
    torch.manual_seed(0)
    model = OrderSelfAttention(12, 8, positions).double()
    tokens = torch.arange(7).unsqueeze(0)
    perm = torch.tensor([6, 5, 4, 3, 2, 1, 0])
    logits, _ = model(tokens)
    logits_perm, _ = model(tokens[:, perm])
    assert not torch.allclose(logits_perm, logits[:, perm], atol=1e-6)


def test_model_bad_input():
    with pytest.raises(ValueError, match="positions must be one of"):
        OrderSelfAttention(5, 4, "learned")
    with pytest.raises(ValueError, match="even d_model"):
        OrderSelfAttention(5, 5, "rotary")
    model = OrderSelfAttention(5, 4, max_len=3)
    with pytest.raises(ValueError, match="exceeds max_len"):
        model(torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(B, L\)"):
        model(torch.zeros(4, dtype=torch.long))


def test_training_separates_models_with_and_without_positions():
    """A short run: with rotary positions the task is learned; without, the loss stays above
    log(L - 1), the entropy of the previous token given the token and the set."""
    gen = torch.Generator().manual_seed(99)
    tokens, targets = previous_token_task(1000, 6, 10, gen)
    plain, losses_plain = train_order_model("none", 0, steps=60, length=6, vocab_size=10)
    rotary, losses_rotary = train_order_model("rotary", 0, steps=60, length=6, vocab_size=10)
    assert len(losses_plain) == 60 and not plain.training
    assert min(losses_plain[-10:]) > math.log(5) - 0.1
    assert order_accuracy(plain, tokens, targets) < 1 / 5 + 0.05
    assert order_accuracy(rotary, tokens, targets) > 0.9
    assert losses_rotary[-1] < 0.1
