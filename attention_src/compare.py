"""Self-attention against recurrence and convolution: layers, counters and path lengths (chapter 7).

Five sequence layers share one interface, ``layer(x) -> y`` with ``x`` and ``y`` of shape
``(B, n, d)``, so that Table 1 of Vaswani et al. (2017) can be measured rather than quoted:

* :class:`SelfAttentionLayer`: every position attends to every position (projections
  ``W_q, W_k, W_v`` of shape ``(d, d)``, scaled dot product, no mask);
* :class:`RestrictedSelfAttentionLayer`: each position ``i`` attends only to the ``r`` keys
  ``i - r + 1 .. i`` (a causal window), computed on the window alone;
* :class:`RecurrentLayer`: ``h_t = tanh(x_t W_x + h_{t-1} W_h + b)``, a loop over positions;
* :class:`ConvLayer`: a causal 1-D convolution with kernel ``k`` and optional dilation.

Four of the five are causal (output ``i`` uses inputs ``<= i``): the recurrent layer, whose
only direction this is, the convolutions and restricted self-attention. Self-attention has no
mask and connects every pair of positions both ways. In a causal stack output ``0`` never
depends on input ``n - 1``, so the path-length measurement asks when output ``n - 1`` first
depends on input ``0``, the one direction in which all five connect.

Counters: :func:`analytic_flops` gives the floating-point operations of one forward pass by
formula, split into ``"mixing"`` (products that carry information between positions: the
attention layers' scores and weighted sums, the recurrent layer's hidden products
``h_{t-1} W_h``, the convolution) and ``"position-wise"`` (products applied to each position
alone: the projections ``W_q, W_k, W_v``, the recurrent layer's input product ``x_t W_x``);
each layer names its position-wise submodules in ``POSITION_WISE``. The counts follow the
conventions of ``torch.utils.flop_counter.FlopCounterMode`` (2 per multiply-add, matrix
products and convolutions only), and :func:`measured_flops` measures the same split with that
counter. The counter computes each product's count from its operands' shapes, so the two agree
when the layer runs the products the formula lists, with the shapes it lists: a check of the
code against the formula, not a measurement of cost. :func:`path_length` stacks layers
until a gradient says the last output depends on the first input; :func:`longest_matmul_chain`
measures the number of sequential matrix products on the way (on output ``n - 1`` of a stack
of just enough layers: the path length in products, ``n`` for a recurrent layer);
:func:`gradient_by_distance` gives ``|d y_{n-1} / d x_j|`` for every ``j``.

For note 004 (section 6), :class:`PixelClassifier` classifies 8x8 images with the pixels as
tokens and one mixing layer (self-attention or a 3x3 convolution), both given the same learned
position embedding; :func:`train_pixel_classifier` trains it with Adam.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

__all__ = [
    "SelfAttentionLayer",
    "RestrictedSelfAttentionLayer",
    "RecurrentLayer",
    "ConvLayer",
    "make_stack",
    "analytic_flops",
    "measured_flops",
    "path_length",
    "longest_matmul_chain",
    "gradient_by_distance",
    "KINDS",
    "PixelClassifier",
    "train_pixel_classifier",
]

KINDS = ("self-attention", "recurrent", "convolution", "dilated convolution", "restricted")


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")


def _check_input(x: torch.Tensor, d: int) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError("x must be a tensor of shape (B, n, d)")
    if x.shape[-1] != d:
        raise ValueError(f"x has width {x.shape[-1]}, the layer expects d = {d}")


class SelfAttentionLayer(nn.Module):
    """Self-attention of width ``d``: ``softmax(X W_q (X W_k)^T / sqrt(d)) X W_v``.

    ``x``: ``(B, n, d)`` -> ``(B, n, d)``. Every output position sees every input position.
    """

    #: submodules that act on each position alone (see :func:`measured_flops`)
    POSITION_WISE = ("q_proj", "k_proj", "v_proj")

    def __init__(self, d: int) -> None:
        super().__init__()
        _check_int("d", d, 1)
        self.d = d
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """The attention weights ``A``: ``(B, n, d)`` -> ``(B, n, n)``."""
        _check_input(x, self.d)
        q, k = self.q_proj(x), self.k_proj(x)  # (B, n, d) each
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d)  # (B, n, n)
        return torch.softmax(scores, dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weights(x) @ self.v_proj(x)  # (B, n, n) @ (B, n, d)


class RestrictedSelfAttentionLayer(nn.Module):
    """Self-attention restricted to a causal window of ``r`` keys: ``i - r + 1 .. i``.

    ``x``: ``(B, n, d)`` -> ``(B, n, d)``. Only the ``n * r`` scores of the windows are
    computed (keys gathered with ``unfold``), so the cost grows like ``r * n * d``, not
    ``n**2 * d``. Keys before position 0 are padding and get weight exactly 0.
    """

    POSITION_WISE = ("q_proj", "k_proj", "v_proj")

    def __init__(self, d: int, r: int) -> None:
        super().__init__()
        _check_int("d", d, 1)
        _check_int("r", r, 1)
        self.d, self.r = d, r
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """Window weights ``(B, n, r)``: column ``t`` of row ``i`` is key ``i - r + 1 + t``."""
        _check_input(x, self.d)
        n, r = x.shape[1], self.r
        q = self.q_proj(x)  # (B, n, d)
        k = F.pad(self.k_proj(x), (0, 0, r - 1, 0))  # (B, n + r - 1, d)
        k_win = k.unfold(1, r, 1)  # (B, n, d, r): the r keys of each query
        # (B, n, 1, d) @ (B, n, d, r): one batched product per query, (B, n, r)
        scores = (q.unsqueeze(-2) @ k_win).squeeze(-2) / math.sqrt(self.d)
        i = torch.arange(n, device=x.device).unsqueeze(1)  # (n, 1)
        t = torch.arange(r, device=x.device).unsqueeze(0)  # (1, r)
        padding = (i - r + 1 + t) < 0  # (n, r): keys before position 0
        return torch.softmax(scores.masked_fill(padding, float("-inf")), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.weights(x)  # (B, n, r)
        v = F.pad(self.v_proj(x), (0, 0, self.r - 1, 0))  # (B, n + r - 1, d)
        v_win = v.unfold(1, self.r, 1)  # (B, n, d, r)
        # (B, n, 1, r) @ (B, n, r, d): each window's weighted sum, (B, n, d)
        return (a.unsqueeze(-2) @ v_win.transpose(-2, -1)).squeeze(-2)


class RecurrentLayer(nn.Module):
    """An Elman recurrent layer: ``h_t = tanh(x_t W_x + h_{t-1} W_h + b)``, ``h_{-1} = 0``.

    ``x``: ``(B, n, d)`` -> the hidden states ``(B, n, d)``. The input products of all
    positions are one matrix product; the ``n`` hidden updates are a loop, each waiting for
    the previous one. ``W_h`` is initialised with spectral norm ``gain`` (default 0.9), so
    that the layer is contracting, as trained tanh networks usually are.
    """

    #: the input product ``x_t W_x``; the hidden product ``h_{t-1} W_h`` mixes positions
    POSITION_WISE = ("x_proj",)

    def __init__(self, d: int, gain: float = 0.9) -> None:
        super().__init__()
        _check_int("d", d, 1)
        if isinstance(gain, bool) or not isinstance(gain, (int, float)):
            raise TypeError(f"gain must be a float, got {type(gain).__name__}")
        if not (math.isfinite(gain) and gain > 0):
            raise ValueError(f"gain must be positive and finite, got {gain}")
        self.d = d
        self.x_proj = nn.Linear(d, d)
        self.h_proj = nn.Linear(d, d, bias=False)
        with torch.no_grad():
            w = self.h_proj.weight
            w.mul_(gain / torch.linalg.matrix_norm(w, ord=2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d)
        u = self.x_proj(x)  # (B, n, d): the input part, all positions at once
        h = u.new_zeros(u.shape[0], self.d)  # (B, d)
        states = []
        for t in range(x.shape[1]):  # serial: step t needs h_{t-1}
            h = torch.tanh(u[:, t] + self.h_proj(h))  # (B, d)
            states.append(h)
        return torch.stack(states, dim=1)  # (B, n, d)


class ConvLayer(nn.Module):
    """A causal 1-D convolution, ``d`` channels in and out, kernel ``k``, dilation ``dilation``.

    ``x``: ``(B, n, d)`` -> ``(B, n, d)``; output ``i`` uses inputs ``i - m * dilation`` for
    ``m = 0 .. k - 1`` (zero padding before position 0).
    """

    #: none: the convolution is one product over all ``k`` taps, the position's own included
    POSITION_WISE = ()

    def __init__(self, d: int, k: int, dilation: int = 1) -> None:
        super().__init__()
        _check_int("d", d, 1)
        _check_int("k", k, 1)
        _check_int("dilation", dilation, 1)
        self.d, self.k, self.dilation = d, k, dilation
        self.conv = nn.Conv1d(d, d, k, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d)
        xc = x.transpose(1, 2)  # (B, d, n): channels first, as Conv1d wants
        xc = F.pad(xc, ((self.k - 1) * self.dilation, 0))  # (B, d, n + pad)
        return self.conv(xc).transpose(1, 2)  # (B, n, d)


def make_stack(kind: str, n_layers: int, d: int, k: int = 3, r: int = 3) -> nn.Sequential:
    """``n_layers`` layers of one kind, ``(B, n, d)`` -> ``(B, n, d)``.

    ``kind`` is one of :data:`KINDS`. The dilated stack uses dilation ``k**l`` in layer
    ``l = 0, 1, ...`` (WaveNet's scheme), so its receptive field is ``k**n_layers``.
    """
    _check_int("n_layers", n_layers, 1)
    makers: dict[str, Callable[[int], nn.Module]] = {
        "self-attention": lambda layer: SelfAttentionLayer(d),
        "recurrent": lambda layer: RecurrentLayer(d),
        "convolution": lambda layer: ConvLayer(d, k),
        "dilated convolution": lambda layer: ConvLayer(d, k, dilation=k**layer),
        "restricted": lambda layer: RestrictedSelfAttentionLayer(d, r),
    }
    if kind not in makers:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    return nn.Sequential(*(makers[kind](layer) for layer in range(n_layers)))


def analytic_flops(layer: nn.Module, n: int, batch: int = 1) -> dict[str, int]:
    """Floating-point operations of ``layer`` on a ``(batch, n, d)`` input, by formula.

    Returns ``{"mixing": ..., "position-wise": ...}``. ``mixing`` counts the products that
    carry information between positions: the scores ``Q K^T`` and the weighted sum ``A V`` of
    the attention layers (``2 * 2 n^2 d``, or ``2 * 2 n r d`` in a window of ``r``), the
    recurrent layer's ``n`` hidden products ``h_{t-1} W_h`` (``2 n d^2``), the convolution's
    ``k`` taps (``2 n k d^2``). ``position-wise`` counts the products applied to each position
    alone: the projections ``W_q, W_k, W_v`` (``3 * 2 n d^2``) and the recurrent layer's input
    product ``x_t W_x`` (``2 n d^2``). Counted as FlopCounterMode counts: 2 operations per
    multiply-add, nothing for softmax, tanh, biases or padding.
    """
    _check_int("n", n, 1)
    _check_int("batch", batch, 1)
    d = getattr(layer, "d", None)
    if isinstance(layer, SelfAttentionLayer):
        return {"mixing": batch * 2 * (2 * n * n * d),
                "position-wise": batch * 3 * 2 * n * d * d}
    if isinstance(layer, RestrictedSelfAttentionLayer):
        return {"mixing": batch * 2 * (2 * n * layer.r * d),
                "position-wise": batch * 3 * 2 * n * d * d}
    if isinstance(layer, RecurrentLayer):  # n hidden products, n input products
        return {"mixing": batch * 2 * n * d * d, "position-wise": batch * 2 * n * d * d}
    if isinstance(layer, ConvLayer):  # every output: k taps of a (d, d) matrix
        return {"mixing": batch * 2 * n * layer.k * d * d, "position-wise": 0}
    raise TypeError(f"no formula for {type(layer).__name__}")


def measured_flops(layer: nn.Module, x: torch.Tensor) -> dict[str, int]:
    """Operations of one forward pass of ``layer`` on ``x`` ``(B, n, d)``, measured with
    ``FlopCounterMode`` and split as :func:`analytic_flops` splits them.

    The products run inside the submodules the layer names in ``POSITION_WISE`` are
    ``"position-wise"``, all others ``"mixing"``. The counter computes each count from the
    operands' shapes: agreement with :func:`analytic_flops` shows that the layer runs the
    products of the formula, with its shapes, not what they cost in time. Raises ``TypeError``
    for a layer without ``POSITION_WISE``.
    """
    names = getattr(layer, "POSITION_WISE", None)
    if names is None:
        raise TypeError(f"{type(layer).__name__} does not name its position-wise submodules "
                        "(POSITION_WISE)")
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        layer(x)
    counts = counter.get_flop_counts()  # {module name: {operator: FLOPs}}, "Global" for all
    # FlopCounterMode names a submodule "<class of the layer>.<attribute>"
    position_wise = sum(sum(counts.get(f"{type(layer).__name__}.{name}", {}).values())
                        for name in names)
    total = counter.get_total_flops()
    return {"mixing": int(total - position_wise), "position-wise": int(position_wise)}


def _depends(stack: nn.Module, x: torch.Tensor) -> bool:
    """True if output ``n - 1`` has a non-zero gradient with respect to input 0."""
    x = x.detach().clone().requires_grad_(True)
    stack(x)[:, -1].sum().backward()
    return bool((x.grad[:, 0] != 0).any())


def path_length(kind: str, n: int, d: int = 4, k: int = 3, r: int = 3, max_layers: int = 64,
                seed: int = 0) -> int:
    """Fewest stacked layers of ``kind`` for which output ``n - 1`` depends on input 0.

    Dependence is read from the gradient (exactly zero outside the receptive field) of a
    stack with random float64 weights (``torch.manual_seed(seed)``). Raises ``RuntimeError``
    if ``max_layers`` layers do not suffice.
    """
    _check_int("n", n, 2)
    _check_int("max_layers", max_layers, 1)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, d, generator=gen, dtype=torch.float64)  # (1, n, d)
    for n_layers in range(1, max_layers + 1):
        torch.manual_seed(seed)
        stack = make_stack(kind, n_layers, d, k=k, r=r).double()
        if _depends(stack, x):
            return n_layers
    raise RuntimeError(f"{kind}: output {n - 1} does not see input 0 after {max_layers} layers")


_MATMUL_NODES = ("MmBackward", "AddmmBackward", "BmmBackward", "ConvolutionBackward")


def longest_matmul_chain(output: torch.Tensor) -> int:
    """The largest number of matrix products (mm, addmm, bmm, convolution) on one path of
    ``output``'s autograd graph: products that must run one after the other.

    ``output`` is any tensor with a ``grad_fn``; the graph is walked iteratively, so a
    recurrent layer of thousands of steps is fine.
    """
    if output.grad_fn is None:
        raise ValueError("output has no grad_fn: compute it with gradients enabled")
    depth: dict = {}
    stack = [(output.grad_fn, False)]
    while stack:
        node, expanded = stack.pop()
        if node in depth:
            continue
        children = [c for c, _ in node.next_functions if c is not None]
        if not expanded:
            stack.append((node, True))
            stack.extend((c, False) for c in children if c not in depth)
            continue
        own = int(any(node.name().startswith(m) for m in _MATMUL_NODES))
        depth[node] = own + max((depth[c] for c in children), default=0)
    return depth[output.grad_fn]


def gradient_by_distance(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``|d y_{n-1} / d x_j|`` (Frobenius norm of the ``(d, d)`` Jacobian block) for every
    input position ``j``, averaged over the batch.

    ``x``: ``(B, n, d)``, ``d`` the layer's width; returns ``(n,)``, entry ``j`` at distance
    ``n - 1 - j``: the mean over the ``B`` sequences of each sequence's norm.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError("x must be a tensor of shape (B, n, d)")
    if x.shape[1] < 1 or x.shape[0] < 1:
        raise ValueError(f"x must hold at least one sequence and position, got {tuple(x.shape)}")
    _check_input(x, getattr(layer, "d", x.shape[-1]))
    x = x.detach().clone().requires_grad_(True)
    y_last = layer(x)[:, -1]  # (B, d)
    rows = []
    for c in range(y_last.shape[-1]):  # one row of the Jacobian per output feature
        (g,) = torch.autograd.grad(y_last[:, c].sum(), x, retain_graph=True)  # (B, n, d)
        rows.append(g)
    jac = torch.stack(rows, dim=-1)  # (B, n, d, d)
    return jac.pow(2).sum((-2, -1)).sqrt().mean(0)  # (n,)


class PixelClassifier(nn.Module):
    """An 8x8 image classifier with the pixels as tokens and one layer that mixes them.

    Each pixel's intensity goes through a linear map to ``d`` features, plus a learned position
    embedding ``(64, d)``; then one mixing layer, a ReLU, the mean over the 64 pixels and a
    linear map to 10 classes. ``mixer="attention"``: one self-attention layer
    (:class:`attention_src.SelfAttention`), whose weights depend on the image;
    ``mixer="convolution"``: one 3x3 convolution, ``d`` channels in and out, zero padding,
    whose weights depend only on the offset. Both get the same position information
    (``position=False`` removes it: the embedding is zero and frozen).

    ``img``: ``(B, 8, 8)`` -> logits ``(B, 10)`` and the attention weights ``(B, 64, 64)``
    (``None`` for the convolution).
    """

    MIXERS = ("attention", "convolution")

    def __init__(self, mixer: str, d: int = 16, position: bool = True) -> None:
        super().__init__()
        if mixer not in self.MIXERS:
            raise ValueError(f"mixer must be one of {self.MIXERS}, got {mixer!r}")
        _check_int("d", d, 1)
        from attention_src.multihead import SelfAttention  # no import cycle at load time

        self.mixer, self.d = mixer, d
        self.embed = nn.Linear(1, d)  # intensity -> d features
        self.pos = nn.Parameter(0.5 * torch.randn(64, d))  # (64, d), one row per pixel
        if not position:  # ablation: no position information at all
            self.pos.data.zero_()
            self.pos.requires_grad_(False)
        if mixer == "attention":
            self.attn = SelfAttention(d, d, d)
        else:
            self.conv = nn.Conv2d(d, d, 3, padding=1)
        self.out = nn.Linear(d, 10)

    def forward(self, img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not isinstance(img, torch.Tensor) or img.dim() != 3 or img.shape[1:] != (8, 8):
            shape = tuple(img.shape) if isinstance(img, torch.Tensor) else type(img).__name__
            raise ValueError(f"img must have shape (B, 8, 8), got {shape}")
        x = self.embed(img.reshape(-1, 64, 1)) + self.pos  # (B, 64, d)
        if self.mixer == "attention":
            o, w = self.attn(x)  # (B, 64, d), weights (B, 64, 64)
        else:
            grid = x.transpose(1, 2).reshape(-1, self.d, 8, 8)  # (B, d, 8, 8)
            o = self.conv(grid).reshape(-1, self.d, 64).transpose(1, 2)  # (B, 64, d)
            w = None
        return self.out(torch.relu(o).mean(1)), w


def train_pixel_classifier(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
                           train_idx: torch.Tensor, seed: int, steps: int = 300,
                           batch: int = 128, lr: float = 1e-2) -> list[float]:
    """Train ``model`` with Adam on batches of ``batch`` images drawn (with replacement, from a
    generator seeded with ``seed``) from ``train_idx``; returns the loss of every step.

    ``images``: ``(N, 8, 8)``; ``labels``: ``(N,)`` integers in 0..9; ``train_idx``: ``(N_train,)``.
    """
    _check_int("steps", steps, 1)
    _check_int("batch", batch, 1)
    if images.dim() != 3 or labels.shape != images.shape[:1]:
        raise ValueError(f"images (N, 8, 8) and labels (N,) expected, got "
                         f"{tuple(images.shape)} and {tuple(labels.shape)}")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        idx = train_idx[torch.randint(len(train_idx), (batch,), generator=gen)]  # (batch,)
        loss = F.cross_entropy(model(images[idx])[0], labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses
