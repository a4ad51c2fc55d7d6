"""Tests of attention_src.compare (chapter 7): each layer against an independent reference,
the analytic FLOP counts against FlopCounterMode, and path lengths against their formulas."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_src import compare as C
from attention_src.softmax import band_mask

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
                                                            "linear": 3 * 2 * 16}
    assert C.analytic_flops(C.ConvLayer(2, 3), 5) == {"mixing": 0, "linear": 2 * 5 * 3 * 4}


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


@pytest.mark.parametrize("n", [1, 7, 30])
def test_longest_matmul_chain(n):
    x = _x(1, n, 3)
    torch.manual_seed(0)
    assert C.longest_matmul_chain(C.RecurrentLayer(3).double()(x)) == n
    assert C.longest_matmul_chain(C.SelfAttentionLayer(3).double()(x)) == 3
    assert C.longest_matmul_chain(C.ConvLayer(3, 3).double()(x)) == 1
    with pytest.raises(ValueError, match="no grad_fn"):
        C.longest_matmul_chain(x)


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
