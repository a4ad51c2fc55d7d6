"""The Transformer block: encoder and decoder layers built from the book's multi-head attention.

An encoder block (Vaswani et al., 2017) is two sublayers, each wrapped in a residual connection
and a layer norm: multi-head self-attention, then a position-wise feed-forward network
``Linear -> activation -> dropout -> Linear`` applied to every position separately. A decoder
block has three: masked self-attention, cross-attention to the encoder's output (the
*memory*), and the feed-forward network.

Where the layer norm sits is the one design choice:

* post-norm (``norm_first=False``, the original paper): ``x = norm(x + sublayer(x))``;
* pre-norm (``norm_first=True``, most models since): ``x = x + sublayer(norm(x))``, so the
  residual stream itself is never normalised and deep stacks train without a warm-up.

Dropout sits exactly where ``torch.nn.TransformerEncoderLayer`` / ``TransformerDecoderLayer``
put it, all with the same rate ``p``: on the attention weights inside each attention, on each
sublayer's output before it is added to the residual (``dropout1``, ``dropout2``,
``dropout3``), and after the feed-forward activation (``dropout``). Attribute names follow
PyTorch's (``self_attn``, ``linear1``, ``linear2``, ``norm1``...), except that the decoder's
attention to the memory is called ``cross_attn`` (PyTorch: ``multihead_attn``).

Masks are boolean with ``True`` = *may attend*, as everywhere in the book.
:func:`to_torch_encoder_layer` and :func:`to_torch_decoder_layer` build the PyTorch layers with
the same weights and say how to translate the masks.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn

from attention_src.multihead import MultiHeadAttention, to_torch_multihead
from attention_src.utils import place
from attention_src.validation import (
    check_mask,
    check_positive_int,
    check_same_device,
    check_same_dtype,
    check_tensor,
)

__all__ = [
    "EncoderBlock",
    "DecoderBlock",
    "to_torch_encoder_layer",
    "to_torch_decoder_layer",
]

#: The feed-forward activations, by the names ``torch.nn.TransformerEncoderLayer`` accepts.
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


def _check_block_arguments(embed_dim, num_heads, ff_dim, dropout, activation, layer_norm_eps):
    """The constructor checks shared by both blocks."""
    check_positive_int("embed_dim", embed_dim)
    check_positive_int("num_heads", num_heads)
    check_positive_int("ff_dim", ff_dim)
    if embed_dim % num_heads:
        raise ValueError(f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real):
        raise TypeError(f"dropout must be a number, got {type(dropout).__name__}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"activation must be 'relu' or 'gelu', got {activation!r}")
    if isinstance(layer_norm_eps, bool) or not isinstance(layer_norm_eps, numbers.Real):
        raise TypeError(f"layer_norm_eps must be a number, got {type(layer_norm_eps).__name__}")
    if not layer_norm_eps > 0:
        raise ValueError(f"layer_norm_eps must be positive, got {layer_norm_eps}")


class _Block(nn.Module):
    """What both blocks share: the feed-forward sublayer, the input checks, the settings."""

    def __init__(self, embed_dim, num_heads, ff_dim, dropout, norm_first, activation,
                 layer_norm_eps):
        super().__init__()
        _check_block_arguments(embed_dim, num_heads, ff_dim, dropout, activation, layer_norm_eps)
        self.embed_dim, self.num_heads, self.ff_dim = embed_dim, num_heads, ff_dim
        self.norm_first = bool(norm_first)
        self.activation_name = activation
        self.layer_norm_eps = float(layer_norm_eps)
        # self-attention; its own dropout acts on the attention weights, as in PyTorch
        self.self_attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout)
        # position-wise feed-forward network: E -> ff_dim -> E
        self.linear1 = nn.Linear(embed_dim, ff_dim)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)  # after the activation
        self.linear2 = nn.Linear(ff_dim, embed_dim)
        self.norm1 = nn.LayerNorm(embed_dim, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(embed_dim, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)  # on the self-attention sublayer's output
        self.dropout2 = nn.Dropout(dropout)  # on the next sublayer's output

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"

    def _check_x(self, x: torch.Tensor) -> None:
        """``x`` must be a floating-point ``(B, L, E)`` tensor of the parameters' dtype."""
        check_tensor("x", x, min_rank=3)
        if x.dim() != 3:
            raise ValueError(f"x must be (B, L, E), got shape {tuple(x.shape)}")
        if x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"x must have embed_dim = {self.embed_dim} features, got shape {tuple(x.shape)}"
            )
        device = self.linear1.weight.device
        if x.device != device:
            raise ValueError(
                f"x is on {x.device} but the block's parameters are on {device}; move one of "
                f"them, e.g. block.to('{x.device}')"
            )
        dtype = self.linear1.weight.dtype
        if x.dtype != dtype:
            raise TypeError(
                f"x has dtype {x.dtype} but the block's parameters have dtype {dtype}; "
                f"convert one of them, e.g. block.to({x.dtype})"
            )

    def _sa_block(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Self-attention sublayer: ``(B, L, E) -> (B, L, E)``, before the residual."""
        # A (B, L, L) mask reaches MultiHeadAttention as (B, 1, L, L): shared by every head.
        out, _ = self.self_attn(x, x, x, mask=mask, need_weights=False)
        return self.dropout1(out)

    def _ff_block(self, x: torch.Tensor, out_dropout: nn.Dropout) -> torch.Tensor:
        """Feed-forward sublayer, position by position: ``(B, L, E) -> (B, L, ff_dim) ->
        (B, L, E)``, before the residual."""
        hidden = self.dropout(self.activation(self.linear1(x)))  # (B, L, ff_dim)
        return out_dropout(self.linear2(hidden))  # (B, L, E)


class EncoderBlock(_Block):
    """One Transformer encoder layer: self-attention and feed-forward, each with a residual
    connection and a layer norm (post-norm by default, pre-norm with ``norm_first=True``).

    The same computation as ``torch.nn.TransformerEncoderLayer(embed_dim, num_heads, ff_dim,
    dropout, activation, batch_first=True, norm_first=norm_first)``; see
    :func:`to_torch_encoder_layer`.

    Args:
        embed_dim: model width ``E``.
        num_heads: number of heads ``h``; must divide ``embed_dim``.
        ff_dim: hidden width of the feed-forward network (``d_ff``, 4E in the paper).
        dropout: rate ``p`` of every dropout in the block (attention weights, each sublayer's
            output, the feed-forward hidden layer), in ``[0, 1)``; active in training mode only.
        norm_first: ``False``: ``x = norm(x + sublayer(x))`` (post-norm, the original);
            ``True``: ``x = x + sublayer(norm(x))`` (pre-norm).
        activation: ``"relu"`` or ``"gelu"`` (the exact, erf-based GELU).
        layer_norm_eps: the ``eps`` of both layer norms.
        device, dtype: keywords; where the block goes and its floating dtype, applied after
            the weights are drawn on the CPU (:func:`attention_src.utils.place`): a seed gives
            the same weights on every device. Inputs and masks must be on the block's device.

    ``forward(x: (B, L, E), mask=None) -> (B, L, E)``. ``mask`` is boolean, ``True`` = may
    attend, broadcastable to ``(B, L, L)``: ``(L, L)`` (e.g. :func:`~attention_src.causal_mask`),
    ``(B, L, L)``, or a padding mask ``(B, 1, L)`` (``lengths_to_mask(lens, L)[:, None, :]``).
    A query that may attend to nothing gets a zero attention output (PyTorch gives NaN).
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ff_dim: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__(embed_dim, num_heads, ff_dim, dropout, norm_first, activation,
                         layer_norm_eps)
        place(self, device, dtype)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``x: (B, L, E)``, ``mask``: boolean broadcastable to ``(B, L, L)`` or ``None`` ->
        ``(B, L, E)``."""
        self._check_x(x)
        B, L, _ = x.shape
        if mask is not None:
            check_mask(mask, (B, L, L))
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), mask)  # (B, L, E)
            x = x + self._ff_block(self.norm2(x), self.dropout2)
        else:
            x = self.norm1(x + self._sa_block(x, mask))  # (B, L, E)
            x = self.norm2(x + self._ff_block(x, self.dropout2))
        return x


class DecoderBlock(_Block):
    """One Transformer decoder layer: masked self-attention, cross-attention to the encoder's
    output ``memory``, and feed-forward, each with a residual connection and a layer norm.

    The same computation as ``torch.nn.TransformerDecoderLayer(embed_dim, num_heads, ff_dim,
    dropout, activation, batch_first=True, norm_first=norm_first)``; see
    :func:`to_torch_decoder_layer`. Arguments as for :class:`EncoderBlock`.

    ``forward(x: (B, L, E), memory: (B, S, E), mask=None, memory_mask=None) -> (B, L, E)``.
    ``mask`` (boolean, ``True`` = may attend, broadcastable to ``(B, L, L)``) is the
    self-attention's: the block does **not** add a causal mask by itself, so pass
    ``causal_mask(L)`` (combined with a padding mask by ``&`` if needed). ``memory_mask``
    (broadcastable to ``(B, L, S)``, typically the source's padding mask ``(B, 1, S)``) is the
    cross-attention's.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        ff_dim: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        *,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__(embed_dim, num_heads, ff_dim, dropout, norm_first, activation,
                         layer_norm_eps)
        # queries from the decoder (B, L, E), keys and values from the memory (B, S, E)
        self.cross_attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout)
        self.norm3 = nn.LayerNorm(embed_dim, eps=layer_norm_eps)
        self.dropout3 = nn.Dropout(dropout)  # on the feed-forward sublayer's output
        place(self, device, dtype)

    def _check_memory(self, x: torch.Tensor, memory: torch.Tensor) -> None:
        check_tensor("memory", memory, min_rank=3)
        if memory.dim() != 3:
            raise ValueError(f"memory must be (B, S, E), got shape {tuple(memory.shape)}")
        if memory.shape[0] != x.shape[0]:
            raise ValueError(
                f"memory must have the batch size of x, got memory {tuple(memory.shape)} and "
                f"x {tuple(x.shape)}"
            )
        if memory.shape[-1] != self.embed_dim:
            raise ValueError(
                f"memory must have embed_dim = {self.embed_dim} features, got shape "
                f"{tuple(memory.shape)}"
            )
        check_same_dtype(x=x, memory=memory)
        check_same_device(x=x, memory=memory)

    def _ca_block(self, x: torch.Tensor, memory: torch.Tensor,
                  memory_mask: torch.Tensor | None) -> torch.Tensor:
        """Cross-attention sublayer: queries ``(B, L, E)``, memory ``(B, S, E)`` ->
        ``(B, L, E)``, before the residual."""
        out, _ = self.cross_attn(x, memory, memory, mask=memory_mask, need_weights=False)
        return self.dropout2(out)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``x: (B, L, E)``, ``memory: (B, S, E)``, ``mask``: boolean broadcastable to
        ``(B, L, L)`` (self-attention), ``memory_mask``: boolean broadcastable to ``(B, L, S)``
        (cross-attention) -> ``(B, L, E)``."""
        self._check_x(x)
        self._check_memory(x, memory)
        B, L, _ = x.shape
        S = memory.shape[1]
        if mask is not None:
            check_mask(mask, (B, L, L))
        if memory_mask is not None:
            check_mask(memory_mask, (B, L, S), name="memory_mask")
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), mask)  # (B, L, E)
            x = x + self._ca_block(self.norm2(x), memory, memory_mask)
            x = x + self._ff_block(self.norm3(x), self.dropout3)
        else:
            x = self.norm1(x + self._sa_block(x, mask))  # (B, L, E)
            x = self.norm2(x + self._ca_block(x, memory, memory_mask))
            x = self.norm3(x + self._ff_block(x, self.dropout3))
        return x


def _copy_common(block: _Block, ref: nn.Module) -> nn.Module:
    """Copy what both layers share (self-attention, feed-forward, norm1, norm2); same dtype,
    device and train/eval mode as ``block``."""
    with torch.no_grad():
        weight = block.linear1.weight
        ref = ref.to(device=weight.device, dtype=weight.dtype).train(block.training)
        # in_proj_weight (3E, E) = [W_q; W_k; W_v] rows, as to_torch_multihead packs them
        ref.self_attn.load_state_dict(to_torch_multihead(block.self_attn).state_dict())
        for name in ("linear1", "linear2", "norm1", "norm2"):
            getattr(ref, name).load_state_dict(getattr(block, name).state_dict())
        return ref


def to_torch_encoder_layer(block: EncoderBlock) -> nn.TransformerEncoderLayer:
    """PyTorch's ``nn.TransformerEncoderLayer(batch_first=True)`` with ``block``'s weights,
    settings (``norm_first``, activation, dropout rate, ``eps``), dtype, device and mode.

    Masks: PyTorch's boolean masks mean the opposite of the book's (``True`` = *blocked*), so
    pass ``~mask``, and it splits them in two arguments:

    * ``src_mask``: ``(L, L)`` shared by the batch, or ``(B*h, L, L)``, one per sequence *and
      head* (from a ``(B, L, L)`` mask: ``~mask.repeat_interleave(h, dim=0)``);
    * ``src_key_padding_mask``: ``(B, L)``, ``True`` = padded. From lengths:
      ``~lengths_to_mask(lens, L)``; the book's ``(B, 1, L)`` padding mask ``m`` is
      ``~m[:, 0]``.

    So ``block(x, mask=causal_mask(L) & pad[:, None, :])`` equals ``layer(x,
    src_mask=~causal_mask(L), src_key_padding_mask=~pad)`` in eval mode. In eval mode without
    autograd PyTorch may take its fused "fast path" (``torch._transformer_encoder_layer_fwd``);
    it computes the same function up to rounding.
    """
    if not isinstance(block, EncoderBlock):
        raise TypeError(f"block must be an EncoderBlock, got {type(block).__name__}")
    ref = nn.TransformerEncoderLayer(
        block.embed_dim, block.num_heads, dim_feedforward=block.ff_dim,
        dropout=block.dropout.p, activation=block.activation_name,
        layer_norm_eps=block.layer_norm_eps, batch_first=True, norm_first=block.norm_first,
    )
    return _copy_common(block, ref)


def to_torch_decoder_layer(block: DecoderBlock) -> nn.TransformerDecoderLayer:
    """PyTorch's ``nn.TransformerDecoderLayer(batch_first=True)`` with ``block``'s weights,
    settings (``norm_first``, activation, dropout rate, ``eps``), dtype, device and mode.
    ``block.cross_attn`` becomes ``layer.multihead_attn``.

    Masks, as for :func:`to_torch_encoder_layer` (PyTorch: ``True`` = *blocked*, pass ``~``):
    the self-attention's ``mask`` goes to ``tgt_mask`` (``(L, L)`` or ``(B*h, L, L)``; a causal
    mask is ``~causal_mask(L)``) and a target padding mask to ``tgt_key_padding_mask`` ``(B,
    L)``; ``memory_mask`` goes to ``memory_mask`` (``(L, S)`` or ``(B*h, L, S)``) and a source
    padding mask to ``memory_key_padding_mask`` ``(B, S)``, ``True`` = padded.
    """
    if not isinstance(block, DecoderBlock):
        raise TypeError(f"block must be a DecoderBlock, got {type(block).__name__}")
    ref = nn.TransformerDecoderLayer(
        block.embed_dim, block.num_heads, dim_feedforward=block.ff_dim,
        dropout=block.dropout.p, activation=block.activation_name,
        layer_norm_eps=block.layer_norm_eps, batch_first=True, norm_first=block.norm_first,
    )
    ref = _copy_common(block, ref)
    with torch.no_grad():
        ref.multihead_attn.load_state_dict(to_torch_multihead(block.cross_attn).state_dict())
        ref.norm3.load_state_dict(block.norm3.state_dict())
    return ref
