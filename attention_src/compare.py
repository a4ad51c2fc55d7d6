"""Self-attention against recurrence and convolution: layers, counters and path lengths (chapter 7).

Five sequence layers share one interface, ``layer(x) -> y`` with ``x`` and ``y`` of shape
``(B, n, d)``, so that Table 1 of Vaswani et al. (2017) can be measured rather than quoted:

* :class:`SelfAttentionLayer`: every position attends to every position (projections
  ``W_q, W_k, W_v`` of shape ``(d, d)``, scaled dot product, no mask);
* :class:`RestrictedSelfAttentionLayer`: each position ``i`` attends only to the ``r`` keys
  ``i - r + 1 .. i`` (a causal window), computed on the window alone; ``centred=True`` puts
  the window around ``i`` instead, ``i - (r - 1) / 2 .. i + (r - 1) / 2``, as the paper's;
* :class:`RecurrentLayer`: ``h_t = tanh(x_t W_x + h_{t-1} W_h + b)``, a loop over positions;
* :class:`ConvLayer`: a causal 1-D convolution with kernel ``k`` and optional dilation
  (``centred=True``: the taps around ``i``, "same" padding).

A sixth, :class:`LSTMLayer`, the gated recurrent layer, is written out gate by gate beside
them (equal to ``torch.nn.LSTM``), so that its products can be counted and its gradient
measured like the others'.

Four of the five are causal (output ``i`` uses inputs ``<= i``) unless centred: the recurrent
layer, whose only direction this is, the convolutions and restricted self-attention.
Self-attention has no mask and connects every pair of positions both ways. In a causal stack
output ``0`` never depends on input ``n - 1``, so the path-length measurement asks when output
``n - 1`` first depends on input ``0``, the one direction in which all five connect.

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
measures the number of matrix products on the longest path of the autograd graph (on output
``n - 1`` of a stack of just enough layers: the path length in products, ``n`` for a recurrent
layer), which counts the products as the code orders them;
:func:`gradient_by_distance` gives ``|d y_{n-1} / d x_j|`` for every ``j``.

For note 004 (section 6), :class:`PixelClassifier` classifies 8x8 images with the pixels as
tokens and one mixing layer (self-attention or a 3x3 convolution), both given the same learned
position embedding; :func:`train_pixel_classifier` trains it with Adam.

Every layer and model here takes ``device=`` and ``dtype=`` keywords: its weights are drawn on
the CPU as without them and then moved (:func:`attention_src.utils.place`), so a seed gives the
same weights on every device.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from attention_src.optim import Adam
from attention_src.utils import module_device, place
from attention_src.validation import check_device

__all__ = [
    "SelfAttentionLayer",
    "RestrictedSelfAttentionLayer",
    "RecurrentLayer",
    "ConvLayer",
    "LSTMLayer",
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
    if x.shape[1] < 1:
        raise ValueError(f"x must hold at least one position, got shape {tuple(x.shape)}")


def _check_centred(centred: object, width_name: str, width: int) -> None:
    """A centred window needs an odd width: ``(width - 1) / 2`` positions on each side."""
    if not isinstance(centred, bool):
        raise TypeError(f"centred must be a bool, got {type(centred).__name__}")
    if centred and width % 2 == 0:
        raise ValueError(f"a centred window needs an odd {width_name}, got {width_name} = {width}")


class SelfAttentionLayer(nn.Module):
    """Self-attention of width ``d``: ``softmax(X W_q (X W_k)^T / sqrt(d)) X W_v``.

    ``x``: ``(B, n, d)`` -> ``(B, n, d)``. Every output position sees every input position.
    """

    #: submodules that act on each position alone (see :func:`measured_flops`)
    POSITION_WISE = ("q_proj", "k_proj", "v_proj")

    def __init__(self, d: int, *,
                 device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        _check_int("d", d, 1)
        self.d = d
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        place(self, device, dtype)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """The attention weights ``A``: ``(B, n, d)`` -> ``(B, n, n)``."""
        _check_input(x, self.d)
        q, k = self.q_proj(x), self.k_proj(x)  # (B, n, d) each
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d)  # (B, n, n)
        return torch.softmax(scores, dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weights(x) @ self.v_proj(x)  # (B, n, n) @ (B, n, d)


class RestrictedSelfAttentionLayer(nn.Module):
    """Self-attention restricted to a window of ``r`` keys: ``i - r + 1 .. i`` (causal), or
    ``i - (r - 1) / 2 .. i + (r - 1) / 2`` with ``centred=True`` (``r`` odd), the window
    "centered around the respective output position" of Vaswani et al. (2017).

    ``x``: ``(B, n, d)`` -> ``(B, n, d)``. Only the ``n * r`` scores of the windows are
    computed (keys gathered with ``unfold``), so the cost grows like ``r * n * d``, not
    ``n**2 * d``. Keys outside positions ``0 .. n - 1`` are padding and get weight exactly 0.
    """

    POSITION_WISE = ("q_proj", "k_proj", "v_proj")

    def __init__(self, d: int, r: int, centred: bool = False, *,
                 device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        _check_int("d", d, 1)
        _check_int("r", r, 1)
        _check_centred(centred, "r", r)
        self.d, self.r, self.centred = d, r, centred
        # positions of the window before and after the query
        self.before = (r - 1) // 2 if centred else r - 1
        self.after = r - 1 - self.before
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        place(self, device, dtype)

    def _windows(self, y: torch.Tensor) -> torch.Tensor:
        """``(B, n, d)`` -> ``(B, n, d, r)``: the ``r`` window rows of each position."""
        y = F.pad(y, (0, 0, self.before, self.after))  # (B, n + r - 1, d)
        return y.unfold(1, self.r, 1)  # (B, n, d, r)

    def weights(self, x: torch.Tensor) -> torch.Tensor:
        """Window weights ``(B, n, r)``: column ``t`` of row ``i`` is key ``i - before + t``,
        with ``before = r - 1`` (causal) or ``(r - 1) / 2`` (centred)."""
        _check_input(x, self.d)
        n, r = x.shape[1], self.r
        q = self.q_proj(x)  # (B, n, d)
        k_win = self._windows(self.k_proj(x))  # (B, n, d, r): the r keys of each query
        # (B, n, 1, d) @ (B, n, d, r): one batched product per query, (B, n, r)
        scores = (q.unsqueeze(-2) @ k_win).squeeze(-2) / math.sqrt(self.d)
        i = torch.arange(n, device=x.device).unsqueeze(1)  # (n, 1)
        t = torch.arange(r, device=x.device).unsqueeze(0)  # (1, r)
        key = i - self.before + t  # (n, r): the position of each window's key
        padding = (key < 0) | (key >= n)  # (n, r): keys outside the sequence
        return torch.softmax(scores.masked_fill(padding, float("-inf")), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.weights(x)  # (B, n, r)
        v_win = self._windows(self.v_proj(x))  # (B, n, d, r)
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

    def __init__(self, d: int, gain: float = 0.9, *,
                 device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
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
        place(self, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d)
        u = self.x_proj(x)  # (B, n, d): the input part, all positions at once
        h = u.new_zeros(u.shape[0], self.d)  # (B, d)
        states = []
        for t in range(x.shape[1]):  # serial: step t needs h_{t-1}
            h = torch.tanh(u[:, t] + self.h_proj(h))  # (B, d)
            states.append(h)
        return torch.stack(states, dim=1)  # (B, n, d)


class LSTMLayer(nn.Module):
    """A long short-term memory layer (Hochreiter & Schmidhuber, 1997) with the forget gate
    of Gers et al. (2000), written gate by gate; equal to ``torch.nn.LSTM`` with one layer.

    For each position, with ``sigma`` the logistic function and gates of width ``d``::

        [i_t, f_t, g_t, o_t] = x_t W_x + h_{t-1} W_h + b          (B, 4d), in this order
        c_t = sigma(f_t) * c_{t-1} + sigma(i_t) * tanh(g_t)
        h_t = sigma(o_t) * tanh(c_t),            h_{-1} = c_{-1} = 0

    ``x``: ``(B, n, d)`` -> the hidden states ``(B, n, d)``. ``W_x`` and ``W_h`` are
    ``(d, 4d)`` and every weight starts uniform in ``[-1/sqrt(d), 1/sqrt(d)]``, as in
    ``nn.LSTM``; then the forget gate's bias is set to ``forget_bias``: 0 gives
    ``sigma(f_t)`` about 1/2, a large value (5: 0.993) keeps the cell state ``c``. The one
    bias ``b`` is ``nn.LSTM``'s two, ``bias_ih + bias_hh``, added together.
    """

    #: the input products ``x_t W_x`` of the four gates; ``h_{t-1} W_h`` mixes positions
    POSITION_WISE = ("x_proj",)

    def __init__(self, d: int, forget_bias: float = 0.0, *,
                 device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        _check_int("d", d, 1)
        if isinstance(forget_bias, bool) or not isinstance(forget_bias, (int, float)):
            raise TypeError(f"forget_bias must be a float, got {type(forget_bias).__name__}")
        if not math.isfinite(forget_bias):
            raise ValueError(f"forget_bias must be finite, got {forget_bias}")
        self.d = d
        self.x_proj = nn.Linear(d, 4 * d)  # the four gates' input products and the bias
        self.h_proj = nn.Linear(d, 4 * d, bias=False)  # their hidden products
        bound = 1 / math.sqrt(d)
        with torch.no_grad():
            for p in self.parameters():
                p.uniform_(-bound, bound)
            self.x_proj.bias[d:2 * d] = forget_bias  # rows d .. 2d - 1: the forget gate
        place(self, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d)
        u = self.x_proj(x)  # (B, n, 4d): the input part, all positions at once
        h = u.new_zeros(u.shape[0], self.d)  # (B, d)
        c = u.new_zeros(u.shape[0], self.d)  # (B, d): the cell state
        states = []
        for t in range(x.shape[1]):  # serial: step t needs h_{t-1} and c_{t-1}
            gates = u[:, t] + self.h_proj(h)  # (B, 4d)
            i, f, g, o = gates.chunk(4, dim=-1)  # (B, d) each
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            states.append(h)
        return torch.stack(states, dim=1)  # (B, n, d)


class ConvLayer(nn.Module):
    """A 1-D convolution, ``d`` channels in and out, kernel ``k``, dilation ``dilation``:
    causal, or centred on the output position with ``centred=True`` (``k`` odd).

    ``x``: ``(B, n, d)`` -> ``(B, n, d)``; causal: output ``i`` uses inputs
    ``i - m * dilation`` for ``m = 0 .. k - 1``; centred: inputs ``i + m * dilation`` for
    ``m = -(k - 1) / 2 .. (k - 1) / 2``. Zero padding outside positions ``0 .. n - 1``.
    """

    #: none: the convolution is one product over all ``k`` taps, the position's own included
    POSITION_WISE = ()

    def __init__(self, d: int, k: int, dilation: int = 1, centred: bool = False, *,
                 device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
        super().__init__()
        _check_int("d", d, 1)
        _check_int("k", k, 1)
        _check_int("dilation", dilation, 1)
        _check_centred(centred, "k", k)
        self.d, self.k, self.dilation, self.centred = d, k, dilation, centred
        span = (k - 1) * dilation  # padding in all
        self.padding = (span // 2, span // 2) if centred else (span, 0)  # (before, after)
        self.conv = nn.Conv1d(d, d, k, dilation=dilation)
        place(self, device, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_input(x, self.d)
        xc = x.transpose(1, 2)  # (B, d, n): channels first, as Conv1d wants
        xc = F.pad(xc, self.padding)  # (B, d, n + (k - 1) * dilation)
        return self.conv(xc).transpose(1, 2)  # (B, n, d)


#: the kinds whose window can be centred in a stack. Not the dilated stack: its layer ``l``
#: moves a signal by ``-k**l``, 0 or ``+k**l`` positions, and with zero padding outside the
#: sequence some pairs of positions are never connected (for ``k = 3``, input 0 never
#: reaches output 15: the only sum of such moves that gives 15, ``27 - 9 - 3``, leaves the
#: sequence after the first move), however many layers are stacked.
WINDOWED = ("convolution", "restricted")


def _check_kind(kind: object, centred: object, k: int, r: int) -> None:
    """``kind`` one of :data:`KINDS`; ``centred`` a bool, only for a windowed kind whose
    window (``r`` for restricted attention, ``k`` for the convolutions) is odd."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(centred, bool):
        raise TypeError(f"centred must be a bool, got {type(centred).__name__}")
    if centred and kind not in WINDOWED:
        raise ValueError(f"only {WINDOWED} have a window to centre, got kind {kind!r}")
    if centred:
        _check_centred(centred, *(("r", r) if kind == "restricted" else ("k", k)))


