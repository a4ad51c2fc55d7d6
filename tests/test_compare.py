"""Tests of attention_src.compare (chapter 7): each layer against an independent reference,
the analytic FLOP counts against FlopCounterMode, and path lengths against their formulas."""

import json
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention_src import compare as C
from attention_src.saved import SAVED_DIR
from attention_src.softmax import band_mask
from attention_src.utils import count_parameters

DT = torch.float64


def _x(b, n, d, seed=0):
    return torch.randn(b, n, d, generator=torch.Generator().manual_seed(seed), dtype=DT)


def test_self_attention_matches_pytorch_sdpa():
    torch.manual_seed(0)
    layer = C.SelfAttentionLayer(6).double()
    x = _x(2, 7, 6)
    q, k, v = (x @ p.weight.T for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    ref = F.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(layer(x), ref, atol=1e-12)


@pytest.mark.parametrize("r", [1, 2, 3, 9])
def test_restricted_matches_dense_attention_with_a_causal_band(r):
    torch.manual_seed(1)
    layer = C.RestrictedSelfAttentionLayer(5, r).double()
    x = _x(3, 8, 5)
    q, k, v = (x @ p.weight.T for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    mask = band_mask(8, r, causal=True)  # (n, n): keys i - r + 1 .. i
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(layer(x), ref, atol=1e-12)
    # each window's weights sum to 1 and the padding gets exactly 0
    w = layer.weights(x)
    assert torch.allclose(w.sum(-1), torch.ones(3, 8, dtype=DT))
    assert bool((w[:, 0, : r - 1] == 0).all())


def test_recurrent_matches_torch_rnn():
    torch.manual_seed(2)
    layer = C.RecurrentLayer(4).double()
    rnn = torch.nn.RNN(4, 4, batch_first=True).double()
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(layer.x_proj.weight)
        rnn.bias_ih_l0.copy_(layer.x_proj.bias)
        rnn.weight_hh_l0.copy_(layer.h_proj.weight)
        rnn.bias_hh_l0.zero_()
    x = _x(2, 9, 4)
    assert torch.allclose(layer(x), rnn(x)[0], atol=1e-12)
    # the recurrence is contracting: spectral norm of W_h is the gain 0.9
    assert abs(float(torch.linalg.matrix_norm(layer.h_proj.weight.detach(), ord=2)) - 0.9) < 1e-6


@pytest.mark.parametrize(("k", "dilation"), [(1, 1), (3, 1), (2, 4), (3, 3)])
def test_conv_matches_a_loop_over_taps(k, dilation):
    torch.manual_seed(3)
    layer = C.ConvLayer(3, k, dilation).double()
    x = _x(2, 10, 3)
    w, b = layer.conv.weight, layer.conv.bias  # (d_out, d_in, k), (d_out,)
    ref = torch.zeros(2, 10, 3, dtype=DT) + b
    for i in range(10):
        for m in range(k):  # tap m of the kernel reads input i - (k - 1 - m) * dilation
            j = i - (k - 1 - m) * dilation
            if j >= 0:
                ref[:, i] += x[:, j] @ w[:, :, m].T
    assert torch.allclose(layer(x), ref, atol=1e-12)


LAYERS = {
    "self-attention": lambda d, k, r: C.SelfAttentionLayer(d),
    "restricted": lambda d, k, r: C.RestrictedSelfAttentionLayer(d, r),
    "recurrent": lambda d, k, r: C.RecurrentLayer(d),
    "convolution": lambda d, k, r: C.ConvLayer(d, k),
    "dilated": lambda d, k, r: C.ConvLayer(d, k, dilation=2),
}


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(sorted(LAYERS)), b=st.integers(1, 3), n=st.integers(1, 12),
       d=st.integers(1, 6), k=st.integers(1, 4), r=st.integers(1, 5))
def test_analytic_flops_equal_flop_counter(kind, b, n, d, k, r):
    layer = LAYERS[kind](d, k, r)
    x = torch.randn(b, n, d)
    assert C.analytic_flops(layer, n, b) == C.measured_flops(layer, x)


def test_flops_by_hand():
    # self-attention at n = 4, d = 2: QK^T and AV are 4*4*2 multiply-adds each
    assert C.analytic_flops(C.SelfAttentionLayer(2), 4) == {"mixing": 2 * 2 * 32,
                                                            "position-wise": 3 * 2 * 16}
    # a convolution is one product over its k taps: all of it mixes positions
    assert C.analytic_flops(C.ConvLayer(2, 3), 5) == {"mixing": 2 * 5 * 3 * 4,
                                                      "position-wise": 0}


def test_measured_flops_split_the_recurrent_layer_by_hand():
    """n = 5, d = 3, batch 2: one input product (10, 3) @ (3, 3) is position-wise; the five
    hidden products (2, 3) @ (3, 3), one per step, mix positions. Counted by hand: 90
    multiply-adds each way, independently of the module names measured_flops reads."""
    layer = C.RecurrentLayer(3)
    assert C.measured_flops(layer, torch.randn(2, 5, 3)) == {"mixing": 2 * 90,
                                                             "position-wise": 2 * 90}


def test_measured_flops_split_attention_by_hand():
    """n = 4, d = 2, batch 1: three projections (4, 2) @ (2, 2), 16 multiply-adds each, are
    position-wise; QK^T (4, 2) @ (2, 4) and AV (4, 4) @ (4, 2), 32 each, mix."""
    got = C.measured_flops(C.SelfAttentionLayer(2), torch.randn(1, 4, 2))
    assert got == {"mixing": 2 * 64, "position-wise": 2 * 48}


class _RecurrentWithIdleProjection(C.RecurrentLayer):
    """A recurrent layer that declares one more position-wise submodule and never calls it."""

    POSITION_WISE = ("x_proj", "idle")

    def __init__(self, d):
        super().__init__(d)
        self.idle = nn.Linear(d, d)


def test_measured_flops_counts_a_position_wise_submodule_that_runs_nothing_as_zero():
    """A named submodule that runs no product adds nothing (the counter does not list it)."""
    layer = _RecurrentWithIdleProjection(3)
    x = torch.randn(2, 5, 3)
    assert C.measured_flops(layer, x) == C.measured_flops(C.RecurrentLayer(3), x) == {
        "mixing": 2 * 90, "position-wise": 2 * 90}


def test_measured_flops_needs_the_position_wise_names():
    with pytest.raises(TypeError, match=r"^Linear does not name its position-wise "
                                        r"submodules \(POSITION_WISE\)$"):
        C.measured_flops(nn.Linear(2, 2), torch.randn(1, 3, 2))


@pytest.mark.parametrize("n", [2, 5, 16, 40])
@pytest.mark.parametrize("k", [2, 3, 5])
def test_path_lengths_follow_their_formulas(n, k):
    assert C.path_length("self-attention", n) == 1
    assert C.path_length("recurrent", n) == 1
    assert C.path_length("convolution", n, k=k) == math.ceil((n - 1) / (k - 1))
    assert C.path_length("restricted", n, r=k) == math.ceil((n - 1) / (k - 1))
    # the smallest L with k**L >= n, computed with integers
    assert C.path_length("dilated convolution", n, k=k) == next(
        L for L in range(1, 64) if k**L >= n)


def test_path_length_gives_up():
    with pytest.raises(RuntimeError, match="does not see input 0"):
        C.path_length("convolution", 50, k=2, max_layers=3)


def test_path_length_tries_64_layers_by_default(monkeypatch):
    """The default ``max_layers`` is 64: stacks of 1 to 64 layers are tried, no more. (The
    stacks are stubbed: a real 65-layer search takes seconds.)"""
    depths = []

    def fake_stack(kind, n_layers, d, k, r, centred):
        depths.append(n_layers)
        return nn.Identity()

    monkeypatch.setattr(C, "make_stack", fake_stack)
    monkeypatch.setattr(C, "_depends", lambda stack, x: False)
    with pytest.raises(RuntimeError, match="^convolution: output 65 does not see input 0 "
                                           "after 64 layers$"):
        C.path_length("convolution", 66, k=2)
    assert depths == list(range(1, 65))


@pytest.mark.parametrize("n", [1, 7, 30])
def test_longest_matmul_chain(n):
    x = _x(1, n, 3)
    torch.manual_seed(0)
    assert C.longest_matmul_chain(C.RecurrentLayer(3).double()(x)) == n
    assert C.longest_matmul_chain(C.SelfAttentionLayer(3).double()(x)) == 3
    assert C.longest_matmul_chain(C.ConvLayer(3, 3).double()(x)) == 1
    with pytest.raises(ValueError, match="no grad_fn"):
        C.longest_matmul_chain(x)


@pytest.mark.parametrize("n_layers", [1, 3])
def test_longest_matmul_chain_of_stacks_counts_products_per_layer(n_layers):
    """On output n - 1 of a stack: one product per convolution layer (dilated or not), three
    per attention layer (a projection, the scores, the weighted sum), n per recurrent layer
    (its input product, then n - 1 hidden updates). Counted by hand from the layers'
    definitions; the chapter's path lengths in products rest on these counts."""
    n = 9
    torch.manual_seed(0)
    per_layer = {"convolution": 1, "dilated convolution": 1, "self-attention": 3,
                 "restricted": 3, "recurrent": n}
    for kind, count in per_layer.items():
        y = C.make_stack(kind, n_layers, 3)(torch.randn(1, n, 3))  # (1, n, 3)
        assert C.longest_matmul_chain(y[:, -1]) == n_layers * count, kind


def test_gradient_by_distance_matches_the_jacobian():
    torch.manual_seed(4)
    layer = C.RecurrentLayer(3).double()
    x = _x(1, 6, 3)
    jac = torch.autograd.functional.jacobian(lambda z: layer(z)[0, -1], x)  # (3, 1, 6, 3)
    ref = jac[:, 0].pow(2).sum((0, 2)).sqrt()  # (6,)
    assert torch.allclose(C.gradient_by_distance(layer, x), ref, atol=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="at least 1"):
        C.ConvLayer(4, 0)
    with pytest.raises(TypeError, match="must be an int"):
        C.RestrictedSelfAttentionLayer(4, 2.0)
    with pytest.raises(ValueError, match="expects d = 4"):
        C.SelfAttentionLayer(4)(torch.randn(1, 3, 5))
    with pytest.raises(ValueError, match=r"shape \(B, n, d\)"):
        C.RecurrentLayer(4)(torch.randn(3, 4))
    with pytest.raises(ValueError, match="kind must be one of"):
        C.make_stack("lstm", 2, 4)
    with pytest.raises(TypeError, match="no formula"):
        C.analytic_flops(torch.nn.Linear(2, 2), 3)


@pytest.mark.parametrize("kind", ["recurrent", "self-attention"])
def test_gradient_by_distance_averages_per_sample_norms(kind):
    # independent reference: one Jacobian per sequence, its (d, d) blocks' norms, then the mean
    torch.manual_seed(5)
    layer = (C.RecurrentLayer(3, gain=0.5) if kind == "recurrent"
             else C.SelfAttentionLayer(3)).double()
    x = _x(4, 6, 3, seed=1) * torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=DT).view(4, 1, 1)
    norms = []
    for b in range(4):
        jac = torch.autograd.functional.jacobian(
            lambda z: layer(z.unsqueeze(0))[0, -1], x[b])  # (d, n, d)
        norms.append(jac.pow(2).sum((0, 2)).sqrt())  # (n,)
    ref = torch.stack(norms).mean(0)  # (n,)
    assert torch.allclose(C.gradient_by_distance(layer, x), ref, atol=1e-12)


