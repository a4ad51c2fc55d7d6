"""Greedy search and beam search for the encoder-decoder (attention_src.decoding).

Independent references: every target sequence of a tiny vocabulary enumerated and scored by
the model's own teacher-forced forward pass (beam search wide enough to keep every hypothesis
must return the best of them; greedy search must take the arg-max of the full forward pass at
every step). Consistency checks (the same model on both sides, labelled as such): decoding
with the KV cache against recomputing the prefix; beam width 1 against greedy search.
Properties and bad input with named errors.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from attention_src.decoding import BeamKVCache, beam_search, greedy_decode, length_penalty
from attention_src.transformer import Transformer

BOS, EOS = 0, 1


def _model(norm_first=False, seed=0, v_tgt=9, dtype=torch.float64, **kwargs):
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = Transformer(11, v_tgt, 16, 4, 2, 24, norm_first=norm_first, **kwargs)
    return model.to(dtype).eval()


def _source(seed=0, lens=(6, 5, 3, 1)):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(2, 11, (len(lens), max(lens)), generator=g)
    return src, torch.arange(src.shape[1]) < torch.tensor(lens)[:, None]


@torch.no_grad()
def _teacher_forced_logp(model, src, pad, seq):
    """Total log-probability of emitting ``seq`` after BOS, from one full forward pass."""
    tgt = torch.tensor([[BOS] + seq[:-1]])
    logp = torch.log_softmax(model(src, tgt, pad).double(), dim=-1)[0]  # (T, V)
    return float(sum(logp[t, tok] for t, tok in enumerate(seq)))


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
def test_greedy_takes_the_argmax_of_the_full_forward_pass_at_every_step(norm_first, positional):
    model = _model(norm_first, positional=positional)
    src, pad = _source()
    out = greedy_decode(model, src, BOS, EOS, max_steps=8, src_padding=pad)
    for b in range(src.shape[0]):
        prefix = [BOS]
        while len(prefix) < out.shape[1] and (len(prefix) == 1 or prefix[-1] != EOS):
            logits = model(src[b:b + 1], torch.tensor([prefix]), pad[b:b + 1])[0, -1]
            prefix.append(int(logits.argmax()))
        assert out[b, :len(prefix)].tolist() == prefix
        assert all(t == EOS for t in out[b, len(prefix):].tolist())


@pytest.mark.parametrize("positional", ["sinusoidal", "rotary"])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-norm", "pre-norm"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_cached_and_uncached_decoding_give_the_same_tokens(norm_first, dtype, positional):
    """Consistency check: the same model, with and without KV caches. A rotary model's cache
    holds keys rotated at their own positions; the newest query is rotated at its own."""
    model = _model(norm_first, seed=3, dtype=dtype, positional=positional)
    src, pad = _source(1)
    cached = greedy_decode(model, src, BOS, EOS, 10, pad, use_cache=True)
    assert torch.equal(cached, greedy_decode(model, src, BOS, EOS, 10, pad, use_cache=False))
    tokens, scores = beam_search(model, src, BOS, EOS, 10, beam_width=3, src_padding=pad)
    tokens2, scores2 = beam_search(model, src, BOS, EOS, 10, beam_width=3, src_padding=pad,
                                   use_cache=False)
    assert tokens == tokens2
    torch.testing.assert_close(scores, scores2, atol=1e-4 if dtype == torch.float32 else 1e-9,
                               rtol=0)


def test_beam_search_without_source_padding_equals_it_with_all_tokens_real():
    model = _model(seed=7)
    src, _ = _source(4, lens=(4, 4))
    for use_cache in (True, False):
        plain = beam_search(model, src, BOS, EOS, 6, beam_width=2, use_cache=use_cache)
        full = beam_search(model, src, BOS, EOS, 6, beam_width=2, use_cache=use_cache,
                           src_padding=torch.ones_like(src, dtype=torch.bool))
        assert plain[0] == full[0]
        torch.testing.assert_close(plain[1], full[1], atol=1e-12, rtol=0)


@pytest.mark.parametrize("alpha", [0.0, 0.7])
def test_beam_of_width_one_returns_greedys_output_or_one_the_model_prefers(alpha):
    """The live hypothesis of a width-1 beam follows greedy search, and finished ones only
    win by scoring higher, so the result is greedy's output or has a higher model score (the
    score recomputed by the teacher-forced forward pass)."""
    model = _model(seed=4)
    src, pad = _source(2)
    greedy = greedy_decode(model, src, BOS, EOS, 9, pad)
    tokens, scores = beam_search(model, src, BOS, EOS, 9, beam_width=1, alpha=alpha,
                                 src_padding=pad)
    same = 0
    for b, seq in enumerate(tokens):
        ours = greedy[b, 1:].tolist()
        ours = ours[:ours.index(EOS) + 1] if EOS in ours else ours
        if seq == ours:
            same += 1
            continue
        assert EOS in ours  # greedy finished within the steps, yet beam search differs
        greedy_score = (_teacher_forced_logp(model, src[b:b + 1], pad[b:b + 1], ours)
                        / length_penalty(len(ours), alpha))
        assert float(scores[b]) > greedy_score
    assert same >= 1  # not a vacuous comparison


def test_label_smoothed_eos_cannot_cut_the_output_short():
    """A model that gives eos the second-highest probability at every step: the old rule
    (stop once the beam holds k finished hypotheses, which took live slots) returned a
    cut-off output; beam search must return the long, far more probable one."""
    V, L = 6, 5  # tokens 3, 4, 5 are words; the right output is 3 4 5 3 then eos

    class Scripted(torch.nn.Module):
        def forward(self, prefix):  # (N, n) -> log-probabilities (N, V) of the next token
            n = prefix.shape[1]
            logits = torch.full((prefix.shape[0], V), -9.0, dtype=torch.float64)
            logits[:, EOS] = -2.0 if n <= L - 1 else 5.0
            if n <= L - 1:
                logits[:, [3, 4, 5, 3][n - 1]] = 5.0
            return logits.log_softmax(-1)

    script = Scripted()
    from attention_src import decoding

    class Stepper:
        def __init__(self, *args, **kwargs):
            self.prefix = None

        def step(self, tokens):
            self.prefix = tokens if self.prefix is None else torch.cat([self.prefix, tokens], 1)
            return script(self.prefix)

        def reorder(self, index):
            self.prefix = self.prefix.index_select(0, index)

    model = _model(seed=1, v_tgt=V)
    src, pad = _source(1, lens=(3,))
    original = decoding._Stepper
    decoding._Stepper = Stepper
    try:
        tokens, _ = beam_search(model, src, BOS, EOS, 8, beam_width=2, alpha=0.6,
                                src_padding=pad)
    finally:
        decoding._Stepper = original
    assert tokens == [[3, 4, 5, 3, EOS]]


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_a_beam_that_keeps_every_hypothesis_finds_the_exhaustive_best(alpha):
    """Tiny target vocabulary (BOS, EOS and two words), three steps: all 4**3 prefixes fit in
    the beam, so beam search must return the best finished sequence among all of them, each
    scored by the model's teacher-forced forward pass."""
    model = _model(seed=5, v_tgt=4)
    src, pad = _source(3, lens=(5, 2))
    steps = 3
    tokens, scores = beam_search(model, src, BOS, EOS, steps, beam_width=4 ** steps,
                                 alpha=alpha, src_padding=pad)
    for b in range(src.shape[0]):
        candidates = []
        for n in range(1, steps + 1):
            for body in itertools.product(range(4), repeat=n - 1):
                if EOS in body:
                    continue
                seq = list(body) + [EOS]
                logp = _teacher_forced_logp(model, src[b:b + 1], pad[b:b + 1], seq)
                candidates.append((logp / length_penalty(n, alpha), seq))
        best_score, best = max(candidates)
        assert tokens[b] == best
        assert math.isclose(float(scores[b]), best_score, abs_tol=1e-9)


