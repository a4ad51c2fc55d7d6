"""Recurrent encoder-decoders, with and without attention (chapters 1 and 2).

The notation is the book's (``book/notation.md``): row vectors, so a linear map multiplies from
the right (``x W``); ``L_k`` source positions (the keys) and ``L_q`` output steps (the queries);
``d_k`` the width of an annotation, ``d_q`` the width of a decoder state; ``alpha_ij`` the weight
that output step ``i`` gives source position ``j``, and ``s_ij`` its score.

* :class:`GRUEncoder` reads the source into one row vector per position (its "annotations"
  ``h_j``, the keys and values) and a final summary.
* :class:`ContextDecoder` is the classic encoder-decoder of Cho et al. (2014): every output
  step sees the **same** context vector ``C`` (the encoder's summary).
* :class:`AttentionDecoder` is Bahdanau et al. (2015): step ``i`` scores its previous state
  ``s_{i-1}`` (the query) against every ``h_j``, giving scores ``s_ij`` (Bahdanau et al. write
  ``e_ij``), turns them into weights ``alpha_ij`` and reads its own context
  ``c_i = sum_j alpha_ij h_j``; then ``s_i = GRU([emb(y_{i-1}); c_i], s_{i-1})``.
  Any scoring function of :mod:`attention_src.scoring` can be plugged in.
* :class:`Seq2Seq` joins an encoder and a decoder: teacher-forced ``forward`` for training and
  ``greedy_decode`` for inference, both returning the attention weights when there are any.
* :func:`build_gru_seq2seq` builds the matched pair compared in chapter 1: the same
  bidirectional encoder with a :class:`ContextDecoder` or an additive-attention
  :class:`AttentionDecoder`.
* :func:`build_scored_seq2seq` builds chapter 2's bake-off models: an attention decoder with
  any scoring function, every part from its own seed, so that models differing only in the
  score start from the same encoder and decoder weights.

Every module and builder here takes a ``device=`` keyword (the modules ``dtype=`` too): the
weights are drawn on the CPU as without it and then moved (:func:`attention_src.utils.place`),
so a seed gives the same weights on every device. Inputs go on the model's device (``src_len``
may stay on the CPU).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from attention_src.scoring import AdditiveScore, Attention, Score
from attention_src.softmax import lengths_to_mask
from attention_src.utils import place
from attention_src.validation import check_positive_int

__all__ = ["GRUEncoder", "ContextDecoder", "AttentionDecoder", "Seq2Seq", "build_gru_seq2seq",
           "build_scored_seq2seq"]


def _check_ids(name: str, ids: torch.Tensor, rank: int) -> None:
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.long:
        raise TypeError(f"{name} must be a torch.long tensor of token ids")
    if ids.dim() != rank:
        raise ValueError(f"{name} must have {rank} dimensions, got shape {tuple(ids.shape)}")


class GRUEncoder(nn.Module):
    """Embedding + (bidirectional) GRU over a padded batch of source ids.

    ``forward(src: (B, L_k) long, src_len: (B,)) -> (annotations: (B, L_k, d_k),
    summary: (B, d_k))``, where ``L_k`` is the padded source length and the width
    ``d_k = output_dim = hidden_dim * (2 if bidirectional else 1)``. Row ``j`` of
    ``annotations`` is ``h_j``; padded positions are zero. ``summary`` is the last real state
    (both directions concatenated), the fixed-size context vector ``C`` of a decoder without
    attention.
    """

    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int,
                 bidirectional: bool = True, pad_id: int = 0, *,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        for name, v in (("vocab_size", vocab_size), ("embed_dim", embed_dim),
                        ("hidden_dim", hidden_dim)):
            check_positive_int(name, v)
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.rnn = nn.GRU(embed_dim, hidden_dim, batch_first=True, bidirectional=bidirectional)
        self.output_dim = hidden_dim * (2 if bidirectional else 1)
        place(self, device, dtype)

    def forward(self, src: torch.Tensor, src_len: torch.Tensor):
        _check_ids("src", src, 2)
        if not isinstance(src_len, torch.Tensor) or src_len.is_floating_point():
            raise TypeError("src_len must be an integer torch.Tensor of source lengths")
        if src_len.shape != (src.shape[0],):
            raise ValueError(f"src_len must be ({src.shape[0]},), got {tuple(src_len.shape)}")
        packed = pack_padded_sequence(self.embedding(src), src_len.cpu(), batch_first=True,
                                      enforce_sorted=False)
        out, h_n = self.rnn(packed)  # h_n: (num_directions, B, hidden)
        annotations, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        summary = h_n.transpose(0, 1).reshape(src.shape[0], -1)  # (B, dirs*hidden)
        return annotations, summary


class ContextDecoder(nn.Module):
    """GRU decoder conditioned on one fixed context vector ``C`` at every step (no attention).

    With row vectors: ``s_0 = tanh(C W_init + b)``, ``s_i = GRU([emb(y_{i-1}); C], s_{i-1})``,
    ``logits_i = [s_i; C; emb(y_{i-1})] W_o + b_o`` (``init_state``, ``rnn`` and ``output``;
    each ``nn.Linear`` stores the transpose of its ``W``).
    ``forward(tgt_in: (B, L_q), annotations: (B, L_k, d_k), summary: (B, d_k), src_len,
    state=None) -> (logits: (B, L_q, vocab_size), None, state: (1, B, d_q))``, with
    ``d_k = context_dim`` and ``d_q = hidden_dim``; ``annotations`` and ``src_len`` are
    accepted for a common interface and ignored: the decoder sees only ``summary`` (``C``).
    Pass the returned ``state`` back in to continue decoding.
    """

    has_attention = False

    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int, context_dim: int,
                 pad_id: int = 0, *,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.init_state = nn.Linear(context_dim, hidden_dim)
        self.rnn = nn.GRU(embed_dim + context_dim, hidden_dim, batch_first=True)
        self.output = nn.Linear(hidden_dim + context_dim + embed_dim, vocab_size)
        place(self, device, dtype)

    def forward(self, tgt_in, annotations, summary, src_len, state=None):
        emb = self.embedding(tgt_in)  # (B, L_t, e)
        context = summary.unsqueeze(1).expand(-1, tgt_in.shape[1], -1)  # (B, L_t, c): same C
        if state is None:
            state = torch.tanh(self.init_state(summary)).unsqueeze(0)  # (1, B, hidden)
        states, state = self.rnn(torch.cat([emb, context], dim=-1), state)  # (B, L_t, hidden)
        logits = self.output(torch.cat([states, context, emb], dim=-1))
        return logits, None, state


class AttentionDecoder(nn.Module):
    """Bahdanau-style GRU decoder that attends over the encoder annotations at every step.

    With row vectors, at output step ``i``: scores ``s_ij = score(s_{i-1}, h_j)`` for every
    real source position ``j``, weights ``alpha_ij = softmax_j(s_ij)``,
    ``c_i = sum_j alpha_ij h_j``, ``s_i = GRUCell([emb(y_{i-1}); c_i], s_{i-1})`` and
    ``logits_i = [s_i; c_i; emb(y_{i-1})] W_o + b_o``; the first query is
    ``s_0 = tanh(C W_init + b)``.

    ``score`` is any :class:`attention_src.scoring.Score` taking queries of width
    ``d_q = hidden_dim`` and keys of width ``d_k = context_dim`` (dot-product scores need the
    two equal).

    ``forward(tgt_in: (B, L_q), annotations: (B, L_k, d_k), summary: (B, d_k), src_len: (B,),
    state=None) -> (logits: (B, L_q, vocab_size), weights: (B, L_q, L_k), state: (B, d_q))``;
    row ``i`` of ``weights`` holds ``alpha_i1 .. alpha_iL_k``. ``src_len`` must be on the
    device of ``annotations`` (:class:`Seq2Seq` moves it there).
    """

    has_attention = True

    def __init__(self, vocab_size: int, embed_dim: int, hidden_dim: int, context_dim: int,
                 score: Score, pad_id: int = 0, *,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=pad_id)
        self.init_state = nn.Linear(context_dim, hidden_dim)
        self.attention = Attention(score)
        self.cell = nn.GRUCell(embed_dim + context_dim, hidden_dim)
        self.output = nn.Linear(hidden_dim + context_dim + embed_dim, vocab_size)
        place(self, device, dtype)

    def forward(self, tgt_in, annotations, summary, src_len, state=None):
        emb = self.embedding(tgt_in)  # (B, L_t, e)
        mask = lengths_to_mask(src_len, annotations.shape[1])[:, None, :]  # (B, 1, L_s)
        s = torch.tanh(self.init_state(summary)) if state is None else state  # (B, hidden)
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            # query = previous state s_{t-1}: (B, hidden) -> (B, 1, hidden)
            context, alpha = self.attention(s.unsqueeze(1), annotations, annotations, mask)
            context = context.squeeze(1)  # (B, 1, c) -> (B, c)
            s = self.cell(torch.cat([emb[:, t], context], dim=-1), s)  # (B, hidden)
            logits.append(self.output(torch.cat([s, context, emb[:, t]], dim=-1)))
            weights.append(alpha.squeeze(1))  # (B, 1, L_s) -> (B, L_s)
        return torch.stack(logits, dim=1), torch.stack(weights, dim=1), s


class Seq2Seq(nn.Module):
    """An encoder and a decoder.

    ``forward(src: (B, L_k), src_len: (B,), tgt_in: (B, L_q)) -> (logits: (B, L_q,
    vocab_size), weights: (B, L_q, L_k) or None)``, teacher-forced: ``L_k`` source positions,
    ``L_q`` output steps, ``weights[b, i, j] = alpha_ij``. ``src_len`` may be on the CPU (as
    ``pack_padded_sequence`` wants it) or on the model's device.
    """

    def __init__(self, encoder: GRUEncoder, decoder: ContextDecoder | AttentionDecoder, *,
                 device: str | torch.device | None = None, dtype: torch.dtype | None = None):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder
        place(self, device, dtype)

    def forward(self, src, src_len, tgt_in):
        _check_ids("tgt_in", tgt_in, 2)
        annotations, summary = self.encoder(src, src_len)
        src_len = src_len.to(annotations.device)  # it may be on the CPU, as packing wants it
        logits, weights, _ = self.decoder(tgt_in, annotations, summary, src_len)
        return logits, weights

    def greedy_decode(self, src: torch.Tensor, src_len: torch.Tensor, steps: int, bos_id: int):
        """Decode ``steps`` tokens, feeding back each step's most likely token.

        Returns:
            tokens: ``(B, steps)`` long; weights: ``(B, steps, L_k)`` or ``None``.
        """
        with torch.no_grad():
            check_positive_int("steps", steps)
            annotations, summary = self.encoder(src, src_len)
            src_len = src_len.to(annotations.device)  # it may be on the CPU, as packing wants
            y = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
            state, tokens, weights = None, [], []
            for _ in range(steps):
                logits, alpha, state = self.decoder(y, annotations, summary, src_len, state=state)
                y = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
                tokens.append(y)
                if alpha is not None:
                    weights.append(alpha)
            tokens = torch.cat(tokens, dim=1)
            return tokens, (torch.cat(weights, dim=1) if weights else None)


def build_gru_seq2seq(
    vocab_size: int, embed_dim: int, hidden_dim: int, attention: bool,
    decoder_hidden_dim: int | None = None, seed: int = 0, pad_id: int = 0, *,
    device: str | torch.device | None = None,
) -> Seq2Seq:
    """A bidirectional-GRU encoder with a decoder that does or does not attend.

    The two variants share everything but the decoder: ``attention=False`` gives a
    :class:`ContextDecoder` (one fixed context ``C`` for every step, Cho et al. 2014),
    ``attention=True`` an :class:`AttentionDecoder` with an
    :class:`~attention_src.scoring.AdditiveScore`, ``s_ij = tanh(s_{i-1} W_q + h_j W_k) w_v``,
    whose hidden width ``d_a`` is ``decoder_hidden_dim`` (Bahdanau et al. 2015). Source and
    target share one vocabulary of ``vocab_size`` ids.

    Args:
        vocab_size, embed_dim: vocabulary size and embedding width (encoder and decoder).
        hidden_dim: GRU width of each encoder direction; the annotations have
            ``d_k = 2 * hidden_dim`` features.
        attention: whether the decoder attends.
        decoder_hidden_dim: the decoder GRU width ``d_q`` and, with attention, the additive
            score's hidden width ``d_a`` (default ``hidden_dim``).
        seed: ``torch.manual_seed`` before the parameters are created, so a seed fixes them.
        device: where the model goes, after its weights are drawn on the CPU (the same
            weights on every device).

    Returns:
        an untrained :class:`Seq2Seq`.
    """
    check_positive_int("hidden_dim", hidden_dim)
    dec_dim = hidden_dim if decoder_hidden_dim is None else decoder_hidden_dim
    check_positive_int("decoder_hidden_dim", dec_dim)
    if not isinstance(attention, bool):
        raise TypeError(f"attention must be a bool, got {type(attention).__name__}")
    torch.manual_seed(seed)
    encoder = GRUEncoder(vocab_size, embed_dim, hidden_dim, bidirectional=True, pad_id=pad_id)
    if attention:
        score = AdditiveScore(dec_dim, encoder.output_dim, dec_dim)
        decoder = AttentionDecoder(vocab_size, embed_dim, dec_dim, encoder.output_dim, score,
                                   pad_id=pad_id)
    else:
        decoder = ContextDecoder(vocab_size, embed_dim, dec_dim, encoder.output_dim,
                                 pad_id=pad_id)
    return place(Seq2Seq(encoder, decoder), device)


def build_scored_seq2seq(
    src_vocab_size: int, tgt_vocab_size: int, embed_dim: int, hidden_dim: int,
    make_score: Callable[[], Score], *, bidirectional: bool = True,
    decoder_hidden_dim: int | None = None, seeds: tuple[int, int, int] = (0, 1, 2),
    pad_id: int = 0, device: str | torch.device | None = None,
) -> Seq2Seq:
    """A GRU encoder and an :class:`AttentionDecoder` that scores with ``make_score()``.

    The parts are created in order, each right after ``torch.manual_seed`` of its own seed:
    encoder (``seeds[0]``), score (``seeds[1]``), decoder (``seeds[2]``). Two models that differ
    only in ``make_score`` therefore start with identical encoder and decoder weights, which is
    what makes chapter 2's comparison of scoring functions fair.

    Args:
        src_vocab_size, tgt_vocab_size: vocabulary sizes of source and target.
        embed_dim: embedding width (encoder and decoder).
        hidden_dim: GRU width of each encoder direction; the annotations have
            ``encoder.output_dim`` features (``2 * hidden_dim`` if ``bidirectional``).
        make_score: called with no argument, returns the :class:`~attention_src.scoring.Score`;
            its queries are decoder states ``(..., d_q)`` with ``d_q = decoder_hidden_dim``
            and its keys annotations ``(..., d_k)`` with ``d_k = encoder.output_dim``.
        bidirectional: whether the encoder reads the source both ways.
        decoder_hidden_dim: decoder GRU width ``d_q`` (default ``encoder.output_dim``).
        seeds: seeds of encoder, score and decoder.
        device: where the model goes, after its weights are drawn on the CPU (the same
            weights on every device).

    Returns:
        an untrained :class:`Seq2Seq`.
    """
    if isinstance(make_score, nn.Module) or not callable(make_score):
        got = (f"a {type(make_score).__name__} instance" if isinstance(make_score, nn.Module)
               else type(make_score).__name__)
        raise TypeError("make_score must be a function that returns a new Score (a Score class "
                        f"or a lambda), got {got}")
    if len(seeds) != 3:
        raise ValueError(f"seeds must hold 3 seeds (encoder, score, decoder), got {seeds!r}")
    torch.manual_seed(seeds[0])
    encoder = GRUEncoder(src_vocab_size, embed_dim, hidden_dim, bidirectional=bidirectional,
                         pad_id=pad_id)
    dec_dim = encoder.output_dim if decoder_hidden_dim is None else decoder_hidden_dim
    check_positive_int("decoder_hidden_dim", dec_dim)
    torch.manual_seed(seeds[1])
    score = make_score()
    if not isinstance(score, Score):
        raise TypeError(f"make_score() must return a Score, got {type(score).__name__}")
    torch.manual_seed(seeds[2])
    decoder = AttentionDecoder(tgt_vocab_size, embed_dim, dec_dim, encoder.output_dim, score,
                               pad_id=pad_id)
    return place(Seq2Seq(encoder, decoder), device)
