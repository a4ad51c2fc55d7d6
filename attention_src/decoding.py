"""Decoding a trained encoder-decoder :class:`~attention_src.transformer.Transformer`:
greedy search and beam search, each with or without a KV cache.

The encoder runs once: its memory ``(B, S, E)`` serves every step. Then the decoder emits one
token per step, starting from a start token, until every sequence has emitted the end token
or ``max_steps`` tokens.

Without a cache a step runs the decoder on the whole prefix ``(N, n)`` and keeps the last
position. With one, a step runs the decoder on the newest token ``(N, 1)`` only:

* each decoder layer's self-attention appends the new token's keys and values to its
  :class:`~attention_src.efficient.KVCache` (chapter 9's) and attends to all of them; no mask
  is needed, since the newest token may see every earlier one;
* each layer's cross-attention keys and values, projections of the memory, are computed once
  before the first step;
* in a rotary model (``positional="rotary"``) the newest query and key are rotated at the
  newest position before the key is cached: the cache holds rotated keys, each rotated once
  at its own position, exactly what the full pass computes;
* the feed-forward network and the layer norms act on each position alone, so the newest
  position's result does not depend on whether the earlier ones are recomputed.

The two give the same logits up to rounding, so the same tokens (tested). Beam search keeps
``beam_width`` hypotheses per source sentence as ``N = B * beam_width`` rows; when the best
continuations come from other hypotheses, the rows are reordered, the caches' too
(:class:`BeamKVCache`).
"""

from __future__ import annotations

import math
import numbers

import torch

from attention_src.attention import scaled_dot_product_attention
from attention_src.efficient import KVCache
from attention_src.positional import apply_rotary
from attention_src.softmax import causal_mask
from attention_src.transformer import Transformer, _check_padding
from attention_src.validation import check_positive_int

__all__ = ["BeamKVCache", "greedy_decode", "beam_search", "length_penalty"]


class BeamKVCache(KVCache):
    """Chapter 9's :class:`~attention_src.efficient.KVCache` whose rows can be reordered:
    beam search continues hypothesis ``index[i]`` in row ``i``."""

    def reorder(self, index: torch.Tensor) -> None:
        """Row ``i`` of the cache becomes row ``index[i]`` (``index: (N,)`` int64)."""
        if self._keys is None:
            return
        self._keys = self._keys.index_select(0, index)  # (N, h, capacity, d_k)
        self._values = self._values.index_select(0, index)  # (N, h, capacity, d_v)


def length_penalty(length: torch.Tensor | int, alpha: float) -> torch.Tensor | float:
    """GNMT's length normalisation (Wu et al., 2016, eq. 14): ``((5 + |Y|) / 6) ** alpha``.

    A hypothesis's score is its total log-probability divided by this: ``alpha = 0`` compares
    raw totals (which favour short outputs, each token adding a negative log-probability),
    ``alpha = 1`` is close to dividing by the length."""
    return ((5.0 + length) / 6.0) ** alpha


