"""An attention-only causal Transformer and the two head metrics of the induction experiment.

Chapter 6 trains a small language model that has nothing but attention: token and position
embeddings, ``num_layers`` residual blocks of causal multi-head self-attention (no feed-forward
network, no layer norm), and an unembedding. On sequences in which a segment repeats
(:func:`attention_src.data.repeated_segments`) such a model learns an *induction circuit*
(Olsson et al., 2022): a head in layer 1 that attends to the previous token, and a head in
layer 2 that attends to the token *after* an earlier copy of the current token and copies it.

* :class:`AttentionOnlyTransformer`: the model; ``forward`` can return every layer's weights
  and take per-head gates, so a head can be ablated (its output zeroed).
* :func:`previous_token_score`: a head's mean weight on the key just before the query.
* :func:`prefix_matching_score`: a head's mean weight on the keys that follow an earlier copy
  of the query's token.
* :func:`duplicate_token_score`: a head's mean weight on earlier copies of the query's token.
* :func:`next_token_losses`: the per-position cross-entropy of next-token prediction.
* :func:`train_language_model`: Adam on fresh batches, recording losses and head scores.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attention_src.attention import scaled_dot_product_attention
from attention_src.multihead import MultiHeadSelfAttention
from attention_src.softmax import causal_mask
from attention_src.validation import check_positive_int, check_tensor

__all__ = [
    "AttentionOnlyTransformer",
    "previous_token_score",
    "prefix_matching_score",
    "duplicate_token_score",
    "next_token_losses",
    "train_language_model",
]


def _check_tokens(tokens: object, vocab_size: int | None = None) -> torch.Tensor:
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"tokens must be a torch.Tensor, got {type(tokens).__name__}")
    if tokens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"tokens must be an integer tensor (int64), got dtype {tokens.dtype}")
    if tokens.dim() != 2:
        raise ValueError(f"tokens must be (B, L), got shape {tuple(tokens.shape)}")
    if vocab_size is not None and tokens.numel() and (
            int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"token ids must lie in [0, {vocab_size}), got values from {int(tokens.min())} "
            f"to {int(tokens.max())}"
        )
    return tokens


class AttentionOnlyTransformer(nn.Module):
    """A causal language model made of attention layers only.

    ``x_0 = embed(tokens) + pos_embed(positions)``; for each layer ``l``,
    ``x_l = x_{l-1} + MHSA_l(x_{l-1})`` with a causal mask; ``logits = unembed(x_L)``.
    Each layer is a :class:`~attention_src.MultiHeadSelfAttention`; its heads' outputs can be
    scaled by gates before the output projection (``gates = 0`` ablates a head).

    Args:
        vocab_size: number of token ids ``V``.
        embed_dim: width ``E`` of the residual stream.
        num_heads: heads per layer ``h``; must divide ``embed_dim``.
        num_layers: number of attention layers.
        max_len: longest sequence the learned position embedding covers.

    ``forward(tokens: (B, L) int64, gates=None, return_weights=False) -> logits: (B, L, V)``,
    and with ``return_weights=True`` also a list of ``num_layers`` weight tensors
    ``(B, h, L, L)``. ``gates``: ``(num_layers, h)``, multiplies each head's output.
    """

    def __init__(self, vocab_size: int, embed_dim: int, num_heads: int, num_layers: int,
                 max_len: int):
        super().__init__()
        for name, value in (("vocab_size", vocab_size), ("embed_dim", embed_dim),
                            ("num_heads", num_heads), ("num_layers", num_layers),
                            ("max_len", max_len)):
            check_positive_int(name, value)
        if embed_dim % num_heads:
            raise ValueError(
                f"embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})"
            )
        self.vocab_size, self.embed_dim, self.max_len = vocab_size, embed_dim, max_len
        self.num_heads, self.num_layers = num_heads, num_layers
        # PyTorch's default initialisation, N(0, 1) entries: with a smaller scale (1/sqrt(E))
        # the chapter's induction circuit did not form within 3,000 steps
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.pos_embed = nn.Embedding(max_len, embed_dim)
        self.layers = nn.ModuleList(
            MultiHeadSelfAttention(embed_dim, num_heads) for _ in range(num_layers)
        )
        self.unembed = nn.Linear(embed_dim, vocab_size)

    def _attend(self, layer: MultiHeadSelfAttention, x: torch.Tensor, mask: torch.Tensor,
                gate: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's attention: ``x: (B, L, E)`` -> ``(output: (B, L, E), weights: (B, h,
        L, L))``, each head's output times ``gate[i]`` before the output projection."""
        B, L, E = x.shape
        q = layer._split_heads(layer.q_proj(x))  # (B, L, E) -> (B, h, L, d_head)
        k = layer._split_heads(layer.k_proj(x))  # (B, h, L, d_head)
        v = layer._split_heads(layer.v_proj(x))  # (B, h, L, d_head)
        heads, weights = scaled_dot_product_attention(q, k, v, mask)  # (B, h, L, d_head)
        if gate is not None:
            heads = heads * gate.view(1, -1, 1, 1).to(heads.dtype)  # (h,) -> (1, h, 1, 1)
        concat = heads.transpose(1, 2).reshape(B, L, E)  # (B, h, L, d) -> (B, L, h * d)
        return layer.out_proj(concat), weights

    def forward(self, tokens: torch.Tensor, gates: torch.Tensor | None = None,
                return_weights: bool = False):
        _check_tokens(tokens, self.vocab_size)
        B, L = tokens.shape
        if L > self.max_len:
            raise ValueError(f"sequence length {L} exceeds max_len = {self.max_len}")
        if gates is not None:
            check_tensor("gates", gates, min_rank=2)
            if tuple(gates.shape) != (self.num_layers, self.num_heads):
                raise ValueError(
                    f"gates must be (num_layers, num_heads) = "
                    f"{(self.num_layers, self.num_heads)}, got shape {tuple(gates.shape)}"
                )
        positions = torch.arange(L, device=tokens.device)  # (L,)
        x = self.embed(tokens) + self.pos_embed(positions)  # (B, L, E)
        mask = causal_mask(L).to(tokens.device)  # (L, L): query i sees keys j <= i
        all_weights = []
        for i, layer in enumerate(self.layers):
            out, weights = self._attend(layer, x, mask, None if gates is None else gates[i])
            x = x + out  # the residual stream, (B, L, E)
            all_weights.append(weights)
        logits = self.unembed(x)  # (B, L, V)
        return (logits, all_weights) if return_weights else logits


