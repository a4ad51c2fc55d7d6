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
* :func:`path_ablated_logits`: the logits when chosen layer-1 heads are removed from only the
  query, key or value input of layer 2 (which path a head's output acts through).
* :func:`ov_circuits`: each head's OV circuit from tokens to logits, ``W_E W_v W_o W_U``;
  :func:`ov_copying_score` summarises its eigenvalues, :func:`own_logit_ranks` asks token by
  token whether reading a token raises its own logit most (the copying half of the
  definition of an induction head).
* :func:`sequence_losses`, :func:`head_ablation_losses`, :func:`path_ablation_rises`,
  :func:`mean_ablated_logits`: per-sequence losses on chosen targets, with a layer's heads
  zero-ablated (all, or all but one), one layer-1 head removed from one input of layer 2,
  or heads replaced by their mean output.
* :func:`train_language_model`: Adam on fresh batches, recording losses and head scores.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from attention_src.attention import scaled_dot_product_attention
from attention_src.multihead import MultiHeadSelfAttention
from attention_src.optim import Adam
from attention_src.softmax import causal_mask
from attention_src.utils import module_device, place
from attention_src.validation import check_positive_int, check_tensor

__all__ = [
    "AttentionOnlyTransformer",
    "previous_token_score",
    "prefix_matching_score",
    "duplicate_token_score",
    "next_token_losses",
    "path_ablated_logits",
    "ov_circuits",
    "ov_copying_score",
    "own_logit_ranks",
    "sequence_losses",
    "head_ablation_losses",
    "path_ablation_rises",
    "mean_ablated_logits",
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
        device, dtype: keywords; where the model goes and its floating dtype, applied after
            the weights are drawn on the CPU (:func:`attention_src.utils.place`): a seed gives
            the same weights on every device. ``tokens`` must be on the model's device.

    ``forward(tokens: (B, L) int64, gates=None, return_weights=False) -> logits: (B, L, V)``,
    and with ``return_weights=True`` also a list of ``num_layers`` weight tensors
    ``(B, h, L, L)``. ``gates``: ``(num_layers, h)``, multiplies each head's output.
    """

    def __init__(self, vocab_size: int, embed_dim: int, num_heads: int, num_layers: int,
                 max_len: int, *, device: str | torch.device | None = None,
                 dtype: torch.dtype | None = None):
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
        place(self, device, dtype)

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
        if L == 0:
            raise ValueError("tokens must hold at least one position, got L = 0")
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
        mask = causal_mask(L, device=tokens.device)  # (L, L): query i sees keys j <= i
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
        tokens: ``(B, L)`` int64, ids in ``[0, V)``.

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
    _check_tokens(tokens, vocab_size=logits.shape[-1])  # an id outside [0, V) has no logit
    if tokens.shape[1] < 2:
        raise ValueError(
            f"next-token losses need L >= 2 (one token has no next token), got L = "
            f"{tokens.shape[1]}"
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


def _match_score(weights: torch.Tensor, tokens: torch.Tensor, shift: int,
                 queries: torch.Tensor | None = None) -> torch.Tensor:
    _check_weights(weights)
    _check_tokens(tokens)
    if weights.dim() < 3 or tuple(weights.shape[-3:]) != (*tokens.shape, tokens.shape[1]):
        raise ValueError(
            f"weights (..., B, L, L) must match tokens (B, L), got {tuple(weights.shape)} and "
            f"{tuple(tokens.shape)}"
        )
    targets = _match_targets(tokens, shift)  # (B, L, L)
    has_target = targets.any(dim=-1)  # (B, L): queries that have at least one target
    if queries is not None:
        if not isinstance(queries, torch.Tensor) or queries.dtype != torch.bool or (
                queries.shape != tokens.shape):
            raise ValueError(
                f"queries must be a bool tensor shaped like tokens {tuple(tokens.shape)}, got "
                f"{getattr(queries, 'dtype', type(queries).__name__)} "
                f"{tuple(getattr(queries, 'shape', ()))}"
            )
        has_target = has_target & queries
    if not bool(has_target.any()):
        raise ValueError("no query has an earlier copy of its token: the score is undefined")
    on_targets = (weights * targets.to(weights.dtype)).sum(dim=-1)  # (..., B, L)
    return on_targets[..., has_target].mean(dim=-1)  # (..., n_queries) -> (...)


def prefix_matching_score(weights: torch.Tensor, tokens: torch.Tensor,
                          queries: torch.Tensor | None = None) -> torch.Tensor:
    """Mean weight each query puts on the keys that follow an earlier copy of its token.

    For query ``i`` the targets are the keys ``j < i`` with ``tokens[j - 1] == tokens[i]``:
    "the token after the last time I saw this token", where an induction head looks. The score
    is the total weight on the targets, averaged over the queries that have at least one target
    (in the batch and across positions).

    Args:
        weights: ``(..., B, L, L)``; as for :func:`previous_token_score`, pass ``(h, B, L, L)``
            for one score per head.
        tokens: ``(B, L)`` int64, the sequences the weights were computed on.
        queries: optional ``(B, L)`` bool; if given, only the queries marked ``True`` (and
            having a target) count, e.g. the queries of a planted second copy, to separate
            them from chance repeats of a token.

    Returns:
        ``(...)`` scores in ``[0, 1]``.
    """
    return _match_score(weights, tokens, shift=1, queries=queries)


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

def _head_outputs(layer: MultiHeadSelfAttention, x_q: torch.Tensor, x_k: torch.Tensor,
                  x_v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each head's contribution to the residual stream, ``(B, h, L, E)``: head ``i``'s
    output times its block of columns of the output projection (bias excluded), with queries,
    keys and values projected from ``x_q``, ``x_k``, ``x_v`` (each ``(B, L, E)``)."""
    q = layer._split_heads(layer.q_proj(x_q))  # (B, h, L, d)
    k = layer._split_heads(layer.k_proj(x_k))  # (B, h, L, d)
    v = layer._split_heads(layer.v_proj(x_v))  # (B, h, L, d)
    heads, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, h, L, d)
    h, d = heads.shape[1], heads.shape[-1]
    w_o = layer.out_proj.weight.view(-1, h, d)  # (E, h * d) -> (E, h, d): W_o^T by head
    return torch.einsum("bhld,ehd->bhle", heads, w_o)  # (B, h, L, E)


def path_ablated_logits(model: AttentionOnlyTransformer, tokens: torch.Tensor,
                        heads: list[int] | tuple[int, ...], paths: str) -> torch.Tensor:
    """Logits with chosen layer-1 heads removed from some inputs of layer 2 only.

    Layer 2 (``model.layers[1]``) reads the residual stream ``x_1 = x_0 + MHSA_1(x_0)`` three
    times: its queries, keys and values are projections of ``x_1``. This function feeds the
    inputs named in ``paths`` (any of ``"q"``, ``"k"``, ``"v"``) with ``x_1`` minus the outputs
    of the layer-1 ``heads`` (each head's output through its columns of the output projection)
    and leaves everything else intact: the other inputs of layer 2, the residual stream that
    carries ``x_1`` to the unembedding, and any later layers. If the loss rises only when a
    head is removed from the queries, the head acts through the queries of layer 2
    (Q-composition); only from the keys, through the keys (K-composition).

    Args:
        model: an :class:`AttentionOnlyTransformer` with at least 2 layers.
        tokens: ``(B, L)`` int64.
        heads: indices of layer-1 heads, each in ``[0, h)``, no repeats (may be empty).
        paths: a non-empty string of distinct letters from ``"qkv"``.

    Returns:
        logits ``(B, L, V)``; with ``heads = []`` they equal ``model(tokens)``.
    """
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
    if model.num_layers < 2:
        raise ValueError(f"path ablation needs at least 2 layers, got {model.num_layers}")
    heads = list(heads)
    for i in heads:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < model.num_heads:
            raise ValueError(f"heads must be ints in [0, {model.num_heads}), got {heads}")
    if len(set(heads)) != len(heads):
        raise ValueError(f"heads must not repeat, got {heads}")
    if (not isinstance(paths, str) or not paths or set(paths) - set("qkv")
            or len(set(paths)) != len(paths)):
        raise ValueError(f"paths must be distinct letters from 'qkv', got {paths!r}")
    logits_ok = model(tokens)  # validates tokens; (B, L, V)
    if not heads:
        return logits_ok
    x1, per_head, mask = _first_layer(model, tokens)
    return _from_second_layer(model, x1, x1 - per_head[:, heads].sum(dim=1), paths, mask)


def _first_layer(model: AttentionOnlyTransformer, tokens: torch.Tensor):
    """The intact stream after layer 1, ``x1: (B, L, E)``, the layer-1 heads' outputs
    ``(B, h, L, E)`` (each through its block of the output projection) and the causal mask."""
    L = tokens.shape[1]
    mask = causal_mask(L, device=tokens.device)  # (L, L)
    x0 = model.embed(tokens) + model.pos_embed(torch.arange(L, device=tokens.device))
    first = model.layers[0]
    per_head = _head_outputs(first, x0, x0, x0, mask)  # (B, h, L, E)
    x1 = x0 + per_head.sum(dim=1) + first.out_proj.bias  # (B, L, E): the intact stream
    return x1, per_head, mask


def _from_second_layer(model: AttentionOnlyTransformer, x1: torch.Tensor,
                       x1_without: torch.Tensor, paths: str,
                       mask: torch.Tensor) -> torch.Tensor:
    """Layer 2 reads ``x1_without`` (``(B, L, E)``) in the inputs named in ``paths`` and
    ``x1`` in the others; the stream carries ``x1`` on; later layers run intact. Returns
    the logits ``(B, L, V)``."""
    inputs = [x1_without if p in paths else x1 for p in "qkv"]
    second = model.layers[1]
    x = x1 + _head_outputs(second, *inputs, mask).sum(dim=1) + second.out_proj.bias
    for layer in model.layers[2:]:
        out, _ = model._attend(layer, x, mask, None)
        x = x + out
    return model.unembed(x)  # (B, L, V)


def _check_layer(model: object, layer: object) -> None:
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
    if isinstance(layer, bool) or not isinstance(layer, int) or not (
            0 <= layer < model.num_layers):
        raise ValueError(f"layer must be an int in [0, {model.num_layers}), got {layer!r}")


def ov_circuits(model: AttentionOnlyTransformer, layer: int) -> torch.Tensor:
    """Each head's OV circuit from tokens to logits, ``W_E W_v^{(r)} W_o^{(r)} W_U``.

    With the book's row vectors, a head ``r`` that attends to a position holding token ``t``
    adds ``e_t W_v^{(r)} W_o^{(r)}`` to the residual stream (``e_t``: row ``t`` of the token
    embedding ``W_E``; ``W_v^{(r)}``: the head's ``(E, d_head)`` block of columns of the value
    projection; ``W_o^{(r)}``: its ``(d_head, E)`` block of rows of the output projection)
    and so ``e_t W_v^{(r)} W_o^{(r)} W_U`` to the logits. Row ``t`` of the head's matrix is
    that change of every logit. Biases, the position embedding and the earlier layers'
    contributions to the value are left out (the *direct* token path). Each matrix has rank
    at most ``d_head``. Computed in float64.

    Args:
        model: an :class:`AttentionOnlyTransformer`.
        layer: index of the layer, ``0 <= layer < num_layers``.

    Returns:
        ``(h, V, V)`` float64: entry ``[r, t, u]`` is how much attending to token ``t`` with
        head ``r`` (weight 1) raises the logit of token ``u``.
    """
    _check_layer(model, layer)
    lay = model.layers[layer]
    h = model.num_heads
    d = model.embed_dim // h
    with torch.no_grad():
        w_e = model.embed.weight.double()  # (V, E)
        w_u = model.unembed.weight.double().T  # (E, V)
        # x W_v with W_v = weight^T: (E, E) -> (E, h, d), column block r is head r
        w_v = lay.v_proj.weight.double().T.reshape(-1, h, d)
        # concat W_o with W_o = weight^T: (E, E) -> (h, d, E), row block r is head r
        w_o = lay.out_proj.weight.double().T.reshape(h, d, -1)
        # (V, E)(E, h, d) -> (h, V, d); then (h, V, d)(h, d, E) -> (h, V, E); then @ (E, V)
        return torch.einsum("ve,ehd->hvd", w_e, w_v) @ w_o @ w_u


def ov_copying_score(model: AttentionOnlyTransformer, layer: int) -> torch.Tensor:
    """Eigenvalue positivity of each head's OV circuit (:func:`ov_circuits`).

    The score of a ``(V, V)`` circuit ``M`` is ``sum_k Re(lambda_k) / sum_k |lambda_k|``
    over its eigenvalues: 1 when every non-zero eigenvalue is real and positive, -1 when
    every one is real and negative, near 0 for a random map. It is the summary
    Elhage et al. (2021) use for copying, and it is *not* a test that the head copies every
    token: ``M`` has rank at most ``d_head``, so at least ``V - d_head`` eigenvalues are 0,
    and a map that raises the logit of the token it reads only within a subspace of
    ``d_head`` tokens' directions (a positive semi-definite ``M`` of low rank, say) scores 1
    too. :func:`own_logit_ranks` asks the direct question, token by token.

    Args:
        model: an :class:`AttentionOnlyTransformer`.
        layer: index of the layer, ``0 <= layer < num_layers``.

    A head whose circuit is exactly zero (a dead head: every eigenvalue 0) neither copies
    nor suppresses; its score, 0/0 by the formula, is defined as 0.

    Returns:
        ``(h,)`` float64 scores in ``[-1, 1]``.
    """
    eig = torch.linalg.eigvals(ov_circuits(model, layer))  # (h, V) complex
    total = eig.abs().sum(-1)  # (h,): 0 only for a zero circuit, whose real sum is 0 too
    return eig.real.sum(-1) / total.clamp_min(torch.finfo(total.dtype).tiny)


def own_logit_ranks(circuit: torch.Tensor) -> torch.Tensor:
    """Rank of each token's own logit in its row of an OV circuit: 1 when it is the largest.

    For row ``t`` of ``circuit`` (what attending to token ``t`` adds to every logit) the rank
    is ``1 + #{u != t : circuit[..., t, u] >= circuit[..., t, t]}``: 1 when attending to
    ``t`` raises the logit of ``t`` strictly more than any other token's, ``V`` when it
    raises every other logit at least as much. A tie counts against the token, so a dead
    head (a row of zeros) ranks every token last rather than first. The share of ranks
    equal to 1 is the share of tokens the circuit copies in the strict sense: after reading
    them it favours them over every other token. Pass one head's ``(V, V)`` matrix, all heads'
    ``(h, V, V)`` (one rank per head and token), or a sum over heads (several heads that
    attend to the same token with weight 1 each).

    Args:
        circuit: ``(..., V, V)`` finite floating tensor, rows = the token read, columns = the
            logit raised.

    Returns:
        ``(..., V)`` int64 ranks in ``[1, V]``.
    """
    check_tensor("circuit", circuit)  # floating, at least 2 axes
    if circuit.shape[-1] != circuit.shape[-2]:
        raise ValueError(f"circuit must be square in its last two axes (..., V, V), got shape "
                         f"{tuple(circuit.shape)}")
    if not bool(torch.isfinite(circuit).all()):
        raise ValueError("circuit must be finite (no NaN or infinity)")
    own = torch.diagonal(circuit, dim1=-2, dim2=-1)  # (..., V): entry t is circuit[t, t]
    # (..., V, V) >= (..., V, 1) -> (..., V); the diagonal always counts itself once
    return (circuit >= own.unsqueeze(-1)).sum(-1)


def _check_targets(targets: object, tokens: torch.Tensor) -> torch.Tensor:
    B, L = tokens.shape
    if not isinstance(targets, torch.Tensor) or targets.dtype != torch.bool:
        raise TypeError(f"targets must be a bool tensor, got "
                        f"{getattr(targets, 'dtype', type(targets).__name__)}")
    if tuple(targets.shape) != (B, L - 1):
        raise ValueError(f"targets must be (B, L - 1) = {(B, L - 1)} for tokens {(B, L)}, "
                         f"got shape {tuple(targets.shape)}")
    if not bool(targets.any(-1).all()):
        raise ValueError("every sequence needs at least one target (a True in its row)")
    return targets


def sequence_losses(logits: torch.Tensor, tokens: torch.Tensor,
                    targets: torch.Tensor) -> torch.Tensor:
    """Each sequence's mean next-token loss over chosen targets.

    The tokens of one sequence are not independent samples; one number per sequence is what a
    standard error over sequences (:func:`attention_src.stats.mean_se`) needs.

    Args:
        logits: ``(B, L, V)``.
        tokens: ``(B, L)`` int64.
        targets: ``(B, L - 1)`` bool; ``targets[b, t]`` selects the loss on token ``t + 1``
            (as in :func:`next_token_losses`); every row needs at least one ``True``.

    Returns:
        ``(B,)``: sequence ``b``'s mean of ``next_token_losses`` over its targets.
    """
    losses = next_token_losses(logits, tokens)  # (B, L - 1); checks logits and tokens
    chosen = _check_targets(targets, tokens).to(losses.dtype)  # (B, L - 1)
    return (losses * chosen).sum(-1) / chosen.sum(-1)


def head_ablation_losses(model: AttentionOnlyTransformer, tokens: torch.Tensor,
                         targets: torch.Tensor, layer: int) -> dict[str, torch.Tensor]:
    """Per-sequence losses with one layer's heads zero-ablated: all of them, and all but one.

    A head is zero-ablated through the model's ``gates`` (its output times 0 before the
    output projection; the projection's bias stays). If the heads of ``layer`` were
    *redundant* (each able to do the job alone), keeping any one of them would recover most
    of the loss the layer's heads buy together; if they are *additive*, keeping head ``r``
    alone recovers about its share, and the shares sum to about 1.

    Args:
        model: an :class:`AttentionOnlyTransformer`.
        tokens: ``(B, L)`` int64.
        targets: ``(B, L - 1)`` bool, as in :func:`sequence_losses`.
        layer: the layer whose heads are ablated, ``0 <= layer < num_layers``.

    Returns:
        a dict of per-sequence mean losses on the targets (see :func:`sequence_losses`):
        ``"intact"`` ``(B,)``; ``"none"`` ``(B,)``, every head of ``layer`` off; ``"only"``
        ``(h, B)``, row ``r`` with head ``r`` the only one of ``layer`` on. Every other layer
        stays intact. (A single head off is ``model(tokens, gates=...)`` with one zero.)
    """
    _check_layer(model, layer)
    _check_tokens(tokens)  # the model checks the ids against its vocabulary
    _check_targets(targets, tokens)
    h = model.num_heads

    def loss(gates: torch.Tensor | None) -> torch.Tensor:  # gates: (layers, h) -> (B,)
        with torch.no_grad():  # gates of 0 and 1 are exact in any float dtype
            return sequence_losses(model(tokens, gates=gates), tokens, targets)

    none = torch.ones(model.num_layers, h, device=tokens.device)  # (layers, h)
    none[layer] = 0.0
    only = []
    for r in range(h):
        g_only = none.clone()
        g_only[layer, r] = 1.0
        only.append(loss(g_only))
    return {"intact": loss(None), "none": loss(none),
            "only": torch.stack(only)}  # (B,), (B,), (h, B)


def path_ablation_rises(model: AttentionOnlyTransformer, tokens: torch.Tensor,
                        targets: torch.Tensor) -> torch.Tensor:
    """Rise in each sequence's target loss when one layer-1 head leaves one input of layer 2.

    For each layer-1 head ``r`` and each input ``p`` of layer 2 (queries, keys, values),
    :func:`path_ablated_logits` removes head ``r`` from input ``p`` alone; the rise is the
    per-sequence loss (:func:`sequence_losses`) minus the intact model's, paired sequence by
    sequence. A large rise at ``p = "q"`` says head ``r`` acts through layer 2's queries
    (Q-composition), at ``"k"`` through its keys (K-composition); a *negative* rise says
    the model does better without the head on that path.

    Args:
        model: an :class:`AttentionOnlyTransformer` with at least 2 layers.
        tokens: ``(B, L)`` int64.
        targets: ``(B, L - 1)`` bool, as in :func:`sequence_losses`.

    Returns:
        ``(h, 3, B)``: entry ``[r, p, b]`` for head ``r``, path ``p`` in the order
        ``q, k, v``, sequence ``b``; :func:`attention_src.stats.mean_se` over the last axis
        gives each mean rise and its standard error.
    """
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
    if model.num_layers < 2:
        raise ValueError(f"path ablation needs at least 2 layers, got {model.num_layers}")
    _check_tokens(tokens)  # the intact forward pass checks the ids against the vocabulary
    _check_targets(targets, tokens)
    with torch.no_grad():
        intact = sequence_losses(model(tokens), tokens, targets)  # (B,); checks the length
        # layer 1 once; then, per head and input, layer 2 onwards (path_ablated_logits
        # with one head, without recomputing what does not change)
        x1, per_head, mask = _first_layer(model, tokens)
        rises = [[sequence_losses(_from_second_layer(model, x1, x1 - per_head[:, r], p, mask),
                                  tokens, targets) - intact for p in "qkv"]
                 for r in range(model.num_heads)]
    return torch.stack([torch.stack(row) for row in rises])  # (h, 3, B)


def mean_ablated_logits(model: AttentionOnlyTransformer, tokens: torch.Tensor,
                        heads: list[tuple[int, int]] | tuple[tuple[int, int], ...],
                        reference: torch.Tensor) -> torch.Tensor:
    """Logits with chosen heads *mean-ablated*: each one's output replaced by its mean.

    Zero-ablation (``gates``) sets a head's output to 0, a value it may never take, so the
    later layers see a residual stream unlike any in training and the loss may rise for that
    reason alone. Mean-ablation replaces head ``(layer, r)``'s contribution to the residual
    stream (its output through its block of the output projection) at position ``i`` by the
    mean of that contribution over the sequences of ``reference`` at position ``i``, in the
    intact model: what the head writes on average, without what it writes for *this*
    sequence.

    Args:
        model: an :class:`AttentionOnlyTransformer`.
        tokens: ``(B, L)`` int64.
        heads: ``(layer, head)`` pairs, no repeats (may be empty).
        reference: ``(B_r, L)`` int64 sequences whose mean output replaces the heads',
            ``B_r >= 1``, the same ``L`` as ``tokens``.

    Returns:
        logits ``(B, L, V)``; with ``heads = []`` they equal ``model(tokens)``.
    """
    if not isinstance(model, AttentionOnlyTransformer):
        raise TypeError(f"model must be an AttentionOnlyTransformer, got {type(model).__name__}")
    _check_tokens(tokens, model.vocab_size)
    _check_tokens(reference, model.vocab_size)
    if reference.shape[1] != tokens.shape[1] or reference.shape[0] == 0:
        raise ValueError(f"reference (B_r, L) must have B_r >= 1 and the L of tokens "
                         f"{tuple(tokens.shape)}, got shape {tuple(reference.shape)}")
    pairs = list(heads)
    for pair in pairs:
        if (not isinstance(pair, tuple) or len(pair) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) for v in pair)
                or not 0 <= pair[0] < model.num_layers or not 0 <= pair[1] < model.num_heads):
            raise ValueError(f"heads must be (layer, head) pairs of ints in "
                             f"[0, {model.num_layers}) x [0, {model.num_heads}), got {pairs}")
    if len(set(pairs)) != len(pairs):
        raise ValueError(f"heads must not repeat, got {pairs}")
    if not pairs:
        return model(tokens)  # (B, L, V)
    L = tokens.shape[1]
    if not 1 <= L <= model.max_len:
        raise ValueError(f"sequence length {L} must lie in [1, max_len = {model.max_len}]")
    mask = causal_mask(L, device=tokens.device)  # (L, L)
    positions = torch.arange(L, device=tokens.device)  # (L,)

    def run(seqs: torch.Tensor, means: list[torch.Tensor] | None):
        """The residual stream through every layer; per layer, the heads' (B, h, L, E)
        outputs (as computed, before any replacement)."""
        x = model.embed(seqs) + model.pos_embed(positions)  # (B, L, E)
        outputs = []
        for n, layer in enumerate(model.layers):
            per_head = _head_outputs(layer, x, x, x, mask)  # (B, h, L, E)
            outputs.append(per_head)
            if means is not None:
                off = [r for (lay, r) in pairs if lay == n]
                per_head = per_head.clone()
                per_head[:, off] = means[n][off]  # (len(off), L, E) broadcast over B
            x = x + per_head.sum(dim=1) + layer.out_proj.bias  # (B, L, E)
        return x, outputs

    _, ref_outputs = run(reference, None)
    means = [out.mean(dim=0) for out in ref_outputs]  # each (h, L, E): mean over B_r
    x, _ = run(tokens, means)
    return model.unembed(x)  # (B, L, V)


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
            called with the logits ``(B_e, L, V)`` and the list of the layers' weights
            ``(B_e, h, L, L)``, both computed in eval and no-grad mode (the model is back in
            training mode after it returns); the dicts it returns are collected.

    The tokens of each batch and ``eval_tokens`` are moved to the model's device (they may
    be made on the CPU).

    Returns:
        ``{"losses": (steps,) float tensor, "evals": list of (step, dict)}``.
    """
    check_positive_int("steps", steps)
    if isinstance(eval_every, bool) or not isinstance(eval_every, int) or eval_every < 0:
        raise ValueError(f"eval_every must be an int >= 0 (0: no evaluation), got {eval_every!r}")
    if eval_every and (eval_tokens is None or on_eval is None):
        raise ValueError("eval_every needs eval_tokens and on_eval")
    optimizer = Adam(model.parameters(), lr=lr)
    losses, evals = [], []
    device = module_device(model)
    if isinstance(eval_tokens, torch.Tensor):  # anything else: the model's checks name it
        eval_tokens = eval_tokens.to(device)

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
        if isinstance(tokens, torch.Tensor):
            tokens = tokens.to(device)
        loss = next_token_losses(model(tokens), tokens).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if eval_every:
        evaluate(steps)
    model.eval()
    return {"losses": torch.tensor(losses), "evals": evals}
