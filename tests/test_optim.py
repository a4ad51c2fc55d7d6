"""attention_src.optim against PyTorch's own: Adam's parameters after every step and the cosine
decay's rates, bit for bit; the hand-worked first Adam step; bad input."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attention_src.optim import Adam, CosineAnnealingLR


def _pair(dtype=torch.float32):
    """Two copies of a small network with an unused-at-times branch."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(dtype)
    extra = nn.Linear(5, 3).to(dtype)
    ours = (net, extra)
    torch.manual_seed(0)
    ref = (nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).to(dtype),
           nn.Linear(5, 3).to(dtype))
    for a, b in zip(ours, ref, strict=True):
        b.load_state_dict(a.state_dict())
    return ours, ref


def _params(pair):
    return [p for module in pair for p in module.parameters()]


def _loss(pair, x, step):
    net, extra = pair
    out = net(x)
    if step % 3 != 1:  # every third step the extra branch gets no gradient at all
        out = out + extra(x)
    return (out ** 2).mean() + out.sin().sum()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kwargs", [
    {},
    {"lr": 0.02, "betas": (0.9, 0.98), "eps": 1e-9},
    {"lr": 0.01, "weight_decay": 5e-4},
    {"lr": 0.05, "betas": (0.0, 0.5), "eps": 0.0},
])
def test_adam_equals_torch_adam_bit_for_bit(dtype, kwargs):
    """40 steps on the same gradients, with a branch that has no gradient every third step
    (its step count must not advance) and the learning rate changed between steps: the
    parameters equal ``torch.optim.Adam``'s exactly after every step."""
    ours, ref = _pair(dtype)
    opt = Adam(_params(ours), **kwargs)
    ref_opt = torch.optim.Adam(_params(ref), **kwargs)
    gen = torch.Generator().manual_seed(1)
    base = kwargs.get("lr", 1e-3)
    for step in range(40):
        x = torch.randn(8, 5, generator=gen, dtype=dtype)
        rate = base * (0.5 + 0.5 * math.cos(step / 7))
        opt.lr = rate
        for group in ref_opt.param_groups:
            group["lr"] = rate
        for pair, optimizer in ((ours, opt), (ref, ref_opt)):
            optimizer.zero_grad()
            _loss(pair, x, step).backward()
            optimizer.step()
        for p, q in zip(_params(ours), _params(ref), strict=True):
            assert torch.equal(p, q), (step, p.shape)
    assert any(not torch.equal(p, q) for p, q in
               zip(_params(ours), _params(_pair(dtype)[0]), strict=True))  # they did move


def test_adam_first_step_by_hand():
    """After one step m = (1 - b1) g and v = (1 - b2) g^2, so the bias-corrected ratio is
    g / |g| and every weight moves by lr * |g| / (|g| + eps) against its gradient's sign."""
    p = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64, requires_grad=True)
    opt = Adam([p], lr=0.1, eps=1e-8)
    p.grad = torch.tensor([4.0, -0.25, 0.0], dtype=torch.float64)
    opt.step()
    g = torch.tensor([4.0, -0.25, 0.0], dtype=torch.float64)
    want = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) - 0.1 * g / (g.abs() + 1e-8)
    torch.testing.assert_close(p.detach(), want, rtol=0, atol=1e-15)


def test_zero_grad_forgets_and_a_parameter_without_gradient_is_left_alone():
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(2, requires_grad=True)
    opt = Adam([a, b], lr=0.1)
    a.grad = torch.ones(2)
    opt.step()
    assert torch.equal(b, torch.ones(2)) and opt.state[1] is None
    assert not torch.equal(a, torch.ones(2))
    opt.zero_grad()
    assert a.grad is None and b.grad is None