def next_token_losses(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of predicting token ``t + 1`` from the logits at position ``t``.

    Args:
        logits: ``(B, L, V)``.
        tokens: ``(B, L)`` int64.

    Returns:
        ``(B, L - 1)``: entry ``[b, t]`` is the loss on token ``t + 1`` of sequence ``b``.
    """
    check_tensor("logits", logits, min_rank=3)
    _check_tokens(tokens)
    if logits.dim() != 3 or logits.shape[:2] != tokens.shape:
        raise ValueError(
            f"logits (B, L, V) and tokens (B, L) must agree, got {tuple(logits.shape)} and "
            f"{tuple(tokens.shape)}"
        )
    pred = logits[:, :-1]  # (B, L - 1, V): predictions for tokens 1 .. L - 1
    return F.cross_entropy(pred.transpose(1, 2), tokens[:, 1:], reduction="none")


def _check_weights(weights: object) -> torch.Tensor:
    check_tensor("weights", weights, min_rank=2)
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"weights must be self-attention weights (..., L, L), got shape "
            f"{tuple(weights.shape)}"
        )
    return weights


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean weight each query puts on the key just before it.

    Args:
        weights: ``(..., B, L, L)`` self-attention weights; the mean runs over the batch axis
            ``-3`` and the queries ``i = 1 .. L - 1``. A model's ``(B, h, L, L)`` weights give
            one score per head when passed as ``weights.transpose(0, 1)``: ``(h, B, L, L)``.

    Returns:
        ``(...)``: ``mean over b and i >= 1 of weights[..., b, i, i - 1]``, in ``[0, 1]``.
    """
    _check_weights(weights)
    if weights.dim() < 3:
        raise ValueError(f"weights must be (..., B, L, L), got shape {tuple(weights.shape)}")
    if weights.shape[-1] < 2:
        raise ValueError("previous_token_score needs L >= 2 (no query has a previous token)")
    # offset -1 diagonal: (..., B, L - 1), entry i - 1 is weights[..., i, i - 1]
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)
    return below.mean(dim=(-2, -1))


def _match_targets(tokens: torch.Tensor, shift: int) -> torch.Tensor:
    """``(B, L, L)`` bool: ``[b, i, j]`` True when ``shift <= j < i`` and ``tokens[b, j - shift]
    == tokens[b, i]``. ``shift = 1``: key ``j`` follows an earlier copy of query ``i``'s token;
    ``shift = 0``: key ``j`` *is* an earlier copy."""
    B, L = tokens.shape
    same = tokens.unsqueeze(2) == tokens.unsqueeze(1)  # (B, L, L): tokens[i] == tokens[p]
    target = torch.zeros(B, L, L, dtype=torch.bool, device=tokens.device)
    target[:, :, shift:] = same[:, :, :L - shift]  # key j = p + shift for each match p
    strictly_before = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril(-1)
    return target & strictly_before  # keys strictly before the query


