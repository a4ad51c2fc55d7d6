"""Tests of the chapter-1 helpers ``seq2seq.build_gru_seq2seq``, ``training.mean_by_length`` and
``training.mean_over_lengths``."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attention_src import data, seq2seq, training
from attention_src.scoring import AdditiveScore


def test_build_gives_matched_models_that_differ_only_in_the_decoder():
    plain = seq2seq.build_gru_seq2seq(9, 4, 6, attention=False, seed=3)
    attn = seq2seq.build_gru_seq2seq(9, 4, 6, attention=True, seed=3)
    assert isinstance(plain.decoder, seq2seq.ContextDecoder)
    assert isinstance(attn.decoder, seq2seq.AttentionDecoder)
    assert isinstance(attn.decoder.attention.score, AdditiveScore)
    assert plain.encoder.output_dim == attn.encoder.output_dim == 12  # bidirectional
    # the same seed gives the same encoder weights in both
    for (name, a), (_, b) in zip(plain.encoder.state_dict().items(),
                                 attn.encoder.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert plain.decoder.rnn.hidden_size == attn.decoder.cell.hidden_size == 6


def test_build_decoder_width_and_seed():
    m = seq2seq.build_gru_seq2seq(9, 4, 6, attention=True, decoder_hidden_dim=5, seed=0)
    assert m.decoder.cell.hidden_size == 5
    assert m.decoder.attention.score.d_q == 5 and m.decoder.attention.score.d_k == 12
    again = seq2seq.build_gru_seq2seq(9, 4, 6, attention=True, decoder_hidden_dim=5, seed=0)
    other = seq2seq.build_gru_seq2seq(9, 4, 6, attention=True, decoder_hidden_dim=5, seed=1)
    w = m.decoder.output.weight
    assert torch.equal(w, again.decoder.output.weight)
    assert not torch.equal(w, other.decoder.output.weight)



@pytest.mark.parametrize("attention", [False, True], ids=["context", "attention"])
def test_build_passes_pad_id_widths_and_the_default_seed(attention):
    """pad_id reaches both embeddings (their <pad> rows are zero), the decoder width is also
    the additive score's hidden width d_a, the encoder is bidirectional, and seed=0 is the
    default."""
    m = seq2seq.build_gru_seq2seq(9, 4, 6, attention=attention, decoder_hidden_dim=5, pad_id=3)
    for embedding in (m.encoder.embedding, m.decoder.embedding):
        assert embedding.padding_idx == 3
        assert embedding.weight.shape == (9, 4)
        assert not embedding.weight[3].any()
    assert m.encoder.rnn.bidirectional and m.encoder.rnn.hidden_size == 6
    if attention:
        score = m.decoder.attention.score
        assert score.W_q.weight.shape == (5, 5) and score.W_k.weight.shape == (5, 12)
        assert score.w_v.weight.shape == (1, 5)
    default = seq2seq.build_gru_seq2seq(9, 4, 6, attention=attention)
    seeded = seq2seq.build_gru_seq2seq(9, 4, 6, attention=attention, seed=0)
    assert default.encoder.embedding.padding_idx == 0
    for (name, a), b in zip(default.state_dict().items(), seeded.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name


def test_built_models_run_forward_and_greedy_decode():
    src = torch.tensor([[3, 4, 5], [6, 7, 0]])
    src_len = torch.tensor([3, 2])
    tgt_in = torch.tensor([[1, 5, 4, 3], [1, 7, 6, 0]])
    for attention in (False, True):
        model = seq2seq.build_gru_seq2seq(9, 4, 6, attention=attention)
        logits, weights = model(src, src_len, tgt_in)
        assert logits.shape == (2, 4, 9)
        assert (weights is None) == (not attention)
        tokens, _ = model.greedy_decode(src, src_len, steps=4, bos_id=1)
        assert tokens.shape == (2, 4)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [({"hidden_dim": 0}, ValueError, "hidden_dim must be positive, got 0"),
     ({"decoder_hidden_dim": 0}, ValueError, "decoder_hidden_dim must be positive, got 0"),
     ({"attention": 1}, TypeError, "attention must be a bool, got int"),
     ({"hidden_dim": 2.0}, TypeError, "hidden_dim must be an int, got float")],
)
def test_build_bad_arguments(kwargs, error, message):
    # match= names the check: without it, a constructor whose own check was removed still
    # passed, on a different error raised deeper down (issue 13).
    args = {"vocab_size": 9, "embed_dim": 4, "hidden_dim": 6, "attention": True} | kwargs
    with pytest.raises(error, match=f"^{message}$"):
        seq2seq.build_gru_seq2seq(**args)


def test_mean_by_length_hand_example():
    values = torch.tensor([1.0, 0.5, 0.0, 1.0, 0.25])
    lengths = torch.tensor([3, 5, 3, 5, 7])
    unique, means, counts = training.mean_by_length(values, lengths)
    assert unique.tolist() == [3, 5, 7]
    assert means.dtype == torch.float64
    assert means.tolist() == [0.5, 0.75, 0.25]
    assert counts.tolist() == [2, 2, 1]


def test_mean_by_length_counts_bools_as_zero_one():
    hits = torch.tensor([True, False, True])
    _, means, _ = training.mean_by_length(hits, torch.tensor([2, 2, 4]))
    assert means.tolist() == [0.5, 1.0]


@pytest.mark.parametrize(
    ("values", "lengths", "error", "message"),
    [
        ([1.0], torch.tensor([1]), TypeError, "^values and lengths must be torch tensors$"),
        (torch.ones(2), torch.tensor([1.0, 2.0]), TypeError,
         "^lengths must be an integer tensor, got dtype torch.float32$"),
        (torch.ones(2), torch.tensor([True, False]), TypeError,
         "^lengths must be an integer tensor, got dtype torch.bool$"),
        (torch.ones(2), torch.tensor([1, 2, 3]), ValueError, r"got \(2,\) and \(3,\)"),
        (torch.ones(2, 1), torch.tensor([1, 2]), ValueError, r"got \(2, 1\) and \(2,\)"),
        (torch.ones(0), torch.zeros(0, dtype=torch.long), ValueError,
         r"^values and lengths must be non-empty and 1-D of one shape, got \(0,\) and \(0,\)$"),
    ],
)
def test_mean_by_length_bad_input(values, lengths, error, message):
    with pytest.raises(error, match=message):
        training.mean_by_length(values, lengths)


def test_mean_over_lengths_hand_example():
    values = torch.tensor([1.0, 0.5, 0.0, 1.0, 0.25])
    lengths = torch.tensor([3, 5, 3, 5, 7])
    assert training.mean_over_lengths(values, lengths, 3, 3) == 0.5  # both ends included
    assert training.mean_over_lengths(values, lengths, 3, 5) == 0.625  # (1 + .5 + 0 + 1) / 4
    assert training.mean_over_lengths(values, lengths, 4, 7) == pytest.approx(1.75 / 3,
                                                                              rel=1e-15)
    assert training.mean_over_lengths(values, lengths, 5, 5) == 0.75
    assert training.mean_over_lengths(values, lengths, 6, 9) == 0.25
    assert training.mean_over_lengths(torch.tensor([True, False, True]),
                                      torch.tensor([2, 2, 4]), 1, 2) == 0.5


@given(st.lists(st.tuples(st.integers(1, 6), st.floats(0, 1)), min_size=1, max_size=30),
       st.integers(1, 6), st.integers(0, 5))
def test_mean_over_lengths_is_the_count_weighted_mean_by_length(pairs, lo, width):
    """The mean over a range equals mean_by_length's means weighted by their counts."""
    lengths = torch.tensor([n for n, _ in pairs])
    values = torch.tensor([v for _, v in pairs], dtype=torch.float64)
    hi = lo + width
    unique, means, counts = training.mean_by_length(values, lengths)
    inside = (unique >= lo) & (unique <= hi)
    if not bool(inside.any()):
        with pytest.raises(ValueError, match=f"^no example has a length from {lo} to {hi} "):
            training.mean_over_lengths(values, lengths, lo, hi)
        return
    expected = float((means[inside] * counts[inside]).sum() / counts[inside].sum())
    assert training.mean_over_lengths(values, lengths, lo, hi) == pytest.approx(expected,
                                                                                rel=1e-12)


