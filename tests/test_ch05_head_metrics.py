"""Tests of ``attention_src.head_metrics``: per-head entropy and offset profile, head
ablation, and the chapter-5 probe model.

References: ``torch.distributions.Categorical.entropy`` for the entropy, explicit loops over
queries for the offset profile, a hand-written per-head forward pass (with the silenced
heads' outputs set to zero before ``W^O``) for the ablation.
"""

from __future__ import annotations

import math
import re

import numpy as np
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
from attention_src.positional import sinusoidal_positional_encoding
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


def test_ablation_accepts_any_integer_type_for_the_heads():
    """NumPy integers and integer 0-d tensors (operator.index) silence the same heads as ints."""
    m = _per_head()
    x = randn(3, 2, 4, 6)
    with torch.no_grad():
        with ablate_heads(m, [np.int64(0), np.int32(2)]):
            got = m(x, x, x)[0]
        torch.testing.assert_close(got, _by_hand(m, x, [0, 2]), **F64)
        with ablate_heads(m, (torch.tensor(1),)):
            got = m(x, x, x)[0]
        torch.testing.assert_close(got, _by_hand(m, x, [1]), **F64)
    with pytest.raises(ValueError, match=r"^head indices must be ints in \[0, 3\), got "
                                         r"np\.int64\(3\)$"), ablate_heads(m, [np.int64(3)]):
        pass


def test_ablation_takes_the_heads_from_any_iterable_once():
    """A generator is read once: validated and then used, the same heads as a list."""
    m = _per_head()
    x = randn(4, 2, 4, 6)
    with torch.no_grad(), ablate_heads(m, (i for i in (0, 2))):
        got = m(x, x, x)[0]
    torch.testing.assert_close(got, _by_hand(m, x, [0, 2]), **F64)


@pytest.mark.parametrize(("head", "shown"), [
    (1.0, "1.0 of type float"), ("1", "'1' of type str"),
    (np.float64(1.0), r"np\.float64\(1\.0\) of type float64")])
def test_ablation_names_a_head_index_that_is_not_an_integer(head, shown):
    with pytest.raises(TypeError, match=rf"^head indices must be integers, got {shown}$"), \
            ablate_heads(_per_head(), [head]):
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


# --- boundaries, defaults and messages ----------------------------------------------------------


@pytest.mark.parametrize("fn", [attention_entropy, offset_profile, preferred_offset])
def test_weights_errors_name_the_argument_and_the_problem(fn):
    with pytest.raises(TypeError, match=r"^weights must be a torch\.Tensor, got list$"):
        fn([[1.0]])
    with pytest.raises(TypeError, match=r"^weights must be a floating-point tensor, got dtype "
                                        r"torch\.int64"):
        fn(torch.tensor([[1, 0]]))
    with pytest.raises(ValueError, match=r"^weights must have at least 2 dimensions, got shape "
                                         r"\(2,\)$"):
        fn(torch.tensor([0.5, 0.5]))
    for bad in ([[1.5, -0.5]], [[float("nan"), 1.0]], [[float("inf"), 0.0]]):
        with pytest.raises(ValueError, match=r"^weights must be finite and non-negative "
                                             r"\(attention weights\)$"):
            fn(torch.tensor(bad))


def test_entropy_of_a_certain_or_masked_row_is_plus_zero():
    """0 nats, and +0.0, not -0.0 (which prints as '-0.0' in a table)."""
    w = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    for dtype in (torch.float64, torch.float32):
        h = attention_entropy(w.to(dtype))
        assert h.tolist() == [0.0, 0.0, 0.0]
        assert not bool(torch.signbit(h).any()), h
        assert f"{float(h[0]):.3f}" == "0.000"


def test_zero_weights_are_allowed_and_a_single_key_is_enough():
    """0 is a valid weight (a masked key) and a (1, 1) matrix is the smallest input."""
    one = torch.ones(1, 1, dtype=torch.float64)
    assert attention_entropy(one).tolist() == [0.0]
    offsets, profile = offset_profile(one)
    assert offsets.tolist() == [0] and profile.tolist() == [1.0]
    assert attention_entropy(torch.tensor([[0.0, 1.0]])).tolist() == [0.0]


def test_entropy_rejects_rows_that_do_not_sum_to_one_with_an_anchored_message():
    for bad in ([[0.5, 0.6]], [[0.3, 0.3]], [[1.0, 1.0]], [[0.99, 0.0]]):
        with pytest.raises(ValueError, match=r"^each row of weights must sum to 1 \(or be all "
                                             r"zeros\)$"):
            attention_entropy(torch.tensor(bad, dtype=torch.float64))
    # within the 1e-3 tolerance on either side: accepted
    for fine in ([[0.5, 0.5009]], [[0.5, 0.4991]]):
        assert attention_entropy(torch.tensor(fine, dtype=torch.float64)).shape == (1,)


def test_entropy_of_a_head_batch_is_per_query():
    """(h, L_q, L_k) weights give one entropy per head and query, by hand."""
    w = torch.tensor([[[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]],
                      [[0.25, 0.25, 0.5], [0.0, 0.0, 0.0]]], dtype=torch.float64)
    expected = torch.tensor([[math.log(2), 0.0], [1.5 * math.log(2), 0.0]], dtype=torch.float64)
    torch.testing.assert_close(attention_entropy(w), expected, **F64)


def test_offset_profile_by_hand_for_a_rectangular_matrix():
    """L_q = 2, L_k = 3: offsets -1, 0, 1, 2; the profile averages each diagonal."""
    w = torch.tensor([[0.2, 0.3, 0.5], [0.6, 0.1, 0.3]], dtype=torch.float64)
    offsets, profile = offset_profile(w)
    assert offsets.tolist() == [-1, 0, 1, 2]
    torch.testing.assert_close(profile, torch.tensor([0.6, 0.15, 0.3, 0.5],
                                                     dtype=torch.float64), **F64)


def test_offset_profile_and_preferred_offset_keep_every_leading_axis():
    """(B, h, L, L) weights: one profile and one preferred offset per batch entry and head."""
    shifts = [[-1, 2, 0], [3, -2, 1]]
    w = torch.stack([torch.stack([_shift_weights(6, o) for o in row]) for row in shifts])
    offsets, profile = offset_profile(w)  # (2, 3, 11)
    assert profile.shape == (2, 3, 11)
    for b in range(2):
        for h in range(3):
            torch.testing.assert_close(profile[b, h], offset_profile(w[b, h])[1], **F64)
    assert preferred_offset(w).tolist() == shifts
    single = preferred_offset(_shift_weights(6, -2))  # one (L, L) matrix: a 0-d offset
    assert single.shape == () and int(single) == -2


def test_offset_losses_names_logits_and_the_shapes_at_fault():
    logits = randn(0, 3, 2, 6, 5)
    _, targets = offset_copy_task(3, 6, 5, (-2, 1), seed=1)
    with pytest.raises(TypeError, match=r"^logits must be a torch\.Tensor, got list$"):
        offset_losses([[[[0.0]]]], targets)
    with pytest.raises(ValueError, match=r"^logits must have at least 4 dimensions, got shape "
                                         r"\(3, 6, 5\)$"):
        offset_losses(randn(0, 3, 6, 5), targets)
    with pytest.raises(ValueError, match=r"^logits must be \(B, n_out, L, V\) and targets "
                                         r"\(B, n_out, L\), got \(3, 2, 6, 5\) and "
                                         r"\(3, 1, 6\)$"):
        offset_losses(logits, targets[:, :1])
    with pytest.raises(ValueError, match=r"^logits must be \(B, n_out, L, V\) and targets "
                                         r"\(B, n_out, L\), got \(1, 3, 2, 6, 5\) and "
                                         r"\(3, 2, 6\)$"):
        offset_losses(logits[None], targets)
    with pytest.raises(ValueError, match=r"got \(3, 2, 6, 5\) and \(\)$"):
        offset_losses(logits, [[0]])


class _Shaped:
    """Bad input with the right ``shape`` but no ``dtype`` (not a tensor at all)."""

    shape = torch.Size([3, 2, 6])


