"""Scoring functions and the generic Attention layer (attention_src.scoring).

Each score is checked against a per-(query, key) loop of its formula, written with the module's
own weights in the papers' column form: ``w_v^T tanh(W_q^T q + W_k^T k)``, ``q . k``,
``q . k / sqrt(d)``, ``q^T W k``; the additive score also against the book's row form for all
pairs at once, ``tanh(q W_q + k W_k) w_v``.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import attention_src as att
from attention_src.attention import scaled_dot_product_attention
from attention_src.scoring import (
    AdditiveScore,
    Attention,
    BilinearScore,
    DotScore,
    ScaledDotScore,
    Score,
)
from attention_src.utils import count_parameters
from tests.conftest import (
    PROPERTY,
    TOL,
    batch_shapes,
    check_dropout_rate,
    features,
    lengths,
    randn,
    random_mask,
    seeds,
)

F64 = TOL[torch.float64]
BATCHES = [(), (2,), (2, 3)]


def _pairs(scores_shape):
    """Every index ``(..., i, j)`` of a scores tensor."""
    return list(torch.cartesian_prod(*[torch.arange(n) for n in scores_shape]).reshape(
        -1, len(scores_shape)).tolist())


def _loop_scores(fn, q, k):
    """scores[..., i, j] = fn(q[..., i, :], k[..., j, :]), one pair at a time."""
    out = torch.empty(*q.shape[:-1], k.shape[-2], dtype=q.dtype)
    for idx in _pairs(out.shape):
        *b, i, j = idx
        out[tuple(idx)] = fn(q[(*b, i)], k[(*b, j)])
    return out


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dims", [(3, 5, 4), (4, 4, 1), (1, 2, 7)], ids=str)
def test_additive_score_equals_hand_loop(batch, dims):
    d_q, d_k, d_hidden = dims
    torch.manual_seed(0)
    score = AdditiveScore(d_q, d_k, d_hidden).double()
    q, k = randn(1, *batch, 4, d_q), randn(2, *batch, 3, d_k)
    # (d_a, d_q), (d_a, d_k), (d_a,): nn.Linear stores the transposed matrices
    W_q, W_k, v = score.W_q.weight, score.W_k.weight, score.w_v.weight[0]

    def additive(qi, kj):
        return v @ torch.tanh(W_q @ qi + W_k @ kj)

    with torch.no_grad():
        torch.testing.assert_close(score(q, k), _loop_scores(additive, q, k), **F64)
    assert score(q, k).shape == (*batch, 4, 3)


def test_additive_score_row_form_reads_the_transposed_linear_weights():
    torch.manual_seed(0)
    d_q, d_k, d_a = 5, 3, 4
    score = AdditiveScore(d_q, d_k, d_a).double()
    q, k = randn(1, 2, 6, d_q), randn(2, 2, 7, d_k)
    # the book's matrices: nn.Linear's .weight is their transpose
    W_q, W_k, w_v = score.W_q.weight.T, score.W_k.weight.T, score.w_v.weight.T
    assert (W_q.shape, W_k.shape, w_v.shape) == ((d_q, d_a), (d_k, d_a), (d_a, 1))
    hidden = (q @ W_q)[..., :, None, :] + (k @ W_k)[..., None, :, :]  # (2, 6, 7, d_a)
    with torch.no_grad():
        torch.testing.assert_close(score(q, k), (torch.tanh(hidden) @ w_v)[..., 0], **F64)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
def test_dot_and_scaled_dot_scores(batch):
    q, k = randn(1, *batch, 4, 5), randn(2, *batch, 3, 5)
    dot = _loop_scores(lambda qi, kj: torch.dot(qi, kj), q, k)
    torch.testing.assert_close(DotScore()(q, k), dot, **F64)
    torch.testing.assert_close(DotScore()(q, k), q @ k.transpose(-2, -1), **F64)
    torch.testing.assert_close(ScaledDotScore()(q, k), dot / math.sqrt(5), **F64)


@pytest.mark.parametrize("batch", BATCHES, ids=str)
@pytest.mark.parametrize("dims", [(3, 5), (4, 4)], ids=str)
def test_bilinear_score_equals_hand_loop(batch, dims):
    d_q, d_k = dims
    torch.manual_seed(0)
    score = BilinearScore(d_q, d_k).double()
    q, k = randn(1, *batch, 4, d_q), randn(2, *batch, 3, d_k)
    W = score.W
    with torch.no_grad():
        torch.testing.assert_close(score(q, k), _loop_scores(lambda qi, kj: qi @ W @ kj, q, k),
                                   **F64)


def test_bilinear_with_identity_is_the_dot_score():
    score = BilinearScore(4, 4).double()
    with torch.no_grad():
        score.W.copy_(torch.eye(4))
    q, k = randn(0, 2, 3, 4), randn(1, 2, 5, 4)
    torch.testing.assert_close(score(q, k), DotScore()(q, k), **F64)


@pytest.mark.parametrize("d_q,d_k,d_hidden", [(3, 5, 7), (1, 1, 1), (8, 2, 16)])
def test_parameter_counts(d_q, d_k, d_hidden):
    assert count_parameters(AdditiveScore(d_q, d_k, d_hidden)) == (d_q + d_k + 1) * d_hidden
    assert count_parameters(BilinearScore(d_q, d_k)) == d_q * d_k
    assert count_parameters(DotScore()) == 0
    assert count_parameters(ScaledDotScore()) == 0
    assert count_parameters(Attention(AdditiveScore(d_q, d_k, d_hidden))) == (
        (d_q + d_k + 1) * d_hidden
    )


# --- Attention -----------------------------------------------------------------------------


@PROPERTY
@given(batch=batch_shapes, L_q=lengths, L_k=lengths, d_k=features, d_v=features, seed=seeds,
       use_mask=st.booleans())
def test_attention_with_scaled_dot_score_equals_sdpa(batch, L_q, L_k, d_k, d_v, seed, use_mask):
    q, k = randn(seed, *batch, L_q, d_k), randn(seed + 1, *batch, L_k, d_k)
    v = randn(seed + 2, *batch, L_k, d_v)
    mask = random_mask(seed + 3, *batch, L_q, L_k) if use_mask else None
    out, w = Attention(ScaledDotScore())(q, k, v, mask=mask)
    ref_out, ref_w = scaled_dot_product_attention(q, k, v, mask=mask)
    torch.testing.assert_close(out, ref_out, **F64)
    torch.testing.assert_close(w, ref_w, **F64)
    out1, _ = Attention(DotScore())(q, k, v, mask=mask)
    torch.testing.assert_close(out1, scaled_dot_product_attention(q, k, v, mask, scale=1.0)[0],
                               **F64)


def _attention_by_hand(scores, value, mask):
    """Reference in Python floats, one (batch, query) row at a time: over the allowed keys,
    ``w_j = exp(s_j - max s) / sum exp(s - max s)`` (0 for blocked keys, and for every key of a
    row with none allowed), then ``output = sum_j w_j v_j``."""
    B, L_q, L_k = scores.shape
    allowed = mask.expand(B, L_q, L_k).tolist()
    w = torch.zeros(B, L_q, L_k, dtype=torch.float64)
    out = torch.zeros(B, L_q, value.shape[-1], dtype=torch.float64)
    for b in range(B):
        for i in range(L_q):
            keys = [j for j in range(L_k) if allowed[b][i][j]]
            if not keys:
                continue
            top = max(float(scores[b, i, j]) for j in keys)
            e = {j: math.exp(float(scores[b, i, j]) - top) for j in keys}
            for j in keys:
                w[b, i, j] = e[j] / sum(e.values())
                out[b, i] += float(w[b, i, j]) * value[b, j]
    return out, w


@pytest.mark.parametrize("make", [lambda: AdditiveScore(3, 5, 4), lambda: BilinearScore(3, 5)],
                         ids=["additive", "bilinear"])
def test_attention_with_any_score_and_mask(make):
    torch.manual_seed(1)
    score = make().double()
    layer = Attention(score)
    q, k, v = randn(0, 2, 4, 3), randn(1, 2, 6, 5), randn(2, 2, 6, 2)
    mask = random_mask(3, 2, 1, 6, p=0.5)
    mask[1] = False  # batch 1 sees nothing
    out, w = layer(q, k, v, mask=mask)
    # the scores come from the score module (checked against hand loops above); the rest by hand
    ref_out, ref_w = _attention_by_hand(score(q, k).detach(), v, mask)
    torch.testing.assert_close(out, ref_out, **F64)
    torch.testing.assert_close(w, ref_w, **F64)
    assert (w[~mask.expand_as(w)] == 0).all()  # the mask passes through
    assert (w[1] == 0).all() and (out[1] == 0).all()
    torch.testing.assert_close(w[0].sum(-1), torch.ones(4, dtype=torch.float64))


def test_attention_dropout_only_in_training():
    q, k, v = randn(0, 2, 4, 3), randn(1, 2, 6, 3), randn(2, 2, 6, 2)
    plain_out, plain_w = Attention(ScaledDotScore())(q, k, v)
    layer = Attention(ScaledDotScore(), dropout=0.5)
    out, w = layer.eval()(q, k, v)
    torch.testing.assert_close(out, plain_out, atol=0, rtol=0)
    layer.train()
    torch.manual_seed(7)
    out_t, w_t = layer(q, k, v)
    torch.manual_seed(7)
    expected = F.dropout(plain_w, p=0.5, training=True) @ v
    torch.testing.assert_close(out_t, expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(w_t, plain_w, atol=0, rtol=0)  # weights returned before dropout
    assert not torch.allclose(out_t, plain_out)



@pytest.mark.parametrize("p", [0.2, 0.5])
def test_attention_dropout_zeroes_weights_at_rate_p_in_training_only(p):
    """One-hot values make the output the weights after dropout. Eval mode: exactly the
    weights. Training: over 200 draws the fraction of zeros is p within 5 binomial SE and the
    kept weights are w / (1 - p) (see check_dropout_rate; a rate off by 0.1 fails)."""
    torch.manual_seed(0)
    layer = Attention(AdditiveScore(3, 5, 4), dropout=p).double()
    q, k = randn(0, 4, 5, 3), randn(1, 4, 6, 5)
    one_hot = torch.eye(6, dtype=torch.float64).expand(4, 6, 6)   # value: (B, L_k, d_v = L_k)
    with torch.no_grad():
        out, w = layer.eval()(q, k, one_hot)
        torch.testing.assert_close(out, w, atol=0, rtol=0)
        layer.train()
        torch.manual_seed(3)
        dropped = torch.stack([layer(q, k, one_hot)[0] for _ in range(200)])  # (200, B, 5, 6)
    check_dropout_rate(dropped, w, p)


def test_gradients_reach_every_parameter():
    score = AdditiveScore(3, 5, 4).double()
    out, _ = Attention(score)(randn(0, 2, 4, 3), randn(1, 2, 6, 5), randn(2, 2, 6, 2))
    out.sum().backward()
    for name, p in score.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, name


# --- bad input -----------------------------------------------------------------------------


def test_scores_reject_wrong_feature_sizes():
    add = AdditiveScore(3, 5, 4)
    with pytest.raises(ValueError, match=r"AdditiveScore expects query features d_q=3, got "
                                         r"query \(2, 4\)"):
        add(torch.ones(2, 4), torch.ones(6, 5))
    with pytest.raises(ValueError, match=r"AdditiveScore expects key features d_k=5, got key "
                                         r"\(6, 3\)"):
        add(torch.ones(2, 3), torch.ones(6, 3))
    with pytest.raises(ValueError, match=r"BilinearScore expects key features d_k=5"):
        BilinearScore(3, 5)(torch.ones(2, 3), torch.ones(6, 4))
    for cls in (DotScore, ScaledDotScore):
        with pytest.raises(ValueError, match=rf"{cls.__name__} needs query and key of one "
                                             r"feature size, got query \(2, 3\) and key \(6, 4\)"):
            cls()(torch.ones(2, 3), torch.ones(6, 4))


def test_scores_reject_bad_tensors():
    dot = DotScore()
    with pytest.raises(ValueError, match=r"query \(2, 4, 3\) and key \(3, 6, 3\) must share"):
        dot(torch.ones(2, 4, 3), torch.ones(3, 6, 3))
    with pytest.raises(TypeError, match="query must be a floating-point tensor.*torch.int64"):
        dot(torch.ones(2, 3, dtype=torch.long), torch.ones(6, 3))
    with pytest.raises(TypeError, match="key must be a torch.Tensor, got ndarray"):
        dot(torch.ones(2, 3), torch.ones(6, 3).numpy())
    with pytest.raises(ValueError, match=r"key must have at least 2 dimensions, got shape \(3,\)"):
        dot(torch.ones(2, 3), torch.ones(3))
    with pytest.raises(TypeError, match="query: torch.float32, key: torch.float64"):
        dot(torch.ones(2, 3), torch.ones(6, 3, dtype=torch.float64))
    with pytest.raises(NotImplementedError, match=r"Score does not define score\(query, key\)"):
        Score()(torch.ones(2, 3), torch.ones(6, 3))


def test_scores_reject_bad_constructor_arguments():
    with pytest.raises(ValueError, match="d_hidden must be positive, got 0"):
        AdditiveScore(3, 5, 0)
    with pytest.raises(TypeError, match="d_q must be an int, got float"):
        AdditiveScore(3.0, 5, 4)
    with pytest.raises(ValueError, match="d_k must be positive, got -1"):
        BilinearScore(3, -1)


def test_attention_rejects_bad_input():
    with pytest.raises(TypeError, match="score must be a Score module, got function"):
        Attention(lambda q, k: q @ k.T)
    for bad in (1.5, 1.0, -0.1):  # the interval's ends: 1 is out, 0 is in
        with pytest.raises(ValueError, match=rf"dropout must be in \[0, 1\), got {bad}"):
            Attention(DotScore(), dropout=bad)
    assert Attention(DotScore(), dropout=0.0).dropout == 0.0
    assert Attention(DotScore(), dropout=0.999).dropout == 0.999
    layer = Attention(DotScore())
    q, k = torch.ones(2, 4, 3), torch.ones(2, 6, 3)
    with pytest.raises(ValueError, match=r"key \(2, 6, 3\) and value \(2, 5, 2\) must have the "
                                         r"same leading dimensions and length L_k"):
        layer(q, k, torch.ones(2, 5, 2))
    with pytest.raises(ValueError, match=r"key \(2, 6, 3\) and value \(3, 6, 2\)"):
        layer(q, k, torch.ones(3, 6, 2))
    with pytest.raises(TypeError, match="value must be a floating-point tensor.*torch.int32"):
        layer(q, k, torch.ones(2, 6, 2, dtype=torch.int32))
    with pytest.raises(TypeError, match="key: torch.float32, value: torch.float64"):
        layer(q, k, torch.ones(2, 6, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) .* \(2, 4, 6\)"):
        layer(q, k, torch.ones(2, 6, 2), mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask must have dtype torch.bool"):
        layer(q, k, torch.ones(2, 6, 2), mask=torch.ones(4, 6))


def test_top_level_exports():
    assert att.Attention is Attention and att.AdditiveScore is AdditiveScore


# --- UniformScore: the control of chapter 2's bake-off ---------------------------------------


def test_uniform_score_averages_the_allowed_values_whatever_the_query():
    from attention_src.scoring import UniformScore

    layer = Attention(UniformScore())
    assert count_parameters(layer) == 0
    value = randn(0, 2, 5, 3)
    mask = torch.tensor([[True, True, True, False, False],
                         [True, True, True, True, True]])[:, None, :]    # (B, 1, L_k)
    out, weights = layer(randn(1, 2, 4, 7), randn(2, 2, 5, 6), value, mask)
    # by hand: the mean of the first 3 values for sequence 0, of all 5 for sequence 1
    expected = torch.stack([value[0, :3].mean(0), value[1].mean(0)])     # (B, d_v)
    torch.testing.assert_close(out, expected[:, None, :].expand(2, 4, 3), **F64)
    torch.testing.assert_close(weights[0, :, :3], torch.full((4, 3), 1 / 3, dtype=torch.float64))
    assert bool((weights[0, :, 3:] == 0).all())
    other, _ = layer(randn(9, 2, 4, 7) * 100, randn(2, 2, 5, 6), value, mask)
    torch.testing.assert_close(other, out, atol=0, rtol=0)                # the query is ignored


def test_score_by_name_builds_each_score_with_the_widths_asked():
    from attention_src.scoring import SCORE_NAMES, UniformScore, score_by_name

    expected = {"additive": AdditiveScore, "dot": DotScore, "scaled dot": ScaledDotScore,
                "bilinear": BilinearScore, "uniform (control)": UniformScore}
    assert set(SCORE_NAMES) == set(expected)
    for name in SCORE_NAMES:
        score = score_by_name(name, 4, 4, 3)
        assert type(score) is expected[name]
        q, k = randn(0, 2, 4, dtype=torch.float32), randn(1, 5, 4, dtype=torch.float32)
        assert score(q, k).shape == (2, 5)
    additive = score_by_name("additive", 4, 6, 3)
    assert additive.W_q.weight.shape == (3, 4) and additive.W_k.weight.shape == (3, 6)
    assert score_by_name("bilinear", 4, 6, 3).W.shape == (4, 6)
    torch.manual_seed(7)
    a = score_by_name("additive", 4, 4, 3)
    torch.manual_seed(7)
    torch.testing.assert_close(a.W_q.weight, AdditiveScore(4, 4, 3).W_q.weight, atol=0, rtol=0)


def test_score_by_name_rejects_unknown_names_and_mismatched_dot_widths():
    from attention_src.scoring import score_by_name

    with pytest.raises(ValueError, match="unknown score 'cosine'; choose one of additive, dot"):
        score_by_name("cosine", 4, 4, 3)
    with pytest.raises(ValueError, match=r"the dot score needs d_q == d_k, got d_q=4, d_k=6"):
        score_by_name("dot", 4, 6, 3)
    with pytest.raises(ValueError,
                       match=r"the scaled dot score needs d_q == d_k, got d_q=5, d_k=2"):
        score_by_name("scaled dot", 5, 2, 3)


# --- bad input named per argument ----------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: AdditiveScore(0, 5, 4), ValueError, r"^d_q must be positive, got 0$"),
        (lambda: AdditiveScore(3, 0, 4), ValueError, r"^d_k must be positive, got 0$"),
        (lambda: AdditiveScore(3, 5, 0), ValueError, r"^d_hidden must be positive, got 0$"),
        (lambda: AdditiveScore(3, 5.0, 4), TypeError, r"^d_k must be an int, got float$"),
        (lambda: AdditiveScore(3, 5, "4"), TypeError, r"^d_hidden must be an int, got str$"),
        (lambda: BilinearScore(0, 5), ValueError, r"^d_q must be positive, got 0$"),
        (lambda: BilinearScore(3, 0), ValueError, r"^d_k must be positive, got 0$"),
        (lambda: BilinearScore(True, 5), TypeError, r"^d_q must be an int, got bool$"),
    ],
    ids=["add-d_q", "add-d_k", "add-d_hidden", "add-d_k-type", "add-d_hidden-type", "bil-d_q",
         "bil-d_k", "bil-d_q-type"],
)
def test_score_constructors_name_the_bad_argument(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_bilinear_score_checks_both_widths_it_was_built_for():
    bil = BilinearScore(3, 5)
    with pytest.raises(ValueError, match=r"^BilinearScore expects query features d_q=3, got "
                                         r"query \(2, 4\)$"):
        bil(torch.ones(2, 4), torch.ones(6, 5))
    with pytest.raises(ValueError, match=r"^BilinearScore expects key features d_k=5, got key "
                                         r"\(6, 4\)$"):
        bil(torch.ones(2, 3), torch.ones(6, 4))
    assert bil(torch.ones(2, 3), torch.ones(6, 5)).shape == (2, 6)  # the widths it was built for


@pytest.mark.parametrize("bad", ["query", "key"])
def test_score_input_messages_start_with_the_argument(bad):
    t = {"query": torch.ones(2, 3), "key": torch.ones(6, 3)}
    t[bad] = [[1.0] * 3]
    with pytest.raises(TypeError, match=rf"^{bad} must be a torch\.Tensor, got list$"):
        DotScore()(**t)
    t[bad] = torch.ones(3)
    with pytest.raises(ValueError, match=rf"^{bad} must have at least 2 dimensions, got shape "
                                         r"\(3,\)$"):
        DotScore()(**t)
    t[bad] = torch.ones(2, 3, dtype=torch.int64)
    with pytest.raises(TypeError, match=rf"^{bad} must be a floating-point tensor"):
        DotScore()(**t)


def test_score_names_mismatched_batch_dimensions():
    with pytest.raises(ValueError, match=r"^query \(2, 4, 3\) and key \(3, 6, 3\) must share "
                                         r"their leading \(batch\) dimensions$"):
        ScaledDotScore()(torch.ones(2, 4, 3), torch.ones(3, 6, 3))
    with pytest.raises(ValueError, match=r"^key \(2, 6, 3\) and value \(2, 5, 2\) must have the "
                                         r"same leading dimensions and length L_k$"):
        Attention(DotScore())(torch.ones(2, 4, 3), torch.ones(2, 6, 3), torch.ones(2, 5, 2))
    with pytest.raises(TypeError, match=r"^value must be a torch\.Tensor, got list$"):
        Attention(DotScore())(torch.ones(2, 4, 3), torch.ones(2, 6, 3), [[1.0]])