def make_stack(kind: str, n_layers: int, d: int, k: int = 3, r: int = 3,
               centred: bool = False, *, device: str | torch.device | None = None,
               dtype: torch.dtype | None = None) -> nn.Sequential:
    """``n_layers`` layers of one kind, ``(B, n, d)`` -> ``(B, n, d)``.

    ``kind`` is one of :data:`KINDS`. The dilated stack uses dilation ``k**l`` in layer
    ``l = 0, 1, ...`` (WaveNet's scheme), so its receptive field is ``k**n_layers``.
    ``centred=True`` centres the windows of the kinds in :data:`WINDOWED` (``k`` or ``r``
    odd); self-attention has no window and the recurrent layer only one direction.
    ``device`` and ``dtype`` place the stack after its weights are drawn on the CPU
    (:func:`attention_src.utils.place`): the same weights on every device.
    """
    _check_int("n_layers", n_layers, 1)
    makers: dict[str, Callable[[int], nn.Module]] = {
        "self-attention": lambda layer: SelfAttentionLayer(d),
        "recurrent": lambda layer: RecurrentLayer(d),
        "convolution": lambda layer: ConvLayer(d, k, centred=centred),
        "dilated convolution": lambda layer: ConvLayer(d, k, dilation=k**layer,
                                                       centred=centred),
        "restricted": lambda layer: RestrictedSelfAttentionLayer(d, r, centred=centred),
    }
    _check_kind(kind, centred, k, r)
    device = check_device(device)
    stack = nn.Sequential(*(makers[kind](layer) for layer in range(n_layers)))
    return place(stack, device, dtype)