@pytest.mark.parametrize("t_max", [1, 7, 400])
def test_cosine_annealing_equals_torchs_rates_bit_for_bit(t_max):
    """Past t_max too (PyTorch's rate rises again there), for 2 t_max + 3 steps."""
    p = torch.zeros(1, requires_grad=True)
    q = torch.zeros(1, requires_grad=True)
    opt, ref_opt = Adam([p], lr=0.01), torch.optim.SGD([q], lr=0.01)
    sched = CosineAnnealingLR(opt, t_max)
    ref = torch.optim.lr_scheduler.CosineAnnealingLR(ref_opt, t_max)
    for _ in range(2 * t_max + 3):
        ref_opt.step()
        ref.step()
        sched.step()
        assert opt.lr == ref_opt.param_groups[0]["lr"]


def test_cosine_annealing_follows_half_a_cosine():
    p = torch.zeros(1, requires_grad=True)
    opt = Adam([p], lr=0.4)
    sched = CosineAnnealingLR(opt, 4)
    rates = []
    for _ in range(4):
        sched.step()
        rates.append(opt.lr)
    want = [0.4 * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(1, 5)]
    assert rates == pytest.approx(want, abs=1e-15)


def test_bad_input_is_named():
    p = torch.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="empty"):
        Adam([])
    with pytest.raises(TypeError, match=r"params\[0\].*list"):
        Adam([[1.0]])
    with pytest.raises(ValueError, match=r"params\[0\] \(shape \(3,\)\) is not a leaf"):
        Adam([torch.zeros(3, requires_grad=True) * 2])
    with pytest.raises(TypeError, match=r"params\[0\] is complex"):
        Adam([torch.zeros(2, dtype=torch.complex64, requires_grad=True)])
    with pytest.raises(ValueError, match=r"params\[1\] is params\[0\] again"):
        Adam([p, p])
    with pytest.raises(ValueError, match="lr must be a finite number >= 0, got -0.1"):
        Adam([p], lr=-0.1)
    with pytest.raises(ValueError, match=r"betas\[1\].*below 1, got 1.0"):
        Adam([p], betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="betas must be a pair"):
        Adam([p], betas=0.9)
    with pytest.raises(TypeError, match="eps must be a real number, got str"):
        Adam([p], eps="1e-8")
    with pytest.raises(ValueError, match="weight_decay.*nan"):
        Adam([p], weight_decay=float("nan"))
    with pytest.raises(TypeError, match="optimizer must be an attention_src.optim.Adam"):
        CosineAnnealingLR(torch.optim.SGD([p], lr=0.1), 5)
    with pytest.raises(ValueError, match="t_max must be a positive int, got 0"):
        CosineAnnealingLR(Adam([p]), 0)


def test_importing_it_leaves_the_compiler_stack_unimported():
    """The reason this module exists: torch.optim's first optimizer imports torch._dynamo."""
    import subprocess
    import sys

    code = ("import sys, torch; from attention_src.optim import Adam; "
            "p = torch.zeros(2, requires_grad=True); o = Adam([p]); p.sum().backward(); "
            "o.step(); o.zero_grad(); "
            "assert 'torch._dynamo' not in sys.modules and 'sympy' not in sys.modules")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_a_frozen_parameter_is_accepted_and_left_alone():
    """As torch.optim.Adam: chapter 7's model without positions has a frozen position table,
    and train_pixel_classifier hands every parameter to Adam."""
    from attention_src.compare import PixelClassifier, train_pixel_classifier

    torch.manual_seed(0)
    model = PixelClassifier("attention", d=8, position=False)
    frozen = [p.detach().clone() for p in model.parameters() if not p.requires_grad]
    assert frozen  # the position table
    images = torch.rand(40, 8, 8, generator=torch.Generator().manual_seed(1))
    labels = torch.arange(40) % 10
    losses = train_pixel_classifier(model, images, labels, torch.arange(40), seed=0,
                                    steps=2, batch=8)
    assert len(losses) == 2
    after = [p for p in model.parameters() if not p.requires_grad]
    assert all(torch.equal(a, b) for a, b in zip(frozen, after, strict=True))
