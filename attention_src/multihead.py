"""Self-attention and multi-head attention layers.

``MultiHeadAttention`` is the fused form used in practice: one projection per role (query,
key, value) whose output is split into ``num_heads`` slices. ``PerHeadMultiHeadAttention`` is
the form the source notes draw: ``h`` separate small projections, one attention per head, a
loop. :func:`fuse_heads` copies a per-head module's weights into a fused one, and the tests
show the two compute the same function. :func:`to_torch_multihead` builds PyTorch's
``nn.MultiheadAttention`` with the same weights, for comparison.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from attention_src.attention import scaled_dot_product_attention
from attention_src.positional import apply_rotary
from attention_src.softmax import causal_mask
from attention_src.utils import place
from attention_src.validation import (
    check_mask,
    check_positive_int,
    check_same_device,
    check_same_dtype,
    check_tensor,
)

__all__ = [
    "SelfAttention",
    "MultiHeadAttention",
    "MultiHeadSelfAttention",
    "PerHeadMultiHeadAttention",
    "fuse_heads",
    "to_torch_multihead",
]


class SelfAttention(nn.Module):
    """Single-head self-attention: a linear layer (x -> Q, K, V) then scaled dot-product attention.

    ``forward(x: (..., L, d_in), mask=None) -> (output: (..., L, d_v), weights: (..., L, L))``
    with ``Q = x W_q: (..., L, d_k)``, ``K = x W_k: (..., L, d_k)``, ``V = x W_v: (..., L, d_v)``.
    ``device`` and ``dtype`` (keywords) place the module after its weights are drawn on the
    CPU (see :func:`attention_src.utils.place`): the same weights on every device.
    """

    def __init__(self, d_in: int, d_k: int, d_v: int, bias: bool = False, *,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        for name, v in (("d_in", d_in), ("d_k", d_k), ("d_v", d_v)):
            check_positive_int(name, v)
        self.q_proj = nn.Linear(d_in, d_k, bias=bias)
        self.k_proj = nn.Linear(d_in, d_k, bias=bias)
        self.v_proj = nn.Linear(d_in, d_v, bias=bias)
        place(self, device, dtype)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        check_tensor("x", x)
        d_in = self.q_proj.in_features
        if x.shape[-1] != d_in:
            raise ValueError(f"x must have {d_in} features (d_in), got shape {tuple(x.shape)}")
        return scaled_dot_product_attention(self.q_proj(x), self.k_proj(x), self.v_proj(x), mask)


def _head_mask(mask: torch.Tensor | None, target: tuple[int, ...]) -> torch.Tensor | None:
    """Bring a user mask to a shape that broadcasts against ``(B, h, L_q, L_k)`` scores.

    Accepted: ``(L_q, L_k)``, ``(B, L_q, L_k)`` (shared by all heads), ``(B, 1 or h, L_q, L_k)``.
    """
    if mask is None:
        return None
    if isinstance(mask, torch.Tensor) and mask.dim() == 3:
        mask = mask.unsqueeze(1)  # (B, L_q, L_k) -> (B, 1, L_q, L_k): the same for every head
    return check_mask(mask, target)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al., 2017), batch first.

    Each of ``num_heads`` heads attends with its own slice of the projected queries, keys and
    values (``head_dim = embed_dim // num_heads`` features each); the heads' outputs are
    concatenated and mixed by ``out_proj``.

    Args:
        embed_dim: model width ``E``: size of the queries and of the output.
        num_heads: number of heads ``h``; must divide ``embed_dim``.
        bias: whether the four projections have biases.
        kdim, vdim: feature sizes of the key and value inputs (default ``embed_dim``).
        dropout: dropout on the attention weights, in training mode.
        device, dtype: keywords; where the module goes and its floating dtype, applied after
            the weights are drawn on the CPU (:func:`attention_src.utils.place`), so a seed
            gives the same weights on every device.

    The inputs (and ``mask``) must be on the module's device: ``ValueError`` naming the
    devices otherwise.

    ``forward(query: (B, L_q, E), key: (B, L_k, kdim), value: (B, L_k, vdim), mask=None,
    need_weights=True, rotary_positions=None) -> (output: (B, L_q, E), weights: (B, h, L_q,
    L_k) or None)``.
    ``mask`` is boolean, ``True`` = may attend, of shape ``(L_q, L_k)``, ``(B, L_q, L_k)`` or
    ``(B, 1 or h, L_q, L_k)``. ``rotary_positions`` (self-attention only, ``L_q == L_k``):
    ``(L,)`` positions; each head's queries ``(B, h, L, d_head)`` and keys are rotated by
    :func:`~attention_src.positional.apply_rotary` at them before the scores (``d_head``
    even), so the scores depend on positions only through their differences. ``None``
    rotates nothing. With ``need_weights=False`` the weights are not materialised
    and PyTorch's fused kernel computes the same output. The returned weights are the
    attention distribution *before* dropout (``nn.MultiheadAttention`` returns them after
    dropout in training mode; in eval mode the two agree).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        dropout: float = 0.0,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else check_positive_int("kdim", kdim)
        self.vdim = embed_dim if vdim is None else check_positive_int("vdim", vdim)
        self.dropout = dropout
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(self.kdim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(self.vdim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        for proj in (self.q_proj, self.k_proj, self.v_proj):
            nn.init.xavier_uniform_(proj.weight)
            if bias:
                nn.init.zeros_(proj.bias)
        if bias:
            nn.init.zeros_(self.out_proj.bias)
        place(self, device, dtype)

    def _check_inputs(self, query, key, value) -> None:
        for name, t, width in (("query", query, self.embed_dim), ("key", key, self.kdim),
                               ("value", value, self.vdim)):
            check_tensor(name, t, min_rank=3)
            if t.dim() != 3:
                raise ValueError(f"{name} must be (B, L, features), got shape {tuple(t.shape)}")
            if t.shape[-1] != width:
                raise ValueError(
                    f"{name} must have {width} features, got shape {tuple(t.shape)}"
                )
        if not query.shape[0] == key.shape[0] == value.shape[0]:
            raise ValueError(
                f"query, key and value must share the batch size, got {tuple(query.shape)}, "
                f"{tuple(key.shape)}, {tuple(value.shape)}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must have the same length L_k, got key {tuple(key.shape)} "
                f"and value {tuple(value.shape)}"
            )
        check_same_dtype(query=query, key=key, value=value)
        check_same_device(query=query, key=key, value=value)
        if query.device != self.out_proj.weight.device:
            raise ValueError(
                f"inputs are on {query.device} but the module's parameters are on "
                f"{self.out_proj.weight.device}; move one of them, e.g. "
                f"module.to('{query.device}')"
            )
        if query.dtype != self.out_proj.weight.dtype:
            raise TypeError(
                f"inputs have dtype {query.dtype} but the module's parameters have dtype "
                f"{self.out_proj.weight.dtype}; convert one of them, e.g. module.to({query.dtype})"
            )

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        x = x.view(B, L, self.num_heads, self.head_dim)  # (B, L, E) -> (B, L, h, d_head)
        return x.transpose(1, 2)  # -> (B, h, L, d_head)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = True,
        rotary_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        self._check_inputs(query, key, value)
        B, L_q, _ = query.shape
        L_k = key.shape[1]
        if rotary_positions is not None and L_q != L_k:
            raise ValueError(
                f"rotary_positions rotate queries and keys at the same positions: they need "
                f"L_q == L_k, got query {tuple(query.shape)} and key {tuple(key.shape)}"
            )
        mask = _head_mask(mask, (B, self.num_heads, L_q, L_k))
        check_same_device(query=query, mask=mask)
        q = self._split_heads(self.q_proj(query))  # (B, h, L_q, d_head)
        k = self._split_heads(self.k_proj(key))  # (B, h, L_k, d_head)
        if rotary_positions is not None:
            # every head's (B, h, L, d_head) queries and keys, position m rotated by m theta
            q = apply_rotary(q, rotary_positions)
            k = apply_rotary(k, rotary_positions)
        v = self._split_heads(self.v_proj(value))  # (B, h, L_k, d_head)
        p = self.dropout if self.training else 0.0
        if need_weights:
            heads, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p=p)
        else:
            if mask is None:
                heads = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
            else:
                # A query with no allowed key: PyTorch's result there depends on the version and
                # the backend (NaN before 2.5). Chapter 3's recipe, independent of both: let it
                # attend to every key (a well-defined softmax, finite gradients), then zero it.
                empty = ~mask.any(dim=-1, keepdim=True)  # (..., L_q, 1)
                heads = F.scaled_dot_product_attention(q, k, v, attn_mask=mask | empty,
                                                       dropout_p=p)
                heads = heads.masked_fill(empty, 0.0)  # (B, h, L_q, d_head)
            weights = None
        # (B, h, L_q, d_head) -> (B, L_q, h, d_head) -> (B, L_q, E)
        concat = heads.transpose(1, 2).reshape(B, L_q, self.embed_dim)
        return self.out_proj(concat), weights


class MultiHeadSelfAttention(MultiHeadAttention):
    """Multi-head attention of a sequence to itself: ``query = key = value = x``.

    ``forward(x: (B, L, E), mask=None, causal=False, need_weights=True) ->
    (output: (B, L, E), weights: (B, h, L, L) or None)``. ``causal=True`` adds the look-ahead
    mask (position ``i`` sees ``j <= i``), combined with ``mask`` by logical AND.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True, dropout: float = 0.0,
                 *, device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__(embed_dim, num_heads, bias=bias, dropout=dropout, device=device,
                         dtype=dtype)

    def forward(  # type: ignore[override]
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        causal: bool = False,
        need_weights: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        check_tensor("x", x, min_rank=3)
        check_same_device(x=x, mask=mask)
        if causal:
            look_ahead = causal_mask(x.shape[1], device=x.device)  # (L, L)
            if mask is None:
                mask = look_ahead
            else:
                mask = _head_mask(mask, (x.shape[0], self.num_heads, x.shape[1], x.shape[1]))
                mask = mask & look_ahead
        return super().forward(x, x, x, mask=mask, need_weights=need_weights)


def _mask_for_head(mask: torch.Tensor | None, i: int) -> torch.Tensor | None:
    """Head ``i``'s slice of a mask already shaped by :func:`_head_mask`."""
    if mask is None or mask.dim() < 4:
        return mask
    return mask[:, i if mask.shape[1] > 1 else 0]  # (B, h or 1, L_q, L_k) -> (B, L_q, L_k)


class _Head(nn.Module):
    """One head's own projections: query, key and value inputs -> ``head_dim`` features."""

    def __init__(self, embed_dim: int, kdim: int, vdim: int, head_dim: int, bias: bool):
        super().__init__()
        self.q_proj = nn.Linear(embed_dim, head_dim, bias=bias)
        self.k_proj = nn.Linear(kdim, head_dim, bias=bias)
        self.v_proj = nn.Linear(vdim, head_dim, bias=bias)


class PerHeadMultiHeadAttention(nn.Module):
    """Multi-head attention as a loop over heads, each with its own projections.

    The readable form: head ``i`` computes ``attention(q W_q^i, k W_k^i, v W_v^i)``; the outputs
    are concatenated and mixed by ``out_proj``. Same interface and result as
    :class:`MultiHeadAttention` (see :func:`fuse_heads`), ``num_heads`` times as many small
    matrix products.

    ``forward(query: (B, L_q, E), key: (B, L_k, kdim), value: (B, L_k, vdim), mask=None) ->
    (output: (B, L_q, E), weights: (B, h, L_q, L_k))``. ``dropout`` acts on each head's
    attention weights in training mode, as in :class:`MultiHeadAttention`, and the returned
    weights are the ones before dropout. ``device`` and ``dtype`` (keywords) as in
    :class:`MultiHeadAttention`.
    """

    def __init__(self, embed_dim: int, num_heads: int, bias: bool = True,
                 kdim: int | None = None, vdim: int | None = None, dropout: float = 0.0, *,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        check_positive_int("embed_dim", embed_dim)
        check_positive_int("num_heads", num_heads)
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.dropout = dropout
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else check_positive_int("kdim", kdim)
        self.vdim = embed_dim if vdim is None else check_positive_int("vdim", vdim)
        self.heads = nn.ModuleList(
            _Head(embed_dim, self.kdim, self.vdim, self.head_dim, bias) for _ in range(num_heads)
        )
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        place(self, device, dtype)

    def forward(self, query, key, value, mask=None):
        MultiHeadAttention._check_inputs(self, query, key, value)
        B, L_q, _ = query.shape
        mask = _head_mask(mask, (B, self.num_heads, L_q, key.shape[1]))
        check_same_device(query=query, mask=mask)
        p = self.dropout if self.training else 0.0
        outputs, weights = [], []
        for i, head in enumerate(self.heads):
            head_mask = _mask_for_head(mask, i)
            out, w = scaled_dot_product_attention(
                head.q_proj(query), head.k_proj(key), head.v_proj(value), head_mask, dropout_p=p
            )  # out: (B, L_q, d_head), w: (B, L_q, L_k)
            outputs.append(out)
            weights.append(w)
        concat = torch.cat(outputs, dim=-1)  # h x (B, L_q, d_head) -> (B, L_q, E)
        return self.out_proj(concat), torch.stack(weights, dim=1)  # weights: (B, h, L_q, L_k)


def fuse_heads(per_head: PerHeadMultiHeadAttention) -> MultiHeadAttention:
    """A :class:`MultiHeadAttention` computing exactly what ``per_head`` computes.

    The fused ``q_proj`` stacks the heads' query projections: ``nn.Linear`` stores its weight as
    ``(out_features, in_features)``, so head ``i``'s rows ``i*d_head:(i+1)*d_head`` of the fused
    weight are head ``i``'s weight, and likewise for keys, values and biases.
    """
    if not isinstance(per_head, PerHeadMultiHeadAttention):
        raise TypeError(
            "fuse_heads takes a PerHeadMultiHeadAttention (one module per head), got "
            f"{type(per_head).__name__}"
        )
    # a context manager, not a decorator: mutmut (make mutate) skips decorated functions
    with torch.no_grad():
        bias = per_head.out_proj.bias is not None
        fused = MultiHeadAttention(per_head.embed_dim, per_head.num_heads, bias=bias,
                                   kdim=per_head.kdim, vdim=per_head.vdim, dropout=per_head.dropout)
        fused.train(per_head.training)
        ref_weight = per_head.out_proj.weight  # the fused copy keeps per_head's dtype and device
        fused = fused.to(device=ref_weight.device, dtype=ref_weight.dtype)
        for role in ("q_proj", "k_proj", "v_proj"):
            target = getattr(fused, role)
            parts = [getattr(h, role) for h in per_head.heads]
            target.weight.copy_(torch.cat([p.weight for p in parts], dim=0))  # h x (d_head, in)
            if bias:
                target.bias.copy_(torch.cat([p.bias for p in parts], dim=0))  # h x (d_head,)
        fused.out_proj.load_state_dict(per_head.out_proj.state_dict())
        return fused


def to_torch_multihead(mha: MultiHeadAttention) -> nn.MultiheadAttention:
    """PyTorch's ``nn.MultiheadAttention(batch_first=True)`` with ``mha``'s weights, dtype and
    train/eval mode.

    Remember the mask conventions differ: PyTorch's boolean ``attn_mask`` is ``True`` where
    attention is *blocked*, so pass ``~mask``.
    """
    if not isinstance(mha, MultiHeadAttention):
        hint = " (fuse_heads() it first)" if isinstance(mha, PerHeadMultiHeadAttention) else ""
        raise TypeError(
            f"to_torch_multihead takes a MultiHeadAttention, got {type(mha).__name__}{hint}"
        )
    with torch.no_grad():  # not a decorator: mutmut skips decorated functions
        bias = mha.out_proj.bias is not None
        ref = nn.MultiheadAttention(mha.embed_dim, mha.num_heads, bias=bias, kdim=mha.kdim,
                                    vdim=mha.vdim, batch_first=True, dropout=mha.dropout)
        ref = ref.to(mha.q_proj.weight.dtype).train(mha.training)  # same dtype, same mode
        weights = [mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]
        if ref._qkv_same_embed_dim:
            ref.in_proj_weight.copy_(torch.cat(weights, dim=0))  # 3 x (E, E) -> (3E, E)
        else:
            ref.q_proj_weight.copy_(weights[0])
            ref.k_proj_weight.copy_(weights[1])
            ref.v_proj_weight.copy_(weights[2])
        if bias:
            ref.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
        ref.out_proj.load_state_dict(mha.out_proj.state_dict())
        return ref
