"""Tests of the circuit measurements of ``attention_src.language_model`` (chapter 6).

``ov_circuits`` against a per-head product of the ``nn.Linear`` weights written out with
NumPy; ``own_logit_ranks`` against a sort, row by row; ``sequence_losses`` against
``F.cross_entropy`` token by token; ``head_ablation_losses`` against zeroing the heads'
columns of a copied output projection (no gates); ``path_ablation_rises`` against the
head-by-head reference of ``test_language_model``; ``mean_ablated_logits`` against forward
pre-hooks on the output projections that overwrite a head's slice of the concatenation.
"""

from __future__ import annotations

import copy
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from attention_src.language_model import (
    AttentionOnlyTransformer,
    head_ablation_losses,
    mean_ablated_logits,
    ov_circuits,
    ov_copying_score,
    own_logit_ranks,
    path_ablated_logits,
    path_ablation_rises,
    sequence_losses,
)
from tests.conftest import PROPERTY, TOL, randn, seeds
from tests.test_language_model import (
    _model,
    _reference_path_ablation,
    _tokens,
    _with_random_biases,
)

# --- ov_circuits and own_logit_ranks -----------------------------------------------------------


def test_ov_circuits_equal_a_numpy_product_head_by_head():
    model = _model(vocab=7, embed=12, heads=3)
    for layer in range(2):
        lay = model.layers[layer]
        got = ov_circuits(model, layer)
        assert got.shape == (3, 7, 7) and got.dtype == torch.float64
        w_e = model.embed.weight.detach().numpy()  # (V, E)
        w_u = model.unembed.weight.detach().numpy().T  # (E, V)
        for r in range(3):
            cols = slice(4 * r, 4 * r + 4)
            # nn.Linear stores weight = W^T: x W_v is x @ v_proj.weight.T
            w_v = lay.v_proj.weight.detach().numpy()[cols].T  # (E, d)
            w_o = lay.out_proj.weight.detach().numpy()[:, cols].T  # (d, E)
            expected = w_e @ w_v @ w_o @ w_u
            np.testing.assert_allclose(got[r].numpy(), expected, atol=1e-10, rtol=0)
            # rank at most d_head = 4 < V = 7
            assert np.linalg.matrix_rank(got[r].numpy(), tol=1e-8) <= 4


def test_ov_circuit_of_a_head_is_what_attending_to_a_token_adds_to_the_logits():
    """One layer, one position attended by every query: the logits move by row t of the
    circuit when the value bias, position embedding and output bias are zero."""
    torch.manual_seed(3)
    model = AttentionOnlyTransformer(5, 4, 2, 1, 2).double().eval()
    with torch.no_grad():
        model.pos_embed.weight.zero_()
        for lin in (model.layers[0].v_proj, model.layers[0].out_proj):
            lin.bias.zero_()
    circuit = ov_circuits(model, 0)  # (2, 5, 5)
    gates = torch.tensor([[1.0, 0.0]], dtype=torch.float64)  # head 0 only
    for t in range(5):
        tokens = torch.tensor([[t]])  # L = 1: the only key is the token itself
        with torch.no_grad():
            moved = model(tokens, gates=gates) - model(tokens, gates=torch.zeros(1, 2).double())
        assert torch.allclose(moved[0, 0], circuit[0, t], **TOL[torch.float64])


def test_ov_copying_score_is_one_for_a_low_rank_copier_that_copies_few_tokens():
    """The eigenvalue score is 1 for any positive semi-definite circuit, here the projection
    onto 2 of 4 token directions: tokens 2 and 3 are not copied, yet the score is 1."""
    model = AttentionOnlyTransformer(4, 4, 2, 1, 3).double()
    with torch.no_grad():
        for lin in (model.layers[0].v_proj, model.layers[0].out_proj, model.unembed):
            lin.weight.copy_(torch.eye(4))
        model.embed.weight.copy_(torch.eye(4))
    circuit = ov_circuits(model, 0)  # head 0 reads features 0-1, head 1 features 2-3
    assert torch.equal(circuit[0], torch.diag(torch.tensor([1.0, 1, 0, 0], dtype=torch.float64)))
    assert torch.allclose(ov_copying_score(model, 0), torch.ones(2, dtype=torch.float64))
    ranks = own_logit_ranks(circuit[0])
    # tokens 2 and 3: a row of zeros, every logit tied with the own one, which counts
    # against the token: last, not first
    assert ranks.tolist() == [1, 1, 4, 4]
    lifted = circuit[0] + torch.tensor([0.0, 0.0, 0.0, 0.5], dtype=torch.float64)
    assert own_logit_ranks(lifted).tolist() == [1, 1, 4, 1]