def test_recurrent_gain_sets_the_spectral_norm():
    torch.manual_seed(6)
    for gain in (0.5, 1.3):
        layer = C.RecurrentLayer(5, gain=gain)
        norm = float(torch.linalg.matrix_norm(layer.h_proj.weight.detach(), ord=2))
        assert abs(norm - gain) < 1e-5


@pytest.mark.parametrize("gain", [-0.5, 0.0, float("nan"), float("inf")])
def test_recurrent_gain_must_be_positive_and_finite(gain):
    with pytest.raises(ValueError, match="gain must be positive and finite"):
        C.RecurrentLayer(4, gain=gain)


def test_recurrent_gain_type():
    with pytest.raises(TypeError, match="gain must be a float"):
        C.RecurrentLayer(4, gain="0.5")


def test_gradient_by_distance_bad_input():
    layer = C.RecurrentLayer(3)
    with pytest.raises(ValueError, match=r"shape \(B, n, d\)"):
        C.gradient_by_distance(layer, torch.randn(6, 3))
    with pytest.raises(ValueError, match="expects d = 3"):
        C.gradient_by_distance(layer, torch.randn(1, 6, 4))
    with pytest.raises(ValueError, match="at least one sequence"):
        C.gradient_by_distance(layer, torch.randn(0, 6, 3))


def test_direction_self_attention_both_ways_causal_layers_backwards_only():
    x = _x(1, 10, 4)
    torch.manual_seed(7)
    sa = C.SelfAttentionLayer(4).double()
    xs = x.clone().requires_grad_(True)
    sa(xs)[:, 0].sum().backward()  # output 0 against the last input
    assert bool((xs.grad[:, -1] != 0).any())
    for kind in ("convolution", "restricted", "recurrent", "dilated convolution"):
        stack = C.make_stack(kind, 12, 4).double()
        xs = x.clone().requires_grad_(True)
        stack(xs)[:, 0].sum().backward()
        assert bool((xs.grad[:, 1:] == 0).all()), kind  # output 0 sees input 0 only


