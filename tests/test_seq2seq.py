"""Tests of ``attention_src.seq2seq``: the GRU encoder, both decoders and greedy decoding.

References are independent computations: PyTorch's ``nn.GRU`` run on one unpadded sequence,
the decoder run one step at a time, and teacher forcing fed with the model's own outputs.
Models run in float64 so "equal" can mean equal to 1e-10.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from attention_src import AdditiveScore, BilinearScore, DotScore, ScaledDotScore
from attention_src.seq2seq import AttentionDecoder, ContextDecoder, GRUEncoder, Seq2Seq

V_SRC, V_TGT, EMBED, HIDDEN = 11, 9, 5, 4
CONTEXT = 2 * HIDDEN  # bidirectional encoder
TOL = {"atol": 1e-10, "rtol": 1e-10}

SCORES = {
    "additive": lambda: AdditiveScore(CONTEXT, CONTEXT, 6),
    "dot": lambda: DotScore(),
    "scaled_dot": lambda: ScaledDotScore(),
    "bilinear": lambda: BilinearScore(CONTEXT, CONTEXT),
}


def _batch(seed: int = 0, lengths=(5, 2, 4, 1), vocab: int = V_SRC):
    """Random ids (B, max(lengths)) padded with 0, and the lengths."""
    g = torch.Generator().manual_seed(seed)
    src = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        src[i, :n] = torch.randint(3, vocab, (n,), generator=g)
    return src, torch.tensor(lengths)


def _targets(seed: int = 1, batch: int = 4, steps: int = 6):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(1, V_TGT, (batch, steps), generator=g)


def _encoder(bidirectional: bool = True) -> GRUEncoder:
    torch.manual_seed(0)
    return GRUEncoder(V_SRC, EMBED, HIDDEN, bidirectional=bidirectional).double()


def _attention_model(score: str = "additive") -> Seq2Seq:
    torch.manual_seed(1)
    decoder = AttentionDecoder(V_TGT, EMBED, CONTEXT, CONTEXT, SCORES[score]())
    return Seq2Seq(_encoder(), decoder).double().eval()


def _context_model() -> Seq2Seq:
    torch.manual_seed(2)
    decoder = ContextDecoder(V_TGT, EMBED, HIDDEN, CONTEXT)
    return Seq2Seq(_encoder(), decoder).double().eval()


# ------------------------------------------------------------------------------ GRUEncoder


@pytest.mark.parametrize("bidirectional", [True, False])
def test_encoder_shapes_and_zero_padding(bidirectional):
    enc = _encoder(bidirectional)
    src, src_len = _batch()
    annotations, summary = enc(src, src_len)
    dirs = 2 if bidirectional else 1
    assert enc.output_dim == dirs * HIDDEN
    assert annotations.shape == (4, 5, dirs * HIDDEN)
    assert summary.shape == (4, dirs * HIDDEN)
    padded = torch.arange(5)[None, :] >= src_len[:, None]  # (B, L_s)
    assert (annotations[padded] == 0).all()
    assert (annotations[~padded].abs().sum(-1) > 0).all()


@pytest.mark.parametrize("bidirectional", [True, False])
def test_encoder_matches_nn_gru_on_each_unpadded_sequence(bidirectional):
    enc = _encoder(bidirectional)
    src, src_len = _batch(seed=3)
    annotations, summary = enc(src, src_len)
    for i, n in enumerate(src_len.tolist()):
        x = enc.embedding(src[i : i + 1, :n])  # (1, n, e): the sequence alone, no padding
        out, h_n = enc.rnn(x)  # plain nn.GRU call
        torch.testing.assert_close(annotations[i, :n], out[0], **TOL)
        # the summary is the last *real* state of each direction: forward after the last
        # symbol, backward after the first one
        torch.testing.assert_close(summary[i], h_n[:, 0].reshape(-1), **TOL)
        fwd_last = out[0, n - 1, :HIDDEN]
        torch.testing.assert_close(summary[i, :HIDDEN], fwd_last, **TOL)
        if bidirectional:
            torch.testing.assert_close(summary[i, HIDDEN:], out[0, 0, HIDDEN:], **TOL)


def test_encoder_output_does_not_depend_on_padding_or_batch_mates():
    enc = _encoder()
    src, src_len = _batch(seed=4)
    annotations, summary = enc(src, src_len)
    longer = torch.cat([src, torch.zeros(4, 3, dtype=torch.long)], dim=1)  # more padding
    annotations2, summary2 = enc(longer, src_len)
    torch.testing.assert_close(annotations2[:, :5], annotations, **TOL)
    assert (annotations2[:, 5:] == 0).all()
    torch.testing.assert_close(summary2, summary, **TOL)


def test_encoder_bad_inputs():
    enc = _encoder()
    src, src_len = _batch()
    with pytest.raises(TypeError, match="src must be a torch.long tensor"):
        enc(src.float(), src_len)
    with pytest.raises(TypeError, match="src must be a torch.long tensor"):
        enc(src.tolist(), src_len)
    with pytest.raises(ValueError, match=r"src must have 2 dimensions, got shape \(5,\)"):
        enc(src[0], src_len)
    with pytest.raises(ValueError, match=r"src_len must be \(4,\), got \(3,\)"):
        enc(src, src_len[:3])
    with pytest.raises(TypeError, match="src_len must be an integer torch.Tensor"):
        enc(src, [5, 2, 4, 1])
    with pytest.raises(TypeError, match="src_len must be an integer torch.Tensor"):
        enc(src, src_len.float())
    with pytest.raises(ValueError, match="hidden_dim must be positive"):
        GRUEncoder(V_SRC, EMBED, 0)


# ---------------------------------------------------------------------------- the decoders


def test_context_decoder_shapes_and_state():
    model = _context_model()
    src, src_len = _batch()
    tgt_in = _targets()
    annotations, summary = model.encoder(src, src_len)
    logits, weights, state = model.decoder(tgt_in, annotations, summary, src_len)
    assert logits.shape == (4, 6, V_TGT)
    assert weights is None
    assert state.shape == (1, 4, HIDDEN)
    assert model.decoder.has_attention is False


def test_context_decoder_ignores_annotations():
    model = _context_model()
    src, src_len = _batch()
    tgt_in = _targets()
    annotations, summary = model.encoder(src, src_len)
    logits, _, _ = model.decoder(tgt_in, annotations, summary, src_len)
    noise, _, _ = model.decoder(tgt_in, torch.randn_like(annotations), summary, src_len)
    torch.testing.assert_close(noise, logits, **TOL)


@pytest.mark.parametrize("score", sorted(SCORES))
def test_attention_decoder_shapes_and_weights(score):
    model = _attention_model(score)
    src, src_len = _batch(seed=5)
    tgt_in = _targets()
    annotations, summary = model.encoder(src, src_len)
    logits, weights, state = model.decoder(tgt_in, annotations, summary, src_len)
    assert model.decoder.has_attention is True
    assert logits.shape == (4, 6, V_TGT)
    assert weights.shape == (4, 6, 5)
    assert state.shape == (4, CONTEXT)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 6, dtype=weights.dtype), **TOL)
    padded = (torch.arange(5)[None, :] >= src_len[:, None])[:, None, :].expand_as(weights)
    assert (weights[padded] == 0).all()  # exactly zero, not merely small
    assert (weights[~padded] > 0).all()
    # a one-symbol source leaves nothing to choose: all weight on position 0
    assert (weights[3, :, 0] == 1).all()


@pytest.mark.parametrize("score", sorted(SCORES))
def test_attention_decoder_stepwise_with_state_equals_full_pass(score):
    model = _attention_model(score)
    src, src_len = _batch(seed=6)
    tgt_in = _targets(seed=7)
    annotations, summary = model.encoder(src, src_len)
    full_logits, full_weights, full_state = model.decoder(tgt_in, annotations, summary, src_len)
    state, logits, weights = None, [], []
    for t in range(tgt_in.shape[1]):
        step, alpha, state = model.decoder(tgt_in[:, t : t + 1], annotations, summary, src_len,
                                           state=state)
        logits.append(step)
        weights.append(alpha)
    torch.testing.assert_close(torch.cat(logits, 1), full_logits, **TOL)
    torch.testing.assert_close(torch.cat(weights, 1), full_weights, **TOL)
    torch.testing.assert_close(state, full_state, **TOL)


def test_context_decoder_stepwise_with_state_equals_full_pass():
    model = _context_model()
    src, src_len = _batch(seed=8)
    tgt_in = _targets(seed=9)
    annotations, summary = model.encoder(src, src_len)
    full_logits, _, full_state = model.decoder(tgt_in, annotations, summary, src_len)
    state, logits = None, []
    for t in range(tgt_in.shape[1]):
        step, _, state = model.decoder(tgt_in[:, t : t + 1], annotations, summary, src_len,
                                       state=state)
        logits.append(step)
    torch.testing.assert_close(torch.cat(logits, 1), full_logits, **TOL)
    torch.testing.assert_close(state, full_state, **TOL)


def test_attention_decoder_context_is_the_weighted_sum_of_annotations():
    """Rebuild step 0 by hand: c_1 = sum_j alpha_1j h_j, s_1 = GRUCell([e(y_0); c_1], s_0)."""
    model = _attention_model("bilinear")
    dec = model.decoder
    src, src_len = _batch(seed=10)
    tgt_in = _targets(seed=11)
    annotations, summary = model.encoder(src, src_len)
    logits, weights, _ = dec(tgt_in[:, :1], annotations, summary, src_len)
    s0 = torch.tanh(dec.init_state(summary))  # (B, hidden)
    scores = torch.einsum("bh,hc,blc->bl", s0, dec.attention.score.W, annotations)
    scores = scores.masked_fill(torch.arange(5)[None] >= src_len[:, None], float("-inf"))
    alpha = torch.softmax(scores, dim=-1)
    torch.testing.assert_close(weights[:, 0], alpha, **TOL)
    context = (alpha[:, :, None] * annotations).sum(1)
    emb = dec.embedding(tgt_in[:, 0])
    s1 = dec.cell(torch.cat([emb, context], -1), s0)
    expected = dec.output(torch.cat([s1, context, emb], -1))
    torch.testing.assert_close(logits[:, 0], expected, **TOL)


@pytest.mark.parametrize("score", ["additive", "dot"])
def test_attention_model_output_does_not_depend_on_padding(score):
    model = _attention_model(score)
    src, src_len = _batch(seed=12)
    tgt_in = _targets(seed=13)
    logits, weights = model(src, src_len, tgt_in)
    for i, n in enumerate(src_len.tolist()):
        alone, w_alone = model(src[i : i + 1, :n], src_len[i : i + 1], tgt_in[i : i + 1])
        torch.testing.assert_close(alone[0], logits[i], **TOL)
        torch.testing.assert_close(w_alone[0], weights[i, :, :n], **TOL)


def test_dot_score_needs_decoder_state_as_wide_as_the_annotations():
    decoder = AttentionDecoder(V_TGT, EMBED, HIDDEN, CONTEXT, DotScore())  # 4 vs 8
    model = Seq2Seq(_encoder(), decoder).double()
    src, src_len = _batch()
    with pytest.raises(ValueError, match="one feature size"):
        model(src, src_len, _targets())


# ---------------------------------------------------------------------------------- Seq2Seq


def test_seq2seq_forward_shapes():
    src, src_len = _batch()
    tgt_in = _targets()
    logits, weights = _attention_model()(src, src_len, tgt_in)
    assert logits.shape == (4, 6, V_TGT) and weights.shape == (4, 6, 5)
    logits, weights = _context_model()(src, src_len, tgt_in)
    assert logits.shape == (4, 6, V_TGT) and weights is None


@pytest.mark.parametrize("make", [_attention_model, _context_model], ids=["attention", "context"])
def test_greedy_decode_equals_argmax_of_teacher_forcing_on_its_own_outputs(make):
    model = make()
    src, src_len = _batch(seed=14)
    tokens, weights = model.greedy_decode(src, src_len, steps=7, bos_id=1)
    assert tokens.shape == (4, 7) and tokens.dtype == torch.long
    # feed <bos> + the decoded tokens back in, teacher-forced: the argmax must reproduce them
    fed = torch.cat([torch.ones(4, 1, dtype=torch.long), tokens[:, :-1]], dim=1)
    logits, tf_weights = model(src, src_len, fed)
    assert torch.equal(logits.argmax(-1), tokens)
    if model.decoder.has_attention:
        assert weights.shape == (4, 7, 5)
        torch.testing.assert_close(weights, tf_weights, **TOL)
    else:
        assert weights is None and tf_weights is None


def test_greedy_decode_does_not_track_gradients():
    model = _attention_model()
    src, src_len = _batch()
    tokens, weights = model.greedy_decode(src, src_len, steps=3, bos_id=1)
    assert not weights.requires_grad


def test_seq2seq_bad_inputs():
    model = _attention_model()
    src, src_len = _batch()
    tgt_in = _targets()
    with pytest.raises(TypeError, match="tgt_in must be a torch.long tensor"):
        model(src, src_len, tgt_in.float())
    with pytest.raises(ValueError, match=r"tgt_in must have 2 dimensions, got shape \(6,\)"):
        model(src, src_len, tgt_in[0])
    with pytest.raises(TypeError, match="src must be a torch.long tensor"):
        model(src.int(), src_len, tgt_in)
    with pytest.raises(ValueError, match=r"src must have 2 dimensions, got shape \(4, 5, 1\)"):
        model(src[..., None], src_len, tgt_in)
    with pytest.raises(ValueError, match="steps must be positive"):
        model.greedy_decode(src, src_len, steps=0, bos_id=1)
    with pytest.raises(ValueError, match="valid_lens must lie in"):
        model.decoder(tgt_in, *model.encoder(src, src_len), src_len + 1)


def test_models_are_plain_modules():
    model = _attention_model()
    assert isinstance(model.encoder.rnn, nn.GRU)
    assert isinstance(model.decoder.cell, nn.GRUCell)


# --- bad input, boundaries and defaults, argument by argument (issue 13) ----------------------


@pytest.mark.parametrize("name", ["vocab_size", "embed_dim", "hidden_dim"])
def test_encoder_names_each_integer_argument(name):
    args = {"vocab_size": V_SRC, "embed_dim": EMBED, "hidden_dim": HIDDEN}
    with pytest.raises(ValueError, match=rf"^{name} must be positive, got 0$"):
        GRUEncoder(**(args | {name: 0}))
    with pytest.raises(TypeError, match=rf"^{name} must be an int, got float$"):
        GRUEncoder(**(args | {name: 2.0}))


def test_bad_ids_and_lengths_are_named_in_full():
    model = _attention_model()
    src, src_len = _batch()
    tgt_in = _targets()
    with pytest.raises(TypeError, match=r"^src must be a torch\.long tensor of token ids$"):
        model.encoder(src.int(), src_len)
    with pytest.raises(TypeError, match=r"^tgt_in must be a torch\.long tensor of token ids$"):
        model(src, src_len, tgt_in.tolist())
    for bad in (src_len.tolist(), src_len.double()):
        with pytest.raises(TypeError, match=r"^src_len must be an integer torch\.Tensor of "
                                            r"source lengths$"):
            model.encoder(src, bad)
    with pytest.raises(ValueError, match=r"^src_len must be \(4,\), got \(4, 1\)$"):
        model.encoder(src, src_len[:, None])
    with pytest.raises(ValueError, match=r"^steps must be positive, got 0$"):
        model.greedy_decode(src, src_len, steps=0, bos_id=1)
    with pytest.raises(TypeError, match=r"^steps must be an int, got float$"):
        model.greedy_decode(src, src_len, steps=2.0, bos_id=1)


@pytest.mark.parametrize("make", [_attention_model, _context_model], ids=["attention", "context"])
def test_greedy_decode_of_one_step_is_the_first_teacher_forced_argmax(make):
    """steps = 1, the smallest: one token per sequence, the argmax of the logits that teacher
    forcing gives after <bos> alone."""
    model = make()
    src, src_len = _batch(seed=5)
    tokens, weights = model.greedy_decode(src, src_len, steps=1, bos_id=2)
    with torch.no_grad():
        logits, _ = model(src, src_len, torch.full((4, 1), 2))
    assert tokens.shape == (4, 1) and torch.equal(tokens, logits.argmax(-1))
    assert (weights is None) == (make is _context_model)


def test_default_pad_id_is_0_and_the_encoder_is_bidirectional_by_default():
    """Every part embeds id 0 (<pad>) as the zero vector unless told otherwise, and the encoder
    reads both ways: ``output_dim = 2 * hidden_dim``."""
    torch.manual_seed(0)
    encoder = GRUEncoder(V_SRC, EMBED, HIDDEN)
    parts = [encoder, ContextDecoder(V_TGT, EMBED, HIDDEN, CONTEXT),
             AttentionDecoder(V_TGT, EMBED, CONTEXT, CONTEXT, DotScore())]
    for part in parts:
        assert part.embedding.padding_idx == 0
        assert not part.embedding.weight[0].any() and part.embedding.weight[1].any()
    assert encoder.rnn.bidirectional and encoder.output_dim == 2 * HIDDEN


def test_annotations_keep_the_padded_source_length_even_past_every_sequence():
    """``L_k`` is ``src.shape[1]``, not the longest real length: with two extra columns of
    padding the annotations and the attention weights have 7 key positions, the extra ones
    zero."""
    model = _attention_model()
    src, src_len = _batch(seed=6)  # lengths (5, 2, 4, 1)
    wide = torch.cat([src, torch.zeros(4, 2, dtype=torch.long)], dim=1)  # (4, 7)
    annotations, summary = model.encoder(wide, src_len)
    assert annotations.shape == (4, 7, CONTEXT) and (annotations[:, 5:] == 0).all()
    logits, weights = model(wide, src_len, _targets())
    assert weights.shape == (4, 6, 7) and (weights[:, :, 5:] == 0).all()
