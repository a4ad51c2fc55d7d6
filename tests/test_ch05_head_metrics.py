"""Tests of ``attention_src.head_metrics``: per-head entropy and offset profile, head
ablation, and the chapter-5 probe model.

References: ``torch.distributions.Categorical.entropy`` for the entropy, explicit loops over
queries for the offset profile, a hand-written per-head forward pass (with the silenced
heads' outputs set to zero before ``W^O``) for the ablation.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attention_src.attention import scaled_dot_product_attention
from attention_src.data import IGNORE_INDEX, offset_copy_task
from attention_src.head_metrics import (
    OffsetReader,
    ablate_heads,
    attention_entropy,
    offset_losses,
    offset_profile,
    preferred_offset,
    train_offset_reader,
)
from attention_src.multihead import MultiHeadAttention, PerHeadMultiHeadAttention, fuse_heads
from attention_src.utils import count_parameters
from tests.conftest import PROPERTY, TOL, randn, seeds

F64 = TOL[torch.float64]


def _random_weights(seed: int, *shape: int) -> torch.Tensor:
    return torch.softmax(randn(seed, *shape, scale=2.0), dim=-1)


def _shift_weights(L: int, offset: int) -> torch.Tensor:
    """(L, L) weights: query i puts all its weight on key i + offset (clipped to the ends)."""
    w = torch.zeros(L, L, dtype=torch.float64)
    for i in range(L):
        w[i, min(max(i + offset, 0), L - 1)] = 1.0
    return w


# --- attention_entropy -----------------------------------------------------------------------


def test_entropy_of_uniform_and_one_hot_rows():
    w = torch.stack([torch.full((5,), 0.2, dtype=torch.float64),
                     torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64),
                     torch.zeros(5, dtype=torch.float64)])  # uniform, one-hot, fully masked
    torch.testing.assert_close(attention_entropy(w),
                               torch.tensor([math.log(5), 0.0, 0.0], dtype=torch.float64))


@PROPERTY
@given(seed=seeds, b=st.integers(1, 3), L_q=st.integers(1, 5), L_k=st.integers(1, 6))
def test_entropy_matches_categorical_and_is_bounded(seed, b, L_q, L_k):
    w = _random_weights(seed, b, L_q, L_k)
    h = attention_entropy(w)
    assert h.shape == (b, L_q)
    torch.testing.assert_close(h, torch.distributions.Categorical(probs=w).entropy(), **F64)
    assert bool((h >= -1e-12).all()) and bool((h <= math.log(L_k) + 1e-12).all())


@pytest.mark.parametrize(
    ("weights", "error", "match"),
    [
        (torch.tensor([[0.5, 0.6]]), ValueError, "sum to 1"),
        (torch.tensor([[1.5, -0.5]]), ValueError, "non-negative"),
        (torch.tensor([[float("nan"), 1.0]]), ValueError, "finite"),
        (torch.tensor([[1, 0]]), TypeError, "floating"),
        (torch.tensor([1.0]), ValueError, "weights"),
        ([[1.0]], TypeError, "weights"),
    ],
)
def test_entropy_bad_input(weights, error, match):
    with pytest.raises(error, match=match):
        attention_entropy(weights)


# --- offset_profile / preferred_offset -------------------------------------------------------


def _profile_by_loops(w: torch.Tensor) -> torch.Tensor:
    L_q, L_k = w.shape[-2:]
    cols = []
    for o in range(-(L_q - 1), L_k):
        vals = [w[..., i, i + o] for i in range(L_q) if 0 <= i + o < L_k]
        cols.append(torch.stack(vals, -1).mean(-1))
    return torch.stack(cols, -1)


@PROPERTY
@given(seed=seeds, b=st.integers(1, 3), L_q=st.integers(1, 6), L_k=st.integers(1, 6))
def test_offset_profile_matches_loops(seed, b, L_q, L_k):
    w = _random_weights(seed, b, L_q, L_k)
    offsets, profile = offset_profile(w)
    assert offsets.tolist() == list(range(-(L_q - 1), L_k))
    assert profile.shape == (b, L_q + L_k - 1)
    torch.testing.assert_close(profile, _profile_by_loops(w), **F64)
    # linear in the weights: the profile of the batch mean is the mean of the profiles
    torch.testing.assert_close(offset_profile(w.mean(0))[1], profile.mean(0), **F64)


@pytest.mark.parametrize("offset", [-3, -1, 1, 2, 4])
def test_preferred_offset_recovers_a_shift(offset):
    L = 8
    w = torch.stack([_shift_weights(L, offset), _shift_weights(L, -offset)])  # (2, L, L)
    assert preferred_offset(w).tolist() == [offset, -offset]
    offsets, profile = offset_profile(w[0])
    assert float(profile[offsets.tolist().index(offset)]) == 1.0


def test_offset_profile_bad_input():
    with pytest.raises(ValueError, match="non-negative"):
        offset_profile(-torch.ones(3, 3))


# --- ablate_heads ------------------------------------------------------------------------------


def _per_head(seed: int = 0, E: int = 6, h: int = 3) -> PerHeadMultiHeadAttention:
    torch.manual_seed(seed)
    m = PerHeadMultiHeadAttention(E, h).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            if p.dim() == 1:
                p.normal_()  # non-zero biases, so that a wrong slice would show
    return m


def _by_hand(m: PerHeadMultiHeadAttention, x: torch.Tensor, silenced) -> torch.Tensor:
    outs = []
    for i, head in enumerate(m.heads):
        out, _ = scaled_dot_product_attention(head.q_proj(x), head.k_proj(x), head.v_proj(x))
        outs.append(torch.zeros_like(out) if i in silenced else out)  # (B, L, d_head)
    return m.out_proj(torch.cat(outs, -1))


@pytest.mark.parametrize("silenced", [[], [0], [1], [2], [0, 2], [0, 1, 2]])
def test_ablation_equals_zeroing_the_heads_before_w_o(silenced):
    m = _per_head()
    x = randn(1, 2, 4, 6)
    with torch.no_grad():
        with ablate_heads(m, silenced):
            got = m(x, x, x)[0]
        torch.testing.assert_close(got, _by_hand(m, x, silenced), **F64)
        # The fused module (one projection, then reshape) with the same weights: silencing
        # the same heads must give the per-head module's ablated output.
        fused = fuse_heads(m)
        with ablate_heads(fused, silenced):
            got_fused = fused(x, x, x)[0]
        torch.testing.assert_close(got_fused, _by_hand(m, x, silenced), **F64)
        if silenced == [0, 1, 2]:  # nothing left but W^O's bias
            ref = m.out_proj(torch.zeros(2, 4, 6, dtype=torch.float64))
            torch.testing.assert_close(got_fused, ref, **F64)


def test_ablation_is_undone_after_the_block_even_on_error():
    m = _per_head()
    x = randn(2, 1, 3, 6)
    with torch.no_grad():
        before = m(x, x, x)[0]
        with pytest.raises(RuntimeError, match="boom"), ablate_heads(m, [1]):
            raise RuntimeError("boom")
        torch.testing.assert_close(m(x, x, x)[0], before, **F64)
    assert not m.out_proj._forward_pre_hooks


@pytest.mark.parametrize(
    ("module", "heads", "error", "match"),
    [
        (torch.nn.Linear(2, 2), [0], TypeError, "num_heads"),
        (MultiHeadAttention(6, 3), [3], ValueError, r"\[0, 3\)"),
        (MultiHeadAttention(6, 3), [-1], ValueError, r"\[0, 3\)"),
        (MultiHeadAttention(6, 3), [True], ValueError, "ints"),
    ],
)
def test_ablation_bad_input(module, heads, error, match):
    with pytest.raises(error, match=match), ablate_heads(module, heads):
        pass


# --- OffsetReader, offset_losses, train_offset_reader -------------------------------------------


@pytest.mark.parametrize("h", [1, 2, 4, 8])
def test_reader_shapes_and_parameter_count_independent_of_heads(h):
    torch.manual_seed(0)
    m = OffsetReader(vocab_size=7, length=6, embed_dim=8, num_heads=h, num_outputs=3)
    tokens = torch.randint(0, 7, (2, 5))
    logits, weights = m(tokens)
    assert logits.shape == (2, 3, 5, 7) and weights.shape == (2, h, 5, 5)
    # 7*8 embedding + 4*(8*8 + 8) attention + (8*21 + 21) read-out; positions are a buffer
    assert count_parameters(m) == 7 * 8 + 4 * (8 * 8 + 8) + 8 * 21 + 21


def test_reader_starts_from_the_same_weights_whatever_the_number_of_heads():
    states = []
    for h in (1, 2, 4):
        torch.manual_seed(3)
        states.append(OffsetReader(5, 4, 8, h).state_dict())
    for other in states[1:]:
        assert all(torch.equal(states[0][k], other[k]) for k in states[0])


@pytest.mark.parametrize(
    ("tokens", "error", "match"),
    [
        (torch.zeros(2, 4), TypeError, "int64"),
        (torch.zeros(4, dtype=torch.long), ValueError, r"\(B, L\)"),
        (torch.zeros(1, 9, dtype=torch.long), ValueError, "longer"),
        (torch.full((1, 3), 5), ValueError, r"\[0, 5\)"),
    ],
)
def test_reader_bad_input(tokens, error, match):
    m = OffsetReader(5, 8, 8, 2)
    with pytest.raises(error, match=match):
        m(tokens)


def test_offset_losses_match_cross_entropy_on_the_valid_positions():
    logits = randn(0, 3, 2, 6, 5)
    tokens, targets = offset_copy_task(3, 6, 5, (-2, 1), seed=1)
    got = offset_losses(logits, targets)
    for k in range(2):
        ok = targets[:, k] != IGNORE_INDEX  # (3, 6)
        ref = F.cross_entropy(logits[:, k][ok], targets[:, k][ok])
        torch.testing.assert_close(got[k], ref, **F64)
    with pytest.raises(ValueError, match="targets"):
        offset_losses(logits, targets[:, :1])


@pytest.mark.parametrize(
    ("targets", "error", "match"),
    [
        (torch.zeros(3, 2, 6), TypeError, "int64"),
        (torch.full((3, 2, 6), 5), ValueError, r"\[0, 5\)"),
        (torch.full((3, 2, 6), -1), ValueError, "IGNORE_INDEX"),
        ([[0]], ValueError, "targets"),
    ],
)
def test_offset_losses_bad_targets(targets, error, match):
    with pytest.raises(error, match=match):
        offset_losses(randn(0, 3, 2, 6, 5), targets)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), "2", True])
def test_reader_bad_position_scale(scale):
    with pytest.raises(ValueError, match="position_scale must be a finite number"):
        OffsetReader(5, 8, 8, 2, position_scale=scale)


def test_reader_positions_are_fixed_and_not_saved():
    m = OffsetReader(5, 8, 8, 2, position_scale=3.0)
    assert "pos" not in m.state_dict()  # a fixed table: rebuilt, not stored
    assert not any(p is m.pos for p in m.parameters())


def test_training_is_reproducible_and_learns():
    def run():
        torch.manual_seed(0)
        m = OffsetReader(8, 8, 16, 2)
        return m, train_offset_reader(m, (-1, 2), steps=80, batch_size=32, lr=0.01, seed=5)

    m, losses = run()
    assert losses == run()[1]
    assert losses[-1] < 0.5 * losses[0]
    assert not m.training
    with pytest.raises(ValueError, match="offsets"):
        train_offset_reader(m, (-1,), steps=1)
