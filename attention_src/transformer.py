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

Both blocks take ``rotary=True`` (keyword): the queries and keys of their *self*-attention,
per head, are then rotated by :func:`~attention_src.positional.apply_rotary` at positions
``0 .. L-1`` before the scores (Su et al., 2021): rotary position embedding, which makes the
scores depend on positions only through their differences. The cross-attention is never
rotated.

Masks are boolean with ``True`` = *may attend*, as everywhere in the book.
:func:`to_torch_encoder_layer` and :func:`to_torch_decoder_layer` build the PyTorch layers with
the same weights and say how to translate the masks.
"""

from __future__ import annotations

import math
import numbers
import warnings

import torch
from torch import nn

from attention_src.multihead import MultiHeadAttention, to_torch_multihead
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
    "EncoderBlock",
    "DecoderBlock",
    "to_torch_encoder_layer",
    "to_torch_decoder_layer",
    "Transformer",
    "to_torch_transformer",
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


def _check_rotary(embed_dim: int, num_heads: int) -> None:
    """Rotary positions rotate feature pairs of each head: ``d_head = E / h`` must be even."""
    if (embed_dim // num_heads) % 2:
        raise ValueError(
            f"rotary positions rotate feature pairs of each head, so d_head = embed_dim / "
            f"num_heads must be even, got embed_dim = {embed_dim}, num_heads = {num_heads}, "
            f"d_head = {embed_dim // num_heads}"
        )


class _Block(nn.Module):
    """What both blocks share: the feed-forward sublayer, the input checks, the settings."""

    def __init__(self, embed_dim, num_heads, ff_dim, dropout, norm_first, activation,
                 layer_norm_eps, rotary=False):
        super().__init__()
        _check_block_arguments(embed_dim, num_heads, ff_dim, dropout, activation, layer_norm_eps)
        if not isinstance(rotary, bool):
            raise TypeError(f"rotary must be a bool, got {type(rotary).__name__}")
        if rotary:
            _check_rotary(embed_dim, num_heads)
        self.rotary = rotary
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
        return f"norm_first={self.norm_first}" + (", rotary=True" if self.rotary else "")

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
        """Self-attention sublayer: ``(B, L, E) -> (B, L, E)``, before the residual; with
        ``rotary``, queries and keys rotated at positions ``0 .. L-1``."""
        # A (B, L, L) mask reaches MultiHeadAttention as (B, 1, L, L): shared by every head.
        positions = torch.arange(x.shape[1], device=x.device) if self.rotary else None  # (L,)
        out, _ = self.self_attn(x, x, x, mask=mask, need_weights=False,
                                rotary_positions=positions)
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
        rotary: keyword; rotate the self-attention's queries and keys ``(B, h, L, d_head)``
            at positions ``0 .. L-1`` (:func:`~attention_src.positional.apply_rotary`, base
            10000) before the scores; ``d_head = E / h`` must be even. No PyTorch layer does
            this: :func:`to_torch_encoder_layer` refuses such a block.
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
        rotary: bool = False,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__(embed_dim, num_heads, ff_dim, dropout, norm_first, activation,
                         layer_norm_eps, rotary)
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
    :func:`to_torch_decoder_layer`. Arguments as for :class:`EncoderBlock`; ``rotary=True``
    rotates the masked self-attention's queries and keys only, not the cross-attention's
    (decoder and encoder positions are not on one axis).

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
        rotary: bool = False,
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__(embed_dim, num_heads, ff_dim, dropout, norm_first, activation,
                         layer_norm_eps, rotary)
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


def _refuse_rotary(block: _Block) -> None:
    if block.rotary:
        raise ValueError(
            "PyTorch's nn.TransformerEncoderLayer / nn.TransformerDecoderLayer / nn.Transformer "
            "have no rotary positions: a block with rotary=True has no PyTorch equivalent"
        )


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
    it computes the same function up to rounding. A ``rotary`` block: ``ValueError``
    (PyTorch has no rotary positions).
    """
    if not isinstance(block, EncoderBlock):
        raise TypeError(f"block must be an EncoderBlock, got {type(block).__name__}")
    _refuse_rotary(block)
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
    padding mask to ``memory_key_padding_mask`` ``(B, S)``, ``True`` = padded. A ``rotary``
    block: ``ValueError`` (PyTorch has no rotary positions).
    """
    if not isinstance(block, DecoderBlock):
        raise TypeError(f"block must be a DecoderBlock, got {type(block).__name__}")
    _refuse_rotary(block)
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


# ------------------------------------------------------------------------ the whole model


def _check_padding(name: str, padding: torch.Tensor | None, tokens: torch.Tensor) -> None:
    """``padding`` must be ``None`` or a boolean ``(B, L)`` tensor matching ``tokens``, on its
    device, with at least one real token per sequence (``True`` = real token)."""
    if padding is None:
        return
    if not isinstance(padding, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(padding).__name__}")
    if padding.dtype != torch.bool:
        raise TypeError(f"{name} must be boolean (True = real token), got {padding.dtype}")
    if padding.shape != tokens.shape:
        raise ValueError(f"{name} must have the tokens' shape (B, L) = {tuple(tokens.shape)}, "
                         f"got {tuple(padding.shape)}")
    check_same_device(tokens=tokens, **{name: padding})
    empty = (~padding.any(dim=1)).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"{name} marks no real token in sequence(s) {empty}")


class Transformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. (2017), from the book's blocks.

    ``src: (B, S)`` token ids -> embeddings ``(B, S, E)`` (drawn from ``N(0, 1/E)``) scaled
    by ``sqrt(E)`` plus the sinusoidal positions (none with ``positional="rotary"``), then
    dropout -> ``num_layers``
    :class:`EncoderBlock` -> the *memory* ``(B, S, E)``. ``tgt: (B, T)`` (the output so
    far, starting with a start token) -> embeddings the same way -> ``num_layers``
    :class:`DecoderBlock` (causal
    self-attention, cross-attention to the memory) -> a linear map to the target vocabulary:
    logits ``(B, T, V_tgt)``. A pre-norm stack (``norm_first=True``) ends each stack with a
    layer norm (its residual stream is never normalised otherwise); a post-norm stack does
    not need one and has none.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes ``V_src``, ``V_tgt``.
        embed_dim: model width ``E`` (``d_model``).
        num_heads: heads ``h`` of every attention; must divide ``embed_dim``.
        num_layers: blocks in the encoder, and in the decoder.
        ff_dim: hidden width of every feed-forward network (``d_ff``).
        dropout: rate of every dropout (embeddings + positions, and inside the blocks).
        norm_first: pre-norm (``True``) or post-norm (``False``, the paper's) blocks.
        activation: ``"relu"`` or ``"gelu"``.
        max_len: the longest source or target the position table covers.
        tie_output: share the output projection's weight with the target embedding
            (Press & Wolf, 2017; Vaswani et al. §3.4 share it).
        layer_norm_eps: ``eps`` of every layer norm.
        positional: keyword; ``"sinusoidal"`` (Vaswani et al. §3.5: the table added to the
            scaled embeddings) or ``"rotary"`` (Su et al., 2021): nothing is added to the
            embeddings; instead the queries and keys ``(B, h, L, d_head)`` of every
            *self*-attention, encoder and decoder, are rotated at positions ``0 .. L-1``
            before the scores (the blocks' ``rotary=True``; ``d_head = E / h`` must be even).
            The cross-attention is not rotated: its queries are target positions and its keys
            source positions, which are not on one axis, so their difference means nothing.
            The parameters are the same either way; ``max_len`` still bounds the lengths.
            :func:`to_torch_transformer` refuses a rotary model (PyTorch has no equivalent).
        device, dtype: keywords; where the model goes and its floating dtype (weights drawn
            on the CPU, then moved: a seed gives the same model on every device).

    Masks are boolean, ``True`` = may attend; padding masks are ``(B, L)`` with ``True`` = a
    real token.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        embed_dim: int,
        num_heads: int,
        num_layers: int,
        ff_dim: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        max_len: int = 256,
        tie_output: bool = False,
        layer_norm_eps: float = 1e-5,
        *,
        positional: str = "sinusoidal",
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if not isinstance(positional, str) or positional not in ("sinusoidal", "rotary"):
            raise ValueError(f"positional must be 'sinusoidal' or 'rotary', got {positional!r}")
        check_positive_int("src_vocab_size", src_vocab_size)
        check_positive_int("tgt_vocab_size", tgt_vocab_size)
        check_positive_int("num_layers", num_layers)
        check_positive_int("max_len", max_len)
        _check_block_arguments(embed_dim, num_heads, ff_dim, dropout, activation, layer_norm_eps)
        if positional == "rotary":
            _check_rotary(embed_dim, num_heads)
        from attention_src.positional import sinusoidal_positional_encoding

        self.embed_dim, self.num_heads, self.num_layers = embed_dim, num_heads, num_layers
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.norm_first, self.max_len = bool(norm_first), max_len
        self.positional = positional
        self.src_embed = nn.Embedding(src_vocab_size, embed_dim)
        self.tgt_embed = nn.Embedding(tgt_vocab_size, embed_dim)
        # N(0, 1/E), as in Vaswani et al.'s code (tensor2tensor): scaled by sqrt(E) a token
        # embedding then has unit variance per feature, the scale of the sinusoidal positions.
        # PyTorch's default N(0, 1) would make it sqrt(E) times larger and drown the positions.
        for embedding in (self.src_embed, self.tgt_embed):
            nn.init.normal_(embedding.weight, std=embed_dim ** -0.5)
        # (max_len, E); a buffer, so it follows .to(), but not a parameter (None: rotary)
        table = sinusoidal_positional_encoding(max_len, embed_dim)
        self.register_buffer("positions", table if positional == "sinusoidal" else None,
                             persistent=False)
        self.embed_dropout = nn.Dropout(dropout)
        block = dict(embed_dim=embed_dim, num_heads=num_heads, ff_dim=ff_dim, dropout=dropout,
                     norm_first=norm_first, activation=activation,
                     layer_norm_eps=layer_norm_eps, rotary=positional == "rotary")
        self.encoder_layers = nn.ModuleList(EncoderBlock(**block) for _ in range(num_layers))
        self.decoder_layers = nn.ModuleList(DecoderBlock(**block) for _ in range(num_layers))
        self.encoder_norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps) if norm_first else None
        self.decoder_norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps) if norm_first else None
        self.output = nn.Linear(embed_dim, tgt_vocab_size)
        self.tie_output = bool(tie_output)
        if self.tie_output:
            self.output.weight = self.tgt_embed.weight  # (V_tgt, E), one tensor
        place(self, device, dtype)

    def extra_repr(self) -> str:
        rotary = ", positional='rotary'" if self.positional == "rotary" else ""
        return f"norm_first={self.norm_first}, tie_output={self.tie_output}{rotary}"

    def _check_tokens(self, name: str, tokens: torch.Tensor, vocab_size: int) -> None:
        if not isinstance(tokens, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tokens).__name__}")
        if tokens.dtype != torch.int64:
            raise TypeError(f"{name} must hold int64 token ids, got {tokens.dtype}")
        if tokens.dim() != 2 or tokens.shape[1] == 0:
            raise ValueError(f"{name} must be (B, L) with L >= 1, got shape {tuple(tokens.shape)}")
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"{name} has length {tokens.shape[1]}, more than the model's "
                             f"max_len = {self.max_len}")
        device = self.output.weight.device
        if tokens.device != device:
            raise ValueError(f"{name} is on {tokens.device} but the model is on {device}")
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
            raise ValueError(f"{name} holds ids outside [0, {vocab_size}): "
                             f"min {int(tokens.min())}, max {int(tokens.max())}")

    def _embed(self, embedding: nn.Embedding, tokens: torch.Tensor, start: int = 0):
        """Token embeddings ``(B, L, E)`` times ``sqrt(E)`` plus the positions ``start ..
        start + L - 1`` (none for a rotary model: its blocks rotate), then dropout (Vaswani
        et al. §3.4, §5.4)."""
        L = tokens.shape[1]
        x = embedding(tokens) * math.sqrt(self.embed_dim)  # (B, L, E)
        if self.positions is None:  # rotary
            return self.embed_dropout(x)
        return self.embed_dropout(x + self.positions[start:start + L])  # (L, E) broadcast

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``src: (B, S)`` ids, ``src_mask``: boolean broadcastable to ``(B, S, S)`` (a source
        padding mask ``p: (B, S)`` is ``p[:, None, :]``) -> memory ``(B, S, E)``."""
        self._check_tokens("src", src, self.src_vocab_size)
        x = self._embed(self.src_embed, src)  # (B, S, E)
        for layer in self.encoder_layers:
            x = layer(x, mask=src_mask)
        return x if self.encoder_norm is None else self.encoder_norm(x)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor,
               tgt_mask: torch.Tensor | None = None,
               memory_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``tgt: (B, T)`` ids, ``memory: (B, S, E)`` -> the decoder's states ``(B, T, E)``.

        ``tgt_mask`` (broadcastable to ``(B, T, T)``) is the self-attention's mask: pass the
        causal mask (``causal_mask(T)``, with ``& padding[:, None, :]`` for padding); the
        decoder adds none itself. ``memory_mask`` (broadcastable to ``(B, T, S)``) is the
        cross-attention's, typically the source padding ``p[:, None, :]``."""
        self._check_tokens("tgt", tgt, self.tgt_vocab_size)
        x = self._embed(self.tgt_embed, tgt)  # (B, T, E)
        for layer in self.decoder_layers:
            x = layer(x, memory, mask=tgt_mask, memory_mask=memory_mask)
        return x if self.decoder_norm is None else self.decoder_norm(x)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor,
                src_padding: torch.Tensor | None = None,
                tgt_padding: torch.Tensor | None = None) -> torch.Tensor:
        """``src: (B, S)``, ``tgt: (B, T)`` ids; paddings ``(B, S)``, ``(B, T)`` boolean with
        ``True`` = real token, or ``None`` -> logits ``(B, T, V_tgt)``. Target position ``t``
        sees target positions ``<= t`` (teacher forcing) and every real source token."""
        self._check_tokens("src", src, self.src_vocab_size)
        self._check_tokens("tgt", tgt, self.tgt_vocab_size)
        if src.shape[0] != tgt.shape[0]:
            raise ValueError(f"src and tgt must share the batch size, got {tuple(src.shape)} "
                             f"and {tuple(tgt.shape)}")
        _check_padding("src_padding", src_padding, src)
        _check_padding("tgt_padding", tgt_padding, tgt)
        T = tgt.shape[1]
        src_mask = None if src_padding is None else src_padding[:, None, :]  # (B, 1, S)
        tgt_mask = causal_mask(T, device=tgt.device)  # (T, T)
        if tgt_padding is not None:
            tgt_mask = tgt_mask & tgt_padding[:, None, :]  # (B, T, T)
        memory = self.encode(src, src_mask)  # (B, S, E)
        states = self.decode(tgt, memory, tgt_mask, src_mask)  # (B, T, E)
        return self.output(states)  # (B, T, V_tgt)


