"""The training loop's Transformer ingredients (attention_src.training): the warm-up schedule,
label smoothing, Adam's betas and eps, and the encoder-decoder Transformer trained and scored
by the same loops as the recurrent models.

References: the schedule's values by hand (Vaswani et al., 2017, eq. 3); a hand-written loop
with the label-smoothed loss written out (Szegedy et al., 2016) and Adam's update formulas;
the loss and the accuracy recomputed one example at a time, each with its source cut to its
real length (no padding at all), against the batched, padded computation.
"""

from __future__ import annotations

import math

import pytest
import torch

from attention_src.data import SequencePairs, Vocab, encode_pairs, reverse_task
from attention_src.decoding import greedy_decode
from attention_src.training import (
    seq2seq_accuracy,
    teacher_forced_loss,
    train_seq2seq,
    warmup_inverse_sqrt,
)
from attention_src.transformer import Transformer

VOCAB = Vocab("abcd")


def _data(n=64, seed=0) -> SequencePairs:
    return encode_pairs(reverse_task(n, 2, 6, num_symbols=4, seed=seed), VOCAB, VOCAB)


def _transformer(seed=0, **kwargs) -> Transformer:
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Transformer(len(VOCAB), len(VOCAB), 16, 2, 1, 32, **kwargs).double()


def test_warmup_schedule_by_hand():
    rate = warmup_inverse_sqrt(16, 4)  # 16 ** -0.5 = 0.25; 4 ** -1.5 = 0.125
    assert rate(1) == 0.25 * 0.125
    assert rate(2) == 0.25 * 0.25
    assert rate(4) == 0.25 * 0.5  # the peak: both terms equal
    assert rate(16) == 0.25 * 0.25  # decaying as 1 / sqrt(t)
    assert max(range(1, 50), key=rate) == 4
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="the step must be an int >= 1"):
            rate(bad)
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup_inverse_sqrt(16, 0)


def _smoothed_loss_by_hand(logits, target, eps, pad_id=0):
    """Mean over real tokens of the cross-entropy against (1 - eps) one-hot + eps / V."""
    log_p = logits.log_softmax(dim=-1)  # (B, L, V)
    V = log_p.shape[-1]
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # (B, L)
    uniform = -log_p.sum(dim=-1) / V  # (B, L)
    per_token = (1 - eps) * nll + eps * uniform
    real = target != pad_id
    return (per_token * real).sum() / real.sum()


def test_schedule_label_smoothing_betas_and_eps_equal_a_hand_written_loop():
    data = _data(48, seed=1)
    ours, ref = _transformer(3), _transformer(3)
    schedule = warmup_inverse_sqrt(16, 2)
    betas, eps, smoothing, clip = (0.9, 0.98), 1e-9, 0.1, 1e9
    lrs: list[float] = []
    losses = train_seq2seq(ours, data, steps=3, batch_size=16, lr=2.0, clip=clip, seed=4,
                           schedule=schedule, label_smoothing=smoothing, betas=betas,
                           eps=eps, lrs=lrs)
    assert lrs == [2.0 * schedule(t) for t in (1, 2, 3)]
    generator = torch.Generator().manual_seed(4)
    params = list(ref.parameters())
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    ref.train()
    for t in range(1, 4):
        idx = torch.randint(len(data), (16,), generator=generator)
        batch = data.subset(idx)
        padding = torch.arange(batch.src.shape[1]) < batch.src_len[:, None]
        logits = ref(batch.src, batch.tgt_in, src_padding=padding)
        loss = _smoothed_loss_by_hand(logits, batch.tgt_out, smoothing)
        assert loss.item() == pytest.approx(losses[t - 1], rel=1e-10)
        grads = torch.autograd.grad(loss, params)
        lr = 2.0 * schedule(t)
        with torch.no_grad():
            for p, g, m_i, v_i in zip(params, grads, m, v, strict=True):
                m_i.mul_(betas[0]).add_((1 - betas[0]) * g)
                v_i.mul_(betas[1]).add_((1 - betas[1]) * g * g)
                m_hat = m_i / (1 - betas[0] ** t)
                v_hat = v_i / (1 - betas[1] ** t)
                p.sub_(lr * m_hat / (v_hat.sqrt() + eps))
    for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
        if name.endswith("k_proj.bias"):
            # a key bias adds q.b to every score of a row: the softmax ignores it, so its
            # gradient is 0 up to rounding (~1e-17), which Adam's g / sqrt(v) blows up to
            # +-lr steps whose signs depend on that rounding
            continue
        torch.testing.assert_close(p, q, atol=1e-10, rtol=0, msg=name)