def test_length_penalty_by_hand():
    assert length_penalty(1, 0.6) == 1.0  # (5 + 1) / 6 = 1
    assert length_penalty(7, 1.0) == 2.0  # (5 + 7) / 6
    assert length_penalty(13, 0.5) == pytest.approx(math.sqrt(3.0))
    assert length_penalty(40, 0.0) == 1.0


def test_beam_cache_reorders_its_rows():
    cache = BeamKVCache()
    cache.reorder(torch.tensor([0]))  # nothing held yet: nothing to do
    keys = torch.arange(3.0).reshape(3, 1, 1, 1)  # row i holds i
    cache.append(keys, keys + 10)
    cache.reorder(torch.tensor([2, 2, 0]))
    k, v = cache.append(torch.zeros(3, 1, 1, 1), torch.zeros(3, 1, 1, 1))
    assert k[:, 0, :, 0].tolist() == [[2.0, 0.0], [2.0, 0.0], [0.0, 0.0]]
    assert v[:, 0, 0, 0].tolist() == [12.0, 12.0, 10.0]


def test_decoding_restores_training_mode_and_stops_when_all_have_ended():
    model = _model(seed=6).train()
    src, pad = _source()
    out = greedy_decode(model, src, BOS, EOS, 30, pad)
    assert model.training
    if out.shape[1] < 31:  # stopped early: every row has ended
        assert (out == EOS).any(dim=1).all()
    beam_search(model, src, BOS, EOS, 5, src_padding=pad)
    assert model.training


def test_bad_input_is_named():
    model = _model()
    src, pad = _source()
    with pytest.raises(TypeError, match="model must be a Transformer"):
        greedy_decode(torch.nn.Linear(2, 2), src, BOS, EOS, 5)
    with pytest.raises(ValueError, match=r"eos must be a target token id in \[0, 9\)"):
        greedy_decode(model, src, BOS, 9, 5)
    with pytest.raises(ValueError, match="bos must be"):
        beam_search(model, src, True, EOS, 5)
    with pytest.raises(ValueError, match="exceed the model's max_len = 256"):
        greedy_decode(model, src, BOS, EOS, 256)
    with pytest.raises(ValueError, match="max_steps"):
        greedy_decode(model, src, BOS, EOS, 0)
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(model, src, BOS, EOS, 5, beam_width=0)
    for alpha in (-0.1, float("nan"), "1"):
        with pytest.raises(ValueError, match="alpha must be a finite number >= 0"):
            beam_search(model, src, BOS, EOS, 5, alpha=alpha)
    with pytest.raises(TypeError, match="use_cache must be a bool"):
        greedy_decode(model, src, BOS, EOS, 5, use_cache=1)
    with pytest.raises(ValueError, match="src_padding must have the tokens' shape"):
        greedy_decode(model, src, BOS, EOS, 5, pad[:, :2])
    with pytest.raises(TypeError, match="src must hold int64"):
        beam_search(model, src.float(), BOS, EOS, 5)