def _loop_ranks(m: np.ndarray) -> np.ndarray:  # m: (V, V)
    out = np.empty(m.shape[0], dtype=np.int64)
    for t in range(m.shape[0]):
        # the own logit goes *after* every logit equal to it (ties count against it): sort
        # by value, descending, and among equal values put u = t last
        order = sorted(range(m.shape[1]), key=lambda u: (-m[t, u], u == t))
        out[t] = 1 + order.index(t)
    return out


@PROPERTY
@given(seed=seeds, V=st.integers(1, 7), batch=st.integers(1, 3), ties=st.booleans())
def test_own_logit_ranks_equal_a_sort_row_by_row(seed, V, batch, ties):
    m = randn(seed, batch, V, V)
    if ties:  # coarse values: many ties, which count as the worse rank
        m = m.round()
    got = own_logit_ranks(m)
    assert got.shape == (batch, V) and got.dtype == torch.int64
    for b in range(batch):
        assert got[b].tolist() == _loop_ranks(m[b].numpy()).tolist()
    assert int(got.min()) >= 1 and int(got.max()) <= V


def test_own_logit_ranks_of_the_identity_are_one_and_of_minus_identity_are_last():
    eye = torch.eye(5, dtype=torch.float64)
    assert own_logit_ranks(eye).tolist() == [1] * 5
    assert own_logit_ranks(-eye).tolist() == [5] * 5
    # a row whose own logit is beaten by exactly two others; a row of zeros (a dead head)
    # ties with every other logit and ranks last; one tie costs one place
    m = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
    assert own_logit_ranks(m).tolist() == [3, 3, 3]
    tie = torch.tensor([[2.0, 2.0, 1.0], [0.0, 3.0, 1.0], [1.0, 0.0, 1.0]])
    assert own_logit_ranks(tie).tolist() == [2, 1, 2]
    # the whole zero circuit of a dead head copies no token
    assert own_logit_ranks(torch.zeros(2, 4, 4)).tolist() == [[4] * 4] * 2


def test_a_low_rank_circuit_can_still_put_every_own_logit_on_top():
    """Rank 2 on 6 tokens: the Gram matrix of 6 distinct unit vectors in the plane has its
    largest entry of every row on the diagonal. Low rank alone does not forbid copying every
    token, so a head's share of tokens copied has to be measured, not inferred."""
    angles = torch.arange(6, dtype=torch.float64) * (2 * math.pi / 6)
    a = torch.stack([angles.cos(), angles.sin()], dim=-1)  # (6, 2)
    gram = a @ a.T  # (6, 6), rank 2
    assert int(torch.linalg.matrix_rank(gram)) == 2
    assert own_logit_ranks(gram).tolist() == [1] * 6
    # rotate the read-out by 45 degrees: every token now favours the next one (at 15
    # degrees) over itself (at 45), and itself over the rest
    c = math.sqrt(0.5)
    rotated = a @ torch.tensor([[c, c], [-c, c]], dtype=torch.float64) @ a.T
    assert own_logit_ranks(rotated).tolist() == [2] * 6


@pytest.mark.parametrize(
    ("circuit", "error", "match"),
    [
        (torch.ones(3, 4), ValueError, r"^circuit must be square in its last two axes "
                                       r"\(\.\.\., V, V\), got shape \(3, 4\)$"),
        (torch.ones(2, 3, 4), ValueError, r"^circuit must be square in its last two axes "
                                          r"\(\.\.\., V, V\), got shape \(2, 3, 4\)$"),
        (torch.ones(3), ValueError, r"^circuit must have at least 2 dimensions"),
        (torch.ones(2, 2, dtype=torch.long), TypeError, r"^circuit must be a floating-point"),
        ([[1.0]], TypeError, r"^circuit must be a torch\.Tensor"),
        (torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), ValueError,
         r"^circuit must be finite \(no NaN or infinity\)$"),
        (torch.tensor([[1.0, float("inf")], [0.0, 1.0]]), ValueError, r"^circuit must be finite"),
    ],
)
def test_own_logit_ranks_refuse_bad_circuits(circuit, error, match):
    with pytest.raises(error, match=match):
        own_logit_ranks(circuit)