def test_a_transformer_learns_to_reverse_and_is_scored_like_the_recurrent_models():
    data = _data(256, seed=2)
    model = _transformer(5, norm_first=True)
    before = teacher_forced_loss(model, data)
    losses = train_seq2seq(model, data, steps=150, batch_size=32, lr=3e-3, seed=1)
    after = teacher_forced_loss(model, data)
    assert after < 0.5 * before and len(losses) == 150
    token_acc, exact = seq2seq_accuracy(model, data, batch_size=50)
    assert float(token_acc.mean()) > 0.5
    assert torch.equal(exact, token_acc == 1)


def test_batched_loss_and_accuracy_equal_one_unpadded_example_at_a_time():
    """The padding mask at work: each example alone, its source cut to its real length, gives
    the loss and the tokens the padded batch gave."""
    data = _data(24, seed=3)
    model = _transformer(6)
    train_seq2seq(model, data, steps=30, batch_size=8, lr=3e-3, seed=2)
    steps = data.tgt_out.shape[1]
    token_acc, _ = seq2seq_accuracy(model, data, batch_size=7)
    total, count = 0.0, 0
    with torch.no_grad():
        for n in range(len(data)):
            length = int(data.src_len[n])
            src = data.src[n:n + 1, :length]  # no padding at all
            logits = model(src, data.tgt_in[n:n + 1])[0]  # (L_t, V)
            log_p = logits.log_softmax(-1)
            target = data.tgt_out[n]
            real = [t for t, y in enumerate(target.tolist()) if y != VOCAB.pad_id]
            total -= sum(float(log_p[t, target[t]]) for t in real)
            count += len(real)
            said = greedy_decode(model, src, VOCAB.bos_id, VOCAB.eos_id, steps)[0, 1:].tolist()
            said += [VOCAB.eos_id] * (steps - len(said))
            hits = sum(said[t] == int(target[t]) for t in real)
            assert float(token_acc[n]) == pytest.approx(hits / len(real), abs=1e-7)  # float32
    assert teacher_forced_loss(model, data, batch_size=5) == pytest.approx(total / count,
                                                                          rel=1e-10)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"schedule": 0.5}, TypeError, "schedule must be a function"),
    ({"schedule": lambda t: math.nan}, ValueError, r"schedule\(1\) gave the learning rate"),
    ({"label_smoothing": 1.0}, ValueError, "label_smoothing must be a number in"),
    ({"label_smoothing": True}, ValueError, "label_smoothing"),
    ({"lrs": ()}, TypeError, "lrs must be a list"),
    ({"on_step": 3}, TypeError, "on_step must be a function"),
])
def test_bad_training_ingredients_are_named(kwargs, error, match):
    with pytest.raises(error, match=match):
        train_seq2seq(_transformer(), _data(8), steps=1, **kwargs)


def test_on_step_sees_every_step_in_order_and_evaluating_in_it_changes_nothing():
    """A run that evaluates after every step (which puts the model in eval mode) ends with the
    weights and losses of a run that does not: training mode (dropout on) comes back."""
    data = _data(32, seed=5)
    plain, watched = _transformer(7, dropout=0.3), _transformer(7, dropout=0.3)
    seen = []

    def evaluate(step):
        seen.append(step)
        teacher_forced_loss(watched, data)  # leaves the model in eval mode
        assert not watched.training

    torch.manual_seed(11)
    expected = train_seq2seq(plain, data, steps=4, batch_size=8, seed=3)
    torch.manual_seed(11)
    got = train_seq2seq(watched, data, steps=4, batch_size=8, seed=3, on_step=evaluate)
    assert seen == [1, 2, 3, 4] and got == expected
    for (name, p), q in zip(plain.named_parameters(), watched.parameters(), strict=True):
        torch.testing.assert_close(p, q, atol=0, rtol=0, msg=name)