def _match_score(weights: torch.Tensor, tokens: torch.Tensor, shift: int) -> torch.Tensor:
    _check_weights(weights)
    _check_tokens(tokens)
    if weights.dim() < 3 or tuple(weights.shape[-3:]) != (*tokens.shape, tokens.shape[1]):
        raise ValueError(
            f"weights (..., B, L, L) must match tokens (B, L), got {tuple(weights.shape)} and "
            f"{tuple(tokens.shape)}"
        )
    targets = _match_targets(tokens, shift)  # (B, L, L)
    has_target = targets.any(dim=-1)  # (B, L): queries that have at least one target
    if not bool(has_target.any()):
        raise ValueError("no query has an earlier copy of its token: the score is undefined")
    on_targets = (weights * targets.to(weights.dtype)).sum(dim=-1)  # (..., B, L)
    return on_targets[..., has_target].mean(dim=-1)  # (..., n_queries) -> (...)


def prefix_matching_score(weights: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean weight each query puts on the keys that follow an earlier copy of its token.

    For query ``i`` the targets are the keys ``j < i`` with ``tokens[j - 1] == tokens[i]``:
    "the token after the last time I saw this token", where an induction head looks. The score
    is the total weight on the targets, averaged over the queries that have at least one target
    (in the batch and across positions).

    Args:
        weights: ``(..., B, L, L)``; as for :func:`previous_token_score`, pass ``(h, B, L, L)``
            for one score per head.
        tokens: ``(B, L)`` int64, the sequences the weights were computed on.

    Returns:
        ``(...)`` scores in ``[0, 1]``.
    """
    return _match_score(weights, tokens, shift=1)


def duplicate_token_score(weights: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean weight each query puts on the earlier keys that hold the same token as it.

    For query ``i`` the targets are the keys ``j < i`` with ``tokens[j] == tokens[i]``. A
    *duplicate-token head* scores high: it lets a position learn where (at which position) its
    token occurred before, the first half of the other way to build an induction circuit
    (the query side, rather than the key side, carries the shift).

    Args:
        weights: ``(..., B, L, L)``; pass ``(h, B, L, L)`` for one score per head.
        tokens: ``(B, L)`` int64.

    Returns:
        ``(...)`` scores in ``[0, 1]``, averaged over the queries with at least one target.
    """
    return _match_score(weights, tokens, shift=0)


def train_language_model(
    model: AttentionOnlyTransformer,
    batches: Callable[[int], torch.Tensor],
    steps: int,
    lr: float = 1e-3,
    eval_tokens: torch.Tensor | None = None,
    eval_every: int = 0,
    on_eval: Callable[[int, torch.Tensor, list[torch.Tensor]], dict] | None = None,
) -> dict:
    """Train ``model`` with Adam on next-token prediction.

    Args:
        batches: ``batches(step) -> (B, L)`` int64 tokens of that step (a generator seeded by
            the step makes a run reproducible and lets a re-run compare its steps one by one).
        steps: number of optimiser steps.
        lr: Adam's learning rate.
        eval_tokens: ``(B_e, L)`` fixed tokens on which, every ``eval_every`` steps (at step 0,
            before training, and after the last step), ``on_eval(step, logits, weights)`` is
            called in eval and no-grad mode with the logits ``(B_e, L, V)`` and the list of the
            layers' weights ``(B_e, h, L, L)``; the dicts it returns are collected.

    Returns:
        ``{"losses": (steps,) float tensor, "evals": list of (step, dict)}``.
    """
    check_positive_int("steps", steps)
    if eval_every and (eval_tokens is None or on_eval is None):
        raise ValueError("eval_every needs eval_tokens and on_eval")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses, evals = [], []

    def evaluate(step: int) -> None:
        model.eval()
        with torch.no_grad():
            logits, weights = model(eval_tokens, return_weights=True)
        evals.append((step, on_eval(step, logits, weights)))
        model.train()

    model.train()
    for step in range(steps):
        if eval_every and step % eval_every == 0:
            evaluate(step)
        tokens = batches(step)  # (B, L)
        loss = next_token_losses(model(tokens), tokens).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if eval_every:
        evaluate(steps)
    model.eval()
    return {"losses": torch.tensor(losses), "evals": evals}