class _Stepper:
    """One decoder step at a time for ``N`` rows: ``step(tokens: (N, 1)) -> log-probabilities
    (N, V)`` of the next token; ``reorder(index)`` continues row ``index[i]`` in row ``i``.

    Beam search gives each sentence ``k`` consecutive rows with copies of the same memory, and
    reorders only within a sentence's rows; so ``reorder`` moves what differs between a
    sentence's hypotheses (the self-attention caches, or the prefix) and leaves the memory and
    the cross-attention keys and values, equal in all of those rows, where they are."""

    def __init__(self, model: Transformer, memory: torch.Tensor,
                 memory_mask: torch.Tensor | None, use_cache: bool, max_steps: int):
        self.model, self.memory, self.memory_mask = model, memory, memory_mask
        self.use_cache = use_cache
        self.prefix: torch.Tensor | None = None  # (N, n) tokens so far, without a cache
        self.length = 0
        if use_cache:
            self.caches = [BeamKVCache(max_len=max_steps) for _ in model.decoder_layers]
            # cross-attention keys and values, once: (N, S, E) -> (N, h, S, d_head), stored
            # contiguous, as every step's matrix products read them
            self.cross = [(layer.cross_attn._split_heads(layer.cross_attn.k_proj(memory))
                           .contiguous(),
                           layer.cross_attn._split_heads(layer.cross_attn.v_proj(memory))
                           .contiguous())
                          for layer in model.decoder_layers]
            # (N, 1, S) -> (N, 1, 1, S): one row of keys for every head and the one query
            self.cross_mask = None if memory_mask is None else memory_mask[:, None]

    def reorder(self, index: torch.Tensor) -> None:
        """``index: (N,)``, each row's new source among the rows of its own sentence."""
        if self.use_cache:
            for cache in self.caches:
                cache.reorder(index)
        elif self.prefix is not None:
            self.prefix = self.prefix.index_select(0, index)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        model = self.model
        if not self.use_cache:
            self.prefix = tokens if self.prefix is None else torch.cat([self.prefix, tokens], 1)
            n = self.prefix.shape[1]
            states = model.decode(self.prefix, self.memory,
                                  causal_mask(n, device=tokens.device), self.memory_mask)
            logits = model.output(states[:, -1])  # (N, n, E) -> last position -> (N, V)
        else:
            x = model._embed(model.tgt_embed, tokens, start=self.length)  # (N, 1, E)
            for layer, cache, cross in zip(model.decoder_layers, self.caches, self.cross,
                                           strict=True):
                x = self._layer_step(layer, x, cache, cross)
            if model.decoder_norm is not None:
                x = model.decoder_norm(x)
            logits = model.output(x[:, 0])  # (N, V)
        self.length += 1
        return torch.log_softmax(logits, dim=-1)

    def _layer_step(self, layer, x, cache, cross):
        """One :class:`~attention_src.transformer.DecoderBlock` on the newest position ``x:
        (N, 1, E)``, with its sublayers in the block's order (eval mode: no dropout)."""
        def self_attention(y):
            attn = layer.self_attn
            q = attn._split_heads(attn.q_proj(y))  # (N, 1, E) -> (N, h, 1, d_head)
            k = attn._split_heads(attn.k_proj(y))  # (N, h, 1, d_head)
            if layer.rotary:  # the newest position is self.length; cached keys stay rotated
                position = torch.tensor([self.length], device=y.device)  # (1,)
                q, k = apply_rotary(q, position), apply_rotary(k, position)
            keys, values = cache.append(k, attn._split_heads(attn.v_proj(y)))  # (N, h, n, d)
            heads, _ = scaled_dot_product_attention(q, keys, values)  # (N, h, 1, d_head)
            return attn.out_proj(_merge(heads))  # (N, 1, E)

        def cross_attention(y):
            attn = layer.cross_attn
            q = attn._split_heads(attn.q_proj(y))  # (N, h, 1, d_head)
            heads, _ = scaled_dot_product_attention(q, *cross, self.cross_mask)
            return attn.out_proj(_merge(heads))  # (N, 1, E)

        def feed_forward(y):
            return layer._ff_block(y, layer.dropout3)

        for sublayer, norm in ((self_attention, layer.norm1), (cross_attention, layer.norm2),
                               (feed_forward, layer.norm3)):
            x = x + sublayer(norm(x)) if layer.norm_first else norm(x + sublayer(x))
        return x


def _merge(heads: torch.Tensor) -> torch.Tensor:
    N, h, t, d = heads.shape
    return heads.transpose(1, 2).reshape(N, t, h * d)  # (N, h, t, d) -> (N, t, h*d)


def _check_decoding(model, src, src_padding, bos, eos, max_steps, use_cache):
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    model._check_tokens("src", src, model.src_vocab_size)
    _check_padding("src_padding", src_padding, src)
    for name, value in (("bos", bos), ("eos", eos)):
        if isinstance(value, bool) or not isinstance(value, int) or not (
                0 <= value < model.tgt_vocab_size):
            raise ValueError(f"{name} must be a target token id in [0, "
                             f"{model.tgt_vocab_size}), got {value!r}")
    check_positive_int("max_steps", max_steps)
    if max_steps + 1 > model.max_len:
        raise ValueError(f"max_steps + 1 = {max_steps + 1} target positions exceed the "
                         f"model's max_len = {model.max_len}")
    if not isinstance(use_cache, bool):
        raise TypeError(f"use_cache must be a bool, got {type(use_cache).__name__}")


def _encode(model, src, src_padding):
    memory_mask = None if src_padding is None else src_padding[:, None, :]  # (B, 1, S)
    return model.encode(src, memory_mask), memory_mask  # (B, S, E)


def greedy_decode(model: Transformer, src: torch.Tensor, bos: int, eos: int, max_steps: int,
                  src_padding: torch.Tensor | None = None,
                  use_cache: bool = True) -> torch.Tensor:
    """The most probable next token at every step.

    Args:
        model: a :class:`~attention_src.transformer.Transformer` (decoded in eval mode, its
            mode restored afterwards).
        src: ``(B, S)`` source ids; ``src_padding``: ``(B, S)``, ``True`` = real token.
        bos, eos: the target's start and end token ids.
        max_steps: the most tokens to emit; ``max_steps + 1 <= model.max_len``.
        use_cache: decode with KV caches (one step costs ``O(n)``) or by recomputing the
            prefix (``O(n**2)``); the same tokens.

    Returns:
        tokens: ``(B, 1 + n)`` int64, ``bos`` then the emitted tokens; ``n <= max_steps``
        stops at the step where every row has emitted ``eos``; after its ``eos`` a row
        holds ``eos``.
    """
    _check_decoding(model, src, src_padding, bos, eos, max_steps, use_cache)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory, memory_mask = _encode(model, src, src_padding)
            stepper = _Stepper(model, memory, memory_mask, use_cache, max_steps)
            out = torch.full((src.shape[0], 1), bos, dtype=torch.int64, device=src.device)
            done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
            for _ in range(max_steps):
                logp = stepper.step(out[:, -1:])  # (B, V)
                token = logp.argmax(dim=-1).masked_fill(done, eos)  # (B,)
                out = torch.cat([out, token[:, None]], dim=1)
                done |= token == eos
                if bool(done.all()):
                    break
            return out
    finally:
        model.train(was_training)