@pytest.mark.parametrize("layer", [True, 1.0, -1, 2])
def test_ov_circuits_refuse_a_layer_that_is_not_an_index(layer):
    with pytest.raises(ValueError, match=rf"^layer must be an int in \[0, 2\), got "
                                         rf"{re.escape(repr(layer))}$"):
        ov_circuits(_model(), layer)
    with pytest.raises(TypeError, match=r"^model must be an AttentionOnlyTransformer, got "
                                        r"Linear$"):
        ov_circuits(torch.nn.Linear(2, 2), 0)


# --- sequence_losses -----------------------------------------------------------------------------


@PROPERTY
@given(seed=seeds, B=st.integers(1, 3), L=st.integers(2, 6))
def test_sequence_losses_equal_cross_entropy_averaged_by_hand(seed, B, L):
    V = 5
    logits = randn(seed, B, L, V)
    tokens = _tokens(seed % 1000, B, L, V)
    g = torch.Generator().manual_seed(seed)
    targets = torch.rand(B, L - 1, generator=g) < 0.5
    targets[:, -1] = True  # every row needs one
    got = sequence_losses(logits, tokens, targets)
    assert got.shape == (B,)
    for b in range(B):
        chosen = [F.cross_entropy(logits[b, t], tokens[b, t + 1]).item()
                  for t in range(L - 1) if targets[b, t]]
        assert got[b].item() == pytest.approx(sum(chosen) / len(chosen), abs=1e-12)


def test_sequence_losses_name_bad_targets():
    logits, tokens = torch.zeros(2, 4, 3), torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(TypeError, match=r"^targets must be a bool tensor, got torch\.float32$"):
        sequence_losses(logits, tokens, torch.ones(2, 3))
    with pytest.raises(TypeError, match=r"^targets must be a bool tensor, got list$"):
        sequence_losses(logits, tokens, [[True] * 3] * 2)
    with pytest.raises(ValueError, match=r"^targets must be \(B, L - 1\) = \(2, 3\) for tokens "
                                         r"\(2, 4\), got shape \(2, 4\)$"):
        sequence_losses(logits, tokens, torch.ones(2, 4, dtype=torch.bool))
    empty_row = torch.ones(2, 3, dtype=torch.bool)
    empty_row[1] = False
    with pytest.raises(ValueError, match=r"^every sequence needs at least one target \(a True "
                                         r"in its row\)$"):
        sequence_losses(logits, tokens, empty_row)
    # a token id outside the vocabulary of the logits (V = 3) is named, not an IndexError
    for bad, lo, hi in ((3, 0, 3), (-1, -1, 0)):
        wrong = tokens.clone()
        wrong[1, 2] = bad
        with pytest.raises(ValueError, match=rf"^token ids must lie in \[0, 3\), got values "
                                             rf"from {lo} to {hi}$"):
            sequence_losses(logits, wrong, torch.ones(2, 3, dtype=torch.bool))
    top = tokens.clone()
    top[0, 1] = 2  # V - 1 is a valid id
    assert sequence_losses(logits, top, torch.ones(2, 3, dtype=torch.bool)).shape == (2,)
    # one target per row, at either end, is enough
    one = torch.zeros(2, 3, dtype=torch.bool)
    one[0, 0] = one[1, 2] = True
    assert torch.allclose(sequence_losses(logits, tokens, one), torch.full((2,), math.log(3)))


# --- head_ablation_losses ------------------------------------------------------------------------


def _zero_columns(model, layer, heads):
    """A copy of ``model`` whose output projection of ``layer`` has the columns of ``heads``
    set to zero: the heads' outputs never reach the stream (the bias stays)."""
    out = copy.deepcopy(model)
    d = model.embed_dim // model.num_heads
    with torch.no_grad():
        for r in heads:
            out.layers[layer].out_proj.weight[:, r * d:(r + 1) * d] = 0.0
    return out