@pytest.mark.parametrize("mixer", ["attention", "convolution"])
def test_pixel_classifier_shapes_and_training(mixer):
    torch.manual_seed(8)
    model = C.PixelClassifier(mixer, d=4)
    img = torch.rand(5, 8, 8)
    logits, w = model(img)
    assert logits.shape == (5, 10)
    if mixer == "attention":
        assert w.shape == (5, 64, 64)
        assert torch.allclose(w.sum(-1), torch.ones(5, 64), atol=1e-6)
    else:
        assert w is None
    labels = torch.arange(5)
    losses = C.train_pixel_classifier(model, img, labels, torch.arange(5), seed=0, steps=30,
                                      batch=5)
    assert len(losses) == 30 and losses[-1] < losses[0]


def test_pixel_classifier_convolution_is_a_3x3_window():
    # changing a pixel changes the convolution's output only within one pixel of it
    torch.manual_seed(9)
    model = C.PixelClassifier("convolution", d=3)
    img = torch.rand(1, 8, 8)
    x = model.embed(img.reshape(1, 64, 1)) + model.pos
    grid = x.transpose(1, 2).reshape(1, 3, 8, 8)
    base = model.conv(grid)
    grid2 = grid.clone()
    grid2[..., 0, 0] += 1.0
    changed = (model.conv(grid2) - base).abs().sum(1)[0] > 0  # (8, 8)
    expect = torch.zeros(8, 8, dtype=torch.bool)
    expect[:2, :2] = True
    assert torch.equal(changed, expect)


def test_pixel_classifier_without_position():
    model = C.PixelClassifier("attention", d=4, position=False)
    assert not model.pos.requires_grad and bool((model.pos == 0).all())
    assert model.pos.shape == (64, 4)


def test_pixel_classifier_bad_input():
    with pytest.raises(ValueError, match="mixer must be one of"):
        C.PixelClassifier("lstm")
    with pytest.raises(ValueError, match=r"shape \(B, 8, 8\), got \(2, 64\)"):
        C.PixelClassifier("attention", d=4)(torch.rand(2, 64))
    with pytest.raises(ValueError, match="labels"):
        C.train_pixel_classifier(C.PixelClassifier("convolution", d=2), torch.rand(3, 8, 8),
                                 torch.arange(4), torch.arange(3), seed=0)


def test_pixel_classifier_position_breaks_permutation_invariance():
    # without positions, self-attention cannot see where a pixel is: shuffling the pixels
    # shuffles the rows and columns of the weights and leaves the pooled logits unchanged
    torch.manual_seed(10)
    img = torch.rand(2, 8, 8)
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(0))
    shuffled = img.reshape(2, 64)[:, perm].reshape(2, 8, 8)
    plain = C.PixelClassifier("attention", d=4, position=False)
    (logits, w), (logits_s, w_s) = plain(img), plain(shuffled)
    assert torch.allclose(logits, logits_s, atol=1e-5)
    assert torch.allclose(w[:, perm][:, :, perm], w_s, atol=1e-6)
    placed = C.PixelClassifier("attention", d=4)
    w, w_s = placed(img)[1], placed(shuffled)[1]
    assert (w[:, perm][:, :, perm] - w_s).abs().max() > 1e-2


# --- bad input per argument, boundaries and defaults (issue 13) -----------------------------

import copy  # noqa: E402
import inspect  # noqa: E402

#: Every integer argument of the module with its smallest allowed value, as a call that takes
#: the value under test: ``(label, name, minimum, call)``.
INT_ARGS = [
    ("SelfAttentionLayer.d", "d", 1, lambda v: C.SelfAttentionLayer(v)),
    ("RestrictedSelfAttentionLayer.d", "d", 1, lambda v: C.RestrictedSelfAttentionLayer(v, 2)),
    ("RestrictedSelfAttentionLayer.r", "r", 1, lambda v: C.RestrictedSelfAttentionLayer(2, v)),
    ("RecurrentLayer.d", "d", 1, lambda v: C.RecurrentLayer(v)),
    ("ConvLayer.d", "d", 1, lambda v: C.ConvLayer(v, 2)),
    ("ConvLayer.k", "k", 1, lambda v: C.ConvLayer(2, v)),
    ("ConvLayer.dilation", "dilation", 1, lambda v: C.ConvLayer(2, 2, dilation=v)),
    ("make_stack.n_layers", "n_layers", 1, lambda v: C.make_stack("convolution", v, 2)),
    ("analytic_flops.n", "n", 1, lambda v: C.analytic_flops(C.ConvLayer(2, 2), v)),
    ("analytic_flops.batch", "batch", 1, lambda v: C.analytic_flops(C.ConvLayer(2, 2), 3, v)),
    ("path_length.n", "n", 2, lambda v: C.path_length("recurrent", v)),
    ("path_length.d", "d", 1, lambda v: C.path_length("recurrent", 3, d=v)),
    ("path_length.k", "k", 2, lambda v: C.path_length("convolution", 3, k=v)),
    ("path_length.r", "r", 2, lambda v: C.path_length("restricted", 3, r=v)),
    ("path_length.seed", "seed", 0, lambda v: C.path_length("recurrent", 3, seed=v)),
    ("LSTMLayer.d", "d", 1, lambda v: C.LSTMLayer(v)),
    ("path_length.max_layers", "max_layers", 1,
     lambda v: C.path_length("self-attention", 3, max_layers=v)),
    ("PixelClassifier.d", "d", 1, lambda v: C.PixelClassifier("convolution", d=v)),
    ("train_pixel_classifier.steps", "steps", 1,
     lambda v: C.train_pixel_classifier(C.PixelClassifier("convolution", d=1),
                                        torch.rand(2, 8, 8), torch.arange(2), torch.arange(2),
                                        seed=0, steps=v, batch=2)),
    ("train_pixel_classifier.batch", "batch", 1,
     lambda v: C.train_pixel_classifier(C.PixelClassifier("convolution", d=1),
                                        torch.rand(2, 8, 8), torch.arange(2), torch.arange(2),
                                        seed=0, steps=1, batch=v)),
    ("train_pixel_classifier.seed", "seed", 0,
     lambda v: C.train_pixel_classifier(C.PixelClassifier("convolution", d=1),
                                        torch.rand(2, 8, 8), torch.arange(2), torch.arange(2),
                                        seed=v, steps=1, batch=2)),
]


@pytest.mark.parametrize(("label", "name", "minimum", "call"), INT_ARGS,
                         ids=[a[0] for a in INT_ARGS])
def test_integer_arguments_accept_their_minimum_and_name_themselves_below_it(
        label, name, minimum, call):
    call(minimum)  # the boundary itself is allowed
    with pytest.raises(ValueError, match=rf"^{name} must be at least {minimum}, "
                                         rf"got {minimum - 1}$"):
        call(minimum - 1)


@pytest.mark.parametrize(("label", "name", "minimum", "call"), INT_ARGS,
                         ids=[a[0] for a in INT_ARGS])
@pytest.mark.parametrize(("bad", "type_name"), [(True, "bool"), (2.0, "float")])
def test_integer_arguments_refuse_bools_and_floats_by_name(label, name, minimum, call, bad,
                                                           type_name):
    with pytest.raises(TypeError, match=rf"^{name} must be an int, got {type_name}$"):
        call(bad)


@pytest.mark.parametrize("make", [lambda: C.SelfAttentionLayer(3),
                                  lambda: C.RestrictedSelfAttentionLayer(3, 2),
                                  lambda: C.RecurrentLayer(3), lambda: C.ConvLayer(3, 2),
                                  lambda: C.LSTMLayer(3)],
                         ids=["self-attention", "restricted", "recurrent", "convolution",
                              "lstm"])
def test_layers_name_a_bad_input_shape_or_width(make):
    layer = make()
    for bad in ([[1.0, 2.0, 3.0]], torch.randn(4, 3), torch.randn(3), torch.randn(1, 2, 4, 3)):
        with pytest.raises(ValueError, match=r"^x must be a tensor of shape \(B, n, d\)$"):
            layer(bad)
    # n = 5 positions of width 4: the message gives the width (4), not the length (5)
    with pytest.raises(ValueError, match=r"^x has width 4, the layer expects d = 3$"):
        layer(torch.randn(2, 5, 4))
    # no positions: every layer refuses alike (none returns an empty output, none fails late)
    with pytest.raises(ValueError, match=r"^x must hold at least one position, "
                                         r"got shape \(2, 0, 3\)$"):
        layer(torch.randn(2, 0, 3))
    assert layer(torch.randn(2, 1, 3)).shape == (2, 1, 3)  # one position is enough


def test_recurrent_gain_messages_are_anchored_and_int_gains_work():
    with pytest.raises(TypeError, match=r"^gain must be a float, got bool$"):
        C.RecurrentLayer(4, gain=True)
    with pytest.raises(TypeError, match=r"^gain must be a float, got str$"):
        C.RecurrentLayer(4, gain="0.5")
    with pytest.raises(ValueError, match=r"^gain must be positive and finite, got -0.5$"):
        C.RecurrentLayer(4, gain=-0.5)
    torch.manual_seed(12)
    layer = C.RecurrentLayer(4, gain=1)  # an int is a number too
    assert abs(float(torch.linalg.matrix_norm(layer.h_proj.weight.detach(), ord=2)) - 1) < 1e-5


def test_conv_layer_default_dilation_is_one():
    torch.manual_seed(13)
    layer = C.ConvLayer(3, 2)
    assert layer.dilation == 1 and layer.conv.dilation == (1,)
    # output i reads inputs i and i - 1 only: a change at input 4 reaches outputs 4 and 5
    x = _x(1, 8, 3).float()
    x2 = x.clone()
    x2[:, 4] += 1.0
    changed = (layer(x2) - layer(x)).abs().sum(-1)[0] > 0
    assert changed.tolist() == [False] * 4 + [True, True] + [False] * 2


def test_longest_matmul_chain_message_is_anchored():
    with pytest.raises(ValueError, match=r"^output has no grad_fn: compute it with gradients"):
        C.longest_matmul_chain(torch.ones(2, 3))


def test_make_stack_builds_each_kind_with_its_parameters():
    # defaults k = 3, r = 3; the dilated stack uses dilation k**l in layer l (WaveNet)
    stack = C.make_stack("convolution", 2, 5)
    assert len(stack) == 2 and all(isinstance(m, C.ConvLayer) for m in stack)
    assert [(m.d, m.k, m.dilation) for m in stack] == [(5, 3, 1), (5, 3, 1)]
    stack = C.make_stack("restricted", 3, 4)
    assert [(type(m), m.d, m.r) for m in stack] == [(C.RestrictedSelfAttentionLayer, 4, 3)] * 3
    stack = C.make_stack("dilated convolution", 4, 2, k=2)
    assert [(m.k, m.dilation) for m in stack] == [(2, 1), (2, 2), (2, 4), (2, 8)]
    stack = C.make_stack("dilated convolution", 3, 2)
    assert [m.dilation for m in stack] == [1, 3, 9]
    assert [type(m) for m in C.make_stack("self-attention", 2, 3)] == [C.SelfAttentionLayer] * 2
    assert [type(m) for m in C.make_stack("recurrent", 1, 3)] == [C.RecurrentLayer]
    assert C.make_stack("restricted", 1, 4, r=5)[0].r == 5
    with pytest.raises(ValueError, match=r"^kind must be one of \('self-attention', .*got 'lstm'$"):
        C.make_stack("lstm", 2, 4)


@pytest.mark.parametrize("make", [lambda d: C.SelfAttentionLayer(d),
                                  lambda d: C.RestrictedSelfAttentionLayer(d, 2)],
                         ids=["self-attention", "restricted"])
def test_attention_layers_have_three_bias_free_projections(make):
    """W_q, W_k, W_v, each (d, d) without a bias: 3 d^2 parameters, as the formula in the
    docstring and analytic_flops' count of 3 projections assume. (A bias on the keys would
    not even change the output: q . b is the same for every key of a query.)"""
    layer = make(5)
    assert [(name, tuple(p.shape)) for name, p in layer.named_parameters()] == [
        ("q_proj.weight", (5, 5)), ("k_proj.weight", (5, 5)), ("v_proj.weight", (5, 5))]


def test_analytic_flops_by_hand_for_every_layer_and_the_default_batch():
    # restricted, n = 5, r = 2, d = 3: 5 * 2 * 3 multiply-adds for scores and for the sum
    restricted = C.RestrictedSelfAttentionLayer(3, 2)
    assert C.analytic_flops(restricted, 5) == {"mixing": 2 * 2 * 30,
                                               "position-wise": 3 * 2 * 5 * 9}
    # recurrent, n = 4, d = 2: 4 hidden products (mixing) and 4 input products (each
    # position alone) of a (2, 2) matrix
    assert C.analytic_flops(C.RecurrentLayer(2), 4) == {"mixing": 2 * 4 * 4,
                                                        "position-wise": 2 * 4 * 4}
    # n = 1 is allowed; batch defaults to 1 and scales every count
    sa = C.SelfAttentionLayer(2)
    assert C.analytic_flops(sa, 1) == {"mixing": 2 * 2 * 2, "position-wise": 3 * 2 * 4}
    assert C.analytic_flops(sa, 3) == C.analytic_flops(sa, 3, batch=1)
    assert C.analytic_flops(sa, 3, batch=4) == {
        key: 4 * value for key, value in C.analytic_flops(sa, 3).items()}
    with pytest.raises(TypeError, match=r"^no formula for Linear$"):
        C.analytic_flops(torch.nn.Linear(2, 2), 3)


def test_measured_flops_prints_nothing(capsys):
    # FlopCounterMode prints a table unless told not to; a notebook cell must stay quiet
    C.measured_flops(C.SelfAttentionLayer(2), torch.randn(1, 3, 2))
    assert capsys.readouterr().out == ""