def test_offset_losses_names_the_type_and_dtype_of_bad_targets():
    logits = randn(0, 3, 2, 6, 5)
    with pytest.raises(TypeError, match=r"^targets must be an int64 tensor, got Tensor "
                                        r"torch\.float32$"):
        offset_losses(logits, torch.zeros(3, 2, 6))
    with pytest.raises(TypeError, match=r"^targets must be an int64 tensor, got Tensor "
                                        r"torch\.int32$"):
        offset_losses(logits, torch.zeros(3, 2, 6, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"^targets must be an int64 tensor, got _Shaped $"):
        offset_losses(logits, _Shaped())


def test_offset_losses_target_range_boundaries():
    """0 and V - 1 are valid targets, -1 and V are not; IGNORE_INDEX is skipped."""
    logits = randn(0, 1, 1, 3, 4)
    ok = torch.tensor([[[0, 3, IGNORE_INDEX]]])
    expected = F.cross_entropy(logits[0, 0, :2], torch.tensor([0, 3]))
    torch.testing.assert_close(offset_losses(logits, ok), expected[None], **F64)
    for bad in (-1, 4):
        with pytest.raises(ValueError, match=r"^targets must lie in \[0, 4\) or be IGNORE_INDEX "
                                             r"\(-100\)$"):
            offset_losses(logits, torch.tensor([[[0, bad, 1]]]))


def test_offset_losses_one_loss_per_output_with_several_outputs():
    """n_out = 3 and L = 2 differ, so a loss per position instead of per output would show."""
    logits = randn(4, 2, 3, 2, 5)
    targets = torch.tensor([[[1, 2], [IGNORE_INDEX, 0], [4, 4]],
                            [[0, IGNORE_INDEX], [3, 3], [2, 1]]])
    got = offset_losses(logits, targets)
    assert got.shape == (3,)
    for k in range(3):
        ok = targets[:, k] != IGNORE_INDEX
        torch.testing.assert_close(got[k], F.cross_entropy(logits[:, k][ok], targets[:, k][ok]),
                                   **F64)


@pytest.mark.parametrize("name,kwargs", [
    ("vocab_size", {"vocab_size": 0}), ("length", {"length": 0}),
    ("embed_dim", {"embed_dim": 0}), ("num_heads", {"num_heads": 0}),
    ("num_outputs", {"num_outputs": 0}),
])
def test_reader_names_the_bad_size(name, kwargs):
    args = {"vocab_size": 5, "length": 6, "embed_dim": 8, "num_heads": 2} | kwargs
    with pytest.raises(ValueError, match=rf"^{name} must be positive, got 0$"):
        OffsetReader(**args)
    args[name] = 2.0
    with pytest.raises(TypeError, match=rf"^{name} must be an int, got float$"):
        OffsetReader(**args)


@pytest.mark.parametrize("scale", [float("nan"), float("-inf"), "2", True, None])
def test_reader_bad_position_scale_message_is_anchored(scale):
    with pytest.raises(ValueError, match=rf"^position_scale must be a finite number, got "
                                         rf"{re.escape(repr(scale))}$"):
        OffsetReader(5, 8, 8, 2, position_scale=scale)


@pytest.mark.parametrize("scale", [0, 0.0, -1.5, 3])
def test_reader_accepts_any_finite_position_scale(scale):
    m = OffsetReader(5, 4, 6, 2, position_scale=scale)
    torch.testing.assert_close(m.pos, scale * sinusoidal_positional_encoding(4, 6), atol=0,
                               rtol=0)


def test_reader_defaults_are_two_outputs_and_position_scale_two():
    torch.manual_seed(1)
    m = OffsetReader(5, 4, 6, 2)
    torch.manual_seed(1)
    explicit = OffsetReader(5, 4, 6, 2, num_outputs=2, position_scale=2.0)
    assert m.num_outputs == 2
    torch.testing.assert_close(m.pos, 2.0 * sinusoidal_positional_encoding(4, 6), atol=0,
                               rtol=0)
    tokens = torch.randint(0, 5, (3, 4))
    torch.testing.assert_close(m(tokens)[0], explicit(tokens)[0], atol=0, rtol=0)


def _reader_by_hand(m: OffsetReader, tokens: torch.Tensor):
    """The forward pass written out: embedding + scaled table, multi-head self-attention
    computed head by head, read-out split into (n_out, V) per position."""
    B, L = tokens.shape
    E, h = m.tok.weight.shape[1], m.mha.num_heads
    d = E // h
    table = sinusoidal_positional_encoding(L, E).double()  # the float32 table the model holds
    x = m.tok.weight[tokens] + 0.5 * table  # (B, L, E), position_scale 0.5
    heads, weights = [], []
    for i in range(h):
        sl = slice(i * d, (i + 1) * d)
        q = x @ m.mha.q_proj.weight[sl].T + m.mha.q_proj.bias[sl]
        k = x @ m.mha.k_proj.weight[sl].T + m.mha.k_proj.bias[sl]
        v = x @ m.mha.v_proj.weight[sl].T + m.mha.v_proj.bias[sl]
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1)  # (B, L, L)
        heads.append(a @ v)
        weights.append(a)
    out = torch.cat(heads, -1) @ m.mha.out_proj.weight.T + m.mha.out_proj.bias
    flat = out @ m.read.weight.T + m.read.bias  # (B, L, n_out * V)
    logits = torch.stack([flat[..., k * m.vocab_size:(k + 1) * m.vocab_size]
                          for k in range(m.num_outputs)], dim=1)  # (B, n_out, L, V)
    return logits, torch.stack(weights, dim=1)