def _loss_by_hand(model, tokens, targets):  # (B,): mean F.cross_entropy over the targets
    with torch.no_grad():
        logits = model(tokens)
    rows = []
    for b in range(tokens.shape[0]):
        ts = [t for t in range(tokens.shape[1] - 1) if targets[b, t]]
        rows.append(sum(F.cross_entropy(logits[b, t], tokens[b, t + 1]) for t in ts) / len(ts))
    return torch.stack(rows)


@pytest.mark.parametrize("layer", [0, 1])
def test_head_ablation_losses_equal_models_with_zeroed_output_columns(layer):
    model = _with_random_biases(_model(), 21).eval()
    tokens = _tokens(22, 3, 8, 11)
    targets = torch.zeros(3, 7, dtype=torch.bool)
    targets[:, 3:] = True
    targets[1, 0] = True
    got = head_ablation_losses(model, tokens, targets, layer)
    assert set(got) == {"intact", "none", "only"}
    assert got["only"].shape == (3, 3)
    allclose = dict(TOL[torch.float64])
    assert torch.allclose(got["intact"], _loss_by_hand(model, tokens, targets), **allclose)
    assert torch.allclose(got["none"], _loss_by_hand(_zero_columns(model, layer, [0, 1, 2]),
                                                     tokens, targets), **allclose)
    for r in range(3):
        others = [i for i in range(3) if i != r]
        assert torch.allclose(got["only"][r], _loss_by_hand(
            _zero_columns(model, layer, others), tokens, targets), **allclose)
    # the kinds of ablation differ from one another on this model
    assert float((got["none"] - got["intact"]).abs().max()) > 1e-3
    assert float((got["only"][0] - got["only"][1]).abs().max()) > 1e-3
    assert float((got["only"][0] - got["none"]).abs().max()) > 1e-3


def test_head_ablation_losses_with_one_head_keep_it_as_intact():
    model = _model(heads=1, embed=6).eval()
    tokens = _tokens(23, 2, 6, 11)
    targets = torch.ones(2, 5, dtype=torch.bool)
    got = head_ablation_losses(model, tokens, targets, 1)
    assert got["only"].shape == (1, 2)
    assert torch.equal(got["only"][0], got["intact"])
    assert float((got["none"] - got["intact"]).abs().max()) > 1e-3


def test_head_ablation_losses_name_their_bad_arguments():
    model = _model()
    tokens = torch.zeros(2, 4, dtype=torch.long)
    targets = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"^layer must be an int in \[0, 2\), got 2$"):
        head_ablation_losses(model, tokens, targets, 2)
    with pytest.raises(TypeError, match=r"^model must be an AttentionOnlyTransformer"):
        head_ablation_losses(torch.nn.Linear(2, 2), tokens, targets, 0)
    with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 11\)"):
        head_ablation_losses(model, torch.full((2, 4), 11), targets, 0)
    with pytest.raises(ValueError, match=r"^targets must be \(B, L - 1\)"):
        head_ablation_losses(model, tokens, targets[:, :2], 0)


# --- path_ablation_rises -------------------------------------------------------------------------


def test_path_ablation_rises_equal_the_head_by_head_reference():
    model = _with_random_biases(_model(), 24).eval()
    tokens = _tokens(25, 4, 9, 11)
    targets = torch.zeros(4, 8, dtype=torch.bool)
    targets[:, ::2] = True
    got = path_ablation_rises(model, tokens, targets)
    assert got.shape == (3, 3, 4)

    def by_hand(logits):
        rows = []
        for b in range(4):
            ts = [t for t in range(8) if targets[b, t]]
            rows.append(sum(F.cross_entropy(logits[b, t], tokens[b, t + 1]) for t in ts)
                        / len(ts))
        return torch.stack(rows)

    with torch.no_grad():
        intact = by_hand(model(tokens))
        for r in range(3):
            for k, p in enumerate("qkv"):
                expected = by_hand(_reference_path_ablation(model, tokens, [r], p)) - intact
                assert torch.allclose(got[r, k], expected, **TOL[torch.float64]), (r, p)
    assert float(got.abs().max()) > 1e-3