def test_path_length_max_layers_boundary_and_message():
    # a causal convolution with k = 2 needs exactly n - 1 = 4 layers at n = 5
    assert C.path_length("convolution", 5, k=2, max_layers=4) == 4
    with pytest.raises(RuntimeError,
                       match=r"^convolution: output 4 does not see input 0 after 3 layers$"):
        C.path_length("convolution", 5, k=2, max_layers=3)


def test_path_length_defaults():
    # k = 3 and r = 3 by default: (n - 1) / (k - 1) = 4 layers at n = 9
    assert C.path_length("convolution", 9) == C.path_length("convolution", 9, k=3) == 4
    assert C.path_length("restricted", 9) == C.path_length("restricted", 9, r=3) == 4
    assert C.path_length("dilated convolution", 9) == 2  # 3**2 >= 9
    # d and seed only choose the random weights (the answer is structural) and max_layers only
    # matters past 64 layers: the signature is their contract
    params = inspect.signature(C.path_length).parameters
    assert {name: params[name].default for name in ("d", "k", "r", "max_layers", "seed")} == {
        "d": 4, "k": 3, "r": 3, "max_layers": 64, "seed": 0}


class _RunningSum(torch.nn.Module):
    """A layer that accepts any width and declares ``d = 3``: output i is the sum of inputs
    0..i, so every block of the last output's Jacobian is the identity."""

    d = 3

    def forward(self, x):
        return x.cumsum(1)


def test_gradient_by_distance_checks_the_declared_width_even_if_the_layer_does_not():
    x = _x(2, 5, 3)
    # each (3, 3) block is the identity: Frobenius norm sqrt(3) at every distance
    expect = torch.full((5,), math.sqrt(3), dtype=DT)
    assert torch.allclose(C.gradient_by_distance(_RunningSum(), x), expect, atol=1e-12)
    with pytest.raises(ValueError, match=r"^x has width 4, the layer expects d = 3$"):
        C.gradient_by_distance(_RunningSum(), _x(2, 5, 4))


def test_gradient_by_distance_of_a_stack_without_d_uses_the_input_width():
    # nn.Sequential has no attribute d; n = 6 positions of width 3 (n != d on purpose)
    torch.manual_seed(14)
    stack = C.make_stack("convolution", 2, 3, k=2).double()
    x = _x(1, 6, 3)
    jac = torch.autograd.functional.jacobian(lambda z: stack(z)[0, -1], x)  # (3, 1, 6, 3)
    ref = jac[:, 0].pow(2).sum((0, 2)).sqrt()  # (6,)
    got = C.gradient_by_distance(stack, x)
    assert torch.allclose(got, ref, atol=1e-12)
    assert bool((got[:3] == 0).all()) and bool((got[3:] > 0).all())  # receptive field 3


def test_gradient_by_distance_at_one_position():
    torch.manual_seed(15)
    layer = C.RecurrentLayer(3).double()
    x = _x(2, 1, 3)
    norms = [torch.autograd.functional.jacobian(lambda z: layer(z[None])[0, -1], x[b])
             .pow(2).sum().sqrt() for b in range(2)]  # (d, 1, d) each
    assert torch.allclose(C.gradient_by_distance(layer, x), torch.stack(norms).mean()[None],
                          atol=1e-12)


def test_gradient_by_distance_names_its_bad_inputs():
    layer = C.RecurrentLayer(3)
    for bad in ([[1.0, 2.0, 3.0]], torch.randn(3), torch.randn(6, 3)):
        with pytest.raises(ValueError, match=r"^x must be a tensor of shape \(B, n, d\)$"):
            C.gradient_by_distance(layer, bad)
    for shape in ((1, 0, 3), (0, 4, 3)):
        with pytest.raises(ValueError, match=rf"^x must hold at least one sequence and "
                                             rf"position, got \({shape[0]}, {shape[1]}, 3\)$"):
            C.gradient_by_distance(layer, torch.randn(shape))


def test_pixel_classifier_defaults_and_position_initialisation():
    torch.manual_seed(16)
    model = C.PixelClassifier("attention")
    assert model.d == 16 and model.pos.shape == (64, 16) and model.pos.requires_grad
    # 1024 draws of N(0, 0.5**2): the sample sd is 0.5 within 5 of its standard errors (0.011)
    assert abs(float(model.pos.detach().std()) - 0.5) < 0.055
    assert abs(float(model.pos.detach().mean())) < 5 * 0.5 / 32


@pytest.mark.parametrize("mixer", ["attention", "convolution"])
def test_pixel_classifier_forward_matches_a_hand_computation(mixer):
    torch.manual_seed(17)
    model = C.PixelClassifier(mixer, d=3).double()
    img = torch.rand(2, 8, 8, dtype=DT)
    logits, w = model(img)
    # pixel (row, col) is token 8 * row + col, embedded as intensity * w_e + b_e + pos
    tokens = torch.stack([img[:, r, c] for r in range(8) for c in range(8)], 1)  # (2, 64)
    x = tokens[..., None] * model.embed.weight[:, 0] + model.embed.bias + model.pos  # (2, 64, 3)
    if mixer == "attention":
        a = model.attn
        q, k, v = (x @ p.weight.T for p in (a.q_proj, a.k_proj, a.v_proj))
        ref_w = torch.softmax(q @ k.transpose(1, 2) / math.sqrt(3), -1)  # (2, 64, 64)
        o = ref_w @ v
        assert torch.allclose(w, ref_w, atol=1e-12)
    else:
        grid = torch.zeros(2, 3, 8, 8, dtype=DT)
        for r in range(8):
            for c in range(8):
                grid[:, :, r, c] = x[:, 8 * r + c]
        out = F.conv2d(grid, model.conv.weight, model.conv.bias, padding=1)  # (2, 3, 8, 8)
        o = torch.stack([out[:, :, r, c] for r in range(8) for c in range(8)], 1)  # (2, 64, 3)
        assert w is None
    ref = torch.relu(o).mean(1) @ model.out.weight.T + model.out.bias  # (2, 10)
    assert torch.allclose(logits, ref, atol=1e-12)


def test_pixel_classifier_names_bad_arguments():
    with pytest.raises(ValueError,
                       match=r"^mixer must be one of \('attention', 'convolution'\), got 'lstm'$"):
        C.PixelClassifier("lstm")
    model = C.PixelClassifier("convolution", d=2)
    for bad, shown in ((torch.rand(2, 8, 9), r"\(2, 8, 9\)"), (torch.rand(2, 9, 8), r"\(2, 9, 8\)"),
                       (torch.rand(1, 1, 8, 8), r"\(1, 1, 8, 8\)"),
                       (torch.rand(64), r"\(64,\)"), ([[0.0] * 8] * 8, "list")):
        with pytest.raises(ValueError, match=rf"^img must have shape \(B, 8, 8\), got {shown}$"):
            model(bad)


def test_train_pixel_classifier_matches_a_hand_written_adam_loop():
    torch.manual_seed(18)
    images, labels = torch.rand(6, 8, 8), torch.tensor([0, 1, 2, 3, 4, 5])
    train_idx = torch.tensor([0, 2, 3, 5])
    model = C.PixelClassifier("convolution", d=2)
    ref = copy.deepcopy(model)
    losses = C.train_pixel_classifier(model, images, labels, train_idx, seed=3, steps=3,
                                      batch=5, lr=0.05)
    # the same batches (with replacement, from a generator seeded with the seed) and Adam
    # written out: m, v with bias correction, beta = (0.9, 0.999), eps = 1e-8
    gen = torch.Generator().manual_seed(3)
    params = list(ref.parameters())
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    ref_losses = []
    for t in range(1, 4):
        idx = train_idx[torch.randint(4, (5,), generator=gen)]
        loss = F.cross_entropy(ref(images[idx])[0], labels[idx])
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for p, g, m_p, v_p in zip(params, grads, m, v, strict=True):
                m_p.mul_(0.9).add_(0.1 * g)
                v_p.mul_(0.999).add_(0.001 * g * g)
                m_hat, v_hat = m_p / (1 - 0.9**t), v_p / (1 - 0.999**t)
                p.sub_(0.05 * m_hat / (v_hat.sqrt() + 1e-8))
        ref_losses.append(float(loss.detach()))
    assert losses == pytest.approx(ref_losses, abs=1e-6)
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_train_pixel_classifier_defaults_and_bad_shapes():
    params = inspect.signature(C.train_pixel_classifier).parameters
    assert {name: params[name].default for name in ("steps", "batch", "lr")} == {
        "steps": 300, "batch": 128, "lr": 1e-2}
    model = C.PixelClassifier("convolution", d=2)
    with pytest.raises(ValueError, match=r"^images \(N, 8, 8\) and labels \(N,\) expected, "
                                         r"got \(3, 64\) and \(3,\)$"):
        C.train_pixel_classifier(model, torch.rand(3, 64), torch.arange(3), torch.arange(3),
                                 seed=0)
    with pytest.raises(ValueError, match=r"^images \(N, 8, 8\) and labels \(N,\) expected, "
                                         r"got \(3, 8, 8\) and \(4,\)$"):
        C.train_pixel_classifier(model, torch.rand(3, 8, 8), torch.arange(4), torch.arange(3),
                                 seed=0)


class _TinyClassifier(torch.nn.Module):
    """A cheap stand-in for PixelClassifier: a linear map of the 64 pixels to 10 logits."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(64, 10)

    def forward(self, img):
        return self.lin(img.reshape(-1, 64)), None


def test_train_pixel_classifier_default_steps_batch_and_lr():
    # mutmut's trampoline reports the original signature, so the defaults are also checked
    # by behaviour: a default run against explicit ones, with a model cheap enough for 300 steps
    torch.manual_seed(19)
    images, labels = torch.rand(6, 8, 8), torch.arange(6)
    model = _TinyClassifier()
    one_step = [copy.deepcopy(model) for _ in range(3)]
    losses = C.train_pixel_classifier(copy.deepcopy(model), images, labels, torch.arange(6),
                                      seed=1)
    assert len(losses) == 300
    # the first batch of 128 draws: the same loss as an explicit batch = 128 step
    first = C.train_pixel_classifier(one_step[0], images, labels, torch.arange(6), seed=1,
                                     steps=1, batch=128, lr=1e-2)
    assert losses[0] == first[0]
    default_lr = C.train_pixel_classifier(one_step[1], images, labels, torch.arange(6), seed=1,
                                          steps=1, batch=128)
    assert default_lr == first
    for p, q in zip(one_step[0].parameters(), one_step[1].parameters(), strict=True):
        assert torch.equal(p, q)
    # and the step is Adam's first step with lr = 1e-2: every weight with a gradient moves
    # by lr (to within eps / |g|)
    C.train_pixel_classifier(one_step[2], images, labels, torch.arange(6), seed=1, steps=1,
                             batch=128, lr=1e-2)
    move = (one_step[2].lin.weight - model.lin.weight).detach().abs()
    assert float(move.max()) == pytest.approx(1e-2, rel=1e-3)


def test_path_length_defaults_leave_the_same_state_as_explicit_values():
    # d and seed choose the random weights; the answer is structural, but the global
    # generator is left where the default weights left it
    assert C.path_length("convolution", 6) == 3
    after_default = torch.rand(4)
    assert C.path_length("convolution", 6, d=4, k=3, r=3, max_layers=64, seed=0) == 3
    assert torch.equal(torch.rand(4), after_default)


# --- centred windows, the LSTM layer, more product nodes, checked arguments (issue 19) ------


@pytest.mark.parametrize("r", [1, 3, 5, 9])
def test_centred_restricted_matches_dense_attention_with_a_symmetric_band(r):
    torch.manual_seed(2)
    layer = C.RestrictedSelfAttentionLayer(5, r, centred=True).double()
    x = _x(3, 8, 5)
    q, k, v = (x @ p.weight.T for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    mask = band_mask(8, (r + 1) // 2)  # (n, n): |i - j| <= (r - 1) / 2
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(layer(x), ref, atol=1e-12)
    # weights (B, n, r): column t of row i is key i - (r - 1) / 2 + t, 0 outside the sequence
    w = layer.weights(x)
    dense = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(5)).masked_fill(
        ~mask, float("-inf")), -1)  # (B, n, n)
    half = (r - 1) // 2
    for i in range(8):
        for t in range(r):
            j = i - half + t
            expected = dense[:, i, j] if 0 <= j < 8 else torch.zeros(3, dtype=DT)
            assert torch.allclose(w[:, i, t], expected, atol=1e-12)


@pytest.mark.parametrize(("k", "dilation"), [(1, 1), (3, 1), (5, 1), (3, 2)])
def test_centred_conv_matches_conv1d_with_same_padding(k, dilation):
    torch.manual_seed(3)
    layer = C.ConvLayer(4, k, dilation=dilation, centred=True).double()
    ref = nn.Conv1d(4, 4, k, dilation=dilation, padding=(k - 1) // 2 * dilation).double()
    ref.load_state_dict(layer.conv.state_dict())
    x = _x(2, 9, 4)
    assert torch.allclose(layer(x), ref(x.transpose(1, 2)).transpose(1, 2), atol=1e-12)
    assert layer.centred and not C.ConvLayer(4, k, dilation=dilation).centred


@pytest.mark.parametrize("n", [2, 5, 16, 33])
@pytest.mark.parametrize("k", [3, 5])
def test_centred_path_lengths_follow_their_formulas(n, k):
    half = (k - 1) // 2  # positions a centred window reaches on each side
    assert C.path_length("convolution", n, k=k, centred=True) == math.ceil((n - 1) / half)
    assert C.path_length("restricted", n, r=k, centred=True) == math.ceil((n - 1) / half)


def test_a_centred_dilated_stack_is_refused_since_it_leaves_pairs_unconnected():
    with pytest.raises(ValueError, match=r"^only \('convolution', 'restricted'\) have a "
                                         r"window to centre, got kind 'dilated convolution'$"):
        C.make_stack("dilated convolution", 2, 3, centred=True)
    # why: dilations 1, 3, 9, 27 centred, as a ConvLayer stack; input 0 never reaches
    # output 15 of 16 (the one way, -3 at the second layer, leaves the sequence)
    torch.manual_seed(0)
    stack = torch.nn.Sequential(*(C.ConvLayer(2, 3, dilation=3**layer, centred=True)
                                  for layer in range(4))).double()
    x = _x(1, 16, 2).requires_grad_(True)
    stack(x)[:, 15].sum().backward()
    assert bool((x.grad[:, 0] == 0).all())
    assert bool((x.grad[:, 15] != 0).any())  # the gradient itself is not zero


def test_centred_windows_see_both_ways_and_causal_ones_only_back():
    x = _x(1, 9, 2)
    for centred in (False, True):
        for kind in ("convolution", "restricted"):
            torch.manual_seed(5)
            stack = C.make_stack(kind, 8, 2, centred=centred).double()
            z = x.clone().requires_grad_(True)
            stack(z)[:, 0].sum().backward()  # output 0 from input 8
            assert bool((z.grad[:, -1] != 0).any()) is centred, (kind, centred)


def test_centred_windows_are_checked():
    with pytest.raises(ValueError, match=r"^a centred window needs an odd r, got r = 4$"):
        C.RestrictedSelfAttentionLayer(3, 4, centred=True)
    with pytest.raises(ValueError, match=r"^a centred window needs an odd k, got k = 2$"):
        C.ConvLayer(3, 2, centred=True)
    with pytest.raises(TypeError, match=r"^centred must be a bool, got int$"):
        C.ConvLayer(3, 3, centred=1)
    with pytest.raises(TypeError, match=r"^centred must be a bool, got str$"):
        C.RestrictedSelfAttentionLayer(3, 3, centred="yes")
    C.RestrictedSelfAttentionLayer(3, 4)  # an even causal window is fine
    for kind in ("self-attention", "recurrent"):
        with pytest.raises(ValueError, match=r"^only \('convolution', 'restricted'\) have a "
                                             rf"window to centre, got kind '{kind}'$"):
            C.make_stack(kind, 1, 2, centred=True)
    with pytest.raises(TypeError, match=r"^centred must be a bool, got NoneType$"):
        C.make_stack("convolution", 1, 2, centred=None)
    # path_length refuses before it builds a stack: an even window, a kind without one
    with pytest.raises(ValueError, match=r"^a centred window needs an odd k, got k = 4$"):
        C.path_length("convolution", 5, k=4, centred=True)
    with pytest.raises(ValueError, match=r"^a centred window needs an odd r, got r = 2$"):
        C.path_length("restricted", 5, r=2, centred=True)
    with pytest.raises(ValueError, match=r"have a window to centre, got kind 'recurrent'$"):
        C.path_length("recurrent", 5, centred=True)
    assert [m.centred for m in C.make_stack("convolution", 2, 2, centred=True)] == [
        True, True]
    assert C.make_stack("restricted", 1, 2, r=5, centred=True)[0].before == 2


def test_path_length_names_its_bad_arguments_before_any_work(monkeypatch):
    monkeypatch.setattr(C, "make_stack", lambda *a, **k: pytest.fail("a stack was built"))
    with pytest.raises(ValueError, match=r"^kind must be one of \('self-attention', .*"
                                         r"got 'lstm'$"):
        C.path_length("lstm", 5)
    with pytest.raises(ValueError, match=r"^k must be at least 2, got 1$"):
        C.path_length("convolution", 5, k=1)
    with pytest.raises(ValueError, match=r"^r must be at least 2, got 1$"):
        C.path_length("restricted", 5, r=1)
    with pytest.raises(TypeError, match=r"^d must be an int, got float$"):
        C.path_length("convolution", 5, d=2.5)
    with pytest.raises(ValueError, match=r"^d must be at least 1, got -1$"):
        C.path_length("convolution", 5, d=-1)
    with pytest.raises(TypeError, match=r"^seed must be an int, got str$"):
        C.path_length("convolution", 5, seed="0")


def _lstm_reference(layer: C.LSTMLayer) -> nn.LSTM:
    """torch.nn.LSTM with the layer's weights: W_x, W_h as they are, the bias as bias_ih."""
    ref = nn.LSTM(layer.d, layer.d, batch_first=True).double()
    with torch.no_grad():
        ref.weight_ih_l0.copy_(layer.x_proj.weight)
        ref.weight_hh_l0.copy_(layer.h_proj.weight)
        ref.bias_ih_l0.copy_(layer.x_proj.bias)
        ref.bias_hh_l0.zero_()
    return ref


@pytest.mark.parametrize("forget_bias", [0.0, 5.0, -2])
def test_lstm_layer_matches_torch_lstm(forget_bias):
    torch.manual_seed(6)
    layer = C.LSTMLayer(4, forget_bias=forget_bias).double()
    x = _x(3, 7, 4)
    assert torch.allclose(layer(x), _lstm_reference(layer)(x)[0], atol=1e-12)
    bias = layer.x_proj.bias.detach()
    assert torch.equal(bias[4:8], torch.full((4,), float(forget_bias), dtype=DT))
    # the other weights start as nn.LSTM's: uniform in [-1/sqrt(d), 1/sqrt(d)] = [-0.5, 0.5]
    rest = torch.cat([layer.x_proj.weight.flatten(), layer.h_proj.weight.flatten(),
                      bias[:4], bias[8:]]).detach()
    assert float(rest.abs().max()) <= 0.5 and float(rest.std()) > 0.2


def test_lstm_layer_default_forget_bias_is_zero_and_gates_are_in_pytorch_order():
    torch.manual_seed(7)
    default = C.LSTMLayer(3)
    torch.manual_seed(7)
    explicit = C.LSTMLayer(3, forget_bias=0.0)
    assert all(torch.equal(p, q) for p, q in zip(default.parameters(), explicit.parameters(),
                                                 strict=True))
    assert torch.equal(default.x_proj.bias[3:6].detach(), torch.zeros(3))
    # by hand, one position, d = 1: gates [i, f, g, o] = [0, 0, 1, 0] -> c = tanh(1) / 2
    one = C.LSTMLayer(1).double()
    with torch.no_grad():
        one.x_proj.weight.zero_()
        one.h_proj.weight.zero_()
        one.x_proj.bias.copy_(torch.tensor([0.0, 0.0, 1.0, 0.0]))
    c = math.tanh(1.0) / 2
    assert float(one(torch.zeros(1, 1, 1, dtype=DT)).detach()) == pytest.approx(math.tanh(c) / 2,
                                                                       abs=1e-15)


def test_lstm_layer_flops_by_formula_and_by_counter():
    layer = C.LSTMLayer(5).to("meta")
    counts = C.analytic_flops(layer, 7, batch=2)
    assert counts == {"mixing": 2 * 2 * 7 * 5 * 20, "position-wise": 2 * 2 * 7 * 5 * 20}
    assert C.measured_flops(layer, torch.empty(2, 7, 5, device="meta")) == counts
    # 16 n d^2 in all, exercise 1's count
    assert sum(C.analytic_flops(C.LSTMLayer(4), 3).values()) == 16 * 3 * 4 * 4


def test_lstm_layer_names_bad_arguments():
    with pytest.raises(TypeError, match=r"^forget_bias must be a float, got str$"):
        C.LSTMLayer(3, forget_bias="5")
    with pytest.raises(TypeError, match=r"^forget_bias must be a float, got bool$"):
        C.LSTMLayer(3, forget_bias=True)
    with pytest.raises(ValueError, match=r"^forget_bias must be finite, got inf$"):
        C.LSTMLayer(3, forget_bias=float("inf"))


def test_longest_matmul_chain_counts_every_kind_of_product():
    torch.manual_seed(8)
    w = torch.randn(3, 3, requires_grad=True)
    b = torch.randn(3)
    h = torch.randn(3)
    for _ in range(16):  # a serial loop of matrix-vector products
        h = torch.tanh(w @ h)
    assert C.longest_matmul_chain(h) == 16
    h = torch.randn(3)
    for _ in range(5):
        h = torch.addmv(b, w, h)
    assert C.longest_matmul_chain(h) == 5
    m = torch.randn(2, 3, 3, requires_grad=True)
    y = torch.randn(2, 3, 3)
    for _ in range(5):  # batched products with an added term
        y = torch.baddbmm(y, m, y)
    assert C.longest_matmul_chain(y) == 5
    z = torch.addbmm(torch.zeros(3, 3), m, m)  # a sum of batched products
    assert C.longest_matmul_chain(torch.dot(z[0], z[1])) == 2
    assert C.longest_matmul_chain(torch.vdot(w[0], w[1])) == 1
    assert C.longest_matmul_chain((w * 2).sum()) == 0  # no product at all


def test_longest_matmul_chain_measures_the_code_s_order_not_the_shortest_schedule():
    torch.manual_seed(9)
    x = torch.randn(1, 6, 3)
    # torch.nn.LSTM runs as one fused node: no product is seen
    assert C.longest_matmul_chain(nn.LSTM(3, 3, batch_first=True)(x)[0]) == 0
    # the same gates written out: an input product, then one hidden product per position
    assert C.longest_matmul_chain(C.LSTMLayer(3)(x)) == 6
    # three recurrent layers: 3 n in code order (a wavefront schedule needs n + 2 steps)
    assert C.longest_matmul_chain(C.make_stack("recurrent", 3, 3)(x)) == 18


def test_train_pixel_classifier_names_bad_training_indices():
    model = C.PixelClassifier("convolution", d=1)
    images, labels = torch.rand(3, 8, 8), torch.arange(3)
    with pytest.raises(ValueError, match=r"^train_idx must hold at least one image index, "
                                         r"got none$"):
        C.train_pixel_classifier(model, images, labels, torch.arange(0), seed=0, steps=1)
    with pytest.raises(TypeError, match=r"^train_idx must be a 1-D int64 tensor of image "
                                        r"indices, got torch.float32 of shape \(3,\)$"):
        C.train_pixel_classifier(model, images, labels, torch.zeros(3), seed=0, steps=1)
    with pytest.raises(TypeError, match=r"^train_idx must be a 1-D int64 tensor of image "
                                        r"indices, got torch.int64 of shape \(1, 3\)$"):
        C.train_pixel_classifier(model, images, labels, torch.arange(3)[None], seed=0,
                                 steps=1)
    with pytest.raises(TypeError, match=r"^train_idx must be a 1-D int64 tensor of image "
                                        r"indices, got list$"):
        C.train_pixel_classifier(model, images, labels, [0, 1], seed=0, steps=1)


def test_longest_matmul_chain_names_a_non_tensor_and_misses_what_is_no_product():
    with pytest.raises(TypeError, match=r"^output must be a tensor, got list$"):
        C.longest_matmul_chain([1.0])
    a = torch.randn(3, 3, requires_grad=True)
    # a product written as an elementwise multiply and a sum is not seen
    assert C.longest_matmul_chain((a.unsqueeze(-1) * a.unsqueeze(0)).sum(1)) == 0
    # a residual path through no product, beside one product: the longer path counts
    assert C.longest_matmul_chain(a + a @ a) == 1
    # the same weight used twice in a row counts twice
    assert C.longest_matmul_chain(a @ a @ a) == 2


_DIGITS = SAVED_DIR / "ch07_digits.json"


@pytest.mark.skipif(not _DIGITS.exists(), reason="the book's data are not in this copy")
def test_saved_digits_results_cover_every_seed_and_model_of_the_stated_size():
    data = json.loads(_DIGITS.read_text())
    seeds = [str(s) for s in range(16)]
    assert [str(s) for s in data["seeds"]] == seeds
    # every model and the forest on every seed, in order; accuracies are shares of n_test
    for per_seed in (*data["runs"].values(), data["baselines"]["sorted forest"]):
        assert list(per_seed) == seeds
    for per_seed in data["runs"].values():
        for run in per_seed.values():
            assert (run["acc"] * data["n_test"]) == pytest.approx(
                round(run["acc"] * data["n_test"]), abs=1e-4)
            assert len(run["first_losses"]) == data["live_steps"]
    models = {"attention": ("attention", 16, True), "convolution": ("convolution", 16, True),
              "attention without position": ("attention", 16, False),
              "attention, d = 24": ("attention", 24, True),
              "convolution, d = 11": ("convolution", 11, True)}
    assert set(data["runs"]) == set(models) == set(data["params"])
    for name, (mixer, d, position) in models.items():
        model = C.PixelClassifier(mixer, d=d, position=position)
        assert data["params"][name] == count_parameters(model), name


def test_a_centred_window_is_checked_on_the_kind_s_own_width():
    # restricted attention centres r, the convolution k: the other width may be even
    C.make_stack("restricted", 1, 2, k=4, r=3, centred=True)
    C.make_stack("convolution", 1, 2, k=3, r=4, centred=True)
    with pytest.raises(ValueError, match=r"^a centred window needs an odd r, got r = 4$"):
        C.make_stack("restricted", 1, 2, k=3, r=4, centred=True)
    with pytest.raises(ValueError, match=r"^a centred window needs an odd k, got k = 4$"):
        C.make_stack("convolution", 1, 2, k=4, r=3, centred=True)
    with pytest.raises(TypeError, match=r"^centred must be a bool, got int$"):
        C.make_stack("convolution", 1, 2, centred=1)