def analytic_flops(layer: nn.Module, n: int, batch: int = 1) -> dict[str, int]:
    """Floating-point operations of ``layer`` on a ``(batch, n, d)`` input, by formula.

    Returns ``{"mixing": ..., "position-wise": ...}``. ``mixing`` counts the products that
    carry information between positions: the scores ``Q K^T`` and the weighted sum ``A V`` of
    the attention layers (``2 * 2 n^2 d``, or ``2 * 2 n r d`` in a window of ``r``), the
    recurrent layer's ``n`` hidden products ``h_{t-1} W_h`` (``2 n d^2``), the convolution's
    ``k`` taps (``2 n k d^2``). ``position-wise`` counts the products applied to each position
    alone: the projections ``W_q, W_k, W_v`` (``3 * 2 n d^2``) and the recurrent layer's input
    product ``x_t W_x`` (``2 n d^2``). The LSTM has four gates: ``8 n d^2`` of each.
    Counted as FlopCounterMode counts: 2 operations per multiply-add, nothing for softmax,
    tanh, sigmoid, biases or padding.
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
    if isinstance(layer, LSTMLayer):  # the same, for four gates: (d, 4d) products
        return {"mixing": batch * 2 * n * d * 4 * d, "position-wise": batch * 2 * n * d * 4 * d}
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
                seed: int = 0, centred: bool = False, *,
                device: str | torch.device | None = None) -> int:
    """Fewest stacked layers of ``kind`` for which output ``n - 1`` depends on input 0.

    Dependence is read from the gradient (exactly zero outside the receptive field) of a
    stack with random float64 weights of width ``d`` (``torch.manual_seed(seed)``); a
    non-zero gradient proves the dependence, and a zero one, with random weights, means
    almost surely that there is none. ``k`` and ``r`` (at least 2: a window of 1 never
    reaches another position) are the kernel and the window, ``centred`` centres them (see
    :func:`make_stack`). Raises ``RuntimeError`` if ``max_layers`` layers do not suffice.
    With ``device`` the input and the weights are drawn on the CPU, as without it, and the
    gradients are computed on ``device``.
    """
    _check_int("n", n, 2)
    _check_int("d", d, 1)
    _check_int("k", k, 2)
    _check_int("r", r, 2)
    _check_int("max_layers", max_layers, 1)
    _check_int("seed", seed, 0)
    _check_kind(kind, centred, k, r)  # before the search, not in its first stack
    device = check_device(device)
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, d, generator=gen, dtype=torch.float64)  # (1, n, d)
    if device is not None:
        x = x.to(device)
    for n_layers in range(1, max_layers + 1):
        torch.manual_seed(seed)
        stack = place(make_stack(kind, n_layers, d, k=k, r=r, centred=centred).double(),
                      device)
        if _depends(stack, x):
            return n_layers
    raise RuntimeError(f"{kind}: output {n - 1} does not see input 0 after {max_layers} layers")


#: autograd nodes of matrix and matrix-vector products: (batched) matrix products with or
#: without an added term, matrix-vector and dot products, and convolutions
_MATMUL_NODES = ("MmBackward", "AddmmBackward", "BmmBackward", "BaddbmmBackward",
                 "AddbmmBackward", "MvBackward", "AddmvBackward", "DotBackward",
                 "VdotBackward", "ConvolutionBackward")


def longest_matmul_chain(output: torch.Tensor) -> int:
    """The largest number of products (the nodes of ``mm``, ``addmm``, ``bmm``,
    ``baddbmm``, ``addbmm``, ``mv``, ``addmv``, ``dot``, ``vdot`` and convolutions) on one
    path of ``output``'s autograd graph.

    It measures the order in which the code runs its products, not the fewest serial steps
    any schedule could reach: a fused operator (``torch.nn.LSTM``'s kernel, for one) is one
    node that is not a product and counts 0, a product written with another operator (an
    elementwise multiply and a sum) is not seen, and a stack of ``L`` recurrent layers counts
    ``L n`` although a schedule along the diagonals (layer ``l`` at step ``t`` needs only
    layer ``l - 1`` at step ``t`` and layer ``l`` at step ``t - 1``) needs ``n + L - 1``
    steps. It counts nodes, not work or weights: an elementwise operation (softmax, tanh,
    a gate's product) between two products adds nothing, a product of a ``(1, 1)`` matrix
    counts as much as one of ``(4096, 4096)``, and the same weight used at every step (the
    recurrent layer's ``W_h``) counts once per use. A path that runs through no product (a
    residual connection) is a path of 0. ``output`` is any tensor with a ``grad_fn``; the
    graph is walked iteratively, so a recurrent layer of thousands of steps is fine.

    Raises ``TypeError`` for a non-tensor, ``ValueError`` for a tensor without ``grad_fn``.
    """
    if not isinstance(output, torch.Tensor):
        raise TypeError(f"output must be a tensor, got {type(output).__name__}")
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
    (``None`` for the convolution). ``device`` and ``dtype`` (keywords) place the model after
    its weights are drawn on the CPU (:func:`attention_src.utils.place`).
    """

    MIXERS = ("attention", "convolution")

    def __init__(self, mixer: str, d: int = 16, position: bool = True, *,
                 device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None) -> None:
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
        place(self, device, dtype)

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
    The batches are drawn on the CPU (the same on every device) and moved to the model's
    device, so the images may stay on the CPU.
    """
    _check_int("steps", steps, 1)
    _check_int("batch", batch, 1)
    _check_int("seed", seed, 0)
    if images.dim() != 3 or labels.shape != images.shape[:1]:
        raise ValueError(f"images (N, 8, 8) and labels (N,) expected, got "
                         f"{tuple(images.shape)} and {tuple(labels.shape)}")
    if (not isinstance(train_idx, torch.Tensor) or train_idx.dim() != 1
            or train_idx.dtype != torch.long):
        got = (f"{train_idx.dtype} of shape {tuple(train_idx.shape)}"
               if isinstance(train_idx, torch.Tensor) else type(train_idx).__name__)
        raise TypeError(f"train_idx must be a 1-D int64 tensor of image indices, got {got}")
    if len(train_idx) == 0:
        raise ValueError("train_idx must hold at least one image index, got none")
    opt = Adam(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    device = module_device(model)
    losses = []
    for _ in range(steps):
        draw = torch.randint(len(train_idx), (batch,), generator=gen)  # (batch,)
        idx = train_idx[draw.to(train_idx.device)].to(images.device)  # (batch,)
        loss = F.cross_entropy(model(images[idx].to(device))[0], labels[idx].to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses
