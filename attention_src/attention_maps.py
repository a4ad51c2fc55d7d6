"""The attention weights inside a trained :class:`~attention_src.transformer.Transformer`.

The blocks compute attention without keeping its weights (``need_weights=False``, the fast
path). To look inside a trained model, :func:`transformer_attention_weights` runs it once,
records what each attention module was called with, and calls each module again on exactly
those inputs asking for its weights: the weights are the ones the model used, per layer and per
head.

>>> from attention_src.attention_maps import transformer_attention_weights  # doctest: +SKIP
>>> maps = transformer_attention_weights(model, src, tgt, src_padding)      # doctest: +SKIP
>>> maps["cross"].shape  # (layers, B, heads, T, S)                          # doctest: +SKIP

:func:`attention_rollout` (Abnar & Zuidema, 2020) composes the layers' weights into one map
from the last layer back to the input tokens.
"""

from __future__ import annotations

import torch
from torch import nn

from attention_src.transformer import Transformer

__all__ = ["transformer_attention_weights", "attention_rollout"]


def transformer_attention_weights(
    model: Transformer, src: torch.Tensor, tgt: torch.Tensor,
    src_padding: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Every attention weight of ``model`` on one teacher-forced batch, in eval mode.

    Args:
        model: a :class:`~attention_src.transformer.Transformer`.
        src: ``(B, S)`` source ids; tgt: ``(B, T)`` target ids (the decoder's input, starting
            with ``<bos>``).
        src_padding: ``(B, S)`` boolean, ``True`` = a real source token, or ``None``.

    Returns:
        ``{"encoder": (N, B, h, S, S), "decoder": (N, B, h, T, T), "cross": (N, B, h, T, S)}``
        for ``N`` layers and ``h`` heads: the encoder's self-attention, the decoder's masked
        self-attention and its cross-attention (row ``t``: what target position ``t`` reads
        in the source). Every row sums to 1 over the keys it may attend to; padded source
        columns and future target columns hold 0. The model's training mode is restored.

    Raises:
        TypeError: ``model`` is not a :class:`~attention_src.transformer.Transformer`.
        ValueError: what ``model.forward`` rejects (shapes, ids, padding), with its message.
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be an attention_src Transformer, got "
                        f"{type(model).__name__}")
    modules = {
        "encoder": [layer.self_attn for layer in model.encoder_layers],
        "decoder": [layer.self_attn for layer in model.decoder_layers],
        "cross": [layer.cross_attn for layer in model.decoder_layers],
    }
    calls: dict[nn.Module, tuple[tuple, dict]] = {}

    def record(module: nn.Module, args: tuple, kwargs: dict) -> None:
        calls[module] = (args, kwargs)

    handles = [m.register_forward_pre_hook(record, with_kwargs=True)
               for ms in modules.values() for m in ms]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(src, tgt, src_padding=src_padding)
            # each module once more on its recorded inputs, now keeping the weights
            return {name: torch.stack([m(*calls[m][0], **{**calls[m][1], "need_weights": True})[1]
                                       for m in ms])  # N x (B, h, L_q, L_k) -> (N, B, h, ...)
                    for name, ms in modules.items()}
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)


def attention_rollout(weights: torch.Tensor, residual: float = 0.5) -> torch.Tensor:
    """Attention rollout (Abnar & Zuidema, 2020): how much each output position draws on each
    input token when the layers' attention is followed down through the residual stream.

    Each layer's weights are averaged over heads, the residual connection is added as
    attention to oneself, ``A_l = (1 - residual) * mean_h(W_l) + residual * I`` (rows
    renormalised to sum to 1), and the layers are multiplied from the last down:
    ``R = A_N @ ... @ A_1``. It ignores the values, the output projections, the feed-forward
    sublayers and the layer norms, so it is a heuristic, not what the model computes.

    Args:
        weights: ``(N, B, h, L, L)`` attention weights of ``N`` layers, each row summing to 1
            (a padded key's column is 0), e.g. from ``MiniLM.attention_weights``.
        residual: weight of the identity in ``[0, 1)``; 0.5 as in the paper.

    Returns:
        ``(B, L, L)``: row ``i`` is a distribution over the input tokens for output
        position ``i`` (rows of padded queries mean nothing).

    Raises:
        TypeError: ``weights`` is not a floating tensor.
        ValueError: ``weights`` is not ``(N, B, h, L, L)``, or ``residual`` is outside
            ``[0, 1)``.
    """
    if not isinstance(weights, torch.Tensor) or not torch.is_floating_point(weights):
        raise TypeError(f"weights must be a floating torch.Tensor, got "
                        f"{getattr(weights, 'dtype', type(weights).__name__)}")
    if weights.dim() != 5 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"weights must be (N, B, h, L, L), got shape {tuple(weights.shape)}")
    if isinstance(residual, bool) or not 0.0 <= residual < 1.0:
        raise ValueError(f"residual must be in [0, 1), got {residual!r}")
    L = weights.shape[-1]
    eye = torch.eye(L, dtype=weights.dtype, device=weights.device)  # (L, L)
    mixed = (1 - residual) * weights.mean(dim=2) + residual * eye  # (N, B, L, L)
    mixed = mixed / mixed.sum(dim=-1, keepdim=True)
    rollout = mixed[0]  # (B, L, L)
    for layer in mixed[1:]:
        rollout = layer @ rollout  # the higher layer reads the lower layer's mixture
    return rollout