def to_torch_transformer(model: Transformer) -> nn.Transformer:
    """PyTorch's ``nn.Transformer(batch_first=True)`` carrying ``model``'s encoder and
    decoder stacks (settings, weights, dtype, device, mode).

    ``nn.Transformer`` starts where the embeddings end and stops before the output
    projection: ``model.output(ref(x_src, x_tgt, ...))`` equals ``model(src, tgt, ...)`` for
    the embedded inputs ``x = model._embed(...)``. It always builds a final layer norm for
    each stack; a post-norm ``model`` has none, so the copy's ``encoder.norm`` and
    ``decoder.norm`` are removed (``None``). Masks as in :func:`to_torch_decoder_layer`
    (PyTorch: ``True`` = *blocked*): ``tgt_mask=~causal_mask(T)``,
    ``src_key_padding_mask=~src_padding``, ``tgt_key_padding_mask=~tgt_padding``,
    ``memory_key_padding_mask=~src_padding``. In eval mode without autograd, PyTorch may take
    its fused fast path, which with a padding mask returns 0 at padded positions (nested
    tensors); ``torch.backends.mha.set_fastpath_enabled(False)`` compares every position.
    A rotary model (``positional="rotary"``): ``ValueError``, PyTorch has no equivalent.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    if model.positional == "rotary":
        raise ValueError(
            "PyTorch's nn.Transformer has no rotary positions: a Transformer with "
            "positional='rotary' has no PyTorch equivalent"
        )
    first = model.encoder_layers[0]
    with warnings.catch_warnings():
        # PyTorch notes that a pre-norm stack cannot use nested tensors: nothing to act on
        warnings.filterwarnings("ignore", message="enable_nested_tensor is True")
        ref = nn.Transformer(
            d_model=model.embed_dim, nhead=model.num_heads,
            num_encoder_layers=model.num_layers, num_decoder_layers=model.num_layers,
            dim_feedforward=first.ff_dim, dropout=first.dropout.p,
            activation=first.activation_name, layer_norm_eps=first.layer_norm_eps,
            batch_first=True, norm_first=model.norm_first,
        )
    weight = model.output.weight
    ref = ref.to(device=weight.device, dtype=weight.dtype)
    for mine, theirs in zip(model.encoder_layers, ref.encoder.layers, strict=True):
        copied = to_torch_encoder_layer(mine)
        theirs.load_state_dict(copied.state_dict())
    for mine, theirs in zip(model.decoder_layers, ref.decoder.layers, strict=True):
        theirs.load_state_dict(to_torch_decoder_layer(mine).state_dict())
    with torch.no_grad():
        if model.norm_first:
            ref.encoder.norm.load_state_dict(model.encoder_norm.state_dict())
            ref.decoder.norm.load_state_dict(model.decoder_norm.state_dict())
        else:
            ref.encoder.norm = None
            ref.decoder.norm = None
    return ref.train(model.training)