def test_path_ablation_rises_in_a_deeper_model_equal_path_ablated_logits():
    """Three layers, random biases: each rise equals the loss of ``path_ablated_logits``
    (tested against PyTorch's layers in test_language_model) minus the intact loss."""
    model = _with_random_biases(_model(layers=3), 33).eval()
    tokens = _tokens(34, 3, 9, 11)
    targets = torch.zeros(3, 8, dtype=torch.bool)
    targets[:, 2:] = True
    got = path_ablation_rises(model, tokens, targets)
    with torch.no_grad():
        intact = sequence_losses(model(tokens), tokens, targets)
        for r in range(3):
            for k, p in enumerate("qkv"):
                logits = path_ablated_logits(model, tokens, [r], p)
                expected = sequence_losses(logits, tokens, targets) - intact
                assert torch.allclose(got[r, k], expected, **TOL[torch.float64]), (r, p)


def test_path_ablation_rises_name_their_bad_arguments():
    tokens = torch.zeros(1, 3, dtype=torch.long)
    targets = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(TypeError, match=r"^model must be an AttentionOnlyTransformer, got "
                                        r"NoneType$"):
        path_ablation_rises(None, tokens, targets)
    with pytest.raises(TypeError, match=r"^model must be an AttentionOnlyTransformer, got "
                                        r"Linear$"):
        path_ablation_rises(torch.nn.Linear(2, 2), tokens, targets)
    with pytest.raises(ValueError, match=r"^path ablation needs at least 2 layers, got 1$"):
        path_ablation_rises(_model(layers=1), tokens, targets)
    with pytest.raises(TypeError, match=r"^targets must be a bool tensor"):
        path_ablation_rises(_model(), tokens, targets.long())
    with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 11\)"):
        path_ablation_rises(_model(), torch.full((1, 3), 12), targets)


# --- mean_ablated_logits -------------------------------------------------------------------------


def _hooked_mean_ablation(model, tokens, heads, reference):
    """Mean ablation with forward pre-hooks on the output projections: first record each
    layer's concatenated head outputs on ``reference`` in the intact model, then overwrite the
    ablated heads' slices with their mean over the reference sequences (the projection is
    linear, so the mean slice through W_o is the mean contribution)."""
    d = model.embed_dim // model.num_heads
    recorded = {}

    def recorder(n):
        def hook(module, args):
            recorded[n] = args[0].detach().clone()  # (B_r, L, h * d)
        return hook

    handles = [lay.out_proj.register_forward_pre_hook(recorder(n))
               for n, lay in enumerate(model.layers)]
    with torch.no_grad():
        model(reference)
    for handle in handles:
        handle.remove()

    def replacer(n):
        def hook(module, args):
            concat = args[0].clone()  # (B, L, h * d)
            for lay, r in heads:
                if lay == n:
                    cols = slice(r * d, (r + 1) * d)
                    concat[..., cols] = recorded[n][..., cols].mean(0)  # (L, d)
            return (concat,)
        return hook

    handles = [lay.out_proj.register_forward_pre_hook(replacer(n))
               for n, lay in enumerate(model.layers)]
    try:
        with torch.no_grad():
            return model(tokens)
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("heads", [[(0, 1)], [(1, 0), (1, 2)], [(0, 0), (1, 1)],
                                   [(0, 2), (1, 2), (2, 0)]])
def test_mean_ablation_equals_overwriting_the_heads_slices_with_hooks(heads):
    model = _with_random_biases(_model(layers=3), 26).eval()
    tokens = _tokens(27, 3, 9, 11)
    reference = _tokens(28, 5, 9, 11)
    got = mean_ablated_logits(model, tokens, heads, reference)
    expected = _hooked_mean_ablation(model, tokens, heads, reference)
    assert torch.allclose(got, expected, **TOL[torch.float64])
    with torch.no_grad():
        assert float((got - model(tokens)).abs().max()) > 1e-3