@pytest.mark.parametrize(
    ("lo", "hi", "error", "message"),
    [
        (5, 4, ValueError, "^lo must be at most hi, got lo = 5 and hi = 4$"),
        (8, 9, ValueError,
         r"^no example has a length from 8 to 9 \(lengths run from 3 to 7\)$"),
        (1, 2, ValueError,
         r"^no example has a length from 1 to 2 \(lengths run from 3 to 7\)$"),
        (3.0, 5, TypeError, "^lo must be an int, got float$"),
        (3, True, TypeError, "^hi must be an int, got bool$"),
    ],
)
def test_mean_over_lengths_bad_range(lo, hi, error, message):
    values = torch.tensor([1.0, 0.5, 0.25])
    with pytest.raises(error, match=message):
        training.mean_over_lengths(values, torch.tensor([3, 5, 7]), lo, hi)


def test_mean_over_lengths_checks_like_mean_by_length():
    with pytest.raises(TypeError, match="^lengths must be an integer tensor, got dtype "
                                        "torch.float32$"):
        training.mean_over_lengths(torch.ones(2), torch.tensor([1.0, 2.0]), 1, 2)
    with pytest.raises(ValueError, match=r"got \(2,\) and \(3,\)$"):
        training.mean_over_lengths(torch.ones(2), torch.tensor([1, 2, 3]), 1, 2)


def test_context_decoder_follows_its_formulas_step_by_step():
    """s_0 = tanh(W_init C + b), s_i = GRU([emb(y_{i-1}); C], s_{i-1}),
    logits_i = W_o [s_i; C; emb(y_{i-1})]: the same C at every step (chapter 1)."""
    model = seq2seq.build_gru_seq2seq(9, 4, 6, attention=False, seed=2)
    src, src_len = torch.tensor([[3, 4, 5, 6]]), torch.tensor([4])
    tgt_in = torch.tensor([[1, 6, 5, 4]])
    dec = model.decoder
    with torch.no_grad():
        annotations, C = model.encoder(src, src_len)
        logits, _, _ = dec(tgt_in, annotations, C, src_len)
        s = torch.tanh(dec.init_state(C))[None]
        for i in range(tgt_in.shape[1]):
            emb_y = dec.embedding(tgt_in[:, i])
            _, s = dec.rnn(torch.cat([emb_y, C], dim=-1)[:, None], s)
            by_hand = dec.output(torch.cat([s[0], C, emb_y], dim=-1))
            assert torch.allclose(by_hand, logits[:, i], atol=1e-6), i


def test_short_training_run_is_the_start_of_a_longer_one():
    """Chapter 1 relies on this: the 4,000-step run begins with the 400-step run's losses."""
    vocab = data.Vocab("abcd")
    train = data.encode_pairs(data.reverse_task(50, 2, 5, 4, seed=0), vocab, vocab)
    runs = []
    for steps in (3, 6):
        model = seq2seq.build_gru_seq2seq(len(vocab), 4, 6, attention=False, seed=0)
        runs.append(training.train_seq2seq(model, train, steps, batch_size=8, seed=0))
    assert runs[0] == runs[1][:3]