def beam_search(model: Transformer, src: torch.Tensor, bos: int, eos: int, max_steps: int,
                beam_width: int = 4, alpha: float = 0.6,
                src_padding: torch.Tensor | None = None,
                use_cache: bool = True) -> tuple[list[list[int]], torch.Tensor]:
    """Beam search: keep the ``beam_width`` most probable prefixes of each source sentence.

    At each step every live hypothesis is extended by every token, and the ``2 * beam_width``
    best extensions (by total log-probability) are looked at: one that ends in ``eos`` is
    finished, scored by its total log-probability divided by :func:`length_penalty`
    (``alpha``); the ``beam_width`` best of the others stay live. Finished hypotheses never
    take a live one's place, so a model that gives ``eos`` a little probability at every step
    (as label smoothing teaches it to) cannot fill the beam with cut-off outputs. A sentence
    stops when no live hypothesis can beat its best finished one (a live hypothesis with
    log-probability ``s <= 0`` ends with a score of at most ``s / length_penalty(max_steps)``),
    or after ``max_steps``; then its best finished hypothesis wins (its best live one if none
    finished). With ``beam_width=1`` the live hypothesis follows greedy search, so the result
    is greedy search's output or one the model scores higher.

    Args:
        model, src, bos, eos, max_steps, src_padding, use_cache: as for
            :func:`greedy_decode`.
        beam_width: hypotheses kept per sentence, ``k >= 1``.
        alpha: the length normalisation's exponent, ``>= 0`` (0: none).

    Returns:
        tokens: one list per sentence, the winner's emitted ids (without ``bos``, ending with
        ``eos`` if it finished).
        scores: ``(B,)`` float64, the winners' normalised scores.
    """
    _check_decoding(model, src, src_padding, bos, eos, max_steps, use_cache)
    check_positive_int("beam_width", beam_width)
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not (
            math.isfinite(alpha) and alpha >= 0):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")
    B, k, device = src.shape[0], beam_width, src.device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            memory, memory_mask = _encode(model, src, src_padding)
            # every sentence's memory once per hypothesis: (B, S, E) -> (B*k, S, E)
            memory = memory.repeat_interleave(k, dim=0)
            if memory_mask is not None:
                memory_mask = memory_mask.repeat_interleave(k, dim=0)  # (B*k, 1, S)
            stepper = _Stepper(model, memory, memory_mask, use_cache, max_steps)
            tokens = torch.full((B * k, 1), bos, dtype=torch.int64, device=device)
            # one live hypothesis per sentence at first: the others start at -inf
            score = torch.full((B, k), -math.inf, dtype=torch.float64, device=device)
            score[:, 0] = 0.0
            finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
            done = [False] * B
            bound_penalty = length_penalty(max_steps, alpha)
            for step in range(1, max_steps + 1):
                logp = stepper.step(tokens[:, -1:]).double()  # (B*k, V)
                V = logp.shape[-1]
                total = (score.reshape(B * k, 1) + logp).reshape(B, k * V)  # (B, k*V)
                # 2k candidates: even if k of them end here, k can stay live
                cand, flat = total.topk(min(2 * k, k * V), dim=-1)  # (B, 2k) each
                origin = flat // V  # which hypothesis each extension continues
                token = flat % V
                ended = (token == eos) & torch.isfinite(cand)  # (B, 2k)
                for b, j in ended.nonzero().tolist():
                    if not done[b]:
                        prefix = tokens[b * k + int(origin[b, j]), 1:].tolist()
                        finished[b].append((float(cand[b, j]) / length_penalty(step, alpha),
                                            prefix + [eos]))
                # the k best extensions that did not end stay live
                score, keep = cand.masked_fill(ended, -math.inf).topk(k, dim=-1)  # (B, k)
                rows = (torch.arange(B, device=device)[:, None] * k
                        + origin.gather(1, keep)).flatten()  # (B*k,)
                tokens = torch.cat([tokens.index_select(0, rows),
                                    token.gather(1, keep).reshape(-1, 1)], 1)
                stepper.reorder(rows)
                for b in range(B):
                    best_live = float(score[b].max())
                    if not math.isfinite(best_live):
                        done[b] = True
                    elif finished[b] and not done[b]:
                        # no continuation of a live hypothesis can score above this
                        done[b] = max(f[0] for f in finished[b]) >= best_live / bound_penalty
                if all(done):
                    break
            out, scores = [], []
            for b in range(B):
                candidates = list(finished[b]) or [
                    (float(score[b, j]) / length_penalty(tokens.shape[1] - 1, alpha),
                     tokens[b * k + j, 1:].tolist())
                    for j in range(k) if math.isfinite(float(score[b, j]))]
                best_score, best_tokens = max(candidates, key=lambda c: c[0])
                out.append(best_tokens)
                scores.append(best_score)
            return out, torch.tensor(scores, dtype=torch.float64)
    finally:
        model.train(was_training)