def test_mean_ablation_on_its_own_single_reference_sequence_changes_nothing():
    """With the sequence itself as the only reference, every head's mean output is its own."""
    model = _model().eval()
    tokens = _tokens(29, 1, 9, 11)
    with torch.no_grad():
        intact = model(tokens)
    got = mean_ablated_logits(model, tokens, [(0, 0), (0, 1), (1, 2)], tokens)
    assert torch.allclose(got, intact, **TOL[torch.float64])
    with torch.no_grad():  # the intact model's own forward pass, bit for bit
        assert torch.equal(mean_ablated_logits(model, tokens, [], tokens), intact)


def test_mean_ablation_differs_from_zero_ablation_by_the_mean_through_w_o():
    """A head of the last layer: the logits move by (mean output - 0) W_o W_U relative to
    gating it off."""
    model = _model().eval()
    tokens = _tokens(30, 2, 7, 11)
    reference = _tokens(31, 4, 7, 11)
    gates = torch.ones(2, 3, dtype=torch.float64)
    gates[1, 1] = 0.0
    with torch.no_grad():
        zeroed = model(tokens, gates=gates)
    meaned = mean_ablated_logits(model, tokens, [(1, 1)], reference)
    recorded = {}
    handle = model.layers[1].out_proj.register_forward_pre_hook(
        lambda m, a: recorded.setdefault("x", a[0].detach().clone()))
    with torch.no_grad():
        model(reference)
    handle.remove()
    mean_slice = recorded["x"][..., 4:8].mean(0)  # (L, d)
    w_o = model.layers[1].out_proj.weight[:, 4:8]  # (E, d)
    shift = mean_slice @ w_o.T @ model.unembed.weight.T  # (L, V)
    assert torch.allclose(meaned - zeroed, shift.expand_as(zeroed), **TOL[torch.float64])


def test_mean_ablation_names_its_bad_arguments():
    model = _model()
    tokens = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(TypeError, match=r"^model must be an AttentionOnlyTransformer, got "
                                        r"Linear$"):
        mean_ablated_logits(torch.nn.Linear(2, 2), tokens, [(0, 0)], tokens)
    with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 11\), got values from 0 "
                                         r"to 11$"):
        bad = tokens.clone()
        bad[1, 2] = 11
        mean_ablated_logits(model, bad, [(0, 0)], tokens)
    for heads in ([(0, 3)], [(2, 0)], [(0,)], [0], [(True, 0)], [(0, 1.0)], [[0, 1]]):
        with pytest.raises(ValueError, match=r"^heads must be \(layer, head\) pairs of ints in "
                                             r"\[0, 2\) x \[0, 3\), got "
                                             + re.escape(repr(heads)) + "$"):
            mean_ablated_logits(model, tokens, heads, tokens)
    with pytest.raises(ValueError, match=r"^heads must not repeat, got \[\(0, 1\), \(0, 1\)\]$"):
        mean_ablated_logits(model, tokens, [(0, 1), (0, 1)], tokens)
    with pytest.raises(ValueError, match=r"^reference \(B_r, L\) must have B_r >= 1 and the L of "
                                         r"tokens \(2, 4\), got shape \(2, 5\)$"):
        mean_ablated_logits(model, tokens, [(0, 1)], torch.zeros(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"got shape \(0, 4\)$"):
        mean_ablated_logits(model, tokens, [(0, 1)], torch.zeros(0, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"^token ids must lie in \[0, 11\)"):
        mean_ablated_logits(model, tokens, [(0, 1)], torch.full((2, 4), 11))
    long = torch.zeros(1, 10, dtype=torch.long)  # max_len = 9
    with pytest.raises(ValueError, match=r"^sequence length 10 must lie in \[1, max_len = 9\]$"):
        mean_ablated_logits(model, long, [(0, 1)], long)
    empty = torch.zeros(1, 0, dtype=torch.long)
    with pytest.raises(ValueError, match=r"^sequence length 0 must lie in \[1, max_len = 9\]$"):
        mean_ablated_logits(model, empty, [(0, 1)], empty)
    # the extreme valid pair and lengths, and a single reference sequence
    assert mean_ablated_logits(model, tokens, [(1, 2)], tokens[:1]).shape == (2, 4, 11)
    full = _tokens(32, 2, 9, 11)
    assert mean_ablated_logits(model, full, [(0, 0)], full).shape == (2, 9, 11)
    one = full[:, :1]
    assert mean_ablated_logits(model, one, [(0, 0)], one).shape == (2, 1, 11)
