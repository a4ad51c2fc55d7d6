"""Tests of ``seq2seq.build_scored_seq2seq``, the model of chapter 2's bake-off."""

from __future__ import annotations

import pytest
import torch

import attention_src as att
from attention_src import seq2seq

SRC_V, TGT_V, EMBED, HIDDEN = 11, 7, 4, 6
C = 2 * HIDDEN  # bidirectional annotations

SCORES = {
    "additive": lambda: att.AdditiveScore(C, C, 5),
    "dot": att.DotScore,
    "scaled dot": att.ScaledDotScore,
    "bilinear": lambda: att.BilinearScore(C, C),
}


def _build(make_score, **kwargs):
    return seq2seq.build_scored_seq2seq(SRC_V, TGT_V, EMBED, HIDDEN, make_score, **kwargs)


def test_equals_the_parts_built_by_hand_after_their_seeds():
    model = _build(SCORES["additive"], seeds=(4, 5, 6))
    torch.manual_seed(4)
    encoder = seq2seq.GRUEncoder(SRC_V, EMBED, HIDDEN)
    torch.manual_seed(5)
    score = att.AdditiveScore(C, C, 5)
    torch.manual_seed(6)
    decoder = seq2seq.AttentionDecoder(TGT_V, EMBED, C, C, score)
    by_hand = seq2seq.Seq2Seq(encoder, decoder)
    got, want = model.state_dict(), by_hand.state_dict()
    assert got.keys() == want.keys()
    for name in want:
        assert torch.equal(got[name], want[name]), name


def test_models_differing_in_the_score_share_encoder_and_decoder_weights():
    models = {name: _build(make) for name, make in SCORES.items()}
    ref = models["dot"].state_dict()
    for name, model in models.items():
        assert isinstance(model.decoder, seq2seq.AttentionDecoder)
        for key, value in model.state_dict().items():
            if ".score." not in key:  # everything but the score's own parameters
                assert torch.equal(value, ref[key]), (name, key)


def test_one_way_encoder_and_decoder_width():
    model = _build(lambda: att.AdditiveScore(C, HIDDEN, 5), bidirectional=False,
                   decoder_hidden_dim=C)
    assert model.encoder.output_dim == HIDDEN
    assert model.decoder.cell.hidden_size == C
    src = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])
    src_len = torch.tensor([4, 2])
    tgt_in = torch.tensor([[1, 2, 3], [1, 4, 5]])
    logits, weights = model(src, src_len, tgt_in)
    assert logits.shape == (2, 3, TGT_V) and weights.shape == (2, 3, 4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3))
    assert (weights[1, :, 2:] == 0).all()  # padding gets no weight


def test_different_seeds_give_different_weights():
    a = _build(att.DotScore, seeds=(0, 1, 2))
    b = _build(att.DotScore, seeds=(0, 1, 3))
    assert torch.equal(a.encoder.embedding.weight, b.encoder.embedding.weight)
    assert not torch.equal(a.decoder.output.weight, b.decoder.output.weight)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="make_score must be a function .* got a DotScore instance"):
        _build(att.DotScore())
    with pytest.raises(TypeError, match="make_score must be a function .* got int$"):
        _build(3)
    with pytest.raises(TypeError, match="make_score\\(\\) must return a Score, got Linear"):
        _build(lambda: torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"seeds must hold 3 seeds .*got \(0, 1\)"):
        _build(att.DotScore, seeds=(0, 1))
    with pytest.raises(ValueError, match="decoder_hidden_dim must be positive, got 0"):
        _build(att.DotScore, decoder_hidden_dim=0)


def test_bad_make_score_messages_name_the_argument_in_full():
    with pytest.raises(TypeError, match=r"^make_score must be a function that returns a new "
                                        r"Score \(a Score class or a lambda\), got int$"):
        _build(3)
    with pytest.raises(TypeError, match=r"^make_score must be a function that returns a new "
                                        r"Score \(a Score class or a lambda\), got a DotScore "
                                        r"instance$"):
        _build(att.DotScore())
    with pytest.raises(TypeError, match=r"^make_score\(\) must return a Score, got NoneType$"):
        _build(lambda: None)
    with pytest.raises(ValueError, match=r"^seeds must hold 3 seeds \(encoder, score, "
                                         r"decoder\), got \(0, 1, 2, 3\)$"):
        _build(att.DotScore, seeds=(0, 1, 2, 3))
    with pytest.raises(TypeError, match=r"^decoder_hidden_dim must be an int, got float$"):
        _build(att.DotScore, decoder_hidden_dim=12.0)


def test_pad_id_reaches_both_embeddings():
    """A vocabulary whose <pad> is id 3: encoder and decoder both embed it as zeros."""
    model = _build(att.DotScore, pad_id=3)
    for embedding in (model.encoder.embedding, model.decoder.embedding):
        assert embedding.padding_idx == 3
        assert not embedding.weight[3].any() and embedding.weight[0].any()