@pytest.mark.parametrize("L", [3, 6])
def test_reader_forward_equals_a_hand_written_forward(L):
    torch.manual_seed(2)
    m = OffsetReader(7, 6, 8, 2, num_outputs=3, position_scale=0.5).double().eval()
    tokens = torch.randint(0, 7, (2, L))
    logits, weights = m(tokens)
    ref_logits, ref_weights = _reader_by_hand(m, tokens)
    assert logits.shape == (2, 3, L, 7) and weights.shape == (2, 2, L, L)
    torch.testing.assert_close(weights, ref_weights, **F64)
    torch.testing.assert_close(logits, ref_logits, **F64)


def test_reader_token_checks_at_their_boundaries():
    m = OffsetReader(5, 4, 8, 2)
    ok = torch.tensor([[0, 4, 2, 1]])  # ids 0 and V - 1, length L = length
    assert m(ok)[0].shape == (1, 2, 4, 5)
    for bad in ([[0, 5, 1, 1]], [[-1, 0, 1, 1]]):
        with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 5\)$"):
            m(torch.tensor(bad))
    with pytest.raises(ValueError, match=r"^sequences of length 5 are longer than length=4$"):
        m(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^tokens must be \(B, L\), got shape \(2, 1, 3\)$"):
        m(torch.zeros(2, 1, 3, dtype=torch.long))
    with pytest.raises(TypeError, match=r"^tokens must be an int64 tensor, got Tensor "
                                        r"torch\.int32$"):
        m(torch.zeros(1, 3, dtype=torch.int32))
    with pytest.raises(TypeError, match=r"^tokens must be an int64 tensor, got list $"):
        m([[0, 1]])


def test_train_offset_reader_equals_a_hand_written_loop():
    """Three steps rebuilt from the docstring: batches from a generator seeded with ``seed``,
    Adam, the summed cross-entropy of each output over the positions with a target, the loss
    recorded before the update."""
    torch.manual_seed(4)
    model = OffsetReader(6, 5, 8, 2)
    ref = OffsetReader(6, 5, 8, 2)
    ref.load_state_dict(model.state_dict())
    # offsets (1, -2), not the task's default (-1, 2), so that they must be passed on
    losses = train_offset_reader(model, (1, -2), steps=3, batch_size=4, lr=0.02, seed=7)
    gen = torch.Generator().manual_seed(7)
    opt = torch.optim.Adam(ref.parameters(), lr=0.02)
    ref_losses = []
    for _ in range(3):
        tokens, targets = offset_copy_task(4, 5, 6, (1, -2), seed=gen)
        logits, _ = ref(tokens)
        loss = sum(F.cross_entropy(logits[:, k][targets[:, k] != IGNORE_INDEX],
                                   targets[:, k][targets[:, k] != IGNORE_INDEX])
                   for k in range(2))
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_losses.append(loss.item())
    assert losses == pytest.approx(ref_losses, rel=1e-6, abs=0)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-6, atol=1e-7)
    assert not model.training


def test_train_offset_reader_defaults():
    """batch_size 64, lr 0.01 and seed 0 by default, compared with the values written out."""
    runs = []
    for kwargs in ({}, {"batch_size": 64, "lr": 0.01, "seed": 0}):
        torch.manual_seed(0)
        m = OffsetReader(5, 4, 4, 1)
        runs.append(train_offset_reader(m, (-1, 1), steps=2, **kwargs))
    assert runs[0] == runs[1]


def test_train_offset_reader_names_the_bad_argument():
    m = OffsetReader(5, 4, 4, 1)
    with pytest.raises(ValueError, match=r"^steps must be positive, got 0$"):
        train_offset_reader(m, (-1, 1), steps=0)
    with pytest.raises(ValueError, match=r"^batch_size must be positive, got 0$"):
        train_offset_reader(m, (-1, 1), steps=1, batch_size=0)
    with pytest.raises(TypeError, match=r"^steps must be an int, got float$"):
        train_offset_reader(m, (-1, 1), steps=1.0)
    with pytest.raises(ValueError, match=r"^model has 2 outputs but 3 offsets were given$"):
        train_offset_reader(m, (-1, 1, 2), steps=1)
